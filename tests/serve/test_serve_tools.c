/* mi-serve's tool calls on strings (core/serve/tools.c): the model's
 * text → OpenAI tool_calls, non-streamed (a message) and streamed (the
 * deltas from text pieces), for Qwen's <tool_call> blocks and Llama 3's
 * JSON form; malformed calls stay content; hostile input is bounded. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/serve/tools.h"
#include "tests/util/check_main.h"

/* The message for text; asserts its OpenAI shape. */
static json_t *message(serve_tools_fmt f, const char *text, int parallel, int *called) {
  json_t *m = serve_tools_message(f, text, strlen(text), parallel, called);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
  json_t *c = json_object_get(m, "content");
  ck_assert(json_is_string(c) || json_is_null(c));
  json_t *tc = json_object_get(m, "tool_calls");
  ck_assert(*called ? json_is_array(tc) && json_array_size(tc) > 0 : tc == NULL);
  size_t i;
  json_t *call;
  json_array_foreach(tc, i, call) {
    ck_assert_str_eq(json_string_value(json_object_get(call, "type")), "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    ck_assert_ptr_nonnull(id);
    ck_assert(!strncmp(id, "call_", 5) && strlen(id) == 29);
    json_t *fn = json_object_get(call, "function");
    ck_assert(json_is_string(json_object_get(fn, "name")));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    ck_assert_ptr_nonnull(args);
    json_t *a = json_loads(args, 0, NULL); /* a JSON object as a string */
    ck_assert(json_is_object(a));
    json_decref(a);
  }
  return m;
}

static const char *call_name(json_t *m, size_t i) {
  return json_string_value(json_object_get(
      json_object_get(json_array_get(json_object_get(m, "tool_calls"), i), "function"), "name"));
}

static json_t *call_args(json_t *m, size_t i) {
  const char *s = json_string_value(json_object_get(
      json_object_get(json_array_get(json_object_get(m, "tool_calls"), i), "function"),
      "arguments"));
  return json_loads(s, 0, NULL);
}

START_TEST(qwen_several_calls_and_text) {
  const char *t = "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                  "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": "
                  "\"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>";
  int called;
  json_t *m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert_int_eq(called, 1);
  ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "Let me check both.");
  ck_assert_int_eq(json_array_size(json_object_get(m, "tool_calls")), 2);
  ck_assert_str_eq(call_name(m, 0), "get_weather");
  ck_assert_str_eq(call_name(m, 1), "get_time");
  json_t *a = call_args(m, 0), *want = json_pack("{s:s,s:i}", "city", "Paris", "days", 3);
  ck_assert(json_equal(a, want));
  json_decref(a);
  json_decref(want);
  /* ids are unique */
  ck_assert_str_ne(
      json_string_value(json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "id")),
      json_string_value(
          json_object_get(json_array_get(json_object_get(m, "tool_calls"), 1), "id")));
  json_decref(m);

  /* parallel_tool_calls false: the first call only */
  m = message(SERVE_TOOLS_TAGGED, t, 0, &called);
  ck_assert_int_eq(json_array_size(json_object_get(m, "tool_calls")), 1);
  ck_assert_str_eq(call_name(m, 0), "get_weather");
  json_decref(m);

  /* only calls: content null; an unclosed last block runs to the end; no arguments: {} */
  m = message(SERVE_TOOLS_TAGGED,
              "<tool_call>\n{\"name\": \"a\", \"arguments\": "
              "{}}\n</tool_call>\n\n<tool_call>\n{\"name\": \"b\"}",
              1, &called);
  ck_assert(called && json_is_null(json_object_get(m, "content")));
  ck_assert_str_eq(call_name(m, 1), "b");
  a = call_args(m, 1);
  ck_assert(json_is_object(a) && json_object_size(a) == 0);
  json_decref(a);
  json_decref(m);

  /* arguments given as a JSON string holding an object */
  m = message(SERVE_TOOLS_TAGGED,
              "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call>", 1,
              &called);
  a = call_args(m, 0);
  ck_assert_int_eq(json_integer_value(json_object_get(a, "x")), 1);
  json_decref(a);
  json_decref(m);
}
END_TEST

START_TEST(malformed_stays_content) {
  static const char *bad[] = {
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>", /* not JSON */
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                        /* no name */
      "<tool_call>\n{\"name\": 5}\n</tool_call>",                         /* name not a string */
      "<tool_call>\n{\"name\": \"\"}\n</tool_call>",                      /* empty name */
      "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>", /* args not an object */
      "<tool_call>\n[\"f\"]\n</tool_call>",
      "<tool_call>",
      "<tool_call></tool_call>",
      /* one good, one bad: all content (vLLM) */
      "<tool_call>{\"name\":\"f\"}</tool_call><tool_call>{oops}</tool_call>",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int called = 1;
    json_t *m = message(SERVE_TOOLS_TAGGED, bad[i], 1, &called);
    ck_assert_int_eq(called, 0);
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")), bad[i]);
    json_decref(m);
  }
  /* no format: plain text, a call or not */
  int called = 1;
  json_t *m = message(SERVE_TOOLS_NONE, "<tool_call>{\"name\":\"f\"}</tool_call>", 1, &called);
  ck_assert_int_eq(called, 0);
  json_decref(m);
  /* plain text */
  m = message(SERVE_TOOLS_TAGGED, "The weather is fine.", 1, &called);
  ck_assert_int_eq(called, 0);
  ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "The weather is fine.");
  json_decref(m);
}
END_TEST

START_TEST(llama_json_form) {
  int called;
  json_t *m =
      message(SERVE_TOOLS_BARE_JSON,
              "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 1, &called);
  ck_assert(called && json_is_null(json_object_get(m, "content")));
  ck_assert_str_eq(call_name(m, 0), "get_weather");
  json_t *a = call_args(m, 0);
  ck_assert_str_eq(json_string_value(json_object_get(a, "city")), "Oslo");
  json_decref(a);
  json_decref(m);
  /* after <|python_tag|>, several separated by ';', "arguments" also taken */
  m = message(
      SERVE_TOOLS_BARE_JSON,
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": "
      "{\"k\": [1, 2]}}",
      1, &called);
  ck_assert_int_eq(json_array_size(json_object_get(m, "tool_calls")), 2);
  ck_assert_str_eq(call_name(m, 1), "b");
  json_decref(m);
  /* text, text after the object, a bad object: content */
  static const char *plain[] = {"Sure, {\"name\": \"a\"}",
                                "{\"name\": \"a\"} and more",
                                "{\"name\": \"a\", \"parameters\": 3}",
                                "{\"nam",
                                "<|python_tag|>",
                                "{\"x\": 1}"};
  for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
    m = message(SERVE_TOOLS_BARE_JSON, plain[i], 1, &called);
    ck_assert_msg(!called, "%s", plain[i]);
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")), plain[i]);
    json_decref(m);
  }
}
END_TEST

START_TEST(unicode_arguments) {
  const char *t =
      "<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"h\xc3\xa9llo "
      "\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80\", \"esc\": \"\\u00e9\\n\"}}\n</tool_call>";
  int called;
  json_t *m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert(called);
  json_t *a = call_args(m, 0);
  ck_assert_str_eq(json_string_value(json_object_get(a, "text")),
                   "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80");
  ck_assert_str_eq(json_string_value(json_object_get(a, "esc")), "\xc3\xa9\n");
  json_decref(a);
  json_decref(m);
  /* bytes that are not UTF-8 outside a call: content, never a crash */
  m = message(SERVE_TOOLS_TAGGED, "\xff\xfe<tool_call>{\"name\":\"f\"}</tool_call>", 1, &called);
  ck_assert(called && json_is_string(json_object_get(m, "content")));
  json_decref(m);
}
END_TEST

START_TEST(hostile_bounded) {
  /* deep nesting: refused as a call (content), no crash */
  size_t depth = 100000;
  char *t = malloc(2 * depth + 200);
  strcpy(t, "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":");
  size_t n = strlen(t);
  for (size_t i = 0; i < depth; i++)
    t[n++] = '[';
  for (size_t i = 0; i < depth; i++)
    t[n++] = ']';
  strcpy(t + n, "}}</tool_call>");
  int called = 1;
  json_t *m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert_int_eq(called, 0);
  json_decref(m);
  /* 70 levels: over SERVE_MAX_JSON_DEPTH's 64, content */
  strcpy(t, "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":");
  n = strlen(t);
  for (size_t i = 0; i < 70; i++)
    t[n++] = '[';
  for (size_t i = 0; i < 70; i++)
    t[n++] = ']';
  strcpy(t + n, "}}</tool_call>");
  m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert_int_eq(called, 0);
  json_decref(m);
  free(t);
  /* many calls: over SERVE_MAX_TOOL_CALLS is content; a huge argument string parses */
  const char *one = "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>";
  size_t k = SERVE_MAX_TOOL_CALLS + 1;
  t = malloc(k * strlen(one) + 1);
  t[0] = 0;
  for (size_t i = 0; i < k; i++)
    strcat(t, one);
  m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert_int_eq(called, 0);
  json_decref(m);
  t[(k - 1) * strlen(one)] = 0;
  m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert_int_eq(json_array_size(json_object_get(m, "tool_calls")), SERVE_MAX_TOOL_CALLS);
  json_decref(m);
  free(t);
  size_t big = 1 << 20;
  t = malloc(big + 100);
  strcpy(t, "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"");
  n = strlen(t);
  memset(t + n, 'x', big);
  strcpy(t + n + big, "\"}}</tool_call>");
  m = message(SERVE_TOOLS_TAGGED, t, 1, &called);
  ck_assert(called);
  json_decref(m);
  free(t);
}
END_TEST

/* Streams text in pieces of `step` bytes; returns the deltas sent, in order
 * ({content} for released text, then the end's), with *called. */
static json_t *stream(serve_tools_fmt f, const char *text, size_t step, int *called) {
  serve_tool_stream s;
  serve_tool_stream_init(&s, f, 1);
  json_t *out = json_array();
  size_t len = strlen(text);
  for (size_t i = 0; i < len; i += step) {
    char *o;
    size_t ol;
    ck_assert_int_eq(serve_tool_stream_feed(&s, text + i, i + step < len ? step : len - i, &o, &ol),
                     0);
    if (ol) json_array_append_new(out, json_pack("{s:s%}", "content", o, ol));
    free(o);
  }
  json_t *end = serve_tool_stream_end(&s, called);
  ck_assert_ptr_nonnull(end);
  json_array_extend(out, end);
  json_decref(end);
  serve_tool_stream_free(&s);
  return out;
}

/* What a client assembles from the deltas: {content, tool_calls}. */
static json_t *assemble(json_t *deltas) {
  json_t *calls = json_array();
  char content[4096] = "";
  size_t i;
  json_t *d;
  json_array_foreach(deltas, i, d) {
    json_t *c = json_object_get(d, "content");
    if (c) strcat(content, json_string_value(c));
    json_t *tc = json_object_get(d, "tool_calls");
    if (!tc) continue;
    ck_assert_int_eq(json_array_size(tc), 1);
    json_t *e = json_array_get(tc, 0), *fn = json_object_get(e, "function");
    size_t idx = (size_t)json_integer_value(json_object_get(e, "index"));
    if (idx == json_array_size(calls)) { /* a new call: id, type, name first */
      ck_assert(json_is_string(json_object_get(e, "id")));
      ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "function");
      json_array_append_new(
          calls, json_pack("{s:O,s:s}", "name", json_object_get(fn, "name"), "arguments", ""));
    }
    json_t *call = json_array_get(calls, idx);
    ck_assert_ptr_nonnull(call);
    char args[4096];
    snprintf(args, sizeof args, "%s%s", json_string_value(json_object_get(call, "arguments")),
             json_string_value(json_object_get(fn, "arguments")));
    json_object_set_new(call, "arguments", json_string(args));
  }
  return json_pack("{s:s,s:o}", "content", content, "tool_calls", calls);
}

START_TEST(streamed_equals_plain) {
  static const struct {
    serve_tools_fmt f;
    const char *text;
  } cases[] = {
      {SERVE_TOOLS_TAGGED, "Checking.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": "
                         "\"\xc3\xa9\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", "
                         "\"arguments\": {}}\n</tool_call>"},
      {SERVE_TOOLS_TAGGED, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1}}\n</tool_call>"},
      {SERVE_TOOLS_TAGGED, "No call here, only a < sign and <tool_ and <tool_call"},
      {SERVE_TOOLS_TAGGED, "Text <tool_call>{broken</tool_call> after"},
      {SERVE_TOOLS_BARE_JSON, "  {\"name\": \"w\", \"parameters\": {\"c\": \"x\"}}"},
      {SERVE_TOOLS_BARE_JSON, "<|python_tag|>{\"name\": \"w\", \"parameters\": {}}"},
      {SERVE_TOOLS_BARE_JSON, "Hello {\"name\": \"w\"}"},
      {SERVE_TOOLS_BARE_JSON, "<|python"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int pc;
    json_t *m = message(cases[i].f, cases[i].text, 1, &pc);
    for (size_t step = 1; step <= 7; step += 3) {
      int sc;
      json_t *d = stream(cases[i].f, cases[i].text, step, &sc);
      json_t *got = assemble(d);
      ck_assert_int_eq(sc, pc);
      json_t *want_calls = json_object_get(m, "tool_calls");
      json_t *calls = json_object_get(got, "tool_calls");
      ck_assert_int_eq(json_array_size(calls), json_array_size(want_calls));
      for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *fn = json_object_get(json_array_get(want_calls, k), "function");
        ck_assert(json_equal(json_object_get(json_array_get(calls, k), "name"),
                             json_object_get(fn, "name")));
        ck_assert(json_equal(json_object_get(json_array_get(calls, k), "arguments"),
                             json_object_get(fn, "arguments")));
      }
      /* the content: the same text (a streamed answer is not trimmed) */
      json_t *wc = json_object_get(m, "content");
      const char *gc = json_string_value(json_object_get(got, "content"));
      if (!pc) {
        ck_assert_str_eq(gc, cases[i].text);
      } else if (json_is_null(wc)) {
        ck_assert_msg(strspn(gc, " \n") == strlen(gc), "case %zu: '%s'", i, gc);
      } else {
        ck_assert_msg(strstr(gc, json_string_value(wc)) != NULL, "case %zu: '%s'", i, gc);
      }
      json_decref(got);
      json_decref(d);
    }
    json_decref(m);
  }
}
END_TEST

START_TEST(detect_by_template_text) {
  ck_assert_int_eq(serve_tools_detect(NULL), SERVE_TOOLS_NONE);
  ck_assert_int_eq(serve_tools_detect("{{ messages }}"), SERVE_TOOLS_NONE);
  ck_assert_int_eq(serve_tools_detect("{% if tools %}<tool_call>\n{{ x }}{% endif %}"),
                   SERVE_TOOLS_TAGGED);
  ck_assert_int_eq(serve_tools_detect("{% if tools %}Respond in the format {\"name\": function "
                                      "name, \"parameters\": dictionary}{% endif %}"),
                   SERVE_TOOLS_BARE_JSON);
}
END_TEST

int main(void) {
  Suite *s = suite_create("serve_tools");
  TCase *tc = tcase_create("parse");
  mi_check_add(tc, MI_CHECK_TESTS(qwen_several_calls_and_text, malformed_stays_content,
                                  llama_json_form, unicode_arguments, hostile_bounded,
                                  streamed_equals_plain, detect_by_template_text));
  suite_add_tcase(s, tc);
  return mi_check_run(s);
}
