/* Safetensors reader: a model's weight files, mmapped read-only (or read
 * into huge pages) and validated in full before any pointer is handed out.
 *
 * File format (https://github.com/huggingface/safetensors): u64 little-endian
 * header length N, N bytes of JSON header {name: {dtype, shape, data_offsets},
 * "__metadata__": {str: str}}, then the data section; data_offsets are
 * [begin, end) relative to the start of the data section.
 *
 * Data pointers are as aligned as the writer made them: the data section
 * starts 8 + N bytes into a page-aligned mapping, and Hugging Face (and
 * mi-mkmodel) pad N to a multiple of 8, but the format does not require it;
 * a reader that needs alignment must check (or memcpy).
 *
 * Every error is one line "PATH: problem" written into err (never a crash). */
#ifndef MI_CORE_SAFETENSORS_H
#define MI_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"
#include "mi/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits that keep a hostile header from costing unbounded time or memory. */
/* Header bytes. Real headers are ~150 bytes per tensor (a 70B shard: well
 * under 1 MiB); Hugging Face allows 100 MB, but jansson needs up to ~22x a
 * file's size while parsing, so a hostile 100 MB header would cost 2.25 GB.
 * 16 MiB (> 100k tensors) bounds that at ~360 MB. */
#define MI_ST_MAX_HEADER (16u << 20)
#define MI_ST_MAX_TENSORS 1000000u
#define MI_ST_MAX_NAME 1024u /* bytes of a tensor name */
#define MI_ST_MAX_DIMS 8

/* mi_weight_info.dtype for a tensor whose safetensors dtype has no mi_dtype
 * (F64, I8, I16, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2): the data is still
 * valid and nbytes exact; mi_st_dtype_string() says what it is. */
#define MI_ST_DTYPE_OTHER (-1)

/* How a file's bytes get into memory. */
typedef enum mi_weights_load {
  /* mmap the file (read-only, pre-faulted): no copy, pages shared with the
   * page cache and other processes, but 4 KiB pages. */
  MI_WEIGHTS_MMAP = 0,
  /* read it into private memory aligned to 2 MiB and advised for
   * transparent huge pages: one copy at load time, and then far fewer TLB
   * misses while kernels stream the weights (measured here, CPU decode of
   * the 0.6B test shape: ~14% faster than from the mapping). */
  MI_WEIGHTS_READ = 1,
} mi_weights_load;

/* ---- one file ----------------------------------------------------------- */

typedef struct mi_st_file mi_st_file;

/* Opens, loads (mmap) and validates one .safetensors file. NULL + err on error. */
mi_st_file *mi_st_open_file(const char *path, char *err, size_t err_len);
mi_st_file *mi_st_open_file_ex(const char *path, mi_weights_load how, char *err, size_t err_len);
void mi_st_close_file(mi_st_file *f);

const char *mi_st_path(const mi_st_file *f);
size_t mi_st_count(const mi_st_file *f);
/* Tensors in the order of their data_offsets. 0 ok, -1 out of range. */
int mi_st_at(const mi_st_file *f, size_t i, mi_weight_info *out);
int mi_st_find(const mi_st_file *f, const char *name, mi_weight_info *out); /* 0 found, -1 not */
/* The safetensors dtype string ("BF16", "F64", ...) of tensor i, or NULL. */
const char *mi_st_dtype_string(const mi_st_file *f, size_t i);
/* A "__metadata__" value, or NULL. */
const char *mi_st_metadata(const mi_st_file *f, const char *key);

/* ---- a model directory --------------------------------------------------- */

/* model_dir holds model.safetensors, or model.safetensors.index.json naming
 * several shards (model_dir may also be the path of one .safetensors file).
 * With an index only the tensors in its weight_map are visible. */
mi_weights *mi_weights_open(const char *model_dir, char *err, size_t err_len); /* mmap */
mi_weights *mi_weights_open_ex(const char *model_dir, mi_weights_load how, char *err,
                               size_t err_len);
void mi_weights_close(mi_weights *w);

/* These three match mi_host_api's weights_* members. Tensors are in name
 * order (strcmp); lookup is a binary search. */
int mi_weights_find(const mi_weights *w, const char *name, mi_weight_info *out); /* 0 found, -1 not */
size_t mi_weights_count(const mi_weights *w);
int mi_weights_at(const mi_weights *w, size_t i, mi_weight_info *out); /* 0 ok, -1 out of range */

/* A weight set served from a table another reader built (the GGUF reader,
 * core/runtime/gguf.h): infos are copied (their names and data must live
 * as long as owner); owner_close(owner) runs at mi_weights_close. Two
 * entries with one name: NULL + "PATH: problem". */
mi_weights *mi_weights_from_table(const mi_weight_info *infos, size_t n, void *owner,
                                  void (*owner_close)(void *owner), const char *path, char *err,
                                  size_t err_len);

/* A weight file in memory, as the readers here load it: mmapped read-only
 * (pre-faulted, guarded: a truncation while mapped is one line and exit 1,
 * not a SIGBUS) or read into huge pages (MI_WEIGHTS_READ). A file under
 * min_size bytes: "PATH: file too small (N bytes; MIN_WHY)". 0, or -1 + err. */
int mi_weights_map_file(const char *path, mi_weights_load how, uint64_t min_size,
                        const char *min_why, void **map, size_t *map_len, uint64_t *size,
                        char *err, size_t err_len);
void mi_weights_unmap_file(void *map, size_t map_len);

/* Sum of every visible tensor's nbytes. */
uint64_t mi_weights_total_bytes(const mi_weights *w);

#ifdef __cplusplus
}
#endif
#endif
