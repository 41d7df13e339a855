/* Qwen3 plugin internals shared by its files. */
#ifndef MI_QWEN3_INTERNAL_H
#define MI_QWEN3_INTERNAL_H

#include <stdio.h>

#include "mi/model.h"
#include "mi/model_glue.h"
#include "qwen3_config.h"

/* Rows of logits computed per lm_head call: bounds the logits scratch to
 * Q3_LOGIT_ROWS × vocab floats when all positions' logits are requested
 * (grown to that from one row only when a call needs more). */
#define Q3_LOGIT_ROWS 8

typedef mi_glue_weight q3_weight; /* buf NULL when borrowed (tied lm_head) */

typedef struct q3_layer {
  q3_weight attn_norm, ffn_norm;   /* [H] f32 */
  q3_weight q_norm, k_norm;        /* [hd] f32 */
  q3_weight wq;                    /* [nh*hd, H] */
  q3_weight wk, wv;                /* [nkv*hd, H] */
  q3_weight wo;                    /* [H, nh*hd] */
  q3_weight wg, wu;                /* [F, H] */
  q3_weight wd;                    /* [H, F] */
} q3_layer;

typedef struct q3_scratch {
  mi_buffer *b_x, *b_h, *b_q, *b_att, *b_o, *b_gate, *b_up, *b_logits, *b_ids, *b_pos;
  mi_buffer *b_kn, *b_vn; /* only with a half-precision KV cache */
  float *x;       /* [B, H] residual stream */
  float *h;       /* [B, H] normed input of a block */
  float *q;       /* [B, nh, hd] queries */
  float *att;     /* [B, nh, hd] attention output */
  float *o;       /* [B, H] block output before the residual add */
  float *gate;    /* [B, F] */
  float *up;      /* [B, F] */
  float *logits;  /* [logit_rows, V] */
  int32_t *ids;   /* [B] token ids (device) */
  int32_t *pos;   /* [B] positions (device) */
  float *kn, *vn; /* [B, nkv, hd] new keys/values before conversion to the cache type */
} q3_scratch;

struct mi_model {
  /* the host, the platform (P, pc) and the weights: binding weights and
   * scratch (mi/model_glue.h), and every kernel call */
  mi_glue glue;
  char *model_dir; /* glue.model_dir, owned */
  qwen3_config cfg;
  int64_t batch; /* tokens per forward chunk (prefill batch) */
  int64_t rows;  /* rows the scratch has now (0 .. batch): grown to the widest chunk yet */
  int64_t logit_rows;  /* rows of s.logits now (0 .. Q3_LOGIT_ROWS): the most one call computed */
  uint64_t mem_budget; /* option mem_budget: host bytes left for the scratch (0: unchecked) */
  int tp_rank, tp_size;          /* tensor parallelism: this rank of tp_size */
  mi_dtype kv_dtype;             /* KV cache element type: f32 (default), f16 or bf16 */
  int64_t nh_l, nkv_l, ffn_l;    /* this rank's heads, KV heads, FFN columns */
  q3_weight embed, final_norm, lm_head;
  q3_layer *layers; /* [n_layers] */
  q3_scratch s;
  int32_t *pos_host; /* [B] */
  uint64_t weight_bytes;
};

struct mi_seq {
  int64_t n_ctx;
  int64_t len;
  mi_buffer *b_kv;
  char *kv; /* [n_layers][2][n_ctx, nkv*hd] in the model's kv_dtype */
};

typedef struct mi_model qwen3_model;
typedef struct mi_seq qwen3_seq;

int qwen3_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                     char *err, size_t err_len);
void qwen3_model_free(qwen3_model *m);
int qwen3_seq_create(qwen3_model *m, int64_t n_ctx, qwen3_seq **out, char *err, size_t err_len);
void qwen3_seq_destroy(qwen3_model *m, qwen3_seq *s);
int qwen3_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n, float *logits,
                  int all_logits, char *err, size_t err_len);
int qwen3_forward_batch(qwen3_model *m, qwen3_seq *const *seqs, const int32_t *ids, int64_t n,
                        float *const *logits, char *err, size_t err_len);

#endif
