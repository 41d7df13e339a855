/* The Q8_0 matmul's inner loops, AVX-512 with VNNI (cpu_q8_0.h has the
 * scheme). This file alone is compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni (and the AVX2 set); nothing here runs unless
 * cpu_isa.c found those with OS-enabled ZMM state (cpu_isa_info.avx512_vnni).
 *
 * Two blocks (64 values) per zmm. VPDPBUSD multiplies unsigned by signed
 * bytes and adds groups of 4 into int32 lanes, without saturation. The
 * weights go in unsigned as q_w + 128 (q_w XOR 0x80: exact for every int8,
 * -128 included) and the activations signed, so each lane gets
 *   Σ (q_w + 128)·q_x = Σ q_w·q_x + 128·Σ q_x;
 * the second term depends on the activations alone: one VPDPBUSD of the
 * bias with q_x per token and pair of blocks gives it, and its negation is
 * the starting value of the token's VPDPBUSD with each weight row. One
 * instruction per 64 products and token, plus one XOR per weight vector.
 * The int32 lanes (at most 4·255·127, exact in f32) are converted and
 * added with their block's d_x·d_w (lanes 0-7 the first block, 8-15 the
 * second) into one f32 accumulator per
 * output, and the 16 accumulators of a 4x4 tile are reduced together
 * (cpu_reduce_avx512.h). Tiles: up to 4 tokens x 4 weight rows. */
#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#include "cpu_quant.h"
#include "cpu_quant_avx2.h"
#include "cpu_reduce_avx512.h"
#define Q8_PF_AHEAD 1024 /* bytes prefetched ahead in each weight row */

/* Quantizes a row's blocks as cpu_q8_quantize_block does each one (the
 * same f32 operations per block, so the same q and d), 16 blocks at a
 * time: their maxima first, then their scales d = amax / 127 and 1 / d as
 * two vector divisions (the scalar form's two divisions a block, each on
 * the block's critical path, were most of a decode call's fixed cost),
 * then the codes, and the sums the panel GEMM and the K-quant tiles want
 * (s, sh) from the codes' int32 vectors rather than a scalar pass over q.
 * |x · (1 / d)| rounds to at most 127, so the int32 codes are the int8
 * ones and their sums are the codes' sums. */
static void quantize_row(int8_t *q, float *d, int32_t *cs, int32_t *ch, const float *x, int64_t nb) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int n = nb - b0 < 16 ? (int)(nb - b0) : 16;
    float am[16] __attribute__((aligned(64)));
    __mmask16 bad = 0;
    for (int i = 0; i < n; i++) {
      const float *xb = x + (b0 + i) * CPU_Q8_QK;
      const __m512 a0 = _mm512_abs_ps(_mm512_loadu_ps(xb)), a1 = _mm512_abs_ps(_mm512_loadu_ps(xb + 16));
      if ((_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) != 0)
        bad |= (__mmask16)(1u << i);
      am[i] = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    }
    const __mmask16 have = (__mmask16)((1u << n) - 1);
    const __m512 amax = _mm512_maskz_load_ps(have, am);
    /* a block is quantized unless it holds NaN/infinity or amax < TINY */
    const __mmask16 live =
        (__mmask16)(have & ~bad & _mm512_cmp_ps_mask(amax, _mm512_set1_ps(CPU_Q8_TINY), _CMP_GE_OQ));
    const __m512 dv = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    float dd[16] __attribute__((aligned(64))), id[16] __attribute__((aligned(64)));
    _mm512_store_ps(dd, dv);
    _mm512_store_ps(id, _mm512_div_ps(_mm512_set1_ps(1.0f), dv));
    for (int i = 0; i < n; i++) {
      const int64_t b = b0 + i;
      int8_t *qb = q + b * CPU_Q8_QK;
      if (!(live >> i & 1)) {
        memset(qb, 0, CPU_Q8_QK);
        d[b] = bad >> i & 1 ? __builtin_nanf("") : 0.0f;
        cs[b] = ch[b] = 0;
        continue;
      }
      const float *xb = x + b * CPU_Q8_QK;
      const __m512 is = _mm512_set1_ps(id[i]);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), is));
      const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), is));
      _mm_storeu_si128((__m128i *)qb, _mm512_cvtsepi32_epi8(i0));
      _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtsepi32_epi8(i1));
      /* the panel GEMM's bias correction: -128 · Σ q_x, and over the first
       * half for Q6_K */
      const int32_t lo = _mm512_reduce_add_epi32(i0), hi = _mm512_reduce_add_epi32(i1);
      cs[b] = -128 * (lo + hi);
      ch[b] = -128 * lo;
      d[b] = dd[i];
    }
  }
}

static void quantize(const cpu_q8_act *a, const float *x, int64_t m0, int64_t m1) {
  const int64_t nb = a->K / CPU_Q8_QK, nbp = a->kp / CPU_Q8_QK;
  for (int64_t m = m0; m < m1; m++) {
    int8_t *q = a->q + m * a->kp;
    float *d = a->d + m * nbp;
    int32_t *cs = a->s + m * nbp, *ch = a->sh + m * nbp;
    quantize_row(q, d, cs, ch, x + m * a->K, nb);
    memset(q + a->K, 0, (size_t)(a->kp - a->K));
    for (int64_t b = nb; b < nbp; b++) {
      d[b] = 0.0f;
      cs[b] = ch[b] = 0;
    }
  }
}

/* The scales of two weight blocks at p0 and p1 (p1 NULL: 0) as 8 + 8 lanes. */
AI __m512 ld_dw2(const uint8_t *p0, const uint8_t *p1) {
  uint16_t h0, h1 = 0;
  memcpy(&h0, p0, 2);
  if (p1) memcpy(&h1, p1, 2);
  const __m256i hh = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)h0)),
                                             _mm_set1_epi16((short)h1), 1);
  return _mm512_cvtph_ps(hh);
}

/* MR tokens (1..4) x 4 weight rows over blocks [b0, b1); b0 is even (the
 * walk's k blocks are multiples of 64 values), an odd b1 only at the end
 * of a row: that last block goes alone in the low half of a zmm. */
AI void tile_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / CPU_Q8_QK;
  const int8_t *qx[4];
  const float *dx[4];
  for (int i = 0; i < MR; i++) {
    qx[i] = a->q + (row + i) * a->kp;
    dx[i] = a->d + (row + i) * nbp;
  }
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 acc[16];
  for (int t = 0; t < 16; t++)
    acc[t] = _mm512_setzero_ps();
  /* pairs of blocks, then (odd b1) the last block alone: its high half
   * holds weights 0x80 (zero plus the bias) against the activations' zero
   * padding, and scale 0 there: it adds 0 */
  for (int64_t b = b0; b < b1; b += 2) {
    const int two = b + 2 <= b1;
    __m512i wu[4];
    __m512 dw[4];
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q8_WBYTES;
      _mm_prefetch((const char *)p + Q8_PF_AHEAD, _MM_HINT_T0);
      const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2)));
      wu[j] = _mm512_xor_si512(
          two ? _mm512_inserti64x4(lo, _mm256_loadu_si256((const __m256i *)(p + 2 + CPU_Q8_WBYTES)),
                                   1)
              : _mm512_zextsi256_si512(_mm512_castsi512_si256(lo)),
          bias);
      dw[j] = ld_dw2(p, two ? p + CPU_Q8_WBYTES : NULL);
    }
    for (int i = 0; i < MR; i++) {
      const __m512i qv = _mm512_load_si512((const void *)(qx[i] + b * CPU_Q8_QK));
      /* -128 · (each 4 q_x summed): the bias's share, VPDPBUSD's start */
      const __m512i cv = _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, qv));
      /* d_x of the two blocks, 8 lanes each (the padding's d is 0) */
      const __m512 dev = _mm512_permutexvar_ps(
          half, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(dx[i] + b)))));
      for (int j = 0; j < 4; j++) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(cv, wu[j], qv));
        acc[4 * i + j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dev, dw[j]), acc[4 * i + j]);
      }
    }
  }
  if (MR == 1)
    mi_store1x4(y, col, acc, nr, accum);
  else
    mi_store4x4(y, ldy, col, acc, MR, nr, accum);
}

static void tile(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                 int mr, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  switch (mr) {
  case 1: tile_mr(1, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  case 2: tile_mr(2, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  case 3: tile_mr(3, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  default: tile_mr(4, y, ldy, col, a, row, wr, nr, b0, b1, accum); break;
  }
}

/* ---- prefill: packed weight panels, outer products ----
 * The tiles above spend ~5 instructions per 64 products and token-output
 * pair (VPDPBUSD, convert, two multiplies, the bias start), because each
 * output is an inner product over k that a zmm holds 16 values of. With
 * many tokens, the weights are instead packed once per PN = 16 outputs and
 * PKB blocks into a panel whose zmm holds one 4-byte group of k for each of
 * the 16 outputs: P[g][j] = bytes 4g..4g+3 of row j (XOR 0x80, the bias),
 * S[b][j] = d_w of row j, block b. A token then needs, per block, 8
 * VPDPBUSD with a broadcast 4-byte group of its q_x (one 32-bit memory
 * operand each) into one int32 vector whose 16 lanes are the 16 outputs'
 * exact block sums (started at the token's bias correction s = -128·Σq_x),
 * one convert and one FMA with S[b]·d_x: 12 instructions per 512 products
 * and token, no horizontal sums. Tiles of PMR tokens share each panel
 * vector. Each panel (16 KB + 2 KB of scales) stays in L1 while every
 * token of the pass goes over it; passes of PMB tokens keep their q_x
 * (PMB · 1 KB per panel block) in L2. */
#define PN 16  /* outputs per panel */
#define PKB 32 /* blocks per panel: 1024 values of k */
#define PMR 8  /* tokens per register tile (12 measured no faster) */
_Static_assert(PMR == 8, "panel_rows' remainder switch covers 1..7 tokens");
#define PMB 256 /* tokens per pass */

/* acc += u8 · (the 4 signed bytes at p, broadcast): VPDPBUSD with its
 * m32bcst operand. GCC does not fold the broadcast load into the
 * intrinsic; with a VPBROADCASTD per token and group, 256 tokens x N 3072 x
 * K 1024 on 1 thread took 5.1 ms (best of 5), with this 3.8-4.0. */
AI __m512i dpbusd_bcast(__m512i acc, __m512i u8, const int8_t *p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*(const int32_t *)p));
  return acc;
}

/* r[i] (8 rows of 8 dwords) -> r[t] = dword t of each row, in place. */
AI void transpose8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
  }
}

/* Block b (of 32 values) of a weight row as 32 biased bytes (the signed
 * code + 128, what the panels hold) and its f32 scale; for Q4_K also the
 * block's min term dmin·m (*mn; 0 for the others). The types the panels
 * take: Q8_0 (d, q), Q4_0 (d, q - 8) and Q4_K (Q5_K alike), whose sub-block j of 32 is
 * scale d·sc_j (exact in f32: 11 + 6 bits) over codes q in 0..15, less
 * dmin·m_j, which the panel tile takes off as dmin·m_j·fl(d_x·Σq_x) (the
 * tiles' very terms); Q4_1/Q5_1 as Q4_K with the min's sign turned, Q5_0
 * as Q4_0. The halves types (16-value sub-blocks: Q6_K, Q3_K, Q2_K) give
 * the first half's scale in *sc and the second's in *mn; Q2_K also each
 * half's min dmin·m in mh (0 for the others). */
AI __m256i block_codes(mi_dtype dt, const uint8_t *row, int64_t b, float *sc, float *mn,
                        float mh[2]) {
  const __m256i bias = _mm256_set1_epi8((char)0x80), lo4 = _mm256_set1_epi8(0x0f);
  *mn = mh[0] = mh[1] = 0.0f;
  if (dt == MI_DTYPE_Q2_K) { /* halves as Q6_K's (scales d·sc), each half's min dmin·m in mh */
    const uint8_t *p = row + (size_t)(b / 8) * CPU_Q2_K_BYTES;
    const int j = (int)(b % 8);
    const float d = mi_quant_f16(p + 80), dmin = mi_quant_f16(p + 82);
    *sc = d * (float)(p[2 * j] & 15); /* exact in f32: 11 + 4 bits */
    *mn = d * (float)(p[2 * j + 1] & 15);
    mh[0] = dmin * (float)(p[2 * j] >> 4);
    mh[1] = dmin * (float)(p[2 * j + 1] >> 4);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * (j / 4)));
    const __m256i q =
        _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (j % 4))), _mm256_set1_epi8(3));
    return _mm256_or_si256(q, bias); /* q + 128 */
  }
  if (dt == MI_DTYPE_Q6_K) { /* 32 values of one quarter: (q - 32) + 128 */
    const uint8_t *p = row + (size_t)(b / 8) * CPU_Q6_K_BYTES;
    const int j = (int)(b % 8), h = j / 4, quarter = j % 4;
    const float d = mi_quant_f16(p + 208);
    /* two scales, one per 16 values: d·sc exact in f32 (11 + 8 bits); the
     * second goes where Q4_K keeps its min (the panel tile knows which) */
    *sc = d * (float)(int8_t)p[192 + 2 * j];
    *mn = d * (float)(int8_t)p[192 + 2 * j + 1];
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 64 * h + (quarter & 1) * 32));
    const __m256i low = _mm256_and_si256(quarter & 2 ? _mm256_srli_epi16(lo, 4) : lo, lo4);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
    const __m256i high =
        _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), _mm256_set1_epi8(3));
    const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4)); /* 0..63 */
    return _mm256_add_epi8(q, _mm256_set1_epi8(96));
  }
  if (dt == MI_DTYPE_Q3_K) { /* halves as Q6_K's: (q + 4) - 4 + 128 */
    const uint8_t *p = row + (size_t)(b / 8) * CPU_Q3_K_BYTES;
    const int j = (int)(b % 8);
    const float d = mi_quant_f16(p + 108);
    uint8_t u[16];
    cpu_q3_k_scales(u, p + 96);
    *sc = d * (float)(u[2 * j] - 32); /* exact in f32: 11 + 6 bits */
    *mn = d * (float)(u[2 * j + 1] - 32);
    return _mm256_add_epi8(q3_k_codes(p, j), _mm256_set1_epi8(124));
  }
  if (dt == MI_DTYPE_Q4_1 || dt == MI_DTYPE_Q5_0 || dt == MI_DTYPE_Q5_1) {
    /* Q5_0: (q - 16) + 128; Q4_1, Q5_1: q + 128 and the min m, which the
     * panel tile takes off as mn·fl(d_x·Σq_x): so mn = -m */
    const size_t bb = mi_dtype_block_bytes(dt);
    float m;
    const __m256i q = legacy_codes(row + (size_t)b * bb, dt, sc, &m);
    *mn = -m;
    return _mm256_add_epi8(q, _mm256_set1_epi8(dt == MI_DTYPE_Q5_0 ? 112 : (char)0x80));
  }
  if (dt == MI_DTYPE_Q8_0) {
    const uint8_t *p = row + (size_t)b * CPU_Q8_WBYTES;
    *sc = mi_quant_f16(p);
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 2)), bias);
  }
  if (dt == MI_DTYPE_Q4_0) {
    const uint8_t *p = row + (size_t)b * CPU_Q4_0_BYTES;
    *sc = mi_quant_f16(p);
    const __m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
    const __m256i q = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(v, 4), v), lo4); /* values 0-15 | 16-31 */
    return _mm256_add_epi8(q, _mm256_set1_epi8(120)); /* (q - 8) + 128 */
  }
  /* Q4_K, and Q5_K: the same scales and mins, its nibbles at byte 48 and
   * the fifth bit of value l of sub-block j bit j of qh[l] (byte 16) */
  const int five = dt == MI_DTYPE_Q5_K;
  const uint8_t *p = row + (size_t)(b / 8) * (five ? CPU_Q5_K_BYTES : CPU_Q4_K_BYTES);
  const int j = (int)(b % 8);
  uint8_t sm[16];
  cpu_q4_k_scales(sm, p + 4);
  *sc = mi_quant_f16(p) * (float)sm[j];
  *mn = mi_quant_f16(p + 2) * (float)sm[8 + j];
  const __m256i v = _mm256_loadu_si256((const __m256i *)(p + (five ? 48 : 16) + 32 * (j / 2)));
  __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, lo4);
  if (five) { /* bit j of each qh byte to bit 4 (16-bit shifts: the bit kept stays in its byte) */
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1));
    q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4)); /* 0..31 */
  }
  return _mm256_add_epi8(q, bias); /* q + 128 */
}

/* Packs rows n .. n+nr-1 (nr <= 16; the others: weights 0, scale 0, which
 * add exactly 0) over blocks b0 .. b0+nbk-1 into P [nbk·8][16], S [nbk][16],
 * Mn [nbk][16] (the min terms, or the second halves' scales) and Mh
 * [nbk][2][16] (Q2_K's mins of each half). */
static void pack_panel(uint32_t *P, float *S, float *Mn, float *Mh, const uint8_t *w, mi_dtype dt,
                       size_t wrow, int64_t n, int nr, int64_t b0, int nbk) {
  const __m256i bias = _mm256_set1_epi8((char)0x80);
  for (int b = 0; b < nbk; b++) {
    for (int h = 0; h < 2; h++) { /* rows 8h .. 8h+7 */
      __m256i r[8];
      for (int i = 0; i < 8; i++) {
        const int j = 8 * h + i;
        float sc = 0.0f, mn = 0.0f, mh[2] = {0.0f, 0.0f};
        r[i] = j < nr ? block_codes(dt, w + (size_t)(n + j) * wrow, b0 + b, &sc, &mn, mh) : bias;
        S[b * PN + j] = sc;
        Mn[b * PN + j] = mn;
        Mh[(2 * b) * PN + j] = mh[0];
        Mh[(2 * b + 1) * PN + j] = mh[1];
      }
      transpose8(r);
      for (int t = 0; t < 8; t++)
        _mm256_store_si256((__m256i *)(P + (b * 8 + t) * PN + 8 * h), r[t]);
    }
  }
}

/* MR tokens (rows m .. m+MR-1) x the panel's 16 outputs over its nbk
 * blocks (block b0 + b of the row); y row i at y + i·ldy, lanes past nr
 * masked off (mk); accum: add to y. */
AI void panel_tile(const int MR, float *y, int64_t ldy, const cpu_q8_act *a, int64_t m,
                   const uint32_t *P, const float *S, const float *Mn, const float *Mh, int halves,
                   int64_t b0, int nbk, __mmask16 mk, int accum) {
  const int64_t nbp = a->kp / CPU_Q8_QK;
  const int8_t *q[PMR];
  const float *d[PMR];
  const int32_t *cs[PMR], *ch[PMR];
  const float *ds[PMR];
  for (int i = 0; i < MR; i++) {
    q[i] = a->q + (m + i) * a->kp + b0 * CPU_Q8_QK;
    d[i] = a->d + (m + i) * nbp + b0;
    cs[i] = a->s + (m + i) * nbp + b0;
    ch[i] = a->sh + (m + i) * nbp + b0;
    ds[i] = Mn && !halves ? a->ds + (m + i) * nbp + b0 : NULL;
  }
  __m512 acc[PMR];
  for (int i = 0; i < MR; i++)
    acc[i] = _mm512_setzero_ps();
  for (int b = 0; halves && b < nbk; b++) {
    /* Q6_K: values 0-15 (groups 0-3) and 16-31 (groups 4-7) have scales of
     * their own (S and Mn), so two sums, each started at its half's bias */
    __m512i I[PMR], J[PMR];
    for (int i = 0; i < MR; i++) {
      I[i] = _mm512_set1_epi32(ch[i][b]);
      J[i] = _mm512_set1_epi32(cs[i][b] - ch[i][b]);
    }
    for (int t = 0; t < 4; t++) {
      const __m512i pv = _mm512_load_si512((const void *)(P + (b * 8 + t) * PN));
      const __m512i pw = _mm512_load_si512((const void *)(P + (b * 8 + 4 + t) * PN));
      for (int i = 0; i < MR; i++) {
        I[i] = dpbusd_bcast(I[i], pv, q[i] + b * CPU_Q8_QK + 4 * t);
        J[i] = dpbusd_bcast(J[i], pw, q[i] + b * CPU_Q8_QK + 16 + 4 * t);
      }
    }
    const __m512 sv = _mm512_load_ps(S + b * PN), sw = _mm512_load_ps(Mn + b * PN);
    for (int i = 0; i < MR; i++) {
      const __m512 dx = _mm512_set1_ps(d[i][b]);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[i]), _mm512_mul_ps(sv, dx), acc[i]);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(J[i]), _mm512_mul_ps(sw, dx), acc[i]);
    }
    if (Mh) { /* Q2_K: less dmin·m_h · d_x·Σ_h q_x, Σ_h q_x = -ch/128 (exact integers) */
      const __m512 ma = _mm512_load_ps(Mh + 2 * b * PN), mb = _mm512_load_ps(Mh + (2 * b + 1) * PN);
      for (int i = 0; i < MR; i++) {
        const float xa = d[i][b] * ((float)ch[i][b] * 0x1p-7f);
        const float xb = d[i][b] * ((float)(cs[i][b] - ch[i][b]) * 0x1p-7f);
        acc[i] = _mm512_fmadd_ps(ma, _mm512_set1_ps(xa), acc[i]);
        acc[i] = _mm512_fmadd_ps(mb, _mm512_set1_ps(xb), acc[i]);
      }
    }
  }
  for (int b = 0; !halves && b < nbk; b++) {
    __m512i I[PMR];
    for (int i = 0; i < MR; i++)
      I[i] = _mm512_set1_epi32(cs[i][b]);
    for (int t = 0; t < 8; t++) {
      const __m512i pv = _mm512_load_si512((const void *)(P + (b * 8 + t) * PN));
      for (int i = 0; i < MR; i++)
        I[i] = dpbusd_bcast(I[i], pv, q[i] + b * CPU_Q8_QK + 4 * t);
    }
    const __m512 sv = _mm512_load_ps(S + b * PN);
    for (int i = 0; i < MR; i++)
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[i]), _mm512_mul_ps(sv, _mm512_set1_ps(d[i][b])),
                               acc[i]);
    if (Mn) { /* Q4_K, Q5_K: less dmin·m_j · fl(d_x·Σq_x) */
      const __m512 mv = _mm512_load_ps(Mn + b * PN);
      for (int i = 0; i < MR; i++)
        acc[i] = _mm512_fnmadd_ps(mv, _mm512_set1_ps(ds[i][b]), acc[i]);
    }
  }
  for (int i = 0; i < MR; i++) {
    float *yr = y + i * ldy;
    if (accum) acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(mk, yr));
    _mm512_mask_storeu_ps(yr, mk, acc[i]);
  }
}

/* Tokens [m, me) over one panel (y at its first output): PMR at a time,
 * then one tile of exactly the rest. */
static void panel_rows(float *y, int64_t ldy, const cpu_q8_act *a, int64_t m, int64_t me,
                       const uint32_t *P, const float *S, const float *Mn, const float *Mh,
                       int halves, int64_t b0, int nbk, __mmask16 mk) {
  const int acc = b0 > 0;
  for (; m + PMR <= me; m += PMR)
    panel_tile(PMR, y + m * ldy, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc);
  float *yr = y + m * ldy;
  switch (me - m) {
  case 1: panel_tile(1, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  case 2: panel_tile(2, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  case 3: panel_tile(3, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  case 4: panel_tile(4, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  case 5: panel_tile(5, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  case 6: panel_tile(6, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  case 7: panel_tile(7, yr, ldy, a, m, P, S, Mn, Mh, halves, b0, nbk, mk, acc); break;
  default: break;
  }
}

static int gemm_takes(mi_dtype dt) {
  return cpu_quant_takes(dt); /* every block type the matmul takes has panels */
}

static void gemm(float *y, int64_t ldy, const cpu_q8_act *a, int64_t m0, int64_t m1, const void *w,
                 mi_dtype dt, size_t wrow, int64_t n0, int64_t n1) {
  uint32_t P[PKB * 8 * PN] __attribute__((aligned(64))); /* 16 KB */
  float S[PKB * PN] __attribute__((aligned(64)));        /* 2 KB */
  float Mn[PKB * PN] __attribute__((aligned(64)));       /* 2 KB: Q4_K's mins, Q6_K's 2nd scales */
  float Mh[2 * PKB * PN] __attribute__((aligned(64)));   /* 4 KB: Q2_K's mins of each half */
  const int halves = dt == MI_DTYPE_Q6_K || dt == MI_DTYPE_Q3_K || dt == MI_DTYPE_Q2_K;
  const float *hmins = dt == MI_DTYPE_Q2_K ? Mh : NULL;
  const float *mins = halves || cpu_quant_wants_ds(dt) ? Mn : NULL;
  const int64_t nb = a->K / CPU_Q8_QK;
  for (int64_t ms = m0; ms < m1; ms += PMB) {
    const int64_t me = m1 - ms < PMB ? m1 : ms + PMB;
    for (int64_t n = n0; n < n1; n += PN) {
      const int nr = n1 - n < PN ? (int)(n1 - n) : PN;
      const __mmask16 mk = (__mmask16)((1u << nr) - 1);
      for (int64_t b0 = 0; b0 < nb; b0 += PKB) {
        const int nbk = nb - b0 < PKB ? (int)(nb - b0) : PKB;
        pack_panel(P, S, Mn, Mh, w, dt, wrow, n, nr, b0, nbk);
        panel_rows(y + n, ldy, a, ms, me, P, S, mins, hmins, halves, b0, nbk, mk);
      }
    }
  }
}

const cpu_q8_ops cpu_q8_avx512vnni = {CPU_Q8_OPS_BASE("avx512vnni", avx512, avx2, avx512), .gemm = gemm,
                                      .gemm_takes = gemm_takes, .sums = 1};
