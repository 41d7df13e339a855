/* See bind.h. */
#define _GNU_SOURCE
#include "core/ckb/bind.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"

int mi_ckb_runtime_name(const char *s, size_t len) {
  static const char *const names[MI_RT_COUNT] = {"T", "pos0", "R", "r0", "n_ctx", "i"};
  for (int k = 0; k < MI_RT_COUNT; k++)
    if (strlen(names[k]) == len && !memcmp(names[k], s, len)) return k;
  return -1;
}

size_t mi_ckb_arg_buffer_name_len(const char *s) { return strcspn(s, "@+"); }

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

static int is_prefix(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

/* NAME[@ROW][+ELEMS] */
static int parse_buffer(const char *s, mi_ckb_arg *a, char *err, size_t n) {
  a->form = MI_ARG_BUFFER;
  a->name = s;
  a->name_len = mi_ckb_arg_buffer_name_len(s);
  a->row = -1;
  if (!a->name_len) return fail(err, n, "\"%s\" names no buffer", s);
  const char *r = s + a->name_len;
  if (*r == '@') {
    size_t rl = strcspn(r + 1, "+");
    a->row = mi_ckb_runtime_name(r + 1, rl);
    if (a->row != MI_RT_POS0 && a->row != MI_RT_R0) return fail(err, n, "\"%s\": a row is @pos0 or @r0", s);
    r += 1 + rl;
  }
  if (*r == '+') {
    if (!r[1]) return fail(err, n, "\"%s\": no element offset after '+'", s);
    a->elems = r + 1;
  }
  return 0;
}

static int parse_real(const char *s, mi_ckb_arg *a, char *err, size_t n) {
  if (is_prefix(s, "config:")) {
    a->form = MI_ARG_CONFIG;
    a->name = s + 7;
    a->name_len = strlen(a->name);
    return a->name_len ? 0 : fail(err, n, "\"%s\" names no config field", s);
  }
  if (is_prefix(s, "rsqrt:") || is_prefix(s, "sqrt:")) {
    a->form = s[0] == 'r' ? MI_ARG_RSQRT : MI_ARG_SQRT;
    a->expr = strchr(s, ':') + 1;
    return a->expr[0] ? 0 : fail(err, n, "\"%s\" has no expression", s);
  }
  char *end;
  a->form = MI_ARG_NUMBER;
  a->number = strtod(s, &end);
  return *end || end == s ? fail(err, n, "\"%s\" is not a number", s) : 0;
}

static int parse_dtype(const char *s, mi_ckb_arg *a, char *err, size_t n) {
  if (is_prefix(s, "dtype:")) {
    a->form = MI_ARG_DTYPE_OF;
    a->name = s + 6;
    a->name_len = strlen(a->name);
    return a->name_len ? 0 : fail(err, n, "\"%s\" names no argument", s);
  }
  if (strcmp(s, "f32") && strcmp(s, "f16") && strcmp(s, "bf16"))
    return fail(err, n, "\"%s\": a dtype argument is bound as dtype:ARG or f32, f16, bf16", s);
  a->form = MI_ARG_DTYPE;
  a->name = s;
  a->name_len = strlen(s);
  return 0;
}

int mi_ckb_arg_parse(const char *kind, const json_t *v, mi_ckb_arg *a, char *err, size_t n) {
  memset(a, 0, sizeof *a);
  a->row = -1;
  if (!kind) return fail(err, n, "an argument of the signature has no kind");
  if (!strcmp(kind, "ctx") || !strcmp(kind, "stream")) return a->form = MI_ARG_NONE, 0;
  const char *s = json_string_value(v);
  if (json_is_integer(v))
    snprintf(a->num, sizeof a->num, "%lld", (long long)json_integer_value(v)), s = a->num;
  else if (json_is_real(v))
    snprintf(a->num, sizeof a->num, "%.17g", json_real_value(v)), s = a->num;
  if (!s) return fail(err, n, "not bound");
  a->text = s;
  if (!strcmp(kind, "in") || !strcmp(kind, "out") || !strcmp(kind, "inout")) {
    if (!is_prefix(s, "weight:")) return parse_buffer(s, a, err, n);
    a->form = MI_ARG_WEIGHT;
    a->name = s + 7;
    a->name_len = strlen(a->name);
    return a->name_len ? 0 : fail(err, n, "\"%s\" names no weight", s);
  }
  if (!strcmp(kind, "i32") || !strcmp(kind, "i64")) {
    a->form = is_prefix(s, "int:") ? MI_ARG_INT_REAL : MI_ARG_INT;
    a->expr = a->form == MI_ARG_INT_REAL ? s + 4 : s;
    return 0;
  }
  if (!strcmp(kind, "f32") || !strcmp(kind, "f64")) return parse_real(s, a, err, n);
  if (!strcmp(kind, "dtype")) return parse_dtype(s, a, err, n);
  return fail(err, n, "unknown argument kind \"%s\"", kind);
}

const json_t *mi_ckb_weight_bound(const json_t *model, const json_t *cfg, const char *key, char *err,
                                  size_t n) {
  const json_t *weights = json_object_get(model, "weights");
  const json_t *spec = mi_ckb_named(weights, "key", key);
  if (!spec) return fail(err, n, "weight:%s is not in the contract's weight map", key), NULL;
  const char *when = json_string_value(json_object_get(spec, "when"));
  if (mi_ckb_when_holds(model, cfg, when)) return spec;
  const char *fb = json_string_value(json_object_get(spec, "fallback"));
  if (!fb) return fail(err, n, "weight:%s: \"%s\" does not hold and it has no fallback", key, when), NULL;
  const json_t *f = mi_ckb_named(weights, "key", fb);
  if (!f) return fail(err, n, "weight:%s: its fallback %s is not in the contract's weight map", key, fb), NULL;
  return f;
}
