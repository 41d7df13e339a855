/* Launch geometry (see gpu_launch.h). */
#include "gpu_launch.h"

#include "gpu_kernels.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Test-only defect (the emulator built with MI_GPU_MUTANTS, tests/gpu):
 * MI_GPU_MUTANT=skip_tail plans matmul's grid by floor division, so the
 * rows past the last whole block are never computed. */
#ifdef MI_GPU_MUTANTS
#include <stdlib.h>
#include <string.h>
static int64_t mm_blocks(int64_t a, int64_t b) {
  const char *m = getenv("MI_GPU_MUTANT");
  return m && !strcmp(m, "skip_tail") && a >= b ? a / b : cdiv(a, b);
}
#else
#define mm_blocks cdiv
#endif

int gpu_plan_matmul(const gpu_tunables *tu, int64_t M, int64_t N, int64_t K, uintptr_t w_addr,
                    uintptr_t x_addr, gpu_mm_plan *out) {
  gpu_mm_plan p = {0};
  if (M <= 0 || N <= 0 || K <= 0) return -1;
  if (M <= tu->gemv_max_m) {
    /* Decode: one warp per weight row, weights streamed once. */
    int wpb = tu->gemv_threads / tu->warp;
    if (wpb < 1) return -1;
    p.gemv = 1;
    p.vec = K % 8 == 0 && w_addr % 16 == 0 && x_addr % 16 == 0;
    int64_t gx = mm_blocks(N, wpb);
    if (gx > 0x7fffffff) return -1;
    p.grid[0] = (unsigned)gx;
    p.grid[1] = p.grid[2] = 1;
    p.block[0] = (unsigned)tu->gemv_threads;
  } else {
    int64_t gx = mm_blocks(N, tu->mm_bn), gy = cdiv(M, tu->mm_bm);
    if (gx > 0x7fffffff || gy > 65535) return -1;
    p.grid[0] = (unsigned)gx;
    p.grid[1] = (unsigned)gy;
    p.grid[2] = 1;
    p.block[0] = (unsigned)((tu->mm_bm / tu->mm_tm) * (tu->mm_bn / tu->mm_tn));
  }
  p.block[1] = p.block[2] = 1;
  *out = p;
  return 0;
}

size_t gpu_attn_smem_bytes(int R, int BJ, int64_t D) {
  /* sQ[R][D] + sK[BJ][D+1] + sS[R][BJ] + sM,sL,sC[R] */
  return sizeof(float) * ((size_t)R * (size_t)D + (size_t)BJ * (size_t)(D + 1) +
                          (size_t)R * (size_t)BJ + 3u * (size_t)R);
}

int gpu_plan_attention(const gpu_tunables *tu, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                       int64_t pos0, gpu_attn_plan *out) {
  gpu_attn_plan p = {0};
  if (T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || D > MI_ATT_MAX_D || Hq % Hkv || pos0 < 0)
    return -1;
  const int64_t G = Hq / Hkv;
  /* Rows per block: the accumulators (R*D per block) live in registers,
   * MI_ATT_ACC_MAX per thread. */
  int64_t cap = (int64_t)MI_ATT_THREADS * MI_ATT_ACC_MAX / D;
  if (tu->att_rows < cap) cap = tu->att_rows;
  if (cap < 1) return -1;
  int64_t GB = G < cap ? G : cap;
  int64_t TQ = cap / GB;
  if (TQ > T) TQ = T;
  if (TQ < 1) TQ = 1;
  int R = (int)(TQ * GB);
  /* Key tile: as large as the shared-memory budget allows, at most 64. */
  int64_t floats = tu->att_smem / (int64_t)sizeof(float);
  int64_t bj = (floats - (int64_t)R * D - 3 * R) / (D + 1 + R);
  if (bj > 64) bj = 64;
  if (bj < 1) return -1;
  p.TQ = (int)TQ;
  p.GB = (int)GB;
  p.BJ = (int)bj;
  int64_t blocks = Hkv * cdiv(G, GB) * cdiv(T, TQ);
  if (blocks > 0x7fffffff) return -1;
  /* Split-K when the blocks alone cannot fill the device (decode): aim for
   * two blocks per compute unit, at most 64 splits, at least one tile each. */
  const int64_t L = pos0 + T;
  int64_t ntiles = cdiv(L, bj);
  int64_t ns = 1;
  if (tu->cus > 0 && blocks < 2 * (int64_t)tu->cus) ns = cdiv(2 * (int64_t)tu->cus, blocks);
  if (ns > ntiles) ns = ntiles;
  if (ns > 64) ns = 64;
  if (ns < 1) ns = 1;
  int64_t split_len = cdiv(cdiv(L, ns), bj) * bj;
  ns = cdiv(L, split_len);
  p.nsplit = (int)ns;
  p.split_len = split_len;
  p.grid[0] = (unsigned)blocks;
  p.grid[1] = (unsigned)ns;
  p.grid[2] = 1;
  p.block[0] = MI_ATT_THREADS;
  p.block[1] = p.block[2] = 1;
  p.smem = gpu_attn_smem_bytes(R, p.BJ, D);
  p.ws_bytes = ns > 1 ? (size_t)ns * (size_t)T * (size_t)Hq * (size_t)(D + 2) * sizeof(float) : 0;
  *out = p;
  return 0;
}

unsigned gpu_ew_blocks(int64_t n, int threads) {
  int64_t b = cdiv(n, threads);
  if (b > 65535) b = 65535; /* grid-stride loop covers the rest */
  return b < 1 ? 1u : (unsigned)b;
}
