/* The qwen3 model plugin: descriptor and mi_model_iface glue. */
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
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

/* ---- sequence state export/import (prefix caching, ABI 1.5) ----------
 * Exported position by position: [n][n_layers][K|V][nkv_l*hd] in kv_dtype,
 * so one position is state_bytes_token bytes (q3_info; this rank's KV heads
 * under --tp) and the reads of adjacent ranges concatenate to the read of
 * their union (a prefix cache stores blocks and may write several at once).
 * The cache is [n_layers][K|V][n_ctx, nkv_l*hd]: a range's rows of one layer
 * and part are one contiguous run, so the device sees 2·n_layers copies per
 * staged chunk, and the host reorders rows in a staging buffer (per-row
 * device copies would cost a GPU one transfer per row). The bytes are the
 * cache's own (f32/f16/bf16), never converted: a restored sequence computes
 * bit for bit what the original would. */

/* Staging per device round trip: this many bytes, or one position if more. */
#define Q3_STATE_STAGE_BYTES ((size_t)8 << 20)

/* Positions [pos, pos+n) of s's cache to host (to_host) or from it (host is
 * then only read), host in the exported layout. 0, or -1 with a line naming
 * fn. */
static int q3_state_copy(qwen3_model *m, qwen3_seq *s, int64_t pos, int64_t n, char *host,
                         int to_host, const char *fn, char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  const int64_t parts = 2 * m->cfg.n_layers; /* (layer, K|V) pairs, cache order */
  const size_t row = (size_t)(m->nkv_l * m->cfg.head_dim) * mi_dtype_size(m->kv_dtype);
  const size_t tok = (size_t)parts * row; /* state_bytes_token */
  int64_t chunk = (int64_t)(Q3_STATE_STAGE_BYTES / tok);
  if (chunk < 1) chunk = 1;
  if (chunk > n) chunk = n;
  char *stage = malloc((size_t)chunk * tok);
  if (!stage) {
    snprintf(err, err_len, "qwen3: %s: out of memory (%zu bytes of staging)", fn,
             (size_t)chunk * tok);
    return -1;
  }
  int rc = 0;
  for (int64_t p0 = 0; p0 < n && rc == 0; p0 += chunk) {
    const int64_t c = n - p0 < chunk ? n - p0 : chunk;
    const size_t run = (size_t)c * row; /* one part's rows in the staging */
    char *h = host + (size_t)p0 * tok;
    if (!to_host)
      for (int64_t i = 0; i < parts; i++)
        for (int64_t t = 0; t < c; t++)
          memcpy(stage + (size_t)i * run + (size_t)t * row, h + (size_t)t * tok + (size_t)i * row,
                 row);
    for (int64_t i = 0; i < parts && rc == 0; i++) {
      char *dev = s->kv + ((size_t)i * (size_t)s->n_ctx + (size_t)(pos + p0)) * row;
      rc = to_host ? P->memcpy_d2h(m->pc, NULL, stage + (size_t)i * run, dev, run)
                   : P->memcpy_h2d(m->pc, NULL, dev, stage + (size_t)i * run, run);
    }
    /* the host reads the staging next, or fills it again */
    if (rc == 0 && mi_platform_has(P, stream_sync)) rc = P->stream_sync(m->pc, NULL);
    if (rc == 0 && to_host)
      for (int64_t i = 0; i < parts; i++)
        for (int64_t t = 0; t < c; t++)
          memcpy(h + (size_t)t * tok + (size_t)i * row, stage + (size_t)i * run + (size_t)t * row,
                 row);
  }
  free(stage);
  if (rc != 0) {
    const char *e = P->last_error ? P->last_error(m->pc) : NULL;
    snprintf(err, err_len, "qwen3: %s: copying the KV cache failed: %s", fn,
             e && e[0] ? e : "unknown error");
    return -1;
  }
  return 0;
}

static int q3_seq_state_read(mi_model *m, mi_seq *s, int64_t pos, int64_t n, void *dst,
                             void *fixed_dst, char *err, size_t err_len) {
  if (pos < 0 || n < 0 || pos > s->len || n > s->len - pos) {
    snprintf(err, err_len,
             "qwen3: seq_state_read: positions [%lld, %lld) are not within the sequence's %lld",
             (long long)pos, (long long)pos + (long long)n, (long long)s->len);
    return -1;
  }
  /* no fixed state to copy, but a caller asking for it asks for the state
   * at the current length: hold every model to the same rule */
  if (fixed_dst && pos + n != s->len) {
    snprintf(err, err_len,
             "qwen3: seq_state_read: the fixed state exists only at the sequence's length %lld, "
             "not at %lld",
             (long long)s->len, (long long)(pos + n));
    return -1;
  }
  if (n == 0) return 0;
  if (!dst) {
    snprintf(err, err_len, "qwen3: seq_state_read: dst is NULL");
    return -1;
  }
  return q3_state_copy(m, s, pos, n, dst, 1, "seq_state_read", err, err_len);
}

static int q3_seq_state_write(mi_model *m, mi_seq *s, int64_t pos, int64_t n, const void *src,
                              const void *fixed_src, char *err, size_t err_len) {
  (void)fixed_src; /* a dense model has no fixed state */
  if (pos != s->len) {
    snprintf(err, err_len,
             "qwen3: seq_state_write: position %lld is not the sequence's length %lld "
             "(state is only appended)",
             (long long)pos, (long long)s->len);
    return -1;
  }
  if (n < 0 || n > s->n_ctx - pos) {
    snprintf(err, err_len,
             "qwen3: seq_state_write: %lld positions do not fit: the context holds %lld and "
             "%lld are used",
             (long long)n, (long long)s->n_ctx, (long long)pos);
    return -1;
  }
  if (n == 0) return 0;
  if (!src) {
    snprintf(err, err_len, "qwen3: seq_state_write: src is NULL");
    return -1;
  }
  /* rows at and past len are not part of the sequence: a copy failing half
   * way leaves it unchanged (len moves only at the end) */
  if (q3_state_copy(m, s, pos, n, (char *)src, 0, "seq_state_write", err, err_len) != 0) return -1;
  s->len = pos + n;
  return 0;
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
    .seq_state_read = q3_seq_state_read,
    .seq_state_write = q3_seq_state_write,
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
