/* Qwen3 dense forward pass, composed from platform kernels.
 *
 *   x = embed(ids)                                   [T, H]
 *   for each layer:
 *     h  = rmsnorm(x) · attn_norm
 *     q  = h·Wqᵀ → per-head rmsnorm(q_norm) → RoPE   [T, nh, hd]
 *     k  = h·Wkᵀ → per-head rmsnorm(k_norm) → RoPE   written into the KV cache
 *     v  = h·Wvᵀ                                     written into the KV cache
 *     x += attention(q, Kcache, Vcache) · Woᵀ
 *     h  = rmsnorm(x) · ffn_norm
 *     x += (silu(h·Wgᵀ) ⊙ h·Wuᵀ) · Wdᵀ
 *   logits = rmsnorm(x) · final_norm · Wlmᵀ            (Wlm = embed when tied)
 *
 * The scratch is sized to the longest chunk run so far (at most `batch`
 * rows; the budget is checked for all of them at load), so a short prompt
 * does not hold a full prefill chunk's worth of memory; decode steps of the
 * same width never allocate.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/model.h"
#include "qwen3_config.h"
#include "qwen3_internal.h"

#define CHECK_K(call) MI_GLUE_K("qwen3", call)

/* ---- weights ----------------------------------------------------------
 * Matrices keep the file's dtype: f32, f16, bf16, or a block dtype (Q8_0,
 * Q4_0, Q4_K, Q6_K: a GGUF file's, served as stored where the platform
 * takes it: core/runtime/gguf_model.h) with whole blocks per row. Whether
 * the platform's kernels take the dtype is theirs to answer (the GGUF
 * loader asked before keeping it). Norm vectors are widened to f32. */
#define Q3_MATRIX_DTYPES (MI_GLUE_FLOATS | MI_GLUE_BLOCKS)

static int bind_weights(qwen3_model *m, char *err, size_t err_len) {
  const qwen3_config *c = &m->cfg;
  const int64_t H = c->hidden, hd = c->head_dim, F = c->ffn;
  const int64_t qdim = c->n_heads * hd, kvdim = c->n_kv_heads * hd;
  /* tensor parallelism: this rank owns heads [r·nh/tp, (r+1)·nh/tp), the
   * matching KV heads and FFN columns; q/k/v/gate/up are split by output
   * rows, o/down by input columns (their partial sums are all-reduced). */
  const int64_t r = m->tp_rank, qd_l = m->nh_l * hd, kvd_l = m->nkv_l * hd, F_l = m->ffn_l;
  const mi_glue *g = &m->glue;
  const int mat = Q3_MATRIX_DTYPES;
  char name[160];
  if (mi_glue_bind_matrix(g, "model.embed_tokens.weight", c->vocab, H, mat, &m->embed, err,
                          err_len) ||
      mi_glue_bind_vector(g, "model.norm.weight", H, &m->final_norm, err, err_len))
    return -1;
  if (c->tied) {
    m->lm_head = m->embed;
    m->lm_head.buf = NULL; /* borrowed: not freed twice */
  } else if (mi_glue_bind_matrix(g, "lm_head.weight", c->vocab, H, mat, &m->lm_head, err,
                                 err_len)) {
    return -1;
  }
  for (int64_t l = 0; l < c->n_layers; l++) {
    q3_layer *L = &m->layers[l];
#define LAYER_NAME(s) (snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, s), name)
    if (mi_glue_bind_vector(g, LAYER_NAME("input_layernorm.weight"), H, &L->attn_norm, err,
                            err_len) ||
        mi_glue_bind_rows(g, LAYER_NAME("self_attn.q_proj.weight"), qdim, H, r * qd_l, qd_l, mat,
                          &L->wq, err, err_len) ||
        mi_glue_bind_rows(g, LAYER_NAME("self_attn.k_proj.weight"), kvdim, H, r * kvd_l, kvd_l, mat,
                          &L->wk, err, err_len) ||
        mi_glue_bind_rows(g, LAYER_NAME("self_attn.v_proj.weight"), kvdim, H, r * kvd_l, kvd_l, mat,
                          &L->wv, err, err_len) ||
        mi_glue_bind_cols(g, LAYER_NAME("self_attn.o_proj.weight"), H, qdim, r * qd_l, qd_l, mat,
                          &L->wo, err, err_len) ||
        mi_glue_bind_vector(g, LAYER_NAME("self_attn.q_norm.weight"), hd, &L->q_norm, err,
                            err_len) ||
        mi_glue_bind_vector(g, LAYER_NAME("self_attn.k_norm.weight"), hd, &L->k_norm, err,
                            err_len) ||
        mi_glue_bind_vector(g, LAYER_NAME("post_attention_layernorm.weight"), H, &L->ffn_norm, err,
                            err_len) ||
        mi_glue_bind_rows(g, LAYER_NAME("mlp.gate_proj.weight"), F, H, r * F_l, F_l, mat, &L->wg,
                          err, err_len) ||
        mi_glue_bind_rows(g, LAYER_NAME("mlp.up_proj.weight"), F, H, r * F_l, F_l, mat, &L->wu, err,
                          err_len) ||
        mi_glue_bind_cols(g, LAYER_NAME("mlp.down_proj.weight"), H, F, r * F_l, F_l, mat, &L->wd,
                          err, err_len))
      return -1;
#undef LAYER_NAME
  }
  return 0;
}

/* ---- scratch ---------------------------------------------------------- */

static int alloc_buf(qwen3_model *m, size_t bytes, mi_buffer **b, void **ptr, char *err,
                     size_t err_len) {
  return mi_glue_alloc(&m->glue, bytes, b, ptr, err, err_len);
}

/* Bytes the scratch takes at B rows with all its logits rows (the sums
 * grow_scratch and grow_logits allocate, in double: no overflow). */
static double scratch_bytes(const qwen3_model *m, int64_t rows) {
  const qwen3_config *c = &m->cfg;
  const double B = (double)rows, f = sizeof(float);
  const double qdim = (double)(m->nh_l * c->head_dim), kvd = (double)(m->nkv_l * c->head_dim);
  return B * f * (3.0 * (double)c->hidden + 2.0 * qdim + 2.0 * (double)m->ffn_l + 2.0 * kvd) +
         (double)Q3_LOGIT_ROWS * (double)c->vocab * f + 3.0 * B * sizeof(int32_t);
}

/* At load: the host's memory budget (option mem_budget, set by the session
 * on host-memory platforms) must hold the scratch of a full chunk, which a
 * long prompt will grow it to: refuse now, not be OOM-killed then. */
static int check_scratch(qwen3_model *m, char *err, size_t err_len) {
  if (m->mem_budget && scratch_bytes(m, m->batch) > (double)m->mem_budget) {
    snprintf(err, err_len,
             "qwen3: the scratch buffers (batch %lld) need %.1f MiB, %.1f MiB available; lower -b",
             (long long)m->batch, scratch_bytes(m, m->batch) / 1048576.0,
             (double)m->mem_budget / 1048576.0);
    return -1;
  }
  return 0;
}

/* The scratch for chunks of up to B rows (the buffers are filled anew by
 * every chunk: nothing is kept across a regrowth); the logits are apart. */
static int alloc_scratch(qwen3_model *m, size_t B, char *err, size_t err_len) {
  const qwen3_config *c = &m->cfg;
  const size_t f = sizeof(float);
  const size_t qdim = (size_t)(m->nh_l * c->head_dim);
  q3_scratch *s = &m->s;
  if (alloc_buf(m, B * c->hidden * f, &s->b_x, (void **)&s->x, err, err_len) ||      /* [B,H] */
      alloc_buf(m, B * c->hidden * f, &s->b_h, (void **)&s->h, err, err_len) ||      /* [B,H] */
      alloc_buf(m, B * qdim * f, &s->b_q, (void **)&s->q, err, err_len) ||           /* [B,nh,hd] */
      alloc_buf(m, B * qdim * f, &s->b_att, (void **)&s->att, err, err_len) ||       /* [B,nh,hd] */
      alloc_buf(m, B * c->hidden * f, &s->b_o, (void **)&s->o, err, err_len) ||      /* [B,H] */
      alloc_buf(m, B * m->ffn_l * f, &s->b_gate, (void **)&s->gate, err, err_len) || /* [B,F/tp] */
      alloc_buf(m, B * m->ffn_l * f, &s->b_up, (void **)&s->up, err, err_len) ||     /* [B,F/tp] */
      alloc_buf(m, B * sizeof(int32_t), &s->b_ids, (void **)&s->ids, err, err_len) || /* [B] */
      alloc_buf(m, B * sizeof(int32_t), &s->b_pos, (void **)&s->pos, err, err_len))   /* [B] */
    return -1;
  const size_t kvd = (size_t)(m->nkv_l * c->head_dim);
  /* also the batched decode step's new keys/values, whatever the cache type */
  if ((alloc_buf(m, B * kvd * f, &s->b_kn, (void **)&s->kn, err, err_len) ||  /* [B,nkv,hd] */
       alloc_buf(m, B * kvd * f, &s->b_vn, (void **)&s->vn, err, err_len)))   /* [B,nkv,hd] */
    return -1;
  m->pos_host = malloc(B * sizeof(int32_t));
  if (!m->pos_host) {
    snprintf(err, err_len, "qwen3: out of memory");
    return -1;
  }
  return 0;
}

static void free_rows(qwen3_model *m) {
  q3_scratch *s = &m->s;
  mi_buffer **bufs[] = {&s->b_x,  &s->b_h,   &s->b_q,   &s->b_att, &s->b_o, &s->b_gate,
                        &s->b_up, &s->b_ids, &s->b_pos, &s->b_kn,  &s->b_vn};
  mi_glue_buffers_free(m->glue.P, m->glue.pc, bufs, sizeof bufs / sizeof bufs[0]);
  free(m->pos_host);
  m->pos_host = NULL;
  m->rows = 0;
}

static void free_logits(qwen3_model *m) {
  mi_buffer **bufs[] = {&m->s.b_logits};
  mi_glue_buffers_free(m->glue.P, m->glue.pc, bufs, 1);
  m->logit_rows = 0;
}

static void free_scratch(qwen3_model *m) {
  free_rows(m);
  free_logits(m);
}

/* Room for a chunk of T rows (T <= batch): the scratch regrown, when it is
 * smaller, to T or twice its rows (at most batch), so that widths creeping
 * up one at a time (a server's batch of decode steps) regrow it only a few
 * times. A failure leaves no scratch; the next call tries again. */
static int grow_scratch(qwen3_model *m, int64_t T, char *err, size_t err_len) {
  if (T <= m->rows) return 0;
  int64_t rows = 2 * m->rows > T ? 2 * m->rows : T;
  if (rows > m->batch) rows = m->batch;
  free_rows(m);
  if (alloc_scratch(m, (size_t)rows, err, err_len) != 0) {
    free_rows(m);
    return -1;
  }
  m->rows = rows;
  return 0;
}

/* Room for n rows of logits in one lm_head call (at most Q3_LOGIT_ROWS):
 * grown apart from the chunk's scratch, since generating needs one row
 * whatever the prompt's length, and only all-position logits (or a batch
 * of decode steps) need more. */
static int grow_logits(qwen3_model *m, int64_t n, char *err, size_t err_len) {
  if (n > Q3_LOGIT_ROWS) n = Q3_LOGIT_ROWS;
  if (n <= m->logit_rows) return 0;
  int64_t rows = 2 * m->logit_rows > n ? 2 * m->logit_rows : n;
  if (rows > Q3_LOGIT_ROWS) rows = Q3_LOGIT_ROWS;
  free_logits(m);
  if (alloc_buf(m, (size_t)rows * (size_t)m->cfg.vocab * sizeof(float), &m->s.b_logits,
                (void **)&m->s.logits, err, err_len) != 0)
    return -1;
  m->logit_rows = rows;
  return 0;
}

/* ---- model lifecycle -------------------------------------------------- */

void qwen3_model_free(qwen3_model *m) {
  if (!m) return;
  if (m->layers) {
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
      q3_layer *L = &m->layers[l];
      q3_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk,       &L->wv, &L->wo, &L->q_norm,
                         &L->k_norm,    &L->ffn_norm, &L->wg, &L->wu, &L->wd};
      mi_glue_weights_free(m->glue.P, m->glue.pc, ws, sizeof ws / sizeof ws[0]);
    }
    free(m->layers);
  }
  mi_glue_weights_free(m->glue.P, m->glue.pc,
                       (mi_glue_weight *[]){&m->embed, &m->final_norm, &m->lm_head}, 3);
  free_scratch(m);
  free(m->model_dir);
  free(m);
}

int qwen3_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                     char *err, size_t err_len) {
  *out = NULL;
  qwen3_model *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, err_len, "qwen3: out of memory");
    return -1;
  }
  m->model_dir = strdup(a->model_dir ? a->model_dir : "(model)");
  m->glue = (mi_glue){"qwen3",    host,           a->platform.iface, a->platform.ctx,
                      a->weights, m->model_dir, &m->weight_bytes};
  char cerr[768];
  if (qwen3_config_read(host, a->config, &m->cfg, cerr, sizeof cerr) != 0) {
    snprintf(err, err_len, "%s/config.json: %s", m->model_dir, cerr);
    goto fail;
  }
  m->tp_rank = a->tp_rank;
  m->tp_size = a->tp_size > 0 ? a->tp_size : 1;
  if (m->tp_size > 1) {
    const mi_platform_iface *P = m->glue.P;
    if (!mi_platform_has(P, allreduce_sum_f32) || !mi_platform_has(P, broadcast)) {
      snprintf(err, err_len, "qwen3: --tp %d needs a platform with collectives (allreduce)",
               m->tp_size);
      goto fail;
    }
    const qwen3_config *c = &m->cfg;
    /* every sharded dimension must split evenly across the ranks */
    const struct {
      const char *field;
      int64_t value;
    } dims[] = {{"num_attention_heads", c->n_heads},
                {"num_key_value_heads", c->n_kv_heads},
                {"intermediate_size", c->ffn}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
      if (dims[i].value % m->tp_size) {
        snprintf(err, err_len,
                 "%s/config.json: %s = %lld is not divisible by the tensor-parallel degree %d",
                 m->model_dir, dims[i].field, (long long)dims[i].value, m->tp_size);
        goto fail;
      }
  }
  m->nh_l = m->cfg.n_heads / m->tp_size;
  m->nkv_l = m->cfg.n_kv_heads / m->tp_size;
  m->ffn_l = m->cfg.ffn / m->tp_size;
  m->kv_dtype = MI_DTYPE_F32;
  const char *kvt = host->opt_get(a->opts, "kv_type");
  if (kvt) {
    if (strcmp(kvt, "f32") == 0) {
      m->kv_dtype = MI_DTYPE_F32;
    } else if (strcmp(kvt, "f16") == 0 || strcmp(kvt, "bf16") == 0) {
      m->kv_dtype = kvt[0] == 'f' ? MI_DTYPE_F16 : MI_DTYPE_BF16;
      if (!mi_platform_has(m->glue.P, convert)) {
        snprintf(err, err_len, "qwen3: kv_type=%s needs a platform with the convert kernel", kvt);
        goto fail;
      }
    } else {
      snprintf(err, err_len, "qwen3: option kv_type=%s must be f32, f16 or bf16", kvt);
      goto fail;
    }
  }
  long batch = 512;
  if (mi_glue_opt_long(&m->glue, a->opts, "batch", 1, 65536, &batch, err, err_len) ||
      mi_glue_opt_bytes(&m->glue, a->opts, "mem_budget", &m->mem_budget, err, err_len))
    goto fail;
  m->batch = batch;
  m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
  if (!m->layers || !m->model_dir) {
    snprintf(err, err_len, "qwen3: out of memory");
    goto fail;
  }
  if (bind_weights(m, err, err_len) != 0 || check_scratch(m, err, err_len) != 0) goto fail;
  *out = m;
  return 0;
fail:
  qwen3_model_free(m);
  return -1;
}

/* ---- sequences (KV cache) --------------------------------------------- */

int qwen3_seq_create(qwen3_model *m, int64_t n_ctx, qwen3_seq **out, char *err, size_t err_len) {
  *out = NULL;
  qwen3_seq *s = mi_glue_seq_alloc("qwen3", n_ctx, m->cfg.max_pos, sizeof *s, err, err_len);
  if (!s) return -1;
  s->n_ctx = n_ctx;
  const size_t kvdim = (size_t)(m->nkv_l * m->cfg.head_dim);
  /* One slab: [n_layers][K|V][n_ctx, kvdim] in kv_dtype. */
  size_t bytes = (size_t)m->cfg.n_layers * 2 * (size_t)n_ctx * kvdim * mi_dtype_size(m->kv_dtype);
  if (alloc_buf(m, bytes, &s->b_kv, (void **)&s->kv, err, err_len) != 0) {
    free(s);
    return -1;
  }
  *out = s;
  return 0;
}

void qwen3_seq_destroy(qwen3_model *m, qwen3_seq *s) {
  if (!s) return;
  if (s->b_kv) m->glue.P->buffer_free(m->glue.pc, s->b_kv);
  free(s);
}

/* ---- forward ----------------------------------------------------------- */

/* Runs T ≤ batch tokens at positions s->len ... s->len+T-1. */
static int forward_chunk(qwen3_model *m, qwen3_seq *seq, const int32_t *ids, int64_t T,
                         char *err, size_t err_len) {
  const mi_platform_iface *P = m->glue.P;
  void *pc = m->glue.pc;
  const qwen3_config *c = &m->cfg;
  q3_scratch *s = &m->s;
  /* this rank's share: all of it without tensor parallelism */
  const int64_t H = c->hidden, hd = c->head_dim, nh = m->nh_l, nkv = m->nkv_l;
  const int64_t qdim = nh * hd, kvdim = nkv * hd, F = m->ffn_l;
  const int64_t pos0 = seq->len;
  const int tp = m->tp_size > 1;
  const int half_kv = m->kv_dtype != MI_DTYPE_F32;
  const float eps = (float)c->eps, theta = (float)c->rope_theta;
  const float att_scale = (float)(1.0 / sqrt((double)hd));

  if (grow_scratch(m, T, err, err_len) != 0) return -1;
  for (int64_t t = 0; t < T; t++) m->pos_host[t] = (int32_t)(pos0 + t);
  CHECK_K(P->memcpy_h2d(pc, NULL, s->ids, ids, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->memcpy_h2d(pc, NULL, s->pos, m->pos_host, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->embed(pc, NULL, s->x, m->embed.ptr, m->embed.dtype, s->ids, T, c->vocab, H));

  for (int64_t l = 0; l < c->n_layers; l++) {
    const q3_layer *L = &m->layers[l];
    const size_t esz = mi_dtype_size(m->kv_dtype);
    char *kc = seq->kv + (size_t)l * 2 * seq->n_ctx * kvdim * esz; /* [n_ctx, nkv, hd] */
    char *vc = kc + (size_t)seq->n_ctx * kvdim * esz;              /* [n_ctx, nkv, hd] */
    /* new keys/values [T, nkv, hd] f32: straight into an f32 cache, or into
     * scratch and then converted into a half-precision one */
    float *k_new = half_kv ? s->kn : (float *)(kc + (size_t)pos0 * kvdim * esz);
    float *v_new = half_kv ? s->vn : (float *)(vc + (size_t)pos0 * kvdim * esz);

    /* attention block */
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->attn_norm.ptr, T, H, eps, 0.0f));
    CHECK_K(P->matmul(pc, NULL, s->q, s->h, L->wq.ptr, L->wq.dtype, T, qdim, H));
    CHECK_K(P->matmul(pc, NULL, k_new, s->h, L->wk.ptr, L->wk.dtype, T, kvdim, H));
    CHECK_K(P->matmul(pc, NULL, v_new, s->h, L->wv.ptr, L->wv.dtype, T, kvdim, H));
    CHECK_K(P->rmsnorm(pc, NULL, s->q, s->q, L->q_norm.ptr, T * nh, hd, eps, 0.0f));
    CHECK_K(P->rmsnorm(pc, NULL, k_new, k_new, L->k_norm.ptr, T * nkv, hd, eps, 0.0f));
    CHECK_K(P->rope(pc, NULL, s->q, s->pos, T, nh, qdim, hd, hd, theta));
    CHECK_K(P->rope(pc, NULL, k_new, s->pos, T, nkv, kvdim, hd, hd, theta));
    if (half_kv) {
      CHECK_K(P->convert(pc, NULL, kc + (size_t)pos0 * kvdim * esz, m->kv_dtype, k_new,
                         MI_DTYPE_F32, T * kvdim));
      CHECK_K(P->convert(pc, NULL, vc + (size_t)pos0 * kvdim * esz, m->kv_dtype, v_new,
                         MI_DTYPE_F32, T * kvdim));
    }
    CHECK_K(P->attention(pc, NULL, s->att, s->q, kc, vc, m->kv_dtype, T, nh, nkv, hd, pos0,
                         att_scale));
    CHECK_K(P->matmul(pc, NULL, s->o, s->att, L->wo.ptr, L->wo.dtype, T, H, qdim));
    if (tp) CHECK_K(P->allreduce_sum_f32(pc, NULL, s->o, T * H)); /* sum the heads' shares */
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));

    /* MLP block */
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->ffn_norm.ptr, T, H, eps, 0.0f));
    CHECK_K(P->matmul(pc, NULL, s->gate, s->h, L->wg.ptr, L->wg.dtype, T, F, H));
    CHECK_K(P->matmul(pc, NULL, s->up, s->h, L->wu.ptr, L->wu.dtype, T, F, H));
    CHECK_K(P->silu_mul(pc, NULL, s->gate, s->gate, s->up, T * F));
    CHECK_K(P->matmul(pc, NULL, s->o, s->gate, L->wd.ptr, L->wd.dtype, T, H, F));
    if (tp) CHECK_K(P->allreduce_sum_f32(pc, NULL, s->o, T * H)); /* sum the FFN shares */
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));
  }
  seq->len += T;
  return 0;
}

/* logits for rows [r0, r0+n) of the last chunk's hidden state → host. */
static int compute_logits(qwen3_model *m, int64_t r0, int64_t n, float *out, char *err,
                          size_t err_len) {
  const int64_t H = m->cfg.hidden;
  if (grow_logits(m, n, err, err_len) != 0) return -1;
  return mi_glue_logits(&m->glue, m->s.x + (size_t)r0 * H, m->s.h + (size_t)r0 * H, n, H,
                        m->cfg.vocab, &m->final_norm, (float)m->cfg.eps, 0.0f, &m->lm_head,
                        m->s.logits, Q3_LOGIT_ROWS, out, NULL, err, err_len);
}

int qwen3_forward(qwen3_model *m, qwen3_seq *seq, const int32_t *ids, int64_t n, float *logits,
                  int all_logits, char *err, size_t err_len) {
  if (mi_glue_check_forward("qwen3", ids, n, seq->len, seq->n_ctx, m->cfg.vocab, err, err_len))
    return -1;
  return mi_glue_forward_chunks(m, seq, ids, n, m->batch, m->cfg.vocab, logits, all_logits,
                                forward_chunk, compute_logits, err, err_len);
}

/* One decode step for n distinct sequences (n ≤ batch): rows share every
 * matmul; RoPE takes each row's own position; each row's key/value goes to
 * its own cache and attends over it alone. */
static int forward_step_rows(qwen3_model *m, qwen3_seq *const *seqs, const int32_t *ids,
                             int64_t T, float *const *logits, char *err, size_t err_len) {
  const mi_platform_iface *P = m->glue.P;
  void *pc = m->glue.pc;
  const qwen3_config *c = &m->cfg;
  q3_scratch *s = &m->s;
  const int64_t H = c->hidden, hd = c->head_dim, nh = m->nh_l, nkv = m->nkv_l;
  const int64_t qdim = nh * hd, kvdim = nkv * hd, F = m->ffn_l;
  const int tp = m->tp_size > 1;
  const float eps = (float)c->eps, theta = (float)c->rope_theta;
  const float att_scale = (float)(1.0 / sqrt((double)hd));
  const size_t esz = mi_dtype_size(m->kv_dtype);

  if (grow_scratch(m, T, err, err_len) != 0) return -1;
  for (int64_t t = 0; t < T; t++) m->pos_host[t] = (int32_t)seqs[t]->len;
  CHECK_K(P->memcpy_h2d(pc, NULL, s->ids, ids, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->memcpy_h2d(pc, NULL, s->pos, m->pos_host, (size_t)T * sizeof(int32_t)));
  CHECK_K(P->embed(pc, NULL, s->x, m->embed.ptr, m->embed.dtype, s->ids, T, c->vocab, H));
  for (int64_t l = 0; l < c->n_layers; l++) {
    const q3_layer *L = &m->layers[l];
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->attn_norm.ptr, T, H, eps, 0.0f));
    CHECK_K(P->matmul(pc, NULL, s->q, s->h, L->wq.ptr, L->wq.dtype, T, qdim, H));
    CHECK_K(P->matmul(pc, NULL, s->kn, s->h, L->wk.ptr, L->wk.dtype, T, kvdim, H));
    CHECK_K(P->matmul(pc, NULL, s->vn, s->h, L->wv.ptr, L->wv.dtype, T, kvdim, H));
    CHECK_K(P->rmsnorm(pc, NULL, s->q, s->q, L->q_norm.ptr, T * nh, hd, eps, 0.0f));
    CHECK_K(P->rmsnorm(pc, NULL, s->kn, s->kn, L->k_norm.ptr, T * nkv, hd, eps, 0.0f));
    CHECK_K(P->rope(pc, NULL, s->q, s->pos, T, nh, qdim, hd, hd, theta));
    CHECK_K(P->rope(pc, NULL, s->kn, s->pos, T, nkv, kvdim, hd, hd, theta));
    for (int64_t t = 0; t < T; t++) {
      qwen3_seq *sq = seqs[t];
      char *kc = sq->kv + (size_t)l * 2 * sq->n_ctx * kvdim * esz;
      char *vc = kc + (size_t)sq->n_ctx * kvdim * esz;
      char *kd = kc + (size_t)sq->len * kvdim * esz, *vd = vc + (size_t)sq->len * kvdim * esz;
      const float *ks = s->kn + (size_t)t * kvdim, *vs = s->vn + (size_t)t * kvdim;
      if (m->kv_dtype == MI_DTYPE_F32) {
        CHECK_K(P->memcpy_d2d(pc, NULL, kd, ks, (size_t)kvdim * sizeof(float)));
        CHECK_K(P->memcpy_d2d(pc, NULL, vd, vs, (size_t)kvdim * sizeof(float)));
      } else {
        CHECK_K(P->convert(pc, NULL, kd, m->kv_dtype, ks, MI_DTYPE_F32, kvdim));
        CHECK_K(P->convert(pc, NULL, vd, m->kv_dtype, vs, MI_DTYPE_F32, kvdim));
      }
      CHECK_K(P->attention(pc, NULL, s->att + (size_t)t * qdim, s->q + (size_t)t * qdim, kc, vc,
                           m->kv_dtype, 1, nh, nkv, hd, sq->len, att_scale));
    }
    CHECK_K(P->matmul(pc, NULL, s->o, s->att, L->wo.ptr, L->wo.dtype, T, H, qdim));
    if (tp) CHECK_K(P->allreduce_sum_f32(pc, NULL, s->o, T * H));
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));
    CHECK_K(P->rmsnorm(pc, NULL, s->h, s->x, L->ffn_norm.ptr, T, H, eps, 0.0f));
    CHECK_K(P->matmul(pc, NULL, s->gate, s->h, L->wg.ptr, L->wg.dtype, T, F, H));
    CHECK_K(P->matmul(pc, NULL, s->up, s->h, L->wu.ptr, L->wu.dtype, T, F, H));
    CHECK_K(P->silu_mul(pc, NULL, s->gate, s->gate, s->up, T * F));
    CHECK_K(P->matmul(pc, NULL, s->o, s->gate, L->wd.ptr, L->wd.dtype, T, H, F));
    if (tp) CHECK_K(P->allreduce_sum_f32(pc, NULL, s->o, T * H));
    CHECK_K(P->add(pc, NULL, s->x, s->x, s->o, T * H));
  }
  /* logits, each row to its own buffer */
  if (grow_logits(m, T, err, err_len) != 0 ||
      mi_glue_logits(&m->glue, s->x, s->h, T, H, c->vocab, &m->final_norm, eps, 0.0f, &m->lm_head,
                     s->logits, Q3_LOGIT_ROWS, NULL, logits, err, err_len))
    return -1;
  /* only now: a failure above leaves every sequence as it was */
  for (int64_t t = 0; t < T; t++) seqs[t]->len++;
  return 0;
}

/* a KV cache takes a token wherever there is room */
static const char *seq_state(const mi_seq *s, int64_t *len, int64_t *n_ctx) {
  *len = s->len, *n_ctx = s->n_ctx;
  return NULL;
}

int qwen3_forward_batch(qwen3_model *m, qwen3_seq *const *seqs, const int32_t *ids, int64_t n,
                        float *const *logits, char *err, size_t err_len) {
  if (mi_glue_check_batch("qwen3", seqs, ids, n, logits, m->cfg.vocab, seq_state, err, err_len))
    return -1;
  /* groups of at most `batch` rows (the scratch's size); a failure in a
   * later group would leave earlier groups advanced, so groups are only
   * used past the batch size */
  for (int64_t done = 0; done < n;) {
    int64_t T = n - done < m->batch ? n - done : m->batch;
    if (forward_step_rows(m, seqs + done, ids + done, T, logits + done, err, err_len) != 0)
      return -1;
    done += T;
  }
  return 0;
}
