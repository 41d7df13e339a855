/* Qwen3 dense: the config.json fields this plugin reads, and their checks. */
#ifndef MI_QWEN3_CONFIG_H
#define MI_QWEN3_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"

typedef struct qwen3_config {
  int64_t hidden;     /* hidden_size */
  int64_t n_layers;   /* num_hidden_layers */
  int64_t n_heads;    /* num_attention_heads */
  int64_t n_kv_heads; /* num_key_value_heads */
  int64_t head_dim;   /* head_dim (its own field, not hidden/heads) */
  int64_t ffn;        /* intermediate_size */
  int64_t vocab;      /* vocab_size */
  int64_t max_pos;    /* max_position_embeddings */
  double eps;         /* rms_norm_eps */
  double rope_theta;  /* rope_theta */
  int tied;           /* tie_word_embeddings */
} qwen3_config;

/* Reads and checks config.json. 0, or -1 with a one-line reason. */
int qwen3_config_read(const mi_host_api *host, const mi_json *cfg, qwen3_config *out, char *err,
                      size_t err_len);

#endif
