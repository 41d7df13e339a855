/* run_host (ABI 1.6): how the CPU platform hosts kernel packs
 * (mi/kernel_pack.h). A pack's generated host-C kernel hands its loop body
 * here; the body's ranges run on the platform's own thread pool, so a pack
 * kernel is as parallel as the platform's kernels and takes no threads of
 * its own. */
#include <stdint.h>

#include "cpu_internal.h"

typedef struct host_job {
  void (*body)(void *arg, int64_t i0, int64_t i1);
  void *arg;
} host_job;

static void host_task(void *arg, int64_t b, int64_t e, int tid) {
  (void)tid;
  const host_job *j = arg;
  j->body(j->arg, b, e);
}

int cpu_run_host(void *ctx, mi_stream *s, void (*body)(void *arg, int64_t i0, int64_t i1), void *arg,
                 int64_t n) {
  (void)s; /* the CPU platform runs synchronously */
  cpu_ctx *c = ctx;
  if (!body) return cpu_fail(c, "run_host: no body");
  if (n < 0) return cpu_fail(c, "run_host: negative range n=%lld", (long long)n);
  if (n == 0) return 0;
  host_job j = {body, arg};
  if (n == 1) body(arg, 0, 1);
  else cpu_parallel_for(c->pool, n, 1, host_task, &j);
  return 0;
}
