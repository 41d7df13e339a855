/* core/grammar/json_schema.c — compiles a JSON Schema into the node tables the
 * matcher walks (grammar_int.h). A schema is hostile input (it comes in an
 * HTTP request): every keyword is checked, anything not supported is refused
 * by name and path rather than ignored (ignoring 'pattern' would let the model
 * write what the client said it must not), and the limits bound memory and time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r: compiling may run on several threads at once */
#endif
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar_int.h"

#define ROOT_PATH "response_format.json_schema.schema"

/* A $ref target compiled after the schema that names it (a worklist, not
 * recursion: a chain of refs must not deepen the C stack, and a cycle of refs
 * must terminate). */
typedef struct cref {
  const json_t *schema;
  uint32_t node; /* the placeholder every $ref to it resolves to (an ALIAS once compiled) */
  char *path;
} cref;

typedef struct cctx {
  mi_json_grammar *g;
  uint32_t cap_nodes, cap_ids, cap_props, cap_lits;
  size_t cap_blob;
  const json_t *root;
  const char *root_path;
  char path[768]; /* the JSON path of the schema object being compiled */
  size_t plen;
  char *err;
  size_t err_len;
  int failed;
  size_t lit_bytes; /* enum/const texts so far (MI_JSON_GRAMMAR_MAX_LITERALS) */
  uint32_t any;     /* the node "any value" (JG_NONE until needed) */
  cref *refs;
  uint32_t n_refs, cap_refs;
  char **node_path; /* [cap_nodes] path of each ALIAS/ANYOF node, for cycle errors */
} cctx;

/* ---- errors and paths ---- */

static uint32_t fail(cctx *cc, const char *fmt, ...) {
  if (cc->failed) return JG_NONE;
  cc->failed = 1;
  if (!cc->err || !cc->err_len) return JG_NONE;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(cc->err, cc->err_len, "%s: %s", cc->path, msg);
  /* one line: a key or keyword name may hold a newline */
  for (char *p = cc->err; *p; p++)
    if ((unsigned char)*p < 0x20) *p = '?';
  return JG_NONE;
}

static uint32_t oom(cctx *cc) {
  return fail(cc, "out of memory");
}

/* Appends a path step; returns the length to restore. Control characters in
 * a key become '?' (error lines are one line); a path too long to hold ends
 * in "...". */
static size_t path_push(cctx *cc, const char *fmt, ...) {
  size_t mark = cc->plen;
  char step[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(step, sizeof step, fmt, ap);
  va_end(ap);
  for (const char *p = step; *p && cc->plen + 4 < sizeof cc->path; p++)
    cc->path[cc->plen++] = (unsigned char)*p < 0x20 ? '?' : *p;
  if (step[0] && cc->plen + 4 >= sizeof cc->path) {
    memcpy(cc->path + cc->plen, "...", 3);
    cc->plen += 3;
  }
  cc->path[cc->plen] = 0;
  return mark;
}

static void path_pop(cctx *cc, size_t mark) {
  cc->plen = mark;
  cc->path[mark] = 0;
}

/* ---- growing the tables ---- */

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
  if (need <= *cap) return 0;
  uint32_t nc = *cap ? *cap : 16;
  while (nc < need)
    nc *= 2;
  void *np = realloc(*p, (size_t)nc * elem);
  if (!np) return -1;
  *p = np;
  *cap = nc;
  return 0;
}

static uint32_t new_node(cctx *cc) {
  mi_json_grammar *g = cc->g;
  if (g->n_nodes >= MI_JSON_GRAMMAR_MAX_NODES)
    return fail(cc, "more than %d schema nodes", MI_JSON_GRAMMAR_MAX_NODES);
  uint32_t old = cc->cap_nodes;
  if (grow((void **)&g->nodes, &cc->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return oom(cc);
  if (cc->cap_nodes != old) {
    char **np = realloc(cc->node_path, cc->cap_nodes * sizeof *np);
    if (!np) return oom(cc);
    memset(np + old, 0, (cc->cap_nodes - old) * sizeof *np);
    cc->node_path = np;
  }
  uint32_t id = g->n_nodes++;
  jg_node *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  n->kind = N_VALUE;
  n->types = T_ALL;
  n->lit_first = JG_NONE;
  n->max_len = JG_NONE;
  n->imin = -JG_INT_LIMIT;
  n->imax = JG_INT_LIMIT;
  n->addl = JG_NONE;
  n->items = JG_NONE;
  n->max_items = JG_NONE;
  return id;
}

/* Appends ids to g->ids; returns the first index. */
static uint32_t push_ids(cctx *cc, const uint32_t *ids, uint32_t n) {
  mi_json_grammar *g = cc->g;
  if (grow((void **)&g->ids, &cc->cap_ids, g->n_ids + n, sizeof *g->ids)) return oom(cc);
  uint32_t first = g->n_ids;
  if (n) memcpy(g->ids + first, ids, n * sizeof *ids);
  g->n_ids += n;
  return first;
}

static int push_blob(cctx *cc, const char *s, size_t n, jg_text *out) {
  mi_json_grammar *g = cc->g;
  if (g->blob_len + n > UINT32_MAX / 2) return -1;
  if (g->blob_len + n > cc->cap_blob) {
    size_t nc = cc->cap_blob ? cc->cap_blob : 1024;
    while (nc < g->blob_len + n)
      nc *= 2;
    char *nb = realloc(g->blob, nc);
    if (!nb) return -1;
    g->blob = nb;
    cc->cap_blob = nc;
  }
  memcpy(g->blob + g->blob_len, s, n);
  out->off = (uint32_t)g->blob_len;
  out->len = (uint32_t)n;
  g->blob_len += n;
  return 0;
}

/* The node "any JSON value": its objects take any key, its arrays any item. */
static uint32_t any_node(cctx *cc) {
  if (cc->any != JG_NONE) return cc->any;
  uint32_t id = new_node(cc);
  if (id == JG_NONE) return id;
  cc->g->nodes[id].addl = id;
  cc->g->nodes[id].items = id;
  return cc->any = id;
}

/* ---- keywords ---- */

/* Annotations: they change no value the schema accepts. 'format' is one here
 * (an annotation by default in JSON Schema 2020-12): a "date-time" string is
 * not checked for being a date. $defs / definitions are read where a $ref
 * points into them. */
static const char *const IGNORED[] = {
    "description", "title",      "default",  "examples",  "$schema", "$id",         "$comment",
    "format",      "deprecated", "readOnly", "writeOnly", "$defs",   "definitions", NULL};
static const char *const SUPPORTED[] = {"type",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "items",
                                        "prefixItems",
                                        "additionalItems",
                                        "minItems",
                                        "maxItems",
                                        "uniqueItems",
                                        "enum",
                                        "const",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "$ref",
                                        "minLength",
                                        "maxLength",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        NULL};

static int in_list(const char *const *list, const char *k) {
  for (; *list; list++)
    if (!strcmp(*list, k)) return 1;
  return 0;
}

/* The one keyword of s (other than the ones allowed) that constrains a value, or NULL. */
static const char *other_constraint(const json_t *s, const char *const *allowed) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)s, k, v) {
    if (in_list(IGNORED, k) || in_list(allowed, k)) continue;
    return k;
  }
  return NULL;
}

static int check_keywords(cctx *cc, const json_t *s) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)s, k, v) {
    if (in_list(IGNORED, k)) continue;
    if (!in_list(SUPPORTED, k)) return fail(cc, "keyword '%s' is not supported", k), -1;
    if (!strcmp(k, "uniqueItems") && !json_is_false(v))
      return fail(cc, "keyword 'uniqueItems' is supported only as false"), -1;
  }
  return 0;
}

/* A count keyword (minLength, maxItems, ...): a non-negative integer. */
static int read_count(cctx *cc, const json_t *s, const char *k, uint32_t *out) {
  json_t *v = json_object_get(s, k);
  if (!v) return 0;
  double d = json_number_value(v);
  if (!json_is_number(v) || d < 0 || d != floor(d))
    return fail(cc, "keyword '%s' must be a non-negative integer", k), -1;
  *out = d >= (double)(JG_NONE - 1) ? JG_NONE - 1 : (uint32_t)d;
  return 0;
}

static int type_bit(const char *name) {
  static const char *const names[] = {"null",   "boolean", "integer", "number",
                                      "string", "array",   "object"};
  for (int i = 0; i < 7; i++)
    if (!strcmp(name, names[i])) return 1 << i;
  return 0;
}

static int read_types(cctx *cc, const json_t *s, uint8_t *types) {
  json_t *t = json_object_get(s, "type");
  if (!t) return 0;
  unsigned m = 0;
  if (json_is_string(t)) {
    m = (unsigned)type_bit(json_string_value(t));
    if (!m) return fail(cc, "unknown type '%s'", json_string_value(t)), -1;
  } else if (json_is_array(t)) {
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
      int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
      if (!b) return fail(cc, "keyword 'type' lists something that is not a type name"), -1;
      m |= (unsigned)b;
    }
  } else {
    return fail(cc, "keyword 'type' must be a type name or a list of them"), -1;
  }
  /* "number" takes integers too: an integer is a number */
  *types = (uint8_t)m;
  return 0;
}

/* The JSON type bits a value satisfies. */
static unsigned value_types(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_NULL: return T_NULL;
  case JSON_TRUE:
  case JSON_FALSE: return T_BOOL;
  case JSON_INTEGER: return T_INT | T_NUM;
  case JSON_REAL: {
    double d = json_real_value(v);
    return d == floor(d) ? T_INT | T_NUM : T_NUM;
  }
  case JSON_STRING: return T_STR;
  case JSON_ARRAY: return T_ARR;
  default: return T_OBJ;
  }
}

/* A declared key's JSON text as the matcher must see it: quotes, and escapes
 * exactly for '"', '\' and control characters (a key the model writes free
 * never has a backslash, so it is the same key only when the bytes match). */
static int key_text(cctx *cc, const char *key, jg_text *out) {
  size_t n = strlen(key);
  char *buf = malloc(n * 6 + 3);
  if (!buf) return -1;
  size_t o = 0;
  buf[o++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)key[i];
    if (c == '"' || c == '\\') {
      buf[o++] = '\\';
      buf[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)sprintf(buf + o, "\\u%04x", c);
    } else {
      buf[o++] = (char)c;
    }
  }
  buf[o++] = '"';
  int rc = push_blob(cc, buf, o, out);
  free(buf);
  return rc;
}

static int text_cmp(const mi_json_grammar *g, const jg_text *a, const jg_text *b) {
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(g->blob + a->off, g->blob + b->off, n);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}
static int text_cmp_q(const void *a, const void *b, void *g) {
  return text_cmp(g, a, b);
}

/* enum / const: the values' compact JSON texts, those of the wrong type left
 * out, sorted (the matcher narrows a range of them byte by byte). */
static int compile_literals(cctx *cc, const json_t *s, jg_node *n) {
  json_t *e = json_object_get(s, "enum"), *c = json_object_get(s, "const");
  const char *other = other_constraint(s, (const char *const[]){"enum", "const", "type", NULL});
  if (other)
    return fail(cc, "keyword '%s' beside '%s' is not supported", other, e ? "enum" : "const"), -1;
  if (e && c) return fail(cc, "keywords 'enum' and 'const' together are not supported"), -1;
  if (e && !json_is_array(e)) return fail(cc, "keyword 'enum' must be an array"), -1;
  size_t count = e ? json_array_size(e) : 1;
  mi_json_grammar *g = cc->g;
  uint32_t first = g->n_lits;
  for (size_t i = 0; i < count; i++) {
    const json_t *v = e ? json_array_get(e, i) : c;
    if (!(value_types(v) & n->types)) continue;
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt) return oom(cc), -1;
    size_t len = strlen(txt);
    cc->lit_bytes += len;
    if (cc->lit_bytes > MI_JSON_GRAMMAR_MAX_LITERALS) {
      free(txt);
      return fail(cc, "enum/const values over %u bytes in all", MI_JSON_GRAMMAR_MAX_LITERALS), -1;
    }
    jg_text t;
    int bad = grow((void **)&g->lits, &cc->cap_lits, g->n_lits + 1, sizeof *g->lits) ||
              push_blob(cc, txt, len, &t);
    free(txt);
    if (bad) return oom(cc), -1;
    g->lits[g->n_lits++] = t;
  }
  qsort_r(g->lits + first, g->n_lits - first, sizeof *g->lits, text_cmp_q, g);
  uint32_t w = first; /* drop repeats: the range walk needs distinct texts */
  for (uint32_t r = first; r < g->n_lits; r++)
    if (w == first || text_cmp(g, &g->lits[w - 1], &g->lits[r])) g->lits[w++] = g->lits[r];
  g->n_lits = w;
  n->lit_first = first;
  n->lit_n = w - first;
  if (!n->lit_n) n->types = 0; /* no value of the allowed types: nothing matches */
  return 0;
}

/* minimum / maximum / exclusive*: exact for integers; for numbers only
 * inclusive integer bounds (a decimal compared with an integer is exact, and
 * so is the double a client parses it to; an exclusive or fractional bound is
 * not: 99.999999999999999 parses to 100.0). */
static int compile_bounds(cctx *cc, const json_t *s, jg_node *n) {
  static const char *const ks[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  double lo = -(double)JG_INT_LIMIT, hi = (double)JG_INT_LIMIT;
  int any = 0;
  json_t *emin = json_object_get(s, "exclusiveMinimum"),
         *emax = json_object_get(s, "exclusiveMaximum");
  for (int i = 0; i < 4; i++) {
    json_t *v = json_object_get(s, ks[i]);
    if (!v) continue;
    if (i >= 2 && json_is_boolean(v)) continue; /* draft 4: a flag on minimum / maximum */
    if (!json_is_number(v)) return fail(cc, "keyword '%s' must be a number", ks[i]), -1;
    double d = json_number_value(v);
    int excl = i >= 2 || (i == 0 && json_is_true(emin)) || (i == 1 && json_is_true(emax));
    if ((n->types & T_NUM) && (excl || d != floor(d)))
      return fail(cc,
                  "keyword '%s' is supported for type 'number' only as an inclusive integer "
                  "bound (or give type 'integer')",
                  ks[i]),
             -1;
    double b = (i % 2 == 0) ? (excl ? floor(d) + 1 : ceil(d)) : (excl ? ceil(d) - 1 : floor(d));
    if (i % 2 == 0 && b > lo) lo = b;
    if (i % 2 == 1 && b < hi) hi = b;
    any = 1;
  }
  if (!any || !(n->types & (T_INT | T_NUM))) return 0;
  if (lo > hi) {
    n->types &= (uint8_t) ~(T_INT | T_NUM); /* no number in range: none matches */
    return 0;
  }
  n->imin = (int64_t)lo;
  n->imax = (int64_t)hi;
  n->bounded = 1;
  return 0;
}

/* Room for one more declared key (three parallel arrays of cap_props). */
static int grow_props(cctx *cc) {
  mi_json_grammar *g = cc->g;
  uint32_t cap = cc->cap_props;
  if (grow((void **)&g->prop_key, &cap, g->n_props + 1, sizeof *g->prop_key)) return -1;
  if (cap == cc->cap_props) return 0;
  uint32_t *pn = realloc(g->prop_node, cap * sizeof *pn);
  if (!pn) return -1;
  g->prop_node = pn;
  uint8_t *pr = realloc(g->prop_req, cap);
  if (!pr) return -1;
  g->prop_req = pr;
  cc->cap_props = cap;
  return 0;
}

static uint32_t compile_schema(cctx *cc, const json_t *s, int depth);

/* properties / required / additionalProperties. */
static int compile_object(cctx *cc, const json_t *s, jg_node *n, int depth) {
  mi_json_grammar *g = cc->g;
  json_t *ap = json_object_get(s, "additionalProperties"),
         *props = json_object_get(s, "properties");
  json_t *req = json_object_get(s, "required");
  if (props && !json_is_object(props))
    return fail(cc, "keyword 'properties' must be an object"), -1;
  if (req && !json_is_array(req)) return fail(cc, "keyword 'required' must be an array"), -1;
  size_t m;
  if (!ap || json_is_true(ap)) {
    n->addl = any_node(cc);
  } else if (json_is_false(ap)) {
    n->addl = JG_NONE;
  } else {
    m = path_push(cc, ".additionalProperties");
    n->addl = compile_schema(cc, ap, depth + 1);
    path_pop(cc, m);
  }
  if (cc->failed) return -1;
  /* the values first: their own objects' keys must not land among this one's */
  size_t np = json_object_size(props), j = 0;
  uint32_t *kids = malloc((np ? np : 1) * sizeof *kids);
  if (!kids) return oom(cc), -1;
  const char *k;
  size_t klen;
  json_t *v;
  json_object_keylen_foreach(props, k, klen, v) {
    if (klen != strlen(k))
      return free(kids), fail(cc, "a property name with a NUL character is not supported"), -1;
    m = path_push(cc, ".properties.%s", k);
    kids[j++] = compile_schema(cc, v, depth + 1);
    path_pop(cc, m);
    if (kids[j - 1] == JG_NONE) return free(kids), -1;
  }
  uint32_t first = g->n_props;
  j = 0;
  json_object_foreach(props, k, v) {
    if (grow_props(cc) || key_text(cc, k, &g->prop_key[g->n_props])) return free(kids), oom(cc), -1;
    g->prop_node[g->n_props] = kids[j++];
    g->prop_req[g->n_props++] = 0;
  }
  free(kids);
  size_t i;
  json_array_foreach(req, i, v) {
    if (!json_is_string(v))
      return fail(cc, "keyword 'required' lists something that is not a string"), -1;
    if (json_string_length(v) != strlen(json_string_value(v)))
      return fail(cc, "a required name with a NUL character is not supported"), -1;
    jg_text t;
    if (key_text(cc, json_string_value(v), &t)) return oom(cc), -1;
    uint32_t p = first;
    while (p < g->n_props && text_cmp(g, &g->prop_key[p], &t))
      p++;
    if (p == g->n_props) { /* required but not declared: additionalProperties decides it */
      if (n->addl == JG_NONE) {
        n->types &= (uint8_t)~T_OBJ;
        continue;
      }
      if (grow_props(cc)) return oom(cc), -1;
      g->prop_key[p] = t;
      g->prop_node[p] = n->addl;
      g->prop_req[p] = 0;
      g->n_props++;
    }
    if (!g->prop_req[p]) n->nreq++;
    g->prop_req[p] = 1;
  }
  /* sort the object's keys by text, carrying node and required along */
  uint32_t cnt = g->n_props - first;
  for (uint32_t a = first + 1; a < first + cnt; a++) {
    jg_text kt = g->prop_key[a];
    uint32_t kn = g->prop_node[a];
    uint8_t kr = g->prop_req[a];
    uint32_t b = a;
    for (; b > first && text_cmp(g, &g->prop_key[b - 1], &kt) > 0; b--) {
      g->prop_key[b] = g->prop_key[b - 1];
      g->prop_node[b] = g->prop_node[b - 1];
      g->prop_req[b] = g->prop_req[b - 1];
    }
    g->prop_key[b] = kt;
    g->prop_node[b] = kn;
    g->prop_req[b] = kr;
  }
  n->prop_first = first;
  n->prop_n = cnt;
  return 0;
}

/* items / prefixItems (or the older items-as-array with additionalItems) / minItems / maxItems. */
static int compile_array(cctx *cc, const json_t *s, jg_node *n, int depth) {
  json_t *items = json_object_get(s, "items"), *pre = json_object_get(s, "prefixItems");
  json_t *tail = json_object_get(s, "additionalItems");
  if (json_is_array(items)) {
    if (pre)
      return fail(cc, "keywords 'prefixItems' and an array 'items' together are not supported"), -1;
    pre = items;
    items = tail;
  } else if (tail) {
    return fail(cc, "keyword 'additionalItems' is supported only beside an array 'items'"), -1;
  }
  if (pre && !json_is_array(pre)) return fail(cc, "keyword 'prefixItems' must be an array"), -1;
  uint32_t ids[256];
  size_t np = json_array_size(pre);
  if (np > 256) return fail(cc, "more than 256 prefixItems"), -1;
  for (size_t i = 0; i < np; i++) {
    size_t m =
        path_push(cc, pre == json_object_get(s, "items") ? ".items[%zu]" : ".prefixItems[%zu]", i);
    ids[i] = compile_schema(cc, json_array_get(pre, i), depth + 1);
    path_pop(cc, m);
    if (ids[i] == JG_NONE) return -1;
  }
  n->pre_first = push_ids(cc, ids, (uint32_t)np);
  n->pre_n = (uint32_t)np;
  if (!items || json_is_true(items)) {
    n->items = any_node(cc);
  } else if (json_is_false(items)) {
    n->items = JG_NONE;
  } else {
    size_t m = path_push(cc, tail ? ".additionalItems" : ".items");
    n->items = compile_schema(cc, items, depth + 1);
    path_pop(cc, m);
  }
  if (cc->failed || read_count(cc, s, "minItems", &n->min_items) ||
      read_count(cc, s, "maxItems", &n->max_items))
    return -1;
  if (n->min_items > n->max_items || (n->items == JG_NONE && n->min_items > n->pre_n))
    n->types &= (uint8_t)~T_ARR;
  return 0;
}

/* $ref: "#", "#/$defs/NAME", "#/definitions/NAME" (NAME with ~0 ~1 escapes). */
static uint32_t compile_ref(cctx *cc, const json_t *s) {
  const char *other = other_constraint(s, (const char *const[]){"$ref", NULL});
  if (other) return fail(cc, "keyword '%s' beside '$ref' is not supported", other);
  json_t *r = json_object_get(s, "$ref");
  const char *ref = json_string_value(r);
  if (!ref) return fail(cc, "keyword '$ref' must be a string");
  const json_t *target = NULL;
  if (!strcmp(ref, "#")) {
    target = cc->root;
  } else {
    const char *sect = !strncmp(ref, "#/$defs/", 8)          ? "$defs"
                       : !strncmp(ref, "#/definitions/", 14) ? "definitions"
                                                             : NULL;
    if (!sect)
      return fail(cc,
                  "$ref '%.80s' is not supported (only '#', '#/$defs/NAME', '#/definitions/NAME')",
                  ref);
    const char *name = ref + (sect[0] == '$' ? 8 : 14);
    char buf[256];
    size_t o = 0;
    for (const char *p = name; *p; p++) {
      if (o + 1 >= sizeof buf || *p == '/') return fail(cc, "$ref '%.80s' is not supported", ref);
      if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
        buf[o++] = p[1] == '0' ? '~' : '/';
        p++;
      } else {
        buf[o++] = *p;
      }
    }
    buf[o] = 0;
    target = json_object_get(json_object_get(cc->root, sect), buf);
    if (!target) return fail(cc, "$ref '%.80s' names no definition", ref);
  }
  for (uint32_t i = 0; i < cc->n_refs; i++)
    if (cc->refs[i].schema == target) return cc->refs[i].node;
  uint32_t id = new_node(cc);
  if (id == JG_NONE) return id;
  if (grow((void **)&cc->refs, &cc->cap_refs, cc->n_refs + 1, sizeof *cc->refs)) return oom(cc);
  char *p = malloc(strlen(cc->root_path) + strlen(ref) + 2);
  if (!p) return oom(cc);
  sprintf(p, "%s%s", cc->root_path, ref + 1); /* "#/$defs/A" -> ROOT/$defs/A, made dotted below */
  for (char *q = p + strlen(cc->root_path); *q; q++)
    if (*q == '/') *q = '.';
  cc->refs[cc->n_refs++] = (cref){target, id, p};
  cc->g->nodes[id].kind = N_ALIAS; /* filled when the worklist reaches it */
  cc->g->nodes[id].target = JG_NONE;
  return id;
}

/* anyOf / oneOf (checked as anyOf) / allOf of one element. */
static uint32_t compile_alts(cctx *cc, const json_t *s, int depth) {
  json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
  json_t *all = json_object_get(s, "allOf");
  const char *kw = any ? "anyOf" : one ? "oneOf" : "allOf";
  const char *other = other_constraint(s, (const char *const[]){kw, NULL});
  if (other) return fail(cc, "keyword '%s' beside '%s' is not supported", other, kw);
  json_t *list = any ? any : one ? one : all;
  if (!json_is_array(list) || json_array_size(list) == 0)
    return fail(cc, "keyword '%s' must be a non-empty array", kw);
  if (list == all && json_array_size(all) != 1)
    return fail(cc, "keyword 'allOf' is supported only with a single element");
  size_t na = json_array_size(list);
  if (na > 256) return fail(cc, "keyword '%s' has more than 256 alternatives", kw);
  uint32_t id = new_node(cc), alts[256];
  if (id == JG_NONE) return id;
  for (size_t i = 0; i < na; i++) {
    size_t m = path_push(cc, ".%s[%zu]", kw, i);
    alts[i] = compile_schema(cc, json_array_get(list, i), depth + 1);
    path_pop(cc, m);
    if (alts[i] == JG_NONE) return JG_NONE;
  }
  jg_node *n = &cc->g->nodes[id];
  n->kind = list == all ? N_ALIAS : N_ANYOF;
  n->target = alts[0];
  if (list != all) {
    uint32_t first = push_ids(cc, alts, (uint32_t)na);
    n = &cc->g->nodes[id];
    n->alt_first = first;
    n->alt_n = (uint32_t)na;
  }
  cc->node_path[id] = strdup(cc->path);
  return cc->failed ? JG_NONE : id;
}

/* One schema: a new node (or the shared "any" one, or a $ref's target). */
static uint32_t compile_schema(cctx *cc, const json_t *s, int depth) {
  if (cc->failed) return JG_NONE;
  if (depth > MI_JSON_GRAMMAR_MAX_DEPTH)
    return fail(cc, "schema nesting deeper than %d", MI_JSON_GRAMMAR_MAX_DEPTH);
  if (json_is_true(s)) return any_node(cc);
  if (json_is_false(s)) {
    uint32_t id = new_node(cc);
    if (id != JG_NONE) cc->g->nodes[id].types = 0;
    return id;
  }
  if (!json_is_object(s)) return fail(cc, "a schema must be an object or a boolean");
  if (check_keywords(cc, s)) return JG_NONE;
  if (json_object_get(s, "$ref")) return compile_ref(cc, s);
  if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf") || json_object_get(s, "allOf")) {
    if (!!json_object_get(s, "anyOf") + !!json_object_get(s, "oneOf") +
            !!json_object_get(s, "allOf") >
        1)
      return fail(cc, "keywords 'anyOf', 'oneOf', 'allOf' together are not supported");
    return compile_alts(cc, s, depth);
  }
  uint32_t id = new_node(cc);
  if (id == JG_NONE) return id;
  jg_node n = cc->g->nodes[id]; /* filled here, stored last: children grow the table */
  if (read_types(cc, s, &n.types)) return JG_NONE;
  if (json_object_get(s, "enum") || json_object_get(s, "const")) {
    if (compile_literals(cc, s, &n)) return JG_NONE;
    cc->g->nodes[id] = n;
    return id;
  }
  if (read_count(cc, s, "minLength", &n.min_len) || read_count(cc, s, "maxLength", &n.max_len) ||
      compile_bounds(cc, s, &n) || compile_object(cc, s, &n, depth) ||
      compile_array(cc, s, &n, depth))
    return JG_NONE;
  if (n.min_len > n.max_len) n.types &= (uint8_t)~T_STR;
  cc->g->nodes[id] = n;
  return id;
}

/* ---- after compiling: closures, cycles, what each node needs ---- */

/* The VALUE nodes each node's values start as (through aliases and anyOf),
 * and refusal of a cycle of them: a $ref or anyOf that reaches itself without
 * consuming input would send the matcher round forever. Iterative (a chain
 * of 4096 aliases must not deepen the C stack). */
static int close_nodes(cctx *cc) {
  mi_json_grammar *g = cc->g;
  uint32_t N = g->n_nodes;
  uint32_t *stamp = calloc(N, sizeof *stamp), *stack = malloc((size_t)N * 2 * sizeof *stack);
  uint8_t *color = calloc(N, 1); /* cycle search: 0 new, 1 on the path, 2 done */
  uint32_t *buf = malloc((size_t)N * sizeof *buf);
  int rc = 0;
  if (!stamp || !stack || !color || !buf) rc = oom(cc), rc = -1;
  /* cycles: depth-first with an explicit stack of (node, next edge) */
  for (uint32_t r = 0; !rc && r < N; r++) {
    if (color[r]) continue;
    uint32_t sp = 0;
    stack[sp++] = r, stack[sp++] = 0, color[r] = 1;
    while (sp && !rc) {
      uint32_t v = stack[sp - 2], e = stack[sp - 1]++;
      jg_node *n = &g->nodes[v];
      uint32_t next = n->kind == N_ALIAS                   ? (e == 0 ? n->target : JG_NONE)
                      : n->kind == N_ANYOF && e < n->alt_n ? g->ids[n->alt_first + e]
                                                           : JG_NONE;
      if (next == JG_NONE) {
        color[v] = 2;
        sp -= 2;
      } else if (color[next] == 1) {
        path_pop(cc, 0);
        path_push(cc, "%s", cc->node_path[next] ? cc->node_path[next] : cc->root_path);
        fail(cc, "$ref/anyOf cycle that never consumes input");
        rc = -1;
      } else if (!color[next]) {
        color[next] = 1;
        stack[sp++] = next, stack[sp++] = 0;
      }
    }
  }
  /* closures: each node's reachable VALUE nodes, deduplicated (stamp = r + 1) */
  for (uint32_t r = 0; !rc && r < N; r++) {
    uint32_t sp = 0, nb = 0;
    stack[sp++] = r;
    stamp[r] = r + 1;
    while (sp) {
      jg_node *n = &g->nodes[stack[--sp]];
      if (n->kind == N_VALUE) {
        if (n->types) buf[nb++] = (uint32_t)(n - g->nodes);
        continue;
      }
      uint32_t cnt = n->kind == N_ALIAS ? 1 : n->alt_n;
      for (uint32_t i = cnt; i-- > 0;) { /* reversed: alternatives keep their order */
        uint32_t t = n->kind == N_ALIAS ? n->target : g->ids[n->alt_first + i];
        if (stamp[t] != r + 1) stamp[t] = r + 1, stack[sp++] = t;
      }
    }
    if (nb > JG_MAX_THREADS) nb = JG_MAX_THREADS; /* the matcher follows no more at once */
    uint32_t first = push_ids(cc, buf, nb);
    if (cc->failed) rc = -1;
    g->nodes[r].clo_first = first;
    g->nodes[r].clo_n = nb;
  }
  free(stamp), free(stack), free(color), free(buf);
  return rc;
}

static uint8_t need_add(uint8_t a) {
  return a >= MI_JSON_GRAMMAR_MAX_DEPTH ? JG_INF : (uint8_t)(a + 1);
}

/* need: the fewest nested containers a value of each node takes (a required
 * property's value sits one level down), to a fixed point from "none fits";
 * the matcher opens a container only when what it then must hold still fits
 * under the nesting limit, so no parse is left that cannot end. */
static void compute_need(mi_json_grammar *g) {
  for (uint32_t i = 0; i < g->n_nodes; i++)
    g->nodes[i].need = g->nodes[i].need_obj = g->nodes[i].need_arr = JG_INF;
  for (int changed = 1; changed;) {
    changed = 0;
    for (uint32_t i = g->n_nodes; i-- > 0;) { /* children have higher ids: fewer passes */
      jg_node *n = &g->nodes[i];
      uint8_t best = JG_INF;
      if (n->kind == N_VALUE) {
        if (n->types & (T_NULL | T_BOOL | T_INT | T_NUM | T_STR)) best = 0;
        if (n->lit_first != JG_NONE) best = n->lit_n ? 0 : JG_INF;
        uint8_t o = JG_INF, a = JG_INF;
        if ((n->types & T_OBJ) && n->lit_first == JG_NONE) {
          uint8_t m = 0;
          for (uint32_t p = n->prop_first; p < n->prop_first + n->prop_n; p++)
            if (g->prop_req[p] && g->nodes[g->prop_node[p]].need > m)
              m = g->nodes[g->prop_node[p]].need;
          o = m == JG_INF ? JG_INF : need_add(m);
        }
        if ((n->types & T_ARR) && n->lit_first == JG_NONE) {
          uint8_t m = 0;
          for (uint32_t k = 0; k < n->min_items && m != JG_INF; k++) {
            uint32_t it = k < n->pre_n ? g->ids[n->pre_first + k] : n->items;
            uint8_t x = it == JG_NONE ? JG_INF : g->nodes[it].need;
            if (x > m) m = x;
            if (k >= n->pre_n) break; /* the rest are all 'items' */
          }
          a = m == JG_INF ? JG_INF : need_add(m);
        }
        if (o != n->need_obj || a != n->need_arr) changed = 1;
        n->need_obj = o, n->need_arr = a;
        if (o < best) best = o;
        if (a < best) best = a;
      } else {
        for (uint32_t c = 0; c < n->clo_n; c++)
          if (g->nodes[g->ids[n->clo_first + c]].need < best)
            best = g->nodes[g->ids[n->clo_first + c]].need;
      }
      if (best != n->need) changed = 1, n->need = best;
    }
  }
}

/* Built-in literal sets: false/true, null. */
static int add_builtins(cctx *cc) {
  static const char *const w[] = {"false", "true", "null"};
  mi_json_grammar *g = cc->g;
  for (int i = 0; i < 3; i++) {
    jg_text t;
    if (grow((void **)&g->lits, &cc->cap_lits, g->n_lits + 1, sizeof *g->lits) ||
        push_blob(cc, w[i], strlen(w[i]), &t))
      return oom(cc), -1;
    if (i == 0) g->lit_bool = g->n_lits;
    if (i == 2) g->lit_null = g->n_lits;
    g->lits[g->n_lits++] = t;
  }
  return 0;
}

/* Compiles the root, then every $ref target it reaches (worklist). */
static int compile_all(cctx *cc, const json_t *schema) {
  mi_json_grammar *g = cc->g;
  if (add_builtins(cc)) return -1;
  if (!schema) { /* json_object mode: an object of any keys and values */
    uint32_t id = new_node(cc), any = any_node(cc);
    if (cc->failed) return -1;
    g->nodes[id].types = T_OBJ;
    g->nodes[id].addl = any;
    g->root = id;
  } else {
    /* the root is a $ref target too ("#"): a placeholder, compiled first */
    g->root = new_node(cc);
    if (cc->failed || grow((void **)&cc->refs, &cc->cap_refs, 1, sizeof *cc->refs))
      return oom(cc), -1;
    cc->refs[cc->n_refs++] = (cref){schema, g->root, strdup(cc->root_path)};
    g->nodes[g->root].kind = N_ALIAS;
  }
  for (uint32_t i = 0; i < cc->n_refs && !cc->failed; i++) {
    path_pop(cc, 0);
    path_push(cc, "%s", cc->refs[i].path ? cc->refs[i].path : "");
    /* a definition sits one level below the root */
    uint32_t t = compile_schema(cc, cc->refs[i].schema, i == 0 ? 0 : 1);
    if (t == JG_NONE) break;
    g->nodes[cc->refs[i].node].target = t;
    cc->node_path[cc->refs[i].node] = strdup(cc->path);
  }
  path_pop(cc, 0);
  path_push(cc, "%s", cc->root_path);
  if (cc->failed || close_nodes(cc)) return -1;
  compute_need(g);
  if (g->nodes[g->root].need == JG_INF)
    return fail(cc,
                "no JSON value matches this schema within the limits (nesting %d, "
                "%d-digit numbers)",
                MI_JSON_GRAMMAR_MAX_DEPTH, MI_JSON_GRAMMAR_INT_DIGITS),
           -1;
  return 0;
}

mi_json_grammar *mi_json_grammar_compile_at(const json_t *schema, const char *root_path, char *err,
                                            size_t err_len) {
  if (err && err_len) err[0] = 0;
  cctx cc = {0};
  cc.err = err;
  cc.err_len = err_len;
  cc.any = JG_NONE;
  cc.root = schema;
  cc.root_path = root_path ? root_path : ROOT_PATH;
  cc.g = calloc(1, sizeof *cc.g);
  path_push(&cc, "%s", cc.root_path);
  int rc = cc.g ? compile_all(&cc, schema) : (oom(&cc), -1);
  for (uint32_t i = 0; i < cc.n_refs; i++)
    free(cc.refs[i].path);
  free(cc.refs);
  if (cc.node_path)
    for (uint32_t i = 0; i < cc.cap_nodes; i++)
      free(cc.node_path[i]);
  free(cc.node_path);
  if (rc || cc.failed) {
    mi_json_grammar_free(cc.g);
    return NULL;
  }
  return cc.g;
}

mi_json_grammar *mi_json_grammar_compile(const json_t *schema, char *err, size_t err_len) {
  return mi_json_grammar_compile_at(schema, ROOT_PATH, err, err_len);
}

int mi_json_grammar_wrap(mi_json_grammar *g, const char *prefix, const char *suffix) {
  size_t np = prefix ? strlen(prefix) : 0, ns = suffix ? strlen(suffix) : 0;
  if (!g || np > 4096 || ns > 4096) return -1;
  char *p = np ? strdup(prefix) : NULL, *q = ns ? strdup(suffix) : NULL;
  if ((np && !p) || (ns && !q)) {
    free(p);
    free(q);
    return -1;
  }
  free(g->prefix);
  free(g->suffix);
  g->prefix = p;
  g->suffix = q;
  g->prefix_len = (uint32_t)np;
  g->suffix_len = (uint32_t)ns;
  return 0;
}

void mi_json_grammar_free(mi_json_grammar *g) {
  if (!g) return;
  free(g->prefix);
  free(g->suffix);
  free(g->nodes);
  free(g->ids);
  free(g->prop_key);
  free(g->prop_node);
  free(g->prop_req);
  free(g->lits);
  free(g->blob);
  free(g);
}
