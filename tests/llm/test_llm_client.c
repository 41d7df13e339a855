/* The OpenAI-compatible client against a scripted server on loopback: each
 * answer a real endpoint can give (an answer, a stream, tool calls, 429 with
 * Retry-After, 500, 400, insufficient_quota, a cut stream, a hung
 * connection, a huge answer, malformed JSON, nobody listening) ends as the
 * retry policy says, in bounded time, with one line; record then replay
 * gives the same answer with no server; the API key never leaves the
 * Authorization header. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/llm/client.h"
#include "mock_llm_server.h"
#include "tests/util/check_main.h"

#define KEY "sk-test-SECRET-4242"

static const char *ANSWER =
    "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
    "\"assistant\",\"content\":\"Hello there\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":"
    "12,\"completion_tokens\":3,\"total_tokens\":15}}";

static const char *STREAM =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
    ": a comment line\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\n"
    "data: [DONE]\n\n";

static const char *TOOL_STREAM =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
    "\"function\",\"function\":{\"name\":\"write_engine\",\"arguments\":\"\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
    "\"{\\\"path\\\":\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
    "\"\\\"engine.c\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
    "data: [DONE]\n\n";

static const mi_llm_message HELLO[] = {{"system", "You write C.", NULL, NULL}, {"user", "Say hello", NULL, NULL}};

static mi_llm_request req(int stream) {
  return (mi_llm_request){.messages = HELLO, .n_messages = 2, .temperature = 0, .seed = 7,
                          .max_tokens = 64, .stream = stream};
}

static mi_llm_config cfg_for(const mock_server *m) {
  return (mi_llm_config){.base_url = mock_url(m), .model = "test-model", .api_key = KEY,
                         .max_retries = 2, .backoff_s = 0.01, .idle_s = 1, .total_s = 20};
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs one request against a script; returns mi_llm_chat's result. */
static int run(const mock_reply *script, size_t n, mi_llm_config *cfg_over, const mi_llm_request *rq,
               mi_llm_response *out, char *err, size_t el, mock_server **keep) {
  mock_server *m = mock_start(script, n);
  ck_assert_ptr_nonnull(m);
  mi_llm_config cfg = cfg_for(m);
  if (cfg_over) {
    cfg_over->base_url = mock_url(m);
    cfg_over->api_key = KEY;
    cfg = *cfg_over;
  }
  char cerr[512];
  mi_llm_client *c = mi_llm_client_new(&cfg, cerr, sizeof cerr);
  ck_assert_msg(c, "%s", cerr);
  err[0] = 0;
  int rc = mi_llm_chat(c, rq, out, err, el);
  ck_assert_ptr_null(strstr(err, "SECRET")); /* the key is never in a message */
  ck_assert_ptr_null(strchr(err, '\n'));
  mi_llm_client_free(c);
  if (keep) *keep = m;
  else mock_stop(m);
  return rc;
}

START_TEST(plain_answer) {
  mock_reply s[] = {{200, NULL, NULL, ANSWER, 0, 0}};
  mi_llm_response r;
  char err[512];
  mock_server *m;
  mi_llm_request q = req(0);
  ck_assert_int_eq(run(s, 1, NULL, &q, &r, err, sizeof err, &m), 0);
  ck_assert_str_eq(r.content, "Hello there");
  ck_assert_str_eq(r.finish_reason, "stop");
  ck_assert_int_eq(r.prompt_tokens, 12);
  ck_assert_int_eq(r.completion_tokens, 3);
  ck_assert_int_eq(r.usage_estimated, 0);
  ck_assert_int_eq(r.attempts, 1);
  /* what went over the wire: the key in the header, the fields in the body */
  ck_assert_str_eq(mock_request_auth(m, 0), "Bearer " KEY);
  json_t *b = json_loads(mock_request_body(m, 0), 0, NULL);
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(json_string_value(json_object_get(b, "model")), "test-model");
  ck_assert_int_eq(json_integer_value(json_object_get(b, "seed")), 7);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "max_tokens")), 64);
  ck_assert(json_is_false(json_object_get(b, "stream")));
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(b, "messages"), 1), "content")),
                   "Say hello");
  ck_assert_ptr_null(strstr(mock_request_body(m, 0), "SECRET"));
  json_decref(b);
  mock_stop(m);
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(stream_with_usage) {
  mock_reply s[] = {{200, NULL, "text/event-stream", STREAM, 0, 0}};
  mi_llm_response r;
  char err[512];
  mock_server *m;
  mi_llm_request q = req(1);
  ck_assert_msg(run(s, 1, NULL, &q, &r, err, sizeof err, &m) == 0, "%s", err);
  ck_assert_str_eq(r.content, "Hello \xc3\xa9");
  ck_assert_str_eq(r.finish_reason, "length");
  ck_assert_int_eq(r.prompt_tokens, 7);
  ck_assert_int_eq(r.completion_tokens, 2);
  ck_assert_int_eq(r.usage_estimated, 0);
  json_t *b = json_loads(mock_request_body(m, 0), 0, NULL);
  ck_assert(json_is_true(json_object_get(b, "stream")));
  ck_assert(json_is_true(json_object_get(json_object_get(b, "stream_options"), "include_usage")));
  json_decref(b);
  mock_stop(m);
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(tool_calls_streamed_and_whole) {
  mock_reply s[] = {{200, NULL, "text/event-stream", TOOL_STREAM, 0, 0}};
  json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"write_engine\",\"description\":"
                             "\"writes a file\",\"parameters\":{\"type\":\"object\"}}}]", 0, NULL);
  mi_llm_request q = req(1);
  q.tools = tools;
  mi_llm_response r;
  char err[512];
  mock_server *m;
  ck_assert_msg(run(s, 1, NULL, &q, &r, err, sizeof err, &m) == 0, "%s", err);
  ck_assert_str_eq(r.finish_reason, "tool_calls");
  ck_assert_int_eq(json_array_size(r.tool_calls), 1);
  json_t *fn = json_object_get(json_array_get(r.tool_calls, 0), "function");
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(r.tool_calls, 0), "id")), "call_1");
  ck_assert_str_eq(json_string_value(json_object_get(fn, "name")), "write_engine");
  ck_assert_str_eq(json_string_value(json_object_get(fn, "arguments")), "{\"path\":\"engine.c\"}");
  ck_assert_int_eq(r.usage_estimated, 1); /* the stream sent no usage */
  json_t *b = json_loads(mock_request_body(m, 0), 0, NULL);
  ck_assert(json_equal(json_object_get(b, "tools"), tools));
  json_decref(b);
  mock_stop(m);
  mi_llm_response_free(&r);
  const char *whole =
      "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{\"id\":\"c9\",\"type\":\"function\","
      "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}";
  mock_reply s2[] = {{200, NULL, NULL, whole, 0, 0}};
  q.stream = 0;
  ck_assert_msg(run(s2, 1, NULL, &q, &r, err, sizeof err, NULL) == 0, "%s", err);
  ck_assert_str_eq(r.content, "");
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(r.tool_calls, 0), "id")), "c9");
  mi_llm_response_free(&r);
  json_decref(tools);
}
END_TEST

START_TEST(retry_after_429_then_answer) {
  mock_reply s[] = {{429, "1", NULL, "{\"error\":{\"message\":\"slow down\",\"code\":\"rate_limit\"}}", 0, 0},
                    {200, NULL, NULL, ANSWER, 0, 0}};
  mi_llm_response r;
  char err[512];
  mi_llm_request q = req(0);
  double t0 = now_s();
  ck_assert_msg(run(s, 2, NULL, &q, &r, err, sizeof err, NULL) == 0, "%s", err);
  double dt = now_s() - t0;
  ck_assert_int_eq(r.attempts, 2);
  ck_assert_str_eq(r.content, "Hello there");
  ck_assert_msg(dt >= 0.9, "Retry-After: 1 was not honoured (%.2f s)", dt); /* not the 10 ms backoff */
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(server_errors_retried_then_given_up) {
  mock_reply s[] = {{500, NULL, NULL, "{\"error\":{\"message\":\"boom\"}}", 0, 0},
                    {502, NULL, NULL, "bad gateway", 0, 0},
                    {503, NULL, NULL, "{\"error\":{\"message\":\"overloaded\"}}", 0, 0},
                    {200, NULL, NULL, ANSWER, 0, 0}};
  mi_llm_response r;
  char err[512];
  mi_llm_request q = req(0);
  ck_assert_int_ne(run(s, 4, NULL, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_int_eq(r.attempts, 3); /* 1 + max_retries 2 */
  ck_assert_msg(strstr(err, "HTTP 503") && strstr(err, "overloaded") && strstr(err, "3 attempts"), "%s", err);
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(client_errors_not_retried) {
  mock_reply bad[] = {{400, NULL, NULL, "{\"error\":{\"message\":\"unknown field\",\"type\":\"invalid_request_error\"}}", 0, 0},
                      {200, NULL, NULL, ANSWER, 0, 0}};
  mock_reply quota[] = {{429, "0", NULL, "{\"error\":{\"message\":\"You exceeded your quota\",\"code\":\"insufficient_quota\"}}", 0, 0},
                        {200, NULL, NULL, ANSWER, 0, 0}};
  mock_reply garbage[] = {{200, NULL, NULL, "{\"choices\": [", 0, 0}, {200, NULL, NULL, ANSWER, 0, 0}};
  mi_llm_response r;
  char err[512];
  mi_llm_request q = req(0);
  ck_assert_int_ne(run(bad, 2, NULL, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_msg(strstr(err, "HTTP 400") && strstr(err, "unknown field") && strstr(err, "not retried"), "%s", err);
  mi_llm_response_free(&r);
  ck_assert_int_ne(run(quota, 2, NULL, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_msg(strstr(err, "insufficient_quota"), "%s", err);
  mi_llm_response_free(&r);
  ck_assert_int_ne(run(garbage, 2, NULL, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_msg(strstr(err, "not JSON"), "%s", err);
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(cut_stream_counts_estimated_tokens) {
  mock_reply s[] = {{200, NULL, "text/event-stream", STREAM, 1, 0}};
  mi_llm_config cfg = {.model = "m", .max_retries = 0, .idle_s = 2, .total_s = 10};
  mi_llm_response r;
  char err[512];
  mi_llm_request q = req(1);
  ck_assert_int_ne(run(s, 1, &cfg, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_msg(strstr(err, "cut"), "%s", err);
  ck_assert_int_eq(r.usage_estimated, 1);
  ck_assert_int_gt(r.prompt_tokens, 0); /* spent though cut */
  mi_llm_response_free(&r);
  /* a cut, then a whole stream: the answer, and both attempts' cost */
  mock_reply s2[] = {{200, NULL, "text/event-stream", STREAM, 1, 0}, {200, NULL, "text/event-stream", STREAM, 0, 0}};
  cfg.max_retries = 1;
  cfg.backoff_s = 0.01;
  ck_assert_msg(run(s2, 2, &cfg, &q, &r, err, sizeof err, NULL) == 0, "%s", err);
  ck_assert_str_eq(r.content, "Hello \xc3\xa9");
  ck_assert_int_eq(r.attempts, 2);
  ck_assert_int_gt(r.prompt_tokens, 7);
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(hung_connection_times_out) {
  mock_reply s[] = {{200, NULL, "text/event-stream", STREAM, 0, 4.0}};
  mi_llm_config cfg = {.model = "m", .max_retries = 0, .idle_s = 1, .total_s = 30};
  mi_llm_response r;
  char err[512];
  mi_llm_request q = req(1);
  double t0 = now_s();
  ck_assert_int_ne(run(s, 1, &cfg, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_msg(now_s() - t0 < 4.0 + 2.0, "the idle timeout did not end the wait");
  ck_assert_msg(strstr(err, "LLM http://127.0.0.1"), "%s", err);
  mi_llm_response_free(&r);
}
END_TEST

START_TEST(huge_answer_refused) {
  size_t n = 64 * 1024;
  char *big = malloc(n + 64);
  snprintf(big, 64, "{\"choices\":[{\"message\":{\"content\":\"");
  size_t l = strlen(big);
  memset(big + l, 'x', n);
  strcpy(big + l + n, "\"}}]}");
  mock_reply s[] = {{200, NULL, NULL, big, 0, 0}};
  mi_llm_config cfg = {.model = "m", .max_retries = 2, .backoff_s = 0.01, .max_response_bytes = 4096};
  mi_llm_response r;
  char err[512];
  mi_llm_request q = req(0);
  ck_assert_int_ne(run(s, 1, &cfg, &q, &r, err, sizeof err, NULL), 0);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_msg(strstr(err, "larger than 4096 bytes"), "%s", err);
  mi_llm_response_free(&r);
  free(big);
}
END_TEST

START_TEST(nobody_listening) {
  mi_llm_config cfg = {.base_url = "http://127.0.0.1:1", .model = "m", .api_key = KEY, .max_retries = 1,
                       .backoff_s = 0.01};
  char err[512];
  mi_llm_client *c = mi_llm_client_new(&cfg, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  mi_llm_response r;
  mi_llm_request q = req(0);
  ck_assert_int_ne(mi_llm_chat(c, &q, &r, err, sizeof err), 0);
  ck_assert_int_eq(r.attempts, 2);
  ck_assert_msg(strstr(err, "127.0.0.1:1") && !strstr(err, "SECRET"), "%s", err);
  mi_llm_response_free(&r);
  mi_llm_client_free(c);
  mi_llm_config none = {0};
  ck_assert_ptr_null(mi_llm_client_new(&none, err, sizeof err));
  ck_assert_msg(strstr(err, "no LLM endpoint"), "%s", err);
}
END_TEST

static int dir_contains(const char *dir, const char *needle) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "grep -rqF '%s' '%s'", needle, dir);
  return system(cmd) == 0;
}

START_TEST(record_then_replay) {
  char dir[] = "/tmp/mi-llm-record-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  /* two identical requests get two answers: the second is a separate file */
  mock_reply s[] = {{200, NULL, NULL, ANSWER, 0, 0},
                    {200, NULL, "text/event-stream", STREAM, 0, 0},
                    {400, NULL, NULL, "{\"error\":{\"message\":\"too long\"}}", 0, 0}};
  mock_server *m = mock_start(s, 3);
  mi_llm_config cfg = cfg_for(m);
  cfg.record_dir = dir;
  char err[512];
  mi_llm_client *c = mi_llm_client_new(&cfg, err, sizeof err);
  mi_llm_response a, b, e;
  mi_llm_request q0 = req(0), q1 = req(1);
  ck_assert_msg(mi_llm_chat(c, &q0, &a, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(mi_llm_chat(c, &q1, &b, err, sizeof err) == 0, "%s", err);
  ck_assert_int_ne(mi_llm_chat(c, &q0, &e, err, sizeof err), 0);
  char live_err[512];
  snprintf(live_err, sizeof live_err, "%s", err);
  mi_llm_client_free(c);
  mock_stop(m);
  ck_assert(!dir_contains(dir, "SECRET"));

  /* replay: no server at all, the same answers and the same failure */
  mi_llm_config rc = {.replay_dir = dir, .model = "test-model", .api_key = KEY};
  c = mi_llm_client_new(&rc, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  mi_llm_response a2, b2, e2;
  ck_assert_msg(mi_llm_chat(c, &q0, &a2, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(a2.content, a.content);
  ck_assert_int_eq(a2.prompt_tokens, a.prompt_tokens);
  ck_assert_int_eq(a2.attempts, 0);
  ck_assert_msg(mi_llm_chat(c, &q1, &b2, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(b2.content, b.content);
  ck_assert_str_eq(b2.finish_reason, b.finish_reason);
  ck_assert_int_ne(mi_llm_chat(c, &q0, &e2, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "HTTP 400") && strstr(err, "too long"), "replayed: %s (live: %s)", err, live_err);
  /* a request never recorded fails loudly */
  mi_llm_message other[] = {{"user", "something else", NULL, NULL}};
  mi_llm_request q2 = {.messages = other, .n_messages = 1, .temperature = -1, .seed = -1};
  mi_llm_response x;
  ck_assert_int_ne(mi_llm_chat(c, &q2, &x, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "no recorded answer"), "%s", err);
  mi_llm_usage u;
  mi_llm_client_usage(c, &u);
  ck_assert_int_eq(u.requests, 4);
  ck_assert_int_eq(u.attempts, 0);
  mi_llm_client_free(c);
  mi_llm_response_free(&a);
  mi_llm_response_free(&b);
  mi_llm_response_free(&e);
  mi_llm_response_free(&a2);
  mi_llm_response_free(&b2);
  mi_llm_response_free(&e2);
  mi_llm_response_free(&x);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("llm_client");
  TCase *tc = tcase_create("client");
  tcase_set_timeout(tc, 60);
  mi_check_add(tc, MI_CHECK_TESTS(plain_answer, stream_with_usage, tool_calls_streamed_and_whole,
                                  retry_after_429_then_answer, server_errors_retried_then_given_up,
                                  client_errors_not_retried, cut_stream_counts_estimated_tokens,
                                  hung_connection_times_out, huge_answer_refused, nobody_listening,
                                  record_then_replay));
  suite_add_tcase(s, tc);
  return mi_check_run(s);
}
