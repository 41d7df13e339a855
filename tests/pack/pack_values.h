/* The random inputs and the error measure the kernel-pack tests share: a
 * xorshift stream (each file's own seed: PACK_RNG_SEED before including)
 * and max |got - want| / max |want|, the contracts' max_rel. Each test file
 * includes it once. */
#ifndef MI_TESTS_PACK_VALUES_H
#define MI_TESTS_PACK_VALUES_H

#include <check.h>
#include <math.h>
#include <stdint.h>

#ifndef PACK_RNG_SEED
#define PACK_RNG_SEED 0x2545f4914f6cdd1dull
#endif

static uint64_t pack_rng = PACK_RNG_SEED;
static double uniform(double lo, double hi) {
  pack_rng ^= pack_rng << 13, pack_rng ^= pack_rng >> 7, pack_rng ^= pack_rng << 17;
  return lo + (hi - lo) * (double)(pack_rng >> 11) / 9007199254740992.0;
}

/* max |got - want| / max |want|; every got finite (asserted). */
static double max_rel(const float *got, const double *want, int64_t n) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; i++) {
    ck_assert_msg(isfinite(got[i]), "out[%lld] is %g", (long long)i, got[i]);
    err = fmax(err, fabs(got[i] - want[i]));
    ref = fmax(ref, fabs(want[i]));
  }
  return err / (ref > 0 ? ref : 1);
}

#endif
