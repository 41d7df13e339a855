/* Defect: conv1d_causal ignores the incoming state (zero padding every
 * call, as if the conv state were not carried across calls). */
#include <string.h>

#include "mutant.h"

const char mutant_name[] = "mutant_conv_nostate";

static int bad_conv(void *ctx, mi_stream *s, float *y, const float *x, const float *w, float *state,
                    int64_t T, int64_t C, int64_t K, int silu) {
  if (state && K > 1 && C > 0) memset(state, 0, (size_t)((K - 1) * C) * sizeof *state);
  return mutant_real->conv1d_causal(ctx, s, y, x, w, state, T, C, K, silu);
}

void mutant_patch(mi_platform_iface *it) { it->conv1d_causal = bad_conv; }
