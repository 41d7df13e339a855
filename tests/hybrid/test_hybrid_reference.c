/* The hybrid's float64 references -- the model contract model.qwen35
 * interpreted (core/verify/interp.h, what stage 5 holds an engine to), the
 * hand-written model of tests/hybrid/ref/qwen35_f64.c (kept for the evolution
 * loop and token-by-token decoding) and the new operators in
 * core/verify/ref/f64.c -- held to properties that must hold and to
 * independent second computations:
 *  - the gated delta rule's chunked form (a triangular solve per chunk)
 *    equals its recurrent form (rank-1 updates per token), state included;
 *    closed forms for one token and for a decay that forgets everything;
 *  - the causal conv1d equals a zero-padded convolution written here, and
 *    splitting the sequence with the state carried changes nothing;
 *  - the hand-written model decoded token by token (KV cache, conv and
 *    recurrent state carried) equals the contract's full-sequence recompute
 *    at every position, on three shapes, and a chunked prefill equals it
 *    too; dropping the state between tokens is caught;
 *  - the released layout (text_config, model.language_model.) gives the
 *    same logits through the contract its architecture names;
 *  - a hybrid with only full-attention layers, full rotary, zero output-gate
 *    rows and its (1+w) norms reduces to model.qwen3 on the equivalent
 *    Qwen3 checkpoint (norms 1+w, query rows only, o_proj halved for
 *    sigmoid(0) = 1/2), both contracts interpreted. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/runtime/safetensors.h"
#include "core/ckb/ckb.h"
#include "core/verify/bind.h"
#include "core/verify/interp.h"
#include "tests/hybrid/f64_model.h"
#include "tests/hybrid/ref/qwen35_f64.h"
#include "core/verify/ref/f64.h"
#include "tests/safetensors/st_writer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_json.h"

/* ---- deterministic test inputs --------------------------------------- */

static uint64_t g_rng = 1;
static double urand(void) { /* [-1, 1) */
  g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(g_rng >> 11) / (double)(1ULL << 52) - 1.0;
}
static void fill(double *x, size_t n, double s) {
  for (size_t i = 0; i < n; i++) x[i] = s * urand();
}
static double maxdiff(const double *a, const double *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
  return m;
}
static double maxabs(const double *a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}

/* ---- operators --------------------------------------------------------- */

/* q, k normalised like the model does, so the rule is well conditioned. */
static void dn_inputs(double *q, double *k, double *v, double *g, double *beta, int T, int Hk, int Hv, int Dk,
                      int Dv) {
  fill(q, (size_t)T * Hk * Dk, 1);
  fill(k, (size_t)T * Hk * Dk, 1);
  fill(v, (size_t)T * Hv * Dv, 1);
  vf_f64_l2norm(q, q, (int64_t)T * Hk, Dk, 1e-6);
  vf_f64_l2norm(k, k, (int64_t)T * Hk, Dk, 1e-6);
  for (int i = 0; i < T * Hv; i++) {
    g[i] = -1.5 * (urand() + 1); /* decays e^0 .. e^-3 */
    beta[i] = 0.5 * (urand() + 1);
  }
}

START_TEST(delta_rule_chunked_equals_recurrent) {
  enum { T = 19, Hk = 2, Hv = 4, Dk = 8, Dv = 6 };
  static double q[T * Hk * Dk], k[T * Hk * Dk], v[T * Hv * Dv], g[T * Hv], beta[T * Hv];
  static double o1[T * Hv * Dv], o2[T * Hv * Dv], S1[Hv * Dk * Dv], S2[Hv * Dk * Dv];
  dn_inputs(q, k, v, g, beta, T, Hk, Hv, Dk, Dv);
  const int chunks[] = {1, 3, 4, 8, 64};
  for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
    fill(S1, Hv * Dk * Dv, 0.5); /* a sequence already under way */
    memcpy(S2, S1, sizeof S1);
    ck_assert_int_eq(vf_f64_gated_delta_rule(o1, S1, q, k, v, g, beta, T, Hk, Hv, Dk, Dv), 0);
    ck_assert_int_eq(vf_f64_gated_delta_rule_chunked(o2, S2, q, k, v, g, beta, T, Hk, Hv, Dk, Dv, chunks[c]), 0);
    double dout = maxdiff(o1, o2, T * Hv * Dv), dst = maxdiff(S1, S2, Hv * Dk * Dv);
    ck_assert_msg(maxabs(o1, T * Hv * Dv) > 0.1, "outputs are ~0: the check would be empty");
    ck_assert_msg(dout < 1e-12 && dst < 1e-12, "chunk %d: outputs differ by %g, states by %g", chunks[c], dout, dst);
  }
  /* bad head counts are refused, not read out of bounds */
  ck_assert_int_eq(vf_f64_gated_delta_rule(o1, S1, q, k, v, g, beta, T, 3, Hv, Dk, Dv), -1);
  ck_assert_int_eq(vf_f64_gated_delta_rule_chunked(o1, S1, q, k, v, g, beta, T, 3, Hv, Dk, Dv, 4), -1);
}
END_TEST

START_TEST(delta_rule_closed_forms) {
  enum { Dk = 5, Dv = 3 };
  double q[Dk], k[Dk], v[Dv], S[Dk * Dv] = {0}, o[Dv];
  fill(q, Dk, 1);
  fill(k, Dk, 1);
  fill(v, Dv, 1);
  double g = -0.7, b = 0.6;
  /* one token from a zero state: S = k ⊗ (b v), o = b (k·q) v */
  ck_assert_int_eq(vf_f64_gated_delta_rule(o, S, q, k, v, &g, &b, 1, 1, 1, Dk, Dv), 0);
  double kq = 0;
  for (int i = 0; i < Dk; i++) kq += k[i] * q[i];
  for (int j = 0; j < Dv; j++) ck_assert_double_eq_tol(o[j], b * kq * v[j], 1e-15);
  for (int i = 0; i < Dk; i++)
    for (int j = 0; j < Dv; j++) ck_assert_double_eq_tol(S[i * Dv + j], k[i] * b * v[j], 1e-15);
  /* second token with a decay that forgets everything: as if the first never was */
  double S2[Dk * Dv] = {0}, o2[Dv], gf = -800;
  ck_assert_int_eq(vf_f64_gated_delta_rule(o, S, q, k, v, &gf, &b, 1, 1, 1, Dk, Dv), 0);
  ck_assert_int_eq(vf_f64_gated_delta_rule(o2, S2, q, k, v, &g, &b, 1, 1, 1, Dk, Dv), 0);
  for (int j = 0; j < Dv; j++) ck_assert_double_eq_tol(o[j], o2[j], 1e-15);
  /* beta = 1, unit k, no decay: the state then maps k exactly to v (the delta rule's fixed point) */
  double ku[Dk] = {0}, S3[Dk * Dv], one = 1, zero = 0, kv[Dv];
  ku[2] = 1;
  fill(S3, Dk * Dv, 1);
  ck_assert_int_eq(vf_f64_gated_delta_rule(o, S3, ku, ku, v, &zero, &one, 1, 1, 1, Dk, Dv), 0);
  for (int j = 0; j < Dv; j++) {
    kv[j] = S3[2 * Dv + j];
    ck_assert_double_eq_tol(kv[j], v[j], 1e-15);
  }
}
END_TEST

START_TEST(conv1d_causal) {
  enum { T = 9, C = 5, K = 4 };
  double x[T * C], w[C * K], y[T * C], y2[T * C], st[(K - 1) * C] = {0}, st2[(K - 1) * C] = {0};
  fill(x, T * C, 1);
  fill(w, C * K, 1);
  ck_assert_int_eq(vf_f64_conv1d_causal(y, x, w, st, T, C, K), 0);
  /* a zero-padded causal convolution, written independently */
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int j = 0; j < K; j++) {
        int src = t - (K - 1 - j);
        if (src >= 0) s += w[c * K + j] * x[src * C + c];
      }
      ck_assert_double_eq_tol(y[t * C + c], s, 1e-14);
    }
  /* the state holds the last K-1 inputs */
  ck_assert_int_eq(memcmp(st, x + (T - K + 1) * C, sizeof st), 0);
  /* pieces 2 + 1 + 6 with the state carried give the same outputs */
  int cuts[] = {0, 2, 3, T};
  for (int p = 0; p < 3; p++)
    ck_assert_int_eq(vf_f64_conv1d_causal(y2 + cuts[p] * C, x + cuts[p] * C, w, st2, cuts[p + 1] - cuts[p], C, K), 0);
  ck_assert_int_eq(memcmp(y, y2, sizeof y), 0);
  ck_assert_int_eq(memcmp(st, st2, sizeof st), 0);
}
END_TEST

START_TEST(norms_and_gates) {
  enum { R = 3, D = 7 };
  double x[R * D], w[D], z[R * D], y[R * D], r[R * D], one[R * D];
  fill(x, R * D, 2);
  fill(w, D, 1);
  fill(z, R * D, 3);
  vf_f64_l2norm(y, x, R, D, 0);
  for (int i = 0; i < R; i++) {
    double s = 0;
    for (int j = 0; j < D; j++) s += y[i * D + j] * y[i * D + j];
    ck_assert_double_eq_tol(s, 1.0, 1e-14);
  }
  /* gated RMSNorm = RMSNorm(w) then · silu(z), from the existing operators */
  vf_f64_rmsnorm_gated(y, x, w, z, R, D, 1e-6);
  vf_f64_rmsnorm(r, x, w, R, D, 1e-6, 0);
  for (int i = 0; i < R * D; i++) one[i] = 1;
  double sz[R * D];
  vf_f64_silu_mul(sz, z, one, R * D);
  for (int i = 0; i < R * D; i++) ck_assert_double_eq_tol(y[i], r[i] * sz[i], 1e-14);
  /* gates: beta in (0,1), g <= 0, softplus's large-argument branch continuous */
  double a[2] = {-3, 25}, b[2] = {-2, 2}, Al[1] = {0.3}, dt[1] = {0}, gg[2], be[2];
  vf_f64_deltanet_gates(gg, be, a, b, Al, dt, 2, 1);
  ck_assert_double_eq_tol(be[0], 1 / (1 + exp(2.0)), 1e-15);
  ck_assert_double_eq_tol(gg[0], -exp(0.3) * log1p(exp(-3.0)), 1e-15);
  ck_assert_double_eq_tol(gg[1], -exp(0.3) * 25, 1e-12);
  /* partial rotary leaves the channels past rot_dim untouched and keeps the norm */
  double h[16], h0[16], pos = 7;
  fill(h, 16, 1);
  memcpy(h0, h, sizeof h);
  vf_f64_rope(h, &pos, 1, 1, 16, 16, 4, 1e7);
  ck_assert_int_eq(memcmp(h + 4, h0 + 4, 12 * sizeof(double)), 0);
  ck_assert_double_eq_tol(h[0] * h[0] + h[2] * h[2], h0[0] * h0[0] + h0[2] * h0[2], 1e-14);
  ck_assert(fabs(h[0] - h0[0]) > 1e-6);
}
END_TEST

/* ---- whole model ------------------------------------------------------- */

static char *g_dir;
static void setup(void) { g_dir = tw_mkdtemp("hybrid-ref"); }
static void teardown(void) {
  tw_rmtree(g_dir);
  free(g_dir);
}

static char *mkmodel_layout(const char *shape, int seed, const char *layout) {
  const char *bd = getenv("MI_BUILD_DIR");
  ck_assert_msg(bd != NULL, "MI_BUILD_DIR not set (run through ctest)");
  char *out = NULL, *cmd = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/%s-%d-%s", g_dir, shape, seed, layout), 0);
  ck_assert_int_ge(asprintf(&cmd, "'%s/bin/mi-mkmodel' --family qwen35 --shape %s --seed %d --dtype f32 --layout %s "
                                  "--out '%s' >/dev/null",
                            bd, shape, seed, layout, out),
                   0);
  ck_assert_msg(system(cmd) == 0, "%s", cmd);
  free(cmd);
  return out;
}

static char *mkmodel(const char *shape, int seed) { return mkmodel_layout(shape, seed, "causal"); }

/* max |a - b| relative to the spread of b's row */
static double row_rel(const double *a, const double *b, int V) {
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < V; i++) lo = fmin(lo, b[i]), hi = fmax(hi, b[i]);
  return maxdiff(a, b, (size_t)V) / (hi - lo);
}

/* Logits [T, V] of ids[T] from scratch: the model contract config.json's
 * architectures name, interpreted in float64 (core/verify/interp.h) */
static double *contract_logits(const json_t *cfg, const mi_weights *w, const int32_t *ids, int T) {
  char dir[1100], err[1200] = "";
  snprintf(dir, sizeof dir, "%s/ckb", getenv("MI_SOURCE_DIR") ? getenv("MI_SOURCE_DIR") : ".");
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  const mi_ckb_entry *me = vf_bind_find_model(c, cfg, NULL);
  ck_assert_msg(me != NULL, "no model contract for this config's architectures");
  vf_interp *in = vf_interp_open(c, me, cfg, w, err, sizeof err);
  ck_assert_msg(in != NULL, "%s", err);
  double *l = vf_interp_forward(in, ids, T, T, NULL, err, sizeof err);
  ck_assert_msg(l != NULL, "%s", err);
  vf_interp_close(in);
  mi_ckb_close(c);
  return l;
}

static void decode_equals_recompute(const char *shape, int seed) {
  char *dir = mkmodel(shape, seed);
  hy_f64 f = hy_f64_open(dir);
  char err[1024] = "";
  const int V = vf_qwen35_vocab(f.m), T = 9;
  int32_t ids[9];
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 13 * seed) % 151643);
  double *full = malloc((size_t)T * V * sizeof(double)), *step = malloc((size_t)V * sizeof(double));
  double *chunked = malloc((size_t)T * V * sizeof(double));

  /* (1) the model contract interpreted (from scratch) */
  double *ref = contract_logits(f.cfg, f.w, ids, T);
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < V; i++) lo = fmin(lo, ref[i]), hi = fmax(hi, ref[i]);
  ck_assert_msg(hi - lo > 1.0, "%s: logits are flat (spread %g)", shape, hi - lo);

  /* (2) token by token with the state carried */
  vf_qwen35_seq *s = vf_qwen35_seq_new(f.m, T);
  double worst = 0;
  for (int t = 0; t < T; t++) {
    ck_assert_msg(vf_qwen35_forward(f.m, s, ids + t, 1, 1, step, 0, NULL, err, sizeof err) == 0, "%s", err);
    double d = row_rel(step, ref + (size_t)t * V, V);
    worst = fmax(worst, d);
    ck_assert_msg(d < 1e-10, "%s: decode at position %d differs from the recompute by %g of the spread", shape, t,
                  d);
  }
  vf_qwen35_seq_free(s);

  /* (3) prefill 4 in chunks of 3, then 7 more in one call with chunks of 2 */
  s = vf_qwen35_seq_new(f.m, T);
  ck_assert(vf_qwen35_forward(f.m, s, ids, 4, 4, chunked, 3, NULL, err, sizeof err) == 0);
  ck_assert(vf_qwen35_forward(f.m, s, ids + 4, T - 4, T - 4, chunked + (size_t)4 * V, 2, NULL, err, sizeof err) == 0);
  for (int t = 0; t < T; t++)
    ck_assert_msg(row_rel(chunked + (size_t)t * V, ref + (size_t)t * V, V) < 1e-10, "%s: chunked prefill, position %d",
                  shape, t);
  /* a sequence is full at its capacity: refused, not overrun */
  ck_assert_int_eq(vf_qwen35_forward(f.m, s, ids, 1, 1, step, 0, NULL, err, sizeof err), -1);
  vf_qwen35_seq_free(s);

  /* (4) the check can fail: a fresh state per token (state not carried) */
  double dropped = 0;
  for (int t = 1; t < T; t++) {
    s = vf_qwen35_seq_new(f.m, T);
    ck_assert(vf_qwen35_forward(f.m, s, ids + t, 1, 1, step, 0, NULL, err, sizeof err) == 0);
    dropped = fmax(dropped, row_rel(step, ref + (size_t)t * V, V));
    vf_qwen35_seq_free(s);
  }
  ck_assert_msg(dropped > 1e-2, "%s: dropping the state changes nothing (%g)", shape, dropped);
  fprintf(stderr, "hybrid %s: decode vs recompute %.2g, state dropped %.2g (of the logit spread)\n", shape, worst,
          dropped);
  free(ref);
  free(full);
  free(step);
  free(chunked);
  hy_f64_close(&f);
  free(dir);
}

START_TEST(decode_tiny) { decode_equals_recompute("tiny", 1); }
END_TEST
START_TEST(decode_tiny_untied) { decode_equals_recompute("tiny-untied", 2); }
END_TEST
START_TEST(decode_probe_deltanet) { decode_equals_recompute("probe-deltanet", 3); } /* only DeltaNet layers count */
END_TEST

/* The released layout (Qwen3_5ForConditionalGeneration: text_config,
 * model.language_model. weights) of the same model gives the same logits,
 * through the model contract found by that architecture. */
static double *layout_logits(const char *dir, const char *arch, const int32_t *ids, int T, int *V) {
  char *p = tw_path(dir, "config.json");
  json_t *cfg = json_load_file(p, 0, NULL);
  free(p);
  ck_assert_ptr_nonnull(cfg);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0)), arch);
  char err[1024] = "";
  mi_weights *w = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(w, "%s", err);
  const json_t *tc = json_object_get(cfg, "text_config");
  *V = (int)json_integer_value(json_object_get(tc ? tc : cfg, "vocab_size"));
  double *l = contract_logits(cfg, w, ids, T);
  mi_weights_close(w);
  json_decref(cfg);
  return l;
}

START_TEST(released_layout_same_model) {
  const char *shapes[] = {"tiny", "tiny-untied"};
  for (int s = 0; s < 2; s++) {
    char *a = mkmodel_layout(shapes[s], 5, "causal"), *b = mkmodel_layout(shapes[s], 5, "conditional");
    enum { T = 6 };
    int32_t ids[T] = {11, 2025, 151643, 7, 99, 40000};
    int V = 0, V2 = 0;
    double *la = layout_logits(a, "Qwen3_5ForCausalLM", ids, T, &V);
    double *lb = layout_logits(b, "Qwen3_5ForConditionalGeneration", ids, T, &V2);
    ck_assert_int_eq(V, V2);
    ck_assert_msg(memcmp(la, lb, sizeof(double) * (size_t)T * V) == 0, "%s: the two layouts differ", shapes[s]);
    ck_assert(maxabs(la, (size_t)T * V) > 1);
    free(la);
    free(lb);
    free(a);
    free(b);
  }
}
END_TEST

/* ---- reduction to Qwen3 ------------------------------------------------ */

typedef struct tens {
  char name[96];
  int ndim;
  int64_t d[2];
  float *v;
} tens;

typedef struct ckpt {
  tens t[64];
  int n;
} ckpt;

static float *add(ckpt *c, const char *name, int ndim, int64_t d0, int64_t d1) {
  tens *t = &c->t[c->n++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->d[0] = d0;
  t->d[1] = ndim > 1 ? d1 : 1;
  t->v = calloc((size_t)(t->d[0] * t->d[1]), sizeof(float));
  return t->v;
}

static void write_ckpt(ckpt *c, const char *dir, json_t *cfg) {
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  json_t *h = json_object();
  size_t off = 0;
  for (int i = 0; i < c->n; i++) {
    size_t nb = (size_t)(c->t[i].d[0] * c->t[i].d[1]) * 4;
    json_t *shape = c->t[i].ndim == 1 ? json_pack("[I]", (json_int_t)c->t[i].d[0])
                                      : json_pack("[I,I]", (json_int_t)c->t[i].d[0], (json_int_t)c->t[i].d[1]);
    json_object_set_new(h, c->t[i].name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", "F32", "shape", shape,
                                                   "data_offsets", (json_int_t)off, (json_int_t)(off + nb)));
    off += nb;
  }
  char *hs = json_dumps(h, JSON_COMPACT);
  char *data = malloc(off), *p = data;
  for (int i = 0; i < c->n; i++) {
    size_t nb = (size_t)(c->t[i].d[0] * c->t[i].d[1]) * 4;
    memcpy(p, c->t[i].v, nb);
    p += nb;
  }
  char *path = tw_path(dir, "model.safetensors");
  ck_assert_int_eq(tw_write_st(path, hs, data, off), 0);
  free(path);
  path = tw_path(dir, "config.json");
  ck_assert_int_eq(json_dump_file(cfg, path, 0), 0);
  free(path);
  free(hs);
  free(data);
  json_decref(h);
  for (int i = 0; i < c->n; i++) free(c->t[i].v);
}

static void frand(float *v, size_t n, double s) {
  for (size_t i = 0; i < n; i++) v[i] = (float)(s * urand());
}
/* zero-centred norm weights with 1 + w exact in float32 */
static void fnorm(float *w0, float *w1, size_t n) {
  for (size_t i = 0; i < n; i++) {
    w0[i] = (float)(floor(urand() * 100) / 1024.0);
    w1[i] = 1.0f + w0[i];
  }
}

START_TEST(full_attention_only_reduces_to_qwen3) {
  enum { H = 32, L = 2, NH = 4, NKV = 2, HD = 8, F = 48, V = 97 };
  ckpt *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b); /* a: hybrid, b: Qwen3 */
  char nm[128];
  float *e = add(a, "model.embed_tokens.weight", 2, V, H);
  frand(e, (size_t)V * H, 1);
  memcpy(add(b, "model.embed_tokens.weight", 2, V, H), e, sizeof(float) * V * H);
  for (int l = 0; l < L; l++) {
#define PAIR(suffix, nd, d0, d1, pa, pb)                          \
  snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);       \
  float *pa = add(a, nm, nd, d0, d1), *pb = add(b, nm, nd, d0, d1)
    PAIR("input_layernorm.weight", 1, H, 0, n0, n1);
    fnorm(n0, n1, H);
    PAIR("post_attention_layernorm.weight", 1, H, 0, p0, p1);
    fnorm(p0, p1, H);
    PAIR("self_attn.q_norm.weight", 1, HD, 0, q0, q1);
    fnorm(q0, q1, HD);
    PAIR("self_attn.k_norm.weight", 1, HD, 0, k0, k1);
    fnorm(k0, k1, HD);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", l);
    float *qa = add(a, nm, 2, 2 * NH * HD, H), *qb = add(b, nm, 2, NH * HD, H);
    frand(qb, (size_t)NH * HD * H, 0.3);
    for (int h = 0; h < NH; h++) /* query rows; the gate rows stay 0 */
      memcpy(qa + (size_t)h * 2 * HD * H, qb + (size_t)h * HD * H, sizeof(float) * HD * H);
    PAIR("self_attn.o_proj.weight", 2, H, NH * HD, oa, ob);
    frand(oa, (size_t)H * NH * HD, 0.3);
    for (int i = 0; i < H * NH * HD; i++) ob[i] = 0.5f * oa[i]; /* sigmoid(0) */
    const char *same[] = {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.gate_proj.weight",
                          "mlp.up_proj.weight", "mlp.down_proj.weight"};
    const int64_t d0[] = {NKV * HD, NKV * HD, F, F, H}, d1[] = {H, H, H, H, F};
    for (int s = 0; s < 5; s++) {
      PAIR(same[s], 2, d0[s], d1[s], sa, sb);
      frand(sa, (size_t)(d0[s] * d1[s]), 0.3);
      memcpy(sb, sa, sizeof(float) * (size_t)(d0[s] * d1[s]));
    }
#undef PAIR
  }
  float *f0 = add(a, "model.norm.weight", 1, H, 0), *f1 = add(b, "model.norm.weight", 1, H, 0);
  fnorm(f0, f1, H);
  float *la = add(a, "lm_head.weight", 2, V, H);
  frand(la, (size_t)V * H, 1);
  memcpy(add(b, "lm_head.weight", 2, V, H), la, sizeof(float) * V * H);

  json_t *ca = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b, s:[s,s], s:i, s:i, s:i, s:i, s:i, "
                         "s:{s:f, s:f}}",
                         "architectures", "Qwen3_5ForCausalLM", "hidden_size", H, "num_hidden_layers", L,
                         "num_attention_heads", NH, "num_key_value_heads", NKV, "head_dim", HD, "intermediate_size",
                         F, "vocab_size", V, "rms_norm_eps", 1e-6, "tie_word_embeddings", 0, "layer_types",
                         "full_attention", "full_attention", "linear_num_key_heads", 1, "linear_num_value_heads", 1,
                         "linear_key_head_dim", 4, "linear_value_head_dim", 4, "linear_conv_kernel_dim", 4,
                         "rope_parameters", "rope_theta", 1e4, "partial_rotary_factor", 1.0);
  json_t *cb = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b, s:f}", "architectures",
                         "Qwen3ForCausalLM", "hidden_size", H, "num_hidden_layers", L, "num_attention_heads", NH,
                         "num_key_value_heads", NKV, "head_dim", HD, "intermediate_size", F, "vocab_size", V,
                         "rms_norm_eps", 1e-6, "tie_word_embeddings", 0, "rope_theta", 1e4);
  char *da = tw_path(g_dir, "hyb"), *db = tw_path(g_dir, "q3");
  write_ckpt(a, da, ca);
  write_ckpt(b, db, cb);

  enum { T = 9 };
  int32_t ids[T];
  for (int t = 0; t < T; t++) ids[t] = (t * 31 + 5) % V;
  char err[1024] = "";
  double *out[2];
  const char *dirs[2] = {da, db};
  json_t *cfgs[2] = {ca, cb};
  for (int i = 0; i < 2; i++) { /* model.qwen35, then model.qwen3, each interpreted */
    mi_weights *w = mi_weights_open(dirs[i], err, sizeof err);
    ck_assert_msg(w, "%s", err);
    out[i] = contract_logits(cfgs[i], w, ids, T);
    mi_weights_close(w);
  }
  double worst = 0;
  for (int t = 0; t < T; t++) worst = fmax(worst, row_rel(out[0] + (size_t)t * V, out[1] + (size_t)t * V, V));
  ck_assert_msg(worst < 1e-12, "hybrid (full attention only) vs Qwen3 reference: %g of the spread", worst);
  fprintf(stderr, "hybrid with full attention only vs Qwen3 reference: %.2g of the logit spread\n", worst);
  free(out[0]);
  free(out[1]);
  free(da);
  free(db);
  free(a);
  free(b);
  json_decref(ca);
  json_decref(cb);
}
END_TEST

START_TEST(config_errors_named) {
  char err[512] = "";
  vf_qwen35 *m = NULL;
  json_t *c = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:[s,s]}", "hidden_size", 8,
                        "num_hidden_layers", 2, "num_attention_heads", 2, "num_key_value_heads", 1, "head_dim", 8,
                        "intermediate_size", 8, "vocab_size", 8, "linear_num_key_heads", 1, "linear_num_value_heads",
                        2, "linear_key_head_dim", 4, "linear_value_head_dim", 4, "linear_conv_kernel_dim", 4,
                        "layer_types", "linear_attention", "sliding_attention");
  ck_assert_int_eq(vf_qwen35_open(c, NULL, &m, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "layer_types[1]") && strstr(err, "sliding_attention"), "%s", err);
  json_object_set_new(c, "layer_types", json_pack("[s]", "linear_attention"));
  ck_assert_int_eq(vf_qwen35_open(c, NULL, &m, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "num_hidden_layers"), "%s", err);
  json_object_del(c, "layer_types");
  json_object_set_new(c, "linear_num_key_heads", json_integer(2));
  json_object_set_new(c, "linear_num_value_heads", json_integer(3));
  ck_assert_int_eq(vf_qwen35_open(c, NULL, &m, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "linear value heads 3 / key heads 2"), "%s", err);
  json_object_set_new(c, "linear_num_key_heads", json_integer(1));
  json_object_set_new(c, "linear_num_value_heads", json_integer(2));
  json_object_set_new(c, "partial_rotary_factor", json_real(0.1)); /* 0.8 channels */
  ck_assert_int_eq(vf_qwen35_open(c, NULL, &m, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "partial_rotary_factor"), "%s", err);
  json_object_del(c, "head_dim");
  ck_assert_int_eq(vf_qwen35_open(c, NULL, &m, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "\"head_dim\""), "%s", err);
  json_decref(c);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("hybrid_reference");
  TCase *ops = tcase_create("operators");
  mi_check_add(ops, MI_CHECK_TESTS(delta_rule_chunked_equals_recurrent, delta_rule_closed_forms,
                                   conv1d_causal, norms_and_gates, config_errors_named));
  suite_add_tcase(s, ops);
  TCase *model = tcase_create("model");
  tcase_add_checked_fixture(model, setup, teardown);
  tcase_set_timeout(model, 120);
  mi_check_add(model,
               MI_CHECK_TESTS(decode_tiny, decode_tiny_untied, decode_probe_deltanet,
                              released_layout_same_model, full_attention_only_reduces_to_qwen3));
  suite_add_tcase(s, model);
  return s;
}

int main(void) {
  return mi_check_run(suite());
}
