/* The Q4_0, Q4_K, Q5_K and Q6_K tiles, AVX-512 with VNNI (cpu_quant.h has the
 * scheme). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni like
 * cpu_q8_0_avx512.c, and reached only through its ops (cpu_isa_info's
 * avx512_vnni).
 *
 * The weight codes are unpacked in registers (shifts and ANDs, 64 codes a
 * zmm, in the activations' order) and go to VPDPBUSD as the unsigned
 * operand against the signed q_x: each int32 lane gets an exact sum of 4
 * products. The codes' offsets (-8 for Q4_0, -32 for Q6_K) start that
 * VPDPBUSD at -8·(or -32·) the lane's 4 q_x summed: one VPDPBUSD of the
 * constant with q_x per token, shared by the tile's 4 weight rows. The
 * lanes are converted to f32 (exact: at most 4·127·63) and added with
 * their sub-block's scale times their activation block's d_x into one
 * accumulator per output (16 lanes, reduced at the end like Q8_0's).
 * Q4_K's min term is -dmin·m_j·fl(d_x·Σq_x), 8 lanes per block, into the
 * same accumulator. Nothing is scalar per value: per weight block and row
 * only the scale bytes are unpacked with integer ops. Tiles: up to 4
 * tokens x 4 weight rows; the one-token (decode) tiles fold their int32
 * vectors first (fold4) so that a row's 256 values take one convert and
 * one FMA. */
#include <immintrin.h>
#include <string.h>

#include "cpu_quant.h"
#include "cpu_reduce_avx512.h"

#define AI static inline __attribute__((always_inline))
#define PF_AHEAD 1024 /* bytes prefetched ahead in each weight row */

/* d_x of activation blocks c, c+1: 8 lanes each. */
AI __m512 dx_pair(const float *d) {
  const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(
      half, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)d))));
}

/* -k · (each 4 q_x summed): the start of VPDPBUSD for codes offset by k. */
AI __m512i offset_start(__m512i qv, char k) {
  return _mm512_sub_epi32(_mm512_setzero_si512(),
                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(k), qv));
}

/* ---- Q4_0: two blocks (64 values) per zmm ---- */

/* The 64 codes of blocks at p and p + 18 (two: else the second 0). */
AI __m512i q4_0_codes(const uint8_t *p, int two) {
  /* [qa, qa, qb, qb] (qb = 0 alone), the second copy of each shifted down
   * a nibble: block a's values 0-15, 16-31, then block b's */
  const __m128i qa = _mm_loadu_si128((const __m128i *)(p + 2));
  const __m512i t =
      two ? _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(qa), 0xFF00,
                                        _mm_loadu_si128((const __m128i *)(p + 2 + CPU_Q4_0_BYTES)))
          : _mm512_maskz_broadcast_i32x4(0x00FF, qa);
  const __m512i sh = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
  return _mm512_and_si512(_mm512_srlv_epi64(t, sh), _mm512_set1_epi8(15));
}

/* d of the blocks at p and p + 18 (two: else 0), 8 lanes each. */
AI __m512 q4_0_dw(const uint8_t *p, int two) {
  uint16_t h0, h1 = 0;
  memcpy(&h0, p, 2);
  if (two) memcpy(&h1, p + CPU_Q4_0_BYTES, 2);
  const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(half, _mm512_castps128_ps512(_mm_cvtph_ps(
                                         _mm_cvtsi32_si128((int)(h0 | (uint32_t)h1 << 16)))));
}

/* MR tokens x 4 rows over blocks [b0, b1), two at a time, into acc. */
AI void q4_0_pairs(const int MR, __m512 acc[16], const cpu_q8_act *a, int64_t row,
                   const void *const wr[4], int64_t b0, int64_t b1) {
  const int64_t nbp = a->kp / 32;
  for (int64_t b = b0; b < b1; b += 2) {
    const int two = b + 2 <= b1; /* an odd b1 only at the end of a row */
    __m512i wc[4];
    __m512 dw[4];
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q4_0_BYTES;
      _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
      wc[j] = q4_0_codes(p, two);
      dw[j] = q4_0_dw(p, two);
    }
    for (int i = 0; i < MR; i++) {
      /* the padding past K is q 0, d 0: it adds 0 */
      const __m512i qv = _mm512_load_si512((const void *)(a->q + (row + i) * a->kp + b * 32));
      const __m512i cv = offset_start(qv, 8);
      const __m512 dx = dx_pair(a->d + (row + i) * nbp + b);
      for (int j = 0; j < 4; j++) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(cv, wc[j], qv));
        acc[4 * i + j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, dw[j]), acc[4 * i + j]);
      }
    }
  }
}

AI void q4_0_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  __m512 acc[16];
  for (int t = 0; t < 16; t++)
    acc[t] = _mm512_setzero_ps();
  q4_0_pairs(MR, acc, a, row, wr, b0, b1);
  mi_store4x4(y, ldy, col, acc, MR, nr, accum);
}

/* Decode (one token), 8 blocks (144 bytes of each row) per step: the 8
 * scales come from two 64-byte loads and one word permute, the 4 pairs'
 * int32 sums are folded (mi_fold4_epi32: block 2g in the A half, 2g+1 in B) so
 * that the 8 blocks take one convert and one FMA per row. The high
 * nibbles are not shifted down: a zmm [qa, qa, qb, qb] ANDed with 0x0f /
 * 0xf0 per 128-bit lane gives q and 16·q (lanes at most 4·240·127, exact),
 * whose offset is 128 (not 8) and whose scale is taken /16 (exact). fold4
 * keeps the 128-bit lanes apart, so lane 4L + g is block 2g + L/2, the
 * low (L even) or high nibbles. The rest of a row's range (under 8
 * blocks) goes by pairs. */
static void q4_0_m1(float *y, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                    const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  const __m512i lane_blk = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
  /* block i's d is the int16 at byte 18i: words 0, 9, 18, 27 of the first
   * load, of the second (from byte 72) for blocks 4-7 */
  const __m512i widx = _mm512_castsi128_si512(_mm_setr_epi16(0, 9, 18, 27, 32, 41, 50, 59));
  const __m512i nib = _mm512_setr_epi32(
      0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, (int)0xf0f0f0f0, (int)0xf0f0f0f0,
      (int)0xf0f0f0f0, (int)0xf0f0f0f0, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f,
      (int)0xf0f0f0f0, (int)0xf0f0f0f0, (int)0xf0f0f0f0, (int)0xf0f0f0f0);
  const __m512i offs = _mm512_setr_epi32(
      0x08080808, 0x08080808, 0x08080808, 0x08080808, (int)0x80808080, (int)0x80808080,
      (int)0x80808080, (int)0x80808080, 0x08080808, 0x08080808, 0x08080808, 0x08080808,
      (int)0x80808080, (int)0x80808080, (int)0x80808080, (int)0x80808080);
  const __m512 sixteenth = _mm512_setr_ps(1, 1, 1, 1, 0x1p-4f, 0x1p-4f, 0x1p-4f, 0x1p-4f, 1, 1, 1,
                                          1, 0x1p-4f, 0x1p-4f, 0x1p-4f, 0x1p-4f);
  __m512 acc[16];
  for (int t = 0; t < 16; t++)
    acc[t] = _mm512_setzero_ps();
  int64_t b = b0;
  for (; b + 8 <= b1; b += 8) {
    const int8_t *x = a->q + row * a->kp + b * 32;
    __m512i xa[4], cv[4];
    for (int g = 0; g < 4; g++) {
      xa[g] = _mm512_load_si512((const void *)(x + 64 * g));
      cv[g] = _mm512_sub_epi32(_mm512_setzero_si512(),
                               _mm512_dpbusd_epi32(_mm512_setzero_si512(), offs, xa[g]));
    }
    const __m512 dx =
        _mm512_mul_ps(_mm512_permutexvar_ps(
                          lane_blk, _mm512_castps256_ps512(_mm256_loadu_ps(a->d + row * nbp + b))),
                      sixteenth);
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q4_0_BYTES;
      for (int c = 0; c < 3; c++)
        _mm_prefetch((const char *)p + PF_AHEAD + 64 * c, _MM_HINT_T0);
      __m512i I[4];
      for (int g = 0; g < 4; g++) {
        const uint8_t *q = p + 2 * g * CPU_Q4_0_BYTES + 2;
        const __m512i t = _mm512_mask_broadcast_i32x4(
            _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)q)), 0xFF00,
            _mm_loadu_si128((const __m128i *)(q + CPU_Q4_0_BYTES)));
        I[g] = _mm512_dpbusd_epi32(cv[g], _mm512_and_si512(t, nib), xa[g]);
      }
      const __m512i dh = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)p), widx,
                                                   _mm512_loadu_si512((const void *)(p + 72)));
      const __m256 dw = _mm256_cvtph_ps(_mm512_castsi512_si128(dh));
      const __m512 f =
          _mm512_mul_ps(_mm512_permutexvar_ps(lane_blk, _mm512_castps256_ps512(dw)), dx);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mi_fold4_epi32(I)), f, acc[j]);
    }
  }
  q4_0_pairs(1, acc, a, row, wr, b, b1);
  mi_store1x4(y, col, acc, nr, accum);
}

/* ---- Q4_K: per block, 4 zmm of codes, each two sub-blocks ---- */

/* Code vector g (0..3) of a block's qs: chunk c's low nibbles are
 * sub-block 2c, its high ones 2c+1; a zmm holds chunks 2e, 2e+1, so
 * g = 2e + h (h: high nibbles) holds sub-blocks 4e + h (bytes 0-31) and
 * 4e + 2 + h (bytes 32-63). */
AI __m512i q4_k_codes(const uint8_t *qs, int g) {
  const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * (g >> 1)));
  return _mm512_and_si512(g & 1 ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(15));
}

/* The activations matching code vector g: values [128e + 32h, +32) and
 * [128e + 64 + 32h, +32) of the block, from the block's q_x at x. */
AI __m512i q4_k_act(const int8_t *x, int g) {
  const __m512i lo = _mm512_load_si512((const void *)(x + 128 * (g >> 1)));
  const __m512i hi = _mm512_load_si512((const void *)(x + 128 * (g >> 1) + 64));
  return g & 1 ? _mm512_shuffle_i64x2(lo, hi, 0xEE) : _mm512_shuffle_i64x2(lo, hi, 0x44);
}

/* Lanes 0-7: v[4e + h], lanes 8-15: v[4e + 2 + h], for g = 2e + h. */
AI __m512 spread8(__m512 v, int g) {
  const int s = 4 * (g >> 1) + (g & 1);
  const __m512i idx = _mm512_setr_epi32(s, s, s, s, s, s, s, s, s + 2, s + 2, s + 2, s + 2, s + 2,
                                        s + 2, s + 2, s + 2);
  return _mm512_permutexvar_ps(idx, v);
}

/* A Q4_K block's scales and mins, in vectors (cpu_q4_k_scales's bytes
 * without a scalar op): lanes 0-7 d·sc_j, lanes 8-15 dmin·m_j. The 12
 * scale bytes s are loaded with 4 bytes of qs after them (unused). */
AI __m512 q4_k_scales(const uint8_t *p) {
  const __m128i v = _mm_loadu_si128((const __m128i *)(p + 4));
  /* low bits: sc_0..3 = s0..3 & 63, sc_4..7 = s8..11 & 15,
   *           m_0..3 = s4..7 & 63,  m_4..7 = s8..11 >> 4 */
  const __m128i a =
      _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i lo =
      _mm_and_si128(_mm_mask_blend_epi8(0xF000, a, _mm_srli_epi16(a, 4)),
                    _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  /* high bits of sc_4..7 / m_4..7: bits 6-7 of s0..3 / s4..7, to bits
   * 4-5 (a 16-bit shift: the bits kept stay within their byte) */
  const __m128i b =
      _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
  const __m512 sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_or_si128(lo, hi)));
  /* [d x8, dmin x8] from the two halves at p */
  uint32_t dd;
  memcpy(&dd, p, 4);
  const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512 dv =
      _mm512_permutexvar_ps(half, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd))));
  return _mm512_mul_ps(sm, dv);
}

/* ---- Q5_K: Q4_K's codes and scales plus a fifth bit from qh ---- */

/* Code vector g of the block at p (q4_k_codes' order: bytes 0-31 sub-block
 * j0 = 4e + h, bytes 32-63 sub-block j0 + 2, g = 2e + h): Q4_K's nibbles
 * from qs (byte 48) and, where bit j of qh[l] (byte 16) is set, 16 added
 * (VPTESTMB against 1 << j per half, a masked byte add): codes 0..31, the
 * unsigned operand of VPDPBUSD as Q4_K's. */
AI __m512i q5_k_codes(const uint8_t *p, int g) {
  const __m512i low = q4_k_codes(p + 48, g);
  const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
  const int j0 = 4 * (g >> 1) + (g & 1);
  const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << j0))),
                                          _mm256_set1_epi8((char)(1 << (j0 + 2))), 1);
  const __mmask64 k =
      _mm512_test_epi8_mask(_mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1), bits);
  return _mm512_mask_add_epi8(low, k, low, _mm512_set1_epi8(16));
}

/* Decode (one token), Q4_K and Q5_K (five): the 4 code vectors' int32 lanes are first summed
 * within their sub-blocks (mi_fold4_epi32: code vector g holds sub-blocks A_g =
 * 0, 1, 4, 5 and B_g = 2, 3, 6, 7; lane_sub below says which lane is
 * which), so each weight block and row takes one convert and one FMA with
 * d·sc_j·d_x[j] instead of four, and no per-vector scale spreading. The
 * high nibbles are not shifted down: v & 0xF0 is 16·q (lanes at most
 * 4·240·127, a sub-block's sum below 2^20, still exact in f32) and the
 * odd sub-blocks' d_x is taken /16 (exact: a power of two). Q5_K's codes
 * (q5_k_codes, at most 31) are whole bytes, shifted down. */
AI void q4_k_m1(const int five, float *y, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  const size_t bytes = five ? CPU_Q5_K_BYTES : CPU_Q4_K_BYTES;
  const __m512i lane_sub = _mm512_setr_epi32(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7);
  const float odd = five ? 1.0f : 0x1p-4f; /* Q5_K's codes are shifted down */
  const __m512 sixteenth = _mm512_setr_ps(1, odd, 1, odd, 1, odd, 1, odd, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i lo4 = _mm512_set1_epi8(0x0f), hi4 = _mm512_set1_epi8((char)0xf0);
  __m512 acc[4];
  for (int t = 0; t < 4; t++)
    acc[t] = _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    const int8_t *x = a->q + row * a->kp + b * 256;
    const __m512i xa[4] = {q4_k_act(x, 0), q4_k_act(x, 1), q4_k_act(x, 2), q4_k_act(x, 3)};
    const __m512 dx =
        _mm512_mul_ps(_mm512_zextps256_ps512(_mm256_loadu_ps(a->d + row * nbp + b * 8)), sixteenth);
    const __m512 dsv = _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_setzero_pd(), _mm256_castps_pd(_mm256_loadu_ps(a->ds + row * nbp + b * 8)), 1));
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * bytes;
      _mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char *)p + PF_AHEAD + 64, _MM_HINT_T0);
      _mm_prefetch((const char *)p + PF_AHEAD + 128, _MM_HINT_T0);
      const __m512 sc = q4_k_scales(p);
      __m512i I[4];
      if (five)
        for (int g = 0; g < 4; g++)
          I[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q5_k_codes(p, g), xa[g]);
      else
        for (int e = 0; e < 2; e++) {
          const __m512i v = _mm512_loadu_si512((const void *)(p + 16 + 64 * e));
          I[2 * e] =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, lo4), xa[2 * e]);
          I[2 * e + 1] =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, hi4), xa[2 * e + 1]);
        }
      /* lanes 0-7 of sc·dx: d·sc_j·d_x[j] (/16 for odd j); spread to the
       * folded lanes */
      const __m512 f = _mm512_permutexvar_ps(lane_sub, _mm512_mul_ps(sc, dx));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mi_fold4_epi32(I)), f, acc[j]);
      acc[j] = _mm512_fnmadd_ps(sc, dsv, acc[j]); /* the min term (lanes 8-15) */
    }
  }
  mi_store1x4(y, col, acc, nr, accum);
}

/* Q4_K's tile for MR tokens, and Q5_K's (five: its codes, q5_k_codes; the
 * same scales at byte 4 and min term; lanes at most 4·31·127, exact in
 * f32): 2-4 tokens (one token: q4_k_m1). */
AI void q4_k_mr(const int MR, const int five, float *y, int64_t ldy, const int64_t col[4],
                const cpu_q8_act *a, int64_t row, const void *const wr[4], int nr, int64_t b0,
                int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  __m512 acc[16];
  for (int t = 0; t < 16; t++)
    acc[t] = _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p[4];
    __m512 sc[4]; /* d·sc_j (lanes 0-7), dmin·m_j (8-15) */
    for (int j = 0; j < 4; j++) {
      p[j] = (const uint8_t *)wr[j] + (size_t)b * (five ? CPU_Q5_K_BYTES : CPU_Q4_K_BYTES);
      _mm_prefetch((const char *)p[j] + PF_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char *)p[j] + PF_AHEAD + 64, _MM_HINT_T0);
      _mm_prefetch((const char *)p[j] + PF_AHEAD + 128, _MM_HINT_T0);
      sc[j] = q4_k_scales(p[j]);
    }
    /* the min term: -dmin·m_j·fl(d_x·Σq_x), lanes 8-15 (0 in lanes 0-7) */
    for (int i = 0; i < MR; i++) {
      const __m512 dsv = _mm512_castpd_ps(_mm512_insertf64x4(
          _mm512_setzero_pd(), _mm256_castps_pd(_mm256_loadu_ps(a->ds + (row + i) * nbp + b * 8)),
          1));
      for (int j = 0; j < 4; j++)
        acc[4 * i + j] = _mm512_fnmadd_ps(sc[j], dsv, acc[4 * i + j]);
    }
    for (int g = 0; g < 4; g++) {
      __m512i wc[4];
      __m512 ws[4];
      for (int j = 0; j < 4; j++) {
        wc[j] = five ? q5_k_codes(p[j], g) : q4_k_codes(p[j] + 16, g);
        ws[j] = spread8(sc[j], g);
      }
      for (int i = 0; i < MR; i++) {
        const __m512i qv = q4_k_act(a->q + (row + i) * a->kp + b * 256, g);
        const __m512 dx =
            spread8(_mm512_castps256_ps512(_mm256_loadu_ps(a->d + (row + i) * nbp + b * 8)), g);
        for (int j = 0; j < 4; j++) {
          const __m512 s =
              _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wc[j], qv));
          acc[4 * i + j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, ws[j]), acc[4 * i + j]);
        }
      }
    }
  }
  mi_store4x4(y, ldy, col, acc, MR, nr, accum);
}

/* ---- Q6_K: per block, 4 zmm of codes in the activations' order ---- */

/* Codes 64g .. 64g+63 of the block at p: half h = g/2 takes ql[64h..] and
 * qh[32h..]; g even the low nibbles with qh bits 0-1 (values 0-31) and 2-3
 * (32-63), g odd the high nibbles with bits 4-5 and 6-7. The qh bits are
 * moved to bits 4-5 of each byte by one 64-bit shift per 256-bit half
 * (bits stay within their byte where they are kept). */
AI __m512i q6_k_codes(const uint8_t *p, int g) {
  const int h = g >> 1;
  const __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * h));
  const __m512i qh =
      _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h)));
  const __m512i sh =
      g & 1 ? _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2) : _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
  const __m512i hb = g & 1 ? _mm512_srlv_epi64(qh, sh) : _mm512_sllv_epi64(qh, sh);
  const __m512i lb = g & 1 ? _mm512_srli_epi16(ql, 4) : ql;
  /* (lb & 0x0f) | (hb & 0x30): ternary logic (A & C) | B, A = lb, B = hb & 0x30, C = 0x0f */
  return _mm512_ternarylogic_epi32(lb, _mm512_and_si512(hb, _mm512_set1_epi8(0x30)),
                                   _mm512_set1_epi8(0x0f), 0xEC);
}

/* Lanes 4t .. 4t+3: v[4g + t] (sub-block 4g + t of 16 values). */
AI __m512 spread4(__m512 v, int g) {
  const int s = 4 * g;
  const __m512i idx = _mm512_setr_epi32(s, s, s, s, s + 1, s + 1, s + 1, s + 1, s + 2, s + 2, s + 2,
                                        s + 2, s + 3, s + 3, s + 3, s + 3);
  return _mm512_permutexvar_ps(idx, v);
}

/* Decode (one token): 128-bit lane L of code vector g's sums is exactly
 * sub-block 4g + L (16 values, 4 lanes), so mi_fold4_epi32 leaves in lane 4L + g
 * the whole integer sum of sub-block 4g + L (at most 16·127·32); one
 * convert and one FMA per block and row with d·sc·d_x permuted to that
 * order. */
static void q6_k_m1(float *y, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                    const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  /* lane 4L + g <- sub-block 4g + L, and its activation block (4g + L)/2 */
  const __m512i sub = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i blk = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
  __m512 acc[4];
  for (int t = 0; t < 4; t++)
    acc[t] = _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    const int8_t *x = a->q + row * a->kp + b * 256;
    __m512i xa[4], cv[4];
    for (int g = 0; g < 4; g++) {
      xa[g] = _mm512_load_si512((const void *)(x + 64 * g));
      cv[g] = offset_start(xa[g], 32);
    }
    const __m512 dx = _mm512_permutexvar_ps(
        blk, _mm512_castps256_ps512(_mm256_loadu_ps(a->d + row * nbp + b * 8)));
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q6_K_BYTES;
      for (int c = 0; c < 4; c++)
        _mm_prefetch((const char *)p + PF_AHEAD + 64 * c, _MM_HINT_T0);
      __m512i I[4];
      for (int g = 0; g < 4; g++)
        I[g] = _mm512_dpbusd_epi32(cv[g], q6_k_codes(p, g), xa[g]);
      const __m512 sc =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 192))));
      const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(sub, sc), dx),
                                     _mm512_set1_ps(cpu_f16_at(p + 208)));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mi_fold4_epi32(I)), f, acc[j]);
    }
  }
  mi_store1x4(y, col, acc, nr, accum);
}

AI void q6_k_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  __m512 acc[16];
  for (int t = 0; t < 16; t++)
    acc[t] = _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p[4];
    __m512 sc[4]; /* d·scales[16] */
    for (int j = 0; j < 4; j++) {
      p[j] = (const uint8_t *)wr[j] + (size_t)b * CPU_Q6_K_BYTES;
      _mm_prefetch((const char *)p[j] + PF_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char *)p[j] + PF_AHEAD + 64, _MM_HINT_T0);
      _mm_prefetch((const char *)p[j] + PF_AHEAD + 128, _MM_HINT_T0);
      _mm_prefetch((const char *)p[j] + PF_AHEAD + 192, _MM_HINT_T0);
      const __m512 s16 =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p[j] + 192))));
      sc[j] = _mm512_mul_ps(s16, _mm512_set1_ps(cpu_f16_at(p[j] + 208)));
    }
    for (int g = 0; g < 4; g++) {
      __m512i wc[4];
      __m512 ws[4];
      for (int j = 0; j < 4; j++) {
        wc[j] = q6_k_codes(p[j], g);
        ws[j] = spread4(sc[j], g);
      }
      for (int i = 0; i < MR; i++) {
        const __m512i qv =
            _mm512_load_si512((const void *)(a->q + (row + i) * a->kp + b * 256 + 64 * g));
        const __m512i cv = offset_start(qv, 32);
        const __m512 dx = dx_pair(a->d + (row + i) * nbp + b * 8 + 2 * g);
        for (int j = 0; j < 4; j++) {
          const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(cv, wc[j], qv));
          acc[4 * i + j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, ws[j]), acc[4 * i + j]);
        }
      }
    }
  }
  mi_store4x4(y, ldy, col, acc, MR, nr, accum);
}

#define TILE_ENTRY(name, fn)                                                                       \
  void name(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row, int mr, \
            const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {                  \
    switch (mr) {                                                                                  \
    case 1: fn(1, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;                              \
    case 2: fn(2, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;                              \
    case 3: fn(3, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;                              \
    default: fn(4, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;                             \
    }                                                                                              \
  }

void cpu_q4_0_tile_avx512(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                          int64_t row, int mr, const void *const wr[4], int nr, int64_t b0,
                          int64_t b1, int accum) {
  switch (mr) {
  case 1: q4_0_m1(y, col, a, row, wr, nr, b0, b1, accum); break;
  case 2: q4_0_mr(2, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  case 3: q4_0_mr(3, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  default: q4_0_mr(4, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  }
}
/* Q4_K's tiles by height, and Q5_K's (five) */
AI void k_tile(const int five, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
               int64_t row, int mr, const void *const wr[4], int nr, int64_t b0, int64_t b1,
               int accum) {
  switch (mr) {
  case 1: q4_k_m1(five, y, col, a, row, wr, nr, b0, b1, accum); break;
  case 2: q4_k_mr(2, five, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  case 3: q4_k_mr(3, five, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  default: q4_k_mr(4, five, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  }
}
void cpu_q4_k_tile_avx512(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                          int64_t row, int mr, const void *const wr[4], int nr, int64_t b0,
                          int64_t b1, int accum) {
  k_tile(0, y, ldy, col, a, row, mr, wr, nr, b0, b1, accum);
}
void cpu_q6_k_tile_avx512(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                          int64_t row, int mr, const void *const wr[4], int nr, int64_t b0,
                          int64_t b1, int accum) {
  switch (mr) {
  case 1: q6_k_m1(y, col, a, row, wr, nr, b0, b1, accum); break;
  case 2: q6_k_mr(2, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  case 3: q6_k_mr(3, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  default: q6_k_mr(4, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  }
}

void cpu_q5_k_tile_avx512(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                          int64_t row, int mr, const void *const wr[4], int nr, int64_t b0,
                          int64_t b1, int accum) {
  k_tile(1, y, ldy, col, a, row, mr, wr, nr, b0, b1, accum);
}
