/* Block-type weights widened to f32 for the exact path (matmul_act=f32)
 * and for embed: each value rounded once from the value sdk/include/mi/
 * quant.h defines (mi_quant_value64), bit for bit the same, but a block at a
 * time: its f16 scales converted once, each sub-block's scale and min
 * unpacked once, then a loop of 16 or 32 values the compiler vectorizes.
 * quant.h's definition decodes every value on its own (the switch, the
 * f16 conversions and the scale bytes per value), which made the exact
 * path about ten times slower than the memory it reads.
 *
 * Why the same bits: every product below is the definition's product in
 * the same order and in double; each is exact in double (at most 11 + 8 +
 * 7 significant bits), so only the one subtraction of Q4_K rounds (in
 * double, as the definition's does) before the one rounding to f32. Q8_0
 * and Q4_0 are exact in f32 already (an f16 times a small integer). Held to
 * the definition bit for bit by test_cpu_quant's embed check (random
 * blocks of every type through embed, which widens with this). */

#include "cpu_internal.h"
#include "cpu_quant.h"
#include "mi/quant.h"

void cpu_q8_dequant_row(float *dst, const void *src, int64_t n) {
  const uint8_t *p = src;
  for (int64_t b = 0; b < n / CPU_Q8_QK; b++, p += CPU_Q8_WBYTES) {
    const float d = mi_quant_f16(p);
    for (int i = 0; i < CPU_Q8_QK; i++)
      dst[b * CPU_Q8_QK + i] = d * (float)(int8_t)p[2 + i];
  }
}

/* Q4_0: d · (code - 8), codes 0-15 in the low nibbles, 16-31 in the high. */
static void q4_0_row(float *dst, const uint8_t *p, int64_t nb) {
  for (int64_t b = 0; b < nb; b++, p += CPU_Q4_0_BYTES, dst += 32) {
    const float d = mi_quant_f16(p);
    for (int i = 0; i < 16; i++) {
      dst[i] = d * (float)((p[2 + i] & 15) - 8);
      dst[16 + i] = d * (float)((p[2 + i] >> 4) - 8);
    }
  }
}

/* Q4_K: (d·sc_j)·code - dmin·m_j per sub-block j of 32 values; sub-block
 * 2c takes the low nibbles of bytes 32c.., 2c+1 the high ones. */
static void q4_k_row(float *dst, const uint8_t *p, int64_t nb) {
  for (int64_t b = 0; b < nb; b++, p += CPU_Q4_K_BYTES, dst += 256) {
    const double d = mi_quant_f16(p), dmin = mi_quant_f16(p + 2);
    for (int j = 0; j < 8; j++) {
      int sc, m;
      mi_q4_k_scale_min(p + 4, j, &sc, &m);
      const double a = d * sc, c = dmin * m;
      const uint8_t *q = p + 16 + 32 * (j / 2);
      const int shift = (j & 1) * 4;
      float *o = dst + 32 * j;
      for (int l = 0; l < 32; l++)
        o[l] = (float)(a * ((q[l] >> shift) & 15) - c);
    }
  }
}

/* Q6_K: (d·sc_s)·(code - 32) per sub-block s of 16 values; value
 * i = 128h + 32·quarter + l takes ql[64h + l + 32·(quarter & 1)] (high
 * nibble for quarters 2, 3) and bits 2·quarter of qh[32h + l]. */
static void q6_k_row(float *dst, const uint8_t *p, int64_t nb) {
  for (int64_t b = 0; b < nb; b++, p += CPU_Q6_K_BYTES, dst += 256) {
    const double d = mi_quant_f16(p + 208);
    for (int h = 0; h < 2; h++)
      for (int quarter = 0; quarter < 4; quarter++) {
        const uint8_t *ql = p + 64 * h + 32 * (quarter & 1), *qh = p + 128 + 32 * h;
        const int lshift = (quarter & 2) ? 4 : 0, hshift = 2 * quarter;
        float *o = dst + 128 * h + 32 * quarter;
        for (int half = 0; half < 2; half++) { /* two sub-blocks of 16, their own scale */
          const double a = d * (int8_t)p[192 + (128 * h + 32 * quarter + 16 * half) / 16];
          for (int l = 16 * half; l < 16 * half + 16; l++) {
            const int code = ((ql[l] >> lshift) & 15) | ((qh[l] >> hshift) & 3) << 4;
            o[l] = (float)(a * (code - 32));
          }
        }
      }
  }
}

void cpu_quant_dequant_row(mi_dtype dt, float *dst, const void *src, int64_t n) {
  const int64_t nb = n / mi_dtype_block(dt);
  switch (dt) {
  case MI_DTYPE_Q8_0: cpu_q8_dequant_row(dst, src, n); break;
  case MI_DTYPE_Q4_0: q4_0_row(dst, src, nb); break;
  case MI_DTYPE_Q4_K: q4_k_row(dst, src, nb); break;
  case MI_DTYPE_Q6_K: q6_k_row(dst, src, nb); break;
  default: mi_quant_row_f32(dt, src, n, dst); break; /* the definition, rounded once */
  }
}
