/* See interp.h. One forward from scratch: every buffer of the contract,
 * every layer's caches and state, allocated for this call; each step's
 * arguments bound from the contract and handed to the operator's float64
 * reference by name, as stage 1 hands them a case. */
#define _GNU_SOURCE
#include "core/verify/interp.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/driver.h"
#include "core/verify/ref/f64.h"
#include "core/verify/verify.h"
#include "mi/host.h"

#define MAX_ARGS 32
#define MAX_BUFS 128
#define MAX_ELEMS ((int64_t)1 << 34) /* one buffer: 128 GiB of doubles, past any test shape */

struct vf_interp {
  const mi_ckb *c;
  const json_t *model, *cfg;
  const struct mi_weights *w;
  int64_t layers, vocab;
};

typedef struct ibuf {
  const char *name; /* the contract's name for it (borrowed) */
  double *p;        /* [n] */
  int64_t n, row;   /* elements; elements per row of the first dimension */
} ibuf;

/* What names mean while the steps of one forward are bound. */
typedef struct scope {
  vf_interp *m;
  int64_t T, pos0, R, r0, n_ctx, layer;
  ibuf bufs[MAX_BUFS]; /* the contract's buffers */
  int nbufs;
  ibuf *per_layer; /* [layers][MAX_LAYER_BUFS]: caches and state */
  int *n_per_layer;
  char *err;
  size_t err_len;
} scope;
#define MAX_LAYER_BUFS 8

static int fail(scope *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(scope *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, s->err_len, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---------- names in expressions ---------- */

static int runtime_name(const scope *s, const char *n, size_t len, int64_t *out) {
  static const char *const names[] = {"T", "pos0", "R", "r0", "n_ctx", "i"};
  const int64_t vals[] = {s->T, s->pos0, s->R, s->r0, s->n_ctx, s->layer};
  for (int k = 0; k < 6; k++)
    if (strlen(names[k]) == len && !memcmp(names[k], n, len)) return *out = vals[k], 0;
  return -1;
}

static int lookup_f64(void *user, const char *n, size_t len, double *out) {
  scope *s = user;
  int64_t r;
  if (runtime_name(s, n, len, &r) == 0) return *out = (double)r, 0;
  const json_t *v = mi_ckb_config_value(s->m->model, s->m->cfg, n, len);
  if (json_is_number(v)) return *out = json_number_value(v), 0;
  if (json_is_boolean(v)) return *out = json_is_true(v), 0;
  return -1;
}

static int lookup_int(void *user, const char *n, size_t len, int64_t *out) {
  double d;
  if (lookup_f64(user, n, len, &d) != 0 || d != floor(d) || fabs(d) > 9e15) return -1;
  *out = (int64_t)d;
  return 0;
}

/* An integer argument: an expression over config fields and T, pos0, R,
 * r0, n_ctx, i; "int:EXPR" is a real expression whose value must be whole */
static int bind_int(scope *s, const char *b, int64_t *out) {
  char e[300];
  if (!strncmp(b, "int:", 4)) {
    double d;
    if (mi_expr_eval_f64(b + 4, lookup_f64, s, &d, e, sizeof e) != 0) return fail(s, "%s", e);
    if (d != floor(d) || fabs(d) > 9e15)
      return fail(s, "\"%s\" is %.17g on this config, not a whole number", b, d);
    *out = (int64_t)d;
    return 0;
  }
  return mi_expr_eval(b, lookup_int, s, out, e, sizeof e) == 0 ? 0 : fail(s, "%s", e);
}

/* A real argument: "config:FIELD", "rsqrt:INT_EXPR", or a literal */
static int bind_real(scope *s, const char *b, double *out) {
  if (!strncmp(b, "config:", 7)) {
    const json_t *v = mi_ckb_config_value(s->m->model, s->m->cfg, b + 7, strlen(b + 7));
    if (!json_is_number(v))
      return fail(s, "\"%s\": config.json has no such number and the contract no default", b);
    *out = json_number_value(v);
    return 0;
  }
  if (!strncmp(b, "rsqrt:", 6)) {
    int64_t x;
    if (bind_int(s, b + 6, &x) != 0) return -1;
    if (x <= 0) return fail(s, "\"%s\" is %lld on this config, not positive", b, (long long)x);
    *out = 1.0 / sqrt((double)x);
    return 0;
  }
  char *end;
  *out = strtod(b, &end);
  return *end || end == b ? fail(s, "\"%s\" is not a number", b) : 0;
}

/* ---------- buffers ---------- */

static ibuf *find_buf(scope *s, const char *name, size_t len) {
  if (s->layer >= 0) {
    ibuf *lb = s->per_layer + s->layer * MAX_LAYER_BUFS;
    for (int k = 0; k < s->n_per_layer[s->layer]; k++)
      if (strlen(lb[k].name) == len && !memcmp(lb[k].name, name, len)) return &lb[k];
  }
  for (int k = 0; k < s->nbufs; k++)
    if (strlen(s->bufs[k].name) == len && !memcmp(s->bufs[k].name, name, len)) return &s->bufs[k];
  return NULL;
}

/* The element count of a shape the contract gives (dimensions: numbers or
 * expressions), and the elements per row of its first dimension. */
static int shape_elems(scope *s, const char *what, const char *name, const json_t *shape,
                       int64_t *n_out, int64_t *row_out) {
  int64_t n = 1, row = 1;
  size_t i;
  json_t *d;
  json_array_foreach(shape, i, d) {
    int64_t x;
    if (json_is_integer(d))
      x = json_integer_value(d);
    else if (!json_is_string(d))
      return fail(s, "%s %s: a dimension is neither a number nor an expression", what, name);
    else if (bind_int(s, json_string_value(d), &x) != 0)
      return -1;
    if (x < 0 || (x && n > MAX_ELEMS / x))
      return fail(s, "%s %s: dimension %lld out of range", what, name, (long long)x);
    n *= x;
    if (i > 0) row *= x;
  }
  *n_out = n;
  *row_out = row;
  return 0;
}

/* A zeroed buffer of the shape the contract gives (dims: expressions). */
static int make_buf(scope *s, ibuf *b, const json_t *spec) {
  b->name = json_string_value(json_object_get(spec, "name"));
  const json_t *shape = json_object_get(spec, "shape");
  if (!b->name || !json_is_array(shape) || !json_array_size(shape))
    return fail(s, "a buffer of the contract has no name or no shape");
  int64_t n, row;
  if (shape_elems(s, "buffer", b->name, shape, &n, &row) != 0) return -1;
  b->n = n;
  b->row = row;
  b->p = calloc((size_t)(n ? n : 1), sizeof(double));
  return b->p ? 0
              : fail(s, "reference: out of memory for buffer %s (%lld doubles)", b->name,
                     (long long)n);
}

/* "NAME", "NAME@pos0", "NAME@r0", each optionally "+EXPR" elements on */
static int bind_buf(scope *s, const char *b, double **p, int64_t *avail) {
  size_t len = strcspn(b, "@+");
  ibuf *buf = find_buf(s, b, len);
  if (!buf) return fail(s, "\"%s\" names no buffer, cache or state of the contract", b);
  int64_t off = 0;
  const char *r = b + len;
  if (*r == '@') {
    size_t rl = strcspn(r + 1, "+");
    int64_t row = 0;
    if ((rl == 4 && !memcmp(r + 1, "pos0", 4)) || (rl == 2 && !memcmp(r + 1, "r0", 2)))
      runtime_name(s, r + 1, rl, &row);
    else
      return fail(s, "\"%s\": a row is @pos0 or @r0", b);
    off = row * buf->row;
    r += 1 + rl;
  }
  if (*r == '+') {
    int64_t x;
    if (bind_int(s, r + 1, &x) != 0) return -1;
    off += x;
  }
  if (off < 0 || off > buf->n)
    return fail(s, "\"%s\" lies outside %s (%lld elements)", b, buf->name, (long long)buf->n);
  *p = buf->p + off;
  *avail = buf->n - off;
  return 0;
}

/* The weight map's entry for a key as the steps write it ({i} unexpanded) */
static const json_t *weight_spec(const vf_interp *m, const char *key) {
  size_t i;
  json_t *w;
  json_array_foreach(
      json_object_get(m->model, "weights"), i,
      w) if (!strcmp(json_string_value(json_object_get(w, "key")) ?: "", key)) return w;
  return NULL;
}

static int holds(const vf_interp *m, const char *when) {
  if (!when) return 1;
  int neg = when[0] == '!';
  const json_t *v = mi_ckb_config_value(m->model, m->cfg, when + neg, strlen(when + neg));
  return neg ? !json_is_true(v) : json_is_true(v);
}

/* "weight:KEY": the tensor widened to float64 (the caller frees it); a key
 * whose `when` does not hold on this config reads its `fallback` (a tied
 * lm_head reads the embedding). */
static double *bind_weight(scope *s, const char *key, int64_t *n_out) {
  const json_t *spec = weight_spec(s->m, key);
  if (!spec) return fail(s, "weight:%s is not in the contract's weight map", key), NULL;
  const char *fb = json_string_value(json_object_get(spec, "fallback"));
  if (fb && !holds(s->m, json_string_value(json_object_get(spec, "when")))) {
    spec = weight_spec(s->m, fb);
    key = fb;
    if (!spec) return fail(s, "the fallback %s is not in the contract's weight map", fb), NULL;
  }
  int64_t n, row;
  if (shape_elems(s, "weight", key, json_object_get(spec, "shape"), &n, &row) != 0) return NULL;
  char name[512];
  const char *p = strstr(key, "{i}");
  if (p)
    snprintf(name, sizeof name, "%.*s%lld%s", (int)(p - key), key, (long long)s->layer, p + 3);
  else
    snprintf(name, sizeof name, "%s", key);
  double *v = vf_weight_f64(s->m->w, name, (size_t)n, s->err, s->err_len);
  *n_out = n;
  return v;
}

/* ---------- one step ---------- */

static int run_step(scope *s, const json_t *step, double *max_score) {
  const char *op = json_string_value(json_object_get(step, "operator"));
  const char *sname = json_string_value(json_object_get(step, "step")) ?: op ?: "?";
  const mi_ckb_entry *oe = op ? mi_ckb_find(s->m->c, op) : NULL;
  if (!oe) return fail(s, "step %s: operator %s is not in the CKB", sname, op ? op : "(none)");
  const char *refname = json_string_value(json_object_get(oe->json, "reference"));
  /* the interpreter wants logits; an argmax step picks a token from them */
  if (refname && !strcmp(refname, "argmax")) return 0;
  vf_ref_fn fn = refname ? vf_ref_find(refname) : NULL;
  if (!fn) return fail(s, "step %s: %s has no float64 reference", sname, op);
  const json_t *bind = json_object_get(step, "args");
  vf_arg args[MAX_ARGS];
  double *owned[MAX_ARGS];
  int na = 0, no = 0, rc = 0;
  memset(args, 0, sizeof args);
  size_t i;
  json_t *sa;
  json_array_foreach(json_object_get(json_object_get(oe->json, "signature"), "args"), i, sa) {
    const char *an = json_string_value(json_object_get(sa, "name"));
    vf_kind k;
    if (!an || vf_kind_parse(json_string_value(json_object_get(sa, "kind")) ?: "", &k) != 0) {
      rc = fail(s, "%s: an argument of its signature has no name or an unknown kind", op);
      break;
    }
    if (k == VF_CTX || k == VF_STREAM) continue;
    if (na == MAX_ARGS) {
      rc = fail(s, "%s: more than %d arguments", op, MAX_ARGS);
      break;
    }
    vf_arg *a = &args[na++];
    a->name = an;
    a->kind = k;
    a->dtype = MI_DTYPE_F32;
    const json_t *bv = json_object_get(bind, an);
    if (k == VF_DTYPE) continue; /* float64 throughout */
    char num[32];
    const char *b = json_string_value(bv);
    if (json_is_integer(bv))
      snprintf(num, sizeof num, "%lld", (long long)json_integer_value(bv)), b = num;
    else if (json_is_real(bv))
      snprintf(num, sizeof num, "%.17g", json_real_value(bv)), b = num;
    if (!b) {
      rc = fail(s, "step %s: argument %s of %s is not bound", sname, an, op);
      break;
    }
    if (k == VF_IN || k == VF_OUT || k == VF_INOUT) {
      if (!strncmp(b, "weight:", 7)) {
        a->val = owned[no] = bind_weight(s, b + 7, &a->n);
        if (!a->val) {
          rc = -1;
          break;
        }
        no++;
      } else if (bind_buf(s, b, &a->val, &a->n) != 0) {
        rc = -1;
        break;
      }
    } else if (k == VF_I64 || k == VF_I32) {
      if (bind_int(s, b, &a->i) != 0) {
        rc = -1;
        break;
      }
    } else if (bind_real(s, b, &a->f) != 0) {
      rc = -1;
      break;
    }
  }
  if (rc == 0) {
    vf_call call = {args, na};
    char e[400] = "";
    if (refname && !strcmp(refname, "attention")) {
      /* the cache rows this chunk stored are rounded as the engine's cache
       * type rounds them (kv.c), and the largest scaled score is kept */
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
        rc = fail(s, "step %s: attention's arguments do not fit", sname);
      else {
        vf_ref_round_kv(kc + pos0 * Hkv * D, T * Hkv * D);
        vf_ref_round_kv(vc + pos0 * Hkv * D, T * Hkv * D);
        if (vf_f64_attention(out, q, kc, vc, T, Hq, Hkv, D, pos0, scale, max_score) != 0)
          rc = fail(s, "reference: out of memory");
      }
    } else if (fn(&call, e, sizeof e) != 0) {
      rc = fail(s, "step %s (%s): %s", sname, op, e);
    }
  } else {
    char e2[600];
    snprintf(e2, sizeof e2, "%s", s->err);
    if (strncmp(e2, "step ", 5)) fail(s, "step %s (%s): %s", sname, op, e2);
  }
  for (int k = 0; k < no; k++)
    free(owned[k]);
  return rc;
}

static int run_sequence(scope *s, const json_t *seq, double *max_score) {
  size_t i;
  json_t *st;
  json_array_foreach(seq, i, st) if (run_step(s, st, max_score) != 0) return -1;
  return 0;
}

/* ---------- the whole model ---------- */

vf_interp *vf_interp_open(const mi_ckb *c, const mi_ckb_entry *model, const json_t *cfg,
                          const struct mi_weights *w, char *err, size_t err_len) {
  vf_interp *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, err_len, "reference: out of memory");
    return NULL;
  }
  *m = (vf_interp){c, model->json, cfg, w, 0, 0};
  scope s = {.m = m, .layer = -1, .err = err, .err_len = err_len};
  const char *lf = json_string_value(json_object_get(model->json, "layers"));
  if (!lf || bind_int(&s, lf, &m->layers) != 0 || m->layers < 1 || m->layers > 100000 ||
      bind_int(&s, "vocab_size", &m->vocab) != 0 || m->vocab < 1) {
    char e[600];
    snprintf(e, sizeof e, "%s", err);
    snprintf(err, err_len, "%s: the layer count or vocab_size of this config.json: %s", model->id,
             e);
    free(m);
    return NULL;
  }
  return m;
}

void vf_interp_close(vf_interp *m) {
  free(m);
}

/* The caches and state of layer l (its kind's, or the contract's cache) */
static int layer_bufs(scope *s, int64_t l) {
  const json_t *model = s->m->model;
  const char *kind = mi_ckb_layer_kind(model, s->m->cfg, l);
  const json_t *kinds = json_object_get(json_object_get(model, "layer_kinds"), "kinds");
  if (kinds && !kind)
    return fail(s, "layer %lld: its kind cannot be told from config.json", (long long)l);
  const json_t *kv = kind ? json_object_get(kinds, kind) : NULL;
  const json_t *lists[2] = {kind ? json_object_get(kv, "cache") : json_object_get(model, "cache"),
                            kind ? json_object_get(kv, "state") : json_object_get(model, "state")};
  ibuf *lb = s->per_layer + l * MAX_LAYER_BUFS;
  for (int k = 0; k < 2; k++) {
    size_t i;
    json_t *spec;
    if (!json_is_array(lists[k])) continue; /* a description in prose only */
    json_array_foreach(lists[k], i, spec) {
      if (s->n_per_layer[l] == MAX_LAYER_BUFS)
        return fail(s, "layer %lld: more than %d caches and states", (long long)l, MAX_LAYER_BUFS);
      if (make_buf(s, &lb[s->n_per_layer[l]], spec) != 0) return -1;
      s->n_per_layer[l]++;
    }
  }
  return 0;
}

double *vf_interp_forward(vf_interp *m, const int32_t *ids, int T, int n_out, double *max_score,
                          char *err, size_t err_len) {
  if (T < 1 || n_out < 1 || n_out > T) {
    snprintf(err, err_len, "reference: bad lengths T=%d n_out=%d", T, n_out);
    return NULL;
  }
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= m->vocab) {
      snprintf(err, err_len, "reference: token id %d outside [0, %lld)", ids[t],
               (long long)m->vocab);
      return NULL;
    }
  scope *s = calloc(1, sizeof *s);
  double *logits = NULL;
  if (!s) {
    snprintf(err, err_len, "reference: out of memory");
    return NULL;
  }
  *s = (scope){.m = m,
               .T = T,
               .pos0 = 0,
               .R = n_out,
               .r0 = T - n_out,
               .n_ctx = T,
               .layer = -1,
               .err = err,
               .err_len = err_len};
  s->per_layer = calloc((size_t)m->layers * MAX_LAYER_BUFS, sizeof *s->per_layer);
  s->n_per_layer = calloc((size_t)m->layers, sizeof *s->n_per_layer);
  const json_t *model = m->model;
  int rc = s->per_layer && s->n_per_layer ? 0 : fail(s, "reference: out of memory");
  size_t i;
  json_t *spec;
  json_array_foreach(json_object_get(model, "buffers"), i, spec) {
    if (rc || s->nbufs == MAX_BUFS) {
      if (!rc)
        rc = fail(s, "%s: more than %d buffers", json_string_value(json_object_get(model, "id")),
                  MAX_BUFS);
      break;
    }
    ibuf *b = &s->bufs[s->nbufs];
    if ((rc = make_buf(s, b, spec)) != 0) break;
    s->nbufs++;
    const char *in = json_string_value(json_object_get(spec, "input"));
    for (int t = 0; in && t < T && t < b->n; t++)
      b->p[t] = !strcmp(in, "ids") ? ids[t] : !strcmp(in, "positions") ? t : 0;
  }
  for (int64_t l = 0; rc == 0 && l < m->layers; l++)
    rc = layer_bufs(s, l);
  if (rc == 0) rc = run_sequence(s, json_object_get(model, "prologue"), max_score);
  const json_t *kinds = json_object_get(json_object_get(model, "layer_kinds"), "kinds");
  for (int64_t l = 0; rc == 0 && l < m->layers; l++) {
    s->layer = l;
    const char *kind = kinds ? mi_ckb_layer_kind(model, m->cfg, l) : NULL;
    rc = run_sequence(s,
                      kind ? json_object_get(json_object_get(kinds, kind), "sequence")
                           : json_object_get(model, "layer_sequence"),
                      max_score);
  }
  s->layer = -1;
  if (rc == 0) rc = run_sequence(s, json_object_get(model, "epilogue"), max_score);
  ibuf *lg = rc == 0 ? find_buf(s, "logits", 6) : NULL;
  if (rc == 0 && (!lg || lg->n < (int64_t)n_out * m->vocab))
    rc = fail(s, "the contract's \"logits\" buffer is missing or holds fewer than %d x %lld values",
              n_out, (long long)m->vocab);
  if (rc == 0 &&
      (logits = malloc((size_t)n_out * (size_t)m->vocab * sizeof(double)))) /* [n_out, vocab] */
    memcpy(logits, lg->p, (size_t)n_out * (size_t)m->vocab * sizeof(double));
  else if (rc == 0)
    fail(s, "reference: out of memory");
  for (int k = 0; k < s->nbufs; k++)
    free(s->bufs[k].p);
  for (int64_t l = 0; s->per_layer && s->n_per_layer && l < m->layers; l++)
    for (int k = 0; k < s->n_per_layer[l]; k++)
      free(s->per_layer[l * MAX_LAYER_BUFS + k].p);
  free(s->per_layer);
  free(s->n_per_layer);
  free(s);
  return logits;
}
