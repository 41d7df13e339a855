/* The weight walk of the short-prompt inner-product matmuls (the exact one
 * in cpu_kernels_avx512.c, the bf16-activation one in cpu_matmul_bf16.c):
 * which 4 weight rows a tile takes next. ISA-free.
 *
 * At a few tokens each weight is used only M times, so the weights, read
 * once, set the pace, and a core keeps the memory system busy only with
 * many fills in flight. As the decode GEMV does (cpu_kernels_avx512.c), the
 * rows of [n0, n1) are taken as IP_STREAMS sequential streams from that
 * many equal parts, far apart: the L2 hardware prefetcher follows each
 * (the tiles also prefetch IP_PF_AHEAD values ahead in each row, which
 * runs on into the stream's next row). 4 adjacent rows read side by side
 * instead (2-6 KB apart, in the same pages) kept about half as many fills
 * in flight (an 11-token prefill's bf16 matmuls, 2 threads: ~240 vs ~380
 * GFLOP/s, medians of interleaved runs). */
#ifndef MI_CPU_IP_STREAMS_H
#define MI_CPU_IP_STREAMS_H

#include <stddef.h>
#include <stdint.h>

#define IP_STREAMS 4     /* weight streams per thread's call */
#define IP_PF_AHEAD 1024 /* values of k (2 KB of bf16) prefetched ahead in a stream */
#define IP_KB 1024       /* values of k per block (ip_outputs) */

/* One register tile: tokens [row, row + mr) of the call times the 4
 * weight rows wr (outputs col[j], j < nr valid; the others repeat the last
 * valid one) over k in [k0, k1); accum: add to y (a later block of k). */
typedef void (*ip_tile_fn)(void *arg, int64_t row, int mr, const int64_t col[4],
                           const void *const wr[4], int nr, int64_t k0, int64_t k1, int accum);

/* 4 outputs at a time: every block of IP_KB values of k, and in it every
 * group of up to mr_max tokens (the 4 rows' block and the tokens' x stay
 * in L1 while all the tokens pass over them). */
static inline void ip_outputs(const int64_t col[4], const void *const wr[4], int nr, int64_t K,
                              int64_t rows, int mr_max, ip_tile_fn fn, void *arg) {
  if (rows <= mr_max) { /* one tile: nothing to keep in L1 for a second one */
    fn(arg, 0, (int)rows, col, wr, nr, 0, K, 0);
    return;
  }
  for (int64_t k0 = 0; k0 < K; k0 += IP_KB) {
    const int64_t k1 = K - k0 < IP_KB ? K : k0 + IP_KB;
    for (int64_t i = 0; i < rows; i += mr_max)
      fn(arg, i, rows - i < mr_max ? (int)(rows - i) : mr_max, col, wr, nr, k0, k1, k0 > 0);
  }
}

/* rows tokens times weight rows [n0, n1) (wrow bytes apart, K values each),
 * in tiles of up to mr_max tokens x 4 outputs. */
static inline void ip_stream_rows(const void *w, size_t wrow, int64_t K, int64_t rows, int mr_max,
                                  int64_t n0, int64_t n1, ip_tile_fn fn, void *arg) {
  const int64_t chunk = (n1 - n0) / IP_STREAMS; /* rows per stream */
  int64_t col[4];
  const void *wr[4];
  for (int64_t r = 0; r < chunk; r++)
    for (int t = 0; t < IP_STREAMS; t += 4) {
      for (int j = 0; j < 4; j++) {
        col[j] = n0 + (t + j) * chunk + r;
        wr[j] = (const char *)w + (size_t)col[j] * wrow;
      }
      ip_outputs(col, wr, 4, K, rows, mr_max, fn, arg);
    }
  for (int64_t n = n0 + IP_STREAMS * chunk; n < n1; n += 4) { /* the rows left, 4 at a time */
    const int nr = n1 - n < 4 ? (int)(n1 - n) : 4;
    for (int j = 0; j < 4; j++) {
      col[j] = n + (j < nr ? j : nr - 1);
      wr[j] = (const char *)w + (size_t)col[j] * wrow;
    }
    ip_outputs(col, wr, nr, K, rows, mr_max, fn, arg);
  }
}

#endif
