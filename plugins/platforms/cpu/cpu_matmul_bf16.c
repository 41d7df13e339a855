/* The bf16-activation prefill matmul, AVX-512 BF16. This file alone is
 * compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
 * CMakeLists.txt); nothing here runs unless cpu_isa.c found AVX512_BF16
 * with OS-enabled ZMM state and the plugin's matmul_act mode allows it.
 *
 * y[m,n] = Σ_k bf16(x[m,k]) · w[n,k]: VDPBF16PS multiplies pairs of bf16
 * values and adds both products to an f32 lane, 32 multiply-adds per
 * instruction where the f32 FMA does 16, at the same instruction rate on
 * the hosts measured. The price is the activations: each x is rounded to
 * bf16 (8 significant bits, round to nearest even: |bf16(x) - x| <= 2^-8 |x|).
 * The weights are bf16 already and a bf16 x bf16 product is exact in f32, so
 * that rounding is the only new error; sums stay f32, one per k as in the
 * exact path. The operator contract (ckb/operators/matmul.json, mode
 * "bf16_activations") states the bound: |y - y64| <= (2^-8 + K 2^-24 (1 +
 * 2^-8)) Σ_k |x_k w_k| + K 2^-126 (the last term: VDPBF16PS and the
 * conversion treat subnormals as zero).
 *
 * Scheme (the f32 outer-product tiles of cpu_kernels_avx512.c, in pairs):
 *  - x, once per call: rows [m0, m1) converted to bf16 pairs, xb[m][p] =
 *    (x[m][2p], x[m][2p+1]) as one 32-bit word, a zero in the high half
 *    when K is odd; rows padded to 16 words (64 bytes), zeros.
 *  - w, once per block of BF_NB = 32 outputs and BF_KCP pairs of k: the
 *    pair-interleaved panel VDPBF16PS wants, panel[p][j] = (w[n+j][2p],
 *    w[n+j][2p+1]): a 32-bit transpose of the weight rows, done as 16x16
 *    word transposes in registers (16 loads, 64 shuffles, 16 stores per
 *    512 weights), reused by every token.
 *  - tiles of BF_MR tokens x 32 outputs: per pair of k, two panel vectors,
 *    one broadcast word per token, two VDPBF16PS per token into 2·BF_MR
 *    accumulators. No horizontal sums.
 * Up to CPU_BF16ACT_IP_MAX_M tokens (a short prompt) the weights are not
 * packed: 4x4 inner-product tiles read them as stored, in a few sequential
 * streams with a software prefetch ahead ("few tokens" below), which keeps
 * the weight stream, the bound at that size, near the decode GEMV's.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ip_streams.h"
#include "cpu_matmul_bf16.h"
#include "cpu_reduce_avx512.h"

#define AI static inline __attribute__((always_inline))
#define VL 16
#define BF_NB 32   /* outputs per panel (two zmm of f32 lanes) */
#ifndef BF_KCP
#define BF_KCP 128 /* pairs of k per panel block: 32 x 128 words = 16 KB, stays in L1 */
#endif
#ifndef BF_PREFETCH
#define BF_PREFETCH 1
#endif
#ifndef BF_MR
#define BF_MR 8 /* tokens per register tile: 16 accumulators */
#endif

/* ---- x: f32 rows to bf16 pairs ---- */

/* xb[i·ldxb + p] for i < rows, p < ldxb (a multiple of 16): the pairs of
 * row i of x, zeros past K. VCVTNE2PS2BF16 rounds to nearest even. */
static void convert_x(uint32_t *xb, int64_t ldxb, const float *x, int64_t K, int64_t rows) {
  for (int64_t i = 0; i < rows; i++) {
    const float *xr = x + i * K;
    uint32_t *d = xb + i * ldxb;
    for (int64_t p = 0; p < ldxb; p += VL) {
      const int64_t k = 2 * p; /* 32 values of x -> 16 pairs */
      __m512 lo, hi;
      if (k + 2 * VL <= K) {
        lo = _mm512_loadu_ps(xr + k);
        hi = _mm512_loadu_ps(xr + k + VL);
      } else {
        const int64_t r = K - k > 0 ? K - k : 0;
        const __mmask16 ml = r >= VL ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
        const __mmask16 mh = r > VL ? (__mmask16)((1u << (r - VL)) - 1) : 0;
        lo = _mm512_maskz_loadu_ps(ml, xr + k);
        hi = _mm512_maskz_loadu_ps(mh, xr + k + VL);
      }
      /* elements 0..15 of the result come from the second operand */
      _mm512_store_si512((void *)(d + p), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

/* ---- w: the pair-interleaved panel ---- */

/* r[i].dword[c] <-> r[c].dword[i] for a 16x16 block of 32-bit words. */
AI void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  /* u[4i + c], 128-bit lane l: rows 4i..4i+3 at column 4l + c */
  for (int i = 0; i < 4; i++) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  /* column 4l + c = lane l of u[c], u[4 + c], u[8 + c], u[12 + c] */
  for (int c = 0; c < 4; c++) {
    __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);     /* a0 a1 b0 b1 */
    __m512i x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);     /* a2 a3 b2 b3 */
    __m512i y0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44); /* c0 c1 d0 d1 */
    __m512i y1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE); /* c2 c3 d2 d3 */
    r[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);      /* a0 b0 c0 d0 */
    r[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xDD);  /* a1 b1 c1 d1 */
    r[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);  /* a2 b2 c2 d2 */
    r[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xDD); /* a3 b3 c3 d3 */
  }
}

/* panel[p·32 + j] = (w[n+j][2(p0+p)], w[n+j][2(p0+p)+1]) for p < round_up(kcp,
 * 16), j < 32; zero for rows j >= nr and for k >= K (the odd K's last high
 * half included). Never reads past a row's K values. */
static void pack_panel(uint32_t *panel, const uint16_t *w, int64_t K, int64_t n, int nr,
                       int64_t p0, int64_t kcp) {
  for (int jb = 0; jb < BF_NB; jb += VL) {
    for (int64_t pb = 0; pb < kcp; pb += VL) {
      const int64_t k = 2 * (p0 + pb);
      const int64_t left = K - k; /* > 0: pb < kcp <= pairs left */
      const __mmask32 m = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1);
      __m512i r[16];
      for (int j = 0; j < VL; j++) {
        const uint16_t *src = w + (size_t)(n + jb + j) * (size_t)K + k;
        r[j] = jb + j < nr ? _mm512_maskz_loadu_epi16(m, src) : _mm512_setzero_si512();
#if BF_PREFETCH
        /* the same 64 bytes of the next block: 32 short row streams are
         * more than the hardware prefetchers follow, and at a few tokens the
         * weights, not the dot products, set the pace (past the end of a row
         * or of w a prefetch is harmless) */
        _mm_prefetch((const char *)(src + 2 * BF_KCP), _MM_HINT_T0);
#endif
      }
      transpose16(r);
      for (int p = 0; p < VL; p++) _mm512_store_si512((void *)(panel + (pb + p) * BF_NB + jb), r[p]);
    }
  }
}

/* ---- the register tile ---- */

/* MR tokens (rows of xb, ldx words apart) x 32 outputs over kcp pairs.
 * mr <= MR valid rows (the others repeat the last one and are not stored);
 * m0/m1: the valid outputs of each half; accum: add to y. */
AI void bf_tile(const int MR, float *y, int64_t ldy, const uint32_t *xb, int64_t ldx,
                const uint32_t *panel, int64_t kcp, int mr, __mmask16 m0, __mmask16 m1,
                int accum) {
  const uint32_t *xr[BF_MR];
  for (int i = 0; i < MR; i++) xr[i] = xb + (i < mr ? i : mr - 1) * ldx;
  __m512 c0[BF_MR], c1[BF_MR];
  for (int i = 0; i < MR; i++) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kcp; p++) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(panel + p * BF_NB));
    const __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(panel + p * BF_NB + VL));
    for (int i = 0; i < MR; i++) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)xr[i][p]);
      c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
    }
  }
  for (int i = 0; i < mr; i++) {
    float *yr = y + i * ldy;
    if (accum) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yr));
      c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yr + VL));
    }
    _mm512_mask_storeu_ps(yr, m0, c0[i]);
    _mm512_mask_storeu_ps(yr + VL, m1, c1[i]);
  }
}

/* ---- few tokens: inner products, no panels ---- */

/* At a handful of tokens each weight is used only M times, so the panel's
 * transposes (64 shuffles per 512 weights) cost as much as the dot
 * products they feed (an 11-token prefill's matmuls ran at ~25% of the
 * bf16-dot peak, the weights coming in at half the decode GEMV's rate).
 * Here the weights are read as stored, in the streams of cpu_ip_streams.h:
 * one zmm holds 16 pairs of k of one output row, one holds the same 16
 * pairs of one token (xb), and VDPBF16PS leaves 16 partial sums per (token,
 * output) that a reduction tree adds at the end (cpu_reduce_avx512.h).
 * Tiles of 4 tokens x 4 outputs: 16 accumulators, enough independent chains
 * to hide VDPBF16PS's latency, 8 loads per 16 dot products. */

/* y[i·ldy + col[j]] (+)= Σ_{k0 <= k < k1} bf16 x row i (xb, ldx words
 * apart, zero past K) · w row wr[j] for i < mr, j < nr; accum: add to y.
 * k0 is a multiple of 32 and k1 - k0 <= IP_KB, or k1 = K. Rows i >= mr
 * and outputs j >= nr repeat the last valid one and are not stored. */
AI void ip_tile(float *y, int64_t ldy, const int64_t col[4], const uint32_t *xb, int64_t ldx,
                const void *const wrow[4], int64_t k0, int64_t k1, int accum, int mr, int nr) {
  const uint32_t *xr[4];
  const uint16_t *wr[4];
  for (int i = 0; i < 4; i++) xr[i] = xb + (i < mr ? i : mr - 1) * ldx;
  for (int j = 0; j < 4; j++) wr[j] = wrow[j]; /* past nr: the walk repeats the last valid row */
  __m512 acc[16];
  for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
  int64_t k = k0;
  for (; k + 2 * VL <= k1; k += 2 * VL) {
    __m512bh xv[4];
    for (int i = 0; i < 4; i++) xv[i] = (__m512bh)_mm512_load_si512((const void *)(xr[i] + k / 2));
    for (int j = 0; j < 4; j++) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(wr[j] + k));
      _mm_prefetch((const char *)(wr[j] + k + IP_PF_AHEAD), _MM_HINT_T0);
      for (int i = 0; i < 4; i++) acc[i * 4 + j] = _mm512_dpbf16_ps(acc[i * 4 + j], xv[i], wv);
    }
  }
  if (k < k1) { /* k1 = K: its last K mod 32 values, w masked (past a row: the next, or nothing) */
    const __mmask32 m = (__mmask32)((1u << (k1 - k)) - 1);
    __m512bh xv[4];
    for (int i = 0; i < 4; i++) xv[i] = (__m512bh)_mm512_load_si512((const void *)(xr[i] + k / 2));
    for (int j = 0; j < 4; j++) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, wr[j] + k);
      for (int i = 0; i < 4; i++) acc[i * 4 + j] = _mm512_dpbf16_ps(acc[i * 4 + j], xv[i], wv);
    }
  }
  mi_store4x4(y, ldy, col, acc, mr, nr, accum);
}

typedef struct ip_args {
  float *y;
  int64_t ldy;
  const uint32_t *xb;
  int64_t ldx;
} ip_args;

/* noinline: a tile on its own keeps its accumulators in registers (see
 * cpu_xip_driver.h) */
static __attribute__((noinline)) void ip_tile_cb(void *arg, int64_t row, int mr,
                                                 const int64_t col[4], const void *const wr[4],
                                                 int nr, int64_t k0, int64_t k1, int accum) {
  const ip_args *a = arg;
  ip_tile(a->y + row * a->ldy, a->ldy, col, a->xb + row * a->ldx, a->ldx, wr, k0, k1, accum, mr,
          nr);
}

int cpu_matmul_bf16(float *y, const float *x, const uint16_t *w, int64_t N, int64_t K, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1) {
  const int64_t rows = m1 - m0, pairs = (K + 1) / 2, ldxb = (pairs + VL - 1) / VL * VL;
  if (rows <= 0 || n1 <= n0) return 0;
  /* One conversion of this thread's rows per call, shared by all its
   * panels: a few percent of one panel's work (malloc'd: M·K·2 bytes is too
   * much for a worker's stack at M = 1021). */
  uint32_t *xb = aligned_alloc(64, (size_t)rows * (size_t)ldxb * sizeof *xb);
  if (!xb) return -1;
  convert_x(xb, ldxb, x + m0 * K, K, rows);
  if (rows <= CPU_BF16ACT_IP_MAX_M) {
    ip_args a = {y + m0 * N, N, xb, ldxb};
    ip_stream_rows(w, (size_t)K * sizeof *w, K, rows, 4, n0, n1, ip_tile_cb, &a);
    free(xb);
    return 0;
  }
  uint32_t panel[BF_KCP * BF_NB] __attribute__((aligned(64))); /* [pairs][32] words */
  for (int64_t n = n0; n < n1; n += BF_NB) {
    const int nr = n1 - n < BF_NB ? (int)(n1 - n) : BF_NB;
    const __mmask16 mk0 = nr >= VL ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 mk1 = nr >= 2 * VL ? (__mmask16)0xffff
                          : nr > VL    ? (__mmask16)((1u << (nr - VL)) - 1)
                                       : 0;
    for (int64_t p0 = 0; p0 < pairs; p0 += BF_KCP) {
      const int64_t kcp = pairs - p0 < BF_KCP ? pairs - p0 : BF_KCP;
      pack_panel(panel, w, K, n, nr, p0, kcp);
      const int acc = p0 > 0;
      const uint32_t *xp = xb + p0;
      int64_t m = m0;
      for (; m + BF_MR <= m1; m += BF_MR)
        bf_tile(BF_MR, y + m * N + n, N, xp + (m - m0) * ldxb, ldxb, panel, kcp, BF_MR, mk0, mk1,
                acc);
      if (m < m1) {
        /* the last mr < BF_MR rows: the smallest tile that holds them */
        const int mr = (int)(m1 - m);
        float *yt = y + m * N + n;
        const uint32_t *xt = xp + (m - m0) * ldxb;
        if (mr > BF_MR / 2) bf_tile(BF_MR, yt, N, xt, ldxb, panel, kcp, mr, mk0, mk1, acc);
        else if (mr > 2) bf_tile(BF_MR / 2, yt, N, xt, ldxb, panel, kcp, mr, mk0, mk1, acc);
        else bf_tile(2, yt, N, xt, ldxb, panel, kcp, mr, mk0, mk1, acc);
      }
    }
  }
  free(xb);
  return 0;
}
