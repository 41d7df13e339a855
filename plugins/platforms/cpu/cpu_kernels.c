/* Kernel entry points: argument checks, splitting work over the thread pool,
 * and the simple elementwise kernels. The inner loops that depend on the ISA
 * come from ctx->k (cpu_kernels_<isa>.c); rope and attention live in
 * cpu_kernels_attn.c. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_q8_0.h"

/* Below this many multiply-adds / elements a kernel runs on the calling
 * thread: waking workers costs a few microseconds. */
#define PAR_MIN_MACS (1 << 16)
#define PAR_MIN_ELEMS (1 << 16)

#define CHECK_PTR(c, p, kern, what)                                                                \
  do {                                                                                             \
    if (!(p)) return cpu_fail((c), "%s: %s is NULL", (kern), (what));                              \
  } while (0)

/* ---------------- matmul ---------------- */

typedef struct mm_args {
  const cpu_kernel_set *k;
  float *y;
  const float *x;
  const void *w;
  mi_dtype dt;
  int64_t M, N, K;
  int split_m; /* 0: tasks are ranges of N (weight rows); 1: ranges of M */
} mm_args;

static void mm_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const mm_args *a = arg;
  if (a->split_m)
    a->k->matmul_tile(a->y, a->x, a->w, a->dt, a->N, a->K, b, e, 0, a->N);
  else
    a->k->matmul_tile(a->y, a->x, a->w, a->dt, a->N, a->K, 0, a->M, b, e);
}

int cpu_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w, mi_dtype w_dtype,
               int64_t M, int64_t N, int64_t K) {
  (void)s;
  cpu_ctx *c = ctx;
  if (M < 0 || N < 0 || K < 0)
    return cpu_fail(c, "matmul: negative shape M=%lld N=%lld K=%lld", (long long)M, (long long)N,
                    (long long)K);
  if (w_dtype != MI_DTYPE_F32 && w_dtype != MI_DTYPE_F16 && w_dtype != MI_DTYPE_BF16 &&
      !cpu_quant_takes(w_dtype))
    return cpu_fail(c,
                    "matmul: unsupported weight dtype %s (f32, f16, bf16 or a block type of quant.h "
                    "only)",
                    mi_dtype_name(w_dtype));
  if (M == 0 || N == 0) return 0;
  CHECK_PTR(c, y, "matmul", "y");
  if (K == 0) {
    memset(y, 0, (size_t)(M * N) * sizeof *y);
    return 0;
  }
  CHECK_PTR(c, x, "matmul", "x");
  CHECK_PTR(c, w, "matmul", "w");
  if (mi_dtype_is_block(w_dtype)) /* every block type: cpu_matmul_q8_0.c */
    return cpu_matmul_quant(c, w_dtype, y, x, w, M, N, K);
  mm_args a = {c->k, y, x, w, w_dtype, M, N, K, 0};
  int nt = cpu_pool_threads(c->pool);
  double macs = (double)M * (double)N * (double)K;
  if (nt == 1 || macs < PAR_MIN_MACS) {
    mm_task(&a, 0, N, 0);
  } else if (N >= 16 * nt) {
    /* Each thread streams its own contiguous slice of the weights once
     * (decode is bound by that stream). Grain 16 rows keeps the 4-row tiles
     * whole and y writes on separate cache lines; 32 keeps the prefill
     * path's weight panels whole (32 rows on AVX-512, 16 on AVX2; both
     * take that path from 8 tokens, OP_MIN_M). */
    cpu_parallel_for(c->pool, N, M >= 8 ? 32 : 16, mm_task, &a);
  } else {
    a.split_m = 1; /* few outputs, many tokens: share the tokens instead */
    cpu_parallel_for(c->pool, M, 4, mm_task, &a);
  }
  return 0;
}

/* ---------------- rmsnorm ---------------- */

typedef struct norm_args {
  const cpu_kernel_set *k;
  float *y;
  const float *x, *w;
  int64_t dim;
  float eps, off;
} norm_args;

static void norm_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const norm_args *a = arg;
  int64_t dim = a->dim;
  for (int64_t r = b; r < e; r++) {
    const float *xr = a->x + r * dim;
    float *yr = a->y + r * dim;
    float ss = a->k->dot(xr, xr, dim);
    float inv = (float)(1.0 / sqrt((double)ss / (double)dim + (double)a->eps));
    for (int64_t i = 0; i < dim; i++) yr[i] = xr[i] * inv * (a->w[i] + a->off);
  }
}

int cpu_check_rows(cpu_ctx *c, const char *kern, int64_t rows, int64_t dim, float eps,
                   const void *y, const void *x) {
  if (rows < 0 || dim <= 0)
    return cpu_fail(c, "%s: bad shape rows=%lld dim=%lld (need rows >= 0, dim > 0)", kern,
                    (long long)rows, (long long)dim);
  if (!(eps >= 0.0f)) return cpu_fail(c, "%s: eps must be >= 0 (got %g)", kern, (double)eps);
  if (rows == 0) return 0;
  CHECK_PTR(c, y, kern, "y");
  CHECK_PTR(c, x, kern, "x");
  return 1;
}

int cpu_rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w, int64_t rows,
                int64_t dim, float eps, float w_offset) {
  (void)s;
  cpu_ctx *c = ctx;
  int go = cpu_check_rows(c, "rmsnorm", rows, dim, eps, y, x);
  if (go <= 0) return go;
  CHECK_PTR(c, w, "rmsnorm", "w");
  norm_args a = {c->k, y, x, w, dim, eps, w_offset};
  if (rows > 1 && rows * dim >= PAR_MIN_ELEMS / 4) {
    int64_t grain = 4096 / dim > 1 ? 4096 / dim : 1;
    cpu_parallel_for(c->pool, rows, grain, norm_task, &a);
  } else {
    norm_task(&a, 0, rows, 0);
  }
  return 0;
}

/* ---------------- elementwise ---------------- */

typedef struct ew_args {
  const cpu_kernel_set *k;
  int op; /* 0 silu_mul, 1 add, 2 scale */
  float *y;
  const float *a, *b;
  float alpha;
} ew_args;

static void ew_task(void *arg, int64_t lo, int64_t hi, int tid) {
  (void)tid;
  const ew_args *e = arg;
  float *y = e->y;
  const float *a = e->a, *b = e->b;
  switch (e->op) {
  case 0:
    /* silu(g) = g / (1 + e^-g); for g -> -inf, e^-g = inf and the quotient
     * is -0, the right limit, so no special case is needed. The ISA's loop
     * when it has one: expf one element at a time was ~5% of a 256-token
     * prefill (MI_CPU_PROFILE). */
    if (e->k->silu_mul) {
      e->k->silu_mul(y + lo, a + lo, b + lo, hi - lo);
      break;
    }
    for (int64_t i = lo; i < hi; i++) {
      float g = a[i];
      y[i] = g / (1.0f + expf(-g)) * b[i];
    }
    break;
  case 1:
    for (int64_t i = lo; i < hi; i++) y[i] = a[i] + b[i];
    break;
  default:
    for (int64_t i = lo; i < hi; i++) y[i] = e->alpha * a[i];
    break;
  }
}

static int ew_run(cpu_ctx *c, ew_args *e, int64_t n) {
  if (n >= PAR_MIN_ELEMS)
    cpu_parallel_for(c->pool, n, 4096, ew_task, e);
  else
    ew_task(e, 0, n, 0);
  return 0;
}

int cpu_check_ew(cpu_ctx *c, const char *kern, int64_t n, const void *y, const void *a,
                 const char *a_name, const void *b, const char *b_name) {
  if (n < 0) return cpu_fail(c, "%s: negative n=%lld", kern, (long long)n);
  if (n == 0) return 0;
  CHECK_PTR(c, y, kern, "y");
  CHECK_PTR(c, a, kern, a_name);
  if (b_name) CHECK_PTR(c, b, kern, b_name);
  return 1;
}

/* op: ew_args.op; b is NULL for scale (one input). */
static int ew(cpu_ctx *c, const char *kern, int op, float *y, const float *a, const char *a_name,
              const float *b, const char *b_name, float alpha, int64_t n) {
  int go = cpu_check_ew(c, kern, n, y, a, a_name, b, b_name);
  if (go <= 0) return go;
  ew_args e = {c->k, op, y, a, b, alpha};
  return ew_run(c, &e, n);
}

int cpu_silu_mul(void *ctx, mi_stream *s, float *y, const float *gate, const float *up,
                 int64_t n) {
  (void)s;
  return ew(ctx, "silu_mul", 0, y, gate, "gate", up, "up", 0.0f, n);
}

int cpu_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  (void)s;
  return ew(ctx, "add", 1, y, a, "a", b, "b", 0.0f, n);
}

int cpu_scale(void *ctx, mi_stream *s, float *y, const float *x, float alpha, int64_t n) {
  (void)s;
  return ew(ctx, "scale", 2, y, x, "x", NULL, NULL, alpha, n);
}

/* ---------------- embed ---------------- */

typedef struct embed_args {
  float *y;
  const void *table;
  mi_dtype dt;
  const int32_t *ids;
  int64_t dim;
} embed_args;

static void embed_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const embed_args *a = arg;
  int64_t dim = a->dim;
  for (int64_t t = b; t < e; t++) {
    float *yr = a->y + t * dim;
    size_t row = (size_t)a->ids[t] * (size_t)dim;
    if (mi_dtype_is_block(a->dt)) { /* whole blocks per row: checked by cpu_embed */
      const size_t rowb = mi_dtype_row_bytes(a->dt, dim);
      cpu_quant_dequant_row(a->dt, yr, (const char *)a->table + (size_t)a->ids[t] * rowb, dim);
    } else if (a->dt == MI_DTYPE_F32) {
      memcpy(yr, (const float *)a->table + row, (size_t)dim * sizeof(float));
    } else if (a->dt == MI_DTYPE_BF16) {
      const uint16_t *src = (const uint16_t *)a->table + row;
      for (int64_t i = 0; i < dim; i++) yr[i] = mi_bf16_to_f32(src[i]);
    } else {
      const uint16_t *src = (const uint16_t *)a->table + row;
      for (int64_t i = 0; i < dim; i++) yr[i] = mi_f16_to_f32(src[i]);
    }
  }
}

int cpu_embed(void *ctx, mi_stream *s, float *y, const void *table, mi_dtype dtype,
              const int32_t *ids, int64_t T, int64_t V, int64_t dim) {
  (void)s;
  cpu_ctx *c = ctx;
  if (T < 0 || V < 0 || dim <= 0)
    return cpu_fail(c, "embed: bad shape T=%lld V=%lld dim=%lld", (long long)T, (long long)V,
                    (long long)dim);
  if (dtype != MI_DTYPE_F32 && dtype != MI_DTYPE_F16 && dtype != MI_DTYPE_BF16 &&
      !mi_dtype_is_block(dtype))
    return cpu_fail(c,
                    "embed: unsupported table dtype %s (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k "
                    "only)",
                    mi_dtype_name(dtype));
  if (mi_dtype_is_block(dtype) && dim % mi_dtype_block(dtype))
    return cpu_fail(c, "embed: a %s table needs dim a multiple of %lld (got dim=%lld)",
                    mi_dtype_name(dtype), (long long)mi_dtype_block(dtype), (long long)dim);
  if (T == 0) return 0;
  CHECK_PTR(c, y, "embed", "y");
  CHECK_PTR(c, table, "embed", "table");
  CHECK_PTR(c, ids, "embed", "ids");
  /* Check every id before writing anything: a bad token must not leave a
   * half-filled output or read outside the table. */
  for (int64_t t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= V)
      return cpu_fail(c, "embed: token id %ld at position %lld is outside the vocabulary [0, %lld)",
                      (long)ids[t], (long long)t, (long long)V);
  embed_args a = {y, table, dtype, ids, dim};
  if (T > 1 && T * dim >= PAR_MIN_ELEMS)
    cpu_parallel_for(c->pool, T, 1, embed_task, &a);
  else
    embed_task(&a, 0, T, 0);
  return 0;
}

/* ---------------- argmax ---------------- */

int cpu_argmax(void *ctx, mi_stream *s, int32_t *out, const float *x, int64_t rows, int64_t n) {
  (void)s;
  cpu_ctx *c = ctx;
  if (rows < 0 || n <= 0 || n > INT32_MAX)
    return cpu_fail(c, "argmax: bad shape rows=%lld n=%lld (need n in [1, 2^31))",
                    (long long)rows, (long long)n);
  if (rows == 0) return 0;
  CHECK_PTR(c, out, "argmax", "out");
  CHECK_PTR(c, x, "argmax", "x");
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    /* Strict '>' keeps the first of equal maxima; NaNs never win (a row of
     * NaNs gives 0). */
    float best = -INFINITY;
    int64_t bi = 0;
    for (int64_t i = 0; i < n; i++)
      if (xr[i] > best) {
        best = xr[i];
        bi = i;
      }
    out[r] = (int32_t)bi;
  }
  return 0;
}
