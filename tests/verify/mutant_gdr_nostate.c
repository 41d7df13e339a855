/* Defect: gated_delta_rule ignores the incoming recurrent state (starts
 * every call from zeros, as if the state were not carried across calls). */
#include <string.h>

#include "mutant.h"

const char mutant_name[] = "mutant_gdr_nostate";

static int bad_gdr(void *ctx, mi_stream *s, float *o, const float *q, const float *k, const float *v,
                   const float *g, const float *beta, float *state, int64_t T, int64_t Hk, int64_t Hv,
                   int64_t Dk, int64_t Dv) {
  if (state && Hv > 0 && Dk > 0 && Dv > 0) memset(state, 0, (size_t)(Hv * Dk * Dv) * sizeof *state);
  return mutant_real->gated_delta_rule(ctx, s, o, q, k, v, g, beta, state, T, Hk, Hv, Dk, Dv);
}

void mutant_patch(mi_platform_iface *it) { it->gated_delta_rule = bad_gdr; }
