/* Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights (GGUF /
 * llama.cpp's blocks; the layouts and the exact values are
 * sdk/include/mi/quant.h):
 * the tiles of the quantized matmul for them, per ISA.
 *
 * The driver is the Q8_0 one (cpu_matmul_q8_0.c): weights read as stored,
 * never repacked (zero-copy in the mapped file), and the activations
 * quantized once per call exactly as for Q8_0 (cpu_q8_0.h): per row, per
 * block of 32, an f32 scale d_x = amax/127 and q_x = RNE(x/d_x) in
 * [-127, 127]. One scale per 32 values is at least as fine as llama.cpp's
 * Q8_K (one per 256), so the activation error is at most that of llama.cpp
 * for the same weights. Per weight block (all sums of integer products
 * exact in int32, everything after in f32):
 *   Q4_0 (32 values):  y += d_x·d · Σ q_x·(q - 8)
 *   Q4_K (256 values): for each sub-block j of 32 (= one activation block):
 *                      y += d_x·(d·sc_j·Σ q_x·q) - dmin·m_j·(d_x·Σ q_x)
 *                      (fl(d_x·Σ q_x) is cpu_q8_act.ds, from the driver)
 *   Q6_K (256 values): for each activation block j (two sub-blocks a, b
 *                      of 16 with int8 scales):
 *                      y += d_x·d · (sc_a·Σ_a q_x·(q - 32) + sc_b·Σ_b ...)
 *   Q4_1, Q5_1 (32):   y += d_x·d · Σ q_x·q + m·fl(d_x·Σ q_x)
 *   Q5_0 (32):         y += d_x·d · Σ q_x·(q - 16)
 *   Q2_K (256, sub-blocks of 16 with 4-bit scale sc and min m): per
 *                      activation block j (sub-blocks a, b):
 *                      y += d_x·(d·(sc_a·Σ_a q_x·q + sc_b·Σ_b q_x·q)
 *                               - dmin·(m_a·Σ_a q_x + m_b·Σ_b q_x))
 *   Q3_K (256, sub-blocks of 16, 6-bit scales u, q in -4..3): per
 *                      activation block j:
 *                      y += d_x·d · ((u_a-32)·Σ_a q_x·q + (u_b-32)·Σ_b ...)
 * The SIMD tiles feed the unsigned codes (q, 0..15 or 0..63) to the u8
 * operand of VPDPBUSD / VPMADDUBSW and q_x to the s8 one, and take the
 * offsets (-8, -32) off as 8·Σq_x / 32·Σq_x per 4-group, computed once per
 * token and reused by the 4 weight rows of a tile. The error bound is the
 * README's ("Q4_0, Q4_K and Q6_K weights"). */
#ifndef MI_CPU_QUANT_H
#define MI_CPU_QUANT_H

#include <stdint.h>
#include <string.h>

#include "cpu_q8_0.h"
#include "mi/quant.h"

#define CPU_Q4_0_BYTES 18
#define CPU_QK_K 256
#define CPU_Q4_K_BYTES 144
#define CPU_Q6_K_BYTES 210
#define CPU_Q5_K_BYTES 176
#define CPU_Q2_K_BYTES 84
#define CPU_Q3_K_BYTES 110

/* Q4_K's 8 scales (bytes 0-7 of out) and 8 mins (bytes 8-15) from its 12
 * scale bytes: llama.cpp's word-wise unpacking, the same values as
 * mi_q4_k_scale_min with a dozen integer ops instead of a loop. */
static inline void cpu_q4_k_scales(uint8_t out[16], const uint8_t *s12) {
  uint32_t u[4];
  memcpy(u, s12, 12);
  const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4); /* m_4..7 */
  const uint32_t m03 = u[1] & k1;                        /* m_0..3 */
  u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);        /* sc_4..7 */
  u[2] = m03;
  u[0] &= k1; /* sc_0..3 */
  memcpy(out, u, 16);
}

/* Q3_K's 16 scales u (0..63) from its 12 scale bytes, word-wise: scale s
 * takes its low four bits from the low nibble of byte s (s < 8) or the
 * high one of byte s - 8, and its high two from bits 2·(s / 4) of byte
 * 8 + s % 4 (mi_q3_k_scale, quant.h). Bytes 8-11 as one word: scales
 * 4q..4q+3 take bits 2q.. of each of its bytes. */
static inline void cpu_q3_k_scales(uint8_t out[16], const uint8_t *s12) {
  uint32_t u[3], o[4];
  memcpy(u, s12, 12);
  const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
  o[0] = (u[0] & lo4) | ((u[2] >> 0) & hi2) << 4;        /* s 0-3 */
  o[1] = (u[1] & lo4) | ((u[2] >> 2) & hi2) << 4;        /* s 4-7 */
  o[2] = ((u[0] >> 4) & lo4) | ((u[2] >> 4) & hi2) << 4; /* s 8-11 */
  o[3] = ((u[1] >> 4) & lo4) | ((u[2] >> 6) & hi2) << 4; /* s 12-15 */
  memcpy(out, o, 16);
}

#if defined(__F16C__)
#include <immintrin.h>
/* The f16 at p as an f32 scalar, by VCVTPH2PS: for the SIMD tiles (their
 * files are built with -mf16c). */
static inline __attribute__((always_inline)) float cpu_f16_at(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
#endif

/* The tiles, per ISA (declared through their type: one signature). */
cpu_q_tile cpu_q4_0_tile_generic, cpu_q4_k_tile_generic, cpu_q6_k_tile_generic,
    cpu_q5_k_tile_generic;
cpu_q_tile cpu_q4_1_tile_generic, cpu_q5_0_tile_generic, cpu_q5_1_tile_generic;
cpu_q_tile cpu_q2_k_tile_generic, cpu_q3_k_tile_generic;
#if defined(MI_CPU_X86)
cpu_q_tile cpu_q4_0_tile_avx2, cpu_q4_k_tile_avx2, cpu_q6_k_tile_avx2, cpu_q5_k_tile_avx2;
cpu_q_tile cpu_q4_1_tile_avx2, cpu_q5_0_tile_avx2, cpu_q5_1_tile_avx2;
cpu_q_tile cpu_q2_k_tile_avx2, cpu_q3_k_tile_avx2;
cpu_q_tile cpu_q4_0_tile_avx512, cpu_q4_k_tile_avx512, cpu_q6_k_tile_avx512, cpu_q5_k_tile_avx512;
cpu_q_tile cpu_q2_k_tile_avx512, cpu_q3_k_tile_avx512;
#endif

#endif
