/* Per-member timing of the kernels, for finding where prefill time goes:
 * MI_CPU_PROFILE=1 in the environment at init (=cpu: thread CPU time, see
 * prof_now). Off (the default) it costs
 * nothing: get_iface hands out the plain table, and the pool's one extra
 * branch per job reads a NULL pointer. On, get_iface hands out a copy of
 * the table whose kernel members are timed wrappers, and at fini one table
 * goes to stderr: per member (matmul and attention also per shape) the
 * calls, the total and per-call time and, where the arithmetic is known,
 * the GFLOP/s; then the pool's figures: jobs, the time the calling thread
 * waited for the workers after its own share (the load imbalance plus the
 * hand-off), and how often a worker went to sleep (each costs a futex wake).
 *
 * The wrappers time the whole member (argument checks, the split, the
 * wait), on the calling thread, with CLOCK_MONOTONIC. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"

#define PROF_SLOTS 96

typedef struct prof_slot {
  const char *name;
  int64_t a, b; /* shape key (matmul: N, K; attention: prefill 1 / decode 0) */
  uint64_t calls;
  int64_t ns;
  double flops;
} prof_slot;

struct cpu_prof {
  pthread_mutex_t mu;
  int n;
  prof_slot s[PROF_SLOTS];
};

/* MI_CPU_PROFILE=cpu: the calling thread's CPU time instead of the wall
 * clock. With threads=1 that is each member's own work even on a machine
 * busy with other processes (their time slices do not count). */
static int prof_cputime;

static int64_t prof_now(void) {
  struct timespec ts;
  clock_gettime(prof_cputime ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void prof_add(cpu_ctx *c, const char *name, int64_t a, int64_t b, int64_t ns, double flops) {
  cpu_prof *p = c->prof;
  pthread_mutex_lock(&p->mu);
  int i = 0;
  while (i < p->n && !(p->s[i].name == name && p->s[i].a == a && p->s[i].b == b)) i++;
  if (i == p->n) {
    if (p->n == PROF_SLOTS) i = PROF_SLOTS - 1; /* full: lump the rest into the last slot */
    else p->s[p->n++] = (prof_slot){name, a, b, 0, 0, 0};
  }
  p->s[i].calls++;
  p->s[i].ns += ns;
  p->s[i].flops += flops;
  pthread_mutex_unlock(&p->mu);
}

#define TIMED(c, name, a, b, flops, call)                                                          \
  do {                                                                                             \
    int64_t t0_ = prof_now();                                                                      \
    int rc_ = (call);                                                                              \
    prof_add((c), (name), (a), (b), prof_now() - t0_, (flops));                                    \
    return rc_;                                                                                    \
  } while (0)

static int p_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w, mi_dtype dt,
                    int64_t M, int64_t N, int64_t K) {
  /* decode (M = 1) and prefill apart: the shapes repeat per layer */
  TIMED((cpu_ctx *)ctx, M == 1 ? "matmul M=1" : "matmul", N, K, 2.0 * (double)M * N * K,
        cpu_matmul(ctx, s, y, x, w, dt, M, N, K));
}
static int p_rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                     int64_t rows, int64_t dim, float eps, float off) {
  TIMED((cpu_ctx *)ctx, "rmsnorm", dim, 0, 0, cpu_rmsnorm(ctx, s, y, x, w, rows, dim, eps, off));
}
static int p_rope(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H,
                  int64_t ts, int64_t hs, int64_t rd, float theta) {
  TIMED((cpu_ctx *)ctx, "rope", H, 0, 0, cpu_rope(ctx, s, x, pos, T, H, ts, hs, rd, theta));
}
static int p_attention(void *ctx, mi_stream *s, float *out, const float *q, const void *kc,
                       const void *vc, mi_dtype kvt, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                       int64_t pos0, float scale) {
  /* QK and PV: 2 MACs per (query row, key, d) under the causal mask */
  double keys = (double)T * (double)pos0 + (double)T * (double)(T + 1) / 2.0;
  TIMED((cpu_ctx *)ctx, T > 1 ? "attention prefill" : "attention decode", 0, 0,
        4.0 * (double)Hq * (double)D * keys,
        cpu_attention(ctx, s, out, q, kc, vc, kvt, T, Hq, Hkv, D, pos0, scale));
}
static int p_silu_mul(void *ctx, mi_stream *s, float *y, const float *g, const float *u,
                      int64_t n) {
  TIMED((cpu_ctx *)ctx, "silu_mul", 0, 0, 0, cpu_silu_mul(ctx, s, y, g, u, n));
}
static int p_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  TIMED((cpu_ctx *)ctx, "add", 0, 0, 0, cpu_add(ctx, s, y, a, b, n));
}
static int p_scale(void *ctx, mi_stream *s, float *y, const float *x, float al, int64_t n) {
  TIMED((cpu_ctx *)ctx, "scale", 0, 0, 0, cpu_scale(ctx, s, y, x, al, n));
}
static int p_embed(void *ctx, mi_stream *s, float *y, const void *t, mi_dtype dt,
                   const int32_t *ids, int64_t T, int64_t V, int64_t dim) {
  TIMED((cpu_ctx *)ctx, "embed", 0, 0, 0, cpu_embed(ctx, s, y, t, dt, ids, T, V, dim));
}
static int p_argmax(void *ctx, mi_stream *s, int32_t *out, const float *x, int64_t rows,
                    int64_t n) {
  TIMED((cpu_ctx *)ctx, "argmax", 0, 0, 0, cpu_argmax(ctx, s, out, x, rows, n));
}
static int p_convert(void *ctx, mi_stream *s, void *dst, mi_dtype dd, const void *src, mi_dtype sd,
                     int64_t n) {
  TIMED((cpu_ctx *)ctx, "convert", dd, sd, 0, cpu_convert(ctx, s, dst, dd, src, sd, n));
}
static int p_h2d(void *ctx, mi_stream *s, void *d, const void *src, size_t n) {
  TIMED((cpu_ctx *)ctx, "memcpy_h2d", 0, 0, 0, cpu_memcpy_h2d(ctx, s, d, src, n));
}
static int p_d2h(void *ctx, mi_stream *s, void *d, const void *src, size_t n) {
  TIMED((cpu_ctx *)ctx, "memcpy_d2h", 0, 0, 0, cpu_memcpy_d2h(ctx, s, d, src, n));
}
static int p_d2d(void *ctx, mi_stream *s, void *d, const void *src, size_t n) {
  TIMED((cpu_ctx *)ctx, "memcpy_d2d", 0, 0, 0, cpu_memcpy_d2d(ctx, s, d, src, n));
}

static mi_platform_iface timed;
static pthread_once_t timed_once = PTHREAD_ONCE_INIT;
static const mi_platform_iface *timed_base;

static void build_timed(void) {
  timed = *timed_base;
  timed.matmul = p_matmul;
  timed.rmsnorm = p_rmsnorm;
  timed.rope = p_rope;
  timed.attention = p_attention;
  timed.silu_mul = p_silu_mul;
  timed.add = p_add;
  timed.scale = p_scale;
  timed.embed = p_embed;
  timed.argmax = p_argmax;
  timed.convert = p_convert;
  timed.memcpy_h2d = p_h2d;
  timed.memcpy_d2h = p_d2h;
  timed.memcpy_d2d = p_d2d;
}

int cpu_profile_init(cpu_ctx *c) {
  const char *v = getenv("MI_CPU_PROFILE");
  if (!v || !*v || strcmp(v, "0") == 0) return 0;
  prof_cputime = strcmp(v, "cpu") == 0;
  c->prof = calloc(1, sizeof *c->prof);
  if (!c->prof) return -1;
  pthread_mutex_init(&c->prof->mu, NULL);
  cpu_pool_set_profile(c->pool, &c->pool_stats);
  return 0;
}

const mi_platform_iface *cpu_profile_iface(cpu_ctx *c, const mi_platform_iface *base) {
  if (!c || !c->prof) return base;
  timed_base = base;
  pthread_once(&timed_once, build_timed);
  return &timed;
}

static int by_time(const void *x, const void *y) {
  const prof_slot *a = x, *b = y;
  return a->ns < b->ns ? 1 : a->ns > b->ns ? -1 : 0;
}

void cpu_profile_report(cpu_ctx *c) {
  cpu_prof *p = c->prof;
  if (!p) return;
  int64_t total = 0;
  for (int i = 0; i < p->n; i++) total += p->s[i].ns;
  qsort(p->s, (size_t)p->n, sizeof p->s[0], by_time);
  fprintf(stderr, "cpu profile (MI_CPU_PROFILE): variant %s, %d thread%s, %.1f ms in kernels (%s)\n",
          cpu_isa_name(c->isa), c->nthreads, c->nthreads == 1 ? "" : "s", (double)total / 1e6,
          prof_cputime ? "the caller's CPU time" : "wall clock");
  fprintf(stderr, "  %-18s %-16s %8s %10s %10s %8s %6s\n", "member", "shape", "calls", "ms",
          "us/call", "GFLOP/s", "%");
  for (int i = 0; i < p->n; i++) {
    const prof_slot *s = &p->s[i];
    char shape[32] = "";
    if (strncmp(s->name, "matmul", 6) == 0)
      snprintf(shape, sizeof shape, "N=%lld K=%lld", (long long)s->a, (long long)s->b);
    else if (s->a)
      snprintf(shape, sizeof shape, "%lld", (long long)s->a);
    char gf[16] = "";
    if (s->flops > 0 && s->ns > 0) snprintf(gf, sizeof gf, "%.1f", s->flops / (double)s->ns);
    fprintf(stderr, "  %-18s %-16s %8llu %10.2f %10.1f %8s %5.1f%%\n", s->name, shape,
            (unsigned long long)s->calls, (double)s->ns / 1e6,
            (double)s->ns / 1e3 / (double)s->calls, gf,
            total > 0 ? 100.0 * (double)s->ns / (double)total : 0.0);
  }
  const cpu_pool_stats *ps = &c->pool_stats;
  fprintf(stderr,
          "  pool: %lld parallel jobs; the caller waited %.2f ms for workers after its share "
          "(imbalance + hand-off); workers slept %lld times\n",
          (long long)atomic_load(&ps->jobs), (double)atomic_load(&ps->wait_ns) / 1e6,
          (long long)atomic_load(&ps->sleeps));
  pthread_mutex_destroy(&p->mu);
  free(p);
  c->prof = NULL;
}
