/* Per-model-contract knowledge of the verifier: for each model contract
 * (ckb/models/NAME.json), the layer driver stage 2 composes from platform
 * kernels against its float64 twin, and the float64 reference of the whole
 * model that stage 5 and the model tests hold a plugin's logits against.
 *
 * One file per model contract in core/verify/models/ (qwen3.c is the
 * example), and nothing else in that folder. Each defines
 * `const vf_model_driver vf_model_<file name>`; the build lists the folder
 * and registers every file (vf_models.inc), so a new architecture adds a
 * file there and edits no other core file. The helpers below are in
 * core/verify/driver.c. */
#ifndef MI_CORE_VERIFY_DRIVER_H
#define MI_CORE_VERIFY_DRIVER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "mi/platform.h"

struct mi_weights;

/* ---------- device helpers for a layer driver ---------- */

typedef struct vf_dev {
  const mi_platform_iface *pi;
  void *ctx;
  mi_buffer *bufs[64];
  int n;
  char err[600]; /* the failing step, for the unit's message */
} vf_dev;

/* A zeroed device buffer kept in d (freed by vf_dev_free_all), or NULL. */
void *vf_dev_alloc(vf_dev *d, size_t bytes);
/* n values rounded to t and copied to a new device buffer, or NULL. */
void *vf_dev_upload(vf_dev *d, const double *v, size_t n, mi_dtype t);
void vf_dev_free_all(vf_dev *d);

/* A kernel call inside a layer driver's dev_run: its return code checked,
 * the step named in d->err on failure. */
#define VF_STEP(d, name, call)                                                                     \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      snprintf((d)->err, sizeof (d)->err, "layer: step %s returned %d (%s)", name, rc_,            \
               (d)->pi->last_error ? (d)->pi->last_error((d)->ctx) : "no message");               \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

/* ---------- stage 2: one decoder layer ---------- */

typedef enum vf_weight_init {
  VF_W_MATRIX = 0, /* normal / sqrt(cols), rounded to the weight dtype */
  VF_W_NORM_ONE,   /* 1 + 0.1 · normal, f32 (norms that multiply by w) */
  VF_W_NORM_ZERO,  /* 0.1 · normal, f32 (zero-centred (1+w) norms) */
  VF_W_F32,        /* normal / sqrt(cols), f32 (a small weight kept in f32: a conv kernel) */
} vf_weight_init;

typedef struct vf_layer_weight {
  const char *name;
  int rows, cols;
  vf_weight_init init;
} vf_layer_weight;

typedef struct vf_layer_driver {
  const char *shape;          /* for messages, e.g. "H=64 Hq=4 Hkv=2 head_dim=24 ffn=96" */
  int hidden;                 /* width of the layer's input and output rows */
  int t_max;                  /* most tokens one call runs (>= 5: stage 2 prefills 5) */
  int n_ctx;                  /* positions the layer's state holds (>= t_max + 2) */
  int n_weights;
  const vf_layer_weight *weights;
  const char *const *needs;   /* platform kernels the composition calls, NULL-terminated
                                 (the memory members are always checked) */
  /* device side: state (activations, caches) for weights w[n_weights] on d */
  void *(*dev_new)(vf_dev *d, void *const *w);
  /* T tokens x[T, hidden] at positions pos0.. through the layer -> out[T, hidden] */
  int (*dev_run)(vf_dev *d, void *state, mi_dtype w_dtype, const float *x, int T, int pos0,
                 float *out);
  void (*dev_free)(void *state);
  /* the float64 twin on the same (rounded) weights, its state kept across calls */
  void *(*ref_new)(void);
  int (*ref_run)(void *state, double *const *w, const double *x, double *out, int T, int pos0);
  void (*ref_free)(void *state);
} vf_layer_driver;

/* ---------- the whole model in float64 ---------- */

/* A tensor of the weight files widened to float64 (malloc'd); NULL with
 * "reference: ..." when it is missing, not f32/f16/bf16, or not `expect`
 * elements. */
double *vf_weight_f64(const struct mi_weights *w, const char *name, size_t expect, char *err,
                      size_t err_len);

/* Stage 2 of a model whose layers are of several kinds (layer_kinds in the
 * model contract): one driver per kind, a unit each. */
typedef struct vf_layer_kind {
  const char *kind; /* the contract's kind name, e.g. "linear_attention" */
  const vf_layer_driver *layer;
} vf_layer_kind;

typedef struct vf_model_driver {
  const char *contract;             /* the model contract's id ("model.NAME") */
  const char *const *architectures; /* config.json "architectures" values it covers */
  const vf_layer_driver *layer;     /* stage 2 */
  /* Reads the shape from config.json; 0, or -1 with a message. */
  int (*ref_open)(const json_t *cfg, const struct mi_weights *w, void **ref, char *err,
                  size_t err_len);
  /* Logits [n_out, V] of positions T-n_out .. T-1 for ids[T], from scratch
   * in float64, reading the weight files directly; max_score (may be NULL)
   * keeps the largest scaled attention score. NULL with a message. */
  double *(*ref_forward)(void *ref, const int32_t *ids, int T, int n_out, double *max_score,
                         char *err, size_t err_len);
  void (*ref_close)(void *ref);
  /* stage 2 when the layers are of several kinds (then .layer is NULL):
   * {NULL, NULL}-terminated */
  const vf_layer_kind *layer_kinds;
  /* 1 when the model's RMSNorms multiply by (1 + w) (zero-centred weights):
   * stage 5's edits of norm weights keep their meaning through it */
  int norm_offset;
} vf_model_driver;

/* By contract id, or by a config.json architecture; NULL when none. */
const vf_model_driver *vf_model_driver_find(const char *contract);
const vf_model_driver *vf_model_driver_for_arch(const char *architecture);
/* The contract ids known, comma-separated, for messages. */
void vf_model_driver_list(char *out, size_t n);

#endif
