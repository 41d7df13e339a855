/* Per-ISA inner loops, AVX-512F. This file alone is compiled with
 * -mavx512f -mavx2 -mfma -mf16c (see CMakeLists.txt); nothing here runs
 * unless cpu_isa.c found AVX-512F with OS-enabled ZMM state.
 *
 * Matmul: y[m,n] = Σ_k x[m,k]·w[n,k]. Weights are converted to f32 in
 * registers (bf16: zero-extend to 32 bits and shift left 16 — exact; f16:
 * vcvtph2ps — exact) and accumulated with f32 FMA, so the only error is f32
 * accumulation order. By rows per call:
 *   1: gemv_dt, several sequential weight streams (decode).
 *   2-32, bf16 weights: xip_*, 4x4 inner-product tiles on the weights as
 *        stored, streamed (a short prompt, bound by the weight stream).
 *   2-7 (f32/f16 weights): 4x4 inner-product tiles, the weights converted
 *        to an f32 panel once per block of x rows; 1x4 for a leftover row.
 *   8+: outer-product tiles over packed weight panels (matmul_outer).
 * Tails (K not a multiple of 16, fewer than 4 rows) are handled with masked
 * or zero-padded loads, and by clamping row pointers to the last valid row
 * (the duplicate results are discarded).
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_avx2_pack.h"
#include "cpu_ip_streams.h"
#include "cpu_avx512_load.h"
#include "cpu_internal.h"
#include "cpu_exp_simd.h"
#include "cpu_matmul_bf16.h"
#include "cpu_reduce_avx512.h"

#define AI static inline __attribute__((always_inline))
#define VL 16
#define KC 256 /* K chunk of a converted weight panel (multiple of VL) */

AI __m512 ld_w(const void *w, int64_t k, mi_dtype dt) { return mi_avx512_ld(w, k, dt); }

/* The last r < 16 elements, zero padded. Padding is 0 in both x and w, so
 * it adds exact zeros to the sums. */
AI __m512 ld_w_tail(const void *w, int64_t k, int64_t r, mi_dtype dt) {
  if (dt == MI_DTYPE_F32) return _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1), (const float *)w + k);
  uint16_t buf[VL] = {0};
  memcpy(buf, (const uint16_t *)w + k, (size_t)r * 2);
  return ld_w(buf, 0, dt);
}

AI __m512 ld_x_tail(const float *x, int64_t k, int64_t r) {
  return _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1), x + k);
}

/* One MR x NR register tile over K = kn elements: x rows ldx apart, w rows
 * wrow bytes apart. mr <= MR and nr <= NR are the valid rows/columns. MR,
 * NR are compile-time constants after inlining, so acc[][] lives in
 * registers. accum: add to y (a later K chunk) instead of storing. */
AI void tile(const int MR, const int NR, float *y, int64_t ldy, const float *x, int64_t ldx,
             int64_t K, const char *w, size_t wrow, mi_dtype dt, int mr, int nr, int accum) {
  const float *xr[4];
  const char *wr[4];
  for (int i = 0; i < MR; i++) xr[i] = x + (i < mr ? i : mr - 1) * ldx;
  for (int j = 0; j < NR; j++) wr[j] = w + (size_t)(j < nr ? j : nr - 1) * wrow;
  __m512 acc[4][4];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + VL <= K; k += VL) {
    __m512 wv[4];
    for (int j = 0; j < NR; j++) wv[j] = ld_w(wr[j], k, dt);
    for (int i = 0; i < MR; i++) {
      __m512 xv = _mm512_loadu_ps(xr[i] + k);
      for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < K) {
    int64_t r = K - k;
    __m512 wv[4];
    for (int j = 0; j < NR; j++) wv[j] = ld_w_tail(wr[j], k, r, dt);
    for (int i = 0; i < MR; i++) {
      __m512 xv = ld_x_tail(xr[i], k, r);
      for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float r = _mm512_reduce_add_ps(acc[i][j]);
      y[i * ldy + j] = accum ? y[i * ldy + j] + r : r;
    }
}

/* Decode GEMV (one activation row) is memory bound: what matters is how
 * many cache-line fills each core keeps in flight. One sequential stream
 * per thread leaves the memory system idle much of the time (measured on
 * the 0.6B decode sweep, 2 threads: 19.7 GB/s); GEMV_STREAMS rows taken
 * from that many equal parts of [n0, n1), far apart, are as many
 * sequential streams, each followed by the L2 hardware prefetcher (8:
 * ~25 GB/s, near a plain multi-stream read of the same machine). Each
 * stream reads GEMV_KSTEP vectors (two cache lines of bf16) before the
 * next one. x (one row, a few KB) stays in L1. Rows left over (fewer than
 * GEMV_STREAMS) go one at a time, with a software prefetch PF_AHEAD bytes
 * ahead. */
#define PF_AHEAD 1024
#define GEMV_STREAMS 8
#define GEMV_KSTEP 4

AI void gemv_row1(float *y, const float *x, const void *w, mi_dtype dt, int64_t K, int64_t n0,
                  int64_t n1);

AI void gemv_dt(float *y, const float *x, const void *w, mi_dtype dt, int64_t K, int64_t n0,
                int64_t n1) {
  enum { S = GEMV_STREAMS };
  const size_t wrow = (size_t)K * mi_dtype_size(dt);
  const int64_t chunk = (n1 - n0) / S; /* rows per stream */
  for (int64_t i = 0; i < chunk; i++) {
    const char *wr[S];
    __m512 a[S][2];
    for (int s = 0; s < S; s++) {
      wr[s] = (const char *)w + (size_t)(n0 + s * chunk + i) * wrow;
      a[s][0] = _mm512_setzero_ps();
      a[s][1] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + GEMV_KSTEP * VL <= K; k += GEMV_KSTEP * VL)
      for (int s = 0; s < S; s++)
        for (int u = 0; u < GEMV_KSTEP; u++)
          a[s][u & 1] = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + u * VL),
                                        ld_w(wr[s], k + u * VL, dt), a[s][u & 1]);
    for (; k < K; k += VL) {
      const int64_t r = K - k < VL ? K - k : VL;
      const __m512 xv = ld_x_tail(x, k, r);
      for (int s = 0; s < S; s++)
        a[s][0] = _mm512_fmadd_ps(xv, r == VL ? ld_w(wr[s], k, dt) : ld_w_tail(wr[s], k, r, dt),
                                  a[s][0]);
    }
    for (int s = 0; s < S; s++)
      y[n0 + s * chunk + i] = _mm512_reduce_add_ps(_mm512_add_ps(a[s][0], a[s][1]));
  }
  gemv_row1(y, x, w, dt, K, n0 + S * chunk, n1);
}

AI void gemv_row1(float *y, const float *x, const void *w, mi_dtype dt, int64_t K, int64_t n0,
                  int64_t n1) {
  size_t wrow = (size_t)K * mi_dtype_size(dt);
  for (int64_t n = n0; n < n1; n++) {
    const char *wr = (const char *)w + (size_t)n * wrow;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t k = 0;
    for (; k + 4 * VL <= K; k += 4 * VL) {
      /* 64 elements = 128 bytes (bf16/f16) or 256 bytes (f32) per step.
       * Prefetching past the end of the matrix is harmless (no fault). */
      const char *pf = wr + (size_t)k * mi_dtype_size(dt) + PF_AHEAD;
      _mm_prefetch(pf, _MM_HINT_T0);
      _mm_prefetch(pf + 64, _MM_HINT_T0);
      if (dt == MI_DTYPE_F32) {
        _mm_prefetch(pf + 128, _MM_HINT_T0);
        _mm_prefetch(pf + 192, _MM_HINT_T0);
      }
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), ld_w(wr, k, dt), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + VL), ld_w(wr, k + VL, dt), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + 2 * VL), ld_w(wr, k + 2 * VL, dt), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + 3 * VL), ld_w(wr, k + 3 * VL, dt), a3);
    }
    for (; k + VL <= K; k += VL) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), ld_w(wr, k, dt), a0);
    if (k < K) a1 = _mm512_fmadd_ps(ld_x_tail(x, k, K - k), ld_w_tail(wr, k, K - k, dt), a1);
    y[n] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }
}

/* Prefill matmul, outer-product form (the BLIS scheme). For each block of
 * OP_NB = 32 weight rows and OP_KC values of k, the weights are widened to
 * f32 and transposed ONCE into a k-major panel [kc][32]; then every group
 * of up to 6 activation rows runs a 6x32 register tile: per k, two panel
 * vectors, six broadcast x values and twelve FMAs into twelve accumulators.
 * No horizontal sums (the inner-product tile spends a reduction per output
 * per K chunk), and the loads stay below the FMAs, so the FMA ports set the
 * pace. The panel is built with 8x8 in-register transposes
 * (cpu_avx2_pack.h), about one load and one store per 8 weights (the
 * scalar transpose it replaced cost as much as the tiles below ~32 rows),
 * paid back over the M rows:
 * matmul_dt only takes this path when M >= OP_MIN_M. Each output is a
 * sequential f32 sum over k, like the other paths. */
#define OP_NB 32
#define OP_KC 256
#define OP_MR 6
#define OP_MIN_M 8

AI void op_tile(const int MR, float *y, int64_t ldy, const float *x, int64_t ldx, const float *panel,
                int64_t kc, int mr, __mmask16 m0, __mmask16 m1, int accum, int pfy) {
  const float *xr[OP_MR];
  for (int i = 0; i < MR; i++) xr[i] = x + (i < mr ? i : mr - 1) * ldx;
  if (accum && pfy) /* outputs out of L2 (K-first order): start fetching them now */
    for (int i = 0; i < mr; i++) {
      _mm_prefetch((const char *)(y + i * ldy), _MM_HINT_T0);
      _mm_prefetch((const char *)(y + i * ldy) + 64, _MM_HINT_T0);
      _mm_prefetch((const char *)(y + i * ldy) + 124, _MM_HINT_T0);
    }
  __m512 c0[OP_MR], c1[OP_MR];
  for (int i = 0; i < MR; i++) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_load_ps(panel + k * OP_NB), b1 = _mm512_load_ps(panel + k * OP_NB + VL);
    for (int i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(xr[i][k]);
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
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

/* Weight rows n .. n+nr-1 over k0 .. k0+kc-1: packed once into the panel,
 * then every group of OP_MR rows of x in [m0, m1) runs over it. */
AI void op_panel(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                 int64_t m0, int64_t m1, int64_t n, int nr, int64_t k0, int64_t kc, float *panel,
                 int pfy) {
  const size_t wrow = (size_t)K * mi_dtype_size(dt);
  const __mmask16 mk0 = nr >= VL ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
  const __mmask16 mk1 = nr >= 2 * VL ? (__mmask16)0xffff
                        : nr > VL    ? (__mmask16)((1u << (nr - VL)) - 1)
                                     : 0;
  /* panel[k][j] = w[n + j][k0 + k]; columns j >= nr are zero */
  mi_pack_panel(panel, OP_NB, w, dt, wrow, n, nr, k0, kc);
  const int acc = k0 > 0;
  int64_t m = m0;
  for (; m + OP_MR <= m1; m += OP_MR)
    op_tile(OP_MR, y + m * N + n, N, x + m * K + k0, K, panel, kc, OP_MR, mk0, mk1, acc, pfy);
  if (m < m1) {
    /* the last mr < OP_MR rows: a smaller tile (rows past mr repeat the
     * last row and are not stored) */
    const int mr = (int)(m1 - m);
    if (mr > OP_MR / 2)
      op_tile(OP_MR, y + m * N + n, N, x + m * K + k0, K, panel, kc, mr, mk0, mk1, acc, pfy);
    else if (mr > 2)
      op_tile(OP_MR / 2, y + m * N + n, N, x + m * K + k0, K, panel, kc, mr, mk0, mk1, acc, pfy);
    else
      op_tile(2, y + m * N + n, N, x + m * K + k0, K, panel, kc, mr, mk0, mk1, acc, pfy);
  }
}

/* Two loop orders (mi_outer_k_first in cpu_avx2_pack.h picks one):
 * small x (it stays in L2 whole): panel by panel, each over all of K
 * before the next, so the weights stream row by row (and the next panel's
 * are prefetched); large x (a 256-token prefill: 1-3 MB, 2-6 MB at 512):
 * K outermost, then blocks of MI_OUTER_MB rows, then the panels, so a
 * [MB][KC] slice of x (<= 256 KB) stays in L2 while every panel of this
 * thread's columns passes over it, instead of all of x coming again from
 * L3 for every 32 columns. The outputs then take K / KC read-modify-write
 * passes (op_tile prefetches them), and the next panel's weights are
 * prefetched (this order jumps from row block to row block). Measured on a
 * Qwen3-0.6B layer's seven matmuls (cpu_bench 1 ISA layer, best of 8, CPU
 * time): 256 tokens 45.8 -> 43.9 ms, 512 tokens 93.3 -> 89.3 ms (AVX2:
 * 87.1 -> 82.7, 178 -> 168); without the two prefetches it was no faster
 * than the old order. */
AI void matmul_outer(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                     int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  float panel[OP_KC * OP_NB] __attribute__((aligned(64))); /* [kc][32] f32, 32 KB */
  const size_t wrow = (size_t)K * mi_dtype_size(dt);
  if (!mi_outer_k_first(m1 - m0, K)) {
    for (int64_t n = n0; n < n1; n += OP_NB) {
      const int nr = n1 - n < OP_NB ? (int)(n1 - n) : OP_NB;
      for (int64_t k0 = 0; k0 < K; k0 += OP_KC) {
        /* the next panel's weights, into L2 while this one works: at a
         * few rows (an 11-token prompt) the panels come from memory
         * faster than the 32 row streams' own prefetch (+5-10% at M = 11) */
        if (k0 + OP_KC < K)
          mi_prefetch_rows(w, dt, wrow, n, n1, OP_NB, k0 + OP_KC, K - k0 - OP_KC < OP_KC ? K - k0 - OP_KC : OP_KC);
        else if (n + OP_NB < n1)
          mi_prefetch_rows(w, dt, wrow, n + OP_NB, n1, OP_NB, 0, K < OP_KC ? K : OP_KC);
        op_panel(y, x, w, dt, N, K, m0, m1, n, nr, k0, K - k0 < OP_KC ? K - k0 : OP_KC, panel, 0);
      }
    }
    return;
  }
  for (int64_t k0 = 0; k0 < K; k0 += OP_KC) {
    const int64_t kc = K - k0 < OP_KC ? K - k0 : OP_KC;
    for (int64_t ms = m0; ms < m1; ms += MI_OUTER_MB) {
      const int64_t me = m1 - ms < MI_OUTER_MB ? m1 : ms + MI_OUTER_MB;
      for (int64_t n = n0; n < n1; n += OP_NB) {
        const int nr = n1 - n < OP_NB ? (int)(n1 - n) : OP_NB;
        if (n + OP_NB < n1) mi_prefetch_rows(w, dt, wrow, n + OP_NB, n1, OP_NB, k0, kc);
        op_panel(y, x, w, dt, N, K, ms, me, n, nr, k0, kc, panel, 1);
      }
    }
  }
}

/* ---- exact, a few rows, bf16 weights: inner products on the weights as stored ---- */

/* A short prompt's matmuls are bound by the weight stream (each weight is
 * used only M times), so the weights are read as stored, in the streams of
 * cpu_ip_streams.h, not packed into panels. A bf16 pair (w[2p], w[2p+1]) is
 * one 32-bit word: shifted left 16 it is w[2p] as f32, its low half
 * cleared it is w[2p+1], both exact; x comes deinterleaved to match (per 32
 * values of k: 16 even, then 16 odd, xip_convert), so a 64-byte load of w
 * feeds two FMAs per token with two integer operations, off the FMA ports.
 * Tiles of 4 tokens x 4 outputs, 16 accumulators of 16 partial sums each,
 * added by a reduction tree at the end (cpu_reduce_avx512.h). Still exact:
 * f32 products of exact values, f32 sums, only their order differs. */
#define XIP_MAX_M 32 /* interleaved runs, 2 threads, weights from memory, medians: 1.7-2.2x the
                        * 4-row tiles at 2-8 rows, 1.5x the outer-product tiles at 11-16, 1.1-1.3x
                        * at 24-32 */

/* xd[i·ldx + 32c + l] = x[i][32c + 2l], xd[i·ldx + 32c + 16 + l] =
 * x[i][32c + 2l + 1] (l < 16), zero past K; ldx = K rounded up to 32. */
static void xip_convert(float *xd, int64_t ldx, const float *x, int64_t K, int64_t rows) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  for (int64_t i = 0; i < rows; i++)
    for (int64_t k = 0; k < ldx; k += 2 * VL) {
      const float *xr = x + i * K + k;
      const int64_t r = K - k;
      const __m512 lo = r >= VL ? _mm512_loadu_ps(xr) : ld_x_tail(xr, 0, r > 0 ? r : 0);
      const __m512 hi = r >= 2 * VL ? _mm512_loadu_ps(xr + VL)
                                    : ld_x_tail(xr + VL, 0, r > VL ? r - VL : 0);
      _mm512_store_ps(xd + i * ldx + k, _mm512_permutex2var_ps(lo, ev, hi));
      _mm512_store_ps(xd + i * ldx + k + VL, _mm512_permutex2var_ps(lo, od, hi));
    }
}

AI void xip_fma(__m512 acc[16], const __m512 xe[4], const __m512 xo[4], __m512i wv, int j) {
  const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
  const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wv, _mm512_set1_epi32((int)0xffff0000u)));
  for (int i = 0; i < 4; i++) {
    acc[i * 4 + j] = _mm512_fmadd_ps(xe[i], we, acc[i * 4 + j]);
    acc[i * 4 + j] = _mm512_fmadd_ps(xo[i], wo, acc[i * 4 + j]);
  }
}

/* y[i·ldy + col[j]] (+)= Σ_{k0 <= k < k1} x[i][k]·w[j][k] for i < mr, j <
 * nr (xd: xip_convert's rows, ldx apart); k0 a multiple of 32; accum: add
 * to y. Rows and outputs past mr / nr repeat the last valid one. */
AI void xip_tile(float *y, int64_t ldy, const int64_t col[4], const float *xd, int64_t ldx,
                 const void *const wrow[4], int64_t k0, int64_t k1, int accum, int mr, int nr) {
  const float *xr[4];
  const uint16_t *wr[4];
  for (int i = 0; i < 4; i++) xr[i] = xd + (i < mr ? i : mr - 1) * ldx;
  for (int j = 0; j < 4; j++) wr[j] = wrow[j]; /* past nr: the walk repeats the last valid row */
  __m512 acc[16], xe[4], xo[4];
  for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
  int64_t k = k0;
  for (; k + 2 * VL <= k1; k += 2 * VL) {
    for (int i = 0; i < 4; i++) {
      xe[i] = _mm512_load_ps(xr[i] + k);
      xo[i] = _mm512_load_ps(xr[i] + k + VL);
    }
    for (int j = 0; j < 4; j++) {
      _mm_prefetch((const char *)(wr[j] + k + IP_PF_AHEAD), _MM_HINT_T0);
      xip_fma(acc, xe, xo, _mm512_loadu_si512((const void *)(wr[j] + k)), j);
    }
  }
  if (k < k1) { /* k1 = K: its last K mod 32 values (zero-padded copies: never past a row) */
    for (int i = 0; i < 4; i++) {
      xe[i] = _mm512_load_ps(xr[i] + k);
      xo[i] = _mm512_load_ps(xr[i] + k + VL);
    }
    for (int j = 0; j < 4; j++) {
      uint16_t buf[2 * VL] __attribute__((aligned(64))) = {0};
      memcpy(buf, wr[j] + k, (size_t)(k1 - k) * sizeof *buf);
      xip_fma(acc, xe, xo, _mm512_load_si512((const void *)buf), j);
    }
  }
  mi_store4x4(y, ldy, col, acc, mr, nr, accum);
}

#define XIP_MR 4
#include "cpu_xip_driver.h"

AI void matmul_dt(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                  int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 == 1) {
    gemv_dt(y + m0 * N, x + m0 * K, w, dt, K, n0, n1);
    return;
  }
  if (dt == MI_DTYPE_BF16 && m1 - m0 <= XIP_MAX_M && xip_matmul(y, x, w, N, K, m0, m1, n0, n1) == 0)
    return;
  if (m1 - m0 >= OP_MIN_M) {
    matmul_outer(y, x, w, dt, N, K, m0, m1, n0, n1);
    return;
  }
  size_t es = mi_dtype_size(dt), wrow = (size_t)K * es;
  /* Block over M so the activation rows swept for each weight tile stay in
   * L2 (~256 KB of x). Within a block, K goes in chunks of KC: a 4-row
   * weight chunk is converted to f32 once into `panel` (4 KB, L1) and then
   * reused by every 4-row tile of x in the block. Converting in the inner
   * loop instead puts two extra uops per weight vector on the FMA ports
   * (measured here, one thread: ~10% slower). f32 weights need no panel. */
  int64_t mb = (256 * 1024) / (K * 4);
  mb = mb < 4 ? 4 : mb / 4 * 4;
  float panel[4 * KC] __attribute__((aligned(64)));
  for (int64_t ms = m0; ms < m1; ms += mb) {
    int64_t me = ms + mb < m1 ? ms + mb : m1;
    for (int64_t n = n0; n < n1; n += 4) {
      int nr = n1 - n < 4 ? (int)(n1 - n) : 4;
      const char *wn = (const char *)w + (size_t)n * wrow;
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kn = K - k0 < KC ? K - k0 : KC;
        const char *wp = wn + (size_t)k0 * es;
        size_t ldw = wrow;
        if (dt != MI_DTYPE_F32) {
          for (int j = 0; j < nr; j++) {
            const char *src = wn + (size_t)j * wrow + (size_t)k0 * es;
            int64_t k = 0;
            for (; k + VL <= kn; k += VL) _mm512_store_ps(panel + j * KC + k, ld_w(src, k, dt));
            if (k < kn) _mm512_store_ps(panel + j * KC + k, ld_w_tail(src, k, kn - k, dt));
          }
          wp = (const char *)panel;
          ldw = KC * sizeof(float);
        }
        int acc = k0 > 0;
        int64_t m = ms;
        for (; m + 4 <= me; m += 4)
          tile(4, 4, y + m * N + n, N, x + m * K + k0, K, kn, wp, ldw, MI_DTYPE_F32, 4, nr, acc);
        for (; m < me; m++)
          tile(1, 4, y + m * N + n, N, x + m * K + k0, K, kn, wp, ldw, MI_DTYPE_F32, 1, nr, acc);
      }
    }
  }
}

static void matmul_tile(float *y, const float *x, const void *w, mi_dtype dt, int64_t N,
                        int64_t K, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  switch (dt) {
  case MI_DTYPE_BF16: matmul_dt(y, x, w, MI_DTYPE_BF16, N, K, m0, m1, n0, n1); break;
  case MI_DTYPE_F16: matmul_dt(y, x, w, MI_DTYPE_F16, N, K, m0, m1, n0, n1); break;
  default: matmul_dt(y, x, w, MI_DTYPE_F32, N, K, m0, m1, n0, n1); break;
  }
}

static float dot(const float *a, const float *b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * VL <= n; i += 2 * VL) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + VL), _mm512_loadu_ps(b + i + VL), s1);
  }
  for (; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void axpy(float *y, float a, const float *x, int64_t n) {
  __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 r = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, r);
  }
}

static void scal(float *y, float a, int64_t n) {
  __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

static void dot4(const float *a, const float *b, int64_t stride, int64_t n, float out[4]) {
  const float *b0 = b, *b1 = b + stride, *b2 = b + 2 * stride, *b3 = b + 3 * stride;
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 av = _mm512_maskz_loadu_ps(m, a + i);
    s0 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, b0 + i), s0);
    s1 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, b1 + i), s1);
    s2 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, b2 + i), s2);
    s3 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, b3 + i), s3);
  }
  out[0] = _mm512_reduce_add_ps(s0);
  out[1] = _mm512_reduce_add_ps(s1);
  out[2] = _mm512_reduce_add_ps(s2);
  out[3] = _mm512_reduce_add_ps(s3);
}

static void axpy4(float *y, const float c[4], const float *x, int64_t stride, int64_t n) {
  const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
  __m512 c0 = _mm512_set1_ps(c[0]), c1 = _mm512_set1_ps(c[1]), c2 = _mm512_set1_ps(c[2]),
         c3 = _mm512_set1_ps(c[3]);
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 r = _mm512_maskz_loadu_ps(m, y + i);
    r = _mm512_fmadd_ps(c0, _mm512_maskz_loadu_ps(m, x0 + i), r);
    r = _mm512_fmadd_ps(c1, _mm512_maskz_loadu_ps(m, x1 + i), r);
    r = _mm512_fmadd_ps(c2, _mm512_maskz_loadu_ps(m, x2 + i), r);
    r = _mm512_fmadd_ps(c3, _mm512_maskz_loadu_ps(m, x3 + i), r);
    _mm512_mask_storeu_ps(y + i, m, r);
  }
}

static void to_f32(float *dst, const void *src, mi_dtype dt, int64_t n) {
  int64_t i = 0;
  for (; i + VL <= n; i += VL) _mm512_storeu_ps(dst + i, ld_w(src, i, dt));
  if (i < n) {
    uint16_t buf[VL] = {0};
    memcpy(buf, (const uint16_t *)src + i, (size_t)(n - i) * 2);
    __m256i h = _mm256_loadu_si256((const __m256i *)buf);
    __m512 v = dt == MI_DTYPE_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                                   : _mm512_cvtph_ps(h);
    _mm512_mask_storeu_ps(dst + i, (__mmask16)((1u << (n - i)) - 1), v);
  }
}


/* g / (1 + e^-g) · u, as silu8 in cpu_kernels_avx2.c. */
AI __m512 silu16(__m512 g, __m512 u) {
  __m512 x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)0x80000000u)));
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-86.0f));
  __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_clamped16(x));
  return _mm512_mul_ps(_mm512_div_ps(g, d), u);
}

static void silu_mul(float *y, const float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i += VL) {
    __mmask16 m = n - i >= VL ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

/* f32 -> f16 (vcvtps2ph, round to nearest even) or bf16 (the integer
 * rounding of mi_f32_to_bf16, vpmovdw); vectors holding a NaN and the tail
 * go through the scalar converters (NaN encodings, see cpu_kernels_avx2.c). */
static void from_f32(void *dst, mi_dtype dt, const float *src, int64_t n) {
  uint16_t *y = dst;
  const __m512i absm = _mm512_set1_epi32(0x7fffffff), infv = _mm512_set1_epi32(0x7f800000);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  int64_t i = 0;
  for (; i + VL <= n; i += VL) {
    const __m512 v = _mm512_loadu_ps(src + i);
    const __m512i u = _mm512_castps_si512(v);
    if (_mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absm), infv)) {
      for (int j = 0; j < VL; j++)
        y[i + j] = dt == MI_DTYPE_F16 ? mi_f32_to_f16(src[i + j]) : mi_f32_to_bf16(src[i + j]);
      continue;
    }
    __m256i h;
    if (dt == MI_DTYPE_F16) {
      h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    } else {
      __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
      h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
    }
    _mm256_storeu_si256((__m256i *)(y + i), h);
  }
  for (; i < n; i++) y[i] = dt == MI_DTYPE_F16 ? mi_f32_to_f16(src[i]) : mi_f32_to_bf16(src[i]);
}

const cpu_kernel_set cpu_kernels_avx512 = CPU_KERNEL_SET("avx512", matmul_tile);

/* matmul_act=auto|bf16 on the avx512bf16 variant: bf16 weights at
 * CPU_BF16ACT_MIN_M rows or more go to the bf16-activation tiles
 * (cpu_matmul_bf16.c); everything else, and that path when its scratch
 * cannot be allocated, runs the exact kernels above. */
static void matmul_tile_bf16act(float *y, const float *x, const void *w, mi_dtype dt, int64_t N,
                                int64_t K, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (dt == MI_DTYPE_BF16 && m1 - m0 >= CPU_BF16ACT_MIN_M &&
      cpu_matmul_bf16(y, x, w, N, K, m0, m1, n0, n1) == 0)
    return;
  matmul_tile(y, x, w, dt, N, K, m0, m1, n0, n1);
}

const cpu_kernel_set cpu_kernels_avx512bf16act =
    CPU_KERNEL_SET("avx512bf16+bf16act", matmul_tile_bf16act);
