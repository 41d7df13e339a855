/* mi-serve over HTTP on loopback, with raw sockets:
 *  - greedy output equals mi-run's, token for token (ids → bytes through the
 *    tokenizer, logprobs to 1e-6), chat and completions;
 *  - streaming: deltas add up to the non-streamed answer, usage chunk, [DONE];
 *  - concurrent clients get exactly what each gets alone (nothing mixed);
 *  - the malformed cases answer OpenAI's error shape with the right status;
 *  - /health is 503 while loading; --api-key; a full queue answers 503 with
 *    Retry-After; a client that leaves frees its sequence; SIGTERM drains;
 *  - fields the server does not implement are refused with a 400 naming
 *    them; logit_bias bans and forces tokens (greedy too); /tokenize,
 *    /detokenize, /props, /v1/models/{id}; one log line per request;
 *  - tools: a request with tools and a tool-call history renders them
 *    through the template (its prompt is the library's rendering of the
 *    same context, arguments parsed into a mapping), streamed = plain, and
 *    the malformed tool fields answer a 400 naming the field (the output
 *    side: test_serve_tools.c; the exact Qwen3 rendering:
 *    openai_client.mjs with @huggingface/jinja). */
#include "serve_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>

#include "core/tokenizer/tokenizer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_env.h"

static char g_build[1024], g_model[1200];
static srv g_srv;            /* shared: batched decode, 4 sequences */
static srv g_srv_nb;         /* shared: --no-batch */
static mi_tokenizer *g_tok;

static void make_model(void) {
  char cmd[4096];
  if (mi_test_checkpoint(g_build, "--shape tiny --seed 5", "tiny-seed5", g_model, sizeof g_model,
                         cmd, sizeof cmd) != 0) {
    fprintf(stderr, "mi-mkmodel failed: %s\n", cmd);
    exit(1);
  }
}

static void start_or_die(srv *s, const char *const *extra) {
  const char *args[40] = {"-m", g_model, "-t", "1", "-c", "256"};
  int k = 6;
  for (int i = 0; extra && extra[i]; i++) args[k++] = extra[i];
  args[k] = NULL;
  if (srv_start(s, g_build, args) != 0) {
    fprintf(stderr, "mi-serve did not start (log: %s)\n", s->log);
    exit(1);
  }
}

static int ready_within(const srv *s, double secs) {
  for (double t0 = now_s(); now_s() - t0 < secs;) {
    http_resp r = http(s->port, "GET", "/health", NULL, NULL);
    free(r.raw);
    if (r.status == 200) return 1;
    usleep(20000);
  }
  return 0;
}

static void wait_ready(const srv *s) {
  ck_assert_msg(ready_within(s, 120), "mi-serve never became ready (log: %s)", s->log);
}

static void setup(void) {
  mi_test_build_dir(g_build, sizeof g_build, "build");
  make_model();
  start_or_die(&g_srv, (const char *[]){"--parallel", "4", NULL});
  start_or_die(&g_srv_nb, (const char *[]){"--parallel", "4", "--no-batch", NULL});
  char tp[1400], err[512];
  snprintf(tp, sizeof tp, "%s/tokenizer.json", g_model);
  g_tok = mi_tokenizer_load(tp, err, sizeof err);
  if (!g_tok) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
}

/* 0 when both shared servers exit 0 on SIGTERM (under ASan: no leak after
 * every request the suite sent them) */
static int teardown(void) {
  int a = srv_stop(&g_srv), b = srv_stop(&g_srv_nb);
  if (a != 0 || b != 0)
    fprintf(stderr, "shared mi-serve exit status %d / %d on SIGTERM (logs: %s %s)\n", a, b,
            g_srv.log, g_srv_nb.log);
  mi_tokenizer_free(g_tok);
  return a != 0 || b != 0;
}

static json_t *json_of(const http_resp *r) {
  json_error_t je;
  json_t *j = json_loadb(r->body, r->len, 0, &je);
  ck_assert_msg(j, "not JSON (%s): %.400s", je.text, r->body);
  return j;
}

/* ---- mi-run as the reference ---- */

typedef struct ref_out {
  int32_t ids[512];
  double lps[512];
  int n;
  char text[8192];
} ref_out;

static void mi_run(const char *prompt, int chat, int n_predict, ref_out *o) {
  char path[1300];
  snprintf(path, sizeof path, "%s/serve-prompt-%d.txt", g_build, (int)getpid());
  FILE *f = fopen(path, "w");
  fputs(prompt, f);
  fclose(f);
  char cmd[4096];
  /* token ids and logprobs */
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-run' -m '%s' -t 1 -f '%s' %s -n %d --temp 0 --json 2>/dev/null",
           g_build, g_model, path, chat ? "--chat" : "", n_predict);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  char line[65536];
  o->n = 0;
  while (fgets(line, sizeof line, p)) {
    json_t *j = json_loads(line, 0, NULL);
    if (j && json_object_get(j, "token_id")) {
      o->ids[o->n] = (int32_t)json_integer_value(json_object_get(j, "token_id"));
      o->lps[o->n] = json_real_value(json_object_get(j, "logprob"));
      o->n++;
    }
    json_decref(j);
  }
  ck_assert_int_eq(pclose(p), 0);
  /* visible text */
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-run' -m '%s' -t 1 -f '%s' %s -n %d --temp 0 2>/dev/null",
           g_build, g_model, path, chat ? "--chat" : "", n_predict);
  p = popen(cmd, "r");
  size_t k = fread(o->text, 1, sizeof o->text - 1, p);
  o->text[k] = 0;
  if (k && o->text[k - 1] == '\n') o->text[k - 1] = 0; /* mi-run ends with a newline */
  ck_assert_int_eq(pclose(p), 0);
  unlink(path);
}

static char *chat_body(const char *prompt, int n, const char *more) {
  json_t *j = json_pack("{s:[{s:s,s:s}],s:i,s:f}", "messages", "role", "user", "content", prompt,
                        "max_tokens", n, "temperature", 0.0);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (more) { /* splice extra fields before the closing brace */
    size_t L = strlen(s);
    char *t = malloc(L + strlen(more) + 4);
    sprintf(t, "%.*s,%s}", (int)(L - 1), s, more);
    free(s);
    s = t;
  }
  return s;
}

static const char *PROMPTS[] = {"The capital of France is", "Hello", "Write a haiku about the sea.",
                                "1, 2, 3, 4,"};

START_TEST(greedy_chat_equals_mi_run) {
  const char *prompt = PROMPTS[_i];
  ref_out ref;
  mi_run(prompt, 1, 24, &ref);
  ck_assert_int_gt(ref.n, 0);
  char *body = chat_body(prompt, 24, "\"logprobs\":true");
  http_resp r = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  free(body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  json_t *j = json_of(&r);
  json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
  const char *content = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
  ck_assert_str_eq(content, ref.text);
  json_t *lp = json_object_get(json_object_get(ch, "logprobs"), "content");
  ck_assert_int_eq((int)json_array_size(lp), ref.n);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")),
                   ref.n);
  for (int i = 0; i < ref.n; i++) {
    json_t *e = json_array_get(lp, (size_t)i), *bytes = json_object_get(e, "bytes");
    size_t nb = 0;
    const unsigned char *tb = mi_tokenizer_token_bytes(g_tok, ref.ids[i], &nb);
    ck_assert_msg(json_array_size(bytes) == nb, "token %d: %zu bytes, mi-run's id %d has %zu", i,
                  json_array_size(bytes), ref.ids[i], nb);
    for (size_t b = 0; b < nb; b++)
      ck_assert_int_eq(json_integer_value(json_array_get(bytes, b)), tb[b]);
    ck_assert_msg(fabs(json_number_value(json_object_get(e, "logprob")) - ref.lps[i]) < 1e-6,
                  "token %d logprob differs", i);
  }
  const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
  ck_assert_str_eq(fr, ref.n == 24 ? "length" : "stop");
  json_decref(j);
  free(r.raw);
}
END_TEST

START_TEST(greedy_completion_equals_mi_run) {
  const char *prompt = PROMPTS[_i];
  ref_out ref;
  mi_run(prompt, 0, 20, &ref);
  json_t *req = json_pack("{s:s,s:i,s:i,s:i}", "prompt", prompt, "max_tokens", 20, "temperature",
                          0, "logprobs", 3);
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  http_resp r = http(g_srv.port, "POST", "/v1/completions", NULL, body);
  free(body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  json_t *j = json_of(&r);
  json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(ch, "text")), ref.text);
  json_t *tl = json_object_get(json_object_get(ch, "logprobs"), "token_logprobs");
  ck_assert_int_eq((int)json_array_size(tl), ref.n);
  for (int i = 0; i < ref.n; i++)
    ck_assert(fabs(json_number_value(json_array_get(tl, (size_t)i)) - ref.lps[i]) < 1e-6);
  json_t *tops = json_object_get(json_object_get(ch, "logprobs"), "top_logprobs");
  ck_assert_int_le((int)json_object_size(json_array_get(tops, 0)), 3);
  ck_assert_int_ge((int)json_object_size(json_array_get(tops, 0)), 1);
  json_t *tm = json_object_get(j, "timings");
  ck_assert_int_eq(json_integer_value(json_object_get(tm, "predicted_n")), ref.n);
  ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
  json_decref(j);
  free(r.raw);
}
END_TEST

/* SSE body → the data payloads */
static int sse_events(const char *body, char **ev, int max) {
  int n = 0;
  const char *p = body;
  while ((p = strstr(p, "data: ")) && n < max) {
    p += 6;
    size_t k = strcspn(p, "\n");
    ev[n++] = strndup(p, k);
    p += k;
  }
  return n;
}

START_TEST(stream_equals_plain_with_usage) {
  const char *prompt = "Tell me a story.";
  char *body = chat_body(prompt, 16, NULL);
  http_resp plain = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  free(body);
  ck_assert_int_eq(plain.status, 200);
  json_t *pj = json_of(&plain);
  const char *want = json_string_value(json_object_get(
      json_object_get(json_array_get(json_object_get(pj, "choices"), 0), "message"), "content"));
  body = chat_body(prompt, 16, "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
  http_resp r = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  free(body);
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(header_of(&r, "Content-Type"), "text/event-stream");
  char *ev[512];
  int n = sse_events(r.body, ev, 512);
  ck_assert_int_ge(n, 3);
  ck_assert_str_eq(ev[n - 1], "[DONE]");
  char got[8192] = "";
  int saw_role = 0, saw_finish = 0;
  for (int i = 0; i < n - 2; i++) {
    json_t *c = json_loads(ev[i], 0, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(json_string_value(json_object_get(c, "object")), "chat.completion.chunk");
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    json_t *d = json_object_get(ch, "delta");
    if (json_object_get(d, "role")) saw_role++;
    const char *t = json_string_value(json_object_get(d, "content"));
    if (t) strcat(got, t);
    if (json_is_string(json_object_get(ch, "finish_reason"))) saw_finish++;
    json_decref(c);
  }
  ck_assert_int_eq(saw_role, 1);
  ck_assert_int_eq(saw_finish, 1);
  ck_assert_str_eq(got, want);
  json_t *u = json_loads(ev[n - 2], 0, NULL);
  ck_assert_int_eq((int)json_array_size(json_object_get(u, "choices")), 0);
  json_t *usage = json_object_get(u, "usage");
  ck_assert_int_eq(json_integer_value(json_object_get(usage, "completion_tokens")),
                   json_integer_value(json_object_get(json_object_get(pj, "usage"), "completion_tokens")));
  ck_assert_int_eq(json_integer_value(json_object_get(usage, "total_tokens")),
                   json_integer_value(json_object_get(usage, "prompt_tokens")) +
                       json_integer_value(json_object_get(usage, "completion_tokens")));
  json_decref(u);
  json_decref(pj);
  for (int i = 0; i < n; i++) free(ev[i]);
  free(plain.raw);
  free(r.raw);
}
END_TEST

START_TEST(stop_strings) {
  /* whatever the model says first, a stop string cut at its 3rd character
   * ends the answer right before it, finish_reason "stop" */
  char *body = chat_body("Hello", 12, NULL);
  http_resp r = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  free(body);
  json_t *j = json_of(&r);
  const char *full = json_string_value(json_object_get(
      json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
  ck_assert_int_gt((int)strlen(full), 6);
  char stop[8], more[64];
  memcpy(stop, full + 3, 3);
  stop[3] = 0;
  const char *at = strstr(full, stop);
  snprintf(more, sizeof more, "\"stop\":[\"%s\"]", stop);
  ck_assert_ptr_null(strchr(stop, '"'));
  body = chat_body("Hello", 12, more);
  http_resp r2 = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  free(body);
  json_t *j2 = json_of(&r2);
  json_t *ch = json_array_get(json_object_get(j2, "choices"), 0);
  const char *cut = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
  ck_assert_int_eq((int)strlen(cut), (int)(at - full));
  ck_assert_int_eq(strncmp(cut, full, (size_t)(at - full)), 0);
  ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
  json_decref(j);
  json_decref(j2);
  free(r.raw);
  free(r2.raw);
}
END_TEST

/* ---- many clients at once ---- */

typedef struct job {
  int port;
  int idx;
  char text[4096];
  int status;
} job;

static void *run_job(void *arg) {
  job *jb = arg;
  char p[64];
  snprintf(p, sizeof p, "Client %d says", jb->idx);
  json_t *req = json_pack("{s:s,s:i,s:i,s:b}", "prompt", p, "max_tokens", 24, "temperature", 0,
                          "stream", 1);
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  http_resp r = http(jb->port, "POST", "/v1/completions", NULL, body);
  free(body);
  jb->status = r.status;
  jb->text[0] = 0;
  char *ev[256];
  int n = sse_events(r.body, ev, 256);
  for (int i = 0; i < n; i++) {
    json_t *c = json_loads(ev[i], 0, NULL);
    const char *t = json_string_value(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text"));
    if (t && strlen(jb->text) + strlen(t) < sizeof jb->text) strcat(jb->text, t);
    json_decref(c);
    free(ev[i]);
  }
  if (n == 0 || !strstr(r.body, "data: [DONE]")) jb->status = -1;
  free(r.raw);
  return NULL;
}

/* 12 concurrent streams on 4 sequences: each answer equals the one the
 * same prompt gets alone (the --no-batch server: bit-identical steps).
 * MI_TEST_QUICK: 6 (still more clients than sequences: some wait). */
START_TEST(concurrent_clients_not_mixed) {
  enum { NMAX = 12 };
  const int N = getenv("MI_TEST_QUICK") ? 6 : NMAX;
  job alone[NMAX], together[NMAX];
  for (int i = 0; i < N; i++) {
    alone[i] = (job){.port = g_srv_nb.port, .idx = i};
    run_job(&alone[i]);
    ck_assert_int_eq(alone[i].status, 200);
  }
  pthread_t th[NMAX];
  for (int i = 0; i < N; i++) {
    together[i] = (job){.port = g_srv_nb.port, .idx = i};
    pthread_create(&th[i], NULL, run_job, &together[i]);
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(together[i].status, 200);
    ck_assert_msg(strcmp(alone[i].text, together[i].text) == 0, "client %d: alone '%s', together '%s'",
                  i, alone[i].text, together[i].text);
  }
  /* the batched server: the same answers (rows summed in another order
   * differ by ~1e-7 of the logit spread; these prompts have no near-ties) */
  for (int i = 0; i < N; i++) {
    together[i] = (job){.port = g_srv.port, .idx = i};
    pthread_create(&th[i], NULL, run_job, &together[i]);
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(together[i].status, 200);
    ck_assert_msg(strcmp(alone[i].text, together[i].text) == 0,
                  "batched client %d: alone '%s', together '%s'", i, alone[i].text, together[i].text);
  }
}
END_TEST

/* ---- errors ---- */

static void expect_error(int port, const char *method, const char *path, const char *extra,
                         const char *body, int status, const char *param, const char *code) {
  http_resp r = http(port, method, path, extra, body);
  ck_assert_msg(r.status == status, "%s %s %.80s: status %d, want %d: %.300s", method, path,
                body ? body : "", r.status, status, r.body);
  json_t *j = json_of(&r);
  json_t *e = json_object_get(j, "error");
  ck_assert_msg(json_is_string(json_object_get(e, "message")), "no error.message: %s", r.body);
  ck_assert(json_is_string(json_object_get(e, "type")));
  if (param) ck_assert_str_eq(json_string_value(json_object_get(e, "param")), param);
  if (code) ck_assert_str_eq(json_string_value(json_object_get(e, "code")), code);
  ck_assert_str_eq(header_of(&r, "Content-Type"), "application/json");
  json_decref(j);
  free(r.raw);
}

START_TEST(malformed_requests) {
  int p = g_srv.port;
  const char *C = "/v1/chat/completions", *P = "/v1/completions";
  expect_error(p, "POST", C, NULL, "{\"messages\":", 400, NULL, "invalid_json");
  expect_error(p, "POST", C, NULL, "[1,2]", 400, NULL, NULL);
  expect_error(p, "POST", C, NULL, "", 400, NULL, "invalid_json");
  expect_error(p, "POST", C, NULL, "{}", 400, "messages", NULL);
  expect_error(p, "POST", C, NULL, "{\"messages\":\"hi\"}", 400, "messages", "invalid_type");
  expect_error(p, "POST", C, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400,
               "messages[0].content", NULL);
  expect_error(p, "POST", C, NULL, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400,
               "messages[0].role", NULL);
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"8\"}", 400,
               "max_tokens", "invalid_type");
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400,
               "temperature", "invalid_type");
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":7}", 400,
               "temperature", "invalid_value");
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", 400,
               "stream", "invalid_type");
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", 400,
               "top_logprobs", NULL);
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", 400, "stop",
               NULL);
  expect_error(p, "POST", C, NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", 400, "n", NULL);
  expect_error(p, "POST", C, NULL,
               "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404,
               "model", "model_not_found");
  expect_error(p, "POST", P, NULL, "{\"prompt\":{}}", 400, "prompt", "invalid_type");
  expect_error(p, "POST", P, NULL, "{\"prompt\":[999999999]}", 400, "prompt", NULL);
  /* over the context (-c 256): the prompt, then prompt + max_tokens */
  char big[8192] = "{\"prompt\":\"";
  for (int i = 0; i < 400; i++) strcat(big, "cat ");
  strcat(big, "\"}");
  expect_error(p, "POST", P, NULL, big, 400, "prompt", "context_length_exceeded");
  expect_error(p, "POST", P, NULL, "{\"prompt\":\"hi\",\"max_tokens\":300}", 400, "prompt",
               "context_length_exceeded");
  /* routes and methods */
  expect_error(p, "GET", C, NULL, NULL, 405, NULL, NULL);
  expect_error(p, "GET", "/v2/nothing", NULL, NULL, 404, NULL, NULL);
  /* body over the limit (1 MiB default): refused on its Content-Length,
   * before a byte of it is read */
  {
    int fd = tcp_connect(p);
    const char *h = "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                    "Content-Length: 2000000\r\n\r\n";
    ck_assert_int_eq(send_all(fd, h, strlen(h)), 0);
    http_resp r = {0};
    http_read(fd, &r);
    ck_assert_int_eq(r.status, 413);
    json_t *j = json_of(&r);
    ck_assert(json_is_string(json_object_get(json_object_get(j, "error"), "message")));
    json_decref(j);
    free(r.raw);
  }
  /* headers over the limit (64 KiB): refused, and the server lives on */
  char *hdr = malloc(100000);
  strcpy(hdr, "X-Junk: ");
  memset(hdr + 8, 'a', 90000);
  strcpy(hdr + 90008, "\r\n");
  http_resp r = http(p, "GET", "/v1/models", hdr, NULL);
  ck_assert_msg(r.status == 431 || r.status == 413 || r.status == 400 || r.status == 0,
                "oversized headers: status %d", r.status);
  free(r.raw);
  free(hdr);
  r = http(p, "GET", "/v1/models", NULL, NULL);
  ck_assert_int_eq(r.status, 200);
  json_t *j = json_of(&r);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
                   "tiny-seed5");
  json_decref(j);
  free(r.raw);
}
END_TEST

/* ---- servers of their own ---- */

START_TEST(health_503_while_loading_then_200) {
  srv s;
  start_or_die(&s, NULL);
  http_resp r = http(s.port, "GET", "/health", NULL, NULL);
  int first = r.status;
  free(r.raw);
  r = http(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":1}");
  int compl_status = r.status;
  free(r.raw);
  wait_ready(&s);
  ck_assert_msg(first == 503, "/health right after listening: %d (want 503 while loading)", first);
  ck_assert_int_eq(compl_status, 503);
  ck_assert_int_eq(srv_stop(&s), 0);
}
END_TEST

START_TEST(api_key) {
  srv s;
  start_or_die(&s, (const char *[]){"--api-key", "s3cret", NULL});
  wait_ready(&s);
  const char *b = "{\"prompt\":\"hi\",\"max_tokens\":2}";
  expect_error(s.port, "POST", "/v1/completions", NULL, b, 401, NULL, "invalid_api_key");
  expect_error(s.port, "POST", "/v1/completions", "Authorization: Bearer s3cre\r\n", b, 401, NULL, NULL);
  expect_error(s.port, "POST", "/v1/completions", "Authorization: Bearer s3cretX\r\n", b, 401, NULL, NULL);
  expect_error(s.port, "POST", "/v1/completions", "Authorization: s3cret\r\n", b, 401, NULL, NULL);
  expect_error(s.port, "GET", "/metrics", NULL, NULL, 401, NULL, NULL);
  http_resp r = http(s.port, "POST", "/v1/completions", "Authorization: Bearer s3cret\r\n", b);
  ck_assert_int_eq(r.status, 200);
  free(r.raw);
  ck_assert_int_eq(srv_stop(&s), 0);
}
END_TEST

static long metric(int port, const char *name) {
  http_resp r = http(port, "GET", "/metrics", NULL, NULL);
  char pat[128];
  snprintf(pat, sizeof pat, "\n%s ", name);
  const char *p = strstr(r.raw, pat);
  long v = p ? atol(p + strlen(pat)) : -1;
  free(r.raw);
  return v;
}

/* One sequence, a queue of one: a long stream holds the sequence, a second
 * request waits, a third is refused with 503 + Retry-After. The first
 * client then leaves: its sequence is freed at once and the second is
 * served long before the first would have ended. */
START_TEST(queue_full_and_disconnect) {
  srv s;
  start_or_die(&s, (const char *[]){"--parallel", "1", "--queue", "1", "-c", "4096", NULL});
  wait_ready(&s);
  int fd1 = http_send(s.port, "POST", "/v1/completions", NULL,
                      "{\"prompt\":\"hi\",\"max_tokens\":4000,\"ignore_eos\":true,\"stream\":true}");
  ck_assert_int_ge(fd1, 0);
  char buf[4096];
  ck_assert_int_gt(recv(fd1, buf, sizeof buf, 0), 0);
  /* the headers come when it is queued: wait until it holds the sequence */
  for (double t0 = now_s(); metric(s.port, "mi_requests_running") != 1 && now_s() - t0 < 30;) usleep(10000);
  ck_assert_int_eq(metric(s.port, "mi_queue_depth"), 0);
  int fd2 = http_send(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"hello\",\"max_tokens\":4}");
  for (double t0 = now_s(); metric(s.port, "mi_queue_depth") != 1 && now_s() - t0 < 30;) usleep(10000);
  ck_assert_int_eq(metric(s.port, "mi_queue_depth"), 1);
  http_resp r3 = http(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":1}");
  ck_assert_int_eq(r3.status, 503);
  ck_assert_str_eq(header_of(&r3, "Retry-After"), "1");
  ck_assert_int_eq(metric(s.port, "mi_requests_rejected_busy_total"), 1);
  free(r3.raw);
  /* the queued client leaves: its place is free at once */
  close(fd2);
  for (double t0 = now_s(); metric(s.port, "mi_queue_depth") != 0 && now_s() - t0 < 5;) usleep(10000);
  ck_assert_int_eq(metric(s.port, "mi_queue_depth"), 0);
  ck_assert_int_eq(metric(s.port, "mi_requests_cancelled_total"), 1);
  fd2 = http_send(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"hello\",\"max_tokens\":4}");
  for (double t0 = now_s(); metric(s.port, "mi_queue_depth") != 1 && now_s() - t0 < 30;) usleep(10000);
  double t0 = now_s();
  close(fd1); /* the running client leaves mid-stream */
  http_resp r2 = {0};
  http_read(fd2, &r2);
  double waited = now_s() - t0;
  ck_assert_int_eq(r2.status, 200);
  free(r2.raw);
  ck_assert_int_eq(metric(s.port, "mi_requests_cancelled_total"), 2);
  long gen = metric(s.port, "mi_generation_tokens_total");
  ck_assert_msg(gen < 4000, "the cancelled stream ran on: %ld tokens generated", gen);
  fprintf(stderr, "queued request served %.2f s after the first client left (%ld tokens generated)\n",
          waited, gen);
  /* the sequence is released after its last bytes are sent: the client can
   * read them first (a sanitizer run saw 1 here once) */
  for (double t1 = now_s(); metric(s.port, "mi_requests_running") != 0 && now_s() - t1 < 5;) usleep(10000);
  ck_assert_int_eq(metric(s.port, "mi_requests_running"), 0);
  ck_assert_int_eq(srv_stop(&s), 0);
}
END_TEST

/* SIGTERM while a stream runs and another waits: the running stream ends
 * properly ([DONE]), the queued one gets an error event and [DONE], the
 * process exits 0, and nothing listens afterwards. */
START_TEST(sigterm_drains) {
  srv s;
  start_or_die(&s, (const char *[]){"--drain-timeout", "60", "--parallel", "1", "-c", "2048", NULL});
  wait_ready(&s);
  int port = s.port;
  /* the running stream is long enough to outlast the two polls below and
   * the SIGTERM, then drains to its end: 1000 tokens (about 2 s in
   * Release); MI_TEST_QUICK (the sanitizer tree, where a token costs ~13 ms
   * and the drain was most of this case's 15 s): 300, seconds still */
  const char *running = getenv("MI_TEST_QUICK")
                            ? "{\"prompt\":\"hi\",\"max_tokens\":300,\"ignore_eos\":true,\"stream\":true}"
                            : "{\"prompt\":\"hi\",\"max_tokens\":1000,\"ignore_eos\":true,\"stream\":true}";
  int fd = http_send(port, "POST", "/v1/completions", NULL, running);
  char buf[256];
  ck_assert_int_gt(recv(fd, buf, sizeof buf, MSG_PEEK), 0);
  for (double t0 = now_s(); metric(port, "mi_requests_running") != 1 && now_s() - t0 < 30;) usleep(10000);
  int fdq = http_send(port, "POST", "/v1/completions", NULL,
                      "{\"prompt\":\"hi\",\"max_tokens\":4,\"stream\":true}");
  for (double t0 = now_s(); metric(port, "mi_queue_depth") != 1 && now_s() - t0 < 30;) usleep(10000);
  kill(s.pid, SIGTERM);
  http_resp r = {0}, q = {0};
  http_read(fd, &r);
  http_read(fdq, &q);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "\"finish_reason\":\"length\""));
  ck_assert_ptr_nonnull(strstr(r.body, "data: [DONE]"));
  ck_assert_int_eq(q.status, 200); /* an event stream: the error comes as an event */
  ck_assert_msg(strstr(q.body, "data: {\"error\":") && strstr(q.body, "shutting down"), "%s", q.body);
  ck_assert_ptr_nonnull(strstr(q.body, "data: [DONE]"));
  free(r.raw);
  free(q.raw);
  ck_assert_int_eq(srv_stop(&s), 0);
  ck_assert_int_lt(tcp_connect(port), 0);
}
END_TEST

START_TEST(metrics_text) {
  http_resp r = http(g_srv.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":3}");
  free(r.raw);
  r = http(g_srv.port, "GET", "/metrics", NULL, NULL);
  ck_assert_int_eq(r.status, 200);
  const char *must[] = {"# TYPE mi_requests_total counter", "mi_requests_total{code=\"2xx\"}",
                        "# TYPE mi_queue_depth gauge", "# TYPE mi_time_to_first_token_seconds histogram",
                        "mi_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
                        "# TYPE mi_decode_tokens_per_second histogram", "mi_generation_tokens_total"};
  for (size_t i = 0; i < sizeof must / sizeof *must; i++)
    ck_assert_msg(strstr(r.body, must[i]), "no '%s' in /metrics", must[i]);
  ck_assert_int_ge(metric(g_srv.port, "mi_generation_tokens_total"), 3);
  free(r.raw);
}
END_TEST

/* ---- refused fields, logit_bias, tokenizer endpoints, /props, log ---- */

START_TEST(unsupported_fields_refused) {
  int p = g_srv.port;
  const char *C = "/v1/chat/completions", *P = "/v1/completions";
  static const struct {
    const char *more, *param;
  } chat[] = {
      {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}",
       "response_format.json_schema.schema"},
      {"\"response_format\":{\"type\":\"yaml\"}", "response_format"},
      {"\"response_format\":\"json\"", "response_format"},
      {"\"grammar\":\"root ::= \\\"a\\\"\"", "grammar"},
      {"\"json_schema\":{}", "json_schema"},
      {"\"guided_regex\":\"a+\"", "guided_regex"},
      {"\"tool_choice\":\"required\"", "tool_choice"},
      {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", "tool_choice"},
      {"\"parallel_tool_calls\":1", "parallel_tool_calls"},
      {"\"functions\":[{\"name\":\"f\"}]", "functions"},
      {"\"function_call\":{\"name\":\"f\"}", "function_call"},
      {"\"n\":17", "n"}, /* over SERVE_MAX_N */
      {"\"echo\":true", "echo"},
      {"\"prediction\":{\"type\":\"content\",\"content\":\"x\"}", "prediction"},
      {"\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}", "audio"},
      {"\"modalities\":[\"text\",\"audio\"]", "modalities"},
      {"\"reasoning_effort\":\"low\"", "reasoning_effort"},
      {"\"presence_penalty\":0.5", "presence_penalty"},
      {"\"typical_p\":0.5", "typical_p"},
      {"\"mirostat\":2", "mirostat"},
      {"\"repetition_penalty\":1.2", "repetition_penalty"},
      {"\"min_tokens\":4", "min_tokens"},
      {"\"logit_bias\":{\"abc\":1}", "logit_bias"},
      {"\"logit_bias\":{\"5\":101}", "logit_bias"},
      {"\"logit_bias\":{\"5\":\"1\"}", "logit_bias"},
      {"\"logit_bias\":{\"-5\":1}", "logit_bias"},
      {"\"logit_bias\":{\"99999999\":1}", "logit_bias"}, /* over the vocabulary */
      {"\"logit_bias\":[[5,1]]", "logit_bias"},
  };
  for (size_t i = 0; i < sizeof chat / sizeof *chat; i++) {
    char *body = chat_body("x", 2, chat[i].more);
    expect_error(p, "POST", C, NULL, body, 400, chat[i].param, NULL);
    free(body);
  }
  expect_error(p, "POST", P, NULL, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix", NULL);
  expect_error(p, "POST", P, NULL, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", NULL);
  expect_error(p, "POST", P, NULL, "{\"prompt\":\"x\",\"grammar\":\"g\"}", 400, "grammar", NULL);
  /* over SERVE_MAX_LOGIT_BIAS entries */
  char *big = malloc(64 * 1100);
  strcpy(big, "{\"prompt\":\"x\",\"logit_bias\":{");
  for (int i = 0; i < 1100; i++) sprintf(big + strlen(big), "%s\"%d\":1", i ? "," : "", i);
  strcat(big, "}}");
  expect_error(p, "POST", P, NULL, big, 400, "logit_bias", NULL);
  free(big);
  /* harmless fields, "off" values and unknown fields pass */
  char *body = chat_body("x", 2,
                         "\"user\":\"u1\",\"metadata\":{\"k\":\"v\"},\"store\":false,"
                         "\"service_tier\":\"auto\",\"response_format\":{\"type\":\"text\"},"
                         "\"tool_choice\":\"none\",\"tools\":[],\"typical_p\":1,\"mirostat\":0,"
                         "\"modalities\":[\"text\"],\"logit_bias\":{},\"some_future_field\":7");
  http_resp r = http(p, "POST", C, NULL, body);
  free(body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  free(r.raw);
}
END_TEST

/* The first generated token's raw bytes (chat, logprobs; greedy unless
 * more sets a temperature). */
static void first_token_bytes(const char *more, unsigned char *b, size_t *nb) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"messages\":[{\"role\":\"user\",\"content\":\"The capital of France is\"}],"
           "\"max_tokens\":2,\"logprobs\":true%s%s%s}",
           more && strstr(more, "temperature") ? "" : ",\"temperature\":0", more ? "," : "",
           more ? more : "");
  http_resp r = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  json_t *j = json_of(&r);
  json_t *e = json_array_get(json_object_get(json_object_get(
      json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content"), 0);
  json_t *bytes = json_object_get(e, "bytes");
  *nb = json_array_size(bytes);
  ck_assert_uint_lt(*nb, 64);
  for (size_t i = 0; i < *nb; i++) b[i] = (unsigned char)json_integer_value(json_array_get(bytes, i));
  json_decref(j);
  free(r.raw);
}

static int same_token(const unsigned char *b, size_t nb, int32_t id) {
  size_t n = 0;
  const unsigned char *tb = mi_tokenizer_token_bytes(g_tok, id, &n);
  return tb && n == nb && memcmp(tb, b, n) == 0;
}

/* greedy: -100 on the greedy first token T makes another come first; +100
 * on some other token U makes U come first */
START_TEST(logit_bias_bans_and_forces) {
  ref_out ref;
  mi_run("The capital of France is", 1, 1, &ref);
  ck_assert_int_eq(ref.n, 1);
  int32_t T = ref.ids[0], U = mi_tokenizer_token_id(g_tok, "Paris");
  ck_assert_int_ge(U, 0);
  ck_assert_int_ne(U, T);
  unsigned char b[64];
  size_t nb;
  first_token_bytes(NULL, b, &nb);
  ck_assert_msg(same_token(b, nb, T), "the server's greedy first token is not mi-run's %d", T);
  char m[128];
  snprintf(m, sizeof m, "\"logit_bias\":{\"%d\":-100}", T);
  first_token_bytes(m, b, &nb);
  ck_assert_msg(!same_token(b, nb, T), "logit_bias -100 on %d: it still came first", T);
  snprintf(m, sizeof m, "\"logit_bias\":{\"%d\":100}", U);
  first_token_bytes(m, b, &nb);
  ck_assert_msg(same_token(b, nb, U), "logit_bias 100 on %d: it did not come first", U);
  /* sampled (temperature 1) too: a forced token wins every draw */
  snprintf(m, sizeof m, "\"logit_bias\":{\"%d\":100},\"temperature\":1,\"seed\":7", U);
  first_token_bytes(m, b, &nb);
  ck_assert(same_token(b, nb, U));
}
END_TEST

#define TOOLS_JSON                                                                            \
  "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather "      \
  "now\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"     \
  "\"required\":[\"city\"]}}}]"
#define TOOL_HISTORY                                                                          \
  "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"                                     \
  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"       \
  "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "         \
  "\\\"Paris\\\"}\"}}]},"                                                                       \
  "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"name\":\"get_weather\",\"content\":\"18 C, "    \
  "sunny\"},{\"role\":\"user\",\"content\":\"Thanks! And tomorrow?\"}]"

static long prompt_tokens_of(const char *body, int status) {
  http_resp r = http(g_srv.port, "POST", "/v1/chat/completions", NULL, body);
  ck_assert_msg(r.status == status, "status %d: %.400s", r.status, r.body);
  long n = -1;
  if (status == 200) {
    json_t *j = json_of(&r);
    n = (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens"));
    json_t *m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ck_assert(json_is_string(json_object_get(m, "content"))); /* the random model calls nothing */
    json_decref(j);
  }
  free(r.raw);
  return n;
}

START_TEST(tools_request_side) {
  int p = g_srv.port;
  const char *C = "/v1/chat/completions";
  char body[4096];
  snprintf(body, sizeof body, "{\"messages\":%s,\"tools\":%s,\"max_tokens\":4,\"temperature\":0}",
           TOOL_HISTORY, TOOLS_JSON);
  long with_tools = prompt_tokens_of(body, 200);
  /* the prompt is the template's rendering of the same context, the call's
   * arguments a mapping (Qwen3 writes it with tojson) */
  json_t *ctx = json_loads("{\"messages\":" TOOL_HISTORY ",\"tools\":" TOOLS_JSON
                           ",\"add_generation_prompt\":true,\"enable_thinking\":true}",
                           0, NULL);
  ck_assert_ptr_nonnull(ctx);
  json_t *am = json_array_get(json_object_get(ctx, "messages"), 1);
  json_object_set_new(am, "content", json_string(""));
  json_t *fn = json_object_get(json_array_get(json_object_get(am, "tool_calls"), 0), "function");
  json_object_set_new(fn, "arguments", json_pack("{s:s}", "city", "Paris"));
  char err[512], cp[1300];
  snprintf(cp, sizeof cp, "%s/tokenizer_config.json", g_model);
  if (!mi_tokenizer_chat_template(g_tok))
    ck_assert_msg(mi_tokenizer_load_config(g_tok, cp, err, sizeof err) == 0, "%s", err);
  char *text = mi_tokenizer_chat_render_ctx(g_tok, ctx, err, sizeof err);
  ck_assert_msg(text, "%s", err);
  ck_assert_msg(strstr(text, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                             "\"Paris\"}}\n</tool_call>") &&
                    strstr(text, "<tool_response>\n18 C, sunny\n</tool_response>") &&
                    strstr(text, "\"name\": \"get_weather\""),
                "%s", text);
  int32_t *ids = NULL;
  size_t n = 0;
  ck_assert_int_eq(mi_tokenizer_encode(g_tok, text, strlen(text), 1, &ids, &n), 0);
  ck_assert_int_eq(with_tools, (long)n);
  free(ids);
  free(text);
  json_decref(ctx);
  /* tool_choice none: the tools are still rendered (vLLM's default) */
  snprintf(body, sizeof body,
           "{\"messages\":%s,\"tools\":%s,\"tool_choice\":\"none\",\"max_tokens\":4,"
           "\"parallel_tool_calls\":false}",
           TOOL_HISTORY, TOOLS_JSON);
  ck_assert_int_eq(prompt_tokens_of(body, 200), with_tools);
  snprintf(body, sizeof body, "{\"messages\":%s,\"max_tokens\":4}", TOOL_HISTORY);
  ck_assert_int_lt(prompt_tokens_of(body, 200), with_tools);

  /* streamed with tools = plain (nothing held back for good) */
  snprintf(body, sizeof body,
           "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":%s,\"max_tokens\":12,"
           "\"temperature\":0}",
           TOOLS_JSON);
  http_resp plain = http(p, "POST", C, NULL, body);
  ck_assert_int_eq(plain.status, 200);
  json_t *pj = json_of(&plain);
  json_t *pc = json_array_get(json_object_get(pj, "choices"), 0);
  snprintf(body + strlen(body) - 1, sizeof body - strlen(body) + 1, ",\"stream\":true}");
  http_resp r = http(p, "POST", C, NULL, body);
  ck_assert_int_eq(r.status, 200);
  char *ev[256];
  int ne = sse_events(r.body, ev, 256);
  ck_assert_int_ge(ne, 2);
  char got[4096] = "";
  const char *finish = NULL;
  json_t *last = NULL;
  for (int i = 0; i < ne - 1; i++) {
    json_t *c = json_loads(ev[i], 0, NULL);
    ck_assert_ptr_nonnull(c);
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    const char *t = json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
    if (t) strcat(got, t);
    if (json_is_string(json_object_get(ch, "finish_reason"))) {
      json_decref(last);
      last = json_incref(c);
      finish = json_string_value(json_object_get(ch, "finish_reason"));
    }
    json_decref(c);
  }
  ck_assert_str_eq(got, json_string_value(json_object_get(json_object_get(pc, "message"), "content")));
  ck_assert_str_eq(finish, json_string_value(json_object_get(pc, "finish_reason")));
  json_decref(last);
  for (int i = 0; i < ne; i++) free(ev[i]);
  json_decref(pj);
  free(plain.raw);
  free(r.raw);

  /* the malformed tool fields: a 400 naming the field */
  static const struct {
    const char *more, *param;
  } bad[] = {
      {"\"tools\":{\"type\":\"function\"}", "tools"},
      {"\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"x\"}}]",
       "tools[0].function.name"},
      {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":5}}]",
       "tools[0].function.parameters"},
      {"\"tools\":[5]", "tools[0]"},
      {"\"tool_choice\":\"required\"", "tool_choice"},
      {"\"tool_choice\":\"sometimes\"", "tool_choice"},
      {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", "tool_choice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *b = chat_body("x", 2, bad[i].more);
    expect_error(p, "POST", C, NULL, b, 400, bad[i].param, NULL);
    free(b);
  }
  static const struct {
    const char *msgs, *param;
  } badm[] = {
      {"[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
       "\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}]",
       "messages[0].tool_calls[0].function.arguments"},
      {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
       "\"[1]\"}}]}]",
       "messages[0].tool_calls[0].function.arguments"},
      {"[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]",
       "messages[0].tool_calls[0].function.name"},
      {"[{\"role\":\"assistant\",\"tool_calls\":{}}]", "messages[0].tool_calls"},
      {"[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{}]}]", "messages[0].tool_calls"},
      {"[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"42\"}]",
       "messages[1].tool_call_id"},
      {"[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"tool_call_id\":7,"
       "\"content\":\"42\"}]",
       "messages[1].tool_call_id"},
  };
  for (size_t i = 0; i < sizeof badm / sizeof *badm; i++) {
    snprintf(body, sizeof body, "{\"messages\":%s,\"max_tokens\":2}", badm[i].msgs);
    expect_error(p, "POST", C, NULL, body, 400, badm[i].param, NULL);
  }
  /* over the bound: 129 tools */
  char *many = malloc(129 * 64 + 128);
  strcpy(many, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[");
  for (int i = 0; i < 129; i++)
    sprintf(many + strlen(many), "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}",
            i ? "," : "", i);
  strcat(many, "]}");
  expect_error(p, "POST", C, NULL, many, 400, "tools", NULL);
  free(many);
  /* /v1/completions has no template to render tools with */
  expect_error(p, "POST", "/v1/completions", NULL,
               "{\"prompt\":\"x\",\"tools\":" TOOLS_JSON "}", 400, "tools", NULL);
}
END_TEST

START_TEST(tokenize_detokenize) {
  int p = g_srv.port;
  const char *text = "Hello, w\xc3\xb6rld! <|im_start|>user 1+1=2 \xf0\x9f\x99\x82";
  json_t *req = json_pack("{s:s}", "content", text);
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  http_resp r = http(p, "POST", "/tokenize", NULL, body);
  free(body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  json_t *j = json_of(&r);
  json_t *toks = json_object_get(j, "tokens");
  int32_t *want = NULL;
  size_t n = 0;
  ck_assert_int_eq(mi_tokenizer_encode(g_tok, text, strlen(text), 1, &want, &n), 0);
  ck_assert_int_eq((int)json_array_size(toks), (int)n);
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(json_integer_value(json_array_get(toks, i)), want[i]);
  int special = 0; /* special tokens are parsed, as in a prompt */
  for (size_t i = 0; i < n; i++) special |= want[i] == mi_tokenizer_token_id(g_tok, "<|im_start|>");
  ck_assert(special);
  free(want);
  /* round trip */
  json_t *dreq = json_pack("{s:O}", "tokens", toks);
  body = json_dumps(dreq, JSON_COMPACT);
  json_decref(dreq);
  json_decref(j);
  free(r.raw);
  r = http(p, "POST", "/detokenize", NULL, body);
  free(body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  j = json_of(&r);
  ck_assert_str_eq(json_string_value(json_object_get(j, "content")), text);
  json_decref(j);
  free(r.raw);
  /* "prompt" as another name for the text; with_pieces */
  r = http(p, "POST", "/tokenize", NULL, "{\"prompt\":\"Hi\",\"with_pieces\":true}");
  ck_assert_int_eq(r.status, 200);
  j = json_of(&r);
  json_t *t0 = json_array_get(json_object_get(j, "tokens"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(t0, "piece")), "Hi");
  json_decref(j);
  free(r.raw);
  /* hostile input */
  expect_error(p, "POST", "/tokenize", NULL, "{\"content\":5}", 400, "content", NULL);
  expect_error(p, "POST", "/tokenize", NULL, "{}", 400, "prompt", NULL);
  expect_error(p, "POST", "/tokenize", NULL, "{\"content\":\"x\",\"add_special\":1}", 400,
               "add_special", NULL);
  expect_error(p, "POST", "/tokenize", NULL, "[", 400, NULL, "invalid_json");
  expect_error(p, "POST", "/detokenize", NULL, "{\"tokens\":[1,-1]}", 400, "tokens", NULL);
  expect_error(p, "POST", "/detokenize", NULL, "{\"tokens\":[99999999]}", 400, "tokens", NULL);
  expect_error(p, "POST", "/detokenize", NULL, "{\"tokens\":[\"a\"]}", 400, "tokens", NULL);
  expect_error(p, "POST", "/detokenize", NULL, "{\"tokens\":5}", 400, "tokens", NULL);
  expect_error(p, "GET", "/tokenize", NULL, NULL, 405, NULL, NULL);
  /* deep JSON: refused by the parser, and the server lives on */
  char *deep = malloc(40000);
  strcpy(deep, "{\"tokens\":");
  memset(deep + 10, '[', 10000);
  deep[10010] = 0;
  expect_error(p, "POST", "/detokenize", NULL, deep, 400, NULL, "invalid_json");
  free(deep);
}
END_TEST

START_TEST(props_and_model_by_id) {
  int p = g_srv.port;
  http_resp r = http(p, "GET", "/props", NULL, NULL);
  ck_assert_int_eq(r.status, 200);
  json_t *j = json_of(&r);
  ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "tiny-seed5");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "n_ctx")), 256);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "total_slots")), 4);
  ck_assert(json_is_true(json_object_get(j, "has_chat_template")));
  ck_assert(json_is_true(json_object_get(j, "batched_decode")));
  ck_assert_int_gt(json_integer_value(json_object_get(j, "n_vocab")), 0);
  ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "build_info")), "MetaInfer"));
  ck_assert(json_is_true(json_object_get(j, "structured_output")));
  ck_assert_int_eq(json_integer_value(json_object_get(j, "max_n")), 16);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "prefill_chunk")), 256);
  json_t *pc = json_object_get(j, "prefix_cache"); /* the qwen3 plugin has ABI 1.5's state copies */
  ck_assert_int_eq(json_integer_value(json_object_get(pc, "block_tokens")), 32);
  ck_assert_int_gt(json_integer_value(json_object_get(pc, "max_bytes")), 0);
  json_decref(j);
  free(r.raw);
  r = http(g_srv_nb.port, "GET", "/props", NULL, NULL);
  j = json_of(&r);
  ck_assert(json_is_false(json_object_get(j, "batched_decode")));
  json_decref(j);
  free(r.raw);
  r = http(p, "GET", "/v1/models/tiny-seed5", NULL, NULL);
  ck_assert_int_eq(r.status, 200);
  j = json_of(&r);
  ck_assert_str_eq(json_string_value(json_object_get(j, "id")), "tiny-seed5");
  ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "model");
  json_decref(j);
  free(r.raw);
  expect_error(p, "GET", "/v1/models/gpt-4o", NULL, NULL, 404, "model", "model_not_found");
  expect_error(p, "POST", "/props", NULL, "{}", 405, NULL, NULL);
}
END_TEST

/* One line per request on stderr with method, path, status, token counts
 * and wall time; never the prompt. */
START_TEST(request_log_line) {
  const char *secret = "zebra-7f3a-secret";
  char body[256];
  snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":3,\"temperature\":0,"
           "\"ignore_eos\":true}", secret);
  http_resp r = http(g_srv_nb.port, "POST", "/v1/completions", NULL, body);
  ck_assert_int_eq(r.status, 200);
  json_t *j = json_of(&r);
  long np = (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens"));
  json_decref(j);
  free(r.raw);
  char want[128];
  snprintf(want, sizeof want, "mi-serve: POST /v1/completions 200 prompt=%ld completion=3 ", np);
  int found = 0, leaked = 0;
  /* written when the connection completes, just after the reply */
  for (double t0 = now_s(); !found && now_s() - t0 < 5; usleep(10000)) {
    FILE *f = fopen(g_srv_nb.log, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
      if (strstr(line, secret)) leaked = 1;
      const char *at = strstr(line, want);
      if (at && strstr(at, " ms\n")) found = 1;
    }
    if (f) fclose(f);
  }
  ck_assert_msg(found, "no line '%s... ms' in %s", want, g_srv_nb.log);
  ck_assert_msg(!leaked, "the prompt text is in the log %s", g_srv_nb.log);
}
END_TEST

/* The model folder's own template, whatever family wrote it: rendered by
 * the Jinja engine (core/template), its raise_exception a 400 */
START_TEST(other_family_chat_template) {
  const char *src = getenv("MI_SOURCE_DIR");
  char dir[1400], tpl[1400], cmd[4200];
  snprintf(dir, sizeof dir, "%s/models/tiny-seed5-gemma-%d", g_build, (int)getpid());
  snprintf(tpl, sizeof tpl, "%s/tests/template/templates/gemma-2-2b-it.jinja", src ? src : ".");
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, g_model, dir);
  ck_assert_int_eq(system(cmd), 0);
  FILE *f = fopen(tpl, "r");
  ck_assert_ptr_nonnull(f);
  char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char tc[1500];
  snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
  json_t *c = json_load_file(tc, 0, NULL);
  ck_assert_ptr_nonnull(c);
  json_object_set_new(c, "chat_template", json_string(text));
  json_object_del(c, "bos_token"); /* Gemma's template starts with {{ bos_token }}: undefined renders nothing */
  ck_assert_int_eq(json_dump_file(c, tc, 0), 0);
  json_decref(c);
  srv s;
  const char *args[] = {"-m", dir, "-t", "1", "-c", "256", NULL};
  ck_assert_int_eq(srv_start(&s, g_build, args), 0);
  wait_ready(&s);
  char *body = chat_body("Hello", 2, NULL);
  http_resp r = http(s.port, "POST", "/v1/chat/completions", NULL, body);
  free(body);
  ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
  json_t *j = json_of(&r);
  /* Gemma's turn format, written out here, tokenized as the server does */
  const char *want = "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n";
  int32_t *ids = NULL;
  size_t nid = 0;
  ck_assert_int_eq(mi_tokenizer_encode(g_tok, want, strlen(want), 1, &ids, &nid), 0);
  free(ids);
  ck_assert_uint_gt(nid, 8);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), (json_int_t)nid);
  json_decref(j);
  free(r.raw);
  /* the template refuses a system turn itself */
  r = http(s.port, "POST", "/v1/chat/completions", NULL,
           "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}");
  ck_assert_msg(r.status == 400 && strstr(r.body, "System role not supported") && strstr(r.body, "\"messages\""),
                "status %d: %s", r.status, r.body);
  free(r.raw);
  ck_assert_int_eq(srv_stop(&s), 0);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  setup();
  Suite *s = suite_create("serve");
  TCase *tc = tcase_create("http");
  tcase_set_timeout(tc, 600);
  /* MI_TEST_QUICK (the sanitizer tree, tests/CMakeLists.txt): each of the
   * four prompts once, two through chat and two through completions (each
   * case is two mi-run processes and one request; the paths are the same
   * for every prompt); the Release run compares all eight. 6 concurrent
   * clients on the 4 sequences, not 12; sigterm_drains' running stream:
   * 300 tokens, not 1000 (the same drain) */
  const int quick = getenv("MI_TEST_QUICK") != NULL;
  if (quick)
    fprintf(stderr, "test_serve: MI_TEST_QUICK: each prompt once (2 through chat, 2 through completions), "
                    "6 concurrent clients, sigterm_drains' stream 300 tokens: all eight, 12 and 1000 in the Release run\n");
  tcase_add_loop_test(tc, greedy_chat_equals_mi_run, 0, quick ? 2 : 4);
  tcase_add_loop_test(tc, greedy_completion_equals_mi_run, quick ? 2 : 0, 4);
  mi_check_add(tc, MI_CHECK_TESTS(stream_equals_plain_with_usage, stop_strings,
                                  concurrent_clients_not_mixed, malformed_requests, metrics_text,
                                  unsupported_fields_refused, logit_bias_bans_and_forces,
                                  tools_request_side, tokenize_detokenize, props_and_model_by_id,
                                  request_log_line, other_family_chat_template,
                                  health_503_while_loading_then_200, api_key,
                                  queue_full_and_disconnect, sigterm_drains));
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* the shared servers must be ready before the first test */
  if (!ready_within(&g_srv, 120) || !ready_within(&g_srv_nb, 120)) {
    fprintf(stderr, "mi-serve never became ready (logs: %s %s)\n", g_srv.log, g_srv_nb.log);
    teardown();
    return 1;
  }
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  int bad = teardown();
  return nf || bad ? 1 : 0;
}
