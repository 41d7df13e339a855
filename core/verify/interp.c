/* See interp.h. One forward from scratch: every buffer of the contract,
 * every layer's caches and state, allocated for this call; each step's
 * arguments bound from the contract and handed to the operator's float64
 * reference by name, as stage 1 hands them a case. */
#define _GNU_SOURCE
#include "core/verify/interp.h"
#include "mi/quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/safetensors.h"
#include "core/verify/bind.h"
#include "core/verify/ref/f64.h"
#include "core/verify/verify.h"
#include "mi/host.h"

#define MAX_BUFS 128
#define MAX_LAYER_BUFS 8

struct vf_interp {
  const mi_ckb *c;
  const json_t *model, *cfg;
  const struct mi_weights *w;
  int64_t layers, vocab;
  /* the weights: the files (w), or a caller's source (stage 2) */
  vf_weight_src src;
  void *src_user;
  const json_t *layout; /* the checkpoint layout cfg names (renamed weights), or NULL */
  /* stage 2's twin of a device layer: real arguments of kind f32 rounded to
   * float as the kernels get them; the cache kept exact (the device's is f32) */
  int layer_mode;
  /* the widened weights of the step being run, one slot per weight argument,
   * kept for the next step: a fresh allocation per step (hundreds of MB for
   * a vocabulary-sized matrix) cost more in page faults than the widening */
  double *wscratch[VF_BIND_MAX_ARGS];
  size_t wscratch_n[VF_BIND_MAX_ARGS];
};

/* What names mean while the steps of one call are bound: the binder, and
 * the storage of every buffer it sizes. */
typedef struct scope {
  vf_interp *m;
  vf_binder b;
  vf_bbuf bufs[MAX_BUFS]; /* the contract's buffers */
  double *bp[MAX_BUFS];
  int nbufs;
  vf_bbuf *lbufs; /* [layers][MAX_LAYER_BUFS]: caches and state */
  double **lp;
  int *nl;
  double *max_score;
} scope;

static int fail(scope *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(scope *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->b.err, s->b.err_len, fmt, ap);
  va_end(ap);
  return -1;
}

/* vf_weight_f64 into *buf (capacity *cap doubles, grown as needed; the
 * caller's to free): *buf, or NULL with err set. */
static double *weight_f64_into(const struct mi_weights *w, const char *name, size_t expect, double **buf, size_t *cap,
                               char *err, size_t err_len);

double *vf_weight_f64(const struct mi_weights *w, const char *name, size_t expect, char *err,
                      size_t err_len) {
  double *buf = NULL;
  size_t cap = 0;
  double *out = weight_f64_into(w, name, expect, &buf, &cap, err, err_len);
  if (!out) free(buf);
  return out;
}

static double *weight_f64_into(const struct mi_weights *w, const char *name, size_t expect, double **buf, size_t *cap,
                               char *err, size_t err_len) {
  mi_weight_info wi;
  if (mi_weights_find(w, name, &wi) != 0) {
    snprintf(err, err_len, "reference: no tensor \"%s\"", name);
    return NULL;
  }
  size_t n = 1;
  for (int i = 0; i < wi.ndim; i++) n *= (size_t)wi.shape[i];
  const int block = wi.dtype >= 0 && wi.dtype < MI_DTYPE_COUNT && mi_dtype_is_block((mi_dtype)wi.dtype) &&
                    wi.ndim >= 1 && mi_dtype_row_bytes((mi_dtype)wi.dtype, wi.shape[wi.ndim - 1]) > 0;
  if (n != expect ||
      (!block && wi.dtype != MI_DTYPE_BF16 && wi.dtype != MI_DTYPE_F16 && wi.dtype != MI_DTYPE_F32)) {
    snprintf(err, err_len, "reference: tensor \"%s\" has %zu elements of dtype %d, expected %zu",
             name, n, wi.dtype, expect);
    return NULL;
  }
  if (*cap < n) { /* nothing in it to keep: not a realloc's copy */
    free(*buf);
    *cap = (*buf = malloc(n * sizeof(double))) ? n : 0;
    if (!*buf) {
      snprintf(err, err_len, "reference: out of memory");
      return NULL;
    }
  }
  double *out = *buf;
  const unsigned char *p = wi.data;
  if (block) { /* a GGUF block type: each value exactly as quant.h defines it */
    mi_quant_row_f64((mi_dtype)wi.dtype, p, (int64_t)n, out);
    return out;
  }
  for (size_t i = 0; i < n; i++)
    out[i] = mi_float_value((mi_dtype)wi.dtype, p, i);
  return out;
}

/* A buffer's storage: zeroed doubles of the size the binder gave it. */
static int alloc_buf(scope *s, const vf_bbuf *b, double **p) {
  *p = calloc((size_t)(b->n ? b->n : 1), sizeof(double)); /* [n] */
  return *p ? 0 : fail(s, "reference: out of memory for buffer %s (%lld doubles)", b->name, (long long)b->n);
}

static double *buf_storage(scope *s, int idx) {
  return idx < s->nbufs ? s->bp[idx] : s->lp[s->b.layer * MAX_LAYER_BUFS + idx - s->nbufs];
}

/* ---------- one step ---------- */

/* The cache rows this chunk stored, rounded as the engine's cache type
 * rounds them (kv.c), before an attention reads them (operator.attention,
 * or a generated masked attention over a window of keys). */
static int round_new_kv(scope *s, const char *sname, vf_arg *args, int na) {
  double *kc = NULL, *vc = NULL;
  int64_t T = 0, Hkv = 0, D = 0, pos0 = 0;
  for (int k = 0; k < na; k++) {
    const char *n = args[k].name;
    if (!strcmp(n, "k_cache")) kc = args[k].val;
    else if (!strcmp(n, "v_cache")) vc = args[k].val;
    else if (!strcmp(n, "T")) T = args[k].i;
    else if (!strcmp(n, "Hkv")) Hkv = args[k].i;
    else if (!strcmp(n, "D")) D = args[k].i;
    else if (!strcmp(n, "pos0")) pos0 = args[k].i;
  }
  if (!kc || !vc) return fail(s, "step %s: no k_cache / v_cache argument", sname);
  if (!s->m->layer_mode) {
    vf_ref_round_kv(kc + pos0 * Hkv * D, T * Hkv * D);
    vf_ref_round_kv(vc + pos0 * Hkv * D, T * Hkv * D);
  }
  return 0;
}

static int run_attention(scope *s, const char *sname, vf_arg *args, int na) {
  /* the new cache rows rounded (round_new_kv), and the largest scaled score kept */
  double *out = NULL, *q = NULL, *kc = NULL, *vc = NULL, scale = 0;
  int64_t T = 0, Hq = 0, Hkv = 0, D = 0, pos0 = 0;
  for (int k = 0; k < na; k++) {
    const char *n = args[k].name;
    if (!strcmp(n, "out"))
      out = args[k].val;
    else if (!strcmp(n, "q"))
      q = args[k].val;
    else if (!strcmp(n, "k_cache"))
      kc = args[k].val;
    else if (!strcmp(n, "v_cache"))
      vc = args[k].val;
    else if (!strcmp(n, "T"))
      T = args[k].i;
    else if (!strcmp(n, "Hq"))
      Hq = args[k].i;
    else if (!strcmp(n, "Hkv"))
      Hkv = args[k].i;
    else if (!strcmp(n, "D"))
      D = args[k].i;
    else if (!strcmp(n, "pos0"))
      pos0 = args[k].i;
    else if (!strcmp(n, "scale"))
      scale = args[k].f;
  }
  if (!out || !q || !kc || !vc || Hkv <= 0 || Hq % Hkv)
    return fail(s, "step %s: attention's arguments do not fit", sname);
  if (round_new_kv(s, sname, args, na) != 0) return -1;
  if (vf_f64_attention(out, q, kc, vc, T, Hq, Hkv, D, pos0, scale, s->max_score) != 0)
    return fail(s, "reference: out of memory");
  return 0;
}

static int run_step(scope *s, const json_t *step) {
  /* the interpreter wants logits; an argmax step picks a token from them */
  const char *op = json_string_value(json_object_get(step, "operator"));
  const mi_ckb_entry *oe = op ? mi_ckb_find(s->m->c, op) : NULL;
  const char *ref = oe ? json_string_value(json_object_get(oe->json, "reference")) : NULL;
  if (ref && !strcmp(ref, "argmax")) return 0;
  vf_bstep bs;
  if (vf_bind_step(&s->b, s->m->c, step, &bs) != 0) return -1;
  vf_ref_fn fn = bs.reference ? vf_ref_find(bs.reference) : NULL;
  if (!fn) return fail(s, "step %s: %s has no float64 reference", bs.name, bs.op);
  vf_arg args[VF_BIND_MAX_ARGS];
  double *owned[VF_BIND_MAX_ARGS];
  int na = 0, no = 0, nw = 0, rc = 0;
  memset(args, 0, sizeof args);
  for (int k = 0; k < bs.nargs && rc == 0; k++) {
    const vf_barg *ba = &bs.a[k];
    if (ba->what == VB_NONE) continue; /* ctx, stream */
    vf_arg *a = &args[na++];
    a->name = ba->name;
    a->kind = ba->kind;
    a->dtype = MI_DTYPE_F32; /* float64 throughout */
    if (ba->what == VB_BUF) {
      a->val = buf_storage(s, ba->buf) + ba->off;
      a->n = ba->avail;
    } else if (ba->what == VB_WEIGHT) {
      char name[300];
      mi_ckb_layout_rename(s->m->layout, ba->wname, name, sizeof name);
      if (s->m->src) { /* the caller's values, the caller's allocation */
        a->val = owned[no] = s->m->src(s->m->src_user, ba->wkey, ba->wname, ba->wn, s->b.err, s->b.err_len);
        if (a->val) no++;
      } else {
        a->val = weight_f64_into(s->m->w, name, (size_t)ba->wn, &s->m->wscratch[nw], &s->m->wscratch_n[nw], s->b.err,
                                 s->b.err_len);
        nw++;
      }
      a->n = ba->wn;
      if (!a->val) rc = -1;
    } else if (ba->what == VB_INT) {
      a->i = ba->i;
    } else if (ba->what == VB_REAL) {
      a->f = s->m->layer_mode && ba->kind == VF_F32 ? (double)(float)ba->f : ba->f;
    }
  }
  if (rc == 0) {
    vf_call call = {args, na, oe ? oe->json : NULL};
    char e[400] = "";
    if (!strcmp(bs.reference, "attention"))
      rc = run_attention(s, bs.name, args, na);
    else if (!strcmp(bs.reference, "masked_attention") && round_new_kv(s, bs.name, args, na) != 0)
      rc = -1;
    else if (fn(&call, e, sizeof e) != 0)
      rc = fail(s, "step %s (%s): %s", bs.name, bs.op, e);
  } else if (strncmp(s->b.err, "step ", 5)) {
    char e2[600];
    snprintf(e2, sizeof e2, "%s", s->b.err);
    fail(s, "step %s (%s): %s", bs.name, bs.op, e2);
  }
  for (int k = 0; k < no; k++)
    free(owned[k]);
  return rc;
}

static int run_sequence(scope *s, const json_t *seq) {
  size_t i;
  json_t *st;
  json_array_foreach(seq, i, st) if (run_step(s, st) != 0) return -1;
  return 0;
}

/* ---------- the whole model ---------- */

vf_interp *vf_interp_open(const mi_ckb *c, const mi_ckb_entry *model, const json_t *cfg,
                          const struct mi_weights *w, char *err, size_t err_len) {
  return vf_interp_open_json(c, model->json, cfg, w, err, err_len);
}

vf_interp *vf_interp_open_json(const mi_ckb *c, const json_t *model_contract, const json_t *cfg,
                               const struct mi_weights *w, char *err, size_t err_len) {
  if (!json_is_object(model_contract)) {
    snprintf(err, err_len, "reference: the model contract is not a JSON object");
    return NULL;
  }
  const char *id = json_string_value(json_object_get(model_contract, "id")) ?: "(model contract)";
  vf_interp *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, err_len, "reference: out of memory");
    return NULL;
  }
  *m = (vf_interp){.c = c, .model = model_contract, .cfg = cfg, .w = w,
                   .layout = mi_ckb_model_layout(model_contract, cfg)};
  vf_binder b = {.model = model_contract, .cfg = cfg, .layer = -1, .err = err, .err_len = err_len};
  const char *lf = json_string_value(json_object_get(model_contract, "layers"));
  if (!lf || vf_bind_int(&b, lf, &m->layers) != 0 || m->layers < 1 || m->layers > 100000 ||
      vf_bind_int(&b, "vocab_size", &m->vocab) != 0 || m->vocab < 1) {
    char e[600];
    snprintf(e, sizeof e, "%s", err);
    snprintf(err, err_len, "%s: the layer count or vocab_size of this config.json: %s", id, e);
    free(m);
    return NULL;
  }
  return m;
}

void vf_interp_close(vf_interp *m) {
  if (!m) return;
  for (int k = 0; k < VF_BIND_MAX_ARGS; k++)
    free(m->wscratch[k]);
  free(m);
}

/* The caches and state of layer l (its kind's, or the contract's) */
static int layer_bufs(scope *s, int64_t l, const char *kind) {
  const json_t *lists[2];
  vf_bind_layer_lists(s->m->model, kind, lists);
  for (int k = 0; k < 2; k++) {
    size_t i;
    json_t *spec;
    json_array_foreach(lists[k], i, spec) {
      int at = s->nl[l];
      if (at == MAX_LAYER_BUFS)
        return fail(s, "layer %lld: more than %d caches and states", (long long)l, MAX_LAYER_BUFS);
      vf_bbuf *lb = &s->lbufs[l * MAX_LAYER_BUFS + at];
      if (vf_bind_buffer(&s->b, spec, lb) != 0 || alloc_buf(s, lb, &s->lp[l * MAX_LAYER_BUFS + at]) != 0)
        return -1;
      s->nl[l]++;
    }
  }
  return 0;
}

/* A scope for `layers` layers: the contract's buffers sized on the binder's
 * call (only those `only` names, when given), caches and state per layer. */
static scope *scope_new(vf_interp *m, int64_t layers, const vf_binder *b, const json_t *only) {
  scope *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(b->err, b->err_len, "reference: out of memory");
    return NULL;
  }
  s->m = m;
  s->b = *b;
  s->lbufs = calloc((size_t)layers * MAX_LAYER_BUFS, sizeof *s->lbufs);
  s->lp = calloc((size_t)layers * MAX_LAYER_BUFS, sizeof *s->lp);
  s->nl = calloc((size_t)layers, sizeof *s->nl);
  int rc = s->lbufs && s->lp && s->nl ? 0 : fail(s, "reference: out of memory");
  size_t i;
  json_t *spec;
  json_array_foreach(json_object_get(m->model, "buffers"), i, spec) {
    if (rc || s->nbufs == MAX_BUFS) {
      if (!rc)
        rc = fail(s, "%s: more than %d buffers", json_string_value(json_object_get(m->model, "id")), MAX_BUFS);
      break;
    }
    vf_bbuf *vb = &s->bufs[s->nbufs];
    const char *name = json_string_value(json_object_get(spec, "name"));
    if (only && name && !vf_bind_uses(only, name)) { /* not this layer's: left empty */
      *vb = (vf_bbuf){.name = name, .dtype = MI_DTYPE_F32};
      s->bp[s->nbufs++] = NULL;
      continue;
    }
    if ((rc = vf_bind_buffer(&s->b, spec, vb)) != 0 || (rc = alloc_buf(s, vb, &s->bp[s->nbufs])) != 0) break;
    s->nbufs++;
  }
  s->b.bufs = s->bufs;
  s->b.nbufs = s->nbufs;
  return s; /* on an error, err says it */
}

static void scope_free(scope *s, int64_t layers) {
  if (!s) return;
  for (int k = 0; k < s->nbufs; k++)
    free(s->bp[k]);
  for (int64_t l = 0; s->lp && s->nl && l < layers; l++)
    for (int k = 0; k < s->nl[l]; k++)
      free(s->lp[l * MAX_LAYER_BUFS + k]);
  free(s->lbufs);
  free(s->lp);
  free(s->nl);
  free(s);
}

static void enter_layer(scope *s, int64_t l) {
  s->b.layer = l;
  s->b.lbufs = l >= 0 ? s->lbufs + l * MAX_LAYER_BUFS : NULL;
  s->b.nlbufs = l >= 0 ? s->nl[l] : 0;
}

double *vf_interp_forward(vf_interp *m, const int32_t *ids, int T, int n_out, double *max_score,
                          char *err, size_t err_len) {
  if (T < 1 || n_out < 1 || n_out > T) {
    snprintf(err, err_len, "reference: bad lengths T=%d n_out=%d", T, n_out);
    return NULL;
  }
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= m->vocab) {
      snprintf(err, err_len, "reference: token id %d outside [0, %lld)", ids[t], (long long)m->vocab);
      return NULL;
    }
  err[0] = 0;
  vf_binder b = {.model = m->model, .cfg = m->cfg, .T = T, .pos0 = 0, .R = n_out, .r0 = T - n_out,
                 .n_ctx = T, .layer = -1, .err = err, .err_len = err_len};
  scope *s = scope_new(m, m->layers, &b, NULL);
  double *logits = NULL;
  if (!s) return NULL;
  s->max_score = max_score;
  const json_t *model = m->model;
  int rc = err[0] ? -1 : 0;
  for (int k = 0; rc == 0 && k < s->nbufs; k++) {
    const char *in = s->bufs[k].input;
    for (int t = 0; in && t < T && t < s->bufs[k].n; t++)
      s->bp[k][t] = !strcmp(in, "ids") ? ids[t] : !strcmp(in, "positions") ? t : 0;
  }
  const json_t *kinds = json_object_get(json_object_get(model, "layer_kinds"), "kinds");
  for (int64_t l = 0; rc == 0 && l < m->layers; l++) {
    const char *kind = kinds ? mi_ckb_layer_kind(model, m->cfg, l) : NULL;
    if (kinds && !kind) rc = fail(s, "layer %lld: its kind cannot be told from config.json", (long long)l);
    else rc = layer_bufs(s, l, kind);
  }
  if (rc == 0) rc = run_sequence(s, json_object_get(model, "prologue"));
  for (int64_t l = 0; rc == 0 && l < m->layers; l++) {
    enter_layer(s, l);
    rc = run_sequence(s, vf_bind_sequence(model, kinds ? mi_ckb_layer_kind(model, m->cfg, l) : NULL));
  }
  enter_layer(s, -1);
  if (rc == 0) rc = run_sequence(s, json_object_get(model, "epilogue"));
  int lg = -1;
  for (int k = 0; rc == 0 && k < s->nbufs; k++)
    if (!strcmp(s->bufs[k].name, "logits")) lg = k;
  if (rc == 0 && (lg < 0 || s->bufs[lg].n < (int64_t)n_out * m->vocab))
    rc = fail(s, "the contract's \"logits\" buffer is missing or holds fewer than %d x %lld values", n_out,
              (long long)m->vocab);
  if (rc == 0 && (logits = malloc((size_t)n_out * (size_t)m->vocab * sizeof(double)))) /* [n_out, vocab] */
    memcpy(logits, s->bp[lg], (size_t)n_out * (size_t)m->vocab * sizeof(double));
  else if (rc == 0)
    fail(s, "reference: out of memory");
  scope_free(s, m->layers);
  return logits;
}

/* ---------- one layer (stage 2's twin) ---------- */

struct vf_interp_layer {
  vf_interp m;
  const char *kind;
  const json_t *seq;
  int resid; /* the residual stream's buffer index */
  int64_t t_max, n_ctx;
  scope *s;
};

vf_interp_layer *vf_interp_layer_new(const mi_ckb *c, const json_t *model, const json_t *cfg,
                                     const char *kind, int64_t t_max, int64_t n_ctx, vf_weight_src src,
                                     void *user, char *err, size_t err_len) {
  vf_interp_layer *L = calloc(1, sizeof *L);
  if (!L) {
    snprintf(err, err_len, "reference: out of memory");
    return NULL;
  }
  L->m = (vf_interp){.c = c, .model = model, .cfg = cfg, .layers = 1, .src = src, .src_user = user,
                     .layer_mode = 1};
  L->kind = kind;
  L->seq = vf_bind_sequence(model, kind);
  L->t_max = t_max;
  L->n_ctx = n_ctx;
  err[0] = 0;
  const char *res = vf_bind_residual(c, model);
  if (!json_is_array(L->seq) || !res) {
    snprintf(err, err_len, "%s: no step sequence for layer kind %s, or no residual stream written by the prologue",
             json_string_value(json_object_get(model, "id")) ?: "?", kind ? kind : "(none)");
    free(L);
    return NULL;
  }
  vf_binder b = {.model = model, .cfg = cfg, .T = t_max, .R = t_max, .n_ctx = n_ctx, .layer = -1, .err = err,
                 .err_len = err_len};
  L->s = scope_new(&L->m, 1, &b, L->seq);
  L->resid = -1;
  for (int k = 0; L->s && k < L->s->nbufs; k++)
    if (!strcmp(L->s->bufs[k].name, res)) L->resid = k;
  if (L->s && !err[0] && (L->resid < 0 || !L->s->bp[L->resid]))
    fail(L->s, "%s: the layer does not use the residual stream %s", json_string_value(json_object_get(model, "id")) ?: "?", res);
  if (L->s && !err[0]) layer_bufs(L->s, 0, kind);
  if (!L->s || err[0]) {
    vf_interp_layer_free(L);
    return NULL;
  }
  return L;
}

int64_t vf_interp_layer_width(const vf_interp_layer *L) { return L->s->bufs[L->resid].row; }

int vf_interp_layer_run(vf_interp_layer *L, const double *x, int T, int pos0, double *out, char *err,
                        size_t err_len) {
  scope *s = L->s;
  if (T < 1 || T > L->t_max || pos0 < 0 || pos0 + T > L->n_ctx) {
    snprintf(err, err_len, "reference: T=%d at pos0=%d outside the layer's %lld tokens / %lld positions", T, pos0,
             (long long)L->t_max, (long long)L->n_ctx);
    return -1;
  }
  s->b.err = err;
  s->b.err_len = err_len;
  s->b.T = T;
  s->b.pos0 = pos0;
  s->b.R = T;
  s->b.r0 = 0;
  int64_t H = s->bufs[L->resid].row;
  memcpy(s->bp[L->resid], x, sizeof(double) * (size_t)(T * H));
  for (int k = 0; k < s->nbufs; k++)
    if (s->bp[k] && s->bufs[k].input && !strcmp(s->bufs[k].input, "positions"))
      for (int t = 0; t < T; t++) s->bp[k][t] = pos0 + t;
  enter_layer(s, 0);
  int rc = run_sequence(s, L->seq);
  if (rc == 0) memcpy(out, s->bp[L->resid], sizeof(double) * (size_t)(T * H)); /* [T, H] */
  return rc;
}

void vf_interp_layer_free(vf_interp_layer *L) {
  if (!L) return;
  scope_free(L->s, 1);
  for (int k = 0; k < VF_BIND_MAX_ARGS; k++)
    free(L->m.wscratch[k]);
  free(L);
}
