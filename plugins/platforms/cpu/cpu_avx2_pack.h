/* Weight-panel packing for the outer-product prefill matmul, shared by the
 * files compiled with -mavx2 (cpu_kernels_avx2.c, cpu_kernels_avx512.c);
 * include it from nowhere else.
 *
 * A panel is the f32, k-major copy of nb consecutive weight rows over kc
 * values of k: panel[k·nb + j] = w[n + j][k0 + k]. Built from 8x8 blocks:
 * 8 rows of 8 values are loaded (and widened from bf16/f16, exactly),
 * transposed in registers and stored as 8 panel rows, so a weight costs
 * about one load and one store instead of a scalar store each (the scalar
 * transpose cost as much as the tile work itself below ~32 activation
 * rows). */
#ifndef MI_CPU_AVX2_PACK_H
#define MI_CPU_AVX2_PACK_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "mi/tensor.h"

#define MI_PACK_AI static inline __attribute__((always_inline))

/* 8 values from element k of p as f32 (bf16: zero-extend, shift left 16;
 * f16: vcvtph2ps; both exact). */
MI_PACK_AI __m256 mi_pack_ld8(const void *p, int64_t k, mi_dtype dt) {
  if (dt == MI_DTYPE_BF16) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  if (dt == MI_DTYPE_F16)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + k)));
  return _mm256_loadu_ps((const float *)p + k);
}

/* The last r < 8 values, zero padded (never reads past them). */
MI_PACK_AI __m256 mi_pack_ld8_tail(const void *p, int64_t k, int64_t r, mi_dtype dt) {
  if (dt == MI_DTYPE_F32) {
    float buf[8] = {0};
    memcpy(buf, (const float *)p + k, (size_t)r * 4);
    return _mm256_loadu_ps(buf);
  }
  uint16_t buf[8] = {0};
  memcpy(buf, (const uint16_t *)p + k, (size_t)r * 2);
  return mi_pack_ld8(buf, 0, dt);
}

/* r[i][j] <-> r[j][i] for an 8x8 block of floats held as 8 rows. */
MI_PACK_AI void mi_pack_transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* panel[k·nb + j] = f32(w[n + j][k0 + k]) for k < kc, j < nb (a multiple
 * of 8); columns j >= nr (rows past the matrix's end) are zero. w rows are
 * wrow bytes apart; panel is 32-byte aligned. */
MI_PACK_AI void mi_pack_panel(float *panel, const int nb, const void *w, mi_dtype dt, size_t wrow,
                              int64_t n, int nr, int64_t k0, int64_t kc) {
  const size_t es = mi_dtype_size(dt);
  for (int jb = 0; jb < nb; jb += 8) {
    const char *src[8];
    for (int j = 0; j < 8; j++)
      src[j] = jb + j < nr ? (const char *)w + (size_t)(n + jb + j) * wrow + (size_t)k0 * es : NULL;
    for (int64_t k = 0; k < kc; k += 8) {
      const int64_t r = kc - k < 8 ? kc - k : 8;
      __m256 v[8];
      for (int j = 0; j < 8; j++)
        v[j] = !src[j] ? _mm256_setzero_ps()
               : r == 8 ? mi_pack_ld8(src[j], k, dt)
                        : mi_pack_ld8_tail(src[j], k, r, dt);
      mi_pack_transpose8(v);
      for (int i = 0; i < r; i++) _mm256_store_ps(panel + (k + i) * nb + jb, v[i]);
    }
  }
}

/* The outer-product matmul's loop order (matmul_outer in both files):
 * x (M rows of K f32) larger than this stays out of L2 when every panel
 * reads all of it, so K goes outermost with MI_OUTER_MB-row blocks of x
 * (a [MI_OUTER_MB][256] f32 slice: 256 KB). Smaller x keeps the
 * panel-by-panel order, whose weight reads are sequential per row. */
#define MI_OUTER_X_L2 ((int64_t)384 << 10)
#define MI_OUTER_MB 256

MI_PACK_AI int mi_outer_k_first(int64_t M, int64_t K) { return M * K * 4 > MI_OUTER_X_L2; }

/* Prefetches into L2 weight rows n .. min(n + nb, n1) - 1 over k0 .. k0+kc-1
 * (the next panel): in the K-first order the panels jump from row block
 * to row block, where the hardware prefetchers do not follow. */
MI_PACK_AI void mi_prefetch_rows(const void *w, mi_dtype dt, size_t wrow, int64_t n, int64_t n1,
                                 int nb, int64_t k0, int64_t kc) {
  const size_t es = mi_dtype_size(dt), len = (size_t)kc * es;
  const int64_t e = n + nb < n1 ? n + nb : n1;
  for (int64_t r = n; r < e; r++) {
    const char *p = (const char *)w + (size_t)r * wrow + (size_t)k0 * es;
    for (size_t o = 0; o < len; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
    _mm_prefetch(p + len - 1, _MM_HINT_T1);
  }
}

#endif
