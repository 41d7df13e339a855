/* mi-mkmodel driven by the model contract alone: a family that exists only as
 * a CKB entry in a temporary CKB copy (Qwen3 without q/k norms, its own
 * architecture string, its own presets) gets a checkpoint, and hostile
 * contract entries get one-line errors naming the contract file.
 *
 * Independent expectations: the tensor list, shapes, dtypes and scales are
 * spelled out here from the test family's definition (not computed by the
 * code under test); the safetensors header is parsed here with jansson (not
 * the runtime's reader); and the CKB's own weight check
 * (mi_ckb_check_weights) and config-field check (mi_ckb_config_gaps), other
 * consumers of the same contract, must accept what was written. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"

static char g_build[1024], g_src[1024], g_tmp[1200], g_ckb[1300], g_tok[1300], g_entry[1400];

/* ---- running mi-mkmodel ---------------------------------------------------- */

typedef struct res {
  int status; /* exit code, or 128 + signal */
  char err[8192];
} res;

/* mi-mkmodel ARGS... (NULL-terminated), stdout to /dev/null, 120 s cap. */
static res mkmodel(const char *const *args) {
  char exe[1200], ef[1300];
  snprintf(exe, sizeof exe, "%s/bin/mi-mkmodel", g_build);
  snprintf(ef, sizeof ef, "%s/err.txt", g_tmp);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int o = open("/dev/null", O_WRONLY), e = open(ef, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    mi_test_exec(exe, args, 120);
  }
  int st;
  ck_assert(waitpid(pid, &st, 0) == pid);
  res r = {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), ""};
  FILE *f = fopen(ef, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(r.err, 1, sizeof r.err - 1, f);
  r.err[n] = 0;
  fclose(f);
  return r;
}


/* ---- the test family: model.qwen3 without q/k norms, as a CKB entry ------ */

#define ARCH "NoQkNormTestForCausalLM"

static json_t *load(const char *path) {
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  ck_assert_msg(j != NULL, "%s: %s", path, je.text);
  return j;
}

static void remove_matching(json_t *arr, const char *field, const char *needle) {
  for (size_t i = json_array_size(arr); i-- > 0;) {
    const char *v = json_string_value(json_object_get(json_array_get(arr, i), field));
    if (v && strstr(v, needle)) json_array_remove(arr, i);
  }
}

/* The derived contract: every mention of the q/k norms removed (weights and
 * steps), its own id, architecture, model_type and presets; no reference
 * plugin and no GGUF mapping (it is nobody's real family). */
static json_t *test_family(void) {
  char p[1300];
  snprintf(p, sizeof p, "%s/ckb/models/qwen3.json", g_src);
  json_t *m = load(p);
  json_object_set_new(m, "id", json_string("model.noqknorm"));
  json_object_set_new(m, "version", json_string("1.0.0"));
  json_object_set_new(m, "architectures", json_pack("[s]", ARCH));
  json_object_set_new(m, "summary", json_string("test family: a Qwen3-like decoder without q/k norms"));
  json_object_del(m, "reference_plugin");
  json_object_del(m, "gguf");
  size_t nw = json_array_size(json_object_get(m, "weights"));
  remove_matching(json_object_get(m, "weights"), "key", ".q_norm.weight");
  remove_matching(json_object_get(m, "weights"), "key", ".k_norm.weight");
  ck_assert_uint_eq(json_array_size(json_object_get(m, "weights")), nw - 2);
  remove_matching(json_object_get(m, "layer_sequence"), "step", "q_norm");
  remove_matching(json_object_get(m, "layer_sequence"), "step", "k_norm");
  json_t *ck = json_object_get(m, "checkpoint");
  ck_assert_ptr_nonnull(ck);
  json_object_del(ck, "default"); /* the CKB's default family stays the curated one */
  json_t *cfg = json_object_get(ck, "config");
  json_object_set_new(cfg, "architectures", json_pack("[s]", ARCH));
  json_object_set_new(cfg, "model_type", json_string("noqknorm"));
  json_object_set_new(
      ck, "presets",
      json_pack("{s:{s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:i}}}", "wide", "doc", "untied, 3 layers", "config",
                "hidden_size", 96, "num_hidden_layers", 3, "num_attention_heads", 6, "num_key_value_heads", 2,
                "head_dim", 16, "intermediate_size", 160, "tie_word_embeddings", 0, "max_position_embeddings", 2048));
  return m;
}

static void put_entry(json_t *m) {
  ck_assert_int_eq(json_dump_file(m, g_entry, JSON_INDENT(2)), 0);
}

static void setup(void) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  ck_assert_msg(b && s, "MI_BUILD_DIR / MI_SOURCE_DIR not set (run through ctest)");
  snprintf(g_build, sizeof g_build, "%s", b);
  snprintf(g_src, sizeof g_src, "%s", s);
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mi-mkmodel-contract-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_tmp));
  snprintf(g_ckb, sizeof g_ckb, "%s/ckb", g_tmp);
  snprintf(g_tok, sizeof g_tok, "%s/tok", g_tmp);
  snprintf(g_entry, sizeof g_entry, "%s/models/noqknorm.json", g_ckb);
  ck_assert_int_eq(mi_test_sh("cp -r '%s/ckb' '%s' && mkdir '%s' && echo '{\"stub\": 1}' > '%s/tokenizer.json' && "
                      "echo '{\"stub\": 2}' > '%s/tokenizer_config.json'",
                      g_src, g_ckb, g_tok, g_tok, g_tok),
                   0);
  json_t *m = test_family();
  put_entry(m);
  json_decref(m);
}

static void teardown(void) { mi_test_sh("rm -rf '%s'", g_tmp); }

/* ---- reading what was written, independently ------------------------------ */

/* The safetensors header of dir/model.safetensors (jansson keeps its key
 * order) and the file's bytes. */
static json_t *st_header(const char *dir, unsigned char **bytes, size_t *size) {
  char p[1400];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n);
  ck_assert(fread(b, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
  ck_assert(hl % 8 == 0 && 8 + hl <= (uint64_t)n);
  json_error_t je;
  json_t *h = json_loadb((const char *)b + 8, hl, JSON_REJECT_DUPLICATES, &je);
  ck_assert_msg(h != NULL, "header: %s", je.text);
  *bytes = b;
  *size = (size_t)n;
  return h;
}

static double bf16(const unsigned char *p) {
  uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

typedef struct want {
  char name[96];
  int64_t d0, d1; /* d1 = 0: one dimension */
} want;

START_TEST(family_from_a_ckb_entry_alone) {
  char out[1400];
  snprintf(out, sizeof out, "%s/m", g_tmp);
  const char *a[] = {"--ckb", g_ckb, "--family", "noqknorm", "--shape", "wide", "--seed", "4", "--out", out,
                     "--tokenizer-dir", g_tok, NULL};
  res r = mkmodel(a);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);

  /* the tensors: Qwen3's with no q_norm / k_norm, untied, in model order */
  const int64_t H = 96, L = 3, Q = 6 * 16, KV = 2 * 16, F = 160, V = 151936;
  want w[64];
  int n = 0;
#define ADD(a0, a1, ...) (snprintf(w[n].name, sizeof w[n].name, __VA_ARGS__), w[n].d0 = a0, w[n].d1 = a1, n++)
  ADD(V, H, "model.embed_tokens.weight");
  for (int l = 0; l < L; l++) {
    ADD(H, 0, "model.layers.%d.input_layernorm.weight", l);
    ADD(Q, H, "model.layers.%d.self_attn.q_proj.weight", l);
    ADD(KV, H, "model.layers.%d.self_attn.k_proj.weight", l);
    ADD(KV, H, "model.layers.%d.self_attn.v_proj.weight", l);
    ADD(H, Q, "model.layers.%d.self_attn.o_proj.weight", l);
    ADD(H, 0, "model.layers.%d.post_attention_layernorm.weight", l);
    ADD(F, H, "model.layers.%d.mlp.gate_proj.weight", l);
    ADD(F, H, "model.layers.%d.mlp.up_proj.weight", l);
    ADD(H, F, "model.layers.%d.mlp.down_proj.weight", l);
  }
  ADD(H, 0, "model.norm.weight");
  ADD(V, H, "lm_head.weight");
#undef ADD
  unsigned char *bytes;
  size_t size;
  json_t *h = st_header(out, &bytes, &size);
  ck_assert_uint_eq(json_object_size(h), (size_t)n + 1); /* + __metadata__ */
  void *it = json_object_iter_next(h, json_object_iter(h));
  uint64_t hl = 0, off = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)bytes[i] << (8 * i);
  for (int i = 0; i < n; i++, it = json_object_iter_next(h, it)) {
    ck_assert_ptr_nonnull(it);
    ck_assert_str_eq(json_object_iter_key(it), w[i].name); /* model order */
    json_t *e = json_object_iter_value(it);
    ck_assert_str_eq(json_string_value(json_object_get(e, "dtype")), "BF16");
    json_t *s = json_object_get(e, "shape");
    ck_assert_uint_eq(json_array_size(s), w[i].d1 ? 2 : 1);
    ck_assert_int_eq(json_integer_value(json_array_get(s, 0)), w[i].d0);
    if (w[i].d1) ck_assert_int_eq(json_integer_value(json_array_get(s, 1)), w[i].d1);
    json_t *o = json_object_get(e, "data_offsets");
    uint64_t bytes_n = (uint64_t)w[i].d0 * (uint64_t)(w[i].d1 ? w[i].d1 : 1) * 2;
    ck_assert_uint_eq((uint64_t)json_integer_value(json_array_get(o, 0)), off);
    ck_assert_uint_eq((uint64_t)json_integer_value(json_array_get(o, 1)), off + bytes_n);
    /* the contract's random_init, as a property of the values: norms 1 + 0.1 z,
     * o_proj 3 / sqrt(Q * 2L), the rest of the projections 1 / sqrt(fan_in) */
    const unsigned char *d = bytes + 8 + hl + off;
    size_t cnt = (size_t)(bytes_n / 2);
    double sum = 0, sq = 0;
    for (size_t k = 0; k < cnt; k++) sum += bf16(d + 2 * k), sq += bf16(d + 2 * k) * bf16(d + 2 * k);
    double mean = sum / (double)cnt, sd = sqrt(sq / (double)cnt - mean * mean);
    double want_mean = strstr(w[i].name, "norm") ? 1 : 0, want_sd = strstr(w[i].name, "norm") ? 0.1 : 1 / sqrt((double)H);
    if (strstr(w[i].name, "o_proj")) want_sd = 3 / sqrt((double)Q * 2 * L);
    if (strstr(w[i].name, "down_proj")) want_sd = 8 / sqrt((double)F * 2 * L);
    if (strstr(w[i].name, "embed") || strstr(w[i].name, "lm_head")) want_sd = 5 / sqrt((double)H);
    double tol = cnt >= 4096 ? 0.05 : 0.25; /* a 96-element norm estimates its sd within ~15 % */
    ck_assert_msg(fabs(mean - want_mean) < 0.2 * want_sd + 0.01 && fabs(sd / want_sd - 1) < tol,
                  "%s: mean %g sd %g, want %g and %g", w[i].name, mean, sd, want_mean, want_sd);
    off += bytes_n;
  }
  ck_assert_uint_eq(8 + hl + off, size); /* nothing after the last tensor */
  json_decref(h);
  free(bytes);

  /* config.json: the preset's values in the template's key order, the test
   * family's architecture, and nothing the contract does not account for */
  char p[1500];
  snprintf(p, sizeof p, "%s/config.json", out);
  json_t *c = load(p);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)), ARCH);
  ck_assert_str_eq(json_string_value(json_object_get(c, "model_type")), "noqknorm");
  ck_assert_int_eq(json_integer_value(json_object_get(c, "hidden_size")), H);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "num_hidden_layers")), L);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "num_attention_heads")), 6);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "max_window_layers")), L);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "max_position_embeddings")), 2048);
  ck_assert(json_is_false(json_object_get(c, "tie_word_embeddings")));
  ck_assert_str_eq(json_string_value(json_object_get(c, "torch_dtype")), "bfloat16");
  json_t *fam = test_family();
  json_t *tmpl = json_object_get(json_object_get(fam, "checkpoint"), "config");
  ck_assert_uint_eq(json_object_size(c), json_object_size(tmpl));
  void *ic = json_object_iter(c), *itm = json_object_iter(tmpl);
  for (; ic && itm; ic = json_object_iter_next(c, ic), itm = json_object_iter_next(tmpl, itm))
    ck_assert_str_eq(json_object_iter_key(ic), json_object_iter_key(itm));

  mi_ckb *ckb = mi_ckb_open(g_ckb, p, sizeof p);
  ck_assert_msg(ckb != NULL, "%s", p);
  /* the derived entry, checkpoint block and random_init included, is valid CKB data */
  ck_assert_int_eq(mi_ckb_validate_entry(ckb, fam, g_entry, NULL, NULL), 0);
  json_decref(fam);
  json_t *report = NULL;
  char err[600];
  int problems = mi_ckb_check_weights(ckb, out, &report, err, sizeof err);
  char *rs = report ? json_dumps(report, JSON_COMPACT) : NULL;
  ck_assert_msg(problems == 0, "weight check: %d (%s) %s", problems, err, rs ? rs : "");
  ck_assert_str_eq(json_string_value(json_object_get(report, "model_contract")), "model.noqknorm");
  free(rs);
  json_decref(report);
  json_t *gaps = json_array();
  ck_assert_uint_eq(mi_ckb_config_gaps(mi_ckb_find(ckb, "model.noqknorm"), c, gaps), 0);
  json_decref(gaps);
  mi_ckb_close(ckb);
  json_decref(c);

  /* the id works as well as the name, and --list-shapes lists the family */
  snprintf(out, sizeof out, "%s/m2", g_tmp);
  const char *a2[] = {"--ckb", g_ckb, "--family", "model.noqknorm", "--shape", "wide", "--seed", "4", "--out", out,
                      "--tokenizer-dir", g_tok, NULL};
  r = mkmodel(a2);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_int_eq(mi_test_sh("cmp -s '%s/m/model.safetensors' '%s/m2/model.safetensors'", g_tmp, g_tmp), 0);
  ck_assert_int_eq(mi_test_sh("'%s/bin/mi-mkmodel' --ckb '%s' --list-shapes | grep -q '^  noqknorm *wide '", g_build, g_ckb), 0);
}
END_TEST

/* ---- hostile contract entries ------------------------------------------------ */

/* Runs the test family's shape `wide` with the contract edited by `edit`;
 * expects exit 2 and one stderr line naming the contract file and `what`. */
static void hostile(void (*edit)(json_t *m), const char *what, const char *layout) {
  json_t *m = test_family();
  edit(m);
  put_entry(m);
  json_decref(m);
  char out[1400];
  snprintf(out, sizeof out, "%s/bad", g_tmp);
  const char *a[] = {"--ckb", g_ckb, "--family", "noqknorm", "--shape", "wide", "--out", out, "--tokenizer-dir", g_tok,
                     layout ? "--layout" : NULL, layout, NULL};
  res r = mkmodel(a);
  ck_assert_msg(r.status == 2, "%s: exit %d: %s", what, r.status, r.err);
  char *nl = strchr(r.err, '\n');
  ck_assert_msg(nl && nl[1] == 0, "%s: not one line: %s", what, r.err);
  ck_assert_msg(strstr(r.err, "models/noqknorm.json") && strstr(r.err, what), "%s: %s", what, r.err);
  ck_assert_int_ne(access(out, F_OK), 0); /* nothing written */
}

static json_t *wcfg(json_t *m) {
  return json_object_get(json_object_get(json_object_get(json_object_get(m, "checkpoint"), "presets"), "wide"),
                         "config");
}
static json_t *weight(json_t *m, const char *key) {
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(m, "weights"), i, w) if (!strcmp(json_string_value(json_object_get(w, "key")), key)) return w;
  ck_abort_msg("no weight %s", key);
  return NULL;
}
#define OPROJ "model.layers.{i}.self_attn.o_proj.weight"

static void e_bad_init_expr(json_t *m) {
  json_object_set_new(json_object_get(weight(m, OPROJ), "random_init"), "std", json_string("3 / (hidden_size"));
}
static void e_unknown_init_name(json_t *m) {
  json_object_set_new(json_object_get(weight(m, OPROJ), "random_init"), "fan", json_string("no_such_field * 2"));
}
static void e_no_init(json_t *m) { json_object_del(weight(m, OPROJ), "random_init"); }
static void e_init_not_object(json_t *m) { json_object_set_new(weight(m, OPROJ), "random_init", json_string("ones")); }
static void e_zero_fan(json_t *m) {
  json_object_set_new(json_object_get(weight(m, OPROJ), "random_init"), "fan", json_string("hidden_size - 96"));
}
static void e_bad_shape(json_t *m) {
  json_array_set_new(json_object_get(weight(m, OPROJ), "shape"), 1, json_string("num_attention_heads *"));
}
static void e_negative_dim(json_t *m) {
  json_array_set_new(json_object_get(weight(m, OPROJ), "shape"), 1, json_string("0 - head_dim"));
}
static void e_huge_dim(json_t *m) {
  json_array_set_new(json_object_get(weight(m, OPROJ), "shape"), 1, json_string("1000000 * 1000000"));
}
static void e_shape_not_array(json_t *m) { json_object_set_new(weight(m, OPROJ), "shape", json_integer(4)); }
static void e_missing_field(json_t *m) { json_object_del(wcfg(m), "intermediate_size"); }
static void e_unused_field(json_t *m) { json_object_set_new(wcfg(m), "rope_kind", json_string("yarn")); }
static void e_layers_not_int(json_t *m) { json_object_set_new(wcfg(m), "num_hidden_layers", json_string("three")); }
static void e_bad_order(json_t *m) {
  json_object_set_new(json_object_get(m, "checkpoint"), "order", json_pack("[s]", "model.embed_tokens.weight"));
}
static void e_order_unknown(json_t *m) {
  json_object_set_new(json_object_get(m, "checkpoint"), "order", json_pack("[s]", "model.nothing.weight"));
}
static void e_foreign_arch(json_t *m) {
  json_object_set_new(json_object_get(json_object_get(m, "checkpoint"), "config"), "architectures",
                      json_pack("[s]", "SomeoneElsesForCausalLM"));
}
static void e_no_checkpoint(json_t *m) { json_object_set_new(m, "checkpoint", json_integer(5)); }
static void e_presets_array(json_t *m) { json_object_set_new(json_object_get(m, "checkpoint"), "presets", json_array()); }
static void e_override_unknown(json_t *m) {
  json_object_set_new(json_object_get(json_object_get(json_object_get(m, "checkpoint"), "presets"), "wide"), "init",
                      json_pack("{s:{s:i}}", "model.layers.{i}.self_attn.q_norm.weight", "std", 0));
}
static void e_per_layer_no_i(json_t *m) { json_object_set_new(weight(m, OPROJ), "key", json_string("model.o.weight")); }
static void e_nothing(json_t *m) { (void)m; }

START_TEST(hostile_contract_entries_give_one_line) {
  hostile(e_bad_init_expr, "random_init.std", NULL);
  hostile(e_unknown_init_name, "no_such_field", NULL);
  hostile(e_no_init, "random_init", NULL);
  hostile(e_init_not_object, "random_init", NULL);
  hostile(e_zero_fan, "fan > 0", NULL);
  hostile(e_bad_shape, "shape[1]", NULL);
  hostile(e_negative_dim, "shape[1]", NULL);
  hostile(e_huge_dim, "shape[1]", NULL);
  hostile(e_shape_not_array, "shape must be", NULL);
  hostile(e_missing_field, "$intermediate_size", NULL);
  hostile(e_unused_field, "rope_kind", NULL);
  hostile(e_layers_not_int, "num_hidden_layers", NULL);
  hostile(e_bad_order, "not in checkpoint.order", NULL);
  hostile(e_order_unknown, "not a weight key", NULL);
  hostile(e_foreign_arch, "SomeoneElsesForCausalLM", NULL);
  hostile(e_no_checkpoint, "no \"checkpoint\"", NULL);
  hostile(e_presets_array, "presets", NULL);
  hostile(e_override_unknown, "q_norm", NULL);
  hostile(e_per_layer_no_i, "{i}", NULL);
  hostile(e_nothing, "no layout 'vlm'", "vlm");
}
END_TEST

/* The CKB's curated default family and the error for a family the CKB lacks. */
START_TEST(family_resolution) {
  char out[1400];
  snprintf(out, sizeof out, "%s/x", g_tmp);
  const char *a[] = {"--ckb", g_ckb, "--family", "nosuch", "--shape", "tiny", "--out", out, NULL};
  res r = mkmodel(a);
  ck_assert_int_eq(r.status, 2);
  ck_assert_msg(strstr(r.err, "model.nosuch") && strstr(r.err, "noqknorm") && !strchr(strchr(r.err, '\n') + 1, '\n'),
                "%s", r.err);
  /* no --family: the one contract marked checkpoint.default, whatever else the CKB holds */
  const char *b[] = {"--ckb", g_ckb, "--shape", "wide", "--out", out, "--tokenizer-dir", g_tok, NULL};
  r = mkmodel(b);
  ck_assert_int_eq(r.status, 2); /* wide is the test family's, not the default's */
  ck_assert_msg(strstr(r.err, "unknown shape 'wide'"), "%s", r.err);
  /* two defaults: refused, naming the CKB */
  json_t *m = test_family();
  json_object_set_new(json_object_get(m, "checkpoint"), "default", json_true());
  put_entry(m);
  json_decref(m);
  r = mkmodel(b);
  ck_assert_int_eq(r.status, 2);
  ck_assert_msg(strstr(r.err, "more than one") && strstr(r.err, g_ckb), "%s", r.err);
}
END_TEST

/* --config of a number the template states (vocab_size) sizes the tensors
 * that follow it: the embedding has as many rows as config.json says (it
 * kept the family's 151936 rows under another vocab_size before); a name or
 * a list is only written to config.json. */
START_TEST(config_numbers_size_the_tensors) {
  char out[1400];
  snprintf(out, sizeof out, "%s/v", g_tmp);
  const char *a[] = {"--ckb", g_ckb, "--shape", "tiny", "--out", out, "--tokenizer-dir", g_tok, "--config", "vocab_size=1000",
                     "--config", "rope_theta=10000", NULL};
  res r = mkmodel(a);
  ck_assert_msg(r.status == 0, "%s", r.err);
  unsigned char *bytes;
  size_t size;
  json_t *h = st_header(out, &bytes, &size);
  json_t *shape = json_object_get(json_object_get(h, "model.embed_tokens.weight"), "shape");
  ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 1000);
  char p[1500];
  snprintf(p, sizeof p, "%s/config.json", out);
  json_t *cfg = load(p);
  ck_assert_int_eq(json_integer_value(json_object_get(cfg, "vocab_size")), 1000);
  ck_assert(json_number_value(json_object_get(cfg, "rope_theta")) == 10000);
  json_decref(cfg);
  json_decref(h);
  free(bytes);
}
END_TEST

/* mi-mkmodel and the planner it uses name no family: the families are the
 * CKB's (issue 26). Case-insensitive, comments included. */
START_TEST(mkmodel_names_no_family) {
  const char *files[] = {"core/cli/mi-mkmodel.c", "core/ckb/checkpoint.c"};
  for (int i = 0; i < 2; i++) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_src, files[i]);
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "%s", p);
    char line[4096];
    for (int ln = 1; fgets(line, sizeof line, f); ln++) {
      for (char *c = line; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
      ck_assert_msg(!strstr(line, "qwen") && !strstr(line, "forcausallm") && !strstr(line, "llama"), "%s:%d names a family: %s",
                    files[i], ln, line);
    }
    fclose(f);
  }
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite("mkmodel_contract", "mkmodel_contract", 300, setup, teardown,
                        MI_CHECK_TESTS(family_from_a_ckb_entry_alone,
                                       hostile_contract_entries_give_one_line, family_resolution,
                                       config_numbers_size_the_tensors, mkmodel_names_no_family));
}

int main(void) {
  return mi_check_run(suite());
}
