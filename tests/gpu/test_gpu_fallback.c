/* mi-run with the GPU plugins present on a machine without a GPU:
 *  - plugins.conf listing cpu (required) and z200/k100/nvidia (optional):
 *    --list-plugins shows each GPU plugin "unsuited" with its reason, and a
 *    greedy run on a generated tiny model picks cpu and gives exactly the
 *    tokens a cpu-only plugins.conf gives;
 *  - --platform <gpu> exits non-zero and stderr carries the probe's reason. */
#define _GNU_SOURCE
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_test_plugins.h"
#include "tests/util/check_main.h"
#include "tests/util/test_files.h"

static char g_dir[PATH_MAX], g_bin[PATH_MAX], g_lib[PATH_MAX];

/* a file's text, "" when missing or unreadable */
static char *slurp(const char *path) {
  char *s = mi_test_slurp(path);
  return s ? s : strdup("");
}

/* Runs a shell command; stdout/stderr go to files in g_dir. Returns the exit status. */
static int run(const char *cmd, char **out, char **err) {
  char full[8192], o[PATH_MAX + 16], e[PATH_MAX + 16];
  snprintf(o, sizeof o, "%s/out.txt", g_dir);
  snprintf(e, sizeof e, "%s/err.txt", g_dir);
  snprintf(full, sizeof full, "%s >'%s' 2>'%s' </dev/null", cmd, o, e);
  int st = system(full);
  if (out) *out = slurp(o);
  if (err) *err = slurp(e);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void setup(void) {
  const char *b = getenv("MI_BUILD_DIR");
  ck_assert_ptr_nonnull(b);
  snprintf(g_bin, sizeof g_bin, "%s/bin", b);
  snprintf(g_lib, sizeof g_lib, "%s/lib/metainfer", b);
  snprintf(g_dir, sizeof g_dir, "%s/tests/gpu-fallback-%d", b, (int)getpid());
  char cmd[4 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s/mi-mkmodel' --shape tiny --seed 7 --out '%s/model'",
           g_dir, g_dir, g_bin, g_dir);
  ck_assert_int_eq(run(cmd, NULL, NULL), 0);
  /* cpu-only and cpu + every GPU plugin */
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/cpu.conf", g_dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "platform cpu %s/libmi-cpu.so required threads=2\nmodel qwen3 %s/libmi-qwen3.so required\n",
          g_lib, g_lib);
  fclose(f);
  snprintf(path, sizeof path, "%s/gpu.conf", g_dir);
  f = fopen(path, "w");
  fprintf(f, "platform cpu %s/libmi-cpu.so required threads=2\nmodel qwen3 %s/libmi-qwen3.so required\n",
          g_lib, g_lib);
  for (int i = 0; i < NPLUGINS; i++)
    fprintf(f, "platform %s %s/libmi-%s.so optional\n", plugins[i].name, g_lib, plugins[i].name);
  fclose(f);
}

static void teardown(void) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
}

START_TEST(list_shows_unsuited) {
  char cmd[4 * PATH_MAX], *out, *err;
  snprintf(cmd, sizeof cmd, "'%s/mi-run' --plugins-conf '%s/gpu.conf' --list-plugins", g_bin, g_dir);
  ck_assert_int_eq(run(cmd, &out, &err), 0);
  for (int i = 0; i < NPLUGINS; i++) {
    /* "platform  z200   0.1.0   0  unsuited ..." then "reason: probe scored 0: z200: ..." */
    char *line = strstr(out, plugins[i].name);
    ck_assert_msg(line, "--list-plugins lacks %s:\n%s", plugins[i].name, out);
    char *eol = strchr(line, '\n');
    ck_assert_ptr_nonnull(eol);
    *eol = '\0';
    ck_assert_msg(strstr(line, " unsuited "), "%s not unsuited: %s", plugins[i].name, line);
    *eol = '\n';
    char want[64];
    snprintf(want, sizeof want, "reason: probe scored 0: %s: ", plugins[i].name);
    ck_assert_msg(strstr(out, want), "no reason line for %s:\n%s", plugins[i].name, out);
  }
  ck_assert_ptr_nonnull(strstr(out, " loaded "));
  free(out);
  free(err);
}
END_TEST

START_TEST(falls_back_to_cpu) {
  char cmd[4 * PATH_MAX], *out_cpu, *out_gpu, *err;
  const char *args = "-p 'The quick brown fox' -n 6 --temp 0 --json --top-logprobs 3";
  snprintf(cmd, sizeof cmd, "'%s/mi-run' --plugins-conf '%s/cpu.conf' -m '%s/model' %s", g_bin,
           g_dir, g_dir, args);
  ck_assert_int_eq(run(cmd, &out_cpu, &err), 0);
  free(err);
  snprintf(cmd, sizeof cmd, "'%s/mi-run' --plugins-conf '%s/gpu.conf' -m '%s/model' %s -v", g_bin,
           g_dir, g_dir, args);
  int rc = run(cmd, &out_gpu, &err);
  ck_assert_msg(rc == 0, "mi-run with GPU plugins listed failed (%d): %s", rc, err);
  ck_assert_msg(strlen(out_cpu) > 20, "no output: %s", out_cpu);
  /* same engine, same tokens and logprobs: the fallback is the cpu platform */
  ck_assert_str_eq(out_gpu, out_cpu);
  free(out_cpu);
  free(out_gpu);
  free(err);
}
END_TEST

START_TEST(platform_gpu_refused) {
  const gpu_plugin_info *g = &plugins[_i];
  char cmd[4 * PATH_MAX], *out, *err;
  snprintf(cmd, sizeof cmd,
           "'%s/mi-run' --plugins-conf '%s/gpu.conf' -m '%s/model' -p hi -n 2 --temp 0 --platform %s",
           g_bin, g_dir, g_dir, g->name);
  int rc = run(cmd, &out, &err);
  ck_assert_msg(rc != 0, "--platform %s succeeded without a GPU", g->name);
  ck_assert_str_eq(out, "");
  char want[96];
  snprintf(want, sizeof want, "platform '%s' is not available: probe scored 0: %s: ", g->name,
           g->name);
  ck_assert_msg(strstr(err, want), "stderr lacks \"%s\":\n%s", want, err);
  /* and the reason itself names what is missing */
  ck_assert_msg(strstr(err, "without device code") || strstr(err, "hipGetDeviceCount") ||
                    strstr(err, "no HIP runtime found") || strstr(err, "no CUDA driver found") ||
                    strstr(err, "cuInit"),
                "%s", err);
  free(out);
  free(err);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_fallback");
  TCase *tc = mi_check_case(s, "mi_run", 120, setup, teardown);
  mi_check_add(tc, MI_CHECK_TESTS(list_shows_unsuited, falls_back_to_cpu));
  tcase_add_loop_test(tc, platform_gpu_refused, 0, NPLUGINS);
  return mi_check_run(s);
}
