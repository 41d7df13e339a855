/* The OpenAI-compatible chat client (client.h): request JSON, libcurl
 * transfer with retries, the answer parsed from JSON or server-sent events,
 * and record/replay of every exchange. */
#define _GNU_SOURCE
#include "core/llm/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/runtime/rng.h"
#include "core/util/out.h"

#define MI_LLM_DEFAULT_MAX_BYTES ((size_t)8 << 20)

struct mi_llm_client {
  mi_llm_config cfg;
  char *url;        /* {base}/v1/chat/completions */
  char *auth;       /* "Authorization: Bearer KEY", or NULL */
  char *model, *record_dir, *replay_dir;
  uint64_t rng;     /* jitter */
  json_t *seen;     /* request hash -> times sent, for record/replay file names */
  mi_llm_usage usage;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void mi_llm_config_from_env(mi_llm_config *c) {
  if (!c->base_url) c->base_url = getenv("MI_LLM_BASE_URL");
  if (!c->base_url) c->base_url = getenv("OPENAI_BASE_URL");
  if (!c->model) c->model = getenv("MI_LLM_MODEL");
  if (!c->api_key) c->api_key = getenv("MI_LLM_API_KEY");
  if (!c->api_key) c->api_key = getenv("OPENAI_API_KEY");
}

mi_llm_client *mi_llm_client_new(const mi_llm_config *cfg, char *err, size_t err_len) {
  if (!cfg->replay_dir && (!cfg->base_url || !cfg->base_url[0])) {
    snprintf(err, err_len, "no LLM endpoint: give a base URL (or MI_LLM_BASE_URL) or a replay folder");
    return NULL;
  }
  struct stat st;
  if (cfg->replay_dir && (stat(cfg->replay_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
    snprintf(err, err_len, "%s: the replay folder does not exist", cfg->replay_dir);
    return NULL;
  }
  if (cfg->record_dir && mkdir(cfg->record_dir, 0755) != 0 && errno != EEXIST) {
    snprintf(err, err_len, "%s: cannot create the record folder: %s", cfg->record_dir, strerror(errno));
    return NULL;
  }
  mi_llm_client *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  c->cfg = *cfg;
  if (c->cfg.connect_s <= 0) c->cfg.connect_s = 10;
  if (c->cfg.total_s <= 0) c->cfg.total_s = 300;
  if (c->cfg.idle_s <= 0) c->cfg.idle_s = 60;
  if (c->cfg.max_retries < 0) c->cfg.max_retries = 2;
  if (c->cfg.backoff_s <= 0) c->cfg.backoff_s = 0.5;
  if (c->cfg.max_backoff_s <= 0) c->cfg.max_backoff_s = 30;
  if (!c->cfg.max_response_bytes) c->cfg.max_response_bytes = MI_LLM_DEFAULT_MAX_BYTES;
  c->rng = cfg->jitter_seed;
  c->seen = json_object();
  c->model = dup_or_null(cfg->model ? cfg->model : "default");
  c->record_dir = dup_or_null(cfg->record_dir);
  c->replay_dir = dup_or_null(cfg->replay_dir);
  if (cfg->base_url) {
    const char *b = cfg->base_url;
    size_t n = strlen(b);
    while (n && b[n - 1] == '/') n--;
    int has_v1 = n >= 3 && !strncmp(b + n - 3, "/v1", 3);
    if (asprintf(&c->url, "%.*s%s/chat/completions", (int)n, b, has_v1 ? "" : "/v1") < 0) c->url = NULL;
  }
  if (cfg->api_key && cfg->api_key[0] &&
      asprintf(&c->auth, "Authorization: Bearer %s", cfg->api_key) < 0)
    c->auth = NULL;
  c->cfg.base_url = c->cfg.model = c->cfg.api_key = c->cfg.record_dir = c->cfg.replay_dir = NULL;
  if (!c->seen || !c->model || (cfg->base_url && !c->url) || (cfg->record_dir && !c->record_dir) ||
      (cfg->replay_dir && !c->replay_dir)) {
    mi_llm_client_free(c);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  return c;
}

void mi_llm_client_free(mi_llm_client *c) {
  if (!c) return;
  free(c->url);
  if (c->auth) {
    memset(c->auth, 0, strlen(c->auth)); /* the key does not outlive the client */
    free(c->auth);
  }
  free(c->model);
  free(c->record_dir);
  free(c->replay_dir);
  json_decref(c->seen);
  free(c);
}

void mi_llm_client_usage(const mi_llm_client *c, mi_llm_usage *out) { *out = c->usage; }

const json_t *mi_llm_client_seen(const mi_llm_client *c) { return c->seen; }

void mi_llm_client_set_seen(mi_llm_client *c, const json_t *seen) {
  if (!json_is_object(seen)) return;
  json_t *copy = json_deep_copy(seen);
  if (!copy) return;
  json_decref(c->seen);
  c->seen = copy;
}

void mi_llm_response_free(mi_llm_response *r) {
  if (!r) return;
  free(r->content);
  json_decref(r->tool_calls);
  memset(r, 0, sizeof *r);
}

/* ---------- the request ---------- */

static json_t *request_json(const mi_llm_client *c, const mi_llm_request *q) {
  json_t *msgs = json_array();
  for (size_t i = 0; i < q->n_messages; i++) {
    const mi_llm_message *m = &q->messages[i];
    json_t *o = json_pack("{s:s, s:s}", "role", m->role ? m->role : "user", "content",
                          m->content ? m->content : "");
    if (m->tool_call_id) json_object_set_new(o, "tool_call_id", json_string(m->tool_call_id));
    if (json_is_array(m->tool_calls)) json_object_set_new(o, "tool_calls", json_deep_copy(m->tool_calls));
    json_array_append_new(msgs, o);
  }
  json_t *r = json_pack("{s:s, s:o, s:b}", "model", c->model, "messages", msgs, "stream", q->stream);
  if (q->tools) json_object_set_new(r, "tools", json_deep_copy(q->tools));
  if (q->temperature >= 0) json_object_set_new(r, "temperature", json_real(q->temperature));
  if (q->seed >= 0) json_object_set_new(r, "seed", json_integer(q->seed));
  if (q->max_tokens > 0) json_object_set_new(r, "max_tokens", json_integer(q->max_tokens));
  if (q->stream) json_object_set_new(r, "stream_options", json_pack("{s:b}", "include_usage", 1));
  return r;
}

/* ---------- the answer ---------- */

static int set_content(mi_llm_response *out, const char *s, size_t n) {
  free(out->content);
  out->content = strndup(s ? s : "", s ? n : 0);
  return out->content ? 0 : -1;
}

static void set_usage(mi_llm_response *out, json_t *usage) {
  json_t *p = json_object_get(usage, "prompt_tokens"), *k = json_object_get(usage, "completion_tokens");
  if (!json_is_integer(p) || !json_is_integer(k)) return;
  out->prompt_tokens = json_integer_value(p);
  out->completion_tokens = json_integer_value(k);
  out->usage_estimated = 0;
}

/* A non-streaming answer: {choices:[{message:{content, tool_calls}, finish_reason}], usage}. */
static int parse_json_answer(const char *body, size_t n, mi_llm_response *out, char *why, size_t wl) {
  json_error_t je;
  json_t *j = json_loadb(body, n, 0, &je);
  if (!j) {
    snprintf(why, wl, "the answer is not JSON (%s at line %d)", je.text, je.line);
    return -1;
  }
  json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
  json_t *msg = json_object_get(ch, "message");
  if (!json_is_object(msg)) {
    snprintf(why, wl, "the answer has no choices[0].message");
    json_decref(j);
    return -1;
  }
  json_t *content = json_object_get(msg, "content");
  if (content && !json_is_null(content) && !json_is_string(content)) {
    snprintf(why, wl, "choices[0].message.content is not a string");
    json_decref(j);
    return -1;
  }
  set_content(out, json_string_value(content), json_string_length(content));
  json_t *tc = json_object_get(msg, "tool_calls");
  if (json_is_array(tc) && json_array_size(tc)) out->tool_calls = json_incref(tc);
  snprintf(out->finish_reason, sizeof out->finish_reason, "%s",
           json_string_value(json_object_get(ch, "finish_reason")) ?: "");
  set_usage(out, json_object_get(j, "usage"));
  json_decref(j);
  return out->content ? 0 : -1;
}

/* Merges one streamed tool-call delta {index, id, type, function:{name, arguments}}. */
static void merge_tool_delta(json_t *calls, json_t *d) {
  json_t *ix = json_object_get(d, "index");
  size_t i = json_is_integer(ix) && json_integer_value(ix) >= 0 ? (size_t)json_integer_value(ix) : 0;
  if (i > 1024) return;
  while (json_array_size(calls) <= i)
    json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", "", "type", "function",
                                           "function", "name", "", "arguments", ""));
  json_t *call = json_array_get(calls, i), *fn = json_object_get(call, "function");
  const char *id = json_string_value(json_object_get(d, "id"));
  if (id) json_object_set_new(call, "id", json_string(id));
  json_t *df = json_object_get(d, "function");
  const char *parts[] = {"name", "arguments"};
  for (int k = 0; k < 2; k++) {
    const char *add = json_string_value(json_object_get(df, parts[k]));
    if (!add) continue;
    const char *have = json_string_value(json_object_get(fn, parts[k]));
    char *cat = NULL;
    if (asprintf(&cat, "%s%s", have ? have : "", add) >= 0) {
      json_object_set_new(fn, parts[k], json_string(cat));
      free(cat);
    }
  }
}

/* A streamed answer: "data: {chunk}" lines, then "data: [DONE]". Returns 0
 * when [DONE] came, 1 when the stream was cut (what came is kept), -1 on
 * a malformed chunk. */
static int parse_sse_answer(const char *body, size_t n, mi_llm_response *out, char *why, size_t wl) {
  size_t cap = 256, len = 0;
  char *text = malloc(cap);
  json_t *calls = json_array();
  int done = 0, rc = 0, usage_seen = 0;
  if (!text || !calls) {
    free(text);
    json_decref(calls);
    snprintf(why, wl, "out of memory");
    return -1;
  }
  text[0] = 0;
  for (size_t pos = 0; pos < n && !done && rc == 0;) {
    const char *line = body + pos;
    const char *nl = memchr(line, '\n', n - pos);
    size_t ll = nl ? (size_t)(nl - line) : n - pos;
    pos += ll + (nl ? 1 : 0);
    if (!nl) break; /* a last line without its newline was cut */
    if (ll && line[ll - 1] == '\r') ll--;
    if (ll < 5 || strncmp(line, "data:", 5)) continue; /* comments, event:, id:, blank lines */
    const char *d = line + 5;
    size_t dl = ll - 5;
    if (dl && *d == ' ') d++, dl--;
    if (dl == 6 && !strncmp(d, "[DONE]", 6)) {
      done = 1;
      break;
    }
    json_error_t je;
    json_t *ch = json_loadb(d, dl, 0, &je);
    if (!ch) {
      snprintf(why, wl, "a stream chunk is not JSON (%s)", je.text);
      rc = -1;
      break;
    }
    json_t *c0 = json_array_get(json_object_get(ch, "choices"), 0);
    json_t *delta = json_object_get(c0, "delta");
    const char *add = json_string_value(json_object_get(delta, "content"));
    size_t al = add ? json_string_length(json_object_get(delta, "content")) : 0;
    if (al) {
      if (len + al + 1 > cap) {
        while (len + al + 1 > cap) cap *= 2;
        char *t = realloc(text, cap);
        if (!t) {
          json_decref(ch);
          snprintf(why, wl, "out of memory");
          rc = -1;
          break;
        }
        text = t;
      }
      memcpy(text + len, add, al);
      text[len += al] = 0;
    }
    size_t k;
    json_t *td;
    json_array_foreach(json_object_get(delta, "tool_calls"), k, td) merge_tool_delta(calls, td);
    const char *fr = json_string_value(json_object_get(c0, "finish_reason"));
    if (fr) snprintf(out->finish_reason, sizeof out->finish_reason, "%s", fr);
    if (json_is_object(json_object_get(ch, "usage"))) {
      set_usage(out, json_object_get(ch, "usage"));
      usage_seen = 1;
    }
    json_decref(ch);
  }
  if (rc == 0) {
    set_content(out, text, len);
    if (json_array_size(calls)) out->tool_calls = json_incref(calls);
    (void)usage_seen;
    if (!done) rc = 1;
  }
  free(text);
  json_decref(calls);
  return rc;
}

/* Usage the server did not report: about 4 bytes a token. */
static void estimate_usage(mi_llm_response *out, size_t request_bytes) {
  if (out->prompt_tokens || out->completion_tokens) return;
  out->prompt_tokens = (int64_t)(request_bytes / 4);
  out->completion_tokens = (int64_t)((out->content ? strlen(out->content) : 0) / 4);
  out->usage_estimated = 1;
}

/* ---------- record / replay ---------- */

/* DIR/<hash of the canonical request>-<how many times sent before>.json */
static void exchange_path(mi_llm_client *c, const char *dir, const char *canon, char *path, size_t n) {
  char key[20];
  snprintf(key, sizeof key, "%016llx", (unsigned long long)mi_fnv1a64(canon));
  json_int_t times = json_integer_value(json_object_get(c->seen, key));
  json_object_set_new(c->seen, key, json_integer(times + 1));
  snprintf(path, n, "%s/%s-%lld.json", dir, key, (long long)times);
}

/* One exchange as the caller saw it: the answer's status and body, or the
 * final error (after retries) when there was no usable answer. */
static int record_exchange(const char *path, json_t *request, int status, const char *body,
                           size_t n, const char *error, char *why, size_t wl) {
  json_t *rec = json_pack("{s:i, s:O, s:i, s:s%}", "format", 1, "request", request, "status", status,
                          "body", body ? body : "", body ? n : 0);
  if (rec && error) json_object_set_new(rec, "error", json_string(error));
  char *text = rec ? json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
  json_decref(rec);
  char err[600] = "out of memory";
  int rc = text ? mi_out_write_file(path, text, strlen(text), err, sizeof err) : -1;
  free(text);
  if (rc != 0) {
    snprintf(why, wl, "the recording: %.500s", err);
    return -1;
  }
  return 0;
}

/* ---------- one HTTP attempt ---------- */

typedef struct sink {
  char *p;
  size_t n, cap, max;
  int too_big;
} sink;

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
  sink *s = user;
  size_t add = size * nmemb;
  if (s->n + add > s->max) {
    s->too_big = 1;
    return 0; /* aborts the transfer */
  }
  if (s->n + add + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    while (s->n + add + 1 > cap) cap *= 2;
    char *p = realloc(s->p, cap);
    if (!p) return 0;
    s->p = p;
    s->cap = cap;
  }
  memcpy(s->p + s->n, data, add);
  s->n += add;
  s->p[s->n] = 0;
  return add;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user) {
  double *retry_after = user;
  size_t n = size * nmemb;
  if (n > 12 && !strncasecmp(data, "Retry-After:", 12)) {
    char buf[64];
    size_t k = n - 12 < sizeof buf - 1 ? n - 12 : sizeof buf - 1;
    memcpy(buf, data + 12, k);
    buf[k] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end != buf && v >= 0 && isfinite(v)) *retry_after = v; /* seconds; an HTTP date is ignored */
  }
  return n;
}

typedef struct attempt {
  int status;          /* HTTP status, 0: none */
  CURLcode curl;
  double retry_after;  /* seconds, < 0: not sent */
  sink body;
} attempt;

static void http_post(const mi_llm_client *c, const char *payload, int stream, attempt *a) {
  memset(a, 0, sizeof *a);
  a->retry_after = -1;
  a->body.max = c->cfg.max_response_bytes;
  CURL *h = curl_easy_init();
  if (!h) {
    a->curl = CURLE_FAILED_INIT;
    return;
  }
  struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
  hd = curl_slist_append(hd, stream ? "Accept: text/event-stream" : "Accept: application/json");
  if (c->auth) hd = curl_slist_append(hd, c->auth);
  curl_easy_setopt(h, CURLOPT_URL, c->url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &a->body);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &a->retry_after);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->cfg.connect_s * 1000));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(c->cfg.total_s * 1000));
  /* idle: less than 1 byte/s for idle_s seconds */
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)ceil(c->cfg.idle_s));
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  a->curl = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  a->status = (int)code;
  curl_slist_free_all(hd);
  curl_easy_cleanup(h);
}

/* The server's error text, one line: {"error":{"message","code"}} or the body. */
static void error_text(const attempt *a, char *out, size_t n, int *insufficient_quota) {
  *insufficient_quota = 0;
  json_t *j = a->body.p ? json_loadb(a->body.p, a->body.n, 0, NULL) : NULL;
  json_t *e = json_object_get(j, "error");
  const char *msg = json_string_value(json_object_get(e, "message"));
  if (!msg) msg = json_string_value(e);
  const char *code = json_string_value(json_object_get(e, "code"));
  if (!code) code = json_string_value(json_object_get(e, "type"));
  if (code && !strcmp(code, "insufficient_quota")) *insufficient_quota = 1;
  snprintf(out, n, "%.200s%s%s%s", msg ? msg : a->body.p ? a->body.p : "(empty body)", code ? " [" : "",
           code ? code : "", code ? "]" : "");
  for (char *p = out; *p; p++)
    if ((unsigned char)*p < 0x20) *p = ' ';
  json_decref(j);
}

static int retryable_status(int s) { return s == 408 || s == 409 || s == 429 || s >= 500; }

/* ---------- the call ---------- */

int mi_llm_chat(mi_llm_client *c, const mi_llm_request *req, mi_llm_response *out, char *err,
                size_t err_len) {
  memset(out, 0, sizeof *out);
  double t0 = now_s();
  json_t *rq = request_json(c, req);
  char *payload = rq ? json_dumps(rq, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  char why[600] = "", path[4200];
  int rc = -1;
  if (!payload) {
    snprintf(err, err_len, "out of memory");
    goto done;
  }
  c->usage.requests++;

  if (c->replay_dir) {
    exchange_path(c, c->replay_dir, payload, path, sizeof path);
    json_error_t je;
    json_t *rec = json_load_file(path, 0, &je);
    json_t *want = json_object_get(rec, "request");
    if (!rec || !json_equal(want, rq)) {
      snprintf(err, err_len, "replay: no recorded answer for this request (%s %s)", path,
               rec ? "holds another request" : "does not exist");
      json_decref(rec);
      goto done;
    }
    int status = (int)json_integer_value(json_object_get(rec, "status"));
    const char *body = json_string_value(json_object_get(rec, "body"));
    size_t bl = json_string_length(json_object_get(rec, "body"));
    const char *rec_err = json_string_value(json_object_get(rec, "error"));
    out->http_status = status;
    int prc = rec_err ? -1
              : req->stream ? parse_sse_answer(body, bl, out, why, sizeof why)
                            : parse_json_answer(body, bl, out, why, sizeof why);
    if (rec_err) snprintf(why, sizeof why, "%s", rec_err);
    else if (prc > 0) snprintf(why, sizeof why, "the recorded stream was cut before [DONE]");
    estimate_usage(out, strlen(payload));
    json_decref(rec);
    if (prc != 0) {
      snprintf(err, err_len, "%s (replayed from %s)", why, path);
      goto done;
    }
    rc = 0;
    goto done;
  }

  int64_t cut_prompt = 0, cut_completion = 0; /* spent on attempts whose stream was cut */
  for (int attempt_no = 0;; attempt_no++) {
    attempt a;
    http_post(c, payload, req->stream, &a);
    out->attempts = attempt_no + 1;
    c->usage.attempts++;
    out->http_status = a.status;
    int retry = 0, final_error = 0, ok = 0;
    if (a.body.too_big) {
      snprintf(why, sizeof why, "the answer is larger than %zu bytes", c->cfg.max_response_bytes);
      final_error = 1;
    } else if (a.curl != CURLE_OK && a.status == 0) {
      snprintf(why, sizeof why, "%s", curl_easy_strerror(a.curl));
      retry = 1;
    } else if (a.status != 200) {
      int quota;
      char text[300];
      error_text(&a, text, sizeof text, &quota);
      snprintf(why, sizeof why, "HTTP %d: %s", a.status, text);
      retry = retryable_status(a.status) && !quota;
      final_error = !retry;
    } else {
      int prc = req->stream ? parse_sse_answer(a.body.p ? a.body.p : "", a.body.n, out, why, sizeof why)
                            : parse_json_answer(a.body.p ? a.body.p : "", a.body.n, out, why, sizeof why);
      if (a.curl != CURLE_OK) prc = 1; /* the body ended early: a cut, whether or not what came parses */
      if (prc > 0) {
        snprintf(why, sizeof why, "the %s was cut (%s)", req->stream ? "stream" : "answer",
                 a.curl != CURLE_OK ? curl_easy_strerror(a.curl) : "no [DONE]");
        estimate_usage(out, strlen(payload)); /* spent, though cut */
        cut_prompt += out->prompt_tokens;
        cut_completion += out->completion_tokens;
        retry = 1;
      } else if (prc < 0) {
        final_error = 1; /* a malformed answer: the caller's budget decides */
      } else {
        estimate_usage(out, strlen(payload));
        ok = 1;
      }
    }
    int last = ok || final_error || !retry || attempt_no >= c->cfg.max_retries;
    if (!ok && last)
      snprintf(err, err_len, "LLM %s: %s (after %d attempt%s%s)", c->url, why, out->attempts,
               out->attempts == 1 ? "" : "s", final_error ? ", not retried" : "");
    if (last && c->record_dir) {
      char rerr[600];
      exchange_path(c, c->record_dir, payload, path, sizeof path);
      if (record_exchange(path, rq, a.status, ok ? a.body.p : NULL, ok ? a.body.n : 0, ok ? NULL : err,
                          rerr, sizeof rerr) != 0) {
        snprintf(err, err_len, "%s", rerr);
        ok = 0;
      }
    }
    free(a.body.p);
    if (last) {
      rc = ok ? 0 : -1;
      break;
    }
    /* backoff: Retry-After when given, else exponential with jitter */
    double d = c->cfg.backoff_s * pow(2.0, attempt_no);
    d *= 0.75 + 0.5 * mi_rng_u01(&c->rng);
    if (a.retry_after >= 0) d = a.retry_after;
    if (d > c->cfg.max_backoff_s) d = c->cfg.max_backoff_s;
    if (d > 0) {
      struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    int attempts = out->attempts, status = out->http_status;
    mi_llm_response_free(out);
    out->attempts = attempts;
    out->http_status = status;
  }
  if (cut_prompt || cut_completion) { /* what the cut attempts cost */
    out->prompt_tokens = cut_prompt + (rc == 0 ? out->prompt_tokens : 0);
    out->completion_tokens = cut_completion + (rc == 0 ? out->completion_tokens : 0);
    out->usage_estimated = 1;
  }
done:
  c->usage.prompt_tokens += out->prompt_tokens; /* spent, answered or not */
  c->usage.completion_tokens += out->completion_tokens;
  out->seconds = now_s() - t0;
  c->usage.seconds += out->seconds;
  free(payload);
  json_decref(rq);
  return rc;
}
