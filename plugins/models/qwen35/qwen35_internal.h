/* qwen35 plugin internals shared by its files: the bound weights, the
 * scratch of one forward chunk, and a sequence's state. */
#ifndef MI_QWEN35_INTERNAL_H
#define MI_QWEN35_INTERNAL_H

#include <stdio.h>

#include "mi/model.h"
#include "mi/model_glue.h"
#include "qwen35_config.h"

/* Rows of logits per lm_head call: bounds the logits scratch to
 * Q35_LOGIT_ROWS × vocab floats when every position's logits are asked for. */
#define Q35_LOGIT_ROWS 8

/* The L2 norm's epsilon inside the gated delta rule (HF's l2norm). */
#define Q35_L2_EPS 1e-6f

typedef mi_glue_weight q35_weight; /* buf NULL when borrowed (tied lm_head) */

/* One decoder layer. `full` picks the mixer; the other kind's weights stay
 * empty. Matrices keep the file's dtype; vectors are f32. */
typedef struct q35_layer {
  int full;             /* 1 full_attention, 0 linear_attention (gated DeltaNet) */
  int64_t kv_slot;      /* full: index among the full layers (its KV cache) */
  int64_t st_slot;      /* linear: index among the DeltaNet layers (its states) */
  q35_weight attn_norm; /* [H] f32, zero-centred: used as 1 + w */
  q35_weight ffn_norm;  /* [H] f32, zero-centred */
  /* full attention */
  q35_weight wq;             /* [nh·2·hd, H] per head: hd query rows, then hd gate rows */
  q35_weight wk, wv;         /* [nkv·hd, H] */
  q35_weight wo;             /* [H, nh·hd] */
  q35_weight q_norm, k_norm; /* [hd] f32, zero-centred */
  /* gated DeltaNet */
  q35_weight w_qkv;          /* [C = 2·Kh·Dk + Vh·Dv, H] rows q | k | v */
  q35_weight w_z;            /* [Vh·Dv, H] */
  q35_weight w_b, w_a;       /* [Vh, H] */
  q35_weight conv_w;         /* [C, K] f32 (stored [C, 1, K]) */
  q35_weight dt_bias, a_log; /* [Vh] f32 */
  q35_weight lin_norm;       /* [Dv] f32, not zero-centred (gated RMSNorm) */
  q35_weight w_out;          /* [H, Vh·Dv] */
  /* MLP */
  q35_weight wg, wu; /* [F, H] */
  q35_weight wd;     /* [H, F] */
} q35_layer;

/* Scratch of one forward chunk of B ≤ batch tokens; shapes in tokens B. */
typedef struct q35_scratch {
  mi_buffer *b_x, *b_h, *b_o, *b_qg, *b_q, *b_gate, *b_att, *b_u, *b_cv, *b_lq, *b_lk, *b_lv, *b_z,
      *b_core, *b_ba, *b_aa, *b_beta, *b_g, *b_mg, *b_mu, *b_logits, *b_ids, *b_pos, *b_kn, *b_vn;
  float *x;       /* [B, H] residual stream */
  float *h;       /* [B, H] normed input of a block */
  float *o;       /* [B, H] block output before the residual add */
  float *qg;      /* [B, nh, 2, hd] q_proj output: query | gate per head */
  float *q;       /* [B, nh, hd] queries */
  float *gate;    /* [B, nh, hd] output gate (pre-sigmoid) */
  float *att;     /* [B, nh, hd] attention output */
  float *u;       /* [B, C] in_proj_qkv output */
  float *cv;      /* [B, C] after the causal conv and SiLU */
  float *lq;      /* [B, Kh, Dk] DeltaNet queries (l2-normed, scaled) */
  float *lk;      /* [B, Kh, Dk] DeltaNet keys (l2-normed) */
  float *lv;      /* [B, Vh, Dv] DeltaNet values */
  float *z;       /* [B, Vh, Dv] in_proj_z output (the norm's gate) */
  float *core;    /* [B, Vh, Dv] delta-rule output, then gated-normed */
  float *ba;      /* [B, Vh] in_proj_b output */
  float *aa;      /* [B, Vh] in_proj_a output */
  float *beta;    /* [B, Vh] sigmoid(b) */
  float *g;       /* [B, Vh] log decay */
  float *mg;      /* [B, F] MLP gate, then silu(gate)·up */
  float *mu;      /* [B, F] MLP up */
  float *logits;  /* [Q35_LOGIT_ROWS, V] */
  int32_t *ids;   /* [B] token ids (device) */
  int32_t *pos;   /* [B] positions (device) */
  float *kn, *vn; /* [B, nkv, hd] a batched decode step's new keys/values, before each goes
                     to its own sequence's cache */
} q35_scratch;

struct mi_model {
  /* the host, the platform (P, pc) and the weights: binding weights and
   * scratch (mi/model_glue.h), and every kernel call */
  mi_glue glue;
  char *model_dir;    /* glue.model_dir, owned */
  const char *prefix; /* "model." or "model.language_model." (wrapped layout) */
  qwen35_config cfg;
  int64_t n_lin;       /* DeltaNet layers */
  int64_t conv_dim;    /* C = 2·Kh·Dk + Vh·Dv */
  int64_t batch;       /* tokens per forward chunk (prefill batch) */
  uint64_t mem_budget; /* option mem_budget: host bytes left for the scratch (0: unchecked) */
  q35_weight embed, final_norm, lm_head;
  q35_layer *layers; /* [n_layers] */
  q35_scratch s;
  int32_t *pos_host; /* [batch] */
  mi_buffer *b_zero; /* zeros, one DeltaNet layer's largest state: resets states */
  void *zero;
  size_t zero_bytes;
  uint64_t weight_bytes;
};

/* A sequence: the KV cache of the full-attention layers (grows with the
 * context) and the fixed-size states of the DeltaNet layers. */
struct mi_seq {
  int64_t n_ctx;
  int64_t len;
  /* 1 after a kernel failed mid-forward: the DeltaNet states may hold part
   * of a step and cannot be rolled back, so forwards are refused until
   * seq_truncate(0) */
  int broken;
  mi_buffer *b_kv;
  float *kv; /* [n_full][K|V][n_ctx, nkv·hd] f32 */
  mi_buffer *b_state;
  float *conv; /* [n_lin][K-1, C] the last K-1 conv inputs, oldest first */
  float *rec;  /* [n_lin][Vh, Dk, Dv] the delta rule's state */
};

typedef struct mi_model qwen35_model;
typedef struct mi_seq qwen35_seq;

int qwen35_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen35_model **out,
                      char *err, size_t err_len);
void qwen35_model_free(qwen35_model *m);
int qwen35_seq_create(qwen35_model *m, int64_t n_ctx, qwen35_seq **out, char *err, size_t err_len);
void qwen35_seq_destroy(qwen35_model *m, qwen35_seq *s);
/* Zeroes the DeltaNet states (the KV cache needs nothing: rows past len are
 * overwritten). 0, or -1 with the platform's error in err. */
int qwen35_seq_reset(qwen35_model *m, qwen35_seq *s, char *err, size_t err_len);
/* mi_model_iface seq_state_read / seq_state_write (ABI 1.5, prefix caching) */
int qwen35_seq_state_read(qwen35_model *m, qwen35_seq *s, int64_t pos, int64_t n, void *dst,
                          void *fixed_dst, char *err, size_t err_len);
int qwen35_seq_state_write(qwen35_model *m, qwen35_seq *s, int64_t pos, int64_t n, const void *src,
                           const void *fixed_src, char *err, size_t err_len);
int qwen35_forward(qwen35_model *m, qwen35_seq *s, const int32_t *ids, int64_t n, float *logits,
                   int all_logits, char *err, size_t err_len);
int qwen35_forward_batch(qwen35_model *m, qwen35_seq *const *seqs, const int32_t *ids, int64_t n,
                         float *const *logits, char *err, size_t err_len);

/* Bytes of one sequence's DeltaNet states (conv + recurrent, f32). */
static inline uint64_t q35_state_bytes(const qwen35_model *m) {
  const qwen35_config *c = &m->cfg;
  return (uint64_t)m->n_lin *
         ((uint64_t)(c->conv_k - 1) * (uint64_t)m->conv_dim +
          (uint64_t)(c->lin_vh * c->lin_dk * c->lin_dv)) *
         sizeof(float);
}

#endif
