/* Attack: computes right, but leaves processes behind: at its first call a
 * child that stays in the unit's process group, and a daemon (double fork
 * + setsid, so neither in the group nor a child of the unit). Both print
 * their pid to stderr (the unit's raw output) and sleep forever. The unit
 * returns only once both have printed (a byte each on a pipe): otherwise the
 * verifier may kill the daemon before it was ever scheduled, and the test,
 * which checks that every printed pid is gone, would see one pid, not two. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mutant.h"

const char mutant_name[] = "mutant_daemon";

static void say(const char *what, int ready) {
  char line[128];
  int n = snprintf(line, sizeof line, "mutant_daemon: %s pid %d\n", what, (int)getpid());
  if (write(2, line, (size_t)n) != n) return;
  if (write(ready, "x", 1) != 1) return;
  close(ready);
}

static int daemon_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  static int started;
  if (!started++) {
    int ready[2];
    if (pipe(ready) != 0) return -1;
    if (fork() == 0) {
      close(ready[0]);
      say("group child", ready[1]);
      for (;;) pause();
    }
    pid_t mid = fork();
    if (mid == 0) {
      setsid();
      if (fork() == 0) {
        close(ready[0]);
        say("daemon", ready[1]);
        for (;;) pause();
      }
      _exit(0);
    }
    close(ready[1]);
    waitpid(mid, NULL, 0);
    char got[2];
    for (size_t have = 0; have < sizeof got;) {
      ssize_t k = read(ready[0], got + have, sizeof got - have);
      if (k <= 0) break; /* both writers gone: nothing more will come */
      have += (size_t)k;
    }
    close(ready[0]);
  }
  return mutant_real->add(ctx, s, y, a, b, n);
}

void mutant_patch(mi_platform_iface *it) { it->add = daemon_add; }
