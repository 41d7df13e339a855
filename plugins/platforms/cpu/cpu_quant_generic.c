/* The tiles of every block type but Q8_0 (cpu_q8_0_generic.c), portable C
 * (the generic variant): the
 * definition in cpu_quant.h written out one block at a time. Every
 * integer sum is exact; each activation block adds one f32 term to one
 * running f32 sum per output. */
#include "cpu_quant.h"

/* y[i·ldy + col[j]] = s (or += with accum). */
static void put(float *y, int64_t ldy, const int64_t col[4], int i, int j, float s, int accum) {
  float *yo = y + i * ldy + col[j];
  *yo = accum ? *yo + s : s;
}

/* One output over Q4_0 blocks [b0, b1): Σ_b fl(d_x·d)·Σ q_x·(q - 8), the
 * integer sum at most 32·127·8 in magnitude. */
static float q4_0_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  (void)ds;
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * CPU_Q4_0_BYTES;
    const int8_t *xb = qx + b * 32;
    int32_t isum = 0;
    for (int l = 0; l < 16; l++) {
      isum += xb[l] * ((p[2 + l] & 15) - 8);
      isum += xb[l + 16] * ((p[2 + l] >> 4) - 8);
    }
    s += dx[b] * mi_quant_f16(p) * (float)isum;
  }
  return s;
}

/* One output over Q4_K blocks [b0, b1) (five: Q5_K's, the nibbles at
 * byte 48 and bit j of qh[l] the code's fifth): per sub-block j (activation
 * block 8b + j), d_x·(d·(sc_j·Σ q_x·q) - dmin·(m_j·Σ q_x)); sc_j·Σ q_x·q
 * is at most 63·32·127·31 < 2^23, exact in f32 too. */
static inline float k_row(const uint8_t *w, const int8_t *qx, const float *dx, int64_t b0,
                          int64_t b1, const int five) {
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * (five ? CPU_Q5_K_BYTES : CPU_Q4_K_BYTES), *qh = p + 16;
    const float d = mi_quant_f16(p), dmin = mi_quant_f16(p + 2);
    uint8_t sm[16];
    cpu_q4_k_scales(sm, p + 4);
    for (int j = 0; j < 8; j++) {
      const uint8_t *qs = p + (five ? 48 : 16) + 32 * (j / 2);
      const int8_t *xb = qx + (b * 8 + j) * 32;
      const int shift = 4 * (j & 1); /* even sub-blocks the low nibbles */
      int32_t isum = 0, xsum = 0;
      for (int l = 0; l < 32; l++) {
        const int q = ((qs[l] >> shift) & 15) | (five ? ((qh[l] >> j) & 1) << 4 : 0);
        isum += xb[l] * q;
        xsum += xb[l];
      }
      const float t = d * (float)(sm[j] * isum) - dmin * (float)(sm[8 + j] * xsum);
      s += dx[b * 8 + j] * t;
    }
  }
  return s;
}

static float q4_k_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  (void)ds;
  return k_row(w, qx, dx, b0, b1, 0);
}

static float q5_k_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  (void)ds;
  return k_row(w, qx, dx, b0, b1, 1);
}

/* One output over Q6_K blocks [b0, b1): per activation block j (sub-blocks
 * 2j, 2j+1 of 16), fl(d_x·d)·(sc_2j·Σ q_x·(q-32) + sc_2j+1·Σ ...), the
 * integer at most 2·128·16·127·32 < 2^24. */
static float q6_k_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  (void)ds;
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * CPU_Q6_K_BYTES;
    const float d = mi_quant_f16(p + 208);
    const int8_t *sc = (const int8_t *)(p + 192);
    for (int j = 0; j < 8; j++) {
      const int8_t *xb = qx + (b * 8 + j) * 32;
      /* values 32j + l: half j/4, quarter r = j%4 (mi_q6_k_code's rule,
       * unrolled per block of 32) */
      const int r = j % 4, nsh = 4 * (r >> 1), hsh = 2 * r;
      const uint8_t *ql = p + 64 * (j / 4) + 32 * (r & 1), *qh = p + 128 + 32 * (j / 4);
      int32_t t = 0;
      for (int h = 0; h < 2; h++) {
        int32_t isum = 0;
        for (int l = 16 * h; l < 16 * h + 16; l++)
          isum += xb[l] * ((((ql[l] >> nsh) & 15) | ((qh[l] >> hsh) & 3) << 4) - 32);
        t += sc[2 * j + h] * isum;
      }
      s += dx[b * 8 + j] * d * (float)t;
    }
  }
  return s;
}

/* One output over Q4_1 / Q5_0 / Q5_1 blocks [b0, b1) (t): d at byte 0,
 * then m (f16, Q4_1 and Q5_1), then qh (u32, Q5_0 and Q5_1), then the
 * nibbles (value l < 16 low nibble of qs[l], l + 16 its high one; the
 * fifth bit of value i bit i of qh). Per block fl(d_x·d)·Σ q_x·(q - off)
 * (off 16 for Q5_0, else 0; at most 32·127·31), plus m·fl(d_x·Σ q_x). */
static inline float legacy_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                               int64_t b0, int64_t b1, const mi_dtype t) {
  const int hasm = t != MI_DTYPE_Q5_0, hash = t != MI_DTYPE_Q4_1, off = hasm ? 0 : 16;
  const size_t bb = mi_dtype_block_bytes(t);
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * bb, *qs = p + 2 + 2 * hasm + 4 * hash;
    uint32_t qh = 0;
    if (hash) memcpy(&qh, p + 2 + 2 * hasm, 4);
    const int8_t *xb = qx + b * 32;
    int32_t isum = 0;
    for (int l = 0; l < 16; l++) {
      isum += xb[l] * ((int)((qs[l] & 15) | ((qh >> l) & 1) << 4) - off);
      isum += xb[l + 16] * ((int)((qs[l] >> 4) | ((qh >> (l + 16)) & 1) << 4) - off);
    }
    s += dx[b] * mi_quant_f16(p) * (float)isum;
    if (hasm) s += mi_quant_f16(p + 2) * ds[b];
  }
  return s;
}

static float q4_1_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  return legacy_row(w, qx, dx, ds, b0, b1, MI_DTYPE_Q4_1);
}

static float q5_0_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  return legacy_row(w, qx, dx, ds, b0, b1, MI_DTYPE_Q5_0);
}

static float q5_1_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  return legacy_row(w, qx, dx, ds, b0, b1, MI_DTYPE_Q5_1);
}

/* One output over Q2_K blocks [b0, b1): activation block j of a block is
 * values 32j.. = bits 2(j % 4) of qs[32(j / 4) + l] (qs at byte 16), its
 * sub-blocks 2j, 2j+1 with scale byte p[2j + h] (sc low nibble, m high).
 * Per activation block d_x·(d·Σ_h sc·Σ q_x·q - dmin·Σ_h m·Σ q_x), both
 * integers at most 2·15·16·127·3 < 2^24. */
static float q2_k_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  (void)ds;
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * CPU_Q2_K_BYTES;
    const float d = mi_quant_f16(p + 80), dmin = mi_quant_f16(p + 82);
    for (int j = 0; j < 8; j++) {
      const uint8_t *qs = p + 16 + 32 * (j / 4);
      const int shift = 2 * (j % 4);
      const int8_t *xb = qx + (b * 8 + j) * 32;
      int32_t isc = 0, imn = 0;
      for (int h = 0; h < 2; h++) {
        int32_t iq = 0, xs = 0;
        for (int l = 16 * h; l < 16 * h + 16; l++) {
          iq += xb[l] * ((qs[l] >> shift) & 3);
          xs += xb[l];
        }
        isc += (p[2 * j + h] & 15) * iq;
        imn += (p[2 * j + h] >> 4) * xs;
      }
      s += dx[b * 8 + j] * (d * (float)isc - dmin * (float)imn);
    }
  }
  return s;
}

/* One output over Q3_K blocks [b0, b1): the low bits as Q2_K's (qs at byte
 * 32), q = low - 4 unless bit j of hmask[l] is set (activation block j,
 * value l); sub-block 2j + h scale u - 32 (cpu_q3_k_scales). Per
 * activation block fl(d_x·d)·Σ_h (u - 32)·Σ q_x·q, at most
 * 2·32·16·127·4 < 2^24. */
static float q3_k_row(const uint8_t *w, const int8_t *qx, const float *dx, const float *ds,
                      int64_t b0, int64_t b1) {
  (void)ds;
  float s = 0.0f;
  for (int64_t b = b0; b < b1; b++) {
    const uint8_t *p = w + (size_t)b * CPU_Q3_K_BYTES;
    const float d = mi_quant_f16(p + 108);
    uint8_t u[16];
    cpu_q3_k_scales(u, p + 96);
    for (int j = 0; j < 8; j++) {
      const uint8_t *qs = p + 32 + 32 * (j / 4);
      const int shift = 2 * (j % 4);
      const int8_t *xb = qx + (b * 8 + j) * 32;
      int32_t t = 0;
      for (int h = 0; h < 2; h++) {
        int32_t iq = 0;
        for (int l = 16 * h; l < 16 * h + 16; l++)
          iq += xb[l] * (((qs[l] >> shift) & 3) - ((p[l] >> j) & 1 ? 0 : 4));
        t += (u[2 * j + h] - 32) * iq;
      }
      s += dx[b * 8 + j] * d * (float)t;
    }
  }
  return s;
}

/* ds: fl(d_x·Σq_x) per activation block (cpu_q8_act.ds), for the types
 * with a min term */
typedef float (*row_fn)(const uint8_t *, const int8_t *, const float *, const float *, int64_t,
                        int64_t);

static void tile_rows(row_fn f, float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a,
                      int64_t row, int mr, const void *const wr[4], int nr, int64_t b0, int64_t b1,
                      int accum) {
  const int64_t nbp = a->kp / 32;
  for (int j = 0; j < nr; j++)
    for (int i = 0; i < mr; i++)
      put(y, ldy, col, i, j,
          f(wr[j], a->q + (row + i) * a->kp, a->d + (row + i) * nbp, a->ds + (row + i) * nbp, b0,
            b1),
          accum);
}

#define GENERIC_TILE(name, rowf)                                                                   \
  void name(float *y, int64_t ldy, const int64_t col[4], const cpu_q8_act *a, int64_t row, int mr, \
            const void *const wr[4], int nr, int64_t b0, int64_t b1, int accum) {                  \
    tile_rows(rowf, y, ldy, col, a, row, mr, wr, nr, b0, b1, accum);                               \
  }

GENERIC_TILE(cpu_q4_0_tile_generic, q4_0_row)
GENERIC_TILE(cpu_q4_k_tile_generic, q4_k_row)
GENERIC_TILE(cpu_q6_k_tile_generic, q6_k_row)
GENERIC_TILE(cpu_q5_k_tile_generic, q5_k_row)
GENERIC_TILE(cpu_q4_1_tile_generic, q4_1_row)
GENERIC_TILE(cpu_q5_0_tile_generic, q5_0_row)
GENERIC_TILE(cpu_q5_1_tile_generic, q5_1_row)
GENERIC_TILE(cpu_q2_k_tile_generic, q2_k_row)
GENERIC_TILE(cpu_q3_k_tile_generic, q3_k_row)
