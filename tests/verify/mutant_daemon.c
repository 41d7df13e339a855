/* Attack: computes right, but leaves processes behind: at its first call a
 * child that stays in the unit's process group, and a daemon (double fork
 * + setsid, so neither in the group nor a child of the unit). Both print
 * their pid to stderr (the unit's raw output) and sleep forever. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mutant.h"

const char mutant_name[] = "mutant_daemon";

static void say(const char *what) {
  char line[128];
  int n = snprintf(line, sizeof line, "mutant_daemon: %s pid %d\n", what, (int)getpid());
  if (write(2, line, (size_t)n) != n) return;
}

static int daemon_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  static int started;
  if (!started++) {
    if (fork() == 0) {
      say("group child");
      for (;;) pause();
    }
    pid_t mid = fork();
    if (mid == 0) {
      setsid();
      if (fork() == 0) {
        say("daemon");
        for (;;) pause();
      }
      _exit(0);
    }
    waitpid(mid, NULL, 0);
  }
  return mutant_real->add(ctx, s, y, a, b, n);
}

void mutant_patch(mi_platform_iface *it) { it->add = daemon_add; }
