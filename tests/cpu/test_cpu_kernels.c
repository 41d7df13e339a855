/* Conformance tests for the CPU platform plugin (libmi-cpu.so).
 *
 * The plugin is dlopened directly (the core loader is tested elsewhere) and
 * driven through its mi_platform_iface with a small host API stub. Every
 * kernel is run on fresh seeded random inputs (seed printed; set
 * MI_TEST_SEED to replay) against a float64 reference computed here, for
 * every ISA variant this machine can run (others are reported as skipped)
 * and for threads = 1, 2 and 3.
 *
 * Tolerances (u = 2^-24, the f32 unit roundoff):
 *  - matmul: |y - ref| <= 4·sqrt(K)·u·Σ_k|x_k·w_k|. bf16/f16 weights are
 *    generated here as exactly representable values and the reference uses
 *    those exact values (the kernels widen them exactly), so the only error
 *    is f32 accumulation. Its worst case is about (K/lanes + log2(lanes))·u
 *    (FMA) or twice that (separate multiply and add) times Σ|x·w|; the
 *    bound used covers that worst case for K up to a few hundred, and for
 *    larger K it is still orders of magnitude above the typical error
 *    (rounding errors of random data add like a random walk, and the
 *    partial sums are far smaller than Σ|x·w|). Any indexing or tail bug
 *    moves y by about one |x_k·w_k| or more, far outside it.
 *  - rmsnorm: (dim + 8)·u·|x|·r·(|w| + |w_offset|): a sum of dim positive
 *    squares (relative error <= dim·u), one sqrt/divide, three products.
 *  - rope: 6u·(|x_i| + |x_{i+half}|): cos/sin rounded to f32 once, two
 *    products and a sum.
 *  - attention: scores carry δs = (D + 8)·u·scale·max_j Σ|q||k_j| (dot
 *    products); softmax turns that into <= 2δs relative change in the
 *    weights; exp and the subtraction of the max add 4u·max|s|; the
 *    weighted sum of L rows adds (L + 16)·u. All times max|v|, doubled.
 *  - silu_mul 8u·|ref|; add and scale 2u·|ref| (one rounding);
 *    embed and argmax exact.
 *
 * Every kernel test above runs with matmul_act=f32 (the exact path). The
 * bf16-activation prefill path (matmul_act=bf16, avx512bf16 hosts only) is
 * tested on its own (test_matmul_bf16act): each output against two float64
 * references, the exact one and one with x rounded to bf16 (RNE) first,
 * and always within the contract's bound for that mode,
 *   |y - ref| <= (2^-8 + K·u·(1 + 2^-8))·Σ_k|x_k·w_k| + K·2^-126,
 * computed from the inputs (ckb/operators/matmul.json, "bf16_activations").
 */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <float.h>
#include <stddef.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/platform.h"
#include "mi/plugin.h"
#include "tests/cpu/cpu_test_harness.h"
#include "tests/util/check_main.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HOST_X86 1
#endif

#define U (FLT_EPSILON / 2) /* f32 unit roundoff 2^-24 */
#define U_BF16 (1.0 / 256)  /* bf16 unit roundoff 2^-8 (8 significant bits, RNE) */

/* ---------------- opening (cpu_test_harness.h loads the plugin) ---------------- */

static const char *const ISAS[] = {"generic", "avx2", "avx512", "avx512bf16"};
static const char *const THREADS[] = {"1", "2", "3"};
#define NCONF 12 /* ISAS x THREADS */

/* Opens configuration i (ISA i/3, threads i%3). Returns 0 when the ISA is
 * unavailable here (and says so). */
static int open_conf(int i, plat *p) {
  const char *isa = ISAS[i / 3], *thr = THREADS[i % 3];
  mi_kv kv[] = {{"threads", "0"}, {"isa", isa}, {"threads", thr}, {"matmul_act", "f32"}};
  char why[256] = "";
  int score = open_with(kv, 4, p, why, sizeof why);
  if (score <= 0) {
    printf("SKIP isa=%s threads=%s: not available here (%s)\n", isa, thr, why);
    return 0;
  }
  ck_assert_str_eq(p->pi->variant(p->ctx), isa);
  return 1;
}

/* ---------------- random data (seeded in cpu_test_harness.h) ---------------- */

/* Weights stored in dt with their exact values in ref (independent of the
 * SDK converters: bf16 = the top half of an f32 whose low half is zero; f16
 * decoded here with ldexp). */
static uint16_t rand_f16(double *val) {
  uint16_t sign = (uint16_t)(rng_u64() & 1) << 15;
  uint16_t man = (uint16_t)(rng_u64() & 0x3ff);
  int e = (int)(rng_u64() % 17); /* exponent field 0 (subnormal) .. 16 (value ~ 2) */
  uint16_t h = (uint16_t)(sign | (uint16_t)(e << 10) | man);
  double v = e == 0 ? ldexp((double)man, -24) : ldexp(1.0 + man / 1024.0, e - 15);
  *val = sign ? -v : v;
  return h;
}

static void *rand_weights(mi_dtype dt, size_t n, double *ref) {
  if (dt == MI_DTYPE_F32) {
    float *w = rand_f32(n, -1, 1);
    for (size_t i = 0; i < n; i++) ref[i] = w[i];
    return w;
  }
  uint16_t *w = malloc((n ? n : 1) * 2);
  for (size_t i = 0; i < n; i++) {
    if (dt == MI_DTYPE_BF16) {
      float f = (float)rng_unif(-1, 1);
      uint32_t u;
      memcpy(&u, &f, 4);
      u &= 0xffff0000u;
      memcpy(&f, &u, 4);
      ref[i] = f;
      w[i] = (uint16_t)(u >> 16);
    } else {
      w[i] = rand_f16(&ref[i]);
    }
  }
  return w;
}

/* Inputs are passed as wrapped host memory (zero-copy; exact-size mallocs so
 * AddressSanitizer sees any read past the end), outputs as plain host
 * memory: on the CPU platform device addresses are host addresses. */
static const void *wrap(plat *p, const void *host_ptr, size_t bytes, mi_buffer **buf) {
  ck_assert_int_eq(p->pi->buffer_wrap_host(p->ctx, host_ptr, bytes, buf), 0);
  const void *d = p->pi->buffer_ptr(p->ctx, *buf);
  ck_assert_ptr_eq(d, host_ptr); /* zero-copy */
  return d;
}

/* ---------------- matmul ---------------- */

static void check_matmul(plat *p, mi_dtype dt, int64_t M, int64_t N, int64_t K) {
  size_t es = mi_dtype_size(dt);
  float *x = rand_f32((size_t)(M * K), -1, 1);
  double *wref = malloc((size_t)(N * K + 1) * sizeof *wref);
  void *w = rand_weights(dt, (size_t)(N * K), wref);
  float *y = malloc((size_t)(M * N) * sizeof *y);
  for (int64_t i = 0; i < M * N; i++) y[i] = NAN;
  mi_buffer *bx, *bw;
  const float *dx = wrap(p, x, (size_t)(M * K) * 4, &bx);
  const void *dw = wrap(p, w, (size_t)(N * K) * es, &bw);
  int rc = p->pi->matmul(p->ctx, NULL, y, dx, dw, dt, M, N, K);
  EXPECT(rc == 0, "matmul %s M=%ld N=%ld K=%ld: rc %d: %s", mi_dtype_name(dt), (long)M,
                (long)N, (long)K, rc, p->pi->last_error(p->ctx));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double t = (double)x[m * K + k] * wref[n * K + k];
        ref += t;
        mag += fabs(t);
      }
      double tol = 4.0 * sqrt((double)K) * U * mag + 1e-30;
      double got = y[m * N + n];
      EXPECT(fabs(got - ref) <= tol,
                    "matmul %s M=%ld N=%ld K=%ld: y[%ld,%ld] = %.9g, want %.9g (err %.3g > tol %.3g)",
                    mi_dtype_name(dt), (long)M, (long)N, (long)K, (long)m, (long)n, got, ref,
                    fabs(got - ref), tol);
    }
  p->pi->buffer_free(p->ctx, bx);
  p->pi->buffer_free(p->ctx, bw);
  free(x);
  free(w);
  free(wref);
  free(y);
}

START_TEST(test_matmul) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(1, _i));
  static const int64_t Ms[] = {1, 2, 7, 13}, Ns[] = {1, 5, 33}, Ks[] = {1, 3, 17, 67, 1000};
  static const mi_dtype dts[] = {MI_DTYPE_F32, MI_DTYPE_F16, MI_DTYPE_BF16};
  for (int d = 0; d < 3; d++) {
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 3; b++)
        for (int c = 0; c < 5; c++) check_matmul(&p, dts[d], Ms[a], Ns[b], Ks[c]);
    /* larger: several 4-row tiles, N split across threads, M split (N small) */
    check_matmul(&p, dts[d], 1, 1000, 300);
    check_matmul(&p, dts[d], 33, 130, 515);
    check_matmul(&p, dts[d], 64, 7, 129);
    check_matmul(&p, dts[d], 5, 260, 1024);
    /* a short prompt (AVX-512, bf16 weights, 2-32 rows: inner products on
     * the weights as stored, 4 streams per thread, K in blocks of 1024 with
     * an odd tail) */
    check_matmul(&p, dts[d], 11, 70, 2085);
    check_matmul(&p, dts[d], 3, 41, 1030);
    check_matmul(&p, dts[d], 32, 19, 1055);
    /* prefill path (M >= 8 on AVX-512: 6x32 outer-product tiles over
     * 256-deep k panels): M around the 6-row tile and its 3/2-row
     * remainders, N around the 32-row panel (masked columns), K across
     * panel boundaries, and N split over threads mid-panel */
    static const int64_t Mp[] = {16, 17, 23, 40}, Np[] = {31, 32, 33, 97}, Kp[] = {1, 256, 257, 600};
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 4; b++) check_matmul(&p, dts[d], Mp[a], Np[b], Kp[(a + b) % 4]);
    check_matmul(&p, dts[d], 20, 200, 300);
    check_matmul(&p, dts[d], 100, 65, 129);
    /* prefill path on AVX2 (M >= 8: 6x16 outer-product tiles over k-major
     * panels built with 8x8 transposes, cpu_avx2_pack.h): M just below and
     * at the switch (7, 8) and past one 6-row tile by 2, 3, 4, 5 (the 2-,
     * 4- and 6-row remainder tiles), 12 (two whole tiles) and 13 (one row
     * over); N around the 8-column transpose and the 16-column panel
     * (masked columns); K across the 8-wide transpose tail and the 256-deep
     * panel boundary, odd K included. The same shapes run on every variant
     * (AVX-512 switches at 8 too, to its 6x32 tile). */
    static const int64_t Ma[] = {7, 8, 9, 10, 11, 12, 13}, Na[] = {8, 15, 16, 17},
                         Ka[] = {1, 7, 9, 255, 257};
    for (int a = 0; a < 7; a++)
      for (int b = 0; b < 4; b++) check_matmul(&p, dts[d], Ma[a], Na[b], Ka[(a + b) % 5]);
    /* AVX-512's 6x32 tile with 1-, 2- and 3-row remainders (19, 20, 21) and
     * AVX2's over several panels of N and K */
    check_matmul(&p, dts[d], 19, 47, 263);
    check_matmul(&p, dts[d], 20, 64, 17);
    check_matmul(&p, dts[d], 21, 33, 520);
  }
  /* K = 0: y is all zeros; M or N = 0: nothing to do */
  float y[6] = {1, 1, 1, 1, 1, 1};
  ck_assert_int_eq(p.pi->matmul(p.ctx, NULL, y, y, y, MI_DTYPE_F32, 2, 3, 0), 0);
  for (int i = 0; i < 6; i++) ck_assert(y[i] == 0.0f);
  ck_assert_int_eq(p.pi->matmul(p.ctx, NULL, y, y, y, MI_DTYPE_F32, 0, 3, 5), 0);
  close_plat(&p);
}
END_TEST

/* ---------------- rmsnorm ---------------- */

START_TEST(test_rmsnorm) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(2, _i));
  static const int64_t rows_s[] = {1, 3, 8, 70}, dims[] = {1, 7, 128, 1000};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      for (int off = 0; off <= 1; off++)
        for (int inplace = 0; inplace <= 1; inplace++) {
          int64_t R = rows_s[a], D = dims[b];
          float eps = 1e-6f;
          float *x = rand_f32((size_t)(R * D), -2, 2);
          float *w = rand_f32((size_t)D, off ? -0.5 : 0.5, off ? 0.5 : 1.5);
          float *xc = malloc((size_t)(R * D) * 4);
          memcpy(xc, x, (size_t)(R * D) * 4);
          float *y = inplace ? x : malloc((size_t)(R * D) * 4);
          int rc = p.pi->rmsnorm(p.ctx, NULL, y, x, w, R, D, eps, (float)off);
          EXPECT(rc == 0, "rmsnorm: %s", p.pi->last_error(p.ctx));
          for (int64_t r = 0; r < R; r++) {
            double ss = 0;
            for (int64_t i = 0; i < D; i++) ss += (double)xc[r * D + i] * xc[r * D + i];
            double inv = 1.0 / sqrt(ss / (double)D + (double)eps);
            for (int64_t i = 0; i < D; i++) {
              double xv = xc[r * D + i];
              double ref = xv * inv * ((double)w[i] + off);
              double tol = (double)(D + 8) * U * fabs(xv) * inv * (fabs(w[i]) + off) + 1e-30;
              EXPECT(fabs(y[r * D + i] - ref) <= tol,
                            "rmsnorm rows=%ld dim=%ld off=%d inplace=%d [%ld,%ld] = %.9g want %.9g",
                            (long)R, (long)D, off, inplace, (long)r, (long)i, (double)y[r * D + i],
                            ref);
            }
          }
          if (!inplace) free(y);
          free(x);
          free(xc);
          free(w);
        }
  close_plat(&p);
}
END_TEST

/* ---------------- rope ---------------- */

START_TEST(test_rope) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(3, _i));
  /* {T, H, head_dim, rot_dim}: full, partial, odd tails */
  static const int64_t cases[][4] = {{1, 1, 8, 8}, {3, 4, 64, 64}, {5, 2, 128, 64},
                                     {4, 3, 10, 6}, {2, 16, 128, 128}, {9, 1, 6, 2}};
  static const float thetas[] = {10000.0f, 1000000.0f};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int th = 0; th < 2; th++) {
      int64_t T = cases[c][0], H = cases[c][1], Dh = cases[c][2], rot = cases[c][3];
      int64_t head_stride = Dh, tok_stride = H * Dh + 3; /* 3 pad floats per token */
      size_t n = (size_t)(T * tok_stride);
      float *x = rand_f32(n, -2, 2);
      float *x0 = malloc(n * 4);
      memcpy(x0, x, n * 4);
      int32_t *pos = malloc((size_t)T * 4);
      for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(rng_u64() % 5000);
      pos[0] = T > 1 ? 0 : 100000; /* position 0 (identity) and a far one */
      if (T > 2) pos[T - 1] = 131071;
      mi_buffer *bp;
      const int32_t *dpos = wrap(&p, pos, (size_t)T * 4, &bp);
      int rc = p.pi->rope(p.ctx, NULL, x, dpos, T, H, tok_stride, head_stride, rot, thetas[th]);
      EXPECT(rc == 0, "rope: %s", p.pi->last_error(p.ctx));
      int64_t half = rot / 2;
      for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
          const float *a = x0 + t * tok_stride + h * head_stride;
          const float *g = x + t * tok_stride + h * head_stride;
          for (int64_t i = 0; i < half; i++) {
            double ang = (double)pos[t] * pow((double)thetas[th], -2.0 * (double)i / (double)rot);
            double r0 = a[i] * cos(ang) - a[i + half] * sin(ang);
            double r1 = a[i + half] * cos(ang) + a[i] * sin(ang);
            double tol = 6 * U * (fabs(a[i]) + fabs(a[i + half])) + 1e-30;
            EXPECT(fabs(g[i] - r0) <= tol && fabs(g[i + half] - r1) <= tol,
                          "rope T=%ld H=%ld Dh=%ld rot=%ld theta=%g pos=%d t=%ld h=%ld i=%ld: "
                          "(%.9g, %.9g) want (%.9g, %.9g)",
                          (long)T, (long)H, (long)Dh, (long)rot, (double)thetas[th], pos[t],
                          (long)t, (long)h, (long)i, (double)g[i], (double)g[i + half], r0, r1);
          }
          for (int64_t i = rot; i < Dh; i++) /* partial rotary: tail untouched, bit for bit */
            EXPECT(memcmp(&g[i], &a[i], 4) == 0, "rope changed channel %ld >= rot_dim %ld",
                          (long)i, (long)rot);
        }
        for (int64_t i = H * Dh; i < tok_stride; i++) /* padding between tokens untouched */
          EXPECT(memcmp(&x[t * tok_stride + i], &x0[t * tok_stride + i], 4) == 0,
                 "rope wrote into the padding between tokens");
      }
      p.pi->buffer_free(p.ctx, bp);
      free(x);
      free(x0);
      free(pos);
    }
  close_plat(&p);
}
END_TEST

/* ---------------- attention ---------------- */

/* Float64 reference for one (t, h). */
static void attn_ref(const float *q, const float *kc, const float *vc, int64_t Hq, int64_t Hkv,
                     int64_t D, int64_t pos0, float scale, int64_t t, int64_t h, double *out,
                     double *tol) {
  int64_t kvh = h / (Hq / Hkv), L = pos0 + t + 1;
  const float *qh = q + (t * Hq + h) * D;
  double *s = malloc((size_t)L * sizeof *s);
  double smax = -INFINITY, sabs = 0, vmax = 0;
  for (int64_t j = 0; j < L; j++) {
    const float *kr = kc + (j * Hkv + kvh) * D;
    double acc = 0, mag = 0;
    for (int64_t d = 0; d < D; d++) {
      acc += (double)qh[d] * kr[d];
      mag += fabs((double)qh[d] * kr[d]);
    }
    s[j] = acc * scale;
    if (s[j] > smax) smax = s[j];
    if (mag * fabs(scale) > sabs) sabs = mag * fabs(scale);
  }
  double sum = 0;
  for (int64_t j = 0; j < L; j++) {
    s[j] = exp(s[j] - smax);
    sum += s[j];
  }
  for (int64_t d = 0; d < D; d++) out[d] = 0;
  for (int64_t j = 0; j < L; j++) {
    const float *vr = vc + (j * Hkv + kvh) * D;
    for (int64_t d = 0; d < D; d++) {
      out[d] += s[j] / sum * vr[d];
      if (fabs(vr[d]) > vmax) vmax = fabs(vr[d]);
    }
  }
  double ds = (double)(D + 8) * U * sabs;
  *tol = 2 * (2 * ds + 4 * U * sabs + (double)(L + 16) * U) * vmax + 1e-30;
  free(s);
}

typedef struct attn_case {
  int64_t T, Hq, Hkv, D, pos0;
  float scale, qk_range;
} attn_case;

/* The cache as the kernel sees it: f32 as is, or each value rounded to
 * f16/bf16 (the host copy is overwritten with the rounded values, so the
 * float64 reference sees exactly what the kernel widens back). */
static void *cache_in(float *v, size_t n, mi_dtype dt) {
  if (dt == MI_DTYPE_F32) return v;
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    h[i] = dt == MI_DTYPE_F16 ? mi_f32_to_f16(v[i]) : mi_f32_to_bf16(v[i]);
    v[i] = dt == MI_DTYPE_F16 ? mi_f16_to_f32(h[i]) : mi_bf16_to_f32(h[i]);
  }
  return h;
}

/* Runs one case; rows at positions >= pos0+T are NaN (must never be read). */
static void check_attention(plat *p, const attn_case *c, int big_scores, mi_dtype kvt) {
  int64_t T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D, pos0 = c->pos0;
  int64_t ctx_rows = pos0 + T + 3;
  size_t kvn = (size_t)(ctx_rows * Hkv * D), qn = (size_t)(T * Hq * D);
  float *q = rand_f32(qn, -c->qk_range, c->qk_range);
  float *kc = rand_f32(kvn, -c->qk_range, c->qk_range);
  float *vc = rand_f32(kvn, -1, 1);
  if (big_scores) /* some keys aligned with the queries: scores in the hundreds */
    for (int64_t j = 0; j < pos0 + T; j += 7)
      for (int64_t hk = 0; hk < Hkv; hk++)
        for (int64_t d = 0; d < D; d++)
          kc[(j * Hkv + hk) * D + d] = q[((j % T) * Hq + hk * (Hq / Hkv)) * D + d] *
                                       (float)rng_unif(0.5, 1.5);
  for (size_t i = (size_t)((pos0 + T) * Hkv * D); i < kvn; i++) kc[i] = vc[i] = NAN;
  float *out = malloc(qn * 4);
  void *kh = cache_in(kc, kvn, kvt), *vh = cache_in(vc, kvn, kvt);
  const size_t esz = mi_dtype_size(kvt);
  mi_buffer *bq, *bk, *bv;
  const float *dq = wrap(p, q, qn * 4, &bq);
  const void *dk = wrap(p, kh, kvn * esz, &bk), *dv = wrap(p, vh, kvn * esz, &bv);
  int rc = p->pi->attention(p->ctx, NULL, out, dq, dk, dv, kvt, T, Hq, Hkv, D, pos0, c->scale);
  EXPECT(rc == 0, "attention: %s", p->pi->last_error(p->ctx));
  double *ref = malloc((size_t)D * sizeof *ref);
  double maxs = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      double tol;
      attn_ref(q, kc, vc, Hq, Hkv, D, pos0, c->scale, t, h, ref, &tol);
      for (int64_t d = 0; d < D; d++) {
        double got = out[(t * Hq + h) * D + d];
        EXPECT(isfinite(got) && fabs(got - ref[d]) <= tol,
                      "attention %s T=%ld Hq=%ld Hkv=%ld D=%ld pos0=%ld: out[%ld,%ld,%ld] = %.9g "
                      "want %.9g (tol %.3g)",
                      mi_dtype_name(kvt), (long)T, (long)Hq, (long)Hkv, (long)D, (long)pos0, (long)t, (long)h,
                      (long)d, got, ref[d], tol);
      }
    }
  if (big_scores) { /* make sure the case really has scores exp() cannot take */
    for (int64_t h = 0; h < Hq; h++) {
      const float *qh = q + h * D;
      for (int64_t j = 0; j <= pos0; j++) {
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += (double)qh[d] * kc[(j * Hkv + h / (Hq / Hkv)) * D + d];
        if (s * c->scale > maxs) maxs = s * c->scale;
      }
    }
    EXPECT(maxs > 100, "test setup: max score %.1g should overflow expf", maxs);
  }
  p->pi->buffer_free(p->ctx, bq);
  p->pi->buffer_free(p->ctx, bk);
  p->pi->buffer_free(p->ctx, bv);
  free(ref);
  free(q);
  if (kh != kc) free(kh);
  if (vh != vc) free(vh);
  free(kc);
  free(vc);
  free(out);
}

START_TEST(test_attention) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(4, _i));
  static const attn_case cases[] = {
      {1, 4, 2, 8, 0, 0.35f, 1},     /* first token: attends to itself only */
      {5, 4, 4, 17, 3, 0.25f, 1},    /* MHA, odd head_dim */
      {7, 16, 8, 128, 60, 0.0884f, 1}, /* Qwen3 heads, crosses a 64-row block */
      {2, 12, 1, 64, 130, 0.125f, 1},  /* 12 query heads on one KV head (> 8 per group) */
      {1, 16, 8, 128, 200, 0.0884f, 2}, /* decode */
      {13, 2, 1, 3, 0, 1.0f, 1},        /* prefill from position 0 */
      /* Prefill tiles (avx2: 8 query rows per tile, avx512: 16; rows are
       * (position, head) pairs of one KV head, cut every 8/16): */
      {17, 16, 8, 128, 0, 0.0884f, 1},  /* Qwen3 heads; last tile short */
      {9, 8, 2, 72, 100, 0.118f, 1},    /* G=4, chunked prefill, D % 16 = 8 */
      {5, 6, 1, 40, 7, 0.158f, 1},      /* G=6: tiles mix positions mid-group */
      {11, 3, 1, 20, 2, 0.224f, 1},     /* G=3, D % 8 = 4 */
      {1, 32, 2, 64, 70, 0.125f, 1},    /* decode with 16 heads per KV head */
      {63, 2, 2, 64, 0, 0.125f, 1},     /* G=1, 63/64/65 keys: block edges */
      {64, 2, 2, 64, 0, 0.125f, 1},
      {65, 2, 2, 64, 0, 0.125f, 1},
      {30, 4, 2, 64, 50, 0.125f, 1},    /* tile straddles the block edge at 64 */
      {1021, 1, 1, 16, 3, 0.25f, 1},    /* long prompt, 16 blocks */
      /* Decode split over positions (one task per 64 positions, up to the
       * thread count; the tasks' partial softmaxes are merged): */
      {1, 6, 3, 17, 301, 0.243f, 1},    /* 302 keys: tasks end mid-block, rows not /4 */
      {1, 16, 8, 128, 1500, 0.0884f, 2}, /* Qwen3 heads, long context */
      {1, 6, 2, 48, 301, 0.144f, 1},    /* G=3: a head pair, then a single head; D = 3 vectors */
      {1, 3, 1, 80, 129, 0.112f, 1},    /* D = 5 vectors: a short last column group */
  };
  /* f32 cache, and half-precision caches (widened block by block) */
  static const mi_dtype kvts[] = {MI_DTYPE_F32, MI_DTYPE_F16, MI_DTYPE_BF16};
  for (size_t k = 0; k < 3; k++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      check_attention(&p, &cases[i], 0, kvts[k]);
  /* long context, large scores: without max subtraction exp overflows */
  attn_case big = {3, 2, 1, 64, 2000, 1.0f, 3};
  check_attention(&p, &big, 1, MI_DTYPE_F32);
  check_attention(&p, &big, 1, MI_DTYPE_F16);
  attn_case big_decode = {1, 2, 1, 64, 2000, 1.0f, 3}; /* the same through the decode split */
  check_attention(&p, &big_decode, 1, MI_DTYPE_F32);
  check_attention(&p, &big_decode, 1, MI_DTYPE_BF16);
  attn_case big_tiled = {16, 2, 1, 64, 300, 1.0f, 3}; /* the same through prefill tiles */
  check_attention(&p, &big_tiled, 1, MI_DTYPE_F32);
  close_plat(&p);
}
END_TEST

START_TEST(test_attention_causal) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(5, _i));
  int64_t T = 4, Hq = 4, Hkv = 2, D = 32, pos0 = 5, rows = pos0 + T;
  size_t kvn = (size_t)(rows * Hkv * D), qn = (size_t)(T * Hq * D);
  float *q = rand_f32(qn, -1, 1), *kc = rand_f32(kvn, -1, 1), *vc = rand_f32(kvn, -1, 1);
  float *o1 = malloc(qn * 4), *o2 = malloc(qn * 4);
  ck_assert_int_eq(p.pi->attention(p.ctx, NULL, o1, q, kc, vc, MI_DTYPE_F32, T, Hq, Hkv, D, pos0,
                                   0.2f),
                   0);
  /* Change the last row (position pos0+T-1): only the last query may see it. */
  for (int64_t i = (rows - 1) * Hkv * D; i < rows * Hkv * D; i++) {
    kc[i] = (float)rng_unif(-3, 3);
    vc[i] = (float)rng_unif(-3, 3);
  }
  ck_assert_int_eq(p.pi->attention(p.ctx, NULL, o2, q, kc, vc, MI_DTYPE_F32, T, Hq, Hkv, D, pos0,
                                   0.2f),
                   0);
  size_t per_tok = (size_t)(Hq * D);
  EXPECT(memcmp(o1, o2, (T - 1) * per_tok * 4) == 0,
                "a future KV row changed the output of an earlier query");
  EXPECT(memcmp(o1 + (T - 1) * per_tok, o2 + (T - 1) * per_tok, per_tok * 4) != 0,
                "the last query did not see its own KV row");
  free(q);
  free(kc);
  free(vc);
  free(o1);
  free(o2);
  close_plat(&p);
}
END_TEST

/* ---------------- elementwise ---------------- */

START_TEST(test_elementwise) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(6, _i));
  static const int64_t ns[] = {1, 7, 33, 1000, 70000};
  for (int c = 0; c < 5; c++)
    for (int alias = 0; alias <= 1; alias++) {
      int64_t n = ns[c];
      float *a = rand_f32((size_t)n, -12, 12), *b = rand_f32((size_t)n, -3, 3);
      float *a0 = malloc((size_t)n * 4);
      memcpy(a0, a, (size_t)n * 4);
      float *y = alias ? a : malloc((size_t)n * 4);
      /* silu_mul */
      ck_assert_int_eq(p.pi->silu_mul(p.ctx, NULL, y, a, b, n), 0);
      for (int64_t i = 0; i < n; i++) {
        double g = a0[i], ref = g / (1.0 + exp(-g)) * b[i];
        EXPECT(fabs(y[i] - ref) <= 8 * U * fabs(ref) + 1e-37,
                      "silu_mul n=%ld [%ld]: %.9g want %.9g", (long)n, (long)i, (double)y[i], ref);
      }
      /* add */
      memcpy(a, a0, (size_t)n * 4);
      ck_assert_int_eq(p.pi->add(p.ctx, NULL, y, a, b, n), 0);
      for (int64_t i = 0; i < n; i++) {
        double ref = (double)a0[i] + b[i];
        EXPECT(fabs(y[i] - ref) <= 2 * U * fabs(ref), "add [%ld]: %.9g want %.9g", (long)i,
                      (double)y[i], ref);
      }
      /* scale */
      memcpy(a, a0, (size_t)n * 4);
      ck_assert_int_eq(p.pi->scale(p.ctx, NULL, y, a, -0.3f, n), 0);
      for (int64_t i = 0; i < n; i++) {
        double ref = (double)-0.3f * a0[i];
        EXPECT(fabs(y[i] - ref) <= 2 * U * fabs(ref), "scale [%ld]: %.9g want %.9g",
                      (long)i, (double)y[i], ref);
      }
      if (!alias) free(y);
      free(a);
      free(a0);
      free(b);
    }
  close_plat(&p);
}
END_TEST

/* ---------------- embed ---------------- */

START_TEST(test_embed) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(7, _i));
  static const mi_dtype dts[] = {MI_DTYPE_F32, MI_DTYPE_F16, MI_DTYPE_BF16};
  static const int64_t cases[][3] = {{1, 50, 1}, {9, 50, 7}, {3, 1, 64}, {40, 77, 2000}};
  for (int d = 0; d < 3; d++)
    for (int c = 0; c < 4; c++) {
      int64_t T = cases[c][0], V = cases[c][1], dim = cases[c][2];
      double *ref = malloc((size_t)(V * dim) * sizeof *ref);
      void *table = rand_weights(dts[d], (size_t)(V * dim), ref);
      int32_t *ids = malloc((size_t)T * 4);
      for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)(rng_u64() % (uint64_t)V);
      ids[0] = (int32_t)(V - 1); /* the last row */
      float *y = malloc((size_t)(T * dim) * 4);
      mi_buffer *bt;
      const void *dt = wrap(&p, table, (size_t)(V * dim) * mi_dtype_size(dts[d]), &bt);
      ck_assert_int_eq(p.pi->embed(p.ctx, NULL, y, dt, dts[d], ids, T, V, dim), 0);
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < dim; i++)
          EXPECT((double)y[t * dim + i] == ref[ids[t] * dim + i],
                        "embed %s [%ld,%ld] = %.9g want %.9g", mi_dtype_name(dts[d]), (long)t,
                        (long)i, (double)y[t * dim + i], ref[ids[t] * dim + i]);
      p.pi->buffer_free(p.ctx, bt);
      free(ref);
      free(table);
      free(ids);
      free(y);
    }
  close_plat(&p);
}
END_TEST

/* ---------------- argmax ---------------- */

START_TEST(test_argmax) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(8, _i));
  static const int64_t cases[][2] = {{1, 1}, {3, 5}, {4, 1000}, {1, 151936}};
  for (int c = 0; c < 4; c++) {
    int64_t R = cases[c][0], n = cases[c][1];
    float *x = rand_f32((size_t)(R * n), -5, 5);
    int64_t *want = malloc((size_t)R * sizeof *want);
    for (int64_t r = 0; r < R; r++) {
      float *xr = x + r * n;
      int64_t a = (int64_t)(rng_u64() % (uint64_t)n), b = (int64_t)(rng_u64() % (uint64_t)n);
      xr[a] = xr[b] = 7.5f; /* a tie (or one max if a == b): the first index wins */
      want[r] = a < b ? a : b;
      if (r == 1 && n > 3) { /* NaN and -inf never win */
        xr[(want[r] + 1) % n] = NAN;
        if ((want[r] + 2) % n != want[r]) xr[(want[r] + 2) % n] = -INFINITY;
      }
    }
    int32_t *out = malloc((size_t)R * 4);
    ck_assert_int_eq(p.pi->argmax(p.ctx, NULL, out, x, R, n), 0);
    for (int64_t r = 0; r < R; r++)
      EXPECT(out[r] == want[r], "argmax rows=%ld n=%ld row %ld: %d want %ld", (long)R,
                    (long)n, (long)r, out[r], (long)want[r]);
    free(x);
    free(want);
    free(out);
  }
  close_plat(&p);
}
END_TEST

/* ---------------- memory, streams, device ---------------- */

START_TEST(test_memory_streams_device) {
  plat p;
  if (!open_conf(_i, &p)) return;
  const mi_platform_iface *pi = p.pi;
  ck_assert_int_eq(pi->device_count(p.ctx), 1);
  mi_device_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ck_assert_int_eq(pi->device_info(p.ctx, 0, &info), 0);
  ck_assert_uint_eq(info.struct_size, sizeof info);
  ck_assert(info.host_memory == 1);
  ck_assert_int_eq(info.compute_units, atoi(THREADS[_i % 3]));
  ck_assert(strlen(info.name) > 0);
  printf("device: %s, simd %d, %llu MiB\n", info.name, info.simd_width,
         (unsigned long long)(info.total_memory >> 20));
  ck_assert_int_lt(pi->device_info(p.ctx, 1, &info), 0);
  /* an older, shorter struct: nothing written past its announced size */
  _Alignas(8) unsigned char old[offsetof(mi_device_info, total_memory) + 8];
  memset(old, 0xab, sizeof old);
  uint32_t old_size = offsetof(mi_device_info, total_memory);
  memcpy(old, &old_size, 4);
  ck_assert_int_eq(pi->device_info(p.ctx, 0, (mi_device_info *)(void *)old), 0);
  for (size_t i = old_size; i < sizeof old; i++) EXPECT(old[i] == 0xab, "device_info wrote past struct_size");

  mi_buffer *a, *b;
  ck_assert_int_eq(pi->buffer_alloc(p.ctx, 1000, &a), 0);
  ck_assert_int_eq(pi->buffer_alloc(p.ctx, 1000, &b), 0);
  unsigned char *pa = pi->buffer_ptr(p.ctx, a), *pb = pi->buffer_ptr(p.ctx, b);
  ck_assert(((uintptr_t)pa & 63) == 0 && ((uintptr_t)pb & 63) == 0);
  for (int i = 0; i < 1000; i++) EXPECT(pa[i] == 0, "buffer_alloc memory is not zeroed"); /* zeroed */
  unsigned char src[1000], dst[1000];
  for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 7 + 1);
  mi_stream *s;
  ck_assert_int_eq(pi->stream_create(p.ctx, &s), 0);
  ck_assert_int_eq(pi->memcpy_h2d(p.ctx, s, pa, src, 1000), 0);
  ck_assert_int_eq(pi->memcpy_d2d(p.ctx, s, pb, pa, 1000), 0);
  ck_assert_int_eq(pi->memcpy_d2h(p.ctx, s, dst, pb, 1000), 0);
  ck_assert_int_eq(pi->stream_sync(p.ctx, s), 0);
  ck_assert_int_eq(pi->stream_sync(p.ctx, NULL), 0);
  ck_assert(memcmp(src, dst, 1000) == 0);
  pi->stream_destroy(p.ctx, s);
  mi_buffer *z;
  ck_assert_int_eq(pi->buffer_alloc(p.ctx, 0, &z), 0); /* empty is valid */
  ck_assert_ptr_nonnull(pi->buffer_ptr(p.ctx, z));
  pi->buffer_free(p.ctx, z);
  pi->buffer_free(p.ctx, a);
  pi->buffer_free(p.ctx, b);
  pi->buffer_free(p.ctx, NULL);
  ck_assert_int_lt(pi->memcpy_h2d(p.ctx, NULL, NULL, src, 10), 0);
  ck_assert(strlen(pi->last_error(p.ctx)) > 0);
  close_plat(&p);
}
END_TEST

/* ---------------- error paths and variant selection ---------------- */

START_TEST(test_errors) {
  plat p;
  if (!open_conf(_i, &p)) return;
  const mi_platform_iface *pi = p.pi;
  float table[4 * 3] = {0}, y[2 * 3];
  for (int i = 0; i < 6; i++) y[i] = 42.0f;
  int32_t bad_hi[2] = {1, 4}, bad_lo[2] = {-1, 0};
  ck_assert_int_lt(pi->embed(p.ctx, NULL, y, table, MI_DTYPE_F32, bad_hi, 2, 4, 3), 0);
  const char *msg = pi->last_error(p.ctx);
  printf("embed id 4 of V=4: %s\n", msg);
  ck_assert(strstr(msg, "embed") && strstr(msg, "4"));
  for (int i = 0; i < 6; i++) ck_assert(y[i] == 42.0f); /* nothing written */
  ck_assert_int_lt(pi->embed(p.ctx, NULL, y, table, MI_DTYPE_F32, bad_lo, 2, 4, 3), 0);
  ck_assert_ptr_nonnull(strstr(pi->last_error(p.ctx), "-1"));
  ck_assert_int_lt(pi->embed(p.ctx, NULL, y, table, MI_DTYPE_I32, bad_lo + 1, 1, 4, 3), 0);

  /* convert: f32 -> f16/bf16 rounds to nearest even exactly as the SDK's
   * reference converters; back to f32 is exact; other pairs are refused. */
  {
    float src[37], back[37];
    uint16_t half[37];
    for (int i = 0; i < 37; i++) src[i] = (float)((i * 7919) % 1000 - 500) * 0.00731f;
    src[3] = 65504.0f; /* largest f16 */
    src[4] = 1e-7f;    /* f16 subnormal */
    for (int k = 0; k < 2; k++) {
      mi_dtype dt = k ? MI_DTYPE_BF16 : MI_DTYPE_F16;
      ck_assert_int_eq(pi->convert(p.ctx, NULL, half, dt, src, MI_DTYPE_F32, 37), 0);
      ck_assert_int_eq(pi->convert(p.ctx, NULL, back, MI_DTYPE_F32, half, dt, 37), 0);
      for (int i = 0; i < 37; i++) {
        uint16_t want = k ? mi_f32_to_bf16(src[i]) : mi_f32_to_f16(src[i]);
        ck_assert_uint_eq(half[i], want);
        ck_assert(back[i] == (k ? mi_bf16_to_f32(want) : mi_f16_to_f32(want)));
      }
    }
    ck_assert_int_lt(pi->convert(p.ctx, NULL, half, MI_DTYPE_I32, src, MI_DTYPE_F32, 4), 0);
    ck_assert_ptr_nonnull(strstr(pi->last_error(p.ctx), "convert"));
  }

  float q[8] = {0}, kv[8] = {0}, out[8];
  ck_assert_int_lt(pi->attention(p.ctx, NULL, out, q, kv, kv, MI_DTYPE_I32, 1, 1, 1, 8, 0, 1.0f), 0);
  printf("attention i32 cache: %s\n", pi->last_error(p.ctx));
  ck_assert_ptr_nonnull(strstr(pi->last_error(p.ctx), "kv_dtype"));
  ck_assert_int_lt(pi->attention(p.ctx, NULL, out, q, kv, kv, MI_DTYPE_F32, 1, 3, 2, 8, 0, 1.0f), 0);
  ck_assert_int_lt(pi->matmul(p.ctx, NULL, out, q, kv, MI_DTYPE_I32, 1, 1, 8), 0);
  ck_assert_int_lt(pi->matmul(p.ctx, NULL, out, q, kv, MI_DTYPE_F32, -1, 1, 8), 0);
  ck_assert_int_lt(pi->rope(p.ctx, NULL, q, (const int32_t *)kv, 1, 1, 8, 8, 7, 1e4f), 0);
  ck_assert_int_lt(pi->rmsnorm(p.ctx, NULL, out, q, q, 1, 0, 1e-6f, 0.0f), 0);
  ck_assert_int_lt(pi->argmax(p.ctx, NULL, (int32_t *)out, q, 1, 0), 0);
  close_plat(&p);
}
END_TEST

/* Two application threads calling kernels on one context at once: the pool
 * must not mix their jobs (the second caller runs its work serially).
 * Results must equal the single-caller results bit for bit. */
typedef struct conc_arg {
  plat *p;
  const float *x;
  const uint16_t *w;
  const float *want;
  int64_t M, N, K;
  int bad;
} conc_arg;

static void *conc_main(void *v) {
  conc_arg *a = v;
  float *y = malloc((size_t)(a->M * a->N) * 4);
  for (int r = 0; r < 30 && !a->bad; r++) {
    if (a->p->pi->matmul(a->p->ctx, NULL, y, a->x, a->w, MI_DTYPE_BF16, a->M, a->N, a->K) != 0 ||
        memcmp(y, a->want, (size_t)(a->M * a->N) * 4) != 0)
      a->bad = 1;
  }
  free(y);
  return NULL;
}

START_TEST(test_concurrent_callers) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(9, _i));
  int64_t M = 1, N = 640, K = 256;
  double *ref = malloc((size_t)(N * K) * sizeof *ref);
  uint16_t *w = rand_weights(MI_DTYPE_BF16, (size_t)(N * K), ref);
  float *x = rand_f32((size_t)(M * K), -1, 1);
  float *want = malloc((size_t)(M * N) * 4);
  ck_assert_int_eq(p.pi->matmul(p.ctx, NULL, want, x, w, MI_DTYPE_BF16, M, N, K), 0);
  /* The serial fallback splits the work differently, but each output is
   * still one row's dot product computed the same way: bit-identical. */
  conc_arg a[2] = {{&p, x, w, want, M, N, K, 0}, {&p, x, w, want, M, N, K, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, conc_main, &a[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  ck_assert_msg(!a[0].bad && !a[1].bad, "concurrent callers got different results");
  free(ref);
  free(w);
  free(x);
  free(want);
  close_plat(&p);
}
END_TEST

/* ---------------- what this host can run ----------------
 *
 * Worked out here from CPUID and XGETBV, not asked of the plugin, so the
 * tests below hold on any x86-64 host (with or without AVX2 or AVX-512, or
 * with an OS that leaves the YMM/ZMM state off) and under MI_CPU_ISA_MAX,
 * the plugin's documented "behave as a lesser host" cap. For each variant:
 * available or not, and for one that is not, a piece of the reason the
 * plugin must give. */
typedef struct host_isas {
  int avail[4];
  const char *why[4];
} host_isas;

static int isa_index(const char *name) {
  for (int i = 0; i < 4; i++)
    if (name && strcmp(name, ISAS[i]) == 0) return i;
  return -1;
}

static host_isas expected_isas(long long xcr0_override) {
  host_isas h = {{1, 0, 0, 0}, {NULL, NULL, NULL, NULL}};
#if defined(HOST_X86)
  unsigned a = 0, b = 0, c = 0, d = 0, l1c = 0, l7b = 0, l71a = 0;
  unsigned max = __get_cpuid_max(0, NULL);
  if (max >= 1 && __get_cpuid(1, &a, &b, &c, &d)) l1c = c;
  if (max >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    l7b = b;
    if (a >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      l71a = a;
    }
  }
  const int osxsave = (l1c >> 27) & 1;
  unsigned long long xcr0 = 0;
  if (xcr0_override >= 0) {
    xcr0 = (unsigned long long)xcr0_override;
  } else if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv */
    xcr0 = ((unsigned long long)hi << 32) | lo;
  }
  /* CPUID.1:ECX FMA 12, AVX 28, F16C 29; CPUID.7.0:EBX AVX2 5, AVX512F 16,
   * BW 30, VL 31; CPUID.7.1:EAX AVX512_BF16 5. XCR0: 0x6 SSE|YMM, 0xe6
   * adds opmask|ZMM_Hi256|Hi16_ZMM. */
  const int cpu_avx2 = (l1c >> 28 & 1) && (l1c >> 12 & 1) && (l1c >> 29 & 1) && (l7b >> 5 & 1);
  const int os_ymm = osxsave && (xcr0 & 0x6) == 0x6, os_zmm = osxsave && (xcr0 & 0xe6) == 0xe6;
  h.avail[1] = cpu_avx2 && os_ymm;
  h.why[1] = !cpu_avx2 ? "CPU lacks" : "OS does not enable";
  h.avail[2] = h.avail[1] && (l7b >> 16 & 1) && os_zmm;
  h.why[2] = !h.avail[1] ? "needs avx2 first" : !(l7b >> 16 & 1) ? "CPU lacks AVX-512F"
                                                                 : "OS does not enable";
  h.avail[3] = h.avail[2] && (l7b >> 30 & 1) && (l7b >> 31 & 1) && (l71a >> 5 & 1);
  h.why[3] = !h.avail[2] ? "needs avx512 first" : "CPU lacks";
#else
  (void)xcr0_override;
  h.why[1] = h.why[2] = h.why[3] = "not an x86-64 build";
#endif
  const char *cap = getenv("MI_CPU_ISA_MAX");
  int ci = isa_index(cap);
  for (int i = ci + 1; ci >= 0 && i < 4; i++)
    if (h.avail[i]) {
      h.avail[i] = 0;
      h.why[i] = "hidden by MI_CPU_ISA_MAX";
    }
  return h;
}

static int expected_best(const host_isas *h) {
  int best = 0;
  for (int i = 0; i < 4; i++)
    if (h->avail[i]) best = i;
  return best;
}

static const char *variant_full(void *ctx) {
  const mi_platform_iface *pi = load_desc()->get_iface(ctx);
  return pi ? pi->variant(ctx) : "";
}

/* The ISA part of the variant name: "avx512bf16+bf16act" (the bf16-activation
 * prefill mode, tested in test_matmul_act_option) names the ISA avx512bf16. */
static const char *variant_of(void *ctx) {
  static char buf[64];
  snprintf(buf, sizeof buf, "%s", variant_full(ctx));
  char *plus = strchr(buf, '+');
  if (plus) *plus = 0;
  return buf;
}

/* Not looped: option handling and ISA refusal. */
START_TEST(test_isa_selection) {
  const mi_plugin_desc *d = load_desc();
  char why[256], err[512];
  void *ctx = NULL;
  const host_isas h = expected_isas(-1);
  /* default: the best variant (or MI_CPU_ISA's), with a one-line reason */
  const char *env = getenv("MI_CPU_ISA");
  const char *want = env && *env && strcmp(env, "auto") ? env : ISAS[expected_best(&h)];
  mi_options none = {NULL, 0};
  int best = d->probe(&host, &none, why, sizeof why);
  printf("probe (no options): score %d, %s\n", best, why);
  ck_assert_int_gt(best, 0);
  ck_assert_ptr_null(strchr(why, '\n'));
  ck_assert_int_eq(d->init(&host, &none, &ctx, err, sizeof err), 0);
  printf("default variant here: %s\n", variant_of(ctx));
  ck_assert_str_eq(variant_of(ctx), want);
  d->fini(ctx);

  mi_kv isa_auto[] = {{"isa", "auto"}};
  mi_options o_auto = {isa_auto, 1};
  for (int i = 0; i < 4; i++) {
    mi_kv kv[] = {{"isa", ISAS[i]}};
    mi_options o = {kv, 1};
    int sc = d->probe(&host, &o, why, sizeof why);
    printf("isa=%-10s score %2d  %s (expected: %s)\n", ISAS[i], sc, why,
           h.avail[i] ? "available" : h.why[i]);
    EXPECT((sc > 0) == h.avail[i], "isa=%s: probe scored %d, but this host %s run it", ISAS[i],
           sc, h.avail[i] ? "can" : "cannot");
    if (sc > 0) {
      ck_assert_int_le(sc, d->probe(&host, &o_auto, why, sizeof why));
      continue;
    }
    /* a variant this machine lacks: init refuses with a clear message */
    err[0] = 0;
    ck_assert_int_ne(d->init(&host, &o, &ctx, err, sizeof err), 0);
    EXPECT(strstr(err, "cannot run") && strstr(err, h.why[i]), "isa=%s refused with '%s', want '%s'",
           ISAS[i], err, h.why[i]);
  }

  /* An OS that saves YMM but not ZMM state (XCR0 = x87|SSE|AVX): AVX-512 must
   * be refused even on a CPU that has it, and auto must fall back. The
   * reason depends on the host: "OS does not enable" where the CPU has
   * AVX-512F, "CPU lacks AVX-512F" where it does not, "needs avx2 first"
   * without AVX2. (isa=auto is explicit so MI_CPU_ISA cannot change it.) */
  const host_isas h7 = expected_isas(0x7);
  ck_assert(!h7.avail[2] && !h7.avail[3]);
  mi_kv no_zmm[] = {{"debug_xcr0", "0x7"}, {"isa", "avx512"}};
  mi_options o = {no_zmm, 2};
  ck_assert_int_eq(d->probe(&host, &o, why, sizeof why), 0);
  printf("isa=avx512 with XCR0=0x7: %s\n", why);
  ck_assert_int_ne(d->init(&host, &o, &ctx, err, sizeof err), 0);
  EXPECT(strstr(err, h7.why[2]), "isa=avx512 with XCR0=0x7 refused with '%s', want '%s'", err,
         h7.why[2]);
  no_zmm[1].value = "auto";
  ck_assert_int_eq(d->init(&host, &o, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_of(ctx), ISAS[expected_best(&h7)]);
  d->fini(ctx);
  mi_kv no_ymm[] = {{"debug_xcr0", "0x3"}, {"isa", "auto"}};
  mi_options o2 = {no_ymm, 2};
  ck_assert_int_eq(d->init(&host, &o2, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_of(ctx), "generic");
  d->fini(ctx);

  /* bad option values */
  static const mi_kv bads[][1] = {{{"isa", "avx1024"}}, {{"threads", "-1"}}, {{"threads", "two"}},
                                  {{"debug_xcr0", "zz"}}};
  for (int i = 0; i < 4; i++) {
    mi_options ob = {bads[i], 1};
    err[0] = 0;
    ck_assert_int_ne(d->init(&host, &ob, &ctx, err, sizeof err), 0);
    printf("%s=%s refused: %s\n", bads[i][0].key, bads[i][0].value, err);
    ck_assert(strlen(err) > 0 && strchr(err, '\n') == NULL);
    ck_assert_int_eq(d->probe(&host, &ob, why, sizeof why), 0);
  }
}
END_TEST

/* MI_CPU_ISA (the default for isa=) and MI_CPU_ISA_MAX (the cap). The
 * outer values are restored so the test also holds with CK_FORK=no. */
static char *saved_env(const char *name) {
  const char *v = getenv(name);
  return v ? strdup(v) : NULL;
}
static void restore_env(const char *name, char *v) {
  if (v) setenv(name, v, 1);
  else unsetenv(name);
  free(v);
}

START_TEST(test_isa_env) {
  const mi_plugin_desc *d = load_desc();
  char *isa0 = saved_env("MI_CPU_ISA"), *max0 = saved_env("MI_CPU_ISA_MAX");
  char why[256], err[512];
  void *ctx = NULL;
  mi_options none = {NULL, 0};
  unsetenv("MI_CPU_ISA_MAX");
  const host_isas h = expected_isas(-1);
  const int best = expected_best(&h);

  /* MI_CPU_ISA forces the default; isa= wins over it */
  setenv("MI_CPU_ISA", "generic", 1);
  ck_assert_int_gt(d->probe(&host, &none, why, sizeof why), 0);
  EXPECT(strstr(why, "forced by MI_CPU_ISA=generic"), "probe says '%s'", why);
  ck_assert_int_eq(d->init(&host, &none, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_of(ctx), "generic");
  d->fini(ctx);
  mi_kv isa_auto[] = {{"isa", "auto"}};
  mi_options oa = {isa_auto, 1};
  ck_assert_int_eq(d->init(&host, &oa, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_of(ctx), ISAS[best]);
  d->fini(ctx);
  /* an unknown name, or one the host cannot run: the one-line refusal of isa= */
  setenv("MI_CPU_ISA", "avx1024", 1);
  ck_assert_int_eq(d->probe(&host, &none, why, sizeof why), 0);
  ck_assert_int_ne(d->init(&host, &none, &ctx, err, sizeof err), 0);
  EXPECT(strstr(err, "MI_CPU_ISA=avx1024 is unknown") && !strchr(err, '\n'), "got '%s'", err);
  for (int i = 1; i < 4; i++)
    if (!h.avail[i]) {
      setenv("MI_CPU_ISA", ISAS[i], 1);
      ck_assert_int_ne(d->init(&host, &none, &ctx, err, sizeof err), 0);
      EXPECT(strstr(err, "MI_CPU_ISA=") && strstr(err, "cannot run") && strstr(err, h.why[i]),
             "got '%s'", err);
    }
  unsetenv("MI_CPU_ISA");

  /* MI_CPU_ISA_MAX: auto behaves as on a host whose best is the cap; above
   * it, isa= is refused as on such a host; a real reason is kept */
  for (int cap = 0; cap < 4; cap++) {
    setenv("MI_CPU_ISA_MAX", ISAS[cap], 1);
    ck_assert_int_gt(d->probe(&host, &none, why, sizeof why), 0);
    ck_assert_int_eq(d->init(&host, &none, &ctx, err, sizeof err), 0);
    ck_assert_str_eq(variant_of(ctx), ISAS[cap < best ? cap : best]);
    d->fini(ctx);
    for (int i = cap + 1; i < 4; i++) {
      mi_kv kv[] = {{"isa", ISAS[i]}};
      mi_options o = {kv, 1};
      ck_assert_int_ne(d->init(&host, &o, &ctx, err, sizeof err), 0);
      const char *want = h.avail[i] ? "hidden by MI_CPU_ISA_MAX" : h.why[i];
      EXPECT(strstr(err, want), "MI_CPU_ISA_MAX=%s isa=%s: got '%s', want '%s'", ISAS[cap],
             ISAS[i], err, want);
    }
  }
  setenv("MI_CPU_ISA_MAX", "avx1024", 1);
  ck_assert_int_eq(d->probe(&host, &none, why, sizeof why), 0);
  EXPECT(strstr(why, "MI_CPU_ISA_MAX=avx1024 is unknown"), "got '%s'", why);
  restore_env("MI_CPU_ISA", isa0);
  restore_env("MI_CPU_ISA_MAX", max0);
}
END_TEST


/* ---------------- the bf16-activation prefill matmul ---------------- */

/* f32 -> bf16 -> double, round to nearest even, subnormals to zero (as
 * VCVTNE2PS2BF16 does); written here, independent of the plugin and SDK. */
static double bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) return signbit(f) ? -0.0 : 0.0;
  if (isnan(f)) return f;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* One call in matmul_act=bf16 mode. Every output must be within the
 * contract's bound for the mode, and be either the exact result or the
 * bf16-activation one (each within f32 accumulation error of its float64
 * reference). bf16 weights with must_bf16 must give the latter (the path is
 * really taken); decode (M = 1) and f32/f16 weights the former. Returns how
 * many outputs were the bf16-activation result and not the exact one. */
static int64_t check_matmul_bf16act(plat *p, mi_dtype dt, int64_t M, int64_t N, int64_t K,
                                    int must_bf16) {
  size_t es = mi_dtype_size(dt);
  float *x = rand_f32((size_t)(M * K), -1, 1);
  double *wref = malloc((size_t)(N * K + 1) * sizeof *wref);
  double *xb = malloc((size_t)(M * K + 1) * sizeof *xb);
  for (int64_t i = 0; i < M * K; i++) xb[i] = bf16_rne(x[i]);
  void *w = rand_weights(dt, (size_t)(N * K), wref);
  float *y = malloc((size_t)(M * N) * sizeof *y);
  for (int64_t i = 0; i < M * N; i++) y[i] = NAN;
  mi_buffer *bx, *bw;
  const float *dx = wrap(p, x, (size_t)(M * K) * 4, &bx);
  const void *dw = wrap(p, w, (size_t)(N * K) * es, &bw);
  int rc = p->pi->matmul(p->ctx, NULL, y, dx, dw, dt, M, N, K);
  EXPECT(rc == 0, "matmul %s M=%ld N=%ld K=%ld: rc %d: %s", mi_dtype_name(dt), (long)M, (long)N,
         (long)K, rc, p->pi->last_error(p->ctx));
  int64_t nb = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double ref = 0, mag = 0, refb = 0, magb = 0;
      for (int64_t k = 0; k < K; k++) {
        double t = (double)x[m * K + k] * wref[n * K + k], tb = xb[m * K + k] * wref[n * K + k];
        ref += t, mag += fabs(t);
        refb += tb, magb += fabs(tb);
      }
      const double got = y[m * N + n];
      const double bound = (U_BF16 + (double)K * U * (1 + U_BF16)) * mag + (double)K * 0x1p-126;
      EXPECT(fabs(got - ref) <= bound,
             "matmul_act=bf16 %s M=%ld N=%ld K=%ld: y[%ld,%ld] = %.9g, want %.9g (err %.3g > the "
             "bf16_activations bound %.3g)",
             mi_dtype_name(dt), (long)M, (long)N, (long)K, (long)m, (long)n, got, ref,
             fabs(got - ref), bound);
      const int is_exact = fabs(got - ref) <= 4.0 * sqrt((double)K) * U * mag + 1e-30;
      const int is_bf16 = fabs(got - refb) <= 4.0 * sqrt((double)K) * U * magb + 1e-30;
      if (dt != MI_DTYPE_BF16 || M == 1)
        EXPECT(is_exact, "matmul_act=bf16 %s M=%ld N=%ld K=%ld: y[%ld,%ld] = %.9g is not the exact "
               "result %.9g (only bf16 weights in prefill may round x)",
               mi_dtype_name(dt), (long)M, (long)N, (long)K, (long)m, (long)n, got, ref);
      else if (must_bf16)
        EXPECT(is_bf16, "matmul_act=bf16 M=%ld N=%ld K=%ld: y[%ld,%ld] = %.9g is not the "
               "bf16-activation result %.9g (exact: %.9g)",
               (long)M, (long)N, (long)K, (long)m, (long)n, got, refb, ref);
      else
        EXPECT(is_exact || is_bf16, "matmul_act=bf16 M=%ld N=%ld K=%ld: y[%ld,%ld] = %.9g is "
               "neither the exact result %.9g nor the bf16-activation one %.9g",
               (long)M, (long)N, (long)K, (long)m, (long)n, got, ref, refb);
      nb += is_bf16 && !is_exact;
    }
  p->pi->buffer_free(p->ctx, bx);
  p->pi->buffer_free(p->ctx, bw);
  free(x);
  free(xb);
  free(w);
  free(wref);
  free(y);
  return nb;
}

/* matmul_act=bf16 on avx512bf16, threads 1, 2, 3 (skipped on a host or
 * under an MI_CPU_ISA_MAX without AVX512_BF16). Shapes: rows below, at and
 * above the switch to the bf16 path (2..5: CPU_BF16ACT_MIN_M is 4, and the
 * rows of one thread's call count); the inner-product tiles of a short
 * prompt (4..32 rows: whole 4-row tiles and 1-3 rows left, the 4 weight
 * streams per thread and the rows left over, K in blocks of 1024 with a
 * tail) and the switch to panels at 33; the panels' 8-row tiles (64, 67:
 * the 2- and 4-row tiles and clamped 8-row ones); outputs around the
 * 16-word transpose and the 32-output panel (masked columns), K odd and
 * even around the 16-pair transpose (31, 32, 33, 63) and the 128-pair
 * panel block (255, 256, 257); one row (decode, always exact). Each output
 * is held to the contract's bound; from 64 rows and 48 outputs (every
 * thread then has all the rows), and on the model-like shapes, the path
 * must be taken. */
START_TEST(test_matmul_bf16act) {
  const host_isas h = expected_isas(-1);
  const char *thr = THREADS[_i];
  if (!h.avail[3]) {
    printf("SKIP matmul_act=bf16 threads=%s: avx512bf16 not available here (%s)\n", thr, h.why[3]);
    return;
  }
  plat p;
  mi_kv kv[] = {{"isa", "avx512bf16"}, {"threads", thr}, {"matmul_act", "bf16"}};
  char why[256] = "";
  ck_assert_int_gt(open_with(kv, 3, &p, why, sizeof why), 0);
  ck_assert_str_eq(variant_full(p.ctx), "avx512bf16+bf16act");
  rng_seed(seed_for(20, _i));
  /* rows: the inner-product tiles (4..32; 4-row tiles and 1-3 left) and
   * the panels (33+); N: 4 streams of rows per thread and the rows left;
   * K: the tail of 32, and blocks of 1024 */
  static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 16, 17, 23, 31, 32, 33, 64, 67},
                       Ns[] = {1, 15, 16, 17, 31, 32, 33, 48, 97},
                       Ks[] = {1, 2, 3, 31, 32, 33, 63, 255, 256, 257, 1023, 1025, 2079};
  enum { NM = sizeof Ms / sizeof Ms[0], NN = sizeof Ns / sizeof Ns[0], NK = sizeof Ks / sizeof Ks[0] };
  int64_t nb = 0;
  for (int a = 0; a < NM; a++)
    for (int b = 0; b < NN; b++) {
      const int64_t M = Ms[a], N = Ns[b], K = Ks[(a + 2 * b) % NK];
      nb += check_matmul_bf16act(&p, MI_DTYPE_BF16, M, N, K, M >= 64 && N >= 48);
    }
  /* several panels of N and blocks of K, M over many tiles */
  nb += check_matmul_bf16act(&p, MI_DTYPE_BF16, 100, 200, 300, 1);
  nb += check_matmul_bf16act(&p, MI_DTYPE_BF16, 67, 97, 1023, 1);
  nb += check_matmul_bf16act(&p, MI_DTYPE_BF16, 130, 64, 65, 1);
  /* a short prompt on a model's shapes: K blocks of 1024, 4 streams of 256 rows */
  nb += check_matmul_bf16act(&p, MI_DTYPE_BF16, 11, 1024, 3072, 1);
  nb += check_matmul_bf16act(&p, MI_DTYPE_BF16, 5, 2050, 1024, 1);
  /* decode and the other weight types stay exact */
  check_matmul_bf16act(&p, MI_DTYPE_BF16, 1, 1000, 300, 0);
  check_matmul_bf16act(&p, MI_DTYPE_F32, 40, 97, 257, 0);
  check_matmul_bf16act(&p, MI_DTYPE_F16, 40, 97, 257, 0);
  printf("matmul_act=bf16 threads=%s: %lld outputs were the bf16-activation result\n", thr,
         (long long)nb);
  ck_assert_int_gt(nb, 0);
  close_plat(&p);
}
END_TEST

/* matmul_act= and MI_CPU_MATMUL_ACT: the variant name tells the mode;
 * bf16 where the variant has no AVX512_BF16, or an unknown value, is
 * refused in one line; the option wins over the environment. */
START_TEST(test_matmul_act_option) {
  const mi_plugin_desc *d = load_desc();
  char *act0 = saved_env("MI_CPU_MATMUL_ACT"), *isa0 = saved_env("MI_CPU_ISA");
  unsetenv("MI_CPU_MATMUL_ACT");
  unsetenv("MI_CPU_ISA");
  const host_isas h = expected_isas(-1);
  const int best = expected_best(&h);
  char want[64], why[256], err[512];
  void *ctx = NULL;
  snprintf(want, sizeof want, "%s%s", ISAS[best], best == 3 ? "+bf16act" : "");
  /* auto (the default): the bf16 path exactly where the variant has it */
  mi_options none = {NULL, 0};
  ck_assert_int_eq(d->init(&host, &none, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_full(ctx), want);
  d->fini(ctx);
  mi_kv f32[] = {{"matmul_act", "f32"}};
  mi_options of = {f32, 1};
  ck_assert_int_eq(d->init(&host, &of, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_full(ctx), ISAS[best]);
  d->fini(ctx);
  for (int i = 0; i < 3; i++) /* lesser variants: exact, whatever the mode */
    if (h.avail[i]) {
      mi_kv kv[] = {{"isa", ISAS[i]}, {"matmul_act", "auto"}};
      mi_options o = {kv, 2};
      ck_assert_int_eq(d->init(&host, &o, &ctx, err, sizeof err), 0);
      ck_assert_str_eq(variant_full(ctx), ISAS[i]);
      d->fini(ctx);
      kv[1].value = "bf16";
      ck_assert_int_eq(d->probe(&host, &o, why, sizeof why), 0);
      err[0] = 0;
      ck_assert_int_ne(d->init(&host, &o, &ctx, err, sizeof err), 0);
      printf("isa=%s matmul_act=bf16 refused: %s\n", ISAS[i], err);
      EXPECT(strstr(err, "matmul_act=bf16 was requested") && !strchr(err, '\n') &&
                 strstr(err, h.avail[3] ? "has no VDPBF16PS" : h.why[3]),
             "isa=%s matmul_act=bf16: got '%s'", ISAS[i], err);
    }
  mi_kv bf[] = {{"matmul_act", "bf16"}};
  mi_options ob = {bf, 1};
  if (h.avail[3]) {
    ck_assert_int_eq(d->init(&host, &ob, &ctx, err, sizeof err), 0);
    ck_assert_str_eq(variant_full(ctx), "avx512bf16+bf16act");
    d->fini(ctx);
  }
  mi_kv bad[] = {{"matmul_act", "fp8"}};
  mi_options obad = {bad, 1};
  ck_assert_int_eq(d->probe(&host, &obad, why, sizeof why), 0);
  ck_assert_int_ne(d->init(&host, &obad, &ctx, err, sizeof err), 0);
  EXPECT(strstr(err, "option matmul_act=fp8 is unknown") && !strchr(err, '\n'), "got '%s'", err);
  /* the environment: the default for the option, which wins */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  ck_assert_int_eq(d->init(&host, &none, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_full(ctx), ISAS[best]);
  d->fini(ctx);
  mi_kv au[] = {{"matmul_act", "auto"}};
  mi_options oau = {au, 1};
  ck_assert_int_eq(d->init(&host, &oau, &ctx, err, sizeof err), 0);
  ck_assert_str_eq(variant_full(ctx), want);
  d->fini(ctx);
  setenv("MI_CPU_MATMUL_ACT", "half", 1);
  ck_assert_int_ne(d->init(&host, &none, &ctx, err, sizeof err), 0);
  EXPECT(strstr(err, "MI_CPU_MATMUL_ACT=half is unknown") && !strchr(err, '\n'), "got '%s'", err);
  if (!h.avail[3]) {
    setenv("MI_CPU_MATMUL_ACT", "bf16", 1);
    ck_assert_int_ne(d->init(&host, &none, &ctx, err, sizeof err), 0);
    EXPECT(strstr(err, "MI_CPU_MATMUL_ACT=bf16 was requested") && strstr(err, h.why[3]),
           "got '%s'", err);
  }
  restore_env("MI_CPU_MATMUL_ACT", act0);
  restore_env("MI_CPU_ISA", isa0);
}
END_TEST

static Suite *cpu_suite(void) {
  Suite *s = suite_create("cpu_kernels");
  TCase *tc = mi_check_case(s, "kernels", 120, NULL, NULL);
  mi_check_add_loop(tc,
                    MI_CHECK_TESTS(test_matmul, test_rmsnorm, test_rope, test_attention,
                                   test_attention_causal, test_elementwise, test_embed, test_argmax,
                                   test_memory_streams_device, test_errors,
                                   test_concurrent_callers),
                    0, NCONF);
  mi_check_add(tc, MI_CHECK_TESTS(test_isa_selection, test_isa_env));
  tcase_add_loop_test(tc, test_matmul_bf16act, 0, 3);
  tcase_add_test(tc, test_matmul_act_option);
  return s;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mi_check_run(cpu_suite());
}
