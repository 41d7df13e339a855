/* The qwen3 model plugin: descriptor and mi_model_iface glue. */
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mi/model.h"
#include "mi/plugin.h"
#include "qwen3_config.h"
#include "qwen3_internal.h"

static const char *const k_architectures[] = {"Qwen3ForCausalLM", NULL};

static int q3_check_config(void *ctx, const mi_json *config, char *err, size_t err_len) {
  qwen3_config c;
  return qwen3_config_read((const mi_host_api *)ctx, config, &c, err, err_len);
}

static int q3_load(void *ctx, const mi_model_load_args *a, mi_model **out, char *err,
                   size_t err_len) {
  return qwen3_model_load((const mi_host_api *)ctx, a, out, err, err_len);
}

static int q3_info(mi_model *m, mi_model_info *dst) {
  /* fill a whole local copy, then hand the caller as much as it has room for */
  mi_model_info info, *out = &info;
  memset(out, 0, sizeof *out);
  out->architecture = "Qwen3ForCausalLM";
  out->vocab_size = m->cfg.vocab;
  out->hidden_size = m->cfg.hidden;
  out->n_layers = m->cfg.n_layers;
  out->max_position = m->cfg.max_pos;
  out->weight_bytes = m->weight_bytes;
  out->state_bytes_token =
      (uint64_t)(m->cfg.n_layers * 2 * m->nkv_l * m->cfg.head_dim) * mi_dtype_size(m->kv_dtype);
  out->state_bytes_fixed = 0;
  /* An untied embedding table is gathered one row per token, not streamed. */
  /* rows, not elements: a block-dtype table (GGUF's Q8_0, Q4_0, Q4_K, Q6_K)
   * has blocks of 32 or 256 */
  uint64_t row = (uint64_t)mi_dtype_row_bytes(m->embed.dtype, m->cfg.hidden);
  uint64_t emb = (uint64_t)m->cfg.vocab * row;
  out->decode_weight_bytes = m->weight_bytes - (m->cfg.tied ? 0 : emb - row);
  /* per prompt token: 2 FLOPs per weight of every layer matmul (this rank's
   * share); attention: QKᵀ and PV, 2 FLOPs each per head dim per position */
  const uint64_t H = (uint64_t)m->cfg.hidden, hd = (uint64_t)m->cfg.head_dim;
  const uint64_t qdim = (uint64_t)m->nh_l * hd, kvdim = (uint64_t)m->nkv_l * hd;
  const uint64_t per_layer = H * qdim * 2 + H * kvdim * 2 + 3 * H * (uint64_t)m->ffn_l;
  out->prefill_flops_token = 2 * per_layer * (uint64_t)m->cfg.n_layers;
  out->attn_flops_pos = 4 * qdim * (uint64_t)m->cfg.n_layers;
  mi_glue_info_write(dst, out);
  return 0;
}

static int q3_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {
  (void)m;
  /* A KV cache truncates freely: rows past len are simply overwritten. */
  if (n_keep < 0 || n_keep > s->len) return -1;
  s->len = n_keep;
  return 0;
}

static int64_t q3_seq_len(mi_model *m, mi_seq *s) {
  (void)m;
  return s->len;
}

/* ---- sequence state export/import (prefix caching, ABI 1.5) ----------
 * Exported position by position: [n][n_layers][K|V][nkv_l*hd] in kv_dtype,
 * so one position is state_bytes_token bytes (q3_info; this rank's KV heads
 * under --tp); the cache is [n_layers][K|V][n_ctx, nkv_l*hd], which
 * mi_glue_kv_copy stages. The bytes are the cache's own (f32/f16/bf16),
 * never converted. */

static int q3_state_copy(qwen3_model *m, qwen3_seq *s, int64_t pos, int64_t n, char *host,
                         int to_host, const char *fn, char *err, size_t err_len) {
  const size_t row = (size_t)(m->nkv_l * m->cfg.head_dim) * mi_dtype_size(m->kv_dtype);
  return mi_glue_kv_copy(&m->glue, s->kv, 2 * m->cfg.n_layers, row, s->n_ctx, pos, n, host, to_host,
                         fn, err, err_len);
}

static int q3_seq_state_read(mi_model *m, mi_seq *s, int64_t pos, int64_t n, void *dst,
                             void *fixed_dst, char *err, size_t err_len) {
  /* no fixed state to copy, but a caller asking for it asks for the state
   * at the current length: hold every model to the same rule */
  if (mi_glue_check_state_read("qwen3", pos, n, s->len, dst, fixed_dst != NULL, "fixed state", err,
                               err_len))
    return -1;
  return q3_state_copy(m, s, pos, n, dst, 1, "seq_state_read", err, err_len);
}

static int q3_seq_state_write(mi_model *m, mi_seq *s, int64_t pos, int64_t n, const void *src,
                              const void *fixed_src, char *err, size_t err_len) {
  (void)fixed_src; /* a dense model has no fixed state */
  if (mi_glue_check_state_write("qwen3", pos, n, s->len, s->n_ctx, src, err, err_len)) return -1;
  /* rows at and past len are not part of the sequence: a copy failing half
   * way leaves it unchanged (len moves only at the end) */
  if (q3_state_copy(m, s, pos, n, (char *)src, 0, "seq_state_write", err, err_len) != 0) return -1;
  s->len = pos + n;
  return 0;
}

/* Every platform member load and forward call (the core refuses a platform
 * lacking one, naming them). stream_sync is called only when provided. */
static const mi_platform_need k_platform_needs[] = {
    MI_GLUE_NEEDS_MEMORY,
    /* forward_batch copies each row's new key/value into its own cache */
    MI_GLUE_NEED(memcpy_d2d),
    MI_GLUE_NEEDS_DECODER,
    /* the two partial sums of each layer under --tp N */
    MI_GLUE_NEED_TP(allreduce_sum_f32),
    MI_GLUE_NEED_TP(broadcast),
    /* a half-precision KV cache (--kv-type f16|bf16) is written through it */
    MI_GLUE_NEED_OPTION(convert, "kv_type", "f32"),
    MI_GLUE_NEEDS_END,
};

static const mi_model_iface k_iface = {
    .struct_size = sizeof(mi_model_iface),
    .architectures = k_architectures,
    .check_config = q3_check_config,
    .load = q3_load,
    .unload = qwen3_model_free,
    .info = q3_info,
    .seq_create = qwen3_seq_create,
    .seq_destroy = qwen3_seq_destroy,
    .seq_truncate = q3_seq_truncate,
    .seq_len = q3_seq_len,
    .forward = qwen3_forward,
    .platform_needs = k_platform_needs,
    .forward_batch = qwen3_forward_batch,
    .seq_state_read = q3_seq_state_read,
    .seq_state_write = q3_seq_state_write,
};

MI_GLUE_MODEL_PLUGIN("qwen3", "0.1.0", "Qwen3 dense decoder (q/k RMSNorm, GQA, SwiGLU, NeoX RoPE)",
                     k_iface)
