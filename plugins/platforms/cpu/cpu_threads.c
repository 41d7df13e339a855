/* A persistent thread pool.
 *
 * Workers live from init to fini. A job is published by bumping a generation
 * counter; workers spin on it briefly (decode issues hundreds of small
 * kernels per token, and a futex wake costs more than the kernel) and then
 * sleep on a condition variable. The caller runs chunk 0 itself and waits
 * for the others the same way: spin, then sleep.
 *
 * Every shared field is a C11 atomic or is written only before the
 * generation store (release) and read only after its load (acquire), so the
 * pool is clean under ThreadSanitizer. A second caller arriving while a job
 * runs (another thread sharing the context, or a nested call) does not wait
 * or corrupt the job: it runs its work serially on its own thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define CPU_WORKER_STACK ((size_t)8 << 20)

typedef struct cpu_job {
  cpu_task_fn fn;
  void *arg;
  int64_t total, grain;
  int dynamic;
  _Atomic int64_t next; /* dynamic: first index not yet taken */
} cpu_job;

struct cpu_pool {
  int n; /* threads including the caller */
  int64_t spin_ns; /* how long to spin before sleeping */
  pthread_t *th;
  int started; /* workers actually created */
  cpu_job job;
  _Atomic uint64_t gen;   /* bumped once per job */
  _Atomic int pending;    /* workers that have not finished the current job */
  _Atomic int stop;
  _Atomic int busy;       /* a job is in flight (guards against concurrent callers) */
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  /* MI_CPU_PROFILE counters, or NULL; atomic: set while workers run */
  cpu_pool_stats *_Atomic stats;
};

typedef struct worker_arg {
  cpu_pool *p;
  int tid;
} worker_arg;

static void run_static(const cpu_job *j, int tid, int n) {
  int64_t nblocks = (j->total + j->grain - 1) / j->grain;
  int64_t b0 = nblocks * tid / n, b1 = nblocks * (tid + 1) / n;
  int64_t begin = b0 * j->grain, end = b1 * j->grain;
  if (end > j->total) end = j->total;
  if (begin < end) j->fn(j->arg, begin, end, tid);
}

static void run_dynamic(cpu_job *j, int tid) {
  for (;;) {
    int64_t begin = atomic_fetch_add(&j->next, j->grain);
    if (begin >= j->total) break;
    int64_t end = begin + j->grain < j->total ? begin + j->grain : j->total;
    j->fn(j->arg, begin, end, tid);
  }
}

static void run_share(cpu_pool *p, int tid) {
  if (p->job.dynamic)
    run_dynamic(&p->job, tid);
  else
    run_static(&p->job, tid, p->n);
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins for at most spin_ns until a new job (or stop) is published after
 * generation `seen` (worker: for_job = 1), or until every worker is done with
 * the current job (caller: for_job = 0). Returns 1 if that happened. The
 * clock is read once every 64 pauses: PAUSE takes from ~10 to ~140 cycles by
 * CPU model, so an iteration count alone would not bound the time. */
static int spin_wait(cpu_pool *p, int for_job, uint64_t seen) {
  if (p->spin_ns <= 0) return 0;
  int64_t deadline = mono_ns() + p->spin_ns;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (for_job ? atomic_load(&p->gen) != seen || atomic_load(&p->stop)
                  : atomic_load(&p->pending) == 0)
        return 1;
      cpu_relax();
    }
    if (mono_ns() > deadline) return 0;
  }
}

static void *worker_main(void *varg) {
  worker_arg wa = *(worker_arg *)varg;
  free(varg);
  cpu_pool *p = wa.p;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = atomic_load(&p->gen);
    if (g == seen && spin_wait(p, 1, seen)) g = atomic_load(&p->gen);
    if (g == seen && !atomic_load(&p->stop)) {
      pthread_mutex_lock(&p->mu);
      cpu_pool_stats *st = atomic_load_explicit(&p->stats, memory_order_relaxed);
      if (st) atomic_fetch_add(&st->sleeps, 1);
      while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv_work, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) break;
    seen = g;
    run_share(p, wa.tid);
    if (atomic_fetch_sub(&p->pending, 1) == 1) {
      /* Last one out wakes the caller if it went to sleep. Taking the lock
       * orders this with the caller's check-then-wait. */
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

int cpu_pool_create(cpu_pool **out, int nthreads, int spin_us, char *err, size_t err_len) {
  *out = NULL;
  if (nthreads < 1) nthreads = 1;
  cpu_pool *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, err_len, "cpu: out of memory creating the thread pool");
    return -1;
  }
  p->n = nthreads;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  /* Oversubscribed (more threads than CPUs): spinning only steals the CPU
   * from the thread we are waiting for, so sleep at once. */
  p->spin_ns = (online > 0 && nthreads > online) ? 0 : (int64_t)spin_us * 1000;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  if (nthreads > 1) {
    p->th = calloc((size_t)nthreads - 1, sizeof *p->th);
    if (!p->th) {
      snprintf(err, err_len, "cpu: out of memory creating the thread pool");
      cpu_pool_destroy(p);
      return -1;
    }
  }
  for (int i = 1; i < nthreads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    int rc = wa ? 0 : ENOMEM;
    if (wa) {
      wa->p = p;
      wa->tid = i;
      /* An explicit stack size: kernels keep their tiles on the stack (a
       * prefill attention task uses ~330 KiB at head_dim 128, ~780 KiB at
       * the largest head_dim), and the default depends on `ulimit -s`. */
      pthread_attr_t attr;
      rc = pthread_attr_init(&attr);
      if (!rc) {
        (void)pthread_attr_setstacksize(&attr, CPU_WORKER_STACK);
        rc = pthread_create(&p->th[i - 1], &attr, worker_main, wa);
        pthread_attr_destroy(&attr);
      }
      if (rc) free(wa);
    }
    if (rc) {
      snprintf(err, err_len, "cpu: cannot start worker thread %d of %d: %s", i, nthreads - 1,
               strerror(rc));
      cpu_pool_destroy(p);
      return -1;
    }
    p->started++;
  }
  *out = p;
  return 0;
}

void cpu_pool_destroy(cpu_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  pthread_mutex_destroy(&p->mu);
  free(p->th);
  free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p ? p->n : 1; }

void cpu_pool_set_profile(cpu_pool *p, cpu_pool_stats *st) {
  if (p) atomic_store(&p->stats, st);
}

static void pool_run(cpu_pool *p, int64_t total, int64_t grain, int dynamic, cpu_task_fn fn,
                     void *arg) {
  if (total <= 0) return;
  if (grain < 1) grain = 1;
  int expected = 0;
  if (!p || p->n == 1 || total <= grain || !atomic_compare_exchange_strong(&p->busy, &expected, 1)) {
    fn(arg, 0, total, 0); /* serial: too small, single-threaded, or pool in use */
    return;
  }
  p->job.fn = fn;
  p->job.arg = arg;
  p->job.total = total;
  p->job.grain = grain;
  p->job.dynamic = dynamic;
  atomic_store(&p->job.next, 0);
  atomic_store(&p->pending, p->n - 1);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->gen, 1); /* publishes the job fields above */
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);

  run_share(p, 0);

  cpu_pool_stats *st = atomic_load_explicit(&p->stats, memory_order_relaxed);
  const int64_t t0 = st ? mono_ns() : 0;
  if (atomic_load(&p->pending) > 0 && !spin_wait(p, 0, 0)) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  if (st) {
    atomic_fetch_add(&st->jobs, 1);
    atomic_fetch_add(&st->wait_ns, mono_ns() - t0);
  }
  atomic_store(&p->busy, 0);
}

void cpu_parallel_for(cpu_pool *p, int64_t total, int64_t grain, cpu_task_fn fn, void *arg) {
  pool_run(p, total, grain, 0, fn, arg);
}

void cpu_parallel_for_dynamic(cpu_pool *p, int64_t total, int64_t grain, cpu_task_fn fn,
                              void *arg) {
  pool_run(p, total, grain, 1, fn, arg);
}
