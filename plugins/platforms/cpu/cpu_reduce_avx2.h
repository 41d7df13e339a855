/* Horizontal reductions of one ymm (AVX), shared by the files compiled
 * with -mavx2 (cpu_kernels_avx2.c, cpu_q8_0_avx2.c, cpu_quant_avx2.c).
 * Include only from such a file. */
#ifndef MI_CPU_REDUCE_AVX2_H
#define MI_CPU_REDUCE_AVX2_H

#include <immintrin.h>

/* Σ of the 8 lanes: halves, then pairs, then the last two. */
static inline __attribute__((always_inline)) float mi_hsum8_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* max of the 8 lanes, in the same order. */
static inline __attribute__((always_inline)) float mi_hmax8_ps(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#endif
