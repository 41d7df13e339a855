/* Float64 operator references (definitions in ref/f64.h and in each
 * operator contract's "math" field, ckb/operators/NAME.json). */
#include "core/verify/ref/f64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vf_f64_matmul(double *y, const double *x, const double *w, int64_t M, int64_t N, int64_t K) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
}

void vf_f64_rmsnorm(double *y, const double *x, const double *w, int64_t rows, int64_t dim,
                    double eps, double w_offset) {
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss / (double)dim + eps);
    for (int64_t i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i] * inv * (w[i] + w_offset);
  }
}

void vf_f64_rope(double *x, const double *pos, int64_t T, int64_t H, int64_t tok_stride,
                 int64_t head_stride, int64_t rot_dim, double theta) {
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
}

int vf_f64_attention(double *out, const double *q, const double *kc, const double *vc, int64_t T,
                     int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, double scale,
                     double *max_score) {
  return vf_f64_attention_from(out, q, kc, vc, T, Hq, Hkv, D, pos0, scale, NULL, max_score);
}

int vf_f64_attention_from(double *out, const double *q, const double *kc, const double *vc, int64_t T,
                          int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, double scale,
                          const int64_t *first, double *max_score) {
  return vf_f64_attention_mapped(out, q, kc, vc, T, Hq, Hkv, D, pos0, scale, first, NULL, NULL, max_score);
}

int vf_f64_attention_mapped(double *out, const double *q, const double *kc, const double *vc, int64_t T,
                            int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, double scale,
                            const int64_t *first, vf_score_map map, void *map_user, double *max_score) {
  if (Hkv <= 0 || Hq % Hkv) return -1;
  int64_t G = Hq / Hkv, Lmax = pos0 + T;
  double *s = malloc((size_t)(Lmax > 0 ? Lmax : 1) * sizeof *s); /* [pos0 + T] */
  if (!s) return -1;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t g = h / G, j0 = first ? first[t] : 0, L = pos0 + t + 1;
      const double *qh = q + (t * Hq + h) * D;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = j0; j < L; j++) {
        double d = 0;
        for (int64_t k = 0; k < D; k++) d += qh[k] * kc[(j * Hkv + g) * D + k];
        s[j] = map ? map(d * scale, map_user) : d * scale;
        if (s[j] > mx) mx = s[j];
      }
      if (max_score && mx > *max_score) *max_score = mx;
      for (int64_t j = j0; j < L; j++) sum += (s[j] = exp(s[j] - mx));
      double *o = out + (t * Hq + h) * D;
      for (int64_t k = 0; k < D; k++) {
        double acc = 0;
        for (int64_t j = j0; j < L; j++) acc += s[j] * vc[(j * Hkv + g) * D + k];
        o[k] = acc / sum;
      }
    }
  free(s);
  return 0;
}

void vf_f64_silu_mul(double *y, const double *gate, const double *up, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

void vf_f64_add(double *y, const double *a, const double *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* ---- the hybrid's operators ---- */

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

void vf_f64_sigmoid_mul(double *y, const double *x, const double *gate, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * sigmoid(gate[i]);
}

void vf_f64_silu(double *y, const double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * sigmoid(x[i]);
}

void vf_f64_l2norm(double *y, const double *x, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss + eps);
    for (int64_t i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i] * inv;
  }
}

void vf_f64_rmsnorm_gated(double *y, const double *x, const double *w, const double *z, int64_t rows,
                          int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss / (double)dim + eps);
    for (int64_t i = 0; i < dim; i++) {
      double zi = z[r * dim + i];
      y[r * dim + i] = w[i] * (x[r * dim + i] * inv) * (zi * sigmoid(zi));
    }
  }
}

int vf_f64_conv1d_causal(double *y, const double *x, const double *w, double *state, int64_t T,
                         int64_t C, int64_t K) {
  /* u = [state; x], [K-1+T, C] */
  double *u = malloc((size_t)(K - 1 + T) * (size_t)C * sizeof *u);
  if (!u) return -1;
  memcpy(u, state, (size_t)(K - 1) * (size_t)C * sizeof *u);
  memcpy(u + (K - 1) * C, x, (size_t)T * (size_t)C * sizeof *u);
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < C; c++) {
      double s = 0;
      for (int64_t j = 0; j < K; j++) s += w[c * K + j] * u[(t + j) * C + c];
      y[t * C + c] = s;
    }
  memcpy(state, u + T * C, (size_t)(K - 1) * (size_t)C * sizeof *u);
  free(u);
  return 0;
}

static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

void vf_f64_deltanet_gates(double *g, double *beta, const double *a, const double *b,
                           const double *A_log, const double *dt_bias, int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++) {
      beta[t * H + h] = sigmoid(b[t * H + h]);
      g[t * H + h] = -exp(A_log[h]) * softplus(a[t * H + h] + dt_bias[h]);
    }
}

int vf_f64_gated_delta_rule(double *out, double *state, const double *q, const double *k,
                            const double *v, const double *g, const double *beta, int64_t T,
                            int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  if (Hk <= 0 || Hv % Hk) return -1;
  const int64_t rep = Hv / Hk;
  double *kv = malloc((size_t)Dv * sizeof *kv); /* [Dv] */
  if (!kv) return -1;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hv; h++) {
      double *S = state + h * Dk * Dv; /* [Dk, Dv] */
      const double *kt = k + (t * Hk + h / rep) * Dk, *qt = q + (t * Hk + h / rep) * Dk;
      const double *vt = v + (t * Hv + h) * Dv;
      const double decay = exp(g[t * Hv + h]), b = beta[t * Hv + h];
      for (int64_t i = 0; i < Dk * Dv; i++) S[i] *= decay;
      for (int64_t j = 0; j < Dv; j++) {
        double s = 0;
        for (int64_t i = 0; i < Dk; i++) s += S[i * Dv + j] * kt[i];
        kv[j] = (vt[j] - s) * b; /* δ */
      }
      for (int64_t i = 0; i < Dk; i++)
        for (int64_t j = 0; j < Dv; j++) S[i * Dv + j] += kt[i] * kv[j];
      double *o = out + (t * Hv + h) * Dv;
      for (int64_t j = 0; j < Dv; j++) {
        double s = 0;
        for (int64_t i = 0; i < Dk; i++) s += S[i * Dv + j] * qt[i];
        o[j] = s;
      }
    }
  free(kv);
  return 0;
}

static double dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

int vf_f64_gated_delta_rule_chunked(double *out, double *state, const double *q, const double *k,
                                    const double *v, const double *g, const double *beta, int64_t T,
                                    int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, int64_t chunk) {
  if (Hk <= 0 || Hv % Hk || chunk < 1) return -1;
  const int64_t rep = Hv / Hk;
  const int64_t Cm = chunk < T ? chunk : (T > 0 ? T : 1);
  double *G = malloc((size_t)Cm * sizeof *G);                  /* [C] cumulative log decay */
  double *d = malloc((size_t)Cm * (size_t)Dv * sizeof *d);      /* [C, Dv] the updates δ */
  double *S0k = malloc((size_t)Dv * sizeof *S0k);               /* [Dv] */
  if (!G || !d || !S0k) {
    free(G);
    free(d);
    free(S0k);
    return -1;
  }
  for (int64_t h = 0; h < Hv; h++) {
    double *S = state + h * Dk * Dv; /* [Dk, Dv] */
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
      const int64_t C = T - t0 < chunk ? T - t0 : chunk;
#define KROW(i) (k + ((t0 + (i)) * Hk + h / rep) * Dk)
#define QROW(i) (q + ((t0 + (i)) * Hk + h / rep) * Dk)
      for (int64_t i = 0; i < C; i++) G[i] = (i ? G[i - 1] : 0) + g[(t0 + i) * Hv + h];
      /* right-hand side, then forward substitution (unit lower-triangular) */
      for (int64_t i = 0; i < C; i++) {
        const double b = beta[(t0 + i) * Hv + h], eg = exp(G[i]);
        const double *ki = KROW(i), *vi = v + ((t0 + i) * Hv + h) * Dv;
        for (int64_t j = 0; j < Dv; j++) {
          double s = 0;
          for (int64_t a = 0; a < Dk; a++) s += S[a * Dv + j] * ki[a];
          S0k[j] = s;
        }
        for (int64_t j = 0; j < Dv; j++) d[i * Dv + j] = b * (vi[j] - eg * S0k[j]);
        for (int64_t m = 0; m < i; m++) {
          const double c = b * exp(G[i] - G[m]) * dot(ki, KROW(m), Dk);
          for (int64_t j = 0; j < Dv; j++) d[i * Dv + j] -= c * d[m * Dv + j];
        }
      }
      /* outputs from the chunk's initial state and the updates */
      for (int64_t i = 0; i < C; i++) {
        const double *qi = QROW(i);
        double *o = out + ((t0 + i) * Hv + h) * Dv;
        const double eg = exp(G[i]);
        for (int64_t j = 0; j < Dv; j++) {
          double s = 0;
          for (int64_t a = 0; a < Dk; a++) s += S[a * Dv + j] * qi[a];
          o[j] = eg * s;
        }
        for (int64_t m = 0; m <= i; m++) {
          const double c = exp(G[i] - G[m]) * dot(qi, KROW(m), Dk);
          for (int64_t j = 0; j < Dv; j++) o[j] += c * d[m * Dv + j];
        }
      }
      /* the state after the chunk */
      const double egC = exp(G[C - 1]);
      for (int64_t a = 0; a < Dk * Dv; a++) S[a] *= egC;
      for (int64_t m = 0; m < C; m++) {
        const double c = exp(G[C - 1] - G[m]);
        const double *km = KROW(m);
        for (int64_t a = 0; a < Dk; a++)
          for (int64_t j = 0; j < Dv; j++) S[a * Dv + j] += c * km[a] * d[m * Dv + j];
      }
#undef KROW
#undef QROW
    }
  }
  free(G);
  free(d);
  free(S0k);
  return 0;
}
