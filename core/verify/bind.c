/* See bind.h. */
#define _GNU_SOURCE
#include "core/verify/bind.h"

#include "core/ckb/bind.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ELEMS ((int64_t)1 << 34) /* one buffer: 128 GiB of doubles, past any test shape */

int vf_bind_fail(vf_binder *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, b->err_len, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---------- names in expressions ---------- */

/* the value of runtime quantity k (MI_RT_*) on this call */
static int64_t runtime_value(const vf_binder *b, int k) {
  const int64_t vals[MI_RT_COUNT] = {b->T, b->pos0, b->R, b->r0, b->n_ctx, b->layer};
  return vals[k];
}

/* the value of runtime name n on this call, or -1 when n is none */
static int runtime_name(const vf_binder *b, const char *n, size_t len, int64_t *out) {
  int k = mi_ckb_runtime_name(n, len);
  if (k < 0) return -1;
  *out = runtime_value(b, k);
  return 0;
}

static int lookup_f64(void *user, const char *n, size_t len, double *out) {
  vf_binder *b = user;
  int64_t r;
  if (runtime_name(b, n, len, &r) == 0) return *out = (double)r, 0;
  const json_t *v = mi_ckb_config_value(b->model, b->cfg, n, len);
  if (json_is_number(v)) return *out = json_number_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

static int lookup_int(void *user, const char *n, size_t len, int64_t *out) {
  double d;
  if (lookup_f64(user, n, len, &d) != 0 || d != floor(d) || fabs(d) > 9e15) return -1;
  *out = (int64_t)d;
  return 0;
}

int vf_bind_int(vf_binder *b, const char *s, int64_t *out) {
  char e[300];
  if (!strncmp(s, "int:", 4)) {
    double d;
    if (mi_expr_eval_f64(s + 4, lookup_f64, b, &d, e, sizeof e) != 0) return vf_bind_fail(b, "%s", e);
    if (d != floor(d) || fabs(d) > 9e15)
      return vf_bind_fail(b, "\"%s\" is %.17g on this config, not a whole number", s, d);
    *out = (int64_t)d;
    return 0;
  }
  return mi_expr_eval(s, lookup_int, b, out, e, sizeof e) == 0 ? 0 : vf_bind_fail(b, "%s", e);
}

int vf_bind_real(vf_binder *b, const char *s, double *out) {
  if (!strncmp(s, "config:", 7)) {
    const json_t *v = mi_ckb_config_value(b->model, b->cfg, s + 7, strlen(s + 7));
    if (!json_is_number(v))
      return vf_bind_fail(b, "\"%s\": config.json has no such number and the contract no default", s);
    *out = json_number_value(v);
    return 0;
  }
  if (!strncmp(s, "rsqrt:", 6) || !strncmp(s, "sqrt:", 5)) {
    int64_t x;
    int recip = s[0] == 'r';
    if (vf_bind_int(b, s + (recip ? 6 : 5), &x) != 0) return -1;
    if (x <= 0) return vf_bind_fail(b, "\"%s\" is %lld on this config, not positive", s, (long long)x);
    *out = recip ? 1.0 / sqrt((double)x) : sqrt((double)x);
    return 0;
  }
  char *end;
  *out = strtod(s, &end);
  return *end || end == s ? vf_bind_fail(b, "\"%s\" is not a number", s) : 0;
}

int vf_bind_shape(vf_binder *b, const char *what, const char *name, const json_t *shape, int64_t *n_out,
                  int64_t *row_out) {
  int64_t n = 1, row = 1;
  size_t i;
  json_t *d;
  if (!json_is_array(shape) || !json_array_size(shape))
    return vf_bind_fail(b, "%s %s: no shape in the contract", what, name);
  json_array_foreach(shape, i, d) {
    int64_t x;
    if (json_is_integer(d))
      x = json_integer_value(d);
    else if (!json_is_string(d))
      return vf_bind_fail(b, "%s %s: a dimension is neither a number nor an expression", what, name);
    else if (vf_bind_int(b, json_string_value(d), &x) != 0)
      return -1;
    if (x < 0 || (x && n > MAX_ELEMS / x))
      return vf_bind_fail(b, "%s %s: dimension %lld out of range", what, name, (long long)x);
    n *= x;
    if (i > 0) row *= x;
  }
  *n_out = n;
  *row_out = row;
  return 0;
}

int vf_bind_buffer(vf_binder *b, const json_t *spec, vf_bbuf *out) {
  memset(out, 0, sizeof *out);
  out->name = json_string_value(json_object_get(spec, "name"));
  if (!out->name) return vf_bind_fail(b, "a buffer of the contract has no name");
  const char *dt = json_string_value(json_object_get(spec, "dtype"));
  out->dtype = MI_DTYPE_F32;
  if (dt && vf_dtype_parse(dt, &out->dtype) != 0)
    return vf_bind_fail(b, "buffer %s: unknown dtype \"%s\"", out->name, dt);
  out->input = json_string_value(json_object_get(spec, "input"));
  return vf_bind_shape(b, "buffer", out->name, json_object_get(spec, "shape"), &out->n, &out->row);
}

/* ---------- the contract's sections ---------- */

static const json_t *kind_entry(const json_t *model, const char *kind) {
  return json_object_get(json_object_get(json_object_get(model, "layer_kinds"), "kinds"), kind);
}

const json_t *vf_bind_sequence(const json_t *model, const char *kind) {
  return kind ? json_object_get(kind_entry(model, kind), "sequence") : json_object_get(model, "layer_sequence");
}

void vf_bind_layer_lists(const json_t *model, const char *kind, const json_t *lists[2]) {
  const json_t *src = kind ? kind_entry(model, kind) : model;
  lists[0] = json_object_get(src, "cache");
  lists[1] = json_object_get(src, "state");
  for (int k = 0; k < 2; k++)
    if (!json_is_array(lists[k])) lists[k] = NULL; /* a description in prose only */
}

const char *vf_bind_residual(const mi_ckb *c, const json_t *model) {
  const json_t *pro = json_object_get(model, "prologue");
  size_t np = json_array_size(pro);
  const json_t *last = np ? json_array_get(pro, np - 1) : NULL;
  const char *op = json_string_value(json_object_get(last, "operator"));
  const mi_ckb_entry *oe = op ? mi_ckb_find(c, op) : NULL;
  size_t i;
  json_t *sa;
  /* its operator's first output argument */
  json_array_foreach(oe ? json_object_get(json_object_get(oe->json, "signature"), "args") : NULL, i, sa) {
    const char *k = json_string_value(json_object_get(sa, "kind"));
    if (!k || strcmp(k, "out")) continue;
    const char *s = json_string_value(json_object_get(json_object_get(last, "args"),
                                                      json_string_value(json_object_get(sa, "name")) ?: ""));
    size_t j;
    json_t *bs;
    json_array_foreach(s ? json_object_get(model, "buffers") : NULL, j, bs) {
      const char *n = json_string_value(json_object_get(bs, "name"));
      if (n && strlen(n) == mi_ckb_arg_buffer_name_len(s) && !strncmp(n, s, strlen(n))) return n;
    }
    return NULL;
  }
  return NULL;
}

const json_t *vf_bind_weight_spec(const json_t *model, const char *key) {
  return mi_ckb_named(json_object_get(model, "weights"), "key", key);
}

/* ---------- one argument ---------- */

static int bind_buf(vf_binder *b, const mi_ckb_arg *p, vf_barg *a) {
  int idx = -1;
  for (int k = 0; idx < 0 && k < b->nlbufs; k++)
    if (strlen(b->lbufs[k].name) == p->name_len && !memcmp(b->lbufs[k].name, p->name, p->name_len))
      idx = b->nbufs + k;
  for (int k = 0; idx < 0 && k < b->nbufs; k++)
    if (strlen(b->bufs[k].name) == p->name_len && !memcmp(b->bufs[k].name, p->name, p->name_len)) idx = k;
  if (idx < 0) return vf_bind_fail(b, "\"%s\" names no buffer, cache or state of the contract", p->text);
  const vf_bbuf *buf = idx < b->nbufs ? &b->bufs[idx] : &b->lbufs[idx - b->nbufs];
  int64_t off = 0, x;
  if (p->row >= 0) off = runtime_value(b, p->row) * buf->row; /* rows of the buffer, then elements */
  if (p->elems) {
    if (vf_bind_int(b, p->elems, &x) != 0) return -1;
    off += x;
  }
  if (off < 0 || off > buf->n)
    return vf_bind_fail(b, "\"%s\" lies outside %s (%lld elements)", p->text, buf->name, (long long)buf->n);
  a->what = VB_BUF;
  a->buf = idx;
  a->off = off;
  a->avail = buf->n - off;
  return 0;
}

static int bind_weight(vf_binder *b, const char *key, vf_barg *a) {
  const json_t *spec = mi_ckb_weight_bound(b->model, b->cfg, key, b->err, b->err_len);
  if (!spec) return -1;
  a->wkey = json_string_value(json_object_get(spec, "key"));
  if (vf_bind_shape(b, "weight", a->wkey, json_object_get(spec, "shape"), &a->wn, &a->wrow) != 0) return -1;
  const char *p = strstr(a->wkey, "{i}");
  if (p)
    snprintf(a->wname, sizeof a->wname, "%.*s%lld%s", (int)(p - a->wkey), a->wkey, (long long)b->layer, p + 3);
  else
    snprintf(a->wname, sizeof a->wname, "%s", a->wkey);
  a->what = VB_WEIGHT;
  return 0;
}

/* one argument of the signature (kind: its "kind") as the step binds it:
 * the contract's grammar (core/ckb/bind.h) evaluated on this call */
static int bind_arg(vf_binder *b, const char *kind, const json_t *bv, vf_barg *a) {
  mi_ckb_arg p;
  if (mi_ckb_arg_parse(kind, bv, &p, b->err, b->err_len) != 0) return -1;
  switch (p.form) {
  case MI_ARG_BUFFER: return bind_buf(b, &p, a);
  case MI_ARG_WEIGHT: return bind_weight(b, p.name, a);
  case MI_ARG_INT:
  case MI_ARG_INT_REAL: a->what = VB_INT; return vf_bind_int(b, p.text, &a->i);
  case MI_ARG_CONFIG:
  case MI_ARG_RSQRT:
  case MI_ARG_SQRT:
  case MI_ARG_NUMBER: a->what = VB_REAL; return vf_bind_real(b, p.text, &a->f);
  case MI_ARG_DTYPE_OF:
  case MI_ARG_DTYPE:
    a->what = VB_DTYPE;
    a->dtype_of = p.form == MI_ARG_DTYPE_OF ? p.name : NULL;
    a->dtype = MI_DTYPE_F32;
    return p.form == MI_ARG_DTYPE ? vf_dtype_parse(p.name, &a->dtype) : 0;
  case MI_ARG_NONE: return 0;
  }
  return 0;
}

int vf_bind_step(vf_binder *b, const mi_ckb *c, const json_t *step, vf_bstep *out) {
  memset(out, 0, sizeof *out);
  out->op = json_string_value(json_object_get(step, "operator"));
  out->name = json_string_value(json_object_get(step, "step")) ?: out->op ?: "?";
  const mi_ckb_entry *oe = out->op ? mi_ckb_find(c, out->op) : NULL;
  if (!oe) return vf_bind_fail(b, "step %s: operator %s is not in the CKB", out->name, out->op ?: "(none)");
  out->oe = oe->json;
  out->member = json_string_value(json_object_get(oe->json, "member"));
  out->reference = json_string_value(json_object_get(oe->json, "reference"));
  const json_t *bind = json_object_get(step, "args");
  size_t i;
  json_t *sa;
  json_array_foreach(json_object_get(json_object_get(oe->json, "signature"), "args"), i, sa) {
    if (out->nargs == VF_BIND_MAX_ARGS)
      return vf_bind_fail(b, "%s: more than %d arguments", out->op, VF_BIND_MAX_ARGS);
    vf_barg *a = &out->a[out->nargs++];
    a->name = json_string_value(json_object_get(sa, "name"));
    a->sig_dtype = json_string_value(json_object_get(sa, "dtype"));
    if (!a->name || vf_kind_parse(json_string_value(json_object_get(sa, "kind")) ?: "", &a->kind) != 0)
      return vf_bind_fail(b, "%s: an argument of its signature has no name or an unknown kind", out->op);
    if (a->kind == VF_CTX || a->kind == VF_STREAM) continue;
    if (bind_arg(b, json_string_value(json_object_get(sa, "kind")), json_object_get(bind, a->name), a) != 0) {
      if (strncmp(b->err, "step ", 5)) {
        char e[600];
        snprintf(e, sizeof e, "%s", b->err);
        vf_bind_fail(b, "step %s (%s): %s", out->name, out->op, e);
      }
      return -1;
    }
  }
  return 0;
}

int vf_bind_uses(const json_t *seq, const char *name) {
  size_t i, n = strlen(name);
  json_t *st;
  json_array_foreach(seq, i, st) {
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(st, "args"), k, v) {
      const char *s = json_string_value(v);
      if (s && mi_ckb_arg_buffer_name_len(s) == n && !strncmp(s, name, n)) return 1;
    }
  }
  return 0;
}

const mi_ckb_entry *vf_bind_find_model(const mi_ckb *c, const json_t *cfg, const json_t **layout) {
  const mi_ckb_entry *me = mi_ckb_find_model(c, json_object_get(cfg, "architectures"));
  if (layout) *layout = me ? mi_ckb_model_layout(me->json, cfg) : NULL;
  return me;
}
