/* Launch geometry for the shared kernels: which matmul path, grid sizes,
 * the attention partition (rows per block, key tile, split-K) and its
 * shared-memory size. Pure host arithmetic, no runtime calls, so it is
 * unit-tested on machines without a GPU (tests/gpu/test_gpu_host.c). The
 * comments above each kernel in mi_kernels.cu say what they expect. */
#ifndef MI_GPU_LAUNCH_H
#define MI_GPU_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpu_tunables {
  int warp;                                   /* MI_WARP the code object was built with */
  int mm_bm, mm_bn, mm_bk, mm_tm, mm_tn;      /* tiled matmul */
  int gemv_max_m, gemv_threads;               /* GEMV path */
  int att_rows;                               /* target query rows per attention block */
  int att_smem;                               /* shared memory budget per block, bytes */
  int cus;                                    /* compute units / SMs (for split-K) */
} gpu_tunables;

typedef struct gpu_mm_plan {
  int gemv;     /* 1: GEMV kernel; 0: tiled */
  int vec;      /* GEMV: 16-byte vector loads allowed */
  unsigned grid[3], block[3];
} gpu_mm_plan;

/* w_addr/x_addr: the device addresses (only their alignment matters). */
int gpu_plan_matmul(const gpu_tunables *tu, int64_t M, int64_t N, int64_t K, uintptr_t w_addr,
                    uintptr_t x_addr, gpu_mm_plan *out);

typedef struct gpu_attn_plan {
  int TQ, GB, BJ;      /* tokens per block, heads per block, keys per tile */
  int nsplit;          /* split-K factor (1: no combine pass) */
  int64_t split_len;   /* keys per split, a multiple of BJ */
  unsigned grid[3], block[3];
  size_t smem;         /* dynamic shared memory bytes */
  size_t ws_bytes;     /* partials workspace (nsplit > 1), bytes */
} gpu_attn_plan;

/* Returns 0, or -1 when the shape cannot be served (D too large for the
 * shared-memory budget). */
int gpu_plan_attention(const gpu_tunables *tu, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                       int64_t pos0, gpu_attn_plan *out);
size_t gpu_attn_smem_bytes(int R, int BJ, int64_t D);

/* Blocks for a grid-stride elementwise kernel over n elements. */
unsigned gpu_ew_blocks(int64_t n, int threads);

#endif
