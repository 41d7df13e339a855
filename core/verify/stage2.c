/* Stage 2 of the verifier: one decoder layer of the model contract with
 * random weights, composed from the platform's kernels exactly as the
 * contract's step sequence says (one unit per layer kind, or one for the
 * contract's layer_sequence), run as a prefill and then two decode steps
 * through the same caches and state, against the contract's own float64
 * twin of the layer (interp.h) on the same (dtype-rounded) weights. It
 * catches what single kernels cannot: in-place use, strides and offsets
 * between kernels, the cache rows and carried state, positions across
 * calls, and memcpy_d2d (no kernel uses it; it carries the layer's input
 * into the residual stream and its output back out, as engines move rows
 * between their buffers).
 *
 * Nothing here knows a family. The shape is the test contract's
 * parameters.layer_config (config.json values, small and unlike any real
 * checkpoint) over the model contract's defaults; the weights come from
 * the contract's weight map (its init hints: "ones" 1 + 0.1·z, "zeros"
 * 0.1·z; other vectors 0.1·z, matrices z/sqrt(cols)), each in the dtype its
 * operator argument declares (a fixed f32 stays f32, a "$dtype" argument
 * gets the weight dtype under test); every step's arguments are bound by
 * the binder the twin uses (bind.h) and each kernel is called through
 * libffi with its operator contract's signature, as stage 1 calls it.
 *
 * Results come from the verifier's side: the parent draws the weights and
 * the inputs of every phase and binds every step (l2_plan) before the child
 * exists; the child uploads them, runs the kernels and returns only the
 * layer's outputs, as records (VF_REC_OUT: T*width floats); the parent runs
 * the float64 twin after the child has ended, compares and decides
 * (l2_judge). */
#define _GNU_SOURCE
#include <ffi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "core/runtime/model_input.h"
#include "core/runtime/packs.h"
#include "core/runtime/rng.h"
#include "core/verify/bind.h"
#include "core/verify/ffi_call.h"
#include "core/verify/interp.h"
#include "core/verify/quant_input.h"
#include "core/verify/verify.h"

enum { T_MAX = 5, N_CTX = 16 };

static const struct {
  const char *name;
  int T, pos0;
} phases[] = {{"prefill", 5, 0}, {"decode_1", 1, 5}, {"decode_2", 1, 6}};
enum { NPHASE = 3 };

static double round_dt(mi_dtype t, double v) {
  if (t == MI_DTYPE_BF16) return mi_bf16_to_f32(mi_f32_to_bf16((float)v));
  if (t == MI_DTYPE_F16) return mi_f16_to_f32(mi_f32_to_f16((float)v));
  return (float)v;
}

/* ---------- the layer's config ---------- */

/* Sets v at the dotted path p of cfg, making the objects on the way. */
static void set_path(json_t *cfg, const char *p, json_t *v) {
  const char *dot;
  while ((dot = strchr(p, '.'))) {
    char k[128];
    snprintf(k, sizeof k, "%.*s", (int)(dot - p), p);
    json_t *sub = json_object_get(cfg, k);
    if (!json_is_object(sub)) json_object_set_new(cfg, k, sub = json_object());
    cfg = sub;
    p = dot + 1;
  }
  json_object_set(cfg, p, v);
}

/* config.json for the layer under test: the test contract's layer_config,
 * each field where the model contract reads it (its path) */
static json_t *layer_config(const json_t *model, json_t *lc, char *shape, size_t shape_len) {
  json_t *cfg = json_object();
  const char *k;
  json_t *v;
  size_t used = 0;
  shape[0] = 0;
  json_object_foreach(lc, k, v) {
    const char *path = k;
    int listed = 0;
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(model, "config"), i, f) {
      if (strcmp(json_string_value(json_object_get(f, "name")) ?: "", k)) continue;
      listed = 1;
      path = json_string_value(json_object_get(f, "path")) ?: k;
    }
    set_path(cfg, path, v);
    if (listed && json_is_number(v) && used + 1 < shape_len)
      used += (size_t)snprintf(shape + used, shape_len - used, "%s%s=%g", used ? " " : "", k, json_number_value(v));
  }
  return cfg;
}

/* Fields the layer_config leaves out that the contract requires without a
 * default (a variant's own, as a rope scaling's factor): the values of
 * the checkpoint under test (--model), at the contract's path. The shape
 * stays the test contract's. */
static void layer_config_fill(const json_t *model, json_t *cfg, const char *model_dir) {
  if (!model_dir) return;
  char e2[600];
  json_t *mc = mi_model_input_config(model_dir, 0, e2, sizeof e2);
  size_t i;
  json_t *f;
  json_array_foreach(json_object_get(model, "config"), i, f) {
    const char *n = json_string_value(json_object_get(f, "name"));
    if (!n || json_object_get(f, "default") || json_object_get(f, "default_expr")) continue;
    if (mi_ckb_config_value(model, cfg, n, strlen(n))) continue; /* the layer_config has it */
    const json_t *v = mc ? mi_ckb_config_value(model, mc, n, strlen(n)) : NULL;
    if (!v || json_is_null(v)) continue;
    json_t *c = json_deep_copy(v);
    set_path(cfg, json_string_value(json_object_get(f, "path")) ?: n, c);
    json_decref(c);
  }
  json_decref(mc);
}

/* ---------- the plan ---------- */

typedef struct l2_weight {
  const char *key;  /* the weight map's key as the steps write it */
  int64_t n, row;
  int f32;          /* its argument's dtype is fixed f32 (else the weight dtype under test) */
  const char *init; /* the weight map's hint */
  int rank;
} l2_weight;

typedef struct l2_set { /* one weight dtype */
  mi_dtype wt;
  char seed_hex[24];
  double **w;        /* [nw], the values the kernels get */
  unsigned char **q; /* [nw] a block type's blocks (NULL for a float weight): w holds their exact values */
  double *x[NPHASE]; /* [T, width] */
} l2_set;

typedef struct l2_job {
  const vf_stage_opts *o;
  const json_t *model, *cfg;
  const char *uid, *kind, *shape;
  json_t *dtypes;  /* weight dtypes to run: the platform's */
  json_t *skipped; /* a block type the layer's rows are not whole blocks of: {dtype, why} */
  double tol;
  int64_t width;
  vf_bbuf bufs[128], lbufs[16]; /* sized for T_MAX tokens, N_CTX positions */
  int nbufs, nlbufs, resid;
  vf_bstep *steps[NPHASE]; /* [nsteps] bound for each phase */
  int nsteps;
  l2_weight w[64];
  int nw;
  l2_set *sets;
  int nsets;
  char err[1200];
} l2_job;

static int weight_index(const l2_job *j, const char *key) {
  for (int k = 0; k < j->nw; k++)
    if (!strcmp(j->w[k].key, key)) return k;
  return -1;
}

/* Sizes the buffers, caches and state, binds every step of every phase and
 * lists the weights; 0, or -1 with j->err. */
static int l2_bind(l2_job *j) {
  const mi_ckb *c = j->o->ckb;
  const json_t *seq = vf_bind_sequence(j->model, j->kind);
  const char *res = c ? vf_bind_residual(c, j->model) : NULL;
  vf_binder b = {.model = j->model, .cfg = j->cfg, .T = T_MAX, .R = T_MAX, .n_ctx = N_CTX, .layer = 0,
                 .err = j->err, .err_len = sizeof j->err};
  if (!c) return vf_bind_fail(&b, "stage 2 needs the CKB (the operator contracts)");
  if (!json_is_array(seq) || !res)
    return vf_bind_fail(&b, "no step sequence for this layer, or no residual stream the prologue writes");
  j->resid = -1;
  size_t i;
  json_t *spec;
  json_array_foreach(json_object_get(j->model, "buffers"), i, spec) {
    if (j->nbufs == (int)(sizeof j->bufs / sizeof *j->bufs)) return vf_bind_fail(&b, "too many buffers");
    vf_bbuf *vb = &j->bufs[j->nbufs];
    const char *name = json_string_value(json_object_get(spec, "name"));
    if (name && !vf_bind_uses(seq, name)) /* not this layer's: never bound */
      *vb = (vf_bbuf){.name = name, .dtype = MI_DTYPE_F32};
    else if (vf_bind_buffer(&b, spec, vb) != 0)
      return -1;
    if (res && vb->name && !strcmp(vb->name, res)) j->resid = j->nbufs;
    j->nbufs++;
  }
  const json_t *lists[2];
  vf_bind_layer_lists(j->model, j->kind, lists);
  for (int k = 0; k < 2; k++)
    json_array_foreach(lists[k], i, spec) {
      if (j->nlbufs == (int)(sizeof j->lbufs / sizeof *j->lbufs)) return vf_bind_fail(&b, "too many caches");
      if (vf_bind_buffer(&b, spec, &j->lbufs[j->nlbufs]) != 0) return -1;
      j->nlbufs++;
    }
  if (j->resid < 0 || !j->bufs[j->resid].n)
    return vf_bind_fail(&b, "the layer does not use the residual stream %s", res);
  j->width = j->bufs[j->resid].row;
  b.bufs = j->bufs;
  b.nbufs = j->nbufs;
  b.lbufs = j->lbufs;
  b.nlbufs = j->nlbufs;
  j->nsteps = (int)json_array_size(seq);
  for (int ph = 0; ph < NPHASE; ph++) {
    b.T = b.R = phases[ph].T;
    b.pos0 = phases[ph].pos0;
    j->steps[ph] = calloc((size_t)j->nsteps + 1, sizeof(vf_bstep));
    if (!j->steps[ph]) return vf_bind_fail(&b, "out of memory");
    for (int s = 0; s < j->nsteps; s++) {
      vf_bstep *bs = &j->steps[ph][s];
      if (vf_bind_step(&b, c, json_array_get(seq, (size_t)s), bs) != 0) return -1;
      if (bs->member && !strcmp(bs->member, "pack")) {
        if (!j->o->pack_path)
          return vf_bind_fail(&b, "step %s: %s comes from a kernel pack (member \"pack\"); give --pack PACK.so",
                              bs->name, bs->op);
      } else if (!bs->member || vf_member_offset(bs->member) < 0)
        return vf_bind_fail(&b, "step %s: %s names no platform member", bs->name, bs->op);
      for (int k = 0; ph == 0 && k < bs->nargs; k++) {
        const vf_barg *a = &bs->a[k];
        if (a->what != VB_WEIGHT || weight_index(j, a->wkey) >= 0) continue;
        if (j->nw == (int)(sizeof j->w / sizeof *j->w)) return vf_bind_fail(&b, "too many weights");
        const json_t *ws = vf_bind_weight_spec(j->model, a->wkey);
        j->w[j->nw++] = (l2_weight){a->wkey, a->wn, a->wrow, a->sig_dtype && a->sig_dtype[0] != '$',
                                    json_string_value(json_object_get(ws, "init")),
                                    (int)json_array_size(json_object_get(ws, "shape"))};
      }
    }
  }
  return 0;
}

/* A weight drawn from rng: the values the kernels get. */
static double *draw_weight(const l2_weight *w, mi_dtype wt, uint64_t *rng) {
  double *v = malloc((size_t)w->n * sizeof(double)); /* [n] */
  int one = w->init && !strcmp(w->init, "ones"), small = w->rank == 1 || (w->init && !strcmp(w->init, "zeros"));
  for (int64_t i = 0; v && i < w->n; i++) {
    double z = mi_rng_normal(rng);
    double x = one ? 1.0 + 0.1 * z : small ? 0.1 * z : z / sqrt((double)(w->row ? w->row : 1));
    v[i] = w->f32 ? (float)x : round_dt(wt, x);
  }
  return v;
}

/* Are the rows of every weight in the dtype under test whole blocks of wt?
 * If not, the dtype is listed in j->skipped with the first row that is not. */
static int whole_blocks(l2_job *j, mi_dtype wt) {
  const int64_t blk = mi_dtype_block(wt);
  for (int k = 0; k < j->nw; k++) {
    const l2_weight *w = &j->w[k];
    if (w->f32) continue;
    if (w->rank >= 2 && w->row > 0 && w->row % blk == 0 && w->n % w->row == 0) continue;
    json_array_append_new(j->skipped,
                          json_pack("{s:s, s:s, s:s, s:I, s:I}", "dtype", mi_dtype_name(wt), "why",
                                    w->rank < 2 ? "a weight in the dtype under test is a vector"
                                                : "the layer_config's rows are not whole blocks of this type",
                                    "weight", w->key, "row", (json_int_t)w->row, "block", (json_int_t)blk));
    return 0;
  }
  return 1;
}

static void l2_plan(l2_job *j) {
  char seed_label[300];
  snprintf(seed_label, sizeof seed_label, "%s/layer", j->uid);
  j->sets = calloc(json_array_size(j->dtypes) + 1, sizeof *j->sets);
  size_t di;
  json_t *dv;
  json_array_foreach(j->dtypes, di, dv) {
    mi_dtype wt;
    if (!j->sets || vf_dtype_parse(json_string_value(dv), &wt) != 0) continue;
    if (mi_dtype_is_block(wt) && !whole_blocks(j, wt)) continue;
    l2_set *S = &j->sets[j->nsets++];
    S->wt = wt;
    uint64_t seed = vf_case_seed(j->o->seed, seed_label, 0, (int)di), rng = seed;
    snprintf(S->seed_hex, sizeof S->seed_hex, "0x%016llx", (unsigned long long)seed);
    S->w = calloc((size_t)j->nw + 1, sizeof *S->w);
    S->q = calloc((size_t)j->nw + 1, sizeof *S->q);
    for (int k = 0; S->w && S->q && k < j->nw; k++) {
      S->w[k] = draw_weight(&j->w[k], wt, &rng);
      if (!mi_dtype_is_block(wt) || j->w[k].f32 || !S->w[k]) continue;
      /* quantized from the drawn values; w[k] becomes the blocks' exact values (the twin's) */
      S->q[k] = malloc(mi_dtype_row_bytes(wt, j->w[k].n));
      if (S->q[k] && vf_quant_input(wt, j->w[k].n, 0, 0, &rng, S->q[k], S->w[k], NULL) != 0) {
        free(S->q[k]);
        S->q[k] = NULL;
      }
    }
    for (int ph = 0; ph < NPHASE; ph++) {
      S->x[ph] = malloc(sizeof(double) * (size_t)phases[ph].T * (size_t)j->width);
      for (int64_t i = 0; S->x[ph] && i < phases[ph].T * j->width; i++) S->x[ph][i] = (float)mi_rng_normal(&rng);
    }
  }
}

static void l2_free(l2_job *j) {
  for (int s = 0; j->sets && s < j->nsets; s++) {
    for (int k = 0; j->sets[s].w && k < j->nw; k++) free(j->sets[s].w[k]);
    for (int k = 0; j->sets[s].q && k < j->nw; k++) free(j->sets[s].q[k]);
    free(j->sets[s].w);
    free(j->sets[s].q);
    for (int ph = 0; ph < NPHASE; ph++) free(j->sets[s].x[ph]);
  }
  free(j->sets);
  for (int ph = 0; ph < NPHASE; ph++) free(j->steps[ph]);
}

/* ---------- the child: the kernels ---------- */

typedef struct l2_dev {
  const mi_platform_iface *pi;
  void *ctx;
  mi_pack_ref pack; /* --pack bound to the platform: the kernels of the steps whose member is "pack" */
  mi_buffer *held[256];
  int nheld;
  void *buf[144];  /* [nbufs + nlbufs]: device storage, NULL where unused */
  void *w[64];     /* [nw] */
  void *in, *out;  /* [T_MAX, width] f32: the layer's input and output rows */
  char err[600];
} l2_dev;

static void *dev_alloc(l2_dev *d, size_t bytes) {
  mi_buffer *b = NULL;
  if (d->nheld == (int)(sizeof d->held / sizeof *d->held) || d->pi->buffer_alloc(d->ctx, bytes, &b) != 0 || !b)
    return NULL;
  d->held[d->nheld++] = b;
  void *p = d->pi->buffer_ptr(d->ctx, b);
  void *zero = calloc(1, bytes); /* zeroed: caches and state start empty */
  int ok = p && zero && d->pi->memcpy_h2d(d->ctx, NULL, p, zero, bytes) == 0;
  free(zero);
  return ok ? p : NULL;
}

/* A block type's blocks, as drawn by the parent. */
static void *dev_upload_blocks(l2_dev *d, const unsigned char *q, int64_t n, mi_dtype t) {
  const size_t bytes = mi_dtype_row_bytes(t, n);
  void *p = q && bytes ? dev_alloc(d, bytes) : NULL;
  return p && d->pi->memcpy_h2d(d->ctx, NULL, p, q, bytes) == 0 ? p : NULL;
}

static void *dev_upload(l2_dev *d, const double *v, int64_t n, mi_dtype t) {
  size_t es = mi_dtype_size(t);
  unsigned char *h = malloc((size_t)n * es);
  void *p = h ? dev_alloc(d, (size_t)n * es) : NULL;
  for (int64_t i = 0; p && i < n; i++) {
    if (t == MI_DTYPE_F32) ((float *)h)[i] = (float)v[i];
    else if (t == MI_DTYPE_BF16) ((uint16_t *)h)[i] = mi_f32_to_bf16((float)v[i]);
    else if (t == MI_DTYPE_F16) ((uint16_t *)h)[i] = mi_f32_to_f16((float)v[i]);
  }
  if (p && d->pi->memcpy_h2d(d->ctx, NULL, p, h, (size_t)n * es) != 0) p = NULL;
  free(h);
  return p;
}

/* The element type of what argument `name` of bs is bound to on the device. */
static mi_dtype arg_dtype(const l2_job *j, const vf_bstep *bs, const char *name, mi_dtype wt) {
  for (int k = 0; name && k < bs->nargs; k++) {
    const vf_barg *a = &bs->a[k];
    if (strcmp(a->name, name)) continue;
    if (a->what == VB_WEIGHT) return j->w[weight_index(j, a->wkey)].f32 ? MI_DTYPE_F32 : wt;
    if (a->what == VB_BUF) return a->buf < j->nbufs ? j->bufs[a->buf].dtype : j->lbufs[a->buf - j->nbufs].dtype;
  }
  return MI_DTYPE_F32;
}

/* One step through libffi with its operator contract's signature. */
static int dev_step(const l2_job *j, l2_dev *d, const vf_bstep *bs, mi_dtype wt) {
  const int from_pack = !strcmp(bs->member, "pack");
  void *fn = NULL, *kctx = d->ctx;
  if (from_pack) {
    const mi_pack_kernel *pk = mi_pack_find(d->pack.iface, bs->op);
    if (pk && pk->fn) memcpy(&fn, &pk->fn, sizeof fn); /* POSIX: function and object pointers round-trip */
    kctx = d->pack.ctx;
  } else {
    fn = vf_member_fn(d->pi, bs->member);
  }
  ffi_type *types[VF_BIND_MAX_ARGS];
  void *values[VF_BIND_MAX_ARGS];
  vf_ffi_slot store[VF_BIND_MAX_ARGS];
  for (int k = 0; k < bs->nargs; k++) {
    const vf_barg *a = &bs->a[k];
    if (a->kind == VF_CTX) types[k] = vf_ffi_pointer(&store[k], kctx);
    else if (a->kind == VF_STREAM) types[k] = vf_ffi_pointer(&store[k], NULL);
    else if (a->what == VB_WEIGHT) types[k] = vf_ffi_pointer(&store[k], d->w[weight_index(j, a->wkey)]);
    else if (a->what == VB_BUF) {
      const vf_bbuf *vb = a->buf < j->nbufs ? &j->bufs[a->buf] : &j->lbufs[a->buf - j->nbufs];
      types[k] = vf_ffi_pointer(&store[k], (char *)d->buf[a->buf] + a->off * (int64_t)mi_dtype_size(vb->dtype));
    } else
      types[k] = vf_ffi_scalar(&store[k], a->kind, a->i, a->f,
                               a->kind != VF_DTYPE ? 0 : a->dtype_of ? (int)arg_dtype(j, bs, a->dtype_of, wt) : (int)a->dtype);
    values[k] = &store[k];
  }
  int rc = 0;
  if (!fn || vf_ffi_call(fn, bs->nargs, types, values, &rc) != 0) {
    snprintf(d->err, sizeof d->err, "layer: step %s: %s cannot be called with its declared signature", bs->name,
             bs->member);
    return -1;
  }
  if (rc != 0) {
    snprintf(d->err, sizeof d->err, "layer: step %s returned %d (%s)", bs->name, rc,
             from_pack ? d->pack.iface->last_error(d->pack.ctx)
             : d->pi->last_error ? d->pi->last_error(d->ctx) : "no message");
    return -1;
  }
  return 0;
}

#define CHECK(what, call)                                                                                    \
  do {                                                                                                       \
    if ((call) != 0) {                                                                                       \
      snprintf(d->err, sizeof d->err, "layer: %s failed (%s)", what,                                         \
               d->pi->last_error ? d->pi->last_error(d->ctx) : "no message");                                \
      return -1;                                                                                             \
    }                                                                                                        \
  } while (0)

/* One phase: x in through memcpy_d2d, the steps, the residual stream out. */
static int dev_phase(const l2_job *j, l2_dev *d, int ph, mi_dtype wt, const float *x, float *got) {
  const int T = phases[ph].T, pos0 = phases[ph].pos0;
  size_t rb = sizeof(float) * (size_t)T * (size_t)j->width;
  CHECK("upload x", d->pi->memcpy_h2d(d->ctx, NULL, d->in, x, rb));
  CHECK("memcpy_d2d of the input rows", d->pi->memcpy_d2d(d->ctx, NULL, d->buf[j->resid], d->in, rb));
  for (int k = 0; k < j->nbufs; k++)
    if (d->buf[k] && j->bufs[k].input && !strcmp(j->bufs[k].input, "positions")) {
      int32_t pos[T_MAX];
      for (int t = 0; t < T; t++) pos[t] = pos0 + t;
      CHECK("upload positions", d->pi->memcpy_h2d(d->ctx, NULL, d->buf[k], pos, sizeof(int32_t) * (size_t)T));
    }
  for (int s = 0; s < j->nsteps; s++)
    if (dev_step(j, d, &j->steps[ph][s], wt) != 0) return -1;
  if (d->pi->stream_sync) CHECK("stream_sync", d->pi->stream_sync(d->ctx, NULL));
  CHECK("memcpy_d2d of the output rows", d->pi->memcpy_d2d(d->ctx, NULL, d->out, d->buf[j->resid], rb));
  CHECK("download", d->pi->memcpy_d2h(d->ctx, NULL, got, d->out, rb));
  return 0;
}

static int layer_child(void *arg, int fd) {
  l2_job *j = arg;
  struct mi_plugin *plug = vf_load_plugin_rec(j->o, fd);
  if (!plug) return 1;
  const mi_platform_iface *pi = plug->iface;
  const char *lacks = !pi->memcpy_h2d ? "memcpy_h2d" : !pi->memcpy_d2h ? "memcpy_d2h"
                      : !pi->memcpy_d2d ? "memcpy_d2d" : NULL;
  char lack[1200] = "";
  for (int s = 0; !lacks && s < j->nsteps; s++)
    if (strcmp(j->steps[0][s].member, "pack") && !vf_member_fn(pi, j->steps[0][s].member)) lacks = j->steps[0][s].member;
  /* --pack: the pack bound to this platform, and every pack step's kernel in it */
  mi_pack_ref pack = {0};
  mi_plugin *pplug = j->o->pack_path ? mi_plugin_load_file(j->o->pack_path, NULL) : NULL;
  if (!lacks && pplug && mi_pack_bind_plugin(pplug, pi, plug->ctx, &pack, lack, sizeof lack) != 0) lacks = lack;
  for (int s = 0; !lacks && s < j->nsteps; s++)
    if (!strcmp(j->steps[0][s].member, "pack") && !mi_pack_find(pack.iface, j->steps[0][s].op)) {
      snprintf(lack, sizeof lack, "%s (no kernel in the pack %s)", j->steps[0][s].op, j->o->pack_path);
      lacks = lack;
    }
  if (lacks) {
    mi_plugin_unload(pplug);
    char msg[1400];
    snprintf(msg, sizeof msg, "layer: the platform lacks %s", lacks);
    vf_rec_write(fd, VF_REC_ERROR, -1, 0, msg, NULL, 0);
    mi_plugin_unload(plug);
    return 1;
  }
  size_t rows = sizeof(float) * T_MAX * (size_t)j->width;
  float *xf = malloc(rows), *got = malloc(rows); /* [T, width] */
  for (int s = 0; s < j->nsets; s++) {
    const l2_set *S = &j->sets[s];
    l2_dev *d = calloc(1, sizeof *d);
    int ok = d && S->w && xf && got;
    if (d) d->pi = pi, d->ctx = plug->ctx, d->pack = pack;
    for (int k = 0; ok && k < j->nbufs + j->nlbufs; k++) {
      const vf_bbuf *vb = k < j->nbufs ? &j->bufs[k] : &j->lbufs[k - j->nbufs];
      ok &= !vb->n || (d->buf[k] = dev_alloc(d, (size_t)vb->n * mi_dtype_size(vb->dtype))) != NULL;
    }
    for (int k = 0; ok && k < j->nw; k++) {
      const int blocks = mi_dtype_is_block(S->wt) && !j->w[k].f32; /* drawn as blocks by the parent */
      ok &= (d->w[k] = blocks ? dev_upload_blocks(d, S->q ? S->q[k] : NULL, j->w[k].n, S->wt)
                              : dev_upload(d, S->w[k], j->w[k].n, j->w[k].f32 ? MI_DTYPE_F32 : S->wt)) != NULL;
    }
    ok = ok && (d->in = dev_alloc(d, rows)) && (d->out = dev_alloc(d, rows));
    for (int ph = 0; ph < NPHASE; ph++) {
      int slot = s * NPHASE + ph, T = phases[ph].T;
      if (!ok || !S->x[ph]) {
        vf_rec_write(fd, VF_REC_FAIL, slot, 0, "layer: cannot allocate the layer's buffers", NULL, 0);
        continue;
      }
      for (int64_t i = 0; i < T * j->width; i++) xf[i] = (float)S->x[ph][i];
      if (dev_phase(j, d, ph, S->wt, xf, got) != 0) vf_rec_write(fd, VF_REC_FAIL, slot, 0, d->err, NULL, 0);
      else vf_rec_write(fd, VF_REC_OUT, slot, 0, NULL, got, sizeof(float) * (size_t)T * (size_t)j->width);
    }
    for (int k = 0; d && k < d->nheld; k++) pi->buffer_free(plug->ctx, d->held[k]);
    free(d);
  }
  free(xf);
  free(got);
  mi_plugin_unload(pplug);
  mi_plugin_unload(plug);
  return 0;
}

/* ---------- the parent: the float64 twin, the verdict ---------- */

typedef struct twin_src {
  const l2_job *j;
  const l2_set *S;
} twin_src;

static double *twin_weight(void *user, const char *key, const char *name, int64_t n, char *err, size_t err_len) {
  const twin_src *t = user;
  int k = weight_index(t->j, key);
  double *v = k >= 0 && t->j->w[k].n == n ? malloc(sizeof(double) * (size_t)n) : NULL;
  if (!v) {
    snprintf(err, err_len, "reference: weight %s (%s) was not drawn for this layer", key, name);
    return NULL;
  }
  memcpy(v, t->S->w[k], sizeof(double) * (size_t)n);
  return v;
}

/* The next record of the child for `slot`: 1 (rec filled), 0 none (in
 * flight when the child ended), -1 a protocol break (why). */
static int next_rec(const vf_child_result *r, size_t *off, int slot, size_t want, vf_rec *rec, json_t *ev, char *why,
                    size_t wl) {
  for (;;) {
    int n = vf_rec_next(r->results, r->results_len, off, rec, why, wl);
    if (n <= 0) return n;
    if (rec->type == VF_REC_ERROR) {
      json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", rec->msg));
      continue;
    }
    if (rec->index != slot || (rec->type == VF_REC_OUT && rec->payload_len != want)) {
      snprintf(why, wl, "a record for slot %d with %zu bytes where slot %d was due", rec->index, rec->payload_len,
               slot);
      return -1;
    }
    return 1;
  }
}

/* got against want: the case's verdict and message */
static int compare(const l2_job *j, const float *got, const double *want, int T, const char *where, json_t *res,
                   char *msg, size_t ml) {
  const int64_t H = j->width;
  double maxabs = 0, refmax = 0;
  int64_t at = 0, nonfinite = 0;
  for (int64_t i = 0; i < T * H; i++) {
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
  int pass = rel <= j->tol;
  if (!pass && nonfinite)
    snprintf(msg, ml, "layer: %lld NaN/Inf values in the output %s", (long long)nonfinite, where);
  else if (!pass)
    snprintf(msg, ml,
             "layer: max rel error %.2g > tol %g %s (max abs %.2g at token %lld, channel %lld: got %.6g, want %.6g)",
             rel, j->tol, where, maxabs, (long long)(at / H), (long long)(at % H), (double)got[at], want[at]);
  return pass;
}

static json_t *l2_judge(l2_job *j, const vf_child_result *r) {
  json_t *ev = json_array();
  size_t off = 0, rows = (size_t)T_MAX * (size_t)j->width;
  vf_rec rec;
  char why[200] = "";
  int bad = 0, stop = 0;
  double *want = malloc(sizeof(double) * rows);
  float *got = malloc(sizeof(float) * rows);
  for (int s = 0; s < j->nsets && !bad && !stop; s++) {
    l2_set *S = &j->sets[s];
    twin_src src = {j, S};
    char terr[600] = "";
    vf_interp_layer *tw = vf_interp_layer_new(j->o->ckb, j->model, j->cfg, j->kind, T_MAX, N_CTX, twin_weight, &src,
                                              terr, sizeof terr);
    int failed = 0;
    for (int ph = 0; ph < NPHASE && !bad && !stop; ph++) {
      int slot = s * NPHASE + ph, T = phases[ph].T, pos0 = phases[ph].pos0;
      char where[600];
      snprintf(where, sizeof where, "on %s T=%d pos0=%d (%s weights, %s)", phases[ph].name, T, pos0,
               mi_dtype_name(S->wt), j->shape);
      int have = next_rec(r, &off, slot, sizeof(float) * (size_t)T * (size_t)j->width, &rec, ev, why, sizeof why);
      if (have < 0) {
        bad = 1;
        break;
      }
      json_t *params = json_pack("{s:i, s:i}", "T", T, "pos0", pos0);
      if (!have) { /* in flight when the child ended */
        json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:s}", "event", "case_start", "case",
                                            phases[ph].name, "index", ph, "dtype", mi_dtype_name(S->wt), "seed",
                                            S->seed_hex, "params", params, "where", where));
        stop = 1;
        break;
      }
      if (failed) { /* later phases depend on a failed one's state: not reported */
        json_decref(params);
        continue;
      }
      json_t *res = json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:f}", "event", "case_end", "case", phases[ph].name,
                              "index", ph, "dtype", mi_dtype_name(S->wt), "seed", S->seed_hex, "params", params,
                              "tol", j->tol);
      char msg[2200] = "";
      int pass = 0;
      if (rec.type == VF_REC_FAIL) {
        snprintf(msg, sizeof msg, "%s %s", rec.msg, where);
      } else if (!tw || !want || !got || vf_interp_layer_run(tw, S->x[ph], T, pos0, want, terr, sizeof terr) != 0) {
        snprintf(msg, sizeof msg, "layer: the float64 reference failed (%s) %s", terr[0] ? terr : "out of memory",
                 where);
      } else {
        memcpy(got, rec.payload, sizeof(float) * (size_t)T * (size_t)j->width);
        pass = compare(j, got, want, T, where, res, msg, sizeof msg);
      }
      json_object_set_new(res, "verdict", json_string(pass ? "PASS" : "FAIL"));
      if (!pass) json_object_set_new(res, "message", json_string(msg));
      json_array_append_new(ev, res);
      failed |= !pass;
    }
    vf_interp_layer_free(tw);
  }
  free(want);
  free(got);
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

/* One unit: layer kind `kind` (NULL: the contract's layer_sequence) under the id `uid`. */
static json_t *layer_unit(const vf_stage_opts *o, const json_t *model, const json_t *cfg, const char *shape,
                          json_t *dtypes, double tol, const char *uid, const char *kind) {
  l2_job *job = calloc(1, sizeof *job);
  json_t *u;
  vf_child_result r;
  vf_limits lim = o->lim;
  char full_shape[800];
  snprintf(full_shape, sizeof full_shape, "%s%s%s", kind ? kind : "", kind ? ": " : "", shape);
  if (!job)
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", uid, "verdict", "FAIL", "status", "ERROR",
                     "message", "out of memory in the verifier");
  *job = (l2_job){.o = o, .model = model, .cfg = cfg, .uid = uid, .kind = kind, .shape = full_shape,
                  .dtypes = dtypes, .skipped = json_array(), .tol = tol};
  if (l2_bind(job) != 0) {
    char msg[1400];
    snprintf(msg, sizeof msg, "layer %s on the test contract's layer_config (%s): %s", uid, shape, job->err);
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", uid, "verdict", "FAIL", "status", "ERROR",
                  "message", msg);
  } else if ((l2_plan(job),
              lim.result_cap = VF_REC_SIZE(0) * 8 + (size_t)json_array_size(dtypes) * NPHASE *
                                                      VF_REC_SIZE(sizeof(float) * T_MAX * (size_t)job->width),
              vf_run_child(&lim, layer_child, job, &r)) != 0) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", uid, "verdict", "FAIL", "status", "ERROR",
                  "message", "cannot fork a child");
  } else {
    json_decref(r.events); /* whatever JSON the child wrote is not a result */
    r.events = l2_judge(job, &r);
    u = vf_unit_report("layer", uid, json_string_value(json_object_get(model, "version")), "layer", &r,
                       o->lim.timeout_s, o->lim.cpu_s);
    vf_child_result_free(&r);
    if (json_array_size(job->skipped)) json_object_set(u, "dtypes_not_run", job->skipped);
  }
  json_decref(job->skipped);
  l2_free(job);
  free(job);
  return u;
}

/* One unit per layer kind (or one for the layer_sequence) on cfg, each uid
 * suffixed; their verdicts counted. */
static void run_units(const vf_stage_opts *o, const json_t *model, const json_t *cfg, const char *shape,
                      json_t *dtypes, double t, const char *suffix, json_t *units, int *npass, int *nfail) {
  const char *mid = json_string_value(json_object_get(model, "id")) ?: "?";
  const json_t *kinds = json_object_get(json_object_get(model, "layer_kinds"), "kinds");
  const char *kind;
  json_t *kv;
  char uid[300];
  /* layers of several kinds: a unit per kind, "model.NAME/KIND" */
  json_object_foreach((json_t *)kinds, kind, kv) {
    snprintf(uid, sizeof uid, "%s/%s%s", mid, kind, suffix);
    json_t *u = layer_unit(o, model, cfg, shape, dtypes, t, uid, kind);
    if (!strcmp(json_string_value(json_object_get(u, "verdict")), "PASS")) ++*npass;
    else ++*nfail;
    json_array_append_new(units, u);
  }
  if (!kinds) {
    snprintf(uid, sizeof uid, "%s%s", mid, suffix);
    json_t *u = layer_unit(o, model, cfg, shape, dtypes, t, uid, NULL);
    if (!strcmp(json_string_value(json_object_get(u, "verdict")), "PASS")) ++*npass;
    else ++*nfail;
    json_array_append_new(units, u);
  }
}

/* The dtypes some unit could not run (rows not whole blocks of them). */
static json_t *not_run(json_t *units) {
  json_t *out = json_array();
  size_t i, k;
  json_t *u, *d;
  json_array_foreach(units, i, u) json_array_foreach(json_object_get(u, "dtypes_not_run"), k, d) {
    json_t *dt = json_object_get(d, "dtype");
    size_t m;
    json_t *e;
    int seen = 0;
    json_array_foreach(out, m, e) seen |= json_equal(e, dt);
    if (!seen) json_array_append(out, dt);
  }
  return out;
}

json_t *vf_stage2(const vf_stage_opts *o, json_t *model, json_t *test_contract) {
  json_t *units = json_array();
  json_t *dtypes = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(json_object_get(o->platform, "dtypes"), "weights"), i, v) {
    const char *s = json_string_value(v);
    mi_dtype dt;
    if (s && vf_dtype_parse(s, &dt) == 0) json_array_append(dtypes, v); /* floats and block types */
  }
  json_t *tol = json_object_get(json_object_get(test_contract, "tolerance"), "f32");
  double t = json_is_number(tol) ? json_number_value(tol) : 1e-4;
  char shape[600];
  json_t *params = json_object_get(test_contract, "parameters"), *lc = json_object_get(params, "layer_config");
  json_t *cfg = layer_config(model, lc, shape, sizeof shape);
  layer_config_fill(model, cfg, o->model_dir);
  int npass = 0, nfail = 0;
  run_units(o, model, cfg, shape, dtypes, t, "", units, &npass, &nfail);
  json_decref(cfg);
  /* block types whose blocks the small rows cannot hold (Q4_K, Q6_K: 256
   * values) run again on block_layer_config: the same layer, rows widened */
  json_t *rest = not_run(units), *blc = json_object_get(params, "block_layer_config");
  if (json_array_size(rest) && json_is_object(blc)) {
    json_t *lc2 = json_deep_copy(lc);
    json_object_update(lc2, blc);
    cfg = layer_config(model, lc2, shape, sizeof shape);
    layer_config_fill(model, cfg, o->model_dir);
    run_units(o, model, cfg, shape, rest, t, " (block_layer_config)", units, &npass, &nfail);
    json_decref(cfg);
    json_decref(lc2);
  }
  json_decref(rest);
  json_decref(dtypes);
  int pass = nfail == 0 && npass > 0;
  return json_pack("{s:i, s:s, s:s, s:o, s:i, s:i}", "stage", 2, "name", "decoder_layer", "verdict",
                   pass ? "PASS" : "FAIL", "units", units, "passed", npass, "failed", nfail);
}
