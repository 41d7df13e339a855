/* The model contract in float64: the logits any model contract of the CKB
 * describes, computed by interpreting its step sequences (prologue, each
 * layer's sequence or its layer kind's, epilogue) over the operator
 * contracts' float64 references (ref/ops.c), on the checkpoint's weights
 * widened exactly to float64. Nothing in it names a family: what a family
 * is comes from the contract alone (its config fields and defaults, weight
 * map, buffers, per-layer caches and state, layer kinds, and every
 * argument's binding: weight:, config:, rsqrt:, int:, expressions, buffer
 * rows @pos0 / @r0 and +offsets).
 *
 * What it shows is that an engine does what its contract says; that the
 * contract says what the model is, is stage 4's (llama.cpp on the same
 * checkpoint) and 4d's (a reference plugin, where one exists); the model
 * tests hold it to llama.cpp's goldens.
 *
 * Arguments are bound by the binder stage 2 shares (bind.h): stage 2 runs
 * one layer of the same contract on the platform's kernels and holds it to
 * vf_interp_layer_run. */
#ifndef MI_CORE_VERIFY_INTERP_H
#define MI_CORE_VERIFY_INTERP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ckb/ckb.h"

struct mi_weights;
typedef struct vf_interp vf_interp;

/* The contract `model` of CKB c (kept open by the caller) bound to
 * config.json cfg and the weight files w (both kept by the caller). NULL
 * with one line in err when the contract cannot be interpreted on this
 * config (a field missing, an operator without a reference). */
vf_interp *vf_interp_open(const mi_ckb *c, const mi_ckb_entry *model, const json_t *cfg,
                          const struct mi_weights *w, char *err, size_t err_len);

/* The same for a model contract held in memory (one not in the CKB, e.g. an
 * edited variant): model_contract is kept by the caller; its operators are
 * looked up in c. */
vf_interp *vf_interp_open_json(const mi_ckb *c, const json_t *model_contract, const json_t *cfg,
                               const struct mi_weights *w, char *err, size_t err_len);

/* Logits [n_out, vocab] of positions T-n_out .. T-1 for ids[T], from
 * scratch (one chunk of T tokens at position 0); max_score (may be NULL)
 * keeps the largest scaled attention score. NULL with one line in err. */
double *vf_interp_forward(vf_interp *m, const int32_t *ids, int T, int n_out, double *max_score,
                          char *err, size_t err_len);

void vf_interp_close(vf_interp *m);

/* A tensor of the weight files widened to float64 (malloc'd); NULL with
 * "reference: ..." when it is missing, not f32/f16/bf16, or not `expect`
 * elements. */
double *vf_weight_f64(const struct mi_weights *w, const char *name, size_t expect, char *err,
                      size_t err_len);

/* ---------- one layer: stage 2's float64 twin ----------
 * The step sequence of layer kind `kind` (NULL: the contract's
 * layer_sequence) on config cfg, its buffers sized for up to t_max tokens,
 * its caches and state for n_ctx positions and kept across calls. Weights
 * come from src: the weight map's key as the steps write it, the tensor's
 * name, its element count -> malloc'd doubles (the twin frees them), NULL
 * with a message. Real arguments the kernels get as float are rounded to
 * float; the cache is kept exact. */
typedef double *(*vf_weight_src)(void *user, const char *key, const char *name, int64_t n, char *err,
                                 size_t err_len);
typedef struct vf_interp_layer vf_interp_layer;
vf_interp_layer *vf_interp_layer_new(const mi_ckb *c, const json_t *model, const json_t *cfg,
                                     const char *kind, int64_t t_max, int64_t n_ctx, vf_weight_src src,
                                     void *user, char *err, size_t err_len);
/* Width of the residual stream (the layer's input and output rows). */
int64_t vf_interp_layer_width(const vf_interp_layer *L);
/* T tokens x[T, width] at positions pos0.. through the layer -> out[T, width]. */
int vf_interp_layer_run(vf_interp_layer *L, const double *x, int T, int pos0, double *out, char *err,
                        size_t err_len);
void vf_interp_layer_free(vf_interp_layer *L);

#endif
