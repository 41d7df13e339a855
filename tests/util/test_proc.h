/* Starting a built tool from a test's forked child. Shared by the tests
 * (include as "tests/util/test_proc.h"). */
#ifndef MI_TESTS_UTIL_TEST_PROC_H
#define MI_TESTS_UTIL_TEST_PROC_H

#include <check.h>
#include <stdio.h>
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

#endif
