/* What the mi-verify tests (test_verify, test_verify_hybrid,
 * test_verify_model) share: the tools and plugin ctest built, and the
 * arguments of an operator reference called by hand. */
#ifndef MI_TESTS_VERIFY_TEST_H
#define MI_TESTS_VERIFY_TEST_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/verify/verify.h"

/* The build and source trees ctest names ($MI_BUILD_DIR, $MI_SOURCE_DIR:
 * the test fails when either is unset) into *b, *s, and what every one of
 * these tests runs: bin = b/bin/mi-verify, cpu_so = the CPU platform
 * plugin, each a buffer of 4096. */
static inline void vt_env(const char **b, const char **s, char *bin, char *cpu_so) {
  *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  ck_assert_msg(*b && *s, "MI_BUILD_DIR and MI_SOURCE_DIR must be set (ctest sets them)");
  snprintf(bin, 4096, "%s/bin/mi-verify", *b);
  snprintf(cpu_so, 4096, "%s/lib/metainfer/libmi-cpu.so", *b);
}

/* A float64 buffer argument n long of kind k (VF_IN / VF_OUT ...). */
static inline vf_arg buf_arg(const char *name, vf_kind k, double *v, int64_t n) {
  vf_arg a = {0};
  a.name = name, a.kind = k, a.dtype = MI_DTYPE_F32, a.val = v, a.n = n;
  return a;
}
static inline vf_arg int_arg(const char *name, int64_t i) {
  vf_arg a = {0};
  a.name = name, a.kind = VF_I64, a.i = i;
  return a;
}
static inline vf_arg flt_arg(const char *name, double f) {
  vf_arg a = {0};
  a.name = name, a.kind = VF_F32, a.f = f;
  return a;
}

/* ---------- mi-verify runs ---------- */

typedef struct run {
  int exited, code;
  char out[65536];
  json_t *report;
} run;

/* Runs the shell line cmd (its stdout and stderr together into r->out,
 * cut to fit) and reads the JSON report it was told to write at report
 * (NULL when it wrote none), which is then removed. */
static inline void vt_run(run *r, const char *cmd, const char *report) {
  unlink(report);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(r->out, 1, sizeof r->out - 1, p);
  r->out[n] = 0;
  int st = pclose(p);
  r->exited = WIFEXITED(st);
  r->code = WEXITSTATUS(st);
  r->report = json_load_file(report, 0, NULL);
  unlink(report);
}

/* The units of the first stage of a report that passed: PASS, each unit
 * PASS with at least min_cases cases. Returns the number of cases in all. */
static inline size_t vt_all_units_pass(const json_t *report, const json_t *units,
                                       size_t min_cases) {
  ck_assert_ptr_nonnull(report);
  ck_assert_str_eq(json_string_value(json_object_get(report, "verdict")), "PASS");
  size_t i, cases = 0;
  const json_t *u;
  json_array_foreach(units, i, u) {
    ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "PASS");
    ck_assert_int_ge(json_array_size(json_object_get(u, "cases")), min_cases);
    cases += json_array_size(json_object_get(u, "cases"));
  }
  return cases;
}

#endif
