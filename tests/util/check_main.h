/* What every Check test's suite() and main() do: add the tests to a test
 * case in order, run the suite, exit non-zero when a test failed. Shared by
 * the tests (include as "tests/util/check_main.h"):
 *
 *   static Suite *suite(void) {
 *     return mi_check_suite("name", "case", 120, NULL, NULL, MI_CHECK_TESTS(first, second));
 *   }
 *   int main(void) { return mi_check_run(suite()); }
 *
 * or, for suites with loop tests or several cases, mi_check_case(s, ...) for each case and
 * mi_check_add(tc, MI_CHECK_TESTS(...)) / mi_check_add_loop for its tests.
 */
#ifndef MI_TESTS_UTIL_CHECK_MAIN_H
#define MI_TESTS_UTIL_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* The tests of a test case, in the order they run: a NULL-terminated list
 * of what START_TEST defines. */
#define MI_CHECK_TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})

/* Whether test t is to run: all of them, or (a developer's run by hand)
 * those named in $MI_CHECK_ONLY, a comma-separated list of test names;
 * Check's own CK_RUN_CASE selects a whole case only. */
static inline int mi_check_wanted(const TTest *t) {
  const char *only = getenv("MI_CHECK_ONLY");
  if (!only || !*only) return 1;
  const size_t n = strlen(t->name);
  for (const char *p = only; (p = strstr(p, t->name)); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

/* tcase_add_test for each test of a MI_CHECK_TESTS list, in order. */
static inline void mi_check_add(TCase *tc, const TTest *const *tests) {
  for (; *tests; tests++)
    if (mi_check_wanted(*tests)) tcase_add_test(tc, *tests);
}

/* tcase_add_loop_test for each test of a MI_CHECK_TESTS list, in order:
 * every test runs for each _i in [start, end). */
static inline void mi_check_add_loop(TCase *tc, const TTest *const *tests, int start, int end) {
  for (; *tests; tests++)
    if (mi_check_wanted(*tests)) tcase_add_loop_test(tc, *tests, start, end);
}

/* A new test case `name` added to s (after its other cases), whose tests
 * run inside the checked fixture (setup, teardown; NULL for none) with a
 * timeout in seconds (0: Check's default). Add its tests to the result. */
static inline TCase *mi_check_case(Suite *s, const char *name, double timeout, void (*setup)(void),
                                   void (*teardown)(void)) {
  TCase *tc = tcase_create(name);
  if (setup || teardown) tcase_add_checked_fixture(tc, setup, teardown);
  if (timeout > 0) tcase_set_timeout(tc, timeout);
  suite_add_tcase(s, tc);
  return tc;
}

/* A suite `name` of one test case `tcase` holding `tests` in order, each
 * run inside the checked fixture (setup, teardown; NULL for none) with a
 * timeout in seconds (0: Check's default). */
static inline Suite *mi_check_suite(const char *name, const char *tcase, double timeout,
                                    void (*setup)(void), void (*teardown)(void),
                                    const TTest *const *tests) {
  Suite *s = suite_create(name);
  mi_check_add(mi_check_case(s, tcase, timeout, setup, teardown), tests);
  return s;
}

/* mi_check_suite whose tests each run for every _i in [start, end). */
static inline Suite *mi_check_loop_suite(const char *name, const char *tcase, double timeout,
                                         const TTest *const *tests, int start, int end) {
  Suite *s = suite_create(name);
  mi_check_add_loop(mi_check_case(s, tcase, timeout, NULL, NULL), tests, start, end);
  return s;
}

/* Runs s (CK_NORMAL output) and frees it: EXIT_SUCCESS when every test
 * passed, EXIT_FAILURE otherwise. */
static inline int mi_check_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
