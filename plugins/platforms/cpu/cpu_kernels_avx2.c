/* Per-ISA inner loops, AVX2 + FMA + F16C. This file alone is compiled with
 * -mavx2 -mfma -mf16c (see CMakeLists.txt); nothing here runs unless
 * cpu_isa.c found those features with OS-enabled YMM state.
 *
 * Same scheme as cpu_kernels_avx512.c with 8-lane vectors and 16 registers:
 *   prefill (OP_MIN_M rows or more): 6x16 outer-product register tiles over
 *   a k-major f32 weight panel (matmul_outer); bf16 weights at 2-32 rows:
 *   2x4 inner-product tiles on the weights as stored, streamed (xip_*);
 *   other weights at 2-7 rows: a 4x2 inner-product tile (8 accumulators,
 *   each converted weight vector reused for 4 activation rows) and a 1x4
 *   tile for leftover rows; decode (1 row): a multi-stream GEMV. Weights
 *   are converted to f32 exactly in registers; accumulation is f32 FMA.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_avx2_pack.h"
#include "cpu_ip_streams.h"
#include "cpu_exp_simd.h"
#include "cpu_internal.h"
#include "cpu_reduce_avx2.h"

#define AI static inline __attribute__((always_inline))
#define VL 8

AI __m256 ld_x_tail(const float *x, int64_t k, int64_t r) {
  float buf[VL] = {0};
  memcpy(buf, x + k, (size_t)r * 4);
  return _mm256_loadu_ps(buf);
}

/* One MR x NR register tile over all of K; mr/nr valid rows/columns, the
 * rest clamped to the last valid row and discarded. */
AI void tile(const int MR, const int NR, float *y, int64_t ldy, const float *x, int64_t K,
             const char *w, size_t wrow, mi_dtype dt, int mr, int nr) {
  const float *xr[4];
  const char *wr[4];
  for (int i = 0; i < MR; i++) xr[i] = x + (i < mr ? i : mr - 1) * K;
  for (int j = 0; j < NR; j++) wr[j] = w + (size_t)(j < nr ? j : nr - 1) * wrow;
  __m256 acc[4][4];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + VL <= K; k += VL) {
    __m256 wv[4];
    for (int j = 0; j < NR; j++) wv[j] = mi_pack_ld8(wr[j], k, dt);
    for (int i = 0; i < MR; i++) {
      __m256 xv = _mm256_loadu_ps(xr[i] + k);
      for (int j = 0; j < NR; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < K) {
    int64_t r = K - k;
    __m256 wv[4];
    for (int j = 0; j < NR; j++) wv[j] = mi_pack_ld8_tail(wr[j], k, r, dt);
    for (int i = 0; i < MR; i++) {
      __m256 xv = ld_x_tail(xr[i], k, r);
      for (int j = 0; j < NR; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) y[i * ldy + j] = mi_hsum8_ps(acc[i][j]);
}

/* Decode GEMV (one activation row, memory bound): GEMV_STREAMS rows from
 * as many equal parts of [n0, n1) at once, so each core runs that many
 * sequential weight streams (see cpu_kernels_avx512.c; four here, as 16
 * ymm registers hold 4 x 2 accumulators and the x vectors). Leftover rows
 * go one at a time with a software prefetch ahead. */
#define PF_AHEAD 1024
#define GEMV_STREAMS 4

AI void gemv_row1(float *y, const float *x, const void *w, mi_dtype dt, int64_t K, int64_t n0,
                  int64_t n1) {
  size_t wrow = (size_t)K * mi_dtype_size(dt);
  for (int64_t n = n0; n < n1; n++) {
    const char *wr = (const char *)w + (size_t)n * wrow;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t k = 0;
    for (; k + 4 * VL <= K; k += 4 * VL) {
      /* 32 elements = 64 bytes (bf16/f16) or 128 bytes (f32) per step */
      const char *pf = wr + (size_t)k * mi_dtype_size(dt) + PF_AHEAD;
      _mm_prefetch(pf, _MM_HINT_T0);
      if (dt == MI_DTYPE_F32) _mm_prefetch(pf + 64, _MM_HINT_T0);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), mi_pack_ld8(wr, k, dt), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + VL), mi_pack_ld8(wr, k + VL, dt), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 2 * VL), mi_pack_ld8(wr, k + 2 * VL, dt), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 3 * VL), mi_pack_ld8(wr, k + 3 * VL, dt), a3);
    }
    for (; k + VL <= K; k += VL)
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), mi_pack_ld8(wr, k, dt), a0);
    if (k < K) a1 = _mm256_fmadd_ps(ld_x_tail(x, k, K - k), mi_pack_ld8_tail(wr, k, K - k, dt), a1);
    y[n] = mi_hsum8_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  }
}

AI void gemv_dt(float *y, const float *x, const void *w, mi_dtype dt, int64_t K, int64_t n0,
                int64_t n1) {
  enum { S = GEMV_STREAMS };
  const size_t wrow = (size_t)K * mi_dtype_size(dt);
  const int64_t chunk = (n1 - n0) / S; /* rows per stream */
  for (int64_t i = 0; i < chunk; i++) {
    const char *wr[S];
    __m256 a[S][2];
    for (int s = 0; s < S; s++) {
      wr[s] = (const char *)w + (size_t)(n0 + s * chunk + i) * wrow;
      a[s][0] = _mm256_setzero_ps();
      a[s][1] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 4 * VL <= K; k += 4 * VL) /* 32 weights = one line of bf16 per stream */
      for (int s = 0; s < S; s++)
        for (int u = 0; u < 4; u++)
          a[s][u & 1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + u * VL),
                                        mi_pack_ld8(wr[s], k + u * VL, dt), a[s][u & 1]);
    for (; k < K; k += VL) {
      const int64_t r = K - k < VL ? K - k : VL;
      const __m256 xv = r == VL ? _mm256_loadu_ps(x + k) : ld_x_tail(x, k, r);
      for (int s = 0; s < S; s++)
        a[s][0] = _mm256_fmadd_ps(
            xv, r == VL ? mi_pack_ld8(wr[s], k, dt) : mi_pack_ld8_tail(wr[s], k, r, dt), a[s][0]);
    }
    for (int s = 0; s < S; s++)
      y[n0 + s * chunk + i] = mi_hsum8_ps(_mm256_add_ps(a[s][0], a[s][1]));
  }
  gemv_row1(y, x, w, dt, K, n0 + S * chunk, n1);
}

/* Prefill matmul, outer-product form (the BLIS scheme, as in
 * cpu_kernels_avx512.c, sized for 16 ymm registers). For each block of
 * OP_NB = 16 weight rows and OP_KC values of k, the weights are widened to
 * f32 and transposed ONCE into a k-major panel [kc][16] (16 KB, stays in
 * L1); then every group of up to 6 activation rows runs a 6x16 register
 * tile: per k, two panel vectors, six broadcast x values and twelve FMAs
 * into twelve accumulators (12 + 2 + 1 = 15 of the 16 ymm registers). No
 * horizontal sums, and 8 loads per 12 FMAs, so the FMA pipes set the pace.
 * The panel is built with 8x8 in-register transposes (cpu_avx2_pack.h), so
 * it costs about one load and one store per 8 weights and pays for itself
 * from a few activation rows on (cpu_bench ... mm: from 8 rows; below, the
 * inner-product tile that widens weights on the fly is faster):
 * matmul_dt takes this path from OP_MIN_M rows. Each output is a sequential
 * f32 sum over k, like the other paths. */
#define OP_NB 16
#define OP_KC 256
#define OP_MR 6
#define OP_MIN_M 8

/* y[i][0..nr) (+)= x rows i < mr times the panel; rows past mr repeat the
 * last row and are not stored. MR is a constant after inlining. */
AI void op_tile(const int MR, float *y, int64_t ldy, const float *x, int64_t ldx,
                const float *panel, int64_t kc, int mr, int nr, int accum, int pfy) {
  const float *xr[OP_MR];
  for (int i = 0; i < MR; i++) xr[i] = x + (i < mr ? i : mr - 1) * ldx;
  if (accum && pfy) /* outputs out of L2 (K-first order): start fetching them now */
    for (int i = 0; i < mr; i++) {
      _mm_prefetch((const char *)(y + i * ldy), _MM_HINT_T0);
      _mm_prefetch((const char *)(y + i * ldy) + 60, _MM_HINT_T0);
    }
  __m256 c0[OP_MR], c1[OP_MR];
  for (int i = 0; i < MR; i++) {
    c0[i] = _mm256_setzero_ps();
    c1[i] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_load_ps(panel + k * OP_NB), b1 = _mm256_load_ps(panel + k * OP_NB + VL);
    for (int i = 0; i < MR; i++) {
      const __m256 a = _mm256_broadcast_ss(xr[i] + k);
      c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
    }
  }
  /* Every access to c0/c1 has a constant index (MR is one): with a
   * run-time bound (i < mr) GCC keeps the arrays in memory and stores ten
   * accumulators on every k step (measured: store-bound, ~half the FMA
   * rate). So all MR rows go to a buffer and the valid ones are copied. */
  float out[OP_MR][OP_NB];
  for (int i = 0; i < MR; i++) {
    _mm256_storeu_ps(out[i], c0[i]);
    _mm256_storeu_ps(out[i] + VL, c1[i]);
  }
  for (int i = 0; i < mr; i++) {
    float *yr = y + i * ldy;
    if (nr == OP_NB) {
      __m256 v0 = _mm256_loadu_ps(out[i]), v1 = _mm256_loadu_ps(out[i] + VL);
      if (accum) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(yr));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(yr + VL));
      }
      _mm256_storeu_ps(yr, v0);
      _mm256_storeu_ps(yr + VL, v1);
    } else {
      for (int j = 0; j < nr; j++) yr[j] = accum ? yr[j] + out[i][j] : out[i][j];
    }
  }
}

/* Weight rows n .. n+nr-1 over k0 .. k0+kc-1: packed once into the panel,
 * then every group of OP_MR rows of x in [m0, m1) runs over it. */
AI void op_panel(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                 int64_t m0, int64_t m1, int64_t n, int nr, int64_t k0, int64_t kc, float *panel,
                 int pfy) {
  mi_pack_panel(panel, OP_NB, w, dt, (size_t)K * mi_dtype_size(dt), n, nr, k0, kc);
  const int acc = k0 > 0;
  int64_t m = m0;
  for (; m + OP_MR <= m1; m += OP_MR)
    op_tile(OP_MR, y + m * N + n, N, x + m * K + k0, K, panel, kc, OP_MR, nr, acc, pfy);
  if (m < m1) {
    /* the last mr < 6 rows: the smallest tile that holds them */
    const int mr = (int)(m1 - m);
    if (mr > 4)
      op_tile(OP_MR, y + m * N + n, N, x + m * K + k0, K, panel, kc, mr, nr, acc, pfy);
    else if (mr > 2)
      op_tile(4, y + m * N + n, N, x + m * K + k0, K, panel, kc, mr, nr, acc, pfy);
    else
      op_tile(2, y + m * N + n, N, x + m * K + k0, K, panel, kc, mr, nr, acc, pfy);
  }
}

/* The two loop orders of cpu_kernels_avx512.c's matmul_outer (see there
 * and mi_outer_k_first in cpu_avx2_pack.h). */
AI void matmul_outer(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                     int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  float panel[OP_KC * OP_NB] __attribute__((aligned(32))); /* [kc][16] f32, 16 KB */
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

/* As cpu_kernels_avx512.c's xip_* (the reasons are there): a 32-byte load
 * of w is 8 bf16 pairs; shifted left 16 they are the even k as f32, their
 * low halves cleared the odd k, both exact, against x deinterleaved once
 * per call (per 16 values of k: 8 even, then 8 odd). Tiles of 2 tokens x 4
 * outputs: 8 accumulators + 4 x + 2 w registers of the 16. */
#define XIP_MAX_M 32 /* interleaved runs, 2 threads, weights from memory, medians: 1.5-2.4x the
                        * 4x2 tiles at 2-8 rows, 1.2-1.3x the outer-product tiles at 11-16,
                        * 1.1x at 24-32 */

/* xd[i·ldx + 16c + l] = x[i][16c + 2l], xd[i·ldx + 16c + 8 + l] =
 * x[i][16c + 2l + 1] (l < 8), zero past K; ldx = K rounded up to 16. */
static void xip_convert(float *xd, int64_t ldx, const float *x, int64_t K, int64_t rows) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t k = 0; k < ldx; k += 2 * VL) {
      const float *xr = x + i * K + k;
      const int64_t r = K - k;
      const __m256 lo = r >= VL ? _mm256_loadu_ps(xr) : ld_x_tail(xr, 0, r > 0 ? r : 0);
      const __m256 hi = r >= 2 * VL ? _mm256_loadu_ps(xr + VL)
                                    : ld_x_tail(xr + VL, 0, r > VL ? r - VL : 0);
      /* per 128-bit lane: (lo0 lo2 hi0 hi2) (lo4 lo6 hi4 hi6); 64-bit order 0 2 1 3 */
      const __m256 ev = _mm256_shuffle_ps(lo, hi, 0x88), od = _mm256_shuffle_ps(lo, hi, 0xDD);
      _mm256_store_ps(xd + i * ldx + k,
                      _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
      _mm256_store_ps(xd + i * ldx + k + VL,
                      _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
    }
}

AI void xip_fma(__m256 acc[8], const __m256 xe[2], const __m256 xo[2], __m256i wv, int j) {
  const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(wv, 16));
  const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(wv, _mm256_set1_epi32((int)0xffff0000u)));
  for (int i = 0; i < 2; i++) {
    acc[i * 4 + j] = _mm256_fmadd_ps(xe[i], we, acc[i * 4 + j]);
    acc[i * 4 + j] = _mm256_fmadd_ps(xo[i], wo, acc[i * 4 + j]);
  }
}

/* y[i·ldy + col[j]] (+)= Σ_{k0 <= k < k1} x[i][k]·w[j][k] for i < mr <= 2,
 * j < nr; k0 a multiple of 16; accum: add to y. */
AI void xip_tile(float *y, int64_t ldy, const int64_t col[4], const float *xd, int64_t ldx,
                 const void *const wrow[4], int64_t k0, int64_t k1, int accum, int mr, int nr) {
  const float *xr[2] = {xd, xd + (mr > 1 ? ldx : 0)};
  const uint16_t *wr[4];
  for (int j = 0; j < 4; j++) wr[j] = wrow[j]; /* past nr: the walk repeats the last valid row */
  __m256 acc[8], xe[2], xo[2];
  for (int a = 0; a < 8; a++) acc[a] = _mm256_setzero_ps();
  int64_t k = k0;
  for (; k + 2 * VL <= k1; k += 2 * VL) {
    for (int i = 0; i < 2; i++) {
      xe[i] = _mm256_load_ps(xr[i] + k);
      xo[i] = _mm256_load_ps(xr[i] + k + VL);
    }
    for (int j = 0; j < 4; j++) {
      if ((k & 31) == 0) _mm_prefetch((const char *)(wr[j] + k + IP_PF_AHEAD), _MM_HINT_T0);
      xip_fma(acc, xe, xo, _mm256_loadu_si256((const __m256i *)(wr[j] + k)), j);
    }
  }
  if (k < k1) { /* k1 = K: its last K mod 16 values (zero-padded copies: never past a row) */
    for (int i = 0; i < 2; i++) {
      xe[i] = _mm256_load_ps(xr[i] + k);
      xo[i] = _mm256_load_ps(xr[i] + k + VL);
    }
    for (int j = 0; j < 4; j++) {
      uint16_t buf[2 * VL] __attribute__((aligned(32))) = {0};
      memcpy(buf, wr[j] + k, (size_t)(k1 - k) * sizeof *buf);
      xip_fma(acc, xe, xo, _mm256_load_si256((const __m256i *)buf), j);
    }
  }
  /* 8 sums at once: lane 4i + j = acc[4i + j] */
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  float s[8] __attribute__((aligned(32)));
  _mm256_store_ps(s, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                   _mm256_permute2f128_ps(u0, u1, 0x31)));
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float *d = y + i * ldy + col[j];
      *d = accum ? *d + s[4 * i + j] : s[4 * i + j];
    }
}

#define XIP_MR 2
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
  size_t wrow = (size_t)K * mi_dtype_size(dt);
  int64_t mb = (256 * 1024) / (K * 4); /* x rows per L2-sized block */
  mb = mb < 4 ? 4 : mb / 4 * 4;
  for (int64_t ms = m0; ms < m1; ms += mb) {
    int64_t me = ms + mb < m1 ? ms + mb : m1;
    for (int64_t n = n0; n < n1; n += 4) {
      int nr = n1 - n < 4 ? (int)(n1 - n) : 4;
      const char *wn = (const char *)w + (size_t)n * wrow;
      int64_t m = ms;
      for (; m + 4 <= me; m += 4) {
        tile(4, 2, y + m * N + n, N, x + m * K, K, wn, wrow, dt, 4, nr < 2 ? nr : 2);
        if (nr > 2) tile(4, 2, y + m * N + n + 2, N, x + m * K, K, wn + 2 * wrow, wrow, dt, 4, nr - 2);
      }
      for (; m < me; m++) tile(1, 4, y + m * N + n, N, x + m * K, K, wn, wrow, dt, 1, nr);
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
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * VL <= n; i += 2 * VL) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + VL), _mm256_loadu_ps(b + i + VL), s1);
  }
  for (; i + VL <= n; i += VL) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = mi_hsum8_ps(_mm256_add_ps(s0, s1));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

static void axpy(float *y, float a, const float *x, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + VL <= n; i += VL)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

static void scal(float *y, float a, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + VL <= n; i += VL) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] *= a;
}

static void dot4(const float *a, const float *b, int64_t stride, int64_t n, float out[4]) {
  const float *b0 = b, *b1 = b + stride, *b2 = b + 2 * stride, *b3 = b + 3 * stride;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + VL <= n; i += VL) {
    __m256 av = _mm256_loadu_ps(a + i);
    s0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b0 + i), s0);
    s1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b1 + i), s1);
    s2 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b2 + i), s2);
    s3 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b3 + i), s3);
  }
  out[0] = mi_hsum8_ps(s0);
  out[1] = mi_hsum8_ps(s1);
  out[2] = mi_hsum8_ps(s2);
  out[3] = mi_hsum8_ps(s3);
  for (; i < n; i++) {
    out[0] += a[i] * b0[i];
    out[1] += a[i] * b1[i];
    out[2] += a[i] * b2[i];
    out[3] += a[i] * b3[i];
  }
}

static void axpy4(float *y, const float c[4], const float *x, int64_t stride, int64_t n) {
  const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
  __m256 c0 = _mm256_set1_ps(c[0]), c1 = _mm256_set1_ps(c[1]), c2 = _mm256_set1_ps(c[2]),
         c3 = _mm256_set1_ps(c[3]);
  int64_t i = 0;
  for (; i + VL <= n; i += VL) {
    __m256 r = _mm256_loadu_ps(y + i);
    r = _mm256_fmadd_ps(c0, _mm256_loadu_ps(x0 + i), r);
    r = _mm256_fmadd_ps(c1, _mm256_loadu_ps(x1 + i), r);
    r = _mm256_fmadd_ps(c2, _mm256_loadu_ps(x2 + i), r);
    r = _mm256_fmadd_ps(c3, _mm256_loadu_ps(x3 + i), r);
    _mm256_storeu_ps(y + i, r);
  }
  for (; i < n; i++) y[i] += c[0] * x0[i] + c[1] * x1[i] + c[2] * x2[i] + c[3] * x3[i];
}

static void to_f32(float *dst, const void *src, mi_dtype dt, int64_t n) {
  int64_t i = 0;
  for (; i + VL <= n; i += VL) _mm256_storeu_ps(dst + i, mi_pack_ld8(src, i, dt));
  if (i < n) {
    uint16_t buf[VL] = {0};
    float tail[VL];
    memcpy(buf, (const uint16_t *)src + i, (size_t)(n - i) * 2);
    __m128i h = _mm_loadu_si128((const __m128i *)buf);
    __m256 v = dt == MI_DTYPE_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                   : _mm256_cvtph_ps(h);
    _mm256_storeu_ps(tail, v);
    memcpy(dst + i, tail, (size_t)(n - i) * sizeof(float));
  }
}


/* g / (1 + e^-g) · u, the portable formula with e^-g vectorised: -g is
 * clamped to [-86, 89] (below, 1 + e^-g is 1 in f32 either way; above,
 * e^-g overflows to inf as expf's does and the quotient is -0). NaN g gives
 * NaN (min/max return the bound, then g/(...) is NaN). */
AI __m256 silu8(__m256 g, __m256 u) {
  __m256 x = _mm256_xor_ps(g, _mm256_set1_ps(-0.0f));
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(89.0f)), _mm256_set1_ps(-86.0f));
  __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_clamped8(x));
  return _mm256_mul_ps(_mm256_div_ps(g, d), u);
}

static void silu_mul(float *y, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  for (; i + VL <= n; i += VL)
    _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    float bg[VL] = {0}, bu[VL] = {0}, by[VL];
    memcpy(bg, g + i, (size_t)(n - i) * 4);
    memcpy(bu, u + i, (size_t)(n - i) * 4);
    _mm256_storeu_ps(by, silu8(_mm256_loadu_ps(bg), _mm256_loadu_ps(bu)));
    memcpy(y + i, by, (size_t)(n - i) * 4);
  }
}

/* f32 -> f16 with F16C (round to nearest even, IEEE: overflow to inf,
 * subnormals kept) and f32 -> bf16 with the integer rounding of
 * mi_f32_to_bf16. A vector holding a NaN goes through the scalar
 * converters, whose NaN encodings F16C does not reproduce (it keeps the
 * payload). */
static void from_f32(void *dst, mi_dtype dt, const float *src, int64_t n) {
  uint16_t *y = dst;
  const __m256i absm = _mm256_set1_epi32(0x7fffffff), infv = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
  int64_t i = 0;
  for (; i + VL <= n; i += VL) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m256i u = _mm256_castps_si256(v);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), infv);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(nan))) {
      for (int j = 0; j < VL; j++)
        y[i + j] = dt == MI_DTYPE_F16 ? mi_f32_to_f16(src[i + j]) : mi_f32_to_bf16(src[i + j]);
      continue;
    }
    if (dt == MI_DTYPE_F16) {
      _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    } else {
      __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
      r = _mm256_srli_epi32(r, 16); /* <= 0xffff: packus keeps it */
      r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      _mm_storeu_si128((__m128i *)(y + i), _mm256_castsi256_si128(r));
    }
  }
  for (; i < n; i++) y[i] = dt == MI_DTYPE_F16 ? mi_f32_to_f16(src[i]) : mi_f32_to_bf16(src[i]);
}

const cpu_kernel_set cpu_kernels_avx2 = CPU_KERNEL_SET("avx2", matmul_tile);
