/* The Q4_0, Q4_K, Q5_K and Q6_K tiles, AVX2 (cpu_quant.h has the scheme).
 * Compiled with -mavx2 -mfma -mf16c like cpu_q8_0_avx2.c; runs on the avx2
 * variant and on avx512 without AVX512_VNNI/BW.
 *
 * 32 codes (one activation block) per ymm, unpacked with shifts and ANDs.
 * VPMADDUBSW takes the unsigned codes against the signed q_x: each int16
 * pair sum is at most 2·63·127 = 16002, no saturation. The codes' offset
 * (-8, -32) comes off as the same instruction on the constant (once per
 * token and activation block, shared by the 4 weight rows), subtracted in
 * int16. VPMADDWD then adds pairs into int32 lanes: with ones, or for Q6_K
 * with the sub-block's int8 scale (exact: at most 128·2·(16002 + 8128)).
 * The int32 lanes are converted to f32 and added with the block's scale
 * (d·d_x, or d·sc_j·d_x for Q4_K, one 8-lane multiply per weight block
 * and token, then a lane broadcast per activation block) into one
 * accumulator per output, reduced at the end. Q4_K's min term is 8 lanes
 * -dmin·m_j·fl(d_x·Σq_x) per block into the same accumulator. Tiles of 2
 * tokens x 4 weight rows (8 accumulators, like Q8_0's). */
#include <string.h>

#include "cpu_quant_avx2.h"

/* ---- Q4_0 ---- */

AI __m256i q4_0_codes(const uint8_t *p) {
  const __m128i q = _mm_loadu_si128((const __m128i *)(p + 2));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}

AI void q4_0_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  const __m256i ones = _mm256_set1_epi16(1), eight = _mm256_set1_epi8(8);
  __m256 acc[2][4];
  acc_zero(acc);
  for (int64_t b = b0; b < b1; b++) {
    __m256i xq[2], off[2];
    __m256 xd[2];
    for (int i = 0; i < MR; i++) {
      xq[i] = _mm256_load_si256((const __m256i *)(a->q + (row + i) * a->kp + b * 32));
      off[i] = _mm256_maddubs_epi16(eight, xq[i]); /* 8·(pairs of q_x) */
      xd[i] = _mm256_broadcast_ss(a->d + (row + i) * nbp + b);
    }
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q4_0_BYTES;
      _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
      const __m256i wc = q4_0_codes(p);
      const __m256 dw = _mm256_set1_ps(cpu_f16_at(p));
      for (int i = 0; i < MR; i++) {
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(wc, xq[i]), off[i]);
        const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[i][j] = _mm256_fmadd_ps(s, _mm256_mul_ps(xd[i], dw), acc[i][j]);
      }
    }
  }
  store(y, ldy, col, acc, MR, nr, accum);
}

/* ---- Q4_K ---- */

/* d·sc_j (out[0]) and dmin·m_j (out[1]), 8 lanes each, from the block at
 * p: cpu_q4_k_scales's bytes with byte shuffles (16 bytes loaded, the
 * last 4 are codes and unused). */
AI void q4_k_scales(__m256 out[2], const uint8_t *p) {
  const __m128i v = _mm_loadu_si128((const __m128i *)(p + 4));
  /* sc_0..3 = s0..3 & 63, sc_4..7 = s8..11 & 15 | (s0..3 >> 6) << 4,
   * m_0..3 = s4..7 & 63, m_4..7 = s8..11 >> 4 | (s4..7 >> 6) << 4 */
  const __m128i a =
      _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i lo = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
      _mm_and_si128(_mm_srli_epi16(a, 4),
                    _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  const __m128i b =
      _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  /* bits 6-7 to 4-5 (16-bit shift: the kept bits stay within their byte) */
  const __m128i sm = _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
  out[0] =
      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)), _mm256_set1_ps(cpu_f16_at(p)));
  out[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                         _mm256_set1_ps(cpu_f16_at(p + 2)));
}

/* The fifth bit of sub-block jj's 32 codes (bit jj of qh[l]) at bit 4 of
 * each byte: a 16-bit shift, then a mask (the bit kept stays within its
 * byte). */
AI __m256i q5_k_high(__m256i qh, int jj) {
  const __m256i moved = jj >= 4 ? _mm256_srl_epi16(qh, _mm_cvtsi32_si128(jj - 4))
                                : _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - jj));
  return _mm256_and_si256(moved, _mm256_set1_epi8(16));
}

/* Block b of a Q4_K / Q5_K (five) weight row: its address, the row
 * prefetched PF_AHEAD on, and its scales (q4_k_scales). */
AI const uint8_t *k_block(const void *row, int64_t b, const int five, __m256 sc[2]) {
  const uint8_t *p = (const uint8_t *)row + (size_t)b * (five ? CPU_Q5_K_BYTES : CPU_Q4_K_BYTES);
  for (int c = 0; c < 3; c++)
    _mm_prefetch((const char *)p + PF_AHEAD + 64 * c, _MM_HINT_T0);
  q4_k_scales(sc, p);
  return p;
}

/* Chunk c (0..3) of a Q4_K / Q5_K block's codes: wc[0] sub-block 2c (low
 * nibbles), wc[1] sub-block 2c+1 (high); Q5_K's (five) with the fifth bit
 * from qh ORed in (0..31). */
AI void k_codes(const uint8_t *p, const int five, __m256i qh, int c, __m256i wc[2]) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i v = _mm256_loadu_si256((const __m256i *)(p + (five ? 48 : 16) + 32 * c));
  wc[0] = _mm256_and_si256(v, m4);
  wc[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if (five)
    for (int h = 0; h < 2; h++)
      wc[h] = _mm256_or_si256(wc[h], q5_k_high(qh, 2 * c + h));
}

/* Q4_K's tile, and Q5_K's (five: nibbles at byte 48, the fifth bit from
 * qh at 16 ORed into each code: 0..31, still within VPMADDUBSW's pairs;
 * the same scales at byte 4 and min term). */
AI void k_mr(const int MR, const int five, float *y, int64_t ldy, const int64_t col[4],
             const cpu_q8_act *a, int64_t row, const void *const wr[4], int nr, int64_t b0,
             int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2][4];
  acc_zero(acc);
  for (int64_t b = b0; b < b1; b++) {
    for (int j = 0; j < 4; j++) {
      __m256 sc[2];
      const uint8_t *p = k_block(wr[j], b, five, sc);
      __m256 f[2]; /* d·sc_j·d_x[j], per token */
      for (int i = 0; i < MR; i++) {
        const float *dx = a->d + (row + i) * nbp + b * 8;
        f[i] = _mm256_mul_ps(sc[0], _mm256_loadu_ps(dx));
        acc[i][j] =
            _mm256_fnmadd_ps(sc[1], _mm256_loadu_ps(a->ds + (row + i) * nbp + b * 8), acc[i][j]);
      }
      const __m256i qh =
          five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
      for (int c = 0; c < 4; c++) { /* qs chunk c: sub-blocks 2c (low nibbles), 2c+1 */
        __m256i wc[2];
        k_codes(p, five, qh, c, wc);
        for (int h = 0; h < 2; h++)
          for (int i = 0; i < MR; i++) {
            const __m256i xq = _mm256_load_si256(
                (const __m256i *)(a->q + (row + i) * a->kp + b * 256 + 32 * (2 * c + h)));
            const __m256 s =
                _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(wc[h], xq), ones));
            acc[i][j] = _mm256_fmadd_ps(s, bcast_lane(f[i], 2 * c + h), acc[i][j]);
          }
      }
    }
  }
  store(y, ldy, col, acc, MR, nr, accum);
}

/* k_mr for one token (decode): a row's 8 sub-block sums are summed in
 * integers first (sum8x8: lane j is sub-block j, exact: at most
 * 32·31·127), so a weight block takes one convert and one FMA with
 * d·sc_j·d_x[j] (lanes already in sub-block order) instead of eight. */
AI void k_m1(const int five, float *y, const int64_t col[4], const cpu_q8_act *a, int64_t row,
             const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2][4];
  acc_zero(acc);
  for (int64_t b = b0; b < b1; b++) {
    const int8_t *xb = a->q + row * a->kp + b * 256;
    const __m256 dx = _mm256_loadu_ps(a->d + row * nbp + b * 8);
    const __m256 ds = _mm256_loadu_ps(a->ds + row * nbp + b * 8);
    for (int j = 0; j < 4; j++) {
      __m256 sc[2];
      const uint8_t *p = k_block(wr[j], b, five, sc);
      const __m256i qh =
          five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
      __m256i s[8];
      for (int c = 0; c < 4; c++) { /* qs chunk c: sub-blocks 2c (low nibbles), 2c+1 */
        __m256i wc[2];
        k_codes(p, five, qh, c, wc);
        for (int h = 0; h < 2; h++)
          s[2 * c + h] = _mm256_madd_epi16(
              _mm256_maddubs_epi16(wc[h],
                                   _mm256_load_si256((const __m256i *)(xb + 32 * (2 * c + h)))),
              ones);
      }
      acc[0][j] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8x8(s)), _mm256_mul_ps(sc[0], dx), acc[0][j]);
      acc[0][j] = _mm256_fnmadd_ps(sc[1], ds, acc[0][j]);
    }
  }
  store(y, 0, col, acc, 1, nr, accum);
}

AI void q4_k_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  if (MR == 1)
    k_m1(0, y, col, a, row, wr, nr, b0, b1, accum);
  else
    k_mr(MR, 0, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

AI void q5_k_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  if (MR == 1)
    k_m1(1, y, col, a, row, wr, nr, b0, b1, accum);
  else
    k_mr(MR, 1, y, ldy, col, a, row, wr, nr, b0, b1, accum);
}

/* ---- Q6_K ---- */

/* Codes 32t .. 32t+31 of the block at p (t = 4h + r): ql[64h + 32(r & 1)
 * ..] low (r < 2) or high nibbles, qh[32h ..] bits 2r, 2r+1 moved to bits
 * 4-5 (a 16-bit shift; the bits kept stay within their byte). */
AI __m256i q6_k_codes(const uint8_t *p, int t) {
  const int h = t >> 2, r = t & 3;
  const __m256i ql = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32 * (r & 1)));
  const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
  const __m256i lo = r >> 1 ? _mm256_srli_epi16(ql, 4) : ql;
  __m256i hi;
  switch (r) {
  case 0: hi = _mm256_slli_epi16(qh, 4); break;
  case 1: hi = _mm256_slli_epi16(qh, 2); break;
  case 2: hi = qh; break;
  default: hi = _mm256_srli_epi16(qh, 2); break;
  }
  return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(15)),
                         _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
}

AI void q6_k_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  const __m256i c32 = _mm256_set1_epi8(32);
  __m256 acc[2][4];
  acc_zero(acc);
  for (int64_t b = b0; b < b1; b++) {
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q6_K_BYTES;
      for (int c = 0; c < 4; c++)
        _mm_prefetch((const char *)p + PF_AHEAD + 64 * c, _MM_HINT_T0);
      /* the 16 int8 scales as int16, each half of the ymm holding all 8
       * of its group of 128 values, to be picked in pairs */
      const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192)));
      const __m256i sg[2] = {_mm256_permute2x128_si256(s16, s16, 0x00),
                             _mm256_permute2x128_si256(s16, s16, 0x11)};
      const float d = cpu_f16_at(p + 208);
      __m256 f[2]; /* d·d_x[t], per token */
      for (int i = 0; i < MR; i++)
        f[i] = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(a->d + (row + i) * nbp + b * 8));
      __m256i s1[8]; /* one token: activation block t's int32 lanes */
      for (int t = 0; t < 8; t++) {
        const __m256i wc = q6_k_codes(p, t);
        /* scales of sub-blocks 2t (int16 lanes 0-7) and 2t+1 (8-15) */
        const int w0 = 2 * (2 * t % 8), w1 = w0 + 2;
        const __m256i sel =
            _mm256_setr_epi8(w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1,
                             w0, w0 + 1, w0, w0 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1,
                             w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1);
        const __m256i sc = _mm256_shuffle_epi8(sg[t >> 2], sel);
        for (int i = 0; i < MR; i++) {
          const __m256i xq =
              _mm256_load_si256((const __m256i *)(a->q + (row + i) * a->kp + b * 256 + 32 * t));
          const __m256i p16 =
              _mm256_sub_epi16(_mm256_maddubs_epi16(wc, xq), _mm256_maddubs_epi16(c32, xq));
          if (MR == 1) {
            s1[t] = _mm256_madd_epi16(p16, sc);
            continue;
          }
          const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, sc));
          acc[i][j] = _mm256_fmadd_ps(s, bcast_lane(f[i], t), acc[i][j]);
        }
      }
      /* one token: activation block t's whole sum in lane t (at most
       * 32·32·127·128 < 2^24: exact in f32), one convert and one FMA */
      if (MR == 1) acc[0][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8x8(s1)), f[0], acc[0][j]);
    }
  }
  store(y, ldy, col, acc, MR, nr, accum);
}

TILE_ENTRY(cpu_q4_0_tile_avx2, q4_0_mr)
TILE_ENTRY(cpu_q4_k_tile_avx2, q4_k_mr)
TILE_ENTRY(cpu_q6_k_tile_avx2, q6_k_mr)
TILE_ENTRY(cpu_q5_k_tile_avx2, q5_k_mr)
