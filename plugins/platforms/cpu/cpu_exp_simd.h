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

/* e^r for x = n·ln2 + r; n (rounded) in *n. Written once for both widths
 * (V: the vector type, W: the intrinsics' prefix, _mm256 or _mm512; ROUND:
 * that width's round-to-integer): r = x - n·ln2 (ln2 in two parts), then
 * the Taylor polynomial of e^r in Horner form. */
#define CPU_EXP_REDUCE(name, V, W, ROUND)                                                          \
  CPU_EXP_AI V name(V x, V *n) {                                                                   \
    *n = ROUND(W##_mul_ps(x, W##_set1_ps(1.44269504f)),                                            \
               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                                     \
    V r = W##_fnmadd_ps(*n, W##_set1_ps(0.693147182f), x);                                         \
    r = W##_fnmadd_ps(*n, W##_set1_ps(-1.90465421e-9f), r);                                        \
    V p = W##_set1_ps(1.98412698e-4f);                                                             \
    p = W##_fmadd_ps(p, r, W##_set1_ps(1.38888889e-3f));                                           \
    p = W##_fmadd_ps(p, r, W##_set1_ps(8.33333333e-3f));                                           \
    p = W##_fmadd_ps(p, r, W##_set1_ps(4.16666667e-2f));                                           \
    p = W##_fmadd_ps(p, r, W##_set1_ps(1.66666667e-1f));                                           \
    p = W##_fmadd_ps(p, r, W##_set1_ps(0.5f));                                                     \
    p = W##_fmadd_ps(p, r, W##_set1_ps(1.0f));                                                     \
    return W##_fmadd_ps(p, r, W##_set1_ps(1.0f));                                                  \
  }

CPU_EXP_REDUCE(exp_reduce8, __m256, _mm256, _mm256_round_ps)

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
CPU_EXP_REDUCE(exp_reduce16, __m512, _mm512, _mm512_roundscale_ps)

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
