/* Checked output: see out.h. */
#define _GNU_SOURCE
#include "core/util/out.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static int write_all_fd(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* A path that names a device, a FIFO or a socket is written through, never
 * replaced: renaming a temp file over /dev/full (as root) would put a
 * regular file where the device node was. The FIFO is opened without
 * blocking, so one with no reader is an error, not a hang. */
static int write_through(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return errno == ENXIO ? ENXIO : errno;
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  int e = write_all_fd(fd, data, len);
  if (close(fd) != 0 && !e) e = errno;
  return e;
}

int mi_out_write_file(const char *path, const void *data, size_t len, char *err, size_t err_len) {
  struct stat st;
  char *real = NULL;
  const char *target = path;
  mode_t mode = 0644;
  if (lstat(path, &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      /* A symlink is followed: its target is written, the link stays. */
      if (stat(path, &st) != 0 || !(real = realpath(path, NULL))) {
        snprintf(err, err_len, "%s: cannot write: a symbolic link to a missing file", path);
        return -1;
      }
      target = real;
    }
    if (S_ISDIR(st.st_mode)) {
      snprintf(err, err_len, "%s: cannot write: it is a directory", path);
      free(real);
      return -1;
    }
    if (!S_ISREG(st.st_mode)) {
      int e = write_through(target, data, len);
      free(real);
      if (e == ENXIO)
        snprintf(err, err_len, "%s: cannot write: a FIFO with no reader", path);
      else if (e)
        snprintf(err, err_len, "%s: cannot write: %s", path, strerror(e));
      return e ? -1 : 0;
    }
    mode = st.st_mode & 07777;
  }
  /* A regular file or a new path: a temp file beside it, then rename, so a
   * reader never sees half a file. O_EXCL | O_NOFOLLOW: the temp name is
   * never something already there. */
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%ld", target, (long)getpid()) < 0) {
    snprintf(err, err_len, "%s: out of memory", path);
    free(real);
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int e = fd < 0 ? errno : 0;
  if (!e) e = write_all_fd(fd, data, len);
  if (!e && fchmod(fd, mode) != 0) e = errno;
  if (!e && fsync(fd) != 0 && errno != EINVAL && errno != EROFS) e = errno;
  if (fd >= 0 && close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp, target) != 0) e = errno;
  if (e) {
    if (fd >= 0) unlink(tmp);
    snprintf(err, err_len, "%s: cannot write: %s", path, strerror(e));
  }
  free(tmp);
  free(real);
  return e ? -1 : 0;
}
