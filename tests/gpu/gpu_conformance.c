/* gpu_conformance PLUGIN.so [--quick] [key=value ...]
 *
 * Runs every kernel of a platform plugin on random inputs through the public
 * mi_platform_iface (device buffers, h2d/d2h copies, streams) and compares
 * with a float64 reference computed here. Prints one line per case and
 * exits 1 if any case is outside its tolerance (or the plugin does not load).
 *
 * Not a ctest test for the GPU plugins (no GPU on the build machines):
 * tools/gpu/check_nvidia.sh runs it on a GPU machine. ctest runs it on the
 * cpu plugin so that the harness itself is known to pass a correct platform.
 * Shapes include the Qwen3-8B ones (K = 4096/12288, GQA 32/8, head_dim 128)
 * and the paths the GPU plugins choose between (GEMV M <= 8 vs tiled, vector
 * vs scalar loads, attention split-K for decode at long positions).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/host.h"
#include "core/verify/ref/f64.h"
#include "core/runtime/loader.h"
#include "mi/platform.h"
#include "mi/quant.h"
#include "mi/tensor.h"

static const mi_platform_iface *P;
static void *C;
static mi_stream *S;
static int n_fail, n_case;
static uint64_t rng_state = 0x243f6a8885a308d3ull;

static double urand(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static void die(const char *what) {
  fprintf(stderr, "gpu_conformance: %s: %s\n", what, P ? P->last_error(C) : "");
  exit(2);
}

/* device buffer with host data uploaded (or zeroed) */
typedef struct dbuf {
  mi_buffer *b;
  void *d;
  size_t n;
} dbuf;

static dbuf up(const void *host, size_t n) {
  dbuf r = {NULL, NULL, n};
  if (P->buffer_alloc(C, n ? n : 4, &r.b) != 0) die("buffer_alloc");
  r.d = P->buffer_ptr(C, r.b);
  if (host && n && P->memcpy_h2d(C, S, r.d, host, n) != 0) die("memcpy_h2d");
  return r;
}
static void down(void *host, const dbuf *b) {
  if (P->stream_sync(C, S) != 0) die("stream_sync");
  if (P->memcpy_d2h(C, S, host, b->d, b->n) != 0) die("memcpy_d2h");
}
static void drop(dbuf *b) { P->buffer_free(C, b->b); }

static void report(const char *name, double err, double tol) {
  n_case++;
  int ok = err <= tol && !isnan(err);
  if (!ok) n_fail++;
  printf("%-4s %-52s max_err %.3e (tol %.1e)\n", ok ? "ok" : "FAIL", name, err, tol);
}

/* weights in dtype dt from f64 values; returns host bytes; also the
 * rounded values back in f64 (what the device really sees) */
static void *make_w(mi_dtype dt, double *vals, size_t n) {
  void *w = malloc(n * mi_dtype_size(dt));
  for (size_t i = 0; i < n; i++) {
    float f = (float)vals[i];
    if (dt == MI_DTYPE_F32) {
      ((float *)w)[i] = f;
    } else if (dt == MI_DTYPE_BF16) {
      uint16_t h = mi_f32_to_bf16(f);
      ((uint16_t *)w)[i] = h;
      vals[i] = mi_bf16_to_f32(h);
    } else {
      uint16_t h = mi_f32_to_f16(f);
      ((uint16_t *)w)[i] = h;
      vals[i] = mi_f16_to_f32(h);
    }
    if (dt == MI_DTYPE_F32) vals[i] = f;
  }
  return w;
}

/* max over outputs of |y - Σ x·w| / Σ|x·w|, the sums in float64 over the
 * weights' values wv [N, K] (what the device really sees); a NaN sticks */
static double matmul_rel_err(const float *y, const float *x, const double *wv, int64_t M,
                             int64_t N, int64_t K) {
  double err = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; k++) {
        s += (double)x[m * K + k] * wv[n * K + k];
        a += fabs((double)x[m * K + k] * wv[n * K + k]);
      }
      const double e = fabs(y[m * N + n] - s) / (a + 1e-30);
      if (!(e <= err)) err = e;
    }
  return err;
}

static void test_matmul(int64_t M, int64_t N, int64_t K, mi_dtype dt, int misalign) {
  double *wv = malloc(sizeof(double) * (size_t)(N * K));
  float *x = malloc(sizeof(float) * (size_t)(M * K + 1));
  for (int64_t i = 0; i < N * K; i++) wv[i] = urand() * 0.5;
  for (int64_t i = 0; i < M * K + 1; i++) x[i] = (float)urand();
  void *w = make_w(dt, wv, (size_t)(N * K));
  size_t es = mi_dtype_size(dt);
  /* misalign: the weight starts one element into its buffer (scalar path) */
  dbuf dw = up(NULL, (size_t)(N * K + 1) * es);
  if (P->memcpy_h2d(C, S, (char *)dw.d + (misalign ? es : 0), w, (size_t)(N * K) * es) != 0)
    die("memcpy_h2d");
  dbuf dx = up(x, sizeof(float) * (size_t)(M * K));
  dbuf dy = up(NULL, sizeof(float) * (size_t)(M * N));
  if (P->matmul(C, S, dy.d, dx.d, (char *)dw.d + (misalign ? es : 0), dt, M, N, K) != 0)
    die("matmul");
  float *y = malloc(dy.n);
  down(y, &dy);
  const double err = matmul_rel_err(y, x, wv, M, N, K);
  char name[128];
  snprintf(name, sizeof name, "matmul %s M=%lld N=%lld K=%lld%s", mi_dtype_name(dt), (long long)M,
           (long long)N, (long long)K, misalign ? " misaligned" : "");
  /* f32 accumulation in any order: a random-walk error of ~sqrt(K)·eps
   * relative to Σ|x·w|; an indexing or conversion bug is O(1). */
  report(name, err, 5e-7 * sqrt((double)K) + 1e-7);
  drop(&dw);
  drop(&dx);
  drop(&dy);
  free(wv);
  free(x);
  free(w);
  free(y);
}

static void test_rmsnorm(int64_t rows, int64_t dim, float off) {
  size_t n = (size_t)(rows * dim);
  float *x = malloc(n * 4), *w = malloc((size_t)dim * 4), *y = malloc(n * 4);
  for (size_t i = 0; i < n; i++) x[i] = (float)(urand() * 3);
  for (int64_t i = 0; i < dim; i++) w[i] = (float)urand();
  dbuf dx = up(x, n * 4), dw = up(w, (size_t)dim * 4);
  if (P->rmsnorm(C, S, dx.d, dx.d, dw.d, rows, dim, 1e-6f, off) != 0) die("rmsnorm"); /* in place */
  down(y, &dx);
  double err = 0;
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss / (double)dim + 1e-6);
    for (int64_t i = 0; i < dim; i++) {
      double ref = x[r * dim + i] * inv * ((double)w[i] + off);
      double e = fabs(y[r * dim + i] - ref) / (fabs(ref) + 1e-3);
      if (e > err) err = e;
    }
  }
  char name[96];
  snprintf(name, sizeof name, "rmsnorm rows=%lld dim=%lld off=%g (in place)", (long long)rows,
           (long long)dim, (double)off);
  report(name, err, 1e-5);
  drop(&dx);
  drop(&dw);
  free(x);
  free(w);
  free(y);
}

static void test_rope(int64_t T, int64_t H, int64_t D, int64_t rot, int64_t pos0) {
  int64_t tok_stride = H * D + 8, head_stride = D; /* padded token rows */
  size_t n = (size_t)(T * tok_stride);
  float *x = malloc(n * 4), *y = malloc(n * 4);
  int32_t *pos = malloc((size_t)T * 4);
  for (size_t i = 0; i < n; i++) x[i] = (float)urand();
  for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(pos0 + 3 * t);
  dbuf dx = up(x, n * 4), dp = up(pos, (size_t)T * 4);
  const float theta = 1e6f;
  if (P->rope(C, S, dx.d, dp.d, T, H, tok_stride, head_stride, rot, theta) != 0) die("rope");
  down(y, &dx);
  double err = 0;
  int64_t half = rot / 2;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < D; i++) {
        const float *v = x + t * tok_stride + h * head_stride;
        double ref = v[i];
        if (i < rot) {
          int64_t j = i < half ? i : i - half;
          double ang = (double)pos[t] * pow((double)theta, -2.0 * (double)j / (double)rot);
          ref = i < half ? v[i] * cos(ang) - v[i + half] * sin(ang)
                         : v[i] * cos(ang) + v[i - half] * sin(ang);
        }
        double e = fabs(y[t * tok_stride + h * head_stride + i] - ref);
        if (e > err) err = e;
      }
  /* padding between tokens untouched */
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = H * D; i < tok_stride; i++)
      if (y[t * tok_stride + i] != x[t * tok_stride + i]) err = INFINITY;
  char name[96];
  snprintf(name, sizeof name, "rope T=%lld H=%lld D=%lld rot=%lld pos0=%lld", (long long)T,
           (long long)H, (long long)D, (long long)rot, (long long)pos0);
  report(name, err, 2e-6);
  drop(&dx);
  drop(&dp);
  free(x);
  free(y);
  free(pos);
}

static void test_attention(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0) {
  int64_t L = pos0 + T, n_ctx = L + 5;
  size_t nq = (size_t)(T * Hq * D), nkv = (size_t)(n_ctx * Hkv * D);
  float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *o = malloc(nq * 4);
  for (size_t i = 0; i < nq; i++) q[i] = (float)(urand() * 2);
  for (size_t i = 0; i < nkv; i++) {
    k[i] = (float)(urand() * 2);
    v[i] = (float)urand();
  }
  dbuf dq = up(q, nq * 4), dk = up(k, nkv * 4), dv = up(v, nkv * 4), dout = up(NULL, nq * 4);
  float scale = (float)(1.0 / sqrt((double)D));
  if (P->attention(C, S, dout.d, dq.d, dk.d, dv.d, MI_DTYPE_F32, T, Hq, Hkv, D, pos0, scale) != 0)
    die("attention");
  down(o, &dout);
  double err = 0;
  double *s = malloc(sizeof(double) * (size_t)L);
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t kvh = h / (Hq / Hkv), n = pos0 + t + 1;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; j++) {
        double d = 0;
        for (int64_t c = 0; c < D; c++)
          d += (double)q[(t * Hq + h) * D + c] * k[(j * Hkv + kvh) * D + c];
        s[j] = d * scale;
        if (s[j] > mx) mx = s[j];
      }
      for (int64_t j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mx));
      for (int64_t c = 0; c < D; c++) {
        double ref = 0;
        for (int64_t j = 0; j < n; j++) ref += s[j] * v[(j * Hkv + kvh) * D + c];
        ref /= sum;
        double e = fabs(o[(t * Hq + h) * D + c] - ref);
        if (e > err) err = e;
      }
    }
  char name[112];
  snprintf(name, sizeof name, "attention T=%lld Hq=%lld Hkv=%lld D=%lld pos0=%lld", (long long)T,
           (long long)Hq, (long long)Hkv, (long long)D, (long long)pos0);
  report(name, err, 2e-5); /* |v| <= 1: absolute */
  drop(&dq);
  drop(&dk);
  drop(&dv);
  drop(&dout);
  free(q);
  free(k);
  free(v);
  free(o);
  free(s);
}

static void test_elementwise(int64_t n) {
  float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    a[i] = (float)(urand() * 20);
    b[i] = (float)urand();
  }
  dbuf da = up(a, (size_t)n * 4), db = up(b, (size_t)n * 4), dy = up(NULL, (size_t)n * 4);
  double e1 = 0, e2 = 0, e3 = 0;
  if (P->silu_mul(C, S, dy.d, da.d, db.d, n) != 0) die("silu_mul");
  down(y, &dy);
  for (int64_t i = 0; i < n; i++) {
    double ref = a[i] / (1.0 + exp(-(double)a[i])) * b[i];
    e1 = fmax(e1, fabs(y[i] - ref) / (fabs(ref) + 1e-6));
  }
  if (P->add(C, S, dy.d, da.d, db.d, n) != 0) die("add");
  down(y, &dy);
  for (int64_t i = 0; i < n; i++) e2 = fmax(e2, fabs(y[i] - ((double)a[i] + b[i])) / (fabs((double)a[i] + b[i]) + 1e-6));
  if (P->scale(C, S, da.d, da.d, -0.37f, n) != 0) die("scale"); /* in place */
  down(y, &da);
  for (int64_t i = 0; i < n; i++) e3 = fmax(e3, fabs(y[i] - (double)(-0.37f) * a[i]) / (fabs(a[i]) + 1e-6));
  char name[64];
  snprintf(name, sizeof name, "silu_mul n=%lld", (long long)n);
  report(name, e1, 1e-5);
  snprintf(name, sizeof name, "add n=%lld", (long long)n);
  report(name, e2, 1e-6);
  snprintf(name, sizeof name, "scale n=%lld (in place)", (long long)n);
  report(name, e3, 1e-6);
  drop(&da);
  drop(&db);
  drop(&dy);
  free(a);
  free(b);
  free(y);
}

/* n values (whole blocks) of block type dt: random codes and scales (any
 * bits), the f16 super-block scales set to sane random magnitudes; their
 * exact values back in vals (mi_quant_value64, the format's definition). */
static void *make_blocks(mi_dtype dt, double *vals, size_t n) {
  const size_t qk = (size_t)mi_dtype_block(dt), bb = mi_dtype_block_bytes(dt), nb = n / qk;
  uint8_t *w = malloc(nb * bb);
  for (size_t i = 0; i < nb * bb; i++) w[i] = (uint8_t)(urand() * 128 + 128);
  /* where each type keeps its f16 scale and its f16 min (or second scale),
   * -1 for none (sdk/include/mi/quant.h) */
  int at_d = 0, at_m = -1;
  switch (dt) {
  case MI_DTYPE_Q4_K: case MI_DTYPE_Q5_K: case MI_DTYPE_Q4_1: case MI_DTYPE_Q5_1: at_m = 2; break;
  case MI_DTYPE_Q6_K: at_d = 208; break;
  case MI_DTYPE_Q2_K: at_d = 80, at_m = 82; break;
  case MI_DTYPE_Q3_K: at_d = 108; break;
  default: break;
  }
  for (size_t b = 0; b < nb; b++) {
    uint8_t *blk = w + b * bb;
    uint16_t d = mi_f32_to_f16((float)(0.01 + 0.02 * fabs(urand()))), d2 = mi_f32_to_f16((float)(0.004 * urand()));
    if (dt == MI_DTYPE_Q6_K || dt == MI_DTYPE_Q3_K) d = mi_f32_to_f16((float)(0.0005 + 0.001 * fabs(urand())));
    memcpy(blk + at_d, &d, 2);
    if (at_m >= 0) memcpy(blk + at_m, &d2, 2);
    for (size_t j = 0; j < qk; j++) vals[b * qk + j] = mi_quant_value64(dt, blk, (int)j);
  }
  return w;
}

/* matmul with block-type weights, dequantized as read: against the float64
 * product of x and the weights' exact values, the tolerance of the element
 * types (the kernels' values are those exact values rounded once to f32). */
static void test_matmul_block(int64_t M, int64_t N, int64_t K, mi_dtype dt) {
  double *wv = malloc(sizeof(double) * (size_t)(N * K));
  float *x = malloc(sizeof(float) * (size_t)(M * K));
  for (int64_t i = 0; i < M * K; i++) x[i] = (float)urand();
  void *w = make_blocks(dt, wv, (size_t)(N * K));
  dbuf dw = up(w, mi_dtype_row_bytes(dt, K) * (size_t)N);
  dbuf dx = up(x, sizeof(float) * (size_t)(M * K));
  dbuf dy = up(NULL, sizeof(float) * (size_t)(M * N));
  if (P->matmul(C, S, dy.d, dx.d, dw.d, dt, M, N, K) != 0) die("matmul");
  float *y = malloc(dy.n);
  down(y, &dy);
  const double err = matmul_rel_err(y, x, wv, M, N, K);
  char name[128];
  snprintf(name, sizeof name, "matmul %s M=%lld N=%lld K=%lld", mi_dtype_name(dt), (long long)M,
           (long long)N, (long long)K);
  report(name, err, 5e-7 * sqrt((double)K) + 1e-7);
  /* K not whole blocks: refused, not read past a row */
  snprintf(name, sizeof name, "matmul %s refuses K=%lld", mi_dtype_name(dt),
           (long long)(K + 16));
  report(name, P->matmul(C, S, dy.d, dx.d, dw.d, dt, 1, 1, K + 16) != 0 ? 0.0 : 1.0, 0.0);
  drop(&dw);
  drop(&dx);
  drop(&dy);
  free(wv);
  free(x);
  free(w);
  free(y);
}

/* embed from a block-type table: each value its exact value rounded once */
static void test_embed_block(mi_dtype dt, int64_t V, int64_t dim, int64_t T) {
  double *tv = malloc(sizeof(double) * (size_t)(V * dim));
  void *tab = make_blocks(dt, tv, (size_t)(V * dim));
  int32_t *ids = malloc((size_t)T * 4);
  for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 3) % V);
  ids[T - 1] = (int32_t)(V - 1);
  dbuf dt_ = up(tab, mi_dtype_row_bytes(dt, dim) * (size_t)V), di = up(ids, (size_t)T * 4),
       dy = up(NULL, (size_t)(T * dim) * 4);
  if (P->embed(C, S, dy.d, dt_.d, dt, di.d, T, V, dim) != 0) die("embed");
  float *y = malloc(dy.n);
  down(y, &dy);
  double err = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < dim; i++) {
      const double e = fabs((double)y[t * dim + i] - (double)(float)tv[ids[t] * dim + i]);
      if (!(e <= err)) err = e;
    }
  char name[64];
  snprintf(name, sizeof name, "embed %s V=%lld dim=%lld T=%lld", mi_dtype_name(dt), (long long)V,
           (long long)dim, (long long)T);
  report(name, err, 0.0);
  drop(&dt_);
  drop(&di);
  drop(&dy);
  free(tv);
  free(tab);
  free(ids);
  free(y);
}

static void test_embed(mi_dtype dt, int64_t V, int64_t dim, int64_t T) {
  double *tv = malloc(sizeof(double) * (size_t)(V * dim));
  for (int64_t i = 0; i < V * dim; i++) tv[i] = urand();
  void *tab = make_w(dt, tv, (size_t)(V * dim));
  int32_t *ids = malloc((size_t)T * 4);
  for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 3) % V);
  ids[T - 1] = (int32_t)(V - 1);
  dbuf dt_ = up(tab, (size_t)(V * dim) * mi_dtype_size(dt)), di = up(ids, (size_t)T * 4),
       dy = up(NULL, (size_t)(T * dim) * 4);
  if (P->embed(C, S, dy.d, dt_.d, dt, di.d, T, V, dim) != 0) die("embed");
  float *y = malloc(dy.n);
  down(y, &dy);
  double err = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < dim; i++) err = fmax(err, fabs(y[t * dim + i] - tv[ids[t] * dim + i]));
  char name[64];
  snprintf(name, sizeof name, "embed %s V=%lld dim=%lld T=%lld", mi_dtype_name(dt), (long long)V,
           (long long)dim, (long long)T);
  report(name, err, 0.0); /* exact */
  /* a bad id must be an error: at the call or, for device-side ids, at the next sync */
  ids[T / 2] = (int32_t)V;
  if (P->memcpy_h2d(C, S, di.d, ids, (size_t)T * 4) != 0) die("memcpy_h2d");
  int rc = P->embed(C, S, dy.d, dt_.d, dt, di.d, T, V, dim);
  if (rc == 0) rc = P->stream_sync(C, S);
  const char *msg = rc != 0 ? P->last_error(C) : "";
  snprintf(name, sizeof name, "embed rejects id %lld (V=%lld)", (long long)V, (long long)V);
  report(name, rc != 0 && strstr(msg, "outside the vocabulary") ? 0.0 : 1.0, 0.0);
  if (rc != 0) printf("     -> %s\n", msg);
  /* and the platform is usable afterwards */
  ids[T / 2] = 0;
  if (P->memcpy_h2d(C, S, di.d, ids, (size_t)T * 4) != 0 ||
      P->embed(C, S, dy.d, dt_.d, dt, di.d, T, V, dim) != 0 || P->stream_sync(C, S) != 0)
    report("embed works after a rejected id", 1.0, 0.0);
  drop(&dt_);
  drop(&di);
  drop(&dy);
  free(tv);
  free(tab);
  free(ids);
  free(y);
}

static void test_argmax(int64_t rows, int64_t n) {
  float *x = malloc((size_t)(rows * n) * 4);
  int32_t *got = malloc((size_t)rows * 4), *want = malloc((size_t)rows * 4);
  for (int64_t i = 0; i < rows * n; i++) x[i] = (float)urand();
  for (int64_t r = 0; r < rows; r++) {
    int64_t a = (r * 104729) % n, b = (a + 1 + r) % n;
    x[r * n + a] = x[r * n + b] = 5.0f; /* a tie: the first index wins */
    want[r] = (int32_t)(a < b ? a : b);
  }
  if (rows > 1) { /* a row of -inf: 0 */
    for (int64_t i = 0; i < n; i++) x[n + i] = -INFINITY;
    want[1] = 0;
  }
  dbuf dx = up(x, (size_t)(rows * n) * 4), dout = up(NULL, (size_t)rows * 4);
  if (P->argmax(C, S, dout.d, dx.d, rows, n) != 0) die("argmax");
  down(got, &dout);
  int bad = 0;
  for (int64_t r = 0; r < rows; r++) bad += got[r] != want[r];
  char name[64];
  snprintf(name, sizeof name, "argmax rows=%lld n=%lld (ties, -inf row)", (long long)rows,
           (long long)n);
  report(name, bad, 0);
  drop(&dx);
  drop(&dout);
  free(x);
  free(got);
  free(want);
}

/* ---------------- ABI 1.4: the gated-DeltaNet hybrid's blocks ----------------
 * Against the float64 definitions (core/verify/ref/f64.c); errors relative to
 * the largest reference value of each output, as the operator contracts
 * (candidates/hybrid-deltanet/operators) measure them. */

static double *f64_of(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static double rel_err(const float *got, const double *want, size_t n) {
  double m = 0, e = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(want[i]) > m) m = fabs(want[i]);
    double d = fabs(got[i] - want[i]);
    if (d > e || isnan(d)) e = isnan(d) ? INFINITY : d;
  }
  return e / (m > 0 ? m : 1);
}

static float *rand_vec(size_t n, double scale) {
  float *v = malloc((n ? n : 1) * 4);
  for (size_t i = 0; i < n; i++) v[i] = (float)(urand() * scale);
  return v;
}

static void test_hybrid_rows(int64_t rows, int64_t dim) {
  size_t n = (size_t)(rows * dim);
  float *x = rand_vec(n, 2), *z = rand_vec(n, 6), *w = rand_vec((size_t)dim, 1.5), *y = malloc(n * 4);
  double *xd = f64_of(x, n), *zd = f64_of(z, n), *wd = f64_of(w, (size_t)dim), *ref = malloc(n * 8);
  char name[96];
  dbuf dx = up(x, n * 4), dz = up(z, n * 4), dw = up(w, (size_t)dim * 4), dy = up(NULL, n * 4);
  if (P->l2norm(C, S, dy.d, dx.d, rows, dim, 1e-6f) != 0) die("l2norm");
  down(y, &dy);
  vf_f64_l2norm(ref, xd, rows, dim, 1e-6);
  snprintf(name, sizeof name, "l2norm rows=%lld dim=%lld", (long long)rows, (long long)dim);
  report(name, rel_err(y, ref, n), 1e-5);
  if (P->rmsnorm_gated(C, S, dy.d, dx.d, dw.d, dz.d, rows, dim, 1e-6f) != 0) die("rmsnorm_gated");
  down(y, &dy);
  vf_f64_rmsnorm_gated(ref, xd, wd, zd, rows, dim, 1e-6);
  snprintf(name, sizeof name, "rmsnorm_gated rows=%lld dim=%lld", (long long)rows, (long long)dim);
  report(name, rel_err(y, ref, n), 1e-5);
  if (P->sigmoid_mul(C, S, dx.d, dx.d, dz.d, (int64_t)n) != 0) die("sigmoid_mul"); /* in place */
  down(y, &dx);
  vf_f64_sigmoid_mul(ref, xd, zd, (int64_t)n);
  snprintf(name, sizeof name, "sigmoid_mul n=%lld (in place)", (long long)n);
  report(name, rel_err(y, ref, n), 1e-6);
  /* copy2d: the second half of each row of x into rows of y, y_stride > n */
  if (dim >= 2) {
    const int64_t half = dim / 2, ys = half + 3, ny = (rows - 1) * ys + half;
    float *yc = malloc((size_t)ny * 4);
    double *rc = malloc((size_t)ny * 8);
    for (int64_t i = 0; i < ny; i++) yc[i] = 7.0f, rc[i] = 7.0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t i = 0; i < half; i++) rc[r * ys + i] = x[r * dim + (dim - half) + i];
    dbuf dc = up(yc, (size_t)ny * 4);
    if (P->copy2d(C, S, dc.d, ys, (float *)dx.d + (dim - half), dim, rows, half) != 0) die("copy2d");
    /* dx now holds sigmoid_mul's result: compare with that */
    float *xs = malloc(n * 4);
    down(xs, &dx);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t i = 0; i < half; i++) rc[r * ys + i] = xs[r * dim + (dim - half) + i];
    down(yc, &dc);
    snprintf(name, sizeof name, "copy2d rows=%lld n=%lld (strided)", (long long)rows, (long long)half);
    report(name, rel_err(yc, rc, (size_t)ny), 0);
    drop(&dc);
    free(xs), free(yc), free(rc);
  }
  drop(&dx), drop(&dz), drop(&dw), drop(&dy);
  free(x), free(z), free(w), free(y), free(xd), free(zd), free(wd), free(ref);
}

static void test_hybrid_gates(int64_t T, int64_t H) {
  size_t n = (size_t)(T * H);
  float *b = rand_vec(n, 6), *a = rand_vec(n, 30), *al = rand_vec((size_t)H, 2), *dt = rand_vec((size_t)H, 1);
  float *beta = malloc(n * 4), *g = malloc(n * 4);
  double *bd = f64_of(b, n), *ad = f64_of(a, n), *ald = f64_of(al, (size_t)H), *dtd = f64_of(dt, (size_t)H);
  double *rb = malloc(n * 8), *rg = malloc(n * 8);
  dbuf db = up(b, n * 4), da = up(a, n * 4), dal = up(al, (size_t)H * 4), ddt = up(dt, (size_t)H * 4);
  dbuf dbeta = up(NULL, n * 4), dg = up(NULL, n * 4);
  if (P->deltanet_gates(C, S, dbeta.d, dg.d, db.d, da.d, dal.d, ddt.d, T, H) != 0) die("deltanet_gates");
  down(beta, &dbeta);
  down(g, &dg);
  vf_f64_deltanet_gates(rg, rb, ad, bd, ald, dtd, T, H);
  double e = rel_err(beta, rb, n), e2 = rel_err(g, rg, n);
  char name[96];
  snprintf(name, sizeof name, "deltanet_gates T=%lld H=%lld", (long long)T, (long long)H);
  report(name, e > e2 ? e : e2, 1e-5);
  drop(&db), drop(&da), drop(&dal), drop(&ddt), drop(&dbeta), drop(&dg);
  free(b), free(a), free(al), free(dt), free(beta), free(g), free(bd), free(ad), free(ald), free(dtd);
  free(rb), free(rg);
}

static void test_hybrid_conv(int64_t T, int64_t Cc, int64_t K, int silu) {
  size_t n = (size_t)(T * Cc), ns = (size_t)((K - 1) * Cc);
  float *x = rand_vec(n, 2), *w = rand_vec((size_t)(Cc * K), 1), *st = rand_vec(ns, 2), *y = malloc(n * 4);
  double *xd = f64_of(x, n), *wd = f64_of(w, (size_t)(Cc * K)), *sd = f64_of(st, ns), *ref = malloc(n * 8);
  dbuf dx = up(x, n * 4), dw = up(w, (size_t)(Cc * K) * 4), ds = up(st, ns * 4), dy = up(NULL, n * 4);
  if (P->conv1d_causal(C, S, dy.d, dx.d, dw.d, ds.d, T, Cc, K, silu) != 0) die("conv1d_causal");
  down(y, &dy);
  down(st, &ds);
  vf_f64_conv1d_causal(ref, xd, wd, sd, T, Cc, K);
  if (silu) vf_f64_silu(ref, ref, (int64_t)n);
  double e = rel_err(y, ref, n), es = rel_err(st, sd, ns);
  char name[96];
  snprintf(name, sizeof name, "conv1d_causal T=%lld C=%lld K=%lld silu=%d (+state)", (long long)T,
           (long long)Cc, (long long)K, silu);
  report(name, e > es ? e : es, 1e-5);
  drop(&dx), drop(&dw), drop(&ds), drop(&dy);
  free(x), free(w), free(st), free(y), free(xd), free(wd), free(sd), free(ref);
}

/* Run in two calls (T1 then the rest), the state carried on the device. */
static void test_hybrid_gdr(int64_t T, int64_t T1, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  const size_t nqk = (size_t)(T * Hk * Dk), nv = (size_t)(T * Hv * Dv), ng = (size_t)(T * Hv);
  const size_t ns = (size_t)(Hv * Dk * Dv);
  const double kq = 1.0 / sqrt((double)Dk); /* |k|² <= 1, as l2-normed keys */
  float *q = rand_vec(nqk, kq), *k = rand_vec(nqk, kq), *v = rand_vec(nv, 1), *g = rand_vec(ng, 1);
  float *beta = rand_vec(ng, 1), *st = rand_vec(ns, 1), *o = malloc(nv * 4);
  for (size_t i = 0; i < ng; i++) g[i] = -fabsf(g[i]) * 2, beta[i] = fabsf(beta[i]);
  double *qd = f64_of(q, nqk), *kd = f64_of(k, nqk), *vd = f64_of(v, nv), *gd = f64_of(g, ng);
  double *bd = f64_of(beta, ng), *sd = f64_of(st, ns), *ref = malloc(nv * 8);
  dbuf dq = up(q, nqk * 4), dk = up(k, nqk * 4), dv = up(v, nv * 4), dg = up(g, ng * 4);
  dbuf db = up(beta, ng * 4), ds = up(st, ns * 4), dout = up(NULL, nv * 4);
  for (int part = 0; part < 2; part++) {
    const int64_t t0 = part ? T1 : 0, tn = part ? T - T1 : T1;
    if (tn == 0) continue;
    if (P->gated_delta_rule(C, S, (float *)dout.d + t0 * Hv * Dv, (float *)dq.d + t0 * Hk * Dk,
                            (float *)dk.d + t0 * Hk * Dk, (float *)dv.d + t0 * Hv * Dv,
                            (float *)dg.d + t0 * Hv, (float *)db.d + t0 * Hv, ds.d, tn, Hk, Hv, Dk,
                            Dv) != 0)
      die("gated_delta_rule");
  }
  down(o, &dout);
  down(st, &ds);
  vf_f64_gated_delta_rule(ref, sd, qd, kd, vd, gd, bd, T, Hk, Hv, Dk, Dv);
  double e = rel_err(o, ref, nv), es = rel_err(st, sd, ns);
  char name[96];
  snprintf(name, sizeof name, "gated_delta_rule T=%lld(%lld+) Hk=%lld Hv=%lld Dk=%lld Dv=%lld",
           (long long)T, (long long)T1, (long long)Hk, (long long)Hv, (long long)Dk, (long long)Dv);
  report(name, e > es ? e : es, 1e-4);
  drop(&dq), drop(&dk), drop(&dv), drop(&dg), drop(&db), drop(&ds), drop(&dout);
  free(q), free(k), free(v), free(g), free(beta), free(st), free(o);
  free(qd), free(kd), free(vd), free(gd), free(bd), free(sd), free(ref);
}

static void test_hybrid(int quick) {
  if (!mi_platform_has(P, gated_delta_rule) || !mi_platform_has(P, copy2d) ||
      !mi_platform_has(P, rmsnorm_gated)) {
    printf("skip the hybrid blocks (ABI 1.4): not provided by this platform\n");
    return;
  }
  test_hybrid_rows(1, 1);
  test_hybrid_rows(7, 128);
  test_hybrid_rows(33, 300);
  test_hybrid_gates(1, 16);
  test_hybrid_gates(70, 32);
  test_hybrid_conv(1, 300, 4, 1);
  test_hybrid_conv(2, 50, 4, 1); /* T < K-1 */
  test_hybrid_conv(37, 700, 4, 0);
  test_hybrid_gdr(1, 1, 2, 4, 16, 16);    /* decode, grouped heads */
  test_hybrid_gdr(9, 4, 1, 3, 32, 8);     /* prefill in two calls */
  test_hybrid_gdr(70, 65, 2, 2, 16, 200); /* Dv over two blocks of columns */
  if (!quick) test_hybrid_gdr(300, 100, 16, 32, 128, 128); /* the ~1B hybrid's shape */
}

static void test_memory(void) {
  /* zeroed allocation, wrap_host upload, d2d copy inside one buffer */
  size_t n = 1 << 20;
  unsigned char *h = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 31 + 7);
  dbuf z = up(NULL, n);
  down(back, &z);
  size_t nz = 0;
  for (size_t i = 0; i < n; i++) nz += back[i] != 0;
  report("buffer_alloc is zeroed (1 MiB)", (double)nz, 0);
  mi_buffer *wb;
  if (P->buffer_wrap_host(C, h, n, &wb) != 0) die("buffer_wrap_host");
  dbuf w = {wb, P->buffer_ptr(C, wb), n};
  if (P->memcpy_d2d(C, S, z.d, w.d, n) != 0) die("memcpy_d2d");
  down(back, &z);
  report("buffer_wrap_host + memcpy_d2d round trip", (double)(memcmp(back, h, n) != 0), 0);
  drop(&w);
  drop(&z);
  free(h);
  free(back);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_conformance PLUGIN.so [--quick] [key=value ...]\n");
    return 2;
  }
  int quick = 0;
  mi_kv kv[32];
  size_t nkv = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      continue;
    }
    char *eq = strchr(argv[i], '=');
    if (!eq || nkv == 32) {
      fprintf(stderr, "gpu_conformance: argument '%s' is not key=value\n", argv[i]);
      return 2;
    }
    *eq = '\0';
    kv[nkv].key = argv[i];
    kv[nkv++].value = eq + 1;
  }
  mi_options opts = {kv, nkv};
  mi_plugin *pl = mi_plugin_load_file(argv[1], &opts);
  if (!pl || pl->status != MI_PLUGIN_LOADED) {
    fprintf(stderr, "gpu_conformance: %s: %s\n", argv[1], pl && pl->reason ? pl->reason : "cannot load");
    return 2;
  }
  if (!pl->desc || pl->desc->kind != MI_PLUGIN_PLATFORM) {
    fprintf(stderr, "gpu_conformance: %s is not a platform plugin\n", argv[1]);
    return 2;
  }
  P = pl->iface;
  C = pl->ctx;
  mi_device_info info = {0};
  if (P->device_info(C, 0, &info) == 0)
    printf("platform %s (%s): %s, %d CUs, simd %d, host_memory %d\n", pl->desc->name,
           P->variant(C), info.name, info.compute_units, info.simd_width, info.host_memory);
  if (P->stream_create(C, &S) != 0) die("stream_create");

  test_memory();
  const mi_dtype dts[] = {MI_DTYPE_BF16, MI_DTYPE_F16, MI_DTYPE_F32};
  for (int d = 0; d < 3; d++) {
    test_matmul(1, 67, 256, dts[d], 0);   /* GEMV, vector loads */
    test_matmul(3, 50, 100, dts[d], 0);   /* GEMV, scalar (K % 8 != 0) */
    test_matmul(1, 33, 64, dts[d], 1);    /* GEMV, misaligned weights */
    test_matmul(8, 40, 128, dts[d], 0);   /* GEMV, largest M */
    test_matmul(9, 70, 72, dts[d], 0);    /* tiled, edges */
    test_matmul(37, 130, 300, dts[d], 0); /* tiled, ragged tiles */
  }
  /* GGUF's block types: one block, several, GEMV and tiled, ragged N */
  const mi_dtype qts[] = {MI_DTYPE_Q8_0, MI_DTYPE_Q4_0, MI_DTYPE_Q4_1, MI_DTYPE_Q5_0, MI_DTYPE_Q5_1,
                          MI_DTYPE_Q2_K, MI_DTYPE_Q3_K, MI_DTYPE_Q4_K, MI_DTYPE_Q5_K, MI_DTYPE_Q6_K};
  for (int d = 0; d < (int)(sizeof qts / sizeof qts[0]); d++) {
    const int64_t qk = mi_dtype_block(qts[d]);
    test_matmul_block(1, 37, qk, qts[d]);        /* GEMV, one block */
    test_matmul_block(3, 50, 3 * qk, qts[d]);    /* GEMV, several rows */
    test_matmul_block(11, 70, 2 * qk, qts[d]);   /* tiled, ragged tiles */
    test_embed_block(qts[d], 40, 2 * qk, 7);
  }
  if (!quick) {
    test_matmul(1, 4096, 4096, MI_DTYPE_BF16, 0);  /* Qwen3-8B q/o decode */
    test_matmul(1, 4096, 12288, MI_DTYPE_BF16, 0); /* down_proj decode */
    test_matmul(64, 1024, 4096, MI_DTYPE_BF16, 0); /* k/v prefill chunk */
    test_matmul(300, 512, 1024, MI_DTYPE_F16, 0);
  }
  test_rmsnorm(5, 64, 0.0f);
  test_rmsnorm(3, 1000, 1.0f);
  test_rmsnorm(64, 128, 0.0f); /* per-head q/k norm */
  if (!quick) test_rmsnorm(7, 4096, 0.0f);
  test_rope(3, 4, 16, 16, 0);
  test_rope(5, 2, 64, 16, 2000); /* partial rotary */
  test_rope(2, 8, 128, 128, 40000);
  test_attention(1, 4, 2, 16, 0);
  test_attention(7, 4, 2, 16, 0);     /* prefill from 0 */
  test_attention(5, 6, 3, 32, 11);    /* chunk after 11 cached rows */
  test_attention(1, 8, 1, 64, 300);   /* decode, MQA */
  test_attention(1, 32, 8, 128, 150); /* Qwen3-8B decode */
  test_attention(20, 16, 16, 24, 3);  /* no GQA, odd D */
  if (!quick) {
    test_attention(1, 32, 8, 128, 1500); /* decode at long context: split-K */
    test_attention(1, 16, 8, 128, 3000);
    test_attention(77, 32, 8, 128, 0);   /* prefill */
    test_attention(33, 32, 8, 128, 700); /* chunked prefill */
    test_attention(3, 4, 1, 256, 40);    /* wide heads */
  }
  test_elementwise(1);
  test_elementwise(1000);
  test_elementwise(quick ? 70000 : 5000000); /* grid-stride past 65535 blocks when large */
  for (int d = 0; d < 3; d++) test_embed(dts[d], 1000, 64, 9);
  if (!quick) test_embed(MI_DTYPE_BF16, 151936, 1024, 40);
  test_argmax(3, 100);
  test_argmax(4, 151936);
  test_hybrid(quick);

  P->stream_destroy(C, S);
  printf("%d/%d cases passed\n", n_case - n_fail, n_case);
  mi_plugin_unload(pl);
  return n_fail ? 1 : 0;
}
