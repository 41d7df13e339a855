/* Starting a built tool from a test's forked child. Shared by the tests
 * (include as "tests/util/test_proc.h"). */
#ifndef MI_TESTS_UTIL_TEST_PROC_H
#define MI_TESTS_UTIL_TEST_PROC_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* In a forked child whose stdio is already redirected: execv exe with
 * argv {exe, args...} (args NULL-ended; past 62 they are cut), after
 * arming a SIGALRM of alarm_s seconds so a hung tool dies rather than the
 * test's own timeout. Never returns: 127 when exec fails. */
static inline _Noreturn void mi_test_exec(const char *exe, const char *const *args, unsigned alarm_s) {
  alarm(alarm_s);
  const char *argv[64] = {exe};
  int n = 1;
  for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  execv(exe, (char *const *)argv);
  _exit(127);
}

/* Runs the shell line cmd, what it prints into out[n] (NUL-terminated, cut
 * to fit); the test fails when the shell cannot start. pclose's status. */
static inline int mi_test_popen_out(const char *cmd, char *out, size_t n) {
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  return pclose(p);
}

/* Runs the shell line printf(fmt, ...) (any length): its exit code, 128
 * when it did not exit (killed by a signal); the test fails when the shell
 * cannot start. */
static inline int mi_test_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int mi_test_sh(const char *fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  ck_assert_int_ge(n, 0);
  char *cmd = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(cmd);
  vsnprintf(cmd, (size_t)n + 1, fmt, again);
  va_end(again);
  const int st = system(cmd);
  free(cmd);
  ck_assert_int_ne(st, -1);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Runs the build's mi-mkmodel ARGS ($MI_BUILD_DIR, set by ctest), stdout
 * dropped, stderr into ERRDIR/stderr.txt: its exit code (as mi_test_sh). */
static inline int mi_test_mkmodel(const char *errdir, const char *args) {
  const char *bd = getenv("MI_BUILD_DIR");
  ck_assert_msg(bd != NULL, "MI_BUILD_DIR not set (run through ctest)");
  return mi_test_sh("'%s/bin/mi-mkmodel' %s >/dev/null 2>'%s/stderr.txt'", bd, args, errdir);
}

#endif
