/* The Qwen3.5/3.6-style hybrid: the config.json fields this plugin reads,
 * and their checks. Both layouts: Qwen3_5ForCausalLM (flat) and the
 * released Qwen3_5ForConditionalGeneration (the text model's fields under
 * "text_config"). */
#ifndef MI_QWEN35_CONFIG_H
#define MI_QWEN35_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"

/* Bounds that keep a hostile config.json from asking for absurd sizes. */
#define Q35_MAX_LAYERS 1024

typedef struct qwen35_config {
  int64_t hidden;                     /* hidden_size */
  int64_t n_layers;                   /* num_hidden_layers */
  int64_t n_heads;                    /* num_attention_heads (full-attention layers) */
  int64_t n_kv_heads;                 /* num_key_value_heads */
  int64_t head_dim;                   /* head_dim */
  int64_t rot_dim;                    /* partial_rotary_factor · head_dim: the rotated channels */
  int64_t ffn;                        /* intermediate_size */
  int64_t vocab;                      /* vocab_size */
  int64_t max_pos;                    /* max_position_embeddings */
  int64_t lin_kh;                     /* linear_num_key_heads */
  int64_t lin_vh;                     /* linear_num_value_heads */
  int64_t lin_dk;                     /* linear_key_head_dim */
  int64_t lin_dv;                     /* linear_value_head_dim */
  int64_t conv_k;                     /* linear_conv_kernel_dim */
  double eps;                         /* rms_norm_eps */
  double rope_theta;                  /* rope_parameters.rope_theta (or top-level rope_theta) */
  int tied;                           /* tie_word_embeddings (either level in the wrapped layout) */
  int wrapped;                        /* 1: Qwen3_5ForConditionalGeneration (text_config) */
  int64_t n_full;                     /* layers of kind full_attention */
  unsigned char full[Q35_MAX_LAYERS]; /* [n_layers] 1 = full_attention, 0 = linear_attention */
} qwen35_config;

/* Reads and checks config.json. 0, or -1 with a one-line reason naming the
 * field. */
int qwen35_config_read(const mi_host_api *host, const mi_json *cfg, qwen35_config *out, char *err,
                       size_t err_len);

#endif
