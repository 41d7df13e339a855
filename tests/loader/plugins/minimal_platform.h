/* Shared pieces of the loader's test plugins: a tiny, correct platform
 * (host-memory buffers, add, scale, f32 matmul) that each broken plugin
 * breaks in exactly one way. Header-only so every test plugin is one small
 * C file. Option fini_mark=FILE makes fini append "fini\n" to FILE, so tests
 * can see that the loader called it (and when). */
#ifndef MI_TEST_MINIMAL_PLATFORM_H
#define MI_TEST_MINIMAL_PLATFORM_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/platform.h"
#include "mi/plugin.h"

/* Not every test plugin uses every helper. */
#define MP_UNUSED __attribute__((unused))

typedef struct mp_ctx {
  const mi_host_api *host;
  char fini_mark[512];
} mp_ctx;

struct mi_buffer {
  void *p;
  size_t size;
};

MP_UNUSED static int mp_probe(const mi_host_api *host, const mi_options *opts, char *why, size_t n) {
  /* the loader merges conf and extra options: each key must arrive once */
  for (size_t i = 0; i < opts->count; i++)
    for (size_t j = 0; j < i; j++)
      if (strcmp(opts->items[i].key, opts->items[j].key) == 0) {
        snprintf(why, n, "option %s given twice", opts->items[i].key);
        return 0;
      }
  const char *s = host->opt_get(opts, "score");
  return s ? atoi(s) : 10;
}

MP_UNUSED static int mp_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                   size_t n) {
  mp_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  c->host = host;
  const char *mark = host->opt_get(opts, "fini_mark");
  if (mark) snprintf(c->fini_mark, sizeof c->fini_mark, "%s", mark);
  *ctx = c;
  return 0;
}

MP_UNUSED static void mp_fini(void *ctx) {
  mp_ctx *c = ctx;
  if (c->fini_mark[0]) {
    FILE *f = fopen(c->fini_mark, "a");
    if (f) {
      fputs("fini\n", f);
      fclose(f);
    }
  }
  free(c);
}

MP_UNUSED static const char *mp_last_error(void *ctx) { return ""; }

MP_UNUSED static int mp_device_info(void *ctx, int device, mi_device_info *out) {
  snprintf(out->name, sizeof out->name, "test host memory");
  out->host_memory = 1;
  return 0;
}

MP_UNUSED static int mp_buffer_alloc(void *ctx, size_t size, mi_buffer **out) {
  mp_ctx *c = ctx;
  mi_buffer *b = calloc(1, sizeof *b);
  if (!b || !(b->p = c->host->alloc(size ? size : 1, 64))) {
    free(b);
    return -1;
  }
  memset(b->p, 0, size);
  b->size = size;
  *out = b;
  return 0;
}

MP_UNUSED static void mp_buffer_free(void *ctx, mi_buffer *b) {
  mp_ctx *c = ctx;
  if (!b) return;
  c->host->free(b->p);
  free(b);
}

MP_UNUSED static void *mp_buffer_ptr(void *ctx, mi_buffer *b) { return b->p; }

MP_UNUSED static int mp_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
  return 0;
}

MP_UNUSED static int mp_scale(void *ctx, mi_stream *s, float *y, const float *x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i];
  return 0;
}

/* y[M,N] = x[M,K] · w[N,K]ᵀ, f32 weights only */
MP_UNUSED static int mp_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                     mi_dtype wt, int64_t M, int64_t N, int64_t K) {
  if (wt != MI_DTYPE_F32) return -1;
  const float *W = w;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = 0;
      for (int64_t k = 0; k < K; k++) acc += x[m * K + k] * W[n * K + k];
      y[m * N + n] = acc;
    }
  return 0;
}

MP_UNUSED static const mi_platform_iface mp_iface = {
    .struct_size = sizeof(mi_platform_iface),
    .last_error = mp_last_error,
    .device_info = mp_device_info,
    .buffer_alloc = mp_buffer_alloc,
    .buffer_free = mp_buffer_free,
    .buffer_ptr = mp_buffer_ptr,
    .matmul = mp_matmul,
    .add = mp_add,
    .scale = mp_scale,
};

MP_UNUSED static const void *mp_get_iface(void *ctx) { return &mp_iface; }

/* A descriptor with every field right; each broken plugin changes one. */
#define MP_DESC(name_, version_)                                                                   \
  .abi_major = MI_ABI_MAJOR, .abi_minor = MI_ABI_MINOR, .struct_size = sizeof(mi_plugin_desc),     \
  .kind = MI_PLUGIN_PLATFORM, .name = (name_), .version = (version_),                              \
  .description = "loader test plugin", .probe = mp_probe, .init = mp_init, .fini = mp_fini,        \
  .get_iface = mp_get_iface

#endif
