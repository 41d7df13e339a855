/* The matmul with Q8_0 weights (cpu_q8_0.h has the layouts and the
 * activation scheme): y[M,N] = x[M,K] · W[N,K]ᵀ.
 *
 * Default: x is quantized once per call to 8 bits per block of 32 (the
 * scheme llama.cpp's CPU backend uses for Q8_0 dot products), then integer
 * dot products per block, scaled in f32, run in 4-row register tiles of the
 * ISA's ops (cpu_q8_0_<isa>.c). The weights are read as stored, in the
 * short-prompt walk of cpu_ip_streams.h: 4 rows from 4 far-apart streams
 * at a time, each block of 1024 values of k passed over by every group of
 * up to 4 tokens while it is in L1. Decode (M = 1) is that walk with one
 * token: a GEMV bound by the weight stream (34 bytes per 32 weights);
 * prefill reuses each quantized activation block for 4 weight rows and each
 * weight block for every token. Ops with a gemm (AVX-512 VNNI) take calls
 * of CPU_Q8_PANEL_MIN_M tokens and more on packed weight panels instead.
 *
 * Every other block type (cpu_quant.h) takes this same driver: the same
 * quantized activations (plus fl(d_x·Σq_x) per block for the min terms
 * of Q4_K, Q5_K, Q4_1, Q5_1), the same walk and threading, its own tiles;
 * the panels for the types gemm_takes.
 *
 * matmul_act=f32 (the plugin's exact mode): x stays f32 and the weights are
 * widened exactly (an f16 times an int8 is exact in f32; a Q4_K/Q6_K value
 * is rounded once; cpu_dequant.c), chunk by chunk, for the f32 dot
 * product: the f32-accumulation error only. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_ip_streams.h"
#include "cpu_q8_0.h"
#include "cpu_quant.h"

/* ---- the quantized activations' buffer, kept between calls ----
 * Decode quantizes a few KB per matmul, hundreds of times per token: the
 * buffer is kept (grown, never shrunk) so the hot path does not allocate.
 * A second thread calling on the same context while it is in use gets a
 * buffer of its own for that call. */
struct cpu_q8_scratch {
  pthread_mutex_t mu;
  void *buf;
  size_t cap;
};

int cpu_q8_scratch_init(cpu_ctx *c) {
  c->q8 = calloc(1, sizeof *c->q8);
  if (!c->q8) return -1;
  pthread_mutex_init(&c->q8->mu, NULL);
  return 0;
}

void cpu_q8_scratch_free(cpu_ctx *c) {
  if (!c->q8) return;
  pthread_mutex_destroy(&c->q8->mu);
  free(c->q8->buf);
  free(c->q8);
  c->q8 = NULL;
}

const cpu_q8_ops *cpu_q8_ops_for(cpu_isa isa, int avx512_vnni) {
#if defined(MI_CPU_X86)
  if (isa >= CPU_ISA_AVX512 && avx512_vnni) return &cpu_q8_avx512vnni;
  if (isa >= CPU_ISA_AVX2) return &cpu_q8_avx2;
#else
  (void)isa;
  (void)avx512_vnni;
#endif
  return &cpu_q8_generic;
}

/* Each array of the quantized activations starts on a 64-byte boundary
 * (the AVX-512 tiles load them aligned). */
#define ALIGN64(n) (((size_t)(n) + 63) / 64 * 64)

/* Bytes of the quantized activations for M rows (see cpu_q8_act). */
static size_t act_bytes(int64_t M, int64_t kp) {
  const size_t m = (size_t)M, k = (size_t)kp;
  return ALIGN64(m * k) + 5 * ALIGN64(m * (k / CPU_Q8_QK) * sizeof(float)); /* x16 as one */
}

/* Points a's arrays into buf (64-byte aligned). */
static void act_layout(cpu_q8_act *a, char *buf) {
  const size_t m = (size_t)a->M, k = (size_t)a->kp;
  a->q = (int8_t *)buf;
  a->d = (float *)(buf + ALIGN64(m * k));
  const size_t f = ALIGN64(m * (k / CPU_Q8_QK) * sizeof(float));
  a->s = (int32_t *)(buf + ALIGN64(m * k) + f);
  a->ds = (float *)(buf + ALIGN64(m * k) + 2 * f);
  a->sh = (int32_t *)(buf + ALIGN64(m * k) + 3 * f);
  a->x16 = (int16_t *)(buf + ALIGN64(m * k) + 4 * f); /* kp/16 int16 = kp/32 floats a row */
}

/* ---- the quantized path ---- */

typedef struct q8_args {
  const cpu_q8_ops *ops;
  mi_dtype dt;
  cpu_q_tile_fn tile; /* the weight type's */
  int64_t qk;         /* values per weight block */
  size_t wrow;        /* bytes per weight row */
  cpu_q8_act act;
  const float *x;
  float *y;
  const void *w;
  int64_t M, N, K;
  int split_m; /* 0: tasks are ranges of N (weight rows); 1: ranges of M */
} q8_args;

typedef struct q8_tile_args {
  const q8_args *a;
  int64_t m0; /* the task's first token */
} q8_tile_args;

static void quant_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const q8_args *a = arg;
  a->ops->quantize(&a->act, a->x, b, e);
  const int x16 = cpu_quant_wants_x16(a->dt), ds = cpu_quant_wants_ds(a->dt);
  if (!x16 && !ds) return;
  const int64_t nbp = a->act.kp / CPU_Q8_QK;
  /* a quantize whose ops say sums filled s and sh (-128 · Σ q_x over each
   * block and its first half): the sums below come from them, else from q
   * (M·K adds; padding blocks: q = 0, d = 0, so 0) */
  const int have_sums = a->ops->sums;
  for (int64_t m = b; m < e; m++)
    for (int64_t j = 0; j < nbp; j++) {
      const int8_t *q = a->act.q + m * a->act.kp + j * CPU_Q8_QK;
      int32_t lo = 0, hi = 0;
      if (have_sums) {
        lo = -a->act.sh[m * nbp + j] / 128;
        hi = -a->act.s[m * nbp + j] / 128 - lo;
      } else
        for (int i = 0; i < CPU_Q8_QK / 2; i++) {
          lo += q[i];
          hi += q[CPU_Q8_QK / 2 + i];
        }
      /* Q2_K, Q3_K: Σ q_x per 16 values (at most 16·127) */
      if (x16) {
        a->act.x16[m * (nbp * 2) + 2 * j] = (int16_t)lo;
        a->act.x16[m * (nbp * 2) + 2 * j + 1] = (int16_t)hi;
      }
      /* Q4_K, Q5_K, Q4_1, Q5_1: the min term's fl(d_x · Σ q_x) per block */
      if (ds) a->act.ds[m * nbp + j] = a->act.d[m * nbp + j] * (float)(lo + hi);
    }
}

/* cpu_ip_streams.h's callback: k in values (multiples of 1024 but the
 * last), turned into blocks. */
static void q8_tile_cb(void *arg, int64_t row, int mr, const int64_t col[4],
                       const void *const wr[4], int nr, int64_t k0, int64_t k1, int accum) {
  const q8_tile_args *t = arg;
  const q8_args *a = t->a;
  a->tile(a->y + (t->m0 + row) * a->N, a->N, col, &a->act, t->m0 + row, mr, wr, nr, k0 / a->qk,
          k1 / a->qk, accum);
}

/* Tokens per pass of the tiles over a task's weight rows: their quantized
 * activations (Q8_MB · K bytes, 192 KB at K = 3072) stay in L2 while the
 * weights stream past, rather than every token's coming again from L3 for
 * each 4 weight rows. (With VNNI, from CPU_Q8_PANEL_MIN_M tokens the panel
 * GEMM runs instead, in passes of its own.) */
#define Q8_MB 64

static void q8_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const q8_args *a = arg;
  const size_t wrow = a->wrow;
  const int64_t r0 = a->split_m ? b : 0, r1 = a->split_m ? e : a->M;
  const int64_t n0 = a->split_m ? 0 : b, n1 = a->split_m ? a->N : e;
  if (a->ops->gemm && a->ops->gemm_takes(a->dt) && r1 - r0 >= CPU_Q8_PANEL_MIN_M) {
    a->ops->gemm(a->y, a->N, &a->act, r0, r1, a->w, a->dt, wrow, n0, n1);
    return;
  }
  for (int64_t m = r0; m < r1; m += Q8_MB) {
    q8_tile_args t = {a, m};
    ip_stream_rows(a->w, wrow, a->K, r1 - m < Q8_MB ? r1 - m : Q8_MB, 4, n0, n1, q8_tile_cb, &t);
  }
}

/* ---- the exact path (matmul_act=f32) ---- */

#define EX_KC 256 /* values of k widened at a time (a multiple of every block) */

typedef struct ex_args {
  const cpu_kernel_set *k;
  mi_dtype dt;
  float *y;
  const float *x;
  const uint8_t *w;
  int64_t M, N, K;
} ex_args;

static void ex_task(void *arg, int64_t n0, int64_t n1, int tid) {
  (void)tid;
  const ex_args *a = arg;
  const size_t wrow = mi_dtype_row_bytes(a->dt, a->K);
  const size_t bb = mi_dtype_block_bytes(a->dt);
  const int64_t qk = mi_dtype_block(a->dt);
  float wf[EX_KC] __attribute__((aligned(64)));
  for (int64_t n = n0; n < n1; n++) {
    for (int64_t m = 0; m < a->M; m++)
      a->y[m * a->N + n] = 0.0f;
    for (int64_t k0 = 0; k0 < a->K; k0 += EX_KC) {
      const int64_t kn = a->K - k0 < EX_KC ? a->K - k0 : EX_KC;
      cpu_quant_dequant_row(a->dt, wf, a->w + (size_t)n * wrow + (size_t)(k0 / qk) * bb, kn);
      for (int64_t m = 0; m < a->M; m++)
        a->y[m * a->N + n] += a->k->dot(a->x + m * a->K + k0, wf, kn);
    }
  }
}

/* ---- entry ---- */

/* Below this many multiply-adds a call runs on the calling thread. */
#define Q8_PAR_MIN_MACS (1 << 16)

int cpu_matmul_q8_0(cpu_ctx *c, float *y, const float *x, const void *w, int64_t M, int64_t N,
                    int64_t K) {
  return cpu_matmul_quant(c, MI_DTYPE_Q8_0, y, x, w, M, N, K);
}

static cpu_q_tile_fn tile_for(const cpu_q8_ops *ops, mi_dtype dt) {
  switch (dt) {
  case MI_DTYPE_Q4_0: return ops->tile_q4_0;
  case MI_DTYPE_Q4_K: return ops->tile_q4_k;
  case MI_DTYPE_Q6_K: return ops->tile_q6_k;
  case MI_DTYPE_Q5_K: return ops->tile_q5_k;
  case MI_DTYPE_Q4_1: return ops->tile_q4_1;
  case MI_DTYPE_Q5_0: return ops->tile_q5_0;
  case MI_DTYPE_Q5_1: return ops->tile_q5_1;
  case MI_DTYPE_Q2_K: return ops->tile_q2_k;
  case MI_DTYPE_Q3_K: return ops->tile_q3_k;
  case MI_DTYPE_Q8_0: return ops->tile;
  default: return NULL;
  }
}

int cpu_matmul_quant(cpu_ctx *c, mi_dtype dt, float *y, const float *x, const void *w, int64_t M,
                     int64_t N, int64_t K) {
  const int64_t qk = mi_dtype_block(dt);
  if (!tile_for(c->q8ops, dt))
    return cpu_fail(
        c, "matmul: unsupported weight dtype %s (f32, f16, bf16 or a block type of quant.h only)",
        mi_dtype_name(dt));
  if (K % qk)
    return cpu_fail(c, "matmul: %s weights need K a multiple of %lld (got K=%lld)",
                    mi_dtype_name(dt), (long long)qk, (long long)K);
  const int nt = cpu_pool_threads(c->pool);
  const int serial = nt == 1 || (double)M * (double)N * (double)K < Q8_PAR_MIN_MACS;
  if (c->matmul_exact) {
    ex_args e = {c->k, dt, y, x, w, M, N, K};
    if (serial)
      ex_task(&e, 0, N, 0);
    else
      cpu_parallel_for(c->pool, N, 4, ex_task, &e);
    return 0;
  }
  const cpu_q8_ops *ops = c->q8ops;
  q8_args a = {.ops = ops,
               .dt = dt,
               .tile = tile_for(ops, dt),
               .qk = qk,
               .wrow = mi_dtype_row_bytes(dt, K),
               .x = x,
               .y = y,
               .w = w,
               .M = M,
               .N = N,
               .K = K};
  a.act.M = M;
  a.act.K = K;
  a.act.kp = (K + 63) / 64 * 64;
  const size_t need = act_bytes(M, a.act.kp);
  struct cpu_q8_scratch *sc = c->q8;
  void *own = NULL, *buf;
  const int kept = sc && pthread_mutex_trylock(&sc->mu) == 0;
  if (kept && sc->cap < need) {
    free(sc->buf);
    sc->cap = (need + 4095) / 4096 * 4096;
    if (!(sc->buf = aligned_alloc(64, sc->cap))) sc->cap = 0;
  }
  if (kept && sc->cap >= need) {
    buf = sc->buf;
  } else {
    buf = own = aligned_alloc(64, (need + 63) / 64 * 64);
    if (!own) {
      if (kept) pthread_mutex_unlock(&sc->mu);
      return cpu_fail(c, "matmul: out of memory for the quantized activations (%zu bytes)", need);
    }
  }
  act_layout(&a.act, buf);
  /* quantize: M·K values, a small share of the M·N·K work */
  if (!serial && M > 1 && M * K >= (1 << 16))
    cpu_parallel_for(c->pool, M, 1, quant_task, &a);
  else
    quant_task(&a, 0, M, 0);
  if (serial) {
    q8_task(&a, 0, N, 0);
  } else if (N >= 16 * nt) {
    /* slices of the weight rows, each read once, taken by whichever thread
     * is free: a static half each left the caller waiting ~20% of a decode
     * step on a shared host (one vCPU slower than the other) */
    int64_t g = (N / (8 * nt) + 15) / 16 * 16;
    if (g < 64) g = 64;
    cpu_parallel_for_dynamic(c->pool, N, g, q8_task, &a);
  } else {
    a.split_m = 1; /* few outputs, many tokens: share the tokens instead */
    cpu_parallel_for(c->pool, M, 4, q8_task, &a);
  }
  if (kept) pthread_mutex_unlock(&sc->mu);
  free(own);
  return 0;
}
