/* mi-bench runs one tiny cell end to end and prints well-formed JSON with
 * the figures a user needs. Asserts no speed (machines are shared and noisy):
 * only that each figure is present, finite and consistent. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"

static char g_build[1024];

/* What the shell line cmd (ending in mi-bench --json) printed, parsed; the
 * test fails when it exits non-zero or prints something else. */
static json_t *bench_json(const char *cmd) {
  FILE *p = popen(cmd, "r");
  ck_assert(p);
  json_error_t je;
  json_t *j = json_loadf(p, 0, &je);
  int st = pclose(p);
  ck_assert_msg(st == 0, "mi-bench exited with %d", st);
  ck_assert_msg(j, "output is not JSON: %s", je.text);
  return j;
}

START_TEST(one_cell_json) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-mkmodel' --shape tiny --seed 9 --out '%s/tests/bench-tiny' >/dev/null && "
           "'%s/bin/mi-bench' -m '%s/tests/bench-tiny' -p 11 -g 40 -r 1 -t 2 --json </dev/null",
           g_build, g_build, g_build, g_build);
  json_t *j = bench_json(cmd);
  json_t *cells = json_object_get(j, "cells");
  ck_assert_int_eq(json_array_size(cells), 1);
  json_t *c = json_array_get(cells, 0);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "prompt")), 11);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "gen")), 40);
  const char *keys[] = {"ttft_ms", "prefill_tps", "decode_tps", "roofline_tps", "peak_rss_mib",
                        "bytes_per_token"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    double v = json_number_value(json_object_get(c, keys[i]));
    ck_assert_msg(isfinite(v) && v > 0, "%s = %g", keys[i], v);
  }
  double frac = json_number_value(json_object_get(c, "roofline_fraction"));
  double dec = json_number_value(json_object_get(c, "decode_tps"));
  double roof = json_number_value(json_object_get(c, "roofline_tps"));
  /* the JSON carries 6 significant digits, so a ratio of two printed
   * figures matches the printed ratio to about 1e-6 relative, not exactly */
  ck_assert_msg(fabs(frac - dec / roof) < 1e-5 * frac, "roofline_fraction %.9g, decode/roof %.9g",
                frac, dec / roof);
  /* bytes per token: at least the tiny model's bf16 weights (~19 MB) */
  ck_assert(json_number_value(json_object_get(c, "bytes_per_token")) > 1.9e7);
  /* prefill roofline: the FLOPs per prompt token mi-bench divides by must
   * be the model's, recomputed here from its config.json: every layer's
   * q,k,v,o,gate,up,down (2 FLOPs per weight) plus attention over (P+1)/2
   * positions on average (QKᵀ and PV, 2 FLOPs per head dim each) */
  char cfgp[1200];
  snprintf(cfgp, sizeof cfgp, "%s/tests/bench-tiny/config.json", g_build);
  json_error_t je;
  json_t *cfg = json_load_file(cfgp, 0, &je);
  ck_assert_msg(cfg, "%s: %s", cfgp, je.text);
#define CFG(k) ((double)json_integer_value(json_object_get(cfg, k)))
  double H = CFG("hidden_size"), L = CFG("num_hidden_layers"), hd = CFG("head_dim"),
         q = CFG("num_attention_heads") * hd, kv = CFG("num_key_value_heads") * hd,
         F = CFG("intermediate_size");
#undef CFG
  ck_assert(H > 0 && L > 0 && q > 0 && kv > 0 && F > 0);
  double flops_tok = 2 * L * (2 * H * q + 2 * H * kv + 3 * H * F) + 4 * q * L * (11 + 1) / 2.0;
  double pre = json_number_value(json_object_get(c, "prefill_tps"));
  double gfl = json_number_value(json_object_get(c, "prefill_gflops"));
  double peak = json_number_value(json_object_get(c, "peak_matmul_gflops"));
  double pfrac = json_number_value(json_object_get(c, "prefill_peak_fraction"));
  ck_assert_msg(fabs(gfl - pre * flops_tok / 1e9) < 1e-4 * gfl, "prefill_gflops %g, want %g", gfl,
                pre * flops_tok / 1e9);
  ck_assert_msg(isfinite(peak) && peak > 0, "peak_matmul_gflops = %g", peak);
  ck_assert_msg(fabs(pfrac - gfl / peak) < 1e-5 * pfrac, "prefill_peak_fraction %.9g, want %.9g",
                pfrac, gfl / peak);
  json_decref(cfg);
  /* decode by position: 39 decode steps make one full 32-token window,
   * starting at the prompt length, and one window's time cannot exceed
   * the whole decode's */
  json_t *dbp = json_object_get(c, "decode_by_position");
  ck_assert_int_eq(json_array_size(dbp), 1);
  ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(dbp, 0), 0)), 11);
  double wtps = json_number_value(json_array_get(json_array_get(dbp, 0), 1));
  ck_assert_msg(isfinite(wtps) && wtps > 0 && 32 / wtps <= 39 / dec * (1 + 1e-4),
                "window %g tok/s against decode %g tok/s", wtps, dec);
  /* the matrices' types, read from the weights: mi-mkmodel writes bf16, so
   * the mm column runs on bf16 and the prefill path is a bf16 one */
  ck_assert_str_eq(json_string_value(json_object_get(c, "matrix_dtype")), "bf16");
  ck_assert_str_eq(json_string_value(json_object_get(c, "matrix_dtypes")), "bf16 100%");
  const char *path = json_string_value(json_object_get(c, "prefill_matmul"));
  ck_assert_msg(path && (!strcmp(path, "exact") || !strcmp(path, "bf16_activations")),
                "prefill_matmul %s", path ? path : "(missing)");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "warmup")), 1); /* the default, as llama-bench */
  json_t *bw = json_object_get(j, "bandwidth_gbs");
  ck_assert(json_number_value(json_object_get(bw, "triad")) > 0);
  json_decref(j);
}
END_TEST

/* mi-bench --peer PATH: the path reaches node as one argument, never a
 * shell. Run without a shell (fork + execv) in a scratch folder holding a
 * file whose name is an injection; no PWNED file may appear. */
static const char *g_jf; /* --json-file for run_bench_in, or NULL */

static int run_bench_in(const char *dir, const char *peer, char *err, size_t errlen) {
  char exe[1200], model[1200], script[1200];
  const char *src = getenv("MI_SOURCE_DIR");
  snprintf(script, sizeof script, "%s/tools/bench/llamacpp_bench.mjs", src ? src : ".");
  snprintf(exe, sizeof exe, "%s/bin/mi-bench", g_build);
  snprintf(model, sizeof model, "%s/tests/bench-tiny", g_build);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (chdir(dir) != 0) _exit(99);
    dup2(fds[1], 2);
    int dn = open("/dev/null", O_RDWR);
    dup2(dn, 0), dup2(dn, 1);
    char *argv[] = {exe, "-m", model, "-p", "11", "-g", "4", "-r", "1", "-t", "1", "--peer", (char *)peer,
                    "--peer-script", script, g_jf ? "--json-file" : NULL, (char *)g_jf, NULL};
    execv(exe, argv);
    _exit(98);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < errlen && (r = read(fds[0], err + n, errlen - 1 - n)) > 0) n += (size_t)r;
  err[n] = 0;
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(peer_path_reaches_no_shell) {
  char dir[] = "/tmp/mi-bench-peer.XXXXXX", evil[1200], pwned[1200], err[65536], cmd[4096];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel' --shape tiny --seed 9 --out '%s/tests/bench-tiny' >/dev/null",
           g_build, g_build);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(pwned, sizeof pwned, "%s/PWNED", dir);
  /* 1. no such file: refused up front, before any measurement */
  const char *name = "x'; touch PWNED; '.gguf";
  int rc = run_bench_in(dir, name, err, sizeof err);
  ck_assert_msg(rc == 2, "exit %d: %s", rc, err);
  ck_assert_msg(strstr(err, "mi-bench: --peer x'; touch PWNED; '.gguf: No such file or directory"), "%s", err);
  ck_assert_msg(access(pwned, F_OK) != 0, "PWNED was created");
  /* 2. the file exists (not a GGUF): node gets it as an argument and fails; no shell ran it */
  snprintf(evil, sizeof evil, "%s/%s", dir, name);
  int fd = open(evil, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "not a gguf\n", 11), 11);
  close(fd);
  rc = run_bench_in(dir, evil, err, sizeof err);
  ck_assert_msg(strstr(err, "mi-bench: peer failed on prompt 11 gen 4: "), "exit %d: %s", rc, err);
  /* a comparison that did not happen: said, no 0.00x ratio, exit 3 */
  ck_assert_msg(rc == 3 && strstr(err, "mi-bench: the peer (node ") && strstr(err, "its figures and ratios are n/a"),
                "exit %d: %s", rc, err);
  char jf[1300];
  snprintf(jf, sizeof jf, "%s/bench.json", dir);
  g_jf = jf;
  rc = run_bench_in(dir, evil, err, sizeof err);
  g_jf = NULL;
  ck_assert_int_eq(rc, 3);
  json_t *j = json_load_file(jf, 0, NULL);
  ck_assert_msg(j, "no JSON written: %s", err);
  json_t *cell = json_array_get(json_object_get(j, "cells"), 0);
  ck_assert_msg(json_is_null(json_object_get(cell, "peer")), "the peer's figures are not null");
  ck_assert_int_eq(json_integer_value(json_object_get(cell, "peer_failed_runs")), 1);
  json_decref(j);
  unlink(jf);
  ck_assert_msg(access(pwned, F_OK) != 0, "PWNED was created: the path reached a shell");
  unlink(evil);
  rmdir(dir);
}
END_TEST

/* mi-bench on tests/bench-tiny2 with --json-file json, stdout to
 * stdout_to: it exits 1 naming `want` on stderr. out[8192] gets "status=N",
 * its stderr, then what the shell line `after` prints. */
static void bench_fails(const char *json, const char *stdout_to, const char *after,
                        const char *want, char *out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-bench' -m '%s/tests/bench-tiny2' -p 11 -g 4 -r 1 -t 2 "
           "--json-file '%s' </dev/null >%s 2>'%s/tests/bench-err.txt'; "
           "echo status=$?; cat '%s/tests/bench-err.txt'; %s",
           g_build, g_build, json, stdout_to, g_build, g_build, after);
  mi_test_popen_out(cmd, out, 8192);
  ck_assert_msg(strstr(out, "status=1"), "%s", out);
  ck_assert_msg(strstr(out, want), "%s", out);
}

/* Issue 18: --json-file that cannot be written is an error with the file
 * and errno (not exit 0 with nothing written), stdout on a full disk too;
 * a good one is complete JSON and leaves no temp file. */
START_TEST(json_file_errors) {
  char cmd[4096], out[8192];
  ck_assert_int_eq(
      mi_test_sh(
          "'%s/bin/mi-mkmodel' --shape tiny --seed 9 --out '%s/tests/bench-tiny2' >/dev/null",
          g_build, g_build),
      0);
  bench_fails("/nonexistent-dir/b.json", "/dev/null", "",
              "mi-bench: /nonexistent-dir/b.json: cannot write: No such file or directory", out);

  char ok[1200];
  snprintf(ok, sizeof ok, "%s/tests/bench-ok.json", g_build);
  snprintf(cmd, sizeof cmd, "ls '%s/tests' | grep -c 'bench-ok.json.tmp'", g_build);
  bench_fails(ok, "/dev/full", cmd,
              "mi-bench: standard output: write failed: No space left on device", out);
  ck_assert_msg(strstr(out, "\n0\n"), "a temp file was left: %s", out);
  json_error_t je;
  json_t *j = json_load_file(ok, 0, &je);
  ck_assert_msg(j, "%s: %s", ok, je.text);
  ck_assert_int_eq(json_array_size(json_object_get(j, "cells")), 1);
  json_decref(j);
}
END_TEST

/* --baseline: each cell also runs with the other plugin set, alternating
 * run by run; the JSON has its medians and ratios that agree with them.
 * (Both sides are the same plugins here: only the bookkeeping is checked,
 * no speed.) A baseline that is not a directory is refused before any
 * work; one whose plugins cannot load fails the run with its reason. */
START_TEST(baseline_side_by_side) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-mkmodel' --shape tiny --seed 9 --out '%s/tests/bench-tiny3' >/dev/null && "
           "'%s/bin/mi-bench' -m '%s/tests/bench-tiny3' -p 11,5 -g 6 -r 2 -t 1 --baseline default "
           "--json </dev/null",
           g_build, g_build, g_build, g_build);
  json_t *j = bench_json(cmd);
  ck_assert_str_eq(json_string_value(json_object_get(j, "baseline_plugin_dir")), "default");
  json_t *cells = json_object_get(j, "cells");
  ck_assert_int_eq(json_array_size(cells), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *c = json_array_get(cells, i), *b = json_object_get(c, "baseline");
    ck_assert_msg(b, "cell %zu has no baseline", i);
    ck_assert_int_eq(json_integer_value(json_object_get(b, "runs")), 2);
    const char *keys[] = {"prefill_tps", "decode_tps", "ttft_ms", "prefill_ratio_paired",
                          "decode_ratio_paired"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      double v = json_number_value(json_object_get(b, keys[k]));
      ck_assert_msg(isfinite(v) && v > 0, "cell %zu baseline %s = %g", i, keys[k], v);
    }
    double pre = json_number_value(json_object_get(c, "prefill_tps")),
           bpre = json_number_value(json_object_get(b, "prefill_tps")),
           r = json_number_value(json_object_get(b, "prefill_ratio"));
    ck_assert_msg(fabs(r - pre / bpre) < 1e-5 * r, "prefill_ratio %g, want %g", r, pre / bpre);
    double dec = json_number_value(json_object_get(c, "decode_tps")),
           bdec = json_number_value(json_object_get(b, "decode_tps")),
           rd = json_number_value(json_object_get(b, "decode_ratio"));
    ck_assert_msg(fabs(rd - dec / bdec) < 1e-5 * rd, "decode_ratio %g, want %g", rd, dec / bdec);
  }
  json_decref(j);

  char out[8192];
  snprintf(cmd, sizeof cmd,
           "mkdir -p '%s/tests/bench-broken-dir' && "
           "printf 'platform cpu ./libmi-nothere.so required\\n' > '%s/tests/bench-broken-dir/plugins.conf'; "
           "'%s/bin/mi-bench' -m '%s/tests/bench-tiny3' -p 5 -g 2 -r 1 -t 1 --baseline /nonexistent-mi "
           "</dev/null >/dev/null 2>&1; echo status=$?; "
           "'%s/bin/mi-bench' -m '%s/tests/bench-tiny3' -p 5 -g 2 -r 1 -t 1 "
           "--baseline '%s/tests/bench-broken-dir' </dev/null 2>'%s/tests/bench-base-err.txt' "
           ">/dev/null; echo status=$?; tr '\\r' '\\n' < '%s/tests/bench-base-err.txt'",
           g_build, g_build, g_build, g_build, g_build, g_build, g_build, g_build, g_build);
  mi_test_popen_out(cmd, out, sizeof out);
  ck_assert_msg(strstr(out, "status=2\nstatus=1\n"), "%s", out);
  ck_assert_msg(strstr(out, "libmi-nothere.so"), "%s", out);
  ck_assert_msg(strstr(out, "mi-bench: baseline failed on prompt 5 gen 2: "), "%s", out);
}
END_TEST

int main(void) {
  const char *b = getenv("MI_BUILD_DIR");
  /* STREAM on arrays of 16 MiB, not 256 (MI_BENCH_STREAM_MIB): every
   * mi-bench run here measures the bandwidth first (3 x 256 MiB filled and
   * swept 10 times: seconds per run, several under the sanitizers), and no
   * assertion here reads its value beyond "present, positive, consistent
   * with the roofline"; the same measuring code runs */
  setenv("MI_BENCH_STREAM_MIB", "16", 0);
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  Suite *s = mi_check_suite("bench_smoke", "bench", 300, NULL, NULL,
                            MI_CHECK_TESTS(one_cell_json, peer_path_reaches_no_shell,
                                           json_file_errors, baseline_side_by_side));
  return mi_check_run(s);
}
