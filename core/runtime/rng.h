/* The one seeded generator of the core: splitmix64 (Steele, Lea, Flood
 * 2014). A state is any uint64_t; the same seed gives the same stream on
 * every host. Used by the sampler, mi-mkmodel's weights, and the verifier's
 * inputs, so one --seed reproduces any of them. Header-only: every core
 * library may include it without a link dependency. */
#ifndef MI_CORE_RUNTIME_RNG_H
#define MI_CORE_RUNTIME_RNG_H

#include <math.h>
#include <stdint.h>

#define MI_RNG_GOLDEN 0x9e3779b97f4a7c15ull

/* The splitmix64 finaliser: a bijective 64-bit mix (a counter-based
 * generator when applied to seed + index). */
static inline uint64_t mi_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The next number of the stream in *state. */
static inline uint64_t mi_rng_next(uint64_t *state) { return mi_mix64(*state += MI_RNG_GOLDEN); }

/* Uniform in [0, 1), 53 bits. */
static inline double mi_rng_u01(uint64_t *state) {
  return (double)(mi_rng_next(state) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller, one value per two uniforms). */
static inline double mi_rng_normal(uint64_t *state) {
  double u1 = mi_rng_u01(state), u2 = mi_rng_u01(state);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* Uniform integer in [lo, hi] (both included). */
static inline int64_t mi_rng_int(uint64_t *state, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)(span ? mi_rng_next(state) % span : mi_rng_next(state));
}

/* FNV-1a of a string: names (tensors, operators) into seeds. */
static inline uint64_t mi_fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

#endif
