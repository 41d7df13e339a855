/* What a contract's bindings mean for the engine's C: config values, contract
 * expressions as C (config fields become their macros, this rank's share
 * of a split field under TP; runtime names stay) and their values, through
 * core/ckb's expression library; weight keys as struct fields, buffer
 * shapes as row widths and comments. */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/bind.h"
#include "core/ckb/ckb.h"
#include "plugins/agents/compose/compose.h"

void sp(sb *b, const char *fmt, ...) {
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
const char *flit(double d, char *buf, size_t n) {
  snprintf(buf, n, "%.9g", d);
  if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", n - strlen(buf) - 1);
  strncat(buf, "f", n - strlen(buf) - 1);
  return buf;
}

void upper(char *dst, const char *src, size_t n) {
  size_t i = 0;
  for (; src[i] && i + 1 < n; i++)
    dst[i] = (char)toupper((unsigned char)src[i]);
  dst[i] = 0;
}

const char *dtype_const(const char *d) {
  if (!strcmp(d, "f32")) return "MI_DTYPE_F32";
  if (!strcmp(d, "f16")) return "MI_DTYPE_F16";
  if (!strcmp(d, "bf16")) return "MI_DTYPE_BF16";
  return NULL;
}

const char *weight_dtype_const(const char *d) {
  if (!strcmp(d, "q8_0")) return "MI_DTYPE_Q8_0";
  if (!strcmp(d, "q4_0")) return "MI_DTYPE_Q4_0";
  if (!strcmp(d, "q4_k")) return "MI_DTYPE_Q4_K";
  if (!strcmp(d, "q6_k")) return "MI_DTYPE_Q6_K";
  if (!strcmp(d, "q5_k")) return "MI_DTYPE_Q5_K";
  if (!strcmp(d, "q4_1")) return "MI_DTYPE_Q4_1";
  if (!strcmp(d, "q5_0")) return "MI_DTYPE_Q5_0";
  if (!strcmp(d, "q5_1")) return "MI_DTYPE_Q5_1";
  if (!strcmp(d, "q2_k")) return "MI_DTYPE_Q2_K";
  if (!strcmp(d, "q3_k")) return "MI_DTYPE_Q3_K";
  return dtype_const(d);
}

/* the contract's config entry for a field */
json_t *cfg_entry(gen *g, const char *name, size_t len) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(g->model, "config"), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (n && strlen(n) == len && !strncmp(n, name, len)) return e;
  }
  return NULL;
}

/* where config.json holds a field: its dotted "path" (rope_parameters.rope_theta), else its name */
const char *cfg_where(json_t *entry) {
  const char *path = json_string_value(json_object_get(entry, "path"));
  return path ? path : json_string_value(json_object_get(entry, "name"));
}

/* the value of a config field as the verifier reads it too (core/ckb:
 * config.json's, at its path, else the contract's default) */
json_t *cfg_value(gen *g, json_t *entry) {
  const char *name = json_string_value(json_object_get(entry, "name"));
  return (json_t *)(name ? mi_ckb_config_value(g->model, g->config, name, strlen(name))
                         : json_object_get(entry, "default"));
}

static const char *model_id(gen *g) {
  return json_string_value(json_object_get(g->model, "id"));
}

/* "int:EXPR": a number expression over config fields (numbers, booleans as
 * 0/1) evaluated here, for an integer argument whose value comes from a real
 * field (partial_rotary_factor * head_dim). */
static int real_field(void *user, const char *name, size_t len, double *out) {
  gen *g = user;
  json_t *e = cfg_entry(g, name, len);
  json_t *v = e ? cfg_value(g, e) : NULL;
  if (!json_is_number(v) && !json_is_boolean(v)) {
    snprintf(g->err, sizeof g->err, "\"%.*s\" is not a number config field of %s", (int)len, name,
             model_id(g));
    return -1;
  }
  *out = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
  return 0;
}

/* "int:EXPR" as an integer, or -1 with g->err set */
int int_binding(gen *g, const char *ex, int64_t *val) {
  double d = 0;
  char e2[256];
  g->err[0] = 0;
  if (mi_expr_eval_f64(ex, real_field, g, &d, e2, sizeof e2) != 0) {
    if (!g->err[0])
      snprintf(g->err, sizeof g->err, "expression \"int:%s\" does not parse: %s", ex, e2);
    return -1;
  }
  if (!(fabs(d - nearbyint(d)) < 1e-9)) {
    snprintf(g->err, sizeof g->err,
             "expression \"int:%s\" is %.17g, not an integer, for this config", ex, d);
    return -1;
  }
  *val = (int64_t)nearbyint(d);
  return 0;
}

/* a runtime quantity the engine's forward has in scope (the layer index
 * is not one: a generated engine unrolls nothing by layer) */
static int is_runtime_name(const char *s, size_t n) {
  int k = mi_ckb_runtime_name(s, n);
  return k >= 0 && k != MI_RT_LAYER;
}

/* Is the field shared out over the TP ranks here (the contract's
 * tensor_parallel.split, while a rank's shapes are written)? */
static int split_here(gen *g, const char *name, size_t len) {
  size_t k;
  json_t *f;
  if (g->tp <= 1 || g->nosplit) return 0;
  json_array_foreach(json_object_get(json_object_get(g->model, "tensor_parallel"), "split"), k, f) {
    const char *s = json_string_value(f);
    if (s && strlen(s) == len && !strncmp(s, name, len)) return 1;
  }
  return 0;
}

/* an integer config field's value (this rank's share when split), or -1 with g->err set */
static int int_field(gen *g, const char *name, size_t len, int64_t *out, const char *ex) {
  json_t *e = cfg_entry(g, name, len);
  json_t *v = e ? cfg_value(g, e) : NULL;
  if (!e || !json_is_integer(v)) {
    snprintf(g->err, sizeof g->err,
             "expression \"%s\": \"%.*s\" is not an integer config field of %s", ex, (int)len, name,
             model_id(g));
    return -1;
  }
  *out = json_integer_value(v) / (split_here(g, name, len) ? g->tp : 1);
  return 0;
}

typedef struct expr_ctx {
  gen *g;
  const char *ex;
  int runtime; /* the expression names a runtime quantity: it has no value here */
} expr_ctx;

static int name_as_c(void *user, const char *name, size_t len, char *out, size_t out_len) {
  expr_ctx *x = user;
  int64_t v;
  if (is_runtime_name(name, len)) {
    x->runtime = 1;
    snprintf(out, out_len, "%.*s", (int)len, name);
    return 0;
  }
  if (int_field(x->g, name, len, &v, x->ex)) return -1;
  char m[96], u[96];
  snprintf(m, sizeof m, "%.*s", (int)len, name);
  upper(u, m, sizeof u);
  if (split_here(x->g, name, len))
    snprintf(out, out_len, "(%s / TP)", u);
  else
    snprintf(out, out_len, "%s", u);
  return 0;
}

static int name_value(void *user, const char *name, size_t len, int64_t *out) {
  expr_ctx *x = user;
  return int_field(x->g, name, len, out, x->ex);
}

/* An integer expression as C: config fields become their macros, runtime
 * names stay. Also evaluates it when `val` is given and it names no runtime
 * quantity (then *val is left as it was). 0, or -1 with g->err set. */
int expr_c(gen *g, const char *ex, sb *out, int64_t *val) {
  expr_ctx x = {g, ex, 0};
  char c[2048], e2[512];
  g->err[0] = 0;
  if (mi_expr_c(ex, name_as_c, &x, c, sizeof c, e2, sizeof e2) != 0) {
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "%s", e2);
    return -1;
  }
  if (val && !x.runtime && mi_expr_eval(ex, name_value, &x, val, e2, sizeof e2) != 0) {
    snprintf(g->err, sizeof g->err, "expression \"%s\": %s", ex, e2);
    return -1;
  }
  sp(out, "%s", c);
  return 0;
}

/* the value of an expression over config fields, 0 when it has none */
int64_t expr_value(gen *g, const char *ex) {
  int64_t v = 0;
  sb t = {0};
  if (expr_c(g, ex ? ex : "", &t, &v)) v = 0;
  free(t.s);
  return v;
}

json_t *find_named(json_t *arr, const char *name, size_t n) {
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    const char *s = json_string_value(json_object_get(e, "name"));
    if (s && strlen(s) == n && !strncmp(s, name, n)) return e;
  }
  return NULL;
}

/* row width of a buffer: the product of its shape after the first dim, as C */
int row_width(gen *g, json_t *buf, sb *out) {
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

void shape_comment(gen *g, json_t *buf, sb *out, int T_is_batch) {
  json_t *shape = json_object_get(buf, "shape");
  sp(out, "[");
  for (size_t i = 0; i < json_array_size(shape); i++) {
    const char *d = json_string_value(json_array_get(shape, i));
    sb e = {0};
    if (!d) { /* a literal dimension ([C, 1, K]) */
      sp(out, "%s%lld", i ? ", " : "", (long long)json_integer_value(json_array_get(shape, i)));
      continue;
    }
    if (!strcmp(d, "T") && T_is_batch)
      sp(&e, "BATCH");
    else if (!strcmp(d, "R"))
      sp(&e, "LOGIT_ROWS");
    else
      expr_c(g, d, &e, NULL);
    sp(out, "%s%s", i ? ", " : "", e.s ? e.s : d);
    free(e.s);
  }
  sp(out, "]");
}

/* "model.layers.{i}.self_attn.q_proj.weight" -> "self_attn_q_proj" */
void weight_field(const char *key, char *out, size_t n) {
  const char *k = key;
  if (!strncmp(k, "model.layers.{i}.", 17))
    k += 17;
  else if (!strncmp(k, "model.", 6))
    k += 6;
  size_t len = strlen(k);
  if (len > 7 && !strcmp(k + len - 7, ".weight")) len -= 7;
  size_t j = 0;
  for (size_t i = 0; i < len && j + 1 < n; i++)
    out[j++] = k[i] == '.' ? '_' : k[i];
  out[j] = 0;
}

json_t *weight_entry(gen *g, const char *key) {
  return mi_ckb_named(json_object_get(g->model, "weights"), "key", key);
}

/* Follows a weight's "when"/"fallback" (core/ckb's rule, the verifier's
 * too): the key actually bound, or NULL with g->err set. */
const char *bound_key(gen *g, const char *key) {
  const json_t *w = mi_ckb_weight_bound(g->model, g->config, key, g->err, sizeof g->err);
  return w ? json_string_value(json_object_get(w, "key")) : NULL;
}

int64_t shape_numel(gen *g, json_t *shape) {
  int64_t n = 1;
  for (size_t i = 0; i < json_array_size(shape); i++) {
    json_t *d = json_array_get(shape, i);
    n *= json_is_integer(d) ? json_integer_value(d) : expr_value(g, json_string_value(d));
  }
  return n;
}

/* a weight some step reads as a vector (widened to f32 at load), not a matrix */
int weight_is_vector(gen *g, const char *key) {
  json_t *seen = json_object_get(g->weights_seen, key);
  return seen && !strcmp(json_string_value(json_object_get(seen, "kind")), "vector");
}
