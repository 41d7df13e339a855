/* Attack: computes nothing. At its first call it writes the per-case PASS
 * lines of the verifier's former JSON protocol into every pipe it can write
 * (the result pipe among them) and exits 0. Under the old protocol stage 1
 * passed it; now the child only returns output buffers the parent checks. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mutant.h"
#include "mutant_hostile.h"

const char mutant_name[] = "mutant_forged_pass";

static void forge(int fd) {
  for (int i = 0; i < 16; i++) {
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"event\":\"case_end\",\"case\":\"forged\",\"index\":%d,\"dtype\":\"f32\",\"verdict\":\"PASS\","
                     "\"max_rel_err\":0,\"max_abs_err\":0}\n", i);
    if (write(fd, line, (size_t)n) != n) return;
  }
}

static int forged_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  (void)ctx, (void)s, (void)y, (void)a, (void)b, (void)n;
  signal(SIGPIPE, SIG_IGN); /* a pipe nobody reads (e.g. the loader's) must not end the forgery early */
  for_each_pipe(forge);
  _exit(0);
}

void mutant_patch(mi_platform_iface *it) { it->add = forged_add; }
