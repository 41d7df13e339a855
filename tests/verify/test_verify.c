/* mi-verify stage 1: the float64 references against hand-computed values,
 * the verifier's tables against the CKB schema, the real CPU plugin
 * passing, and mutant plugins (one planted defect each) being rejected with
 * the symptom named, while every kernel they did not touch still passes. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/runtime/rng.h"
#include "core/verify/quant_input.h"
#include "core/verify/verify.h"
#include "mi/quant.h"
#include "tests/util/check_main.h"
#include "tests/verify/verify_test.h"

static char bin[4096], cpu_so[4096], mutants[4096], ckb[4096];

static void setup(void) {
  const char *b, *s;
  vt_env(&b, &s, bin, cpu_so);
  snprintf(mutants, sizeof mutants, "%s/tests/mutants", b);
  snprintf(ckb, sizeof ckb, "%s/ckb", s);
}

/* ---------- references, by hand ---------- */

/* Stage 1's block-type inputs (core/verify/quant_input.c): blocks
 * quantized from normal values decode (by sdk/include/mi/quant.h, the
 * format's definition) to values near them, within what each format's
 * resolution allows (a misplaced nibble, scale or bit is off by far more);
 * "codes" blocks decode to finite values of the asked size whose codes
 * and scales take every value; absval is |value|, but for Q4_K at least it
 * (its two terms). */
START_TEST(quant_inputs_decode_to_their_values) {
  const mi_dtype ts[] = {MI_DTYPE_Q8_0, MI_DTYPE_Q4_0, MI_DTYPE_Q4_K, MI_DTYPE_Q6_K,
                         MI_DTYPE_Q5_K, MI_DTYPE_Q4_1, MI_DTYPE_Q5_0, MI_DTYPE_Q5_1,
                         MI_DTYPE_Q2_K, MI_DTYPE_Q3_K};
  /* RMS error / RMS value ceilings: 8-bit, 4-bit symmetric, 4-bit affine
   * over 32 values with 6-bit scales, 6-bit over 16 values, 5-bit affine
   * with 6-bit scales; 4-bit affine, 5-bit symmetric, 5-bit affine over
   * 32 values with f16 scales; 2-bit affine and 3-bit symmetric over 16
   * values with 4- and 6-bit scales */
  const double ceiling[] = {0.01, 0.15, 0.12, 0.04, 0.07, 0.12, 0.09, 0.07, 0.45, 0.28};
  enum { N = 4096, NT = sizeof ts / sizeof *ts };
  static double x[N], v[N], av[N];
  static unsigned char bytes[N * 2];
  for (int t = 0; t < NT; t++) {
    uint64_t rng = 99 + (uint64_t)t;
    for (int i = 0; i < N; i++) v[i] = x[i] = mi_rng_normal(&rng);
    ck_assert_int_eq(vf_quant_input(ts[t], N, 0, 1.0, &rng, bytes, v, av), 0);
    double e2 = 0, x2 = 0;
    for (int i = 0; i < N; i++) {
      const double want = mi_quant_value64(ts[t], bytes + (size_t)(i / mi_dtype_block(ts[t])) * mi_dtype_block_bytes(ts[t]),
                                           (int)(i % mi_dtype_block(ts[t])));
      ck_assert(v[i] == want);
      ck_assert(av[i] >= fabs(v[i]));
      e2 += (v[i] - x[i]) * (v[i] - x[i]);
      x2 += x[i] * x[i];
    }
    printf("quant input %s: rms error / rms value %.4f (ceiling %.2f)\n", mi_dtype_name(ts[t]), sqrt(e2 / x2), ceiling[t]);
    ck_assert_double_lt(sqrt(e2 / x2), ceiling[t]);
    /* codes: finite, of the asked size, Q4_K's sub-block scales and mins
     * over all of 0..63 (the packing's high bits included) */
    ck_assert_int_eq(vf_quant_input(ts[t], N, 1, 0.1, &rng, bytes, v, av), 0);
    double s2 = 0;
    for (int i = 0; i < N; i++) ck_assert(isfinite(v[i])), s2 += v[i] * v[i];
    ck_assert_double_gt(sqrt(s2 / N), 0.02);
    ck_assert_double_lt(sqrt(s2 / N), 0.5);
    if (ts[t] == MI_DTYPE_Q4_K) {
      int seen[64] = {0}, kinds = 0;
      for (int b = 0; b < N / 256; b++)
        for (int j = 0; j < 8; j++) {
          int sc, m;
          mi_q4_k_scale_min(bytes + 144 * b + 4, j, &sc, &m);
          seen[sc] = seen[m] = 1;
        }
      for (int k = 0; k < 64; k++) kinds += seen[k];
      ck_assert_int_ge(kinds, 60);
    }
  }
  uint64_t rng = 1;
  /* a hostile generator's values (NaN, infinities, the largest doubles):
   * blocks all the same, no out-of-range integer conversion (UBSan) */
  for (int t = 0; t < NT; t++) {
    for (int i = 0; i < 512; i++) v[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -1e300;
    ck_assert_int_eq(vf_quant_input(ts[t], 512, 0, 1.0, &rng, bytes, v, av), 0);
  }
  ck_assert_int_eq(vf_quant_input(MI_DTYPE_Q4_K, 100, 0, 1.0, &rng, bytes, v, av), -1); /* not whole blocks */
  ck_assert_int_eq(vf_quant_input(MI_DTYPE_F32, 32, 0, 1.0, &rng, bytes, v, av), -1);
}
END_TEST


START_TEST(ref_rmsnorm_by_hand) {
  double x[2] = {3, 4}, w[2] = {1, 2}, y[2];
  vf_arg a[] = {buf_arg("y", VF_OUT, y, 2), buf_arg("x", VF_IN, x, 2), buf_arg("w", VF_IN, w, 2),
                int_arg("rows", 1), int_arg("dim", 2), flt_arg("eps", 0), flt_arg("w_offset", 1)};
  vf_call c = {a, 7, NULL};
  char err[128];
  ck_assert_int_eq(vf_ref_find("rmsnorm")(&c, err, sizeof err), 0);
  double r = sqrt(12.5); /* mean of 9 and 16 */
  ck_assert_double_eq_tol(y[0], 3 / r * 2, 1e-15);
  ck_assert_double_eq_tol(y[1], 4 / r * 3, 1e-15);
}
END_TEST

START_TEST(ref_attention_by_hand) {
  /* Two keys with equal scores: the output is the mean of the values;
   * query 0 (causal) sees only key 0: its value. */
  double q[2 * 2] = {1, 0, 1, 0}, k[2 * 2] = {0, 1, 0, 1}, v[2 * 2] = {2, 4, 6, 8}, out[4];
  vf_arg a[] = {buf_arg("out", VF_OUT, out, 4), buf_arg("q", VF_IN, q, 4),
                buf_arg("k_cache", VF_IN, k, 4), buf_arg("v_cache", VF_IN, v, 4),
                int_arg("T", 2), int_arg("Hq", 1), int_arg("Hkv", 1), int_arg("D", 2),
                int_arg("pos0", 0), flt_arg("scale", 0.5)};
  vf_call c = {a, 10, NULL};
  char err[128];
  ck_assert_int_eq(vf_ref_find("attention")(&c, err, sizeof err), 0);
  ck_assert_double_eq_tol(out[0], 2, 1e-15);
  ck_assert_double_eq_tol(out[1], 4, 1e-15);
  ck_assert_double_eq_tol(out[2], 4, 1e-15);
  ck_assert_double_eq_tol(out[3], 6, 1e-15);
  /* Huge scores do not overflow the reference. */
  double q2[2] = {1000, 0}, k2[4] = {1000, 0, 999, 0}, v2[4] = {1, 0, 0, 1}, o2[2];
  vf_arg b[] = {buf_arg("out", VF_OUT, o2, 2), buf_arg("q", VF_IN, q2, 2),
                buf_arg("k_cache", VF_IN, k2, 4), buf_arg("v_cache", VF_IN, v2, 4),
                int_arg("T", 1), int_arg("Hq", 1), int_arg("Hkv", 1), int_arg("D", 2),
                int_arg("pos0", 1), flt_arg("scale", 1.0)};
  vf_call c2 = {b, 10, NULL};
  ck_assert_int_eq(vf_ref_find("attention")(&c2, err, sizeof err), 0);
  ck_assert(isfinite(o2[0]) && o2[0] > 0.999999);
}
END_TEST

START_TEST(ref_rope_by_hand) {
  /* rot_dim 2, theta irrelevant for i = 0: angle = pos. pos 0: identity. */
  double x[2 * 2] = {1, 0, 1, 0}, pos[2] = {0, M_PI / 2};
  vf_arg a[] = {buf_arg("x", VF_INOUT, x, 4), buf_arg("pos", VF_IN, pos, 2), int_arg("T", 2),
                int_arg("H", 1), int_arg("tok_stride", 2), int_arg("head_stride", 2),
                int_arg("rot_dim", 2), flt_arg("theta", 10000)};
  vf_call c = {a, 8, NULL};
  char err[128];
  ck_assert_int_eq(vf_ref_find("rope")(&c, err, sizeof err), 0);
  ck_assert_double_eq_tol(x[0], 1, 1e-15);
  ck_assert_double_eq_tol(x[1], 0, 1e-15);
  ck_assert_double_eq_tol(x[2], 0, 1e-12); /* (1, 0) turned by 90 degrees */
  ck_assert_double_eq_tol(x[3], 1, 1e-12);
}
END_TEST

START_TEST(ref_argmax_first_tie) {
  double x[6] = {1, 3, 3, -1, -1, -1}, out[2];
  vf_arg a[] = {buf_arg("out", VF_OUT, out, 2), buf_arg("x", VF_IN, x, 6), int_arg("rows", 2),
                int_arg("n", 3)};
  vf_call c = {a, 4, NULL};
  char err[128];
  ck_assert_int_eq(vf_ref_find("argmax")(&c, err, sizeof err), 0);
  ck_assert_double_eq(out[0], 1);
  ck_assert_double_eq(out[1], 0);
  /* A contract naming an argument the reference does not know: an error, not a crash. */
  a[2].name = "nrows";
  ck_assert_int_eq(vf_ref_find("argmax")(&c, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "'rows'"));
}
END_TEST

/* operator.convert's reference, on values whose rounding is known by hand:
 * ties to even, subnormals, overflow to inf, NaN, the sign of zero. */
START_TEST(ref_convert_by_hand) {
  static const struct {
    mi_dtype to;
    double x, want;
  } v[] = {
      {MI_DTYPE_F16, 1 + 0x1p-11, 1},                  /* tie: to the even 1 */
      {MI_DTYPE_F16, 1 + 3 * 0x1p-11, 1 + 0x1p-9},     /* tie: up to the even neighbour */
      {MI_DTYPE_F16, 1 + 0x1p-11 + 0x1p-20, 1 + 0x1p-10}, /* past the tie: up (truncation: 1) */
      {MI_DTYPE_F16, 2049, 2048},
      {MI_DTYPE_F16, 65519, 65504},
      {MI_DTYPE_F16, 65520, INFINITY},                 /* the tie above the largest: inf */
      {MI_DTYPE_F16, -1e6, -INFINITY},
      {MI_DTYPE_F16, 3 * 0x1p-25, 0x1p-23},            /* subnormal tie: 1.5 units -> 2 */
      {MI_DTYPE_F16, 0x1p-25, 0},                      /* half the smallest subnormal: 0 */
      {MI_DTYPE_F16, 1023.5 * 0x1p-24, 0x1p-14},       /* largest subnormal / smallest normal tie */
      {MI_DTYPE_BF16, 1 + 0x1p-8, 1},
      {MI_DTYPE_BF16, 1 + 3 * 0x1p-8, 1 + 0x1p-6},
      {MI_DTYPE_BF16, 259, 260},
      {MI_DTYPE_BF16, 3 * 0x1p-134, 0x1p-132},         /* bf16 subnormal tie */
      {MI_DTYPE_BF16, 0x1.fffffep127, INFINITY},       /* f32's largest: past bf16's */
      {MI_DTYPE_BF16, 0x1.fep127, 0x1.fep127},         /* bf16's largest stays */
      {MI_DTYPE_F32, 0x1p-24, 0x1p-24},                /* widening: exact */
  };
  int n = (int)(sizeof v / sizeof *v);
  for (int i = 0; i < n; i++) {
    double x = v[i].x, y = NAN;
    vf_arg a[] = {buf_arg("dst", VF_OUT, &y, 1), buf_arg("src", VF_IN, &x, 1), int_arg("n", 1)};
    a[0].dtype = v[i].to;
    vf_call c = {a, 3, NULL};
    char err[128];
    ck_assert_int_eq(vf_ref_find("convert")(&c, err, sizeof err), 0);
    ck_assert_msg(y == v[i].want, "case %d: %a -> %a, want %a", i, x, y, v[i].want);
  }
  double sp[3] = {NAN, -0.0, -INFINITY}, out[3];
  vf_arg a[] = {buf_arg("dst", VF_OUT, out, 3), buf_arg("src", VF_IN, sp, 3), int_arg("n", 3)};
  a[0].dtype = MI_DTYPE_F16;
  vf_call c = {a, 3, NULL};
  char err[128];
  ck_assert_int_eq(vf_ref_find("convert")(&c, err, sizeof err), 0);
  ck_assert(isnan(out[0]));
  ck_assert(out[1] == 0 && signbit(out[1]));
  ck_assert(isinf(out[2]) && out[2] < 0);
}
END_TEST

/* The schema's enums and the verifier's tables must agree, both ways;
 * `extra` (or NULL) is one more name the schema lists that no table has. */
static void same_set(json_t *en, const char *const *names, const char *extra, const char *what) {
  size_t n = extra ? 1 : 0;
  if (extra) {
    size_t i;
    json_t *v;
    int found = 0;
    json_array_foreach(en, i, v) found |= !strcmp(json_string_value(v), extra);
    ck_assert_msg(found, "%s: '%s' is not in ckb/schemas/operator.json", what, extra);
  }
  for (const char *const *p = names; *p; p++, n++) {
    size_t i;
    json_t *v;
    int found = 0;
    json_array_foreach(en, i, v) found |= !strcmp(json_string_value(v), *p);
    ck_assert_msg(found, "%s: '%s' is in the verifier but not in ckb/schemas/operator.json", what, *p);
  }
  ck_assert_msg(n == json_array_size(en), "%s: the schema lists %zu names, the verifier %zu", what,
                json_array_size(en), n);
}

START_TEST(tables_match_schema) {
  char p[4200];
  snprintf(p, sizeof p, "%s/schemas/operator.json", ckb);
  json_t *s = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(s);
  json_t *props = json_object_get(json_object_get(s, "schema"), "properties");
  /* "pack": an operator a kernel pack computes (mi/kernel_pack.h), no platform member */
  same_set(json_object_get(json_object_get(props, "member"), "enum"), vf_member_names(), "pack", "member");
  same_set(json_object_get(json_object_get(props, "reference"), "enum"), vf_ref_names(), NULL, "reference");
  json_decref(s);
  ck_assert_int_eq(vf_member_offset("rmsnorm"), (long)offsetof(mi_platform_iface, rmsnorm));
  ck_assert_int_eq(vf_member_offset("nosuch"), -1);
  ck_assert_uint_ne(vf_case_seed(1, "operator.rope", 0, 0), vf_case_seed(1, "operator.rope", 1, 0));
  ck_assert_uint_ne(vf_case_seed(1, "operator.rope", 0, 0), vf_case_seed(1, "operator.rope", 0, 1));
  ck_assert_uint_eq(vf_case_seed(9, "operator.add", 2, 0), vf_case_seed(9, "operator.add", 2, 0));
}
END_TEST

/* Prefixed to the mi-verify command line (environment for a mutant). */
static char env_prefix[1024];

static void verify(run *r, const char *plugin, const char *extra) {
  char report[256], cmd[16384];
  snprintf(report, sizeof report, "/tmp/mi-verify-test-%d.json", (int)getpid());
  snprintf(cmd, sizeof cmd, "%s '%s' --ckb '%s' --platform-plugin '%s' --report '%s' -o threads=2 %s 2>&1",
           env_prefix, bin, ckb, plugin, report, extra);
  vt_run(r, cmd, report);
}

static json_t *unit(json_t *report, const char *id) {
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(json_array_get(json_object_get(report, "stages"), 0), "units"), i, u)
    if (!strcmp(json_string_value(json_object_get(u, "id")), id)) return u;
  return NULL;
}

START_TEST(cpu_plugin_passes_stage1) {
  run r;
  verify(&r, cpu_so, ""); /* a fresh random seed every run */
  ck_assert_msg(r.exited && r.code == 0, "exit %d:\n%s", r.code, r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "mi-verify: seed "));
  json_t *units = json_object_get(json_array_get(json_object_get(r.report, "stages"), 0), "units");
  /* one unit per kernel the cpu platform contract lists (each has an
   * operator contract: the CKB validates that) */
  char pp[4200];
  snprintf(pp, sizeof pp, "%s/ckb/platforms/cpu.json", getenv("MI_SOURCE_DIR"));
  json_t *plat = json_load_file(pp, 0, NULL);
  ck_assert_ptr_nonnull(plat);
  ck_assert_int_ge(json_array_size(json_object_get(plat, "kernels")), 10);
  ck_assert_int_eq(json_array_size(units), json_array_size(json_object_get(plat, "kernels")));
  json_decref(plat);
  ck_assert_int_ge(vt_all_units_pass(r.report, units, 1), 40);
  printf("cpu plugin, stage 1:\n%s", r.out);
  json_decref(r.report);
}
END_TEST

START_TEST(same_seed_same_inputs) {
  run a, b;
  verify(&a, cpu_so, "--seed 42 --only rmsnorm,operator.matmul");
  verify(&b, cpu_so, "--seed 42 --only rmsnorm,operator.matmul");
  ck_assert_int_eq(a.code, 0);
  ck_assert_int_eq(b.code, 0);
  const char *ids[] = {"operator.rmsnorm", "operator.matmul"};
  for (int k = 0; k < 2; k++) {
    json_t *ca = json_object_get(unit(a.report, ids[k]), "cases");
    json_t *cb = json_object_get(unit(b.report, ids[k]), "cases");
    ck_assert_int_gt(json_array_size(ca), 0);
    for (size_t i = 0; i < json_array_size(ca); i++) {
      json_t *x = json_array_get(ca, i), *y = json_array_get(cb, i);
      ck_assert(json_equal(json_object_get(x, "seed"), json_object_get(y, "seed")));
      ck_assert(json_equal(json_object_get(x, "params"), json_object_get(y, "params")));
      ck_assert(json_equal(json_object_get(x, "max_abs_err"), json_object_get(y, "max_abs_err")));
    }
  }
  ck_assert_ptr_null(unit(a.report, "operator.rope")); /* --only */
  json_decref(a.report);
  json_decref(b.report);
}
END_TEST

/* A mutant must fail exactly its planted unit, with `symptom` in the
 * message, and pass all the others. */
static void mutant(const char *name, const char *bad_unit, const char *status, const char *symptom,
                   const char *extra) {
  char so[4600], args[256];
  snprintf(so, sizeof so, "%s/libmutant-%s.so", mutants, name);
  snprintf(args, sizeof args, "--platform cpu --seed 7 %s", extra);
  run r;
  verify(&r, so, args);
  ck_assert_msg(r.exited, "mi-verify itself died:\n%s", r.out);
  ck_assert_msg(r.code == 1, "mutant %s: exit %d (want 1):\n%s", name, r.code, r.out);
  ck_assert_ptr_nonnull(r.report);
  ck_assert_str_eq(json_string_value(json_object_get(r.report, "verdict")), "FAIL");
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(json_array_get(json_object_get(r.report, "stages"), 0), "units"), i, u) {
    const char *id = json_string_value(json_object_get(u, "id"));
    const char *v = json_string_value(json_object_get(u, "verdict"));
    if (strcmp(id, bad_unit)) {
      ck_assert_msg(!strcmp(v, "PASS"), "mutant %s: untouched %s should pass: %s", name, id,
                    json_string_value(json_object_get(u, "message")));
      continue;
    }
    const char *msg = json_string_value(json_object_get(u, "message"));
    ck_assert_str_eq(v, "FAIL");
    ck_assert_str_eq(json_string_value(json_object_get(u, "status")), status);
    ck_assert_msg(msg && strstr(msg, symptom), "mutant %s: message lacks '%s': %s", name, symptom, msg);
    printf("mutant %-14s -> %s %s\n", name, status, msg);
  }
  ck_assert_ptr_nonnull(unit(r.report, bad_unit));
  json_decref(r.report);
}

START_TEST(mutant_rmsnorm_eps) {
  mutant("rmsnorm_eps", "operator.rmsnorm", "FAIL", "rmsnorm: max rel error", "");
}
END_TEST
START_TEST(mutant_rope_pairing) {
  mutant("rope_pairing", "operator.rope", "FAIL", "rope: max rel error", "");
}
END_TEST
START_TEST(mutant_softmax_nomax) {
  mutant("softmax_nomax", "operator.attention", "FAIL", "NaN/Inf values in 'out'", "");
}
END_TEST
START_TEST(mutant_matmul_segv) {
  mutant("matmul_segv", "operator.matmul", "CRASH", "matmul: crashed (", "");
}
END_TEST
/* Rounds x to bf16 but claims the exact mode (no "+bf16act" in its variant
 * name): the exact tolerance, which holds for every weight type, rejects it. */
START_TEST(mutant_matmul_bf16act) {
  mutant("matmul_bf16act", "operator.matmul", "FAIL", "matmul: max rel error", "");
}
END_TEST

/* operator.matmul in the mode the plugin runs. MI_CPU_MATMUL_ACT=f32: the
 * exact mode, the tolerance. The default (auto): on a host whose variant
 * announces the bf16_activations mode ("+bf16act"), its bf16 cases are
 * judged by the mode's per-output bound, and the prefill cases really
 * round (an error the exact tolerance would refuse). */
static json_t *matmul_cases(run *r) {
  ck_assert_msg(r->exited && r->code == 0, "exit %d:\n%s", r->code, r->out);
  json_t *u = unit(r->report, "operator.matmul");
  ck_assert_ptr_nonnull(u);
  ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "PASS");
  return json_object_get(u, "cases");
}

START_TEST(matmul_mode_stage1) {
  run r;
  /* the exact path as a deployment selects it: the option the platform
   * contract ties q8_activations to (stage 1 sees options, not the
   * environment) */
  verify(&r, cpu_so, "--seed 11 --only operator.matmul -o matmul_act=f32");
  size_t i;
  json_t *c;
  int quant_cases = 0;
  json_array_foreach(matmul_cases(&r), i, c) {
    ck_assert_ptr_null(json_object_get(c, "mode"));
    ck_assert_double_le(json_number_value(json_object_get(c, "max_rel_err")), 2e-5);
    quant_cases += json_string_value(json_object_get(c, "dtype"))[0] == 'q';
  }
  ck_assert_int_ge(quant_cases, 20);
  json_decref(r.report);
  snprintf(env_prefix, sizeof env_prefix, "MI_CPU_MATMUL_ACT=auto");
  verify(&r, cpu_so, "--seed 11 --only operator.matmul");
  env_prefix[0] = 0;
  json_t *cases = matmul_cases(&r);
  const char *variant = json_string_value(json_object_get(json_array_get(json_object_get(r.report, "stages"), 0), "variant"));
  int announced = variant && strstr(variant, "+bf16act");
  printf("matmul, MI_CPU_MATMUL_ACT=auto: variant %s\n", variant ? variant : "(no mode listed)");
  double worst_bf16 = 0, worst_q = 0;
  json_array_foreach(cases, i, c) {
    const char *dt = json_string_value(json_object_get(c, "dtype")), *mode = json_string_value(json_object_get(c, "mode"));
    if (dt[0] == 'q') { /* block-type weights: activations quantized on every variant */
      ck_assert_str_eq(mode, "q8_activations");
      ck_assert_double_le(json_number_value(json_object_get(c, "max_err_over_bound")), 1);
      worst_q = fmax(worst_q, json_number_value(json_object_get(c, "max_rel_err")));
    } else if (announced && !strcmp(dt, "bf16")) {
      ck_assert_str_eq(mode, "bf16_activations");
      ck_assert_double_le(json_number_value(json_object_get(c, "max_err_over_bound")), 1);
      const char *name = json_string_value(json_object_get(c, "case"));
      if (!strncmp(name, "prefill", 7) && json_number_value(json_object_get(c, "max_rel_err")) > worst_bf16)
        worst_bf16 = json_number_value(json_object_get(c, "max_rel_err"));
    } else {
      ck_assert_ptr_null(mode);
    }
  }
  if (announced) ck_assert_double_gt(worst_bf16, 2e-5); /* the path ran: x was rounded */
  ck_assert_double_gt(worst_q, 2e-5);                   /* and x was quantized */
  json_decref(r.report);
}
END_TEST

/* Q4_K's scales of sub-blocks 4..7 read without their high bits: the
 * q4_k cases exceed the q8_activations bound. */
START_TEST(mutant_matmul_q4k_scales) {
  mutant("matmul_q4k_scales", "operator.matmul", "FAIL", "> the q8_activations bound", "");
}
END_TEST
/* Every block-type row's last block skipped. */
START_TEST(mutant_matmul_q_tail) {
  mutant("matmul_q_tail", "operator.matmul", "FAIL", "> the q8_activations bound", "");
}
END_TEST

START_TEST(mutant_argmax_hang) {
  mutant("argmax_hang", "operator.argmax", "TIMEOUT", "argmax: TIMEOUT", "--timeout 1.5");
}
END_TEST

START_TEST(mutant_silu_alias) {
  /* Passes every separate-buffer case; only the in-place one (y == gate) shows it. */
  mutant("silu_alias", "operator.silu_mul", "FAIL", "case in_place, y aliases gate", "");
}
END_TEST

START_TEST(mutant_convert_trunc) {
  /* truncating f32 -> f16/bf16 is right wherever no rounding is needed: the
   * exact compare of the random rows (and the ties) shows it */
  mutant("convert_trunc", "operator.convert", "FAIL", "elements of 'dst' differ", "");
}
END_TEST

/* ---------- mutants that attack the verifier itself ---------- */

/* Processes whose environment holds tag (every process of a run inherits
 * it): none may outlive mi-verify. Returns the count; the first in *first. */
static int tagged_processes(const char *tag, int *first) {
  int n = 0;
  DIR *d = opendir("/proc");
  struct dirent *de;
  size_t tl = strlen(tag);
  while (d && (de = readdir(d))) {
    int pid = atoi(de->d_name);
    if (pid <= 0 || pid == (int)getpid()) continue;
    char p[64], st[512];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    size_t sl = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[sl] = 0;
    const char *rp = strrchr(st, ')');
    if (rp && rp[1] == ' ' && rp[2] == 'Z') continue; /* exited */
    snprintf(p, sizeof p, "/proc/%d/environ", pid);
    f = fopen(p, "r");
    if (!f) continue;
    static char env[1 << 16];
    size_t el = fread(env, 1, sizeof env, f);
    fclose(f);
    for (size_t i = 0; i + tl <= el; i++)
      if (!memcmp(env + i, tag, tl) && (i == 0 || env[i - 1] == 0)) {
        if (!n++ && first) *first = pid;
        break;
      }
  }
  if (d) closedir(d);
  return n;
}

/* Runs a hostile mutant on operator.add alone; returns the unit (in r->report). */
static json_t *hostile(run *r, const char *name, const char *env, const char *extra) {
  char so[4600], args[512], tag[64];
  snprintf(so, sizeof so, "%s/libmutant-%s.so", mutants, name);
  snprintf(tag, sizeof tag, "MI_TEST_TAG=h%d%s", (int)getpid(), name);
  snprintf(env_prefix, sizeof env_prefix, "env %s %s", tag, env);
  snprintf(args, sizeof args, "--platform cpu --seed 7 --only operator.add %s", extra);
  verify(r, so, args);
  env_prefix[0] = 0;
  ck_assert_msg(r->exited, "mi-verify itself died:\n%s", r->out);
  ck_assert_msg(r->code == 1, "mutant %s: exit %d (want 1):\n%s", name, r->code, r->out);
  ck_assert_ptr_nonnull(r->report);
  ck_assert_str_eq(json_string_value(json_object_get(r->report, "verdict")), "FAIL");
  json_t *u = unit(r->report, "operator.add");
  ck_assert_ptr_nonnull(u);
  ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "FAIL");
  int first = 0, left = tagged_processes(tag, &first);
  ck_assert_msg(left == 0, "mutant %s left %d process(es) behind, e.g. pid %d", name, left, first);
  printf("mutant %-14s -> %s %s\n", name, json_string_value(json_object_get(u, "status")),
         json_string_value(json_object_get(u, "message")));
  return u;
}

static const char *containment(run *r) { return json_string_value(json_object_get(r->report, "containment")); }

START_TEST(mutant_forged_pass) {
  run r;
  json_t *u = hostile(&r, "forged_pass", "", "");
  const char *msg = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(strstr(msg, "add: the unit's result pipe broke the verifier's protocol") &&
                    strstr(msg, "a unit may only return output buffers"), "%s", msg);
  ck_assert_int_eq(json_array_size(json_object_get(u, "cases")), 0); /* no forged case counted */
  json_decref(r.report);
}
END_TEST

START_TEST(mutant_daemon) {
  run r;
  json_t *u = hostile(&r, "daemon", "", "");
  const char *msg = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(strstr(msg, "add: left 2 processes running after the unit ended") && strstr(msg, "all killed"),
                "%s", msg);
  /* the pids it printed (the pid files of this test) are gone */
  const char *raw = json_string_value(json_object_get(u, "raw_output"));
  int seen = 0;
  for (const char *p = raw; (p = strstr(p, " pid ")); p++) {
    int pid = atoi(p + 5);
    ck_assert_int_gt(pid, 0);
    ck_assert_msg(kill(pid, 0) != 0 && errno == ESRCH, "pid %d is still alive", pid);
    seen++;
  }
  ck_assert_int_eq(seen, 2);
  json_decref(r.report);
}
END_TEST

START_TEST(mutant_write_outside) {
  char dir[] = "/tmp/mi-verify-escape.XXXXXX", target[256], env[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(target, sizeof target, "%s/escaped", dir);
  snprintf(env, sizeof env, "MI_MUTANT_ESCAPE=%s", target);
  run r;
  snprintf(env_prefix, sizeof env_prefix, "env %s", env);
  verify(&r, cpu_so, "--only operator.add"); /* to read the containment in force */
  env_prefix[0] = 0;
  int ro = containment(&r) && strstr(containment(&r), "read-only root") != NULL;
  json_decref(r.report);
  if (!ro) { /* no mount namespace here: a write outside cannot be stopped (documented) */
    printf("mutant write_outside: skipped, no read-only root on this machine\n");
    rmdir(dir);
    return;
  }
  json_t *u = hostile(&r, "write_outside", env, "");
  const char *msg = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(strstr(msg, "add: kernel returned -1 (mutant_write_outside: cannot write ") &&
                    strstr(msg, "Read-only file system"), "%s", msg);
  ck_assert_msg(access(target, F_OK) != 0, "%s was written", target);
  json_decref(r.report);
  rmdir(dir);
}
END_TEST

START_TEST(mutant_memfd_hog) {
  run r;
  verify(&r, cpu_so, "--only operator.add");
  int memcg = containment(&r) && strstr(containment(&r), "memory cap: cgroup") != NULL;
  json_decref(r.report);
  if (!memcg) {
    printf("mutant memfd_hog: skipped, no memory cgroup on this machine (RLIMIT_FSIZE bounds one memfd only)\n");
    return;
  }
  json_t *u = hostile(&r, "memfd_hog", "MI_MUTANT_HOG_MB=3072", "--mem-limit 768");
  const char *msg = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(strstr(msg, "add: killed by the memory cgroup's cap during a call on"), "%s", msg);
  json_decref(r.report);
}
END_TEST

START_TEST(mutant_pipe_flood) {
  run r;
  json_t *u = hostile(&r, "pipe_flood", "", "");
  const char *msg = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(strstr(msg, "add: flooded the result pipe (more than the ") && strstr(msg, "killed"), "%s", msg);
  json_decref(r.report);
}
END_TEST

static json_t *stage(json_t *report, int i) { return json_array_get(json_object_get(report, "stages"), i); }

START_TEST(cpu_plugin_passes_stage2) {
  run r;
  verify(&r, cpu_so, "--stage 2 --model-contract model.qwen3");
  ck_assert_msg(r.exited && r.code == 0, "exit %d:\n%s", r.code, r.out);
  ck_assert_str_eq(json_string_value(json_object_get(stage(r.report, 1), "verdict")), "PASS");
  json_t *u = json_array_get(json_object_get(stage(r.report, 1), "units"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(u, "id")), "model.qwen3");
  /* prefill + 2 decode steps for each weight dtype the cpu contract lists
   * whose blocks the small rows hold (f32, f16, bf16, q8_0, q4_0, q4_1,
   * q5_0, q5_1) */
  ck_assert_int_eq(json_array_size(json_object_get(u, "cases")), 24);
  /* Q4_K, Q6_K, Q5_K, Q2_K and Q3_K (256-value blocks) on the
   * block_layer_config's wider rows */
  json_t *nr = json_object_get(u, "dtypes_not_run");
  ck_assert_int_eq(json_array_size(nr), 5);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(nr, 0), "dtype")), "q4_k");
  json_t *b = json_array_get(json_object_get(stage(r.report, 1), "units"), 1);
  ck_assert_str_eq(json_string_value(json_object_get(b, "id")), "model.qwen3 (block_layer_config)");
  ck_assert_str_eq(json_string_value(json_object_get(b, "verdict")), "PASS");
  ck_assert_int_eq(json_array_size(json_object_get(b, "cases")), 15);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(b, "cases"), 0), "dtype")), "q4_k");
  json_decref(r.report);
}
END_TEST

START_TEST(mutant_d2d_noop_fails_stage2_only) {
  char so[4600];
  snprintf(so, sizeof so, "%s/libmutant-d2d_noop.so", mutants);
  run r;
  verify(&r, so, "--platform cpu --stage 2 --seed 3 --model-contract model.qwen3");
  ck_assert_msg(r.exited && r.code == 1, "exit %d:\n%s", r.code, r.out);
  ck_assert_str_eq(json_string_value(json_object_get(stage(r.report, 0), "verdict")), "PASS");
  json_t *u = json_array_get(json_object_get(stage(r.report, 1), "units"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "FAIL");
  const char *msg = json_string_value(json_object_get(u, "message"));
  ck_assert_msg(msg && strstr(msg, "layer: max rel error") && strstr(msg, "on prefill"), "%s", msg);
  printf("mutant %-14s -> stage 1 PASS, stage 2 FAIL %s\n", "d2d_noop", msg);
  json_decref(r.report);
  /* A stage 1 failure: stage 2 does not run on it. */
  snprintf(so, sizeof so, "%s/libmutant-rmsnorm_eps.so", mutants);
  verify(&r, so, "--platform cpu --stage 2 --seed 3 --model-contract model.qwen3");
  ck_assert_int_eq(r.code, 1);
  ck_assert_str_eq(json_string_value(json_object_get(stage(r.report, 1), "verdict")), "SKIPPED");
  json_decref(r.report);
}
END_TEST

START_TEST(stage3_weight_files) {
  char dir[] = "/tmp/mi-verify-model.XXXXXX", cmd[9000], args[4200];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel' --shape tiny --seed 4 --out '%s' >/dev/null 2>&1",
           getenv("MI_BUILD_DIR"), dir);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(args, sizeof args, "--stage 3 --model '%s' --only add", dir);
  run r;
  verify(&r, cpu_so, args);
  ck_assert_msg(r.exited && r.code == 0, "%s", r.out);
  ck_assert_str_eq(json_string_value(json_object_get(stage(r.report, 2), "verdict")), "PASS");
  json_decref(r.report);
  /* One layer fewer in config.json than in the files: stage 3 fails, naming the extra keys. */
  snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 1/' '%s/config.json'", dir);
  ck_assert_int_eq(system(cmd), 0);
  verify(&r, cpu_so, args);
  ck_assert_msg(r.exited && r.code == 1, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "weights: 11 problems, first: unexpected weight 'model.layers.1."));
  json_decref(r.report);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(setup_errors) {
  run r;
  verify(&r, "/nonexistent/libmi-x.so", "");
  ck_assert_msg(r.exited && r.code == 1, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "/nonexistent/libmi-x.so"));
  json_decref(r.report);
  verify(&r, cpu_so, "--platform nosuch");
  ck_assert_msg(r.exited && r.code == 2, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "no platform contract for 'nosuch'"));
  json_decref(r.report);
}
END_TEST

int main(void) {
  Suite *s = mi_check_suite(
      "verify", "stage1", 60, setup, NULL,
      MI_CHECK_TESTS(
          ref_rmsnorm_by_hand, ref_attention_by_hand, ref_rope_by_hand, ref_argmax_first_tie,
          ref_convert_by_hand, quant_inputs_decode_to_their_values, tables_match_schema, cpu_plugin_passes_stage1, same_seed_same_inputs,
          mutant_rmsnorm_eps, mutant_rope_pairing, mutant_softmax_nomax, mutant_matmul_segv,
          mutant_argmax_hang, mutant_matmul_bf16act, mutant_matmul_q4k_scales, mutant_matmul_q_tail, matmul_mode_stage1, mutant_silu_alias,
          mutant_convert_trunc, cpu_plugin_passes_stage2, mutant_d2d_noop_fails_stage2_only,
          stage3_weight_files, setup_errors, mutant_forged_pass, mutant_daemon,
          mutant_write_outside, mutant_memfd_hog, mutant_pipe_flood));
  return mi_check_run(s);
}
