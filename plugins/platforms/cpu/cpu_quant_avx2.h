/* What the AVX2 quantized tiles share (cpu_quant_avx2.c, cpu_quant_legacy_
 * avx2.c, cpu_quant_lowbit_avx2.c): the tile's store, lane broadcasts and
 * reductions, the entry that cuts a tile into 2-token halves, and the
 * code unpacking the AVX-512 panels share with these tiles. Include only
 * from a file compiled with -mavx2 -mfma -mf16c (or more). */
#ifndef MI_CPU_QUANT_AVX2_H
#define MI_CPU_QUANT_AVX2_H

#include <immintrin.h>

#include "cpu_quant.h"
#include "cpu_reduce_avx2.h"

#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif
#define PF_AHEAD 1024 /* bytes prefetched ahead in each weight row */

/* Lane j of v in all 8 lanes. */
AI __m256 bcast_lane(__m256 v, int j) {
  return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j));
}

/* A tile's accumulators, all zero: rows past the tile's MR are never
 * read, but stay defined. */
AI void acc_zero(__m256 acc[2][4]) {
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      acc[i][j] = _mm256_setzero_ps();
}

/* The tile's sums (acc[i][j]: token i, weight row j) into y. */
AI void store(float *y, int64_t ldy, const int64_t col[4], __m256 acc[2][4], int MR, int nr,
              int accum) {
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < nr; j++) {
      float *yo = y + i * ldy + col[j];
      const float s = mi_hsum8_ps(acc[i][j]);
      *yo = accum ? *yo + s : s;
    }
}

/* The 8 int32 lanes of each s[j] summed: lane j of the result (horizontal
 * adds within 128-bit lanes, then the two halves added). */
AI __m256i sum8x8(const __m256i s[8]) {
  const __m256i u0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
  const __m256i u1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
  /* u0: lanes 0-3 s0..s3 over their low 128 bits, 4-7 over the high; u1: s4..s7 */
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* Bit i of x as byte i of the result: 0xff where set, 0 where clear. */
AI __m256i bits_to_bytes(uint32_t x) {
  const __m256i which = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                           0x0303030303030303); /* byte i/8 of x */
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), which);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull); /* bit i%8 */
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The 32 codes of the block at p of type t (0..15 or 0..31) and its d, m. */
AI __m256i legacy_codes(const uint8_t *p, const mi_dtype t, float *d, float *m) {
  const int hasm = t != MI_DTYPE_Q5_0, hash = t != MI_DTYPE_Q4_1;
  const __m128i q = _mm_loadu_si128((const __m128i *)(p + 2 + 2 * hasm + 4 * hash));
  __m256i wc = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
  if (hash) {
    uint32_t qh;
    memcpy(&qh, p + 2 + 2 * hasm, 4);
    wc = _mm256_or_si256(wc, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
  }
  *d = cpu_f16_at(p);
  *m = hasm ? cpu_f16_at(p + 2) : 0.0f;
  return wc;
}

/* Q3_K's 32 codes of activation block t (0..7) of the block at p, 0..7
 * (q + 4): the low two bits, bits 2·(t % 4) of qs[32·(t / 4) + l] (qs at
 * byte 32), and the third, bit t of hmask[l] (byte 0), at bit 2 (16-bit
 * shifts: the bits kept stay within their byte). */
AI __m256i q3_k_codes(const uint8_t *p, int t) {
  const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 32 + 32 * (t / 4)));
  const __m256i hm = _mm256_loadu_si256((const __m256i *)p);
  const __m256i lo =
      _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (t % 4))), _mm256_set1_epi8(3));
  const __m256i hb =
      _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(t)), _mm256_set1_epi8(1));
  return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
}

/* cpu_q3_k_scales in one xmm (the 16 scales u, 0..63): the low nibbles
 * of bytes 0-7 then their high ones, ORed with bits 2q, 2q+1 of each of
 * bytes 8-11 (word w) at bits 4-5 for scales 4q..4q+3. Reads the 12
 * bytes only (the block may end the mapping). */
AI __m128i q3_k_scales_x(const uint8_t *s12) {
  uint32_t w;
  memcpy(&w, s12 + 8, 4);
  const __m128i lo8 = _mm_loadl_epi64((const __m128i *)s12), m4 = _mm_set1_epi8(15);
  const __m128i low =
      _mm_unpacklo_epi64(_mm_and_si128(lo8, m4), _mm_and_si128(_mm_srli_epi16(lo8, 4), m4));
  const __m128i hi = _mm_and_si128(
      _mm_srlv_epi32(_mm_set1_epi32((int)w), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
  return _mm_or_si128(low, _mm_slli_epi16(hi, 4));
}

/* A tile entry (cpu_q_tile) over fn(MR, ...) for MR = 2, then 1. */
#define TILE_ENTRY(name, fn)                                                                       \
  void name(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row, int mr, \
            const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {                  \
    for (int i = 0; i < mr; i += 2) {                                                              \
      if (mr - i >= 2)                                                                             \
        fn(2, y + i * ldy, ldy, col, a, row + i, wr, nr, b0, b1, accum);                           \
      else                                                                                         \
        fn(1, y + i * ldy, ldy, col, a, row + i, wr, nr, b0, b1, accum);                           \
    }                                                                                              \
  }

#endif
