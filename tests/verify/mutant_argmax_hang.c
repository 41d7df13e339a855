/* Defect: argmax never returns (a deadlock, as far as the caller can tell). */
#include <unistd.h>

#include "mutant.h"

const char mutant_name[] = "mutant_argmax_hang";

static int bad_argmax(void *ctx, mi_stream *s, int32_t *out, const float *x, int64_t rows,
                      int64_t n) {
  (void)ctx, (void)s, (void)out, (void)x, (void)rows, (void)n;
  for (;;) sleep(1);
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->argmax = bad_argmax; }
