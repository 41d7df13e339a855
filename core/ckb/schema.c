/* A small validator for the subset of JSON-Schema the CKB schema files use:
 * $ref (#/defs/NAME: the schema file's own defs, then common.json's), type,
 * enum, pattern (PCRE2), minLength, minimum, minItems, required, properties,
 * additionalProperties (false or a schema), propertyNames, items; plus two
 * CKB rules: x-ref (the value is the id of an entry of the given kind(s))
 * and x-expr (a string is a well-formed integer expression). x-what names
 * what a pattern means, for the message. Every problem is one line naming
 * the file and the field path, e.g. "field 'tolerance.bf16' must be a number". */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

#include "core/ckb/internal.h"

typedef struct sctx {
  const mi_ckb *c;
  const ckb_kind *k;
  const char *file;
  ckb_diag *d;
} sctx;

static json_t *resolve(const sctx *s, json_t *schema) {
  for (int depth = 0; depth < 16; depth++) {
    json_t *ref = json_object_get(schema, "$ref");
    if (!json_is_string(ref)) return schema;
    const char *r = json_string_value(ref);
    if (strncmp(r, "#/defs/", 7) != 0) return NULL;
    json_t *t = s->k && s->k->defs ? json_object_get(s->k->defs, r + 7) : NULL;
    if (!t) t = json_object_get(s->c->common_defs, r + 7);
    if (!t) return NULL;
    schema = t;
  }
  return NULL;
}

static const char *type_name(json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

static int type_ok(const char *t, json_t *v) { return ckb_type_is(t, v) == 1; }

static const char *article(const char *t) {
  return (t[0] == 'a' || t[0] == 'i' || t[0] == 'o') ? "an" : "a";
}

/* A short rendering of a value for messages. */
static void show(json_t *v, char *buf, size_t n) {
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  if (!s) {
    snprintf(buf, n, "?");
    return;
  }
  if (strlen(s) > 60) snprintf(buf, n, "%.57s...", s);
  else snprintf(buf, n, "%s", s);
  free(s);
}

static int pattern_match(const char *pat, const char *str, int *bad_pattern) {
  int ec;
  PCRE2_SIZE eo;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                  PCRE2_DOLLAR_ENDONLY, /* "$" is the end, not before a final "\n" */
                                  &ec, &eo, NULL);
  if (!re) {
    *bad_pattern = 1;
    return 0;
  }
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
  int rc = pcre2_match(re, (PCRE2_SPTR)str, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

static void check(const sctx *s, json_t *schema, json_t *v, const char *path, const char *what);

static void check_ref(const sctx *s, json_t *kinds, json_t *v, const char *path,
                      const char *what) {
  if (!json_is_string(v)) return; /* the type rule reports it */
  const char *id = json_string_value(v);
  const mi_ckb_entry *e = mi_ckb_find(s->c, id);
  if (!e) {
    ckb_report(s->d, s->file, "%s '%s' refers to unknown entry '%s'", what, path, id);
    return;
  }
  int ok = 0;
  char want[200] = "";
  if (json_is_string(kinds)) {
    ok = e->kind && !strcmp(e->kind, json_string_value(kinds));
    snprintf(want, sizeof want, "%s", json_string_value(kinds));
  } else {
    size_t i;
    json_t *k;
    json_array_foreach(kinds, i, k) {
      if (e->kind && json_is_string(k) && !strcmp(e->kind, json_string_value(k))) ok = 1;
      size_t l = strlen(want);
      snprintf(want + l, sizeof want - l, "%s%s", i ? " or " : "", json_string_value(k));
    }
  }
  if (!ok)
    ckb_report(s->d, s->file, "%s '%s' refers to '%s' of kind %s, expected %s", what, path, id,
               e->kind ? e->kind : "?", want);
}

static void sub_path(char *out, size_t n, const char *path, const char *key) {
  if (path[0]) snprintf(out, n, "%s.%s", path, key);
  else snprintf(out, n, "%s", key);
}

static void check(const sctx *s, json_t *schema, json_t *v, const char *path, const char *what) {
  schema = resolve(s, schema);
  if (!schema) {
    ckb_report(s->d, s->k ? s->k->file : s->file, "schema for '%s': unresolvable $ref", path);
    return;
  }
  char buf[128];

  json_t *type = json_object_get(schema, "type");
  if (type) {
    int ok = 0;
    char names[160] = "";
    if (json_is_string(type)) {
      ok = type_ok(json_string_value(type), v);
      snprintf(names, sizeof names, "%s %s", article(json_string_value(type)),
               json_string_value(type));
    } else {
      size_t i;
      json_t *t;
      json_array_foreach(type, i, t) {
        if (!json_is_string(t)) continue;
        ok |= type_ok(json_string_value(t), v);
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s %s", i ? " or " : "",
                 article(json_string_value(t)), json_string_value(t));
      }
    }
    if (!ok) {
      ckb_report(s->d, s->file, "%s '%s' must be %s (got %s)", what, path, names, type_name(v));
      return;
    }
  }

  json_t *en = json_object_get(schema, "enum");
  if (json_is_array(en)) {
    size_t i;
    json_t *opt;
    int ok = 0;
    char opts[400] = "";
    json_array_foreach(en, i, opt) {
      if (json_equal(opt, v)) ok = 1;
      char one[64];
      show(opt, one, sizeof one);
      size_t l = strlen(opts);
      snprintf(opts + l, sizeof opts - l, "%s%s", i ? ", " : "", one);
    }
    if (!ok) {
      show(v, buf, sizeof buf);
      ckb_report(s->d, s->file, "%s '%s' must be one of %s (got %s)", what, path, opts, buf);
      return;
    }
  }

  if (json_is_string(v)) {
    const char *str = json_string_value(v);
    json_t *pat = json_object_get(schema, "pattern");
    if (json_is_string(pat)) {
      int bad = 0;
      if (!pattern_match(json_string_value(pat), str, &bad)) {
        show(v, buf, sizeof buf);
        if (bad)
          ckb_report(s->d, s->k ? s->k->file : s->file, "schema for '%s': bad pattern '%s'", path,
                     json_string_value(pat));
        else if (json_is_string(json_object_get(schema, "x-what")))
          ckb_report(s->d, s->file, "%s '%s' must be %s (got %s)", what, path,
                     json_string_value(json_object_get(schema, "x-what")), buf);
        else
          ckb_report(s->d, s->file, "%s '%s' must match %s (got %s)", what, path,
                     json_string_value(pat), buf);
      }
    }
    json_t *ml = json_object_get(schema, "minLength");
    if (json_is_integer(ml) && (json_int_t)strlen(str) < json_integer_value(ml))
      ckb_report(s->d, s->file, "%s '%s' must not be empty", what, path);
    if (json_is_true(json_object_get(schema, "x-expr"))) {
      char err[200];
      if (mi_expr_names(str, NULL, NULL, err, sizeof err) != 0)
        ckb_report(s->d, s->file, "%s '%s': %s", what, path, err);
    }
  }

  json_t *min = json_object_get(schema, "minimum");
  if (json_is_number(min) && json_is_number(v) && json_number_value(v) < json_number_value(min))
    ckb_report(s->d, s->file, "%s '%s' must be >= %g (got %g)", what, path,
               json_number_value(min), json_number_value(v));

  json_t *xref = json_object_get(schema, "x-ref");
  if (xref) check_ref(s, xref, v, path, what);

  if (json_is_array(v)) {
    json_t *mi = json_object_get(schema, "minItems");
    if (json_is_integer(mi) && (json_int_t)json_array_size(v) < json_integer_value(mi))
      ckb_report(s->d, s->file, "%s '%s' needs at least %lld item(s)", what, path,
                 (long long)json_integer_value(mi));
    json_t *items = json_object_get(schema, "items");
    if (items) {
      size_t i;
      json_t *it;
      json_array_foreach(v, i, it) {
        char p[512];
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        check(s, items, it, p, "field");
      }
    }
  }

  if (json_is_object(v)) {
    json_t *req = json_object_get(schema, "required");
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) {
      if (json_is_string(r) && !json_object_get(v, json_string_value(r))) {
        char p[512];
        sub_path(p, sizeof p, path, json_string_value(r));
        ckb_report(s->d, s->file, "missing field '%s'", p);
      }
    }
    json_t *props = json_object_get(schema, "properties");
    json_t *addl = json_object_get(schema, "additionalProperties");
    json_t *pnames = json_object_get(schema, "propertyNames");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
      char p[512];
      sub_path(p, sizeof p, path, key);
      if (pnames) {
        json_t *ks = json_string(key);
        check(s, pnames, ks, p, "field name");
        json_decref(ks);
      }
      json_t *ps = json_object_get(props, key);
      if (ps) check(s, ps, val, p, "field");
      else if (json_is_false(addl)) ckb_report(s->d, s->file, "unknown field '%s'", p);
      else if (json_is_object(addl)) check(s, addl, val, p, "field");
    }
  }
}

void ckb_schema_check(const mi_ckb *c, const ckb_kind *k, json_t *value, const char *file,
                      ckb_diag *d) {
  sctx s = {c, k, file, d};
  check(&s, k->schema, value, "", "field");
}
