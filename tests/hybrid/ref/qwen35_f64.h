/* A hand-written float64 model of the Qwen3.5/3.6-style hybrid with a
 * sequence state, for the tests that decode token by token (the
 * verifier's stages interpret the model contract instead: interp.h).
 * A sequence carries what the runtime will have to carry: a KV cache per
 * full-attention layer, a conv state [K-1, C] and a recurrent state
 * [Hv, Dk, Dv] per gated-DeltaNet layer. docs/hybrid.md has the math. */
#ifndef MI_TESTS_HYBRID_REF_QWEN35_F64_H
#define MI_TESTS_HYBRID_REF_QWEN35_F64_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct mi_weights;

typedef struct vf_qwen35 vf_qwen35;
typedef struct vf_qwen35_seq vf_qwen35_seq;

/* Reads and checks the shape from config.json; 0, or -1 with a message
 * naming the field. The weights stay owned by the caller. */
int vf_qwen35_open(const json_t *cfg, const struct mi_weights *w, vf_qwen35 **out, char *err,
                   size_t err_len);
void vf_qwen35_close(vf_qwen35 *m);
int vf_qwen35_vocab(const vf_qwen35 *m);

/* Variant knobs (the evolution loop's variant search used them before it
 * interpreted edited contracts): the same checkpoint read under another
 * hypothesis of the math. The defaults (vf_qwen35_open) are the true model. */
typedef enum vf_q35_qk_norm { VF_Q35_QK_1W = 0, VF_Q35_QK_W, VF_Q35_QK_NONE } vf_q35_qk_norm;
typedef enum vf_q35_gate {
  VF_Q35_GATE_INTERLEAVED = 0, /* q_proj per head: hd query rows, then hd gate rows */
  VF_Q35_GATE_HALF,            /* q_proj: all query rows, then all gate rows */
  VF_Q35_GATE_NONE             /* the first heads*hd rows are the query (how a Qwen3 contract reads it); no gate */
} vf_q35_gate;
typedef struct vf_qwen35_variant {
  double norm_offset;  /* layer and final RMSNorms multiply by (w + norm_offset): 1 (true) or 0 */
  vf_q35_qk_norm qk;   /* q_norm/k_norm: 1+w (true), w, or none */
  int full_rotary;     /* 0: partial_rotary_factor·head_dim channels (true); 1: all head_dim */
  vf_q35_gate gate;    /* the attention output gate's layout (true: interleaved) */
} vf_qwen35_variant;
void vf_qwen35_variant_default(vf_qwen35_variant *v);
void vf_qwen35_set_variant(vf_qwen35 *m, const vf_qwen35_variant *v);

/* An empty sequence holding up to `capacity` positions; NULL on OOM. */
vf_qwen35_seq *vf_qwen35_seq_new(const vf_qwen35 *m, int capacity);
void vf_qwen35_seq_free(vf_qwen35_seq *s);

/* Appends ids[T] to s and writes the logits of its last n_out positions to
 * logits [n_out, V]. chunk = 0 runs the DeltaNet layers one token at a time
 * (the recurrent form); chunk > 0 runs them in chunks of that many tokens
 * (the chunked form). max_score (may be NULL) keeps the largest scaled
 * attention score. 0, or -1 with a message. The first call keeps the
 * embedding and lm_head widened to float64 in m (freed by close). */
int vf_qwen35_forward(vf_qwen35 *m, vf_qwen35_seq *s, const int32_t *ids, int T, int n_out,
                      double *logits, int chunk, double *max_score, char *err, size_t err_len);

#endif
