/* The Q8_0 matmul's inner loops, portable C (the generic variant): the
 * definition in cpu_q8_0.h written out one block at a time. The per-block
 * integer sum is exact; each block adds fl(fl(d_x·d_w)·sum) to one f32
 * running sum per output. */
#include <string.h>

#include "cpu_quant.h"

static void quantize(const cpu_q8_act *a, const float *x, int64_t m0, int64_t m1) {
  const int64_t nb = a->K / CPU_Q8_QK, nbp = a->kp / CPU_Q8_QK;
  for (int64_t m = m0; m < m1; m++) {
    int8_t *q = a->q + m * a->kp;
    float *d = a->d + m * nbp;
    for (int64_t b = 0; b < nb; b++)
      d[b] = cpu_q8_quantize_block(q + b * CPU_Q8_QK, x + m * a->K + b * CPU_Q8_QK);
    memset(q + a->K, 0, (size_t)(a->kp - a->K));
    for (int64_t b = nb; b < nbp; b++)
      d[b] = 0.0f;
  }
}

/* Σ q_x·q_w over one block: 32 products of at most 127·128, exact in int32. */
static int32_t block_dot(const int8_t *qx, const int8_t *qw) {
  int32_t s = 0;
  for (int i = 0; i < CPU_Q8_QK; i++)
    s += (int32_t)qx[i] * (int32_t)qw[i];
  return s;
}

static void tile(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                 int mr, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / CPU_Q8_QK;
  for (int j = 0; j < nr; j++) {
    const uint8_t *w = (const uint8_t *)wr[j] + (size_t)b0 * CPU_Q8_WBYTES;
    for (int i = 0; i < mr; i++) {
      const int8_t *qx = a->q + (row + i) * a->kp;
      const float *dx = a->d + (row + i) * nbp;
      const uint8_t *p = w;
      float s = 0.0f;
      for (int64_t b = b0; b < b1; b++, p += CPU_Q8_WBYTES) {
        uint16_t h;
        memcpy(&h, p, 2);
        const float sc = dx[b] * mi_f16_to_f32(h);
        s += sc * (float)block_dot(qx + b * CPU_Q8_QK, (const int8_t *)(p + 2));
      }
      float *yo = y + i * ldy + col[j];
      *yo = accum ? *yo + s : s;
    }
  }
}

const cpu_q8_ops cpu_q8_generic = {CPU_Q8_OPS_BASE("generic", generic, generic, generic)};
