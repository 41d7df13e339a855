/* The descriptor of one GPU platform plugin. The same file is compiled into
 * libmi-k100.so, libmi-z200.so and libmi-nvidia.so; what differs comes from
 * the plugin's platform.json through -D definitions (gpu_plugin.cmake):
 *   gpu_plugin_config.h (generated): MI_GPU_NAME "z200", MI_GPU_ARCH,
 *   MI_GPU_NO_CODE (why there is no device code, when there is none),
 *   MI_GPU_SCORE, MI_GPU_DESCRIPTION, MI_ATT_ROWS, MI_ATT_SMEM;
 *   -D: MI_GPU_API_HIP or MI_GPU_API_CUDA, and the tunables (gpu_kernels.h). */
#include <stddef.h>

#include "gpu_kernels.h"
#include "gpu_platform.h"
#include "gpu_plugin_config.h" /* generated: MI_GPU_NAME, MI_GPU_ARCH, ... */

#ifndef MI_WARP
#error "MI_WARP must be defined (platform.json: wavefront)"
#endif

/* gpu_blob.c (generated): the embedded code object. */
const unsigned char *mi_gpu_code(size_t *size);
#if defined(MI_GPU_API_EMU)
gpu_rt *gpu_rt_emu_open(const char *forced, char *why, size_t why_len);
#endif

static const gpu_target target = {
    .name = MI_GPU_NAME,
#if defined(MI_GPU_API_HIP)
    .api = "HIP",
    .open_rt = gpu_rt_hip_open,
#elif defined(MI_GPU_API_EMU) /* tests/gpu/gpu_emu.cpp: kernels run on the host */
    .api = "EMU",
    .open_rt = gpu_rt_emu_open,
#else
    .api = "CUDA",
    .open_rt = gpu_rt_cuda_open,
#endif
    .arch = MI_GPU_ARCH,
    .code = mi_gpu_code,
    .no_code = MI_GPU_NO_CODE,
    .tu = {.warp = MI_WARP,
           .mm_bm = MI_MM_BM,
           .mm_bn = MI_MM_BN,
           .mm_bk = MI_MM_BK,
           .mm_tm = MI_MM_TM,
           .mm_tn = MI_MM_TN,
           .gemv_max_m = MI_GEMV_MAX_M,
           .gemv_threads = MI_GEMV_THREADS,
           .att_rows = MI_ATT_ROWS,
           .att_smem = MI_ATT_SMEM,
           .cus = 0},
    .score = MI_GPU_SCORE,
};

static int probe(const mi_host_api *host, const mi_options *opts, char *why, size_t why_len) {
  return gpu_probe(&target, host, opts, why, why_len);
}

static int init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                size_t err_len) {
  return gpu_init(&target, host, opts, ctx, err, err_len);
}

static const mi_plugin_desc desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = MI_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_PLATFORM,
    .name = MI_GPU_NAME,
    .version = "0.1.0",
    .description = MI_GPU_DESCRIPTION,
    .probe = probe,
    .init = init,
    .fini = gpu_fini,
    .get_iface = gpu_get_iface,
};

MI_PLUGIN_DEFINE(desc)
