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
