/* The qwen35 model plugin (plugins/models/qwen35) on the CPU platform, held
 * to things it cannot see:
 *   - llama.cpp's `qwen35` goldens (tests/goldens/hybrid, teacher-forced:
 *     greedy tokens and top-10 log-probabilities at every step);
 *   - the float64 reference (tests/hybrid/ref/qwen35_f64.c, sharing no code
 *     with the plugin or the platform) on a random prompt, every position,
 *     in both config layouts;
 *   - properties: a token-by-token decode equals one batched prefill;
 *     a prefill split into uneven chunks (calls, or the batch option)
 *     equals one prefill; seq_truncate(0) forgets the recurrent state;
 *   - refusals: bad configs and weights named in one line, truncation of
 *     a recurrent state refused, mi-run picking the plugin by architecture. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/compat.h"
#include "core/runtime/host.h"
#include "core/runtime/loader.h"
#include "core/runtime/safetensors.h"
#include "core/runtime/session.h"
#include "tests/hybrid/golden_steps.h"
#include "tests/hybrid/ref/qwen35_f64.h"
#include "tests/safetensors/st_writer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_json.h"
#include "tests/util/test_logits.h"
#include "tests/util/test_registry.h"

/* Tolerance on |logprob(plugin) - logprob(llama.cpp)| over llama.cpp's top
 * 10. Both compute in float32 on the same weights (the golden's GGUF is all
 * F32, its KV cache F32), in different orders (the plugin's delta rule is
 * chunked in prefill). Seen: 6.5e-5 (tiny), 2.2e-5 (tiny-untied), 6.0e-5
 * (small); the float64 reference meets the same goldens within 3.7e-5
 * (test_hybrid_peer, same bound). 2e-3 is 30x the worst seen and far below
 * a real defect: by hand, q_norm with w instead of 1+w, conv without SiLU,
 * no output gate, full instead of partial rotary, or the recurrent state
 * dropped each fail this test (logprobs off by 0.1..15). */
#define LOGPROB_TOL 2e-3

/* Plugin (f32) against the float64 reference: |logit difference| relative
 * to the position's logit spread. Seen 6e-7..3.2e-6; 1e-4 is 30x that,
 * and each defect above moves logits by a sizeable part of the spread. */
#define REF_REL_TOL 1e-4

/* Two evaluations by the same plugin in different orders (one batched
 * prefill vs. token by token, or other chunk boundaries): the matmul rows
 * and the chunked vs. step-by-step delta rule round differently. Seen
 * 2.8e-6..4.7e-6 of the spread; the same bound. Dropping the state between
 * calls fails it. */
#define ORDER_REL_TOL 1e-4

/* Under AddressSanitizer (CI's second run) the same code paths run with
 * fewer repetitions: two cases per golden (the first and the longest
 * prompt), the `small` shape only in its golden. Each step computes the
 * logits of all 151936 tokens, which is most of the time; the sanitizer
 * looks for memory errors, and those paths are all still taken. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static char *g_dir; /* per-test temp dir */

static void setup(void) {
  g_dir = tw_mkdtemp("hybrid-rt");
}
static void teardown(void) {
  tw_rmtree(g_dir);
  free(g_dir);
}

/* ---- harness ------------------------------------------------------------- */

static const char *build_dir(void) {
  const char *bd = getenv("MI_BUILD_DIR");
  ck_assert_msg(bd != NULL, "MI_BUILD_DIR not set (run through ctest)");
  return bd;
}

/* mi-mkmodel with extra arguments (e.g. "--family qwen35 --shape tiny"). */
static char *mkmodel(const char *name, const char *args) {
  char *out = NULL, *cmd = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/%s", g_dir, name), 0);
  ck_assert_int_ge(
      asprintf(&cmd, "'%s/bin/mi-mkmodel' %s --out '%s' >/dev/null", build_dir(), args, out), 0);
  ck_assert_msg(system(cmd) == 0, "%s", cmd);
  free(cmd);
  return out;
}

static mi_registry *load_registry(void) { return mi_test_registry(build_dir()); }

typedef struct rt {
  mi_registry *reg;
  mi_session *e;
  int V;
} rt;

/* A session on dir with the plugin's batch option; 0 or -1 with err. */
static int rt_open_ex(rt *r, const char *dir, int batch, char *err, size_t n) {
  r->reg = load_registry();
  char bs[16];
  snprintf(bs, sizeof bs, "%d", batch);
  mi_kv kv[] = {{"batch", bs}};
  mi_options mo = {kv, 1};
  mi_session_opts eo = {.model_dir = dir, .model_opts = &mo, .tp_size = 1};
  r->e = NULL;
  if (mi_session_open(r->reg, &eo, &r->e, err, n) != 0) return -1;
  r->V = (int)r->e->info.vocab_size;
  return 0;
}

static void rt_open(rt *r, const char *dir, int batch) {
  char err[2048];
  ck_assert_msg(rt_open_ex(r, dir, batch, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(r->e->model_plugin->desc->name, "qwen35");
}

/* ---- llama.cpp goldens ----------------------------------------------------- */

/* Teacher-forced on the golden's tokens: prefill the prompt in one pass,
 * then one token per step, state carried. */
static void check_golden(const char *file) {
  json_error_t je;
  json_t *g = json_load_file(file, 0, &je);
  ck_assert_msg(g, "%s: %s", file, je.text);
  char args[1024] = "";
  size_t i, len = 0;
  json_t *a;
  json_array_foreach(json_object_get(json_object_get(g, "model"), "mkmodel_args"), i, a) len +=
      (size_t)snprintf(args + len, sizeof args - len, " '%s'", json_string_value(a));
  char *dir = mkmodel("golden", args);
  hy_check_golden_weights(g, dir, file, "");
  rt r;
  rt_open(&r, dir, 512);
  const int V = r.V;
  float *lg = malloc((size_t)V * sizeof(float));
  double *lp = malloc((size_t)V * sizeof(double));
  double worst = 0;
  int steps_total = 0, ties = 0;
  json_t *c;
  const size_t n_cases = json_array_size(json_object_get(g, "cases"));
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    if (SANITIZED && i != 0 && i != n_cases - 1) continue;
    json_t *steps = json_object_get(c, "steps");
    const int ns = (int)json_array_size(steps);
    int np;
    int32_t *ids = hy_golden_ids(c, ns, &np);
    mi_seq *s = mi_test_seq(r.e, np + ns);
    for (int t = 0; t < ns; t++) {
      if (t == 0)
        mi_test_forward(r.e, s, ids, np, lg, 0);
      else
        mi_test_forward(r.e, s, ids + np + t - 1, 1, lg, 0);
      mi_test_log_softmax_of(lg, NULL, lp, V);
      hy_check_step(steps, t, lp, V, ids[np + t], LOGPROB_TOL, file, i, &worst, &ties);
      steps_total++;
    }
    r.e->M->seq_destroy(r.e->model, s);
    free(ids);
  }
  fprintf(
      stderr,
      "%s: %d steps, max |logprob - llama.cpp| %.3g over the top 10, %d near-tie greedy picks\n",
      strrchr(file, '/') + 1, steps_total, worst, ties);
  ck_assert_int_ge(steps_total, SANITIZED ? 64 : 256);
  free(lg);
  free(lp);
  mi_test_session_close(r.e, r.reg);
  free(dir);
  json_decref(g);
}

static void golden(const char *name) {
  char f[2048];
  snprintf(f, sizeof f, "%s/tests/goldens/hybrid/%s", getenv("MI_SOURCE_DIR"), name);
  check_golden(f);
}

START_TEST(golden_tiny) {
  golden("tiny-seed1.json");
}
END_TEST
START_TEST(golden_tiny_untied) {
  golden("tiny-untied-seed2.json");
}
END_TEST
START_TEST(golden_small) {
  golden("small-seed3.json");
}
END_TEST

/* ---- the float64 reference ------------------------------------------------- */

/* Every position's logits of a T-token prompt against the reference, in one
 * prefill of chunks of `batch`, then 4 decode steps. */
static void against_reference(const char *args, int batch) {
  char *dir = mkmodel("ref", args);
  rt r;
  rt_open(&r, dir, batch);
  const int V = r.V, T = 29, D = 4;
  int32_t ids[33];
  mi_test_prompt(ids, T + D, 7);
  /* the reference reads the same weight files */
  char err[1024];
  vf_qwen35 *ref = NULL;
  ck_assert_msg(vf_qwen35_open(r.e->config, r.e->weights, &ref, err, sizeof err) == 0, "%s", err);
  vf_qwen35_seq *rs = vf_qwen35_seq_new(ref, T + D);
  double *want = malloc((size_t)(T + D) * V * sizeof(double)); /* [T+D, V] */
  ck_assert_msg(vf_qwen35_forward(ref, rs, ids, T + D, T + D, want, 0, NULL, err, sizeof err) == 0,
                "%s", err);
  float *got = malloc((size_t)(T + D) * V * sizeof(float)); /* [T+D, V] */
  mi_seq *s = mi_test_seq(r.e, T + D);
  mi_test_forward(r.e, s, ids, T, got, 1);
  for (int t = T; t < T + D; t++)
    mi_test_forward(r.e, s, ids + t, 1, got + (size_t)t * V, 0);
  double worst = 0;
  for (int t = 0; t < T + D; t++) {
    double e = mi_test_rel_err_of(got + (size_t)t * V, NULL, want + (size_t)t * V, V);
    ck_assert_msg(e < REF_REL_TOL, "%s: position %d: |logit - float64| = %.3g of the spread", args,
                  t, e);
    worst = fmax(worst, e);
  }
  fprintf(stderr, "reference %s batch %d: max |logit - float64| %.3g of the spread\n", args, batch,
          worst);
  r.e->M->seq_destroy(r.e->model, s);
  free(got);
  free(want);
  vf_qwen35_seq_free(rs);
  vf_qwen35_close(ref);
  mi_test_session_close(r.e, r.reg);
  free(dir);
}

START_TEST(reference_tiny) {
  against_reference("--family qwen35 --shape tiny --seed 11", 512);
}
END_TEST
/* f32 weights (the other matmul path), and the plugin's own chunking */
START_TEST(reference_tiny_untied_chunked) {
  against_reference("--family qwen35 --shape tiny-untied --seed 12 --dtype f32", 6);
}
END_TEST
START_TEST(reference_released_layout) {
  against_reference("--family qwen35 --shape tiny --seed 13 --layout conditional", 512);
}
END_TEST
START_TEST(reference_small) {
  if (!SANITIZED) against_reference("--family qwen35 --shape small --seed 14", 512);
}
END_TEST

/* ---- properties --------------------------------------------------------------- */

/* T tokens: one prefill with every position's logits vs. token by token
 * from an empty sequence vs. uneven chunks (calls), vs. batch=3 (the
 * plugin's own chunking). */
static void orders_agree(const char *args) {
  char *dir = mkmodel("ord", args);
  rt r;
  rt_open(&r, dir, 512);
  const int V = r.V, T = 40;
  int32_t ids[40];
  mi_test_prompt(ids, T, 3);
  float *one = malloc((size_t)T * V * sizeof(float)),
        *other = malloc((size_t)T * V * sizeof(float));
  mi_seq *s = mi_test_seq(r.e, T);
  mi_test_forward(r.e, s, ids, T, one, 1);
  /* token by token, after seq_truncate(0): the reset must forget the
   * first pass's recurrent state */
  ck_assert_int_eq(r.e->M->seq_truncate(r.e->model, s, 0), 0);
  ck_assert_int_eq(r.e->M->seq_len(r.e->model, s), 0);
  for (int t = 0; t < T; t++)
    mi_test_forward(r.e, s, ids + t, 1, other + (size_t)t * V, 0);
  double w_dec = 0, w_chunk = 0, w_batch = 0;
  for (int t = 0; t < T; t++)
    w_dec = fmax(w_dec, mi_test_rel_err(other + (size_t)t * V, one + (size_t)t * V, V));
  /* uneven chunks */
  ck_assert_int_eq(r.e->M->seq_truncate(r.e->model, s, 0), 0);
  const int cuts[] = {7, 1, 13, 2, 17};
  for (int i = 0, t = 0; i < 5; t += cuts[i++])
    mi_test_forward(r.e, s, ids + t, cuts[i], other + (size_t)t * V, 1);
  ck_assert_int_eq(r.e->M->seq_len(r.e->model, s), T);
  for (int t = 0; t < T; t++)
    w_chunk = fmax(w_chunk, mi_test_rel_err(other + (size_t)t * V, one + (size_t)t * V, V));
  r.e->M->seq_destroy(r.e->model, s);
  mi_test_session_close(r.e, r.reg);
  /* the same prompt through a session with batch=3 */
  rt_open(&r, dir, 3);
  s = mi_test_seq(r.e, T);
  mi_test_forward(r.e, s, ids, T, other, 1);
  for (int t = 0; t < T; t++)
    w_batch = fmax(w_batch, mi_test_rel_err(other + (size_t)t * V, one + (size_t)t * V, V));
  r.e->M->seq_destroy(r.e->model, s);
  mi_test_session_close(r.e, r.reg);
  fprintf(stderr,
          "%s: vs one prefill of %d: decode %.3g, uneven chunks %.3g, batch=3 %.3g of the spread\n",
          args, T, w_dec, w_chunk, w_batch);
  ck_assert_msg(w_dec < ORDER_REL_TOL, "decode differs from prefill by %.3g of the spread", w_dec);
  ck_assert_msg(w_chunk < ORDER_REL_TOL,
                "uneven chunks differ from one prefill by %.3g of the spread", w_chunk);
  ck_assert_msg(w_batch < ORDER_REL_TOL, "batch=3 differs from one prefill by %.3g of the spread",
                w_batch);
  free(one);
  free(other);
  free(dir);
}

START_TEST(orders_tiny) {
  orders_agree("--family qwen35 --shape tiny --seed 21");
}
END_TEST
START_TEST(orders_small) {
  if (!SANITIZED) orders_agree("--family qwen35 --shape small --seed 22");
}
END_TEST

/* The recurrent state must be carried: a second sequence fed only the last
 * token differs from the sequence that saw the whole prompt (so the decode
 * checks above can fail), and two sequences do not share state. */
START_TEST(state_is_per_sequence) {
  char *dir = mkmodel("st", "--family qwen35 --shape tiny --seed 31");
  rt r;
  rt_open(&r, dir, 512);
  const int V = r.V;
  int32_t ids[12];
  mi_test_prompt(ids, 12, 5);
  float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
  mi_seq *s1 = mi_test_seq(r.e, 16), *s2 = mi_test_seq(r.e, 16);
  mi_test_forward(r.e, s1, ids, 12, a, 0);
  mi_test_forward(r.e, s2, ids + 11, 1, b, 0);
  double lo = INFINITY, hi = -INFINITY, mx = 0;
  for (int i = 0; i < V; i++)
    lo = fmin(lo, a[i]), hi = fmax(hi, a[i]), mx = fmax(mx, fabs(a[i] - b[i]));
  ck_assert_msg(mx / (hi - lo) > 100 * ORDER_REL_TOL, "the context makes no difference (%.3g)",
                mx / (hi - lo));
  /* s2 fed the rest of the prompt after a reset equals s1 */
  ck_assert_int_eq(r.e->M->seq_truncate(r.e->model, s2, 0), 0);
  mi_test_forward(r.e, s2, ids, 12, b, 0);
  ck_assert_double_lt(mi_test_rel_err(b, a, V), ORDER_REL_TOL);
  /* a recurrent state cannot be rewound: only 0 and the current length */
  ck_assert_int_eq(r.e->M->seq_truncate(r.e->model, s1, 12), 0);
  ck_assert_int_ne(r.e->M->seq_truncate(r.e->model, s1, 5), 0);
  ck_assert_int_eq(r.e->M->seq_len(r.e->model, s1), 12);
  /* info: the DeltaNet states are fixed, the KV grows only for full layers */
  const mi_model_info *in = &r.e->info;
  /* tiny: LFLF, 2 full layers × K,V × 2 kv heads × 32; 2 DeltaNet layers ×
   * (3 × C=2·2·16+4·16=128, 4 × 16 × 16) floats */
  ck_assert_uint_eq(in->state_bytes_token, 2u * 2 * 2 * 32 * 4);
  ck_assert_uint_eq(in->state_bytes_fixed, 2u * (3 * 128 + 4 * 16 * 16) * 4);
  ck_assert_uint_gt(in->prefill_flops_token, 0);
  r.e->M->seq_destroy(r.e->model, s1);
  r.e->M->seq_destroy(r.e->model, s2);
  free(a);
  free(b);
  mi_test_session_close(r.e, r.reg);
  free(dir);
}
END_TEST

/* forward_batch (one decode step for several sequences, rows sharing the
 * matmuls) equals a forward of one token per sequence; its refusals leave
 * every sequence where it was. */
START_TEST(batched_decode_equals_single) {
  char *dir = mkmodel("fb", "--family qwen35 --shape tiny-untied --seed 61");
  rt r;
  rt_open(&r, dir, 512);
  const int V = r.V, NS = 3, lens[3] = {5, 9, 14};
  ck_assert_ptr_nonnull(r.e->M->forward_batch);
  mi_seq *a[3], *b[3];
  float *la[3], *lb = malloc((size_t)V * sizeof(float));
  int32_t ids[14];
  for (int i = 0; i < NS; i++) {
    a[i] = mi_test_seq(r.e, 20);
    b[i] = mi_test_seq(r.e, 20);
    la[i] = malloc((size_t)V * sizeof(float));
    mi_test_prompt(ids, lens[i], 100 + i);
    mi_test_forward(r.e, a[i], ids, lens[i], NULL, 0);
    mi_test_forward(r.e, b[i], ids, lens[i], NULL, 0);
  }
  char err[512];
  double worst = 0;
  for (int step = 0; step < 4; step++) {
    int32_t next[3];
    mi_test_prompt(next, NS, 200 + step);
    ck_assert_msg(r.e->M->forward_batch(r.e->model, a, next, NS, la, err, sizeof err) == 0, "%s",
                  err);
    for (int i = 0; i < NS; i++) {
      mi_test_forward(r.e, b[i], next + i, 1, lb, 0);
      worst = fmax(worst, mi_test_rel_err(la[i], lb, V));
      ck_assert_int_eq(r.e->M->seq_len(r.e->model, a[i]), lens[i] + step + 1);
    }
  }
  fprintf(stderr, "forward_batch vs one forward per sequence: %.3g of the spread\n", worst);
  ck_assert_double_lt(worst, ORDER_REL_TOL);
  /* refused before anything changes: the same sequence twice, a full one */
  mi_seq *dup[2] = {a[0], a[0]};
  int32_t two[2] = {1, 2};
  ck_assert_int_ne(r.e->M->forward_batch(r.e->model, dup, two, 2, la, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "appears twice"), "%s", err);
  mi_seq *full = mi_test_seq(r.e, 3);
  mi_test_forward(r.e, full, ids, 3, NULL, 0);
  mi_seq *mixed[2] = {a[1], full};
  ck_assert_int_ne(r.e->M->forward_batch(r.e->model, mixed, two, 2, la, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "is full"), "%s", err);
  ck_assert_int_eq(r.e->M->seq_len(r.e->model, a[1]), lens[1] + 4);
  ck_assert_int_eq(r.e->M->seq_len(r.e->model, full), 3);
  r.e->M->seq_destroy(r.e->model, full);
  for (int i = 0; i < NS; i++) {
    r.e->M->seq_destroy(r.e->model, a[i]);
    r.e->M->seq_destroy(r.e->model, b[i]);
    free(la[i]);
  }
  free(lb);
  mi_test_session_close(r.e, r.reg);
  free(dir);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------ */

static void write_config(const char *dir, json_t *c) {
  char *p = tw_path(dir, "config.json");
  ck_assert_int_eq(json_dump_file(c, p, JSON_INDENT(1)), 0);
  free(p);
}

/* The session's one-line error after applying `edit` to config.json must
 * contain `want`. */
static void refused(const char *dir, json_t *orig, void (*edit)(json_t *), const char *want) {
  json_t *c = json_deep_copy(orig);
  edit(c);
  write_config(dir, c);
  json_decref(c);
  rt r;
  char err[2048] = "";
  ck_assert_msg(rt_open_ex(&r, dir, 512, err, sizeof err) != 0,
                "accepted a config that should fail with \"%s\"", want);
  ck_assert_msg(strstr(err, want), "error \"%s\" does not name \"%s\"", err, want);
  ck_assert_msg(!strchr(err, '\n'), "error is not one line: %s", err);
  mi_registry_free(r.reg);
}

static json_t *text(json_t *c) {
  json_t *t = json_object_get(c, "text_config");
  return t ? t : c;
}
static void e_no_kh(json_t *c) {
  json_object_del(text(c), "linear_num_key_heads");
}
static void e_vh(json_t *c) {
  json_object_set_new(text(c), "linear_num_value_heads", json_integer(3));
}
static void e_types_len(json_t *c) {
  json_array_remove(json_object_get(text(c), "layer_types"), 0);
}
static void e_types_kind(json_t *c) {
  json_array_set_new(json_object_get(text(c), "layer_types"), 1, json_string("sliding_attention"));
}
static void e_gate(json_t *c) {
  json_object_set_new(text(c), "attn_output_gate", json_false());
}
static void e_rot(json_t *c) {
  json_object_set_new(json_object_get(text(c), "rope_parameters"), "partial_rotary_factor",
                      json_real(0.01));
}
static void e_hidden(json_t *c) {
  json_object_set_new(text(c), "hidden_size", json_string("64"));
}
static void e_conv(json_t *c) {
  json_object_set_new(text(c), "linear_conv_kernel_dim", json_integer(3));
}
static void e_dk(json_t *c) {
  json_object_set_new(text(c), "linear_key_head_dim", json_integer(8));
}

START_TEST(bad_configs_named) {
  char *dir = mkmodel("bad", "--family qwen35 --shape tiny --seed 41");
  json_t *orig = mi_test_json_at(dir, "config.json");
  refused(dir, orig, e_no_kh, "missing field \"linear_num_key_heads\"");
  refused(dir, orig, e_vh,
          "linear_num_value_heads\" (3) is not a multiple of linear_num_key_heads (2)");
  refused(dir, orig, e_types_len,
          "\"layer_types\" must be an array of num_hidden_layers (4) strings");
  refused(dir, orig, e_types_kind, "\"layer_types\"[1] = \"sliding_attention\" is neither");
  refused(dir, orig, e_gate, "attn_output_gate\" = false is not supported");
  refused(dir, orig, e_rot, "partial_rotary_factor\" = 0.01 gives 0 rotary channels");
  refused(dir, orig, e_hidden, "field \"hidden_size\" must be an integer");
  /* config and weights disagree: the tensor and its file are named */
  refused(dir, orig, e_conv,
          "linear_attn.conv1d.weight\" has shape [128, 1, 4], config.json implies [128, 1, 3]");
  refused(dir, orig, e_dk,
          "layers.0.linear_attn.in_proj_qkv.weight\" has shape [128, 64], config.json implies [96, "
          "64]");
  json_decref(orig);
  free(dir);
  /* the released layout names its fields under text_config */
  dir = mkmodel("badc", "--family qwen35 --shape tiny --seed 41 --layout conditional");
  orig = mi_test_json_at(dir, "config.json");
  refused(dir, orig, e_no_kh, "missing field \"text_config.linear_num_key_heads\"");
  refused(dir, orig, e_hidden, "field \"text_config.hidden_size\" must be an integer");
  json_decref(orig);
  free(dir);
}
END_TEST

/* A platform without the ABI 1.4 members (e.g. an older GPU plugin) is
 * refused before the load, with a line naming each one the plugin calls:
 * the CPU platform's interface with two of them taken away. */
START_TEST(platform_without_hybrid_kernels_refused) {
  char *dir = mkmodel("pn", "--family qwen35 --shape tiny --seed 71");
  rt r;
  rt_open(&r, dir, 512);
  /* the registry's own entry with its interface swapped for a while (an
   * mi_plugin lives inside the loader's record: not copied) */
  mi_plugin *plat = r.e->platform_plugin;
  const void *orig = plat->iface;
  mi_platform_iface older = *(const mi_platform_iface *)orig;
  older.copy2d = NULL;
  older.gated_delta_rule = NULL;
  plat->iface = &older;
  char err[1024] = "";
  int rc = mi_compat_check(plat, r.e->model_plugin, 1, NULL, err, sizeof err);
  plat->iface = orig;
  ck_assert_int_ne(rc, 0);
  ck_assert_msg(strstr(err, "cannot serve model 'qwen35'") && strstr(err, "copy2d") &&
                    strstr(err, "gated_delta_rule") && !strstr(err, "l2norm"),
                "%s", err);
  ck_assert_int_eq(
      mi_compat_check(r.e->platform_plugin, r.e->model_plugin, 1, NULL, err, sizeof err), 0);
  mi_test_session_close(r.e, r.reg);
  free(dir);
}
END_TEST

/* mi-run picks the plugin by config.json's architecture (both layouts) and
 * generates. */
START_TEST(mi_run_serves_hybrids) {
  const char *layouts[] = {"causal", "conditional"};
  for (int i = 0; i < 2; i++) {
    char args[128], name[32];
    snprintf(args, sizeof args, "--family qwen35 --shape tiny --seed 51 --layout %s", layouts[i]);
    snprintf(name, sizeof name, "run-%s", layouts[i]);
    char *dir = mkmodel(name, args);
    char *out = tw_path(g_dir, "out.txt"), *cmd = NULL;
    ck_assert_int_ge(
        asprintf(
            &cmd,
            "'%s/bin/mi-run' --plugin-dir '%s/lib/metainfer' -m '%s' -p 'Hello there' -n 6 -t 1 "
            "--temp 0 --verbose > '%s' 2>&1",
            build_dir(), build_dir(), dir, out),
        0);
    int rc = system(cmd);
    size_t n = 0;
    char *log = tw_read_all(out, &n);
    ck_assert_msg(rc == 0, "%s failed:\n%s", cmd, log ? log : "");
    free(log);
    free(cmd);
    free(out);
    free(dir);
  }
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite(
      "hybrid_runtime", "runtime", 300, setup, teardown,
      MI_CHECK_TESTS(golden_tiny, golden_tiny_untied, golden_small, reference_tiny,
                     reference_tiny_untied_chunked, reference_released_layout, reference_small,
                     orders_tiny, orders_small, state_is_per_sequence, batched_decode_equals_single,
                     bad_configs_named, platform_without_hybrid_kernels_refused,
                     mi_run_serves_hybrids));
}

int main(void) {
  /* Goldens from an F32 GGUF, the float64 model, prefill = decode: exact
   * tests, so the CPU platform's exact matmul path (its default on
   * AVX512_BF16 hosts rounds prefill activations to bf16, the matmul
   * contract's bf16_activations mode: 0.005-0.04 of the logit spread here). */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  return mi_check_run(suite());
}
