/* See spawn.h. */
#define _GNU_SOURCE
#include "core/util/spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int mi_spawn_wait(char *const argv[], const char *log, const char *out, int timeout_s) {
  if (!argv || !argv[0]) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    int fo = out ? open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : fd;
    if ((log && fd < 0) || (out && fo < 0)) _exit(127);
    if (fo >= 0) dup2(fo, 1);
    if (fd >= 0) dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    if (timeout_s > 0) alarm((unsigned)timeout_s); /* survives exec: a hang ends as SIGALRM */
    execv(argv[0], argv);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb, (void)f;
  return (flag == FTW_DP ? rmdir(p) : unlink(p)) == 0 || errno == ENOENT ? 0 : -1;
}

int mi_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return unlink(path);
  return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

static int copy_file(const char *src, const char *dst, mode_t mode) {
  int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0) return -1;
  int o = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0777);
  if (o < 0) {
    close(in);
    return -1;
  }
  char buf[65536];
  ssize_t n;
  int rc = 0;
  while ((n = read(in, buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = -1;
      break;
    }
    for (ssize_t w = 0; w < n;) {
      ssize_t k = write(o, buf + w, (size_t)(n - w));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        rc = -1;
        break;
      }
      w += k;
    }
    if (rc) break;
  }
  close(in);
  if (close(o) != 0) rc = -1;
  return rc;
}

int mi_copy_tree(const char *src, const char *dst) {
  struct stat st;
  if (lstat(src, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  if (mkdir(dst, st.st_mode & 0777) != 0) return -1;
  DIR *d = opendir(src);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char s[PATH_MAX], t[PATH_MAX];
    if (snprintf(s, sizeof s, "%s/%s", src, e->d_name) >= (int)sizeof s ||
        snprintf(t, sizeof t, "%s/%s", dst, e->d_name) >= (int)sizeof t) {
      errno = ENAMETOOLONG;
      rc = -1;
      break;
    }
    struct stat es;
    if (lstat(s, &es) != 0) rc = -1;
    else if (S_ISDIR(es.st_mode)) rc = mi_copy_tree(s, t);
    else if (S_ISREG(es.st_mode)) rc = copy_file(s, t, es.st_mode);
  }
  int saved = errno;
  closedir(d);
  errno = saved;
  return rc;
}
