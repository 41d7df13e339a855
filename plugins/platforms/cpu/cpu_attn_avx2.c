/* Tiled prefill attention micro-kernels, AVX2 + FMA (cpu_attn_ops, see
 * cpu_internal.h). This file alone is compiled with -mavx2 -mfma -mf16c
 * (CMakeLists.txt); cpu_kernels_attn.c calls it only with the avx2 kernel
 * set, which cpu_isa.c chose after checking CPUID and XCR0.
 *
 * Same scheme as cpu_attn_avx512.c with 8 lanes and 16 registers: one ymm
 * = the 8 query rows of a tile; qk takes eight keys per Qt vector load (four
 * when two tiles share them); pv is a 4 rows x 2 vectors register tile.
 */
#include <immintrin.h>
#include <math.h>

#include "cpu_internal.h"
#include "cpu_exp_simd.h"

#define AI static inline __attribute__((always_inline))
#define R 8  /* query rows per tile = ymm lanes */
#define NK 8 /* keys per qk register tile */


static void load_q(float *qt, const float *q, const int32_t *off, int64_t D) {
  const __m256i idx = _mm256_loadu_si256((const __m256i *)off);
  for (int64_t d = 0; d < D; d++) _mm256_storeu_ps(qt + d * R, _mm256_i32gather_ps(q + d, idx, 4));
}

/* qk and the online-softmax update: the same for both ISAs */
#define ATTN_VBITS 256
#include "cpu_attn_qk.h"

static void softmax(float *st, int nb, int64_t j0, const int32_t *lim, int masked, float *m,
                    float *l, float *corr) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  if (masked) {
    __m256i lv = _mm256_loadu_si256((const __m256i *)lim);
    for (int j = 0; j < nb; j++) {
      __m256 fut = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(j0 + j)), lv));
      _mm256_storeu_ps(st + j * R, _mm256_blendv_ps(_mm256_loadu_ps(st + j * R), ninf, fut));
    }
  }
  softmax_update(st, nb, m, l, corr);
}

/* Lane mask for the first `rem` of 8 floats (maskload/maskstore). */
AI __m256i lane_mask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void pv(float *acc, const float *st, const float *v, int64_t vs, int nb, int64_t D, int nr,
               const float *corr) {
  for (int r0 = 0; r0 < nr; r0 += 4) {
    int64_t d0 = 0;
    /* Full 16-wide column strips: 4 rows x 2 vectors of accumulators. */
    for (; d0 + 16 <= D; d0 += 16) {
      __m256 a[4][2];
      for (int i = 0; i < 4; i++) {
        __m256 cr = _mm256_set1_ps(corr[r0 + i]);
        for (int c = 0; c < 2; c++)
          a[i][c] = _mm256_mul_ps(_mm256_loadu_ps(acc + (r0 + i) * D + d0 + 8 * c), cr);
      }
      for (int j = 0; j < nb; j++) {
        const float *vr = v + j * vs + d0;
        __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8);
        for (int i = 0; i < 4; i++) {
          __m256 p = _mm256_set1_ps(st[j * R + r0 + i]);
          a[i][0] = _mm256_fmadd_ps(p, v0, a[i][0]);
          a[i][1] = _mm256_fmadd_ps(p, v1, a[i][1]);
        }
      }
      for (int i = 0; i < 4; i++)
        for (int c = 0; c < 2; c++) _mm256_storeu_ps(acc + (r0 + i) * D + d0 + 8 * c, a[i][c]);
    }
    /* The rest of D (< 16), one masked vector at a time. */
    for (; d0 < D; d0 += 8) {
      __m256i mk = lane_mask(D - d0);
      __m256 a[4];
      for (int i = 0; i < 4; i++)
        a[i] = _mm256_mul_ps(_mm256_maskload_ps(acc + (r0 + i) * D + d0, mk),
                             _mm256_set1_ps(corr[r0 + i]));
      for (int j = 0; j < nb; j++) {
        __m256 vv = _mm256_maskload_ps(v + j * vs + d0, mk);
        for (int i = 0; i < 4; i++)
          a[i] = _mm256_fmadd_ps(_mm256_set1_ps(st[j * R + r0 + i]), vv, a[i]);
      }
      for (int i = 0; i < 4; i++) _mm256_maskstore_ps(acc + (r0 + i) * D + d0, mk, a[i]);
    }
  }
}

const cpu_attn_ops cpu_attn_avx2 = {
    .lanes = R, .load_q = load_q, .qk = qk, .softmax = softmax, .pv = pv};
