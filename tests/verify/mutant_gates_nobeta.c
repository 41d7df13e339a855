/* Defect: deltanet_gates returns beta = 1 (no beta: every token overwrites
 * its key's slot of the state completely). */
#include "mutant.h"

const char mutant_name[] = "mutant_gates_nobeta";

static int bad_gates(void *ctx, mi_stream *s, float *beta, float *g, const float *b, const float *a,
                     const float *a_log, const float *dt_bias, int64_t T, int64_t H) {
  int rc = mutant_real->deltanet_gates(ctx, s, beta, g, b, a, a_log, dt_bias, T, H);
  for (int64_t i = 0; rc == 0 && i < T * H; i++) beta[i] = 1.0f;
  return rc;
}

void mutant_patch(mi_platform_iface *it) { it->deltanet_gates = bad_gates; }
