/* mi-verify stage 1 on the candidate bundle of the gated-DeltaNet hybrid
 * (candidates/hybrid-deltanet): its operator contracts are not in ckb/ (the
 * consolidator writes them there after an evolution run), so this test makes
 * a CKB that has them: a copy of ckb/ in a temporary folder, the bundle's
 * operators/ added, and the cpu platform contract listing their kernels.
 * Then:
 *  - the float64 references against values worked out by hand;
 *  - the real CPU plugin passes every one of the bundle's units;
 *  - mutant plugins with one planted defect each (no beta, value-head order
 *    not converted, state not carried) fail exactly their unit, with the
 *    symptom in the message, and pass the others. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/verify/verify.h"
#include "tests/util/check_main.h"
#include "tests/verify/verify_test.h"

static char bin[4096], cpu_so[4096], mutants[4096], src[4096], tmp_ckb[4096], only[1024];
static char tmp_dir[4096];

/* Runs a shell command; fails the test unless it exits 0. */
static void sh(const char *cmd) {
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "command failed: %s", cmd);
}

/* The temporary CKB: ckb/ + the bundle's operators + the cpu platform
 * contract listing them as kernels (f32). Made once per process (Check
 * forks each test; the fixture runs in the parent as an unchecked fixture). */
static void make_ckb(void) {
  const char *b, *s;
  vt_env(&b, &s, bin, cpu_so);
  snprintf(mutants, sizeof mutants, "%s/tests/mutants", b);
  snprintf(src, sizeof src, "%s", s);
  const char *t = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/mi-hybrid-ckb.XXXXXX", t && *t ? t : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
  snprintf(tmp_ckb, sizeof tmp_ckb, "%s/ckb", tmp_dir);
  char cmd[16384];
  snprintf(cmd, sizeof cmd, "cp -r '%s/ckb' '%s' && cp '%s'/candidates/hybrid-deltanet/operators/*.json '%s/operators/'",
           src, tmp_ckb, src, tmp_ckb);
  sh(cmd);

  char path[8192];
  snprintf(path, sizeof path, "%s/candidates/hybrid-deltanet/bundle.json", src);
  json_t *bundle = json_load_file(path, 0, NULL);
  ck_assert_msg(bundle != NULL, "cannot read %s", path);
  json_t *ops = json_object_get(bundle, "operators");
  ck_assert_int_eq(json_array_size(ops), 7);
  snprintf(path, sizeof path, "%s/platforms/cpu.json", tmp_ckb);
  json_t *plat = json_load_file(path, 0, NULL);
  ck_assert_ptr_nonnull(plat);
  json_t *kernels = json_object_get(plat, "kernels");
  size_t i;
  json_t *op;
  only[0] = 0;
  json_array_foreach(ops, i, op) {
    /* listed once: ckb/ may hold them already (what evolution consolidated) */
    size_t k;
    json_t *have;
    int listed = 0;
    json_array_foreach(kernels, k, have) listed |= json_equal(json_object_get(have, "operator"), op);
    if (!listed) json_array_append_new(kernels, json_pack("{s:O, s:[s]}", "operator", op, "dtypes", "f32"));
    size_t l = strlen(only);
    snprintf(only + l, sizeof only - l, "%s%s", l ? "," : "", json_string_value(op));
  }
  json_object_set_new(json_object_get(plat, "abi"), "minor", json_integer(4));
  ck_assert_int_eq(json_dump_file(plat, path, JSON_INDENT(2)), 0);
  json_decref(plat);
  json_decref(bundle);
}

static void remove_ckb(void) {
  if (!tmp_dir[0]) return;
  char cmd[8300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
}

/* ---------- references, by hand ---------- */


START_TEST(ref_gated_delta_rule_by_hand) {
  /* Dk = Dv = 1, one key head shared by two value heads. Head 0: S0 = 2,
   * g = log(1/2), beta = 1/2, k = 1, v = 3, q = 1: S = 1 after the decay,
   * delta = (3 - 1)/2 = 1, S = 2, o = 2. Head 1 (reads key head 0 too, as
   * 1 / (2/1) = 0): S0 = 0, g = 0, beta = 1, v = -1: delta = -1, o = -1. */
  double q[1] = {1}, k[1] = {1}, v[2] = {3, -1}, g[2] = {log(0.5), 0}, beta[2] = {0.5, 1};
  double st[2] = {2, 0}, o[2];
  vf_arg a[] = {buf_arg("o", VF_OUT, o, 2),        buf_arg("q", VF_IN, q, 1),
                buf_arg("k", VF_IN, k, 1),         buf_arg("v", VF_IN, v, 2),
                buf_arg("g", VF_IN, g, 2),         buf_arg("beta", VF_IN, beta, 2),
                buf_arg("state", VF_INOUT, st, 2), int_arg("T", 1),
                int_arg("Hk", 1),                  int_arg("Hv", 2),
                int_arg("Dk", 1),                  int_arg("Dv", 1)};
  vf_call c = {a, 12, NULL};
  char err[200];
  ck_assert_int_eq(vf_ref_find("gated_delta_rule")(&c, err, sizeof err), 0);
  ck_assert_double_eq_tol(o[0], 2, 1e-15);
  ck_assert_double_eq_tol(st[0], 2, 1e-15);
  ck_assert_double_eq_tol(o[1], -1, 1e-15);
  ck_assert_double_eq_tol(st[1], -1, 1e-15);
  a[8].i = 3; /* Hv = 2 is not a multiple of Hk = 3: an error, not a crash */
  ck_assert_int_eq(vf_ref_find("gated_delta_rule")(&c, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "multiple"));
}
END_TEST

START_TEST(ref_conv_gates_norms_by_hand) {
  char err[200];
  /* conv: K = 2, C = 1, state {5}, x {1, 2}, w {10, 1} (w[c,0] is the oldest
   * tap): y = {10*5 + 1, 10*1 + 2}, state = {2}; silu of 0 is 0. */
  double x[2] = {1, 2}, w[2] = {10, 1}, st[1] = {5}, y[2];
  vf_arg a[] = {buf_arg("y", VF_OUT, y, 2),      buf_arg("x", VF_IN, x, 2),
                buf_arg("w", VF_IN, w, 2),       buf_arg("state", VF_INOUT, st, 1),
                int_arg("T", 2),                 int_arg("C", 1),
                int_arg("K", 2),                 int_arg("silu", 0)};
  vf_call c = {a, 8, NULL};
  ck_assert_int_eq(vf_ref_find("conv1d_causal")(&c, err, sizeof err), 0);
  ck_assert_double_eq_tol(y[0], 51, 1e-15);
  ck_assert_double_eq_tol(y[1], 12, 1e-15);
  ck_assert_double_eq_tol(st[0], 2, 1e-15);
  /* gates: b = 0 -> beta 1/2; a + dt_bias = 0, a_log = 0 -> g = -log 2 */
  double b0[1] = {0}, a0[1] = {-1}, al[1] = {0}, dt[1] = {1}, be[1], g[1];
  vf_arg ga[] = {buf_arg("beta", VF_OUT, be, 1), buf_arg("g", VF_OUT, g, 1),
                 buf_arg("b", VF_IN, b0, 1),     buf_arg("a", VF_IN, a0, 1),
                 buf_arg("a_log", VF_IN, al, 1), buf_arg("dt_bias", VF_IN, dt, 1),
                 int_arg("T", 1),                int_arg("H", 1)};
  vf_call gc = {ga, 8, NULL};
  ck_assert_int_eq(vf_ref_find("deltanet_gates")(&gc, err, sizeof err), 0);
  ck_assert_double_eq_tol(be[0], 0.5, 1e-15);
  ck_assert_double_eq_tol(g[0], -log(2.0), 1e-15);
  /* l2norm of (3, 4) with eps 0: (0.6, 0.8) */
  double lx[2] = {3, 4}, ly[2];
  vf_arg la[] = {buf_arg("y", VF_OUT, ly, 2), buf_arg("x", VF_IN, lx, 2), int_arg("rows", 1),
                 int_arg("dim", 2), {.name = "eps", .kind = VF_F32, .f = 0}};
  vf_call lc = {la, 5, NULL};
  ck_assert_int_eq(vf_ref_find("l2norm")(&lc, err, sizeof err), 0);
  ck_assert_double_eq_tol(ly[0], 0.6, 1e-15);
  ck_assert_double_eq_tol(ly[1], 0.8, 1e-15);
}
END_TEST

static void verify(run *r, const char *plugin, const char *extra) {
  char report[4200], cmd[16384];
  snprintf(report, sizeof report, "%s/report-%d.json", tmp_dir, (int)getpid());
  snprintf(cmd, sizeof cmd, "'%s' --ckb '%s' --platform-plugin '%s' --report '%s' --stage 1 --only '%s' -o threads=2 %s 2>&1",
           bin, tmp_ckb, plugin, report, only, extra);
  vt_run(r, cmd, report);
}

static json_t *units_of(json_t *report) {
  return json_object_get(json_array_get(json_object_get(report, "stages"), 0), "units");
}

START_TEST(cpu_plugin_passes_the_bundle) {
  run r;
  verify(&r, cpu_so, ""); /* a fresh random seed every run */
  ck_assert_msg(r.exited && r.code == 0, "exit %d:\n%s", r.code, r.out);
  json_t *units = units_of(r.report);
  ck_assert_int_ge(vt_all_units_pass(r.report, units, 4), 35);
  ck_assert_int_eq(json_array_size(units), 7);
  printf("cpu plugin, the hybrid bundle at stage 1:\n%s", r.out);
  json_decref(r.report);
}
END_TEST

/* A mutant fails exactly its planted unit, with `symptom` in the message,
 * and passes the bundle's other units. */
static void mutant(const char *name, const char *bad_unit, const char *symptom) {
  char so[4600];
  snprintf(so, sizeof so, "%s/libmutant-%s.so", mutants, name);
  run r;
  verify(&r, so, "--platform cpu --seed 7");
  ck_assert_msg(r.exited, "mi-verify itself died:\n%s", r.out);
  ck_assert_msg(r.code == 1, "mutant %s: exit %d (want 1):\n%s", name, r.code, r.out);
  ck_assert_ptr_nonnull(r.report);
  ck_assert_str_eq(json_string_value(json_object_get(r.report, "verdict")), "FAIL");
  size_t i;
  json_t *u;
  int seen = 0;
  json_array_foreach(units_of(r.report), i, u) {
    const char *id = json_string_value(json_object_get(u, "id"));
    const char *v = json_string_value(json_object_get(u, "verdict"));
    if (strcmp(id, bad_unit)) {
      ck_assert_msg(!strcmp(v, "PASS"), "mutant %s: untouched %s should pass: %s", name, id,
                    json_string_value(json_object_get(u, "message")));
      continue;
    }
    seen = 1;
    const char *msg = json_string_value(json_object_get(u, "message"));
    ck_assert_str_eq(v, "FAIL");
    ck_assert_msg(msg && strstr(msg, symptom), "mutant %s: message lacks '%s': %s", name, symptom, msg);
    printf("mutant %-16s -> FAIL %s\n", name, msg);
  }
  ck_assert_msg(seen, "mutant %s: no unit %s in the report", name, bad_unit);
  json_decref(r.report);
}

/* The mutants, each with the unit it breaks and the symptom it must show. */
static const struct {
  const char *name, *bad_unit, *symptom;
} k_mutants[] = {
    /* "no beta": the gate stage writes beta = 1 / the rule ignores beta */
    {"gates_nobeta", "operator.deltanet_gates", "deltanet_gates: max rel error"},
    {"gdr_nobeta", "operator.gated_delta_rule", "gated_delta_rule: max rel error"},
    /* "value-head order not converted": h % Hk instead of h / (Hv/Hk); the
     * first case to fail is the grouped decode case (Hk = 2, Hv = 4) */
    {"gdr_head_order", "operator.gated_delta_rule", "case decode_grouped"},
    /* "state not carried": the incoming recurrent / conv state ignored */
    {"gdr_nostate", "operator.gated_delta_rule", "gated_delta_rule: max rel error"},
    {"conv_nostate", "operator.conv1d_causal", "conv1d_causal: max rel error"},
};

START_TEST(mutant_fails_its_unit) {
  mutant(k_mutants[_i].name, k_mutants[_i].bad_unit, k_mutants[_i].symptom);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("verify_hybrid");
  TCase *t = mi_check_case(s, "bundle", 300, NULL, NULL);
  tcase_add_unchecked_fixture(t, make_ckb, remove_ckb);
  mi_check_add(t, MI_CHECK_TESTS(ref_gated_delta_rule_by_hand, ref_conv_gates_norms_by_hand,
                                 cpu_plugin_passes_the_bundle));
  tcase_add_loop_test(t, mutant_fails_its_unit, 0, (int)(sizeof k_mutants / sizeof k_mutants[0]));
  return s;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mi_check_run(suite());
}
