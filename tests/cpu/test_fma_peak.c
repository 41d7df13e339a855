/* mi-bench's prefill roofline: the FMA peak loop (core/cli/bandwidth.c).
 * Checked by properties only — a figure that is positive and finite, the
 * vector width of the variant, refusal of what it cannot measure — never
 * by a speed: the figure depends on the host and on its other tenants. */
#include <check.h>
#include <math.h>
#include <stdio.h>

#include "core/cli/bandwidth.h"
#include "tests/util/check_main.h"

static void check_variant(const char *variant, int threads, int want_lanes, int want_fma) {
  mi_fma_peak p = {0};
  ck_assert_int_eq(mi_measure_fma_peak(variant, threads, 10, &p), 0);
  ck_assert_msg(isfinite(p.per_thread_gflops) && p.per_thread_gflops > 0,
                "%s: per-thread peak %g", variant, p.per_thread_gflops);
  ck_assert_msg(isfinite(p.all_gflops) && p.all_gflops > 0, "%s: %d-thread peak %g", variant,
                threads, p.all_gflops);
  ck_assert_int_eq(p.lanes, want_lanes);
  ck_assert_int_eq(p.fma, want_fma);
  printf("%s: %.1f GFLOP/s per thread, %.1f with %d threads (not checked)\n", variant,
         p.per_thread_gflops, p.all_gflops, threads);
}

START_TEST(test_generic_always) {
  /* the portable loop runs anywhere */
  check_variant("generic", 1, 4, 0);
  check_variant("generic", 2, 4, 0);
}
END_TEST

START_TEST(test_x86_variants) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  /* a variant the CPU runs is measured; one it lacks is refused (the CPU
   * platform never picks a variant its host lacks, so mi-bench never asks) */
  mi_fma_peak p;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    check_variant("avx2", 2, 8, 1);
  else
    ck_assert_int_eq(mi_measure_fma_peak("avx2", 1, 1, &p), -1);
  if (__builtin_cpu_supports("avx512f")) {
    check_variant("avx512", 2, 16, 1);
    check_variant("avx512bf16", 1, 16, 1);
  } else {
    ck_assert_int_eq(mi_measure_fma_peak("avx512", 1, 1, &p), -1);
  }
#endif
}
END_TEST

/* The bf16-dot loop: measured only for a variant that uses VDPBF16PS (the
 * CPU platform's "+bf16act") on a CPU that has it; refused otherwise. */
START_TEST(test_bf16dot) {
  mi_fma_peak p;
  ck_assert_int_eq(mi_measure_bf16dot_peak("avx512bf16", 1, 1, &p), -1);
  ck_assert_int_eq(mi_measure_bf16dot_peak("avx2", 1, 1, &p), -1);
  ck_assert_int_eq(mi_measure_bf16dot_peak(NULL, 1, 1, &p), -1);
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) {
    ck_assert_int_eq(mi_measure_bf16dot_peak("avx512bf16+bf16act", 2, 10, &p), 0);
    ck_assert_msg(isfinite(p.per_thread_gflops) && p.per_thread_gflops > 0 &&
                      isfinite(p.all_gflops) && p.all_gflops > 0,
                  "bf16 dot peak %g / %g", p.per_thread_gflops, p.all_gflops);
    ck_assert_int_eq(p.lanes, 16);
    printf("avx512bf16+bf16act: bf16 dot %.1f GFLOP/s per thread, %.1f with 2 threads (not "
           "checked)\n",
           p.per_thread_gflops, p.all_gflops);
    return;
  }
#endif
  ck_assert_int_eq(mi_measure_bf16dot_peak("avx512bf16+bf16act", 1, 1, &p), -1);
}
END_TEST

START_TEST(test_unknown_refused) {
  mi_fma_peak p;
  ck_assert_int_eq(mi_measure_fma_peak(NULL, 1, 1, &p), -1);
  ck_assert_int_eq(mi_measure_fma_peak("k100", 2, 1, &p), -1);
  ck_assert_int_eq(mi_measure_fma_peak("", 2, 1, &p), -1);
  ck_assert(p.per_thread_gflops == 0 && p.all_gflops == 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fma_peak");
  TCase *tc = tcase_create("peak");
  mi_check_add(tc, MI_CHECK_TESTS(test_generic_always, test_x86_variants, test_unknown_refused,
                                  test_bf16dot));
  suite_add_tcase(s, tc);
  return mi_check_run(s);
}
