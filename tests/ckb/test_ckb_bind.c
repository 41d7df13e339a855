/* The binder's grammar (core/ckb/bind.h): every form of a step argument
 * read as the contract schema documents it, each malformed binding refused
 * with a line that quotes it, and a weight's when/fallback followed on the
 * config. The composer and the verifier both read through it; the
 * contracts' own bindings are checked here too, so a binding either
 * consumer would read differently cannot enter ckb/. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/bind.h"
#include "core/ckb/ckb.h"
#include "tests/util/check_main.h"

/* parses into *a (not a copy: a number's spelling lives in a->num, which
 * a->text and a->expr point at) */
static mi_ckb_arg *parse_ok(const char *kind, json_t *v, mi_ckb_arg *a) {
  char err[256] = "";
  ck_assert_msg(mi_ckb_arg_parse(kind, v, a, err, sizeof err) == 0, "%s: %s", kind, err);
  return a;
}

static void parse_bad(const char *kind, const char *text, const char *want) {
  mi_ckb_arg a;
  char err[256] = "";
  json_t *v = text ? json_string(text) : NULL;
  ck_assert_int_eq(mi_ckb_arg_parse(kind, v, &a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, want), "%s \"%s\": got \"%s\", want \"%s\"", kind, text ?: "(null)", err, want);
  ck_assert_ptr_null(strchr(err, '\n'));
  json_decref(v);
}

START_TEST(test_buffers_and_weights) {
  json_t *v = json_string("k_cache@pos0");
  mi_ckb_arg a;
  parse_ok("inout", v, &a);
  ck_assert_int_eq(a.form, MI_ARG_BUFFER);
  ck_assert_uint_eq(a.name_len, 7);
  ck_assert_int_eq(a.row, MI_RT_POS0);
  ck_assert_ptr_null(a.elems);
  json_decref(v);

  v = json_string("qkv_c+2 * heads * d");
  parse_ok("in", v, &a);
  ck_assert_int_eq(a.form, MI_ARG_BUFFER);
  ck_assert_uint_eq(a.name_len, 5);
  ck_assert_int_eq(a.row, -1);
  ck_assert_str_eq(a.elems, "2 * heads * d");
  json_decref(v);

  /* a row and then elements: pos0 rows, then ELEMS elements on (not pos0 + ELEMS rows) */
  v = json_string("x@r0+4");
  parse_ok("out", v, &a);
  ck_assert_int_eq(a.row, MI_RT_R0);
  ck_assert_str_eq(a.elems, "4");
  ck_assert_uint_eq(mi_ckb_arg_buffer_name_len("x@r0+4"), 1);
  json_decref(v);

  v = json_string("weight:model.layers.{i}.mlp.up_proj.weight");
  parse_ok("in", v, &a);
  ck_assert_int_eq(a.form, MI_ARG_WEIGHT);
  ck_assert_str_eq(a.name, "model.layers.{i}.mlp.up_proj.weight");

  parse_bad("in", "x@pos1", "a row is @pos0 or @r0");
  parse_bad("in", "x@T", "a row is @pos0 or @r0");
  parse_bad("in", "x+", "no element offset");
  parse_bad("in", "@pos0", "names no buffer");
  parse_bad("in", "weight:", "names no weight");
  parse_bad("in", NULL, "not bound");
  json_decref(v);
}
END_TEST

/* a binding as JSON (a string or a number), the form it reads as, and the
 * expression or name it carries */
static const struct {
  const char *kind, *json;
  mi_ckb_arg_form form;
  const char *want;
} k_scalars[] = {
    {"i64", "\"num_attention_heads * head_dim\"", MI_ARG_INT, "num_attention_heads * head_dim"},
    {"i32", "\"int:partial_rotary_factor * head_dim\"", MI_ARG_INT_REAL, "partial_rotary_factor * head_dim"},
    {"i64", "64", MI_ARG_INT, "64"}, /* a JSON number binds as its spelling */
    {"f32", "\"config:rms_norm_eps\"", MI_ARG_CONFIG, "rms_norm_eps"},
    {"f32", "\"rsqrt:head_dim\"", MI_ARG_RSQRT, "head_dim"},
    {"f32", "\"sqrt:hidden_size\"", MI_ARG_SQRT, "hidden_size"},
    {"f64", "0.5", MI_ARG_NUMBER, NULL},
    {"dtype", "\"dtype:src\"", MI_ARG_DTYPE_OF, "src"},
    {"dtype", "\"bf16\"", MI_ARG_DTYPE, "bf16"},
    {"ctx", "\"anything\"", MI_ARG_NONE, NULL},
    {"stream", "null", MI_ARG_NONE, NULL},
};

START_TEST(test_scalars_and_dtypes) {
  for (size_t k = 0; k < sizeof k_scalars / sizeof *k_scalars; k++) {
    json_t *v = json_loads(k_scalars[k].json, JSON_DECODE_ANY, NULL);
    ck_assert_ptr_nonnull(v);
    mi_ckb_arg a;
    parse_ok(k_scalars[k].kind, v, &a);
    ck_assert_msg(a.form == k_scalars[k].form, "%s %s: form %d, want %d", k_scalars[k].kind,
                  k_scalars[k].json, a.form, k_scalars[k].form);
    const char *got = a.form == MI_ARG_INT || a.form == MI_ARG_INT_REAL || a.form == MI_ARG_RSQRT || a.form == MI_ARG_SQRT ? a.expr : a.name;
    if (k_scalars[k].want) ck_assert_str_eq(got, k_scalars[k].want);
    if (a.form == MI_ARG_NUMBER) ck_assert(a.number == 0.5);
    json_decref(v);
  }

  parse_bad("f32", "1e-6x", "is not a number");
  parse_bad("f32", "config:", "names no config field");
  parse_bad("f32", "sqrt:", "has no expression");
  parse_bad("dtype", "f8", "dtype:ARG or f32, f16, bf16");
  parse_bad("dtype", "dtype:", "names no argument");
  parse_bad("u8", "1", "unknown argument kind \"u8\"");
  ck_assert_int_eq(mi_ckb_runtime_name("n_ctx", 5), MI_RT_N_CTX);
  ck_assert_int_eq(mi_ckb_runtime_name("pos", 3), -1);
}
END_TEST

START_TEST(test_weight_fallback) {
  json_t *model = json_loads("{\"config\": [{\"name\": \"tie\", \"default\": true}],"
                             " \"weights\": ["
                             "  {\"key\": \"lm_head.weight\", \"when\": \"!tie\", \"fallback\": \"emb\"},"
                             "  {\"key\": \"emb\"},"
                             "  {\"key\": \"gate\", \"when\": \"gated\"},"
                             "  {\"key\": \"lost\", \"when\": \"!tie\", \"fallback\": \"nowhere\"}]}",
                             0, NULL);
  ck_assert_ptr_nonnull(model);
  json_t *tied = json_loads("{}", 0, NULL), *untied = json_loads("{\"tie\": false}", 0, NULL);
  char err[256] = "";
  const json_t *w = mi_ckb_weight_bound(model, tied, "lm_head.weight", err, sizeof err);
  ck_assert_str_eq(json_string_value(json_object_get(w, "key")), "emb"); /* the default holds: tied */
  w = mi_ckb_weight_bound(model, untied, "lm_head.weight", err, sizeof err);
  ck_assert_str_eq(json_string_value(json_object_get(w, "key")), "lm_head.weight");
  ck_assert_ptr_null(mi_ckb_weight_bound(model, tied, "nope", err, sizeof err));
  ck_assert_ptr_nonnull(strstr(err, "weight:nope is not in the contract's weight map"));
  ck_assert_ptr_null(mi_ckb_weight_bound(model, tied, "gate", err, sizeof err));
  ck_assert_ptr_nonnull(strstr(err, "\"gated\" does not hold and it has no fallback"));
  ck_assert_ptr_null(mi_ckb_weight_bound(model, tied, "lost", err, sizeof err));
  ck_assert_ptr_nonnull(strstr(err, "its fallback nowhere is not in"));
  json_decref(model);
  json_decref(tied);
  json_decref(untied);
}
END_TEST

/* every binding of every step of the real CKB's model contracts parses
 * against its operator's signature (an optional step the contract binds
 * no arguments for is described, not generated) */
static void check_steps(const mi_ckb *c, const char *id, const json_t *seq, int *n) {
  size_t i;
  json_t *st;
  json_array_foreach(seq, i, st) {
    if (json_is_true(json_object_get(st, "optional")) && !json_object_get(st, "args")) continue;
    const char *op = json_string_value(json_object_get(st, "operator"));
    const mi_ckb_entry *oe = op ? mi_ckb_find(c, op) : NULL;
    ck_assert_msg(oe, "%s: step %zu calls %s, not in the CKB", id, i, op ?: "(none)");
    size_t k;
    json_t *sa;
    json_array_foreach(json_object_get(json_object_get(oe->json, "signature"), "args"), k, sa) {
      const char *an = json_string_value(json_object_get(sa, "name"));
      mi_ckb_arg a;
      char err[256] = "";
      int rc = mi_ckb_arg_parse(json_string_value(json_object_get(sa, "kind")),
                                json_object_get(json_object_get(st, "args"), an), &a, err, sizeof err);
      ck_assert_msg(rc == 0, "%s: step %s argument %s: %s", id,
                    json_string_value(json_object_get(st, "step")) ?: op, an, err);
      (*n)++;
    }
  }
}

START_TEST(test_ckb_contracts_parse) {
  char err[512], dir[4096];
  const char *src = getenv("MI_SOURCE_DIR");
  ck_assert_msg(src != NULL, "MI_SOURCE_DIR must be set (ctest sets it)");
  snprintf(dir, sizeof dir, "%s/ckb", src);
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  int n = 0, models = 0;
  for (size_t k = 0; k < mi_ckb_count(c); k++) {
    const mi_ckb_entry *e = mi_ckb_at(c, k);
    if (!e->kind || strcmp(e->kind, "model")) continue;
    models++;
    json_t *seqs = mi_ckb_model_sequences(e->json);
    size_t i;
    json_t *seq;
    json_array_foreach(seqs, i, seq) check_steps(c, e->id, seq, &n);
    json_decref(seqs);
  }
  ck_assert_int_ge(models, 2);
  ck_assert_int_gt(n, 100);
  mi_ckb_close(c);
}
END_TEST

int main(void) {
  return mi_check_run(mi_check_suite("ckb_bind", "bind", 60, NULL, NULL,
                                     MI_CHECK_TESTS(test_buffers_and_weights, test_scalars_and_dtypes,
                                                    test_weight_fallback, test_ckb_contracts_parse)));
}
