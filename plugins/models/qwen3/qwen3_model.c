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
 * Everything a decode step needs is allocated at load/seq_create time: the
 * hot path never allocates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/model.h"
#include "qwen3_config.h"
#include "qwen3_internal.h"

#define CHECK_K(call)                                                                              \
  do {                                                                                             \
    if ((call) != 0) {                                                                             \
      const char *e_ = P->last_error ? P->last_error(pc) : NULL;                                   \
      snprintf(err, err_len, "qwen3: kernel %s failed: %s", #call, e_ ? e_ : "unknown error");     \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

/* ---- weights ---------------------------------------------------------- */

static int check_matrix(qwen3_model *m, const char *name, int64_t rows, int64_t cols,
                        mi_weight_info *wi, char *err, size_t err_len);

/* Binds rows [row0, row0+n) of a weight [rows, cols]: a contiguous slice,
 * so it stays zero-copy where the platform's memory is host memory. This is
 * how column-parallel (output-sharded) layers are split across TP ranks. */
static int bind_matrix_rows(qwen3_model *m, const char *name, int64_t rows, int64_t cols,
                            int64_t row0, int64_t n, q3_weight *w, char *err, size_t err_len) {
  mi_weight_info wi;
  if (check_matrix(m, name, rows, cols, &wi, err, err_len) != 0) return -1;
  /* a row's bytes: block dtypes (GGUF's Q8_0, Q4_0, Q4_K, Q6_K) have blocks,
   * not elements (check_matrix: whole ones) */
  const size_t rowb = mi_dtype_row_bytes((mi_dtype)wi.dtype, cols);
  const size_t bytes = (size_t)n * rowb;
  const mi_platform_iface *P = m->P;
  if (P->buffer_wrap_host(m->pc, (const char *)wi.data + (size_t)row0 * rowb, bytes,
                          &w->buf) != 0) {
    snprintf(err, err_len, "%s: cannot place tensor \"%s\" (%zu bytes) on the platform: %s",
             wi.file, name, bytes, P->last_error(m->pc));
    return -1;
  }
  w->ptr = P->buffer_ptr(m->pc, w->buf);
  w->dtype = (mi_dtype)wi.dtype;
  m->weight_bytes += bytes;
  return 0;
}

/* Binds columns [col0, col0+n) of a weight [rows, cols] into a buffer of its
 * own ([rows, n], same dtype): the input-sharded (row-parallel) layers of TP. */
static int bind_matrix_cols(qwen3_model *m, const char *name, int64_t rows, int64_t cols,
                            int64_t col0, int64_t n, q3_weight *w, char *err, size_t err_len) {
  /* all columns: nothing to slice, keep it zero-copy */
  if (col0 == 0 && n == cols) return bind_matrix_rows(m, name, rows, cols, 0, rows, w, err, err_len);
  mi_weight_info wi;
  if (check_matrix(m, name, rows, cols, &wi, err, err_len) != 0) return -1;
  const mi_dtype dt = (mi_dtype)wi.dtype;
  const int64_t blk = mi_dtype_block(dt);
  if (col0 % blk || n % blk) { /* a block dtype: a shard must be whole blocks (32 or 256) */
    snprintf(err, err_len,
             "%s: tensor \"%s\" is %s: its columns [%lld, %lld) per rank are not whole blocks "
             "of %lld (choose another tp)",
             wi.file, name, mi_dtype_name(dt), (long long)col0, (long long)(col0 + n), (long long)blk);
    return -1;
  }
  const size_t rowb = mi_dtype_row_bytes(dt, cols), nb = mi_dtype_row_bytes(dt, n);
  const size_t off = mi_dtype_row_bytes(dt, col0);
  const size_t bytes = (size_t)rows * nb;
  char *tmp = malloc(bytes);
  if (!tmp) {
    snprintf(err, err_len, "qwen3: out of memory slicing \"%s\"", name);
    return -1;
  }
  for (int64_t r = 0; r < rows; r++)
    memcpy(tmp + (size_t)r * nb, (const char *)wi.data + (size_t)r * rowb + off, nb);
  const mi_platform_iface *P = m->P;
  int rc = P->buffer_alloc(m->pc, bytes, &w->buf);
  if (rc == 0) {
    w->ptr = P->buffer_ptr(m->pc, w->buf);
    rc = P->memcpy_h2d(m->pc, NULL, w->ptr, tmp, bytes);
  }
  free(tmp);
  if (rc != 0) {
    snprintf(err, err_len, "qwen3: cannot upload a shard of \"%s\": %s", name,
             P->last_error(m->pc));
    return -1;
  }
  w->dtype = (mi_dtype)wi.dtype;
  m->weight_bytes += bytes;
  return 0;
}

/* Binds a whole weight [rows, cols]. */
static int bind_matrix(qwen3_model *m, const char *name, int64_t rows, int64_t cols, q3_weight *w,
                       char *err, size_t err_len) {
  return bind_matrix_rows(m, name, rows, cols, 0, rows, w, err, err_len);
}

/* Finds a weight and checks it is [rows, cols] in a matmul dtype: f32, f16,
 * bf16, or a block dtype (Q8_0, Q4_0, Q4_K, Q6_K: a GGUF file's, served as
 * stored where the platform takes it: core/runtime/gguf_model.h) with whole
 * blocks per row. Whether the platform's kernels take the dtype is theirs
 * to answer (the GGUF loader asked before keeping it). */
static int check_matrix(qwen3_model *m, const char *name, int64_t rows, int64_t cols,
                        mi_weight_info *out, char *err, size_t err_len) {
  mi_weight_info wi;
  if (m->host->weights_find(m->weights, name, &wi) != 0) {
    snprintf(err, err_len, "%s: missing tensor \"%s\" (not in any weight file)", m->model_dir, name);
    return -1;
  }
  if (wi.ndim != 2 || wi.shape[0] != rows || wi.shape[1] != cols) {
    snprintf(err, err_len, "%s: tensor \"%s\" has shape %s, config.json implies [%lld, %lld]",
             wi.file, name, q3_shape_str(&wi), (long long)rows, (long long)cols);
    return -1;
  }
  if (wi.dtype != MI_DTYPE_F32 && wi.dtype != MI_DTYPE_F16 && wi.dtype != MI_DTYPE_BF16 &&
      !(wi.dtype >= 0 && wi.dtype < MI_DTYPE_COUNT && mi_dtype_is_block((mi_dtype)wi.dtype))) {
    snprintf(err, err_len,
             "%s: tensor \"%s\" has dtype %s; expected BF16, F16, F32 or a block type (Q8_0, "
             "Q4_0, Q4_K, Q6_K)",
             wi.file, name, q3_dtype_str(&wi));
    return -1;
  }
  if (mi_dtype_row_bytes((mi_dtype)wi.dtype, cols) == 0) {
    snprintf(err, err_len, "%s: tensor \"%s\" is %s with rows of %lld values: not whole blocks of %lld",
             wi.file, name, q3_dtype_str(&wi), (long long)cols,
             (long long)mi_dtype_block((mi_dtype)wi.dtype));
    return -1;
  }
  *out = wi;
  return 0;
}

/* Binds a norm weight [dim]: widened to f32 once at load (they are tiny). */
static int bind_vector(qwen3_model *m, const char *name, int64_t dim, q3_weight *w, char *err,
                       size_t err_len) {
  mi_weight_info wi;
  if (m->host->weights_find(m->weights, name, &wi) != 0) {
    snprintf(err, err_len, "%s: missing tensor \"%s\" (not in any weight file)", m->model_dir, name);
    return -1;
  }
  if (wi.ndim != 1 || wi.shape[0] != dim) {
    snprintf(err, err_len, "%s: tensor \"%s\" has shape %s, config.json implies [%lld]", wi.file,
             name, q3_shape_str(&wi), (long long)dim);
    return -1;
  }
  float *tmp = malloc((size_t)dim * sizeof(float));
  if (!tmp) {
    snprintf(err, err_len, "qwen3: out of memory");
    return -1;
  }
  for (int64_t i = 0; i < dim; i++) {
    if (wi.dtype == MI_DTYPE_F32) {
      memcpy(&tmp[i], (const char *)wi.data + 4 * i, 4);
    } else if (wi.dtype == MI_DTYPE_BF16 || wi.dtype == MI_DTYPE_F16) {
      uint16_t h;
      memcpy(&h, (const char *)wi.data + 2 * i, 2);
      tmp[i] = wi.dtype == MI_DTYPE_BF16 ? mi_bf16_to_f32(h) : mi_f16_to_f32(h);
    } else {
      free(tmp);
      snprintf(err, err_len, "%s: tensor \"%s\" has dtype %s; expected BF16, F16 or F32",
               wi.file, name, q3_dtype_str(&wi));
      return -1;
    }
  }
  const mi_platform_iface *P = m->P;
  size_t bytes = (size_t)dim * sizeof(float);
  int rc = P->buffer_alloc(m->pc, bytes, &w->buf);
  if (rc == 0) {
    w->ptr = P->buffer_ptr(m->pc, w->buf);
    rc = P->memcpy_h2d(m->pc, NULL, w->ptr, tmp, bytes);
  }
  free(tmp);
  if (rc != 0) {
    snprintf(err, err_len, "qwen3: cannot upload \"%s\": %s", name, P->last_error(m->pc));
    return -1;
  }
  w->dtype = MI_DTYPE_F32;
  m->weight_bytes += wi.nbytes;
  return 0;
}

static void free_weight(qwen3_model *m, q3_weight *w) {
  if (w->buf) m->P->buffer_free(m->pc, w->buf);
  w->buf = NULL;
  w->ptr = NULL;
}

static int bind_weights(qwen3_model *m, char *err, size_t err_len) {
  const qwen3_config *c = &m->cfg;
  const int64_t H = c->hidden, hd = c->head_dim, F = c->ffn;
  const int64_t qdim = c->n_heads * hd, kvdim = c->n_kv_heads * hd;
  /* tensor parallelism: this rank owns heads [r·nh/tp, (r+1)·nh/tp), the
   * matching KV heads and FFN columns; q/k/v/gate/up are split by output
   * rows, o/down by input columns (their partial sums are all-reduced). */
  const int64_t r = m->tp_rank, qd_l = m->nh_l * hd, kvd_l = m->nkv_l * hd, F_l = m->ffn_l;
  char name[160];
  if (bind_matrix(m, "model.embed_tokens.weight", c->vocab, H, &m->embed, err, err_len) ||
      bind_vector(m, "model.norm.weight", H, &m->final_norm, err, err_len))
    return -1;
  if (c->tied) {
    m->lm_head = m->embed;
    m->lm_head.buf = NULL; /* borrowed: not freed twice */
  } else if (bind_matrix(m, "lm_head.weight", c->vocab, H, &m->lm_head, err, err_len)) {
    return -1;
  }
  for (int64_t l = 0; l < c->n_layers; l++) {
    q3_layer *L = &m->layers[l];
#define LAYER_NAME(s) (snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, s), name)
    if (bind_vector(m, LAYER_NAME("input_layernorm.weight"), H, &L->attn_norm, err, err_len) ||
        bind_matrix_rows(m, LAYER_NAME("self_attn.q_proj.weight"), qdim, H, r * qd_l, qd_l, &L->wq,
                         err, err_len) ||
        bind_matrix_rows(m, LAYER_NAME("self_attn.k_proj.weight"), kvdim, H, r * kvd_l, kvd_l,
                         &L->wk, err, err_len) ||
        bind_matrix_rows(m, LAYER_NAME("self_attn.v_proj.weight"), kvdim, H, r * kvd_l, kvd_l,
                         &L->wv, err, err_len) ||
        bind_matrix_cols(m, LAYER_NAME("self_attn.o_proj.weight"), H, qdim, r * qd_l, qd_l, &L->wo,
                         err, err_len) ||
        bind_vector(m, LAYER_NAME("self_attn.q_norm.weight"), hd, &L->q_norm, err, err_len) ||
        bind_vector(m, LAYER_NAME("self_attn.k_norm.weight"), hd, &L->k_norm, err, err_len) ||
        bind_vector(m, LAYER_NAME("post_attention_layernorm.weight"), H, &L->ffn_norm, err,
                    err_len) ||
        bind_matrix_rows(m, LAYER_NAME("mlp.gate_proj.weight"), F, H, r * F_l, F_l, &L->wg, err,
                         err_len) ||
        bind_matrix_rows(m, LAYER_NAME("mlp.up_proj.weight"), F, H, r * F_l, F_l, &L->wu, err,
                         err_len) ||
        bind_matrix_cols(m, LAYER_NAME("mlp.down_proj.weight"), H, F, r * F_l, F_l, &L->wd, err,
                         err_len))
      return -1;
#undef LAYER_NAME
  }
  return 0;
}

/* ---- scratch ---------------------------------------------------------- */

static int alloc_buf(qwen3_model *m, size_t bytes, mi_buffer **b, void **ptr, char *err,
                     size_t err_len) {
  if (m->P->buffer_alloc(m->pc, bytes ? bytes : 4, b) != 0) {
    snprintf(err, err_len, "qwen3: cannot allocate %zu bytes on the platform: %s", bytes,
             m->P->last_error(m->pc));
    return -1;
  }
  *ptr = m->P->buffer_ptr(m->pc, *b);
  return 0;
}

/* Bytes alloc_scratch allocates (the same sums, in double: no overflow). */
static double scratch_bytes(const qwen3_model *m) {
  const qwen3_config *c = &m->cfg;
  const double B = (double)m->batch, f = sizeof(float);
  const double qdim = (double)(m->nh_l * c->head_dim), kvd = (double)(m->nkv_l * c->head_dim);
  double b = B * f * (3.0 * (double)c->hidden + 2.0 * qdim + 2.0 * (double)m->ffn_l) +
             (double)Q3_LOGIT_ROWS * (double)c->vocab * f + 3.0 * B * sizeof(int32_t);
  if (m->kv_dtype != MI_DTYPE_F32) b += 2.0 * B * kvd * f;
  return b;
}

static int alloc_scratch(qwen3_model *m, char *err, size_t err_len) {
  const qwen3_config *c = &m->cfg;
  const size_t B = (size_t)m->batch, f = sizeof(float);
  const size_t qdim = (size_t)(m->nh_l * c->head_dim);
  q3_scratch *s = &m->s;
  /* the host's memory budget (option mem_budget, set by the session on
   * host-memory platforms): refuse before allocating, not be OOM-killed */
  if (m->mem_budget && scratch_bytes(m) > (double)m->mem_budget) {
    snprintf(err, err_len,
             "qwen3: the scratch buffers (batch %lld) need %.1f MiB, %.1f MiB available; lower -b",
             (long long)m->batch, scratch_bytes(m) / 1048576.0, (double)m->mem_budget / 1048576.0);
    return -1;
  }
  if (alloc_buf(m, B * c->hidden * f, &s->b_x, (void **)&s->x, err, err_len) ||       /* [B,H] */
      alloc_buf(m, B * c->hidden * f, &s->b_h, (void **)&s->h, err, err_len) ||       /* [B,H] */
      alloc_buf(m, B * qdim * f, &s->b_q, (void **)&s->q, err, err_len) ||            /* [B,nh,hd] */
      alloc_buf(m, B * qdim * f, &s->b_att, (void **)&s->att, err, err_len) ||        /* [B,nh,hd] */
      alloc_buf(m, B * c->hidden * f, &s->b_o, (void **)&s->o, err, err_len) ||       /* [B,H] */
      alloc_buf(m, B * m->ffn_l * f, &s->b_gate, (void **)&s->gate, err, err_len) ||  /* [B,F/tp] */
      alloc_buf(m, B * m->ffn_l * f, &s->b_up, (void **)&s->up, err, err_len) ||      /* [B,F/tp] */
      alloc_buf(m, Q3_LOGIT_ROWS * c->vocab * f, &s->b_logits, (void **)&s->logits, err,
                err_len) || /* [Q3_LOGIT_ROWS, V] */
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

static void free_scratch(qwen3_model *m) {
  q3_scratch *s = &m->s;
  mi_buffer **bufs[] = {&s->b_x,   &s->b_h,      &s->b_q,   &s->b_att, &s->b_o,  &s->b_gate,
                        &s->b_up,  &s->b_logits, &s->b_ids, &s->b_pos, &s->b_kn, &s->b_vn};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (*bufs[i]) {
      m->P->buffer_free(m->pc, *bufs[i]);
      *bufs[i] = NULL;
    }
  free(m->pos_host);
  m->pos_host = NULL;
}

/* ---- model lifecycle -------------------------------------------------- */

void qwen3_model_free(qwen3_model *m) {
  if (!m) return;
  if (m->layers) {
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
      q3_layer *L = &m->layers[l];
      q3_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk,       &L->wv, &L->wo, &L->q_norm,
                         &L->k_norm,    &L->ffn_norm, &L->wg, &L->wu, &L->wd};
      for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) free_weight(m, ws[i]);
    }
    free(m->layers);
  }
  free_weight(m, &m->embed);
  free_weight(m, &m->final_norm);
  free_weight(m, &m->lm_head);
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
  m->host = host;
  m->P = a->platform.iface;
  m->pc = a->platform.ctx;
  m->weights = a->weights;
  m->model_dir = strdup(a->model_dir ? a->model_dir : "(model)");
  char cerr[768];
  if (qwen3_config_read(host, a->config, &m->cfg, cerr, sizeof cerr) != 0) {
    snprintf(err, err_len, "%s/config.json: %s", m->model_dir, cerr);
    goto fail;
  }
  m->tp_rank = a->tp_rank;
  m->tp_size = a->tp_size > 0 ? a->tp_size : 1;
  if (m->tp_size > 1) {
    const mi_platform_iface *P = m->P;
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
      if (!mi_platform_has(m->P, convert)) {
        snprintf(err, err_len, "qwen3: kv_type=%s needs a platform with the convert kernel", kvt);
        goto fail;
      }
    } else {
      snprintf(err, err_len, "qwen3: option kv_type=%s must be f32, f16 or bf16", kvt);
      goto fail;
    }
  }
  m->batch = 512;
  const char *bs = host->opt_get(a->opts, "batch");
  if (bs) {
    char *end;
    long v = strtol(bs, &end, 10);
    if (*end || v < 1 || v > 65536) {
      snprintf(err, err_len, "qwen3: option batch=%s must be an integer in [1, 65536]", bs);
      goto fail;
    }
    m->batch = v;
  }
  const char *mb = host->opt_get(a->opts, "mem_budget");
  if (mb) {
    char *end;
    unsigned long long v = strtoull(mb, &end, 10);
    if (*end || end == mb) {
      snprintf(err, err_len, "qwen3: option mem_budget=%s must be a byte count", mb);
      goto fail;
    }
    m->mem_budget = v;
  }
  m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
  if (!m->layers || !m->model_dir) {
    snprintf(err, err_len, "qwen3: out of memory");
    goto fail;
  }
  if (bind_weights(m, err, err_len) != 0 || alloc_scratch(m, err, err_len) != 0) goto fail;
  *out = m;
  return 0;
fail:
  qwen3_model_free(m);
  return -1;
}

/* ---- sequences (KV cache) --------------------------------------------- */

int qwen3_seq_create(qwen3_model *m, int64_t n_ctx, qwen3_seq **out, char *err, size_t err_len) {
  *out = NULL;
  if (n_ctx < 1 || n_ctx > m->cfg.max_pos) {
    snprintf(err, err_len, "qwen3: context size %lld must be in [1, %lld] (max_position_embeddings)",
             (long long)n_ctx, (long long)m->cfg.max_pos);
    return -1;
  }
  qwen3_seq *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, err_len, "qwen3: out of memory");
    return -1;
  }
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
  if (s->b_kv) m->P->buffer_free(m->pc, s->b_kv);
  free(s);
}

/* ---- forward ----------------------------------------------------------- */

/* Runs T ≤ batch tokens at positions s->len ... s->len+T-1. */
static int forward_chunk(qwen3_model *m, qwen3_seq *seq, const int32_t *ids, int64_t T,
                         char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
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
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  const qwen3_config *c = &m->cfg;
  q3_scratch *s = &m->s;
  const int64_t H = c->hidden, V = c->vocab;
  for (int64_t i = 0; i < n; i += Q3_LOGIT_ROWS) {
    int64_t rows = n - i < Q3_LOGIT_ROWS ? n - i : Q3_LOGIT_ROWS;
    float *h = s->h + (size_t)(r0 + i) * H; /* [rows, H] */
    CHECK_K(P->rmsnorm(pc, NULL, h, s->x + (size_t)(r0 + i) * H, m->final_norm.ptr, rows, H,
                       (float)c->eps, 0.0f));
    CHECK_K(P->matmul(pc, NULL, s->logits, h, m->lm_head.ptr, m->lm_head.dtype, rows, V, H));
    CHECK_K(P->memcpy_d2h(pc, NULL, out + (size_t)i * V, s->logits, (size_t)(rows * V) * sizeof(float)));
  }
  /* NULL stream_sync: a synchronous platform (see mi/platform.h) */
  if (mi_platform_has(P, stream_sync)) CHECK_K(P->stream_sync(pc, NULL));
  return 0;
}

int qwen3_forward(qwen3_model *m, qwen3_seq *seq, const int32_t *ids, int64_t n, float *logits,
                  int all_logits, char *err, size_t err_len) {
  if (n <= 0) {
    snprintf(err, err_len, "qwen3: forward needs at least one token");
    return -1;
  }
  if (seq->len + n > seq->n_ctx) {
    snprintf(err, err_len,
             "qwen3: %lld tokens do not fit: the context holds %lld and %lld are used",
             (long long)n, (long long)seq->n_ctx, (long long)seq->len);
    return -1;
  }
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->cfg.vocab) {
      snprintf(err, err_len, "qwen3: token id %d is outside the vocabulary [0, %lld)", ids[i],
               (long long)m->cfg.vocab);
      return -1;
    }
  for (int64_t done = 0; done < n;) {
    int64_t T = n - done < m->batch ? n - done : m->batch;
    if (forward_chunk(m, seq, ids + done, T, err, err_len) != 0) return -1;
    if (logits && all_logits) {
      if (compute_logits(m, 0, T, logits + (size_t)done * m->cfg.vocab, err, err_len) != 0)
        return -1;
    } else if (logits && done + T == n) {
      if (compute_logits(m, T - 1, 1, logits, err, err_len) != 0) return -1;
    }
    done += T;
  }
  return 0;
}

/* One decode step for n distinct sequences (n ≤ batch): rows share every
 * matmul; RoPE takes each row's own position; each row's key/value goes to
 * its own cache and attends over it alone. */
static int forward_step_rows(qwen3_model *m, qwen3_seq *const *seqs, const int32_t *ids,
                             int64_t T, float *const *logits, char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  const qwen3_config *c = &m->cfg;
  q3_scratch *s = &m->s;
  const int64_t H = c->hidden, hd = c->head_dim, nh = m->nh_l, nkv = m->nkv_l;
  const int64_t qdim = nh * hd, kvdim = nkv * hd, F = m->ffn_l;
  const int tp = m->tp_size > 1;
  const float eps = (float)c->eps, theta = (float)c->rope_theta;
  const float att_scale = (float)(1.0 / sqrt((double)hd));
  const size_t esz = mi_dtype_size(m->kv_dtype);

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
  /* logits, Q3_LOGIT_ROWS rows per lm_head call, each row to its own buffer */
  const int64_t V = c->vocab;
  for (int64_t i = 0; i < T; i += Q3_LOGIT_ROWS) {
    int64_t rows = T - i < Q3_LOGIT_ROWS ? T - i : Q3_LOGIT_ROWS;
    float *h = s->h + (size_t)i * H;
    CHECK_K(P->rmsnorm(pc, NULL, h, s->x + (size_t)i * H, m->final_norm.ptr, rows, H, eps, 0.0f));
    CHECK_K(P->matmul(pc, NULL, s->logits, h, m->lm_head.ptr, m->lm_head.dtype, rows, V, H));
    for (int64_t r = 0; r < rows; r++)
      CHECK_K(P->memcpy_d2h(pc, NULL, logits[i + r], s->logits + (size_t)r * V,
                            (size_t)V * sizeof(float)));
  }
  if (mi_platform_has(P, stream_sync)) CHECK_K(P->stream_sync(pc, NULL));
  /* only now: a failure above leaves every sequence as it was */
  for (int64_t t = 0; t < T; t++) seqs[t]->len++;
  return 0;
}

int qwen3_forward_batch(qwen3_model *m, qwen3_seq *const *seqs, const int32_t *ids, int64_t n,
                        float *const *logits, char *err, size_t err_len) {
  if (n <= 0) {
    snprintf(err, err_len, "qwen3: forward_batch needs at least one sequence");
    return -1;
  }
  for (int64_t i = 0; i < n; i++) {
    if (!seqs[i] || !logits[i]) {
      snprintf(err, err_len, "qwen3: forward_batch: sequence %lld has no state or no logits",
               (long long)i);
      return -1;
    }
    if (seqs[i]->len + 1 > seqs[i]->n_ctx) {
      snprintf(err, err_len, "qwen3: forward_batch: sequence %lld is full (%lld tokens)",
               (long long)i, (long long)seqs[i]->n_ctx);
      return -1;
    }
    if (ids[i] < 0 || ids[i] >= m->cfg.vocab) {
      snprintf(err, err_len, "qwen3: token id %d is outside the vocabulary [0, %lld)", ids[i],
               (long long)m->cfg.vocab);
      return -1;
    }
    for (int64_t j = 0; j < i; j++)
      if (seqs[j] == seqs[i]) {
        snprintf(err, err_len, "qwen3: forward_batch: sequence %lld appears twice", (long long)i);
        return -1;
      }
  }
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
