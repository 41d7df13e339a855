/* Rotary embedding and causal GQA attention. */
#include <math.h>
#include <stdlib.h>
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

/* Two schedules share the block-wise online softmax: keys are taken in
 * blocks of BLK rows: scores for a block, then one rescale per block
 * (running max m, running sum l), then the V rows weighted by exp(s - m).
 * Every exponent is <= 0, so large scores at long positions cannot
 * overflow. A half-precision cache is widened to f32 one block at a time.
 *
 * Decode and other small calls (attn_one, portable C, any ISA): the query
 * heads sharing one KV head are processed together (up to GMAX at a time)
 * so each K and V row is read once for all of them: decode streams the
 * cache once. K and V rows go four at a time (dot4/axpy4): the query and
 * the accumulator are loaded once per four.
 *
 * Prefill (attn_tiles, micro-kernels from cpu_attn_avx2.c/_avx512.c): the
 * T·G query rows of one KV head, in (position, head) order, are cut into
 * tiles of R = SIMD-lanes rows, one row per lane, each lane with its own
 * causal limit (a tile may mix positions and heads). Each K/V element
 * loaded feeds R rows (2R in qk) instead of one, so the kernels are bound
 * by FMAs rather than loads: ~4x the one-query-at-a-time speed at 1024
 * positions. A task is up to TILES_MAX tiles sharing each copied block. */
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

/* Rows [j0, j0+nb) of one KV head as f32: a half-precision cache is
 * widened into kb/vb ([nb, D] f32); an f32 cache is copied there when pack
 * is set, else pointed into. Returns the row stride of *kblk and *vblk.
 * Why attn_tiles copies f32 rows: in the cache they are Hkv·D floats apart
 * (4 KiB for Qwen3), so a block's rows all fall into the same few L1/L2
 * sets and evict each other between the many passes of the tile kernels;
 * packed, the block stays cached (measured: faster with the copy). */
static int64_t attn_block(const attn_args *a, int64_t kvh, int64_t j0, int nb, float *kb,
                          float *vb, const float **kblk, const float **vblk, int pack) {
  const int64_t D = a->D, Hkv = a->Hkv, rs = Hkv * D; /* cache row stride */
  if (a->kvt == MI_DTYPE_F32) {
    const float *k32 = (const float *)a->kc + (j0 * Hkv + kvh) * D;
    const float *v32 = (const float *)a->vc + (j0 * Hkv + kvh) * D;
    if (!pack) {
      *kblk = k32;
      *vblk = v32;
      return rs;
    }
    for (int r = 0; r < nb; r++) {
      memcpy(kb + r * D, k32 + r * rs, (size_t)D * sizeof(float));
      memcpy(vb + r * D, v32 + r * rs, (size_t)D * sizeof(float));
    }
    *kblk = kb;
    *vblk = vb;
    return D;
  }
  const uint16_t *k16 = (const uint16_t *)a->kc + (j0 * Hkv + kvh) * D;
  const uint16_t *v16 = (const uint16_t *)a->vc + (j0 * Hkv + kvh) * D;
  for (int r = 0; r < nb; r++) {
    a->k->to_f32(kb + r * D, k16 + r * rs, a->kvt, D);
    a->k->to_f32(vb + r * D, v16 + r * rs, a->kvt, D);
  }
  *kblk = kb;
  *vblk = vb;
  return D;
}

/* One block of nb scores s of one query head becomes probabilities
 * e^(s - m), online: when the block raises the running max m, the running
 * sum l and the unnormalised accumulator acc[D] are rescaled first. */
static void softmax_block(const cpu_kernel_set *k, float *s, int nb, float *m, float *l,
                          float *acc, int64_t D) {
  float bm = s[0];
  for (int j = 1; j < nb; j++) bm = s[j] > bm ? s[j] : bm;
  if (bm > *m) {
    if (*l > 0.0f) {
      const float corr = expf(*m - bm);
      *l *= corr;
      k->scal(acc, corr, D);
    }
    *m = bm;
  }
  float sum = 0.0f;
  for (int j = 0; j < nb; j++) {
    s[j] = expf(s[j] - *m);
    sum += s[j];
  }
  *l += sum;
}

static void attn_one(const attn_args *a, int64_t t, int64_t kvh, int64_t g0, int gn) {
  const cpu_kernel_set *k = a->k;
  int64_t D = a->D;
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
  const int half = a->kvt != MI_DTYPE_F32;
  float kb[half ? BLK * D : 1], vb[half ? BLK * D : 1]; /* [nb, D] widened block */
  for (int64_t j0 = 0; j0 < L; j0 += BLK) {
    int nb = L - j0 < BLK ? (int)(L - j0) : BLK;
    const float *kblk, *vblk;
    /* f32 rows are read in place: each is used once per call here. */
    int64_t st = attn_block(a, kvh, j0, nb, kb, vb, &kblk, &vblk, 0); /* row stride */
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
    for (int g = 0; g < gn; g++) softmax_block(k, s[g], nb, &m[g], &l[g], acc + g * D, D);
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

/* Tiles of one task share each packed K/V block: the K/V rows come from
 * L3 or memory (all heads' rows are 4 KiB apart, so one head's rows evict
 * each other from L2), and copying them was the largest cost of one-tile
 * tasks (measured at 1024 positions, f32: 60% of the time with 1 tile per
 * task; 4 -> 8 -> 16 tiles: +15%, +8%). The per-tile state stays on the
 * stack: qt and acc take at most TILE_ELEMS floats each (256 KiB together). */
#define TILES_MAX 16
#define TILE_ELEMS (2 * CPU_ATTN_MAX_LANES * ATTN_MAX_D) /* = TILES_MAX·R·D at D = 128 */

/* Tiles per task: as many as TILE_ELEMS holds, at most TILES_MAX, but few
 * enough to give every thread several tasks (dynamic balance). */
static int tiles_per_task(int R, int64_t D, int64_t rows, int64_t Hkv, int nthreads) {
  int64_t n = TILE_ELEMS / (R * D);
  n = n < 1 ? 1 : n > TILES_MAX ? TILES_MAX : n;
  while (n > 1 && Hkv * ((rows + n * R - 1) / (n * R)) < 4 * (int64_t)nthreads) n /= 2;
  return (int)n;
}

/* One task: query rows [i0, i0 + nr) of KV head kvh, row i being position
 * t = i / G, head kvh·G + i % G, cut into nt tiles of R rows
 * (nt <= TILES_MAX and nt·R·D <= TILE_ELEMS, see tiles_per_task). */
static void attn_tiles(const attn_args *a, const cpu_attn_ops *ops, int64_t kvh, int64_t i0,
                       int64_t nr) {
  const int R = ops->lanes;
  const int64_t D = a->D, G = a->G;
  const int nt = (int)((nr + R - 1) / R);
  _Alignas(64) float qt[nt * D * R];  /* [nt][D][R], nt·R·D <= TILE_ELEMS */
  _Alignas(64) float acc[nt * R * D]; /* [nt][R][D] */
  _Alignas(64) float st[2 * BLK * CPU_ATTN_MAX_LANES]; /* [2][nb][R]: a pair of tiles */
  /* Per tile and lane: last key it may see, running max, sum, rescale. */
  _Alignas(64) int32_t lim[TILES_MAX][CPU_ATTN_MAX_LANES];
  _Alignas(64) float m[TILES_MAX][CPU_ATTN_MAX_LANES], l[TILES_MAX][CPU_ATTN_MAX_LANES];
  _Alignas(64) float corr[CPU_ATTN_MAX_LANES];
  int tn[TILES_MAX]; /* real rows per tile */
  int64_t lo[TILES_MAX], hi = 0;
  for (int u = 0; u < nt; u++) {
    tn[u] = nr - u * R < R ? (int)(nr - u * R) : R;
    /* Padding lanes (a short last tile) repeat its last row: finite values
     * with a valid causal limit, computed and dropped. Row offsets are
     * relative to the tile's first row: a few positions' worth of q, so
     * they fit int32 (checked by the caller). */
    _Alignas(64) int32_t off[CPU_ATTN_MAX_LANES];
    const int64_t t0 = (i0 + u * R) / G;
    const float *q0 = a->q + t0 * a->Hq * D;
    for (int r = 0; r < R; r++) {
      int64_t i = i0 + u * R + (r < tn[u] ? r : tn[u] - 1), t = i / G;
      off[r] = (int32_t)(((t - t0) * a->Hq + kvh * G + i % G) * D);
      lim[u][r] = (int32_t)(a->pos0 + t);
      m[u][r] = -INFINITY;
      l[u][r] = 0.0f;
    }
    ops->load_q(qt + u * D * R, q0, off, D);
    /* Rows are in position order: keys < lo[u] are visible to all rows of
     * tile u (no mask needed), keys up to lim[u][tn-1] to some. */
    lo[u] = (int64_t)lim[u][0] + 1;
    hi = (int64_t)lim[u][tn[u] - 1] + 1;
  }
  memset(acc, 0, (size_t)(nt * R * D) * sizeof(float));
  _Alignas(64) float kb[BLK * D], vb[BLK * D]; /* [nb, D] packed block */
  for (int64_t j0 = 0; j0 < hi; j0 += BLK) {
    int nb = hi - j0 < BLK ? (int)(hi - j0) : BLK;
    const float *kblk, *vblk;
    int64_t st_rows = attn_block(a, kvh, j0, nb, kb, vb, &kblk, &vblk, 1);
    /* Tiles in pairs for qk (two tiles share each K load). The pair's
     * keys are those of its later tile; keys past the earlier tile's reach
     * are cut by its causal mask. */
    for (int u = 0; u < nt; u += 2) {
      int np = nt - u < 2 ? 1 : 2;
      int64_t hu = (int64_t)lim[u + np - 1][tn[u + np - 1] - 1] + 1; /* keys the pair sees */
      if (j0 >= hu) continue;
      int nbu = hu - j0 < nb ? (int)(hu - j0) : nb;
      ops->qk(st, qt + u * D * R, np, kblk, st_rows, nbu, D, a->scale);
      for (int v = u; v < u + np; v++) {
        float *sv = st + (v - u) * nbu * R;
        ops->softmax(sv, nbu, j0, lim[v], j0 + nbu > lo[v], m[v], l[v], corr);
        ops->pv(acc + v * R * D, sv, vblk, st_rows, nbu, D, tn[v], corr);
      }
    }
  }
  for (int64_t r = 0; r < nr; r++) {
    int64_t i = i0 + r, t = i / G;
    float *o = a->out + (t * a->Hq + kvh * G + i % G) * D;
    float inv = 1.0f / l[r / R][r % R];
    for (int64_t d = 0; d < D; d++) o[d] = acc[r * D + d] * inv;
  }
}

typedef struct attn_tile_args {
  const attn_args *a;
  const cpu_attn_ops *ops;
  int64_t rows_task; /* query rows per task: tiles per task x R */
  int64_t ntask;     /* tasks per KV head */
} attn_tile_args;

static void attn_tile_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const attn_tile_args *ta = arg;
  const attn_args *a = ta->a;
  const int64_t rows = a->T * a->G;
  for (int64_t i = b; i < e; i++) {
    /* KV head outer, so the threads work on one head's rows at a time.
     * Within a head, last tasks first: they see the most keys, and ending
     * with the short ones evens out the threads' finishing times. */
    int64_t kvh = i / ta->ntask, task = ta->ntask - 1 - i % ta->ntask;
    int64_t i0 = task * ta->rows_task;
    attn_tiles(a, ta->ops, kvh, i0, rows - i0 < ta->rows_task ? rows - i0 : ta->rows_task);
  }
}

/* The tile kernels for this context's ISA, or NULL (portable path). */
static const cpu_attn_ops *tile_ops(const cpu_kernel_set *k) {
#if defined(MI_CPU_X86)
  if (k == &cpu_kernels_avx512 || k == &cpu_kernels_avx512bf16act) return &cpu_attn_avx512;
  if (k == &cpu_kernels_avx2) return &cpu_attn_avx2;
#else
  (void)k;
#endif
  return NULL;
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

/* Decode (one query row): split the positions, not the heads, in the
 * manner of flash-decoding. The cache is [n_ctx][Hkv][D], so one position's
 * K (or V) for every head is a single contiguous Hkv·D run: a task that owns
 * a range of positions and every head reads K and V front to back, two
 * sequential streams the hardware prefetchers follow. (One task per KV head
 * instead reads D of every Hkv·D values: measured here, ~7 GB/s at 3000
 * positions, about a third of what a sequential stream gets.) Each task
 * keeps, per query head, a running max m, a sum l and an unnormalised
 * accumulator; the caller merges the tasks' partial results. */
#define SPLIT_ROWS 4          /* rows widened and consumed together (dot4/axpy4) */
#define SPLIT_BLK 64          /* rows per online-softmax rescale */
#define SPLIT_MAX_ROW 4096    /* Hkv·D: the widened rows live on the stack */
#define SPLIT_MAX_HQ 128      /* query heads: scores s[Hq][SPLIT_BLK] on the stack */
#define SPLIT_MIN_ROWS 64     /* positions per task at least */
#define SPLIT_STREAMS 8       /* interleaved position streams per task (ISA kernels) */

typedef struct split_args {
  const attn_args *a;
  const cpu_attn_ops *ops; /* the ISA's decode kernels, or NULL: portable loops */
  int64_t ntask;
  float *part; /* [ntask][Hq][D + 2]: acc[D], then m, l */
} split_args;

/* Rows j .. j+nr-1 of a cache as f32 rows Hkv·D apart: widened into buf
 * for a half-precision cache, in place for f32. */
static const float *split_rows(const attn_args *a, const void *cache, int64_t j, int nr,
                               float *buf) {
  const int64_t rs = a->Hkv * a->D;
  if (a->kvt == MI_DTYPE_F32) return (const float *)cache + j * rs;
  a->k->to_f32(buf, (const uint16_t *)cache + j * rs, a->kvt, nr * rs);
  return buf;
}

static void split_range(const split_args *sa, int64_t task) {
  const attn_args *a = sa->a;
  const cpu_kernel_set *k = a->k;
  const int64_t Hq = a->Hq, D = a->D, G = a->G, rs = a->Hkv * D, L = a->pos0 + 1;
  const int64_t j0 = L * task / sa->ntask, j1 = L * (task + 1) / sa->ntask;
  const cpu_attn_ops *ops = sa->ops;
  const int half = a->kvt != MI_DTYPE_F32;
  float *part = sa->part + task * Hq * (D + 2);
  float s[SPLIT_MAX_HQ * SPLIT_BLK];                       /* [Hq][SPLIT_BLK] scores, then p */
  float m[SPLIT_MAX_HQ], l[SPLIT_MAX_HQ], corr[SPLIT_MAX_HQ]; /* running max, sum; rescale */
  float buf[half && !ops ? SPLIT_ROWS * SPLIT_MAX_ROW : 1]; /* [SPLIT_ROWS][Hkv·D] widened rows */
  for (int64_t h = 0; h < Hq; h++) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
    memset(part + h * (D + 2), 0, (size_t)D * sizeof(float));
  }
  if (ops) {
    /* The ISA kernels take a block's rows from SPLIT_STREAMS equal parts of
     * [j0, j1), interleaved (row i of the block from part i % streams):
     * K, then V, is read as that many sequential streams at once. One
     * stream per thread leaves the memory system idle between cache-line
     * fills (measured, f16 cache of 28 layers at 3000 positions, 2 threads:
     * 8 streams ~2x the KV bandwidth of 1, ~24 GB/s). Softmax does not care
     * about the order of the positions. */
    int64_t cur[SPLIT_STREAMS], end[SPLIT_STREAMS];
    for (int i = 0; i < SPLIT_STREAMS; i++) {
      cur[i] = j0 + (j1 - j0) * i / SPLIT_STREAMS;
      end[i] = j0 + (j1 - j0) * (i + 1) / SPLIT_STREAMS;
    }
    int64_t ro[SPLIT_BLK]; /* element offset of each block row in the cache */
    for (;;) {
      int nb = 0;
      while (nb < SPLIT_BLK) {
        int took = 0;
        for (int i = 0; i < SPLIT_STREAMS && nb < SPLIT_BLK; i++)
          if (cur[i] < end[i]) {
            ro[nb++] = cur[i]++ * rs;
            took = 1;
          }
        if (!took) break;
      }
      if (nb == 0) break;
      ops->dec_qk(s, SPLIT_BLK, a->q, Hq, G, a->kc, a->kvt, ro, nb, D, a->scale);
      ops->dec_softmax(s, SPLIT_BLK, nb, Hq, m, l, corr);
      ops->dec_pv(part, D + 2, s, SPLIT_BLK, corr, a->vc, a->kvt, ro, nb, Hq, G, D);
    }
  } else {
    /* portable: blocks of consecutive rows, four at a time */
    for (int64_t jb = j0; jb < j1; jb += SPLIT_BLK) {
      const int nb = j1 - jb < SPLIT_BLK ? (int)(j1 - jb) : SPLIT_BLK;
      for (int r = 0; r < nb; r += SPLIT_ROWS) {
        const int nr = nb - r < SPLIT_ROWS ? nb - r : SPLIT_ROWS;
        const float *kr = split_rows(a, a->kc, jb + r, nr, buf);
        for (int64_t h = 0; h < Hq; h++) {
          const float *qh = a->q + h * D, *kh = kr + (h / G) * D;
          float *sh = s + h * SPLIT_BLK + r;
          if (nr == SPLIT_ROWS) {
            float d4[4];
            k->dot4(qh, kh, rs, D, d4);
            for (int i = 0; i < 4; i++) sh[i] = d4[i] * a->scale;
          } else {
            for (int i = 0; i < nr; i++) sh[i] = k->dot(qh, kh + i * rs, D) * a->scale;
          }
        }
      }
      for (int64_t h = 0; h < Hq; h++)
        softmax_block(k, s + h * SPLIT_BLK, nb, &m[h], &l[h], part + h * (D + 2), D);
      for (int r = 0; r < nb; r += SPLIT_ROWS) {
        const int nr = nb - r < SPLIT_ROWS ? nb - r : SPLIT_ROWS;
        const float *vr = split_rows(a, a->vc, jb + r, nr, buf);
        for (int64_t h = 0; h < Hq; h++) {
          float *acc = part + h * (D + 2);
          const float *vh = vr + (h / G) * D, *ph = s + h * SPLIT_BLK + r;
          if (nr == SPLIT_ROWS)
            k->axpy4(acc, ph, vh, rs, D);
          else
            for (int i = 0; i < nr; i++) k->axpy(acc, ph[i], vh + i * rs, D);
        }
      }
    }
  }
  for (int64_t h = 0; h < Hq; h++) {
    part[h * (D + 2) + D] = m[h];
    part[h * (D + 2) + D + 1] = l[h];
  }
}

static void split_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  for (int64_t i = b; i < e; i++) split_range(arg, i);
}

/* out[h] = Σ_i e^(m_i - M)·acc_i / Σ_i e^(m_i - M)·l_i over the tasks i,
 * M = max_i m_i. Every task saw at least one position, so m_i is finite. */
static void split_merge(const split_args *sa) {
  const attn_args *a = sa->a;
  const int64_t Hq = a->Hq, D = a->D, st = Hq * (D + 2);
  for (int64_t h = 0; h < Hq; h++) {
    const float *p0 = sa->part + h * (D + 2);
    float M = p0[D];
    for (int64_t i = 1; i < sa->ntask; i++) M = p0[i * st + D] > M ? p0[i * st + D] : M;
    float *o = a->out + h * D, lsum = 0.0f;
    memset(o, 0, (size_t)D * sizeof(float));
    for (int64_t i = 0; i < sa->ntask; i++) {
      const float *pi = p0 + i * st, w = expf(pi[D] - M);
      lsum += w * pi[D + 1];
      a->k->axpy(o, w, pi, D);
    }
    a->k->scal(o, 1.0f / lsum, D);
  }
}

/* Returns 0 when it ran, 1 when this shape is not for it, -1 out of memory. */
static int attn_split(cpu_ctx *c, const attn_args *a) {
  if (a->T != 1 || a->Hq > SPLIT_MAX_HQ || a->Hkv * a->D > SPLIT_MAX_ROW) return 1;
  const int64_t L = a->pos0 + 1;
  int64_t ntask = L / SPLIT_MIN_ROWS;
  ntask = ntask < 1 ? 1 : ntask > c->nthreads ? c->nthreads : ntask;
  float *part = malloc((size_t)ntask * (size_t)(a->Hq * (a->D + 2)) * sizeof(float));
  if (!part) return -1;
  const cpu_attn_ops *ops = tile_ops(a->k);
  if (ops && (!ops->dec_qk || a->D % ops->lanes)) ops = NULL;
  split_args sa = {a, ops, ntask, part};
  if (ntask == 1)
    split_task(&sa, 0, 1, 0);
  else
    cpu_parallel_for(c->pool, ntask, 1, split_task, &sa);
  split_merge(&sa);
  free(part);
  return 0;
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
  /* Dynamic split: under the causal mask later tokens cost more. */
  const cpu_attn_ops *ops = tile_ops(c->k);
  /* lim[] and the row offsets of load_q are int32 */
  if (ops && T * G >= ops->lanes && pos0 + T <= INT32_MAX &&
      (CPU_ATTN_MAX_LANES + 1) * Hq * D <= INT32_MAX) {
    /* At least one full tile per KV head. Below that (decode) a tile would
     * spend its lanes on padding: attn_one reads the cache as often and
     * computes only the real rows. */
    int64_t rt = (int64_t)tiles_per_task(ops->lanes, D, T * G, Hkv, c->nthreads) * ops->lanes;
    attn_tile_args ta = {&a, ops, rt, (T * G + rt - 1) / rt};
    cpu_parallel_for_dynamic(c->pool, ta.ntask * Hkv, 1, attn_tile_task, &ta);
    return 0;
  }
  const int rc = attn_split(c, &a);
  if (rc < 0) return cpu_fail(c, "attention: out of memory for the decode split");
  if (rc == 0) return 0;
  int64_t ntask = T * Hkv * a.ngrp;
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
