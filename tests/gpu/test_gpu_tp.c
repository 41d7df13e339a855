/* Tensor parallelism on the GPU plugins' code path, without a GPU:
 * `mpirun -np 2 mi-run --platform gpuemu32 --tp 2` — the real gpu_platform.c
 * and gpu_comm.c over the host emulator (gpu_emu.cpp), with all-reduce by
 * tests/gpu/fake_nccl.c (loaded with ccl=PATH, exactly as RCCL/NCCL would
 * be) — must give the greedy tokens of the single-process run, and top
 * logprobs within tolerance. Also: the one-line errors of a missing
 * library and of a failing ncclCommInitRank on one rank (the other rank
 * must fail too, not hang), and the single-process collectives. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/runtime/loader.h"
#include "mi/platform.h"

static char g_build[PATH_MAX], g_dir[PATH_MAX], g_mpirun[512], g_fake[PATH_MAX];

#define STEPS 3
#define TOPK 5

#include "../tp/run_json.h"
#include "tests/util/check_main.h"
#include "tests/util/test_env.h"

/* Runs mi-run with plugins.conf `conf` (under `launcher`, "" for none). */
static void run(const char *env, const char *launcher, const char *conf, int tp, run_out *r) {
  char errf[PATH_MAX + 32], cmd[4 * PATH_MAX + 1024];
  snprintf(errf, sizeof errf, "%s/err-%s-%d.txt", g_dir, conf, tp);
  snprintf(cmd, sizeof cmd,
           "%s %s '%s/bin/mi-run' --plugins-conf '%s/%s' --platform gpuemu32 -m '%s/model' "
           "-p 'Tensor parallel ranks' -n %d --temp 0 --ignore-eos --json "
           "--top-logprobs %d --tp %d </dev/null 2>'%s'",
           env, launcher, g_build, g_dir, conf, g_dir, STEPS, TOPK, tp, errf);
  run_json(cmd, errf, r);
}

/* A failing run must still be a clean one: one line per rank, no sanitizer
 * report, no crash. */
static void assert_clean_failure(const run_out *r) {
  ck_assert_int_ne(r->status, 0);
  ck_assert_msg(!strstr(r->err, "Sanitizer") && !strstr(r->err, "runtime error:") &&
                    !strstr(r->err, "signal"),
                "stderr: %s", r->err);
}

static const char *mpirun2(char *buf, size_t n) {
  snprintf(buf, n, "'%s' -np 2 --oversubscribe --bind-to none", g_mpirun);
  return buf;
}

/* Logprob tolerance: rank partial sums are added in another order than the
 * single process's matmul (~1e-6 relative in f32 logits); 1e-4 is far above
 * that and far below a sharding or reduction defect (O(1) moves; a missing
 * all-reduce changes the greedy tokens). */
#define LP_TOL 1e-4

START_TEST(tp2_matches_tp1) {
  run_out a, b;
  char l[1024];
  run("", "", "ok.conf", 1, &a);
  ck_assert_msg(a.status == 0, "tp=1: %s", a.err);
  ck_assert_int_eq(a.steps, STEPS);
  ck_assert_msg(!strstr(a.err, "fake_nccl"), "tp=1 must not load the collective library: %s",
                a.err);
  run("", mpirun2(l, sizeof l), "ok.conf", 2, &b);
  ck_assert_msg(b.status == 0, "tp=2 failed (%d): %s", b.status, b.err);
  /* both ranks went through the fake library's rendezvous */
  ck_assert_msg(strstr(b.err, "fake_nccl: rank 0 of 2 joined"), "stderr: %s", b.err);
  ck_assert_msg(strstr(b.err, "fake_nccl: rank 1 of 2 joined"), "stderr: %s", b.err);
  ck_assert_int_eq(a.n_prompt, b.n_prompt);
  ck_assert_int_eq(b.steps, STEPS); /* rank 0 prints; other ranks are quiet */
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    ck_assert_msg(a.tokens[s] == b.tokens[s], "step %d: token %d (tp=2) vs %d (tp=1)", s,
                  b.tokens[s], a.tokens[s]);
    for (int k = 0; k < TOPK; k++) {
      ck_assert_int_eq(a.top_ids[s][k], b.top_ids[s][k]);
      double d = fabs(a.top_lps[s][k] - b.top_lps[s][k]);
      if (d > worst) worst = d;
      ck_assert_msg(d < LP_TOL, "step %d: logprob differs by %g", s, d);
    }
  }
  fprintf(stderr, "gpuemu32 tp=2 vs tp=1: %d steps identical, max |dlogprob| %.2g\n", STEPS, worst);
}
END_TEST

START_TEST(tp2_library_missing) {
  run_out r;
  char l[1024];
  run("", mpirun2(l, sizeof l), "missing.conf", 2, &r);
  assert_clean_failure(&r);
  ck_assert_msg(strstr(r.err, "gpuemu32: --tp 2 needs NCCL for all-reduce: cannot load "
                              "/nonexistent/libnccl.so.2 (dlerror: "),
                "stderr: %s", r.err);
  ck_assert_msg(strstr(r.err, "No such file or directory"), "stderr: %s", r.err);
}
END_TEST

/* Rank 1's ncclCommInitRank fails after the rendezvous: rank 1 says the
 * library's error, rank 0 names rank 1 — and both exit. The library comes
 * from $MI_CCL_PATH here (no ccl= option in plain.conf). */
START_TEST(tp2_init_fails_on_one_rank) {
  run_out r;
  char l[1024], env[PATH_MAX + 64];
  snprintf(env, sizeof env, "FAKE_NCCL_FAIL_RANK=1 MI_CCL_PATH='%s'", g_fake);
  run(env, mpirun2(l, sizeof l), "plain.conf", 2, &r);
  assert_clean_failure(&r);
  ck_assert_msg(strstr(r.err, "gpuemu32: ncclCommInitRank: unhandled system error (fake_nccl: "
                              "FAKE_NCCL_FAIL_RANK) (2), rank 1 of 2"),
                "stderr: %s", r.err);
  ck_assert_msg(strstr(r.err, "gpuemu32: --tp 2: rank 1 could not join the NCCL communicator"),
                "stderr: %s", r.err);
}
END_TEST

/* One process: rank 0 of 1, the collectives are no-ops, and no library is
 * loaded (MI_CCL_PATH points nowhere and init still succeeds). */
START_TEST(single_process_collectives) {
  setenv("MI_CCL_PATH", "/nonexistent/libnccl.so.2", 1);
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/tests/gpu-emu/libmi-gpuemu64.so", g_build);
  mi_plugin *p = mi_plugin_load_file(path, NULL);
  ck_assert_msg(p->status == MI_PLUGIN_LOADED, "%s", p->reason ? p->reason : "?");
  const mi_platform_iface *P = p->iface;
  ck_assert(mi_platform_has(P, allreduce_sum_f32) && mi_platform_has(P, broadcast));
  int rank = -1, size = -1;
  ck_assert_int_eq(P->comm_info(p->ctx, &rank, &size), 0);
  ck_assert_int_eq(rank, 0);
  ck_assert_int_eq(size, 1);
  float x[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f}, y[5];
  mi_buffer *b;
  ck_assert_int_eq(P->buffer_alloc(p->ctx, sizeof x, &b), 0);
  float *d = P->buffer_ptr(p->ctx, b);
  ck_assert_int_eq(P->memcpy_h2d(p->ctx, NULL, d, x, sizeof x), 0);
  ck_assert_int_eq(P->allreduce_sum_f32(p->ctx, NULL, d, 5), 0);
  ck_assert_int_eq(P->memcpy_d2h(p->ctx, NULL, y, d, sizeof y), 0);
  ck_assert_int_eq(memcmp(x, y, sizeof x), 0); /* the sum over one rank */
  ck_assert_int_ne(P->allreduce_sum_f32(p->ctx, NULL, d, -1), 0);
  ck_assert_str_eq(P->last_error(p->ctx), "gpuemu64: allreduce_sum_f32: negative n=-1");
  int32_t tok = 42;
  ck_assert_int_eq(P->broadcast(p->ctx, NULL, &tok, sizeof tok, 0), 0);
  ck_assert_int_eq(tok, 42);
  ck_assert_int_ne(P->broadcast(p->ctx, NULL, &tok, sizeof tok, 1), 0);
  ck_assert_str_eq(P->last_error(p->ctx),
                   "gpuemu64: broadcast: root 1 is not a rank of this group of 1");
  P->buffer_free(p->ctx, b);
  mi_plugin_unload(p);
  unsetenv("MI_CCL_PATH");
}
END_TEST

static int write_conf(const char *name, const char *platform_opts) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "platform gpuemu32 %s/tests/gpu-emu/libmi-gpuemu32.so required%s\n"
          "model qwen3 %s/lib/metainfer/libmi-qwen3.so required\n",
          g_build, platform_opts, g_build);
  return fclose(f);
}

int main(void) {
  mi_test_build_dir(g_build, sizeof g_build, "build");
  snprintf(g_dir, sizeof g_dir, "%s/tests/gpu-tp", g_build);
  const char *fk = getenv("MI_FAKE_NCCL");
  snprintf(g_fake, sizeof g_fake, "%s", fk ? fk : "");
  mi_test_mpi_env(g_mpirun, sizeof g_mpirun); /* as in tests/tp */
  /* tiny: 4 query / 2 KV heads, both divisible by 2 */
  char cmd[4 * PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "mkdir -p '%s' && ([ -f '%s/model/config.json' ] || '%s/bin/mi-mkmodel' --shape tiny "
           "--seed 6 --out '%s/model' >/dev/null)",
           g_dir, g_dir, g_build, g_dir);
  if (system(cmd) != 0) return 1;
  char opt[PATH_MAX + 16];
  snprintf(opt, sizeof opt, " ccl=%s", g_fake);
  if (!*g_fake || write_conf("ok.conf", opt) != 0 ||
      write_conf("missing.conf", " ccl=/nonexistent/libnccl.so.2") != 0 ||
      write_conf("plain.conf", "") != 0) {
    fprintf(stderr, "test_gpu_tp: cannot write the plugins.conf files in %s (MI_FAKE_NCCL=%s)\n",
            g_dir, g_fake);
    return 1;
  }
  Suite *s = suite_create("gpu_tp");
  TCase *tc = tcase_create("mpirun");
  tcase_set_timeout(tc, 120);
  mi_check_add(tc,
               MI_CHECK_TESTS(tp2_matches_tp1, tp2_library_missing, tp2_init_fails_on_one_rank));
  suite_add_tcase(s, tc);
  TCase *t1 = tcase_create("single");
  tcase_add_test(t1, single_process_collectives);
  suite_add_tcase(s, t1);
  return mi_check_run(s);
}
