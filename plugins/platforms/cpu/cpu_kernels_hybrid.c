/* The blocks of gated-DeltaNet hybrids (ABI 1.4, sdk/include/mi/platform.h):
 * copy2d, l2norm, sigmoid_mul, conv1d_causal, deltanet_gates,
 * gated_delta_rule and rmsnorm_gated.
 *
 * Everything but gated_delta_rule is elementwise or per row and bound by
 * memory; those loops are plain C the compiler vectorises, split over the
 * pool when large. gated_delta_rule is the layer's compute: one value head
 * per task, and above GDR_RECURRENT_MAX_T tokens the chunked form (below) so
 * prefill runs as small matrix products through the variant's matmul_tile
 * instead of T rank-1 updates of the state. One or two tokens (decode) use
 * the recurrent form, which reads and writes the state twice per token and
 * is bound by that traffic.
 *
 * Every entry point checks shapes, NULLs and the aliasing the contract
 * forbids before touching memory, and fails with "cpu: <kernel>: ..." */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "cpu_internal.h"

/* Below this many elements a kernel runs on the calling thread: waking the
 * workers costs a few microseconds. */
#define HY_PAR_MIN (1 << 16)

/* Tokens per chunk of the chunked delta rule: 64 keeps a chunk's
 * C x C and C x Dv blocks in L2 for Dk = Dv = 128 and gives matmul_tile
 * enough rows for its register tiles; the triangular part grows as C². */
#define GDR_CHUNK 64

/* Up to this many tokens a call takes the recurrent form, token after token
 * with the head's state in cache: the chunked form's fixed cost per call
 * and head (the state transposed in and out, four small products, the
 * workspace) is worth it only over enough tokens. Measured on the ~1B
 * hybrid's heads (Dk = Dv = 128, cpu_bench gdr): see
 * plugins/platforms/cpu/README.md. */
#ifndef GDR_RECURRENT_MAX_T
#define GDR_RECURRENT_MAX_T 2
#endif

#define CHECK_PTR(c, p, kern, what)                                                                \
  do {                                                                                             \
    if (!(p)) return cpu_fail((c), "%s: %s is NULL", (kern), (what));                              \
  } while (0)

/* Do [a, a + an) and [b, b + bn) (in floats) share a byte? */
static int overlap(const float *a, int64_t an, const float *b, int64_t bn) {
  if (!a || !b || an <= 0 || bn <= 0) return 0;
  uintptr_t a0 = (uintptr_t)a, a1 = a0 + (uintptr_t)an * sizeof(float);
  uintptr_t b0 = (uintptr_t)b, b1 = b0 + (uintptr_t)bn * sizeof(float);
  return a0 < b1 && b0 < a1;
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---------------- copy2d ---------------- */

typedef struct copy_args {
  float *y;
  const float *x;
  int64_t ys, xs, n;
} copy_args;

static void copy_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const copy_args *a = arg;
  for (int64_t r = b; r < e; r++)
    memcpy(a->y + r * a->ys, a->x + r * a->xs, (size_t)a->n * sizeof(float));
}

int cpu_copy2d(void *ctx, mi_stream *s, float *y, int64_t y_stride, const float *x,
               int64_t x_stride, int64_t rows, int64_t n) {
  (void)s;
  cpu_ctx *c = ctx;
  if (rows < 0 || n < 0)
    return cpu_fail(c, "copy2d: negative shape rows=%lld n=%lld", (long long)rows, (long long)n);
  if (rows == 0 || n == 0) return 0;
  CHECK_PTR(c, y, "copy2d", "y");
  CHECK_PTR(c, x, "copy2d", "x");
  /* Rows of y must not overlap each other (the result would depend on the
   * order); x rows may repeat (x_stride 0 broadcasts one row). */
  if (x_stride < 0 || (rows > 1 && y_stride < n))
    return cpu_fail(c, "copy2d: bad strides y_stride=%lld x_stride=%lld for n=%lld (need y_stride >= n, x_stride >= 0)",
                    (long long)y_stride, (long long)x_stride, (long long)n);
  if (overlap(y, (rows - 1) * y_stride + n, x, (rows - 1) * x_stride + n))
    return cpu_fail(c, "copy2d: y and x overlap");
  copy_args a = {y, x, y_stride, x_stride, n};
  if (rows > 1 && rows * n >= HY_PAR_MIN)
    cpu_parallel_for(c->pool, rows, (4096 + n - 1) / n, copy_task, &a);
  else
    copy_task(&a, 0, rows, 0);
  return 0;
}

/* ---------------- l2norm, rmsnorm_gated ---------------- */

typedef struct rownorm_args {
  const cpu_kernel_set *k;
  float *y;
  const float *x, *w, *z;
  int64_t dim;
  float eps;
  int gated; /* 0 l2norm, 1 rmsnorm_gated */
} rownorm_args;

static void rownorm_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const rownorm_args *a = arg;
  const int64_t dim = a->dim;
  for (int64_t r = b; r < e; r++) {
    const float *xr = a->x + r * dim;
    float *yr = a->y + r * dim;
    /* The sum of squares comes first, so y may equal x. */
    double ss = (double)a->k->dot(xr, xr, dim);
    if (!a->gated) {
      const float inv = (float)(1.0 / sqrt(ss + (double)a->eps));
      for (int64_t i = 0; i < dim; i++) yr[i] = xr[i] * inv;
    } else {
      const float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)a->eps));
      const float *zr = a->z + r * dim;
      /* silu(z) = z / (1 + e^-z): for z -> -inf the quotient is -0, the limit. */
      for (int64_t i = 0; i < dim; i++) {
        const float zi = zr[i];
        yr[i] = xr[i] * inv * a->w[i] * (zi / (1.0f + expf(-zi)));
      }
    }
  }
}

static int rownorm_run(cpu_ctx *c, rownorm_args *a, int64_t rows) {
  if (rows > 1 && rows * a->dim >= HY_PAR_MIN / 4) {
    int64_t grain = 4096 / a->dim > 1 ? 4096 / a->dim : 1;
    cpu_parallel_for(c->pool, rows, grain, rownorm_task, a);
  } else {
    rownorm_task(a, 0, rows, 0);
  }
  return 0;
}

int cpu_l2norm(void *ctx, mi_stream *s, float *y, const float *x, int64_t rows, int64_t dim,
               float eps) {
  (void)s;
  cpu_ctx *c = ctx;
  int go = cpu_check_rows(c, "l2norm", rows, dim, eps, y, x);
  if (go <= 0) return go;
  if (y != x && overlap(y, rows * dim, x, rows * dim))
    return cpu_fail(c, "l2norm: y overlaps x without being equal to it");
  rownorm_args a = {c->k, y, x, NULL, NULL, dim, eps, 0};
  return rownorm_run(c, &a, rows);
}

int cpu_rmsnorm_gated(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                      const float *z, int64_t rows, int64_t dim, float eps) {
  (void)s;
  cpu_ctx *c = ctx;
  int go = cpu_check_rows(c, "rmsnorm_gated", rows, dim, eps, y, x);
  if (go <= 0) return go;
  CHECK_PTR(c, w, "rmsnorm_gated", "w");
  CHECK_PTR(c, z, "rmsnorm_gated", "z");
  if (y != x && overlap(y, rows * dim, x, rows * dim))
    return cpu_fail(c, "rmsnorm_gated: y overlaps x without being equal to it");
  rownorm_args a = {c->k, y, x, w, z, dim, eps, 1};
  return rownorm_run(c, &a, rows);
}

/* ---------------- sigmoid_mul ---------------- */

typedef struct sm_args {
  float *y;
  const float *x, *g;
} sm_args;

static void sm_task(void *arg, int64_t lo, int64_t hi, int tid) {
  (void)tid;
  const sm_args *a = arg;
  /* x / (1 + e^-g): e^-g = inf for g -> -inf gives ±0, the limit. */
  for (int64_t i = lo; i < hi; i++) a->y[i] = a->x[i] / (1.0f + expf(-a->g[i]));
}

int cpu_sigmoid_mul(void *ctx, mi_stream *s, float *y, const float *x, const float *g,
                    int64_t n) {
  (void)s;
  cpu_ctx *c = ctx;
  int go = cpu_check_ew(c, "sigmoid_mul", n, y, x, "x", g, "g");
  if (go <= 0) return go;
  sm_args a = {y, x, g};
  if (n >= HY_PAR_MIN)
    cpu_parallel_for(c->pool, n, 4096, sm_task, &a);
  else
    sm_task(&a, 0, n, 0);
  return 0;
}

/* ---------------- conv1d_causal ---------------- */

/* Channels per block: the block's taps are transposed to [K][CB] on the
 * stack so the inner loop runs over contiguous channels. */
#define CONV_CB 256
#define CONV_KMAX 16

typedef struct conv_args {
  float *y;
  const float *x, *w;
  float *state;
  int64_t T, C, K;
  int silu;
} conv_args;

/* Channels [c0, c1): every output of those channels, then those channels'
 * state. Channels are independent, so tasks never touch each other's state. */
static void conv_task(void *arg, int64_t c0, int64_t c1, int tid) {
  (void)tid;
  const conv_args *a = arg;
  const int64_t T = a->T, C = a->C, K = a->K;
  float wt[CONV_KMAX * CONV_CB];
  for (int64_t cb = c0; cb < c1; cb += CONV_CB) {
    const int64_t nc = c1 - cb < CONV_CB ? c1 - cb : CONV_CB;
    for (int64_t j = 0; j < K; j++)
      for (int64_t c = 0; c < nc; c++) wt[j * CONV_CB + c] = a->w[(cb + c) * K + j];
    for (int64_t t = 0; t < T; t++) {
      float *yr = a->y + t * C + cb;
      for (int64_t c = 0; c < nc; c++) yr[c] = 0.0f;
      /* row t + j of xx = [state; x]: a state row while t + j < K - 1 */
      for (int64_t j = 0; j < K; j++) {
        const int64_t r = t + j;
        const float *xr = r < K - 1 ? a->state + r * C + cb : a->x + (r - (K - 1)) * C + cb;
        const float *wj = wt + j * CONV_CB;
        for (int64_t c = 0; c < nc; c++) yr[c] += wj[c] * xr[c];
      }
      if (a->silu)
        for (int64_t c = 0; c < nc; c++) yr[c] = yr[c] / (1.0f + expf(-yr[c]));
    }
    /* state = the last K-1 rows of xx. Row r takes xx row T + r, which is
     * an older state row only when T + r < K - 1; it lies above r, so
     * ascending r reads it before it is overwritten. */
    for (int64_t r = 0; r < K - 1; r++) {
      const int64_t src = T + r;
      float *sr = a->state + r * C + cb;
      const float *from = src < K - 1 ? a->state + src * C + cb : a->x + (src - (K - 1)) * C + cb;
      memcpy(sr, from, (size_t)nc * sizeof(float));
    }
  }
}

/* The same with K above CONV_KMAX (no model has such a kernel; kept so the
 * contract holds for any K): taps read straight from w. */
static void conv_task_wide(void *arg, int64_t c0, int64_t c1, int tid) {
  (void)tid;
  const conv_args *a = arg;
  const int64_t T = a->T, C = a->C, K = a->K;
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = c0; c < c1; c++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; j++) {
        const int64_t r = t + j;
        const float xv = r < K - 1 ? a->state[r * C + c] : a->x[(r - (K - 1)) * C + c];
        acc += a->w[c * K + j] * xv;
      }
      a->y[t * C + c] = a->silu ? acc / (1.0f + expf(-acc)) : acc;
    }
  for (int64_t r = 0; r < K - 1; r++) {
    const int64_t src = T + r;
    for (int64_t c = c0; c < c1; c++)
      a->state[r * C + c] = src < K - 1 ? a->state[src * C + c] : a->x[(src - (K - 1)) * C + c];
  }
}

int cpu_conv1d_causal(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                      float *state, int64_t T, int64_t C, int64_t K, int silu) {
  (void)s;
  cpu_ctx *c = ctx;
  if (T < 0 || C <= 0 || K <= 0)
    return cpu_fail(c, "conv1d_causal: bad shape T=%lld C=%lld K=%lld (need T >= 0, C > 0, K > 0)",
                    (long long)T, (long long)C, (long long)K);
  if (T == 0) return 0;
  CHECK_PTR(c, y, "conv1d_causal", "y");
  CHECK_PTR(c, x, "conv1d_causal", "x");
  CHECK_PTR(c, w, "conv1d_causal", "w");
  if (K > 1) CHECK_PTR(c, state, "conv1d_causal", "state");
  if (overlap(y, T * C, x, T * C)) return cpu_fail(c, "conv1d_causal: y overlaps x");
  if (overlap(y, T * C, state, (K - 1) * C)) return cpu_fail(c, "conv1d_causal: y overlaps state");
  if (overlap(x, T * C, state, (K - 1) * C)) return cpu_fail(c, "conv1d_causal: x overlaps state");
  conv_args a = {y, x, w, state, T, C, K, silu};
  cpu_task_fn fn = K <= CONV_KMAX ? conv_task : conv_task_wide;
  if (C > 64 && T * C * K >= HY_PAR_MIN)
    cpu_parallel_for(c->pool, C, 64, fn, &a);
  else
    fn(&a, 0, C, 0);
  return 0;
}

/* ---------------- deltanet_gates ---------------- */

typedef struct gates_args {
  float *beta, *g;
  const float *b, *a, *a_log, *dt_bias;
  int64_t H;
} gates_args;

static void gates_task(void *arg, int64_t lo, int64_t hi, int tid) {
  (void)tid;
  const gates_args *p = arg;
  for (int64_t i = lo; i < hi; i++) {
    const int64_t h = i % p->H;
    const float u = p->a[i] + p->dt_bias[h];
    /* softplus(u) = log(1 + e^u): above 20, e^-u < 2e-9 is below f32's
     * resolution of u, and e^u would overflow near 89. */
    const float sp = u > 20.0f ? u : log1pf(expf(u));
    p->g[i] = -expf(p->a_log[h]) * sp;
    p->beta[i] = sigmoidf_(p->b[i]);
  }
}

int cpu_deltanet_gates(void *ctx, mi_stream *s, float *beta, float *g, const float *b,
                       const float *a, const float *a_log, const float *dt_bias, int64_t T,
                       int64_t H) {
  (void)s;
  cpu_ctx *c = ctx;
  if (T < 0 || H <= 0)
    return cpu_fail(c, "deltanet_gates: bad shape T=%lld H=%lld (need T >= 0, H > 0)",
                    (long long)T, (long long)H);
  if (T == 0) return 0;
  CHECK_PTR(c, beta, "deltanet_gates", "beta");
  CHECK_PTR(c, g, "deltanet_gates", "g");
  CHECK_PTR(c, b, "deltanet_gates", "b");
  CHECK_PTR(c, a, "deltanet_gates", "a");
  CHECK_PTR(c, a_log, "deltanet_gates", "a_log");
  CHECK_PTR(c, dt_bias, "deltanet_gates", "dt_bias");
  if (overlap(beta, T * H, g, T * H)) return cpu_fail(c, "deltanet_gates: beta overlaps g");
  gates_args p = {beta, g, b, a, a_log, dt_bias, H};
  if (T * H >= HY_PAR_MIN)
    cpu_parallel_for(c->pool, T * H, 4096, gates_task, &p);
  else
    gates_task(&p, 0, T * H, 0);
  return 0;
}

/* ---------------- gated_delta_rule ----------------
 *
 * Recurrent form (T <= GDR_RECURRENT_MAX_T, and the definition): per token, with e = e^g,
 *   δ = beta · (v − e · S_oldᵀ k);  S ← e · S + k ⊗ δ;  o = Sᵀ q,
 * two passes over S [Dk, Dv], all with the variant's vector loops: one
 * reads it for S_oldᵀ k (four rows at a time), one rewrites each row and
 * accumulates o from the new row while it is in L1.
 *
 * Chunked form (longer calls; docs/hybrid.md "The chunked form"): a chunk of C
 * tokens with cumulative log decays G_i = g_0 + ... + g_i and initial state
 * S₀ (kept transposed, St = S₀ᵀ [Dv, Dk], for the chunk's whole life in the
 * head so the products below are matmul_tile's y = x · wᵀ):
 *   SK = K · S₀, SQ = Q · S₀            [C, Dv]   (x = K or Q, w = St)
 *   KK = K · Kᵀ, QK = Q · Kᵀ            [C, C]
 *   δ_i = beta_i (v_i − e^{G_i} SK_i) − Σ_{j<i} beta_i e^{G_i−G_j} KK_ij δ_j
 *                                       (forward substitution, row by row)
 *   o_i = e^{G_i} SQ_i + Σ_{j<=i} e^{G_i−G_j} QK_ij δ_j
 *                                       (x = the decayed, masked QK, w = Δᵀ [Dv, C])
 *   S   = e^{G_C} S₀ + Σ_j e^{G_C−G_j} k_j ⊗ δ_j  (x = Δᵀ, w = K'ᵀ [Dk, C])
 * Every exponent is G_i − G_j with j <= i, or G_i itself: a sum of log
 * decays <= 0, so no e^(+large) is ever formed (strong decays underflow to
 * 0, which is the right limit). */

typedef struct gdr_args {
  const cpu_kernel_set *k;
  float *o;
  const float *q, *kk, *v, *g, *beta;
  float *state;
  int64_t T, Hk, Hv, Dk, Dv, chunk;
  float *ws;        /* per-thread workspace, ws_floats each */
  int64_t ws_floats;
} gdr_args;

/* y[0..n) = Σ_{m < cnt} c[m] · x[m·stride + 0..n), added to y, four rows at a time. */
static void axpy_rows(const cpu_kernel_set *K, float *y, const float *c, const float *x,
                      int64_t stride, int64_t cnt, int64_t n) {
  int64_t m = 0;
  for (; m + 4 <= cnt; m += 4) K->axpy4(y, c + m, x + m * stride, stride, n);
  for (; m < cnt; m++) K->axpy(y, c[m], x + m * stride, n);
}

static void gdr_recurrent_head(const gdr_args *a, int64_t h, float *ws) {
  const cpu_kernel_set *K = a->k;
  const int64_t Dk = a->Dk, Dv = a->Dv, Hk = a->Hk, Hv = a->Hv, kh = h / (Hv / Hk);
  float *S = a->state + h * Dk * Dv, *kv = ws;
  for (int64_t t = 0; t < a->T; t++) {
    const float *kt = a->kk + (t * Hk + kh) * Dk, *qt = a->q + (t * Hk + kh) * Dk;
    const float *vt = a->v + (t * Hv + h) * Dv;
    float *ot = a->o + (t * Hv + h) * Dv;
    const float e = expf(a->g[t * Hv + h]), b = a->beta[t * Hv + h];
    for (int64_t j = 0; j < Dv; j++) kv[j] = 0.0f, ot[j] = 0.0f;
    axpy_rows(K, kv, kt, S, Dv, Dk, Dv); /* S_oldᵀ k, four rows at a time */
    for (int64_t j = 0; j < Dv; j++) kv[j] = b * (vt[j] - e * kv[j]); /* δ */
    /* rewrite each row and take its share of o while it is in L1 */
    for (int64_t i = 0; i < Dk; i++) {
      float *row = S + i * Dv;
      K->scal(row, e, Dv);
      K->axpy(row, kt[i], kv, Dv);
      K->axpy(ot, qt[i], row, Dv);
    }
  }
}

/* dst[j·ldd + i] = src[i·lds + j] for i < rows, j < cols, in TB x TB tiles:
 * a plain element-by-element transpose of a 128 x 128 state writes 128
 * floats 512 bytes apart per source row, lines that share a handful of L1
 * sets and evict each other (perf: ~70% of a 11-token call went to the two
 * transposes of the state); a tile reads TB lines and writes TB lines, all
 * of them in L1. On x86-64 the tile goes by 4 x 4 SSE transposes (SSE is
 * in the baseline this file is built for). */
#define TB 16
static void transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                      int64_t cols) {
  for (int64_t i0 = 0; i0 < rows; i0 += TB) {
    const int64_t i1 = i0 + TB < rows ? i0 + TB : rows;
    for (int64_t j0 = 0; j0 < cols; j0 += TB) {
      const int64_t j1 = j0 + TB < cols ? j0 + TB : cols;
      int64_t i = i0;
#if defined(__SSE2__)
      for (; i + 4 <= i1; i += 4) {
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) {
          __m128 r0 = _mm_loadu_ps(src + i * lds + j), r1 = _mm_loadu_ps(src + (i + 1) * lds + j);
          __m128 r2 = _mm_loadu_ps(src + (i + 2) * lds + j), r3 = _mm_loadu_ps(src + (i + 3) * lds + j);
          _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
          _mm_storeu_ps(dst + j * ldd + i, r0);
          _mm_storeu_ps(dst + (j + 1) * ldd + i, r1);
          _mm_storeu_ps(dst + (j + 2) * ldd + i, r2);
          _mm_storeu_ps(dst + (j + 3) * ldd + i, r3);
        }
        for (; j < j1; j++)
          for (int64_t r = i; r < i + 4; r++) dst[j * ldd + r] = src[r * lds + j];
      }
#endif
      for (; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) dst[j * ldd + i] = src[i * lds + j];
    }
  }
}

/* Workspace of one thread for the chunked form, in floats. */
static int64_t gdr_ws_floats(int64_t C, int64_t Dk, int64_t Dv) {
  return 2 * C * Dk      /* Kc, Qc: the chunk's key and query rows, gathered */
         + 2 * Dv * Dk   /* St = Sᵀ, tmp */
         + 3 * C * Dv    /* SK, SQ, D (the updates δ) */
         + 2 * C * C     /* KK, QK */
         + Dv * C        /* Dt = Dᵀ */
         + Dk * C        /* Kt: decayed keys, transposed */
         + 3 * C;        /* G, e^G, coefficients */
}

static void gdr_chunked_head(const gdr_args *a, int64_t h, float *ws) {
  const cpu_kernel_set *K = a->k;
  const int64_t Dk = a->Dk, Dv = a->Dv, Hk = a->Hk, Hv = a->Hv, kh = h / (Hv / Hk);
  const int64_t CH = a->chunk;
  float *S = a->state + h * Dk * Dv;
  /* Kc, SK and KK each have room for 2·CH rows: a chunk of C tokens puts
   * its query rows right after its C key rows (Qc), so one product with
   * 2C rows gives SK then SQ, and one more KK then QK (the state and the
   * keys packed once for both) */
  float *Kc = ws, *St = Kc + 2 * CH * Dk, *tmp = St + Dv * Dk;
  float *SK = tmp + Dv * Dk, *D = SK + 2 * CH * Dv;
  float *KK = D + CH * Dv, *Dt = KK + 2 * CH * CH, *Kt = Dt + Dv * CH;
  float *G = Kt + Dk * CH, *eG = G + CH, *cf = eG + CH;

  transpose(St, Dk, S, Dv, Dk, Dv); /* St = Sᵀ [Dv, Dk] */

  for (int64_t t0 = 0; t0 < a->T; t0 += CH) {
    const int64_t C = a->T - t0 < CH ? a->T - t0 : CH;
    float *Qc = Kc + C * Dk, *SQ = SK + C * Dv, *QK = KK + C * C;
    double run = 0.0; /* the cumulative sum in double: 64 terms lose nothing */
    for (int64_t i = 0; i < C; i++) {
      const int64_t t = t0 + i;
      memcpy(Kc + i * Dk, a->kk + (t * Hk + kh) * Dk, (size_t)Dk * sizeof(float));
      memcpy(Qc + i * Dk, a->q + (t * Hk + kh) * Dk, (size_t)Dk * sizeof(float));
      run += (double)a->g[t * Hv + h];
      G[i] = (float)run;
      eG[i] = (float)exp(run);
    }
    K->matmul_tile(SK, Kc, St, MI_DTYPE_F32, Dv, Dk, 0, 2 * C, 0, Dv); /* SK; SQ */
    K->matmul_tile(KK, Kc, Kc, MI_DTYPE_F32, C, Dk, 0, 2 * C, 0, C);  /* KK; QK */

    /* the decays e^{G_i−G_m} (m <= i) applied once to both C x C products;
     * QK is causally masked for the output product below */
    for (int64_t i = 0; i < C; i++) {
      for (int64_t m = 0; m <= i; m++) {
        const float gm = expf(G[i] - G[m]);
        KK[i * C + m] *= gm;
        QK[i * C + m] *= gm;
      }
      for (int64_t m = i + 1; m < C; m++) QK[i * C + m] = 0.0f;
    }
    /* δ by forward substitution (unit lower-triangular system) */
    for (int64_t i = 0; i < C; i++) {
      const int64_t t = t0 + i;
      const float b = a->beta[t * Hv + h];
      const float *vi = a->v + (t * Hv + h) * Dv;
      float *Di = D + i * Dv;
      memcpy(Di, vi, (size_t)Dv * sizeof(float)); /* b · (v_i − e^{G_i} SK_i) */
      K->axpy(Di, -eG[i], SK + i * Dv, Dv);
      K->scal(Di, b, Dv);
      for (int64_t m = 0; m < i; m++) cf[m] = -b * KK[i * C + m];
      axpy_rows(K, Di, cf, D, Dv, i, Dv);
    }
    /* Δᵀ and the keys decayed to the chunk's end, transposed: the operands
     * of the two products below */
    const float gl = G[C - 1];
    for (int64_t m = 0; m < C; m++) cf[m] = expf(gl - G[m]);
    for (int64_t i = 0; i < Dk; i++)
      for (int64_t m = 0; m < C; m++) Kt[i * C + m] = cf[m] * Kc[m * Dk + i];
    for (int64_t j = 0; j < Dv; j++)
      for (int64_t m = 0; m < C; m++) Dt[j * C + m] = D[m * Dv + j];
    /* outputs: o_i = e^{G_i} SQ_i + Σ_{m<=i} e^{G_i−G_m} QK_im δ_m, the sum as
     * one product (the decayed, masked QK times Δ) into SK's space */
    K->matmul_tile(SK, QK, Dt, MI_DTYPE_F32, Dv, C, 0, C, 0, Dv);
    for (int64_t i = 0; i < C; i++) {
      float *oi = a->o + ((t0 + i) * Hv + h) * Dv;
      memcpy(oi, SK + i * Dv, (size_t)Dv * sizeof(float));
      K->axpy(oi, eG[i], SQ + i * Dv, Dv);
    }
    /* state: St ← e^{G_C} St + Δᵀ · (decayed K) */
    K->matmul_tile(tmp, Dt, Kt, MI_DTYPE_F32, Dk, C, 0, Dv, 0, Dk);
    const float el = eG[C - 1];
    K->scal(St, el, Dv * Dk);
    K->axpy(St, 1.0f, tmp, Dv * Dk);
  }

  transpose(S, Dv, St, Dk, Dv, Dk);
}

static void gdr_task(void *arg, int64_t hb, int64_t he, int tid) {
  const gdr_args *a = arg;
  float *ws = a->ws + (int64_t)tid * a->ws_floats;
  for (int64_t h = hb; h < he; h++) {
    if (a->T <= GDR_RECURRENT_MAX_T)
      gdr_recurrent_head(a, h, ws);
    else
      gdr_chunked_head(a, h, ws);
  }
}

int cpu_gated_delta_rule(void *ctx, mi_stream *s, float *o, const float *q, const float *k,
                         const float *v, const float *g, const float *beta, float *state,
                         int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  (void)s;
  cpu_ctx *c = ctx;
  if (T < 0 || Hk <= 0 || Hv <= 0 || Dk <= 0 || Dv <= 0)
    return cpu_fail(c, "gated_delta_rule: bad shape T=%lld Hk=%lld Hv=%lld Dk=%lld Dv=%lld",
                    (long long)T, (long long)Hk, (long long)Hv, (long long)Dk, (long long)Dv);
  if (Hv % Hk)
    return cpu_fail(c, "gated_delta_rule: Hv=%lld is not a multiple of Hk=%lld", (long long)Hv,
                    (long long)Hk);
  if (T == 0) return 0;
  CHECK_PTR(c, o, "gated_delta_rule", "o");
  CHECK_PTR(c, q, "gated_delta_rule", "q");
  CHECK_PTR(c, k, "gated_delta_rule", "k");
  CHECK_PTR(c, v, "gated_delta_rule", "v");
  CHECK_PTR(c, g, "gated_delta_rule", "g");
  CHECK_PTR(c, beta, "gated_delta_rule", "beta");
  CHECK_PTR(c, state, "gated_delta_rule", "state");
  const int64_t no = T * Hv * Dv;
  if (overlap(o, no, q, T * Hk * Dk) || overlap(o, no, k, T * Hk * Dk) || overlap(o, no, v, no) ||
      overlap(o, no, g, T * Hv) || overlap(o, no, beta, T * Hv) ||
      overlap(o, no, state, Hv * Dk * Dv))
    return cpu_fail(c, "gated_delta_rule: o overlaps an input or the state");

  const int64_t chunk = T < GDR_CHUNK ? T : GDR_CHUNK;
  const int nt = cpu_pool_threads(c->pool);
  const int64_t per = T <= GDR_RECURRENT_MAX_T ? Dv : gdr_ws_floats(chunk, Dk, Dv);
  /* The recurrent form (decode, short prompts) keeps its one Dv-vector per
   * thread on the stack for the common head sizes: no allocation. */
  float stack_ws[2048];
  float *heap = NULL, *ws = stack_ws;
  if (per * nt > (int64_t)(sizeof stack_ws / sizeof *stack_ws)) {
    heap = malloc((size_t)(per * nt) * sizeof(float));
    if (!heap)
      return cpu_fail(c, "gated_delta_rule: out of memory for a %lld-float workspace",
                      (long long)(per * nt));
    ws = heap;
  }
  gdr_args a = {c->k, o, q, k, v, g, beta, state, T, Hk, Hv, Dk, Dv, chunk, ws, per};
  if (Hv > 1 && nt > 1 && T * Hv * Dk * Dv >= HY_PAR_MIN)
    cpu_parallel_for(c->pool, Hv, 1, gdr_task, &a);
  else
    gdr_task(&a, 0, Hv, 0);
  free(heap);
  return 0;
}
