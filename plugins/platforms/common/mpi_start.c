/* The platform plugins' MPI start-up (mpi_start.h). Built only into plugins
 * compiled with MPI (MI_WITH_MPI found it). */
#define _GNU_SOURCE /* dladdr */
#include "mpi_start.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int g_mpi_inited_here;

__attribute__((destructor)) static void finalize_mpi(void) {
  int fin = 0;
  if (!g_mpi_inited_here) return;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
  g_mpi_inited_here = 0;
}

int mi_mpi_start(int *rank, int *size, char *err, size_t err_len) {
  *rank = 0;
  *size = 1;
  if (!mi_mpi_launched()) return 0;
  /* The plugin was dlopened RTLD_LOCAL; OpenMPI's own components resolve
   * libmpi's symbols globally, so promote libmpi to RTLD_GLOBAL first. */
  Dl_info di;
  if (dladdr((void *)&MPI_Init_thread, &di) && di.dli_fname)
    (void)dlopen(di.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) {
    snprintf(err, err_len, "MPI was already finalized in this process");
    return -1;
  }
  if (!inited) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      snprintf(err, err_len, "MPI_Init_thread failed");
      return -1;
    }
    g_mpi_inited_here = 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return 0;
}
