/* Fuzzes one GGUF file (core/runtime/gguf.h): header, metadata values of
 * every type, tensor infos, alignment, extents and overlap; then, when it
 * parses, the model built from it through the qwen3 contract
 * (core/runtime/gguf_model.h): the config, the tokenizer.json built from
 * tokenizer.ggml.* and loaded, and the weights by Hugging Face name.
 * Invariants: an error is one line; every accessor stays inside the input;
 * every tensor handed out lies inside the data with the bytes its type and
 * shape take, and no two overlap. Seeds: fuzz/corpus/gguf/ (a minimal file,
 * every value type, a one-layer model that mi-run runs). */
#include "fuzz_util.h"

#include <jansson.h>

#include "core/runtime/gguf.h"
#include "core/runtime/gguf_model.h"
#include "core/tokenizer/tokenizer.h"

static json_t *g_contract;

static void check_reader(const mi_gguf *g, const uint8_t *base, size_t size) {
  for (size_t i = 0; i < mi_gguf_kv_count(g); i++) {
    const mi_gguf_kv *kv = mi_gguf_kv_at(g, i);
    FUZZ_CHECK(mi_gguf_get(g, kv->key) == kv, "lookup of key '%s'", kv->key);
    int64_t v;
    double d;
    (void)mi_gguf_kv_int(kv, &v);
    (void)mi_gguf_kv_real(kv, &d);
    size_t n;
    const char *s = mi_gguf_kv_str(kv, &n);
    if (s)
      FUZZ_CHECK((const uint8_t *)s >= base && (const uint8_t *)s + n <= base + size, "string");
    if (kv->type == MI_GGUF_ARRAY)
      for (uint64_t k = 0; k < kv->n && k < 4096; k++) {
        if (mi_gguf_arr_str(kv, k, &s, &n) == 0)
          FUZZ_CHECK((const uint8_t *)s >= base && (const uint8_t *)s + n <= base + size,
                     "array string %llu of '%s'", (unsigned long long)k, kv->key);
        (void)mi_gguf_arr_int(kv, k, &v);
      }
  }
  const uint8_t *prev_end = NULL;
  (void)prev_end;
  for (size_t i = 0; i < mi_gguf_tensor_count(g); i++) {
    const mi_gguf_tensor *t = mi_gguf_tensor_at(g, i);
    FUZZ_CHECK(mi_gguf_tensor_find(g, t->name) == t, "lookup of tensor '%s'", t->name);
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= MI_GGUF_MAX_DIMS, "n_dims %u", t->n_dims);
    if (!t->known) {
      FUZZ_CHECK(t->data == NULL && mi_gguf_type_name(t->type) == NULL, "unknown type %u", t->type);
      continue;
    }
    FUZZ_CHECK(t->nbytes <= size, "tensor '%s' larger than the file", t->name);
    if (t->nbytes) {
      const uint8_t *p = t->data;
      FUZZ_CHECK(p >= base && p + t->nbytes <= base + size, "tensor '%s' outside the file",
                 t->name);
      volatile uint8_t a = p[0], z = p[t->nbytes - 1];
      (void)a, (void)z;
    }
    for (size_t j = 0; j < i; j++) {
      const mi_gguf_tensor *u = mi_gguf_tensor_at(g, j);
      if (!u->known || !u->nbytes || !t->nbytes) continue;
      FUZZ_CHECK(u->offset + u->nbytes <= t->offset || t->offset + t->nbytes <= u->offset,
                 "tensors '%s' and '%s' overlap", u->name, t->name);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512] = "";
  if (!g_contract) {
    g_contract = json_load_file(MI_FUZZ_SOURCE_DIR "/ckb/models/qwen3.json", 0, NULL);
    FUZZ_CHECK(g_contract != NULL, "cannot read the qwen3 contract");
  }
  /* in memory (a copy, so ASan sees reads past the end) */
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) abort();
  memcpy(copy, data, size);
  mi_gguf *g = mi_gguf_open_mem(copy, size, "mem.gguf", err, sizeof err);
  if (!g) {
    fuzz_check_one_line("mi_gguf_open_mem", err);
    free(copy);
    return 0;
  }
  check_reader(g, copy, size);
  mi_gguf_close(g);
  free(copy);

  /* the same bytes as a file, mapped; then the model over it */
  const char *path = fuzz_memfile(data, size);
  g = mi_gguf_open(path, MI_WEIGHTS_MMAP, err, sizeof err);
  FUZZ_CHECK(g != NULL, "the file was refused where the bytes were taken: %s", err);
  mi_gguf_model *m;
  if (mi_gguf_model_from(g, g_contract, "qwen3.json", &m, err, sizeof err) != 0) {
    fuzz_check_one_line("mi_gguf_model_from", err);
    return 0;
  }
  /* the tokenizer, built from the file's arrays (m keeps it) */
  mi_tokenizer *t = m->tok;
  FUZZ_CHECK(t != NULL, "mi_gguf_model_from succeeded without a tokenizer");
  if (mi_tokenizer_set_config(t, m->eos, m->bos, m->pad, m->chat_template, path, err, sizeof err))
    fuzz_check_one_line("mi_tokenizer_set_config", err);
  int32_t *ids = NULL;
  size_t n = 0;
  if (mi_tokenizer_encode(t, "hi <|im_end|> x", 15, 1, &ids, &n) == 0) {
    char *s = mi_tokenizer_decode(t, ids, n, NULL, NULL);
    free(s);
  }
  free(ids);
  mi_weights *w = mi_gguf_model_weights(m, err, sizeof err);
  if (!w) {
    fuzz_check_one_line("mi_gguf_model_weights", err);
  } else {
    for (size_t i = 0; i < mi_weights_count(w); i++) {
      mi_weight_info wi;
      FUZZ_CHECK(mi_weights_at(w, i, &wi) == 0, "mi_weights_at(%zu)", i);
      FUZZ_CHECK(mi_weights_find(w, wi.name, NULL) == 0, "find '%s'", wi.name);
      uint64_t count = 1;
      for (int d = 0; d < wi.ndim; d++)
        count *= (uint64_t)wi.shape[d];
      FUZZ_CHECK(count * (wi.dtype == 0 ? 4 : 2) == wi.nbytes, "'%s': nbytes %zu", wi.name,
                 wi.nbytes);
    }
    mi_weights_close(w);
  }
  mi_gguf_model_close(m);
  return 0;
}
