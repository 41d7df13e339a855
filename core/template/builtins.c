/* core/template/builtins.c — filters, tests, methods (str/dict/loop) and
 * global functions (range, namespace, raise_exception, strftime_now, dict). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/template/jinja_int.h"

enum {
  F_RANGE = 1,
  F_NAMESPACE,
  F_RAISE,
  F_STRFTIME,
  F_DICT,
  M_STRIP,
  M_LSTRIP,
  M_RSTRIP,
  M_SPLIT,
  M_STARTSWITH,
  M_ENDSWITH,
  M_REPLACE,
  M_UPPER,
  M_LOWER,
  M_TITLE,
  M_CAPITALIZE,
  M_ITEMS,
  M_KEYS,
  M_VALUES,
  M_GET,
  M_LOOP_CYCLE,
  M_COUNT,
  M_FIND
};

static jv *fnv(jrender *r, int id, jv *self) {
  jv *v = ja_alloc(&r->a, sizeof *v);
  if (!v) return jfail(r, NULL, "memory limit");
  v->t = V_FUNC;
  v->fn.id = id;
  v->fn.self = self;
  return v;
}
static int eq(const char *s, size_t n, const char *w) {
  return strlen(w) == n && !memcmp(s, w, n);
}

jv *jb_global(jrender *r, const char *k, size_t n) {
  if (eq(k, n, "range")) return fnv(r, F_RANGE, NULL);
  if (eq(k, n, "namespace")) return fnv(r, F_NAMESPACE, NULL);
  if (eq(k, n, "raise_exception")) return fnv(r, F_RAISE, NULL);
  if (eq(k, n, "strftime_now")) return fnv(r, F_STRFTIME, NULL);
  if (eq(k, n, "dict")) return fnv(r, F_DICT, NULL);
  return NULL;
}

/* ---- string helpers ---- */
static int is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static int in_set(unsigned char c, const jstr *chars) {
  if (!chars) return is_space(c);
  return memchr(chars->s, c, chars->n) != NULL;
}
static jv *strip(jrender *r, jv *s, int l, int rt, const jstr *chars) {
  size_t a = 0, b = s->s.n;
  if (l)
    while (a < b && in_set((unsigned char)s->s.s[a], chars))
      a++;
  if (rt)
    while (b > a && in_set((unsigned char)s->s.s[b - 1], chars))
      b--;
  return jv_str(r, s->s.s + a, b - a);
}
static jv *casemap(jrender *r, jv *s,
                   int mode) { /* 0 upper, 1 lower, 2 title, 3 capitalize (ASCII letters) */
  jv *o = jv_str(r, s->s.s, s->s.n);
  if (!o) return NULL;
  char *p = (char *)o->s.s;
  int prev_alpha = 0;
  for (size_t i = 0; i < o->s.n; i++) {
    unsigned char c = (unsigned char)p[i];
    switch (mode) {
    case 0: p[i] = (char)toupper(c); break;
    case 1: p[i] = (char)tolower(c); break;
    case 2:
      p[i] = (char)(prev_alpha ? tolower(c) : toupper(c));
      prev_alpha = isalpha(c) || c >= 0x80 || c == '\'';
      break;
    case 3: p[i] = (char)(i == 0 ? toupper(c) : tolower(c)); break;
    }
  }
  return o;
}
static jv *replace(jrender *r, const jnode *at, jv *s, jv *old, jv *new, long long count) {
  jbuf b = {.max = r->lim->max_output};
  size_t i = 0;
  long long done = 0;
  if (!old->s.n) { /* Python: insert between every character */
    for (; i <= s->s.n && (count < 0 || done < count); done++) {
      jb_put(&b, new->s.s, new->s.n);
      if (i < s->s.n) jb_put(&b, s->s.s + i, 1);
      i++;
    }
    if (i < s->s.n) jb_put(&b, s->s.s + i, s->s.n - i);
  } else {
    while (i < s->s.n) {
      if ((count < 0 || done < count) && i + old->s.n <= s->s.n &&
          !memcmp(s->s.s + i, old->s.s, old->s.n)) {
        jb_put(&b, new->s.s, new->s.n);
        i += old->s.n;
        done++;
      } else
        jb_put(&b, s->s.s + i++, 1);
    }
  }
  return jbuf_str(r, at, &b, 0);
}
static jv *split(jrender *r, jv *s, jv *sep, long long maxsplit) {
  jv *parts[1];
  (void)parts;
  size_t cap = 8, n = 0;
  jv **v = ja_alloc(&r->a, cap * sizeof *v);
  if (!v) return jfail(r, NULL, "memory limit");
  const char *p = s->s.s, *e = p + s->s.n;
#define PUSH(ptr_, len_)                                                                           \
  do {                                                                                             \
    if (n == cap) {                                                                                \
      jv **nv = ja_alloc(&r->a, cap * 2 * sizeof *nv);                                             \
      if (!nv) return jfail(r, NULL, "memory limit");                                              \
      memcpy(nv, v, cap * sizeof *nv);                                                             \
      v = nv;                                                                                      \
      cap *= 2;                                                                                    \
    }                                                                                              \
    if (!(v[n++] = jv_str(r, (ptr_), (len_)))) return NULL;                                        \
  } while (0)
  if (!sep || sep->t == V_NONE) {
    while (p < e) {
      while (p < e && is_space((unsigned char)*p))
        p++;
      if (p >= e) break;
      if (maxsplit >= 0 && (long long)n >= maxsplit) {
        const char *q = e;
        while (q > p && is_space((unsigned char)q[-1]))
          q--;
        PUSH(p, (size_t)(q - p));
        break;
      }
      const char *q = p;
      while (q < e && !is_space((unsigned char)*q))
        q++;
      PUSH(p, (size_t)(q - p));
      p = q;
    }
  } else {
    if (sep->t != V_STR || !sep->s.n)
      return jfail(r, NULL, "split() needs a non-empty string separator");
    for (;;) {
      const char *q = NULL;
      if (maxsplit < 0 || (long long)n < maxsplit)
        for (const char *t = p; t + sep->s.n <= e; t++)
          if (!memcmp(t, sep->s.s, sep->s.n)) {
            q = t;
            break;
          }
      if (!q) {
        PUSH(p, (size_t)(e - p));
        break;
      }
      PUSH(p, (size_t)(q - p));
      p = q + sep->s.n;
    }
  }
#undef PUSH
  jv *l = jv_list(r, 0);
  if (!l) return NULL;
  l->l.a = v;
  l->l.n = n;
  return l;
}
static int starts(const jv *s, const jv *p, int end) {
  if (p->s.n > s->s.n) return 0;
  return !memcmp(s->s.s + (end ? s->s.n - p->s.n : 0), p->s.s, p->s.n);
}

static jv *items_of(jrender *r, jv *d) {
  jv *l = jv_list(r, d->d.n);
  if (!l) return NULL;
  for (size_t i = 0; i < d->d.n; i++) {
    jv *t = jv_list(r, 2), *k = t ? jv_str(r, d->d.k[i].s, d->d.k[i].n) : NULL;
    if (!k) return NULL;
    t->tuple = 1;
    t->l.a[0] = k;
    t->l.a[1] = d->d.v[i];
    l->l.a[i] = t;
  }
  return l;
}

jv *jb_attr(jrender *r, const jnode *at, jv *o, const char *k, size_t n) {
  (void)at;
  if (o->t == V_DICT) {
    jv *v = jv_dict_get(o, k, n);
    if (v) return v;
    if (eq(k, n, "items")) return fnv(r, M_ITEMS, o);
    if (eq(k, n, "keys")) return fnv(r, M_KEYS, o);
    if (eq(k, n, "values")) return fnv(r, M_VALUES, o);
    if (eq(k, n, "get")) return fnv(r, M_GET, o);
    return &jv_undef;
  }
  if (o->t == V_NS) {
    jv *v = jv_dict_get(o, k, n);
    return v ? v : &jv_undef;
  }
  if (o->t == V_STR) {
    static const struct {
      const char *n;
      int id;
    } m[] = {{"strip", M_STRIP},     {"lstrip", M_LSTRIP},         {"rstrip", M_RSTRIP},
             {"split", M_SPLIT},     {"startswith", M_STARTSWITH}, {"endswith", M_ENDSWITH},
             {"replace", M_REPLACE}, {"upper", M_UPPER},           {"lower", M_LOWER},
             {"title", M_TITLE},     {"capitalize", M_CAPITALIZE}, {"count", M_COUNT},
             {"find", M_FIND}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
      if (eq(k, n, m[i].n)) return fnv(r, m[i].id, o);
    return &jv_undef;
  }
  if (o->t == V_LOOP) {
    jloop *l = o->loop;
    if (eq(k, n, "index")) return jv_int(r, (long long)l->i + 1);
    if (eq(k, n, "index0")) return jv_int(r, (long long)l->i);
    if (eq(k, n, "revindex")) return jv_int(r, (long long)(l->n - l->i));
    if (eq(k, n, "revindex0")) return jv_int(r, (long long)(l->n - l->i - 1));
    if (eq(k, n, "first")) return l->i == 0 ? &jv_true : &jv_false;
    if (eq(k, n, "last")) return l->i + 1 == l->n ? &jv_true : &jv_false;
    if (eq(k, n, "length")) return jv_int(r, (long long)l->n);
    if (eq(k, n, "previtem")) return l->i ? l->items[l->i - 1] : &jv_undef;
    if (eq(k, n, "nextitem")) return l->i + 1 < l->n ? l->items[l->i + 1] : &jv_undef;
    if (eq(k, n, "cycle")) return fnv(r, M_LOOP_CYCLE, o);
    return &jv_undef;
  }
  return &jv_undef;
}

static jv *kwarg(jstr *kwn, jv **kwv, size_t nk, const char *name) {
  for (size_t i = 0; i < nk; i++)
    if (eq(kwn[i].s, kwn[i].n, name)) return kwv[i];
  return NULL;
}
/* positional i, else keyword name, else NULL */
static jv *arg(jv **a, size_t na, size_t i, jstr *kwn, jv **kwv, size_t nk, const char *name) {
  if (i < na) return a[i];
  return name ? kwarg(kwn, kwv, nk, name) : NULL;
}

jv *jb_call(jrender *r, const jnode *at, jv *fn, jv **a, size_t na, jstr *kwn, jv **kwv,
            size_t nk) {
  jv *self = fn->fn.self, *x, *y;
  switch (fn->fn.id) {
  case F_RANGE: {
    long long v[3] = {0, 0, 1};
    if (na < 1 || na > 3) return jfail(r, at, "range() takes 1 to 3 integers");
    for (size_t i = 0; i < na; i++) {
      if (a[i]->t != V_INT)
        return jfail(r, at, "range() takes integers, got %s", jv_type_name(a[i]));
    }
    if (na == 1)
      v[1] = a[0]->i;
    else {
      v[0] = a[0]->i;
      v[1] = a[1]->i;
      if (na == 3) v[2] = a[2]->i;
    }
    if (!v[2]) return jfail(r, at, "range() step cannot be zero");
    double cnt = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                          : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
    if (cnt < 0) cnt = 0;
    if (cnt > (double)r->lim->max_iters)
      return jfail(r, at, "loop limit: range() of over %llu items",
                   (unsigned long long)r->lim->max_iters);
    jv *l = jv_list(r, (size_t)cnt);
    if (!l) return NULL;
    for (size_t i = 0; i < l->l.n; i++)
      if (!(l->l.a[i] = jv_int(r, v[0] + (long long)i * v[2]))) return NULL;
    return l;
  }
  case F_NAMESPACE:
  case F_DICT: {
    jv *d = jv_dict(r);
    if (!d) return NULL;
    d->t = fn->fn.id == F_NAMESPACE ? V_NS : V_DICT;
    for (size_t i = 0; i < na; i++) {
      if (a[i]->t != V_DICT)
        return jfail(r, at, "%s() takes keyword arguments or a dict",
                     fn->fn.id == F_NAMESPACE ? "namespace" : "dict");
      for (size_t j = 0; j < a[i]->d.n; j++)
        if (jv_dict_set(r, d, a[i]->d.k[j].s, a[i]->d.k[j].n, a[i]->d.v[j])) return NULL;
    }
    for (size_t i = 0; i < nk; i++)
      if (jv_dict_set(r, d, kwn[i].s, kwn[i].n, kwv[i])) return NULL;
    return d;
  }
  case F_RAISE: {
    jbuf b = {.max = 400};
    if (na) jv_to_text(r, a[0], &b);
    jfail(r, at, "%s", b.p ? b.p : "raise_exception()");
    r->raised = 1;
    free(b.p);
    return NULL;
  }
  case F_STRFTIME: {
    if (na != 1 || a[0]->t != V_STR) return jfail(r, at, "strftime_now() takes one format string");
    time_t t = (time_t)r->now;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) return jfail(r, at, "strftime_now(): bad clock");
    char fmt[256], out[512];
    snprintf(fmt, sizeof fmt, "%.*s", (int)(a[0]->s.n > 255 ? 255 : a[0]->s.n), a[0]->s.s);
    size_t k = strftime(out, sizeof out, fmt, &tm);
    return jv_str(r, out, k);
  }
  case M_STRIP:
  case M_LSTRIP:
  case M_RSTRIP: {
    x = arg(a, na, 0, kwn, kwv, nk, "chars");
    if (x && x->t != V_STR && x->t != V_NONE) return jfail(r, at, "strip() takes a string");
    const jstr *chars = x && x->t == V_STR ? &x->s : NULL;
    return strip(r, self, fn->fn.id != M_RSTRIP, fn->fn.id != M_LSTRIP, chars);
  }
  case M_SPLIT: {
    x = arg(a, na, 0, kwn, kwv, nk, "sep");
    y = arg(a, na, 1, kwn, kwv, nk, "maxsplit");
    if (y && y->t != V_INT) return jfail(r, at, "split() maxsplit must be an integer");
    return split(r, self, x, y ? y->i : -1);
  }
  case M_STARTSWITH:
  case M_ENDSWITH: {
    x = arg(a, na, 0, kwn, kwv, nk, NULL);
    if (!x) return jfail(r, at, "startswith()/endswith() need an argument");
    int end = fn->fn.id == M_ENDSWITH;
    if (x->t == V_STR) return starts(self, x, end) ? &jv_true : &jv_false;
    if (x->t == V_LIST) {
      for (size_t i = 0; i < x->l.n; i++) {
        if (x->l.a[i]->t != V_STR) return jfail(r, at, "startswith()/endswith() take strings");
        if (starts(self, x->l.a[i], end)) return &jv_true;
      }
      return &jv_false;
    }
    return jfail(r, at, "startswith()/endswith() take a string or a tuple of strings");
  }
  case M_REPLACE: {
    x = arg(a, na, 0, kwn, kwv, nk, NULL);
    y = arg(a, na, 1, kwn, kwv, nk, NULL);
    jv *c = arg(a, na, 2, kwn, kwv, nk, "count");
    if (!x || !y || x->t != V_STR || y->t != V_STR || (c && c->t != V_INT && c->t != V_NONE))
      return jfail(r, at, "replace() takes two strings and an optional count");
    return replace(r, at, self, x, y, c && c->t == V_INT ? c->i : -1);
  }
  case M_UPPER: return casemap(r, self, 0);
  case M_LOWER: return casemap(r, self, 1);
  case M_TITLE: return casemap(r, self, 2);
  case M_CAPITALIZE: return casemap(r, self, 3);
  case M_COUNT:
  case M_FIND: {
    x = arg(a, na, 0, kwn, kwv, nk, NULL);
    if (!x || x->t != V_STR) return jfail(r, at, "count()/find() take a string");
    long long cnt = 0;
    for (size_t i = 0; i + x->s.n <= self->s.n;) {
      if (!memcmp(self->s.s + i, x->s.s, x->s.n)) {
        if (fn->fn.id == M_FIND) return jv_int(r, (long long)i);
        cnt++;
        i += x->s.n ? x->s.n : 1;
      } else
        i++;
    }
    return jv_int(r, fn->fn.id == M_FIND ? -1 : cnt);
  }
  case M_ITEMS: return items_of(r, self);
  case M_KEYS:
  case M_VALUES: {
    jv *l = jv_list(r, self->d.n);
    if (!l) return NULL;
    for (size_t i = 0; i < self->d.n; i++)
      if (!(l->l.a[i] =
                fn->fn.id == M_VALUES ? self->d.v[i] : jv_str(r, self->d.k[i].s, self->d.k[i].n)))
        return NULL;
    return l;
  }
  case M_GET: {
    x = arg(a, na, 0, kwn, kwv, nk, NULL);
    if (!x) return jfail(r, at, "get() needs a key");
    jv *v = x->t == V_STR ? jv_dict_get(self, x->s.s, x->s.n) : NULL;
    if (v) return v;
    y = arg(a, na, 1, kwn, kwv, nk, "default");
    return y ? y : &jv_none;
  }
  case M_LOOP_CYCLE:
    if (!na) return jfail(r, at, "loop.cycle() needs arguments");
    return a[self->loop->i % na];
  }
  return jfail(r, at, "unknown function");
}

/* ---- tests ---- */
static int test_named(jrender *r, const jnode *at, const char *name, size_t nn, jv *x, jv **a,
                      size_t na, int *out) {
  jv *y = na ? a[0] : NULL;
#define T(w) eq(name, nn, w)
  if (T("defined"))
    *out = x->t != V_UNDEF;
  else if (T("undefined"))
    *out = x->t == V_UNDEF;
  else if (T("none"))
    *out = x->t == V_NONE;
  else if (T("string"))
    *out = x->t == V_STR;
  else if (T("mapping"))
    *out = x->t == V_DICT;
  else if (T("iterable") || T("sequence"))
    *out = x->t == V_LIST || x->t == V_DICT || x->t == V_STR;
  else if (T("number"))
    *out = x->t == V_INT || x->t == V_FLOAT;
  else if (T("integer"))
    *out = x->t == V_INT;
  else if (T("float"))
    *out = x->t == V_FLOAT;
  else if (T("boolean"))
    *out = x->t == V_BOOL;
  else if (T("true"))
    *out = x->t == V_BOOL && x->b;
  else if (T("false"))
    *out = x->t == V_BOOL && !x->b;
  else if (T("callable"))
    *out = x->t == V_FUNC || x->t == V_MACRO;
  else if (T("lower") || T("upper")) {
    if (x->t != V_STR) {
      *out = 0;
      return 0;
    }
    int up = T("upper"), ok = 1;
    for (size_t i = 0; i < x->s.n; i++)
      if (up ? islower((unsigned char)x->s.s[i]) : isupper((unsigned char)x->s.s[i])) ok = 0;
    *out = ok;
  } else if (T("odd") || T("even") || T("divisibleby")) {
    long long d = 2;
    if (T("divisibleby")) {
      if (!y || y->t != V_INT || !y->i) {
        jfail(r, at, "divisibleby needs a non-zero integer");
        return -1;
      }
      d = y->i;
    }
    if (x->t != V_INT) {
      jfail(r, at, "test '%.*s' needs an integer, got %s", (int)nn, name, jv_type_name(x));
      return -1;
    }
    long long m = d == -1 ? 0 : x->i % d;
    *out = T("odd") ? m != 0 : m == 0;
  } else if (T("equalto") || T("eq") || T("==") || T("sameas")) {
    if (!y) {
      jfail(r, at, "test '%.*s' needs an argument", (int)nn, name);
      return -1;
    }
    *out = jv_equal(x, y);
  } else if (T("ne") || T("!=")) {
    if (!y) {
      jfail(r, at, "test '%.*s' needs an argument", (int)nn, name);
      return -1;
    }
    *out = !jv_equal(x, y);
  } else if (T("in")) {
    if (!y) {
      jfail(r, at, "test 'in' needs an argument");
      return -1;
    }
    if (y->t == V_LIST) {
      *out = 0;
      for (size_t i = 0; i < y->l.n; i++)
        if (jv_equal(x, y->l.a[i])) *out = 1;
    } else if (y->t == V_STR && x->t == V_STR) {
      *out = x->s.n == 0;
      for (size_t i = 0; i + x->s.n <= y->s.n && !*out; i++)
        if (!memcmp(y->s.s + i, x->s.s, x->s.n)) *out = 1;
    } else if (y->t == V_DICT && x->t == V_STR)
      *out = jv_dict_get(y, x->s.s, x->s.n) != NULL;
    else
      *out = 0;
  } else if (T("lt") || T("<") || T("le") || T("<=") || T("gt") || T(">") || T("ge") || T(">=")) {
    double p, q;
    if (!y || (x->t != V_INT && x->t != V_FLOAT) || (y->t != V_INT && y->t != V_FLOAT)) {
      jfail(r, at, "comparison tests need numbers");
      return -1;
    }
    p = x->t == V_INT ? (double)x->i : x->f;
    q = y->t == V_INT ? (double)y->i : y->f;
    *out = (T("lt") || T("<"))    ? p < q
           : (T("le") || T("<=")) ? p <= q
           : (T("gt") || T(">"))  ? p > q
                                  : p >= q;
  } else {
    jfail(r, at, "unknown test '%.*s'", (int)(nn > 40 ? 40 : nn), name);
    return -1;
  }
#undef T
  return 0;
}

jv *jb_test(jrender *r, jframe *f, const jnode *n, jv *x) {
  jv **a, **kwv;
  jstr *kwn;
  size_t na, nk;
  if (jeval_args(r, f, &n->args, &a, &na, &kwn, &kwv, &nk)) return NULL;
  int out = 0;
  if (test_named(r, n, n->s.s, n->s.n, x, a, na, &out)) return NULL;
  return out ? &jv_true : &jv_false;
}

/* ---- filters ---- */
static jv *attr_path(jrender *r, jv *item, jv *path) {
  const char *p = path->s.s, *e = p + path->s.n;
  jv *v = item;
  while (p <= e) {
    const char *d = memchr(p, '.', (size_t)(e - p));
    if (!d) d = e;
    if (v->t == V_DICT || v->t == V_NS) {
      jv *x = jv_dict_get(v, p, (size_t)(d - p));
      v = x ? x : &jv_undef;
    } else if (v->t == V_LIST) {
      char num[24];
      size_t k = (size_t)(d - p) < sizeof num - 1 ? (size_t)(d - p) : sizeof num - 1;
      memcpy(num, p, k);
      num[k] = 0;
      char *end;
      long long i = strtoll(num, &end, 10);
      v = (*end || !k || i < 0 || (size_t)i >= v->l.n) ? &jv_undef : v->l.a[i];
    } else
      return &jv_undef;
    (void)r;
    p = d + 1;
  }
  return v;
}

static jv *need_list(jrender *r, const jnode *n, jv *x) {
  int other = 0;
  jv *l = jlist_of(r, x, 0, &other); /* a dict gives its keys */
  return other ? jfail(r, n, "filter '%.*s' needs a list, got %s", (int)n->s.n, n->s.s, jv_type_name(x)) : l;
}

static jv *to_string(jrender *r, const jnode *n, jv *x) {
  if (x->t == V_STR) return x;
  if (x->t == V_NONE) return jv_strc(r, "None");
  if (x->t == V_BOOL) return jv_strc(r, x->b ? "True" : "False");
  jbuf b = {.max = r->lim->max_output};
  return jbuf_str(r, n, &b, jv_to_text(r, x, &b));
}

/* A filter call's arguments: positional a[na], keywords kwn[i]=kwv[i]. */
typedef struct fargs {
  jv **a;
  size_t na;
  jstr *kwn;
  jv **kwv;
  size_t nk;
} fargs;

/* argument i, else the keyword `name` */
static jv *farg(const fargs *fa, size_t i, const char *name) {
  return arg(fa->a, fa->na, i, fa->kwn, fa->kwv, fa->nk, name);
}
static jv *fkw(const fargs *fa, const char *name) { return kwarg(fa->kwn, fa->kwv, fa->nk, name); }

/* the text accumulated in b as a string (b freed); its output limit failed */
static jv *buf_string(jrender *r, const jnode *n, jbuf *b) {
  if (b->over) {
    free(b->p);
    return jfail(r, n, "output limit: a string over %zu bytes", r->lim->max_output);
  }
  jv *s = jv_str(r, b->p ? b->p : "", b->n);
  free(b->p);
  return s;
}

static jv *f_tojson(jrender *r, const jnode *n, jv *x, const fargs *fa) {
  jv *ind = farg(fa, 0, "indent");
  jv *ea = fkw(fa, "ensure_ascii");
  jv *sk = fkw(fa, "sort_keys");
  if (ind && ind->t != V_INT && ind->t != V_NONE)
    return jfail(r, n, "tojson: indent must be an integer");
  if (ind && ind->t == V_INT && (ind->i < 0 || ind->i > 64))
    return jfail(r, n, "tojson: indent must be 0..64");
  for (size_t i = 0; i < fa->nk; i++)
    if (!eq(fa->kwn[i].s, fa->kwn[i].n, "indent") && !eq(fa->kwn[i].s, fa->kwn[i].n, "ensure_ascii") &&
        !eq(fa->kwn[i].s, fa->kwn[i].n, "sort_keys"))
      return jfail(r, n, "tojson: unsupported argument '%.*s'", (int)fa->kwn[i].n, fa->kwn[i].s);
  jbuf b = {.max = r->lim->max_output};
  int rc = jv_to_json(r, x, &b, ind && ind->t == V_INT ? (int)ind->i : -1, ea && jv_truthy(ea),
                      sk && jv_truthy(sk), 0);
  return jbuf_str(r, n, &b, rc);
}

static jv *f_length(jrender *r, const jnode *n, jv *x) {
  if (x->t == V_STR) {
    long long k = 0;
    for (size_t i = 0; i < x->s.n; i++)
      if (((unsigned char)x->s.s[i] & 0xC0) != 0x80) k++;
    return jv_int(r, k);
  }
  if (x->t == V_LIST) return jv_int(r, (long long)x->l.n);
  if (x->t == V_DICT || x->t == V_NS) return jv_int(r, (long long)x->d.n);
  return jfail(r, n, "filter 'length' needs a string, list or dict, got %s", jv_type_name(x));
}

static jv *f_reverse(jrender *r, const jnode *n, jv *x) {
  if (x->t == V_STR) {
    jv *l = need_list(r, n, x), *o = l ? jnew_bytes(r, n, x->s.n) : NULL;
    if (!o) return NULL;
    size_t off = 0;
    for (size_t i = l->l.n; i-- > 0;) {
      memcpy((char *)o->s.s + off, l->l.a[i]->s.s, l->l.a[i]->s.n);
      off += l->l.a[i]->s.n;
    }
    return o;
  }
  jv *l = need_list(r, n, x), *o = l ? jv_list(r, l->l.n) : NULL;
  if (!o) return NULL;
  for (size_t i = 0; i < l->l.n; i++)
    o->l.a[i] = l->l.a[l->l.n - 1 - i];
  return o;
}

static jv *f_join(jrender *r, const jnode *n, jv *x, const fargs *fa) {
  jv *sep = farg(fa, 0, "d");
  jv *at = farg(fa, 1, "attribute");
  jv *l = need_list(r, n, x);
  if (!l) return NULL;
  jbuf b = {.max = r->lim->max_output};
  for (size_t i = 0; i < l->l.n; i++) {
    if (i && sep && sep->t == V_STR) jb_put(&b, sep->s.s, sep->s.n);
    jv *it = at && at->t == V_STR ? attr_path(r, l->l.a[i], at) : l->l.a[i];
    if (jv_to_text(r, it, &b)) {
      free(b.p);
      return NULL;
    }
  }
  return buf_string(r, n, &b);
}

/* A string's number as int and float read it (Python: surrounding blanks
 * allowed); 1 with *d, else 0. */
static int str_number(const jv *x, double *d) {
  char buf[64];
  size_t k = x->s.n < 63 ? x->s.n : 63;
  memcpy(buf, x->s.s, k);
  buf[k] = 0;
  char *end;
  *d = strtod(buf, &end);
  while (*end && is_space((unsigned char)*end))
    end++;
  return end != buf && !*end;
}

static jv *f_int(jrender *r, jv *x, const fargs *fa) {
  jv *dv = farg(fa, 0, "default");
  double d;
  if (x->t == V_INT) return x;
  if (x->t == V_BOOL) return jv_int(r, x->b);
  if (x->t == V_FLOAT && isfinite(x->f) && fabs(x->f) < 9.2e18) return jv_int(r, (long long)x->f);
  if (x->t == V_STR && str_number(x, &d) && isfinite(d) && fabs(d) < 9.2e18) return jv_int(r, (long long)d);
  return dv ? dv : jv_int(r, 0);
}

static jv *f_float(jrender *r, jv *x, const fargs *fa) {
  jv *dv = farg(fa, 0, "default");
  double d;
  if (x->t == V_FLOAT) return x;
  if (x->t == V_INT) return jv_float(r, (double)x->i);
  if (x->t == V_BOOL) return jv_float(r, x->b);
  if (x->t == V_STR && str_number(x, &d)) return jv_float(r, d);
  return dv ? dv : jv_float(r, 0);
}

static jv *f_round(jrender *r, const jnode *n, jv *x, const fargs *fa) {
  jv *pr = farg(fa, 0, "precision"), *me = farg(fa, 1, "method");
  double v = x->t == V_INT ? (double)x->i : x->t == V_FLOAT ? x->f : NAN;
  if (isnan(v) && x->t != V_FLOAT) return jfail(r, n, "filter 'round' needs a number");
  long long p = pr && pr->t == V_INT ? pr->i : 0;
  if (p < 0 || p > 15) return jfail(r, n, "round: precision must be 0..15");
  double m = pow(10, (double)p), s = v * m;
  if (me && me->t == V_STR && eq(me->s.s, me->s.n, "floor"))
    s = floor(s);
  else if (me && me->t == V_STR && eq(me->s.s, me->s.n, "ceil"))
    s = ceil(s);
  else
    s = nearbyint(s); /* Python round: half to even */
  return jv_float(r, s / m);
}

static jv *f_indent(jrender *r, const jnode *n, jv *x, const fargs *fa) {
  jv *w = farg(fa, 0, "width"), *fi = farg(fa, 1, "first"), *bl = farg(fa, 2, "blank");
  jv *s = to_string(r, n, x);
  if (!s) return NULL;
  jbuf ib = {0};
  if (w && w->t == V_STR)
    jb_put(&ib, w->s.s, w->s.n);
  else {
    long long k = w && w->t == V_INT ? w->i : 4;
    if (k < 0 || k > 256) k = 0;
    for (long long i = 0; i < k; i++)
      jb_put(&ib, " ", 1);
  }
  jbuf b = {.max = r->lim->max_output};
  size_t i = 0, line = 0;
  while (i <= s->s.n) {
    const char *nl = memchr(s->s.s + i, '\n', s->s.n - i);
    size_t e = nl ? (size_t)(nl - s->s.s) : s->s.n;
    int blank = e == i;
    if ((line > 0 || (fi && jv_truthy(fi))) && (!blank || (bl && jv_truthy(bl))))
      jb_put(&b, ib.p ? ib.p : "", ib.n);
    jb_put(&b, s->s.s + i, e - i);
    if (!nl) break;
    jb_put(&b, "\n", 1);
    i = e + 1;
    line++;
  }
  free(ib.p);
  return buf_string(r, n, &b);
}

/* map(attribute=, default=) or map('filter') over list l into o; o's length */
static int f_map(jrender *r, jframe *f, const jnode *n, jv *l, jv *o, const fargs *fa, size_t *k) {
  jv *at = fkw(fa, "attribute"), *dv = fkw(fa, "default");
  for (size_t i = 0; i < l->l.n; i++) {
    jv *it = l->l.a[i];
    if (at) {
      if (at->t != V_STR) return jfail(r, n, "map: attribute must be a string"), -1;
      jv *v = attr_path(r, it, at);
      o->l.a[(*k)++] = v->t == V_UNDEF && dv ? dv : v;
    } else if (fa->na && fa->a[0]->t == V_STR) {
      /* map('filter') with the simple one-argument filters */
      jnode fake = *n;
      fake.s = fa->a[0]->s;
      fake.args.n = 0;
      jv *v = jb_filter(r, f, &fake, it);
      if (!v) return -1;
      o->l.a[(*k)++] = v;
    } else
      return jfail(r, n, "map needs attribute= or a filter name"), -1;
  }
  return 0;
}

/* select / reject (by a test, else truthiness), selectattr / rejectattr (of
 * an attribute), map */
static jv *f_select(jrender *r, jframe *f, const jnode *n, jv *x, const fargs *fa) {
  const char *nm = n->s.s;
  size_t nn = n->s.n;
  jv *l = need_list(r, n, x);
  if (!l) return NULL;
  jv *o = jv_list(r, l->l.n);
  if (!o) return NULL;
  size_t k = 0;
  if (eq(nm, nn, "map")) {
    if (f_map(r, f, n, l, o, fa, &k)) return NULL;
  } else {
    int attr = eq(nm, nn, "selectattr") || eq(nm, nn, "rejectattr");
    int keep_true = eq(nm, nn, "selectattr") || eq(nm, nn, "select");
    size_t t0 = attr ? 1 : 0, na = fa->na;
    jv **a = fa->a;
    if (attr && (!na || a[0]->t != V_STR))
      return jfail(r, n, "filter '%.*s' needs an attribute name", (int)nn, nm);
    for (size_t i = 0; i < l->l.n; i++) {
      jv *it = attr ? attr_path(r, l->l.a[i], a[0]) : l->l.a[i];
      int t;
      if (na > t0) {
        if (a[t0]->t != V_STR) return jfail(r, n, "filter '%.*s' needs a test name", (int)nn, nm);
        if (test_named(r, n, a[t0]->s.s, a[t0]->s.n, it, a + t0 + 1, na - t0 - 1, &t))
          return NULL;
      } else
        t = jv_truthy(it);
      if (t == keep_true) o->l.a[k++] = l->l.a[i];
    }
  }
  o->l.n = k;
  return o;
}

static jv *f_unique(jrender *r, const jnode *n, jv *x) {
  jv *l = need_list(r, n, x), *o = l ? jv_list(r, l->l.n) : NULL;
  if (!o) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < l->l.n; i++) {
    int dup = 0;
    for (size_t j = 0; j < k && !dup; j++)
      dup = jv_equal(o->l.a[j], l->l.a[i]);
    if (!dup) o->l.a[k++] = l->l.a[i];
  }
  o->l.n = k;
  return o;
}

static jv *f_dictsort(jrender *r, const jnode *n, jv *x) {
  if (x->t != V_DICT) return jfail(r, n, "filter 'dictsort' needs a dict");
  jv *it = items_of(r, x);
  if (!it) return NULL;
  for (size_t i = 1; i < it->l.n; i++) /* insertion sort by key (bounded by the dict size) */
    for (size_t j = i; j > 0; j--) {
      jv *p = it->l.a[j - 1]->l.a[0], *q = it->l.a[j]->l.a[0];
      size_t m = p->s.n < q->s.n ? p->s.n : q->s.n;
      int c = strncasecmp(p->s.s, q->s.s, m);
      if (c < 0 || (c == 0 && p->s.n <= q->s.n)) break;
      jv *t = it->l.a[j - 1];
      it->l.a[j - 1] = it->l.a[j];
      it->l.a[j] = t;
    }
  return it;
}

/* The filters that take a string, a list or a number as it is; NULL with
 * *done 0 when f is none of them. */
static jv *simple_filter(jrender *r, const jnode *n, jv *x, const fargs *fa, int *done) {
  const char *nm = n->s.s;
  size_t nn = n->s.n;
#define F(w) eq(nm, nn, w)
  *done = 1;
  if (F("string")) return x->t == V_UNDEF ? jv_strc(r, "") : to_string(r, n, x);
  if (F("list")) {
    if (x->t == V_UNDEF) return jv_list(r, 0);
    jv *l = need_list(r, n, x);
    if (!l || l != x) return l;
    jv *c = jv_list(r, x->l.n);
    if (c && x->l.n) memcpy(c->l.a, x->l.a, x->l.n * sizeof *c->l.a);
    return c;
  }
  if (F("trim")) {
    if (x->t != V_STR) return jfail(r, n, "filter 'trim' needs a string, got %s", jv_type_name(x));
    jv *c = farg(fa, 0, "chars");
    return strip(r, x, 1, 1, c && c->t == V_STR ? &c->s : NULL);
  }
  if (F("upper") || F("lower") || F("title") || F("capitalize")) {
    if (x->t != V_STR)
      return jfail(r, n, "filter '%.*s' needs a string, got %s", (int)nn, nm, jv_type_name(x));
    return casemap(r, x, F("upper") ? 0 : F("lower") ? 1 : F("title") ? 2 : 3);
  }
  if (F("first") || F("last")) {
    jv *l = need_list(r, n, x);
    if (!l) return NULL;
    if (!l->l.n) return &jv_undef;
    return F("first") ? l->l.a[0] : l->l.a[l->l.n - 1];
  }
  if (F("items")) {
    if (x->t != V_DICT && x->t != V_NS)
      return jfail(r, n, "filter 'items' needs a dict, got %s", jv_type_name(x));
    return items_of(r, x);
  }
  if (F("abs")) {
    if (x->t == V_INT)
      return x->i == (long long)(-9223372036854775807LL - 1) ? jfail(r, n, "integer overflow")
                                                             : jv_int(r, x->i < 0 ? -x->i : x->i);
    if (x->t == V_FLOAT) return jv_float(r, fabs(x->f));
    return jfail(r, n, "filter 'abs' needs a number");
  }
  if (F("replace")) {
    jv *o = farg(fa, 0, "old"), *nw = farg(fa, 1, "new"), *c = farg(fa, 2, "count");
    jv *s = to_string(r, n, x);
    if (!s) return NULL;
    if (!o || !nw || o->t != V_STR || nw->t != V_STR)
      return jfail(r, n, "filter 'replace' takes two strings");
    return replace(r, n, s, o, nw, c && c->t == V_INT ? c->i : -1);
  }
#undef F
  *done = 0;
  return NULL;
}

jv *jb_filter(jrender *r, jframe *f, const jnode *n, jv *x) {
  fargs fa;
  if (jeval_args(r, f, &n->args, &fa.a, &fa.na, &fa.kwn, &fa.kwv, &fa.nk)) return NULL;
  const char *nm = n->s.s;
  size_t nn = n->s.n;
#define F(w) eq(nm, nn, w)
  static const char *const known[] = {
      "safe",       "default",    "d",          "tojson", "string", "list",   "trim",     "upper",
      "lower",      "title",      "capitalize", "length", "count",  "first",  "last",     "reverse",
      "join",       "items",      "int",        "float",  "abs",    "round",  "replace",  "indent",
      "selectattr", "rejectattr", "select",     "reject", "map",    "unique", "dictsort", NULL};
  int found = 0;
  for (const char *const *k = known; *k && !found; k++)
    found = F(*k);
  if (!found) return jfail(r, n, "unknown filter '%.*s'", (int)(nn > 40 ? 40 : nn), nm);
  if (F("safe")) return x;
  if (F("default") || F("d")) {
    jv *dv = farg(&fa, 0, "default_value");
    jv *bo = farg(&fa, 1, "boolean");
    int use = x->t == V_UNDEF || (bo && jv_truthy(bo) && !jv_truthy(x));
    return use ? (dv ? dv : jv_strc(r, "")) : x;
  }
  if (x->t == V_UNDEF && !F("list") && !F("string") && !F("tojson"))
    return jfail(r, n, "filter '%.*s' applied to an undefined value", (int)(nn > 40 ? 40 : nn), nm);
  if (F("tojson")) return f_tojson(r, n, x, &fa);
  int done;
  jv *v = simple_filter(r, n, x, &fa, &done);
  if (done) return v;
  if (F("length") || F("count")) return f_length(r, n, x);
  if (F("reverse")) return f_reverse(r, n, x);
  if (F("join")) return f_join(r, n, x, &fa);
  if (F("int")) return f_int(r, x, &fa);
  if (F("float")) return f_float(r, x, &fa);
  if (F("round")) return f_round(r, n, x, &fa);
  if (F("indent")) return f_indent(r, n, x, &fa);
  if (F("selectattr") || F("rejectattr") || F("select") || F("reject") || F("map")) return f_select(r, f, n, x, &fa);
  if (F("unique")) return f_unique(r, n, x);
  if (F("dictsort")) return f_dictsort(r, n, x);
#undef F
  return jfail(r, n, "unknown filter '%.*s'", (int)(nn > 40 ? 40 : nn), nm);
}
