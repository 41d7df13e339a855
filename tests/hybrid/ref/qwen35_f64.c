/* A hand-written float64 model of the Qwen3.5/3.6-style hybrid (HF
 * Qwen3_5ForCausalLM) with a sequence state, kept only for the tests that
 * decode it token by token and hold the contract's interpretation to a
 * second computation (tests/hybrid, tests/verify/test_interp.c); the
 * verifier itself interprets the model contract (interp.h) and names no
 * family. Written from the math
 * (docs/hybrid.md), in float64, reading the weight files directly and
 * sharing no code with any plugin. Every operator comes from ref/f64.c.
 *
 *   decoder layer l:  x += mixer_l(rmsnorm₁₊w(x));  x += mlp(rmsnorm₁₊w(x))
 *   mixer = full attention where layer_types[l] == "full_attention":
 *     q_proj → per head [query | gate]; q_norm/k_norm (1+w); NeoX RoPE on
 *     the first partial_rotary_factor·head_dim channels; GQA causal softmax;
 *     · sigmoid(gate); o_proj
 *   mixer = gated DeltaNet where "linear_attention":
 *     in_proj_qkv → causal depthwise conv1d (state: last K-1 inputs) → SiLU
 *     → q, k, v; q, k L2-normalised, q · 1/√Dk; beta = sigmoid(in_proj_b),
 *     g = −exp(A_log)·softplus(in_proj_a + dt_bias); gated delta rule
 *     (state [Hv, Dk, Dv]); gated RMSNorm w·norm(o)·silu(in_proj_z);
 *     out_proj
 *   final rmsnorm (1+w), lm_head or tied embeddings. */
#include "tests/hybrid/ref/qwen35_f64.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/safetensors.h"
#include "core/verify/interp.h"
#include "core/verify/ref/f64.h"

#define L2_EPS 1e-6 /* HF's l2norm inside the gated delta rule */

struct vf_qwen35 {
  int H, L, nh, nkv, hd, F, V, tied, rot; /* rot: rotary channels per head */
  int kh, vh, dk, dv, K;                  /* DeltaNet heads, widths, conv kernel */
  int rot_cfg;                            /* rot from the config (full_rotary variant: hd) */
  vf_qwen35_variant var;                  /* the math's hypothesis (defaults: the true model) */
  double eps, theta;
  unsigned char *full;                    /* [L] 1 = full_attention */
  const struct mi_weights *w;
  const char *prefix;                     /* "model." or "model.language_model." (the released layout) */
  /* the embedding and lm_head widened once, on the first forward: a decode
   * test calls forward per token, and these are most of the bytes */
  double *emb, *lm;                       /* [V, H]; lm == emb when tied */
};

typedef struct q35_layer_state {
  double *kc, *vc;   /* full: [cap, nkv, hd] */
  double *conv, *S;  /* linear: [K-1, C], [vh, dk, dv] */
} q35_layer_state;

struct vf_qwen35_seq {
  int L, cap, len;
  q35_layer_state *ls; /* [L] */
};

static int cfg_int(const json_t *cfg, const char *k, int *out, char *err, size_t n) {
  json_t *v = json_object_get(cfg, k);
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24)) {
    snprintf(err, n, "config.json: \"%s\" is missing or not a positive integer", k);
    return -1;
  }
  *out = (int)json_integer_value(v);
  return 0;
}

/* A number from rope_parameters (the current HF layout) or the top level
 * (older configs), else the default. */
static double rope_num(const json_t *cfg, const char *k, double dflt) {
  json_t *v = json_object_get(json_object_get(cfg, "rope_parameters"), k);
  if (!json_is_number(v)) v = json_object_get(cfg, k);
  return json_is_number(v) ? json_number_value(v) : dflt;
}

int vf_qwen35_open(const json_t *cfg_in, const struct mi_weights *w, vf_qwen35 **out, char *err,
                   size_t n) {
  *out = NULL;
  /* the released layout (Qwen3_5ForConditionalGeneration) keeps the text
   * model's fields under "text_config" and its weights under
   * "model.language_model."; tie_word_embeddings may sit at either level */
  const json_t *cfg = cfg_in;
  json_t *tc = json_object_get(cfg_in, "text_config");
  if (json_is_object(tc)) cfg = tc;
  vf_qwen35 *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, n, "reference: out of memory");
    return -1;
  }
  const char *ints[] = {"hidden_size",          "num_hidden_layers",      "num_attention_heads",
                        "num_key_value_heads",  "head_dim",               "intermediate_size",
                        "vocab_size",           "linear_num_key_heads",   "linear_num_value_heads",
                        "linear_key_head_dim",  "linear_value_head_dim",  "linear_conv_kernel_dim"};
  int *dst[] = {&m->H, &m->L, &m->nh, &m->nkv, &m->hd, &m->F, &m->V, &m->kh, &m->vh, &m->dk, &m->dv, &m->K};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
    if (cfg_int(cfg, ints[i], dst[i], err, n) != 0) goto fail;
  if (m->nh % m->nkv || m->vh % m->kh) {
    snprintf(err, n, "config.json: heads %d / kv heads %d, linear value heads %d / key heads %d: not multiples",
             m->nh, m->nkv, m->vh, m->kh);
    goto fail;
  }
  double prf = rope_num(cfg, "partial_rotary_factor", 0.25); /* HF's default */
  m->rot = (int)(prf * m->hd);
  if (!(prf > 0 && prf <= 1) || m->rot < 2 || m->rot % 2) {
    snprintf(err, n, "config.json: partial_rotary_factor %g gives %d rotary channels of head_dim %d (need an even "
             "number >= 2)", prf, m->rot, m->hd);
    goto fail;
  }
  m->rot_cfg = m->rot;
  vf_qwen35_variant_default(&m->var);
  m->theta = rope_num(cfg, "rope_theta", 1e7);
  json_t *e = json_object_get(cfg, "rms_norm_eps");
  m->eps = json_is_number(e) ? json_number_value(e) : 1e-6;
  m->tied = json_is_true(json_object_get(cfg, "tie_word_embeddings")) ||
            (cfg != cfg_in && json_is_true(json_object_get(cfg_in, "tie_word_embeddings")));
  m->full = calloc((size_t)m->L, 1);
  if (!m->full) {
    snprintf(err, n, "reference: out of memory");
    goto fail;
  }
  json_t *lt = json_object_get(cfg, "layer_types");
  if (lt) {
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)m->L) {
      snprintf(err, n, "config.json: \"layer_types\" must be an array of num_hidden_layers (%d) strings", m->L);
      goto fail;
    }
    for (int l = 0; l < m->L; l++) {
      const char *t = json_string_value(json_array_get(lt, (size_t)l));
      if (t && !strcmp(t, "full_attention"))
        m->full[l] = 1;
      else if (!t || strcmp(t, "linear_attention")) {
        snprintf(err, n, "config.json: layer_types[%d] \"%s\" is neither linear_attention nor full_attention", l,
                 t ? t : "?");
        goto fail;
      }
    }
  } else { /* HF's default: every full_attention_interval-th layer is full */
    json_t *fi = json_object_get(cfg, "full_attention_interval");
    int iv = json_is_integer(fi) && json_integer_value(fi) > 0 ? (int)json_integer_value(fi) : 4;
    for (int l = 0; l < m->L; l++) m->full[l] = (l + 1) % iv == 0;
  }
  m->w = w;
  mi_weight_info wi;
  m->prefix = w && mi_weights_find(w, "model.language_model.embed_tokens.weight", &wi) == 0 ? "model.language_model."
                                                                                          : "model.";
  *out = m;
  return 0;
fail:
  free(m->full);
  free(m);
  return -1;
}

void vf_qwen35_close(vf_qwen35 *m) {
  if (!m) return;
  if (m->lm != m->emb) free(m->lm);
  free(m->emb);
  free(m->full);
  free(m);
}

int vf_qwen35_vocab(const vf_qwen35 *m) { return m->V; }

void vf_qwen35_variant_default(vf_qwen35_variant *v) {
  v->norm_offset = 1.0;
  v->qk = VF_Q35_QK_1W;
  v->full_rotary = 0;
  v->gate = VF_Q35_GATE_INTERLEAVED;
}

void vf_qwen35_set_variant(vf_qwen35 *m, const vf_qwen35_variant *v) {
  m->var = *v;
  m->rot = v->full_rotary ? m->hd : m->rot_cfg;
}

static int64_t conv_dim(const vf_qwen35 *m) { return 2 * (int64_t)m->kh * m->dk + (int64_t)m->vh * m->dv; }

void vf_qwen35_seq_free(vf_qwen35_seq *s) {
  if (!s) return;
  for (int l = 0; s->ls && l < s->L; l++) {
    free(s->ls[l].kc);
    free(s->ls[l].vc);
    free(s->ls[l].conv);
    free(s->ls[l].S);
  }
  free(s->ls);
  free(s);
}

vf_qwen35_seq *vf_qwen35_seq_new(const vf_qwen35 *m, int cap) {
  vf_qwen35_seq *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->L = m->L;
  s->cap = cap;
  s->ls = calloc((size_t)m->L, sizeof *s->ls);
  int ok = s->ls != NULL;
  for (int l = 0; ok && l < m->L; l++) {
    q35_layer_state *ls = &s->ls[l];
    if (m->full[l]) {
      size_t kv = (size_t)cap * m->nkv * m->hd;
      ok = (ls->kc = calloc(kv, sizeof(double))) && (ls->vc = calloc(kv, sizeof(double)));
    } else { /* +1: a kernel of 1 has an empty conv state */
      ok = (ls->conv = calloc((size_t)(m->K - 1) * (size_t)conv_dim(m) + 1, sizeof(double))) &&
           (ls->S = calloc((size_t)m->vh * m->dk * m->dv, sizeof(double)));
    }
  }
  if (!ok) {
    vf_qwen35_seq_free(s);
    return NULL;
  }
  return s;
}

/* Scratch for T tokens (one allocation per forward call; the reference is
 * written for clarity, not speed). */
typedef struct q35_buf {
  double *x, *h, *o;            /* [T, H] */
  double *qg;                   /* [T, nh, 2, hd] q_proj output: query | gate per head */
  double *q, *gate, *at;        /* [T, nh, hd] */
  double *k, *v;                /* [T, nkv, hd] */
  double *qkv, *cv;             /* [T, C] in_proj_qkv output, after conv + SiLU */
  double *lq, *lk;              /* [T, kh, dk] */
  double *lv, *z, *core;        /* [T, vh, dv] */
  double *a, *b, *g, *beta;     /* [T, vh] */
  double *mg, *mu;              /* [T, F] */
  double *pos;                  /* [T] */
} q35_buf;

/* buf_new/buf_free walk the struct as an array of pointers */
_Static_assert(sizeof(q35_buf) == 23 * sizeof(double *), "q35_buf: update buf_new's sizes");

static void buf_free(q35_buf *b) {
  double **p = (double **)b;
  for (size_t i = 0; i < sizeof *b / sizeof(double *); i++) free(p[i]);
}

static int buf_new(q35_buf *b, const vf_qwen35 *m, int T) {
  memset(b, 0, sizeof *b);
  const size_t t = (size_t)T, C = (size_t)conv_dim(m);
  const size_t sizes[] = {t * m->H, t * m->H, t * m->H, t * m->nh * 2 * m->hd, t * m->nh * m->hd,
                          t * m->nh * m->hd, t * m->nh * m->hd, t * m->nkv * m->hd, t * m->nkv * m->hd,
                          t * C, t * C, t * m->kh * m->dk, t * m->kh * m->dk, t * m->vh * m->dv,
                          t * m->vh * m->dv, t * m->vh * m->dv, t * m->vh, t * m->vh, t * m->vh, t * m->vh,
                          t * m->F, t * m->F, t};
  double **p = (double **)b;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    if (!(p[i] = malloc(sizes[i] * sizeof(double)))) return -1;
  return 0;
}

/* Layer l's tensors widened to float64, by suffix; NULL-terminated list. */
static int load(const vf_qwen35 *m, int l, const char *const *names, const size_t *sizes, double **out,
                int count, char *err, size_t n) {
  char name[256];
  for (int i = 0; i < count; i++) out[i] = NULL;
  for (int i = 0; i < count; i++) {
    snprintf(name, sizeof name, "%slayers.%d.%s", m->prefix, l, names[i]);
    if (!(out[i] = vf_weight_f64(m->w, name, sizes[i], err, n))) return -1;
  }
  return 0;
}

static int full_attention(const vf_qwen35 *m, q35_layer_state *ls, q35_buf *b, int l, int T, int pos0,
                          double *max_score, char *err, size_t n) {
  const int nh = m->nh, nkv = m->nkv, hd = m->hd;
  static const char *const nm[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                   "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                   "self_attn.q_norm.weight", "self_attn.k_norm.weight"};
  const size_t sz[] = {(size_t)2 * nh * hd * m->H, (size_t)nkv * hd * m->H, (size_t)nkv * hd * m->H,
                       (size_t)m->H * nh * hd, (size_t)hd, (size_t)hd};
  double *W[6];
  int rc = load(m, l, nm, sz, W, 6, err, n);
  if (rc == 0) {
    vf_f64_matmul(b->qg, b->h, W[0], T, 2 * nh * hd, m->H);
    const size_t qh = (size_t)nh * hd; /* one token's query (or gate) channels */
    for (int t = 0; t < T; t++) {
      const double *row = b->qg + (size_t)t * 2 * qh;
      if (m->var.gate == VF_Q35_GATE_INTERLEAVED) /* per head: hd query rows, then hd gate rows */
        for (int h = 0; h < nh; h++) {
          memcpy(b->q + t * qh + (size_t)h * hd, row + (size_t)h * 2 * hd, hd * sizeof(double));
          memcpy(b->gate + t * qh + (size_t)h * hd, row + (size_t)h * 2 * hd + hd, hd * sizeof(double));
        }
      else { /* HALF and NONE: the query is the first half; HALF's gate the second */
        memcpy(b->q + t * qh, row, qh * sizeof(double));
        memcpy(b->gate + t * qh, row + qh, qh * sizeof(double));
      }
    }
    vf_f64_matmul(b->k, b->h, W[1], T, nkv * hd, m->H);
    vf_f64_matmul(b->v, b->h, W[2], T, nkv * hd, m->H);
    if (m->var.qk != VF_Q35_QK_NONE) {
      const double off = m->var.qk == VF_Q35_QK_1W ? 1.0 : 0.0;
      vf_f64_rmsnorm(b->q, b->q, W[4], (int64_t)T * nh, hd, m->eps, off);
      vf_f64_rmsnorm(b->k, b->k, W[5], (int64_t)T * nkv, hd, m->eps, off);
    }
    vf_f64_rope(b->q, b->pos, T, nh, (int64_t)nh * hd, hd, m->rot, m->theta);
    vf_f64_rope(b->k, b->pos, T, nkv, (int64_t)nkv * hd, hd, m->rot, m->theta);
    const size_t row = (size_t)nkv * hd;
    memcpy(ls->kc + (size_t)pos0 * row, b->k, (size_t)T * row * sizeof(double));
    memcpy(ls->vc + (size_t)pos0 * row, b->v, (size_t)T * row * sizeof(double));
    rc = vf_f64_attention(b->at, b->q, ls->kc, ls->vc, T, nh, nkv, hd, pos0, 1.0 / sqrt((double)hd), max_score);
    if (rc) snprintf(err, n, "reference: out of memory");
  }
  if (rc == 0) {
    if (m->var.gate != VF_Q35_GATE_NONE) vf_f64_sigmoid_mul(b->at, b->at, b->gate, (int64_t)T * nh * hd);
    vf_f64_matmul(b->o, b->at, W[3], T, m->H, nh * hd);
  }
  for (int i = 0; i < 6; i++) free(W[i]);
  return rc;
}

static int gated_deltanet(const vf_qwen35 *m, q35_layer_state *ls, q35_buf *b, int l, int T, int chunk,
                          char *err, size_t n) {
  const int64_t KD = (int64_t)m->kh * m->dk, VD = (int64_t)m->vh * m->dv, C = conv_dim(m), H = m->H;
  static const char *const nm[] = {"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
                                   "linear_attn.in_proj_b.weight",   "linear_attn.in_proj_a.weight",
                                   "linear_attn.conv1d.weight",      "linear_attn.dt_bias",
                                   "linear_attn.A_log",              "linear_attn.norm.weight",
                                   "linear_attn.out_proj.weight"};
  const size_t sz[] = {(size_t)(C * H), (size_t)(VD * H), (size_t)m->vh * H, (size_t)m->vh * H,
                       (size_t)(C * m->K), (size_t)m->vh, (size_t)m->vh, (size_t)m->dv, (size_t)(H * VD)};
  double *W[9];
  int rc = load(m, l, nm, sz, W, 9, err, n);
  if (rc == 0) {
    vf_f64_matmul(b->qkv, b->h, W[0], T, C, H);
    /* conv1d.weight [C, 1, K] is [C, K] in memory */
    rc = vf_f64_conv1d_causal(b->cv, b->qkv, W[4], ls->conv, T, C, m->K);
    if (rc) snprintf(err, n, "reference: out of memory");
  }
  if (rc == 0) {
    vf_f64_silu(b->cv, b->cv, (int64_t)T * C);
    for (int t = 0; t < T; t++) { /* channels: q [KD], k [KD], v [VD] */
      memcpy(b->lq + t * KD, b->cv + t * C, (size_t)KD * sizeof(double));
      memcpy(b->lk + t * KD, b->cv + t * C + KD, (size_t)KD * sizeof(double));
      memcpy(b->lv + t * VD, b->cv + t * C + 2 * KD, (size_t)VD * sizeof(double));
    }
    vf_f64_l2norm(b->lq, b->lq, (int64_t)T * m->kh, m->dk, L2_EPS);
    vf_f64_l2norm(b->lk, b->lk, (int64_t)T * m->kh, m->dk, L2_EPS);
    const double scale = 1.0 / sqrt((double)m->dk);
    for (int64_t i = 0; i < (int64_t)T * KD; i++) b->lq[i] *= scale;
    vf_f64_matmul(b->z, b->h, W[1], T, VD, H);
    vf_f64_matmul(b->b, b->h, W[2], T, m->vh, H);
    vf_f64_matmul(b->a, b->h, W[3], T, m->vh, H);
    vf_f64_deltanet_gates(b->g, b->beta, b->a, b->b, W[6], W[5], T, m->vh);
    rc = chunk > 0 ? vf_f64_gated_delta_rule_chunked(b->core, ls->S, b->lq, b->lk, b->lv, b->g, b->beta, T, m->kh,
                                                     m->vh, m->dk, m->dv, chunk)
                   : vf_f64_gated_delta_rule(b->core, ls->S, b->lq, b->lk, b->lv, b->g, b->beta, T, m->kh, m->vh,
                                             m->dk, m->dv);
    if (rc) snprintf(err, n, "reference: gated delta rule failed (heads or memory)");
  }
  if (rc == 0) {
    vf_f64_rmsnorm_gated(b->core, b->core, W[7], b->z, (int64_t)T * m->vh, m->dv, m->eps);
    vf_f64_matmul(b->o, b->core, W[8], T, H, VD);
  }
  for (int i = 0; i < 9; i++) free(W[i]);
  return rc;
}

static int mlp(const vf_qwen35 *m, q35_buf *b, int l, int T, char *err, size_t n) {
  static const char *const nm[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
  const size_t sz[] = {(size_t)m->F * m->H, (size_t)m->F * m->H, (size_t)m->H * m->F};
  double *W[3];
  int rc = load(m, l, nm, sz, W, 3, err, n);
  if (rc == 0) {
    vf_f64_matmul(b->mg, b->h, W[0], T, m->F, m->H);
    vf_f64_matmul(b->mu, b->h, W[1], T, m->F, m->H);
    vf_f64_silu_mul(b->mg, b->mg, b->mu, (int64_t)T * m->F);
    vf_f64_matmul(b->o, b->mg, W[2], T, m->H, m->F);
  }
  for (int i = 0; i < 3; i++) free(W[i]);
  return rc;
}

int vf_qwen35_forward(vf_qwen35 *m, vf_qwen35_seq *s, const int32_t *ids, int T, int n_out,
                      double *logits, int chunk, double *max_score, char *err, size_t n) {
  const int H = m->H, V = m->V;
  if (T < 1 || n_out < 0 || n_out > T || s->len + T > s->cap || chunk < 0) {
    snprintf(err, n, "reference: bad lengths T=%d n_out=%d (sequence at %d of %d)", T, n_out, s->len, s->cap);
    return -1;
  }
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= V) {
      snprintf(err, n, "reference: token id %d outside [0, %d)", ids[t], V);
      return -1;
    }
  q35_buf b;
  double *nw = NULL, *wn = NULL;
  int rc = -1;
  if (buf_new(&b, m, T) != 0) {
    snprintf(err, n, "reference: out of memory");
    goto done;
  }
  char name[256];
  snprintf(name, sizeof name, "%sembed_tokens.weight", m->prefix);
  if (!m->emb && !(m->emb = vf_weight_f64(m->w, name, (size_t)V * H, err, n))) goto done;
  if (!m->lm && !(m->lm = m->tied ? m->emb : vf_weight_f64(m->w, "lm_head.weight", (size_t)V * H, err, n)))
    goto done;
  for (int t = 0; t < T; t++) {
    memcpy(b.x + (size_t)t * H, m->emb + (size_t)ids[t] * H, (size_t)H * sizeof(double));
    b.pos[t] = s->len + t;
  }
  for (int l = 0; l < m->L; l++) {
    snprintf(name, sizeof name, "%slayers.%d.input_layernorm.weight", m->prefix, l);
    if (!(wn = vf_weight_f64(m->w, name, (size_t)H, err, n))) goto done;
    vf_f64_rmsnorm(b.h, b.x, wn, T, H, m->eps, m->var.norm_offset);
    free(wn);
    wn = NULL;
    if ((m->full[l] ? full_attention(m, &s->ls[l], &b, l, T, s->len, max_score, err, n)
                    : gated_deltanet(m, &s->ls[l], &b, l, T, chunk, err, n)) != 0)
      goto done;
    vf_f64_add(b.x, b.x, b.o, (int64_t)T * H);
    snprintf(name, sizeof name, "%slayers.%d.post_attention_layernorm.weight", m->prefix, l);
    if (!(wn = vf_weight_f64(m->w, name, (size_t)H, err, n))) goto done;
    vf_f64_rmsnorm(b.h, b.x, wn, T, H, m->eps, m->var.norm_offset);
    free(wn);
    wn = NULL;
    if (mlp(m, &b, l, T, err, n) != 0) goto done;
    vf_f64_add(b.x, b.x, b.o, (int64_t)T * H);
  }
  s->len += T;
  if (n_out > 0) {
    snprintf(name, sizeof name, "%snorm.weight", m->prefix);
    if (!(nw = vf_weight_f64(m->w, name, (size_t)H, err, n))) goto done;
    vf_f64_rmsnorm(b.h, b.x + (size_t)(T - n_out) * H, nw, n_out, H, m->eps, m->var.norm_offset);
    vf_f64_matmul(logits, b.h, m->lm, n_out, V, H);
  }
  rc = 0;
done:
  free(nw);
  free(wn);
  buf_free(&b);
  return rc;
}
