/* Every config.json field accounted for, and the hand-written plugins
 * agreeing with the contract about it.
 *
 * For each model contract of the real CKB (its family checkpoint made by
 * mi-mkmodel), driven by the contract's own lists rather than by names
 * written here:
 *   - each bound field with "values": a value outside them makes coverage
 *     report that field (not covered), mi-verify exit 3 naming it, and the
 *     contract's reference plugin refuse to load, naming it too;
 *   - each inert field without "values": another value changes nothing
 *     for the reference plugin (same greedy tokens) and stays covered;
 *   - a field no contract knows is a gap, and a required field absent is.
 * Plus the four cases a user hits on a Qwen3 checkpoint (GELU, sliding
 * window, q/k/v bias, an unknown rope_scaling type) and sandwich norms
 * (weights outside the map), each naming the field or weight. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"

static char g_dir[] = "/tmp/mi-cfgfields.XXXXXX";
/* MI_TEST_QUICK (the sanitizer tree, tests/CMakeLists.txt): every field
 * through coverage and, where refused, through the reference plugin (each
 * field its own check there); mi-verify's refusal (one gap check for every
 * field) on the first field of each contract, and the inert fields' mi-run
 * comparison on the first 3 of each contract (the plugin ignores them all
 * alike). The Release run runs both on every field. */
static int g_quick;
enum { QUICK_INERT_RUNS = 3 };
static const char *B, *S;
static mi_ckb *g_ckb;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  char *b = calloc(1, 1 << 16);
  size_t n = fread(b, 1, (1 << 16) - 1, f);
  b[n] = 0;
  fclose(f);
  return b;
}

static void make_family(const char *family, const char *out) {
  ck_assert_int_eq(mi_test_sh("'%s/bin/mi-mkmodel' --family %s --shape tiny --seed 3 --out '%s' >/dev/null", B, family, out), 0);
}

/* A copy of src (weights and tokenizer hard-linked: the loader refuses
 * a symlink out of the folder) whose config.json is cfg. */
static void variant(const char *src, const char *dst, json_t *cfg) {
  ck_assert_int_eq(mi_test_sh("rm -rf '%s' && cp -al '%s' '%s' && rm '%s/config.json'", dst, src, dst, dst), 0);
  char p[512];
  snprintf(p, sizeof p, "%s/config.json", dst);
  ck_assert_int_eq(json_dump_file(cfg, p, JSON_INDENT(1)), 0);
}

/* Sets a dotted path in a config (objects created on the way). */
static void set_path(json_t *cfg, const char *path, json_t *v) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *o = cfg;
  char *p = buf;
  for (char *dot; (dot = strchr(p, '.')); p = dot + 1) {
    *dot = 0;
    json_t *n = json_object_get(o, p);
    if (!json_is_object(n)) json_object_set_new(o, p, n = json_object());
    o = n;
  }
  json_object_set_new(o, p, v);
}

static const char *where(json_t *e) {
  const char *p = json_string_value(json_object_get(e, "path"));
  return p ? p : json_string_value(json_object_get(e, "name"));
}

/* A value of the field's type outside its "values" (or, for inert
 * fields, simply another one). */
static json_t *other_value(json_t *e, json_t *now) {
  json_t *vals = json_object_get(e, "values");
  json_t *first = json_array_get(vals, 0);
  const char *type = json_string_value(json_object_get(e, "type"));
  if (json_is_boolean(first)) return json_boolean(!json_is_true(first));
  if (json_is_string(first)) return json_sprintf("%s_not_this", json_string_value(first));
  if (json_is_null(first) || (type && !strcmp(type, "object"))) return json_pack("{s:s, s:f}", "rope_type", "yarn", "factor", 4.0);
  if (json_is_integer(first) || json_is_integer(now)) return json_integer((json_is_integer(now) ? json_integer_value(now) : 0) + 7);
  if (json_is_number(first) || json_is_number(now)) return json_real((json_is_number(now) ? json_number_value(now) : 1) * 3);
  if (json_is_array(now)) return json_pack("[i]", 7);
  return json_string("another value");
}

static json_t *coverage(const char *dir, int want_rc) {
  json_t *r = NULL;
  char err[1024];
  int rc = mi_ckb_coverage(g_ckb, dir, "cpu", &r, err, sizeof err);
  char *all = r ? json_dumps(json_object_get(r, "missing"), JSON_INDENT(1)) : strdup(err);
  ck_assert_msg(rc == want_rc, "%s: coverage %d, want %d: %s", dir, rc, want_rc, all);
  free(all);
  return r;
}

static int has_line(json_t *r, const char *start, const char *also) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(r, "missing"), i, v) {
    const char *s = json_string_value(v);
    if (s && !strncmp(s, start, strlen(start)) && (!also || strstr(s, also))) return 1;
  }
  return 0;
}

/* mi-verify --stage 2 on the model: exit code; its stderr in *out */
static int verify(const char *dir, char **out) {
  char log[512];
  snprintf(log, sizeof log, "%s/verify.log", g_dir);
  int rc = mi_test_sh("'%s/bin/mi-verify' --platform-plugin '%s/lib/metainfer/libmi-cpu.so' --ckb '%s/ckb' --stage 2 "
              "--model '%s' --only operator.add >/dev/null 2>'%s'", B, B, S, dir, log);
  *out = slurp(log);
  return rc;
}

/* mi-run, 4 greedy tokens: exit code; stdout+stderr in *out */
static int run(const char *dir, char **out) {
  char log[512];
  snprintf(log, sizeof log, "%s/run.log", g_dir);
  int rc = mi_test_sh("'%s/bin/mi-run' -m '%s' -p 'Hello there' -n 4 --temp 0 -t 1 --json >'%s' 2>&1", B, dir, log);
  *out = slurp(log);
  return rc;
}

static void setup(void) {
  g_quick = getenv("MI_TEST_QUICK") != NULL;
  B = getenv("MI_BUILD_DIR");
  S = getenv("MI_SOURCE_DIR");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  char p[512], err[1024];
  snprintf(p, sizeof p, "%s/ckb", S);
  g_ckb = mi_ckb_open(p, err, sizeof err);
  ck_assert_msg(g_ckb, "%s", err);
}

static void teardown(void) {
  mi_ckb_close(g_ckb);
  mi_test_sh("rm -rf '%s'", g_dir);
}

/* Each model contract with a reference plugin and a mi-mkmodel family. */
static void each_contract(void (*fn)(const mi_ckb_entry *m, const char *base)) {
  int n = 0;
  for (size_t i = 0; i < mi_ckb_count(g_ckb); i++) {
    const mi_ckb_entry *m = mi_ckb_at(g_ckb, i);
    if (!m->kind || strcmp(m->kind, "model")) continue;
    /* an absorbed family (model.qwen2, ...) has neither: engines are its only runner */
    if (!json_object_get(m->json, "checkpoint") || !json_object_get(m->json, "reference_plugin")) continue;
    const char *fam = strchr(m->id, '.') + 1;
    char base[512];
    snprintf(base, sizeof base, "%s/%s", g_dir, fam);
    make_family(fam, base);
    fn(m, base);
    n++;
  }
  ck_assert_int_ge(n, 2);
}

static void supported_values(const mi_ckb_entry *m, const char *base) {
  char cp[600], *out;
  snprintf(cp, sizeof cp, "%s/config.json", base);
  json_decref(coverage(base, 0)); /* as made: every field accounted for */
  ck_assert_int_eq(run(base, &out), 0);
  free(out);
  size_t i;
  json_t *e;
  int checked = 0;
  json_array_foreach(json_object_get(m->json, "config"), i, e) {
    if (!json_object_get(e, "values")) continue;
    json_t *cfg = json_load_file(cp, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    json_t *bad = other_value(e, NULL);
    char *shown = json_dumps(bad, JSON_ENCODE_ANY | JSON_COMPACT);
    set_path(cfg, where(e), bad);
    char dst[600], start[300];
    snprintf(dst, sizeof dst, "%s-bad-%s", base, where(e));
    variant(base, dst, cfg);
    json_decref(cfg);
    snprintf(start, sizeof start, "config field '%s' = ", where(e));
    json_t *r = coverage(dst, 1);
    ck_assert_msg(has_line(r, start, "supports only"), "%s: coverage does not name %s = %s", m->id, where(e), shown);
    json_decref(r);
    if (!g_quick || checked == 0) {
      ck_assert_int_eq(verify(dst, &out), 3);
      ck_assert_msg(strstr(out, start) && strstr(out, "supports only"), "mi-verify on %s = %s:\n%s", where(e), shown, out);
      free(out);
    }
    /* the hand-written plugin refuses it too, naming the field */
    int rc = run(dst, &out);
    const char *leaf = strrchr(where(e), '.') ? strrchr(where(e), '.') + 1 : where(e);
    ck_assert_msg(rc != 0 && strstr(out, leaf), "%s: the reference plugin ran %s = %s (exit %d):\n%s", m->id, where(e),
                  shown, rc, out);
    free(out);
    free(shown);
    checked++;
  }
  ck_assert_int_ge(checked, 2);
}

static void inert_fields(const mi_ckb_entry *m, const char *base) {
  char cp[600], *want, *got;
  snprintf(cp, sizeof cp, "%s/config.json", base);
  ck_assert_int_eq(run(base, &want), 0);
  size_t i;
  json_t *e;
  int checked = 0;
  json_array_foreach(json_object_get(m->json, "config_inert"), i, e) {
    if (json_object_get(e, "values") || json_object_get(e, "items")) continue; /* inert only at those */
    json_t *cfg = json_load_file(cp, 0, NULL);
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *now = json_object_get(cfg, name);
    set_path(cfg, name, other_value(e, now));
    char dst[600];
    snprintf(dst, sizeof dst, "%s-inert-%s", base, name);
    variant(base, dst, cfg);
    json_decref(cfg);
    json_decref(coverage(dst, 0));
    checked++;
    if (g_quick && checked > QUICK_INERT_RUNS) continue;
    ck_assert_msg(run(dst, &got) == 0, "%s: inert %s changed: the reference plugin refused:\n%s", m->id, name, got);
    /* the same tokens: only the id lines (not timings) */
    const char *a = strstr(want, "\"prompt_ids\""), *b = strstr(got, "\"prompt_ids\"");
    ck_assert_msg(a && b, "no JSON output:\n%s", got);
    ck_assert_msg(!strcmp(a, b), "%s: inert %s changed the output:\n%s\nvs\n%s", m->id, name, a, b);
    free(got);
  }
  free(want);
  ck_assert_int_ge(checked, 5);
}

static void unknown_and_absent(const mi_ckb_entry *m, const char *base) {
  char cp[600], dst[600], *out;
  snprintf(cp, sizeof cp, "%s/config.json", base);
  json_t *cfg = json_load_file(cp, 0, NULL);
  json_object_set_new(cfg, "mi_unheard_of_field", json_integer(3));
  snprintf(dst, sizeof dst, "%s-unknown", base);
  variant(base, dst, cfg);
  json_t *r = coverage(dst, 1);
  char want[300];
  snprintf(want, sizeof want, "config field 'mi_unheard_of_field' = 3: %s does not read it", m->id);
  ck_assert(has_line(r, want, NULL));
  json_decref(r);
  ck_assert_int_eq(verify(dst, &out), 3);
  ck_assert_msg(strstr(out, want), "%s", out);
  free(out);
  json_decref(cfg);
  /* a required field absent */
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(m->json, "config"), i, e) if (json_is_true(json_object_get(e, "required"))) {
    cfg = json_load_file(cp, 0, NULL);
    ck_assert_int_eq(json_object_del(cfg, where(e)), 0);
    snprintf(dst, sizeof dst, "%s-absent", base);
    variant(base, dst, cfg);
    json_decref(cfg);
    r = coverage(dst, 1);
    snprintf(want, sizeof want, "config field '%s' is absent; %s requires it", where(e), m->id);
    ck_assert_msg(has_line(r, want, NULL), "%s", want);
    json_decref(r);
    break;
  }
}

START_TEST(supported_values_refused_everywhere) { each_contract(supported_values); }
END_TEST
START_TEST(inert_fields_change_nothing) { each_contract(inert_fields); }
END_TEST
START_TEST(unknown_field_and_absent_field_are_gaps) { each_contract(unknown_and_absent); }
END_TEST

/* What a user tries on a Qwen3 checkpoint, written out: each one line
 * naming the field (or the weights). */
START_TEST(qwen3_variants_a_user_meets) {
  char base[512], dst[600], *out;
  snprintf(base, sizeof base, "%s/q3", g_dir);
  make_family("qwen3", base);
  char cp[600];
  snprintf(cp, sizeof cp, "%s/config.json", base);
  const struct {
    const char *name, *json, *line;
  } cases[] = {
      {"gelu", "{\"hidden_act\": \"gelu_pytorch_tanh\"}",
       "config field 'hidden_act' = \"gelu_pytorch_tanh\": model.qwen3 supports only \"silu\""},
      {"sliding", "{\"use_sliding_window\": true, \"sliding_window\": 8}",
       "config field 'use_sliding_window' = true: model.qwen3 supports only false"},
      {"bias", "{\"attention_bias\": true}", "config field 'attention_bias' = true: model.qwen3 supports only false"},
      {"rope", "{\"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 8.0}}",
       "config field 'rope_scaling' = {\"rope_type\":\"longrope\",\"factor\":8.0}: model.qwen3 supports only null"},
      {"swa_layers", "{\"layer_types\": [\"sliding_attention\", \"full_attention\"]}",
       "config field 'layer_types' has \"sliding_attention\" at index 0: model.qwen3 supports only \"full_attention\" in it"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    json_t *cfg = json_load_file(cp, 0, NULL);
    json_t *patch = json_loads(cases[k].json, 0, NULL);
    ck_assert_ptr_nonnull(patch);
    json_object_update(cfg, patch);
    json_decref(patch);
    snprintf(dst, sizeof dst, "%s-%s", base, cases[k].name);
    variant(base, dst, cfg);
    json_decref(cfg);
    json_t *r = coverage(dst, 1);
    char *all = json_dumps(json_object_get(r, "missing"), JSON_INDENT(1));
    ck_assert_msg(has_line(r, cases[k].line, NULL), "%s: no line '%s' in %s", cases[k].name, cases[k].line, all);
    free(all);
    json_decref(r);
    ck_assert_int_eq(verify(dst, &out), 3);
    ck_assert_msg(strstr(out, cases[k].line), "%s", out);
    free(out);
  }
  /* sandwich norms: weights the map does not have (post_feedforward_layernorm) */
  snprintf(dst, sizeof dst, "%s-sandwich", g_dir);
  ck_assert_int_eq(mi_test_sh("cp -r '%s' '%s' && node -e \"\n"
                      "const fs=require('fs');const p=process.argv[1]+'/model.safetensors';const b=fs.readFileSync(p);\n"
                      "const n=Number(b.readBigUInt64LE(0));const h=JSON.parse(b.slice(8,8+n).toString());\n"
                      "const data=b.slice(8+n);let end=data.length;const add={};\n"
                      "for(let l=0;l<2;l++){add['model.layers.'+l+'.post_feedforward_layernorm.weight']={dtype:'F32',shape:[64],data_offsets:[end,end+256]};end+=256;}\n"
                      "Object.assign(h,add);let hs=Buffer.from(JSON.stringify(h));const pad=(8-hs.length%%8)%%8;hs=Buffer.concat([hs,Buffer.alloc(pad,32)]);\n"
                      "const len=Buffer.alloc(8);len.writeBigUInt64LE(BigInt(hs.length));\n"
                      "fs.writeFileSync(p,Buffer.concat([len,hs,data,Buffer.alloc(512)]));\" '%s'",
                      base, dst, dst), 0);
  json_t *r = coverage(dst, 1);
  ck_assert(has_line(r, "weight 'model.layers.{i}.post_feedforward_layernorm.weight' [64] in layers 0, 1: not in model.qwen3's weight map", NULL));
  json_decref(r);
}
END_TEST

/* A field the contract derives (default_expr): the value when config.json
 * lacks it, config.json's own when present, the plain default when the
 * expression cannot be evaluated (a field missing, fields deriving each
 * other), and neither the config nor the contract written to (one config is
 * read under many candidate contracts during evolution). */
START_TEST(derived_defaults) {
  json_t *m = json_loads("{\"config\": ["
                         "{\"name\": \"hidden_size\", \"type\": \"integer\", \"meaning\": \"x\"},"
                         "{\"name\": \"num_attention_heads\", \"type\": \"integer\", \"meaning\": \"x\"},"
                         "{\"name\": \"head_dim\", \"type\": \"integer\", \"meaning\": \"x\", \"default\": 128,"
                         " \"default_expr\": \"hidden_size / num_attention_heads\"},"
                         "{\"name\": \"a\", \"type\": \"integer\", \"meaning\": \"x\", \"default\": 7, \"default_expr\": \"b + 1\"},"
                         "{\"name\": \"b\", \"type\": \"integer\", \"meaning\": \"x\", \"default\": 9, \"default_expr\": \"a + 1\"}]}",
                         0, NULL);
  json_t *cfg = json_loads("{\"hidden_size\": 896, \"num_attention_heads\": 14}", 0, NULL);
  ck_assert_ptr_nonnull(m);
  char *before_m = json_dumps(m, JSON_SORT_KEYS), *before_c = json_dumps(cfg, JSON_SORT_KEYS);
  const json_t *v = mi_ckb_config_value(m, cfg, "head_dim", 8);
  ck_assert_int_eq(json_integer_value(v), 64); /* Qwen2.5-0.5B: 896 / 14 */
  /* fields deriving each other: the plain default, whichever is asked */
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "a", 1)), 7);
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "b", 1)), 9);
  char *after_m = json_dumps(m, JSON_SORT_KEYS), *after_c = json_dumps(cfg, JSON_SORT_KEYS);
  ck_assert_str_eq(before_m, after_m);
  ck_assert_str_eq(before_c, after_c);
  /* config.json's own value wins; an expression over a missing field gives the default */
  json_object_set_new(cfg, "head_dim", json_integer(128));
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "head_dim", 8)), 128);
  json_object_del(cfg, "head_dim");
  json_object_del(cfg, "num_attention_heads");
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "head_dim", 8)), 128);
  free(before_m), free(before_c), free(after_m), free(after_c);
  json_decref(m);
  json_decref(cfg);
}
END_TEST

int main(void) {
  if (getenv("MI_TEST_QUICK"))
    fprintf(stderr, "test_config_fields: MI_TEST_QUICK: mi-verify on one refused field per contract, mi-run on %d inert "
                    "fields per contract (every field: the Release run)\n", (int)QUICK_INERT_RUNS);
  Suite *s = mi_check_suite(
      "config_fields", "fields", 300, setup, teardown,
      MI_CHECK_TESTS(supported_values_refused_everywhere, inert_fields_change_nothing,
                     unknown_field_and_absent_field_are_gaps, qwen3_variants_a_user_meets, derived_defaults));
  return mi_check_run(s);
}
