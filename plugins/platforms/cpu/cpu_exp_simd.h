/* The vector e^x of the CPU kernels (attention's softmax, silu), for the
 * files built with -mavx2 (ymm) and, under __AVX512F__, -mavx512f (zmm).
 * One reduction and polynomial, to about 1 ulp: x = n·ln2 + r, |r| <= ln2/2
 * (ln2 in two parts), e^r by its degree-7 Taylor polynomial; the callers
 * differ only in how they build 2^n and what they do at the ends:
 *   exp_neg*:     x <= 0; below ln(FLT_MIN) (and for -inf) 0.
 *   exp_clamped*: x in [-86, 89] (callers clamp); times 2^(n-1)·2, so that
 *                 n = 128 (x near 88.7) overflows to inf as expf does
 *                 instead of wrapping the exponent field. */
#ifndef MI_CPU_EXP_SIMD_H
#define MI_CPU_EXP_SIMD_H

#include <immintrin.h>

#define CPU_EXP_AI static inline __attribute__((always_inline))

/* e^r for x = n·ln2 + r; n (rounded) in *n */
CPU_EXP_AI __m256 exp_reduce8(__m256 x, __m256 *n) {
  *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693147182f), x);
  r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(-1.90465421e-9f), r);
  __m256 p = _mm256_set1_ps(1.98412698e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.38888889e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.33333333e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.16666667e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.66666667e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
}

CPU_EXP_AI __m256 exp_neg8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33f);
  __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ), n;
  __m256 p = exp_reduce8(_mm256_max_ps(x, lo), &n);
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

CPU_EXP_AI __m256 exp_clamped8(__m256 x) {
  __m256 n, p = exp_reduce8(x, &n);
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
}

#ifdef __AVX512F__
CPU_EXP_AI __m512 exp_reduce16(__m512 x, __m512 *n) {
  *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693147182f), x);
  r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(-1.90465421e-9f), r);
  __m512 p = _mm512_set1_ps(1.98412698e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888889e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
}

CPU_EXP_AI __m512 exp_neg16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33f);
  __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  __m512 n, p = exp_reduce16(_mm512_max_ps(x, lo), &n);
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
}

CPU_EXP_AI __m512 exp_clamped16(__m512 x) {
  __m512 n, p = exp_reduce16(x, &n);
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(126)), 23);
  return _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(e)), _mm512_set1_ps(2.0f));
}
#endif

#endif
