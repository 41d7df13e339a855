/* Helpers shared by the model drivers (driver.h): device buffers, weights
 * in float64, and the table of drivers, one per file of core/verify/models/,
 * listed by the build in vf_models.inc as VF_MODEL(file name). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/safetensors.h"
#include "core/verify/driver.h"
void *vf_dev_alloc(vf_dev *d, size_t bytes) {
  mi_buffer *b = NULL;
  if (d->n == (int)(sizeof d->bufs / sizeof *d->bufs) || d->pi->buffer_alloc(d->ctx, bytes, &b) != 0 || !b)
    return NULL;
  d->bufs[d->n++] = b;
  return d->pi->buffer_ptr(d->ctx, b);
}

void *vf_dev_upload(vf_dev *d, const double *v, size_t n, mi_dtype t) {
  size_t es = mi_dtype_size(t);
  unsigned char *h = malloc(n * es);
  void *p = h ? vf_dev_alloc(d, n * es) : NULL;
  for (size_t i = 0; p && i < n; i++) {
    if (t == MI_DTYPE_F32) ((float *)h)[i] = (float)v[i];
    else if (t == MI_DTYPE_BF16) ((uint16_t *)h)[i] = mi_f32_to_bf16((float)v[i]);
    else if (t == MI_DTYPE_F16) ((uint16_t *)h)[i] = mi_f32_to_f16((float)v[i]);
    else if (t == MI_DTYPE_I32) ((int32_t *)h)[i] = (int32_t)v[i];
  }
  if (p && d->pi->memcpy_h2d(d->ctx, NULL, p, h, n * es) != 0) p = NULL;
  free(h);
  return p;
}

void vf_dev_free_all(vf_dev *d) {
  for (int k = 0; k < d->n; k++) d->pi->buffer_free(d->ctx, d->bufs[k]);
  d->n = 0;
}

double *vf_weight_f64(const struct mi_weights *w, const char *name, size_t expect, char *err,
                      size_t err_len) {
  mi_weight_info wi;
  if (mi_weights_find(w, name, &wi) != 0) {
    snprintf(err, err_len, "reference: no tensor \"%s\"", name);
    return NULL;
  }
  size_t n = 1;
  for (int i = 0; i < wi.ndim; i++) n *= (size_t)wi.shape[i];
  if (n != expect ||
      (wi.dtype != MI_DTYPE_BF16 && wi.dtype != MI_DTYPE_F16 && wi.dtype != MI_DTYPE_F32)) {
    snprintf(err, err_len, "reference: tensor \"%s\" has %zu elements of dtype %d, expected %zu",
             name, n, wi.dtype, expect);
    return NULL;
  }
  double *out = malloc(n * sizeof(double));
  if (!out) {
    snprintf(err, err_len, "reference: out of memory");
    return NULL;
  }
  const unsigned char *p = wi.data;
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    float f;
    if (wi.dtype == MI_DTYPE_F32) {
      memcpy(&f, p + 4 * i, 4);
      out[i] = f;
    } else {
      memcpy(&h, p + 2 * i, 2);
      out[i] = wi.dtype == MI_DTYPE_BF16 ? mi_bf16_to_f32(h) : mi_f16_to_f32(h);
    }
  }
  return out;
}

#define VF_MODEL(name) extern const vf_model_driver vf_model_##name;
#include "vf_models.inc"
#undef VF_MODEL

static const vf_model_driver *const drivers[] = {
#define VF_MODEL(name) &vf_model_##name,
#include "vf_models.inc"
#undef VF_MODEL
    NULL,
};

const vf_model_driver *vf_model_driver_find(const char *contract) {
  for (size_t i = 0; contract && drivers[i]; i++)
    if (!strcmp(drivers[i]->contract, contract)) return drivers[i];
  return NULL;
}

const vf_model_driver *vf_model_driver_for_arch(const char *arch) {
  for (size_t i = 0; arch && drivers[i]; i++)
    for (const char *const *a = drivers[i]->architectures; a && *a; a++)
      if (!strcmp(*a, arch)) return drivers[i];
  return NULL;
}

void vf_model_driver_list(char *out, size_t n) {
  size_t used = 0;
  if (n) out[0] = 0;
  for (size_t i = 0; drivers[i] && used + 1 < n; i++)
    used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", drivers[i]->contract);
}
