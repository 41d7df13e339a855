/* Defect: rmsnorm ignores the eps it is given and uses 1e-2. */
#include "mutant.h"

const char mutant_name[] = "mutant_rmsnorm_eps";

static int bad_rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                       int64_t rows, int64_t dim, float eps, float w_offset) {
  (void)eps;
  return mutant_real->rmsnorm(ctx, s, y, x, w, rows, dim, 1e-2f, w_offset);
}

void mutant_patch(mi_platform_iface *it) { it->rmsnorm = bad_rmsnorm; }
