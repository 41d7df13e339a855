#include "qwen3_config.h"

#include <stdio.h>
#include <string.h>

#include "mi/model_glue.h"

int qwen3_config_read(const mi_host_api *h, const mi_json *cfg, qwen3_config *c, char *err,
                      size_t n) {
  memset(c, 0, sizeof *c);
  mi_glue_json r;
  if (mi_glue_json_open(&r, h, cfg, err, n) != 0) return -1;
  /* Limits are generous (well past any released Qwen3) but keep hostile
   * configs from asking for absurd allocations. */
  if (mi_glue_json_int(&r, "hidden_size", 1, 65536, &c->hidden) ||
      mi_glue_json_int(&r, "num_hidden_layers", 1, 1024, &c->n_layers) ||
      mi_glue_json_int(&r, "num_attention_heads", 1, 1024, &c->n_heads) ||
      mi_glue_json_int(&r, "intermediate_size", 1, 1 << 20, &c->ffn) ||
      mi_glue_json_int(&r, "vocab_size", 1, 1 << 24, &c->vocab))
    return -1;
  if (h->json_get(cfg, "num_key_value_heads")) {
    if (mi_glue_json_int(&r, "num_key_value_heads", 1, 1024, &c->n_kv_heads)) return -1;
  } else {
    c->n_kv_heads = c->n_heads;
  }
  if (h->json_get(cfg, "head_dim") && h->json_type(h->json_get(cfg, "head_dim")) != MI_JSON_NULL) {
    if (mi_glue_json_int(&r, "head_dim", 2, 1024, &c->head_dim)) return -1;
  } else {
    c->head_dim = c->hidden / c->n_heads;
    /* derived, so held to the same range as an explicit head_dim */
    if (c->head_dim < 2 || c->head_dim > 1024) {
      snprintf(err, n,
               "head_dim = hidden_size / num_attention_heads = %lld / %lld is out of range [2, "
               "1024]; give head_dim explicitly",
               (long long)c->hidden, (long long)c->n_heads);
      return -1;
    }
  }
  if (h->json_get(cfg, "max_position_embeddings")) {
    if (mi_glue_json_int(&r, "max_position_embeddings", 1, 1 << 24, &c->max_pos)) return -1;
  } else {
    c->max_pos = 32768;
  }
  if (mi_glue_json_real(&r, cfg, "rms_norm_eps", "rms_norm_eps", 0.0, 1.0, 1e-6, &c->eps) ||
      /* absent: Qwen3Config's default (the released checkpoints write 1e6) */
      mi_glue_json_real(&r, cfg, "rope_theta", "rope_theta", 1.0, 1e12, 1e4, &c->rope_theta))
    return -1;
  const mi_json *tie = h->json_get(cfg, "tie_word_embeddings");
  c->tied = 0;
  if (tie && h->json_bool(tie, &c->tied) != 0) {
    snprintf(err, n, "field \"tie_word_embeddings\" must be true or false");
    return -1;
  }
  if (c->n_heads % c->n_kv_heads != 0) {
    snprintf(err, n,
             "num_attention_heads (%lld) is not a multiple of num_key_value_heads "
             "(%lld)",
             (long long)c->n_heads, (long long)c->n_kv_heads);
    return -1;
  }
  if (c->head_dim % 2 != 0) {
    snprintf(err, n, "head_dim (%lld) must be even for rotary embedding",
             (long long)c->head_dim);
    return -1;
  }
  /* Features this plugin does not implement: refuse rather than run wrong. */
  const mi_json *v = h->json_get(cfg, "rope_scaling");
  if (v && h->json_type(v) != MI_JSON_NULL) {
    snprintf(err, n, "rope_scaling is not supported by the qwen3 plugin");
    return -1;
  }
  int b = 0;
  v = h->json_get(cfg, "attention_bias");
  if (v && h->json_bool(v, &b) == 0 && b) {
    snprintf(err, n, "attention_bias=true is not supported by the qwen3 plugin");
    return -1;
  }
  v = h->json_get(cfg, "use_sliding_window");
  if (v && h->json_bool(v, &b) == 0 && b) {
    snprintf(err, n, "use_sliding_window=true is not supported by the qwen3 plugin");
    return -1;
  }
  const char *act = h->json_string(h->json_get(cfg, "hidden_act"));
  if (act && strcmp(act, "silu") != 0) {
    snprintf(err, n, "hidden_act \"%.60s\" is not supported (only silu)", act);
    for (char *p = err; *p; p++) /* the value is the file's: keep the message one line */
      if ((unsigned char)*p < 0x20) *p = ' ';
    return -1;
  }
  return 0;
}
