/* Stage 6's default gate, decode growth (6d): decode cost must not grow
 * with the prefix beyond attention's share. Wall time is too noisy on tiny
 * shapes, so the work is counted instead: the child loads the model under
 * test on a platform table that wraps the engine's (every kernel member
 * counts what its shape arguments ask for, then calls the real one), runs a
 * short and a long prefix and a few decode steps after each, and returns
 * the per-step counts. The parent then requires, step by step:
 *   - non-attention work (matmul FLOPs 2·M·N·K, the element counts of the
 *     other kernels) after the long prefix equal to that after the short
 *     one, within GROWTH_TOL: a decode step processes one token whatever
 *     came before it;
 *   - attention work (4·Hq·D per attended position) after the long prefix
 *     at most (long position)/(short position) times that after the short
 *     one (linear in the position), within GROWTH_TOL.
 * An engine that recomputes its prefix at every step fails both. The
 * hybrid's DeltaNet blocks (ABI 1.4) count as non-attention work: their
 * state has a fixed size, so their cost per decode step must not grow. The counts
 * are the candidate's requests through the table it was given: a candidate
 * computing outside the platform is stage 5's and the imports' concern, and
 * one that asks for no work at all fails here. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/session.h"
#include "core/verify/verify.h"

#define GROWTH_TOL 0.01
#define GROWTH_STEPS 3
#define GROWTH_SHORT 4
#define GROWTH_LONG 64

/* ---------- the counting table (in the child) ---------- */

static const mi_platform_iface *g_real;
static mi_platform_iface g_wrap;
static double g_other, g_attn;

static int w_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w, mi_dtype t, int64_t M,
                    int64_t N, int64_t K) {
  g_other += 2.0 * (double)M * (double)N * (double)K;
  return g_real->matmul(ctx, s, y, x, w, t, M, N, K);
}
static int w_rmsnorm(void *ctx, mi_stream *s, float *y, const float *x, const float *w, int64_t rows, int64_t dim,
                     float eps, float off) {
  g_other += (double)rows * (double)dim;
  return g_real->rmsnorm(ctx, s, y, x, w, rows, dim, eps, off);
}
static int w_rope(void *ctx, mi_stream *s, float *x, const int32_t *pos, int64_t T, int64_t H, int64_t ts, int64_t hs,
                  int64_t rd, float theta) {
  g_other += (double)T * (double)H * (double)rd;
  return g_real->rope(ctx, s, x, pos, T, H, ts, hs, rd, theta);
}
static int w_attention(void *ctx, mi_stream *s, float *out, const float *q, const void *k, const void *v, mi_dtype t,
                       int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, float scale) {
  /* query t attends to positions 0..pos0+t: Σ (pos0+t+1), for q·k and p·v */
  double rows = (double)T * (double)pos0 + (double)T * (double)(T + 1) / 2;
  g_attn += 4.0 * rows * (double)Hq * (double)D;
  return g_real->attention(ctx, s, out, q, k, v, t, T, Hq, Hkv, D, pos0, scale);
}
static int w_silu_mul(void *ctx, mi_stream *s, float *y, const float *g, const float *u, int64_t n) {
  g_other += (double)n;
  return g_real->silu_mul(ctx, s, y, g, u, n);
}
static int w_add(void *ctx, mi_stream *s, float *y, const float *a, const float *b, int64_t n) {
  g_other += (double)n;
  return g_real->add(ctx, s, y, a, b, n);
}
static int w_scale(void *ctx, mi_stream *s, float *y, const float *x, float alpha, int64_t n) {
  g_other += (double)n;
  return g_real->scale(ctx, s, y, x, alpha, n);
}
static int w_embed(void *ctx, mi_stream *s, float *y, const void *tab, mi_dtype t, const int32_t *ids, int64_t T,
                   int64_t V, int64_t dim) {
  g_other += (double)T * (double)dim;
  return g_real->embed(ctx, s, y, tab, t, ids, T, V, dim);
}
static int w_argmax(void *ctx, mi_stream *s, int32_t *out, const float *x, int64_t rows, int64_t n) {
  g_other += (double)rows * (double)n;
  return g_real->argmax(ctx, s, out, x, rows, n);
}
static int w_convert(void *ctx, mi_stream *s, void *dst, mi_dtype dt, const void *src, mi_dtype st, int64_t n) {
  g_other += (double)n;
  return g_real->convert(ctx, s, dst, dt, src, st, n);
}

/* ABI 1.4, the hybrid's blocks: the DeltaNet ones are "other" work too (a
 * fixed-size recurrent state: constant per decode step, however long the
 * prefix), counted by what their shapes ask for. */
static int w_copy2d(void *ctx, mi_stream *s, float *y, int64_t ys, const float *x, int64_t xs, int64_t rows,
                    int64_t n) {
  g_other += (double)rows * (double)n;
  return g_real->copy2d(ctx, s, y, ys, x, xs, rows, n);
}
static int w_l2norm(void *ctx, mi_stream *s, float *y, const float *x, int64_t rows, int64_t dim, float eps) {
  g_other += (double)rows * (double)dim;
  return g_real->l2norm(ctx, s, y, x, rows, dim, eps);
}
static int w_sigmoid_mul(void *ctx, mi_stream *s, float *y, const float *x, const float *g, int64_t n) {
  g_other += (double)n;
  return g_real->sigmoid_mul(ctx, s, y, x, g, n);
}
static int w_conv1d_causal(void *ctx, mi_stream *s, float *y, const float *x, const float *w, float *state,
                           int64_t T, int64_t C, int64_t K, int silu) {
  g_other += (double)T * (double)C * (double)K;
  return g_real->conv1d_causal(ctx, s, y, x, w, state, T, C, K, silu);
}
static int w_deltanet_gates(void *ctx, mi_stream *s, float *beta, float *g, const float *b, const float *a,
                            const float *a_log, const float *dt_bias, int64_t T, int64_t H) {
  g_other += (double)T * (double)H;
  return g_real->deltanet_gates(ctx, s, beta, g, b, a, a_log, dt_bias, T, H);
}
static int w_gated_delta_rule(void *ctx, mi_stream *s, float *o, const float *q, const float *k, const float *v,
                              const float *g, const float *beta, float *state, int64_t T, int64_t Hk, int64_t Hv,
                              int64_t Dk, int64_t Dv) {
  g_other += 4.0 * (double)T * (double)Hv * (double)Dk * (double)Dv; /* decay, Sᵀk, the update, Sᵀq */
  return g_real->gated_delta_rule(ctx, s, o, q, k, v, g, beta, state, T, Hk, Hv, Dk, Dv);
}
static int w_rmsnorm_gated(void *ctx, mi_stream *s, float *y, const float *x, const float *w, const float *z,
                           int64_t rows, int64_t dim, float eps) {
  g_other += (double)rows * (double)dim;
  return g_real->rmsnorm_gated(ctx, s, y, x, w, z, rows, dim, eps);
}

static const mi_platform_iface *counting_table(const mi_platform_iface *real) {
  g_real = real;
  memset(&g_wrap, 0, sizeof g_wrap);
  size_t n = real->struct_size < sizeof g_wrap ? real->struct_size : sizeof g_wrap;
  memcpy(&g_wrap, real, n);
  g_wrap.struct_size = (uint32_t)n; /* members past what this verifier knows are not handed on */
  /* a member the platform lacks stays NULL (the model sees the same gaps) */
#define WRAP(m) \
  if (mi_platform_has(real, m)) g_wrap.m = w_##m;
  WRAP(matmul) WRAP(rmsnorm) WRAP(rope) WRAP(attention) WRAP(silu_mul) WRAP(add) WRAP(scale) WRAP(embed)
  WRAP(argmax) WRAP(convert)
  WRAP(copy2d) WRAP(l2norm) WRAP(sigmoid_mul) WRAP(conv1d_causal) WRAP(deltanet_gates) WRAP(gated_delta_rule)
  WRAP(rmsnorm_gated)
#undef WRAP
  return &g_wrap;
}

/* ---------- the unit ---------- */

typedef struct growth_job {
  const vf_stage_opts *o;
  const char *workdir;
} growth_job;

static const int k_prefix[2] = {GROWTH_SHORT, GROWTH_LONG};

/* Slot k (0 short, 1 long prefix): double [GROWTH_STEPS][2] = {other, attention}. */
static int growth_child(void *arg, int fd) {
  growth_job *j = arg;
  char err[2048] = "", msg[2600];
  mi_registry *reg = vf_open_registry(j->o, j->workdir, err, sizeof err);
  mi_session *e = reg ? vf_open_engine(reg, j->o->model_dir, err, sizeof err) : NULL;
  vf_loaded l = {0};
  if (!e || vf_load_direct_on(e, j->o->model_dir, counting_table(e->P), &l, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "the engine cannot load %s: %s", j->o->model_dir, err);
    vf_rec_write(fd, VF_REC_FAIL, 0, 0, msg, NULL, 0);
    goto out;
  }
  float *logits = malloc((size_t)l.V * sizeof(float));
  int32_t ids[GROWTH_LONG + GROWTH_STEPS];
  vf_random_prompt(j->o->seed ^ 0x6d, ids, GROWTH_LONG + GROWTH_STEPS, 0, l.V);
  for (int k = 0; k < 2 && logits; k++) {
    const int P = k_prefix[k];
    double fig[GROWTH_STEPS][2];
    mi_seq *s = NULL;
    int rc = l.M->seq_create(l.m, P + GROWTH_STEPS + 1, &s, err, sizeof err);
    if (rc == 0) rc = l.M->forward(l.m, s, ids, P, logits, 0, err, sizeof err);
    for (int st = 0; rc == 0 && st < GROWTH_STEPS; st++) {
      g_other = g_attn = 0;
      int32_t tok = (int32_t)vf_argmax(logits, l.V);
      rc = l.M->forward(l.m, s, &tok, 1, logits, 0, err, sizeof err);
      fig[st][0] = g_other;
      fig[st][1] = g_attn;
    }
    if (s) l.M->seq_destroy(l.m, s);
    if (rc == 0) vf_rec_write(fd, VF_REC_OUT, k, 0, NULL, fig, sizeof fig);
    else {
      snprintf(msg, sizeof msg, "forward pass failed after a %d-token prefix: %s", P, err);
      vf_rec_write(fd, VF_REC_FAIL, k, 0, msg, NULL, 0);
    }
  }
  free(logits);
out:
  vf_unload_direct(&l);
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

static json_t *growth_judge(void *arg, const vf_child_result *r) {
  (void)arg;
  json_t *ev = json_array();
  vf_rec sl[2];
  const char *cn = "decode work vs prefix";
  char where[200];
  snprintf(where, sizeof where, "decode steps after a %d- and a %d-token prefix", GROWTH_SHORT, GROWTH_LONG);
  if (vf_raw_read(r, "stage 6 (decode growth)", 2, sl, ev) < 0) return ev;
  if (!sl[0].type || !sl[1].type) {
    if (sl[0].type != VF_REC_FAIL) return vf_ev_start(ev, cn, 0, where), ev;
  }
  for (int k = 0; k < 2; k++)
    if (sl[k].type == VF_REC_FAIL || (sl[k].type && sl[k].payload_len != sizeof(double) * GROWTH_STEPS * 2))
      return vf_ev_end(ev, cn, 0, 0, 0, NULL, "%s", sl[k].type == VF_REC_FAIL ? sl[k].msg : "a record of the wrong size"),
             ev;
  double f[2][GROWTH_STEPS][2];
  memcpy(f[0], sl[0].payload, sizeof f[0]);
  memcpy(f[1], sl[1].payload, sizeof f[1]);
  char msg[1200] = "";
  double worst_other = 0, worst_attn = 0;
  for (int st = 0; st < GROWTH_STEPS && !msg[0]; st++) {
    double o0 = f[0][st][0], o1 = f[1][st][0], a0 = f[0][st][1], a1 = f[1][st][1];
    /* positions of this step's token: P + st */
    double lin = (double)(GROWTH_LONG + st + 1) / (double)(GROWTH_SHORT + st + 1);
    if (!(o0 > 0) || !isfinite(o1))
      snprintf(msg, sizeof msg, "decode step %d requested no platform work outside attention: nothing to measure", st);
    else {
      double ro = fabs(o1 - o0) / o0, ra = a0 > 0 ? a1 / (a0 * lin) : (a1 > 0 ? INFINITY : 0);
      worst_other = fmax(worst_other, ro);
      worst_attn = fmax(worst_attn, ra);
      if (!(ro <= GROWTH_TOL))
        snprintf(msg, sizeof msg,
                 "decode cost grows with the prefix: non-attention work per decode step (step %d) is %.4g after a "
                 "%d-token prefix and %.4g after a %d-token prefix (%.1fx; a decode step processes one token: the "
                 "prefix is recomputed or reprocessed)", st, o1, GROWTH_LONG, o0, GROWTH_SHORT, o1 / o0);
      else if (!(ra <= 1 + GROWTH_TOL))
        snprintf(msg, sizeof msg,
                 "attention work per decode step grows faster than the position: %.4g after a %d-token prefix, "
                 "%.4g after a %d-token prefix (step %d: %.2fx the linear bound)", a1, GROWTH_LONG, a0, GROWTH_SHORT,
                 st, ra);
    }
  }
  json_t *x = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f}", "prefix_short", GROWTH_SHORT, "prefix_long",
                        GROWTH_LONG, "steps", GROWTH_STEPS, "other_work_short", f[0][0][0], "other_work_long",
                        f[1][0][0], "attention_work_short", f[0][0][1], "attention_work_long", f[1][0][1],
                        "max_other_growth", worst_other);
  if (msg[0]) vf_ev_end(ev, cn, 0, 0, worst_other, x, "%s", msg);
  else
    vf_ev_end(ev, cn, 0, 1, worst_other, x,
              "decode work per step after a %d- vs a %d-token prefix: non-attention equal (max diff %.2g), "
              "attention %.2f of the linear bound", GROWTH_LONG, GROWTH_SHORT, worst_other, worst_attn);
  return ev;
}

json_t *vf_decode_growth(const vf_stage_opts *o) {
  char wd[4096];
  if (vf_workdir_new(wd, sizeof wd) != 0)
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "performance", "id", "decode_growth", "verdict", "FAIL",
                     "status", "ERROR", "message", "cannot create a scratch folder");
  growth_job j = {o, wd};
  json_t *u = vf_run_unit_raw(o, "performance", "decode_growth", "decode growth (6d)", growth_child, &j, 120,
                              VF_REC_SIZE(0) * 8 + 2 * VF_REC_SIZE(sizeof(double) * GROWTH_STEPS * 2), growth_judge);
  vf_rmtree(wd);
  const char *note = json_string_value(json_object_get(json_array_get(json_object_get(u, "cases"), 0), "note"));
  if (note) json_object_set_new(u, "summary", json_string(note)); /* the console's line */
  return u;
}
