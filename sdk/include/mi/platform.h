/* The platform interface: devices, memory, streams and the kernel set a
 * transformer needs. A platform plugin (kind MI_PLUGIN_PLATFORM) returns a
 * mi_platform_iface from get_iface().
 *
 * Memory model. Kernels take DEVICE ADDRESSES: pointers obtained from
 * buffer_ptr() (plus byte offsets). On the CPU platform those are host
 * addresses; on a GPU platform they are device addresses the host must not
 * dereference. Host data reaches a device only through buffer_wrap_host()
 * (zero-copy where device memory is host memory, e.g. mmapped weights on the
 * CPU; an upload elsewhere) and memcpy_h2d/d2h/d2d.
 *
 * Streams. Every kernel and copy takes a stream; NULL is the device's
 * default stream. Work on one stream runs in order; stream_sync() waits for
 * it. A platform that runs synchronously may ignore streams.
 *
 * Extending. Members are appended only, with an ABI minor bump. A NULL
 * kernel means "not provided": the caller must check (mi_platform_has()).
 * All functions return 0 on success and a negative value on failure, with a
 * message available from last_error(ctx).
 *
 * Layouts (row-major, innermost last):
 *   weights       [N, K]        a linear layer's weight as stored by HF (out, in)
 *   activations   [T, dim]      f32, T tokens
 *   heads         [T, H, D]     f32, H heads of head_dim D
 *   KV cache      [n_ctx, Hkv, D] f32 per layer, row p holds position p
 */
#ifndef MI_PLATFORM_H
#define MI_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

#include "mi/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_buffer mi_buffer; /* opaque: defined by each platform */
typedef struct mi_stream mi_stream; /* opaque: defined by each platform */

typedef struct mi_device_info {
  uint32_t struct_size;
  char name[128];        /* e.g. "x86-64 AVX-512 BF16 (2 threads)" */
  uint64_t total_memory; /* bytes, 0 if unknown */
  int host_memory;       /* 1: device memory is host memory (zero-copy weights) */
  int compute_units;     /* threads, CUs or SMs */
  int simd_width;        /* f32 lanes per vector / wavefront size */
} mi_device_info;

typedef struct mi_platform_iface {
  uint32_t struct_size;

  /* --- identity and devices --- */
  const char *(*variant)(void *ctx); /* the code path chosen here, e.g. "avx512bf16" */
  int (*device_count)(void *ctx);
  int (*device_info)(void *ctx, int device, mi_device_info *out);
  const char *(*last_error)(void *ctx);

  /* --- memory --- */
  int (*buffer_alloc)(void *ctx, size_t size, mi_buffer **out); /* zeroed */
  /* Makes host data (e.g. an mmapped weight) usable by kernels. The host
   * memory must outlive the buffer; it is never written. */
  int (*buffer_wrap_host)(void *ctx, const void *host, size_t size, mi_buffer **out);
  void (*buffer_free)(void *ctx, mi_buffer *buf);
  void *(*buffer_ptr)(void *ctx, mi_buffer *buf); /* device address */
  int (*memcpy_h2d)(void *ctx, mi_stream *s, void *dst_dev, const void *src_host, size_t n);
  int (*memcpy_d2h)(void *ctx, mi_stream *s, void *dst_host, const void *src_dev, size_t n);
  int (*memcpy_d2d)(void *ctx, mi_stream *s, void *dst_dev, const void *src_dev, size_t n);

  /* --- streams --- */
  int (*stream_create)(void *ctx, mi_stream **out);
  void (*stream_destroy)(void *ctx, mi_stream *s);
  int (*stream_sync)(void *ctx, mi_stream *s);

  /* --- kernels (all pointers are device addresses) --- */

  /* y[M,N] = x[M,K] · w[N,K]ᵀ, w in w_dtype (f32, f16, bf16), f32 accumulation.
   * w_dtype q8_0 (GGUF's blocks, mi/tensor.h; K a multiple of 32) where a
   * platform takes it: the CPU platform's quantizes x to 8 bits per block
   * (its README states the bound). A w_dtype a platform does not take must
   * be refused before anything else is looked at, even in an empty call
   * (M = N = 0): that call is how callers ask (core/runtime/gguf_model.h). */
  int (*matmul)(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                mi_dtype w_dtype, int64_t M, int64_t N, int64_t K);

  /* y[r,:] = x[r,:] · rsqrt(mean(x[r,:]²) + eps) · (w + w_offset), rows × dim.
   * w_offset is 0 for Llama/Qwen3 norms and 1 for zero-centred (1+w) norms.
   * y may equal x. */
  int (*rmsnorm)(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                 int64_t rows, int64_t dim, float eps, float w_offset);

  /* Rotary embedding in place, NeoX style (rotate_half): for each token t and
   * head h, on x + t*tok_stride + h*head_stride, pairs (i, i + rot_dim/2) for
   * i < rot_dim/2 rotate by pos[t] · theta^(-2i/rot_dim). Channels past
   * rot_dim are left alone (partial rotary). pos is a device int32 [T]. */
  int (*rope)(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H,
              int64_t tok_stride, int64_t head_stride, int64_t rot_dim, float theta);

  /* Causal softmax attention over a KV cache, GQA.
   * out[T,Hq,D], q[T,Hq,D]; k_cache, v_cache [>= pos0+T, Hkv, D] in kv_dtype.
   * Query t (at position pos0+t) attends to cache rows 0..pos0+t.
   * Query head h reads KV head h / (Hq/Hkv). scores scaled by `scale`. */
  int (*attention)(void *ctx, mi_stream *s, float *out, const float *q, const void *k_cache,
                   const void *v_cache, mi_dtype kv_dtype, int64_t T, int64_t Hq, int64_t Hkv,
                   int64_t D, int64_t pos0, float scale);

  /* y[i] = silu(gate[i]) · up[i], silu(x) = x / (1 + e^-x). y may equal gate. */
  int (*silu_mul)(void *ctx, mi_stream *s, float *y, const float *gate, const float *up,
                  int64_t n);

  /* y[i] = a[i] + b[i]. y may equal a or b. */
  int (*add)(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n);

  /* y[i] = alpha · x[i]. y may equal x. */
  int (*scale)(void *ctx, mi_stream *s, float *y, const float *x, float alpha, int64_t n);

  /* y[t,:] = f32(table[ids[t], :]), table [V, dim] in dtype; ids device int32 [T].
   * ids outside [0, V) are an error. dtype q8_0 as for matmul (rows of
   * whole blocks, dequantized exactly), refused the same way where not taken. */
  int (*embed)(void *ctx, mi_stream *s, float *y, const void *table, mi_dtype dtype,
               const int32_t *ids, int64_t T, int64_t V, int64_t dim);

  /* out[r] = index of the largest x[r,:] (first one on ties), rows × n. */
  int (*argmax)(void *ctx, mi_stream *s, int32_t *out, const float *x, int64_t rows, int64_t n);

  /* --- collectives for tensor parallelism (optional: NULL = single rank) ---
   * The group is set up by init from the plugin's options/environment (MPI
   * ranks on the CPU platform; RCCL/NCCL on GPUs). */
  /* This process's rank and the group size (0 and 1 when alone). */
  int (*comm_info)(void *ctx, int *rank, int *size);
  /* In place on a device buffer: buf[i] = Σ over ranks of buf[i], n floats.
   * Every rank gets bitwise the same result. */
  int (*allreduce_sum_f32)(void *ctx, mi_stream *s, float *buf, int64_t n);
  /* Copies n bytes from rank `root`'s buf into every rank's buf. buf is
   * HOST memory: this carries small control data (the sampled token id), so
   * every rank continues with the same choice. */
  int (*broadcast)(void *ctx, mi_stream *s, void *buf, size_t n, int root);

  /* --- conversions (optional) --- */
  /* dst[i] = src[i] in dst_dtype: f32 -> f16/bf16 rounds to nearest even,
   * f16/bf16 -> f32 is exact. Used to write a half-precision KV cache. */
  int (*convert)(void *ctx, mi_stream *s, void *dst, mi_dtype dst_dtype, const void *src,
                 mi_dtype src_dtype, int64_t n);

  /* --- ABI 1.4: the blocks of gated-DeltaNet hybrids (Qwen3.5/3.6-style);
   * optional: a model that needs them lists them in platform_needs --- */

  /* Strided row copy: y[r*y_stride + i] = x[r*x_stride + i], r < rows, i < n.
   * Splits interleaved projections (per head query | gate; q | k | v).
   * y and x must not overlap. */
  int (*copy2d)(void *ctx, mi_stream *s, float *y, int64_t y_stride, const float *x,
                int64_t x_stride, int64_t rows, int64_t n);

  /* y[r,:] = x[r,:] · rsqrt(Σ_i x[r,i]² + eps), rows × dim (a sum, not a mean).
   * y may equal x. */
  int (*l2norm)(void *ctx, mi_stream *s, float *y, const float *x, int64_t rows, int64_t dim,
                float eps);

  /* y[i] = x[i] · sigmoid(g[i]), sigmoid(g) = 1 / (1 + e^-g). y may equal x. */
  int (*sigmoid_mul)(void *ctx, mi_stream *s, float *y, const float *x, const float *g,
                     int64_t n);

  /* Depthwise causal conv1d over T tokens of C channels, kernel K, no bias,
   * with a carried state. state [K-1, C] holds the K-1 inputs before x
   * (oldest first; zeros for a new sequence). With xx = concat(state, x)
   * [K-1+T, C]: y[t,c] = act(Σ_{j<K} w[c,j] · xx[t+j,c]), act = silu when
   * `silu` is non-zero, identity otherwise; afterwards state = the last K-1
   * rows of xx. w [C, K] f32. y must not alias x or state. */
  int (*conv1d_causal)(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                       float *state, int64_t T, int64_t C, int64_t K, int silu);

  /* Gated-DeltaNet gates, T × H: beta[t,h] = sigmoid(b[t,h]),
   * g[t,h] = -exp(a_log[h]) · softplus(a[t,h] + dt_bias[h]) (a log decay <= 0),
   * softplus(x) = log(1 + e^x). */
  int (*deltanet_gates)(void *ctx, mi_stream *s, float *beta, float *g, const float *b,
                        const float *a, const float *a_log, const float *dt_bias, int64_t T,
                        int64_t H);

  /* The gated delta rule over T tokens with a carried state S [Hv, Dk, Dv].
   * q, k [T, Hk, Dk] (l2-normed; q already scaled); v, o [T, Hv, Dv];
   * g, beta [T, Hv]. Value head h reads key head h / (Hv/Hk) (grouped, the
   * HF order). For each t in order, each h:
   *   S_h ← S_h · exp(g[t,h]);  δ = beta[t,h] · (v[t,h] − S_hᵀ k[t,kh]);
   *   S_h ← S_h + k[t,kh] ⊗ δ;  o[t,h] = S_hᵀ q[t,kh].
   * A platform may evaluate T > 1 in chunks (the same result up to
   * rounding). o must not alias the inputs. */
  int (*gated_delta_rule)(void *ctx, mi_stream *s, float *o, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, float *state,
                          int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv);

  /* Gated RMSNorm, rows × dim: y[r,:] = x[r,:] · rsqrt(mean(x[r,:]²) + eps) · w ·
   * silu(z[r,:]); w [dim] (not zero-centred). y may equal x. */
  int (*rmsnorm_gated)(void *ctx, mi_stream *s, float *y, const float *x, const float *w,
                       const float *z, int64_t rows, int64_t dim, float eps);

  /* --- ABI 1.6: hosting kernel packs (mi/kernel_pack.h); optional --- */

  /* Runs body(arg, i0, i1) over [0, n), cut into contiguous ranges that
   * this platform's host threads run, in stream order; returns when every
   * range is done. Only a platform whose kernels take host addresses
   * (device_info host_memory) provides it: it is how the generated host-C
   * kernels of a pack run here, on the platform's own threads. A platform
   * without it refuses such packs (the pack's bind says why). */
  int (*run_host)(void *ctx, mi_stream *s, void (*body)(void *arg, int64_t i0, int64_t i1),
                  void *arg, int64_t n);
} mi_platform_iface;

/* Every mi_platform_iface member after struct_size, in struct order, as
 * X(name, minor, kernel):
 *   minor  — the ABI 1.minor from which the member is part of the struct: a
 *            plugin declaring abi_minor m has a struct_size that covers every
 *            member of minor <= m (the core checks this at load). The
 *            collectives and convert were appended while the ABI was 1.0 and
 *            are guaranteed from 1.1 on, so a 1.0 plugin may end at argmax; the hybrid
 *            blocks came with 1.4, so a 1.1-1.3 plugin may end at convert;
 *            run_host with 1.6.
 *   kernel — 1 for a compute kernel (verified by an operator contract when
 *            the CKB has one), 0 for devices, memory, streams, collectives.
 * Appending a member: add it to the struct AND here, with the new minor.
 * Readers: the loader's size checks, the verifier's member table and the
 * model/platform compatibility check (names in mi_platform_need). */
#define MI_PLATFORM_MEMBERS(X)                                                                     \
  X(variant, 0, 0)                                                                                 \
  X(device_count, 0, 0)                                                                            \
  X(device_info, 0, 0)                                                                             \
  X(last_error, 0, 0)                                                                              \
  X(buffer_alloc, 0, 0)                                                                            \
  X(buffer_wrap_host, 0, 0)                                                                        \
  X(buffer_free, 0, 0)                                                                             \
  X(buffer_ptr, 0, 0)                                                                              \
  X(memcpy_h2d, 0, 0)                                                                              \
  X(memcpy_d2h, 0, 0)                                                                              \
  X(memcpy_d2d, 0, 0)                                                                              \
  X(stream_create, 0, 0)                                                                           \
  X(stream_destroy, 0, 0)                                                                          \
  X(stream_sync, 0, 0)                                                                             \
  X(matmul, 0, 1)                                                                                  \
  X(rmsnorm, 0, 1)                                                                                 \
  X(rope, 0, 1)                                                                                    \
  X(attention, 0, 1)                                                                               \
  X(silu_mul, 0, 1)                                                                                \
  X(add, 0, 1)                                                                                     \
  X(scale, 0, 1)                                                                                   \
  X(embed, 0, 1)                                                                                   \
  X(argmax, 0, 1)                                                                                  \
  X(comm_info, 1, 0)                                                                               \
  X(allreduce_sum_f32, 1, 0)                                                                       \
  X(broadcast, 1, 0)                                                                               \
  X(convert, 1, 1)                                                                                 \
  X(copy2d, 4, 1)                                                                                  \
  X(l2norm, 4, 1)                                                                                  \
  X(sigmoid_mul, 4, 1)                                                                             \
  X(conv1d_causal, 4, 1)                                                                           \
  X(deltanet_gates, 4, 1)                                                                          \
  X(gated_delta_rule, 4, 1)                                                                        \
  X(rmsnorm_gated, 4, 1)                                                                           \
  X(run_host, 6, 0)

/* Does this platform's interface (of the size it declared) provide member m? */
#define mi_platform_has(iface, m)                                                                  \
  ((iface)->struct_size >= offsetof(mi_platform_iface, m) + sizeof((iface)->m) && (iface)->m != NULL)

#ifdef __cplusplus
}
#endif
#endif
