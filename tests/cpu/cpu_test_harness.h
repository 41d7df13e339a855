/* What the CPU platform's kernel tests share: a host API stub, loading
 * libmi-cpu.so from the build tree, opening a context with options, and a
 * seeded random source (MI_TEST_SEED picks another seed; each test prints
 * its seed so a failure can be replayed). Header-only, for Check tests. */
#ifndef MI_TESTS_CPU_TEST_HARNESS_H
#define MI_TESTS_CPU_TEST_HARNESS_H

#include <check.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/platform.h"
#include "mi/plugin.h"

/* Like ck_assert_msg, but silent when the condition holds: in fork mode
 * every ck_assert_* call is a write to Check's pipe, and the element loops
 * of these tests make millions of checks. */
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                        \
  } while (0)

/* ---------------- host API stub ---------------- */

static inline void cpu_test_log(mi_log_level level, const char *who, const char *fmt, ...) {
  static const char *lv[] = {"error", "warn", "info", "debug"};
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] %s: ", who ? who : "?", (unsigned)level < 4 ? lv[level] : "?");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
static inline void *cpu_test_alloc(size_t size, size_t align) {
  void *p = NULL;
  return posix_memalign(&p, align, size ? size : 1) == 0 ? p : NULL;
}
static inline void cpu_test_free(void *p) { free(p); }
static inline const char *cpu_test_opt_get(const mi_options *o, const char *key) {
  const char *v = NULL; /* last one wins, like command line over plugins.conf */
  for (size_t i = 0; o && i < o->count; i++)
    if (strcmp(o->items[i].key, key) == 0) v = o->items[i].value;
  return v;
}
static const mi_host_api host = {
    .struct_size = sizeof(mi_host_api),
    .abi_minor = MI_ABI_MINOR,
    .log = cpu_test_log,
    .alloc = cpu_test_alloc,
    .free = cpu_test_free,
    .opt_get = cpu_test_opt_get,
};

/* ---------------- loading and opening ---------------- */

/* The build tree's libmi-cpu.so ($MI_BUILD_DIR, set by ctest), loaded once. */
static inline const mi_plugin_desc *load_desc(void) {
  static const mi_plugin_desc *desc;
  if (desc) return desc;
  const char *bd = getenv("MI_BUILD_DIR");
  EXPECT(bd != NULL, "MI_BUILD_DIR is not set (run through ctest)");
  char path[4096];
  snprintf(path, sizeof path, "%s/lib/metainfer/libmi-cpu.so", bd);
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  EXPECT(dl != NULL, "dlopen %s: %s", path, dlerror());
  mi_plugin_entry_fn entry = (mi_plugin_entry_fn)dlsym(dl, MI_PLUGIN_ENTRY_SYMBOL);
  EXPECT(entry != NULL, "%s has no %s", path, MI_PLUGIN_ENTRY_SYMBOL);
  const mi_plugin_desc *d = entry();
  ck_assert(d != NULL);
  ck_assert_uint_eq(d->abi_major, MI_ABI_MAJOR);
  ck_assert_uint_eq(d->kind, MI_PLUGIN_PLATFORM);
  ck_assert_str_eq(d->name, "cpu");
  ck_assert(d->probe && d->init && d->fini && d->get_iface);
  return desc = d;
}

typedef struct plat {
  void *ctx;
  const mi_platform_iface *pi;
} plat;

/* probe + init with the given options. Returns the probe score; on score 0
 * nothing is initialised and why holds the reason. */
static inline int open_with(const mi_kv *kv, size_t n, plat *p, char *why, size_t why_len) {
  const mi_plugin_desc *d = load_desc();
  mi_options opts = {kv, n};
  int score = d->probe(&host, &opts, why, why_len);
  if (score <= 0) return score;
  char err[512] = "";
  int rc = d->init(&host, &opts, &p->ctx, err, sizeof err);
  EXPECT(rc == 0, "init failed after probe scored %d: %s", score, err);
  p->pi = d->get_iface(p->ctx);
  ck_assert(p->pi != NULL);
  ck_assert_uint_ge(p->pi->struct_size, sizeof(mi_platform_iface));
  return score;
}

static inline void close_plat(plat *p) {
  load_desc()->fini(p->ctx);
  p->ctx = NULL;
}

/* The variant is the ISA asked for, alone or with a mode tag after '+'
 * ("avx512bf16+bf16act"). */
static inline int variant_is(const char *variant, const char *isa) {
  size_t n = strlen(isa);
  return strncmp(variant, isa, n) == 0 && (variant[n] == 0 || variant[n] == '+');
}

/* ---------------- random data ---------------- */

static uint64_t rng_state;

/* The seed of one test case and configuration, printed. */
static inline uint64_t seed_for(int test_id, int conf) {
  static uint64_t base;
  if (!base) {
    const char *s = getenv("MI_TEST_SEED");
    base = s ? strtoull(s, NULL, 0) : 0x5eed2026ull;
    if (!base) base = 1;
  }
  uint64_t seed = base * 1000003u + (uint64_t)test_id * 97u + (uint64_t)conf;
  printf("seed %#llx (MI_TEST_SEED=%#llx, test %d, config %d)\n", (unsigned long long)seed,
         (unsigned long long)base, test_id, conf);
  return seed;
}
static inline void rng_seed(uint64_t s) { rng_state = s ? s : 1; }
static inline uint64_t rng_u64(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}
static inline double rng_unif(double lo, double hi) {
  return lo + (hi - lo) * ((double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0));
}
static inline float *rand_f32(size_t n, double lo, double hi) {
  float *v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = (float)rng_unif(lo, hi);
  return v;
}

#endif
