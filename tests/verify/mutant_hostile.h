/* Helpers for the hostile mutants (containment tests): they attack the
 * verifier rather than compute wrongly. */
#ifndef MI_TEST_MUTANT_HOSTILE_H
#define MI_TEST_MUTANT_HOSTILE_H

#include <fcntl.h>
#include <sys/stat.h>

/* Every pipe this process may write, other than stdout/stderr: one of them
 * is the verifier's result pipe. Calls fn(fd) for each. */
static inline void for_each_pipe(void (*fn)(int fd)) {
  for (int fd = 3; fd < 1024; fd++) {
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISFIFO(sb.st_mode)) continue;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY) fn(fd);
  }
}

#endif
