/* A GGUF file as a model input (docs/gguf.md): what the session needs from
 * it, built through the CKB rather than a table in the core.
 *
 * general.architecture picks the model contract (a CKB/models file) whose
 * "gguf" section names that architecture; the section says where each
 * config.json field comes from, which GGUF tensor is which Hugging Face
 * tensor, which tokenizer the file must hold and which tokens end a turn.
 * From it: a config.json object (what the model plugins take), a
 * tokenizer.json object (what the tokenizer loader takes), the special ids
 * and chat template, and an mi_weights serving the mapped tensors under
 * their Hugging Face names, shapes reversed (GGUF ne[0] is innermost).
 * Tensors the model uses must be F32, F16, BF16 or Q8_0 today; any other
 * ggml type is one line naming the tensor and its type. Q8_0 matrices are
 * served as MI_DTYPE_Q8_0 (no copy) when keep_q8_0 is set, which the
 * session does when its platform takes them (mi_gguf_platform_takes_q8_0);
 * otherwise, and for Q8_0 vectors, they are widened to f32 at load. */
#ifndef MI_CORE_GGUF_MODEL_H
#define MI_CORE_GGUF_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/runtime/gguf.h"
#include "mi/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_gguf_model {
  mi_gguf *g;            /* owned until mi_gguf_model_weights hands it on */
  char *contract_path;   /* the model contract used */
  json_t *contract;      /* that contract */
  json_t *config;        /* config.json as the model plugins read it */
  json_t *tokenizer;     /* tokenizer.json as core/tokenizer reads it */
  int32_t bos, eos, pad; /* tokenizer.ggml.*_token_id, -1 when absent */
  char *chat_template;   /* tokenizer.chat_template, or NULL */
  json_t *end_tokens;    /* the contract's gguf.end_tokens (borrowed), or NULL */
  /* Set before mi_gguf_model_weights: 1 serves 2-D Q8_0 tensors in place as
   * MI_DTYPE_Q8_0; 0 (the default) widens them to f32 (exact, 3.8x the
   * bytes) for platforms whose kernels do not take Q8_0. */
  int keep_q8_0;
} mi_gguf_model;

/* The CKB folder the runtime reads contracts from: $MI_CKB_DIR, ./ckb,
 * <exe>/../share/metainfer/ckb, <exe>/../../ckb (the rule of
 * mi_ckb_default_dir). buf, or NULL with what was tried in buf. */
const char *mi_gguf_ckb_dir(char *buf, size_t n);

/* Opens and validates path, finds its contract under ckb_dir, builds the
 * config and tokenizer objects. 0, or -1 with "PATH: problem". */
int mi_gguf_model_open(const char *path, const char *ckb_dir, mi_weights_load how,
                       mi_gguf_model **out, char *err, size_t err_len);
/* The same from an open reader and a contract (g is taken, closed on
 * failure too); contract_path names the contract in messages. */
int mi_gguf_model_from(mi_gguf *g, json_t *contract, const char *contract_path, mi_gguf_model **out,
                       char *err, size_t err_len);

/* The weights, by Hugging Face name; the reader moves into them (m->g is
 * NULL after a success). NULL + err: e.g. "PATH: tensor 'blk.0.attn_q.weight'
 * (model.layers.0.self_attn.q_proj.weight) has ggml type Q4_K: ...". */
mi_weights *mi_gguf_model_weights(mi_gguf_model *m, char *err, size_t err_len);

void mi_gguf_model_close(mi_gguf_model *m);

/* Does this platform take Q8_0 weights in matmul and Q8_0 tables in embed?
 * Asked, not assumed: an empty call of each (M = N = 0, T = 0) with dtype
 * q8_0, which a platform answers 0 only if it knows the dtype (the ABI:
 * an unsupported dtype is refused before anything else). 1 yes, 0 no. */
int mi_gguf_platform_takes_q8_0(const mi_platform_iface *P, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
