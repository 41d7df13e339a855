/* Integer expressions used by CKB contracts for shapes ("pos0 + T") and
 * constraints ("Hq % Hkv == 0"). A small recursive-descent evaluator: it
 * never allocates, and reports syntax errors, unknown names and division by
 * zero as one line. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"

typedef struct ex {
  const char *s, *p;
  mi_expr_lookup lookup;
  void *user;
  void (*names)(void *user, const char *name, size_t len); /* name-collecting mode */
  char *err;
  size_t err_len;
  int failed;
  int depth; /* nesting of '(' and unary '-' */
} ex;

/* Expressions come from CKB files: a hostile one must not make the error
 * message span lines or grow without bound, nor nest past the C stack. */
#define MI_EXPR_MAX_DEPTH 256
#define MI_EXPR_SHOW 80

static void ex_fail(ex *e, const char *what) {
  if (!e->failed && e->err) {
    char shown[MI_EXPR_SHOW + 4];
    size_t k = 0;
    for (const char *q = e->s; *q && k < MI_EXPR_SHOW; q++)
      shown[k++] = (unsigned char)*q < 0x20 || *q == 0x7f ? ' ' : *q;
    if (strlen(e->s) > MI_EXPR_SHOW) memcpy(shown + k, "...", 3), k += 3;
    shown[k] = 0;
    snprintf(e->err, e->err_len, "expression '%s': %s at offset %d", shown, what,
             (int)(e->p - e->s));
  }
  e->failed = 1;
}

static void skip(ex *e) {
  while (isspace((unsigned char)*e->p)) e->p++;
}

static int64_t cmp_expr(ex *e);

static int64_t primary(ex *e) {
  skip(e);
  if (e->failed) return 0;
  if ((*e->p == '(' || *e->p == '-') && e->depth >= MI_EXPR_MAX_DEPTH) {
    ex_fail(e, "nested too deeply");
    return 0;
  }
  if (*e->p == '(') {
    e->p++;
    e->depth++;
    int64_t v = cmp_expr(e);
    e->depth--;
    skip(e);
    if (*e->p != ')') ex_fail(e, "expected ')'");
    else e->p++;
    return v;
  }
  if (*e->p == '-') {
    e->p++;
    e->depth++;
    int64_t v = primary(e);
    e->depth--;
    if (v == INT64_MIN) ex_fail(e, "overflow");
    return v == INT64_MIN ? 0 : -v;
  }
  if (isdigit((unsigned char)*e->p)) {
    int64_t v = 0;
    while (isdigit((unsigned char)*e->p)) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *e->p - '0', &v))
        ex_fail(e, "number too large");
      e->p++;
    }
    return v;
  }
  if (isalpha((unsigned char)*e->p) || *e->p == '_') {
    const char *n = e->p;
    while (isalnum((unsigned char)*e->p) || *e->p == '_') e->p++;
    size_t len = (size_t)(e->p - n);
    if (e->names) {
      e->names(e->user, n, len);
      return 1;
    }
    int64_t v = 0;
    if (!e->lookup || e->lookup(e->user, n, len, &v) != 0) {
      char msg[96];
      snprintf(msg, sizeof msg, "unknown name '%.*s'", (int)(len < 60 ? len : 60), n);
      ex_fail(e, msg);
    }
    return v;
  }
  ex_fail(e, *e->p ? "unexpected character" : "unexpected end");
  return 0;
}

static int64_t mul_expr(ex *e) {
  int64_t v = primary(e);
  for (;;) {
    skip(e);
    char op = *e->p;
    if (op != '*' && op != '/' && op != '%') return v;
    e->p++;
    int64_t r = primary(e);
    if (op == '*') {
      if (__builtin_mul_overflow(v, r, &v)) ex_fail(e, "overflow");
    } else if (r == 0) {
      if (!e->names) ex_fail(e, "division by zero");
      v = 0;
    } else if (r == -1) { /* INT64_MIN / -1 overflows (and % traps on x86) */
      if (op == '/' && v == INT64_MIN) ex_fail(e, "overflow");
      v = op == '/' && v != INT64_MIN ? -v : 0;
    } else {
      v = op == '/' ? v / r : v % r;
    }
  }
}

static int64_t add_expr(ex *e) {
  int64_t v = mul_expr(e);
  for (;;) {
    skip(e);
    char op = *e->p;
    if (op != '+' && op != '-') return v;
    e->p++;
    int64_t r = mul_expr(e);
    if (op == '+' ? __builtin_add_overflow(v, r, &v) : __builtin_sub_overflow(v, r, &v))
      ex_fail(e, "overflow");
  }
}

static int64_t cmp_expr(ex *e) {
  int64_t v = add_expr(e);
  skip(e);
  const char *p = e->p;
  int op = 0; /* 1 ==, 2 !=, 3 <=, 4 >=, 5 <, 6 > */
  if (p[0] == '=' && p[1] == '=') op = 1;
  else if (p[0] == '!' && p[1] == '=') op = 2;
  else if (p[0] == '<' && p[1] == '=') op = 3;
  else if (p[0] == '>' && p[1] == '=') op = 4;
  else if (p[0] == '<') op = 5;
  else if (p[0] == '>') op = 6;
  if (!op) return v;
  e->p += op <= 4 ? 2 : 1;
  int64_t r = add_expr(e);
  switch (op) {
  case 1: return v == r;
  case 2: return v != r;
  case 3: return v <= r;
  case 4: return v >= r;
  case 5: return v < r;
  default: return v > r;
  }
}

static int run(ex *e, int64_t *out) {
  int64_t v = cmp_expr(e);
  skip(e);
  if (!e->failed && *e->p) ex_fail(e, "unexpected trailing text");
  if (e->failed) return -1;
  if (out) *out = v;
  return 0;
}

int mi_expr_eval(const char *expr, mi_expr_lookup lookup, void *user, int64_t *out, char *err,
                 size_t err_len) {
  ex e = {expr, expr, lookup, user, NULL, err, err_len, 0, 0};
  return run(&e, out);
}

static void ignore_name(void *user, const char *name, size_t len) {
  (void)user, (void)name, (void)len;
}

int mi_expr_names(const char *expr, void (*fn)(void *user, const char *name, size_t len),
                  void *user, char *err, size_t err_len) {
  if (!fn) fn = ignore_name; /* syntax check only */
  ex e = {expr, expr, NULL, user, fn, err, err_len, 0, 0};
  return run(&e, NULL);
}

/* ---- real-valued expressions ("int:partial_rotary_factor * head_dim") ----
 * The same grammar without comparisons, over doubles: + - * / (real
 * division), unary minus, parentheses, decimal numbers (with a fraction and
 * an exponent) and names. */
typedef struct exf {
  const char *s, *p;
  mi_expr_lookup_f64 lookup;
  void *user;
  char *err;
  size_t err_len;
  int failed, depth;
} exf;

static void exf_fail(exf *e, const char *what) {
  ex shim = {e->s, e->p, NULL, NULL, NULL, e->err, e->err_len, e->failed, 0};
  ex_fail(&shim, what);
  e->failed = 1;
}

static double f_add(exf *e);

static double f_primary(exf *e) {
  while (isspace((unsigned char)*e->p)) e->p++;
  if (e->failed) return 0;
  if ((*e->p == '(' || *e->p == '-') && e->depth >= MI_EXPR_MAX_DEPTH) {
    exf_fail(e, "nested too deeply");
    return 0;
  }
  if (*e->p == '(' || *e->p == '-') {
    int paren = *e->p++ == '(';
    e->depth++;
    double v = paren ? f_add(e) : -f_primary(e);
    e->depth--;
    if (paren) {
      while (isspace((unsigned char)*e->p)) e->p++;
      if (*e->p != ')') exf_fail(e, "expected ')'");
      else e->p++;
    }
    return v;
  }
  if (isdigit((unsigned char)*e->p) || (*e->p == '.' && isdigit((unsigned char)e->p[1]))) {
    char *end;
    double v = strtod(e->p, &end);
    e->p = end;
    return v;
  }
  if (isalpha((unsigned char)*e->p) || *e->p == '_') {
    const char *n = e->p;
    while (isalnum((unsigned char)*e->p) || *e->p == '_') e->p++;
    size_t len = (size_t)(e->p - n);
    double v = 0;
    if (!e->lookup || e->lookup(e->user, n, len, &v) != 0) {
      char msg[96];
      snprintf(msg, sizeof msg, "unknown name '%.*s'", (int)(len < 60 ? len : 60), n);
      exf_fail(e, msg);
    }
    return v;
  }
  exf_fail(e, *e->p ? "unexpected character" : "unexpected end");
  return 0;
}

static double f_mul(exf *e) {
  double v = f_primary(e);
  for (;;) {
    while (isspace((unsigned char)*e->p)) e->p++;
    char op = *e->p;
    if (op != '*' && op != '/') return v;
    e->p++;
    double r = f_primary(e);
    if (op == '/' && r == 0) exf_fail(e, "division by zero");
    v = op == '*' ? v * r : r != 0 ? v / r : 0;
  }
}

static double f_add(exf *e) {
  double v = f_mul(e);
  for (;;) {
    while (isspace((unsigned char)*e->p)) e->p++;
    char op = *e->p;
    if (op != '+' && op != '-') return v;
    e->p++;
    double r = f_mul(e);
    v = op == '+' ? v + r : v - r;
  }
}

int mi_expr_eval_f64(const char *expr, mi_expr_lookup_f64 lookup, void *user, double *out, char *err,
                     size_t err_len) {
  exf e = {expr, expr, lookup, user, err, err_len, 0, 0};
  double v = f_add(&e);
  while (isspace((unsigned char)*e.p)) e.p++;
  if (!e.failed && *e.p) exf_fail(&e, "unexpected trailing text");
  if (!e.failed && !isfinite(v)) exf_fail(&e, "not a finite number");
  if (e.failed) return -1;
  *out = v;
  return 0;
}
