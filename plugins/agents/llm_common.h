/* Shared by the LLM-backed agents (header-only, static): everything they
 * read goes through the host's file tool (so it is checked against the
 * allowed roots and listed in the manifest) and every request through the
 * host's LLM client (so endpoint, key, retries, record/replay and budgets
 * stay the core's). */
#ifndef MI_AGENTS_LLM_COMMON_H
#define MI_AGENTS_LLM_COMMON_H
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mi/agent.h"

/* The task's host services, or NULL with "<agent>: ..." in err when the core
 * lends none of the version these agents are built against. */
static inline const mi_agent_host *lc_task_host(const mi_agent_task *t, const char *agent, char *err, size_t el) {
  const mi_agent_host *h = mi_agent_task_host(t, MI_AGENT_HOST_VERSION);
  if (!h) snprintf(err, el, "%s: the core lends no host services version %d (an older mi-gen?)", agent, MI_AGENT_HOST_VERSION);
  return h;
}

/* Reads a file through the host (NULL + err when refused or unreadable). */
static inline char *lc_read(const mi_agent_host *h, const char *path, size_t max, size_t *len, char *err, size_t el) {
  char *d = NULL;
  if (h->read_file(h->ctx, path, max, &d, len, err, el) != 0) return NULL;
  return d;
}

static inline json_t *lc_read_json(const mi_agent_host *h, const char *path) {
  char err[512];
  size_t n = 0;
  char *d = lc_read(h, path, (size_t)4 << 20, &n, err, sizeof err);
  json_t *j = d ? json_loadb(d, n, 0, NULL) : NULL;
  free(d);
  return j;
}

/* Every JSON entry of CKB_DIR/SUB, as an array (through the host). */
static inline json_t *lc_ckb_dir(const mi_agent_host *h, const char *ckb, const char *sub) {
  char dir[4200], err[512], *names = NULL;
  json_t *out = json_array();
  snprintf(dir, sizeof dir, "%s/%s", ckb, sub);
  if (h->list_dir(h->ctx, dir, &names, err, sizeof err) != 0) return out;
  for (char *save = NULL, *n = strtok_r(names, "\n", &save); n; n = strtok_r(NULL, "\n", &save)) {
    size_t l = strlen(n);
    if (l < 6 || strcmp(n + l - 5, ".json")) continue;
    char p[4500];
    snprintf(p, sizeof p, "%s/%s", dir, n);
    json_t *j = lc_read_json(h, p);
    if (json_is_object(j)) json_array_append_new(out, j);
    else json_decref(j);
  }
  free(names);
  return out;
}

static inline int lc_has(json_t *arr, const char *s) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) if (s && json_is_string(v) && !strcmp(json_string_value(v), s)) return 1;
  return 0;
}

/* The contracts that apply to a model directory on a platform: {"model",
 * "platform", "operators": [...], "experience": [...], "failure_modes":
 * [...]}, or NULL with the reason. */
static inline json_t *lc_contracts(const mi_agent_host *h, const char *ckb, const char *model_dir, const char *platform,
                                   char *err, size_t el) {
  char p[4200];
  snprintf(p, sizeof p, "%s/config.json", model_dir);
  json_t *cfg = lc_read_json(h, p);
  const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
  json_t *models = lc_ckb_dir(h, ckb, "models"), *plats = lc_ckb_dir(h, ckb, "platforms");
  json_t *model = NULL, *plat = NULL;
  size_t i;
  json_t *v;
  json_array_foreach(models, i, v) if (!model && lc_has(json_object_get(v, "architectures"), arch)) model = v;
  json_array_foreach(plats, i, v) {
    const char *id = json_string_value(json_object_get(v, "id")), *pl = json_string_value(json_object_get(v, "plugin"));
    if (!plat && platform && ((pl && !strcmp(pl, platform)) || (id && !strcmp(id, platform)) ||
                              (id && !strncmp(id, "platform.", 9) && !strcmp(id + 9, platform))))
      plat = v;
  }
  if (!model || !plat) {
    snprintf(err, el, "no %s contract for %s", model ? "platform" : "model", model ? (platform ? platform : "?") : arch ? arch : "(no architecture)");
    json_decref(cfg), json_decref(models), json_decref(plats);
    return NULL;
  }
  json_t *out = json_pack("{s:O, s:O, s:O, s:[], s:[], s:[]}", "config", cfg, "model", model, "platform", plat, "operators",
                          "experience", "failure_modes");
  json_t *ids = json_array();
  json_array_append(ids, json_object_get(model, "id"));
  json_array_append(ids, json_object_get(plat, "id"));
  json_t *ops = lc_ckb_dir(h, ckb, "operators");
  json_t *k;
  json_array_foreach(json_object_get(plat, "kernels"), i, k) {
    const char *id = json_string_value(json_object_get(k, "operator"));
    size_t q;
    json_array_foreach(ops, q, v) if (id && !strcmp(json_string_value(json_object_get(v, "id")) ?: "", id) && !lc_has(ids, id)) {
      json_array_append(json_object_get(out, "operators"), v);
      json_array_append_new(ids, json_string(id));
    }
  }
  json_t *exps = lc_ckb_dir(h, ckb, "experience"), *fms = lc_ckb_dir(h, ckb, "failure_modes");
  json_array_foreach(exps, i, v) {
    int rel = 0;
    size_t q;
    json_t *r;
    json_array_foreach(json_object_get(v, "related"), q, r) rel |= lc_has(ids, json_string_value(r));
    rel |= lc_has(ids, json_string_value(json_object_get(json_object_get(v, "applies_to"), "contract")));
    if (rel) json_array_append(json_object_get(out, "experience"), v);
  }
  json_array_foreach(fms, i, v) {
    int rel = 0;
    size_t q;
    json_t *r;
    json_array_foreach(json_object_get(v, "affects"), q, r) rel |= lc_has(ids, json_string_value(r));
    if (rel) json_array_append(json_object_get(out, "failure_modes"), v);
  }
  json_decref(ids), json_decref(ops), json_decref(exps), json_decref(fms);
  json_decref(cfg), json_decref(models), json_decref(plats);
  return out;
}

/* A growing string. */
typedef struct lc_buf {
  char *s;
  size_t n, cap;
} lc_buf;

static inline void lc_add(lc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void lc_add(lc_buf *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0) {
    va_end(ap2);
    return;
  }
  if (b->n + (size_t)k + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (b->n + (size_t)k + 1 > cap) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      va_end(ap2);
      return;
    }
    b->s = s, b->cap = cap;
  }
  vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap2);
  va_end(ap2);
  b->n += (size_t)k;
}

/* A CKB entry (or an array of them) as a prompt shows it: the knowledge,
 * not where it came from. An evolved entry's provenance names the files
 * exploration read (the oracle's goldens among them), which an agent
 * working with references off must not see, not even by name. */
static inline json_t *lc_without_provenance(json_t *j) {
  json_t *c = json_deep_copy(j);
  if (json_is_object(c)) json_object_del(c, "provenance");
  for (size_t i = 0; json_is_array(c) && i < json_array_size(c); i++)
    if (json_is_object(json_array_get(c, i))) json_object_del(json_array_get(c, i), "provenance");
  return c;
}

static inline void lc_add_json(lc_buf *b, const char *title, json_t *j) {
  json_t *shown = lc_without_provenance(j);
  char *t = json_dumps(shown, JSON_INDENT(1) | JSON_SORT_KEYS);
  lc_add(b, "### %s\n```json\n%s\n```\n\n", title, t ? t : "null");
  free(t);
  json_decref(shown);
}

/* One chat request with these messages (array of {role, content, ...})
 * and tools (or NULL); returns the answer {content, tool_calls,
 * finish_reason, usage} or NULL with err. */
static inline json_t *lc_chat_full(const mi_agent_host *h, json_t *messages, json_t *tools, json_t *llm_opts, char *err,
                                   size_t el) {
  json_t *rq = json_pack("{s:O}", "messages", messages);
  json_t *t = json_object_get(llm_opts, "temperature"), *sd = json_object_get(llm_opts, "seed");
  if (json_is_number(t)) json_object_set(rq, "temperature", t);
  if (json_is_integer(sd)) json_object_set(rq, "seed", sd);
  if (json_is_true(json_object_get(llm_opts, "stream"))) json_object_set_new(rq, "stream", json_true());
  if (tools) json_object_set(rq, "tools", tools);
  char *text = json_dumps(rq, JSON_COMPACT), *resp = NULL;
  json_decref(rq);
  int rc = text ? h->llm_chat(h->ctx, text, &resp, err, el) : -1;
  free(text);
  json_t *r = rc == 0 ? json_loads(resp ? resp : "", 0, NULL) : NULL;
  free(resp);
  if (rc == 0 && !json_is_object(r)) snprintf(err, el, "the host's answer is not a JSON object");
  if (!json_is_object(r)) {
    json_decref(r);
    return NULL;
  }
  return r;
}

/* The same, the answer's content only (malloc'd). */
static inline char *lc_chat(const mi_agent_host *h, json_t *messages, json_t *llm_opts, char *err, size_t el) {
  json_t *r = lc_chat_full(h, messages, NULL, llm_opts, err, el);
  if (!r) return NULL;
  const char *c = json_string_value(json_object_get(r, "content"));
  char *out = strdup(c ? c : "");
  json_decref(r);
  return out;
}

/* The fenced blocks of a Markdown answer: the longest one whose info string
 * is empty, c or C (a whole engine.c). 0 with [*start, *start + *len), or
 * -1 when there is none or a fence is left open. */
static inline int lc_fenced_c(const char *text, const char **start, size_t *len) {
  const char *best = NULL;
  size_t best_len = 0;
  const char *p = text;
  while ((p = strstr(p, "```"))) {
    if (p != text && p[-1] != '\n') {
      p += 3;
      continue;
    }
    const char *info = p + 3, *eol = strchr(info, '\n');
    if (!eol) return best ? (*start = best, *len = best_len, 0) : -1;
    size_t il = (size_t)(eol - info);
    while (il && (info[il - 1] == ' ' || info[il - 1] == '\r')) il--;
    int is_c = il == 0 || (il == 1 && (info[0] == 'c' || info[0] == 'C'));
    const char *body = eol + 1, *q = body, *close = NULL;
    while ((q = strstr(q, "```"))) {
      if (q == body || q[-1] == '\n') {
        close = q;
        break;
      }
      q += 3;
    }
    if (!close) break; /* an open fence: the answer was cut */
    if (is_c && (size_t)(close - body) > best_len) best = body, best_len = (size_t)(close - body);
    p = close + 3;
  }
  if (!best) return -1;
  *start = best;
  *len = best_len;
  return 0;
}

/* A JSON object in an answer: the whole content, else a ```json block,
 * else the span from the first '{' to the last '}'. NULL when none parses. */
static inline json_t *lc_answer_json(const char *text) {
  json_t *j = json_loads(text, 0, NULL);
  if (json_is_object(j)) return j;
  json_decref(j);
  const char *f = strstr(text, "```json");
  if (f && (f = strchr(f, '\n'))) {
    const char *e = strstr(f + 1, "```");
    if (e) {
      j = json_loadb(f + 1, (size_t)(e - f - 1), 0, NULL);
      if (json_is_object(j)) return j;
      json_decref(j);
    }
  }
  const char *a = strchr(text, '{'), *b = strrchr(text, '}');
  if (a && b && b > a) {
    j = json_loadb(a, (size_t)(b - a + 1), 0, NULL);
    if (json_is_object(j)) return j;
    json_decref(j);
  }
  return NULL;
}

/* The stage report an implementer may see: stage, name, verdict, and the
 * message of a failed stage; never evidence, reports or libraries (those
 * name artifacts the verifier keeps to itself). */
/* A malformed answer: noted in the journal and on stderr as "AGENT: answer
 * N malformed: WHY", then the conversation asks again, with the bad answer
 * (trimmed to 2000 bytes) and what was wrong. Takes ownership of ans. */
static inline void lc_ask_again(const mi_agent_host *h, json_t *msgs, const char *agent, int n, const char *why, char *ans,
                                const char *instruction) {
  char note[700];
  snprintf(note, sizeof note, "%s: answer %d malformed: %s", agent, n, why);
  h->note(h->ctx, note);
  fprintf(stderr, "mi-gen: %s\n", note);
  char trimmed[2048];
  snprintf(trimmed, sizeof trimmed, "%.2000s", ans);
  free(ans);
  json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", trimmed));
  char again[800];
  snprintf(again, sizeof again, "That answer cannot be used: %s. %s", why, instruction);
  json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", again));
}

/* The verifier's failure messages are written for a person and may quote
 * what the candidate was held to: a golden's path, the llama.cpp value or
 * token that differed. The implementer must never see the goldens, so a
 * message passed on drops every absolute path ("<file>") and every number
 * that follows a word naming a hidden source ("<hidden>"); the candidate's
 * own figures and the size of the miss stay. Returns a malloc'd string. */
static inline char *lc_redact(const char *msg) {
  static const char *const hidden[] = {"llama.cpp", "expected", "reference", "golden", "float64", "want", NULL};
  size_t n = strlen(msg);
  char *out = malloc(n * 8 + 16), *o = out; /* a word grows to 8 bytes at most */
  if (!out) return NULL;
  int after_hidden = 0;
  for (const char *p = msg; *p;) {
    if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '(' || *p == ',') {
      *o++ = *p++;
      continue;
    }
    const char *w = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != ',' && *p != ')') p++;
    size_t wl = (size_t)(p - w);
    int numeric = wl > 0 && (w[0] == '-' || w[0] == '+' || w[0] == '.' || (w[0] >= '0' && w[0] <= '9'));
    if (w[0] == '/') {
      memcpy(o, "<file>", 6), o += 6;
    } else if (after_hidden && numeric) {
      memcpy(o, "<hidden>", 8), o += 8;
    } else {
      memcpy(o, w, wl), o += wl;
    }
    after_hidden = 0;
    for (int k = 0; hidden[k]; k++) {
      size_t hl = strlen(hidden[k]);
      if (wl >= hl && !strncasecmp(w, hidden[k], hl)) after_hidden = 1;
    }
    if (*p == ')') *o++ = *p++;
  }
  *o = 0;
  return out;
}

static inline json_t *lc_feedback(json_t *fb) {
  if (!json_is_object(fb)) return NULL;
  json_t *out = json_pack("{s:O?}", "from", json_object_get(fb, "from"));
  if (json_object_get(fb, "findings")) json_object_set(out, "findings", json_object_get(fb, "findings"));
  if (json_object_get(fb, "malformed")) json_object_set(out, "malformed", json_object_get(fb, "malformed"));
  json_t *st = json_object_get(fb, "stages");
  if (json_is_array(st)) {
    json_t *a = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(st, i, v) {
      const char *verdict = json_string_value(json_object_get(v, "verdict"));
      json_t *o = json_pack("{s:O?, s:O?, s:O?, s:O?}", "stage", json_object_get(v, "stage"), "name", json_object_get(v, "name"),
                            "verdict", json_object_get(v, "verdict"), "test_contract", json_object_get(v, "test_contract"));
      const char *msg = json_string_value(json_object_get(v, "message"));
      if (verdict && !strcmp(verdict, "FAIL") && msg) {
        char *r = lc_redact(msg);
        if (r) json_object_set_new(o, "message", json_string(r));
        free(r);
      }
      json_array_append_new(a, o);
    }
    json_object_set_new(out, "stages", a);
  }
  return out;
}

#endif
