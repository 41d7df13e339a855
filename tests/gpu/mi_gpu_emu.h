/* Device-side definitions for running mi_kernels.cu on the host (tests only).
 *
 * The kernels are compiled as ordinary C++ by the host compiler. Each GPU
 * thread of a block is a fiber (gpu_emu.cpp); blocks run one after another,
 * so `__shared__` variables can simply be function statics. __syncthreads()
 * and the warp shuffle are real barriers between the fibers: a kernel that
 * diverges around a barrier deadlocks here and the emulator reports it,
 * and a shuffle reads exactly what the partner lane wrote. What this cannot
 * show: the real compilers' code generation, timing, memory-model races
 * that sequential fibers hide. */
#ifndef MI_GPU_EMU_H
#define MI_GPU_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mi/tensor.h" /* mi_f16_to_f32: exact half -> float */

#ifndef MI_WARP
#define MI_WARP 32
#endif

struct mi_dim3 {
  unsigned x, y, z;
};
extern mi_dim3 mi_emu_thread_idx, mi_emu_block_idx, mi_emu_block_dim, mi_emu_grid_dim;
#define threadIdx mi_emu_thread_idx
#define blockIdx mi_emu_block_idx
#define blockDim mi_emu_block_dim
#define gridDim mi_emu_grid_dim

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define MI_KERNEL extern "C"

void mi_emu_syncthreads(void);
float mi_emu_shfl_xor(float v, int mask);
void *mi_emu_dynamic_shared(void);
#define __syncthreads() mi_emu_syncthreads()
#define MI_SHFL_XOR(v, m) mi_emu_shfl_xor((v), (m))
#define MI_DYNAMIC_SHARED(T, name) T *name = (T *)mi_emu_dynamic_shared()

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};

inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
inline float __uint_as_float(uint32_t i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
/* fibers are cooperative: a plain read-modify-write is atomic here */
inline int atomicCAS(int32_t *p, int32_t cmp, int32_t val) {
  int32_t old = *p;
  if (old == cmp) *p = val;
  return old;
}
inline float mi_half_bits_to_f32(uint16_t h) { return mi_f16_to_f32(h); }

#endif
