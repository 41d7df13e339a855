/* Float64 references for the operator contracts (ckb/operators/NAME.json,
 * field "reference"). Each one reads the contract's arguments by name and
 * computes the definition in the contract's "math" field in double
 * precision, on exactly the (dtype-rounded) inputs the kernel was given.
 * They are written for clarity, not speed: shapes in tests are small. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/verify.h"

static vf_arg *arg(vf_call *c, const char *name, char *err, size_t len) {
  for (int i = 0; i < c->nargs; i++)
    if (!strcmp(c->args[i].name, name)) return &c->args[i];
  snprintf(err, len, "the reference needs an argument named '%s'", name);
  return NULL;
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
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
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
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss / (double)dim + eps);
    for (int64_t i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i] * inv * (w[i] + w_offset);
  }
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
  int64_t half = rot_dim / 2;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++) {
      double *v = x + t * tok_stride + h * head_stride;
      for (int64_t i = 0; i < half; i++) {
        double a = pos[t] * pow(theta, -2.0 * (double)i / (double)rot_dim);
        double x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cos(a) - x1 * sin(a);
        v[i + half] = x1 * cos(a) + x0 * sin(a);
      }
    }
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
  int64_t G = Hq / Hkv, Lmax = pos0 + T;
  double *s = malloc((size_t)(Lmax > 0 ? Lmax : 1) * sizeof *s);
  if (!s) return -1;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t g = h / G, L = pos0 + t + 1;
      const double *qh = q + (t * Hq + h) * D;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < L; j++) {
        double d = 0;
        for (int64_t k = 0; k < D; k++) d += qh[k] * kc[(j * Hkv + g) * D + k];
        s[j] = d * scale;
        if (s[j] > mx) mx = s[j];
      }
      for (int64_t j = 0; j < L; j++) sum += (s[j] = exp(s[j] - mx));
      double *o = out + (t * Hq + h) * D;
      for (int64_t k = 0; k < D; k++) {
        double acc = 0;
        for (int64_t j = 0; j < L; j++) acc += s[j] * vc[(j * Hkv + g) * D + k];
        o[k] = acc / sum;
      }
    }
  free(s);
  return 0;
}

static int ref_silu_mul(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(gate, "gate");
  BUF(up, "up");
  INT(n, "n");
  for (int64_t i = 0; i < n; i++) y[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
  return 0;
}

static int ref_add(vf_call *c, char *err, size_t len) {
  BUF(y, "y");
  BUF(a, "a");
  BUF(b, "b");
  INT(n, "n");
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
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

static const struct {
  const char *name;
  vf_ref_fn fn;
} refs[] = {
    {"matmul", ref_matmul},   {"rmsnorm", ref_rmsnorm}, {"rope", ref_rope},
    {"attention", ref_attention}, {"silu_mul", ref_silu_mul}, {"add", ref_add},
    {"scale", ref_scale},     {"embed", ref_embed},     {"argmax", ref_argmax},
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
