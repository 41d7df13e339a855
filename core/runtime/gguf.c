/* GGUF reader: see gguf.h. Written from the format description; no code
 * from ggml or llama.cpp. */
#define _GNU_SOURCE
#include "core/runtime/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/file.h"

/* ---- ggml types ----------------------------------------------------------
 * Block size (elements) and bytes per block of every type ggml has defined
 * (numbers 4, 5, 31-33 and 36-38 were removed from ggml and are unknown
 * here). Only F32, F16 and BF16 are computed on today; the others are
 * known so their extent can be checked and their name reported. */
typedef struct ggml_type_info {
  const char *name;
  uint32_t block, size;
} ggml_type_info;

static const ggml_type_info GGML_TYPES[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

static const ggml_type_info *ggml_type(uint32_t t) {
  return t < N_GGML_TYPES && GGML_TYPES[t].name ? &GGML_TYPES[t] : NULL;
}

const char *mi_gguf_type_name(uint32_t t) {
  const ggml_type_info *i = ggml_type(t);
  return i ? i->name : NULL;
}

static const char *const VTYPE_NAMES[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                          "bool", "string", "array", "u64", "i64", "f64"};
static const unsigned VTYPE_SIZE[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *mi_gguf_vtype_name(uint32_t v) {
  return v <= MI_GGUF_F64 ? VTYPE_NAMES[v] : NULL;
}

/* ---- the reader ---------------------------------------------------------- */

struct mi_gguf {
  char *path;
  void *map; /* owned mapping (NULL for mi_gguf_open_mem) */
  size_t map_len;
  const unsigned char *base;
  uint64_t size;
  uint32_t version;
  uint64_t alignment, data_off;
  mi_gguf_kv *kv;
  size_t n_kv;
  mi_gguf_kv **kv_by_key;
  mi_gguf_tensor *t;
  size_t n_t;
  mi_gguf_tensor **t_by_name;
};

typedef struct rd {
  mi_gguf *g;
  uint64_t pos;
  char *err;
  size_t el;
  char what[160]; /* what is being read, for a truncation message */
} rd;

static int truncated(rd *r, uint64_t need) {
  mi_path_err(r->err, r->el, r->g->path,
              "truncated: %s needs %llu bytes at offset %llu, the file has %llu", r->what,
              (unsigned long long)need, (unsigned long long)r->pos, (unsigned long long)r->g->size);
  return -1;
}

static int need(rd *r, uint64_t n) {
  if (n > r->g->size - r->pos) return truncated(r, n);
  return 0;
}

static int rd_u32(rd *r, uint32_t *v) {
  if (need(r, 4)) return -1;
  const unsigned char *p = r->g->base + r->pos;
  *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  r->pos += 4;
  return 0;
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int b = 0; b < 8; b++)
    v |= (uint64_t)p[b] << (8 * b);
  return v;
}

static int rd_u64(rd *r, uint64_t *v) {
  if (need(r, 8)) return -1;
  *v = le64(r->g->base + r->pos);
  r->pos += 8;
  return 0;
}

/* A string: u64 length, then the bytes; *s points into the file. */
static int rd_str(rd *r, uint64_t max, const unsigned char **s, uint64_t *len) {
  if (rd_u64(r, len)) return -1;
  if (*len > max) {
    mi_path_err(r->err, r->el, r->g->path, "%s: string of %llu bytes at offset %llu (limit %llu)",
                r->what, (unsigned long long)*len, (unsigned long long)(r->pos - 8),
                (unsigned long long)max);
    return -1;
  }
  if (need(r, *len)) return -1;
  *s = r->g->base + r->pos;
  r->pos += *len;
  return 0;
}

/* Keys and names: no NUL, no control characters (they end up in messages). */
static int clean_name(const unsigned char *s, uint64_t n) {
  for (uint64_t i = 0; i < n; i++)
    if (s[i] < 0x20 || s[i] == 0x7f) return 0;
  return n > 0;
}

static char *dup_n(const unsigned char *s, uint64_t n) {
  char *d = malloc((size_t)n + 1);
  if (d) {
    memcpy(d, s, (size_t)n);
    d[n] = 0;
  }
  return d;
}

/* Reads one value of type vt into kv (kv->type set by the caller). */
static int rd_value(rd *r, uint32_t vt, mi_gguf_kv *kv, const char *key) {
  if (vt > MI_GGUF_F64) {
    mi_path_err(r->err, r->el, r->g->path, "key '%.200s': unknown value type %u", key, vt);
    return -1;
  }
  if (vt == MI_GGUF_STRING) {
    const unsigned char *s;
    uint64_t len;
    if (rd_str(r, MI_GGUF_MAX_STRING, &s, &len)) return -1;
    kv->p = s;
    kv->n = len;
    return 0;
  }
  if (vt == MI_GGUF_ARRAY) {
    uint32_t at;
    uint64_t n;
    if (rd_u32(r, &at) || rd_u64(r, &n)) return -1;
    if (at == MI_GGUF_ARRAY) {
      mi_path_err(r->err, r->el, r->g->path, "key '%.200s': arrays of arrays are not supported",
                  key);
      return -1;
    }
    if (at > MI_GGUF_F64) {
      mi_path_err(r->err, r->el, r->g->path, "key '%.200s': array of unknown value type %u", key,
                  at);
      return -1;
    }
    /* every element takes at least one byte (a string at least 8) */
    uint64_t min_el = at == MI_GGUF_STRING ? 8 : VTYPE_SIZE[at];
    if (n > MI_GGUF_MAX_ARRAY || n > (r->g->size - r->pos) / min_el) {
      mi_path_err(r->err, r->el, r->g->path,
                  "key '%.200s': array of %llu elements (limit %u, and the %llu bytes left in "
                  "the file hold at most %llu)",
                  key, (unsigned long long)n, MI_GGUF_MAX_ARRAY,
                  (unsigned long long)(r->g->size - r->pos),
                  (unsigned long long)((r->g->size - r->pos) / min_el));
      return -1;
    }
    kv->arr_type = at;
    kv->n = n;
    kv->p = r->g->base + r->pos;
    if (at != MI_GGUF_STRING) {
      if (at == MI_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
          if (kv->p[i] > 1) {
            mi_path_err(r->err, r->el, r->g->path, "key '%.200s': element %llu: bool value %u", key,
                        (unsigned long long)i, kv->p[i]);
            return -1;
          }
      r->pos += n * VTYPE_SIZE[at];
      return 0;
    }
    uint64_t *off = malloc((size_t)(n ? n : 1) * sizeof *off);
    if (!off) {
      mi_path_err(r->err, r->el, r->g->path, "out of memory");
      return -1;
    }
    kv->str_off = off;
    const uint64_t start = r->pos;
    for (uint64_t i = 0; i < n; i++) {
      off[i] = r->pos - start;
      const unsigned char *s;
      uint64_t len;
      snprintf(r->what, sizeof r->what, "key '%.60s' element %llu", key, (unsigned long long)i);
      if (rd_str(r, MI_GGUF_MAX_STRING, &s, &len)) return -1;
    }
    return 0;
  }
  if (need(r, VTYPE_SIZE[vt])) return -1;
  kv->p = r->g->base + r->pos;
  if (vt == MI_GGUF_BOOL && kv->p[0] > 1) {
    mi_path_err(r->err, r->el, r->g->path, "key '%.200s': bool value %u", key, kv->p[0]);
    return -1;
  }
  r->pos += VTYPE_SIZE[vt];
  return 0;
}

static int cmp_kv(const void *a, const void *b) {
  return strcmp((*(mi_gguf_kv *const *)a)->key, (*(mi_gguf_kv *const *)b)->key);
}
static int cmp_tname(const void *a, const void *b) {
  return strcmp((*(mi_gguf_tensor *const *)a)->name, (*(mi_gguf_tensor *const *)b)->name);
}
static int cmp_toff(const void *a, const void *b) {
  const mi_gguf_tensor *x = *(mi_gguf_tensor *const *)a, *y = *(mi_gguf_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return 0;
}

/* The magic, the version and the counts; the tables sized for them. */
static int parse_header(rd *r, uint64_t *nt, uint64_t *nkv) {
  mi_gguf *g = r->g;
  char *err = r->err;
  size_t el = r->el;
  snprintf(r->what, sizeof r->what, "the header");
  if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0) {
    mi_path_err(err, el, g->path, "not a GGUF file (no \"GGUF\" magic)");
    return -1;
  }
  r->pos = 4;
  if (rd_u32(r, &g->version)) return -1;
  if (g->version != 2 && g->version != 3) {
    if ((g->version & 0xffff) == 0 && g->version)
      mi_path_err(err, el, g->path,
                  "GGUF version %u: a big-endian file? (only little-endian v2 "
                  "and v3 are read)",
                  g->version);
    else
      mi_path_err(err, el, g->path, "GGUF version %u is not supported (only v2 and v3)",
                  g->version);
    return -1;
  }
  if (rd_u64(r, nt) || rd_u64(r, nkv)) return -1;
  /* a key-value pair takes >= 8 + 1 + 4 + 1 bytes, a tensor info >= 8 + 1 + 4 + 8 + 4 + 8 */
  if (*nkv > MI_GGUF_MAX_KV || *nkv > (g->size - r->pos) / 14) {
    mi_path_err(err, el, g->path, "%llu metadata keys (limit %u, and the file is %llu bytes)",
                (unsigned long long)*nkv, MI_GGUF_MAX_KV, (unsigned long long)g->size);
    return -1;
  }
  if (*nt > MI_GGUF_MAX_TENSORS || *nt > (g->size - r->pos) / 33) {
    mi_path_err(err, el, g->path, "%llu tensors (limit %u, and the file is %llu bytes)",
                (unsigned long long)*nt, MI_GGUF_MAX_TENSORS, (unsigned long long)g->size);
    return -1;
  }
  g->kv = calloc(*nkv ? *nkv : 1, sizeof *g->kv);
  g->kv_by_key = calloc(*nkv ? *nkv : 1, sizeof *g->kv_by_key);
  g->t = calloc(*nt ? *nt : 1, sizeof *g->t);
  g->t_by_name = calloc(*nt ? *nt : 1, sizeof *g->t_by_name);
  if (!g->kv || !g->kv_by_key || !g->t || !g->t_by_name) {
    mi_path_err(err, el, g->path, "out of memory");
    return -1;
  }
  return 0;
}

/* The nkv metadata pairs, each key once, and general.alignment. */
static int parse_metadata(rd *r, uint64_t nkv) {
  mi_gguf *g = r->g;
  char *err = r->err;
  size_t el = r->el;
  g->alignment = MI_GGUF_DEFAULT_ALIGNMENT;
  for (uint64_t i = 0; i < nkv; i++) {
    mi_gguf_kv *kv = &g->kv[g->n_kv];
    const unsigned char *k;
    uint64_t kl;
    snprintf(r->what, sizeof r->what, "metadata key %llu", (unsigned long long)i);
    if (rd_str(r, MI_GGUF_MAX_KEY, &k, &kl)) return -1;
    if (!clean_name(k, kl)) {
      mi_path_err(err, el, g->path, "metadata key %llu is empty or has a control character",
                  (unsigned long long)i);
      return -1;
    }
    if (!(kv->key = dup_n(k, kl))) {
      mi_path_err(err, el, g->path, "out of memory");
      return -1;
    }
    g->n_kv++;
    snprintf(r->what, sizeof r->what, "the value of key '%.80s'", kv->key);
    if (rd_u32(r, &kv->type) || rd_value(r, kv->type, kv, kv->key)) return -1;
  }
  for (size_t i = 0; i < g->n_kv; i++)
    g->kv_by_key[i] = &g->kv[i];
  qsort(g->kv_by_key, g->n_kv, sizeof *g->kv_by_key, cmp_kv);
  for (size_t i = 1; i < g->n_kv; i++)
    if (!strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key)) {
      mi_path_err(err, el, g->path, "metadata key '%.200s' appears twice", g->kv_by_key[i]->key);
      return -1;
    }
  const mi_gguf_kv *al = mi_gguf_get(g, "general.alignment");
  if (al) {
    int64_t a;
    if (al->type != MI_GGUF_U32 || mi_gguf_kv_int(al, &a) || a <= 0 ||
        a > (int64_t)MI_GGUF_MAX_ALIGNMENT || (a & (a - 1))) {
      mi_path_err(err, el, g->path,
                  "general.alignment must be a u32 power of two up to %u (it is a %s)",
                  MI_GGUF_MAX_ALIGNMENT, mi_gguf_vtype_name(al->type));
      return -1;
    }
    g->alignment = (uint64_t)a;
  }
  return 0;
}

/* Tensor info i: its name, shape, type and offset; its byte size when the
 * type is known. */
static int parse_tensor_info(rd *r, uint64_t i) {
  mi_gguf *g = r->g;
  char *err = r->err;
  size_t el = r->el;
  mi_gguf_tensor *t = &g->t[g->n_t];
  const unsigned char *s;
  uint64_t sl;
  snprintf(r->what, sizeof r->what, "the info of tensor %llu", (unsigned long long)i);
  if (rd_str(r, MI_GGUF_MAX_NAME, &s, &sl)) return -1;
  if (!clean_name(s, sl)) {
    mi_path_err(err, el, g->path, "tensor %llu: name is empty or has a control character",
                (unsigned long long)i);
    return -1;
  }
  char *name = dup_n(s, sl);
  if (!name) {
    mi_path_err(err, el, g->path, "out of memory");
    return -1;
  }
  t->name = name;
  g->n_t++;
  snprintf(r->what, sizeof r->what, "the info of tensor '%.80s'", name);
  if (rd_u32(r, &t->n_dims)) return -1;
  if (t->n_dims < 1 || t->n_dims > MI_GGUF_MAX_DIMS) {
    mi_path_err(err, el, g->path, "tensor '%s': %u dimensions (1..%d)", name, t->n_dims,
                MI_GGUF_MAX_DIMS);
    return -1;
  }
  uint64_t count = 1;
  for (int d = 0; d < MI_GGUF_MAX_DIMS; d++)
    t->ne[d] = 1;
  for (uint32_t d = 0; d < t->n_dims; d++) {
    if (rd_u64(r, &t->ne[d])) return -1;
    if (t->ne[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(count, t->ne[d], &count) ||
        count > (uint64_t)INT64_MAX) {
      mi_path_err(err, el, g->path, "tensor '%s': the product of its dimensions overflows", name);
      return -1;
    }
  }
  if (rd_u32(r, &t->type) || rd_u64(r, &t->offset)) return -1;
  if (t->offset % g->alignment) {
    mi_path_err(err, el, g->path,
                "tensor '%s': data offset %llu is not a multiple of the alignment %llu", name,
                (unsigned long long)t->offset, (unsigned long long)g->alignment);
    return -1;
  }
  const ggml_type_info *ti = ggml_type(t->type);
  if (ti) {
    if (t->ne[0] % ti->block) {
      mi_path_err(err, el, g->path,
                  "tensor '%s': ne[0] = %llu is not a multiple of the %s block of %u", name,
                  (unsigned long long)t->ne[0], ti->name, ti->block);
      return -1;
    }
    if (__builtin_mul_overflow(count / ti->block, (uint64_t)ti->size, &t->nbytes)) {
      mi_path_err(err, el, g->path, "tensor '%s': its byte size overflows", name);
      return -1;
    }
    t->known = 1;
  }
  return 0;
}

/* The data section after the infos: every tensor's bytes inside it, a
 * power-of-two element size aligned in the file (the mapping is
 * page-aligned: kernels load these without memcpy). */
static int place_tensor_data(rd *r) {
  mi_gguf *g = r->g;
  char *err = r->err;
  size_t el = r->el;
  g->data_off = (r->pos + g->alignment - 1) / g->alignment * g->alignment;
  if (g->n_t && g->data_off > g->size) {
    mi_path_err(err, el, g->path,
                "truncated: the data section would start at byte %llu, the "
                "file has %llu",
                (unsigned long long)g->data_off, (unsigned long long)g->size);
    return -1;
  }
  const uint64_t data_len = g->data_off <= g->size ? g->size - g->data_off : 0;
  for (size_t i = 0; i < g->n_t; i++) {
    mi_gguf_tensor *t = &g->t[i];
    if (t->offset > data_len || (t->known && t->nbytes > data_len - t->offset)) {
      mi_path_err(err, el, g->path,
                  "tensor '%s': data [%llu, +%llu) lies past the end of the data section "
                  "(%llu bytes)",
                  t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                  (unsigned long long)data_len);
      return -1;
    }
    if (!t->known) continue;
    const ggml_type_info *ti = ggml_type(t->type);
    uint64_t abs_off = g->data_off + t->offset;
    if (ti->block == 1 && abs_off % ti->size) {
      mi_path_err(err, el, g->path, "tensor '%s': its %s data at file offset %llu is misaligned",
                  t->name, ti->name, (unsigned long long)abs_off);
      return -1;
    }
    t->data = g->base + abs_off;
  }
  return 0;
}

/* no two tensors share bytes (aliasing would let one write show in another) */
static int check_no_overlap(mi_gguf *g, char *err, size_t el) {
  mi_gguf_tensor **by_off = malloc((g->n_t ? g->n_t : 1) * sizeof *by_off);
  if (!by_off) {
    mi_path_err(err, el, g->path, "out of memory");
    return -1;
  }
  size_t nk = 0;
  for (size_t i = 0; i < g->n_t; i++)
    if (g->t[i].known && g->t[i].nbytes) by_off[nk++] = &g->t[i];
  qsort(by_off, nk, sizeof *by_off, cmp_toff);
  for (size_t i = 1; i < nk; i++)
    if (by_off[i]->offset < by_off[i - 1]->offset + by_off[i - 1]->nbytes) {
      mi_path_err(err, el, g->path, "tensors '%s' and '%s' overlap", by_off[i - 1]->name,
                  by_off[i]->name);
      free(by_off);
      return -1;
    }
  free(by_off);
  return 0;
}

static int parse(mi_gguf *g, char *err, size_t el) {
  rd r = {.g = g, .pos = 0, .err = err, .el = el};
  uint64_t nt, nkv;
  if (parse_header(&r, &nt, &nkv) || parse_metadata(&r, nkv)) return -1;
  for (uint64_t i = 0; i < nt; i++)
    if (parse_tensor_info(&r, i)) return -1;
  for (size_t i = 0; i < g->n_t; i++)
    g->t_by_name[i] = &g->t[i];
  qsort(g->t_by_name, g->n_t, sizeof *g->t_by_name, cmp_tname);
  for (size_t i = 1; i < g->n_t; i++)
    if (!strcmp(g->t_by_name[i - 1]->name, g->t_by_name[i]->name)) {
      mi_path_err(err, el, g->path, "tensor '%s' appears twice", g->t_by_name[i]->name);
      return -1;
    }
  if (place_tensor_data(&r)) return -1;
  return check_no_overlap(g, err, el);
}

static mi_gguf *new_gguf(const char *path, char *err, size_t el) {
  mi_gguf *g = calloc(1, sizeof *g);
  if (!g || !(g->path = strdup(path))) {
    free(g);
    mi_path_err(err, el, path, "out of memory");
    return NULL;
  }
  return g;
}

mi_gguf *mi_gguf_open(const char *path, mi_weights_load how, char *err, size_t err_len) {
  mi_gguf *g = new_gguf(path, err, err_len);
  if (!g) return NULL;
  void *map;
  uint64_t size;
  if (mi_weights_map_file(g->path, how, 24, "a GGUF file has at least 24", &map, &g->map_len, &size,
                          err, err_len) != 0) {
    mi_gguf_close(g);
    return NULL;
  }
  g->map = map;
  g->base = map;
  g->size = size;
  if (parse(g, err, err_len) != 0) {
    mi_gguf_close(g);
    return NULL;
  }
  return g;
}

mi_gguf *mi_gguf_open_mem(const void *buf, size_t len, const char *name, char *err,
                          size_t err_len) {
  mi_gguf *g = new_gguf(name, err, err_len);
  if (!g) return NULL;
  g->base = buf;
  g->size = len;
  if (parse(g, err, err_len) != 0) {
    mi_gguf_close(g);
    return NULL;
  }
  return g;
}

void mi_gguf_close(mi_gguf *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_kv; i++) {
    free((char *)g->kv[i].key);
    free((uint64_t *)g->kv[i].str_off);
  }
  for (size_t i = 0; i < g->n_t; i++)
    free((char *)g->t[i].name);
  free(g->kv);
  free(g->kv_by_key);
  free(g->t);
  free(g->t_by_name);
  mi_weights_unmap_file(g->map, g->map_len);
  free(g->path);
  free(g);
}

int mi_gguf_sniff(const char *path) {
  char err[64];
  uint64_t size;
  int fd = mi_file_open(path, 0, 0, NULL, &size, err, sizeof err);
  if (fd < 0) return 0;
  char m[4];
  ssize_t n = size >= 4 ? pread(fd, m, 4, 0) : 0;
  close(fd);
  return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

const char *mi_gguf_path(const mi_gguf *g) {
  return g->path;
}
uint32_t mi_gguf_version(const mi_gguf *g) {
  return g->version;
}
uint64_t mi_gguf_data_offset(const mi_gguf *g) {
  return g->data_off;
}
uint64_t mi_gguf_alignment(const mi_gguf *g) {
  return g->alignment;
}
uint64_t mi_gguf_file_size(const mi_gguf *g) {
  return g->size;
}
size_t mi_gguf_kv_count(const mi_gguf *g) {
  return g ? g->n_kv : 0;
}
const mi_gguf_kv *mi_gguf_kv_at(const mi_gguf *g, size_t i) {
  return g && i < g->n_kv ? &g->kv[i] : NULL;
}

const mi_gguf_kv *mi_gguf_get(const mi_gguf *g, const char *key) {
  if (!g || !key) return NULL;
  size_t lo = 0, hi = g->n_kv;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(key, g->kv_by_key[mid]->key);
    if (!c) return g->kv_by_key[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

/* A scalar of integer type vt at p. */
static int int_at(uint32_t vt, const unsigned char *p, int64_t *out) {
  uint64_t u;
  switch (vt) {
  case MI_GGUF_U8:
  case MI_GGUF_BOOL: *out = p[0]; return 0;
  case MI_GGUF_I8: *out = (int8_t)p[0]; return 0;
  case MI_GGUF_U16: *out = (uint16_t)(p[0] | p[1] << 8); return 0;
  case MI_GGUF_I16: *out = (int16_t)(uint16_t)(p[0] | p[1] << 8); return 0;
  case MI_GGUF_U32:
    *out = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return 0;
  case MI_GGUF_I32:
    *out = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
    return 0;
  case MI_GGUF_U64:
    u = le64(p);
    if (u > (uint64_t)INT64_MAX) return -1;
    *out = (int64_t)u;
    return 0;
  case MI_GGUF_I64: *out = (int64_t)le64(p); return 0;
  default: return -1;
  }
}

int mi_gguf_kv_int(const mi_gguf_kv *kv, int64_t *out) {
  return kv ? int_at(kv->type, kv->p, out) : -1;
}

int mi_gguf_kv_real(const mi_gguf_kv *kv, double *out) {
  if (!kv) return -1;
  if (kv->type == MI_GGUF_F32) {
    uint32_t b = (uint32_t)kv->p[0] | (uint32_t)kv->p[1] << 8 | (uint32_t)kv->p[2] << 16 |
                 (uint32_t)kv->p[3] << 24;
    float f;
    memcpy(&f, &b, 4);
    *out = f;
    return 0;
  }
  if (kv->type == MI_GGUF_F64) {
    uint64_t b = le64(kv->p);
    memcpy(out, &b, 8);
    return 0;
  }
  int64_t i;
  if (kv->type == MI_GGUF_BOOL || int_at(kv->type, kv->p, &i)) return -1;
  *out = (double)i;
  return 0;
}

const char *mi_gguf_kv_str(const mi_gguf_kv *kv, size_t *len) {
  if (!kv || kv->type != MI_GGUF_STRING) return NULL;
  if (len) *len = (size_t)kv->n;
  return (const char *)kv->p;
}

int mi_gguf_arr_str(const mi_gguf_kv *kv, uint64_t i, const char **s, size_t *len) {
  if (!kv || kv->type != MI_GGUF_ARRAY || kv->arr_type != MI_GGUF_STRING || i >= kv->n) return -1;
  const unsigned char *p = kv->p + kv->str_off[i];
  *len = (size_t)le64(p);
  *s = (const char *)p + 8;
  return 0;
}

int mi_gguf_arr_int(const mi_gguf_kv *kv, uint64_t i, int64_t *out) {
  if (!kv || kv->type != MI_GGUF_ARRAY || i >= kv->n || kv->arr_type == MI_GGUF_STRING ||
      kv->arr_type == MI_GGUF_F32 || kv->arr_type == MI_GGUF_F64 || kv->arr_type > MI_GGUF_F64)
    return -1;
  return int_at(kv->arr_type, kv->p + i * VTYPE_SIZE[kv->arr_type], out);
}

int mi_gguf_arr_real(const mi_gguf_kv *kv, uint64_t i, double *out) {
  if (!kv || kv->type != MI_GGUF_ARRAY || i >= kv->n ||
      (kv->arr_type != MI_GGUF_F32 && kv->arr_type != MI_GGUF_F64))
    return -1;
  const unsigned char *p = kv->p + i * VTYPE_SIZE[kv->arr_type];
  if (kv->arr_type == MI_GGUF_F64) {
    uint64_t b = le64(p);
    memcpy(out, &b, 8);
    return 0;
  }
  uint32_t b = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  float f;
  memcpy(&f, &b, 4);
  *out = f;
  return 0;
}

size_t mi_gguf_tensor_count(const mi_gguf *g) {
  return g ? g->n_t : 0;
}
const mi_gguf_tensor *mi_gguf_tensor_at(const mi_gguf *g, size_t i) {
  return g && i < g->n_t ? &g->t[i] : NULL;
}

const mi_gguf_tensor *mi_gguf_tensor_find(const mi_gguf *g, const char *name) {
  if (!g || !name) return NULL;
  size_t lo = 0, hi = g->n_t;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, g->t_by_name[mid]->name);
    if (!c) return g->t_by_name[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}
