/* Rotary embedding and causal GQA attention. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

/* ---------------- rope ---------------- */

#define ROPE_MAX_DIM 8192 /* bounds the stack tables below */

typedef struct rope_args {
  float *x;
  const int32_t *pos;
  int64_t H, tok_stride, head_stride, half;
  const double *inv_freq; /* [half] theta^(-2i/rot_dim) */
} rope_args;

static void rope_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const rope_args *a = arg;
  int64_t half = a->half;
  float cs[ROPE_MAX_DIM / 2], sn[ROPE_MAX_DIM / 2];
  for (int64_t t = b; t < e; t++) {
    /* Angles in double: at position 2000 with theta 1e6 the low-index angles
     * are ~2000 rad; an f32 angle there is off by ~1e-4 rad. The cos/sin
     * table is made once per token and shared by all heads. */
    double p = (double)a->pos[t];
    for (int64_t i = 0; i < half; i++) {
      double ang = p * a->inv_freq[i];
      cs[i] = (float)cos(ang);
      sn[i] = (float)sin(ang);
    }
    for (int64_t h = 0; h < a->H; h++) {
      float *v = a->x + t * a->tok_stride + h * a->head_stride;
      for (int64_t i = 0; i < half; i++) {
        float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cs[i] - x1 * sn[i];
        v[i + half] = x1 * cs[i] + x0 * sn[i];
      }
    }
  }
}

int cpu_rope(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H,
             int64_t tok_stride, int64_t head_stride, int64_t rot_dim, float theta) {
  (void)s;
  cpu_ctx *c = ctx;
  if (T < 0 || H < 0 || tok_stride < 0 || head_stride < 0)
    return cpu_fail(c, "rope: negative shape or stride (T=%lld H=%lld tok_stride=%lld head_stride=%lld)",
                    (long long)T, (long long)H, (long long)tok_stride, (long long)head_stride);
  if (rot_dim <= 0 || rot_dim % 2 || rot_dim > ROPE_MAX_DIM)
    return cpu_fail(c, "rope: rot_dim %lld must be even and in [2, %d]", (long long)rot_dim,
                    ROPE_MAX_DIM);
  if (!(theta > 0.0f) || isinf(theta))
    return cpu_fail(c, "rope: theta must be a positive finite number (got %g)", (double)theta);
  if (T == 0 || H == 0) return 0;
  if (!x || !pos) return cpu_fail(c, "rope: %s is NULL", !x ? "x" : "pos");
  int64_t half = rot_dim / 2;
  double inv_freq[ROPE_MAX_DIM / 2];
  for (int64_t i = 0; i < half; i++)
    inv_freq[i] = pow((double)theta, -2.0 * (double)i / (double)rot_dim);
  rope_args a = {x, pos, H, tok_stride, head_stride, half, inv_freq};
  if (T > 1 && T * H * half >= 8192)
    cpu_parallel_for(c->pool, T, 1, rope_task, &a);
  else
    rope_task(&a, 0, T, 0);
  return 0;
}

/* ---------------- attention ---------------- */

/* Query heads sharing one KV head are processed together (up to GMAX at a
 * time) so each K and V row is read once for all of them: decode streams
 * the cache once. Keys are taken in blocks of BLK rows: scores for a block,
 * then one online-softmax rescale per block (running max m, running sum l),
 * then the V rows weighted by exp(s - m). Every exponent is <= 0, so large
 * scores at long positions cannot overflow. K and V rows go four at a time
 * (dot4/axpy4): the query and the accumulator are loaded once per four. */
#define GMAX 8
#define BLK 64
#define ATTN_MAX_D 1024

typedef struct attn_args {
  const cpu_kernel_set *k;
  float *out;
  const float *q;
  const void *kc, *vc; /* [n_ctx, Hkv, D] in kvt */
  mi_dtype kvt;
  int64_t T, Hq, Hkv, D, pos0, G, ngrp;
  float scale;
} attn_args;

static void attn_one(const attn_args *a, int64_t t, int64_t kvh, int64_t g0, int gn) {
  const cpu_kernel_set *k = a->k;
  int64_t D = a->D, Hkv = a->Hkv;
  int64_t L = a->pos0 + t + 1; /* causal: rows 0 .. pos0+t */
  float s[GMAX][BLK];
  float m[GMAX], l[GMAX];
  float acc[GMAX * ATTN_MAX_D];
  const float *qh[GMAX];
  for (int g = 0; g < gn; g++) {
    int64_t h = kvh * a->G + g0 + g;
    qh[g] = a->q + (t * a->Hq + h) * D;
    m[g] = -INFINITY;
    l[g] = 0.0f;
    memset(acc + g * D, 0, (size_t)D * sizeof(float));
  }
  /* A half-precision cache is widened one block at a time into kb/vb
   * ([nb, D] f32), so the f32 inner loops serve every cache type. */
  const int half = a->kvt != MI_DTYPE_F32;
  float kb[half ? BLK * D : 1], vb[half ? BLK * D : 1];
  const int64_t rs = Hkv * D; /* cache row stride, in elements */
  for (int64_t j0 = 0; j0 < L; j0 += BLK) {
    int nb = L - j0 < BLK ? (int)(L - j0) : BLK;
    const float *kblk, *vblk;
    int64_t st; /* row stride of kblk/vblk */
    if (half) {
      const uint16_t *k16 = (const uint16_t *)a->kc + (j0 * Hkv + kvh) * D;
      const uint16_t *v16 = (const uint16_t *)a->vc + (j0 * Hkv + kvh) * D;
      for (int r = 0; r < nb; r++) {
        k->to_f32(kb + r * D, k16 + r * rs, a->kvt, D);
        k->to_f32(vb + r * D, v16 + r * rs, a->kvt, D);
      }
      kblk = kb;
      vblk = vb;
      st = D;
    } else {
      kblk = (const float *)a->kc + (j0 * Hkv + kvh) * D;
      vblk = (const float *)a->vc + (j0 * Hkv + kvh) * D;
      st = rs;
    }
    int jj = 0;
    for (; jj + 4 <= nb; jj += 4) {
      const float *kr = kblk + jj * st;
      for (int g = 0; g < gn; g++) {
        float d4[4];
        k->dot4(qh[g], kr, st, D, d4);
        for (int i = 0; i < 4; i++) s[g][jj + i] = d4[i] * a->scale;
      }
    }
    for (; jj < nb; jj++) {
      const float *kr = kblk + jj * st;
      for (int g = 0; g < gn; g++) s[g][jj] = k->dot(qh[g], kr, D) * a->scale;
    }
    for (int g = 0; g < gn; g++) {
      float bm = s[g][0];
      for (int j = 1; j < nb; j++) bm = s[g][j] > bm ? s[g][j] : bm;
      if (bm > m[g]) {
        if (l[g] > 0.0f) {
          float corr = expf(m[g] - bm);
          l[g] *= corr;
          k->scal(acc + g * D, corr, D);
        }
        m[g] = bm;
      }
      float sum = 0.0f;
      for (int j = 0; j < nb; j++) {
        float p = expf(s[g][j] - m[g]);
        s[g][j] = p;
        sum += p;
      }
      l[g] += sum;
    }
    for (jj = 0; jj + 4 <= nb; jj += 4) {
      const float *vr = vblk + jj * st;
      for (int g = 0; g < gn; g++) k->axpy4(acc + g * D, &s[g][jj], vr, st, D);
    }
    for (; jj < nb; jj++) {
      const float *vr = vblk + jj * st;
      for (int g = 0; g < gn; g++) k->axpy(acc + g * D, s[g][jj], vr, D);
    }
  }
  for (int g = 0; g < gn; g++) {
    int64_t h = kvh * a->G + g0 + g;
    float *o = a->out + (t * a->Hq + h) * D;
    float inv = 1.0f / l[g];
    for (int64_t d = 0; d < D; d++) o[d] = acc[g * D + d] * inv;
  }
}

static void attn_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const attn_args *a = arg;
  for (int64_t i = b; i < e; i++) {
    int64_t grp = i % a->ngrp;
    int64_t kvh = (i / a->ngrp) % a->Hkv;
    int64_t t = i / (a->ngrp * a->Hkv);
    int64_t g0 = grp * GMAX;
    int gn = a->G - g0 < GMAX ? (int)(a->G - g0) : GMAX;
    attn_one(a, t, kvh, g0, gn);
  }
}

int cpu_attention(void *ctx, mi_stream *s, float *out, const float *q, const void *k_cache,
                  const void *v_cache, mi_dtype kv_dtype, int64_t T, int64_t Hq, int64_t Hkv,
                  int64_t D, int64_t pos0, float scale) {
  (void)s;
  cpu_ctx *c = ctx;
  if (kv_dtype != MI_DTYPE_F32 && kv_dtype != MI_DTYPE_F16 && kv_dtype != MI_DTYPE_BF16)
    return cpu_fail(c, "attention: kv_dtype %s is not supported by the cpu platform (f32, f16, bf16)",
                    mi_dtype_name(kv_dtype));
  if (T < 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || pos0 < 0)
    return cpu_fail(c, "attention: bad shape T=%lld Hq=%lld Hkv=%lld D=%lld pos0=%lld",
                    (long long)T, (long long)Hq, (long long)Hkv, (long long)D, (long long)pos0);
  if (Hq % Hkv)
    return cpu_fail(c, "attention: Hq=%lld is not a multiple of Hkv=%lld", (long long)Hq,
                    (long long)Hkv);
  if (D > ATTN_MAX_D)
    return cpu_fail(c, "attention: head_dim %lld > %d is not supported", (long long)D, ATTN_MAX_D);
  if (T == 0) return 0;
  if (!out || !q || !k_cache || !v_cache)
    return cpu_fail(c, "attention: %s is NULL",
                    !out ? "out" : !q ? "q" : !k_cache ? "k_cache" : "v_cache");
  int64_t G = Hq / Hkv;
  attn_args a = {c->k, out, q, k_cache, v_cache, kv_dtype, T, Hq, Hkv, D, pos0, G,
                 (G + GMAX - 1) / GMAX, scale};
  int64_t ntask = T * Hkv * a.ngrp;
  /* Dynamic split: under the causal mask later tokens cost more. */
  cpu_parallel_for_dynamic(c->pool, ntask, ntask >= 64 ? 4 : 1, attn_task, &a);
  return 0;
}

/* ---------------- convert ---------------- */

/* dst[i] = src[i] converted (f32 -> f32/f16/bf16 with round-to-nearest-even,
 * f16/bf16 -> f32 exactly): writing a half-precision KV cache. */
int cpu_convert(void *ctx, mi_stream *s, void *dst, mi_dtype dst_dtype, const void *src,
                mi_dtype src_dtype, int64_t n) {
  (void)s;
  cpu_ctx *c = ctx;
  if (n < 0) return cpu_fail(c, "convert: negative count %lld", (long long)n);
  if (n == 0) return 0;
  if (!dst || !src) return cpu_fail(c, "convert: %s is NULL", !dst ? "dst" : "src");
  if (src_dtype == MI_DTYPE_F32 && dst_dtype == MI_DTYPE_F32) {
    memmove(dst, src, (size_t)n * sizeof(float));
  } else if (src_dtype == MI_DTYPE_F32 && (dst_dtype == MI_DTYPE_F16 || dst_dtype == MI_DTYPE_BF16)) {
    const float *x = src;
    uint16_t *y = dst;
    if (dst_dtype == MI_DTYPE_F16)
      for (int64_t i = 0; i < n; i++) y[i] = mi_f32_to_f16(x[i]);
    else
      for (int64_t i = 0; i < n; i++) y[i] = mi_f32_to_bf16(x[i]);
  } else if (dst_dtype == MI_DTYPE_F32 && (src_dtype == MI_DTYPE_F16 || src_dtype == MI_DTYPE_BF16)) {
    c->k->to_f32(dst, src, src_dtype, n);
  } else {
    return cpu_fail(c, "convert: %s -> %s is not supported", mi_dtype_name(src_dtype),
                    mi_dtype_name(dst_dtype));
  }
  return 0;
}
