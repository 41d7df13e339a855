/* tests/template/test_template.c — the Jinja engine (core/template):
 *   - unit cases: each construct of the subset against its expected text
 *     (Python Jinja2 with transformers' settings where @huggingface/jinja differs);
 *   - goldens: golden_templates.json (tools/node/template_goldens.mjs: real
 *     chat templates rendered by @huggingface/jinja) byte for byte, and
 *     tests/tokenizer/golden_chat.json through mi_chat_render_template;
 *   - errors and limits: one line "line L col C: ..." within each limit. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/template/jinja.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/util/check_main.h"

static char *render(const char *tpl, const char *ctx_json, char *err, size_t el, int *raised) {
  json_error_t je;
  json_t *ctx = ctx_json ? json_loads(ctx_json, 0, &je) : NULL;
  if (ctx_json) ck_assert_msg(ctx != NULL, "bad test context %s", ctx_json);
  mi_jinja_opts o = {.now = 1721952000}; /* 2024-07-26 00:00:00 UTC */
  char *s = mi_jinja_render_text(tpl, ctx, &o, err, el, raised);
  json_decref(ctx);
  return s;
}

static const struct {
  const char *tpl, *ctx, *exp;
} ok_cases[] = {
    /* text, output, comments, whitespace control */
    {"plain text", NULL, "plain text"},
    {"a{{ 'b' }}c{# gone #}d", NULL, "abcd"},
    {"a  {{- 'b' -}}  c", NULL, "abc"},
    {"a \n{#- c -#}\n b", NULL, "ab"},
    {"x\n", NULL, "x"}, /* one trailing newline dropped */
    {"x\n\n", NULL, "x\n"},
    {"{% if true %}\nyes\n{% endif %}\n", NULL, "yes\n"}, /* trim_blocks */
    {"  {% if true %}a{% endif %}", NULL, "a"},           /* lstrip_blocks */
    {"  {{ 'a' }}", NULL, "  a"},                         /* not for {{ */
    /* literals */
    {"{{ 'it\\'s' }}|{{ \"q\\\"\\n\\t\\\\\" }}|{{ '\\u00e9\\x41' }}", NULL, "it's|q\"\n\t\\|éA"},
    {"{{ 'a' 'b' }}", NULL, "ab"},
    {"{{ 42 }} {{ -7 }} {{ 1.5 }} {{ 2.0 }} {{ 1e3 }} {{ 1_000 }}", NULL,
     "42 -7 1.5 2.0 1000.0 1000"},
    {"{{ true }}{{ True }}{{ false }}{{ False }}[{{ none }}{{ None }}]", NULL,
     "truetruefalsefalse[]"},
    {"{{ [1, 'a', [2]] }} {{ {'k': 'v', 'n': none} }} {{ (1, 2) }}", NULL,
     "[1, \"a\", [2]] {\"k\": \"v\", \"n\": null} [1, 2]"},
    /* access */
    {"{{ d.a }}{{ d['b'] }}{{ d.missing }}|{{ l[0] }}{{ l[-1] }}{{ l[9] }}|{{ s[1] }}",
     "{\"d\":{\"a\":1,\"b\":2},\"l\":[3,4],\"s\":\"xyz\"}", "12|34|y"},
    {"{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ s[::-1] }} {{ s[1:3] }} {{ u[::-1] }}",
     "{\"l\":[1,2,3],\"s\":\"abcd\",\"u\":\"añb\"}", "[2, 3] [1, 2] [3, 2, 1] [2, 3] dcba bc bña"},
    {"{{ x.y }}[{{ undefined_name }}]", NULL, "[]"},
    /* operators */
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / "
     "2 }} {{ 2 ** 10 }}",
     NULL, "7 9 3 -4 1 2 3.5 1024"},
    {"{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none }} {{ 'n' + 1 }} {{ [1] + [2] }} {{ 'ab' * 2 }}", NULL,
     "ab a1 n1 [1, 2] abab"},
    {"{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ none "
     "== x }}",
     NULL, "true true true true false true true"},
    {"{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 1 in x }}",
     "{\"d\":{\"k\":1}}", "true true true true false"},
    {"{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or [] }} {{ not 1 in [1] }}", NULL,
     "x y true [] false"},
    {"{{ 'y' if c else 'n' }}{{ 'y' if not c else 'n' }}[{{ 'y' if false }}]", "{\"c\":true}",
     "yn[]"},
    /* tests */
    {"{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}{{ d "
     "is mapping }}",
     "{\"x\":1,\"n\":null,\"s\":\"\",\"d\":{}}", "truefalsetruetruetruetrue"},
    {"{{ l is iterable }}{{ s is iterable }}{{ 1 is iterable }}{{ l is sequence }}{{ 1 is number "
     "}}{{ 1.5 is number }}{{ 's' is number }}",
     "{\"l\":[],\"s\":\"x\"}", "truetruefalsetruetruetruefalse"},
    {"{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ false is false }}{{ 1 is true }}",
     NULL, "truefalsetruetruefalse"},
    {"{{ 'a' is equalto 'a' }}{{ 'a' is eq('b') }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby "
     "3 }}{{ x is not defined }}",
     NULL, "truefalsetruetruetruetrue"},
    /* if / for */
    {"{% if a %}A{% elif b %}B{% else %}C{% endif %}", "{\"a\":0,\"b\":1}", "B"},
    {"{% if a %}A{% elif b %}B{% else %}C{% endif %}", "{\"a\":0,\"b\":0}", "C"},
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
     "loop.length }};{% endfor %}",
     "{\"l\":[\"a\",\"b\"]}", "10truefalse2;21falsetrue2;"},
    {"{% for x in l %}{{ loop.previtem }}>{{ x }}<{{ loop.nextitem }} {{ loop.revindex }}|{% "
     "endfor %}",
     "{\"l\":[1,2,3]}", ">1<2 3|1>2<3 2|2>3< 1|"},
    {"{% for x in l %}x{% else %}empty{% endfor %}", "{\"l\":[]}", "empty"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{\"d\":{\"b\":1,\"a\":2}}",
     "b=1;a=2;"},
    {"{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}",
     "{\"d\":{\"x\":1,\"y\":2}}", "xy|[h][é]"},
    {"{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}",
     "{\"l\":[1,2,3]}", "2:1/2 3:2/2 "},
    {"{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif "
     "%}{{ x }}{% endfor %}",
     "{\"l\":[1,2,3,4,5]}", "13"},
    {"{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 7, 2) %}{{ i }}{% endfor %} "
     "{{ range(3, 0, -1) }}",
     NULL, "012 135 [3, 2, 1]"},
    {"{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", NULL, "37"},
    /* set, scoping, namespace */
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1"},
    {"{% set ns = namespace(a=1, b='x') %}{% for i in [1, 2] %}{% set ns.a = ns.a + i %}{% endfor "
     "%}{{ ns.a }}{{ ns.b }}",
     NULL, "4x"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}in{{ a }}{% endset %}[{{ t }}]", NULL,
     "12[in1]"},
    {"{% set messages = messages[1:] %}{{ messages | length }}", "{\"messages\":[1,2,3]}", "2"},
    /* macros and call */
    {"{% macro m(a, b='d') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, 'x') }}{{ m(b='k', "
     "a=3) }}",
     NULL, "<1d><2x><3k>"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL,
     "321"},
    {"{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}body{% endcall %}", NULL,
     "[body]"},
    /* filters */
    {"{{ '  x  ' | trim }}|{{ 'aB' | upper }}{{ 'aB' | lower }}|{{ 'hello wORLD' | title }}|{{ "
     "'hELLO' | capitalize }}",
     NULL, "x|ABab|Hello World|Hello"},
    {"{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ [3, 4] | first }} {{ "
     "[3, 4] | last }} {{ 'ab' | first }}",
     NULL, "5 2 1 3 4 a"},
    {"{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }} {{ l | join('-', attribute='n') }}",
     "{\"l\":[{\"n\":1},{\"n\":2}]}", "a, b 12 1-2"},
    {"{{ x | default('d') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ 0 | d('z', "
     "boolean=true) }}",
     NULL, "d  e z"},
    {"{{ d | items | list }} {{ 'ab' | list }} {{ 12 | string }} {{ none | string }} {{ '12' | int "
     "+ 1 }} {{ '2.5' | float }} {{ 'x' | int }} {{ 3.9 | int }}",
     "{\"d\":{\"a\":1}}", "[[\"a\", 1]] [\"a\", \"b\"] 12 None 13 2.5 0 3"},
    {"{{ 'aXbX' | replace('X', '-') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ '<b>' | safe }} {{ "
     "2.567 | round(2) }} {{ 2.5 | round }} {{ (-3) | abs }}{{ -3 | abs }}",
     NULL, "a-b- bba <b> 2.57 2.0 3-3"},
    {"{{ l | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }} {{ l | "
     "rejectattr('role', 'eq', 'user') | list | length }} {{ l | selectattr('x') | list }}",
     "{\"l\":[{\"role\":\"user\",\"c\":1},{\"role\":\"bot\",\"c\":2},{\"role\":\"user\",\"c\":3,"
     "\"x\":true}]}",
     "[1, 3] 1 [{\"role\": \"user\", \"c\": 3, \"x\": true}]"},
    {"{{ l | selectattr('tool_calls', 'undefined') | list | length }} {{ ['a', 'B'] | map('upper') "
     "| join }}",
     "{\"l\":[{\"tool_calls\":[]},{}]}", "1 AB"},
    {"{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(1, "
     "blank=true) }}",
     NULL, "a\n  b\n\n  c|  a\n  b|a\n \n b"},
    {"{{ [1, 2, 1] | unique | list }} {{ [1, 2] | reverse | list }} {{ 'ab' | reverse }}", NULL,
     "[1, 2] [2, 1] ba"},
    /* tojson: Python json.dumps as transformers' tojson (ensure_ascii=False, key order kept) */
    {"{{ d | tojson }}", "{\"d\":{\"b\":[1,2.5,true,null],\"a\":\"é\\\"\\n\\u0001\"}}",
     "{\"b\": [1, 2.5, true, null], \"a\": \"é\\\"\\n\\u0001\"}"},
    {"{{ d | tojson(indent=2) }}", "{\"d\":{\"a\":[1,{\"b\":{}}],\"c\":[]}}",
     "{\n  \"a\": [\n    1,\n    {\n      \"b\": {}\n    }\n  ],\n  \"c\": []\n}"},
    {"{{ 'é😀\\x7f' | tojson(ensure_ascii=true) }} {{ d | tojson(sort_keys=true) }} {{ 1.0 | tojson "
     "}} {{ 1e20 | tojson }} {{ 0.0001 | tojson }} {{ 1e-05 | tojson }}",
     "{\"d\":{\"b\":1,\"a\":2}}",
     "\"\\u00e9\\ud83d\\ude00\\u007f\" {\"a\": 2, \"b\": 1} 1.0 1e+20 0.0001 1e-05"},
    /* string methods (Python semantics: strip(chars) strips only chars) */
    {"[{{ ' x '.strip() }}][{{ '\\n x\\n'.strip('\\n') }}][{{ 'xxaxx'.lstrip('x') }}][{{ "
     "'xxaxx'.rstrip('x') }}]",
     NULL, "[x][ x][axx][xxa]"},
    {"{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ "
     "'x</think>y'.split('</think>')[-1] }}",
     NULL, "[\"a\", \"b\", \"c\"] [\"a\", \"b\", \"\", \"c\"] [\"a\", \"b,c\"] y"},
    {"{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ "
     "'abc'.replace('b', 'B') }}{{ 'aB'.upper() }}{{ 'aB'.lower() }}{{ 'ab cd'.title() }}",
     NULL, "truetruetrueaBcABabAb Cd"},
    /* dict methods */
    {"{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 5) }} [{{ "
     "d.get('z') }}]",
     "{\"d\":{\"a\":1,\"b\":2}}", "[\"a\", \"b\"] [1, 2] 1 5 []"},
    /* functions */
    {"{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}", NULL,
     "26 Jul 2024 2024-07-26"},
    {"{{ dict(a=1) | tojson }}", NULL, "{\"a\": 1}"},
    {"{% generation %}g{% endgeneration %}", NULL, "g"},
};

START_TEST(test_units) {
  for (size_t i = 0; i < sizeof ok_cases / sizeof *ok_cases; i++) {
    char err[512] = "";
    int raised = 0;
    char *s = render(ok_cases[i].tpl, ok_cases[i].ctx, err, sizeof err, &raised);
    ck_assert_msg(s && !strcmp(s, ok_cases[i].exp), "case %zu: %s\n got: [%s]\n exp: [%s]", i,
                  ok_cases[i].tpl, s ? s : err, ok_cases[i].exp);
    free(s);
  }
}
END_TEST

static const struct {
  const char *tpl, *ctx, *err;
  int raised;
} err_cases[] = {
    {"{{ x | wordwrap }}", NULL, "line 1 col 8: unknown filter 'wordwrap'", 0},
    {"ab\n  {{ 1 +  }}", NULL, "line 2 col 11: expected an expression, got '}}'", 0},
    {"{% if x %}a", NULL, "line 1 col 4: block not closed: missing '{% endif %}'", 0},
    {"{% endfor %}", NULL, "line 1 col 4: unexpected '{% endfor %}'", 0},
    {"{% while x %}{% endwhile %}", NULL, "line 1 col 4: unknown statement 'while'", 0},
    {"{{ 'abc }}", NULL, "line 1 col 4: string literal not closed", 0},
    {"{{ x is frobbed }}", NULL, "line 1 col 9: unknown test 'frobbed'", 0},
    {"{{ foo(1) }}", NULL, "line 1 col 7: unknown function 'foo'", 0},
    {"{{ 'a'.zap() }}", NULL, "line 1 col 11: unknown method 'zap'", 0},
    {"{{ x + 'a' }}", NULL, "line 1 col 6: cannot apply '+' to an undefined value", 0},
    {"{{ 1 / 0 }}", NULL, "line 1 col 6: division by zero", 0},
    {"{{ 1 {{", NULL, "line 1 col 8: missing '}}'", 0},
    {"x\n{{ raise_exception('Conversation roles must alternate') }}", NULL,
     "line 2 col 19: Conversation roles must alternate", 1},
    {"{% for a, b in [1] %}{% endfor %}", NULL, "cannot unpack a integer into 2 loop variables", 0},
    {"{% set x.y = 1 %}", "{\"x\":{}}", "cannot set an attribute of a dict (only of a namespace)",
     0},
    {"{{ 9223372036854775807 + 1 }}", NULL, "integer overflow in '+'", 0},
    {"{{ '\\x4' }}", NULL, "invalid escape in string literal", 0},
    /* transformers (Python) behaviour where @huggingface/jinja 0.5.11 differs:
     * Mistral Nemo's alternation check raises on two user turns in a row */
};

START_TEST(test_errors) {
  for (size_t i = 0; i < sizeof err_cases / sizeof *err_cases; i++) {
    char err[512] = "";
    int raised = -1;
    char *s = render(err_cases[i].tpl, err_cases[i].ctx, err, sizeof err, &raised);
    ck_assert_msg(!s, "case %zu rendered: %s", i, s);
    ck_assert_msg(strstr(err, err_cases[i].err) != NULL, "case %zu: %s\n got: %s\n exp: %s", i,
                  err_cases[i].tpl, err, err_cases[i].err);
    ck_assert_msg(!strchr(err, '\n'), "case %zu: error not one line: %s", i, err);
    ck_assert_msg(!strncmp(err, "line ", 5), "case %zu: no position: %s", i, err);
    ck_assert_int_eq(raised, err_cases[i].raised);
  }
}
END_TEST

/* hostile templates end in one line within each limit */
START_TEST(test_limits) {
  static const struct {
    const char *tpl, *err;
  } h[] = {
      {"{% for i in range(10**9) %}x{% endfor %}", "loop limit"},
      {"{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(10) %}{% endfor %}{% "
       "endfor %}{% endfor %}",
       "loop limit"},
      {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion limit"},
      {"{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + "
       "ns.s %}{% endfor %}{{ ns.s }}",
       "limit"},
      {"{{ 'x' * 100000000 }}", "output limit"},
      {"{% for i in range(100000) %}{{ "
       "'abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl"
       "mnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxy"
       "z' * 2 }}{% endfor %}",
       "output limit"},
      {"{{ 2 ** 64 }}", "integer overflow"},
  };
  for (size_t i = 0; i < sizeof h / sizeof *h; i++) {
    char err[512] = "";
    time_t t0 = time(NULL);
    char *s = render(h[i].tpl, NULL, err, sizeof err, NULL);
    ck_assert_msg(!s, "hostile %zu rendered", i);
    ck_assert_msg(strstr(err, h[i].err) && !strncmp(err, "line ", 5) && !strchr(err, '\n'),
                  "hostile %zu: %s", i, err);
    ck_assert_msg(time(NULL) - t0 < 30, "hostile %zu took %lld s", i, (long long)(time(NULL) - t0));
  }
  /* a lower step limit is honoured */
  mi_jinja_limits lim = {.max_output = 1 << 20,
                         .max_memory = 64 << 20,
                         .max_steps = 1000,
                         .max_iters = 1000000,
                         .max_depth = 8};
  mi_jinja_opts o = {.limits = &lim};
  char err[512];
  char *s = mi_jinja_render_text("{% for i in range(10000) %}{{ i }}{% endfor %}", NULL, &o, err,
                                 sizeof err, NULL);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(err, "evaluation limit: over 1000 steps"), "%s", err);
  /* nesting the parser refuses */
  char deep[4096];
  size_t k = 0;
  k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
  for (int i = 0; i < 1000; i++)
    deep[k++] = '(';
  deep[k++] = '1';
  for (int i = 0; i < 1000; i++)
    deep[k++] = ')';
  snprintf(deep + k, sizeof deep - k, " }}");
  s = mi_jinja_render_text(deep, NULL, NULL, err, sizeof err, NULL);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(err, "nested too deeply"), "%s", err);
  k = 0;
  for (int i = 0; i < 200; i++)
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{%% if 1 %%}");
  s = mi_jinja_render_text(deep, NULL, NULL, err, sizeof err, NULL);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(err, "blocks nested too deeply"), "%s", err);
}
END_TEST

static json_t *load_json(const char *rel) {
  const char *src = getenv("MI_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  ck_assert_msg(j != NULL, "%s: %s", path, je.text);
  return j;
}

static char *read_text(const char *rel) {
  const char *src = getenv("MI_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

START_TEST(test_goldens) {
  json_t *g = load_json("tests/template/golden_templates.json");
  json_t *ts = json_object_get(g, "templates"), *t;
  size_t i, total = 0;
  ck_assert_int_ge(json_array_size(ts), 8);
  json_array_foreach(ts, i, t) {
    const char *file = json_string_value(json_object_get(t, "file"));
    char rel[512];
    snprintf(rel, sizeof rel, "tests/template/templates/%s", file);
    char *text = read_text(rel);
    ck_assert_msg(!strcmp(text, json_string_value(json_object_get(t, "template"))),
                  "%s differs from the golden's template", file);
    char err[512];
    mi_jinja *tp = mi_jinja_parse(text, strlen(text), err, sizeof err);
    ck_assert_msg(tp != NULL, "%s: %s", file, err);
    size_t j;
    json_t *c;
    json_array_foreach(json_object_get(t, "cases"), j, c) {
      int raised = 0;
      mi_jinja_opts o = {0};
      char *s = mi_jinja_render(tp, json_object_get(c, "context"), &o, err, sizeof err, &raised);
      const char *exp = json_string_value(json_object_get(c, "text"));
      if (exp)
        ck_assert_msg(s && !strcmp(s, exp), "%s case %zu:\n got: %s\n exp: %s", file, j,
                      s ? s : err, exp);
      else {
        const char *e = json_string_value(json_object_get(c, "error"));
        ck_assert_msg(!s && raised && strstr(err, e), "%s case %zu: expected error '%s', got %s",
                      file, j, e, s ? s : err);
      }
      free(s);
      total++;
    }
    mi_jinja_free(tp);
    free(text);
  }
  ck_assert_int_ge(total, 70);
  json_decref(g);
}
END_TEST

/* transformers (Python Jinja2) where @huggingface/jinja 0.5.11 differs, on the real templates */
START_TEST(test_python_semantics) {
  char *q3 = read_text("tests/template/templates/qwen3.jinja");
  char err[512];
  char *s = render(q3,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                   "\"content\":\"\\n answer \\n\"}]}",
                   err, sizeof err, NULL);
  ck_assert_msg(s && strstr(s, "</think>\n\n answer \n<|im_end|>"), "%s", s ? s : err);
  free(s);
  free(q3);
  char *nemo = read_text("tests/template/templates/mistral-nemo-instruct-2407.jinja");
  int raised = 0;
  s = render(nemo,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"user\",\"content\":"
             "\"again\"}],\"bos_token\":\"<s>\"}",
             err, sizeof err, &raised);
  ck_assert_ptr_null(s);
  ck_assert_int_eq(raised, 1);
  ck_assert_msg(strstr(err, "conversation roles must alternate"), "%s", err);
  free(nemo);
}
END_TEST

/* tests/tokenizer/golden_chat.json (Qwen3 and plain ChatML) through the chat wiring's Jinja path */
static void chat_goldens(json_t *set, const char *tmpl) {
  json_t *cases = json_object_get(set, "cases"), *c;
  size_t i;
  json_array_foreach(cases, i, c) {
    json_t *m = json_object_get(c, "messages"), *x;
    mi_chat_msg msgs[16];
    size_t nm = 0, k;
    json_array_foreach(m, k, x) {
      ck_assert_uint_lt(nm, 16);
      msgs[nm++] = (mi_chat_msg){json_string_value(json_object_get(x, "role")),
                                 json_string_value(json_object_get(x, "content"))};
    }
    mi_chat_template_vars v = {
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .enable_thinking = json_is_true(json_object_get(c, "enable_thinking"))};
    char err[512];
    char *r = mi_chat_render_template(tmpl, msgs, nm, &v, err, sizeof err);
    const char *exp = json_string_value(json_object_get(c, "text"));
    ck_assert_msg(r && !strcmp(r, exp), "chat case %zu:\n got: %s\n exp: %s", i, r ? r : err, exp);
    free(r);
  }
}

START_TEST(test_chat_wiring) {
  json_t *g = load_json("tests/tokenizer/golden_chat.json");
  chat_goldens(g, json_string_value(json_object_get(g, "template")));
  json_t *plain = json_object_get(g, "plain_chatml");
  chat_goldens(plain, json_string_value(json_object_get(plain, "template")));
  json_decref(g);
  /* a Llama-3 style template the ChatML detector refuses renders through Jinja */
  const char *llama =
      "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] "
      "}}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt "
      "%}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";
  mi_chat_format f;
  ck_assert_int_ne(mi_chat_format_detect(llama, &f), 0);
  mi_chat_msg m[2] = {{"system", "S"}, {"user", "Hi"}};
  mi_chat_template_vars v = {
      .add_generation_prompt = 1, .enable_thinking = 1, .bos_token = "<|begin_of_text|>"};
  char err[512];
  char *r = mi_chat_render_template(llama, m, 2, &v, err, sizeof err);
  ck_assert_msg(r != NULL, "%s", err);
  ck_assert_str_eq(
      r,
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|"
      ">user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  free(r);
  /* the engine's one-line error, prefixed */
  r = mi_chat_render_template("{{ x | wordwrap }}", m, 2, &v, err, sizeof err);
  ck_assert_ptr_null(r);
  ck_assert_str_eq(err, "chat template line 1 col 8: unknown filter 'wordwrap'");
  r = mi_chat_render_template("{{ raise_exception('System role not supported') }}", m, 2, &v, err,
                              sizeof err);
  ck_assert_ptr_null(r);
  ck_assert_str_eq(err, "chat template line 1 col 19: System role not supported");
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite("template", "core", 120, NULL, NULL,
                        MI_CHECK_TESTS(test_units, test_errors, test_limits, test_goldens,
                                       test_python_semantics, test_chat_wiring));
}

int main(void) {
  return mi_check_run(suite());
}
