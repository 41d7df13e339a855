/* A model input: a Hugging Face folder or a GGUF file (model_input.h). */
#include "core/runtime/model_input.h"

#include <stdio.h>

#include "core/runtime/gguf.h"
#include "core/runtime/gguf_model.h"
#include "core/util/file.h"

int mi_model_input_is_gguf(const char *path) {
  return path && mi_gguf_sniff(path) == 1;
}

uint32_t mi_model_input_all_blocks(void) {
  uint32_t m = 0;
  for (int d = 0; d < MI_DTYPE_COUNT; d++)
    if (mi_dtype_is_block((mi_dtype)d)) m |= 1u << d;
  return m;
}

const char *mi_model_input_config_name(const char *path, char *buf, size_t n) {
  if (mi_model_input_is_gguf(path))
    snprintf(buf, n, "%s", path);
  else
    snprintf(buf, n, "%s/config.json", path);
  return buf;
}

mi_gguf_model *mi_model_input_open_gguf(const char *path, char *err, size_t err_len) {
  char ckb[4096];
  if (!mi_gguf_ckb_dir(ckb, sizeof ckb)) {
    snprintf(err, err_len, "%s: %s", path, ckb);
    return NULL;
  }
  mi_gguf_model *m = NULL;
  if (mi_gguf_model_open_config(path, ckb, MI_WEIGHTS_MMAP, &m, err, err_len) != 0) return NULL;
  return m;
}

int mi_model_input_encode_prompt(const char *path, const char *text, int32_t **ids, size_t *n, char *err,
                                 size_t err_len) {
  *ids = NULL;
  *n = 0;
  mi_tokenizer *tok = NULL;
  mi_gguf_model *m = NULL;
  char ckb[4096], p[4200];
  if (mi_model_input_is_gguf(path)) {
    if (!mi_gguf_ckb_dir(ckb, sizeof ckb)) {
      snprintf(err, err_len, "%s: %s", path, ckb);
      return -1;
    }
    if (mi_gguf_model_open(path, ckb, MI_WEIGHTS_MMAP, &m, err, err_len) != 0) return -1;
    tok = m->tok;
  } else {
    snprintf(p, sizeof p, "%s/tokenizer.json", path);
    if (!(tok = mi_tokenizer_load(p, err, err_len))) return -1;
  }
  int rc = mi_tokenizer_encode_prompt(tok, text, strlen(text), 1, ids, n);
  if (rc) snprintf(err, err_len, "%s: encoding '%.40s': %s", path, text, mi_tokenizer_strerror(rc));
  if (m) mi_gguf_model_close(m);
  else mi_tokenizer_free(tok);
  return rc ? -1 : 0;
}

json_t *mi_model_input_config(const char *path, size_t jflags, char *err, size_t err_len) {
  if (!mi_model_input_is_gguf(path)) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", path);
    return mi_file_load_json(p, 0, MI_CONFIG_JSON_MAX_BYTES, "config.json", jflags, err, err_len);
  }
  mi_gguf_model *m = mi_model_input_open_gguf(path, err, err_len);
  json_t *cfg = m ? json_incref(m->config) : NULL;
  mi_gguf_model_close(m);
  return cfg;
}

mi_weights *mi_model_input_weights(const char *path, uint32_t keep_blocks, char *err,
                                   size_t err_len) {
  if (!mi_model_input_is_gguf(path)) return mi_weights_open(path, err, err_len);
  mi_gguf_model *m = mi_model_input_open_gguf(path, err, err_len);
  if (!m) return NULL;
  m->keep_blocks = keep_blocks;
  mi_weights *w = mi_gguf_model_weights(m, err, err_len);
  mi_gguf_model_close(m);
  return w;
}
