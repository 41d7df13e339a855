/* See spawn.h. */
#define _GNU_SOURCE
#include "core/util/spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/types.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One line into a /proc file of the child's own (uid_map, setgroups). */
static int put(const char *path, const char *s, size_t n) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t w = write(fd, s, n);
  close(fd);
  return w == (ssize_t)n ? 0 : -1;
}

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
struct mount_attr {
  __u64 attr_set, attr_clr, propagation, userns_fd;
};
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

int mi_mount_set_rdonly(const char *path, int on) {
#ifdef SYS_mount_setattr
  struct mount_attr a;
  memset(&a, 0, sizeof a);
  if (on) a.attr_set = MOUNT_ATTR_RDONLY;
  else a.attr_clr = MOUNT_ATTR_RDONLY;
  return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &a, sizeof a);
#else
  (void)path, (void)on;
  errno = ENOSYS;
  return -1;
#endif
}

/* In the forked child, before exec: `dir` read-only in a mount namespace of
 * its own. The uid/gid map lines are formatted by the parent (nothing but
 * system calls here, after fork). 0, or -1 where a step failed (the child
 * then goes on as it is: at worst in a user namespace of its own with its
 * own ids mapped, or an unmapped one where the map could not be written). */
static int ro_in_child(const char *dir, const char *uid_map, const char *gid_map) {
  /* as root a mount namespace alone; a root without CAP_SYS_ADMIN (a
   * rootless container) and every other user in a user namespace that maps
   * only their own ids, so the program sees its own uid, never a new root */
  if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return -1;
    put("/proc/self/setgroups", "deny", 4); /* absent before Linux 3.19: gid_map is then writable anyway */
    if (put("/proc/self/uid_map", uid_map, strlen(uid_map)) != 0 ||
        put("/proc/self/gid_map", gid_map, strlen(gid_map)) != 0)
      return -1;
  }
  /* nothing mounted here may reach the parent's namespace */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -1;
  if (mount(dir, dir, NULL, MS_BIND | MS_REC, NULL) != 0) return -1;
  if (mi_mount_set_rdonly(dir, 1) == 0) return 0; /* submounts too */
  /* older kernels: the top mount only. In a user namespace the flags the
   * mount already has (nosuid, nodev, ...) are locked: a remount must keep them */
  struct statvfs sv;
  unsigned long keep = 0;
  if (statvfs(dir, &sv) == 0) {
    if (sv.f_flag & ST_NOSUID) keep |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV) keep |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) keep |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME) keep |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME) keep |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME) keep |= MS_RELATIME;
  }
  return mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, NULL);
}

int mi_spawn_wait(char *const argv[], const char *log, const char *out, int timeout_s) {
  return mi_spawn_wait_ro(argv, log, out, timeout_s, NULL, NULL);
}

int mi_spawn_wait_ro(char *const argv[], const char *log, const char *out, int timeout_s, const char *ro_dir,
                     int *ro_out) {
  if (ro_out) *ro_out = ro_dir ? -1 : 0;
  if (!argv || !argv[0]) return -1;
  /* the child says on this pipe whether ro_dir is read-only for the program
   * ('R') or not ('N'); close-on-exec, so the program never holds it */
  int pfd[2] = {-1, -1};
  char uid_map[48], gid_map[48];
  if (ro_dir) {
    if (pipe2(pfd, O_CLOEXEC) != 0) pfd[0] = pfd[1] = -1;
    snprintf(uid_map, sizeof uid_map, "%u %u 1", (unsigned)geteuid(), (unsigned)geteuid());
    snprintf(gid_map, sizeof gid_map, "%u %u 1", (unsigned)getegid(), (unsigned)getegid());
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    if (pfd[0] >= 0) close(pfd[0]), close(pfd[1]);
    return -1;
  }
  if (pid == 0) {
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    int fo = out ? open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : fd;
    if ((log && fd < 0) || (out && fo < 0)) _exit(127);
    if (fo >= 0) dup2(fo, 1);
    if (fd >= 0) dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    if (ro_dir) { /* after the outputs are open: they may lie under ro_dir */
      char said = ro_in_child(ro_dir, uid_map, gid_map) == 0 ? 'R' : 'N';
      if (pfd[1] >= 0 && write(pfd[1], &said, 1) != 1) _exit(127);
    }
    if (timeout_s > 0) alarm((unsigned)timeout_s); /* survives exec: a hang ends as SIGALRM */
    execv(argv[0], argv);
    _exit(127);
  }
  if (pfd[1] >= 0) close(pfd[1]);
  int st = 0, rc = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      rc = -1;
      break;
    }
  if (pfd[0] >= 0) { /* the child has ended: its byte is there, or nothing (it stopped before) */
    char said = 0;
    ssize_t n;
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    while ((n = read(pfd[0], &said, 1)) < 0 && errno == EINTR) {
    }
    if (ro_out) *ro_out = n == 1 && said == 'R' ? 1 : n == 1 && said == 'N' ? 0 : -1;
    close(pfd[0]);
  }
  if (rc < 0) return -1;
  /* timed out: the alarm ended the program, or a launcher it started
   * passed the alarm on to its children and exited non-zero itself
   * (mpirun: "rank 0 ... exited on signal 14"), which is a timeout too */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (timeout_s > 0 && took >= timeout_s && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) return -1;
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

const char *mi_find_in_path(const char *name, char *buf, size_t n) {
  const char *path = getenv("PATH");
  for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; p && *p;) {
    const char *colon = strchr(p, ':');
    int len = colon ? (int)(colon - p) : (int)strlen(p);
    snprintf(buf, n, "%.*s/%s", len, p, name);
    if (len && access(buf, X_OK) == 0) return buf;
    p = colon ? colon + 1 : NULL;
  }
  if (n) buf[0] = 0;
  return NULL;
}

const char *mi_find_mpirun(char *buf, size_t n) {
  const char *env = getenv("MI_MPIRUN");
  if (env && *env) return access(env, X_OK) == 0 ? env : NULL;
  return mi_find_in_path("mpirun", buf, n);
}
