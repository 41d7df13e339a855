/* my_model: a small, complete MetaInfer model plugin to copy and change.
 *
 * Architecture "MyModelForCausalLM": a dense pre-norm decoder in the Qwen3
 * style (Llama plus a per-head RMSNorm on q and k). Per token t:
 *
 *   x = embed[id]                                        [H]
 *   for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     q = rope(rmsnorm_head(h Wq^T) * q_norm)            [nh, hd]
 *     k = rope(rmsnorm_head(h Wk^T) * k_norm)            [nkv, hd] -> KV cache row t
 *     v = h Wv^T                                         [nkv, hd] -> KV cache row t
 *     x = x + attention(q, K[0..t], V[0..t]) Wo^T        causal, GQA, scale 1/sqrt(hd)
 *     h = rmsnorm(x) * ffn_norm
 *     x = x + (silu(h Wg^T) * (h Wu^T)) Wd^T             SwiGLU
 *   logits = (rmsnorm(x) * final_norm) Wlm^T             Wlm = embed when tied
 *
 * config.json fields read: hidden_size (H), num_hidden_layers (L),
 * num_attention_heads (nh), num_key_value_heads (nkv), head_dim (hd),
 * intermediate_size (F), vocab_size (V), max_position_embeddings,
 * rms_norm_eps, rope_theta, tie_word_embeddings. Weight names are Hugging
 * Face's (model.layers.N.self_attn.q_proj.weight, ...): see load().
 *
 * The model owns no math: every step is a kernel of the platform it is
 * given (mi_platform_iface), so it runs unchanged on the CPU or a GPU.
 * Everything the forward pass needs is allocated by load() and
 * seq_create(): the decode loop never allocates.
 *
 * To make your own: rename "mymodel" / "MyModelForCausalLM", change the
 * config reading, the weights and forward_chunk(). Build: see README.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mi/model.h>
#include <mi/plugin.h>

#define BATCH 64 /* tokens per forward chunk: bounds the scratch buffers */

/* ---- config ---- */

typedef struct config {
  int64_t H, L, nh, nkv, hd, F, V, max_pos;
  double eps, theta;
  int tied;
} config;

static int read_config(const mi_host_api *host, const mi_json *j, config *c, char *err,
                       size_t err_len) {
  const char *names[] = {"hidden_size",      "num_hidden_layers", "num_attention_heads",
                         "num_key_value_heads", "head_dim",       "intermediate_size",
                         "vocab_size",       "max_position_embeddings"};
  int64_t *dst[] = {&c->H, &c->L, &c->nh, &c->nkv, &c->hd, &c->F, &c->V, &c->max_pos};
  for (int i = 0; i < 8; i++)
    if (host->json_int(host->json_get(j, names[i]), dst[i]) != 0 || *dst[i] < 1 ||
        *dst[i] > (1 << 24)) {
      snprintf(err, err_len, "mymodel: config.json \"%s\" must be an integer in [1, 2^24]",
               names[i]);
      return -1;
    }
  if (c->nh % c->nkv || c->hd % 2) {
    snprintf(err, err_len, "mymodel: num_attention_heads %lld must be a multiple of "
             "num_key_value_heads %lld and head_dim %lld even", (long long)c->nh,
             (long long)c->nkv, (long long)c->hd);
    return -1;
  }
  c->eps = 1e-6, c->theta = 1e6, c->tied = 0;
  host->json_real(host->json_get(j, "rms_norm_eps"), &c->eps);   /* absent: keep default */
  host->json_real(host->json_get(j, "rope_theta"), &c->theta);
  host->json_bool(host->json_get(j, "tie_word_embeddings"), &c->tied);
  return 0;
}

/* ---- model and sequence state ---- */

typedef struct weight {
  mi_buffer *buf; /* NULL when borrowed (tied lm_head) */
  void *ptr;      /* device address */
  mi_dtype dtype;
} weight;

typedef struct layer {
  weight attn_norm, ffn_norm; /* [H] f32 */
  weight q_norm, k_norm;      /* [hd] f32 */
  weight wq;                  /* [nh*hd, H] */
  weight wk, wv;              /* [nkv*hd, H] */
  weight wo;                  /* [H, nh*hd] */
  weight wg, wu;              /* [F, H] */
  weight wd;                  /* [H, F] */
} layer;

struct mi_model {
  const mi_host_api *host; /* lent by the core: JSON, weights, logging */
  const mi_platform_iface *P;
  void *pc; /* the platform's context */
  const mi_weights *w;
  config c;
  weight embed;      /* [V, H] */
  weight final_norm; /* [H] f32 */
  weight lm_head;    /* [V, H] */
  layer *layers;     /* [L] */
  uint64_t weight_bytes;
  /* scratch (device), B = BATCH */
  mi_buffer *bufs[10];
  float *x;      /* [B, H] residual stream */
  float *h;      /* [B, H] normed block input */
  float *q;      /* [B, nh, hd] */
  float *att;    /* [B, nh, hd] attention output */
  float *o;      /* [B, H] block output */
  float *gate;   /* [B, F] */
  float *up;     /* [B, F] */
  float *logits; /* [V] one row at a time */
  int32_t *ids;  /* [B] token ids */
  int32_t *pos;  /* [B] positions */
  int32_t pos_host[BATCH];
};

struct mi_seq {
  int64_t n_ctx, len;
  mi_buffer *buf;
  float *kv; /* [L][2][n_ctx, nkv*hd]: K then V of each layer, row p = position p */
};

/* ---- load ---- */

/* A matrix [rows, cols] in bf16/f16/f32, used in place (zero-copy on
 * host-memory platforms, uploaded on a GPU). */
static int bind_matrix(mi_model *m, const char *name, int64_t rows, int64_t cols, weight *out,
                       char *err, size_t err_len) {
  mi_weight_info wi;
  if (m->host->weights_find(m->w, name, &wi) != 0) {
    snprintf(err, err_len, "mymodel: missing tensor \"%s\"", name);
    return -1;
  }
  if (wi.ndim != 2 || wi.shape[0] != rows || wi.shape[1] != cols ||
      (wi.dtype != MI_DTYPE_BF16 && wi.dtype != MI_DTYPE_F16 && wi.dtype != MI_DTYPE_F32)) {
    snprintf(err, err_len, "%s: tensor \"%s\" must be [%lld, %lld] in BF16, F16 or F32", wi.file,
             name, (long long)rows, (long long)cols);
    return -1;
  }
  if (m->P->buffer_wrap_host(m->pc, wi.data, wi.nbytes, &out->buf) != 0) {
    snprintf(err, err_len, "mymodel: cannot place \"%s\": %s", name, m->P->last_error(m->pc));
    return -1;
  }
  out->ptr = m->P->buffer_ptr(m->pc, out->buf);
  out->dtype = (mi_dtype)wi.dtype;
  m->weight_bytes += wi.nbytes;
  return 0;
}

/* A norm weight [n], widened to f32 once (the rmsnorm kernel takes f32). */
static int bind_vector(mi_model *m, const char *name, int64_t n, weight *out, char *err,
                       size_t err_len) {
  mi_weight_info wi;
  if (m->host->weights_find(m->w, name, &wi) != 0 || wi.ndim != 1 || wi.shape[0] != n ||
      (wi.dtype != MI_DTYPE_BF16 && wi.dtype != MI_DTYPE_F16 && wi.dtype != MI_DTYPE_F32)) {
    snprintf(err, err_len, "mymodel: tensor \"%s\" must exist as [%lld] in BF16, F16 or F32",
             name, (long long)n);
    return -1;
  }
  float *tmp = malloc((size_t)n * sizeof(float)); /* [n] */
  if (!tmp) return snprintf(err, err_len, "mymodel: out of memory"), -1;
  for (int64_t i = 0; i < n; i++) {
    uint16_t u;
    if (wi.dtype == MI_DTYPE_F32) {
      memcpy(&tmp[i], (const char *)wi.data + 4 * i, 4);
      continue;
    }
    memcpy(&u, (const char *)wi.data + 2 * i, 2);
    tmp[i] = wi.dtype == MI_DTYPE_BF16 ? mi_bf16_to_f32(u) : mi_f16_to_f32(u);
  }
  int rc = m->P->buffer_alloc(m->pc, (size_t)n * sizeof(float), &out->buf);
  if (rc == 0) {
    out->ptr = m->P->buffer_ptr(m->pc, out->buf);
    rc = m->P->memcpy_h2d(m->pc, NULL, out->ptr, tmp, (size_t)n * sizeof(float));
  }
  free(tmp);
  if (rc != 0) {
    snprintf(err, err_len, "mymodel: cannot upload \"%s\": %s", name, m->P->last_error(m->pc));
    return -1;
  }
  out->dtype = MI_DTYPE_F32;
  m->weight_bytes += wi.nbytes;
  return 0;
}

static void free_weight(mi_model *m, weight *w) {
  if (w->buf) m->P->buffer_free(m->pc, w->buf);
  w->buf = NULL;
}

static void my_unload(mi_model *m) {
  if (!m) return;
  for (int64_t l = 0; m->layers && l < m->c.L; l++) {
    layer *y = &m->layers[l];
    weight *ws[] = {&y->attn_norm, &y->ffn_norm, &y->q_norm, &y->k_norm, &y->wq, &y->wk,
                    &y->wv,        &y->wo,       &y->wg,     &y->wu,     &y->wd};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) free_weight(m, ws[i]);
  }
  free(m->layers);
  free_weight(m, &m->embed);
  free_weight(m, &m->final_norm);
  free_weight(m, &m->lm_head);
  for (int i = 0; i < 10; i++)
    if (m->bufs[i]) m->P->buffer_free(m->pc, m->bufs[i]);
  free(m);
}

static int my_load(void *ctx, const mi_model_load_args *a, mi_model **out, char *err,
                   size_t err_len) {
  *out = NULL;
  if (a->tp_size > 1) {
    snprintf(err, err_len, "mymodel: tensor parallelism is not implemented (--tp %d)", a->tp_size);
    return -1;
  }
  mi_model *m = calloc(1, sizeof *m);
  if (!m) return snprintf(err, err_len, "mymodel: out of memory"), -1;
  m->host = ctx, m->P = a->platform.iface, m->pc = a->platform.ctx, m->w = a->weights;
  if (read_config(m->host, a->config, &m->c, err, err_len) != 0) goto fail;
  const config *c = &m->c;
  const int64_t H = c->H, hd = c->hd, qd = c->nh * hd, kvd = c->nkv * hd;
  m->layers = calloc((size_t)c->L, sizeof *m->layers);
  if (!m->layers) goto oom;

  char n[160];
#define NAME(s) (snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, s), n)
  if (bind_matrix(m, "model.embed_tokens.weight", c->V, H, &m->embed, err, err_len) ||
      bind_vector(m, "model.norm.weight", H, &m->final_norm, err, err_len))
    goto fail;
  if (c->tied)
    m->lm_head = m->embed, m->lm_head.buf = NULL; /* borrowed, freed once */
  else if (bind_matrix(m, "lm_head.weight", c->V, H, &m->lm_head, err, err_len))
    goto fail;
  for (int64_t l = 0; l < c->L; l++) {
    layer *y = &m->layers[l];
    if (bind_vector(m, NAME("input_layernorm.weight"), H, &y->attn_norm, err, err_len) ||
        bind_vector(m, NAME("post_attention_layernorm.weight"), H, &y->ffn_norm, err, err_len) ||
        bind_vector(m, NAME("self_attn.q_norm.weight"), hd, &y->q_norm, err, err_len) ||
        bind_vector(m, NAME("self_attn.k_norm.weight"), hd, &y->k_norm, err, err_len) ||
        bind_matrix(m, NAME("self_attn.q_proj.weight"), qd, H, &y->wq, err, err_len) ||
        bind_matrix(m, NAME("self_attn.k_proj.weight"), kvd, H, &y->wk, err, err_len) ||
        bind_matrix(m, NAME("self_attn.v_proj.weight"), kvd, H, &y->wv, err, err_len) ||
        bind_matrix(m, NAME("self_attn.o_proj.weight"), H, qd, &y->wo, err, err_len) ||
        bind_matrix(m, NAME("mlp.gate_proj.weight"), c->F, H, &y->wg, err, err_len) ||
        bind_matrix(m, NAME("mlp.up_proj.weight"), c->F, H, &y->wu, err, err_len) ||
        bind_matrix(m, NAME("mlp.down_proj.weight"), H, c->F, &y->wd, err, err_len))
      goto fail;
  }
#undef NAME

  /* scratch: sizes in bytes, in the order of the pointers in struct mi_model */
  const size_t B = BATCH, f = sizeof(float);
  const size_t sizes[10] = {B * H * f,   B * H * f,     B * qd * f, B * qd * f,
                            B * H * f,   B * c->F * f,  B * c->F * f,
                            c->V * f,    B * 4,         B * 4};
  void **ptrs[10] = {(void **)&m->x,    (void **)&m->h,    (void **)&m->q,
                     (void **)&m->att,  (void **)&m->o,    (void **)&m->gate,
                     (void **)&m->up,   (void **)&m->logits, (void **)&m->ids,
                     (void **)&m->pos};
  for (int i = 0; i < 10; i++) {
    if (m->P->buffer_alloc(m->pc, sizes[i], &m->bufs[i]) != 0) {
      snprintf(err, err_len, "mymodel: cannot allocate %zu bytes: %s", sizes[i],
               m->P->last_error(m->pc));
      goto fail;
    }
    *ptrs[i] = m->P->buffer_ptr(m->pc, m->bufs[i]);
  }
  *out = m;
  return 0;
oom:
  snprintf(err, err_len, "mymodel: out of memory");
fail:
  my_unload(m);
  return -1;
}

static int my_check_config(void *ctx, const mi_json *j, char *err, size_t err_len) {
  config c;
  return read_config(ctx, j, &c, err, err_len);
}

/* ---- sequences: one f32 KV cache per sequence ---- */

static int my_seq_create(mi_model *m, int64_t n_ctx, mi_seq **out, char *err, size_t err_len) {
  *out = NULL;
  if (n_ctx < 1 || n_ctx > m->c.max_pos) {
    snprintf(err, err_len, "mymodel: context %lld must be in [1, %lld]", (long long)n_ctx,
             (long long)m->c.max_pos);
    return -1;
  }
  mi_seq *s = calloc(1, sizeof *s);
  if (!s) return snprintf(err, err_len, "mymodel: out of memory"), -1;
  s->n_ctx = n_ctx;
  size_t bytes = (size_t)(m->c.L * 2 * n_ctx * m->c.nkv * m->c.hd) * sizeof(float);
  if (m->P->buffer_alloc(m->pc, bytes, &s->buf) != 0) {
    snprintf(err, err_len, "mymodel: cannot allocate a %zu-byte KV cache: %s", bytes,
             m->P->last_error(m->pc));
    free(s);
    return -1;
  }
  s->kv = m->P->buffer_ptr(m->pc, s->buf);
  *out = s;
  return 0;
}

static void my_seq_destroy(mi_model *m, mi_seq *s) {
  if (!s) return;
  m->P->buffer_free(m->pc, s->buf);
  free(s);
}

static int my_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {
  (void)m;
  if (n_keep < 0 || n_keep > s->len) return -1;
  s->len = n_keep; /* rows past len are overwritten by the next tokens */
  return 0;
}

static int64_t my_seq_len(mi_model *m, mi_seq *s) {
  (void)m;
  return s->len;
}

/* ---- forward ---- */

#define K(call)                                                                                    \
  do {                                                                                             \
    if ((call) != 0) {                                                                             \
      snprintf(err, err_len, "mymodel: %s failed: %s", #call, P->last_error(pc));                 \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

/* T <= BATCH tokens at positions s->len .. s->len+T-1; leaves the final
 * hidden states of the chunk in m->x [T, H]. */
static int forward_chunk(mi_model *m, mi_seq *s, const int32_t *ids, int64_t T, char *err,
                         size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  const config *c = &m->c;
  const int64_t H = c->H, hd = c->hd, nh = c->nh, nkv = c->nkv, F = c->F;
  const int64_t qd = nh * hd, kvd = nkv * hd, pos0 = s->len;
  const float eps = (float)c->eps, theta = (float)c->theta, scale = (float)(1 / sqrt((double)hd));
  for (int64_t t = 0; t < T; t++) m->pos_host[t] = (int32_t)(pos0 + t);
  K(P->memcpy_h2d(pc, NULL, m->ids, ids, (size_t)T * 4));
  K(P->memcpy_h2d(pc, NULL, m->pos, m->pos_host, (size_t)T * 4));
  K(P->embed(pc, NULL, m->x, m->embed.ptr, m->embed.dtype, m->ids, T, c->V, H)); /* x [T, H] */
  for (int64_t l = 0; l < c->L; l++) {
    const layer *y = &m->layers[l];
    float *kc = s->kv + (size_t)(l * 2) * s->n_ctx * kvd; /* [n_ctx, nkv, hd] */
    float *vc = kc + (size_t)s->n_ctx * kvd;               /* [n_ctx, nkv, hd] */
    float *k = kc + pos0 * kvd, *v = vc + pos0 * kvd;      /* [T, nkv, hd]: new rows */
    /* attention block */
    K(P->rmsnorm(pc, NULL, m->h, m->x, y->attn_norm.ptr, T, H, eps, 0));      /* h [T, H] */
    K(P->matmul(pc, NULL, m->q, m->h, y->wq.ptr, y->wq.dtype, T, qd, H));     /* q [T, nh, hd] */
    K(P->matmul(pc, NULL, k, m->h, y->wk.ptr, y->wk.dtype, T, kvd, H));
    K(P->matmul(pc, NULL, v, m->h, y->wv.ptr, y->wv.dtype, T, kvd, H));
    K(P->rmsnorm(pc, NULL, m->q, m->q, y->q_norm.ptr, T * nh, hd, eps, 0));   /* per head */
    K(P->rmsnorm(pc, NULL, k, k, y->k_norm.ptr, T * nkv, hd, eps, 0));
    K(P->rope(pc, NULL, m->q, m->pos, T, nh, qd, hd, hd, theta));
    K(P->rope(pc, NULL, k, m->pos, T, nkv, kvd, hd, hd, theta));
    K(P->attention(pc, NULL, m->att, m->q, kc, vc, MI_DTYPE_F32, T, nh, nkv, hd, pos0, scale));
    K(P->matmul(pc, NULL, m->o, m->att, y->wo.ptr, y->wo.dtype, T, H, qd));   /* o [T, H] */
    K(P->add(pc, NULL, m->x, m->x, m->o, T * H));
    /* MLP block */
    K(P->rmsnorm(pc, NULL, m->h, m->x, y->ffn_norm.ptr, T, H, eps, 0));
    K(P->matmul(pc, NULL, m->gate, m->h, y->wg.ptr, y->wg.dtype, T, F, H));   /* [T, F] */
    K(P->matmul(pc, NULL, m->up, m->h, y->wu.ptr, y->wu.dtype, T, F, H));     /* [T, F] */
    K(P->silu_mul(pc, NULL, m->gate, m->gate, m->up, T * F));
    K(P->matmul(pc, NULL, m->o, m->gate, y->wd.ptr, y->wd.dtype, T, H, F));   /* o [T, H] */
    K(P->add(pc, NULL, m->x, m->x, m->o, T * H));
  }
  s->len += T;
  return 0;
}

/* Logits of row r of the last chunk into host memory out [V]. */
static int logits_row(mi_model *m, int64_t r, float *out, char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  const int64_t H = m->c.H, V = m->c.V;
  float *h = m->h + r * H; /* [1, H] */
  K(P->rmsnorm(pc, NULL, h, m->x + r * H, m->final_norm.ptr, 1, H, (float)m->c.eps, 0));
  K(P->matmul(pc, NULL, m->logits, h, m->lm_head.ptr, m->lm_head.dtype, 1, V, H)); /* [V] */
  K(P->memcpy_d2h(pc, NULL, out, m->logits, (size_t)V * sizeof(float)));
  K(P->stream_sync(pc, NULL));
  return 0;
}

static int my_forward(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n, float *logits,
                      int all_logits, char *err, size_t err_len) {
  if (n < 1 || s->len + n > s->n_ctx) {
    snprintf(err, err_len, "mymodel: %lld tokens do not fit (context %lld, %lld used)",
             (long long)n, (long long)s->n_ctx, (long long)s->len);
    return -1;
  }
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->c.V) {
      snprintf(err, err_len, "mymodel: token id %d is outside [0, %lld)", ids[i],
               (long long)m->c.V);
      return -1;
    }
  for (int64_t done = 0; done < n;) {
    const int64_t T = n - done < BATCH ? n - done : BATCH;
    if (forward_chunk(m, s, ids + done, T, err, err_len) != 0) return -1;
    if (logits && all_logits) { /* logits [n, V] */
      for (int64_t r = 0; r < T; r++)
        if (logits_row(m, r, logits + (done + r) * m->c.V, err, err_len) != 0) return -1;
    } else if (logits && done + T == n) { /* logits [V] of the last token */
      if (logits_row(m, T - 1, logits, err, err_len) != 0) return -1;
    }
    done += T;
  }
  return 0;
}

static int my_info(mi_model *m, mi_model_info *dst) {
  /* write no more than the caller's struct holds (0 = the ABI 1.0 size) */
  size_t room = dst->struct_size ? dst->struct_size : offsetof(mi_model_info, prefill_flops_token);
  if (room > sizeof(mi_model_info)) room = sizeof(mi_model_info);
  const config *c = &m->c;
  const uint64_t H = (uint64_t)c->H, qd = (uint64_t)(c->nh * c->hd), kvd = (uint64_t)(c->nkv * c->hd);
  mi_model_info i = {
      .struct_size = (uint32_t)room,
      .architecture = "MyModelForCausalLM",
      .vocab_size = c->V,
      .hidden_size = c->H,
      .n_layers = c->L,
      .max_position = c->max_pos,
      .weight_bytes = m->weight_bytes,
      .state_bytes_token = (uint64_t)c->L * 2 * kvd * sizeof(float),
      .decode_weight_bytes = m->weight_bytes,
      .prefill_flops_token = 2 * (uint64_t)c->L * (2 * H * qd + 2 * H * kvd + 3 * H * (uint64_t)c->F),
      .attn_flops_pos = 4 * qd * (uint64_t)c->L,
  };
  memcpy(dst, &i, room);
  return 0;
}

/* ---- descriptor ---- */

static const char *const architectures[] = {"MyModelForCausalLM", NULL};

/* Every platform member load and forward call: the core refuses a platform
 * lacking one with a line naming them (mi-run --list-plugins shows, under
 * each platform, which model plugins it can serve). A member needed only
 * sometimes says when: MI_NEED_TP (tensor parallelism) or MI_NEED_OPTION
 * (a model option's value, e.g. {"convert", MI_NEED_OPTION, "kv_type", "f32"}). */
static const mi_platform_need platform_needs[] = {
    {"last_error", MI_NEED_ALWAYS, NULL, NULL},   {"buffer_alloc", MI_NEED_ALWAYS, NULL, NULL},
    {"buffer_wrap_host", MI_NEED_ALWAYS, NULL, NULL}, {"buffer_free", MI_NEED_ALWAYS, NULL, NULL},
    {"buffer_ptr", MI_NEED_ALWAYS, NULL, NULL},   {"memcpy_h2d", MI_NEED_ALWAYS, NULL, NULL},
    {"memcpy_d2h", MI_NEED_ALWAYS, NULL, NULL},   {"stream_sync", MI_NEED_ALWAYS, NULL, NULL},
    {"embed", MI_NEED_ALWAYS, NULL, NULL},        {"matmul", MI_NEED_ALWAYS, NULL, NULL},
    {"rmsnorm", MI_NEED_ALWAYS, NULL, NULL},      {"rope", MI_NEED_ALWAYS, NULL, NULL},
    {"attention", MI_NEED_ALWAYS, NULL, NULL},    {"silu_mul", MI_NEED_ALWAYS, NULL, NULL},
    {"add", MI_NEED_ALWAYS, NULL, NULL},          {NULL, 0, NULL, NULL},
};

static const mi_model_iface iface = {
    .struct_size = sizeof(mi_model_iface),
    .architectures = architectures,
    .check_config = my_check_config,
    .load = my_load,
    .unload = my_unload,
    .info = my_info,
    .seq_create = my_seq_create,
    .seq_destroy = my_seq_destroy,
    .seq_truncate = my_seq_truncate,
    .seq_len = my_seq_len,
    .forward = my_forward,
    .platform_needs = platform_needs,
};

static int my_init(const mi_host_api *h, const mi_options *opts, void **ctx, char *err,
                   size_t err_len) {
  (void)opts;
  if (!h || h->struct_size < sizeof(mi_host_api)) {
    snprintf(err, err_len, "mymodel: host API table too old");
    return -1;
  }
  *ctx = (void *)h; /* the plugin's context is just the host table */
  return 0;
}

static const void *my_get_iface(void *ctx) {
  (void)ctx;
  return &iface;
}

static const mi_plugin_desc desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = MI_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_MODEL,
    .name = "mymodel",
    .version = "0.1.0",
    .description = "template: dense pre-norm decoder (q/k norm, GQA, RoPE, SwiGLU)",
    .probe = NULL, /* a model plugin has nothing to probe */
    .init = my_init,
    .fini = NULL,
    .get_iface = my_get_iface,
};

MI_PLUGIN_DEFINE(desc)
