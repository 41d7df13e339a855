/* Defect: silu_mul clears y and then accumulates into it, which destroys
 * gate when the caller passes y == gate (allowed by the contract). Correct
 * whenever y is a separate buffer. */
#include <math.h>
#include <string.h>

#include "mutant.h"

const char mutant_name[] = "mutant_silu_alias";

static int bad_silu_mul(void *ctx, mi_stream *s, float *y, const float *gate, const float *up,
                        int64_t n) {
  (void)ctx, (void)s;
  memset(y, 0, (size_t)n * sizeof *y);
  for (int64_t i = 0; i < n; i++) y[i] += gate[i] / (1.0f + expf(-gate[i])) * up[i];
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->silu_mul = bad_silu_mul; }
