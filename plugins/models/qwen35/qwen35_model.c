/* qwen35: weights (bound by HF name, shapes checked against config.json),
 * scratch, model lifecycle and sequences. The forward pass is in
 * qwen35_forward.c. Everything a forward needs is allocated here, at load
 * and seq_create time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/model.h"
#include "qwen35_config.h"
#include "qwen35_internal.h"

/* ---- weights ------------------------------------------------------------
 * Matrices (matmul/embed) keep the file's dtype (BF16, F16, F32, or a
 * GGUF block type the platform's kernels take: Q8_0, Q4_0, Q4_K, Q6_K,
 * each matrix's own dtype handed to its kernel), zero-copy where the
 * platform's memory is host memory; small tensors
 * (norms, the conv kernel, the gates' parameters) are widened to f32 once
 * at load: the kernels that read them take f32. */

static int bind_matrix(qwen35_model *m, const char *name, int64_t rows, int64_t cols, q35_weight *w,
                       char *err, size_t err_len) {
  return mi_glue_bind_matrix(&m->glue, name, rows, cols, MI_GLUE_FLOATS | MI_GLUE_BLOCKS, w, err,
                             err_len);
}

static int bind_f32(qwen35_model *m, const char *name, int ndim, const int64_t *dims, q35_weight *w,
                    char *err, size_t err_len) {
  return mi_glue_bind_f32(&m->glue, name, ndim, dims, w, err, err_len);
}

static int bind_vector(qwen35_model *m, const char *name, int64_t dim, q35_weight *w, char *err,
                       size_t err_len) {
  return mi_glue_bind_vector(&m->glue, name, dim, w, err, err_len);
}

static int bind_layer(qwen35_model *m, int64_t l, q35_layer *L, char *err, size_t err_len) {
  const qwen35_config *c = &m->cfg;
  const int64_t H = c->hidden, hd = c->head_dim, F = c->ffn, qdim = c->n_heads * hd,
                kvdim = c->n_kv_heads * hd, VD = c->lin_vh * c->lin_dv, C = m->conv_dim;
  char name[256];
#define NAME(s) (snprintf(name, sizeof name, "%slayers.%lld.%s", m->prefix, (long long)l, s), name)
  if (bind_vector(m, NAME("input_layernorm.weight"), H, &L->attn_norm, err, err_len) ||
      bind_vector(m, NAME("post_attention_layernorm.weight"), H, &L->ffn_norm, err, err_len) ||
      bind_matrix(m, NAME("mlp.gate_proj.weight"), F, H, &L->wg, err, err_len) ||
      bind_matrix(m, NAME("mlp.up_proj.weight"), F, H, &L->wu, err, err_len) ||
      bind_matrix(m, NAME("mlp.down_proj.weight"), H, F, &L->wd, err, err_len))
    return -1;
  if (L->full)
    return bind_matrix(m, NAME("self_attn.q_proj.weight"), 2 * qdim, H, &L->wq, err, err_len) ||
                   bind_matrix(m, NAME("self_attn.k_proj.weight"), kvdim, H, &L->wk, err,
                               err_len) ||
                   bind_matrix(m, NAME("self_attn.v_proj.weight"), kvdim, H, &L->wv, err,
                               err_len) ||
                   bind_matrix(m, NAME("self_attn.o_proj.weight"), H, qdim, &L->wo, err, err_len) ||
                   bind_vector(m, NAME("self_attn.q_norm.weight"), hd, &L->q_norm, err, err_len) ||
                   bind_vector(m, NAME("self_attn.k_norm.weight"), hd, &L->k_norm, err, err_len)
               ? -1
               : 0;
  const int64_t conv_dims[3] = {C, 1, c->conv_k};
  return bind_matrix(m, NAME("linear_attn.in_proj_qkv.weight"), C, H, &L->w_qkv, err, err_len) ||
                 bind_matrix(m, NAME("linear_attn.in_proj_z.weight"), VD, H, &L->w_z, err,
                             err_len) ||
                 bind_matrix(m, NAME("linear_attn.in_proj_b.weight"), c->lin_vh, H, &L->w_b, err,
                             err_len) ||
                 bind_matrix(m, NAME("linear_attn.in_proj_a.weight"), c->lin_vh, H, &L->w_a, err,
                             err_len) ||
                 bind_f32(m, NAME("linear_attn.conv1d.weight"), 3, conv_dims, &L->conv_w, err,
                          err_len) ||
                 bind_vector(m, NAME("linear_attn.dt_bias"), c->lin_vh, &L->dt_bias, err,
                             err_len) ||
                 bind_vector(m, NAME("linear_attn.A_log"), c->lin_vh, &L->a_log, err, err_len) ||
                 bind_vector(m, NAME("linear_attn.norm.weight"), c->lin_dv, &L->lin_norm, err,
                             err_len) ||
                 bind_matrix(m, NAME("linear_attn.out_proj.weight"), H, VD, &L->w_out, err, err_len)
             ? -1
             : 0;
#undef NAME
}

static int bind_weights(qwen35_model *m, char *err, size_t err_len) {
  const qwen35_config *c = &m->cfg;
  char name[256];
  /* the wrapped layout keeps the text model under model.language_model. */
  mi_weight_info wi;
  m->prefix = m->glue.host->weights_find(m->glue.weights,
                                         "model.language_model.embed_tokens.weight", &wi) == 0
                  ? "model.language_model."
                  : "model.";
  snprintf(name, sizeof name, "%sembed_tokens.weight", m->prefix);
  if (bind_matrix(m, name, c->vocab, c->hidden, &m->embed, err, err_len)) return -1;
  snprintf(name, sizeof name, "%snorm.weight", m->prefix);
  if (bind_vector(m, name, c->hidden, &m->final_norm, err, err_len)) return -1;
  if (c->tied) {
    m->lm_head = m->embed;
    m->lm_head.buf = NULL; /* borrowed: not freed twice */
  } else if (bind_matrix(m, "lm_head.weight", c->vocab, c->hidden, &m->lm_head, err, err_len)) {
    return -1;
  }
  int64_t n_full = 0, n_lin = 0;
  for (int64_t l = 0; l < c->n_layers; l++) {
    q35_layer *L = &m->layers[l];
    L->full = c->full[l];
    L->kv_slot = L->full ? n_full++ : -1;
    L->st_slot = L->full ? -1 : n_lin++;
    if (bind_layer(m, l, L, err, err_len) != 0) return -1;
  }
  return 0;
}

/* ---- scratch ------------------------------------------------------------ */

static int alloc_buf(qwen35_model *m, size_t bytes, mi_buffer **b, void *ptr, char *err,
                     size_t err_len) {
  return mi_glue_alloc(&m->glue, bytes, b, ptr, err, err_len);
}

/* Floats per token of the scratch (the same sums as alloc_scratch). */
static double scratch_floats_token(const qwen35_model *m) {
  const qwen35_config *c = &m->cfg;
  const double H = (double)c->hidden, qdim = (double)(c->n_heads * c->head_dim),
               C = (double)m->conv_dim, KD = (double)(c->lin_kh * c->lin_dk),
               VD = (double)(c->lin_vh * c->lin_dv), Vh = (double)c->lin_vh, F = (double)c->ffn;
  const double kvdim = (double)(c->n_kv_heads * c->head_dim);
  return 3 * H + 2 * qdim /* qg */ + 3 * qdim + 2 * kvdim + 2 * C + 2 * KD + 3 * VD + 4 * Vh +
         2 * F + 2 /* ids, pos */;
}

static int alloc_scratch(qwen35_model *m, char *err, size_t err_len) {
  const qwen35_config *c = &m->cfg;
  const size_t B = (size_t)m->batch, f = sizeof(float), H = (size_t)c->hidden,
               qdim = (size_t)(c->n_heads * c->head_dim), C = (size_t)m->conv_dim,
               KD = (size_t)(c->lin_kh * c->lin_dk), VD = (size_t)(c->lin_vh * c->lin_dv),
               Vh = (size_t)c->lin_vh, F = (size_t)c->ffn,
               kvdim = (size_t)(c->n_kv_heads * c->head_dim);
  q35_scratch *s = &m->s;
  /* the host's memory budget (option mem_budget, set by the session on
   * host-memory platforms): refuse before allocating, not be OOM-killed */
  const double need =
      (double)B * 4.0 * scratch_floats_token(m) + (double)Q35_LOGIT_ROWS * (double)c->vocab * 4.0;
  if (m->mem_budget && need > (double)m->mem_budget) {
    snprintf(err, err_len,
             "qwen35: the scratch buffers (batch %lld) need %.1f MiB, %.1f MiB available; lower -b",
             (long long)m->batch, need / 1048576.0, (double)m->mem_budget / 1048576.0);
    return -1;
  }
  if (alloc_buf(m, B * H * f, &s->b_x, &s->x, err, err_len) ||          /* [B, H] */
      alloc_buf(m, B * H * f, &s->b_h, &s->h, err, err_len) ||          /* [B, H] */
      alloc_buf(m, B * H * f, &s->b_o, &s->o, err, err_len) ||          /* [B, H] */
      alloc_buf(m, B * 2 * qdim * f, &s->b_qg, &s->qg, err, err_len) || /* [B, nh, 2, hd] */
      alloc_buf(m, B * qdim * f, &s->b_q, &s->q, err, err_len) ||       /* [B, nh, hd] */
      alloc_buf(m, B * qdim * f, &s->b_gate, &s->gate, err, err_len) || /* [B, nh, hd] */
      alloc_buf(m, B * qdim * f, &s->b_att, &s->att, err, err_len) ||   /* [B, nh, hd] */
      alloc_buf(m, B * C * f, &s->b_u, &s->u, err, err_len) ||          /* [B, C] */
      alloc_buf(m, B * C * f, &s->b_cv, &s->cv, err, err_len) ||        /* [B, C] */
      alloc_buf(m, B * KD * f, &s->b_lq, &s->lq, err, err_len) ||       /* [B, Kh, Dk] */
      alloc_buf(m, B * KD * f, &s->b_lk, &s->lk, err, err_len) ||       /* [B, Kh, Dk] */
      alloc_buf(m, B * VD * f, &s->b_lv, &s->lv, err, err_len) ||       /* [B, Vh, Dv] */
      alloc_buf(m, B * VD * f, &s->b_z, &s->z, err, err_len) ||         /* [B, Vh, Dv] */
      alloc_buf(m, B * VD * f, &s->b_core, &s->core, err, err_len) ||   /* [B, Vh, Dv] */
      alloc_buf(m, B * Vh * f, &s->b_ba, &s->ba, err, err_len) ||       /* [B, Vh] */
      alloc_buf(m, B * Vh * f, &s->b_aa, &s->aa, err, err_len) ||       /* [B, Vh] */
      alloc_buf(m, B * Vh * f, &s->b_beta, &s->beta, err, err_len) ||   /* [B, Vh] */
      alloc_buf(m, B * Vh * f, &s->b_g, &s->g, err, err_len) ||         /* [B, Vh] */
      alloc_buf(m, B * F * f, &s->b_mg, &s->mg, err, err_len) ||        /* [B, F] */
      alloc_buf(m, B * F * f, &s->b_mu, &s->mu, err, err_len) ||        /* [B, F] */
      alloc_buf(m, Q35_LOGIT_ROWS * (size_t)c->vocab * f, &s->b_logits, &s->logits, err,
                err_len) ||                                                  /* [rows, V] */
      alloc_buf(m, B * sizeof(int32_t), &s->b_ids, &s->ids, err, err_len) || /* [B] */
      alloc_buf(m, B * sizeof(int32_t), &s->b_pos, &s->pos, err, err_len) || /* [B] */
      alloc_buf(m, B * kvdim * f, &s->b_kn, &s->kn, err, err_len) ||         /* [B, nkv, hd] */
      alloc_buf(m, B * kvdim * f, &s->b_vn, &s->vn, err, err_len))           /* [B, nkv, hd] */
    return -1;
  m->pos_host = malloc(B * sizeof(int32_t));
  /* zeros for resetting a sequence's DeltaNet states, one layer's largest */
  const size_t conv_b = (size_t)(c->conv_k - 1) * C * f,
               rec_b = (size_t)(Vh * c->lin_dk * c->lin_dv) * f;
  m->zero_bytes = conv_b > rec_b ? conv_b : rec_b;
  if (!m->pos_host || alloc_buf(m, m->zero_bytes, &m->b_zero, &m->zero, err, err_len)) {
    if (!m->pos_host) snprintf(err, err_len, "qwen35: out of memory");
    return -1;
  }
  return 0;
}

static void free_scratch(qwen35_model *m) {
  q35_scratch *s = &m->s;
  mi_buffer **bufs[] = {&s->b_x,   &s->b_h,    &s->b_o,      &s->b_qg,  &s->b_q,    &s->b_gate,
                        &s->b_att, &s->b_u,    &s->b_cv,     &s->b_lq,  &s->b_lk,   &s->b_lv,
                        &s->b_z,   &s->b_core, &s->b_ba,     &s->b_aa,  &s->b_beta, &s->b_g,
                        &s->b_mg,  &s->b_mu,   &s->b_logits, &s->b_ids, &s->b_pos,  &s->b_kn,
                        &s->b_vn,  &m->b_zero};
  mi_glue_buffers_free(m->glue.P, m->glue.pc, bufs, sizeof bufs / sizeof bufs[0]);
  free(m->pos_host);
  m->pos_host = NULL;
}

/* ---- model lifecycle ---------------------------------------------------- */

void qwen35_model_free(qwen35_model *m) {
  if (!m) return;
  if (m->layers) {
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
      q35_layer *L = &m->layers[l];
      q35_weight *ws[] = {&L->attn_norm, &L->ffn_norm, &L->wq,     &L->wk,      &L->wv,
                          &L->wo,        &L->q_norm,   &L->k_norm, &L->w_qkv,   &L->w_z,
                          &L->w_b,       &L->w_a,      &L->conv_w, &L->dt_bias, &L->a_log,
                          &L->lin_norm,  &L->w_out,    &L->wg,     &L->wu,      &L->wd};
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

int qwen35_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen35_model **out,
                      char *err, size_t err_len) {
  *out = NULL;
  qwen35_model *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, err_len, "qwen35: out of memory");
    return -1;
  }
  m->model_dir = strdup(a->model_dir ? a->model_dir : "(model)");
  m->glue = (mi_glue){"qwen35",   host,         a->platform.iface, a->platform.ctx,
                      a->weights, m->model_dir, &m->weight_bytes};
  char cerr[768];
  if (!m->model_dir) {
    snprintf(err, err_len, "qwen35: out of memory");
    goto fail;
  }
  if (qwen35_config_read(host, a->config, &m->cfg, cerr, sizeof cerr) != 0) {
    snprintf(err, err_len, "%s/config.json: %s", m->model_dir, cerr);
    goto fail;
  }
  if (a->tp_size > 1) {
    snprintf(err, err_len, "qwen35: tensor parallelism (--tp %d) is not supported by this plugin",
             a->tp_size);
    goto fail;
  }
  const char *kvt = host->opt_get(a->opts, "kv_type");
  if (kvt && strcmp(kvt, "f32") != 0) {
    snprintf(err, err_len, "qwen35: option kv_type=%.20s is not supported (only f32)", kvt);
    goto fail;
  }
  const qwen35_config *c = &m->cfg;
  m->n_lin = c->n_layers - c->n_full;
  m->conv_dim = 2 * c->lin_kh * c->lin_dk + c->lin_vh * c->lin_dv;
  long batch = 512;
  if (mi_glue_opt_long(&m->glue, a->opts, "batch", 1, 65536, &batch, err, err_len) ||
      mi_glue_opt_bytes(&m->glue, a->opts, "mem_budget", &m->mem_budget, err, err_len))
    goto fail;
  m->batch = batch;
  m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
  if (!m->layers) {
    snprintf(err, err_len, "qwen35: out of memory");
    goto fail;
  }
  if (bind_weights(m, err, err_len) != 0 || alloc_scratch(m, err, err_len) != 0) goto fail;
  *out = m;
  return 0;
fail:
  qwen35_model_free(m);
  return -1;
}

/* ---- sequences ---------------------------------------------------------- */

int qwen35_seq_create(qwen35_model *m, int64_t n_ctx, qwen35_seq **out, char *err, size_t err_len) {
  *out = NULL;
  const qwen35_config *c = &m->cfg;
  qwen35_seq *s = mi_glue_seq_alloc("qwen35", n_ctx, c->max_pos, sizeof *s, err, err_len);
  if (!s) return -1;
  s->n_ctx = n_ctx;
  const size_t kvdim = (size_t)(c->n_kv_heads * c->head_dim);
  const size_t conv_f = (size_t)((c->conv_k - 1) * m->conv_dim);
  const size_t rec_f = (size_t)(c->lin_vh * c->lin_dk * c->lin_dv);
  /* KV of the full layers only: [n_full][K|V][n_ctx, kvdim]; the DeltaNet
   * states in one slab, conv states first: [n_lin][K-1, C] then
   * [n_lin][Vh, Dk, Dv]. buffer_alloc zeroes both: a new sequence's state. */
  const size_t kv_bytes = (size_t)c->n_full * 2 * (size_t)n_ctx * kvdim * sizeof(float);
  const size_t st_bytes = (size_t)m->n_lin * (conv_f + rec_f) * sizeof(float);
  if (alloc_buf(m, kv_bytes, &s->b_kv, &s->kv, err, err_len) != 0 ||
      alloc_buf(m, st_bytes, &s->b_state, &s->conv, err, err_len) != 0) {
    qwen35_seq_destroy(m, s);
    return -1;
  }
  s->rec = s->conv + (size_t)m->n_lin * conv_f;
  *out = s;
  return 0;
}

void qwen35_seq_destroy(qwen35_model *m, qwen35_seq *s) {
  if (!s) return;
  if (s->b_kv) m->glue.P->buffer_free(m->glue.pc, s->b_kv);
  if (s->b_state) m->glue.P->buffer_free(m->glue.pc, s->b_state);
  free(s);
}

int qwen35_seq_reset(qwen35_model *m, qwen35_seq *s, char *err, size_t err_len) {
  const qwen35_config *c = &m->cfg;
  const size_t conv_b = (size_t)((c->conv_k - 1) * m->conv_dim) * sizeof(float);
  const size_t rec_b = (size_t)(c->lin_vh * c->lin_dk * c->lin_dv) * sizeof(float);
  for (int64_t i = 0; i < m->n_lin; i++) {
    char *cs = (char *)s->conv + (size_t)i * conv_b, *rs = (char *)s->rec + (size_t)i * rec_b;
    if ((conv_b && m->glue.P->memcpy_d2d(m->glue.pc, NULL, cs, m->zero, conv_b) != 0) ||
        m->glue.P->memcpy_d2d(m->glue.pc, NULL, rs, m->zero, rec_b) != 0) {
      snprintf(err, err_len, "qwen35: cannot reset the sequence state: %s",
               m->glue.P->last_error(m->glue.pc));
      return -1;
    }
  }
  s->len = 0;
  s->broken = 0;
  return 0;
}

/* ---- sequence state export/import (prefix caching, ABI 1.5) -------------
 * Per-position state: the full-attention layers' KV rows, exported position
 * by position, [n][n_full][K|V][nkv·hd] f32, so one position is
 * state_bytes_token bytes and the reads of adjacent ranges concatenate to
 * the read of their union (a prefix cache stores blocks and writes a
 * hybrid's gathered blocks at once, with the fixed state at their end). The
 * cache is [n_full][K|V][n_ctx, nkv·hd]: a range's rows of one layer and
 * part are one contiguous run, so the device sees 2·n_full copies per staged
 * chunk and the host reorders rows in a staging buffer (per-row device
 * copies would cost a GPU one transfer per row). Fixed state: the DeltaNet
 * slab as it is, conv states then recurrent states (qwen35_seq_create), one
 * copy of q35_state_bytes = state_bytes_fixed. Nothing is converted: a
 * restored sequence computes bit for bit what the original would. */

static int state_copy_failed(qwen35_model *m, const char *fn, const char *what, char *err,
                             size_t err_len) {
  const char *e = m->glue.P->last_error ? m->glue.P->last_error(m->glue.pc) : NULL;
  snprintf(err, err_len, "qwen35: %s: copying the %s failed: %s", fn, what,
           e && e[0] ? e : "unknown error");
  return -1;
}

/* KV rows of positions [pos, pos+n) to host (to_host) or from it (host is
 * then only read), host in the exported layout. 0, or -1 with a line. */
static int kv_copy(qwen35_model *m, qwen35_seq *s, int64_t pos, int64_t n, char *host, int to_host,
                   const char *fn, char *err, size_t err_len) {
  const qwen35_config *c = &m->cfg;
  const size_t row = (size_t)(c->n_kv_heads * c->head_dim) * sizeof(float);
  return mi_glue_kv_copy(&m->glue, (char *)s->kv, 2 * c->n_full, row, s->n_ctx, pos, n, host,
                         to_host, fn, err, err_len);
}

static const char k_broken[] = "this sequence's state was lost by an earlier kernel failure; "
                               "reset it (seq_truncate to 0)";

int qwen35_seq_state_read(qwen35_model *m, qwen35_seq *s, int64_t pos, int64_t n, void *dst,
                          void *fixed_dst, char *err, size_t err_len) {
  if (mi_glue_check_state_read("qwen35", pos, n, s->len, dst, fixed_dst != NULL, "recurrent state",
                               err, err_len))
    return -1;
  if (s->broken) {
    snprintf(err, err_len, "qwen35: seq_state_read: %s", k_broken);
    return -1;
  }
  if (kv_copy(m, s, pos, n, dst, 1, "seq_state_read", err, err_len) != 0) return -1;
  if (!fixed_dst) return 0;
  const mi_platform_iface *P = m->glue.P;
  /* fixed_dst is the caller's as soon as this returns */
  if (P->memcpy_d2h(m->glue.pc, NULL, fixed_dst, s->conv, q35_state_bytes(m)) != 0 ||
      (mi_platform_has(P, stream_sync) && P->stream_sync(m->glue.pc, NULL) != 0))
    return state_copy_failed(m, "seq_state_read", "recurrent state", err, err_len);
  return 0;
}

int qwen35_seq_state_write(qwen35_model *m, qwen35_seq *s, int64_t pos, int64_t n, const void *src,
                           const void *fixed_src, char *err, size_t err_len) {
  if (mi_glue_check_state_write("qwen35", pos, n, s->len, s->n_ctx, src, err, err_len)) return -1;
  /* the KV rows alone would leave the DeltaNet layers at the old length */
  if (!fixed_src) {
    snprintf(err, err_len,
             "qwen35: seq_state_write: fixed_src is NULL: a hybrid needs the recurrent state at "
             "position %lld",
             (long long)(pos + n));
    return -1;
  }
  if (s->broken) {
    snprintf(err, err_len, "qwen35: seq_state_write: %s", k_broken);
    return -1;
  }
  /* KV rows at and past len are not part of the sequence: a copy failing
   * here leaves it unchanged */
  if (kv_copy(m, s, pos, n, (char *)src, 0, "seq_state_write", err, err_len) != 0) return -1;
  /* The recurrent state is replaced in place, last: a failure from here on
   * cannot be rolled back, so (as after a failed forward) the sequence is
   * marked broken rather than left to run on from a half-copied state. */
  const mi_platform_iface *P = m->glue.P;
  if (P->memcpy_h2d(m->glue.pc, NULL, s->conv, fixed_src, q35_state_bytes(m)) != 0 ||
      (mi_platform_has(P, stream_sync) && P->stream_sync(m->glue.pc, NULL) != 0)) {
    s->broken = 1;
    return state_copy_failed(m, "seq_state_write", "recurrent state", err, err_len);
  }
  s->len = pos + n;
  return 0;
}
