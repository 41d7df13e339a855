/* Micro-benchmark for the CPU platform's hot kernels (not a test).
 *   cpu_bench [threads] [isa]
 *   cpu_bench [threads] [isa] mm    prefill matmul only, by number of rows
 *   cpu_bench [threads] [isa] gdr   the gated delta rule (chunked prefill vs token by token; decode)
 *   cpu_bench [threads] [isa] attn  prefill attention at 256..4096 tokens, f16 cache, chunks of 512
 *   cpu_bench [threads] [isa] layer the seven matmuls of a Qwen3-0.6B layer at M = 11, 256, 512
 *   cpu_bench [threads] [isa] mmbf16  prefill matmul, bf16 weights: the exact f32 path
 *                                   (matmul_act=f32) against the bf16-activation one
 *                                   (matmul_act=bf16, avx512bf16 only), interleaved
 * GEMV (decode, M=1) with bf16 weights: GB/s of weights streamed, on shapes
 * of Qwen3-0.6B (N=3072,K=1024: an MLP projection; N=151936,K=1024: lm_head).
 * Prefill-shape matmul M=256,N=3072,K=1024 bf16: GFLOP/s. Attention decode
 * at 1024 cached positions: GB/s of KV streamed. Decode sweep: every matmul
 * of one Qwen3-0.6B token from its own weights (1.19 GB, larger than the
 * caches), per matrix and in all: what the GEMV streams when it is the only
 * thing running. Attention decode out of the caches: 28 layers' f16 caches at
 * 3000 positions (MI_BENCH_LAYERS=1 keeps one layer's, 12 MB, in cache).
 * Weights and caches sit in 2 MiB pages, as mi-run loads weights. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "mi/platform.h"
#include "mi/plugin.h"

/* MI_BENCH_CPUTIME=1: time = the process's CPU time instead of the wall
 * clock. With 1 thread that is the kernel's own time even on a machine
 * shared with other work (time slices given to others do not count); with
 * more threads it also counts the time threads spin waiting for others. */
static double now(void) {
  static int cpu = -1;
  if (cpu < 0) cpu = getenv("MI_BENCH_CPUTIME") && atoi(getenv("MI_BENCH_CPUTIME")) > 0;
  struct timespec ts;
  clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n bytes, 2 MiB-aligned and advised for huge pages; free() releases it. */
static void *huge_alloc(size_t n) {
  void *p = NULL;
  const size_t huge = (size_t)2 << 20, len = (n + huge - 1) / huge * huge;
  if (posix_memalign(&p, huge, len)) return NULL;
  (void)madvise(p, len, MADV_HUGEPAGE);
  return p;
}

static const char *opt_get(const mi_options *o, const char *key) {
  const char *v = NULL;
  for (size_t i = 0; i < o->count; i++)
    if (strcmp(o->items[i].key, key) == 0) v = o->items[i].value;
  return v;
}

/* The gated delta rule (ABI 1.4) on the ~1B hybrid's DeltaNet shape (16 key
 * and 16 or 32 value heads of 128): prefill as one call (the chunked form)
 * against the same tokens one call each (the recurrent form, as a decode
 * loop runs them), and decode alone: GB/s of recurrent state, which decode
 * reads twice and writes once. "GFLOP/s" counts the recurrent form's
 * 6·Dk·Dv per token and head for both, so the figures compare directly. */
static void bench_gdr(const mi_platform_iface *pi, void *ctx) {
  if (!mi_platform_has(pi, gated_delta_rule)) {
    printf("gated_delta_rule: not provided\n");
    return;
  }
  const long Hk = 16, Dk = 128, Dv = 128, Tmax = 1021;
  for (long Hv = 16; Hv <= 32; Hv += 16) {
    float *q = malloc((size_t)(Tmax * Hk * Dk) * 4), *k = malloc((size_t)(Tmax * Hk * Dk) * 4);
    float *v = malloc((size_t)(Tmax * Hv * Dv) * 4), *o = malloc((size_t)(Tmax * Hv * Dv) * 4);
    float *g = malloc((size_t)(Tmax * Hv) * 4), *b = malloc((size_t)(Tmax * Hv) * 4);
    float *st = calloc((size_t)(Hv * Dk * Dv), 4);
    for (long i = 0; i < Tmax * Hk * Dk; i++) {
      q[i] = (float)(((i * 37) % 29) - 14) / (14.0f * 11.3f);
      k[i] = (float)(((i * 53) % 31) - 15) / (15.0f * 11.3f); /* |k|² < 1 */
    }
    for (long i = 0; i < Tmax * Hv * Dv; i++) v[i] = (float)((i % 19) - 9) / 9.0f;
    for (long i = 0; i < Tmax * Hv; i++) g[i] = -0.05f * (float)(i % 7), b[i] = 0.5f;
    static const long Ts[] = {11, 64, 256, 1021};
    for (size_t c = 0; c < sizeof Ts / sizeof *Ts; c++) {
      const long T = Ts[c];
      const double flop = 6.0 * (double)T * (double)Hv * (double)Dk * (double)Dv;
      double best1 = 1e30, bestT = 1e30;
      for (int r = 0; r < 5; r++) {
        double t0 = now();
        pi->gated_delta_rule(ctx, NULL, o, q, k, v, g, b, st, T, Hk, Hv, Dk, Dv);
        double t1 = now();
        for (long t = 0; t < T; t++)
          pi->gated_delta_rule(ctx, NULL, o + t * Hv * Dv, q + t * Hk * Dk, k + t * Hk * Dk,
                               v + t * Hv * Dv, g + t * Hv, b + t * Hv, st, 1, Hk, Hv, Dk, Dv);
        double t2 = now();
        if (t1 - t0 < best1) best1 = t1 - t0;
        if (t2 - t1 < bestT) bestT = t2 - t1;
      }
      printf("gated_delta_rule Hk=%ld Hv=%ld D=%ld T=%4ld: one call %8.3f ms (%5.1f GFLOP/s), "
             "token by token %8.3f ms (%5.1f GFLOP/s): %.1fx\n",
             Hk, Hv, Dk, T, best1 * 1e3, flop / best1 / 1e9, bestT * 1e3, flop / bestT / 1e9,
             bestT / best1);
    }
    enum { R = 201 };
    double best = 1e30;
    for (int r = 0; r < R; r++) {
      double t0 = now();
      pi->gated_delta_rule(ctx, NULL, o, q, k, v, g, b, st, 1, Hk, Hv, Dk, Dv);
      double t = now() - t0;
      if (t < best) best = t;
    }
    const double bytes = 3.0 * (double)(Hv * Dk * Dv) * 4;
    printf("gated_delta_rule decode Hk=%ld Hv=%ld D=%ld: %.1f us, %.1f GB/s of state (read twice, "
           "written once, %.2f MB), best of %d\n",
           Hk, Hv, Dk, best * 1e6, bytes / best / 1e9, (double)(Hv * Dk * Dv) * 4 / 1e6, R);
    free(q), free(k), free(v), free(o), free(g), free(b), free(st);
  }
}

/* Prefill attention as a model runs it: Qwen3-0.6B's heads (16 query, 8 KV
 * of 128), an f16 cache, prompts of 1021 / 2048 / 4096 tokens in chunks of
 * 512 (the qwen3 plugin's default batch), each chunk attending to the cache
 * so far. GFLOP/s counts QK and PV under the causal mask (as mi-bench's
 * prefill figure does); best of 3. */
static void bench_attn(const mi_platform_iface *pi, void *ctx) {
  const long Hq = 16, Hkv = 8, D = 128, chunk = 512, Ps[] = {256, 1021, 2048, 4096};
  const long Pmax = 4096;
  uint16_t *kc = huge_alloc((size_t)Pmax * Hkv * D * 2), *vc = huge_alloc((size_t)Pmax * Hkv * D * 2);
  float *q = malloc((size_t)chunk * Hq * D * 4), *o = malloc((size_t)chunk * Hq * D * 4);
  if (!kc || !vc || !q || !o) {
    printf("attention prefill: out of memory\n");
    return;
  }
  for (size_t i = 0; i < (size_t)Pmax * Hkv * D; i++) {
    kc[i] = (uint16_t)(0x3000 + (i * 2654435761u >> 22) % 1024); /* f16 in [0.125, 0.25) */
    vc[i] = (uint16_t)(0xb000 + (i * 40503u >> 6) % 1024);
  }
  for (size_t i = 0; i < (size_t)chunk * Hq * D; i++) q[i] = (float)((i * 7u) % 13) / 13.0f - 0.5f;
  for (size_t c = 0; c < sizeof Ps / sizeof Ps[0]; c++) {
    const long P = Ps[c];
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
      double t = 0;
      for (long p0 = 0; p0 < P; p0 += chunk) {
        const long T = P - p0 < chunk ? P - p0 : chunk;
        double t0 = now();
        pi->attention(ctx, NULL, o, q, kc, vc, MI_DTYPE_F16, T, Hq, Hkv, D, p0, 0.088f);
        t += now() - t0;
      }
      if (t < best) best = t;
    }
    const double flops = 4.0 * Hq * D * (P * (P + 1) / 2.0);
    printf("attention prefill f16 P=%ld (chunks of %ld) Hq=%ld Hkv=%ld D=%ld: %.2f ms per layer, "
           "%.1f GFLOP/s\n", P, chunk, Hq, Hkv, D, best * 1e3, flops / best / 1e9);
  }
  free(kc);
  free(vc);
  free(q);
  free(o);
}

/* The seven matmuls of a Qwen3-0.6B layer (q, k, v, o, gate, up, down) at
 * the prefill sizes a model runs (M = 11, 256, 512 tokens), bf16 weights
 * rotating over a 311 MB matrix (from memory, as in the model), x and y
 * as large as the model's: GFLOP/s best of 5, and the layer's time. */
static void bench_layer(const mi_platform_iface *pi, void *ctx, const uint16_t *w, long NB) {
  static const long shapes[7][2] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048},
                                    {3072, 1024}, {3072, 1024}, {1024, 3072}};
  static const char *nm[7] = {"q", "k", "v", "o", "gate", "up", "down"};
  static const long Ms[] = {11, 256, 512};
  float *x = malloc((size_t)512 * 3072 * 4), *y = malloc((size_t)512 * 3072 * 4);
  if (!x || !y) return;
  for (size_t i = 0; i < (size_t)512 * 3072; i++) x[i] = (float)((i % 17) - 8) / 8.0f;
  for (size_t c = 0; c < sizeof Ms / sizeof Ms[0]; c++) {
    const long M = Ms[c];
    double layer = 0, fl = 0;
    printf("M=%ld:", M);
    for (int i = 0; i < 7; i++) {
      const long N = shapes[i][0], K = shapes[i][1];
      const long rows = NB * 1024 / K; /* the matrix seen as rows of K */
      double best = 1e9;
      for (int r = 0; r < 5; r++) {
        const uint16_t *wr = w + (size_t)((r * 7919L * N) % (rows - N)) * K;
        double t0 = now();
        pi->matmul(ctx, NULL, y, x, wr, MI_DTYPE_BF16, M, N, K);
        double t = now() - t0;
        if (t < best) best = t;
      }
      printf(" %s %.0f", nm[i], 2.0 * M * N * K / best / 1e9);
      layer += best;
      fl += 2.0 * M * N * K;
    }
    printf(" GFLOP/s; layer %.2f ms, %.1f GFLOP/s\n", layer * 1e3, fl / layer / 1e9);
  }
  free(x);
  free(y);
}

static int sort_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The prefill matmul with bf16 weights, kernel alone: matmul_act=f32 (the
 * exact f32 outer-product tiles) and matmul_act=bf16 (VDPBF16PS on bf16
 * activations), calls of the two alternating so a busy neighbour slows both
 * alike; best of R (and the median) per mode. M = prompt rows; K = 1024 (the
 * 0.6B's q/k/v/o, gate/up) and 3072 (down); N sized for ~1 ms per call. The
 * weights rotate over a 200+ MB matrix, so they come from memory as in the
 * model. */
static int bench_mmbf16(const mi_plugin_desc *d, mi_host_api *host, const char *threads,
                        const char *isa) {
  void *ctx[2];
  const mi_platform_iface *pi[2];
  static const char *const act[2] = {"f32", "bf16"};
  for (int i = 0; i < 2; i++) {
    mi_kv kv[] = {{"threads", threads}, {"isa", isa}, {"matmul_act", act[i]}};
    mi_options opts = {kv, 3};
    char err[512];
    if (d->init(host, &opts, &ctx[i], err, sizeof err)) {
      fprintf(stderr, "cpu_bench: %s\n", err);
      if (i) d->fini(ctx[0]);
      return 1;
    }
    pi[i] = d->get_iface(ctx[i]);
  }
  printf("variants %s vs %s, threads %s\n", pi[0]->variant(ctx[0]), pi[1]->variant(ctx[1]), threads);
  const long NB = 36864, Kmax = 3072, Mmax = 1021;
  uint16_t *w = huge_alloc((size_t)NB * 1024 * 2); /* NB rows of K = 1024, or a third of them of 3072 */
  float *x = malloc((size_t)Mmax * Kmax * 4), *y = malloc((size_t)Mmax * 3072 * 4);
  if (!w || !x || !y) {
    fprintf(stderr, "cpu_bench: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < (size_t)NB * 1024; i++) w[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 256);
  for (long i = 0; i < Mmax * Kmax; i++) x[i] = (float)((i * 7919 % 4099) - 2049) / 2049.0f;
  static const long Ks[] = {1024, 3072}, Ms[] = {4, 6, 8, 11, 16, 64, 256, 1021};
  for (int kc = 0; kc < 2; kc++)
    for (size_t c = 0; c < sizeof Ms / sizeof Ms[0]; c++) {
      const long K = Ks[kc], M = Ms[c], rows = NB * 1024 / K;
      /* ~150 MFLOP, at least 256 outputs (each thread converts its rows of x
       * once per call: on a handful of panels that would dominate, unlike
       * the model's 1024-3072 outputs) */
      long N = 3 * 24576 * 1024 / (M * K);
      N = N < 256 ? 256 : N > 3072 ? 3072 : N / 32 * 32;
      enum { R = 31 };
      double t[2][R];
      for (int i = 0; i < 2; i++) pi[i]->matmul(ctx[i], NULL, y, x, w, MI_DTYPE_BF16, M, N, K);
      for (int r = 0; r < R; r++)
        for (int i = 0; i < 2; i++) {
          const uint16_t *wr = w + (size_t)(((r * 2 + i) * 7919L * N) % (rows - N)) * K;
          double t0 = now();
          pi[i]->matmul(ctx[i], NULL, y, x, wr, MI_DTYPE_BF16, M, N, K);
          t[i][r] = now() - t0;
        }
      const double fl = 2.0 * M * N * K;
      for (int i = 0; i < 2; i++) qsort(t[i], R, sizeof t[i][0], sort_dbl);
      printf("matmul bf16 M=%4ld N=%4ld K=%ld: f32 %6.1f GFLOP/s (median %6.1f), bf16act %6.1f "
             "(median %6.1f): %.2fx, best of %d\n",
             M, N, K, fl / t[0][0] / 1e9, fl / t[0][R / 2] / 1e9, fl / t[1][0] / 1e9,
             fl / t[1][R / 2] / 1e9, t[0][0] / t[1][0], R);
    }
  for (int i = 0; i < 2; i++) d->fini(ctx[i]);
  free(w);
  free(x);
  free(y);
  return 0;
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
  if (argc > 3 && strcmp(argv[3], "mmbf16") == 0) return bench_mmbf16(d, &host, threads, isa);
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

  if (argc > 3 && strcmp(argv[3], "attn") == 0) {
    bench_attn(pi, ctx);
    d->fini(ctx);
    return 0;
  }
  if (argc > 3 && strcmp(argv[3], "gdr") == 0) {
    bench_gdr(pi, ctx);
    d->fini(ctx);
    return 0;
  }

  const long K = 1024, NB = 151936;
  uint16_t *w = huge_alloc((size_t)NB * K * 2);
  for (size_t i = 0; i < (size_t)NB * K; i++) w[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 256);
  float *x = malloc(1024 * K * 4), *y = malloc((size_t)256 * NB * 4);
  for (long i = 0; i < 1024 * K; i++) x[i] = (float)((i % 17) - 8) / 8.0f;

  if (argc > 3 && strcmp(argv[3], "layer") == 0) {
    bench_layer(pi, ctx, w, NB);
    d->fini(ctx);
    free(w);
    free(x);
    free(y);
    return 0;
  }
  if (argc > 3 && strcmp(argv[3], "mm") == 0) {
    /* Prefill matmul by the number of rows M (prompt tokens), bf16, K=1024,
     * N sized so one call is ~0.5 ms at 100 GFLOP/s: on a shared machine a
     * call that short often runs without being preempted, so the best of
     * 41 calls is the kernel's own rate (the median shows the noise). The
     * weights (N rows) rotate over the 311 MB matrix, so they come from
     * memory as in the model. */
    static const long Ms[] = {1, 2, 3, 4, 6, 8, 11, 16, 32, 64, 256, 1021};
    for (size_t c = 0; c < sizeof Ms / sizeof Ms[0]; c++) {
      const long M = Ms[c];
      long N = 24576 / M;
      N = N < 64 ? 64 : N > 3072 ? 3072 : N / 16 * 16;
      enum { R = 41 };
      double t[R];
      pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_BF16, M, N, K);
      for (int r = 0; r < R; r++) {
        const uint16_t *wr = w + (size_t)((r * 7919L * N) % (NB - N)) * K;
        double t0 = now();
        pi->matmul(ctx, NULL, y, x, wr, MI_DTYPE_BF16, M, N, K);
        t[r] = now() - t0;
      }
      for (int i = 0; i < R; i++)
        for (int j = i + 1; j < R; j++)
          if (t[j] < t[i]) {
            double u = t[i];
            t[i] = t[j];
            t[j] = u;
          }
      printf("matmul bf16 M=%ld N=%ld K=%ld: %.1f GFLOP/s best of %d, %.1f median\n", M, N, K,
             2.0 * M * N * K / t[0] / 1e9, R, 2.0 * M * N * K / t[R / 2] / 1e9);
    }
    d->fini(ctx);
    free(w);
    free(x);
    free(y);
    return 0;
  }

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
    /* One decoded token of Qwen3-0.6B, matmuls only: every layer's q,k,v,o,
     * gate,up,down from its own weights (1.15 GB in all, larger than any
     * cache), then lm_head — the stream decode cannot avoid. */
    const long H = 1024, L = 28, shapes[7][2] = {{2048, H}, {1024, H}, {1024, H}, {H, 2048},
                                                 {3072, H}, {3072, H}, {H, 3072}};
    size_t per_layer = 0;
    for (int i = 0; i < 7; i++) per_layer += (size_t)shapes[i][0] * shapes[i][1];
    size_t total = per_layer * L;
    uint16_t *wl = huge_alloc(total * 2);
    float *xa = malloc(3072 * 4), *ya = malloc(3072 * 4);
    if (wl && xa && ya) {
      for (size_t i = 0; i < total; i++) wl[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 256);
      for (long i = 0; i < 3072; i++) xa[i] = (float)((i % 17) - 8) / 8.0f;
      double best = 1e9, per[8] = {0};
      for (int r = 0; r < 5; r++) {
        double t0 = now();
        const uint16_t *wp = wl;
        for (long l = 0; l < L; l++)
          for (int i = 0; i < 7; i++) {
            double ts = now();
            pi->matmul(ctx, NULL, ya, xa, wp, MI_DTYPE_BF16, 1, shapes[i][0], shapes[i][1]);
            per[i] += now() - ts;
            wp += (size_t)shapes[i][0] * shapes[i][1];
          }
        double ts = now();
        pi->matmul(ctx, NULL, y, x, w, MI_DTYPE_BF16, 1, NB, K);
        per[7] += now() - ts;
        double dt = now() - t0;
        if (dt < best) best = dt;
      }
      for (int i = 0; i < 8; i++) {
        double b = i < 7 ? 2.0 * shapes[i][0] * shapes[i][1] * L : 2.0 * NB * K;
        static const char *nm[8] = {"q", "k", "v", "o", "gate", "up", "down", "lm_head"};
        printf("  %-7s: %.1f ms/token, %.1f GB/s\n", nm[i], per[i] / 5 * 1e3, b * 5 / per[i] / 1e9);
      }
      double bytes = (double)total * 2 + (double)NB * K * 2;
      printf("decode sweep (0.6B matmuls, %.2f GB): %.1f ms, %.2f GB/s, %.1f tok/s bound\n",
             bytes / 1e9, best * 1e3, bytes / best / 1e9, 1.0 / best);
    }
    free(wl);
    free(xa);
    free(ya);
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
    {
      /* Decode attention out of the caches: 28 layers' f16 caches at 3000
       * positions (344 MB), as one token of a long Qwen3-0.6B context reads. */
      const long nl = getenv("MI_BENCH_LAYERS") ? atol(getenv("MI_BENCH_LAYERS")) : 28, P = 3000;
      size_t per = (size_t)P * Hkv * D;
      uint16_t *kl = huge_alloc(per * nl * 2), *vl = huge_alloc(per * nl * 2);
      if (kl && vl) {
        for (size_t i = 0; i < per * nl; i++) kl[i] = vl[i] = (uint16_t)(0x3000 + i % 1024);
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
          double ts = now();
          for (long l = 0; l < nl; l++)
            pi->attention(ctx, NULL, o, q, kl + l * per, vl + l * per, MI_DTYPE_F16, 1, Hq, Hkv, D,
                          P - 1, 0.088f);
          double dt = now() - ts;
          if (dt < best) best = dt;
        }
        printf("attention decode f16, 28 layers at pos %ld: %.2f ms/token, %.2f GB/s of KV\n", P,
               best * 1e3, 2.0 * per * nl * 2 / best / 1e9);
      }
      free(kl);
      free(vl);
    }
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
