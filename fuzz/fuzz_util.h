/* Shared helpers for the libFuzzer harnesses (header-only: each harness is
 * one translation unit). */
#ifndef MI_FUZZ_UTIL_H
#define MI_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A harness-found bug that is not a sanitizer report (a broken invariant):
 * abort so libFuzzer saves the input. */
#define FUZZ_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__,          \
              __LINE__, #cond);                                                 \
      fprintf(stderr, __VA_ARGS__);                                             \
      fputc('\n', stderr);                                                      \
      abort();                                                                  \
    }                                                                           \
  } while (0)

/* An error message the project promises: one non-empty line. */
static inline void fuzz_check_one_line(const char *what, const char *err) {
  FUZZ_CHECK(err[0] != 0, "%s: empty error message", what);
  FUZZ_CHECK(strchr(err, '\n') == NULL && strchr(err, '\r') == NULL,
             "%s: error message spans lines: [%s]", what, err);
}

/* The parsers under test take a path; an anonymous in-memory file reopened
 * through /proc/self/fd keeps the disk out of the loop. Returns the path of
 * a file now holding exactly data[0..n). */
static inline const char *fuzz_memfile(const uint8_t *data, size_t n) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("mi-fuzz", MFD_CLOEXEC);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0) abort();
  size_t off = 0;
  while (off < n) {
    ssize_t w = pwrite(fd, data + off, n - off, (off_t)off);
    if (w <= 0) abort();
    off += (size_t)w;
  }
  return path;
}

/* Writes data to path (a regular file), replacing it. */
static inline void fuzz_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    abort();
  }
}

/* What a harness's setup reads: $ENV when set, else REL under the source
 * tree (buf[n] holds that path). */
static inline const char *fuzz_input_path(const char *env, const char *rel, char *buf, size_t n) {
  const char *p = getenv(env);
  if (p) return p;
  snprintf(buf, n, "%s/%s", MI_FUZZ_SOURCE_DIR, rel);
  return buf;
}

/* Setup that could not load what the harness needs: say why and stop. */
static inline void fuzz_setup_check(const void *loaded, const char *harness, const char *err,
                                    const char *hint) {
  if (loaded) return;
  fprintf(stderr, "%s: %s%s\n", harness, err, hint);
  abort();
}

/* A NUL-terminated copy of the input (freed by the caller). */
static inline char *fuzz_cstr(const uint8_t *data, size_t n) {
  char *s = malloc(n + 1);
  if (!s) abort();
  memcpy(s, data, n);
  s[n] = 0;
  return s;
}

#endif
