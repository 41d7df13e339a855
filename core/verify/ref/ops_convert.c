/* The reference of operator.convert (ckb/operators/convert.json): rounds
 * each input, given exactly as the kernel got it, to the destination format
 * in float64 arithmetic, from the format's parameters alone (precision,
 * smallest exponent, largest finite value), never through the conversion
 * helpers of mi/tensor.h that kernels use: a shared bug would hide. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/verify/verify.h"

/* A binary floating-point format: p significand bits (the leading one
 * included), emin the exponent of the smallest normal, max the largest
 * finite value. */
typedef struct fmt {
  int p, emin;
  double max;
} fmt;

/* x rounded to nearest, ties to even, in format f: subnormals kept, past
 * the largest finite value +-inf, NaN and signed zeros as they are. */
static double round_to_fmt(double x, fmt f) {
  if (isnan(x) || isinf(x) || x == 0) return x;
  int e;
  frexp(x, &e); /* |x| = m 2^e, m in [0.5, 1): x's leading bit is 2^(e-1) */
  int lead = e - 1 < f.emin ? f.emin : e - 1;
  double ulp = ldexp(1.0, lead - (f.p - 1)); /* spacing of the format around x */
  double y = x / ulp;                          /* exact: a power-of-two scaling */
  double lo = floor(y), frac = y - lo;         /* exact: y has at most 53 bits */
  double r = lo;
  if (frac > 0.5 || (frac == 0.5 && fmod(lo, 2.0) != 0)) r = lo + 1;
  double out = r * ulp;
  /* ties at max + ulp/2 went to the even neighbour 2^(emax+1): also inf */
  if (fabs(out) > f.max) return copysign(INFINITY, x);
  if (out == 0) return copysign(0.0, x);
  return out;
}

static int format_of(mi_dtype t, fmt *f) {
  switch (t) {
  case MI_DTYPE_F32: *f = (fmt){24, -126, ldexp(2.0 - ldexp(1.0, -23), 127)}; return 0;
  case MI_DTYPE_F16: *f = (fmt){11, -14, 65504.0}; return 0;
  case MI_DTYPE_BF16: *f = (fmt){8, -126, ldexp(2.0 - ldexp(1.0, -7), 127)}; return 0;
  default: return -1;
  }
}

double vf_f64_round_dtype(double x, mi_dtype t) {
  fmt f;
  return format_of(t, &f) == 0 ? round_to_fmt(x, f) : x;
}

int vf_ref_convert(vf_call *c, char *err, size_t len) {
  vf_arg *dst = NULL, *src = NULL, *n = NULL;
  for (int i = 0; i < c->nargs; i++) {
    if (!strcmp(c->args[i].name, "dst")) dst = &c->args[i];
    if (!strcmp(c->args[i].name, "src")) src = &c->args[i];
    if (!strcmp(c->args[i].name, "n")) n = &c->args[i];
  }
  if (!dst || !src || !n || !dst->val || !src->val) {
    snprintf(err, len, "the reference needs arguments named 'dst', 'src' and 'n'");
    return -1;
  }
  fmt f;
  if (format_of(dst->dtype, &f) != 0 || (src->dtype != MI_DTYPE_F32 && src->dtype != MI_DTYPE_F16 &&
                                         src->dtype != MI_DTYPE_BF16)) {
    snprintf(err, len, "convert: %s -> %s is not a conversion of the contract", mi_dtype_name(src->dtype),
             mi_dtype_name(dst->dtype));
    return -1;
  }
  for (int64_t i = 0; i < n->i; i++) dst->val[i] = round_to_fmt(src->val[i], f);
  return 0;
}
