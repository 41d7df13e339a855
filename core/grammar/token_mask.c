/* core/grammar/token_mask.c — which tokens of a vocabulary may come next.
 *
 * The "trie" is the vocabulary sorted by bytes with each token's common
 * prefix length with the one before: walking it in order visits the byte
 * trie depth first, so a shared prefix is fed to the matcher once (the state
 * after each depth of the current token is kept), and when a byte is refused
 * every following token that shares the refused prefix is skipped without a
 * look at its bytes. The matcher's states are cheap to keep (indices into an
 * arena of immutable frames; a branch's frames are dropped by resetting the
 * arena's length), so a 150k-token vocabulary costs one byte feed per trie
 * edge that the grammar allows. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r: tries may be built on several threads at once */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar_int.h"

/* Tokens in byte order: ids[i], bytes blob[off[i] .. + len[i]), and lcp[i]
 * the bytes in common with token i - 1 (0 for the first). */
typedef struct tview {
  uint32_t n;
  int32_t *ids;
  uint32_t *off, *len, *lcp;
} tview;

struct mi_token_trie {
  size_t vocab;        /* the tokenizer's vocab size: allowed[] length */
  tview all;           /* every token walked: not special, at least one byte */
  tview rest;          /* of them those that are not plain string text */
  int32_t *plain;      /* [n_plain] ids of plain tokens: valid UTF-8, no '"', '\\', controls */
  uint32_t *plain_cps; /* [n_plain] their code points */
  uint32_t n_plain;
  uint32_t max_len; /* the longest token */
  unsigned char *blob;
};

static void tview_free(tview *v) {
  free(v->ids), free(v->off), free(v->len), free(v->lcp);
}

static int tview_alloc(tview *v, uint32_t n) {
  size_t k = n ? n : 1;
  v->n = n;
  v->ids = malloc(k * sizeof *v->ids);
  v->off = malloc(k * sizeof *v->off);
  v->len = malloc(k * sizeof *v->len);
  v->lcp = malloc(k * sizeof *v->lcp);
  return v->ids && v->off && v->len && v->lcp ? 0 : -1;
}

/* Fills view v with the tokens order[0..n) (sorted) that keep(.) selects. */
static void tview_fill(tview *v, const unsigned char *blob, const uint32_t *order, uint32_t n,
                       const uint32_t *off, const uint32_t *len, const uint8_t *plain,
                       int keep_plain) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t id = order[i];
    if (!keep_plain && plain[id]) continue;
    uint32_t l = 0;
    if (k) {
      uint32_t p = v->off[k - 1], pl = v->len[k - 1], m = pl < len[id] ? pl : len[id];
      while (l < m && blob[p + l] == blob[off[id] + l])
        l++;
    }
    v->ids[k] = (int32_t)id, v->off[k] = off[id], v->len[k] = len[id], v->lcp[k] = l;
    k++;
  }
  v->n = k;
}

/* Text a string body takes as it is: whole UTF-8 characters (shortest form,
 * no surrogates), no '"', '\\' or control characters. */
static int plain_text(const unsigned char *b, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    unsigned c = b[i], k, lo = 0x80, hi = 0xBF;
    if (c < 0x20 || c == '"' || c == '\\') return 0;
    if (c < 0x80) {
      i++;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF)
      k = 1;
    else if (c >= 0xE0 && c <= 0xEF)
      k = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      k = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      return 0;
    if (n - i <= k || b[i + 1] < lo || b[i + 1] > hi) return 0;
    for (unsigned j = 2; j <= k; j++)
      if ((b[i + j] & 0xC0) != 0x80) return 0;
    i += k + 1;
  }
  return 1;
}

/* What the sort compares tokens by (ids index off/len). */
typedef struct sort_ctx {
  const unsigned char *blob;
  const uint32_t *off, *len;
} sort_ctx;

static int tok_cmp(const void *pa, const void *pb, void *ctx) {
  const sort_ctx *x = ctx;
  uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
  uint32_t la = x->len[a], lb = x->len[b];
  int c = memcmp(x->blob + x->off[a], x->blob + x->off[b], la < lb ? la : lb);
  if (c) return c;
  return la != lb ? (la > lb) - (la < lb) : (a > b) - (a < b);
}

void mi_token_trie_free(mi_token_trie *t) {
  if (!t) return;
  tview_free(&t->all);
  tview_free(&t->rest);
  free(t->plain);
  free(t->plain_cps);
  free(t->blob);
  free(t);
}

size_t mi_token_trie_vocab_size(const mi_token_trie *t) {
  return t ? t->vocab : 0;
}

static mi_token_trie *trie_fail(mi_token_trie *t, char *err, size_t err_len, const char *why) {
  if (err && err_len) snprintf(err, err_len, "token trie: %s", why);
  mi_token_trie_free(t);
  return NULL;
}

/* Copies the tokens' bytes (ids by order of id: off/len/plain indexed by id)
 * and sorts them; 0, or -1 out of memory. */
static int trie_collect(mi_token_trie *t, const mi_tokenizer *tok, size_t V, uint32_t *order,
                        uint32_t *off, uint32_t *len, uint8_t *plain, uint32_t *n_out) {
  size_t total = 0;
  for (size_t v = 0; v < V; v++) {
    size_t l = 0;
    if (!mi_tokenizer_is_special(tok, (int32_t)v) && mi_tokenizer_token_bytes(tok, (int32_t)v, &l))
      total += l;
  }
  if (total > UINT32_MAX || !(t->blob = malloc(total ? total : 1))) return -1;
  uint32_t n = 0, pos = 0;
  for (size_t v = 0; v < V; v++) {
    size_t l = 0;
    const unsigned char *b = mi_tokenizer_is_special(tok, (int32_t)v)
                                 ? NULL
                                 : mi_tokenizer_token_bytes(tok, (int32_t)v, &l);
    off[v] = pos, len[v] = 0, plain[v] = 0;
    if (!b || !l) continue;
    memcpy(t->blob + pos, b, l);
    len[v] = (uint32_t)l;
    plain[v] = (uint8_t)plain_text(b, (uint32_t)l);
    pos += (uint32_t)l;
    order[n++] = (uint32_t)v;
    if (len[v] > t->max_len) t->max_len = len[v];
  }
  sort_ctx ctx = {t->blob, off, len};
  qsort_r(order, n, sizeof *order, tok_cmp, &ctx);
  *n_out = n;
  return 0;
}

mi_token_trie *mi_token_trie_build(const mi_tokenizer *tok, char *err, size_t err_len) {
  if (err && err_len) err[0] = 0;
  size_t V = mi_tokenizer_vocab_size(tok);
  if (!tok || !V || V > UINT32_MAX / 2)
    return trie_fail(NULL, err, err_len, "no tokenizer or an empty vocabulary");
  mi_token_trie *t = calloc(1, sizeof *t);
  uint32_t *order = malloc(V * sizeof *order), *off = malloc(V * sizeof *off),
           *len = malloc(V * sizeof *len);
  uint8_t *plain = malloc(V);
  uint32_t n = 0, np = 0;
  int bad =
      !t || !order || !off || !len || !plain || trie_collect(t, tok, V, order, off, len, plain, &n);
  for (uint32_t i = 0; !bad && i < n; i++)
    np += plain[order[i]];
  if (!bad && (tview_alloc(&t->all, n) || tview_alloc(&t->rest, n - np) ||
               !(t->plain = malloc((np ? np : 1) * sizeof *t->plain)) ||
               !(t->plain_cps = malloc((np ? np : 1) * sizeof *t->plain_cps))))
    bad = 1;
  if (!bad) {
    t->vocab = V;
    tview_fill(&t->all, t->blob, order, n, off, len, plain, 1);
    tview_fill(&t->rest, t->blob, order, n, off, len, plain, 0);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t id = order[i], cps = 0;
      if (!plain[id]) continue;
      for (uint32_t k = 0; k < len[id]; k++)
        cps += (t->blob[off[id] + k] & 0xC0) != 0x80;
      t->plain[t->n_plain] = (int32_t)id;
      t->plain_cps[t->n_plain++] = cps;
    }
  }
  free(order), free(off), free(len), free(plain);
  return bad ? trie_fail(t, err, err_len, "out of memory") : t;
}

/* The walk: states[d] is the matcher's state after the first d bytes of the
 * current token, valid for d <= valid; marks[d] the arena length then (what
 * to cut back to when the walk returns to depth d). */
static size_t walk(const tview *t, const unsigned char *blob, const mi_json_matcher *m, jg_arena *A,
                   jg_state *states, uint32_t *marks, uint8_t *allowed) {
  size_t count = 0;
  uint32_t valid = 0;
  states[0] = m->st;
  marks[0] = 0;
  for (uint32_t i = 0; i < t->n;) {
    const unsigned char *b = blob + t->off[i];
    uint32_t L = t->len[i], d = t->lcp[i] < valid ? t->lcp[i] : valid;
    A->len = marks[d];
    while (d < L && jg_state_feed(m->g, A, &states[d], b[d], &states[d + 1]) == 0)
      marks[++d] = A->len;
    if (d == L) {
      allowed[t->ids[i]] = 1;
      count++;
      valid = L;
      i++;
      continue;
    }
    if (A->oom) return 0;
    /* byte d refused: so is every following token with the same first d + 1 bytes */
    valid = d;
    for (i++; i < t->n && t->lcp[i] > d; i++) {
    }
  }
  return count;
}

size_t mi_token_mask(const mi_token_trie *t, const mi_json_matcher *m, const int32_t *end_ids,
                     size_t n_end, uint8_t *allowed) {
  if (!t || !allowed) return 0;
  memset(allowed, 0, t->vocab);
  if (!m) return 0;
  jg_state *states = malloc(((size_t)t->max_len + 1) * sizeof *states);
  uint32_t *marks = malloc(((size_t)t->max_len + 1) * sizeof *marks);
  jg_arena A;
  jg_arena_init(&A, m, NULL, 0);
  size_t count = 0;
  int64_t budget = jg_state_plain_budget(m->g, &A, &m->st);
  if (budget >= 0) { /* in a string: plain text passes unfed, if short enough */
    for (uint32_t i = 0; i < t->n_plain; i++)
      if (t->plain_cps[i] <= budget) allowed[t->plain[i]] = 1, count++;
    if (states && marks) count += walk(&t->rest, t->blob, m, &A, states, marks, allowed);
  } else if (states && marks) {
    count = walk(&t->all, t->blob, m, &A, states, marks, allowed);
  }
  int oom = !states || !marks || A.oom;
  jg_arena_free(&A);
  free(states);
  free(marks);
  if (oom) {
    memset(allowed, 0, t->vocab);
    return 0;
  }
  int can_end = mi_json_matcher_can_end(m);
  for (size_t i = 0; i < n_end; i++) {
    int32_t id = end_ids[i];
    if (id < 0 || (size_t)id >= t->vocab) continue;
    count -= allowed[id];
    allowed[id] = (uint8_t)can_end;
    count += allowed[id];
  }
  return count;
}
