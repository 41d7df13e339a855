/* mi-verify stage 1 on kernel packs (--pack, mi/kernel_pack.h): a
 * hand-written pack of two existing operators (packs/fixture_pack.c)
 * passes on the CPU platform, each planted defect fails exactly its
 * operator with the symptom named, a kernel of another contract version,
 * a platform without run_host and a pack from before ABI 1.6 are refused
 * with their reasons, a bad manifest stops the run with one line; and the
 * "map" reference, the float64 definition of the CKB's expression
 * operators, against values computed here by other means. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runtime/loader.h"
#include "core/verify/verify.h"
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"
#include "tests/verify/verify_test.h"

static char bin[4096], cpu_so[4096], packs[4096], ckb[4096], build[4096];

static void setup(void) {
  const char *b, *s;
  vt_env(&b, &s, bin, cpu_so);
  snprintf(packs, sizeof packs, "%s/tests/packs", b);
  snprintf(ckb, sizeof ckb, "%s/ckb", s);
  snprintf(build, sizeof build, "%s", b);
}

/* The fixture pack `name`'s library. */
static void pack_so(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s/libmi-pack-%s.so", packs, name, name);
}

/* mi-verify --stage 1 of platform (NULL: the CPU plugin) with the pack at
 * path, seed 5, extra arguments appended. */
static void verify_pack(run *r, const char *platform, const char *path, const char *extra) {
  char report[256], cmd[16384];
  snprintf(report, sizeof report, "/tmp/mi-pack-test-%d.json", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' --ckb '%s' --platform-plugin '%s' --platform cpu --pack '%s' --seed 5 --report "
           "'%s' -o threads=3 %s "
           "2>&1",
           bin, ckb, platform ? platform : cpu_so, path, report, extra);
  vt_run(r, cmd, report);
}

static json_t *stage1(const run *r) {
  return json_array_get(json_object_get(r->report, "stages"), 0);
}

static json_t *unit(const run *r, const char *id) {
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(stage1(r), "units"), i, u) {
    if (!strcmp(json_string_value(json_object_get(u, "id")), id)) return u;
  }
  return NULL;
}

static const char *str(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* The version of operator contract `file` (ckb/operators/FILE.json). */
static char *contract_version(const char *file) {
  char p[4400];
  snprintf(p, sizeof p, "%s/operators/%s.json", ckb, file);
  json_t *j = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(j);
  char *v = strdup(str(j, "version"));
  json_decref(j);
  return v;
}

START_TEST(good_pack_passes) {
  char so[4400];
  pack_so(so, sizeof so, "good");
  run r;
  verify_pack(&r, NULL, so, "");
  ck_assert_msg(r.exited && r.code == 0, "exit %d:\n%s", r.code, r.out);
  json_t *s1 = stage1(&r), *units = json_object_get(s1, "units");
  ck_assert_int_eq(json_array_size(units), 2); /* the manifest's kernels, not the platform's */
  ck_assert_int_ge(vt_all_units_pass(r.report, units, 5), 10);
  ck_assert_str_eq(str(s1, "pack"), "good");
  for (size_t i = 0; i < 2; i++) {
    json_t *u = json_array_get(units, i);
    ck_assert_str_eq(str(u, "kind"), "operator");
    ck_assert_str_eq(str(u, "pack"), "good");
    /* f32 kernels against the float64 references within the contracts' tolerances */
    ck_assert_double_le(json_number_value(json_object_get(u, "max_rel_err")), 1e-5);
  }
  ck_assert_ptr_nonnull(unit(&r, "operator.add"));
  ck_assert_ptr_nonnull(unit(&r, "operator.silu_mul"));
  /* the pack as its probe child found it, beside its manifest */
  json_t *pk = json_object_get(r.report, "pack");
  ck_assert_str_eq(str(pk, "verdict"), "PASS");
  ck_assert_str_eq(str(pk, "name"), "pack-good");
  ck_assert_str_eq(str(pk, "kind"), "kernels");
  ck_assert_str_eq(str(pk, "target"), "host-c");
  ck_assert_int_eq(json_array_size(json_object_get(pk, "kernels")), 2);
  ck_assert_str_eq(str(json_object_get(pk, "manifest"), "name"), "good");
  printf("good pack, stage 1:\n%s", r.out);
  json_decref(r.report);
  /* --only selects among the pack's kernels */
  verify_pack(&r, NULL, so, "--only operator.silu_mul");
  ck_assert_msg(r.code == 0, "exit %d:\n%s", r.code, r.out);
  ck_assert_int_eq(json_array_size(json_object_get(stage1(&r), "units")), 1);
  ck_assert_ptr_nonnull(unit(&r, "operator.silu_mul"));
  json_decref(r.report);
}
END_TEST

/* Pack `name` fails exactly bad_id with status and symptom (and the
 * operator) in its message; the other kernel passes. */
static void one_bad(const char *platform, const char *name, const char *bad_id, const char *status,
                    const char *symptom, const char *symptom2) {
  char so[4400];
  pack_so(so, sizeof so, name);
  run r;
  verify_pack(&r, platform, so, "");
  ck_assert_msg(r.exited && r.code == 1, "pack %s: exit %d (want 1):\n%s", name, r.code, r.out);
  ck_assert_str_eq(str(r.report, "verdict"), "FAIL");
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(stage1(&r), "units"), i, u) {
    const char *id = str(u, "id"), *msg = str(u, "message");
    if (bad_id && strcmp(id, bad_id)) {
      ck_assert_msg(!strcmp(str(u, "verdict"), "PASS"), "pack %s: untouched %s should pass: %s",
                    name, id, msg);
      continue;
    }
    ck_assert_str_eq(str(u, "verdict"), "FAIL");
    ck_assert_msg(!strcmp(str(u, "status"), status), "pack %s: %s is %s, want %s: %s", name, id,
                  str(u, "status"), status, msg);
    ck_assert_msg(msg && strstr(msg, id), "pack %s: the message does not name %s: %s", name, id,
                  msg);
    ck_assert_msg(strstr(msg, symptom), "pack %s: message lacks '%s': %s", name, symptom, msg);
    ck_assert_msg(!symptom2 || strstr(msg, symptom2), "pack %s: message lacks '%s': %s", name,
                  symptom2, msg);
    printf("pack %-12s %-18s -> %s %s\n", name, id, status, msg);
  }
  ck_assert_int_eq(json_array_size(json_object_get(stage1(&r), "units")), 2);
  if (bad_id) ck_assert_ptr_nonnull(unit(&r, bad_id));
  json_decref(r.report);
}

START_TEST(pack_off_by_one) {
  /* the last element never written: the poison the harness put there shows */
  one_bad(NULL, "add_short", "operator.add", "FAIL", "NaN/Inf values in 'y'", NULL);
}
END_TEST

START_TEST(pack_wrong_formula) {
  one_bad(NULL, "silu_wrong", "operator.silu_mul", "FAIL", "max rel error", NULL);
}
END_TEST

START_TEST(pack_crash) {
  /* "crashed (SIGSEGV)", or under a sanitizer that catches the fault itself,
   * "crashed (child exited with 1 ...)": a crash of that unit either way */
  one_bad(NULL, "add_crash", "operator.add", "CRASH", ": crashed (", "n=1");
}
END_TEST

START_TEST(pack_other_version) {
  char *want = contract_version("silu_mul");
  one_bad(NULL, "silu_version", "operator.silu_mul", "ERROR", "version 0.9.0", want);
  free(want);
}
END_TEST

/* The CPU plugin without run_host: the pack's bind refuses it, every unit
 * an ERROR with the pack's reason. */
START_TEST(pack_refuses_platform_without_run_host) {
  char plat[4400];
  snprintf(plat, sizeof plat, "%s/libplatform-norunhost.so", packs);
  one_bad(plat, "good", NULL, "ERROR", "refuses the platform", "no run_host");
}
END_TEST

/* A kind-5 plugin declaring ABI 1.5: the loader refuses it, with why. */
START_TEST(pack_before_abi_1_6_refused) {
  char so[4400];
  pack_so(so, sizeof so, "abi15");
  mi_plugin *p = mi_plugin_load_file(so, NULL);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(p->status, MI_PLUGIN_REJECTED);
  ck_assert_msg(p->reason && strstr(p->reason, "ABI 1.5") &&
                    strstr(p->reason, "packs exist from ABI 1.6"),
                "reason: %s", p->reason ? p->reason : "(none)");
  mi_plugin_unload(p);
  run r;
  verify_pack(&r, NULL, so, "");
  ck_assert_msg(r.exited && r.code == 1, "exit %d:\n%s", r.code, r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "packs exist from ABI 1.6"));
  ck_assert_str_eq(str(json_object_get(r.report, "pack"), "verdict"), "FAIL");
  ck_assert_int_eq(json_array_size(json_object_get(r.report, "stages")), 0); /* no unit ran */
  json_decref(r.report);
}
END_TEST

/* A folder holding the good pack's library (a link) and `manifest` as its
 * pack.json (NULL: none); the library's path into so. */
static void pack_dir(char *so, size_t n, const char *manifest) {
  char dir[256], good[4400], mp[600];
  snprintf(dir, sizeof dir, "/tmp/mi-pack-test-%d", (int)getpid());
  mkdir(dir, 0700);
  snprintf(so, n, "%s/libmi-pack-good.so", dir);
  snprintf(mp, sizeof mp, "%s/pack.json", dir);
  unlink(so);
  unlink(mp);
  pack_so(good, sizeof good, "good");
  ck_assert_int_eq(symlink(good, so), 0);
  if (!manifest) return;
  FILE *f = fopen(mp, "w");
  ck_assert_ptr_nonnull(f);
  fputs(manifest, f);
  fclose(f);
}

static void pack_dir_rm(const char *so) {
  char mp[4400];
  snprintf(mp, sizeof mp, "%s", so);
  *strrchr(mp, '/') = 0;
  char dir[4400];
  snprintf(dir, sizeof dir, "%s", mp);
  strcat(mp, "/pack.json");
  unlink(mp);
  unlink(so);
  rmdir(dir);
}

/* A manifest mi-verify cannot use: exit 2, one line naming the file and
 * `why`, no unit run. */
static void bad_manifest(const char *manifest, const char *why) {
  char so[4400];
  pack_dir(so, sizeof so, manifest);
  run r;
  verify_pack(&r, NULL, so, "");
  ck_assert_msg(r.exited && r.code == 2, "exit %d (want 2):\n%s", r.code, r.out);
  ck_assert_msg(strstr(r.out, "/pack.json") && strstr(r.out, why),
                "want a line naming pack.json and '%s':\n%s", why, r.out);
  ck_assert_ptr_null(r.report);
  pack_dir_rm(so);
}

START_TEST(manifest_missing_or_garbled) {
  bad_manifest(NULL, "cannot open");
  bad_manifest("{\"name\": \"good\", \"kernels\": [", "invalid JSON");
  bad_manifest("{\"name\": \"good\", \"kernels\": []}", "no non-empty \"kernels\" array");
  bad_manifest("{\"name\": \"good\", \"kernels\": [{\"operator\": \"operator.add\"}]}",
               "kernels[0] has no \"operator\" and \"version\"");
  bad_manifest(
      "{\"name\": \"good\", \"library\": \"libmi-pack-other.so\", \"kernels\": [{\"operator\": "
      "\"operator.add\", \"version\": \"1\"}]}",
      "describes the library 'libmi-pack-other.so'");
}
END_TEST

/* A manifest that does not describe the library beside it: refused before
 * any unit, one line naming the difference (another contract version of a
 * kernel, a kernel the library holds and the manifest leaves out, one the
 * manifest lists and the library lacks). */
static void manifest_lies(const char *manifest, const char *why) {
  char so[4400];
  pack_dir(so, sizeof so, manifest);
  run r;
  verify_pack(&r, NULL, so, "");
  ck_assert_msg(r.exited && r.code == 1, "exit %d (want 1):\n%s", r.code, r.out);
  ck_assert_msg(strstr(r.out, "the manifest beside it does not describe it") && strstr(r.out, why),
                "want '%s':\n%s", why, r.out);
  ck_assert_int_eq(json_array_size(json_object_get(r.report, "stages")), 0); /* no unit ran */
  json_decref(r.report);
  pack_dir_rm(so);
}

START_TEST(manifest_must_describe_the_library) {
  char m[700], *add = contract_version("add"), *silu = contract_version("silu_mul"), want[300];
  snprintf(m, sizeof m,
           "{\"name\": \"good\", \"kernels\": [{\"operator\": \"operator.add\", \"version\": \"%s\"}, "
           "{\"operator\": \"operator.silu_mul\", \"version\": \"0.1.0\"}]}", add);
  snprintf(want, sizeof want, "operator.silu_mul was generated from version 0.1.0 of its contract, the library's kernel from %s",
           silu);
  manifest_lies(m, want);
  snprintf(m, sizeof m, "{\"name\": \"good\", \"kernels\": [{\"operator\": \"operator.add\", \"version\": \"%s\"}]}", add);
  manifest_lies(m, "the library holds a kernel for operator.silu_mul, which pack.json does not list");
  snprintf(m, sizeof m,
           "{\"name\": \"good\", \"kernels\": [{\"operator\": \"operator.add\", \"version\": \"%s\"}, "
           "{\"operator\": \"operator.silu_mul\", \"version\": \"%s\"}, {\"operator\": \"operator.scale\", "
           "\"version\": \"1.0.0\"}]}", add, silu);
  manifest_lies(m, "pack.json lists operator.scale, which the library holds no kernel for");
  free(add);
  free(silu);
}
END_TEST

/* A pack given where the platform plugin goes: said so, not a crash. */
START_TEST(pack_as_platform_plugin) {
  char so[4400], report[256], cmd[16384];
  pack_so(so, sizeof so, "good");
  snprintf(report, sizeof report, "/tmp/mi-pack-test-%d.json", (int)getpid());
  snprintf(cmd, sizeof cmd, "'%s' --ckb '%s' --platform-plugin '%s' --report '%s' 2>&1", bin, ckb,
           so, report);
  run r;
  vt_run(&r, cmd, report);
  ck_assert_msg(r.exited && r.code == 1, "exit %d:\n%s", r.code, r.out);
  ck_assert_msg(strstr(r.out, "a kernel pack, not a platform plugin"), "%s", r.out);
  json_decref(r.report);
}
END_TEST

/* A plugins.conf may name a pack (kind "kernels"), and the plugin listing
 * shows it loaded, with that kind. */
START_TEST(listing_shows_kernels_kind) {
  char cmd[16384], so[4400], conf[256];
  pack_so(so, sizeof so, "good");
  snprintf(conf, sizeof conf, "/tmp/mi-pack-test-%d.conf", (int)getpid());
  FILE *f = fopen(conf, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "kernels  pack-good  %s  required\n", so);
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-run' --plugins-conf '%s' --list-plugins 2>&1", build, conf);
  run r;
  vt_run(&r, cmd, "/dev/null/none");
  unlink(conf);
  ck_assert_msg(r.exited && r.code == 0, "exit %d:\n%s", r.code, r.out);
  char *line = strstr(r.out, "pack-good");
  ck_assert_msg(line, "no pack-good in the listing:\n%s", r.out);
  while (line > r.out && line[-1] != '\n')
    line--;
  char *eol = strchr(line, '\n');
  if (eol) *eol = 0;
  ck_assert_msg(!strncmp(line, "kernels ", 8) && strstr(line, " loaded "), "the pack's line: %s",
                line);
}
END_TEST

/* ---------- the "map" reference ---------- */

static json_t *operator_contract(const char *file) {
  char p[4400];
  snprintf(p, sizeof p, "%s/operators/%s.json", ckb, file);
  json_t *j = json_load_file(p, 0, NULL);
  ck_assert_msg(j != NULL, "%s", p);
  return j;
}

/* operator.bias_add, y[rows, n] = x + b over rows: each element by hand */
START_TEST(map_bias_add) {
  json_t *op = operator_contract("bias_add");
  enum { R = 3, N = 5 };
  double x[R * N], b[N], y[R * N];
  for (int i = 0; i < R * N; i++)
    x[i] = 0.25 * i - 1, y[i] = NAN;
  for (int i = 0; i < N; i++)
    b[i] = 1e3 * (i + 1);
  vf_arg a[] = {buf_arg("y", VF_OUT, y, R * N), buf_arg("x", VF_IN, x, R * N),
                buf_arg("b", VF_IN, b, N), int_arg("rows", R), int_arg("n", N)};
  vf_call c = {a, 5, op};
  char err[300];
  ck_assert_msg(vf_ref_find("map")(&c, err, sizeof err) == 0, "%s", err);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++)
      ck_assert_double_eq(y[r * N + i], (0.25 * (r * N + i) - 1) + 1e3 * (i + 1));
  /* in place (y == x), as the contract allows */
  a[0].val = x;
  ck_assert_int_eq(vf_ref_find("map")(&c, err, sizeof err), 0);
  for (int k = 0; k < R * N; k++)
    ck_assert_double_eq(x[k], y[k]);
  /* a bias shorter than a row: a contract error naming it, nothing read past it */
  a[0].val = y;
  a[2].n = N - 1;
  ck_assert_int_eq(vf_ref_find("map")(&c, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'b'") && strstr(err, "per column"), "%s", err);
  /* without the contract the reference cannot know the expression */
  a[2].n = N;
  c.op = NULL;
  ck_assert_int_eq(vf_ref_find("map")(&c, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "operator contract"));
  json_decref(op);
}
END_TEST

/* operator.softcap, y = cap * tanh(x / cap): tanh from exp here, and the
 * limits it must reach */
START_TEST(map_softcap) {
  json_t *op = operator_contract("softcap");
  double x[6] = {0, 1e-3, -7.5, 30, 1e30, -1e30}, y[6];
  const double cap = 30;
  vf_arg a[] = {buf_arg("y", VF_OUT, y, 6), buf_arg("x", VF_IN, x, 6), flt_arg("cap", cap),
                int_arg("n", 6)};
  vf_call c = {a, 4, op};
  char err[300];
  ck_assert_msg(vf_ref_find("map")(&c, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < 4; i++) {
    double t = x[i] / cap, want = cap * (1 - 2 / (exp(2 * t) + 1)); /* tanh t = 1 - 2/(e^2t + 1) */
    ck_assert_double_eq_tol(y[i], want, 1e-14 * cap);
  }
  ck_assert_double_eq(y[4], cap);
  ck_assert_double_eq(y[5], -cap);
  ck_assert_double_eq_tol(y[1], 1e-3, 1e-12); /* |x| << cap: y ~ x */
  json_decref(op);
}
END_TEST

/* A per-row input and an integer scalar, on a contract made here. */
START_TEST(map_row_and_scalar) {
  json_t *op = json_loads(
      "{\"id\": \"operator.test_row\", \"map\": {\"out\": \"y\", \"expr\": \"x * r + k\"}, "
      "\"signature\": {\"args\": ["
      "{\"name\": \"y\", \"kind\": \"out\", \"dtype\": \"f32\", \"shape\": [\"rows\", \"n\"]},"
      "{\"name\": \"x\", \"kind\": \"in\", \"dtype\": \"f32\", \"shape\": [\"rows\", \"n\"]},"
      "{\"name\": \"r\", \"kind\": \"in\", \"dtype\": \"f32\", \"shape\": [\"rows\"]},"
      "{\"name\": \"k\", \"kind\": \"i64\"}, {\"name\": \"rows\", \"kind\": \"i64\"}, {\"name\": "
      "\"n\", \"kind\": \"i64\"}]}}",
      0, NULL);
  ck_assert_ptr_nonnull(op);
  double x[2 * 3] = {1, 2, 3, 4, 5, 6}, r[2] = {10, -1}, y[6];
  vf_arg a[] = {buf_arg("y", VF_OUT, y, 6), buf_arg("x", VF_IN, x, 6),
                buf_arg("r", VF_IN, r, 2),  int_arg("k", 7),
                int_arg("rows", 2),         int_arg("n", 3)};
  vf_call c = {a, 6, op};
  char err[300];
  ck_assert_msg(vf_ref_find("map")(&c, err, sizeof err) == 0, "%s", err);
  const double want[6] = {17, 27, 37, 3, 2, 1};
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(y[i], want[i]);
  /* a contract whose expression reads no argument: its line, not a crash */
  json_object_set_new(json_object_get(op, "map"), "expr", json_string("x * q"));
  ck_assert_int_eq(vf_ref_find("map")(&c, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "operator.test_row") && strstr(err, "'q'"), "%s", err);
  json_decref(op);
}
END_TEST

/* The runtime (mi-run, every session) binds each loaded pack to the
 * platform before a model sees it: a pack whose kernel table claims a
 * million kernels is left out with one warning naming it, the run goes on
 * (a model needing one of its kernels would then refuse to load, naming
 * the operator); a good pack is bound silently. */
START_TEST(runtime_leaves_out_a_lying_pack) {
  char tmp[] = "/tmp/mi-pack-rt-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  char args[512], lying[4200], good[4200];
  snprintf(args, sizeof args, "--shape tiny --seed 1 --out '%s/m'", tmp);
  ck_assert_int_eq(mi_test_mkmodel(tmp, args), 0);
  pack_so(lying, sizeof lying, "lying_count");
  pack_so(good, sizeof good, "good");
  const char *which[] = {lying, good};
  const char *names[] = {"pack-lying_count", "pack-good"};
  for (int k = 0; k < 2; k++) {
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/plugins.conf", tmp);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "platform cpu %s required\nmodel qwen3 %s/lib/metainfer/libmi-qwen3.so required\nkernels %s %s required\n",
            cpu_so, build, names[k], which[k]);
    fclose(f);
    int rc = mi_test_sh("'%s/bin/mi-run' --plugins-conf '%s' -m '%s/m' -p hi -n 2 --temp 0 >/dev/null 2>'%s/err.txt'",
                        build, conf, tmp, tmp);
    char ep[4300];
    snprintf(ep, sizeof ep, "%s/err.txt", tmp);
    FILE *e = fopen(ep, "r");
    char text[4096] = "";
    size_t n = e ? fread(text, 1, sizeof text - 1, e) : 0;
    text[n] = 0;
    if (e) fclose(e);
    ck_assert_msg(rc == 0, "%s: mi-run exit %d: %s", names[k], rc, text);
    if (k == 0)
      ck_assert_msg(strstr(text, "warning") && strstr(text, "pack-lying_count") && strstr(text, "at most 4096"),
                    "no warning naming the lying pack: %s", text);
    else
      ck_assert_msg(!strstr(text, "warning"), "the good pack warned: %s", text);
  }
  /* mi-verify refuses it in one line before any unit runs */
  ck_assert_int_ne(mi_test_sh("'%s' --ckb '%s' --platform-plugin '%s' --pack '%s' --seed 5 >/dev/null 2>'%s/v.txt'", bin,
                              ckb, cpu_so, lying, tmp),
                   0);
  ck_assert_int_eq(mi_test_sh("grep -q 'a kernel table that does not match its count (1048576; at most 4096)' '%s/v.txt'", tmp),
                   0);
  mi_test_sh("rm -rf '%s'", tmp);
}
END_TEST

/* The CKB's rotary operators (operator.rope_llama3, operator.rope_linear,
 * operator.rope_yarn with its amplitude) generated by mi-ckb pack and held to their float64 reference at stage 1,
 * on seeds and on the CPU platform as every variant runs it. */
START_TEST(generated_rotary_pack_passes) {
  char tmp[] = "/tmp/mi-pack-rot-XXXXXX", so[4300];
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  ck_assert_int_eq(mi_test_sh("'%s/bin/mi-ckb' pack '%s/p' --ops operator.rope_llama3,operator.rope_linear,operator.rope_yarn --name rot --ckb '%s' >/dev/null "
                              "2>'%s/err.txt'",
                              build, tmp, ckb, tmp),
                   0);
  snprintf(so, sizeof so, "%s/p/libmi-pack-rot.so", tmp);
  run r;
  verify_pack(&r, NULL, so, "");
  ck_assert_msg(r.exited && r.code == 0, "exit %d:\n%s", r.code, r.out);
  const char *const rot_ops[] = {"operator.rope_llama3", "operator.rope_linear", "operator.rope_yarn"};
  for (int k = 0; k < 3; k++) {
    json_t *u = unit(&r, rot_ops[k]);
    ck_assert_ptr_nonnull(u);
    ck_assert_str_eq(str(u, "verdict"), "PASS");
    ck_assert_int_ge(json_array_size(json_object_get(u, "cases")), 5);
    ck_assert_double_le(json_number_value(json_object_get(u, "max_rel_err")), 1e-5);
  }
  json_decref(r.report);
  mi_test_sh("rm -rf '%s'", tmp);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pack_stage1");
  mi_check_add(mi_check_case(s, "map_reference", 30, setup, NULL),
               MI_CHECK_TESTS(map_bias_add, map_softcap, map_row_and_scalar));
  mi_check_add(mi_check_case(s, "stage1_pack", 120, setup, NULL),
               MI_CHECK_TESTS(good_pack_passes, pack_off_by_one, pack_wrong_formula, pack_crash,
                              pack_other_version, pack_refuses_platform_without_run_host,
                              pack_before_abi_1_6_refused, manifest_missing_or_garbled,
                              manifest_must_describe_the_library, pack_as_platform_plugin,
                              listing_shows_kernels_kind, runtime_leaves_out_a_lying_pack,
                              generated_rotary_pack_passes));
  return mi_check_run(s);
}
