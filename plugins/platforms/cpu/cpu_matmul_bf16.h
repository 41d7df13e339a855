/* The bf16-activation prefill matmul (cpu_matmul_bf16.c, AVX-512 BF16):
 * what cpu_kernels_avx512.c and cpu_plugin.c need of it. */
#ifndef MI_CPU_MATMUL_BF16_H
#define MI_CPU_MATMUL_BF16_H

#include <stdint.h>

#include "cpu_internal.h"

/* From this many rows (tokens per thread's call) the bf16 path replaces the
 * exact tiles; below it the exact paths run (decode, M = 1, is always
 * exact). Set by interleaved runs of both (cpu_bench mmbf16, 1 thread, K
 * 1024 and 3072, best of 31): the bf16 tiles were 1.4-1.6x the exact
 * inner-product tiles at 4 rows, ~2x at 6 and 1.7-1.9x the f32
 * outer-product tiles at 8 (the plugin README, "bf16 dot"). */
#define CPU_BF16ACT_MIN_M 4

/* Up to this many rows per call the bf16 path takes inner products of the
 * weight rows as stored, streamed (no panels); more rows share the cost of
 * packing panels. Interleaved runs (cpu_bench mmbf16 style, 2 threads,
 * weights from memory, medians of 61): the inner products were 1.4-1.7x the
 * panels at 4-16 rows, 1.1-1.3x at 24-32, even at 48-64 and behind at 128. */
#ifndef CPU_BF16ACT_IP_MAX_M
#define CPU_BF16ACT_IP_MAX_M 32
#endif

/* y[m, n] = Σ_k bf16(x[m, k]) · w[n, k] for m in [m0, m1), n in [n0, n1):
 * x rounded to bf16 (round to nearest even, VCVTNE2PS2BF16), w bf16 [N, K],
 * products and sums in f32 by VDPBF16PS. Returns 0, or -1 (nothing written)
 * when its scratch cannot be allocated: the caller then runs the exact path.
 * Only call it on a CPU with AVX512_BF16 (cpu_isa.c checked). */
int cpu_matmul_bf16(float *y, const float *x, const uint16_t *w, int64_t N, int64_t K, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1);

/* cpu_kernels_avx512bf16act (cpu_internal.h, defined in cpu_kernels_avx512.c):
 * cpu_kernels_avx512 with matmul_tile sending bf16 weights at
 * M >= CPU_BF16ACT_MIN_M here (matmul_act=auto|bf16 on avx512bf16). */

#endif
