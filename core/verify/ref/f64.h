/* The float64 operator references: the one definition of each operator's
 * math that the verifier holds kernels, layers and whole models against
 * (operator units through ref/ops.c, the per-model layer drivers and model
 * references in core/verify/models/). Written for clarity, not speed.
 * Layouts follow sdk/include/mi/platform.h (row-major, innermost last). */
#ifndef MI_CORE_VERIFY_REF_F64_H
#define MI_CORE_VERIFY_REF_F64_H

#include <stdint.h>

/* y[M,N] = x[M,K] · w[N,K]ᵀ */
void vf_f64_matmul(double *y, const double *x, const double *w, int64_t M, int64_t N, int64_t K);

/* y[r,:] = x[r,:] · rsqrt(mean(x[r,:]²) + eps) · (w + w_offset), rows × dim; y may equal x. */
void vf_f64_rmsnorm(double *y, const double *x, const double *w, int64_t rows, int64_t dim,
                    double eps, double w_offset);

/* NeoX rotary in place: on x + t*tok_stride + h*head_stride, pairs
 * (i, i + rot_dim/2) rotate by pos[t] · theta^(-2i/rot_dim). */
void vf_f64_rope(double *x, const double *pos, int64_t T, int64_t H, int64_t tok_stride,
                 int64_t head_stride, int64_t rot_dim, double theta);

/* Causal softmax attention, GQA: out[T,Hq,D] from q[T,Hq,D] over the cache
 * rows 0..pos0+t of k_cache, v_cache [>= pos0+T, Hkv, D]; scores · scale.
 * max_score (may be NULL) keeps the largest scaled score seen.
 * Returns -1 when Hq is not a multiple of Hkv or memory runs out. */
int vf_f64_attention(double *out, const double *q, const double *k_cache, const double *v_cache,
                     int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, double scale,
                     double *max_score);

/* y[i] = silu(gate[i]) · up[i]; y may equal gate. */
void vf_f64_silu_mul(double *y, const double *gate, const double *up, int64_t n);

/* y[i] = a[i] + b[i]; y may equal a or b. */
void vf_f64_add(double *y, const double *a, const double *b, int64_t n);

#endif
