/* Fuzzes mi-serve's tool-call parsing of generated text (core/serve/tools.c):
 * both formats, plain and streamed in pieces of the input's own choosing.
 * Invariants: no crash, no leak; a parse that finds calls returns at most
 * SERVE_MAX_TOOL_CALLS, each with a name and arguments that are a JSON
 * object's text; the streamed run finds calls exactly when the plain one
 * does, and the same ones. */
#include "fuzz_util.h"

#include "core/serve/tools.h"

static void check_calls(const json_t *calls, int n) {
  FUZZ_CHECK(n >= 0 && n <= SERVE_MAX_TOOL_CALLS && (size_t)n == json_array_size(calls), "%d calls", n);
  size_t i;
  json_t *c;
  json_array_foreach(calls, i, c) {
    json_t *f = json_object_get(c, "function");
    FUZZ_CHECK(json_string_length(json_object_get(f, "name")) > 0, "call %zu without a name", i);
    json_t *a = json_loads(json_string_value(json_object_get(f, "arguments")) ?: "", 0, NULL);
    FUZZ_CHECK(json_is_object(a), "call %zu: arguments are not a JSON object's text", i);
    json_decref(a);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const serve_tools_fmt fmt = data[0] & 1 ? SERVE_TOOLS_BARE_JSON : SERVE_TOOLS_TAGGED;
  const int parallel = !(data[0] & 2);
  const size_t piece = 1 + data[1] % 13; /* the stream's piece size */
  const char *text = (const char *)data + 2;
  const size_t len = size - 2;
  json_t *calls = NULL, *content = NULL;
  int n = serve_tools_parse(fmt, text, len, parallel, &calls, &content);
  if (n > 0) check_calls(calls, n);
  /* streamed: the same calls */
  serve_tool_stream st;
  serve_tool_stream_init(&st, fmt, parallel);
  for (size_t off = 0; off < len; off += piece) {
    char *out = NULL;
    size_t ol = 0;
    FUZZ_CHECK(serve_tool_stream_feed(&st, text + off, len - off < piece ? len - off : piece, &out, &ol) == 0, "feed");
    free(out);
  }
  int called = 0;
  json_t *deltas = serve_tool_stream_end(&st, &called);
  FUZZ_CHECK(deltas != NULL, "stream end");
  FUZZ_CHECK(called == (n > 0), "streamed %s calls, plain found %d", called ? "found" : "found no", n);
  serve_tool_stream_free(&st);
  json_decref(deltas);
  json_decref(calls);
  json_decref(content);
  return 0;
}
