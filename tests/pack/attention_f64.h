/* Attention written in the tests, in float64, for the masked-attention
 * packs (not the CKB's expressions: an independent statement of HF's
 * masks and soft-cap): query i sees key j iff j <= i and, with a window,
 * i - j < window (HF's sliding_window_overlay); each scaled score s becomes
 * cap * tanh(s / cap) with a cap (HF's attn_logit_softcapping), then the
 * softmax. Each test file includes it once. */
#ifndef MI_TESTS_PACK_ATTENTION_F64_H
#define MI_TESTS_PACK_ATTENTION_F64_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* out[T, Hq, D] from q[T, Hq, D] over the cache rows 0 .. pos0 + t of
 * k, v [pos0 + T, Hkv, D]; window <= 0: every key; cap <= 0: no cap. */
static void attention_f64(double *out, const float *q, const float *k, const float *v, int64_t T, int64_t Hq,
                          int64_t Hkv, int64_t D, int64_t pos0, double scale, int64_t window, double cap) {
  double *w = malloc(sizeof(double) * (size_t)(pos0 + T));
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      const int64_t i = pos0 + t, g = h / (Hq / Hkv);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; j++) {
        w[j] = -INFINITY;
        if (window > 0 && i - j >= window) continue;
        double d = 0;
        for (int64_t c = 0; c < D; c++) d += (double)q[(t * Hq + h) * D + c] * k[(j * Hkv + g) * D + c];
        w[j] = cap > 0 ? cap * tanh(d * scale / cap) : d * scale;
        mx = fmax(mx, w[j]);
      }
      for (int64_t j = 0; j <= i; j++) sum += (w[j] = isinf(w[j]) ? 0 : exp(w[j] - mx));
      for (int64_t c = 0; c < D; c++) {
        double acc = 0;
        for (int64_t j = 0; j <= i; j++) acc += w[j] * v[(j * Hkv + g) * D + c];
        out[(t * Hq + h) * D + c] = acc / sum;
      }
    }
  free(w);
}

#endif
