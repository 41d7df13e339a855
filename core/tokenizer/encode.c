/* core/tokenizer/encode.c — text -> token ids: added-token splitting, the
 * normalizer (NFC, Prepend, Replace), pre-tokenisation (PCRE2 splits,
 * Metaspace), BPE with a rank heap, and a small word cache.
 *
 * BPE works on raw bytes: a word starts as one symbol per byte (the id of
 * the byte's GPT-2 character; byte level) or per character (its token, or
 * its "<0xXX>" byte tokens; SentencePiece's kind), and the pair with the
 * lowest merge rank —
 * leftmost among equal ranks — is merged until none applies. This is what
 * HF tokenizers' Word::merge_all does; the heap keeps long words
 * O(n log n) instead of O(n^2). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "core/tokenizer/internal.h"

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;

/* An array v of n elements with room for one more (its capacity *cap
 * doubled, from `first`, when full): v, the moved array, or NULL when out
 * of memory (v left as it was). */
static void *grow(void *v, size_t n, size_t *cap, size_t elem, size_t first) {
    if (n < *cap) return v;
    size_t c = *cap ? *cap * 2 : first;
    void *p = realloc(v, c * elem);
    if (p) *cap = c;
    return p;
}

static int ivec_push(ivec *a, int32_t x) {
    int32_t *p = grow(a->v, a->n, &a->cap, sizeof *p, 256);
    if (!p) return MI_TOK_ENOMEM;
    a->v = p;
    a->v[a->n++] = x;
    return 0;
}

/* Heap entry: a candidate merge of the symbols starting at left and right. */
typedef struct { uint32_t rank; int32_t left, right; } cand;

/* Per-call scratch, grown on demand. */
typedef struct {
    int32_t *id, *prev, *next;  /* [cap_sym] symbol list (by byte position) */
    size_t cap_sym;
    cand *heap;                 /* [cap_heap] binary min-heap */
    size_t cap_heap, nheap;
    char *key;                  /* [cap_key] a byte-level word's token text (ignore_merges) */
    size_t cap_key;
    unsigned char *buf[MI_TOK_MAX_STEPS]; /* [cap_buf] a Metaspace step's text */
    size_t cap_buf[MI_TOK_MAX_STEPS];
    pcre2_match_data *md[MI_TOK_MAX_STEPS];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    double deadline;            /* CLOCK_MONOTONIC seconds: the regex work budget */
    unsigned n_match;           /* matches since the last clock check */
} scratch;

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(scratch *s, cand c) {
    cand *p = grow(s->heap, s->nheap, &s->cap_heap, sizeof *p, 64);
    if (!p) return MI_TOK_ENOMEM;
    s->heap = p;
    size_t i = s->nheap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[up])) break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = c;
    return 0;
}

static cand heap_pop(scratch *s) {
    cand top = s->heap[0], last = s->heap[--s->nheap];
    size_t i = 0, n = s->nheap;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const cand *best = &last;
        if (l < n && cand_less(&s->heap[l], best)) { m = l; best = &s->heap[l]; }
        if (l + 1 < n && cand_less(&s->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

static int push_pair(const mi_tokenizer *t, scratch *s, int32_t l, int32_t r) {
    const mi_tok_merge *m = mi_tok_merge_find(t, s->id[l], s->id[r]);
    if (!m) return 0;
    cand c = { m->rank, l, r };
    return heap_push(s, c);
}

/* Length of the UTF-8 character at w (the text was checked valid). */
static size_t char_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* Byte level: one symbol per byte, its byte-level token. */
static size_t byte_symbols(const mi_tokenizer *t, const unsigned char *w, size_t n, scratch *s) {
    for (size_t i = 0; i < n; i++) s->id[i] = t->byte_id[w[i]];
    return n;
}

/* SentencePiece's kind: one symbol per character, its token; else its
 * "<0xXX>" tokens (byte_fallback, when all exist); else the unk token (one
 * for a run with fuse_unk); else nothing (HF drops it). Returns how many
 * (<= n: a character gives at most one symbol per byte). */
static size_t char_symbols(const mi_tokenizer *t, const unsigned char *w, size_t n, scratch *s) {
    size_t k = 0;
    int in_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t len = char_len(w[i]), b = 0;
        if (len > n - i) len = n - i;
        int32_t id = mi_tok_lookup(t, (const char *)w + i, len);
        if (id < 0 && t->byte_fallback)
            while (b < len && t->fallback_id[w[i + b]] >= 0) b++;
        if (id >= 0) {
            s->id[k++] = id;
            in_unk = 0;
        } else if (b == len && t->byte_fallback) {
            for (b = 0; b < len; b++) s->id[k++] = t->fallback_id[w[i + b]];
            in_unk = 0;
        } else if (t->unk_id >= 0) {
            if (!(in_unk && t->fuse_unk)) s->id[k++] = t->unk_id;
            in_unk = 1;
        }
        i += len;
    }
    return k;
}

/* ignore_merges: the id of the token that is the whole word, or -1. */
static int32_t whole_word(const mi_tokenizer *t, const unsigned char *w, size_t n, scratch *s) {
    if (!t->byte_level) return mi_tok_lookup(t, (const char *)w, n);
    size_t need = 0;
    for (size_t i = 0; i < n; i++) need += t->str_len[t->byte_id[w[i]]];
    if (need > s->cap_key) {
        char *k = realloc(s->key, need);
        if (!k) return -1;
        s->key = k;
        s->cap_key = need;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->byte_id[w[i]];
        memcpy(s->key + o, t->strpool + t->str_off[b], t->str_len[b]);
        o += t->str_len[b];
    }
    return mi_tok_lookup(t, s->key, o);
}

/* BPE of one pre-tokenised word (raw bytes), ids appended to out. */
static int bpe_word(const mi_tokenizer *t, scratch *s, const unsigned char *w, size_t n, ivec *out) {
    if (n == 0) return 0;
    if (n == 1 && t->byte_level) return ivec_push(out, t->byte_id[w[0]]);
    size_t first = out->n;
    if (t->ignore_merges) {
        int32_t id = whole_word(t, w, n, s);
        if (id >= 0) return ivec_push(out, id);
    }

    uint32_t h = 0;
    if (n <= MI_TOK_CACHE_KEY) {
        h = mi_tok_hash(w, n);
        const mi_tok_cache_slot *c = &t->cache[h & (MI_TOK_CACHE_SLOTS - 1)];
        int32_t ids[MI_TOK_CACHE_KEY];
        int nids = -1;
        /* the lock makes the cache safe to share between threads; the tokenizer
         * itself is otherwise read-only */
        pthread_mutex_lock((pthread_mutex_t *)&t->cache_lock);
        if (c->klen == n && c->hash == h && memcmp(c->key, w, n) == 0) {
            nids = c->nids;
            memcpy(ids, c->ids, (size_t)nids * sizeof *ids);
        }
        pthread_mutex_unlock((pthread_mutex_t *)&t->cache_lock);
        if (nids >= 0) {
            for (int i = 0; i < nids; i++)
                if (ivec_push(out, ids[i])) return MI_TOK_ENOMEM;
            return 0;
        }
    }

    if (n > s->cap_sym) {
        size_t c = s->cap_sym ? s->cap_sym : 64;
        while (c < n) c *= 2;
        int32_t *a = realloc(s->id, c * sizeof *a);
        if (!a) return MI_TOK_ENOMEM;
        s->id = a;
        a = realloc(s->prev, c * sizeof *a);
        if (!a) return MI_TOK_ENOMEM;
        s->prev = a;
        a = realloc(s->next, c * sizeof *a);
        if (!a) return MI_TOK_ENOMEM;
        s->next = a;
        s->cap_sym = c;
    }
    size_t ns = t->byte_level ? byte_symbols(t, w, n, s) : char_symbols(t, w, n, s);
    if (ns == 0) goto done; /* every character dropped (no unk token) */
    for (size_t i = 0; i < ns; i++) {
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    s->nheap = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        if (push_pair(t, s, (int32_t)i, (int32_t)i + 1)) return MI_TOK_ENOMEM;
    while (s->nheap) {
        cand c = heap_pop(s);
        /* stale entry: a side was merged away (id -1) or changed */
        if (s->id[c.left] < 0 || s->next[c.left] != c.right || s->id[c.right] < 0) continue;
        const mi_tok_merge *m = mi_tok_merge_find(t, s->id[c.left], s->id[c.right]);
        if (!m || m->rank != c.rank) continue;
        s->id[c.left] = m->result;
        s->id[c.right] = -1;
        int32_t nx = s->next[c.right];
        s->next[c.left] = nx;
        if (nx >= 0) s->prev[nx] = c.left;
        if (s->prev[c.left] >= 0 && push_pair(t, s, s->prev[c.left], c.left)) return MI_TOK_ENOMEM;
        if (nx >= 0 && push_pair(t, s, c.left, nx)) return MI_TOK_ENOMEM;
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (ivec_push(out, s->id[i])) return MI_TOK_ENOMEM;
done:
    if (n <= MI_TOK_CACHE_KEY) {
        mi_tok_cache_slot *c = &t->cache[h & (MI_TOK_CACHE_SLOTS - 1)];
        pthread_mutex_lock((pthread_mutex_t *)&t->cache_lock);
        c->hash = h;
        c->klen = (uint8_t)n;
        c->nids = (uint8_t)(out->n - first);
        memcpy(c->key, w, n);
        if (out->n > first) memcpy(c->ids, out->v + first, (out->n - first) * sizeof *out->v);
        pthread_mutex_unlock((pthread_mutex_t *)&t->cache_lock);
    }
    return 0;
}

/* A text buffer of the scratch (slot k), grown to n bytes. */
static unsigned char *scratch_buf(scratch *s, int k, size_t n) {
    if (n > s->cap_buf[k]) {
        unsigned char *b = realloc(s->buf[k], n);
        if (!b) return NULL;
        s->buf[k] = b;
        s->cap_buf[k] = n;
    }
    return s->buf[k];
}

static int pretok(const mi_tokenizer *t, scratch *s, int level, const unsigned char *p, size_t n, int origin,
                  ivec *out);

/* Metaspace step `level` on p[0, n): ' ' becomes the replacement, which is
 * put first (always; or first, for the piece at the start of the prompt:
 * origin) unless there already; then a piece starts at each replacement
 * (split) or the text is one piece. */
static int metaspace(const mi_tokenizer *t, scratch *s, int level, const unsigned char *p, size_t n, int origin,
                     ivec *out) {
    const mi_tok_pre *st = &t->pre[level];
    size_t r = st->nrep, spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += p[i] == ' ';
    int put = (st->prepend == MI_TOK_PREPEND_ALWAYS || (st->prepend == MI_TOK_PREPEND_FIRST && origin)) &&
              !(n >= r && !memcmp(p, st->rep, r)) && !(n && p[0] == ' ');
    size_t m = n + spaces * (r - 1) + (put ? r : 0);
    unsigned char *b = scratch_buf(s, level, m);
    if (!b) return MI_TOK_ENOMEM;
    size_t o = 0;
    if (put) { memcpy(b, st->rep, r); o = r; }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') { memcpy(b + o, st->rep, r); o += r; }
        else b[o++] = p[i];
    }
    if (!st->split) return pretok(t, s, level + 1, b, o, origin, out);
    size_t start = 0;
    for (size_t i = 1; i + r <= o; i++) /* MergedWithNext: each replacement starts a piece */
        if (!memcmp(b + i, st->rep, r)) {
            int e = pretok(t, s, level + 1, b + start, i - start, origin && start == 0, out);
            if (e) return e;
            start = i;
            i += r - 1;
        }
    return pretok(t, s, level + 1, b + start, o - start, origin && start == 0, out);
}

/* Apply split step `level` to p[0, n) and recurse; the last level feeds
 * BPE. Each match and the text between matches go as the step's behaviour
 * says: Isolated, both are pieces; Removed, the match is dropped;
 * MergedWithPrevious, the match ends the piece before it; MergedWithNext,
 * it starts the next one. origin: p is at the start of the prompt. */
static int pretok(const mi_tokenizer *t, scratch *s, int level, const unsigned char *p, size_t n, int origin,
                  ivec *out) {
    if (level >= t->n_pre || level >= MI_TOK_MAX_STEPS) return bpe_word(t, s, p, n, out);
    const mi_tok_pre *st = &t->pre[level];
    if (st->kind == MI_TOK_PRE_METASPACE) return metaspace(t, s, level, p, n, origin, out);
    pcre2_match_data *md = s->md[level];
    size_t pos = 0, ps = 0; /* ps: where the piece being cut starts */
    int e;
#define PIECE(a, b) do { if ((b) > (a) && (e = pretok(t, s, level + 1, p + (a), (b) - (a), origin && (a) == 0, out))) return e; } while (0)
    while (pos < n) {
        /* Work bounds (a hostile pattern): each match may take steps in
         * proportion to the text it can still see, and the whole prompt a
         * time budget, checked every 32 matches. */
        uint64_t lim = MI_TOK_REGEX_MIN_STEPS + (uint64_t)MI_TOK_REGEX_STEPS_PER_BYTE * (n - pos);
        if (lim > MI_TOK_REGEX_MAX_STEPS) lim = MI_TOK_REGEX_MAX_STEPS;
        pcre2_set_match_limit(s->mctx, (uint32_t)lim);
        pcre2_set_depth_limit(s->mctx, (uint32_t)lim);
        if (++s->n_match % 32 == 0 && mono_now() > s->deadline) return MI_TOK_EREGEX;
        int rc = pcre2_match(st->re, p, n, pos, PCRE2_NO_UTF_CHECK, md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return MI_TOK_EREGEX;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character, no piece */
            pos = ms + 1;
            while (pos < n && (p[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        switch (st->behavior) {
        case MI_TOK_ISOLATED: PIECE(ps, ms); PIECE(ms, me); ps = me; break;
        case MI_TOK_REMOVED: PIECE(ps, ms); ps = me; break;
        case MI_TOK_MERGED_PREV: PIECE(ps, me); ps = me; break;
        default: PIECE(ps, ms); ps = ms; break; /* MERGED_NEXT */
        }
        pos = me;
    }
    PIECE(ps, n);
#undef PIECE
    return 0;
}

/* The normaliser's steps on p[0, n): the text in *q (*nq bytes), a malloc'd
 * buffer in *owned when a step changed it. */
static int normalize(const mi_tokenizer *t, const unsigned char *p, size_t n, const unsigned char **q, size_t *nq,
                     unsigned char **owned) {
    *q = p; *nq = n; *owned = NULL;
    for (int k = 0; k < t->n_norm; k++) {
        const mi_tok_norm *nm = &t->norm[k];
        unsigned char *nx = NULL;
        size_t m = 0;
        if (nm->kind == MI_TOK_NORM_NFC) {
            int e = mi_tok_nfc(*q, *nq, &nx, &m);
            if (e) return e;
        } else if (nm->kind == MI_TOK_NORM_PREPEND) {
            if (!*nq) continue; /* HF prepends to a text that is not empty */
            if (!(nx = malloc(*nq + nm->na))) return MI_TOK_ENOMEM;
            memcpy(nx, nm->a, nm->na);
            memcpy(nx + nm->na, *q, *nq);
            m = *nq + nm->na;
        } else { /* REPLACE */
            int e = mi_tok_replace_all(*q, *nq, nm->a, nm->na, nm->b, nm->nb, &nx, &m);
            if (e) return e;
        }
        if (!nx) continue; /* unchanged */
        free(*owned);
        *owned = nx;
        *q = nx;
        *nq = m;
    }
    return 0;
}

/* One stretch of ordinary text (no added tokens in it); origin: it starts
 * the prompt. */
static int encode_text(const mi_tokenizer *t, scratch *s, const unsigned char *p, size_t n, int origin, ivec *out) {
    if (n == 0) return 0;
    const unsigned char *q;
    size_t nq;
    unsigned char *owned;
    int e = normalize(t, p, n, &q, &nq, &owned);
    if (!e) e = pretok(t, s, 0, q, nq, origin, out);
    free(owned);
    return e;
}

static int is_ws(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int is_word(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c >= 0x80;
}

/* Find the added token matching at p[i] (longest first); 0 if none. */
static const mi_tok_added *added_at(const mi_tokenizer *t, const unsigned char *p, size_t n, size_t i, int parse_special) {
    for (uint32_t k = 0; k < t->n_added; k++) {
        const mi_tok_added *a = &t->added[k];
        if (a->special && !parse_special) continue;
        if (a->len > n - i || memcmp(p + i, a->content, a->len) != 0) continue;
        if (a->single_word && ((i > 0 && is_word(p[i - 1])) || (i + a->len < n && is_word(p[i + a->len])))) continue;
        return a;
    }
    return NULL;
}

int mi_tokenizer_encode(const mi_tokenizer *t, const char *text, size_t len, int parse_special,
                        int32_t **ids, size_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len)) return MI_TOK_EINVAL;
    const unsigned char *p = (const unsigned char *)text;
    if (mi_tok_utf8_valid_prefix(p, len) != len) return MI_TOK_EUTF8;

    ivec out = {0};
    scratch s = {0};
    int e = 0;
    int regex = 0;
    for (int i = 0; i < t->n_pre; i++) {
        if (t->pre[i].kind != MI_TOK_PRE_SPLIT) continue;
        regex = 1;
        s.md[i] = pcre2_match_data_create_from_pattern(t->pre[i].re, NULL);
        if (!s.md[i]) { e = MI_TOK_ENOMEM; goto done; }
    }
    if (regex) {
        /* Long whitespace runs make the JIT backtrack deeply; give it room
         * beyond the default 32 KiB machine stack. */
        s.mctx = pcre2_match_context_create(NULL);
        s.jstack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, NULL);
        if (!s.mctx || !s.jstack) { e = MI_TOK_ENOMEM; goto done; }
        pcre2_jit_stack_assign(s.mctx, NULL, s.jstack);
        s.deadline = mono_now() + MI_TOK_REGEX_SECONDS + MI_TOK_REGEX_SECONDS * ((double)len / (1 << 20));
    }

    size_t seg = 0, i = 0;
    while (i < len) {
        const mi_tok_added *a = t->added_first[p[i]] ? added_at(t, p, len, i, parse_special) : NULL;
        if (!a) { i++; continue; }
        size_t start = i, end = i + a->len;
        if (a->lstrip) while (start > seg && is_ws(p[start - 1])) start--;
        if (a->rstrip) while (end < len && is_ws(p[end])) end++;
        if ((e = encode_text(t, &s, p + seg, start - seg, seg == 0, &out))) goto done;
        if ((e = ivec_push(&out, a->id))) goto done;
        seg = i = end;
    }
    e = encode_text(t, &s, p + seg, len - seg, seg == 0, &out);
done:
    for (int k = 0; k < MI_TOK_MAX_STEPS; k++) {
        if (s.md[k]) pcre2_match_data_free(s.md[k]);
        free(s.buf[k]);
    }
    free(s.key);
    if (s.mctx) pcre2_match_context_free(s.mctx);
    if (s.jstack) pcre2_jit_stack_free(s.jstack);
    free(s.id); free(s.prev); free(s.next); free(s.heap);
    if (e) { free(out.v); return e; }
    *ids = out.v;
    *n = out.n;
    return 0;
}

int mi_tokenizer_encode_prompt(const mi_tokenizer *t, const char *text, size_t len, int parse_special,
                               int32_t **ids, size_t *n) {
    int e = mi_tokenizer_encode(t, text, len, parse_special, ids, n);
    if (e || t->prefix_id < 0) return e;
    int32_t *v = realloc(*ids, (*n + 1) * sizeof *v);
    if (!v) { free(*ids); *ids = NULL; *n = 0; return MI_TOK_ENOMEM; }
    memmove(v + 1, v, *n * sizeof *v);
    v[0] = t->prefix_id;
    *ids = v;
    (*n)++;
    return 0;
}
