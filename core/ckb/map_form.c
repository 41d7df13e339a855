/* The "map" form of an operator contract (core/ckb/map_form.h): the
 * expression, and how each name it reads is indexed, derived from the
 * signature's kinds and shapes. The CKB's checks, the verifier's float64
 * reference and the kernel-pack generator all read an operator through
 * this one function. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ckb/map_form.h"

/* A shape expression with its spaces dropped, so "rows*n" and "rows * n"
 * compare equal. 0, or -1 when it is not a string or too long. */
static int shape_key(const json_t *v, char *out, size_t len) {
  const char *s = json_string_value(v);
  char num[32];
  if (!s && json_is_integer(v)) snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v)), s = num;
  if (!s) return -1;
  size_t k = 0;
  for (; *s; s++)
    if (*s != ' ' && *s != '\t') {
      if (k + 1 >= len) return -1;
      out[k++] = *s;
    }
  out[k] = 0;
  return 0;
}

static const json_t *arg_named(const json_t *args, const char *name, int *index) {
  size_t i;
  json_t *a;
  json_array_foreach(args, i, a) {
    const char *n = json_string_value(json_object_get(a, "name"));
    if (n && !strcmp(n, name)) {
      *index = (int)i;
      return a;
    }
  }
  return NULL;
}

static const char *str_or(const json_t *o, const char *key, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : dflt;
}

/* i64, i32, f32 or f64: an argument an expression may read */
static int is_scalar_kind(const char *k) {
  return !strcmp(k, "i64") || !strcmp(k, "i32") || !strcmp(k, "f32") || !strcmp(k, "f64");
}

/* The role of input `a` against the output's shape keys. -1 when none. */
static int input_role(const json_t *a, int dims, const char *rows_key, const char *n_key,
                      const char *all_key) {
  const json_t *shape = json_object_get(a, "shape");
  char k0[256], k1[256];
  size_t nd = json_array_size(shape);
  if (!json_is_array(shape) || nd < 1 || nd > 2) return -1;
  if (shape_key(json_array_get(shape, 0), k0, sizeof k0) != 0) return -1;
  if (nd == 2) {
    if (shape_key(json_array_get(shape, 1), k1, sizeof k1) != 0) return -1;
    return dims == 2 && !strcmp(k0, rows_key) && !strcmp(k1, n_key) ? MI_MAP_ELEM : -1;
  }
  if (dims == 1) return !strcmp(k0, all_key) ? MI_MAP_ELEM : -1;
  if (!strcmp(k0, n_key)) return MI_MAP_COL;
  if (!strcmp(k0, rows_key)) return MI_MAP_ROW;
  return -1;
}

/* The names of expression e (what = where it sits, for messages): each an
 * argument by its kind and shape, or one of the first n_stats reductions.
 * per_elem: e is evaluated per element (else per row: no per-element or
 * per-column value). 0, or -1 with err. */
static int resolve(const char *id, const char *what, const mi_kexpr *e, const json_t *args, const mi_map_form *f,
                   int n_stats, int per_elem, const char *rows_key, const char *n_key, const char *all_key,
                   mi_map_names *out, char *err, size_t err_len) {
  out->n = mi_kexpr_n_names(e);
  if (out->n > MI_MAP_MAX_NAMES) {
    snprintf(err, err_len, "%s: %s reads %d names (at most %d)", id, what, out->n, MI_MAP_MAX_NAMES);
    return -1;
  }
  for (int k = 0; k < out->n; k++) {
    const char *name = mi_kexpr_name(e, k);
    int role = -1;
    for (int r = 0; r < n_stats && role < 0; r++)
      if (!strcmp(f->reduce[r].name, name)) role = MI_MAP_STAT, out->arg[k] = r;
    if (role == MI_MAP_STAT) {
      out->role[k] = MI_MAP_STAT;
      continue;
    }
    const json_t *a = arg_named(args, name, &out->arg[k]);
    const char *kind = a ? str_or(a, "kind", "") : "";
    if (!a) {
      snprintf(err, err_len, "%s: %s reads '%.64s', which is no argument of the signature%s", id, what, name,
               f->n_reduce ? " nor a reduction before it" : "");
    } else if (is_scalar_kind(kind)) {
      role = MI_MAP_SCALAR;
    } else if (strcmp(kind, "in") || strcmp(str_or(a, "dtype", ""), "f32")) {
      snprintf(err, err_len, "%s: %s reads '%.64s', %s%s (it reads f32 \"in\" buffers and scalars)", id, what, name,
               strcmp(kind, "in") ? "an argument of kind " : "a non-f32 \"in\" buffer", strcmp(kind, "in") ? kind : "");
    } else if ((role = input_role(a, f->dims, rows_key, n_key, all_key)) < 0) {
      snprintf(err, err_len,
               "%s: input '%.64s' has a shape that is neither the output's, [%s] (per column)%s%s%s", id,
               name, n_key, f->dims == 2 ? " nor [" : "", f->dims == 2 ? rows_key : "",
               f->dims == 2 ? "] (per row)" : "");
    } else if (!per_elem && role != MI_MAP_ROW) {
      snprintf(err, err_len, "%s: %s reads '%.64s', a value per element or per column: it is evaluated once per row",
               id, what, name);
      role = -1;
    }
    if (role < 0) return -1;
    out->role[k] = (mi_map_role)role;
  }
  return 0;
}

/* map.reduce: the row reductions, in order. 0, or -1 with err. */
static int parse_reduce(const json_t *op, const char *id, const json_t *args, mi_map_form *f, const char *rows_key,
                        const char *n_key, const char *all_key, char *err, size_t err_len) {
  const json_t *red = json_object_get(json_object_get(op, "map"), "reduce");
  if (!red) return 0;
  if (!json_is_array(red) || json_array_size(red) > MI_MAP_MAX_REDUCE) {
    snprintf(err, err_len, "%s: map.reduce must be an array of at most %d reductions", id, MI_MAP_MAX_REDUCE);
    return -1;
  }
  size_t j;
  json_t *r;
  json_array_foreach(red, j, r) {
    mi_map_reduce *m = &f->reduce[j];
    char what[64], perr[256];
    int dummy;
    m->name = json_string_value(json_object_get(r, "name"));
    const char *sum = json_string_value(json_object_get(r, "sum")), *then = json_string_value(json_object_get(r, "then"));
    if (!m->name || !m->name[0] || !sum || (json_object_get(r, "then") && !then)) {
      snprintf(err, err_len, "%s: map.reduce[%zu] needs a \"name\" and a \"sum\" string (\"then\" a string)", id, j);
      return -1;
    }
    if (arg_named(args, m->name, &dummy)) {
      snprintf(err, err_len, "%s: map.reduce[%zu] is named '%.64s', as an argument of the signature", id, j, m->name);
      return -1;
    }
    for (size_t q = 0; q < j; q++)
      if (!strcmp(f->reduce[q].name, m->name)) {
        snprintf(err, err_len, "%s: map.reduce names '%.64s' twice", id, m->name);
        return -1;
      }
    f->n_reduce = (int)j + 1; /* so mi_map_form_free frees what this one parsed */
    snprintf(what, sizeof what, "map.reduce[%zu].sum", j);
    if (!(m->sum = mi_kexpr_parse(sum, perr, sizeof perr))) {
      snprintf(err, err_len, "%s: %s: %s", id, what, perr);
      return -1;
    }
    if (resolve(id, what, m->sum, args, f, (int)j, 1, rows_key, n_key, all_key, &m->sum_names, err, err_len) != 0)
      return -1;
    if (!then) continue;
    snprintf(what, sizeof what, "map.reduce[%zu].then", j);
    if (!(m->then = mi_kexpr_parse(then, perr, sizeof perr))) {
      snprintf(err, err_len, "%s: %s: %s", id, what, perr);
      return -1;
    }
    /* then reads its own name: the sum */
    if (resolve(id, what, m->then, args, f, (int)j + 1, 0, rows_key, n_key, all_key, &m->then_names, err, err_len) !=
        0)
      return -1;
  }
  return 0;
}

int mi_map_form_parse(const json_t *op, mi_map_form *f, char *err, size_t err_len) {
  memset(f, 0, sizeof *f);
  if (err_len) err[0] = 0;
  const char *id = str_or(op, "id", "an operator");
  const json_t *map = json_object_get(op, "map");
  const json_t *args = json_object_get(json_object_get(op, "signature"), "args");
  f->out = json_string_value(json_object_get(map, "out"));
  const char *expr = json_string_value(json_object_get(map, "expr"));
  if (!json_is_object(map) || !f->out || !expr) {
    snprintf(err, err_len, "%s: no \"map\" with an \"out\" and an \"expr\" string", id);
    return -1;
  }
  if (!json_is_array(args)) {
    snprintf(err, err_len, "%s: no signature.args", id);
    return -1;
  }
  const json_t *out = arg_named(args, f->out, &f->out_arg);
  const json_t *oshape = json_object_get(out, "shape");
  if (!out || strcmp(str_or(out, "kind", ""), "out") || strcmp(str_or(out, "dtype", ""), "f32") ||
      !json_is_array(oshape) || json_array_size(oshape) < 1 || json_array_size(oshape) > 2) {
    snprintf(err, err_len, "%s: map.out '%.64s' must name an f32 \"out\" argument of shape [n] or [rows, n]",
             id, f->out);
    return -1;
  }
  f->dims = (int)json_array_size(oshape);
  char rows_key[256] = "", n_key[256], all_key[256];
  if (shape_key(json_array_get(oshape, f->dims - 1), n_key, sizeof n_key) != 0 ||
      (f->dims == 2 && shape_key(json_array_get(oshape, 0), rows_key, sizeof rows_key) != 0) ||
      shape_key(json_array_get(oshape, 0), all_key, sizeof all_key) != 0) {
    snprintf(err, err_len, "%s: the output's shape must be expressions", id);
    return -1;
  }
  f->n_expr = json_string_value(json_array_get(oshape, f->dims - 1));
  f->rows_expr = f->dims == 2 ? json_string_value(json_array_get(oshape, 0)) : NULL;
  if (!f->n_expr || (f->dims == 2 && !f->rows_expr)) {
    snprintf(err, err_len, "%s: the output's shape must be expressions", id);
    return -1;
  }
  char perr[256];
  if (!(f->expr = mi_kexpr_parse(expr, perr, sizeof perr))) {
    snprintf(err, err_len, "%s: map.expr: %s", id, perr);
    return -1;
  }
  if (parse_reduce(op, id, args, f, rows_key, n_key, all_key, err, err_len) != 0 ||
      resolve(id, "map.expr", f->expr, args, f, f->n_reduce, 1, rows_key, n_key, all_key, &f->names, err, err_len) !=
          0) {
    mi_map_form_free(f);
    return -1;
  }
  return 0;
}

void mi_map_form_free(mi_map_form *f) {
  if (!f) return;
  mi_kexpr_free(f->expr);
  f->expr = NULL;
  f->names.n = 0;
  for (int j = 0; j < f->n_reduce; j++) {
    mi_kexpr_free(f->reduce[j].sum);
    mi_kexpr_free(f->reduce[j].then);
    f->reduce[j].sum = f->reduce[j].then = NULL;
  }
  f->n_reduce = 0;
}

/* The rotary and masked-attention forms' expression (field FIELD of
 * operator id, text): parsed once, each name it reads either the index `i`
 * (name_arg -1; index_what says what it is) or a scalar argument of args
 * (its signature index). The expression, or NULL with one line in err. */
static mi_kexpr *named_index_expr(const char *id, const char *field, const char *text, const char *index,
                                  const char *index_what, const json_t *args, int *n_names, int *name_arg, char *err,
                                  size_t err_len) {
  char perr[256];
  mi_kexpr *x = mi_kexpr_parse(text, perr, sizeof perr);
  if (!x) {
    snprintf(err, err_len, "%s: %s: %s", id, field, perr);
    return NULL;
  }
  *n_names = mi_kexpr_n_names(x);
  for (int k = 0; k < *n_names; k++) {
    const char *name = mi_kexpr_name(x, k);
    if (!strcmp(name, index)) {
      name_arg[k] = -1;
      continue;
    }
    const json_t *a = arg_named(args, name, &name_arg[k]);
    if (!a || !is_scalar_kind(str_or(a, "kind", ""))) {
      snprintf(err, err_len, "%s: %s reads '%.64s', which is neither %s (%s) nor a scalar argument", id, field, name,
               index, index_what);
      mi_kexpr_free(x);
      *n_names = 0;
      return NULL;
    }
  }
  return x;
}

/* named_index_expr with the index named i. */
static mi_kexpr *index_expr(const char *id, const char *field, const char *text, const char *index_what,
                            const json_t *args, int *n_names, int *name_arg, char *err, size_t err_len) {
  return named_index_expr(id, field, text, "i", index_what, args, n_names, name_arg, err, err_len);
}

/* ---- the rotary form ---- */

int mi_rotary_form_parse(const json_t *op, mi_rotary_form *f, char *err, size_t err_len) {
  static const char *const need[MI_ROTARY_ARGS] = {"x", "pos", "T", "H", "tok_stride", "head_stride", "rot_dim"};
  static const char *const kind[MI_ROTARY_ARGS] = {"inout", "in", "i64", "i64", "i64", "i64", "i64"};
  static const char *const dtype[MI_ROTARY_ARGS] = {"f32", "i32", NULL, NULL, NULL, NULL, NULL};
  memset(f, 0, sizeof *f);
  if (err_len) err[0] = 0;
  const char *id = str_or(op, "id", "an operator");
  const json_t *args = json_object_get(json_object_get(op, "signature"), "args");
  const char *freq = json_string_value(json_object_get(json_object_get(op, "rotary"), "freq"));
  if (!freq || !json_is_array(args)) {
    snprintf(err, err_len, "%s: no \"rotary\" with a \"freq\" string, or no signature.args", id);
    return -1;
  }
  for (int k = 0; k < MI_ROTARY_ARGS; k++) {
    const json_t *a = arg_named(args, need[k], &f->arg[k]);
    if (!a || strcmp(str_or(a, "kind", ""), kind[k]) || (dtype[k] && strcmp(str_or(a, "dtype", ""), dtype[k]))) {
      snprintf(err, err_len, "%s: a rotary operator has operator.rope's argument '%s' (%s%s%s)", id, need[k], kind[k],
               dtype[k] ? " " : "", dtype[k] ? dtype[k] : "");
      return -1;
    }
  }
  f->freq = index_expr(id, "rotary.freq", freq, "the pair", args, &f->n_names, f->name_arg, err, err_len);
  if (!f->freq) return -1;
  const json_t *amp = json_object_get(json_object_get(op, "rotary"), "amplitude");
  if (!amp) return 0;
  if (!json_is_string(amp)) {
    snprintf(err, err_len, "%s: rotary.amplitude must be an expression string", id);
    mi_rotary_form_free(f);
    return -1;
  }
  f->amp = index_expr(id, "rotary.amplitude", json_string_value(amp), "the pair", args, &f->n_amp_names,
                      f->amp_name_arg, err, err_len);
  if (f->amp) return 0;
  mi_rotary_form_free(f);
  return -1;
}

void mi_rotary_form_free(mi_rotary_form *f) {
  if (!f) return;
  mi_kexpr_free(f->freq);
  mi_kexpr_free(f->amp);
  f->freq = f->amp = NULL;
  f->n_names = f->n_amp_names = 0;
}

/* ---- the masked-attention form ---- */

/* operator.attention's arguments (ckb/operators/attention.json), which a
 * masked-attention operator's signature starts with: name, kind, dtype,
 * shape (NULL: none). */
static const struct {
  const char *name, *kind, *dtype, *shape[3];
} attn_args[MI_MASKED_ATTN_ARGS] = {
    {"ctx", "ctx", NULL, {NULL}},
    {"s", "stream", NULL, {NULL}},
    {"out", "out", "f32", {"T", "Hq", "D"}},
    {"q", "in", "f32", {"T", "Hq", "D"}},
    {"k_cache", "in", "$kv_dtype", {"pos0+T", "Hkv", "D"}},
    {"v_cache", "in", "$kv_dtype", {"pos0+T", "Hkv", "D"}},
    {"kv_dtype", "dtype", NULL, {NULL}},
    {"T", "i64", NULL, {NULL}},
    {"Hq", "i64", NULL, {NULL}},
    {"Hkv", "i64", NULL, {NULL}},
    {"D", "i64", NULL, {NULL}},
    {"pos0", "i64", NULL, {NULL}},
    {"scale", "f32", NULL, {NULL}},
};

/* Whether argument a is operator.attention's argument k exactly. */
static int attn_arg_ok(const json_t *a, int k) {
  const char *n = json_string_value(json_object_get(a, "name"));
  const char *dt = json_string_value(json_object_get(a, "dtype"));
  const json_t *shape = json_object_get(a, "shape");
  if (!n || strcmp(n, attn_args[k].name) || strcmp(str_or(a, "kind", ""), attn_args[k].kind)) return 0;
  if (!attn_args[k].dtype) return !dt && !shape;
  if (!dt || strcmp(dt, attn_args[k].dtype) || json_array_size(shape) != 3) return 0;
  for (size_t d = 0; d < 3; d++) {
    char key[256];
    if (shape_key(json_array_get(shape, d), key, sizeof key) != 0 || strcmp(key, attn_args[k].shape[d])) return 0;
  }
  return 1;
}

int mi_masked_attention_form_parse(const json_t *op, mi_masked_attention_form *f, char *err, size_t err_len) {
  memset(f, 0, sizeof *f);
  if (err_len) err[0] = 0;
  const char *id = str_or(op, "id", "an operator");
  const json_t *args = json_object_get(json_object_get(op, "signature"), "args");
  const char *fk = json_string_value(json_object_get(json_object_get(op, "masked_attention"), "first_key"));
  if (!fk || !json_is_array(args)) {
    snprintf(err, err_len, "%s: no \"masked_attention\" with a \"first_key\" string, or no signature.args", id);
    return -1;
  }
  for (int k = 0; k < MI_MASKED_ATTN_ARGS; k++)
    if (!attn_arg_ok(json_array_get(args, (size_t)k), k)) {
      snprintf(err, err_len,
               "%s: a masked-attention operator's signature starts with exactly operator.attention's arguments; "
               "argument %d is not '%s' (%s%s%s)",
               id, k, attn_args[k].name, attn_args[k].kind, attn_args[k].dtype ? " " : "",
               attn_args[k].dtype ? attn_args[k].dtype : "");
      return -1;
    }
  for (size_t k = MI_MASKED_ATTN_ARGS; k < json_array_size(args); k++) {
    const json_t *a = json_array_get(args, k);
    if (!is_scalar_kind(str_or(a, "kind", ""))) {
      snprintf(err, err_len,
               "%s: argument '%.64s' after operator.attention's is of kind %s: a masked-attention operator's own "
               "arguments are scalars (i64, i32, f32, f64)",
               id, str_or(a, "name", "?"), str_or(a, "kind", "?"));
      return -1;
    }
  }
  f->first_key = index_expr(id, "masked_attention.first_key", fk, "the query's position", args, &f->n_names,
                            f->name_arg, err, err_len);
  if (!f->first_key) return -1;
  const json_t *score = json_object_get(json_object_get(op, "masked_attention"), "score");
  if (!score) return 0;
  if (!json_is_string(score)) {
    snprintf(err, err_len, "%s: masked_attention.score must be an expression string", id);
    mi_masked_attention_form_free(f);
    return -1;
  }
  f->score = named_index_expr(id, "masked_attention.score", json_string_value(score), "score",
                              "the scaled score scale * q.k", args, &f->n_score_names, f->score_name_arg, err,
                              err_len);
  if (f->score) return 0;
  mi_masked_attention_form_free(f);
  return -1;
}

void mi_masked_attention_form_free(mi_masked_attention_form *f) {
  if (!f) return;
  mi_kexpr_free(f->first_key);
  mi_kexpr_free(f->score);
  f->first_key = f->score = NULL;
  f->n_names = f->n_score_names = 0;
}

int64_t mi_masked_attention_first(const mi_masked_attention_form *f, int64_t i, double *values) {
  for (int k = 0; k < f->n_names; k++)
    if (f->name_arg[k] < 0) values[k] = (double)i;
  const double v = floor(mi_kexpr_eval(f->first_key, values));
  return !(v > 0) ? 0 : v >= (double)i ? i : (int64_t)v;
}

double mi_masked_attention_score(const mi_masked_attention_form *f, double score, double *values) {
  if (!f->score) return score;
  for (int k = 0; k < f->n_score_names; k++)
    if (f->score_name_arg[k] < 0) values[k] = score;
  return mi_kexpr_eval(f->score, values);
}
