/* Attack: floods every pipe it can write (the result pipe among them) with
 * junk, forever, so an unbounded reader would grow until the verifier
 * itself is OOM-killed. */
#include <string.h>
#include <unistd.h>

#include "mutant.h"
#include "mutant_hostile.h"

const char mutant_name[] = "mutant_pipe_flood";

static char junk[1 << 16];

static void flood(int fd) {
  if (write(fd, junk, sizeof junk) < 0) {
  }
}

static int flood_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  (void)ctx, (void)s, (void)y, (void)a, (void)b, (void)n;
  memset(junk, 'A', sizeof junk);
  for (;;) for_each_pipe(flood);
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->add = flood_add; }
