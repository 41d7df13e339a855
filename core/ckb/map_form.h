/* Operators the CKB states as an expression (the "map" form): the one
 * definition the CKB's checks, the verifier's float64 reference and the
 * kernel-pack generator all read, so the three cannot disagree about what
 * such an operator computes.
 *
 * A map operator's contract (ckb/README.md, "Operators as expressions"):
 *   "member": "pack", "reference": "map",
 *   "map": {"out": "y", "expr": "x + b"}
 * The output buffer's shape is the iteration domain: [n] or [rows, n]
 * (one or two shape expressions of the signature). Each input buffer the
 * expression reads has the output's shape (one value per element), the
 * last dimension [n] (one per column: a bias broadcast over rows) or, for a
 * two-dimensional output, the first [rows] (one per row). A scalar
 * argument (i64, i32, f32, f64) is read by name. The output may alias an
 * input of its own shape (the contract's cases say so), never a broadcast
 * one.
 *
 * Row reductions (optional, "reduce"): per-row quantities the expression
 * reads by name, computed in order before the row is written, e.g. a
 * LayerNorm's mean and inverse deviation:
 *   "reduce": [{"name": "mean", "sum": "x", "then": "mean / n"},
 *              {"name": "rstd", "sum": "(x - mean) * (x - mean)",
 *               "then": "1 / sqrt(rstd / n + eps)"}]
 * For each row (the whole output when it is [n]): the reduction's value is
 * the float64 sum over the row's elements of "sum" (which reads what the
 * map expression reads, and earlier reductions), then "then" (optional)
 * over that sum, read by the reduction's own name, with scalars, per-row
 * buffers and earlier reductions (no per-element value). The map expression
 * reads every reduction by name. A row's reductions are all computed before
 * any of its elements is written, so an output that aliases an input still
 * reads the input.
 *
 * Kernel expressions (core/util/kexpr.h): decimal numbers, names, + - * /,
 * unary minus, parentheses and the functions exp log tanh sqrt abs erf
 * erfc sigmoid softplus floor ceil (one argument) and min max pow (two). Evaluated in
 * float64 by the reference; written as float C by the generator. */
#ifndef MI_CORE_CKB_MAP_FORM_H
#define MI_CORE_CKB_MAP_FORM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/kexpr.h"

/* ---- the map form of an operator contract ---- */

typedef enum mi_map_role {
  MI_MAP_ELEM,   /* a buffer of the output's shape: value [r, i] */
  MI_MAP_COL,    /* a buffer [n]: value [i] for every row */
  MI_MAP_ROW,    /* a buffer [rows] (two-dimensional output): value [r] */
  MI_MAP_SCALAR, /* an i64, i32, f32 or f64 argument */
  MI_MAP_STAT,   /* a row reduction: arg is its index in reduce[] */
} mi_map_role;

#define MI_MAP_MAX_NAMES 16
#define MI_MAP_MAX_REDUCE 4

/* One expression's names, each resolved to an argument (or a reduction) and a role. */
typedef struct mi_map_names {
  int n;
  int arg[MI_MAP_MAX_NAMES];
  mi_map_role role[MI_MAP_MAX_NAMES];
} mi_map_names;

/* A row reduction (see above): sum over the row of `sum`, then `then`. */
typedef struct mi_map_reduce {
  const char *name;
  mi_kexpr *sum, *then; /* then NULL: the sum itself */
  mi_map_names sum_names, then_names;
} mi_map_reduce;

typedef struct mi_map_form {
  const char *out; /* the output argument's name */
  int out_arg;     /* its index in signature.args */
  int dims;        /* 1: [n]; 2: [rows, n] */
  const char *rows_expr, *n_expr; /* the output's shape expressions (rows_expr NULL when dims 1) */
  mi_kexpr *expr;
  mi_map_names names; /* expr's names: name k's index in signature.args (reduce[] for a STAT) and role */
  int n_reduce;                        /* row reductions, in order (0: a plain map) */
  mi_map_reduce reduce[MI_MAP_MAX_REDUCE];
} mi_map_form;

/* Reads op's "map" against its signature. 0, or -1 with a one-line message
 * naming the operator and the problem (no "map", an expression that does
 * not parse, a name that is no argument, an output that is not an f32
 * "out" buffer of one or two dimensions, an input whose shape is none of
 * the above). The form points into op (keep op alive); free with
 * mi_map_form_free. */
int mi_map_form_parse(const json_t *op, mi_map_form *f, char *err, size_t err_len);
void mi_map_form_free(mi_map_form *f);

/* ---- the rotary form: a rotation of pairs whose frequency is an expression ----
 *
 *   "member": "pack", "reference": "rotary",
 *   "rotary": {"freq": "pow(theta, -2 * i / rot_dim) * ..."}
 *
 * over operator.rope's arguments (x inout f32, pos in i32 [T], T, H,
 * tok_stride, head_stride, rot_dim, by those names) and any scalar
 * arguments of its own: for t < T, h < H, i < rot_dim / 2, with
 * v = x + t*tok_stride + h*head_stride and a = pos[t] * freq(i),
 * (v[i], v[i + rot_dim/2]) <- (v[i] cos a - v[i + rot_dim/2] sin a,
 * v[i + rot_dim/2] cos a + v[i] sin a) (NeoX pairing, as operator.rope).
 * freq reads `i` (the pair's index) and scalar arguments by name; the
 * reference and the generated kernel evaluate it in double. An optional
 * "amplitude" (an expression over the same names; default 1) multiplies
 * the rotated pair: cos a and sin a become amplitude(i) cos a and
 * amplitude(i) sin a (YaRN's attention factor, which transformers applies
 * to cos and sin). */

#define MI_ROTARY_ARGS 7 /* x, pos, T, H, tok_stride, head_stride, rot_dim */

typedef struct mi_rotary_form {
  int arg[MI_ROTARY_ARGS]; /* signature indices of x, pos, T, H, tok_stride, head_stride, rot_dim */
  mi_kexpr *freq;
  int n_names;
  int name_arg[MI_MAP_MAX_NAMES]; /* freq's name k: its signature index, -1 for i */
  mi_kexpr *amp; /* the amplitude, or NULL: 1 */
  int n_amp_names;
  int amp_name_arg[MI_MAP_MAX_NAMES];
} mi_rotary_form;

int mi_rotary_form_parse(const json_t *op, mi_rotary_form *f, char *err, size_t err_len);
void mi_rotary_form_free(mi_rotary_form *f);

/* ---- the masked-attention form: operator.attention over a window of keys ----
 *
 *   "member": "pack", "reference": "masked_attention",
 *   "masked_attention": {"first_key": "i - window + 1"}
 *
 * The signature starts with exactly operator.attention's arguments (ctx, s,
 * out, q, k_cache, v_cache, kv_dtype, T, Hq, Hkv, D, pos0, scale: the same
 * names, kinds, dtypes and shapes) and may go on with scalar arguments of
 * its own (i64, i32, f32, f64). For query t (position i = pos0 + t) and head
 * h, g = h / (Hq/Hkv), the visible keys are j in [first(i), i] with
 * first(i) = floor(first_key) clamped to [0, i] (so a query always sees
 * itself; NaN counts as 0); then exactly operator.attention's math over
 * those keys: s[j] = scale * q.k[j], max-subtracted softmax, out = sum p[j]
 * v[j]. first_key reads `i` and scalar arguments by name and is evaluated
 * in double by the reference and the generated kernel alike. A sliding
 * window (HF: visible iff i - j < window) is "i - window + 1".
 *
 * An optional "score" maps each scaled score before the softmax: an
 * expression over `score` (scale * q.k[j]) and the scalar arguments, in
 * double, e.g. an attention soft-cap "cap * tanh(score / cap)"
 * (HF's attn_logit_softcapping, applied after the scaling and before the
 * mask). Without it the score is used as it is. */

#define MI_MASKED_ATTN_ARGS 13 /* operator.attention's: ctx .. scale */

typedef struct mi_masked_attention_form {
  mi_kexpr *first_key;
  int n_names;
  int name_arg[MI_MAP_MAX_NAMES]; /* first_key's name k: its signature index, -1 for i */
  mi_kexpr *score;                /* the score map, or NULL (none: the score as it is) */
  int n_score_names;
  int score_name_arg[MI_MAP_MAX_NAMES]; /* score's name k: its signature index, -1 for score */
} mi_masked_attention_form;

/* Reads op's "masked_attention" against its signature. 0, or -1 with a
 * one-line message naming the operator (no form, an expression that does
 * not parse, a signature that does not start with operator.attention's
 * arguments, an argument of its own that is not a scalar, a name that is
 * neither i nor a scalar argument). Free with mi_masked_attention_form_free. */
int mi_masked_attention_form_parse(const json_t *op, mi_masked_attention_form *f, char *err, size_t err_len);
void mi_masked_attention_form_free(mi_masked_attention_form *f);
/* The first key query position i sees: floor(first_key) clamped to [0, i]
 * (NaN: 0). values[k] holds name k's value; the slots of `i` are written. */
int64_t mi_masked_attention_first(const mi_masked_attention_form *f, int64_t i, double *values);
/* The score map applied to one scaled score (score itself without a map).
 * values[k] holds the score expression's name k; the slots of `score` are
 * written. */
double mi_masked_attention_score(const mi_masked_attention_form *f, double score, double *values);

#endif
