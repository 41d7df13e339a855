/* mi-mkmodel --family qwen35: the hybrid checkpoint read back through the
 * safetensors reader and jansson.
 * Independent expectation: the tensor list is derived here from config.json
 * alone (layer_types, the linear_* fields, heads, head_dim) following HF's
 * Qwen3.5 module layout, not from mi-mkmodel's code; every tensor the config
 * implies must be there with that shape, and nothing else. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core/runtime/safetensors.h"
#include "mi/tensor.h"
#include "tests/safetensors/st_writer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"

static char *g_dir;

static void setup(void) { g_dir = tw_mkdtemp("hybrid-mk"); }
static void teardown(void) {
  tw_rmtree(g_dir);
  free(g_dir);
}

/* Runs mi-mkmodel ARGS; returns its exit status (stderr kept in g_dir). */
static int mkmodel(const char *args) {
  return mi_test_mkmodel(g_dir, args);
}

static char *make(const char *sub, const char *shape, int seed, int shards, const char *dtype) {
  char *out = tw_path(g_dir, sub), *args = NULL;
  ck_assert_int_ge(asprintf(&args, "--family qwen35 --shape %s --out '%s' --seed %d --shards %d --dtype %s", shape,
                            out, seed, shards, dtype),
                   0);
  ck_assert_msg(mkmodel(args) == 0, "mi-mkmodel %s failed", args);
  free(args);
  return out;
}

static json_t *load_config(const char *dir) {
  char *p = tw_path(dir, "config.json");
  json_error_t je;
  json_t *c = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
  ck_assert_msg(c != NULL, "%s: %s", p, je.text);
  free(p);
  return c;
}

static int64_t geti(json_t *c, const char *k) {
  json_t *v = json_object_get(c, k);
  ck_assert_msg(json_is_integer(v) && json_integer_value(v) > 0, "config.json: %s missing", k);
  return json_integer_value(v);
}

/* One expected tensor. */
typedef struct want {
  char name[96];
  int ndim;
  int64_t d[3];
} want;

static void add(want *w, int *n, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, int layer) {
  snprintf(w[*n].name, sizeof w[*n].name, fmt, layer);
  w[*n].ndim = ndim;
  w[*n].d[0] = a;
  w[*n].d[1] = b;
  w[*n].d[2] = c;
  (*n)++;
}

/* The config's own consistency (what a loader of the real model relies on),
 * then the tensor list it implies. Returns the count. */
static int derive(json_t *c, want *w) {
  const int64_t H = geti(c, "hidden_size"), L = geti(c, "num_hidden_layers"), nh = geti(c, "num_attention_heads"),
                nkv = geti(c, "num_key_value_heads"), hd = geti(c, "head_dim"), F = geti(c, "intermediate_size"),
                V = geti(c, "vocab_size"), kh = geti(c, "linear_num_key_heads"),
                vh = geti(c, "linear_num_value_heads"), dk = geti(c, "linear_key_head_dim"),
                dv = geti(c, "linear_value_head_dim"), K = geti(c, "linear_conv_kernel_dim");
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)), "Qwen3_5ForCausalLM");
  ck_assert_str_eq(json_string_value(json_object_get(c, "model_type")), "qwen3_5_text");
  ck_assert_int_eq(nh % nkv, 0);
  ck_assert_int_eq(vh % kh, 0);
  ck_assert(json_is_true(json_object_get(c, "attn_output_gate")));
  json_t *rp = json_object_get(c, "rope_parameters");
  double prf = json_number_value(json_object_get(rp, "partial_rotary_factor"));
  ck_assert(prf > 0 && prf < 1);
  int64_t rot = (int64_t)(hd * prf);
  ck_assert_int_eq(rot % 2, 0);
  int64_t secsum = 0;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(rp, "mrope_section"), i, v) secsum += json_integer_value(v);
  ck_assert_int_eq(secsum, rot / 2); /* the sections cover the rotary frequencies */
  json_t *lt = json_object_get(c, "layer_types");
  ck_assert_int_eq(json_array_size(lt), L);
  json_t *fai = json_object_get(c, "full_attention_interval");
  int nfull = 0;
  int n = 0;
  add(w, &n, 2, V, H, 0, "model.embed_tokens.weight", 0);
  for (int l = 0; l < L; l++) {
    const char *t = json_string_value(json_array_get(lt, l));
    ck_assert_msg(t && (!strcmp(t, "full_attention") || !strcmp(t, "linear_attention")), "layer_types[%d]", l);
    int full = !strcmp(t, "full_attention");
    nfull += full;
    if (fai) ck_assert_int_eq(full, (l + 1) % json_integer_value(fai) == 0); /* HF's default pattern */
    add(w, &n, 1, H, 0, 0, "model.layers.%d.input_layernorm.weight", l);
    if (full) {
      add(w, &n, 2, 2 * nh * hd, H, 0, "model.layers.%d.self_attn.q_proj.weight", l); /* query + gate */
      add(w, &n, 2, nkv * hd, H, 0, "model.layers.%d.self_attn.k_proj.weight", l);
      add(w, &n, 2, nkv * hd, H, 0, "model.layers.%d.self_attn.v_proj.weight", l);
      add(w, &n, 2, H, nh * hd, 0, "model.layers.%d.self_attn.o_proj.weight", l);
      add(w, &n, 1, hd, 0, 0, "model.layers.%d.self_attn.q_norm.weight", l);
      add(w, &n, 1, hd, 0, 0, "model.layers.%d.self_attn.k_norm.weight", l);
    } else {
      add(w, &n, 2, 2 * kh * dk + vh * dv, H, 0, "model.layers.%d.linear_attn.in_proj_qkv.weight", l);
      add(w, &n, 2, vh * dv, H, 0, "model.layers.%d.linear_attn.in_proj_z.weight", l);
      add(w, &n, 2, vh, H, 0, "model.layers.%d.linear_attn.in_proj_b.weight", l);
      add(w, &n, 2, vh, H, 0, "model.layers.%d.linear_attn.in_proj_a.weight", l);
      add(w, &n, 3, 2 * kh * dk + vh * dv, 1, K, "model.layers.%d.linear_attn.conv1d.weight", l);
      add(w, &n, 1, vh, 0, 0, "model.layers.%d.linear_attn.dt_bias", l);
      add(w, &n, 1, vh, 0, 0, "model.layers.%d.linear_attn.A_log", l);
      add(w, &n, 1, dv, 0, 0, "model.layers.%d.linear_attn.norm.weight", l);
      add(w, &n, 2, H, vh * dv, 0, "model.layers.%d.linear_attn.out_proj.weight", l);
    }
    add(w, &n, 1, H, 0, 0, "model.layers.%d.post_attention_layernorm.weight", l);
    add(w, &n, 2, F, H, 0, "model.layers.%d.mlp.gate_proj.weight", l);
    add(w, &n, 2, F, H, 0, "model.layers.%d.mlp.up_proj.weight", l);
    add(w, &n, 2, H, F, 0, "model.layers.%d.mlp.down_proj.weight", l);
  }
  ck_assert_msg(nfull > 0 && nfull < L, "a hybrid has both layer types (llama.cpp's qwen35 needs both)");
  add(w, &n, 1, H, 0, 0, "model.norm.weight", 0);
  if (!json_is_true(json_object_get(c, "tie_word_embeddings"))) add(w, &n, 2, V, H, 0, "lm_head.weight", 0);
  return n;
}

/* prefix: where the text weights live ("model." or the released layout's
 * "model.language_model."); c: the (text) config the list is derived from;
 * beside: how many tensors the layout adds beside the text model (a vision
 * tower under model.visual., a multi-token-prediction head under mtp.). */
static void check_layout_cfg(const char *dir, int dtype, json_t *c, const char *prefix, int beside) {
  want *w = calloc(3 + 16 * (size_t)geti(c, "num_hidden_layers"), sizeof *w);
  int n = derive(c, w);
  char err[512] = "";
  mi_weights *ws = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(ws != NULL, "%s", err);
  ck_assert_uint_eq(mi_weights_count(ws), (size_t)(n + beside)); /* nothing else */
  int under = 0;
  for (size_t k = 0; k < mi_weights_count(ws); k++) {
    mi_weight_info wi;
    ck_assert_int_eq(mi_weights_at(ws, k, &wi), 0);
    under += !strncmp(wi.name, "model.visual.", 13) || !strncmp(wi.name, "mtp.", 4);
  }
  ck_assert_int_eq(under, beside);
  for (int i = 0; i < n; i++) {
    mi_weight_info wi;
    char nm[160];
    if (!strncmp(w[i].name, "model.", 6))
      snprintf(nm, sizeof nm, "%s%s", prefix, w[i].name + 6);
    else
      snprintf(nm, sizeof nm, "%s", w[i].name);
    snprintf(w[i].name, sizeof w[i].name, "%s", nm);
    ck_assert_msg(mi_weights_find(ws, w[i].name, &wi) == 0, "missing %s", w[i].name);
    ck_assert_int_eq(wi.dtype, dtype);
    ck_assert_msg(wi.ndim == w[i].ndim, "%s: ndim %d want %d", w[i].name, wi.ndim, w[i].ndim);
    for (int d = 0; d < w[i].ndim; d++)
      ck_assert_msg(wi.shape[d] == w[i].d[d], "%s: dim %d is %lld want %lld", w[i].name, d,
                    (long long)wi.shape[d], (long long)w[i].d[d]);
  }
  mi_weights_close(ws);
  free(w);
}

static void check_layout(const char *dir, int dtype) {
  json_t *c = load_config(dir);
  check_layout_cfg(dir, dtype, c, "model.", 0);
  json_decref(c);
}

START_TEST(layout_matches_config) {
  const char *shapes[] = {"tiny", "tiny-untied", "probe-attn", "probe-deltanet"};
  for (int s = 0; s < 4; s++) {
    char *d = make(shapes[s], shapes[s], 1, 1, "bf16");
    check_layout(d, MI_DTYPE_BF16);
    free(d);
  }
  char *d = make("f32", "tiny", 1, 3, "f32"); /* sharded f32 reads the same way */
  check_layout(d, MI_DTYPE_F32);
  free(d);
}
END_TEST

/* --layout conditional: the released Qwen3.5 wrapper around the same text
 * model (text_config; weights under model.language_model.; same values),
 * with a vision tower and a multi-token-prediction head beside it. */
START_TEST(conditional_layout) {
  char *a = make("a", "tiny-untied", 9, 1, "bf16");
  char *b = tw_path(g_dir, "b"), *args = NULL;
  ck_assert_int_ge(asprintf(&args, "--family qwen35 --shape tiny-untied --seed 9 --layout conditional --out '%s'", b), 0);
  ck_assert_int_eq(mkmodel(args), 0);
  free(args);
  json_t *c = load_config(b);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
                   "Qwen3_5ForConditionalGeneration");
  ck_assert_str_eq(json_string_value(json_object_get(c, "model_type")), "qwen3_5");
  json_t *tc = json_deep_copy(json_object_get(c, "text_config"));
  ck_assert_ptr_nonnull(tc);
  ck_assert_str_eq(json_string_value(json_object_get(tc, "model_type")), "qwen3_5_text");
  json_object_set_new(tc, "architectures", json_pack("[s]", "Qwen3_5ForCausalLM")); /* derive() checks it */
  check_layout_cfg(b, MI_DTYPE_BF16, tc, "model.language_model.", 8); /* 4 vision, 4 MTP (ckb/models/qwen35.json) */
  /* same values as the causal layout */
  char err[256];
  mi_weights *wa = mi_weights_open(a, err, sizeof err), *wb = mi_weights_open(b, err, sizeof err);
  for (size_t i = 0; i < mi_weights_count(wa); i++) {
    mi_weight_info ia, ib;
    ck_assert_int_eq(mi_weights_at(wa, i, &ia), 0);
    char nm[160];
    snprintf(nm, sizeof nm, "%s%s", strncmp(ia.name, "model.", 6) ? "" : "model.language_model.",
             strncmp(ia.name, "model.", 6) ? ia.name : ia.name + 6);
    ck_assert_msg(mi_weights_find(wb, nm, &ib) == 0, "missing %s", nm);
    ck_assert(ia.nbytes == ib.nbytes && memcmp(ia.data, ib.data, ia.nbytes) == 0);
  }
  mi_weights_close(wa);
  mi_weights_close(wb);
  json_decref(tc);
  json_decref(c);
  free(a);
  free(b);
}
END_TEST

/* The two tiny shapes really differ where the brief asks: tied vs untied and
 * two layer-type patterns. */
START_TEST(shapes_cover_two_patterns) {
  char *a = make("a", "tiny", 1, 1, "bf16"), *b = make("b", "tiny-untied", 1, 1, "bf16");
  json_t *ca = load_config(a), *cb = load_config(b);
  ck_assert(json_is_true(json_object_get(ca, "tie_word_embeddings")));
  ck_assert(json_is_false(json_object_get(cb, "tie_word_embeddings")));
  ck_assert(!json_equal(json_object_get(ca, "layer_types"), json_object_get(cb, "layer_types")));
  /* tiny: value heads a multiple > 1 of key heads (the head repeat) */
  ck_assert_int_gt(geti(ca, "linear_num_value_heads"), geti(ca, "linear_num_key_heads"));
  json_decref(ca);
  json_decref(cb);
  free(a);
  free(b);
}
END_TEST

static char *read_file(const char *dir, const char *name, size_t *n) {
  char *p = tw_path(dir, name);
  char *s = tw_read_all(p, n);
  ck_assert_ptr_nonnull(s);
  free(p);
  return s;
}

START_TEST(seeded_determinism) {
  char *a = make("a", "tiny", 7, 1, "bf16"), *b = make("b", "tiny", 7, 1, "bf16"), *c = make("c", "tiny", 8, 1, "bf16");
  size_t na, nb, nc;
  char *x = read_file(a, "model.safetensors", &na), *y = read_file(b, "model.safetensors", &nb),
       *z = read_file(c, "model.safetensors", &nc);
  ck_assert(na == nb && memcmp(x, y, na) == 0); /* same seed, same bytes */
  ck_assert(na == nc && memcmp(x, z, na) != 0); /* same layout, other values */
  free(x);
  free(y);
  free(z);
  /* every tensor differs between seeds (not only some) */
  char err[256];
  mi_weights *wa = mi_weights_open(a, err, sizeof err), *wc = mi_weights_open(c, err, sizeof err);
  for (size_t i = 0; i < mi_weights_count(wa); i++) {
    mi_weight_info ia, ic;
    ck_assert_int_eq(mi_weights_at(wa, i, &ia), 0);
    ck_assert_int_eq(mi_weights_find(wc, ia.name, &ic), 0);
    ck_assert_msg(memcmp(ia.data, ic.data, ia.nbytes) != 0, "%s does not depend on the seed", ia.name);
  }
  mi_weights_close(wa);
  mi_weights_close(wc);
  free(a);
  free(b);
  free(c);
}
END_TEST

static void moments(const mi_weight_info *wi, double *mean, double *sd) {
  double s = 0, s2 = 0;
  size_t n = wi->nbytes / 2;
  for (size_t i = 0; i < n; i++) {
    double v = mi_bf16_to_f32(((const uint16_t *)wi->data)[i]);
    s += v;
    s2 += v * v;
  }
  *mean = s / (double)n;
  *sd = sqrt(fmax(s2 / (double)n - *mean * *mean, 0));
}

/* Zero-centred norms start near 0 (the model uses 1 + w), the gated
 * DeltaNet norm near 1 (the model uses w): pooled over the tensors. */
START_TEST(norm_centres) {
  char *d = make("s", "tiny-untied", 3, 1, "bf16");
  char err[256];
  mi_weights *w = mi_weights_open(d, err, sizeof err);
  double z = 0, g = 0;
  int nz = 0, ng = 0;
  for (size_t i = 0; i < mi_weights_count(w); i++) {
    mi_weight_info wi;
    ck_assert_int_eq(mi_weights_at(w, i, &wi), 0);
    if (!strstr(wi.name, "norm")) continue;
    double m, sd;
    moments(&wi, &m, &sd);
    ck_assert_msg(sd > 0.05, "%s is constant", wi.name);
    if (strstr(wi.name, "linear_attn.norm"))
      g += m, ng++;
    else
      z += m, nz++;
  }
  ck_assert_int_gt(ng, 0);
  ck_assert_int_gt(nz, 0);
  ck_assert_msg(fabs(z / nz) < 0.05, "zero-centred norms average %g", z / nz);
  ck_assert_msg(fabs(g / ng - 1) < 0.05, "gated norms average %g", g / ng);
  mi_weights_close(w);
  free(d);
}
END_TEST

/* A probe mutes one layer kind: exactly that kind's output projection is zero. */
START_TEST(probes_mute_one_kind) {
  const char *shapes[] = {"probe-attn", "probe-deltanet"};
  const char *muted[] = {"linear_attn.out_proj.weight", "self_attn.o_proj.weight"};
  for (int s = 0; s < 2; s++) {
    char *d = make(shapes[s], shapes[s], 1, 1, "bf16");
    char err[256];
    mi_weights *w = mi_weights_open(d, err, sizeof err);
    ck_assert_ptr_nonnull(w);
    int n = 0;
    for (size_t i = 0; i < mi_weights_count(w); i++) {
      mi_weight_info wi;
      ck_assert_int_eq(mi_weights_at(w, i, &wi), 0);
      int zero = 1;
      for (size_t k = 0; k < wi.nbytes / 2 && zero; k++) zero = ((const uint16_t *)wi.data)[k] == 0;
      int want = strstr(wi.name, muted[s]) != NULL;
      n += want;
      ck_assert_msg(zero == want, "%s: %s is %s", shapes[s], wi.name, zero ? "all zero" : "not zero");
    }
    ck_assert_int_gt(n, 0);
    mi_weights_close(w);
    free(d);
  }
}
END_TEST

START_TEST(cli_errors) {
  char *args = NULL;
  ck_assert_int_ge(asprintf(&args, "--family qwen9 --shape tiny --out '%s/x'", g_dir), 0);
  ck_assert_int_eq(mkmodel(args), 2);
  free(args);
  ck_assert_int_ge(asprintf(&args, "--family qwen35 --shape 8b --out '%s/x'", g_dir), 0);
  ck_assert_int_eq(mkmodel(args), 2); /* a Qwen3 shape is not a hybrid shape */
  free(args);
  ck_assert_int_ge(asprintf(&args, "--shape tiny --layout conditional --out '%s/x'", g_dir), 0);
  ck_assert_int_eq(mkmodel(args), 2); /* the wrapper is Qwen3.5's */
  free(args);
  ck_assert_int_ge(asprintf(&args, "--family qwen35 --shape tiny --layout vlm --out '%s/x'", g_dir), 0);
  ck_assert_int_eq(mkmodel(args), 2);
  free(args);
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite("hybrid_mkmodel", "hybrid_mkmodel", 120, setup, teardown,
                        MI_CHECK_TESTS(layout_matches_config, shapes_cover_two_patterns,
                                       seeded_determinism, norm_centres, probes_mute_one_kind,
                                       conditional_layout, cli_errors));
}

int main(void) {
  return mi_check_run(suite());
}
