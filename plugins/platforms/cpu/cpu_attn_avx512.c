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

#include "cpu_internal.h"

#define AI static inline __attribute__((always_inline))
#define R 16  /* query rows per tile = zmm lanes */
#define NK 8  /* keys per qk register tile */

/* e^x for x <= 0, to about 1 ulp (checked against expf over [-88, 0]):
 * x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two so r is accurate),
 * e^r by its degree-7 Taylor polynomial (truncation < 0.1 ulp there), times
 * 2^n built in the exponent field. Below ln(FLT_MIN) the result is 0 (expf
 * would give a subnormal < 1.2e-38: irrelevant next to the 1 of the max
 * row), and -inf (masked keys) gives exactly 0. */
AI __m512 exp_neg(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33f);
  __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  x = _mm512_max_ps(x, lo);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147182f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-1.90465421e-9f), r);
  __m512 p = _mm512_set1_ps(1.98412698e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888889e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
}

static void load_q(float *qt, const float *q, const int32_t *off, int64_t D) {
  const __m512i idx = _mm512_loadu_si512(off);
  for (int64_t d = 0; d < D; d++) _mm512_storeu_ps(qt + d * R, _mm512_i32gather_ps(idx, q + d, 4));
}

/* NT tiles (1 or 2) at once: with two, each broadcast K element feeds two
 * FMAs (16 per 10 loads instead of 8 per 9), which is what limits qk. */
AI void qk_n(const int NT, float *st, const float *qt, const float *k, int64_t ks, int nb,
             int64_t D, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int j = 0; j < nb; j += NK) {
    /* A short last group repeats its last key; those results are dropped. */
    const float *kr[NK];
    for (int i = 0; i < NK; i++) kr[i] = k + (int64_t)(j + i < nb ? j + i : nb - 1) * ks;
    __m512 acc[2][NK];
    for (int u = 0; u < NT; u++)
      for (int i = 0; i < NK; i++) acc[u][i] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
      __m512 qv[2];
      for (int u = 0; u < NT; u++) qv[u] = _mm512_loadu_ps(qt + (u * D + d) * R);
      for (int i = 0; i < NK; i++) {
        __m512 kv = _mm512_set1_ps(kr[i][d]);
        for (int u = 0; u < NT; u++) acc[u][i] = _mm512_fmadd_ps(kv, qv[u], acc[u][i]);
      }
    }
    int nv = nb - j < NK ? nb - j : NK;
    for (int u = 0; u < NT; u++)
      for (int i = 0; i < nv; i++)
        _mm512_storeu_ps(st + (u * nb + j + i) * R, _mm512_mul_ps(acc[u][i], sc));
  }
}

static void qk(float *st, const float *qt, int ntl, const float *k, int64_t ks, int nb, int64_t D,
               float scale) {
  if (ntl == 2)
    qk_n(2, st, qt, k, ks, nb, D, scale);
  else
    qk_n(1, st, qt, k, ks, nb, D, scale);
}

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
  __m512 bm = ninf;
  for (int j = 0; j < nb; j++) bm = _mm512_max_ps(bm, _mm512_loadu_ps(st + j * R));
  __m512 mo = _mm512_loadu_ps(m), mn = _mm512_max_ps(mo, bm);
  __m512 c = exp_neg(_mm512_sub_ps(mo, mn)); /* first block: e^-inf = 0 */
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < nb; j++) {
    __m512 p = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(st + j * R), mn));
    _mm512_storeu_ps(st + j * R, p);
    sum = _mm512_add_ps(sum, p);
  }
  _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), c, sum));
  _mm512_storeu_ps(m, mn);
  _mm512_storeu_ps(corr, c);
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

const cpu_attn_ops cpu_attn_avx512 = {
    .lanes = R, .load_q = load_q, .qk = qk, .softmax = softmax, .pv = pv};
