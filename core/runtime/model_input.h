/* A model input as every tool takes it (-m, --model): a Hugging Face folder
 * (config.json and safetensors, the first input) or a GGUF file, read
 * through the model contract whose gguf section names its architecture
 * (core/runtime/gguf_model.h, docs/gguf.md). Tools that only need the
 * config or the weights (the CKB's coverage, the verifier's stages, mi-gen)
 * open either through these, so a GGUF file is a model like a folder. */
#ifndef MI_CORE_MODEL_INPUT_H
#define MI_CORE_MODEL_INPUT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/runtime/gguf_model.h"
#include "core/runtime/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when path is a GGUF file (by its magic, not its name), else 0. */
int mi_model_input_is_gguf(const char *path);

/* The config.json object (new reference): the folder's file (jflags as
 * json_loads takes them, e.g. JSON_REJECT_DUPLICATES), or the one the GGUF's
 * model contract builds from its metadata. NULL with one line in err. */
json_t *mi_model_input_config(const char *path, size_t jflags, char *err, size_t err_len);

/* The weights under their Hugging Face names. For a GGUF file, block-type
 * matrices whose dtype bit (1u << dtype) is in keep_blocks are served as
 * stored, the others widened to f32 (mi_quant_row_f32); a folder ignores
 * keep_blocks. NULL with one line in err. */
mi_weights *mi_model_input_weights(const char *path, uint32_t keep_blocks, char *err,
                                   size_t err_len);

/* The GGUF file's model (config and weights, no tokenizer) through the CKB
 * the runtime reads ($MI_CKB_DIR first: mi-gen and mi-verify set it to
 * theirs); mi_gguf_model_close frees it. NULL with one line in err. */
mi_gguf_model *mi_model_input_open_gguf(const char *path, char *err, size_t err_len);

/* text as the model's tokenizer encodes a prompt (mi-run -p: special
 * tokens parsed, the BOS its tokenizer puts first; mi_tokenizer_encode_prompt)
 * into *ids (malloc'd) and *n. 0, or -1 with one line in err. */
int mi_model_input_encode_prompt(const char *path, const char *text, int32_t **ids, size_t *n, char *err,
                                 size_t err_len);

/* keep_blocks for every block dtype: weights read as stored (names, shapes,
 * dtypes: the CKB's checks), nothing widened. */
uint32_t mi_model_input_all_blocks(void);

/* What names the config in messages: "DIR/config.json", or the GGUF path. */
const char *mi_model_input_config_name(const char *path, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
