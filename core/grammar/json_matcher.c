/* core/grammar/json_matcher.c — the incremental recogniser: a pushdown
 * automaton over bytes whose stack frames are immutable and shared
 * (grammar_int.h), so that saving a state is copying a few indices. Several
 * parses run side by side where anyOf branches cannot yet be told apart.
 *
 * Liveness: a byte is taken only when the text can still be completed (a
 * container opens only if what it must hold fits under the nesting limit, a
 * key only if the object can still get its required keys, a digit only if
 * the number can still land within its bounds), so a parse never ends up
 * where no byte and not the end is allowed. */
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar_int.h"

#define MAXD MI_JSON_GRAMMAR_MAX_DEPTH
#define FNV_BASIS 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

enum { R_PREFIX, R_VALUE, R_SUFFIX, R_DONE };
enum { O_OPEN, O_COMMA, O_COLON, O_VALUE, O_AFTER };
enum { A_OPEN, A_COMMA, A_AFTER };
enum { S_NORMAL, S_ESC, S_HEX, S_LOWBS, S_LOWU, S_LOWHEX, S_UTF8 };
enum { NU_SIGN, NU_ZERO, NU_INT, NU_DOT, NU_FRAC, NU_E, NU_ESIGN, NU_EXP };
enum { NUMF_NEG = 1, NUMF_INTONLY = 2, NUMF_BOUNDED = 4 };
/* what feeding one frame a byte did */
enum { TAKEN, REJECT, ENDED /* the frame is a complete value and the byte is not its */ };
/* what one byte does in a string */
enum { LX_REJECT, LX_CONT, LX_START /* a new code point */, LX_CLOSE };

/* ---- the arena ---- */

void jg_arena_init(jg_arena *A, const mi_json_matcher *m, jg_frame *buf, uint32_t cap) {
  A->base = m->frames;
  A->nbase = m->n_frames;
  A->buf = buf;
  A->len = 0;
  A->cap = cap;
  A->oom = 0;
  A->heap = 0;
}

void jg_arena_free(jg_arena *A) {
  if (A->heap) free(A->buf);
  A->buf = NULL;
  A->heap = 0;
}

static inline const jg_frame *FR(const jg_arena *A, uint32_t i) {
  return i < A->nbase ? &A->base[i] : &A->buf[i - A->nbase];
}

/* f must not point into A->buf (it may move). */
static uint32_t push(jg_arena *A, const jg_frame *f) {
  if (A->len == A->cap) {
    uint32_t nc = A->cap < 64 ? 64 : A->cap * 2;
    jg_frame *nb =
        A->heap ? realloc(A->buf, (size_t)nc * sizeof *nb) : malloc((size_t)nc * sizeof *nb);
    if (!nb || (uint64_t)A->nbase + nc >= JG_NONE) {
      if (nb && nb != A->buf) free(nb);
      A->oom = 1;
      return JG_NONE;
    }
    if (!A->heap && A->len) memcpy(nb, A->buf, (size_t)A->len * sizeof *nb);
    A->buf = nb;
    A->cap = nc;
    A->heap = 1;
  }
  A->buf[A->len] = *f;
  return A->nbase + A->len++;
}

static int frame_eq(const jg_frame *x, const jg_frame *y) {
  return x->parent == y->parent && x->node == y->node && x->kind == y->kind &&
         x->phase == y->phase && x->ws == y->ws && x->depth == y->depth && x->flags == y->flags &&
         x->sub == y->sub && x->a == y->a && x->b == y->b && x->c == y->c && x->d == y->d &&
         x->h == y->h;
}

/* Adds a parse to the next state: the same frame twice is one parse; past
 * JG_MAX_THREADS a parse is dropped (it was live, so the rest still are). */
static void out_add(const jg_arena *A, jg_state *out, uint32_t t) {
  if (t == JG_NONE) return;
  const jg_frame *f = FR(A, t);
  for (uint32_t i = 0; i < out->n; i++)
    if (out->top[i] == t || frame_eq(FR(A, out->top[i]), f)) return;
  if (out->n < JG_MAX_THREADS) out->top[out->n++] = t;
}

static uint32_t push_add(jg_arena *A, jg_state *out, const jg_frame *f) {
  uint32_t t = push(A, f);
  out_add(A, out, t);
  return t;
}

/* The root after its value: the wrapping suffix, if any, then the end. */
static uint8_t root_after_value(const mi_json_grammar *g) { return g->suffix_len ? R_SUFFIX : R_DONE; }

/* The root's literal text before or after the value: one byte of it. */
static int root_literal_step(const mi_json_grammar *g, jg_arena *A, const jg_frame *f, int c,
                             jg_state *out) {
  const char *lit = f->phase == R_PREFIX ? g->prefix : g->suffix;
  uint32_t len = f->phase == R_PREFIX ? g->prefix_len : g->suffix_len;
  if (f->d >= len || (unsigned char)lit[f->d] != c) return REJECT;
  jg_frame n = *f;
  if (++n.d == len) {
    n.phase = f->phase == R_PREFIX ? R_VALUE : R_DONE;
    n.d = 0;
  }
  push_add(A, out, &n);
  return TAKEN;
}

/* The container below a finished value goes on past it. */
static uint32_t value_done(const mi_json_grammar *g, jg_arena *A, uint32_t p) {
  jg_frame f = *FR(A, p);
  f.ws = 0;
  if (f.kind == F_ROOT)
    f.phase = root_after_value(g), f.d = 0;
  else if (f.kind == F_OBJ)
    f.phase = O_AFTER;
  else if (f.kind == F_ARR)
    f.phase = A_AFTER, f.a++;
  return push(A, &f);
}

/* At most one ' ' or '\n' between tokens (no unbounded whitespace for a
 * model to loop in). -1: c is not whitespace. */
static int take_ws(jg_arena *A, const jg_frame *f, int c, jg_state *out) {
  if (c != ' ' && c != '\n') return -1;
  if (f->ws) return REJECT;
  jg_frame n = *f;
  n.ws = 1;
  push_add(A, out, &n);
  return TAKEN;
}

/* ---- candidate texts (enum values, declared keys) ----
 * Sorted texts that agree on their first pos bytes: those with byte pos
 * equal to c form one run, found by binary search (a text that ends at pos
 * sorts first). */
static int byte_at(const mi_json_grammar *g, const jg_text *t, uint32_t pos) {
  return t->len > pos ? (unsigned char)g->blob[t->off + pos] : -1;
}

static void narrow(const mi_json_grammar *g, const jg_text *texts, uint32_t *lo, uint32_t *hi,
                   uint32_t pos, int c) {
  uint32_t a = *lo, b = *hi;
  while (a < b) { /* first with byte >= c */
    uint32_t m = a + (b - a) / 2;
    if (byte_at(g, &texts[m], pos) < c)
      a = m + 1;
    else
      b = m;
  }
  uint32_t first = a;
  b = *hi;
  while (a < b) { /* first with byte > c */
    uint32_t m = a + (b - a) / 2;
    if (byte_at(g, &texts[m], pos) <= c)
      a = m + 1;
    else
      b = m;
  }
  *lo = first;
  *hi = a;
}

/* ---- literals: true / false / null, enum and const values ---- */

static int lit_complete(const mi_json_grammar *g, const jg_frame *f) {
  return f->a < f->c && g->lits[f->a].len == f->d;
}

static int lit_step(const mi_json_grammar *g, jg_arena *A, const jg_frame *f, int c,
                    jg_state *out) {
  uint32_t lo = f->a, hi = f->c;
  narrow(g, g->lits, &lo, &hi, f->d, c);
  if (lo == hi) return lit_complete(g, f) ? ENDED : REJECT;
  jg_frame n = *f;
  n.a = lo, n.c = hi, n.d = f->d + 1;
  if (hi - lo == 1 && g->lits[lo].len == n.d)
    out_add(A, out, value_done(g, A, f->parent));
  else
    push_add(A, out, &n);
  return TAKEN;
}

static int lit_start(const mi_json_grammar *g, jg_arena *A, uint32_t parent, uint32_t node,
                     uint32_t lo, uint32_t hi, int c, jg_state *out) {
  jg_frame f = {.parent = parent, .node = node, .kind = F_LIT, .a = lo, .c = hi, .d = 0};
  return lit_step(g, A, &f, c, out) == TAKEN;
}

/* ---- numbers ---- */

/* Can an integer part that starts with the k digits of value v (negative
 * when neg) still end inside [lo, hi] with at most 15 digits? k == 0: only
 * the sign so far. A leading 0 cannot be followed by digits. */
static int int_viable(int64_t v, unsigned k, int neg, int64_t lo, int64_t hi) {
  if (k == 0) {
    for (int d = 0; d <= 9; d++)
      if (int_viable(d, 1, neg, lo, hi)) return 1;
    return 0;
  }
  if (v == 0) return k == 1 && lo <= 0 && 0 <= hi;
  int64_t span = 1;
  for (unsigned L = k; L <= MI_JSON_GRAMMAR_INT_DIGITS; L++, span *= 10) {
    int64_t a = v * span, b = a + span - 1; /* the values of L digits with this prefix */
    if (neg ? (-a >= lo && -b <= hi) : (a <= hi && b >= lo)) return 1;
  }
  return 0;
}

static int num_complete(const mi_json_grammar *g, const jg_frame *f) {
  if (f->phase != NU_ZERO && f->phase != NU_INT && f->phase != NU_FRAC && f->phase != NU_EXP)
    return 0;
  if (!(f->flags & NUMF_BOUNDED)) return 1;
  const jg_node *v = &g->nodes[f->node];
  int64_t x = f->flags & NUMF_NEG ? -(int64_t)f->h : (int64_t)f->h;
  return x >= v->imin && x <= v->imax; /* a fraction at a bound is all zeros (num_step) */
}

/* At a bound (integer part equal to it, on the side where a fraction would
 * pass it), only zero fraction digits keep the number inside. */
static int at_bound(const mi_json_grammar *g, const jg_frame *f) {
  const jg_node *v = &g->nodes[f->node];
  if (!(f->flags & NUMF_BOUNDED)) return 0;
  return f->flags & NUMF_NEG ? -(int64_t)f->h == v->imin : (int64_t)f->h == v->imax;
}

static int num_step(const mi_json_grammar *g, jg_arena *A, const jg_frame *f, int c,
                    jg_state *out) {
  const jg_node *v = &g->nodes[f->node];
  int d = c >= '0' && c <= '9' ? c - '0' : -1;
  int frac_ok = !(f->flags & NUMF_INTONLY), exp_ok = frac_ok && !(f->flags & NUMF_BOUNDED);
  jg_frame n = *f;
  switch (f->phase) {
  case NU_SIGN:
    if (d < 0) return REJECT;
    n.phase = d ? NU_INT : NU_ZERO, n.a = 1, n.h = (uint64_t)d;
    break;
  case NU_ZERO:
  case NU_INT:
    if (d >= 0 && f->phase == NU_INT && f->a < MI_JSON_GRAMMAR_INT_DIGITS)
      n.a++, n.h = f->h * 10 + (uint64_t)d;
    else if (c == '.' && frac_ok && num_complete(g, f)) /* the integer part is final */
      n.phase = NU_DOT;
    else if ((c == 'e' || c == 'E') && exp_ok)
      n.phase = NU_E;
    else
      return num_complete(g, f) ? ENDED : REJECT;
    break;
  case NU_DOT:
  case NU_FRAC:
    if (d >= 0 && f->b < MI_JSON_GRAMMAR_FRAC_DIGITS && (d == 0 || !at_bound(g, f)))
      n.phase = NU_FRAC, n.b++;
    else if (f->phase == NU_FRAC && (c == 'e' || c == 'E') && exp_ok)
      n.phase = NU_E;
    else
      return num_complete(g, f) ? ENDED : REJECT;
    break;
  case NU_E:
  case NU_ESIGN:
    if (f->phase == NU_E && (c == '+' || c == '-'))
      n.phase = NU_ESIGN;
    else if (d >= 0)
      n.phase = NU_EXP, n.c = (uint32_t)d, n.sub = 1;
    else
      return REJECT;
    break;
  default: /* NU_EXP */
    if (d >= 0 && f->sub < MI_JSON_GRAMMAR_EXP_DIGITS && f->c * 10 + (uint32_t)d <= JG_MAX_EXP)
      n.c = f->c * 10 + (uint32_t)d, n.sub++;
    else
      return num_complete(g, f) ? ENDED : REJECT;
  }
  if ((n.flags & NUMF_BOUNDED) && (n.phase == NU_ZERO || n.phase == NU_INT) &&
      !int_viable((int64_t)n.h, n.a, n.flags & NUMF_NEG, v->imin, v->imax))
    return REJECT;
  push_add(A, out, &n);
  return TAKEN;
}

static int num_start(const mi_json_grammar *g, jg_arena *A, uint32_t parent, uint32_t node, int c,
                     jg_state *out) {
  const jg_node *v = &g->nodes[node];
  jg_frame f = {.parent = parent, .node = node, .kind = F_NUM, .phase = NU_SIGN};
  if (!(v->types & T_NUM)) f.flags |= NUMF_INTONLY;
  if (v->bounded) f.flags |= NUMF_BOUNDED;
  if (c == '-') {
    if (v->bounded && !int_viable(0, 0, 1, v->imin, v->imax)) return 0;
    f.flags |= NUMF_NEG;
    push_add(A, out, &f);
    return 1;
  }
  return num_step(g, A, &f, c, out) == TAKEN; /* a digit: as if after an empty sign */
}

/* ---- strings ---- */

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One byte of a JSON string's body: escapes (\u0000 and unpaired surrogates
 * refused: jansson and many clients reject them), UTF-8 validity (shortest
 * forms, no surrogates, at most U+10FFFF), no raw control characters. */
static int lex_step(jg_frame *n, int c) {
  int h;
  switch (n->phase) {
  case S_NORMAL:
    if (c == '"') return LX_CLOSE;
    if (c == '\\') return n->phase = S_ESC, LX_START;
    if (c < 0x20) return LX_REJECT;
    if (c < 0x80) return LX_START;
    /* a lead byte: how many continuation bytes, and the first one's range */
    if (c >= 0xC2 && c <= 0xDF)
      n->sub = 1, n->b = 0x80 | 0xBF << 8;
    else if (c == 0xE0)
      n->sub = 2, n->b = 0xA0 | 0xBF << 8;
    else if (c == 0xED)
      n->sub = 2, n->b = 0x80 | 0x9F << 8;
    else if (c >= 0xE1 && c <= 0xEF)
      n->sub = 2, n->b = 0x80 | 0xBF << 8;
    else if (c == 0xF0)
      n->sub = 3, n->b = 0x90 | 0xBF << 8;
    else if (c >= 0xF1 && c <= 0xF3)
      n->sub = 3, n->b = 0x80 | 0xBF << 8;
    else if (c == 0xF4)
      n->sub = 3, n->b = 0x80 | 0x8F << 8;
    else
      return LX_REJECT;
    n->phase = S_UTF8;
    return LX_START;
  case S_UTF8:
    if (c < (int)(n->b & 0xFF) || c > (int)(n->b >> 8)) return LX_REJECT;
    n->b = 0x80 | 0xBF << 8;
    if (--n->sub == 0) n->phase = S_NORMAL, n->b = 0;
    return LX_CONT;
  case S_ESC:
    if (c == 'u') return n->phase = S_HEX, n->sub = 0, n->b = 0, LX_CONT;
    if (c && strchr("\"\\/bfnrt", c)) return n->phase = S_NORMAL, LX_CONT;
    return LX_REJECT;
  case S_HEX:
    if ((h = hexval(c)) < 0) return LX_REJECT;
    n->b = n->b * 16 + (uint32_t)h, n->sub++;
    if (n->sub == 2 && n->b >= 0xDC && n->b <= 0xDF) return LX_REJECT; /* a low surrogate alone */
    if (n->sub < 4) return LX_CONT;
    if (n->b == 0) return LX_REJECT;
    n->phase = n->b >= 0xD800 && n->b <= 0xDBFF ? S_LOWBS : S_NORMAL;
    n->sub = 0, n->b = 0;
    return LX_CONT;
  case S_LOWBS: return c == '\\' ? (n->phase = S_LOWU, LX_CONT) : LX_REJECT;
  case S_LOWU: return c == 'u' ? (n->phase = S_LOWHEX, n->sub = 0, LX_CONT) : LX_REJECT;
  default: /* S_LOWHEX: \uDC00-\uDFFF */
    h = hexval(c);
    if (h < 0 || (n->sub == 0 && h != 0xD) || (n->sub == 1 && h < 0xC)) return LX_REJECT;
    if (++n->sub == 4) n->phase = S_NORMAL, n->sub = 0;
    return LX_CONT;
  }
}

static int str_step(const mi_json_grammar *g, jg_arena *A, const jg_frame *f, int c,
                    jg_state *out) {
  const jg_node *v = &g->nodes[f->node];
  jg_frame n = *f;
  switch (lex_step(&n, c)) {
  case LX_CLOSE:
    if (f->a < v->min_len) return REJECT;
    out_add(A, out, value_done(g, A, f->parent));
    return TAKEN;
  case LX_START:
    if (f->a >= v->max_len) return REJECT;
    n.a++;
    break;
  case LX_REJECT: return REJECT;
  }
  push_add(A, out, &n);
  return TAKEN;
}

/* ---- object keys ---- */

static int key_seen(const jg_arena *A, const jg_frame *obj, uint32_t prop, uint64_t h) {
  for (uint32_t r = obj->a; r != JG_NONE;) {
    const jg_frame *k = FR(A, r);
    if (k->a == prop && (prop != JG_NONE || k->h == h)) return 1;
    r = k->parent;
  }
  return 0;
}

static int fits(const mi_json_grammar *g, const jg_frame *obj, uint32_t node) {
  return node != JG_NONE && obj->depth + g->nodes[node].need <= MAXD;
}

/* A declared key the object can still take: not seen, its value fits. */
static int prop_ok(const mi_json_grammar *g, const jg_arena *A, const jg_frame *obj, uint32_t p) {
  return fits(g, obj, g->prop_node[p]) && !key_seen(A, obj, p, 0);
}

static int range_has_ok(const mi_json_grammar *g, const jg_arena *A, const jg_frame *obj,
                        uint32_t lo, uint32_t hi) {
  for (uint32_t p = lo; p < hi; p++)
    if (prop_ok(g, A, obj, p)) return 1;
  return 0;
}

/* May the object take a key not in "properties" (written freely)? Only once
 * its required keys are in: a model with random weights that could write
 * free keys first would find a required one by chance about never (each byte
 * of it among ~150k tokens), so it would run to the extra-key cap before
 * ending. Required keys first is an order valid JSON allows anyway. */
static int free_ok(const mi_json_grammar *g, const jg_frame *obj) {
  const jg_node *v = &g->nodes[obj->node];
  return obj->c == v->nreq && obj->sub < MI_JSON_GRAMMAR_EXTRA_KEYS && fits(g, obj, v->addl);
}

static int more_keys(const mi_json_grammar *g, const jg_arena *A, const jg_frame *obj) {
  const jg_node *v = &g->nodes[obj->node];
  return free_ok(g, obj) || range_has_ok(g, A, obj, v->prop_first, v->prop_first + v->prop_n);
}

static int key_start(const mi_json_grammar *g, jg_arena *A, uint32_t t, const jg_frame *obj,
                     jg_state *out) {
  const jg_node *v = &g->nodes[obj->node];
  int fr = free_ok(g, obj);
  if (!fr && !range_has_ok(g, A, obj, v->prop_first, v->prop_first + v->prop_n)) return REJECT;
  jg_frame k = {.parent = t,
                .node = obj->node,
                .kind = F_STR,
                .phase = S_NORMAL,
                .flags = (uint8_t)(STRF_KEY | (fr ? STRF_FREE : 0)),
                .a = v->prop_first,
                .c = v->prop_first + v->prop_n,
                .d = 1,
                .h = FNV_BASIS};
  push_add(A, out, &k);
  return TAKEN;
}

/* The key is complete: record it and wait for ':'. prop: its declared index,
 * or JG_NONE for another key (hash h). */
static int key_close(const mi_json_grammar *g, jg_arena *A, const jg_frame *key, uint32_t prop,
                     uint64_t h, jg_state *out) {
  jg_frame o = *FR(A, key->parent);
  jg_frame rec = {.parent = o.a, .kind = F_KEYREC, .a = prop, .h = prop == JG_NONE ? h : 0};
  uint32_t ri = push(A, &rec);
  if (ri == JG_NONE) return REJECT;
  o.a = ri, o.phase = O_COLON, o.ws = 0;
  if (prop != JG_NONE)
    o.b = g->prop_node[prop], o.c += g->prop_req[prop];
  else
    o.b = g->nodes[o.node].addl, o.sub++;
  push_add(A, out, &o);
  return TAKEN;
}

/* A key: matched against the declared keys (a run of candidates narrowing
 * byte by byte) and, where the object takes other keys, as a free string
 * without escapes (so a free key equals a declared one only byte for byte;
 * after a backslash only declared keys remain). */
static int key_step(const mi_json_grammar *g, jg_arena *A, const jg_frame *f, int c,
                    jg_state *out) {
  const jg_frame obj_copy = *FR(A, f->parent), *obj = &obj_copy; /* A->buf may move */
  uint32_t lo = f->a, hi = f->c;
  if (lo < hi) narrow(g, g->prop_key, &lo, &hi, f->d, c);
  if (lo < hi && g->prop_key[lo].len == f->d + 1) /* a declared key, complete */
    return prop_ok(g, A, obj, lo) ? key_close(g, A, f, lo, 0, out) : REJECT;
  jg_frame n = *f;
  n.a = lo, n.c = hi, n.d = f->d + 1;
  if ((f->flags & STRF_FREE) && c != '\\') {
    int r = lex_step(&n, c);
    if (r == LX_REJECT) return REJECT;
    if (r == LX_CLOSE)
      return key_seen(A, obj, JG_NONE, f->h) ? REJECT : key_close(g, A, f, JG_NONE, f->h, out);
    n.h = (f->h ^ (uint64_t)c) * FNV_PRIME;
  } else {
    n.flags &= (uint8_t)~STRF_FREE;
    if (!range_has_ok(g, A, obj, lo, hi)) return REJECT;
  }
  push_add(A, out, &n);
  return TAKEN;
}

/* ---- values and containers ---- */

/* A value of node starts with byte c, under a container at depth: one parse
 * per VALUE node of its closure that can start so. Returns TAKEN or REJECT. */
static int value_start(const mi_json_grammar *g, jg_arena *A, uint32_t parent, unsigned depth,
                       uint32_t node, int c, jg_state *out) {
  const jg_node *nn = &g->nodes[node];
  int any = 0;
  for (uint32_t k = 0; k < nn->clo_n; k++) {
    uint32_t vid = g->ids[nn->clo_first + k];
    const jg_node *v = &g->nodes[vid];
    if (v->lit_first != JG_NONE) {
      any |= lit_start(g, A, parent, vid, v->lit_first, v->lit_first + v->lit_n, c, out);
      continue;
    }
    jg_frame f = {
        .parent = parent, .node = vid, .depth = (uint8_t)(depth + 1), .a = JG_NONE, .b = JG_NONE};
    if (c == '{' && (v->types & T_OBJ) && depth + v->need_obj <= MAXD) {
      f.kind = F_OBJ, f.phase = O_OPEN, f.c = 0, f.d = 0;
      any |= push_add(A, out, &f) != JG_NONE;
    } else if (c == '[' && (v->types & T_ARR) && depth + v->need_arr <= MAXD) {
      f.kind = F_ARR, f.phase = A_OPEN, f.a = 0, f.b = 0;
      any |= push_add(A, out, &f) != JG_NONE;
    } else if (c == '"' && (v->types & T_STR)) {
      jg_frame s = {.parent = parent, .node = vid, .kind = F_STR, .phase = S_NORMAL};
      any |= push_add(A, out, &s) != JG_NONE;
    } else if ((c == 't' || c == 'f') && (v->types & T_BOOL)) {
      any |= lit_start(g, A, parent, vid, g->lit_bool, g->lit_bool + 2, c, out);
    } else if (c == 'n' && (v->types & T_NULL)) {
      any |= lit_start(g, A, parent, vid, g->lit_null, g->lit_null + 1, c, out);
    } else if ((c == '-' || (c >= '0' && c <= '9')) && (v->types & (T_INT | T_NUM))) {
      any |= num_start(g, A, parent, vid, c, out);
    }
  }
  return any ? TAKEN : REJECT;
}

static int obj_step(const mi_json_grammar *g, jg_arena *A, uint32_t t, const jg_frame *f, int c,
                    jg_state *out) {
  int r = take_ws(A, f, c, out);
  if (r >= 0) return r;
  const jg_node *v = &g->nodes[f->node];
  jg_frame n = *f;
  if (c == '}' && (f->phase == O_OPEN || f->phase == O_AFTER)) {
    if (f->c < v->nreq) return REJECT; /* a required key is missing */
    out_add(A, out, value_done(g, A, f->parent));
    return TAKEN;
  }
  switch (f->phase) {
  case O_OPEN:
  case O_COMMA: return c == '"' ? key_start(g, A, t, f, out) : REJECT;
  case O_AFTER:
    if (c != ',' || !more_keys(g, A, f)) return REJECT;
    n.phase = O_COMMA, n.ws = 0;
    break;
  case O_COLON:
    if (c != ':') return REJECT;
    n.phase = O_VALUE, n.ws = 0;
    break;
  default: /* O_VALUE */ return value_start(g, A, t, f->depth, f->b, c, out);
  }
  push_add(A, out, &n);
  return TAKEN;
}

static uint32_t item_node(const mi_json_grammar *g, const jg_node *v, uint32_t i) {
  return i < v->pre_n ? g->ids[v->pre_first + i] : v->items;
}

static int arr_step(const mi_json_grammar *g, jg_arena *A, uint32_t t, const jg_frame *f, int c,
                    jg_state *out) {
  int r = take_ws(A, f, c, out);
  if (r >= 0) return r;
  const jg_node *v = &g->nodes[f->node];
  if (f->phase == A_AFTER || (f->phase == A_OPEN && c == ']')) {
    if (c == ']') {
      if (f->a < v->min_items) return REJECT;
      out_add(A, out, value_done(g, A, f->parent));
      return TAKEN;
    }
    uint32_t it = f->a < v->max_items ? item_node(g, v, f->a) : JG_NONE;
    if (c != ',' || !fits(g, f, it)) return REJECT;
    jg_frame n = *f;
    n.phase = A_COMMA, n.ws = 0;
    push_add(A, out, &n);
    return TAKEN;
  }
  /* A_OPEN or A_COMMA: an item */
  uint32_t it = f->a < v->max_items ? item_node(g, v, f->a) : JG_NONE;
  if (it == JG_NONE) return REJECT;
  return value_start(g, A, t, f->depth, it, c, out);
}

/* Feeds c to one parse (top frame t), adding what follows to out. A number
 * or enum value that could have gone on ends where c cannot extend it; its
 * container then takes c. */
static void thread_feed(const mi_json_grammar *g, jg_arena *A, uint32_t t, int c, jg_state *out) {
  while (t != JG_NONE) {
    jg_frame f = *FR(A, t);
    int r = REJECT;
    switch (f.kind) {
    case F_ROOT:
      r = f.phase == R_VALUE                            ? value_start(g, A, t, 0, g->root, c, out)
          : f.phase == R_PREFIX || f.phase == R_SUFFIX ? root_literal_step(g, A, &f, c, out)
                                                       : REJECT;
      break;
    case F_OBJ: r = obj_step(g, A, t, &f, c, out); break;
    case F_ARR: r = arr_step(g, A, t, &f, c, out); break;
    case F_STR:
      r = f.flags & STRF_KEY ? key_step(g, A, &f, c, out) : str_step(g, A, &f, c, out);
      break;
    case F_LIT: r = lit_step(g, A, &f, c, out); break;
    case F_NUM: r = num_step(g, A, &f, c, out); break;
    }
    if (r != ENDED) return;
    t = value_done(g, A, f.parent);
  }
}

int jg_state_feed(const mi_json_grammar *g, jg_arena *A, const jg_state *in, int c, jg_state *out) {
  out->n = 0;
  for (uint32_t i = 0; i < in->n; i++)
    thread_feed(g, A, in->top[i], c, out);
  return out->n && !A->oom ? 0 : -1;
}

int jg_state_can_end(const mi_json_grammar *g, const jg_arena *A, const jg_state *s) {
  for (uint32_t i = 0; i < s->n; i++) {
    const jg_frame *f = FR(A, s->top[i]);
    if (f->kind == F_ROOT && f->phase == R_DONE) return 1;
    int done = (f->kind == F_NUM && num_complete(g, f)) || (f->kind == F_LIT && lit_complete(g, f));
    if (done && FR(A, f->parent)->kind == F_ROOT && !g->suffix_len) return 1;
  }
  return 0;
}

/* When every parse is in the body of a string that takes any further text
 * without '"', '\\' or control characters up to the same number of code
 * points (a value string: maxLength less those written; a key written
 * freely: no limit, JG_NONE), that number; else -1. The token mask then
 * decides "plain" tokens by their length alone, without feeding them. */
int64_t jg_state_plain_budget(const mi_json_grammar *g, const jg_arena *A, const jg_state *s) {
  int64_t budget = -1;
  for (uint32_t i = 0; i < s->n; i++) {
    const jg_frame *f = FR(A, s->top[i]);
    if (f->kind != F_STR || f->phase != S_NORMAL) return -1;
    int64_t b;
    if (f->flags & STRF_KEY) {
      if (!(f->flags & STRF_FREE)) return -1;
      b = JG_NONE;
    } else {
      uint32_t mx = g->nodes[f->node].max_len;
      b = mx == JG_NONE ? JG_NONE : mx - f->a;
    }
    if (i && b != budget) return -1;
    budget = b;
  }
  return budget;
}

/* ---- the matcher ---- */

mi_json_matcher *mi_json_matcher_new(const mi_json_grammar *g) {
  if (!g) return NULL;
  mi_json_matcher *m = calloc(1, sizeof *m);
  if (!m || !(m->frames = calloc(1, sizeof *m->frames))) {
    free(m);
    return NULL;
  }
  m->g = g;
  m->frames[0] = (jg_frame){.parent = JG_NONE, .kind = F_ROOT,
                            .phase = g->prefix_len ? R_PREFIX : R_VALUE};
  m->n_frames = 1;
  m->st.n = 1;
  m->st.top[0] = 0;
  return m;
}

void mi_json_matcher_free(mi_json_matcher *m) {
  if (!m) return;
  free(m->frames);
  free(m);
}

mi_json_matcher *mi_json_matcher_clone(const mi_json_matcher *m) {
  mi_json_matcher *c = m ? malloc(sizeof *c) : NULL;
  if (!c) return NULL;
  *c = *m;
  c->frames = malloc((size_t)m->n_frames * sizeof *c->frames);
  if (!c->frames) {
    free(c);
    return NULL;
  }
  memcpy(c->frames, m->frames, (size_t)m->n_frames * sizeof *c->frames);
  return c;
}

/* Feeds n bytes into A from the matcher's state; 0 with *s the result. */
static int feed_bytes(const mi_json_matcher *m, jg_arena *A, const unsigned char *b, size_t n,
                      jg_state *s) {
  *s = m->st;
  for (size_t i = 0; i < n; i++) {
    jg_state next;
    if (jg_state_feed(m->g, A, s, b[i], &next)) return -1;
    *s = next;
  }
  return 0;
}

int mi_json_matcher_can_feed(const mi_json_matcher *m, const unsigned char *b, size_t n) {
  if (!m || (!b && n)) return 0;
  jg_frame local[256];
  jg_arena A;
  jg_state s;
  jg_arena_init(&A, m, local, 256);
  int ok = feed_bytes(m, &A, b, n, &s) == 0;
  jg_arena_free(&A);
  return ok;
}

/* Copies frame idx and those below it (and an object's key records) into
 * dst once each; map: old index -> new (JG_NONE: not yet). chain: scratch
 * for the not-yet-copied run below idx. */
static uint32_t relocate(const jg_arena *A, uint32_t *map, jg_frame *dst, uint32_t *ndst,
                         uint32_t *chain, uint32_t total, uint32_t idx) {
  uint32_t n = 0;
  for (uint32_t i = idx; i != JG_NONE && map[i] == JG_NONE; i = FR(A, i)->parent)
    chain[n++] = i;
  while (n--) {
    jg_frame f = *FR(A, chain[n]);
    if (f.parent != JG_NONE) f.parent = map[f.parent];
    /* key records hold no object: their run uses the chain's upper half and ends there */
    if (f.kind == F_OBJ && f.a != JG_NONE) f.a = relocate(A, map, dst, ndst, chain + total, 0, f.a);
    map[chain[n]] = *ndst;
    dst[(*ndst)++] = f;
  }
  return map[idx];
}

/* The matcher's frames become just those its state reaches (a long
 * generation would otherwise keep every frame it ever made). */
static int compact(mi_json_matcher *m, const jg_arena *A, jg_state *s) {
  uint32_t total = A->nbase + A->len;
  uint32_t *map = malloc((size_t)total * 3 * sizeof *map);
  jg_frame *dst = malloc((size_t)total * sizeof *dst);
  if (!map || !dst) {
    free(map), free(dst);
    return -1;
  }
  memset(map, 0xFF, (size_t)total * sizeof *map);
  uint32_t nd = 0;
  for (uint32_t i = 0; i < s->n; i++)
    s->top[i] = relocate(A, map, dst, &nd, map + total, total, s->top[i]);
  free(map);
  jg_frame *shrunk = realloc(dst, (size_t)(nd ? nd : 1) * sizeof *dst);
  free(m->frames);
  m->frames = shrunk ? shrunk : dst;
  m->n_frames = nd;
  m->st = *s;
  return 0;
}

int mi_json_matcher_feed(mi_json_matcher *m, const unsigned char *b, size_t n) {
  if (!m || (!b && n)) return -1;
  jg_frame local[256];
  jg_arena A;
  jg_state s;
  jg_arena_init(&A, m, local, 256);
  int rc = feed_bytes(m, &A, b, n, &s) == 0 && compact(m, &A, &s) == 0 ? 0 : -1;
  jg_arena_free(&A);
  return rc;
}

int mi_json_matcher_can_end(const mi_json_matcher *m) {
  if (!m) return 0;
  jg_arena A;
  jg_arena_init(&A, m, NULL, 0);
  return jg_state_can_end(m->g, &A, &m->st);
}

int mi_json_matcher_must_end(const mi_json_matcher *m) {
  if (!mi_json_matcher_can_end(m)) return 0;
  jg_frame local[64];
  jg_arena A;
  jg_arena_init(&A, m, local, 64);
  int any = 0;
  for (int c = 0; c < 256 && !any; c++) {
    jg_state next;
    A.len = 0;
    any = jg_state_feed(m->g, &A, &m->st, c, &next) == 0;
  }
  jg_arena_free(&A);
  return !any;
}
