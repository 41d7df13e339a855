/* Mutant: RMSNorm with the wrong epsilon (MM_EPS instead of config.json's
 * rms_norm_eps) in every norm of the model. Caught by stage 4 (goldens). */
#include "mm.h"

#ifndef MM_EPS
#define MM_EPS 1e-2f
#endif

static int rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w, int64_t rows,
                   int64_t dim, float eps, float w_offset) {
  (void)eps;
  return mm_real->rmsnorm(ctx, s, y, x, w, rows, dim, MM_EPS, w_offset);
}

void mm_patch(mi_platform_iface *p) {
  p->rmsnorm = rmsnorm;
}
