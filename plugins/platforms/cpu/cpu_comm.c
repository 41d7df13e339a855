/* Collectives for tensor parallelism on the CPU platform: MPI ranks (one
 * process per rank, on one host or many), through Debian's OpenMPI, joined
 * by the platforms' one MPI start-up (plugins/platforms/common/mpi_start.h):
 * a plain run is a group of one and never touches MPI. Built without MPI,
 * the plugin offers no collectives and --tp > 1 is refused with a clear
 * message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(MI_CPU_MPI)
#include <mpi.h>

#include "../common/mpi_start.h"

int cpu_comm_init(cpu_ctx *c, char *err, size_t err_len) {
  return mi_mpi_start(&c->comm_rank, &c->comm_size, err, err_len);
}

void cpu_comm_fini(cpu_ctx *c) { (void)c; /* MPI_Finalize: see mpi_start.h */ }

int cpu_allreduce_sum_f32(void *ctx, mi_stream *s, float *buf, int64_t n) {
  (void)s;
  cpu_ctx *c = ctx;
  if (c->comm_size == 1) return 0;
  /* MPI counts are int: go in chunks for huge buffers. */
  for (int64_t off = 0; off < n;) {
    int cnt = n - off > (1 << 30) ? (1 << 30) : (int)(n - off);
    if (MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
      return cpu_fail(c, "cpu: allreduce_sum_f32: MPI_Allreduce failed");
    off += cnt;
  }
  return 0;
}

int cpu_broadcast(void *ctx, mi_stream *s, void *buf, size_t n, int root) {
  (void)s;
  cpu_ctx *c = ctx;
  if (root < 0 || root >= c->comm_size) return cpu_fail(c, "cpu: broadcast: bad root %d", root);
  if (c->comm_size == 1) return 0;
  if (n > (size_t)1 << 30) return cpu_fail(c, "cpu: broadcast: %zu bytes is too large", n);
  if (MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
    return cpu_fail(c, "cpu: broadcast: MPI_Bcast failed");
  return 0;
}

#else /* built without MPI: a group of one */

int cpu_comm_init(cpu_ctx *c, char *err, size_t err_len) {
  (void)err;
  (void)err_len;
  c->comm_rank = 0;
  c->comm_size = 1;
  return 0;
}

void cpu_comm_fini(cpu_ctx *c) { (void)c; }

#endif

int cpu_comm_info(void *ctx, int *rank, int *size) {
  cpu_ctx *c = ctx;
  *rank = c->comm_rank;
  *size = c->comm_size;
  return 0;
}
