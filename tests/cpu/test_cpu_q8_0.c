/* The CPU platform's matmul with Q8_0 weights (plugins/platforms/cpu/
 * cpu_matmul_q8_0.c) against float64, on every ISA variant this host has.
 *
 * The weights are made here in ggml's block layout (an f16 scale, 32 int8;
 * -128 included, which ggml's quantizer never writes but a file may hold)
 * and dequantized exactly as the format defines. The activations are
 * quantized here as the plugin specifies (plugins/platforms/cpu/README.md,
 * "Q8_0 weights"): per block of 32, amax = max|x|, d = amax / 127 (f32),
 * q = RNE(x · (1/d)) (f32), d = 0 below 2^-100, NaN for a block with a NaN
 * or an infinity. Two checks per output:
 *   1. against the float64 product of the quantized operands: only f32
 *      rounding of the block scales and the sum over blocks,
 *      |y - yq| <= (K/32 + 16) 2^-24 Σ_b |d_x d_w| Σ_k |q_x q_w|
 *      (a differently quantized x fails this by far);
 *   2. against the float64 product of the unquantized x, within the bound
 *      the README states: |y - y64| <= Σ_b (amax_b / 254)(1 + 2^-14)
 *      Σ_{k in b} |w_k| + the bound of check 1.
 * Shapes: K = 32, 64, 96, 4096 (and 1024, 1120, 3072), N odd, T = 1, 2,
 * 7, 64 (and 3, 16-23, 300: the panel GEMM's remainders and passes).
 * matmul_act=f32 (exact mode): within K 2^-24 Σ|x w| of y64. Also: embed
 * of a Q8_0 table (exact), NaN propagation, K not a multiple of 32 refused,
 * the empty call (what the runtime asks before keeping Q8_0 weights). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_harness.h"
#include "mi/tensor.h"
#include "q8_act_test.h"
#include "tests/util/check_main.h"

#define U (FLT_EPSILON / 2) /* f32 unit roundoff 2^-24 */

/* ---- Q8_0 weights ---- */

/* W [N, K] as blocks, and its exact values in wv (double). */
static uint8_t *rand_q8(int64_t N, int64_t K, double *wv) {
  const int64_t nb = K / 32;
  uint8_t *w = malloc((size_t)(N * nb) * 34);
  for (int64_t n = 0; n < N; n++)
    for (int64_t b = 0; b < nb; b++) {
      uint8_t *p = w + (size_t)(n * nb + b) * 34;
      /* scale: a normal f16 in [2^-12, 2^-4), either sign (ggml's are >= 0,
       * but the format allows any half) */
      const int e = 3 + (int)(rng_u64() % 8), man = (int)(rng_u64() & 0x3ff);
      const uint16_t h = (uint16_t)((rng_u64() & 1) << 15 | (uint16_t)(e << 10) | (uint16_t)man);
      memcpy(p, &h, 2);
      const double d = (h & 0x8000 ? -1.0 : 1.0) * ldexp(1.0 + man / 1024.0, e - 15);
      for (int i = 0; i < 32; i++) {
        int8_t q = (int8_t)(uint8_t)rng_u64(); /* -128 .. 127 */
        if (b == 0 && i == 0) q = -128;        /* always one */
        p[2 + i] = (uint8_t)q;
        wv[n * K + b * 32 + i] = d * q;
      }
    }
  return w;
}

/* Output at from the quantized row and row o of the Q8_0 weights (ctx:
 * {w, wv}, its blocks and their exact values). */
typedef struct q8_weights {
  const uint8_t *w;
  const double *wv;
} q8_weights;

static void q8_row(const void *ctx, refs *r, size_t at, const float *x, const int8_t *qx,
                   const float *dx, int64_t o, int64_t K) {
  const q8_weights *c = ctx;
  const int64_t nb = K / 32;
  double yq = 0, s = 0, y64 = 0, ta = 0, mag = 0;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *p = c->w + (size_t)(o * nb + b) * 34;
    uint16_t h;
    memcpy(&h, p, 2);
    const double d_w = (double)mi_f16_to_f32(h);
    int64_t isum = 0, iabs = 0;
    double amax = 0, wabs = 0;
    for (int i = 0; i < 32; i++) {
      const int qw = (int8_t)p[2 + i], q = qx[b * 32 + i];
      const double xv = x[b * 32 + i], wval = c->wv[o * K + b * 32 + i];
      isum += (int64_t)q * qw;
      iabs += llabs((int64_t)q * qw);
      y64 += xv * wval;
      mag += fabs(xv * wval);
      amax = fmax(amax, fabs(xv));
      wabs += fabs(wval);
    }
    yq += (double)dx[b] * d_w * (double)isum;
    s += fabs((double)dx[b] * d_w) * (double)iabs;
    ta += amax < 0x1p-100 ? amax * wabs : amax / 254.0 * (1 + 0x1p-14) * wabs;
  }
  refs_set(r, at, K, yq, s, y64, ta, mag);
}

/* One shape on an open platform: both checks, or (exact) the f32 bound. */
static void check_shape(plat *p, int64_t M, int64_t N, int64_t K, int exact, const char *isa) {
  double *wv = malloc((size_t)(N * K) * sizeof *wv);
  uint8_t *w = rand_q8(N, K, wv);
  float *x = rand_x(M, K);
  const q8_weights qw = {w, wv};
  refs r = reference_of(x, M, N, K, q8_row, &qw);
  char what[128];
  snprintf(what, sizeof what, "%s matmul q8_0 M=%lld N=%lld K=%lld", isa, (long long)M,
           (long long)N, (long long)K);
  float *y = matmul_checked(p, x, w, MI_DTYPE_Q8_0, M, N, K, what);
  double worst_q = 0, worst_a = 0;
  for (int64_t i = 0; i < M * N; i++) {
    const double got = y[i];
    if (exact) {
      const double lim = (double)K * U * r.mag[i] + 1e-30;
      EXPECT(fabs(got - r.y64[i]) <= lim,
             "%s exact M=%lld N=%lld K=%lld out %lld: %.9g vs %.9g (bound %.3g)", isa, (long long)M,
             (long long)N, (long long)K, (long long)i, got, r.y64[i], lim);
      continue;
    }
    EXPECT(fabs(got - r.yq[i]) <= r.tq[i],
           "%s M=%lld N=%lld K=%lld out (%lld,%lld): %.9g vs quantized-operand reference %.9g "
           "(|diff| %.3g > bound %.3g)",
           isa, (long long)M, (long long)N, (long long)K, (long long)(i / N), (long long)(i % N),
           got, r.yq[i], fabs(got - r.yq[i]), r.tq[i]);
    EXPECT(fabs(got - r.y64[i]) <= r.ta[i],
           "%s M=%lld N=%lld K=%lld out %lld: %.9g vs float64 %.9g (|diff| %.3g > bound %.3g)", isa,
           (long long)M, (long long)N, (long long)K, (long long)i, got, r.y64[i],
           fabs(got - r.y64[i]), r.ta[i]);
    if (r.tq[i] > 0) worst_q = fmax(worst_q, fabs(got - r.yq[i]) / r.tq[i]);
    if (r.ta[i] > 0) worst_a = fmax(worst_a, fabs(got - r.y64[i]) / r.ta[i]);
  }
  if (!exact && (K == 4096 || M == 64 || M == 300))
    printf("  %s M=%lld N=%lld K=%lld: worst |y - yq| / bound %.3f, |y - y64| / bound %.3f\n", isa,
           (long long)M, (long long)N, (long long)K, worst_q, worst_a);
  refs_free(&r);
  free(x);
  free(y);
  free(w);
  free(wv);
}

static const int64_t KS[] = {32, 64, 96, 4096};
static const int64_t NS[] = {1, 5, 67};
static const int64_t MS[] = {1, 2, 7, 64};

/* Loop i: ISA i % NISA, threads 1 or 2 (i / NISA). */
START_TEST(test_q8_matmul) {
  const char *thr = _i / NISA ? "2" : "1";
  plat p;
  rng_seed(seed_for(1, _i));
  if (!open_isa(_i % NISA, thr, 0, &p)) return;
  for (size_t k = 0; k < sizeof KS / sizeof *KS; k++)
    for (size_t n = 0; n < sizeof NS / sizeof *NS; n++)
      for (size_t m = 0; m < sizeof MS / sizeof *MS; m++)
        check_shape(&p, MS[m], NS[n], KS[k], 0, ISAS[_i % NISA]);
  /* the decode shapes of a Qwen3-0.6B layer and its lm_head slice: many
   * rows, the thread split and the weight streams */
  check_shape(&p, 1, 1030, 1024, 0, ISAS[_i % NISA]);
  check_shape(&p, 3, 515, 3072, 0, ISAS[_i % NISA]);
  /* prefill on packed panels (AVX-512 VNNI from 16 tokens per thread):
   * every count of tokens left after the 8-token tiles, outputs past 16,
   * K over the 1024-value panel block with an odd tail, a pass of 256 */
  for (int64_t m = 16; m < 24; m++)
    check_shape(&p, m, 37, 1120, 0, ISAS[_i % NISA]);
  check_shape(&p, 300, 21, 96, 0, ISAS[_i % NISA]);
  close_plat(&p);
}
END_TEST

START_TEST(test_q8_exact) {
  plat p;
  rng_seed(seed_for(2, _i));
  if (!open_isa(_i, "2", 1, &p)) return;
  for (size_t k = 0; k < sizeof KS / sizeof *KS; k++)
    check_shape(&p, 7, 33, KS[k], 1, ISAS[_i]);
  check_shape(&p, 1, 70, 1024, 1, ISAS[_i]);
  close_plat(&p);
}
END_TEST

/* Embed of a Q8_0 table: each row dequantized exactly. NaN in x: the
 * outputs it feeds are NaN. Refusals. */
START_TEST(test_q8_embed_and_edges) {
  plat p;
  rng_seed(seed_for(3, _i));
  if (!open_isa(_i, "2", 0, &p)) return;
  const int64_t V = 37, dim = 96;
  double *wv = malloc((size_t)(V * dim) * sizeof *wv);
  uint8_t *tab = rand_q8(V, dim, wv);
  int32_t ids[5] = {0, 36, 5, 5, 17};
  float y[5 * 96];
  ck_assert_int_eq(p.pi->embed(p.ctx, NULL, y, tab, MI_DTYPE_Q8_0, ids, 5, V, dim), 0);
  for (int t = 0; t < 5; t++)
    for (int i = 0; i < dim; i++)
      EXPECT(y[t * dim + i] == (float)wv[ids[t] * dim + i], "embed row %d col %d: %g vs %g", ids[t],
             i, y[t * dim + i], wv[ids[t] * dim + i]);
  ck_assert_int_ne(p.pi->embed(p.ctx, NULL, y, tab, MI_DTYPE_Q8_0, ids, 1, V, 40), 0);
  EXPECT(strstr(p.pi->last_error(p.ctx), "multiple of 32"), "got '%s'", p.pi->last_error(p.ctx));

  /* NaN / infinity in a block of row 1: row 1's outputs NaN, row 0's finite */
  float x[2 * 96];
  for (int i = 0; i < 2 * 96; i++)
    x[i] = (float)rng_unif(-1, 1);
  x[96 + 40] = NAN;
  float yy[2 * 37];
  ck_assert_int_eq(p.pi->matmul(p.ctx, NULL, yy, x, tab, MI_DTYPE_Q8_0, 2, V, dim), 0);
  for (int o = 0; o < V; o++) {
    EXPECT(isfinite(yy[o]), "row 0 out %d: %g", o, yy[o]);
    EXPECT(isnan(yy[V + o]), "row 1 (a NaN in x) out %d: %g, want NaN", o, yy[V + o]);
  }
  x[96 + 40] = INFINITY;
  ck_assert_int_eq(p.pi->matmul(p.ctx, NULL, yy, x, tab, MI_DTYPE_Q8_0, 2, V, dim), 0);
  for (int o = 0; o < V; o++)
    EXPECT(isnan(yy[V + o]), "row 1 (inf in x) out %d: %g", o, yy[V + o]);

  /* K not a whole number of blocks: refused in one line */
  ck_assert_int_ne(p.pi->matmul(p.ctx, NULL, yy, x, tab, MI_DTYPE_Q8_0, 1, 2, 48), 0);
  EXPECT(strstr(p.pi->last_error(p.ctx), "multiple of 32") &&
             !strchr(p.pi->last_error(p.ctx), '\n'),
         "got '%s'", p.pi->last_error(p.ctx));
  /* the empty call the runtime makes to ask whether q8_0 is accepted */
  ck_assert_int_eq(p.pi->matmul(p.ctx, NULL, NULL, NULL, NULL, MI_DTYPE_Q8_0, 0, 0, 32), 0);
  ck_assert_int_eq(p.pi->embed(p.ctx, NULL, NULL, NULL, MI_DTYPE_Q8_0, NULL, 0, 0, 32), 0);
  ck_assert_str_eq(mi_dtype_name(MI_DTYPE_Q8_0), "q8_0");
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q8_0, 4096), 4352);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q8_0, 40), 0);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_BF16, 40), 80);
  close_plat(&p);
  free(tab);
  free(wv);
}
END_TEST

static Suite *q8_suite(void) {
  Suite *s = suite_create("cpu_q8_0");
  TCase *tc = mi_check_case(s, "q8_0", 120, NULL, NULL);
  tcase_add_loop_test(tc, test_q8_matmul, 0, 2 * NISA);
  mi_check_add_loop(tc, MI_CHECK_TESTS(test_q8_exact, test_q8_embed_and_edges), 0, NISA);
  return s;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mi_check_run(q8_suite());
}
