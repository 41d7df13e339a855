/* The Q4_1, Q5_0 and Q5_1 tiles, AVX2 (cpu_quant.h has the scheme):
 * llama.cpp's 32-value blocks beside Q4_0, a scale d and, for Q4_1 and
 * Q5_1, a min m added to every value; Q5_0 and Q5_1 keep each value's
 * fifth bit in a 32-bit word qh. Compiled with -mavx2 -mfma -mf16c; runs
 * on the avx2 and avx512 variants.
 *
 * Q4_0's tile with two additions: the fifth bits spread to bit 4 of each
 * code byte (a byte shuffle of qh and a compare), and the min term
 * m·fl(d_x·Σq_x) (cpu_q8_act.ds) added into lane 0 of the accumulator.
 * VPMADDUBSW pairs stay within int16: at most 2·31·127 = 7874, and Q5_0's
 * offset 16·(pair of q_x) at most 4064 more. */
#include <string.h>

#include "cpu_quant_avx2.h"

AI void legacy_mr(const int MR, const mi_dtype t, float *y, int64_t ldy, const int64_t col[4],
                  const cpu_q8_act *a, int64_t row, const void *const wr[4], int nr, int64_t b0,
                  int64_t b1, int accum) {
  const int hasm = t != MI_DTYPE_Q5_0;
  const size_t bb = mi_dtype_block_bytes(t);
  const int64_t nbp = a->kp / 32;
  const __m256i ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi8(16);
  __m256 acc[2][4];
  acc_zero(acc);
  for (int64_t b = b0; b < b1; b++) {
    __m256i xq[2], off[2];
    __m256 xd[2], xs[2];
    for (int i = 0; i < MR; i++) {
      xq[i] = _mm256_load_si256((const __m256i *)(a->q + (row + i) * a->kp + b * 32));
      off[i] = _mm256_maddubs_epi16(sixteen, xq[i]); /* Q5_0: 16·(pairs of q_x) */
      xd[i] = _mm256_broadcast_ss(a->d + (row + i) * nbp + b);
      xs[i] = hasm ? _mm256_broadcast_ss(a->ds + (row + i) * nbp + b) : _mm256_setzero_ps();
    }
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * bb;
      _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
      float d, m;
      const __m256i wc = legacy_codes(p, t, &d, &m);
      const __m256 dw = _mm256_set1_ps(d);
      const __m256 m0 = _mm256_zextps128_ps256(_mm_set_ss(m)); /* m in lane 0 */
      for (int i = 0; i < MR; i++) {
        __m256i p16 = _mm256_maddubs_epi16(wc, xq[i]);
        if (!hasm) p16 = _mm256_sub_epi16(p16, off[i]);
        const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[i][j] = _mm256_fmadd_ps(s, _mm256_mul_ps(xd[i], dw), acc[i][j]);
        if (hasm) acc[i][j] = _mm256_fmadd_ps(m0, xs[i], acc[i][j]);
      }
    }
  }
  store(y, ldy, col, acc, MR, nr, accum);
}

AI void q4_1_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  legacy_mr(MR, MI_DTYPE_Q4_1, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

AI void q5_0_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  legacy_mr(MR, MI_DTYPE_Q5_0, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

AI void q5_1_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  legacy_mr(MR, MI_DTYPE_Q5_1, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

TILE_ENTRY(cpu_q4_1_tile_avx2, q4_1_mr)
TILE_ENTRY(cpu_q5_0_tile_avx2, q5_0_mr)
TILE_ENTRY(cpu_q5_1_tile_avx2, q5_1_mr)
