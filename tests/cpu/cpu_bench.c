/* Micro-benchmark for the CPU platform's hot kernels (not a test).
 *   cpu_bench [threads] [isa]
 * GEMV (decode, M=1) with bf16 weights: GB/s of weights streamed, on shapes
 * of Qwen3-0.6B (N=3072,K=1024: an MLP projection; N=151936,K=1024: lm_head).
 * Prefill-shape matmul M=256,N=3072,K=1024 bf16: GFLOP/s. Attention decode
 * at 1024 cached positions: GB/s of KV streamed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mi/platform.h"
#include "mi/plugin.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *opt_get(const mi_options *o, const char *key) {
  const char *v = NULL;
  for (size_t i = 0; i < o->count; i++)
    if (strcmp(o->items[i].key, key) == 0) v = o->items[i].value;
  return v;
}

int main(int argc, char **argv) {
  const char *threads = argc > 1 ? argv[1] : "2";
  const char *isa = argc > 2 ? argv[2] : "auto";
  const char *path = getenv("MI_CPU_PLUGIN") ? getenv("MI_CPU_PLUGIN") : MI_CPU_PLUGIN_PATH;
  void *dl = dlopen(path, RTLD_NOW);
  if (!dl) {
    fprintf(stderr, "cpu_bench: %s\n", dlerror());
    return 1;
  }
  const mi_plugin_desc *d = ((mi_plugin_entry_fn)dlsym(dl, MI_PLUGIN_ENTRY_SYMBOL))();
  mi_host_api host = {.struct_size = sizeof host, .abi_minor = MI_ABI_MINOR, .opt_get = opt_get};
  mi_kv kv[] = {{"threads", threads}, {"isa", isa}};
  mi_options opts = {kv, 2};
  void *ctx;
  char err[512];
  if (d->init(&host, &opts, &ctx, err, sizeof err)) {
    fprintf(stderr, "cpu_bench: %s\n", err);
    return 1;
  }
  const mi_platform_iface *pi = d->get_iface(ctx);
  printf("variant %s, threads %s\n", pi->variant(ctx), threads);

  const long K = 1024, NB = 151936;
  uint16_t *w = malloc((size_t)NB * K * 2);
  for (size_t i = 0; i < (size_t)NB * K; i++) w[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 256);
  float *x = malloc(256 * K * 4), *y = malloc((size_t)256 * NB * 4);
  for (long i = 0; i < 256 * K; i++) x[i] = (float)((i % 17) - 8) / 8.0f;

  long Ns[] = {3072, NB};
  for (int c = 0; c < 2; c++) {
    long N = Ns[c];
    int reps = N > 10000 ? 5 : 200;
    /* GEMV on weights larger than the caches: rotate over disjoint slices
     * of the big matrix for the small shape so each call streams from DRAM */
    long slices = NB / N;
    pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_BF16, 1, N, K);
    double t0 = now();
    for (int r = 0; r < reps; r++)
      pi->matmul(ctx, NULL, y, x, w + (size_t)(r % slices) * N * K, MI_DTYPE_BF16, 1, N, K);
    double dt = (now() - t0) / reps;
    printf("GEMV bf16 M=1 N=%ld K=%ld: %.3f ms, %.2f GB/s of weights\n", N, K, dt * 1e3,
           (double)N * K * 2 / dt / 1e9);
  }
  {
    long M = 256, N = 3072;
    pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_BF16, M, N, K);
    int reps = 5;
    double t0 = now();
    for (int r = 0; r < reps; r++) pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_BF16, M, N, K);
    double dt = (now() - t0) / reps;
    printf("matmul bf16 M=%ld N=%ld K=%ld: %.2f ms, %.1f GFLOP/s\n", M, N, K, dt * 1e3,
           2.0 * M * N * K / dt / 1e9);
    pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_F32, M, N / 2, K);
    t0 = now();
    for (int r = 0; r < reps; r++) pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_F32, M, N / 2, K);
    dt = (now() - t0) / reps;
    printf("matmul f32  M=%ld N=%ld K=%ld: %.2f ms, %.1f GFLOP/s\n", M, N / 2, K, dt * 1e3,
           2.0 * M * (N / 2) * K / dt / 1e9);
  }
  {
    long Hq = 16, Hkv = 8, D = 128, pos0 = 1023;
    float *kc = calloc((size_t)(pos0 + 1) * Hkv * D, 4), *vc = calloc((size_t)(pos0 + 1) * Hkv * D, 4);
    float *q = calloc((size_t)Hq * D, 4), *o = malloc((size_t)Hq * D * 4);
    int reps = 200;
    double t0 = now();
    for (int r = 0; r < reps; r++)
      pi->attention(ctx, NULL, o, q, kc, vc, MI_DTYPE_F32, 1, Hq, Hkv, D, pos0, 0.088f);
    double dt = (now() - t0) / reps;
    printf("attention decode pos=%ld Hq=%ld Hkv=%ld D=%ld: %.3f ms, %.2f GB/s of KV (8 MB: cache)\n",
           pos0, Hq, Hkv, D, dt * 1e3, 2.0 * (pos0 + 1) * Hkv * D * 4 / dt / 1e9);
    long T = pos0 + 1;
    float *qp = calloc((size_t)T * Hq * D, 4), *op = malloc((size_t)T * Hq * D * 4);
    t0 = now();
    pi->attention(ctx, NULL, op, qp, kc, vc, MI_DTYPE_F32, T, Hq, Hkv, D, 0, 0.088f);
    dt = now() - t0;
    /* causal: T(T+1)/2 score rows per head, 2 FLOP per MAC, QK and PV */
    printf("attention prefill T=%ld Hq=%ld Hkv=%ld D=%ld: %.1f ms, %.1f GFLOP/s\n", T, Hq, Hkv, D,
           dt * 1e3, 4.0 * Hq * D * (T * (T + 1) / 2.0) / dt / 1e9);
    free(qp);
    free(op);
    free(kc);
    free(vc);
    free(q);
    free(o);
  }
  d->fini(ctx);
  free(w);
  free(x);
  free(y);
  return 0;
}
