/* Finding a GPU runtime library to dlopen: candidate directories from the
 * environment and the usual install layouts, sonames newest first. Pure
 * host logic (tested in tests/gpu/test_gpu_host.c). */
#ifndef MI_GPU_LIBSEARCH_H
#define MI_GPU_LIBSEARCH_H

#include <stddef.h>

#define GPU_LIB_MAX_DIRS 24
#define GPU_LIB_PATH_LEN 512

typedef struct gpu_lib_search {
  int ndirs;
  char dirs[GPU_LIB_MAX_DIRS][GPU_LIB_PATH_LEN]; /* existing directories, in search order */
  const char *const *names;                       /* NULL-terminated sonames, tried per dir */
} gpu_lib_search;

typedef const char *(*gpu_getenv_fn)(const char *name);

/* HIP: $ROCM_PATH, $HIP_PATH, $DTK_HOME, $DTK_PATH (each /lib and /hip/lib),
 * /opt/dtk, /opt/dtk-* (newest version first), /opt/rocm, /opt/rocm-*.
 * `root` prefixes the fixed /opt paths (tests use a temporary tree; "" or
 * NULL in real use). Only directories that exist are kept. */
void gpu_lib_search_hip(gpu_lib_search *s, gpu_getenv_fn env, const char *root);
/* CUDA driver: libcuda.so.1 is installed by the driver in the default
 * library path; $CUDA_DRIVER_PATH and /usr/lib/wsl/lib are extra places. */
void gpu_lib_search_cuda(gpu_lib_search *s, gpu_getenv_fn env, const char *root);

/* Collective libraries (tensor parallelism).
 * RCCL: librccl.so, librccl.so.1 — first in the directory of the HIP
 * runtime that was opened (`rt_lib`, a path; ignored when it has no '/'),
 * then the same directories as gpu_lib_search_hip.
 * NCCL: libnccl.so.2, libnccl.so in $NCCL_HOME, $CUDA_HOME,
 * /usr/local/cuda (each lib/, lib64/), then the default library path. */
void gpu_lib_search_rccl(gpu_lib_search *s, const char *rt_lib, gpu_getenv_fn env,
                         const char *root);
void gpu_lib_search_nccl(gpu_lib_search *s, gpu_getenv_fn env, const char *root);

/* Tries each name in each directory, then each bare name (the default
 * dynamic-linker search). Returns the dlopen handle and the path that
 * worked in `opened`; or NULL with a one-line description of everything
 * tried and the last dlerror in why. */
void *gpu_lib_open(const gpu_lib_search *s, const char *what, char *opened, size_t opened_len,
                   char *why, size_t why_len);

#endif
