/* Per-ISA inner loops, AVX-512F. This file alone is compiled with
 * -mavx512f -mavx2 -mfma -mf16c (see CMakeLists.txt); nothing here runs
 * unless cpu_isa.c found AVX-512F with OS-enabled ZMM state.
 *
 * Matmul: y[m,n] = Σ_k x[m,k]·w[n,k]. Weights are converted to f32 in
 * registers (bf16: zero-extend to 32 bits and shift left 16 — exact; f16:
 * vcvtph2ps — exact) and accumulated with f32 FMA, so the only error is f32
 * accumulation order. Register tiles:
 *   4x4: 4 rows of x times 4 rows of w, 16 zmm accumulators. Each converted
 *        weight vector is reused for 4 activation rows (prefill).
 *   1x4: one row of x (decode GEMV, memory bound): streams 4 weight rows.
 * Tails (K not a multiple of 16, fewer than 4 rows) are handled with masked
 * or zero-padded loads, and by clamping row pointers to the last valid row
 * (the duplicate results are discarded).
 */
#include <immintrin.h>
#include <string.h>

#include "cpu_internal.h"

#define AI static inline __attribute__((always_inline))
#define VL 16

AI __m512 ld_w(const void *w, int64_t k, mi_dtype dt) {
  if (dt == MI_DTYPE_BF16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (dt == MI_DTYPE_F16)
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
  return _mm512_loadu_ps((const float *)w + k);
}

/* The last r < 16 elements, zero padded. Padding is 0 in both x and w, so
 * it adds exact zeros to the sums. */
AI __m512 ld_w_tail(const void *w, int64_t k, int64_t r, mi_dtype dt) {
  if (dt == MI_DTYPE_F32) return _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1), (const float *)w + k);
  uint16_t buf[VL] = {0};
  memcpy(buf, (const uint16_t *)w + k, (size_t)r * 2);
  return ld_w(buf, 0, dt);
}

AI __m512 ld_x_tail(const float *x, int64_t k, int64_t r) {
  return _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1), x + k);
}

/* One MR x NR register tile over the whole K. mr <= MR and nr <= NR are the
 * valid rows/columns. MR, NR are compile-time constants after inlining, so
 * acc[][] lives in registers. */
AI void tile(const int MR, const int NR, float *y, int64_t ldy, const float *x, int64_t K,
             const char *w, size_t wrow, mi_dtype dt, int mr, int nr) {
  const float *xr[4];
  const char *wr[4];
  for (int i = 0; i < MR; i++) xr[i] = x + (i < mr ? i : mr - 1) * K;
  for (int j = 0; j < NR; j++) wr[j] = w + (size_t)(j < nr ? j : nr - 1) * wrow;
  __m512 acc[4][4];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + VL <= K; k += VL) {
    __m512 wv[4];
    for (int j = 0; j < NR; j++) wv[j] = ld_w(wr[j], k, dt);
    for (int i = 0; i < MR; i++) {
      __m512 xv = _mm512_loadu_ps(xr[i] + k);
      for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < K) {
    int64_t r = K - k;
    __m512 wv[4];
    for (int j = 0; j < NR; j++) wv[j] = ld_w_tail(wr[j], k, r, dt);
    for (int i = 0; i < MR; i++) {
      __m512 xv = ld_x_tail(xr[i], k, r);
      for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) y[i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

AI void matmul_dt(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                  int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  size_t wrow = (size_t)K * mi_dtype_size(dt);
  /* Block over M so the activation rows swept for each weight tile stay in
   * L2 (~256 KB of x), while each weight tile (4 rows) stays in L1. */
  int64_t mb = (256 * 1024) / (K * 4);
  mb = mb < 4 ? 4 : mb / 4 * 4;
  for (int64_t ms = m0; ms < m1; ms += mb) {
    int64_t me = ms + mb < m1 ? ms + mb : m1;
    for (int64_t n = n0; n < n1; n += 4) {
      int nr = n1 - n < 4 ? (int)(n1 - n) : 4;
      const char *wn = (const char *)w + (size_t)n * wrow;
      int64_t m = ms;
      for (; m + 4 <= me; m += 4) tile(4, 4, y + m * N + n, N, x + m * K, K, wn, wrow, dt, 4, nr);
      for (; m < me; m++) tile(1, 4, y + m * N + n, N, x + m * K, K, wn, wrow, dt, 1, nr);
    }
  }
}

static void matmul_tile(float *y, const float *x, const void *w, mi_dtype dt, int64_t N,
                        int64_t K, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  switch (dt) {
  case MI_DTYPE_BF16: matmul_dt(y, x, w, MI_DTYPE_BF16, N, K, m0, m1, n0, n1); break;
  case MI_DTYPE_F16: matmul_dt(y, x, w, MI_DTYPE_F16, N, K, m0, m1, n0, n1); break;
  default: matmul_dt(y, x, w, MI_DTYPE_F32, N, K, m0, m1, n0, n1); break;
  }
}

static float dot(const float *a, const float *b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * VL <= n; i += 2 * VL) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + VL), _mm512_loadu_ps(b + i + VL), s1);
  }
  for (; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void axpy(float *y, float a, const float *x, int64_t n) {
  __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 r = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, r);
  }
}

static void scal(float *y, float a, int64_t n) {
  __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

const cpu_kernel_set cpu_kernels_avx512 = {
    .name = "avx512", .matmul_tile = matmul_tile, .dot = dot, .axpy = axpy, .scal = scal};
