/* Buffers, copies and streams. Device memory is host memory here:
 * buffer_alloc gives 64-byte aligned zeroed memory (one cache line, one
 * AVX-512 vector), buffer_wrap_host is zero-copy (mmapped weights stay in the
 * page cache), copies are memcpy and streams are synchronous no-ops — but
 * they are real objects, so a caller that creates/destroys/syncs them works
 * unchanged on a GPU platform. */
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu_internal.h"

#define CPU_ALIGN 64
#define CPU_HUGE ((size_t)2 << 20) /* x86-64 huge page */
#define CPU_BUFFER_MAGIC 0x6d694355u /* "UCim" */
#define CPU_STREAM_MAGIC 0x6d695353u

struct mi_buffer {
  uint32_t magic;
  int owned; /* 1: ptr is ours (buffer_alloc); 0: wrapped host memory */
  void *ptr;
  size_t size;
};

struct mi_stream {
  uint32_t magic;
};

int cpu_buffer_alloc(void *ctx, size_t size, mi_buffer **out) {
  cpu_ctx *c = ctx;
  if (!out) return cpu_fail(c, "buffer_alloc: NULL out pointer");
  *out = NULL;
  if (size > SIZE_MAX - CPU_ALIGN) return cpu_fail(c, "buffer_alloc: size %zu too large", size);
  /* Round up so vector loops may touch the whole last line; 0 bytes still
   * gives a valid, distinct pointer. */
  size_t alloc = size ? (size + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN : CPU_ALIGN;
  mi_buffer *b = malloc(sizeof *b);
  void *p = NULL;
  /* Large buffers (the KV cache) on 2 MiB boundaries, with transparent huge
   * pages requested: attention walks one head's rows a few KiB apart, so
   * with 4 KiB pages nearly every row is a TLB miss (measured: huge pages
   * make prefill attention ~17% faster). Where THP is off, madvise fails
   * harmlessly and the buffer is an ordinary one. */
  const size_t align = alloc >= CPU_HUGE ? CPU_HUGE : CPU_ALIGN;
  if (!b || posix_memalign(&p, align, alloc) != 0) {
    free(b);
    return cpu_fail(c, "buffer_alloc: out of memory allocating %zu bytes", size);
  }
#ifdef MADV_HUGEPAGE
  if (align == CPU_HUGE) (void)madvise(p, alloc / CPU_HUGE * CPU_HUGE, MADV_HUGEPAGE);
#endif
  memset(p, 0, alloc);
  b->magic = CPU_BUFFER_MAGIC;
  b->owned = 1;
  b->ptr = p;
  b->size = size;
  *out = b;
  return 0;
}

int cpu_buffer_wrap_host(void *ctx, const void *host, size_t size, mi_buffer **out) {
  cpu_ctx *c = ctx;
  if (!out) return cpu_fail(c, "buffer_wrap_host: NULL out pointer");
  *out = NULL;
  if (!host && size) return cpu_fail(c, "buffer_wrap_host: NULL host pointer for %zu bytes", size);
  mi_buffer *b = malloc(sizeof *b);
  if (!b) return cpu_fail(c, "buffer_wrap_host: out of memory");
  b->magic = CPU_BUFFER_MAGIC;
  b->owned = 0;
  /* The interface promises the wrapped memory is never written through the
   * buffer; we keep it non-const only because buffer_ptr returns void *. */
  b->ptr = (void *)(uintptr_t)host;
  b->size = size;
  *out = b;
  return 0;
}

void cpu_buffer_free(void *ctx, mi_buffer *buf) {
  (void)ctx;
  if (!buf) return;
  if (buf->magic != CPU_BUFFER_MAGIC) return; /* not ours: leaking beats corrupting */
  if (buf->owned) free(buf->ptr);
  buf->magic = 0;
  free(buf);
}

void *cpu_buffer_ptr(void *ctx, mi_buffer *buf) {
  cpu_ctx *c = ctx;
  if (!buf || buf->magic != CPU_BUFFER_MAGIC) {
    cpu_fail(c, "buffer_ptr: not a cpu buffer");
    return NULL;
  }
  return buf->ptr;
}

static int copy(cpu_ctx *c, const char *what, void *dst, const void *src, size_t n) {
  if (n == 0) return 0;
  if (!dst || !src) return cpu_fail(c, "%s: NULL %s for %zu bytes", what, dst ? "source" : "destination", n);
  memmove(dst, src, n); /* d2d may overlap within one buffer */
  return 0;
}

int cpu_memcpy_h2d(void *ctx, mi_stream *s, void *dst, const void *src, size_t n) {
  (void)s;
  return copy(ctx, "memcpy_h2d", dst, src, n);
}
int cpu_memcpy_d2h(void *ctx, mi_stream *s, void *dst, const void *src, size_t n) {
  (void)s;
  return copy(ctx, "memcpy_d2h", dst, src, n);
}
int cpu_memcpy_d2d(void *ctx, mi_stream *s, void *dst, const void *src, size_t n) {
  (void)s;
  return copy(ctx, "memcpy_d2d", dst, src, n);
}

int cpu_stream_create(void *ctx, mi_stream **out) {
  cpu_ctx *c = ctx;
  if (!out) return cpu_fail(c, "stream_create: NULL out pointer");
  *out = malloc(sizeof **out);
  if (!*out) return cpu_fail(c, "stream_create: out of memory");
  (*out)->magic = CPU_STREAM_MAGIC;
  return 0;
}

void cpu_stream_destroy(void *ctx, mi_stream *s) {
  (void)ctx;
  if (!s || s->magic != CPU_STREAM_MAGIC) return;
  s->magic = 0;
  free(s);
}

int cpu_stream_sync(void *ctx, mi_stream *s) {
  cpu_ctx *c = ctx;
  /* Kernels run synchronously: by the time a call returns its work is done. */
  if (s && s->magic != CPU_STREAM_MAGIC) return cpu_fail(c, "stream_sync: not a cpu stream");
  return 0;
}
