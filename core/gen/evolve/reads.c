/* The exploration log: every read of a file under --refs or the candidate
 * bundle goes through ev_read, which records path, bytes, sha256 and the
 * phase. The report's "reads" is this log, and the consolidator's
 * provenance lists the same files: what the CKB learned names what it was
 * learned from. With references off the loop has no refs path, so nothing
 * under it can be opened through here. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/gen/evolve/evolve.h"
#include "core/gen/gen.h"

static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return n && !strncmp(path, dir, n) && (path[n] == '/' || path[n] == 0);
}

unsigned char *ev_read(ev_ctx *c, const char *path, const char *phase, size_t *len, char *err, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, n, "%s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
    snprintf(err, n, "%s: not a regular file of at most 64 MiB", path);
    fclose(f);
    return NULL;
  }
  unsigned char *b = malloc((size_t)st.st_size + 1);
  size_t got = b ? fread(b, 1, (size_t)st.st_size, f) : 0;
  fclose(f);
  if (!b || got != (size_t)st.st_size) {
    snprintf(err, n, "%s: %s", path, b ? "short read" : "out of memory");
    free(b);
    return NULL;
  }
  b[got] = 0;
  *len = got;
  char abs[PATH_MAX], cand[PATH_MAX];
  const char *p = realpath(path, abs) ? abs : path;
  /* the label (refs/REL, candidates/REL) is what provenance cites: the
   * same files give the same entries wherever the folders are */
  char label[PATH_MAX + 16] = "";
  if (c->refs_abs[0] && under(p, c->refs_abs))
    snprintf(label, sizeof label, "refs%s", p + strlen(c->refs_abs));
  else if (c->o->candidates && realpath(c->o->candidates, cand) && under(p, cand))
    snprintf(label, sizeof label, "candidates%s", p + strlen(cand));
  int again = 0; /* a file read again (the bundle's, by the search and by phase 4) is logged once */
  size_t k;
  json_t *r;
  json_array_foreach(c->reads, k, r) again |= !strcmp(json_string_value(json_object_get(r, "path")) ?: "", p);
  if (label[0] && !again) {
    char h[65];
    mi_sha256_buf(b, got, h);
    json_array_append_new(c->reads, json_pack("{s:s, s:s, s:I, s:s, s:s}", "path", p, "ref", label, "bytes",
                                              (json_int_t)got, "sha256", h, "phase", phase));
  }
  return b;
}

json_t *ev_read_json(ev_ctx *c, const char *path, const char *phase, char *err, size_t n) {
  size_t len = 0;
  unsigned char *b = ev_read(c, path, phase, &len, err, n);
  if (!b) return NULL;
  json_error_t je;
  json_t *j = json_loadb((const char *)b, len, 0, &je);
  free(b);
  if (!j) snprintf(err, n, "%s:%d: %s", path, je.line, je.text);
  return j;
}

void ev_diag_first(void *user, const char *line) {
  ev_diag_buf *d = user;
  if (d->n++ == 0) snprintf(d->text, sizeof d->text, "%s", line);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int walk(const char *dir, char ***v, size_t *k, size_t *cap, int depth, char *err, size_t n) {
  if (depth > 16) {
    snprintf(err, n, "%s: folders nested deeper than 16", dir);
    return -1;
  }
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, n, "%s: %s", dir, strerror(errno));
    return -1;
  }
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue; /* ., .., hidden files and temp files */
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
    struct stat st;
    if (stat(p, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      rc = walk(p, v, k, cap, depth + 1, err, n);
    } else if (S_ISREG(st.st_mode)) {
      if (*k == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        char **nv = realloc(*v, *cap * sizeof **v);
        if (!nv) {
          snprintf(err, n, "out of memory");
          rc = -1;
          break;
        }
        *v = nv;
      }
      (*v)[(*k)++] = strdup(p);
    }
  }
  closedir(d);
  return rc;
}

json_t *ev_list_files(const char *dir, char *err, size_t n) {
  char **v = NULL;
  size_t k = 0, cap = 0;
  int rc = walk(dir, &v, &k, &cap, 0, err, n);
  json_t *out = rc == 0 ? json_array() : NULL;
  if (out) {
    qsort(v, k, sizeof *v, cmp_str);
    for (size_t i = 0; i < k; i++) json_array_append_new(out, json_string(v[i]));
  }
  for (size_t i = 0; i < k; i++) free(v[i]);
  free(v);
  return out;
}
