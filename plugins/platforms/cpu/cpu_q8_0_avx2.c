/* The Q8_0 matmul's inner loops, AVX2 (cpu_q8_0.h has the scheme). This
 * file alone is compiled with -mavx2 -mfma -mf16c; it runs on the avx2
 * variant, and on avx512 where the CPU lacks AVX512_VNNI/BW.
 *
 * One block (32 values) is one ymm of bytes. VPMADDUBSW multiplies
 * unsigned by signed bytes and adds pairs into int16 with saturation, so
 * the weights go in as |q_w| (at most 128) and the activations take their
 * sign (q_x in [-127, 127], so negating is safe): a pair sums to at most
 * 2·128·127 = 32512, no saturation, exact for every int8 weight, -128
 * included. VPMADDWD with ones then gives eight int32 sums of 4 products;
 * they are converted to f32 (exact: at most 4·128·127) and added with the
 * block's scale d_x·d_w into one accumulator per output, reduced at the
 * end. Tiles of 2 tokens x 4 weight rows: 8 accumulators plus the block's
 * activations, scales and transients fit the 16 ymm registers. */
#include <immintrin.h>
#include <string.h>

#include "cpu_quant.h"
#include "cpu_reduce_avx2.h"

#define AI static inline __attribute__((always_inline))
#define Q8_PF_AHEAD 1024 /* bytes prefetched ahead in each weight row */

/* The f16 scale at p, as 8 lanes. */
AI __m256 ld_d8(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static void quantize(const cpu_q8_act *a, const float *x, int64_t m0, int64_t m1) {
  const int64_t nb = a->K / CPU_Q8_QK, nbp = a->kp / CPU_Q8_QK;
  const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t m = m0; m < m1; m++) {
    int8_t *q = a->q + m * a->kp;
    float *d = a->d + m * nbp;
    for (int64_t b = 0; b < nb; b++) {
      const float *xb = x + m * a->K + b * CPU_Q8_QK;
      __m256 v[4], mx = _mm256_setzero_ps();
      int bad = 0;
      for (int t = 0; t < 4; t++) {
        v[t] = _mm256_loadu_ps(xb + 8 * t);
        const __m256 av = _mm256_and_ps(v[t], absm);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(av, inf, _CMP_NLT_UQ)); /* NaN or inf */
        mx = _mm256_max_ps(mx, av);
      }
      const float amax = mi_hmax8_ps(mx);
      if (bad || amax < CPU_Q8_TINY) {
        memset(q + b * CPU_Q8_QK, 0, CPU_Q8_QK);
        d[b] = bad ? __builtin_nanf("") : 0.0f;
        continue;
      }
      const float db = amax / 127.0f, id = 1.0f / db;
      const __m256 idv = _mm256_set1_ps(id);
      __m256i i[4];
      for (int t = 0; t < 4; t++)
        i[t] = _mm256_cvtps_epi32(_mm256_mul_ps(v[t], idv)); /* RNE */
      /* packs work within 128-bit lanes: 4-byte groups come out as
       * i0[0..3] i1[0..3] i2[0..3] i3[0..3] i0[4..7] ...; restore order */
      const __m256i p =
          _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
      _mm256_storeu_si256((__m256i *)(q + b * CPU_Q8_QK), _mm256_permutevar8x32_epi32(p, order));
      d[b] = db;
    }
    memset(q + a->K, 0, (size_t)(a->kp - a->K));
    for (int64_t b = nb; b < nbp; b++)
      d[b] = 0.0f;
  }
}

/* MR tokens (1 or 2) x 4 weight rows over blocks [b0, b1). */
AI void tile_mr(const int MR, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                int64_t row, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / CPU_Q8_QK;
  const int8_t *qx[2];
  const float *dx[2];
  for (int i = 0; i < MR; i++) {
    qx[i] = a->q + (row + i) * a->kp;
    dx[i] = a->d + (row + i) * nbp;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2][4];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < 4; j++)
      acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    __m256i xq[2];
    __m256 xd[2];
    for (int i = 0; i < MR; i++) {
      xq[i] = _mm256_load_si256((const __m256i *)(qx[i] + b * CPU_Q8_QK));
      xd[i] = _mm256_broadcast_ss(dx[i] + b);
    }
    for (int j = 0; j < 4; j++) {
      const uint8_t *p = (const uint8_t *)wr[j] + (size_t)b * CPU_Q8_WBYTES;
      _mm_prefetch((const char *)p + Q8_PF_AHEAD, _MM_HINT_T0);
      const __m256i wv = _mm256_loadu_si256((const __m256i *)(p + 2));
      const __m256i aw = _mm256_abs_epi8(wv); /* -128 -> 0x80 = 128 unsigned */
      const __m256 dw = ld_d8(p);
      for (int i = 0; i < MR; i++) {
        const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[i], wv));
        const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[i][j] = _mm256_fmadd_ps(s, _mm256_mul_ps(xd[i], dw), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < nr; j++) {
      float *yo = y + i * ldy + col[j];
      const float s = mi_hsum8_ps(acc[i][j]);
      *yo = accum ? *yo + s : s;
    }
}

static void tile(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                 int mr, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  for (int i = 0; i < mr; i += 2) {
    if (mr - i >= 2)
      tile_mr(2, y + i * ldy, ldy, col, a, row + i, wr, nr, b0, b1, accum);
    else
      tile_mr(1, y + i * ldy, ldy, col, a, row + i, wr, nr, b0, b1, accum);
  }
}

const cpu_q8_ops cpu_q8_avx2 = {CPU_Q8_OPS_BASE("avx2", avx2, avx2, avx2)};
