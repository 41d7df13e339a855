/* The Q2_K and Q3_K tiles, AVX2 (cpu_quant.h has the scheme): 256-value
 * blocks of 2- and 3-bit codes in 16 sub-blocks of 16, each with a scale
 * of its own (Q2_K also a min). Compiled with -mavx2 -mfma -mf16c; runs on
 * the avx2 and avx512 variants.
 *
 * An activation block t (32 values, sub-blocks 2t and 2t+1) takes its 32
 * codes from one 32-byte load shifted by 2·(t % 4) (Q3_K's third bit from
 * hmask shifted by t), VPMADDUBSW against q_x: int16 lanes 0-7 are
 * sub-block 2t's pairs, 8-15 sub-block 2t+1's, so VPMADDWD with a vector
 * holding scale 2t in lanes 0-7 and 2t+1 in 8-15 applies both scales and
 * adds pairs into int32 (Q3_K's offset -4 comes off first as 4·(pairs of
 * q_x); Q2_K's min as (pairs of q_x)·m, the same way). All within int16:
 * at most 2·7·127 = 1778 a pair. One token: a weight block's 8 activation
 * blocks are folded in integers (sum8x8, lane t block t) before one
 * convert and one FMA, as Q6_K's. */
#include <string.h>

#include "cpu_quant_avx2.h"

/* The byte shuffles that put int16 lane 2jj of a 128-bit lane into int16
 * lanes 0-7 and lane 2jj + 1 into 8-15 (of a ymm whose two halves are the
 * same 8 scales): activation block 4n + jj's two sub-block scales. */
#define PAIR(w0)                                                                                   \
  w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1
static const uint8_t PAIR_SEL[4][32] __attribute__((aligned(32))) = {
    {PAIR(0), PAIR(2)}, {PAIR(4), PAIR(6)}, {PAIR(8), PAIR(10)}, {PAIR(12), PAIR(14)}};
#undef PAIR

/* 16 int16 scales as two ymm, g[n] holding scales 8n..8n+7 in both halves. */
AI void scale_groups(__m256i s16, __m256i g[2]) {
  g[0] = _mm256_permute2x128_si256(s16, s16, 0x00);
  g[1] = _mm256_permute2x128_si256(s16, s16, 0x11);
}

/* d (or dmin) times token i's 8 activation scales of block b. */
AI __m256 times_dx(float d, const cpu_q8_act *a, int64_t row, int i, int64_t b) {
  return _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(a->d + (row + i) * (a->kp / 32) + b * 8));
}

/* Lane t: Σ_h s_{2t+h}·X_{2t+h} over block b's 16 sub-blocks, s the 16
 * int16 scales (or mins) and X token i's Σ q_x per 16 values
 * (cpu_q8_act.x16): VPMADDWD adds exactly the two sub-blocks of each
 * activation block. */
AI __m256i per_block_x(__m256i s16, const cpu_q8_act *a, int64_t row, int i, int64_t b) {
  const __m256i x =
      _mm256_loadu_si256((const __m256i *)(a->x16 + (row + i) * (a->kp / 16) + b * 16));
  return _mm256_madd_epi16(s16, x);
}

/* The tile of both types (three: Q3_K). Per weight block, row and token:
 * the code sums Σ_h s·Σ q_x·c of the 8 activation blocks t (c the
 * unsigned code) folded into lane t (sum8x8), then the term that does not
 * depend on the codes, lane t of per_block_x: Q3_K's offset 4·Σ_h (u -
 * 32)·X (c = q + 4) subtracted in integers, Q2_K's mins dmin·Σ_h m·X as
 * their own FMA (a term of its own in the definition). */
AI void lowbit_mr(const int MR, const int three, float *y, int64_t ldy, const int64_t col[4],
                  const cpu_q8_act *a, int64_t row, const void *const wr[4], int nr, int64_t b0,
                  int64_t b1, int accum) {
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc[2][4];
  acc_zero(acc);
  for (int64_t b = b0; b < b1; b++) {
    for (int j = 0; j < 4; j++) {
      const uint8_t *p =
          (const uint8_t *)wr[j] + (size_t)b * (three ? CPU_Q3_K_BYTES : CPU_Q2_K_BYTES);
      _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char *)p + PF_AHEAD + 64, _MM_HINT_T0);
      __m256i s16, k16; /* the code scales; the code-free term's (Q3_K's offset, Q2_K's mins) */
      float d, ndmin = 0.0f; /* -dmin (Q2_K) */
      if (three) {
        const __m128i us = _mm_sub_epi8(q3_k_scales_x(p + 96), _mm_set1_epi8(32));
        s16 = _mm256_cvtepi8_epi16(us);
        k16 = s16;
        d = cpu_f16_at(p + 108);
      } else {
        const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
        s16 = _mm256_and_si256(sm, _mm256_set1_epi16(15));
        k16 = _mm256_srli_epi16(sm, 4);
        d = cpu_f16_at(p + 80);
        ndmin = -cpu_f16_at(p + 82);
      }
      __m256i scg[2];
      scale_groups(s16, scg);
      __m256 f[2], g[2]; /* d·d_x, -dmin·d_x (Q2_K) per token */
      for (int i = 0; i < MR; i++) {
        f[i] = times_dx(d, a, row, i, b);
        g[i] = times_dx(ndmin, a, row, i, b);
      }
      __m256i st[2][8]; /* per token, block t's int32 lanes */
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) {
        __m256i wc;
        if (three) {
          wc = q3_k_codes(p, t); /* q + 4 */
        } else {
          const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * (t / 4)));
          wc = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (t % 4))), m3);
        }
        const __m256i scv =
            _mm256_shuffle_epi8(scg[t / 4], _mm256_load_si256((const __m256i *)PAIR_SEL[t % 4]));
        for (int i = 0; i < MR; i++) {
          const __m256i xq =
              _mm256_load_si256((const __m256i *)(a->q + (row + i) * a->kp + b * 256 + 32 * t));
          st[i][t] = _mm256_madd_epi16(_mm256_maddubs_epi16(wc, xq), scv);
        }
      }
      for (int i = 0; i < MR; i++) {
        /* lane t: block t's whole code sum, folded in integers (at most
         * 2·32·16·127·7 < 2^31); Q3_K's offset comes off there too, so
         * what is converted is exactly Σ_h (u - 32)·Σ q_x·q (< 2^24) */
        __m256i tot = sum8x8(st[i]);
        const __m256i kx = per_block_x(k16, a, row, i, b); /* lane t at most 2·32·16·127 */
        if (three) {
          tot = _mm256_sub_epi32(tot, _mm256_slli_epi32(kx, 2));
        } else { /* Q2_K: less dmin·Σ_h m·X */
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(kx), g[i], acc[i][j]);
        }
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), f[i], acc[i][j]);
      }
    }
  }
  store(y, ldy, col, acc, MR, nr, accum);
}

AI void q2_k_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  lowbit_mr(MR, 0, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

AI void q3_k_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  lowbit_mr(MR, 1, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

TILE_ENTRY(cpu_q2_k_tile_avx2, q2_k_mr)
TILE_ENTRY(cpu_q3_k_tile_avx2, q3_k_mr)
