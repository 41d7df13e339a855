/* Reading the JSON a program wrote, as the tests that check it do. Shared
 * by the tests (include as "tests/util/test_json.h"; link jansson). */
#ifndef MI_TESTS_UTIL_TEST_JSON_H
#define MI_TESTS_UTIL_TEST_JSON_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>

/* DIR/NAME parsed whole (the caller decrefs it); the test fails when it
 * cannot be read or parsed. */
static inline json_t *mi_test_json_at(const char *dir, const char *name) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  json_error_t e;
  json_t *j = json_load_file(p, 0, &e);
  ck_assert_msg(j != NULL, "%s: %s", p, e.text);
  return j;
}

/* A JSON-lines file (one object a line, lines under 64 KiB) as an array of
 * its lines' values (the caller decrefs it); the test fails when the file
 * cannot be opened or a line is not JSON. */
static inline json_t *mi_test_json_lines(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "%s: cannot open", path);
  json_t *lines = json_array();
  char buf[65536];
  while (fgets(buf, sizeof buf, f)) {
    json_error_t e;
    json_t *j = json_loads(buf, 0, &e);
    ck_assert_msg(j != NULL, "%s: bad JSON line: %s", path, e.text);
    json_array_append_new(lines, j);
  }
  fclose(f);
  return lines;
}

#endif
