/* The glue every model plugin needs around its forward pass: binding
 * weights by name (shape and dtype checked, one line naming the file and
 * the tensor when they are wrong), the checks a forward or a batched decode
 * step makes before any state changes, the kernel-call check, the
 * platform-needs table, the options every model reads (batch=,
 * mem_budget=), config.json's fields, a new sequence, the KV cache's
 * export/import through a staging buffer, and the plugin's descriptor.
 *
 * Header only (static inline functions and macros): a plugin built out of
 * tree from the installed SDK alone compiles it with its own flags, and
 * nothing here is an ABI. Names no architecture: messages start with the
 * caller's `tag` (the plugin's name). None of it runs per token except
 * MI_GLUE_K, which is one compare per kernel call.
 */
#ifndef MI_MODEL_GLUE_H
#define MI_MODEL_GLUE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/model.h"
#include "mi/plugin.h"
#include "mi/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel calls ----------------------------------------------------- */

/* Runs a platform call; on failure writes "<tag>: kernel <call> failed:
 * <platform's message>" to err and returns -1 from the enclosing function.
 * Expects `P` (const mi_platform_iface *), `pc`, `err` and `err_len` in
 * scope. Plugins define a short alias: #define K(call) MI_GLUE_K("x", call). */
#define MI_GLUE_K(tag, call)                                                                       \
  do {                                                                                             \
    if ((call) != 0) {                                                                             \
      const char *e_ = P->last_error ? P->last_error(pc) : NULL;                                   \
      snprintf(err, err_len, "%s: kernel %s failed: %s", tag, #call, e_ ? e_ : "unknown error");   \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

/* ---- the platform-needs table ------------------------------------------
 * Entries of a mi_platform_need list (mi/model.h). The member name is
 * checked at compile time against mi_platform_iface: a misspelt need is a
 * build error, not a platform refused at run time. */
#define MI_GLUE_MEMBER_(m) (&#m[0 * sizeof(((const mi_platform_iface *)0)->m)])
#define MI_GLUE_NEED(m)                                                                            \
  { MI_GLUE_MEMBER_(m), MI_NEED_ALWAYS, NULL, NULL }
/* only under tensor parallelism (tp_size > 1) */
#define MI_GLUE_NEED_TP(m)                                                                         \
  { MI_GLUE_MEMBER_(m), MI_NEED_TP, NULL, NULL }
/* only when model option `key` is set to a value other than `unless` */
#define MI_GLUE_NEED_OPTION(m, key, unless)                                                        \
  { MI_GLUE_MEMBER_(m), MI_NEED_OPTION, key, unless }
#define MI_GLUE_NEEDS_END                                                                          \
  { NULL, 0, NULL, NULL }
/* What binding weights (mi_glue_bind_*), scratch (mi_glue_alloc) and
 * reading results back take. */
#define MI_GLUE_NEEDS_MEMORY                                                                       \
  MI_GLUE_NEED(last_error), MI_GLUE_NEED(buffer_alloc), MI_GLUE_NEED(buffer_wrap_host),            \
      MI_GLUE_NEED(buffer_free), MI_GLUE_NEED(buffer_ptr), MI_GLUE_NEED(memcpy_h2d),               \
      MI_GLUE_NEED(memcpy_d2h)
/* The kernels of a pre-norm decoder with RoPE attention and a SwiGLU MLP. */
#define MI_GLUE_NEEDS_DECODER                                                                      \
  MI_GLUE_NEED(matmul), MI_GLUE_NEED(rmsnorm), MI_GLUE_NEED(rope), MI_GLUE_NEED(attention),        \
      MI_GLUE_NEED(silu_mul), MI_GLUE_NEED(add), MI_GLUE_NEED(embed)

/* ---- kernel packs (ABI 1.6) --------------------------------------------
 * An operator no platform member computes comes from a kernel pack
 * (mi/kernel_pack.h) the host bound to the model's platform and passed in
 * the load args. mi_glue_pack finds the kernel of `op` generated from
 * contract version `version` (NULL: any): its function in *fn (cast it to
 * the contract's signature), the pack's context in *ctx, the first argument
 * of every call. 0, or -1 with one line in err: no pack provides it, or the
 * packs hold another version of it. */
static inline int mi_glue_pack(const char *tag, const mi_model_load_args *a, const char *op,
                               const char *version, void (**fn)(void), void **ctx, char *err,
                               size_t err_len) {
  const int has = a->struct_size >= offsetof(mi_model_load_args, n_packs) + sizeof(int);
  const mi_pack_ref *packs = has ? a->packs : NULL;
  const int n = has && packs ? a->n_packs : 0;
  const char *other = NULL;
  for (int i = 0; i < n; i++) {
    const mi_pack_kernel *k = mi_pack_find(packs[i].iface, op);
    if (!k || !k->fn) continue;
    if (version && (!k->op_version || strcmp(k->op_version, version))) {
      other = k->op_version ? k->op_version : "(no version)";
      continue;
    }
    *fn = k->fn;
    *ctx = packs[i].ctx;
    return 0;
  }
  if (other)
    snprintf(err, err_len, "%s: the kernel packs hold %s %s; this model calls %s %s (regenerate the pack: mi-ckb pack)",
             tag, op, other, op, version);
  else
    snprintf(err, err_len,
             "%s: no kernel pack bound to the platform provides %s (%d pack(s) loaded; mi-ckb pack makes one, "
             "plugins.conf lists it as a kernels plugin)",
             tag, op, n);
  return -1;
}

/* ---- weights ----------------------------------------------------------- */

/* One bound weight: a platform buffer (NULL when borrowed, e.g. a tied
 * lm_head), its device address and element type. */
typedef struct mi_glue_weight {
  mi_buffer *buf;
  void *ptr;
  mi_dtype dtype;
} mi_glue_weight;

/* What binding needs: set once at load. */
typedef struct mi_glue {
  const char *tag; /* message prefix: the plugin's name */
  const mi_host_api *host;
  const mi_platform_iface *P;
  void *pc;
  const mi_weights *weights;
  const char *model_dir;  /* names the model in "missing tensor" lines */
  uint64_t *weight_bytes; /* bytes bound so far are added here */
} mi_glue;

/* dtypes a weight may be stored in */
enum {
  MI_GLUE_FLOATS = 1, /* F32, F16, BF16 */
  MI_GLUE_BLOCKS = 2, /* the block dtypes (GGUF's Q8_0, Q4_0, Q4_K, Q6_K), whole blocks per row */
};

/* "[a, b, ...]" into buf. */
static inline const char *mi_glue_dims_str(int ndim, const int64_t *d, char *buf, size_t n) {
  int o = snprintf(buf, n, "[");
  for (int i = 0; i < ndim && i < 8 && o < (int)n - 24; i++)
    o += snprintf(buf + o, n - (size_t)o, "%s%lld", i ? ", " : "", (long long)d[i]);
  snprintf(buf + o, n - (size_t)o, "]");
  return buf;
}

/* A stored weight's dtype for messages ("(unsupported)" when the file's
 * type has no mi_dtype, e.g. I16 or F8). */
static inline const char *mi_glue_dtype_str(const mi_weight_info *wi) {
  return wi->dtype >= 0 && wi->dtype < MI_DTYPE_COUNT ? mi_dtype_name((mi_dtype)wi->dtype)
                                                      : "(unsupported)";
}

/* Finds `name` and checks it is exactly dims[ndim] in a dtype `accept`
 * allows. 0, or -1 with one line in err. */
static inline int mi_glue_find(const mi_glue *g, const char *name, int ndim, const int64_t *dims,
                               int accept, mi_weight_info *wi, char *err, size_t err_len) {
  if (g->host->weights_find(g->weights, name, wi) != 0) {
    snprintf(err, err_len, "%s: missing tensor \"%s\" (not in any weight file)", g->model_dir,
             name);
    return -1;
  }
  int ok = wi->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++)
    ok = wi->shape[i] == dims[i];
  if (!ok) {
    char a[128], b[128];
    snprintf(err, err_len, "%s: tensor \"%s\" has shape %s, config.json implies %s", wi->file, name,
             mi_glue_dims_str(wi->ndim, wi->shape, a, sizeof a),
             mi_glue_dims_str(ndim, dims, b, sizeof b));
    return -1;
  }
  const int is_float =
      wi->dtype == MI_DTYPE_F32 || wi->dtype == MI_DTYPE_F16 || wi->dtype == MI_DTYPE_BF16;
  const int is_block =
      wi->dtype >= 0 && wi->dtype < MI_DTYPE_COUNT && mi_dtype_is_block((mi_dtype)wi->dtype);
  if (!((accept & MI_GLUE_FLOATS) && is_float) && !((accept & MI_GLUE_BLOCKS) && is_block)) {
    snprintf(err, err_len, "%s: tensor \"%s\" has dtype %s; expected BF16, F16%s", wi->file, name,
             mi_glue_dtype_str(wi),
             accept & MI_GLUE_BLOCKS ? ", F32 or a block type (Q8_0, Q4_0, Q4_K, Q6_K)"
                                     : " or F32");
    return -1;
  }
  if (is_block && mi_dtype_row_bytes((mi_dtype)wi->dtype, dims[ndim - 1]) == 0) {
    snprintf(err, err_len,
             "%s: tensor \"%s\" is %s with rows of %lld values: not whole blocks of %lld", wi->file,
             name, mi_glue_dtype_str(wi), (long long)dims[ndim - 1],
             (long long)mi_dtype_block((mi_dtype)wi->dtype));
    return -1;
  }
  return 0;
}

/* Rows [row0, row0+n) of a matrix [rows, cols], kept in the file's dtype:
 * a contiguous slice, so zero-copy where the platform's memory is host
 * memory (a whole matrix is row0 = 0, n = rows; tensor parallelism's
 * output-sharded layers take their rank's rows). */
static inline int mi_glue_bind_rows(const mi_glue *g, const char *name, int64_t rows, int64_t cols,
                                    int64_t row0, int64_t n, int accept, mi_glue_weight *w,
                                    char *err, size_t err_len) {
  mi_weight_info wi;
  const int64_t dims[2] = {rows, cols};
  if (mi_glue_find(g, name, 2, dims, accept, &wi, err, err_len) != 0) return -1;
  const size_t rowb = mi_dtype_row_bytes((mi_dtype)wi.dtype, cols);
  const size_t bytes = (size_t)n * rowb;
  if (g->P->buffer_wrap_host(g->pc, (const char *)wi.data + (size_t)row0 * rowb, bytes, &w->buf) !=
      0) {
    snprintf(err, err_len, "%s: cannot place tensor \"%s\" (%zu bytes) on the platform: %s",
             wi.file, name, bytes, g->P->last_error(g->pc));
    return -1;
  }
  w->ptr = g->P->buffer_ptr(g->pc, w->buf);
  w->dtype = (mi_dtype)wi.dtype;
  *g->weight_bytes += bytes;
  return 0;
}

static inline int mi_glue_bind_matrix(const mi_glue *g, const char *name, int64_t rows,
                                      int64_t cols, int accept, mi_glue_weight *w, char *err,
                                      size_t err_len) {
  return mi_glue_bind_rows(g, name, rows, cols, 0, rows, accept, w, err, err_len);
}

/* Host bytes to a new platform buffer. 0, or -1 with the platform's error. */
static inline int mi_glue_upload(const mi_glue *g, const char *name, const void *src, size_t bytes,
                                 mi_glue_weight *w, char *err, size_t err_len) {
  int rc = g->P->buffer_alloc(g->pc, bytes, &w->buf);
  if (rc == 0) {
    w->ptr = g->P->buffer_ptr(g->pc, w->buf);
    rc = g->P->memcpy_h2d(g->pc, NULL, w->ptr, src, bytes);
  }
  if (rc != 0) {
    snprintf(err, err_len, "%s: cannot upload \"%s\": %s", g->tag, name, g->P->last_error(g->pc));
    return -1;
  }
  return 0;
}

/* Columns [col0, col0+n) of a matrix [rows, cols] copied into a buffer of
 * their own ([rows, n], same dtype): tensor parallelism's input-sharded
 * layers. All columns stay zero-copy. */
static inline int mi_glue_bind_cols(const mi_glue *g, const char *name, int64_t rows, int64_t cols,
                                    int64_t col0, int64_t n, int accept, mi_glue_weight *w,
                                    char *err, size_t err_len) {
  if (col0 == 0 && n == cols)
    return mi_glue_bind_rows(g, name, rows, cols, 0, rows, accept, w, err, err_len);
  mi_weight_info wi;
  const int64_t dims[2] = {rows, cols};
  if (mi_glue_find(g, name, 2, dims, accept, &wi, err, err_len) != 0) return -1;
  const mi_dtype dt = (mi_dtype)wi.dtype;
  const int64_t blk = mi_dtype_block(dt);
  if (col0 % blk || n % blk) { /* a block dtype: a shard must be whole blocks (32 or 256) */
    snprintf(err, err_len,
             "%s: tensor \"%s\" is %s: its columns [%lld, %lld) per rank are not whole blocks "
             "of %lld (choose another tp)",
             wi.file, name, mi_dtype_name(dt), (long long)col0, (long long)(col0 + n),
             (long long)blk);
    return -1;
  }
  const size_t rowb = mi_dtype_row_bytes(dt, cols), nb = mi_dtype_row_bytes(dt, n);
  const size_t off = mi_dtype_row_bytes(dt, col0), bytes = (size_t)rows * nb;
  char *tmp = (char *)malloc(bytes); /* [rows, n] */
  if (!tmp) {
    snprintf(err, err_len, "%s: out of memory slicing \"%s\"", g->tag, name);
    return -1;
  }
  for (int64_t r = 0; r < rows; r++)
    memcpy(tmp + (size_t)r * nb, (const char *)wi.data + (size_t)r * rowb + off, nb);
  const int rc = mi_glue_upload(g, name, tmp, bytes, w, err, err_len);
  free(tmp);
  if (rc != 0) return -1;
  w->dtype = dt;
  *g->weight_bytes += bytes;
  return 0;
}

/* A small tensor of shape dims[ndim] (norms, conv kernels, gate
 * parameters), widened to f32 once at load: the kernels reading them take
 * f32. */
static inline int mi_glue_bind_f32(const mi_glue *g, const char *name, int ndim,
                                   const int64_t *dims, mi_glue_weight *w, char *err,
                                   size_t err_len) {
  mi_weight_info wi;
  if (mi_glue_find(g, name, ndim, dims, MI_GLUE_FLOATS, &wi, err, err_len) != 0) return -1;
  size_t count = 1;
  for (int i = 0; i < ndim; i++)
    count *= (size_t)dims[i];
  float *tmp = (float *)malloc((count ? count : 1) * sizeof(float)); /* [count] */
  if (!tmp) {
    snprintf(err, err_len, "%s: out of memory", g->tag);
    return -1;
  }
  for (size_t i = 0; i < count; i++)
    tmp[i] = mi_float_value((mi_dtype)wi.dtype, wi.data, i);
  const int rc = mi_glue_upload(g, name, tmp, count * sizeof(float), w, err, err_len);
  free(tmp);
  if (rc != 0) return -1;
  w->dtype = MI_DTYPE_F32;
  *g->weight_bytes += wi.nbytes;
  return 0;
}

/* A vector [n] widened to f32. */
static inline int mi_glue_bind_vector(const mi_glue *g, const char *name, int64_t n,
                                      mi_glue_weight *w, char *err, size_t err_len) {
  return mi_glue_bind_f32(g, name, 1, &n, w, err, err_len);
}

static inline void mi_glue_weight_free(const mi_platform_iface *P, void *pc, mi_glue_weight *w) {
  if (w->buf) P->buffer_free(pc, w->buf);
  w->buf = NULL;
  w->ptr = NULL;
}

/* Frees the n weights ws[i] (their buffers; borrowed ones have none). */
static inline void mi_glue_weights_free(const mi_platform_iface *P, void *pc,
                                        mi_glue_weight *const *ws, size_t n) {
  for (size_t i = 0; i < n; i++)
    mi_glue_weight_free(P, pc, ws[i]);
}

/* Frees the n buffers *bufs[i] that are set, and unsets them. */
static inline void mi_glue_buffers_free(const mi_platform_iface *P, void *pc,
                                        mi_buffer **const *bufs, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (*bufs[i]) {
      P->buffer_free(pc, *bufs[i]);
      *bufs[i] = NULL;
    }
}

/* A platform buffer of `bytes` (at least 4: a zero-size shape still gets
 * an address); *(void **)ptr gets its device address. 0, or -1. */
static inline int mi_glue_alloc(const mi_glue *g, size_t bytes, mi_buffer **b, void *ptr, char *err,
                                size_t err_len) {
  if (g->P->buffer_alloc(g->pc, bytes ? bytes : 4, b) != 0) {
    snprintf(err, err_len, "%s: cannot allocate %zu bytes on the platform: %s", g->tag, bytes,
             g->P->last_error(g->pc));
    return -1;
  }
  *(void **)ptr = g->P->buffer_ptr(g->pc, *b);
  return 0;
}

/* ---- options ----------------------------------------------------------- */

/* Option `key` as an integer in [lo, hi] into *out (unchanged when unset). */
static inline int mi_glue_opt_long(const mi_glue *g, const mi_options *o, const char *key, long lo,
                                   long hi, long *out, char *err, size_t err_len) {
  const char *v = g->host->opt_get(o, key);
  if (!v) return 0;
  char *end;
  long x = strtol(v, &end, 10);
  if (*v == 0 || *end || x < lo || x > hi) {
    snprintf(err, err_len, "%s: option %s=%.40s must be an integer in [%ld, %ld]", g->tag, key, v,
             lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* Option `key` as a byte count into *out (unchanged when unset). */
static inline int mi_glue_opt_bytes(const mi_glue *g, const mi_options *o, const char *key,
                                    uint64_t *out, char *err, size_t err_len) {
  const char *v = g->host->opt_get(o, key);
  if (!v) return 0;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  if (*end || end == v) {
    snprintf(err, err_len, "%s: option %s=%.40s must be a byte count", g->tag, key, v);
    return -1;
  }
  *out = x;
  return 0;
}

/* ---- config.json -------------------------------------------------------- */

/* Where config.json's fields are read (obj) and how a refusal names them:
 * "<prefix><key>", prefix "" or where obj sits (e.g. "text_config."). */
typedef struct mi_glue_json {
  const mi_host_api *h;
  const mi_json *obj;
  const char *prefix;
  char *err;
  size_t err_len;
} mi_glue_json;

/* Reads the top level of cfg, which must be an object. 0, or -1. */
static inline int mi_glue_json_open(mi_glue_json *r, const mi_host_api *h, const mi_json *cfg,
                                    char *err, size_t err_len) {
  r->h = h;
  r->obj = cfg;
  r->prefix = "";
  r->err = err;
  r->err_len = err_len;
  if (h->json_type(cfg) != MI_JSON_OBJECT) {
    snprintf(err, err_len, "not a JSON object");
    return -1;
  }
  return 0;
}

/* Field `key` as an integer in [lo, hi]; a missing one is refused. */
static inline int mi_glue_json_int(const mi_glue_json *r, const char *key, int64_t lo, int64_t hi,
                                   int64_t *out) {
  const mi_json *v = r->h->json_get(r->obj, key);
  if (!v) {
    snprintf(r->err, r->err_len, "missing field \"%s%s\"", r->prefix, key);
    return -1;
  }
  if (r->h->json_int(v, out) != 0) {
    snprintf(r->err, r->err_len, "field \"%s%s\" must be an integer", r->prefix, key);
    return -1;
  }
  if (*out < lo || *out > hi) {
    snprintf(r->err, r->err_len, "field \"%s%s\" = %lld is out of range [%lld, %lld]", r->prefix,
             key, (long long)*out, (long long)lo, (long long)hi);
    return -1;
  }
  return 0;
}

/* A finite number in [lo, hi] at obj.key (obj NULL: absent); absent or
 * null gives dflt. A refusal names it "<prefix><shown>". */
static inline int mi_glue_json_real(const mi_glue_json *r, const mi_json *obj, const char *key,
                                    const char *shown, double lo, double hi, double dflt,
                                    double *out) {
  const mi_json *v = obj ? r->h->json_get(obj, key) : NULL;
  if (!v || r->h->json_type(v) == MI_JSON_NULL) {
    *out = dflt;
    return 0;
  }
  if (r->h->json_real(v, out) != 0 || !isfinite(*out) || *out < lo || *out > hi) {
    snprintf(r->err, r->err_len, "field \"%s%s\" must be a number in [%g, %g]", r->prefix, shown,
             lo, hi);
    return -1;
  }
  return 0;
}

/* ---- checks before a forward ------------------------------------------- */

/* forward(): n ≥ 1 tokens that fit after `len` of `n_ctx`, each an id in
 * [0, vocab). */
static inline int mi_glue_check_forward(const char *tag, const int32_t *ids, int64_t n, int64_t len,
                                        int64_t n_ctx, int64_t vocab, char *err, size_t err_len) {
  if (n <= 0) {
    snprintf(err, err_len, "%s: forward needs at least one token", tag);
    return -1;
  }
  if (len + n > n_ctx) {
    snprintf(err, err_len, "%s: %lld tokens do not fit: the context holds %lld and %lld are used",
             tag, (long long)n, (long long)n_ctx, (long long)len);
    return -1;
  }
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) {
      snprintf(err, err_len, "%s: token id %d is outside the vocabulary [0, %lld)", tag, ids[i],
               (long long)vocab);
      return -1;
    }
  return 0;
}

/* seq_create(): a zeroed sequence struct of `size` bytes for a context of
 * n_ctx positions, which must be in [1, max_pos]. NULL with one line in err. */
static inline void *mi_glue_seq_alloc(const char *tag, int64_t n_ctx, int64_t max_pos, size_t size,
                                      char *err, size_t err_len) {
  if (n_ctx < 1 || n_ctx > max_pos) {
    snprintf(err, err_len, "%s: context size %lld must be in [1, %lld] (max_position_embeddings)",
             tag, (long long)n_ctx, (long long)max_pos);
    return NULL;
  }
  void *s = calloc(1, size);
  if (!s) snprintf(err, err_len, "%s: out of memory", tag);
  return s;
}

/* A sequence's length and context for mi_glue_check_batch; returns NULL, or
 * why the sequence takes no token at all (it finishes "sequence N ..."). */
typedef const char *(*mi_glue_seq_state_fn)(const mi_seq *s, int64_t *len, int64_t *n_ctx);

/* forward_batch(): n ≥ 1 distinct sequences, each with state, logits, room
 * for one token and an id in [0, vocab). Checked before any state changes. */
static inline int mi_glue_check_batch(const char *tag, mi_seq *const *seqs, const int32_t *ids,
                                      int64_t n, float *const *logits, int64_t vocab,
                                      mi_glue_seq_state_fn state, char *err, size_t err_len) {
  if (n <= 0) {
    snprintf(err, err_len, "%s: forward_batch needs at least one sequence", tag);
    return -1;
  }
  for (int64_t i = 0; i < n; i++) {
    if (!seqs[i] || !logits[i]) {
      snprintf(err, err_len, "%s: forward_batch: sequence %lld has no state or no logits", tag,
               (long long)i);
      return -1;
    }
    int64_t len = 0, n_ctx = 0;
    const char *why = state(seqs[i], &len, &n_ctx);
    if (why) {
      snprintf(err, err_len, "%s: forward_batch: sequence %lld %s", tag, (long long)i, why);
      return -1;
    }
    if (len + 1 > n_ctx) {
      snprintf(err, err_len, "%s: forward_batch: sequence %lld is full (%lld tokens)", tag,
               (long long)i, (long long)n_ctx);
      return -1;
    }
    if (ids[i] < 0 || ids[i] >= vocab) {
      snprintf(err, err_len, "%s: token id %d is outside the vocabulary [0, %lld)", tag, ids[i],
               (long long)vocab);
      return -1;
    }
    for (int64_t j = 0; j < i; j++)
      if (seqs[j] == seqs[i]) {
        snprintf(err, err_len, "%s: forward_batch: sequence %lld appears twice", tag, (long long)i);
        return -1;
      }
  }
  return 0;
}

/* ---- logits ------------------------------------------------------------ */

/* A decoder's head over n rows of final hidden states x [n, H]:
 * h = rmsnorm(x)·(norm_add + norm) into h [n, H], logits = h·lm_headᵀ,
 * `per_call` rows per lm_head call through scratch [per_call, V] (it bounds
 * the scratch when every position's logits are asked for). Row r goes to
 * host out_rows[r], or to out + r·V when out_rows is NULL (then one copy per
 * call). Synchronises the stream (where the platform has one) before
 * returning: the host reads the logits next. */
static inline int mi_glue_logits(const mi_glue *g, const float *x, float *h, int64_t n, int64_t H,
                                 int64_t V, const mi_glue_weight *norm, float eps, float norm_add,
                                 const mi_glue_weight *lm_head, float *scratch, int64_t per_call,
                                 float *out, float *const *out_rows, char *err, size_t err_len) {
  const mi_platform_iface *P = g->P;
  void *pc = g->pc;
  const char *tag = g->tag;
  for (int64_t i = 0; i < n; i += per_call) {
    const int64_t rows = n - i < per_call ? n - i : per_call;
    float *hi = h + (size_t)i * H; /* [rows, H] */
    MI_GLUE_K(tag, P->rmsnorm(pc, NULL, hi, x + (size_t)i * H, norm->ptr, rows, H, eps, norm_add));
    MI_GLUE_K(tag, P->matmul(pc, NULL, scratch, hi, lm_head->ptr, lm_head->dtype, rows, V, H));
    if (!out_rows)
      MI_GLUE_K(tag, P->memcpy_d2h(pc, NULL, out + (size_t)i * V, scratch,
                                   (size_t)(rows * V) * sizeof(float)));
    else
      for (int64_t r = 0; r < rows; r++)
        MI_GLUE_K(tag, P->memcpy_d2h(pc, NULL, out_rows[i + r], scratch + (size_t)r * V,
                                     (size_t)V * sizeof(float)));
  }
  /* NULL stream_sync: a synchronous platform (see mi/platform.h) */
  if (mi_platform_has(P, stream_sync)) MI_GLUE_K(tag, P->stream_sync(pc, NULL));
  return 0;
}

/* ---- forward ----------------------------------------------------------- */

/* Runs T ≤ batch tokens of s at positions len … len+T-1 (and advances len). */
typedef int (*mi_glue_chunk_fn)(mi_model *m, mi_seq *s, const int32_t *ids, int64_t T, char *err,
                                size_t err_len);
/* Logits of rows [r0, r0+n) of the last chunk into host out [n, V]. */
typedef int (*mi_glue_rows_fn)(mi_model *m, int64_t r0, int64_t n, float *out, char *err,
                               size_t err_len);

/* forward() after its checks: n tokens in chunks of at most `batch` (the
 * scratch's size), then the logits of every position (all_logits: out
 * [n, V]) or of the last one (out [V]); none when logits is NULL. The calls
 * are per chunk, not per token. */
static inline int mi_glue_forward_chunks(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n,
                                         int64_t batch, int64_t vocab, float *logits,
                                         int all_logits, mi_glue_chunk_fn chunk,
                                         mi_glue_rows_fn rows, char *err, size_t err_len) {
  for (int64_t done = 0; done < n;) {
    const int64_t T = n - done < batch ? n - done : batch;
    if (chunk(m, s, ids + done, T, err, err_len) != 0) return -1;
    if (logits && all_logits) {
      if (rows(m, 0, T, logits + (size_t)done * (size_t)vocab, err, err_len) != 0) return -1;
    } else if (logits && done + T == n) {
      if (rows(m, T - 1, 1, logits, err, err_len) != 0) return -1;
    }
    done += T;
  }
  return 0;
}

/* ---- sequence state export/import (prefix caching, ABI 1.5) ------------ */

/* seq_state_read(): positions [pos, pos+n) within the sequence's len; a
 * fixed state (`fixed`, named `fixed_what`) exists only at len. */
static inline int mi_glue_check_state_read(const char *tag, int64_t pos, int64_t n, int64_t len,
                                           const void *dst, int fixed, const char *fixed_what,
                                           char *err, size_t err_len) {
  if (pos < 0 || n < 0 || pos > len || n > len - pos) {
    snprintf(err, err_len,
             "%s: seq_state_read: positions [%lld, %lld) are not within the sequence's %lld", tag,
             (long long)pos, (long long)pos + (long long)n, (long long)len);
    return -1;
  }
  if (fixed && pos + n != len) {
    snprintf(err, err_len,
             "%s: seq_state_read: the %s exists only at the sequence's length %lld, not at %lld",
             tag, fixed_what, (long long)len, (long long)(pos + n));
    return -1;
  }
  if (n > 0 && !dst) {
    snprintf(err, err_len, "%s: seq_state_read: dst is NULL", tag);
    return -1;
  }
  return 0;
}

/* seq_state_write(): state is only appended, at len, and must fit n_ctx. */
static inline int mi_glue_check_state_write(const char *tag, int64_t pos, int64_t n, int64_t len,
                                            int64_t n_ctx, const void *src, char *err,
                                            size_t err_len) {
  if (pos != len) {
    snprintf(err, err_len,
             "%s: seq_state_write: position %lld is not the sequence's length %lld "
             "(state is only appended)",
             tag, (long long)pos, (long long)len);
    return -1;
  }
  if (n < 0 || n > n_ctx - pos) {
    snprintf(err, err_len,
             "%s: seq_state_write: %lld positions do not fit: the context holds %lld and "
             "%lld are used",
             tag, (long long)n, (long long)n_ctx, (long long)pos);
    return -1;
  }
  if (n > 0 && !src) {
    snprintf(err, err_len, "%s: seq_state_write: src is NULL", tag);
    return -1;
  }
  return 0;
}

/* Staging per device round trip: this many bytes, or one position if more. */
#define MI_GLUE_STATE_STAGE_BYTES ((size_t)8 << 20)

/* Copies positions [pos, pos+n) of a KV cache to host (to_host) or from it
 * (host is then only read). The cache on the device is `parts` runs of
 * [n_ctx, row bytes] (e.g. [layer][K|V]); the host layout is position by
 * position, [n][parts][row], so one position is parts·row bytes and the
 * reads of adjacent ranges concatenate to the read of their union. A
 * range's rows of one part are one contiguous run: the device sees `parts`
 * copies per staged chunk and the host reorders rows in the staging (per-row
 * device copies would cost a GPU one transfer per row). Bytes are copied as
 * they are: a restored sequence computes bit for bit what the original
 * would. 0, or -1 with "<tag>: <fn>: ..." in err. */
static inline int mi_glue_kv_copy(const mi_glue *g, char *kv, int64_t parts, size_t row,
                                  int64_t n_ctx, int64_t pos, int64_t n, char *host, int to_host,
                                  const char *fn, char *err, size_t err_len) {
  const mi_platform_iface *P = g->P;
  const size_t tok = (size_t)parts * row; /* state_bytes_token */
  if (n == 0 || tok == 0) return 0;
  int64_t chunk = (int64_t)(MI_GLUE_STATE_STAGE_BYTES / tok);
  if (chunk < 1) chunk = 1;
  if (chunk > n) chunk = n;
  char *stage = (char *)malloc((size_t)chunk * tok); /* [parts][chunk, row] */
  if (!stage) {
    snprintf(err, err_len, "%s: %s: out of memory (%zu bytes of staging)", g->tag, fn,
             (size_t)chunk * tok);
    return -1;
  }
  int rc = 0;
  for (int64_t p0 = 0; p0 < n && rc == 0; p0 += chunk) {
    const int64_t c = n - p0 < chunk ? n - p0 : chunk;
    const size_t run = (size_t)c * row; /* one part's rows in the staging */
    char *h = host + (size_t)p0 * tok;
    if (!to_host)
      for (int64_t i = 0; i < parts; i++)
        for (int64_t t = 0; t < c; t++)
          memcpy(stage + (size_t)i * run + (size_t)t * row, h + (size_t)t * tok + (size_t)i * row,
                 row);
    for (int64_t i = 0; i < parts && rc == 0; i++) {
      char *dev = kv + ((size_t)i * (size_t)n_ctx + (size_t)(pos + p0)) * row;
      rc = to_host ? P->memcpy_d2h(g->pc, NULL, stage + (size_t)i * run, dev, run)
                   : P->memcpy_h2d(g->pc, NULL, dev, stage + (size_t)i * run, run);
    }
    /* the host reads the staging next, or fills it again */
    if (rc == 0 && mi_platform_has(P, stream_sync)) rc = P->stream_sync(g->pc, NULL);
    if (rc == 0 && to_host)
      for (int64_t i = 0; i < parts; i++)
        for (int64_t t = 0; t < c; t++)
          memcpy(h + (size_t)t * tok + (size_t)i * row, stage + (size_t)i * run + (size_t)t * row,
                 row);
  }
  free(stage);
  if (rc != 0) {
    const char *e = P->last_error ? P->last_error(g->pc) : NULL;
    snprintf(err, err_len, "%s: %s: copying the KV cache failed: %s", g->tag, fn,
             e && e[0] ? e : "unknown error");
    return -1;
  }
  return 0;
}

/* ---- plugin boilerplate ------------------------------------------------ */

/* init(): refuses a host table older than this plugin was built against. */
static inline int mi_glue_host_ok(const mi_host_api *host, char *err, size_t err_len) {
  if (!host || host->struct_size < sizeof(mi_host_api)) {
    snprintf(err, err_len, "host API table too old for this plugin");
    return 0;
  }
  return 1;
}

/* init() of a model plugin whose context is the host table itself (then
 * check_config and load get it as their ctx). */
static inline int mi_glue_model_init(const mi_host_api *host, const mi_options *opts, void **ctx,
                                     char *err, size_t err_len) {
  (void)opts;
  if (!mi_glue_host_ok(host, err, err_len)) return -1;
  *ctx = (void *)host;
  return 0;
}

/* The descriptor and entry point of a model plugin whose context is the
 * host table (mi_glue_model_init) and whose interface is the static table
 * `iface`; nothing to probe or to free. Use once, at the end of the plugin:
 *   MI_GLUE_MODEL_PLUGIN("mymodel", "0.1.0", "what it runs", k_iface) */
#define MI_GLUE_MODEL_PLUGIN(name_, version_, description_, iface_)                                \
  static const void *mi_glue_get_iface_(void *ctx) {                                               \
    (void)ctx;                                                                                     \
    return &(iface_);                                                                              \
  }                                                                                                \
  static const mi_plugin_desc mi_glue_desc_ = {                                                    \
      .abi_major = MI_ABI_MAJOR,                                                                   \
      .abi_minor = MI_ABI_MINOR,                                                                   \
      .struct_size = sizeof(mi_plugin_desc),                                                       \
      .kind = MI_PLUGIN_MODEL,                                                                     \
      .name = name_,                                                                               \
      .version = version_,                                                                         \
      .description = description_,                                                                 \
      .probe = NULL,                                                                               \
      .init = mi_glue_model_init,                                                                  \
      .fini = NULL,                                                                                \
      .get_iface = mi_glue_get_iface_,                                                             \
  };                                                                                               \
  MI_PLUGIN_DEFINE(mi_glue_desc_)

/* info(): hands the caller as much of a filled mi_model_info as its
 * struct_size has room for (0: the ABI 1.0 size). */
static inline void mi_glue_info_write(mi_model_info *dst, mi_model_info *full) {
  size_t room = dst->struct_size ? dst->struct_size : offsetof(mi_model_info, prefill_flops_token);
  if (room > sizeof(mi_model_info)) room = sizeof(mi_model_info);
  full->struct_size = (uint32_t)room;
  memcpy(dst, full, room);
}

#ifdef __cplusplus
}
#endif

#endif
