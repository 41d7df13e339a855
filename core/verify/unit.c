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
#include "core/verify/ffi_call.h"
#include "core/verify/quant_input.h"
#include "core/verify/verify.h"
#include "mi/host.h"

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
  const char *label; /* what messages name: the member, or the operator id of a pack's kernel */
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

/* "bits": a uniformly random bit pattern of the element type, so every class
 * of value turns up (zeros of both signs, subnormals, infinities, NaNs). */
static double random_bits(mi_dtype t, uint64_t *rng) {
  uint64_t r = mi_rng_next(rng);
  if (t == MI_DTYPE_F16) return mi_f16_to_f32((uint16_t)r);
  if (t == MI_DTYPE_BF16) return mi_bf16_to_f32((uint16_t)r);
  uint32_t w = (uint32_t)r;
  float f;
  memcpy(&f, &w, 4);
  return f;
}

/* "values": a number, or one that JSON cannot spell */
static int special_value(json_t *j, double *v) {
  const char *s = json_string_value(j);
  if (json_is_number(j)) *v = json_number_value(j);
  else if (s && !strcmp(s, "nan")) *v = NAN;
  else if (s && !strcmp(s, "inf")) *v = INFINITY;
  else if (s && !strcmp(s, "-inf")) *v = -INFINITY;
  else if (s && !strcmp(s, "-0")) *v = -0.0;
  else return -1;
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
  json_t *list = json_object_get(gen, "values");
  if (!strcmp(dist, "values") && !json_array_size(list)) {
    snprintf(err, len, "input '%s': \"values\" needs a non-empty array", a->name);
    return -1;
  }
  for (int64_t i = 0; i < a->n; i++) {
    double v;
    if (!strcmp(dist, "normal")) v = mean + std * mi_rng_normal(rng);
    else if (!strcmp(dist, "bits")) v = random_bits(a->dtype, rng);
    else if (!strcmp(dist, "values")) {
      if (special_value(json_array_get(list, (size_t)i % json_array_size(list)), &v) != 0) {
        snprintf(err, len, "input '%s': a value is neither a number nor \"nan\", \"inf\", \"-inf\", \"-0\"", a->name);
        return -1;
      }
    }
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
      /* a case may fix a dtype argument other than the one its variants run
       * over (convert: "src_dtype": "f32" while dst_dtype takes the variants) */
      a->dtype = variant;
      if (json_is_string(v) && vf_dtype_parse(json_string_value(v), &a->dtype) != 0) {
        snprintf(err, len, "'%s': unknown dtype '%s'", a->name, json_string_value(v));
        return -1;
      }
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
      /* {"range": [lo, hi]}: uniform; with "multiple": m, a multiple of m
       * in [lo, hi] (a row of whole blocks) */
      json_t *r = json_object_get(v, "range");
      int64_t lo = json_integer_value(json_array_get(r, 0)), hi = json_integer_value(json_array_get(r, 1)),
              m = json_is_integer(json_object_get(v, "multiple")) ? json_integer_value(json_object_get(v, "multiple")) : 1;
      if (m < 1 || (lo + m - 1) / m > hi / m) {
        snprintf(err, len, "'%s': no multiple of %lld in [%lld, %lld]", a->name, (long long)m, (long long)lo,
                 (long long)hi);
        return -1;
      }
      a->i = m * mi_rng_int(rng, (lo + m - 1) / m, hi / m);
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

/* The guard bytes after an output are as the harness wrote them: nothing
 * was written past its end. */
static int guard_intact(const dev_buf *b) {
  int ok = 1;
  for (size_t g = 0; g < GUARD; g++) ok &= b->host[b->bytes + g] == GUARD_BYTE;
  return ok;
}

/* The failure message both comparisons share: a write past the end of an
 * output, or NaN/Inf where the reference is finite. 1 when it wrote one. */
static int fail_msg_common(const unit *u, const vf_arg *a, int guard_ok, int64_t nonfinite,
                           int64_t show, double got, double want, const char *where, char *msg,
                           size_t mlen) {
  if (!guard_ok)
    snprintf(msg, mlen, "%s: wrote past the end of '%s' (%lld elements) %s", u->label, a->name,
             (long long)a->n, where);
  else if (nonfinite)
    snprintf(msg, mlen, "%s: %lld NaN/Inf values in '%s' (first %s[%lld]: got %g, want %g) %s",
             u->label, (long long)nonfinite, a->name, a->name, (long long)show, got, want, where);
  else
    return 0;
  return 1;
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
    int guard_ok = guard_intact(&db[i]);
    double maxabs = 0, refmax = 0;
    int64_t at = -1, nonfinite = 0, mismatches = 0, first_bad = -1;
    for (int64_t k = 0; k < a->n; k++) {
      double want = a->val[k], got = decode_one(a->dtype, db[i].host, k);
      if (fabs(want) > refmax) refmax = fabs(want);
      if (!isfinite(got) && isfinite(want)) {
        if (!nonfinite++) first_bad = k;
        continue;
      }
      /* equal means the same value: NaN matches NaN, -0 does not match +0 */
      int same = (isnan(got) && isnan(want)) || (got == want && signbit(got) == signbit(want));
      if (!same && !mismatches++ && first_bad < 0) first_bad = k;
      if (isnan(got) && isnan(want)) continue;
      double d = got == want ? 0 : fabs(got - want);
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
      if (fail_msg_common(u, a, guard_ok, nonfinite, show, got_s, want_s, where, msg, mlen))
        ; /* written */
      else if (!strcmp(u->compare, "exact"))
        snprintf(msg, mlen, "%s: %lld of %lld elements of '%s' differ (first %s[%lld]: got %g, want %g) %s",
                 u->label, (long long)mismatches, (long long)a->n, a->name, a->name,
                 (long long)show, got_s, want_s, where);
      else
        snprintf(msg, mlen, "%s: max rel error %.2g > tol %g %s (max abs %.2g at %s[%lld]: got %.6g, want %.6g)",
                 u->label, rel, tol, where, maxabs, a->name, (long long)show, got_s, want_s);
    }
  }
  json_object_set_new(res, "outputs", outs);
  json_object_set_new(res, "max_abs_err", jnum(worst_abs));
  json_object_set_new(res, "max_rel_err", jnum(worst_rel));
  return pass;
}

/* A mode's bound ("abs_bound"): every output within
 *   (act_rel + terms·accum_unit·(1 + act_rel))·mag + terms·abs_per_term
 *     + act_block.rel·(magb[0] + terms·accum_unit·magb[1])
 * of the reference, mag being the reference on the absolute values of the
 * inputs (Σ_k |x_k·w_k| for matmul; a block type's values counted as
 * their terms' magnitudes, which the roundings scale with) and magb the
 * same with act_block's input seen through its blocks' largest values
 * (Σ_b amax_b Σ_{k in b} |w_k|: [0] with |w|, what quantizing x moves;
 * [1] with the terms, what the roundings then see; NULL without
 * act_block). NaN/Inf where the reference is finite, or a write past the
 * end, fails as in compare. Fills res; 1 on pass. */
static int compare_bound(unit *u, dev_buf *db, const double *mag, double *const *magb, json_t *mode,
                         double terms, const char *mode_name, json_t *res, char *msg, size_t mlen,
                         const char *where) {
  json_t *b = json_object_get(mode, "bound");
  const double act = json_number_value(json_object_get(b, "act_rel")),
               unit_r = json_number_value(json_object_get(b, "accum_unit")),
               abs_t = json_number_value(json_object_get(b, "abs_per_term")),
               blk = json_number_value(json_object_get(json_object_get(b, "act_block"), "rel"));
  const double rel = act + terms * unit_r * (1 + act), floor_abs = terms * abs_t;
#define LIMIT(at) (rel * mag[at] + (magb ? blk * (magb[0][at] + terms * unit_r * magb[1][at]) : 0) + floor_abs)
  int pass = 1;
  double worst_ratio = 0, worst_abs = 0, worst_rel = 0;
  json_t *outs = json_array();
  int64_t off = 0;
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    if (a->kind != VF_OUT && a->kind != VF_INOUT) continue;
    int guard_ok = guard_intact(&db[i]);
    double maxabs = 0, refmax = 0, ratio = 0;
    int64_t at = -1, nonfinite = 0, first_bad = -1;
    for (int64_t k = 0; k < a->n; k++) {
      double want = a->val[k], got = decode_one(a->dtype, db[i].host, k);
      double lim = LIMIT(off + k);
      if (fabs(want) > refmax) refmax = fabs(want);
      if (isnan(got) && isnan(want)) continue;
      if (!isfinite(got) && isfinite(want)) {
        if (!nonfinite++) first_bad = k;
        continue;
      }
      double d = got == want ? 0 : fabs(got - want);
      if (d > maxabs) maxabs = d;
      double r = d == 0 ? 0 : lim > 0 ? d / lim : INFINITY;
      if (r > ratio || at < 0) ratio = r, at = k;
    }
    off += a->n;
    double relerr = nonfinite ? INFINITY : maxabs / (refmax > 0 ? refmax : 1.0);
    int ok = guard_ok && !nonfinite && ratio <= 1;
    int64_t show = nonfinite ? first_bad : at;
    double got_s = show >= 0 ? decode_one(a->dtype, db[i].host, show) : 0;
    double want_s = show >= 0 ? a->val[show] : 0;
    double lim_s = show >= 0 ? LIMIT(off - a->n + show) : 0;
    json_t *o = json_pack("{s:s, s:o, s:o, s:I, s:b, s:s, s:o}", "arg", a->name, "max_abs_err",
                          jnum(nonfinite ? INFINITY : maxabs), "max_rel_err", jnum(relerr),
                          "nonfinite", (json_int_t)nonfinite, "guard_intact", guard_ok, "mode",
                          mode_name, "max_err_over_bound", jnum(nonfinite ? INFINITY : ratio));
    if (show >= 0)
      json_object_set_new(o, "worst", json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)show, "got",
                                                jnum(got_s), "want", jnum(want_s), "bound", jnum(lim_s)));
    json_array_append_new(outs, o);
    if (ratio > worst_ratio || isnan(ratio)) worst_ratio = ratio;
    if (maxabs > worst_abs) worst_abs = maxabs;
    if (relerr > worst_rel || isnan(relerr)) worst_rel = relerr;
    if (!ok && pass) {
      pass = 0;
      if (!fail_msg_common(u, a, guard_ok, nonfinite, show, got_s, want_s, where, msg, mlen))
        snprintf(msg, mlen, "%s: error %.3g at %s[%lld] (got %.9g, want %.9g) > the %s bound %.3g %s",
                 u->label, fabs(got_s - want_s), a->name, (long long)show, got_s, want_s, mode_name,
                 lim_s, where);
    }
  }
  json_object_set_new(res, "outputs", outs);
  json_object_set_new(res, "max_abs_err", jnum(worst_abs));
  json_object_set_new(res, "max_rel_err", jnum(worst_rel));
  json_object_set_new(res, "mode", json_string(mode_name));
  json_object_set_new(res, "max_err_over_bound", jnum(worst_ratio));
  return pass;
#undef LIMIT
}

/* How ref_magnitudes sees the input named `input`: each value replaced by
 * the largest |value| of its block (`size` consecutive values), or, in a
 * block whose largest is under `flush`, by that largest / rel (such a block
 * may be flushed to zero whole: the error is then the value itself). */
typedef struct block_view {
  const char *input;
  int64_t size;
  double flush, rel;
  int plain; /* the other inputs as |value|, not their terms' magnitudes */
} block_view;

static void block_amax(const block_view *bv, const double *v, int64_t n, double *out) {
  for (int64_t b = 0; b < n; b += bv->size) {
    const int64_t e = b + bv->size < n ? b + bv->size : n;
    double m = 0;
    for (int64_t k = b; k < e; k++) m = fmax(m, fabs(v[k]));
    if (m < bv->flush && bv->rel > 0) m /= bv->rel;
    for (int64_t k = b; k < e; k++) out[k] = m;
  }
}

/* mag = the reference on |inputs| (the outputs' magnitudes, Σ|x·w| for a
 * product), every output buffer in argument order; u->a holds the case,
 * its outputs already the reference's. An input's magnitudes are its
 * absval where it has them (a block type's terms; |value| with bv->plain),
 * and, with bv, the input bv names is seen through block_amax. */
static int ref_magnitudes(unit *u, const block_view *bv, double **mag, char *err, size_t len) {
  int64_t n = 0;
  for (int i = 0; i < u->nargs; i++)
    if (u->a[i].kind == VF_OUT || u->a[i].kind == VF_INOUT) n += u->a[i].n;
  vf_arg a2[MAX_ARGS];
  memcpy(a2, u->a, sizeof a2);
  double *m = calloc((size_t)(n ? n : 1), sizeof *m), *keep[MAX_ARGS] = {0};
  int rc = m ? 0 : -1;
  if (!m) snprintf(err, len, "out of memory");
  for (int i = 0; rc == 0 && i < u->nargs; i++) {
    if (a2[i].kind == VF_INOUT) { /* its input is gone: the reference wrote over it */
      snprintf(err, len, "a mode's bound needs separate input and output buffers ('%s' is inout)",
               a2[i].name);
      rc = -1;
      break;
    }
    if (a2[i].kind != VF_IN && a2[i].kind != VF_OUT) continue;
    keep[i] = malloc((size_t)(a2[i].n ? a2[i].n : 1) * sizeof(double));
    if (!keep[i]) {
      snprintf(err, len, "out of memory");
      rc = -1;
      break;
    }
    for (int64_t k = 0; k < a2[i].n; k++)
      keep[i][k] = a2[i].kind == VF_OUT                  ? 0
                   : a2[i].absval && !(bv && bv->plain) ? a2[i].absval[k]
                                                        : fabs(a2[i].val[k]);
    if (bv && a2[i].kind == VF_IN && !strcmp(a2[i].name, bv->input)) block_amax(bv, a2[i].val, a2[i].n, keep[i]);
    a2[i].val = keep[i];
  }
  vf_call call = {a2, u->nargs, u->op};
  if (rc == 0) rc = u->ref(&call, err, len);
  int64_t off = 0;
  for (int i = 0; rc == 0 && i < u->nargs; i++)
    if (a2[i].kind == VF_OUT || a2[i].kind == VF_INOUT) {
      for (int64_t k = 0; k < a2[i].n; k++) m[off + k] = fabs(a2[i].val[k]);
      off += a2[i].n;
    }
  for (int i = 0; i < u->nargs; i++) free(keep[i]);
  if (rc != 0) {
    free(m);
    m = NULL;
  }
  *mag = m;
  return rc;
}

/* ---------- the plan: every case's inputs, drawn in the parent ---------- */

typedef struct pcase {
  int ci, vi;
  mi_dtype variant;
  double tol;
  /* a mode of the operator contract the platform runs for this dtype, or
   * NULL: the per-output bound replaces tol (compare_bound) */
  json_t *mode;
  const char *mode_name;
  double terms; /* the mode's bound.terms for this case */
  const char *cname;
  char seed_hex[24], where[600];
  json_t *params;
  int state; /* 0 runnable, 1 contract error (err), 2 skipped */
  char err[512];
  const char *skip_dtype;
  vf_arg a[MAX_ARGS]; /* scalars; buffers: val = inputs drawn, outputs poisoned */
  unsigned char *host[MAX_ARGS]; /* the bytes the kernel gets, + GUARD */
  size_t bytes[MAX_ARGS];
  int alias[MAX_ARGS]; /* an out buffer given the device buffer of input alias[i], or -1 */
  size_t out_bytes;    /* every out/inout buffer + GUARD, in argument order */
} pcase;

struct vf_op_plan {
  unit u;
  pcase *cases;
  int n, cap;
  json_t *errors; /* unit-level problems found in the parent (strings) */
};

static pcase *plan_add(vf_op_plan *p) {
  if (p->n == p->cap) {
    int cap = p->cap ? p->cap * 2 : 16;
    pcase *v = realloc(p->cases, (size_t)cap * sizeof *v);
    if (!v) return NULL;
    p->cases = v;
    p->cap = cap;
  }
  pcase *pc = &p->cases[p->n++];
  memset(pc, 0, sizeof *pc);
  for (int i = 0; i < MAX_ARGS; i++) pc->alias[i] = -1;
  return pc;
}

/* Buffer i of the case: its values (and, for a block type, the terms'
 * magnitudes) and the bytes the kernel gets, + GUARD. */
static int alloc_buffer(pcase *pc, int i, vf_arg *a) {
  const size_t n = (size_t)(a->n ? a->n : 1);
  a->absval = NULL;
  if (mi_dtype_is_block(a->dtype)) {
    pc->bytes[i] = mi_dtype_row_bytes(a->dtype, a->n);
    if (a->kind != VF_IN || (a->n && !pc->bytes[i])) {
      snprintf(pc->err, sizeof pc->err, "argument '%s': %s", a->name,
               a->kind != VF_IN ? "a block type can only be an input"
                                : "its values are not whole blocks of its type");
      return -1;
    }
    a->absval = calloc(n, sizeof(double));
  } else {
    pc->bytes[i] = (size_t)a->n * mi_dtype_size(a->dtype);
  }
  a->val = calloc(n, sizeof(double));
  pc->host[i] = malloc(pc->bytes[i] + GUARD);
  if (!a->val || !pc->host[i] || (mi_dtype_is_block(a->dtype) && !a->absval)) {
    snprintf(pc->err, sizeof pc->err, "out of memory for '%s' (%lld elements)", a->name, (long long)a->n);
    return -1;
  }
  memset(pc->host[i] + pc->bytes[i], GUARD_BYTE, GUARD);
  return 0;
}

/* An input's values; a block type's bytes too (quant_input.h): drawn from
 * the generator's values, or, with "codes", as random codes and scales. */
static int draw_input(unit *u, vf_arg *a, json_t *gen, uint64_t *rng, unsigned char *host, char *err,
                      size_t len) {
  const char *dist = json_string_value(json_object_get(gen, "dist"));
  const int codes = dist && !strcmp(dist, "codes");
  if (codes && !mi_dtype_is_block(a->dtype)) {
    snprintf(err, len, "input '%s': \"codes\" draws blocks of a block type, not %s", a->name,
             mi_dtype_name(a->dtype));
    return -1;
  }
  if (!codes && generate(u, a, gen, rng, err, len) != 0) return -1;
  if (!mi_dtype_is_block(a->dtype)) return 0;
  json_t *sd = json_object_get(gen, "std");
  return vf_quant_input(a->dtype, a->n, codes, sd ? json_number_value(sd) : 1.0, rng, host, a->val, a->absval);
}

/* Draws one case: scalars, shapes, inputs (rounded to their dtype) and
 * poisoned outputs, as the bytes the kernel will get. Nothing expected is
 * computed here: that happens after the child has ended. */
static void prepare_case(unit *u, pcase *pc, json_t *cs) {
  const vf_unit_opts *o = u->o;
  uint64_t seed = vf_case_seed(o->seed, u->op_id, pc->ci, pc->vi), rng = seed;
  char params[400];
  for (int i = 0; i < u->nargs; i++) u->a[i].val = NULL, u->a[i].shape = NULL, u->a[i].absval = NULL;
  snprintf(pc->seed_hex, sizeof pc->seed_hex, "0x%016llx", (unsigned long long)seed);
  pc->state = 1;
  if (resolve_scalars(u, cs, pc->variant, &rng, pc->err, sizeof pc->err) != 0) goto out;
  params_text(u, params, sizeof params);
  snprintf(pc->where, sizeof pc->where, "on %s (%s, case %s)", params, mi_dtype_name(pc->variant), pc->cname);
  pc->params = params_json(u);
  size_t ci2;
  json_t *cexpr;
  json_array_foreach(json_object_get(u->op, "constraints"), ci2, cexpr) {
    int64_t ok = 0;
    if (mi_expr_eval(json_string_value(cexpr), lookup_int, u, &ok, pc->err, sizeof pc->err) != 0) goto out;
    if (!ok) {
      snprintf(pc->err, sizeof pc->err, "case violates constraint '%s' with %s", json_string_value(cexpr), params);
      goto out;
    }
  }
  json_t *cgen = json_object_get(cs, "inputs"), *ogen = json_object_get(u->op, "inputs");
  for (int i = 0; i < u->nargs; i++) {
    vf_arg *a = &u->a[i];
    if (a->kind != VF_IN && a->kind != VF_OUT && a->kind != VF_INOUT) continue;
    const char *dt = json_string_value(json_object_get(u->jargs[i], "dtype"));
    if (dt && dt[0] == '$') {
      for (int j = 0; j < u->nargs; j++)
        if (u->a[j].kind == VF_DTYPE && !strcmp(u->a[j].name, dt + 1)) a->dtype = u->a[j].dtype;
    } else if (!dt || vf_dtype_parse(dt, &a->dtype) != 0) {
      snprintf(pc->err, sizeof pc->err, "argument '%s' has no usable dtype", a->name);
      goto out;
    }
    json_t *shape = json_object_get(u->jargs[i], "shape");
    a->ndim = (int)json_array_size(shape);
    a->n = 1;
    size_t k;
    json_t *d;
    json_array_foreach(shape, k, d) {
      int64_t x;
      if (json_is_integer(d)) x = json_integer_value(d);
      else if (mi_expr_eval(json_string_value(d), lookup_int, u, &x, pc->err, sizeof pc->err) != 0) goto out;
      if (x < 0 || (x && a->n > INT64_MAX / 4 / x)) {
        snprintf(pc->err, sizeof pc->err, "argument '%s': bad dimension %lld", a->name, (long long)x);
        goto out;
      }
      a->n *= x;
    }
    if (alloc_buffer(pc, i, a) != 0) goto out;
    if (a->kind == VF_OUT) {
      /* Poison: an element the kernel never writes shows up as NaN / a wild int. */
      for (int64_t e = 0; e < a->n; e++) a->val[e] = a->dtype == MI_DTYPE_I32 ? -123456789.0 : NAN;
    } else {
      json_t *gen = json_object_get(cgen, a->name);
      if (!gen) gen = json_object_get(ogen, a->name);
      if (draw_input(u, a, gen, &rng, pc->host[i], pc->err, sizeof pc->err) != 0) goto out;
    }
    if (!mi_dtype_is_block(a->dtype)) encode(a->dtype, a->val, a->n, pc->host[i]);
    if (a->kind != VF_IN) pc->out_bytes += pc->bytes[i] + GUARD;
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
      snprintf(pc->err, sizeof pc->err, "alias '%s' -> '%s' needs an out and an in buffer of equal dtype and size",
               ak, json_is_string(av) ? json_string_value(av) : "?");
      goto out;
    }
    pc->alias[oi] = ii;
    size_t l = strlen(pc->where);
    if (l > 1 && pc->where[l - 1] == ')')
      snprintf(pc->where + l - 1, sizeof pc->where - (l - 1), ", %s aliases %s)", ak, json_string_value(av));
  }
  pc->state = 0;
out:
  memcpy(pc->a, u->a, sizeof pc->a);
  for (int i = 0; i < u->nargs; i++) u->a[i].val = NULL, u->a[i].absval = NULL;
}

static int str_in(json_t *arr, const char *s) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), s)) return 1;
  return 0;
}

static void plan_error(vf_op_plan *p, const char *fmt, const char *a, const char *b) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a, b);
  json_array_append_new(p->errors, json_string(msg));
}

/* 1 when the plugin was opened with every option of `opts` at its value */
static int options_given(const vf_unit_opts *o, json_t *opts) {
  const mi_options *po = o->plugin_opts;
  const char *k;
  json_t *v;
  json_object_foreach(opts, k, v) {
    int hit = 0;
    for (size_t i = 0; po && i < po->count; i++)
      hit |= po->items[i].key && po->items[i].value && !strcmp(po->items[i].key, k) && json_is_string(v) &&
             !strcmp(po->items[i].value, json_string_value(v));
    if (!hit) return 0;
  }
  return 1;
}

/* The mode the platform runs for dtype `dname`, or NULL (the tolerance):
 * one its contract lists for this kernel, for this dtype, that is on. A
 * mode is on when its tag (a string) is in the plugin's variant name, or,
 * stated as {"unless_options": {KEY: VALUE}}, unless the plugin was opened
 * with those options (its exact path). */
static json_t *mode_on(const unit *u, const char *dname, const char **mode_name) {
  const char *mk;
  json_t *mtag;
  json_object_foreach(json_object_get(u->o->platform_kernel, "modes"), mk, mtag) {
    json_t *m = json_object_get(json_object_get(u->op, "modes"), mk);
    if (!m || !str_in(json_object_get(m, "dtypes"), dname)) continue;
    json_t *unless = json_object_get(mtag, "unless_options");
    int on = json_is_string(mtag) ? u->o->variant && strstr(u->o->variant, json_string_value(mtag)) != NULL
                                  : json_is_object(unless) && !options_given(u->o, unless);
    if (on) {
      *mode_name = mk;
      return m;
    }
  }
  return NULL;
}

vf_op_plan *vf_op_plan_new(const vf_unit_opts *o) {
  vf_op_plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->errors = json_array();
  unit *u = &p->u;
  u->o = o;
  u->op = o->operator_entry;
  u->op_id = json_string_value(json_object_get(u->op, "id"));
  u->member = json_string_value(json_object_get(u->op, "member"));
  u->compare = json_string_value(json_object_get(u->op, "compare"));
  if (!u->compare) u->compare = "max_rel";
  const char *refname = json_string_value(json_object_get(u->op, "reference"));
  if (!u->op_id || !u->member) return plan_error(p, "operator contract without id or member%s%s", "", ""), p;
  u->label = o->pack ? u->op_id : u->member;
  if (!(u->ref = vf_ref_find(refname)))
    return plan_error(p, "%s: the verifier has no reference named '%s'", u->op_id, refname ? refname : ""), p;
  json_t *args = json_object_get(json_object_get(u->op, "signature"), "args");
  if (json_array_size(args) > MAX_ARGS) return plan_error(p, "%s: more than 32 arguments%s", u->op_id, ""), p;
  size_t i;
  json_t *ja;
  int dtype_arg0 = -1;
  json_array_foreach(args, i, ja) {
    u->jargs[i] = ja;
    u->a[i].name = json_string_value(json_object_get(ja, "name"));
    if (!u->a[i].name || vf_kind_parse(json_string_value(json_object_get(ja, "kind")), &u->a[i].kind))
      return plan_error(p, "%s: argument without a name or a known kind%s", u->op_id, ""), p;
    if (u->a[i].kind == VF_DTYPE && dtype_arg0 < 0) dtype_arg0 = (int)i;
  }
  u->nargs = (int)json_array_size(args);

  json_t *tol = json_object_get(u->op, "tolerance");
  json_t *plat_dtypes = json_object_get(o->platform_kernel, "dtypes");
  const char *mk;
  json_t *mtag;
  json_object_foreach(json_object_get(o->platform_kernel, "modes"), mk, mtag)
    if (!json_object_get(json_object_get(u->op, "modes"), mk)) {
      plan_error(p, "%s: the platform contract lists mode '%s', which the operator contract does not define", u->op_id, mk);
      return p;
    }
  int runs = 0;
  json_t *cs;
  json_array_foreach(json_object_get(u->op, "cases"), i, cs) {
    /* the dtype argument the case's variants run over: the first one the
     * case gives a list, else the first one */
    int dtype_arg = dtype_arg0;
    for (int k = 0; k < u->nargs; k++)
      if (u->a[k].kind == VF_DTYPE && json_is_array(json_object_get(cs, u->a[k].name))) {
        dtype_arg = k;
        break;
      }
    json_t *dv = dtype_arg >= 0 ? json_object_get(cs, u->a[dtype_arg].name) : NULL;
    size_t nv = json_is_array(dv) ? json_array_size(dv) : 1;
    for (size_t v = 0; v < nv; v++) {
      const char *dname = dtype_arg < 0 ? "f32"
                          : json_is_array(dv) ? json_string_value(json_array_get(dv, v))
                                              : json_string_value(dv);
      mi_dtype dt = MI_DTYPE_F32;
      if (!dname || vf_dtype_parse(dname, &dt) != 0) {
        plan_error(p, "%s: case with unknown dtype '%s'", u->op_id, dname ? dname : "?");
        continue;
      }
      pcase *pc = plan_add(p);
      if (!pc) return plan_error(p, "%s: out of memory%s", u->op_id, ""), p;
      pc->ci = (int)i;
      pc->vi = (int)v;
      pc->variant = dt;
      pc->cname = json_string_value(json_object_get(cs, "name"));
      if (!pc->cname) pc->cname = "?";
      if (dtype_arg >= 0 && json_is_array(plat_dtypes) && !str_in(plat_dtypes, dname)) {
        pc->state = 2;
        pc->skip_dtype = dname;
        continue;
      }
      json_t *t = json_object_get(tol, dname);
      pc->tol = json_is_number(t) ? json_number_value(t) : 0.0;
      runs++;
      prepare_case(u, pc, cs);
      const char *mode_name = NULL;
      json_t *mode = mode_on(u, dname, &mode_name);
      if (mode && pc->state == 0) {
        /* the term count of the bound, from this case's integers (still in u->a) */
        json_t *tv = json_object_get(json_object_get(mode, "bound"), "terms");
        int64_t terms = json_is_integer(tv) ? json_integer_value(tv) : 0;
        if (json_is_string(tv) &&
            mi_expr_eval(json_string_value(tv), lookup_int, u, &terms, pc->err, sizeof pc->err) != 0) {
          pc->state = 1;
          continue;
        }
        pc->mode = mode;
        pc->mode_name = mode_name;
        pc->terms = (double)terms;
      }
    }
  }
  if (!runs) plan_error(p, "%s: no case could run on this platform%s", u->op_id, "");
  return p;
}

size_t vf_op_plan_result_bytes(const vf_op_plan *p) {
  size_t n = VF_REC_SIZE(0) * 4;
  for (int k = 0; k < p->n; k++) n += VF_REC_SIZE(p->cases[k].out_bytes);
  return n;
}

void vf_op_plan_free(vf_op_plan *p) {
  if (!p) return;
  for (int k = 0; k < p->n; k++) {
    json_decref(p->cases[k].params);
    for (int i = 0; i < MAX_ARGS; i++) {
      free(p->cases[k].host[i]);
      free(p->cases[k].a[i].val);
      free(p->cases[k].a[i].absval);
    }
  }
  free(p->cases);
  json_decref(p->errors);
  free(p);
}

/* ---------- the child: kernels called, outputs returned ---------- */

static void exec_case(const unit *u, const pcase *pc, int k, const mi_platform_iface *iface, void *ctx,
                      const vf_kernel *kern, int fd) {
  mi_buffer *b[MAX_ARGS] = {0};
  void *dev[MAX_ARGS] = {0};
  char msg[VF_REC_MAX_MSG] = "";
  int rcode = 0;
  unsigned char *payload = malloc(pc->out_bytes ? pc->out_bytes : 1);
  if (!payload) {
    vf_rec_write(fd, VF_REC_FAIL, k, 0, "out of memory in the unit's process", NULL, 0);
    return;
  }
  for (int i = 0; i < u->nargs; i++) {
    const vf_arg *a = &pc->a[i];
    if (a->kind != VF_IN && a->kind != VF_OUT && a->kind != VF_INOUT) continue;
    if (iface->buffer_alloc(ctx, pc->bytes[i] + GUARD, &b[i]) != 0 || !b[i]) {
      snprintf(msg, sizeof msg, "%s: buffer_alloc(%zu) failed: %s %s", u->label, pc->bytes[i] + GUARD,
               iface->last_error ? iface->last_error(ctx) : "", pc->where);
      goto done;
    }
    dev[i] = iface->buffer_ptr(ctx, b[i]);
    if (iface->memcpy_h2d(ctx, NULL, dev[i], pc->host[i], pc->bytes[i] + GUARD) != 0) {
      snprintf(msg, sizeof msg, "%s: memcpy_h2d failed for '%s' %s", u->label, a->name, pc->where);
      goto done;
    }
  }
  for (int i = 0; i < u->nargs; i++)
    if (pc->alias[i] >= 0) dev[i] = dev[pc->alias[i]];
  ffi_type *types[MAX_ARGS];
  void *values[MAX_ARGS];
  vf_ffi_slot store[MAX_ARGS];
  for (int i = 0; i < u->nargs; i++) {
    const vf_arg *a = &pc->a[i];
    switch (a->kind) {
    case VF_CTX: types[i] = vf_ffi_pointer(&store[i], kern->kctx); break;
    case VF_STREAM: types[i] = vf_ffi_pointer(&store[i], NULL); break;
    case VF_IN:
    case VF_OUT:
    case VF_INOUT: types[i] = vf_ffi_pointer(&store[i], dev[i]); break;
    default: types[i] = vf_ffi_scalar(&store[i], a->kind, a->i, a->f, (int)a->dtype); break;
    }
    values[i] = &store[i];
  }
  int rc = 0;
  if (vf_ffi_call(kern->fn, u->nargs, types, values, &rc) != 0) {
    snprintf(msg, sizeof msg, "%s: ffi_prep_cif failed for the declared signature %s", u->label, pc->where);
    goto done;
  }
  if (rc != 0) {
    rcode = rc;
    snprintf(msg, sizeof msg, "%s: kernel returned %d (%s) %s", u->label, rc,
             kern->last_error ? kern->last_error(kern->kctx) : "no message", pc->where);
    goto done;
  }
  if (iface->stream_sync) iface->stream_sync(ctx, NULL);
  size_t off = 0;
  for (int i = 0; i < u->nargs; i++)
    if (pc->a[i].kind == VF_OUT || pc->a[i].kind == VF_INOUT) {
      if (iface->memcpy_d2h(ctx, NULL, payload + off, dev[i], pc->bytes[i] + GUARD) != 0) {
        snprintf(msg, sizeof msg, "%s: memcpy_d2h failed for '%s' %s", u->label, pc->a[i].name, pc->where);
        goto done;
      }
      off += pc->bytes[i] + GUARD;
    }
  vf_rec_write(fd, VF_REC_OUT, k, 0, NULL, payload, pc->out_bytes);
  msg[0] = 0;
done:
  if (msg[0]) vf_rec_write(fd, VF_REC_FAIL, k, rcode, msg, NULL, 0);
  for (int i = 0; i < u->nargs; i++)
    if (b[i]) iface->buffer_free(ctx, b[i]);
  free(payload);
}

int vf_op_plan_run(const vf_op_plan *p, const mi_platform_iface *iface, void *ctx, int fd) {
  const unit *u = &p->u;
  char msg[512];
  if (json_array_size(p->errors) || !u->nargs) return 1; /* the parent reports those */
  vf_kernel k = {vf_member_fn(iface, u->member), ctx, iface->last_error};
  if (!k.fn) {
    snprintf(msg, sizeof msg, "%s: the platform does not provide '%s' (NULL or beyond its struct_size)", u->op_id,
             u->member);
    vf_rec_write(fd, VF_REC_ERROR, -1, 0, msg, NULL, 0);
    return 1;
  }
  return vf_op_plan_run_kernel(p, iface, ctx, &k, fd);
}

int vf_op_plan_run_kernel(const vf_op_plan *p, const mi_platform_iface *iface, void *ctx, const vf_kernel *k,
                          int fd) {
  const unit *u = &p->u;
  char msg[512];
  if (json_array_size(p->errors) || !u->nargs) return 1; /* the parent reports those */
  if (!iface->buffer_alloc || !iface->buffer_ptr || !iface->buffer_free || !iface->memcpy_h2d ||
      !iface->memcpy_d2h) {
    snprintf(msg, sizeof msg, "%s: the platform lacks buffer_alloc/ptr/free or memcpy_h2d/d2h", u->op_id);
    vf_rec_write(fd, VF_REC_ERROR, -1, 0, msg, NULL, 0);
    return 1;
  }
  for (int c = 0; c < p->n; c++)
    if (p->cases[c].state == 0) exec_case(u, &p->cases[c], c, iface, ctx, k, fd);
  return 0;
}

const char *vf_op_plan_op_id(const vf_op_plan *p) { return p ? p->u.op_id : NULL; }

/* ---------- the parent again: reference, comparison, verdicts ---------- */

static json_t *case_event(const pcase *pc, const char *type) {
  json_t *e = json_pack("{s:s, s:s, s:i, s:s, s:s}", "event", type, "case", pc->cname, "index", pc->ci, "dtype",
                        mi_dtype_name(pc->variant), "seed", pc->seed_hex);
  if (pc->params) json_object_set(e, "params", pc->params);
  return e;
}

/* A case under a mode: the magnitudes its bound scales with, then the
 * bound (*pass; the failure message in msg). -1 with msg: a contract error. */
static int judge_bound(unit *u, const pcase *pc, dev_buf *db, json_t *res, char *msg, size_t mlen, int *pass) {
  json_t *ab = json_object_get(json_object_get(pc->mode, "bound"), "act_block");
  block_view bv = {json_string_value(json_object_get(ab, "input")), json_integer_value(json_object_get(ab, "size")),
                   json_number_value(json_object_get(ab, "flush_below")),
                   json_number_value(json_object_get(ab, "rel")), 0};
  if (ab && (!bv.input || bv.size < 1)) {
    snprintf(msg, mlen, "mode %s: bound.act_block needs an input and a size >= 1", pc->mode_name);
    return -1;
  }
  double *mag = NULL, *magb[2] = {NULL, NULL};
  int rc = ref_magnitudes(u, NULL, &mag, msg, mlen);
  if (rc == 0 && ab) {
    bv.plain = 1;
    rc = ref_magnitudes(u, &bv, &magb[0], msg, mlen);
    bv.plain = 0;
    if (rc == 0) rc = ref_magnitudes(u, &bv, &magb[1], msg, mlen);
  }
  if (rc == 0)
    *pass = compare_bound(u, db, mag, ab ? magb : NULL, pc->mode, pc->terms, pc->mode_name, res, msg, mlen,
                          pc->where);
  free(mag);
  free(magb[0]);
  free(magb[1]);
  return rc;
}

json_t *vf_op_plan_judge(vf_op_plan *p, const vf_child_result *r) {
  unit *u = &p->u;
  json_t *ev = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(p->errors, i, v)
    json_array_append_new(ev, json_pack("{s:s, s:O}", "event", "error", "message", v));
  if (json_array_size(p->errors)) return ev;
  size_t off = 0;
  int proto_bad = 0, unrunnable = 0, ran = 0; /* ran: a case's record was read */
  vf_rec rec;
  char why[200];
  for (int k = 0; k < p->n; k++) {
    pcase *pc = &p->cases[k];
    if (pc->state == 2) {
      json_t *e = json_pack("{s:s, s:s, s:i, s:s, s:s}", "event", "case_skip", "case", pc->cname, "index", pc->ci,
                            "dtype", pc->skip_dtype, "why", "dtype not listed for this kernel by the platform contract");
      json_array_append_new(ev, e);
      continue;
    }
    if (pc->state == 1) {
      json_t *e = case_event(pc, "case_end");
      char msg[1024];
      snprintf(msg, sizeof msg, "%s: contract error in case %s: %s", u->label, pc->cname, pc->err);
      json_object_set_new(e, "tol", json_real(pc->tol));
      json_object_set_new(e, "verdict", json_string("ERROR"));
      json_object_set_new(e, "message", json_string(msg));
      json_array_append_new(ev, e);
      continue;
    }
    if (proto_bad) break;
    /* the next record must be this case's (ERROR records may come first) */
    int have = 0;
    for (;;) {
      int n = vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why);
      if (n < 0) {
        proto_bad = 1;
        break;
      }
      if (n == 0) break;
      if (rec.type == VF_REC_ERROR) {
        json_t *e = json_pack("{s:s, s:s}", "event", "error", "message", rec.msg);
        /* a unit its child could not set up (before any case): no case was in flight */
        if (rec.rc == VF_REC_RC_UNRUNNABLE && rec.index == -1 && !ran) {
          json_object_set_new(e, "status", json_string("ERROR"));
          unrunnable = 1;
        }
        json_array_append_new(ev, e);
        continue;
      }
      if (rec.index != k || (rec.type == VF_REC_OUT && rec.payload_len != pc->out_bytes)) {
        snprintf(why, sizeof why, "a record for case slot %d with %zu bytes where slot %d with %zu was due",
                 rec.index, rec.payload_len, k, pc->out_bytes);
        proto_bad = 1;
        break;
      }
      have = ran = 1;
      break;
    }
    if (proto_bad) break;
    if (!have && unrunnable) break;
    if (!have) { /* the case in flight when the child ended */
      json_t *e = case_event(pc, "case_start");
      json_object_set_new(e, "where", json_string(pc->where));
      json_array_append_new(ev, e);
      break;
    }
    json_t *res = case_event(pc, "case_end");
    json_object_set_new(res, "tol", json_real(pc->tol));
    json_object_set_new(res, "rc", json_integer(rec.type == VF_REC_FAIL ? rec.rc : 0));
    int pass = 0;
    char msg[1600] = "";
    const char *verdict = "FAIL";
    if (rec.type == VF_REC_FAIL) {
      snprintf(msg, sizeof msg, "%s", rec.msg);
    } else {
      dev_buf db[MAX_ARGS];
      memset(db, 0, sizeof db);
      size_t po = 0;
      for (int a = 0; a < u->nargs; a++) {
        db[a].host = pc->host[a];
        db[a].bytes = pc->bytes[a];
        if (pc->a[a].kind == VF_OUT || pc->a[a].kind == VF_INOUT) {
          memcpy(pc->host[a], rec.payload + po, pc->bytes[a] + GUARD);
          po += pc->bytes[a] + GUARD;
        }
      }
      memcpy(u->a, pc->a, sizeof u->a);
      vf_call call = {u->a, u->nargs, u->op};
      char err[1400] = "";
      if (u->ref(&call, err, sizeof err) != 0) {
        snprintf(msg, sizeof msg, "%s: contract error in case %s: %s", u->label, pc->cname, err);
        verdict = "ERROR";
      } else if (pc->mode) {
        if (judge_bound(u, pc, db, res, err, sizeof err, &pass) != 0) {
          snprintf(msg, sizeof msg, "%s: contract error in case %s: %s", u->label, pc->cname, err);
          verdict = "ERROR";
        } else {
          if (!pass) snprintf(msg, sizeof msg, "%s", err);
          verdict = pass ? "PASS" : "FAIL";
        }
      } else {
        pass = compare(u, db, pc->tol, res, msg, sizeof msg, pc->where);
        verdict = pass ? "PASS" : "FAIL";
      }
      for (int a = 0; a < u->nargs; a++) u->a[a].val = NULL, u->a[a].absval = NULL;
    }
    json_object_set_new(res, "verdict", json_string(verdict));
    if (!pass) json_object_set_new(res, "message", json_string(msg));
    json_array_append_new(ev, res);
  }
  if (proto_bad) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s: the unit's result pipe broke the verifier's protocol (%s): a unit may only return "
             "output buffers", u->label, why);
    json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", msg));
  }
  /* bytes after the last expected record: not the protocol */
  if (!proto_bad && vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why) != 0) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s: the unit's result pipe broke the verifier's protocol (%s after the last case): a "
             "unit may only return output buffers", u->label, off < r->results_len ? why : "an extra record");
    json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", msg));
  }
  return ev;
}
