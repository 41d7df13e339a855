/* A random-weight checkpoint planned from a model contract (ckb.h, used by
 * mi-mkmodel): the contract's "checkpoint" block says how the family's
 * Hugging Face files look (config.json as a template in key order, named
 * presets of config values, other layouts), its weight map says which
 * tensors exist and their shapes, and each weight's "random_init" how its
 * values are drawn. Nothing here knows a family: a new one is a CKB entry.
 *
 * Template strings: "$FIELD" is FIELD's value from the preset, else the
 * built-in torch_dtype, else (for the layer-kind array of a contract with
 * layer_kinds) the kinds its interval rule gives, else the contract's
 * default for FIELD; "$FIELD?" takes no default and is left out when none
 * of the others has it (a field some presets write and others omit). In a
 * layout's template "$config" is the causal config.json (less config_drop).
 *
 * Every problem is one line naming the contract file and what is wrong. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"

typedef struct plan_ctx {
  const mi_ckb_entry *model;
  const char *preset;      /* its name, for messages */
  const json_t *pcfg;      /* the preset's config values */
  json_t *used;            /* pcfg keys a template read: {name: true} */
  const char *torch_dtype; /* the built-in $torch_dtype */
  json_t *inner;           /* "$config" in a layout template; NULL in the causal one */
  char *err;
  size_t err_len;
  int failed;
} plan_ctx;

static void fail(plan_ctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(plan_ctx *p, const char *fmt, ...) {
  if (p->failed++) return; /* the first problem is the one reported */
  char msg[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(p->err, p->err_len, "%s: %s", p->model->path, msg);
}

static const json_t *ckpt_of(const mi_ckb_entry *m) { return json_object_get(m->json, "checkpoint"); }

/* The layer kinds of a contract with layer_kinds whose preset gives only the
 * interval: what mi_ckb_layer_kind says for each layer of the preset. */
static json_t *derived_kinds(plan_ctx *p) {
  const json_t *m = p->model->json;
  const char *lf = json_string_value(json_object_get(m, "layers"));
  const json_t *nl = lf ? mi_ckb_config_value(m, p->pcfg, lf, strlen(lf)) : NULL;
  if (!json_is_integer(nl) || json_integer_value(nl) < 0 || json_integer_value(nl) > 100000) {
    fail(p, "checkpoint.presets.%s: the layer count '%s' is missing or not an integer in 0..100000", p->preset,
         lf ? lf : "(the contract has no \"layers\")");
    return NULL;
  }
  json_t *a = json_array();
  for (json_int_t l = 0; l < json_integer_value(nl); l++) {
    const char *k = mi_ckb_layer_kind(m, p->pcfg, l);
    if (!k) {
      fail(p, "checkpoint.presets.%s: layer %lld: its kind cannot be told (the preset sets neither the layer-kind "
              "array nor a usable interval)", p->preset, (long long)l);
      json_decref(a);
      return NULL;
    }
    json_array_append_new(a, json_string(k));
  }
  return a;
}

/* A template reference's value (a new reference), or NULL when there is none;
 * an optional one takes no default (the field is the preset's to give). */
static json_t *resolve(plan_ctx *p, const char *name, int optional) {
  if (p->inner && !strcmp(name, "config")) return json_deep_copy(p->inner);
  const json_t *v = json_object_get(p->pcfg, name);
  if (v) {
    json_object_set_new(p->used, name, json_true());
    return json_deep_copy(v);
  }
  if (!strcmp(name, "torch_dtype") && p->torch_dtype) return json_string(p->torch_dtype);
  const json_t *lk = json_object_get(p->model->json, "layer_kinds");
  const char *kn = json_string_value(json_object_get(lk, "config"));
  if (kn && !strcmp(kn, name)) return derived_kinds(p);
  const json_t *f = optional ? NULL : mi_ckb_named(json_object_get(p->model->json, "config"), "name", name);
  const json_t *d = f ? json_object_get(f, "default") : NULL;
  return d ? json_deep_copy(d) : NULL;
}

/* The template `t` with its references replaced; NULL on a problem (p->failed)
 * or for an optional reference without a value (*omit set). */
static json_t *subst(plan_ctx *p, const json_t *t, const char *where, int *omit) {
  *omit = 0;
  if (p->failed) return NULL;
  if (json_is_string(t) && json_string_value(t)[0] == '$' && json_string_value(t)[1]) {
    char name[128];
    const char *s = json_string_value(t) + 1;
    size_t n = strlen(s);
    int optional = s[n - 1] == '?';
    if (optional) n--;
    if (n == 0 || n >= sizeof name) {
      fail(p, "checkpoint: %s: '%s' is not a field reference", where, json_string_value(t));
      return NULL;
    }
    memcpy(name, s, n);
    name[n] = 0;
    json_t *v = resolve(p, name, optional);
    if (!v && !p->failed) {
      if (optional) *omit = 1;
      else fail(p, "checkpoint: %s: '$%s' has no value (not in preset '%s', no default in the contract)", where, name,
                p->preset);
    }
    return v;
  }
  if (json_is_object(t)) {
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)t, k, v) {
      char w[300];
      snprintf(w, sizeof w, "%s.%s", where, k);
      int skip;
      json_t *r = subst(p, v, w, &skip);
      if (r) json_object_set_new(o, k, r);
      else if (!skip) break;
    }
    if (p->failed) json_decref(o);
    return p->failed ? NULL : o;
  }
  if (json_is_array(t)) {
    json_t *a = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(t, i, v) {
      char w[300];
      snprintf(w, sizeof w, "%s[%zu]", where, i);
      int skip;
      json_t *r = subst(p, v, w, &skip);
      if (r) json_array_append_new(a, r);
      else if (!skip) break;
    }
    if (p->failed) json_decref(a);
    return p->failed ? NULL : a;
  }
  return json_deep_copy(t);
}

/* ---- weights --------------------------------------------------------------- */

typedef mi_ckb_layer_ctx eval_ctx;

int mi_ckb_layer_lookup(void *user, const char *name, size_t len, int64_t *out) {
  const mi_ckb_layer_ctx *e = user;
  if (len == 1 && name[0] == 'i') return *out = e->layer, 0;
  const json_t *v = mi_ckb_config_value(e->model, e->cfg, name, len);
  if (json_is_integer(v)) return *out = json_integer_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

static int lookup_f64(void *user, const char *name, size_t len, double *out) {
  eval_ctx *e = user;
  if (len == 1 && name[0] == 'i') return *out = (double)e->layer, 0;
  const json_t *v = mi_ckb_config_value(e->model, e->cfg, name, len);
  if (json_is_number(v)) return *out = json_number_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

/* One random_init member: a number or a real expression; `dflt` when absent
 * (NAN: required). */
static int init_value(plan_ctx *p, eval_ctx *e, const json_t *init, const char *member, double dflt, const char *key,
                      double *out) {
  const json_t *v = json_object_get(init, member);
  if (!v) {
    if (isnan(dflt)) {
      fail(p, "weight '%s': random_init has no \"%s\"", key, member);
      return -1;
    }
    return *out = dflt, 0;
  }
  if (json_is_number(v)) {
    *out = json_number_value(v);
    if (isfinite(*out)) return 0;
  } else if (json_is_string(v)) {
    char e2[300];
    if (mi_expr_eval_f64(json_string_value(v), lookup_f64, e, out, e2, sizeof e2) == 0) return 0;
    fail(p, "weight '%s': random_init.%s: %s", key, member, e2);
    return -1;
  }
  fail(p, "weight '%s': random_init.%s is neither a number nor an expression", key, member);
  return -1;
}

/* "model.layers.{i}.mlp.up_proj.weight" with i = 3 (the first {i}, as the
 * weight check expands it); -1 when it does not fit. */
static int expand(char *out, size_t n, const char *key, int64_t i) {
  const char *q = strstr(key, "{i}");
  int k = q ? snprintf(out, n, "%.*s%lld%s", (int)(q - key), key, (long long)i, q + 3) : snprintf(out, n, "%s", key);
  return k < 0 || (size_t)k >= n ? -1 : 0;
}

static int add_tensor(plan_ctx *p, mi_ckb_ckpt *ck, size_t *cap, eval_ctx *e, const json_t *w, const json_t *init,
                      int64_t layer) {
  const char *key = json_string_value(json_object_get(w, "key"));
  if (*cap == ck->n) {
    size_t nc = *cap ? 2 * *cap : 64;
    mi_ckb_ckpt_tensor *t = realloc(ck->t, nc * sizeof *t);
    if (!t) {
      fail(p, "out of memory");
      return -1;
    }
    ck->t = t;
    *cap = nc;
  }
  mi_ckb_ckpt_tensor *t = &ck->t[ck->n];
  memset(t, 0, sizeof *t);
  e->layer = layer;
  if (expand(t->key, sizeof t->key, key, layer) != 0) {
    fail(p, "weight '%s': the name is longer than %zu bytes", key, sizeof t->key - 1);
    return -1;
  }
  snprintf(t->name, sizeof t->name, "%s", t->key);
  const json_t *shape = json_object_get(w, "shape");
  size_t nd = json_array_size(shape);
  if (!json_is_array(shape) || nd < 1 || nd > MI_CKB_CKPT_MAX_DIMS) {
    fail(p, "weight '%s': shape must be an array of 1 to %d dimensions", key, MI_CKB_CKPT_MAX_DIMS);
    return -1;
  }
  uint64_t count = 1;
  for (size_t d = 0; d < nd; d++) {
    const json_t *dim = json_array_get(shape, d);
    char e2[300];
    int64_t v = 0;
    if (json_is_integer(dim)) v = json_integer_value(dim);
    else if (!json_is_string(dim)) {
      fail(p, "weight '%s': shape[%zu] is neither an integer nor an expression", key, d);
      return -1;
    } else if (mi_expr_eval(json_string_value(dim), mi_ckb_layer_lookup, e, &v, e2, sizeof e2) != 0) {
      fail(p, "weight '%s': shape[%zu]: %s", key, d, e2);
      return -1;
    }
    if (v < 1 || __builtin_mul_overflow(count, (uint64_t)v, &count) || count > ((uint64_t)1 << 40)) {
      fail(p, "weight '%s': shape[%zu] = %lld: each dimension must be >= 1 and the tensor below 2^40 elements", key, d,
           (long long)v);
      return -1;
    }
    t->dims[d] = v;
  }
  t->ndim = (int)nd;
  if (!json_is_object(init)) {
    fail(p, "weight '%s': no random_init object (how mi-mkmodel draws it)", key);
    return -1;
  }
  double mean, std, fan;
  if (init_value(p, e, init, "mean", 0, key, &mean) || init_value(p, e, init, "std", NAN, key, &std) ||
      init_value(p, e, init, "fan", 1, key, &fan))
    return -1;
  if (!(fan > 0) || std < 0) {
    fail(p, "weight '%s': random_init needs std >= 0 and fan > 0 (std %g, fan %g)", key, std, fan);
    return -1;
  }
  t->mean = mean;
  /* std / sqrt(fan), not std * (1 / sqrt(fan)): the values keep their bits */
  t->sigma = json_object_get(init, "fan") ? std / sqrt(fan) : std;
  ck->n++;
  return 0;
}

/* The contract's weights in file order: checkpoint.order when given (each
 * weight once), else the weight map's. A new array of borrowed entries. */
static json_t *weight_order(plan_ctx *p, const json_t *ckpt) {
  const json_t *ws = json_object_get(p->model->json, "weights");
  const json_t *order = json_object_get(ckpt, "order");
  if (!json_is_array(ws)) {
    fail(p, "the contract has no \"weights\" array");
    return NULL;
  }
  size_t i;
  json_t *w;
  json_array_foreach(ws, i, w) {
    if (!json_is_string(json_object_get(w, "key"))) {
      fail(p, "weights[%zu] has no \"key\" string", i);
      return NULL;
    }
  }
  json_t *out = json_array();
  if (!order) {
    json_array_foreach(ws, i, w) json_array_append(out, w);
    return out;
  }
  if (!json_is_array(order)) {
    fail(p, "checkpoint.order is not an array of weight keys");
    json_decref(out);
    return NULL;
  }
  json_t *o;
  json_array_foreach(order, i, o) {
    const json_t *hit = NULL;
    size_t k;
    json_array_foreach(ws, k, w) if (json_equal(json_object_get(w, "key"), o)) hit = w;
    int dup = 0;
    json_array_foreach(out, k, w) dup |= w == hit;
    if (!hit || dup) {
      char *s = json_dumps(o, JSON_ENCODE_ANY | JSON_COMPACT);
      fail(p, "checkpoint.order[%zu] = %.120s: %s", i, s ? s : "?", hit ? "listed twice" : "not a weight key");
      free(s);
      json_decref(out);
      return NULL;
    }
    json_array_append(out, (json_t *)hit);
  }
  json_array_foreach(ws, i, w) {
    int listed = 0;
    size_t k;
    json_t *x;
    json_array_foreach(out, k, x) listed |= x == w;
    if (!listed) {
      fail(p, "weight '%s' is not in checkpoint.order", json_string_value(json_object_get(w, "key")));
      json_decref(out);
      return NULL;
    }
  }
  return out;
}

int mi_ckb_when_holds(const json_t *model, const json_t *cfg, const char *when) {
  if (!when) return 1;
  int neg = when[0] == '!';
  const json_t *v = mi_ckb_config_value(model, cfg, when + neg, strlen(when + neg));
  return neg ? !json_is_true(v) : json_is_true(v);
}

static int plan_weights(plan_ctx *p, const json_t *ckpt, const json_t *preset, const json_t *cfg, mi_ckb_ckpt *ck) {
  const json_t *m = p->model->json;
  const json_t *over = json_object_get(preset, "init");
  if (over && !json_is_object(over)) {
    fail(p, "checkpoint.presets.%s.init is not an object", p->preset);
    return -1;
  }
  json_t *ws = weight_order(p, ckpt);
  if (!ws) return -1;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)over, k, v) { /* a replacement for a weight that exists */
    int found = 0;
    size_t i;
    json_t *w;
    json_array_foreach(ws, i, w) found |= !strcmp(json_string_value(json_object_get(w, "key")), k);
    if (!found) fail(p, "checkpoint.presets.%s.init names '%s', which is not a weight key", p->preset, k);
  }
  const char *lf = json_string_value(json_object_get(m, "layers"));
  const json_t *nl = lf ? mi_ckb_config_value(m, cfg, lf, strlen(lf)) : NULL;
  if (!json_is_integer(nl) || json_integer_value(nl) < 0 || json_integer_value(nl) > 100000)
    fail(p, "preset '%s': the layer count '%s' is missing or not an integer in 0..100000", p->preset,
         lf ? lf : "(the contract has no \"layers\")");
  int64_t L = json_is_integer(nl) ? json_integer_value(nl) : 0;
  eval_ctx e = {m, cfg, 0};
  size_t cap = 0, i;
  int layers_done = 0;
  json_t *w;
  json_array_foreach(ws, i, w) {
    if (p->failed) break;
    const char *key = json_string_value(json_object_get(w, "key"));
    int per_layer = json_is_true(json_object_get(w, "per_layer"));
    if (per_layer != (strstr(key, "{i}") != NULL)) {
      fail(p, "weight '%s': %s", key, per_layer ? "per_layer but its key has no {i}" : "its key has {i} but it is not per_layer");
      break;
    }
    if (!per_layer) {
      const json_t *init = json_object_get(over, key) ?: json_object_get(w, "random_init");
      if (mi_ckb_when_holds(m, cfg, json_string_value(json_object_get(w, "when")))) add_tensor(p, ck, &cap, &e, w, init, 0);
      continue;
    }
    if (layers_done++) continue;
    /* the first per-layer weight: every layer's tensors, layer by layer */
    for (int64_t l = 0; l < L && !p->failed; l++) {
      size_t j;
      json_t *x;
      json_array_foreach(ws, j, x) {
        if (p->failed || !json_is_true(json_object_get(x, "per_layer"))) continue;
        const char *xk = json_string_value(json_object_get(x, "key"));
        const char *only = json_string_value(json_object_get(x, "layer_kind"));
        if (only) {
          const char *kind = mi_ckb_layer_kind(m, cfg, l);
          if (!kind) {
            fail(p, "preset '%s': layer %lld: its kind cannot be told from the config", p->preset, (long long)l);
            break;
          }
          if (strcmp(kind, only)) continue;
        }
        if (!mi_ckb_when_holds(m, cfg, json_string_value(json_object_get(x, "when")))) continue;
        add_tensor(p, ck, &cap, &e, x, json_object_get(over, xk) ?: json_object_get(x, "random_init"), l);
      }
    }
  }
  json_decref(ws);
  return p->failed ? -1 : 0;
}

/* ---- the public part --------------------------------------------------------- */

const mi_ckb_entry *mi_ckb_checkpoint_family(const mi_ckb *c, const char *name, char *err, size_t n) {
  const mi_ckb_entry *hit = NULL, *dflt = NULL;
  char families[600] = "";
  size_t fl = 0;
  int n_default = 0;
  char want[200];
  if (name) snprintf(want, sizeof want, "%s%s", strncmp(name, "model.", 6) ? "model." : "", name);
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "model") || !e->id) continue;
    if (name && !strcmp(e->id, want)) hit = e;
    const json_t *ck = ckpt_of(e);
    if (!json_is_object(ck)) continue;
    if (fl < sizeof families - 1)
      fl += (size_t)snprintf(families + fl, sizeof families - fl, "%s%s", fl ? ", " : "", e->id + 6);
    if (json_is_true(json_object_get(ck, "default"))) n_default++, dflt = e;
  }
  if (!name) {
    if (n_default == 1) return dflt;
    snprintf(err, n, "%s: %s; pass --family (families with checkpoint presets: %s)", mi_ckb_dir(c),
             n_default ? "more than one model contract sets checkpoint.default" : "no model contract sets checkpoint.default",
             fl ? families : "none");
    return NULL;
  }
  if (!hit) {
    snprintf(err, n, "--family %s: no model contract %s in %s (families with checkpoint presets: %s)", name, want,
             mi_ckb_dir(c), fl ? families : "none");
    return NULL;
  }
  if (!json_is_object(ckpt_of(hit))) {
    snprintf(err, n, "%s: %s has no \"checkpoint\" object (config template and presets): mi-mkmodel cannot make it",
             hit->path, hit->id);
    return NULL;
  }
  return hit;
}

void mi_ckb_checkpoint_free(mi_ckb_ckpt *ck) {
  json_decref(ck->config);
  json_decref(ck->generation_config);
  free(ck->t);
  memset(ck, 0, sizeof *ck);
}

/* A layout's extra_weights (a released wrapper's vision tower, ...): after
 * the contract's weights, named as written; each must sit under one of the
 * layout's unused prefixes, or the readers would refuse the checkpoint. */
static void add_extra_weights(plan_ctx *p, const json_t *lo, const char *layout, mi_ckb_ckpt *out) {
  size_t cap = out->n, i;
  json_t *x;
  eval_ctx e = {p->model->json, out->config, 0};
  json_array_foreach(json_object_get(lo, "extra_weights"), i, x) {
    const char *key = json_string_value(json_object_get(x, "key"));
    if (!key || !mi_ckb_layout_unused(lo, key, NULL)) {
      fail(p, "layouts.%s.extra_weights[%zu] '%s' is under none of the layout's unused prefixes", layout, i,
           key ? key : "(no key)");
      return;
    }
    if (add_tensor(p, out, &cap, &e, x, json_object_get(x, "random_init"), 0) != 0) return;
  }
}

/* The causal config's first architecture must be one of the contract's: a
 * checkpoint block copied from another contract is caught here. */
static void check_architecture(plan_ctx *p, const json_t *cfg) {
  const json_t *a = json_array_get(json_object_get(cfg, "architectures"), 0);
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(p->model->json, "architectures"), i, x) if (json_equal(x, a)) return;
  char *s = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT);
  fail(p, "checkpoint.config.architectures[0] = %.100s is not one of the contract's architectures", s ? s : "(none)");
  free(s);
}

int mi_ckb_checkpoint_plan(const mi_ckb_entry *model, const char *preset, const char *layout, const char *torch_dtype,
                           mi_ckb_ckpt *out, char *err, size_t n) {
  memset(out, 0, sizeof *out);
  plan_ctx p = {model, preset, NULL, json_object(), torch_dtype, NULL, err, n, 0};
  const json_t *ck = ckpt_of(model);
  const json_t *presets = json_object_get(ck, "presets");
  const json_t *tmpl = json_object_get(ck, "config");
  const json_t *pr = json_object_get(presets, preset);
  if (!json_is_object(ck) || !json_is_object(presets) || !json_is_object(tmpl))
    fail(&p, "checkpoint: needs a \"config\" template object and a \"presets\" object");
  else if (!pr) {
    json_decref(p.used);
    snprintf(err, n, "%s: %s has no checkpoint preset '%s'", model->path, model->id, preset);
    return 1;
  } else if (!json_is_object(pr) || !json_is_object(json_object_get(pr, "config")))
    fail(&p, "checkpoint.presets.%s: needs a \"config\" object", preset);
  const json_t *tok = json_object_get(ck, "tokenizer");
  if (!p.failed && tok && !json_is_array(tok)) fail(&p, "checkpoint.tokenizer is not an array of folders");
  out->tokenizer = tok;
  int omit;
  if (!p.failed) {
    p.pcfg = json_object_get(pr, "config");
    out->config = subst(&p, tmpl, "config", &omit);
  }
  if (!p.failed) { /* a preset value nothing writes would silently not be the checkpoint's */
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)p.pcfg, k, v) if (!json_object_get(p.used, k))
        fail(&p, "checkpoint.presets.%s sets '%s', which checkpoint.config does not write", preset, k);
  }
  if (!p.failed) check_architecture(&p, out->config);
  if (!p.failed) plan_weights(&p, ck, pr, out->config, out);
  const json_t *gen = json_object_get(ck, "generation_config");
  if (!p.failed && gen) {
    if (!json_is_object(gen)) fail(&p, "checkpoint.generation_config is not an object");
    else out->generation_config = subst(&p, gen, "generation_config", &omit);
  }
  if (!p.failed && layout && strcmp(layout, "causal")) {
    const json_t *ls = json_object_get(model->json, "layouts");
    const json_t *lo = json_object_get(ls, layout);
    if (!lo) {
      char names[300] = "causal";
      size_t l = strlen(names);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)ls, k, v) if (l < sizeof names - 1) l += (size_t)snprintf(names + l, sizeof names - l, ", %s", k);
      fail(&p, "%s has no layout '%s' (layouts: %s)", model->id, layout, names);
    } else if (!json_is_object(json_object_get(lo, "config"))) {
      fail(&p, "checkpoint.layouts.%s: needs a \"config\" template object", layout);
    } else {
      p.inner = json_deep_copy(out->config);
      size_t i;
      json_t *d;
      json_array_foreach(json_object_get(lo, "config_drop"), i, d) if (json_is_string(d))
          json_object_del(p.inner, json_string_value(d));
      json_t *c = subst(&p, json_object_get(lo, "config"), "layouts.config", &omit);
      json_decref(p.inner);
      if (c) {
        json_decref(out->config);
        out->config = c;
      }
      const json_t *rn = json_object_get(lo, "rename");
      for (size_t t = 0; !p.failed && t < out->n; t++) {
        const char *from;
        json_t *to;
        json_object_foreach((json_t *)rn, from, to) {
          size_t fl = strlen(from);
          if (!json_is_string(to) || strncmp(out->t[t].key, from, fl)) continue;
          int k = snprintf(out->t[t].name, sizeof out->t[t].name, "%s%s", json_string_value(to), out->t[t].key + fl);
          if (k < 0 || (size_t)k >= sizeof out->t[t].name)
            fail(&p, "checkpoint.layouts.%s.rename: '%s' becomes longer than %zu bytes", layout, out->t[t].key,
                 sizeof out->t[t].name - 1);
          break;
        }
      }
      add_extra_weights(&p, lo, layout, out);
    }
  }
  json_decref(p.used);
  if (p.failed) {
    mi_ckb_checkpoint_free(out);
    return -1;
  }
  return 0;
}
