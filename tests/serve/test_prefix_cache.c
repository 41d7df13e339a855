/* mi-serve's prefix cache (core/serve/prefix_cache.c) on a real tiny model:
 *   - a restored prefix is the longest cached run of whole blocks that
 *     leaves a token to run, and the sequence it restores continues with
 *     the same logits as one that ran the prompt itself (to f32 rounding of
 *     another chunking);
 *   - prompts sharing a prefix share its blocks (the cache grows by their
 *     own blocks only);
 *   - the cache stays within its byte limit, evicts least recently used
 *     leaves first (a prefix used again survives, the oldest goes), and an
 *     evicted prefix is a miss, never a wrong restore;
 *   - a block whose tokens differ under the same position is a miss;
 *   - the hybrid (fixed state) restores only up to a block carrying a
 *     state snapshot. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "core/runtime/session.h"
#include "core/serve/prefix_cache.h"
#include "tests/util/check_main.h"
#include "tests/util/test_env.h"
#include "tests/util/test_registry.h"

#define B 16
#define N_CTX 256

static char g_build[1024], g_models[1024];

typedef struct rt {
  mi_registry *reg;
  mi_session *e;
  int64_t V;
} rt;

static void rt_open(rt *r, const char *args, const char *name) {
  char dir[1200], err[2048], cmd[4096];
  snprintf(dir, sizeof dir, "%s/prefix-cache-%s", g_models, name);
  snprintf(cmd, sizeof cmd,
           "test -f '%s/config.json' || (mkdir -p '%s' && '%s/bin/mi-mkmodel' %s --out '%s' >/dev/null)",
           dir, g_models, g_build, args, dir);
  ck_assert_int_eq(system(cmd), 0);
  r->reg = mi_test_registry(g_build);
  mi_session_opts eo = {.model_dir = dir, .tp_size = 1};
  ck_assert_msg(mi_session_open(r->reg, &eo, &r->e, err, sizeof err) == 0, "%s", err);
  r->V = r->e->info.vocab_size;
}

static void prompt(int32_t *ids, int n, unsigned seed) {
  unsigned x = seed * 2654435761u + 7u;
  for (int i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    ids[i] = (int32_t)((x >> 8) % 5000u);
  }
}

/* Runs ids[0, n) into a fresh sequence and stores it. */
static void run_and_store(rt *r, serve_cache *c, const int32_t *ids, int n) {
  char err[512];
  mi_seq *s = mi_test_seq(r->e, N_CTX);
  mi_test_forward(r->e, s, ids, n, NULL, 0);
  ck_assert_msg(serve_cache_store(c, ids, n, s, err, sizeof err) == 0, "%s", err);
  r->e->M->seq_destroy(r->e->model, s);
}

/* Restores a prompt's prefix, runs the rest; its last logits against a
 * sequence that ran it all. Returns the tokens restored. */
static int64_t restore_matches(rt *r, serve_cache *c, const int32_t *ids, int n) {
  char err[512];
  float *a = malloc((size_t)r->V * sizeof *a), *b = malloc((size_t)r->V * sizeof *b);
  mi_seq *s = mi_test_seq(r->e, N_CTX), *ref = mi_test_seq(r->e, N_CTX);
  int64_t k = serve_cache_restore(c, ids, n, s, err, sizeof err);
  ck_assert_msg(k >= 0, "%s", err);
  ck_assert_int_eq(k % B, 0);
  ck_assert_int_lt(k, n);
  ck_assert_int_eq(r->e->M->seq_len(r->e->model, s), k);
  mi_test_forward(r->e, s, ids + k, n - k, a, 0);
  mi_test_forward(r->e, ref, ids, n, b, 0);
  double spread = 0, worst = 0;
  for (int64_t v = 0; v < r->V; v++) {
    if (fabs(b[v]) > spread) spread = fabs(b[v]);
    if (fabs(a[v] - b[v]) > worst) worst = fabs(a[v] - b[v]);
  }
  ck_assert_msg(worst <= 1e-4 * spread, "restored %lld of %d: logits off by %g (spread %g)",
                (long long)k, n, worst, spread);
  r->e->M->seq_destroy(r->e->model, s);
  r->e->M->seq_destroy(r->e->model, ref);
  free(a);
  free(b);
  return k;
}

START_TEST(dense_restore_share_evict) {
  rt r;
  rt_open(&r, "--shape tiny --seed 3", "dense");
  char why[300];
  const uint64_t block_bytes = (uint64_t)B * (r.e->info.state_bytes_token + sizeof(int32_t));
  /* room for about 12 blocks */
  serve_cache *c = serve_cache_new(r.e, 12 * (block_bytes + 128), B, why, sizeof why);
  ck_assert_msg(c, "%s", why);
  serve_cache_stats st;
  int32_t sys[100], a[100];
  prompt(sys, 100, 1);

  /* nothing cached: a miss */
  ck_assert_int_eq(restore_matches(&r, c, sys, 100), 0);
  /* 100 tokens: 6 whole blocks; a restore leaves the last token to run */
  run_and_store(&r, c, sys, 100);
  serve_cache_stats_get(c, &st);
  ck_assert_uint_eq(st.blocks, 6);
  ck_assert_int_eq(restore_matches(&r, c, sys, 100), 96);
  ck_assert_int_eq(restore_matches(&r, c, sys, 97), 96);
  ck_assert_int_eq(restore_matches(&r, c, sys, 96), 80); /* not all of it: one token must run */
  /* a prompt sharing 40 tokens: 2 blocks restored, its own 4 blocks added */
  memcpy(a, sys, 40 * sizeof *a);
  prompt(a + 40, 60, 2);
  ck_assert_int_eq(restore_matches(&r, c, a, 100), 32);
  run_and_store(&r, c, a, 100);
  serve_cache_stats_get(c, &st);
  ck_assert_uint_eq(st.blocks, 10);
  ck_assert_uint_le(st.bytes, st.max_bytes);
  /* a block of other tokens at the same position: a miss from there on */
  int32_t d[100];
  memcpy(d, sys, sizeof d);
  d[20] ^= 1;
  ck_assert_int_eq(restore_matches(&r, c, d, 100), 16);

  /* over the limit: sys is used again (restored), then a third prompt's
   * 6 blocks push the least recently used leaves out: a's own blocks */
  ck_assert_int_eq(restore_matches(&r, c, sys, 100), 96);
  int32_t e3[100];
  prompt(e3, 100, 3);
  run_and_store(&r, c, e3, 100);
  serve_cache_stats_get(c, &st);
  ck_assert_uint_le(st.bytes, st.max_bytes);
  ck_assert_uint_gt(st.evictions, 0);
  ck_assert_int_eq(restore_matches(&r, c, e3, 100), 96);
  int64_t ka = restore_matches(&r, c, a, 100);
  ck_assert_msg(ka <= 32, "a's own blocks should have gone first (restored %lld)", (long long)ka);
  ck_assert_int_ge(restore_matches(&r, c, sys, 100), 32);
  serve_cache_stats_get(c, &st);
  ck_assert_uint_gt(st.hit_tokens, 0);
  ck_assert_uint_ge(st.lookup_tokens, st.hit_tokens);
  serve_cache_free(c);

  /* a limit below one block: no cache, and why */
  ck_assert_ptr_null(serve_cache_new(r.e, 100, B, why, sizeof why));
  ck_assert_msg(strstr(why, "below one block"), "%s", why);
  mi_test_session_close(r.e, r.reg);
}
END_TEST

START_TEST(hybrid_needs_a_snapshot) {
  rt r;
  rt_open(&r, "--family qwen35 --shape tiny --seed 4", "hybrid");
  char why[300], err[512];
  serve_cache *c = serve_cache_new(r.e, 64 << 20, B, why, sizeof why);
  ck_assert_msg(c, "%s", why);
  ck_assert(serve_cache_has_fixed(c));
  int32_t p[90];
  prompt(p, 90, 5);
  /* stored at 90 (not a block end): blocks, but no snapshot: every restore misses */
  run_and_store(&r, c, p, 90);
  serve_cache_stats st;
  serve_cache_stats_get(c, &st);
  ck_assert_uint_eq(st.blocks, 5);
  ck_assert_uint_eq(st.snapshots, 0);
  ck_assert_int_eq(restore_matches(&r, c, p, 90), 0);
  /* stored at 64, a block end: a snapshot there; a restore ends at it */
  mi_seq *s = mi_test_seq(r.e, N_CTX);
  mi_test_forward(r.e, s, p, 64, NULL, 0);
  ck_assert_msg(serve_cache_store(c, p, 64, s, err, sizeof err) == 0, "%s", err);
  r.e->M->seq_destroy(r.e->model, s);
  serve_cache_stats_get(c, &st);
  ck_assert_uint_eq(st.snapshots, 1);
  ck_assert_int_eq(restore_matches(&r, c, p, 90), 64);
  ck_assert_int_eq(restore_matches(&r, c, p, 64), 0); /* the last token must run */
  serve_cache_free(c);
  mi_test_session_close(r.e, r.reg);
}
END_TEST

int main(void) {
  snprintf(g_models, sizeof g_models, "%s/models", mi_test_build_dir(g_build, sizeof g_build, "."));
  return mi_check_run(
      mi_check_suite("prefix_cache", "cache", 300, NULL, NULL,
                     MI_CHECK_TESTS(dense_restore_share_evict, hybrid_needs_a_snapshot)));
}
