/* Reading untrusted files: see file.h. */
#define _GNU_SOURCE
#include "core/util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

void mi_path_err(char *err, size_t len, const char *path, const char *fmt, ...) {
  if (!err || !len) return;
  int k = snprintf(err, len, "%s: ", path);
  if (k >= 0 && (size_t)k < len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, len - (size_t)k, fmt, ap);
    va_end(ap);
  }
  /* a path, tensor names and JSON excerpts are the file's: one line, even cut short */
  for (char *p = err; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
}

const char *mi_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFIFO: return "a FIFO";
  case S_IFSOCK: return "a socket";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFLNK: return "a symbolic link";
  default: return "not a file";
  }
}

int mi_file_open(const char *path, unsigned flags, uint64_t max_bytes, const char *what,
                 uint64_t *size, char *err, size_t err_len) {
  if (size) *size = 0;
  if (!path) {
    mi_path_err(err, err_len, "(null)", "no path given");
    return -1;
  }
  int oflags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (flags & MI_FILE_NOFOLLOW) oflags |= O_NOFOLLOW;
  int fd = open(path, oflags);
  if (fd < 0) {
    if (errno == ELOOP && (flags & MI_FILE_NOFOLLOW))
      mi_path_err(err, err_len, path, "is a symbolic link (refused here)");
    else
      mi_path_err(err, err_len, path, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    mi_path_err(err, err_len, path, "cannot stat: %s", strerror(errno));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    mi_path_err(err, err_len, path, "not a regular file (%s)", mi_file_kind(st.st_mode));
    close(fd);
    return -1;
  }
  if (max_bytes && (uint64_t)st.st_size > max_bytes) {
    mi_path_err(err, err_len, path, "file is %lld bytes, over the %llu byte limit%s%s",
           (long long)st.st_size, (unsigned long long)max_bytes, what ? " for a " : "",
           what ? what : "");
    close(fd);
    return -1;
  }
  /* a regular file: reads never block anyway; restore the ordinary mode */
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (size) *size = (uint64_t)st.st_size;
  return fd;
}

char *mi_file_read_all(const char *path, unsigned flags, uint64_t max_bytes, const char *what,
                       size_t *len, char *err, size_t err_len) {
  if (len) *len = 0;
  uint64_t size;
  int fd = mi_file_open(path, flags, max_bytes, what, &size, err, err_len);
  if (fd < 0) return NULL;
  if (size > SIZE_MAX - 2) {
    mi_path_err(err, err_len, path, "file too large to read (%llu bytes)", (unsigned long long)size);
    close(fd);
    return NULL;
  }
  char *buf = malloc((size_t)size + 1);
  if (!buf) {
    mi_path_err(err, err_len, path, "out of memory reading %llu bytes", (unsigned long long)size);
    close(fd);
    return NULL;
  }
  size_t n = 0;
  while (n < size) {
    ssize_t r = read(fd, buf + n, (size_t)size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      mi_path_err(err, err_len, path, "read failed: %s", strerror(errno));
      free(buf);
      close(fd);
      return NULL;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  /* one more byte: a file that grew (or shrank) while read is not the one
   * whose size was checked */
  char extra;
  ssize_t more = n == size ? read(fd, &extra, 1) : 0;
  close(fd);
  if (n != size || more > 0) {
    mi_path_err(err, err_len, path, "file changed size while being read");
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}

int mi_file_inside(const char *path, const char *dir) {
  char *rp = realpath(path, NULL), *rd = realpath(dir, NULL);
  int ok = 0;
  if (rp && rd) {
    size_t n = strlen(rd);
    ok = strncmp(rp, rd, n) == 0 && (rp[n] == '/' || (n == 1 && rd[0] == '/'));
  }
  free(rp);
  free(rd);
  return ok;
}

json_t *mi_file_load_json(const char *path, unsigned flags, uint64_t max_bytes, const char *what,
                          size_t jflags, char *err, size_t err_len) {
  size_t n;
  char *text = mi_file_read_all(path, flags, max_bytes, what, &n, err, err_len);
  if (!text) return NULL;
  json_error_t je;
  json_t *j = json_loadb(text, n, jflags, &je);
  free(text);
  if (!j) mi_path_err(err, err_len, path, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
  return j;
}

int mi_mkdir_p(const char *dir) {
  char tmp[PATH_MAX];
  if (strlen(dir) >= sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(tmp, dir, strlen(dir) + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(tmp, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return access(tmp, W_OK);
}

const char *mi_exe_rel_dir(const char *argv0, const char *const *rel, size_t n_rel, int (*ok)(const char *dir),
                           char *buf, size_t n) {
  char exe[4096];
  ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (l <= 0 && argv0) l = (ssize_t)snprintf(exe, sizeof exe, "%s", argv0);
  if (l <= 0) return NULL;
  exe[l < (ssize_t)sizeof exe ? l : (ssize_t)sizeof exe - 1] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return NULL;
  *slash = 0;
  for (size_t i = 0; i < n_rel; i++) {
    snprintf(buf, n, "%s/%s", exe, rel[i]);
    if (ok(buf)) return buf;
  }
  return NULL;
}

int mi_file_copy(const char *src, const char *dst) {
  FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
  if (!in || !out) {
    if (in) fclose(in);
    return -1;
  }
  char buf[1 << 16];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, r, out);
  fclose(in);
  return fclose(out);
}

void mi_file_last_line(const char *path, char *out, size_t n) {
  out[0] = 0;
  FILE *f = fopen(path, "re");
  if (!f) return;
  char line[600];
  while (fgets(line, sizeof line, f))
    if (line[0] && line[0] != '\n') snprintf(out, n, "%s", line);
  fclose(f);
  out[strcspn(out, "\n")] = 0;
}
