/* The GPU kernel set of mi_platform_iface, written once for HIP (hipcc,
 * DCU/AMD, wavefront 64) and CUDA (nvcc, warp 32). Compiled to a code
 * object / fatbin that the plugin embeds and loads at run time with the
 * module API (hipModuleLoadData / cuModuleLoadData): see gpu_rt.h.
 *
 * Conventions: every pointer is a device address; shapes are int64_t; all
 * arithmetic is f32 with f32 accumulation (f16/bf16 weights widened as they
 * are read; GGUF block types dequantized as they are read, exactly).
 * Launch geometry is chosen on the host (gpu_launch.c) and must match the
 * comment above each kernel.
 */
#include "mi_gpu_compat.h"
#include "gpu_kernels.h"

#define INF_F __int_as_float(0x7f800000)

/* ---------------- helpers ---------------- */

/* Test-only defects (tests/gpu: the emulator built with MI_GPU_MUTANTS,
 * switched by MI_GPU_MUTANT at load), which the verifier must reject; in
 * any other build MI_MUTANT_ACC is nothing. half_acc: the accumulators of
 * matmul rounded to half precision after every step, where the contract
 * says f32 accumulation. */
#ifdef MI_GPU_MUTANTS
extern int mi_gpu_mutant_half_acc;
__device__ __forceinline__ float mi_mutant_round_f16(float x) {
  int e;
  float m = frexpf(x, &e); /* |m| in [0.5, 1): 11 significant bits kept */
  return x == 0.0f ? x : ldexpf(rintf(ldexpf(m, 11)), e - 11);
}
#define MI_MUTANT_ACC(x) ((x) = mi_gpu_mutant_half_acc ? mi_mutant_round_f16(x) : (x))
#else
#define MI_MUTANT_ACC(x) ((void)0)
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = MI_WARP / 2; o > 0; o >>= 1) v += MI_SHFL_XOR(v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = MI_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, MI_SHFL_XOR(v, o));
  return v;
}

/* Sum over the block; every thread gets the result. red: >= blockDim/MI_WARP floats. */
__device__ __forceinline__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x % MI_WARP, warp = threadIdx.x / MI_WARP;
  const int nw = (blockDim.x + MI_WARP - 1) / MI_WARP;
  v = warp_sum(v);
  __syncthreads(); /* red may still be read from a previous call */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < nw; i++) s += red[i];
  return s;
}

/* GGUF's block types (DT 3 q8_0, 4 q4_0, 5 q4_k, 6 q6_k, 7 q5_k, 8 q4_1,
 * 9 q5_0, 10 q5_1, 11 q2_k, 12 q3_k; layouts in sdk/include/mi/quant.h).
 * A matrix [N, K] in a block type is N rows of K / QK whole blocks, so
 * element i = n·K + k sits in block i / QK at position i % QK: the same
 * flat index as the element types. Each value is computed with one
 * rounding of its exact value (one fmaf where two terms meet), so it
 * equals mi_quant_value64 rounded to f32. */
/* (the element types get a placeholder: their branches are never taken) */
template <int DT> struct blk_fmt { enum { QK = 1, BYTES = 1 }; };
template <> struct blk_fmt<3> { enum { QK = 32, BYTES = 34 }; };
template <> struct blk_fmt<4> { enum { QK = 32, BYTES = 18 }; };
template <> struct blk_fmt<5> { enum { QK = 256, BYTES = 144 }; };
template <> struct blk_fmt<6> { enum { QK = 256, BYTES = 210 }; };
template <> struct blk_fmt<7> { enum { QK = 256, BYTES = 176 }; };
template <> struct blk_fmt<8> { enum { QK = 32, BYTES = 20 }; };
template <> struct blk_fmt<9> { enum { QK = 32, BYTES = 22 }; };
template <> struct blk_fmt<10> { enum { QK = 32, BYTES = 24 }; };
template <> struct blk_fmt<11> { enum { QK = 256, BYTES = 84 }; };
template <> struct blk_fmt<12> { enum { QK = 256, BYTES = 110 }; };

__device__ __forceinline__ float blk_half(const uint8_t *p) {
  return mi_half_bits_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8));
}

/* Q4_K's and Q5_K's sub-block sb (0..7) scale and min from the 12 bytes at s. */
__device__ __forceinline__ void k_scale_min(const uint8_t *s, int sb, int *sc, int *m) {
  if (sb < 4) {
    *sc = s[sb] & 63;
    *m = s[sb + 4] & 63;
  } else {
    *sc = (s[sb + 4] & 15) | ((s[sb - 4] >> 6) << 4);
    *m = (s[sb + 4] >> 4) | ((s[sb] >> 6) << 4);
  }
}

/* The 5-bit code of value j (0..31) of a Q5_0 / Q5_1 block: its nibble
 * from qs and bit j of the little-endian 32-bit qh (byte j / 8, bit j % 8). */
__device__ __forceinline__ int q5_code(const uint8_t *qh, const uint8_t *qs, int j) {
  const uint8_t q = qs[j % 16];
  return (j < 16 ? q & 15 : q >> 4) | ((qh[j / 8] >> (j % 8)) & 1) << 4;
}

/* Value j (0..QK-1) of the block at b. */
template <int DT> __device__ __forceinline__ float blk_value(const uint8_t *b, int j) {
  if (DT == 3) return blk_half(b) * (float)(int8_t)b[2 + j];
  if (DT == 4) {
    const int q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
    return blk_half(b) * (float)(q - 8);
  }
  if (DT == 5 || DT == 7) { /* Q4_K, Q5_K: d·sc·q − dmin·m */
    int sc, m;
    k_scale_min(b + 4, j / 32, &sc, &m);
    int q;
    if (DT == 5) {
      const uint8_t byte = b[16 + 32 * (j / 64) + j % 32];
      q = (j % 64) < 32 ? byte & 15 : byte >> 4;
    } else { /* Q4_K's nibble from qs (byte 48), the fifth bit j / 32 of qh[j % 32] (byte 16) */
      const uint8_t byte = b[48 + 32 * (j / 64) + j % 32];
      q = ((j % 64) < 32 ? byte & 15 : byte >> 4) | ((b[16 + j % 32] >> (j / 32)) & 1) << 4;
    }
    /* d·sc and dmin·m are exact in f32 (11 + 6 bits); one rounding at the end */
    return fmaf(blk_half(b) * (float)sc, (float)q, -(blk_half(b + 2) * (float)m));
  }
  if (DT == 8 || DT == 10) { /* Q4_1, Q5_1: d·q + m, one rounding */
    const int q = DT == 8 ? (j < 16 ? b[4 + j] & 15 : b[4 + j - 16] >> 4) : q5_code(b + 4, b + 8, j);
    return fmaf(blk_half(b), (float)q, blk_half(b + 2));
  }
  if (DT == 9) return blk_half(b) * (float)(q5_code(b + 2, b + 6, j) - 16); /* exact */
  if (DT == 11 || DT == 12) { /* the 16-value sub-blocks: value j = 128n + 32i + l */
    const int n = j / 128, i = (j % 128) / 32, l = j % 32, s = 8 * n + 2 * i + l / 16;
    if (DT == 11) { /* Q2_K: d·(sc & 15)·q − dmin·(sc >> 4), q 0..3; d·sc exact (11 + 4 bits) */
      const int q = (b[16 + 32 * n + l] >> (2 * i)) & 3;
      return fmaf(blk_half(b + 80) * (float)(b[s] & 15), (float)q, -(blk_half(b + 82) * (float)(b[s] >> 4)));
    }
    /* Q3_K: d·(scale − 32)·q, q −4..3 (−4 where the hmask bit is clear); exact (11 + 6 + 3 bits) */
    const uint8_t *sc = b + 96;
    const int scale = (s < 8 ? sc[s] & 15 : sc[s - 8] >> 4) | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
    const int q = ((b[32 + 32 * n + l] >> (2 * i)) & 3) - ((b[l] >> (4 * n + i)) & 1 ? 0 : 4);
    return blk_half(b + 108) * (float)(scale - 32) * (float)q;
  }
  /* DT == 6: d·scale exact (11 + 8 bits), times a 6-bit code: one rounding */
  const int h = j / 128, r = j % 128, quarter = r / 32, l = r % 32;
  const uint8_t lo = b[64 * h + l + (quarter & 1) * 32];
  const int low = (quarter & 2) ? lo >> 4 : lo & 15;
  const int high = (b[128 + 32 * h + l] >> (2 * quarter)) & 3;
  return blk_half(b + 208) * (float)(int8_t)b[192 + j / 16] * (float)((low | high << 4) - 32);
}

/* Weight element i of w in dtype DT (0 f32, 1 f16, 2 bf16, 3.. a block
 * type) as f32. */
template <int DT> __device__ __forceinline__ float load_w(const void *w, int64_t i) {
  if (DT == 0) return ((const float *)w)[i];
  if (DT >= 3) {
    const uint8_t *b = (const uint8_t *)w + (i / blk_fmt<DT>::QK) * blk_fmt<DT>::BYTES;
    return blk_value<DT>(b, (int)(i % blk_fmt<DT>::QK));
  }
  uint16_t h = ((const uint16_t *)w)[i];
  return DT == 1 ? mi_half_bits_to_f32(h) : mi_bf16_bits_to_f32(h);
}

/* 8 consecutive weights starting at element i (16-byte aligned for 16-bit
 * types, 32-byte for f32; a multiple of 8 for the block types, whose 8
 * values then lie in one block) as f32: one or two vector loads, or one
 * block's header and 8 codes. */
template <int DT> __device__ __forceinline__ void load_w8(const void *w, int64_t i, float *o) {
  if (DT >= 3) {
    const uint8_t *b = (const uint8_t *)w + (i / blk_fmt<DT>::QK) * blk_fmt<DT>::BYTES;
    const int j0 = (int)(i % blk_fmt<DT>::QK);
#pragma unroll
    for (int j = 0; j < 8; j++) o[j] = blk_value<DT>(b, j0 + j);
  } else if (DT == 0) {
    const float4 *p = (const float4 *)((const float *)w + i);
    float4 a = p[0], b = p[1];
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
    o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
  } else {
    uint4 r = *(const uint4 *)((const uint16_t *)w + i);
    uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (DT == 2) {
        o[2 * j] = __uint_as_float(u[j] << 16); /* little endian: low half first */
        o[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
      } else {
        o[2 * j] = mi_half_bits_to_f32((uint16_t)(u[j] & 0xffffu));
        o[2 * j + 1] = mi_half_bits_to_f32((uint16_t)(u[j] >> 16));
      }
    }
  }
}

/* ---------------- matmul: GEMV path (M <= MI_GEMV_MAX_M) ----------------
 * y[M,N] = x[M,K] · w[N,K]^T. One warp per output column n: the warp walks
 * w's row n once with coalesced loads (8 elements per lane per step when
 * vec=1), multiplies it by each of the M activation rows (small, served from
 * cache) and reduces with shuffles. Weights are read exactly once in total,
 * which is what bounds decode.
 * grid.x = ceil(N / (MI_GEMV_THREADS / MI_WARP)), block = MI_GEMV_THREADS.
 * vec=1 requires K % 8 == 0 and w, x 16-byte aligned (checked on the host). */
template <int DT>
__device__ __forceinline__ void gemv_body(float *y, const float *x, const void *w, int64_t M,
                                          int64_t N, int64_t K, int vec) {
  const int lane = threadIdx.x % MI_WARP;
  const int64_t n = (int64_t)blockIdx.x * (blockDim.x / MI_WARP) + threadIdx.x / MI_WARP;
  if (n >= N) return; /* the whole warp leaves together; no block barrier below */
  float acc[MI_GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < MI_GEMV_MAX_M; m++) acc[m] = 0.0f;
  const int64_t row = n * K;
  if (vec) {
    /* unrolled so that several 16-byte weight loads per lane are in flight:
     * one at a time cannot keep HBM busy */
#pragma unroll 4
    for (int64_t k = (int64_t)lane * 8; k < K; k += (int64_t)MI_WARP * 8) {
      float wv[8];
      load_w8<DT>(w, row + k, wv);
#pragma unroll
      for (int m = 0; m < MI_GEMV_MAX_M; m++) {
        if (m < M) {
          const float4 *xp = (const float4 *)(x + m * K + k);
          float4 a = xp[0], b = xp[1];
          acc[m] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x +
                    wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
          MI_MUTANT_ACC(acc[m]);
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += MI_WARP) {
      float wv = load_w<DT>(w, row + k);
#pragma unroll
      for (int m = 0; m < MI_GEMV_MAX_M; m++)
        if (m < M) {
          acc[m] += wv * x[m * K + k];
          MI_MUTANT_ACC(acc[m]);
        }
    }
  }
#pragma unroll
  for (int m = 0; m < MI_GEMV_MAX_M; m++) {
    if (m < M) {
      float s = warp_sum(acc[m]);
      if (lane == 0) y[m * N + n] = s;
    }
  }
}

MI_KERNEL void mi_k_gemv_f32(float *y, const float *x, const void *w, int64_t M, int64_t N,
                             int64_t K, int32_t vec) {
  gemv_body<0>(y, x, w, M, N, K, vec);
}
MI_KERNEL void mi_k_gemv_f16(float *y, const float *x, const void *w, int64_t M, int64_t N,
                             int64_t K, int32_t vec) {
  gemv_body<1>(y, x, w, M, N, K, vec);
}
MI_KERNEL void mi_k_gemv_bf16(float *y, const float *x, const void *w, int64_t M, int64_t N,
                              int64_t K, int32_t vec) {
  gemv_body<2>(y, x, w, M, N, K, vec);
}
#define MI_GEMV_BLOCK(name, dt)                                                                    \
  MI_KERNEL void mi_k_gemv_##name(float *y, const float *x, const void *w, int64_t M, int64_t N,   \
                                  int64_t K, int32_t vec) {                                        \
    gemv_body<dt>(y, x, w, M, N, K, vec);                                                          \
  }
MI_GEMV_BLOCK(q8_0, 3)
MI_GEMV_BLOCK(q4_0, 4)
MI_GEMV_BLOCK(q4_k, 5)
MI_GEMV_BLOCK(q6_k, 6)
MI_GEMV_BLOCK(q5_k, 7)
MI_GEMV_BLOCK(q4_1, 8)
MI_GEMV_BLOCK(q5_0, 9)
MI_GEMV_BLOCK(q5_1, 10)
MI_GEMV_BLOCK(q2_k, 11)
MI_GEMV_BLOCK(q3_k, 12)

/* ---------------- matmul: tiled path (M > MI_GEMV_MAX_M) ----------------
 * Block tile BM x BN of y, K walked in steps of BK through shared memory
 * (x tile and w tile, both stored k-major so the inner loop reads rows).
 * Each thread owns TM x TN outputs spread with a stride of BM/TM (BN/TN) so
 * that neighbouring threads read neighbouring shared words (no bank
 * conflicts) and write neighbouring y columns (coalesced).
 * grid = (ceil(N/BN), ceil(M/BM)), block = MI_MM_THREADS. */
template <int DT>
__device__ __forceinline__ void mm_body(float *y, const float *x, const void *w, int64_t M,
                                        int64_t N, int64_t K) {
  constexpr int BM = MI_MM_BM, BN = MI_MM_BN, BK = MI_MM_BK, TM = MI_MM_TM, TN = MI_MM_TN;
  constexpr int NT = MI_MM_THREADS, SY = BM / TM, SX = BN / TN;
  __shared__ float As[BK][BM + 1]; /* x tile, k-major */
  __shared__ float Bs[BK][BN + 1]; /* w tile, k-major */
  const int tid = threadIdx.x, tx = tid % SX, ty = tid / SX;
  const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    /* consecutive threads take consecutive k: coalesced global reads */
    for (int i = tid; i < BM * BK; i += NT) {
      int r = i / BK, c = i % BK;
      int64_t m = m0 + r, k = k0 + c;
      As[c][r] = (m < M && k < K) ? x[m * K + k] : 0.0f;
    }
    for (int i = tid; i < BN * BK; i += NT) {
      int r = i / BK, c = i % BK;
      int64_t n = n0 + r, k = k0 + c;
      Bs[c][r] = (n < N && k < K) ? load_w<DT>(w, n * K + k) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk++) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; i++) a[i] = As[kk][ty + i * SY];
#pragma unroll
      for (int j = 0; j < TN; j++) b[j] = Bs[kk][tx + j * SX];
#pragma unroll
      for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) {
          acc[i][j] += a[i] * b[j];
          MI_MUTANT_ACC(acc[i][j]);
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; i++) {
    int64_t m = m0 + ty + i * SY;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; j++) {
      int64_t n = n0 + tx + j * SX;
      if (n < N) y[m * N + n] = acc[i][j];
    }
  }
}

MI_KERNEL void mi_k_mm_f32(float *y, const float *x, const void *w, int64_t M, int64_t N,
                           int64_t K) {
  mm_body<0>(y, x, w, M, N, K);
}
MI_KERNEL void mi_k_mm_f16(float *y, const float *x, const void *w, int64_t M, int64_t N,
                           int64_t K) {
  mm_body<1>(y, x, w, M, N, K);
}
MI_KERNEL void mi_k_mm_bf16(float *y, const float *x, const void *w, int64_t M, int64_t N,
                            int64_t K) {
  mm_body<2>(y, x, w, M, N, K);
}
#define MI_MM_BLOCK(name, dt)                                                                      \
  MI_KERNEL void mi_k_mm_##name(float *y, const float *x, const void *w, int64_t M, int64_t N,     \
                                int64_t K) {                                                       \
    mm_body<dt>(y, x, w, M, N, K);                                                                 \
  }
MI_MM_BLOCK(q8_0, 3)
MI_MM_BLOCK(q4_0, 4)
MI_MM_BLOCK(q4_k, 5)
MI_MM_BLOCK(q6_k, 6)
MI_MM_BLOCK(q5_k, 7)
MI_MM_BLOCK(q4_1, 8)
MI_MM_BLOCK(q5_0, 9)
MI_MM_BLOCK(q5_1, 10)
MI_MM_BLOCK(q2_k, 11)
MI_MM_BLOCK(q3_k, 12)

/* Σ xr[i]² over a row of dim, the whole block's sum (every thread gets it);
 * block = MI_ROW_THREADS. Shared by rmsnorm and rownorm. */
__device__ __forceinline__ float row_sumsq(const float *xr, int64_t dim) {
  __shared__ float red[MI_ROW_THREADS / 32];
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  return block_sum(ss, red);
}

/* ---------------- rmsnorm ----------------
 * y[r,:] = x[r,:] · 1/sqrt(mean(x²) + eps) · (w + off). y may equal x: each
 * thread rewrites only the elements it read.
 * grid.x = rows, block = MI_ROW_THREADS. */
MI_KERNEL void mi_k_rmsnorm(float *y, const float *x, const float *w, int64_t dim, float eps,
                            float off) {
  const float *xr = x + (int64_t)blockIdx.x * dim;
  float *yr = y + (int64_t)blockIdx.x * dim;
  const float ss = row_sumsq(xr, dim);
  const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * (w[i] + off);
}

/* ---------------- rope (NeoX, partial, strided) ----------------
 * One block per token t: the cos/sin table for pos[t] is made once in
 * shared memory (angles in double: at position ~2000 with theta 1e6 an f32
 * angle is off by ~1e-4 rad) and used by every head.
 * grid.x = T, block = MI_ROW_THREADS, half = rot_dim/2 <= MI_ROPE_MAX_HALF. */
MI_KERNEL void mi_k_rope(float *x, const int32_t *pos, int64_t H, int64_t tok_stride,
                         int64_t head_stride, int64_t half, float theta) {
  __shared__ float cs[MI_ROPE_MAX_HALF], sn[MI_ROPE_MAX_HALF];
  const int64_t t = blockIdx.x;
  const double p = (double)pos[t];
  const double lt = log((double)theta);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    double ang = p * exp(-(double)(2 * i) / (double)(2 * half) * lt);
    double s, c;
    sincos(ang, &s, &c);
    cs[i] = (float)c;
    sn[i] = (float)s;
  }
  __syncthreads();
  float *xt = x + t * tok_stride;
  for (int64_t e = threadIdx.x; e < H * half; e += blockDim.x) {
    int64_t h = e / half, i = e % half;
    float *v = xt + h * head_stride;
    float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * cs[i] - x1 * sn[i];
    v[i + half] = x1 * cs[i] + x0 * sn[i];
  }
}

/* ---------------- attention (causal, GQA, online softmax) ----------------
 * A block serves one KV head and R = TQ x GB query rows: GB heads of that
 * KV head's group (g0 .. g0+GB) for TQ consecutive tokens, so every K/V row
 * it loads into shared memory is used by all R rows (decode: the G heads of
 * a group share one pass over the cache). Keys are taken in tiles of BJ
 * rows: scores for the tile, a per-row online-softmax update (running max m,
 * running sum l; every exponent is <= 0), then the V tile weighted by
 * exp(s - m) is added to the accumulators (registers: thread e holds
 * elements e, e+256, ... of the R x D output).
 *
 * Split-K (decode, few blocks): blockIdx.y picks keys [y*split_len,
 * (y+1)*split_len); with nsplit > 1 the block writes unnormalised partials
 * (acc[D], m, l) to part[((y*T + t)*Hq + h)*(D+2)] and mi_k_attn_combine
 * merges them; with nsplit == 1 it writes out directly.
 *
 * grid = (Hkv * ceil(G/GB) * ceil(T/TQ), nsplit), block = MI_ATT_THREADS,
 * dynamic shared memory = gpu_attn_smem_bytes() (gpu_launch.c):
 *   sQ[R][D] (pre-scaled), sK[BJ][D+1] (K, then V tile), sS[R][BJ],
 *   sM[R], sL[R], sC[R]. */
MI_KERNEL void mi_k_attn(float *out, float *part, const float *q, const float *kc,
                         const float *vc, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                         int64_t pos0, float scale, int32_t TQ, int32_t GB, int32_t BJ,
                         int64_t split_len) {
  MI_DYNAMIC_SHARED(float, smem);
  const int R = TQ * GB;
  const int64_t G = Hq / Hkv;
  const int64_t ngt = (G + GB - 1) / GB;
  const int64_t kvh = blockIdx.x % Hkv;
  const int64_t gt = (blockIdx.x / Hkv) % ngt;
  const int64_t qt = blockIdx.x / (Hkv * ngt);
  const int64_t t0 = qt * TQ, g0 = gt * GB;
  const int64_t split = blockIdx.y, nsplit = gridDim.y;
  const int DP = (int)D + 1; /* padded K row: neighbouring keys hit different banks */

  float *sQ = smem;
  float *sK = sQ + (size_t)R * D;
  float *sS = sK + (size_t)BJ * DP;
  float *sM = sS + (size_t)R * BJ;
  float *sL = sM + R;
  float *sC = sL + R;

  /* row r = tq*GB + g: token t0+tq, head kvh*G + g0 + g */
  for (int i = threadIdx.x; i < R * D; i += blockDim.x) {
    int r = i / (int)D, d = i % (int)D;
    int64_t t = t0 + r / GB, g = g0 + r % GB;
    sQ[i] = (t < T && g < G) ? q[(t * Hq + kvh * G + g) * D + d] * scale : 0.0f;
  }
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    sM[r] = -INF_F;
    sL[r] = 0.0f;
  }
  float acc[MI_ATT_ACC_MAX];
#pragma unroll
  for (int a = 0; a < MI_ATT_ACC_MAX; a++) acc[a] = 0.0f;

  /* keys this block may need: rows 0 .. pos0 + last token of the block */
  int64_t t_last = t0 + TQ - 1 < T - 1 ? t0 + TQ - 1 : T - 1;
  int64_t L = pos0 + t_last + 1;
  int64_t kbeg = split * split_len, kend = kbeg + split_len < L ? kbeg + split_len : L;
  __syncthreads();

  for (int64_t j0 = kbeg; j0 < kend; j0 += BJ) {
    int nb = kend - j0 < BJ ? (int)(kend - j0) : BJ;
    for (int i = threadIdx.x; i < nb * (int)D; i += blockDim.x) {
      int jj = i / (int)D, d = i % (int)D;
      sK[jj * DP + d] = kc[((j0 + jj) * Hkv + kvh) * D + d];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < R * BJ; i += blockDim.x) {
      int r = i / BJ, jj = i % BJ;
      int64_t t = t0 + r / GB;
      float s = -INF_F;
      if (jj < nb && t < T && j0 + jj <= pos0 + t) { /* causal mask */
        const float *qr = sQ + (size_t)r * D;
        const float *kr = sK + (size_t)jj * DP;
        s = 0.0f;
        for (int d = 0; d < (int)D; d++) s += qr[d] * kr[d];
      }
      sS[i] = s;
    }
    __syncthreads();
    /* online softmax: one warp per row */
    {
      const int lane = threadIdx.x % MI_WARP, warp = threadIdx.x / MI_WARP;
      const int nw = blockDim.x / MI_WARP;
      for (int r = warp; r < R; r += nw) {
        float bm = -INF_F;
        for (int jj = lane; jj < BJ; jj += MI_WARP) bm = fmaxf(bm, sS[r * BJ + jj]);
        bm = warp_max(bm);
        float m_old = sM[r];
        float m_new = fmaxf(m_old, bm);
        /* a row with no visible key yet keeps m = -inf: all its p are 0 */
        float corr = (m_old == -INF_F) ? 0.0f : expf(m_old - m_new);
        float sum = 0.0f;
        for (int jj = lane; jj < BJ; jj += MI_WARP) {
          float s = sS[r * BJ + jj];
          float p = (s == -INF_F) ? 0.0f : expf(s - m_new);
          sS[r * BJ + jj] = p;
          sum += p;
        }
        sum = warp_sum(sum);
        if (lane == 0) {
          sM[r] = m_new;
          sL[r] = sL[r] * corr + sum;
          sC[r] = corr;
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nb * (int)D; i += blockDim.x) {
      int jj = i / (int)D, d = i % (int)D;
      sK[jj * DP + d] = vc[((j0 + jj) * Hkv + kvh) * D + d];
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < MI_ATT_ACC_MAX; a++) {
      int e = threadIdx.x + a * (int)blockDim.x;
      if (e < R * (int)D) {
        int r = e / (int)D, d = e % (int)D;
        float v = acc[a] * sC[r];
        const float *pr = sS + (size_t)r * BJ;
        for (int jj = 0; jj < nb; jj++) v += pr[jj] * sK[jj * DP + d];
        acc[a] = v;
      }
    }
    __syncthreads(); /* sK/sS are overwritten by the next tile */
  }

#pragma unroll
  for (int a = 0; a < MI_ATT_ACC_MAX; a++) {
    int e = threadIdx.x + a * (int)blockDim.x;
    if (e >= R * (int)D) continue;
    int r = e / (int)D, d = e % (int)D;
    int64_t t = t0 + r / GB, g = g0 + r % GB;
    if (t >= T || g >= G) continue;
    int64_t h = kvh * G + g;
    if (nsplit == 1) {
      float l = sL[r];
      out[(t * Hq + h) * D + d] = l > 0.0f ? acc[a] / l : 0.0f;
    } else {
      float *pp = part + ((split * T + t) * Hq + h) * (D + 2);
      pp[d] = acc[a];
      if (d == 0) {
        pp[D] = sM[r];
        pp[D + 1] = sL[r];
      }
    }
  }
}

/* Merges split-K partials: out = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s.
 * grid.x = T*Hq, block = MI_COMBINE_THREADS. */
MI_KERNEL void mi_k_attn_combine(float *out, const float *part, int64_t T, int64_t Hq, int64_t D,
                                 int32_t nsplit) {
  const int64_t th = blockIdx.x; /* t*Hq + h */
  const int64_t stride = T * Hq * (D + 2);
  const float *p0 = part + th * (D + 2);
  float M = -INF_F;
  for (int s = 0; s < nsplit; s++) M = fmaxf(M, p0[s * stride + D]);
  float lsum = 0.0f;
  for (int s = 0; s < nsplit; s++) {
    float m = p0[s * stride + D];
    if (m != -INF_F) lsum += expf(m - M) * p0[s * stride + D + 1];
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < nsplit; s++) {
      float m = p0[s * stride + D];
      if (m != -INF_F) v += expf(m - M) * p0[s * stride + d];
    }
    out[th * D + d] = lsum > 0.0f ? v / lsum : 0.0f;
  }
}

/* ---------------- elementwise ----------------
 * grid-stride loops; grid.x = min(ceil(n/256), cap), block = MI_EW_THREADS. */
MI_KERNEL void mi_k_silu_mul(float *y, const float *g, const float *u, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float a = g[i];
    y[i] = a / (1.0f + expf(-a)) * u[i];
  }
}

MI_KERNEL void mi_k_add(float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = a[i] + b[i];
}

MI_KERNEL void mi_k_scale(float *y, const float *x, float alpha, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = alpha * x[i];
}

/* ---------------- embed ----------------
 * y[t,:] = f32(table[ids[t],:]). ids live on the device, so a bad id cannot
 * be reported by the launch: the kernel never reads outside the table (the
 * row is zeroed instead) and records the first bad (t, id) in err[]; the
 * host checks err at the next sync (gpu_platform.c). grid.x = T. */
template <int DT>
__device__ __forceinline__ void embed_body(float *y, const void *table, const int32_t *ids,
                                           int64_t V, int64_t dim, int32_t *err) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float *yr = y + t * dim;
  if (id < 0 || (int64_t)id >= V) {
    if (threadIdx.x == 0 && atomicCAS(err, 0, 1) == 0) {
      err[1] = (int32_t)t;
      err[2] = id;
      err[3] = (int32_t)(V < 0x7fffffff ? V : 0x7fffffff);
    }
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = 0.0f;
    return;
  }
  const int64_t row = (int64_t)id * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = load_w<DT>(table, row + i);
}

MI_KERNEL void mi_k_embed_f32(float *y, const void *table, const int32_t *ids, int64_t V,
                              int64_t dim, int32_t *err) {
  embed_body<0>(y, table, ids, V, dim, err);
}
MI_KERNEL void mi_k_embed_f16(float *y, const void *table, const int32_t *ids, int64_t V,
                              int64_t dim, int32_t *err) {
  embed_body<1>(y, table, ids, V, dim, err);
}
MI_KERNEL void mi_k_embed_bf16(float *y, const void *table, const int32_t *ids, int64_t V,
                               int64_t dim, int32_t *err) {
  embed_body<2>(y, table, ids, V, dim, err);
}
#define MI_EMBED_BLOCK(name, dt)                                                                   \
  MI_KERNEL void mi_k_embed_##name(float *y, const void *table, const int32_t *ids, int64_t V,     \
                                   int64_t dim, int32_t *err) {                                    \
    embed_body<dt>(y, table, ids, V, dim, err);                                                    \
  }
MI_EMBED_BLOCK(q8_0, 3)
MI_EMBED_BLOCK(q4_0, 4)
MI_EMBED_BLOCK(q4_k, 5)
MI_EMBED_BLOCK(q6_k, 6)
MI_EMBED_BLOCK(q5_k, 7)
MI_EMBED_BLOCK(q4_1, 8)
MI_EMBED_BLOCK(q5_0, 9)
MI_EMBED_BLOCK(q5_1, 10)
MI_EMBED_BLOCK(q2_k, 11)
MI_EMBED_BLOCK(q3_k, 12)

/* ---------------- argmax ----------------
 * out[r] = first index of the largest x[r,:]; NaN never wins; a row with no
 * value > -inf gives 0 (as the CPU platform). grid.x = rows,
 * block = MI_ROW_THREADS. */
MI_KERNEL void mi_k_argmax(int32_t *out, const float *x, int64_t n) {
  __shared__ float sv[MI_ROW_THREADS];
  __shared__ int64_t si[MI_ROW_THREADS];
  const float *xr = x + (int64_t)blockIdx.x * n;
  float best = -INF_F;
  int64_t bi = n; /* sentinel: nothing > -inf seen */
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = xr[i];
    if (v > best) { /* strided scan visits indices in increasing order: first wins */
      best = v;
      bi = i;
    }
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      float ov = sv[threadIdx.x + s];
      int64_t oi = si[threadIdx.x + s];
      if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = (int32_t)(si[0] == n ? 0 : si[0]);
}

/* ================ ABI 1.4: the gated-DeltaNet hybrid's blocks ================ */

/* y[r*ys + i] = x[r*xs + i]: grid-stride over rows*n; block = MI_EW_THREADS. */
MI_KERNEL void mi_k_copy2d(float *y, int64_t ys, const float *x, int64_t xs, int64_t rows,
                           int64_t n) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / n, i = e % n;
    y[r * ys + i] = x[r * xs + i];
  }
}

/* y[r,:] = x[r,:] / sqrt(Σx² + eps) (l2norm, gated = 0), or
 * x[r,:] / sqrt(mean(x²) + eps) · w · silu(z[r,:]) (rmsnorm_gated, gated = 1).
 * y may equal x. grid.x = rows, block = MI_ROW_THREADS. */
MI_KERNEL void mi_k_rownorm(float *y, const float *x, const float *w, const float *z, int64_t dim,
                            float eps, int32_t gated) {
  const float *xr = x + (int64_t)blockIdx.x * dim;
  float *yr = y + (int64_t)blockIdx.x * dim;
  const float ss = row_sumsq(xr, dim);
  if (!gated) {
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv;
  } else {
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    const float *zr = z + (int64_t)blockIdx.x * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float zi = zr[i]; /* silu: z / (1 + e^-z), -0 at z -> -inf */
      yr[i] = xr[i] * inv * w[i] * (zi / (1.0f + expf(-zi)));
    }
  }
}

/* y = x · sigmoid(g), grid-stride; block = MI_EW_THREADS. */
MI_KERNEL void mi_k_sigmoid_mul(float *y, const float *x, const float *g, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[i] / (1.0f + expf(-g[i]));
}

/* beta = sigmoid(b), g = -exp(a_log[h]) · softplus(a + dt_bias[h]) over T·H
 * elements, h = i % H; grid-stride, block = MI_EW_THREADS. */
MI_KERNEL void mi_k_deltanet_gates(float *beta, float *g, const float *b, const float *a,
                                   const float *a_log, const float *dt_bias, int64_t H,
                                   int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t h = i % H;
    const float u = a[i] + dt_bias[h];
    const float sp = u > 20.0f ? u : log1pf(expf(u)); /* e^u overflows near 89 */
    g[i] = -expf(a_log[h]) * sp;
    beta[i] = 1.0f / (1.0f + expf(-b[i]));
  }
}

/* Depthwise causal conv1d with carried state: one thread per channel c
 * (channels are independent), all T tokens, then the channel's state.
 * grid-stride over C; block = MI_EW_THREADS. */
MI_KERNEL void mi_k_conv1d(float *y, const float *x, const float *w, float *state, int64_t T,
                           int64_t C, int64_t K, int32_t silu) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C;
       c += (int64_t)gridDim.x * blockDim.x) {
    for (int64_t t = 0; t < T; t++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; j++) {
        const int64_t r = t + j; /* row of [state; x] */
        acc += w[c * K + j] * (r < K - 1 ? state[r * C + c] : x[(r - (K - 1)) * C + c]);
      }
      y[t * C + c] = silu ? acc / (1.0f + expf(-acc)) : acc;
    }
    /* row r of the new state is row T + r of [state; x]: an old state row
     * lies above r, so ascending r reads it before overwriting it */
    for (int64_t r = 0; r < K - 1; r++) {
      const int64_t src = T + r;
      state[r * C + c] = src < K - 1 ? state[src * C + c] : x[(src - (K - 1)) * C + c];
    }
  }
}

/* The gated delta rule, recurrent form. One block per (value head h, slice
 * of MI_GDR_THREADS state columns): column j of S_h [Dk, Dv] depends only on
 * itself and the shared k, q of the token, so each thread owns one column
 * and walks the tokens in order; k and q are staged in shared memory.
 *   kv = Σ_i S[i,j] k_i; δ = beta (v_j − e^g kv); S[i,j] = e^g S[i,j] + k_i δ;
 *   o_j = Σ_i q_i S[i,j]
 * grid = (Hv, ceil(Dv / MI_GDR_THREADS)), block = MI_GDR_THREADS, Dk <= MI_GDR_MAX_DK. */
MI_KERNEL void mi_k_gdr(float *o, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, float *state, int64_t T, int64_t Hk, int64_t Hv,
                        int64_t Dk, int64_t Dv) {
  __shared__ float sk[MI_GDR_MAX_DK], sq[MI_GDR_MAX_DK];
  const int64_t h = blockIdx.x, kh = h / (Hv / Hk);
  const int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  float *S = state + h * Dk * Dv;
  for (int64_t t = 0; t < T; t++) {
    __syncthreads(); /* the previous token's k, q are no longer read */
    for (int64_t i = threadIdx.x; i < Dk; i += blockDim.x) {
      sk[i] = k[(t * Hk + kh) * Dk + i];
      sq[i] = q[(t * Hk + kh) * Dk + i];
    }
    __syncthreads();
    if (j < Dv) { /* no early return: every thread reaches the barriers */
      const float e = expf(g[t * Hv + h]), b = beta[t * Hv + h];
      float kv = 0.0f;
      for (int64_t i = 0; i < Dk; i++) kv += S[i * Dv + j] * sk[i];
      const float d = b * (v[(t * Hv + h) * Dv + j] - e * kv);
      float acc = 0.0f;
      for (int64_t i = 0; i < Dk; i++) {
        const float s = e * S[i * Dv + j] + sk[i] * d;
        S[i * Dv + j] = s;
        acc += sq[i] * s;
      }
      o[(t * Hv + h) * Dv + j] = acc;
    }
  }
}
