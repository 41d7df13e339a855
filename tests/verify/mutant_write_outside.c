/* Attack: writes outside its folder ($MI_MUTANT_ESCAPE, default
 * /tmp/mi-mutant-escaped) at its first call: a planted file, a tampered
 * reference, a forged report. When the write is refused it reports why
 * (a kernel error naming the errno); when it succeeds it computes right, so
 * only the containment stands between it and a PASS. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mutant.h"

const char mutant_name[] = "mutant_write_outside";

static char why[600];

static int escape_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  const char *path = getenv("MI_MUTANT_ESCAPE");
  if (!path) path = "/tmp/mi-mutant-escaped";
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    snprintf(why, sizeof why, "mutant_write_outside: cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  if (write(fd, "escaped\n", 8) != 8) {
  }
  close(fd);
  return mutant_real->add(ctx, s, y, a, b, n);
}

static const char *escape_last_error(void *ctx) { return why[0] ? why : mutant_real->last_error(ctx); }

void mutant_patch(mi_platform_iface *it) {
  it->add = escape_add;
  it->last_error = escape_last_error;
}
