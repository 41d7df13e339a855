/* The HIP runtime through dlopen (see gpu_rt.h). Declares the handful of
 * HIP entry points it uses with their C ABI (no HIP headers: they are not
 * needed to call a C API, and the plugin builds without a HIP install). The
 * enum values used are stable since ROCm 5 (attribute enum ranges were fixed
 * then) and match Hygon DTK's HIP. hipDeviceProp_t is deliberately avoided:
 * its layout changed in ROCm 6. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_libsearch.h"
#include "gpu_rt.h"

typedef int hip_err;
typedef hip_err (*fn_i)(int *);
typedef struct hip_api {
  const char *(*GetErrorName)(hip_err);
  hip_err (*GetDeviceCount)(int *);
  hip_err (*SetDevice)(int);
  hip_err (*DeviceGetName)(char *, int, int);
  hip_err (*DeviceTotalMem)(size_t *, int);
  hip_err (*DeviceGetAttribute)(int *, int, int);
  hip_err (*Malloc)(void **, size_t);
  hip_err (*Free)(void *);
  hip_err (*Memset)(void *, int, size_t);
  hip_err (*MemcpyAsync)(void *, const void *, size_t, int, void *);
  hip_err (*StreamCreate)(void **);
  hip_err (*StreamDestroy)(void *);
  hip_err (*StreamSynchronize)(void *);
  hip_err (*ModuleLoadData)(void **, const void *);
  hip_err (*ModuleUnload)(void *);
  hip_err (*ModuleGetFunction)(void **, void *, const char *);
  hip_err (*ModuleLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, void *, void **, void **);
} hip_api;

/* hip_runtime_api.h (ROCm >= 5, DTK): */
#define HIP_ATTR_MULTIPROCESSOR_COUNT 63
#define HIP_ATTR_WARP_SIZE 87
#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define HIP_LAUNCH_PARAM_END ((void *)0x03)

static hip_api H;
static gpu_rt RT;
static int opened;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int bound_dev = -1;

static const char *ename(hip_err e) {
  const char *n = H.GetErrorName ? H.GetErrorName(e) : NULL;
  return n ? n : "hipError?";
}

#define CALL(rt, expr, what, ...)                                                                  \
  do {                                                                                             \
    hip_err e_ = (expr);                                                                           \
    if (e_ != 0) return gpu_rt_fail((rt), what ": %s (%d)", ##__VA_ARGS__, ename(e_), e_);        \
  } while (0)

static int h_device_count(gpu_rt *rt, int *n) {
  *n = 0;
  CALL(rt, H.GetDeviceCount(n), "hipGetDeviceCount");
  return 0;
}
static int h_bind(gpu_rt *rt, int dev) {
  if (bound_dev == dev) return 0;
  CALL(rt, H.SetDevice(dev), "hipSetDevice(%d)", dev);
  bound_dev = dev;
  return 0;
}
static int h_device_name(gpu_rt *rt, int dev, char *buf, size_t len) {
  CALL(rt, H.DeviceGetName(buf, (int)len, dev), "hipDeviceGetName(%d)", dev);
  return 0;
}
static int h_total_mem(gpu_rt *rt, int dev, uint64_t *bytes) {
  size_t b = 0;
  CALL(rt, H.DeviceTotalMem(&b, dev), "hipDeviceTotalMem(%d)", dev);
  *bytes = b;
  return 0;
}
static int h_cus(gpu_rt *rt, int dev, int *n) {
  CALL(rt, H.DeviceGetAttribute(n, HIP_ATTR_MULTIPROCESSOR_COUNT, dev),
       "hipDeviceGetAttribute(MultiprocessorCount)");
  return 0;
}
static int h_warp(gpu_rt *rt, int dev, int *n) {
  CALL(rt, H.DeviceGetAttribute(n, HIP_ATTR_WARP_SIZE, dev), "hipDeviceGetAttribute(WarpSize)");
  return 0;
}
static int h_alloc(gpu_rt *rt, void **p, size_t n) {
  *p = NULL;
  CALL(rt, H.Malloc(p, n ? n : 1), "hipMalloc(%zu)", n);
  return 0;
}
static int h_free(gpu_rt *rt, void *p) {
  CALL(rt, H.Free(p), "hipFree");
  return 0;
}
static int h_memset(gpu_rt *rt, void *p, int v, size_t n) {
  CALL(rt, H.Memset(p, v, n), "hipMemset(%zu)", n);
  return 0;
}
static int h_memcpy(gpu_rt *rt, void *dst, const void *src, size_t n, int kind, void *s) {
  /* hipMemcpyKind: HostToDevice 1, DeviceToHost 2, DeviceToDevice 3 = GPU_COPY_* */
  CALL(rt, H.MemcpyAsync(dst, src, n, kind, s), "hipMemcpyAsync(%zu bytes, kind %d)", n, kind);
  return 0;
}
static int h_stream_create(gpu_rt *rt, void **s) {
  CALL(rt, H.StreamCreate(s), "hipStreamCreate");
  return 0;
}
static int h_stream_destroy(gpu_rt *rt, void *s) {
  CALL(rt, H.StreamDestroy(s), "hipStreamDestroy");
  return 0;
}
static int h_stream_sync(gpu_rt *rt, void *s) {
  CALL(rt, H.StreamSynchronize(s), "hipStreamSynchronize");
  return 0;
}
static int h_module_load(gpu_rt *rt, const void *image, void **mod) {
  CALL(rt, H.ModuleLoadData(mod, image), "hipModuleLoadData");
  return 0;
}
static int h_module_unload(gpu_rt *rt, void *mod) {
  CALL(rt, H.ModuleUnload(mod), "hipModuleUnload");
  return 0;
}
static int h_get_function(gpu_rt *rt, void *mod, const char *name, void **fn) {
  CALL(rt, H.ModuleGetFunction(fn, mod, name), "hipModuleGetFunction(%s)", name);
  return 0;
}

/* Kernel arguments go through HIP_LAUNCH_PARAM_BUFFER_POINTER: one buffer
 * laid out like the kernel's argument segment (each argument at its natural
 * alignment). This is the form every HIP version accepts; kernelParams
 * support came later to some runtimes. */
static int h_launch(gpu_rt *rt, void *fn, const unsigned g[3], const unsigned b[3], unsigned smem,
                    void *s, void **args, const size_t *sizes, int nargs) {
  _Alignas(16) unsigned char buf[256];
  size_t off = 0;
  for (int i = 0; i < nargs; i++) {
    size_t a = sizes[i] >= 8 ? 8 : sizes[i];
    off = (off + a - 1) / a * a;
    if (off + sizes[i] > sizeof buf) return gpu_rt_fail(rt, "kernel arguments exceed %zu bytes", sizeof buf);
    memcpy(buf + off, args[i], sizes[i]);
    off += sizes[i];
  }
  size_t size = off;
  void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   HIP_LAUNCH_PARAM_END};
  CALL(rt, H.ModuleLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], smem, s, NULL, extra),
       "hipModuleLaunchKernel(grid %u,%u,%u block %u)", g[0], g[1], g[2], b[0]);
  return 0;
}

#define SYM(field, name)                                                                           \
  do {                                                                                             \
    *(void **)(&H.field) = dlsym(h, name);                                                         \
    if (!H.field) {                                                                                \
      snprintf(why, why_len, "%s has no %s: not a usable HIP runtime", RT.lib, name);            \
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
      snprintf(why, why_len, "no HIP runtime found (tried runtime=%s): %s", forced, e ? e : "?");
      return NULL;
    }
    snprintf(RT.lib, sizeof RT.lib, "%s", forced);
  } else {
    gpu_lib_search s;
    gpu_lib_search_hip(&s, NULL, NULL);
    h = gpu_lib_open(&s, "HIP runtime", RT.lib, sizeof RT.lib, why, why_len);
    if (!h) return NULL;
  }
  /* The handle is kept for the life of the process (see gpu_rt.h). */
  SYM(GetErrorName, "hipGetErrorName");
  SYM(GetDeviceCount, "hipGetDeviceCount");
  SYM(SetDevice, "hipSetDevice");
  SYM(DeviceGetName, "hipDeviceGetName");
  SYM(DeviceTotalMem, "hipDeviceTotalMem");
  SYM(DeviceGetAttribute, "hipDeviceGetAttribute");
  SYM(Malloc, "hipMalloc");
  SYM(Free, "hipFree");
  SYM(Memset, "hipMemset");
  SYM(MemcpyAsync, "hipMemcpyAsync");
  SYM(StreamCreate, "hipStreamCreate");
  SYM(StreamDestroy, "hipStreamDestroy");
  SYM(StreamSynchronize, "hipStreamSynchronize");
  SYM(ModuleLoadData, "hipModuleLoadData");
  SYM(ModuleUnload, "hipModuleUnload");
  SYM(ModuleGetFunction, "hipModuleGetFunction");
  SYM(ModuleLaunchKernel, "hipModuleLaunchKernel");
  RT.api = "HIP";
  RT.impl = &H;
  RT.device_count = h_device_count;
  RT.bind = h_bind;
  RT.device_name = h_device_name;
  RT.device_total_mem = h_total_mem;
  RT.device_cus = h_cus;
  RT.device_warp = h_warp;
  RT.mem_alloc = h_alloc;
  RT.mem_free = h_free;
  RT.memset_sync = h_memset;
  RT.memcpy_async = h_memcpy;
  RT.stream_create = h_stream_create;
  RT.stream_destroy = h_stream_destroy;
  RT.stream_sync = h_stream_sync;
  RT.module_load = h_module_load;
  RT.module_unload = h_module_unload;
  RT.get_function = h_get_function;
  RT.launch = h_launch;
  opened = 1;
  return &RT;
}

gpu_rt *gpu_rt_hip_open(const char *forced, char *why, size_t why_len) {
  pthread_mutex_lock(&open_lock);
  gpu_rt *rt = open_locked(forced, why, why_len);
  pthread_mutex_unlock(&open_lock);
  return rt;
}
