/* Tensor-parallel collectives for the GPU plugins: one process per GPU,
 * started by an MPI launcher (mpirun -np N), all-reduce through RCCL / NCCL
 * loaded at run time with dlopen (never linked: neither is in Debian, and a
 * link would tie the plugin to one soname, like the runtime — see gpu_rt.h).
 *
 *   MPI       rank, size, local rank (which device), the CCL bootstrap (the
 *             communicator id travels by MPI_Bcast) and `broadcast` (a small
 *             HOST buffer: the sampled token id).
 *   RCCL/NCCL allreduce_sum_f32 on DEVICE memory, on the plugin's stream.
 *
 * Without a launcher (or with one rank) the group is rank 0 of 1: nothing
 * is loaded, allreduce and broadcast are no-ops, so single-process runs
 * never need RCCL/NCCL or MPI.
 *
 * Built without MPI (MI_GPU_MPI undefined), a process started as one of
 * several ranks reports "built without MPI: ..." from gpu_comm_check. */
#ifndef MI_GPU_COMM_H
#define MI_GPU_COMM_H

#include <stddef.h>
#include <stdint.h>

struct gpu_ccl; /* the resolved library (gpu_comm.c) */

typedef struct gpu_comm {
  int rank, size;      /* in MPI_COMM_WORLD; 0 of 1 without a launcher */
  int local_rank;      /* among the ranks on this host; -1 when not launched */
  int launcher_size;   /* world size the launcher announced (env), 0 if none */
  void *comm;          /* ncclComm_t once connected (size > 1) */
  struct gpu_ccl *ccl; /* NULL until connected */
  char lib[512];       /* the collective library that was opened */
  int version;         /* its ncclGetVersion (e.g. 21803), 0 if unknown */
} gpu_comm;

/* What gpu_comm_connect needs from the plugin. Messages carry no plugin
 * name: the caller prefixes it. */
typedef struct gpu_comm_spec {
  const char *api;    /* "HIP" (RCCL), "CUDA" or "EMU" (NCCL names) */
  const char *forced; /* ccl=PATH option or $MI_CCL_PATH: replaces the search */
  const char *rt_lib; /* the GPU runtime that was opened (RCCL is looked for beside it) */
} gpu_comm_spec;

/* Joins the process group: MPI_Init (when launched by mpirun/srun and not
 * yet initialised), rank, size, local rank. Call before choosing the
 * device. 0, or -1 with one line in err. */
int gpu_comm_join(gpu_comm *g, char *err, size_t err_len);

/* With size > 1: loads the collective library and creates the communicator
 * on the device bound to the calling thread. Collective over all ranks:
 * every rank calls it, and every rank fails if any rank fails (none is left
 * waiting). A no-op with one rank. */
int gpu_comm_connect(gpu_comm *g, const gpu_comm_spec *spec, char *err, size_t err_len);

/* For a rank whose init fails after gpu_comm_join and before
 * gpu_comm_connect: takes part in connect's first agreement as "failed", so
 * the other ranks' connect fails with a message instead of waiting for this
 * rank forever. A no-op with one rank. */
void gpu_comm_abandon(gpu_comm *g);

/* Destroys the communicator (the library stays loaded). */
void gpu_comm_close(gpu_comm *g);

/* 0 when the group is usable; -1 with the reason (built without MPI but
 * launched as one of several ranks). */
int gpu_comm_check(const gpu_comm *g, char *err, size_t err_len);

/* buf[i] = sum over ranks of buf[i], n floats of device memory, in place,
 * queued on `stream` (NULL: the default stream) like a kernel. */
int gpu_comm_allreduce_sum_f32(gpu_comm *g, float *buf, int64_t n, void *stream, char *err,
                               size_t err_len);

/* n bytes of HOST memory from rank `root` to every rank; returns when done. */
int gpu_comm_broadcast(gpu_comm *g, void *buf, size_t n, int root, char *err, size_t err_len);

#endif
