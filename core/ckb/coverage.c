/* CKB coverage: given a model directory (its config.json "architectures")
 * and a platform name, which contracts apply and what is missing. This is
 * the check mi-gen runs before choosing zero-reference generation or the
 * knowledge-evolution loop.
 *
 * When no model contract lists the architecture, the report names each gap
 * against the closest model contract (the one whose weight map matches most
 * of the checkpoint's weight names), one line per gap, so that the
 * evolution loop and a person know what to add: the architecture, config
 * fields the contract does not read (or reads but the config lacks), layer
 * kinds, weight names unmapped / of another shape / absent in some layers,
 * norm weights centred on 0 where the contract multiplies by w, and the
 * operators and platform kernels those imply. */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/internal.h"
#include "core/runtime/model_input.h"
#include "core/runtime/safetensors.h"
#include "core/util/file.h"
#include "mi/tensor.h"

static int str_in(json_t *arr, const char *s) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), s)) return 1;
  return 0;
}

static void add_unique(json_t *arr, const char *s) {
  if (s && !str_in(arr, s)) json_array_append_new(arr, json_string(s));
}

/* One line into the report's "missing". */
#define missing(report, ...) ckb_line(json_object_get(report, "missing"), __VA_ARGS__)

const mi_ckb_entry *mi_ckb_find_platform(const mi_ckb *c, const char *name) {
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "platform") || !e->id) continue;
    const char *plugin = json_string_value(json_object_get(e->json, "plugin"));
    if (!strcmp(e->id, name) || (plugin && !strcmp(plugin, name)) ||
        str_in(json_object_get(e->json, "aliases"), name))
      return e;
  }
  return NULL;
}

const mi_ckb_entry *mi_ckb_find_model(const mi_ckb *c, const json_t *archs) {
  size_t j;
  json_t *a;
  json_array_foreach(archs, j, a) {
    for (size_t i = 0; json_is_string(a) && i < mi_ckb_count(c); i++) {
      const mi_ckb_entry *e = mi_ckb_at(c, i);
      if (e->kind && !strcmp(e->kind, "model") &&
          str_in(json_object_get(e->json, "architectures"), json_string_value(a)))
        return e;
    }
  }
  /* a released wrapper of a contract's model: one of its layouts */
  json_array_foreach(archs, j, a) {
    for (size_t i = 0; json_is_string(a) && i < mi_ckb_count(c); i++) {
      const mi_ckb_entry *e = mi_ckb_at(c, i);
      if (e->kind && !strcmp(e->kind, "model") && mi_ckb_layout_for_arch(e->json, json_string_value(a))) return e;
    }
  }
  return NULL;
}

static const char *hf_dtype(const char *torch_dtype) {
  if (!torch_dtype) return NULL;
  if (!strcmp(torch_dtype, "float32")) return "f32";
  if (!strcmp(torch_dtype, "float16")) return "f16";
  if (!strcmp(torch_dtype, "bfloat16")) return "bf16";
  return NULL;
}

static json_t *platform_kernel(const mi_ckb_entry *p, const char *op) {
  return mi_ckb_named(json_object_get(p->json, "kernels"), "operator", op);
}

/* Does the platform compute op: a kernel it lists, or (an operator whose
 * member is "pack") a kernel pack of a target it hosts, generated from the
 * operator's contract (docs/kernel-packs.md). */
static int platform_computes(const mi_ckb *c, const mi_ckb_entry *p, const char *op) {
  if (platform_kernel(p, op)) return 1;
  const mi_ckb_entry *oe = mi_ckb_find(c, op);
  if (!oe || strcmp(json_string_value(json_object_get(oe->json, "member")) ?: "", "pack")) return 0;
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(p->json, "kernel_packs"), i, t) if (!strcmp(json_string_value(t) ?: "", "host-c")) return 1;
  return 0;
}

static void add_tests(const mi_ckb *c, json_t *ids, json_t *tests, json_t *report) {
  size_t i;
  json_t *v;
  json_array_foreach(ids, i, v) {
    const char *id = json_string_value(v);
    if (!id) continue;
    int seen = 0;
    size_t j;
    json_t *t;
    json_array_foreach(tests, j, t) seen |= !strcmp(json_string_value(json_object_get(t, "id")), id);
    if (seen) continue;
    const mi_ckb_entry *e = mi_ckb_find(c, id);
    if (!e) {
      missing(report, "test contract '%s'", id);
      continue;
    }
    json_array_append_new(tests, json_pack("{s:s, s:O, s:O}", "id", id, "stage",
                                           json_object_get(e->json, "stage"), "status",
                                           json_object_get(e->json, "status")));
  }
}


/* ---------- gaps against the closest model contract ---------- */


/* What a weight-name fragment or a config field implies in operators. The
 * CKB's entries do not carry this yet (docs/hybrid.md: the evolution loop
 * is to move it into the operator contracts); a line is printed only while
 * the operator's contract or the platform's kernel is missing. */
static const struct {
  const char *weight, *config, *op, *what;
} IMPLIES[] = {
    {".linear_attn.A_log", NULL, "operator.gated_delta_rule",
     "gated delta rule with a carried recurrent state [heads, d_k, d_v]"},
    {".linear_attn.conv1d.weight", NULL, "operator.conv1d_causal", "depthwise causal conv1d with a carried state"},
    {".linear_attn.in_proj_qkv.weight", NULL, "operator.l2norm", "L2 normalisation of q and k"},
    {".linear_attn.norm.weight", NULL, "operator.rmsnorm_gated", "gated RMSNorm w * norm(x) * silu(z)"},
    {NULL, "attn_output_gate", "operator.sigmoid_mul", "attention output * sigmoid(gate)"},
};

/* "model.layers.12.mlp.up_proj.weight" -> "model.layers.{i}.mlp.up_proj.weight", *layer = 12 (-1 if none). */
static void layer_pattern(const char *name, char *out, size_t n, long *layer) {
  const char *p = strstr(name, "layers.");
  *layer = -1;
  if (p && isdigit((unsigned char)p[7])) {
    char *end;
    *layer = strtol(p + 7, &end, 10);
    snprintf(out, n, "%.*s{i}%s", (int)(p + 7 - name), name, end);
  } else {
    snprintf(out, n, "%s", name);
  }
}

static void list_text(char *out, size_t n, json_t *ints) {
  size_t i, l = 0;
  json_t *v;
  out[0] = 0;
  json_array_foreach(ints, i, v) {
    if (l + 16 >= n) {
      snprintf(out + l, n - l, ", ...");
      return;
    }
    l += (size_t)snprintf(out + l, n - l, "%s%lld", i ? ", " : "", (long long)json_integer_value(v));
  }
}

static void dims_text(char *out, size_t n, const int64_t *d, int nd) {
  size_t l = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < nd && l < n; i++) l += (size_t)snprintf(out + l, n - l, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (l < n) snprintf(out + l, n - l, "]");
}

typedef struct gap_cfg {
  json_t *config, *fields;
  int depth; /* default_expr fields derived from each other */
} gap_cfg;

static int gap_lookup(void *user, const char *name, size_t len, int64_t *out) {
  gap_cfg *g = user;
  char key[128];
  snprintf(key, sizeof key, "%.*s", (int)(len < 127 ? len : 127), name);
  json_t *v = json_object_get(g->config, key);
  size_t i;
  json_t *f;
  if (!v || json_is_null(v)) json_array_foreach(g->fields, i, f) {
      const char *fn = json_string_value(json_object_get(f, "name"));
      const char *ex = json_string_value(json_object_get(f, "default_expr"));
      char e2[128];
      if (fn && !strcmp(fn, key) && ex && g->depth < 8) { /* derived from other fields */
        g->depth++;
        int rc = mi_expr_eval(ex, gap_lookup, g, out, e2, sizeof e2);
        g->depth--;
        if (rc == 0) return 0;
      }
      if (fn && !strcmp(fn, key)) v = json_object_get(f, "default");
    }
  if (json_is_integer(v)) return *out = json_integer_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

static json_t *contract_weight(const mi_ckb_entry *m, const char *pattern) {
  return mi_ckb_named(json_object_get(m->json, "weights"), "key", pattern);
}

static int contract_reads(const mi_ckb_entry *m, const char *field) {
  size_t i;
  json_t *f;
  json_array_foreach(json_object_get(m->json, "config"), i, f) {
    const char *n = json_string_value(json_object_get(f, "name"));
    if (n && !strcmp(n, field)) return 1;
  }
  return 0;
}

/* report.matrix_dtypes[dtype]: how many matrices are stored so, and the
 * first of them by name. */
static void count_matrix_dtype(json_t *report, const mi_weight_info *wi) {
  const char *dn = wi->dtype >= 0 && wi->dtype < MI_DTYPE_COUNT ? mi_dtype_name((mi_dtype)wi->dtype) : "other";
  json_t *all = json_object_get(report, "matrix_dtypes");
  if (!all) json_object_set_new(report, "matrix_dtypes", all = json_object());
  json_t *e = json_object_get(all, dn);
  if (!e) json_object_set_new(all, dn, e = json_pack("{s:i, s:s}", "count", 0, "first", wi->name));
  json_object_set_new(e, "count", json_integer(json_integer_value(json_object_get(e, "count")) + 1));
}

/* The checkpoint's weights w grouped by layer pattern:
 * {pattern: {"layers": [..], "shape": [..], "mean": x (1-D tensors)}}; NULL
 * (and a line in report, why: open_err) when the weight files could not be
 * read (w NULL). */
static json_t *patterns_of(const mi_weights *w, const char *open_err, const json_t *layout, json_t *report) {
  if (!w) {
    missing(report, "weights: cannot read them to compare (%s)", open_err);
    return NULL;
  }
  json_t *pats = json_object();
  for (size_t k = 0; k < mi_weights_count(w); k++) {
    mi_weight_info wi;
    if (mi_weights_at(w, k, &wi) != 0) continue;
    char pat[512], tn[512];
    long layer;
    /* a wrapper layout (its renamed weights, its unused prefixes): compared
     * as the contract's own names; what it leaves unread is not compared */
    if (mi_ckb_layout_unused(layout, wi.name, NULL)) continue;
    mi_ckb_layout_unrename(layout, wi.name, tn, sizeof tn);
    layer_pattern(tn, pat, sizeof pat, &layer);
    if (wi.ndim == 2) count_matrix_dtype(report, &wi);
    json_t *e = json_object_get(pats, pat);
    if (!e) {
      json_t *shape = json_array();
      for (int d = 0; d < wi.ndim; d++) json_array_append_new(shape, json_integer(wi.shape[d]));
      e = json_pack("{s:[], s:o}", "layers", "shape", shape);
      /* the mean of a 1-D weight (norms): centred on 0 or on 1? */
      size_t n = wi.ndim == 1 ? (size_t)wi.shape[0] : 0;
      if (n && (wi.dtype == MI_DTYPE_F32 || wi.dtype == MI_DTYPE_BF16 || wi.dtype == MI_DTYPE_F16)) {
        double s = 0;
        for (size_t i = 0; i < n; i++)
          s += mi_float_value((mi_dtype)wi.dtype, wi.data, i);
        json_object_set_new(e, "mean", json_real(s / (double)n));
      }
      json_object_set_new(pats, pat, e);
    }
    if (layer >= 0) json_array_append_new(json_object_get(e, "layers"), json_integer(layer));
  }
  return pats;
}

static json_t *weight_patterns(const char *model_dir, const json_t *layout, json_t *report) {
  char err[600];
  mi_weights *w = mi_model_input_weights(model_dir, mi_model_input_all_blocks(), err, sizeof err);
  json_t *pats = patterns_of(w, err, layout, report);
  mi_weights_close(w);
  return pats;
}

/* The model contract mapping most of the checkpoint's weight patterns. */
static const mi_ckb_entry *closest_model(const mi_ckb *c, json_t *pats, int *hits) {
  const mi_ckb_entry *best = NULL;
  *hits = -1;
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "model") || !e->id) continue;
    int h = 0;
    const char *pat;
    json_t *v;
    if (pats) json_object_foreach(pats, pat, v) h += contract_weight(e, pat) != NULL;
    if (h > *hits) best = e, *hits = h;
  }
  return best;
}

static void config_gaps(const mi_ckb_entry *m, json_t *cfg, json_t *r) {
  /* each field the contract neither binds nor lists as inert, and each
   * value outside what it supports (its layer_types: the lines below) */
  json_t *lines = json_array();
  ckb_config_field_gaps(m, cfg, lines); /* absent fields: below, with what the contract would assume */
  size_t j;
  json_t *l;
  json_array_foreach(lines, j, l) {
    const char *t = json_string_value(l);
    if (strncmp(t, "config field 'layer_types'", 26)) missing(r, "%s", t);
  }
  json_decref(lines);
  size_t i;
  json_t *f;
  json_array_foreach(json_object_get(m->json, "config"), i, f) {
    const char *n = json_string_value(json_object_get(f, "name"));
    const char *path = json_string_value(json_object_get(f, "path"));
    if (path) n = path; /* nested: rope_parameters.rope_theta */
    if (!n || mi_ckb_config_at(cfg, n)) continue;
    if (json_is_string(json_object_get(f, "default_expr"))) continue; /* the contract derives it */
    json_t *d = json_object_get(f, "default");
    char *t = d ? json_dumps(d, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    missing(r, "config field '%s' is absent; %s %s%s", n, m->id, t ? "would assume " : "requires it",
            t ? t : "");
    free(t);
  }
}

static void layer_type_gaps(const mi_ckb_entry *m, json_t *cfg, json_t *r) {
  json_t *lt = json_object_get(cfg, "layer_types");
  const char *lk = json_string_value(json_object_get(json_object_get(m->json, "layer_kinds"), "config"));
  if (!json_is_array(lt) || contract_reads(m, "layer_types") || (lk && !strcmp(lk, "layer_types"))) return;
  json_t *kinds = json_object(); /* type -> [layers] */
  size_t i;
  json_t *v;
  json_array_foreach(lt, i, v) {
    const char *t = json_is_string(v) ? json_string_value(v) : "(not a string)";
    json_t *l = json_object_get(kinds, t);
    if (!l) json_object_set_new(kinds, t, l = json_array());
    json_array_append_new(l, json_integer((json_int_t)i));
  }
  const char *t;
  json_object_foreach(kinds, t, v) {
    char layers[200];
    list_text(layers, sizeof layers, v);
    missing(r, "layer type '%s' (layers %s): %s has a single kind of decoder layer", t, layers, m->id);
  }
  json_decref(kinds);
}

static void weight_gaps(const mi_ckb_entry *m, json_t *cfg, json_t *pats, json_t *r) {
  gap_cfg g = {cfg, json_object_get(m->json, "config"), 0};
  const char *lf = json_string_value(json_object_get(m->json, "layers"));
  int64_t n_layers = -1;
  if (lf && gap_lookup(&g, lf, strlen(lf), &n_layers) != 0) n_layers = -1;
  const char *pat;
  json_t *e;
  json_object_foreach(pats, pat, e) {
    char layers[200], have[128];
    list_text(layers, sizeof layers, json_object_get(e, "layers"));
    int64_t d[8];
    int nd = (int)json_array_size(json_object_get(e, "shape"));
    for (int k = 0; k < nd && k < 8; k++) d[k] = json_integer_value(json_array_get(json_object_get(e, "shape"), k));
    dims_text(have, sizeof have, d, nd < 8 ? nd : 8);
    json_t *spec = contract_weight(m, pat);
    const char *in = layers[0] ? " in layers " : "";
    if (!spec) {
      missing(r, "weight '%s' %s%s%s: not in %s's weight map", pat, have, in, layers, m->id);
      continue;
    }
    /* the shape the contract's formulas give on this config */
    json_t *shape = json_object_get(spec, "shape");
    int64_t want[8];
    int wn = (int)json_array_size(shape), ok = wn <= 8;
    for (int k = 0; ok && k < wn; k++) {
      json_t *dim = json_array_get(shape, (size_t)k);
      char e2[200];
      if (json_is_integer(dim)) want[k] = json_integer_value(dim);
      else ok = mi_expr_eval(json_string_value(dim), gap_lookup, &g, &want[k], e2, sizeof e2) == 0;
    }
    int same = ok && wn == nd;
    for (int k = 0; same && k < nd; k++) same = want[k] == d[k];
    if (ok && !same) {
      char ws[128];
      dims_text(ws, sizeof ws, want, wn);
      char *f = json_dumps(shape, JSON_COMPACT);
      missing(r, "weight '%s' is %s%s%s; %s says %s = %s", pat, have, in, layers, m->id, ws, f ? f : "?");
      free(f);
    }
    const char *init = json_string_value(json_object_get(spec, "init"));
    json_t *mean = json_object_get(e, "mean");
    if (init && !strcmp(init, "ones") && json_is_number(mean) && fabs(json_number_value(mean)) < 0.5)
      missing(r, "weight '%s' averages %.3g where %s multiplies by w (weights near 1): a zero-centred (1+w) norm?",
              pat, json_number_value(mean), m->id);
    size_t nl = json_array_size(json_object_get(e, "layers"));
    /* a weight of one layer kind (the hybrid's linear_attn.*) is in that
     * kind's layers only: stage 3 checks it against the layer table */
    if (json_is_true(json_object_get(spec, "per_layer")) && !json_object_get(spec, "layer_kind") && n_layers > 0 &&
        (int64_t)nl < n_layers) {
      json_t *absent = json_array();
      for (int64_t l = 0; l < n_layers; l++) {
        int found = 0;
        size_t j;
        json_t *x;
        json_array_foreach(json_object_get(e, "layers"), j, x) found |= json_integer_value(x) == l;
        if (!found) json_array_append_new(absent, json_integer(l));
      }
      char al[200];
      list_text(al, sizeof al, absent);
      missing(r, "weight '%s' is absent in layers %s; %s expects it in every layer", pat, al, m->id);
      json_decref(absent);
    }
  }
}

static void operator_gaps(const mi_ckb *c, const mi_ckb_entry *m, const mi_ckb_entry *plat, json_t *cfg, json_t *pats,
                          json_t *r) {
  for (size_t i = 0; i < sizeof IMPLIES / sizeof *IMPLIES; i++) {
    const char *why = NULL;
    char buf[300];
    if (IMPLIES[i].config && json_is_true(json_object_get(cfg, IMPLIES[i].config))) {
      snprintf(buf, sizeof buf, "config %s", IMPLIES[i].config);
      why = buf;
    }
    const char *pat;
    json_t *e;
    if (IMPLIES[i].weight && pats) json_object_foreach(pats, pat, e) {
        const char *hit = strstr(pat, IMPLIES[i].weight);
        if (!why && hit && hit[strlen(IMPLIES[i].weight)] == 0) {
          snprintf(buf, sizeof buf, "weight %s", pat);
          why = buf;
        }
      }
    if (!why) continue;
    if (!mi_ckb_find(c, IMPLIES[i].op))
      missing(r, "operator contract '%s' (%s; implied by %s)", IMPLIES[i].op, IMPLIES[i].what, why);
    if (plat && !platform_computes(c, plat, IMPLIES[i].op))
      missing(r, "platform '%s' provides no kernel for '%s' (implied by %s)", plat->id, IMPLIES[i].op, why);
  }
  /* partial rotary: operator.rope rotates rot_dim of head_dim channels */
  json_t *rp = json_object_get(cfg, "rope_parameters");
  json_t *prf = json_object_get(json_is_object(rp) ? rp : cfg, "partial_rotary_factor");
  if (!prf) prf = json_object_get(cfg, "partial_rotary_factor");
  json_t *hd = json_object_get(cfg, "head_dim");
  if (json_is_number(prf) && json_number_value(prf) < 1 && json_is_integer(hd) && !contract_reads(m, "partial_rotary_factor"))
    missing(r, "variant: rotary on %d of head_dim %lld channels (partial_rotary_factor %g): operator.rope's rot_dim, "
            "which no model contract sets below head_dim",
            (int)(json_number_value(prf) * (double)json_integer_value(hd)), (long long)json_integer_value(hd),
            json_number_value(prf));
}

static void name_gaps(const mi_ckb *c, const char *model_dir, json_t *outer, const mi_ckb_entry *plat, json_t *r) {
  const char *arch = json_string_value(json_array_get(json_object_get(outer, "architectures"), 0));
  const char *mt = json_string_value(json_object_get(outer, "model_type"));
  /* a wrapper layout the CKB knows (a conditional-generation model): the
   * text model's config and weights are compared, what it leaves unread not */
  char werr[600];
  mi_weights *w = mi_model_input_weights(model_dir, mi_model_input_all_blocks(), werr, sizeof werr);
  const json_t *inner = NULL, *lay = mi_ckb_wrapper_layout(c, outer, w, &inner);
  json_t *cfg = lay ? (json_t *)inner : outer;
  if (lay) {
    char *rn = json_dumps(json_object_get(lay, "rename"), JSON_COMPACT), *un = NULL;
    json_t *pre = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(lay, "unused"), k, v) json_array_append_new(pre, json_string(k));
    un = json_dumps(pre, JSON_COMPACT);
    missing(r, "config: a wrapper layout; the model inside (model_type %s, weights renamed %s) is compared below, "
            "the tensors under %s are not read",
            json_string_value(json_object_get(cfg, "model_type")) ?: "?", rn ? rn : "{}", un ? un : "[]");
    free(rn);
    free(un);
    json_decref(pre);
  }
  json_t *pats = patterns_of(w, werr, lay, r); /* the files opened once for both */
  mi_weights_close(w);
  int hits;
  const mi_ckb_entry *m = closest_model(c, pats, &hits);
  if (!m) {
    missing(r, "architecture %s%s%s%s: the CKB has no model contract to compare it with", arch ? arch : "?",
            mt ? " (model_type " : "", mt ? mt : "", mt ? ")" : "");
    json_decref(pats);
    return;
  }
  char archs[200] = "";
  char *a = json_dumps(json_object_get(m->json, "architectures"), JSON_COMPACT);
  snprintf(archs, sizeof archs, "%s", a ? a : "?");
  free(a);
  if (pats)
    missing(r, "architecture %s%s%s%s: closest contract %s@%s (%s) maps %d of the checkpoint's %zu weight names "
            "(per-layer names counted once)", arch ? arch : "?",
            mt ? " (model_type " : "", mt ? mt : "", mt ? ")" : "", m->id, m->version, archs, hits,
            json_object_size(pats));
  else
    missing(r, "architecture %s%s%s%s: compared with %s@%s (%s)", arch ? arch : "?", mt ? " (model_type " : "",
            mt ? mt : "", mt ? ")" : "", m->id, m->version, archs);
  json_object_set_new(r, "closest_model_contract", json_sprintf("%s@%s", m->id, m->version));
  config_gaps(m, cfg, r);
  layer_type_gaps(m, cfg, r);
  if (pats) weight_gaps(m, cfg, pats, r);
  operator_gaps(c, m, plat, cfg, pats, r);
  json_decref(pats);
}

int mi_ckb_coverage(const mi_ckb *c, const char *model_dir, const char *platform, json_t **out,
                    char *err, size_t err_len) {
  *out = NULL;
  char cfg_path[4096];
  mi_model_input_config_name(model_dir, cfg_path, sizeof cfg_path);
  json_t *cfg = mi_model_input_config(model_dir, 0, err, err_len);
  if (!cfg) return -1;
  json_t *archs = json_object_get(cfg, "architectures");
  if (!json_is_array(archs) || json_array_size(archs) == 0) {
    snprintf(err, err_len, "%s: field 'architectures' must be a non-empty array", cfg_path);
    json_decref(cfg);
    return -1;
  }
  json_t *r = json_pack("{s:s, s:O, s:s, s:[], s:[], s:[], s:[], s:[]}", "model_dir", model_dir,
                        "architectures", archs, "platform", platform, "operators", "tests",
                        "failure_modes", "experience", "missing");

  const mi_ckb_entry *model = mi_ckb_find_model(c, archs);
  if (model) json_object_set_new(r, "model_contract", json_sprintf("%s@%s", model->id, model->version));
  else missing(r, "model contract for architecture %s", json_string_value(json_array_get(archs, 0)));

  const mi_ckb_entry *plat = mi_ckb_find_platform(c, platform);
  if (plat) json_object_set_new(r, "platform_contract", json_sprintf("%s@%s", plat->id, plat->version));
  else missing(r, "platform contract for '%s'", platform);
  if (!model) name_gaps(c, model_dir, cfg, plat, r);
  /* every config.json field bound, supported or inert, else one line each */
  if (model) mi_ckb_config_gaps(model, cfg, json_object_get(r, "missing"));
  /* and every weight: a name outside the weight map (sandwich norms, q/k/v
   * biases), a shape the contract's formulas do not give, a norm centred
   * on 0 where the contract multiplies by w */
  if (model) {
    const json_t *lay = mi_ckb_model_layout(model->json, cfg);
    json_t *pats = weight_patterns(model_dir, lay, r);
    if (pats) weight_gaps(model, (json_t *)mi_ckb_layout_inner(lay, cfg), pats, r);
    json_decref(pats);
  }

  json_t *used = json_array(); /* every id in play, for failure modes / experience */
  if (model) add_unique(used, model->id);
  if (plat) add_unique(used, plat->id);

  /* Weight dtype against what the platform stores. */
  const char *wdt = hf_dtype(json_string_value(json_object_get(cfg, "torch_dtype")));
  if (wdt) json_object_set_new(r, "weights_dtype", json_string(wdt));
  if (wdt && plat &&
      !str_in(json_object_get(json_object_get(plat->json, "dtypes"), "weights"), wdt))
    missing(r, "platform '%s' does not store %s weights", plat->id, wdt);

  /* Operators: every step of the model's sequences (each layer kind's too). */
  json_t *ops = json_object_get(r, "operators");
  json_t *all = model ? mi_ckb_model_sequences(model->json) : json_array();
  for (size_t s = 0; s < json_array_size(all); s++) {
    size_t i;
    json_t *step;
    json_array_foreach(json_array_get(all, s), i, step) {
      const char *op = json_string_value(json_object_get(step, "operator"));
      if (!op || str_in(used, op)) continue;
      add_unique(used, op);
      const mi_ckb_entry *oe = mi_ckb_find(c, op);
      int k = plat && platform_computes(c, plat, op);
      json_array_append_new(ops, json_pack("{s:s, s:b, s:b}", "id", op, "contract", oe != NULL, "platform", k));
      if (!oe) missing(r, "operator contract '%s'", op);
      if (plat && !k) missing(r, "platform '%s' provides no kernel for '%s'", plat->id, op);
    }
  }
  json_decref(all);

  json_t *tests = json_object_get(r, "tests");
  if (model) add_tests(c, json_object_get(model->json, "test_contracts"), tests, r);
  if (plat) add_tests(c, json_object_get(plat->json, "test_contracts"), tests, r);
  size_t ti;
  json_t *tv;
  json_array_foreach(tests, ti, tv) add_unique(used, json_string_value(json_object_get(tv, "id")));

  /* Failure modes and experience that touch anything in play. */
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || !e->id) continue;
    const char *field = !strcmp(e->kind, "failure_mode") ? "affects"
                        : !strcmp(e->kind, "experience") ? "related" : NULL;
    if (!field) continue;
    size_t j;
    json_t *v;
    int hit = 0;
    json_array_foreach(json_object_get(e->json, field), j, v) hit |=
        json_is_string(v) && str_in(used, json_string_value(v));
    if (hit)
      json_array_append_new(json_object_get(r, !strcmp(e->kind, "experience") ? "experience" : "failure_modes"),
                            json_string(e->id));
  }
  json_decref(used);
  json_decref(cfg);
  int covered = json_array_size(json_object_get(r, "missing")) == 0;
  json_object_set_new(r, "covered", json_boolean(covered));
  *out = r;
  return covered ? 0 : 1;
}
