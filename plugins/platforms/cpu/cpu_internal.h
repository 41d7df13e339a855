/* CPU platform plugin: what its files share. Not part of the SDK.
 *
 * Files and their jobs:
 *   cpu_plugin.c          descriptor, probe/score, init/fini, option parsing, iface table
 *   cpu_isa.c             run-time ISA detection (CPUID + XCR0) and variant names
 *   cpu_threads.c         persistent thread pool, parallel_for
 *   cpu_profile.c         MI_CPU_PROFILE=1: per-member timing, printed at fini
 *   cpu_memory.c          buffers, copies, streams
 *   cpu_kernels.c         kernel entry points: argument checks, threading, elementwise
 *   cpu_kernels_attn.c    rope and attention
 *   cpu_kernels_hybrid.c  the gated-DeltaNet hybrid's blocks (ABI 1.4): copy2d, l2norm,
 *                         sigmoid_mul, conv1d_causal, deltanet_gates, gated_delta_rule
 *                         (recurrent for one token, chunked for more), rmsnorm_gated
 *   cpu_kernels_generic.c per-ISA inner loops, portable C
 *   cpu_kernels_avx2.c    per-ISA inner loops, AVX2+FMA+F16C   (compiled with -mavx2 ...)
 *   cpu_kernels_avx512.c  per-ISA inner loops, AVX-512F        (compiled with -mavx512f ...)
 *   cpu_attn_avx2.c       tiled prefill attention micro-kernels, AVX2
 *   cpu_attn_avx512.c     tiled prefill attention micro-kernels, AVX-512F
 *   cpu_avx2_pack.h       prefill matmul weight panels (8x8 transposes), for the two
 *                         files built with -mavx2
 *   cpu_matmul_bf16.c     prefill matmul with activations rounded to bf16, VDPBF16PS
 *                         (AVX512_BF16; matmul_act=auto|bf16), compiled with -mavx512bf16
 *   cpu_matmul_q8_0.c     the matmul with Q8_0 weights: activations quantized to 8 bits,
 *                         integer dot products (cpu_q8_0.h); its inner loops in
 *                         cpu_q8_0_generic.c, cpu_q8_0_avx2.c (-mavx2) and
 *                         cpu_q8_0_avx512.c (-mavx512bw -mavx512vnni ...); the same
 *                         driver takes Q4_0, Q4_K and Q6_K weights (cpu_matmul_quant)
 *   cpu_quant_*.c         the Q4_0 / Q4_K / Q6_K tiles (cpu_quant.h): generic, avx2,
 *                         avx512 (VNNI), the activations quantized as for Q8_0
 */
#ifndef MI_CPU_INTERNAL_H
#define MI_CPU_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"
#include "mi/platform.h"
#include "mi/plugin.h"
#include "mi/tensor.h"

#define CPU_PLUGIN_NAME "cpu"
#define CPU_ERR_LEN 512

/* ---- ISA (cpu_isa.c) ---- */

typedef enum cpu_isa {
  CPU_ISA_GENERIC = 0,
  CPU_ISA_AVX2 = 1,       /* AVX2 + FMA + F16C, OS saves YMM */
  CPU_ISA_AVX512 = 2,     /* + AVX-512F, OS saves opmask/ZMM */
  CPU_ISA_AVX512BF16 = 3, /* + AVX-512BW/VL + AVX512_BF16 */
  CPU_ISA_COUNT
} cpu_isa;

typedef struct cpu_isa_info {
  int available[CPU_ISA_COUNT]; /* 1 when this machine AND its OS can run the variant */
  char why_not[CPU_ISA_COUNT][160]; /* for unavailable ones: the missing piece */
  /* AVX-512BW, VL and VNNI beside a usable avx512 variant: the Q8_0 matmul's
   * VPDPBUSD tiles (cpu_q8_0_avx512.c); without them it runs AVX2's. */
  int avx512_vnni;
  char vendor[16];
} cpu_isa_info;

/* Detects what this CPU and OS support. xcr0_override >= 0 replaces the
 * XGETBV(0) value (a test hook that simulates an OS without AVX-512 state). */
void cpu_isa_detect(cpu_isa_info *out, long long xcr0_override);
const char *cpu_isa_name(cpu_isa isa);
int cpu_isa_from_name(const char *name, cpu_isa *out); /* 0 ok, -1 unknown */
int cpu_isa_score(cpu_isa isa);
const char *cpu_isa_describe(cpu_isa isa); /* "x86-64 AVX-512 BF16" */
int cpu_isa_simd_width(cpu_isa isa);

/* ---- per-ISA inner loops (cpu_kernels_<isa>.c) ---- */

typedef struct cpu_kernel_set {
  const char *name;
  /* y[m, n] = Σ_k x[m, k] · w[n, k] for m in [m0, m1), n in [n0, n1).
   * x: [M, K] f32 (row stride K); w: [N, K] in dt (f32/f16/bf16); y: [M, N]. */
  void (*matmul_tile)(float *y, const float *x, const void *w, mi_dtype dt, int64_t N, int64_t K,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1);
  float (*dot)(const float *a, const float *b, int64_t n);   /* Σ a·b */
  void (*axpy)(float *y, float a, const float *x, int64_t n); /* y += a·x */
  void (*scal)(float *y, float a, int64_t n);                 /* y *= a */
  /* Four rows at once (attention: 4 keys / 4 values per pass, so the query
   * or the accumulator is loaded once and the call overhead is shared):
   *   dot4:  out[i] = Σ_d a[d] · b[i·stride + d], i < 4
   *   axpy4: y[d] += Σ_i c[i] · x[i·stride + d] */
  void (*dot4)(const float *a, const float *b, int64_t stride, int64_t n, float out[4]);
  void (*axpy4)(float *y, const float c[4], const float *x, int64_t stride, int64_t n);
  /* dst[i] = f32(src[i]) for a row of f16 or bf16 (exact widening). */
  void (*to_f32)(float *dst, const void *src, mi_dtype dt, int64_t n);
  /* Optional (NULL: cpu_kernels.c's portable loop), prefill's elementwise work:
   *   silu_mul: y[i] = silu(g[i])·u[i], silu(g) = g / (1 + e^-g), within a few
   *             ulp of that formula in f32 (a vectorised e^x, not expf)
   *   from_f32: dst[i] = f16/bf16(src[i]) bit for bit as mi_f32_to_f16 /
   *             mi_f32_to_bf16 (round to nearest even; their NaN encodings) */
  void (*silu_mul)(float *y, const float *g, const float *u, int64_t n);
  void (*from_f32)(void *dst, mi_dtype dt, const float *src, int64_t n);
} cpu_kernel_set;

/* Every cpu_kernels_<isa>.c names its inner loops after the members above,
 * so one list fills each ISA's table: CPU_KERNEL_SET_BASE for the required
 * members, CPU_KERNEL_SET for an ISA that also has the optional ones. */
#define CPU_KERNEL_SET_BASE(set_name, tile_fn)                                                     \
  .name = (set_name), .matmul_tile = (tile_fn), .dot = dot, .axpy = axpy, .scal = scal,            \
  .dot4 = dot4, .axpy4 = axpy4, .to_f32 = to_f32
#define CPU_KERNEL_SET(set_name, tile_fn)                                                          \
  { CPU_KERNEL_SET_BASE(set_name, tile_fn), .silu_mul = silu_mul, .from_f32 = from_f32 }

extern const cpu_kernel_set cpu_kernels_generic;
#if defined(MI_CPU_X86)
extern const cpu_kernel_set cpu_kernels_avx2;
extern const cpu_kernel_set cpu_kernels_avx512;
/* cpu_kernels_avx512 with bf16-weight prefill on VDPBF16PS (cpu_matmul_bf16.h) */
extern const cpu_kernel_set cpu_kernels_avx512bf16act;
#endif

/* ---- thread pool (cpu_threads.c) ---- */

typedef struct cpu_pool cpu_pool;
/* One chunk of work: [begin, end) of the caller's index space; tid is the
 * running thread's index in [0, nthreads). */
typedef void (*cpu_task_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* nthreads includes the calling thread (nthreads - 1 workers are started).
 * Idle threads spin spin_us microseconds before sleeping. */
int cpu_pool_create(cpu_pool **out, int nthreads, int spin_us, char *err, size_t err_len);
void cpu_pool_destroy(cpu_pool *p);
int cpu_pool_threads(const cpu_pool *p);
/* Static split: [0, total) cut into at most nthreads contiguous ranges whose
 * sizes are multiples of grain (except the last). Returns when all are done. */
void cpu_parallel_for(cpu_pool *p, int64_t total, int64_t grain, cpu_task_fn fn, void *arg);
/* Dynamic split: threads take grain-sized chunks from a shared counter, for
 * work whose cost varies by index (causal attention). */
void cpu_parallel_for_dynamic(cpu_pool *p, int64_t total, int64_t grain, cpu_task_fn fn,
                              void *arg);
/* Counters kept only while profiling (cpu_profile.c): parallel jobs, the
 * time the caller waited for workers after its own share, worker sleeps. */
typedef struct cpu_pool_stats {
  _Atomic int64_t jobs, wait_ns, sleeps;
} cpu_pool_stats;
void cpu_pool_set_profile(cpu_pool *p, cpu_pool_stats *st); /* before any job */

/* ---- the context ---- */

typedef struct cpu_ctx {
  const mi_host_api *host;
  cpu_isa isa;
  const cpu_kernel_set *k;
  cpu_pool *pool;
  int nthreads;
  char device_name[128];
  int comm_rank, comm_size; /* tensor-parallel group (cpu_comm.c) */
  struct cpu_prof *prof;    /* MI_CPU_PROFILE timing (cpu_profile.c), else NULL */
  struct cpu_rope_cache *rope; /* the last positions' cos/sin (cpu_kernels_attn.c) */
  /* Q8_0 weights (cpu_matmul_q8_0.c): the ISA's inner loops, the kept
   * buffer of quantized activations, and matmul_act=f32 (exact: x stays
   * f32, the weights are widened) */
  const struct cpu_q8_ops *q8ops;
  struct cpu_q8_scratch *q8;
  int matmul_exact;
  cpu_pool_stats pool_stats;
  /* The last error message. One per context: a caller sharing a context
   * across threads sees the most recent one. */
  char err[CPU_ERR_LEN];
} cpu_ctx;

/* Records an error ("cpu: <kernel>: <problem>") and returns -1. */
int cpu_fail(cpu_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The argument checks the entry points share (cpu_kernels.c), in the
 * contract's order, failing as cpu_fail does ("<kern>: ..."). Each returns
 * -1 after cpu_fail, 0 when there is nothing to do (the pointers are not
 * looked at then), 1 to go on.
 *   cpu_check_ew:   elementwise over n: n >= 0, then y, a and b non-NULL
 *                   (b_name NULL: no b)
 *   cpu_check_rows: a norm over rows of dim: rows >= 0, dim > 0, eps >= 0,
 *                   then y and x non-NULL */
int cpu_check_ew(cpu_ctx *c, const char *kern, int64_t n, const void *y, const void *a,
                 const char *a_name, const void *b, const char *b_name);
int cpu_check_rows(cpu_ctx *c, const char *kern, int64_t rows, int64_t dim, float eps,
                   const void *y, const void *x);

/* ---- rope's cos/sin table, kept between calls (cpu_kernels_attn.c) ---- */
int cpu_rope_cache_init(cpu_ctx *c); /* -1: out of memory */
void cpu_rope_cache_free(cpu_ctx *c);

/* ---- per-member timing, MI_CPU_PROFILE=1 (cpu_profile.c) ---- */

typedef struct cpu_prof cpu_prof;
int cpu_profile_init(cpu_ctx *c); /* after the pool exists; -1: out of memory */
/* The table get_iface hands out: base, or its timed copy when profiling. */
const mi_platform_iface *cpu_profile_iface(cpu_ctx *c, const mi_platform_iface *base);
void cpu_profile_report(cpu_ctx *c); /* prints to stderr and frees; before the pool goes */

/* ---- collectives (cpu_comm.c) ---- */

int cpu_convert(void *ctx, mi_stream *s, void *dst, mi_dtype dst_dtype, const void *src,
                mi_dtype src_dtype, int64_t n);

int cpu_comm_init(cpu_ctx *c, char *err, size_t err_len);
void cpu_comm_fini(cpu_ctx *c);
int cpu_comm_info(void *ctx, int *rank, int *size);
int cpu_allreduce_sum_f32(void *ctx, mi_stream *s, float *buf, int64_t n);
int cpu_broadcast(void *ctx, mi_stream *s, void *buf, size_t n, int root);

/* ---- iface members (cpu_memory.c, cpu_kernels*.c) ---- */

int cpu_buffer_alloc(void *ctx, size_t size, mi_buffer **out);
int cpu_buffer_wrap_host(void *ctx, const void *host, size_t size, mi_buffer **out);
void cpu_buffer_free(void *ctx, mi_buffer *buf);
void *cpu_buffer_ptr(void *ctx, mi_buffer *buf);
int cpu_memcpy_h2d(void *ctx, mi_stream *s, void *dst, const void *src, size_t n);
int cpu_memcpy_d2h(void *ctx, mi_stream *s, void *dst, const void *src, size_t n);
int cpu_memcpy_d2d(void *ctx, mi_stream *s, void *dst, const void *src, size_t n);
int cpu_stream_create(void *ctx, mi_stream **out);
void cpu_stream_destroy(void *ctx, mi_stream *s);
int cpu_stream_sync(void *ctx, mi_stream *s);

int cpu_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w, mi_dtype w_dtype,
               int64_t M, int64_t N, int64_t K);
int cpu_rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w, int64_t rows,
                int64_t dim, float eps, float w_offset);
int cpu_rope(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H,
             int64_t tok_stride, int64_t head_stride, int64_t rot_dim, float theta);
int cpu_attention(void *ctx, mi_stream *s, float *out, const float *q, const void *k_cache,
                  const void *v_cache, mi_dtype kv_dtype, int64_t T, int64_t Hq, int64_t Hkv,
                  int64_t D, int64_t pos0, float scale);
int cpu_silu_mul(void *ctx, mi_stream *s, float *y, const float *gate, const float *up,
                 int64_t n);
int cpu_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n);
int cpu_scale(void *ctx, mi_stream *s, float *y, const float *x, float alpha, int64_t n);
int cpu_embed(void *ctx, mi_stream *s, float *y, const void *table, mi_dtype dtype,
              const int32_t *ids, int64_t T, int64_t V, int64_t dim);
int cpu_argmax(void *ctx, mi_stream *s, int32_t *out, const float *x, int64_t rows, int64_t n);

/* ABI 1.4, cpu_kernels_hybrid.c */
int cpu_copy2d(void *ctx, mi_stream *s, float *y, int64_t y_stride, const float *x,
               int64_t x_stride, int64_t rows, int64_t n);
int cpu_l2norm(void *ctx, mi_stream *s, float *y, const float *x, int64_t rows, int64_t dim,
               float eps);
int cpu_sigmoid_mul(void *ctx, mi_stream *s, float *y, const float *x, const float *g,
                    int64_t n);
int cpu_conv1d_causal(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                      float *state, int64_t T, int64_t C, int64_t K, int silu);
int cpu_deltanet_gates(void *ctx, mi_stream *s, float *beta, float *g, const float *b,
                       const float *a, const float *a_log, const float *dt_bias, int64_t T,
                       int64_t H);
int cpu_gated_delta_rule(void *ctx, mi_stream *s, float *o, const float *q, const float *k,
                         const float *v, const float *g, const float *beta, float *state,
                         int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv);
int cpu_rmsnorm_gated(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                      const float *z, int64_t rows, int64_t dim, float eps);

/* ABI 1.6, cpu_run_host.c: kernel packs' loop bodies on the pool */
int cpu_run_host(void *ctx, mi_stream *s, void (*body)(void *arg, int64_t i0, int64_t i1), void *arg,
                 int64_t n);

/* ---- tiled prefill attention micro-kernels (cpu_attn_<isa>.c) ----
 * Used by cpu_kernels_attn.c when many query rows share a KV head (prefill):
 * a tile holds `lanes` query rows, one per SIMD lane, so every K/V row is
 * loaded once for all of them and the online softmax runs lane-wise.
 * Layouts (R = lanes, nb <= 64 keys of the current block):
 *   qt  [D][R]  the tile's query rows, transposed
 *   st  [nb][R] scores, then probabilities, of key j for row r at st[j·R + r]
 *   acc [R][D]  unnormalised outputs */
#define CPU_ATTN_MAX_LANES 16

typedef struct cpu_attn_ops {
  int lanes; /* R <= CPU_ATTN_MAX_LANES */
  /* qt[d·R + r] = q[off[r] + d] for r < R, d < D (gathers a tile's rows) */
  void (*load_q)(float *qt, const float *q, const int32_t *off, int64_t D);
  /* For tiles u < ntl (1 or 2; two share each K load), qt_u = qt + u·D·R,
   * st_u = st + u·nb·R:  st_u[j·R + r] = scale · Σ_d qt_u[d·R + r] · k[j·ks + d], j < nb */
  void (*qk)(float *st, const float *qt, int ntl, const float *k, int64_t ks, int nb, int64_t D,
             float scale);
  /* Online-softmax step for one block of keys j0 .. j0+nb-1, per lane r:
   * when masked, keys j0 + j > lim[r] get probability 0 (causal mask);
   * m' = max(m, max_j st), corr = e^(m - m'), st[j] = e^(st[j] - m'),
   * l = l·corr + Σ_j st[j], m = m'. Needs some unmasked key in the first
   * block of every lane (so m is finite from then on). */
  void (*softmax)(float *st, int nb, int64_t j0, const int32_t *lim, int masked, float *m,
                  float *l, float *corr);
  /* acc[r·D + d] = corr[r]·acc[r·D + d] + Σ_j st[j·R + r] · v[j·vs + d], for
   * rows r < round_up(nr, 4) (rows beyond nr are padding the caller ignores). */
  void (*pv)(float *acc, const float *st, const float *v, int64_t vs, int nb, int64_t D, int nr,
             const float *corr);
  /* Decode (one query position; optional, NULL: the portable path), over a
   * block of nb <= 64 cache rows read straight from the cache in kvt (f32,
   * f16, bf16). Block row j starts ro[j] elements into k / v (the rows may
   * come from several places: the caller interleaves streams); D is a
   * multiple of `lanes`. Query head h (of Hq) reads KV head h / G, at
   * column (h / G)·D of each row. Layouts: q [Hq][D]; s [Hq][ss] scores,
   * then probabilities; acc [Hq][as].
   * dec_qk:      s[h·ss + j] = scale · Σ_d q[h·D + d] · k[ro[j] + (h/G)·D + d]
   * dec_softmax: per head, as softmax above: m' = max(m, max_j s), corr =
   *              e^(m - m'), s = e^(s - m'), l = l·corr + Σ_j s, m = m'
   * dec_pv:      acc[h·as + d] = corr[h]·acc[h·as + d] + Σ_j s[h·ss + j] · v[ro[j] + (h/G)·D + d] */
  void (*dec_qk)(float *s, int64_t ss, const float *q, int64_t Hq, int64_t G, const void *k,
                 mi_dtype kvt, const int64_t *ro, int nb, int64_t D, float scale);
  void (*dec_softmax)(float *s, int64_t ss, int nb, int64_t Hq, float *m, float *l, float *corr);
  void (*dec_pv)(float *acc, int64_t as, const float *s, int64_t ss, const float *corr,
                 const void *v, mi_dtype kvt, const int64_t *ro, int nb, int64_t Hq, int64_t G,
                 int64_t D);
} cpu_attn_ops;

#if defined(MI_CPU_X86)
extern const cpu_attn_ops cpu_attn_avx2;
extern const cpu_attn_ops cpu_attn_avx512;
#endif

#endif
