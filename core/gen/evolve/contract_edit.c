/* The vocabulary of variants (ckb/variants/, kind "variant") and what the
 * search does with it, with no family named: which entries' evidence holds
 * in a checkpoint, a contract edited by a set of them, the probe form of a
 * contract (layer kinds it lacks, muted), a new layer kind from a candidate
 * bundle, and whether a contract explains every config field and weight of
 * a checkpoint. docs/evolution.md describes the entries' format. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/gen/evolve/evolve.h"
#include "core/runtime/safetensors.h"

/* ---------- the vocabulary ---------- */

static int by_group(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  int c = strcmp(json_string_value(json_object_get(x, "group")) ?: "",
                 json_string_value(json_object_get(y, "group")) ?: "");
  if (c) return c;
  json_int_t ox = json_integer_value(json_object_get(x, "order")),
             oy = json_integer_value(json_object_get(y, "order"));
  if (ox != oy) return ox < oy ? -1 : 1;
  return strcmp(json_string_value(json_object_get(x, "id")) ?: "",
                json_string_value(json_object_get(y, "id")) ?: "");
}

json_t *ev_vocab(const mi_ckb *c) {
  size_t n = mi_ckb_count(c), k = 0;
  json_t **v = calloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; v && i < n; i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (e->kind && !strcmp(e->kind, "variant") && json_is_object(e->json)) v[k++] = e->json;
  }
  if (v) qsort(v, k, sizeof *v, by_group);
  json_t *out = json_array();
  for (size_t i = 0; v && i < k; i++)
    json_array_append(out, v[i]);
  free(v);
  return out;
}

/* ---------- reading a checkpoint ---------- */

const json_t *ev_cfg_field(const json_t *cfg, const char *name) {
  if (strchr(name, '.')) return mi_ckb_config_at(cfg, name);
  const json_t *v = json_object_get(cfg, name);
  if (v) return v;
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)cfg, k,
                      x) if (json_is_object(x) && (v = json_object_get(x, name))) return v;
  return NULL;
}

/* The dotted path of a field one object down ("rope_parameters.rope_theta"), or NULL at the top
 * level. */
static const char *cfg_path(const json_t *cfg, const char *name, char *buf, size_t n) {
  if (json_object_get(cfg, name)) return NULL;
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)cfg, k, x) if (json_is_object(x) && json_object_get(x, name)) {
    snprintf(buf, n, "%s.%s", k, name);
    return buf;
  }
  return NULL;
}

/* Does a tensor name match a key whose {i} stands for any layer? */
static int key_matches(const char *key, const char *name) {
  const char *p = strstr(key, "{i}");
  if (!p) return !strcmp(key, name);
  size_t pre = (size_t)(p - key);
  if (strncmp(key, name, pre)) return 0;
  const char *q = name + pre;
  if (*q < '0' || *q > '9') return 0;
  while (*q >= '0' && *q <= '9')
    q++;
  return !strcmp(q, p + 3);
}

/* The first tensor matching key into *x (may be NULL): 1, or 0 when none does. */
static int first_weight(const mi_weights *w, const char *key, mi_weight_info *x) {
  mi_weight_info y, *out = x ? x : &y;
  for (size_t k = 0; k < mi_weights_count(w); k++)
    if (mi_weights_at(w, k, out) == 0 && key_matches(key, out->name)) return 1;
  return 0;
}

static int has_weight(const mi_weights *w, const char *key) { return first_weight(w, key, NULL); }

int ev_has_weight(const mi_weights *w, const char *key) { return has_weight(w, key); }

/* Does the first tensor matching key hold as many values as the first
 * matching rows_key has rows? */
static int elements_equal_rows(const mi_weights *w, const char *key, const char *rows_key) {
  mi_weight_info a, b;
  if (!first_weight(w, key, &a) || !first_weight(w, rows_key, &b) || b.ndim < 1) return 0;
  int64_t n = 1;
  for (int d = 0; d < a.ndim; d++) n *= a.shape[d];
  return n == b.shape[0];
}

static int distinct(const json_t *arr) {
  int n = 0;
  for (size_t i = 0; i < json_array_size(arr); i++) {
    int seen = 0;
    for (size_t k = 0; k < i; k++)
      seen |= json_equal(json_array_get(arr, i), json_array_get(arr, k));
    n += !seen;
  }
  return n;
}

/* One evidence item: a config field's value or key, a weight's presence,
 * or "any": at least one of its items. */
static int evidence_holds(const json_t *e, const json_t *cfg, const mi_weights *w, int depth) {
  const json_t *any = json_object_get(e, "any");
  if (json_is_array(any)) {
    size_t i;
    json_t *x;
    json_array_foreach(any, i, x) if (depth < 4 && evidence_holds(x, cfg, w, depth + 1)) return 1;
    return 0;
  }
  const json_t *pr = json_object_get(e, "present"), *eq = json_object_get(e, "equals");
  const json_t *key = json_object_get(e, "key"); /* the key is there, null or not */
  const json_t *dn = json_object_get(e, "distinct_at_least");
  const char *f = json_string_value(json_object_get(e, "config")),
             *wk = json_string_value(json_object_get(e, "weight"));
  if (f) {
    const json_t *v = ev_cfg_field(cfg, f);
    int there = v && !json_is_null(v);
    if (pr && json_is_true(pr) != there) return 0;
    if (key && json_is_true(key) != (v != NULL)) return 0;
    if (eq && (!v || !json_equal(v, eq))) return 0;
    if (dn && (!json_is_array(v) || distinct(v) < json_integer_value(dn))) return 0;
  } else if (wk) {
    if ((pr ? json_is_true(pr) : 1) != has_weight(w, wk)) return 0;
    /* "elements_equal_rows": KEY: the first matching tensor holds as many
     * values as KEY's tensor has rows (a q norm spanning all of q_proj's
     * outputs, OLMo 2's, against one head's) */
    const char *rk = json_string_value(json_object_get(e, "elements_equal_rows"));
    if (rk && !elements_equal_rows(w, wk, rk)) return 0;
  }
  return 1;
}

int ev_evidence(const json_t *variant, const json_t *cfg, const mi_weights *w) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(variant, "evidence"), i, e) if (!evidence_holds(e, cfg, w, 0)) return 0;
  return 1;
}

/* ---------- editing a contract ---------- */

/* Every step sequence of a contract (prologue, layer_sequence, each kind's, epilogue). */
static int sequences(json_t *m, json_t **out, int max) {
  int n = 0;
  const char *top[] = {"prologue", "layer_sequence", "epilogue"};
  for (int i = 0; i < 3 && n < max; i++)
    if (json_is_array(json_object_get(m, top[i]))) out[n++] = json_object_get(m, top[i]);
  const char *k;
  json_t *kd;
  json_object_foreach(json_object_get(json_object_get(m, "layer_kinds"), "kinds"), k,
                      kd) if (n < max && json_is_array(json_object_get(kd, "sequence"))) out[n++] =
      json_object_get(kd, "sequence");
  return n;
}

static void remove_named(json_t *arr, const char *field, const char *name) {
  for (size_t i = json_array_size(arr); i-- > 0;)
    if (!strcmp(json_string_value(json_object_get(json_array_get(arr, i), field)) ?: "", name))
      json_array_remove(arr, i);
}

/* The sequence of layer kind `kind`, or NULL. */
static json_t *kind_sequence(json_t *m, const char *kind) {
  return json_object_get(
      json_object_get(json_object_get(json_object_get(m, "layer_kinds"), "kinds"), kind), "sequence");
}

/* split_kinds: one layer sequence (and its cache) becomes several layer
 * kinds computing the same steps, each a copy, which later settings with a
 * "kind" tell apart (a sliding-window kind and a full one). Only a contract
 * with one layer sequence and no kinds is split. */
static void split_kinds(json_t *m, const json_t *sk) {
  const json_t *names = json_object_get(sk, "kinds");
  json_t *seq = json_object_get(m, "layer_sequence");
  if (!json_is_object(sk) || !json_is_array(names) || !json_is_array(seq) ||
      json_object_get(m, "layer_kinds"))
    return;
  json_t *kinds = json_object();
  size_t i;
  json_t *x;
  json_array_foreach(names, i, x) if (json_is_string(x)) json_object_set_new(
      kinds, json_string_value(x),
      json_pack("{s:o, s:o*}", "sequence", json_deep_copy(seq), "cache",
                json_deep_copy(json_object_get(m, "cache"))));
  json_t *lk = json_pack("{s:o}", "kinds", kinds);
  const char *k;
  json_object_foreach((json_t *)sk, k, x) if (strcmp(k, "kinds")) json_object_set(lk, k, x);
  json_object_set_new(m, "layer_kinds", lk);
  json_object_del(m, "layer_sequence");
  json_object_del(m, "cache");
  /* the per-layer array is read now, no longer inert */
  const char *f = json_string_value(json_object_get(sk, "config"));
  if (f) remove_named(json_object_get(m, "config_inert"), "name", f);
}

/* A config entry for a field the contract starts to read: typed from the
 * checkpoint's value, with its path when nested. */
static void add_config(json_t *m, const json_t *spec, const json_t *cfg) {
  json_t *cf = json_object_get(m, "config");
  const char *name = json_string_value(json_object_get(spec, "name"));
  const json_t *val = ev_cfg_field(cfg, name);
  if (!json_is_array(cf) || mi_ckb_named(cf, "name", name)) return;
  if (json_is_true(json_object_get(spec, "if_present")) && !val) return;
  json_t *e = json_deep_copy(spec);
  json_object_del(e, "if_present");
  char pb[256];
  const char *path = cfg_path(cfg, name, pb, sizeof pb);
  if (path) json_object_set_new(e, "path", json_string(path));
  if (!json_object_get(e, "type") && val)
    json_object_set_new(e, "type",
                        json_string(json_is_boolean(val)   ? "boolean"
                                    : json_is_integer(val) ? "integer"
                                    : json_is_number(val)  ? "number"
                                    : json_is_string(val)  ? "string"
                                    : json_is_array(val)   ? "array"
                                                           : "object"));
  /* the probe's value is no default for another checkpoint: required, unless the entry names its
   * own default (a value, or an expression it derives one from) */
  if (val && !json_object_get(e, "default") && !json_object_get(e, "default_expr") &&
      !json_object_get(e, "required"))
    json_object_set_new(e, "required", json_true());
  json_array_append_new(cf, e);
}

static void merge(json_t *into, const json_t *from, const char *skip) {
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)from, k, x) if (strcmp(k, skip))
      json_object_set_new(into, k, json_deep_copy(x));
}

/* Does a setting reach sequence seq? One with a "kind" reaches that layer
 * kind's sequence alone (none, when the contract lacks the kind); one with
 * "kind_if_split" the same when the contract has layer kinds, and every
 * sequence when it has one (HF's rope scaling: the full-attention layers'
 * where a model tells kinds apart, every layer's where it does not); one
 * with neither, every sequence. */
static int reaches(json_t *m, const json_t *x, const json_t *seq) {
  const char *kind = json_string_value(json_object_get(x, "kind")),
             *if_split = json_string_value(json_object_get(x, "kind_if_split"));
  if (if_split && !kind) kind = json_object_get(m, "layer_kinds") ? if_split : NULL;
  return !kind || kind_sequence(m, kind) == seq;
}

/* rebind_operators: a step's operator replaced by another wherever it is
 * that operator, whichever member put it there (a soft-capped attention for
 * plain or sliding attention): the last pass, after every member's set_step. */
static void rebind_operators(json_t **seqs, int ns, const json_t *list) {
  size_t i;
  json_t *x;
  json_array_foreach(list, i, x) {
    const char *step = json_string_value(json_object_get(x, "step")), *from = json_string_value(json_object_get(x, "from"));
    json_t *to = json_object_get(x, "to");
    for (int s = 0; s < ns && step && from && json_is_string(to); s++) {
      json_t *st = mi_ckb_named(seqs[s], "step", step);
      if (st && !strcmp(json_string_value(json_object_get(st, "operator")) ?: "", from))
        json_object_set(st, "operator", to);
    }
  }
}

/* One "weight:OLD" reference renamed in a step's arguments. */
static void rename_refs(json_t *args, const char *from, const char *to) {
  const char *k;
  json_t *v;
  char want[600];
  snprintf(want, sizeof want, "weight:%s", from);
  json_object_foreach(args, k, v) if (json_is_string(v) && !strcmp(json_string_value(v), want)) {
    char now[600];
    snprintf(now, sizeof now, "weight:%s", to);
    json_object_set_new(args, k, json_string(now));
  }
}

/* rename_weights: a weight the family stores under another name
 * (self_attn.dense for o_proj, final_layernorm for norm), whichever member
 * added it: its map entry, another entry's fallback to it, every step
 * argument reading it and the GGUF name mapped to it. Last, so a bias
 * another member adds is renamed too. */
static void rename_weights(json_t *m, json_t **seqs, int ns, const json_t *map) {
  const char *from;
  json_t *tov;
  json_t *weights = json_object_get(m, "weights"), *tensors = json_object_get(json_object_get(m, "gguf"), "tensors");
  json_object_foreach((json_t *)map, from, tov) {
    const char *to = json_string_value(tov);
    json_t *w = to ? mi_ckb_named(weights, "key", from) : NULL;
    if (!w) continue;
    json_object_set_new(w, "key", json_string(to));
    size_t i;
    json_t *x;
    json_array_foreach(weights, i, x) {
      const char *fb = json_string_value(json_object_get(x, "fallback"));
      if (fb && !strcmp(fb, from)) json_object_set_new(x, "fallback", json_string(to));
    }
    for (int s = 0; s < ns; s++) json_array_foreach(seqs[s], i, x) rename_refs(json_object_get(x, "args"), from, to);
    const char *g;
    json_object_foreach(tensors, g, x) if (json_is_string(x) && !strcmp(json_string_value(x), from))
        json_object_set_new(tensors, g, json_string(to));
  }
}

/* pass 0: layer kinds split from one sequence; pass 1: the structure (steps,
 * weights, buffers, config); pass 2: settings on what now exists; pass 3:
 * operators rebound and weights renamed where any member set or added them */
static void apply_one(json_t *m, const json_t *ed, const json_t *cfg, int pass) {
  if (pass == 0) {
    split_kinds(m, json_object_get(ed, "split_kinds"));
    return;
  }
  json_t *seqs[16];
  const int ns = sequences(m, seqs, 16);
  if (pass == 3) {
    rebind_operators(seqs, ns, json_object_get(ed, "rebind_operators"));
    rename_weights(m, seqs, ns, json_object_get(ed, "rename_weights"));
    return;
  }
  size_t i;
  json_t *x;
  if (pass == 1) {
    /* a step's name (every sequence), or {"step", "kind"}: that layer kind's alone */
    json_array_foreach(json_object_get(ed, "remove_steps"), i, x) for (int s = 0; s < ns; s++) {
      if (json_is_string(x)) remove_named(seqs[s], "step", json_string_value(x));
      else if (reaches(m, x, seqs[s])) remove_named(seqs[s], "step", json_string_value(json_object_get(x, "step")));
    }
    json_array_foreach(json_object_get(ed, "insert_steps"), i, x) {
      const char *after = json_string_value(json_object_get(x, "after")),
                 *before = json_string_value(json_object_get(x, "before"));
      for (int s = 0; s < ns; s++) {
        size_t k;
        json_t *st;
        json_array_foreach(seqs[s], k, st) {
          const char *nm = json_string_value(json_object_get(st, "step")) ?: "";
          if ((after && !strcmp(nm, after)) || (before && !strcmp(nm, before))) {
            json_array_insert_new(seqs[s], after ? k + 1 : k,
                                  json_deep_copy(json_object_get(x, "step")));
            break;
          }
        }
      }
    }
    json_t *ws = json_object_get(m, "weights");
    json_array_foreach(json_object_get(ed, "remove_weights"), i, x)
        remove_named(ws, "key", json_string_value(x));
    json_array_foreach(json_object_get(ed, "add_weights"), i,
                       x) if (!mi_ckb_named(ws, "key", json_string_value(json_object_get(x, "key"))))
        json_array_append_new(ws, json_deep_copy(x));
    json_t *bufs = json_object_get(m, "buffers");
    json_array_foreach(json_object_get(ed, "add_buffers"), i,
                       x) if (!mi_ckb_named(bufs, "name", json_string_value(json_object_get(x, "name"))))
        json_array_append_new(bufs, json_deep_copy(x));
    json_array_foreach(json_object_get(ed, "remove_config"), i, x)
        remove_named(json_object_get(m, "config"), "name", json_string_value(x));
    json_array_foreach(json_object_get(ed, "add_config"), i, x) add_config(m, x, cfg);
    json_t *inert = json_object_get(m, "config_inert");
    if (!json_is_array(inert)) json_object_set_new(m, "config_inert", inert = json_array());
    json_array_foreach(json_object_get(ed, "remove_inert"), i, x)
        remove_named(inert, "name", json_string_value(x));
    json_array_foreach(json_object_get(ed, "add_inert"), i, x) {
      const char *nm = json_string_value(json_object_get(x, "name"));
      if (mi_ckb_named(inert, "name", nm) ||
          (json_is_true(json_object_get(x, "if_present")) && !ev_cfg_field(cfg, nm)))
        continue;
      json_t *e = json_deep_copy(x);
      json_object_del(e, "if_present");
      json_array_append_new(inert, e);
    }
    /* the section a config class declares (the architecture llama.cpp names
     * the family, its names where they are the family's own): before any
     * member adds the names and keys of what it brings (pass 2) */
    json_t *gg = json_object_get(m, "gguf");
    const json_t *sg = json_object_get(ed, "set_gguf");
    if (json_is_object(gg) && json_is_object(sg)) {
      merge(gg, sg, "");
      json_object_set_new(gg, "x-declared", json_true());
    }
    /* fields the contract's layer kinds lack: a split's own interval stays */
    json_t *lk = json_object_get(m, "layer_kinds");
    const char *k;
    json_object_foreach(json_object_get(ed, "layer_kinds"), k, x) if (json_is_object(lk) && !json_object_get(lk, k))
        json_object_set_new(lk, k, json_deep_copy(x));
    return;
  }
  /* a member whose weights no shard mode states (fused rows): no tensor
   * parallelism; in the settings pass, so every member's weights are there */
  if (json_object_get(ed, "drop_tensor_parallel")) {
    json_object_del(m, "tensor_parallel");
    json_array_foreach(json_object_get(m, "weights"), i, x) json_object_del(x, "shard");
  }
  json_array_foreach(json_object_get(ed, "set_args"), i, x) {
    for (int s = 0; s < ns; s++) {
      json_t *st = !reaches(m, x, seqs[s]) ? NULL
                                           : mi_ckb_named(seqs[s], "step", json_string_value(json_object_get(x, "step")));
      /* a null value removes the argument (a non-gated MLP's activation
       * takes one input where the gated form took two) */
      const char *arg = json_string_value(json_object_get(x, "arg"));
      json_t *val = json_object_get(x, "value");
      if (st && arg && json_is_null(val)) json_object_del(json_object_get(st, "args"), arg);
      else if (st && arg) json_object_set(json_object_get(st, "args"), arg, val);
    }
  }
  json_array_foreach(json_object_get(ed, "set_step"), i, x) {
    for (int s = 0; s < ns; s++) {
      json_t *st = !reaches(m, x, seqs[s]) ? NULL
                                           : mi_ckb_named(seqs[s], "step", json_string_value(json_object_get(x, "step")));
      if (!st) continue;
      merge(st, x, "step");
      json_object_del(st, "kind");
      json_object_del(st, "kind_if_split");
    }
  }
  json_array_foreach(json_object_get(ed, "set_weights"), i, x) {
    json_t *w =
        mi_ckb_named(json_object_get(m, "weights"), "key", json_string_value(json_object_get(x, "key")));
    if (w) merge(w, x, "key");
  }
  json_array_foreach(json_object_get(ed, "set_config"), i, x) {
    json_t *c =
        mi_ckb_named(json_object_get(m, "config"), "name", json_string_value(json_object_get(x, "name")));
    if (c) merge(c, x, "name");
  }
  json_array_foreach(json_object_get(ed, "set_inert"), i, x) {
    json_t *c =
        mi_ckb_named(json_object_get(m, "config_inert"), "name", json_string_value(json_object_get(x, "name")));
    if (c) merge(c, x, "name");
  }
  /* the GGUF names of what a variant adds, and the architecture a config
   * class declares (the consolidator keeps a declared section: ev_gguf_section) */
  json_t *gg = json_object_get(m, "gguf"), *gt = json_object_get(gg, "tensors");
  const char *k;
  json_object_foreach(json_object_get(ed, "add_gguf_tensors"), k, x) if (json_is_object(gt)) json_object_set(gt, k, x);
  /* the keys that state the config fields the edit adds, and the tensors
   * llama.cpp stores otherwise than the checkpoint (a 1 + w norm as 1 + w) */
  const char *const sub[] = {"add_gguf_config", "config", "add_gguf_transforms", "transforms"};
  for (int s = 0; s < 4; s += 2)
    json_object_foreach(json_object_get(ed, sub[s]), k, x) if (json_is_object(gg)) {
      json_t *into = json_object_get(gg, sub[s + 1]);
      if (!into) json_object_set_new(gg, sub[s + 1], into = json_object());
      json_object_set(into, k, x);
    }
  /* a tensor the file states a config field the edit adds by (rope_freqs) */
  json_object_foreach(json_object_get(ed, "add_gguf_derive"), k, x) if (json_is_object(gg)) {
    json_t *dv = json_object_get(gg, "derive");
    if (!dv) json_object_set_new(gg, "derive", dv = json_object());
    json_object_set(dv, k, x);
  }
}

int ev_gguf_section(json_t *m) {
  json_t *gg = json_object_get(m, "gguf"), *t = json_object_get(gg, "tensors"), *ws = json_object_get(m, "weights");
  if (!json_is_true(json_object_get(gg, "x-declared"))) {
    json_object_del(m, "gguf");
    return 0;
  }
  json_object_del(gg, "x-declared");
  /* the base's names of weights the contract no longer has go */
  const char *k;
  json_t *x, *drop = json_array();
  json_object_foreach(t, k, x) if (!mi_ckb_named(ws, "key", json_string_value(x))) json_array_append_new(drop, json_string(k));
  size_t i;
  json_array_foreach(drop, i, x) json_object_del(t, json_string_value(x));
  json_decref(drop);
  /* and the transforms of names the section no longer has */
  json_t *tr = json_object_get(gg, "transforms");
  drop = json_array();
  json_object_foreach(tr, k, x) if (!json_object_get(t, k)) json_array_append_new(drop, json_string(k));
  json_array_foreach(drop, i, x) json_object_del(tr, json_string_value(x));
  json_decref(drop);
  if (json_is_object(tr) && !json_object_size(tr)) json_object_del(gg, "transforms");
  /* every weight named, or no section: a file could not serve the model */
  json_array_foreach(ws, i, x) {
    const char *key = json_string_value(json_object_get(x, "key"));
    int named = 0;
    json_t *v;
    json_object_foreach(t, k, v) named |= key && json_is_string(v) && !strcmp(json_string_value(v), key);
    if (!named) {
      json_object_del(m, "gguf");
      return 0;
    }
  }
  return 1;
}

json_t *ev_apply(const json_t *contract, const json_t *variants, const json_t *cfg) {
  json_t *m = json_deep_copy(contract);
  for (int pass = 0; pass < 4; pass++) {
    size_t i;
    json_t *v;
    json_array_foreach(variants, i, v) apply_one(m, json_object_get(v, "edit"), cfg, pass);
  }
  return m;
}

/* ---------- layer kinds ---------- */

/* The config field listing each layer's kind, as the contract accounts for
 * it (its layer_kinds, else a config_inert entry with "items"), and the
 * kinds the contract computes. NULL when the checkpoint has no such array. */
static const char *kinds_field(const json_t *m, const json_t *cfg, const json_t **known) {
  const json_t *lk = json_object_get(m, "layer_kinds");
  const char *f = json_string_value(json_object_get(lk, "config"));
  *known = NULL;
  if (f) return json_is_array(ev_cfg_field(cfg, f)) ? f : NULL;
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(m, "config_inert"), i, x) {
    const char *nm = json_string_value(json_object_get(x, "name"));
    if (nm && json_is_array(json_object_get(x, "items")) && json_is_array(ev_cfg_field(cfg, nm))) {
      *known = json_object_get(x, "items");
      return nm;
    }
  }
  return NULL;
}

static int in_list(const json_t *arr, const json_t *v) {
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) if (json_equal(x, v)) return 1;
  return 0;
}

json_t *ev_missing_kinds(const json_t *m, const json_t *cfg) {
  json_t *out = json_array();
  const json_t *known;
  const char *f = kinds_field(m, cfg, &known);
  const json_t *kinds = json_object_get(json_object_get(m, "layer_kinds"), "kinds");
  size_t i;
  json_t *x;
  json_array_foreach(f ? ev_cfg_field(cfg, f) : NULL, i, x) {
    const char *k = json_string_value(x);
    if (!k || in_list(out, x)) continue;
    const json_t *kd = kinds ? json_object_get(kinds, k) : NULL;
    if (kinds ? !kd || json_is_true(json_object_get(kd, "muted")) : !in_list(known, x))
      json_array_append(out, x);
  }
  return out;
}

/* The steps of a layer after its first residual add: what a layer whose
 * mixer output projection is zero computes (a probe's muted kind). */
static json_t *after_first_add(const json_t *seq) {
  json_t *out = json_array();
  int after = 0;
  size_t i;
  json_t *s;
  json_array_foreach(seq, i, s) {
    if (after)
      json_array_append_new(out, json_deep_copy(s));
    else if (!strcmp(json_string_value(json_object_get(s, "operator")) ?: "", "operator.add"))
      after = 1;
  }
  return out;
}

/* Does a member of groups (group -> members in play) split the layer into
 * every kind in miss? Then those kinds are computed, not a probe's muted
 * ones. */
static int split_covers(const json_t *groups, const json_t *miss) {
  const char *g;
  json_t *arr;
  json_object_foreach((json_t *)groups, g, arr) {
    size_t i, k;
    json_t *v, *x;
    json_array_foreach(arr, i, v) {
      const json_t *kinds = json_object_get(json_object_get(json_object_get(v, "edit"), "split_kinds"), "kinds");
      int all = json_array_size(miss) > 0 && json_is_array(kinds);
      json_array_foreach(miss, k, x) all &= in_list(kinds, x);
      if (all) return 1;
    }
  }
  return 0;
}

json_t *ev_probe_form(const json_t *base, const json_t *cfg, const json_t *groups) {
  json_t *m = json_deep_copy(base);
  /* the base's fields where the new checkpoint nests them (rope_theta
   * under rope_parameters), that value their default */
  size_t fi;
  json_t *fe;
  json_array_foreach(json_object_get(m, "config"), fi, fe) {
    const char *nm = json_string_value(json_object_get(fe, "name"));
    char pb[256];
    const char *path = nm && !json_object_get(fe, "path") ? cfg_path(cfg, nm, pb, sizeof pb) : NULL;
    if (!path) continue;
    json_object_set_new(fe, "path", json_string(path));
    json_object_set(fe, "default", (json_t *)ev_cfg_field(cfg, nm));
  }
  json_t *miss = ev_missing_kinds(m, cfg);
  const json_t *known;
  char f[256]; /* a copy: its config_inert entry is removed below */
  snprintf(f, sizeof f, "%s", kinds_field(m, cfg, &known) ?: "");
  if (!json_array_size(miss) || json_object_get(m, "layer_kinds") || !json_array_size(known) ||
      split_covers(groups, miss)) {
    json_decref(miss);
    return m;
  }
  /* one layer sequence becomes the kind the contract computes, and each
   * kind it lacks runs the same layer from its first residual add on */
  const char *own = json_string_value(json_array_get(known, 0));
  json_t *kinds = json_object();
  json_object_set_new(kinds, own,
                      json_pack("{s:O, s:O*}", "sequence", json_object_get(m, "layer_sequence"),
                                "cache", json_object_get(m, "cache")));
  size_t i;
  json_t *x;
  json_array_foreach(miss, i, x) json_object_set_new(
      kinds, json_string_value(x),
      json_pack("{s:o, s:b}", "sequence", after_first_add(json_object_get(m, "layer_sequence")),
                "muted", 1));
  json_object_set_new(m, "layer_kinds",
                      json_pack("{s:s, s:s, s:o}", "config", f, "doc",
                                "layer l's kind is config.json's per-layer array", "kinds", kinds));
  json_object_del(m, "layer_sequence");
  json_object_del(m, "cache");
  remove_named(json_object_get(m, "config_inert"), "name", f);
  json_decref(miss);
  return m;
}

typedef struct names_ctx {
  json_t *set;
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
    json_object_foreach((json_t *)j, k, x) if (strcmp(k, "doc") && strcmp(k, "what") &&
                                               strcmp(k, "step") && strcmp(k, "operator") &&
                                               strcmp(k, "key") && strcmp(k, "name"))
        expr_names(x, nc);
  }
}

static int seq_uses(const json_t *seq, const char *key) {
  char needle[600];
  snprintf(needle, sizeof needle, "weight:%s", key);
  char *s = json_dumps(seq, JSON_COMPACT);
  int r = s && strstr(s, needle) != NULL;
  free(s);
  return r;
}

json_t *ev_with_layer(const json_t *contract, const json_t *layer, const json_t *cfg) {
  json_t *m = json_deep_copy(contract);
  const char *kind = json_string_value(json_object_get(layer, "layer_kind"));
  json_t *kinds = json_object_get(json_object_get(m, "layer_kinds"), "kinds");
  if (!kind || !json_is_object(kinds)) return m;
  json_t *state = json_deep_copy(json_object_get(layer, "state"));
  json_object_set_new(kinds, kind,
                      json_pack("{s:O, s:o}", "sequence", json_object_get(layer, "sequence"),
                                "state", state ? state : json_array()));
  /* a weight only the steps of one kind read belongs to that kind's layers */
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(m, "weights"), i, w) {
    const char *key = json_string_value(json_object_get(w, "key"));
    json_object_del(w, "shard"); /* tensor_parallel is not derived for a new kind's heads */
    if (!key || !json_is_true(json_object_get(w, "per_layer")) || json_object_get(w, "layer_kind"))
      continue;
    const char *only = NULL;
    int users = 0;
    const char *k;
    json_t *kd;
    json_object_foreach(kinds, k, kd) if (seq_uses(json_object_get(kd, "sequence"), key)) users++,
        only = k;
    if (users == 1) json_object_set_new(w, "layer_kind", json_string(only));
  }
  json_array_foreach(json_object_get(layer, "weights"), i,
                     w) if (!mi_ckb_named(json_object_get(m, "weights"), "key",
                                   json_string_value(json_object_get(w, "key")))) {
    json_t *c = json_deep_copy(w);
    if (!json_object_get(c, "layer_kind")) json_object_set_new(c, "layer_kind", json_string(kind));
    json_array_append_new(json_object_get(m, "weights"), c);
  }
  json_array_foreach(json_object_get(layer, "buffers"), i,
                     w) if (!mi_ckb_named(json_object_get(m, "buffers"), "name",
                                   json_string_value(json_object_get(w, "name"))))
      json_array_append(json_object_get(m, "buffers"), w);
  /* every name the layer computes with that config.json has */
  names_ctx nc = {json_object()};
  const char *parts[] = {"sequence", "state", "weights", "buffers"};
  for (int p = 0; p < 4; p++)
    expr_names(json_object_get(layer, parts[p]), &nc);
  const char *k;
  json_t *x;
  json_object_foreach(nc.set, k, x) if (ev_cfg_field(cfg, k)) {
    json_t *spec =
        json_pack("{s:s, s:s}", "name", k, "meaning", "read by the candidate bundle's layer");
    char mb[200];
    snprintf(mb, sizeof mb, "read by the %s layer (candidate bundle)", kind);
    json_object_set_new(spec, "meaning", json_string(mb));
    add_config(m, spec, cfg);
    json_decref(spec);
  }
  json_decref(nc.set);
  json_object_del(m, "tensor_parallel");
  /* the state each layer kind carries, in words */
  json_t *st = json_object();
  json_object_foreach(kinds, k, x) {
    size_t j;
    json_t *c;
    json_array_foreach(json_object_get(x, "cache"), j, c) {
      char d[600];
      snprintf(d, sizeof d, "per %s layer: %s", k,
               json_string_value(json_object_get(c, "doc")) ?: "");
      json_object_set_new(st, json_string_value(json_object_get(c, "name")) ?: "cache",
                          json_string(d));
    }
    json_array_foreach(json_object_get(x, "state"), j, c) {
      char d[600];
      snprintf(d, sizeof d, "per %s layer %s; zeroed by seq_truncate(0), carried across forwards",
               k, json_string_value(json_object_get(c, "doc")) ?: "");
      json_object_set_new(st, json_string_value(json_object_get(c, "name")) ?: "state",
                          json_string(d));
    }
  }
  json_object_set_new(m, "state", st);
  return m;
}

/* ---------- explaining a checkpoint ---------- */

/* The layer a tensor name belongs to under the per-layer key's prefix, or -1. */
static int64_t layer_of(const json_t *m, const char *name) {
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(m, "weights"), i, w) {
    const char *key = json_string_value(json_object_get(w, "key")),
               *p = key ? strstr(key, "{i}") : NULL;
    if (!p || strncmp(key, name, (size_t)(p - key))) continue;
    const char *q = name + (p - key);
    if (*q < '0' || *q > '9') continue;
    return strtoll(q, NULL, 10);
  }
  return -1;
}

int ev_explain(const json_t *m, const json_t *cfg, const mi_weights *w, json_t *unexplained,
               json_t *deferred) {
  const char *id = json_string_value(json_object_get(m, "id")) ?: "the contract";
  /* config: every field bound, supported or inert */
  json_t *lines = json_array();
  mi_ckb_entry e = {.id = id, .kind = "model", .json = (json_t *)m};
  mi_ckb_config_gaps(&e, cfg, lines);
  json_t *miss = ev_missing_kinds(m, cfg);
  size_t i;
  json_t *x;
  json_array_foreach(lines, i, x) {
    /* with a layer kind the contract lacks, what that kind reads is the candidate bundle's to
     * explain */
    const char *s = json_string_value(x);
    int later = json_array_size(miss) && deferred && !strstr(s, "required");
    json_array_append(later ? deferred : unexplained, x);
  }
  json_decref(lines);
  /* weights: each expected one there with its shape, each tensor expected */
  mi_ckb_layer_ctx sc = {m, cfg, 0};
  int64_t layers = 0;
  const char *lf = json_string_value(json_object_get(m, "layers"));
  if (lf && mi_ckb_layer_lookup(&sc, lf, strlen(lf), &layers) != 0) layers = 0;
  size_t nt = mi_weights_count(w);
  char *seen = calloc(nt ? nt : 1, 1);
  const json_t *layout = mi_ckb_model_layout(m, cfg);
  json_array_foreach(json_object_get(m, "weights"), i, x) {
    const char *key = json_string_value(json_object_get(x, "key"));
    if (!key || !mi_ckb_when_holds(m, cfg, json_string_value(json_object_get(x, "when")))) continue;
    const int per = json_is_true(json_object_get(x, "per_layer"));
    const char *only = json_string_value(json_object_get(x, "layer_kind"));
    for (int64_t l = 0; l < (per ? layers : 1); l++) {
      const char *lk = per ? mi_ckb_layer_kind(m, cfg, l) : NULL;
      if (only && per && (!lk || strcmp(lk, only))) continue;
      char name[512], ck[512];
      const char *p = strstr(key, "{i}");
      if (p)
        snprintf(ck, sizeof ck, "%.*s%lld%s", (int)(p - key), key, (long long)l, p + 3);
      else
        snprintf(ck, sizeof ck, "%s", key);
      mi_ckb_layout_rename(layout, ck, name, sizeof name); /* as a wrapper layout spells it */
      int found = -1;
      for (size_t k = 0; k < nt; k++) {
        mi_weight_info wi;
        if (mi_weights_at(w, k, &wi) == 0 && !strcmp(wi.name, name)) found = (int)k;
      }
      if (found < 0) {
        /* a muted layer's own weights may be absent */
        if (lk &&
            json_is_true(json_object_get(
                json_object_get(json_object_get(json_object_get(m, "layer_kinds"), "kinds"), lk),
                "muted")))
          continue;
        json_array_append_new(
            unexplained,
            json_sprintf("weight '%s': the contract expects it, the checkpoint lacks it", name));
        continue;
      }
      seen[found] = 1;
      mi_weight_info wi;
      mi_weights_at(w, (size_t)found, &wi);
      sc.layer = l;
      const json_t *shape = json_object_get(x, "shape");
      int same = (int)json_array_size(shape) == wi.ndim;
      size_t d;
      json_t *dim;
      json_array_foreach(shape, d, dim) {
        int64_t v = -1;
        char e2[200];
        if (!same) break;
        if (json_is_integer(dim))
          v = json_integer_value(dim);
        else if (mi_expr_eval(json_string_value(dim) ?: "?", mi_ckb_layer_lookup, &sc, &v, e2,
                              sizeof e2) != 0)
          v = -1;
        same = v == wi.shape[d];
      }
      if (!same) {
        char *f = json_dumps(shape, JSON_COMPACT);
        json_array_append_new(
            unexplained,
            json_sprintf("weight '%s': its shape is not the contract's %s", name, f ? f : "?"));
        free(f);
      }
    }
  }
  const json_t *kinds = json_object_get(json_object_get(m, "layer_kinds"), "kinds");
  for (size_t k = 0; k < nt; k++) {
    mi_weight_info wi;
    if (seen[k] || mi_weights_at(w, k, &wi) != 0 || mi_ckb_layout_unused(layout, wi.name, NULL)) continue;
    int64_t l = layer_of(m, wi.name);
    const char *lk = l >= 0 ? mi_ckb_layer_kind(m, cfg, l) : NULL;
    int later = deferred && lk &&
                (!kinds || !json_object_get(kinds, lk) ||
                 json_is_true(json_object_get(json_object_get(kinds, lk), "muted")));
    json_array_append_new(later ? deferred : unexplained,
                          json_sprintf("weight '%s'%s%s%s: no contract step reads it", wi.name,
                                       lk ? " (a " : "", lk ? lk : "", lk ? " layer)" : ""));
  }
  free(seen);
  json_decref(miss);
  return (int)json_array_size(unexplained);
}
