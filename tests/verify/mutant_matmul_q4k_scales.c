/* Defect: Q4_K's packed scales read the way a first reading of the format
 * gets wrong: sub-blocks 4..7 take their 6-bit scale and min from the low
 * and high nibbles of bytes 8..11 only, without the two high bits kept in
 * bytes 0..7 (so any scale or min of 16 or more is cut). The weights are
 * widened that way and multiplied exactly; every other type and every
 * other kernel is the real plugin's. Stage 1 holds the q4_k cases to the
 * q8_activations bound, which the wrong weights exceed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mi/quant.h"
#include "mutant.h"

const char mutant_name[] = "mutant_matmul_q4k_scales";

static double wrong_value(const uint8_t *b, int i) {
  const int j = i / 32;
  int sc, m;
  if (j < 4)
    mi_q4_k_scale_min(b + 4, j, &sc, &m);
  else
    sc = b[4 + j + 4] & 15, m = b[4 + j + 4] >> 4;
  return (double)mi_quant_f16(b) * sc * mi_q4_k_code(b, i) - (double)mi_quant_f16(b + 2) * m;
}

static int bad_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                      mi_dtype w_dtype, int64_t M, int64_t N, int64_t K) {
  if (w_dtype != MI_DTYPE_Q4_K || K <= 0 || N <= 0 || K % MI_QK_K || !w)
    return mutant_real->matmul(ctx, s, y, x, w, w_dtype, M, N, K);
  float *wf = malloc((size_t)(N * K) * sizeof *wf); /* host memory on the CPU platform */
  if (!wf) return -1;
  const uint8_t *p = w;
  for (int64_t b = 0; b < N * K / MI_QK_K; b++, p += MI_Q4_K_BLOCK_BYTES)
    for (int i = 0; i < MI_QK_K; i++)
      wf[b * MI_QK_K + i] = (float)wrong_value(p, i);
  int rc = mutant_real->matmul(ctx, s, y, x, wf, MI_DTYPE_F32, M, N, K);
  free(wf);
  return rc;
}

void mutant_patch(mi_platform_iface *it) {
  it->matmul = bad_matmul;
}
