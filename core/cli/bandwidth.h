/* Machine figures for rooflines: memory bandwidth (STREAM-style) and the
 * FMA peak of a kernel variant (a register-only loop). */
#ifndef MI_CORE_BENCH_H
#define MI_CORE_BENCH_H

#include <stddef.h>

typedef struct mi_bandwidth {
  double triad_gbs; /* a[i] = b[i] + s·c[i], 3 arrays counted (STREAM convention) */
  double read_gbs;  /* a read-only sum over one array */
} mi_bandwidth;

/* Measures with `threads` threads over arrays of `bytes` each (≥ 4× the
 * last-level cache); best of `reps`. */
int mi_measure_bandwidth(int threads, size_t bytes, int reps, mi_bandwidth *out);

/* The arithmetic peak of the CPU platform's kernel variant `variant`
 * ("avx512bf16", "avx512", "avx2", "generic"): FLOP/s of a loop of
 * independent multiply-adds on registers only (no loads, no stores) in the
 * widest vectors that variant uses: zmm FMA for avx512*, ymm FMA for avx2,
 * 128-bit multiply + add for generic (the portable C path is built for
 * baseline x86-64, which has no FMA). Measured with 1 thread (per_thread)
 * and with `threads` threads at once (all); best of `reps` runs of ~2 ms,
 * so a busy neighbour lowers it only if it holds a core for every run.
 * Returns -1 for a variant it does not know or one this CPU lacks. */
typedef struct mi_fma_peak {
  double per_thread_gflops, all_gflops;
  int lanes; /* f32 lanes per vector of the loop */
  int fma;   /* 1: fused multiply-add, 0: separate multiply and add */
} mi_fma_peak;

int mi_measure_fma_peak(const char *variant, int threads, int reps, mi_fma_peak *out);

/* The bf16 dot-product peak, for a variant whose prefill uses VDPBF16PS
 * (the CPU platform's "avx512bf16+bf16act"): a register-only loop of
 * independent VDPBF16PS zmm (16 lanes x 2 multiply-adds each), measured as
 * mi_measure_fma_peak measures (lanes 16, fma 1). Returns -1 for any other
 * variant or a CPU without AVX512_BF16. */
int mi_measure_bf16dot_peak(const char *variant, int threads, int reps, mi_fma_peak *out);

#endif
