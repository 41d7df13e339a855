/* Stage 1, one operator unit: for every case of an operator contract (and
 * every dtype variant the platform lists), draw sizes and inputs from the
 * contract's generators with a per-case seed, call the kernel through libffi
 * with the signature the contract declares, and compare its outputs with
 * the float64 reference the contract names.
 *
 * Runs inside a forked child (verify_child.c): it reports through event
 * lines on result_fd, a case_start before each kernel call, so a crash is
 * pinned to its case. */
#define _GNU_SOURCE
#include <ffi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/runtime/rng.h"
#include "core/verify/verify.h"

#define MAX_ARGS 32
#define GUARD 64 /* bytes after every buffer: a kernel that writes past its end is caught */
#define GUARD_BYTE 0xA5


uint64_t vf_case_seed(uint64_t master, const char *op_id, int case_index, int variant) {
  uint64_t h = mi_fnv1a64(op_id);
  uint64_t s = master ^ h ^ ((uint64_t)(case_index + 1) * 0xD1B54A32D192ED03ull) ^
               ((uint64_t)(variant + 1) * 0xC2B2AE3D27D4EB4Full);
  return mi_rng_next(&s);
}

/* ---------- events ---------- */

void vf_emit(int fd, json_t *ev) {
  char *s = json_dumps(ev, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(ev);
  if (!s) return;
  size_t n = strlen(s);
  s[n] = '\n'; /* replaces the NUL: written as one line */
  const char *p = s;
  size_t left = n + 1;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) break;
    p += w;
    left -= (size_t)w;
  }
  free(s);
}

/* jansson cannot hold Inf/NaN: those become strings. */
static json_t *jnum(double x) {
  if (isnan(x)) return json_string("nan");
  if (isinf(x)) return json_string(x > 0 ? "inf" : "-inf");
  return json_real(x);
}

/* ---------- one case ---------- */

typedef struct unit {
  const mi_platform_iface *iface;
  void *ctx;
  const vf_unit_opts *o;
  const char *op_id, *member, *compare;
  json_t *op;
  void *fn;
  vf_ref_fn ref;
  int nargs;
  json_t *jargs[MAX_ARGS];
  vf_arg a[MAX_ARGS];
  int resolved[MAX_ARGS];
} unit;

static int lookup_int(void *user, const char *name, size_t len, int64_t *out) {
  unit *u = user;
  for (int i = 0; i < u->nargs; i++)
    if (u->resolved[i] && strlen(u->a[i].name) == len && !strncmp(u->a[i].name, name, len) &&
        (u->a[i].kind == VF_I64 || u->a[i].kind == VF_I32)) {
      *out = u->a[i].i;
      return 0;
    }
  return -1;
}

static double round_to(mi_dtype t, double v) {
  switch (t) {
  case MI_DTYPE_F32: return (double)(float)v;
  case MI_DTYPE_F16: return (double)mi_f16_to_f32(mi_f32_to_f16((float)v));
  case MI_DTYPE_BF16: return (double)mi_bf16_to_f32(mi_f32_to_bf16((float)v));
  case MI_DTYPE_I32: return (double)(int32_t)llround(v);
  case MI_DTYPE_I64: return (double)(int64_t)llround(v);
  case MI_DTYPE_U8: return (double)(uint8_t)llround(v);
  default: return v;
  }
}

static void encode(mi_dtype t, const double *v, int64_t n, unsigned char *dst) {
  for (int64_t i = 0; i < n; i++) {
    switch (t) {
    case MI_DTYPE_F32: ((float *)dst)[i] = (float)v[i]; break;
    case MI_DTYPE_F16: ((uint16_t *)dst)[i] = mi_f32_to_f16((float)v[i]); break;
    case MI_DTYPE_BF16: ((uint16_t *)dst)[i] = mi_f32_to_bf16((float)v[i]); break;
    case MI_DTYPE_I32: ((int32_t *)dst)[i] = (int32_t)v[i]; break;
    case MI_DTYPE_I64: ((int64_t *)dst)[i] = (int64_t)v[i]; break;
    case MI_DTYPE_U8: dst[i] = (unsigned char)v[i]; break;
    default: break;
    }
  }
}

static double decode_one(mi_dtype t, const unsigned char *src, int64_t i) {
  switch (t) {
  case MI_DTYPE_F32: return ((const float *)src)[i];
  case MI_DTYPE_F16: return mi_f16_to_f32(((const uint16_t *)src)[i]);
  case MI_DTYPE_BF16: return mi_bf16_to_f32(((const uint16_t *)src)[i]);
  case MI_DTYPE_I32: return ((const int32_t *)src)[i];
  case MI_DTYPE_I64: return (double)((const int64_t *)src)[i];
  case MI_DTYPE_U8: return src[i];
  default: return NAN;
  }
}

/* A generator bound: a number or an expression over the case's integers. */
static int bound(unit *u, json_t *v, double dflt, double *out, char *err, size_t len) {
  if (!v) {
    *out = dflt;
    return 0;
  }
  if (json_is_number(v)) {
    *out = json_number_value(v);
    return 0;
  }
  int64_t x;
  if (!json_is_string(v) || mi_expr_eval(json_string_value(v), lookup_int, u, &x, err, len) != 0)
    return -1;
  *out = (double)x;
  return 0;
}

static int generate(unit *u, vf_arg *a, json_t *gen, uint64_t *rng, char *err, size_t len) {
  const char *dist = json_string_value(json_object_get(gen, "dist"));
  if (!dist) {
    snprintf(err, len, "no generator for input '%s'", a->name);
    return -1;
  }
  double mean = json_number_value(json_object_get(gen, "mean"));
  json_t *sd = json_object_get(gen, "std");
  double std = sd ? json_number_value(sd) : 1.0, lo, hi;
  if (bound(u, json_object_get(gen, "lo"), 0, &lo, err, len) ||
      bound(u, json_object_get(gen, "hi"), 1, &hi, err, len))
    return -1;
  for (int64_t i = 0; i < a->n; i++) {
    double v;
    if (!strcmp(dist, "normal")) v = mean + std * mi_rng_normal(rng);
    else if (!strcmp(dist, "uniform")) v = lo + (hi - lo) * mi_rng_u01(rng);
    else if (!strcmp(dist, "int_uniform")) v = (double)mi_rng_int(rng, (int64_t)lo, (int64_t)hi);
    else {
      snprintf(err, len, "unknown distribution '%s' for input '%s'", dist, a->name);
      return -1;
    }
    a->val[i] = round_to(a->dtype, v);
  }
  return 0;
}

/* "rows=7 dim=33 eps=1e-06": the scalars of a case, in signature order. */
static void params_text(unit *u, char *buf, size_t n) {
  buf[0] = 0;
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    size_t l = strlen(buf);
    if (a->kind == VF_I64 || a->kind == VF_I32)
      snprintf(buf + l, n - l, "%s%s=%lld", l ? " " : "", a->name, (long long)a->i);
    else if (a->kind == VF_F32 || a->kind == VF_F64)
      snprintf(buf + l, n - l, "%s%s=%g", l ? " " : "", a->name, a->f);
  }
}

static json_t *params_json(unit *u) {
  json_t *p = json_object();
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    if (a->kind == VF_I64 || a->kind == VF_I32) json_object_set_new(p, a->name, json_integer(a->i));
    else if (a->kind == VF_F32 || a->kind == VF_F64) json_object_set_new(p, a->name, jnum(a->f));
    else if (a->kind == VF_DTYPE) json_object_set_new(p, a->name, json_string(mi_dtype_name(a->dtype)));
  }
  return p;
}

typedef struct dev_buf {
  mi_buffer *b;
  void *dev;
  unsigned char *host; /* bytes + GUARD */
  size_t bytes;
} dev_buf;

/* Sets the scalar arguments of a case: fixed values and ranges first, then
 * expressions, which may use any other integer of the case. */
static int resolve_scalars(unit *u, json_t *cs, mi_dtype variant, uint64_t *rng, char *err,
                           size_t len) {
  int pending = 0;
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    u->resolved[i] = a->kind == VF_CTX || a->kind == VF_STREAM || a->kind == VF_IN ||
                     a->kind == VF_OUT || a->kind == VF_INOUT;
    if (u->resolved[i]) continue;
    json_t *v = json_object_get(cs, a->name);
    if (a->kind == VF_DTYPE) {
      a->dtype = variant;
      u->resolved[i] = 1;
    } else if (!v) {
      snprintf(err, len, "case sets no value for '%s'", a->name);
      return -1;
    } else if (a->kind == VF_F32 || a->kind == VF_F64) {
      if (!json_is_number(v)) {
        snprintf(err, len, "'%s' must be a number", a->name);
        return -1;
      }
      a->f = a->kind == VF_F32 ? (double)(float)json_number_value(v) : json_number_value(v);
      u->resolved[i] = 1;
    } else if (json_is_integer(v)) {
      a->i = json_integer_value(v);
      u->resolved[i] = 1;
    } else if (json_is_object(v)) {
      json_t *r = json_object_get(v, "range");
      a->i = mi_rng_int(rng, json_integer_value(json_array_get(r, 0)), json_integer_value(json_array_get(r, 1)));
      u->resolved[i] = 1;
    } else if (json_is_string(v)) {
      pending++;
    } else {
      snprintf(err, len, "'%s' has an unusable value", a->name);
      return -1;
    }
  }
  while (pending) {
    int progress = 0;
    for (int i = 0; i < u->nargs; i++) {
      if (u->resolved[i]) continue;
      int64_t x;
      char e2[200];
      if (mi_expr_eval(json_string_value(json_object_get(cs, u->a[i].name)), lookup_int, u, &x, e2,
                       sizeof e2) == 0) {
        u->a[i].i = x;
        u->resolved[i] = 1;
        pending--;
        progress = 1;
      } else if (!progress && pending == 1) {
        snprintf(err, len, "'%s': %s", u->a[i].name, e2);
        return -1;
      }
    }
    if (!progress) {
      snprintf(err, len, "the case's expressions depend on each other or on unknown names");
      return -1;
    }
  }
  return 0;
}

/* Compares outputs; fills res and a one-line message. Returns 1 on pass. */
static int compare(unit *u, dev_buf *db, double tol, json_t *res, char *msg, size_t mlen,
                   const char *where) {
  int pass = 1;
  double worst_rel = 0, worst_abs = 0;
  json_t *outs = json_array();
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    if (a->kind != VF_OUT && a->kind != VF_INOUT) continue;
    int guard_ok = 1;
    for (size_t g = 0; g < GUARD; g++) guard_ok &= db[i].host[db[i].bytes + g] == GUARD_BYTE;
    double maxabs = 0, refmax = 0;
    int64_t at = -1, nonfinite = 0, mismatches = 0, first_bad = -1;
    for (int64_t k = 0; k < a->n; k++) {
      double want = a->val[k], got = decode_one(a->dtype, db[i].host, k);
      if (fabs(want) > refmax) refmax = fabs(want);
      if (!isfinite(got) && isfinite(want)) {
        if (!nonfinite++) first_bad = k;
        continue;
      }
      if (got != want && !mismatches++ && first_bad < 0) first_bad = k;
      double d = fabs(got - want);
      if (d > maxabs || at < 0) maxabs = d, at = k;
    }
    double rel = nonfinite ? INFINITY : maxabs / (refmax > 0 ? refmax : 1.0);
    if (!strcmp(u->compare, "exact")) rel = (mismatches || nonfinite) ? INFINITY : 0;
    int ok = guard_ok && rel <= tol;
    int64_t show = nonfinite || !strcmp(u->compare, "exact") ? first_bad : at;
    double got_s = show >= 0 ? decode_one(a->dtype, db[i].host, show) : 0;
    double want_s = show >= 0 ? a->val[show] : 0;
    json_t *o = json_pack("{s:s, s:o, s:o, s:I, s:b}", "arg", a->name, "max_abs_err",
                          jnum(nonfinite ? INFINITY : maxabs), "max_rel_err", jnum(rel),
                          "nonfinite", (json_int_t)nonfinite, "guard_intact", guard_ok);
    if (!strcmp(u->compare, "exact")) json_object_set_new(o, "mismatches", json_integer(mismatches));
    if (show >= 0)
      json_object_set_new(o, "worst", json_pack("{s:I, s:o, s:o}", "index", (json_int_t)show, "got",
                                                jnum(got_s), "want", jnum(want_s)));
    json_array_append_new(outs, o);
    if (rel > worst_rel || isnan(rel)) worst_rel = rel;
    if (maxabs > worst_abs) worst_abs = maxabs;
    if (!ok && pass) {
      pass = 0;
      if (!guard_ok)
        snprintf(msg, mlen, "%s: wrote past the end of '%s' (%lld elements) %s", u->member, a->name,
                 (long long)a->n, where);
      else if (nonfinite)
        snprintf(msg, mlen, "%s: %lld NaN/Inf values in '%s' (first %s[%lld]: got %g, want %g) %s",
                 u->member, (long long)nonfinite, a->name, a->name, (long long)show, got_s, want_s,
                 where);
      else if (!strcmp(u->compare, "exact"))
        snprintf(msg, mlen, "%s: %lld of %lld elements of '%s' differ (first %s[%lld]: got %g, want %g) %s",
                 u->member, (long long)mismatches, (long long)a->n, a->name, a->name,
                 (long long)show, got_s, want_s, where);
      else
        snprintf(msg, mlen, "%s: max rel error %.2g > tol %g %s (max abs %.2g at %s[%lld]: got %.6g, want %.6g)",
                 u->member, rel, tol, where, maxabs, a->name, (long long)show, got_s, want_s);
    }
  }
  json_object_set_new(res, "outputs", outs);
  json_object_set_new(res, "max_abs_err", jnum(worst_abs));
  json_object_set_new(res, "max_rel_err", jnum(worst_rel));
  return pass;
}

static int run_case(unit *u, json_t *cs, int ci, int vi, mi_dtype variant, double tol) {
  const vf_unit_opts *o = u->o;
  const char *cname = json_string_value(json_object_get(cs, "name"));
  uint64_t seed = vf_case_seed(o->seed, u->op_id, ci, vi), rng = seed;
  char err[512] = "", msg[1024] = "", params[400], where[600];
  dev_buf db[MAX_ARGS];
  memset(db, 0, sizeof db);
  for (int i = 0; i < u->nargs; i++) u->a[i].val = NULL, u->a[i].shape = NULL;
  char seed_hex[24];
  snprintf(seed_hex, sizeof seed_hex, "0x%016llx", (unsigned long long)seed);
  json_t *res = json_pack("{s:s, s:s, s:i, s:s, s:s, s:f}", "event", "case_end", "case",
                          cname ? cname : "?", "index", ci, "dtype", mi_dtype_name(variant), "seed",
                          seed_hex, "tol", tol);
  int pass = 0;
  const char *verdict = "FAIL";

  if (resolve_scalars(u, cs, variant, &rng, err, sizeof err) != 0) goto contract_error;
  params_text(u, params, sizeof params);
  snprintf(where, sizeof where, "on %s (%s, case %s)", params, mi_dtype_name(variant), cname);
  json_object_set_new(res, "params", params_json(u));
  size_t ci2;
  json_t *cexpr;
  json_array_foreach(json_object_get(u->op, "constraints"), ci2, cexpr) {
    int64_t ok = 0;
    if (mi_expr_eval(json_string_value(cexpr), lookup_int, u, &ok, err, sizeof err) != 0) goto contract_error;
    if (!ok) {
      snprintf(err, sizeof err, "case violates constraint '%s' with %s", json_string_value(cexpr), params);
      goto contract_error;
    }
  }

  /* Buffers: shape, dtype, values; inputs generated, outputs poisoned. */
  json_t *cgen = json_object_get(cs, "inputs"), *ogen = json_object_get(u->op, "inputs");
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    if (a->kind != VF_IN && a->kind != VF_OUT && a->kind != VF_INOUT) continue;
    const char *dt = json_string_value(json_object_get(u->jargs[i], "dtype"));
    if (dt && dt[0] == '$') {
      for (int j = 0; j < u->nargs; j++)
        if (u->a[j].kind == VF_DTYPE && !strcmp(u->a[j].name, dt + 1)) a->dtype = u->a[j].dtype;
    } else if (!dt || vf_dtype_parse(dt, &a->dtype) != 0) {
      snprintf(err, sizeof err, "argument '%s' has no usable dtype", a->name);
      goto contract_error;
    }
    json_t *shape = json_object_get(u->jargs[i], "shape");
    a->ndim = (int)json_array_size(shape);
    a->n = 1;
    size_t k;
    json_t *d;
    json_array_foreach(shape, k, d) {
      int64_t x;
      if (json_is_integer(d)) x = json_integer_value(d);
      else if (mi_expr_eval(json_string_value(d), lookup_int, u, &x, err, sizeof err) != 0) goto contract_error;
      if (x < 0 || (x && a->n > INT64_MAX / 4 / x)) {
        snprintf(err, sizeof err, "argument '%s': bad dimension %lld", a->name, (long long)x);
        goto contract_error;
      }
      a->n *= x;
    }
    a->val = calloc((size_t)(a->n ? a->n : 1), sizeof(double));
    db[i].bytes = (size_t)a->n * mi_dtype_size(a->dtype);
    db[i].host = malloc(db[i].bytes + GUARD);
    if (!a->val || !db[i].host) {
      snprintf(err, sizeof err, "out of memory for '%s' (%lld elements)", a->name, (long long)a->n);
      goto contract_error;
    }
    memset(db[i].host + db[i].bytes, GUARD_BYTE, GUARD);
    if (a->kind == VF_OUT) {
      /* Poison: an element the kernel never writes shows up as NaN / a wild int. */
      for (int64_t e = 0; e < a->n; e++) a->val[e] = a->dtype == MI_DTYPE_I32 ? -123456789.0 : NAN;
    } else {
      json_t *gen = json_object_get(cgen, a->name);
      if (!gen) gen = json_object_get(ogen, a->name);
      if (generate(u, a, gen, &rng, err, sizeof err) != 0) goto contract_error;
    }
    encode(a->dtype, a->val, a->n, db[i].host);
    if (u->iface->buffer_alloc(u->ctx, db[i].bytes + GUARD, &db[i].b) != 0 || !db[i].b) {
      snprintf(msg, sizeof msg, "%s: buffer_alloc(%zu) failed: %s %s", u->member, db[i].bytes + GUARD,
               u->iface->last_error ? u->iface->last_error(u->ctx) : "", where);
      goto done;
    }
    db[i].dev = u->iface->buffer_ptr(u->ctx, db[i].b);
    if (u->iface->memcpy_h2d(u->ctx, NULL, db[i].dev, db[i].host, db[i].bytes + GUARD) != 0) {
      snprintf(msg, sizeof msg, "%s: memcpy_h2d failed for '%s' %s", u->member, a->name, where);
      goto done;
    }
  }

  /* In-place cases: an output given the device address of an input (the
   * contract allows e.g. y == x); the result is read back from there. */
  const char *ak;
  json_t *av;
  json_object_foreach(json_object_get(cs, "alias"), ak, av) {
    int oi = -1, ii = -1;
    for (int i = 0; i < u->nargs; i++) {
      if (!strcmp(u->a[i].name, ak)) oi = i;
      if (json_is_string(av) && !strcmp(u->a[i].name, json_string_value(av))) ii = i;
    }
    if (oi < 0 || ii < 0 || u->a[oi].kind != VF_OUT || u->a[ii].kind != VF_IN ||
        u->a[oi].dtype != u->a[ii].dtype || u->a[oi].n != u->a[ii].n) {
      snprintf(err, sizeof err, "alias '%s' -> '%s' needs an out and an in buffer of equal dtype and size",
               ak, json_is_string(av) ? json_string_value(av) : "?");
      goto contract_error;
    }
    db[oi].dev = db[ii].dev;
    size_t l = strlen(where);
    if (l > 1 && where[l - 1] == ')')
      snprintf(where + l - 1, sizeof where - (l - 1), ", %s aliases %s)", ak, json_string_value(av));
  }

  /* The call, built from the contract's argument kinds. */
  ffi_type *types[MAX_ARGS];
  void *values[MAX_ARGS];
  union {
    void *p;
    int64_t i64;
    int32_t i32;
    float f32;
    double f64;
    int dt;
  } store[MAX_ARGS];
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    switch (a->kind) {
    case VF_CTX: store[i].p = u->ctx, types[i] = &ffi_type_pointer; break;
    case VF_STREAM: store[i].p = NULL, types[i] = &ffi_type_pointer; break;
    case VF_IN:
    case VF_OUT:
    case VF_INOUT: store[i].p = db[i].dev, types[i] = &ffi_type_pointer; break;
    case VF_I64: store[i].i64 = a->i, types[i] = &ffi_type_sint64; break;
    case VF_I32: store[i].i32 = (int32_t)a->i, types[i] = &ffi_type_sint32; break;
    case VF_F32: store[i].f32 = (float)a->f, types[i] = &ffi_type_float; break;
    case VF_F64: store[i].f64 = a->f, types[i] = &ffi_type_double; break;
    case VF_DTYPE: store[i].dt = (int)a->dtype, types[i] = &ffi_type_sint; break; /* C enum: int */
    }
    values[i] = &store[i];
  }
  ffi_cif cif;
  if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, (unsigned)u->nargs, &ffi_type_sint, types) != FFI_OK) {
    snprintf(err, sizeof err, "ffi_prep_cif failed for the declared signature");
    goto contract_error;
  }
  json_t *start = json_pack("{s:s, s:s, s:i, s:s, s:s, s:O}", "event", "case_start", "case",
                            cname ? cname : "?", "index", ci, "dtype", mi_dtype_name(variant),
                            "seed", seed_hex, "params", json_object_get(res, "params"));
  json_object_set_new(start, "where", json_string(where));
  vf_emit(o->result_fd, start);
  ffi_arg rc = 0;
  ffi_call(&cif, FFI_FN(u->fn), &rc, values);
  json_object_set_new(res, "rc", json_integer((int)rc));
  if ((int)rc != 0) {
    snprintf(msg, sizeof msg, "%s: kernel returned %d (%s) %s", u->member, (int)rc,
             u->iface->last_error ? u->iface->last_error(u->ctx) : "no message", where);
    goto done;
  }
  if (u->iface->stream_sync) u->iface->stream_sync(u->ctx, NULL);
  for (int i = 0; i < u->nargs; i++)
    if (u->a[i].kind == VF_OUT || u->a[i].kind == VF_INOUT)
      if (u->iface->memcpy_d2h(u->ctx, NULL, db[i].host, db[i].dev, db[i].bytes + GUARD) != 0) {
        snprintf(msg, sizeof msg, "%s: memcpy_d2h failed for '%s' %s", u->member, u->a[i].name, where);
        goto done;
      }

  vf_call call = {u->a, u->nargs};
  if (u->ref(&call, err, sizeof err) != 0) goto contract_error;
  pass = compare(u, db, tol, res, msg, sizeof msg, where);
  verdict = pass ? "PASS" : "FAIL";
  goto done;

contract_error:
  /* The contract itself cannot be run: a FAIL too, but named as such. */
  snprintf(msg, sizeof msg, "%s: contract error in case %s: %s", u->member, cname ? cname : "?", err);
  verdict = "ERROR";
done:
  json_object_set_new(res, "verdict", json_string(verdict));
  if (!pass) json_object_set_new(res, "message", json_string(msg));
  vf_emit(o->result_fd, res);
  for (int i = 0; i < u->nargs; i++) {
    if (db[i].b) u->iface->buffer_free(u->ctx, db[i].b);
    free(db[i].host);
    free(u->a[i].val);
    u->a[i].val = NULL;
  }
  return pass;
}

static int str_in(json_t *arr, const char *s) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), s)) return 1;
  return 0;
}

static int unit_error(const vf_unit_opts *o, const char *fmt, const char *a, const char *b) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a, b);
  vf_emit(o->result_fd, json_pack("{s:s, s:s}", "event", "error", "message", msg));
  return 1;
}

int vf_run_operator(const mi_platform_iface *iface, void *ctx, const vf_unit_opts *o) {
  unit u;
  memset(&u, 0, sizeof u);
  u.iface = iface;
  u.ctx = ctx;
  u.o = o;
  u.op = o->operator_entry;
  u.op_id = json_string_value(json_object_get(u.op, "id"));
  u.member = json_string_value(json_object_get(u.op, "member"));
  u.compare = json_string_value(json_object_get(u.op, "compare"));
  if (!u.compare) u.compare = "max_rel";
  const char *refname = json_string_value(json_object_get(u.op, "reference"));
  if (!u.op_id || !u.member) return unit_error(o, "operator contract without id or member%s%s", "", "");
  if (!(u.ref = vf_ref_find(refname)))
    return unit_error(o, "%s: the verifier has no reference named '%s'", u.op_id, refname ? refname : "");
  if (!(u.fn = vf_member_fn(iface, u.member)))
    return unit_error(o, "%s: the platform does not provide '%s' (NULL or beyond its struct_size)",
                      u.op_id, u.member);
  if (!iface->buffer_alloc || !iface->buffer_ptr || !iface->buffer_free || !iface->memcpy_h2d ||
      !iface->memcpy_d2h)
    return unit_error(o, "%s: the platform lacks buffer_alloc/ptr/free or memcpy_h2d/d2h%s", u.op_id, "");

  json_t *args = json_object_get(json_object_get(u.op, "signature"), "args");
  if (json_array_size(args) > MAX_ARGS) return unit_error(o, "%s: more than 32 arguments%s", u.op_id, "");
  size_t i;
  json_t *ja;
  int dtype_arg = -1;
  json_array_foreach(args, i, ja) {
    u.jargs[i] = ja;
    u.a[i].name = json_string_value(json_object_get(ja, "name"));
    if (!u.a[i].name || vf_kind_parse(json_string_value(json_object_get(ja, "kind")), &u.a[i].kind))
      return unit_error(o, "%s: argument without a name or a known kind%s", u.op_id, "");
    if (u.a[i].kind == VF_DTYPE && dtype_arg < 0) dtype_arg = (int)i;
  }
  u.nargs = (int)json_array_size(args);

  json_t *tol = json_object_get(u.op, "tolerance");
  json_t *plat_dtypes = json_object_get(o->platform_kernel, "dtypes");
  int fails = 0, runs = 0;
  json_t *cs;
  json_array_foreach(json_object_get(u.op, "cases"), i, cs) {
    json_t *dv = dtype_arg >= 0 ? json_object_get(cs, u.a[dtype_arg].name) : NULL;
    size_t nv = json_is_array(dv) ? json_array_size(dv) : 1;
    for (size_t v = 0; v < nv; v++) {
      const char *dname = dtype_arg < 0 ? "f32"
                          : json_is_array(dv) ? json_string_value(json_array_get(dv, v))
                                              : json_string_value(dv);
      mi_dtype dt = MI_DTYPE_F32;
      if (!dname || vf_dtype_parse(dname, &dt) != 0) {
        fails++;
        unit_error(o, "%s: case with unknown dtype '%s'", u.op_id, dname ? dname : "?");
        continue;
      }
      if (dtype_arg >= 0 && json_is_array(plat_dtypes) && !str_in(plat_dtypes, dname)) {
        vf_emit(o->result_fd, json_pack("{s:s, s:s, s:i, s:s, s:s}", "event", "case_skip", "case",
                                        json_string_value(json_object_get(cs, "name")), "index",
                                        (int)i, "dtype", dname, "why",
                                        "dtype not listed for this kernel by the platform contract"));
        continue;
      }
      json_t *t = json_object_get(tol, dname);
      runs++;
      if (!run_case(&u, cs, (int)i, (int)v, dt, json_is_number(t) ? json_number_value(t) : 0.0))
        fails++;
    }
  }
  if (!runs) unit_error(o, "%s: no case could run on this platform%s", u.op_id, "");
  return fails || !runs ? 1 : 0;
}
