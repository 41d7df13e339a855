/* GGUF reader: llama.cpp's single-file model format, mapped read-only (or
 * read into huge pages) and validated in full before any pointer is handed
 * out, like the safetensors reader beside it (safetensors.h).
 *
 * Format (GGUF v2 and v3, little-endian; written here from the format
 * description in ggml's docs/gguf.md and tools/peer/gguf_writer.mjs):
 *   "GGUF", u32 version, u64 tensor_count, u64 kv_count,
 *   kv_count x (string key, u32 value_type, value),
 *   tensor_count x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml_type,
 *                   u64 offset),
 *   padding to general.alignment (default 32), the data section.
 *   A string is u64 length + bytes (no NUL); an array is u32 element type,
 *   u64 count, the elements. ne[0] is the innermost dimension (the reverse
 *   of a PyTorch / Hugging Face shape); offsets are relative to the data
 *   section and multiples of the alignment.
 *
 * What is refused (one line "PATH: problem", never a crash): a file that
 * ends early, a version other than 2 or 3 (a big-endian file reads as a
 * huge version), counts past the limits below or past what the remaining
 * bytes could hold, strings past the end or over their limit, keys or
 * names with control characters, unknown value types, arrays of arrays,
 * a bool other than 0/1, a duplicate key or tensor name, n_dims outside
 * 1..4, shapes whose product overflows, a quantized tensor whose ne[0] is
 * not a multiple of its block, an offset that is misaligned or out of the
 * file, tensors that overlap, a bad general.alignment.
 *
 * A ggml type this reader does not know is kept (type number, no size):
 * the tensor is valid until something needs it (then its user says so). */
#ifndef MI_CORE_GGUF_H
#define MI_CORE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/runtime/safetensors.h" /* mi_weights_load */

#ifdef __cplusplus
extern "C" {
#endif

/* Limits against hostile headers (real files: ~40 keys, < 2000 tensors,
 * 150k-entry token arrays, chat templates of ~10 KB). */
#define MI_GGUF_MAX_KV 65536u
#define MI_GGUF_MAX_TENSORS 1000000u
#define MI_GGUF_MAX_KEY 65535u         /* bytes of a key (the spec's bound) */
#define MI_GGUF_MAX_NAME 256u          /* bytes of a tensor name (the spec says 64) */
#define MI_GGUF_MAX_STRING (64u << 20) /* bytes of one string value */
#define MI_GGUF_MAX_ARRAY (64u << 20)  /* elements of one array */
#define MI_GGUF_MAX_DIMS 4
#define MI_GGUF_MAX_ALIGNMENT (1u << 20)
#define MI_GGUF_DEFAULT_ALIGNMENT 32u

/* Metadata value types. */
enum {
  MI_GGUF_U8 = 0,
  MI_GGUF_I8 = 1,
  MI_GGUF_U16 = 2,
  MI_GGUF_I16 = 3,
  MI_GGUF_U32 = 4,
  MI_GGUF_I32 = 5,
  MI_GGUF_F32 = 6,
  MI_GGUF_BOOL = 7,
  MI_GGUF_STRING = 8,
  MI_GGUF_ARRAY = 9,
  MI_GGUF_U64 = 10,
  MI_GGUF_I64 = 11,
  MI_GGUF_F64 = 12,
};

/* ggml tensor types this project reads today. */
#define MI_GGML_F32 0u
#define MI_GGML_F16 1u
#define MI_GGML_BF16 30u
#define MI_GGML_Q8_0 8u /* blocks of 32: an f16 scale d, 32 int8 q; x = d * q */

typedef struct mi_gguf mi_gguf;

typedef struct mi_gguf_kv {
  const char *key;
  uint32_t type;           /* MI_GGUF_* */
  uint32_t arr_type;       /* an array's element type */
  uint64_t n;              /* an array's element count; a string's byte count */
  const unsigned char *p;  /* the value's bytes in the file (an array: its first element) */
  const uint64_t *str_off; /* an array of strings: each element's offset from p */
} mi_gguf_kv;

typedef struct mi_gguf_tensor {
  const char *name;
  uint32_t n_dims;
  uint64_t ne[MI_GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
  uint32_t type;                 /* the ggml type as stored */
  int known;                     /* the type's size is known (nbytes, data valid) */
  uint64_t offset;               /* within the data section */
  uint64_t nbytes;
  const void *data; /* NULL when !known */
} mi_gguf_tensor;

/* 1 when path is a regular file that starts with "GGUF"; never blocks on
 * a FIFO or a device. */
int mi_gguf_sniff(const char *path);

mi_gguf *mi_gguf_open(const char *path, mi_weights_load how, char *err, size_t err_len);
/* The same checks over bytes in memory (not copied: buf must outlive the
 * result); name is the PATH of error lines. */
mi_gguf *mi_gguf_open_mem(const void *buf, size_t len, const char *name, char *err, size_t err_len);
void mi_gguf_close(mi_gguf *g);

const char *mi_gguf_path(const mi_gguf *g);
uint32_t mi_gguf_version(const mi_gguf *g);
uint64_t mi_gguf_alignment(const mi_gguf *g);
uint64_t mi_gguf_file_size(const mi_gguf *g);
/* Where the data section starts in the file: a tensor's bytes are at
 * mi_gguf_data_offset(g) + t->offset. */
uint64_t mi_gguf_data_offset(const mi_gguf *g);

size_t mi_gguf_kv_count(const mi_gguf *g);
const mi_gguf_kv *mi_gguf_kv_at(const mi_gguf *g, size_t i);      /* file order */
const mi_gguf_kv *mi_gguf_get(const mi_gguf *g, const char *key); /* NULL if absent */

/* Typed reads of a scalar; 0 ok, -1 wrong type (or a u64 past INT64_MAX). */
int mi_gguf_kv_int(const mi_gguf_kv *kv, int64_t *out); /* any integer type or bool */
int mi_gguf_kv_real(const mi_gguf_kv *kv, double *out); /* f32, f64 or an integer */
/* A string value's bytes (not NUL-terminated) and length, or NULL. */
const char *mi_gguf_kv_str(const mi_gguf_kv *kv, size_t *len);
/* Element i of an array: 0 ok, -1 out of range or wrong element type. */
int mi_gguf_arr_str(const mi_gguf_kv *kv, uint64_t i, const char **s, size_t *len);
int mi_gguf_arr_int(const mi_gguf_kv *kv, uint64_t i, int64_t *out);
int mi_gguf_arr_real(const mi_gguf_kv *kv, uint64_t i, double *out); /* f32 or f64 elements */

size_t mi_gguf_tensor_count(const mi_gguf *g);
const mi_gguf_tensor *mi_gguf_tensor_at(const mi_gguf *g, size_t i); /* file order */
const mi_gguf_tensor *mi_gguf_tensor_find(const mi_gguf *g, const char *name);

/* "Q4_K", "BF16", ... or NULL for a type this reader does not know. */
const char *mi_gguf_type_name(uint32_t ggml_type);
/* "u32", "string", "array", ... or NULL. */
const char *mi_gguf_vtype_name(uint32_t vtype);

#ifdef __cplusplus
}
#endif
#endif
