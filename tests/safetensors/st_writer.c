/* Test helpers: see st_writer.h. */
#define _GNU_SOURCE
#include "st_writer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *tw_mkdtemp(const char *tag) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  char *t = NULL;
  if (asprintf(&t, "%s/mi-%s-XXXXXX", base, tag) < 0) abort();
  if (!mkdtemp(t)) {
    perror(t);
    abort();
  }
  return t;
}

void tw_rmtree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *p = tw_path(dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
      tw_rmtree(p);
    else
      unlink(p);
    free(p);
  }
  closedir(d);
  rmdir(dir);
}

char *tw_path(const char *dir, const char *name) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", dir, name) < 0) abort();
  return p;
}

int tw_write_raw(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int rc = (n && fwrite(bytes, 1, n, f) != n) ? -1 : 0;
  if (fclose(f) != 0) rc = -1;
  return rc;
}

int tw_write_st_len(const char *path, uint64_t hlen_field, const char *header, const void *data, size_t data_len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)(hlen_field >> (8 * b));
  size_t hl = strlen(header);
  int rc = 0;
  if (fwrite(len8, 1, 8, f) != 8 || fwrite(header, 1, hl, f) != hl) rc = -1;
  if (data_len && fwrite(data, 1, data_len, f) != data_len) rc = -1;
  if (fclose(f) != 0) rc = -1;
  return rc;
}

int tw_write_st(const char *path, const char *header, const void *data, size_t data_len) {
  /* padded with spaces to a multiple of 8, as the format's writers do (the
   * reader refuses a header that would leave the data misaligned) */
  size_t hl = strlen(header), padded = (hl + 7) & ~(size_t)7;
  char *h = malloc(padded + 1);
  if (!h) return -1;
  memcpy(h, header, hl);
  memset(h + hl, ' ', padded - hl);
  h[padded] = 0;
  int rc = tw_write_st_len(path, padded, h, data, data_len);
  free(h);
  return rc;
}

void *tw_read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return NULL;
  }
  long sz = ftell(f);
  rewind(f);
  void *buf = malloc(sz > 0 ? (size_t)sz : 1);
  if (buf && sz > 0 && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) *n = (size_t)sz;
  return buf;
}
