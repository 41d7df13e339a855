/* Machine figures for rooflines: memory bandwidth (STREAM-style). */
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

#endif
