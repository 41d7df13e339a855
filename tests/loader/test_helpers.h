/* Small helpers shared by the loader tests: temp files, stderr capture,
 * copying plugins around. Test-only; aborts the test on failure. */
#ifndef MI_TEST_LOADER_HELPERS_H
#define MI_TEST_LOADER_HELPERS_H

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/util/test_files.h"

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* Whole file as a NUL-terminated string ("" when missing); caller frees. */
static char *read_text(const char *path) {
  char *s = mi_test_slurp(path);
  ck_assert_msg(s != NULL, "cannot read %s whole", path);
  return s;
}

static void copy_file(const char *src, const char *dst) {
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  ck_assert_msg(in && out, "copy %s -> %s", src, dst);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
  fclose(in);
  fclose(out);
}

static void mkdir_p(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(tmp, 0755);
      *p = '/';
    }
  mkdir(tmp, 0755);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* stderr capture: the core logs with write(2) on fd 2, so redirect the fd. */
typedef struct capture {
  int saved;
  FILE *tmp;
} capture;

static void capture_begin(capture *c) {
  fflush(stderr);
  c->tmp = tmpfile();
  ck_assert_ptr_nonnull(c->tmp);
  c->saved = dup(2);
  dup2(fileno(c->tmp), 2);
}

static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  long n = lseek(fileno(c->tmp), 0, SEEK_END);
  char *s = calloc(1, (size_t)n + 1);
  lseek(fileno(c->tmp), 0, SEEK_SET);
  ck_assert_int_eq(read(fileno(c->tmp), s, (size_t)n), n);
  fclose(c->tmp);
  return s;
}

#endif
