/* The kernel set shared by the device code (mi_kernels.cu) and the host side
 * (gpu_platform.c): names looked up in the code object, and the launch
 * constants both sides must agree on. Plain C: included from C and from the
 * device compilers. */
#ifndef MI_GPU_KERNELS_H
#define MI_GPU_KERNELS_H

/* X-macro: every kernel the host looks up by name (extern "C" in the code
 * object). Order = enum order on the host. */
#define MI_GPU_KERNEL_LIST(X)                                                                      \
  X(mi_k_gemv_f32)                                                                                 \
  X(mi_k_gemv_f16)                                                                                 \
  X(mi_k_gemv_bf16)                                                                                \
  X(mi_k_gemv_q8_0)                                                                                \
  X(mi_k_gemv_q4_0)                                                                                \
  X(mi_k_gemv_q4_k)                                                                                \
  X(mi_k_gemv_q6_k)                                                                                \
  X(mi_k_gemv_q5_k)                                                                                \
  X(mi_k_gemv_q4_1)                                                                                \
  X(mi_k_gemv_q5_0)                                                                                \
  X(mi_k_gemv_q5_1)                                                                                \
  X(mi_k_gemv_q2_k)                                                                                \
  X(mi_k_gemv_q3_k)                                                                                \
  X(mi_k_mm_f32)                                                                                   \
  X(mi_k_mm_f16)                                                                                   \
  X(mi_k_mm_bf16)                                                                                  \
  X(mi_k_mm_q8_0)                                                                                  \
  X(mi_k_mm_q4_0)                                                                                  \
  X(mi_k_mm_q4_k)                                                                                  \
  X(mi_k_mm_q6_k)                                                                                  \
  X(mi_k_mm_q5_k)                                                                                  \
  X(mi_k_mm_q4_1)                                                                                  \
  X(mi_k_mm_q5_0)                                                                                  \
  X(mi_k_mm_q5_1)                                                                                  \
  X(mi_k_mm_q2_k)                                                                                  \
  X(mi_k_mm_q3_k)                                                                                  \
  X(mi_k_rmsnorm)                                                                                  \
  X(mi_k_rope)                                                                                     \
  X(mi_k_attn)                                                                                     \
  X(mi_k_attn_combine)                                                                             \
  X(mi_k_silu_mul)                                                                                 \
  X(mi_k_add)                                                                                      \
  X(mi_k_scale)                                                                                    \
  X(mi_k_embed_f32)                                                                                \
  X(mi_k_embed_f16)                                                                                \
  X(mi_k_embed_bf16)                                                                               \
  X(mi_k_embed_q8_0)                                                                               \
  X(mi_k_embed_q4_0)                                                                               \
  X(mi_k_embed_q4_k)                                                                               \
  X(mi_k_embed_q6_k)                                                                               \
  X(mi_k_embed_q5_k)                                                                               \
  X(mi_k_embed_q4_1)                                                                               \
  X(mi_k_embed_q5_0)                                                                               \
  X(mi_k_embed_q5_1)                                                                               \
  X(mi_k_embed_q2_k)                                                                               \
  X(mi_k_embed_q3_k)                                                                               \
  X(mi_k_argmax)                                                                                   \
  X(mi_k_copy2d)                                                                                   \
  X(mi_k_rownorm)                                                                                  \
  X(mi_k_sigmoid_mul)                                                                              \
  X(mi_k_deltanet_gates)                                                                           \
  X(mi_k_conv1d)                                                                                   \
  X(mi_k_gdr)

/* Block sizes fixed by the kernels (not tunables). */
#define MI_EW_THREADS 256   /* elementwise, embed */
#define MI_ROW_THREADS 256  /* rmsnorm, argmax, rope: one block per row/token */
#define MI_ATT_THREADS 256  /* attention */
#define MI_ATT_ACC_MAX 16   /* accumulators per thread: rows*D <= 256*16 */
#define MI_ATT_MAX_D 512    /* largest head_dim */
#define MI_ROPE_MAX_HALF 512 /* rot_dim/2 bound: the cos/sin table lives in shared memory */
#define MI_COMBINE_THREADS 128
#define MI_GDR_THREADS 128  /* gated_delta_rule: state columns per block */
#define MI_GDR_MAX_DK 1024  /* key head dim bound: k and q of a token live in shared memory */

/* Defaults for the per-platform tunables (platform.json overrides them). */
#ifndef MI_MM_BM
#define MI_MM_BM 64
#endif
#ifndef MI_MM_BN
#define MI_MM_BN 64
#endif
#ifndef MI_MM_BK
#define MI_MM_BK 16
#endif
#ifndef MI_MM_TM
#define MI_MM_TM 4
#endif
#ifndef MI_MM_TN
#define MI_MM_TN 4
#endif
#define MI_MM_THREADS ((MI_MM_BM / MI_MM_TM) * (MI_MM_BN / MI_MM_TN))
#ifndef MI_GEMV_MAX_M
#define MI_GEMV_MAX_M 8
#endif
#ifndef MI_GEMV_THREADS
#define MI_GEMV_THREADS 256 /* one output row per warp */
#endif

/* Embed error record in device memory: [0] set flag, [1] token index,
 * [2] the bad id, [3] V (truncated). */
#define MI_EMBED_ERR_WORDS 4

#endif
