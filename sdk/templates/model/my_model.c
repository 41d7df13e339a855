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
 * The glue around the math (binding weights by name with their shapes
 * checked, the checks before a forward, the kernel-call check, the
 * platform-needs table) comes from <mi/model_glue.h>, shared with the
 * in-tree model plugins.
 *
 * To make your own: rename "mymodel" / "MyModelForCausalLM", change the
 * config reading, the weights and forward_chunk(). Build: see README.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mi/model.h>
#include <mi/model_glue.h>
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

typedef mi_glue_weight weight; /* buf NULL when borrowed (tied lm_head) */

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
  mi_glue g; /* what binding weights and scratch needs */
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
 * host-memory platforms, uploaded on a GPU); a missing tensor, another
 * shape or dtype is refused with one line naming the file and the tensor. */
static int bind_matrix(mi_model *m, const char *name, int64_t rows, int64_t cols, weight *out,
                       char *err, size_t err_len) {
  return mi_glue_bind_matrix(&m->g, name, rows, cols, MI_GLUE_FLOATS, out, err, err_len);
}

/* A norm weight [n], widened to f32 once (the rmsnorm kernel takes f32). */
static int bind_vector(mi_model *m, const char *name, int64_t n, weight *out, char *err,
                       size_t err_len) {
  return mi_glue_bind_vector(&m->g, name, n, out, err, err_len);
}

static void my_unload(mi_model *m) {
  if (!m) return;
  for (int64_t l = 0; m->layers && l < m->c.L; l++) {
    layer *y = &m->layers[l];
    weight *ws[] = {&y->attn_norm, &y->ffn_norm, &y->q_norm, &y->k_norm, &y->wq, &y->wk,
                    &y->wv,        &y->wo,       &y->wg,     &y->wu,     &y->wd};
    mi_glue_weights_free(m->P, m->pc, ws, sizeof ws / sizeof ws[0]);
  }
  free(m->layers);
  mi_glue_weights_free(m->P, m->pc, (mi_glue_weight *[]){&m->embed, &m->final_norm, &m->lm_head},
                       3);
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
  m->host = ctx, m->P = a->platform.iface, m->pc = a->platform.ctx;
  m->g = (mi_glue){"mymodel",       m->host,    m->P,
                   m->pc,           a->weights, a->model_dir ? a->model_dir : "(model)",
                   &m->weight_bytes};
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
  for (int i = 0; i < 10; i++)
    if (mi_glue_alloc(&m->g, sizes[i], &m->bufs[i], ptrs[i], err, err_len) != 0) goto fail;
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
  /* n_ctx in [1, max_position_embeddings] */
  mi_seq *s = mi_glue_seq_alloc("mymodel", n_ctx, m->c.max_pos, sizeof *s, err, err_len);
  if (!s) return -1;
  s->n_ctx = n_ctx;
  size_t bytes = (size_t)(m->c.L * 2 * n_ctx * m->c.nkv * m->c.hd) * sizeof(float);
  if (mi_glue_alloc(&m->g, bytes, &s->buf, &s->kv, err, err_len) != 0) {
    free(s);
    return -1;
  }
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

/* Runs a kernel; on failure "mymodel: kernel <call> failed: <why>" and return -1. */
#define K(call) MI_GLUE_K("mymodel", call)

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

/* Logits of rows [r0, r0+n) of the last chunk into host memory out [n, V]:
 * rmsnorm(x) * final_norm, then the lm_head, one row per call (m->logits
 * holds one row). */
static int logits_rows(mi_model *m, int64_t r0, int64_t n, float *out, char *err, size_t err_len) {
  const int64_t H = m->c.H;
  return mi_glue_logits(&m->g, m->x + r0 * H, m->h + r0 * H, n, H, m->c.V, &m->final_norm,
                        (float)m->c.eps, 0.0f, &m->lm_head, m->logits, 1, out, NULL, err, err_len);
}

static int my_forward(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n, float *logits,
                      int all_logits, char *err, size_t err_len) {
  /* at least one token, room for all, every id in the vocabulary */
  if (mi_glue_check_forward("mymodel", ids, n, s->len, s->n_ctx, m->c.V, err, err_len)) return -1;
  /* chunks of BATCH tokens; logits [n, V] of every token, or [V] of the last */
  return mi_glue_forward_chunks(m, s, ids, n, BATCH, m->c.V, logits, all_logits, forward_chunk,
                                logits_rows, err, err_len);
}

static int my_info(mi_model *m, mi_model_info *dst) {
  const config *c = &m->c;
  const uint64_t H = (uint64_t)c->H, qd = (uint64_t)(c->nh * c->hd), kvd = (uint64_t)(c->nkv * c->hd);
  mi_model_info i = {
      .architecture = "MyModelForCausalLM",
      .vocab_size = c->V,
      .hidden_size = c->H,
      .n_layers = c->L,
      .max_position = c->max_pos,
      .weight_bytes = m->weight_bytes,
      .state_bytes_token = (uint64_t)c->L * 2 * kvd * sizeof(float),
      .decode_weight_bytes = m->weight_bytes,
      .prefill_flops_token =
          2 * (uint64_t)c->L * (2 * H * qd + 2 * H * kvd + 3 * H * (uint64_t)c->F),
      .attn_flops_pos = 4 * qd * (uint64_t)c->L,
  };
  mi_glue_info_write(dst, &i); /* no more than the caller's struct holds */
  return 0;
}

/* ---- descriptor ---- */

static const char *const architectures[] = {"MyModelForCausalLM", NULL};

/* Every platform member load and forward call: the core refuses a platform
 * lacking one with a line naming them (mi-run --list-plugins shows, under
 * each platform, which model plugins it can serve). A member needed only
 * sometimes says when: MI_GLUE_NEED_TP(member) (tensor parallelism) or
 * MI_GLUE_NEED_OPTION(member, key, unless) (a model option's value, e.g.
 * MI_GLUE_NEED_OPTION(convert, "kv_type", "f32")). A misspelt member does
 * not compile. */
static const mi_platform_need platform_needs[] = {
    MI_GLUE_NEEDS_MEMORY, /* buffers and copies: binding, scratch, logits back */
    MI_GLUE_NEED(stream_sync),
    MI_GLUE_NEEDS_DECODER, /* embed, matmul, rmsnorm, rope, attention, silu_mul, add */
    MI_GLUE_NEEDS_END,
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

/* The descriptor (name, version, description) and the one exported symbol.
 * The plugin's context is the host table: check_config and load get it as
 * ctx. */
MI_GLUE_MODEL_PLUGIN("mymodel", "0.1.0",
                     "template: dense pre-norm decoder (q/k norm, GQA, RoPE, SwiGLU)", iface)
