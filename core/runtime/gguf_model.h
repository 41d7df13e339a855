/* A GGUF file as a model input (docs/gguf.md): what the session needs from
 * it, built through the CKB rather than a table in the core.
 *
 * general.architecture picks the model contract (a CKB/models file) whose
 * "gguf" section names that architecture; the section says where each
 * config.json field comes from, which GGUF tensor is which Hugging Face
 * tensor, which tokenizer the file must hold and which tokens end a turn.
 * From it: a config.json object (what the model plugins take), the
 * tokenizer (built from the file's arrays, as the tokenizer.json they stand
 * for would give it: mi_tokenizer_load_arrays), the special ids and chat
 * template, and an mi_weights serving the mapped tensors under
 * their Hugging Face names, shapes reversed (GGUF ne[0] is innermost).
 * Tensors the model uses must be F32, F16, BF16 or one of the block types
 * sdk/include/mi/quant.h defines (Q8_0, Q4_0, Q4_K, Q6_K) today; any other
 * ggml type is one line naming the tensor and its type. The tokenizer is
 * a byte-level BPE (the section's "model", with merges and a pre-tokenizer
 * it knows) or a SentencePiece vocabulary (its "sentencepiece": scores for
 * merges, as llama.cpp reads one). A block-type matrix
 * is served as stored (MI_DTYPE_Q8_0, _Q4_0, _Q4_K, _Q6_K; no copy) when
 * its dtype's bit is in keep_blocks, which the session sets for the dtypes
 * its platform takes (mi_gguf_platform_blocks); otherwise, and for
 * block-type vectors, it is widened to f32 at load, exactly as
 * mi_quant_row_f32 defines each value. */
#ifndef MI_CORE_GGUF_MODEL_H
#define MI_CORE_GGUF_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/runtime/gguf.h"
#include "core/tokenizer/tokenizer.h"
#include "mi/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_gguf_model {
  mi_gguf *g;            /* owned until mi_gguf_model_weights hands it on */
  char *contract_path;   /* the model contract used */
  json_t *contract;      /* that contract */
  json_t *config;        /* config.json as the model plugins read it */
  mi_tokenizer *tok;     /* the file's tokenizer; the caller may take it (set NULL) */
  int32_t bos, eos, pad; /* tokenizer.ggml.*_token_id, -1 when absent */
  char *chat_template;   /* tokenizer.chat_template, or NULL */
  json_t *end_tokens;    /* the contract's gguf.end_tokens (borrowed), or NULL */
  /* Set before mi_gguf_model_weights. keep_blocks: bit (1u << dtype) set
   * serves 2-D tensors of that block dtype in place; clear (the default)
   * widens them to f32 for platforms whose kernels do not take it (Q8_0
   * 3.8x the bytes, Q4_0/Q4_K 7.1x, Q6_K 4.9x). mem_avail: host bytes the
   * weights may take, the file's and the widened ones together; 0 = not
   * checked (a GPU's memory is its plugin's to check). */
  uint32_t keep_blocks;
  uint64_t mem_avail;
} mi_gguf_model;

/* The CKB folder the runtime reads contracts from: $MI_CKB_DIR, ./ckb,
 * <exe>/../share/metainfer/ckb, <exe>/../../ckb (the rule of
 * mi_ckb_default_dir). buf, or NULL with what was tried in buf. */
const char *mi_gguf_ckb_dir(char *buf, size_t n);

/* Opens and validates path, finds its contract under ckb_dir, builds the
 * config object and the tokenizer. 0, or -1 with "PATH: problem". */
int mi_gguf_model_open(const char *path, const char *ckb_dir, mi_weights_load how,
                       mi_gguf_model **out, char *err, size_t err_len);
/* The same without the tokenizer (tok NULL, the special ids -1): what
 * reading the config and the weights needs, ~0.4 s less for a 152k vocabulary. */
int mi_gguf_model_open_config(const char *path, const char *ckb_dir, mi_weights_load how,
                              mi_gguf_model **out, char *err, size_t err_len);
/* The same from an open reader and a contract (g is taken, closed on
 * failure too); contract_path names the contract in messages. */
int mi_gguf_model_from(mi_gguf *g, json_t *contract, const char *contract_path, mi_gguf_model **out,
                       char *err, size_t err_len);

/* The tokenizer g holds, read as a contract's gguf.tokenizer section (spec)
 * says, without the model (a vocab-only file, a tool that only
 * tokenizes): eos, bos, pad and the chat template from the file. NULL with
 * "PATH: problem". */
mi_tokenizer *mi_gguf_tokenizer(const mi_gguf *g, json_t *spec, char *err, size_t err_len);

/* The weights, by Hugging Face name; the reader moves into them (m->g is
 * NULL after a success). NULL + err: e.g. "PATH: tensor 'blk.0.attn_q.weight'
 * (model.layers.0.self_attn.q_proj.weight) has ggml type Q4_K: ...". */
mi_weights *mi_gguf_model_weights(mi_gguf_model *m, char *err, size_t err_len);

void mi_gguf_model_close(mi_gguf_model *m);

/* The file's tensor that serves the Hugging Face name hf (before
 * mi_gguf_model_weights takes the reader), its dtype in *dtype (an mi_dtype,
 * -1 for a ggml type MetaInfer does not read); NULL when none does. */
const mi_gguf_tensor *mi_gguf_model_tensor(const mi_gguf_model *m, const char *hf, int *dtype);
/* What the load adds to t's stored values (its gguf.transforms "add": -1 for
 * a norm stored as 1 + w), 0 when nothing: served = stored + this. */
double mi_gguf_model_tensor_shift(const mi_gguf_model *m, const mi_gguf_tensor *t);

/* Does this platform take weights of block dtype dt in matmul and tables of
 * it in embed? Asked, not assumed: an empty call of each (M = N = 0, T = 0)
 * with that dtype, which a platform answers 0 only if it knows the dtype
 * (the ABI: an unsupported dtype is refused before anything else). 1 yes,
 * 0 no (also for a dtype that is not a block type). */
int mi_gguf_platform_takes(const mi_platform_iface *P, void *ctx, mi_dtype dt);
/* The keep_blocks mask for this platform: every block dtype it takes; 0
 * when the environment has MI_GGUF_WIDEN=1 (widen them all: the exact path,
 * to compare a platform's kernels with). */
uint32_t mi_gguf_platform_blocks(const mi_platform_iface *P, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
