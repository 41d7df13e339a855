/* Operator reductions: a step whose operator is a masked or general form
 * that, for the values this checkpoint binds, computes exactly what a
 * plainer operator computes (a sliding window at least as wide as the
 * context masks nothing: operator.attention_window is operator.attention).
 * The operator contract says so ("reduces_to": {"operator", "when"}); the
 * composer then calls the plainer operator (a platform member, rather than
 * a generated kernel) and the reviewer accepts either. The verifier's
 * float64 model keeps the contract's own form: the two are equal where the
 * condition holds, so every stage still holds the engine to the contract. */
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"

/* The lookup of a reduction's "when": a name the step binds as an argument
 * (its value an integer expression over config fields, "int:" prefixed or
 * bare), else a config field of the contract. */
typedef struct reduce_ctx {
  mi_ckb_layer_ctx lc;
  const json_t *args;
  int depth;
} reduce_ctx;

static int reduce_lookup(void *user, const char *name, size_t len, int64_t *out) {
  reduce_ctx *r = user;
  char key[128];
  if (len >= sizeof key) return -1;
  memcpy(key, name, len);
  key[len] = 0;
  const char *v = json_string_value(json_object_get(r->args, key));
  if (v && r->depth == 0) {
    if (!strncmp(v, "int:", 4)) v += 4;
    if (strchr(v, ':')) return -1; /* weight:, config: (a float), dtype:, a buffer: not an integer */
    reduce_ctx inner = *r;
    inner.depth = 1; /* an argument's expression reads config fields only */
    char err[200];
    return mi_expr_eval(v, reduce_lookup, &inner, out, err, sizeof err);
  }
  return mi_ckb_layer_lookup(&r->lc, name, len, out);
}

/* The plainer operator's contract a step reduces to here, or NULL. */
static const mi_ckb_entry *reduction(const mi_ckb *c, const json_t *model, const json_t *cfg, const json_t *step) {
  const char *op = json_string_value(json_object_get(step, "operator"));
  const mi_ckb_entry *oe = op && c ? mi_ckb_find(c, op) : NULL;
  const json_t *rt = oe ? json_object_get(oe->json, "reduces_to") : NULL;
  const char *to = json_string_value(json_object_get(rt, "operator"));
  const char *when = json_string_value(json_object_get(rt, "when"));
  const mi_ckb_entry *te = to && when ? mi_ckb_find(c, to) : NULL;
  if (!te) return NULL;
  /* the plainer operator takes a subset of the step's arguments (the
   * context and stream aside): else the step cannot be called as it */
  const json_t *args = json_object_get(step, "args"), *p;
  size_t q;
  json_array_foreach(json_object_get(json_object_get(te->json, "signature"), "args"), q, p) {
    const char *kind = json_string_value(json_object_get(p, "kind")) ?: "";
    if (strcmp(kind, "ctx") && strcmp(kind, "stream") &&
        !json_object_get(args, json_string_value(json_object_get(p, "name")) ?: ""))
      return NULL;
  }
  reduce_ctx r = {{model, cfg, 0}, args, 0};
  int64_t holds = 0;
  char err[200];
  return mi_expr_eval(when, reduce_lookup, &r, &holds, err, sizeof err) == 0 && holds ? te : NULL;
}

const char *mi_ckb_step_reduction(const mi_ckb *c, const json_t *model, const json_t *cfg, const json_t *step) {
  const mi_ckb_entry *te = reduction(c, model, cfg, step);
  return te ? te->id : NULL;
}

int mi_ckb_model_reduce(const mi_ckb *c, json_t *model, const json_t *cfg) {
  json_t *seqs = mi_ckb_model_sequences(model), *seq, *st;
  size_t i, k;
  int n = 0;
  json_array_foreach(seqs, i, seq) json_array_foreach(seq, k, st) {
    const mi_ckb_entry *te = reduction(c, model, cfg, st);
    if (!te) continue;
    /* the plainer operator's arguments only: what it has no parameter for
     * (the window) is what the condition showed does nothing */
    const json_t *sig = json_object_get(json_object_get(te->json, "signature"), "args");
    json_t *args = json_object_get(st, "args");
    const char *a;
    json_t *v, *tmp;
    json_object_foreach_safe(args, tmp, a, v) {
      int kept = 0;
      size_t q;
      json_t *p;
      json_array_foreach(sig, q, p) kept |= !strcmp(json_string_value(json_object_get(p, "name")) ?: "", a);
      if (!kept) json_object_del(args, a);
    }
    json_object_set_new(st, "reduced_from", json_string(json_string_value(json_object_get(st, "operator"))));
    json_object_set_new(st, "operator", json_string(te->id));
    n++;
  }
  json_decref(seqs);
  return n;
}
