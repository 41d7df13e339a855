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
  MI_DTYPE_COUNT
} mi_dtype;

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
  default: return "?";
  }
}

/* bf16 <-> f32: bf16 is the top half of an IEEE f32; round to nearest even. */
static inline float mi_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t mi_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
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
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t mi_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
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
