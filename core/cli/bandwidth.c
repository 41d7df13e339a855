#include "core/cli/bandwidth.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bw_job {
  float *a, *b, *c;
  size_t lo, hi;
  int mode; /* 0 triad, 1 read */
  double sum;
  pthread_barrier_t *bar;
  int reps;
  double *best; /* written by thread 0 */
  double *times;
} bw_job;

/* The two loops, on local restrict pointers so the compiler vectorises them
 * (through the job struct it could not rule out aliasing). The read loop
 * keeps 8 vector accumulators: a float sum is otherwise one dependent add
 * chain, compute-bound far below memory speed. */
typedef float v4f __attribute__((vector_size(16)));

static void triad(float *restrict a, const float *restrict b, const float *restrict c, size_t lo,
                  size_t hi) {
  for (size_t i = lo; i < hi; i++) a[i] = b[i] + 3.0f * c[i];
}

static float read_sum(const float *restrict b, size_t lo, size_t hi) {
  v4f acc[8] = {{0}};
  size_t i = lo;
  for (; i + 32 <= hi; i += 32)
    for (int u = 0; u < 8; u++) {
      v4f v;
      __builtin_memcpy(&v, b + i + 4 * u, sizeof v);
      acc[u] += v;
    }
  float s = 0;
  for (int u = 0; u < 8; u++) s += acc[u][0] + acc[u][1] + acc[u][2] + acc[u][3];
  for (; i < hi; i++) s += b[i];
  return s;
}

static void *bw_worker(void *arg) {
  bw_job *j = arg;
  for (int r = 0; r < j->reps; r++) {
    pthread_barrier_wait(j->bar);
    double t0 = now_s();
    if (j->mode == 0)
      triad(j->a, j->b, j->c, j->lo, j->hi);
    else
      j->sum += read_sum(j->b, j->lo, j->hi);
    pthread_barrier_wait(j->bar);
    if (j->times) j->times[r] = now_s() - t0;
  }
  return NULL;
}

static double run_bw(int threads, float *a, float *b, float *c, size_t n, int mode, int reps) {
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  bw_job *jobs = calloc((size_t)threads, sizeof *jobs);
  double *times = calloc((size_t)reps, sizeof *times);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  for (int t = 0; t < threads; t++) {
    jobs[t] = (bw_job){a, b, c, n * t / threads, n * (t + 1) / threads, mode, 0, &bar, reps,
                       NULL, t == 0 ? times : NULL};
    pthread_create(&tid[t], NULL, bw_worker, &jobs[t]);
  }
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&bar);
  double best = 1e30;
  for (int r = 1; r < reps; r++) /* the first pass warms pages: skip it */
    if (times[r] < best) best = times[r];
  free(tid);
  free(jobs);
  free(times);
  return best;
}

int mi_measure_bandwidth(int threads, size_t bytes, int reps, mi_bandwidth *out) {
  if (threads < 1) threads = 1;
  if (reps < 2) reps = 2;
  size_t n = bytes / sizeof(float);
  float *a = aligned_alloc(64, n * sizeof(float));
  float *b = aligned_alloc(64, n * sizeof(float));
  float *c = aligned_alloc(64, n * sizeof(float));
  if (!a || !b || !c) {
    free(a);
    free(b);
    free(c);
    return -1;
  }
  /* first touch from the measuring threads' pattern is not important here:
   * one socket. Fill to fault the pages in. */
  for (size_t i = 0; i < n; i++) {
    a[i] = 0;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  double tt = run_bw(threads, a, b, c, n, 0, reps);
  double tr = run_bw(threads, a, b, c, n, 1, reps);
  out->triad_gbs = 3.0 * (double)n * sizeof(float) / tt / 1e9;
  out->read_gbs = (double)n * sizeof(float) / tr / 1e9;
  free(a);
  free(b);
  free(c);
  return 0;
}

/* ---------------- FMA peak ---------------- */

/* Each loop keeps FMA_ACC independent accumulators so the multiply-add
 * latency (4 cycles on current x86 cores, 2 pipes: 8 in flight) never
 * limits it; 12 + 2 constants fit the 16 registers of AVX2 without spills.
 * acc = acc·m + c converges to c/(1 - m): finite, never denormal. The sum
 * is returned so the compiler cannot drop the loop. */
#define FMA_ACC 12

typedef float v4f_g __attribute__((vector_size(16)));

static float fma_loop_generic(long iters) {
  v4f_g a[FMA_ACC], m = {0.999f, 0.999f, 0.999f, 0.999f}, c = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
  for (int j = 0; j < FMA_ACC; j++) a[j] = (v4f_g){(float)j, 1, 2, 3};
  for (long i = 0; i < iters; i++)
    for (int j = 0; j < FMA_ACC; j++) a[j] = a[j] * m + c;
  float s = 0;
  for (int j = 0; j < FMA_ACC; j++) s += a[j][0] + a[j][1] + a[j][2] + a[j][3];
  return s;
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long iters) {
  __m256 a[FMA_ACC], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
  for (int j = 0; j < FMA_ACC; j++) a[j] = _mm256_set1_ps((float)j);
  for (long i = 0; i < iters; i++)
    for (int j = 0; j < FMA_ACC; j++) a[j] = _mm256_fmadd_ps(a[j], m, c);
  for (int j = 1; j < FMA_ACC; j++) a[0] = _mm256_add_ps(a[0], a[j]);
  float t[8];
  _mm256_storeu_ps(t, a[0]);
  return t[0] + t[7];
}

__attribute__((target("avx512f,fma"))) static float fma_loop_avx512(long iters) {
  __m512 a[FMA_ACC], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
  for (int j = 0; j < FMA_ACC; j++) a[j] = _mm512_set1_ps((float)j);
  for (long i = 0; i < iters; i++)
    for (int j = 0; j < FMA_ACC; j++) a[j] = _mm512_fmadd_ps(a[j], m, c);
  for (int j = 1; j < FMA_ACC; j++) a[0] = _mm512_add_ps(a[0], a[j]);
  float t[16];
  _mm512_storeu_ps(t, a[0]);
  return t[0] + t[15];
}

/* The bf16 dot-product peak: VDPBF16PS zmm, 16 lanes x 2 multiply-adds.
 * BF16_ACC accumulators: 32 zmm registers leave room for more than the FMA
 * loop's 12, which covers a longer latency than the FMA's (5-6 cycles on
 * the cores that have it). acc += 1·2^-20 + 1·2^-20 per step: after the
 * longest run (2^30 steps) 2^11, so never denormal nor infinite. */
#define BF16_ACC 16
__attribute__((target("avx512f,avx512bf16"))) static float bf16dot_loop_avx512(long iters) {
  __m512 a[BF16_ACC];
  /* bf16 1.0 = 0x3f80, 2^-20 = 0x3580: pairs (1, 1) and (2^-20, 2^-20) */
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x35803580);
  for (int j = 0; j < BF16_ACC; j++) a[j] = _mm512_set1_ps((float)j);
  for (long i = 0; i < iters; i++)
    for (int j = 0; j < BF16_ACC; j++) a[j] = _mm512_dpbf16_ps(a[j], x, y);
  for (int j = 1; j < BF16_ACC; j++) a[0] = _mm512_add_ps(a[0], a[j]);
  float t[16];
  _mm512_storeu_ps(t, a[0]);
  return t[0] + t[15];
}
#endif

typedef float (*fma_loop_fn)(long iters);

/* Workers wait at a gate until every thread exists (go = 1) or one could
 * not be started (go = -1: they leave without touching the barrier, which
 * could then never fill). */
typedef struct fma_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go;
} fma_gate;

typedef struct fma_job {
  fma_loop_fn fn;
  long iters;
  int reps;
  fma_gate *gate;
  pthread_barrier_t *bar;
  double *times; /* thread 0's, one per rep */
  float sink;
} fma_job;

static void *fma_worker(void *arg) {
  fma_job *j = arg;
  pthread_mutex_lock(&j->gate->mu);
  while (j->gate->go == 0) pthread_cond_wait(&j->gate->cv, &j->gate->mu);
  int go = j->gate->go;
  pthread_mutex_unlock(&j->gate->mu);
  if (go < 0) return NULL;
  for (int r = 0; r < j->reps; r++) {
    pthread_barrier_wait(j->bar);
    double t0 = now_s();
    j->sink += j->fn(j->iters);
    pthread_barrier_wait(j->bar); /* the time is until the slowest thread ends */
    if (j->times) j->times[r] = now_s() - t0;
  }
  return NULL;
}

/* Best-of-reps seconds for `threads` threads each running fn(iters) at
 * once; -1 when a thread cannot be started or memory runs out. */
static double run_fma(fma_loop_fn fn, long iters, int threads, int reps) {
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  fma_job *jobs = calloc((size_t)threads, sizeof *jobs);
  double *times = calloc((size_t)reps, sizeof *times);
  double best = -1;
  if (tid && jobs && times) {
    fma_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    int started = 1; /* the caller is thread 0 */
    for (int t = 0; t < threads; t++) {
      jobs[t] = (fma_job){fn, iters, reps, &gate, &bar, t == 0 ? times : NULL, 0};
      if (t > 0) {
        if (pthread_create(&tid[t], NULL, fma_worker, &jobs[t]) != 0) break;
        started++;
      }
    }
    pthread_mutex_lock(&gate.mu);
    gate.go = started == threads ? 1 : -1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    if (started == threads) fma_worker(&jobs[0]);
    for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
    if (started == threads) {
      best = 1e30;
      for (int r = 0; r < reps; r++)
        if (times[r] < best) best = times[r];
    }
    pthread_barrier_destroy(&bar);
  }
  free(tid);
  free(jobs);
  free(times);
  return best;
}

/* Per-thread and all-threads GFLOP/s of fn at flops_iter FLOPs per
 * iteration: iterations for ~2 ms on one thread (long against the timer
 * and the barrier, microseconds; shorter than a scheduler time slice, so on
 * a shared machine some of the reps run without being preempted and the
 * best of them is the cores' own rate). */
static int measure_loop(fma_loop_fn fn, double flops_iter, int threads, int reps,
                        mi_fma_peak *out) {
  if (threads < 1) threads = 1;
  if (reps < 1) reps = 1;
  long iters = 1 << 12;
  for (;;) {
    double t = run_fma(fn, iters, 1, 3);
    if (t < 0) return -1;
    if (t >= 0.002 || iters >= (1L << 30)) break;
    iters *= t > 0.0002 ? (long)(0.002 / t) + 1 : 8;
  }
  const double flops = (double)iters * flops_iter;
  double t1 = run_fma(fn, iters, 1, reps), tn = threads > 1 ? run_fma(fn, iters, threads, reps) : t1;
  if (t1 <= 0 || tn <= 0) return -1;
  out->per_thread_gflops = flops / t1 / 1e9;
  out->all_gflops = flops * threads / tn / 1e9;
  return 0;
}

int mi_measure_bf16dot_peak(const char *variant, int threads, int reps, mi_fma_peak *out) {
  memset(out, 0, sizeof *out);
  if (!variant || !strstr(variant, "+bf16act")) return -1;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return -1;
  out->lanes = 16;
  out->fma = 1;
  /* each iteration: BF16_ACC instructions of 16 lanes x 2 multiply-adds */
  return measure_loop(bf16dot_loop_avx512, (double)BF16_ACC * 16 * 2 * 2.0, threads, reps, out);
#else
  (void)threads;
  (void)reps;
  return -1;
#endif
}

int mi_measure_fma_peak(const char *variant, int threads, int reps, mi_fma_peak *out) {
  memset(out, 0, sizeof *out);
  if (!variant) return -1;
  fma_loop_fn fn = NULL;
  if (strcmp(variant, "generic") == 0) {
    fn = fma_loop_generic;
    out->lanes = 4;
    out->fma = 0;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (strcmp(variant, "avx2") == 0 && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    fn = fma_loop_avx2;
    out->lanes = 8;
    out->fma = 1;
  }
  if (strncmp(variant, "avx512", 6) == 0 && __builtin_cpu_supports("avx512f")) {
    fn = fma_loop_avx512;
    out->lanes = 16;
    out->fma = 1;
  }
#endif
  if (!fn) return -1;
  /* each iteration: FMA_ACC vector ops of `lanes` multiply-adds, 2 FLOPs each */
  return measure_loop(fn, (double)FMA_ACC * out->lanes * 2.0, threads, reps, out);
}
