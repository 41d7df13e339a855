/* Defect: rope rotates adjacent pairs (2i, 2i+1), GPT-J style, instead of
 * the NeoX halves (i, i + rot_dim/2) the contract asks for. */
#include <math.h>

#include "mutant.h"

const char mutant_name[] = "mutant_rope_pairing";

static int bad_rope(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H,
                    int64_t tok_stride, int64_t head_stride, int64_t rot_dim, float theta) {
  (void)ctx, (void)s;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++) {
      float *v = x + t * tok_stride + h * head_stride;
      for (int64_t i = 0; i < rot_dim / 2; i++) {
        double a = pos[t] * pow(theta, -2.0 * (double)i / (double)rot_dim);
        float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = (float)(x0 * cos(a) - x1 * sin(a));
        v[2 * i + 1] = (float)(x1 * cos(a) + x0 * sin(a));
      }
    }
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->rope = bad_rope; }
