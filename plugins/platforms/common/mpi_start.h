/* The one MPI start-up of the platform plugins (cpu, and the GPU plugins'
 * RCCL/NCCL bootstrap): compiled into each plugin that offers collectives
 * over MPI ranks, so every platform joins a launch the same way.
 *
 * MPI is touched only when the process was started by an MPI launcher
 * (mpirun/srun set OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK); a plain run
 * is a group of one. */
#ifndef MI_PLATFORM_MPI_START_H
#define MI_PLATFORM_MPI_START_H

#include <stddef.h>
#include <stdlib.h>

/* Started by an MPI launcher? (Needs no MPI: also for builds without it.) */
static inline int mi_mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* Joins MPI_COMM_WORLD (initialising MPI unless someone in the process
 * already did): this rank and the group size. Outside a launch: 0 and 1,
 * without touching MPI. MPI_Finalize runs when the plugin that initialised
 * MPI is unloaded, or at exit (not at its fini: another plugin of the
 * process may have found MPI initialised and still use it, and MPI cannot be
 * initialised twice). 0, or -1 with a message. */
int mi_mpi_start(int *rank, int *size, char *err, size_t err_len);

#endif
