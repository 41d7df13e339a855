/* What the tests of the CPU platform's quantized matmuls (test_cpu_q8_0,
 * test_cpu_quant) share: the variants they open one by one, activations
 * that reach every case of the quantization, and the activation scheme
 * written out as specified (cpu_q8_0.h), independently of the plugin.
 * Include after cpu_test_harness.h (EXPECT, rng_*, open_with). */
#ifndef MI_TESTS_CPU_Q8_ACT_TEST_H
#define MI_TESTS_CPU_Q8_ACT_TEST_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ISAS[] = {"generic", "avx2", "avx512", "avx512bf16"};
#define NISA 4

/* Opens ISA i with `threads`, the exact mode when exact; 0 when this host
 * cannot run it (said on stdout). The plugin's log line above the RUN line
 * names the quantized kernels the variant uses. */
static int open_isa(int i, const char *threads, int exact, plat *p) {
  mi_kv kv[] = {{"isa", ISAS[i]}, {"threads", threads}, {"matmul_act", exact ? "f32" : "auto"}};
  char why[256] = "";
  if (open_with(kv, 3, p, why, sizeof why) <= 0) {
    printf("SKIP isa=%s: not available here (%s)\n", ISAS[i], why);
    return 0;
  }
  printf("RUN isa=%s threads=%s%s\n", ISAS[i], threads, exact ? " matmul_act=f32" : "");
  return 1;
}

/* x [M, K]: blocks of varied magnitude (1e-3 .. 1e2), one of zeros, one
 * with a single outlier, one of values below 2^-100 (quantized to 0). */
static float *rand_x(int64_t M, int64_t K) {
  float *x = malloc((size_t)(M * K) * sizeof *x);
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < K / 32; b++) {
      float *xb = x + m * K + b * 32;
      const int kind = (int)((m * 7 + b) % 9);
      const double mag = pow(10.0, rng_unif(-3, 2));
      for (int i = 0; i < 32; i++)
        xb[i] = (float)(mag * rng_unif(-1, 1));
      if (kind == 3) memset(xb, 0, 32 * sizeof *xb);
      if (kind == 5) xb[(int)(rng_u64() % 32)] = (float)(mag * 300);
      if (kind == 7 && K > 32)
        for (int i = 0; i < 32; i++)
          xb[i] = (float)ldexp(rng_unif(-1, 1), -105);
    }
  return x;
}

/* The activation scheme, as specified: q[32], returns d. */
static float quant_block(int8_t *q, const float *x) {
  float amax = 0.0f;
  int bad = 0;
  for (int i = 0; i < 32; i++) {
    bad |= !isfinite(x[i]);
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
  }
  if (bad || amax < 0x1p-100f) {
    memset(q, 0, 32);
    return bad ? NAN : 0.0f;
  }
  const float d = amax / 127.0f, id = 1.0f / d;
  for (int i = 0; i < 32; i++) {
    const long r = lrintf(x[i] * id); /* round to nearest even */
    EXPECT(r >= -127 && r <= 127, "quantized %ld out of range", r);
    q[i] = (int8_t)r;
  }
  return d;
}

/* The references of each output of a quantized matmul y [M, N]. */
typedef struct refs {
  double *yq, *tq;  /* product of the quantized operands, its f32-rounding bound */
  double *y64, *ta; /* product of the unquantized x, the activation bound (+ tq) */
  double *mag;      /* Σ |x w| (the exact mode's bound) */
} refs;

/* Output at's references from its sums over the K inputs: yq, s =
 * Σ_b |d_x d_w| Σ_k |q_x q_w|, y64, ta (the activation bound alone), mag. */
static void refs_set(refs *r, size_t at, int64_t K, double yq, double s, double y64, double ta,
                     double mag) {
  r->yq[at] = yq;
  r->tq[at] = ((double)K / 32 + 16) * (FLT_EPSILON / 2) * s + 1e-37;
  r->y64[at] = y64;
  r->ta[at] = ta + r->tq[at];
  r->mag[at] = mag;
}

/* Fills output at = m N + o from row m of x (x[K], quantized here: qx[K],
 * block scales dx[K / 32]) and the weights in ctx, with refs_set. */
typedef void (*ref_row_fn)(const void *ctx, refs *r, size_t at, const float *x, const int8_t *qx,
                           const float *dx, int64_t o, int64_t K);

/* The references of y = x W^T for x [M, K]: each row of x quantized by the
 * scheme above, then row() for each output. */
static refs reference_of(const float *x, int64_t M, int64_t N, int64_t K, ref_row_fn row,
                         const void *ctx) {
  refs r;
  const size_t n = (size_t)(M * N);
  r.yq = calloc(n, sizeof(double));
  r.tq = calloc(n, sizeof(double));
  r.y64 = calloc(n, sizeof(double));
  r.ta = calloc(n, sizeof(double));
  r.mag = calloc(n, sizeof(double));
  int8_t *qx = malloc((size_t)K);
  float *dx = malloc((size_t)(K / 32) * sizeof *dx);
  for (int64_t m = 0; m < M; m++) {
    for (int64_t b = 0; b < K / 32; b++)
      dx[b] = quant_block(qx + b * 32, x + m * K + b * 32);
    for (int64_t o = 0; o < N; o++)
      row(ctx, &r, (size_t)(m * N + o), x + m * K, qx, dx, o, K);
  }
  free(qx);
  free(dx);
  return r;
}

/* y = x W^T (x [M, K], W [N, K] of type t) by the open platform: the call
 * succeeds, leaves x as it was, and a second call gives the same bits.
 * Returns y [M, N] (the caller frees it); `what` names the case in the
 * failure messages. */
static float *matmul_checked(plat *p, const float *x, const void *w, mi_dtype t, int64_t M,
                             int64_t N, int64_t K, const char *what) {
  float *y = malloc((size_t)(M * N) * sizeof *y), *y2 = malloc((size_t)(M * N) * sizeof *y2);
  float *x0 = malloc((size_t)(M * K) * sizeof *x0);
  memcpy(x0, x, (size_t)(M * K) * sizeof *x);
  for (int64_t i = 0; i < M * N; i++)
    y[i] = NAN;
  int rc = p->pi->matmul(p->ctx, NULL, y, x, w, t, M, N, K);
  EXPECT(rc == 0, "%s: %s", what, p->pi->last_error(p->ctx));
  EXPECT(memcmp(x, x0, (size_t)(M * K) * sizeof *x) == 0, "%s: x was modified", what);
  ck_assert_int_eq(p->pi->matmul(p->ctx, NULL, y2, x, w, t, M, N, K), 0);
  EXPECT(memcmp(y, y2, (size_t)(M * N) * sizeof *y) == 0, "%s: two calls differ", what);
  free(y2);
  free(x0);
  return y;
}

static void refs_free(refs *r) {
  free(r->yq);
  free(r->tq);
  free(r->y64);
  free(r->ta);
  free(r->mag);
}

#endif
