/* The GPU platform shared by the k100, z200 (HIP) and nvidia (CUDA) plugins:
 * each plugin is a gpu_target (name, runtime, embedded code object, build
 * constants) plus a descriptor; everything else is here.
 *
 * Files:
 *   mi_gpu_compat.h   device-side portability (warp width, shuffles, halves)
 *   gpu_kernels.h     kernel names and launch constants (host + device)
 *   mi_kernels.cu     the kernels (compiled by hipcc or nvcc into a code object)
 *   gpu_rt.h          the runtime table; gpu_rt_hip.c / gpu_rt_cuda.c fill it by dlopen
 *   gpu_libsearch.c   where to look for the runtime library (and RCCL/NCCL)
 *   gpu_comm.c        tensor-parallel collectives: MPI ranks, RCCL/NCCL all-reduce
 *   gpu_launch.c      launch geometry (pure host arithmetic)
 *   gpu_platform.c    probe/init and the mi_platform_iface members
 *   gpu_blob.c.in     embeds the code object (.incbin), configured per plugin
 */
#ifndef MI_GPU_PLATFORM_H
#define MI_GPU_PLATFORM_H

#include <stddef.h>

#include "gpu_launch.h"
#include "gpu_rt.h"
#include "mi/host.h"
#include "mi/platform.h"
#include "mi/plugin.h"

typedef struct gpu_target {
  const char *name;     /* plugin name: "z200" */
  const char *api;      /* "HIP" or "CUDA" */
  gpu_rt *(*open_rt)(const char *forced, char *why, size_t why_len);
  const char *arch;     /* what the embedded code was built for: "gfx906", "sm_80,sm_90" */
  /* the embedded code object / fatbin and its size (0: built without device code) */
  const unsigned char *(*code)(size_t *size);
  const char *no_code;       /* why there is no device code (shown by probe) */
  gpu_tunables tu;           /* build constants (cus filled at init) */
  int score;                 /* probe score when usable */
} gpu_target;

int gpu_probe(const gpu_target *t, const mi_host_api *host, const mi_options *opts, char *why,
              size_t why_len);
int gpu_init(const gpu_target *t, const mi_host_api *host, const mi_options *opts, void **ctx,
             char *err, size_t err_len);
void gpu_fini(void *ctx);
const void *gpu_get_iface(void *ctx);

#endif
