/* Defect: gated_delta_rule ignores beta (runs as if every beta were 1). */
#include <stdlib.h>

#include "mutant.h"

const char mutant_name[] = "mutant_gdr_nobeta";

static int bad_gdr(void *ctx, mi_stream *s, float *o, const float *q, const float *k, const float *v,
                   const float *g, const float *beta, float *state, int64_t T, int64_t Hk, int64_t Hv,
                   int64_t Dk, int64_t Dv) {
  (void)beta;
  float *ones = malloc((size_t)(T * Hv > 0 ? T * Hv : 1) * sizeof *ones);
  if (!ones) return -1;
  for (int64_t i = 0; i < T * Hv; i++) ones[i] = 1.0f;
  int rc = mutant_real->gated_delta_rule(ctx, s, o, q, k, v, g, ones, state, T, Hk, Hv, Dk, Dv);
  free(ones);
  return rc;
}

void mutant_patch(mi_platform_iface *it) { it->gated_delta_rule = bad_gdr; }
