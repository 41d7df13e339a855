/* The operator contracts' references (ckb/operators/NAME.json, field
 * "reference"): each reads the contract's arguments by name and calls the
 * float64 definition in ref/f64.c on exactly the (dtype-rounded) inputs the
 * kernel was given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/ref/f64.h"
#include "core/verify/verify.h"

vf_arg *vf_call_arg(vf_call *c, const char *name) {
  for (int i = 0; name && i < c->nargs; i++)
    if (c->args[i].name && !strcmp(c->args[i].name, name)) return &c->args[i];
  return NULL;
}

static vf_arg *arg(vf_call *c, const char *name, char *err, size_t len) {
  vf_arg *a = vf_call_arg(c, name);
  if (!a) snprintf(err, len, "the reference needs an argument named '%s'", name);
  return a;
}

/* Fetch helpers: bail out of the reference when the contract lacks a name. */
#define BUF(v, name)                                                                               \
  vf_arg *v##_a = arg(c, name, err, len);                                                          \
  if (!v##_a || !v##_a->val) return -1;                                                            \
  double *v = v##_a->val
#define INT(v, name)                                                                               \
  vf_arg *v##_a = arg(c, name, err, len);                                                          \
  if (!v##_a) return -1;                                                                           \
  int64_t v = v##_a->i
#define FLT(v, name)                                                                               \
  vf_arg *v##_a = arg(c, name, err, len);                                                          \
  if (!v##_a) return -1;                                                                           \
  double v = v##_a->f

static int ref_matmul(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  BUF(w, "w");
  INT(M, "M");
  INT(N, "N");
  INT(K, "K");
  vf_f64_matmul(y, x, w, M, N, K);
  return 0;
}

static int ref_rmsnorm(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  BUF(w, "w");
  INT(rows, "rows");
  INT(dim, "dim");
  FLT(eps, "eps");
  FLT(w_offset, "w_offset");
  vf_f64_rmsnorm(y, x, w, rows, dim, eps, w_offset);
  return 0;
}

static int ref_rope(vf_call *c, char *err, size_t len) {
  BUF(x, "x"); /* inout: holds the input, becomes the expected output */
  BUF(pos, "pos");
  INT(T, "T");
  INT(H, "H");
  INT(tok_stride, "tok_stride");
  INT(head_stride, "head_stride");
  INT(rot_dim, "rot_dim");
  FLT(theta, "theta");
  vf_f64_rope(x, pos, T, H, tok_stride, head_stride, rot_dim, theta);
  return 0;
}

static int ref_attention(vf_call *c, char *err, size_t len) {
  BUF(out, "out");
  BUF(q, "q");
  BUF(kc, "k_cache");
  BUF(vc, "v_cache");
  INT(T, "T");
  INT(Hq, "Hq");
  INT(Hkv, "Hkv");
  INT(D, "D");
  INT(pos0, "pos0");
  FLT(scale, "scale");
  if (Hkv <= 0 || Hq % Hkv) {
    snprintf(err, len, "attention: Hq=%lld is not a multiple of Hkv=%lld", (long long)Hq, (long long)Hkv);
    return -1;
  }
  if (vf_f64_attention(out, q, kc, vc, T, Hq, Hkv, D, pos0, scale, NULL) != 0) {
    snprintf(err, len, "attention: out of memory");
    return -1;
  }
  return 0;
}

static int ref_silu_mul(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(gate, "gate");
  BUF(up, "up");
  INT(n, "n");
  vf_f64_silu_mul(y, gate, up, n);
  return 0;
}

static int ref_add(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(a, "a");
  BUF(b, "b");
  INT(n, "n");
  vf_f64_add(y, a, b, n);
  return 0;
}

static int ref_scale(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  FLT(alpha, "alpha");
  INT(n, "n");
  for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i];
  return 0;
}

static int ref_embed(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(table, "table");
  BUF(ids, "ids");
  INT(T, "T");
  INT(V, "V");
  INT(dim, "dim");
  for (int64_t t = 0; t < T; t++) {
    int64_t id = (int64_t)ids[t];
    if (id < 0 || id >= V) {
      snprintf(err, len, "embed: generated id %lld outside [0, %lld)", (long long)id, (long long)V);
      return -1;
    }
    memcpy(y + t * dim, table + id * dim, (size_t)dim * sizeof *y);
  }
  return 0;
}

static int ref_argmax(vf_call *c, char *err, size_t len) {
  BUF(out, "out");
  BUF(x, "x");
  INT(rows, "rows");
  INT(n, "n");
  for (int64_t r = 0; r < rows; r++) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
      if (x[r * n + i] > x[r * n + best]) best = i;
    out[r] = (double)best;
  }
  return 0;
}

/* ---- the gated-DeltaNet hybrid's blocks (ABI 1.4) ---- */

static int ref_copy2d(vf_call *c, char *err, size_t len) {
  BUF(y, "y"); /* inout: what lies between the copied rows keeps its value */
  BUF(x, "x");
  INT(y_stride, "y_stride");
  INT(x_stride, "x_stride");
  INT(rows, "rows");
  INT(n, "n");
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < n; i++) y[r * y_stride + i] = x[r * x_stride + i];
  return 0;
}

static int ref_l2norm(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  INT(rows, "rows");
  INT(dim, "dim");
  FLT(eps, "eps");
  vf_f64_l2norm(y, x, rows, dim, eps);
  return 0;
}

static int ref_sigmoid_mul(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  BUF(g, "g");
  INT(n, "n");
  vf_f64_sigmoid_mul(y, x, g, n);
  return 0;
}

static int ref_conv1d_causal(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  BUF(w, "w");
  BUF(state, "state"); /* inout: the state carried in, becomes the state carried out */
  INT(T, "T");
  INT(C, "C");
  INT(K, "K");
  INT(silu, "silu");
  if (vf_f64_conv1d_causal(y, x, w, state, T, C, K) != 0) {
    snprintf(err, len, "conv1d_causal: out of memory");
    return -1;
  }
  if (silu) vf_f64_silu(y, y, T * C);
  return 0;
}

static int ref_deltanet_gates(vf_call *c, char *err, size_t len) {
  BUF(beta, "beta");
  BUF(g, "g");
  BUF(b, "b");
  BUF(a, "a");
  BUF(a_log, "a_log");
  BUF(dt_bias, "dt_bias");
  INT(T, "T");
  INT(H, "H");
  vf_f64_deltanet_gates(g, beta, a, b, a_log, dt_bias, T, H);
  return 0;
}

static int ref_gated_delta_rule(vf_call *c, char *err, size_t len) {
  BUF(o, "o");
  BUF(q, "q");
  BUF(k, "k");
  BUF(v, "v");
  BUF(g, "g");
  BUF(beta, "beta");
  BUF(state, "state"); /* inout */
  INT(T, "T");
  INT(Hk, "Hk");
  INT(Hv, "Hv");
  INT(Dk, "Dk");
  INT(Dv, "Dv");
  /* The recurrent form: the definition; a kernel may chunk (the contract's
   * tolerance covers the difference in rounding). */
  if (vf_f64_gated_delta_rule(o, state, q, k, v, g, beta, T, Hk, Hv, Dk, Dv) != 0) {
    snprintf(err, len, "gated_delta_rule: Hv=%lld is not a multiple of Hk=%lld, or out of memory",
             (long long)Hv, (long long)Hk);
    return -1;
  }
  return 0;
}

static int ref_rmsnorm_gated(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(x, "x");
  BUF(w, "w");
  BUF(z, "z");
  INT(rows, "rows");
  INT(dim, "dim");
  FLT(eps, "eps");
  vf_f64_rmsnorm_gated(y, x, w, z, rows, dim, eps);
  return 0;
}

int vf_ref_convert(vf_call *c, char *err, size_t len); /* ref/ops_convert.c */
int vf_ref_map(vf_call *c, char *err, size_t len);     /* ref/map.c */
int vf_ref_rotary(vf_call *c, char *err, size_t len);  /* ref/rotary.c */
int vf_ref_masked_attention(vf_call *c, char *err, size_t len); /* ref/masked_attention.c */

static const struct {
  const char *name;
  vf_ref_fn fn;
} refs[] = {
    {"matmul", ref_matmul},   {"rmsnorm", ref_rmsnorm}, {"rope", ref_rope},
    {"attention", ref_attention}, {"silu_mul", ref_silu_mul}, {"add", ref_add},
    {"scale", ref_scale},     {"embed", ref_embed},     {"argmax", ref_argmax},
    /* ABI 1.4: the gated-DeltaNet hybrid */
    {"copy2d", ref_copy2d},
    {"l2norm", ref_l2norm},
    {"sigmoid_mul", ref_sigmoid_mul},
    {"conv1d_causal", ref_conv1d_causal},
    {"deltanet_gates", ref_deltanet_gates},
    {"gated_delta_rule", ref_gated_delta_rule},
    {"rmsnorm_gated", ref_rmsnorm_gated},
    {"convert", vf_ref_convert},
    /* an operator stated as an expression (kernel packs, ABI 1.6) */
    {"map", vf_ref_map},
    {"rotary", vf_ref_rotary},
    {"masked_attention", vf_ref_masked_attention},
};

vf_ref_fn vf_ref_find(const char *name) {
  for (size_t i = 0; name && i < sizeof refs / sizeof *refs; i++)
    if (!strcmp(refs[i].name, name)) return refs[i].fn;
  return NULL;
}

const char *const *vf_ref_names(void) {
  static const char *names[sizeof refs / sizeof *refs + 1];
  for (size_t i = 0; i < sizeof refs / sizeof *refs; i++) names[i] = refs[i].name;
  return names;
}
