/* Fuzzes mi-serve's request parser (core/serve/request.c): the JSON body of
 * POST /v1/chat/completions and /v1/completions, parsed both ways. An
 * accepted request must be in range; a refused one must carry an HTTP 4xx
 * status, an error type and a one-line message. */
#include "fuzz_util.h"

#include "core/serve/request.h"

static void one(const uint8_t *data, size_t size, int chat) {
  serve_req r;
  serve_err e;
  int rc = serve_req_parse((const char *)data, size, chat, &r, &e);
  if (rc != 0) {
    FUZZ_CHECK(e.status >= 400 && e.status < 600, "status %d", e.status);
    FUZZ_CHECK(e.type && e.type[0], "no error type");
    fuzz_check_one_line("serve_req_parse", e.message);
    for (const char *c = e.message; *c; c++)
      FUZZ_CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c <= 0x7e, "non-ASCII byte in message");
    FUZZ_CHECK(strlen(e.param) < sizeof e.param, "param");
  } else {
    FUZZ_CHECK(r.chat == chat, "chat flag");
    if (chat) {
      FUZZ_CHECK(r.n_msgs >= 1 && r.n_msgs <= SERVE_MAX_MESSAGES, "%zu messages", r.n_msgs);
      for (size_t i = 0; i < r.n_msgs; i++) {
        FUZZ_CHECK(r.msgs[i].role && r.msgs[i].content, "message %zu", i);
        (void)strlen(r.msgs[i].content); /* NUL-terminated, readable */
      }
    } else {
      FUZZ_CHECK((r.prompt != NULL) != (r.prompt_ids != NULL), "exactly one prompt form");
      for (size_t i = 0; i < r.n_prompt_ids; i++) FUZZ_CHECK(r.prompt_ids[i] >= 0, "negative id");
    }
    FUZZ_CHECK(r.max_tokens >= -1 && r.max_tokens <= INT32_MAX, "max_tokens");
    FUZZ_CHECK(r.temperature >= 0 && r.temperature <= 2, "temperature %g", r.temperature);
    FUZZ_CHECK(r.top_p >= 0 && r.top_p <= 1 && r.min_p >= 0 && r.min_p <= 1, "top_p/min_p");
    FUZZ_CHECK(r.top_k >= 0, "top_k");
    FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= SERVE_MAX_TOP_LOGPROBS, "top_logprobs");
    FUZZ_CHECK(r.n_stop <= SERVE_MAX_STOP, "n_stop");
    for (size_t i = 0; i < r.n_stop; i++) FUZZ_CHECK(r.stop[i][0], "empty stop string kept");
    FUZZ_CHECK(r.n_bias <= SERVE_MAX_LOGIT_BIAS && (!r.n_bias || (r.bias_ids && r.bias_vals)), "logit_bias count");
    for (size_t i = 0; i < r.n_bias; i++)
      FUZZ_CHECK(r.bias_ids[i] >= 0 && r.bias_vals[i] >= -100 && r.bias_vals[i] <= 100, "logit_bias entry %zu", i);
    FUZZ_CHECK(!r.include_usage || r.stream, "include_usage without stream");
  }
  serve_req_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one(data, size, 1);
  one(data, size, 0);
  return 0;
}
