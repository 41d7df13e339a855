/* Checked output: see out.h. */
#define _GNU_SOURCE
#include "core/util/out.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_stdout_closed, g_stdout_errno;

void mi_out_init(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (n >= 0 && n != fd) { /* lower fds are open, so n == fd; be safe */
      dup2(n, fd);
      close(n);
    }
    if (fd == 1) g_stdout_closed = 1;
  }
}

int mi_out_stdout_failed(void) { return g_stdout_closed || g_stdout_errno || ferror(stdout); }

/* The errno of a failed flush. A write that failed earlier, inside printf,
 * left only the error flag: clear it and flush again, so the retried
 * write says why (ENOSPC, EBADF, EPIPE, ...). */
static int flush_errno(void) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
  int e = errno;
  if (!e) {
    clearerr(stdout);
    errno = 0;
    if (fflush(stdout) != 0) e = errno;
  }
  return e ? e : EIO;
}

int mi_out_flush_stdout(void) {
  if (g_stdout_closed) return -1;
  int e = g_stdout_errno ? 0 : flush_errno();
  if (e) g_stdout_errno = e;
  return g_stdout_errno ? -1 : 0;
}

int mi_out_finish(const char *prog, int rc) {
  int lost = g_stdout_closed;
  if (!g_stdout_closed) (void)mi_out_flush_stdout();
  errno = 0;
  if (fclose(stdout) != 0 && !g_stdout_errno) g_stdout_errno = errno ? errno : EIO;
  if (g_stdout_closed)
    fprintf(stderr, "%s: standard output is closed: nothing could be written\n", prog);
  else if (g_stdout_errno) {
    fprintf(stderr, "%s: standard output: write failed: %s\n", prog, strerror(g_stdout_errno));
    lost = 1;
  }
  return lost && rc == 0 ? 1 : rc;
}

int mi_out_write_file(const char *path, const void *data, size_t len, char *err, size_t err_len) {
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
    snprintf(err, err_len, "%s: out of memory", path);
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int e = 0;
  if (fd < 0) e = errno;
  const char *p = data;
  size_t left = len;
  while (!e && left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? errno : EIO;
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  if (!e && fsync(fd) != 0 && errno != EINVAL && errno != EROFS) e = errno;
  if (fd >= 0 && close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp, path) != 0) e = errno;
  if (e) {
    unlink(tmp);
    snprintf(err, err_len, "%s: cannot write: %s", path, strerror(e));
  }
  free(tmp);
  return e ? -1 : 0;
}
