/* mi-gen on the Qwen3.5/3.6-style hybrid (issue #15), from CKB entries alone,
 * references off: the revalidation of what evolution wrote into ckb/. A
 * temporary CKB = a copy of ckb/ (it holds the evolved model.qwen35, the
 * seven operators and their CPU kernels; the candidate bundle's operators
 * would fill in for a CKB without them) with the evolved model contract
 * (ckb/models/qwen35.json, provenance evolved) or a mutant of it, and a
 * `mi-mkmodel --family qwen35 --shape tiny --seed 1` checkpoint (the one
 * tests/goldens/hybrid holds llama.cpp `qwen35` goldens of):
 *   - the generated engine passes every stage (stage 2 one layer per kind,
 *     stage 4 against llama.cpp, stage 5 against the float64 model.qwen35,
 *     the decode-growth gate, the deployment run against the reference
 *     plugin) and its source bakes in the layer-kind table;
 *   - it refuses another config in one line, a swapped layer_types included;
 *   - contract mutants of the hybrid's knowledge (norms w instead of 1 + w,
 *     no output gate, full instead of partial rotary, conv without SiLU) and
 *     an engine that drops its recurrent state between forward calls are
 *     each rejected at a named stage, with the message checked.
 * Under the sanitizers (MI_TEST_GEN_QUICK) two of the mutants run. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen_tool.h"

#include "core/runtime/loader.h"
#include "core/runtime/session.h"
#include "tests/util/check_main.h"

#define GEN_TEST_NAME "test_gen_hybrid"
#include "gen_test_state.h"

/* setup runs outside a Check test: a failed step there ends the program with its reason */
#define NEED(cond, what)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "test_gen_hybrid: %s\n", what);                                        \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

/* A CKB copy at `dir` holding the bundle's operators and `contract` as
 * models/qwen35.json. */
static void make_ckb(const char *dir, json_t *contract) {
  /* the bundle's operators where the CKB has none of that name yet (once the
   * consolidator's evolved entries are in ckb/, those are used) */
  sh("rm -rf '%s' && cp -r '%s/ckb' '%s' && cp -n '%s'/candidates/hybrid-deltanet/operators/*.json '%s/operators/'", dir,
     g_src, dir, g_src, dir);
  char p[1400];
  snprintf(p, sizeof p, "%s/platforms/cpu.json", dir);
  json_t *plat = json_load_file(p, 0, NULL);
  NEED(plat, p);
  snprintf(p, sizeof p, "%s/candidates/hybrid-deltanet/bundle.json", g_src);
  json_t *bundle = json_load_file(p, 0, NULL);
  NEED(bundle, p);
  size_t i;
  json_t *op;
  json_array_foreach(json_object_get(bundle, "operators"), i, op) {
    size_t k;
    json_t *have;
    int listed = 0;
    json_array_foreach(json_object_get(plat, "kernels"), k, have) listed |= json_equal(json_object_get(have, "operator"), op);
    if (!listed)
      json_array_append_new(json_object_get(plat, "kernels"), json_pack("{s:O, s:[s]}", "operator", op, "dtypes", "f32"));
  }
  snprintf(p, sizeof p, "%s/platforms/cpu.json", dir);
  NEED(json_dump_file(plat, p, JSON_INDENT(1)) == 0, p);
  snprintf(p, sizeof p, "%s/models/qwen35.json", dir);
  NEED(json_dump_file(contract, p, JSON_INDENT(2)) == 0, p);
  json_decref(plat);
  json_decref(bundle);
}

/* The evolved knowledge: the model contract mi-gen --evolve wrote (the
 * hand-checked draft, tests/gen/contracts/qwen35.draft.json, is what
 * test_evolve holds the consolidator to). */
static json_t *draft(void) {
  char p[1200];
  snprintf(p, sizeof p, "%s/ckb/models/qwen35.json", g_src);
  json_t *c = json_load_file(p, 0, NULL);
  NEED(c, p);
  return c;
}

/* MI_TEST_GEN_QUICK (the sanitizer tree): a goldens folder whose
 * tiny-seed1.json is the committed one cut to its first 2 cases of 4 steps
 * (gt_short_golden), for every mi-gen run here: the engine still passes
 * stage 4 on it, each mutant is still rejected at stage 4 on case 0
 * (state_not_carried at a decode step), by the same unit; the Release run
 * compares every case. Empty: the committed goldens. */
static char g_short_gold[1300];

static res gen(const char *ckb, const char *out, const char *candidate, int iterations) {
  char gold[1400], it[16];
  if (g_short_gold[0]) snprintf(gold, sizeof gold, "%s", g_short_gold);
  else snprintf(gold, sizeof gold, "%s/tests/goldens/hybrid", g_src);
  snprintf(it, sizeof it, "%d", iterations);
  const char *a[] = {"--model", g_model, "--platform", "cpu", "--dtype", "bf16", "--tp", "1", "--out", out, "--ckb", ckb,
                     "--goldens", gold, "--seed", "5", "-t", "2", "--max-iterations", it,
                     candidate ? "--candidate" : NULL, candidate, NULL};
  return run("mi-gen", a, 900);
}

/* once, in the parent: the CKB, the model and one generated engine */
static void setup_all(void) {
  if (gt_dirs("/tmp/mi-gen-hybrid-XXXXXX", g_build, g_src, g_tmp, g_model, g_ckb)) abort();
  snprintf(g_out, sizeof g_out, "%s/engine", g_tmp);
  json_t *c = draft();
  make_ckb(g_ckb, c);
  json_decref(c);
  const char *mk[] = {"--family", "qwen35", "--shape", "tiny", "--seed", "1", "--dtype", "bf16", "--out", g_model, NULL};
  res r = run("mi-mkmodel", mk, 120);
  res_free(&r);
  if (getenv("MI_TEST_GEN_QUICK")) {
    char from[1300];
    snprintf(from, sizeof from, "%s/tests/goldens/hybrid/tiny-seed1.json", g_src);
    snprintf(g_short_gold, sizeof g_short_gold, "%s/goldens-short", g_tmp);
    NEED(gt_short_golden(from, g_short_gold, 2, 4) == 0, "the short golden");
    fprintf(stderr, "test_gen_hybrid: MI_TEST_GEN_QUICK: stage 4 on the golden's first 2 cases of 4 steps "
                    "(every case: the Release run)\n");
  }
  r = gen(g_ckb, g_out, NULL, 2);
  keep_gen_run(&r);
}

START_TEST(test_generate) {
  json_t *m = gen_manifest();
  char p[1400];
  size_t i;
  json_t *s;
  int seen2 = 0, seen4 = 0, seen5 = 0, seen4d = 0;
  json_array_foreach(json_object_get(m, "stages"), i, s) {
    const char *v = json_string_value(json_object_get(s, "verdict")), *st = json_string_value(json_object_get(s, "stage"));
    const char *msg = json_string_value(json_object_get(s, "message"));
    ck_assert_msg(!strcmp(v, "PASS"), "stage %s: %s (%s)", st, v, msg ? msg : "");
    seen2 |= !strcmp(st, "2");
    seen4 |= !strcmp(st, "4"); /* against llama.cpp's qwen35 golden of these weights */
    seen5 |= !strcmp(st, "5");
    seen4d |= !strcmp(st, "4d");
  }
  ck_assert(seen2 && seen4 && seen5 && seen4d);
  json_decref(m);
  /* the source: the layer-kind table as config.json's layer_types has it
   * (tiny: LFLF), the DeltaNet kernels, the per-layer state, no allocation */
  snprintf(p, sizeof p, "%s/engine.c", g_out);
  char *src = slurp(p);
  ck_assert_ptr_nonnull(strstr(src, "model.qwen35"));
  ck_assert_ptr_nonnull(strstr(src, "k_layer_kind[4] = {1, 0, 1, 0}"));
  ck_assert_ptr_nonnull(strstr(src, "P->gated_delta_rule(pc, NULL, m->core, m->lq, m->lk, m->lv, m->lg, m->lbeta, rec_state"));
  ck_assert_ptr_nonnull(strstr(src, "MI_GLUE_NEED(conv1d_causal)"));
  ck_assert_ptr_null(strstr(src, "malloc"));
  free(src);
}
END_TEST

START_TEST(test_engine_refuses_other_config) {
  ck_assert_int_eq(g_gen_rc, 0);
  /* the same shape with the layer kinds swapped: only layer_types differs */
  char other[1300], p[1400];
  snprintf(other, sizeof other, "%s/swapped", g_tmp);
  sh("mkdir -p '%s' && for f in '%s'/*; do ln -sf \"$f\" '%s'/; done && rm '%s/config.json'", other, g_model, other, other);
  snprintf(p, sizeof p, "%s/config.json", g_model);
  json_t *cfg = json_load_file(p, 0, NULL);
  json_t *lt = json_object_get(cfg, "layer_types");
  ck_assert_int_eq(json_array_size(lt), 4);
  for (size_t i = 0; i < 4; i++)
    json_array_set_new(lt, i, json_string(i % 2 ? "linear_attention" : "full_attention"));
  snprintf(p, sizeof p, "%s/config.json", other);
  ck_assert_int_eq(json_dump_file(cfg, p, JSON_INDENT(2)), 0);
  json_decref(cfg);
  const char *a[] = {"--plugin-dir", g_out, "-m", other, "-p", "hi", "-n", "2", NULL};
  res r = run("mi-run", a, 60);
  ck_assert_int_ne(r.rc, 0);
  ck_assert_msg(strstr(r.err, "refuses this config: layer_types[0] = full_attention, it was generated for linear_attention"),
                "%s", r.err);
  ck_assert_int_eq((int)strlen(r.err), (int)(strchr(r.err, '\n') - r.err + 1)); /* one line */
  res_free(&r);
  /* another shape (tiny-untied: FLL, other widths) */
  snprintf(other, sizeof other, "%s/untied", g_tmp);
  const char *mk[] = {"--family", "qwen35", "--shape", "tiny-untied", "--out", other, NULL};
  r = run("mi-mkmodel", mk, 120);
  ck_assert_int_eq(r.rc, 0);
  res_free(&r);
  const char *b[] = {"--plugin-dir", g_out, "-m", other, "-p", "hi", "-n", "2", NULL};
  r = run("mi-run", b, 60);
  ck_assert_int_ne(r.rc, 0);
  ck_assert_msg(strstr(r.err, "refuses this config: ") && strstr(r.err, "it was generated for"), "%s", r.err);
  ck_assert_int_eq((int)strlen(r.err), (int)(strchr(r.err, '\n') - r.err + 1));
  res_free(&r);
}
END_TEST

/* ---- the engine's per-sequence state, through the runtime (as mi-run loads it) ---- */

static void fwd(mi_session *e, mi_seq *s, const int32_t *ids, int64_t n, float *logits) {
  char err[512];
  ck_assert_msg(e->M->forward(e->model, s, ids, n, logits, 0, err, sizeof err) == 0, "%s", err);
}

/* max |a - b| over the spread of a */
static double rel(const float *a, const float *b, int64_t n) {
  double lo = INFINITY, hi = -INFINITY, mx = 0;
  for (int64_t i = 0; i < n; i++) lo = fmin(lo, a[i]), hi = fmax(hi, a[i]), mx = fmax(mx, fabs((double)a[i] - b[i]));
  return mx / (hi - lo);
}

/* The state is per sequence and carried: decoding token by token gives one
 * prefill's logits; a sequence that saw only the last token differs;
 * seq_truncate(0) forgets the state; any other cut but the current length
 * is refused; info() splits the KV rows (full layers only) from the fixed
 * DeltaNet state, both derived here from config.json. */
START_TEST(test_engine_state) {
  ck_assert_int_eq(g_gen_rc, 0);
  char exe[1200], err[2048];
  snprintf(exe, sizeof exe, "%s/bin/mi-run", g_build); /* plugins next to the tools: the platform */
  mi_loader_opts lo = {.plugin_dir = g_out, .exe_path = exe};
  int fatal = 0;
  mi_registry *reg = mi_registry_load(&lo, &fatal, err, sizeof err);
  ck_assert_msg(reg && !fatal, "%s", err);
  mi_session_opts eo = {.model_dir = g_model, .tp_size = 1};
  mi_session *e = NULL;
  ck_assert_msg(mi_session_open(reg, &eo, &e, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(e->model_plugin->desc->kind, MI_PLUGIN_ENGINE);
  const int64_t V = e->info.vocab_size;
  enum { T = 12 };
  int32_t ids[T];
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 13) % 151643);
  float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
  mi_seq *s1 = NULL, *s2 = NULL;
  ck_assert_int_eq(e->M->seq_create(e->model, 16, &s1, err, sizeof err), 0);
  ck_assert_int_eq(e->M->seq_create(e->model, 16, &s2, err, sizeof err), 0);
  fwd(e, s1, ids, T, a);
  fwd(e, s2, ids + T - 1, 1, b);
  ck_assert_msg(rel(a, b, V) > 1e-2, "the context makes no difference (%.3g)", rel(a, b, V));
  ck_assert_int_eq(e->M->seq_truncate(e->model, s2, 0), 0);
  ck_assert_int_eq(e->M->seq_len(e->model, s2), 0);
  for (int t = 0; t < T; t++) fwd(e, s2, ids + t, 1, b); /* token by token after the reset */
  ck_assert_msg(rel(a, b, V) < 1e-4, "decode after seq_truncate(0) differs from one prefill by %.3g", rel(a, b, V));
  ck_assert_int_eq(e->M->seq_truncate(e->model, s1, T), 0);
  ck_assert_int_ne(e->M->seq_truncate(e->model, s1, 5), 0);
  ck_assert_int_eq(e->M->seq_len(e->model, s1), T);
  char p[1400];
  snprintf(p, sizeof p, "%s/config.json", g_model);
  json_t *cfg = json_load_file(p, 0, NULL);
#define CI(k) json_integer_value(json_object_get(cfg, k))
  int64_t full = 0, lin = 0;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(cfg, "layer_types"), i, v) {
    full += !strcmp(json_string_value(v), "full_attention");
    lin += !strcmp(json_string_value(v), "linear_attention");
  }
  int64_t C = 2 * CI("linear_num_key_heads") * CI("linear_key_head_dim") + CI("linear_num_value_heads") * CI("linear_value_head_dim");
  ck_assert_uint_eq(e->info.state_bytes_token, (uint64_t)(full * 2 * CI("num_key_value_heads") * CI("head_dim") * 4));
  ck_assert_uint_eq(e->info.state_bytes_fixed,
                    (uint64_t)(lin * ((CI("linear_conv_kernel_dim") - 1) * C +
                                      CI("linear_num_value_heads") * CI("linear_key_head_dim") * CI("linear_value_head_dim")) * 4));
#undef CI
  json_decref(cfg);
  e->M->seq_destroy(e->model, s1);
  e->M->seq_destroy(e->model, s2);
  free(a);
  free(b);
  mi_session_close(e);
  mi_registry_free(reg);
}
END_TEST

/* ---- mutants of the hybrid's knowledge ---- */

/* stage 4's verdict on an engine whose greedy steps or top-10 logprobs leave
 * llama.cpp's golden: "... tiny-seed1.json case C step S: ..." */
#define STAGE4_WHY "(test.stage4_end_to_end): "

/* every step of every layer kind whose operator is `op` */
static void edit_steps(json_t *c, const char *op, const char *arg, const char *val) {
  const char *kn;
  json_t *kv;
  int n = 0;
  json_object_foreach(json_object_get(json_object_get(c, "layer_kinds"), "kinds"), kn, kv) {
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(kv, "sequence"), i, st) {
      if (strcmp(json_string_value(json_object_get(st, "operator")), op)) continue;
      json_object_set_new(json_object_get(st, "args"), arg, json_string(val));
      n++;
    }
  }
  size_t i;
  json_t *st;
  json_array_foreach(json_object_get(c, "epilogue"), i, st) if (!strcmp(json_string_value(json_object_get(st, "operator")), op) &&
                                                                 json_object_get(json_object_get(st, "args"), arg)) {
    json_object_set_new(json_object_get(st, "args"), arg, json_string(val));
    n++;
  }
  ck_assert_int_gt(n, 0);
}

static void drop_step(json_t *c, const char *kind, const char *step) {
  json_t *seq = json_object_get(json_object_get(json_object_get(json_object_get(c, "layer_kinds"), "kinds"), kind), "sequence");
  size_t i;
  json_t *st;
  json_array_foreach(seq, i, st) if (!strcmp(json_string_value(json_object_get(st, "step")), step)) {
    json_array_remove(seq, i);
    return;
  }
  ck_abort_msg("no step %s in %s", step, kind);
}

/* mi-gen (one candidate) on a CKB holding the mutant contract: rejected at
 * `stage` with `why` in the message */
static void expect_rejected(const char *name, json_t *c, const char *stage, const char *why) {
  char ckb[1400], out[1400], want[64];
  snprintf(ckb, sizeof ckb, "%s/ckb-%s", g_tmp, name);
  snprintf(out, sizeof out, "%s/engine-%s", g_tmp, name);
  make_ckb(ckb, c);
  res r = gen(ckb, out, NULL, 1);
  snprintf(want, sizeof want, "verification failed at stage %s (", stage);
  ck_assert_msg(r.rc == 4 && strstr(r.err, want) && strstr(r.err, why) && strstr(r.err, "tiny-seed1.json case "),
                "mutant %s: exit %d, want \"%s\" and \"%s\":\n%s", name, r.rc, want, why, r.err);
  res_free(&r);
  sh("rm -rf '%s' '%s'", ckb, out);
}

/* Mutant `name`: the draft with every step of operator `op` given
 * param=value, rejected at stage 4. */
static void expect_edit_rejected(const char *name, const char *op, const char *param,
                                 const char *value) {
  json_t *c = draft();
  edit_steps(c, op, param, value);
  expect_rejected(name, c, "4", STAGE4_WHY);
  json_decref(c);
}

START_TEST(test_mutant_norm_w) { /* (1 + w) norms read as w */
  expect_edit_rejected("norm_w", "operator.rmsnorm", "w_offset", "0");
}
END_TEST

START_TEST(test_mutant_no_gate) { /* attention output not gated */
  json_t *c = draft();
  drop_step(c, "full_attention", "output_gate");
  expect_rejected("no_gate", c, "4", STAGE4_WHY);
  json_decref(c);
}
END_TEST

START_TEST(test_mutant_full_rotary) { /* rotary over the whole head */
  expect_edit_rejected("full_rotary", "operator.rope", "rot_dim", "head_dim");
}
END_TEST

START_TEST(test_mutant_conv_no_silu) {
  expect_edit_rejected("conv_no_silu", "operator.conv1d_causal", "silu", "0");
}
END_TEST

/* An engine that zeroes its conv and recurrent state at every forward call:
 * a prefill is right, every decode step after it forgets the prompt. */
START_TEST(test_mutant_state_not_carried) {
  ck_assert_int_eq(g_gen_rc, 0);
  char p[1400], mut[1400], out[1400];
  snprintf(p, sizeof p, "%s/engine.c", g_out);
  char *s = slurp(p);
  const char *from = "  const int64_t pos0 = s->len;\n";
  char *hit = strstr(s, from);
  ck_assert_ptr_nonnull(hit);
  snprintf(mut, sizeof mut, "%s/state_dropped.c", g_tmp);
  FILE *f = fopen(mut, "w");
  fprintf(f, "%.*s%s"
             "  for (int l = 0; l < NUM_HIDDEN_LAYERS; l++) /* the mutant: state dropped between calls */\n"
             "    if (k_state[k_layer_kind[l]])\n"
             "      K(P->memcpy_d2d(pc, NULL, s->layer_state[l] + (size_t)s->n_ctx * k_kv_row[k_layer_kind[l]], s->zeros,\n"
             "                      k_state[k_layer_kind[l]] * sizeof(float)));\n%s",
          (int)(hit - s), s, from, hit + strlen(from));
  fclose(f);
  free(s);
  snprintf(out, sizeof out, "%s/engine-state", g_tmp);
  res r = gen(g_ckb, out, mut, 1);
  ck_assert_msg(r.rc == 4 && strstr(r.err, "verification failed at stage 4 (") && strstr(r.err, STAGE4_WHY) &&
                    strstr(r.err, " step ") && !strstr(r.err, "step 0:"), /* the prefill is right, a decode step not */
                "exit %d:\n%s", r.rc, r.err);
  res_free(&r);
}
END_TEST

int main(void) {
  /* test_engine_state holds one prefill to token-by-token decode at 1e-4:
   * the CPU platform's exact matmul path (its default on AVX512_BF16 hosts
   * rounds prefill activations to bf16, the matmul contract's
   * bf16_activations mode; mi-verify runs its stages 2-6 exact anyway) */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  setup_all();
  Suite *s = suite_create("gen_hybrid");
  TCase *t = tcase_create("gen_hybrid");
  tcase_set_timeout(t, 1200);
  int quick = getenv("MI_TEST_GEN_QUICK") != NULL; /* the sanitizer run: fewer mi-gen runs */
  mi_check_add(t, MI_CHECK_TESTS(test_generate, test_engine_refuses_other_config, test_engine_state,
                                 test_mutant_state_not_carried, test_mutant_norm_w));
  if (!quick) {
    mi_check_add(
        t, MI_CHECK_TESTS(test_mutant_no_gate, test_mutant_full_rotary, test_mutant_conv_no_silu));
  }
  suite_add_tcase(s, t);
  const int failed = mi_check_run(s) != EXIT_SUCCESS;
  teardown_all();
  return failed ? 1 : 0;
}
