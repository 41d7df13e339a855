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
 * The candidates and wall times print as a table row for docs/mi-gen.md.
 *
 * What a run learns besides a repair (core/gen/learn.h), in the same CKB
 * copy: the failed candidate of run 1 left a failure report, marked
 * repaired by the failure mode and the experience; a defect no failure mode
 * repairs (every RMSNorm read as (1+w), the hybrid's norm, on a Qwen3
 * contract) leaves an open report listing nothing tried; a coverage gap
 * (hidden_act gelu) leaves one knowledge-gap entry, counted again (not
 * written again) when another checkpoint shows it, and nothing at all with
 * MI_CKB_LEARN=0. The symptom signature's rules are checked on their own. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gen/learn.h"
#include "gen_tool.h"
#include "tests/util/check_main.h"

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

/* The entries of one CKB folder (e.g. "failure_reports"), as a JSON array */
static json_t *entries(const char *dir) {
  char cmd[1500], lst[1300];
  snprintf(lst, sizeof lst, "%s/ls.txt", g_tmp);
  snprintf(cmd, sizeof cmd, "ls '%s/%s'/*.json > '%s' 2>/dev/null", g_ckb, dir, lst);
  json_t *a = json_array();
  if (system(cmd) != 0) return a;
  FILE *f = fopen(lst, "r");
  char line[1300];
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    json_t *e = json_load_file(line, 0, NULL);
    ck_assert_msg(e != NULL, "%s does not parse", line);
    json_array_append_new(a, e);
  }
  if (f) fclose(f);
  return a;
}

/* Edits config.json of model dir: sets key to the JSON value text */
static void set_config(const char *model, const char *key, const char *value) {
  char p[1400];
  snprintf(p, sizeof p, "%s/config.json", model);
  json_t *c = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(c);
  json_object_set_new(c, key, json_loads(value, JSON_DECODE_ANY, NULL));
  ck_assert_int_eq(json_dump_file(c, p, JSON_INDENT(2)), 0);
  json_decref(c);
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
  ck_assert_int_eq(gt_dirs("/tmp/mi-gen-exp-test-XXXXXX", g_build, g_src, g_tmp, NULL, g_ckb), 0);
  sh("cp -r '%s/ckb' '%s'", g_src, g_ckb);
  setenv("MI_CKB_LEARN", "1", 1); /* ctest turns learning off for suites on the shipped CKB */
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
  /* the failed candidate left a failure report, marked repaired by the
   * failure mode, with the experience it led to */
  json_t *reps = entries("failure_reports");
  ck_assert_int_eq(json_array_size(reps), 1);
  json_t *fr = json_array_get(reps, 0);
  ck_assert_str_eq(json_string_value(json_object_get(fr, "status")), "repaired");
  ck_assert_int_eq(json_integer_value(json_object_get(fr, "occurrences")), 1);
  ck_assert_int_eq(json_array_size(json_object_get(fr, "checkpoints")), 1);
  json_t *rb = json_object_get(fr, "repaired_by");
  ck_assert_str_eq(json_string_value(json_object_get(rb, "failure_mode")), "failure_mode.rmsnorm_wrong_eps");
  ck_assert_str_eq(json_string_value(json_object_get(rb, "experience")), json_string_value(json_object_get(x, "id")));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fr, "symptom"), "test_contract")),
                   json_string_value(json_object_get(sy, "test_contract")));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fr, "contract"), "id")), "model.qwen3");
  json_decref(reps);
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
  reps = entries("failure_reports"); /* the second run failed nothing: no report more */
  ck_assert_int_eq(json_array_size(reps), 1);
  json_decref(reps);
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

/* Failures no failure mode repairs, and coverage gaps, are knowledge too */
START_TEST(open_reports_and_knowledge_gaps) {
  ck_assert_int_eq(gt_dirs("/tmp/mi-gen-learn-test-XXXXXX", g_build, g_src, g_tmp, NULL, g_ckb), 0);
  sh("cp -r '%s/ckb' '%s'", g_src, g_ckb);
  sh("rm -rf '%s/failure_reports' '%s/knowledge_gaps'", g_ckb, g_ckb);
  setenv("MI_CKB_LEARN", "1", 1);
  char gold[1200], m1[1300], m2[1300], out[1300];
  snprintf(gold, sizeof gold, "%s/tests/goldens", g_src);
  snprintf(m1, sizeof m1, "%s/tiny-1", g_tmp);
  snprintf(m2, sizeof m2, "%s/tiny-untied-2", g_tmp);
  const char *mk1[] = {"--shape", "tiny", "--seed", "1", "--dtype", "bf16", "--out", m1, NULL};
  const char *mk2[] = {"--shape", "tiny-untied", "--seed", "2", "--dtype", "bf16", "--out", m2, NULL};
  res r = run("mi-mkmodel", mk1, 120);
  ck_assert_int_eq(r.rc, 0);
  res_free(&r);
  r = run("mi-mkmodel", mk2, 120);
  ck_assert_int_eq(r.rc, 0);
  res_free(&r);

  /* a coverage gap: one knowledge_gap entry naming the field */
  set_config(m1, "hidden_act", "\"gelu_pytorch_tanh\"");
  set_config(m2, "hidden_act", "\"gelu_pytorch_tanh\"");
  snprintf(out, sizeof out, "%s/engine-gap", g_tmp);
  const char *g1[] = {"--model", m1, "--platform", "cpu", "--dtype", "bf16", "--out", out, "--ckb", g_ckb, NULL};
  r = run("mi-gen", g1, 120);
  ck_assert_msg(r.rc == 3 && strstr(r.err, "knowledge gap") && strstr(r.err, "1 new"), "exit %d:\n%s", r.rc, r.err);
  res_free(&r);
  json_t *gaps = entries("knowledge_gaps");
  ck_assert_int_eq(json_array_size(gaps), 1);
  json_t *g = json_object_get(json_array_get(gaps, 0), "gap");
  ck_assert_str_eq(json_string_value(json_object_get(g, "field")), "hidden_act");
  ck_assert_str_eq(json_string_value(json_object_get(g, "class")), "config_value");
  ck_assert_str_eq(json_string_value(json_object_get(g, "contract")), "model.qwen3");
  ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(g, "line")), "gelu_pytorch_tanh"));
  json_decref(gaps);
  /* the same gap on another checkpoint: counted, not written again */
  const char *g2[] = {"--model", m2, "--platform", "cpu", "--dtype", "bf16", "--out", out, "--ckb", g_ckb, NULL};
  r = run("mi-gen", g2, 120);
  ck_assert_msg(r.rc == 3 && strstr(r.err, "1 seen before"), "exit %d:\n%s", r.rc, r.err);
  res_free(&r);
  gaps = entries("knowledge_gaps");
  ck_assert_int_eq(json_array_size(gaps), 1);
  json_t *g0 = json_array_get(gaps, 0);
  ck_assert_int_eq(json_integer_value(json_object_get(g0, "occurrences")), 2);
  ck_assert_int_eq(json_array_size(json_object_get(g0, "checkpoints")), 2);
  ck_assert_str_eq(json_string_value(json_object_get(g0, "version")), "1.0.1");
  json_decref(gaps);
  /* learning off: another gap, nothing written */
  set_config(m1, "attention_bias", "true");
  setenv("MI_CKB_LEARN", "0", 1);
  r = run("mi-gen", g1, 120);
  ck_assert_msg(r.rc == 3 && !strstr(r.err, "knowledge gap"), "exit %d:\n%s", r.rc, r.err);
  res_free(&r);
  setenv("MI_CKB_LEARN", "1", 1);
  gaps = entries("knowledge_gaps");
  ck_assert_int_eq(json_array_size(gaps), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(gaps, 0), "occurrences")), 2);
  json_decref(gaps);
  set_config(m1, "attention_bias", "false");
  set_config(m1, "hidden_act", "\"silu\"");

  /* a defect no failure mode repairs: every RMSNorm as (1 + w), the
   * hybrid's zero-centred norm, in the Qwen3 contract: an open report */
  char p[1300];
  snprintf(p, sizeof p, "%s/models/qwen3.json", g_ckb);
  json_t *m = json_load_file(p, 0, NULL);
  json_t *all = json_pack("[O, O, O]", json_object_get(m, "prologue"), json_object_get(m, "layer_sequence"),
                          json_object_get(m, "epilogue"));
  size_t si, i;
  json_t *sec, *st;
  int n = 0;
  json_array_foreach(all, si, sec) json_array_foreach(sec, i, st) if (!strcmp(json_string_value(json_object_get(st, "operator")),
                                                                                "operator.rmsnorm")) {
    json_object_set_new(json_object_get(st, "args"), "w_offset", json_string("1"));
    n++;
  }
  json_decref(all);
  ck_assert_int_ge(n, 3);
  ck_assert_int_eq(json_dump_file(m, p, JSON_INDENT(2)), 0);
  json_decref(m);
  const char *g3[] = {"--model", m1, "--platform", "cpu", "--dtype", "bf16", "--out", out, "--ckb", g_ckb,
                      "--goldens", gold, "--seed", "3", "-t", "2", NULL};
  r = run("mi-gen", g3, 900);
  ck_assert_msg(r.rc == 4 && strstr(r.err, "no failure mode in the CKB proposes a repair"), "exit %d:\n%s", r.rc, r.err);
  res_free(&r);
  json_t *reps = entries("failure_reports");
  ck_assert_int_eq(json_array_size(reps), 1);
  json_t *fr = json_array_get(reps, 0);
  ck_assert_str_eq(json_string_value(json_object_get(fr, "status")), "open");
  ck_assert_ptr_null(json_object_get(fr, "repaired_by"));
  ck_assert_ptr_null(json_object_get(fr, "tried"));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fr, "contract"), "id")), "model.qwen3");
  ck_assert_ptr_nonnull(json_string_value(json_object_get(json_object_get(fr, "symptom"), "signature")));
  /* marked repaired, then seen again: open once more, the repair that
   * cleared it kept (a later run tries it first), counted, one entry */
  char rid[300], fm[200];
  snprintf(rid, sizeof rid, "%s", json_string_value(json_object_get(fr, "id")));
  ck_assert_int_eq(mi_learn_last_repair(g_ckb, rid, fm, sizeof fm), -1);
  json_t *patch = json_pack("{s:s, s:s, s:s}", "operator", "operator.rmsnorm", "arg", "w_offset", "value", "0");
  ck_assert_int_eq(mi_learn_repaired(g_ckb, rid, "failure_mode.rmsnorm_wrong_eps", patch, NULL), 0);
  ck_assert_int_eq(mi_learn_last_repair(g_ckb, rid, fm, sizeof fm), 0);
  ck_assert_str_eq(fm, "failure_mode.rmsnorm_wrong_eps");
  char err[300];
  mi_ckb *ck = mi_ckb_open(g_ckb, err, sizeof err);
  ck_assert_ptr_nonnull(ck);
  json_t *sy = json_object_get(fr, "symptom");
  char again[300];
  ck_assert_int_eq(mi_learn_failure(g_ckb, mi_ckb_find(ck, "model.qwen3"), NULL, NULL,
                                    json_string_value(json_object_get(sy, "stage")),
                                    json_string_value(json_object_get(sy, "test_contract")),
                                    json_string_value(json_object_get(sy, "message")), NULL, NULL, again, sizeof again),
                   0);
  ck_assert_str_eq(again, rid);
  mi_ckb_close(ck);
  json_decref(patch);
  json_decref(reps);
  reps = entries("failure_reports");
  ck_assert_int_eq(json_array_size(reps), 1);
  fr = json_array_get(reps, 0);
  ck_assert_str_eq(json_string_value(json_object_get(fr, "status")), "open");
  ck_assert_int_eq(json_integer_value(json_object_get(fr, "occurrences")), 2);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fr, "repaired_by"), "failure_mode")),
                   "failure_mode.rmsnorm_wrong_eps");
  json_decref(reps);
  /* every entry written is valid CKB knowledge */
  const char *val[] = {"--ckb", g_ckb, "validate", NULL};
  r = run("mi-ckb", val, 60);
  ck_assert_msg(r.rc == 0, "mi-ckb validate exit %d:\n%s%s", r.rc, r.out, r.err);
  res_free(&r);
  if (!getenv("MI_KEEP")) sh("rm -rf '%s'", g_tmp);
}
END_TEST

/* A symptom is keyed by its words, not its numbers or paths */
START_TEST(signature_rules) {
  char a[300], b[300], c[300];
  mi_learn_signature("unseen prompt 0 (5 tokens) step 0: logprob -1.946311, float64 reference -1.618872 (|diff| 3.27e-01 > 1e-03)", a, sizeof a);
  mi_learn_signature("unseen prompt 2 (17 tokens)  step 41: logprob -0.5, float64 reference -7 (|diff| 6.5 > 1e-03)", b, sizeof b);
  ck_assert_str_eq(a, b);
  ck_assert_ptr_nonnull(strstr(a, "float64"));
  char *f64 = strstr(a, "float64");
  memset(f64 + 5, '_', 2); /* the word's digits are its own; no other digit is left */
  ck_assert_ptr_null(strpbrk(a, "0123456789"));
  mi_learn_signature("build failed: /tmp/mi-verify.x1/work-3/engine.c:17: error", c, sizeof c);
  ck_assert_str_eq(c, "build failed: <path> error");
  mi_learn_signature("stage 5 deep positions: step 300 wrong", c, sizeof c);
  ck_assert_str_ne(a, c);
  mi_learn_signature("libc.so.6 not allowed", c, sizeof c);
  ck_assert_str_eq(c, "libc.so.6 not allowed");
  char tiny[8];
  mi_learn_signature("a very long message that does not fit", tiny, sizeof tiny);
  ck_assert_uint_lt(strlen(tiny), sizeof tiny);
}
END_TEST

int main(void) {
  Suite *s = mi_check_suite("gen_experience", "experience", 1500, NULL, NULL,
                            MI_CHECK_TESTS(experience_carries_to_another_shape_and_version,
                                           open_reports_and_knowledge_gaps, signature_rules));
  return mi_check_run(s);
}
