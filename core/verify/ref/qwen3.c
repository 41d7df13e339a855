/* A float64 forward pass of a Qwen3 dense model (Hugging Face
 * modeling_qwen3, written from the math: RMSNorm, q/k per-head RMSNorm, NeoX
 * RoPE, GQA causal softmax attention with max subtraction, SwiGLU, final
 * norm, lm_head or tied embeddings), reading the weight files directly. It
 * shares no code with any plugin: stage 5 holds the engine's outputs on
 * prompts drawn at run time against it, and tests/qwen3 holds the plugin's
 * logits at every position against it. Logits are computed only for the
 * positions asked for (lm_head is the cost). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/safetensors.h"
#include "core/verify/verify.h"

int vf_ref_model_init(vf_ref_model *m, const json_t *cfg, const struct mi_weights *w, char *err,
                      size_t err_len) {
  memset(m, 0, sizeof *m);
  const char *ints[] = {"hidden_size",         "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim",          "intermediate_size",
                        "vocab_size"};
  int *dst[] = {&m->H, &m->L, &m->nh, &m->nkv, &m->hd, &m->F, &m->V};
  for (int i = 0; i < 7; i++) {
    json_t *v = json_object_get(cfg, ints[i]);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24)) {
      snprintf(err, err_len, "config.json: \"%s\" is missing or not a positive integer", ints[i]);
      return -1;
    }
    *dst[i] = (int)json_integer_value(v);
  }
  if (m->nh % m->nkv || m->hd % 2) {
    snprintf(err, err_len,
             "config.json: heads %d / kv heads %d / head_dim %d do not fit GQA + RoPE", m->nh,
             m->nkv, m->hd);
    return -1;
  }
  m->tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
  json_t *e = json_object_get(cfg, "rms_norm_eps"), *t = json_object_get(cfg, "rope_theta");
  m->eps = json_is_number(e) ? json_number_value(e) : 1e-6;
  m->theta = json_is_number(t) ? json_number_value(t) : 1e6;
  m->w = w;
  return 0;
}

/* A tensor widened to float64; NULL when missing or of the wrong size. */
static double *load(const vf_ref_model *m, const char *name, size_t expect, char *err,
                    size_t err_len) {
  mi_weight_info wi;
  if (mi_weights_find(m->w, name, &wi) != 0) {
    snprintf(err, err_len, "reference: no tensor \"%s\"", name);
    return NULL;
  }
  size_t n = 1;
  for (int i = 0; i < wi.ndim; i++)
    n *= (size_t)wi.shape[i];
  if (n != expect ||
      (wi.dtype != MI_DTYPE_BF16 && wi.dtype != MI_DTYPE_F16 && wi.dtype != MI_DTYPE_F32)) {
    snprintf(err, err_len, "reference: tensor \"%s\" has %zu elements of dtype %d, expected %zu",
             name, n, wi.dtype, expect);
    return NULL;
  }
  double *out = malloc(n * sizeof(double));
  if (!out) {
    snprintf(err, err_len, "reference: out of memory");
    return NULL;
  }
  const unsigned char *p = wi.data;
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    float f;
    if (wi.dtype == MI_DTYPE_F32) {
      memcpy(&f, p + 4 * i, 4);
      out[i] = f;
    } else {
      memcpy(&h, p + 2 * i, 2);
      out[i] = wi.dtype == MI_DTYPE_BF16 ? mi_bf16_to_f32(h) : mi_f16_to_f32(h);
    }
  }
  return out;
}

static void rmsnorm(double *y, const double *x, const double *w, int n, double eps) {
  double ss = 0;
  for (int i = 0; i < n; i++)
    ss += x[i] * x[i];
  double r = 1.0 / sqrt(ss / n + eps);
  for (int i = 0; i < n; i++)
    y[i] = x[i] * r * w[i];
}

/* y[N] = W[N,K] x[K] */
static void linear(double *y, const double *W, const double *x, int N, int K) {
  for (int n = 0; n < N; n++) {
    double s = 0;
    const double *row = W + (size_t)n * K;
    for (int k = 0; k < K; k++)
      s += row[k] * x[k];
    y[n] = s;
  }
}

/* NeoX: pairs (i, i + hd/2) rotate by pos · theta^(-2i/hd). */
static void rope(double *v, int pos, int hd, double theta) {
  int half = hd / 2;
  for (int i = 0; i < half; i++) {
    double ang = pos * pow(theta, -2.0 * i / hd);
    double c = cos(ang), s = sin(ang), a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

double *vf_ref_model_forward(const vf_ref_model *m, const int32_t *ids, int T, int n_out, char *err,
                             size_t err_len) {
  const int H = m->H, hd = m->hd, nh = m->nh, nkv = m->nkv, F = m->F, V = m->V;
  if (T < 1 || n_out < 1 || n_out > T) {
    snprintf(err, err_len, "reference: bad lengths T=%d n_out=%d", T, n_out);
    return NULL;
  }
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= V) {
      snprintf(err, err_len, "reference: token id %d outside [0, %d)", ids[t], V);
      return NULL;
    }
  double *logits = NULL;
  double *emb = load(m, "model.embed_tokens.weight", (size_t)V * H, err, err_len);
  double *x = calloc((size_t)T * H, sizeof(double));              /* [T, H] */
  double *h = malloc((size_t)H * sizeof(double));                 /* [H] */
  double *tmp = malloc((size_t)(F > H ? F : H) * sizeof(double)); /* [max(F, H)] */
  double *q = malloc((size_t)T * nh * hd * sizeof(double));       /* [T, nh, hd] */
  double *k = malloc((size_t)T * nkv * hd * sizeof(double));      /* [T, nkv, hd] */
  double *v = malloc((size_t)T * nkv * hd * sizeof(double));      /* [T, nkv, hd] */
  double *att = malloc((size_t)nh * hd * sizeof(double));         /* [nh, hd] */
  double *sc = malloc((size_t)T * sizeof(double));                /* [T] */
  double *g = malloc((size_t)F * sizeof(double)), *u = malloc((size_t)F * sizeof(double)); /* [F] */
  if (!emb || !x || !h || !tmp || !q || !k || !v || !att || !sc || !g || !u) {
    if (emb) snprintf(err, err_len, "reference: out of memory");
    goto done;
  }
  for (int t = 0; t < T; t++)
    memcpy(x + (size_t)t * H, emb + (size_t)ids[t] * H, (size_t)H * sizeof(double));
  char name[256];
  for (int l = 0; l < m->L; l++) {
    double *W[11] = {0};
    const char *nm[11] = {"input_layernorm.weight",  "post_attention_layernorm.weight",
                          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                          "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                          "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                          "mlp.down_proj.weight"};
    const size_t sz[11] = {(size_t)H,
                           (size_t)H,
                           (size_t)nh * hd * H,
                           (size_t)nkv * hd * H,
                           (size_t)nkv * hd * H,
                           (size_t)H * nh * hd,
                           (size_t)hd,
                           (size_t)hd,
                           (size_t)F * H,
                           (size_t)F * H,
                           (size_t)H * F};
    int ok = 1;
    for (int i = 0; i < 11 && ok; i++) {
      snprintf(name, sizeof name, "model.layers.%d.%s", l, nm[i]);
      ok = (W[i] = load(m, name, sz[i], err, err_len)) != NULL;
    }
    if (ok) {
      double *an = W[0], *fn = W[1], *wq = W[2], *wk = W[3], *wv = W[4], *wo = W[5], *qn = W[6],
             *kn = W[7];
      double *wg = W[8], *wu = W[9], *wd = W[10];
      for (int t = 0; t < T; t++) {
        rmsnorm(h, x + (size_t)t * H, an, H, m->eps);
        linear(q + (size_t)t * nh * hd, wq, h, nh * hd, H);
        linear(k + (size_t)t * nkv * hd, wk, h, nkv * hd, H);
        linear(v + (size_t)t * nkv * hd, wv, h, nkv * hd, H);
        for (int i = 0; i < nh; i++) {
          double *qi = q + ((size_t)t * nh + i) * hd;
          rmsnorm(qi, qi, qn, hd, m->eps);
          rope(qi, t, hd, m->theta);
        }
        for (int i = 0; i < nkv; i++) {
          double *ki = k + ((size_t)t * nkv + i) * hd;
          rmsnorm(ki, ki, kn, hd, m->eps);
          rope(ki, t, hd, m->theta);
        }
      }
      for (int t = 0; t < T; t++) {
        for (int i = 0; i < nh; i++) {
          int kvh = i / (nh / nkv);
          const double *qi = q + ((size_t)t * nh + i) * hd;
          double mx = -INFINITY, sum = 0;
          for (int s = 0; s <= t; s++) {
            const double *ks = k + ((size_t)s * nkv + kvh) * hd;
            double d = 0;
            for (int j = 0; j < hd; j++)
              d += qi[j] * ks[j];
            sc[s] = d / sqrt((double)hd);
            if (sc[s] > mx) mx = sc[s];
            if (m->max_score && sc[s] > *m->max_score) *m->max_score = sc[s];
          }
          for (int s = 0; s <= t; s++)
            sum += (sc[s] = exp(sc[s] - mx));
          for (int j = 0; j < hd; j++) {
            double a = 0;
            for (int s = 0; s <= t; s++)
              a += sc[s] * v[((size_t)s * nkv + kvh) * hd + j];
            att[(size_t)i * hd + j] = a / sum;
          }
        }
        linear(tmp, wo, att, H, nh * hd);
        for (int j = 0; j < H; j++)
          x[(size_t)t * H + j] += tmp[j];
      }
      for (int t = 0; t < T; t++) {
        rmsnorm(h, x + (size_t)t * H, fn, H, m->eps);
        linear(g, wg, h, F, H);
        linear(u, wu, h, F, H);
        for (int j = 0; j < F; j++)
          g[j] = g[j] / (1 + exp(-g[j])) * u[j];
        linear(tmp, wd, g, H, F);
        for (int j = 0; j < H; j++)
          x[(size_t)t * H + j] += tmp[j];
      }
    }
    for (int i = 0; i < 11; i++)
      free(W[i]);
    if (!ok) goto done;
  }
  double *nw = load(m, "model.norm.weight", (size_t)H, err, err_len);
  double *lm = !nw ? NULL : m->tied ? emb : load(m, "lm_head.weight", (size_t)V * H, err, err_len);
  logits = nw && lm ? malloc((size_t)n_out * V * sizeof(double)) : NULL; /* [n_out, V] */
  if (nw && lm && !logits) snprintf(err, err_len, "reference: out of memory");
  for (int r = 0; logits && r < n_out; r++) {
    rmsnorm(h, x + (size_t)(T - n_out + r) * H, nw, H, m->eps);
    linear(logits + (size_t)r * V, lm, h, V, H);
  }
  if (lm != emb) free(lm);
  free(nw);
done:
  free(emb);
  free(x);
  free(h);
  free(tmp);
  free(q);
  free(k);
  free(v);
  free(att);
  free(sc);
  free(g);
  free(u);
  return logits;
}
