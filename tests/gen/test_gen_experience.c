/* Experience that carries: a repair learnt on one checkpoint is applied on
 * another shape and a later version of the contract, matched by the defect
 * the contract carries (applies_to.binding), not by the file's hash.
 *
 * A copy of the CKB with one planted defect (every RMSNorm's eps bound to
 * config:layer_norm_eps, a field Qwen3's config.json lacks, default 1e-5
 * instead of rms_norm_eps 1e-6):
 *   1. mi-gen on tiny seed 1: candidate 1 fails (stage 5's small-magnitude
 *      prompt), failure_mode.rmsnorm_wrong_eps repairs it, candidate 2
 *      passes; the experience written records the binding it repaired
 *      (operator.rmsnorm.eps was config:layer_norm_eps) and the symptom;
 *   2. the planted contract is edited (a new version, another summary: a
 *      new SHA-256) but still carries the defect; mi-gen on tiny-untied seed 2
 *      passes with its first candidate, the experience applied, no repair.
 * The candidates and wall times print as a table row for docs/mi-gen.md. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen_tool.h"

static char g_build[1024], g_src[1024], g_tmp[1100], g_ckb[1200];

static res run(const char *tool, const char *const *args, int timeout) {
  return gt_run(g_build, g_tmp, tool, args, timeout);
}
#define sh(...) gt_sh("test_gen_experience", __VA_ARGS__)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Plants the defect in g_ckb's model.qwen3 (version and summary as given). */
static void plant(const char *version, const char *summary) {
  char p[1300];
  snprintf(p, sizeof p, "%s/models/qwen3.json", g_ckb);
  json_t *m = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(m);
  json_object_set_new(m, "version", json_string(version));
  json_object_set_new(m, "summary", json_string(summary));
  const char *secs[] = {"prologue", "layer_sequence", "epilogue"};
  int n = 0;
  for (int s = 0; s < 3; s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(m, secs[s]), i, st) if (!strcmp(json_string_value(json_object_get(st, "operator")), "operator.rmsnorm")) {
      json_object_set_new(json_object_get(st, "args"), "eps", json_string("config:layer_norm_eps"));
      n++;
    }
  }
  ck_assert_int_ge(n, 3);
  json_t *cfg = json_object_get(m, "config");
  size_t i;
  json_t *e;
  int have = 0;
  json_array_foreach(cfg, i, e) have |= !strcmp(json_string_value(json_object_get(e, "name")), "layer_norm_eps");
  if (!have)
    json_array_append_new(cfg, json_pack("{s:s, s:s, s:s, s:f}", "name", "layer_norm_eps", "type", "number", "meaning",
                                         "planted: the eps of another family's config", "default", 1e-5));
  ck_assert_int_eq(json_dump_file(m, p, JSON_INDENT(2)), 0);
  json_decref(m);
}

/* mi-gen on a fresh checkpoint; its manifest */
static json_t *generate(const char *shape, const char *seed, const char *out, double *wall, char **err) {
  char model[1300], gold[1200];
  snprintf(model, sizeof model, "%s/%s-%s", g_tmp, shape, seed);
  snprintf(gold, sizeof gold, "%s/tests/goldens", g_src);
  const char *mk[] = {"--shape", shape, "--seed", seed, "--dtype", "bf16", "--out", model, NULL};
  res r = run("mi-mkmodel", mk, 120);
  ck_assert_int_eq(r.rc, 0);
  res_free(&r);
  const char *gen[] = {"--model", model, "--platform", "cpu", "--dtype", "bf16", "--tp", "1", "--out", out,
                       "--ckb", g_ckb, "--goldens", gold, "--seed", "3", "-t", "2", NULL};
  double t0 = now_s();
  r = run("mi-gen", gen, 900);
  *wall = now_s() - t0;
  *err = strdup(r.err);
  ck_assert_msg(r.rc == 0, "mi-gen exit %d:\n%s", r.rc, r.err);
  res_free(&r);
  char mp[1300];
  snprintf(mp, sizeof mp, "%s/manifest.json", out);
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_ptr_nonnull(m);
  return m;
}

static int applied(json_t *man) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(man, "experience_consulted"), i, e) if (json_is_true(json_object_get(e, "applied")) &&
                                                                              strstr(json_string_value(json_object_get(e, "id")), "rmsnorm_wrong_eps")) return 1;
  return 0;
}

START_TEST(experience_carries_to_another_shape_and_version) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_src, sizeof g_src, "%s", s ? s : ".");
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mi-gen-exp-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_tmp));
  snprintf(g_ckb, sizeof g_ckb, "%s/ckb", g_tmp);
  sh("cp -r '%s/ckb' '%s'", g_src, g_ckb);
  plant("1.4.0", "planted: every RMSNorm reads layer_norm_eps");
  char out[1300], *err1, *err2;
  double w1, w2;
  snprintf(out, sizeof out, "%s/engine-1", g_tmp);
  json_t *m1 = generate("tiny", "1", out, &w1, &err1);
  ck_assert_int_eq(json_integer_value(json_object_get(m1, "iterations")), 2);
  ck_assert_int_eq(json_array_size(json_object_get(m1, "repairs")), 1);
  ck_assert(!applied(m1));
  /* the experience it wrote: matched by the binding it repaired */
  char cmd[2600], path[1300];
  snprintf(cmd, sizeof cmd, "ls '%s'/experience/gen_qwen3_*_rmsnorm_wrong_eps.json > '%s/exp.txt'", g_ckb, g_tmp);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(path, sizeof path, "%s/exp.txt", g_tmp);
  FILE *f = fopen(path, "r");
  char ep[1300] = "";
  ck_assert_ptr_nonnull(fgets(ep, sizeof ep, f));
  fclose(f);
  ep[strcspn(ep, "\n")] = 0;
  json_t *x = json_load_file(ep, 0, NULL);
  ck_assert_ptr_nonnull(x);
  json_t *bd = json_object_get(json_object_get(x, "applies_to"), "binding");
  ck_assert_str_eq(json_string_value(json_object_get(bd, "operator")), "operator.rmsnorm");
  ck_assert_str_eq(json_string_value(json_object_get(bd, "arg")), "eps");
  ck_assert_str_eq(json_string_value(json_object_get(bd, "was")), "config:layer_norm_eps");
  json_t *sy = json_object_get(json_object_get(x, "applies_to"), "symptom");
  ck_assert_str_eq(json_string_value(json_object_get(sy, "failure_mode")), "failure_mode.rmsnorm_wrong_eps");
  json_decref(x);
  /* a later version of the contract (another SHA-256), the defect still
   * there, another shape and seed: the experience applies, one candidate */
  plant("1.4.1", "planted, edited since: every RMSNorm reads layer_norm_eps");
  snprintf(out, sizeof out, "%s/engine-2", g_tmp);
  json_t *m2 = generate("tiny-untied", "2", out, &w2, &err2);
  ck_assert_msg(json_integer_value(json_object_get(m2, "iterations")) == 1 && applied(m2) &&
                    json_array_size(json_object_get(m2, "repairs")) == 0,
                "second run: %lld candidates, experience applied %d:\n%s",
                (long long)json_integer_value(json_object_get(m2, "iterations")), applied(m2), err2);
  printf("| tiny seed 1, contract 1.4.0 | %lld | %.1f s |\n| tiny-untied seed 2, contract 1.4.1 | %lld | %.1f s |\n",
         (long long)json_integer_value(json_object_get(m1, "iterations")), w1,
         (long long)json_integer_value(json_object_get(m2, "iterations")), w2);
  json_decref(m1);
  json_decref(m2);
  free(err1);
  free(err2);
  if (!getenv("MI_KEEP")) sh("rm -rf '%s'", g_tmp);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gen_experience");
  TCase *t = tcase_create("experience");
  tcase_set_timeout(t, 1500);
  tcase_add_test(t, experience_carries_to_another_shape_and_version);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
