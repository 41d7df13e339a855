/* AVX-512 loads shared by the files compiled with -mavx512f
 * (cpu_kernels_avx512.c, cpu_attn_avx512.c); include it from nowhere else. */
#ifndef MI_CPU_AVX512_LOAD_H
#define MI_CPU_AVX512_LOAD_H

#include <immintrin.h>
#include <stdint.h>

#include "mi/tensor.h"

/* 16 values from element k of p (f32, f16 or bf16) as f32. Widening is
 * exact: bf16 is zero-extended to 32 bits and shifted left 16; f16 goes
 * through vcvtph2ps. */
static inline __attribute__((always_inline)) __m512 mi_avx512_ld(const void *p, int64_t k,
                                                                 mi_dtype dt) {
  if (dt == MI_DTYPE_BF16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (dt == MI_DTYPE_F16)
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k)));
  return _mm512_loadu_ps((const float *)p + k);
}

#endif
