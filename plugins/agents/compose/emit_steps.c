/* A contract step sequence as platform calls: one K(P->member(...)) line per
 * step, each argument bound as the step says (a weight, a buffer, cache or
 * state at a row or element offset, a dtype, a config value, 1/sqrt of an
 * expression, an integer expression), then the TP reduction a step asks
 * for, and under a half-precision KV cache the store of staged rows before
 * the cache is read. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/bind.h"
#include "core/ckb/ckb.h"
#include "plugins/agents/compose/compose.h"

/* the step being written: for messages */
typedef struct step_ctx {
  gen *g;
  json_t *args;
  const char *name, *opid, *an; /* step, operator, argument */
  const char *ctx;              /* the kernel's first argument: "pc", or a pack's context */
} step_ctx;

void pack_field(const char *op_id, char *out, size_t n) {
  const char *dot = op_id ? strchr(op_id, '.') : NULL;
  snprintf(out, n, "pk_%s", dot ? dot + 1 : op_id ? op_id : "");
}

/* "weight:KEY": the bound weight's device address (its "when" followed) */
static int arg_weight(step_ctx *c, json_t *a, const char *key0, sb *call) {
  gen *g = c->g;
  const char *key = bound_key(g, key0);
  if (!key) return -1;
  char f[128];
  weight_field(key, f, sizeof f);
  int per_layer = json_is_true(json_object_get(weight_entry(g, key), "per_layer"));
  const char *dt = json_string_value(json_object_get(a, "dtype"));
  json_object_set_new(g->weights_seen, key,
                      json_pack("{s:s}", "kind", dt && dt[0] != '$' ? "vector" : "matrix"));
  sp(call, "%s->%s.ptr", per_layer ? "L" : "m", f);
  return 0;
}

/* the buffer, this layer's cache (*cache 1) or fixed state (*cache 2),
 * named by v's first bn bytes */
static json_t *find_buffer(gen *g, const char *v, size_t bn, int *cache) {
  json_t *buf = find_named(json_object_get(g->model, "buffers"), v, bn);
  *cache = 0;
  if (!buf && g->cur_kind && (buf = find_named(json_object_get(g->cur_kind, "cache"), v, bn)))
    *cache = 1; /* this layer's part of the sequence's slab */
  else if (!buf && g->cur_kind && (buf = find_named(json_object_get(g->cur_kind, "state"), v, bn)))
    *cache = 2; /* its fixed state: f32 whatever the KV type */
  if (!buf && !g->kinds && (buf = find_named(json_object_get(g->model, "cache"), v, bn)))
    *cache = 1;
  return buf;
}

/* NAME, NAME@ROW (pos0 or r0 rows on), NAME+ELEMS (elements on) or NAME@ROW+ELEMS */
static int arg_buffer(step_ctx *c, json_t *a, const char *kind, const mi_ckb_arg *p, sb *call) {
  gen *g = c->g;
  const char *v = p->text;
  const char *row = p->row == MI_RT_POS0 ? "pos0" : p->row == MI_RT_R0 ? "r0" : NULL;
  int cache, bn = (int)p->name_len;
  json_t *buf = find_buffer(g, v, p->name_len, &cache);
  if (!buf) {
    snprintf(g->err, sizeof g->err, "step %s: argument %s: \"%s\" is no buffer, cache or weight",
             c->name, c->an, v);
    return -1;
  }
  const char *adt = json_string_value(json_object_get(a, "dtype"));
  if (cache == 1 && g->half_kv && adt && adt[0] != '$') {
    /* an argument of a fixed type (f32) bound to a half-precision cache:
     * the step works on the chunk's new rows in their f32 staging buffer */
    if (p->row != MI_RT_POS0 || p->elems) {
      snprintf(g->err, sizeof g->err,
               "step %s: argument %s: \"%s\" is %s data in a %s KV cache; only the chunk's new "
               "rows (@pos0) can be staged in f32",
               c->name, c->an, v, adt, g->kv);
      return -1;
    }
    sp(call, "m->%.*s_new", bn, v);
    if (strcmp(kind, "in"))
      json_object_set_new(g->pending, json_string_value(json_object_get(buf, "name")), json_true());
    return 0;
  }
  sp(call, cache ? "%.*s" : "m->%.*s", bn, v);
  sb rw = {0}, ex = {0};
  int rc = (row && row_width(g, buf, &rw)) || (p->elems && expr_c(g, p->elems, &ex, NULL)) ? -1 : 0;
  if (!rc && row) sp(call, " + (size_t)(%s) * %s", row, rw.s);
  if (!rc && p->elems) sp(call, " + (size_t)(%s)", ex.s);
  free(rw.s);
  free(ex.s);
  return rc;
}

/* a dtype: the constant named, or "dtype:ARG" (the type of the data ARG binds) */
static void arg_dtype(step_ctx *c, const mi_ckb_arg *p, sb *call) {
  if (p->form == MI_ARG_DTYPE) {
    sp(call, "%s", dtype_const(p->name));
    return;
  }
  const char *src = json_string_value(json_object_get(c->args, p->name));
  const char *key = src && !strncmp(src, "weight:", 7) ? bound_key(c->g, src + 7) : NULL;
  if (key && c->g->blocks) { /* block types: the matrix's own (a q4_k_m file mixes them) */
    char f[128];
    weight_field(key, f, sizeof f);
    int per_layer = json_is_true(json_object_get(weight_entry(c->g, key), "per_layer"));
    sp(call, "%s->%s.dtype", per_layer ? "L" : "m", f);
    return;
  }
  sp(call, "%s", src && !strncmp(src, "weight:", 7) ? "WEIGHT_DTYPE" : "KV_DTYPE");
}

/* a float: "config:FIELD" (its macro), "rsqrt:EXPR" / "sqrt:EXPR" (evaluated) or a number */
static int arg_real(step_ctx *c, const mi_ckb_arg *p, sb *call) {
  gen *g = c->g;
  char fb[48];
  if (p->form == MI_ARG_CONFIG) {
    if (!json_is_number(mi_ckb_config_value(g->model, g->config, p->name, p->name_len))) {
      snprintf(g->err, sizeof g->err,
               "step %s: %s = %s: no such number field in config.json or the contract", c->name,
               c->an, p->text);
      return -1;
    }
    char u[96];
    upper(u, p->name, sizeof u);
    sp(call, "%s", u);
  } else if (p->form == MI_ARG_RSQRT || p->form == MI_ARG_SQRT) {
    sb ex = {0};
    int64_t x = 0;
    if (expr_c(g, p->expr, &ex, &x)) return -1;
    if (x <= 0) {
      snprintf(g->err, sizeof g->err, "step %s: %s = %s is %lld on this config, not positive",
               c->name, c->an, p->text, (long long)x);
      free(ex.s);
      return -1;
    }
    int recip = p->form == MI_ARG_RSQRT;
    sp(call, "%s /* %ssqrt(%s) */", flit(recip ? 1.0 / sqrt((double)x) : sqrt((double)x), fb, sizeof fb),
       recip ? "1/" : "", ex.s);
    free(ex.s);
  } else
    sp(call, "%s", flit(p->number, fb, sizeof fb));
  return 0;
}

/* an integer: "int:EXPR" over real fields (evaluated now: the config check
 * guards it) or an integer expression as C */
static int arg_int(step_ctx *c, const mi_ckb_arg *p, sb *call) {
  gen *g = c->g;
  if (p->form == MI_ARG_INT_REAL) {
    int64_t x = 0;
    if (int_binding(g, p->expr, &x)) {
      char e2[sizeof g->err];
      snprintf(e2, sizeof e2, "%s", g->err);
      snprintf(g->err, sizeof g->err, "step %s: %s = %s: %.700s", c->name, c->an, p->text, e2);
      return -1;
    }
    sp(call, "%lld /* %s */", (long long)x, p->expr);
    return 0;
  }
  return expr_c(g, p->expr, call, NULL);
}

/* one argument of the operator's signature, as the step binds it: the
 * contract's grammar (core/ckb/bind.h, which the verifier reads too) as C */
static int emit_arg(step_ctx *c, json_t *a, sb *call) {
  gen *g = c->g;
  const char *kind = json_string_value(json_object_get(a, "kind"));
  c->an = json_string_value(json_object_get(a, "name"));
  if (kind && !strcmp(kind, "ctx")) return sp(call, "%s", c->ctx), 0;
  if (kind && !strcmp(kind, "stream")) return sp(call, "NULL"), 0;
  mi_ckb_arg p;
  char e[300];
  if (mi_ckb_arg_parse(kind, json_object_get(c->args, c->an ? c->an : ""), &p, e, sizeof e)) {
    snprintf(g->err, sizeof g->err, "step %s: argument %s of %s: %s", c->name, c->an, c->opid, e);
    return -1;
  }
  switch (p.form) {
  case MI_ARG_WEIGHT: return arg_weight(c, a, p.name, call);
  case MI_ARG_BUFFER: return arg_buffer(c, a, kind, &p, call);
  case MI_ARG_DTYPE:
  case MI_ARG_DTYPE_OF: return arg_dtype(c, &p, call), 0;
  case MI_ARG_CONFIG:
  case MI_ARG_RSQRT:
  case MI_ARG_SQRT:
  case MI_ARG_NUMBER: return arg_real(c, &p, call);
  case MI_ARG_INT:
  case MI_ARG_INT_REAL: return arg_int(c, &p, call);
  case MI_ARG_NONE: break;
  }
  return 0;
}

/* ---- one step: a platform kernel call ---- */
int emit_step(gen *g, json_t *step, sb *out, const char *indent) {
  step_ctx c = {g, json_object_get(step, "args"), json_string_value(json_object_get(step, "step")),
                json_string_value(json_object_get(step, "operator")), NULL, "pc"};
  json_t *op = json_object_get(g->ops, c.opid);
  if (!op) {
    snprintf(g->err, sizeof g->err, "step %s: operator %s has no contract", c.name, c.opid);
    return -1;
  }
  if (!c.args) {
    snprintf(g->err, sizeof g->err,
             "step %s: the model contract binds no arguments (\"args\") for %s: nothing to "
             "generate from",
             c.name, c.opid);
    return -1;
  }
  sb call = {0};
  const char *member = json_string_value(json_object_get(op, "member"));
  char pk[160], pkctx[180];
  if (member && !strcmp(member, "pack")) {
    /* an operator no platform member computes: the kernel pack's function,
     * looked up at load (part_pack_lookup), its context first */
    pack_field(c.opid, pk, sizeof pk);
    snprintf(pkctx, sizeof pkctx, "m->%s_ctx", pk);
    c.ctx = pkctx;
    if (!g->packs) g->packs = json_object();
    json_object_set(g->packs, c.opid, op);
    sp(&call, "K(m->%s(", pk);
  } else {
    sp(&call, "K(P->%s(", member);
  }
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(json_object_get(op, "signature"), "args"), i, a) {
    if (i) sp(&call, ", ");
    if (emit_arg(&c, a, &call)) {
      free(call.s);
      return -1;
    }
  }
  const char *what = json_string_value(json_object_get(step, "what"));
  sp(out, "%s%s)); /* %s%s%s */\n", indent, call.s, c.name, what ? ": " : "", what ? what : "");
  free(call.s);
  return 0;
}

/* Half-precision KV: the staged new rows of every cache written since the
 * last store, converted into the cache at pos0 (one operator.convert step
 * each, bound like any contract step). */
static int store_staged(gen *g, sb *out, const char *indent) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(g->cur_kind ? g->cur_kind : g->model, "cache"), i, e) {
    const char *cn = json_string_value(json_object_get(e, "name"));
    if (!json_is_true(json_object_get(g->pending, cn))) continue;
    char dst[160], src[160], sname[160], what[200];
    snprintf(dst, sizeof dst, "%s@pos0", cn);
    snprintf(src, sizeof src, "%s_new", cn);
    snprintf(sname, sizeof sname, "%s_store", cn);
    snprintf(what, sizeof what, "the chunk's new rows of %s, f32 -> %s (round to nearest even)", cn,
             g->kv);
    sb n = {0};
    sp(&n, "T");
    json_t *shape = json_object_get(e, "shape");
    for (size_t k = 1; k < json_array_size(shape); k++)
      sp(&n, " * %s", json_string_value(json_array_get(shape, k)));
    json_t *step = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s}}", "step", sname,
                             "operator", "operator.convert", "what", what, "args", "dst", dst,
                             "dst_dtype", "dtype:dst", "src", src, "src_dtype", "f32", "n", n.s);
    free(n.s);
    int rc = emit_step(g, step, out, indent);
    json_decref(step);
    if (rc) return -1;
    json_object_del(g->pending, cn);
  }
  return 0;
}

/* Does the step read a cache through an argument of the cache's own type? */
static int reads_cache(gen *g, json_t *step) {
  json_t *op = json_object_get(g->ops, json_string_value(json_object_get(step, "operator")));
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(json_object_get(op, "signature"), "args"), i, a) {
    const char *dt = json_string_value(json_object_get(a, "dtype"));
    const char *v = json_string_value(json_object_get(
        json_object_get(step, "args"), json_string_value(json_object_get(a, "name"))));
    if (!dt || dt[0] != '$' || !v) continue;
    size_t bn = strcspn(v, "@");
    if (find_named(json_object_get(g->cur_kind ? g->cur_kind : g->model, "cache"), v, bn)) return 1;
  }
  return 0;
}

/* a step's "reduce" under TP: the ranks' partial results summed in place */
static int emit_reduce(gen *g, json_t *st, sb *out, const char *indent) {
  json_t *red = json_object_get(st, "reduce");
  if (!red || g->tp <= 1) return 0;
  const char *b = json_string_value(json_object_get(red, "buffer"));
  const char *sn = json_string_value(json_object_get(st, "step"));
  sb ex = {0};
  if (!b || !find_named(json_object_get(g->model, "buffers"), b, strlen(b)) ||
      expr_c(g, json_string_value(json_object_get(red, "n")) ?: "", &ex, NULL)) {
    snprintf(g->err, sizeof g->err, "step %s: a reduce needs a buffer and an element count", sn);
    free(ex.s);
    return -1;
  }
  sp(out,
     "%sK(P->allreduce_sum_f32(pc, NULL, m->%s, %s)); /* %s: sum the ranks' partial results */\n",
     indent, b, ex.s, sn);
  free(ex.s);
  return 0;
}

int emit_steps(gen *g, json_t *steps, sb *out, const char *indent) {
  size_t i;
  json_t *st;
  json_array_foreach(steps, i, st) {
    if (json_is_true(json_object_get(st, "optional"))) continue;
    if (g->half_kv && json_object_size(g->pending) && reads_cache(g, st) &&
        store_staged(g, out, indent))
      return -1;
    const char *pairing = json_string_value(json_object_get(st, "pairing"));
    const char *oppair = json_string_value(json_object_get(
        json_object_get(g->ops, json_string_value(json_object_get(st, "operator"))), "pairing"));
    if (pairing && strcmp(pairing, oppair ? oppair : "neox")) {
      snprintf(g->err, sizeof g->err, "step %s wants %s rotary pairing; the operator provides %s",
               json_string_value(json_object_get(st, "step")), pairing, oppair ? oppair : "neox");
      return -1;
    }
    if (emit_step(g, st, out, indent) || emit_reduce(g, st, out, indent)) return -1;
  }
  if (g->half_kv && json_object_size(g->pending))
    return store_staged(g, out, indent); /* written, never read here */
  return 0;
}
