/* The qwen35 model plugin: the Qwen3.5/3.6-style hybrid (gated DeltaNet
 * and gated full attention). Descriptor and mi_model_iface glue. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "mi/model.h"
#include "mi/plugin.h"
#include "qwen35_config.h"
#include "qwen35_internal.h"

/* the flat text model and the released wrapper (text_config, no vision here) */
static const char *const k_architectures[] = {"Qwen3_5ForCausalLM",
                                              "Qwen3_5ForConditionalGeneration", NULL};

static int q35_check_config(void *ctx, const mi_json *config, char *err, size_t err_len) {
  qwen35_config c;
  return qwen35_config_read((const mi_host_api *)ctx, config, &c, err, err_len);
}

static int q35_load(void *ctx, const mi_model_load_args *a, mi_model **out, char *err,
                    size_t err_len) {
  return qwen35_model_load((const mi_host_api *)ctx, a, out, err, err_len);
}

static int q35_info(mi_model *m, mi_model_info *dst) {
  /* fill a whole local copy, then hand the caller as much as it has room for */
  const qwen35_config *c = &m->cfg;
  mi_model_info info, *out = &info;
  memset(out, 0, sizeof *out);
  out->architecture = c->wrapped ? "Qwen3_5ForConditionalGeneration" : "Qwen3_5ForCausalLM";
  out->vocab_size = c->vocab;
  out->hidden_size = c->hidden;
  out->n_layers = c->n_layers;
  out->max_position = c->max_pos;
  out->weight_bytes = m->weight_bytes;
  const uint64_t H = (uint64_t)c->hidden, hd = (uint64_t)c->head_dim;
  const uint64_t qdim = (uint64_t)c->n_heads * hd, kvdim = (uint64_t)c->n_kv_heads * hd;
  /* only the full-attention layers grow with the context */
  out->state_bytes_token = (uint64_t)c->n_full * 2 * kvdim * sizeof(float);
  /* the DeltaNet layers' conv and recurrent states: read and written by
   * every decode step, like the weights (the decode roofline counts them) */
  out->state_bytes_fixed = q35_state_bytes(m);
  /* An untied embedding table is gathered one row per token, not streamed. */
  const uint64_t row = (uint64_t)mi_dtype_row_bytes(m->embed.dtype, c->hidden); /* a block type's too */
  const uint64_t emb = (uint64_t)c->vocab * row;
  out->decode_weight_bytes = m->weight_bytes - (c->tied ? 0 : emb - row);
  /* per prompt token: 2 FLOPs per weight of every layer matmul; a DeltaNet
   * layer adds the delta rule's state work, ~8·Dk·Dv per value head (decay,
   * Sᵀk, k⊗δ, Sᵀq); attention: QKᵀ and PV, 2 FLOPs each per head dim per
   * earlier position, full layers only */
  const uint64_t C = (uint64_t)m->conv_dim, VD = (uint64_t)(c->lin_vh * c->lin_dv),
                 Vh = (uint64_t)c->lin_vh, F = (uint64_t)c->ffn;
  const uint64_t full_w = H * 2 * qdim + 2 * H * kvdim + H * qdim;
  const uint64_t lin_w = H * C + H * VD + 2 * H * Vh + VD * H;
  const uint64_t rule = 8 * (uint64_t)(c->lin_dk * c->lin_dv) * Vh;
  out->prefill_flops_token = (uint64_t)c->n_full * 2 * full_w +
                             (uint64_t)(c->n_layers - c->n_full) * (2 * lin_w + rule) +
                             (uint64_t)c->n_layers * 2 * 3 * H * F;
  out->attn_flops_pos = 4 * qdim * (uint64_t)c->n_full;
  mi_glue_info_write(dst, out);
  return 0;
}

/* The DeltaNet state summarises every token seen and cannot be rewound:
 * keeping all tokens is a no-op, keeping none zeroes it, anything else is
 * refused (the interface has no error string, so it is logged). */
static int q35_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {
  if (n_keep == s->len) return 0;
  if (n_keep == 0) {
    char err[256];
    if (qwen35_seq_reset(m, s, err, sizeof err) == 0) return 0;
    m->glue.host->log(MI_LOG_ERROR, "qwen35", "%s", err);
    return -1;
  }
  m->glue.host->log(
      MI_LOG_ERROR, "qwen35",
      "cannot truncate a sequence of %lld tokens to %lld: the gated DeltaNet state is "
      "recurrent (only 0, a reset, or the current length)",
      (long long)s->len, (long long)n_keep);
  return -1;
}

static int64_t q35_seq_len(mi_model *m, mi_seq *s) {
  (void)m;
  return s->len;
}

/* Every platform member load and forward call (the core refuses a platform
 * lacking one, naming them). stream_sync is called only when provided. */
static const mi_platform_need k_platform_needs[] = {
    MI_GLUE_NEEDS_MEMORY,
    /* seq_truncate(0) zeroes the DeltaNet states from a zero buffer;
     * forward_batch copies each row's new key/value into its own cache */
    MI_GLUE_NEED(memcpy_d2d),
    MI_GLUE_NEEDS_DECODER,
    MI_GLUE_NEED(scale),
    /* ABI 1.4: the hybrid's blocks */
    MI_GLUE_NEED(copy2d),
    MI_GLUE_NEED(l2norm),
    MI_GLUE_NEED(sigmoid_mul),
    MI_GLUE_NEED(conv1d_causal),
    MI_GLUE_NEED(deltanet_gates),
    MI_GLUE_NEED(gated_delta_rule),
    MI_GLUE_NEED(rmsnorm_gated),
    MI_GLUE_NEEDS_END,
};

static const mi_model_iface k_iface = {
    .struct_size = sizeof(mi_model_iface),
    .architectures = k_architectures,
    .check_config = q35_check_config,
    .load = q35_load,
    .unload = qwen35_model_free,
    .info = q35_info,
    .seq_create = qwen35_seq_create,
    .seq_destroy = qwen35_seq_destroy,
    .seq_truncate = q35_seq_truncate,
    .seq_len = q35_seq_len,
    .forward = qwen35_forward,
    .platform_needs = k_platform_needs,
    .forward_batch = qwen35_forward_batch,
    .seq_state_read = qwen35_seq_state_read,
    .seq_state_write = qwen35_seq_state_write,
};

MI_GLUE_MODEL_PLUGIN("qwen35", "0.1.0",
                     "Qwen3.5/3.6-style hybrid (gated DeltaNet + gated attention, (1+w) norms, "
                     "partial rotary)",
                     k_iface)
