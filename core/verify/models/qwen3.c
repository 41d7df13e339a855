/* The verifier's knowledge of model contract model.qwen3 (Hugging Face
 * modeling_qwen3, written from the math): pre-norm GQA attention with
 * per-head q/k RMSNorm and NeoX RoPE, SwiGLU MLP, final norm, lm_head or
 * tied embeddings.
 *   - the layer driver of stage 2: one decoder layer composed from the
 *     platform's kernels the way the contract's layer_sequence describes
 *     it, and its float64 twin on the same (dtype-rounded) weights;
 *   - the float64 model: logits from the weight files, sharing no code with
 *     any plugin (stage 5 and tests/qwen3 hold a plugin's logits to it).
 * Every float64 operator comes from ref/f64.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/driver.h"
#include "core/verify/ref/f64.h"
#include "core/verify/verify.h"

/* ---------- stage 2: a small Qwen3-shaped layer ---------- */

/* GQA 4/2, head_dim its own size (not H/Hq). */
enum { H = 64, HQ = 4, HKV = 2, HD = 24, FF = 96, NCTX = 16, TMAX = 5 };
#define EPS 1e-6
#define THETA 1e6

enum { W_IN_NORM, W_Q, W_K, W_V, W_O, W_QN, W_KN, W_POST_NORM, W_GATE, W_UP, W_DOWN, W_COUNT };
static const vf_layer_weight wspec[W_COUNT] = {
    {"input_layernorm", H, 1, VF_W_NORM_ONE},
    {"q_proj", HQ * HD, H, VF_W_MATRIX},
    {"k_proj", HKV * HD, H, VF_W_MATRIX},
    {"v_proj", HKV * HD, H, VF_W_MATRIX},
    {"o_proj", H, HQ * HD, VF_W_MATRIX},
    {"q_norm", HD, 1, VF_W_NORM_ONE},
    {"k_norm", HD, 1, VF_W_NORM_ONE},
    {"post_attention_layernorm", H, 1, VF_W_NORM_ONE},
    {"gate_proj", FF, H, VF_W_MATRIX},
    {"up_proj", FF, H, VF_W_MATRIX},
    {"down_proj", H, FF, VF_W_MATRIX},
};
static const char *const layer_needs[] = {"matmul", "rmsnorm", "rope", "attention", "silu_mul",
                                          "add", NULL};

/* The kernels get float eps/theta/scale: the twin uses the same values. */
static double f_eps(void) { return (double)(float)EPS; }
static double f_theta(void) { return (double)(float)THETA; }
static double f_scale(void) { return (double)(float)(1.0 / sqrt((double)HD)); }

typedef struct ref_layer {
  double kc[NCTX * HKV * HD], vc[NCTX * HKV * HD]; /* [NCTX, HKV, HD] */
} ref_layer;

static void *ref_new(void) { return calloc(1, sizeof(ref_layer)); }
static void ref_free(void *st) { free(st); }

static int ref_run(void *state, double *const *w, const double *x, double *out, int T, int pos0) {
  ref_layer *st = state;
  double a[TMAX * H], q[TMAX * HQ * HD], k[TMAX * HKV * HD], v[TMAX * HKV * HD]; /* [T, ...] */
  double at[TMAX * HQ * HD], o[TMAX * H], h[TMAX * H], m[TMAX * H], g[TMAX * FF], u[TMAX * FF];
  double pos[TMAX];
  for (int t = 0; t < T; t++) pos[t] = pos0 + t;
  vf_f64_rmsnorm(a, x, w[W_IN_NORM], T, H, f_eps(), 0);
  vf_f64_matmul(q, a, w[W_Q], T, HQ * HD, H);
  vf_f64_matmul(k, a, w[W_K], T, HKV * HD, H);
  vf_f64_matmul(v, a, w[W_V], T, HKV * HD, H);
  vf_f64_rmsnorm(q, q, w[W_QN], T * HQ, HD, f_eps(), 0);
  vf_f64_rmsnorm(k, k, w[W_KN], T * HKV, HD, f_eps(), 0);
  vf_f64_rope(q, pos, T, HQ, HQ * HD, HD, HD, f_theta());
  vf_f64_rope(k, pos, T, HKV, HKV * HD, HD, HD, f_theta());
  memcpy(st->kc + pos0 * HKV * HD, k, sizeof(double) * T * HKV * HD);
  memcpy(st->vc + pos0 * HKV * HD, v, sizeof(double) * T * HKV * HD);
  if (vf_f64_attention(at, q, st->kc, st->vc, T, HQ, HKV, HD, pos0, f_scale(), NULL) != 0) return -1;
  vf_f64_matmul(o, at, w[W_O], T, H, HQ * HD);
  vf_f64_add(h, x, o, T * H);
  vf_f64_rmsnorm(m, h, w[W_POST_NORM], T, H, f_eps(), 0);
  vf_f64_matmul(g, m, w[W_GATE], T, FF, H);
  vf_f64_matmul(u, m, w[W_UP], T, FF, H);
  vf_f64_silu_mul(g, g, u, T * FF);
  vf_f64_matmul(o, g, w[W_DOWN], T, H, FF);
  vf_f64_add(out, h, o, T * H);
  return 0;
}

typedef struct dev_layer {
  void *const *w;                                            /* [W_COUNT] device weights */
  float *x, *a, *h, *o, *m;                                  /* [TMAX, H] */
  float *q, *at;                                             /* [TMAX, HQ, HD] */
  float *k, *v;                                              /* [TMAX, HKV, HD] */
  float *g, *u;                                              /* [TMAX, FF] */
  float *kc, *vc;                                            /* [NCTX, HKV, HD] */
  int32_t *pos;                                              /* [TMAX] */
} dev_layer;

static void *dev_new(vf_dev *d, void *const *w) {
  dev_layer *L = calloc(1, sizeof *L);
  if (!L) return NULL;
  L->w = w;
  float **acts[] = {&L->x, &L->a, &L->q, &L->k, &L->v, &L->at, &L->o, &L->h, &L->m, &L->g, &L->u};
  size_t sizes[] = {H, H, HQ * HD, HKV * HD, HKV * HD, HQ * HD, H, H, H, FF, FF};
  int ok = 1;
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
    ok &= (*acts[k] = vf_dev_alloc(d, sizeof(float) * TMAX * sizes[k])) != NULL;
  ok &= (L->kc = vf_dev_alloc(d, sizeof(float) * NCTX * HKV * HD)) != NULL;
  ok &= (L->vc = vf_dev_alloc(d, sizeof(float) * NCTX * HKV * HD)) != NULL;
  ok &= (L->pos = vf_dev_alloc(d, sizeof(int32_t) * TMAX)) != NULL;
  if (!ok) {
    free(L);
    return NULL;
  }
  return L;
}

static void dev_free(void *L) { free(L); }

static int dev_run(vf_dev *d, void *state, mi_dtype wt, const float *x, int T, int pos0,
                   float *out) {
  dev_layer *L = state;
  const mi_platform_iface *p = d->pi;
  void *c = d->ctx;
  void *const *w = L->w;
  int32_t pos[TMAX];
  for (int t = 0; t < T; t++) pos[t] = pos0 + t;
  VF_STEP(d, "upload x", p->memcpy_h2d(c, NULL, L->x, x, sizeof(float) * T * H));
  VF_STEP(d, "upload pos", p->memcpy_h2d(c, NULL, L->pos, pos, sizeof(int32_t) * T));
  VF_STEP(d, "attn_norm", p->rmsnorm(c, NULL, L->a, L->x, w[W_IN_NORM], T, H, (float)EPS, 0.0f));
  VF_STEP(d, "q_proj", p->matmul(c, NULL, L->q, L->a, w[W_Q], wt, T, HQ * HD, H));
  VF_STEP(d, "k_proj", p->matmul(c, NULL, L->k, L->a, w[W_K], wt, T, HKV * HD, H));
  VF_STEP(d, "v_proj", p->matmul(c, NULL, L->v, L->a, w[W_V], wt, T, HKV * HD, H));
  VF_STEP(d, "q_norm", p->rmsnorm(c, NULL, L->q, L->q, w[W_QN], (int64_t)T * HQ, HD, (float)EPS, 0.0f));
  VF_STEP(d, "k_norm", p->rmsnorm(c, NULL, L->k, L->k, w[W_KN], (int64_t)T * HKV, HD, (float)EPS, 0.0f));
  VF_STEP(d, "q_rope", p->rope(c, NULL, L->q, L->pos, T, HQ, HQ * HD, HD, HD, (float)THETA));
  VF_STEP(d, "k_rope", p->rope(c, NULL, L->k, L->pos, T, HKV, HKV * HD, HD, HD, (float)THETA));
  size_t row = sizeof(float) * HKV * HD;
  VF_STEP(d, "kv_store k", p->memcpy_d2d(c, NULL, (char *)L->kc + row * pos0, L->k, row * T));
  VF_STEP(d, "kv_store v", p->memcpy_d2d(c, NULL, (char *)L->vc + row * pos0, L->v, row * T));
  VF_STEP(d, "attention", p->attention(c, NULL, L->at, L->q, L->kc, L->vc, MI_DTYPE_F32, T, HQ,
                                       HKV, HD, pos0, (float)(1.0 / sqrt((double)HD))));
  VF_STEP(d, "o_proj", p->matmul(c, NULL, L->o, L->at, w[W_O], wt, T, H, HQ * HD));
  VF_STEP(d, "attn_residual", p->add(c, NULL, L->h, L->x, L->o, (int64_t)T * H));
  VF_STEP(d, "mlp_norm", p->rmsnorm(c, NULL, L->m, L->h, w[W_POST_NORM], T, H, (float)EPS, 0.0f));
  VF_STEP(d, "gate_proj", p->matmul(c, NULL, L->g, L->m, w[W_GATE], wt, T, FF, H));
  VF_STEP(d, "up_proj", p->matmul(c, NULL, L->u, L->m, w[W_UP], wt, T, FF, H));
  VF_STEP(d, "swiglu", p->silu_mul(c, NULL, L->g, L->g, L->u, (int64_t)T * FF));
  VF_STEP(d, "down_proj", p->matmul(c, NULL, L->o, L->g, w[W_DOWN], wt, T, H, FF));
  VF_STEP(d, "mlp_residual", p->add(c, NULL, L->h, L->h, L->o, (int64_t)T * H));
  if (p->stream_sync) VF_STEP(d, "stream_sync", p->stream_sync(c, NULL));
  VF_STEP(d, "download", p->memcpy_d2h(c, NULL, out, L->h, sizeof(float) * T * H));
  return 0;
}

static const vf_layer_driver layer = {
    .shape = "H=64 Hq=4 Hkv=2 head_dim=24 ffn=96",
    .hidden = H,
    .t_max = TMAX,
    .n_ctx = NCTX,
    .n_weights = W_COUNT,
    .weights = wspec,
    .needs = layer_needs,
    .dev_new = dev_new,
    .dev_run = dev_run,
    .dev_free = dev_free,
    .ref_new = ref_new,
    .ref_run = ref_run,
    .ref_free = ref_free,
};

/* ---------- the whole model in float64 ---------- */

typedef struct ref_model {
  int H, L, nh, nkv, hd, F, V, tied;
  double eps, theta;
  const struct mi_weights *w;
} ref_model;

static int model_open(const json_t *cfg, const struct mi_weights *w, void **out, char *err,
                      size_t err_len) {
  ref_model *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, err_len, "reference: out of memory");
    return -1;
  }
  const char *ints[] = {"hidden_size",         "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim",          "intermediate_size",
                        "vocab_size"};
  int *dst[] = {&m->H, &m->L, &m->nh, &m->nkv, &m->hd, &m->F, &m->V};
  for (int i = 0; i < 7; i++) {
    json_t *v = json_object_get(cfg, ints[i]);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24)) {
      snprintf(err, err_len, "config.json: \"%s\" is missing or not a positive integer", ints[i]);
      free(m);
      return -1;
    }
    *dst[i] = (int)json_integer_value(v);
  }
  if (m->nh % m->nkv || m->hd % 2) {
    snprintf(err, err_len,
             "config.json: heads %d / kv heads %d / head_dim %d do not fit GQA + RoPE", m->nh,
             m->nkv, m->hd);
    free(m);
    return -1;
  }
  m->tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
  json_t *e = json_object_get(cfg, "rms_norm_eps"), *t = json_object_get(cfg, "rope_theta");
  m->eps = json_is_number(e) ? json_number_value(e) : 1e-6;
  m->theta = json_is_number(t) ? json_number_value(t) : 1e6;
  m->w = w;
  *out = m;
  return 0;
}

static void model_close(void *m) { free(m); }

static double *model_forward(void *ref, const int32_t *ids, int T, int n_out, double *max_score,
                             char *err, size_t err_len) {
  const ref_model *m = ref;
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
  double *logits = NULL, *nw = NULL, *lm = NULL;
  double *emb = vf_weight_f64(m->w, "model.embed_tokens.weight", (size_t)V * H, err, err_len);
  double *x = malloc((size_t)T * H * sizeof(double));       /* [T, H] residual stream */
  double *h = malloc((size_t)T * H * sizeof(double));       /* [T, H] normed */
  double *o = malloc((size_t)T * H * sizeof(double));       /* [T, H] a block's output */
  double *q = malloc((size_t)T * nh * hd * sizeof(double)); /* [T, nh, hd] */
  double *k = malloc((size_t)T * nkv * hd * sizeof(double)); /* [T, nkv, hd] */
  double *v = malloc((size_t)T * nkv * hd * sizeof(double)); /* [T, nkv, hd] */
  double *at = malloc((size_t)T * nh * hd * sizeof(double)); /* [T, nh, hd] */
  double *g = malloc((size_t)T * F * sizeof(double));       /* [T, F] */
  double *u = malloc((size_t)T * F * sizeof(double));       /* [T, F] */
  double *pos = malloc((size_t)T * sizeof(double));         /* [T] */
  if (!emb || !x || !h || !o || !q || !k || !v || !at || !g || !u || !pos) {
    if (emb) snprintf(err, err_len, "reference: out of memory");
    goto done;
  }
  for (int t = 0; t < T; t++) {
    memcpy(x + (size_t)t * H, emb + (size_t)ids[t] * H, (size_t)H * sizeof(double));
    pos[t] = t;
  }
  static const char *const nm[11] = {
      "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
      "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
      "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight",
      "mlp.up_proj.weight", "mlp.down_proj.weight"};
  const size_t sz[11] = {(size_t)H,           (size_t)H,           (size_t)nh * hd * H,
                         (size_t)nkv * hd * H, (size_t)nkv * hd * H, (size_t)H * nh * hd,
                         (size_t)hd,          (size_t)hd,          (size_t)F * H,
                         (size_t)F * H,       (size_t)H * F};
  char name[256];
  for (int l = 0; l < m->L; l++) {
    double *W[11] = {0};
    int ok = 1;
    for (int i = 0; i < 11 && ok; i++) {
      snprintf(name, sizeof name, "model.layers.%d.%s", l, nm[i]);
      ok = (W[i] = vf_weight_f64(m->w, name, sz[i], err, err_len)) != NULL;
    }
    if (ok) {
      vf_f64_rmsnorm(h, x, W[0], T, H, m->eps, 0);
      vf_f64_matmul(q, h, W[2], T, nh * hd, H);
      vf_f64_matmul(k, h, W[3], T, nkv * hd, H);
      vf_f64_matmul(v, h, W[4], T, nkv * hd, H);
      vf_f64_rmsnorm(q, q, W[6], (int64_t)T * nh, hd, m->eps, 0);
      vf_f64_rmsnorm(k, k, W[7], (int64_t)T * nkv, hd, m->eps, 0);
      vf_f64_rope(q, pos, T, nh, (int64_t)nh * hd, hd, hd, m->theta);
      vf_f64_rope(k, pos, T, nkv, (int64_t)nkv * hd, hd, hd, m->theta);
      vf_ref_round_kv(k, (int64_t)T * nkv * hd); /* stored in the cache: rounded when it is half precision */
      vf_ref_round_kv(v, (int64_t)T * nkv * hd);
      ok = vf_f64_attention(at, q, k, v, T, nh, nkv, hd, 0, 1.0 / sqrt((double)hd), max_score) == 0;
      if (!ok) snprintf(err, err_len, "reference: out of memory");
    }
    if (ok) {
      vf_f64_matmul(o, at, W[5], T, H, nh * hd);
      vf_f64_add(x, x, o, (int64_t)T * H);
      vf_f64_rmsnorm(h, x, W[1], T, H, m->eps, 0);
      vf_f64_matmul(g, h, W[8], T, F, H);
      vf_f64_matmul(u, h, W[9], T, F, H);
      vf_f64_silu_mul(g, g, u, (int64_t)T * F);
      vf_f64_matmul(o, g, W[10], T, H, F);
      vf_f64_add(x, x, o, (int64_t)T * H);
    }
    for (int i = 0; i < 11; i++) free(W[i]);
    if (!ok) goto done;
  }
  nw = vf_weight_f64(m->w, "model.norm.weight", (size_t)H, err, err_len);
  lm = !nw ? NULL : m->tied ? emb : vf_weight_f64(m->w, "lm_head.weight", (size_t)V * H, err, err_len);
  logits = nw && lm ? malloc((size_t)n_out * V * sizeof(double)) : NULL; /* [n_out, V] */
  if (nw && lm && !logits) snprintf(err, err_len, "reference: out of memory");
  if (logits) {
    const double *last = x + (size_t)(T - n_out) * H; /* the n_out rows asked for */
    vf_f64_rmsnorm(h, last, nw, n_out, H, m->eps, 0);
    vf_f64_matmul(logits, h, lm, n_out, V, H);
  }
  if (lm != emb) free(lm);
  free(nw);
done:
  free(emb);
  free(x);
  free(h);
  free(o);
  free(q);
  free(k);
  free(v);
  free(at);
  free(g);
  free(u);
  free(pos);
  return logits;
}

static const char *const architectures[] = {"Qwen3ForCausalLM", NULL};

const vf_model_driver vf_model_qwen3 = {
    .contract = "model.qwen3",
    .architectures = architectures,
    .layer = &layer,
    .ref_open = model_open,
    .ref_forward = model_forward,
    .ref_close = model_close,
};
