/* The CUDA driver API through dlopen("libcuda.so.1") (see gpu_rt.h). Only
 * the driver is needed: the kernels are a fatbin loaded with
 * cuModuleLoadData, so libcudart is never involved. Entry points are
 * declared here with their C ABI (the _v2 names are what cuda.h maps the
 * plain names to since CUDA 3.2/4.0). Each thread binds the device's primary
 * context before use (the same context the CUDA runtime would use). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu_libsearch.h"
#include "gpu_rt.h"

typedef int cu_res;
typedef unsigned long long cu_ptr; /* CUdeviceptr */

typedef struct cuda_api {
  cu_res (*Init)(unsigned);
  cu_res (*GetErrorName)(cu_res, const char **);
  cu_res (*DeviceGetCount)(int *);
  cu_res (*DeviceGet)(int *, int);
  cu_res (*DeviceGetName)(char *, int, int);
  cu_res (*DeviceTotalMem)(size_t *, int);
  cu_res (*DeviceGetAttribute)(int *, int, int);
  cu_res (*PrimaryCtxRetain)(void **, int);
  cu_res (*CtxSetCurrent)(void *);
  cu_res (*MemAlloc)(cu_ptr *, size_t);
  cu_res (*MemFree)(cu_ptr);
  cu_res (*MemsetD8)(cu_ptr, unsigned char, size_t);
  cu_res (*MemcpyHtoDAsync)(cu_ptr, const void *, size_t, void *);
  cu_res (*MemcpyDtoHAsync)(void *, cu_ptr, size_t, void *);
  cu_res (*MemcpyDtoDAsync)(cu_ptr, cu_ptr, size_t, void *);
  cu_res (*StreamCreate)(void **, unsigned);
  cu_res (*StreamDestroy)(void *);
  cu_res (*StreamSynchronize)(void *);
  cu_res (*ModuleLoadData)(void **, const void *);
  cu_res (*ModuleUnload)(void *);
  cu_res (*ModuleGetFunction)(void **, void *, const char *);
  cu_res (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
} cuda_api;

/* cuda.h */
#define CU_ATTR_WARP_SIZE 10
#define CU_ATTR_MULTIPROCESSOR_COUNT 16
#define CU_STREAM_NON_BLOCKING 1

static cuda_api C;
static gpu_rt RT;
static int opened;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static void *primary[64]; /* primary context per device, retained once */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int bound_dev = -1;

static const char *ename(cu_res e) {
  const char *n = NULL;
  if (C.GetErrorName) C.GetErrorName(e, &n);
  return n ? n : "CUDA_ERROR_?";
}

#define CALL(rt, expr, what, ...)                                                                  \
  do {                                                                                             \
    cu_res e_ = (expr);                                                                            \
    if (e_ != 0) return gpu_rt_fail((rt), what ": %s (%d)", ##__VA_ARGS__, ename(e_), e_);        \
  } while (0)

static int c_device_count(gpu_rt *rt, int *n) {
  *n = 0;
  CALL(rt, C.Init(0), "cuInit");
  CALL(rt, C.DeviceGetCount(n), "cuDeviceGetCount");
  return 0;
}
static int c_bind(gpu_rt *rt, int dev) {
  if (bound_dev == dev) return 0;
  if (dev < 0 || dev >= 64) return gpu_rt_fail(rt, "device %d out of range", dev);
  pthread_mutex_lock(&ctx_lock);
  if (!primary[dev]) {
    int d = 0;
    cu_res e = C.DeviceGet(&d, dev);
    if (e == 0) e = C.PrimaryCtxRetain(&primary[dev], d);
    if (e != 0) {
      pthread_mutex_unlock(&ctx_lock);
      return gpu_rt_fail(rt, "cuDevicePrimaryCtxRetain(%d): %s (%d)", dev, ename(e), e);
    }
  }
  void *ctx = primary[dev];
  pthread_mutex_unlock(&ctx_lock);
  CALL(rt, C.CtxSetCurrent(ctx), "cuCtxSetCurrent");
  bound_dev = dev;
  return 0;
}
static int c_device_name(gpu_rt *rt, int dev, char *buf, size_t len) {
  CALL(rt, C.DeviceGetName(buf, (int)len, dev), "cuDeviceGetName(%d)", dev);
  return 0;
}
static int c_total_mem(gpu_rt *rt, int dev, uint64_t *bytes) {
  size_t b = 0;
  CALL(rt, C.DeviceTotalMem(&b, dev), "cuDeviceTotalMem(%d)", dev);
  *bytes = b;
  return 0;
}
static int c_cus(gpu_rt *rt, int dev, int *n) {
  CALL(rt, C.DeviceGetAttribute(n, CU_ATTR_MULTIPROCESSOR_COUNT, dev),
       "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  return 0;
}
static int c_warp(gpu_rt *rt, int dev, int *n) {
  CALL(rt, C.DeviceGetAttribute(n, CU_ATTR_WARP_SIZE, dev), "cuDeviceGetAttribute(WARP_SIZE)");
  return 0;
}
static int c_alloc(gpu_rt *rt, void **p, size_t n) {
  cu_ptr d = 0;
  *p = NULL;
  CALL(rt, C.MemAlloc(&d, n ? n : 1), "cuMemAlloc(%zu)", n);
  *p = (void *)(uintptr_t)d;
  return 0;
}
static int c_free(gpu_rt *rt, void *p) {
  CALL(rt, C.MemFree((cu_ptr)(uintptr_t)p), "cuMemFree");
  return 0;
}
static int c_memset(gpu_rt *rt, void *p, int v, size_t n) {
  CALL(rt, C.MemsetD8((cu_ptr)(uintptr_t)p, (unsigned char)v, n), "cuMemsetD8(%zu)", n);
  return 0;
}
static int c_memcpy(gpu_rt *rt, void *dst, const void *src, size_t n, int kind, void *s) {
  if (kind == GPU_COPY_H2D)
    CALL(rt, C.MemcpyHtoDAsync((cu_ptr)(uintptr_t)dst, src, n, s), "cuMemcpyHtoDAsync(%zu)", n);
  else if (kind == GPU_COPY_D2H)
    CALL(rt, C.MemcpyDtoHAsync(dst, (cu_ptr)(uintptr_t)src, n, s), "cuMemcpyDtoHAsync(%zu)", n);
  else
    CALL(rt, C.MemcpyDtoDAsync((cu_ptr)(uintptr_t)dst, (cu_ptr)(uintptr_t)src, n, s),
         "cuMemcpyDtoDAsync(%zu)", n);
  return 0;
}
static int c_stream_create(gpu_rt *rt, void **s) {
  CALL(rt, C.StreamCreate(s, 0), "cuStreamCreate");
  return 0;
}
static int c_stream_destroy(gpu_rt *rt, void *s) {
  CALL(rt, C.StreamDestroy(s), "cuStreamDestroy");
  return 0;
}
static int c_stream_sync(gpu_rt *rt, void *s) {
  CALL(rt, C.StreamSynchronize(s), "cuStreamSynchronize");
  return 0;
}
static int c_module_load(gpu_rt *rt, const void *image, void **mod) {
  CALL(rt, C.ModuleLoadData(mod, image), "cuModuleLoadData");
  return 0;
}
static int c_module_unload(gpu_rt *rt, void *mod) {
  CALL(rt, C.ModuleUnload(mod), "cuModuleUnload");
  return 0;
}
static int c_get_function(gpu_rt *rt, void *mod, const char *name, void **fn) {
  CALL(rt, C.ModuleGetFunction(fn, mod, name), "cuModuleGetFunction(%s)", name);
  return 0;
}
static int c_launch(gpu_rt *rt, void *fn, const unsigned g[3], const unsigned b[3], unsigned smem,
                    void *s, void **args, const size_t *sizes, int nargs) {
  (void)sizes;
  (void)nargs; /* the driver knows each parameter's size from the module */
  CALL(rt, C.LaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], smem, s, args, NULL),
       "cuLaunchKernel(grid %u,%u,%u block %u)", g[0], g[1], g[2], b[0]);
  return 0;
}

#define SYM(field, name)                                                                           \
  do {                                                                                             \
    *(void **)(&C.field) = dlsym(h, name);                                                         \
    if (!C.field) {                                                                                \
      snprintf(why, why_len, "%s has no %s: not a usable CUDA driver", RT.lib, name);            \
      return NULL;                                                                                 \
    }                                                                                              \
  } while (0)

static gpu_rt *open_locked(const char *forced, char *why, size_t why_len) {
  if (opened) return &RT;
  void *h;
  if (forced && *forced) {
    dlerror();
    h = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      snprintf(why, why_len, "no CUDA driver found (tried runtime=%s): %s", forced, e ? e : "?");
      return NULL;
    }
    snprintf(RT.lib, sizeof RT.lib, "%s", forced);
  } else {
    gpu_lib_search s;
    gpu_lib_search_cuda(&s, NULL, NULL);
    h = gpu_lib_open(&s, "CUDA driver", RT.lib, sizeof RT.lib, why, why_len);
    if (!h) return NULL;
  }
  SYM(Init, "cuInit");
  SYM(GetErrorName, "cuGetErrorName");
  SYM(DeviceGetCount, "cuDeviceGetCount");
  SYM(DeviceGet, "cuDeviceGet");
  SYM(DeviceGetName, "cuDeviceGetName");
  SYM(DeviceTotalMem, "cuDeviceTotalMem_v2");
  SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
  SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(CtxSetCurrent, "cuCtxSetCurrent");
  SYM(MemAlloc, "cuMemAlloc_v2");
  SYM(MemFree, "cuMemFree_v2");
  SYM(MemsetD8, "cuMemsetD8_v2");
  SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  SYM(StreamCreate, "cuStreamCreate");
  SYM(StreamDestroy, "cuStreamDestroy_v2");
  SYM(StreamSynchronize, "cuStreamSynchronize");
  SYM(ModuleLoadData, "cuModuleLoadData");
  SYM(ModuleUnload, "cuModuleUnload");
  SYM(ModuleGetFunction, "cuModuleGetFunction");
  SYM(LaunchKernel, "cuLaunchKernel");
  RT.api = "CUDA";
  RT.impl = &C;
  RT.device_count = c_device_count;
  RT.bind = c_bind;
  RT.device_name = c_device_name;
  RT.device_total_mem = c_total_mem;
  RT.device_cus = c_cus;
  RT.device_warp = c_warp;
  RT.mem_alloc = c_alloc;
  RT.mem_free = c_free;
  RT.memset_sync = c_memset;
  RT.memcpy_async = c_memcpy;
  RT.stream_create = c_stream_create;
  RT.stream_destroy = c_stream_destroy;
  RT.stream_sync = c_stream_sync;
  RT.module_load = c_module_load;
  RT.module_unload = c_module_unload;
  RT.get_function = c_get_function;
  RT.launch = c_launch;
  opened = 1;
  return &RT;
}

gpu_rt *gpu_rt_cuda_open(const char *forced, char *why, size_t why_len) {
  pthread_mutex_lock(&open_lock);
  gpu_rt *rt = open_locked(forced, why, why_len);
  pthread_mutex_unlock(&open_lock);
  return rt;
}
