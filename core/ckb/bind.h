/* The binder's grammar: what the text of a step's argument in a model
 * contract means, read in one place for every consumer. The composer
 * (plugins/agents/compose) writes each form as C; the verifier's binder
 * (core/verify/bind.c) evaluates it on one config and one call; the two can
 * no longer read the same contract two ways.
 *
 * An argument is bound by the kind its operator's signature gives it:
 *   in / out / inout  "weight:KEY"            a tensor of the weight map
 *                     "NAME[@ROW][+ELEMS]"    a buffer, cache or state; ROW
 *                                             (pos0 or r0) counts rows of it,
 *                                             ELEMS (an integer expression)
 *                                             elements after that
 *   i32 / i64         "EXPR"                  an integer expression over
 *                                             config fields and the runtime
 *                                             names below
 *                     "int:EXPR"              a real expression whose value
 *                                             must be whole
 *   f32 / f64         "config:FIELD"          a number config field
 *                     "rsqrt:EXPR"            1/sqrt of an integer expression
 *                     "sqrt:EXPR"             sqrt of an integer expression
 *                     a number                a literal (a JSON number too)
 *   dtype             "dtype:ARG"             the element type of what ARG
 *                                             is bound to
 *                     "f32", "f16", "bf16"    that type
 * ctx and stream are never bound. */
#ifndef MI_CORE_CKB_BIND_H
#define MI_CORE_CKB_BIND_H

#include <jansson.h>
#include <stddef.h>

/* The runtime quantities an expression may name besides config fields, by
 * index: T (tokens of the call), pos0 (its first position), R (logit rows),
 * r0 (their first row), n_ctx (the context), i (the layer). */
enum { MI_RT_T, MI_RT_POS0, MI_RT_R, MI_RT_R0, MI_RT_N_CTX, MI_RT_LAYER, MI_RT_COUNT };
/* The index of runtime name s[0..len), or -1. */
int mi_ckb_runtime_name(const char *s, size_t len);

typedef enum mi_ckb_arg_form {
  MI_ARG_NONE,     /* ctx, stream: nothing to bind */
  MI_ARG_BUFFER,   /* name[len], row (MI_RT_POS0 / MI_RT_R0, or -1), elems (NULL: none) */
  MI_ARG_WEIGHT,   /* name: the key as written */
  MI_ARG_INT,      /* expr */
  MI_ARG_INT_REAL, /* expr ("int:" dropped) */
  MI_ARG_CONFIG,   /* name: the field */
  MI_ARG_RSQRT,    /* expr */
  MI_ARG_SQRT,     /* expr */
  MI_ARG_NUMBER,   /* number */
  MI_ARG_DTYPE_OF, /* name: the argument */
  MI_ARG_DTYPE,    /* name: the type ("f32", "f16", "bf16") */
} mi_ckb_arg_form;

typedef struct mi_ckb_arg {
  mi_ckb_arg_form form;
  const char *text; /* as written (a JSON number: its decimal spelling in num) */
  const char *name; /* the buffer, weight key, config field or argument named */
  size_t name_len;
  int row;           /* MI_ARG_BUFFER: MI_RT_POS0 or MI_RT_R0, -1 when no row */
  const char *elems; /* MI_ARG_BUFFER: the element offset's expression, or NULL */
  const char *expr;  /* MI_ARG_INT, MI_ARG_INT_REAL, MI_ARG_RSQRT, MI_ARG_SQRT */
  double number;     /* MI_ARG_NUMBER */
  char num[40];
} mi_ckb_arg;

/* Reads binding v (a string or a JSON number; NULL: not bound) of an
 * argument whose signature kind is `kind` ("in", "i64", "f32", "dtype", ...).
 * 0, or -1 with one line in err (naming the text, not the step: the caller
 * knows which step it is). The strings of *out point into v, or into *out itself
 * (a number's spelling in num): use *out where it was written, not a copy. */
int mi_ckb_arg_parse(const char *kind, const json_t *v, mi_ckb_arg *out, char *err, size_t err_len);

/* The length of the buffer name a buffer binding starts with ("x@r0+4": 1). */
size_t mi_ckb_arg_buffer_name_len(const char *s);

/* The weight a "weight:KEY" binding reads on config cfg: the weight map's
 * entry for KEY, or the entry of its `fallback` when its `when` (a boolean
 * config field, "!" negating) does not hold. NULL with one line in err when
 * the key, or the fallback it needs, is not in the weight map. */
const json_t *mi_ckb_weight_bound(const json_t *model, const json_t *cfg, const char *key, char *err,
                                  size_t err_len);

#endif
