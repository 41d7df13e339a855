/* Default hooks of a model mutant: the platform interface copied and
 * patched, then the real qwen3 code. */
#include <string.h>

#include "mm.h"

const mi_platform_iface *mm_real;
static mi_platform_iface shim;

__attribute__((weak)) void mm_patch(mi_platform_iface *s) {
  (void)s;
}

int mm_load_shimmed(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                    char *err, size_t err_len) {
  mm_real = a->platform.iface;
  memset(&shim, 0, sizeof shim);
  size_t n = mm_real->struct_size < sizeof shim ? mm_real->struct_size : sizeof shim;
  memcpy(&shim, mm_real, n);
  mm_patch(&shim);
  mi_model_load_args b = *a;
  b.platform.iface = &shim;
  return qwen3_model_load(host, &b, out, err, err_len);
}

__attribute__((weak)) int mm_model_load(const mi_host_api *host, const mi_model_load_args *a,
                                        qwen3_model **out, char *err, size_t err_len) {
  return mm_load_shimmed(host, a, out, err, err_len);
}

__attribute__((weak)) int mm_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n,
                                     float *logits, int all_logits, char *err, size_t err_len) {
  return qwen3_forward(m, s, ids, n, logits, all_logits, err, err_len);
}
