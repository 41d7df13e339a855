/* The float64 reference of the Qwen3.5/3.6-style hybrid with a sequence
 * state, for tests that decode token by token (the model driver in
 * qwen35.c, vf_model_qwen35, recomputes from scratch like every driver).
 * A sequence carries what the runtime will have to carry: a KV cache per
 * full-attention layer, a conv state [K-1, C] and a recurrent state
 * [Hv, Dk, Dv] per gated-DeltaNet layer. docs/hybrid.md has the math. */
#ifndef MI_CORE_VERIFY_MODELS_QWEN35_H
#define MI_CORE_VERIFY_MODELS_QWEN35_H

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
