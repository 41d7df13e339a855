/* core/tokenizer/pipeline.c — the tokenizer.json steps around the BPE model:
 * which of the two BPE kinds a file is, its normalizer, pre_tokenizer and
 * decoder, read into internal.h's tables.
 *
 * The two kinds (HF's BPE model is the same for both; what differs is what
 * the steps around it feed it):
 *   - byte level (GPT-2's kind): a ByteLevel step maps every byte to
 *     a printable character, so a word starts as one symbol per byte and
 *     every byte has a token;
 *   - SentencePiece's (tests/tokenizer/README.md names the families): the normalizer or a
 *     Metaspace step turns ' ' into "▁", a word starts as one symbol per
 *     character, and a character without a token becomes its "<0xXX>" byte
 *     tokens (model.byte_fallback) or the unk token. Its decoder turns "▁"
 *     back into ' ', "<0xXX>" into the byte, and may strip the space the
 *     encoder put first.
 * A file states no kind: one with a ByteLevel step is byte level; one with
 * byte_fallback or a step only the other kind uses (Prepend, Replace,
 * Metaspace, ByteFallback, Fuse, Strip) is SentencePiece's; one with
 * neither is read as byte level (and refused when its vocabulary lacks the
 * byte tokens). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/internal.h"

#define RFAIL(...) do { mi_tok_err(err, el, path, __VA_ARGS__); return -1; } while (0)

/* GPT-2's pattern, used when a ByteLevel pre-tokenizer has use_regex=true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- the kind ---- */

/* 1 if step s (or a step of its Sequence) has one of the types. */
static int has_type(json_t *s, const char *const *types) {
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!type) return 0;
    if (!strcmp(type, "Sequence")) {
        static const char *const lists[] = {"normalizers", "pretokenizers", "decoders", "processors"};
        for (int l = 0; l < 4; l++) {
            size_t i;
            json_t *x;
            json_array_foreach(json_object_get(s, lists[l]), i, x) if (has_type(x, types)) return 1;
        }
        return 0;
    }
    for (int i = 0; types[i]; i++)
        if (!strcmp(type, types[i])) return 1;
    return 0;
}

int mi_tok_byte_level(json_t *root) {
    static const char *const byte_level[] = {"ByteLevel", NULL};
    static const char *const chars[] = {"Prepend", "Replace", "Metaspace", "ByteFallback", "Fuse", "Strip", NULL};
    json_t *pre = json_object_get(root, "pre_tokenizer"), *dec = json_object_get(root, "decoder"),
           *norm = json_object_get(root, "normalizer");
    if (has_type(pre, byte_level) || has_type(dec, byte_level)) return 1;
    if (json_is_true(json_object_get(json_object_get(root, "model"), "byte_fallback"))) return 0;
    return !(has_type(pre, chars) || has_type(dec, chars) || has_type(norm, chars));
}

/* ---- steps ---- */

/* One step of a normalizer, a pre_tokenizer or a decoder, of the given
 * "type"; ctx: the decoder being gathered (decoder steps); last: 1 for the
 * last step of its list. */
typedef int (*step_fn)(mi_tokenizer *t, void *ctx, json_t *s, const char *type, int last, const char *path,
                       char *err, size_t el);

/* A normalizer, pre_tokenizer or decoder (`what`): absent or null is none;
 * else one step, or a top-level "Sequence" of steps (listed under `list`),
 * each read by step. */
static int parse_steps(mi_tokenizer *t, void *ctx, json_t *s, const char *what, const char *list, step_fn step,
                       const char *path, char *err, size_t el) {
    if (!s || json_is_null(s)) return 0;
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!json_is_object(s) || !type) RFAIL("%s: expected an object with a string \"type\"", what);
    if (strcmp(type, "Sequence")) return step(t, ctx, s, type, 1, path, err, el);
    json_t *arr = json_object_get(s, list);
    if (!json_is_array(arr)) RFAIL("%s.%s: expected an array", what, list);
    size_t i, n = json_array_size(arr);
    json_t *x;
    json_array_foreach(arr, i, x) {
        const char *xt = json_string_value(json_object_get(x, "type"));
        if (!json_is_object(x) || !xt) RFAIL("%s.%s[%zu]: expected an object with a string \"type\"", what, list, i);
        if (!strcmp(xt, "Sequence")) RFAIL("%s.%s[%zu]: a Sequence inside a Sequence is not supported", what, list, i);
        if (step(t, ctx, x, xt, i + 1 == n, path, err, el)) return -1;
    }
    return 0;
}

/* A JSON string without NULs (n: its length), else NULL. */
static const char *plain_string(json_t *v, size_t *n) {
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) return NULL;
    *n = json_string_length(v);
    return json_string_value(v);
}

/* A {"String": s} pattern (non-empty) as s; NULL (err set) for anything
 * else, a {"Regex": ...} included (what names the step). */
static const char *string_pattern(json_t *s, size_t *n, const char *what, const char *path, char *err, size_t el) {
    const char *p = plain_string(json_object_get(json_object_get(s, "pattern"), "String"), n);
    if (!p || !*n) mi_tok_err(err, el, path, "%s: only a {\"String\": non-empty text} pattern is supported", what);
    return p && *n ? p : NULL;
}

static int normalizer_step(mi_tokenizer *t, void *ctx, json_t *s, const char *type, int last, const char *path,
                           char *err, size_t el) {
    (void)ctx; (void)last;
    if (t->n_norm >= MI_TOK_MAX_STEPS) RFAIL("normalizer: more than %d steps", MI_TOK_MAX_STEPS);
    mi_tok_norm *nm = &t->norm[t->n_norm];
    const char *a = NULL, *b = "";
    size_t na = 0, nb = 0;
    if (!strcmp(type, "NFC")) {
        nm->kind = MI_TOK_NORM_NFC;
    } else if (!strcmp(type, "Prepend")) {
        if (!(a = plain_string(json_object_get(s, "prepend"), &na)) || !na)
            RFAIL("normalizer Prepend: \"prepend\" is not a non-empty string");
        nm->kind = MI_TOK_NORM_PREPEND;
    } else if (!strcmp(type, "Replace")) {
        if (!(a = string_pattern(s, &na, "normalizer Replace", path, err, el))) return -1;
        if (!(b = plain_string(json_object_get(s, "content"), &nb))) RFAIL("normalizer Replace: \"content\" is not a string");
        nm->kind = MI_TOK_NORM_REPLACE;
    } else {
        RFAIL("normalizer type \"%s\" is not supported (NFC, Prepend, Replace)", type);
    }
    t->n_norm++;
    if (a && (!(nm->a = strndup(a, na)) || !(nm->b = strndup(b, nb)))) RFAIL("out of memory");
    nm->na = na;
    nm->nb = nb;
    return 0;
}

int mi_tok_add_split(mi_tokenizer *t, const char *pat, size_t n, int literal, int behavior, const char *path,
                     char *err, size_t el) {
    if (t->n_pre >= MI_TOK_MAX_STEPS) RFAIL("pre_tokenizer: more than %d steps", MI_TOK_MAX_STEPS);
    int ec;
    PCRE2_SIZE eo;
    /* NEVER_BACKSLASH_C: \C matches one byte of a UTF-8 character; a match
     * ending mid-character would make the next pcre2_match (called with
     * PCRE2_NO_UTF_CHECK) start mid-character, which PCRE2 leaves undefined. */
    uint32_t opts = literal ? PCRE2_UTF | PCRE2_LITERAL /* what PCRE2 allows beside it */
                            : PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, n, opts, &ec, &eo, NULL);
    if (!re) {
        char msg[160];
        pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
        RFAIL("pre_tokenizer: regex does not compile at offset %zu: %s", (size_t)eo, msg);
    }
    mi_tok_pre *p = &t->pre[t->n_pre++];
    p->kind = MI_TOK_PRE_SPLIT;
    p->behavior = behavior;
    p->re = re;
    /* JIT is an optimisation: if unavailable, pcre2_match interprets. */
    p->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

/* 1 if s[0, n) is one UTF-8 character. */
static int one_char(const char *s, size_t n) {
    unsigned c = (unsigned char)s[0];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    return n == k && mi_tok_utf8_valid_prefix((const unsigned char *)s, n) == n;
}

/* Metaspace: ' ' becomes the replacement (one character), which may be put
 * first (prepend_scheme, or the older add_prefix_space), and each
 * replacement may start a piece (split). */
static int metaspace_step(mi_tokenizer *t, json_t *s, const char *path, char *err, size_t el) {
    if (t->n_pre >= MI_TOK_MAX_STEPS) RFAIL("pre_tokenizer: more than %d steps", MI_TOK_MAX_STEPS);
    size_t nrep = 3;
    json_t *r = json_object_get(s, "replacement");
    const char *rep = r ? plain_string(r, &nrep) : "\xE2\x96\x81";
    if (!rep || !nrep || !one_char(rep, nrep)) RFAIL("pre_tokenizer Metaspace: \"replacement\" is not one character");
    int prepend = MI_TOK_PREPEND_ALWAYS, split = 1;
    json_t *ps = json_object_get(s, "prepend_scheme"), *ap = json_object_get(s, "add_prefix_space"),
           *sp = json_object_get(s, "split");
    const char *scheme = json_string_value(ps);
    if (ps && !json_is_null(ps)) {
        if (!scheme) RFAIL("pre_tokenizer Metaspace: \"prepend_scheme\" is not a string");
        if (!strcmp(scheme, "first")) prepend = MI_TOK_PREPEND_FIRST;
        else if (!strcmp(scheme, "never")) prepend = MI_TOK_PREPEND_NEVER;
        else if (strcmp(scheme, "always"))
            RFAIL("pre_tokenizer Metaspace: prepend_scheme \"%.40s\" is not always, first or never", scheme);
    } else if (ap && !json_is_null(ap)) {
        if (!json_is_boolean(ap)) RFAIL("pre_tokenizer Metaspace: \"add_prefix_space\" is not a bool");
        prepend = json_is_true(ap) ? MI_TOK_PREPEND_ALWAYS : MI_TOK_PREPEND_NEVER;
    }
    if (sp && !json_is_null(sp)) {
        if (!json_is_boolean(sp)) RFAIL("pre_tokenizer Metaspace: \"split\" is not a bool");
        split = json_is_true(sp);
    }
    mi_tok_pre *p = &t->pre[t->n_pre++];
    p->kind = MI_TOK_PRE_METASPACE;
    memcpy(p->rep, rep, nrep);
    p->nrep = nrep;
    p->prepend = prepend;
    p->split = split;
    return 0;
}

static int pre_step(mi_tokenizer *t, void *ctx, json_t *p, const char *type, int last, const char *path, char *err,
                    size_t el) {
    (void)ctx; (void)last;
    if (!strcmp(type, "Split")) {
        static const char *const behaviors[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext"};
        json_t *pat = json_object_get(p, "pattern");
        json_t *rx = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        if (!json_is_string(rx) && !json_is_string(str))
            RFAIL("pre_tokenizer Split: the pattern is not {\"Regex\": string} or {\"String\": string}");
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        int b = 0;
        if (beh)
            while (b < 4 && strcmp(beh, behaviors[b])) b++;
        if (b == 4)
            RFAIL("pre_tokenizer Split: behavior \"%.40s\" is not supported (Isolated, Removed, MergedWithPrevious, "
                  "MergedWithNext)", beh);
        if (json_is_true(json_object_get(p, "invert"))) RFAIL("pre_tokenizer Split: invert=true is not supported");
        json_t *ps = json_is_string(rx) ? rx : str;
        if (json_string_length(ps) == 0) RFAIL("pre_tokenizer Split: the pattern is empty");
        return mi_tok_add_split(t, json_string_value(ps), json_string_length(ps), ps == str, b, path, err, el);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (json_is_true(json_object_get(p, "add_prefix_space")))
            RFAIL("pre_tokenizer ByteLevel: add_prefix_space=true is not supported");
        json_t *ur = json_object_get(p, "use_regex");
        if (!ur || json_is_true(ur))
            return mi_tok_add_split(t, GPT2_PATTERN, strlen(GPT2_PATTERN), 0, MI_TOK_ISOLATED, path, err, el);
        return 0; /* the byte mapping itself is always applied by the encoder */
    }
    if (!strcmp(type, "Metaspace")) {
        if (t->byte_level) RFAIL("pre_tokenizer Metaspace beside a ByteLevel step is not supported");
        return metaspace_step(t, p, path, err, el);
    }
    RFAIL("pre_tokenizer type \"%s\" is not supported (Split, ByteLevel, Metaspace)", type);
}

/* ---- the decoder of SentencePiece's kind ---- */

/* What the decoder does to a token's text, gathered as its steps are read:
 * text replacements, "<0xXX>" to its byte, and the leading spaces taken off
 * the whole text (t->strip_lead: a Strip after the tokens are fused,
 * Metaspace's prefix). Each token's bytes are computed once, at load. */
typedef struct {
    const char *from[MI_TOK_MAX_STEPS], *to[MI_TOK_MAX_STEPS];
    size_t nfrom[MI_TOK_MAX_STEPS], nto[MI_TOK_MAX_STEPS];
    int n_replace;
    int byte_fallback, fused;
} char_decoder;

static int add_replace(char_decoder *d, const char *from, size_t nf, const char *to, size_t nt, const char *path,
                       char *err, size_t el) {
    /* after Fuse a longer pattern could span two tokens; one character cannot */
    if (d->fused && !one_char(from, nf)) RFAIL("decoder Replace after Fuse with a pattern longer than one character is not supported");
    if (d->n_replace >= MI_TOK_MAX_STEPS) RFAIL("decoder: more than %d Replace steps", MI_TOK_MAX_STEPS);
    d->from[d->n_replace] = from; d->nfrom[d->n_replace] = nf;
    d->to[d->n_replace] = to; d->nto[d->n_replace++] = nt;
    return 0;
}

static int decoder_step(mi_tokenizer *t, void *ctx, json_t *s, const char *type, int last, const char *path,
                        char *err, size_t el) {
    char_decoder *d = ctx;
    size_t nf, nt;
    if (!strcmp(type, "Replace")) {
        const char *from = string_pattern(s, &nf, "decoder Replace", path, err, el), *to;
        if (!from) return -1;
        if (!(to = plain_string(json_object_get(s, "content"), &nt))) RFAIL("decoder Replace: \"content\" is not a string");
        return add_replace(d, from, nf, to, nt, path, err, el);
    }
    if (!strcmp(type, "ByteFallback")) {
        if (d->fused) RFAIL("decoder ByteFallback after Fuse is not supported");
        d->byte_fallback = 1;
        return 0;
    }
    if (!strcmp(type, "Fuse")) { d->fused = 1; return 0; }
    if (!strcmp(type, "Strip")) {
        json_t *c = json_object_get(s, "content"), *st = json_object_get(s, "start"), *sp = json_object_get(s, "stop");
        if (!json_is_string(c) || strcmp(json_string_value(c), " ")) RFAIL("decoder Strip: only \"content\": \" \" is supported");
        if (!json_is_integer(st) || json_integer_value(st) < 0 || json_integer_value(st) > 64 ||
            (sp && !json_is_null(sp) && (!json_is_integer(sp) || json_integer_value(sp) != 0)))
            RFAIL("decoder Strip: only \"start\" 0..64 and \"stop\" 0 are supported");
        /* before Fuse (and not last) it would strip every token */
        if (!d->fused && !last) RFAIL("decoder Strip before Fuse is not supported");
        t->strip_lead = (unsigned)json_integer_value(st);
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        json_t *r = json_object_get(s, "replacement");
        const char *rep = r ? plain_string(r, &nf) : "\xE2\x96\x81";
        if (!r) nf = 3;
        if (!rep || !nf || !one_char(rep, nf)) RFAIL("decoder Metaspace: \"replacement\" is not one character");
        if (add_replace(d, rep, nf, " ", 1, path, err, el)) return -1;
        const char *scheme = json_string_value(json_object_get(s, "prepend_scheme"));
        int prepends = scheme ? strcmp(scheme, "never") != 0 : !json_is_false(json_object_get(s, "add_prefix_space"));
        /* HF drops every replacement of the first token; taking one leading
         * space off the text is the same wherever the first token holds at
         * most one, at its start (tokenizer.h) */
        if (prepends) t->strip_lead = 1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) RFAIL("decoder ByteLevel beside steps of SentencePiece's kind is not supported");
    RFAIL("decoder type \"%s\" is not supported (ByteLevel; or Replace, ByteFallback, Fuse, Strip, Metaspace)", type);
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The byte a "<0xXX>" text stands for, or -1. */
static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || hexval(s[3]) < 0 || hexval(s[4]) < 0) return -1;
    return hexval(s[3]) * 16 + hexval(s[4]);
}

int mi_tok_replace_all(const unsigned char *s, size_t n, const char *from, size_t nf, const char *to, size_t nt,
                       unsigned char **out, size_t *out_len) {
    size_t hits = 0;
    *out = NULL;
    for (size_t i = 0; i + nf <= n;)
        if (!memcmp(s + i, from, nf)) { hits++; i += nf; } else i++;
    if (!hits) return 0;
    unsigned char *nx = malloc(n - hits * nf + hits * nt + 1);
    if (!nx) return MI_TOK_ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + nf <= n && !memcmp(s + i, from, nf)) { memcpy(nx + o, to, nt); o += nt; i += nf; }
        else nx[o++] = s[i++];
    }
    *out = nx;
    *out_len = o;
    return 0;
}

/* Token text s[0, n) through d into a malloc'd buffer (*len bytes). */
static unsigned char *decode_text(const char_decoder *d, const char *s, size_t n, size_t *len) {
    int b = d->byte_fallback ? fallback_byte(s, n) : -1;
    unsigned char *cur = malloc(n ? n : 1);
    if (!cur) return NULL;
    if (b >= 0) { cur[0] = (unsigned char)b; *len = 1; return cur; }
    memcpy(cur, s, n);
    for (int r = 0; r < d->n_replace; r++) {
        unsigned char *nx;
        if (mi_tok_replace_all(cur, n, d->from[r], d->nfrom[r], d->to[r], d->nto[r], &nx, &n)) { free(cur); return NULL; }
        if (nx) { free(cur); cur = nx; }
    }
    *len = n;
    return cur;
}

/* Every token's bytes as d decodes it (the byte-level inverse load.c put
 * there does not apply to this kind). */
static int char_bytes(mi_tokenizer *t, const char_decoder *d, const char *path, char *err, size_t el) {
    size_t cap = 1 << 16, used = 0, longest = 0;
    unsigned char *pool = malloc(cap);
    if (!pool) RFAIL("out of memory");
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        if (t->str_off[id] == UINT32_MAX) continue;
        size_t n;
        unsigned char *b = decode_text(d, t->strpool + t->str_off[id], t->str_len[id], &n);
        if (!b || used + n > UINT32_MAX) { free(b); free(pool); RFAIL("out of memory"); }
        if (used + n > cap) {
            while (used + n > cap) cap *= 2;
            unsigned char *p = realloc(pool, cap);
            if (!p) { free(b); free(pool); RFAIL("out of memory"); }
            pool = p;
        }
        memcpy(pool + used, b, n);
        free(b);
        t->bytes_off[id] = (uint32_t)used;
        t->bytes_len[id] = (uint32_t)n;
        used += n;
        if (n > longest) longest = n;
    }
    free(t->bytepool);
    t->bytepool = pool;
    t->max_token_bytes = longest;
    return 0;
}

/* ---- the model's fields of SentencePiece's kind ---- */

/* The "<0xXX>" token of each byte (byte_fallback), -1 where none. */
static void fallback_table(mi_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->fallback_id[b] = t->byte_fallback ? mi_tokenizer_token_id(t, name) : -1;
    }
}

static int char_model(mi_tokenizer *t, json_t *model, const char *path, char *err, size_t el) {
    int fb = json_is_true(json_object_get(model, "byte_fallback"));
    json_t *fu = json_object_get(model, "fuse_unk"), *unk = json_object_get(model, "unk_token");
    if (fu && !json_is_null(fu) && !json_is_boolean(fu)) RFAIL("model.fuse_unk is not a bool");
    t->fuse_unk = json_is_true(fu);
    t->byte_fallback = fb;
    t->unk_id = -1;
    if (unk && !json_is_null(unk)) {
        const char *u = json_string_value(unk);
        if (!u || (t->unk_id = mi_tokenizer_token_id(t, u)) < 0)
            RFAIL("model.unk_token \"%.60s\" is not a token of the vocabulary", u ? u : "(not a string)");
    }
    fallback_table(t);
    return 0;
}

int mi_tok_load_steps(mi_tokenizer *t, json_t *root, const char *path, char *err, size_t el) {
    json_t *model = json_object_get(root, "model");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *a = json_object_get(model, affixes[i]);
        if (a && !json_is_null(a) && !(json_is_string(a) && json_string_length(a) == 0))
            RFAIL("model.%s is not supported", affixes[i]);
    }
    if (parse_steps(t, NULL, json_object_get(root, "normalizer"), "normalizer", "normalizers", normalizer_step, path,
                    err, el) ||
        parse_steps(t, NULL, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", "pretokenizers", pre_step, path,
                    err, el))
        return -1;
    json_t *dec = json_object_get(root, "decoder");
    if (t->byte_level) {
        const char *dt = json_string_value(json_object_get(dec, "type"));
        if (json_is_true(json_object_get(model, "byte_fallback"))) RFAIL("model.byte_fallback=true with a ByteLevel step is not supported");
        if (dec && !json_is_null(dec) && (!dt || strcmp(dt, "ByteLevel")))
            RFAIL("decoder type \"%s\" is not supported with a ByteLevel step (only ByteLevel)", dt ? dt : "?");
        return 0;
    }
    char_decoder d = {0};
    if (char_model(t, model, path, err, el) ||
        parse_steps(t, &d, dec, "decoder", "decoders", decoder_step, path, err, el))
        return -1;
    return char_bytes(t, &d, path, err, el);
}

int mi_tok_sentencepiece_bytes(mi_tokenizer *t, const char *path, char *err, size_t el) {
    char_decoder d = {.from = {"\xE2\x96\x81"}, .nfrom = {3}, .to = {" "}, .nto = {1}, .n_replace = 1, .byte_fallback = 1};
    fallback_table(t);
    return char_bytes(t, &d, path, err, el);
}

void mi_tok_free_steps(mi_tokenizer *t) {
    for (int i = 0; i < t->n_norm; i++) { free(t->norm[i].a); free(t->norm[i].b); }
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
    t->n_norm = t->n_pre = 0;
}
