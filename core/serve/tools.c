/* mi-serve's tool calls, response side (tools.h). */
#define _GNU_SOURCE
#include "core/serve/tools.h"

#include "core/serve/request.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_OPEN "<tool_call>"
#define TAG_CLOSE "</tool_call>"
#define PYTHON_TAG "<|python_tag|>"

serve_tools_fmt serve_tools_detect(const char *t) {
  if (!t) return SERVE_TOOLS_NONE;
  if (strstr(t, TAG_OPEN)) return SERVE_TOOLS_TAGGED;
  if (strstr(t, "\"parameters\"") && strstr(t, "tool")) return SERVE_TOOLS_BARE_JSON;
  return SERVE_TOOLS_NONE;
}

static int is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}


/* "call_" and 24 hex digits, unique in this process (a counter through a
 * bijective mix) and unlikely to repeat across processes (time, pid). */
static void call_id(char out[40]) {
  static uint64_t ctr;
  uint64_t x = __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED);
  uint64_t salt = ((uint64_t)time(NULL) << 24) ^ (uint64_t)getpid();
  uint64_t a = x * 0x9E3779B97F4A7C15ULL, b = salt + x;
  a ^= a >> 31;
  a *= 0xBF58476D1CE4E5B9ULL;
  a ^= a >> 27;
  b ^= b >> 33;
  b *= 0xFF51AFD7ED558CCDULL;
  b ^= b >> 33;
  snprintf(out, 40, "call_%016llx%08llx", (unsigned long long)a,
           (unsigned long long)(b & 0xffffffffULL));
}

/* One call's JSON: {name, arguments|parameters} → an OpenAI tool call, or
 * NULL when malformed (or out of memory). */
static json_t *one_call(const char *s, size_t n, serve_tools_fmt fmt) {
  while (n && is_space(*s))
    s++, n--;
  while (n && is_space(s[n - 1]))
    n--;
  if (!n || *s != '{') return NULL;
  json_t *o = json_loadb(s, n, 0, NULL);
  json_t *name = json_object_get(o, "name");
  json_t *args = json_object_get(o, "arguments");
  if (!args && fmt == SERVE_TOOLS_BARE_JSON) args = json_object_get(o, "parameters");
  json_t *call = NULL, *parsed = NULL;
  if (!json_is_object(o) || !json_is_string(name) || json_string_length(name) == 0) goto out;
  if (json_is_string(args)) { /* arguments as a JSON string: accepted when it holds an object */
    parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
    args = parsed;
  }
  if (args && (!json_is_object(args) || serve_json_too_deep(args, SERVE_MAX_JSON_DEPTH))) goto out;
  char *as = args ? json_dumps(args, 0) : strdup("{}");
  char id[40];
  call_id(id);
  if (as)
    call = json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name",
                     name, "arguments", as);
  free(as);
out:
  json_decref(parsed);
  json_decref(o);
  return call;
}

static json_t *text_json(const char *s, size_t n) {
  json_t *j = json_stringn(s, n);
  return j ? j : json_string("\xef\xbf\xbd");
}

int serve_tools_parse(serve_tools_fmt fmt, const char *text, size_t len, int parallel,
                      json_t **calls, json_t **content) {
  *calls = NULL;
  *content = NULL;
  if (fmt == SERVE_TOOLS_NONE || !text) return 0;
  json_t *arr = json_array();
  char *outside = malloc(len + 1);
  size_t olen = 0;
  int ok = arr && outside;
  if (fmt == SERVE_TOOLS_TAGGED) {
    const size_t ol = strlen(TAG_OPEN), cl = strlen(TAG_CLOSE);
    size_t pos = 0;
    while (ok) {
      const char *st = memmem(text + pos, len - pos, TAG_OPEN, ol);
      size_t stop = st ? (size_t)(st - text) : len;
      memcpy(outside + olen, text + pos, stop - pos);
      olen += stop - pos;
      if (!st) break;
      size_t b = stop + ol;
      const char *en = memmem(text + b, len - b, TAG_CLOSE, cl);
      size_t e = en ? (size_t)(en - text) : len;
      json_t *c =
          json_array_size(arr) < SERVE_MAX_TOOL_CALLS ? one_call(text + b, e - b, fmt) : NULL;
      if (!c || json_array_append_new(arr, c)) ok = 0;
      pos = en ? e + cl : len;
    }
  } else { /* BARE_JSON: the whole message, calls separated by ';' */
    size_t pos = 0;
    while (pos < len && is_space(text[pos]))
      pos++;
    if (len - pos >= strlen(PYTHON_TAG) && !memcmp(text + pos, PYTHON_TAG, strlen(PYTHON_TAG)))
      pos += strlen(PYTHON_TAG);
    ok = ok && pos < len;
    while (ok) {
      while (pos < len && is_space(text[pos]))
        pos++;
      if (pos == len) break;
      if (text[pos] != '{' || json_array_size(arr) >= SERVE_MAX_TOOL_CALLS) {
        ok = 0;
        break;
      }
      json_error_t je;
      json_t *o = json_loadb(text + pos, len - pos, JSON_DISABLE_EOF_CHECK, &je);
      if (!o) {
        ok = 0;
        break;
      }
      size_t used = (size_t)je.position;
      json_decref(o);
      json_t *c = used > 0 && used <= len - pos ? one_call(text + pos, used, fmt) : NULL;
      if (!c || json_array_append_new(arr, c)) {
        ok = 0;
        break;
      }
      pos += used;
      while (pos < len && is_space(text[pos]))
        pos++;
      if (pos < len && text[pos] == ';') pos++;
    }
  }
  int n = ok ? (int)json_array_size(arr) : 0;
  if (n > 0) {
    while (olen && is_space(outside[olen - 1]))
      olen--;
    size_t s = 0;
    while (s < olen && is_space(outside[s]))
      s++;
    if (s < olen && !(*content = text_json(outside + s, olen - s))) n = -1;
    if (!parallel)
      while (n > 1 && json_array_size(arr) > 1)
        json_array_remove(arr, json_array_size(arr) - 1);
    if (n > 0) *calls = json_incref(arr), n = (int)json_array_size(arr);
  }
  if (!arr || !outside) n = -1;
  json_decref(arr);
  free(outside);
  return n;
}

json_t *serve_tools_message(serve_tools_fmt fmt, const char *text, size_t len, int parallel,
                            int *called) {
  json_t *calls = NULL, *content = NULL;
  *called = 0;
  int n = serve_tools_parse(fmt, text, len, parallel, &calls, &content);
  if (n < 0) return NULL;
  if (n == 0)
    return json_pack("{s:s,s:o}", "role", "assistant", "content", text_json(text ? text : "", len));
  *called = 1;
  return json_pack("{s:s,s:o,s:o}", "role", "assistant", "content", content ? content : json_null(),
                   "tool_calls", calls);
}

/* ---------- streaming ---------- */

void serve_tool_stream_init(serve_tool_stream *s, serve_tools_fmt fmt, int parallel) {
  memset(s, 0, sizeof *s);
  s->fmt = fmt;
  s->parallel = parallel;
}

void serve_tool_stream_free(serve_tool_stream *s) {
  free(s->buf);
  memset(s, 0, sizeof *s);
}

static int append(serve_tool_stream *s, const char *t, size_t n) {
  if (s->len + n + 1 > s->cap) {
    size_t nc = s->cap ? s->cap : 256;
    while (s->len + n + 1 > nc)
      nc *= 2;
    char *nb = realloc(s->buf, nc);
    if (!nb) return -1;
    s->buf = nb;
    s->cap = nc;
  }
  if (n) memcpy(s->buf + s->len, t, n);
  s->len += n;
  s->buf[s->len] = 0;
  return 0;
}

/* Moves buf[0..n) out into *out. */
static int release(serve_tool_stream *s, size_t n, char **out, size_t *out_len) {
  if (!n) return 0;
  char *o = malloc(n + 1);
  if (!o) return -1;
  memcpy(o, s->buf, n);
  o[n] = 0;
  memmove(s->buf, s->buf + n, s->len - n + 1);
  s->len -= n;
  *out = o;
  *out_len = n;
  return 0;
}

/* Length of the longest suffix of b[0..n) that is a proper prefix of m. */
static size_t partial_suffix(const char *b, size_t n, const char *m) {
  size_t ml = strlen(m);
  for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
    if (!memcmp(b + n - k, m, k)) return k;
  return 0;
}

int serve_tool_stream_feed(serve_tool_stream *s, const char *text, size_t len, char **out,
                           size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (append(s, text, len)) return -1;
  if (s->holding) return 0;
  if (s->fmt == SERVE_TOOLS_TAGGED) {
    const char *st = memmem(s->buf, s->len, TAG_OPEN, strlen(TAG_OPEN));
    if (st) {
      s->holding = 1;
      return release(s, (size_t)(st - s->buf), out, out_len);
    }
    return release(s, s->len - partial_suffix(s->buf, s->len, TAG_OPEN), out, out_len);
  }
  if (s->fmt == SERVE_TOOLS_BARE_JSON && !s->decided) {
    size_t p = 0;
    while (p < s->len && is_space(s->buf[p]))
      p++;
    if (p == s->len) return 0;
    size_t rest = s->len - p, tl = strlen(PYTHON_TAG);
    if (s->buf[p] == '{' || (rest >= tl && !memcmp(s->buf + p, PYTHON_TAG, tl))) {
      s->decided = s->holding = 1;
      return 0;
    }
    if (rest < tl && !memcmp(s->buf + p, PYTHON_TAG, rest)) return 0;
    s->decided = 1;
  }
  return release(s, s->len, out, out_len);
}

json_t *serve_tool_stream_end(serve_tool_stream *s, int *called) {
  *called = 0;
  json_t *deltas = json_array();
  if (!deltas) return NULL;
  json_t *calls = NULL, *content = NULL;
  int n = s->holding ? serve_tools_parse(s->fmt, s->buf, s->len, s->parallel, &calls, &content) : 0;
  if (n < 0) goto oom;
  if (n == 0) {
    if (s->len &&
        json_array_append_new(deltas, json_pack("{s:o}", "content", text_json(s->buf, s->len))))
      goto oom;
  } else {
    *called = 1;
    if (content && json_array_append_new(deltas, json_pack("{s:O}", "content", content))) goto oom;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
      json_t *fn = json_object_get(c, "function");
      json_t *head = json_pack("{s:[{s:i,s:O,s:s,s:{s:O,s:s}}]}", "tool_calls", "index", (int)i,
                               "id", json_object_get(c, "id"), "type", "function", "function",
                               "name", json_object_get(fn, "name"), "arguments", "");
      json_t *args = json_pack("{s:[{s:i,s:{s:O}}]}", "tool_calls", "index", (int)i, "function",
                               "arguments", json_object_get(fn, "arguments"));
      if (json_array_append_new(deltas, head) || json_array_append_new(deltas, args)) goto oom;
    }
  }
  json_decref(calls);
  json_decref(content);
  s->len = 0;
  return deltas;
oom:
  json_decref(calls);
  json_decref(content);
  json_decref(deltas);
  return NULL;
}
