/* mi-serve's prefix cache (prefix_cache.h): blocks of per-position model
 * state in host memory, keyed by a hash chained over the prompt's tokens. */
#include "core/serve/prefix_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cblock cblock;
struct cblock {
  uint64_t hash;            /* chained over every token from position 0 to this block's end */
  cblock *parent;           /* the block before it; NULL for a prompt's first block */
  cblock *hnext;            /* the next block in this hash bucket */
  cblock *older, *newer;    /* the LRU list */
  int n_children;           /* blocks continuing this one: it is evicted only at 0 */
  int32_t *tokens;          /* [block] */
  unsigned char *state;     /* [block × state_bytes_token] in the plugin's layout */
  unsigned char *fixed;     /* NULL, or [state_bytes_fixed]: the fixed state at the block's end */
};

struct serve_cache {
  mi_session *e;
  int B;                    /* tokens per block */
  size_t tok_bytes;         /* state_bytes_token */
  size_t fixed_bytes;       /* state_bytes_fixed (0: no fixed state) */
  cblock **tab;             /* [n_buckets] hash buckets */
  size_t n_buckets;
  cblock *oldest, *newest;  /* LRU list ends */
  unsigned char *gather;    /* fixed-state models: a whole prefix, written in one call */
  size_t gather_cap;
  serve_cache_stats st;
};

/* SplitMix64's finaliser over the running hash and each token. */
static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

static uint64_t block_hash(uint64_t parent, const int32_t *t, int B) {
  uint64_t h = parent ^ 0x6a09e667f3bcc908ULL;
  for (int i = 0; i < B; i++) h = mix(h, (uint32_t)t[i]);
  return h;
}

static size_t block_bytes(const serve_cache *c, const cblock *b) {
  return sizeof *b + (size_t)c->B * (sizeof(int32_t) + c->tok_bytes) + (b->fixed ? c->fixed_bytes : 0);
}

static void lru_unlink(serve_cache *c, cblock *b) {
  if (b->older) b->older->newer = b->newer;
  else c->oldest = b->newer;
  if (b->newer) b->newer->older = b->older;
  else c->newest = b->older;
  b->older = b->newer = NULL;
}

static void lru_push_newest(serve_cache *c, cblock *b) {
  b->older = c->newest;
  b->newer = NULL;
  if (c->newest) c->newest->newer = b;
  else c->oldest = b;
  c->newest = b;
}

/* Marks a chain used, its last block first and its first block last, so
 * that a block is never newer than the blocks it continues: eviction from
 * the old end meets leaves first. */
static void touch_chain(serve_cache *c, cblock *last) {
  for (cblock *b = last; b; b = b->parent) {
    lru_unlink(c, b);
    lru_push_newest(c, b);
  }
}

static cblock *find(const serve_cache *c, uint64_t h, const cblock *parent, const int32_t *t) {
  for (cblock *b = c->tab[h & (c->n_buckets - 1)]; b; b = b->hnext)
    if (b->hash == h && b->parent == parent && !memcmp(b->tokens, t, (size_t)c->B * sizeof *t))
      return b;
  return NULL;
}

static void unhash(serve_cache *c, cblock *b) {
  cblock **pp = &c->tab[b->hash & (c->n_buckets - 1)];
  while (*pp && *pp != b) pp = &(*pp)->hnext;
  if (*pp) *pp = b->hnext;
}

static void block_free(serve_cache *c, cblock *b) {
  c->st.bytes -= block_bytes(c, b);
  c->st.blocks--;
  if (b->fixed) c->st.snapshots--;
  free(b->tokens);
  free(b->state);
  free(b->fixed);
  free(b);
}

/* Evicts least recently used leaves until `need` more bytes fit. A chain
 * longer than the whole limit evicts its own oldest blocks last. */
static void make_room(serve_cache *c, size_t need) {
  cblock *b = c->oldest;
  while (b && c->st.bytes + need > c->st.max_bytes) {
    cblock *next = b->newer;
    if (b->n_children == 0) {
      lru_unlink(c, b);
      unhash(c, b);
      if (b->parent) b->parent->n_children--;
      block_free(c, b);
      c->st.evictions++;
      /* the parent may have become a leaf, older than `next`: restart */
      next = c->oldest;
    }
    b = next;
  }
}

static int grow_table(serve_cache *c) {
  size_t nb = c->n_buckets * 2;
  cblock **t = calloc(nb, sizeof *t);
  if (!t) return -1;
  for (size_t i = 0; i < c->n_buckets; i++)
    for (cblock *b = c->tab[i], *nx; b; b = nx) {
      nx = b->hnext;
      b->hnext = t[b->hash & (nb - 1)];
      t[b->hash & (nb - 1)] = b;
    }
  free(c->tab);
  c->tab = t;
  c->n_buckets = nb;
  return 0;
}

serve_cache *serve_cache_new(mi_session *e, uint64_t max_bytes, int block, char *why,
                             size_t why_len) {
  const mi_model_iface *M = e->M;
  if (!mi_model_has(M, seq_state_read) || !mi_model_has(M, seq_state_write)) {
    snprintf(why, why_len,
             "the model plugin has no seq_state_read/seq_state_write (model ABI 1.5): every "
             "prompt is computed in full");
    return NULL;
  }
  if (e->tp_size > 1) {
    snprintf(why, why_len, "tensor parallelism: each rank holds part of the state");
    return NULL;
  }
  size_t tok = (size_t)e->info.state_bytes_token, fixed = (size_t)e->info.state_bytes_fixed;
  if (block < 1 || tok == 0) {
    snprintf(why, why_len, "the model reports no per-token state");
    return NULL;
  }
  uint64_t one = sizeof(cblock) + (uint64_t)block * (sizeof(int32_t) + tok) + fixed;
  if (max_bytes < one) {
    snprintf(why, why_len, "--cache-mem %.1f MiB is below one block of %d tokens (%.1f MiB)",
             (double)max_bytes / 1048576.0, block, (double)one / 1048576.0);
    return NULL;
  }
  serve_cache *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  c->e = e;
  c->B = block;
  c->tok_bytes = tok;
  c->fixed_bytes = fixed;
  c->n_buckets = 1024;
  c->tab = calloc(c->n_buckets, sizeof *c->tab);
  c->st.max_bytes = max_bytes;
  if (!c->tab) {
    free(c);
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  return c;
}

void serve_cache_free(serve_cache *c) {
  if (!c) return;
  for (cblock *b = c->oldest, *nx; b; b = nx) {
    nx = b->newer;
    block_free(c, b);
  }
  free(c->tab);
  free(c->gather);
  free(c);
}

int serve_cache_block(const serve_cache *c) { return c->B; }
int serve_cache_has_fixed(const serve_cache *c) { return c->fixed_bytes > 0; }

void serve_cache_stats_get(const serve_cache *c, serve_cache_stats *out) { *out = c->st; }

/* Fixed-state models: the prefix's blocks in one buffer, one write with
 * the snapshot of its last block (the state exists only there). */
static int restore_gathered(serve_cache *c, cblock **chain, int64_t k, mi_seq *seq, char *err,
                            size_t err_len) {
  size_t bb = (size_t)c->B * c->tok_bytes, need = (size_t)k * bb;
  if (need > c->gather_cap) {
    unsigned char *g = realloc(c->gather, need);
    if (!g) {
      snprintf(err, err_len, "prefix cache: out of memory restoring %lld blocks", (long long)k);
      return -1;
    }
    c->gather = g;
    c->gather_cap = need;
  }
  for (int64_t i = 0; i < k; i++) memcpy(c->gather + (size_t)i * bb, chain[i]->state, bb);
  return c->e->M->seq_state_write(c->e->model, seq, 0, k * c->B, c->gather, chain[k - 1]->fixed,
                                  err, err_len);
}

/* The longest run of cached blocks ids[0, n) starts with that leaves a
 * token to run and ends where the model can resume (with fixed state: a
 * block with a snapshot), into chain (NULL: only counted). Blocks. */
static int64_t usable_blocks(const serve_cache *c, const int32_t *ids, int64_t n, cblock **chain) {
  const int B = c->B;
  int64_t max_blocks = n > 0 ? (n - 1) / B : 0; /* the last token always runs */
  int64_t k = 0, usable = 0;
  uint64_t h = 0;
  cblock *parent = NULL;
  while (k < max_blocks) {
    h = block_hash(h, ids + k * B, B);
    cblock *b = find(c, h, parent, ids + k * B);
    if (!b) break;
    if (chain) chain[k] = b;
    k++;
    parent = b;
    if (!c->fixed_bytes || b->fixed) usable = k;
  }
  return usable;
}

int64_t serve_cache_peek(const serve_cache *c, const int32_t *ids, int64_t n) {
  return usable_blocks(c, ids, n, NULL) * c->B;
}

int64_t serve_cache_restore(serve_cache *c, const int32_t *ids, int64_t n, mi_seq *seq, char *err,
                            size_t err_len) {
  c->st.lookups++;
  c->st.lookup_tokens += (uint64_t)(n > 0 ? n : 0);
  const int B = c->B;
  int64_t max_blocks = n > 0 ? (n - 1) / B : 0;
  if (max_blocks == 0) return 0;
  cblock **chain = malloc((size_t)max_blocks * sizeof *chain);
  if (!chain) return 0; /* a miss, not an error */
  int64_t usable = usable_blocks(c, ids, n, chain);
  if (usable == 0) {
    free(chain);
    return 0;
  }
  int rc = 0;
  if (c->fixed_bytes) {
    rc = restore_gathered(c, chain, usable, seq, err, err_len);
  } else {
    for (int64_t i = 0; i < usable && rc == 0; i++)
      rc = c->e->M->seq_state_write(c->e->model, seq, i * B, B, chain[i]->state, NULL, err, err_len);
  }
  if (rc == 0) touch_chain(c, chain[usable - 1]);
  free(chain);
  if (rc != 0) return -1;
  c->st.hit_tokens += (uint64_t)(usable * B);
  return usable * B;
}

/* A new block after parent holding positions [i*B, (i+1)*B) of seq. */
static cblock *add_block(serve_cache *c, uint64_t h, cblock *parent, const int32_t *t, mi_seq *seq,
                         int64_t i, char *err, size_t err_len) {
  size_t bb = (size_t)c->B * c->tok_bytes;
  if (parent) parent->n_children++; /* pinned: make_room evicts leaves only */
  make_room(c, sizeof(cblock) + (size_t)c->B * sizeof(int32_t) + bb);
  if (parent) parent->n_children--;
  if (c->st.blocks >= c->n_buckets && grow_table(c) != 0) {
    snprintf(err, err_len, "prefix cache: out of memory");
    return NULL;
  }
  cblock *b = calloc(1, sizeof *b);
  if (b) {
    b->tokens = malloc((size_t)c->B * sizeof(int32_t));
    b->state = malloc(bb);
  }
  if (!b || !b->tokens || !b->state) {
    if (b) {
      free(b->tokens);
      free(b->state);
    }
    free(b);
    snprintf(err, err_len, "prefix cache: out of memory");
    return NULL;
  }
  if (c->e->M->seq_state_read(c->e->model, seq, i * c->B, c->B, b->state, NULL, err, err_len) != 0) {
    free(b->tokens);
    free(b->state);
    free(b);
    return NULL;
  }
  memcpy(b->tokens, t, (size_t)c->B * sizeof(int32_t));
  b->hash = h;
  b->parent = parent;
  if (parent) parent->n_children++;
  b->hnext = c->tab[h & (c->n_buckets - 1)];
  c->tab[h & (c->n_buckets - 1)] = b;
  lru_push_newest(c, b);
  c->st.blocks++;
  c->st.bytes += block_bytes(c, b);
  return b;
}

/* The fixed state at seq's end (== the end of block b) kept with b. */
static int add_snapshot(serve_cache *c, cblock *b, mi_seq *seq, int64_t len, char *err,
                        size_t err_len) {
  b->n_children++; /* pinned */
  make_room(c, c->fixed_bytes);
  b->n_children--;
  unsigned char *f = malloc(c->fixed_bytes);
  unsigned char *tmp = malloc((size_t)c->B * c->tok_bytes);
  int rc = -1;
  if (!f || !tmp) snprintf(err, err_len, "prefix cache: out of memory");
  else
    rc = c->e->M->seq_state_read(c->e->model, seq, len - c->B, c->B, tmp, f, err, err_len);
  free(tmp);
  if (rc != 0) {
    free(f);
    return -1;
  }
  b->fixed = f;
  c->st.bytes += c->fixed_bytes;
  c->st.snapshots++;
  return 0;
}

int serve_cache_store(serve_cache *c, const int32_t *ids, int64_t len, mi_seq *seq, char *err,
                      size_t err_len) {
  const int B = c->B;
  int64_t nb = len / B;
  uint64_t h = 0;
  cblock *parent = NULL;
  for (int64_t i = 0; i < nb; i++) {
    h = block_hash(h, ids + i * B, B);
    cblock *b = find(c, h, parent, ids + i * B);
    if (!b) {
      b = add_block(c, h, parent, ids + i * B, seq, i, err, err_len);
      if (!b) return -1;
    }
    parent = b;
  }
  if (!parent) return 0;
  touch_chain(c, parent);
  if (c->fixed_bytes && len % B == 0 && !parent->fixed &&
      c->e->M->seq_len(c->e->model, seq) == len)
    return add_snapshot(c, parent, seq, len, err, err_len);
  return 0;
}
