/* The GPU runtime as the plugins see it: a small table of functions resolved
 * at run time with dlopen/dlsym, never linked.
 *
 * Why: a plugin that linked libamdhip64.so.5 (or libcudart.so.13) would not
 * even load on a machine without that exact soname, and the loader could not
 * say why in its own words. Here the plugin .so has no GPU DT_NEEDED at all;
 * probe() dlopens the runtime, trying several sonames and install
 * directories (ROCm, Hygon DTK), and reports what it tried. The kernels are
 * an embedded code object (HIP: clang offload bundle from hipcc --genco;
 * CUDA: fatbin from nvcc -fatbin) loaded with hipModuleLoadData /
 * cuModuleLoadData and launched with hipModuleLaunchKernel / cuLaunchKernel,
 * so no hipcc/nvcc-compiled host code (which would need the runtime linked)
 * exists in the plugin.
 *
 *   HIP:  libamdhip64.so(.7/.6/.5/.4) — the HIP runtime API, module API part.
 *   CUDA: libcuda.so.1 — the driver API (always installed with the driver;
 *         libcudart is not needed at all).
 *
 * All functions return 0 on success, -1 on failure with one line in rt->err
 * such as "hipMalloc(1048576): hipErrorOutOfMemory (2)".
 */
#ifndef MI_GPU_RT_H
#define MI_GPU_RT_H

#include <stddef.h>
#include <stdint.h>

#define GPU_RT_ERR_LEN 512

enum { GPU_COPY_H2D = 1, GPU_COPY_D2H = 2, GPU_COPY_D2D = 3 };

typedef struct gpu_rt gpu_rt;

struct gpu_rt {
  const char *api;  /* "HIP" or "CUDA" */
  char lib[256];    /* the runtime library that was opened */
  char err[GPU_RT_ERR_LEN];
  void *impl;       /* the runtime's private state */

  int (*device_count)(gpu_rt *rt, int *n);
  /* Makes device `dev` current for the calling thread (CUDA: its primary
   * context; HIP: hipSetDevice). Cheap when already current. */
  int (*bind)(gpu_rt *rt, int dev);
  int (*device_name)(gpu_rt *rt, int dev, char *buf, size_t len);
  int (*device_total_mem)(gpu_rt *rt, int dev, uint64_t *bytes);
  int (*device_cus)(gpu_rt *rt, int dev, int *n);
  int (*device_warp)(gpu_rt *rt, int dev, int *n);

  int (*mem_alloc)(gpu_rt *rt, void **p, size_t n);
  int (*mem_free)(gpu_rt *rt, void *p);
  int (*memset_sync)(gpu_rt *rt, void *p, int value, size_t n);
  /* Stream-ordered copy; kind is GPU_COPY_*. stream NULL = default stream. */
  int (*memcpy_async)(gpu_rt *rt, void *dst, const void *src, size_t n, int kind, void *stream);
  int (*stream_create)(gpu_rt *rt, void **s);
  int (*stream_destroy)(gpu_rt *rt, void *s);
  int (*stream_sync)(gpu_rt *rt, void *s);

  int (*module_load)(gpu_rt *rt, const void *image, void **mod);
  int (*module_unload)(gpu_rt *rt, void *mod);
  int (*get_function)(gpu_rt *rt, void *mod, const char *name, void **fn);
  /* args[i] points to the i-th kernel argument, sizes[i] is its size. */
  int (*launch)(gpu_rt *rt, void *fn, const unsigned grid[3], const unsigned block[3],
                unsigned smem, void *stream, void **args, const size_t *sizes, int nargs);
};

/* Opens the runtime (once per process; the handle is never closed: GPU
 * runtimes do not support unloading after initialisation). `forced` is a
 * library path that replaces the search (plugin option runtime=PATH).
 * On failure returns NULL with the reason in why, naming what was tried. */
gpu_rt *gpu_rt_hip_open(const char *forced, char *why, size_t why_len);
gpu_rt *gpu_rt_cuda_open(const char *forced, char *why, size_t why_len);

/* Records an error in rt->err and returns -1. */
int gpu_rt_fail(gpu_rt *rt, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
