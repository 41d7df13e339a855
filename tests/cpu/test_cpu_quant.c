/* The CPU platform's matmul and embed with Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K and Q6_K weights
 * (plugins/platforms/cpu/cpu_quant*.c on the Q8_0 driver) against float64,
 * on every ISA variant this host has.
 *
 * The weights are random valid blocks in GGUF's layouts (sdk/include/mi/
 * quant.h): random f16 scales of sane magnitude and either sign, random
 * codes, random 6-bit Q4_K scales and mins packed into the 12 bytes (any 12
 * bytes are valid), random int8 Q6_K scales (-128 included); their values
 * are mi_quant_value64's, exactly. The activations are quantized here
 * independently, as the plugin specifies (README "Q8_0 weights", reused
 * for these types): per block of 32, d = amax/127 (f32), q = RNE(x·(1/d)),
 * d = 0 below 2^-100, NaN with a NaN or an infinity in the block. Two
 * checks per output:
 *   1. against the float64 product of the quantized operands, within f32
 *      rounding: (K/32 + 16)·2^-24·Σ_b |d_x|·Σ_k |q_x|·|w|_terms, where
 *      |w|_terms is |w| but for the types with a min (Q4_K, Q5_K, Q4_1,
 *      Q5_1, Q2_K) |scale·q| + |min| (the kernels form both terms; a
 *      wrongly quantized x or a wrong code fails by far);
 *   2. against the float64 product of the unquantized x, within the
 *      README's bound: Σ_b (amax_b/254)(1 + 2^-14)·Σ_{k in b}|w_k| + 1.
 * Shapes: K of one block, three blocks and 1120 / 2048 values; N 1, 5, 67
 * (not a multiple of the 4-row tile); M 1, 2, 3, 4, 5, 17, 33 (decode,
 * every tile height and prefill with tails); 1 and 2 threads; plus a decode
 * shape with many rows (the thread split and the weight streams).
 * matmul_act=f32: within (K + 2)·2^-24·Σ|x w| of the float64 product of
 * the f32 x. Also: embed of each table type (each value rounded once),
 * NaN propagation, K or dim not a whole number of blocks refused, the
 * empty calls the runtime makes before keeping weights in a type.
 *
 * MI_QUANT_BENCH=1 runs only a GEMV timing (prints GB/s of weights, asserts
 * nothing): N 3072 x K 1024 and N 1024 x K 3072, M = 1, 2 threads
 * (MI_QUANT_BENCH_THREADS), the host's best variant (MI_QUANT_BENCH_ISA:
 * another), Q8_0 against the three types, weights cold (copies cycled
 * through 256 MB; =hot: one copy, from cache), beside a STREAM-style read
 * of memory. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cli/bandwidth.h"
#include "cpu_test_harness.h"
#include "mi/quant.h"
#include "mi/tensor.h"
#include "q8_act_test.h"
#include "tests/util/check_main.h"

#define U (FLT_EPSILON / 2) /* f32 unit roundoff 2^-24 */

static const mi_dtype TYPES[] = {MI_DTYPE_Q4_0, MI_DTYPE_Q4_K, MI_DTYPE_Q6_K,
                                 MI_DTYPE_Q5_K, MI_DTYPE_Q4_1, MI_DTYPE_Q5_0,
                                 MI_DTYPE_Q5_1, MI_DTYPE_Q2_K, MI_DTYPE_Q3_K};
#define NTYPE 9

/* The byte offsets of a block's f16 scale d and of its min (dmin or m;
 * -1: none), from quant.h's layouts. */
static int d_at(mi_dtype t) {
  return t == MI_DTYPE_Q6_K ? 208 : t == MI_DTYPE_Q2_K ? 80 : t == MI_DTYPE_Q3_K ? 108 : 0;
}
static int min_at(mi_dtype t) {
  switch (t) {
  case MI_DTYPE_Q4_K:
  case MI_DTYPE_Q5_K:
  case MI_DTYPE_Q4_1:
  case MI_DTYPE_Q5_1: return 2;
  case MI_DTYPE_Q2_K: return 82;
  default: return -1;
  }
}

/* |w|_terms of value i of the block at p: the magnitudes of the two terms
 * the kernels form for a type with a min (scale·code and the min), |w|
 * for the others. */
static double w_terms(mi_dtype t, const uint8_t *p, int i) {
  if (t == MI_DTYPE_Q4_K || t == MI_DTYPE_Q5_K) {
    int sc, m;
    mi_q4_k_scale_min(p + 4, i / 32, &sc, &m);
    const double d = mi_quant_f16(p), dmin = mi_quant_f16(p + 2);
    const int q = t == MI_DTYPE_Q5_K ? mi_q5_k_code(p, i) : mi_q4_k_code(p, i);
    return fabs(d * sc * q) + fabs(dmin * m);
  }
  if (t == MI_DTYPE_Q4_1 || t == MI_DTYPE_Q5_1) { /* d·q + m */
    const double m = mi_quant_f16(p + 2);
    return fabs(mi_quant_value64(t, p, i) - m) + fabs(m);
  }
  if (t == MI_DTYPE_Q2_K) { /* d·sc·q - dmin·m, sub-block s */
    const int n = i / 128, j = (i % 128) / 32, l = i % 32, s = 8 * n + 2 * j + l / 16;
    const double dm = mi_quant_f16(p + 82) * (p[s] >> 4);
    return fabs(mi_quant_value64(t, p, i) + dm) + fabs(dm);
  }
  return fabs(mi_quant_value64(t, p, i));
}

/* ---- random blocks ---- */

/* A random normal f16 in [2^(e0-15), 2^(e0-7)), random sign when sgn. */
static uint16_t rand_f16(int e0, int sgn) {
  const int e = e0 + (int)(rng_u64() % 8), man = (int)(rng_u64() & 0x3ff);
  return (uint16_t)((sgn ? (rng_u64() & 1) << 15 : 0) | (uint64_t)(e << 10) | (uint64_t)man);
}

static void rand_block(mi_dtype t, uint8_t *p) {
  const size_t bb = mi_dtype_block_bytes(t);
  for (size_t i = 0; i < bb; i++)
    p[i] = (uint8_t)rng_u64(); /* codes, Q4_K scales/mins, Q6_K int8 scales */
  /* d: |d| in [2^-12, 2^-4); Q6_K's and Q3_K's lower, d·scale·32 of the
   * same order as the others */
  uint16_t h = rand_f16(t == MI_DTYPE_Q6_K || t == MI_DTYPE_Q3_K ? 0 : 3, 1);
  memcpy(p + d_at(t), &h, 2);
  if (min_at(t) >= 0) {
    h = rand_f16(1, 1); /* dmin, or m */
    memcpy(p + min_at(t), &h, 2);
  }
}

/* W [N, K] of type t, its exact values wv and |w|_terms wa (see the top). */
static uint8_t *rand_w(mi_dtype t, int64_t N, int64_t K, double *wv, double *wa) {
  const int64_t qk = mi_dtype_block(t), nb = K / qk;
  const size_t bb = mi_dtype_block_bytes(t);
  uint8_t *w = malloc((size_t)(N * nb) * bb);
  for (int64_t r = 0; r < N * nb; r++) {
    uint8_t *p = w + (size_t)r * bb;
    rand_block(t, p);
    for (int i = 0; i < qk; i++) {
      const double v = mi_quant_value64(t, p, i);
      wv[r * qk + i] = v;
      wa[r * qk + i] = w_terms(t, p, i);
    }
  }
  return w;
}

/* Output at from the quantized row and row o of W (ctx: {wv, wa} of
 * rand_w, its exact values and its |w| terms). */
static void ref_row(const void *ctx, refs *r, size_t at, const float *x, const int8_t *qx,
                    const float *dx, int64_t o, int64_t K) {
  const double *const *w = ctx, *wv = w[0] + o * K, *wa = w[1] + o * K;
  double yq = 0, s = 0, y64 = 0, ta = 0, mag = 0;
  for (int64_t b = 0; b < K / 32; b++) {
    double isum = 0, iabs = 0, amax = 0, wabs = 0;
    for (int64_t k = b * 32; k < b * 32 + 32; k++) {
      isum += qx[k] * wv[k];
      iabs += fabs((double)qx[k]) * wa[k];
      y64 += (double)x[k] * wv[k];
      mag += fabs((double)x[k] * wv[k]);
      amax = fmax(amax, fabs((double)x[k]));
      wabs += fabs(wv[k]);
    }
    yq += (double)dx[b] * isum;
    s += fabs((double)dx[b]) * iabs;
    ta += amax < 0x1p-100 ? amax * wabs : amax / 254.0 * (1 + 0x1p-14) * wabs;
  }
  refs_set(r, at, K, yq, s, y64, ta, mag);
}

typedef struct worst {
  double q, a;
} worst;

/* One output against the references (or, exact, the f32 bound). */
static void check_out(const refs *r, int64_t i, double got, int exact, int64_t K, worst *wo,
                      const char *what) {
  if (exact) {
    const double lim = (double)(K + 2) * U * r->mag[i] + 1e-30;
    EXPECT(fabs(got - r->y64[i]) <= lim, "%s exact out %lld: %.9g vs %.9g (bound %.3g)", what,
           (long long)i, got, r->y64[i], lim);
    return;
  }
  EXPECT(fabs(got - r->yq[i]) <= r->tq[i],
         "%s out %lld: %.9g vs quantized-operand reference %.9g (|diff| %.3g > bound %.3g)", what,
         (long long)i, got, r->yq[i], fabs(got - r->yq[i]), r->tq[i]);
  EXPECT(fabs(got - r->y64[i]) <= r->ta[i],
         "%s out %lld: %.9g vs float64 %.9g (|diff| %.3g > bound %.3g)", what, (long long)i, got,
         r->y64[i], fabs(got - r->y64[i]), r->ta[i]);
  wo->q = fmax(wo->q, fabs(got - r->yq[i]) / r->tq[i]);
  wo->a = fmax(wo->a, fabs(got - r->y64[i]) / r->ta[i]);
}

static void check_shape(plat *p, mi_dtype t, int64_t M, int64_t N, int64_t K, int exact,
                        const char *isa, worst *wo) {
  double *wv = malloc((size_t)(N * K) * sizeof *wv), *wa = malloc((size_t)(N * K) * sizeof *wa);
  uint8_t *w = rand_w(t, N, K, wv, wa);
  float *x = rand_x(M, K);
  const double *const w_ref[2] = {wv, wa};
  refs r = reference_of(x, M, N, K, ref_row, w_ref);
  char what[128];
  snprintf(what, sizeof what, "%s %s M=%lld N=%lld K=%lld", isa, mi_dtype_name(t), (long long)M,
           (long long)N, (long long)K);
  float *y = matmul_checked(p, x, w, t, M, N, K, what);
  for (int64_t i = 0; i < M * N; i++)
    check_out(&r, i, y[i], exact, K, wo, what);
  refs_free(&r);
  free(x);
  free(y);
  free(w);
  free(wv);
  free(wa);
}

static const int64_t MS[] = {1, 2, 3, 4, 5, 17, 33};
static const int64_t NS[] = {1, 5, 67};

/* Loop i: ISA i % NISA, threads 1 or 2 (i / NISA). */
START_TEST(test_quant_matmul) {
  const char *thr = _i / NISA ? "2" : "1";
  plat p;
  rng_seed(seed_for(1, _i));
  if (!open_isa(_i % NISA, thr, 0, &p)) return;
  for (int ti = 0; ti < NTYPE; ti++) {
    const mi_dtype t = TYPES[ti];
    const int64_t qk = mi_dtype_block(t);
    const int64_t KS[] = {qk, 3 * qk,
                          qk == 32 ? 1120 : 2048}; /* 1120: 8-block steps and an odd tail */
    worst wo = {0, 0};
    for (size_t k = 0; k < 3; k++)
      for (size_t n = 0; n < sizeof NS / sizeof *NS; n++)
        for (size_t m = 0; m < sizeof MS / sizeof *MS; m++)
          check_shape(&p, t, MS[m], NS[n], KS[k], 0, ISAS[_i % NISA], &wo);
    check_shape(&p, t, 1, 1030, 1024, 0, ISAS[_i % NISA], &wo); /* decode: split, streams */
    check_shape(&p, t, 2, 260, 3072, 0, ISAS[_i % NISA], &wo);
    printf("  %s %s: worst |y - yq| / bound %.3f, |y - y64| / bound %.3f\n", ISAS[_i % NISA],
           mi_dtype_name(t), wo.q, wo.a);
  }
  close_plat(&p);
}
END_TEST

START_TEST(test_quant_exact) {
  plat p;
  rng_seed(seed_for(2, _i));
  if (!open_isa(_i, "2", 1, &p)) return;
  worst wo = {0, 0};
  for (int ti = 0; ti < NTYPE; ti++) {
    const int64_t qk = mi_dtype_block(TYPES[ti]);
    check_shape(&p, TYPES[ti], 7, 33, qk, 1, ISAS[_i], &wo);
    check_shape(&p, TYPES[ti], 3, 33, 4 * qk, 1, ISAS[_i], &wo);
    check_shape(&p, TYPES[ti], 1, 70, 1024, 1, ISAS[_i], &wo);
  }
  close_plat(&p);
}
END_TEST

/* Embed (each value rounded once), NaN propagation, refusals, probes. */
static void edges_for(plat *p, mi_dtype t) {
  const int64_t qk = mi_dtype_block(t), V = 37, dim = 2 * qk;
  double *wv = malloc((size_t)(V * dim) * sizeof *wv), *wa = malloc((size_t)(V * dim) * sizeof *wa);
  uint8_t *tab = rand_w(t, V, dim, wv, wa);
  int32_t ids[5] = {0, 36, 5, 5, 17};
  float *y = malloc((size_t)(5 * dim) * sizeof *y);
  const char *tn = mi_dtype_name(t);
  ck_assert_int_eq(p->pi->embed(p->ctx, NULL, y, tab, t, ids, 5, V, dim), 0);
  for (int r = 0; r < 5; r++)
    for (int64_t i = 0; i < dim; i++)
      EXPECT(y[r * dim + i] == (float)wv[ids[r] * dim + i], "%s embed row %d col %lld: %g vs %g",
             tn, ids[r], (long long)i, y[r * dim + i], wv[ids[r] * dim + i]);
  char want[64];
  snprintf(want, sizeof want, "multiple of %lld", (long long)qk);
  ck_assert_int_ne(p->pi->embed(p->ctx, NULL, y, tab, t, ids, 1, V, qk + 16), 0);
  EXPECT(strstr(p->pi->last_error(p->ctx), want), "%s: got '%s'", tn, p->pi->last_error(p->ctx));

  /* NaN / infinity in a block of row 1: row 1's outputs NaN, row 0's finite */
  float *x = malloc((size_t)(2 * dim) * sizeof *x), yy[2 * 37];
  for (int64_t i = 0; i < 2 * dim; i++)
    x[i] = (float)rng_unif(-1, 1);
  for (int v = 0; v < 2; v++) {
    x[dim + qk + 7] = v ? INFINITY : NAN;
    ck_assert_int_eq(p->pi->matmul(p->ctx, NULL, yy, x, tab, t, 2, V, dim), 0);
    for (int o = 0; o < V; o++) {
      EXPECT(isfinite(yy[o]), "%s row 0 out %d: %g", tn, o, yy[o]);
      EXPECT(isnan(yy[V + o]), "%s row 1 (%s in x) out %d: %g, want NaN", tn, v ? "inf" : "NaN", o,
             yy[V + o]);
    }
  }
  /* K not a whole number of blocks: refused in one line */
  ck_assert_int_ne(p->pi->matmul(p->ctx, NULL, yy, x, tab, t, 1, 2, qk + 16), 0);
  EXPECT(strstr(p->pi->last_error(p->ctx), want) && !strchr(p->pi->last_error(p->ctx), '\n'),
         "%s: got '%s'", tn, p->pi->last_error(p->ctx));
  /* the empty calls the runtime makes before keeping weights in type t */
  ck_assert_int_eq(p->pi->matmul(p->ctx, NULL, NULL, NULL, NULL, t, 0, 0, qk), 0);
  ck_assert_int_eq(p->pi->embed(p->ctx, NULL, NULL, NULL, t, NULL, 0, 0, qk), 0);
  free(x);
  free(y);
  free(tab);
  free(wv);
  free(wa);
}

START_TEST(test_quant_embed_and_edges) {
  plat p;
  rng_seed(seed_for(3, _i));
  if (!open_isa(_i, "2", 0, &p)) return;
  for (int ti = 0; ti < NTYPE; ti++)
    edges_for(&p, TYPES[ti]);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q4_0, 4096), 4096 / 32 * 18);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q4_K, 1024), 4 * 144);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q6_K, 1024), 4 * 210);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q6_K, 1000), 0);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q5_K, 1024), 4 * 176);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q5_K, 1000), 0);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q2_K, 1024), 4 * 84);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q3_K, 1024), 4 * 110);
  ck_assert_uint_eq(mi_dtype_row_bytes(MI_DTYPE_Q5_1, 1024), 32 * 24);
  close_plat(&p);
}
END_TEST

/* ---- MI_QUANT_BENCH=1: GEMV GB/s, no assertion ---- */

static double now_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_dbl(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Per call (each on the next copy of the weights): the fastest and the
 * median wall time. On a shared machine the fastest calls are the ones no
 * other job interrupted; the caller's CPU time (threads=1) says the same. */
static void bench_one(plat *p, mi_dtype t, int64_t N, int64_t K) {
  const size_t wb = (size_t)N * mi_dtype_row_bytes(t, K);
  /* cycled: the weights come from memory (MI_QUANT_BENCH=hot: one copy, from cache) */
  const int copies = strcmp(getenv("MI_QUANT_BENCH"), "hot") ? (int)((256u << 20) / wb) + 1 : 1;
  const int calls = 5 * (copies > 64 ? copies : 64);
  uint8_t *w = malloc(wb * (size_t)copies);
  const size_t bb = mi_dtype_block_bytes(t);
  for (size_t o = 0; o < wb * (size_t)copies; o += bb)
    rand_block(t, w + o);
  float *x = rand_x(1, K), *y = malloc((size_t)N * sizeof *y);
  double *ts = malloc((size_t)calls * sizeof *ts), cpu = 0;
  for (int c = 0; c < calls; c++) {
    const double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    ck_assert_int_eq(p->pi->matmul(p->ctx, NULL, y, x, w + (size_t)(c % copies) * wb, t, 1, N, K),
                     0);
    ts[c] = now_s(CLOCK_MONOTONIC) - t0;
    cpu += now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  }
  qsort(ts, (size_t)calls, sizeof *ts, cmp_dbl);
  const double best = ts[0], med = ts[calls / 2];
  printf("BENCH gemv %-5s N=%lld K=%lld M=1: fastest %.1f us = %.1f GB/s of weights, median "
         "%.1f us = %.1f GB/s (caller's CPU time per call %.1f us)\n",
         mi_dtype_name(t), (long long)N, (long long)K, best * 1e6, (double)wb / best * 1e-9,
         med * 1e6, (double)wb / med * 1e-9, cpu / calls * 1e6);
  free(ts);
  free(w);
  free(x);
  free(y);
}

START_TEST(test_quant_bench) {
  if (!getenv("MI_QUANT_BENCH")) return;
  const char *thr = getenv("MI_QUANT_BENCH_THREADS"), *isa = getenv("MI_QUANT_BENCH_ISA");
  mi_kv kv[] = {{"threads", thr ? thr : "2"}, {"isa", isa ? isa : "auto"}};
  plat p;
  char why[256] = "";
  ck_assert_int_gt(open_with(kv, 2, &p, why, sizeof why), 0);
  rng_seed(seed_for(4, 0));
  /* Q8_0 (the reference) first and last: the first type after the
   * bandwidth run was seen slower, whichever it was */
  const mi_dtype all[] = {MI_DTYPE_Q8_0, MI_DTYPE_Q4_0, MI_DTYPE_Q4_K, MI_DTYPE_Q5_K,
                          MI_DTYPE_Q6_K, MI_DTYPE_Q4_1, MI_DTYPE_Q5_0, MI_DTYPE_Q5_1,
                          MI_DTYPE_Q2_K, MI_DTYPE_Q3_K, MI_DTYPE_Q8_0};
  const int nall = (int)(sizeof all / sizeof *all);
  for (int s = 0; s < 2; s++) {
    mi_bandwidth bw;
    if (mi_measure_bandwidth(thr ? atoi(thr) : 2, 256u << 20, 5, &bw) == 0)
      printf("BENCH memory read %.1f GB/s (STREAM-style, same threads)\n", bw.read_gbs);
    for (int ti = 0; ti < nall; ti++)
      bench_one(&p, all[ti], s ? 1024 : 3072, s ? 3072 : 1024);
  }
  close_plat(&p);
}
END_TEST

static Suite *quant_suite(void) {
  Suite *s = suite_create("cpu_quant");
  TCase *tc = mi_check_case(s, "quant", 300, NULL, NULL);
  if (getenv("MI_QUANT_BENCH")) { /* figures only: the checks take minutes */
    tcase_add_test(tc, test_quant_bench);
    return s;
  }
  tcase_add_loop_test(tc, test_quant_matmul, 0, 2 * NISA);
  mi_check_add_loop(tc, MI_CHECK_TESTS(test_quant_exact, test_quant_embed_and_edges), 0, NISA);
  return s;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mi_check_run(quant_suite());
}
