/* core/template/parse.c — tokens to an AST (recursive descent, depth-bounded).
 *
 * Expression precedence, loosest first, as Jinja2 parses:
 *   a if c else b | or | and | not | comparisons and in / not in |
 *   + - | ~ | * / // % | ** | unary - + | postfix .x [i] [a:b:c] (args),
 *   then filters "| f(args)" and tests "is [not] t(args)". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/template/jinja_int.h"

typedef struct {
  jarena *a;
  jtok *t;
  size_t n, p;
  int depth;
  char *err;
  size_t el;
  int failed;
  const jtok *kw; /* the statement whose block is being read */
} P;

static void *pfail(P *p, const jtok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *pfail(P *p, const jtok *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  jerr_v(&p->failed, p->err, p->el, t->line, t->col, fmt, ap);
  va_end(ap);
  return NULL;
}

static jtok *cur(P *p) {
  return &p->t[p->p];
}
static int is_op(P *p, const char *op) {
  jtok *t = cur(p);
  return t->t == T_OP && t->s.n == strlen(op) && !memcmp(t->s.s, op, t->s.n);
}
static int is_name(P *p, const char *nm) {
  jtok *t = cur(p);
  return t->t == T_NAME && t->s.n == strlen(nm) && !memcmp(t->s.s, nm, t->s.n);
}
static int is_name_at(P *p, size_t k, const char *nm) {
  if (p->p + k >= p->n) return 0;
  jtok *t = &p->t[p->p + k];
  return t->t == T_NAME && t->s.n == strlen(nm) && !memcmp(t->s.s, nm, t->s.n);
}
static void adv(P *p) {
  if (p->t[p->p].t != T_EOF) p->p++;
}
static const char *tok_desc(const jtok *t, char *b, size_t bn) {
  switch (t->t) {
  case T_EOF: return "end of template";
  case T_TEXT: return "text";
  case T_OPEN_STMT: return "'{%'";
  case T_CLOSE_STMT: return "'%}'";
  case T_OPEN_EXPR: return "'{{'";
  case T_CLOSE_EXPR: return "'}}'";
  case T_STR: return "a string";
  case T_INT:
  case T_FLOAT: return "a number";
  default: snprintf(b, bn, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.s); return b;
  }
}
static int expect_op(P *p, const char *op) {
  if (is_op(p, op)) {
    adv(p);
    return 0;
  }
  char b[64];
  pfail(p, cur(p), "expected '%s', got %s", op, tok_desc(cur(p), b, sizeof b));
  return -1;
}
static int expect_close(P *p, jtok_type t) {
  if (cur(p)->t == t) {
    adv(p);
    return 0;
  }
  char b[64];
  pfail(p, cur(p), "expected %s, got %s", t == T_CLOSE_STMT ? "'%}'" : "'}}'",
        tok_desc(cur(p), b, sizeof b));
  return -1;
}

static jnode *mk(P *p, jntype t, const jtok *at) {
  jnode *n = ja_alloc(p->a, sizeof *n);
  if (!n) return pfail(p, at, "out of memory");
  n->t = t;
  n->line = at->line;
  n->col = at->col;
  return n;
}
static int nl_push(P *p, jnlist *l, jnode *x) {
  if ((l->n & (l->n - 1)) == 0) { /* grow at powers of two */
    size_t c = l->n ? l->n * 2 : 1;
    jnode **q = ja_alloc(p->a, c * sizeof *q);
    if (!q) {
      pfail(p, cur(p), "out of memory");
      return -1;
    }
    if (l->n) memcpy(q, l->v, l->n * sizeof *q);
    l->v = q;
  }
  l->v[l->n++] = x;
  return 0;
}

static jnode *expr(P *p);
static jnode *or_expr(P *p);
static jnode *unary(P *p);

/* "(" args ")" after a callee/filter/test: positional and name=value */
static int call_args(P *p, jnode *n) {
  if (expect_op(p, "(")) return -1;
  while (!is_op(p, ")")) {
    jtok *at = cur(p);
    jnode *v;
    if (at->t == T_NAME && p->p + 1 < p->n && p->t[p->p + 1].t == T_OP && p->t[p->p + 1].s.n == 1 &&
        p->t[p->p + 1].s.s[0] == '=') {
      adv(p);
      adv(p);
      jnode *val = expr(p);
      if (!val) return -1;
      v = mk(p, E_KW, at);
      if (!v) return -1;
      v->s = at->s;
      v->a = val;
    } else if (!(v = expr(p)))
      return -1;
    if (nl_push(p, &n->args, v)) return -1;
    if (is_op(p, ","))
      adv(p);
    else if (!is_op(p, ")")) {
      char b[64];
      pfail(p, cur(p), "expected ',' or ')', got %s", tok_desc(cur(p), b, sizeof b));
      return -1;
    }
  }
  adv(p);
  return 0;
}

static jnode *primary(P *p) {
  jtok *t = cur(p);
  jnode *n;
  switch (t->t) {
  case T_STR: {
    /* adjacent literals concatenate */
    n = mk(p, E_STR, t);
    if (!n) return NULL;
    n->s = t->s;
    adv(p);
    while (cur(p)->t == T_STR) {
      char *c = ja_alloc(p->a, n->s.n + cur(p)->s.n + 1);
      if (!c) return pfail(p, t, "out of memory");
      memcpy(c, n->s.s, n->s.n);
      memcpy(c + n->s.n, cur(p)->s.s, cur(p)->s.n);
      n->s = (jstr){c, n->s.n + cur(p)->s.n};
      adv(p);
    }
    return n;
  }
  case T_INT:
    n = mk(p, E_INT, t);
    if (n) n->i = t->i;
    adv(p);
    return n;
  case T_FLOAT:
    n = mk(p, E_FLOAT, t);
    if (n) n->f = t->f;
    adv(p);
    return n;
  case T_NAME: {
    static const struct {
      const char *w;
      jntype t;
      int v;
    } lits[] = {{"true", E_BOOL, 1},  {"True", E_BOOL, 1}, {"false", E_BOOL, 0},
                {"False", E_BOOL, 0}, {"none", E_NONE, 0}, {"None", E_NONE, 0}};
    for (size_t i = 0; i < sizeof lits / sizeof *lits; i++)
      if (is_name(p, lits[i].w)) {
        n = mk(p, lits[i].t, t);
        if (n) n->op = lits[i].v;
        adv(p);
        return n;
      }
    n = mk(p, E_NAME, t);
    if (n) n->s = t->s;
    adv(p);
    return n;
  }
  case T_OP:
    if (is_op(p, "(")) {
      adv(p);
      if (is_op(p, ")")) {
        adv(p);
        return mk(p, E_TUPLE, t);
      }
      jnode *e = expr(p);
      if (!e) return NULL;
      if (is_op(p, ",")) {
        n = mk(p, E_TUPLE, t);
        if (!n || nl_push(p, &n->args, e)) return NULL;
        while (is_op(p, ",")) {
          adv(p);
          if (is_op(p, ")")) break;
          jnode *x = expr(p);
          if (!x || nl_push(p, &n->args, x)) return NULL;
        }
        e = n;
      }
      if (expect_op(p, ")")) return NULL;
      return e;
    }
    if (is_op(p, "[")) {
      adv(p);
      n = mk(p, E_LIST, t);
      if (!n) return NULL;
      while (!is_op(p, "]")) {
        jnode *x = expr(p);
        if (!x || nl_push(p, &n->args, x)) return NULL;
        if (is_op(p, ","))
          adv(p);
        else if (!is_op(p, "]")) {
          char b[64];
          return pfail(p, cur(p), "expected ',' or ']', got %s", tok_desc(cur(p), b, sizeof b));
        }
      }
      adv(p);
      return n;
    }
    if (is_op(p, "{")) {
      adv(p);
      n = mk(p, E_DICT, t);
      if (!n) return NULL;
      while (!is_op(p, "}")) {
        jnode *k = expr(p);
        if (!k || expect_op(p, ":")) return NULL;
        jnode *v = expr(p);
        if (!v || nl_push(p, &n->args, k) || nl_push(p, &n->args2, v)) return NULL;
        if (is_op(p, ","))
          adv(p);
        else if (!is_op(p, "}")) {
          char b[64];
          return pfail(p, cur(p), "expected ',' or '}', got %s", tok_desc(cur(p), b, sizeof b));
        }
      }
      adv(p);
      return n;
    }
    break;
  default: break;
  }
  char b[64];
  return pfail(p, t, "expected an expression, got %s", tok_desc(t, b, sizeof b));
}

static jnode *postfix(P *p, jnode *n) {
  for (;;) {
    jtok *t = cur(p);
    if (is_op(p, ".")) {
      adv(p);
      if (cur(p)->t == T_INT) { /* x.0 */
        jnode *m = mk(p, E_INDEX, t), *k = mk(p, E_INT, cur(p));
        if (!m || !k) return NULL;
        k->i = cur(p)->i;
        m->a = n;
        m->b = k;
        n = m;
        adv(p);
        continue;
      }
      if (cur(p)->t != T_NAME) {
        char b[64];
        return pfail(p, cur(p), "expected an attribute name after '.', got %s",
                     tok_desc(cur(p), b, sizeof b));
      }
      jnode *m = mk(p, E_ATTR, t);
      if (!m) return NULL;
      m->a = n;
      m->s = cur(p)->s;
      n = m;
      adv(p);
    } else if (is_op(p, "[")) {
      adv(p);
      jnode *parts[3] = {0};
      int colons = 0;
      while (!is_op(p, "]")) {
        if (is_op(p, ":")) {
          if (++colons > 2) return pfail(p, cur(p), "too many ':' in a slice");
          adv(p);
          continue;
        }
        if (parts[colons]) {
          char b[64];
          return pfail(p, cur(p), "expected ':' or ']', got %s", tok_desc(cur(p), b, sizeof b));
        }
        if (!(parts[colons] = expr(p))) return NULL;
      }
      adv(p);
      jnode *m;
      if (colons) {
        m = mk(p, E_SLICE, t);
        if (!m) return NULL;
        m->a = n;
        m->b = parts[0];
        m->c = parts[1];
        m->d = parts[2];
      } else {
        if (!parts[0]) return pfail(p, t, "empty subscript '[]'");
        m = mk(p, E_INDEX, t);
        if (!m) return NULL;
        m->a = n;
        m->b = parts[0];
      }
      n = m;
    } else if (is_op(p, "(")) {
      jnode *m = mk(p, E_CALL, t);
      if (!m) return NULL;
      m->a = n;
      if (call_args(p, m)) return NULL;
      n = m;
    } else
      return n;
  }
}

/* filters and tests after a unary operand */
static jnode *filters(P *p, jnode *n) {
  for (;;) {
    jtok *t = cur(p);
    if (is_op(p, "|")) {
      adv(p);
      if (cur(p)->t != T_NAME) {
        char b[64];
        return pfail(p, cur(p), "expected a filter name after '|', got %s",
                     tok_desc(cur(p), b, sizeof b));
      }
      jnode *m = mk(p, E_FILTER, cur(p));
      if (!m) return NULL;
      m->a = n;
      m->s = cur(p)->s;
      adv(p);
      if (is_op(p, "(") && call_args(p, m)) return NULL;
      n = m;
    } else if (is_name(p, "is")) {
      adv(p);
      int neg = 0;
      if (is_name(p, "not")) {
        neg = 1;
        adv(p);
      }
      jtok *nt = cur(p);
      jnode *m = mk(p, E_TEST, nt);
      if (!m) return NULL;
      if (nt->t == T_NAME)
        m->s = nt->s;
      else if (nt->t == T_OP && (is_op(p, "==") || is_op(p, "!=") || is_op(p, "<") ||
                                 is_op(p, ">") || is_op(p, "<=") || is_op(p, ">=")))
        m->s = nt->s;
      else {
        char b[64];
        return pfail(p, nt, "expected a test name after 'is', got %s", tok_desc(nt, b, sizeof b));
      }
      adv(p);
      m->a = n;
      m->op = neg;
      if (is_op(p, "(")) {
        if (call_args(p, m)) return NULL;
      } else if (cur(p)->t == T_STR || cur(p)->t == T_INT || cur(p)->t == T_FLOAT ||
                 (cur(p)->t == T_NAME && !is_name(p, "and") && !is_name(p, "or") &&
                  !is_name(p, "else") && !is_name(p, "if") && !is_name(p, "in") &&
                  !is_name(p, "not") && !is_name(p, "is"))) {
        jnode *arg = postfix(p, primary(p)); /* "is equalto 'x'", "is divisibleby 3" */
        if (!arg || nl_push(p, &m->args, arg)) return NULL;
      }
      (void)t;
      n = m;
    } else
      return n;
  }
}

static jnode *unary(P *p) {
  jtok *t = cur(p);
  if (++p->depth > MI_JINJA_MAX_NEST * 4)
    return pfail(p, t, "expression nested too deeply (over %d levels)", MI_JINJA_MAX_NEST * 4);
  jnode *r;
  if (is_op(p, "-") || is_op(p, "+")) {
    int neg = is_op(p, "-");
    adv(p);
    jnode *x = unary(p);
    r = x ? mk(p, neg ? E_NEG : E_POS, t) : NULL;
    if (r) r->a = x;
  } else {
    jnode *x = primary(p);
    x = x ? postfix(p, x) : NULL;
    r = x ? filters(p, x) : NULL;
  }
  p->depth--;
  return r;
}

static jnode *binop(P *p, jnode *l, int op, jnode *(*next)(P *), const jtok *at) {
  jnode *r = next(p);
  if (!r) return NULL;
  jnode *n = mk(p, E_BIN, at);
  if (!n) return NULL;
  n->op = op;
  n->a = l;
  n->b = r;
  return n;
}

static jnode *pow_expr(P *p) {
  jnode *l = unary(p);
  while (l && is_op(p, "**")) {
    jtok *at = cur(p);
    adv(p);
    l = binop(p, l, OP_POW, unary, at);
  }
  return l;
}
static jnode *mul_expr(P *p) {
  jnode *l = pow_expr(p);
  for (;;) {
    if (!l) return NULL;
    jtok *at = cur(p);
    int op = is_op(p, "*")    ? OP_MUL
             : is_op(p, "/")  ? OP_DIV
             : is_op(p, "//") ? OP_FDIV
             : is_op(p, "%")  ? OP_MOD
                              : 0;
    if (!op) return l;
    adv(p);
    l = binop(p, l, op, pow_expr, at);
  }
}
static jnode *cat_expr(P *p) {
  jnode *l = mul_expr(p);
  while (l && is_op(p, "~")) {
    jtok *at = cur(p);
    adv(p);
    l = binop(p, l, OP_CAT, mul_expr, at);
  }
  return l;
}
static jnode *add_expr(P *p) {
  jnode *l = cat_expr(p);
  for (;;) {
    if (!l) return NULL;
    jtok *at = cur(p);
    int op = is_op(p, "+") ? OP_ADD : is_op(p, "-") ? OP_SUB : 0;
    if (!op) return l;
    adv(p);
    l = binop(p, l, op, cat_expr, at);
  }
}
static jnode *cmp_expr(P *p) {
  jnode *l = add_expr(p);
  for (;;) {
    if (!l) return NULL;
    jtok *at = cur(p);
    int op = is_op(p, "==")                                  ? OP_EQ
             : is_op(p, "!=")                                ? OP_NE
             : is_op(p, "<")                                 ? OP_LT
             : is_op(p, "<=")                                ? OP_LE
             : is_op(p, ">")                                 ? OP_GT
             : is_op(p, ">=")                                ? OP_GE
             : is_name(p, "in")                              ? OP_IN
             : (is_name(p, "not") && is_name_at(p, 1, "in")) ? OP_NOTIN
                                                             : 0;
    if (!op) return l;
    adv(p);
    if (op == OP_NOTIN) adv(p);
    l = binop(p, l, op, add_expr, at);
  }
}
static jnode *not_expr(P *p) {
  if (is_name(p, "not")) {
    jtok *at = cur(p);
    if (++p->depth > MI_JINJA_MAX_NEST * 4)
      return pfail(p, at, "expression nested too deeply (over %d levels)", MI_JINJA_MAX_NEST * 4);
    adv(p);
    jnode *x = not_expr(p);
    p->depth--;
    jnode *n = x ? mk(p, E_NOT, at) : NULL;
    if (n) n->a = x;
    return n;
  }
  return cmp_expr(p);
}
static jnode *and_expr(P *p) {
  jnode *l = not_expr(p);
  while (l && is_name(p, "and")) {
    jtok *at = cur(p);
    adv(p);
    jnode *r = not_expr(p), *n = r ? mk(p, E_AND, at) : NULL;
    if (!n) return NULL;
    n->a = l;
    n->b = r;
    l = n;
  }
  return l;
}
static jnode *or_expr(P *p) {
  jnode *l = and_expr(p);
  while (l && is_name(p, "or")) {
    jtok *at = cur(p);
    adv(p);
    jnode *r = and_expr(p), *n = r ? mk(p, E_OR, at) : NULL;
    if (!n) return NULL;
    n->a = l;
    n->b = r;
    l = n;
  }
  return l;
}
static jnode *expr(P *p) {
  jtok *at = cur(p);
  if (++p->depth > MI_JINJA_MAX_NEST * 4)
    return pfail(p, at, "expression nested too deeply (over %d levels)", MI_JINJA_MAX_NEST * 4);
  jnode *l = or_expr(p);
  while (l && is_name(p, "if")) {
    jtok *it = cur(p);
    adv(p);
    jnode *c = or_expr(p);
    if (!c) return NULL;
    jnode *e = NULL;
    if (is_name(p, "else")) {
      adv(p);
      if (!(e = or_expr(p))) return NULL;
    }
    jnode *n = mk(p, E_TERN, it);
    if (!n) return NULL;
    n->a = l;
    n->b = c;
    n->c = e; /* no else: undefined */
    l = n;
  }
  p->depth--;
  return l;
}
/* expr [, expr]* : a bare tuple (for iterables and set values) */
static jnode *tuple_expr(P *p) {
  jtok *at = cur(p);
  jnode *e = expr(p);
  if (!e || !is_op(p, ",")) return e;
  jnode *n = mk(p, E_TUPLE, at);
  if (!n || nl_push(p, &n->args, e)) return NULL;
  while (is_op(p, ",")) {
    adv(p);
    jnode *x = expr(p);
    if (!x || nl_push(p, &n->args, x)) return NULL;
  }
  return n;
}

/* ---- statements ---- */
static int block(P *p, jnlist *out, const char *const *ends);

static int stmt_name(P *p, const char *nm) {
  return cur(p)->t == T_OPEN_STMT && is_name_at(p, 1, nm);
}

/* {% if %} ... {% elif %} ... {% else %} ... {% endif %}: kw is "if" */
static jnode *stmt_if(P *p, jtok *kw) {
  adv(p);
  jnode *n = mk(p, N_IF, kw);
  if (!n || !(n->a = expr(p)) || expect_close(p, T_CLOSE_STMT)) return NULL;
  static const char *const e1[] = {"elif", "else", "endif", NULL};
  if (block(p, &n->body, e1)) return NULL;
  jnode *tail = n;
  for (;;) {
    if (stmt_name(p, "elif")) {
      adv(p);
      jnode *m = mk(p, N_IF, cur(p));
      adv(p);
      if (!m || !(m->a = expr(p)) || expect_close(p, T_CLOSE_STMT) || block(p, &m->body, e1))
        return NULL;
      if (nl_push(p, &tail->els, m)) return NULL;
      tail = m;
    } else if (stmt_name(p, "else")) {
      adv(p);
      adv(p);
      static const char *const e2[] = {"endif", NULL};
      if (expect_close(p, T_CLOSE_STMT) || block(p, &tail->els, e2)) return NULL;
    } else
      break;
  }
  adv(p);
  adv(p); /* {% endif */
  return n;
}

/* A name (what: in the message when there is none) as an E_NAME node. */
static jnode *name_node(P *p, const char *what) {
  if (cur(p)->t != T_NAME) {
    char b[64];
    return pfail(p, cur(p), "expected %s, got %s", what, tok_desc(cur(p), b, sizeof b));
  }
  jnode *v = mk(p, E_NAME, cur(p));
  if (!v) return NULL;
  v->s = cur(p)->s;
  adv(p);
  return v;
}

/* the iterable of a for loop: no ternary here, so that "for x in xs if
 * cond" reads the filter; "a, b" a tuple */
static jnode *for_iterable(P *p) {
  jtok *at = cur(p);
  jnode *it = or_expr(p);
  if (it && is_op(p, ",")) {
    jnode *tu = mk(p, E_TUPLE, at);
    if (!tu || nl_push(p, &tu->args, it)) return NULL;
    while (is_op(p, ",")) {
      adv(p);
      jnode *x = or_expr(p);
      if (!x || nl_push(p, &tu->args, x)) return NULL;
    }
    it = tu;
  }
  return it;
}

/* {% for a[, b] in iterable [if cond] %} ... [{% else %} ...] {% endfor %} */
static jnode *stmt_for(P *p, jtok *kw) {
  adv(p);
  jnode *n = mk(p, N_FOR, kw);
  if (!n) return NULL;
  for (;;) {
    jnode *v = name_node(p, "a loop variable name");
    if (!v || nl_push(p, &n->args, v)) return NULL;
    if (is_op(p, ",")) {
      adv(p);
      continue;
    }
    break;
  }
  if (!is_name(p, "in")) {
    char b[64];
    return pfail(p, cur(p), "expected 'in' in a for loop, got %s", tok_desc(cur(p), b, sizeof b));
  }
  adv(p);
  if (!(n->b = for_iterable(p))) return NULL;
  if (is_name(p, "if")) {
    adv(p);
    if (!(n->c = expr(p))) return NULL;
  }
  if (is_name(p, "recursive")) return pfail(p, cur(p), "unsupported: recursive loops");
  if (expect_close(p, T_CLOSE_STMT)) return NULL;
  static const char *const e1[] = {"else", "endfor", NULL};
  if (block(p, &n->body, e1)) return NULL;
  if (stmt_name(p, "else")) {
    adv(p);
    adv(p);
    static const char *const e2[] = {"endfor", NULL};
    if (expect_close(p, T_CLOSE_STMT) || block(p, &n->els, e2)) return NULL;
  }
  adv(p);
  adv(p);
  return n;
}

/* what {% set %} assigns: a name, ns.attr, or a tuple of names */
static jnode *set_target(P *p) {
  jtok *tt = cur(p);
  if (tt->t != T_NAME) {
    char b[64];
    return pfail(p, tt, "expected a variable name after 'set', got %s",
                 tok_desc(tt, b, sizeof b));
  }
  jnode *target = mk(p, E_NAME, tt);
  if (!target) return NULL;
  target->s = tt->s;
  adv(p);
  if (is_op(p, ".")) {
    adv(p);
    if (cur(p)->t != T_NAME) {
      char b[64];
      return pfail(p, cur(p), "expected an attribute name, got %s",
                   tok_desc(cur(p), b, sizeof b));
    }
    jnode *m = mk(p, E_ATTR, cur(p));
    if (!m) return NULL;
    m->a = target;
    m->s = cur(p)->s;
    target = m;
    adv(p);
  } else if (is_op(p, ",")) {
    jnode *tu = mk(p, E_TUPLE, tt);
    if (!tu || nl_push(p, &tu->args, target)) return NULL;
    while (is_op(p, ",")) {
      adv(p);
      jnode *v = name_node(p, "a variable name");
      if (!v || nl_push(p, &tu->args, v)) return NULL;
    }
    target = tu;
  }
  return target;
}

/* {% set target = value %} (its '%}' consumed), or {% set name %} ...
 * {% endset %} (its last '%}' not) */
static jnode *stmt_set(P *p, jtok *kw) {
  adv(p);
  jnode *target = set_target(p);
  if (!target) return NULL;
  jnode *n;
  if (is_op(p, "=")) {
    adv(p);
    n = mk(p, N_SET, kw);
    if (!n) return NULL;
    n->a = target;
    if (!(n->b = tuple_expr(p)) || expect_close(p, T_CLOSE_STMT)) return NULL;
  } else {
    if (target->t != E_NAME)
      return pfail(p, cur(p), "a {%% set %%} block takes a plain variable name");
    n = mk(p, N_SETBLOCK, kw);
    if (!n) return NULL;
    n->a = target;
    static const char *const e1[] = {"endset", NULL};
    if (expect_close(p, T_CLOSE_STMT) || block(p, &n->body, e1)) return NULL;
    adv(p);
    adv(p);
  }
  return n;
}

/* {% macro name(a, b=default) %} ... {% endmacro %} */
static jnode *stmt_macro(P *p, jtok *kw) {
  adv(p);
  if (cur(p)->t != T_NAME) {
    char b[64];
    return pfail(p, cur(p), "expected a macro name, got %s", tok_desc(cur(p), b, sizeof b));
  }
  jnode *n = mk(p, N_MACRO, kw);
  if (!n) return NULL;
  n->s = cur(p)->s;
  adv(p);
  if (expect_op(p, "(")) return NULL;
  while (!is_op(p, ")")) {
    jnode *v = name_node(p, "a parameter name");
    if (!v) return NULL;
    jnode *def = NULL;
    if (is_op(p, "=")) {
      adv(p);
      if (!(def = expr(p))) return NULL;
    }
    if (nl_push(p, &n->args, v) || nl_push(p, &n->args2, def)) return NULL;
    if (is_op(p, ","))
      adv(p);
    else if (!is_op(p, ")")) {
      char b[64];
      return pfail(p, cur(p), "expected ',' or ')', got %s", tok_desc(cur(p), b, sizeof b));
    }
  }
  adv(p);
  static const char *const e1[] = {"endmacro", NULL};
  if (expect_close(p, T_CLOSE_STMT) || block(p, &n->body, e1)) return NULL;
  adv(p);
  adv(p);
  return n;
}

/* {% call macro(args) %} ... {% endcall %} */
static jnode *stmt_call(P *p, jtok *kw) {
  adv(p);
  jnode *n = mk(p, N_CALLBLOCK, kw);
  if (!n) return NULL;
  if (is_op(p, "(")) return pfail(p, cur(p), "unsupported: {%% call(args) %%}");
  jnode *c = unary(p);
  if (!c) return NULL;
  if (c->t != E_CALL) return pfail(p, kw, "{%% call %%} needs a macro call");
  n->a = c;
  static const char *const e1[] = {"endcall", NULL};
  if (expect_close(p, T_CLOSE_STMT) || block(p, &n->body, e1)) return NULL;
  adv(p);
  adv(p);
  return n;
}

static jnode *stmt(P *p) {
  adv(p); /* '{%' */
  jtok *kw = cur(p);
  if (kw->t != T_NAME) {
    char b[64];
    return pfail(p, kw, "expected a statement name after '{%%', got %s", tok_desc(kw, b, sizeof b));
  }
  if (++p->depth > MI_JINJA_MAX_NEST)
    return pfail(p, kw, "blocks nested too deeply (over %d levels)", MI_JINJA_MAX_NEST);
  const jtok *saved_kw = p->kw;
  p->kw = kw;
  jnode *n = NULL;
  if (is_name(p, "if")) n = stmt_if(p, kw);
  else if (is_name(p, "for")) n = stmt_for(p, kw);
  else if (is_name(p, "set")) n = stmt_set(p, kw);
  else if (is_name(p, "macro")) n = stmt_macro(p, kw);
  else if (is_name(p, "call")) n = stmt_call(p, kw);
  else if (is_name(p, "break") || is_name(p, "continue")) {
    n = mk(p, is_name(p, "break") ? N_BREAK : N_CONTINUE, kw);
    adv(p);
  } else if (is_name(p, "generation") || is_name(p, "endgeneration")) {
    n = mk(p, N_NOOP, kw); /* transformers' assistant-mask markers render nothing */
    adv(p);
  } else {
    return pfail(p, kw, "unknown statement '%.*s'", (int)(kw->s.n > 40 ? 40 : kw->s.n), kw->s.s);
  }
  /* {% set x = v %} consumed its own '%}' */
  if (!n || (n->t != N_SET && expect_close(p, T_CLOSE_STMT))) return NULL;
  p->depth--;
  p->kw = saved_kw;
  return n;
}

/* statements until one of ends (not consumed: p stays at its '{%') or EOF when ends is NULL */
static int block(P *p, jnlist *out, const char *const *ends) {
  const jtok *start = p->kw ? p->kw : cur(p);
  for (;;) {
    jtok *t = cur(p);
    if (t->t == T_EOF) {
      if (!ends) return 0;
      const char *e = ends[0];
      for (const char *const *x = ends; *x; x++)
        if (!strncmp(*x, "end", 3)) e = *x;
      pfail(p, start, "block not closed: missing '{%% %s %%}'", e);
      return -1;
    }
    if (t->t == T_TEXT) {
      jnode *n = mk(p, N_TEXT, t);
      if (!n) return -1;
      n->s = t->s;
      adv(p);
      if (nl_push(p, out, n)) return -1;
    } else if (t->t == T_COMMENT) {
      adv(p);
    } else if (t->t == T_OPEN_EXPR) {
      adv(p);
      jnode *n = mk(p, N_OUT, t);
      if (!n || !(n->a = tuple_expr(p)) || expect_close(p, T_CLOSE_EXPR) || nl_push(p, out, n))
        return -1;
    } else if (t->t == T_OPEN_STMT) {
      if (ends)
        for (const char *const *e = ends; *e; e++)
          if (is_name_at(p, 1, *e)) return 0;
      static const char *const closers[] = {"endif",   "endfor", "endmacro", "endset",
                                            "endcall", "elif",   "else",     NULL};
      for (const char *const *e = closers; *e; e++)
        if (is_name_at(p, 1, *e)) {
          pfail(p, &p->t[p->p + 1], "unexpected '{%% %s %%}'", *e);
          return -1;
        }
      jnode *n = stmt(p);
      if (!n || nl_push(p, out, n)) return -1;
    } else {
      char b[64];
      pfail(p, t, "unexpected %s", tok_desc(t, b, sizeof b));
      return -1;
    }
  }
}

mi_jinja *mi_jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
  char dummy[8];
  if (!err || !errlen) {
    err = dummy;
    errlen = sizeof dummy;
  }
  err[0] = 0;
  mi_jinja *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "line 1 col 1: out of memory");
    return NULL;
  }
  t->a.cap = (size_t)1 << 30;
  if (!src) src = "";
  P p = {.a = &t->a, .err = err, .el = errlen};
  if (jlex(&t->a, src, len, &p.t, &p.n, err, errlen) != 0 || block(&p, &t->body, NULL) != 0) {
    mi_jinja_free(t);
    return NULL;
  }
  return t;
}

void mi_jinja_free(mi_jinja *t) {
  if (!t) return;
  ja_free(&t->a);
  free(t);
}
