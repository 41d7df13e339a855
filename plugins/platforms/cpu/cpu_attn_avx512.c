/* Tiled prefill attention micro-kernels, AVX-512F (cpu_attn_ops, see
 * cpu_internal.h). This file alone is compiled with -mavx512f -mavx2 -mfma
 * (CMakeLists.txt); cpu_kernels_attn.c calls it only with the avx512
 * kernel set, which cpu_isa.c chose after checking CPUID and XCR0.
 *
 * One zmm = the 16 query rows of a tile (R = 16), so:
 *   load_q: gathers the tile's rows into Qt[d] = (q_0[d] .. q_15[d]).
 *   qk: S^T[j] = Σ_d bcast(K[j][d]) · Qt[d] — eight keys at a time for one
 *       or two tiles; no horizontal sums.
 *   softmax: max, exp and sums are lane-wise across the block's vectors.
 *   pv: acc[r][d..d+63] += bcast(P[j][r]) · V[j][d..d+63] — a 4 rows x 4
 *       vectors register tile, each V vector used by four rows.
 */
#include <immintrin.h>
#include <math.h>

#include "cpu_avx512_load.h"
#include "cpu_internal.h"
#include "cpu_exp_simd.h"

#define AI static inline __attribute__((always_inline))
#define R 16  /* query rows per tile = zmm lanes */
#define NK 8  /* keys per qk register tile */


static void load_q(float *qt, const float *q, const int32_t *off, int64_t D) {
  const __m512i idx = _mm512_loadu_si512(off);
  for (int64_t d = 0; d < D; d++) _mm512_storeu_ps(qt + d * R, _mm512_i32gather_ps(idx, q + d, 4));
}

/* qk and the online-softmax update: the same for both ISAs */
#define ATTN_VBITS 512
#include "cpu_attn_qk.h"

/* Rows past their causal limit (lim [R]) masked to -inf with one masked
 * store per key, then the block's online-softmax update. */
static void softmax(float *st, int nb, int64_t j0, const int32_t *lim, int masked, float *m,
                    float *l, float *corr) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  if (masked) {
    __m512i lv = _mm512_loadu_si512(lim);
    for (int j = 0; j < nb; j++) {
      __mmask16 fut = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((int32_t)(j0 + j)), lv);
      _mm512_mask_storeu_ps(st + j * R, fut, ninf);
    }
  }
  softmax_update(st, nb, m, l, corr);
}

/* Rows r0..r0+3, columns d0 .. d0+63 of acc. full: all 64 columns exist
 * (constant masks, kept out of the loop); else masks cover the end of D
 * (a zero mask loads and stores nothing). */
AI void pv_tile(float *acc, const float *st, const float *v, int64_t vs, int nb, int64_t D,
                const float *corr, int r0, int64_t d0, int full) {
  __mmask16 mk[4];
  for (int c = 0; c < 4; c++) {
    int64_t rem = D - d0 - 16 * c;
    mk[c] = full || rem >= 16 ? (__mmask16)0xFFFF : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
  }
  __m512 a[4][4];
  for (int i = 0; i < 4; i++) {
    __m512 cr = _mm512_set1_ps(corr[r0 + i]);
    for (int c = 0; c < 4; c++)
      a[i][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[c], acc + (r0 + i) * D + d0 + 16 * c), cr);
  }
  for (int j = 0; j < nb; j++) {
    const float *vr = v + j * vs + d0;
    __m512 vv[4];
    for (int c = 0; c < 4; c++)
      vv[c] = full ? _mm512_loadu_ps(vr + 16 * c) : _mm512_maskz_loadu_ps(mk[c], vr + 16 * c);
    for (int i = 0; i < 4; i++) {
      __m512 p = _mm512_set1_ps(st[j * R + r0 + i]);
      for (int c = 0; c < 4; c++) a[i][c] = _mm512_fmadd_ps(p, vv[c], a[i][c]);
    }
  }
  for (int i = 0; i < 4; i++)
    for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(acc + (r0 + i) * D + d0 + 16 * c, mk[c], a[i][c]);
}

static void pv(float *acc, const float *st, const float *v, int64_t vs, int nb, int64_t D, int nr,
               const float *corr) {
  for (int r0 = 0; r0 < nr; r0 += 4) {
    int64_t d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) pv_tile(acc, st, v, vs, nb, D, corr, r0, d0, 1);
    if (d0 < D) pv_tile(acc, st, v, vs, nb, D, corr, r0, d0, 0);
  }
}

/* ---- decode: one query position, a block of cache rows (see cpu_internal.h) ----
 * Cache values are widened in registers (mi_avx512_ld, exact), so a
 * half-precision cache is read once, straight from memory, with no widened
 * copy. */

/* GB query heads (1 or 2) of one KV head against block rows j .. j+3
 * (clamped to nb - 1: the repeats are computed and dropped). Each widened
 * K vector feeds GB FMAs. */
AI void dec_qk_rows(const int GB, float *s, int64_t ss, const float *q, const void *k,
                    mi_dtype dt, const int64_t *ro, int j, int nb, int64_t D, float scale) {
  int64_t r[4];
  for (int i = 0; i < 4; i++) r[i] = ro[j + i < nb ? j + i : nb - 1];
  __m512 acc[2][4];
  for (int u = 0; u < GB; u++)
    for (int i = 0; i < 4; i++) acc[u][i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += R) {
    __m512 qv[2];
    for (int u = 0; u < GB; u++) qv[u] = _mm512_loadu_ps(q + u * D + d);
    for (int i = 0; i < 4; i++) {
      __m512 kv = mi_avx512_ld(k, r[i] + d, dt);
      for (int u = 0; u < GB; u++) acc[u][i] = _mm512_fmadd_ps(qv[u], kv, acc[u][i]);
    }
  }
  /* The GB·4 horizontal sums at once: 128-bit halves, then quarters, then
   * within lanes, about 26 uops where eight separate reductions take ~64. */
  for (int i = 0; i < 4; i++)
    if (GB == 1) acc[1][i] = _mm512_setzero_ps();
  __m512 t[4];
  for (int i = 0; i < 4; i++) {
    const __m512 x = acc[i >> 1][(i & 1) * 2], y = acc[i >> 1][(i & 1) * 2 + 1];
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  /* t[0] = a00|a01 halves, t[1] = a02|a03, t[2] = a10|a11, t[3] = a12|a13 */
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x88),
                                  _mm512_shuffle_f32x4(t[0], t[1], 0xDD));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(t[2], t[3], 0x88),
                                  _mm512_shuffle_f32x4(t[2], t[3], 0xDD));
  /* lane i of u0: four partial sums of acc[0][i]; of u1: of acc[1][i] */
  const __m512 v = _mm512_add_ps(_mm512_unpacklo_ps(u0, u1), _mm512_unpackhi_ps(u0, u1));
  const __m512 w = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  /* lane i of w: (Σ acc[0][i], Σ acc[1][i], the same again) */
  const __m512 sums = _mm512_mul_ps(
      _mm512_permutexvar_ps(_mm512_set_epi32(15, 15, 15, 15, 15, 15, 15, 15, 13, 9, 5, 1, 12, 8, 4, 0), w),
      _mm512_set1_ps(scale));
  float out[16];
  _mm512_storeu_ps(out, sums);
  const int nv = nb - j < 4 ? nb - j : 4;
  for (int u = 0; u < GB; u++)
    for (int i = 0; i < nv; i++) s[u * ss + j + i] = out[u * 4 + i];
}

/* Rows per group: all heads of a group of QK_ROWS / PV_ROWS block rows
 * before the next group, so each of the caller's interleaved streams is
 * read a row (2 KiB here) at a time, in order, and the hardware prefetcher
 * keeps up. (Head by head over the whole 64-row block instead touches 256
 * bytes of every row per pass: measured ~25% less KV bandwidth.) */
#define QK_ROWS 8
#define PV_ROWS 8

/* Query heads go in pairs when both read the same KV head. */
AI void dec_qk_dt(float *s, int64_t ss, const float *q, int64_t Hq, int64_t G, const void *k,
                  mi_dtype dt, const int64_t *ro, int nb, int64_t D, float scale) {
  const size_t es = mi_dtype_size(dt);
  for (int jg = 0; jg < nb; jg += QK_ROWS)
    for (int64_t h = 0; h < Hq;) {
      const void *kh = (const char *)k + (size_t)((h / G) * D) * es;
      const int gn = (h % G) + 1 < G ? 2 : 1;
      for (int j = jg; j < jg + QK_ROWS && j < nb; j += 4) {
        if (gn == 2)
          dec_qk_rows(2, s + h * ss, ss, q + h * D, kh, dt, ro, j, nb, D, scale);
        else
          dec_qk_rows(1, s + h * ss, ss, q + h * D, kh, dt, ro, j, nb, D, scale);
      }
      h += gn;
    }
}

static void dec_qk(float *s, int64_t ss, const float *q, int64_t Hq, int64_t G, const void *k,
                   mi_dtype kvt, const int64_t *ro, int nb, int64_t D, float scale) {
  switch (kvt) {
  case MI_DTYPE_F16: dec_qk_dt(s, ss, q, Hq, G, k, MI_DTYPE_F16, ro, nb, D, scale); break;
  case MI_DTYPE_BF16: dec_qk_dt(s, ss, q, Hq, G, k, MI_DTYPE_BF16, ro, nb, D, scale); break;
  default: dec_qk_dt(s, ss, q, Hq, G, k, MI_DTYPE_F32, ro, nb, D, scale); break;
  }
}

static void dec_softmax(float *s, int64_t ss, int nb, int64_t Hq, float *m, float *l,
                        float *corr) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t h = 0; h < Hq; h++) {
    float *sh = s + h * ss;
    __m512 bm = ninf;
    for (int j = 0; j < nb; j += R) {
      __mmask16 mk = nb - j >= R ? (__mmask16)0xFFFF : (__mmask16)((1u << (nb - j)) - 1);
      bm = _mm512_max_ps(bm, _mm512_mask_loadu_ps(ninf, mk, sh + j));
    }
    const float mo = m[h], mb = _mm512_reduce_max_ps(bm), mn = mb > mo ? mb : mo;
    const __m512 mv = _mm512_set1_ps(mn);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nb; j += R) {
      __mmask16 mk = nb - j >= R ? (__mmask16)0xFFFF : (__mmask16)((1u << (nb - j)) - 1);
      __m512 p = _mm512_maskz_mov_ps(mk, exp_neg16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sh + j), mv)));
      _mm512_mask_storeu_ps(sh + j, mk, p);
      sum = _mm512_add_ps(sum, p);
    }
    const float c = expf(mo - mn); /* first block: e^-inf = 0 */
    l[h] = l[h] * c + _mm512_reduce_add_ps(sum);
    m[h] = mn;
    corr[h] = c;
  }
}

/* acc rows of GB heads, 64 columns from d0 (nc <= 4 vectors valid; the
 * others repeat the last valid one and are not stored), over the block's
 * rows: 4 widened V vectors per row, each feeding GB FMAs. */
AI void dec_pv_cols(const int GB, float *acc, int64_t as, const float *p, int64_t ss,
                    const float *corr, const void *v, mi_dtype dt, const int64_t *ro, int j0,
                    int j1, int64_t d0, int nc) {
  __m512 a[2][4];
  int64_t co[4];
  for (int c = 0; c < 4; c++) co[c] = d0 + R * (c < nc ? c : nc - 1);
  for (int u = 0; u < GB; u++) {
    __m512 cr = _mm512_set1_ps(j0 == 0 ? corr[u] : 1.0f);
    for (int c = 0; c < 4; c++) a[u][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + u * as + co[c]), cr);
  }
  for (int j = j0; j < j1; j++) {
    __m512 vv[4];
    for (int c = 0; c < 4; c++) vv[c] = mi_avx512_ld(v, ro[j] + co[c], dt);
    for (int u = 0; u < GB; u++) {
      __m512 pj = _mm512_set1_ps(p[u * ss + j]);
      for (int c = 0; c < 4; c++) a[u][c] = _mm512_fmadd_ps(pj, vv[c], a[u][c]);
    }
  }
  for (int u = 0; u < GB; u++)
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(acc + u * as + co[c], a[u][c]);
}

AI void dec_pv_dt(float *acc, int64_t as, const float *p, int64_t ss, const float *corr,
                  const void *v, mi_dtype dt, const int64_t *ro, int nb, int64_t Hq, int64_t G,
                  int64_t D) {
  const size_t es = mi_dtype_size(dt);
  for (int j0 = 0; j0 < nb; j0 += PV_ROWS) {
    const int j1 = nb - j0 < PV_ROWS ? nb : j0 + PV_ROWS;
    for (int64_t h = 0; h < Hq;) {
      const int gn = (h % G) + 1 < G ? 2 : 1;
      const void *vh = (const char *)v + (size_t)((h / G) * D) * es;
      for (int64_t d0 = 0; d0 < D; d0 += 4 * R) {
        const int nc = D - d0 >= 4 * R ? 4 : (int)((D - d0) / R);
        if (gn == 2)
          dec_pv_cols(2, acc + h * as, as, p + h * ss, ss, corr + h, vh, dt, ro, j0, j1, d0, nc);
        else
          dec_pv_cols(1, acc + h * as, as, p + h * ss, ss, corr + h, vh, dt, ro, j0, j1, d0, nc);
      }
      h += gn;
    }
  }
}

static void dec_pv(float *acc, int64_t as, const float *p, int64_t ss, const float *corr,
                   const void *v, mi_dtype kvt, const int64_t *ro, int nb, int64_t Hq, int64_t G,
                   int64_t D) {
  switch (kvt) {
  case MI_DTYPE_F16: dec_pv_dt(acc, as, p, ss, corr, v, MI_DTYPE_F16, ro, nb, Hq, G, D); break;
  case MI_DTYPE_BF16: dec_pv_dt(acc, as, p, ss, corr, v, MI_DTYPE_BF16, ro, nb, Hq, G, D); break;
  default: dec_pv_dt(acc, as, p, ss, corr, v, MI_DTYPE_F32, ro, nb, Hq, G, D); break;
  }
}

const cpu_attn_ops cpu_attn_avx512 = {.lanes = R,
                                      .load_q = load_q,
                                      .qk = qk,
                                      .softmax = softmax,
                                      .pv = pv,
                                      .dec_qk = dec_qk,
                                      .dec_softmax = dec_softmax,
                                      .dec_pv = dec_pv};
