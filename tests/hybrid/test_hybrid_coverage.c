/* The coverage check on a hybrid checkpoint (core/ckb/coverage.c): not
 * covered, and each gap named in its own line against the closest model
 * contract (model.qwen3). The expected lines are derived here from the
 * checkpoint's config.json (layer lists, shapes), not copied from a run;
 * and mi-gen stops with exit 3 printing them. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/wait.h>

#include "core/ckb/ckb.h"
#include "tests/safetensors/st_writer.h"
#include "tests/util/check_main.h"

static char *g_dir;
static void setup(void) { g_dir = tw_mkdtemp("hybrid-cov"); }
static void teardown(void) {
  tw_rmtree(g_dir);
  free(g_dir);
}

static char *mkmodel(const char *shape) {
  char *out = NULL, *cmd = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/%s", g_dir, shape), 0);
  ck_assert_int_ge(asprintf(&cmd, "'%s/bin/mi-mkmodel' --family qwen35 --shape %s --seed 4 --out '%s' >/dev/null",
                            getenv("MI_BUILD_DIR"), shape, out),
                   0);
  ck_assert_msg(system(cmd) == 0, "%s", cmd);
  free(cmd);
  return out;
}

/* The report's "missing" line equal to want, or starting with it when prefix. */
static int has_line(json_t *r, const char *want, int prefix) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(r, "missing"), i, v) {
    const char *s = json_string_value(v);
    if (s && (prefix ? !strncmp(s, want, strlen(want)) : !strcmp(s, want))) return 1;
  }
  return 0;
}

#define HAS(r, prefix, ...)                                                          \
  do {                                                                               \
    char w_[600];                                                                    \
    snprintf(w_, sizeof w_, __VA_ARGS__);                                            \
    char *all_ = json_dumps(json_object_get(r, "missing"), JSON_INDENT(1));          \
    ck_assert_msg(has_line(r, w_, prefix), "no line '%s' in %s", w_, all_);          \
    free(all_);                                                                      \
  } while (0)

static void layers_of(json_t *cfg, const char *type, char *out, size_t n) {
  size_t i, l = 0;
  json_t *v;
  out[0] = 0;
  json_array_foreach(json_object_get(cfg, "layer_types"), i, v) if (!strcmp(json_string_value(v), type)) l +=
      (size_t)snprintf(out + l, n - l, "%s%zu", l ? ", " : "", i);
}

/* The CKB before evolution: ckb/ without the entries `mi-gen --evolve`
 * wrote (provenance evolved) and the platform kernels naming them
 * (mi_ckb_export_curated): what the gap report is about. */
static void curated_ckb(char *dst, size_t n) {
  char err[1024], src[1024];
  snprintf(src, sizeof src, "%s/ckb", getenv("MI_SOURCE_DIR"));
  snprintf(dst, n, "%s/curated-ckb", g_dir);
  if (access(dst, F_OK) == 0) return;
  mi_ckb *c = mi_ckb_open(src, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  int left = -1;
  ck_assert_msg(mi_ckb_export_curated(c, dst, &left, err, sizeof err) == 0, "%s", err);
  mi_ckb_close(c);
}

static void check_shape(const char *shape) {
  char *dir = mkmodel(shape);
  char *cp = tw_path(dir, "config.json");
  json_t *cfg = json_load_file(cp, 0, NULL);
  ck_assert_ptr_nonnull(cfg);
  free(cp);
  char err[1024], src[1024];
  curated_ckb(src, sizeof src);
  mi_ckb *c = mi_ckb_open(src, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  json_t *r = NULL;
  ck_assert_int_eq(mi_ckb_coverage(c, dir, "cpu", &r, err, sizeof err), 1);
  ck_assert(json_is_false(json_object_get(r, "covered")));
  /* the architecture, first (what tests/ckb and mi-gen rely on), then the comparison */
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "missing"), 0)),
                   "model contract for architecture Qwen3_5ForCausalLM");
  HAS(r, 1, "architecture Qwen3_5ForCausalLM (model_type qwen3_5_text): closest contract model.qwen3@");
  ck_assert_ptr_nonnull(json_string_value(json_object_get(r, "closest_model_contract")));
  /* config fields */
  const char *fields[] = {"linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads",
                          "linear_num_value_heads", "linear_value_head_dim"};
  for (int i = 0; i < 5; i++)
    HAS(r, 0, "config field '%s' = %lld: model.qwen3 does not read it", fields[i],
        json_integer_value(json_object_get(cfg, fields[i])));
  HAS(r, 0, "config field 'attn_output_gate' = true: model.qwen3 does not read it");
  HAS(r, 0, "config field 'rope_parameters.partial_rotary_factor' = 0.25: model.qwen3 does not read it");
  HAS(r, 1, "config field 'rope_theta' is absent; model.qwen3 would assume ");
  /* layer types, with the layers each covers */
  char lin[200], full[200];
  layers_of(cfg, "linear_attention", lin, sizeof lin);
  layers_of(cfg, "full_attention", full, sizeof full);
  HAS(r, 0, "layer type 'linear_attention' (layers %s): model.qwen3 has a single kind of decoder layer", lin);
  HAS(r, 0, "layer type 'full_attention' (layers %s): model.qwen3 has a single kind of decoder layer", full);
  /* weights: unmapped, reshaped (q_proj carries the gate), absent, zero-centred */
  const char *lw[] = {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_a.weight", "in_proj_b.weight",
                      "conv1d.weight",      "A_log",            "dt_bias",          "norm.weight",
                      "out_proj.weight"};
  for (int i = 0; i < 9; i++) HAS(r, 1, "weight 'model.layers.{i}.linear_attn.%s' [", lw[i]);
  const long long H = json_integer_value(json_object_get(cfg, "hidden_size")),
                  Q = json_integer_value(json_object_get(cfg, "num_attention_heads")) *
                      json_integer_value(json_object_get(cfg, "head_dim"));
  HAS(r, 0,
      "weight 'model.layers.{i}.self_attn.q_proj.weight' is [%lld, %lld] in layers %s; model.qwen3 says [%lld, %lld] = "
      "[\"num_attention_heads * head_dim\",\"hidden_size\"]",
      2 * Q, H, full, Q, H);
  HAS(r, 0, "weight 'model.layers.{i}.self_attn.o_proj.weight' is absent in layers %s; model.qwen3 expects it in every "
      "layer", lin);
  HAS(r, 1, "weight 'model.layers.{i}.input_layernorm.weight' averages ");
  HAS(r, 1, "weight 'model.norm.weight' averages ");
  /* operators and the platform's kernels */
  const char *ops[] = {"operator.gated_delta_rule", "operator.conv1d_causal", "operator.l2norm",
                       "operator.rmsnorm_gated", "operator.sigmoid_mul"};
  for (int i = 0; i < 5; i++) {
    HAS(r, 1, "operator contract '%s' (", ops[i]);
    HAS(r, 1, "platform 'platform.cpu' provides no kernel for '%s' (implied by ", ops[i]);
  }
  HAS(r, 1, "variant: rotary on %d of head_dim %lld channels (partial_rotary_factor 0.25)",
      (int)(json_integer_value(json_object_get(cfg, "head_dim")) / 4),
      json_integer_value(json_object_get(cfg, "head_dim")));
  /* nothing a Qwen3 layer shares is reported: the MLP weights match */
  ck_assert(!has_line(r, "weight 'model.layers.{i}.mlp.up_proj.weight'", 1));
  json_decref(r);
  mi_ckb_close(c);

  /* mi-gen stops with exit 3 and prints the gaps */
  char *cmd = NULL;
  ck_assert_int_ge(asprintf(&cmd, "'%s/bin/mi-gen' --model '%s' --platform cpu --dtype f32 --tp 1 --out '%s/eng' "
                                  "--ckb '%s' 2>'%s/gen.txt' >/dev/null",
                            getenv("MI_BUILD_DIR"), dir, g_dir, src, g_dir),
                   0);
  int st = system(cmd);
  free(cmd);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 3);
  char *gp = tw_path(g_dir, "gen.txt");
  size_t n = 0;
  char *out = tw_read_all(gp, &n);
  ck_assert_ptr_nonnull(out);
  out = realloc(out, n + 1);
  out[n] = 0;
  ck_assert_msg(strstr(out, "missing: operator contract 'operator.gated_delta_rule'"), "%s", out);
  ck_assert_msg(strstr(out, "missing: layer type 'linear_attention'"), "%s", out);
  free(out);
  free(gp);
  json_decref(cfg);
  free(dir);
}

START_TEST(gaps_tiny) { check_shape("tiny"); }
END_TEST
START_TEST(gaps_tiny_untied) { check_shape("tiny-untied"); }
END_TEST

/* The released layout (Qwen3_5ForConditionalGeneration): the text model
 * under text_config and model.language_model. is what gets compared. */
START_TEST(gaps_released_layout) {
  char *out = NULL, *cmd = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/cond", g_dir), 0);
  ck_assert_int_ge(asprintf(&cmd, "'%s/bin/mi-mkmodel' --family qwen35 --shape tiny --layout conditional --out '%s' "
                                  ">/dev/null",
                            getenv("MI_BUILD_DIR"), out),
                   0);
  ck_assert_int_eq(system(cmd), 0);
  char err[1024], src[1024];
  curated_ckb(src, sizeof src);
  mi_ckb *c = mi_ckb_open(src, err, sizeof err);
  json_t *r = NULL;
  ck_assert_int_eq(mi_ckb_coverage(c, out, "cpu", &r, err, sizeof err), 1);
  HAS(r, 0, "model contract for architecture Qwen3_5ForConditionalGeneration");
  HAS(r, 1, "config: a wrapper layout; the model inside (model_type qwen3_5_text, weights renamed "
            "{\"model.\":\"model.language_model.\"}) is compared below, the tensors under [\"model.visual.\",\"mtp.\"] "
            "are not read");
  HAS(r, 1, "architecture Qwen3_5ForConditionalGeneration (model_type qwen3_5): closest contract model.qwen3@");
  HAS(r, 0, "config field 'linear_num_value_heads' = 4: model.qwen3 does not read it");
  HAS(r, 0, "layer type 'linear_attention' (layers 0, 2): model.qwen3 has a single kind of decoder layer");
  HAS(r, 1, "weight 'model.layers.{i}.linear_attn.A_log' [4] in layers 0, 2: not in model.qwen3");
  HAS(r, 1, "operator contract 'operator.gated_delta_rule' (");
  ck_assert(!has_line(r, "config field 'text_config.", 1));
  /* the vision tower and the multi-token-prediction head are not compared */
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(r, "missing"), i, v) {
    const char *s = json_string_value(v);
    ck_assert_msg(!strstr(s, "'mtp.") && !strstr(s, "'model.visual.") && !strstr(s, "vision_config"), "%s", s);
  }
  json_decref(r);
  mi_ckb_close(c);
  /* the shipped CKB (model.qwen35 with that layout) covers it as it is */
  snprintf(src, sizeof src, "%s/ckb", getenv("MI_SOURCE_DIR"));
  c = mi_ckb_open(src, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  r = NULL;
  ck_assert_int_eq(mi_ckb_coverage(c, out, "cpu", &r, err, sizeof err), 0);
  ck_assert_str_eq(json_string_value(json_object_get(r, "model_contract")) ?: "", "model.qwen35@1.2.0");
  json_decref(r);
  mi_ckb_close(c);
  free(cmd);
  free(out);
}
END_TEST

/* A Qwen3 checkpoint stays covered: the gap report is only for what is not. */
START_TEST(qwen3_still_covered) {
  char *out = NULL, *cmd = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/q3", g_dir), 0);
  ck_assert_int_ge(asprintf(&cmd, "'%s/bin/mi-mkmodel' --shape tiny --out '%s' >/dev/null", getenv("MI_BUILD_DIR"),
                            out),
                   0);
  ck_assert_int_eq(system(cmd), 0);
  char err[1024], src[1024];
  snprintf(src, sizeof src, "%s/ckb", getenv("MI_SOURCE_DIR"));
  mi_ckb *c = mi_ckb_open(src, err, sizeof err);
  json_t *r = NULL;
  ck_assert_int_eq(mi_ckb_coverage(c, out, "cpu", &r, err, sizeof err), 0);
  ck_assert_int_eq(json_array_size(json_object_get(r, "missing")), 0);
  ck_assert_ptr_null(json_object_get(r, "closest_model_contract"));
  json_decref(r);
  mi_ckb_close(c);
  free(cmd);
  free(out);
}
END_TEST

static void print_diag(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "%s\n", line);
}

/* The shipped CKB holds what evolution learned (provenance evolved): it
 * covers the hybrid on the CPU platform, and its curated base, with those
 * entries left out, is the CKB the gap report above is about. */
START_TEST(evolved_ckb_covers_the_hybrid) {
  char *dir = mkmodel("tiny");
  char err[1024], src[1024], cur[1024];
  snprintf(src, sizeof src, "%s/ckb", getenv("MI_SOURCE_DIR"));
  mi_ckb *c = mi_ckb_open(src, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  json_t *r = NULL;
  ck_assert_int_eq(mi_ckb_coverage(c, dir, "cpu", &r, err, sizeof err), 0);
  ck_assert_msg(json_array_size(json_object_get(r, "missing")) == 0, "%s", json_dumps(r, 0));
  const mi_ckb_entry *m = mi_ckb_find(c, "model.qwen35");
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m->json, "provenance"), "source")), "evolved");
  json_decref(r);
  snprintf(cur, sizeof cur, "%s/curated-2", g_dir);
  int left = 0;
  ck_assert_int_eq(mi_ckb_export_curated(c, cur, &left, err, sizeof err), 0);
  ck_assert_int_ge(left, 2); /* the model contract and the operators at least */
  ck_assert_int_eq(mi_ckb_export_curated(c, cur, &left, err, sizeof err), -1); /* never over an existing folder */
  ck_assert_ptr_nonnull(strstr(err, "exists already"));
  mi_ckb_close(c);
  c = mi_ckb_open(cur, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  ck_assert_ptr_null(mi_ckb_find(c, "model.qwen35"));
  ck_assert_int_eq(mi_ckb_validate(c, print_diag, NULL), 0);
  ck_assert_int_eq(mi_ckb_coverage(c, dir, "cpu", &r, err, sizeof err), 1);
  json_decref(r);
  mi_ckb_close(c);
  free(dir);
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite("hybrid_coverage", "coverage", 120, setup, teardown,
                        MI_CHECK_TESTS(gaps_tiny, gaps_tiny_untied, gaps_released_layout,
                                       qwen3_still_covered, evolved_ckb_covers_the_hybrid));
}

int main(void) {
  return mi_check_run(suite());
}
