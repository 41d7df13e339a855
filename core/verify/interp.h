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
 * checkpoint) and 4d's (a reference plugin, where one exists). The
 * hand-written float64 models of core/verify/models/ are held to it
 * (tests/verify/test_interp.c). */
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

/* Logits [n_out, vocab] of positions T-n_out .. T-1 for ids[T], from
 * scratch (one chunk of T tokens at position 0); max_score (may be NULL)
 * keeps the largest scaled attention score. NULL with one line in err. */
double *vf_interp_forward(vf_interp *m, const int32_t *ids, int T, int n_out, double *max_score,
                          char *err, size_t err_len);

void vf_interp_close(vf_interp *m);

#endif
