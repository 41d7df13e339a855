/* The binder of a model contract: what every argument of a step means on
 * one config (config.json's values, else the contract's defaults) and one
 * call (T, pos0, R, r0, n_ctx, the layer i). It reads the step's operator
 * contract's signature and the step's "args" and resolves each argument to
 *   - a buffer row: "NAME", "NAME@pos0" / "NAME@r0", optionally "+EXPR"
 *     elements on (the contract's buffers, or the layer's caches and state);
 *   - a weight: "weight:KEY" (the weight map's entry, {i} expanded, a key
 *     whose `when` does not hold reading its `fallback`);
 *   - an integer: an expression over config fields and T, pos0, R, r0,
 *     n_ctx, i; "int:EXPR" a real expression whose value must be whole;
 *   - a real: "config:FIELD", "rsqrt:INT_EXPR", a literal;
 *   - a dtype: "dtype:ARG", the element type of what ARG is bound to, or
 *     the type named.
 * The grammar of these forms is core/ckb/bind.h's, which the composer reads
 * too; this binder evaluates it.
 * It knows no storage: the float64 interpreter (interp.c) hands the result
 * to the operators' references, stage 2 (stage2.c) to the platform's
 * kernels through libffi. Nothing in it names a family. */
#ifndef MI_CORE_VERIFY_BIND_H
#define MI_CORE_VERIFY_BIND_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ckb/ckb.h"
#include "core/verify/verify.h"

#define VF_BIND_MAX_ARGS 32

/* A buffer, cache or state of the contract, sized on the binder's config
 * and call: n elements, row per element of its first dimension. */
typedef struct vf_bbuf {
  const char *name; /* the contract's (borrowed) */
  int64_t n, row;
  mi_dtype dtype; /* its "dtype" (i32 for ids and positions), else f32 */
  const char *input; /* "ids", "positions" or NULL */
} vf_bbuf;

typedef struct vf_binder {
  const json_t *model, *cfg;
  int64_t T, pos0, R, r0, n_ctx, layer; /* layer -1: prologue / epilogue */
  const vf_bbuf *bufs; /* the contract's buffers [nbufs] */
  int nbufs;
  const vf_bbuf *lbufs; /* the current layer's caches and state [nlbufs], found first */
  int nlbufs;
  char *err;
  size_t err_len;
} vf_binder;

int vf_bind_fail(vf_binder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int vf_bind_int(vf_binder *b, const char *s, int64_t *out);
int vf_bind_real(vf_binder *b, const char *s, double *out);
/* The element count of a shape the contract gives and the elements per row
 * of its first dimension. */
int vf_bind_shape(vf_binder *b, const char *what, const char *name, const json_t *shape, int64_t *n,
                  int64_t *row);
/* A buffer / cache / state entry of the contract sized on this call. */
int vf_bind_buffer(vf_binder *b, const json_t *spec, vf_bbuf *out);

/* The step sequence of a layer of kind `kind` (NULL: the contract's
 * layer_sequence), and its caches and state (arrays of buffer entries, or
 * NULL where the contract has none or describes them in prose). */
const json_t *vf_bind_sequence(const json_t *model, const char *kind);
void vf_bind_layer_lists(const json_t *model, const char *kind, const json_t *lists[2]);
/* The residual stream: the buffer the prologue's last step writes, which
 * each layer reads and writes and the epilogue reads. NULL when none. */
const char *vf_bind_residual(const mi_ckb *c, const json_t *model);
/* The model contract of config.json cfg (mi_ckb_find_model: its own
 * architectures, else a layout's) and *layout (may be NULL) the layout cfg
 * is in (mi_ckb_model_layout; NULL: the contract's own). NULL when none. */
const mi_ckb_entry *vf_bind_find_model(const mi_ckb *c, const json_t *cfg, const json_t **layout);
/* 1 when a step of seq names buffer `name` in an argument. */
int vf_bind_uses(const json_t *seq, const char *name);
/* The weight map's entry for a key as the steps write it ({i} unexpanded). */
const json_t *vf_bind_weight_spec(const json_t *model, const char *key);

typedef enum vf_bwhat { VB_NONE, VB_BUF, VB_WEIGHT, VB_INT, VB_REAL, VB_DTYPE } vf_bwhat;

typedef struct vf_barg {
  const char *name; /* the signature's */
  vf_kind kind;
  const char *sig_dtype; /* the signature's "dtype" ("f32", "$w_dtype", ...) or NULL */
  vf_bwhat what;         /* VB_NONE: ctx and stream */
  /* VB_BUF: buffer index (< nbufs: the contract's; else nbufs + the layer's)
   * and the element offset, elements available from it */
  int buf;
  int64_t off, avail;
  /* VB_WEIGHT: the key as written (fallback applied), the tensor's name,
   * its elements and elements per row of its first dimension */
  const char *wkey;
  char wname[256];
  int64_t wn, wrow;
  int64_t i;           /* VB_INT */
  double f;            /* VB_REAL */
  const char *dtype_of; /* VB_DTYPE: the argument whose element type it passes, */
  mi_dtype dtype;       /* else the type the contract names */
} vf_barg;

typedef struct vf_bstep {
  const char *name;       /* the step's name, else its operator's */
  const char *op;         /* operator id */
  const json_t *oe;       /* the operator contract */
  const char *member;     /* its platform member */
  const char *reference;  /* its float64 reference */
  int nargs;
  vf_barg a[VF_BIND_MAX_ARGS]; /* in the signature's order, ctx and stream included */
} vf_bstep;

/* Every argument of `step` bound; 0, or -1 with one line naming the step. */
int vf_bind_step(vf_binder *b, const mi_ckb *c, const json_t *step, vf_bstep *out);

#endif
