/* forward_batch (model ABI 1.3) against forward one sequence at a time:
 * sequences of different lengths decoded in one batched pass get the same
 * logits as each decoded alone, and the same KV state (the steps after
 * agree too). Also: a refused batch leaves every sequence as it was. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "core/runtime/session.h"
#include "tests/util/check_main.h"
#include "tests/util/test_env.h"

static char g_build[1024];

static void make_model(const char *shape, int seed, char *dir, size_t n) {
  char args[128], name[128], cmd[4096];
  snprintf(args, sizeof args, "--shape %s --seed %d", shape, seed);
  snprintf(name, sizeof name, "%s-seed%d", shape, seed);
  ck_assert_msg(mi_test_checkpoint(g_build, args, name, dir, n, cmd, sizeof cmd) == 0,
                "mi-mkmodel failed: %s", cmd);
}

static mi_session *open_session(const char *shape, int seed, const char *kv_type,
                                mi_registry **reg) {
  char dir[1200], pdir[1100], err[2048];
  make_model(shape, seed, dir, sizeof dir);
  snprintf(pdir, sizeof pdir, "%s/lib/metainfer", g_build);
  mi_loader_opts lo = {.plugin_dir = pdir};
  int fatal = 0;
  *reg = mi_registry_load(&lo, &fatal, err, sizeof err);
  ck_assert_msg(*reg && !fatal, "plugins: %s", err);
  mi_kv kv[] = {{"kv_type", kv_type}, {"threads", "1"}};
  mi_options mo = {kv, 1};
  mi_session_opts eo = {.model_dir = dir, .model_opts = &mo, .tp_size = 1};
  mi_session *e = NULL;
  ck_assert_msg(mi_session_open(*reg, &eo, &e, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(mi_model_has(e->M, forward_batch), "the qwen3 plugin has no forward_batch");
  /* a plugin built before ABI 1.3 (a shorter struct): no batched entry,
   * whatever lies past its end */
  mi_model_iface old = *e->M;
  old.struct_size = (uint32_t)offsetof(mi_model_iface, forward_batch);
  ck_assert(!mi_model_has(&old, forward_batch));
  return e;
}

#define NS 5
#define STEPS 6

/* max |a-b| / spread of b, over one row */
static double rel_err(const float *a, const float *b, int64_t V) {
  double mx = 0, lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > mx) mx = d;
    if (b[i] < lo) lo = b[i];
    if (b[i] > hi) hi = b[i];
  }
  return hi > lo ? mx / (hi - lo) : mx;
}

static void check_batched(const char *kv_type, double tol) {
  mi_registry *reg;
  mi_session *e = open_session("tiny", 3, kv_type, &reg);
  const mi_model_iface *M = e->M;
  const int64_t V = e->info.vocab_size;
  char err[1024];
  mi_seq *a[NS], *b[NS];
  float *la[NS], *lb[NS];
  int32_t next[NS];
  for (int i = 0; i < NS; i++) {
    ck_assert_int_eq(M->seq_create(e->model, 64, &a[i], err, sizeof err), 0);
    ck_assert_int_eq(M->seq_create(e->model, 64, &b[i], err, sizeof err), 0);
    la[i] = malloc((size_t)V * sizeof(float));
    lb[i] = malloc((size_t)V * sizeof(float));
    /* prompts of lengths 1, 4, 7, ... with different ids */
    int n = 1 + 3 * i;
    int32_t ids[32];
    for (int t = 0; t < n; t++) ids[t] = (int32_t)((t * 7919 + 131 * i + 13) % 151643);
    ck_assert_int_eq(M->forward(e->model, a[i], ids, n, la[i], 0, err, sizeof err), 0);
    ck_assert_int_eq(M->forward(e->model, b[i], ids, n, lb[i], 0, err, sizeof err), 0);
  }
  double worst = 0;
  int exact = 1;
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < NS; i++) next[i] = (int32_t)((s * 104729 + i * 15485863) % 151643);
    /* reference: one at a time */
    for (int i = 0; i < NS; i++)
      ck_assert_msg(M->forward(e->model, a[i], &next[i], 1, la[i], 0, err, sizeof err) == 0, "%s",
                    err);
    /* batched: all, in a shuffled order */
    mi_seq *bs[NS];
    int32_t bid[NS];
    float *bl[NS];
    for (int k = 0; k < NS; k++) {
      int i = (k * 3 + s) % NS;
      bs[k] = b[i];
      bid[k] = next[i];
      bl[k] = lb[i];
    }
    ck_assert_msg(M->forward_batch(e->model, bs, bid, NS, bl, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < NS; i++) {
      ck_assert_int_eq(M->seq_len(e->model, a[i]), M->seq_len(e->model, b[i]));
      double r = rel_err(lb[i], la[i], V);
      if (r > worst) worst = r;
      if (memcmp(la[i], lb[i], (size_t)V * sizeof(float)) != 0) exact = 0;
    }
  }
  fprintf(stderr, "forward_batch (%s KV): worst logit difference %.3g of the spread%s\n", kv_type,
          worst, exact ? " (bit-identical)" : "");
  ck_assert_msg(worst <= tol, "batched logits differ by %.3g of the spread (tolerance %.3g)", worst,
                tol);
  /* a refused batch (the same sequence twice) advances nothing */
  int64_t len0 = M->seq_len(e->model, b[0]), len1 = M->seq_len(e->model, b[1]);
  mi_seq *dup[3] = {b[1], b[0], b[1]};
  int32_t did[3] = {1, 2, 3};
  float *dl[3] = {lb[1], lb[0], lb[1]};
  ck_assert_int_ne(M->forward_batch(e->model, dup, did, 3, dl, err, sizeof err), 0);
  ck_assert_int_eq(M->seq_len(e->model, b[0]), len0);
  ck_assert_int_eq(M->seq_len(e->model, b[1]), len1);
  for (int i = 0; i < NS; i++) {
    M->seq_destroy(e->model, a[i]);
    M->seq_destroy(e->model, b[i]);
    free(la[i]);
    free(lb[i]);
  }
  mi_session_close(e);
  mi_registry_free(reg);
}

/* Rows of one matmul may be summed in another order than a lone row:
 * allow f32 rounding (1e-5 of the logit spread), far below any real defect
 * (a row attending to another sequence's cache moves logits by O(1)). */
START_TEST(batched_equals_single_f32) { check_batched("f32", 1e-5); }
END_TEST

START_TEST(batched_equals_single_f16) { check_batched("f16", 1e-5); }
END_TEST

int main(void) {
  mi_test_build_dir(g_build, sizeof g_build, "build");
  return mi_check_run(
      mi_check_suite("serve_batch", "forward_batch", 300, NULL, NULL,
                     MI_CHECK_TESTS(batched_equals_single_f32, batched_equals_single_f16)));
}
