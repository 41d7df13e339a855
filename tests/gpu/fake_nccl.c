/* libfake_nccl.so — a test-only stand-in for NCCL/RCCL, for the GPU
 * plugins' tensor parallelism on the host emulator (tests/gpu/gpu_emu.cpp),
 * where "device" memory is host memory.
 *
 * It exports the six nccl* entry points gpu_comm.c resolves, with the C ABI
 * of NCCL's public header (ncclUniqueId: 128 bytes by value; enums as int;
 * ncclFloat32 = 7, ncclSum = 0), implemented over MPI. It is written to
 * make the plugin's bootstrap observable, not to be fast:
 *   - ncclGetUniqueId returns 128 random bytes, and ncclCommInitRank checks
 *     (MPI_Allgather) that every rank was handed the same id, the right
 *     rank number and group size — so the id must really travel from rank
 *     0 to the others;
 *   - every rank prints "fake_nccl: rank R of N joined <id prefix>" to
 *     stderr, so a test can tell this library did the reduction;
 *   - ncclAllReduce accepts only float32 + sum, as the plugin should ask.
 * Test hook: FAKE_NCCL_FAIL_RANK=R makes rank R's ncclCommInitRank fail
 * with ncclSystemError after the rendezvous (the others succeed).
 *
 * The emulator keeps device memory PROT_NONE outside its own calls (so
 * host code touching device pointers crashes); like a DMA engine, the
 * all-reduce lifts that guard on the pages it works on and restores it. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ncclResult_t values of NCCL's header */
enum {
  OK = 0,
  UNHANDLED_CUDA = 1,
  SYSTEM_ERROR = 2,
  INTERNAL = 3,
  INVALID_ARG = 4,
  INVALID_USAGE = 5
};

typedef struct fake_id {
  unsigned char internal[128];
} fake_id;

/* Traffic goes over MPI_COMM_WORLD, not a duplicate: MPI_Comm_dup and
 * MPI_Comm_free are collective, and a rank told to fail must not leave the
 * others waiting inside them. */
typedef struct fake_comm {
  int rank, nranks;
} fake_comm;

static int mpi_ready(void) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  return inited && !fin;
}

EXPORT const char *ncclGetErrorString(int r) {
  switch (r) {
  case OK: return "no error";
  case UNHANDLED_CUDA: return "unhandled cuda error";
  case SYSTEM_ERROR: return "unhandled system error (fake_nccl: FAKE_NCCL_FAIL_RANK)";
  case INTERNAL: return "internal error";
  case INVALID_ARG: return "invalid argument (fake_nccl)";
  case INVALID_USAGE: return "invalid usage (fake_nccl: MPI is not initialised)";
  default: return "unknown result code";
  }
}

EXPORT int ncclGetVersion(int *v) {
  if (!v) return INVALID_ARG;
  *v = 1; /* not a real NCCL version */
  return OK;
}

EXPORT int ncclGetUniqueId(fake_id *id) {
  if (!id) return INVALID_ARG;
  if (!mpi_ready()) return INVALID_USAGE;
  size_t got = 0;
  while (got < sizeof id->internal) {
    ssize_t n = getrandom(id->internal + got, sizeof id->internal - got, 0);
    if (n <= 0) return SYSTEM_ERROR;
    got += (size_t)n;
  }
  return OK;
}

EXPORT int ncclCommInitRank(fake_comm **out, int nranks, fake_id id, int rank) {
  if (!out) return INVALID_ARG;
  *out = NULL;
  if (!mpi_ready()) return INVALID_USAGE;
  int wr, ws;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  /* The rendezvous: every rank's id, rank and size side by side. */
  struct {
    fake_id id;
    int32_t rank, nranks;
  } mine, *all = calloc((size_t)ws, sizeof mine);
  if (!all) return SYSTEM_ERROR;
  memset(&mine, 0, sizeof mine);
  mine.id = id;
  mine.rank = rank;
  mine.nranks = nranks;
  MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  int bad = 0;
  for (int r = 0; r < ws; r++) {
    if (memcmp(&all[r].id, &all[0].id, sizeof id) != 0) {
      fprintf(stderr, "fake_nccl: rank %d was given a different unique id than rank 0\n", r);
      bad = 1;
    }
    if (all[r].rank != r || all[r].nranks != ws) {
      fprintf(stderr, "fake_nccl: world rank %d called with rank %d of %d (world size %d)\n", r,
              all[r].rank, all[r].nranks, ws);
      bad = 1;
    }
  }
  static const unsigned char zero[16];
  if (memcmp(all[0].id.internal, zero, sizeof zero) == 0) {
    fprintf(stderr,
            "fake_nccl: the unique id starts with 16 zero bytes: not from ncclGetUniqueId\n");
    bad = 1;
  }
  free(all);
  if (bad) return INVALID_ARG;
  const char *f = getenv("FAKE_NCCL_FAIL_RANK");
  if (f && atoi(f) == rank) return SYSTEM_ERROR;
  fake_comm *c = calloc(1, sizeof *c);
  if (!c) return SYSTEM_ERROR;
  c->rank = rank;
  c->nranks = nranks;
  fprintf(stderr, "fake_nccl: rank %d of %d joined %02x%02x%02x%02x\n", rank, nranks,
          id.internal[0], id.internal[1], id.internal[2], id.internal[3]);
  *out = c;
  return OK;
}

/* Sets the protection of the whole pages covering [p, p + n). */
static int protect(void *p, size_t n, int prot) {
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)p & ~(pg - 1), e = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
  return mprotect((void *)a, e - a, prot);
}

EXPORT int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op,
                         fake_comm *c, void *stream) {
  (void)stream; /* the emulator runs everything synchronously */
  if (!c || !recv || !send) return INVALID_ARG;
  if (dtype != 7 || op != 0) {
    fprintf(stderr, "fake_nccl: ncclAllReduce(dtype %d, op %d): only float32 sum is expected\n",
            dtype, op);
    return INVALID_ARG;
  }
  if (count == 0) return OK;
  size_t bytes = count * sizeof(float);
  if (protect(recv, bytes, PROT_READ | PROT_WRITE) != 0 ||
      (send != recv && protect((void *)send, bytes, PROT_READ | PROT_WRITE) != 0))
    return SYSTEM_ERROR;
  if (send != recv) memcpy(recv, send, bytes);
  int rc = OK;
  for (size_t off = 0; off < count && rc == OK;) {
    int n = count - off > (1u << 30) ? (1 << 30) : (int)(count - off);
    if (MPI_Allreduce(MPI_IN_PLACE, (float *)recv + off, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
      rc = SYSTEM_ERROR;
    off += (size_t)n;
  }
  protect(recv, bytes, PROT_NONE);
  if (send != recv) protect((void *)send, bytes, PROT_NONE);
  return rc;
}

EXPORT int ncclCommDestroy(fake_comm *c) {
  if (!c) return INVALID_ARG;
  free(c);
  return OK;
}
