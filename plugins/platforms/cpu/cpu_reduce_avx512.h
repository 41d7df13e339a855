/* Horizontal sums of 16 zmm accumulators at once (AVX-512F), for the
 * inner-product tiles: cheaper than 16 _mm512_reduce_add_ps (15 adds and
 * 30 shuffles instead of ~120 instructions); and int32 lanes summed by
 * 16-value groups (mi_fold4_epi32). Include only from a file compiled
 * with -mavx512f. */
#ifndef MI_CPU_REDUCE_AVX512_H
#define MI_CPU_REDUCE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* v[0..15] -> one vector: lane 4l + c = Σ lanes of v[4c + l]. Four levels
 * of adjacent pairs: 128-bit halves, then 128-bit lanes, then within lanes.
 * For a 4x4 tile with v[4i + j] = (token i, output j): lane 4j + i. */
static inline __attribute__((always_inline)) __m512 mi_reduce16_ps(const __m512 v[16]) {
  __m512 a[8], b[4], c[2];
  for (int q = 0; q < 8; q++)
    a[q] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * q], v[2 * q + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * q], v[2 * q + 1], 0xEE));
  /* a[q], 128-bit lane l: v[2q] (l < 2) or v[2q+1] (l >= 2), 4 partials */
  for (int r = 0; r < 4; r++)
    b[r] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * r], a[2 * r + 1], 0x88),
                         _mm512_shuffle_f32x4(a[2 * r], a[2 * r + 1], 0xDD));
  /* b[r], 128-bit lane l: the 4 partials of v[4r + l] */
  for (int t = 0; t < 2; t++)
    c[t] = _mm512_add_ps(_mm512_unpacklo_ps(b[2 * t], b[2 * t + 1]),
                         _mm512_unpackhi_ps(b[2 * t], b[2 * t + 1]));
  /* c[t], lane l: (v[8t + l], v[8t + 4 + l], v[8t + l], v[8t + 4 + l]), 2 partials each */
  return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x44), _mm512_shuffle_ps(c[0], c[1], 0xEE));
}

/* The int32 lanes of 4 vectors, each two halves of 8 lanes (half A_g in
 * lanes 0-7, B_g in 8-15), added within their halves into one vector:
 * lane 4L + e holds A_e (128-bit lanes L = 0, 1) or B_e (L = 2, 3), 2
 * lanes each. Unpacks and adds: cheaper than 3 more converts and FMAs. */
static inline __attribute__((always_inline)) __m512i mi_fold4_epi32(const __m512i I[4]) {
  const __m512i a =
      _mm512_add_epi32(_mm512_unpacklo_epi32(I[0], I[1]), _mm512_unpackhi_epi32(I[0], I[1]));
  const __m512i b =
      _mm512_add_epi32(_mm512_unpacklo_epi32(I[2], I[3]), _mm512_unpackhi_epi32(I[2], I[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* The 4x4 tile's sums (v[4i + j]) into y[i·ldy + col[j]] for i < mr, j < nr;
 * accum: add to what is there. */
static inline __attribute__((always_inline)) void mi_store4x4(float *y, int64_t ldy,
                                                              const int64_t col[4],
                                                              const __m512 v[16], int mr, int nr,
                                                              int accum) {
  float s[16] __attribute__((aligned(64)));
  _mm512_store_ps(s, mi_reduce16_ps(v)); /* lane 4j + i: token i, output j */
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float *d = y + i * ldy + col[j];
      *d = accum ? *d + s[4 * j + i] : s[4 * j + i];
    }
}

/* One token's 4 sums (v[j]: output j) into y[col[j]] for j < nr; accum:
 * add to what is there. mi_store4x4 at mr = 1 without its 12 empty
 * vectors: pairs, then 128-bit lanes folded. */
static inline __attribute__((always_inline)) void
mi_store1x4(float *y, const int64_t col[4], const __m512 v[4], int nr, int accum) {
  /* lanes of a: within each 128-bit lane, v0 and v1's pair sums */
  const __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
  const __m512 b = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
  /* lane 4L + j: the 128-bit lane L's partial of v[j] (j = 0, 2 / 1, 3 as unpacked) */
  const __m512 c =
      _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))),
                    _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(c),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1)));
  float s[4];
  _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  /* s = (v0, v1, v2, v3) summed */
  for (int j = 0; j < nr; j++)
    y[col[j]] = accum ? y[col[j]] + s[j] : s[j];
}

#endif
