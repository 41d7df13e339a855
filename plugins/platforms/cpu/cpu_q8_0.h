/* Q8_0 weights (GGUF / llama.cpp block_q8_0): what the Q8_0 matmul's
 * driver (cpu_matmul_q8_0.c) and its per-ISA inner loops
 * (cpu_q8_0_{avx2,avx512}.c, the generic ones in the driver) share.
 *
 * Weights as stored, never repacked (they stay zero-copy in the mapped
 * file): a row of K values is K/32 blocks of 34 bytes, an IEEE half d_w
 * then 32 int8 q_w, w = d_w * q_w.
 *
 * Activations, once per call: each row of x cut into blocks of 32 and each
 * block quantized to 8 bits with an f32 scale (llama.cpp's q8_0 activation
 * scheme, but with the scale kept in f32 where llama.cpp rounds it to f16):
 *   amax = max |x_k| over the block,  d_x = amax / 127 (f32),
 *   q_k  = RNE(x_k · (1 / d_x))       (f32 multiply, round to nearest even)
 * so q_k is in [-127, 127]. Every ISA computes those same f32 operations,
 * so q and d_x are bit for bit the same on all of them. Two exceptions:
 *   - amax < CPU_Q8_TINY (a block of zeros, or of values near 2^-100):
 *     d_x = 0, q = 0 (1/d_x would overflow; the block contributes 0);
 *   - a NaN or an infinity in the block: d_x = NaN, q = 0, so every output
 *     it feeds is NaN (as the f32 path would give).
 * Then y[m,n] = Σ_b d_x[m,b] · d_w[n,b] · Σ_{k in b} q_x[m,k] · q_w[n,k]:
 * the inner sums are exact integers (|Σ| <= 32·127·128 < 2^24, exact in
 * f32 too), the scales and the sum over blocks are f32. The error bound
 * this gives is in the plugin README ("Q8_0 weights").
 *
 * Q4_0, Q4_K and Q6_K weights (cpu_quant.h, README "Q4_0, Q4_K and Q6_K
 * weights") take the same quantized activations and the same driver;
 * only the tiles differ (ops.tile_q4_0/q4_k/q6_k). */
#ifndef MI_CPU_Q8_0_H
#define MI_CPU_Q8_0_H

#include <stdint.h>

#include "cpu_internal.h"

#define CPU_Q8_QK 32          /* values per block */
#define CPU_Q8_WBYTES 34      /* bytes per weight block */
#define CPU_Q8_TINY 0x1p-100f /* blocks with a smaller amax quantize to 0 */

/* The quantized activations of one call: rows [0, M) of x, each padded to
 * kp values (a multiple of 64: two blocks, one zmm), the padding zero.
 *   q [M][kp]      int8 q_x
 *   d [M][kp / 32] d_x (0 in the padding)
 *   s [M][kp / 32] -128 · Σ q_x over each block: the panel GEMM's bias
 *                  correction (cpu_q8_0_avx512.c, for Q8_0, Q4_0, Q4_K and
 *                  Q6_K weights); filled by a quantize whose ops say sums
 *   ds [M][kp / 32] fl(d_x · Σ q_x) over each block: the min term of Q4_K,
 *                  Q5_K, Q4_1, Q5_1 (cpu_quant.h); filled by the driver
 *                  only for those (cpu_quant_wants_ds)
 *   sh [M][kp / 32] -128 · Σ q_x over the first 16 values of each block:
 *                  the bias of the Q6_K panels, whose two halves have
 *                  scales of their own; filled with s (the driver takes
 *                  ds and x16 from the two where the quantize fills them)
 *   x16 [M][kp / 16] Σ q_x over each 16 values: the offsets and mins of
 *                  Q2_K and Q3_K, whose scales are per 16 values; filled
 *                  by the driver only for those (cpu_quant_wants_x16)
 * The arrays are 64-byte aligned (the driver's scratch). */
typedef struct cpu_q8_act {
  int64_t M, K, kp;
  int8_t *q;
  float *d;
  int32_t *s;
  float *ds;
  int32_t *sh;
  int16_t *x16;
} cpu_q8_act;

/* The register tile of every block type: activation rows [row, row + mr)
 * (mr <= 4) times the weight rows wr[j] (j < nr valid; the others repeat
 * the last valid one), over weight blocks [b0, b1) (of the weight type:
 * 32 values for Q8_0/Q4_0, 256 for Q4_K/Q6_K):
 *   y[i·ldy + col[j]] (accum ? += : =) the blocks' share of the dot product. */
typedef void cpu_q_tile(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                        int64_t row, int mr, const void *const wr[4], int nr, int64_t b0,
                        int64_t b1, int accum);
typedef cpu_q_tile *cpu_q_tile_fn;

/* From this many tokens per thread's call, ops with a gemm use it instead
 * of the tiles: it packs weight panels (~11 GB/s of weights from memory
 * for 2 threads here), paid back over the tokens. Interleaved runs of both
 * (N 3072, K 1024, 2 threads, weights cold; AMD EPYC, Zen 5 class): equal
 * at 16 tokens, panels 1.15x at 24, 1.4x at 32, 1.8x at 64; tiles ~1.5x
 * at 11 (from cache, panels already won at 11). */
#ifndef CPU_Q8_PANEL_MIN_M
#define CPU_Q8_PANEL_MIN_M 16
#endif

/* One ISA's inner loops. */
typedef struct cpu_q8_ops {
  const char *name; /* "avx512vnni", "avx2", "generic" */
  /* Quantizes rows [m0, m1) of x [M, K] into a (as specified above). */
  void (*quantize)(const cpu_q8_act *a, const float *x, int64_t m0, int64_t m1);
  /* The register tile: activation rows [row, row + mr) (mr <= 4) times the
   * weight rows wr[j] (j < nr valid; the others repeat the last valid one),
   * over blocks [b0, b1):
   *   y[i·ldy + col[j]] (accum ? += : =) Σ_b d_x·d_w·Σ q_x·q_w. */
  cpu_q_tile_fn tile;
  /* Optional (NULL: the tiles do all): prefill, rows [m0, m1) of y [M, ldy]
   * times weight rows [n0, n1) of w (rows wrow bytes apart, type dt), all
   * of K, on packed weight panels. The same sums as the tiles, in another
   * order. gemm_takes(dt): which weight types it packs (the others stay on
   * the tiles). */
  void (*gemm)(float *y, int64_t ldy, const cpu_q8_act *a, int64_t m0, int64_t m1, const void *w,
               mi_dtype dt, size_t wrow, int64_t n0, int64_t n1);
  int (*gemm_takes)(mi_dtype dt);
  /* 1: quantize also fills s and sh (the block sums), from which the driver
   * takes ds and x16 instead of adding the codes again */
  int sums;
  /* The tiles of the other block types (cpu_quant_<isa>.c, and for Q4_1,
   * Q5_0, Q5_1, Q2_K, Q3_K cpu_quant_legacy_<isa>.c / cpu_quant_lowbit_
   * <isa>.c), same contract as tile, on the same quantized activations. */
  cpu_q_tile_fn tile_q4_0, tile_q4_k, tile_q6_k, tile_q5_k;
  cpu_q_tile_fn tile_q4_1, tile_q5_0, tile_q5_1, tile_q2_k, tile_q3_k;
} cpu_q8_ops;

/* Each cpu_q8_0_<isa>.c names its loops quantize and tile, and its
 * cpu_quant_<isa>.c the other block types' tiles cpu_<type>_tile_<isa>:
 * the members every ISA fills (gemm stays optional). Q4_1, Q5_0 and Q5_1
 * come from the ISA legacy, Q2_K and Q3_K from lowbit (AVX-512 runs AVX2's
 * legacy tiles, and its own one-token Q2_K/Q3_K tiles). */
#define CPU_Q8_OPS_BASE(ops_name, isa, legacy, lowbit)                                             \
  .name = (ops_name), .quantize = quantize, .tile = tile, .tile_q4_0 = cpu_q4_0_tile_##isa,        \
  .tile_q4_k = cpu_q4_k_tile_##isa, .tile_q6_k = cpu_q6_k_tile_##isa,                              \
  .tile_q5_k = cpu_q5_k_tile_##isa, .tile_q4_1 = cpu_q4_1_tile_##legacy,                           \
  .tile_q5_0 = cpu_q5_0_tile_##legacy, .tile_q5_1 = cpu_q5_1_tile_##legacy,                        \
  .tile_q2_k = cpu_q2_k_tile_##lowbit, .tile_q3_k = cpu_q3_k_tile_##lowbit

extern const cpu_q8_ops cpu_q8_generic;
#if defined(MI_CPU_X86)
extern const cpu_q8_ops cpu_q8_avx2;
extern const cpu_q8_ops cpu_q8_avx512vnni;
#endif

/* The Q8_0 matmul (cpu_matmul_q8_0.c), after cpu_matmul's checks (M, N,
 * K > 0, pointers set): the quantized path, or the exact one when the
 * context's matmul_exact is set. */
int cpu_matmul_q8_0(cpu_ctx *c, float *y, const float *x, const void *w, int64_t M, int64_t N,
                    int64_t K);
/* 1 for the block types the matmul computes on: every one quant.h
 * defines (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
 * Another (a type appended to mi_dtype later) it refuses, so a loader
 * widens it. */
static inline int cpu_quant_takes(mi_dtype dt) {
  switch (dt) {
  case MI_DTYPE_Q8_0:
  case MI_DTYPE_Q4_0:
  case MI_DTYPE_Q4_1:
  case MI_DTYPE_Q5_0:
  case MI_DTYPE_Q5_1:
  case MI_DTYPE_Q2_K:
  case MI_DTYPE_Q3_K:
  case MI_DTYPE_Q4_K:
  case MI_DTYPE_Q5_K:
  case MI_DTYPE_Q6_K: return 1;
  default: return 0;
  }
}
/* 1 for the types whose per-block min term wants fl(d_x·Σq_x) per
 * activation block (cpu_q8_act.ds): Q4_K, Q5_K (less dmin·m_j·it), Q4_1,
 * Q5_1 (plus m·it). */
static inline int cpu_quant_wants_ds(mi_dtype dt) {
  return dt == MI_DTYPE_Q4_K || dt == MI_DTYPE_Q5_K || dt == MI_DTYPE_Q4_1 || dt == MI_DTYPE_Q5_1;
}
/* The same for any block type dt that cpu_quant_takes. */
int cpu_matmul_quant(cpu_ctx *c, mi_dtype dt, float *y, const float *x, const void *w, int64_t M,
                     int64_t N, int64_t K);
/* dst = the n values (whole blocks) of a row of type dt at src, each
 * rounded once to f32 (exact for Q8_0 and Q4_0). */
void cpu_quant_dequant_row(mi_dtype dt, float *dst, const void *src, int64_t n);
/* 1 for the types that want cpu_q8_act.x16: Q2_K, Q3_K. */
static inline int cpu_quant_wants_x16(mi_dtype dt) {
  return dt == MI_DTYPE_Q2_K || dt == MI_DTYPE_Q3_K;
}
/* The ops for a variant: AVX-512 VNNI needs avx512 + AVX512BW/VL/VNNI
 * (avx512_vnni: cpu_isa_info's flag), else the AVX2 ones from avx2 up. */
const cpu_q8_ops *cpu_q8_ops_for(cpu_isa isa, int avx512_vnni);
/* dst[i] = d_w · q_w for the n values (whole blocks) of a weight row at
 * src: exact (an f16 times an int8 has at most 19 significant bits). */
void cpu_q8_dequant_row(float *dst, const void *src, int64_t n);
/* The kept activation buffer (cpu_ctx.q8): -1 out of memory. */
int cpu_q8_scratch_init(cpu_ctx *c);
void cpu_q8_scratch_free(cpu_ctx *c);

/* The scalar quantization of one block, the definition the SIMD versions
 * reproduce bit for bit: fills q[0..31], returns d_x. */
static inline float cpu_q8_quantize_block(int8_t *q, const float *x) {
  float amax = 0.0f;
  int bad = 0;
  for (int i = 0; i < CPU_Q8_QK; i++) {
    const float v = x[i] < 0 ? -x[i] : x[i];
    bad |= !(v <= 3.4028234663852886e38f); /* NaN or infinity */
    if (v > amax) amax = v;
  }
  if (bad || amax < CPU_Q8_TINY) {
    for (int i = 0; i < CPU_Q8_QK; i++)
      q[i] = 0;
    return bad ? __builtin_nanf("") : 0.0f;
  }
  const float d = amax / 127.0f, id = 1.0f / d;
  for (int i = 0; i < CPU_Q8_QK; i++)
    q[i] = (int8_t)__builtin_lrintf(x[i] * id);
  return d;
}

#endif
