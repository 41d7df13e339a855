/* GGUF's block types as MetaInfer reads them: each format's layout and its
 * exact value, the definition every kernel, the load-time widening and the
 * float64 references share. Layouts are llama.cpp's (ggml-common.h's
 * block_q8_0, block_q4_0, block_q4_K, block_q5_K, block_q6_K), little-endian, packed,
 * a row being whole blocks back to back.
 *
 *   Q8_0  32 values, 34 bytes   d (f16) | q[32] int8          x = d*q
 *   Q4_0  32 values, 18 bytes   d (f16) | qs[16]              x = d*(q-8)
 *         value j < 16 is the low nibble of qs[j], value j+16 its high one.
 *   Q4_K  256 values, 144 bytes d (f16) | dmin (f16) | scales[12] | qs[128]
 *         8 sub-blocks of 32 values, sub-block j with a 6-bit scale sc_j
 *         and a 6-bit min m_j: x = d*sc_j*q - dmin*m_j, q in 0..15.
 *         scales: for j < 4, sc_j = s[j] & 63, m_j = s[j+4] & 63; for
 *         j >= 4, sc_j = (s[j+4] & 15) | (s[j-4] >> 6) << 4 and
 *         m_j = (s[j+4] >> 4) | (s[j] >> 6) << 4.
 *         qs: 4 chunks of 64 values, chunk c in qs[32c .. 32c+31]: the low
 *         nibbles are values 64c+l (sub-block 2c), the high ones 64c+32+l
 *         (sub-block 2c+1), l < 32.
 *   Q5_K  256 values, 176 bytes d (f16) | dmin (f16) | scales[12] | qh[32] | qs[128]
 *         Q4_K's sub-blocks, scales and mins and its nibbles (qs as Q4_K's),
 *         plus a fifth bit: value i's is bit j of qh[i % 32], j = i / 32
 *         its sub-block; x = d*sc_j*q - dmin*m_j, q = nibble | bit << 4 in 0..31.
 *   Q6_K  256 values, 210 bytes ql[128] | qh[64] | scales[16] int8 | d (f16)
 *         16 sub-blocks of 16, x = d*scales[i/16]*(q-32), q in 0..63, from
 *         4 low bits in ql and 2 high bits in qh. Two halves of 128 values,
 *         half h using ql[64h ..], qh[32h ..], for l < 32:
 *           value 128h+l     low nibble of ql[64h+l]    | bits 0-1 of qh[32h+l] << 4
 *           value 128h+l+32  low nibble of ql[64h+l+32] | bits 2-3 of qh[32h+l] << 4
 *           value 128h+l+64  high nibble of ql[64h+l]   | bits 4-5 of qh[32h+l] << 4
 *           value 128h+l+96  high nibble of ql[64h+l+32]| bits 6-7 of qh[32h+l] << 4
 *
 *
 * Since 2026-12-07 the CPU platform computes on these too (a platform that
 * does not take them gets them widened at load):
 *   Q4_1  32 values, 20 bytes   d (f16) | m (f16) | qs[16]    x = d*q + m, q in 0..15
 *         (nibbles as Q4_0's: value j < 16 low nibble of qs[j], j+16 its high one)
 *   Q5_0  32 values, 22 bytes   d (f16) | qh (u32) | qs[16]   x = d*(q-16), q in 0..31
 *   Q5_1  32 values, 24 bytes   d (f16) | m (f16) | qh (u32) | qs[16]   x = d*q + m
 *         (Q4_0's nibbles; bit i of the little-endian qh is value i's fifth bit)
 *   Q2_K  256 values, 84 bytes  scales[16] | qs[64] | d (f16) | dmin (f16)
 *         16 sub-blocks of 16, sub-block s: sc = scales[s] & 15, m =
 *         scales[s] >> 4, x = d*sc*q - dmin*m, q in 0..3. Value 128n+32j+l
 *         (n < 2, j < 4, l < 32) is bits 2j-2j+1 of qs[32n+l], sub-block
 *         8n + 2j + l/16.
 *   Q3_K  256 values, 110 bytes hmask[32] | qs[64] | scales[12] | d (f16)
 *         16 sub-blocks of 16 with a 6-bit scale u (mi_q3_k_scale), x =
 *         d*(u-32)*q, q in -4..3: for value 128n+32j+l (sub-block
 *         8n + 2j + l/16) the low two bits are bits 2j-2j+1 of qs[32n+l]
 *         and q = that - 4 unless bit 4n+j of hmask[l] is set (then q = that).
 *
 * mi_quant_value64 gives a value exactly (every product above is exact in
 * a double); the f32 row is that value rounded once. */
#ifndef MI_QUANT_H
#define MI_QUANT_H

#include <stdint.h>
#include <string.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline float mi_quant_f16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return mi_f16_to_f32(h);
}

/* Q4_K's sub-block j (0..7) scale and min from its 12 scale bytes. */
static inline void mi_q4_k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* Q6_K's 6-bit code of value i (0..255) of the block at b, 0..63. */
static inline int mi_q6_k_code(const uint8_t *b, int i) {
  const uint8_t *ql = b, *qh = b + 128;
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const uint8_t lo = ql[64 * h + l + (quarter & 1) * 32];
  const int low = (quarter & 2) ? lo >> 4 : lo & 15;
  const int high = (qh[32 * h + l] >> (2 * quarter)) & 3;
  return low | high << 4;
}

/* Q4_K's 4-bit code of value i (0..255) of the block at b, 0..15. */
static inline int mi_q4_k_code(const uint8_t *b, int i) {
  const uint8_t byte = b[16 + 32 * (i / 64) + i % 32];
  return (i % 64) < 32 ? byte & 15 : byte >> 4;
}

/* Q5_K's 5-bit code of value i (0..255) of the block at b, 0..31: Q4_K's
 * nibble (qs at byte 48) and bit i/32 of qh[i % 32] (qh at byte 16). */
static inline int mi_q5_k_code(const uint8_t *b, int i) {
  const uint8_t byte = b[48 + 32 * (i / 64) + i % 32];
  const int low = (i % 64) < 32 ? byte & 15 : byte >> 4;
  return low | ((b[16 + i % 32] >> (i / 32)) & 1) << 4;
}

/* Q3_K's 6-bit scale of sub-block s (0..15) from its 12 scale bytes:
 * low four bits in the nibbles of bytes 0-7 (s < 8 the low ones), high two
 * bits in bytes 8-11 (byte 8 + s % 4, bits 2·(s / 4) and up). */
static inline int mi_q3_k_scale(const uint8_t *sc, int s) {
  const int low = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
  return low | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}

/* The 5-bit code of value i (0..31) of a Q5_0 / Q5_1 block whose qh is at
 * h and nibbles at qs. */
static inline int mi_q5_code(const uint8_t *h, const uint8_t *qs, int i) {
  uint32_t qh;
  memcpy(&qh, h, 4);
  const uint8_t q = qs[i % 16];
  return (i < 16 ? q & 15 : q >> 4) | (int)((qh >> i) & 1) << 4;
}

/* Value i of the block at b (a block of t), exactly. */
static inline double mi_quant_value64(mi_dtype t, const uint8_t *b, int i) {
  switch (t) {
  case MI_DTYPE_Q8_0: return (double)mi_quant_f16(b) * (int8_t)b[2 + i];
  case MI_DTYPE_Q4_0: {
    const uint8_t q = b[2 + i % 16];
    return (double)mi_quant_f16(b) * ((i < 16 ? q & 15 : q >> 4) - 8);
  }
  case MI_DTYPE_Q4_K: {
    int sc, m;
    mi_q4_k_scale_min(b + 4, i / 32, &sc, &m);
    return (double)mi_quant_f16(b) * sc * mi_q4_k_code(b, i) - (double)mi_quant_f16(b + 2) * m;
  }
  case MI_DTYPE_Q5_K: {
    int sc, m;
    mi_q4_k_scale_min(b + 4, i / 32, &sc, &m);
    return (double)mi_quant_f16(b) * sc * mi_q5_k_code(b, i) - (double)mi_quant_f16(b + 2) * m;
  }
  case MI_DTYPE_Q6_K:
    return (double)mi_quant_f16(b + 208) * (int8_t)b[192 + i / 16] * (mi_q6_k_code(b, i) - 32);
  case MI_DTYPE_Q4_1: {
    const uint8_t q = b[4 + i % 16];
    return (double)mi_quant_f16(b) * (i < 16 ? q & 15 : q >> 4) + (double)mi_quant_f16(b + 2);
  }
  case MI_DTYPE_Q5_0: return (double)mi_quant_f16(b) * (mi_q5_code(b + 2, b + 6, i) - 16);
  case MI_DTYPE_Q5_1:
    return (double)mi_quant_f16(b) * mi_q5_code(b + 4, b + 8, i) + (double)mi_quant_f16(b + 2);
  case MI_DTYPE_Q2_K: {
    const int n = i / 128, j = (i % 128) / 32, l = i % 32, s = 8 * n + 2 * j + l / 16;
    const int q = (b[16 + 32 * n + l] >> (2 * j)) & 3;
    return (double)mi_quant_f16(b + 80) * (b[s] & 15) * q -
           (double)mi_quant_f16(b + 82) * (b[s] >> 4);
  }
  case MI_DTYPE_Q3_K: {
    const int n = i / 128, j = (i % 128) / 32, l = i % 32, s = 8 * n + 2 * j + l / 16;
    const int q = ((b[32 + 32 * n + l] >> (2 * j)) & 3) - ((b[l] >> (4 * n + j)) & 1 ? 0 : 4);
    return (double)mi_quant_f16(b + 108) * (mi_q3_k_scale(b + 96, s) - 32) * q;
  }
  default: return 0.0;
  }
}

/* The n values (whole blocks) of a row at src, exactly / rounded once to
 * f32. n must be a multiple of mi_dtype_block(t) and t a block type. */
static inline void mi_quant_row_f64(mi_dtype t, const void *src, int64_t n, double *dst) {
  const int64_t qk = mi_dtype_block(t);
  const size_t bb = mi_dtype_block_bytes(t);
  const uint8_t *p = (const uint8_t *)src;
  for (int64_t b = 0; b < n / qk; b++, p += bb)
    for (int i = 0; i < (int)qk; i++)
      dst[b * qk + i] = mi_quant_value64(t, p, i);
}

static inline void mi_quant_row_f32(mi_dtype t, const void *src, int64_t n, float *dst) {
  const int64_t qk = mi_dtype_block(t);
  const size_t bb = mi_dtype_block_bytes(t);
  double v[MI_QK_K]; /* one block's exact values (MI_QK_K: the largest block) */
  for (int64_t b = 0; b < n / qk; b++) {
    mi_quant_row_f64(t, (const uint8_t *)src + (size_t)b * bb, qk, v);
    for (int64_t i = 0; i < qk; i++)
      dst[b * qk + i] = (float)v[i];
  }
}

#ifdef __cplusplus
}
#endif
#endif
