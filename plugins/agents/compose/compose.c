/* implementer.compose: writes a single-path engine's C source from contracts
 * alone -- the model contract's weight map, buffers, cache and operator
 * sequence (prologue, layer, epilogue, each step binding every argument of
 * its operator), the operator contracts' C signatures and platform members,
 * the platform contract, the constraints and the model's config.json.
 * Nothing about a model family is written here: change the contract and
 * the engine changes with it. A contract whose layers are of several kinds
 * (layer_kinds: a hybrid's linear- and full-attention layers) gives a
 * per-layer kind table, one switch case per kind in the layer loop, and per
 * sequence one slab holding each layer's caches (growing with the context)
 * and fixed state (carried across forwards, zeroed by seq_truncate(0)).
 * A half-precision KV cache (kv_type f16/bf16) is derived from the same
 * contract: steps that write a cache row in f32 write a staging buffer
 * instead, stored by one operator.convert per cache entry before the cache
 * is read (store_staged); not yet for layer-kind contracts (refused).
 *
 * Task: {"constraints": {"platform","dtype","tp","kv_type"}, "model_dir",
 *        "patches": [{"operator","arg","value","why"}], "engine_name"?}
 * Before writing it consults ckb/experience: an entry whose "applies_to"
 * names this model contract at this content hash has its "patch" applied;
 * every experience related to a contract in use is listed in the result
 * and in the source's header.
 * Result: {"status":"ok", "source": SHA (artifact .c), "engine_name",
 *          "contracts": [{id, version, sha256}], "experience": [...],
 *          "patches": [...applied], "lines": N} */
#define _GNU_SOURCE
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/gen/gen.h"
#include "mi/agent.h"
#include "mi/model.h"
#include "mi/plugin.h"

/* ---- a growing string ---- */
typedef struct sb {
  char *s;
  size_t n, cap;
} sb;
__attribute__((format(printf, 2, 3))) static void sp(sb *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (b->s && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->s = realloc(b->s, b->cap);
  }
}

/* a C float literal: always with a '.' or an exponent */
static const char *flit(double d, char *buf, size_t n) {
  snprintf(buf, n, "%.9g", d);
  if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", n - strlen(buf) - 1);
  strncat(buf, "f", n - strlen(buf) - 1);
  return buf;
}

typedef struct gen {
  json_t *model, *platform, *config; /* contract (patched copy), platform contract, config.json */
  json_t *ops;                       /* operator id -> contract */
  const char *dtype;                 /* weight dtype constraint, e.g. "bf16" */
  int tied_fallback_used;
  int tp;      /* tensor-parallel degree (constraint) */
  int nosplit; /* 1 while writing full (unsharded) weight shapes */
  const char *kv;   /* KV cache element type (constraint kv_type): f32, f16 or bf16 */
  int half_kv;      /* kv is f16/bf16: steps write new k/v rows in f32 to a staging
                       buffer, then operator.convert stores them (store_staged) */
  json_t *pending;  /* cache name -> true: staged rows not yet converted into the cache */
  char err[1024];
  json_t *weights_seen; /* key -> {"kind": "matrix"|"vector", "field"} */
  /* layers of several kinds (the contract's layer_kinds): */
  json_t *kinds;         /* layer_kinds.kinds (kind name -> {sequence, cache, state}), or NULL */
  json_t *cur_kind;      /* the kind whose sequence is being written: its cache and state names */
  unsigned char *kind_of; /* [layers] index of each layer's kind, in the order of `kinds` */
  int64_t n_layers;
  int has_paths;          /* a config field lives under a dotted path of config.json */
} gen;

static void upper(char *dst, const char *src, size_t n) {
  size_t i = 0;
  for (; src[i] && i + 1 < n; i++) dst[i] = (char)toupper((unsigned char)src[i]);
  dst[i] = 0;
}

static const char *dtype_const(const char *d) {
  if (!strcmp(d, "f32")) return "MI_DTYPE_F32";
  if (!strcmp(d, "f16")) return "MI_DTYPE_F16";
  if (!strcmp(d, "bf16")) return "MI_DTYPE_BF16";
  return NULL;
}

/* the contract's config entry for a field */
static json_t *cfg_entry(gen *g, const char *name, size_t len) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(g->model, "config"), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (n && strlen(n) == len && !strncmp(n, name, len)) return e;
  }
  return NULL;
}

/* where config.json holds a field: its dotted "path" (rope_parameters.rope_theta), else its name */
static const char *cfg_where(json_t *entry) {
  const char *path = json_string_value(json_object_get(entry, "path"));
  return path ? path : json_string_value(json_object_get(entry, "name"));
}

/* the value of a config field: config.json's, else the contract's default */
static json_t *cfg_value(gen *g, json_t *entry) {
  json_t *v = (json_t *)mi_ckb_config_at(g->config, cfg_where(entry));
  if (!v || json_is_null(v)) v = json_object_get(entry, "default");
  return v;
}

/* A number expression over config fields (numbers, booleans as 0/1), with
 * + - * / and parentheses, evaluated here: the "int:" binding of an integer
 * argument whose value comes from a real field (partial_rotary_factor ·
 * head_dim). */
static int fx_sum(gen *g, const char **p, double *out);
static int fx_atom(gen *g, const char **p, double *out) {
  while (**p == ' ') (*p)++;
  if (**p == '(') {
    (*p)++;
    if (fx_sum(g, p, out)) return -1;
    while (**p == ' ') (*p)++;
    if (**p != ')') return -1;
    (*p)++;
    return 0;
  }
  if (**p == '-') {
    (*p)++;
    if (fx_atom(g, p, out)) return -1;
    *out = -*out;
    return 0;
  }
  if (isalpha((unsigned char)**p) || **p == '_') {
    const char *s = *p;
    while (isalnum((unsigned char)**p) || **p == '_') (*p)++;
    json_t *e = cfg_entry(g, s, (size_t)(*p - s));
    json_t *v = e ? cfg_value(g, e) : NULL;
    if (!json_is_number(v) && !json_is_boolean(v)) {
      snprintf(g->err, sizeof g->err, "\"%.*s\" is not a number config field of %s", (int)(*p - s), s,
               json_string_value(json_object_get(g->model, "id")));
      return -1;
    }
    *out = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
    return 0;
  }
  char *end;
  *out = strtod(*p, &end);
  if (end == *p) return -1;
  *p = end;
  return 0;
}
static int fx_prod(gen *g, const char **p, double *out) {
  if (fx_atom(g, p, out)) return -1;
  for (;;) {
    while (**p == ' ') (*p)++;
    char op = **p;
    if (op != '*' && op != '/') return 0;
    (*p)++;
    double r;
    if (fx_atom(g, p, &r)) return -1;
    *out = op == '*' ? *out * r : *out / r;
  }
}
static int fx_sum(gen *g, const char **p, double *out) {
  if (fx_prod(g, p, out)) return -1;
  for (;;) {
    while (**p == ' ') (*p)++;
    char op = **p;
    if (op != '+' && op != '-') return 0;
    (*p)++;
    double r;
    if (fx_prod(g, p, &r)) return -1;
    *out = op == '+' ? *out + r : *out - r;
  }
}
/* "int:EXPR" as an integer, or -1 with g->err set */
static int int_binding(gen *g, const char *ex, int64_t *val) {
  const char *p = ex;
  double d = 0;
  g->err[0] = 0;
  if (fx_sum(g, &p, &d) || *p) {
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "expression \"int:%s\" does not parse", ex);
    return -1;
  }
  if (!(fabs(d - nearbyint(d)) < 1e-9)) {
    snprintf(g->err, sizeof g->err, "expression \"int:%s\" is %.17g, not an integer, for this config", ex, d);
    return -1;
  }
  *val = (int64_t)nearbyint(d);
  return 0;
}

static int is_runtime_name(const char *s, size_t n) {
  static const char *const rt[] = {"T", "pos0", "R", "r0", "n_ctx", NULL};
  for (int i = 0; rt[i]; i++)
    if (strlen(rt[i]) == n && !strncmp(rt[i], s, n)) return 1;
  return 0;
}

/* An integer expression as C: config fields become their macros, runtime
 * names stay. Also evaluates it when `val` is given (runtime names: fails). */
static int expr_c(gen *g, const char *ex, sb *out, int64_t *val) {
  const char *p = ex;
  sb tmp = {0};
  while (*p) {
    if (isalpha((unsigned char)*p) || *p == '_') {
      const char *s = p;
      while (isalnum((unsigned char)*p) || *p == '_') p++;
      size_t n = (size_t)(p - s);
      if (is_runtime_name(s, n)) {
        sp(out, "%.*s", (int)n, s);
        val = NULL;
        continue;
      }
      json_t *e = cfg_entry(g, s, n);
      json_t *v = e ? cfg_value(g, e) : NULL;
      if (!e || !json_is_integer(v)) {
        snprintf(g->err, sizeof g->err, "expression \"%s\": \"%.*s\" is not an integer config field of %s", ex,
                 (int)n, s, json_string_value(json_object_get(g->model, "id")));
        free(tmp.s);
        return -1;
      }
      char m[96];
      snprintf(m, sizeof m, "%.*s", (int)n, s);
      char u[96];
      upper(u, m, sizeof u);
      int split = 0;
      size_t k;
      json_t *f;
      json_array_foreach(json_object_get(json_object_get(g->model, "tensor_parallel"), "split"), k, f) split |= !strcmp(json_string_value(f), m);
      if (split && g->tp > 1 && !g->nosplit) { /* this rank's share */
        sp(out, "(%s / TP)", u);
        sp(&tmp, "(%lld / %d)", (long long)json_integer_value(v), g->tp);
      } else {
        sp(out, "%s", u);
        sp(&tmp, "%lld", (long long)json_integer_value(v));
      }
    } else {
      sp(out, "%c", *p);
      sp(&tmp, "%c", *p);
      p++;
    }
  }
  if (val) {
    char e2[256];
    if (mi_expr_eval(tmp.s ? tmp.s : "0", NULL, NULL, val, e2, sizeof e2) != 0) {
      snprintf(g->err, sizeof g->err, "expression \"%s\": %s", ex, e2);
      free(tmp.s);
      return -1;
    }
  }
  free(tmp.s);
  return 0;
}

static json_t *find_named(json_t *arr, const char *name, size_t n) {
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    const char *s = json_string_value(json_object_get(e, "name"));
    if (s && strlen(s) == n && !strncmp(s, name, n)) return e;
  }
  return NULL;
}

/* row width of a buffer: the product of its shape after the first dim, as C */
static int row_width(gen *g, json_t *buf, sb *out) {
  json_t *shape = json_object_get(buf, "shape");
  if (json_array_size(shape) < 2) {
    sp(out, "1");
    return 0;
  }
  for (size_t i = 1; i < json_array_size(shape); i++) {
    if (i > 1) sp(out, " * ");
    sb e = {0};
    const char *d = json_string_value(json_array_get(shape, i));
    if (expr_c(g, d, &e, NULL)) return -1;
    sp(out, strpbrk(d, "+-") ? "(%s)" : "%s", e.s); /* a sum inside a product */
    free(e.s);
  }
  return 0;
}

static void shape_comment(gen *g, json_t *buf, sb *out, int T_is_batch) {
  json_t *shape = json_object_get(buf, "shape");
  sp(out, "[");
  for (size_t i = 0; i < json_array_size(shape); i++) {
    const char *d = json_string_value(json_array_get(shape, i));
    sb e = {0};
    if (!d) { /* a literal dimension ([C, 1, K]) */
      sp(out, "%s%lld", i ? ", " : "", (long long)json_integer_value(json_array_get(shape, i)));
      continue;
    }
    if (!strcmp(d, "T") && T_is_batch) sp(&e, "BATCH");
    else if (!strcmp(d, "R")) sp(&e, "LOGIT_ROWS");
    else expr_c(g, d, &e, NULL);
    sp(out, "%s%s", i ? ", " : "", e.s ? e.s : d);
    free(e.s);
  }
  sp(out, "]");
}

/* "model.layers.{i}.self_attn.q_proj.weight" -> "self_attn_q_proj" */
static void weight_field(const char *key, char *out, size_t n) {
  const char *k = key;
  if (!strncmp(k, "model.layers.{i}.", 17)) k += 17;
  else if (!strncmp(k, "model.", 6)) k += 6;
  size_t len = strlen(k);
  if (len > 7 && !strcmp(k + len - 7, ".weight")) len -= 7;
  size_t j = 0;
  for (size_t i = 0; i < len && j + 1 < n; i++) out[j++] = k[i] == '.' ? '_' : k[i];
  out[j] = 0;
}

static json_t *weight_entry(gen *g, const char *key) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(g->model, "weights"), i, e) if (!strcmp(json_string_value(json_object_get(e, "key")), key)) return e;
  return NULL;
}

/* Follows a weight's "when"/"fallback": the key actually bound. */
static const char *bound_key(gen *g, const char *key) {
  json_t *w = weight_entry(g, key);
  const char *when = json_string_value(json_object_get(w, "when"));
  if (!when) return key;
  int neg = when[0] == '!';
  json_t *e = cfg_entry(g, when + neg, strlen(when + neg));
  int on = e && json_is_true(cfg_value(g, e));
  if (neg) on = !on;
  if (on) return key;
  const char *fb = json_string_value(json_object_get(w, "fallback"));
  return fb ? fb : NULL;
}

/* ---- the platform members the engine calls (ABI 1.2 platform_needs) ---- */

/* Every "P->MEMBER(" in the source written so far that names a platform
 * member: the engine bakes its TP degree and KV type in, so each is needed
 * always. The core then refuses a platform lacking one before loading. */
static void emit_platform_needs(sb *o) {
  static const char *const members[] = {
#define MI_NEED_NAME(name, minor, kernel) #name,
      MI_PLATFORM_MEMBERS(MI_NEED_NAME)
#undef MI_NEED_NAME
  };
  sp(o, "/* the platform members this engine calls: the core checks them before loading */\n"
        "static const mi_platform_need k_needs[] = {\n");
  for (size_t i = 0; i < sizeof members / sizeof *members; i++) {
    char pat[96];
    snprintf(pat, sizeof pat, "P->%s(", members[i]);
    if (o->s && strstr(o->s, pat)) sp(o, "    {\"%s\", MI_NEED_ALWAYS, NULL, NULL},\n", members[i]);
  }
  sp(o, "    {NULL, 0, NULL, NULL},\n};\n\n");
}

/* ---- one step: a platform kernel call ---- */
static int emit_step(gen *g, json_t *step, sb *out, const char *indent) {
  const char *opid = json_string_value(json_object_get(step, "operator"));
  json_t *op = json_object_get(g->ops, opid);
  json_t *args = json_object_get(step, "args");
  const char *name = json_string_value(json_object_get(step, "step"));
  if (!op) {
    snprintf(g->err, sizeof g->err, "step %s: operator %s has no contract", name, opid);
    return -1;
  }
  if (!args) {
    snprintf(g->err, sizeof g->err,
             "step %s: the model contract binds no arguments (\"args\") for %s: nothing to generate from", name,
             opid);
    return -1;
  }
  const char *member = json_string_value(json_object_get(op, "member"));
  json_t *sig = json_object_get(json_object_get(op, "signature"), "args");
  sb call = {0};
  sp(&call, "K(P->%s(", member);
  size_t i;
  json_t *a;
  json_array_foreach(sig, i, a) {
    const char *an = json_string_value(json_object_get(a, "name"));
    const char *kind = json_string_value(json_object_get(a, "kind"));
    if (i) sp(&call, ", ");
    if (!strcmp(kind, "ctx")) {
      sp(&call, "pc");
      continue;
    }
    if (!strcmp(kind, "stream")) {
      sp(&call, "NULL");
      continue;
    }
    const char *v = json_string_value(json_object_get(args, an));
    if (!v) {
      snprintf(g->err, sizeof g->err, "step %s: argument %s of %s is not bound in the model contract", name, an,
               opid);
      free(call.s);
      return -1;
    }
    if (!strcmp(kind, "in") || !strcmp(kind, "out") || !strcmp(kind, "inout")) {
      if (!strncmp(v, "weight:", 7)) {
        const char *key = bound_key(g, v + 7);
        if (!key || !weight_entry(g, key)) {
          snprintf(g->err, sizeof g->err, "step %s: weight %s is not in the weight map", name, v + 7);
          free(call.s);
          return -1;
        }
        char f[128];
        weight_field(key, f, sizeof f);
        int per_layer = json_is_true(json_object_get(weight_entry(g, key), "per_layer"));
        const char *dt = json_string_value(json_object_get(a, "dtype"));
        json_object_set_new(g->weights_seen, key,
                            json_pack("{s:s}", "kind", dt && dt[0] != '$' ? "vector" : "matrix"));
        sp(&call, "%s->%s.ptr", per_layer ? "L" : "m", f);
        continue;
      }
      /* NAME, NAME@ROWS (a row offset) or NAME+ELEMS (an element offset) */
      const char *at = strchr(v, '@'), *plus = at ? NULL : strchr(v, '+');
      size_t bn = at ? (size_t)(at - v) : plus ? (size_t)(plus - v) : strlen(v);
      json_t *buf = find_named(json_object_get(g->model, "buffers"), v, bn);
      int cache = 0;
      if (!buf && g->cur_kind &&
          ((buf = find_named(json_object_get(g->cur_kind, "cache"), v, bn)) ||
           (buf = find_named(json_object_get(g->cur_kind, "state"), v, bn))))
        cache = 1; /* this layer's part of the sequence's slab */
      if (!buf && !g->kinds && (buf = find_named(json_object_get(g->model, "cache"), v, bn))) cache = 1;
      if (!buf) {
        snprintf(g->err, sizeof g->err, "step %s: argument %s: \"%s\" is no buffer, cache or weight", name, an, v);
        free(call.s);
        return -1;
      }
      const char *adt = json_string_value(json_object_get(a, "dtype"));
      if (cache && g->half_kv && adt && adt[0] != '$') {
        /* an argument of a fixed type (f32) bound to a half-precision cache:
         * the step works on the chunk's new rows in their f32 staging buffer */
        if (!at || strcmp(at + 1, "pos0")) {
          snprintf(g->err, sizeof g->err,
                   "step %s: argument %s: \"%s\" is %s data in a %s KV cache; only the chunk's new rows (@pos0) can "
                   "be staged in f32", name, an, v, adt, g->kv);
          free(call.s);
          return -1;
        }
        sp(&call, "m->%.*s_new", (int)bn, v);
        if (strcmp(kind, "in")) json_object_set_new(g->pending, json_string_value(json_object_get(buf, "name")), json_true());
        continue;
      }
      sp(&call, cache ? "%.*s" : "m->%.*s", (int)bn, v);
      if (at) {
        sb rw = {0}, ex = {0};
        if (row_width(g, buf, &rw) || expr_c(g, at + 1, &ex, NULL)) {
          free(call.s);
          return -1;
        }
        sp(&call, " + (size_t)(%s) * %s", ex.s, rw.s);
        free(rw.s);
        free(ex.s);
      } else if (plus) {
        sb ex = {0};
        if (expr_c(g, plus + 1, &ex, NULL)) {
          free(call.s);
          return -1;
        }
        sp(&call, " + (size_t)(%s)", ex.s);
        free(ex.s);
      }
      continue;
    }
    if (!strcmp(kind, "dtype")) {
      if (strncmp(v, "dtype:", 6)) {
        sp(&call, "%s", dtype_const(v) ? dtype_const(v) : v);
        continue;
      }
      const char *src = json_string_value(json_object_get(args, v + 6));
      if (src && !strncmp(src, "weight:", 7)) sp(&call, "WEIGHT_DTYPE");
      else sp(&call, "KV_DTYPE");
      continue;
    }
    if (!strcmp(kind, "f32") || !strcmp(kind, "f64")) {
      if (!strncmp(v, "config:", 7)) {
        json_t *e = cfg_entry(g, v + 7, strlen(v + 7));
        json_t *val = e ? cfg_value(g, e) : NULL;
        if (!json_is_number(val)) {
          snprintf(g->err, sizeof g->err, "step %s: %s = %s: no such number field in config.json or the contract", name,
                   an, v);
          free(call.s);
          return -1;
        }
        char u[96];
        upper(u, v + 7, sizeof u);
        sp(&call, "%s", u);
      } else if (!strncmp(v, "rsqrt:", 6)) {
        sb ex = {0};
        int64_t x = 0;
        if (expr_c(g, v + 6, &ex, &x)) {
          free(call.s);
          return -1;
        }
        char fb[48];
        sp(&call, "%s /* 1/sqrt(%s) */", flit(1.0 / sqrt((double)x), fb, sizeof fb), ex.s);
        free(ex.s);
      } else {
        char *end;
        double d = strtod(v, &end);
        if (*end) {
          snprintf(g->err, sizeof g->err, "step %s: %s = \"%s\" is not a number", name, an, v);
          free(call.s);
          return -1;
        }
        char fb[48];
        sp(&call, "%s", flit(d, fb, sizeof fb));
      }
      continue;
    }
    /* integers */
    if (!strncmp(v, "int:", 4)) { /* from real config fields: evaluated now, the config check guards it */
      int64_t x = 0;
      if (int_binding(g, v + 4, &x)) {
        char e2[sizeof g->err];
        snprintf(e2, sizeof e2, "%s", g->err);
        snprintf(g->err, sizeof g->err, "step %s: %s = %s: %.700s", name, an, v, e2);
        free(call.s);
        return -1;
      }
      sp(&call, "%lld /* %s */", (long long)x, v + 4);
      continue;
    }
    sb ex = {0};
    if (expr_c(g, v, &ex, NULL)) {
      free(call.s);
      return -1;
    }
    sp(&call, "%s", ex.s);
    free(ex.s);
  }
  const char *what = json_string_value(json_object_get(step, "what"));
  sp(out, "%s%s)); /* %s%s%s */\n", indent, call.s, name, what ? ": " : "", what ? what : "");
  free(call.s);
  return 0;
}

/* Half-precision KV: the staged new rows of every cache written since the
 * last store, converted into the cache at pos0 (one operator.convert step
 * each, bound like any contract step). */
static int store_staged(gen *g, sb *out, const char *indent) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(g->model, "cache"), i, e) {
    const char *cn = json_string_value(json_object_get(e, "name"));
    if (!json_is_true(json_object_get(g->pending, cn))) continue;
    char dst[160], src[160], sname[160], what[200];
    snprintf(dst, sizeof dst, "%s@pos0", cn);
    snprintf(src, sizeof src, "%s_new", cn);
    snprintf(sname, sizeof sname, "%s_store", cn);
    snprintf(what, sizeof what, "the chunk's new rows of %s, f32 -> %s (round to nearest even)", cn, g->kv);
    sb n = {0};
    sp(&n, "T");
    json_t *shape = json_object_get(e, "shape");
    for (size_t k = 1; k < json_array_size(shape); k++) sp(&n, " * %s", json_string_value(json_array_get(shape, k)));
    json_t *step = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s}}", "step", sname, "operator", "operator.convert",
                             "what", what, "args", "dst", dst, "dst_dtype", "dtype:dst", "src", src, "src_dtype", "f32",
                             "n", n.s);
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
    const char *v = json_string_value(json_object_get(json_object_get(step, "args"), json_string_value(json_object_get(a, "name"))));
    if (!dt || dt[0] != '$' || !v) continue;
    size_t bn = strcspn(v, "@");
    if (find_named(json_object_get(g->model, "cache"), v, bn)) return 1;
  }
  return 0;
}

static int emit_steps(gen *g, json_t *steps, sb *out, const char *indent) {
  size_t i;
  json_t *st;
  json_array_foreach(steps, i, st) {
    if (json_is_true(json_object_get(st, "optional"))) continue;
    if (g->half_kv && json_object_size(g->pending) && reads_cache(g, st) && store_staged(g, out, indent)) return -1;
    const char *pairing = json_string_value(json_object_get(st, "pairing"));
    const char *oppair = json_string_value(json_object_get(json_object_get(g->ops, json_string_value(json_object_get(st, "operator"))), "pairing"));
    if (pairing && strcmp(pairing, oppair ? oppair : "neox")) {
      snprintf(g->err, sizeof g->err, "step %s wants %s rotary pairing; the operator provides %s",
               json_string_value(json_object_get(st, "step")), pairing, oppair ? oppair : "neox");
      return -1;
    }
    if (emit_step(g, st, out, indent)) return -1;
    json_t *red = json_object_get(st, "reduce");
    if (red && g->tp > 1) {
      const char *b = json_string_value(json_object_get(red, "buffer"));
      sb ex = {0};
      if (!b || !find_named(json_object_get(g->model, "buffers"), b, strlen(b)) ||
          expr_c(g, json_string_value(json_object_get(red, "n")) ?: "", &ex, NULL)) {
        snprintf(g->err, sizeof g->err, "step %s: a reduce needs a buffer and an element count", json_string_value(json_object_get(st, "step")));
        free(ex.s);
        return -1;
      }
      sp(out, "%sK(P->allreduce_sum_f32(pc, NULL, m->%s, %s)); /* %s: sum the ranks' partial results */\n", indent, b, ex.s,
         json_string_value(json_object_get(st, "step")));
      free(ex.s);
    }
  }
  if (g->half_kv && json_object_size(g->pending)) return store_staged(g, out, indent); /* written, never read here */
  return 0;
}


/* ---- the whole source ---- */

static int64_t shape_numel(gen *g, json_t *shape) {
  int64_t n = 1;
  for (size_t i = 0; i < json_array_size(shape); i++) {
    json_t *d = json_array_get(shape, i);
    int64_t v = 0;
    sb e = {0};
    if (json_is_integer(d)) v = json_integer_value(d);
    else if (expr_c(g, json_string_value(d), &e, &v)) v = 0;
    free(e.s);
    n *= v;
  }
  return n;
}


/* ---- layers of several kinds (layer_kinds) ---- */

/* Each layer's kind from config.json: the array the contract names
 * (layer_types), else every interval-th layer is the first-listed kind and
 * the others the second. The table is baked into the engine. */
static int plan_kinds(gen *g) {
  json_t *lk = json_object_get(g->model, "layer_kinds");
  const char *mid = json_string_value(json_object_get(g->model, "id"));
  sb t = {0};
  int rc = expr_c(g, json_string_value(json_object_get(g->model, "layers")), &t, &g->n_layers);
  free(t.s);
  if (rc || g->n_layers < 1 || g->n_layers > 100000) {
    if (!rc) snprintf(g->err, sizeof g->err, "%s: the layer count is %lld", mid, (long long)g->n_layers);
    return -1;
  }
  g->kind_of = calloc((size_t)g->n_layers, 1);
  const char *arr_name = json_string_value(json_object_get(lk, "config"));
  json_t *arr = arr_name ? json_object_get(g->config, arr_name) : NULL;
  size_t nk = json_object_size(g->kinds);
  if (!g->kind_of || nk < 1 || nk > 255) {
    snprintf(g->err, sizeof g->err, "%s: layer_kinds lists %zu kinds", mid, nk);
    return -1;
  }
  if (arr) {
    if (!json_is_array(arr) || (int64_t)json_array_size(arr) != g->n_layers) {
      snprintf(g->err, sizeof g->err, "config.json: \"%s\" must be an array of %lld layer kinds", arr_name,
               (long long)g->n_layers);
      return -1;
    }
    for (int64_t l = 0; l < g->n_layers; l++) {
      const char *k = json_string_value(json_array_get(arr, (size_t)l));
      size_t idx = 0;
      const char *kn;
      json_t *kv;
      int found = 0;
      json_object_foreach(g->kinds, kn, kv) {
        if (k && !strcmp(kn, k)) {
          g->kind_of[l] = (unsigned char)idx;
          found = 1;
        }
        idx++;
      }
      if (!found) {
        snprintf(g->err, sizeof g->err, "config.json: %s[%lld] = \"%s\" is not a layer kind of %s", arr_name,
                 (long long)l, k ? k : "(not a string)", mid);
        return -1;
      }
    }
    return 0;
  }
  const char *iv_name = json_string_value(json_object_get(lk, "interval"));
  json_t *ie = iv_name ? cfg_entry(g, iv_name, strlen(iv_name)) : NULL;
  json_t *iv = ie ? cfg_value(g, ie) : NULL;
  if (!json_is_integer(iv) || json_integer_value(iv) < 1 || nk != 2) {
    snprintf(g->err, sizeof g->err, "config.json has no \"%s\" array and %s gives no interval to derive it from",
             arr_name ? arr_name : "layer kinds", mid);
    return -1;
  }
  for (int64_t l = 0; l < g->n_layers; l++) g->kind_of[l] = (l + 1) % json_integer_value(iv) == 0 ? 0 : 1;
  return 0;
}

static int64_t kind_count(gen *g, size_t idx) {
  int64_t n = 0;
  for (int64_t l = 0; l < g->n_layers; l++) n += g->kind_of[l] == idx;
  return n;
}

/* the kind's index (its order in layer_kinds.kinds), or -1 */
static int kind_index(gen *g, const char *name) {
  size_t idx = 0;
  const char *kn;
  json_t *kv;
  json_object_foreach(g->kinds, kn, kv) {
    if (!strcmp(kn, name)) return (int)idx;
    idx++;
  }
  return -1;
}

/* Per kind: KV_ROW_<KIND> floats per position (its caches, which grow with
 * the context) and STATE_<KIND> fixed floats (its state). A layer's part of
 * a sequence's slab is n_ctx · KV_ROW then STATE floats. */
static int kind_macros(gen *g, sb *o) {
  const char *kn;
  json_t *kv;
  size_t idx = 0;
  sp(o, "/* layer kinds (%s.layer_kinds): a layer's part of a sequence's slab is n_ctx * KV_ROW_<KIND>\n"
        " * floats of caches (one row per position), then STATE_<KIND> floats of fixed state */\n",
     json_string_value(json_object_get(g->model, "id")));
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sb row = {0}, st = {0};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(kv, "cache"), i, c) {
      sb rw = {0};
      if (row_width(g, c, &rw)) return -1;
      sp(&row, "%s(%s)", i ? " + " : "", rw.s);
      free(rw.s);
    }
    json_array_foreach(json_object_get(kv, "state"), i, c) {
      json_t *sh = json_object_get(c, "shape");
      sp(&st, "%s(", i ? " + " : "");
      for (size_t k = 0; k < json_array_size(sh); k++) {
        sb e = {0};
        if (expr_c(g, json_string_value(json_array_get(sh, k)), &e, NULL)) return -1;
        sp(&st, "%s(%s)", k ? " * " : "", e.s);
        free(e.s);
      }
      sp(&st, ")");
    }
    sp(o, "#define KIND_%-24s %zu /* %lld layers */\n", U, idx, (long long)kind_count(g, idx));
    sp(o, "#define KV_ROW_%-22s (%s) /* floats per position */\n", U, row.s ? row.s : "0");
    sp(o, "#define STATE_%-23s (%s) /* fixed floats */\n", U, st.s ? st.s : "0");
    free(row.s);
    free(st.s);
    idx++;
  }
  sp(o, "static const unsigned char k_layer_kind[%lld] = {", (long long)g->n_layers);
  for (int64_t l = 0; l < g->n_layers; l++) sp(o, "%s%d", l ? ", " : "", g->kind_of[l]);
  sp(o, "};\nstatic const char *const k_kind_name[] = {");
  idx = 0;
  json_object_foreach(g->kinds, kn, kv) sp(o, "%s\"%s\"", idx++ ? ", " : "", kn);
  sp(o, "};\nstatic const size_t k_kv_row[] = {");
  idx = 0;
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sp(o, "%sKV_ROW_%s", idx++ ? ", " : "", U);
  }
  sp(o, "};\nstatic const size_t k_state[] = {");
  idx = 0;
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sp(o, "%sSTATE_%s", idx++ ? ", " : "", U);
  }
  sp(o, "};\n\n");
  return 0;
}

/* The layer loop's body: one case per kind, its caches and state named, then
 * its sequence. */
static int emit_kinds(gen *g, sb *o) {
  const char *kn;
  json_t *kv;
  sp(o, "    float *slab = s->layer_state[l]; /* this layer's part of the sequence's slab */\n");
  sp(o, "    switch (k_layer_kind[l]) {\n");
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sp(o, "    case KIND_%s: { /* %s */\n", U, kn);
    sb off = {0};
    sp(&off, "0");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(kv, "cache"), i, c) {
      sb rw = {0}, sh = {0};
      if (row_width(g, c, &rw)) return -1;
      shape_comment(g, c, &sh, 0);
      sp(o, "      float *%s = slab + (size_t)s->n_ctx * (%s); /* %s */\n", json_string_value(json_object_get(c, "name")),
         off.s, sh.s);
      sp(&off, " + %s", rw.s);
      free(rw.s);
      free(sh.s);
    }
    sb soff = {0};
    sp(&soff, "(size_t)s->n_ctx * KV_ROW_%s", U);
    json_array_foreach(json_object_get(kv, "state"), i, c) {
      sb sh = {0};
      shape_comment(g, c, &sh, 0);
      sp(o, "      float *%s = slab + %s; /* %s, carried across forwards */\n", json_string_value(json_object_get(c, "name")),
         soff.s, sh.s);
      json_t *shp = json_object_get(c, "shape");
      for (size_t k = 0; k < json_array_size(shp); k++) {
        sb e = {0};
        expr_c(g, json_string_value(json_array_get(shp, k)), &e, NULL);
        sp(&soff, "%s(%s)", k ? " * " : " + ", e.s);
        free(e.s);
      }
      free(sh.s);
    }
    free(off.s);
    free(soff.s);
    g->cur_kind = kv;
    int rc = emit_steps(g, json_object_get(kv, "sequence"), o, "      ");
    g->cur_kind = NULL;
    if (rc) {
      char e2[sizeof g->err];
      snprintf(e2, sizeof e2, "%s", g->err);
      snprintf(g->err, sizeof g->err, "layer kind %s: %.900s", kn, e2);
      return -1;
    }
    sp(o, "      break;\n    }\n");
  }
  sp(o, "    }\n");
  return 0;
}

/* Hq * D of a sequence's attention step (0 when it has none) */
static int64_t attn_width(gen *g, json_t *seq) {
  size_t i;
  json_t *e;
  int64_t hq_d = 0;
  json_array_foreach(seq, i, e) {
    json_t *a = json_object_get(e, "args");
    if (json_object_get(a, "Hq") && json_object_get(a, "D")) {
      int64_t h = 0, d = 0;
      sb t1 = {0}, t2 = {0};
      expr_c(g, json_string_value(json_object_get(a, "Hq")), &t1, &h);
      expr_c(g, json_string_value(json_object_get(a, "D")), &t2, &d);
      free(t1.s);
      free(t2.s);
      hq_d = h * d;
    }
  }
  return hq_d;
}

static int compose_source(gen *g, json_t *contracts, json_t *experience, json_t *patches, const char *engine_name,
                          sb *o) {
  const char *mid = json_string_value(json_object_get(g->model, "id"));
  const char *arch = json_string_value(json_array_get(json_object_get(g->config, "architectures"), 0));
  const char *layers_field = json_string_value(json_object_get(g->model, "layers"));
  char LAYERS[96];
  upper(LAYERS, layers_field, sizeof LAYERS);
  const char *wdt = dtype_const(g->dtype);
  size_t i;
  json_t *e;

  /* the forward pass first (it records which weights are matrices, vectors) */
  sb pro = {0}, lay = {0}, epi = {0};
  if (g->kinds && plan_kinds(g)) return -1;
  if (emit_steps(g, json_object_get(g->model, "prologue"), &pro, "  ") ||
      (g->kinds ? emit_kinds(g, &lay) : emit_steps(g, json_object_get(g->model, "layer_sequence"), &lay, "    ")) ||
      emit_steps(g, json_object_get(g->model, "epilogue"), &epi, "  "))
    return -1;

  sp(o, "/* engine.c -- a single-path %s engine, generated by MetaInfer's implementer.compose\n", arch);
  sp(o, " * from contract knowledge only (no other framework's source):\n");
  json_array_foreach(contracts, i, e)
      sp(o, " *   %-22s %-8s sha256:%.16s\n", json_string_value(json_object_get(e, "id")),
         json_string_value(json_object_get(e, "version")), json_string_value(json_object_get(e, "sha256")));
  sp(o, " * Constraints: platform %s, weights %s, tensor parallel %d, KV cache %s.\n",
     json_string_value(json_object_get(g->platform, "plugin")), g->dtype, g->tp, g->kv);
  sp(o, " * Experience consulted:%s", json_array_size(experience) ? "\n" : " none\n");
  json_array_foreach(experience, i, e)
      sp(o, " *   %s%s\n", json_string_value(json_object_get(e, "id")),
         json_is_true(json_object_get(e, "applied")) ? " (its fix applied)" : " (read; no fix for this contract)");
  sp(o, " * Contract patches applied:%s", json_array_size(patches) ? "\n" : " none\n");
  json_array_foreach(patches, i, e)
      sp(o, " *   %s.%s = %s (%s)\n", json_string_value(json_object_get(e, "operator")),
         json_string_value(json_object_get(e, "arg")), json_string_value(json_object_get(e, "value")),
         json_string_value(json_object_get(e, "why")) ? json_string_value(json_object_get(e, "why")) : "");
  sp(o, " *\n * One config is baked in below; check_config refuses any other in one line.\n");
  sp(o, " * The memory plan is static: one arena sized at load, one KV slab per sequence;\n");
  sp(o, " * forward() allocates nothing. Every kernel is a platform call (mi/platform.h).\n */\n");
  sp(o, "#include <math.h>\n#include <stdio.h>\n#include <string.h>\n\n#include \"mi/engine.h\"\n#include \"mi/plugin.h\"\n\n");

  /* constants */
  sp(o, "/* ---- the config, baked in (%s config fields) ---- */\n", mid);
  sb digest = {0};
  json_array_foreach(json_object_get(g->model, "config"), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    json_t *v = cfg_value(g, e);
    char u[96];
    upper(u, n, sizeof u);
    const char *mean = json_string_value(json_object_get(e, "meaning"));
    const char *dn = cfg_where(e); /* the digest names where config.json holds it */
    g->has_paths |= dn != n;
    if (json_is_integer(v)) {
      sp(o, "#define %-26s %lld /* %s */\n", u, (long long)json_integer_value(v), mean);
      sp(&digest, "%s=%lld;", dn, (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
      char fb[48];
      sp(o, "#define %-26s %s /* %s */\n", u, flit(json_real_value(v), fb, sizeof fb), mean);
      sp(&digest, "%s=%.17g;", dn, json_real_value(v));
    } else if (json_is_boolean(v)) {
      sp(o, "#define %-26s %d /* %s */\n", u, json_is_true(v), mean);
      sp(&digest, "%s=%d;", dn, json_is_true(v));
    } else if (json_is_string(v)) {
      sp(&digest, "%s=%s;", dn, json_string_value(v));
    }
  }
  sp(o, "#define %-26s %d /* tensor-parallel ranks; split fields are shared out over them */\n", "TP", g->tp);
  sp(o, "#define %-26s 512 /* tokens per forward chunk (prefill batch) */\n", "BATCH");
  sp(o, "#define STR_(x) #x\n#define STR(x) STR_(x) /* a constant as text, for messages */\n");
  sp(o, "#define %-26s 8 /* rows per lm_head call when every position's logits are wanted */\n", "LOGIT_ROWS");
  sp(o, "#define %-26s %s /* matrices as stored (constraint) */\n", "WEIGHT_DTYPE", wdt);
  sp(o, "#define %-26s %s /* KV cache elements */\n", "KV_DTYPE", dtype_const(g->kv));
  sp(o, "#define %-26s \"%s\" /* its name, as mi-run --kv-type spells it */\n\n", "KV_TYPE", g->kv);
  sp(o, "static const char k_digest[] = \"%s\";\n\n", digest.s);

  /* figures for info() */
  uint64_t wbytes = 0, dbytes = 0, mm_layer = 0;
  size_t wsz = !strcmp(g->dtype, "f32") ? 4 : 2;
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    const char *key = json_string_value(json_object_get(e, "key"));
    json_t *seen = json_object_get(g->weights_seen, key);
    if (!seen) continue;
    int64_t n = shape_numel(g, json_object_get(e, "shape"));
    int vec = !strcmp(json_string_value(json_object_get(seen, "kind")), "vector");
    int64_t L = 1;
    if (json_is_true(json_object_get(e, "per_layer"))) {
      int64_t lv = 0;
      sb t = {0};
      expr_c(g, layers_field, &t, &lv);
      free(t.s);
      L = lv;
      const char *wk = json_string_value(json_object_get(e, "layer_kind"));
      if (g->kinds && wk) L = kind_index(g, wk) >= 0 ? kind_count(g, (size_t)kind_index(g, wk)) : 0;
      if (!vec) mm_layer += (uint64_t)(json_object_get(e, "shard") ? n / g->tp : n) * (uint64_t)(g->kinds ? L : 1);
    }
    if (json_object_get(e, "shard")) n /= g->tp;
    uint64_t b = (uint64_t)(n * L) * (vec ? 4 : wsz);
    wbytes += b;
    dbytes += b;
  }
  /* an embedding table read by no matmul is gathered one row per token */
  const char *emb_key = NULL;
  json_array_foreach(json_object_get(g->model, "prologue"), i, e) {
    const char *t = json_string_value(json_object_get(json_object_get(e, "args"), "table"));
    if (t && !strncmp(t, "weight:", 7)) emb_key = t + 7;
  }
  int emb_shared = 0;
  json_array_foreach(json_object_get(g->model, "epilogue"), i, e) {
    const char *w = json_string_value(json_object_get(json_object_get(e, "args"), "w"));
    if (w && emb_key && !strncmp(w, "weight:", 7) && bound_key(g, w + 7) && !strcmp(bound_key(g, w + 7), emb_key))
      emb_shared = 1;
  }
  if (emb_key && !emb_shared) {
    json_t *we = weight_entry(g, emb_key);
    json_t *sh = json_object_get(we, "shape");
    int64_t n = shape_numel(g, sh), d0 = 0;
    sb t = {0};
    expr_c(g, json_string_value(json_array_get(sh, 0)), &t, &d0);
    free(t.s);
    int64_t row = d0 ? n / d0 : n;
    dbytes -= (uint64_t)(n - row) * wsz;
  }
  int64_t hq_d = 0, attn_layers = 0; /* attention's width, and (layer kinds) the layers that attend */
  if (!g->kinds) {
    hq_d = attn_width(g, json_object_get(g->model, "layer_sequence"));
  } else {
    const char *kn;
    json_t *kv;
    size_t idx = 0;
    json_object_foreach(g->kinds, kn, kv) {
      int64_t w = attn_width(g, json_object_get(kv, "sequence"));
      if (w) hq_d = w, attn_layers += kind_count(g, idx);
      idx++;
    }
  }
  sp(o, "#define WEIGHT_BYTES %lluull        /* every bound weight, as the engine holds it */\n",
     (unsigned long long)wbytes);
  sp(o, "#define DECODE_WEIGHT_BYTES %lluull /* what one decode step reads */\n", (unsigned long long)dbytes);
  if (g->kinds) {
    sp(o, "#define PREFILL_FLOPS_TOKEN (2ull * %lluull) /* 2 per layer-matmul weight, each layer of its kind */\n",
       (unsigned long long)mm_layer);
    sp(o, "#define ATTN_FLOPS_POS (4ull * %lld * %lld) /* QK^T and PV per earlier position, layers that attend */\n\n",
       (long long)hq_d, (long long)attn_layers);
  } else {
    sp(o, "#define PREFILL_FLOPS_TOKEN (2ull * %lluull * %s) /* 2 per layer-matmul weight, all layers */\n",
       (unsigned long long)mm_layer, LAYERS);
    sp(o, "#define ATTN_FLOPS_POS (4ull * %lld * %s) /* QK^T and PV per earlier position */\n\n", (long long)hq_d,
       LAYERS);
  }

  /* structs */
  sp(o, "typedef struct weight {\n  mi_buffer *buf; /* NULL when borrowed */\n  void *ptr;      /* device address */\n} weight;\n\n");
  sp(o, "typedef struct layer {\n");
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    const char *key = json_string_value(json_object_get(e, "key"));
    json_t *seen = json_object_get(g->weights_seen, key);
    if (!seen || !json_is_true(json_object_get(e, "per_layer"))) continue;
    char f[128];
    weight_field(key, f, sizeof f);
    sb sh = {0};
    shape_comment(g, e, &sh, 0);
    int vec = !strcmp(json_string_value(json_object_get(seen, "kind")), "vector");
    /* shape_comment reads "shape" of a buffer-like object: weights have one too */
    sp(o, "  weight %s; /* %s %s */\n", f, sh.s, vec ? "f32 (widened at load)" : g->dtype);
    free(sh.s);
  }
  sp(o, "} layer;\n\n");
  sp(o, "struct mi_model {\n  const mi_host_api *host;\n  const mi_platform_iface *P;\n  void *pc;\n  const mi_weights *weights;\n");
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    const char *key = json_string_value(json_object_get(e, "key"));
    json_t *seen = json_object_get(g->weights_seen, key);
    if (!seen || json_is_true(json_object_get(e, "per_layer"))) continue;
    char f[128];
    weight_field(key, f, sizeof f);
    sb sh = {0};
    shape_comment(g, e, &sh, 0);
    int vec = !strcmp(json_string_value(json_object_get(seen, "kind")), "vector");
    sp(o, "  weight %s; /* %s %s */\n", f, sh.s, vec ? "f32 (widened at load)" : g->dtype);
    free(sh.s);
  }
  sp(o, "  layer layers[%s];\n", LAYERS);
  sp(o, "  mi_buffer *arena; /* the static memory plan: every activation below, one allocation */\n");
  json_array_foreach(json_object_get(g->model, "buffers"), i, e) {
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    sb sh = {0};
    shape_comment(g, e, &sh, 1);
    const char *doc = json_string_value(json_object_get(e, "doc"));
    sp(o, "  %s *%s; /* %s %s */\n", dt && !strcmp(dt, "i32") ? "int32_t" : "float",
       json_string_value(json_object_get(e, "name")), sh.s, doc ? doc : "");
    free(sh.s);
  }
  sp(o, "  int rank; /* this rank of TP */\n  int64_t chunk; /* tokens per forward chunk: BATCH, or the batch option (1..BATCH) */\n"
        "  int32_t pos_host[BATCH];\n  uint64_t weight_bytes;\n};\n\n");
  sb cache_row = {0};
  size_t ncache = json_array_size(json_object_get(g->model, "cache"));
  const char *kvc = g->half_kv ? "uint16_t" : "float"; /* the C type of one cache element */
  if (g->kinds) {
    sp(o, "struct mi_seq {\n  int64_t n_ctx, len;\n  mi_buffer *buf;\n");
    sp(o, "  float *zeros; /* STATE_MAX zero floats after the layers' parts: seq_truncate(0) copies them */\n");
    sp(o, "  float *layer_state[%s]; /* each layer's part of the slab, by its kind (KV_ROW_*, STATE_*) */\n};\n\n",
       LAYERS);
    if (kind_macros(g, o)) return -1;
  } else {
    sp(o, "struct mi_seq {\n  int64_t n_ctx, len;\n  mi_buffer *buf;\n");
    sp(o, "  %s *cache; /* [%s][%zu][n_ctx, row] %s:", kvc, LAYERS, json_array_size(json_object_get(g->model, "cache")), g->kv);
    json_array_foreach(json_object_get(g->model, "cache"), i, e) {
      sb sh = {0};
      shape_comment(g, e, &sh, 0);
      sp(o, " %s %s", json_string_value(json_object_get(e, "name")), sh.s);
      free(sh.s);
    }
    sp(o, " */\n};\n\n");

    /* cache row sizes */
    json_array_foreach(json_object_get(g->model, "cache"), i, e) {
      if (i) break;
      row_width(g, e, &cache_row);
    }
    sp(o, "#define CACHE_ROW (%s) /* %s per position of one cache */\n\n", cache_row.s, g->half_kv ? "elements" : "floats");
  }

  /* the fixed helpers */
  sp(o, "%s",
     "static int fail(char *err, size_t n, const char *fmt, const char *a, const char *b) {\n"
     "  snprintf(err, n, fmt, a, b);\n  return -1;\n}\n\n"
     "#define K(call)                                                                 \\\n"
     "  do {                                                                          \\\n"
     "    if ((call) != 0)                                                            \\\n"
     "      return fail(err, err_len, \"engine: kernel %s failed: %s\", #call,          \\\n"
     "                  P->last_error ? P->last_error(pc) : \"unknown error\");       \\\n"
     "  } while (0)\n\n");
  int multi_vec = 0; /* a vector weight stored with more than one dim */
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    json_t *seen = json_object_get(g->weights_seen, json_string_value(json_object_get(e, "key")));
    if (seen && !strcmp(json_string_value(json_object_get(seen, "kind")), "vector") &&
        json_array_size(json_object_get(e, "shape")) > 1)
      multi_vec = 1;
  }
  sp(o, "%s",
     "/* Binds one weight [d0, d1]: a matrix in WEIGHT_DTYPE (this rank's rows\n"
     " * zero-copy when shard = SHARD_ROWS, its columns copied when SHARD_COLS),\n"
     " * a vector widened to f32. */\n"
     "enum { WHOLE = 0, SHARD_ROWS = 1, SHARD_COLS = 2 };\n"
     "static int bind(mi_model *m, const char *key, int64_t d0, int64_t d1, int vector, int shard, weight *w,\n"
     "                char *err, size_t err_len) {\n"
     "  const mi_platform_iface *P = m->P;\n"
     "  mi_weight_info wi;\n"
     "  char msg[160];\n"
     "  if (m->host->weights_find(m->weights, key, &wi) != 0) return fail(err, err_len, \"engine: missing tensor %s%s\", key, \"\");\n");
  sp(o, "%s",
     multi_vec ? "  int64_t numel = 1; /* a vector may be stored with unit or kernel dims ([C, 1, K]): its element count */\n"
                 "  for (int i = 0; i < wi.ndim; i++) numel *= wi.shape[i];\n"
                 "  if (vector ? wi.ndim != vector || numel != d0 : wi.ndim != 2 || wi.shape[0] != d0 || wi.shape[1] != d1) {\n"
               : "  if (wi.ndim != (vector ? 1 : 2) || wi.shape[0] != d0 || (!vector && wi.shape[1] != d1)) {\n");
  sp(o, "%s",
     "    snprintf(msg, sizeof msg, \"[%lld, %lld]\", (long long)d0, (long long)d1);\n"
     "    return fail(err, err_len, \"engine: tensor %s does not have the generated shape %s\", key, msg);\n"
     "  }\n"
     "  if (!vector) {\n"
     "    if (wi.dtype != WEIGHT_DTYPE) return fail(err, err_len, \"engine: tensor %s is not stored in the generated dtype%s\", key, \"\");\n"
     "    const size_t esz = mi_dtype_size(WEIGHT_DTYPE);\n"
     "    if (shard == SHARD_COLS && TP > 1) { /* [d0, d1/TP]: a copy of this rank's columns */\n"
     "      const int64_t c = d1 / TP;\n"
     "      const size_t bytes = (size_t)(d0 * c) * esz;\n"
     "      char *tmp = m->host->alloc(bytes, 64);\n"
     "      if (!tmp) return fail(err, err_len, \"engine: out of memory for %s%s\", key, \"\");\n"
     "      for (int64_t r = 0; r < d0; r++)\n"
     "        memcpy(tmp + (size_t)(r * c) * esz, (const char *)wi.data + (size_t)(r * d1 + m->rank * c) * esz, (size_t)c * esz);\n"
     "      int rc = P->buffer_alloc(m->pc, bytes, &w->buf);\n"
     "      if (rc == 0) rc = P->memcpy_h2d(m->pc, NULL, w->ptr = P->buffer_ptr(m->pc, w->buf), tmp, bytes);\n"
     "      m->host->free(tmp);\n"
     "      if (rc != 0) return fail(err, err_len, \"engine: cannot upload %s: %s\", key, P->last_error(m->pc));\n"
     "      m->weight_bytes += bytes;\n"
     "      return 0;\n"
     "    }\n"
     "    const int64_t rows = shard == SHARD_ROWS ? d0 / TP : d0, row0 = shard == SHARD_ROWS ? m->rank * rows : 0;\n"
     "    const size_t bytes = (size_t)(rows * d1) * esz; /* this rank's rows: zero-copy */\n"
     "    if (P->buffer_wrap_host(m->pc, (const char *)wi.data + (size_t)(row0 * d1) * esz, bytes, &w->buf) != 0)\n"
     "      return fail(err, err_len, \"engine: cannot place %s: %s\", key, P->last_error(m->pc));\n"
     "    w->ptr = P->buffer_ptr(m->pc, w->buf);\n"
     "    m->weight_bytes += bytes;\n"
     "    return 0;\n"
     "  }\n"
     "  float *tmp = m->host->alloc((size_t)d0 * sizeof(float), 64);\n"
     "  if (!tmp) return fail(err, err_len, \"engine: out of memory for %s%s\", key, \"\");\n"
     "  for (int64_t i = 0; i < d0; i++) {\n"
     "    uint16_t h;\n"
     "    if (wi.dtype == MI_DTYPE_F32) memcpy(&tmp[i], (const char *)wi.data + 4 * i, 4);\n"
     "    else if (memcpy(&h, (const char *)wi.data + 2 * i, 2), wi.dtype == MI_DTYPE_BF16) tmp[i] = mi_bf16_to_f32(h);\n"
     "    else tmp[i] = mi_f16_to_f32(h);\n"
     "  }\n"
     "  int rc = P->buffer_alloc(m->pc, (size_t)d0 * sizeof(float), &w->buf);\n"
     "  if (rc == 0) rc = P->memcpy_h2d(m->pc, NULL, w->ptr = P->buffer_ptr(m->pc, w->buf), tmp, (size_t)d0 * sizeof(float));\n"
     "  m->host->free(tmp);\n"
     "  if (rc != 0) return fail(err, err_len, \"engine: cannot upload %s: %s\", key, P->last_error(m->pc));\n"
     "  m->weight_bytes += wi.nbytes;\n"
     "  return 0;\n"
     "}\n\n");

  /* load_weights */
  sp(o, "static int load_weights(mi_model *m, char *err, size_t err_len) {\n  char key[160];\n");
  for (int pass = 0; pass < 2; pass++) {
    const char *open_kind = NULL; /* the layer kind whose "if" block is open (consecutive weights share it) */
    if (pass) sp(o, "  for (int l = 0; l < %s; l++) {\n    layer *L = &m->layers[l];\n", LAYERS);
    json_array_foreach(json_object_get(g->model, "weights"), i, e) {
      const char *key = json_string_value(json_object_get(e, "key"));
      json_t *seen = json_object_get(g->weights_seen, key);
      if (!seen || json_is_true(json_object_get(e, "per_layer")) != pass) continue;
      char f[128];
      weight_field(key, f, sizeof f);
      json_t *sh = json_object_get(e, "shape");
      sb d0 = {0}, d1 = {0};
      g->nosplit = 1; /* the stored tensor's full shape */
      int vec = !strcmp(json_string_value(json_object_get(seen, "kind")), "vector");
      if (vec && json_array_size(sh) > 1) { /* a vector stored [C, 1, K]: its element count, its rank */
        for (size_t k = 0; k < json_array_size(sh); k++) {
          json_t *dk = json_array_get(sh, k);
          if (k) sp(&d0, " * ");
          if (json_is_integer(dk)) sp(&d0, "%lld", (long long)json_integer_value(dk));
          else {
            sp(&d0, "(");
            expr_c(g, json_string_value(dk), &d0, NULL);
            sp(&d0, ")");
          }
        }
        sp(&d1, "0");
        vec = (int)json_array_size(sh);
      } else {
        expr_c(g, json_string_value(json_array_get(sh, 0)), &d0, NULL);
        if (json_array_size(sh) > 1) expr_c(g, json_string_value(json_array_get(sh, 1)), &d1, NULL);
        else sp(&d1, "0");
      }
      g->nosplit = 0;
      const char *shard = json_string_value(json_object_get(e, "shard"));
      const char *shc = !shard ? "WHOLE" : !strcmp(shard, "rows") ? "SHARD_ROWS" : "SHARD_COLS";
      const char *wk = g->kinds ? json_string_value(json_object_get(e, "layer_kind")) : NULL;
      if (pass) {
        char fmt[200];
        const char *br = strstr(key, "{i}");
        snprintf(fmt, sizeof fmt, "%.*s%%d%s", (int)(br - key), key, br + 3);
        char U[96] = "";
        if (open_kind && (!wk || strcmp(wk, open_kind))) sp(o, "    }\n");
        if (wk && (!open_kind || strcmp(wk, open_kind))) {
          if (kind_index(g, wk) < 0) {
            snprintf(g->err, sizeof g->err, "weight %s: layer_kind %s is not a kind of layer_kinds", key, wk);
            free(d0.s);
            free(d1.s);
            return -1;
          }
          upper(U, wk, sizeof U);
          sp(o, "    if (k_layer_kind[l] == KIND_%s) { /* weights only %s layers have */\n", U, wk);
        }
        open_kind = wk;
        sp(o, "%s    snprintf(key, sizeof key, \"%s\", l);\n", wk ? "  " : "", fmt);
        sp(o, "%s    if (bind(m, key, %s, %s, %d, %s, &L->%s, err, err_len)) return -1;\n", wk ? "  " : "", d0.s, d1.s,
           vec, shc, f);
      } else {
        sp(o, "  if (bind(m, \"%s\", %s, %s, %d, %s, &m->%s, err, err_len)) return -1;\n", key, d0.s, d1.s, vec, shc, f);
      }
      free(d0.s);
      free(d1.s);
    }
    if (open_kind) sp(o, "    }\n");
    if (pass) sp(o, "  }\n");
  }
  sp(o, "  (void)key;\n  return 0;\n}\n\n");

  /* arena */
  sp(o, "/* The static memory plan: every activation buffer at a fixed offset of one arena. */\n");
  sp(o, "static int plan_memory(mi_model *m, char *err, size_t err_len) {\n  size_t off = 0;\n");
  sp(o, "  const mi_platform_iface *P = m->P;\n");
  json_array_foreach(json_object_get(g->model, "buffers"), i, e) {
    json_t *sh = json_object_get(e, "shape");
    sb sz = {0};
    for (size_t k = 0; k < json_array_size(sh); k++) {
      const char *d = json_string_value(json_array_get(sh, k));
      if (k) sp(&sz, " * ");
      if (!strcmp(d, "T")) sp(&sz, "BATCH");
      else if (!strcmp(d, "R")) sp(&sz, "LOGIT_ROWS");
      else if (strpbrk(d, "+-")) { /* a sum inside a product */
        sp(&sz, "(");
        expr_c(g, d, &sz, NULL);
        sp(&sz, ")");
      } else expr_c(g, d, &sz, NULL);
    }
    sp(o, "  size_t off_%s = off; off += ((size_t)%s * 4 + 63) & ~(size_t)63;\n",
       json_string_value(json_object_get(e, "name")), sz.s);
    free(sz.s);
  }
  sp(o, "  if (P->buffer_alloc(m->pc, off, &m->arena) != 0)\n");
  sp(o, "    return fail(err, err_len, \"engine: cannot allocate the %%s arena: %%s\", \"activation\", P->last_error(m->pc));\n");
  sp(o, "  char *base = P->buffer_ptr(m->pc, m->arena);\n");
  json_array_foreach(json_object_get(g->model, "buffers"), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    sp(o, "  m->%s = (%s *)(base + off_%s);\n", n, dt && !strcmp(dt, "i32") ? "int32_t" : "float", n);
  }
  sp(o, "  return 0;\n}\n\n");

  /* forward */
  sp(o, "/* T <= BATCH tokens (ids already in m->ids) at positions s->len .. s->len+T-1. */\n");
  sp(o, "static int forward_chunk(mi_model *m, mi_seq *s, int64_t T, char *err, size_t err_len) {\n");
  sp(o, "  const mi_platform_iface *P = m->P;\n  void *pc = m->pc;\n  const int64_t pos0 = s->len;\n");
  json_array_foreach(json_object_get(g->model, "buffers"), i, e) {
    const char *in = json_string_value(json_object_get(e, "input"));
    if (in && !strcmp(in, "positions")) {
      sp(o, "  for (int64_t t = 0; t < T; t++) m->pos_host[t] = (int32_t)(pos0 + t);\n");
      sp(o, "  K(P->memcpy_h2d(pc, NULL, m->%s, m->pos_host, (size_t)T * sizeof(int32_t)));\n",
         json_string_value(json_object_get(e, "name")));
    }
  }
  sp(o, "%s", pro.s);
  sp(o, "  for (int l = 0; l < %s; l++) {\n    const layer *L = &m->layers[l];\n", LAYERS);
  json_array_foreach(json_object_get(g->model, "cache"), i, e) {
    sb sh = {0};
    shape_comment(g, e, &sh, 0);
    sp(o, "    %s *%s = s->cache + ((size_t)l * %zu + %zu) * (size_t)s->n_ctx * CACHE_ROW; /* %s */\n", kvc,
       json_string_value(json_object_get(e, "name")), ncache, i, sh.s);
    free(sh.s);
  }
  sp(o, "%s  }\n  s->len += T;\n  return 0;\n}\n\n", lay.s);

  /* logits */
  const char *out_buf = "logits";
  sp(o, "/* Logits of rows r0 .. r0+n-1 of the last chunk, to host memory. */\n");
  sp(o, "static int logits_rows(mi_model *m, int64_t r0, int64_t n, float *out, char *err, size_t err_len) {\n");
  sp(o, "  const mi_platform_iface *P = m->P;\n  void *pc = m->pc;\n");
  sp(o, "  for (int64_t done = 0; done < n; done += LOGIT_ROWS, r0 += LOGIT_ROWS) {\n");
  sp(o, "    const int64_t R = n - done < LOGIT_ROWS ? n - done : LOGIT_ROWS;\n");
  /* indent the epilogue one level more */
  sb epi2 = {0};
  for (char *ln = strtok(epi.s, "\n"); ln; ln = strtok(NULL, "\n")) sp(&epi2, "  %s\n", ln);
  sp(o, "%s", epi2.s);
  sp(o, "    K(P->memcpy_d2h(pc, NULL, out + (size_t)done * VOCAB_SIZE, m->%s, (size_t)(R * VOCAB_SIZE) * sizeof(float)));\n", out_buf);
  sp(o, "  }\n  K(P->stream_sync(pc, NULL));\n  return 0;\n}\n\n");
  free(epi2.s);

  /* the fixed glue */
  sp(o, "/* ---- the model interface (mi/model.h), embedded in the engine interface ---- */\n\n");
  sp(o, "static const mi_host_api *g_host;\n\n");
  if (g->has_paths)
    sp(o, "%s",
       "/* a config field by its dotted path (rope_parameters.rope_theta) */\n"
       "static const mi_json *cfg_at(const mi_host_api *h, const mi_json *cfg, const char *path) {\n"
       "  char seg[64];\n"
       "  const mi_json *v = cfg;\n"
       "  while (v && *path) {\n"
       "    size_t n = strcspn(path, \".\");\n"
       "    snprintf(seg, sizeof seg, \"%.*s\", (int)n, path);\n"
       "    v = h->json_type(v) == MI_JSON_OBJECT ? h->json_get(v, seg) : NULL;\n"
       "    path += n + (path[n] == '.');\n"
       "  }\n"
       "  return v;\n}\n\n");
  sp(o, "static int e_check_config(void *ctx, const mi_json *cfg, char *err, size_t err_len) {\n"
        "  /* k_digest lists every contract field as name=value; each must be what this engine was made for */\n"
        "  const mi_host_api *h = g_host;\n"
        "  const char *archs = h->json_string(h->json_array_get(h->json_get(cfg, \"architectures\"), 0));\n"
        "  if (!archs || strcmp(archs, \"%s\"))\n"
        "    return fail(err, err_len, \"engine %s was generated for %s only%%s%%s\", \"\", \"\");\n"
        "  const char *p = k_digest;\n"
        "  while (*p) {\n"
        "    const char *eq = strchr(p, '='), *end = strchr(p, ';');\n"
        "    char name[64], want[64], got[64] = \"(absent)\";\n"
        "    snprintf(name, sizeof name, \"%%.*s\", (int)(eq - p), p);\n"
        "    snprintf(want, sizeof want, \"%%.*s\", (int)(end - eq - 1), eq + 1);\n"
        "    const mi_json *v = %s;\n"
        "    int64_t iv;\n    double dv;\n    int bv;\n"
        "    if (v && h->json_type(v) == MI_JSON_INT && h->json_int(v, &iv) == 0) snprintf(got, sizeof got, \"%%lld\", (long long)iv);\n"
        "    else if (v && h->json_type(v) == MI_JSON_REAL && h->json_real(v, &dv) == 0) snprintf(got, sizeof got, \"%%.17g\", dv);\n"
        "    else if (v && h->json_type(v) == MI_JSON_BOOL && h->json_bool(v, &bv) == 0) snprintf(got, sizeof got, \"%%d\", bv);\n"
        "    else if (v && h->json_string(v)) snprintf(got, sizeof got, \"%%s\", h->json_string(v));\n"
        "    else if (!v || h->json_type(v) == MI_JSON_NULL) snprintf(got, sizeof got, \"%%s\", want); /* the contract's default */\n"
        "    if (strcmp(got, want)) {\n"
        "      snprintf(err, err_len, \"engine %s refuses this config: %%s = %%s, it was generated for %%s = %%s\", name, got, name, want);\n"
        "      return -1;\n"
        "    }\n"
        "    p = end + 1;\n"
        "  }\n",
     arch, engine_name, arch, g->has_paths ? "cfg_at(h, cfg, name)" : "h->json_get(cfg, name)", engine_name);
  if (g->kinds) {
    json_t *lk = json_object_get(g->model, "layer_kinds");
    const char *an = json_string_value(json_object_get(lk, "config")), *ivn = json_string_value(json_object_get(lk, "interval"));
    char IV[96] = "";
    if (ivn) upper(IV, ivn, sizeof IV);
    sp(o, "  /* each layer's kind: config.json's %s, else every %s-th layer is the first kind */\n", an ? an : "?",
       ivn ? ivn : "?");
    sp(o, "  const mi_json *kinds = h->json_get(cfg, \"%s\");\n", an ? an : "");
    sp(o, "  if (kinds && (h->json_type(kinds) != MI_JSON_ARRAY || h->json_array_size(kinds) != %s))\n"
          "    return fail(err, err_len, \"engine %s refuses this config: %s is not an array of %%s layer kinds%%s\", STR(%s), \"\");\n",
       LAYERS, engine_name, an ? an : "?", LAYERS);
    sp(o, "  for (int l = 0; l < %s; l++) {\n", LAYERS);
    if (ivn)
      sp(o, "    const char *got = kinds ? h->json_string(h->json_array_get(kinds, (size_t)l))\n"
            "                            : k_kind_name[(l + 1) %% %s == 0 ? 0 : 1];\n", IV);
    else
      sp(o, "    const char *got = kinds ? h->json_string(h->json_array_get(kinds, (size_t)l)) : NULL;\n");
    sp(o, "    if (!got || strcmp(got, k_kind_name[k_layer_kind[l]])) {\n"
          "      snprintf(err, err_len, \"engine %s refuses this config: %s[%%d] = %%s, it was generated for %%s\", l,\n"
          "               got ? got : \"(absent)\", k_kind_name[k_layer_kind[l]]);\n"
          "      return -1;\n    }\n  }\n",
       engine_name, an ? an : "?");
  }
  sp(o, "  return 0;\n}\n\n");
  sp(o, "%s",
     "static void e_unload(mi_model *m);\n\n"
     "static int e_load(void *ctx, const mi_model_load_args *a, mi_model **out, char *err, size_t err_len) {\n"
     "  (void)ctx;\n  *out = NULL;\n");
  sp(o, "  if ((a->tp_size > 0 ? a->tp_size : 1) != TP)\n"
        "    return fail(err, err_len, \"engine %s was generated for --tp %d only%%s%%s\", \"\", \"\");\n", engine_name, g->tp);
  if (g->tp > 1)
    sp(o, "  if (!mi_platform_has(a->platform.iface, allreduce_sum_f32))\n"
          "    return fail(err, err_len, \"engine: tensor parallelism needs the platform's allreduce%%s%%s\", \"\", \"\");\n");
  sp(o, "%s",
     "  if (e_check_config(NULL, a->config, err, err_len) != 0) return -1;\n"
     "  /* the KV cache type is baked in: a run asking for another (mi-run --kv-type) is refused */\n"
     "  const char *kvopt = a->opts ? g_host->opt_get(a->opts, \"kv_type\") : NULL;\n"
     "  if (kvopt && strcmp(kvopt, KV_TYPE))\n"
     "    return fail(err, err_len, \"engine: kv_type=%s asked; this engine was generated for a %s KV cache\", kvopt, KV_TYPE);\n"
     "  /* the batch option (mi-run -b) sets a smaller prefill chunk; the arena stays sized for BATCH */\n"
     "  int64_t chunk = BATCH;\n"
     "  const char *bopt = a->opts ? g_host->opt_get(a->opts, \"batch\") : NULL;\n"
     "  if (bopt) {\n"
     "    const char *q = bopt;\n"
     "    for (chunk = 0; *q >= '0' && *q <= '9' && chunk <= BATCH; q++) chunk = chunk * 10 + (*q - '0');\n"
     "    if (*q || q == bopt || chunk < 1 || chunk > BATCH)\n"
     "      return fail(err, err_len, \"engine: batch=%s must be an integer in [1, %s] (the engine's BATCH)\", bopt, STR(BATCH));\n"
     "  }\n"
     "  mi_model *m = g_host->alloc(sizeof *m, 64);\n"
     "  if (!m) return fail(err, err_len, \"engine: out of memory%s%s\", \"\", \"\");\n"
     "  memset(m, 0, sizeof *m);\n"
     "  m->host = g_host;\n  m->P = a->platform.iface;\n  m->pc = a->platform.ctx;\n  m->weights = a->weights;\n"
     "  m->rank = a->tp_rank;\n  m->chunk = chunk;\n"
     "  if (load_weights(m, err, err_len) != 0 || plan_memory(m, err, err_len) != 0) {\n"
     "    e_unload(m);\n    return -1;\n  }\n"
     "  *out = m;\n  return 0;\n}\n\n"
     "static void free_w(mi_model *m, weight *w) {\n  if (w->buf) m->P->buffer_free(m->pc, w->buf);\n}\n\n"
     "static void e_unload(mi_model *m) {\n  if (!m) return;\n");
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    const char *key = json_string_value(json_object_get(e, "key"));
    if (!json_object_get(g->weights_seen, key) || json_is_true(json_object_get(e, "per_layer"))) continue;
    char f[128];
    weight_field(key, f, sizeof f);
    sp(o, "  free_w(m, &m->%s);\n", f);
  }
  sp(o, "  for (int l = 0; l < %s; l++) {\n", LAYERS);
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    const char *key = json_string_value(json_object_get(e, "key"));
    if (!json_object_get(g->weights_seen, key) || !json_is_true(json_object_get(e, "per_layer"))) continue;
    char f[128];
    weight_field(key, f, sizeof f);
    sp(o, "    free_w(m, &m->layers[l].%s);\n", f);
  }
  sp(o, "  }\n  if (m->arena) m->P->buffer_free(m->pc, m->arena);\n  m->host->free(m);\n}\n\n");
  if (!g->kinds) {
  sp(o, "static int e_info(mi_model *m, mi_model_info *dst) {\n"
        "  size_t room = dst->struct_size ? dst->struct_size : offsetof(mi_model_info, prefill_flops_token);\n"
        "  if (room > sizeof(mi_model_info)) room = sizeof(mi_model_info);\n"
        "  mi_model_info i;\n  memset(&i, 0, sizeof i);\n  i.struct_size = (uint32_t)room;\n"
        "  i.architecture = \"%s\";\n  i.vocab_size = VOCAB_SIZE;\n  i.hidden_size = HIDDEN_SIZE;\n"
        "  i.n_layers = %s;\n  i.max_position = MAX_POSITION_EMBEDDINGS;\n  i.weight_bytes = m->weight_bytes;\n"
        "  i.state_bytes_token = (uint64_t)%s * %zu * CACHE_ROW * sizeof(%s);\n"
        "  i.decode_weight_bytes = DECODE_WEIGHT_BYTES;\n  i.prefill_flops_token = PREFILL_FLOPS_TOKEN;\n"
        "  i.attn_flops_pos = ATTN_FLOPS_POS;\n  memcpy(dst, &i, room);\n  return 0;\n}\n\n",
     arch, LAYERS, LAYERS, ncache, kvc);
  sp(o, "static int e_seq_create(mi_model *m, int64_t n_ctx, mi_seq **out, char *err, size_t err_len) {\n"
        "  *out = NULL;\n"
        "  if (n_ctx < 1 || n_ctx > MAX_POSITION_EMBEDDINGS)\n"
        "    return fail(err, err_len, \"engine: the context asked is outside [1, %%s] (max_position_embeddings)%%s\", STR(MAX_POSITION_EMBEDDINGS), \"\");\n"
        "  mi_seq *s = m->host->alloc(sizeof *s, 64);\n"
        "  if (!s) return fail(err, err_len, \"engine: out of memory%%s%%s\", \"\", \"\");\n"
        "  memset(s, 0, sizeof *s);\n  s->n_ctx = n_ctx;\n"
        "  size_t bytes = (size_t)%s * %zu * (size_t)n_ctx * CACHE_ROW * sizeof(%s);\n"
        "  if (m->P->buffer_alloc(m->pc, bytes, &s->buf) != 0) {\n    m->host->free(s);\n"
        "    return fail(err, err_len, \"engine: cannot allocate the KV cache: %%s%%s\", m->P->last_error(m->pc), \"\");\n  }\n"
        "  s->cache = m->P->buffer_ptr(m->pc, s->buf);\n  *out = s;\n  return 0;\n}\n\n",
     LAYERS, ncache, kvc);
  sp(o, "%s",
     "static void e_seq_destroy(mi_model *m, mi_seq *s) {\n  if (!s) return;\n"
     "  if (s->buf) m->P->buffer_free(m->pc, s->buf);\n  m->host->free(s);\n}\n\n"
     "static int e_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {\n  (void)m;\n"
     "  if (n_keep < 0 || n_keep > s->len) return -1;\n  s->len = n_keep;\n  return 0;\n}\n\n");
  } else {
    sp(o, "static int e_info(mi_model *m, mi_model_info *dst) {\n"
          "  size_t room = dst->struct_size ? dst->struct_size : offsetof(mi_model_info, prefill_flops_token);\n"
          "  if (room > sizeof(mi_model_info)) room = sizeof(mi_model_info);\n"
          "  mi_model_info i;\n  memset(&i, 0, sizeof i);\n  i.struct_size = (uint32_t)room;\n"
          "  i.architecture = \"%s\";\n  i.vocab_size = VOCAB_SIZE;\n  i.hidden_size = HIDDEN_SIZE;\n"
          "  i.n_layers = %s;\n  i.max_position = MAX_POSITION_EMBEDDINGS;\n  i.weight_bytes = m->weight_bytes;\n"
          "  for (int l = 0; l < %s; l++) { /* caches grow per token; the state of the other kinds is fixed */\n"
          "    i.state_bytes_token += k_kv_row[k_layer_kind[l]] * sizeof(float);\n"
          "    i.state_bytes_fixed += k_state[k_layer_kind[l]] * sizeof(float);\n  }\n"
          "  i.decode_weight_bytes = DECODE_WEIGHT_BYTES;\n  i.prefill_flops_token = PREFILL_FLOPS_TOKEN;\n"
          "  i.attn_flops_pos = ATTN_FLOPS_POS;\n  memcpy(dst, &i, room);\n  return 0;\n}\n\n",
       arch, LAYERS, LAYERS);
    sp(o, "static int e_seq_create(mi_model *m, int64_t n_ctx, mi_seq **out, char *err, size_t err_len) {\n"
          "  *out = NULL;\n"
          "  if (n_ctx < 1 || n_ctx > MAX_POSITION_EMBEDDINGS)\n"
          "    return fail(err, err_len, \"engine: the context asked is outside [1, %%s] (max_position_embeddings)%%s\", STR(MAX_POSITION_EMBEDDINGS), \"\");\n"
          "  mi_seq *s = m->host->alloc(sizeof *s, 64);\n"
          "  if (!s) return fail(err, err_len, \"engine: out of memory%%s%%s\", \"\", \"\");\n"
          "  memset(s, 0, sizeof *s);\n  s->n_ctx = n_ctx;\n"
          "  size_t floats = 0, most = 0; /* one slab: each layer's caches and state, then zeros for a reset */\n"
          "  for (int l = 0; l < %s; l++) {\n"
          "    floats += (size_t)n_ctx * k_kv_row[k_layer_kind[l]] + k_state[k_layer_kind[l]];\n"
          "    if (k_state[k_layer_kind[l]] > most) most = k_state[k_layer_kind[l]];\n  }\n"
          "  if (m->P->buffer_alloc(m->pc, (floats + most) * sizeof(float), &s->buf) != 0) { /* zeroed: a new sequence's state */\n"
          "    m->host->free(s);\n"
          "    return fail(err, err_len, \"engine: cannot allocate the sequence's caches and state: %%s%%s\", m->P->last_error(m->pc), \"\");\n  }\n"
          "  float *p = m->P->buffer_ptr(m->pc, s->buf);\n"
          "  for (int l = 0; l < %s; l++) {\n"
          "    s->layer_state[l] = p;\n"
          "    p += (size_t)n_ctx * k_kv_row[k_layer_kind[l]] + k_state[k_layer_kind[l]];\n  }\n"
          "  s->zeros = p;\n  *out = s;\n  return 0;\n}\n\n",
       LAYERS, LAYERS);
    sp(o, "static void e_seq_destroy(mi_model *m, mi_seq *s) {\n  if (!s) return;\n"
          "  if (s->buf) m->P->buffer_free(m->pc, s->buf);\n  m->host->free(s);\n}\n\n"
          "/* The fixed state summarises every position so far: a sequence is kept whole or\n"
          " * restarted (n_keep 0 zeroes the state), never cut in between. */\n"
          "static int e_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {\n"
          "  if (n_keep == s->len) return 0;\n"
          "  if (n_keep != 0) {\n"
          "    m->host->log(MI_LOG_ERROR, \"%s\", \"a sequence with recurrent state can be truncated only to 0 or its \"\n"
          "                 \"length %%lld, not to %%lld\", (long long)s->len, (long long)n_keep);\n"
          "    return -1;\n  }\n"
          "  for (int l = 0; l < %s; l++) {\n"
          "    const size_t n = k_state[k_layer_kind[l]];\n"
          "    if (n && m->P->memcpy_d2d(m->pc, NULL, s->layer_state[l] + (size_t)s->n_ctx * k_kv_row[k_layer_kind[l]],\n"
          "                              s->zeros, n * sizeof(float)) != 0)\n"
          "      return -1;\n  }\n"
          "  s->len = 0;\n  return 0;\n}\n\n",
       engine_name, LAYERS);
  }
  sp(o, "%s",
     "static int64_t e_seq_len(mi_model *m, mi_seq *s) {\n  (void)m;\n  return s->len;\n}\n\n"
     "static int e_forward(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n, float *logits, int all_logits,\n"
     "                     char *err, size_t err_len) {\n"
     "  const mi_platform_iface *P = m->P;\n  void *pc = m->pc;\n"
     "  if (n <= 0 || s->len + n > s->n_ctx) return fail(err, err_len, \"engine: %s tokens do not fit the context%s\", n <= 0 ? \"no\" : \"the\", \"\");\n"
     "  for (int64_t i = 0; i < n; i++)\n"
     "    if (ids[i] < 0 || ids[i] >= VOCAB_SIZE) return fail(err, err_len, \"engine: a token id is outside the vocabulary%s%s\", \"\", \"\");\n"
     "  for (int64_t done = 0; done < n;) {\n"
     "    const int64_t T = n - done < m->chunk ? n - done : m->chunk;\n"
     "    K(P->memcpy_h2d(pc, NULL, m->ids, ids + done, (size_t)T * sizeof(int32_t)));\n"
     "    if (forward_chunk(m, s, T, err, err_len) != 0) return -1;\n"
     "    if (logits && all_logits && logits_rows(m, 0, T, logits + (size_t)done * VOCAB_SIZE, err, err_len) != 0) return -1;\n"
     "    if (logits && !all_logits && done + T == n && logits_rows(m, T - 1, 1, logits, err, err_len) != 0) return -1;\n"
     "    done += T;\n  }\n  return 0;\n}\n\n");
  sp(o, "static const char *const k_architectures[] = {\"%s\", NULL};\n\n", arch);
  emit_platform_needs(o);
  sp(o, "static const mi_engine_iface k_iface = {\n"
        "    .model = {.struct_size = sizeof(mi_model_iface), .architectures = k_architectures,\n"
        "              .check_config = e_check_config, .load = e_load, .unload = e_unload, .info = e_info,\n"
        "              .seq_create = e_seq_create, .seq_destroy = e_seq_destroy, .seq_truncate = e_seq_truncate,\n"
        "              .seq_len = e_seq_len, .forward = e_forward, .platform_needs = k_needs},\n"
        "    .struct_size = sizeof(mi_engine_iface),\n"
        "    .constraints = \"{\\\"model\\\":\\\"%s\\\",\\\"platform\\\":\\\"%s\\\",\\\"dtype\\\":\\\"%s\\\",\\\"tp\\\":%d,\\\"kv_type\\\":\\\"%s\\\"}\",\n"
        "    .config_digest = k_digest,\n    .generator = \"implementer.compose 0.1.0\",\n};\n\n",
     mid, json_string_value(json_object_get(g->platform, "plugin")), g->dtype, g->tp, g->kv);
  sp(o, "%s",
     "static int e_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err, size_t err_len) {\n"
     "  (void)opts;\n"
     "  if (!host || host->struct_size < sizeof(mi_host_api)) return fail(err, err_len, \"host API table too old%s%s\", \"\", \"\");\n"
     "  g_host = host;\n  *ctx = (void *)&g_host;\n  return 0;\n}\n\n"
     "static const void *e_get_iface(void *ctx) {\n  (void)ctx;\n  return &k_iface;\n}\n\n");
  sp(o, "static const mi_plugin_desc k_desc = {\n"
        "    .abi_major = MI_ABI_MAJOR, .abi_minor = MI_ABI_MINOR, .struct_size = sizeof(mi_plugin_desc),\n"
        "    .kind = MI_PLUGIN_ENGINE, .name = \"%s\", .version = \"1.0.0\",\n"
        "    .description = \"generated %s engine (%s, %s, tp %d)\",\n"
        "    .init = e_init, .get_iface = e_get_iface,\n};\n\nMI_PLUGIN_DEFINE(k_desc)\n",
     engine_name, arch, json_string_value(json_object_get(g->platform, "plugin")), g->dtype, g->tp);
  free(pro.s);
  free(lay.s);
  free(epi.s);
  free(digest.s);
  free(cache_row.s);
  return 0;
}

/* ---- the agent ---- */

static json_t *entry_ref(const mi_ckb_entry *e) {
  char sha[65] = "";
  mi_sha256_file(e->path, sha);
  return json_pack("{s:s, s:s, s:s}", "id", e->id, "version", e->version ? e->version : "?", "sha256", sha);
}

/* Does some step of the binding's operator bind its argument as `was`? */
static int carries_binding(json_t *model, json_t *bd) {
  const char *op = json_string_value(json_object_get(bd, "operator"));
  const char *arg = json_string_value(json_object_get(bd, "arg"));
  const char *was = json_string_value(json_object_get(bd, "was"));
  if (!op || !arg || !was) return 0;
  json_t *all = mi_ckb_model_sequences(model);
  int hit = 0;
  for (size_t s = 0; !hit && s < json_array_size(all); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(all, s), i, st) {
      const char *b = json_string_value(json_object_get(json_object_get(st, "args"), arg));
      if (!strcmp(json_string_value(json_object_get(st, "operator")) ?: "", op) && b && !strcmp(b, was)) hit = 1;
    }
  }
  json_decref(all);
  return hit;
}

static void apply_patch(json_t *model, json_t *patch) {
  const char *op = json_string_value(json_object_get(patch, "operator"));
  const char *arg = json_string_value(json_object_get(patch, "arg"));
  json_t *val = json_object_get(patch, "value");
  json_t *all = mi_ckb_model_sequences(model); /* the sections' steps and each layer kind's */
  for (size_t s = 0; s < json_array_size(all); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(all, s), i, st) {
      json_t *args = json_object_get(st, "args");
      if (op && arg && args && !strcmp(json_string_value(json_object_get(st, "operator")), op) &&
          json_object_get(args, arg))
        json_object_set(args, arg, val);
    }
  }
  json_decref(all);
}

static int compose_run(void *ctx, const mi_agent_task *t, char **result, char *err, size_t err_len) {
  (void)ctx;
  json_error_t je;
  json_t *task = json_loads(t->task_json, 0, &je);
  json_t *cons = json_object_get(task, "constraints");
  const char *model_dir = json_string_value(json_object_get(task, "model_dir"));
  const char *pname = json_string_value(json_object_get(cons, "platform"));
  const char *dtype = json_string_value(json_object_get(cons, "dtype"));
  const char *engine_name = json_string_value(json_object_get(task, "engine_name"));
  int rc = -1;
  gen g = {0};
  sb src = {0};
  mi_ckb *c = NULL;
  if (!task || !model_dir || !pname || !dtype || !engine_name) {
    snprintf(err, err_len, "compose: the task lacks model_dir, engine_name or constraints.platform/dtype");
    goto out;
  }
  c = mi_ckb_open(t->ckb_dir, err, err_len);
  if (!c) goto out;
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", model_dir);
  g.config = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!g.config) {
    snprintf(err, err_len, "%s: %s", path, je.text);
    goto out;
  }
  const char *arch = json_string_value(json_array_get(json_object_get(g.config, "architectures"), 0));
  const mi_ckb_entry *me = NULL;
  for (size_t i = 0; i < mi_ckb_count(c) && !me && arch; i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    size_t k;
    json_t *a;
    if (e->kind && !strcmp(e->kind, "model"))
      json_array_foreach(json_object_get(e->json, "architectures"), k, a) if (!strcmp(json_string_value(a), arch)) me = e;
  }
  const mi_ckb_entry *pe = mi_ckb_find_platform(c, pname);
  if (!me || !pe) {
    snprintf(err, err_len, "compose: no %s contract for %s", me ? "platform" : "model", me ? pname : arch ? arch : "(no architecture)");
    goto out;
  }
  g.model = json_deep_copy(me->json);
  g.kinds = json_object_get(json_object_get(g.model, "layer_kinds"), "kinds");
  g.platform = pe->json;
  g.dtype = dtype;
  g.tp = json_is_integer(json_object_get(cons, "tp")) ? (int)json_integer_value(json_object_get(cons, "tp")) : 1;
  if (g.tp < 1) g.tp = 1;
  g.ops = json_object();
  g.weights_seen = json_object();
  g.pending = json_object();
  g.kv = json_string_value(json_object_get(cons, "kv_type")) ?: "f32";
  if (!dtype_const(g.kv)) {
    snprintf(err, err_len, "compose: kv_type '%s': the engine's KV cache holds f32, f16 or bf16", g.kv);
    goto out;
  }
  g.half_kv = strcmp(g.kv, "f32") != 0;
  json_t *contracts = json_array();
  json_array_append_new(contracts, entry_ref(me));
  json_array_append_new(contracts, entry_ref(pe));
  size_t i;
  json_t *k;
  json_array_foreach(json_object_get(pe->json, "kernels"), i, k) {
    const char *id = json_string_value(json_object_get(k, "operator"));
    const mi_ckb_entry *oe = mi_ckb_find(c, id);
    if (!oe) continue;
    json_object_set(g.ops, id, oe->json);
    json_array_append_new(contracts, entry_ref(oe));
  }
  if (g.half_kv && json_object_get(g.model, "layer_kinds")) {
    snprintf(err, err_len, "compose: KV type %s with a layer-kinds contract (%s) is not composed yet: use --kv-type f32",
             g.kv, me->id);
    json_decref(contracts);
    goto out;
  }
  if (g.half_kv) {
    /* a half-precision cache is written through operator.convert from an f32
     * staging buffer per cache entry: [T, the entry's row] in the arena */
    if (!json_object_get(g.ops, "operator.convert")) {
      snprintf(err, err_len, "compose: KV type %s needs operator.convert among the kernels of %s", g.kv, pe->id);
      json_decref(contracts);
      goto out;
    }
    json_t *bufs = json_object_get(g.model, "buffers");
    json_array_foreach(json_object_get(g.model, "cache"), i, k) {
      json_t *sh = json_deep_copy(json_object_get(k, "shape"));
      json_array_set_new(sh, 0, json_string("T"));
      const char *cn = json_string_value(json_object_get(k, "name"));
      json_array_append_new(bufs, json_pack("{s:o, s:o, s:o}", "name", json_sprintf("%s_new", cn), "shape", sh, "doc",
                                            json_sprintf("new rows of %s in f32, stored into the %s cache by convert", cn, g.kv)));
    }
  }
  /* experience: consulted before anything is written */
  char model_sha[65] = "";
  mi_sha256_file(me->path, model_sha);
  json_t *patches = json_array(), *exp = json_array();
  for (size_t n = 0; n < mi_ckb_count(c); n++) {
    const mi_ckb_entry *e = mi_ckb_at(c, n);
    if (!e->kind || strcmp(e->kind, "experience")) continue;
    int related = 0;
    size_t q;
    json_t *r;
    json_array_foreach(json_object_get(e->json, "related"), q, r) {
      size_t z;
      json_t *ci;
      json_array_foreach(contracts, z, ci) if (!strcmp(json_string_value(r), json_string_value(json_object_get(ci, "id")))) related = 1;
    }
    json_t *ap = json_object_get(e->json, "applies_to");
    /* Applies to this contract when it is the very file the experience was
     * written for, or when it still carries the defect the experience
     * repaired (its binding: any later version, any shape or seed of the
     * family), and the repair would change something. */
    int same_contract = ap && !strcmp(json_string_value(json_object_get(ap, "contract")) ?: "", me->id);
    json_t *bd = json_object_get(ap, "binding");
    int applies = same_contract && (!strcmp(json_string_value(json_object_get(ap, "sha256")) ?: "", model_sha) ||
                                    (bd && carries_binding(g.model, bd)));
    if (!related && !applies) continue;
    if (applies) {
      json_array_foreach(json_object_get(e->json, "patch"), q, r) {
        json_t *p = json_deep_copy(r);
        json_object_set_new(p, "why", json_sprintf("experience %s", e->id));
        json_array_append_new(patches, p);
      }
    }
    json_array_append_new(exp, json_pack("{s:s, s:s, s:b}", "id", e->id, "version", e->version, "applied", applies));
  }
  json_array_foreach(json_object_get(task, "patches"), i, k) json_array_append(patches, k);
  json_array_foreach(patches, i, k) apply_patch(g.model, k);
  if (compose_source(&g, contracts, exp, patches, engine_name, &src) != 0) {
    snprintf(err, err_len, "compose: %s", g.err);
    json_decref(contracts);
    json_decref(patches);
    json_decref(exp);
    goto out;
  }
  mi_bb *bb = mi_bb_open(t->run_dir, 0, err, err_len);
  char sha[65];
  if (!bb || mi_bb_put(bb, src.s, src.n, "c", sha) != 0) {
    if (bb) snprintf(err, err_len, "compose: cannot store the source in %s", t->run_dir);
    mi_bb_close(bb);
    json_decref(contracts);
    json_decref(patches);
    json_decref(exp);
    goto out;
  }
  mi_bb_close(bb);
  int lines = 0;
  for (size_t q = 0; q < src.n; q++) lines += src.s[q] == '\n';
  json_t *res = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:i}", "status", "ok", "source", sha, "engine_name",
                          engine_name, "contracts", contracts, "experience", exp, "patches", patches, "lines", lines);
  *result = json_dumps(res, JSON_COMPACT);
  json_decref(res);
  rc = 0;
out:
  free(src.s);
  json_decref(g.model);
  json_decref(g.ops);
  json_decref(g.weights_seen);
  free(g.kind_of);
  json_decref(g.pending);
  json_decref(g.config);
  json_decref(task);
  mi_ckb_close(c);
  return rc;
}

static const mi_agent_iface k_iface = {
    .struct_size = sizeof(mi_agent_iface), .role = "implementer", .strategy = "compose", .run = compose_run};

static int a_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err, size_t err_len) {
  (void)host, (void)opts, (void)err, (void)err_len;
  *ctx = NULL;
  return 0;
}
static const void *a_iface(void *ctx) {
  (void)ctx;
  return &k_iface;
}
static const mi_plugin_desc k_desc = {.abi_major = MI_ABI_MAJOR, .abi_minor = MI_ABI_MINOR,
                                      .struct_size = sizeof(mi_plugin_desc), .kind = MI_PLUGIN_AGENT,
                                      .name = "implementer.compose", .version = "0.1.0",
                                      .description = "deterministic engine source from the CKB's contracts",
                                      .init = a_init, .get_iface = a_iface};
MI_PLUGIN_DEFINE(k_desc)
