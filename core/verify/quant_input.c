/* Stage 1's inputs of a block type (GGUF's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; layouts
 * in sdk/include/mi/quant.h). A block type has no per-element rounding:
 * values come in blocks that share scales, so an input is drawn as bytes
 * and its values are then what the format defines them to be, exactly
 * (mi_quant_value64). The reference reads those values; the kernel reads
 * the bytes.
 *
 * Two ways to draw the bytes:
 *   - from values (any distribution): each block quantized by round to
 *     nearest, the plainest quantizer of each format, so the weights look
 *     like a real checkpoint's (scales fitted to the data);
 *   - "codes": every code, scale and min uniformly random, the f16 scales
 *     of either sign and of sane magnitude, so the extremes (Q4_K's 6-bit
 *     scales and mins at 63, the high bits of their packing, Q6_K's int8
 *     scale -128, codes 0 and 15/63) all turn up.
 * The quantizers need not match llama.cpp's: any valid block is an input,
 * and the value the reference uses is the block's, not the drawn one. */
#include <math.h>
#include <string.h>

#include "core/runtime/rng.h"
#include "core/verify/quant_input.h"
#include "mi/quant.h"

static void put_f16(uint8_t *p, float v) {
  uint16_t h = mi_f32_to_f16(v);
  memcpy(p, &h, 2);
}

/* v in [lo, hi]; NaN (a hostile generator's value) as lo: never an
 * out-of-range conversion to an integer code */
static double clampd(double v, double lo, double hi) {
  return !(v >= lo) ? lo : v > hi ? hi : v;
}

/* the element of largest magnitude, with its sign */
static double signed_max(const double *x, int n) {
  double m = 0;
  for (int i = 0; i < n; i++)
    if (fabs(x[i]) > fabs(m)) m = x[i];
  return m;
}

static void quant_q8_0(const double *x, uint8_t *b) {
  double amax = fabs(signed_max(x, 32));
  put_f16(b, (float)(amax / 127));
  const double d = mi_quant_f16(b);
  for (int i = 0; i < 32; i++)
    b[2 + i] = (uint8_t)(int8_t)(d ? clampd(nearbyint(x[i] / d), -127, 127) : 0);
}

static void quant_q4_0(const double *x, uint8_t *b) {
  put_f16(b, (float)(signed_max(x, 32) / -8));
  const double d = mi_quant_f16(b);
  memset(b + 2, 0, 16);
  for (int i = 0; i < 32; i++) {
    const int q = d ? (int)clampd(nearbyint(x[i] / d + 8), 0, 15) : 8;
    b[2 + i % 16] |= (uint8_t)(i < 16 ? q : q << 4);
  }
}

/* Q4_K's 12 scale bytes from 8 six-bit scales and mins (the inverse of
 * mi_q4_k_scale_min). */
static void pack_q4_k_scales(const int *sc, const int *m, uint8_t *s) {
  memset(s, 0, 12);
  for (int j = 0; j < 4; j++) {
    s[j] = (uint8_t)sc[j];
    s[j + 4] = (uint8_t)m[j];
  }
  for (int j = 4; j < 8; j++) {
    s[j + 4] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
    s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
    s[j] |= (uint8_t)((m[j] >> 4) << 6);
  }
}

/* Q4_K (qmax 15) and Q5_K (qmax 31): per sub-block of 32 a range fit,
 * the 6-bit scales and mins against d = max scale/63 and dmin = max
 * min/63, codes q = round((x + dmin·m)/(d·sc)) in 0..qmax; Q4_K's nibbles
 * at byte 16, Q5_K's at 48 with the fifth bit in qh (bytes 16..47: the
 * inverses of mi_q4_k_code / mi_q5_k_code). */
static void quant_k(const double *x, uint8_t *b, int qmax) {
  double scale[8], mn[8], smax = 0, mmax = 0;
  for (int j = 0; j < 8; j++) {
    double lo = 0, hi = 0;
    for (int i = 0; i < 32; i++)
      lo = fmin(lo, x[32 * j + i]), hi = fmax(hi, x[32 * j + i]);
    scale[j] = (hi - lo) / qmax;
    mn[j] = -lo;
    smax = fmax(smax, scale[j]);
    mmax = fmax(mmax, mn[j]);
  }
  put_f16(b, (float)(smax / 63));
  put_f16(b + 2, (float)(mmax / 63));
  const double d = mi_quant_f16(b), dmin = mi_quant_f16(b + 2);
  int sc[8], m[8];
  for (int j = 0; j < 8; j++) {
    sc[j] = d ? (int)clampd(nearbyint(scale[j] / d), 0, 63) : 0;
    m[j] = dmin ? (int)clampd(nearbyint(mn[j] / dmin), 0, 63) : 0;
  }
  pack_q4_k_scales(sc, m, b + 4);
  const int five = qmax > 15, qs = five ? 48 : 16;
  memset(b + 16, 0, five ? 160 : 128);
  for (int i = 0; i < 256; i++) {
    const int j = i / 32;
    const double step = d * sc[j];
    const int q = step ? (int)clampd(nearbyint((x[i] + dmin * m[j]) / step), 0, qmax) : 0;
    b[qs + 32 * (i / 64) + i % 32] |= (uint8_t)((i % 64) < 32 ? q & 15 : (q & 15) << 4);
    if (five) b[16 + i % 32] |= (uint8_t)((q >> 4) << j);
  }
}

/* Q6_K: code q (0..63) of value i into ql/qh (the inverse of mi_q6_k_code). */
static void put_q6_k_code(uint8_t *b, int i, int q) {
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  uint8_t *lo = &b[64 * h + l + (quarter & 1) * 32];
  *lo |= (uint8_t)((quarter & 2) ? (q & 15) << 4 : q & 15);
  b[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * quarter));
}

static void quant_q6_k(const double *x, uint8_t *b) {
  double scale[16], amax = 0;
  for (int j = 0; j < 16; j++) {
    scale[j] = signed_max(x + 16 * j, 16) / -32;
    amax = fmax(amax, fabs(scale[j]));
  }
  memset(b, 0, 210);
  put_f16(b + 208, (float)(amax / 127));
  const double d = mi_quant_f16(b + 208);
  for (int j = 0; j < 16; j++)
    b[192 + j] = (uint8_t)(int8_t)(d ? clampd(nearbyint(scale[j] / d), -128, 127) : 0);
  for (int i = 0; i < 256; i++) {
    const double step = d * (int8_t)b[192 + i / 16];
    put_q6_k_code(b, i, step ? (int)clampd(nearbyint(x[i] / step) + 32, 0, 63) : 32);
  }
}

/* Q4_1 (qmax 15) and Q5_1 (qmax 31): d = (max - min)/qmax, m = min, codes
 * q = round((x - m)/d); Q5_0 (qmax 31, no min): d = signed max/-16, q =
 * round(x/d) + 16. Nibbles as Q4_0's (value i < 16 the low nibble of byte
 * i), Q5's fifth bits in the little-endian word qh (the inverses of
 * mi_q5_code). */
static void quant_legacy(mi_dtype t, const double *x, uint8_t *b) {
  const int hasm = t != MI_DTYPE_Q5_0, hash = t != MI_DTYPE_Q4_1, qmax = hash ? 31 : 15;
  if (hasm) {
    double lo = x[0], hi = x[0];
    for (int i = 1; i < 32; i++)
      lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    put_f16(b, (float)((hi - lo) / qmax));
    put_f16(b + 2, (float)lo);
  } else {
    put_f16(b, (float)(signed_max(x, 32) / -16));
  }
  const double d = mi_quant_f16(b), m = hasm ? mi_quant_f16(b + 2) : 0;
  uint8_t *qs = b + 2 + 2 * hasm + 4 * hash;
  uint32_t qh = 0;
  memset(qs, 0, 16);
  for (int i = 0; i < 32; i++) {
    const double v = hasm ? (x[i] - m) / d : x[i] / d + 16;
    const int q = d ? (int)clampd(nearbyint(v), 0, qmax) : hasm ? 0 : 16;
    qs[i % 16] |= (uint8_t)(i < 16 ? q & 15 : (q & 15) << 4);
    qh |= (uint32_t)(q >> 4) << i;
  }
  if (hash) memcpy(b + 2 + 2 * hasm, &qh, 4);
}

/* Q2_K: per sub-block of 16 a range fit as Q4_K's (4-bit scale and min
 * against d = max scale/15, dmin = max min/15), codes 0..3 at bits
 * 2(j % 4) of qs[32(j / 4) + l] for value 32j + l (the inverse of
 * quant.h's statement). */
static void quant_q2_k(const double *x, uint8_t *b) {
  double scale[16], mn[16], smax = 0, mmax = 0;
  for (int s = 0; s < 16; s++) {
    double lo = 0, hi = 0;
    for (int i = 0; i < 16; i++)
      lo = fmin(lo, x[16 * s + i]), hi = fmax(hi, x[16 * s + i]);
    scale[s] = (hi - lo) / 3, mn[s] = -lo;
    smax = fmax(smax, scale[s]), mmax = fmax(mmax, mn[s]);
  }
  memset(b, 0, 84);
  put_f16(b + 80, (float)(smax / 15));
  put_f16(b + 82, (float)(mmax / 15));
  const double d = mi_quant_f16(b + 80), dmin = mi_quant_f16(b + 82);
  for (int s = 0; s < 16; s++) {
    const int sc = d ? (int)clampd(nearbyint(scale[s] / d), 0, 15) : 0;
    const int m = dmin ? (int)clampd(nearbyint(mn[s] / dmin), 0, 15) : 0;
    b[s] = (uint8_t)(sc | m << 4);
  }
  for (int i = 0; i < 256; i++) {
    const int s = i / 16, j = i / 32;
    const double step = d * (b[s] & 15);
    const int q = step ? (int)clampd(nearbyint((x[i] + dmin * (b[s] >> 4)) / step), 0, 3) : 0;
    b[16 + 32 * (j / 4) + i % 32] |= (uint8_t)(q << (2 * (j % 4)));
  }
}

/* Q3_K: per sub-block of 16 a signed scale (signed max/-4) as a 6-bit u
 * (u - 32 in -32..31) against d = max |scale|/32, codes q = round(x/(d(u -
 * 32))) in -4..3 stored as the low two bits of q + 4 and hmask's bit set
 * where q >= 0 (the inverses of mi_q3_k_scale and quant.h's statement). */
static void quant_q3_k(const double *x, uint8_t *b) {
  double scale[16], amax = 0;
  for (int s = 0; s < 16; s++) {
    scale[s] = signed_max(x + 16 * s, 16) / -4;
    amax = fmax(amax, fabs(scale[s]));
  }
  memset(b, 0, 110);
  put_f16(b + 108, (float)(amax / 32));
  const double d = mi_quant_f16(b + 108);
  int u[16];
  for (int s = 0; s < 16; s++) {
    u[s] = d ? (int)clampd(nearbyint(scale[s] / d), -32, 31) + 32 : 32;
    b[96 + s % 8] |= (uint8_t)((u[s] & 15) << (s < 8 ? 0 : 4));
    b[104 + s % 4] |= (uint8_t)((u[s] >> 4) << (2 * (s / 4)));
  }
  for (int i = 0; i < 256; i++) {
    const int s = i / 16, j = i / 32, l = i % 32;
    const double step = d * (u[s] - 32);
    const int q = step ? (int)clampd(nearbyint(x[i] / step), -4, 3) : 0;
    b[32 + 32 * (j / 4) + l] |= (uint8_t)(((q + 4) & 3) << (2 * (j % 4)));
    if (q >= 0) b[l] |= (uint8_t)(1u << j);
  }
}

/* A random f16 of magnitude in [mag/2, 3 mag/2), either sign. */
static void rand_f16(uint8_t *p, double mag, uint64_t *rng) {
  const double v = mag * (0.5 + mi_rng_u01(rng));
  put_f16(p, (float)(mi_rng_next(rng) & 1 ? -v : v));
}

static void rand_bytes(uint8_t *p, size_t n, uint64_t *rng) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)mi_rng_next(rng);
}

/* Random codes; the scales chosen so that a value's typical size is std. */
static void random_block(mi_dtype t, double std, uint8_t *b, uint64_t *rng) {
  switch (t) {
  case MI_DTYPE_Q8_0: rand_f16(b, std / 64, rng), rand_bytes(b + 2, 32, rng); break;
  case MI_DTYPE_Q4_0: rand_f16(b, std / 4, rng), rand_bytes(b + 2, 16, rng); break;
  case MI_DTYPE_Q4_K:
    rand_f16(b, std / 256, rng), rand_f16(b + 2, std / 32, rng), rand_bytes(b + 4, 140, rng);
    break;
  case MI_DTYPE_Q6_K: rand_bytes(b, 208, rng), rand_f16(b + 208, std / 1024, rng); break;
  case MI_DTYPE_Q5_K:
    rand_f16(b, std / 512, rng), rand_f16(b + 2, std / 32, rng), rand_bytes(b + 4, 172, rng);
    break;
  case MI_DTYPE_Q4_1:
    rand_f16(b, std / 8, rng), rand_f16(b + 2, std, rng), rand_bytes(b + 4, 16, rng);
    break;
  case MI_DTYPE_Q5_0: rand_f16(b, std / 16, rng), rand_bytes(b + 2, 20, rng); break;
  case MI_DTYPE_Q5_1:
    rand_f16(b, std / 16, rng), rand_f16(b + 2, std, rng), rand_bytes(b + 4, 20, rng);
    break;
  case MI_DTYPE_Q2_K:
    rand_bytes(b, 80, rng), rand_f16(b + 80, std / 16, rng), rand_f16(b + 82, std / 8, rng);
    break;
  case MI_DTYPE_Q3_K: rand_bytes(b, 108, rng), rand_f16(b + 108, std / 64, rng); break;
  default: break;
  }
}

static void quantize_block(mi_dtype t, const double *x, uint8_t *b) {
  switch (t) {
  case MI_DTYPE_Q8_0: quant_q8_0(x, b); break;
  case MI_DTYPE_Q4_0: quant_q4_0(x, b); break;
  case MI_DTYPE_Q4_K: quant_k(x, b, 15); break;
  case MI_DTYPE_Q6_K: quant_q6_k(x, b); break;
  case MI_DTYPE_Q5_K: quant_k(x, b, 31); break;
  case MI_DTYPE_Q4_1:
  case MI_DTYPE_Q5_0:
  case MI_DTYPE_Q5_1: quant_legacy(t, x, b); break;
  case MI_DTYPE_Q2_K: quant_q2_k(x, b); break;
  case MI_DTYPE_Q3_K: quant_q3_k(x, b); break;
  default: break;
  }
}

/* |value| as the format sums it: Q4_K's d·sc·q − dmin·m is two terms, and
 * a kernel rounds each, so a bound scales with |d·sc·q| + |dmin·m| (and
 * |d·q| + |m| for Q4_1 and Q5_1, |d·sc·q| + |dmin·m| for Q2_K). */
static double terms_magnitude(mi_dtype t, const uint8_t *b, int i) {
  if (t == MI_DTYPE_Q4_1 || t == MI_DTYPE_Q5_1) {
    const double m = mi_quant_f16(b + 2);
    return fabs(mi_quant_value64(t, b, i) - m) + fabs(m);
  }
  if (t == MI_DTYPE_Q2_K) {
    const int n = i / 128, j = (i % 128) / 32, l = i % 32, s = 8 * n + 2 * j + l / 16;
    const double dm = (double)mi_quant_f16(b + 82) * (b[s] >> 4);
    return fabs(mi_quant_value64(t, b, i) + dm) + fabs(dm);
  }
  if (t != MI_DTYPE_Q4_K && t != MI_DTYPE_Q5_K) return fabs(mi_quant_value64(t, b, i));
  int sc, m;
  mi_q4_k_scale_min(b + 4, i / 32, &sc, &m);
  const int q = t == MI_DTYPE_Q5_K ? mi_q5_k_code(b, i) : mi_q4_k_code(b, i);
  return fabs((double)mi_quant_f16(b) * sc * q) + fabs((double)mi_quant_f16(b + 2) * m);
}

int vf_quant_input(mi_dtype t, int64_t n, int codes, double std, uint64_t *rng, unsigned char *dst,
                   double *val, double *absval) {
  const int64_t qk = mi_dtype_block(t);
  const size_t bb = mi_dtype_block_bytes(t);
  if (!mi_dtype_is_block(t) || n % qk) return -1;
  for (int64_t k = 0; k < n / qk; k++) {
    uint8_t *b = dst + (size_t)k * bb;
    if (codes)
      random_block(t, std, b, rng);
    else
      quantize_block(t, val + k * qk, b);
    for (int i = 0; i < (int)qk; i++) {
      val[k * qk + i] = mi_quant_value64(t, b, i);
      if (absval) absval[k * qk + i] = terms_magnitude(t, b, i);
    }
  }
  return 0;
}
