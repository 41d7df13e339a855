/* The qwen3 plugin on the CPU platform against an independent float64
 * implementation of Hugging Face's modeling_qwen3 written here from the
 * math (RMSNorm, q/k norm, NeoX RoPE, GQA causal softmax attention, SwiGLU),
 * on models made by mi-mkmodel. Checks the logits of every position of a
 * prompt, a prompt fed in several chunks (prefill batching), and decode
 * after prefill (KV cache positions). */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/engine.h"
#include "core/host.h"
#include "core/loader.h"
#include "core/safetensors.h"

static char g_build[1024], g_models[1024];

/* ---- float64 reference ---------------------------------------------- */

typedef struct ref_model {
  int H, L, nh, nkv, hd, F, V, tied;
  double eps, theta;
  const mi_weights *w;
} ref_model;

static double *load_tensor(const ref_model *m, const char *name, size_t expect) {
  mi_weight_info wi;
  ck_assert_msg(mi_weights_find(m->w, name, &wi) == 0, "missing %s", name);
  size_t n = 1;
  for (int i = 0; i < wi.ndim; i++) n *= (size_t)wi.shape[i];
  ck_assert_uint_eq(n, expect);
  double *out = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    if (wi.dtype == MI_DTYPE_BF16) {
      uint16_t h;
      memcpy(&h, (const char *)wi.data + 2 * i, 2);
      out[i] = mi_bf16_to_f32(h);
    } else if (wi.dtype == MI_DTYPE_F32) {
      float f;
      memcpy(&f, (const char *)wi.data + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t h;
      memcpy(&h, (const char *)wi.data + 2 * i, 2);
      out[i] = mi_f16_to_f32(h);
    }
  }
  return out;
}

static void rmsnorm(double *y, const double *x, const double *w, int n, double eps) {
  double ss = 0;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  double r = 1.0 / sqrt(ss / n + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* y[N] = W[N,K] x[K] */
static void linear(double *y, const double *W, const double *x, int N, int K) {
  for (int n = 0; n < N; n++) {
    double s = 0;
    for (int k = 0; k < K; k++) s += W[(size_t)n * K + k] * x[k];
    y[n] = s;
  }
}

static void rope(double *v, int pos, int hd, double theta) {
  int half = hd / 2;
  for (int i = 0; i < half; i++) {
    double ang = pos * pow(theta, -2.0 * i / hd);
    double c = cos(ang), s = sin(ang), a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

/* Logits [T, V] for tokens ids[T], from scratch (no cache). */
static double *ref_forward(const ref_model *m, const int32_t *ids, int T) {
  const int H = m->H, hd = m->hd, nh = m->nh, nkv = m->nkv, F = m->F, V = m->V;
  double *emb = load_tensor(m, "model.embed_tokens.weight", (size_t)V * H);
  double *x = calloc((size_t)T * H, sizeof(double));
  for (int t = 0; t < T; t++) memcpy(x + (size_t)t * H, emb + (size_t)ids[t] * H, H * sizeof(double));
  double *h = malloc(H * sizeof(double)), *tmp = malloc((F > H ? F : H) * sizeof(double));
  double *q = malloc((size_t)T * nh * hd * sizeof(double));
  double *k = malloc((size_t)T * nkv * hd * sizeof(double));
  double *v = malloc((size_t)T * nkv * hd * sizeof(double));
  double *att = malloc((size_t)nh * hd * sizeof(double)), *sc = malloc(T * sizeof(double));
  double *g = malloc(F * sizeof(double)), *u = malloc(F * sizeof(double));
  char name[256];
  for (int l = 0; l < m->L; l++) {
#define W(s, n) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), load_tensor(m, name, n))
    double *an = W("input_layernorm.weight", H), *fn = W("post_attention_layernorm.weight", H);
    double *wq = W("self_attn.q_proj.weight", (size_t)nh * hd * H);
    double *wk = W("self_attn.k_proj.weight", (size_t)nkv * hd * H);
    double *wv = W("self_attn.v_proj.weight", (size_t)nkv * hd * H);
    double *wo = W("self_attn.o_proj.weight", (size_t)H * nh * hd);
    double *qn = W("self_attn.q_norm.weight", hd), *kn = W("self_attn.k_norm.weight", hd);
    double *wg = W("mlp.gate_proj.weight", (size_t)F * H), *wu = W("mlp.up_proj.weight", (size_t)F * H);
    double *wd = W("mlp.down_proj.weight", (size_t)H * F);
#undef W
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
          for (int j = 0; j < hd; j++) d += qi[j] * ks[j];
          sc[s] = d / sqrt((double)hd);
          if (sc[s] > mx) mx = sc[s];
        }
        for (int s = 0; s <= t; s++) sum += (sc[s] = exp(sc[s] - mx));
        for (int j = 0; j < hd; j++) {
          double a = 0;
          for (int s = 0; s <= t; s++) a += sc[s] * v[((size_t)s * nkv + kvh) * hd + j];
          att[(size_t)i * hd + j] = a / sum;
        }
      }
      linear(tmp, wo, att, H, nh * hd);
      for (int j = 0; j < H; j++) x[(size_t)t * H + j] += tmp[j];
    }
    for (int t = 0; t < T; t++) {
      rmsnorm(h, x + (size_t)t * H, fn, H, m->eps);
      linear(g, wg, h, F, H);
      linear(u, wu, h, F, H);
      for (int j = 0; j < F; j++) g[j] = g[j] / (1 + exp(-g[j])) * u[j];
      linear(tmp, wd, g, H, F);
      for (int j = 0; j < H; j++) x[(size_t)t * H + j] += tmp[j];
    }
    free(an); free(fn); free(wq); free(wk); free(wv); free(wo); free(qn); free(kn);
    free(wg); free(wu); free(wd);
  }
  double *nw = load_tensor(m, "model.norm.weight", H);
  double *lm = m->tied ? emb : load_tensor(m, "lm_head.weight", (size_t)V * H);
  double *logits = malloc((size_t)T * V * sizeof(double));
  for (int t = 0; t < T; t++) {
    rmsnorm(h, x + (size_t)t * H, nw, H, m->eps);
    linear(logits + (size_t)t * V, lm, h, V, H);
  }
  if (!m->tied) free(lm);
  free(nw); free(emb); free(x); free(h); free(tmp); free(q); free(k); free(v); free(att);
  free(sc); free(g); free(u);
  return logits;
}

/* ---- harness --------------------------------------------------------- */

static void make_model(const char *shape, int seed, char *dir, size_t n) {
  snprintf(dir, n, "%s/%s-seed%d", g_models, shape, seed);
  char cfg[1200];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  FILE *f = fopen(cfg, "r");
  if (f) {
    fclose(f);
    return;
  }
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel' --shape %s --seed %d --out '%s' >/dev/null",
           g_build, shape, seed, dir);
  ck_assert_msg(system(cmd) == 0, "mi-mkmodel failed: %s", cmd);
}

static mi_registry *load_registry(void) {
  char pdir[1100];
  snprintf(pdir, sizeof pdir, "%s/lib/metainfer", g_build);
  mi_loader_opts lo = {.plugin_dir = pdir};
  int fatal = 0;
  char err[1024];
  mi_registry *r = mi_registry_load(&lo, &fatal, err, sizeof err);
  ck_assert_msg(r && !fatal, "plugins: %s", err);
  return r;
}

static void ref_from_engine(const mi_engine *e, ref_model *m) {
  const json_t *c = e->config;
  m->H = (int)json_integer_value(json_object_get(c, "hidden_size"));
  m->L = (int)json_integer_value(json_object_get(c, "num_hidden_layers"));
  m->nh = (int)json_integer_value(json_object_get(c, "num_attention_heads"));
  m->nkv = (int)json_integer_value(json_object_get(c, "num_key_value_heads"));
  m->hd = (int)json_integer_value(json_object_get(c, "head_dim"));
  m->F = (int)json_integer_value(json_object_get(c, "intermediate_size"));
  m->V = (int)json_integer_value(json_object_get(c, "vocab_size"));
  m->tied = json_is_true(json_object_get(c, "tie_word_embeddings"));
  m->eps = json_number_value(json_object_get(c, "rms_norm_eps"));
  m->theta = json_number_value(json_object_get(c, "rope_theta"));
  m->w = e->weights;
}

/* max |a - b| over a row, relative to the row's logit spread */
static double row_err(const float *a, const double *b, int V, double *spread) {
  double mx = 0, lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < V; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > mx) mx = d;
    if (b[i] < lo) lo = b[i];
    if (b[i] > hi) hi = b[i];
  }
  *spread = hi - lo;
  return mx;
}

/* Tolerance: weights are bf16 (exact in f32 and f64); the plugin runs f32
 * activations with f32 accumulation, so logits differ from float64 by
 * roughly eps_f32 · sqrt(K) · depth — ~1e-5 relative on these shapes. We
 * allow 1e-3 absolute on logits of spread > 5 (i.e. 2e-4 relative): ten
 * times the error seen, and far below any real defect (a skipped norm or a
 * wrong RoPE pairing moves logits by O(1)). */
#define LOGIT_TOL 1e-3

static void check_model(const char *shape, int seed, int chunk) {
  char dir[1200], err[2048];
  make_model(shape, seed, dir, sizeof dir);
  mi_registry *reg = load_registry();
  char bs[16];
  snprintf(bs, sizeof bs, "%d", chunk);
  mi_kv kv = {"batch", bs};
  mi_options mo = {&kv, 1};
  mi_engine_opts eo = {.model_dir = dir, .model_opts = &mo, .tp_size = 1};
  mi_engine *e = NULL;
  ck_assert_msg(mi_engine_open(reg, &eo, &e, err, sizeof err) == 0, "%s", err);
  ref_model rm;
  ref_from_engine(e, &rm);
  /* a prompt that spans several chunks, with ids across the vocabulary */
  const int T = 23;
  int32_t ids[23];
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 13) % 151643);
  double *ref = ref_forward(&rm, ids, T);
  const int V = rm.V;

  /* (1) all positions in one call (chunked internally by `batch`) */
  mi_seq *s = NULL;
  ck_assert_int_eq(e->M->seq_create(e->model, 64, &s, err, sizeof err), 0);
  float *lg = malloc((size_t)T * V * sizeof(float));
  ck_assert_msg(e->M->forward(e->model, s, ids, T, lg, 1, err, sizeof err) == 0, "%s", err);
  double worst = 0;
  for (int t = 0; t < T; t++) {
    double spread, d = row_err(lg + (size_t)t * V, ref + (size_t)t * V, V, &spread);
    ck_assert_msg(spread > 1.0, "%s: logits are flat at t=%d (spread %g)", shape, t, spread);
    ck_assert_msg(d < LOGIT_TOL, "%s chunk=%d: position %d logits differ by %g (tol %g)", shape,
                  chunk, t, d, LOGIT_TOL);
    if (d > worst) worst = d;
  }
  /* (2) prefill T-5 then decode one at a time: KV positions must line up */
  ck_assert_int_eq(e->M->seq_truncate(e->model, s, 0), 0);
  float *last = malloc((size_t)V * sizeof(float));
  ck_assert_msg(e->M->forward(e->model, s, ids, T - 5, last, 0, err, sizeof err) == 0, "%s", err);
  for (int t = T - 5; t < T; t++) {
    ck_assert_msg(e->M->forward(e->model, s, ids + t, 1, last, 0, err, sizeof err) == 0, "%s", err);
    double spread, d = row_err(last, ref + (size_t)t * V, V, &spread);
    ck_assert_msg(d < LOGIT_TOL, "%s: decode at position %d differs by %g", shape, t, d);
  }
  ck_assert_int_eq(e->M->seq_len(e->model, s), T);
  fprintf(stderr, "qwen3 %s seed %d batch %d: max |logit - float64 ref| = %.3g\n", shape, seed,
          chunk, worst);
  free(last);
  free(lg);
  free(ref);
  e->M->seq_destroy(e->model, s);
  mi_engine_close(e);
  mi_registry_free(reg);
}

START_TEST(tiny_tied) { check_model("tiny", 1, 512); }
END_TEST
START_TEST(tiny_tied_chunked) { check_model("tiny", 1, 4); }
END_TEST
START_TEST(tiny_untied_gqa4) { check_model("tiny-untied", 2, 7); }
END_TEST

int main(void) {
  const char *b = getenv("MI_BUILD_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_models, sizeof g_models, "%s/models", g_build);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_models);
  if (system(cmd) != 0) return 1;
  Suite *s = suite_create("qwen3_reference");
  TCase *tc = tcase_create("float64");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, tiny_tied);
  tcase_add_test(tc, tiny_tied_chunked);
  tcase_add_test(tc, tiny_untied_gqa4);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? 1 : 0;
}
