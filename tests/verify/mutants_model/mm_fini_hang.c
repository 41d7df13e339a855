/* Computes correctly but never finishes tearing down: the platform's
 * buffer_free, which the model calls when a sequence or the model is
 * released, never returns. The unit must be killed at its deadline and
 * reported as a TIMEOUT even though every output was produced. */
#include <unistd.h>

#include "mm.h"

static void buffer_free(void *ctx, mi_buffer *b) {
  (void)ctx, (void)b;
  for (;;) pause();
}

void mm_patch(mi_platform_iface *p) { p->buffer_free = buffer_free; }
