/* The blackboard: journal + content-addressed artifacts (see gen.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/gen/gen.h"

struct mi_bb {
  char *dir;
  int jfd;
  long seq;
};

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

mi_bb *mi_bb_open(const char *run_dir, int create, char *err, size_t err_len) {
  char p[4096];
  if (create && mkdir(run_dir, 0755) != 0 && errno != EEXIST) {
    snprintf(err, err_len, "%s: cannot create: %s", run_dir, strerror(errno));
    return NULL;
  }
  snprintf(p, sizeof p, "%s/artifacts", run_dir);
  if (mkdir(p, 0755) != 0 && errno != EEXIST) {
    snprintf(err, err_len, "%s: cannot create: %s", p, strerror(errno));
    return NULL;
  }
  snprintf(p, sizeof p, "%s/journal.jsonl", run_dir);
  int fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, err_len, "%s: cannot open: %s", p, strerror(errno));
    return NULL;
  }
  mi_bb *b = calloc(1, sizeof *b);
  b->dir = strdup(run_dir);
  b->jfd = fd;
  int bad = 0;
  json_t *j = mi_bb_read_journal(run_dir, &bad);
  b->seq = j ? (long)json_array_size(j) + bad : 0;
  json_decref(j);
  fsync_dir(run_dir);
  return b;
}

void mi_bb_close(mi_bb *b) {
  if (!b) return;
  close(b->jfd);
  free(b->dir);
  free(b);
}

const char *mi_bb_dir(const mi_bb *b) { return b->dir; }

int mi_bb_append(mi_bb *b, json_t *entry) {
  json_t *e = json_deep_copy(entry);
  json_object_set_new(e, "seq", json_integer(b->seq++));
  json_object_set_new(e, "time", json_integer((json_int_t)time(NULL)));
  char *line = json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(e);
  if (!line) return -1;
  size_t n = strlen(line);
  line[n] = '\n'; /* the NUL goes: write n+1 bytes */
  ssize_t w = write(b->jfd, line, n + 1);
  free(line);
  if (w != (ssize_t)(n + 1)) return -1;
  return fsync(b->jfd);
}

static int write_atomic(const char *dir, const char *name, const void *data, size_t n) {
  char tmp[4400], dst[4400];
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", dir, name);
  snprintf(dst, sizeof dst, "%s/%s", dir, name);
  int fd = mkstemp(tmp);
  if (fd < 0) return -1;
  const char *p = data;
  size_t left = n;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) {
      close(fd);
      unlink(tmp);
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 || fchmod(fd, 0644) != 0) {
    close(fd);
    unlink(tmp);
    return -1;
  }
  close(fd);
  if (rename(tmp, dst) != 0) {
    unlink(tmp);
    return -1;
  }
  return fsync_dir(dir);
}

int mi_bb_put(mi_bb *b, const void *data, size_t n, const char *ext, char sha_out[65]) {
  mi_sha256_buf(data, n, sha_out);
  char dir[4200], name[128];
  snprintf(dir, sizeof dir, "%s/artifacts", b->dir);
  snprintf(name, sizeof name, "%s.%s", sha_out, ext);
  return write_atomic(dir, name, data, n);
}

int mi_bb_put_file(mi_bb *b, const char *path, const char *ext, char sha_out[65]) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
      } else {
        buf = nb;
      }
    }
  }
  fclose(f);
  if (!buf) return -1;
  int rc = mi_bb_put(b, buf, n, ext, sha_out);
  free(buf);
  return rc;
}

int mi_bb_artifact(const mi_bb *b, const char *sha, const char *ext, char *out, size_t n) {
  snprintf(out, n, "%s/artifacts/%s.%s", b->dir, sha, ext);
  char got[65];
  if (mi_sha256_file(out, got) != 0) return -1;
  return strcmp(got, sha) == 0 ? 0 : -1;
}

json_t *mi_bb_read_journal(const char *run_dir, int *bad) {
  char p[4096];
  snprintf(p, sizeof p, "%s/journal.jsonl", run_dir);
  FILE *f = fopen(p, "r");
  *bad = 0;
  if (!f) return NULL;
  json_t *arr = json_array();
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_error_t je;
    json_t *j = json_loadb(line, (size_t)len, 0, &je);
    if (j && json_is_object(j)) json_array_append_new(arr, j);
    else {
      json_decref(j);
      ++*bad;
    }
  }
  free(line);
  fclose(f);
  return arr;
}
