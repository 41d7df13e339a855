/* Stage 2 of model contract model.qwen35 (the Qwen3.5/3.6-style hybrid):
 * one layer driver per layer kind, each composed from the platform's
 * kernels the way the contract's layer_kinds sequence describes it, and its
 * float64 twin on the same (dtype-rounded) weights (every operator from
 * ref/f64.c, the model-level math in models/qwen35.c):
 *   - full_attention: (1+w) norms, q_proj carrying a per-head gate split by
 *     copy2d, (1+w) q/k norms, NeoX rotary on the first rot channels only,
 *     GQA attention through a KV cache, output · sigmoid(gate), o_proj;
 *   - linear_attention: in_proj_qkv, the causal conv1d with its carried
 *     state and SiLU, copy2d splits, l2-normed q and k, q · 1/√Dk, the
 *     gates, the gated delta rule with its carried state, the gated RMSNorm
 *     and out_proj.
 * Both end with the SwiGLU MLP. Stage 2's phases (a 5-token prefill, then two
 * single-token steps through the same state) exercise the carried conv and
 * recurrent state: a composition that drops either fails the decode phases.
 * The shapes are small and deliberately unlike the tiny checkpoint's
 * (Vh = 2·Kh: value heads read repeated key heads; rot < head_dim). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/driver.h"
#include "core/verify/ref/f64.h"

enum { H = 64, FF = 96, NCTX = 16, TMAX = 5 };
/* full attention: GQA 4/2, head_dim 32, rotary on 8 channels (factor 0.25) */
enum { HQ = 4, HKV = 2, HD = 32, ROT = 8 };
/* gated DeltaNet: 2 key heads, 4 value heads, Dk = Dv = 16, conv kernel 4 */
enum { KH = 2, VH = 4, DK = 16, DV = 16, KC = 4, KD = KH * DK, VD = VH * DV, C = 2 * KD + VD };
#define EPS 1e-6
#define L2_EPS 1e-6
#define THETA 1e7

static double f_(double v) { return (double)(float)v; } /* what a kernel's float argument holds */

/* ====================== full_attention ====================== */

enum { F_IN_NORM, F_Q, F_K, F_V, F_O, F_QN, F_KN, F_POST_NORM, F_GATE, F_UP, F_DOWN, F_COUNT };
static const vf_layer_weight fspec[F_COUNT] = {
    {"input_layernorm", H, 1, VF_W_NORM_ZERO},
    {"q_proj", 2 * HQ * HD, H, VF_W_MATRIX}, /* per head: HD query rows, then HD gate rows */
    {"k_proj", HKV * HD, H, VF_W_MATRIX},
    {"v_proj", HKV * HD, H, VF_W_MATRIX},
    {"o_proj", H, HQ * HD, VF_W_MATRIX},
    {"q_norm", HD, 1, VF_W_NORM_ZERO},
    {"k_norm", HD, 1, VF_W_NORM_ZERO},
    {"post_attention_layernorm", H, 1, VF_W_NORM_ZERO},
    {"gate_proj", FF, H, VF_W_MATRIX},
    {"up_proj", FF, H, VF_W_MATRIX},
    {"down_proj", H, FF, VF_W_MATRIX},
};
static const char *const full_needs[] = {"matmul", "rmsnorm", "rope", "attention", "silu_mul", "add",
                                         "copy2d", "sigmoid_mul", NULL};

/* the MLP half of both kinds: out = h + down(silu(gate(m)) · up(m)), m = norm₁₊w(h) */
static void ref_mlp(const double *h, const double *nw, const double *wg, const double *wu, const double *wd,
                    double *out, int T) {
  double m[TMAX * H], g[TMAX * FF], u[TMAX * FF], o[TMAX * H];
  vf_f64_rmsnorm(m, h, nw, T, H, f_(EPS), 1);
  vf_f64_matmul(g, m, wg, T, FF, H);
  vf_f64_matmul(u, m, wu, T, FF, H);
  vf_f64_silu_mul(g, g, u, (int64_t)T * FF);
  vf_f64_matmul(o, g, wd, T, H, FF);
  vf_f64_add(out, h, o, (int64_t)T * H);
}

typedef struct ref_full {
  double kc[NCTX * HKV * HD], vc[NCTX * HKV * HD]; /* [NCTX, HKV, HD] */
} ref_full;

static void *ref_full_new(void) { return calloc(1, sizeof(ref_full)); }
static void ref_free(void *st) { free(st); }

static int ref_full_run(void *state, double *const *w, const double *x, double *out, int T, int pos0) {
  ref_full *st = state;
  double a[TMAX * H], qg[TMAX * 2 * HQ * HD], q[TMAX * HQ * HD], gate[TMAX * HQ * HD]; /* [T, ...] */
  double k[TMAX * HKV * HD], v[TMAX * HKV * HD], at[TMAX * HQ * HD], o[TMAX * H], h[TMAX * H], pos[TMAX];
  for (int t = 0; t < T; t++) pos[t] = pos0 + t;
  vf_f64_rmsnorm(a, x, w[F_IN_NORM], T, H, f_(EPS), 1);
  vf_f64_matmul(qg, a, w[F_Q], T, 2 * HQ * HD, H);
  for (int r = 0; r < T * HQ; r++) {
    memcpy(q + r * HD, qg + r * 2 * HD, HD * sizeof(double));
    memcpy(gate + r * HD, qg + r * 2 * HD + HD, HD * sizeof(double));
  }
  vf_f64_matmul(k, a, w[F_K], T, HKV * HD, H);
  vf_f64_matmul(v, a, w[F_V], T, HKV * HD, H);
  vf_f64_rmsnorm(q, q, w[F_QN], (int64_t)T * HQ, HD, f_(EPS), 1);
  vf_f64_rmsnorm(k, k, w[F_KN], (int64_t)T * HKV, HD, f_(EPS), 1);
  vf_f64_rope(q, pos, T, HQ, HQ * HD, HD, ROT, f_(THETA));
  vf_f64_rope(k, pos, T, HKV, HKV * HD, HD, ROT, f_(THETA));
  memcpy(st->kc + pos0 * HKV * HD, k, sizeof(double) * T * HKV * HD);
  memcpy(st->vc + pos0 * HKV * HD, v, sizeof(double) * T * HKV * HD);
  if (vf_f64_attention(at, q, st->kc, st->vc, T, HQ, HKV, HD, pos0, f_(1.0 / sqrt((double)HD)), NULL) != 0)
    return -1;
  vf_f64_sigmoid_mul(at, at, gate, (int64_t)T * HQ * HD);
  vf_f64_matmul(o, at, w[F_O], T, H, HQ * HD);
  vf_f64_add(h, x, o, (int64_t)T * H);
  ref_mlp(h, w[F_POST_NORM], w[F_GATE], w[F_UP], w[F_DOWN], out, T);
  return 0;
}

typedef struct dev_full {
  void *const *w;                /* [F_COUNT] device weights */
  float *x, *a, *h, *o, *m;      /* [TMAX, H] */
  float *qg;                     /* [TMAX, HQ, 2 HD] */
  float *q, *gate, *at;          /* [TMAX, HQ, HD] */
  float *g, *u;                  /* [TMAX, FF] */
  float *kc, *vc;                /* [NCTX, HKV, HD]: k_proj and v_proj write their rows directly */
  int32_t *pos;                  /* [TMAX] */
} dev_full;

static void *dev_full_new(vf_dev *d, void *const *w) {
  dev_full *L = calloc(1, sizeof *L);
  if (!L) return NULL;
  L->w = w;
  float **acts[] = {&L->x, &L->a, &L->h, &L->o, &L->m, &L->qg, &L->q, &L->gate, &L->at, &L->g, &L->u};
  size_t sizes[] = {H, H, H, H, H, 2 * HQ * HD, HQ * HD, HQ * HD, HQ * HD, FF, FF};
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

/* the MLP half on the device: h -> h + mlp(h), in place */
static int dev_mlp(vf_dev *d, mi_dtype wt, float *h, float *m, float *g, float *u, float *o, void *nw, void *wg,
                   void *wu, void *wd, int T) {
  const mi_platform_iface *p = d->pi;
  void *c = d->ctx;
  VF_STEP(d, "mlp_norm", p->rmsnorm(c, NULL, m, h, nw, T, H, (float)EPS, 1.0f));
  VF_STEP(d, "gate_proj", p->matmul(c, NULL, g, m, wg, wt, T, FF, H));
  VF_STEP(d, "up_proj", p->matmul(c, NULL, u, m, wu, wt, T, FF, H));
  VF_STEP(d, "swiglu", p->silu_mul(c, NULL, g, g, u, (int64_t)T * FF));
  VF_STEP(d, "down_proj", p->matmul(c, NULL, o, g, wd, wt, T, H, FF));
  VF_STEP(d, "mlp_residual", p->add(c, NULL, h, h, o, (int64_t)T * H));
  return 0;
}

static int dev_full_run(vf_dev *d, void *state, mi_dtype wt, const float *x, int T, int pos0, float *out) {
  dev_full *L = state;
  const mi_platform_iface *p = d->pi;
  void *c = d->ctx;
  void *const *w = L->w;
  int32_t pos[TMAX];
  for (int t = 0; t < T; t++) pos[t] = pos0 + t;
  float *kc = L->kc + (size_t)pos0 * HKV * HD, *vc = L->vc + (size_t)pos0 * HKV * HD;
  VF_STEP(d, "upload x", p->memcpy_h2d(c, NULL, L->x, x, sizeof(float) * T * H));
  VF_STEP(d, "upload pos", p->memcpy_h2d(c, NULL, L->pos, pos, sizeof(int32_t) * T));
  VF_STEP(d, "attn_norm", p->rmsnorm(c, NULL, L->a, L->x, w[F_IN_NORM], T, H, (float)EPS, 1.0f));
  VF_STEP(d, "q_proj", p->matmul(c, NULL, L->qg, L->a, w[F_Q], wt, T, 2 * HQ * HD, H));
  VF_STEP(d, "q_split", p->copy2d(c, NULL, L->q, HD, L->qg, 2 * HD, (int64_t)T * HQ, HD));
  VF_STEP(d, "gate_split", p->copy2d(c, NULL, L->gate, HD, L->qg + HD, 2 * HD, (int64_t)T * HQ, HD));
  VF_STEP(d, "k_proj", p->matmul(c, NULL, kc, L->a, w[F_K], wt, T, HKV * HD, H));
  VF_STEP(d, "v_proj", p->matmul(c, NULL, vc, L->a, w[F_V], wt, T, HKV * HD, H));
  VF_STEP(d, "q_norm", p->rmsnorm(c, NULL, L->q, L->q, w[F_QN], (int64_t)T * HQ, HD, (float)EPS, 1.0f));
  VF_STEP(d, "k_norm", p->rmsnorm(c, NULL, kc, kc, w[F_KN], (int64_t)T * HKV, HD, (float)EPS, 1.0f));
  VF_STEP(d, "q_rope", p->rope(c, NULL, L->q, L->pos, T, HQ, HQ * HD, HD, ROT, (float)THETA));
  VF_STEP(d, "k_rope", p->rope(c, NULL, kc, L->pos, T, HKV, HKV * HD, HD, ROT, (float)THETA));
  VF_STEP(d, "attention", p->attention(c, NULL, L->at, L->q, L->kc, L->vc, MI_DTYPE_F32, T, HQ, HKV, HD, pos0,
                                       (float)(1.0 / sqrt((double)HD))));
  VF_STEP(d, "output_gate", p->sigmoid_mul(c, NULL, L->at, L->at, L->gate, (int64_t)T * HQ * HD));
  VF_STEP(d, "o_proj", p->matmul(c, NULL, L->o, L->at, w[F_O], wt, T, H, HQ * HD));
  VF_STEP(d, "attn_residual", p->add(c, NULL, L->h, L->x, L->o, (int64_t)T * H));
  if (dev_mlp(d, wt, L->h, L->m, L->g, L->u, L->o, w[F_POST_NORM], w[F_GATE], w[F_UP], w[F_DOWN], T)) return -1;
  if (p->stream_sync) VF_STEP(d, "stream_sync", p->stream_sync(c, NULL));
  VF_STEP(d, "download", p->memcpy_d2h(c, NULL, out, L->h, sizeof(float) * T * H));
  return 0;
}

const vf_layer_driver vf_qwen35_layer_full = {
    .shape = "full_attention: H=64 Hq=4 Hkv=2 head_dim=32 rot=8 ffn=96, (1+w) norms, output gate",
    .hidden = H,
    .t_max = TMAX,
    .n_ctx = NCTX,
    .n_weights = F_COUNT,
    .weights = fspec,
    .needs = full_needs,
    .dev_new = dev_full_new,
    .dev_run = dev_full_run,
    .dev_free = dev_free,
    .ref_new = ref_full_new,
    .ref_run = ref_full_run,
    .ref_free = ref_free,
};

/* ====================== linear_attention ====================== */

enum {
  D_IN_NORM, D_QKV, D_Z, D_B, D_A, D_CONV, D_DT_BIAS, D_A_LOG, D_NORM, D_OUT,
  D_POST_NORM, D_GATE, D_UP, D_DOWN, D_COUNT
};
static const vf_layer_weight dspec[D_COUNT] = {
    {"input_layernorm", H, 1, VF_W_NORM_ZERO},
    {"in_proj_qkv", C, H, VF_W_MATRIX}, /* rows q [KD], k [KD], v [VD] */
    {"in_proj_z", VD, H, VF_W_MATRIX},
    {"in_proj_b", VH, H, VF_W_MATRIX},
    {"in_proj_a", VH, H, VF_W_MATRIX},
    {"conv1d", C, KC, VF_W_F32},        /* [C, 1, K] = [C, K], kept in f32 like the engine's vectors */
    {"dt_bias", VH, 1, VF_W_NORM_ONE},
    {"A_log", VH, 1, VF_W_NORM_ZERO},
    {"norm", DV, 1, VF_W_NORM_ONE},     /* the gated norm multiplies by w itself */
    {"out_proj", H, VD, VF_W_MATRIX},
    {"post_attention_layernorm", H, 1, VF_W_NORM_ZERO},
    {"gate_proj", FF, H, VF_W_MATRIX},
    {"up_proj", FF, H, VF_W_MATRIX},
    {"down_proj", H, FF, VF_W_MATRIX},
};
static const char *const linear_needs[] = {"matmul", "rmsnorm", "silu_mul", "add", "scale", "copy2d", "l2norm",
                                           "conv1d_causal", "deltanet_gates", "gated_delta_rule",
                                           "rmsnorm_gated", NULL};

typedef struct ref_lin {
  double conv[(KC - 1) * C]; /* [K-1, C] */
  double S[VH * DK * DV];    /* [VH, DK, DV] */
} ref_lin;

static void *ref_lin_new(void) { return calloc(1, sizeof(ref_lin)); }

static int ref_lin_run(void *state, double *const *w, const double *x, double *out, int T, int pos0) {
  (void)pos0; /* the state, not the position, carries the past */
  ref_lin *st = state;
  double a[TMAX * H], qkv[TMAX * C], cv[TMAX * C], q[TMAX * KD], k[TMAX * KD], v[TMAX * VD]; /* [T, ...] */
  double z[TMAX * VD], b[TMAX * VH], ga[TMAX * VH], g[TMAX * VH], beta[TMAX * VH], core[TMAX * VD];
  double o[TMAX * H], h[TMAX * H];
  vf_f64_rmsnorm(a, x, w[D_IN_NORM], T, H, f_(EPS), 1);
  vf_f64_matmul(qkv, a, w[D_QKV], T, C, H);
  if (vf_f64_conv1d_causal(cv, qkv, w[D_CONV], st->conv, T, C, KC) != 0) return -1;
  vf_f64_silu(cv, cv, (int64_t)T * C);
  for (int t = 0; t < T; t++) {
    memcpy(q + t * KD, cv + t * C, KD * sizeof(double));
    memcpy(k + t * KD, cv + t * C + KD, KD * sizeof(double));
    memcpy(v + t * VD, cv + t * C + 2 * KD, VD * sizeof(double));
  }
  vf_f64_l2norm(q, q, (int64_t)T * KH, DK, f_(L2_EPS));
  vf_f64_l2norm(k, k, (int64_t)T * KH, DK, f_(L2_EPS));
  for (int i = 0; i < T * KD; i++) q[i] *= f_(1.0 / sqrt((double)DK));
  vf_f64_matmul(z, a, w[D_Z], T, VD, H);
  vf_f64_matmul(b, a, w[D_B], T, VH, H);
  vf_f64_matmul(ga, a, w[D_A], T, VH, H);
  vf_f64_deltanet_gates(g, beta, ga, b, w[D_A_LOG], w[D_DT_BIAS], T, VH);
  if (vf_f64_gated_delta_rule(core, st->S, q, k, v, g, beta, T, KH, VH, DK, DV) != 0) return -1;
  vf_f64_rmsnorm_gated(core, core, w[D_NORM], z, (int64_t)T * VH, DV, f_(EPS));
  vf_f64_matmul(o, core, w[D_OUT], T, H, VD);
  vf_f64_add(h, x, o, (int64_t)T * H);
  ref_mlp(h, w[D_POST_NORM], w[D_GATE], w[D_UP], w[D_DOWN], out, T);
  return 0;
}

typedef struct dev_lin {
  void *const *w;                  /* [D_COUNT] device weights */
  float *x, *a, *h, *o, *m;        /* [TMAX, H] */
  float *qkv, *cv;                 /* [TMAX, C] */
  float *q, *k;                    /* [TMAX, KH, DK] */
  float *v, *z, *core;             /* [TMAX, VH, DV] */
  float *b, *ga, *g, *beta;        /* [TMAX, VH] */
  float *gm, *u;                   /* [TMAX, FF] */
  float *conv, *S;                 /* [K-1, C], [VH, DK, DV]: carried across calls */
} dev_lin;

static void *dev_lin_new(vf_dev *d, void *const *w) {
  dev_lin *L = calloc(1, sizeof *L);
  if (!L) return NULL;
  L->w = w;
  float **acts[] = {&L->x, &L->a, &L->h, &L->o, &L->m, &L->qkv, &L->cv, &L->q, &L->k, &L->v, &L->z,
                    &L->core, &L->b, &L->ga, &L->g, &L->beta, &L->gm, &L->u};
  size_t sizes[] = {H, H, H, H, H, C, C, KD, KD, VD, VD, VD, VH, VH, VH, VH, FF, FF};
  int ok = 1;
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
    ok &= (*acts[k] = vf_dev_alloc(d, sizeof(float) * TMAX * sizes[k])) != NULL;
  ok &= (L->conv = vf_dev_alloc(d, sizeof(float) * (KC - 1) * C)) != NULL; /* zeroed: a new sequence */
  ok &= (L->S = vf_dev_alloc(d, sizeof(float) * VH * DK * DV)) != NULL;
  if (!ok) {
    free(L);
    return NULL;
  }
  return L;
}

static int dev_lin_run(vf_dev *d, void *state, mi_dtype wt, const float *x, int T, int pos0, float *out) {
  (void)pos0;
  dev_lin *L = state;
  const mi_platform_iface *p = d->pi;
  void *c = d->ctx;
  void *const *w = L->w;
  VF_STEP(d, "upload x", p->memcpy_h2d(c, NULL, L->x, x, sizeof(float) * T * H));
  VF_STEP(d, "attn_norm", p->rmsnorm(c, NULL, L->a, L->x, w[D_IN_NORM], T, H, (float)EPS, 1.0f));
  VF_STEP(d, "in_proj_qkv", p->matmul(c, NULL, L->qkv, L->a, w[D_QKV], wt, T, C, H));
  VF_STEP(d, "conv", p->conv1d_causal(c, NULL, L->cv, L->qkv, w[D_CONV], L->conv, T, C, KC, 1));
  VF_STEP(d, "q_split", p->copy2d(c, NULL, L->q, KD, L->cv, C, T, KD));
  VF_STEP(d, "k_split", p->copy2d(c, NULL, L->k, KD, L->cv + KD, C, T, KD));
  VF_STEP(d, "v_split", p->copy2d(c, NULL, L->v, VD, L->cv + 2 * KD, C, T, VD));
  VF_STEP(d, "q_l2norm", p->l2norm(c, NULL, L->q, L->q, (int64_t)T * KH, DK, (float)L2_EPS));
  VF_STEP(d, "k_l2norm", p->l2norm(c, NULL, L->k, L->k, (int64_t)T * KH, DK, (float)L2_EPS));
  VF_STEP(d, "q_scale", p->scale(c, NULL, L->q, L->q, (float)(1.0 / sqrt((double)DK)), (int64_t)T * KD));
  VF_STEP(d, "in_proj_z", p->matmul(c, NULL, L->z, L->a, w[D_Z], wt, T, VD, H));
  VF_STEP(d, "in_proj_b", p->matmul(c, NULL, L->b, L->a, w[D_B], wt, T, VH, H));
  VF_STEP(d, "in_proj_a", p->matmul(c, NULL, L->ga, L->a, w[D_A], wt, T, VH, H));
  VF_STEP(d, "gates", p->deltanet_gates(c, NULL, L->beta, L->g, L->b, L->ga, w[D_A_LOG], w[D_DT_BIAS], T, VH));
  VF_STEP(d, "delta_rule",
          p->gated_delta_rule(c, NULL, L->core, L->q, L->k, L->v, L->g, L->beta, L->S, T, KH, VH, DK, DV));
  VF_STEP(d, "out_norm", p->rmsnorm_gated(c, NULL, L->core, L->core, w[D_NORM], L->z, (int64_t)T * VH, DV,
                                          (float)EPS));
  VF_STEP(d, "out_proj", p->matmul(c, NULL, L->o, L->core, w[D_OUT], wt, T, H, VD));
  VF_STEP(d, "attn_residual", p->add(c, NULL, L->h, L->x, L->o, (int64_t)T * H));
  if (dev_mlp(d, wt, L->h, L->m, L->gm, L->u, L->o, w[D_POST_NORM], w[D_GATE], w[D_UP], w[D_DOWN], T)) return -1;
  if (p->stream_sync) VF_STEP(d, "stream_sync", p->stream_sync(c, NULL));
  VF_STEP(d, "download", p->memcpy_d2h(c, NULL, out, L->h, sizeof(float) * T * H));
  return 0;
}

const vf_layer_driver vf_qwen35_layer_linear = {
    .shape = "linear_attention: H=64 key heads 2 value heads 4 Dk=Dv=16 conv 4 ffn=96, carried conv and "
             "recurrent state",
    .hidden = H,
    .t_max = TMAX,
    .n_ctx = NCTX,
    .n_weights = D_COUNT,
    .weights = dspec,
    .needs = linear_needs,
    .dev_new = dev_lin_new,
    .dev_run = dev_lin_run,
    .dev_free = dev_free,
    .ref_new = ref_lin_new,
    .ref_run = ref_lin_run,
    .ref_free = ref_free,
};
