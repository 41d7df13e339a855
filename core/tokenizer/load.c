/* core/tokenizer/load.c — read a Hugging Face tokenizer.json (a BPE model,
 * byte level or SentencePiece's kind: pipeline.c reads the steps around it)
 * into the tables of core/tokenizer/internal.h, with resource limits
 * and one-line "PATH: problem" errors. Also tokenizer_config.json ids and the
 * small lookup functions. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/tokenizer/internal.h"
#include "core/util/file.h"

void mi_tok_err(char *err, size_t err_len, const char *path, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    int k = snprintf(err, err_len, "%s: ", path);
    if (k < 0 || (size_t)k >= err_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, err_len - (size_t)k, fmt, ap);
    va_end(ap);
    /* keep it one line whatever the message carried */
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order. cp_to_byte is its inverse over
 * code points 0..323 (-1 = not a byte-level character). */
static void byte_unicode_tables(uint32_t byte_to_cp[256], int16_t cp_to_byte[324]) {
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* Decode one UTF-8 char at s (valid input assumed: jansson checked it). */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80 || n < 2) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); return 2; }
    if (c < 0xF0 || n < 4) {
        if (n < 3) { *cp = c; return 1; }
        *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        return 3;
    }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

static int put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* ---- growable pools ---- */
typedef struct { char *p; size_t len, cap; } pool;
static int pool_add(pool *pl, const void *s, size_t n, int nul, uint32_t *off) {
    size_t need = pl->len + n + (nul ? 1 : 0);
    if (need > UINT32_MAX) return -1;
    if (need > pl->cap) {
        size_t c = pl->cap ? pl->cap : 1 << 16;
        while (c < need) c *= 2;
        char *q = realloc(pl->p, c);
        if (!q) return -1;
        pl->p = q; pl->cap = c;
    }
    *off = (uint32_t)pl->len;
    if (n) memcpy(pl->p + pl->len, s, n);
    pl->len += n;
    if (nul) pl->p[pl->len++] = 0;
    return 0;
}

/* ---- string map ---- */
static int32_t strmap_get(const mi_tokenizer *t, const char *s, size_t n) {
    uint32_t mask = t->strmap.cap - 1, i = mi_tok_hash(s, n) & mask;
    for (;;) {
        uint32_t v = t->strmap.slots[i];
        if (!v) return -1;
        uint32_t id = v - 1;
        if (t->str_len[id] == n && memcmp(t->strpool + t->str_off[id], s, n) == 0) return (int32_t)id;
        i = (i + 1) & mask;
    }
}

int32_t mi_tok_lookup(const mi_tokenizer *t, const char *s, size_t n) { return strmap_get(t, s, n); }

/* Insert id under its own string (str_off/str_len must be set); a previous
 * id with the same string is replaced, and returned (else -1). */
static int32_t strmap_put(mi_tokenizer *t, uint32_t id) {
    const char *s = t->strpool + t->str_off[id];
    size_t n = t->str_len[id];
    uint32_t mask = t->strmap.cap - 1, i = mi_tok_hash(s, n) & mask;
    for (;;) {
        uint32_t v = t->strmap.slots[i];
        if (!v) { t->strmap.slots[i] = id + 1; return -1; }
        uint32_t o = v - 1;
        if (t->str_len[o] == n && memcmp(t->strpool + t->str_off[o], s, n) == 0) {
            t->strmap.slots[i] = id + 1;
            return (int32_t)o;
        }
        i = (i + 1) & mask;
    }
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* A JSON field that must be a bool if present. */
static int opt_bool(json_t *o, const char *k, int *out) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) { *out = 0; return 0; }
    if (!json_is_boolean(v)) return -1;
    *out = json_is_true(v);
    return 0;
}

static int cmp_added(const void *a, const void *b) {
    const mi_tok_added *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first */
    return x->id - y->id;
}

void mi_tokenizer_free(mi_tokenizer *t) {
    if (!t) return;
    free(t->str_off); free(t->str_len); free(t->bytes_off); free(t->bytes_len);
    free(t->is_special); free(t->strpool); free(t->bytepool);
    free(t->strmap.slots); free(t->merges); free(t->added);
    mi_tok_free_steps(t);
    if (t->cache) pthread_mutex_destroy(&t->cache_lock);
    free(t->cache);
    free(t->chat_template);
    free(t);
}

/* Read the whole file with the size limit (the shared reader: a FIFO or a
 * device is refused, never waited on). */
static char *read_file(const char *path, size_t *len, char *err, size_t el) {
    char *buf = mi_file_read_all(path, 0, MI_TOK_MAX_FILE_BYTES, NULL, len, err, el);
    if (buf && *len == 0) { mi_tok_err(err, el, path, "file is empty"); free(buf); return NULL; }
    return buf;
}

static mi_tokenizer *load_root(json_t *root, const char *path, char *err, size_t el);

mi_tokenizer *mi_tokenizer_load(const char *path, char *err, size_t el) {
    if (err && el) err[0] = 0;
    if (!path) { mi_tok_err(err, el, "(null)", "no path given"); return NULL; }
    size_t flen;
    char *text = read_file(path, &flen, err, el);
    if (!text) return NULL;
    json_error_t je;
    json_t *root = json_loadb(text, flen, 0, &je);
    free(text);
    if (!root) { mi_tok_err(err, el, path, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text); return NULL; }
    return load_root(root, path, err, el);
}

mi_tokenizer *mi_tokenizer_load_json(const json_t *root, const char *name, char *err, size_t el) {
    if (err && el) err[0] = 0;
    if (!name) name = "(tokenizer)";
    if (!root) { mi_tok_err(err, el, name, "no tokenizer JSON given"); return NULL; }
    return load_root(json_incref((json_t *)root), name, err, el);
}

/* The parts of load_root: each sets err (naming path) and returns -1 on a
 * tokenizer.json it refuses. */
#define RFAIL(...) do { mi_tok_err(err, el, path, __VA_ARGS__); return -1; } while (0)

/* The fields load_root reads, checked for shape (byte-level BPE only). */
typedef struct tok_json {
    json_t *model, *vocab, *merges, *added;
    size_t nv, na;
} tok_json;

static int check_fields(json_t *root, tok_json *j, const char *path, char *err, size_t el) {
    if (!json_is_object(root)) RFAIL("top level is not a JSON object");
    json_t *model = j->model = json_object_get(root, "model");
    if (!model) RFAIL("missing field \"model\"");
    if (!json_is_object(model)) RFAIL("\"model\" is not an object");
    json_t *mtype = json_object_get(model, "type");
    if (mtype && !json_is_null(mtype) && (!json_is_string(mtype) || strcmp(json_string_value(mtype), "BPE")))
        RFAIL("model.type is not \"BPE\" (only BPE is supported: byte level or SentencePiece's)");
    j->vocab = json_object_get(model, "vocab");
    if (!j->vocab) RFAIL("missing field \"model.vocab\"");
    if (!json_is_object(j->vocab)) RFAIL("\"model.vocab\" is not an object");
    j->merges = json_object_get(model, "merges");
    if (!j->merges) RFAIL("missing field \"model.merges\"");
    if (!json_is_array(j->merges)) RFAIL("\"model.merges\" is not an array");
    json_t *im = json_object_get(model, "ignore_merges");
    if (im && !json_is_null(im) && !json_is_boolean(im)) RFAIL("model.ignore_merges is not a bool");
    json_t *d = json_object_get(model, "dropout");
    if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0.0)) RFAIL("model.dropout is not supported");
    j->nv = json_object_size(j->vocab);
    if (j->nv == 0) RFAIL("\"model.vocab\" is empty");
    if (j->nv > MI_TOK_MAX_VOCAB) RFAIL("model.vocab has %zu entries, over the limit of %u", j->nv, MI_TOK_MAX_VOCAB);
    json_t *added = j->added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added)) RFAIL("\"added_tokens\" is not an array");
    j->na = json_is_array(added) ? json_array_size(added) : 0;
    if (j->na > MI_TOK_MAX_VOCAB) RFAIL("added_tokens has %zu entries, over the limit", j->na);
    return 0;
}

static int alloc_tables(mi_tokenizer *t, uint64_t V, size_t n_strings, const char *path, char *err, size_t el);

/* Pass 1: every id and string checked; the tables sized for the largest id. */
static int size_tables(mi_tokenizer *t, const tok_json *j, const char *path, char *err, size_t el) {
    uint64_t maxid = 0;
    const char *key; json_t *val;
    json_object_foreach(j->vocab, key, val) {
        if (!json_is_integer(val)) RFAIL("model.vocab[\"%.60s\"]: id is not an integer", key);
        json_int_t id = json_integer_value(val);
        if (id < 0 || id >= (json_int_t)MI_TOK_MAX_VOCAB) RFAIL("model.vocab[\"%.60s\"]: id %lld out of range [0, %u)", key, (long long)id, MI_TOK_MAX_VOCAB);
        if (strlen(key) > MI_TOK_MAX_TOKEN_BYTES) RFAIL("model.vocab: a token string is longer than %u bytes", MI_TOK_MAX_TOKEN_BYTES);
        if (strlen(key) == 0) RFAIL("model.vocab: empty token string");
        if ((uint64_t)id > maxid) maxid = (uint64_t)id;
    }
    for (size_t i = 0; i < j->na; i++) {
        json_t *a = json_array_get(j->added, i);
        if (!json_is_object(a)) RFAIL("added_tokens[%zu] is not an object", i);
        json_t *id = json_object_get(a, "id");
        json_t *c = json_object_get(a, "content");
        if (!json_is_integer(id)) RFAIL("added_tokens[%zu].id is missing or not an integer", i);
        if (!json_is_string(c)) RFAIL("added_tokens[%zu].content is missing or not a string", i);
        json_int_t v = json_integer_value(id);
        if (v < 0 || v >= (json_int_t)MI_TOK_MAX_VOCAB) RFAIL("added_tokens[%zu].id %lld out of range", i, (long long)v);
        size_t cl = json_string_length(c);
        if (cl == 0) RFAIL("added_tokens[%zu].content is empty", i);
        if (cl > MI_TOK_MAX_TOKEN_BYTES) RFAIL("added_tokens[%zu].content is longer than %u bytes", i, MI_TOK_MAX_TOKEN_BYTES);
        if (strlen(json_string_value(c)) != cl) RFAIL("added_tokens[%zu].content contains a NUL character", i);
        if ((uint64_t)v > maxid) maxid = (uint64_t)v;
    }
    return alloc_tables(t, maxid + 1, j->nv + j->na, path, err, el);
}

/* The per-id tables for ids [0, V), and the string map for n_strings
 * strings (at most 2/3 full: half full doubled it, 2 MiB for a 151k
 * vocabulary, for no encode speed that could be measured). */
static int alloc_tables(mi_tokenizer *t, uint64_t V, size_t n_strings, const char *path, char *err, size_t el) {
    t->vocab_size = (uint32_t)V;
    t->str_off = malloc(V * sizeof *t->str_off);
    t->str_len = calloc(V, sizeof *t->str_len);
    t->bytes_off = calloc(V, sizeof *t->bytes_off);
    t->bytes_len = calloc(V, sizeof *t->bytes_len);
    t->is_special = calloc(V, 1);
    if (!t->str_off || !t->str_len || !t->bytes_off || !t->bytes_len || !t->is_special) RFAIL("out of memory");
    for (size_t i = 0; i < V; i++) t->str_off[i] = UINT32_MAX;
    t->strmap.cap = pow2_at_least((uint64_t)n_strings + n_strings / 2 + 1);
    t->strmap.slots = calloc(t->strmap.cap, sizeof *t->strmap.slots);
    if (!t->strmap.slots) RFAIL("out of memory");
    return 0;
}

/* The token strings and their decoded bytes as they are filled in. */
typedef struct tok_fill {
    mi_tokenizer *t;
    pool sp, bp;          /* token strings (NUL-ended), decoded bytes */
    unsigned char *tmp;   /* MI_TOK_MAX_TOKEN_BYTES: one token's decoded bytes */
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
} tok_fill;

/* Token id's string s[0, n) and its decoded bytes: the byte-level inverse
 * when every character is a byte-level character, else the raw UTF-8 (HF's
 * ByteLevel decoder does exactly this per token). -1 out of memory. */
static int set_token(tok_fill *f, size_t id, const char *s, size_t n) {
    mi_tokenizer *t = f->t;
    uint32_t off;
    if (pool_add(&f->sp, s, n, 1, &off)) return -1;
    t->str_off[id] = off; t->str_len[id] = (uint32_t)n;
    size_t k = 0, j = 0; int all = 1;
    const unsigned char *u = (const unsigned char *)s;
    while (j < n) {
        uint32_t cp; j += utf8_next(u + j, n - j, &cp);
        if (cp >= 324 || f->cp_to_byte[cp] < 0) { all = 0; break; }
        f->tmp[k++] = (unsigned char)f->cp_to_byte[cp];
    }
    const void *src = all ? (const void *)f->tmp : (const void *)s;
    size_t bl = all ? k : n;
    if (pool_add(&f->bp, src, bl, 0, &off)) return -1;
    t->bytes_off[id] = off; t->bytes_len[id] = (uint32_t)bl;
    if (bl > t->max_token_bytes) t->max_token_bytes = bl;
    return 0;
}

/* Pass 2: the vocab's strings, then the added tokens (one may restate a
 * vocab entry with the same id: one string is kept). */
static int fill_tokens(tok_fill *f, const tok_json *j, const char *path, char *err, size_t el) {
    mi_tokenizer *t = f->t;
    const char *key; json_t *val;
    json_object_foreach(j->vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (t->str_off[id] != UINT32_MAX) RFAIL("model.vocab: id %lld is used twice", (long long)id);
        if (set_token(f, id, key, strlen(key))) RFAIL("out of memory");
    }
    t->added = calloc(j->na ? j->na : 1, sizeof *t->added);
    if (!t->added) RFAIL("out of memory");
    for (size_t i = 0; i < j->na; i++) {
        json_t *a = json_array_get(j->added, i);
        json_t *c = json_object_get(a, "content");
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        const char *s = json_string_value(c);
        size_t cl = json_string_length(c);
        int sp_, ls, rs, sw;
        if (opt_bool(a, "special", &sp_) || opt_bool(a, "lstrip", &ls) || opt_bool(a, "rstrip", &rs) || opt_bool(a, "single_word", &sw))
            RFAIL("added_tokens[%zu]: special/lstrip/rstrip/single_word must be booleans", i);
        if (t->str_off[id] == UINT32_MAX || t->str_len[id] != cl || memcmp(f->sp.p + t->str_off[id], s, cl))
            if (set_token(f, id, s, cl)) RFAIL("out of memory");
        t->is_special[id] = (unsigned char)sp_;
        mi_tok_added *ad = &t->added[t->n_added++];
        ad->id = (int32_t)id; ad->len = (uint32_t)cl;
        ad->special = (unsigned char)sp_; ad->lstrip = (unsigned char)ls;
        ad->rstrip = (unsigned char)rs; ad->single_word = (unsigned char)sw;
        ad->content = NULL; /* set below, once strpool stops moving */
    }
    return 0;
}

/* The pools handed to t (they stop moving), and the added tokens pointed
 * at their strings and sorted (longest first). */
static void hand_pools(tok_fill *f) {
    mi_tokenizer *t = f->t;
    t->strpool = f->sp.p; f->sp.p = NULL;
    t->bytepool = (unsigned char *)f->bp.p; f->bp.p = NULL;
    for (uint32_t i = 0; i < t->n_added; i++) {
        mi_tok_added *ad = &t->added[i];
        ad->content = t->strpool + t->str_off[ad->id];
        t->added_first[(unsigned char)ad->content[0]] = 1;
    }
    if (t->n_added) qsort(t->added, t->n_added, sizeof *t->added, cmp_added);
}

/* The added tokens into the string map after the vocabulary (an added token
 * wins its string), then the one-byte tokens found; vocab names the
 * vocabulary in messages. */
static int index_added_bytes(tok_fill *f, const char *vocab, const char *path, char *err, size_t el) {
    mi_tokenizer *t = f->t;
    for (uint32_t i = 0; i < t->n_added; i++) strmap_put(t, (uint32_t)t->added[i].id);
    for (int b = 0; b < 256 && t->byte_level; b++) {
        char u[4];
        int k = put_utf8(f->byte_to_cp[b], u);
        t->byte_id[b] = strmap_get(t, u, (size_t)k);
        if (t->byte_id[b] < 0) RFAIL("%s has no byte-level token for byte 0x%02X (not a byte-level BPE vocabulary)", vocab, b);
    }
    return 0;
}

/* The pools handed to t, the string map filled (vocab first, then added
 * tokens), and the one-byte tokens found. */
static int index_tokens(tok_fill *f, const tok_json *j, const char *path, char *err, size_t el) {
    hand_pools(f);
    const char *key; json_t *val;
    json_object_foreach(j->vocab, key, val) strmap_put(f->t, (uint32_t)json_integer_value(val));
    return index_added_bytes(f, "model.vocab", path, err, el);
}

/* "a b" (s[0, n)) as its two tokens; -1 unless there is exactly one space. */
static int split_merge(const char *s, size_t n, const char **a, size_t *la, const char **b, size_t *lb) {
    const char *spc = memchr(s, ' ', n);
    if (!spc || memchr(spc + 1, ' ', n - (size_t)(spc + 1 - s))) return -1;
    *a = s; *la = (size_t)(spc - s); *b = spc + 1; *lb = n - (size_t)(spc + 1 - s);
    return 0;
}

/* a + b -> r at rank into the merge table; a repeated pair keeps its
 * first rank. */
static void merge_insert(mi_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t r) {
    uint64_t mk = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = mk * 0x9E3779B97F4A7C15ull;
    uint32_t mask = t->merge_cap - 1, j = (uint32_t)(h >> 32) & mask;
    while (t->merges[j].key != UINT64_MAX && t->merges[j].key != mk) j = (j + 1) & mask;
    if (t->merges[j].key == UINT64_MAX) {
        t->merges[j].key = mk; t->merges[j].rank = rank; t->merges[j].result = r;
    }
}

/* Merge i of a and b into the merge table: both tokens and their
 * concatenation (cat: room for two tokens) in the vocab; a repeated pair
 * keeps its first (best) rank. merges and vocab name the lists in messages. */
static int put_merge(mi_tokenizer *t, size_t i, const char *a, size_t la, const char *b, size_t lb, char *cat,
                     const char *merges, const char *vocab, const char *path, char *err, size_t el) {
    if (la > MI_TOK_MAX_TOKEN_BYTES || lb > MI_TOK_MAX_TOKEN_BYTES) RFAIL("%s[%zu]: token longer than %u bytes", merges, i, MI_TOK_MAX_TOKEN_BYTES);
    int32_t ia = strmap_get(t, a, la), ib = strmap_get(t, b, lb);
    memcpy(cat, a, la); memcpy(cat + la, b, lb);
    int32_t ir = strmap_get(t, cat, la + lb);
    if (ia < 0 || ib < 0 || ir < 0)
        /* a and b are not NUL-terminated at la/lb for "a b" strings */
        RFAIL("%s[%zu]: \"%.*s\" + \"%.*s\": %s not in %s", merges, i,
              (int)(la < 40 ? la : 40), a, (int)(lb < 40 ? lb : 40), b,
              ia < 0 ? "left token" : ib < 0 ? "right token" : "merged token", vocab);
    merge_insert(t, ia, ib, (uint32_t)i, ir);
    return 0;
}

/* Merge i ("a b" or ["a", "b"]) of tokenizer.json into the merge table. */
static int add_merge(mi_tokenizer *t, json_t *m, size_t i, char *cat, const char *path, char *err, size_t el) {
    const char *a, *b;
    size_t la, lb;
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        /* up to a NUL, as the "a b" form is read */
        if (split_merge(s, strlen(s), &a, &la, &b, &lb)) RFAIL("model.merges[%zu]: \"%.60s\" is not two tokens separated by one space", i, s);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
        a = json_string_value(json_array_get(m, 0)); la = json_string_length(json_array_get(m, 0));
        b = json_string_value(json_array_get(m, 1)); lb = json_string_length(json_array_get(m, 1));
    } else {
        RFAIL("model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", i);
    }
    return put_merge(t, i, a, la, b, lb, cat, "model.merges", "model.vocab", path, err, el);
}

/* The merge table for nm merges (at most 2/3 full, as the string map: 4
 * MiB for 151k merges, where half full took 8), empty, and room for two
 * tokens side by side in *cat. */
static int alloc_merges(mi_tokenizer *t, size_t nm, char **cat, const char *merges, const char *path, char *err, size_t el) {
    if (nm > MI_TOK_MAX_VOCAB) RFAIL("%s has %zu entries, over the limit", merges, nm);
    t->merge_cap = pow2_at_least((uint64_t)nm + nm / 2 + 1);
    t->merges = malloc((size_t)t->merge_cap * sizeof *t->merges);
    if (!t->merges) RFAIL("out of memory");
    for (uint32_t i = 0; i < t->merge_cap; i++) t->merges[i].key = UINT64_MAX;
    *cat = malloc(2 * (size_t)MI_TOK_MAX_TOKEN_BYTES + 2);
    if (!*cat) RFAIL("out of memory");
    return 0;
}

static int load_merges(mi_tokenizer *t, json_t *merges, const char *path, char *err, size_t el) {
    size_t nm = json_array_size(merges);
    char *cat;
    if (alloc_merges(t, nm, &cat, "model.merges", path, err, el)) return -1;
    int rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) rc = add_merge(t, json_array_get(merges, i), i, cat, path, err, el);
    free(cat);
    return rc;
}

/* A TemplateProcessing post-processor's "single" (what HF's tokenizer(text)
 * adds with add_special_tokens=True): the sequence alone, or one special
 * token before it (a <|begin_of_text|> or <bos>). Anything
 * after the sequence, or more than one token before it, is refused: a
 * prompt encoded without it would be a silent wrong answer. */
static int template_processing(mi_tokenizer *t, json_t *pp, const char *path, char *err, size_t el) {
    json_t *single = json_object_get(pp, "single");
    size_t i, n = json_array_size(single), seq_at = n;
    json_t *item;
    if (!json_is_array(single)) RFAIL("post_processor TemplateProcessing has no \"single\" list");
    json_array_foreach(single, i, item) if (json_object_get(item, "Sequence") && seq_at == n) seq_at = i;
    if (seq_at == n || seq_at > 1 || seq_at + 1 != n)
        RFAIL("post_processor TemplateProcessing: \"single\" of %zu items with the sequence at %zu is not supported "
              "(the sequence alone, or after one special token)", n, seq_at);
    if (seq_at == 0) return 0;
    const char *tok = json_string_value(json_object_get(json_object_get(json_array_get(single, 0), "SpecialToken"), "id"));
    if (!tok) RFAIL("post_processor TemplateProcessing: \"single\"[0] is not a {\"SpecialToken\": {\"id\": string}}");
    json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), tok), "ids");
    int32_t id = json_array_size(ids) == 1 && json_is_integer(json_array_get(ids, 0))
                     ? (int32_t)json_integer_value(json_array_get(ids, 0))
                     : strmap_get(t, tok, strlen(tok));
    if (id < 0 || (uint32_t)id >= t->vocab_size || t->str_off[id] == UINT32_MAX)
        RFAIL("post_processor TemplateProcessing: token \"%.60s\" is not in the vocabulary", tok);
    t->prefix_id = id;
    return 0;
}

/* post_processor: none, ByteLevel (offsets only), TemplateProcessing, or a
 * Sequence of those. */
static int post_processor(mi_tokenizer *t, json_t *pp, int depth, const char *path, char *err, size_t el) {
    if (!pp || json_is_null(pp)) return 0;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && !strcmp(type, "ByteLevel")) return 0;
    if (type && !strcmp(type, "TemplateProcessing")) return template_processing(t, pp, path, err, el);
    if (type && !strcmp(type, "Sequence") && depth == 0) {
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(pp, "processors"), i, x) if (post_processor(t, x, 1, path, err, el)) return -1;
        return 0;
    }
    RFAIL("post_processor type \"%s\" is not supported (ByteLevel, TemplateProcessing, a Sequence of them)",
          type ? type : "?");
}

/* normalizer, pre_tokenizer, decoder (pipeline.c) and post_processor */
static int load_pipeline(mi_tokenizer *t, json_t *root, const char *path, char *err, size_t el) {
    return mi_tok_load_steps(t, root, path, err, el) ||
           post_processor(t, json_object_get(root, "post_processor"), 0, path, err, el) ? -1 : 0;
}

/* The word cache and its lock: the last part of a load. */
static int finish_tables(mi_tokenizer *t, const char *path, char *err, size_t el) {
    t->cache = calloc(MI_TOK_CACHE_SLOTS, sizeof *t->cache);
    if (!t->cache) RFAIL("out of memory");
    pthread_mutex_init(&t->cache_lock, NULL);
    return 0;
}

/* ---- a vocabulary given as arrays (mi_tokenizer_load_arrays) ---- */

static int is_added_kind(int k) { return k == MI_TOK_KIND_SPECIAL || k == MI_TOK_KIND_ADDED; }

/* Pass 1, kinds only: the vocabulary's size (the last id kept, + 1) and
 * how many of its tokens are normal and added. */
static int array_counts(const mi_tok_arrays *a, uint64_t *V, size_t *nv, size_t *na, const char *path, char *err,
                        size_t el) {
    if (a->n_tokens == 0 || a->n_tokens > MI_TOK_MAX_VOCAB)
        RFAIL("%s has %zu entries (1..%u)", a->tokens_name, a->n_tokens, MI_TOK_MAX_VOCAB);
    *V = 0; *nv = *na = 0;
    for (size_t i = 0; i < a->n_tokens; i++) {
        const char *s; size_t n;
        int k = a->token(a->ctx, i, &s, &n);
        if (k == MI_TOK_KIND_SKIP) continue;
        if (is_added_kind(k)) (*na)++; else (*nv)++;
        *V = i + 1;
    }
    if (*nv == 0) RFAIL("%s holds no normal token", a->tokens_name);
    return 0;
}

/* Pass 2, in id order: each kept token's string checked and stored; a
 * normal one into the string map at once (a repeat is refused), an added
 * one listed (index_added_bytes maps it after them all, as tokenizer.json's
 * added_tokens come after model.vocab). */
static int array_fill(tok_fill *f, const mi_tok_arrays *a, size_t na, const char *path, char *err, size_t el) {
    mi_tokenizer *t = f->t;
    t->added = calloc(na ? na : 1, sizeof *t->added);
    if (!t->added) RFAIL("out of memory");
    for (size_t i = 0; i < a->n_tokens; i++) {
        const char *s; size_t n;
        int k = a->token(a->ctx, i, &s, &n);
        if (k == MI_TOK_KIND_SKIP) continue;
        if (n == 0 || n > MI_TOK_MAX_TOKEN_BYTES || memchr(s, 0, n))
            RFAIL("%s[%zu] is empty, over %u bytes or holds a NUL", a->tokens_name, i, MI_TOK_MAX_TOKEN_BYTES);
        if (mi_tok_utf8_valid_prefix((const unsigned char *)s, n) != n) RFAIL("%s[%zu] is not valid UTF-8", a->tokens_name, i);
        if (set_token(f, i, s, n)) RFAIL("out of memory");
        if (is_added_kind(k)) {
            mi_tok_added *ad = &t->added[t->n_added++];
            t->is_special[i] = k == MI_TOK_KIND_SPECIAL;
            ad->id = (int32_t)i; ad->len = (uint32_t)n; ad->special = t->is_special[i];
            continue; /* content: hand_pools; lstrip, rstrip, single_word: 0 */
        }
        t->strpool = f->sp.p; /* the map reads the pool as it grows (f still owns it) */
        int32_t dup = strmap_put(t, (uint32_t)i);
        t->strpool = NULL;
        if (dup >= 0) RFAIL("%s[%zu] repeats an earlier token", a->tokens_name, i);
    }
    return 0;
}

/* Pass 3: the merges, "a b" each, rank = position. */
static int array_merges(mi_tokenizer *t, const mi_tok_arrays *a, const char *path, char *err, size_t el) {
    char *cat;
    if (alloc_merges(t, a->n_merges, &cat, a->merges_name, path, err, el)) return -1;
    int rc = 0;
    for (size_t i = 0; i < a->n_merges && rc == 0; i++) {
        const char *s, *l, *r;
        size_t n, ll, lr;
        a->merge(a->ctx, i, &s, &n);
        rc = -1;
        if (memchr(s, 0, n) || mi_tok_utf8_valid_prefix((const unsigned char *)s, n) != n)
            mi_tok_err(err, el, path, "%s[%zu] is not valid UTF-8 text", a->merges_name, i);
        else if (split_merge(s, n, &l, &ll, &r, &lr))
            mi_tok_err(err, el, path, "%s[%zu]: \"%.*s\" is not two tokens separated by one space", a->merges_name, i,
                    (int)(n < 60 ? n : 60), s);
        else
            rc = put_merge(t, i, l, ll, r, lr, cat, a->merges_name, a->tokens_name, path, err, el);
    }
    free(cat);
    return rc;
}
/* SentencePiece's vocabulary: every split of a token into two tokens is a
 * merge, ranked by the token's score (higher first; equal scores share a
 * rank, so the heap takes the leftmost pair, as llama.cpp's bigram queue
 * does). Each pass walks the splits at character boundaries: the first
 * counts, the second inserts. */
typedef struct { float score; int32_t id; } scored;
static int cmp_scored(const void *x, const void *y) {
    const scored *a = x, *b = y;
    return a->score > b->score ? -1 : a->score < b->score ? 1 : a->id - b->id;
}

static size_t token_splits(mi_tokenizer *t, int32_t id, uint32_t rank) {
    const char *s = t->strpool + t->str_off[id];
    size_t n = t->str_len[id], found = 0;
    for (size_t k = 1; k < n; k++) {
        if (((unsigned char)s[k] & 0xC0) == 0x80) continue; /* inside a character */
        int32_t a = strmap_get(t, s, k), b = a >= 0 ? strmap_get(t, s + k, n - k) : -1;
        if (b < 0) continue;
        found++;
        if (t->merges) merge_insert(t, a, b, rank, id);
    }
    return found;
}

static int score_merges(mi_tokenizer *t, const mi_tok_arrays *a, const char *path, char *err, size_t el) {
    scored *v = malloc((size_t)t->vocab_size * sizeof *v);
    if (!v) RFAIL("out of memory");
    size_t nv = 0, nm = 0;
    for (uint32_t i = 0; i < t->vocab_size; i++) {
        if (t->str_off[i] == UINT32_MAX) continue;
        float sc = a->score(a->ctx, i);
        if (sc != sc) { free(v); RFAIL("%s: score %u is not a number", a->tokens_name, i); }
        v[nv].score = sc;
        v[nv++].id = (int32_t)i;
    }
    qsort(v, nv, sizeof *v, cmp_scored);
    for (size_t i = 0; i < nv; i++) nm += token_splits(t, v[i].id, 0);
    char *cat;
    if (alloc_merges(t, nm, &cat, "merges made of the scores", path, err, el)) { free(v); return -1; }
    free(cat);
    uint32_t rank = 0;
    for (size_t i = 0; i < nv; i++) {
        if (i && v[i].score != v[i - 1].score) rank++;
        token_splits(t, v[i].id, rank);
    }
    free(v);
    return 0;
}

/* The steps a SentencePiece vocabulary implies (mi_tok_arrays). */
static int sentencepiece_steps(mi_tokenizer *t, const mi_tok_arrays *a, const char *path, char *err, size_t el) {
    static const char META[] = "\xE2\x96\x81"; /* U+2581 */
    if (a->nfc || a->split_regex || a->n_merges || !a->score)
        RFAIL("a SentencePiece vocabulary takes scores, not merges, a regex or NFC");
    if (a->space_prefix) {
        mi_tok_norm *p = &t->norm[t->n_norm++];
        p->kind = MI_TOK_NORM_PREPEND;
        if (!(p->a = strdup(META)) || !(p->b = strdup(""))) RFAIL("out of memory");
        p->na = 3;
    }
    mi_tok_norm *r = &t->norm[t->n_norm++];
    r->kind = MI_TOK_NORM_REPLACE;
    if (!(r->a = strdup(" ")) || !(r->b = strdup(META))) RFAIL("out of memory");
    r->na = 1;
    r->nb = 3;
    if (a->unk_id >= 0 && ((uint32_t)a->unk_id >= t->vocab_size || t->str_off[a->unk_id] == UINT32_MAX))
        RFAIL("the unknown token id %d is not in %s", (int)a->unk_id, a->tokens_name);
    t->unk_id = a->unk_id;
    t->byte_fallback = 1;
    t->strip_lead = a->space_prefix ? 1 : 0;
    return mi_tok_sentencepiece_bytes(t, path, err, el) || score_merges(t, a, path, err, el) ? -1 : 0;
}
#undef RFAIL

mi_tokenizer *mi_tokenizer_load_arrays(const mi_tok_arrays *arrays, const char *name, char *err, size_t el) {
    if (err && el) err[0] = 0;
    const char *path = name ? name : "(tokenizer)";
    if (!arrays || !arrays->token || (arrays->n_merges && !arrays->merge)) {
        mi_tok_err(err, el, path, "no token arrays given");
        return NULL;
    }
    mi_tok_arrays a = *arrays;
    if (!a.tokens_name) a.tokens_name = "tokens";
    if (!a.merges_name) a.merges_name = "merges";
    mi_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { mi_tok_err(err, el, path, "out of memory"); return NULL; }
    t->eos_id = t->bos_id = t->pad_id = t->prefix_id = t->unk_id = -1;
    t->byte_level = !arrays->sentencepiece;
    tok_fill f = {.t = t};
    uint64_t V;
    size_t nv, na;
    if (array_counts(&a, &V, &nv, &na, path, err, el) || alloc_tables(t, V, nv + na, path, err, el)) goto fail;
    byte_unicode_tables(f.byte_to_cp, f.cp_to_byte);
    if (!(f.tmp = malloc(MI_TOK_MAX_TOKEN_BYTES))) { mi_tok_err(err, el, path, "out of memory"); goto fail; }
    if (array_fill(&f, &a, na, path, err, el)) goto fail;
    hand_pools(&f);
    if (index_added_bytes(&f, a.tokens_name, path, err, el)) goto fail;
    if (a.sentencepiece) {
        if (sentencepiece_steps(t, &a, path, err, el)) goto fail;
    } else if (array_merges(t, &a, path, err, el)) {
        goto fail;
    }
    /* the pipeline tokenizer.json would give: normalizer NFC or none;
     * pre_tokenizer Split(regex, Isolated) then ByteLevel without a regex */
    if (a.nfc) t->norm[t->n_norm++].kind = MI_TOK_NORM_NFC;
    if (a.split_regex && mi_tok_add_split(t, a.split_regex, strlen(a.split_regex), 0, MI_TOK_ISOLATED, path, err, el))
        goto fail;
    free(f.tmp);
    f.tmp = NULL;
    if (finish_tables(t, path, err, el)) goto fail;
    return t;
fail:
    free(f.tmp); free(f.sp.p); free(f.bp.p);
    mi_tokenizer_free(t);
    return NULL;
}

/* Builds the tokenizer from a parsed tokenizer.json; takes root's reference. */
static mi_tokenizer *load_root(json_t *root, const char *path, char *err, size_t el) {
    mi_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { mi_tok_err(err, el, path, "out of memory"); json_decref(root); return NULL; }
    t->eos_id = t->bos_id = t->pad_id = t->prefix_id = t->unk_id = -1;
    tok_json j = {0};
    tok_fill f = {.t = t};
    if (check_fields(root, &j, path, err, el) || size_tables(t, &j, path, err, el)) goto fail;
    t->byte_level = mi_tok_byte_level(root);
    t->ignore_merges = json_is_true(json_object_get(j.model, "ignore_merges"));
    byte_unicode_tables(f.byte_to_cp, f.cp_to_byte);
    if (!(f.tmp = malloc(MI_TOK_MAX_TOKEN_BYTES))) { mi_tok_err(err, el, path, "out of memory"); goto fail; }
    if (fill_tokens(&f, &j, path, err, el) || index_tokens(&f, &j, path, err, el) ||
        load_merges(t, j.merges, path, err, el) || load_pipeline(t, root, path, err, el))
        goto fail;
    free(f.tmp);
    f.tmp = NULL;
    if (finish_tables(t, path, err, el)) goto fail;
    json_decref(root);
    return t;
fail:
    free(f.tmp); free(f.sp.p); free(f.bp.p);
    json_decref(root);
    mi_tokenizer_free(t);
    return NULL;
}

/* ---- tokenizer_config.json ---- */
static int config_token(mi_tokenizer *t, json_t *cfg, const char *field, int32_t *out,
                        const char *path, char *err, size_t el) {
    json_t *v = json_object_get(cfg, field);
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) { mi_tok_err(err, el, path, "\"%s\" is not a string or {\"content\": string}", field); return -1; }
    int32_t id = strmap_get(t, json_string_value(v), json_string_length(v));
    if (id < 0) { mi_tok_err(err, el, path, "\"%s\": token \"%.60s\" is not in the vocabulary", field, json_string_value(v)); return -1; }
    *out = id;
    return 0;
}

/* "chat_template": a string, or [{"name", "template"}] (the "default" one);
 * absent: chat_template.jinja in the same folder, if there is one. */
static int config_chat_template(mi_tokenizer *t, json_t *cfg, const char *path, char *err, size_t el) {
    json_t *v = json_object_get(cfg, "chat_template");
    const char *text = NULL;
    char *owned = NULL;
    if (json_is_string(v)) {
        text = json_string_value(v);
    } else if (json_is_array(v)) {
        size_t i; json_t *e;
        json_array_foreach(v, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *tpl = json_string_value(json_object_get(e, "template"));
            if (!tpl) { mi_tok_err(err, el, path, "\"chat_template\"[%zu] has no \"template\" string", i); return -1; }
            if (!text || (name && !strcmp(name, "default"))) text = tpl;
        }
    } else if (v && !json_is_null(v)) {
        mi_tok_err(err, el, path, "\"chat_template\" is not a string or a list of {name, template}");
        return -1;
    } else {
        const char *slash = strrchr(path, '/');
        char jinja[4096];
        snprintf(jinja, sizeof jinja, "%.*schat_template.jinja", slash ? (int)(slash - path + 1) : 0, path);
        size_t len;
        struct stat jst;
        if (stat(jinja, &jst) != 0) return 0; /* none declared */
        if (!(owned = read_file(jinja, &len, err, el))) return -1;
        text = owned;
    }
    free(t->chat_template);
    t->chat_template = owned ? owned : text ? strdup(text) : NULL;
    if (text && !t->chat_template) { mi_tok_err(err, el, path, "out of memory"); return -1; }
    return 0;
}

int mi_tokenizer_load_config(mi_tokenizer *t, const char *path, char *err, size_t el) {
    if (err && el) err[0] = 0;
    if (!t || !path) { mi_tok_err(err, el, path ? path : "(null)", "no tokenizer or path"); return -1; }
    size_t flen;
    char *text = read_file(path, &flen, err, el);
    if (!text) return -1;
    json_error_t je;
    json_t *root = json_loadb(text, flen, JSON_DECODE_INT_AS_REAL, &je);
    free(text);
    if (!root) { mi_tok_err(err, el, path, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text); return -1; }
    int rc = -1;
    int32_t eos = -1, bos = -1, pad = -1;
    if (!json_is_object(root)) mi_tok_err(err, el, path, "top level is not a JSON object");
    else if (!config_token(t, root, "eos_token", &eos, path, err, el) &&
             !config_token(t, root, "bos_token", &bos, path, err, el) &&
             !config_token(t, root, "pad_token", &pad, path, err, el)) {
        t->eos_id = eos; t->bos_id = bos; t->pad_id = pad;
        rc = config_chat_template(t, root, path, err, el);
    }
    json_decref(root);
    return rc;
}

int mi_tokenizer_set_config(mi_tokenizer *t, int32_t eos, int32_t bos, int32_t pad,
                            const char *chat_template, const char *name, char *err, size_t el) {
    if (err && el) err[0] = 0;
    if (!name) name = "(tokenizer)";
    if (!t) { mi_tok_err(err, el, name, "no tokenizer"); return -1; }
    const int32_t ids[3] = {eos, bos, pad};
    static const char *const what[3] = {"eos", "bos", "padding"};
    for (int i = 0; i < 3; i++)
        if (ids[i] < -1 || (ids[i] >= 0 && (uint32_t)ids[i] >= t->vocab_size)) {
            mi_tok_err(err, el, name, "%s token id %d is outside the vocabulary (%u tokens)", what[i],
                    (int)ids[i], t->vocab_size);
            return -1;
        }
    char *ct = NULL;
    if (chat_template && !(ct = strdup(chat_template))) { mi_tok_err(err, el, name, "out of memory"); return -1; }
    t->eos_id = eos; t->bos_id = bos; t->pad_id = pad;
    free(t->chat_template);
    t->chat_template = ct;
    return 0;
}

int mi_tokenizer_set_prefix(mi_tokenizer *t, int32_t id, const char *name, char *err, size_t el) {
    if (err && el) err[0] = 0;
    if (!name) name = "(tokenizer)";
    if (!t) { mi_tok_err(err, el, name, "no tokenizer"); return -1; }
    if (id < -1 || (id >= 0 && ((uint32_t)id >= t->vocab_size || t->str_off[id] == UINT32_MAX))) {
        mi_tok_err(err, el, name, "the token put before a prompt (id %d) is not in the vocabulary (%u tokens)", (int)id,
                t->vocab_size);
        return -1;
    }
    t->prefix_id = id;
    return 0;
}

int32_t mi_tokenizer_prefix_id(const mi_tokenizer *t) { return t ? t->prefix_id : -1; }

const char *mi_tokenizer_chat_template(const mi_tokenizer *t) { return t ? t->chat_template : NULL; }

/* ---- lookups ---- */
size_t mi_tokenizer_vocab_size(const mi_tokenizer *t) { return t ? t->vocab_size : 0; }
int32_t mi_tokenizer_token_id(const mi_tokenizer *t, const char *s) {
    return (t && s) ? strmap_get(t, s, strlen(s)) : -1;
}
const char *mi_tokenizer_token_str(const mi_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (uint32_t)id >= t->vocab_size || t->str_off[id] == UINT32_MAX) return NULL;
    return t->strpool + t->str_off[id];
}
const unsigned char *mi_tokenizer_token_bytes(const mi_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || (uint32_t)id >= t->vocab_size || t->str_off[id] == UINT32_MAX) { if (len) *len = 0; return NULL; }
    if (len) *len = t->bytes_len[id];
    return t->bytepool + t->bytes_off[id];
}
int mi_tokenizer_is_special(const mi_tokenizer *t, int32_t id) {
    return t && id >= 0 && (uint32_t)id < t->vocab_size && t->is_special[id];
}
int32_t mi_tokenizer_eos_id(const mi_tokenizer *t) { return t ? t->eos_id : -1; }
int32_t mi_tokenizer_bos_id(const mi_tokenizer *t) { return t ? t->bos_id : -1; }
int32_t mi_tokenizer_pad_id(const mi_tokenizer *t) { return t ? t->pad_id : -1; }

const char *mi_tokenizer_strerror(int rc) {
    switch (rc) {
    case MI_TOK_OK: return "ok";
    case MI_TOK_ENOMEM: return "out of memory";
    case MI_TOK_EUTF8: return "input is not valid UTF-8";
    case MI_TOK_EINVAL: return "invalid argument";
    case MI_TOK_EID: return "token id out of range";
    case MI_TOK_EREGEX: return "the pre-tokenizer regex failed or ran past its work limit (a pathological pattern?)";
    default: return "unknown error";
    }
}
