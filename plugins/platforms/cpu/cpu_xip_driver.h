/* The exact short-prompt matmul's driver, the same for every ISA: copy x
 * deinterleaved (xip_convert), walk the weight streams (cpu_ip_streams.h)
 * with the ISA's register tile (xip_tile). A template: included once by
 * cpu_kernels_avx2.c and by cpu_kernels_avx512.c, each after defining VL
 * (f32 lanes), XIP_MR (tokens per tile), xip_convert and xip_tile. */
#ifndef MI_CPU_XIP_DRIVER_H
#define MI_CPU_XIP_DRIVER_H

#include <stdint.h>
#include <stdlib.h>

#include "cpu_ip_streams.h"

typedef struct xip_args {
  float *y;
  int64_t ldy;
  const float *xd;
  int64_t ldx;
} xip_args;

/* noinline: inlined into the walk, GCC kept the AVX2 tile's accumulators
 * in memory (half the speed); on its own it keeps them in registers */
static __attribute__((noinline)) void xip_tile_cb(void *arg, int64_t row, int mr,
                                                  const int64_t col[4], const void *const wr[4],
                                                  int nr, int64_t k0, int64_t k1, int accum) {
  const xip_args *a = arg;
  xip_tile(a->y + row * a->ldy, a->ldy, col, a->xd + row * a->ldx, a->ldx, wr, k0, k1, accum, mr,
           nr);
}

/* y[m, n] for m in [m0, m1), n in [n0, n1), bf16 w [N, K]. Returns -1
 * (nothing written) when the x copy cannot be allocated. */
static int xip_matmul(float *y, const float *x, const uint16_t *w, int64_t N, int64_t K,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const int64_t rows = m1 - m0, ldx = (K + 2 * VL - 1) / (2 * VL) * (2 * VL);
  float *xd = aligned_alloc(64, (size_t)rows * (size_t)ldx * sizeof *xd);
  if (!xd) return -1;
  xip_convert(xd, ldx, x + m0 * K, K, rows);
  xip_args a = {y + m0 * N, N, xd, ldx};
  ip_stream_rows(w, (size_t)K * sizeof *w, K, rows, XIP_MR, n0, n1, xip_tile_cb, &a);
  free(xd);
  return 0;
}

#endif
