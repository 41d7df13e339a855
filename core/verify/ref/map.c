/* The float64 reference of every operator the CKB states as an expression
 * ("reference": "map", core/ckb/map_form.h): the contract's own expression
 * evaluated per element of the output in float64, each name it reads
 * indexed by its role (one value per element, per column, per row, or a
 * scalar argument). The kernel-pack generator writes its C from the same
 * parsed form, so this reference and the generated kernel cannot disagree
 * about what the operator is, only about how exactly it is computed. */
#include <stdio.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/ckb/map_form.h"
#include "core/verify/verify.h"

/* The call's integer arguments, for the output's shape expressions. */
static int lookup_int(void *user, const char *name, size_t len, int64_t *out) {
  vf_call *c = user;
  for (int i = 0; i < c->nargs; i++) {
    const vf_arg *a = &c->args[i];
    if ((a->kind == VF_I64 || a->kind == VF_I32) && a->name && strlen(a->name) == len &&
        !strncmp(a->name, name, len)) {
      *out = a->i;
      return 0;
    }
  }
  return -1;
}

static int shape_dim(vf_call *c, const char *expr, int64_t *out, char *err, size_t len) {
  char e[256];
  if (mi_expr_eval(expr, lookup_int, c, out, e, sizeof e) != 0) {
    snprintf(err, len, "the output's shape '%s': %s", expr, e);
    return -1;
  }
  if (*out < 0) {
    snprintf(err, len, "the output's shape '%s' is %lld", expr, (long long)*out);
    return -1;
  }
  return 0;
}

static const char *const role_words[] = {"per element", "per column", "per row", "scalar",
                                         "reduction"};

/* The arguments names nm reads, found in the call (in[k]; NULL for a
 * reduction) and their element counts checked against their roles. */
static int bind_names(vf_call *c, const mi_map_names *nm, int64_t rows, int64_t n, vf_arg **in,
                      char *err, size_t len) {
  const json_t *sig = json_object_get(json_object_get(c->op, "signature"), "args");
  for (int k = 0; k < nm->n; k++) {
    in[k] = NULL;
    if (nm->role[k] == MI_MAP_STAT) continue;
    const char *name =
        json_string_value(json_object_get(json_array_get(sig, (size_t)nm->arg[k]), "name"));
    vf_arg *a = in[k] = vf_call_arg(c, name);
    int64_t need = nm->role[k] == MI_MAP_ELEM ? rows * n : nm->role[k] == MI_MAP_COL ? n : rows;
    if (!a || (nm->role[k] != MI_MAP_SCALAR && !a->val)) {
      snprintf(err, len, "the map reference needs the argument '%s'", name ? name : "?");
      return -1;
    }
    if (nm->role[k] == MI_MAP_SCALAR) {
      if (a->kind != VF_I64 && a->kind != VF_I32 && a->kind != VF_F32 && a->kind != VF_F64) {
        snprintf(err, len, "'%s' is read as a scalar but is no scalar argument", name);
        return -1;
      }
    } else if (a->n < need) {
      snprintf(err, len, "'%s' (%s) has %lld elements, the output's shape needs %lld", name,
               role_words[nm->role[k]], (long long)a->n, (long long)need);
      return -1;
    }
  }
  return 0;
}

/* The values of nm's names at element [r, i] (stat: the row's reductions). */
static void load(const mi_map_names *nm, vf_arg *const *in, int64_t r, int64_t i, int64_t n,
                 const double *stat, double *v) {
  for (int k = 0; k < nm->n; k++)
    switch (nm->role[k]) {
    case MI_MAP_ELEM: v[k] = in[k]->val[r * n + i]; break;
    case MI_MAP_COL: v[k] = in[k]->val[i]; break;
    case MI_MAP_ROW: v[k] = in[k]->val[r]; break;
    case MI_MAP_SCALAR:
      v[k] = in[k]->kind == VF_I64 || in[k]->kind == VF_I32 ? (double)in[k]->i : in[k]->f;
      break;
    case MI_MAP_STAT: v[k] = stat[nm->arg[k]]; break;
    }
}

int vf_ref_map(vf_call *c, char *err, size_t len) {
  if (!c->op) {
    snprintf(err, len, "the map reference needs the operator contract (its \"map\" form)");
    return -1;
  }
  mi_map_form f;
  if (mi_map_form_parse(c->op, &f, err, len) != 0) return -1;
  int64_t rows = 1, n = 0;
  vf_arg *out, *in[MI_MAP_MAX_NAMES], *sin[MI_MAP_MAX_REDUCE][MI_MAP_MAX_NAMES],
      *tin[MI_MAP_MAX_REDUCE][MI_MAP_MAX_NAMES];
  int rc = -1;
  if (shape_dim(c, f.n_expr, &n, err, len) != 0 ||
      (f.dims == 2 && shape_dim(c, f.rows_expr, &rows, err, len) != 0))
    goto done;
  if (n && rows > INT64_MAX / n) {
    snprintf(err, len, "the output's shape %lld x %lld overflows", (long long)rows, (long long)n);
    goto done;
  }
  if (!(out = vf_call_arg(c, f.out)) || !out->val) {
    snprintf(err, len, "the map reference needs the output buffer '%s'", f.out);
    goto done;
  }
  if (out->n < rows * n) {
    snprintf(err, len, "the output '%s' has %lld elements, its shape needs %lld", f.out,
             (long long)out->n, (long long)(rows * n));
    goto done;
  }
  if (bind_names(c, &f.names, rows, n, in, err, len) != 0) goto done;
  for (int j = 0; j < f.n_reduce; j++)
    if (bind_names(c, &f.reduce[j].sum_names, rows, n, sin[j], err, len) != 0 ||
        (f.reduce[j].then &&
         bind_names(c, &f.reduce[j].then_names, rows, n, tin[j], err, len) != 0))
      goto done;
  double v[MI_MAP_MAX_NAMES], stat[MI_MAP_MAX_REDUCE];
  /* Row r's reductions first, in order, then its elements: each reads the
   * inputs before the output is written there, so an output that aliases an
   * input of its shape (the contract's in-place cases) is evaluated as if it
   * did not. */
  for (int64_t r = 0; r < rows; r++) {
    for (int j = 0; j < f.n_reduce; j++) {
      const mi_map_reduce *m = &f.reduce[j];
      double acc = 0;
      for (int64_t i = 0; i < n; i++) {
        load(&m->sum_names, sin[j], r, i, n, stat, v);
        acc += mi_kexpr_eval(m->sum, v);
      }
      stat[j] = acc;
      if (m->then) {
        load(&m->then_names, tin[j], r, 0, n, stat, v);
        stat[j] = mi_kexpr_eval(m->then, v);
      }
    }
    for (int64_t i = 0; i < n; i++) {
      load(&f.names, in, r, i, n, stat, v);
      out->val[r * n + i] = mi_kexpr_eval(f.expr, v);
    }
  }
  rc = 0;
done:
  mi_map_form_free(&f);
  return rc;
}
