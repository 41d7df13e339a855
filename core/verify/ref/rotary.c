/* The float64 reference of operators the CKB states as a rotation of pairs
 * ("reference": "rotary", core/ckb/map_form.h): operator.rope's pairing,
 * the frequency of each pair the contract's own expression (a rope
 * scaling, say) and, where the form states one, its amplitude (YaRN's
 * attention factor on cos and sin), evaluated in float64 as the generated
 * kernel does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/map_form.h"
#include "core/verify/verify.h"

/* An expression of the form at pair i: i and the call's scalars by name. */
static double eval_at(vf_call *c, const mi_kexpr *x, int n_names, const int *name_arg, int64_t i) {
  double v[MI_MAP_MAX_NAMES];
  for (int k = 0; k < n_names; k++) {
    const vf_arg *a = name_arg[k] < 0 ? NULL : vf_call_arg(c, mi_kexpr_name(x, k));
    v[k] = name_arg[k] < 0 ? (double)i : !a ? NAN : (a->kind == VF_F32 || a->kind == VF_F64) ? a->f : (double)a->i;
  }
  return mi_kexpr_eval(x, v);
}

int vf_ref_rotary(vf_call *c, char *err, size_t len) {
  mi_rotary_form f;
  if (!c->op) {
    snprintf(err, len, "the rotary reference needs the operator contract");
    return -1;
  }
  if (mi_rotary_form_parse(c->op, &f, err, len) != 0) return -1;
  /* the call's arguments by name (a caller need not pass them in the
   * signature's order) */
  const json_t *sig = json_object_get(json_object_get(c->op, "signature"), "args");
  vf_arg *ra[MI_ROTARY_ARGS];
  for (int k = 0; k < MI_ROTARY_ARGS; k++)
    if (!(ra[k] = vf_call_arg(c, json_string_value(json_object_get(json_array_get(sig, (size_t)f.arg[k]), "name"))))) {
      snprintf(err, len, "the call lacks the rotary operator's arguments");
      mi_rotary_form_free(&f);
      return -1;
    }
  vf_arg *x = ra[0], *pos = ra[1];
  const int64_t T = ra[2]->i, H = ra[3]->i, ts = ra[4]->i, hs = ra[5]->i, rot = ra[6]->i, half = rot / 2;
  int rc = -1;
  double *fr = NULL;
  if (T < 1 || H < 1 || rot < 2 || rot % 2 || half > (1 << 16) || !x->val || !pos->val || pos->n < T ||
      x->n < (T - 1) * ts + (H - 1) * hs + rot) {
    snprintf(err, len, "rotary: T=%lld H=%lld rot_dim=%lld do not fit x (%lld) and pos (%lld)", (long long)T,
             (long long)H, (long long)rot, (long long)x->n, (long long)pos->n);
    goto out;
  }
  if (!(fr = malloc((size_t)half * 2 * sizeof *fr))) {
    snprintf(err, len, "rotary: out of memory");
    goto out;
  }
  double *amp = fr + half; /* each pair's amplitude (1 without one) */
  for (int64_t i = 0; i < half; i++) {
    fr[i] = eval_at(c, f.freq, f.n_names, f.name_arg, i);
    amp[i] = f.amp ? eval_at(c, f.amp, f.n_amp_names, f.amp_name_arg, i) : 1.0;
  }
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) {
      const double a = pos->val[t] * fr[i], co = amp[i] * cos(a), si = amp[i] * sin(a);
      for (int64_t h = 0; h < H; h++) {
        double *p = x->val + t * ts + h * hs;
        const double x0 = p[i], x1 = p[i + half];
        p[i] = x0 * co - x1 * si;
        p[i + half] = x1 * co + x0 * si;
      }
    }
  rc = 0;
out:
  free(fr);
  mi_rotary_form_free(&f);
  return rc;
}
