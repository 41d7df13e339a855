/* A hand-written kernel pack (mi/kernel_pack.h) for the verifier's own
 * tests of stage 1 --pack: kernels for two existing operator contracts,
 * operator.add and operator.silu_mul, run on the platform's threads
 * through run_host as a generated pack's are, so these tests need nothing
 * from the pack generator. tests/verify/CMakeLists.txt builds it several
 * times, each build with at most one planted defect:
 *   FX_ADD_SHORT     add leaves the last element unwritten (an off-by-one)
 *   FX_SILU_WRONG    silu_mul computes gate*sigmoid(-gate)*up (a sign slip)
 *   FX_ADD_CRASH     add stores through a wild pointer (SIGSEGV)
 *   FX_SILU_VERSION  the silu_mul kernel records this contract version
 *   FX_ABI_MINOR     the descriptor declares this ABI minor (5: before packs)
 * FX_NAME names the pack; FX_ADD_VERSION / FX_SILU_MUL_VERSION are the
 * contracts' versions, read from ckb/operators/ by CMake. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mi/kernel_pack.h"
#include "mi/plugin.h"

#ifndef FX_NAME
#define FX_NAME "fixture"
#endif
#ifndef FX_SILU_VERSION
#define FX_SILU_VERSION FX_SILU_MUL_VERSION
#endif
#ifndef FX_ABI_MINOR
#define FX_ABI_MINOR MI_ABI_MINOR
#endif

/* elements per run_host index: several per test case, so ranges run on
 * several of the platform's threads */
#define CHUNK 1024

typedef struct fx_ctx {
  const mi_platform_iface *P; /* NULL until bind */
  void *pctx;
  char err[512];
} fx_ctx;

static int fail(fx_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(fx_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return -1;
}

static int fx_bind(void *ctx, const mi_platform_iface *P, void *pctx, char *err, size_t len) {
  fx_ctx *c = ctx;
  mi_device_info di = {.struct_size = sizeof di};
  c->P = NULL;
  if (!P || !mi_platform_has(P, run_host))
    fail(c, "the platform provides no run_host (ABI 1.6): this pack's host-C kernels run on its "
            "threads");
  else if (!P->device_info || P->device_info(pctx, 0, &di) != 0 || !di.host_memory)
    fail(c, "the platform's device memory is not host memory: this pack's host-C kernels cannot "
            "address it");
  else {
    c->P = P;
    c->pctx = pctx;
    return 0;
  }
  snprintf(err, len, "%s", c->err);
  return -1;
}

static const char *fx_last_error(void *ctx) {
  return ((fx_ctx *)ctx)->err;
}

/* y = f(a, b) elementwise over n, one run_host index per CHUNK elements */
typedef struct bin_args {
  float *y;
  const float *a, *b;
  int64_t n;
} bin_args;

static void add_body(void *arg, int64_t c0, int64_t c1) {
  const bin_args *x = arg;
  int64_t end = c1 * CHUNK < x->n ? c1 * CHUNK : x->n;
#ifdef FX_ADD_SHORT
  if (end == x->n) end--;
#endif
#ifdef FX_ADD_CRASH
  volatile uintptr_t addr = 64; /* the never-mapped first page; volatile: the store stays */
  *(float *)addr = x->a[0];
#endif
  for (int64_t i = c0 * CHUNK; i < end; i++)
    x->y[i] = x->a[i] + x->b[i];
}

static void silu_mul_body(void *arg, int64_t c0, int64_t c1) {
  const bin_args *x = arg;
  int64_t end = c1 * CHUNK < x->n ? c1 * CHUNK : x->n;
  for (int64_t i = c0 * CHUNK; i < end; i++) {
    float g = x->a[i];
#ifdef FX_SILU_WRONG
    x->y[i] = g / (1.0f + expf(g)) * x->b[i];
#else
    x->y[i] = g / (1.0f + expf(-g)) * x->b[i];
#endif
  }
}

static int run(fx_ctx *c, const char *op, mi_stream *s, void (*body)(void *, int64_t, int64_t),
               float *y, const float *a, const float *b, int64_t n) {
  if (!c->P) return fail(c, "%s: the pack is not bound to a platform", op);
  if (n < 1 || !y || !a || !b) return fail(c, "%s: n=%lld or a NULL buffer", op, (long long)n);
  bin_args x = {y, a, b, n};
  if (c->P->run_host(c->pctx, s, body, &x, (n + CHUNK - 1) / CHUNK) != 0)
    return fail(c, "%s: run_host failed: %s", op,
                c->P->last_error ? c->P->last_error(c->pctx) : "?");
  return 0;
}

static int fx_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  return run(ctx, "operator.add", s, add_body, y, a, b, n);
}

static int fx_silu_mul(void *ctx, mi_stream *s, float *y, const float *gate, const float *up,
                       int64_t n) {
  return run(ctx, "operator.silu_mul", s, silu_mul_body, y, gate, up, n);
}

static const mi_pack_kernel kernels[] = {
    {"operator.add", FX_ADD_VERSION, "y[i] = a[i] + b[i]", (void (*)(void))fx_add},
    {"operator.silu_mul", FX_SILU_VERSION, "y[i] = gate[i] / (1 + exp(-gate[i])) * up[i]",
     (void (*)(void))fx_silu_mul},
};

static const mi_kernel_pack_iface iface = {
    .struct_size = sizeof(mi_kernel_pack_iface),
    .target = MI_PACK_TARGET_HOST_C,
    .bind = fx_bind,
#ifdef FX_LYING_COUNT /* a table that claims more kernels than it holds */
    .n_kernels = 1 << 20,
#else
    .n_kernels = sizeof kernels / sizeof *kernels,
#endif
    .kernels = kernels,
    .last_error = fx_last_error,
};

static int fx_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                   size_t len) {
  (void)host, (void)opts;
  if (!(*ctx = calloc(1, sizeof(fx_ctx)))) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  return 0;
}

static void fx_fini(void *ctx) {
  free(ctx);
}

static const void *fx_get_iface(void *ctx) {
  (void)ctx;
  return &iface;
}

static const mi_plugin_desc desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = FX_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_KERNELS,
    .name = "pack-" FX_NAME,
    .version = "0.0.1",
    .description = "a hand-written kernel pack (the verifier's tests)",
    .init = fx_init,
    .fini = fx_fini,
    .get_iface = fx_get_iface,
};
MI_PLUGIN_DEFINE(desc)
