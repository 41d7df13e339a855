/* Checks shared by the two tokenizer harnesses. */
#ifndef MI_FUZZ_TOK_COMMON_H
#define MI_FUZZ_TOK_COMMON_H

#include "fuzz_util.h"

#include "core/tokenizer/tokenizer.h"

/* Decodes ids one-shot and through the streaming decoder; the two must
 * agree byte for byte (tokenizer.h promises it). Returns the one-shot text
 * (malloc'd) or NULL when decode refused the ids (then every refused id
 * must be out of range or unused). */
static inline char *fuzz_decode_both(const mi_tokenizer *tok, const int32_t *ids, size_t n,
                                     size_t *len) {
  int rc = 0;
  char *one = mi_tokenizer_decode(tok, ids, n, len, &rc);
  size_t cap = mi_tok_stream_max_out(tok);
  size_t acap = 256;
  char *buf = malloc(cap), *acc = malloc(acap);
  FUZZ_CHECK(buf && acc, "oom");
  mi_tok_stream st;
  mi_tok_stream_init(&st, tok);
  size_t al = 0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    int w = mi_tok_stream_feed(&st, ids[i], buf, cap);
    if (w == MI_TOK_EID) {
      FUZZ_CHECK(mi_tokenizer_token_str(tok, ids[i]) == NULL, "stream refused id %d", ids[i]);
      bad = 1;
      continue;
    }
    FUZZ_CHECK(w >= 0 && (size_t)w <= cap, "feed returned %d", w);
    while (al + (size_t)w + 3 > acap) {
      acap *= 2;
      acc = realloc(acc, acap);
      FUZZ_CHECK(acc, "oom");
    }
    memcpy(acc + al, buf, (size_t)w);
    al += (size_t)w;
  }
  int w = mi_tok_stream_flush(&st, buf, cap);
  FUZZ_CHECK(w == 0 || w == 3, "flush returned %d", w);
  memcpy(acc + al, buf, (size_t)w);
  al += (size_t)w;
  if (bad) {
    FUZZ_CHECK(!one && rc == MI_TOK_EID, "decode took an id the stream refused (rc %d)", rc);
  } else {
    FUZZ_CHECK(one != NULL, "decode failed: %s", mi_tokenizer_strerror(rc));
    FUZZ_CHECK(*len == al && !memcmp(one, acc, al), "stream and one-shot decode differ");
    FUZZ_CHECK(one[*len] == 0, "decode output not NUL-terminated");
  }
  free(buf);
  free(acc);
  return one;
}

#endif
