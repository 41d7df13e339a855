/* The float64 operator references: the one definition of each operator's
 * math that the verifier holds kernels, layers and whole models against
 * (operator units through ref/ops.c; layers and whole models through the
 * contract interpreter, core/verify/interp.c). Written for clarity, not speed.
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

/* The same over the keys first[t] .. pos0+t of query t (first NULL: from
 * 0, which is vf_f64_attention); 0 <= first[t] <= pos0+t is the caller's. */
int vf_f64_attention_from(double *out, const double *q, const double *k_cache, const double *v_cache,
                          int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, double scale,
                          const int64_t *first, double *max_score);
/* A scaled score's map before the softmax (a masked-attention form's
 * "score"): user is the caller's. */
typedef double (*vf_score_map)(double score, void *user);
/* vf_f64_attention_from with each scaled score mapped by map (NULL: as it
 * is) before the max and the softmax; max_score is of the mapped scores. */
int vf_f64_attention_mapped(double *out, const double *q, const double *k_cache, const double *v_cache,
                            int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, double scale,
                            const int64_t *first, vf_score_map map, void *map_user, double *max_score);

/* y[i] = silu(gate[i]) · up[i]; y may equal gate. */
void vf_f64_silu_mul(double *y, const double *gate, const double *up, int64_t n);

/* y[i] = a[i] + b[i]; y may equal a or b. */
void vf_f64_add(double *y, const double *a, const double *b, int64_t n);

/* ---- the gated-DeltaNet hybrid's operators (docs/hybrid.md) ---- */

/* y[i] = x[i] · sigmoid(gate[i]) (the gated attention output); y may equal x. */
void vf_f64_sigmoid_mul(double *y, const double *x, const double *gate, int64_t n);

/* y[i] = silu(x[i]); y may equal x. */
void vf_f64_silu(double *y, const double *x, int64_t n);

/* y[r,:] = x[r,:] · rsqrt(sum(x[r,:]²) + eps), rows × dim; y may equal x
 * (HF's l2norm: eps inside the root, on the sum, not the mean). */
void vf_f64_l2norm(double *y, const double *x, int64_t rows, int64_t dim, double eps);

/* Gated RMSNorm: y[r,:] = w · x[r,:] · rsqrt(mean(x[r,:]²) + eps) · silu(z[r,:]),
 * rows × dim, w[dim] used as is (not 1 + w); y may equal x. */
void vf_f64_rmsnorm_gated(double *y, const double *x, const double *w, const double *z, int64_t rows,
                          int64_t dim, double eps);

/* Depthwise causal conv1d with carried state, no bias, no activation:
 * y[t,c] = Σ_{j<K} w[c,j] · u[t-K+1+j, c] where u is the K-1 rows of
 * state [K-1, C] (oldest first) followed by x[T, C]. On return state holds
 * the last K-1 rows of u (a zero state is a fresh sequence). w is [C, K]
 * (HF's conv1d.weight [C, 1, K]). y must not alias x. Returns -1 on OOM. */
int vf_f64_conv1d_causal(double *y, const double *x, const double *w, double *state, int64_t T,
                         int64_t C, int64_t K);

/* The gated DeltaNet gates per token and value head: beta = sigmoid(b),
 * g = -exp(A_log) · softplus(a + dt_bias) (a log decay <= 0); a, b [T, H],
 * A_log, dt_bias [H]; outputs g, beta [T, H]. softplus(x) = x above 20. */
void vf_f64_deltanet_gates(double *g, double *beta, const double *a, const double *b,
                           const double *A_log, const double *dt_bias, int64_t T, int64_t H);

/* The gated delta rule, recurrent form, one token at a time. Per token t
 * and value head h (key head kh = h / (Hv / Hk): key heads repeated to
 * cover value heads, HF's grouped order), with S = state[h] [Dk, Dv]:
 *   S ← S · exp(g[t,h]);  kv = Sᵀ k;  δ = (v − kv) · beta[t,h];
 *   S ← S + k ⊗ δ;        out[t,h] = Sᵀ q
 * q, k [T, Hk, Dk] (already L2-normalised, q already scaled), v [T, Hv, Dv],
 * g, beta [T, Hv], state [Hv, Dk, Dv] carried in and out, out [T, Hv, Dv].
 * Returns -1 when Hv is not a multiple of Hk. */
int vf_f64_gated_delta_rule(double *out, double *state, const double *q, const double *k,
                            const double *v, const double *g, const double *beta, int64_t T,
                            int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv);

/* The same rule in chunked form (what a prefill kernel computes): per chunk
 * of up to `chunk` tokens with cumulative log decays G_i, the updates δ
 * solve the unit lower-triangular system
 *   δ_i + beta_i Σ_{j<i} e^{G_i−G_j} (k_i·k_j) δ_j = beta_i (v_i − e^{G_i} S0ᵀ k_i),
 * then out_i = e^{G_i} S0ᵀ q_i + Σ_{j<=i} e^{G_i−G_j} (q_i·k_j) δ_j and
 * S = e^{G_C} S0 + Σ_j e^{G_C−G_j} k_j ⊗ δ_j. Same arguments and result as
 * vf_f64_gated_delta_rule up to rounding. Returns -1 on bad heads or OOM. */
int vf_f64_gated_delta_rule_chunked(double *out, double *state, const double *q, const double *k,
                                    const double *v, const double *g, const double *beta, int64_t T,
                                    int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, int64_t chunk);

#endif
