/* Defect: value-head order not converted: value head h reads key head
 * h % Hk (the interleaved order) instead of h / (Hv/Hk) (HF's grouped
 * order). Built by repeating q and k to Hv heads in that order and calling
 * the real kernel with Hk = Hv. */
#include <stdlib.h>
#include <string.h>

#include "mutant.h"

const char mutant_name[] = "mutant_gdr_head_order";

static int bad_gdr(void *ctx, mi_stream *s, float *o, const float *q, const float *k, const float *v,
                   const float *g, const float *beta, float *state, int64_t T, int64_t Hk, int64_t Hv,
                   int64_t Dk, int64_t Dv) {
  if (Hk <= 0 || Hv % Hk) /* let the real kernel refuse it */
    return mutant_real->gated_delta_rule(ctx, s, o, q, k, v, g, beta, state, T, Hk, Hv, Dk, Dv);
  size_t n = (size_t)(T * Hv * Dk > 0 ? T * Hv * Dk : 1);
  float *qe = malloc(n * sizeof *qe), *ke = malloc(n * sizeof *ke);
  if (!qe || !ke) {
    free(qe);
    free(ke);
    return -1;
  }
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hv; h++) {
      memcpy(qe + (t * Hv + h) * Dk, q + (t * Hk + h % Hk) * Dk, (size_t)Dk * sizeof *qe);
      memcpy(ke + (t * Hv + h) * Dk, k + (t * Hk + h % Hk) * Dk, (size_t)Dk * sizeof *ke);
    }
  int rc = mutant_real->gated_delta_rule(ctx, s, o, qe, ke, v, g, beta, state, T, Hv, Hv, Dk, Dv);
  free(qe);
  free(ke);
  return rc;
}

void mutant_patch(mi_platform_iface *it) { it->gated_delta_rule = bad_gdr; }
