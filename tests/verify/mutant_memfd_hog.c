/* Attack: allocates $MI_MUTANT_HOG_MB (default 4096) MiB through memfds of
 * 64 MiB each (each under RLIMIT_FSIZE, none mapped, so RLIMIT_AS does not
 * see them), then computes right. Only a memory cgroup stops it: the unit
 * is OOM-killed there. A write that fails is reported as the kernel's
 * error. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mutant.h"

const char mutant_name[] = "mutant_memfd_hog";

static char why[300];

static int hog_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  static int done;
  if (!done++) {
    const char *e = getenv("MI_MUTANT_HOG_MB");
    long want = e ? atol(e) : 4096, got = 0;
    static char chunk[1 << 20];
    memset(chunk, 0x5a, sizeof chunk);
    while (got < want) {
      int fd = memfd_create("hog", 0); /* never closed: held until the end */
      if (fd < 0) break;
      for (int i = 0; i < 64 && got < want; i++, got++)
        if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) {
          snprintf(why, sizeof why, "mutant_memfd_hog: %s after %ld MiB", strerror(errno), got);
          return -1;
        }
    }
  }
  return mutant_real->add(ctx, s, y, a, b, n);
}

static const char *hog_last_error(void *ctx) { return why[0] ? why : mutant_real->last_error(ctx); }

void mutant_patch(mi_platform_iface *it) {
  it->add = hog_add;
  it->last_error = hog_last_error;
}
