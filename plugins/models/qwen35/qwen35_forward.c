/* The Qwen3.5/3.6-style hybrid's forward pass, composed from platform
 * kernels (docs/hybrid.md has the math; tests/hybrid/ref/qwen35_f64.c is the
 * independent float64 version). T tokens at positions p0 … p0+T-1:
 *
 *   x = embed(ids)                                            [T, H]
 *   for each layer l:
 *     h = rmsnorm(x) · (1 + input_layernorm)
 *     full attention:
 *       q | gate = h·Wqᵀ split per head; q = rmsnorm(q)·(1+q_norm); k likewise
 *       NeoX RoPE on the first rot_dim channels of q and k (→ KV cache)
 *       o = (attention(q, K, V) · sigmoid(gate)) · Woᵀ
 *     gated DeltaNet:
 *       u  = silu(causal_conv1d(h·Wqkvᵀ; conv state))          [T, C]
 *       q, k, v = split(u); q = l2norm(q)/√Dk; k = l2norm(k)
 *       beta = sigmoid(h·Wbᵀ); g = −exp(A_log)·softplus(h·Waᵀ + dt_bias)
 *       core = gated_delta_rule(q, k, v, g, beta; recurrent state)  all T at once
 *       o = (norm·rmsnorm(core)·silu(h·Wzᵀ)) · Woutᵀ
 *     x += o
 *     h = rmsnorm(x) · (1 + post_attention_layernorm)
 *     x += (silu(h·Wgᵀ) ⊙ h·Wuᵀ) · Wdᵀ
 *   logits = rmsnorm(x) · (1 + norm) · Wlmᵀ          (Wlm = embed when tied)
 *
 * A prefill chunk runs every layer once over all its tokens: the matmuls
 * are batched, the conv and the delta rule take T tokens in one call (the
 * platform evaluates the rule in chunks). Nothing here allocates. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mi/model.h"
#include "qwen35_config.h"
#include "qwen35_internal.h"

#define CHECK_K(call) MI_GLUE_K("qwen35", call)

/* Runs T ≤ batch tokens at positions seq->len … seq->len+T-1; leaves the
 * last layer's residual stream in s->x [T, H]. */
static int forward_chunk(qwen35_model *m, qwen35_seq *seq, const int32_t *ids, int64_t T, char *err,
                         size_t err_len) {
  const mi_platform_iface *P = m->glue.P;
  void *pc = m->glue.pc;
  const qwen35_config *c = &m->cfg;
  q35_scratch *s = &m->s;
  const int64_t H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
  const int64_t qdim = nh * hd, kvdim = nkv * hd, F = c->ffn;
  const int64_t Kh = c->lin_kh, Vh = c->lin_vh, Dk = c->lin_dk, Dv = c->lin_dv;
  const int64_t KD = Kh * Dk, VD = Vh * Dv, C = m->conv_dim, K = c->conv_k;
  const int64_t pos0 = seq->len;
  const float eps = (float)c->eps, theta = (float)c->rope_theta;
  const float att_scale = (float)(1.0 / sqrt((double)hd));
  const float q_scale = (float)(1.0 / sqrt((double)Dk));

  for (int64_t t = 0; t < T; t++)
    m->pos_host[t] = (int32_t)(pos0 + t);
  CHECK_K(P->memcpy_h2d(pc, NULL, s->ids, ids, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->memcpy_h2d(pc, NULL, s->pos, m->pos_host, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->embed(pc, NULL, s->x, m->embed.ptr, m->embed.dtype, s->ids, T, c->vocab, H));

  for (int64_t l = 0; l < c->n_layers; l++) {
    const q35_layer *L = &m->layers[l];
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->attn_norm.ptr, T, H, eps, 1.0f)); /* [T, H] */

    if (L->full) {
      /* this layer's cache: K [n_ctx, nkv, hd] then V [n_ctx, nkv, hd] */
      float *kc = seq->kv + (size_t)L->kv_slot * 2 * (size_t)seq->n_ctx * kvdim;
      float *vc = kc + (size_t)seq->n_ctx * kvdim;
      float *k_new = kc + (size_t)pos0 * kvdim; /* [T, nkv, hd], straight into the cache */
      float *v_new = vc + (size_t)pos0 * kvdim; /* [T, nkv, hd] */
      CHECK_K(P->matmul(pc, NULL, s->qg, s->h, L->wq.ptr, L->wq.dtype, T, 2 * qdim, H));
      /* per head hd query rows then hd gate rows: [T·nh, 2·hd] → two [T·nh, hd] */
      CHECK_K(P->copy2d(pc, NULL, s->q, hd, s->qg, 2 * hd, T * nh, hd));
      CHECK_K(P->copy2d(pc, NULL, s->gate, hd, s->qg + hd, 2 * hd, T * nh, hd));
      CHECK_K(P->matmul(pc, NULL, k_new, s->h, L->wk.ptr, L->wk.dtype, T, kvdim, H));
      CHECK_K(P->matmul(pc, NULL, v_new, s->h, L->wv.ptr, L->wv.dtype, T, kvdim, H));
      CHECK_K(P->rmsnorm(pc, NULL, s->q, s->q, L->q_norm.ptr, T * nh, hd, eps, 1.0f));
      CHECK_K(P->rmsnorm(pc, NULL, k_new, k_new, L->k_norm.ptr, T * nkv, hd, eps, 1.0f));
      CHECK_K(P->rope(pc, NULL, s->q, s->pos, T, nh, qdim, hd, c->rot_dim, theta));
      CHECK_K(P->rope(pc, NULL, k_new, s->pos, T, nkv, kvdim, hd, c->rot_dim, theta));
      CHECK_K(P->attention(pc, NULL, s->att, s->q, kc, vc, MI_DTYPE_F32, T, nh, nkv, hd, pos0,
                           att_scale)); /* [T, nh, hd] */
      CHECK_K(P->sigmoid_mul(pc, NULL, s->att, s->att, s->gate, T * qdim));
      CHECK_K(P->matmul(pc, NULL, s->o, s->att, L->wo.ptr, L->wo.dtype, T, H, qdim)); /* [T, H] */
    } else {
      float *conv_state = seq->conv + (size_t)L->st_slot * (size_t)((K - 1) * C); /* [K-1, C] */
      float *rec_state = seq->rec + (size_t)L->st_slot * (size_t)(Vh * Dk * Dv);  /* [Vh, Dk, Dv] */
      CHECK_K(P->matmul(pc, NULL, s->u, s->h, L->w_qkv.ptr, L->w_qkv.dtype, T, C, H)); /* [T, C] */
      CHECK_K(P->conv1d_causal(pc, NULL, s->cv, s->u, L->conv_w.ptr, conv_state, T, C, K, 1));
      /* channels q [KD] | k [KD] | v [VD] of each token → three arrays */
      CHECK_K(P->copy2d(pc, NULL, s->lq, KD, s->cv, C, T, KD));          /* [T, Kh, Dk] */
      CHECK_K(P->copy2d(pc, NULL, s->lk, KD, s->cv + KD, C, T, KD));     /* [T, Kh, Dk] */
      CHECK_K(P->copy2d(pc, NULL, s->lv, VD, s->cv + 2 * KD, C, T, VD)); /* [T, Vh, Dv] */
      CHECK_K(P->l2norm(pc, NULL, s->lq, s->lq, T * Kh, Dk, Q35_L2_EPS));
      CHECK_K(P->l2norm(pc, NULL, s->lk, s->lk, T * Kh, Dk, Q35_L2_EPS));
      CHECK_K(P->scale(pc, NULL, s->lq, s->lq, q_scale, T * KD));
      CHECK_K(
          P->matmul(pc, NULL, s->z, s->h, L->w_z.ptr, L->w_z.dtype, T, VD, H)); /* [T, Vh, Dv] */
      CHECK_K(P->matmul(pc, NULL, s->ba, s->h, L->w_b.ptr, L->w_b.dtype, T, Vh, H)); /* [T, Vh] */
      CHECK_K(P->matmul(pc, NULL, s->aa, s->h, L->w_a.ptr, L->w_a.dtype, T, Vh, H)); /* [T, Vh] */
      CHECK_K(P->deltanet_gates(pc, NULL, s->beta, s->g, s->ba, s->aa, L->a_log.ptr, L->dt_bias.ptr,
                                T, Vh)); /* beta, g [T, Vh] */
      CHECK_K(P->gated_delta_rule(pc, NULL, s->core, s->lq, s->lk, s->lv, s->g, s->beta, rec_state,
                                  T, Kh, Vh, Dk, Dv)); /* [T, Vh, Dv] */
      CHECK_K(P->rmsnorm_gated(pc, NULL, s->core, s->core, L->lin_norm.ptr, s->z, T * Vh, Dv, eps));
      CHECK_K(
          P->matmul(pc, NULL, s->o, s->core, L->w_out.ptr, L->w_out.dtype, T, H, VD)); /* [T, H] */
    }
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));

    /* MLP block */
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->ffn_norm.ptr, T, H, eps, 1.0f));
    CHECK_K(P->matmul(pc, NULL, s->mg, s->h, L->wg.ptr, L->wg.dtype, T, F, H)); /* [T, F] */
    CHECK_K(P->matmul(pc, NULL, s->mu, s->h, L->wu.ptr, L->wu.dtype, T, F, H)); /* [T, F] */
    CHECK_K(P->silu_mul(pc, NULL, s->mg, s->mg, s->mu, T * F));
    CHECK_K(P->matmul(pc, NULL, s->o, s->mg, L->wd.ptr, L->wd.dtype, T, H, F)); /* [T, H] */
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));
  }
  seq->len += T;
  return 0;
}

/* Logits of rows [r0, r0+n) of the last chunk's residual stream → host
 * out [n, V]. */
static int compute_logits(qwen35_model *m, int64_t r0, int64_t n, float *out, char *err,
                          size_t err_len) {
  const int64_t H = m->cfg.hidden;
  return mi_glue_logits(&m->glue, m->s.x + (size_t)r0 * H, m->s.h + (size_t)r0 * H, n, H,
                        m->cfg.vocab, &m->final_norm, (float)m->cfg.eps, 1.0f, &m->lm_head,
                        m->s.logits, Q35_LOGIT_ROWS, out, NULL, err, err_len);
}

/* forward_chunk, marking the sequence broken when it fails: the DeltaNet
 * states may hold part of a step and cannot be rolled back. */
static int forward_chunk_or_break(qwen35_model *m, qwen35_seq *seq, const int32_t *ids, int64_t T,
                                  char *err, size_t err_len) {
  if (forward_chunk(m, seq, ids, T, err, err_len) == 0) return 0;
  seq->broken = 1;
  return -1;
}

int qwen35_forward(qwen35_model *m, qwen35_seq *seq, const int32_t *ids, int64_t n, float *logits,
                   int all_logits, char *err, size_t err_len) {
  if (seq->broken) {
    snprintf(err, err_len,
             "qwen35: this sequence's state was lost by an earlier kernel failure; "
             "reset it (seq_truncate to 0)");
    return -1;
  }
  if (mi_glue_check_forward("qwen35", ids, n, seq->len, seq->n_ctx, m->cfg.vocab, err, err_len))
    return -1;
  return mi_glue_forward_chunks(m, seq, ids, n, m->batch, m->cfg.vocab, logits, all_logits,
                                forward_chunk_or_break, compute_logits, err, err_len);
}

/* One decode step for T distinct sequences (T ≤ batch), the rows sharing
 * every matmul: the same layers as forward_chunk with one token per
 * sequence, each row at its own position, with its own KV cache (full
 * layers) and its own conv and recurrent states (DeltaNet layers). */
static int forward_step_rows(qwen35_model *m, qwen35_seq *const *seqs, const int32_t *ids,
                             int64_t T, float *const *logits, char *err, size_t err_len) {
  const mi_platform_iface *P = m->glue.P;
  void *pc = m->glue.pc;
  const qwen35_config *c = &m->cfg;
  q35_scratch *s = &m->s;
  const int64_t H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
  const int64_t qdim = nh * hd, kvdim = nkv * hd, F = c->ffn, V = c->vocab;
  const int64_t Kh = c->lin_kh, Vh = c->lin_vh, Dk = c->lin_dk, Dv = c->lin_dv;
  const int64_t KD = Kh * Dk, VD = Vh * Dv, C = m->conv_dim, K = c->conv_k;
  const float eps = (float)c->eps, theta = (float)c->rope_theta;
  const float att_scale = (float)(1.0 / sqrt((double)hd));
  const float q_scale = (float)(1.0 / sqrt((double)Dk));

  for (int64_t t = 0; t < T; t++)
    m->pos_host[t] = (int32_t)seqs[t]->len;
  CHECK_K(P->memcpy_h2d(pc, NULL, s->ids, ids, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->memcpy_h2d(pc, NULL, s->pos, m->pos_host, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->embed(pc, NULL, s->x, m->embed.ptr, m->embed.dtype, s->ids, T, c->vocab, H));
  for (int64_t l = 0; l < c->n_layers; l++) {
    const q35_layer *L = &m->layers[l];
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->attn_norm.ptr, T, H, eps, 1.0f)); /* [T, H] */
    if (L->full) {
      CHECK_K(P->matmul(pc, NULL, s->qg, s->h, L->wq.ptr, L->wq.dtype, T, 2 * qdim, H));
      CHECK_K(P->copy2d(pc, NULL, s->q, hd, s->qg, 2 * hd, T * nh, hd));         /* [T, nh, hd] */
      CHECK_K(P->copy2d(pc, NULL, s->gate, hd, s->qg + hd, 2 * hd, T * nh, hd)); /* [T, nh, hd] */
      CHECK_K(
          P->matmul(pc, NULL, s->kn, s->h, L->wk.ptr, L->wk.dtype, T, kvdim, H)); /* [T, nkv, hd] */
      CHECK_K(
          P->matmul(pc, NULL, s->vn, s->h, L->wv.ptr, L->wv.dtype, T, kvdim, H)); /* [T, nkv, hd] */
      CHECK_K(P->rmsnorm(pc, NULL, s->q, s->q, L->q_norm.ptr, T * nh, hd, eps, 1.0f));
      CHECK_K(P->rmsnorm(pc, NULL, s->kn, s->kn, L->k_norm.ptr, T * nkv, hd, eps, 1.0f));
      CHECK_K(P->rope(pc, NULL, s->q, s->pos, T, nh, qdim, hd, c->rot_dim, theta));
      CHECK_K(P->rope(pc, NULL, s->kn, s->pos, T, nkv, kvdim, hd, c->rot_dim, theta));
      for (int64_t t = 0; t < T; t++) { /* each row: its key/value into its cache, attend over it */
        const qwen35_seq *sq = seqs[t];
        float *kc = sq->kv + (size_t)L->kv_slot * 2 * (size_t)sq->n_ctx * kvdim;
        float *vc = kc + (size_t)sq->n_ctx * kvdim;
        CHECK_K(P->memcpy_d2d(pc, NULL, kc + (size_t)sq->len * kvdim, s->kn + (size_t)t * kvdim,
                              (size_t)kvdim * sizeof(float)));
        CHECK_K(P->memcpy_d2d(pc, NULL, vc + (size_t)sq->len * kvdim, s->vn + (size_t)t * kvdim,
                              (size_t)kvdim * sizeof(float)));
        CHECK_K(P->attention(pc, NULL, s->att + (size_t)t * qdim, s->q + (size_t)t * qdim, kc, vc,
                             MI_DTYPE_F32, 1, nh, nkv, hd, sq->len, att_scale));
      }
      CHECK_K(P->sigmoid_mul(pc, NULL, s->att, s->att, s->gate, T * qdim));
      CHECK_K(P->matmul(pc, NULL, s->o, s->att, L->wo.ptr, L->wo.dtype, T, H, qdim)); /* [T, H] */
    } else {
      CHECK_K(P->matmul(pc, NULL, s->u, s->h, L->w_qkv.ptr, L->w_qkv.dtype, T, C, H)); /* [T, C] */
      for (int64_t t = 0; t < T; t++) /* each row through its own conv state */
        CHECK_K(P->conv1d_causal(
            pc, NULL, s->cv + (size_t)t * C, s->u + (size_t)t * C, L->conv_w.ptr,
            seqs[t]->conv + (size_t)L->st_slot * (size_t)((K - 1) * C), 1, C, K, 1));
      CHECK_K(P->copy2d(pc, NULL, s->lq, KD, s->cv, C, T, KD));          /* [T, Kh, Dk] */
      CHECK_K(P->copy2d(pc, NULL, s->lk, KD, s->cv + KD, C, T, KD));     /* [T, Kh, Dk] */
      CHECK_K(P->copy2d(pc, NULL, s->lv, VD, s->cv + 2 * KD, C, T, VD)); /* [T, Vh, Dv] */
      CHECK_K(P->l2norm(pc, NULL, s->lq, s->lq, T * Kh, Dk, Q35_L2_EPS));
      CHECK_K(P->l2norm(pc, NULL, s->lk, s->lk, T * Kh, Dk, Q35_L2_EPS));
      CHECK_K(P->scale(pc, NULL, s->lq, s->lq, q_scale, T * KD));
      CHECK_K(
          P->matmul(pc, NULL, s->z, s->h, L->w_z.ptr, L->w_z.dtype, T, VD, H)); /* [T, Vh, Dv] */
      CHECK_K(P->matmul(pc, NULL, s->ba, s->h, L->w_b.ptr, L->w_b.dtype, T, Vh, H)); /* [T, Vh] */
      CHECK_K(P->matmul(pc, NULL, s->aa, s->h, L->w_a.ptr, L->w_a.dtype, T, Vh, H)); /* [T, Vh] */
      CHECK_K(P->deltanet_gates(pc, NULL, s->beta, s->g, s->ba, s->aa, L->a_log.ptr, L->dt_bias.ptr,
                                T, Vh));
      for (int64_t t = 0; t < T; t++) /* each row through its own recurrent state */
        CHECK_K(P->gated_delta_rule(
            pc, NULL, s->core + (size_t)t * VD, s->lq + (size_t)t * KD, s->lk + (size_t)t * KD,
            s->lv + (size_t)t * VD, s->g + (size_t)t * Vh, s->beta + (size_t)t * Vh,
            seqs[t]->rec + (size_t)L->st_slot * (size_t)(Vh * Dk * Dv), 1, Kh, Vh, Dk, Dv));
      CHECK_K(P->rmsnorm_gated(pc, NULL, s->core, s->core, L->lin_norm.ptr, s->z, T * Vh, Dv, eps));
      CHECK_K(
          P->matmul(pc, NULL, s->o, s->core, L->w_out.ptr, L->w_out.dtype, T, H, VD)); /* [T, H] */
    }
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->ffn_norm.ptr, T, H, eps, 1.0f));
    CHECK_K(P->matmul(pc, NULL, s->mg, s->h, L->wg.ptr, L->wg.dtype, T, F, H)); /* [T, F] */
    CHECK_K(P->matmul(pc, NULL, s->mu, s->h, L->wu.ptr, L->wu.dtype, T, F, H)); /* [T, F] */
    CHECK_K(P->silu_mul(pc, NULL, s->mg, s->mg, s->mu, T * F));
    CHECK_K(P->matmul(pc, NULL, s->o, s->mg, L->wd.ptr, L->wd.dtype, T, H, F)); /* [T, H] */
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));
  }
  /* logits, each row to its own buffer */
  if (mi_glue_logits(&m->glue, s->x, s->h, T, H, V, &m->final_norm, eps, 1.0f, &m->lm_head,
                     s->logits, Q35_LOGIT_ROWS, NULL, logits, err, err_len))
    return -1;
  for (int64_t t = 0; t < T; t++)
    seqs[t]->len++;
  return 0;
}

/* A sequence broken by a kernel failure takes no token until it is reset. */
static const char *seq_state(const mi_seq *s, int64_t *len, int64_t *n_ctx) {
  *len = s->len, *n_ctx = s->n_ctx;
  return s->broken ? "lost its state to an earlier kernel failure; reset it (seq_truncate to 0)"
                   : NULL;
}

int qwen35_forward_batch(qwen35_model *m, qwen35_seq *const *seqs, const int32_t *ids, int64_t n,
                         float *const *logits, char *err, size_t err_len) {
  /* everything that can be refused is checked before any state changes */
  if (mi_glue_check_batch("qwen35", seqs, ids, n, logits, m->cfg.vocab, seq_state, err, err_len))
    return -1;
  /* A kernel failure past the checks cannot be undone (the recurrent
   * states are updated in place): no length advances, and the sequences of
   * the failed group are marked broken so that none runs on from a
   * half-updated state. Groups of at most `batch` rows (the scratch). */
  for (int64_t done = 0; done < n;) {
    const int64_t T = n - done < m->batch ? n - done : m->batch;
    if (forward_step_rows(m, seqs + done, ids + done, T, logits + done, err, err_len) != 0) {
      for (int64_t t = 0; t < T; t++)
        seqs[done + t]->broken = 1;
      return -1;
    }
    done += T;
  }
  return 0;
}
