/* core/template/value.c — values: making them, from JSON, truth, equality,
 * printing ({{ v }}) and tojson (Python's json.dumps, as transformers' tojson). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/template/jinja_int.h"

jv jv_undef = {.t = V_UNDEF}, jv_none = {.t = V_NONE}, jv_true = {.t = V_BOOL, .b = 1},
   jv_false = {.t = V_BOOL, .b = 0};

static jv *jnew(jrender *r, jvtype t) {
  jv *v = ja_alloc(&r->a, sizeof *v);
  if (!v)
    return jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
  v->t = t;
  return v;
}
jv *jv_int(jrender *r, long long i) {
  jv *v = jnew(r, V_INT);
  if (v) v->i = i;
  return v;
}
jv *jv_float(jrender *r, double f) {
  jv *v = jnew(r, V_FLOAT);
  if (v) v->f = f;
  return v;
}
jv *jv_str(jrender *r, const char *s, size_t n) {
  jv *v = jnew(r, V_STR);
  if (!v) return NULL;
  char *c = ja_strndup(&r->a, s, n);
  if (!c)
    return jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
  v->s = (jstr){c, n};
  return v;
}
jv *jv_strc(jrender *r, const char *s) {
  return jv_str(r, s, strlen(s));
}
jv *jv_list(jrender *r, size_t n) {
  jv *v = jnew(r, V_LIST);
  if (!v) return NULL;
  if (n) {
    if (n > ((size_t)1 << 40) / sizeof(jv *) || !(v->l.a = ja_alloc(&r->a, n * sizeof(jv *))))
      return jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
  }
  v->l.n = n;
  return v;
}
jv *jv_dict(jrender *r) {
  return jnew(r, V_DICT);
}

jv *jv_dict_get(const jv *d, const char *k, size_t kn) {
  for (size_t i = 0; i < d->d.n; i++)
    if (d->d.k[i].n == kn && !memcmp(d->d.k[i].s, k, kn)) return d->d.v[i];
  return NULL;
}
int jv_dict_set(jrender *r, jv *d, const char *k, size_t kn, jv *v) {
  for (size_t i = 0; i < d->d.n; i++)
    if (d->d.k[i].n == kn && !memcmp(d->d.k[i].s, k, kn)) {
      d->d.v[i] = v;
      return 0;
    }
  if (d->d.n == d->d.cap) {
    size_t c = d->d.cap ? d->d.cap * 2 : 4;
    jstr *nk = ja_alloc(&r->a, c * sizeof *nk);
    jv **nv = ja_alloc(&r->a, c * sizeof *nv);
    if (!nk || !nv) {
      jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
      return -1;
    }
    if (d->d.n) {
      memcpy(nk, d->d.k, d->d.n * sizeof *nk);
      memcpy(nv, d->d.v, d->d.n * sizeof *nv);
    }
    d->d.k = nk;
    d->d.v = nv;
    d->d.cap = c;
  }
  char *kc = ja_strndup(&r->a, k, kn);
  if (!kc) {
    jfail(r, NULL, "memory limit: the template made over %zu bytes of values", r->a.cap);
    return -1;
  }
  d->d.k[d->d.n] = (jstr){kc, kn};
  d->d.v[d->d.n++] = v;
  return 0;
}

jv *jv_from_json(jrender *r, const json_t *j, int depth) {
  if (depth > 200) return jfail(r, NULL, "a variable nests over 200 levels");
  switch (json_typeof(j)) {
  case JSON_NULL: return &jv_none;
  case JSON_TRUE: return &jv_true;
  case JSON_FALSE: return &jv_false;
  case JSON_INTEGER: return jv_int(r, (long long)json_integer_value(j));
  case JSON_REAL: return jv_float(r, json_real_value(j));
  case JSON_STRING: return jv_str(r, json_string_value(j), json_string_length(j));
  case JSON_ARRAY: {
    jv *l = jv_list(r, json_array_size(j));
    if (!l) return NULL;
    for (size_t i = 0; i < l->l.n; i++)
      if (!(l->l.a[i] = jv_from_json(r, json_array_get(j, i), depth + 1))) return NULL;
    return l;
  }
  case JSON_OBJECT: {
    jv *d = jv_dict(r);
    if (!d) return NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v) {
      jv *x = jv_from_json(r, v, depth + 1);
      if (!x || jv_dict_set(r, d, k, strlen(k), x)) return NULL;
    }
    return d;
  }
  }
  return &jv_undef;
}

int jv_truthy(const jv *v) {
  switch (v->t) {
  case V_UNDEF:
  case V_NONE: return 0;
  case V_BOOL: return v->b;
  case V_INT: return v->i != 0;
  case V_FLOAT: return v->f != 0;
  case V_STR: return v->s.n > 0;
  case V_LIST: return v->l.n > 0;
  case V_DICT: return v->d.n > 0;
  default: return 1;
  }
}

static int numeric(const jv *v, double *d) {
  if (v->t == V_INT) {
    *d = (double)v->i;
    return 1;
  }
  if (v->t == V_FLOAT) {
    *d = v->f;
    return 1;
  }
  if (v->t == V_BOOL) {
    *d = v->b;
    return 1;
  }
  return 0;
}

/* Jinja == : numbers by value (booleans count as 0/1), strings by bytes,
 * none and undefined alike; lists and dicts element-wise (Python). */
int jv_equal(const jv *a, const jv *b) {
  if (a == b) return 1;
  double x, y;
  if (a->t == V_INT && b->t == V_INT) return a->i == b->i;
  if (numeric(a, &x) && numeric(b, &y)) return x == y;
  int an = a->t == V_NONE || a->t == V_UNDEF, bn = b->t == V_NONE || b->t == V_UNDEF;
  if (an || bn) return an && bn;
  if (a->t != b->t) return 0;
  switch (a->t) {
  case V_STR: return a->s.n == b->s.n && !memcmp(a->s.s, b->s.s, a->s.n);
  case V_LIST:
    if (a->l.n != b->l.n) return 0;
    for (size_t i = 0; i < a->l.n; i++)
      if (!jv_equal(a->l.a[i], b->l.a[i])) return 0;
    return 1;
  case V_DICT:
    if (a->d.n != b->d.n) return 0;
    for (size_t i = 0; i < a->d.n; i++) {
      jv *o = jv_dict_get(b, a->d.k[i].s, a->d.k[i].n);
      if (!o || !jv_equal(a->d.v[i], o)) return 0;
    }
    return 1;
  default: return 0;
  }
}

const char *jv_type_name(const jv *v) {
  static const char *names[] = {"undefined", "none", "boolean",   "integer",  "float", "string",
                                "list",      "dict", "namespace", "function", "macro", "loop"};
  if (v->t == V_LIST && v->tuple) return "tuple";
  return names[v->t];
}

/* Python repr(float): the shortest digits that read back, fixed notation for
 * exponents -4..15, else d.ddde+XX */
void j_float_repr(double f, char *out, size_t n) {
  if (isnan(f)) {
    snprintf(out, n, "nan");
    return;
  }
  if (isinf(f)) {
    snprintf(out, n, f < 0 ? "-inf" : "inf");
    return;
  }
  char buf[40];
  int prec = 1;
  for (; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
    if (strtod(buf, NULL) == f) break;
  }
  /* buf: [-]d[.ddd]e[+-]XX */
  char digits[24];
  size_t nd = 0;
  const char *q = buf;
  int neg = 0;
  if (*q == '-') {
    neg = 1;
    q++;
  }
  for (; *q && *q != 'e'; q++)
    if (*q != '.') digits[nd++] = *q;
  digits[nd] = 0;
  int ex = atoi(q + 1);
  while (nd > 1 && digits[nd - 1] == '0')
    digits[--nd] = 0;
  char res[64];
  size_t k = 0;
  if (neg) res[k++] = '-';
  if (ex >= -4 && ex < 16) {
    if (ex < 0) {
      res[k++] = '0';
      res[k++] = '.';
      for (int i = -1; i > ex; i--)
        res[k++] = '0';
      for (size_t i = 0; i < nd; i++)
        res[k++] = digits[i];
    } else {
      for (int i = 0; i <= ex; i++)
        res[k++] = (size_t)i < nd ? digits[i] : '0';
      res[k++] = '.';
      if ((size_t)ex + 1 < nd)
        for (size_t i = (size_t)ex + 1; i < nd; i++)
          res[k++] = digits[i];
      else
        res[k++] = '0';
    }
    res[k] = 0;
  } else {
    res[k++] = digits[0];
    if (nd > 1) {
      res[k++] = '.';
      for (size_t i = 1; i < nd; i++)
        res[k++] = digits[i];
    }
    res[k] = 0;
    snprintf(res + k, sizeof res - k, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
  }
  snprintf(out, n, "%s", res);
}

static void json_str_out(jbuf *b, const char *s, size_t n, int ensure_ascii) {
  jb_put(b, "\"", 1);
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    const char *e = NULL;
    switch (c) {
    case '"': e = "\\\""; break;
    case '\\': e = "\\\\"; break;
    case '\n': e = "\\n"; break;
    case '\r': e = "\\r"; break;
    case '\t': e = "\\t"; break;
    case '\b': e = "\\b"; break;
    case '\f': e = "\\f"; break;
    }
    if (e) {
      jb_puts(b, e);
      i++;
      continue;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      jb_printf(b, "\\u%04x", c);
      i++;
      continue;
    }
    if (c < 0x80 || !ensure_ascii) {
      size_t j = i + 1;
      while (j < n) {
        unsigned char d = (unsigned char)s[j];
        if (d < 0x20 || d == '"' || d == '\\' || (ensure_ascii && d >= 0x7f)) break;
        j++;
      }
      jb_put(b, s + i, j - i);
      i = j;
      continue;
    }
    /* decode one UTF-8 sequence (invalid bytes: U+FFFD) */
    unsigned cp = 0xFFFD;
    size_t len = 1;
    if ((c & 0xE0) == 0xC0 && i + 1 < n) {
      cp = (c & 0x1Fu) << 6 | ((unsigned char)s[i + 1] & 0x3F);
      len = 2;
    } else if ((c & 0xF0) == 0xE0 && i + 2 < n) {
      cp = (c & 0x0Fu) << 12 | ((unsigned char)s[i + 1] & 0x3Fu) << 6 |
           ((unsigned char)s[i + 2] & 0x3F);
      len = 3;
    } else if ((c & 0xF8) == 0xF0 && i + 3 < n) {
      cp = (c & 0x07u) << 18 | ((unsigned char)s[i + 1] & 0x3Fu) << 12 |
           ((unsigned char)s[i + 2] & 0x3Fu) << 6 | ((unsigned char)s[i + 3] & 0x3F);
      len = 4;
    }
    if (cp >= 0x10000) {
      cp -= 0x10000;
      jb_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else
      jb_printf(b, "\\u%04x", cp);
    i += len;
  }
  jb_put(b, "\"", 1);
}

static void nl_indent(jbuf *b, int indent, int depth) {
  jb_put(b, "\n", 1);
  for (int i = 0; i < indent * depth; i++)
    jb_put(b, " ", 1);
}

static int key_cmp(const void *x, const void *y) {
  const jstr *a = *(const jstr *const *)x, *b = *(const jstr *const *)y;
  size_t n = a->n < b->n ? a->n : b->n;
  int c = memcmp(a->s, b->s, n);
  return c ? c : (a->n > b->n) - (a->n < b->n);
}

int jv_to_json(jrender *r, const jv *v, jbuf *b, int indent, int ensure_ascii, int sort_keys,
               int depth) {
  if (depth > 200) {
    jfail(r, NULL, "tojson: value nests over 200 levels");
    return -1;
  }
  char num[64];
  switch (v->t) {
  case V_UNDEF:
  case V_NONE: jb_puts(b, "null"); return 0;
  case V_BOOL: jb_puts(b, v->b ? "true" : "false"); return 0;
  case V_INT: jb_printf(b, "%lld", v->i); return 0;
  case V_FLOAT:
    if (isnan(v->f))
      jb_puts(b, "NaN");
    else if (isinf(v->f))
      jb_puts(b, v->f < 0 ? "-Infinity" : "Infinity");
    else {
      j_float_repr(v->f, num, sizeof num);
      jb_puts(b, num);
    }
    return 0;
  case V_STR: json_str_out(b, v->s.s, v->s.n, ensure_ascii); return 0;
  case V_LIST:
    if (!v->l.n) {
      jb_puts(b, "[]");
      return 0;
    }
    jb_put(b, "[", 1);
    for (size_t i = 0; i < v->l.n; i++) {
      if (i) jb_puts(b, indent >= 0 ? "," : ", ");
      if (indent >= 0) nl_indent(b, indent, depth + 1);
      if (jv_to_json(r, v->l.a[i], b, indent, ensure_ascii, sort_keys, depth + 1)) return -1;
    }
    if (indent >= 0) nl_indent(b, indent, depth);
    jb_put(b, "]", 1);
    return 0;
  case V_DICT:
  case V_NS: {
    if (!v->d.n) {
      jb_puts(b, "{}");
      return 0;
    }
    size_t *ord = NULL;
    const jstr **ks = NULL;
    if (sort_keys) {
      ks = ja_alloc(&r->a, v->d.n * sizeof *ks);
      ord = ja_alloc(&r->a, v->d.n * sizeof *ord);
      if (!ks || !ord) {
        jfail(r, NULL, "memory limit");
        return -1;
      }
      for (size_t i = 0; i < v->d.n; i++)
        ks[i] = &v->d.k[i];
      qsort(ks, v->d.n, sizeof *ks, key_cmp);
      for (size_t i = 0; i < v->d.n; i++)
        ord[i] = (size_t)(ks[i] - v->d.k);
    }
    jb_put(b, "{", 1);
    for (size_t j = 0; j < v->d.n; j++) {
      size_t i = ord ? ord[j] : j;
      if (j) jb_puts(b, indent >= 0 ? "," : ", ");
      if (indent >= 0) nl_indent(b, indent, depth + 1);
      json_str_out(b, v->d.k[i].s, v->d.k[i].n, ensure_ascii);
      jb_puts(b, ": ");
      if (jv_to_json(r, v->d.v[i], b, indent, ensure_ascii, sort_keys, depth + 1)) return -1;
    }
    if (indent >= 0) nl_indent(b, indent, depth);
    jb_put(b, "}", 1);
    return 0;
  }
  default: jfail(r, NULL, "tojson: a %s cannot be written as JSON", jv_type_name(v)); return -1;
  }
}

/* {{ v }}: as @huggingface/jinja prints (the renderer of the goldens):
 * none/undefined print nothing, booleans true/false, floats as Python
 * repr (1.0), lists and dicts as compact JSON. */
int jv_to_text(jrender *r, const jv *v, jbuf *b) {
  char num[64];
  switch (v->t) {
  case V_UNDEF:
  case V_NONE: return 0;
  case V_BOOL: jb_puts(b, v->b ? "true" : "false"); return 0;
  case V_INT: jb_printf(b, "%lld", v->i); return 0;
  case V_FLOAT:
    j_float_repr(v->f, num, sizeof num);
    jb_puts(b, num);
    return 0;
  case V_STR: jb_put(b, v->s.s, v->s.n); return 0;
  case V_LIST:
  case V_DICT:
  case V_NS: return jv_to_json(r, v, b, -1, 0, 0, 0);
  case V_FUNC:
  case V_MACRO: jb_puts(b, "<function>"); return 0;
  case V_LOOP: jb_puts(b, "<loop>"); return 0;
  }
  return 0;
}
