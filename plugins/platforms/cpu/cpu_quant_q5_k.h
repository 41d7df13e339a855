/* The Q5_K tile (GGUF / llama.cpp block_q5_K; layout and exact value in
 * sdk/include/mi/quant.h): portable C, included by each ISA's
 * cpu_quant_<isa>.c so the compiler builds it for that ISA (no hand-written
 * SIMD tile yet). The same activations as every block type (cpu_q8_0.h: per
 * row, per block of 32, d_x and q_x in [-127, 127]); per weight sub-block j
 * of 32 (one activation block), all integer sums exact in int32:
 *   y += d_x·(d·(sc_j·Σ q_x·q) - dmin·(m_j·Σ q_x)),  q in 0..31
 * sc_j·Σ q_x·q is at most 63·32·127·31 < 2^23, exact in f32 too. The bound
 * is Q4_K's (plugins/platforms/cpu/README.md, "Q4_0, Q4_K and Q6_K
 * weights"): the activations' rounding, the weights' values exact. */
#ifndef MI_CPU_QUANT_Q5_K_H
#define MI_CPU_QUANT_Q5_K_H

#include "cpu_quant.h"

/* One output over Q5_K blocks [b0, b1). */
static inline float cpu_q5_k_row(const uint8_t *w, const int8_t *qx, const float *dx, int64_t b0, int64_t b1) {
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * CPU_Q5_K_BYTES;
    const float d = mi_quant_f16(p), dmin = mi_quant_f16(p + 2);
    uint8_t sm[16];
    cpu_q4_k_scales(sm, p + 4);
    const uint8_t *qh = p + 16;
    for (int j = 0; j < 8; j++) {
      const uint8_t *qs = p + 48 + 32 * (j / 2);
      const int8_t *xb = qx + (b * 8 + j) * 32;
      const int shift = 4 * (j & 1); /* even sub-blocks the low nibbles */
      int32_t isum = 0, xsum = 0;
      for (int l = 0; l < 32; l++) {
        isum += xb[l] * (((qs[l] >> shift) & 15) | ((qh[l] >> j) & 1) << 4);
        xsum += xb[l];
      }
      const float t = d * (float)(sm[j] * isum) - dmin * (float)(sm[8 + j] * xsum);
      s += dx[b * 8 + j] * t;
    }
  }
  return s;
}

/* The tile: each (activation row, weight row) pair one cpu_q5_k_row. */
static inline void cpu_q5_k_tile_rows(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row,
                                      int mr, const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {
  const int64_t nbp = a->kp / 32;
  for (int j = 0; j < nr; j++)
    for (int i = 0; i < mr; i++) {
      const float v = cpu_q5_k_row(wr[j], a->q + (row + i) * a->kp, a->d + (row + i) * nbp, b0, b1);
      float *yo = y + i * ldy + col[j];
      *yo = accum ? *yo + v : v;
    }
}

/* cpu_q5_k_tile_<isa>, in the file that includes this one */
#define CPU_Q5_K_TILE(isa)                                                                                        \
  void cpu_q5_k_tile_##isa(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row, int mr, \
                           const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {                 \
    cpu_q5_k_tile_rows(y, ldy, col, a, row, mr, wr, nr, b0, b1, accum);                                            \
  }

#endif
