/* Mutant: weights from a fixed path. It ignores the weights the engine
 * hands it and binds every tensor from MM_BAKED_PATH (a model.safetensors
 * chosen at build time), through a host table whose weights_find reads
 * that file. Any folder with the same config "works". Caught by stage 3:
 * perturbing the given folder's tensors changes nothing. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm.h"

static const unsigned char *base; /* the mapped file */
static const char *hdr;           /* its JSON header (NUL-terminated copy) */
static size_t data0, fsize;
static mi_host_api fake;

/* Finds "name":{...} in the header and reads dtype, shape, data_offsets. */
static int find(const mi_weights *w, const char *name, mi_weight_info *out) {
  (void)w;
  char key[300];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *p = strstr(hdr, key);
  if (!p) return -1;
  const char *end = strchr(p, '}');
  const char *dt = strstr(p, "\"dtype\":\""), *sh = strstr(p, "\"shape\":["),
             *of = strstr(p, "\"data_offsets\":[");
  if (!end || !dt || !sh || !of || dt > end || sh > end || of > end) return -1;
  memset(out, 0, sizeof *out);
  out->name = name;
  dt += 9;
  out->dtype = !strncmp(dt, "BF16", 4)  ? MI_DTYPE_BF16
               : !strncmp(dt, "F16", 3) ? MI_DTYPE_F16
                                        : MI_DTYPE_F32;
  sh += 9;
  while (*sh != ']' && out->ndim < 8) {
    out->shape[out->ndim++] = strtoll(sh, (char **)&sh, 10);
    if (*sh == ',') sh++;
  }
  of += 16;
  unsigned long long a = strtoull(of, (char **)&of, 10), b = strtoull(of + 1, NULL, 10);
  if (b < a || data0 + b > fsize) return -1;
  out->data = base + data0 + a;
  out->nbytes = b - a;
  out->file = MM_BAKED_PATH;
  return 0;
}

static size_t count(const mi_weights *w) {
  (void)w;
  return 0;
}

static int at(const mi_weights *w, size_t i, mi_weight_info *out) {
  (void)w, (void)i, (void)out;
  return -1;
}

int mm_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                  char *err, size_t err_len) {
  if (!base) {
    int fd = open(MM_BAKED_PATH, O_RDONLY);
    struct stat st;
    uint64_t hl = 0;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < 8) {
      snprintf(err, err_len, "mutant: cannot open %s", MM_BAKED_PATH);
      if (fd >= 0) close(fd);
      return -1;
    }
    fsize = (size_t)st.st_size;
    base = mmap(NULL, fsize, PROT_READ, MAP_PRIVATE, fd, 0); /* kept: the model binds into it */
    close(fd);
    if (base == MAP_FAILED) {
      base = NULL;
      snprintf(err, err_len, "mutant: cannot map %s", MM_BAKED_PATH);
      return -1;
    }
    memcpy(&hl, base, 8);
    char *h = malloc(hl + 1);
    memcpy(h, base + 8, hl);
    h[hl] = 0;
    hdr = h;
    data0 = 8 + hl;
  }
  fake = *host;
  fake.weights_find = find;
  fake.weights_count = count;
  fake.weights_at = at;
  return mm_load_shimmed(&fake, a, out, err, err_len);
}
