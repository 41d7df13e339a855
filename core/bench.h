/* Machine figures for rooflines: memory bandwidth (STREAM-style) and a
 * measured matmul rate on a platform. */
#ifndef MI_CORE_BENCH_H
#define MI_CORE_BENCH_H

#include <stddef.h>

#include "mi/platform.h"

typedef struct mi_bandwidth {
  double triad_gbs; /* a[i] = b[i] + s·c[i], 3 arrays counted (STREAM convention) */
  double read_gbs;  /* a read-only sum over one array */
} mi_bandwidth;

/* Measures with `threads` threads over arrays of `bytes` each (≥ 4× the
 * last-level cache); best of `reps`. */
int mi_measure_bandwidth(int threads, size_t bytes, int reps, mi_bandwidth *out);

/* GFLOP/s of the platform's matmul for y[M,N] = x[M,K]·w[N,K]ᵀ with w in
 * dtype (best of reps). < 0 on error. */
double mi_measure_matmul_gflops(const mi_platform_iface *P, void *pc, mi_dtype dtype, int64_t M,
                                int64_t N, int64_t K, int reps);

#endif
