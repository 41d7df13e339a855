/* The qwen3 model plugin: descriptor and mi_model_iface glue. */
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "mi/model.h"
#include "mi/plugin.h"
#include "qwen3_config.h"
#include "qwen3_internal.h"

typedef struct plugin_ctx {
  const mi_host_api *host;
} plugin_ctx;

static plugin_ctx g_ctx;

static const char *const k_architectures[] = {"Qwen3ForCausalLM", NULL};

static int q3_check_config(void *ctx, const mi_json *config, char *err, size_t err_len) {
  qwen3_config c;
  return qwen3_config_read(((plugin_ctx *)ctx)->host, config, &c, err, err_len);
}

static int q3_load(void *ctx, const mi_model_load_args *a, mi_model **out, char *err,
                   size_t err_len) {
  return qwen3_model_load(((plugin_ctx *)ctx)->host, a, out, err, err_len);
}

static void q3_unload(mi_model *m) { qwen3_model_free(m); }

static int q3_info(mi_model *m, mi_model_info *dst) {
  /* fill a whole local copy, then hand the caller as much as it has room for */
  size_t room = dst->struct_size ? dst->struct_size : offsetof(mi_model_info, prefill_flops_token);
  if (room > sizeof(mi_model_info)) room = sizeof(mi_model_info);
  mi_model_info info, *out = &info;
  memset(out, 0, sizeof *out);
  out->struct_size = (uint32_t)room;
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
  uint64_t emb = (uint64_t)(m->cfg.vocab * m->cfg.hidden) * mi_dtype_size(m->embed.dtype);
  uint64_t row = (uint64_t)m->cfg.hidden * mi_dtype_size(m->embed.dtype);
  out->decode_weight_bytes = m->weight_bytes - (m->cfg.tied ? 0 : emb - row);
  /* per prompt token: 2 FLOPs per weight of every layer matmul (this rank's
   * share); attention: QKᵀ and PV, 2 FLOPs each per head dim per position */
  const uint64_t H = (uint64_t)m->cfg.hidden, hd = (uint64_t)m->cfg.head_dim;
  const uint64_t qdim = (uint64_t)m->nh_l * hd, kvdim = (uint64_t)m->nkv_l * hd;
  const uint64_t per_layer = H * qdim * 2 + H * kvdim * 2 + 3 * H * (uint64_t)m->ffn_l;
  out->prefill_flops_token = 2 * per_layer * (uint64_t)m->cfg.n_layers;
  out->attn_flops_pos = 4 * qdim * (uint64_t)m->cfg.n_layers;
  memcpy(dst, out, room);
  return 0;
}

static int q3_seq_create(mi_model *m, int64_t n_ctx, mi_seq **out, char *err, size_t err_len) {
  return qwen3_seq_create(m, n_ctx, out, err, err_len);
}

static void q3_seq_destroy(mi_model *m, mi_seq *s) { qwen3_seq_destroy(m, s); }

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

static int q3_forward(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n, float *logits,
                      int all_logits, char *err, size_t err_len) {
  return qwen3_forward(m, s, ids, n, logits, all_logits, err, err_len);
}

static int q3_forward_batch(mi_model *m, mi_seq *const *seqs, const int32_t *ids, int64_t n,
                            float *const *logits, char *err, size_t err_len) {
  return qwen3_forward_batch(m, seqs, ids, n, logits, err, err_len);
}

/* Every platform member load and forward call (the core refuses a platform
 * lacking one, naming them). stream_sync is called only when provided. */
static const mi_platform_need k_platform_needs[] = {
    {"last_error", MI_NEED_ALWAYS, NULL, NULL},
    {"buffer_alloc", MI_NEED_ALWAYS, NULL, NULL},
    {"buffer_wrap_host", MI_NEED_ALWAYS, NULL, NULL},
    {"buffer_free", MI_NEED_ALWAYS, NULL, NULL},
    {"buffer_ptr", MI_NEED_ALWAYS, NULL, NULL},
    {"memcpy_h2d", MI_NEED_ALWAYS, NULL, NULL},
    {"memcpy_d2h", MI_NEED_ALWAYS, NULL, NULL},
    /* forward_batch copies each row's new key/value into its own cache */
    {"memcpy_d2d", MI_NEED_ALWAYS, NULL, NULL},
    {"matmul", MI_NEED_ALWAYS, NULL, NULL},
    {"rmsnorm", MI_NEED_ALWAYS, NULL, NULL},
    {"rope", MI_NEED_ALWAYS, NULL, NULL},
    {"attention", MI_NEED_ALWAYS, NULL, NULL},
    {"silu_mul", MI_NEED_ALWAYS, NULL, NULL},
    {"add", MI_NEED_ALWAYS, NULL, NULL},
    {"embed", MI_NEED_ALWAYS, NULL, NULL},
    /* the two partial sums of each layer under --tp N */
    {"allreduce_sum_f32", MI_NEED_TP, NULL, NULL},
    {"broadcast", MI_NEED_TP, NULL, NULL},
    /* a half-precision KV cache (--kv-type f16|bf16) is written through it */
    {"convert", MI_NEED_OPTION, "kv_type", "f32"},
    {NULL, 0, NULL, NULL},
};

static const mi_model_iface k_iface = {
    .struct_size = sizeof(mi_model_iface),
    .architectures = k_architectures,
    .check_config = q3_check_config,
    .load = q3_load,
    .unload = q3_unload,
    .info = q3_info,
    .seq_create = q3_seq_create,
    .seq_destroy = q3_seq_destroy,
    .seq_truncate = q3_seq_truncate,
    .seq_len = q3_seq_len,
    .forward = q3_forward,
    .platform_needs = k_platform_needs,
    .forward_batch = q3_forward_batch,
};

static int q3_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                   size_t err_len) {
  (void)opts;
  if (!host || host->struct_size < sizeof(mi_host_api)) {
    snprintf(err, err_len, "host API table too old for this plugin");
    return -1;
  }
  g_ctx.host = host;
  *ctx = &g_ctx;
  return 0;
}

static const void *q3_get_iface(void *ctx) {
  (void)ctx;
  return &k_iface;
}

static const mi_plugin_desc k_desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = MI_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_MODEL,
    .name = "qwen3",
    .version = "0.1.0",
    .description = "Qwen3 dense decoder (q/k RMSNorm, GQA, SwiGLU, NeoX RoPE)",
    .probe = NULL,
    .init = q3_init,
    .fini = NULL,
    .get_iface = q3_get_iface,
};

MI_PLUGIN_DEFINE(k_desc)
