/* Phase 5, the consolidator: what the loop learned, written into the target
 * CKB (--ckb) as ordinary entries, each with provenance "evolved" listing
 * the references read (path#sha256):
 *   operators/<op>.json    the bundle's operator contracts
 *   models/qwen35.json     the closest covered contract (model.qwen3)
 *                          rewritten by the variants found, plus the
 *                          bundle's linear-attention layer, in the
 *                          layer_kinds format (docs/evolution.md)
 *   experience/evolved_qwen35_variants.json   what the search measured
 * Deterministic: no dates or timings in the entries, keys sorted, the same
 * inputs give the same bytes. An entry already there is updated (its
 * version's patch grows) when its content differs, else left alone. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/gen/evolve/evolve.h"

typedef struct diag_buf {
  char text[2048];
  int n;
} diag_buf;

static void diag(void *user, const char *line) {
  diag_buf *d = user;
  if (d->n++ == 0) snprintf(d->text, sizeof d->text, "%s", line);
}

static json_t *refs_of(const ev_ctx *c) {
  json_t *refs = json_array();
  size_t i;
  json_t *r;
  json_array_foreach(c->reads, i, r) {
    char s[4400];
    snprintf(s, sizeof s, "%s#sha256=%s", json_string_value(json_object_get(r, "ref")),
             json_string_value(json_object_get(r, "sha256")));
    int dup = 0;
    size_t k;
    json_t *x;
    json_array_foreach(refs, k, x) dup |= !strcmp(json_string_value(x), s);
    if (!dup) json_array_append_new(refs, json_string(s));
  }
  return refs;
}

static json_t *step_named(json_t *seq, const char *name) {
  size_t i;
  json_t *s;
  json_array_foreach(seq, i, s) if (!strcmp(json_string_value(json_object_get(s, "step")) ?: "", name)) return s;
  return NULL;
}

static void set_arg(json_t *step, const char *arg, const char *v) {
  if (step) json_object_set_new(json_object_get(step, "args"), arg, json_string(v));
}

static json_t *mkstep(const char *name, const char *op, const char *what, json_t *args) {
  return json_pack("{s:s, s:s, s:s, s:o}", "step", name, "operator", op, "what", what, "args", args);
}

/* Inserts step after the one named `after` (at the end when absent). */
static void insert_after(json_t *seq, const char *after, json_t *step) {
  size_t i;
  json_t *s;
  json_array_foreach(seq, i, s) if (!strcmp(json_string_value(json_object_get(s, "step")) ?: "", after)) {
    json_array_insert_new(seq, i + 1, step);
    return;
  }
  json_array_append_new(seq, step);
}

static void remove_step(json_t *seq, const char *name) {
  size_t i;
  json_t *s;
  json_array_foreach(seq, i, s) if (!strcmp(json_string_value(json_object_get(s, "step")) ?: "", name)) {
    json_array_remove(seq, i);
    return;
  }
}

/* The closest contract's layer rewritten by the variants found. */
static json_t *full_attention_sequence(const json_t *qwen3_seq, const vf_qwen35_variant *v) {
  json_t *seq = json_deep_copy(qwen3_seq);
  const char *off = v->norm_offset != 0 ? "1" : "0";
  set_arg(step_named(seq, "attn_norm"), "w_offset", off);
  set_arg(step_named(seq, "mlp_norm"), "w_offset", off);
  if (v->qk == VF_Q35_QK_NONE) {
    remove_step(seq, "q_norm");
    remove_step(seq, "k_norm");
  } else {
    set_arg(step_named(seq, "q_norm"), "w_offset", v->qk == VF_Q35_QK_1W ? "1" : "0");
    set_arg(step_named(seq, "k_norm"), "w_offset", v->qk == VF_Q35_QK_1W ? "1" : "0");
  }
  if (!v->full_rotary) {
    set_arg(step_named(seq, "q_rope"), "rot_dim", "int:partial_rotary_factor * head_dim");
    set_arg(step_named(seq, "k_rope"), "rot_dim", "int:partial_rotary_factor * head_dim");
  }
  if (v->gate != VF_Q35_GATE_NONE) {
    /* q_proj now yields query and gate rows: into qg, then split */
    json_t *qp = step_named(seq, "q_proj");
    set_arg(qp, "y", "qg");
    set_arg(qp, "N", "2 * num_attention_heads * head_dim");
    json_object_set_new(qp, "what", json_string("qg = a q_proj^T  [T, 2*Hq*hd]: query and gate rows"));
    if (v->gate == VF_Q35_GATE_INTERLEAVED) { /* per head [hd query | hd gate]: qg rows of head_dim */
      insert_after(seq, "q_proj",
                   mkstep("q_split", "operator.copy2d", "q = the query rows of each head of qg",
                          json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "y", "q", "y_stride", "head_dim", "x", "qg",
                                    "x_stride", "2 * head_dim", "rows", "T * num_attention_heads", "n", "head_dim")));
      insert_after(seq, "q_split",
                   mkstep("gate_split", "operator.copy2d", "att_gate = the gate rows of each head of qg",
                          json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "y", "att_gate", "y_stride", "head_dim", "x",
                                    "qg+head_dim", "x_stride", "2 * head_dim", "rows", "T * num_attention_heads", "n",
                                    "head_dim")));
    } else { /* [all query | all gate] per token */
      insert_after(seq, "q_proj",
                   mkstep("q_split", "operator.copy2d", "q = the first half of each token's qg",
                          json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "y", "q", "y_stride",
                                    "num_attention_heads * head_dim", "x", "qg", "x_stride",
                                    "2 * num_attention_heads * head_dim", "rows", "T", "n",
                                    "num_attention_heads * head_dim")));
      insert_after(seq, "q_split",
                   mkstep("gate_split", "operator.copy2d", "att_gate = the second half of each token's qg",
                          json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "y", "att_gate", "y_stride",
                                    "num_attention_heads * head_dim", "x", "qg+num_attention_heads * head_dim", "x_stride",
                                    "2 * num_attention_heads * head_dim", "rows", "T", "n",
                                    "num_attention_heads * head_dim")));
    }
    insert_after(seq, "attention",
                 mkstep("output_gate", "operator.sigmoid_mul", "att = att * sigmoid(att_gate)",
                        json_pack("{s:s, s:s, s:s, s:s}", "y", "att", "x", "att", "g", "att_gate", "n",
                                  "T * num_attention_heads * head_dim")));
  }
  return seq;
}

static int has_weight_ref(const json_t *seq, const char *needle) {
  char *s = json_dumps(seq, JSON_COMPACT);
  int r = s && strstr(s, needle) != NULL;
  free(s);
  return r;
}

/* The bundle's layer: the whole layer, or only the mixer (then wrapped in
 * the closest contract's norm, residual and MLP steps). */
static json_t *linear_sequence(const json_t *layer, const json_t *full_seq) {
  const json_t *ls = json_object_get(layer, "sequence");
  if (has_weight_ref(ls, "input_layernorm")) return json_deep_copy(ls);
  json_t *seq = json_array();
  json_t *s;
  size_t i;
  int after = 0;
  json_array_append(seq, step_named((json_t *)full_seq, "attn_norm"));
  json_array_extend(seq, (json_t *)ls);
  json_array_foreach(full_seq, i, s) {
    if (!strcmp(json_string_value(json_object_get(s, "step")) ?: "", "attn_residual")) after = 1;
    if (after) json_array_append(seq, s);
  }
  json_t *copy = json_deep_copy(seq);
  json_decref(seq);
  return copy;
}

static void append_unique(json_t *arr, const json_t *items, const char *key) {
  size_t i, k;
  json_t *x, *y;
  json_array_foreach(items, i, x) {
    int dup = 0;
    json_array_foreach(arr, k, y) dup |= json_equal(json_object_get(x, key), json_object_get(y, key));
    if (!dup) json_array_append(arr, x);
  }
}

/* Where a config field lives in the checkpoint's config.json: the top
 * level, or one nested object down (Qwen3.5 keeps rope_theta and
 * partial_rotary_factor under rope_parameters). The path, or NULL. */
static const char *field_path(const json_t *cfg, const char *name, char *buf, size_t n, json_t **val) {
  *val = json_object_get(cfg, name);
  if (*val) return NULL;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)cfg, k, v) if (json_is_object(v) && json_object_get(v, name)) {
    *val = json_object_get(v, name);
    snprintf(buf, n, "%s.%s", k, name);
    return buf;
  }
  return NULL;
}

static json_t *find_cfg(json_t *arr, const char *name) {
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) if (!strcmp(json_string_value(json_object_get(x, "name")) ?: "", name)) return x;
  return NULL;
}

/* A config entry for a field the contract starts to read, typed from the
 * checkpoint's value, with its path when it is nested. */
static void add_cfg(json_t *arr, const json_t *cfg, const char *name, const char *meaning) {
  char pb[256];
  json_t *val = NULL;
  const char *path = field_path(cfg, name, pb, sizeof pb, &val);
  json_t *e = find_cfg(arr, name);
  if (!e) {
    const char *type = json_is_integer(val) ? "integer" : json_is_number(val) ? "number" : json_is_boolean(val) ? "boolean"
                       : json_is_array(val) ? "array" : "string";
    e = json_pack("{s:s, s:s, s:s}", "name", name, "type", type, "meaning", meaning);
    if (val) json_object_set_new(e, "required", json_true());
    json_array_append_new(arr, e);
  }
  if (path) json_object_set_new(e, "path", json_string(path));
}

typedef struct names_ctx {
  json_t *set; /* name -> true */
} names_ctx;

static void collect_name(void *user, const char *name, size_t len) {
  names_ctx *nc = user;
  char b[128];
  if (len >= sizeof b) return;
  memcpy(b, name, len);
  b[len] = 0;
  json_object_set_new(nc->set, b, json_true());
}

/* Every name an expression of the layer uses (shapes, integer arguments). */
static void expr_names(const json_t *j, names_ctx *nc) {
  if (json_is_string(j)) {
    const char *s = json_string_value(j);
    if (strchr(s, ':')) s = strncmp(s, "int:", 4) ? NULL : s + 4;
    if (s && strchr(s, '+') && !strchr(s, ' ')) return;
    char e[256];
    if (s) mi_expr_names(s, collect_name, nc, e, sizeof e);
  } else if (json_is_array(j)) {
    size_t i;
    json_t *x;
    json_array_foreach(j, i, x) expr_names(x, nc);
  } else if (json_is_object(j)) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)j, k, x) if (strcmp(k, "doc") && strcmp(k, "what") && strcmp(k, "step") &&
                                               strcmp(k, "operator") && strcmp(k, "key") && strcmp(k, "name"))
        expr_names(x, nc);
  }
}

static json_t *model_entry(const json_t *qwen3, const vf_qwen35_variant *v, const json_t *bundle, const json_t *cfg,
                           json_t *refs) {
  const json_t *layer = json_object_get(bundle, "layer");
  json_t *m = json_deep_copy(qwen3);
  json_object_set_new(m, "id", json_string("model.qwen35"));
  json_object_set_new(m, "version", json_string("1.0.0"));
  json_object_set_new(m, "provenance",
                      json_pack("{s:s, s:O, s:s}", "source", "evolved", "refs", refs, "notes",
                                "mi-gen --evolve: model.qwen3 rewritten by the variants the oracle picked, plus the "
                                "candidate bundle's linear-attention layer"));
  json_object_set_new(m, "summary",
                      json_string("Qwen3.5/3.6-style hybrid: gated full attention and gated-DeltaNet linear attention "
                                  "layers, zero-centred norms, partial rotary (evolved from model.qwen3)."));
  json_object_set_new(m, "architectures", json_pack("[s]", json_string_value(json_array_get(
                                                               json_object_get(cfg, "architectures"), 0)) ?: "Qwen3_5ForCausalLM"));
  json_object_set_new(m, "reference_plugin", json_string("qwen35"));
  json_object_set_new(m, "failure_modes", json_array());
  json_object_del(m, "tensor_parallel"); /* not derived for the DeltaNet heads */
  /* config: the closest contract's fields (with their path when the new
   * checkpoint nests them), the fields the variants read, and every name
   * the bundle's layer computes with that config.json has */
  json_t *cf = json_object_get(m, "config");
  size_t i;
  json_t *w;
  json_array_foreach(cf, i, w) {
    char pb[256];
    json_t *val;
    const char *path = field_path(cfg, json_string_value(json_object_get(w, "name")), pb, sizeof pb, &val);
    if (path) {
      json_object_set_new(w, "path", json_string(path));
      if (val) json_object_set(w, "default", val);
    }
  }
  if (!v->full_rotary) add_cfg(cf, cfg, "partial_rotary_factor", "fraction of head_dim that is rotated (NeoX)");
  if (v->gate != VF_Q35_GATE_NONE && json_object_get(cfg, "attn_output_gate")) {
    add_cfg(cf, cfg, "attn_output_gate", "q_proj carries a per-head output gate: att * sigmoid(gate) before o_proj");
    json_object_set_new(find_cfg(cf, "attn_output_gate"), "check", json_string("== true"));
  }
  add_cfg(cf, cfg, "full_attention_interval", "every Nth layer is full attention when layer_types is absent");
  /* a checkpoint with explicit layer_types may omit it, and an engine
   * still compiles the fallback: HF Qwen3_5TextConfig's default (4, the
   * one core/verify/models/qwen35.c assumes) */
  json_t *fi = find_cfg(cf, "full_attention_interval");
  if (!json_object_get(fi, "default")) {
    json_object_set_new(fi, "default", json_integer(4));
    json_object_set_new(fi, "type", json_string("integer")); /* not typed from an absent value */
    json_object_del(fi, "required");
  }
  names_ctx nc = {json_object()};
  expr_names(json_object_get(layer, "sequence"), &nc);
  expr_names(json_object_get(layer, "state"), &nc);
  expr_names(json_object_get(layer, "weights"), &nc);
  expr_names(json_object_get(layer, "buffers"), &nc);
  const char *k;
  json_t *x;
  json_object_foreach(nc.set, k, x) {
    char pb[256];
    json_t *val;
    field_path(cfg, k, pb, sizeof pb, &val);
    if (val && !find_cfg(cf, k)) add_cfg(cf, cfg, k, "read by the linear_attention layer (candidate bundle)");
  }
  json_decref(nc.set);
  /* the rotary reading the oracle picked is plain NeoX RoPE (rope_theta,
   * rot_dim from partial_rotary_factor): a rope_parameters block's type is
   * then "default", and its multimodal sections carry one position for
   * text, so they do not change the computation */
  json_t *rp = json_object_get(cfg, "rope_parameters");
  json_t *inert = json_object_get(m, "config_inert");
  if (json_is_object(rp) && json_is_array(inert)) {
    if (json_is_string(json_object_get(rp, "rope_type")))
      json_array_append_new(inert, json_pack("{s:s, s:s, s:[s]}", "name", "rope_parameters.rope_type", "why",
                                             "the default (unscaled) rotary frequencies are what operator.rope computes",
                                             "values", "default"));
    const char *mrope[] = {"mrope_interleaved", "mrope_section"};
    for (int q = 0; q < 2; q++)
      if (json_object_get(rp, mrope[q]))
        json_array_append_new(inert, json_pack("{s:o, s:s}", "name", json_sprintf("rope_parameters.%s", mrope[q]), "why",
                                               "multimodal RoPE: for text every section carries the same position, "
                                               "so it is plain NeoX RoPE on the rotated channels"));
  }
  /* weights: q_proj carries the gate; the attention weights only in full
   * layers; zero-centred norms start at zero */
  json_t *ws = json_object_get(m, "weights");
  json_array_foreach(ws, i, w) {
    const char *key = json_string_value(json_object_get(w, "key"));
    if (!key) continue;
    int qk = strstr(key, "q_norm") || strstr(key, "k_norm");
    json_object_del(w, "shard"); /* no tensor_parallel section: nothing is sharded */
    if (strstr(key, ".self_attn.")) json_object_set_new(w, "layer_kind", json_string("full_attention"));
    if (strstr(key, "q_proj") && v->gate != VF_Q35_GATE_NONE)
      json_array_set_new(json_object_get(w, "shape"), 0, json_string("2 * num_attention_heads * head_dim"));
    if ((qk && v->qk == VF_Q35_QK_1W) ||
        (!qk && strstr(key, "norm.weight") && v->norm_offset != 0))
      json_object_set_new(w, "init", json_string("zeros"));
  }
  json_t *lw = json_deep_copy(json_object_get(layer, "weights"));
  json_array_foreach(lw, i, w) if (!json_object_get(w, "layer_kind"))
      json_object_set_new(w, "layer_kind", json_string("linear_attention"));
  append_unique(ws, lw, "key");
  json_decref(lw);
  /* buffers: the gate split's, then the layer's */
  json_t *bufs = json_object_get(m, "buffers");
  if (v->gate != VF_Q35_GATE_NONE) {
    json_array_append_new(bufs, json_pack("{s:s, s:[s, s, s], s:s}", "name", "qg", "shape", "T", "num_attention_heads",
                                          "2 * head_dim", "doc", "q_proj output: query and gate rows"));
    json_array_append_new(bufs, json_pack("{s:s, s:[s, s, s], s:s}", "name", "att_gate", "shape", "T",
                                          "num_attention_heads", "head_dim", "doc", "the attention output gate"));
  }
  append_unique(bufs, json_object_get(layer, "buffers"), "name");
  /* the two layer kinds instead of one layer_sequence / cache */
  json_t *full = full_attention_sequence(json_object_get(qwen3, "layer_sequence"), v);
  json_t *lin = linear_sequence(layer, full);
  json_t *state = json_deep_copy(json_object_get(layer, "state"));
  json_object_set_new(
      m, "layer_kinds",
      json_pack("{s:s, s:s, s:s, s:{s:{s:o, s:O}, s:{s:o, s:o}}}", "config", "layer_types", "interval",
                "full_attention_interval", "doc",
                "layer l is full_attention when layer_types[l] says so; without layer_types, when (l + 1) % "
                "full_attention_interval == 0",
                "kinds", "full_attention", "sequence", full, "cache", json_object_get(qwen3, "cache"),
                "linear_attention", "sequence", lin, "state", state ? state : json_array()));
  json_object_del(m, "layer_sequence");
  json_object_del(m, "cache");
  /* the final norm follows the layer norms' variant */
  json_t *fn = step_named(json_object_get(m, "epilogue"), "final_norm");
  set_arg(fn, "w_offset", v->norm_offset != 0 ? "1" : "0");
  json_t *st = json_pack("{s:s}", "kv_cache", "per full_attention layer k and v: [n_ctx, num_key_value_heads, head_dim]");
  json_array_foreach(state, i, w) {
    char d[512];
    snprintf(d, sizeof d, "per linear_attention layer %s; zeroed by seq_truncate(0), carried across forwards",
             json_string_value(json_object_get(w, "doc")) ?: "");
    json_object_set_new(st, json_string_value(json_object_get(w, "name")) ?: "state", json_string(d));
  }
  json_object_set_new(m, "state", st);
  return m;
}

static json_t *experience_entry(const vf_qwen35_variant *v, const json_t *search, json_t *refs) {
  char name[96];
  ev_candidate_name(v, name, sizeof name);
  double worst_right = 0, best_wrong = 1e300;
  size_t i;
  json_t *r;
  json_array_foreach(search, i, r) {
    double e = json_number_value(json_object_get(r, "error"));
    if (!strcmp(json_string_value(json_object_get(r, "verdict")) ?: "", "pass")) worst_right = e > worst_right ? e : worst_right;
    else best_wrong = e < best_wrong ? e : best_wrong;
  }
  char summary[512];
  snprintf(summary, sizeof summary, "The Qwen3.5-style hybrid reads the Qwen3 math as %s (found by the variant search).", name);
  json_t *x = json_pack(
      "{s:s, s:s, s:s, s:{s:s, s:O}, s:s, s:s, s:s, s:s, s:s, s:s, s:{s:f, s:f, s:I}, s:[s, s]}", "id",
      "experience.evolved_qwen35_variants", "kind", "experience", "version", "1.0.0", "provenance", "source", "evolved",
      "refs", refs, "summary", summary, "symptom",
      "A Qwen3-contract engine on a Qwen3.5 checkpoint: logprobs off by O(0.1..10) at the first step.", "root_cause",
      "Zero-centred (1+w) norms, q_proj rows carrying a sigmoid output gate, and rotary on a fraction of head_dim.",
      "detection",
      "The float64 reference under each candidate reading, teacher-forced on llama.cpp qwen35 goldens of probe "
      "checkpoints (only full-attention layers speak): one reading within tolerance, every other far outside.",
      "fix", "model.qwen35 rewrites model.qwen3's layer by the reading found (layer_kinds.full_attention).",
      "verification", "Revalidation: mi-gen from scratch with references off on the updated CKB.", "measured",
      "max_error_found", worst_right, "min_error_other", best_wrong, "candidates", (json_int_t)json_array_size(search),
      "related", "model.qwen35", "test.stage4_end_to_end");
  return x;
}

/* Writes e (adds, or updates with a grown patch version when it differs). */
static int put(const char *dir, json_t *e, json_t *written, char *err, size_t n) {
  char e2[1024];
  mi_ckb *ck = mi_ckb_open(dir, e2, sizeof e2);
  if (!ck) {
    snprintf(err, n, "%s", e2);
    return -1;
  }
  const char *id = json_string_value(json_object_get(e, "id"));
  const mi_ckb_entry *old = mi_ckb_find(ck, id);
  mi_ckb_put_mode mode = MI_CKB_ADD;
  int same = 0;
  if (old) {
    json_t *a = json_deep_copy(old->json), *b = json_deep_copy(e);
    json_object_del(a, "version");
    json_object_del(b, "version");
    same = json_equal(a, b);
    json_decref(a);
    json_decref(b);
    if (!same) { /* the next patch version */
      int M = 1, m = 0, p = 0;
      sscanf(old->version ? old->version : "1.0.0", "%d.%d.%d", &M, &m, &p);
      char ver[48];
      snprintf(ver, sizeof ver, "%d.%d.%d", M, m, p + 1);
      json_object_set_new(e, "version", json_string(ver));
      mode = MI_CKB_UPDATE;
    }
  }
  mi_ckb_close(ck);
  if (!same) {
    diag_buf d = {{0}, 0};
    if (mi_ckb_put(dir, e, mode, diag, &d) != 0) {
      snprintf(err, n, "consolidator: %s not written: %s", id, d.n ? d.text : "mi_ckb_put failed");
      return -1;
    }
  }
  json_array_append_new(written, json_pack("{s:s, s:s, s:s}", "id", id, "version",
                                           json_string_value(json_object_get(e, "version")), "action",
                                           same ? "unchanged" : mode == MI_CKB_ADD ? "added" : "updated"));
  return 0;
}

int ev_consolidate(ev_ctx *c, const vf_qwen35_variant *found, const json_t *bundle, const json_t *search,
                   json_t **out, char *err, size_t n) {
  *out = json_array();
  char e2[1024];
  mi_ckb *ck = mi_ckb_open(c->o->ckb, e2, sizeof e2);
  if (!ck) {
    snprintf(err, n, "%s", e2);
    return -1;
  }
  const mi_ckb_entry *q3 = mi_ckb_find(ck, "model.qwen3");
  json_t *qwen3 = q3 ? json_deep_copy(q3->json) : NULL;
  mi_ckb_close(ck);
  if (!qwen3 || !c->model_cfg) {
    snprintf(err, n, "%s: no model.qwen3 (the closest covered contract) to evolve from", c->o->ckb);
    return -1;
  }
  json_t *refs = refs_of(c);
  int rc = 0;
  size_t i;
  json_t *op;
  json_array_foreach(json_object_get(bundle, "operator_entries"), i, op) {
    json_t *e = json_deep_copy(op);
    json_object_set(json_object_get(e, "provenance"), "refs", refs);
    rc = put(c->o->ckb, e, *out, err, n);
    json_decref(e);
    if (rc) break;
  }
  if (rc == 0 && json_array_size(json_object_get(bundle, "operator_entries"))) {
    /* the platform contract gains the bundle's kernels and ABI minor */
    char pid[160];
    snprintf(pid, sizeof pid, "platform.%s", c->o->platform ? c->o->platform : "cpu");
    mi_ckb *k2 = mi_ckb_open(c->o->ckb, e2, sizeof e2);
    const mi_ckb_entry *pe = k2 ? mi_ckb_find_platform(k2, c->o->platform ? c->o->platform : "cpu") : NULL;
    json_t *np = pe ? ev_platform_with_bundle(pe->json, bundle, c->o->platform ? c->o->platform : "cpu", err, n) : NULL;
    if (k2) mi_ckb_close(k2);
    if (!np) {
      if (!pe) snprintf(err, n, "%s: no platform contract %s", c->o->ckb, pid);
      rc = -1;
    } else {
      rc = put(c->o->ckb, np, *out, err, n);
      json_decref(np);
    }
  }
  if (rc == 0) {
    json_t *m = model_entry(qwen3, found, bundle, c->model_cfg, refs);
    rc = put(c->o->ckb, m, *out, err, n);
    json_decref(m);
  }
  if (rc == 0) {
    json_t *x = experience_entry(found, search, refs);
    rc = put(c->o->ckb, x, *out, err, n);
    json_decref(x);
  }
  json_decref(refs);
  json_decref(qwen3);
  return rc;
}
