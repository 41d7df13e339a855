/* mi-serve's request parser (request.h). */
#include "core/serve/request.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(serve_err *e, int status, const char *param, const char *code, const char *fmt,
                ...) {
  e->status = status;
  e->type = "invalid_request_error";
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  /* one printable ASCII line: jansson's messages quote the input, which may
   * hold newlines or bytes that are not UTF-8 */
  for (char *c = e->message; *c; c++)
    if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
  return -1;
}

/* A field that may be absent or null. */
static json_t *field(json_t *root, const char *name) {
  json_t *v = json_object_get(root, name);
  return v && !json_is_null(v) ? v : NULL;
}

static int get_number(json_t *root, const char *name, double lo, double hi, double *out,
                      serve_err *e) {
  json_t *v = field(root, name);
  if (!v) return 0;
  if (!json_is_number(v))
    return fail(e, 400, name, "invalid_type", "'%s' must be a number", name);
  double d = json_number_value(v);
  if (!(d >= lo && d <= hi))
    return fail(e, 400, name, "invalid_value", "'%s' must be in [%g, %g], got %g", name, lo, hi,
                d);
  *out = d;
  return 0;
}

static int get_int(json_t *root, const char *name, int64_t lo, int64_t hi, int64_t *out,
                   serve_err *e) {
  json_t *v = field(root, name);
  if (!v) return 0;
  if (!json_is_integer(v))
    return fail(e, 400, name, "invalid_type", "'%s' must be an integer", name);
  int64_t i = json_integer_value(v);
  if (i < lo || i > hi)
    return fail(e, 400, name, "invalid_value", "'%s' must be in [%lld, %lld], got %lld", name,
                (long long)lo, (long long)hi, (long long)i);
  *out = i;
  return 0;
}

static int get_bool(json_t *root, const char *name, int *out, serve_err *e) {
  json_t *v = field(root, name);
  if (!v) return 0;
  if (!json_is_boolean(v))
    return fail(e, 400, name, "invalid_type", "'%s' must be a boolean", name);
  *out = json_is_true(v);
  return 0;
}

/* A message's content: a string, or an array of {type:"text", text} parts. */
static int content_text(json_t *c, size_t idx, char **out, serve_err *e) {
  char param[64];
  snprintf(param, sizeof param, "messages[%zu].content", idx);
  if (!c || json_is_null(c)) {
    *out = strdup("");
    return *out ? 0 : fail(e, 500, NULL, NULL, "out of memory");
  }
  if (json_is_string(c)) {
    size_t n = json_string_length(c);
    if (memchr(json_string_value(c), 0, n))
      return fail(e, 400, param, "invalid_value", "'%s' holds a NUL character", param);
    *out = strdup(json_string_value(c));
    return *out ? 0 : fail(e, 500, NULL, NULL, "out of memory");
  }
  if (!json_is_array(c))
    return fail(e, 400, param, "invalid_type", "'%s' must be a string or an array of text parts",
                param);
  size_t total = 0, i;
  json_t *part;
  json_array_foreach(c, i, part) {
    json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
    if (!json_is_object(part) || !json_is_string(type) ||
        strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
      return fail(e, 400, param, "invalid_value",
                  "'%s[%zu]' must be {\"type\":\"text\",\"text\":STRING} (only text is supported)",
                  param, i);
    if (memchr(json_string_value(text), 0, json_string_length(text)))
      return fail(e, 400, param, "invalid_value", "'%s' holds a NUL character", param);
    total += json_string_length(text);
  }
  char *s = malloc(total + 1);
  if (!s) return fail(e, 500, NULL, NULL, "out of memory");
  size_t at = 0;
  json_array_foreach(c, i, part) {
    json_t *text = json_object_get(part, "text");
    memcpy(s + at, json_string_value(text), json_string_length(text));
    at += json_string_length(text);
  }
  s[at] = 0;
  *out = s;
  return 0;
}

int serve_json_too_deep(const json_t *v, int max) {
  if (max < 0) return 1;
  size_t i;
  const char *k;
  json_t *m;
  if (json_is_array(v)) {
    json_array_foreach((json_t *)v, i, m) if (serve_json_too_deep(m, max - 1)) return 1;
  } else if (json_is_object(v)) {
    json_object_foreach((json_t *)v, k, m) if (serve_json_too_deep(m, max - 1)) return 1;
  }
  return 0;
}

/* A string field: absent (NULL, 0), a string (0), else -1 with e set. */
static int opt_string(json_t *obj, const char *name, const char *param, json_t **out,
                      serve_err *e) {
  json_t *v = field(obj, name);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_string(v) || memchr(json_string_value(v), 0, json_string_length(v)))
    return fail(e, 400, param, "invalid_type", "'%s' must be a string", param);
  *out = v;
  return 0;
}

/* A function name: a non-empty string without NUL, at most 256 bytes. */
static int check_name(json_t *v, const char *param, serve_err *e) {
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 256 ||
      memchr(json_string_value(v), 0, json_string_length(v)))
    return fail(e, 400, param, json_is_string(v) ? "invalid_value" : "invalid_type",
                "'%s' must be a non-empty string of at most 256 bytes", param);
  return 0;
}

/* What the template sees beyond role and content: an assistant's
 * tool_calls (arguments parsed), a tool result's tool_call_id and name,
 * an assistant's reasoning_content. */
static int template_extras(json_t *msg, json_t *tm, const char *role, size_t i, serve_err *e) {
  char param[96];
  json_t *v, *s;
  if ((v = field(msg, "tool_calls")) && !(json_is_array(v) && json_array_size(v) == 0)) {
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (strcmp(role, "assistant"))
      return fail(e, 400, param, "invalid_value", "'%s' is allowed on assistant messages only",
                  param);
    if (!json_is_array(v))
      return fail(e, 400, param, "invalid_type", "'%s' must be an array", param);
    if (json_array_size(v) > SERVE_MAX_TOOLS)
      return fail(e, 400, param, "invalid_value", "'%s' holds more than %d calls", param,
                  SERVE_MAX_TOOLS);
    json_t *calls = json_array();
    if (!calls || json_object_set_new(tm, "tool_calls", calls))
      return fail(e, 500, NULL, NULL, "out of memory");
    size_t j;
    json_t *tc;
    json_array_foreach(v, j, tc) {
      snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
      if (!json_is_object(tc))
        return fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
      json_t *type = field(tc, "type"), *fn = json_object_get(tc, "function"), *id;
      if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
        return fail(e, 400, param, "invalid_value", "'%s.type' must be \"function\"", param);
      char p2[128];
      snprintf(p2, sizeof p2, "%s.id", param);
      if (opt_string(tc, "id", p2, &id, e)) return -1;
      snprintf(p2, sizeof p2, "%s.function", param);
      if (!json_is_object(fn))
        return fail(e, 400, p2, "invalid_type", "'%s' must be an object {name, arguments}", p2);
      snprintf(p2, sizeof p2, "%s.function.name", param);
      json_t *name = json_object_get(fn, "name");
      if (check_name(name, p2, e)) return -1;
      snprintf(p2, sizeof p2, "%s.function.arguments", param);
      json_t *as = json_object_get(fn, "arguments"), *args;
      if (!json_is_string(as))
        return fail(e, 400, p2, "invalid_type", "'%s' must be a string (a JSON object)", p2);
      if (json_string_length(as) == 0) {
        args = json_object();
      } else {
        args = json_loadb(json_string_value(as), json_string_length(as), JSON_REJECT_DUPLICATES,
                          NULL);
        if (!json_is_object(args)) {
          json_decref(args);
          return fail(e, 400, p2, "invalid_value", "'%s' must be a JSON object encoded as a string",
                      p2);
        }
        if (serve_json_too_deep(args, SERVE_MAX_JSON_DEPTH)) {
          json_decref(args);
          return fail(e, 400, p2, "invalid_value", "'%s' nests deeper than %d", p2,
                      SERVE_MAX_JSON_DEPTH);
        }
      }
      json_t *call = json_pack("{s:s,s:{s:O,s:o}}", "type", "function", "function", "name", name,
                               "arguments", args);
      if (!call || (id && json_object_set(call, "id", id)) || json_array_append_new(calls, call))
        return fail(e, 500, NULL, NULL, "out of memory");
    }
  }
  if (!strcmp(role, "tool")) {
    snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
    v = field(msg, "tool_call_id");
    if (!v)
      return fail(e, 400, param, "missing_required_parameter", "'%s' is required on tool messages",
                  param);
    if (opt_string(msg, "tool_call_id", param, &s, e)) return -1;
    if (json_object_set(tm, "tool_call_id", s)) return fail(e, 500, NULL, NULL, "out of memory");
  }
  if (!strcmp(role, "tool") || !strcmp(role, "assistant")) {
    snprintf(param, sizeof param, "messages[%zu].name", i);
    if (opt_string(msg, "name", param, &s, e)) return -1;
    if (s && json_object_set(tm, "name", s)) return fail(e, 500, NULL, NULL, "out of memory");
  }
  if (!strcmp(role, "assistant")) {
    snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
    if (opt_string(msg, "reasoning_content", param, &s, e)) return -1;
    if (s && json_object_set(tm, "reasoning_content", s))
      return fail(e, 500, NULL, NULL, "out of memory");
  }
  return 0;
}

/* tools: [{type:"function", function:{name, description?, parameters?}}],
 * passed to the template as sent; tool_choice; parallel_tool_calls. */
static int parse_tools(json_t *root, serve_req *r, serve_err *e) {
  json_t *v = field(root, "tools");
  r->parallel_tool_calls = 1;
  if (v) {
    if (!json_is_array(v))
      return fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    if (json_array_size(v) > SERVE_MAX_TOOLS)
      return fail(e, 400, "tools", "invalid_value", "'tools' holds more than %d tools",
                  SERVE_MAX_TOOLS);
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
      char param[96], p2[128];
      snprintf(param, sizeof param, "tools[%zu]", i);
      json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function"), *s;
      if (!json_is_object(t) || !json_is_string(type) ||
          strcmp(json_string_value(type), "function") || !json_is_object(fn))
        return fail(e, 400, param, "invalid_value",
                    "'%s' must be {\"type\":\"function\",\"function\":{\"name\":...}}", param);
      snprintf(p2, sizeof p2, "%s.function.name", param);
      if (check_name(json_object_get(fn, "name"), p2, e)) return -1;
      snprintf(p2, sizeof p2, "%s.function.description", param);
      if (opt_string(fn, "description", p2, &s, e)) return -1;
      snprintf(p2, sizeof p2, "%s.function.parameters", param);
      json_t *pa = field(fn, "parameters");
      if (pa && !json_is_object(pa))
        return fail(e, 400, p2, "invalid_type", "'%s' must be an object (a JSON Schema)", p2);
      if (pa && serve_json_too_deep(pa, SERVE_MAX_JSON_DEPTH))
        return fail(e, 400, p2, "invalid_value", "'%s' nests deeper than %d", p2,
                    SERVE_MAX_JSON_DEPTH);
    }
    if (json_array_size(v) > 0) r->tools = v;
  }
  if ((v = field(root, "tool_choice"))) {
    if (json_is_string(v) && !strcmp(json_string_value(v), "none")) {
      r->tool_choice = SERVE_TOOL_CHOICE_NONE;
    } else if (json_is_string(v) && !strcmp(json_string_value(v), "auto")) {
      r->tool_choice = SERVE_TOOL_CHOICE_AUTO;
    } else if (json_is_string(v) && !strcmp(json_string_value(v), "required")) {
      r->tool_choice = SERVE_TOOL_CHOICE_REQUIRED;
    } else if (json_is_object(v)) {
      json_t *fn = json_object_get(v, "function");
      const char *name = json_string_value(json_object_get(fn, "name"));
      if (!json_is_object(fn) || !name)
        return fail(e, 400, "tool_choice", "invalid_value",
                    "'tool_choice' naming a function must be "
                    "{\"type\":\"function\",\"function\":{\"name\":...}}");
      r->tool_choice = SERVE_TOOL_CHOICE_NAMED;
      r->tool_name = name;
    } else {
      return fail(e, 400, "tool_choice", "invalid_value",
                  "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                  "{\"type\":\"function\",\"function\":{\"name\":...}}");
    }
  }
  if (get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e)) return -1;
  if ((r->tool_choice == SERVE_TOOL_CHOICE_REQUIRED || r->tool_choice == SERVE_TOOL_CHOICE_NAMED) &&
      !r->tools)
    return fail(e, 400, "tool_choice", "invalid_value",
                "'tool_choice' %s needs 'tools'",
                r->tool_choice == SERVE_TOOL_CHOICE_NAMED ? "naming a function" : "\"required\"");
  if (r->tool_choice == SERVE_TOOL_CHOICE_NAMED) {
    size_t i;
    json_t *t;
    int found = 0;
    json_array_foreach((json_t *)r->tools, i, t) {
      const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
      found |= n && !strcmp(n, r->tool_name);
    }
    if (!found)
      return fail(e, 400, "tool_choice", "invalid_value",
                  "'tool_choice' names '%s', which is not among 'tools'", r->tool_name);
  }
  return 0;
}

static int parse_messages(json_t *root, serve_req *r, serve_err *e) {
  json_t *m = field(root, "messages");
  if (!m) return fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
  if (!json_is_array(m))
    return fail(e, 400, "messages", "invalid_type", "'messages' must be an array");
  size_t n = json_array_size(m);
  if (n == 0)
    return fail(e, 400, "messages", "invalid_value", "'messages' must hold at least one message");
  if (n > SERVE_MAX_MESSAGES)
    return fail(e, 400, "messages", "invalid_value", "'messages' holds more than %d messages",
                SERVE_MAX_MESSAGES);
  r->msgs = calloc(n, sizeof *r->msgs);
  r->tmpl_msgs = json_array();
  if (!r->msgs || !r->tmpl_msgs) return fail(e, 500, NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *msg = json_array_get(m, i);
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(msg))
      return fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
    json_t *role = json_object_get(msg, "role");
    if (!json_is_string(role)) {
      snprintf(param, sizeof param, "messages[%zu].role", i);
      return fail(e, 400, param, "invalid_type", "'%s' must be a string", param);
    }
    const char *rs = json_string_value(role);
    if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") &&
        strcmp(rs, "assistant") && strcmp(rs, "tool")) {
      snprintf(param, sizeof param, "messages[%zu].role", i);
      return fail(e, 400, param, "invalid_value",
                  "'%s' must be one of system, developer, user, assistant, tool", param);
    }
    r->msgs[i].role = strcmp(rs, "developer") == 0 ? "system" : rs;
    if (content_text(json_object_get(msg, "content"), i, &r->msgs[i].content, e) != 0) return -1;
    r->n_msgs = i + 1;
    json_t *tm = json_object();
    if (!tm || json_array_append_new((json_t *)r->tmpl_msgs, tm) ||
        json_object_set_new(tm, "role", json_string(r->msgs[i].role)) ||
        json_object_set_new(tm, "content", json_string(r->msgs[i].content)))
      return fail(e, 500, NULL, NULL, "out of memory");
    if (template_extras(msg, tm, rs, i, e)) return -1;
  }
  return 0;
}

static int parse_prompt(json_t *root, serve_req *r, serve_err *e) {
  json_t *p = field(root, "prompt");
  if (!p) return fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
  if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
    p = json_array_get(p, 0);
  if (json_is_string(p)) {
    if (memchr(json_string_value(p), 0, json_string_length(p)))
      return fail(e, 400, "prompt", "invalid_value", "'prompt' holds a NUL character");
    r->prompt = json_string_value(p);
    return 0;
  }
  if (json_is_array(p) && json_array_size(p) > 0) {
    size_t n = json_array_size(p);
    r->prompt_ids = malloc(n * sizeof(int32_t));
    if (!r->prompt_ids) return fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
      json_t *v = json_array_get(p, i);
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return fail(e, 400, "prompt", "invalid_type",
                    "'prompt' must be a string, one string in an array, or an array of token ids");
      r->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    r->n_prompt_ids = n;
    return 0;
  }
  return fail(e, 400, "prompt", "invalid_type",
              "'prompt' must be a string, one string in an array, or an array of token ids "
              "(one prompt per request)");
}

/* Fields OpenAI-style clients send that would change the output and that
 * this server does not implement: refused with a 400 naming them rather
 * than silently ignored. A value that means "off" passes, so clients that
 * send every knob at its default (llama.cpp's, vLLM's) still work. Fields
 * that cannot change the output (user, metadata, store, service_tier,
 * safety_identifier, prompt_cache_key, cache_prompt, id_slot, n_keep,
 * timings_per_token, ...) and fields nobody here knows are ignored. */
enum {
  U_ANY,      /* refused whatever the value */
  U_NUM,      /* refused unless the number `off` */
  U_FALSE,    /* refused unless false */
  U_TRUE,     /* refused unless true */
  U_EMPTY,    /* refused unless an empty array, object or string */
  U_NONEAUTO, /* refused unless "none" or "auto" (meaningless without tools) */
  U_TEXTONLY, /* refused unless an array of "text" */
};

typedef struct unsupported {
  const char *name;
  int mode;
  double off;
  int chat_only;
  const char *why;
} unsupported;

static const unsupported UNSUPPORTED[] = {
    {"grammar", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"json_schema", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"guided_json", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"guided_regex", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"guided_choice", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"guided_grammar", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"structured_outputs", U_ANY, 0, 0, "needs grammar-constrained sampling"},
    {"functions", U_EMPTY, 0, 0, "function calls are not supported"},
    {"function_call", U_NONEAUTO, 0, 0, "function calls are not supported"},
    {"prediction", U_ANY, 0, 0, "predicted outputs are not supported"},
    {"audio", U_ANY, 0, 0, "only text is supported"},
    {"modalities", U_TEXTONLY, 0, 0, "only [\"text\"] is supported"},
    {"web_search_options", U_ANY, 0, 0, "there is no web search"},
    {"reasoning_effort", U_ANY, 0, 0, "use chat_template_kwargs.enable_thinking"},
    {"verbosity", U_ANY, 0, 0, NULL},
    {"echo", U_FALSE, 0, 1, NULL}, /* vLLM's chat echo; completions check it below */
    {"prompt_logprobs", U_ANY, 0, 0, NULL},
    {"min_tokens", U_NUM, 0, 0, NULL},
    {"use_beam_search", U_FALSE, 0, 0, NULL},
    {"length_penalty", U_NUM, 1, 0, NULL},
    {"repetition_penalty", U_NUM, 1, 0, "use repeat_penalty"},
    {"stop_token_ids", U_EMPTY, 0, 0, NULL},
    {"bad_words", U_EMPTY, 0, 0, "use logit_bias"},
    {"allowed_token_ids", U_EMPTY, 0, 0, "use logit_bias"},
    {"include_stop_str_in_output", U_FALSE, 0, 0, NULL},
    {"truncate_prompt_tokens", U_ANY, 0, 0, NULL},
    {"add_generation_prompt", U_TRUE, 0, 1, NULL},
    {"continue_final_message", U_FALSE, 0, 1, NULL},
    {"chat_template", U_ANY, 0, 0, "the model folder's template is used"},
    {"documents", U_EMPTY, 0, 0, NULL},
    {"n_predict", U_ANY, 0, 0, "use max_tokens"},
    {"n_probs", U_NUM, 0, 0, "use logprobs"},
    {"typical_p", U_NUM, 1, 0, NULL},
    {"tfs_z", U_NUM, 1, 0, NULL},
    {"mirostat", U_NUM, 0, 0, NULL},
    {"dynatemp_range", U_NUM, 0, 0, NULL},
    {"dry_multiplier", U_NUM, 0, 0, NULL},
    {"xtc_probability", U_NUM, 0, 0, NULL},
    {"top_n_sigma", U_NUM, -1, 0, NULL},
    {"repeat_last_n", U_NUM, 64, 0, "the penalty looks at the last 64 tokens"},
    {"penalty_last_n", U_NUM, 64, 0, "the penalty looks at the last 64 tokens"},
    {"samplers", U_ANY, 0, 0, "the sampler order is fixed"},
    {"lora", U_EMPTY, 0, 0, NULL},
    {"t_max_predict_ms", U_NUM, 0, 0, "use max_tokens"},
};

static int is_off(json_t *v, const unsupported *u) {
  switch (u->mode) {
  case U_NUM: return json_is_number(v) && json_number_value(v) == u->off;
  case U_FALSE: return json_is_false(v);
  case U_TRUE: return json_is_true(v);
  case U_EMPTY:
    return (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_string(v) && json_string_length(v) == 0);
  case U_NONEAUTO:
    return json_is_string(v) &&
           (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "auto"));
  case U_TEXTONLY: {
    if (!json_is_array(v)) return 0;
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
      if (!json_is_string(m) || strcmp(json_string_value(m), "text")) return 0;
    }
    return 1;
  }
  default: return 0;
  }
}

/* response_format: text, json_object (any JSON object), or json_schema
 * {name, schema, strict?} (the schema is compiled by the caller). */
static int parse_response_format(json_t *root, serve_req *r, serve_err *e) {
  json_t *v = field(root, "response_format");
  if (!v) return 0;
  const char *ts = json_string_value(json_object_get(v, "type")); /* checked: a string */
  if (!ts) return 0;
  if (!strcmp(ts, "json_object")) {
    r->json_mode = 1;
  } else if (!strcmp(ts, "json_schema")) {
    json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
      return fail(e, 400, "response_format.json_schema", "invalid_type",
                  "'response_format.json_schema' must be an object with a 'schema'");
    json_t *sch = json_object_get(js, "schema");
    if (!sch) sch = json_object_get(js, "json_schema"); /* vLLM's older spelling */
    if (!json_is_object(sch) && !json_is_boolean(sch))
      return fail(e, 400, "response_format.json_schema.schema", "invalid_type",
                  "'response_format.json_schema.schema' must be a JSON Schema object");
    if (json_is_false(sch))
      return fail(e, 400, "response_format.json_schema.schema", "invalid_value",
                  "'response_format.json_schema.schema' false accepts no output");
    r->json_mode = 2;
    r->json_schema = sch;
  }
  return 0;
}

static int refuse_unsupported(json_t *root, int chat, serve_err *e) {
  json_t *v;
  if ((v = field(root, "response_format"))) {
    json_t *t = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(t))
      return fail(e, 400, "response_format", "invalid_type",
                  "'response_format' must be an object with a string 'type'");
    const char *ts = json_string_value(t);
    if (strcmp(ts, "text") && strcmp(ts, "json_object") && strcmp(ts, "json_schema"))
      return fail(e, 400, "response_format", "invalid_value",
                  "'response_format.type' must be text, json_object or json_schema");
  }
  for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; i++) {
    const unsupported *u = &UNSUPPORTED[i];
    if (u->chat_only && !chat) continue;
    if (!(v = field(root, u->name)) || is_off(v, u)) continue;
    char off[64] = "";
    if (u->mode == U_NUM) snprintf(off, sizeof off, "only %g, its off value, is accepted", u->off);
    return fail(e, 400, u->name, "unsupported_parameter", "'%s' is not supported%s%s%s%s%s",
                u->name, u->why || off[0] ? " (" : "", u->why ? u->why : "",
                u->why && off[0] ? "; " : "", off, u->why || off[0] ? ")" : "");
  }
  return 0;
}

/* logit_bias: {"TOKEN_ID": BIAS, ...}, ids as decimal strings, biases in
 * [-100, 100] (OpenAI's). The vocabulary bound is the server's to check. */
static int parse_logit_bias(json_t *root, serve_req *r, serve_err *e) {
  json_t *v = field(root, "logit_bias");
  if (!v) return 0;
  if (!json_is_object(v))
    return fail(e, 400, "logit_bias", "invalid_type",
                "'logit_bias' must be an object of token ids (strings) to numbers in [-100, 100]");
  size_t n = json_object_size(v);
  if (n > SERVE_MAX_LOGIT_BIAS)
    return fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' holds more than %d entries",
                SERVE_MAX_LOGIT_BIAS);
  if (n == 0) return 0;
  r->bias_ids = malloc(n * sizeof(int32_t));
  r->bias_vals = malloc(n * sizeof(float));
  if (!r->bias_ids || !r->bias_vals) return fail(e, 500, NULL, NULL, "out of memory");
  const char *key;
  json_t *b;
  json_object_foreach(v, key, b) {
    size_t kl = strlen(key);
    int ok = kl > 0 && kl <= 10 && (key[0] != '0' || kl == 1);
    for (size_t i = 0; ok && i < kl; i++) ok = key[i] >= '0' && key[i] <= '9';
    long long id = ok ? strtoll(key, NULL, 10) : -1;
    if (!ok || id > INT32_MAX)
      return fail(e, 400, "logit_bias", "invalid_value",
                  "'logit_bias' key '%.32s' is not a token id (a decimal integer)", key);
    if (!json_is_number(b) || !(json_number_value(b) >= -100 && json_number_value(b) <= 100))
      return fail(e, 400, "logit_bias", "invalid_value",
                  "'logit_bias' value for token %lld must be a number in [-100, 100]", id);
    r->bias_ids[r->n_bias] = (int32_t)id;
    r->bias_vals[r->n_bias] = (float)json_number_value(b);
    r->n_bias++;
  }
  return 0;
}

int serve_req_parse(const char *body, size_t len, int chat, serve_req *r, serve_err *e) {
  memset(r, 0, sizeof *r);
  memset(e, 0, sizeof *e);
  r->chat = chat;
  r->max_tokens = -1;
  /* llama.cpp's (and mi-run's) sampling defaults */
  r->temperature = 0.8;
  r->top_k = 40;
  r->top_p = 0.95;
  r->min_p = 0.05;
  r->repeat_penalty = 1.0;
  r->enable_thinking = -1;
  json_error_t jerr;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return fail(e, 400, NULL, "invalid_json",
                "We could not parse the JSON body of your request: %s (line %d, column %d)",
                jerr.text, jerr.line, jerr.column);
  r->root = root;
  if (!json_is_object(root))
    return fail(e, 400, NULL, "invalid_json", "the request body must be a JSON object");

  json_t *v;
  if ((v = field(root, "model"))) {
    if (!json_is_string(v)) return fail(e, 400, "model", "invalid_type", "'model' must be a string");
    r->model = json_string_value(v);
  }
  if (chat ? parse_messages(root, r, e) : parse_prompt(root, r, e)) return -1;

  int64_t i64;
  if (get_int(root, "max_tokens", 0, INT32_MAX, &r->max_tokens, e)) return -1;
  if (chat && get_int(root, "max_completion_tokens", 0, INT32_MAX, &r->max_tokens, e)) return -1;
  if (get_number(root, "temperature", 0, 2, &r->temperature, e)) return -1;
  if (get_number(root, "top_p", 0, 1, &r->top_p, e)) return -1;
  if (get_number(root, "min_p", 0, 1, &r->min_p, e)) return -1;
  if (get_number(root, "repeat_penalty", 0.01, 100, &r->repeat_penalty, e)) return -1;
  i64 = r->top_k;
  if (get_int(root, "top_k", -1, INT32_MAX, &i64, e)) return -1;
  r->top_k = i64 < 0 ? 0 : (int)i64;
  if ((v = field(root, "seed"))) {
    if (!json_is_integer(v)) return fail(e, 400, "seed", "invalid_type", "'seed' must be an integer");
    r->has_seed = 1;
    r->seed = (uint64_t)json_integer_value(v);
  }
  i64 = 1;
  if (get_int(root, "n", 1, SERVE_MAX_N, &i64, e)) return -1;
  r->n = (int)i64;
  double pen = 0;
  if (get_number(root, "presence_penalty", -2, 2, &pen, e)) return -1;
  if (pen != 0)
    return fail(e, 400, "presence_penalty", "unsupported_value",
                "'presence_penalty' is not supported (use repeat_penalty)");
  if (get_number(root, "frequency_penalty", -2, 2, &pen, e)) return -1;
  if (pen != 0)
    return fail(e, 400, "frequency_penalty", "unsupported_value",
                "'frequency_penalty' is not supported (use repeat_penalty)");
  if ((v = field(root, "stop"))) {
    if (json_is_string(v)) {
      if (json_string_length(v) > 0) r->stop[r->n_stop++] = json_string_value(v);
    } else if (json_is_array(v)) {
      if (json_array_size(v) > SERVE_MAX_STOP)
        return fail(e, 400, "stop", "invalid_value", "'stop' holds more than %d strings",
                    SERVE_MAX_STOP);
      size_t i;
      json_t *s;
      json_array_foreach(v, i, s) {
        if (!json_is_string(s))
          return fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
        if (json_string_length(s) > 0 && !memchr(json_string_value(s), 0, json_string_length(s)))
          r->stop[r->n_stop++] = json_string_value(s);
      }
    } else {
      return fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
    }
  }
  if (chat) {
    if (get_bool(root, "logprobs", &r->logprobs, e)) return -1;
    i64 = 0;
    if (get_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &i64, e)) return -1;
    r->top_logprobs = (int)i64;
    if (r->top_logprobs > 0 && !r->logprobs)
      return fail(e, 400, "top_logprobs", "invalid_value",
                  "'top_logprobs' needs 'logprobs' set to true");
  } else {
    i64 = -1;
    if ((v = field(root, "logprobs")) && json_is_boolean(v)) {
      i64 = json_is_true(v) ? 0 : -1; /* some clients send a boolean */
    } else if (get_int(root, "logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &i64, e)) {
      return -1;
    }
    r->logprobs = i64 >= 0;
    r->top_logprobs = i64 > 0 ? (int)i64 : 0;
    int echo = 0;
    if (get_bool(root, "echo", &echo, e)) return -1;
    r->echo = echo;
    json_t *suffix = field(root, "suffix");
    if (suffix) return fail(e, 400, "suffix", "unsupported_value", "'suffix' is not supported");
    i64 = 1;
    if (get_int(root, "best_of", 1, 1, &i64, e)) return -1;
  }
  if (get_bool(root, "stream", &r->stream, e)) return -1;
  if ((v = field(root, "stream_options"))) {
    if (!json_is_object(v))
      return fail(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
    if (!r->stream)
      return fail(e, 400, "stream_options", "invalid_value",
                  "'stream_options' is only allowed when 'stream' is true");
    json_t *iu = field(v, "include_usage");
    if (iu && !json_is_boolean(iu))
      return fail(e, 400, "stream_options.include_usage", "invalid_type",
                  "'stream_options.include_usage' must be a boolean");
    r->include_usage = iu && json_is_true(iu);
  }
  if (get_bool(root, "ignore_eos", &r->ignore_eos, e)) return -1;
  if (chat && parse_tools(root, r, e)) return -1;
  if (!chat && (v = field(root, "tools")) && !(json_is_array(v) && json_array_size(v) == 0))
    return fail(e, 400, "tools", "unsupported_parameter",
                "'tools' needs a chat template: use /v1/chat/completions");
  if (refuse_unsupported(root, chat, e) || parse_response_format(root, r, e)) return -1;
  if (parse_logit_bias(root, r, e)) return -1;
  if ((v = field(root, "chat_template_kwargs"))) {
    if (!json_is_object(v))
      return fail(e, 400, "chat_template_kwargs", "invalid_type",
                  "'chat_template_kwargs' must be an object");
    json_t *et = field(v, "enable_thinking");
    if (et && !json_is_boolean(et))
      return fail(e, 400, "chat_template_kwargs.enable_thinking", "invalid_type",
                  "'chat_template_kwargs.enable_thinking' must be a boolean");
    if (et) r->enable_thinking = json_is_true(et);
  }
  return 0;
}

void serve_req_free(serve_req *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_msgs; i++) free(r->msgs[i].content);
  free(r->msgs);
  free(r->prompt_ids);
  free(r->bias_ids);
  free(r->bias_vals);
  if (r->tmpl_msgs) json_decref((json_t *)r->tmpl_msgs);
  if (r->root) json_decref((json_t *)r->root);
  memset(r, 0, sizeof *r);
}
