/* Defect: memcpy_d2d reports success and copies nothing. No kernel uses it,
 * so stage 1 passes; the decoder layer of stage 2 fills its KV cache with it
 * and must fail. */
#include "mutant.h"

const char mutant_name[] = "mutant_d2d_noop";

static int bad_d2d(void *ctx, mi_stream *s, void *dst, const void *src, size_t n) {
  (void)ctx, (void)s, (void)dst, (void)src, (void)n;
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->memcpy_d2d = bad_d2d; }
