/* core/template/lex.c — template text to tokens.
 *
 * Whitespace as transformers (Jinja2 with trim_blocks and lstrip_blocks) and
 * @huggingface/jinja render it: one trailing '\n' of the template dropped;
 * spaces and tabs before a "{%" or "{#" that starts a line dropped; the '\n'
 * right after "%}" or "#}" dropped; "{%-" / "{{-" / "{#-" strip the
 * whitespace before, "-%}" / "-}}" / "-#}" the whitespace after. Positions
 * are reported in the original text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/template/jinja_int.h"

typedef struct {
  jarena *a;
  char *s; /* preprocessed text */
  size_t n;
  size_t *orig; /* preprocessed offset -> original offset */
  const char *src;
  jtok *t;
  size_t nt, capt;
  size_t cur;
  int cline, ccol; /* position cursor: tokens come in order */
  char *err;
  size_t el;
} L;

static void pos_of(L *l, size_t off, int *line, int *col) {
  size_t o = off < l->n ? l->orig[off] : (l->n ? l->orig[l->n - 1] + 1 : 0);
  if (o < l->cur) {
    l->cur = 0;
    l->cline = 1;
    l->ccol = 1;
  }
  for (; l->cur < o; l->cur++) {
    if (l->src[l->cur] == '\n') {
      l->cline++;
      l->ccol = 1;
    } else if (((unsigned char)l->src[l->cur] & 0xC0) != 0x80)
      l->ccol++;
  }
  *line = l->cline;
  *col = l->ccol;
}

static int lfail(L *l, size_t off, const char *msg, const char *arg) {
  int line, col;
  pos_of(l, off, &line, &col);
  snprintf(l->err, l->el, "line %d col %d: %s%s", line, col, msg, arg ? arg : "");
  return -1;
}

static jtok *push(L *l, jtok_type t, size_t off) {
  if (l->nt == l->capt) {
    size_t c = l->capt ? l->capt * 2 : 64;
    jtok *q = ja_alloc(l->a, c * sizeof *q);
    if (!q) return NULL;
    if (l->nt) memcpy(q, l->t, l->nt * sizeof *q);
    l->t = q;
    l->capt = c;
  }
  jtok *k = &l->t[l->nt++];
  memset(k, 0, sizeof *k);
  k->t = t;
  pos_of(l, off, &k->line, &k->col);
  return k;
}

static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static int is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static int is_digit(char c) {
  return c >= '0' && c <= '9';
}

static void rstrip_last_text(L *l) {
  if (!l->nt || l->t[l->nt - 1].t != T_TEXT) return;
  jtok *k = &l->t[l->nt - 1];
  while (k->s.n && is_ws(k->s.s[k->s.n - 1]))
    k->s.n--;
  if (!k->s.n) l->nt--;
}

static void put_utf8(char *o, size_t *on, unsigned cp) {
  if (cp < 0x80)
    o[(*on)++] = (char)cp;
  else if (cp < 0x800) {
    o[(*on)++] = (char)(0xC0 | cp >> 6);
    o[(*on)++] = (char)(0x80 | (cp & 63));
  } else {
    o[(*on)++] = (char)(0xE0 | cp >> 12);
    o[(*on)++] = (char)(0x80 | ((cp >> 6) & 63));
    o[(*on)++] = (char)(0x80 | (cp & 63));
  }
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The template text as lexed: one trailing '\n' dropped, lstrip_blocks
 * (blanks before a "{%" or "{#" that starts a line) and trim_blocks (the
 * '\n' after "%}" or "#}") applied, each byte's original offset kept. */
static int preprocess(L *l, const char *src, size_t len) {
  if (len && src[len - 1] == '\n') len--;
  l->s = ja_alloc(l->a, len + 1);
  l->orig = ja_alloc(l->a, (len + 1) * sizeof *l->orig);
  if (!l->s || !l->orig) {
    snprintf(l->err, l->el, "line 1 col 1: out of memory");
    return -1;
  }
  for (size_t i = 0; i < len;) {
    if (i == 0 || src[i - 1] == '\n') {
      size_t j = i;
      while (j < len && (src[j] == ' ' || src[j] == '\t'))
        j++;
      if (j + 1 < len && src[j] == '{' &&
          (src[j + 1] == '%' || src[j + 1] == '#' || src[j + 1] == '-'))
        i = j;
    }
    if (i + 2 < len && (src[i] == '%' || src[i] == '#' || src[i] == '-') && src[i + 1] == '}' &&
        src[i + 2] == '\n') {
      l->orig[l->n] = i;
      l->s[l->n++] = src[i];
      l->orig[l->n] = i + 1;
      l->s[l->n++] = '}';
      i += 3;
      continue;
    }
    l->orig[l->n] = i;
    l->s[l->n++] = src[i++];
  }
  l->s[l->n] = 0;
  return 0;
}

/* Outside a tag at *p: text up to the next "{%", "{{" or "{#", a comment,
 * or the opening of a tag (its kind into *close). */
static int lex_outside(L *l, size_t *pp, int *in_tag, int *curly, jtok_type *close) {
  const char *s = l->s;
  size_t n = l->n, p = *pp;
  size_t q = p;
  while (q < n && !(s[q] == '{' && q + 1 < n && (s[q + 1] == '%' || s[q + 1] == '{' || s[q + 1] == '#')))
    q++;
  if (q > p) {
    jtok *k = push(l, T_TEXT, p);
    if (!k) return lfail(l, p, "out of memory", NULL);
    k->s = (jstr){s + p, q - p};
    *pp = q;
    return 0;
  }
  if (s[p + 1] == '#') {
    size_t st = p;
    p += 2;
    int strip_before = p < n && s[p] == '-';
    while (p + 1 < n && !(s[p] == '#' && s[p + 1] == '}'))
      p++;
    if (p + 1 >= n) return lfail(l, st, "comment not closed: missing '#}'", NULL);
    int strip_after = s[p - 1] == '-' && p - 1 > st + 1 + (size_t)strip_before;
    if (strip_before) rstrip_last_text(l);
    p += 2;
    if (strip_after)
      while (p < n && is_ws(s[p]))
        p++;
    *pp = p;
    /* a comment ends text like a tag does: "{%-" after it strips nothing before it */
    if (!push(l, T_COMMENT, st)) return lfail(l, p, "out of memory", NULL);
    return 0;
  }
  int stmt = s[p + 1] == '%';
  int strip = p + 2 < n && s[p + 2] == '-';
  if (strip) rstrip_last_text(l);
  if (!push(l, stmt ? T_OPEN_STMT : T_OPEN_EXPR, p))
    return lfail(l, p, "out of memory", NULL);
  *close = stmt ? T_CLOSE_STMT : T_CLOSE_EXPR;
  *pp = p + 2 + strip;
  *in_tag = 1;
  *curly = 0;
  return 0;
}

/* A string literal at *p, Python's escapes decoded. */
static int lex_string(L *l, size_t *pp) {
  const char *s = l->s;
  size_t n = l->n, p = *pp;
  char c = s[p];
  size_t st = p++;
  char *o = ja_alloc(l->a, n - p + 1);
  if (!o) return lfail(l, st, "out of memory", NULL);
  size_t on = 0;
  while (p < n && s[p] != c) {
    if (s[p] == '\\' && p + 1 < n) {
      char e = s[p + 1];
      p += 2;
      switch (e) {
      case 'n': o[on++] = '\n'; break;
      case 't': o[on++] = '\t'; break;
      case 'r': o[on++] = '\r'; break;
      case 'b': o[on++] = '\b'; break;
      case 'f': o[on++] = '\f'; break;
      case 'v': o[on++] = '\v'; break;
      case '0': o[on++] = '\0'; break;
      case '\\':
      case '\'':
      case '"': o[on++] = e; break;
      case 'x':
      case 'u': {
        int k = e == 'x' ? 2 : 4;
        unsigned cp = 0;
        for (int j = 0; j < k; j++) {
          int h = p + (size_t)j < n ? hexval(s[p + j]) : -1;
          if (h < 0) return lfail(l, p - 2, "invalid escape in string literal", NULL);
          cp = cp * 16 + (unsigned)h;
        }
        p += (size_t)k;
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
        put_utf8(o, &on, cp);
        break;
      }
      default:
        o[on++] = '\\';
        o[on++] = e;
        break; /* Python keeps unknown escapes */
      }
    } else
      o[on++] = s[p++];
  }
  if (p >= n) return lfail(l, st, "string literal not closed", NULL);
  p++;
  *pp = p;
  jtok *k = push(l, T_STR, st);
  if (!k) return lfail(l, st, "out of memory", NULL);
  k->s = (jstr){o, on};
  return 0;
}

/* An integer or float literal at *p ('_' separators allowed; "x.1" after a
 * '.' is attribute access, not a float). */
static int lex_number(L *l, size_t *pp) {
  const char *s = l->s;
  size_t n = l->n, p = *pp;
  size_t st = p;
  while (p < n && (is_digit(s[p]) || s[p] == '_'))
    p++;
  int flt = 0;
  if (p + 1 < n && s[p] == '.' && is_digit(s[p + 1]) &&
      !(l->nt && l->t[l->nt - 1].t == T_OP && l->t[l->nt - 1].s.s[0] == '.')) {
    flt = 1;
    p++;
    while (p < n && is_digit(s[p]))
      p++;
  }
  if (p < n && (s[p] == 'e' || s[p] == 'E') && p + 1 < n &&
      (is_digit(s[p + 1]) ||
       ((s[p + 1] == '-' || s[p + 1] == '+') && p + 2 < n && is_digit(s[p + 2])))) {
    flt = 1;
    p += 2;
    while (p < n && is_digit(s[p]))
      p++;
  }
  *pp = p;
  char num[64];
  size_t k = 0;
  for (size_t j = st; j < p && k + 1 < sizeof num; j++)
    if (s[j] != '_') num[k++] = s[j];
  num[k] = 0;
  jtok *t = push(l, flt ? T_FLOAT : T_INT, st);
  if (!t) return lfail(l, st, "out of memory", NULL);
  if (flt)
    t->f = strtod(num, NULL);
  else {
    char *end;
    errno = 0;
    t->i = strtoll(num, &end, 10);
    if (errno || p - st > 19) return lfail(l, st, "integer literal too large", NULL);
  }
  return 0;
}

/* An operator at *p (two characters before one), counting braces. */
static int lex_op(L *l, size_t *pp, int *curly) {
  const char *s = l->s;
  size_t n = l->n, p = *pp;
  char c = s[p];
  static const char *ops2[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
  size_t ol = 0;
  for (int j = 0; ops2[j]; j++)
    if (p + 1 < n && s[p] == ops2[j][0] && s[p + 1] == ops2[j][1]) ol = 2;
  if (!ol && strchr("+-*/%~<>()[]{},.:|=", c)) ol = 1;
  if (!ol) {
    char b[8];
    snprintf(b, sizeof b, (unsigned char)c < 32 || (unsigned char)c > 126 ? "\\x%02x'" : "%c'",
             (unsigned char)c);
    return lfail(l, p, "unexpected character '", b);
  }
  if (c == '{') (*curly)++;
  if (c == '}' && *curly > 0) (*curly)--;
  jtok *k = push(l, T_OP, p);
  if (!k) return lfail(l, p, "out of memory", NULL);
  k->s = (jstr){s + p, ol};
  *pp = p + ol;
  return 0;
}

int jlex(jarena *a, const char *src, size_t len, jtok **toks, size_t *ntok, char *err, size_t el) {
  L l = {.a = a, .src = src, .err = err, .el = el, .cline = 1, .ccol = 1};
  if (preprocess(&l, src, len)) return -1;
  const char *s = l.s;
  size_t n = l.n, p = 0;
  int in_tag = 0, curly = 0;
  jtok_type close = T_CLOSE_EXPR;
  while (p < n) {
    if (!in_tag) {
      if (lex_outside(&l, &p, &in_tag, &curly, &close)) return -1;
      continue;
    }
    while (p < n && is_ws(s[p]))
      p++;
    if (p >= n) break;
    const char *cl = close == T_CLOSE_STMT ? "%}" : "}}";
    int dash = s[p] == '-' && p + 2 < n && s[p + 1] == cl[0] && s[p + 2] == cl[1];
    if (dash ||
        (s[p] == cl[0] && p + 1 < n && s[p + 1] == '}' && (close == T_CLOSE_STMT || curly == 0))) {
      if (!push(&l, close, p)) return lfail(&l, p, "out of memory", NULL);
      p += 2 + dash;
      if (dash)
        while (p < n && is_ws(s[p]))
          p++;
      in_tag = 0;
      continue;
    }
    char c = s[p];
    int rc;
    if (c == '\'' || c == '"') rc = lex_string(&l, &p);
    else if (is_digit(c)) rc = lex_number(&l, &p);
    else if (is_word(c)) {
      size_t st = p;
      while (p < n && is_word(s[p]))
        p++;
      jtok *k = push(&l, T_NAME, st);
      if (!k) return lfail(&l, st, "out of memory", NULL);
      k->s = (jstr){s + st, p - st};
      rc = 0;
    } else
      rc = lex_op(&l, &p, &curly);
    if (rc) return -1;
  }
  if (in_tag) return lfail(&l, n, close == T_CLOSE_STMT ? "missing '%}'" : "missing '}}'", NULL);
  if (!push(&l, T_EOF, n)) return lfail(&l, n, "out of memory", NULL);
  *toks = l.t;
  *ntok = l.nt;
  return 0;
}

void jerr_v(int *failed, char *err, size_t el, int line, int col, const char *fmt, va_list ap) {
  if (*failed) return;
  *failed = 1;
  char msg[400];
  vsnprintf(msg, sizeof msg, fmt, ap);
  for (char *c = msg; *c; c++)
    if (*c == '\n' || *c == '\r') *c = ' ';
  if (line >= 0) snprintf(err, el, "line %d col %d: %s", line, col, msg);
  else snprintf(err, el, "%s", msg);
}
