/* my_platform: a minimal MetaInfer platform plugin to copy and grow.
 *
 * What it shows:
 *   - the descriptor (the one exported symbol, via MI_PLUGIN_DEFINE);
 *   - probe: cheap, no device allocation, a score 0..100 and a reason at 0;
 *   - init/fini: a per-load context, errors reported in `err`;
 *   - the platform interface: memory functions and a few scalar kernels.
 *
 * This "device" is host memory, so device addresses are host pointers and
 * copies are memcpy. A real accelerator replaces the memory functions with
 * its own allocator and copies, and launches kernels on its streams.
 *
 * Kernel members left NULL are "not provided": callers check with
 * mi_platform_has() before using one. Fill them in as you implement them.
 * Build: see README.md. Rename "myplatform" everywhere when you copy this.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mi/platform.h>
#include <mi/plugin.h>

/* ---- context ---- */

typedef struct my_ctx {
  const mi_host_api *host; /* logging, memory, options: lent by the core */
  char err[256];           /* last_error() text */
} my_ctx;

/* A buffer: on this platform, host memory from the host's aligned allocator. */
struct mi_buffer {
  void *ptr;
  size_t size;
  int wrapped; /* 1: host memory we do not own (buffer_wrap_host) */
};

static int fail(my_ctx *c, const char *msg) {
  snprintf(c->err, sizeof c->err, "%s", msg);
  return -1;
}

/* ---- probe / init / fini ---- */

/* Cheap and side-effect free. A real plugin checks for its device here
 * (e.g. a device count) and returns 0 with a reason when there is none. */
static int my_probe(const mi_host_api *host, const mi_options *opts, char *why, size_t why_len) {
  const char *off = host->opt_get(opts, "disable");
  if (off && strcmp(off, "1") == 0) {
    snprintf(why, why_len, "disabled by option disable=1");
    return 0;
  }
  return 5; /* low: a portable reference platform should lose to real hardware */
}

static int my_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                   size_t err_len) {
  my_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  c->host = host;
  *ctx = c;
  return 0;
}

static void my_fini(void *ctx) { free(ctx); }

/* ---- identity and devices ---- */

static const char *my_variant(void *ctx) { return "scalar"; }
static int my_device_count(void *ctx) { return 1; }

static int my_device_info(void *ctx, int device, mi_device_info *out) {
  if (device != 0) return fail(ctx, "no such device");
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  snprintf(out->name, sizeof out->name, "my_platform scalar reference");
  out->host_memory = 1; /* weights can be wrapped zero-copy */
  out->compute_units = 1;
  out->simd_width = 1;
  return 0;
}

static const char *my_last_error(void *ctx) { return ((my_ctx *)ctx)->err; }

/* ---- memory ---- */

static int my_buffer_alloc(void *ctx, size_t size, mi_buffer **out) {
  my_ctx *c = ctx;
  mi_buffer *b = calloc(1, sizeof *b);
  if (!b) return fail(c, "out of memory");
  b->ptr = c->host->alloc(size ? size : 1, 64);
  if (!b->ptr) {
    free(b);
    return fail(c, "out of memory");
  }
  memset(b->ptr, 0, size); /* the ABI says: zeroed */
  b->size = size;
  *out = b;
  return 0;
}

static int my_buffer_wrap_host(void *ctx, const void *host, size_t size, mi_buffer **out) {
  mi_buffer *b = calloc(1, sizeof *b);
  if (!b) return fail(ctx, "out of memory");
  b->ptr = (void *)host; /* never written through: the ABI promises read-only use */
  b->size = size;
  b->wrapped = 1;
  *out = b;
  return 0;
}

static void my_buffer_free(void *ctx, mi_buffer *b) {
  my_ctx *c = ctx;
  if (!b) return;
  if (!b->wrapped) c->host->free(b->ptr);
  free(b);
}

static void *my_buffer_ptr(void *ctx, mi_buffer *b) { return b->ptr; }

static int my_memcpy(void *ctx, mi_stream *s, void *dst, const void *src, size_t n) {
  memmove(dst, src, n);
  return 0;
}

/* ---- streams: this platform runs synchronously, so NULL streams are all
 * it needs; stream_create/destroy/sync stay NULL (not provided). ---- */

/* ---- kernels ---- */

/* y[M,N] = x[M,K] · w[N,K]ᵀ, f32 accumulation; w in f32, f16 or bf16. */
static int my_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                     mi_dtype w_dtype, int64_t M, int64_t N, int64_t K) {
  if (w_dtype != MI_DTYPE_F32 && w_dtype != MI_DTYPE_F16 && w_dtype != MI_DTYPE_BF16)
    return fail(ctx, "matmul: unsupported weight dtype");
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) {
        float wv;
        if (w_dtype == MI_DTYPE_F32) wv = ((const float *)w)[n * K + k];
        else if (w_dtype == MI_DTYPE_F16) wv = mi_f16_to_f32(((const uint16_t *)w)[n * K + k]);
        else wv = mi_bf16_to_f32(((const uint16_t *)w)[n * K + k]);
        acc += x[m * K + k] * wv;
      }
      y[m * N + n] = acc;
    }
  }
  return 0;
}

static int my_silu_mul(void *ctx, mi_stream *s, float *y, const float *gate, const float *up,
                       int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
  return 0;
}

static int my_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
  return 0;
}

static int my_scale(void *ctx, mi_stream *s, float *y, const float *x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i];
  return 0;
}

/* ABI 1.6: how kernel packs (mi/kernel_pack.h: operators generated from
 * the CKB, e.g. q/k/v biases) run here. Device memory is host memory, so a
 * pack's host-C loop bodies can run on this platform; a serial platform runs
 * the whole range at once (a threaded one splits [0, n) over its threads). */
static int my_run_host(void *ctx, mi_stream *s, void (*body)(void *arg, int64_t i0, int64_t i1), void *arg,
                       int64_t n) {
  (void)ctx, (void)s;
  if (!body || n < 0) return -1;
  if (n) body(arg, 0, n);
  return 0;
}

/* ---- the interface table ---- */

static const mi_platform_iface my_iface = {
    .struct_size = sizeof(mi_platform_iface),
    .variant = my_variant,
    .device_count = my_device_count,
    .device_info = my_device_info,
    .last_error = my_last_error,
    .buffer_alloc = my_buffer_alloc,
    .buffer_wrap_host = my_buffer_wrap_host,
    .buffer_free = my_buffer_free,
    .buffer_ptr = my_buffer_ptr,
    .memcpy_h2d = my_memcpy,
    .memcpy_d2h = my_memcpy,
    .memcpy_d2d = my_memcpy,
    .stream_create = NULL, /* NULL = not provided: synchronous platform */
    .stream_destroy = NULL,
    .stream_sync = NULL,
    .matmul = my_matmul,
    .rmsnorm = NULL, /* NULL = not provided (yet) */
    .rope = NULL,
    .attention = NULL,
    .silu_mul = my_silu_mul,
    .add = my_add,
    .scale = my_scale,
    .embed = NULL,
    .argmax = NULL,
    /* ABI 1.4, the gated-DeltaNet hybrid's blocks (copy2d, l2norm, sigmoid_mul,
     * conv1d_causal, deltanet_gates, gated_delta_rule, rmsnorm_gated): left
     * out, so NULL. A hybrid model lists them in its platform_needs and is
     * refused on this platform with a line naming each one; dense models are
     * not affected. */
    .run_host = my_run_host, /* ABI 1.6: kernel packs run on this platform */
};

static const void *my_get_iface(void *ctx) { return &my_iface; }

/* ---- the descriptor: checked by the core before anything above is called ---- */

static const mi_plugin_desc my_desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = MI_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_PLATFORM,
    .name = "myplatform",
    .version = "0.1.0",
    .description = "template platform: scalar kernels on host memory",
    .probe = my_probe,
    .init = my_init,
    .fini = my_fini,
    .get_iface = my_get_iface,
};

MI_PLUGIN_DEFINE(my_desc)
