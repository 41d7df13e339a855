/* The CPU platform's prefill paths beyond the per-kernel conformance suite
 * (test_cpu_kernels.c), against float64 references or the SDK's scalar
 * converters, for every ISA variant this machine can run and 1, 2 and 3
 * threads (seed printed; MI_TEST_SEED replays):
 *  - matmul in the K-first loop order (x larger than MI_OUTER_X_L2 in
 *    cpu_avx2_pack.h): several K chunks, row blocks past MI_OUTER_MB, panel
 *    tails, the N and M splits; tolerance as in test_cpu_kernels.c,
 *    4·sqrt(K)·u·Σ|x·w|.
 *  - silu_mul over the whole f32 range (the vectorised e^x: overflow, the
 *    clamps, inf, NaN): 8u·|ref| as in test_cpu_kernels.c.
 *  - convert f32 -> f16/bf16 bit for bit as mi_f32_to_f16/bf16 on every
 *    class of value (NaNs with payloads, infinities, overflow boundaries,
 *    ties, subnormals, random bit patterns), through the parallel path,
 *    misaligned, and in place.
 *  - rope's cos/sin table kept between calls: repeated, changed, shortened
 *    positions, another theta or rot_dim, each against float64; two
 *    threads calling on one context.
 *  - attention for a prompt run as several prefill chunks (pos0 > 0, chunk
 *    edges off the tile and block edges), as a model calls it.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <float.h>
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

#define U (FLT_EPSILON / 2) /* f32 unit roundoff 2^-24 */

/* ---------------- opening (cpu_test_harness.h loads the plugin) ---------------- */

static const char *const ISAS[] = {"generic", "avx2", "avx512", "avx512bf16"};
static const char *const THREADS[] = {"1", "2", "3"};
#define NCONF 12 /* ISAS x THREADS */

/* Opens configuration i (ISA i/3, threads i%3); 0 when the ISA is not
 * available here (and says so). */
static int open_conf(int i, plat *p) {
  const char *isa = ISAS[i / 3], *thr = THREADS[i % 3];
  /* matmul_act=f32: the exact f32 tiles are what this file checks (on
   * avx512bf16 the default sends bf16 prefill matmuls to the
   * bf16-activation tiles, which test_cpu_kernels checks by their bound) */
  mi_kv kv[] = {{"isa", isa}, {"threads", thr}, {"matmul_act", "f32"}};
  char why[256] = "";
  if (open_with(kv, 3, p, why, sizeof why) <= 0) {
    printf("SKIP isa=%s threads=%s: not available here (%s)\n", isa, thr, why);
    return 0;
  }
  ck_assert_str_eq(p->pi->variant(p->ctx), isa);
  return 1;
}

/* ---------------- random data (seeded in cpu_test_harness.h) ---------------- */

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---------------- matmul, K-first order ---------------- */

/* Weights in dt with their exact values in ref: bf16 as the top half of an
 * f32, f16 from sign/exponent/mantissa fields decoded with ldexp (normal
 * values of magnitude 2^-8 .. 2), both independent of the SDK converters. */
static void *rand_weights(mi_dtype dt, size_t n, double *ref) {
  if (dt == MI_DTYPE_F32) {
    float *w = rand_f32(n, -1, 1);
    for (size_t i = 0; i < n; i++) ref[i] = w[i];
    return w;
  }
  uint16_t *w = malloc((n ? n : 1) * 2);
  for (size_t i = 0; i < n; i++) {
    if (dt == MI_DTYPE_BF16) {
      uint32_t u;
      float f = (float)rng_unif(-1, 1);
      memcpy(&u, &f, 4);
      u &= 0xffff0000u;
      ref[i] = bits_f32(u);
      w[i] = (uint16_t)(u >> 16);
    } else {
      uint16_t sign = (uint16_t)((rng_u64() & 1) << 15), man = (uint16_t)(rng_u64() & 0x3ff);
      int e = 7 + (int)(rng_u64() % 9); /* exponent field 7 .. 15 */
      w[i] = (uint16_t)(sign | (uint16_t)(e << 10) | man);
      ref[i] = (sign ? -1 : 1) * ldexp(1.0 + man / 1024.0, e - 15);
    }
  }
  return w;
}

static void check_matmul(plat *p, mi_dtype dt, int64_t M, int64_t N, int64_t K) {
  float *x = rand_f32((size_t)(M * K), -1, 1);
  double *wref = malloc((size_t)(N * K) * sizeof *wref);
  void *w = rand_weights(dt, (size_t)(N * K), wref);
  float *y = malloc((size_t)(M * N) * sizeof *y);
  for (int64_t i = 0; i < M * N; i++) y[i] = NAN;
  int rc = p->pi->matmul(p->ctx, NULL, y, x, w, dt, M, N, K);
  EXPECT(rc == 0, "matmul: %s", p->pi->last_error(p->ctx));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double t = (double)x[m * K + k] * wref[n * K + k];
        ref += t;
        mag += fabs(t);
      }
      double got = y[m * N + n], tol = 4.0 * sqrt((double)K) * U * mag + 1e-30;
      EXPECT(fabs(got - ref) <= tol, "matmul %s M=%ld N=%ld K=%ld: y[%ld,%ld] = %.9g want %.9g",
             mi_dtype_name(dt), (long)M, (long)N, (long)K, (long)m, (long)n, got, ref);
    }
  free(x);
  free(w);
  free(wref);
  free(y);
}

START_TEST(test_matmul_k_first) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(1, _i));
  /* M·K·4 above 384 KB: K outermost, blocks of 256 rows of x. {M, N, K}:
   * three K chunks with a 88-deep tail, a 6-column last panel; two row
   * blocks (the second 44 rows: 7 tiles + 2); a 76-deep K tail and N
   * around one 32-column panel; N below 16 per thread (the M split) with
   * three row blocks; and a 1-row last block. */
  static const int64_t shapes[][3] = {
      {200, 70, 600}, {300, 45, 400}, {97, 33, 1100}, {520, 17, 260}, {257, 40, 512}};
  static const mi_dtype dts[] = {MI_DTYPE_BF16, MI_DTYPE_F16, MI_DTYPE_F32};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    check_matmul(&p, dts[s % 3], shapes[s][0], shapes[s][1], shapes[s][2]);
  close_plat(&p);
}
END_TEST

/* ---------------- silu_mul over the whole range ---------------- */

START_TEST(test_silu_range) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(2, _i));
  static const float special[] = {0.0f,   -0.0f,   INFINITY, -INFINITY, NAN,     -NAN,
                                  88.7f,  88.73f,  -88.7f,   -88.73f,   -86.0f,  -86.01f,
                                  -89.0f, -89.01f, 86.0f,    89.5f,     -103.0f, -200.0f,
                                  1e-30f, -1e-30f, 1e-45f,   17.0f,     -17.0f,  FLT_MAX,
                                  -FLT_MAX};
  const size_t ns = sizeof special / sizeof special[0];
  static const int64_t lens[] = {1, 15, 16, 17, 33, 1000, 70001};
  for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
    const int64_t n = lens[c];
    float *g = rand_f32((size_t)n, -110, 110), *u = rand_f32((size_t)n, -3, 3);
    for (int64_t i = 0; i < n; i += 7) g[i] = special[(size_t)(i / 7) % ns];
    for (int64_t i = 3; i < n; i += 11) g[i] = (float)rng_unif(-20, 20);
    float *y = malloc((size_t)n * 4);
    ck_assert_int_eq(p.pi->silu_mul(p.ctx, NULL, y, g, u, n), 0);
    for (int64_t i = 0; i < n; i++) {
      double gd = g[i], ref = gd / (1.0 + exp(-gd)) * u[i];
      if (isnan(ref))
        EXPECT(isnan(y[i]), "silu_mul g=%g u=%g: %g, want NaN", gd, (double)u[i], (double)y[i]);
      else if (fabs(ref) > FLT_MAX) /* overflows f32, as the formula in f32 does */
        EXPECT(isinf(y[i]) && (y[i] > 0) == (ref > 0), "silu_mul g=%g u=%g: %g, want %g", gd,
               (double)u[i], (double)y[i], ref);
      else /* where e^-g overflows f32 (g < -88.72) the formula's -0 is as right */
        EXPECT(fabs(y[i] - ref) <= 8 * U * fabs(ref) + 1e-37 || (exp(-gd) > FLT_MAX && y[i] == 0),
               "silu_mul n=%ld g=%.9g u=%.9g: %.9g want %.9g", (long)n, gd, (double)u[i],
               (double)y[i], ref);
    }
    free(g);
    free(u);
    free(y);
  }
  close_plat(&p);
}
END_TEST

/* ---------------- convert, bit for bit ---------------- */

static uint16_t sdk_half(float f, mi_dtype dt) {
  return dt == MI_DTYPE_F16 ? mi_f32_to_f16(f) : mi_f32_to_bf16(f);
}

START_TEST(test_convert_exact) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(3, _i));
  static const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* zeros, infinities */
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, /* quiet and signalling NaNs */
      0x7fbfffffu, 0x7fffffffu, 0xffffffffu, 0x7fc0ffffu, /* NaN payloads */
      0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, /* 65504, just below/at/above 65520 */
      0x47800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, /* 65536, FLT_MAX, bf16 overflow tie */
      0x33800000u, 0x33000000u, 0x33000001u, 0x337fffffu, /* f16 subnormal min, half of it, ties */
      0x38800000u, 0x387fe000u, 0x387ff000u, 0x00000001u, /* f16 normal min, subnormal tie, f32 denormal */
      0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f80ffffu, /* bf16 ties to even, above, carry */
      0x3f801000u, 0x3f803000u, 0x3f802000u, 0x3f806000u, /* f16 ties */
  };
  const size_t ns = sizeof special / sizeof special[0];
  static const int64_t lens[] = {1, 7, 8, 15, 16, 17, 37, 1000, 70003};
  static const mi_dtype dts[] = {MI_DTYPE_F16, MI_DTYPE_BF16};
  for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++)
    for (int d = 0; d < 2; d++)
      for (int off = 0; off <= 1; off++) { /* off: misaligned source and destination */
        const int64_t n = lens[c];
        float *src = malloc((size_t)(n + 1) * 4);
        uint16_t *h = malloc((size_t)(n + 1) * 2);
        float *back = malloc((size_t)(n + 1) * 4);
        for (int64_t i = 0; i <= n; i++) {
          uint64_t r = rng_u64();
          /* a third random bits, a third specials, a third ordinary values */
          src[i] = r % 3 == 0   ? bits_f32((uint32_t)(r >> 32))
                   : r % 3 == 1 ? bits_f32(special[(r >> 8) % ns])
                                : (float)rng_unif(-70000, 70000) * (float)ldexp(1.0, (int)(r >> 40) % 40 - 30);
        }
        ck_assert_int_eq(p.pi->convert(p.ctx, NULL, h + off, dts[d], src + off, MI_DTYPE_F32, n), 0);
        for (int64_t i = 0; i < n; i++) {
          uint32_t ub;
          memcpy(&ub, &src[off + i], 4);
          EXPECT(h[off + i] == sdk_half(src[off + i], dts[d]),
                 "convert f32->%s n=%ld [%ld]: %#x -> %#x, want %#x", mi_dtype_name(dts[d]),
                 (long)n, (long)i, ub, h[off + i], sdk_half(src[off + i], dts[d]));
        }
        /* and back: exact widening */
        ck_assert_int_eq(p.pi->convert(p.ctx, NULL, back + off, MI_DTYPE_F32, h + off, dts[d], n), 0);
        for (int64_t i = 0; i < n; i++) {
          float want = dts[d] == MI_DTYPE_F16 ? mi_f16_to_f32(h[off + i]) : mi_bf16_to_f32(h[off + i]);
          EXPECT(memcmp(&back[off + i], &want, 4) == 0, "convert %s->f32 [%ld]",
                 mi_dtype_name(dts[d]), (long)i);
        }
        /* in place (the halves written over the floats they come from) */
        uint16_t *want = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) want[i] = sdk_half(src[i], dts[d]);
        ck_assert_int_eq(p.pi->convert(p.ctx, NULL, src, dts[d], src, MI_DTYPE_F32, n), 0);
        EXPECT(memcmp(src, want, (size_t)n * 2) == 0, "convert f32->%s in place, n=%ld",
               mi_dtype_name(dts[d]), (long)n);
        free(want);
        free(src);
        free(h);
        free(back);
      }
  close_plat(&p);
}
END_TEST

/* ---------------- rope, the kept cos/sin table ---------------- */

typedef struct rope_case {
  int64_t T, H, Dh, rot;
  float theta;
  int32_t pos_base; /* positions pos_base + t, except as changed below */
  int shuffle;      /* 1: random positions (a batch of decode rows) */
} rope_case;

/* Runs one rope call on fresh random x and checks it against float64. */
static void check_rope(plat *p, const rope_case *c, uint64_t pos_seed) {
  const int64_t T = c->T, H = c->H, Dh = c->Dh, rot = c->rot, half = rot / 2;
  const int64_t ts = H * Dh, n = T * ts;
  float *x = rand_f32((size_t)n, -2, 2), *x0 = malloc((size_t)n * 4);
  memcpy(x0, x, (size_t)n * 4);
  int32_t *pos = malloc((size_t)T * 4);
  uint64_t keep = rng_state;
  rng_state = pos_seed;
  for (int64_t t = 0; t < T; t++)
    pos[t] = c->shuffle ? (int32_t)(rng_u64() % 40000) : c->pos_base + (int32_t)t;
  rng_state = keep;
  int rc = p->pi->rope(p->ctx, NULL, x, pos, T, H, ts, Dh, rot, c->theta);
  EXPECT(rc == 0, "rope: %s", p->pi->last_error(p->ctx));
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++) {
      const float *a = x0 + t * ts + h * Dh, *g = x + t * ts + h * Dh;
      for (int64_t i = 0; i < half; i++) {
        double ang = (double)pos[t] * pow((double)c->theta, -2.0 * (double)i / (double)rot);
        double r0 = a[i] * cos(ang) - a[i + half] * sin(ang);
        double r1 = a[i + half] * cos(ang) + a[i] * sin(ang);
        double tol = 6 * U * (fabs(a[i]) + fabs(a[i + half])) + 1e-30;
        EXPECT(fabs(g[i] - r0) <= tol && fabs(g[i + half] - r1) <= tol,
               "rope T=%ld rot=%ld theta=%g pos=%d i=%ld: (%.9g, %.9g) want (%.9g, %.9g)",
               (long)T, (long)rot, (double)c->theta, pos[t], (long)i, (double)g[i],
               (double)g[i + half], r0, r1);
      }
      for (int64_t i = rot; i < Dh; i++)
        EXPECT(memcmp(&g[i], &a[i], 4) == 0, "rope changed channel %ld >= rot_dim", (long)i);
    }
  free(x);
  free(x0);
  free(pos);
}

typedef struct rope_thread {
  plat *p;
  int32_t base;
  int ok;
} rope_thread;

/* One of two threads sharing a context: its own positions, 40 calls, each
 * result bit for bit the same as the first (computed alone). */
static void *rope_worker(void *arg) {
  rope_thread *rt = arg;
  enum { T = 24, H = 3, D = 32 };
  static __thread float x[T * H * D], want[T * H * D];
  int32_t pos[T];
  for (int t = 0; t < T; t++) pos[t] = rt->base + t * 3;
  rt->ok = 1;
  for (int r = 0; r < 40; r++) {
    for (int i = 0; i < T * H * D; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    if (rt->p->pi->rope(rt->p->ctx, NULL, x, pos, T, H, H * D, D, D, 1e6f) != 0) rt->ok = 0;
    if (r == 0)
      memcpy(want, x, sizeof x);
    else if (memcmp(want, x, sizeof x) != 0)
      rt->ok = 0;
  }
  return NULL;
}

START_TEST(test_rope_kept_table) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(4, _i));
  /* In order on one context: each call differs from the one before in one
   * way the table must notice (or repeats it exactly). */
  static const rope_case seq[] = {
      {40, 4, 64, 64, 1e6f, 0, 0},    {40, 4, 64, 64, 1e6f, 0, 0}, /* the same again */
      {40, 2, 64, 64, 1e6f, 40, 0},                                /* next chunk's positions */
      {40, 2, 64, 64, 1e4f, 40, 0},                                /* another theta */
      {40, 2, 64, 32, 1e4f, 40, 0},                                /* partial rotary */
      {39, 2, 64, 32, 1e4f, 40, 0},                                /* a shorter prefix */
      {1, 16, 128, 128, 1e6f, 3000, 0}, {1, 16, 128, 128, 1e6f, 3001, 0}, /* decode steps */
      {300, 2, 16, 16, 1e6f, 0, 1},   {300, 2, 16, 16, 1e6f, 0, 1}, /* scattered positions */
      {300, 2, 16, 16, 1e6f, 0, 2},                                  /* other scattered ones */
      {700, 1, 4, 2, 1e6f, 5, 0}, /* more positions, fewer pairs: the table's two sizes */
      {701, 1, 4, 2, 1e6f, 5, 0},
  };
  for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++)
    check_rope(&p, &seq[i], 0x1234u + (uint64_t)seq[i].shuffle);
  pthread_t th[2];
  rope_thread rt[2] = {{&p, 5, 0}, {&p, 9000, 0}};
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, rope_worker, &rt[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  EXPECT(rt[0].ok && rt[1].ok, "rope from two threads on one context: results differ");
  close_plat(&p);
}
END_TEST

/* ---------------- attention, a prompt in several chunks ---------------- */

/* Float64 causal attention for query row (t, h) of a chunk at pos0. */
static void attn_ref(const float *q, const float *kc, const float *vc, int64_t Hq, int64_t Hkv,
                     int64_t D, int64_t pos0, float scale, int64_t t, int64_t h, double *out,
                     double *tol) {
  const int64_t kvh = h / (Hq / Hkv), L = pos0 + t + 1;
  const float *qh = q + (t * Hq + h) * D;
  double *s = malloc((size_t)L * sizeof *s), smax = -INFINITY, sabs = 0, vmax = 0, sum = 0;
  for (int64_t j = 0; j < L; j++) {
    const float *kr = kc + (j * Hkv + kvh) * D;
    double acc = 0, mag = 0;
    for (int64_t d = 0; d < D; d++) {
      acc += (double)qh[d] * kr[d];
      mag += fabs((double)qh[d] * kr[d]);
    }
    s[j] = acc * scale;
    smax = s[j] > smax ? s[j] : smax;
    sabs = mag * fabs(scale) > sabs ? mag * fabs(scale) : sabs;
  }
  for (int64_t j = 0; j < L; j++) sum += s[j] = exp(s[j] - smax);
  for (int64_t d = 0; d < D; d++) out[d] = 0;
  for (int64_t j = 0; j < L; j++)
    for (int64_t d = 0; d < D; d++) {
      const double v = vc[(j * Hkv + kvh) * D + d];
      out[d] += s[j] / sum * v;
      vmax = fabs(v) > vmax ? fabs(v) : vmax;
    }
  /* as test_cpu_kernels.c: dot-product error of the scores, exp and the
   * max, the weighted sum of L rows */
  const double ds = (double)(D + 8) * U * sabs;
  *tol = 2 * (2 * ds + 4 * U * sabs + (double)(L + 16) * U) * vmax + 1e-30;
  free(s);
}

START_TEST(test_attention_chunks) {
  plat p;
  if (!open_conf(_i, &p)) return;
  rng_seed(seed_for(5, _i));
  /* G = 2 (a tile mixes two heads of a position), D = 32; the prompt of
   * 557 positions as chunks of 1 (a decode-shaped first call), 150, 300
   * (several tile tasks per KV head) and 106: chunk edges off the 8/16-row
   * tiles and the 64-key blocks. The cache holds the whole prompt; rows
   * past a chunk's last position are NaN while it runs (never read). */
  const int64_t Hq = 4, Hkv = 2, D = 32, P = 557, chunks[] = {1, 150, 300, 106};
  const float scale = 0.177f;
  const size_t kvn = (size_t)(P * Hkv * D);
  float *kall = rand_f32(kvn, -1.5, 1.5), *vall = rand_f32(kvn, -1, 1);
  float *q = rand_f32((size_t)(P * Hq * D), -1.5, 1.5);
  static const mi_dtype kvts[] = {MI_DTYPE_F16, MI_DTYPE_F32};
  for (int kt = 0; kt < 2; kt++) {
    const mi_dtype kvt = kvts[kt];
    const size_t es = mi_dtype_size(kvt);
    /* the cache in kvt; the f32 copies hold exactly the values it holds */
    float *kc = malloc(kvn * 4), *vc = malloc(kvn * 4);
    void *kh = malloc(kvn * es), *vh = malloc(kvn * es);
    for (size_t i = 0; i < kvn; i++) {
      if (kvt == MI_DTYPE_F16) {
        ((uint16_t *)kh)[i] = mi_f32_to_f16(kall[i]);
        ((uint16_t *)vh)[i] = mi_f32_to_f16(vall[i]);
        kc[i] = mi_f16_to_f32(((uint16_t *)kh)[i]);
        vc[i] = mi_f16_to_f32(((uint16_t *)vh)[i]);
      } else {
        ((float *)kh)[i] = kc[i] = kall[i];
        ((float *)vh)[i] = vc[i] = vall[i];
      }
    }
    void *kpo = malloc(kvn * es), *vpo = malloc(kvn * es); /* poisoned copies */
    double ref[32];
    int64_t pos0 = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
      const int64_t T = chunks[c], end = (pos0 + T) * Hkv * D;
      memcpy(kpo, kh, kvn * es);
      memcpy(vpo, vh, kvn * es);
      for (size_t i = (size_t)end; i < kvn; i++) {
        if (kvt == MI_DTYPE_F16) {
          ((uint16_t *)kpo)[i] = ((uint16_t *)vpo)[i] = 0x7e00; /* NaN */
        } else {
          ((float *)kpo)[i] = ((float *)vpo)[i] = NAN;
        }
      }
      float *out = malloc((size_t)(T * Hq * D) * 4);
      const float *qc = q + pos0 * Hq * D;
      int rc = p.pi->attention(p.ctx, NULL, out, qc, kpo, vpo, kvt, T, Hq, Hkv, D, pos0, scale);
      EXPECT(rc == 0, "attention: %s", p.pi->last_error(p.ctx));
      for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
          double tol;
          attn_ref(qc, kc, vc, Hq, Hkv, D, pos0, scale, t, h, ref, &tol);
          for (int64_t d = 0; d < D; d++) {
            const double got = out[(t * Hq + h) * D + d];
            EXPECT(isfinite(got) && fabs(got - ref[d]) <= tol,
                   "attention %s chunk %zu (pos0=%ld T=%ld): out[%ld,%ld,%ld] = %.9g want %.9g "
                   "(tol %.3g)",
                   mi_dtype_name(kvt), c, (long)pos0, (long)T, (long)t, (long)h, (long)d, got,
                   ref[d], tol);
          }
        }
      free(out);
      pos0 += T;
    }
    free(kc);
    free(vc);
    free(kh);
    free(vh);
    free(kpo);
    free(vpo);
  }
  free(kall);
  free(vall);
  free(q);
  close_plat(&p);
}
END_TEST

static Suite *prefill_suite(void) {
  return mi_check_loop_suite("cpu_prefill", "prefill", 120,
                             MI_CHECK_TESTS(test_matmul_k_first, test_silu_range,
                                            test_convert_exact, test_rope_kept_table,
                                            test_attention_chunks),
                             0, NCONF);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mi_check_run(prefill_suite());
}
