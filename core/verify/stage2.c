/* Stage 2 of the verifier: one decoder layer with random weights, composed
 * from the platform's kernels the way the model contract's layer_sequence
 * describes it (model.qwen3: pre-norm GQA attention with per-head q/k norms
 * and NeoX RoPE, SwiGLU MLP), run as a prefill and then two decode steps
 * through the same KV cache, against a float64 reference of the layer on
 * the same (dtype-rounded) weights. It catches what single kernels cannot:
 * in-place use, strides between kernels, the KV cache layout and the copies
 * that fill it (memcpy_d2d), positions across calls.
 *
 * The composition is C (one driver per model contract): the contract's
 * layer_sequence is what it follows, and the test contract's tolerance is
 * what it is held to. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "core/verify/verify.h"

/* A small Qwen3-shaped layer: GQA 4/2, head_dim its own size (not H/Hq). */
enum { H = 64, HQ = 4, HKV = 2, HD = 24, FF = 96, NCTX = 16, TMAX = 5 };
#define EPS 1e-6
#define THETA 1e6

enum { W_IN_NORM, W_Q, W_K, W_V, W_O, W_QN, W_KN, W_POST_NORM, W_GATE, W_UP, W_DOWN, W_COUNT };
static const struct {
  const char *name;
  int rows, cols, norm;
} wspec[W_COUNT] = {
    {"input_layernorm", H, 1, 1},  {"q_proj", HQ * HD, H, 0},   {"k_proj", HKV * HD, H, 0},
    {"v_proj", HKV * HD, H, 0},    {"o_proj", H, HQ * HD, 0},   {"q_norm", HD, 1, 1},
    {"k_norm", HD, 1, 1},          {"post_attention_layernorm", H, 1, 1},
    {"gate_proj", FF, H, 0},       {"up_proj", FF, H, 0},       {"down_proj", H, FF, 0},
};

/* ---------- seeded numbers (as in stage 1, own stream) ---------- */

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double normal(uint64_t *s) {
  double u1 = (double)(mix(s) >> 11) * 0x1.0p-53, u2 = (double)(mix(s) >> 11) * 0x1.0p-53;
  return sqrt(-2.0 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(2.0 * M_PI * u2);
}
static double round_dt(mi_dtype t, double v) {
  if (t == MI_DTYPE_BF16) return mi_bf16_to_f32(mi_f32_to_bf16((float)v));
  if (t == MI_DTYPE_F16) return mi_f16_to_f32(mi_f32_to_f16((float)v));
  return (float)v;
}

/* ---------- the float64 reference layer ---------- */

typedef struct ref_state {
  double kc[NCTX * HKV * HD], vc[NCTX * HKV * HD];
} ref_state;

static void r_rmsnorm(double *y, const double *x, const double *w, int rows, int dim) {
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int i = 0; i < dim; i++) ss += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss / dim + (double)(float)EPS);
    for (int i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i] * inv * w[i];
  }
}
static void r_matmul(double *y, const double *x, const double *w, int M, int N, int K) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
}
static void r_rope(double *x, int T, int nh, int pos0) {
  for (int t = 0; t < T; t++)
    for (int h = 0; h < nh; h++) {
      double *v = x + (t * nh + h) * HD;
      for (int i = 0; i < HD / 2; i++) {
        double a = (pos0 + t) * pow((double)(float)THETA, -2.0 * i / HD);
        double x0 = v[i], x1 = v[i + HD / 2];
        v[i] = x0 * cos(a) - x1 * sin(a);
        v[i + HD / 2] = x1 * cos(a) + x0 * sin(a);
      }
    }
}

static void ref_layer(double *const *w, ref_state *st, const double *x, double *out, int T,
                      int pos0) {
  static double a[TMAX * H], q[TMAX * HQ * HD], k[TMAX * HKV * HD], v[TMAX * HKV * HD],
      at[TMAX * HQ * HD], o[TMAX * H], h[TMAX * H], m[TMAX * H], g[TMAX * FF], u[TMAX * FF];
  r_rmsnorm(a, x, w[W_IN_NORM], T, H);
  r_matmul(q, a, w[W_Q], T, HQ * HD, H);
  r_matmul(k, a, w[W_K], T, HKV * HD, H);
  r_matmul(v, a, w[W_V], T, HKV * HD, H);
  r_rmsnorm(q, q, w[W_QN], T * HQ, HD);
  r_rmsnorm(k, k, w[W_KN], T * HKV, HD);
  r_rope(q, T, HQ, pos0);
  r_rope(k, T, HKV, pos0);
  memcpy(st->kc + pos0 * HKV * HD, k, sizeof(double) * T * HKV * HD);
  memcpy(st->vc + pos0 * HKV * HD, v, sizeof(double) * T * HKV * HD);
  double scale = (double)(float)(1.0 / sqrt((double)HD));
  for (int t = 0; t < T; t++)
    for (int hq = 0; hq < HQ; hq++) {
      int g0 = hq / (HQ / HKV), L = pos0 + t + 1;
      double s[NCTX], mx = -INFINITY, sum = 0;
      for (int j = 0; j < L; j++) {
        double d = 0;
        for (int e = 0; e < HD; e++) d += q[(t * HQ + hq) * HD + e] * st->kc[(j * HKV + g0) * HD + e];
        s[j] = d * scale;
        if (s[j] > mx) mx = s[j];
      }
      for (int j = 0; j < L; j++) sum += (s[j] = exp(s[j] - mx));
      for (int e = 0; e < HD; e++) {
        double acc = 0;
        for (int j = 0; j < L; j++) acc += s[j] * st->vc[(j * HKV + g0) * HD + e];
        at[(t * HQ + hq) * HD + e] = acc / sum;
      }
    }
  r_matmul(o, at, w[W_O], T, H, HQ * HD);
  for (int i = 0; i < T * H; i++) h[i] = x[i] + o[i];
  r_rmsnorm(m, h, w[W_POST_NORM], T, H);
  r_matmul(g, m, w[W_GATE], T, FF, H);
  r_matmul(u, m, w[W_UP], T, FF, H);
  for (int i = 0; i < T * FF; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
  r_matmul(o, g, w[W_DOWN], T, H, FF);
  for (int i = 0; i < T * H; i++) out[i] = h[i] + o[i];
}

/* ---------- the same layer on the platform ---------- */

typedef struct dev {
  const mi_platform_iface *pi;
  void *ctx;
  mi_buffer *bufs[64];
  int n;
  char err[600];
} dev;

static void *dalloc(dev *d, size_t bytes) {
  mi_buffer *b = NULL;
  if (d->n == 64 || d->pi->buffer_alloc(d->ctx, bytes, &b) != 0 || !b) return NULL;
  d->bufs[d->n++] = b;
  return d->pi->buffer_ptr(d->ctx, b);
}

static void *upload(dev *d, const double *v, size_t n, mi_dtype t) {
  size_t es = mi_dtype_size(t);
  unsigned char *h = malloc(n * es);
  void *p = h ? dalloc(d, n * es) : NULL;
  for (size_t i = 0; p && i < n; i++) {
    if (t == MI_DTYPE_F32) ((float *)h)[i] = (float)v[i];
    else if (t == MI_DTYPE_BF16) ((uint16_t *)h)[i] = mi_f32_to_bf16((float)v[i]);
    else if (t == MI_DTYPE_F16) ((uint16_t *)h)[i] = mi_f32_to_f16((float)v[i]);
    else if (t == MI_DTYPE_I32) ((int32_t *)h)[i] = (int32_t)v[i];
  }
  if (p && d->pi->memcpy_h2d(d->ctx, NULL, p, h, n * es) != 0) p = NULL;
  free(h);
  return p;
}

/* Each step: the kernel's return code checked, the step named on failure. */
#define STEP(name, call)                                                                           \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) {                                                                                \
      snprintf(d->err, sizeof d->err, "layer: step %s returned %d (%s)", name, rc_,                \
               d->pi->last_error ? d->pi->last_error(d->ctx) : "no message");                     \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

typedef struct dev_layer {
  void *w[W_COUNT];
  float *x, *a, *q, *k, *v, *at, *o, *h, *m, *g, *u, *kc, *vc;
  int32_t *pos;
} dev_layer;

static int dev_run(dev *d, dev_layer *L, mi_dtype wt, const double *x, int T, int pos0,
                   float *out) {
  const mi_platform_iface *p = d->pi;
  void *c = d->ctx;
  double posv[TMAX];
  for (int t = 0; t < T; t++) posv[t] = pos0 + t;
  float xf[TMAX * H];
  int32_t pi32[TMAX];
  for (int i = 0; i < T * H; i++) xf[i] = (float)x[i];
  for (int t = 0; t < T; t++) pi32[t] = (int32_t)posv[t];
  STEP("upload x", p->memcpy_h2d(c, NULL, L->x, xf, sizeof(float) * T * H));
  STEP("upload pos", p->memcpy_h2d(c, NULL, L->pos, pi32, sizeof(int32_t) * T));
  STEP("attn_norm", p->rmsnorm(c, NULL, L->a, L->x, L->w[W_IN_NORM], T, H, (float)EPS, 0.0f));
  STEP("q_proj", p->matmul(c, NULL, L->q, L->a, L->w[W_Q], wt, T, HQ * HD, H));
  STEP("k_proj", p->matmul(c, NULL, L->k, L->a, L->w[W_K], wt, T, HKV * HD, H));
  STEP("v_proj", p->matmul(c, NULL, L->v, L->a, L->w[W_V], wt, T, HKV * HD, H));
  STEP("q_norm", p->rmsnorm(c, NULL, L->q, L->q, L->w[W_QN], (int64_t)T * HQ, HD, (float)EPS, 0.0f));
  STEP("k_norm", p->rmsnorm(c, NULL, L->k, L->k, L->w[W_KN], (int64_t)T * HKV, HD, (float)EPS, 0.0f));
  STEP("q_rope", p->rope(c, NULL, L->q, L->pos, T, HQ, HQ * HD, HD, HD, (float)THETA));
  STEP("k_rope", p->rope(c, NULL, L->k, L->pos, T, HKV, HKV * HD, HD, HD, (float)THETA));
  size_t row = sizeof(float) * HKV * HD;
  STEP("kv_store k", p->memcpy_d2d(c, NULL, (char *)L->kc + row * pos0, L->k, row * T));
  STEP("kv_store v", p->memcpy_d2d(c, NULL, (char *)L->vc + row * pos0, L->v, row * T));
  STEP("attention", p->attention(c, NULL, L->at, L->q, L->kc, L->vc, MI_DTYPE_F32, T, HQ, HKV, HD,
                                 pos0, (float)(1.0 / sqrt((double)HD))));
  STEP("o_proj", p->matmul(c, NULL, L->o, L->at, L->w[W_O], wt, T, H, HQ * HD));
  STEP("attn_residual", p->add(c, NULL, L->h, L->x, L->o, (int64_t)T * H));
  STEP("mlp_norm", p->rmsnorm(c, NULL, L->m, L->h, L->w[W_POST_NORM], T, H, (float)EPS, 0.0f));
  STEP("gate_proj", p->matmul(c, NULL, L->g, L->m, L->w[W_GATE], wt, T, FF, H));
  STEP("up_proj", p->matmul(c, NULL, L->u, L->m, L->w[W_UP], wt, T, FF, H));
  STEP("swiglu", p->silu_mul(c, NULL, L->g, L->g, L->u, (int64_t)T * FF));
  STEP("down_proj", p->matmul(c, NULL, L->o, L->g, L->w[W_DOWN], wt, T, H, FF));
  STEP("mlp_residual", p->add(c, NULL, L->h, L->h, L->o, (int64_t)T * H));
  if (p->stream_sync) STEP("stream_sync", p->stream_sync(c, NULL));
  STEP("download", p->memcpy_d2h(c, NULL, out, L->h, sizeof(float) * T * H));
  return 0;
}

/* ---------- the unit ----------
 * The parent draws the weights and the inputs of every phase (l2_plan)
 * before the child exists; the child uploads them, runs the layer and
 * returns only its outputs, as records (VF_REC_OUT: T*H floats); the parent
 * computes the float64 reference after the child has ended, compares and
 * decides (l2_judge). */

static const struct {
  const char *name;
  int T, pos0;
} phases[] = {{"prefill", 5, 0}, {"decode_1", 1, 5}, {"decode_2", 1, 6}};
enum { NPHASE = 3 };

typedef struct l2_set { /* one weight dtype */
  mi_dtype wt;
  char seed_hex[24];
  double *w[W_COUNT];
  double x[NPHASE][TMAX * H];
} l2_set;

typedef struct l2_job {
  const vf_stage_opts *o;
  json_t *dtypes; /* weight dtypes to run: the platform's, among f32/f16/bf16 */
  double tol;
  l2_set *sets;
  int nsets;
} l2_job;

static void l2_plan(l2_job *j) {
  j->sets = calloc(json_array_size(j->dtypes) + 1, sizeof *j->sets);
  size_t di;
  json_t *dv;
  json_array_foreach(j->dtypes, di, dv) {
    mi_dtype wt;
    if (!j->sets || vf_dtype_parse(json_string_value(dv), &wt) != 0) continue;
    l2_set *S = &j->sets[j->nsets++];
    S->wt = wt;
    uint64_t seed = vf_case_seed(j->o->seed, "model.qwen3/layer", 0, (int)di), rng = seed;
    snprintf(S->seed_hex, sizeof S->seed_hex, "0x%016llx", (unsigned long long)seed);
    for (int k = 0; k < W_COUNT; k++) {
      size_t n = (size_t)wspec[k].rows * wspec[k].cols;
      S->w[k] = malloc(n * sizeof(double));
      for (size_t i = 0; S->w[k] && i < n; i++)
        S->w[k][i] = wspec[k].norm ? (float)(1.0 + 0.1 * normal(&rng))
                                   : round_dt(wt, normal(&rng) / sqrt((double)wspec[k].cols));
    }
    for (int ph = 0; ph < NPHASE; ph++)
      for (int i = 0; i < phases[ph].T * H; i++) S->x[ph][i] = (float)normal(&rng);
  }
}

static void l2_free(l2_job *j) {
  for (int s = 0; j->sets && s < j->nsets; s++)
    for (int k = 0; k < W_COUNT; k++) free(j->sets[s].w[k]);
  free(j->sets);
}

static int layer_child(void *arg, int fd) {
  l2_job *j = arg;
  struct mi_plugin *plug = vf_load_plugin_rec(j->o, fd);
  if (!plug) return 1;
  const mi_platform_iface *pi = plug->iface;
  const char *need[] = {"matmul", "rmsnorm", "rope", "attention", "silu_mul", "add"};
  for (size_t i = 0; i < sizeof need / sizeof *need; i++)
    if (!vf_member_fn(pi, need[i]) || !pi->memcpy_d2d) {
      char msg[200];
      snprintf(msg, sizeof msg, "layer: the platform lacks %s", vf_member_fn(pi, need[i]) ? "memcpy_d2d" : need[i]);
      vf_rec_write(fd, VF_REC_ERROR, -1, 0, msg, NULL, 0);
      mi_plugin_unload(plug);
      return 1;
    }
  for (int s = 0; s < j->nsets; s++) {
    const l2_set *S = &j->sets[s];
    mi_dtype wt = S->wt;
    dev d = {pi, plug->ctx, {0}, 0, ""};
    dev_layer L;
    memset(&L, 0, sizeof L);
    int ok = 1;
    for (int k = 0; k < W_COUNT; k++) {
      size_t n = (size_t)wspec[k].rows * wspec[k].cols;
      L.w[k] = S->w[k] ? upload(&d, S->w[k], n, wspec[k].norm ? MI_DTYPE_F32 : wt) : NULL;
      ok &= L.w[k] != NULL;
    }
    float **acts[] = {&L.x, &L.a, &L.q, &L.k, &L.v, &L.at, &L.o, &L.h, &L.m, &L.g, &L.u};
    size_t sizes[] = {H, H, HQ * HD, HKV * HD, HKV * HD, HQ * HD, H, H, H, FF, FF};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
      ok &= (*acts[k] = dalloc(&d, sizeof(float) * TMAX * sizes[k])) != NULL;
    ok &= (L.kc = dalloc(&d, sizeof(float) * NCTX * HKV * HD)) != NULL;
    ok &= (L.vc = dalloc(&d, sizeof(float) * NCTX * HKV * HD)) != NULL;
    ok &= (L.pos = dalloc(&d, sizeof(int32_t) * TMAX)) != NULL;
    for (int ph = 0; ph < NPHASE; ph++) {
      int slot = s * NPHASE + ph;
      float got[TMAX * H];
      if (!ok) vf_rec_write(fd, VF_REC_FAIL, slot, 0, "layer: cannot allocate the layer's buffers", NULL, 0);
      else if (dev_run(&d, &L, wt, S->x[ph], phases[ph].T, phases[ph].pos0, got) != 0)
        vf_rec_write(fd, VF_REC_FAIL, slot, 0, d.err, NULL, 0);
      else vf_rec_write(fd, VF_REC_OUT, slot, 0, NULL, got, sizeof(float) * (size_t)phases[ph].T * H);
    }
    for (int k = 0; k < d.n; k++) pi->buffer_free(plug->ctx, d.bufs[k]);
  }
  mi_plugin_unload(plug);
  return 0;
}

/* The parent, after the child has ended: the events vf_unit_report reads. */
static json_t *l2_judge(l2_job *j, const vf_child_result *r) {
  json_t *ev = json_array();
  size_t off = 0;
  vf_rec rec;
  char why[200] = "";
  int bad = 0, stop = 0;
  for (int s = 0; s < j->nsets && !bad && !stop; s++) {
    l2_set *S = &j->sets[s];
    ref_state *st = calloc(1, sizeof *st);
    int failed = 0;
    for (int ph = 0; ph < NPHASE && !bad && !stop; ph++) {
      int slot = s * NPHASE + ph, T = phases[ph].T, pos0 = phases[ph].pos0;
      char where[300];
      snprintf(where, sizeof where, "on %s T=%d pos0=%d (%s weights, H=%d Hq=%d Hkv=%d head_dim=%d ffn=%d)",
               phases[ph].name, T, pos0, mi_dtype_name(S->wt), H, HQ, HKV, HD, FF);
      int have = 0;
      for (;;) {
        int n = vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why);
        if (n < 0) bad = 1;
        if (n <= 0) break;
        if (rec.type == VF_REC_ERROR) {
          json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", rec.msg));
          continue;
        }
        if (rec.index != slot || (rec.type == VF_REC_OUT && rec.payload_len != sizeof(float) * (size_t)T * H)) {
          snprintf(why, sizeof why, "a record for slot %d with %zu bytes where slot %d was due", rec.index,
                   rec.payload_len, slot);
          bad = 1;
          break;
        }
        have = 1;
        break;
      }
      if (bad) break;
      json_t *params = json_pack("{s:i, s:i}", "T", T, "pos0", pos0);
      if (!have) { /* in flight when the child ended */
        json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:s}", "event", "case_start", "case",
                                            phases[ph].name, "index", ph, "dtype", mi_dtype_name(S->wt), "seed",
                                            S->seed_hex, "params", params, "where", where));
        stop = 1;
        break;
      }
      if (failed) { /* later phases depend on a failed one's cache: not reported */
        json_decref(params);
        continue;
      }
      json_t *res = json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:f}", "event", "case_end", "case", phases[ph].name,
                              "index", ph, "dtype", mi_dtype_name(S->wt), "seed", S->seed_hex, "params", params,
                              "tol", j->tol);
      char msg[1400] = "";
      int pass = 0;
      if (rec.type == VF_REC_FAIL) {
        snprintf(msg, sizeof msg, "%s %s", rec.msg, where);
      } else {
        float got[TMAX * H];
        double want[TMAX * H];
        memcpy(got, rec.payload, sizeof(float) * (size_t)T * H);
        if (!st) snprintf(msg, sizeof msg, "layer: out of memory in the verifier");
        else ref_layer(S->w, st, S->x[ph], want, T, pos0);
        double maxabs = 0, refmax = 0;
        int at = 0, nonfinite = 0;
        for (int i = 0; st && i < T * H; i++) {
          if (fabs(want[i]) > refmax) refmax = fabs(want[i]);
          if (!isfinite(got[i])) {
            nonfinite++;
            continue;
          }
          if (fabs(got[i] - want[i]) > maxabs) maxabs = fabs(got[i] - want[i]), at = i;
        }
        double rel = nonfinite ? INFINITY : maxabs / (refmax > 0 ? refmax : 1);
        json_object_set_new(res, "max_abs_err", json_real(maxabs));
        json_object_set_new(res, "max_rel_err", nonfinite ? json_string("inf") : json_real(rel));
        pass = st && rel <= j->tol;
        if (!pass && nonfinite)
          snprintf(msg, sizeof msg, "layer: %d NaN/Inf values in the output %s", nonfinite, where);
        else if (!pass && st)
          snprintf(msg, sizeof msg, "layer: max rel error %.2g > tol %g %s (max abs %.2g at token %d, channel %d: got %.6g, want %.6g)",
                   rel, j->tol, where, maxabs, at / H, at % H, (double)got[at], want[at]);
      }
      json_object_set_new(res, "verdict", json_string(pass ? "PASS" : "FAIL"));
      if (!pass) json_object_set_new(res, "message", json_string(msg));
      json_array_append_new(ev, res);
      failed |= !pass;
    }
    free(st);
  }
  if (!bad && !stop && vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why) != 0) {
    bad = 1;
    if (off >= r->results_len) snprintf(why, sizeof why, "an extra record after the last phase");
  }
  if (bad) {
    char msg[600];
    snprintf(msg, sizeof msg, "layer: the unit's result pipe broke the verifier's protocol (%s): a unit may only "
             "return output buffers", why);
    json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", msg));
  }
  return ev;
}

json_t *vf_stage2(const vf_stage_opts *o, json_t *model, json_t *test_contract) {
  const char *mid = json_string_value(json_object_get(model, "id"));
  json_t *units = json_array();
  json_t *dtypes = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(json_object_get(o->platform, "dtypes"), "weights"), i, v) {
    const char *s = json_string_value(v);
    if (s && (!strcmp(s, "f32") || !strcmp(s, "f16") || !strcmp(s, "bf16")))
      json_array_append(dtypes, v);
  }
  json_t *tol = json_object_get(json_object_get(test_contract, "tolerance"), "f32");
  l2_job job = {o, dtypes, json_is_number(tol) ? json_number_value(tol) : 1e-4, NULL, 0};
  json_t *u;
  vf_child_result r;
  vf_limits lim = o->lim;
  lim.result_cap = VF_REC_SIZE(0) * 8 + (size_t)json_array_size(dtypes) * NPHASE * VF_REC_SIZE(sizeof(float) * TMAX * H);
  if (!mid || strcmp(mid, "model.qwen3")) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", mid ? mid : "?", "verdict",
                  "FAIL", "status", "ERROR", "message", "the verifier has no layer driver for this model contract");
  } else if ((l2_plan(&job), vf_run_child(&lim, layer_child, &job, &r)) != 0) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", mid, "verdict", "FAIL",
                  "status", "ERROR", "message", "cannot fork a child");
  } else {
    json_decref(r.events); /* whatever JSON the child wrote is not a result */
    r.events = l2_judge(&job, &r);
    u = vf_unit_report("layer", mid, json_string_value(json_object_get(model, "version")), "layer",
                       &r, o->lim.timeout_s, o->lim.cpu_s);
    vf_child_result_free(&r);
  }
  l2_free(&job);
  json_decref(dtypes);
  int pass = !strcmp(json_string_value(json_object_get(u, "verdict")), "PASS");
  json_array_append_new(units, u);
  return json_pack("{s:i, s:s, s:s, s:o, s:i, s:i}", "stage", 2, "name", "decoder_layer", "verdict",
                   pass ? "PASS" : "FAIL", "units", units, "passed", pass, "failed", !pass);
}
