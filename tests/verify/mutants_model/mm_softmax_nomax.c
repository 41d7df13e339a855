/* Mutant: attention computed by the model itself with a softmax that does
 * not subtract the row maximum: e^score in f32 overflows once a score
 * passes ~88 (sharp attention, long prompts), giving Inf/Inf = NaN. Exact
 * enough otherwise, so it passes the goldens; caught by stage 5 (c), whose
 * long sharpened prompt drives scores past 88. Host memory (CPU platform). */
#include <math.h>

#include "mm.h"

static int attention(void *ctx, mi_stream *s, float *out, const float *q, const void *kc,
                     const void *vc, mi_dtype kv_dtype, int64_t T, int64_t Hq, int64_t Hkv,
                     int64_t D, int64_t pos0, float scale) {
  if (kv_dtype != MI_DTYPE_F32)
    return mm_real->attention(ctx, s, out, q, kc, vc, kv_dtype, T, Hq, Hkv, D, pos0, scale);
  if (mm_real->stream_sync) mm_real->stream_sync(ctx, s);
  const float *K = kc, *V = vc; /* [>= pos0+T, Hkv, D] */
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      const float *qi = q + (t * Hq + h) * D;
      float *o = out + (t * Hq + h) * D;
      const int64_t kvh = h / (Hq / Hkv), n = pos0 + t + 1;
      float sum = 0;
      for (int64_t d = 0; d < D; d++)
        o[d] = 0;
      for (int64_t j = 0; j < n; j++) {
        const float *kj = K + (j * Hkv + kvh) * D, *vj = V + (j * Hkv + kvh) * D;
        float sc = 0;
        for (int64_t d = 0; d < D; d++)
          sc += qi[d] * kj[d];
        float w = expf(sc * scale); /* the defect: no max subtraction */
        sum += w;
        for (int64_t d = 0; d < D; d++)
          o[d] += w * vj[d];
      }
      for (int64_t d = 0; d < D; d++)
        o[d] /= sum;
    }
  return 0;
}

void mm_patch(mi_platform_iface *p) {
  p->attention = attention;
}
