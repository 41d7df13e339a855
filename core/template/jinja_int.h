/* core/template/jinja_int.h — the engine's internals: arena, tokens, AST, values. */
#ifndef MI_CORE_TEMPLATE_JINJA_INT_H
#define MI_CORE_TEMPLATE_JINJA_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/template/jinja.h"

/* ---- arena (arena.c): everything a parse or a render makes, freed at once ---- */
typedef struct jarena {
  struct jchunk *head;
  size_t used, cap; /* bytes handed out; 0 cap: unlimited */
  int over;         /* an allocation was refused */
} jarena;
void *ja_alloc(jarena *a, size_t n); /* zeroed; NULL when over cap */
void ja_free(jarena *a);
char *ja_strndup(jarena *a, const char *s, size_t n);

typedef struct {
  const char *s;
  size_t n;
} jstr;

/* growable byte buffer (malloc'd) */
typedef struct {
  char *p;
  size_t n, cap, max;
  int over;
} jbuf;
void jb_put(jbuf *b, const char *s, size_t n);
void jb_puts(jbuf *b, const char *s);
void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- tokens (lex.c) ---- */
typedef enum {
  T_TEXT,
  T_OPEN_STMT,
  T_CLOSE_STMT,
  T_OPEN_EXPR,
  T_CLOSE_EXPR,
  T_NAME,
  T_STR,
  T_INT,
  T_FLOAT,
  T_OP,
  T_COMMENT,
  T_EOF
} jtok_type;
typedef struct {
  jtok_type t;
  jstr s;      /* text, name, decoded string literal, operator */
  long long i; /* T_INT */
  double f;    /* T_FLOAT */
  int line, col;
} jtok;
/* 0 with the tokens (in the arena), or -1 with err */
int jlex(jarena *a, const char *src, size_t len, jtok **toks, size_t *n, char *err, size_t el);

/* ---- AST (parse.c) ---- */
typedef struct jnode jnode;
typedef struct {
  jnode **v;
  size_t n;
} jnlist;
typedef enum {
  N_TEXT,
  N_OUT,
  N_IF,
  N_FOR,
  N_SET,
  N_SETBLOCK,
  N_MACRO,
  N_CALLBLOCK,
  N_BREAK,
  N_CONTINUE,
  N_NOOP,
  E_NONE,
  E_BOOL,
  E_INT,
  E_FLOAT,
  E_STR,
  E_NAME,
  E_LIST,
  E_TUPLE,
  E_DICT,
  E_ATTR,
  E_INDEX,
  E_SLICE,
  E_CALL,
  E_FILTER,
  E_TEST,
  E_BIN,
  E_NOT,
  E_NEG,
  E_POS,
  E_AND,
  E_OR,
  E_TERN,
  E_KW
} jntype;
enum {
  OP_ADD = 1,
  OP_SUB,
  OP_MUL,
  OP_DIV,
  OP_FDIV,
  OP_MOD,
  OP_POW,
  OP_CAT,
  OP_EQ,
  OP_NE,
  OP_LT,
  OP_LE,
  OP_GT,
  OP_GE,
  OP_IN,
  OP_NOTIN
};
struct jnode {
  jntype t;
  int line, col;
  int op;      /* E_BIN operator; E_TEST negated; E_BOOL value */
  long long i; /* E_INT */
  double f;    /* E_FLOAT */
  jstr s;      /* text, name, string, attribute, filter/test/macro name */
  jnode *a, *b, *c, *d;
  jnlist
      args; /* call/filter/test arguments, list/tuple items, dict keys, for targets, macro params */
  jnlist args2; /* dict values, macro param defaults (NULL entries: none) */
  jnlist body, els;
};
struct mi_jinja {
  jarena a;
  jnlist body;
};

/* ---- values (value.c) ---- */
typedef enum {
  V_UNDEF,
  V_NONE,
  V_BOOL,
  V_INT,
  V_FLOAT,
  V_STR,
  V_LIST,
  V_DICT,
  V_NS,
  V_FUNC,
  V_MACRO,
  V_LOOP
} jvtype;
typedef struct jv jv;
typedef struct jloop {
  size_t i, n;
  jv **items;
} jloop;
struct jv {
  jvtype t;
  int tuple; /* V_LIST made by a tuple */
  union {
    int b;
    long long i;
    double f;
    jstr s;
    struct {
      jv **a;
      size_t n;
    } l;
    struct {
      jstr *k;
      jv **v;
      size_t n, cap;
    } d; /* V_DICT, V_NS */
    struct {
      int id;
      jv *self;
    } fn; /* builtin function or bound method */
    struct {
      const jnode *def;
      jv *caller;
    } mac;
    jloop *loop;
  };
};
extern jv jv_undef, jv_none, jv_true, jv_false;

typedef struct jrender jrender;
jv *jv_int(jrender *r, long long i);
jv *jv_float(jrender *r, double f);
jv *jv_str(jrender *r, const char *s, size_t n);
jv *jv_strc(jrender *r, const char *s); /* copies */
jv *jv_list(jrender *r, size_t n);      /* n items, all NULL */
jv *jv_dict(jrender *r);
int jv_dict_set(jrender *r, jv *d, const char *k, size_t kn, jv *v);
jv *jv_dict_get(const jv *d, const char *k, size_t kn); /* NULL when absent */
jv *jv_from_json(jrender *r, const json_t *j, int depth);
int jv_truthy(const jv *v);
int jv_equal(const jv *a, const jv *b);
const char *jv_type_name(const jv *v);
/* str(): what {{ v }} prints (none/undefined print nothing); 0 or -1 (memory) */
int jv_to_text(jrender *r, const jv *v, jbuf *b);
/* json.dumps(v, ensure_ascii, indent (<0: none), sort_keys); -1 on a value JSON cannot hold */
int jv_to_json(jrender *r, const jv *v, jbuf *b, int indent, int ensure_ascii, int sort_keys,
               int depth);
void j_float_repr(double f, char *out, size_t n); /* Python repr(float) */

/* ---- rendering (eval.c) ---- */
typedef struct jframe {
  jstr *k;
  jv **v;
  size_t n, cap;
  struct jframe *up;
} jframe;
struct jrender {
  jarena a;
  jbuf *out;
  jframe *root;
  const mi_jinja_limits *lim;
  int64_t now;
  uint64_t steps, iters;
  int depth;
  int failed, raised;
  char err[512];
  jv *caller; /* the innermost {% call %} body, for caller() */
};
/* The first error of a parse or a render into err[el] (later ones follow
 * from it): "line L col C: message" (line -1: the message alone), made one
 * line; *failed set. */
void jerr_v(int *failed, char *err, size_t el, int line, int col, const char *fmt, va_list ap);
/* records the first error (at node n's position); returns NULL */
void *jfail(jrender *r, const jnode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
jv *jeval(jrender *r, jframe *f, const jnode *n);
/* A call's arguments evaluated: positional into pos[np], keyword into
 * kwn/kwv[nk]; 0, or -1 after jfail. */
int jeval_args(jrender *r, jframe *f, const jnlist *args, jv ***pos, size_t *np, jstr **kwn,
               jv ***kwv, size_t *nk);
/* A string value of b's text (b freed); rc != 0 or b over its limit fails
 * the render with "output limit" (unless it failed already). */
jv *jbuf_str(jrender *r, const jnode *at, jbuf *b, int rc);
/* x as a list: itself, a dict's keys (a namespace's too when ns), a
 * string's code points; NULL when out of memory, or with *other set for a
 * value of any other type. */
jv *jlist_of(jrender *r, jv *x, int ns, int *other);
int jexec(jrender *r, jframe *f, const jnlist *body); /* 0, -1 error, 1 break, 2 continue */
jv *jcall_macro(jrender *r, const jnode *at, jv *m, jv **args, size_t nargs, jstr *kwn, jv **kwv,
                size_t nkw);
jv *jnew_bytes(jrender *r, const jnode *at, size_t n); /* a V_STR of n bytes to fill */

/* ---- builtins (builtins.c) ---- */
jv *jb_filter(jrender *r, jframe *f, const jnode *n, jv *x);
jv *jb_test(jrender *r, jframe *f, const jnode *n, jv *x); /* &jv_true / &jv_false / NULL */
jv *jb_attr(jrender *r, const jnode *at, jv *obj, const char *name,
            size_t nn);                                 /* member or method */
jv *jb_global(jrender *r, const char *name, size_t nn); /* range, namespace, ...; NULL when none */
jv *jb_call(jrender *r, const jnode *at, jv *fn, jv **args, size_t nargs, jstr *kwn, jv **kwv,
            size_t nkw);

#endif
