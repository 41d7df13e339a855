/* mi-serve's prefix cache: the per-position model state (KV cache) of
 * prompts already run, kept in host memory in blocks of `block` tokens, so a
 * request whose prompt starts like an earlier one (a shared system prompt,
 * the previous turns of a conversation) copies that prefix in instead of
 * computing it.
 *
 * A block is keyed by a hash chained over every token from the start of the
 * prompt through its own last token, so equal keys mean equal prefixes; the
 * tokens and the parent block are compared as well, so a hash collision is
 * a miss, never a wrong answer. A block is referenced by the blocks that
 * continue it (its children) and is evicted only when none does, least
 * recently used first, to stay within the memory limit. Blocks are shared:
 * 32 conversations over one system prompt hold its blocks once.
 *
 * A model with fixed (recurrent) state, the hybrid, can resume only where
 * that state was saved: a block may carry a snapshot of it taken when a
 * prompt's prefill stood exactly at the block's end (mi-serve stops the
 * prefill at the prompt's last block boundary to take it). A hit ends at
 * the last block with a snapshot.
 *
 * Only the scheduler thread calls these; none of them locks. */
#ifndef MI_CORE_SERVE_PREFIX_CACHE_H
#define MI_CORE_SERVE_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/runtime/session.h"

typedef struct serve_cache serve_cache;

typedef struct serve_cache_stats {
  uint64_t lookups;       /* prompts looked up */
  uint64_t lookup_tokens; /* their tokens */
  uint64_t hit_tokens;    /* of those, restored from the cache */
  uint64_t blocks;        /* blocks held now */
  uint64_t bytes;         /* bytes held now */
  uint64_t max_bytes;     /* the limit */
  uint64_t evictions;     /* blocks evicted so far */
  uint64_t snapshots;     /* fixed-state snapshots held now */
} serve_cache_stats;

/* NULL when the session's model cannot be cached, with the reason in why
 * (a model plugin without seq_state_read/seq_state_write, a limit too small
 * for one block). */
serve_cache *serve_cache_new(mi_session *e, uint64_t max_bytes, int block, char *why,
                             size_t why_len);
void serve_cache_free(serve_cache *c);
int serve_cache_block(const serve_cache *c);
int serve_cache_has_fixed(const serve_cache *c); /* the model has fixed state */

/* Restores the longest cached prefix of ids[0, n) that leaves at least one
 * token to run into the empty sequence seq. Returns the tokens restored
 * (0: a miss), or -1 with err (seq may hold part of it: truncate it to 0). */
int64_t serve_cache_restore(serve_cache *c, const int32_t *ids, int64_t n, mi_seq *seq, char *err,
                            size_t err_len);

/* What serve_cache_restore would restore now, without copying or counting
 * a lookup (the scheduler asks this every step for prompts not yet begun:
 * another sequence may be running the same prefix). */
int64_t serve_cache_peek(const serve_cache *c, const int32_t *ids, int64_t n);

/* seq holds ids[0, len): keeps every whole block of it not yet cached, and
 * with fixed state a snapshot when len ends a block. 0, or -1 with err
 * (the cache is unchanged then, apart from evictions). */
int serve_cache_store(serve_cache *c, const int32_t *ids, int64_t len, mi_seq *seq, char *err,
                      size_t err_len);

void serve_cache_stats_get(const serve_cache *c, serve_cache_stats *out);

#endif
