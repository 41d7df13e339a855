/* Fuzzes structured output (core/grammar): the input is a JSON Schema and a
 * text, split at the first NUL byte (no NUL: all schema, no text; an empty
 * schema part: json_object mode). A schema is hostile input (it comes in an
 * HTTP request): compiling must never crash and must refuse with one line
 * within the limits. The text is fed byte by byte to the matcher: feed and
 * can_feed must agree, a refused byte must leave the state as it was, a
 * complete text must be JSON that jansson parses (no duplicate keys), and
 * the state reached must not be a dead end. The token mask over a small
 * byte-level vocabulary must equal a token-by-token can_feed loop. */
#include "fuzz_util.h"

#include <jansson.h>

#include "core/grammar/json_schema.h"
#include "tests/util/test_gpt2.h"

static mi_tokenizer *g_tok;
static mi_token_trie *g_trie;
static int32_t g_end_id;

/* The 256 bytes, JSON-ish pieces, and one special token (the end). */
static void init_vocab(void) {
  static const char *const pieces[] = {"{\"",      "\":",  "\":\"", "\",\"", "\"}", "},",  "true",
                                       "false",    "null", "12",    "1.",    ".5",  "e+",  "-0",
                                       "\"a\"",    "ab",   "a\"",   "[1",    "],",  "\\u", "00",
                                       "\xc3\xa9", " \"",  "\n}",   "\\\"",  "]}"};
  int end_id;
  json_t *root = mi_test_byte_bpe(pieces, sizeof pieces / sizeof *pieces, &end_id);
  g_end_id = end_id;
  char err[256];
  g_tok = mi_tokenizer_load_json(root, "fuzz-vocab", err, sizeof err);
  FUZZ_CHECK(g_tok != NULL, "vocabulary: %s", err);
  g_trie = mi_token_trie_build(g_tok, err, sizeof err);
  FUZZ_CHECK(g_trie != NULL, "trie: %s", err);
  json_decref(root);
}

static void check_mask(const mi_json_matcher *m) {
  size_t V = mi_tokenizer_vocab_size(g_tok), want_n = 0;
  uint8_t mask[512];
  FUZZ_CHECK(V <= sizeof mask, "vocabulary of %zu", V);
  size_t n = mi_token_mask(g_trie, m, &g_end_id, 1, mask);
  for (size_t v = 0; v < V; v++) {
    size_t len = 0;
    const unsigned char *b = mi_tokenizer_token_bytes(g_tok, (int32_t)v, &len);
    int want = (int32_t)v == g_end_id ? mi_json_matcher_can_end(m)
               : b && len && !mi_tokenizer_is_special(g_tok, (int32_t)v)
                   ? mi_json_matcher_can_feed(m, b, len)
                   : 0;
    FUZZ_CHECK(mask[v] == want, "token %zu: mask %d, can_feed %d", v, mask[v], want);
    want_n += (size_t)want;
  }
  FUZZ_CHECK(n == want_n && n > 0, "mask count %zu, want %zu (0: a dead end)", n, want_n);
}

static void run_text(const mi_json_grammar *g, const uint8_t *text, size_t n) {
  mi_json_matcher *m = mi_json_matcher_new(g);
  FUZZ_CHECK(m != NULL, "matcher: out of memory");
  unsigned char *took = malloc(n + 1);
  size_t nt = 0;
  for (size_t i = 0; i < n; i++) {
    int can = mi_json_matcher_can_feed(m, text + i, 1), end = mi_json_matcher_can_end(m);
    int rc = mi_json_matcher_feed(m, text + i, 1);
    FUZZ_CHECK(can == (rc == 0), "byte %zu: can_feed %d, feed %d", i, can, rc);
    if (rc) { /* refused: the state is the one before */
      FUZZ_CHECK(mi_json_matcher_can_end(m) == end, "a refused byte changed can_end");
      continue;
    }
    took[nt++] = text[i];
  }
  if (mi_json_matcher_must_end(m))
    FUZZ_CHECK(mi_json_matcher_can_end(m), "must_end without can_end");
  if (mi_json_matcher_can_end(m)) {
    json_error_t je;
    json_t *v = json_loadb((const char *)took, nt, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    FUZZ_CHECK(v != NULL, "complete text is not JSON (%s): %.*s", je.text, (int)nt, took);
    json_decref(v);
  }
  check_mask(m);
  free(took);
  mi_json_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_tok) init_vocab();
  const uint8_t *nul = memchr(data, 0, size);
  size_t ns = nul ? (size_t)(nul - data) : size;
  json_t *schema = NULL;
  if (ns) {
    json_error_t je;
    schema = json_loadb((const char *)data, ns, JSON_DECODE_ANY, &je);
    if (!schema) return 0;
  }
  char err[512] = "";
  mi_json_grammar *g = mi_json_grammar_compile(schema, err, sizeof err);
  if (!g) {
    fuzz_check_one_line("mi_json_grammar_compile", err);
    FUZZ_CHECK(!strncmp(err, "response_format.json_schema.schema", 34),
               "error without the path: %s", err);
  } else {
    run_text(g, nul ? nul + 1 : data + size, nul ? size - ns - 1 : 0);
    mi_json_grammar_free(g);
  }
  json_decref(schema);
  return 0;
}
