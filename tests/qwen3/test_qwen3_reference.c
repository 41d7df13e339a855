/* The qwen3 plugin on the CPU platform against the model contract
 * model.qwen3 interpreted in float64 (core/verify/interp.h: the contract's
 * steps over the operator references, sharing no code with the plugin or
 * the platform; the contract itself is held to llama.cpp's goldens by
 * stage 4), on models made by mi-mkmodel. Checks the logits of every position of a
 * prompt, a prompt fed in several chunks (prefill batching), and decode
 * after prefill (KV cache positions). */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/runtime/session.h"
#include "core/runtime/host.h"
#include "core/runtime/loader.h"
#include "core/runtime/safetensors.h"
#include "core/ckb/ckb.h"
#include "core/verify/interp.h"
#include "tests/util/check_main.h"
#include "tests/util/test_registry.h"

static char g_build[1024], g_models[1024];

/* ---- harness --------------------------------------------------------- */

static void make_model(const char *shape, int seed, char *dir, size_t n) {
  snprintf(dir, n, "%s/%s-seed%d", g_models, shape, seed);
  char cfg[1200];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  FILE *f = fopen(cfg, "r");
  if (f) {
    fclose(f);
    return;
  }
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel' --shape %s --seed %d --out '%s' >/dev/null",
           g_build, shape, seed, dir);
  ck_assert_msg(system(cmd) == 0, "mi-mkmodel failed: %s", cmd);
}

static mi_registry *load_registry(void) { return mi_test_registry(g_build); }

/* max |a - b| over a row, relative to the row's logit spread */
static double row_err(const float *a, const double *b, int V, double *spread) {
  double mx = 0, lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < V; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > mx) mx = d;
    if (b[i] < lo) lo = b[i];
    if (b[i] > hi) hi = b[i];
  }
  *spread = hi - lo;
  return mx;
}

/* Tolerance: weights are bf16 (exact in f32 and f64); the plugin runs f32
 * activations with f32 accumulation, so logits differ from float64 by
 * roughly eps_f32 · sqrt(K) · depth — ~1e-5 relative on these shapes. We
 * allow 1e-3 absolute on logits of spread > 5 (i.e. 2e-4 relative): ten
 * times the error seen, and far below any real defect (a skipped norm or a
 * wrong RoPE pairing moves logits by O(1)). */
#define LOGIT_TOL 1e-3

/* tolerance on |logit - reference| at a position: max(abs_tol, rel_tol x
 * the spread of that position's reference logits) */
static void check_model_kv(const char *shape, int seed, int chunk, const char *kv_type,
                           double abs_tol, double rel_tol) {
  char dir[1200], err[2048];
  make_model(shape, seed, dir, sizeof dir);
  mi_registry *reg = load_registry();
  char bs[16];
  snprintf(bs, sizeof bs, "%d", chunk);
  mi_kv kv[] = {{"batch", bs}, {"kv_type", kv_type}};
  mi_options mo = {kv, 2};
  mi_session_opts eo = {.model_dir = dir, .model_opts = &mo, .tp_size = 1};
  mi_session *e = NULL;
  ck_assert_msg(mi_session_open(reg, &eo, &e, err, sizeof err) == 0, "%s", err);
  /* the float64 reference: the model contract interpreted (interp.h) */
  char ckb_dir[1100];
  snprintf(ckb_dir, sizeof ckb_dir, "%s/ckb", getenv("MI_SOURCE_DIR") ? getenv("MI_SOURCE_DIR") : ".");
  mi_ckb *ckb = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_msg(ckb != NULL, "%s", err);
  const mi_ckb_entry *me = mi_ckb_find(ckb, "model.qwen3");
  ck_assert_ptr_nonnull(me);
  vf_interp *rm = vf_interp_open(ckb, me, e->config, e->weights, err, sizeof err);
  ck_assert_msg(rm != NULL, "%s", err);
  /* a prompt that spans several chunks, with ids across the vocabulary */
  const int T = 23;
  int32_t ids[23];
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 13) % 151643);
  double *ref = vf_interp_forward(rm, ids, T, T, NULL, err, sizeof err); /* [T, V] */
  ck_assert_msg(ref, "%s", err);
  vf_interp_close(rm);
  mi_ckb_close(ckb);
  const int V = (int)e->info.vocab_size;

  /* (1) all positions in one call (chunked internally by `batch`) */
  mi_seq *s = NULL;
  ck_assert_int_eq(e->M->seq_create(e->model, 64, &s, err, sizeof err), 0);
  float *lg = malloc((size_t)T * V * sizeof(float));
  ck_assert_msg(e->M->forward(e->model, s, ids, T, lg, 1, err, sizeof err) == 0, "%s", err);
  double worst = 0, worst_rel = 0;
  for (int t = 0; t < T; t++) {
    double spread, d = row_err(lg + (size_t)t * V, ref + (size_t)t * V, V, &spread);
    ck_assert_msg(spread > 1.0, "%s: logits are flat at t=%d (spread %g)", shape, t, spread);
    double tol = fmax(abs_tol, rel_tol * spread);
    if (d / spread > worst_rel) worst_rel = d / spread;
    ck_assert_msg(d < tol, "%s chunk=%d kv=%s: position %d logits differ by %g (tol %g)", shape,
                  chunk, kv_type, t, d, tol);
    if (d > worst) worst = d;
  }
  /* (2) prefill T-5 then decode one at a time: KV positions must line up */
  ck_assert_int_eq(e->M->seq_truncate(e->model, s, 0), 0);
  float *last = malloc((size_t)V * sizeof(float));
  ck_assert_msg(e->M->forward(e->model, s, ids, T - 5, last, 0, err, sizeof err) == 0, "%s", err);
  for (int t = T - 5; t < T; t++) {
    ck_assert_msg(e->M->forward(e->model, s, ids + t, 1, last, 0, err, sizeof err) == 0, "%s", err);
    double spread, d = row_err(last, ref + (size_t)t * V, V, &spread);
    double tol = fmax(abs_tol, rel_tol * spread);
    ck_assert_msg(d < tol, "%s kv=%s: decode at position %d differs by %g", shape, kv_type, t, d);
  }
  ck_assert_int_eq(e->M->seq_len(e->model, s), T);
  fprintf(stderr,
          "qwen3 %s seed %d batch %d kv %s: max |logit - float64 ref| = %.3g (%.2g of the spread)\n",
          shape, seed, chunk, kv_type, worst, worst_rel);
  free(last);
  free(lg);
  free(ref);
  e->M->seq_destroy(e->model, s);
  mi_session_close(e);
  mi_registry_free(reg);
}

static void check_model(const char *shape, int seed, int chunk) {
  check_model_kv(shape, seed, chunk, "f32", LOGIT_TOL, 0);
}

/* A half-precision KV cache rounds K and V (f16: 2^-11 relative, bf16:
 * 2^-8), which moved logits here by up to 3.4e-4 (f16) and 2.6e-3 (bf16) of
 * a position's logit spread. The tolerances, 2e-3 and 1.5e-2 of the
 * spread, leave ~6x margin and stay far below what a wrong position, head
 * or conversion would do (a spread-sized error). */
START_TEST(tiny_untied_kv_f16) { check_model_kv("tiny-untied", 2, 7, "f16", 0, 2e-3); }
END_TEST
START_TEST(tiny_untied_kv_bf16) { check_model_kv("tiny-untied", 2, 7, "bf16", 0, 1.5e-2); }
END_TEST

START_TEST(tiny_tied) { check_model("tiny", 1, 512); }
END_TEST
START_TEST(tiny_tied_chunked) { check_model("tiny", 1, 4); }
END_TEST
START_TEST(tiny_untied_gqa4) { check_model("tiny-untied", 2, 7); }
END_TEST

int main(void) {
  /* Held to the float64 model at f32 tolerances: the CPU platform's exact
   * matmul path (its default on AVX512_BF16 hosts rounds prefill
   * activations to bf16: the matmul contract's bf16_activations mode). */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  const char *b = getenv("MI_BUILD_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_models, sizeof g_models, "%s/models", g_build);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_models);
  if (system(cmd) != 0) return 1;
  Suite *s = mi_check_suite("qwen3_reference", "float64", 300, NULL, NULL,
                            MI_CHECK_TESTS(tiny_tied, tiny_tied_chunked, tiny_untied_gqa4,
                                           tiny_untied_kv_f16, tiny_untied_kv_bf16));
  return mi_check_run(s);
}
