/* GPT-2's byte-level BPE alphabet, written here independently of the
 * library (core/tokenizer), for the tests that build byte-level vocabularies
 * by hand. Shared by the tests (include as "tests/util/test_gpt2.h"). */
#ifndef MI_TESTS_UTIL_TEST_GPT2_H
#define MI_TESTS_UTIL_TEST_GPT2_H

#include <jansson.h>
#include <stddef.h>
#include <string.h>

/* bytes_to_unicode: byte b's character as UTF-8 into out[3], NUL-ended;
 * returns its length (1 or 2). */
static inline int mi_test_byte_char(int b, char *out) {
  int n = 0, cp = -1;
  for (int x = 0; x < 256; x++) {
    int printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    int c = printable ? x : 256 + n++;
    if (x == b) cp = c;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
    return 1;
  }
  out[0] = (char)(0xC0 | (cp >> 6));
  out[1] = (char)(0x80 | (cp & 0x3F));
  out[2] = 0;
  return 2;
}

/* A byte-level BPE tokenizer.json (the caller decrefs it), no merges: ids
 * 0-255 the 256 bytes, then the n pieces in order (each spelled byte by
 * byte, at most 21 bytes), then the special token "<|end|>", its id into
 * *end_id. */
static inline json_t *mi_test_byte_bpe(const char *const *pieces, size_t n, int *end_id) {
  json_t *vocab = json_object();
  int id = 0;
  for (int b = 0; b < 256; b++) {
    char s[3];
    mi_test_byte_char(b, s);
    json_object_set_new(vocab, s, json_integer(id++));
  }
  for (size_t i = 0; i < n; i++) {
    char s[64] = "";
    for (const unsigned char *p = (const unsigned char *)pieces[i]; *p; p++) {
      char c[3];
      mi_test_byte_char(*p, c);
      strcat(s, c);
    }
    json_object_set_new(vocab, s, json_integer(id++));
  }
  *end_id = id;
  return json_pack("{s:{s:s,s:o,s:[]},s:[{s:i,s:s,s:b}],s:{s:s}}", "model", "type", "BPE", "vocab",
                   vocab, "merges", "added_tokens", "id", id, "content", "<|end|>", "special", 1,
                   "decoder", "type", "ByteLevel");
}

#endif
