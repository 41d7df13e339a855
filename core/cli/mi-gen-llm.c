/* mi-gen: strategies, the LLM endpoint, budgets and source references
 * (mi-gen-llm.h). The API key is read from an environment variable and
 * handed to the client only: it is never printed, journalled or written in
 * a manifest or a recording. */
#define _GNU_SOURCE
#include "core/cli/mi-gen-llm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/gen/agent_host.h"
#include "core/llm/client.h"
#include "core/util/file.h"

enum {
  O_IMPL = 1000, O_REV, O_BASE, O_MODEL, O_KEYENV, O_RECORD, O_REPLAY, O_LTIMEOUT, O_RETRIES,
  O_B_ITER, O_B_TOK, O_B_REQ, O_B_WALL, O_REFS, O_TEMP, O_LSEED, O_STREAM, O_CONFIG,
};

static const struct option k_opts[] = {
    {"implementer", 1, 0, O_IMPL},    {"reviewer", 1, 0, O_REV},         {"llm-base", 1, 0, O_BASE},
    {"llm-model", 1, 0, O_MODEL},     {"llm-key-env", 1, 0, O_KEYENV},   {"llm-record", 1, 0, O_RECORD},
    {"llm-replay", 1, 0, O_REPLAY},   {"llm-timeout", 1, 0, O_LTIMEOUT}, {"llm-retries", 1, 0, O_RETRIES},
    {"budget-iterations", 1, 0, O_B_ITER}, {"budget-tokens", 1, 0, O_B_TOK}, {"budget-requests", 1, 0, O_B_REQ},
    {"budget-wall", 1, 0, O_B_WALL},  {"refs", 1, 0, O_REFS},            {"llm-temperature", 1, 0, O_TEMP},
    {"llm-seed", 1, 0, O_LSEED},      {"llm-stream", 0, 0, O_STREAM},
    {"llm-config", 1, 0, O_CONFIG},
};

#define N_ROLES 3
static const char *const k_roles[N_ROLES] = {"implementer", "reviewer", "verifier"};

typedef struct limits {
  double iterations, tokens, requests, wall; /* < 0: unlimited */
} limits;

typedef struct spent {
  long long calls, requests, attempts, prompt_tokens, completion_tokens;
  double llm_seconds, wall_s;
} spent;

static struct {
  struct option *longs;
  const char *impl, *rev;
  const char *base, *model, *key_env, *record, *replay;
  double llm_timeout, temperature;
  int retries, stream, set_timeout, set_retries, set_temp, set_seed;
  json_t *config; /* --llm-config: flags given win over it */
  long long llm_seed;
  limits run, role[N_ROLES];
  spent used[N_ROLES];
  json_t *seen;      /* record/replay counters across agent processes */
  const char *refs[16];
  int n_refs;
  char *roots[24];   /* absolute */
  int n_roots;
  char model_dir[PATH_MAX], run_dir[PATH_MAX], sdk[PATH_MAX];
  mi_llm_config llm;
  int llm_on;
  json_t *reads, *refused;
  const char *budget_spent;
  char budget_why[256];
  char best_src[65];
  int best_iter, best_score, have_best;
  char last_src[65];
  mi_agent_host_cfg hc;
} G = {.impl = "compose", .rev = "rules", .llm_timeout = 300, .temperature = 0, .retries = 2, .llm_seed = 0,
       .run = {-1, -1, -1, -1},
       .role = {{-1, -1, -1, -1}, {-1, -1, -1, -1}, {-1, -1, -1, -1}}};

static int role_ix(const char *role) {
  for (int i = 0; i < N_ROLES; i++)
    if (!strcmp(role, k_roles[i])) return i;
  return 2;
}

const struct option *gen_llm_longopts(const struct option *base) {
  size_t nb = 0, nk = sizeof k_opts / sizeof *k_opts;
  while (base[nb].name) nb++;
  if (!G.longs) atexit(gen_llm_free);
  free(G.longs);
  G.longs = calloc(nb + nk + 1, sizeof *G.longs);
  if (!G.longs) return base;
  memcpy(G.longs, base, nb * sizeof *base);
  memcpy(G.longs + nb, k_opts, nk * sizeof *k_opts);
  return G.longs;
}

const char *gen_llm_usage(void) {
  return "  --implementer S      implementer strategy: compose (default) or llm\n"
         "  --reviewer S         reviewer strategy: rules (default) or llm\n"
         "  --llm-base URL       OpenAI-compatible endpoint (default $MI_LLM_BASE_URL, $OPENAI_BASE_URL)\n"
         "  --llm-model NAME     the request's model (default $MI_LLM_MODEL)\n"
         "  --llm-key-env VAR    the environment variable holding the API key (default MI_LLM_API_KEY, then\n"
         "                       OPENAI_API_KEY); the key is never logged or saved\n"
         "  --llm-config FILE    {\"base_url\", \"model\", \"key_env\", \"timeout_s\", \"retries\", \"temperature\",\n"
         "                       \"seed\", \"stream\"} (no key in it: name the variable that holds it)\n"
         "  --llm-record DIR     save every LLM exchange;  --llm-replay DIR  answer from them, no network\n"
         "  --llm-timeout S      one request's limit (default 300);  --llm-retries N (default 2)\n"
         "  --llm-temperature T, --llm-seed N   sampling (default 0, 0);  --llm-stream  server-sent events\n"
         "  --budget-iterations, --budget-tokens, --budget-requests, --budget-wall  [ROLE=]N[,ROLE=N...]\n"
         "                       per run (bare N) and per role (implementer=, reviewer=, verifier=)\n"
         "  --refs DIR           a source-reference root agents may read (repeatable; reads are logged)\n"
         "exit 9: a budget is spent (the best partial result is in ENGINE_DIR/partial)\n";
}

/* "N" or "role=N", comma-separated, into the run's and the roles' limits */
static int parse_budget(const char *flag, const char *arg, size_t field) {
  char *dup = strdup(arg), *save = NULL;
  int rc = 0;
  for (char *tok = strtok_r(dup, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    const char *num = eq ? eq + 1 : tok;
    char *end;
    double v = strtod(num, &end);
    limits *l = &G.run;
    if (eq) {
      *eq = 0;
      int ix = -1;
      for (int i = 0; i < N_ROLES; i++)
        if (!strcmp(tok, k_roles[i])) ix = i;
      if (ix < 0) {
        fprintf(stderr, "mi-gen: --%s %s: unknown role '%s' (implementer, reviewer, verifier)\n", flag, arg, tok);
        rc = -1;
        break;
      }
      l = &G.role[ix];
    }
    if (end == num || *end || v < 0) {
      fprintf(stderr, "mi-gen: --%s %s: expected [ROLE=]N with N >= 0\n", flag, arg);
      rc = -1;
      break;
    }
    *(double *)((char *)l + field) = v;
  }
  free(dup);
  return rc;
}

/* arg into *out when it is a or b; -1 after a line on stderr. */
static int one_of(const char *opt, const char *arg, const char *a, const char *b, const char **out) {
  if (strcmp(arg, a) && strcmp(arg, b)) {
    fprintf(stderr, "mi-gen: %s %s: %s or %s\n", opt, arg, a, b);
    return -1;
  }
  *out = arg;
  return 0;
}

int gen_llm_option(int ch, const char *arg) {
  switch (ch) {
  case O_IMPL: return one_of("--implementer", arg, "compose", "llm", &G.impl);
  case O_REV: return one_of("--reviewer", arg, "rules", "llm", &G.rev);
  case O_BASE: G.base = arg; return 0;
  case O_MODEL: G.model = arg; return 0;
  case O_KEYENV: G.key_env = arg; return 0;
  case O_RECORD: G.record = arg; return 0;
  case O_REPLAY: G.replay = arg; return 0;
  case O_LTIMEOUT:
    G.llm_timeout = atof(arg);
    G.set_timeout = 1;
    if (G.llm_timeout <= 0) {
      fprintf(stderr, "mi-gen: --llm-timeout %s: a positive number of seconds\n", arg);
      return -1;
    }
    return 0;
  case O_RETRIES: G.retries = atoi(arg), G.set_retries = 1; return 0;
  case O_TEMP: G.temperature = atof(arg), G.set_temp = 1; return 0;
  case O_LSEED: G.llm_seed = atoll(arg), G.set_seed = 1; return 0;
  case O_CONFIG: {
    json_error_t je;
    json_decref(G.config);
    G.config = json_load_file(arg, JSON_REJECT_DUPLICATES, &je);
    static const char *const known[] = {"base_url", "model", "key_env", "timeout_s", "retries", "temperature", "seed", "stream"};
    const char *k;
    json_t *v;
    if (!json_is_object(G.config)) {
      fprintf(stderr, "mi-gen: %s: %s\n", arg, G.config ? "not a JSON object" : je.text);
      return -1;
    }
    json_object_foreach(G.config, k, v) {
      int ok = 0;
      for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok |= !strcmp(k, known[i]);
      if (!ok) {
        fprintf(stderr, "mi-gen: %s: unknown field \"%s\"%s\n", arg, k,
                strstr(k, "key") ? " (the key itself never goes in a file: name its variable in key_env)" : "");
        return -1;
      }
    }
    return 0;
  }
  case O_STREAM: G.stream = 1; return 0;
  case O_B_ITER: return parse_budget("budget-iterations", arg, offsetof(limits, iterations));
  case O_B_TOK: return parse_budget("budget-tokens", arg, offsetof(limits, tokens));
  case O_B_REQ: return parse_budget("budget-requests", arg, offsetof(limits, requests));
  case O_B_WALL: return parse_budget("budget-wall", arg, offsetof(limits, wall));
  case O_REFS:
    if (G.n_refs == (int)(sizeof G.refs / sizeof *G.refs)) {
      fprintf(stderr, "mi-gen: --refs: at most %zu folders\n", sizeof G.refs / sizeof *G.refs);
      return -1;
    }
    G.refs[G.n_refs++] = arg;
    return 0;
  default: return 1;
  }
}

const char *gen_llm_ref(int i) { return i >= 0 && i < G.n_refs ? G.refs[i] : NULL; }

void gen_llm_run_limits(int *max_iter, double *wall_s) {
  if (G.run.iterations >= 0) *max_iter = (int)G.run.iterations;
  if (G.run.wall >= 0) *wall_s = G.run.wall;
}

static void add_root(const char *p) {
  char r[PATH_MAX];
  if (p && realpath(p, r) && G.n_roots < (int)(sizeof G.roots / sizeof *G.roots)) G.roots[G.n_roots++] = strdup(r);
}

int gen_llm_setup(const char *ckb_abs, const char *model_abs, const char *cons_file, const char *exe_dir,
                  const char *run_dir) {
  G.llm_on = !strcmp(G.impl, "llm") || !strcmp(G.rev, "llm");
  if (G.config) { /* what the flags left unset */
    json_t *c = G.config;
    if (!G.base) G.base = json_string_value(json_object_get(c, "base_url"));
    if (!G.model) G.model = json_string_value(json_object_get(c, "model"));
    if (!G.key_env) G.key_env = json_string_value(json_object_get(c, "key_env"));
    if (!G.set_timeout && json_number_value(json_object_get(c, "timeout_s")) > 0) G.llm_timeout = json_number_value(json_object_get(c, "timeout_s"));
    if (!G.set_retries && json_is_integer(json_object_get(c, "retries"))) G.retries = (int)json_integer_value(json_object_get(c, "retries"));
    if (!G.set_temp && json_is_number(json_object_get(c, "temperature"))) G.temperature = json_number_value(json_object_get(c, "temperature"));
    if (!G.set_seed && json_is_integer(json_object_get(c, "seed"))) G.llm_seed = json_integer_value(json_object_get(c, "seed"));
    if (json_is_true(json_object_get(c, "stream"))) G.stream = 1;
  }
  G.seen = json_object();
  G.reads = json_object();
  G.refused = json_array();
  snprintf(G.model_dir, sizeof G.model_dir, "%s", model_abs);
  snprintf(G.run_dir, sizeof G.run_dir, "%s", run_dir);
  /* the readable roots: the CKB, the constraints, the SDK's headers (the
   * interface an engine is written against), and the references when on */
  add_root(ckb_abs);
  add_root(cons_file);
  char sdk[PATH_MAX + 64];
  snprintf(sdk, sizeof sdk, "%s/../../sdk/include", exe_dir);
  if (access(sdk, R_OK) != 0) snprintf(sdk, sizeof sdk, "%s/../include", exe_dir);
  if (!realpath(sdk, G.sdk)) G.sdk[0] = 0;
  add_root(G.sdk[0] ? G.sdk : NULL);
  for (int i = 0; i < G.n_refs; i++) {
    struct stat st;
    if (stat(G.refs[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "mi-gen: --refs %s: not a folder\n", G.refs[i]);
      return -1;
    }
    add_root(G.refs[i]);
  }
  if (!G.llm_on) {
    if (G.base || G.replay || G.record)
      fprintf(stderr, "mi-gen: note: --llm-* flags given but no role uses the llm strategy\n");
    return 0;
  }
  G.llm = (mi_llm_config){.base_url = G.base, .model = G.model, .total_s = G.llm_timeout,
                          .idle_s = G.llm_timeout < 60 ? G.llm_timeout : 60, .connect_s = 10,
                          .max_retries = G.retries, .record_dir = G.record, .replay_dir = G.replay,
                          .jitter_seed = 0x6d692d67656eULL};
  if (G.key_env) {
    G.llm.api_key = getenv(G.key_env);
    if (!G.llm.api_key) fprintf(stderr, "mi-gen: note: --llm-key-env %s: that variable is not set\n", G.key_env);
  }
  mi_llm_config_from_env(&G.llm);
  if (G.record && G.replay) {
    fprintf(stderr, "mi-gen: --llm-record and --llm-replay exclude each other\n");
    return -1;
  }
  char err[512];
  mi_llm_client *probe = mi_llm_client_new(&G.llm, err, sizeof err); /* checks the settings; no request */
  if (!probe) {
    fprintf(stderr, "mi-gen: the llm strategy needs an endpoint: %s\n", err);
    return -1;
  }
  mi_llm_client_free(probe);
  return 0;
}

const char *gen_llm_strategy(const char *role) {
  if (!strcmp(role, "implementer")) return G.impl;
  if (!strcmp(role, "reviewer")) return G.rev;
  return "stages";
}

int gen_llm_is_llm(const char *role) { return !strcmp(gen_llm_strategy(role), "llm"); }

void gen_llm_plugin_path(const char *exe_dir, const char *role, const char *strategy, char *out, size_t n) {
  /* llm serves two roles: its plugins are named by role and strategy */
  if (!strcmp(strategy, "llm")) snprintf(out, n, "%s/../lib/metainfer/libmi-agent-%s-llm.so", exe_dir, role);
  else snprintf(out, n, "%s/../lib/metainfer/libmi-agent-%s.so", exe_dir, strategy);
}

double gen_llm_timeout(const char *role, double dflt) {
  double t = dflt;
  if (gen_llm_is_llm(role)) { /* a few requests with their retries and backoff */
    double want = 4 * (G.llm_timeout * (G.retries + 1) + 30);
    if (want > t) t = want;
  }
  const limits *l = &G.role[role_ix(role)];
  if (l->wall >= 0 && l->wall - G.used[role_ix(role)].wall_s < t) t = l->wall - G.used[role_ix(role)].wall_s;
  return t > 1 ? t : 1;
}

void gen_llm_decorate_task(const char *role, json_t *task) {
  if (!gen_llm_is_llm(role)) return;
  if (G.sdk[0]) json_object_set_new(task, "sdk_include", json_string(G.sdk));
  json_t *refs = json_array();
  for (int i = 0; i < G.n_refs; i++) {
    char r[PATH_MAX];
    if (realpath(G.refs[i], r)) json_array_append_new(refs, json_string(r));
  }
  json_object_set_new(task, "refs", refs);
  json_object_set_new(task, "llm", json_pack("{s:f, s:I, s:b}", "temperature", G.temperature, "seed", (json_int_t)G.llm_seed,
                                             "stream", G.stream));
  if (!strcmp(role, "implementer") && G.last_src[0]) json_object_set_new(task, "previous_source", json_string(G.last_src));
}

static long long total_tokens(void) {
  long long t = 0;
  for (int i = 0; i < N_ROLES; i++) t += G.used[i].prompt_tokens + G.used[i].completion_tokens;
  return t;
}
static long long total_requests(void) {
  long long t = 0;
  for (int i = 0; i < N_ROLES; i++) t += G.used[i].requests;
  return t;
}

/* what is left of a run limit and a role limit together; -1: unlimited */
static long long left(double run_lim, long long run_used, double role_lim, long long role_used) {
  long long a = run_lim < 0 ? -1 : (long long)run_lim - run_used, b = role_lim < 0 ? -1 : (long long)role_lim - role_used;
  if (run_lim >= 0 && a < 0) a = 0;
  if (role_lim >= 0 && b < 0) b = 0;
  if (a < 0) return b;
  if (b < 0) return a;
  return a < b ? a : b;
}

int gen_llm_run_agent(const char *plugin_path, const char *role, json_t *task, const char *ckb_dir,
                      const char *run_dir, double timeout_s, mi_agent_outcome *o) {
  int ix = role_ix(role);
  spent *u = &G.used[ix];
  G.hc = (mi_agent_host_cfg){
      .llm = G.llm_on ? &G.llm : NULL, .llm_seen = G.seen,
      .requests_left = left(G.run.requests, total_requests(), G.role[ix].requests, u->requests),
      .tokens_left = left(G.run.tokens, total_tokens(), G.role[ix].tokens, u->prompt_tokens + u->completion_tokens),
      .roots = (const char *const *)G.roots, .n_roots = (size_t)G.n_roots, .model_dir = G.model_dir,
      .run_dir = run_dir};
  G.budget_spent = NULL;
  return mi_agent_run_ex(plugin_path, task, ckb_dir, run_dir, timeout_s, &G.hc, o);
}

void gen_llm_account(const char *role, const mi_agent_outcome *o, json_t *line) {
  spent *u = &G.used[role_ix(role)];
  u->calls++;
  u->wall_s += o->wall_s;
  json_t *h = o->host_report;
  const limits *rl0 = &G.role[role_ix(role)];
  if (!h && rl0->wall >= 0 && u->wall_s >= rl0->wall) {
    G.budget_spent = "wall";
    snprintf(G.budget_why, sizeof G.budget_why, "the %s's wall-time budget (%.0f s) is spent", role, rl0->wall);
  }
  if (!h) return;
  json_t *l = json_object_get(h, "llm");
  u->requests += json_integer_value(json_object_get(l, "requests"));
  u->attempts += json_integer_value(json_object_get(l, "attempts"));
  u->prompt_tokens += json_integer_value(json_object_get(l, "prompt_tokens"));
  u->completion_tokens += json_integer_value(json_object_get(l, "completion_tokens"));
  u->llm_seconds += json_number_value(json_object_get(l, "seconds"));
  if (json_is_object(json_object_get(h, "llm_seen"))) json_object_update(G.seen, json_object_get(h, "llm_seen"));
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(h, "reads"), i, v) {
    const char *p = json_string_value(json_object_get(v, "path"));
    if (!p) continue;
    json_t *e = json_object_get(G.reads, p);
    if (!e) {
      e = json_pack("{s:i, s:I, s:[]}", "reads", 0, "bytes", json_integer_value(json_object_get(v, "bytes")), "roles");
      json_object_set_new(G.reads, p, e);
    }
    json_object_set_new(e, "reads", json_integer(json_integer_value(json_object_get(e, "reads")) + 1));
    int have = 0;
    size_t k;
    json_t *r;
    json_array_foreach(json_object_get(e, "roles"), k, r) have |= !strcmp(json_string_value(r), role);
    if (!have) json_array_append_new(json_object_get(e, "roles"), json_string(role));
  }
  json_array_foreach(json_object_get(h, "refused"), i, v) {
    json_t *c = json_deep_copy(v);
    json_object_set_new(c, "role", json_string(role));
    json_array_append_new(G.refused, c);
  }
  const limits *rl = &G.role[role_ix(role)];
  if (rl->wall >= 0 && u->wall_s >= rl->wall) { /* its limit was capped to what was left */
    G.budget_spent = "wall";
    snprintf(G.budget_why, sizeof G.budget_why, "the %s's wall-time budget (%.0f s) is spent", role, rl->wall);
  }
  const char *b = json_string_value(json_object_get(h, "budget_spent"));
  if (b) {
    G.budget_spent = b[0] == 'r' ? "requests" : "tokens";
    snprintf(G.budget_why, sizeof G.budget_why, "the %s budget is spent (%s: %lld used)", G.budget_spent, role,
             b[0] == 'r' ? (long long)total_requests() : total_tokens());
  }
  if (line) {
    json_t *rep = json_deep_copy(h);
    json_object_del(rep, "llm_seen");
    json_object_set_new(line, "host", rep);
  }
}

const char *gen_llm_budget_check(const char *role) {
  int ix = role_ix(role);
  const limits *l = &G.role[ix];
  const spent *u = &G.used[ix];
  static char why[256];
  if (l->iterations >= 0 && u->calls >= (long long)l->iterations)
    snprintf(why, sizeof why, "the %s's iteration budget (%.0f calls) is spent", role, l->iterations);
  else if (l->wall >= 0 && u->wall_s >= l->wall)
    snprintf(why, sizeof why, "the %s's wall-time budget (%.0f s) is spent", role, l->wall);
  else if ((l->tokens >= 0 && u->prompt_tokens + u->completion_tokens >= (long long)l->tokens && gen_llm_is_llm(role)) ||
           (G.run.tokens >= 0 && total_tokens() >= (long long)G.run.tokens && gen_llm_is_llm(role)))
    snprintf(why, sizeof why, "the token budget is spent (%lld used)", total_tokens());
  else if ((l->requests >= 0 && u->requests >= (long long)l->requests && gen_llm_is_llm(role)) ||
           (G.run.requests >= 0 && total_requests() >= (long long)G.run.requests && gen_llm_is_llm(role)))
    snprintf(why, sizeof why, "the request budget is spent (%lld requests)", total_requests());
  else
    return NULL;
  return why;
}

const char *gen_llm_budget_spent(void) { return G.budget_spent ? G.budget_why : NULL; }

void gen_llm_note_candidate(const char *sha, int iteration, int stages_passed) {
  if (!sha) return;
  snprintf(G.last_src, sizeof G.last_src, "%s", sha);
  if (!G.have_best || stages_passed > G.best_score) {
    snprintf(G.best_src, sizeof G.best_src, "%s", sha);
    G.best_iter = iteration;
    G.best_score = stages_passed;
    G.have_best = 1;
  }
}

static json_t *spent_json(const spent *u) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "calls", (json_int_t)u->calls, "requests",
                   (json_int_t)u->requests, "attempts", (json_int_t)u->attempts, "prompt_tokens",
                   (json_int_t)u->prompt_tokens, "completion_tokens", (json_int_t)u->completion_tokens, "llm_seconds",
                   u->llm_seconds, "wall_s", u->wall_s);
}

static json_t *limits_json(const limits *l) {
  json_t *o = json_object();
  const char *k[] = {"iterations", "tokens", "requests", "wall_s"};
  const double v[] = {l->iterations, l->tokens, l->requests, l->wall};
  for (int i = 0; i < 4; i++)
    if (v[i] >= 0) json_object_set_new(o, k[i], json_real(v[i]));
  return o;
}

json_t *gen_llm_manifest(void) {
  json_t *sp = json_object(), *bud = json_pack("{s:o}", "run", limits_json(&G.run));
  spent tot = {0};
  for (int i = 0; i < N_ROLES; i++) {
    json_object_set_new(sp, k_roles[i], spent_json(&G.used[i]));
    json_object_set_new(bud, k_roles[i], limits_json(&G.role[i]));
    tot.calls += G.used[i].calls, tot.requests += G.used[i].requests, tot.attempts += G.used[i].attempts;
    tot.prompt_tokens += G.used[i].prompt_tokens, tot.completion_tokens += G.used[i].completion_tokens;
    tot.llm_seconds += G.used[i].llm_seconds, tot.wall_s += G.used[i].wall_s;
  }
  json_object_set_new(sp, "run", spent_json(&tot));
  json_t *reads = json_array();
  const char *p;
  json_t *v;
  json_object_foreach(G.reads, p, v) {
    json_t *r = json_deep_copy(v);
    json_object_set_new(r, "path", json_string(p));
    json_array_append_new(reads, r);
  }
  json_t *refs = json_array();
  for (int i = 0; i < G.n_refs; i++) json_array_append_new(refs, json_string(G.refs[i]));
  json_t *m = json_pack("{s:{s:s, s:s, s:s}, s:o, s:o, s:{s:b, s:o}, s:o, s:O}", "strategies", "implementer", G.impl,
                        "reviewer", G.rev, "verifier", "stages", "budgets", bud, "spent", sp, "references", "on",
                        G.n_refs > 0, "roots", refs, "reads", reads, "refused", G.refused ? G.refused : json_array());
  if (G.llm_on)
    json_object_set_new(m, "llm", json_pack("{s:s?, s:s?, s:s?, s:s?, s:b}", "base_url", G.llm.base_url, "model",
                                            G.llm.model, "record", G.record, "replay", G.replay, "api_key_given",
                                            G.llm.api_key && G.llm.api_key[0]));
  return m;
}

void gen_llm_write_partial(const char *out_abs, const char *run_dir, const char *reason, json_t *cons) {
  char dir[PATH_MAX + 16], p[PATH_MAX + 128], src[PATH_MAX + 128];
  snprintf(dir, sizeof dir, "%s/partial", out_abs);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "mi-gen: %s: cannot create: %s\n", dir, strerror(errno));
    return;
  }
  json_t *m = json_pack("{s:s, s:s, s:s, s:O}", "tool", "mi-gen", "result", "budget spent", "reason", reason, "constraints", cons);
  if (G.have_best) {
    snprintf(src, sizeof src, "%s/artifacts/%s.c", run_dir, G.best_src);
    snprintf(p, sizeof p, "%s/engine.c", dir);
    char sha[65] = "";
    /* re-hashed like every artifact the orchestrator uses */
    int ok = mi_sha256_file(src, sha) == 0 && !strcmp(sha, G.best_src) && mi_file_copy(src, p) == 0;
    json_object_set_new(m, "best", json_pack("{s:s, s:i, s:i, s:b, s:s}", "source", G.best_src, "iteration", G.best_iter,
                                             "stages_passed", G.best_score < 0 ? 0 : G.best_score, "review_rejected",
                                             G.best_score < 0, "file", ok ? "engine.c" : "(missing)"));
  }
  json_object_set_new(m, "generation", gen_llm_manifest());
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  json_dump_file(m, p, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(m);
  fprintf(stderr, "mi-gen: the best partial result is in %s%s\n", dir, G.have_best ? "" : " (no candidate was written)");
}

void gen_llm_free(void) {
  free(G.longs);
  G.longs = NULL;
  for (int i = 0; i < G.n_roots; i++) free(G.roots[i]);
  G.n_roots = 0;
  json_decref(G.seen);
  json_decref(G.reads);
  json_decref(G.refused);
  json_decref(G.config);
  G.seen = G.reads = G.refused = G.config = NULL;
}
