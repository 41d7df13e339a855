/* core/template/arena.c — the bump allocator a parse or a render uses, and a byte buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/template/jinja_int.h"

struct jchunk {
  struct jchunk *next;
  size_t size, off;
  _Alignas(16) unsigned char mem[];
};

void *ja_alloc(jarena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (a->over || (a->cap && (n > a->cap || a->used > a->cap - n))) {
    a->over = 1;
    return NULL;
  }
  struct jchunk *c = a->head;
  if (!c || c->size - c->off < n) {
    size_t sz = n > 60000 ? n : 65536 - sizeof *c;
    c = malloc(sizeof *c + sz);
    if (!c) {
      a->over = 1;
      return NULL;
    }
    c->size = sz;
    c->off = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->mem + c->off;
  c->off += n;
  a->used += n;
  memset(p, 0, n);
  return p;
}

void ja_free(jarena *a) {
  for (struct jchunk *c = a->head, *nx; c; c = nx) {
    nx = c->next;
    free(c);
  }
  a->head = NULL;
  a->used = 0;
}

char *ja_strndup(jarena *a, const char *s, size_t n) {
  char *p = ja_alloc(a, n + 1);
  if (p) {
    if (n) memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

void jb_put(jbuf *b, const char *s, size_t n) {
  if (b->over) return;
  if (b->max && (n > b->max || b->n > b->max - n)) {
    b->over = 1;
    return;
  }
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 256;
    while (b->n + n + 1 > c)
      c *= 2;
    char *q = realloc(b->p, c);
    if (!q) {
      b->over = 1;
      return;
    }
    b->p = q;
    b->cap = c;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
void jb_puts(jbuf *b, const char *s) {
  jb_put(b, s, strlen(s));
}
void jb_printf(jbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k > 0) jb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}
