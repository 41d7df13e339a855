/* A model directory's weight files against its model contract: every key of
 * the contract's weight map (per-layer keys expanded, conditional keys by
 * their config flag) present with the shape its formulas give on this
 * config.json, and nothing else but what the checkpoint's layout names as
 * unused (report "skipped": prefix -> {why, tensors}). This is the file half
 * of stage 3 (weight loading); the CKB is what says what "complete" means. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/internal.h"
#include "core/util/file.h"
#include "core/runtime/model_input.h"
#include "core/runtime/safetensors.h"

typedef struct cfg_ctx {
  json_t *config;      /* config.json */
  const json_t *model; /* the model contract (fields, defaults, layer kinds) */
  int64_t layer;       /* the current {i} */
} cfg_ctx;

/* A config value as the contract binds it (mi_ckb_config_value). */
static const json_t *cfg_value(cfg_ctx *c, const char *name, size_t len) {
  return mi_ckb_config_value(c->model, c->config, name, len);
}

static int lookup(void *user, const char *name, size_t len, int64_t *out) {
  cfg_ctx *c = user;
  if (len == 1 && name[0] == 'i') return *out = c->layer, 0;
  const json_t *v = cfg_value(c, name, len);
  if (json_is_integer(v)) return *out = json_integer_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

/* "tie_word_embeddings" or "!tie_word_embeddings". */
static int when_holds(cfg_ctx *c, const char *when) {
  if (!when) return 1;
  int neg = when[0] == '!';
  const char *n = when + neg;
  const json_t *v = cfg_value(c, n, strlen(n));
  int on = json_is_true(v);
  return neg ? !on : on;
}

/* "model.layers.{i}.mlp.up_proj.weight" with i = 3. */
static void expand(char *out, size_t n, const char *key, int64_t i) {
  const char *p = strstr(key, "{i}");
  if (!p) snprintf(out, n, "%s", key);
  else snprintf(out, n, "%.*s%lld%s", (int)(p - key), key, (long long)i, p + 3);
}

/* One line into the report's "problems". */
#define problem(r, ...) ckb_line(json_object_get(r, "problems"), __VA_ARGS__)

static void shape_text(char *out, size_t n, const int64_t *s, int nd) {
  size_t l = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < nd && l < n; i++) l += (size_t)snprintf(out + l, n - l, "%s%lld", i ? ", " : "", (long long)s[i]);
  if (l < n) snprintf(out + l, n - l, "]");
}

int mi_ckb_check_weights(const mi_ckb *c, const char *model_dir, json_t **out, char *err,
                         size_t err_len) {
  (void)c;
  *out = NULL;
  char path[4096];
  mi_model_input_config_name(model_dir, path, sizeof path);
  json_t *config = mi_model_input_config(model_dir, 0, err, err_len);
  if (!config) return -1;
  const mi_ckb_entry *model = mi_ckb_find_model(c, json_object_get(config, "architectures"));
  if (!model) {
    snprintf(err, err_len, "%s: no model contract for its architectures", path);
    json_decref(config);
    return -1;
  }
  mi_weights *w = mi_model_input_weights(model_dir, mi_model_input_all_blocks(), err, err_len);
  if (!w) {
    json_decref(config);
    return -1;
  }
  json_t *r = json_pack("{s:s, s:s, s:[], s:{}}", "model_dir", model_dir, "model_contract",
                        model->id, "problems", "dtypes");
  cfg_ctx cc = {config, model->json, 0};
  const json_t *layout = mi_ckb_model_layout(model->json, config); /* a wrapper: renamed keys */
  const char *layers_field = json_string_value(json_object_get(model->json, "layers"));
  int64_t n_layers = 0;
  if (layers_field && lookup(&cc, layers_field, strlen(layers_field), &n_layers) != 0)
    problem(r, "config field '%s' (the layer count) is missing or not an integer", layers_field);

  /* Every tensor of the files is matched at most once. */
  size_t nt = mi_weights_count(w);
  char *seen = calloc(nt ? nt : 1, 1);
  int expected = 0;
  size_t i;
  json_t *spec;
  json_array_foreach(json_object_get(model->json, "weights"), i, spec) {
    const char *key = json_string_value(json_object_get(spec, "key"));
    if (!key || !when_holds(&cc, json_string_value(json_object_get(spec, "when")))) continue;
    int per_layer = json_is_true(json_object_get(spec, "per_layer"));
    const char *only = json_string_value(json_object_get(spec, "layer_kind")); /* in layers of that kind only */
    for (int64_t l = 0; l < (per_layer ? n_layers : 1); l++) {
      char name[512], key_l[512];
      expand(key_l, sizeof key_l, key, l);
      mi_ckb_layout_rename(layout, key_l, name, sizeof name);
      cc.layer = l;
      if (only && per_layer) {
        const char *k = mi_ckb_layer_kind(model->json, config, l);
        if (!k) {
          problem(r, "layer %lld: its kind (the contract's layer_kinds) cannot be told from config.json", (long long)l);
          break;
        }
        if (strcmp(k, only)) continue;
      }
      expected++;
      mi_weight_info wi;
      if (mi_weights_find(w, name, &wi) != 0) {
        problem(r, "missing weight '%s'", name);
        continue;
      }
      for (size_t k = 0; k < nt; k++) {
        mi_weight_info x;
        if (mi_weights_at(w, k, &x) == 0 && !strcmp(x.name, name)) seen[k] = 1;
      }
      json_t *shape = json_object_get(spec, "shape");
      int64_t want[MI_ST_MAX_DIMS];
      int nd = (int)json_array_size(shape), ok = nd <= MI_ST_MAX_DIMS;
      size_t d;
      json_t *dim;
      json_array_foreach(shape, d, dim) {
        char e2[200];
        if (!ok) break;
        if (json_is_integer(dim)) want[d] = json_integer_value(dim);
        else if (mi_expr_eval(json_string_value(dim), lookup, &cc, &want[d], e2, sizeof e2) != 0) {
          problem(r, "weight '%s': shape formula: %s", name, e2);
          ok = 0;
        }
      }
      int same = ok && nd == wi.ndim;
      for (int k = 0; same && k < nd; k++) same = want[k] == wi.shape[k];
      if (ok && !same) {
        char a[128], b[128];
        shape_text(a, sizeof a, wi.shape, wi.ndim);
        shape_text(b, sizeof b, want, nd);
        char *formula = json_dumps(shape, JSON_COMPACT);
        problem(r, "weight '%s' has shape %s; the contract says %s = %s", name, a, b,
                formula ? formula : "?");
        free(formula);
      }
      const char *dn = wi.dtype >= 0 ? mi_dtype_name((mi_dtype)wi.dtype) : "other";
      json_t *cnt = json_object_get(json_object_get(r, "dtypes"), dn);
      json_object_set_new(json_object_get(r, "dtypes"), dn,
                          json_integer(cnt ? json_integer_value(cnt) + 1 : 1));
    }
  }
  json_t *skipped = json_object(); /* prefix -> {why, tensors} */
  for (size_t k = 0; k < nt; k++) {
    mi_weight_info x;
    const char *pre = NULL, *why;
    if (seen[k] || mi_weights_at(w, k, &x) != 0) continue;
    if ((why = mi_ckb_layout_unused(layout, x.name, &pre))) {
      json_t *e = json_object_get(skipped, pre);
      if (!e) json_object_set_new(skipped, pre, e = json_pack("{s:s, s:i}", "why", why, "tensors", 0));
      json_object_set_new(e, "tensors", json_integer(json_integer_value(json_object_get(e, "tensors")) + 1));
    } else {
      problem(r, "unexpected weight '%s' (not in %s)", x.name, model->id);
    }
  }
  json_object_set_new(r, "skipped", skipped);
  free(seen);
  json_object_set_new(r, "expected", json_integer(expected));
  json_object_set_new(r, "found", json_integer((json_int_t)nt));
  int n = (int)json_array_size(json_object_get(r, "problems"));
  mi_weights_close(w);
  json_decref(config);
  *out = r;
  return n;
}
