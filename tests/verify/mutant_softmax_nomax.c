/* Defect: attention's softmax is exp(s) / sum(exp(s)) with no max
 * subtraction, in f32: exact enough on small scores, Inf/NaN once a score
 * passes ~88. */
#include <math.h>
#include <stdlib.h>

#include "mutant.h"
#include "mi/tensor.h"

const char mutant_name[] = "mutant_softmax_nomax";

/* element i of a cache in its type: the defect is the softmax alone */
static float kv_at(const void *c, mi_dtype t, int64_t i) {
  if (t == MI_DTYPE_F16) return mi_f16_to_f32(((const uint16_t *)c)[i]);
  if (t == MI_DTYPE_BF16) return mi_bf16_to_f32(((const uint16_t *)c)[i]);
  return ((const float *)c)[i];
}

static int bad_attention(void *ctx, mi_stream *s, float *out, const float *q, const void *k_cache,
                         const void *v_cache, mi_dtype kv_dtype, int64_t T, int64_t Hq,
                         int64_t Hkv, int64_t D, int64_t pos0, float scale) {
  (void)ctx, (void)s;
  if ((kv_dtype != MI_DTYPE_F32 && kv_dtype != MI_DTYPE_F16 && kv_dtype != MI_DTYPE_BF16) || Hkv <= 0 || Hq % Hkv)
    return -1;
  float *p = malloc((size_t)(pos0 + T) * sizeof *p);
  if (!p) return -1;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t g = h / (Hq / Hkv), L = pos0 + t + 1;
      float sum = 0;
      for (int64_t j = 0; j < L; j++) {
        float d = 0;
        for (int64_t k = 0; k < D; k++) d += q[(t * Hq + h) * D + k] * kv_at(k_cache, kv_dtype, (j * Hkv + g) * D + k);
        sum += p[j] = expf(d * scale);
      }
      for (int64_t k = 0; k < D; k++) {
        float acc = 0;
        for (int64_t j = 0; j < L; j++) acc += p[j] * kv_at(v_cache, kv_dtype, (j * Hkv + g) * D + k);
        out[(t * Hq + h) * D + k] = acc / sum;
      }
    }
  free(p);
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->attention = bad_attention; }
