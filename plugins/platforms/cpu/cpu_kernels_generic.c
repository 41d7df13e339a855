/* Per-ISA inner loops, portable C (the "generic" variant and the fallback
 * on every machine). Eight independent partial sums per dot product so the
 * compiler can vectorise without -ffast-math (it may not reassociate a
 * single running sum) and so FMA latency is hidden. */
#include "cpu_internal.h"

#define GW 8 /* partial sums */

static inline float load_w(const void *w, int64_t k, mi_dtype dt) {
  switch (dt) {
  case MI_DTYPE_BF16: return mi_bf16_to_f32(((const uint16_t *)w)[k]);
  case MI_DTYPE_F16: return mi_f16_to_f32(((const uint16_t *)w)[k]);
  default: return ((const float *)w)[k];
  }
}

/* Converts one weight row chunk to f32 once, then reuses it for every x row
 * of the tile: with M > 1 that amortises the (slow, portable) conversion. */
#define GCHUNK 256

static void matmul_tile(float *y, const float *x, const void *w, mi_dtype dt, int64_t N,
                        int64_t K, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  size_t es = mi_dtype_size(dt);
  float wf[GCHUNK];
  for (int64_t n = n0; n < n1; n++) {
    const char *wr = (const char *)w + (size_t)n * (size_t)K * es;
    for (int64_t m = m0; m < m1; m++) y[m * N + n] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += GCHUNK) {
      int64_t kn = K - k0 < GCHUNK ? K - k0 : GCHUNK;
      for (int64_t k = 0; k < kn; k++) wf[k] = load_w(wr, k0 + k, dt);
      for (int64_t m = m0; m < m1; m++) {
        const float *xr = x + m * K + k0;
        float acc[GW] = {0};
        int64_t k = 0;
        for (; k + GW <= kn; k += GW)
          for (int j = 0; j < GW; j++) acc[j] += xr[k + j] * wf[k + j];
        for (; k < kn; k++) acc[k % GW] += xr[k] * wf[k];
        float s = 0.0f;
        for (int j = 0; j < GW; j++) s += acc[j];
        y[m * N + n] += s;
      }
    }
  }
}

static float dot(const float *a, const float *b, int64_t n) {
  float acc[GW] = {0};
  int64_t i = 0;
  for (; i + GW <= n; i += GW)
    for (int j = 0; j < GW; j++) acc[j] += a[i + j] * b[i + j];
  for (; i < n; i++) acc[i % GW] += a[i] * b[i];
  float s = 0.0f;
  for (int j = 0; j < GW; j++) s += acc[j];
  return s;
}

static void axpy(float *y, float a, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void scal(float *y, float a, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] *= a;
}

static void dot4(const float *a, const float *b, int64_t stride, int64_t n, float out[4]) {
  for (int i = 0; i < 4; i++) out[i] = dot(a, b + i * stride, n);
}

static void axpy4(float *y, const float c[4], const float *x, int64_t stride, int64_t n) {
  const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
  for (int64_t d = 0; d < n; d++) y[d] += c[0] * x0[d] + c[1] * x1[d] + c[2] * x2[d] + c[3] * x3[d];
}

static void to_f32(float *dst, const void *src, mi_dtype dt, int64_t n) {
  const uint16_t *h = src;
  if (dt == MI_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) dst[i] = mi_bf16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = mi_f16_to_f32(h[i]);
}

/* silu_mul and from_f32 stay NULL: the callers' portable loops serve. */
const cpu_kernel_set cpu_kernels_generic = {CPU_KERNEL_SET_BASE("generic", matmul_tile)};
