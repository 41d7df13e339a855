/* Mutant: off-by-one KV position: after the prompt, each decode step's
 * query attends to cache rows 0..pos-1, one short: it never sees its own
 * key/value. The first generated token is right, the rest drift. Caught by
 * stage 4 (goldens). */
#include "mm.h"

static int attention(void *ctx, mi_stream *s, float *out, const float *q, const void *kc,
                     const void *vc, mi_dtype kv_dtype, int64_t T, int64_t Hq, int64_t Hkv,
                     int64_t D, int64_t pos0, float scale) {
  return mm_real->attention(ctx, s, out, q, kc, vc, kv_dtype, T, Hq, Hkv, D,
                            pos0 > 0 ? pos0 - 1 : 0, scale);
}

void mm_patch(mi_platform_iface *p) {
  p->attention = attention;
}
