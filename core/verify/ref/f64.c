/* Float64 operator references (definitions in ref/f64.h and in each
 * operator contract's "math" field, ckb/operators/NAME.json). */
#include "core/verify/ref/f64.h"

#include <math.h>
#include <stdlib.h>

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
  if (Hkv <= 0 || Hq % Hkv) return -1;
  int64_t G = Hq / Hkv, Lmax = pos0 + T;
  double *s = malloc((size_t)(Lmax > 0 ? Lmax : 1) * sizeof *s); /* [pos0 + T] */
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
      if (max_score && mx > *max_score) *max_score = mx;
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

void vf_f64_silu_mul(double *y, const double *gate, const double *up, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

void vf_f64_add(double *y, const double *a, const double *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
