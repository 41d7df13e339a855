/* Mutant: RoPE applied to the wrong half of each head: the second half is
 * rotated (as a rotary of dim head_dim/2), the first half is left alone.
 * Caught by stage 4 (goldens). */
#include "mm.h"

static int rope(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H,
                int64_t tok_stride, int64_t head_stride, int64_t rot_dim, float theta) {
  return mm_real->rope(ctx, s, x + rot_dim / 2, pos, T, H, tok_stride, head_stride, rot_dim / 2,
                       theta);
}

void mm_patch(mi_platform_iface *p) {
  p->rope = rope;
}
