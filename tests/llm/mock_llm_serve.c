/* The scripted server as a program, for clients in other languages (the
 * official `openai` npm client drives it in openai_vs_mock.mjs):
 *   mock_llm_serve SCRIPT.json REQUESTS.jsonl
 * SCRIPT.json: [{"status", "retry_after"?, "content_type"?, "body", "cut"?,
 * "hang_s"?}, ...]. Prints the base URL on its first stdout line, serves
 * until stdin closes, then writes each request it got as one JSON line
 * {"auth", "body"} to REQUESTS.jsonl. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_llm_server.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mock_llm_serve SCRIPT.json REQUESTS.jsonl\n");
    return 2;
  }
  json_error_t je;
  json_t *sc = json_load_file(argv[1], 0, &je);
  if (!json_is_array(sc)) {
    fprintf(stderr, "mock_llm_serve: %s: %s\n", argv[1], sc ? "not a JSON array" : je.text);
    json_decref(sc);
    return 2;
  }
  size_t n = json_array_size(sc);
  mock_reply *r = calloc(n ? n : 1, sizeof *r);
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(sc, i);
    r[i].status = (int)json_integer_value(json_object_get(o, "status"));
    r[i].retry_after = json_string_value(json_object_get(o, "retry_after"));
    r[i].content_type = json_string_value(json_object_get(o, "content_type"));
    r[i].body = json_string_value(json_object_get(o, "body"));
    r[i].cut = json_is_true(json_object_get(o, "cut"));
    r[i].hang_s = json_number_value(json_object_get(o, "hang_s"));
  }
  mock_server *m = mock_start(r, n);
  if (!m) {
    fprintf(stderr, "mock_llm_serve: cannot start the server\n");
    return 1;
  }
  printf("%s\n", mock_url(m));
  fflush(stdout);
  char buf[256];
  while (fgets(buf, sizeof buf, stdin)) {
  }
  FILE *f = fopen(argv[2], "w");
  size_t k = mock_requests(m);
  for (size_t i = 0; f && i < k; i++) {
    json_t *line = json_pack("{s:s, s:s}", "auth", mock_request_auth(m, i), "body", mock_request_body(m, i));
    char *t = json_dumps(line, JSON_COMPACT);
    fprintf(f, "%s\n", t);
    free(t);
    json_decref(line);
  }
  if (f) fclose(f);
  mock_stop(m);
  free(r);
  json_decref(sc);
  return f ? 0 : 1;
}
