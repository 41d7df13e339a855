/* Safetensors reader: see safetensors.h. */
#define _GNU_SOURCE
#include "core/runtime/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/file.h"

/* ---- dtypes -------------------------------------------------------------- */

typedef struct st_dtype {
  const char *name;
  int mi; /* mi_dtype or MI_ST_DTYPE_OTHER */
  unsigned size;
} st_dtype;

static const st_dtype DTYPES[] = {
    {"F32", MI_DTYPE_F32, 4},          {"F16", MI_DTYPE_F16, 2},          {"BF16", MI_DTYPE_BF16, 2},
    {"I32", MI_DTYPE_I32, 4},          {"I64", MI_DTYPE_I64, 8},          {"U8", MI_DTYPE_U8, 1},
    {"F64", MI_ST_DTYPE_OTHER, 8},     {"I8", MI_ST_DTYPE_OTHER, 1},      {"I16", MI_ST_DTYPE_OTHER, 2},
    {"U16", MI_ST_DTYPE_OTHER, 2},     {"U32", MI_ST_DTYPE_OTHER, 4},     {"U64", MI_ST_DTYPE_OTHER, 8},
    {"BOOL", MI_ST_DTYPE_OTHER, 1},    {"F8_E4M3", MI_ST_DTYPE_OTHER, 1}, {"F8_E5M2", MI_ST_DTYPE_OTHER, 1},
};

static const st_dtype *dtype_lookup(const char *s) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (!strcmp(DTYPES[i].name, s)) return &DTYPES[i];
  return NULL;
}

/* ---- one file ------------------------------------------------------------ */

typedef struct st_tensor {
  char *name;
  const st_dtype *dt;
  int ndim;
  int64_t shape[MI_ST_MAX_DIMS];
  uint64_t begin, end; /* within the data section */
} st_tensor;

struct mi_st_file {
  char *path;
  void *map;
  size_t map_len;
  const unsigned char *data; /* start of the data section */
  uint64_t data_len;
  st_tensor *t; /* [n], sorted by begin */
  size_t n;
  st_tensor **by_name; /* [n], sorted by name */
  json_t *meta;        /* "__metadata__" object or NULL */
};


static int cmp_begin(const void *a, const void *b) {
  const st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_name_ptr(const void *a, const void *b) {
  const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
  return strcmp(x->name, y->name);
}

/* Parses one header entry into t; 0 ok, -1 with err set. */
static int parse_tensor(const char *path, const char *name, json_t *v, uint64_t data_len, st_tensor *t, char *err,
                        size_t err_len) {
  if (strlen(name) == 0 || strlen(name) > MI_ST_MAX_NAME) {
    mi_path_err(err, err_len, path, "tensor name of %zu bytes (must be 1..%u)", strlen(name), MI_ST_MAX_NAME);
    return -1;
  }
  if (!json_is_object(v)) {
    mi_path_err(err, err_len, path, "tensor '%s': entry is not a JSON object", name);
    return -1;
  }
  json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
         *offs = json_object_get(v, "data_offsets");
  if (!dt) {
    mi_path_err(err, err_len, path, "tensor '%s': missing dtype", name);
    return -1;
  }
  if (!shape) {
    mi_path_err(err, err_len, path, "tensor '%s': missing shape", name);
    return -1;
  }
  if (!offs) {
    mi_path_err(err, err_len, path, "tensor '%s': missing data_offsets", name);
    return -1;
  }
  if (!json_is_string(dt)) {
    mi_path_err(err, err_len, path, "tensor '%s': dtype is not a string", name);
    return -1;
  }
  t->dt = dtype_lookup(json_string_value(dt));
  if (!t->dt) {
    mi_path_err(err, err_len, path, "tensor '%s': unknown dtype '%s'", name, json_string_value(dt));
    return -1;
  }
  if (!json_is_array(shape)) {
    mi_path_err(err, err_len, path, "tensor '%s': shape is not an array", name);
    return -1;
  }
  size_t nd = json_array_size(shape);
  if (nd > MI_ST_MAX_DIMS) {
    mi_path_err(err, err_len, path, "tensor '%s': %zu dimensions (at most %d)", name, nd, MI_ST_MAX_DIMS);
    return -1;
  }
  t->ndim = (int)nd;
  uint64_t count = 1;
  for (size_t d = 0; d < nd; d++) {
    json_t *e = json_array_get(shape, d);
    if (!json_is_integer(e)) {
      mi_path_err(err, err_len, path, "tensor '%s': shape[%zu] is not an integer", name, d);
      return -1;
    }
    json_int_t x = json_integer_value(e);
    if (x < 0) {
      mi_path_err(err, err_len, path, "tensor '%s': negative dimension shape[%zu] = %lld", name, d, (long long)x);
      return -1;
    }
    t->shape[d] = x;
    if (__builtin_mul_overflow(count, (uint64_t)x, &count)) {
      mi_path_err(err, err_len, path, "tensor '%s': shape product overflows", name);
      return -1;
    }
  }
  uint64_t want;
  if (__builtin_mul_overflow(count, (uint64_t)t->dt->size, &want)) {
    mi_path_err(err, err_len, path, "tensor '%s': shape product overflows", name);
    return -1;
  }
  if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
      !json_is_integer(json_array_get(offs, 1))) {
    mi_path_err(err, err_len, path, "tensor '%s': data_offsets is not [begin, end] integers", name);
    return -1;
  }
  json_int_t b = json_integer_value(json_array_get(offs, 0)), e = json_integer_value(json_array_get(offs, 1));
  if (b < 0 || e < 0) {
    mi_path_err(err, err_len, path, "tensor '%s': negative data_offsets", name);
    return -1;
  }
  if (b > e) {
    mi_path_err(err, err_len, path, "tensor '%s': data_offsets begin %lld > end %lld", name, (long long)b,
           (long long)e);
    return -1;
  }
  if ((uint64_t)e > data_len) {
    mi_path_err(err, err_len, path, "tensor '%s': data_offsets end %lld past end of data (%llu bytes)", name,
           (long long)e, (unsigned long long)data_len);
    return -1;
  }
  if ((uint64_t)(e - b) != want) {
    mi_path_err(err, err_len, path, "tensor '%s': byte length %lld != shape x dtype size %llu", name,
           (long long)(e - b), (unsigned long long)want);
    return -1;
  }
  /* the data section starts 8-byte aligned (header length checked), so a
   * tensor whose offset is a multiple of its element size is aligned */
  if ((uint64_t)b % t->dt->size != 0) {
    mi_path_err(err, err_len, path, "tensor '%s': data offset %lld is not a multiple of its %s element size %u",
           name, (long long)b, t->dt->name, t->dt->size);
    return -1;
  }
  t->begin = (uint64_t)b;
  t->end = (uint64_t)e;
  t->name = strdup(name);
  if (!t->name) {
    mi_path_err(err, err_len, path, "out of memory");
    return -1;
  }
  return 0;
}

/* Checks the __metadata__ entry: an object of string values. */
static int check_metadata(const char *path, json_t *m, char *err, size_t err_len) {
  if (!json_is_object(m)) {
    mi_path_err(err, err_len, path, "__metadata__ is not a JSON object");
    return -1;
  }
  const char *k;
  json_t *v;
  json_object_foreach(m, k, v) {
    if (!json_is_string(v)) {
      mi_path_err(err, err_len, path, "__metadata__ value '%s' is not a string", k);
      return -1;
    }
  }
  return 0;
}

static int parse_header(mi_st_file *f, const char *hdr, size_t hlen, char *err, size_t err_len) {
  json_error_t je;
  json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    mi_path_err(err, err_len, f->path, "header is not valid JSON (%s at byte %d)", je.text, je.position);
    return -1;
  }
  int rc = -1;
  if (!json_is_object(root)) {
    mi_path_err(err, err_len, f->path, "header JSON is not an object");
    goto out;
  }
  size_t n = json_object_size(root);
  json_t *meta = json_object_get(root, "__metadata__");
  if (meta) {
    if (check_metadata(f->path, meta, err, err_len)) goto out;
    n--;
  }
  if (n > MI_ST_MAX_TENSORS) {
    mi_path_err(err, err_len, f->path, "%zu tensors (at most %u)", n, MI_ST_MAX_TENSORS);
    goto out;
  }
  f->t = calloc(n ? n : 1, sizeof *f->t);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  if (!f->t || !f->by_name) {
    mi_path_err(err, err_len, f->path, "out of memory");
    goto out;
  }
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "__metadata__")) continue;
    if (parse_tensor(f->path, k, v, f->data_len, &f->t[f->n], err, err_len)) goto out;
    f->n++;
  }
  /* Tensors must tile the data section exactly: no overlap (two names for
   * the same bytes would let one write alias another), no holes (as the
   * reference implementation requires). Empty tensors take no room. */
  qsort(f->t, f->n, sizeof *f->t, cmp_begin);
  uint64_t pos = 0;
  const char *prev = NULL;
  for (size_t i = 0; i < f->n; i++) {
    const st_tensor *t = &f->t[i];
    if (t->begin == t->end) continue;
    if (t->begin < pos) {
      mi_path_err(err, err_len, f->path, "tensors '%s' and '%s' overlap", prev, t->name);
      goto out;
    }
    if (t->begin > pos) {
      mi_path_err(err, err_len, f->path, "%llu bytes before tensor '%s' belong to no tensor",
             (unsigned long long)(t->begin - pos), t->name);
      goto out;
    }
    pos = t->end;
    prev = t->name;
  }
  if (pos != f->data_len) {
    mi_path_err(err, err_len, f->path, "%llu trailing bytes of data belong to no tensor",
           (unsigned long long)(f->data_len - pos));
    goto out;
  }
  for (size_t i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
  qsort(f->by_name, f->n, sizeof *f->by_name, cmp_name_ptr);
  if (meta) f->meta = json_incref(meta);
  rc = 0;
out:
  json_decref(root);
  return rc;
}

/* ---- mapped files that change under us ------------------------------------
 * A mapped weight file that someone truncates makes the next touch of the
 * lost pages raise SIGBUS. The handler below looks the faulting address up
 * in the live mappings; inside one it prints "PROG: FILE: the file changed
 * while mapped (truncated?)" and exits 1; anywhere else it puts back the
 * previous action, and the fault repeats under it. No cost while nothing
 * faults: the table is touched only at open and close. */

#define ST_GUARD_SLOTS 4096
typedef struct st_guard {
  _Atomic(uintptr_t) begin;
  uintptr_t end;
  const char *path;
} st_guard;
static st_guard g_guard[ST_GUARD_SLOTS];
static pthread_mutex_t g_guard_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction g_guard_old;
static int g_guard_installed;

static void guard_write(const char *s) {
  size_t n = strlen(s);
  while (n) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void guard_handler(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  uintptr_t a = (uintptr_t)si->si_addr;
  for (size_t i = 0; i < ST_GUARD_SLOTS; i++) {
    uintptr_t b = atomic_load(&g_guard[i].begin);
    if (b && a >= b && a < g_guard[i].end) {
      guard_write(program_invocation_short_name);
      guard_write(": ");
      guard_write(g_guard[i].path);
      guard_write(": the file changed while mapped (truncated?)\n");
      _exit(1);
    }
  }
  /* not ours: the previous action takes the repeated fault */
  sigaction(sig, &g_guard_old, NULL);
}

static void mi_st_guard_add(const void *map, size_t len, const char *path) {
  pthread_mutex_lock(&g_guard_lock);
  if (!g_guard_installed) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_guard_old) == 0) g_guard_installed = 1;
  }
  for (size_t i = 0; i < ST_GUARD_SLOTS; i++)
    if (!atomic_load(&g_guard[i].begin)) {
      g_guard[i].end = (uintptr_t)map + len;
      g_guard[i].path = path;
      atomic_store(&g_guard[i].begin, (uintptr_t)map);
      break;
    }
  pthread_mutex_unlock(&g_guard_lock);
}

static void mi_st_guard_remove(const void *map) {
  pthread_mutex_lock(&g_guard_lock);
  for (size_t i = 0; i < ST_GUARD_SLOTS; i++)
    if (atomic_load(&g_guard[i].begin) == (uintptr_t)map) atomic_store(&g_guard[i].begin, 0);
  pthread_mutex_unlock(&g_guard_lock);
}

/* The whole file in private memory aligned to 2 MiB and advised for
 * transparent huge pages (see MI_WEIGHTS_READ), read-only once filled.
 * Returns the base and sets *len (the mapping's length), or NULL + err. */
static void *read_whole(int fd, uint64_t size, size_t *len, const char *path, char *err,
                        size_t err_len) {
  /* A file under 2 MiB (a small shard) gets ordinary pages: rounding each of
   * many tiny shards to a 2 MiB huge page would cost 2 MiB apiece. */
  const size_t huge = size >= ((uint64_t)2 << 20) ? (size_t)2 << 20 : (size_t)sysconf(_SC_PAGESIZE);
  if (size > SIZE_MAX - 2 * huge) {
    mi_path_err(err, err_len, path, "file too large to read into memory (%llu bytes)",
           (unsigned long long)size);
    return NULL;
  }
  const size_t n = ((size_t)size + huge - 1) / huge * huge, span = n + huge;
  /* (with ordinary pages the mapping is already aligned: the trim below is a no-op
   * apart from the spare page at the end) */
  char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    mi_path_err(err, err_len, path, "cannot allocate %llu bytes for the weights: %s",
           (unsigned long long)n, strerror(errno));
    return NULL;
  }
  /* trim the mapping to a 2 MiB-aligned [base, base + n) */
  char *base = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
  if (base > raw) munmap(raw, (size_t)(base - raw));
  if (raw + span > base + n) munmap(base + n, (size_t)(raw + span - (base + n)));
  (void)madvise(base, n, MADV_HUGEPAGE); /* a hint: without THP, 4 KiB pages */
#ifdef MADV_POPULATE_WRITE
  /* Fault it all in first, 2 MiB at a time (Linux >= 5.14; older kernels
   * refuse and pread faults it in). Measured, 1.2 GB: 0.65 s in all, where
   * faulting huge pages one by one inside pread took 2.4 s. */
  (void)madvise(base, n, MADV_POPULATE_WRITE);
#endif
  uint64_t off = 0;
  while (off < size) {
    size_t want = size - off > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)(size - off);
    ssize_t r = pread(fd, base + off, want, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r < 0)
        mi_path_err(err, err_len, path, "read failed at byte %llu: %s", (unsigned long long)off,
               strerror(errno));
      else
        mi_path_err(err, err_len, path, "file shrank while being read (%llu of %llu bytes)",
               (unsigned long long)off, (unsigned long long)size);
      munmap(base, n);
      return NULL;
    }
    off += (uint64_t)r;
  }
  (void)mprotect(base, n, PROT_READ); /* weights are never written */
  *len = n;
  return base;
}

mi_st_file *mi_st_open_file(const char *path, char *err, size_t err_len) {
  return mi_st_open_file_ex(path, MI_WEIGHTS_MMAP, err, err_len);
}

int mi_weights_map_file(const char *path, mi_weights_load how, uint64_t min_size,
                        const char *min_why, void **map, size_t *map_len, uint64_t *size_out,
                        char *err, size_t err_len) {
  *map = NULL;
  *map_len = 0;
  /* the shared opener: a FIFO or a device is refused, never waited on */
  uint64_t size;
  int fd = mi_file_open(path, 0, 0, NULL, &size, err, err_len);
  if (fd < 0) return -1;
  if (size < min_size || size == 0) {
    mi_path_err(err, err_len, path, "file too small (%llu bytes; %s)", (unsigned long long)size,
                min_why);
    close(fd);
    return -1;
  }
  if (how == MI_WEIGHTS_READ) {
    *map = read_whole(fd, size, map_len, path, err, err_len);
    close(fd);
    if (!*map) return -1;
  } else {
    /* MAP_POPULATE: fault the whole file in now (load time) rather than
     * page by page inside the first forward pass, where ~300k minor faults
     * for a 1.2 GB model cost a third of a second of time-to-first-token. */
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd); /* the mapping keeps the file */
    if (m == MAP_FAILED) {
      mi_path_err(err, err_len, path, "cannot mmap: %s", strerror(errno));
      return -1;
    }
    *map = m;
    *map_len = (size_t)size;
    mi_st_guard_add(m, (size_t)size, path);
  }
  *size_out = size;
  return 0;
}

void mi_weights_unmap_file(void *map, size_t map_len) {
  if (!map) return;
  mi_st_guard_remove(map);
  munmap(map, map_len);
}

mi_st_file *mi_st_open_file_ex(const char *path, mi_weights_load how, char *err, size_t err_len) {
  mi_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    mi_path_err(err, err_len, path, "out of memory");
    return NULL;
  }
  uint64_t size;
  void *map;
  /* f->path: the guard keeps the pointer for its message */
  if (mi_weights_map_file(f->path, how, 8, "a safetensors file has at least 8", &map, &f->map_len,
                          &size, err, err_len) != 0)
    goto fail;
  f->map = map;
  const unsigned char *p = f->map;
  uint64_t hlen = 0;
  for (int b = 0; b < 8; b++) hlen |= (uint64_t)p[b] << (8 * b);
  if (hlen > MI_ST_MAX_HEADER) {
    mi_path_err(err, err_len, path, "header length %llu too large (limit %u)", (unsigned long long)hlen,
           MI_ST_MAX_HEADER);
    goto fail;
  }
  if (hlen > size - 8) {
    mi_path_err(err, err_len, path, "header length %llu past end of file (%llu bytes)", (unsigned long long)hlen,
           (unsigned long long)size);
    goto fail;
  }
  /* The format pads the header so the data section starts 8-byte aligned
   * (Hugging Face's writer and mi-mkmodel do); without it every tensor is
   * misaligned and kernels would load it so (undefined behaviour). */
  if (hlen % 8 != 0) {
    mi_path_err(err, err_len, path,
           "header length %llu is not a multiple of 8 (the data would be misaligned; "
           "safetensors pads the header with spaces)",
           (unsigned long long)hlen);
    goto fail;
  }
  f->data = p + 8 + hlen;
  f->data_len = size - 8 - hlen;
  if (parse_header(f, (const char *)p + 8, (size_t)hlen, err, err_len)) goto fail;
  return f;
fail:
  mi_st_close_file(f);
  return NULL;
}

void mi_st_close_file(mi_st_file *f) {
  if (!f) return;
  if (f->t)
    for (size_t i = 0; i < f->n; i++) free(f->t[i].name);
  free(f->t);
  free(f->by_name);
  if (f->meta) json_decref(f->meta);
  mi_weights_unmap_file(f->map, f->map_len);
  free(f->path);
  free(f);
}

const char *mi_st_path(const mi_st_file *f) { return f->path; }
size_t mi_st_count(const mi_st_file *f) { return f ? f->n : 0; }

static void fill_info(const mi_st_file *f, const st_tensor *t, mi_weight_info *out) {
  memset(out, 0, sizeof *out);
  out->name = t->name;
  out->dtype = t->dt->mi;
  out->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) out->shape[d] = t->shape[d];
  out->data = f->data + t->begin;
  out->nbytes = (size_t)(t->end - t->begin);
  out->file = f->path;
}

int mi_st_at(const mi_st_file *f, size_t i, mi_weight_info *out) {
  if (!f || i >= f->n) return -1;
  if (out) fill_info(f, &f->t[i], out);
  return 0;
}

static const st_tensor *find_tensor(const mi_st_file *f, const char *name) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, f->by_name[mid]->name);
    if (c == 0) return f->by_name[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

int mi_st_find(const mi_st_file *f, const char *name, mi_weight_info *out) {
  if (!f || !name) return -1;
  const st_tensor *t = find_tensor(f, name);
  if (!t) return -1;
  if (out) fill_info(f, t, out);
  return 0;
}

const char *mi_st_dtype_string(const mi_st_file *f, size_t i) {
  return f && i < f->n ? f->t[i].dt->name : NULL;
}

const char *mi_st_metadata(const mi_st_file *f, const char *key) {
  if (!f || !f->meta) return NULL;
  return json_string_value(json_object_get(f->meta, key));
}

/* ---- a model directory ---------------------------------------------------- */

typedef struct w_entry {
  const mi_st_file *file;
  const st_tensor *t;
} w_entry;

struct mi_weights {
  mi_st_file **files; /* [nfiles] */
  size_t nfiles;
  w_entry *e; /* [n], sorted by name */
  size_t n;
  uint64_t total;
  /* or a table another reader made (mi_weights_from_table): */
  mi_weight_info *tab; /* [n], sorted by name */
  void *owner;
  void (*owner_close)(void *owner);
};

static int cmp_info(const void *a, const void *b) {
  return strcmp(((const mi_weight_info *)a)->name, ((const mi_weight_info *)b)->name);
}

mi_weights *mi_weights_from_table(const mi_weight_info *infos, size_t n, void *owner,
                                  void (*owner_close)(void *owner), const char *path, char *err,
                                  size_t err_len) {
  mi_weights *w = calloc(1, sizeof *w);
  if (w) w->tab = malloc((n ? n : 1) * sizeof *w->tab);
  if (!w || !w->tab) {
    free(w);
    mi_path_err(err, err_len, path, "out of memory");
    return NULL;
  }
  if (n) memcpy(w->tab, infos, n * sizeof *w->tab);
  w->n = n;
  qsort(w->tab, n, sizeof *w->tab, cmp_info);
  for (size_t i = 0; i < n; i++) {
    if (i && strcmp(w->tab[i - 1].name, w->tab[i].name) == 0) {
      mi_path_err(err, err_len, path, "two tensors are served as '%s'", w->tab[i].name);
      free(w->tab);
      free(w);
      return NULL;
    }
    w->total += w->tab[i].nbytes;
  }
  w->owner = owner;
  w->owner_close = owner_close;
  return w;
}

void mi_weights_close(mi_weights *w) {
  if (!w) return;
  free(w->tab);
  if (w->owner_close) w->owner_close(w->owner);
  for (size_t i = 0; i < w->nfiles; i++) mi_st_close_file(w->files[i]);
  free(w->files);
  free(w->e);
  free(w);
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const w_entry *)a)->t->name, ((const w_entry *)b)->t->name);
}

static int path_join(char *out, size_t n, const char *dir, const char *file) {
  int k = snprintf(out, n, "%s/%s", dir, file);
  return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* A shard name from an index: a plain file name in the model directory
 * (at most NAME_MAX bytes, no control characters). */
static int shard_name_ok(const char *s) {
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20) return 0;
  return *s && strlen(s) <= 255 && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}

/* A weight file named by the model directory must lie inside it once
 * symlinks are resolved: a link to a file in the folder is fine, one leading
 * elsewhere (/etc/..., another user's files) is refused. One exception: the
 * Hugging Face hub cache, whose snapshots/REV/ files link to ../../blobs/. */
static int shard_contained(const char *path, const char *dir, char *err, size_t err_len) {
  char *rp = realpath(path, NULL), *rd = realpath(dir, NULL);
  int ok = 0;
  if (rp && rd) {
    ok = mi_file_inside(rp, rd);
    /* .../models--ORG--NAME/snapshots/REV -> .../models--ORG--NAME/blobs */
    char *slash = strrchr(rd, '/');
    if (!ok && slash && slash > rd) {
      *slash = 0;
      char *s2 = strrchr(rd, '/');
      if (s2 && strcmp(s2 + 1, "snapshots") == 0) {
        strcpy(s2 + 1, "blobs");
        ok = mi_file_inside(rp, rd);
      }
    }
  } else if (!rp) {
    ok = 1; /* missing: the open that follows says so */
  }
  if (!ok)
    mi_path_err(err, err_len, path, "leads outside the model folder (to %s): refused", rp ? rp : "?");
  free(rp);
  free(rd);
  return ok ? 0 : -1;
}

static mi_weights *open_single(const char *path, mi_weights_load how, char *err, size_t err_len) {
  mi_weights *w = calloc(1, sizeof *w);
  if (!w || !(w->files = calloc(1, sizeof *w->files))) {
    free(w);
    mi_path_err(err, err_len, path, "out of memory");
    return NULL;
  }
  if (!(w->files[0] = mi_st_open_file_ex(path, how, err, err_len))) goto fail;
  w->nfiles = 1;
  const mi_st_file *f = w->files[0];
  w->e = calloc(f->n ? f->n : 1, sizeof *w->e);
  if (!w->e) {
    mi_path_err(err, err_len, path, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < f->n; i++) {
    w->e[i].file = f;
    w->e[i].t = f->by_name[i]; /* already in name order */
    w->total += f->t[i].end - f->t[i].begin;
  }
  w->n = f->n;
  return w;
fail:
  mi_weights_close(w);
  return NULL;
}

/* A real index is a few MiB at most (one short line per tensor); jansson
 * holds a parsed file in ~20x its size, so bound it before parsing. */
#define ST_MAX_INDEX_BYTES (64u << 20)

static mi_weights *open_index(const char *dir, const char *ipath, mi_weights_load how, char *err,
                              size_t err_len) {
  size_t ilen;
  char *itext = mi_file_read_all(ipath, 0, ST_MAX_INDEX_BYTES, "safetensors index", &ilen, err,
                                 err_len);
  if (!itext) return NULL;
  json_error_t je;
  json_t *root = json_loadb(itext, ilen, JSON_REJECT_DUPLICATES, &je);
  free(itext);
  if (!root) {
    mi_path_err(err, err_len, ipath, "not valid JSON (%s, line %d)", je.text, je.line);
    return NULL;
  }
  mi_weights *w = calloc(1, sizeof *w);
  json_t *names = json_object(); /* shard file -> index in w->files */
  json_t *map = json_object_get(root, "weight_map");
  if (!w || !names) {
    mi_path_err(err, err_len, ipath, "out of memory");
    goto fail;
  }
  if (!json_is_object(root) || !json_is_object(map)) {
    mi_path_err(err, err_len, ipath, "no \"weight_map\" object");
    goto fail;
  }
  size_t n = json_object_size(map);
  if (n > MI_ST_MAX_TENSORS) {
    mi_path_err(err, err_len, ipath, "%zu tensors (at most %u)", n, MI_ST_MAX_TENSORS);
    goto fail;
  }
  /* pass 1: validate names, open each shard once */
  const char *k;
  json_t *v;
  json_object_foreach(map, k, v) {
    if (!json_is_string(v)) {
      mi_path_err(err, err_len, ipath, "weight_map['%s'] is not a string", k);
      goto fail;
    }
    const char *s = json_string_value(v);
    if (!shard_name_ok(s)) {
      mi_path_err(err, err_len, ipath, "shard file name '%.80s' for '%.80s' is not a plain file name", s, k);
      goto fail;
    }
    if (json_object_get(names, s)) continue;
    char p[4096];
    if (path_join(p, sizeof p, dir, s)) {
      mi_path_err(err, err_len, ipath, "shard path too long");
      goto fail;
    }
    mi_st_file **nf = realloc(w->files, (w->nfiles + 1) * sizeof *nf);
    if (!nf) {
      mi_path_err(err, err_len, ipath, "out of memory");
      goto fail;
    }
    w->files = nf;
    if (shard_contained(p, dir, err, err_len) != 0) goto fail;
    if (!(w->files[w->nfiles] = mi_st_open_file_ex(p, how, err, err_len))) goto fail;
    json_object_set_new(names, s, json_integer((json_int_t)w->nfiles));
    w->nfiles++;
  }
  /* pass 2: every mapped tensor must be in its shard */
  w->e = calloc(n ? n : 1, sizeof *w->e);
  if (!w->e) {
    mi_path_err(err, err_len, ipath, "out of memory");
    goto fail;
  }
  json_object_foreach(map, k, v) {
    const char *s = json_string_value(v);
    const mi_st_file *f = w->files[json_integer_value(json_object_get(names, s))];
    const st_tensor *t = find_tensor(f, k);
    if (!t) {
      mi_path_err(err, err_len, ipath, "tensor '%s' is mapped to %s, which does not contain it", k, s);
      goto fail;
    }
    w->e[w->n].file = f;
    w->e[w->n].t = t;
    w->n++;
    w->total += t->end - t->begin;
  }
  qsort(w->e, w->n, sizeof *w->e, cmp_entry);
  json_decref(names);
  json_decref(root);
  return w;
fail:
  json_decref(names);
  json_decref(root);
  mi_weights_close(w);
  return NULL;
}

mi_weights *mi_weights_open(const char *model_dir, char *err, size_t err_len) {
  return mi_weights_open_ex(model_dir, MI_WEIGHTS_MMAP, err, err_len);
}

mi_weights *mi_weights_open_ex(const char *model_dir, mi_weights_load how, char *err,
                               size_t err_len) {
  struct stat st;
  if (stat(model_dir, &st) != 0) {
    mi_path_err(err, err_len, model_dir, "cannot access: %s", strerror(errno));
    return NULL;
  }
  /* a file, or anything that is not a folder (the opener refuses a FIFO or a device) */
  if (!S_ISDIR(st.st_mode)) return open_single(model_dir, how, err, err_len);
  char p[4096];
  if (path_join(p, sizeof p, model_dir, "model.safetensors")) {
    mi_path_err(err, err_len, model_dir, "path too long");
    return NULL;
  }
  /* like transformers: a single file wins over an index */
  if (access(p, F_OK) == 0) {
    if (shard_contained(p, model_dir, err, err_len) != 0) return NULL;
    return open_single(p, how, err, err_len);
  }
  path_join(p, sizeof p, model_dir, "model.safetensors.index.json");
  if (access(p, F_OK) == 0) return open_index(model_dir, p, how, err, err_len);
  mi_path_err(err, err_len, model_dir, "no model.safetensors or model.safetensors.index.json");
  return NULL;
}

size_t mi_weights_count(const mi_weights *w) { return w ? w->n : 0; }
uint64_t mi_weights_total_bytes(const mi_weights *w) { return w ? w->total : 0; }

int mi_weights_at(const mi_weights *w, size_t i, mi_weight_info *out) {
  if (!w || i >= w->n) return -1;
  if (w->tab) {
    if (out) *out = w->tab[i];
    return 0;
  }
  if (out) fill_info(w->e[i].file, w->e[i].t, out);
  return 0;
}

int mi_weights_find(const mi_weights *w, const char *name, mi_weight_info *out) {
  if (!w || !name) return -1;
  size_t lo = 0, hi = w->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->tab) {
      int c = strcmp(name, w->tab[mid].name);
      if (c == 0) {
        if (out) *out = w->tab[mid];
        return 0;
      }
      if (c < 0)
        hi = mid;
      else
        lo = mid + 1;
      continue;
    }
    int c = strcmp(name, w->e[mid].t->name);
    if (c == 0) {
      if (out) fill_info(w->e[mid].file, w->e[mid].t, out);
      return 0;
    }
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return -1;
}
