/* Element types and tensor views shared by every plugin kind. */
#ifndef MI_TENSOR_H
#define MI_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mi_dtype {
  MI_DTYPE_F32 = 0,
  MI_DTYPE_F16 = 1,
  MI_DTYPE_BF16 = 2,
  MI_DTYPE_I32 = 3,
  MI_DTYPE_I64 = 4,
  MI_DTYPE_U8 = 5,
  /* A block type (GGUF's Q8_0, llama.cpp's block_q8_0): each run of 32
   * values along a row is 34 bytes, an IEEE half scale d then 32 int8 q,
   * value = d * q. A row of n values (n a multiple of 32) is n / 32 blocks
   * back to back, with no padding or alignment. Only weights [N, K] of
   * matmul and tables of embed come in it, on platforms that accept it. */
  MI_DTYPE_Q8_0 = 6,
  /* More of GGUF's block types (llama.cpp's block_q4_0, block_q4_K,
   * block_q6_K), with the same rules as Q8_0: rows of whole blocks, only
   * matmul weights and embed tables, where a platform accepts them. Their
   * layouts and dequantization are in <mi/quant.h>. */
  MI_DTYPE_Q4_0 = 7,  /* 32 values in 18 bytes: f16 d, 16 bytes of nibbles; d*(q-8) */
  MI_DTYPE_Q4_K = 8,  /* 256 values in 144 bytes: 8 sub-blocks with 6-bit scale and min */
  MI_DTYPE_Q6_K = 9,  /* 256 values in 210 bytes: 16 sub-blocks of 16, int8 scales */
  MI_DTYPE_Q5_K = 10, /* 256 values in 176 bytes: Q4_K's scales and mins, a fifth bit per value */
  /* Read and widened at load (no platform computes on them yet): */
  MI_DTYPE_Q4_1 = 11, /* 32 values in 20 bytes: f16 d, f16 m, nibbles; d*q + m */
  MI_DTYPE_Q5_0 = 12, /* 32 values in 22 bytes: f16 d, 32 fifth bits, nibbles; d*(q-16) */
  MI_DTYPE_Q5_1 = 13, /* 32 values in 24 bytes: f16 d, f16 m, 32 fifth bits, nibbles; d*q + m */
  MI_DTYPE_Q2_K = 14, /* 256 values in 84 bytes: 16 sub-blocks, 4-bit scale and min, 2-bit q */
  MI_DTYPE_Q3_K = 15, /* 256 values in 110 bytes: 16 sub-blocks, 6-bit signed scale, 3-bit q */
  MI_DTYPE_COUNT
} mi_dtype;

#define MI_Q8_0_BLOCK 32       /* values per Q8_0 block */
#define MI_Q8_0_BLOCK_BYTES 34 /* bytes per Q8_0 block: f16 d + 32 int8 */
#define MI_Q4_0_BLOCK 32
#define MI_Q4_0_BLOCK_BYTES 18
#define MI_QK_K 256 /* values per K-quant super-block */
#define MI_Q4_K_BLOCK_BYTES 144
#define MI_Q6_K_BLOCK_BYTES 210
#define MI_Q5_K_BLOCK_BYTES 176
#define MI_Q4_1_BLOCK_BYTES 20
#define MI_Q5_0_BLOCK_BYTES 22
#define MI_Q5_1_BLOCK_BYTES 24
#define MI_Q2_K_BLOCK_BYTES 84
#define MI_Q3_K_BLOCK_BYTES 110

/* Bytes per element; 0 for a block type (Q8_0), which has none: size its
 * rows with mi_dtype_row_bytes. */
static inline size_t mi_dtype_size(mi_dtype t) {
  switch (t) {
  case MI_DTYPE_F32: return 4;
  case MI_DTYPE_F16: return 2;
  case MI_DTYPE_BF16: return 2;
  case MI_DTYPE_I32: return 4;
  case MI_DTYPE_I64: return 8;
  case MI_DTYPE_U8: return 1;
  default: return 0;
  }
}

static inline const char *mi_dtype_name(mi_dtype t) {
  switch (t) {
  case MI_DTYPE_F32: return "f32";
  case MI_DTYPE_F16: return "f16";
  case MI_DTYPE_BF16: return "bf16";
  case MI_DTYPE_I32: return "i32";
  case MI_DTYPE_I64: return "i64";
  case MI_DTYPE_U8: return "u8";
  case MI_DTYPE_Q8_0: return "q8_0";
  case MI_DTYPE_Q4_0: return "q4_0";
  case MI_DTYPE_Q4_K: return "q4_k";
  case MI_DTYPE_Q6_K: return "q6_k";
  case MI_DTYPE_Q5_K: return "q5_k";
  case MI_DTYPE_Q4_1: return "q4_1";
  case MI_DTYPE_Q5_0: return "q5_0";
  case MI_DTYPE_Q5_1: return "q5_1";
  case MI_DTYPE_Q2_K: return "q2_k";
  case MI_DTYPE_Q3_K: return "q3_k";
  default: return "?";
  }
}

/* Values per block: 32 for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, 256 for the
 * K-quants, 1 for the element types. */
static inline int64_t mi_dtype_block(mi_dtype t) {
  switch (t) {
  case MI_DTYPE_Q8_0: return MI_Q8_0_BLOCK;
  case MI_DTYPE_Q4_0:
  case MI_DTYPE_Q4_1:
  case MI_DTYPE_Q5_0:
  case MI_DTYPE_Q5_1: return MI_Q4_0_BLOCK;
  case MI_DTYPE_Q2_K:
  case MI_DTYPE_Q3_K:
  case MI_DTYPE_Q4_K:
  case MI_DTYPE_Q5_K:
  case MI_DTYPE_Q6_K: return MI_QK_K;
  default: return 1;
  }
}

/* Bytes per block of a block type; 0 for the element types. */
static inline size_t mi_dtype_block_bytes(mi_dtype t) {
  switch (t) {
  case MI_DTYPE_Q8_0: return MI_Q8_0_BLOCK_BYTES;
  case MI_DTYPE_Q4_0: return MI_Q4_0_BLOCK_BYTES;
  case MI_DTYPE_Q4_K: return MI_Q4_K_BLOCK_BYTES;
  case MI_DTYPE_Q6_K: return MI_Q6_K_BLOCK_BYTES;
  case MI_DTYPE_Q5_K: return MI_Q5_K_BLOCK_BYTES;
  case MI_DTYPE_Q4_1: return MI_Q4_1_BLOCK_BYTES;
  case MI_DTYPE_Q5_0: return MI_Q5_0_BLOCK_BYTES;
  case MI_DTYPE_Q5_1: return MI_Q5_1_BLOCK_BYTES;
  case MI_DTYPE_Q2_K: return MI_Q2_K_BLOCK_BYTES;
  case MI_DTYPE_Q3_K: return MI_Q3_K_BLOCK_BYTES;
  default: return 0;
  }
}

/* 1 for a block type (values come in blocks, a row has no per-element
 * address). */
static inline int mi_dtype_is_block(mi_dtype t) {
  return mi_dtype_block_bytes(t) != 0;
}

/* Bytes of a row of n values in t: n * size for an element type, whole
 * blocks for a block type. 0 when n is not a whole number of blocks (or t
 * is unknown): callers treat 0 as "this shape cannot be stored in t". */
static inline size_t mi_dtype_row_bytes(mi_dtype t, int64_t n) {
  if (n < 0) return 0;
  if (mi_dtype_is_block(t))
    return n % mi_dtype_block(t) ? 0 : (size_t)(n / mi_dtype_block(t)) * mi_dtype_block_bytes(t);
  return (size_t)n * mi_dtype_size(t);
}

/* An f32's IEEE bits, and the f32 of some bits (memcpy: no aliasing). */
static inline uint32_t mi_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float mi_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* bf16 <-> f32: bf16 is the top half of an IEEE f32; round to nearest even. */
static inline float mi_bf16_to_f32(uint16_t h) {
  return mi_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t mi_f32_to_bf16(float f) {
  uint32_t u = mi_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* IEEE half <-> f32, exact for every half value (subnormals included). */
static inline float mi_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        exp--;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return mi_f32_from_bits(u);
}

/* Value i of a float vector stored as t (F32, F16 or BF16; else 0), exactly
 * as f32: the one widening every reader of a stored float vector uses. */
static inline float mi_float_value(mi_dtype t, const void *src, size_t i) {
  const unsigned char *p = (const unsigned char *)src;
  uint16_t h;
  float f;
  switch (t) {
  case MI_DTYPE_F32: memcpy(&f, p + 4 * i, 4); return f;
  case MI_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return mi_f16_to_f32(h);
  case MI_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return mi_bf16_to_f32(h);
  default: return 0.0f;
  }
}

static inline uint16_t mi_f32_to_f16(float f) {
  uint32_t u = mi_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = (int32_t)((u >> 23) & 0xffu) - 127 + 15;
  uint32_t man = u & 0x7fffffu;
  if (((u >> 23) & 0xffu) == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    man |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
  return (uint16_t)half;
}

#ifdef __cplusplus
}
#endif
#endif
