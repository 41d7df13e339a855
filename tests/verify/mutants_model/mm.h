/* Model-plugin mutants: the real qwen3 plugin's sources compiled again,
 * unchanged, with one planted defect each. mm_plugin.c includes
 * qwen3_plugin.c with qwen3_model_load / qwen3_forward renamed to
 * mm_model_load / mm_forward, so every call of the descriptor goes through
 * mm_common.c first. There the platform interface the model receives is a
 * copy of the real one (mm_real) that a mutant may patch (mm_patch), and a
 * mutant may replace mm_model_load / mm_forward outright (weak defaults). */
#ifndef MI_MM_H
#define MI_MM_H

#include "mi/model.h"
#include "mi/platform.h"
#include "qwen3_internal.h"

extern const mi_platform_iface *mm_real; /* the platform's own interface */

/* Applied to the copy of the platform interface the model is loaded with. */
void mm_patch(mi_platform_iface *shim);

/* The defaults call these after the shim is in place. */
int mm_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                  char *err, size_t err_len);
int mm_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n, float *logits,
               int all_logits, char *err, size_t err_len);
/* mm_model_load's default body: shim the platform, then the real load. */
int mm_load_shimmed(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                    char *err, size_t err_len);

#endif
