/* Mutant: the per-head q_norm is skipped (k_norm kept). The qwen3 code
 * calls rmsnorm in place only for q_norm then k_norm, in that order, in
 * every layer: the first in-place call of each pair is dropped. Caught by
 * stage 3 (the q_norm tensors are never read: perturbing them changes
 * nothing), and would be by stage 4. */
#include "mm.h"

static int pair;

static int rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w, int64_t rows,
                   int64_t dim, float eps, float w_offset) {
  if (y == x && (pair++ & 1) == 0) return 0; /* q_norm: skipped */
  return mm_real->rmsnorm(ctx, s, y, x, w, rows, dim, eps, w_offset);
}

void mm_patch(mi_platform_iface *p) {
  p->rmsnorm = rmsnorm;
}
