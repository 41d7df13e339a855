/* The host services lent to one agent process (agent_host.h): an LLM chat
 * through the run's client, under the run's budgets, and a file tool that
 * reads only under the allowed roots and logs every read and refusal. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/gen/agent_host.h"

struct mi_agent_services {
  mi_agent_host host;
  mi_agent_host_cfg cfg;
  mi_llm_client *llm;
  json_t *reads, *refused, *notes;
  const char *budget_spent;
  int client_failed;
};

/* ---- the file tool ---- */

static int under(const char *path, const char *root) {
  size_t n = strlen(root);
  while (n > 1 && root[n - 1] == '/') n--;
  return !strncmp(path, root, n) && (path[n] == 0 || path[n] == '/');
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int mi_agent_path_allowed(const mi_agent_host_cfg *cfg, const char *path, char *real_out, size_t real_len,
                          int *weight_header, char *why, size_t why_len) {
  char real[PATH_MAX];
  *weight_header = 0;
  if (!path || !realpath(path, real)) {
    snprintf(why, why_len, "%s: %s", path ? path : "(null)", path ? strerror(errno) : "no path");
    return 0;
  }
  snprintf(real_out, real_len, "%s", real);
  for (size_t i = 0; i < cfg->n_roots; i++) {
    char r[PATH_MAX];
    if (cfg->roots[i] && realpath(cfg->roots[i], r) && under(real, r)) return 1;
  }
  char r[PATH_MAX];
  if (cfg->model_dir && realpath(cfg->model_dir, r) && under(real, r) && real[strlen(r)] == '/' &&
      !strchr(real + strlen(r) + 1, '/')) {
    const char *base = real + strlen(r) + 1;
    /* the model's config files, and its weight files' headers only */
    if (!strcmp(base, "config.json") || !strcmp(base, "generation_config.json") ||
        ends_with(base, ".safetensors.index.json"))
      return 1;
    if (ends_with(base, ".safetensors")) {
      *weight_header = 1;
      return 1;
    }
  }
  if (cfg->run_dir && realpath(cfg->run_dir, r)) {
    char art[PATH_MAX + 16];
    snprintf(art, sizeof art, "%s/artifacts", r);
    /* candidate sources only: never the verifier's evidence or the journal
     * (which holds its seed) */
    if (under(real, art) && real[strlen(art)] == '/' && !strchr(real + strlen(art) + 1, '/') && ends_with(real, ".c"))
      return 1;
  }
  snprintf(why, why_len, "%s: outside the allowed roots", real);
  return 0;
}

static void refuse(mi_agent_services *s, const char *path, const char *why, char *err, size_t el) {
  json_array_append_new(s->refused, json_pack("{s:s, s:s}", "path", path ? path : "", "why", why));
  /* logged as it happens, on the agent's stderr (mi-gen's), one line */
  fprintf(stderr, "mi-gen: file tool: refused %s\n", why);
  snprintf(err, el, "%s (refused and logged)", why);
}

static int svc_read_file(void *ctx, const char *path, size_t max, char **data, size_t *len, char *err, size_t el) {
  mi_agent_services *s = ctx;
  char real[PATH_MAX], why[PATH_MAX + 64];
  int header = 0;
  *data = NULL;
  if (len) *len = 0;
  if (!mi_agent_path_allowed(&s->cfg, path, real, sizeof real, &header, why, sizeof why)) {
    refuse(s, path, why, err, el);
    return -1;
  }
  FILE *f = fopen(real, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, el, "%s: %s", real, f ? "not a regular file" : strerror(errno));
    if (f) fclose(f);
    return -1;
  }
  size_t want = (size_t)st.st_size;
  if (header) { /* safetensors: 8-byte little-endian header length, then the JSON header */
    unsigned char b[8];
    if (fread(b, 1, 8, f) != 8) {
      fclose(f);
      snprintf(err, el, "%s: shorter than a safetensors header", real);
      return -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > (uint64_t)st.st_size - 8) {
      fclose(f);
      snprintf(err, el, "%s: header length %llu past the end of the file", real, (unsigned long long)n);
      return -1;
    }
    want = (size_t)n;
  }
  if (max && want > max) {
    fclose(f);
    snprintf(err, el, "%s: %zu bytes, more than the %zu asked for", real, want, max);
    return -1;
  }
  char *b = malloc(want + 1);
  size_t r = b ? fread(b, 1, want, f) : 0;
  fclose(f);
  if (!b || r != want) {
    free(b);
    snprintf(err, el, "%s: read failed", real);
    return -1;
  }
  b[want] = 0;
  *data = b;
  if (len) *len = want;
  json_t *rd = json_pack("{s:s, s:I}", "path", real, "bytes", (json_int_t)want);
  if (header) json_object_set_new(rd, "header_only", json_true());
  json_array_append_new(s->reads, rd);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int svc_list_dir(void *ctx, const char *path, char **names, char *err, size_t el) {
  mi_agent_services *s = ctx;
  char real[PATH_MAX], why[PATH_MAX + 64];
  int header = 0;
  *names = NULL;
  if (!mi_agent_path_allowed(&s->cfg, path, real, sizeof real, &header, why, sizeof why) || header) {
    if (header) snprintf(why, sizeof why, "%s: not a folder", real);
    refuse(s, path, why, err, el);
    return -1;
  }
  DIR *d = opendir(real);
  if (!d) {
    snprintf(err, el, "%s: %s", real, strerror(errno));
    return -1;
  }
  char **v = NULL;
  size_t n = 0, total = 1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char **nv = realloc(v, (n + 1) * sizeof *v);
    if (!nv) break;
    v = nv;
    v[n] = strdup(de->d_name);
    total += strlen(de->d_name) + 1;
    n++;
  }
  closedir(d);
  qsort(v, n, sizeof *v, cmp_str);
  char *out = malloc(total), *p = out;
  for (size_t i = 0; i < n; i++) {
    if (out && v[i]) p += sprintf(p, "%s\n", v[i]);
    free(v[i]);
  }
  free(v);
  if (!out) {
    snprintf(err, el, "out of memory");
    return -1;
  }
  *p = 0;
  *names = out;
  json_array_append_new(s->reads, json_pack("{s:s, s:b}", "path", real, "listing", 1));
  return 0;
}

static void svc_note(void *ctx, const char *line) {
  mi_agent_services *s = ctx;
  if (line) json_array_append_new(s->notes, json_string(line));
}

/* ---- the LLM ---- */

static int svc_llm_chat(void *ctx, const char *request_json, char **response_json, char *err, size_t el) {
  mi_agent_services *s = ctx;
  *response_json = NULL;
  if (!s->cfg.llm) {
    snprintf(err, el, "no LLM is lent to agents: give mi-gen --llm-base URL (or --llm-replay DIR)");
    return -1;
  }
  mi_llm_usage u = {0};
  if (s->llm) mi_llm_client_usage(s->llm, &u);
  if (s->cfg.requests_left >= 0 && u.requests >= s->cfg.requests_left) {
    s->budget_spent = "requests";
    snprintf(err, el, "budget spent: requests (%lld allowed)", (long long)s->cfg.requests_left);
    return -1;
  }
  if (s->cfg.tokens_left >= 0 && u.prompt_tokens + u.completion_tokens >= s->cfg.tokens_left) {
    s->budget_spent = "tokens";
    snprintf(err, el, "budget spent: tokens (%lld allowed, %lld used)", (long long)s->cfg.tokens_left,
             (long long)(u.prompt_tokens + u.completion_tokens));
    return -1;
  }
  if (!s->llm) {
    if (s->client_failed) {
      snprintf(err, el, "the LLM client could not be made");
      return -1;
    }
    s->llm = mi_llm_client_new(s->cfg.llm, err, el);
    if (!s->llm) {
      s->client_failed = 1;
      return -1;
    }
    if (s->cfg.llm_seen) mi_llm_client_set_seen(s->llm, s->cfg.llm_seen);
  }
  json_error_t je;
  json_t *rq = json_loads(request_json ? request_json : "", 0, &je);
  json_t *msgs = json_object_get(rq, "messages");
  if (!json_is_array(msgs) || !json_array_size(msgs)) {
    snprintf(err, el, "llm_chat: the request has no messages array (%s)", rq ? "missing" : je.text);
    json_decref(rq);
    return -1;
  }
  size_t n = json_array_size(msgs);
  mi_llm_message *m = calloc(n, sizeof *m);
  for (size_t i = 0; m && i < n; i++) {
    json_t *o = json_array_get(msgs, i);
    m[i].role = json_string_value(json_object_get(o, "role"));
    m[i].content = json_string_value(json_object_get(o, "content"));
    m[i].tool_call_id = json_string_value(json_object_get(o, "tool_call_id"));
    m[i].tool_calls = json_is_array(json_object_get(o, "tool_calls")) ? json_object_get(o, "tool_calls") : NULL;
  }
  json_t *t = json_object_get(rq, "temperature"), *sd = json_object_get(rq, "seed"), *mt = json_object_get(rq, "max_tokens");
  mi_llm_request q = {.messages = m, .n_messages = n, .tools = json_is_array(json_object_get(rq, "tools")) ? json_object_get(rq, "tools") : NULL,
                      .temperature = json_is_number(t) ? json_number_value(t) : -1,
                      .seed = json_is_integer(sd) ? json_integer_value(sd) : -1,
                      .max_tokens = json_is_integer(mt) ? (int)json_integer_value(mt) : 0,
                      .stream = json_is_true(json_object_get(rq, "stream"))};
  mi_llm_response r;
  int rc = m ? mi_llm_chat(s->llm, &q, &r, err, el) : -1;
  if (!m) snprintf(err, el, "out of memory");
  if (rc == 0) {
    json_t *o = json_pack("{s:s, s:O?, s:s, s:{s:I, s:I, s:b}}", "content", r.content ? r.content : "", "tool_calls",
                          r.tool_calls, "finish_reason", r.finish_reason, "usage", "prompt_tokens",
                          (json_int_t)r.prompt_tokens, "completion_tokens", (json_int_t)r.completion_tokens,
                          "estimated", r.usage_estimated);
    *response_json = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!*response_json) rc = -1, snprintf(err, el, "out of memory");
  }
  if (m) mi_llm_response_free(&r);
  free(m);
  json_decref(rq);
  return rc;
}

/* ---- build / free ---- */

mi_agent_services *mi_agent_services_new(const mi_agent_host_cfg *cfg) {
  mi_agent_services *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cfg = *cfg;
  s->reads = json_array();
  s->refused = json_array();
  s->notes = json_array();
  s->host = (mi_agent_host){.struct_size = sizeof(mi_agent_host), .version = MI_AGENT_HOST_VERSION, .ctx = s,
                            .llm_chat = svc_llm_chat, .read_file = svc_read_file, .list_dir = svc_list_dir,
                            .note = svc_note};
  return s;
}

const mi_agent_host *mi_agent_services_host(mi_agent_services *s) { return &s->host; }

json_t *mi_agent_services_report(mi_agent_services *s) {
  mi_llm_usage u = {0};
  if (s->llm) mi_llm_client_usage(s->llm, &u);
  json_t *r = json_pack("{s:{s:I, s:I, s:I, s:I, s:f}, s:O, s:O, s:O}", "llm", "requests", (json_int_t)u.requests,
                        "attempts", (json_int_t)u.attempts, "prompt_tokens", (json_int_t)u.prompt_tokens,
                        "completion_tokens", (json_int_t)u.completion_tokens, "seconds", u.seconds, "reads", s->reads,
                        "refused", s->refused, "notes", s->notes);
  if (s->llm) json_object_set(r, "llm_seen", (json_t *)mi_llm_client_seen(s->llm));
  else if (s->cfg.llm_seen) json_object_set_new(r, "llm_seen", json_deep_copy(s->cfg.llm_seen));
  if (s->budget_spent) json_object_set_new(r, "budget_spent", json_string(s->budget_spent));
  return r;
}

void mi_agent_services_free(mi_agent_services *s) {
  if (!s) return;
  mi_llm_client_free(s->llm);
  json_decref(s->reads);
  json_decref(s->refused);
  json_decref(s->notes);
  free(s);
}
