/* Prompts and logit comparisons of the tests that run a model plugin on
 * random checkpoints. Shared by the tests (include as
 * "tests/util/test_logits.h"; link libm). */
#ifndef MI_TESTS_UTIL_TEST_LOGITS_H
#define MI_TESTS_UTIL_TEST_LOGITS_H

#include <check.h>
#include <math.h>
#include <stdint.h>

/* ids[0, T) spread over the Qwen vocabulary's ordinary tokens (below
 * 151643), from a seed: the same seed, the same prompt. */
static inline void mi_test_prompt(int32_t *ids, int T, unsigned seed) {
  unsigned x = seed * 2654435761u + 12345u;
  for (int t = 0; t < T; t++) {
    x = x * 1664525u + 1013904223u;
    ids[t] = (int32_t)((x >> 8) % 151643u);
  }
}

/* max |a - b| / spread(b) over one row of V logits, b in f32 (bf) or in
 * float64 (bd, when bf is NULL); the test fails when b is flat (spread
 * under 1), where the ratio would say nothing. */
static inline double mi_test_rel_err_of(const float *a, const float *bf, const double *bd,
                                        int64_t V) {
  double lo = INFINITY, hi = -INFINITY, mx = 0;
  for (int64_t i = 0; i < V; i++) {
    const double b = bf ? (double)bf[i] : bd[i];
    lo = fmin(lo, b), hi = fmax(hi, b);
    mx = fmax(mx, fabs((double)a[i] - b));
  }
  ck_assert_msg(hi - lo > 1.0, "flat logits (spread %g)", hi - lo);
  return mx / (hi - lo);
}

/* out[0, V) = the log-softmax, in float64, of logits in f32 (lf) or in
 * float64 (ld, when lf is NULL). */
static inline void mi_test_log_softmax_of(const float *lf, const double *ld, double *out, int V) {
  double mx = -INFINITY, s = 0;
  for (int i = 0; i < V; i++)
    mx = fmax(mx, lf ? (double)lf[i] : ld[i]);
  for (int i = 0; i < V; i++)
    s += exp((lf ? (double)lf[i] : ld[i]) - mx);
  const double lz = mx + log(s);
  for (int i = 0; i < V; i++)
    out[i] = (lf ? (double)lf[i] : ld[i]) - lz;
}

/* mi_test_rel_err_of against f32 logits b. */
static inline double mi_test_rel_err(const float *a, const float *b, int64_t V) {
  return mi_test_rel_err_of(a, b, NULL, V);
}

#endif
