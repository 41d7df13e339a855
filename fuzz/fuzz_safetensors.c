/* Fuzzes one .safetensors file: the 8-byte header length, the JSON header
 * (dtypes, shapes, data_offsets, __metadata__) and the tiling check.
 * Input, two forms:
 *   - starts with '{': "JSON header" [NUL data...] — the harness writes the
 *     8-byte length itself, so mutations explore the header's meaning
 *     instead of mostly breaking the length;
 *   - anything else: the whole file as is (length prefix included).
 * On success every tensor the reader hands out must lie inside the data
 * section with nbytes = product(shape) x dtype size. */
#include "fuzz_util.h"

#include "core/runtime/safetensors.h"

static unsigned dtype_size(const char *s) {
  static const struct { const char *n; unsigned sz; } t[] = {
      {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"I64", 8},
      {"U8", 1},  {"F64", 8}, {"I8", 1},   {"I16", 2}, {"U16", 2},
      {"U32", 4}, {"U64", 8}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (!strcmp(s, t[i].n)) return t[i].sz;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *built = NULL;
  if (size && data[0] == '{') {
    const uint8_t *nul = memchr(data, 0, size);
    size_t hl = nul ? (size_t)(nul - data) : size, dl = nul ? size - hl - 1 : 0;
    built = malloc(8 + hl + dl);
    if (!built) abort();
    for (int b = 0; b < 8; b++) built[b] = (uint8_t)((uint64_t)hl >> (8 * b));
    memcpy(built + 8, data, hl);
    if (dl) memcpy(built + 8 + hl, nul + 1, dl);
    data = built;
    size = 8 + hl + dl;
  }
  const char *path = fuzz_memfile(data, size);
  char err[512] = "";
  mi_st_file *f = mi_st_open_file(path, err, sizeof err);
  if (!f) {
    fuzz_check_one_line("mi_st_open_file", err);
    free(built);
    return 0;
  }
  uint64_t hlen = 0;
  for (int b = 0; b < 8; b++) hlen |= (uint64_t)data[b] << (8 * b);
  FUZZ_CHECK(hlen <= size - 8, "accepted header length %llu", (unsigned long long)hlen);
  uint64_t data_len = size - 8 - hlen, covered = 0;
  for (size_t i = 0; i < mi_st_count(f); i++) {
    mi_weight_info w;
    FUZZ_CHECK(mi_st_at(f, i, &w) == 0, "mi_st_at(%zu)", i);
    /* The mapping is a copy of the input: offsets compare against it. */
    FUZZ_CHECK(w.ndim >= 0 && w.ndim <= MI_ST_MAX_DIMS, "ndim %d", w.ndim);
    unsigned ds = dtype_size(mi_st_dtype_string(f, i));
    FUZZ_CHECK(ds > 0, "dtype '%s'", mi_st_dtype_string(f, i));
    uint64_t count = 1;
    for (int d = 0; d < w.ndim; d++) count *= (uint64_t)w.shape[d];
    FUZZ_CHECK(count * ds == w.nbytes, "tensor '%s': nbytes %zu", w.name, w.nbytes);
    FUZZ_CHECK(w.nbytes <= data_len, "tensor '%s' larger than the data", w.name);
    covered += w.nbytes;
    /* touch the first and last byte: ASan/SEGV if the pointer is bad */
    if (w.nbytes) {
      volatile unsigned char a = ((const unsigned char *)w.data)[0];
      volatile unsigned char z = ((const unsigned char *)w.data)[w.nbytes - 1];
      (void)a, (void)z;
    }
    mi_weight_info w2;
    FUZZ_CHECK(mi_st_find(f, w.name, &w2) == 0 && w2.data == w.data, "find '%s'", w.name);
  }
  FUZZ_CHECK(covered == data_len, "tensors cover %llu of %llu data bytes",
             (unsigned long long)covered, (unsigned long long)data_len);
  (void)mi_st_metadata(f, "format");
  mi_st_close_file(f);

  /* The same bytes through the model-directory entry point (a single file). */
  mi_weights *w = mi_weights_open(path, err, sizeof err);
  FUZZ_CHECK(w != NULL, "mi_weights_open refused what mi_st_open_file took: %s", err);
  const char *prev = NULL;
  for (size_t i = 0; i < mi_weights_count(w); i++) {
    mi_weight_info wi;
    FUZZ_CHECK(mi_weights_at(w, i, &wi) == 0, "mi_weights_at(%zu)", i);
    FUZZ_CHECK(!prev || strcmp(prev, wi.name) < 0, "names not sorted/unique at %zu", i);
    prev = wi.name;
    FUZZ_CHECK(mi_weights_find(w, wi.name, NULL) == 0, "find '%s'", wi.name);
  }
  mi_weights_close(w);
  free(built);
  return 0;
}
