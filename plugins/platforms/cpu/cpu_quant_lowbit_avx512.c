/* The Q2_K and Q3_K one-token (decode) tiles, AVX-512 with VNNI
 * (cpu_quant.h has the scheme); taller tiles are the AVX2 ones
 * (cpu_quant_lowbit_avx2.c). Compiled with the flags of cpu_quant_avx512.c
 * and reached only through its ops (cpu_isa_info's avx512_vnni).
 *
 * As Q6_K's one-token tile: code vector g holds values 64g..64g+63 as
 * unsigned bytes (Q2_K's q, Q3_K's q + 4), unpacked from one 32-byte load
 * broadcast to both halves and shifted per half (VPSRLVW: activation
 * blocks 2g and 2g+1 sit at different bit pairs of the same bytes);
 * VPDPBUSD against q_x, then mi_fold4_epi32 leaves in lane 4L + g the whole
 * integer sum of sub-block 4g + L. What does not depend on the codes comes
 * from X_s, Σ q_x over sub-block s (cpu_q8_act.x16), once per block and
 * token, in the same lane order: Q3_K's offset 4·X_s is subtracted in
 * integers (so what is converted is exactly Σ q_x·q, as on AVX2), Q2_K's
 * min dmin·m_s·d_x·X_s is a second FMA. Per block and row: 4 code vectors,
 * 4 VPDPBUSD, one fold, one convert and one FMA (two for Q2_K) with the
 * sub-blocks' scales times d times d_x permuted to that lane order. */
#include <immintrin.h>
#include <string.h>

#include "cpu_quant_avx2.h"
#include "cpu_reduce_avx512.h"

/* Lane 4L + g <- sub-block 4g + L, and its activation block (4g + L) / 2:
 * mi_fold4_epi32's order. */
#define LANE_SUB _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
#define LANE_BLK _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7)

/* The 2-bit fields of values 64g..64g+63: value 128n + 32j + l is bits
 * 2j, 2j+1 of qs[32n + l]; g covers n = g / 2, j = 2(g % 2) and
 * 2(g % 2) + 1 (the two halves). */
AI __m512i two_bits(const uint8_t *qs, int g) {
  const __m512i v =
      _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (g / 2))));
  const short c = (short)(4 * (g % 2));
  const __m512i cnt =
      _mm512_inserti64x4(_mm512_set1_epi16(c), _mm256_set1_epi16((short)(c + 2)), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(v, cnt), _mm512_set1_epi8(3));
}

/* Q3_K's codes q + 4 (0..7) of values 64g..64g+63: the low two bits and
 * bit t of hmask[l] (t = 2g, 2g + 1: the activation block) at bit 2. */
AI __m512i q3_k_codes512(const uint8_t *p, int g) {
  const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
  __m512i hb;
  if (g == 0) { /* bits 0, 1 up to 2 */
    const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16(2), _mm256_set1_epi16(1), 1);
    hb = _mm512_sllv_epi16(hm, cnt);
  } else { /* bits 2g, 2g + 1 down to 2 */
    const short c = (short)(2 * g - 2);
    const __m512i cnt =
        _mm512_inserti64x4(_mm512_set1_epi16(c), _mm256_set1_epi16((short)(c + 1)), 1);
    hb = _mm512_srlv_epi16(hm, cnt);
  }
  return _mm512_or_si512(two_bits(p + 32, g), _mm512_and_si512(hb, _mm512_set1_epi8(4)));
}

AI void lowbit_m1(const int three, float *y, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                  const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  __m512 acc[4];
  for (int j = 0; j < 4; j++)
    acc[j] = _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    const int8_t *x = a->q + row * a->kp + b * 256;
    __m512i xa[4];
    for (int g = 0; g < 4; g++)
      xa[g] = _mm512_load_si512((const void *)(x + 64 * g));
    const __m512 dx = _mm512_permutexvar_ps(
        LANE_BLK, _mm512_castps256_ps512(_mm256_loadu_ps(a->d + row * nbp + b * 8)));
    /* X_s in lane order (at most 16·127) */
    const __m512i xs = _mm512_permutexvar_epi32(
        LANE_SUB, _mm512_cvtepi16_epi32(
                      _mm256_loadu_si256((const __m256i *)(a->x16 + row * (a->kp / 16) + b * 16))));
    const __m512i xs4 = _mm512_slli_epi32(xs, 2);
    const __m512 xsf = _mm512_cvtepi32_ps(xs);
    for (int j = 0; j < 4; j++) {
      const uint8_t *p =
          (const uint8_t *)wr[j] + (size_t)b * (three ? CPU_Q3_K_BYTES : CPU_Q2_K_BYTES);
      _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char *)p + PF_AHEAD + 64, _MM_HINT_T0);
      __m512i I[4];
      for (int g = 0; g < 4; g++)
        I[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                   three ? q3_k_codes512(p, g) : two_bits(p + 16, g), xa[g]);
      __m512i tot = mi_fold4_epi32(I); /* lane 4L + g: Σ q_x·code over sub-block 4g + L */
      if (three) {
        tot = _mm512_sub_epi32(tot, xs4); /* exactly Σ q_x·q: at most 16·127·4 */
        const __m512i u = _mm512_cvtepu8_epi32(q3_k_scales_x(p + 96));
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_sub_epi32(u, _mm512_set1_epi32(32)));
        const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(LANE_SUB, sc), dx),
                                       _mm512_set1_ps(cpu_f16_at(p + 108)));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), f, acc[j]);
      } else {
        const __m512i sm = _mm512_permutexvar_epi32(
            LANE_SUB, _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_and_si512(sm, _mm512_set1_epi32(15)));
        const __m512 mn = _mm512_cvtepi32_ps(_mm512_srli_epi32(sm, 4));
        const __m512 f = _mm512_mul_ps(_mm512_mul_ps(sc, dx), _mm512_set1_ps(cpu_f16_at(p + 80)));
        const __m512 fm = _mm512_mul_ps(_mm512_mul_ps(mn, dx), _mm512_set1_ps(cpu_f16_at(p + 82)));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), f, acc[j]);
        acc[j] = _mm512_fnmadd_ps(xsf, fm, acc[j]);
      }
    }
  }
  mi_store1x4(y, col, acc, nr, accum);
}

/* The tile entry of type three (Q3_K) or not: one token here, more on the
 * AVX2 tiles. */
#define LOWBIT_ENTRY(name, three, taller)                                                          \
  void name(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row, int mr, \
            const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {                  \
    if (mr == 1)                                                                                   \
      lowbit_m1(three, y, col, a, row, wr, nr, b0, b1, accum);                                     \
    else                                                                                           \
      taller(y, ldy, col, a, row, mr, wr, nr, b0, b1, accum);                                      \
  }

LOWBIT_ENTRY(cpu_q2_k_tile_avx512, 0, cpu_q2_k_tile_avx2)
LOWBIT_ENTRY(cpu_q3_k_tile_avx512, 1, cpu_q3_k_tile_avx2)
