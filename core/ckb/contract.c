/* Reading a model contract (ckb.h): its step sequences in order, and a
 * config.json value at the dotted path a config entry names. The composer,
 * the orchestrator's repair and experience checks, coverage and the config
 * field check all walk these the same way. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/ckb/ckb.h"

json_t *mi_ckb_model_sequences(const json_t *model) {
  static const char *const secs[] = {"prologue", "layer_sequence", "epilogue"};
  json_t *all = json_array();
  for (int s = 0; s < 3; s++) json_array_append(all, json_object_get(model, secs[s]) ?: json_null());
  const char *kn;
  json_t *kv;
  json_object_foreach(json_object_get(json_object_get(model, "layer_kinds"), "kinds"), kn, kv)
      json_array_append(all, json_object_get(kv, "sequence") ?: json_null());
  return all;
}

double mi_ckb_peer_logprob_tol(const mi_ckb *c, const json_t *model, double tol, const char **why_op) {
  json_t *seqs = mi_ckb_model_sequences(model);
  size_t i, k;
  json_t *seq, *st;
  if (why_op) *why_op = NULL;
  json_array_foreach(seqs, i, seq) json_array_foreach(seq, k, st) {
    const mi_ckb_entry *op = mi_ckb_find(c, json_string_value(json_object_get(st, "operator")));
    const json_t *pt = op ? json_object_get(json_object_get(op->json, "peer"), "logprob_tolerance") : NULL;
    if (json_is_number(pt) && json_number_value(pt) > tol) {
      tol = json_number_value(pt);
      if (why_op) *why_op = op->id;
    }
  }
  json_decref(seqs);
  return tol;
}

const json_t *mi_ckb_config_at(const json_t *cfg, const char *path) {
  const json_t *v = cfg;
  for (const char *p = path; v && p && *p;) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    char seg[128];
    snprintf(seg, sizeof seg, "%.*s", (int)(n < 127 ? n : 127), p);
    v = json_is_object(v) ? json_object_get(v, seg) : NULL;
    p = dot ? dot + 1 : NULL;
  }
  return v;
}

static const json_t *present(const json_t *v) { return v && !json_is_null(v) ? v : NULL; }

json_t *mi_ckb_named(const json_t *arr, const char *field, const char *value) {
  size_t i;
  json_t *x;
  if (!value) return NULL;
  json_array_foreach(arr, i, x) {
    const char *v = json_string_value(json_object_get(x, field));
    if (v && !strcmp(v, value)) return x;
  }
  return NULL;
}

/* A field config.json lacks whose contract derives it ("default_expr":
 * "hidden_size / num_attention_heads", an integer expression over other
 * fields, each read through mi_ckb_config_value). Neither the config nor
 * the contract is written to (one config is read under many candidate
 * contracts, and a contract is written back to the CKB): the value is
 * interned in a process-wide table of integers, so the pointer returned
 * stays valid like a borrowed field's. NULL when the expression does not
 * evaluate (a field it reads is missing or not an integer, a cycle): then
 * the plain default. */
typedef struct derive_ctx {
  const json_t *model, *cfg;
} derive_ctx;

static int derive_lookup(void *user, const char *name, size_t len, int64_t *out) {
  derive_ctx *d = user;
  const json_t *v = mi_ckb_config_value(d->model, d->cfg, name, len);
  if (json_is_integer(v)) return *out = json_integer_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

static _Thread_local int g_derive_depth; /* fields deriving each other: a cycle stops at 8 */
static pthread_mutex_t g_interned_mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *g_interned; /* "value" -> integer, never freed (a handful of values) */

static const json_t *interned_integer(int64_t v) {
  char key[32];
  snprintf(key, sizeof key, "%lld", (long long)v);
  pthread_mutex_lock(&g_interned_mu);
  if (!g_interned) g_interned = json_object();
  json_t *x = json_object_get(g_interned, key);
  if (!x && g_interned) {
    json_object_set_new(g_interned, key, json_integer(v));
    x = json_object_get(g_interned, key);
  }
  pthread_mutex_unlock(&g_interned_mu);
  return x;
}

static _Thread_local int g_derive_cycle; /* set when a derivation hit the depth limit */

static const json_t *derived(const json_t *model, const json_t *cfg, const json_t *f, const char *field) {
  const char *ex = json_string_value(json_object_get(f, field));
  if (!ex || !json_is_object(cfg)) return NULL;
  if (g_derive_depth > 8) {
    g_derive_cycle = 1; /* the whole derivation fails, not just this level */
    return NULL;
  }
  derive_ctx d = {model, cfg};
  int64_t v;
  char err[256];
  g_derive_depth++;
  int rc = mi_expr_eval(ex, derive_lookup, &d, &v, err, sizeof err);
  g_derive_depth--;
  int cycle = g_derive_cycle;
  if (!g_derive_depth) g_derive_cycle = 0;
  return rc == 0 && !cycle ? interned_integer(v) : NULL;
}

const json_t *mi_ckb_config_value(const json_t *model, const json_t *cfg, const char *name, size_t len) {
  char key[128];
  snprintf(key, sizeof key, "%.*s", (int)(len < 127 ? len : 127), name);
  const json_t *tc = json_object_get(cfg, "text_config");
  const json_t *f = mi_ckb_named(json_object_get(model, "config"), "name", key);
  if (f) {
    const char *path = json_string_value(json_object_get(f, "path"));
    const json_t *raw = mi_ckb_config_at(cfg, path ? path : key), *v = present(raw);
    if (!v && path) v = present(json_object_get(cfg, key)); /* the flat spelling of a nested field */
    if (!v && json_is_object(tc)) v = present(mi_ckb_config_at(tc, path ? path : key));
    /* a field config.json states as null, where null has its own meaning
     * (no sliding window: the context), else the class's value for an
     * absent one (default_expr, then default) */
    if (!v && json_is_null(raw)) v = derived(model, cfg, f, "null_expr");
    if (!v) v = derived(model, cfg, f, "default_expr");
    return v ? v : json_object_get(f, "default");
  }
  const json_t *v = present(json_object_get(cfg, key));
  return v || !json_is_object(tc) ? v : present(json_object_get(tc, key));
}

const char *mi_ckb_layer_kind_named(const json_t *layer_kinds, const json_t *e) {
  if (json_is_string(e)) return json_string_value(e);
  if (!json_is_integer(e) && !json_is_boolean(e)) return NULL;
  char key[32]; /* a number per layer: its kind by "values" */
  snprintf(key, sizeof key, "%lld", json_is_integer(e) ? (long long)json_integer_value(e) : (long long)json_is_true(e));
  return json_string_value(json_object_get(json_object_get(layer_kinds, "values"), key));
}

const char *mi_ckb_layer_kind(const json_t *model, const json_t *cfg, int64_t l) {
  const json_t *lk = json_object_get(model, "layer_kinds");
  const json_t *kinds = json_object_get(lk, "kinds");
  if (!json_is_object(kinds) || l < 0) return NULL;
  const char *an = json_string_value(json_object_get(lk, "config"));
  const json_t *arr = an ? mi_ckb_config_value(model, cfg, an, strlen(an)) : NULL;
  if (json_is_array(arr)) {
    const char *k = mi_ckb_layer_kind_named(lk, json_array_get(arr, (size_t)l));
    return k && json_object_get(kinds, k) ? k : NULL;
  }
  const char *ivn = json_string_value(json_object_get(lk, "interval"));
  const json_t *iv = ivn ? mi_ckb_config_value(model, cfg, ivn, strlen(ivn)) : NULL;
  if (!json_is_integer(iv) || json_integer_value(iv) < 1 || json_object_size(kinds) != 2) return NULL;
  void *it = json_object_iter((json_t *)kinds);
  if ((l + 1) % json_integer_value(iv) != 0) it = json_object_iter_next((json_t *)kinds, it);
  return it ? json_object_iter_key(it) : NULL;
}
