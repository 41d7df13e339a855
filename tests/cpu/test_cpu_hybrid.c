/* The CPU plugin's gated-DeltaNet kernels (ABI 1.4) against the float64
 * definitions in core/verify/ref/f64.c, on every ISA variant this machine
 * can run (others reported as skipped), with 1 and 3 threads. Inputs are
 * fresh seeded random values (seed printed; MI_TEST_SEED replays).
 *
 * Tolerances (u = 2^-24, the f32 unit roundoff), each relative to the
 * magnitudes that enter the result, so a constant or zero output cannot
 * meet them:
 *  - copy2d, the conv state: exact (copies).
 *  - l2norm, rmsnorm_gated: (dim + 24)·u·|ref| — a sum of dim squares
 *    (relative error <= dim·u), a sqrt, and a few products; silu(z) as
 *    z / (1 + e^-z) adds a few u relative to itself.
 *  - sigmoid_mul: 8u·|ref|.
 *  - deltanet_gates: beta 8u·|ref|; g (16 + 2|a + dt_bias|)·u·|ref| — the
 *    f32 sum a + dt_bias is rounded once, which moves softplus by up to
 *    |a + dt_bias|·u relative to itself when the argument is very negative.
 *  - conv1d_causal: (K + 8)·u·Σ_j|w·xx| before the activation, plus 8u of
 *    the output for silu.
 *  - gated_delta_rule: 8·(Dk + Dv + C)·u·scale, scale = max|ref| of the
 *    checked tensor (output or state), C = 64 the chunk length. Every
 *    output is a sum over Dk (Sᵀq, Sᵀk) and over the chunk (the triangular
 *    solve, the intra-chunk outputs, the state update); each term carries a
 *    few roundings, and normalised keys with beta < 1 keep the solve well
 *    conditioned (|A_ij| < 1, each step a contraction), so errors grow with
 *    these lengths, not with T. The worst errors seen (printed) are about
 *    2e-6·scale, 20x below the bound for Dk = Dv = 16; a wrong head
 *    mapping, a dropped beta, decay or carried state moves outputs by
 *    O(scale).
 */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/ref/f64.h"
#include "mi/platform.h"
#include "mi/plugin.h"
#include "tests/cpu/cpu_test_harness.h"
#include "tests/util/check_main.h"

#define U (FLT_EPSILON / 2)

/* cpu_kernels_hybrid.c's GDR_RECURRENT_MAX_T: one call of up to this many
 * tokens takes the recurrent form, a longer one the chunked form; the
 * cases below sit at, below and above it. */
#define GDR_RECURRENT_MAX_T 2


/* ---------------- opening ---------------- */

static const char *const ISAS[] = {"generic", "avx2", "avx512", "avx512bf16"};
static const char *const THREADS[] = {"1", "3"};
#define NCONF 8 /* ISAS x THREADS */

static int open_conf(int i, plat *p) {
  const char *isa = ISAS[i / 2], *thr = THREADS[i % 2];
  mi_kv kv[] = {{"isa", isa}, {"threads", thr}, {"spin_us", "0"}};
  char why[256] = "";
  /* the hybrid blocks came with 1.4: the plugin must declare it */
  ck_assert_uint_ge(load_desc()->abi_minor, 4);
  if (open_with(kv, 3, p, why, sizeof why) <= 0) {
    printf("SKIP isa=%s threads=%s: not available here (%s)\n", isa, thr, why);
    return 0;
  }
  /* the ISA asked for; "avx512bf16+bf16act" (bf16-weight prefill on
   * VDPBF16PS, the default there) runs these f32 products exactly too */
  const char *v = p->pi->variant(p->ctx);
  EXPECT(variant_is(v, isa), "isa=%s: variant %s", isa, v);
  /* every hybrid member is there, on every variant */
  ck_assert(mi_platform_has(p->pi, copy2d) && mi_platform_has(p->pi, l2norm) &&
            mi_platform_has(p->pi, sigmoid_mul) && mi_platform_has(p->pi, conv1d_causal) &&
            mi_platform_has(p->pi, deltanet_gates) && mi_platform_has(p->pi, gated_delta_rule) &&
            mi_platform_has(p->pi, rmsnorm_gated));
  return 1;
}


/* ---------------- random data ---------------- */

static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(rng_u64() % (uint64_t)(hi - lo + 1)); }
static float *randf(int64_t n, double lo, double hi) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = (float)rng_unif(lo, hi);
  return v;
}
static double *to64(const float *x, int64_t n) {
  double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  for (int64_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static float *dupf(const float *x, int64_t n) {
  float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  memcpy(d, x, (size_t)n * sizeof *d);
  return d;
}

/* ---------------- copy2d ---------------- */

START_TEST(test_copy2d) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(1, _i));
  for (int c = 0; c < 6; c++) {
    int64_t rows = irand(1, c == 5 ? 300 : 9), n = irand(1, c == 5 ? 700 : 40);
    int64_t ys = n + irand(0, 5), xs = c == 0 ? 0 : n + irand(0, 7); /* xs 0: a broadcast row */
    int64_t ny = (rows - 1) * ys + n + 3, nx = (rows - 1) * xs + n;
    float *x = randf(nx, -1, 1), *y = randf(ny, 5, 6), *y0 = dupf(y, ny);
    ck_assert_int_eq(p.pi->copy2d(p.ctx, NULL, y, ys, x, xs, rows, n), 0);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t i = 0; i < ys && r * ys + i < ny; i++) {
        float want = i < n ? x[r * xs + i] : y0[r * ys + i]; /* gaps untouched */
        EXPECT(y[r * ys + i] == want, "copy2d rows=%ld n=%ld row %ld col %ld", (long)rows, (long)n,
               (long)r, (long)i);
      }
    for (int64_t i = (rows - 1) * ys + n; i < ny; i++) EXPECT(y[i] == y0[i], "copy2d wrote past the end");
    free(x);
    free(y);
    free(y0);
  }
  float buf[64] = {0};
  ck_assert_int_lt(p.pi->copy2d(p.ctx, NULL, buf, 8, buf + 4, 8, 4, 8), 0); /* overlap */
  ck_assert(strstr(p.pi->last_error(p.ctx), "copy2d"));
  ck_assert_int_lt(p.pi->copy2d(p.ctx, NULL, buf, 4, buf + 32, 8, 2, 8), 0); /* rows of y overlap */
  close_plat(&p);
}
END_TEST

/* ---------------- l2norm, rmsnorm_gated, sigmoid_mul ---------------- */

START_TEST(test_norms_and_gate) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(2, _i));
  static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 128}, {40, 96}, {700, 128}, {2, 2048}};
  for (int c = 0; c < 6; c++) {
    const int64_t R = shapes[c][0], dim = shapes[c][1], n = R * dim;
    const float eps = c == 1 ? 1e-2f : 1e-6f;
    float *x = randf(n, -2, 2), *z = randf(n, -8, 8), *w = randf(dim, -1.5, 1.5);
    if (c == 2) x[3] = 0, z[5] = -100, z[6] = 100; /* silu's tails */
    double *xd = to64(x, n), *zd = to64(z, n), *wd = to64(w, dim), *ref = malloc((size_t)n * 8);
    for (int inplace = 0; inplace < 2; inplace++) {
      float *y = inplace ? dupf(x, n) : randf(n, 9, 9);
      const float *src = inplace ? y : x;
      ck_assert_int_eq(p.pi->l2norm(p.ctx, NULL, y, src, R, dim, eps), 0);
      vf_f64_l2norm(ref, xd, R, dim, eps);
      for (int64_t i = 0; i < n; i++)
        EXPECT(fabs(y[i] - ref[i]) <= (dim + 24) * U * fabs(ref[i]) + 1e-37,
               "l2norm %ldx%ld [%ld] = %.9g want %.9g (in place %d)", (long)R, (long)dim, (long)i,
               (double)y[i], ref[i], inplace);
      memcpy(y, x, (size_t)n * sizeof *y);
      if (!inplace) memset(y, 0, (size_t)n * sizeof *y);
      ck_assert_int_eq(p.pi->rmsnorm_gated(p.ctx, NULL, y, src, w, z, R, dim, eps), 0);
      vf_f64_rmsnorm_gated(ref, xd, wd, zd, R, dim, eps);
      for (int64_t i = 0; i < n; i++)
        EXPECT(fabs(y[i] - ref[i]) <= (dim + 24) * U * fabs(ref[i]) + 1e-37,
               "rmsnorm_gated %ldx%ld [%ld] = %.9g want %.9g (in place %d)", (long)R, (long)dim,
               (long)i, (double)y[i], ref[i], inplace);
      memcpy(y, x, (size_t)n * sizeof *y);
      ck_assert_int_eq(p.pi->sigmoid_mul(p.ctx, NULL, y, src, z, n), 0);
      vf_f64_sigmoid_mul(ref, xd, zd, n);
      for (int64_t i = 0; i < n; i++)
        EXPECT(fabs(y[i] - ref[i]) <= 8 * U * fabs(ref[i]) + 1e-37,
               "sigmoid_mul n=%ld [%ld] = %.9g want %.9g", (long)n, (long)i, (double)y[i], ref[i]);
      free(y);
    }
    free(x), free(z), free(w), free(xd), free(zd), free(wd), free(ref);
  }
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ck_assert_int_lt(p.pi->l2norm(p.ctx, NULL, a + 1, a, 1, 4, 0), 0); /* partial overlap */
  ck_assert_int_lt(p.pi->rmsnorm_gated(p.ctx, NULL, a, a, a, a, 1, 0, 0), 0);
  close_plat(&p);
}
END_TEST

/* ---------------- deltanet_gates ---------------- */

START_TEST(test_gates) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(3, _i));
  static const int64_t shapes[][2] = {{1, 1}, {1, 16}, {7, 3}, {300, 32}, {2100, 32}};
  for (int c = 0; c < 5; c++) {
    const int64_t T = shapes[c][0], H = shapes[c][1], n = T * H;
    float *b = randf(n, -12, 12), *a = randf(n, -30, 30), *al = randf(H, -4, 2.5),
          *dt = randf(H, -3, 3);
    float *beta = randf(n, 9, 9), *g = randf(n, 9, 9);
    double *gd = malloc((size_t)n * 8), *bd = malloc((size_t)n * 8);
    double *ad = to64(a, n), *bbd = to64(b, n), *ald = to64(al, H), *dtd = to64(dt, H);
    ck_assert_int_eq(p.pi->deltanet_gates(p.ctx, NULL, beta, g, b, a, al, dt, T, H), 0);
    vf_f64_deltanet_gates(gd, bd, ad, bbd, ald, dtd, T, H);
    for (int64_t i = 0; i < n; i++) {
      const double arg = fabs((double)a[i] + dt[i % H]);
      EXPECT(fabs(beta[i] - bd[i]) <= 8 * U * fabs(bd[i]), "beta [%ld] = %.9g want %.9g", (long)i,
             (double)beta[i], bd[i]);
      EXPECT(g[i] <= 0 && fabs(g[i] - gd[i]) <= (16 + 2 * arg) * U * fabs(gd[i]) + 1e-37,
             "g [%ld] = %.9g want %.9g (a+dt_bias %.3g)", (long)i, (double)g[i], gd[i], arg);
    }
    free(b), free(a), free(al), free(dt), free(beta), free(g), free(gd), free(bd), free(ad);
    free(bbd), free(ald), free(dtd);
  }
  close_plat(&p);
}
END_TEST

/* ---------------- conv1d_causal ---------------- */

/* y = conv of x with carried state, checked against f64 (plus silu); the
 * state afterwards must equal the last K-1 rows of [state; x] exactly. */
static void check_conv(plat *p, int64_t T, int64_t C, int64_t K, int silu) {
  float *x = randf(T * C, -2, 2), *w = randf(C * K, -1, 1), *st = randf((K - 1) * C, -2, 2);
  float *st0 = dupf(st, (K - 1) * C), *x0 = dupf(x, T * C), *y = randf(T * C, 9, 9);
  double *xd = to64(x, T * C), *wd = to64(w, C * K), *sd = to64(st, (K - 1) * C);
  double *ref = malloc((size_t)(T * C) * 8);
  ck_assert_int_eq(p->pi->conv1d_causal(p->ctx, NULL, y, x, w, K > 1 ? st : NULL, T, C, K, silu), 0);
  ck_assert_int_eq(vf_f64_conv1d_causal(ref, xd, wd, sd, T, C, K), 0);
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < C; c++) {
      double mag = 0; /* Σ_j |w · xx| */
      for (int64_t j = 0; j < K; j++) {
        int64_t r = t + j;
        double xv = r < K - 1 ? st0[r * C + c] : x[(r - (K - 1)) * C + c];
        mag += fabs(w[c * K + j] * xv);
      }
      double want = ref[t * C + c];
      if (silu) want = want / (1 + exp(-want));
      double tol = (K + 8) * U * mag * 1.1 + 8 * U * fabs(want) + 1e-37;
      EXPECT(fabs(y[t * C + c] - want) <= tol, "conv1d T=%ld C=%ld K=%ld silu=%d [%ld,%ld] = %.9g want %.9g",
             (long)T, (long)C, (long)K, silu, (long)t, (long)c, (double)y[t * C + c], want);
    }
  for (int64_t i = 0; i < (K - 1) * C; i++)
    EXPECT(st[i] == (float)sd[i], "conv1d T=%ld C=%ld K=%ld state[%ld] = %.9g want %.9g", (long)T,
           (long)C, (long)K, (long)i, (double)st[i], sd[i]);
  EXPECT(memcmp(x, x0, (size_t)(T * C) * 4) == 0, "conv1d changed its input x");
  free(x), free(w), free(st), free(st0), free(x0), free(y), free(xd), free(wd), free(sd), free(ref);
}

START_TEST(test_conv1d) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(4, _i));
  static const int64_t shapes[][3] = {{1, 1, 1}, {1, 6, 4},  {2, 5, 4},   {3, 300, 4},
                                      {9, 17, 2}, {40, 70, 3}, {130, 520, 4}, {5, 9, 20}};
  for (int c = 0; c < 8; c++)
    for (int silu = 0; silu < 2; silu++) check_conv(&p, shapes[c][0], shapes[c][1], shapes[c][2], silu);
  /* a prefill split in pieces (each carrying the state on) = one call, bit for bit */
  const int64_t T = 23, C = 300, K = 4;
  float *x = randf(T * C, -2, 2), *w = randf(C * K, -1, 1), *s1 = randf((K - 1) * C, -1, 1);
  float *s2 = dupf(s1, (K - 1) * C), *y1 = malloc((size_t)(T * C) * 4), *y2 = malloc((size_t)(T * C) * 4);
  ck_assert_int_eq(p.pi->conv1d_causal(p.ctx, NULL, y1, x, w, s1, T, C, K, 1), 0);
  const int64_t cuts[] = {0, 1, 3, 4, 11, 23};
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(p.pi->conv1d_causal(p.ctx, NULL, y2 + cuts[i] * C, x + cuts[i] * C, w, s2,
                                         cuts[i + 1] - cuts[i], C, K, 1), 0);
  EXPECT(memcmp(y1, y2, (size_t)(T * C) * 4) == 0 && memcmp(s1, s2, (size_t)((K - 1) * C) * 4) == 0,
         "conv1d: a prefill in pieces differs from one call");
  ck_assert_int_lt(p.pi->conv1d_causal(p.ctx, NULL, x, x, w, s1, T, C, K, 0), 0); /* y aliases x */
  ck_assert(strstr(p.pi->last_error(p.ctx), "conv1d_causal"));
  ck_assert_int_lt(p.pi->conv1d_causal(p.ctx, NULL, y1, x, w, NULL, T, C, K, 0), 0); /* no state */
  free(x), free(w), free(s1), free(s2), free(y1), free(y2);
  close_plat(&p);
}
END_TEST

/* ---------------- gated_delta_rule ---------------- */

typedef struct gdr_case {
  int64_t T, Hk, Hv, Dk, Dv;
  double glo, ghi; /* log decays drawn from [glo, ghi] (<= 0) */
} gdr_case;

typedef struct gdr_in {
  int64_t T, Hk, Hv, Dk, Dv;
  float *q, *k, *v, *g, *beta, *s0;
} gdr_in;

static void unit_rows(float *x, int64_t rows, int64_t dim, float scale) {
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
    double inv = scale / sqrt(ss + 1e-6);
    for (int64_t i = 0; i < dim; i++) x[r * dim + i] = (float)(x[r * dim + i] * inv);
  }
}

static gdr_in gdr_make(const gdr_case *c) {
  gdr_in in = {c->T, c->Hk, c->Hv, c->Dk, c->Dv, 0, 0, 0, 0, 0, 0};
  const int64_t nqk = c->T * c->Hk * c->Dk, nv = c->T * c->Hv * c->Dv;
  in.q = randf(nqk, -1, 1);
  in.k = randf(nqk, -1, 1);
  unit_rows(in.q, c->T * c->Hk, c->Dk, (float)(1 / sqrt((double)c->Dk))); /* as the model: l2, then scaled */
  unit_rows(in.k, c->T * c->Hk, c->Dk, 1);
  in.v = randf(nv, -1, 1);
  in.g = randf(c->T * c->Hv, c->glo, c->ghi);
  in.beta = randf(c->T * c->Hv, 0.02, 0.98);
  in.s0 = randf(c->Hv * c->Dk * c->Dv, -1, 1); /* a state carried in */
  return in;
}

static void gdr_free(gdr_in *in) {
  free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta), free(in->s0);
}

static double max_abs(const double *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
  return m;
}

/* The float64 recurrent rule on in; ref_o [T,Hv,Dv], ref_s [Hv,Dk,Dv]. */
static void gdr_ref(const gdr_in *in, double *ref_o, double *ref_s) {
  const int64_t nqk = in->T * in->Hk * in->Dk;
  double *q = to64(in->q, nqk), *k = to64(in->k, nqk), *v = to64(in->v, in->T * in->Hv * in->Dv);
  double *g = to64(in->g, in->T * in->Hv), *b = to64(in->beta, in->T * in->Hv);
  for (int64_t i = 0; i < in->Hv * in->Dk * in->Dv; i++) ref_s[i] = in->s0[i];
  ck_assert_int_eq(vf_f64_gated_delta_rule(ref_o, ref_s, q, k, v, g, b, in->T, in->Hk, in->Hv,
                                           in->Dk, in->Dv), 0);
  free(q), free(k), free(v), free(g), free(b);
}

static void expect_close(const char *what, const gdr_in *in, const float *got, const double *ref,
                         int64_t n, double *worst) {
  const double scale = max_abs(ref, n), tol = 8.0 * (double)(in->Dk + in->Dv + 64) * U * scale;
  double e = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < n; i++)
    if (fabs(got[i] - ref[i]) > e || isnan(got[i])) e = isnan(got[i]) ? INFINITY : fabs(got[i] - ref[i]), at = i;
  if (worst && scale > 0 && e / scale > *worst) *worst = e / scale;
  EXPECT(e <= tol, "gated_delta_rule %s T=%ld Hk=%ld Hv=%ld Dk=%ld Dv=%ld: [%ld] = %.9g want %.9g (error %.3g > tol %.3g)",
         what, (long)in->T, (long)in->Hk, (long)in->Hv, (long)in->Dk, (long)in->Dv, (long)at,
         (double)got[at], ref[at], e, tol);
}

/* Runs the kernel over tokens [0, T) in the given pieces (cuts ascending,
 * first 0, last T), the state carried across calls. */
static void gdr_run(plat *p, const gdr_in *in, const int64_t *cuts, int ncuts, float *o, float *s) {
  memcpy(s, in->s0, (size_t)(in->Hv * in->Dk * in->Dv) * 4);
  for (int i = 0; i + 1 < ncuts; i++) {
    const int64_t t0 = cuts[i], n = cuts[i + 1] - cuts[i];
    ck_assert_int_eq(p->pi->gated_delta_rule(p->ctx, NULL, o + t0 * in->Hv * in->Dv,
                                             in->q + t0 * in->Hk * in->Dk, in->k + t0 * in->Hk * in->Dk,
                                             in->v + t0 * in->Hv * in->Dv, in->g + t0 * in->Hv,
                                             in->beta + t0 * in->Hv, s, n, in->Hk, in->Hv, in->Dk,
                                             in->Dv), 0);
  }
}

START_TEST(test_gated_delta_rule) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(5, _i));
  static const gdr_case cases[] = {
      {1, 1, 1, 4, 3, -1, 0},     {1, 2, 4, 16, 8, -2, 0},     {2, 1, 1, 8, 8, -1, 0},
      {5, 1, 2, 8, 8, -3, 0},
      /* around the switch from the recurrent to the chunked form */
      {GDR_RECURRENT_MAX_T - 1, 1, 2, 16, 16, -0.3, 0}, {GDR_RECURRENT_MAX_T, 2, 2, 8, 16, -1, 0},
      {GDR_RECURRENT_MAX_T + 1, 1, 1, 16, 8, -0.1, 0},
      {63, 2, 2, 16, 16, -0.05, 0}, {64, 1, 1, 16, 24, -1, 0},
      {65, 1, 3, 8, 12, -2, 0},   {130, 2, 4, 32, 16, -0.5, 0}, {200, 1, 2, 16, 16, -0.02, 0},
      {150, 2, 2, 24, 8, -60, -20}, /* decays that forget everything: exp underflows to 0 */
      {97, 4, 8, 16, 16, -1, -0.001},
  };
  double worst_o = 0, worst_s = 0;
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const gdr_case *c = &cases[ci];
    gdr_in in = gdr_make(c);
    const int64_t no = c->T * c->Hv * c->Dv, ns = c->Hv * c->Dk * c->Dv;
    double *ro = malloc((size_t)no * 8), *rs = malloc((size_t)ns * 8);
    gdr_ref(&in, ro, rs);
    float *o = randf(no, 9, 9), *s = malloc((size_t)ns * 4);
    float *q0 = dupf(in.q, c->T * c->Hk * c->Dk), *v0 = dupf(in.v, no), *g0 = dupf(in.g, c->T * c->Hv);

    /* one call (chunked above GDR_RECURRENT_MAX_T tokens) */
    int64_t one[] = {0, c->T};
    gdr_run(&p, &in, one, 2, o, s);
    expect_close("one call: output", &in, o, ro, no, &worst_o);
    expect_close("one call: state", &in, s, rs, ns, &worst_s);
    EXPECT(!memcmp(q0, in.q, (size_t)(c->T * c->Hk * c->Dk) * 4) && !memcmp(v0, in.v, (size_t)no * 4) &&
               !memcmp(g0, in.g, (size_t)(c->T * c->Hv) * 4),
           "gated_delta_rule changed an input");
    /* twice the same call: bit-identical */
    float *o2 = malloc((size_t)no * 4), *s2 = malloc((size_t)ns * 4);
    gdr_run(&p, &in, one, 2, o2, s2);
    EXPECT(!memcmp(o, o2, (size_t)no * 4) && !memcmp(s, s2, (size_t)ns * 4),
           "gated_delta_rule: two runs differ");

    /* token by token (the recurrent decode path), state carried */
    int64_t *each = malloc((size_t)(c->T + 1) * sizeof *each);
    for (int64_t t = 0; t <= c->T; t++) each[t] = t;
    gdr_run(&p, &in, each, (int)c->T + 1, o2, s2);
    expect_close("token by token: output", &in, o2, ro, no, &worst_o);
    expect_close("token by token: state", &in, s2, rs, ns, &worst_s);

    /* a prefill in uneven pieces, some spanning chunk boundaries */
    if (c->T >= 8) {
      int64_t cuts[] = {0, 1, c->T / 3, c->T / 3 + 2, c->T - 1, c->T};
      gdr_run(&p, &in, cuts, 6, o2, s2);
      expect_close("in pieces: output", &in, o2, ro, no, &worst_o);
      expect_close("in pieces: state", &in, s2, rs, ns, &worst_s);
    }
    free(each), free(o), free(s), free(o2), free(s2), free(q0), free(v0), free(g0), free(ro), free(rs);
    gdr_free(&in);
  }
  printf("gated_delta_rule: worst error / max|ref|: output %.3g, state %.3g\n", worst_o, worst_s);

  /* errors: heads that do not divide, an output over an input, T = 0 */
  float buf[256] = {0}, st[64] = {0};
  ck_assert_int_lt(p.pi->gated_delta_rule(p.ctx, NULL, buf, buf + 64, buf + 64, buf + 64, buf + 64,
                                          buf + 64, st, 1, 2, 3, 4, 4), 0);
  ck_assert(strstr(p.pi->last_error(p.ctx), "multiple"));
  ck_assert_int_lt(p.pi->gated_delta_rule(p.ctx, NULL, buf, buf, buf + 100, buf + 120, buf + 140,
                                          buf + 150, st, 1, 1, 1, 4, 4), 0);
  ck_assert_int_eq(p.pi->gated_delta_rule(p.ctx, NULL, buf, buf, buf, buf, buf, buf, st, 0, 1, 1, 4,
                                          4), 0);
  close_plat(&p);
}
END_TEST

static Suite *suite(void) {
  return mi_check_loop_suite("cpu_hybrid", "hybrid", 120,
                             MI_CHECK_TESTS(test_copy2d, test_norms_and_gate, test_gates,
                                            test_conv1d, test_gated_delta_rule),
                             0, NCONF);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mi_check_run(suite());
}
