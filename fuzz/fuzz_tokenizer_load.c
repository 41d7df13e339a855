/* Fuzzes tokenizer.json loading (vocab, merges, added_tokens, normalizer,
 * pre_tokenizer with a user regex, decoder) on small synthetic files. A
 * tokenizer that loads is then exercised: a few encodes in both
 * parse_special modes, a decode of every id (streamed and one-shot must
 * agree) and token lookups. */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512] = "";
  mi_tokenizer *tok = mi_tokenizer_load(fuzz_memfile(data, size), err, sizeof err);
  if (!tok) {
    fuzz_check_one_line("mi_tokenizer_load", err);
    return 0;
  }
  size_t V = mi_tokenizer_vocab_size(tok);
  FUZZ_CHECK(V >= 1 && V <= MI_TOK_MAX_VOCAB, "vocab_size %zu", V);
  static const char *texts[] = {"", "a", "hello world", "  \n\t x y z 123 <|im_start|>a<|im_end|>",
                                "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80 e\xcc\x81", "<think>\n</think>"};
  for (size_t t = 0; t < sizeof texts / sizeof *texts; t++)
    for (int ps = 0; ps < 2; ps++) {
      int32_t *ids = NULL;
      size_t n = 0;
      int rc = mi_tokenizer_encode(tok, texts[t], strlen(texts[t]), ps, &ids, &n);
      FUZZ_CHECK(rc == 0 || rc == MI_TOK_EREGEX, "encode: %s", mi_tokenizer_strerror(rc));
      for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(mi_tokenizer_token_str(tok, ids[i]) != NULL, "encode gave unused id %d", ids[i]);
      size_t len;
      free(fuzz_decode_both(tok, ids, n, &len));
      free(ids);
    }
  /* every id (bounded: a hostile file may declare millions) */
  size_t n = V < 4096 ? V : 4096;
  int32_t *ids = malloc(n * sizeof *ids);
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)i;
  size_t len;
  free(fuzz_decode_both(tok, ids, n, &len));
  for (size_t i = 0; i < n; i++) {
    const char *s = mi_tokenizer_token_str(tok, (int32_t)i);
    if (s) {
      int32_t back = mi_tokenizer_token_id(tok, s);
      FUZZ_CHECK(back >= 0 && mi_tokenizer_token_str(tok, back) && !strcmp(mi_tokenizer_token_str(tok, back), s),
                 "token_id(token_str(%zu)) mismatch", i);
    }
  }
  free(ids);
  mi_tokenizer_free(tok);
  return 0;
}
