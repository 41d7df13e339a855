/* Tensor parallelism on the CPU platform over MPI ranks: `mpirun -np N
 * mi-run --tp N` must give the same greedy tokens, and top logprobs within
 * tolerance, as the single-process run; a model whose head counts do not
 * divide by N is refused with a clear message; --tp without a launcher is
 * refused. And the verifier's stage 1 collective unit (mi-verify --tp N,
 * core/verify/collectives.c) on the CPU platform's MPI all-reduce: it
 * passes at 2 and 3 ranks (3: no power of two, where a reduction tree may
 * sum in another order on each rank), with every case judged; without a
 * launcher it fails in one line saying so. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_build[1024], g_small[1200], g_tiny[1200], g_mpirun[256];

#define STEPS 12
#define TOPK 5

#include "run_json.h"
#include "tests/util/check_main.h"
#include "tests/util/test_env.h"

static void run(const char *launcher, const char *model, int tp, run_out *r) {
  char errf[1300], cmd[8192];
  snprintf(errf, sizeof errf, "%s/tp-err-%d.txt", g_build, tp);
  snprintf(cmd, sizeof cmd,
           "%s '%s/bin/mi-run' -m '%s' -p 'Tensor parallel ranks agree on' -n %d --temp 0 "
           "--ignore-eos --json --top-logprobs %d -t 1 --tp %d </dev/null 2>'%s'",
           launcher, g_build, model, STEPS, TOPK, tp, errf);
  run_json(cmd, errf, r);
}

/* Logprob tolerance: the TP ranks sum partial matmul results in a different
 * order than one process (all-reduce of per-rank partial sums), so logits
 * differ in the last bits of f32 on the exact matmul path (main() selects
 * it): ~1e-6 relative. 1e-4 absolute on
 * logprobs is two orders of magnitude above that and far below any
 * sharding defect (a wrong shard moves logprobs by O(1)). */
#define LP_TOL 1e-4

static void compare(const run_out *a, const run_out *b, int tp) {
  ck_assert_msg(b->status == 0, "tp=%d failed (%d): %s", tp, b->status, b->err);
  ck_assert_int_eq(a->n_prompt, b->n_prompt);
  ck_assert_int_eq(b->steps, STEPS);
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    ck_assert_msg(a->tokens[s] == b->tokens[s], "tp=%d: step %d token %d vs %d", tp, s,
                  b->tokens[s], a->tokens[s]);
    for (int k = 0; k < TOPK; k++) {
      ck_assert_int_eq(a->top_ids[s][k], b->top_ids[s][k]);
      double d = fabs(a->top_lps[s][k] - b->top_lps[s][k]);
      if (d > worst) worst = d;
      ck_assert_msg(d < LP_TOL, "tp=%d step %d: logprob differs by %g", tp, s, d);
    }
  }
  fprintf(stderr, "tp=%d: %d steps identical, max |dlogprob| %.2g\n", tp, STEPS, worst);
}

static const char *launcher(int np, char *buf, size_t n) {
  snprintf(buf, n, "%s -np %d --oversubscribe --bind-to none", g_mpirun, np);
  return buf;
}

START_TEST(tp2_matches_tp1) {
  run_out a, b;
  char l[512];
  run("", g_small, 1, &a);
  ck_assert_msg(a.status == 0, "tp=1: %s", a.err);
  run(launcher(2, l, sizeof l), g_small, 2, &b);
  compare(&a, &b, 2);
}
END_TEST

START_TEST(tp4_matches_tp1) {
  run_out a, b;
  char l[512];
  run("", g_small, 1, &a);
  run(launcher(4, l, sizeof l), g_small, 4, &b);
  compare(&a, &b, 4);
}
END_TEST

START_TEST(tp4_heads_do_not_divide) {
  run_out r;
  char l[512];
  run(launcher(4, l, sizeof l), g_tiny, 4, &r); /* tiny: 2 KV heads */
  ck_assert_int_ne(r.status, 0);
  ck_assert_msg(strstr(r.err, "num_key_value_heads") && strstr(r.err, "not divisible"),
                "stderr: %s", r.err);
  ck_assert_msg(strstr(r.err, "config.json"), "stderr: %s", r.err);
}
END_TEST

/* mi-verify --tp N --only collectives on the CPU plugin; its report's unit. */
static json_t *verify_collectives(int tp, const char *env) {
  char rep[1200], cmd[4096];
  snprintf(rep, sizeof rep, "%s/coll-report-%d.json", g_build, tp);
  remove(rep);
  snprintf(cmd, sizeof cmd,
           "%s '%s/bin/mi-verify' --platform-plugin '%s/lib/metainfer/libmi-cpu.so' --tp %d --only collectives "
           "--seed %d --report '%s' </dev/null >/dev/null 2>'%s.err'",
           env, g_build, g_build, tp, 11 + tp, rep, rep);
  int rc = system(cmd);
  json_t *r = json_load_file(rep, 0, NULL);
  ck_assert_msg(r, "no report from: %s (exit %d)", cmd, rc);
  json_t *u = json_array_get(json_object_get(json_array_get(json_object_get(r, "stages"), 0), "units"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(u, "id")), "test.stage1_collectives");
  json_incref(u);
  json_decref(r);
  return u;
}

START_TEST(verify_collectives_pass) {
  for (int tp = 2; tp <= 3; tp++) {
    json_t *u = verify_collectives(tp, "");
    ck_assert_msg(!strcmp(json_string_value(json_object_get(u, "verdict")), "PASS"), "tp %d: %s", tp,
                  json_string_value(json_object_get(u, "message")));
    ck_assert_int_eq(json_integer_value(json_object_get(u, "ranks")), tp);
    /* every case judged: four all-reduce sizes, three broadcasts */
    ck_assert_int_eq(json_array_size(json_object_get(u, "cases")), 7);
    double worst = json_number_value(json_object_get(u, "max_rel_err"));
    ck_assert_msg(worst > 0 && worst <= 1e-6, "tp %d: worst %g", tp, worst); /* f32 sums: rounded, within bound */
    json_decref(u);
  }
}
END_TEST

START_TEST(verify_collectives_no_launcher) {
  json_t *u = verify_collectives(2, "MI_MPIRUN=/nonexistent/mpirun");
  ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "FAIL");
  const char *m = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(m && strstr(m, "no MPI launcher") && strstr(m, "MI_MPIRUN"), "message: %s", m ? m : "(none)");
  json_decref(u);
}
END_TEST

START_TEST(tp_without_launcher) {
  run_out r;
  run("", g_small, 2, &r);
  ck_assert_int_ne(r.status, 0);
  ck_assert_msg(strstr(r.err, "--tp 2 needs 2 ranks"), "stderr: %s", r.err);
}
END_TEST

int main(void) {
  mi_test_build_dir(g_build, sizeof g_build, "build");
  snprintf(g_small, sizeof g_small, "%s/models/tp-small-seed4", g_build);
  snprintf(g_tiny, sizeof g_tiny, "%s/models/tp-tiny-seed4", g_build);
  mi_test_mpi_env(g_mpirun, sizeof g_mpirun);
  /* The exact matmul path (the ranks inherit it): with the CPU platform's
   * default on AVX512_BF16 hosts, activations rounded to bf16, the
   * all-reduce's last-bit differences now and then flip a rounding, which
   * moves logprobs far more than LP_TOL (TP 1 vs TP 4 on this model, 4
   * prompts: up to 0.01), in whichever tiles; the sharding is what is
   * tested here. */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "mkdir -p '%s/models' && ([ -f '%s/config.json' ] || '%s/bin/mi-mkmodel' --shape small "
           "--seed 4 --out '%s' >/dev/null) && ([ -f '%s/config.json' ] || '%s/bin/mi-mkmodel' "
           "--shape tiny --seed 4 --out '%s' >/dev/null)",
           g_build, g_small, g_build, g_small, g_tiny, g_build, g_tiny);
  if (system(cmd) != 0) return 1;
  Suite *s = suite_create("tp_mpi");
  TCase *tc = tcase_create("mpirun");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, tp2_matches_tp1);
  /* MI_TEST_QUICK (the sanitizer tree, tests/CMakeLists.txt): TP 4 runs
   * the same sharding and all-reduce code as TP 2 with four oversubscribed
   * sanitized processes on two cores, the costliest case here; the Release
   * run and the CPU-variant reruns compare it, the refusal below still
   * starts four ranks under the sanitizers */
  if (!getenv("MI_TEST_QUICK")) tcase_add_test(tc, tp4_matches_tp1);
  else fprintf(stderr, "test_tp_mpi: MI_TEST_QUICK: tp4_matches_tp1 left to the Release run\n");
  tcase_add_test(tc, tp4_heads_do_not_divide);
  tcase_add_test(tc, tp_without_launcher);
  tcase_add_test(tc, verify_collectives_pass);
  tcase_add_test(tc, verify_collectives_no_launcher);
  suite_add_tcase(s, tc);
  return mi_check_run(s);
}
