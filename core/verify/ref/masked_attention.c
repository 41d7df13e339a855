/* The float64 reference of operators the CKB states as attention over a
 * window of keys ("reference": "masked_attention", core/ckb/map_form.h):
 * the first key each query sees from the contract's own expression
 * (evaluated in double, floored, clamped to [0, i], as the generated kernel
 * does), then operator.attention's float64 definition over those keys
 * (vf_f64_attention_mapped: the form's score map, if it has one, applied
 * to each scaled score before the softmax). The k/v values are the call's: already rounded to
 * its kv_dtype, as for operator.attention's reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/map_form.h"
#include "core/verify/ref/f64.h"
#include "core/verify/verify.h"

/* The values of expression x's names but its index (name_arg -1) from the
 * call's scalar arguments into v. */
static int bind_names(vf_call *c, const mi_kexpr *x, int n, const int *name_arg, const char *field, double *v,
                      char *err, size_t len) {
  for (int k = 0; k < n; k++) {
    if (name_arg[k] < 0) continue; /* the index: per query, per score */
    const vf_arg *a = vf_call_arg(c, mi_kexpr_name(x, k));
    if (!a) {
      snprintf(err, len, "masked_attention: the call lacks '%s', which %s reads", mi_kexpr_name(x, k), field);
      return -1;
    }
    v[k] = (a->kind == VF_F32 || a->kind == VF_F64) ? a->f : (double)a->i;
  }
  return 0;
}

/* The first key of each of the T queries into first[T]. */
static int first_keys(vf_call *c, const mi_masked_attention_form *f, int64_t T, int64_t pos0, int64_t *first,
                      char *err, size_t len) {
  double v[MI_MAP_MAX_NAMES];
  if (bind_names(c, f->first_key, f->n_names, f->name_arg, "first_key", v, err, len) != 0) return -1;
  for (int64_t t = 0; t < T; t++) first[t] = mi_masked_attention_first(f, pos0 + t, v);
  return 0;
}

/* The form's score map, its names bound once per call. */
typedef struct score_map {
  const mi_masked_attention_form *f;
  double v[MI_MAP_MAX_NAMES];
} score_map;

static double map_score(double score, void *user) {
  score_map *m = user;
  return mi_masked_attention_score(m->f, score, m->v);
}

int vf_ref_masked_attention(vf_call *c, char *err, size_t len) {
  static const char *const need[] = {"out", "q", "k_cache", "v_cache", "T", "Hq", "Hkv", "D", "pos0", "scale"};
  enum { OUT, Q, KC, VC, T_, HQ, HKV, D_, POS0, SCALE, N_NEED };
  mi_masked_attention_form f;
  if (!c->op) {
    snprintf(err, len, "the masked_attention reference needs the operator contract");
    return -1;
  }
  if (mi_masked_attention_form_parse(c->op, &f, err, len) != 0) return -1;
  vf_arg *a[N_NEED];
  for (int k = 0; k < N_NEED; k++)
    if (!(a[k] = vf_call_arg(c, need[k])) || (k <= VC && !a[k]->val)) {
      snprintf(err, len, "masked_attention: the call lacks operator.attention's argument '%s'", need[k]);
      mi_masked_attention_form_free(&f);
      return -1;
    }
  const int64_t T = a[T_]->i, Hq = a[HQ]->i, Hkv = a[HKV]->i, D = a[D_]->i, pos0 = a[POS0]->i;
  int rc = -1;
  int64_t *first = NULL;
  if (T < 1 || Hkv < 1 || Hq % Hkv || D < 1 || pos0 < 0 || a[OUT]->n < T * Hq * D || a[Q]->n < T * Hq * D ||
      a[KC]->n < (pos0 + T) * Hkv * D || a[VC]->n < (pos0 + T) * Hkv * D) {
    snprintf(err, len, "masked_attention: T=%lld Hq=%lld Hkv=%lld D=%lld pos0=%lld do not fit the buffers",
             (long long)T, (long long)Hq, (long long)Hkv, (long long)D, (long long)pos0);
    goto out;
  }
  if (!(first = malloc((size_t)T * sizeof *first))) {
    snprintf(err, len, "masked_attention: out of memory");
    goto out;
  }
  if (first_keys(c, &f, T, pos0, first, err, len) != 0) goto out;
  score_map sm = {.f = &f};
  if (f.score && bind_names(c, f.score, f.n_score_names, f.score_name_arg, "score", sm.v, err, len) != 0) goto out;
  if (vf_f64_attention_mapped(a[OUT]->val, a[Q]->val, a[KC]->val, a[VC]->val, T, Hq, Hkv, D, pos0, a[SCALE]->f, first,
                              f.score ? map_score : NULL, &sm, NULL) != 0) {
    snprintf(err, len, "masked_attention: out of memory");
    goto out;
  }
  rc = 0;
out:
  free(first);
  mi_masked_attention_form_free(&f);
  return rc;
}
