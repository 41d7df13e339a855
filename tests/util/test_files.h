/* Reading a file whole, as the tests that check what a program wrote do.
 * Shared by the tests (include as "tests/util/test_files.h"). */
#ifndef MI_TESTS_UTIL_TEST_FILES_H
#define MI_TESTS_UTIL_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file as a NUL-terminated string (the caller frees it): "" when
 * it cannot be opened, NULL when it could not be read whole. */
static inline char *mi_test_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? calloc(1, (size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  fclose(f);
  return s;
}

#endif
