/* mi-gen: generates a verified single-path engine for one model x platform x
 * dtype x TP from the CKB, through separate agents (implementer, reviewer,
 * verifier), each run in a process of its own, sharing only the blackboard
 * (RUN_DIR: journal.jsonl + artifacts/) and a read-only CKB.
 *
 *   mi-gen --model DIR --platform NAME --dtype bf16 --tp 1 --out ENGINE_DIR
 *
 * Exit status: 0 engine verified and written; 2 usage (or a run that cannot
 * be set up); 3 not covered by the CKB (gaps listed, or a KV type no
 * platform contract offers); 4 verification failed; 5 unknown platform; 6 a
 * weight dtype the platform contract does not offer; 7 a TP degree that does
 * not divide the model's heads; 8 a malformed --perf; 9 a budget (iterations,
 * wall time, LLM tokens or requests; per run or per role) is spent: the best
 * partial result is in ENGINE_DIR/partial; 10 the model contract's reference
 * plugin (the oracle of the deployment run) is not installed; 11 a --perf
 * gate was not met (the line names the gate and the measured figure). */
#define _GNU_SOURCE
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/cli/mi-gen-llm.h"
#include "core/gen/evolve/evolve.h"
#include "core/gen/gen.h"
#include "core/gen/learn.h"
#include "core/gen/pack/pack.h"
#include "core/runtime/loader.h"
#include "core/runtime/model_input.h"
#include "core/util/file.h"
#include "mi/model.h"

enum { EX_OK = 0, EX_USAGE = 2, EX_GAP = 3, EX_FAIL = 4, EX_PLATFORM = 5, EX_DTYPE = 6, EX_TP = 7, EX_PERF = 8,
       /* 9: a spent budget, GEN_EX_BUDGET in mi-gen-llm.h */ EX_REFERENCE = 10, EX_GATE = 11 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mi-gen --model DIR --platform NAME --dtype DTYPE --tp N --out ENGINE_DIR [options]\n"
          "       mi-gen --constraints FILE.json [--out ENGINE_DIR]\n"
          "       mi-gen --resume RUN_DIR\n"
          "  --kv-type T          KV cache type (default f32)\n"
          "  --perf SPEC          performance gates, e.g. \"decode>=0.9roofline,prefill>=0.3roofline\" (comma-\n"
          "                       separated; roofline: decode against memory bandwidth, prefill against the\n"
          "                       platform's matmul peak, both measured in the same run; or tok/s)\n"
          "  --ckb DIR            the CKB (default: $MI_CKB_DIR, ./ckb, next to the exe); experience is written there,\n"
          "                       and failure reports and knowledge gaps (one entry per distinct symptom or gap;\n"
          "                       MI_CKB_LEARN=0 writes neither)\n"
          "  --run-dir DIR        the blackboard (default: ENGINE_DIR/run)\n"
          "  --max-iterations N   candidates to try (default 4)\n"
          "  --time-budget S      wall-clock budget in seconds (default 1800)\n"
          "  --candidate FILE.c   review and verify this source instead of composing one\n"
          "  --seed N             the verifier's master seed (default: random)\n"
          "  --verify-timeout S   mi-verify's per-unit limit (raise it for large shapes)\n"
          "  --deploy-reach N     the deployment run (4d) decodes to position N at most instead of the\n"
          "                       declared context (a long-context model's check, a sanitizer build's;\n"
          "                       default $MI_GEN_DEPLOY_REACH, else none)\n"
          "  --goldens DIR        stage 4's llama.cpp goldens (default: tests/goldens of the source tree)\n"
          "  --platform-plugin PATH  verify and deploy on this platform plugin (libmi-NAME.so) in place of the\n"
          "                       contract's own; one of another name stands in for the platform, said in the\n"
          "                       output, plugins.conf and manifest: the GPU emulator, e.g. --platform nvidia\n"
          "                       --platform-plugin build/tests/gpu-emu/libmi-gpuemu32.so (docs/mi-gen.md)\n"
          "  -t, --threads N      verifier threads for the platform (default 0: one per core)\n"
          "  --evolve             the knowledge-evolution loop (docs/evolution.md): --refs DIR (the oracle's\n"
          "                       goldens and sources, every read logged), --candidates DIR (a bundle of new\n"
          "                       operators), --ckb DIR (written), --model DIR (coverage, revalidation),\n"
          "                       --run-dir DIR (report); --no-revalidate stops after consolidation;\n"
          "                       exit 12 no variant, 13 bundle rejected, 14 consolidation, 15 revalidation\n"
          "                       failed, 16 revalidation: composer lacks layer kinds, 17 a config field or\n"
          "                       weight the vocabulary of variants does not explain (named; CKB unchanged)\n"
          "exit: 0 ok, 2 usage, 3 not covered, 4 verification failed, 9 a budget is spent,\n"
          "      5 unknown platform, 6 dtype not offered, 7 TP does not divide the heads, 8 bad --perf,\n"
          "      10 the model contract's reference plugin is not installed, 11 a --perf gate not met\n");
  fputs(gen_llm_usage(), f);
}

static char g_exe_dir[PATH_MAX];

/* --platform-plugin PATH: the platform plugin the verifier and the engine's
 * plugins.conf use in place of the contract's own libmi-<plugin>.so. Its name
 * is the file's (libmi-NAME.so), which the loader then holds its descriptor
 * to; one whose name is not the contract's plugin stands in for the platform
 * (the GPU emulator for a GPU contract), and mi-verify holds it to the
 * contract's wavefront and memory model. Returns the constraints' record
 * {name, path, stands_in_for}, or NULL with the reason on stderr. */
static json_t *platform_plugin_arg(const mi_ckb_entry *pe, const char *arg) {
  char abs_p[PATH_MAX];
  if (!realpath(arg, abs_p) || access(abs_p, R_OK) != 0) {
    fprintf(stderr, "mi-gen: --platform-plugin %s: %s\n", arg, strerror(errno));
    return NULL;
  }
  const char *base = strrchr(abs_p, '/') + 1, *own_name = json_string_value(json_object_get(pe->json, "plugin"));
  size_t n = strlen(base);
  if (strncmp(base, "libmi-", 6) || n <= 9 || strcmp(base + n - 3, ".so")) {
    fprintf(stderr, "mi-gen: --platform-plugin %s: not named libmi-NAME.so (NAME: the plugin's name, which plugins.conf gives)\n", arg);
    return NULL;
  }
  char name[128];
  snprintf(name, sizeof name, "%.*s", (int)(n - 9), base + 6);
  json_t *r = json_pack("{s:s, s:s}", "name", name, "path", abs_p);
  if (own_name && strcmp(name, own_name)) {
    json_object_set_new(r, "stands_in_for", json_string(pe->id));
    fprintf(stderr, "mi-gen: platform plugin '%s' (%s) stands in for %s, whose own plugin is '%s': the engine is verified on it, not on a %s device\n",
            name, abs_p, pe->id, own_name, own_name);
  }
  return r;
}

/* A half-precision KV cache needs the platform contract to list the
 * conversion (operator.convert, with a contract in the CKB) and attention
 * over such a cache, each for this type: else one line, not covered. */
static int kv_gap(mi_ckb *c, const mi_ckb_entry *pe, const char *kv) {
  static const char *const need[] = {"operator.convert", "operator.attention"};
  for (int n = 0; n < 2; n++) {
    int listed = 0;
    size_t i, k;
    json_t *e, *d;
    json_array_foreach(json_object_get(pe->json, "kernels"), i, e) {
      if (strcmp(json_string_value(json_object_get(e, "operator")) ?: "", need[n])) continue;
      json_array_foreach(json_object_get(e, "dtypes"), k, d) listed |= !strcmp(json_string_value(d) ?: "", kv);
    }
    if (!listed || !mi_ckb_find(c, need[n])) {
      fprintf(stderr, "mi-gen: not covered: KV type '%s': %s (%s) %s\n", kv, pe->id, pe->path,
              !listed ? (n ? "lists no operator.attention kernel over such a cache"
                           : "lists no operator.convert kernel for it (k and v are stored through it)")
                      : "names an operator with no contract in the CKB");
      return 1;
    }
  }
  return 0;
}

/* The deployment run's oracle must implement the model: its descriptor's
 * architectures hold config.json's. Loads it (a hand-written, installed
 * model plugin, not a candidate) to read them. One line and 1 otherwise. */
static int reference_serves(const mi_ckb_entry *me, const char *name, const char *path, const char *arch) {
  mi_options none = {0};
  mi_plugin *p = mi_plugin_load_file(path, &none);
  char serves[512] = "";
  int ok = 0;
  if (p && p->status == MI_PLUGIN_LOADED && p->desc && (int)p->desc->kind == MI_PLUGIN_MODEL && p->iface) {
    const mi_model_iface *mi = p->iface;
    for (const char *const *a = mi->architectures; a && *a; a++) {
      ok |= arch && !strcmp(*a, arch);
      size_t l = strlen(serves);
      snprintf(serves + l, sizeof serves - l, "%s%s", l ? ", " : "", *a);
    }
    if (!ok)
      fprintf(stderr, "mi-gen: %s: reference plugin '%s' of %s (%s) does not serve architecture %s (it serves %s)\n",
              me->path, name, me->id, path, arch ? arch : "(none in config.json)", serves[0] ? serves : "none");
  } else {
    fprintf(stderr, "mi-gen: %s: reference plugin '%s' of %s (%s) is not a usable model plugin: %s\n", me->path, name,
            me->id, path, !p ? "out of memory" : p->status != MI_PLUGIN_LOADED ? (p->reason ? p->reason : "not loaded")
                                                                                 : "not of kind model");
  }
  mi_plugin_unload(p);
  return !ok;
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* one agent call: progress on stderr, a journal line written by us, the
 * outcome's result returned (NULL + message when there is none) */
typedef struct role_time {
  double implementer, reviewer, verifier;
  int n_impl, n_rev, n_ver;
} role_time;

static json_t *call_agent(mi_bb *bb, const char *role, const char *strategy, json_t *task, const char *ckb_dir,
                          double timeout, role_time *rt, char *why, size_t why_len) {
  char path[PATH_MAX + 64];
  gen_llm_plugin_path(g_exe_dir, role, strategy, path, sizeof path);
  json_object_set_new(task, "role", json_string(role));
  json_object_set_new(task, "strategy", json_string(strategy));
  fprintf(stderr, "mi-gen: %-11s %-8s ...\n", role, strategy);
  gen_llm_decorate_task(role, task);
  mi_agent_outcome o;
  gen_llm_run_agent(path, role, task, ckb_dir, mi_bb_dir(bb), gen_llm_timeout(role, timeout), &o);
  if (!strcmp(role, "implementer")) rt->implementer += o.wall_s, rt->n_impl++;
  else if (!strcmp(role, "reviewer")) rt->reviewer += o.wall_s, rt->n_rev++;
  else rt->verifier += o.wall_s, rt->n_ver++;
  json_t *line = json_pack("{s:s, s:s, s:{s:s, s:I}, s:f, s:O}", "event", "agent_result", "role", role, "by",
                           "role", role, "pid", (json_int_t)o.pid, "wall_s", o.wall_s, "task", task);
  json_object_set_new(line, "strategy", json_string(strategy));
  if (o.result) json_object_set(line, "result", o.result);
  else json_object_set_new(line, "error", json_string(o.message));
  gen_llm_account(role, &o, line);
  json_decref(o.host_report);
  mi_bb_append(bb, line);
  json_decref(line);
  if (!o.result) {
    snprintf(why, why_len, "%s %s: %s", role, strategy, o.message);
    return NULL;
  }
  const char *st = json_string_value(json_object_get(o.result, "status"));
  if (!st || strcmp(st, "ok")) {
    snprintf(why, why_len, "%s %s: %s", role, strategy,
             json_string_value(json_object_get(o.result, "message")) ?: "failed");
    json_decref(o.result);
    return NULL;
  }
  return o.result;
}

/* The binding the first step of operator `op` gives its argument `arg` in
 * the model contract, or NULL. */
static const char *binding_of(json_t *model, const char *op, const char *arg) {
  json_t *all = mi_ckb_model_sequences(model);
  const char *b = NULL;
  for (size_t s = 0; op && arg && !b && s < json_array_size(all); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(all, s), i, st) if (!b && !strcmp(json_string_value(json_object_get(st, "operator")) ?: "", op))
        b = json_string_value(json_object_get(json_object_get(st, "args"), arg));
  }
  json_decref(all); /* b points into model, which holds it */
  return b;
}

/* Does the binding `cur` show the defect a repair is for? Its when_bound
 * patterns (fnmatch), where it has them; any binding otherwise. */
static int bound_as(json_t *repair, const char *cur) {
  json_t *pats = json_object_get(repair, "when_bound");
  if (!json_is_array(pats)) return 1;
  size_t i;
  json_t *p;
  json_array_foreach(pats, i, p) if (json_is_string(p) && fnmatch(json_string_value(p), cur, 0) == 0) return 1;
  return 0;
}

/* Would `patch` change the model contract (with `applied` already on it)? */
static int patch_changes(json_t *model, json_t *applied, json_t *patch) {
  const char *op = json_string_value(json_object_get(patch, "operator"));
  const char *arg = json_string_value(json_object_get(patch, "arg"));
  const char *val = json_string_value(json_object_get(patch, "value"));
  json_t *all = mi_ckb_model_sequences(model);
  for (size_t s = 0; s < json_array_size(all); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(all, s), i, st) {
      if (!op || strcmp(json_string_value(json_object_get(st, "operator")) ?: "", op)) continue;
      const char *cur = json_string_value(json_object_get(json_object_get(st, "args"), arg ? arg : ""));
      size_t k;
      json_t *a;
      json_array_foreach(applied, k, a) if (!strcmp(json_string_value(json_object_get(a, "operator")) ?: "", op) &&
                                            !strcmp(json_string_value(json_object_get(a, "arg")) ?: "", arg ? arg : ""))
          cur = json_string_value(json_object_get(a, "value"));
      if (cur && val && strcmp(cur, val) && bound_as(patch, cur)) {
        json_decref(all);
        return 1;
      }
    }
  }
  json_decref(all);
  return 0;
}

/* Repairs the failure-mode contracts propose for a failed stage's test
 * contract, in CKB order, not yet tried. */
static json_t *repairs_for(const mi_ckb *c, const char *test_id, json_t *tried, json_t *model, json_t *applied) {
  json_t *out = json_array();
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "failure_mode") || !json_object_get(e->json, "repair")) continue;
    int hit = 0;
    size_t k;
    json_t *d;
    json_array_foreach(json_object_get(e->json, "detected_by"), k, d) if (test_id && !strcmp(json_string_value(d), test_id)) hit = 1;
    if (!hit) continue;
    int done = 0;
    json_array_foreach(tried, k, d) if (!strcmp(json_string_value(d), e->id)) done = 1;
    if (done) continue;
    if (!patch_changes(model, applied, json_object_get(e->json, "repair"))) continue; /* already so */
    json_t *r = json_deep_copy(json_object_get(e->json, "repair"));
    json_object_del(r, "note");
    json_object_del(r, "when_bound"); /* the patch binds every step of the operator (compose's apply_patch) */
    json_object_set_new(r, "why", json_sprintf("repair from %s@%s", e->id, e->version));
    json_array_append_new(out, json_pack("{s:s, s:o}", "failure_mode", e->id, "patch", r));
  }
  return out;
}

/* What a coverage gap teaches (core/gen/learn.h): a knowledge_gap entry
 * per line, one entry per distinct line however often it is seen. */
static void note_gaps(const char *ckb, json_t *cov, const char *model_dir, const char *platform) {
  if (!mi_learn_enabled()) return;
  char cfgp[PATH_MAX + 16];
  mi_model_input_config_name(model_dir, cfgp, sizeof cfgp);
  int n_new = 0, n_seen = 0;
  mi_learn_gaps(ckb, cov, cfgp, platform, &n_new, &n_seen);
  if (n_new + n_seen)
    fprintf(stderr, "mi-gen: %d knowledge gap%s recorded in %s/knowledge_gaps (%d new, %d seen before)\n", n_new + n_seen,
            n_new + n_seen > 1 ? "s" : "", ckb, n_new, n_seen);
}

/* A failed candidate's failure report (core/gen/learn.h); its id (or null)
 * is appended to `reports`, so a repair that clears it can mark it. */
static void note_failure(const char *ckb, const mi_ckb_entry *me, const char *model_dir, json_t *cons, const char *stage,
                         const char *test_contract, const char *msg, json_t *tried, const char *rd, json_t *reports) {
  char id[200] = "", cfgp[PATH_MAX + 16];
  int r = -1;
  mi_model_input_config_name(model_dir, cfgp, sizeof cfgp);
  if (mi_learn_enabled()) r = mi_learn_failure(ckb, me, cfgp, cons, stage, test_contract, msg, tried, rd, id, sizeof id);
  if (r >= 0) fprintf(stderr, "mi-gen: failure report %s %s\n", id, r ? "written" : "updated (seen before)");
  json_array_append_new(reports, r >= 0 ? json_string(id) : json_null());
}

/* Strings taken from a resumed journal or a constraints file: copies owned
 * for the process's life and freed at exit (NULL stays NULL: a journal or
 * file lacking a field is refused by the checks that follow, not strdup'd). */
static char *g_owned[32];
static int g_n_owned;
static void free_owned(void) {
  while (g_n_owned > 0) free(g_owned[--g_n_owned]);
}
static char *own(const char *s) {
  if (!s || g_n_owned == (int)(sizeof g_owned / sizeof *g_owned)) return NULL;
  if (g_n_owned == 0) atexit(free_owned);
  return g_owned[g_n_owned++] = strdup(s);
}

/* One run of mi-gen: the constraints as asked (options, then a resumed
 * journal or a constraints file), what the checks against the CKB found, the
 * blackboard, and the candidate loop's state. One file-scope instance, so what
 * it holds stays reachable until the process ends right after main returns. */
typedef struct gen_run {
  /* the options */
  const char *model, *platform, *dtype, *out, *kv, *perf, *goldens;
  const char *ckb_dir, *run_dir, *resume, *cons_file, *candidate, *plat_plugin, *candidates;
  double vtimeout, budget;
  long long deploy_reach; /* --deploy-reach: 4d decodes to at most this position (0: the declared context) */
  int tp, max_iter, threads, evolve, no_reval;
  long long seed;
  json_t *journal, *cons_json; /* --resume's journal, --constraints' object */
  /* the checks against the CKB */
  char ckb_abs[PATH_MAX], model_abs[PATH_MAX], cfgp[PATH_MAX + 16];
  mi_ckb *c;
  const mi_ckb_entry *pe, *me; /* the platform and model contracts */
  json_t *pplug;               /* --platform-plugin: {name, path[, stands_in_for]} */
  json_t *gates, *cov, *cfg;
  char ref_name[128], ref_plugin[PATH_MAX + 200];
  char pack_path[PATH_MAX + 200], pack_name[64]; /* the engine's kernel pack (make_pack), "" when none */
  /* the blackboard and the engine's identity */
  char out_abs[PATH_MAX], rd[PATH_MAX + 16];
  mi_bb *bb;
  const char *short_name;
  char engine_name[128];
  json_t *cons;
  /* the candidate loop */
  double t_start, wall; /* wall: the seconds the run took, when the loop ended */
  json_t *tried, *patches, *impl, *rev, *ver, *repaired_from, *last_feedback, *rejected;
  json_t *reports; /* the failure report of each failed candidate, in order (null: not written) */
  role_time rt;
  int iter;
  char why[2048];
  const char *failed_msg, *budget_hit;
  int gate_failed;
} gen_run;

/* Parses the command line into r; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, gen_run *r) {
  r->kv = "f32", r->max_iter = 4, r->budget = 1800, r->seed = -1;
  static const struct option longs[] = {
      {"model", 1, 0, 'm'},          {"platform", 1, 0, 'p'},    {"dtype", 1, 0, 'd'},   {"tp", 1, 0, 'T'},
      {"out", 1, 0, 'o'},            {"kv-type", 1, 0, 'k'},     {"perf", 1, 0, 'P'},    {"ckb", 1, 0, 'C'},
      {"run-dir", 1, 0, 'r'},        {"resume", 1, 0, 'R'},      {"constraints", 1, 0, 'c'},
      {"max-iterations", 1, 0, 'i'}, {"time-budget", 1, 0, 'b'}, {"candidate", 1, 0, 'x'},
      {"seed", 1, 0, 's'},           {"threads", 1, 0, 't'},     {"goldens", 1, 0, 'G'}, {"verify-timeout", 1, 0, 'V'}, {"deploy-reach", 1, 0, 1300},     {"help", 0, 0, 'h'},
      {"platform-plugin", 1, 0, 'U'},
      {"evolve", 0, 0, 'E'},         {"candidates", 1, 0, 'K'},  {"no-revalidate", 0, 0, 'N'}, {0, 0, 0, 0}};
  int ch;
  const struct option *all_longs = gen_llm_longopts(longs);
  const char *env_reach = getenv("MI_GEN_DEPLOY_REACH"); /* --deploy-reach's default */
  if (env_reach && *env_reach) r->deploy_reach = atoll(env_reach) >= 64 ? atoll(env_reach) : 0;
  while ((ch = getopt_long(argc, argv, "t:h", all_longs, NULL)) != -1) {
    switch (ch) {
    case 'm': r->model = optarg; break;
    case 'p': r->platform = optarg; break;
    case 'd': r->dtype = optarg; break;
    case 'T': r->tp = atoi(optarg); if (r->tp < 1) { fprintf(stderr, "mi-gen: --tp %s: a positive integer\n", optarg); return EX_USAGE; } break;
    case 'o': r->out = optarg; break;
    case 'k': r->kv = optarg; break;
    case 'P': r->perf = optarg; break;
    case 'C': r->ckb_dir = optarg; break;
    case 'r': r->run_dir = optarg; break;
    case 'R': r->resume = optarg; break;
    case 'c': r->cons_file = optarg; break;
    case 'i': r->max_iter = atoi(optarg); break;
    case 'b': r->budget = atof(optarg); break;
    case 'x': r->candidate = optarg; break;
    case 's': r->seed = atoll(optarg); break;
    case 't': r->threads = atoi(optarg); break;
    case 'G': r->goldens = optarg; break;
    case 'V': r->vtimeout = atof(optarg); break;
    case 1300: {
      char *end = NULL;
      r->deploy_reach = strtoll(optarg, &end, 10);
      if (!end || *end || r->deploy_reach < 64) {
        fprintf(stderr, "mi-gen: --deploy-reach %s: a number of positions, at least 64\n", optarg);
        return EX_USAGE;
      }
      break;
    }
    case 'U': r->plat_plugin = optarg; break;
    case 'E': r->evolve = 1; break;
    case 'K': r->candidates = optarg; break;
    case 'N': r->no_reval = 1; break;
    case 'h': usage(stdout); return EX_OK;
    default: {
      int lr = gen_llm_option(ch, optarg);
      if (lr == 0) break;
      if (lr > 0) usage(stderr);
      return EX_USAGE;
    }
    }
  }
  if (optind != argc) {
    usage(stderr);
    return EX_USAGE;
  }
  gen_llm_run_limits(&r->max_iter, &r->budget);
  return -1;
}

/* g_exe_dir: the folder of this executable (the agents, mi-verify and the
 * plugins are found from it). */
static void find_exe_dir(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    char *sl = strrchr(self, '/');
    if (sl) *sl = 0;
    snprintf(g_exe_dir, sizeof g_exe_dir, "%s", self);
  }
}

/* --resume: the constraints and the work done come from the journal; then
 * --constraints FILE fills what the options left out. -1 to go on, else the
 * exit status. */
static int load_constraints(gen_run *r) {
  if (r->resume) {
    int bad = 0;
    r->journal = mi_bb_read_journal(r->resume, &bad);
    json_t *start = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(r->journal, i, e) if (!start && !strcmp(json_string_value(json_object_get(e, "event")) ?: "", "start")) start = e;
    if (!start) {
      fprintf(stderr, "mi-gen: --resume %s: no journal with a start line there\n", r->resume);
      return EX_USAGE;
    }
    json_t *c = json_object_get(start, "constraints");
    r->model = own(json_string_value(json_object_get(c, "model")));
    r->platform = own(json_string_value(json_object_get(c, "platform")));
    r->dtype = own(json_string_value(json_object_get(c, "dtype")));
    r->kv = own(json_string_value(json_object_get(c, "kv_type")));
    if (json_string_value(json_object_get(c, "perf"))) r->perf = own(json_string_value(json_object_get(c, "perf")));
    if (!r->plat_plugin) r->plat_plugin = own(json_string_value(json_object_get(json_object_get(c, "platform_plugin"), "path")));
    r->tp = (int)json_integer_value(json_object_get(c, "tp"));
    r->out = own(json_string_value(json_object_get(start, "out")));
    if (json_string_value(json_object_get(start, "ckb")) && !r->ckb_dir) r->ckb_dir = own(json_string_value(json_object_get(start, "ckb")));
    if (json_string_value(json_object_get(start, "candidate"))) r->candidate = own(json_string_value(json_object_get(start, "candidate")));
    if (json_is_integer(json_object_get(start, "seed")) && r->seed < 0) r->seed = json_integer_value(json_object_get(start, "seed"));
    r->run_dir = r->resume;
    fprintf(stderr, "mi-gen: resuming %s (%zu journal lines%s)\n", r->resume, json_array_size(r->journal), bad ? ", some unreadable" : "");
  }
  if (r->cons_file) {
    json_error_t je;
    json_t *c = r->cons_json = json_load_file(r->cons_file, 0, &je);
    if (!c || !json_is_object(c)) {
      fprintf(stderr, "mi-gen: %s: %s\n", r->cons_file, c ? "not a JSON object" : je.text);
      return EX_USAGE;
    }
#define CSTR(field, var) if (!var && json_string_value(json_object_get(c, field))) var = own(json_string_value(json_object_get(c, field)))
    CSTR("model", r->model); CSTR("platform", r->platform); CSTR("dtype", r->dtype); CSTR("out", r->out); CSTR("perf", r->perf);
#undef CSTR
    if (json_string_value(json_object_get(c, "kv_type"))) r->kv = own(json_string_value(json_object_get(c, "kv_type")));
    if (!r->tp && json_is_integer(json_object_get(c, "tp"))) r->tp = (int)json_integer_value(json_object_get(c, "tp"));
  }
  if (!r->tp) r->tp = 1;
  if (!r->model || !r->platform || !r->dtype || !r->out) {
    fprintf(stderr, "mi-gen: --model, --platform, --dtype and --out are needed (or --constraints FILE)\n");
    usage(stderr);
    return EX_USAGE;
  }
  if (r->seed < 0) r->seed = (long long)(time(NULL) ^ getpid()) & 0xffffff;
  return -1;
}

/* Opens and validates the CKB, then checks the platform, the weight dtype and
 * the KV type against the platform contract. -1 to go on, else the exit status. */
static int check_platform(gen_run *r, const char *argv0) {
  char buf[4096], err[1024];
  if (!r->ckb_dir && !(r->ckb_dir = mi_ckb_default_dir(argv0, buf, sizeof buf))) {
    fprintf(stderr, "mi-gen: %s\n", buf);
    return EX_USAGE;
  }
  if (!realpath(r->ckb_dir, r->ckb_abs) || !realpath(r->model, r->model_abs)) {
    fprintf(stderr, "mi-gen: %s: %s\n", realpath(r->ckb_dir, r->ckb_abs) ? r->model : r->ckb_dir, strerror(errno));
    return EX_USAGE;
  }
  r->ckb_dir = NULL; /* it may point into buf; ckb_abs is the CKB from here on */
  setenv("MI_CKB_DIR", r->ckb_abs, 1); /* a GGUF model is read through this CKB (core/runtime/model_input.h) */
  r->c = mi_ckb_open(r->ckb_abs, err, sizeof err);
  if (!r->c) {
    fprintf(stderr, "mi-gen: %s\n", err);
    return EX_USAGE;
  }
  if (mi_ckb_validate(r->c, NULL, NULL)) {
    fprintf(stderr, "mi-gen: %s: the CKB does not validate (see mi-ckb validate)\n", r->ckb_abs);
    return EX_USAGE;
  }
  const mi_ckb_entry *pe = r->pe = mi_ckb_find_platform(r->c, r->platform);
  if (!pe) {
    fprintf(stderr, "mi-gen: unknown platform '%s': no platform contract in %s\n", r->platform, r->ckb_abs);
    return EX_PLATFORM;
  }
  if (r->plat_plugin && !(r->pplug = platform_plugin_arg(pe, r->plat_plugin))) return EX_USAGE;
  json_t *dts = json_object_get(pe->json, "dtypes");
  int ok = 0;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(dts, "weights"), i, v) ok |= !strcmp(json_string_value(v), r->dtype);
  ok |= json_object_get(json_object_get(dts, "weight_sets"), r->dtype) != NULL; /* a file type: q4_k_m */
  if (!ok) {
    char *l = json_dumps(json_object_get(dts, "weights"), JSON_COMPACT);
    char *ws = json_dumps(json_object_get(dts, "weight_sets"), JSON_COMPACT);
    fprintf(stderr, "mi-gen: dtype '%s' is not offered by %s (weights: %s%s%s)\n", r->dtype, pe->id, l,
            ws ? "; file types: " : "", ws ? ws : "");
    free(l);
    free(ws);
    return EX_DTYPE;
  }
  /* block types live in GGUF files: a folder's safetensors hold floats */
  const int is_float = !strcmp(r->dtype, "f32") || !strcmp(r->dtype, "f16") || !strcmp(r->dtype, "bf16");
  if (!is_float && !mi_model_input_is_gguf(r->model_abs)) {
    fprintf(stderr,
            "mi-gen: --dtype %s: %s is a folder; %s weights come in a GGUF file (make one: node "
            "tools/peer/hf2gguf.mjs %s OUT.gguf --type %s)\n",
            r->dtype, r->model, r->dtype, r->model, r->dtype);
    return EX_DTYPE;
  }
  ok = 0;
  json_array_foreach(json_object_get(dts, "kv_cache"), i, v) ok |= !strcmp(json_string_value(v), r->kv);
  if (!ok) {
    char *l = json_dumps(json_object_get(dts, "kv_cache"), JSON_COMPACT);
    /* not a bad request but a gap in the CKB: no contract says the platform
     * holds such a cache, so nothing could verify the engine that used it */
    fprintf(stderr, "mi-gen: not covered: KV type '%s': the platform contract %s (%s) offers kv_cache %s\n", r->kv, pe->id,
            pe->path, l);
    free(l);
    return EX_GAP;
  }
  if (strcmp(r->kv, "f32") && kv_gap(r->c, pe, r->kv)) return EX_GAP;
  return -1;
}

/* --perf: each goal becomes a stage 6 gate the verifier measures. -1 to go
 * on, else the exit status. */
static int parse_perf_gates(gen_run *r) {
  r->gates = json_array();
  if (!r->perf) return -1;
  char *dup = strdup(r->perf), *save = NULL;
  for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char metric[32], unit[32] = "";
    double x;
    int n = 0;
    int got = sscanf(tok, " %31[a-z_]>=%lf%n", metric, &x, &n);
    if (got == 2) { /* the unit: the rest of the token, blanks trimmed */
      const char *u = tok + n;
      while (*u == ' ') u++;
      snprintf(unit, sizeof unit, "%s", u);
      for (char *z = unit + strlen(unit); z > unit && z[-1] == ' ';) *--z = 0;
    }
    if (got < 2 || !(x > 0) || (strcmp(metric, "decode") && strcmp(metric, "prefill")) ||
        (unit[0] && strcmp(unit, "roofline") && strcmp(unit, "tok/s"))) {
      fprintf(stderr, "mi-gen: --perf '%s': expected decode|prefill>=X[roofline|tok/s] with X > 0, comma-separated\n", tok);
      free(dup);
      return EX_PERF;
    }
    json_array_append_new(r->gates, json_pack("{s:s, s:s, s:f, s:s}", "gate", tok, "metric", metric, "min", x, "unit",
                                              unit[0] ? unit : "roofline"));
  }
  free(dup);
  return -1;
}

/* Is name a block type's (q8_0, q4_k, ...)? */
static int names_block_type(const char *name) {
  for (int t = 0; t < MI_DTYPE_COUNT; t++)
    if (mi_dtype_is_block((mi_dtype)t) && !strcmp(mi_dtype_name((mi_dtype)t), name)) return 1;
  return 0;
}

/* A GGUF file's matrices against --dtype: each stored type of the 2-D
 * weights the model reads (the coverage's matrix_dtypes) in the platform's
 * weight set for it (dtypes.weight_sets, else the dtype alone), so a file
 * of another type is one line here, not a stage-3 failure.
 * -1 to go on, else EX_DTYPE. */
static int check_file_dtypes(const gen_run *r) {
  if (!mi_model_input_is_gguf(r->model_abs)) return -1; /* a folder: its floats are checked at load */
  json_t *set = json_object_get(json_object_get(json_object_get(r->pe->json, "dtypes"), "weight_sets"), r->dtype);
  /* the coverage has read the file's matrices: their stored types */
  json_t *have = json_object_get(r->cov, "matrix_dtypes");
  const char *bad = NULL, *bad_dt = NULL;
  char list[256] = "";
  size_t o = 0;
  int blocks = 0; /* the file's matrices of a block type: a set's f32 is for those the load widened, not a whole file */
  for (int t = 0; t < MI_DTYPE_COUNT; t++) { /* in dtype order: one message for one file */
    const char *dn = mi_dtype_name((mi_dtype)t);
    json_t *e = json_object_get(have, dn);
    if (!e) continue;
    blocks += mi_dtype_is_block((mi_dtype)t);
    int in = !strcmp(dn, r->dtype);
    size_t k;
    json_t *d;
    json_array_foreach(set, k, d) in |= !strcmp(json_string_value(d) ?: "", dn);
    if (!in && !bad) bad = json_string_value(json_object_get(e, "first")), bad_dt = dn;
    if (o < sizeof list)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s x%lld", o ? ", " : "", dn,
                            (long long)json_integer_value(json_object_get(e, "count")));
  }
  int block_dtype = names_block_type(r->dtype); /* --dtype, or a member of its set, a block type */
  size_t k;
  json_t *d;
  json_array_foreach(set, k, d) block_dtype |= names_block_type(json_string_value(d) ?: "");
  if (!bad_dt && block_dtype && !blocks) {
    fprintf(stderr, "mi-gen: --dtype %s: %s: no matrix is stored in a block type (this file's: %s); an engine for %s "
            "binds its quantized matrices as stored\n", r->dtype, r->model, list, r->dtype);
    return EX_DTYPE;
  }
  if (!bad_dt) return -1;
  char *sl = json_dumps(set, JSON_COMPACT);
  fprintf(stderr, "mi-gen: --dtype %s: %s: tensor %s is %s; an engine for %s binds matrices in %s (this file's: %s)\n",
          r->dtype, r->model, bad ? bad : "?", bad_dt, r->dtype, sl ? sl : r->dtype, list);
  free(sl);
  return EX_DTYPE;
}

/* The model against the CKB: coverage, its model contract, the TP degree and
 * the reference plugin the deployment run needs. -1 to go on, else the exit
 * status. */
static int check_model(gen_run *r) {
  char err[1024];
  const mi_ckb_entry *pe = r->pe;
  size_t i;
  json_t *v;
  int cr = mi_ckb_coverage(r->c, r->model_abs, pe->id, &r->cov, err, sizeof err);
  if (cr < 0) {
    fprintf(stderr, "mi-gen: %s\n", err);
    return EX_GAP;
  }
  if (cr == 1) {
    fprintf(stderr, "mi-gen: %s on %s is not covered by the CKB:\n", r->model, pe->id);
    json_array_foreach(json_object_get(r->cov, "missing"), i, v) fprintf(stderr, "  missing: %s\n", json_is_string(v) ? json_string_value(v) : "(not a string)");
    fprintf(stderr, "mi-gen: add what is missing to the CKB, or let knowledge evolution try: mi-gen --evolve\n");
    note_gaps(r->ckb_abs, r->cov, r->model_abs, pe->id);
    return EX_GAP;
  }
  mi_model_input_config_name(r->model_abs, r->cfgp, sizeof r->cfgp);
  char cerr[1024] = "";
  r->cfg = mi_model_input_config(r->model_abs, 0, cerr, sizeof cerr);
  char mid[256] = "";
  snprintf(mid, sizeof mid, "%s", json_string_value(json_object_get(r->cov, "model_contract")) ?: "");
  if (strchr(mid, '@')) *strchr(mid, '@') = 0;
  const mi_ckb_entry *me = r->me = mid[0] ? mi_ckb_find(r->c, mid) : NULL;
  if (!r->cfg || !me) {
    if (r->cfg) fprintf(stderr, "mi-gen: %s: no model contract found for it\n", r->cfgp);
    else fprintf(stderr, "mi-gen: %s\n", cerr);
    return EX_GAP;
  }
  const char *tpf[] = {"num_attention_heads", "num_key_value_heads", "intermediate_size"};
  for (int k = 0; k < 3; k++) {
    json_t *x = json_object_get(r->cfg, tpf[k]);
    if (json_is_integer(x) && json_integer_value(x) % r->tp) {
      fprintf(stderr, "mi-gen: --tp %d does not divide %s = %lld of %s\n", r->tp, tpf[k], (long long)json_integer_value(x), r->cfgp);
      return EX_TP;
    }
  }
  /* the oracle of the deployment run: the hand-written model plugin the
   * contract names (else model.NAME -> libmi-NAME.so when one is installed),
   * beside the platform plugins, so each architecture's engine meets its own
   * reference. A contract that names none and has none installed is a family
   * that exists as knowledge only: stage 4 (llama.cpp) is its independent
   * check, and 4d holds the deployed engine to itself prefilled token by
   * token. A named plugin that is missing is an install error. */
  const char *named = json_string_value(json_object_get(me->json, "reference_plugin"));
  snprintf(r->ref_name, sizeof r->ref_name, "%s", named ?: strchr(me->id, '.') + 1);
  snprintf(r->ref_plugin, sizeof r->ref_plugin, "%s/../lib/metainfer/libmi-%s.so", g_exe_dir, r->ref_name);
  if (access(r->ref_plugin, R_OK) != 0) {
    if (!named) {
      r->ref_name[0] = r->ref_plugin[0] = '\0';
    } else {
      fprintf(stderr, "mi-gen: %s: reference plugin '%s' of %s is not installed (%s: %s)\n", me->path, r->ref_name, me->id,
              r->ref_plugin, strerror(errno));
      return EX_REFERENCE;
    }
  }
  if (r->ref_name[0] &&
      reference_serves(me, r->ref_name, r->ref_plugin, json_string_value(json_array_get(json_object_get(r->cfg, "architectures"), 0))))
    return EX_REFERENCE;
  if (r->tp != 1 && json_array_size(r->gates)) {
    fprintf(stderr, "mi-gen: --perf: gates are measured by mi-bench in one process; not available at --tp %d yet\n", r->tp);
    return EX_PERF;
  }
  if (r->tp != 1 && !json_object_get(me->json, "tensor_parallel")) {
    fprintf(stderr, "mi-gen: not covered: %s has no tensor_parallel section (asked --tp %d)\n", me->id, r->tp);
    return EX_GAP;
  }
  if (r->tp != 1 && !json_object_get(pe->json, "collectives")) {
    fprintf(stderr, "mi-gen: not covered: %s lists no collectives (asked --tp %d)\n", pe->id, r->tp);
    return EX_GAP;
  }
  return -1;
}

/* --out and its parents (as mkdir -p), the blackboard, the engine's name and
 * the journal's start line. -1 to go on, else the exit status. */
static int open_blackboard(gen_run *r) {
  char buf[4096], err[1024];
  const mi_ckb_entry *pe = r->pe, *me = r->me;
  char parts[PATH_MAX];
  snprintf(parts, sizeof parts, "%s", r->out);
  for (char *sl = strchr(parts + 1, '/');; sl = strchr(sl + 1, '/')) {
    if (sl) *sl = 0;
    if (parts[0] && mkdir(parts, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "mi-gen: %s: cannot create: %s\n", parts, strerror(errno));
      return EX_USAGE;
    }
    if (!sl) break;
    *sl = '/';
  }
  realpath(r->out, r->out_abs);
  snprintf(r->rd, sizeof r->rd, "%s", r->run_dir ? r->run_dir : "");
  if (!r->run_dir) snprintf(r->rd, sizeof r->rd, "%s/run", r->out_abs);
  /* the run folder as an absolute path: the engine's plugins.conf and the
   * verifier's deployment run name files in it, read from other folders */
  char rd_abs[PATH_MAX];
  if ((mkdir(r->rd, 0755) == 0 || errno == EEXIST) && realpath(r->rd, rd_abs))
    snprintf(r->rd, sizeof r->rd, "%s", rd_abs);
  r->bb = mi_bb_open(r->rd, 1, err, sizeof err);
  if (!r->bb) {
    fprintf(stderr, "mi-gen: %s\n", err);
    return EX_USAGE;
  }
  if (gen_llm_setup(r->ckb_abs, r->model_abs, r->cons_file, g_exe_dir, r->rd) != 0) return EX_USAGE;
  char cfg_sha[65];
  if (mi_model_input_is_gguf(r->model_abs)) { /* the config the file's metadata gives, not its GBs */
    char *txt = json_dumps(r->cfg, JSON_COMPACT | JSON_SORT_KEYS);
    mi_sha256_buf(txt ? txt : "", txt ? strlen(txt) : 0, cfg_sha);
    free(txt);
  } else {
    mi_sha256_file(r->cfgp, cfg_sha);
  }
  r->short_name = strchr(me->id, '.') + 1;
  snprintf(r->engine_name, sizeof r->engine_name, "%s-%.8s-%s-tp%d", r->short_name, cfg_sha, r->dtype, r->tp);
  if (strcmp(r->kv, "f32")) { /* a half-precision KV cache: another engine, another name */
    size_t l = strlen(r->engine_name);
    snprintf(r->engine_name + l, sizeof r->engine_name - l, "-kv%s", r->kv);
  }
  r->cons = json_pack("{s:s, s:s, s:s, s:i, s:s}", "model", r->model_abs, "platform", pe->json ? json_string_value(json_object_get(pe->json, "plugin")) : r->platform,
                      "dtype", r->dtype, "tp", r->tp, "kv_type", r->kv);
  if (r->perf) json_object_set_new(r->cons, "perf", json_string(r->perf));
  if (r->pplug) json_object_set(r->cons, "platform_plugin", r->pplug);
  if (json_array_size(r->gates)) json_object_set(r->cons, "perf_gates", r->gates);
  if (!r->resume) {
    json_t *st = json_pack("{s:s, s:O, s:s, s:s, s:I, s:s}", "event", "start", "constraints", r->cons, "out", r->out_abs, "ckb",
                           r->ckb_abs, "seed", (json_int_t)r->seed, "engine_name", r->engine_name);
    if (r->candidate) json_object_set_new(st, "candidate", json_string(realpath(r->candidate, buf) ? buf : r->candidate));
    json_object_set_new(st, "by", json_pack("{s:s, s:I}", "role", "orchestrator", "pid", (json_int_t)getpid()));
    mi_bb_append(r->bb, st);
    json_decref(st);
  }
  fprintf(stderr, "mi-gen: %s on %s, %s, tp %d -> %s (run %s)\n", me->id, pe->id, r->dtype, r->tp, r->out_abs, r->rd);
  return -1;
}

/* The operators of the model contract no platform member computes (member
 * "pack", stated as expressions in the CKB), each once, into ids (at most
 * max); the count. */
static int pack_operators(const mi_ckb *c, const json_t *v, const char **ids, int n, int max) {
  if (json_is_array(v)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) n = pack_operators(c, x, ids, n, max);
  } else if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
      const char *id = !strcmp(k, "operator") ? json_string_value(x) : NULL;
      const mi_ckb_entry *op = id ? mi_ckb_find(c, id) : NULL;
      if (!op || strcmp(json_string_value(json_object_get(op->json, "member")) ?: "", "pack")) {
        n = pack_operators(c, x, ids, n, max);
        continue;
      }
      int seen = 0;
      for (int i = 0; i < n; i++) seen |= !strcmp(ids[i], id);
      if (!seen && n < max) ids[n++] = op->id;
    }
  }
  return n;
}

/* The kernel pack of the engine's pack operators (docs/kernel-packs.md),
 * generated from their contracts into RUN_DIR/pack and built: the verifier
 * holds it at stage 1 and loads it with the engine at stages 2-6, and the
 * engine directory ships it. -1 to go on (also when no operator needs one),
 * else the exit status. */
static int make_pack(gen_run *r) {
  const char *ids[33] = {NULL};
  int n = pack_operators(r->c, r->me->json, ids, 0, 32);
  if (!n) return -1;
  char dir[PATH_MAX + 64], sdk[PATH_MAX + 64], lib[128], err[1200];
  snprintf(sdk, sizeof sdk, "%s/../../sdk/include", g_exe_dir);
  if (access(sdk, R_OK) != 0) snprintf(sdk, sizeof sdk, "%s/../include", g_exe_dir);
  snprintf(dir, sizeof dir, "%s/pack", r->rd);
  snprintf(r->pack_name, sizeof r->pack_name, "%.48s", r->short_name);
  for (char *q = r->pack_name; *q; q++)
    if (!(*q >= 'a' && *q <= 'z') && !(*q >= '0' && *q <= '9') && *q != '-') *q = '_';
  if (mi_pack_generate(r->c, ids, r->pack_name, dir, sdk, err, sizeof err) != 0) {
    fprintf(stderr, "mi-gen: kernel pack for %s: %s\n", r->me->id, err);
    return EX_FAIL;
  }
  mi_pack_library_name(r->pack_name, lib, sizeof lib);
  snprintf(r->pack_path, sizeof r->pack_path, "%s/%s", dir, lib);
  fprintf(stderr, "mi-gen: kernel pack %s: %d operator(s) no platform member computes, generated from the CKB (%s)\n",
          r->pack_name, n, r->pack_path);
  return -1;
}

/* Work already done (resume): the patches tried, in order; returns the
 * iteration to start after. Verdicts found in the journal are NOT trusted:
 * only this run's verifier passes. */
static int replay_journal(gen_run *r) {
  r->tried = json_array(), r->patches = json_array();
  int iter0 = 0;
  size_t i;
  json_t *v;
  json_array_foreach(r->journal, i, v) {
    const char *ev = json_string_value(json_object_get(v, "event"));
    if (ev && !strcmp(ev, "repair")) {
      json_array_append(r->tried, json_object_get(v, "failure_mode"));
      json_array_append(r->patches, json_object_get(v, "patch"));
    }
    if (ev && !strcmp(ev, "candidate")) iter0++;
    if (ev && !strcmp(ev, "verdict") && !strcmp(json_string_value(json_object_get(v, "verdict")) ?: "", "PASS"))
      fprintf(stderr, "mi-gen: the journal records a PASS (seq %lld); not trusted: the candidate is verified again\n",
              (long long)json_integer_value(json_object_get(v, "seq")));
  }
  if (r->resume && iter0) iter0--; /* the last candidate is redone */
  return iter0;
}

/* What one step of an iteration tells the loop; any other value is an exit status. */
enum { IT_GO = -1, IT_CONTINUE = -2, IT_STOP = -3, IT_PASS = -4 };

/* why += "; " + the spent budget, when the agent call failed for that reason */
static void note_budget_spent(gen_run *r) {
  if ((r->budget_hit = gen_llm_budget_spent())) snprintf(r->why + strlen(r->why), sizeof r->why - strlen(r->why), "; %s", r->budget_hit);
}

/* The implementer's candidate (or --candidate's file), journalled; sets
 * *src to its source artifact. IT_GO on a new candidate. */
static int implement(gen_run *r, const char **src) {
  size_t i;
  json_t *v;
  json_t *t = json_pack("{s:O, s:s, s:O, s:s, s:i}", "constraints", r->cons, "model_dir", r->model_abs, "patches", r->patches,
                        "engine_name", r->engine_name, "iteration", r->iter);
  /* the last review's findings and stage failures go back to the implementer (a strategy that can act on them does) */
  if (r->last_feedback) json_object_set(t, "feedback", r->last_feedback);
  if (r->candidate) {
    char sha[65];
    if (mi_bb_put_file(r->bb, r->candidate, "c", sha) != 0) {
      fprintf(stderr, "mi-gen: %s: cannot read\n", r->candidate);
      return EX_USAGE;
    }
    r->impl = json_pack("{s:s, s:s, s:s, s:[], s:[], s:[]}", "status", "ok", "source", sha, "engine_name", r->engine_name,
                        "contracts", "experience", "patches");
    json_t *line = json_pack("{s:s, s:s, s:s, s:{s:s, s:I}}", "event", "candidate_given", "source", sha, "file", r->candidate,
                             "by", "role", "orchestrator", "pid", (json_int_t)getpid());
    mi_bb_append(r->bb, line);
    json_decref(line);
  } else {
    r->impl = call_agent(r->bb, "implementer", gen_llm_strategy("implementer"), t, r->ckb_abs, 120, &r->rt, r->why, sizeof r->why);
  }
  json_decref(t);
  if (!r->impl) note_budget_spent(r);
  if (!r->impl) return IT_STOP;
  *src = json_string_value(json_object_get(r->impl, "source"));
  char srcp[PATH_MAX + 128];
  if (!*src || mi_bb_artifact(r->bb, *src, "c", srcp, sizeof srcp) != 0) {
    snprintf(r->why, sizeof r->why, "the implementer's source artifact is missing or does not match its hash");
    return IT_STOP;
  }
  json_t *line = json_pack("{s:s, s:i, s:s, s:O, s:{s:s, s:I}}", "event", "candidate", "iteration", r->iter, "source", *src,
                           "patches", r->patches, "by", "role", "orchestrator", "pid", (json_int_t)getpid());
  mi_bb_append(r->bb, line);
  json_decref(line);
  fprintf(stderr, "mi-gen: implementer: source %.12s (%lld lines)\n", *src,
          (long long)json_integer_value(json_object_get(r->impl, "lines")));
  int again = 0;
  json_array_foreach(r->rejected, i, v) again |= !strcmp(json_string_value(v), *src);
  if (again) {
    snprintf(r->why, sizeof r->why, "the implementer wrote a source already rejected (%.12s): no strategy left to change it", *src);
    return IT_STOP;
  }
  return IT_GO;
}

/* The reviewer on source src: IT_GO when it approved, else what the loop
 * does next (a rejection is a failure report and the next iteration). */
static int review(gen_run *r, const char *src) {
  size_t i;
  json_t *v;
  if ((r->budget_hit = gen_llm_budget_check("reviewer"))) {
    gen_llm_note_candidate(src, r->iter, -1);
    snprintf(r->why, sizeof r->why, "%s", r->budget_hit);
    return IT_STOP;
  }
  json_t *t = json_pack("{s:s, s:O, s:s}", "source", src, "constraints", r->cons, "model_dir", r->model_abs);
  r->rev = call_agent(r->bb, "reviewer", gen_llm_strategy("reviewer"), t, r->ckb_abs, 60, &r->rt, r->why, sizeof r->why);
  json_decref(t);
  if (!r->rev) gen_llm_note_candidate(src, r->iter, -1);
  if (!r->rev) note_budget_spent(r);
  if (!r->rev) return IT_STOP;
  json_t *fs = json_object_get(r->rev, "findings");
  json_array_foreach(fs, i, v)
      fprintf(stderr, "mi-gen: reviewer: %s %s line %lld: %s\n", json_string_value(json_object_get(v, "severity")),
              json_string_value(json_object_get(v, "rule")), (long long)json_integer_value(json_object_get(v, "line")),
              json_string_value(json_object_get(v, "message")));
  if (strcmp(json_string_value(json_object_get(r->rev, "verdict")) ?: "", "approved")) {
    snprintf(r->why, sizeof r->why, "the reviewer rejected the source (%zu findings)", json_array_size(fs));
    r->failed_msg = "review";
    {
      json_t *f0 = json_array_get(fs, 0);
      char fmsg[700];
      snprintf(fmsg, sizeof fmsg, "%s: %s", json_string_value(json_object_get(f0, "rule")) ?: "?",
               json_string_value(json_object_get(f0, "message")) ?: "rejected");
      note_failure(r->ckb_abs, r->me, r->model_abs, r->cons, "review", NULL, fmsg, r->tried, r->rd, r->reports);
    }
    gen_llm_note_candidate(src, r->iter, -1);
    json_array_append_new(r->rejected, json_string(src));
    json_decref(r->last_feedback);
    r->last_feedback = json_pack("{s:s, s:O}", "from", "reviewer", "findings", fs);
    if (r->candidate) return IT_STOP;
    return IT_CONTINUE; /* no repair is known for a review finding: the next iteration would be the same */
  }
  fprintf(stderr, "mi-gen: reviewer: approved\n");
  return IT_GO;
}

/* The verifier's task for source src: the tools it runs, found beside this
 * executable (or in the source tree a build folder sits in). */
static json_t *verifier_task(gen_run *r, const char *src) {
  char sdk[PATH_MAX + 64], cpu[PATH_MAX + 64], mv[PATH_MAX + 64], mr[PATH_MAX + 64], gold[PATH_MAX + 64];
  snprintf(sdk, sizeof sdk, "%s/../../sdk/include", g_exe_dir);
  if (access(sdk, R_OK) != 0) snprintf(sdk, sizeof sdk, "%s/../include", g_exe_dir);
  snprintf(cpu, sizeof cpu, "%s/../lib/metainfer/libmi-%s.so", g_exe_dir, json_string_value(json_object_get(r->pe->json, "plugin")));
  if (r->pplug) snprintf(cpu, sizeof cpu, "%s", json_string_value(json_object_get(r->pplug, "path")));
  snprintf(mv, sizeof mv, "%s/mi-verify", g_exe_dir);
  snprintf(mr, sizeof mr, "%s/mi-run", g_exe_dir);
  if (r->goldens) snprintf(gold, sizeof gold, "%s", r->goldens);
  else {
    snprintf(gold, sizeof gold, "%s/../../tests/goldens", g_exe_dir); /* a build folder in the source tree */
    if (access(gold, R_OK) != 0) snprintf(gold, sizeof gold, "%s/../tests/goldens", r->ckb_abs);
  }
  json_t *t = json_pack("{s:s, s:s, s:O, s:s, s:I, s:i, s:{s:s, s:s, s:s, s:s, s:s}}", "source", src, "engine_name", r->engine_name,
                        "constraints", r->cons, "model_dir", r->model_abs, "seed", (json_int_t)r->seed, "threads", r->threads, "tools", "sdk_include",
                        sdk, "platform_plugin", cpu, "mi_verify", mv, "mi_run", mr, "goldens", gold);
  json_object_set_new(json_object_get(t, "tools"), "reference_plugin", json_string(r->ref_plugin));
  json_object_set_new(json_object_get(t, "tools"), "reference_name", json_string(r->ref_name));
  json_object_set_new(json_object_get(t, "tools"), "mi_bench", json_sprintf("%s/mi-bench", g_exe_dir));
  /* the repairs the implementer composed with (failure modes, experience):
   * the verifier interprets the contract with them (mi-verify --contract-patches) */
  if (json_array_size(json_object_get(r->impl, "patches"))) json_object_set(t, "patches", json_object_get(r->impl, "patches"));
  if (r->vtimeout > 0) json_object_set_new(t, "unit_timeout", json_real(r->vtimeout));
  if (r->deploy_reach > 0) json_object_set_new(t, "deploy_reach", json_integer(r->deploy_reach));
  if (r->pack_path[0]) {
    json_object_set_new(json_object_get(t, "tools"), "pack", json_string(r->pack_path));
    json_object_set_new(json_object_get(t, "tools"), "pack_name", json_sprintf("pack-%s", r->pack_name)); /* the plugin's name */
  }
  return t;
}

/* The verifier on source src, its stages printed and its verdict journalled:
 * IT_PASS, or IT_GO with why, the failure report and the feedback set. */
static int verify(gen_run *r, const char *src) {
  size_t i;
  json_t *v;
  if ((r->budget_hit = gen_llm_budget_check("verifier"))) {
    gen_llm_note_candidate(src, r->iter, 0);
    snprintf(r->why, sizeof r->why, "%s", r->budget_hit);
    return IT_STOP;
  }
  json_t *t = verifier_task(r, src);
  r->ver = call_agent(r->bb, "verifier", "stages", t, r->ckb_abs, r->vtimeout > 0 ? 600 + 20 * r->vtimeout : 1800, &r->rt, r->why,
                      sizeof r->why);
  json_decref(t);
  if (!r->ver) note_budget_spent(r);
  if (!r->ver) return IT_STOP;
  json_t *stages = json_object_get(r->ver, "stages");
  json_array_foreach(stages, i, v)
      fprintf(stderr, "mi-gen: verifier: stage %s %-28s %s%s%s\n", json_string_value(json_object_get(v, "stage")),
              json_string_value(json_object_get(v, "name")), json_string_value(json_object_get(v, "verdict")),
              json_string_value(json_object_get(v, "message")) ? ": " : "",
              json_string_value(json_object_get(v, "message")) ?: "");
  const char *verdict = json_string_value(json_object_get(r->ver, "verdict"));
  {
    int passed = 0;
    json_array_foreach(stages, i, v) passed += !strcmp(json_string_value(json_object_get(v, "verdict")) ?: "", "PASS");
    gen_llm_note_candidate(src, r->iter, passed);
  }
  json_t *line = json_pack("{s:s, s:i, s:s, s:s, s:{s:s, s:I}}", "event", "verdict", "iteration", r->iter, "source", src, "verdict",
                           verdict ?: "?", "by", "role", "verifier", "pid", (json_int_t)0);
  mi_bb_append(r->bb, line);
  json_decref(line);
  if (verdict && !strcmp(verdict, "PASS")) return IT_PASS;
  r->failed_msg = "verification";
  json_array_append_new(r->rejected, json_string(src));
  json_decref(r->last_feedback);
  r->last_feedback = json_pack("{s:s, s:O}", "from", "verifier", "stages", stages);
  const char *ftest = json_string_value(json_object_get(r->ver, "failed_test_contract"));
  const char *fmsg = NULL;
  json_array_foreach(stages, i, v) if (!fmsg && !strcmp(json_string_value(json_object_get(v, "verdict")) ?: "", "FAIL"))
      fmsg = json_string_value(json_object_get(v, "message"));
  snprintf(r->why, sizeof r->why, "verification failed at stage %s (%s): %.600s", json_string_value(json_object_get(r->ver, "failed_stage")) ?: "?",
           ftest ?: "no test contract", fmsg ?: "no message");
  note_failure(r->ckb_abs, r->me, r->model_abs, r->cons, json_string_value(json_object_get(r->ver, "failed_stage")) ?: "?", ftest,
               fmsg ?: "no message", r->tried, r->rd, r->reports);
  /* a --perf gate not met: no contract repair makes a correct engine
   * faster, so the run ends here with the gate and the figure named */
  if (!strcmp(json_string_value(json_object_get(r->ver, "failed_stage")) ?: "", "6p")) {
    r->gate_failed = 1;
    snprintf(r->why, sizeof r->why, "performance gate %s", fmsg ?: "not met");
    return IT_STOP;
  }
  return IT_GO;
}

/* After a failed verification: the failure mode that proposes a repair of
 * the model contract, tried on the next candidate (and journalled). */
static int propose_repair(gen_run *r) {
  size_t i;
  json_t *v;
  const char *ftest = json_string_value(json_object_get(r->ver, "failed_test_contract"));
  json_t *reps = repairs_for(r->c, ftest, r->tried, r->me->json, r->patches);
  if (!json_array_size(reps) && gen_llm_is_llm("implementer")) {
    json_decref(reps); /* the implementer itself acts on the failure report */
    return IT_CONTINUE;
  }
  if (!json_array_size(reps)) {
    fprintf(stderr, "mi-gen: no failure mode in the CKB proposes a repair for %s\n", ftest ?: "this failure");
    json_decref(reps);
    return IT_STOP;
  }
  /* the repair that cleared this very symptom before (its failure
   * report's repaired_by) goes first */
  char last_fm[200];
  const char *rid = json_string_value(json_array_get(r->reports, json_array_size(r->reports) - 1));
  if (rid && mi_learn_last_repair(r->ckb_abs, rid, last_fm, sizeof last_fm) == 0)
    json_array_foreach(reps, i, v) if (i > 0 && !strcmp(json_string_value(json_object_get(v, "failure_mode")) ?: "", last_fm)) {
      json_incref(v);
      json_array_remove(reps, i);
      json_array_insert_new(reps, 0, v);
      fprintf(stderr, "mi-gen: %s cleared this symptom before (%s): tried first\n", last_fm, rid);
      break;
    }
  json_t *r0 = json_array_get(reps, 0);
  fprintf(stderr, "mi-gen: repair: %s proposes %s.%s = %s\n", json_string_value(json_object_get(r0, "failure_mode")),
          json_string_value(json_object_get(json_object_get(r0, "patch"), "operator")),
          json_string_value(json_object_get(json_object_get(r0, "patch"), "arg")),
          json_string_value(json_object_get(json_object_get(r0, "patch"), "value")));
  json_array_append(r->tried, json_object_get(r0, "failure_mode"));
  json_array_append(r->patches, json_object_get(r0, "patch"));
  json_array_append_new(r->repaired_from, json_pack("{s:O, s:O, s:s, s:O, s:O, s:i}", "failure_mode", json_object_get(r0, "failure_mode"),
                                                    "patch", json_object_get(r0, "patch"), "symptom", r->why, "test_contract",
                                                    json_object_get(r->ver, "failed_test_contract"), "stage",
                                                    json_object_get(r->ver, "failed_stage"), "iteration", r->iter));
  if (json_is_string(json_array_get(r->reports, json_array_size(r->reports) - 1)))
    json_object_set(json_array_get(r->repaired_from, json_array_size(r->repaired_from) - 1), "failure_report",
                    json_array_get(r->reports, json_array_size(r->reports) - 1));
  json_t *line = json_pack("{s:s, s:O, s:O, s:s, s:{s:s, s:I}}", "event", "repair", "failure_mode", json_object_get(r0, "failure_mode"),
                           "patch", json_object_get(r0, "patch"), "after", r->why, "by", "role", "orchestrator", "pid", (json_int_t)getpid());
  mi_bb_append(r->bb, line);
  json_decref(line);
  json_decref(reps);
  return IT_CONTINUE;
}

/* One candidate: implementer, reviewer, verifier, then a repair. */
static int iterate(gen_run *r) {
  if (now_s() - r->t_start > r->budget) {
    snprintf(r->why, sizeof r->why, "the time budget of %.0f s is spent", r->budget);
    r->budget_hit = r->why;
    return IT_STOP;
  }
  if (!r->candidate && (r->budget_hit = gen_llm_budget_check("implementer"))) {
    snprintf(r->why, sizeof r->why, "%s", r->budget_hit);
    return IT_STOP;
  }
  json_decref(r->impl), json_decref(r->rev), json_decref(r->ver);
  r->impl = r->rev = r->ver = NULL;
  fprintf(stderr, "mi-gen: candidate %d\n", r->iter);
  const char *src = NULL;
  int s = implement(r, &src);
  if (s == IT_GO) s = review(r, src);
  if (s == IT_GO) s = verify(r, src);
  if (s != IT_GO) return s;
  if (r->candidate) return IT_STOP;
  return propose_repair(r);
}

/* The candidate loop; the exit status when it ends without a PASS, else -1. */
static int generate(gen_run *r, int iter0) {
  r->rejected = json_array();
  r->repaired_from = json_array();
  r->reports = json_array();
  int rc = EX_FAIL;
  for (r->iter = iter0 + 1; r->iter <= r->max_iter; r->iter++) {
    int s = iterate(r);
    if (s == IT_CONTINUE) continue;
    if (s == IT_PASS) rc = EX_OK;
    else if (s != IT_STOP) return s;
    break;
  }
  if (rc != EX_OK && !r->why[0]) snprintf(r->why, sizeof r->why, "the iteration budget (%d candidates) is spent", r->max_iter);
  if (r->iter > r->max_iter && rc != EX_OK && r->failed_msg)
    snprintf(r->why + strlen(r->why), sizeof r->why - strlen(r->why), "; the iteration budget (%d) is spent", r->max_iter);
  if (r->iter > r->max_iter && rc != EX_OK) r->budget_hit = "iterations";
  r->wall = now_s() - r->t_start;
  if (rc == EX_OK) return -1;
  json_t *line = json_pack("{s:s, s:s, s:f, s:{s:s, s:I}}", "event", "end", "result", r->why, "wall_s", r->wall, "by", "role",
                           "orchestrator", "pid", (json_int_t)getpid());
  mi_bb_append(r->bb, line);
  json_decref(line);
  fprintf(stderr, "mi-gen: FAIL: %s (run %s)\n", r->why, r->rd);
  if (r->budget_hit && !r->candidate) {
    gen_llm_write_partial(r->out_abs, r->rd, r->why, r->cons);
    return GEN_EX_BUDGET;
  }
  return r->gate_failed ? EX_GATE : EX_FAIL;
}

/* plugins.conf of the engine directory: the platform the engine was verified
 * on (by path for --platform-plugin; a stand-in says so), and the engine. */
static void write_plugins_conf(gen_run *r, const char *dst) {
  char buf[4096];
  const mi_ckb_entry *pe = r->pe;
  if (r->pplug) {
    const char *pn = json_string_value(json_object_get(r->pplug, "name")), *own_p = json_string_value(json_object_get(pe->json, "plugin"));
    const char *sf = json_string_value(json_object_get(r->pplug, "stands_in_for"));
    char note[640] = "";
    if (sf)
      snprintf(note, sizeof note,
               "# STAND-IN: '%s' stands in for %s (verified on it, not on a %s device); on the device,\n"
               "# replace the platform line with: platform %s libmi-%s.so required\n", pn, sf, own_p, own_p, own_p);
    snprintf(buf, sizeof buf,
             "# Generated by mi-gen: the platform the engine was verified on, and the engine.\n"
             "# KIND   NAME   PATH   required|optional   options\n%s"
             "platform %s %s required threads=%d\n"
             "engine   %s ./libmi-engine-%s.so required\n",
             note, pn, json_string_value(json_object_get(r->pplug, "path")), r->threads, r->engine_name, r->engine_name);
  } else {
    snprintf(buf, sizeof buf,
             "# Generated by mi-gen: the platform the engine was verified on, and the engine.\n"
             "# KIND   NAME   PATH   required|optional   options%s\n"
             "platform %s libmi-%s.so required threads=%d\n"
             "engine   %s ./libmi-engine-%s.so required\n",
             r->tp > 1 ? "\n# tensor parallel: mpirun -np TP mi-run --plugin-dir THIS_DIR --tp TP -t 1 ..." : "",
             json_string_value(json_object_get(pe->json, "plugin")), json_string_value(json_object_get(pe->json, "plugin")),
             r->threads, r->engine_name, r->engine_name);
  }
  if (r->pack_path[0]) { /* the kernel pack the engine's pack operators come from, shipped beside it */
    char lib[128];
    mi_pack_library_name(r->pack_name, lib, sizeof lib);
    size_t l = strlen(buf);
    snprintf(buf + l, sizeof buf - l, "kernels  pack-%s ./%s required\n", r->pack_name, lib);
  }
  write_file(dst, buf);
}

/* The engine directory: engine.c, the library, build.sh and plugins.conf.
 * -1 to go on, else the exit status. */
static int write_engine(gen_run *r) {
  char buf[4096];
  const char *src = json_string_value(json_object_get(r->impl, "source"));
  const char *lib = json_string_value(json_object_get(r->ver, "library"));
  char srcp[PATH_MAX + 128], libp[PATH_MAX + 128], dst[PATH_MAX + 256];
  if (mi_bb_artifact(r->bb, src, "c", srcp, sizeof srcp) || !lib || mi_bb_artifact(r->bb, lib, "so", libp, sizeof libp)) {
    fprintf(stderr, "mi-gen: FAIL: the verified artifacts do not match their hashes\n");
    return EX_FAIL;
  }
  snprintf(dst, sizeof dst, "%s/engine.c", r->out_abs);
  mi_file_copy(srcp, dst);
  snprintf(dst, sizeof dst, "%s/libmi-engine-%s.so", r->out_abs, r->engine_name);
  mi_file_copy(srcp, dst); /* placeholder replaced below */
  mi_file_copy(libp, dst);
  chmod(dst, 0755);
  snprintf(dst, sizeof dst, "%s/build.sh", r->out_abs);
  snprintf(buf, sizeof buf,
           "#!/bin/sh\n# Rebuilds the engine exactly as the verifier did (SDK headers: sdk/include).\n"
           "set -e\ncd \"$(dirname \"$0\")\"\n%s\n",
           json_string_value(json_object_get(r->ver, "build_command")) ?: "");
  write_file(dst, buf);
  chmod(dst, 0755);
  if (r->pack_path[0]) { /* the pack as verified: library, manifest, source */
    const char *files[] = {NULL, "pack.json", "pack.c"};
    char lib[128], from[PATH_MAX + 256];
    mi_pack_library_name(r->pack_name, lib, sizeof lib);
    files[0] = lib;
    for (int k = 0; k < 3; k++) {
      snprintf(from, sizeof from, "%s/pack/%s", r->rd, files[k]);
      snprintf(dst, sizeof dst, "%s/%s", r->out_abs, files[k]);
      if (mi_file_copy(from, dst) != 0) {
        fprintf(stderr, "mi-gen: FAIL: cannot copy the kernel pack's %s into %s\n", files[k], r->out_abs);
        return EX_FAIL;
      }
    }
  }
  snprintf(dst, sizeof dst, "%s/plugins.conf", r->out_abs);
  write_plugins_conf(r, dst);
  return -1;
}

/* evidence/: each stage's evidence file and the verifier's report; returns
 * the stages for the manifest, each naming its evidence file. */
static json_t *copy_evidence(gen_run *r) {
  char dst[PATH_MAX + 256];
  size_t i;
  json_t *v;
  snprintf(dst, sizeof dst, "%s/evidence", r->out_abs);
  mkdir(dst, 0755);
  json_t *stages_m = json_array();
  json_array_foreach(json_object_get(r->ver, "stages"), i, v) {
    json_t *s = json_deep_copy(v);
    const char *ev = json_string_value(json_object_get(v, "evidence"));
    char evp[PATH_MAX + 128];
    if (ev && mi_bb_artifact(r->bb, ev, "txt", evp, sizeof evp) == 0) {
      char d2[PATH_MAX + 300];
      snprintf(d2, sizeof d2, "%s/evidence/%s.txt", r->out_abs, ev);
      mi_file_copy(evp, d2);
      json_object_set_new(s, "evidence_file", json_sprintf("evidence/%s.txt", ev));
    }
    json_array_append_new(stages_m, s);
  }
  const char *rep = json_string_value(json_object_get(r->ver, "report"));
  char repp[PATH_MAX + 128];
  if (rep && mi_bb_artifact(r->bb, rep, "json", repp, sizeof repp) == 0) {
    snprintf(dst, sizeof dst, "%s/evidence/mi-verify-report.json", r->out_abs);
    mi_file_copy(repp, dst);
  }
  return stages_m;
}

/* manifest.json: what was generated from what, with the evidence. */
static void write_manifest(gen_run *r, json_t *stages_m) {
  char dst[PATH_MAX + 256];
  const role_time *rt = &r->rt;
  const char *src = json_string_value(json_object_get(r->impl, "source"));
  const char *lib = json_string_value(json_object_get(r->ver, "library"));
  static json_t *man; /* reachable until exit, as the rest of the run */
  man = json_pack("{s:s, s:s, s:O, s:O, s:O, s:O, s:{s:s, s:s}, s:o, s:i, s:{s:{s:i, s:f}, s:{s:i, s:f}, s:{s:i, s:f}}, s:f, s:s, s:I}",
                  "tool", "mi-gen", "engine", r->engine_name, "constraints", r->cons, "contracts", json_object_get(r->impl, "contracts"),
                  "experience_consulted", json_object_get(r->impl, "experience"), "patches", json_object_get(r->impl, "patches"),
                  "hashes", "engine.c", src, "library", lib, "stages", stages_m, "iterations", r->iter, "time_per_role",
                  "implementer", "calls", rt->n_impl, "wall_s", rt->implementer, "reviewer", "calls", rt->n_rev, "wall_s", rt->reviewer,
                  "verifier", "calls", rt->n_ver, "wall_s", rt->verifier, "wall_s", r->wall, "run_dir", r->rd, "seed", (json_int_t)r->seed);
  json_object_set_new(man, "source_lines", json_copy(json_object_get(r->impl, "lines")));
  json_object_set(man, "repairs", r->repaired_from);
  json_object_set_new(man, "generation", gen_llm_manifest());
  if (json_object_get(r->ver, "perf_gates")) json_object_set(man, "perf_gates", json_object_get(r->ver, "perf_gates"));
  json_object_set_new(man, "reference_plugin", r->ref_name[0] ? json_string(r->ref_name) : json_null());
  if (json_object_get(r->pplug, "stands_in_for"))
    json_object_set_new(man, "stand_in", json_sprintf("verified on the platform plugin '%s' (%s) standing in for %s, not on a %s device",
                                                      json_string_value(json_object_get(r->pplug, "name")),
                                                      json_string_value(json_object_get(r->pplug, "path")), r->pe->id,
                                                      json_string_value(json_object_get(r->pe->json, "plugin"))));
  json_object_set_new(man, "verifier_pid_note", json_string("stage verdicts came over the verifier process's pipe, never from a file"));
  snprintf(dst, sizeof dst, "%s/manifest.json", r->out_abs);
  json_dump_file(man, dst, JSON_INDENT(2) | JSON_SORT_KEYS);
}

/* The experience entry for repair v (one of repaired_from) that cleared a
 * failure: matched later by the binding the contract carried (so any later
 * version, shape or seed of the contract that still carries it gets the
 * repair) and by the symptom it showed. Writes its id into id. */
static json_t *experience_entry(gen_run *r, json_t *v, char *id, size_t id_len) {
  const mi_ckb_entry *me = r->me;
  char msha[65];
  mi_sha256_file(me->path, msha);
  const char *fm = json_string_value(json_object_get(v, "failure_mode"));
  const mi_ckb_entry *fe = mi_ckb_find(r->c, fm);
  json_t *p = json_deep_copy(json_object_get(v, "patch"));
  json_object_del(p, "why");
  snprintf(id, id_len, "experience.gen_%s_%.10s_%s", r->short_name, msha, strchr(fm, '.') + 1);
  char fix[512];
  snprintf(fix, sizeof fix, "%s.%s = %s in %s@%s", json_string_value(json_object_get(p, "operator")),
           json_string_value(json_object_get(p, "arg")), json_string_value(json_object_get(p, "value")), me->id, me->version);
  json_t *x = json_pack(
      "{s:s, s:s, s:s, s:{s:s, s:[s]}, s:s, s:s, s:s, s:s, s:s, s:s, s:{s:i, s:i, s:f}, s:[s, s, s], s:{s:s, s:s, s:s}, s:[O]}",
      "id", id, "kind", "experience", "version", "1.0.0", "provenance", "source", "experience", "refs", r->rd,
      "summary", "mi-gen: a generated engine failed verification; a failure-mode repair of the model contract cleared it",
      "symptom", json_string_value(json_object_get(v, "symptom")),
      "root_cause", fe ? json_string_value(json_object_get(fe->json, "cause")) : "see the failure mode",
      "detection", json_string_value(json_object_get(v, "test_contract")) ?: "verification",
      "fix", fix,
      "verification", "the repaired candidate passed every stage of mi-verify and the deployment run (manifest.json)",
      "measured", "failed_iteration", (int)json_integer_value(json_object_get(v, "iteration")), "passed_iteration", r->iter, "wall_s", r->wall,
      "related", me->id, fm, json_string_value(json_object_get(v, "test_contract")) ?: "test.stage5_authenticity",
      "applies_to", "contract", me->id, "version", me->version, "sha256", msha, "patch", p);
  const char *pop = json_string_value(json_object_get(p, "operator")), *parg = json_string_value(json_object_get(p, "arg"));
  const char *was = binding_of(me->json, pop, parg);
  json_t *ap = json_object_get(x, "applies_to");
  if (ap && was && pop && parg)
    json_object_set_new(ap, "binding", json_pack("{s:s, s:s, s:s}", "operator", pop, "arg", parg, "was", was));
  json_t *sy = json_object();
  const char *fst = json_string_value(json_object_get(v, "stage")), *ftc = json_string_value(json_object_get(v, "test_contract"));
  if (fst) json_object_set_new(sy, "stage", json_string(fst));
  if (ftc) json_object_set_new(sy, "test_contract", json_string(ftc));
  json_object_set_new(sy, "failure_mode", json_string(fm));
  if (ap) json_object_set_new(ap, "symptom", sy);
  else json_decref(sy);
  json_decref(p);
  return x;
}

/* experience: every repair that cleared a failure, written to the CKB, and
 * its failure report marked repaired */
static void write_experience(gen_run *r) {
  size_t i;
  json_t *v;
  json_array_foreach(r->repaired_from, i, v) {
    char id[160];
    json_t *x = experience_entry(r, v, id, sizeof id);
    const char *fm = json_string_value(json_object_get(v, "failure_mode"));
    if (mi_ckb_put(r->ckb_abs, x, MI_CKB_ADD, NULL, NULL) == 0)
      fprintf(stderr, "mi-gen: experience %s written to %s\n", id, r->ckb_abs);
    else
      fprintf(stderr, "mi-gen: experience %s not written (exists already, or invalid)\n", id);
    const char *fr = json_string_value(json_object_get(v, "failure_report"));
    if (fr && mi_learn_repaired(r->ckb_abs, fr, fm, json_object_get(x, "patch") ? json_array_get(json_object_get(x, "patch"), 0) : NULL, id) == 0)
      fprintf(stderr, "mi-gen: failure report %s marked repaired by %s\n", fr, fm);
    json_decref(x);
  }
}

static gen_run g_run;

int main(int argc, char **argv) {
  gen_run *r = &g_run;
  int rc = parse_args(argc, argv, r);
  if (rc >= 0) return rc;
  find_exe_dir();
  if (r->evolve) /* the knowledge-evolution loop (core/gen/evolve, docs/evolution.md) */
    return ev_main(argv[0], g_exe_dir, gen_llm_ref(0), r->candidates, r->ckb_dir, r->model, r->platform, r->dtype, r->out,
                   r->run_dir, r->goldens, r->no_reval);
  r->t_start = now_s();
  if ((rc = load_constraints(r)) >= 0 || (rc = check_platform(r, argv[0])) >= 0 || (rc = parse_perf_gates(r)) >= 0 ||
      (rc = check_model(r)) >= 0 || (rc = check_file_dtypes(r)) >= 0 || (rc = open_blackboard(r)) >= 0 || (rc = make_pack(r)) >= 0)
    return rc;
  if ((rc = generate(r, replay_journal(r))) >= 0 || (rc = write_engine(r)) >= 0) return rc;
  write_manifest(r, copy_evidence(r));
  write_experience(r);
  json_t *line = json_pack("{s:s, s:s, s:s, s:s, s:f, s:{s:s, s:I}}", "event", "end", "result", "PASS", "engine", r->engine_name,
                           "library", json_string_value(json_object_get(r->ver, "library")), "wall_s", r->wall, "by", "role",
                           "orchestrator", "pid", (json_int_t)getpid());
  mi_bb_append(r->bb, line);
  json_decref(line);
  fprintf(stderr, "mi-gen: PASS: %s (%d candidate%s, %.1f s); run it: mi-run --plugin-dir %s -m %s -p ...\n", r->out_abs,
          r->iter, r->iter > 1 ? "s" : "", r->wall, r->out_abs, r->model_abs);
  printf("%s\n", r->out_abs);
  return EX_OK;
}
