/* core/template/eval.c — rendering: scopes, statements, expressions, operators, limits. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/template/jinja_int.h"

static const mi_jinja_limits default_limits = {
    .max_output = (size_t)16 << 20,
    .max_memory = (size_t)256 << 20,
    .max_steps = 20000000,
    .max_iters = 1000000,
    .max_depth = 64,
};

void *jfail(jrender *r, const jnode *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  jerr_v(&r->failed, r->err, sizeof r->err, n ? n->line : -1, n ? n->col : -1, fmt, ap);
  va_end(ap);
  return NULL;
}

/* errors raised without a node get the position of the node being evaluated */
#define FAILPOS(r, n)                                                                              \
  do {                                                                                             \
    if ((r)->failed && (r)->err[0] && strncmp((r)->err, "line ", 5) != 0) {                        \
      char t_[512];                                                                                \
      snprintf(t_, sizeof t_, "%s", (r)->err);                                                     \
      snprintf((r)->err, sizeof(r)->err, "line %d col %d: %.400s", (n)->line, (n)->col, t_);       \
    }                                                                                              \
  } while (0)

static int step(jrender *r, const jnode *n) {
  if (++r->steps > r->lim->max_steps) {
    jfail(r, n, "evaluation limit: over %llu steps", (unsigned long long)r->lim->max_steps);
    return -1;
  }
  return 0;
}

/* ---- scopes ---- */
static jv *lookup(jrender *r, jframe *f, const char *k, size_t kn) {
  for (; f; f = f->up)
    for (size_t i = f->n; i-- > 0;)
      if (f->k[i].n == kn && !memcmp(f->k[i].s, k, kn)) return f->v[i];
  jv *g = jb_global(r, k, kn);
  return g ? g : &jv_undef;
}
static int fset(jrender *r, jframe *f, jstr k, jv *v) {
  for (size_t i = 0; i < f->n; i++)
    if (f->k[i].n == k.n && !memcmp(f->k[i].s, k.s, k.n)) {
      f->v[i] = v;
      return 0;
    }
  if (f->n == f->cap) {
    size_t c = f->cap ? f->cap * 2 : 8;
    jstr *nk = ja_alloc(&r->a, c * sizeof *nk);
    jv **nv = ja_alloc(&r->a, c * sizeof *nv);
    if (!nk || !nv) {
      jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
      return -1;
    }
    if (f->n) {
      memcpy(nk, f->k, f->n * sizeof *nk);
      memcpy(nv, f->v, f->n * sizeof *nv);
    }
    f->k = nk;
    f->v = nv;
    f->cap = c;
  }
  f->k[f->n] = k;
  f->v[f->n++] = v;
  return 0;
}
static jframe *child(jrender *r, jframe *up) {
  jframe *f = ja_alloc(&r->a, sizeof *f);
  if (!f)
    return jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
  f->up = up;
  return f;
}

jv *jnew_bytes(jrender *r, const jnode *at, size_t n) {
  if (n > r->lim->max_output)
    return jfail(r, at, "output limit: a string over %zu bytes", r->lim->max_output);
  jv *v = jv_str(r, "", 0);
  if (!v) return NULL;
  char *c = ja_alloc(&r->a, n + 1);
  if (!c) return jfail(r, at, "memory limit: the template made over %zu bytes of values", r->a.cap);
  v->s = (jstr){c, n};
  return v;
}

/* ---- expressions ---- */
static int as_num(const jv *v, double *d, int *is_int, long long *i) {
  if (v->t == V_INT) {
    *d = (double)v->i;
    *i = v->i;
    *is_int = 1;
    return 1;
  }
  if (v->t == V_FLOAT) {
    *d = v->f;
    *is_int = 0;
    return 1;
  }
  return 0;
}

jv *jbuf_str(jrender *r, const jnode *at, jbuf *b, int rc) {
  if (rc || b->over) {
    free(b->p);
    return r->failed ? NULL
                     : jfail(r, at, "output limit: a string over %zu bytes", r->lim->max_output);
  }
  jv *s = jv_str(r, b->p ? b->p : "", b->n);
  free(b->p);
  return s;
}

static jv *text_of(jrender *r, const jnode *at, jv *v) {
  if (v->t == V_STR) return v;
  jbuf b = {.max = r->lim->max_output};
  return jbuf_str(r, at, &b, jv_to_text(r, v, &b));
}

static jv *concat(jrender *r, const jnode *at, jv *a, jv *b) {
  jv *x = text_of(r, at, a), *y = x ? text_of(r, at, b) : NULL;
  if (!y) return NULL;
  jv *s = jnew_bytes(r, at, x->s.n + y->s.n);
  if (!s) return NULL;
  memcpy((char *)s->s.s, x->s.s, x->s.n);
  memcpy((char *)s->s.s + x->s.n, y->s.s, y->s.n);
  return s;
}

static int contains(jrender *r, const jnode *at, jv *x, jv *in) {
  if (in->t == V_UNDEF) return 0;
  if (in->t == V_LIST) {
    for (size_t i = 0; i < in->l.n; i++)
      if (jv_equal(x, in->l.a[i])) return 1;
    return 0;
  }
  if (in->t == V_STR && x->t == V_STR) {
    if (!x->s.n) return 1;
    for (size_t i = 0; i + x->s.n <= in->s.n; i++)
      if (!memcmp(in->s.s + i, x->s.s, x->s.n)) return 1;
    return 0;
  }
  if ((in->t == V_DICT || in->t == V_NS) && x->t == V_STR)
    return jv_dict_get(in, x->s.s, x->s.n) != NULL;
  if (in->t == V_DICT || in->t == V_NS) return 0;
  jfail(r, at, "'in' needs a list, string or dict on its right, got %s", jv_type_name(in));
  return -1;
}

static const char *op_name(int op) {
  static const char *n[] = {"?",  "+",  "-", "*",  "/", "//", "%",  "**",    "~",
                            "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
  return op > 0 && op <= OP_NOTIN ? n[op] : "?";
}

static jv *binary(jrender *r, const jnode *n, jv *a, jv *b) {
  int op = n->op;
  switch (op) {
  case OP_EQ: return jv_equal(a, b) ? &jv_true : &jv_false;
  case OP_NE: return jv_equal(a, b) ? &jv_false : &jv_true;
  case OP_IN:
  case OP_NOTIN: {
    int c = contains(r, n, a, b);
    if (c < 0) return NULL;
    return (c ^ (op == OP_NOTIN)) ? &jv_true : &jv_false;
  }
  case OP_CAT: return concat(r, n, a, b);
  default: break;
  }
  if (a->t == V_UNDEF || b->t == V_UNDEF)
    return jfail(r, n, "cannot apply '%s' to an undefined value", op_name(op));
  if (a->t == V_NONE || b->t == V_NONE)
    return jfail(r, n, "cannot apply '%s' to none", op_name(op));
  double x = 0, y = 0;
  long long i = 0, j = 0;
  int xi = 0, yi = 0;
  int na = as_num(a, &x, &xi, &i), nb = as_num(b, &y, &yi, &j);
  if (na && nb) {
    int ints = xi && yi;
    long long res;
    switch (op) {
    case OP_ADD:
      if (!ints) return jv_float(r, x + y);
      if (__builtin_add_overflow(i, j, &res)) return jfail(r, n, "integer overflow in '+'");
      return jv_int(r, res);
    case OP_SUB:
      if (!ints) return jv_float(r, x - y);
      if (__builtin_sub_overflow(i, j, &res)) return jfail(r, n, "integer overflow in '-'");
      return jv_int(r, res);
    case OP_MUL:
      if (!ints) return jv_float(r, x * y);
      if (__builtin_mul_overflow(i, j, &res)) return jfail(r, n, "integer overflow in '*'");
      return jv_int(r, res);
    case OP_DIV:
      if (y == 0) return jfail(r, n, "division by zero");
      return jv_float(r, x / y);
    case OP_FDIV:
    case OP_MOD:
      if (y == 0) return jfail(r, n, op == OP_MOD ? "modulo by zero" : "division by zero");
      if (ints) {
        if (i == LLONG_MIN && j == -1) return jfail(r, n, "integer overflow in '%s'", op_name(op));
        long long q = i / j, m = i % j;
        if (m != 0 && ((m < 0) != (j < 0))) {
          q--;
          m += j;
        }
        return jv_int(r, op == OP_FDIV ? q : m);
      } else {
        double q = floor(x / y), m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return jv_float(r, op == OP_FDIV ? q : m);
      }
    case OP_POW:
      if (ints && j >= 0) {
        long long acc = 1, base = i;
        for (long long e = j; e > 0; e >>= 1) {
          if (e & 1 && __builtin_mul_overflow(acc, base, &acc))
            return jfail(r, n, "integer overflow in '**'");
          if (e > 1 && __builtin_mul_overflow(base, base, &base))
            return jfail(r, n, "integer overflow in '**'");
        }
        return jv_int(r, acc);
      }
      if (x == 0 && y < 0) return jfail(r, n, "0 cannot be raised to a negative power");
      return jv_float(r, pow(x, y));
    case OP_LT: return x < y ? &jv_true : &jv_false;
    case OP_LE: return x <= y ? &jv_true : &jv_false;
    case OP_GT: return x > y ? &jv_true : &jv_false;
    case OP_GE: return x >= y ? &jv_true : &jv_false;
    }
  }
  if (a->t == V_STR && b->t == V_STR && op >= OP_LT && op <= OP_GE) {
    size_t m = a->s.n < b->s.n ? a->s.n : b->s.n;
    int c = memcmp(a->s.s, b->s.s, m);
    if (!c) c = (a->s.n > b->s.n) - (a->s.n < b->s.n);
    int t = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    return t ? &jv_true : &jv_false;
  }
  if (op == OP_ADD && a->t == V_LIST && b->t == V_LIST) {
    jv *l = jv_list(r, a->l.n + b->l.n);
    if (!l) return NULL;
    if (a->l.n) memcpy(l->l.a, a->l.a, a->l.n * sizeof *l->l.a);
    if (b->l.n) memcpy(l->l.a + a->l.n, b->l.a, b->l.n * sizeof *l->l.a);
    return l;
  }
  if (op == OP_ADD && (a->t == V_STR || b->t == V_STR)) return concat(r, n, a, b);
  if (op == OP_MUL && ((a->t == V_STR && b->t == V_INT) || (a->t == V_INT && b->t == V_STR))) {
    jv *s = a->t == V_STR ? a : b;
    long long k = a->t == V_INT ? a->i : b->i;
    if (k <= 0 || !s->s.n) return jv_str(r, "", 0);
    if ((unsigned long long)k > r->lim->max_output / s->s.n)
      return jfail(r, n, "output limit: a string over %zu bytes", r->lim->max_output);
    jv *o = jnew_bytes(r, n, s->s.n * (size_t)k);
    if (!o) return NULL;
    for (long long t = 0; t < k; t++)
      memcpy((char *)o->s.s + (size_t)t * s->s.n, s->s.s, s->s.n);
    return o;
  }
  return jfail(r, n, "cannot apply '%s' to %s and %s", op_name(op), jv_type_name(a),
               jv_type_name(b));
}

/* Python index into a UTF-8 string: code points */
static size_t cp_count(const jstr *s) {
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (((unsigned char)s->s[i] & 0xC0) != 0x80) k++;
  return k;
}
static size_t cp_offset(const jstr *s, size_t idx) { /* byte offset of code point idx */
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (((unsigned char)s->s[i] & 0xC0) != 0x80) {
      if (k == idx) return i;
      k++;
    }
  return s->n;
}

static jv *index_of(jrender *r, const jnode *n, jv *o, jv *k) {
  if (o->t == V_LIST || o->t == V_STR) {
    if (k->t == V_STR && o->t == V_STR) return jb_attr(r, n, o, k->s.s, k->s.n);
    if (k->t != V_INT && k->t != V_BOOL) {
      if (o->t == V_LIST) return &jv_undef;
      return jfail(r, n, "a %s index must be an integer, got %s", jv_type_name(o), jv_type_name(k));
    }
    long long i = k->t == V_INT ? k->i : k->b;
    long long len = o->t == V_LIST ? (long long)o->l.n : (long long)cp_count(&o->s);
    if (i < 0) i += len;
    if (i < 0 || i >= len) return &jv_undef;
    if (o->t == V_LIST) return o->l.a[i];
    size_t b0 = cp_offset(&o->s, (size_t)i), b1 = cp_offset(&o->s, (size_t)i + 1);
    return jv_str(r, o->s.s + b0, b1 - b0);
  }
  if (o->t == V_DICT || o->t == V_NS) {
    if (k->t == V_STR) {
      jv *v = jv_dict_get(o, k->s.s, k->s.n);
      return v ? v : &jv_undef;
    }
    jv *kt = text_of(r, n, k);
    if (!kt) return NULL;
    jv *v = jv_dict_get(o, kt->s.s, kt->s.n);
    return v ? v : &jv_undef;
  }
  if (k->t == V_STR) return jb_attr(r, n, o, k->s.s, k->s.n);
  return &jv_undef;
}

static int slice_arg(jrender *r, const jnode *n, jframe *f, const jnode *e, long long *out,
                     int *given) {
  *given = 0;
  if (!e) return 0;
  jv *v = jeval(r, f, e);
  if (!v) return -1;
  if (v->t == V_NONE || v->t == V_UNDEF) return 0;
  if (v->t != V_INT) {
    jfail(r, n, "slice bounds must be integers, got %s", jv_type_name(v));
    return -1;
  }
  *out = v->i;
  *given = 1;
  return 0;
}

/* One end of a slice over len items as Python's slice.indices places it
 * (dflt when not given). */
static long long slice_index(long long v, int given, long long len, long long stp, long long dflt) {
  if (!given) return dflt;
  if (v < 0) {
    v += len;
    if (v < 0) v = stp < 0 ? -1 : 0;
  } else if (v >= len)
    v = stp < 0 ? len - 1 : len;
  return v;
}

static jv *slice_of(jrender *r, jframe *f, const jnode *n, jv *o) {
  long long st = 0, sp = 0, stp = 1;
  int hs, hp, hstp;
  if (slice_arg(r, n, f, n->b, &st, &hs) || slice_arg(r, n, f, n->c, &sp, &hp) ||
      slice_arg(r, n, f, n->d, &stp, &hstp))
    return NULL;
  if (stp == 0) return jfail(r, n, "slice step cannot be zero");
  if (o->t != V_LIST && o->t != V_STR) return jfail(r, n, "cannot slice a %s", jv_type_name(o));
  long long len = o->t == V_LIST ? (long long)o->l.n : (long long)cp_count(&o->s);
  st = slice_index(st, hs, len, stp, stp < 0 ? len - 1 : 0);
  sp = slice_index(sp, hp, len, stp, stp < 0 ? -1 : len);
  size_t cnt = 0;
  if (stp > 0 && sp > st) cnt = (size_t)((sp - st + stp - 1) / stp);
  if (stp < 0 && st > sp) cnt = (size_t)((st - sp - stp - 1) / -stp);
  if (o->t == V_LIST) {
    jv *l = jv_list(r, cnt);
    if (!l) return NULL;
    for (size_t i = 0; i < cnt; i++)
      l->l.a[i] = o->l.a[st + (long long)i * stp];
    return l;
  }
  /* strings: gather code points */
  size_t *offs = ja_alloc(&r->a, ((size_t)len + 1) * sizeof *offs);
  if (!offs) return jfail(r, n, "memory limit");
  size_t k = 0;
  for (size_t i = 0; i < o->s.n; i++)
    if (((unsigned char)o->s.s[i] & 0xC0) != 0x80) offs[k++] = i;
  offs[k] = o->s.n;
  jbuf b = {.max = r->lim->max_output};
  for (size_t i = 0; i < cnt; i++) {
    long long c = st + (long long)i * stp;
    jb_put(&b, o->s.s + offs[c], offs[c + 1] - offs[c]);
  }
  jv *s = jv_str(r, b.p ? b.p : "", b.n);
  free(b.p);
  return s;
}

/* evaluate call arguments: positional and keyword */
int jeval_args(jrender *r, jframe *f, const jnlist *args, jv ***pos, size_t *np, jstr **kwn,
               jv ***kwv, size_t *nk) {
  *np = *nk = 0;
  *pos = ja_alloc(&r->a, (args->n + 1) * sizeof **pos);
  *kwv = ja_alloc(&r->a, (args->n + 1) * sizeof **kwv);
  *kwn = ja_alloc(&r->a, (args->n + 1) * sizeof **kwn);
  if (!*pos || !*kwv || !*kwn) {
    jfail(r, NULL, "memory limit");
    return -1;
  }
  for (size_t i = 0; i < args->n; i++) {
    const jnode *a = args->v[i];
    jv *v = jeval(r, f, a->t == E_KW ? a->a : a);
    if (!v) return -1;
    if (a->t == E_KW) {
      (*kwn)[*nk] = a->s;
      (*kwv)[(*nk)++] = v;
    } else
      (*pos)[(*np)++] = v;
  }
  return 0;
}

jv *jcall_macro(jrender *r, const jnode *at, jv *m, jv **args, size_t nargs, jstr *kwn, jv **kwv,
                size_t nkw) {
  const jnode *def = m->mac.def;
  if (r->depth >= r->lim->max_depth)
    return jfail(r, at, "recursion limit: macro calls nested over %d deep", r->lim->max_depth);
  if (nargs > def->args.n)
    return jfail(r, at, "macro '%.*s' takes %zu arguments, got %zu", (int)def->s.n, def->s.s,
                 def->args.n, nargs);
  jframe *f = child(r, r->root);
  if (!f) return NULL;
  for (size_t i = 0; i < def->args.n; i++) {
    jv *v = NULL;
    if (i < nargs) v = args[i];
    for (size_t k = 0; k < nkw; k++)
      if (kwn[k].n == def->args.v[i]->s.n && !memcmp(kwn[k].s, def->args.v[i]->s.s, kwn[k].n))
        v = kwv[k];
    if (!v) v = def->args2.v[i] ? jeval(r, f, def->args2.v[i]) : &jv_undef;
    if (!v || fset(r, f, def->args.v[i]->s, v)) return NULL;
  }
  for (size_t k = 0; k < nkw; k++) {
    int found = 0;
    for (size_t i = 0; i < def->args.n; i++)
      if (kwn[k].n == def->args.v[i]->s.n && !memcmp(kwn[k].s, def->args.v[i]->s.s, kwn[k].n))
        found = 1;
    if (!found)
      return jfail(r, at, "macro '%.*s' has no argument '%.*s'", (int)def->s.n, def->s.s,
                   (int)kwn[k].n, kwn[k].s);
  }
  if (m->mac.caller && fset(r, f, (jstr){"caller", 6}, m->mac.caller)) return NULL;
  jbuf b = {.max = r->lim->max_output}, *saved = r->out;
  r->out = &b;
  r->depth++;
  int rc = jexec(r, f, &def->body);
  r->depth--;
  r->out = saved;
  if (rc < 0) {
    free(b.p);
    return NULL;
  }
  jv *s = jv_str(r, b.p ? b.p : "", b.n);
  free(b.p);
  return s;
}

jv *jeval(jrender *r, jframe *f, const jnode *n) {
  if (r->failed || step(r, n)) return NULL;
  jv *a, *b, *v;
  switch (n->t) {
  case E_NONE: return &jv_none;
  case E_BOOL: return n->op ? &jv_true : &jv_false;
  case E_INT: return jv_int(r, n->i);
  case E_FLOAT: return jv_float(r, n->f);
  case E_STR:
    v = jv_str(r, "", 0);
    if (v) v->s = n->s;
    return v;
  case E_NAME: return lookup(r, f, n->s.s, n->s.n);
  case E_LIST:
  case E_TUPLE:
    if (!(v = jv_list(r, n->args.n))) return NULL;
    v->tuple = n->t == E_TUPLE;
    for (size_t i = 0; i < n->args.n; i++)
      if (!(v->l.a[i] = jeval(r, f, n->args.v[i]))) return NULL;
    return v;
  case E_DICT:
    if (!(v = jv_dict(r))) return NULL;
    for (size_t i = 0; i < n->args.n; i++) {
      jv *k = jeval(r, f, n->args.v[i]), *x = k ? jeval(r, f, n->args2.v[i]) : NULL;
      if (!x) return NULL;
      jv *kt = text_of(r, n->args.v[i], k);
      if (!kt || jv_dict_set(r, v, kt->s.s, kt->s.n, x)) return NULL;
    }
    return v;
  case E_ATTR:
    if (!(a = jeval(r, f, n->a))) return NULL;
    if (a->t == V_DICT || a->t == V_NS) {
      jv *x = jv_dict_get(a, n->s.s, n->s.n);
      if (x) return x;
    }
    v = jb_attr(r, n, a, n->s.s, n->s.n);
    if (!v) FAILPOS(r, n);
    return v;
  case E_INDEX:
  case E_BIN:
    if (!(a = jeval(r, f, n->a)) || !(b = jeval(r, f, n->b))) return NULL;
    v = n->t == E_INDEX ? index_of(r, n, a, b) : binary(r, n, a, b);
    if (!v) FAILPOS(r, n);
    return v;
  case E_SLICE:
    if (!(a = jeval(r, f, n->a))) return NULL;
    return slice_of(r, f, n, a);
  case E_CALL: {
    jv *fn = jeval(r, f, n->a);
    if (!fn) return NULL;
    jv **pos, **kwv;
    jstr *kwn;
    size_t np, nk;
    if (jeval_args(r, f, &n->args, &pos, &np, &kwn, &kwv, &nk)) return NULL;
    if (fn->t == V_MACRO)
      v = jcall_macro(r, n, fn, pos, np, kwn, kwv, nk);
    else if (fn->t == V_FUNC)
      v = jb_call(r, n, fn, pos, np, kwn, kwv, nk);
    else if (fn->t == V_UNDEF && n->a->t == E_NAME)
      return jfail(r, n, "unknown function '%.*s'", (int)n->a->s.n, n->a->s.s);
    else if (fn->t == V_UNDEF && n->a->t == E_ATTR)
      return jfail(r, n, "unknown method '%.*s'", (int)n->a->s.n, n->a->s.s);
    else
      return jfail(r, n, "a %s cannot be called", jv_type_name(fn));
    if (!v) FAILPOS(r, n);
    return v;
  }
  case E_FILTER:
    if (!(a = jeval(r, f, n->a))) return NULL;
    v = jb_filter(r, f, n, a);
    if (!v) FAILPOS(r, n);
    return v;
  case E_TEST:
    if (!(a = jeval(r, f, n->a))) return NULL;
    v = jb_test(r, f, n, a);
    if (!v) {
      FAILPOS(r, n);
      return NULL;
    }
    return (jv_truthy(v) ^ n->op) ? &jv_true : &jv_false;
  case E_NOT:
    if (!(a = jeval(r, f, n->a))) return NULL;
    return jv_truthy(a) ? &jv_false : &jv_true;
  case E_NEG:
  case E_POS:
    if (!(a = jeval(r, f, n->a))) return NULL;
    if (a->t == V_INT) {
      if (n->t == E_POS) return a;
      if (a->i == LLONG_MIN) return jfail(r, n, "integer overflow in '-'");
      return jv_int(r, -a->i);
    }
    if (a->t == V_FLOAT) return n->t == E_POS ? a : jv_float(r, -a->f);
    return jfail(r, n, "unary '%s' needs a number, got %s", n->t == E_NEG ? "-" : "+",
                 jv_type_name(a));
  case E_AND:
    if (!(a = jeval(r, f, n->a))) return NULL;
    return jv_truthy(a) ? jeval(r, f, n->b) : a;
  case E_OR:
    if (!(a = jeval(r, f, n->a))) return NULL;
    return jv_truthy(a) ? a : jeval(r, f, n->b);
  case E_TERN:
    if (!(a = jeval(r, f, n->b))) return NULL;
    if (jv_truthy(a)) return jeval(r, f, n->a);
    return n->c ? jeval(r, f, n->c) : &jv_undef;
  case E_KW: return jfail(r, n, "keyword argument outside a call");
  default: return jfail(r, n, "not an expression");
  }
}

/* ---- statements ---- */
static int emit(jrender *r, const jnode *n, jv *v) {
  if (jv_to_text(r, v, r->out)) return -1;
  if (r->out->over) {
    jfail(r, n, "output limit: over %zu bytes rendered", r->lim->max_output);
    return -1;
  }
  return 0;
}

/* A list's items into the names t->args lists, one each; `what` names
 * them in the error. */
static int unpack(jrender *r, jframe *f, const jnode *t, jv *v, const char *what) {
  if (v->t != V_LIST || v->l.n != t->args.n) {
    jfail(r, t, "cannot unpack a %s into %zu %s", jv_type_name(v), t->args.n, what);
    return -1;
  }
  for (size_t i = 0; i < t->args.n; i++)
    if (fset(r, f, t->args.v[i]->s, v->l.a[i])) return -1;
  return 0;
}

static int assign(jrender *r, jframe *f, const jnode *t, jv *v) {
  if (t->t == E_NAME) return fset(r, f, t->s, v);
  if (t->t == E_ATTR) {
    jv *o = lookup(r, f, t->a->s.s, t->a->s.n);
    if (o->t != V_NS) {
      jfail(r, t, "cannot set an attribute of a %s (only of a namespace)", jv_type_name(o));
      return -1;
    }
    return jv_dict_set(r, o, t->s.s, t->s.n, v);
  }
  return unpack(r, f, t, v, "names"); /* tuple */
}

jv *jlist_of(jrender *r, jv *x, int ns, int *other) {
  *other = 0;
  if (x->t == V_LIST) return x;
  if (x->t == V_DICT || (ns && x->t == V_NS)) {
    jv *l = jv_list(r, x->d.n);
    if (!l) return NULL;
    for (size_t i = 0; i < x->d.n; i++)
      if (!(l->l.a[i] = jv_str(r, x->d.k[i].s, x->d.k[i].n))) return NULL;
    return l;
  }
  if (x->t == V_STR) {
    jv *l = jv_list(r, cp_count(&x->s));
    if (!l) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < x->s.n;) {
      size_t j = i + 1;
      while (j < x->s.n && ((unsigned char)x->s.s[j] & 0xC0) == 0x80)
        j++;
      if (!(l->l.a[k++] = jv_str(r, x->s.s + i, j - i))) return NULL;
      i = j;
    }
    return l;
  }
  *other = 1;
  return NULL;
}

static jv *iterable(jrender *r, const jnode *n, jv *it) {
  int other = 0;
  jv *l = jlist_of(r, it, 1, &other); /* a dict or namespace gives its keys */
  return other ? jfail(r, n, "cannot loop over a %s", jv_type_name(it)) : l;
}

static int bind_targets(jrender *r, jframe *f, const jnode *n, jv *item) {
  if (n->args.n == 1) return fset(r, f, n->args.v[0]->s, item);
  return unpack(r, f, n, item, "loop variables");
}

static int iter_step(jrender *r, const jnode *n) {
  if (++r->iters > r->lim->max_iters) {
    jfail(r, n, "loop limit: over %llu iterations", (unsigned long long)r->lim->max_iters);
    return -1;
  }
  return 0;
}

static int exec_for(jrender *r, jframe *f, const jnode *n) {
  jv *it = jeval(r, f, n->b);
  if (!it) return -1;
  if (!(it = iterable(r, n->b, it))) return -1;
  jframe *lf = child(r, f);
  if (!lf) return -1;
  jv **items = it->l.a;
  size_t cnt = it->l.n;
  if (n->c) { /* the filter decides which items the loop (and loop.length) sees */
    jv **keep = ja_alloc(&r->a, (cnt + 1) * sizeof *keep);
    if (!keep) {
      jfail(r, n, "memory limit");
      return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < cnt; i++) {
      if (iter_step(r, n) || bind_targets(r, lf, n, items[i])) return -1;
      jv *c = jeval(r, lf, n->c);
      if (!c) return -1;
      if (jv_truthy(c)) keep[k++] = items[i];
    }
    items = keep;
    cnt = k;
  }
  if (!cnt) return jexec(r, f, &n->els);
  jloop *ls = ja_alloc(&r->a, sizeof *ls);
  jv *lv = ls ? ja_alloc(&r->a, sizeof *lv) : NULL;
  if (!lv) {
    jfail(r, n, "memory limit");
    return -1;
  }
  ls->n = cnt;
  ls->items = items;
  lv->t = V_LOOP;
  lv->loop = ls;
  if (fset(r, lf, (jstr){"loop", 4}, lv)) return -1;
  for (size_t i = 0; i < cnt; i++) {
    if (iter_step(r, n)) return -1;
    ls->i = i;
    if (bind_targets(r, lf, n, items[i])) return -1;
    int rc = jexec(r, lf, &n->body);
    if (rc < 0) return -1;
    if (rc == 1) break;
  }
  return 0;
}

int jexec(jrender *r, jframe *f, const jnlist *body) {
  for (size_t i = 0; i < body->n; i++) {
    const jnode *n = body->v[i];
    if (r->failed || step(r, n)) return -1;
    jv *v;
    switch (n->t) {
    case N_TEXT:
      jb_put(r->out, n->s.s, n->s.n);
      if (r->out->over) {
        jfail(r, n, "output limit: over %zu bytes rendered", r->lim->max_output);
        return -1;
      }
      break;
    case N_OUT:
      if (!(v = jeval(r, f, n->a)) || emit(r, n, v)) return -1;
      break;
    case N_IF: {
      if (!(v = jeval(r, f, n->a))) return -1;
      int rc = jexec(r, f, jv_truthy(v) ? &n->body : &n->els);
      if (rc) return rc;
      break;
    }
    case N_FOR:
      if (exec_for(r, f, n)) return -1;
      break;
    case N_SET:
      if (!(v = jeval(r, f, n->b)) || assign(r, f, n->a, v)) return -1;
      break;
    case N_SETBLOCK: {
      jbuf b = {.max = r->lim->max_output}, *saved = r->out;
      r->out = &b;
      int rc = jexec(r, f, &n->body);
      r->out = saved;
      v = rc == 0 ? jv_str(r, b.p ? b.p : "", b.n) : NULL;
      free(b.p);
      if (rc) return rc < 0 ? -1 : rc;
      if (!v || fset(r, f, n->a->s, v)) return -1;
      break;
    }
    case N_MACRO:
      if (!(v = ja_alloc(&r->a, sizeof *v))) {
        jfail(r, n, "memory limit");
        return -1;
      }
      v->t = V_MACRO;
      v->mac.def = n;
      if (fset(r, f, n->s, v)) return -1;
      break;
    case N_CALLBLOCK: {
      /* {% call m(args) %}BODY{% endcall %}: m runs with caller() rendering BODY */
      const jnode *c = n->a;
      jv *fn = jeval(r, f, c->a);
      if (!fn) return -1;
      if (fn->t != V_MACRO) {
        jfail(r, n, "{%% call %%} needs a macro, got %s", jv_type_name(fn));
        return -1;
      }
      jv *body = ja_alloc(&r->a, sizeof *body), *m2 = ja_alloc(&r->a, sizeof *m2);
      jnode *def = ja_alloc(&r->a, sizeof *def);
      if (!body || !m2 || !def) {
        jfail(r, n, "memory limit");
        return -1;
      }
      def->t = N_MACRO;
      def->line = n->line;
      def->col = n->col;
      def->s = (jstr){"caller", 6};
      def->body = n->body;
      body->t = V_MACRO;
      body->mac.def = def;
      *m2 = *fn;
      m2->mac.caller = body;
      jv **pos, **kwv;
      jstr *kwn;
      size_t np, nk;
      if (jeval_args(r, f, &c->args, &pos, &np, &kwn, &kwv, &nk)) return -1;
      if (!(v = jcall_macro(r, n, m2, pos, np, kwn, kwv, nk)) || emit(r, n, v)) return -1;
      break;
    }
    case N_BREAK: return 1;
    case N_CONTINUE: return 2;
    case N_NOOP: break;
    default: jfail(r, n, "not a statement"); return -1;
    }
  }
  return 0;
}

char *mi_jinja_render(const mi_jinja *t, const json_t *vars, const mi_jinja_opts *o, char *err,
                      size_t errlen, int *raised) {
  char dummy[8];
  if (!err || !errlen) {
    err = dummy;
    errlen = sizeof dummy;
  }
  err[0] = 0;
  if (raised) *raised = 0;
  if (!t) {
    snprintf(err, errlen, "line 1 col 1: no template");
    return NULL;
  }
  jrender r = {0};
  r.lim = o && o->limits ? o->limits : &default_limits;
  r.now = o ? o->now : 0;
  r.a.cap = r.lim->max_memory;
  jbuf out = {.max = r.lim->max_output};
  r.out = &out;
  jb_put(&out, "", 0);
  r.root = child(&r, NULL);
  if (r.root && vars && json_is_object(vars)) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vars, k, v) {
      jv *x = jv_from_json(&r, v, 0);
      char *kc = x ? ja_strndup(&r.a, k, strlen(k)) : NULL;
      if (!kc || fset(&r, r.root, (jstr){kc, strlen(k)}, x)) {
        r.failed = 1;
        break;
      }
    }
  }
  int rc = r.failed ? -1 : jexec(&r, r.root, &t->body);
  if (rc < 0 || out.over) {
    if (!r.err[0])
      snprintf(r.err, sizeof r.err,
               out.over ? "output limit: over %zu bytes rendered" : "out of memory",
               r.lim->max_output);
    if (strncmp(r.err, "line ", 5) != 0)
      snprintf(err, errlen, "line 1 col 1: %s", r.err);
    else
      snprintf(err, errlen, "%s", r.err);
    if (raised) *raised = r.raised;
    free(out.p);
    ja_free(&r.a);
    return NULL;
  }
  ja_free(&r.a);
  return out.p;
}

char *mi_jinja_render_text(const char *src, const json_t *vars, const mi_jinja_opts *o, char *err,
                           size_t errlen, int *raised) {
  if (raised) *raised = 0;
  mi_jinja *t = mi_jinja_parse(src, src ? strlen(src) : 0, err, errlen);
  if (!t) return NULL;
  char *s = mi_jinja_render(t, vars, o, err, errlen, raised);
  mi_jinja_free(t);
  return s;
}
