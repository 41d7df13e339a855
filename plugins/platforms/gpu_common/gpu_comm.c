/* Tensor-parallel collectives for the GPU plugins (see gpu_comm.h).
 *
 * Bootstrap, when the launcher started more than one rank:
 *   1. gpu_comm_join: MPI_Init (if nobody did yet), rank/size, local rank
 *      (OMPI_COMM_WORLD_LOCAL_RANK / MPI_LOCALRANKID / SLURM_LOCALID, else
 *      MPI_Comm_split_type(SHARED)); the plugin then binds device
 *      local_rank % device count.
 *   2. gpu_comm_connect: every rank dlopens RCCL / NCCL and resolves six
 *      symbols; the ranks agree that all succeeded (MPI_Allreduce MIN) so a
 *      rank that cannot load the library does not leave the others waiting;
 *      rank 0 makes the communicator id (ncclGetUniqueId) and MPI_Bcasts it
 *      with its status; every rank calls ncclCommInitRank and the ranks
 *      agree again.
 * allreduce_sum_f32 is ncclAllReduce in place on the plugin's stream;
 * broadcast carries a host buffer and is MPI_Bcast. */
#define _GNU_SOURCE /* dladdr */
#include "gpu_comm.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_libsearch.h"
#include "../common/mpi_start.h"

/* Launched by mpirun (OpenMPI), a PMI launcher (srun, MPICH hydra) or PMIx? */
/* The world size the launcher announced, 0 when it did not say. */
static int launcher_size(void) {
  const char *v = getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) v = getenv("PMI_SIZE");
  if (!v) v = getenv("SLURM_NTASKS");
  return v ? atoi(v) : 0;
}

#if defined(MI_GPU_MPI)
#include <mpi.h>

/* ---- the collective library ----
 * The few declarations used, written from the values in NCCL's public
 * nccl.h (NCCL 2.x; RCCL exports the same names with the same ABI):
 *   ncclUniqueId   struct { char internal[NCCL_UNIQUE_ID_BYTES = 128]; },
 *                  passed BY VALUE to ncclCommInitRank
 *   ncclComm_t     pointer to an opaque struct
 *   ncclResult_t   enum, ncclSuccess = 0      (C enums are int-sized)
 *   ncclDataType_t enum, ncclFloat32 = 7
 *   ncclRedOp_t    enum, ncclSum = 0
 * cudaStream_t / hipStream_t are pointers; NULL is the default stream. */
#define CCL_UNIQUE_ID_BYTES 128
#define CCL_FLOAT32 7
#define CCL_SUM 0

typedef struct ccl_unique_id {
  char internal[CCL_UNIQUE_ID_BYTES];
} ccl_unique_id;

typedef struct gpu_ccl {
  void *dl;
  const char *name; /* "RCCL" or "NCCL" */
  int (*GetUniqueId)(ccl_unique_id *id);
  int (*CommInitRank)(void **comm, int nranks, ccl_unique_id id, int rank);
  int (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm,
                   void *stream);
  int (*CommDestroy)(void *comm);
  const char *(*GetErrorString)(int res);
  int (*GetVersion)(int *version); /* optional */
} gpu_ccl;

/* One library per process, never closed (it initialises the GPU runtime). */
static gpu_ccl g_ccl;

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > INT_MAX) return 0;
  *out = (int)x;
  return 1;
}

int gpu_comm_join(gpu_comm *g, char *err, size_t err_len) {
  memset(g, 0, sizeof *g);
  g->size = 1;
  g->local_rank = -1;
  g->launcher_size = launcher_size();
  if (!mi_mpi_launched()) return 0;
  if (mi_mpi_start(&g->rank, &g->size, err, err_len) != 0) return -1;
  if (env_int("OMPI_COMM_WORLD_LOCAL_RANK", &g->local_rank) ||
      env_int("MPI_LOCALRANKID", &g->local_rank) || env_int("SLURM_LOCALID", &g->local_rank))
    return 0;
  /* No launcher variable: the rank among the processes sharing memory
   * (this host). Collective, but every rank runs the same init. */
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS) {
    snprintf(err, err_len, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
    return -1;
  }
  MPI_Comm_rank(node, &g->local_rank);
  MPI_Comm_free(&node);
  return 0;
}

/* Every rank learns whether every rank succeeded: the lowest failing rank,
 * or -1 when all did. */
static int first_failure(const gpu_comm *g, int ok) {
  int v = ok ? INT_MAX : g->rank;
  if (MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
    return ok ? 0 : g->rank; /* no agreement possible: treat as failed */
  return v == INT_MAX ? -1 : v;
}

static const char *ccl_str(int res) {
  const char *s = g_ccl.GetErrorString ? g_ccl.GetErrorString(res) : NULL;
  return s ? s : "unknown error";
}

/* Opens the library and resolves the symbols; 0 or -1 with err. */
static int load_ccl(gpu_comm *g, const gpu_comm_spec *sp, const char *name, char *err,
                    size_t err_len) {
  char why[2048];
  void *dl = NULL;
  if (sp->forced && *sp->forced) {
    dlerror();
    dl = dlopen(sp->forced, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
      const char *e = dlerror();
      snprintf(err, err_len, "--tp %d needs %s for all-reduce: cannot load %s (dlerror: %s)",
               g->size, name, sp->forced, e ? e : "unknown");
      return -1;
    }
    snprintf(g->lib, sizeof g->lib, "%s", sp->forced);
  } else {
    gpu_lib_search s;
    if (strcmp(sp->api, "HIP") == 0)
      gpu_lib_search_rccl(&s, sp->rt_lib, NULL, NULL);
    else
      gpu_lib_search_nccl(&s, NULL, NULL);
    dl = gpu_lib_open(&s, name, g->lib, sizeof g->lib, why, sizeof why);
    if (!dl) {
      snprintf(err, err_len, "--tp %d needs %s for all-reduce: %s", g->size, name, why);
      return -1;
    }
  }
  gpu_ccl c = {.dl = dl, .name = name};
  static const char *const syms[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce",
                                     "ncclCommDestroy", "ncclGetErrorString"};
  void *p[5];
  for (int i = 0; i < 5; i++) {
    p[i] = dlsym(dl, syms[i]);
    if (!p[i]) {
      snprintf(err, err_len, "--tp %d: %s is not a usable %s: it has no symbol %s", g->size, g->lib,
               name, syms[i]);
      return -1; /* the handle stays open: harmless, and closing GPU libraries is not */
    }
  }
  /* Function pointers from dlsym's void * (POSIX guarantees this works). */
  memcpy(&c.GetUniqueId, &p[0], sizeof p[0]);
  memcpy(&c.CommInitRank, &p[1], sizeof p[1]);
  memcpy(&c.AllReduce, &p[2], sizeof p[2]);
  memcpy(&c.CommDestroy, &p[3], sizeof p[3]);
  memcpy(&c.GetErrorString, &p[4], sizeof p[4]);
  void *v = dlsym(dl, "ncclGetVersion");
  if (v) memcpy(&c.GetVersion, &v, sizeof v);
  g_ccl = c;
  if (g_ccl.GetVersion && g_ccl.GetVersion(&g->version) != 0) g->version = 0;
  g->ccl = &g_ccl;
  return 0;
}

int gpu_comm_connect(gpu_comm *g, const gpu_comm_spec *sp, char *err, size_t err_len) {
  if (g->size <= 1) return 0;
  const char *name = strcmp(sp->api, "HIP") == 0 ? "RCCL" : "NCCL";
  char mine[4096] = "";
  int ok = load_ccl(g, sp, name, mine, sizeof mine) == 0;
  int bad = first_failure(g, ok);
  if (bad >= 0) {
    if (ok)
      snprintf(err, err_len, "--tp %d: rank %d failed to initialise (its own message says why)",
               g->size, bad);
    else
      snprintf(err, err_len, "%s", mine);
    g->ccl = NULL;
    return -1;
  }

  /* Rank 0's id (and whether it got one) to everyone. */
  struct {
    int32_t status; /* the ncclResult_t of rank 0's ncclGetUniqueId */
    ccl_unique_id id;
  } boot;
  memset(&boot, 0, sizeof boot);
  if (g->rank == 0) boot.status = g->ccl->GetUniqueId(&boot.id);
  if (MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
    snprintf(err, err_len, "--tp %d: MPI_Bcast of the %s communicator id failed", g->size, name);
    g->ccl = NULL;
    return -1;
  }
  if (boot.status != 0) {
    if (g->rank == 0)
      snprintf(err, err_len, "ncclGetUniqueId: %s (%d)", ccl_str(boot.status), boot.status);
    else
      snprintf(err, err_len, "--tp %d: rank 0 could not create the %s communicator id", g->size,
               name);
    g->ccl = NULL;
    return -1;
  }

  void *comm = NULL;
  int res = g->ccl->CommInitRank(&comm, g->size, boot.id, g->rank);
  bad = first_failure(g, res == 0);
  if (bad >= 0) {
    if (res != 0)
      snprintf(err, err_len, "ncclCommInitRank: %s (%d), rank %d of %d (%s)", ccl_str(res), res,
               g->rank, g->size, g->lib);
    else
      snprintf(err, err_len, "--tp %d: rank %d could not join the %s communicator", g->size, bad,
               name);
    if (res == 0 && comm) g->ccl->CommDestroy(comm);
    g->ccl = NULL;
    return -1;
  }
  g->comm = comm;
  return 0;
}

void gpu_comm_abandon(gpu_comm *g) {
  if (g->size > 1 && !g->comm) (void)first_failure(g, 0);
}

void gpu_comm_close(gpu_comm *g) {
  if (g->ccl && g->comm) g->ccl->CommDestroy(g->comm);
  g->comm = NULL;
}

int gpu_comm_check(const gpu_comm *g, char *err, size_t err_len) {
  (void)g;
  (void)err;
  (void)err_len;
  return 0;
}

int gpu_comm_allreduce_sum_f32(gpu_comm *g, float *buf, int64_t n, void *stream, char *err,
                               size_t err_len) {
  if (n < 0) {
    snprintf(err, err_len, "allreduce_sum_f32: negative n=%lld", (long long)n);
    return -1;
  }
  if (g->size <= 1 || n == 0) return 0;
  if (!buf) {
    snprintf(err, err_len, "allreduce_sum_f32: buf is NULL");
    return -1;
  }
  if (!g->comm) {
    snprintf(err, err_len, "allreduce_sum_f32: no communicator (rank %d of %d)", g->rank, g->size);
    return -1;
  }
  int res = g->ccl->AllReduce(buf, buf, (size_t)n, CCL_FLOAT32, CCL_SUM, g->comm, stream);
  if (res != 0) {
    snprintf(err, err_len, "allreduce_sum_f32: ncclAllReduce(%lld floats): %s (%d)", (long long)n,
             ccl_str(res), res);
    return -1;
  }
  return 0;
}

int gpu_comm_broadcast(gpu_comm *g, void *buf, size_t n, int root, char *err, size_t err_len) {
  if (root < 0 || root >= g->size) {
    snprintf(err, err_len, "broadcast: root %d is not a rank of this group of %d", root, g->size);
    return -1;
  }
  if (g->size <= 1 || n == 0) return 0;
  if (!buf) {
    snprintf(err, err_len, "broadcast: buf is NULL");
    return -1;
  }
  if (n > (size_t)INT_MAX) {
    snprintf(err, err_len, "broadcast: %zu bytes is too large", n);
    return -1;
  }
  if (MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS) {
    snprintf(err, err_len, "broadcast: MPI_Bcast of %zu bytes failed", n);
    return -1;
  }
  return 0;
}

#else /* built without MPI: a group of one */

int gpu_comm_join(gpu_comm *g, char *err, size_t err_len) {
  (void)err;
  (void)err_len;
  memset(g, 0, sizeof *g);
  g->size = 1;
  g->local_rank = -1;
  g->launcher_size = mi_mpi_launched() ? launcher_size() : 0;
  return 0;
}

int gpu_comm_connect(gpu_comm *g, const gpu_comm_spec *sp, char *err, size_t err_len) {
  (void)g;
  (void)sp;
  (void)err;
  (void)err_len;
  return 0;
}

void gpu_comm_abandon(gpu_comm *g) {
  (void)g;
}

void gpu_comm_close(gpu_comm *g) {
  (void)g;
}

int gpu_comm_check(const gpu_comm *g, char *err, size_t err_len) {
  if (g->launcher_size <= 1) return 0;
  snprintf(err, err_len,
           "built without MPI: tensor parallelism needs MetaInfer configured with "
           "-DMI_WITH_MPI=ON (this process is one of %d ranks)",
           g->launcher_size);
  return -1;
}

int gpu_comm_allreduce_sum_f32(gpu_comm *g, float *buf, int64_t n, void *stream, char *err,
                               size_t err_len) {
  (void)g;
  (void)buf;
  (void)stream;
  if (n < 0) {
    snprintf(err, err_len, "allreduce_sum_f32: negative n=%lld", (long long)n);
    return -1;
  }
  return 0; /* one rank: the sum is the buffer itself */
}

int gpu_comm_broadcast(gpu_comm *g, void *buf, size_t n, int root, char *err, size_t err_len) {
  (void)buf;
  (void)n;
  if (root != 0 || g->size != 1) {
    snprintf(err, err_len, "broadcast: root %d is not a rank of this group of 1", root);
    return -1;
  }
  return 0;
}

#endif
