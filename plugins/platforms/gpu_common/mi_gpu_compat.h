/* Device-side portability for the shared GPU kernels (mi_kernels.cu).
 *
 * The kernels are written once in the CUDA/HIP common dialect (__global__,
 * threadIdx, __shared__, __syncthreads) and compiled by hipcc (HIP, AMD/Hygon
 * DCU, wavefront 64) or by nvcc (CUDA, warp 32). Only what differs between
 * the two lives here: the warp width, warp shuffles and half-precision
 * conversion. Nothing here is host code: the plugins reach the GPU runtime
 * through gpu_rt.h (dlopen), never through these headers, so the build does
 * not depend on HIP's nvidia_detail headers (which do not compile with
 * CUDA 13).
 *
 * Build parameters (-D on the device compiler's command line, read from the
 * plugin's platform.json by CMake):
 *   MI_WARP                 64 on DCU/AMD (wavefront), 32 on NVIDIA
 *   MI_MM_BM/BN/BK/TM/TN     tiled matmul block tile and per-thread tile
 *   MI_GEMV_MAX_M           largest M handled by the GEMV path
 */
#ifndef MI_GPU_COMPAT_H
#define MI_GPU_COMPAT_H

#include <stdint.h>

#if defined(MI_GPU_EMULATOR)
/* tests/gpu/mi_gpu_emu.h: the kernels compiled as plain C++ and run on
 * the host by a fiber-per-thread emulator (tests only). */
#include "mi_gpu_emu.h"
#elif defined(__HIPCC__) || defined(__HIP__)
#include <hip/hip_runtime.h>
#define MI_GPU_HIP 1
#ifndef MI_WARP
#define MI_WARP 64
#endif
/* HIP's shuffles act on the whole wavefront (no mask argument). */
#define MI_SHFL_XOR(v, m) __shfl_xor((v), (m))
__device__ __forceinline__ float mi_half_bits_to_f32(uint16_t h) {
  _Float16 v; /* clang's native half type on AMDGPU */
  __builtin_memcpy(&v, &h, 2);
  return (float)v;
}
#elif defined(__CUDACC__)
#include <cuda_fp16.h>
#define MI_GPU_CUDA 1
#ifndef MI_WARP
#define MI_WARP 32
#endif
#define MI_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
__device__ __forceinline__ float mi_half_bits_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
#else
#error "mi_gpu_compat.h is for device code: compile with hipcc or nvcc (or MI_GPU_EMULATOR)"
#endif

#ifndef MI_DYNAMIC_SHARED
/* The block's dynamic shared memory (size given at launch). */
#define MI_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

#if MI_WARP != 32 && MI_WARP != 64
#error "MI_WARP must be 32 or 64"
#endif

/* bf16 is the top half of an f32: widening is a shift. */
__device__ __forceinline__ float mi_bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

/* Every kernel the plugins look up by name is extern "C" so that its
 * symbol in the code object is its plain name (see gpu_kernels.h). */
#ifndef MI_KERNEL
#define MI_KERNEL extern "C" __global__
#endif

#endif
