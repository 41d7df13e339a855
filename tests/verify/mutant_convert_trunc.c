/* Defect: convert narrows f32 to f16/bf16 by dropping the low mantissa bits
 * (round toward zero) instead of rounding to nearest even -- the cheap
 * conversion a kernel writer reaches for. Exact on every value that needs no
 * rounding, so only a contract that checks the last bit catches it. */
#include <string.h>

#include "mutant.h"
#include "mi/tensor.h"

const char mutant_name[] = "mutant_convert_trunc";

static uint16_t trunc_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, man = u & 0x7fffffu;
  int32_t exp = (int32_t)((u >> 23) & 0xffu) - 127 + 15;
  if (((u >> 23) & 0xffu) == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) return exp < -10 ? (uint16_t)sign : (uint16_t)(sign | ((man | 0x800000u) >> (14 - exp)));
  return (uint16_t)(sign | ((uint32_t)exp << 10) | (man >> 13));
}

static int trunc_convert(void *ctx, mi_stream *s, void *dst, mi_dtype dst_dtype, const void *src,
                         mi_dtype src_dtype, int64_t n) {
  if (src_dtype != MI_DTYPE_F32 || (dst_dtype != MI_DTYPE_F16 && dst_dtype != MI_DTYPE_BF16))
    return mutant_real->convert(ctx, s, dst, dst_dtype, src, src_dtype, n);
  const float *x = src;
  uint16_t *y = dst;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    y[i] = dst_dtype == MI_DTYPE_BF16 ? (uint16_t)(u >> 16) : trunc_f16(x[i]);
  }
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->convert = trunc_convert; }
