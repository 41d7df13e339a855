/* Kernel expressions: what a "map" operator computes per element
 * (core/ckb/map_form.h). Parsed once into a flat node array, then
 * evaluated in float64 (the verifier's reference) or written as float C (the
 * kernel-pack generator). The grammar is small on purpose: everything an
 * elementwise activation, gate or cap needs, nothing that loops.
 *
 *   expr    := term (('+' | '-') term)*
 *   term    := unary (('*' | '/') unary)*
 *   unary   := '-' unary | primary
 *   primary := number | name | func '(' expr [',' expr] ')' | '(' expr ')'
 *   number  := digits ['.' digits] [('e'|'E') ['+'|'-'] digits]  (or '.' digits ...)
 *
 * CKB files are inputs: a hostile expression gets a one-line error (its
 * text shown cut and without control characters), never unbounded
 * recursion or memory. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/kexpr.h"

#define KX_MAX_NODES 1024
#define KX_MAX_DEPTH 64
#define KX_MAX_NAMES 16
#define KX_SHOW 80

typedef enum kx_op { KX_NUM, KX_NAME, KX_NEG, KX_ADD, KX_SUB, KX_MUL, KX_DIV, KX_FN } kx_op;

typedef enum kx_fn {
  F_EXP, F_LOG, F_TANH, F_SQRT, F_ABS, F_ERF, F_ERFC, F_SIGMOID, F_SOFTPLUS, F_MIN, F_MAX, F_POW, F_FLOOR, F_CEIL,
} kx_fn;

static const struct {
  const char *name;
  int arity;
} k_fns[] = {
    [F_EXP] = {"exp", 1},         [F_LOG] = {"log", 1},   [F_TANH] = {"tanh", 1},
    [F_SQRT] = {"sqrt", 1},       [F_ABS] = {"abs", 1},   [F_ERF] = {"erf", 1},
    [F_ERFC] = {"erfc", 1},
    [F_SIGMOID] = {"sigmoid", 1}, [F_SOFTPLUS] = {"softplus", 1},
    [F_MIN] = {"min", 2},         [F_MAX] = {"max", 2},   [F_POW] = {"pow", 2},
    [F_FLOOR] = {"floor", 1},     [F_CEIL] = {"ceil", 1},
};
#define KX_NFN ((int)(sizeof k_fns / sizeof *k_fns))

typedef struct kx_node {
  kx_op op;
  int fn;        /* KX_FN: kx_fn */
  int a, b;      /* children (node indices), -1 when absent */
  int name;      /* KX_NAME: index into names */
  double value;  /* KX_NUM */
  int lit, lit_len; /* KX_NUM: the literal as written (offset into src) */
} kx_node;

struct mi_kexpr {
  char *src;
  kx_node *nodes;
  int n_nodes, root;
  char *names[KX_MAX_NAMES];
  int n_names;
};

typedef struct kx_parser {
  mi_kexpr *e;
  const char *p;
  int depth, failed;
  char *err;
  size_t err_len;
} kx_parser;

static void kx_fail(kx_parser *ps, const char *what) {
  if (ps->failed) return;
  ps->failed = 1;
  if (!ps->err || !ps->err_len) return;
  char shown[KX_SHOW + 4];
  size_t k = 0;
  for (const char *q = ps->e->src; *q && k < KX_SHOW; q++)
    shown[k++] = (unsigned char)*q < 0x20 || *q == 0x7f ? ' ' : *q;
  if (strlen(ps->e->src) > KX_SHOW) memcpy(shown + k, "...", 3), k += 3;
  shown[k] = 0;
  snprintf(ps->err, ps->err_len, "kernel expression '%s': %s at offset %d", shown, what,
           (int)(ps->p - ps->e->src));
}

static void skip_ws(kx_parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t') ps->p++;
}

static int new_node(kx_parser *ps, kx_op op, int a, int b) {
  if (ps->e->n_nodes >= KX_MAX_NODES) {
    kx_fail(ps, "more than 1024 nodes");
    return -1;
  }
  kx_node *n = &ps->e->nodes[ps->e->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op, n->a = a, n->b = b;
  return ps->e->n_nodes++;
}

static int parse_expr(kx_parser *ps);

static int parse_number(kx_parser *ps) {
  const char *s = ps->p, *q = s;
  while (isdigit((unsigned char)*q)) q++;
  if (*q == '.') {
    q++;
    while (isdigit((unsigned char)*q)) q++;
  }
  if (*q == 'e' || *q == 'E') {
    const char *x = q + 1;
    if (*x == '+' || *x == '-') x++;
    if (!isdigit((unsigned char)*x)) {
      ps->p = q;
      kx_fail(ps, "an exponent without digits");
      return -1;
    }
    while (isdigit((unsigned char)*x)) x++;
    q = x;
  }
  char buf[64];
  if ((size_t)(q - s) >= sizeof buf) {
    kx_fail(ps, "a number longer than 63 characters");
    return -1;
  }
  memcpy(buf, s, (size_t)(q - s));
  buf[q - s] = 0;
  double v = strtod(buf, NULL);
  if (!isfinite(v)) {
    kx_fail(ps, "a number out of range");
    return -1;
  }
  int n = new_node(ps, KX_NUM, -1, -1);
  if (n < 0) return -1;
  ps->e->nodes[n].value = v;
  ps->e->nodes[n].lit = (int)(s - ps->e->src);
  ps->e->nodes[n].lit_len = (int)(q - s);
  ps->p = q;
  return n;
}

static int name_index(kx_parser *ps, const char *s, size_t len) {
  mi_kexpr *e = ps->e;
  for (int i = 0; i < e->n_names; i++)
    if (strlen(e->names[i]) == len && !memcmp(e->names[i], s, len)) return i;
  if (e->n_names >= KX_MAX_NAMES) {
    kx_fail(ps, "more than 16 distinct names");
    return -1;
  }
  if (!(e->names[e->n_names] = strndup(s, len))) {
    kx_fail(ps, "out of memory");
    return -1;
  }
  return e->n_names++;
}

static int parse_call(kx_parser *ps, int fn) {
  ps->p++; /* '(' */
  int a = parse_expr(ps), b = -1;
  if (a < 0) return -1;
  skip_ws(ps);
  if (k_fns[fn].arity == 2) {
    if (*ps->p != ',') {
      kx_fail(ps, "expected ',' (this function takes two arguments)");
      return -1;
    }
    ps->p++;
    if ((b = parse_expr(ps)) < 0) return -1;
    skip_ws(ps);
  }
  if (*ps->p != ')') {
    kx_fail(ps, k_fns[fn].arity == 1 && *ps->p == ',' ? "this function takes one argument" : "expected ')'");
    return -1;
  }
  ps->p++;
  int n = new_node(ps, KX_FN, a, b);
  if (n >= 0) ps->e->nodes[n].fn = fn;
  return n;
}

static int parse_name(kx_parser *ps) {
  const char *s = ps->p;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_') ps->p++;
  size_t len = (size_t)(ps->p - s);
  int fn = -1;
  for (int f = 0; f < KX_NFN; f++)
    if (strlen(k_fns[f].name) == len && !memcmp(k_fns[f].name, s, len)) fn = f;
  skip_ws(ps);
  if (*ps->p == '(') {
    if (fn < 0) {
      char msg[96];
      snprintf(msg, sizeof msg, "unknown function '%.*s'", (int)(len < 40 ? len : 40), s);
      kx_fail(ps, msg);
      return -1;
    }
    return parse_call(ps, fn);
  }
  if (fn >= 0) {
    kx_fail(ps, "a function name used without '('");
    return -1;
  }
  int idx = name_index(ps, s, len);
  if (idx < 0) return -1;
  int n = new_node(ps, KX_NAME, -1, -1);
  if (n >= 0) ps->e->nodes[n].name = idx;
  return n;
}

static int parse_unary(kx_parser *ps) {
  skip_ws(ps);
  if (ps->failed) return -1;
  if ((*ps->p == '-' || *ps->p == '(') && ps->depth >= KX_MAX_DEPTH) {
    kx_fail(ps, "nested deeper than 64");
    return -1;
  }
  if (*ps->p == '-') {
    ps->p++;
    ps->depth++;
    int a = parse_unary(ps);
    ps->depth--;
    return a < 0 ? -1 : new_node(ps, KX_NEG, a, -1);
  }
  if (*ps->p == '(') {
    ps->p++;
    ps->depth++;
    int a = parse_expr(ps);
    ps->depth--;
    skip_ws(ps);
    if (a < 0) return -1;
    if (*ps->p != ')') {
      kx_fail(ps, "expected ')'");
      return -1;
    }
    ps->p++;
    return a;
  }
  if (isdigit((unsigned char)*ps->p) || (*ps->p == '.' && isdigit((unsigned char)ps->p[1])))
    return parse_number(ps);
  if (isalpha((unsigned char)*ps->p) || *ps->p == '_') {
    if (ps->depth >= KX_MAX_DEPTH) {
      kx_fail(ps, "nested deeper than 64");
      return -1;
    }
    ps->depth++; /* a call's arguments nest too */
    int n = parse_name(ps);
    ps->depth--;
    return n;
  }
  kx_fail(ps, *ps->p ? "unexpected character" : "unexpected end");
  return -1;
}

static int parse_binary(kx_parser *ps, int level) {
  int a = level ? parse_unary(ps) : parse_binary(ps, 1);
  while (a >= 0) {
    skip_ws(ps);
    char c = *ps->p;
    kx_op op = level ? (c == '*' ? KX_MUL : c == '/' ? KX_DIV : KX_NUM)
                     : (c == '+' ? KX_ADD : c == '-' ? KX_SUB : KX_NUM);
    if (op == KX_NUM) break;
    ps->p++;
    int b = level ? parse_unary(ps) : parse_binary(ps, 1);
    if (b < 0) return -1;
    a = new_node(ps, op, a, b);
  }
  return a;
}

static int parse_expr(kx_parser *ps) { return parse_binary(ps, 0); }

mi_kexpr *mi_kexpr_parse(const char *src, char *err, size_t err_len) {
  if (err_len) err[0] = 0;
  if (!src) {
    snprintf(err, err_len, "kernel expression: none given");
    return NULL;
  }
  mi_kexpr *e = calloc(1, sizeof *e);
  if (!e || !(e->src = strdup(src)) || !(e->nodes = calloc(KX_MAX_NODES, sizeof *e->nodes))) {
    snprintf(err, err_len, "kernel expression: out of memory");
    mi_kexpr_free(e);
    return NULL;
  }
  kx_parser ps = {e, e->src, 0, 0, err, err_len};
  e->root = parse_expr(&ps);
  skip_ws(&ps);
  if (!ps.failed && *ps.p) kx_fail(&ps, "unexpected trailing text");
  if (ps.failed || e->root < 0) {
    if (!ps.failed) kx_fail(&ps, "no expression");
    mi_kexpr_free(e);
    return NULL;
  }
  return e;
}

void mi_kexpr_free(mi_kexpr *e) {
  if (!e) return;
  for (int i = 0; i < e->n_names; i++) free(e->names[i]);
  free(e->nodes);
  free(e->src);
  free(e);
}

int mi_kexpr_n_names(const mi_kexpr *e) { return e ? e->n_names : 0; }

const char *mi_kexpr_name(const mi_kexpr *e, int i) {
  return e && i >= 0 && i < e->n_names ? e->names[i] : NULL;
}

/* ---- float64 ---- */

static double eval_node(const mi_kexpr *e, int i, const double *v) {
  const kx_node *n = &e->nodes[i];
  switch (n->op) {
  case KX_NUM: return n->value;
  case KX_NAME: return v[n->name];
  case KX_NEG: return -eval_node(e, n->a, v);
  case KX_ADD: return eval_node(e, n->a, v) + eval_node(e, n->b, v);
  case KX_SUB: return eval_node(e, n->a, v) - eval_node(e, n->b, v);
  case KX_MUL: return eval_node(e, n->a, v) * eval_node(e, n->b, v);
  case KX_DIV: return eval_node(e, n->a, v) / eval_node(e, n->b, v);
  case KX_FN: break;
  }
  double x = eval_node(e, n->a, v), y = n->b >= 0 ? eval_node(e, n->b, v) : 0;
  switch ((kx_fn)n->fn) {
  case F_EXP: return exp(x);
  case F_LOG: return log(x);
  case F_TANH: return tanh(x);
  case F_SQRT: return sqrt(x);
  case F_ABS: return fabs(x);
  case F_ERF: return erf(x);
  case F_ERFC: return erfc(x);
  case F_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case F_SOFTPLUS: return fmax(x, 0.0) + log1p(exp(-fabs(x))); /* no overflow for large x */
  case F_MIN: return fmin(x, y);
  case F_MAX: return fmax(x, y);
  case F_POW: return pow(x, y);
  case F_FLOOR: return floor(x);
  case F_CEIL: return ceil(x);
  }
  return NAN;
}

double mi_kexpr_eval(const mi_kexpr *e, const double *values) {
  return e ? eval_node(e, e->root, values) : NAN;
}

/* ---- float C ---- */

typedef struct kx_out {
  char *s;
  size_t len, cap;
  int over;
  int dbl; /* double C (exp, pow, literals as written) instead of float C */
} kx_out;

static void put(kx_out *o, const char *t, size_t n) {
  if (o->over || o->len + n + 1 > o->cap) {
    o->over = 1;
    return;
  }
  memcpy(o->s + o->len, t, n);
  o->len += n;
  o->s[o->len] = 0;
}

static void puts_(kx_out *o, const char *t) { put(o, t, strlen(t)); }

static void c_node(const mi_kexpr *e, int i, const char *const *names, kx_out *o) {
  static const char *const binop[] = {[KX_ADD] = " + ", [KX_SUB] = " - ", [KX_MUL] = " * ",
                                      [KX_DIV] = " / "};
  static const char *const cfn[] = {[F_EXP] = "expf",  [F_LOG] = "logf", [F_TANH] = "tanhf",
                                    [F_SQRT] = "sqrtf", [F_ABS] = "fabsf", [F_ERF] = "erff", [F_ERFC] = "erfcf",
                                    [F_MIN] = "fminf", [F_MAX] = "fmaxf", [F_POW] = "powf",
                                    [F_FLOOR] = "floorf", [F_CEIL] = "ceilf"};
  static const char *const dfn[] = {[F_EXP] = "exp",  [F_LOG] = "log", [F_TANH] = "tanh",
                                    [F_SQRT] = "sqrt", [F_ABS] = "fabs", [F_ERF] = "erf", [F_ERFC] = "erfc",
                                    [F_MIN] = "fmin", [F_MAX] = "fmax", [F_POW] = "pow",
                                    [F_FLOOR] = "floor", [F_CEIL] = "ceil"};
  const int d = o->dbl;
  const kx_node *n = &e->nodes[i];
  switch (n->op) {
  case KX_NUM: {
    const char *lit = e->src + n->lit;
    put(o, lit, (size_t)n->lit_len);
    /* an integer literal needs a point to be a floating constant; float C suffixes f */
    const int real = memchr(lit, '.', (size_t)n->lit_len) || memchr(lit, 'e', (size_t)n->lit_len) ||
                     memchr(lit, 'E', (size_t)n->lit_len);
    puts_(o, real ? (d ? "" : "f") : (d ? ".0" : ".0f"));
    return;
  }
  case KX_NAME: puts_(o, names[n->name]); return;
  case KX_NEG:
    puts_(o, "(-");
    c_node(e, n->a, names, o);
    puts_(o, ")");
    return;
  case KX_ADD:
  case KX_SUB:
  case KX_MUL:
  case KX_DIV:
    puts_(o, "(");
    c_node(e, n->a, names, o);
    puts_(o, binop[n->op]);
    c_node(e, n->b, names, o);
    puts_(o, ")");
    return;
  case KX_FN: break;
  }
  if (n->fn == F_SIGMOID) {
    puts_(o, d ? "(1.0 / (1.0 + exp(-(" : "(1.0f / (1.0f + expf(-(");
    c_node(e, n->a, names, o);
    puts_(o, "))))");
  } else if (n->fn == F_SOFTPLUS) { /* the stable form the reference uses */
    puts_(o, d ? "(fmax(" : "(fmaxf(");
    c_node(e, n->a, names, o);
    puts_(o, d ? ", 0.0) + log1p(exp(-fabs(" : ", 0.0f) + log1pf(expf(-fabsf(");
    c_node(e, n->a, names, o);
    puts_(o, "))))");
  } else {
    puts_(o, d ? dfn[n->fn] : cfn[n->fn]);
    puts_(o, "(");
    c_node(e, n->a, names, o);
    if (n->b >= 0) {
      puts_(o, ", ");
      c_node(e, n->b, names, o);
    }
    puts_(o, ")");
  }
}

static int write_c(const mi_kexpr *e, const char *const *c_names, char *out, size_t out_len, char *err,
                   size_t err_len, int dbl) {
  if (err_len) err[0] = 0;
  if (!e || !c_names || !out || !out_len) {
    snprintf(err, err_len, "kernel expression: nothing to write");
    return -1;
  }
  for (int i = 0; i < e->n_names; i++)
    if (!c_names[i]) {
      snprintf(err, err_len, "kernel expression: no C name for '%s'", e->names[i]);
      return -1;
    }
  kx_out o = {out, 0, out_len, 0, dbl};
  out[0] = 0;
  c_node(e, e->root, c_names, &o);
  if (o.over) {
    snprintf(err, err_len, "kernel expression '%.60s': its C does not fit %zu bytes", e->src, out_len);
    return -1;
  }
  return 0;
}

int mi_kexpr_c(const mi_kexpr *e, const char *const *c_names, char *out, size_t out_len, char *err,
               size_t err_len) {
  return write_c(e, c_names, out, out_len, err, err_len, 0);
}

int mi_kexpr_c64(const mi_kexpr *e, const char *const *c_names, char *out, size_t out_len, char *err,
                 size_t err_len) {
  return write_c(e, c_names, out, out_len, err, err_len, 1);
}
