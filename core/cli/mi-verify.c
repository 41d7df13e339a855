/* mi-verify: a platform plugin's (and, from stage 3, a model plugin's)
 * conformance run against the CKB's staged test contracts:
 *   1 operator units: every kernel the platform contract lists, called
 *     through libffi on fresh seeded inputs, against float64 references
 *     (with --pack: every kernel of a kernel pack's manifest, from the
 *     pack, run on the platform plugin);
 *   2 one decoder layer composed from the platform's kernels;
 *   3 weight files against the model contract, and read-back through the
 *     engine (each sampled tensor's perturbation must move the logits);
 *   4 end to end against llama.cpp goldens;
 *   5 authenticity: imports allowlist, outputs follow the weights, unseen
 *     prompts against a float64 forward pass, weights from the given path;
 *   6 performance gates: the contract's, and always the default one, decode
 *     growth (the platform work a decode step requests, counted, must not
 *     grow with the prefix beyond attention's linear share).
 * Each unit runs in an isolated child; a stage runs only when all before it
 * passed. Exit status: 0 all passed, 1 something failed, 2 the run could not
 * be set up. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/runtime/model_input.h"
#include "core/util/num.h"
#include "core/util/out.h"
#include "core/util/spawn.h"
#include "core/util/file.h"
#include "core/verify/verify.h"
#include "mi/host.h"

/* A plugin held to another platform's contract (--platform NAME naming a
 * contract whose plugin is not this one: the GPU emulator for platform.nvidia,
 * say) stands in for that platform. Never silently: it is said on stderr and
 * in the report ("stand_in"), and the plugin is held to the device facts of
 * the contract it can show through device_info: the memory model (host
 * memory or not) and the wavefront the contract's kernel limits state. */
static int stand_in(json_t *probe, const mi_ckb_entry *pc, json_t *rep) {
  const char *name = json_string_value(json_object_get(probe, "name"));
  const char *own = json_string_value(json_object_get(pc->json, "plugin"));
  if (!name || !own || !strcmp(name, own)) return 0;
  json_int_t wf = 0;
  size_t i;
  json_t *k;
  json_array_foreach(json_object_get(pc->json, "kernels"), i, k) {
    json_t *w = json_object_get(json_object_get(k, "limits"), "wavefront");
    if (json_is_integer(w) && !wf) wf = json_integer_value(w);
  }
  json_t *sw = json_object_get(probe, "simd_width"), *hm = json_object_get(probe, "host_memory");
  json_t *chm = json_object_get(json_object_get(pc->json, "memory_model"), "host_memory");
  if (wf && (!json_is_integer(sw) || json_integer_value(sw) != wf)) {
    fprintf(stderr, "mi-verify: %s: plugin '%s' cannot stand in for %s: its device's wavefront is %lld, the contract's %lld\n",
            pc->path, name, pc->id, json_is_integer(sw) ? (long long)json_integer_value(sw) : -1LL, (long long)wf);
    return -1;
  }
  if (json_is_boolean(chm) && (!json_is_boolean(hm) || json_is_true(hm) != json_is_true(chm))) {
    fprintf(stderr, "mi-verify: %s: plugin '%s' cannot stand in for %s: its device memory is %s, the contract's %s\n",
            pc->path, name, pc->id, !json_is_boolean(hm) ? "not reported" : json_is_true(hm) ? "host memory" : "device memory",
            json_is_true(chm) ? "host memory" : "device memory");
    return -1;
  }
  fprintf(stderr, "mi-verify: plugin '%s' (device %s) stands in for %s, whose own plugin is '%s': verified on it, not on a %s device\n",
          name, json_string_value(json_object_get(probe, "device")) ?: "?", pc->id, own, own);
  json_object_set_new(rep, "stand_in", json_pack("{s:s, s:s, s:s, s:O}", "plugin", name, "for", pc->id, "contract_plugin", own,
                                                 "device", json_object_get(probe, "device") ?: json_null()));
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mi-verify --platform-plugin PATH.so [options]   (--plugin PATH.so: the same)\n"
          "  --ckb DIR           the contract knowledge base (default: $MI_CKB_DIR, ./ckb, next to the exe)\n"
          "  --platform NAME     the platform contract to hold the plugin to (default: the plugin's name);\n"
          "                      a plugin of another name stands in for it (said, and held to the\n"
          "                      contract's wavefront and memory model), e.g. the GPU emulator\n"
          "                      tests/gpu-emu/libmi-gpuemu32.so with --platform nvidia\n"
          "  --platform-contract FILE  a platform contract outside the CKB (a vendor's, e.g. the one\n"
          "                      beside sdk/templates/platform): validated against the CKB's schema and\n"
          "                      operators, then the plugin is held to it; a kernel it lists that the\n"
          "                      plugin does not provide is one MISSING line\n"
          "  --stage N           run stages 1..N (1: operator units, 2: one decoder layer, 3: weight\n"
          "                      loading, 4: end to end vs goldens, 5: authenticity, 6: performance;\n"
          "                      default 1)\n"
          "  --model-plugin PATH the model plugin under test for stages 3-6 (default: the model\n"
          "                      contract's, model.NAME -> libmi-NAME.so next to the platform plugin)\n"
          "  --goldens DIR       stage 4's goldens (default: <ckb>/../tests/goldens)\n"
          "  --goldens-optional  stage 4 is N/A (not FAIL) when no golden matches and none can be made\n"
          "  --oracle-cache DIR  stage 4's goldens made on demand for a checkpoint no committed golden\n"
          "                      matches (llama.cpp through tools/peer/oracle.mjs), kept by the weights'\n"
          "                      and config's hashes (default: $MI_ORACLE_CACHE, else\n"
          "                      ${XDG_CACHE_HOME:-~/.cache}/metainfer/oracle)\n"
          "  --no-oracle         never make a golden (also MI_ORACLE=0); node: $MI_NODE, else PATH;\n"
          "                      the script: $MI_PEER_DIR/oracle.mjs, else <ckb>/../tools/peer/\n"
          "  --kv-type T         KV cache type of the model under test: f32 (default), f16, bf16\n"
          "                      (a model plugin gets kv_type=T; stages 4-5 widen their logprob tolerance)\n"
          "  --contract-patches FILE  a JSON array of repairs ({operator, arg, value}, as mi-gen applies\n"
          "                      them) applied to the model contract before any stage reads it\n"
          "  --model-contract ID the model contract stage 2 composes (default: the one whose\n"
          "                      architectures --model's config.json names, else the CKB's only one)\n"
          "  --model DIR         the model folder stage 3 checks against its model contract\n"
          "  --pack PATH.so      a kernel pack (kind \"kernels\", its manifest pack.json beside it).\n"
          "                      Stage 1: the manifest's kernels, from the pack, bound to and run on\n"
          "                      the platform plugin, against the operator contracts' references.\n"
          "                      Stages 2-6: the pack the model's pack operators come from\n"
          "  --tp N              the ranks a tensor-parallel deployment runs (default 1): N > 1 adds\n"
          "                      stage 1's collective unit, the plugin's all-reduce and broadcast across N\n"
          "                      processes under mpirun ($MI_MPIRUN, else PATH) against a float64 sum\n"
          "  --only LIST         comma-separated operator ids or member names (\"collectives\": that unit)\n"
          "  --seed N            master seed (default: random, printed)\n"
          "  --report FILE       write the JSON report there\n"
          "  --timeout S         wall-clock limit per unit (default: the test contract's)\n"
          "  --cpu-limit S       RLIMIT_CPU per unit     --mem-limit MB   RLIMIT_AS per unit\n"
          "  -o KEY=VALUE        plugin option (repeatable), e.g. -o threads=2\n"
          "  -v                  print every case\n"
          "exit: 0 PASS, 1 FAIL, 2 usage or input error, 3 --model's config.json has a field or value\n"
          "      the model contract does not account for (one line each)\n");
}

static uint64_t random_seed(void) {
  uint64_t s = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &s, sizeof s) != (ssize_t)sizeof s) s = 0;
    close(fd);
  }
  if (!s) s = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
  return s & ((1ull << 48) - 1); /* short enough to retype */
}

static json_t *find_stage_contract(const mi_ckb *c, int stage, const char *name) {
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "test")) continue;
    const char *n = json_string_value(json_object_get(e->json, "name"));
    if (json_integer_value(json_object_get(e->json, "stage")) == stage && n && !strcmp(n, name))
      return e->json;
  }
  return NULL;
}

static void summary(json_t *stage, int verbose) {
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(stage, "units"), i, u) {
    const char *v = json_string_value(json_object_get(u, "verdict"));
    const char *st = json_string_value(json_object_get(u, "status"));
    size_t nc = json_array_size(json_object_get(u, "cases"));
    const char *sm = json_string_value(json_object_get(u, "summary"));
    if (!strcmp(v, "PASS") && sm)
      fprintf(stderr, "  PASS     %-22s %s\n", json_string_value(json_object_get(u, "id")), sm);
    else if (!strcmp(v, "PASS"))
      fprintf(stderr, "  PASS     %-22s %2zu cases, max rel error %.2g\n",
              json_string_value(json_object_get(u, "id")), nc,
              json_number_value(json_object_get(u, "max_rel_err")));
    else
      fprintf(stderr, "  %-8s %-22s %s\n", st ? st : v, json_string_value(json_object_get(u, "id")),
              json_string_value(json_object_get(u, "message")));
    if (!verbose) continue;
    size_t j;
    json_t *c;
    json_array_foreach(json_object_get(u, "cases"), j, c) {
      json_t *rel = json_object_get(c, "max_rel_err");
      char rs[32];
      if (json_is_number(rel)) snprintf(rs, sizeof rs, "%.2g", json_number_value(rel));
      else snprintf(rs, sizeof rs, "%s", json_is_string(rel) ? json_string_value(rel) : "-");
      char ps[256] = "";
      const char *key;
      json_t *pv;
      json_object_foreach(json_object_get(c, "params"), key, pv) {
        size_t l = strlen(ps);
        if (json_is_integer(pv)) snprintf(ps + l, sizeof ps - l, " %s=%lld", key, (long long)json_integer_value(pv));
        else if (json_is_number(pv)) snprintf(ps + l, sizeof ps - l, " %s=%g", key, json_number_value(pv));
      }
      fprintf(stderr, "           %-5s %-16s %-4s seed %s  max rel error %-8s%s\n",
              json_string_value(json_object_get(c, "verdict")),
              json_string_value(json_object_get(c, "case")),
              json_string_value(json_object_get(c, "dtype")) ?: "-",
              json_string_value(json_object_get(c, "seed")) ?: "-", rs, ps);
    }
  }
}

/* The model contract for --model DIR (by its config.json architectures), or
 * the CKB's only model contract; 0, or -1 after a line on stderr. */
static int resolve_model_contract(const mi_ckb *c, const char *ckb_dir, const char *model_dir,
                                  char *out, size_t n) {
  char names[512] = "";
  size_t used = 0, count = 0;
  const mi_ckb_entry *only = NULL;
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "model") || !e->id) continue;
    only = e;
    count++;
    if (used + 1 < sizeof names)
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", e->id);
  }
  if (model_dir) {
    char path[4200];
    mi_model_input_config_name(model_dir, path, sizeof path);
    char err[4400];
    json_t *cfg = mi_model_input_config(model_dir, JSON_REJECT_DUPLICATES, err, sizeof err);
    if (!cfg) {
      fprintf(stderr, "mi-verify: %s\n", err);
      return -1;
    }
    const mi_ckb_entry *m = mi_ckb_find_model(c, json_object_get(cfg, "architectures"));
    json_decref(cfg);
    if (!m) {
      fprintf(stderr, "mi-verify: %s: no model contract in %s lists its architectures (have: %s; "
                      "evolve the CKB or give --model-contract)\n", path, ckb_dir, names[0] ? names : "none");
      return -1;
    }
    snprintf(out, n, "%s", m->id);
    return 0;
  }
  if (count != 1) {
    fprintf(stderr, "mi-verify: %s has %zu model contracts (%s): name one with --model-contract or give --model DIR\n",
            ckb_dir, count, names[0] ? names : "none");
    return -1;
  }
  snprintf(out, n, "%s", only->id);
  return 0;
}

/* Stage 4 as deployed: the mi-run installed beside this mi-verify (*out
 * stays NULL, said in a line, when there is none). */
static void find_mi_run(char *buf, size_t n, const char **out) {
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl > 0) {
    self[sl] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(buf, n, "%s/mi-run", self);
    if (access(buf, X_OK) == 0) *out = buf;
  }
  if (!*out) fprintf(stderr, "mi-verify: stage 4: no mi-run beside mi-verify: the deployed run is skipped\n");
}

/* Stage 4's oracle: node ($MI_NODE, else the first on PATH) and
 * oracle.mjs ($MI_PEER_DIR, else <ckb>/../tools/peer), with its cache
 * (--oracle-cache, $MI_ORACLE_CACHE, the XDG cache, ~/.cache); set in o
 * only when both programs exist. Each buffer holds n bytes. */
static void find_oracle(const char *ckb_dir, const char *cache_arg, char *node_buf, char *script_buf,
                        char *cache_buf, size_t n, vf_stage_opts *o) {
  const char *node = getenv("MI_NODE");
  if (node && *node) snprintf(node_buf, n, "%s", node);
  else mi_find_in_path("node", node_buf, n);
  const char *peer = getenv("MI_PEER_DIR");
  if (peer && *peer) snprintf(script_buf, n, "%s/oracle.mjs", peer);
  else snprintf(script_buf, n, "%s/../tools/peer/oracle.mjs", ckb_dir);
  const char *env = getenv("MI_ORACLE_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (cache_arg) snprintf(cache_buf, n, "%s", cache_arg);
  else if (env && *env) snprintf(cache_buf, n, "%s", env);
  else if (xdg && *xdg) snprintf(cache_buf, n, "%s/metainfer/oracle", xdg);
  else if (home && *home) snprintf(cache_buf, n, "%s/.cache/metainfer/oracle", home);
  else snprintf(cache_buf, n, "/tmp/metainfer-oracle-%d", (int)getuid());
  if (node_buf[0] && access(script_buf, R_OK) == 0) {
    o->oracle_node = node_buf;
    o->oracle_script = script_buf;
    o->oracle_cache = cache_buf;
  }
}

/* The command line, and the paths derived from it (each buffer holds a path
 * one of the pointers may point into). */
typedef struct verify_args {
  const char *plugin, *ckb_dir, *platform, *report, *only;
  const char *model_id, *model_dir, *model_plugin, *goldens, *kv_type, *oracle_cache, *patches, *pack;
  const char *platform_contract; /* a vendor's contract file, outside the CKB */
  const char *rank_dir; /* --collective-rank DIR: one rank of stage 1's collective unit (run by mpirun) */
  int stage, verbose, have_seed, goldens_optional, no_oracle, tp;
  uint64_t seed;
  double timeout, cpu;
  long mem;
  mi_kv kv[32]; /* -o KEY=VALUE, then the platform's exact_options */
  size_t nkv;
  char ckb_buf[4096], id_buf[256], mp_buf[4096], gold_buf[4200], abs_buf[5][8200];
  char run_buf[4200], node_buf[4200], script_buf[4200], cache_buf[4200];
} verify_args;

/* The command line into a; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, verify_args *a) {
  a->stage = 1, a->timeout = -1, a->cpu = -1, a->mem = -1;
  static const struct option longs[] = {
      {"platform-plugin", 1, 0, 'P'}, {"ckb", 1, 0, 'C'},    {"platform", 1, 0, 'p'},
      {"stage", 1, 0, 's'},           {"only", 1, 0, 'O'},   {"seed", 1, 0, 'S'},
      {"report", 1, 0, 'r'},          {"timeout", 1, 0, 't'}, {"cpu-limit", 1, 0, 'c'},
      {"mem-limit", 1, 0, 'm'},       {"help", 0, 0, 'h'},   {"model-contract", 1, 0, 'M'},
      {"model", 1, 0, 'D'},           {"model-plugin", 1, 0, 'L'}, {"goldens", 1, 0, 'G'},
      {"goldens-optional", 0, 0, 'g'}, {"kv-type", 1, 0, 'K'},
      {"no-oracle", 0, 0, 1000},        {"oracle-cache", 1, 0, 1001}, {"contract-patches", 1, 0, 1002},
      {"pack", 1, 0, 1003},             {"plugin", 1, 0, 'P'}, /* = --platform-plugin */
      {"platform-contract", 1, 0, 1004}, {"tp", 1, 0, 1005},
      {"collective-rank", 1, 0, 1006},
      {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "o:vh", longs, NULL)) != -1) {
    switch (ch) {
    case 'P': a->plugin = optarg; break;
    case 'C': a->ckb_dir = optarg; break;
    case 'p': a->platform = optarg; break;
    case 's': {
      int64_t v;
      if (mi_opt_i64("mi-verify", "--stage", optarg, 1, 6, &v)) return 2;
      a->stage = (int)v;
      break;
    }
    case 'O': a->only = optarg; break;
    case 'S':
      if (mi_opt_u64("mi-verify", "--seed", optarg, 0, (1ull << 63) - 1, &a->seed)) return 2;
      a->have_seed = 1;
      break;
    case 'r': a->report = optarg; break;
    case 'M': a->model_id = optarg; break;
    case 'D': a->model_dir = optarg; break;
    case 'L': a->model_plugin = optarg; break;
    case 'G': a->goldens = optarg; break;
    case 'g': a->goldens_optional = 1; break;
    case 1000: a->no_oracle = 1; break;
    case 1001: a->oracle_cache = optarg; break;
    case 1002: a->patches = optarg; break;
    case 1003: a->pack = optarg; break;
    case 1004: a->platform_contract = optarg; break;
    case 'K':
      if (strcmp(optarg, "f32") && strcmp(optarg, "f16") && strcmp(optarg, "bf16")) {
        fprintf(stderr, "mi-verify: --kv-type %s: expected f32, f16 or bf16\n", optarg);
        return 2;
      }
      a->kv_type = optarg;
      break;
    /* a limit read as 0 would remove it: strictly parsed, never 0 */
    case 't':
      if (mi_opt_double("mi-verify", "--timeout", optarg, 0.001, 86400, &a->timeout)) return 2;
      break;
    case 'c':
      if (mi_opt_double("mi-verify", "--cpu-limit", optarg, 0.001, 86400, &a->cpu)) return 2;
      break;
    case 'm': {
      int64_t v;
      if (mi_opt_i64("mi-verify", "--mem-limit", optarg, 1, (int64_t)1 << 30, &v)) return 2;
      a->mem = (long)v;
      break;
    }
    case 'v': a->verbose = 1; break;
    case 'o': {
      char *eq = strchr(optarg, '=');
      if (!eq || a->nkv == 32) {
        fprintf(stderr, "mi-verify: -o expects KEY=VALUE (got '%s')\n", optarg);
        return 2;
      }
      *eq = 0;
      a->kv[a->nkv].key = optarg;
      a->kv[a->nkv++].value = eq + 1;
      break;
    }
    case 1005: {
      int64_t v;
      if (mi_opt_i64("mi-verify", "--tp", optarg, 1, 64, &v)) return 2;
      a->tp = (int)v;
      break;
    }
    case 1006: a->rank_dir = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!a->plugin || optind != argc) {
    usage(stderr);
    return 2;
  }
  if (a->stage < 1 || a->stage > 6) {
    fprintf(stderr, "mi-verify: --stage %d: stages are 1 (operator units), 2 (one decoder layer), 3 "
                    "(weight loading), 4 (end to end), 5 (authenticity) and 6 (performance)\n", a->stage);
    return 2;
  }
  if (a->stage >= 3 && !a->model_dir) {
    fprintf(stderr, "mi-verify: --stage %d needs --model DIR (a Hugging Face model folder)\n", a->stage);
    return 2;
  }
  return -1;
}

/* The CKB, opened and validated (NULL after a line on stderr). */
static mi_ckb *open_ckb(verify_args *a, const char *argv0) {
  char err[512];
  if (!a->ckb_dir && !(a->ckb_dir = mi_ckb_default_dir(argv0, a->ckb_buf, sizeof a->ckb_buf))) {
    fprintf(stderr, "mi-verify: %s\n", a->ckb_buf);
    return NULL;
  }
  mi_ckb *c = mi_ckb_open(a->ckb_dir, err, sizeof err);
  if (!c) {
    fprintf(stderr, "mi-verify: %s\n", err);
    return NULL;
  }
  /* a GGUF model is read through this CKB's contracts, here and in the
   * stages' children (core/runtime/model_input.h) */
  char abs[4096];
  setenv("MI_CKB_DIR", realpath(a->ckb_dir, abs) ? abs : a->ckb_dir, 1);
  int problems = mi_ckb_validate(c, NULL, NULL);
  if (problems) {
    fprintf(stderr, "mi-verify: %s: the CKB has %d problem(s) (listed above; see mi-ckb validate)\n",
            a->ckb_dir, problems);
    mi_ckb_close(c);
    return NULL;
  }
  return c;
}

/* Every config.json field of the model bound, supported or inert: a field
 * the contract does not account for is a gap (exit 3), not a pass of a model
 * nobody described (hidden_act gelu under a silu contract). -1 to go on,
 * else the exit status. */
static int check_config_gaps(const verify_args *a, mi_ckb *c) {
  const mi_ckb_entry *me = mi_ckb_find(c, a->model_id);
  char cpath[4200], cerr[4400];
  mi_model_input_config_name(a->model_dir, cpath, sizeof cpath);
  json_t *cfg = me ? mi_model_input_config(a->model_dir, JSON_REJECT_DUPLICATES, cerr, sizeof cerr) : NULL;
  if (me && !cfg) {
    fprintf(stderr, "mi-verify: %s\n", cerr);
    return 2;
  }
  json_t *gaps = json_array();
  if (me) mi_ckb_config_gaps(me, cfg, gaps);
  json_decref(cfg);
  size_t gi;
  json_t *gl;
  json_array_foreach(gaps, gi, gl) fprintf(stderr, "mi-verify: %s: %s\n", cpath, json_string_value(gl));
  size_t ng = json_array_size(gaps);
  json_decref(gaps);
  if (ng) {
    fprintf(stderr, "mi-verify: %s does not describe this model (%zu gap%s above); nothing was run\n", a->model_id,
            ng, ng == 1 ? "" : "s");
    return 3;
  }
  return -1;
}

/* The model contract (--model-contract, else the one whose architectures
 * the model folder's config.json names, else the CKB's only one), its model
 * plugin, the goldens, every path absolute, and the seed. -1 to go on, else
 * the exit status. */
static int resolve_inputs(verify_args *a, mi_ckb *c) {
  int rc;
  if (!a->model_id && a->stage >= 2 && resolve_model_contract(c, a->ckb_dir, a->model_dir, a->id_buf, sizeof a->id_buf) != 0)
    return 2;
  if (!a->model_id) a->model_id = a->id_buf;
  if (a->model_dir && a->stage >= 2 && (rc = check_config_gaps(a, c)) >= 0) return rc;
  if (a->stage >= 3 && !a->model_plugin) {
    /* The contract's model plugin (model.NAME -> libmi-NAME.so), installed
     * next to the platform plugin. */
    const char *slash = strrchr(a->plugin, '/'), *dot = strchr(a->model_id, '.');
    snprintf(a->mp_buf, sizeof a->mp_buf, "%.*slibmi-%s.so", slash ? (int)(slash - a->plugin + 1) : 0, a->plugin,
             dot ? dot + 1 : a->model_id);
    if (access(a->mp_buf, R_OK) == 0) a->model_plugin = a->mp_buf;
    else if (a->stage >= 4) {
      fprintf(stderr, "mi-verify: --stage %d needs --model-plugin PATH.so (%s does not exist)\n", a->stage, a->mp_buf);
      return 2;
    }
  }
  if (!a->goldens) {
    snprintf(a->gold_buf, sizeof a->gold_buf, "%s/../tests/goldens", a->ckb_dir);
    a->goldens = a->gold_buf;
  }
  /* Each unit runs with its own folder as the working directory: every
   * path it is given is made absolute here. */
  char cwd[4096];
  const char **paths[5] = {&a->plugin, &a->model_plugin, &a->model_dir, &a->goldens, &a->pack};
  if (getcwd(cwd, sizeof cwd))
    for (int k = 0; k < 5; k++)
      if (*paths[k] && (*paths[k])[0] != '/') {
        snprintf(a->abs_buf[k], sizeof a->abs_buf[k], "%s/%s", cwd, *paths[k]);
        *paths[k] = a->abs_buf[k];
      }
  if (!a->have_seed) a->seed = random_seed();
  fprintf(stderr, "mi-verify: seed %llu (rerun with --seed %llu)\n", (unsigned long long)a->seed,
          (unsigned long long)a->seed);
  return -1;
}

/* The options every stage runs with: stage 1's contract limits (t1),
 * overridden by --timeout, --cpu-limit and --mem-limit; from stage 4 the
 * deployed run's mi-run and the oracle. */
static void stage_options(verify_args *a, mi_ckb *c, json_t *t1, const mi_options *popts, vf_stage_opts *o) {
  json_t *lim = json_object_get(t1, "limits");
  *o = (vf_stage_opts){.plugin_path = a->plugin, .plugin_opts = popts, .operators = json_object(), .seed = a->seed,
                       .lim = {30, 60, 8192, 0}, .only = a->only};
  if (json_is_number(json_object_get(lim, "timeout_s"))) o->lim.timeout_s = json_number_value(json_object_get(lim, "timeout_s"));
  if (json_is_number(json_object_get(lim, "cpu_s"))) o->lim.cpu_s = json_number_value(json_object_get(lim, "cpu_s"));
  if (json_is_integer(json_object_get(lim, "mem_mb"))) o->lim.mem_mb = (uint64_t)json_integer_value(json_object_get(lim, "mem_mb"));
  o->model_plugin_path = a->model_plugin;
  o->model_dir = a->model_dir;
  o->ckb = c;
  o->goldens_dir = a->goldens;
  o->goldens_optional = a->goldens_optional;
  o->kv_type = a->kv_type;
  o->tp = a->tp > 0 ? a->tp : 1;
  if (a->stage >= 4) {
    find_mi_run(a->run_buf, sizeof a->run_buf, &o->mi_run);
    const char *mo = getenv("MI_ORACLE");
    if (!a->no_oracle && !(mo && !strcmp(mo, "0")))
      find_oracle(a->ckb_dir, a->oracle_cache, a->node_buf, a->script_buf, a->cache_buf, sizeof a->node_buf, o);
  }
  /* per unit: stage 1's children, and the later stages' units and the
   * deployed run, which read unit_timeout_s (it was never set: a slow
   * platform's deployed run ended at its default, 300 s + 30 s a case,
   * whatever --timeout said) */
  if (a->timeout >= 0) o->lim.timeout_s = a->timeout, o->unit_timeout_s = a->timeout;
  if (a->cpu >= 0) o->lim.cpu_s = a->cpu;
  if (a->mem >= 0) o->lim.mem_mb = (uint64_t)a->mem;
}

static void diag_line(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "mi-verify: %s\n", line);
}

/* --platform-contract FILE: the vendor's contract, read with the CKB's
 * limits and checked as if it were one of its entries (schema, the
 * operators it names); NULL with the problems printed, one line each. */
static json_t *load_vendor_contract(const char *file, const mi_ckb *c, mi_ckb_entry *e) {
  char err[1200];
  json_t *j = mi_file_load_json(file, 0, MI_CKB_MAX_FILE, "platform contract", JSON_REJECT_DUPLICATES, err, sizeof err);
  if (!j) {
    fprintf(stderr, "mi-verify: %s\n", err);
    return NULL;
  }
  const char *id = json_string_value(json_object_get(j, "id"));
  const char *kind = json_string_value(json_object_get(j, "kind"));
  if (!kind || strcmp(kind, "platform") || !id) {
    fprintf(stderr, "mi-verify: %s: not a platform contract (\"kind\": \"platform\" and an \"id\" are needed)\n", file);
    json_decref(j);
    return NULL;
  }
  /* checked as it would be stored: platforms/NAME.json of the CKB */
  char where[600];
  snprintf(where, sizeof where, "%s/platforms/%s.json", mi_ckb_dir(c), strncmp(id, "platform.", 9) ? id : id + 9);
  if (mi_ckb_validate_entry(c, j, where, diag_line, NULL) != 0) {
    fprintf(stderr, "mi-verify: %s: the platform contract has the problems above (checked as %s)\n", file, where);
    json_decref(j);
    return NULL;
  }
  *e = (mi_ckb_entry){id, kind, json_string_value(json_object_get(j, "version")), file, file, j};
  return j;
}

/* The platform contract the probed plugin is held to (--platform, else its
 * own name), a stand-in said so, and the CKB's operators into o. -1 to go
 * on, else the exit status with the report's verdict set. */
static int bind_platform(const verify_args *a, mi_ckb *c, json_t *probe, const mi_ckb_entry *vendor, json_t *rep,
                         vf_stage_opts *o) {
  if (strcmp(json_string_value(json_object_get(probe, "verdict")), "PASS")) {
    fprintf(stderr, "mi-verify: FAIL: %s\n", json_string_value(json_object_get(probe, "message")));
    json_object_set_new(rep, "verdict", json_string("FAIL"));
    return 1;
  }
  const char *pname = a->platform ? a->platform : json_string_value(json_object_get(probe, "name"));
  const mi_ckb_entry *pc = vendor ? vendor : mi_ckb_find_platform(c, pname);
  if (!pc) {
    fprintf(stderr, "mi-verify: %s: no platform contract for '%s' (give one with --platform NAME)\n",
            a->ckb_dir, pname);
    json_object_set_new(rep, "verdict", json_string("ERROR"));
    return 2;
  }
  if (stand_in(probe, pc, rep) != 0) {
    json_object_set_new(rep, "verdict", json_string("ERROR"));
    return 2;
  }
  o->platform = pc->json;
  json_object_set_new(rep, "platform_contract", json_sprintf("%s@%s", pc->id, pc->version));
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (e->kind && !strcmp(e->kind, "operator") && e->id) json_object_set(o->operators, e->id, e->json);
  }
  fprintf(stderr, "mi-verify: %s %s (%s) against %s@%s\n",
          json_string_value(json_object_get(probe, "name")),
          json_string_value(json_object_get(probe, "version")),
          json_string_value(json_object_get(probe, "variant")) ?: "?", pc->id, pc->version);
  return -1;
}

/* pack.json must describe the library it sits beside: the same kernels
 * (by operator) generated from the same contract versions. A kernel the
 * library holds and the manifest leaves out would serve engines unverified;
 * one the manifest lists and the library lacks would be verified against
 * nothing. The first difference into why; 0 when they agree. */
static int manifest_matches(const json_t *lib_kernels, const json_t *manifest, char *why, size_t n) {
  const json_t *mk = json_object_get(manifest, "kernels");
  size_t i, j;
  json_t *a, *b;
  json_array_foreach(lib_kernels, i, a) {
    const char *op = json_string_value(json_object_get(a, "operator")) ?: "?";
    const json_t *hit = NULL;
    json_array_foreach(mk, j, b) if (!strcmp(json_string_value(json_object_get(b, "operator")) ?: "", op)) hit = b;
    const char *lv = json_string_value(json_object_get(a, "version")) ?: "?";
    const char *mv = json_string_value(json_object_get(hit, "version")) ?: "?";
    if (!hit) {
      snprintf(why, n, "the library holds a kernel for %s, which pack.json does not list (it would run unverified)", op);
      return -1;
    }
    if (strcmp(lv, mv)) {
      snprintf(why, n, "pack.json says %s was generated from version %s of its contract, the library's kernel from %s",
               op, mv, lv);
      return -1;
    }
  }
  json_array_foreach(mk, j, b) {
    const char *op = json_string_value(json_object_get(b, "operator")) ?: "?";
    int held = 0;
    json_array_foreach(lib_kernels, i, a) held |= !strcmp(json_string_value(json_object_get(a, "operator")) ?: "", op);
    if (!held) {
      snprintf(why, n, "pack.json lists %s, which the library holds no kernel for", op);
      return -1;
    }
  }
  return 0;
}

/* --pack: the pack loaded in a probe child and described in the report
 * (beside its manifest's name); a pack that cannot be loaded fails the run
 * before any unit. -1 to go on, else the exit status. */
static int probe_pack(vf_stage_opts *o, json_t *rep) {
  if (!o->pack_path) return -1;
  json_t *pp = vf_probe_pack(o);
  json_object_set_new(pp, "path", json_string(o->pack_path));
  json_object_set(pp, "manifest", o->pack_manifest);
  json_object_set_new(rep, "pack", pp);
  if (strcmp(json_string_value(json_object_get(pp, "verdict")), "PASS")) {
    fprintf(stderr, "mi-verify: FAIL: %s\n", json_string_value(json_object_get(pp, "message")));
    json_object_set_new(rep, "verdict", json_string("FAIL"));
    return 1;
  }
  char why[800];
  if (manifest_matches(json_object_get(pp, "kernels"), o->pack_manifest, why, sizeof why) != 0) {
    fprintf(stderr, "mi-verify: FAIL: %s: the manifest beside it does not describe it: %s\n", o->pack_path, why);
    json_object_set_new(pp, "verdict", json_string("FAIL"));
    json_object_set_new(pp, "message", json_string(why));
    json_object_set_new(rep, "verdict", json_string("FAIL"));
    return 1;
  }
  fprintf(stderr, "mi-verify: kernel pack %s %s (ABI %s, %s, %zu kernels; manifest '%s', %zu kernels)\n",
          json_string_value(json_object_get(pp, "name")), json_string_value(json_object_get(pp, "version")),
          json_string_value(json_object_get(pp, "abi")), json_string_value(json_object_get(pp, "target")),
          json_array_size(json_object_get(pp, "kernels")),
          json_string_value(json_object_get(o->pack_manifest, "name")),
          json_array_size(json_object_get(o->pack_manifest, "kernels")));
  return -1;
}

/* The stages' verdicts so far. */
typedef struct tally {
  int pass, passed, failed, skipped;
} tally;

/* Stage sj (its test contract tc named in it) into the report, on stderr
 * under `title` with its units' summary when by_units, else its verdict and
 * message. */
static void add_stage(json_t *stages, json_t *sj, json_t *tc, const char *title, int by_units, int verbose) {
  if (tc) json_object_set_new(sj, "test_contract", json_sprintf("%s@%s", json_string_value(json_object_get(tc, "id")),
                                                                json_string_value(json_object_get(tc, "version"))));
  json_array_append_new(stages, sj);
  fprintf(stderr, "%s:\n", title);
  if (by_units) summary(sj, verbose);
  else fprintf(stderr, "  %s: %s\n", json_string_value(json_object_get(sj, "verdict")),
               json_string_value(json_object_get(sj, "message")));
}

/* Stages 2-6 hold whole layers and models to exact references (float64
 * twins, goldens of an F32 GGUF) at f32 tolerances: the platform runs its
 * exact path there, as its contract says how: exact_options, open options of
 * the platform (the CPU platform's matmul_act=f32), which a deployment may
 * give as well, so that the engine under test sees no verifier variable in
 * its environment. A looser mode it runs by default was judged at stage 1 by
 * the operator contract's bound for it, and its effect on a whole model is
 * that mode's, not the model's. An option the user gave with -o stays as
 * given. */
static void use_exact_path(verify_args *a, const vf_stage_opts *o, mi_options *popts, json_t *rep) {
  const char *ek;
  json_t *ev;
  json_object_foreach(json_object_get(o->platform, "exact_options"), ek, ev) if (json_is_string(ev)) {
    int given = 0;
    for (size_t q = 0; q < a->nkv; q++) given |= !strcmp(a->kv[q].key, ek);
    if (given || a->nkv == sizeof a->kv / sizeof *a->kv) continue;
    a->kv[a->nkv].key = ek;
    a->kv[a->nkv++].value = json_string_value(ev);
    popts->count = a->nkv;
    fprintf(stderr, "mi-verify: stages 2-%d: platform option %s=%s (the platform's exact path)\n", a->stage, ek,
            json_string_value(ev));
  }
  if (json_object_size(json_object_get(o->platform, "exact_options")))
    json_object_set(rep, "exact_options", json_object_get(o->platform, "exact_options"));
  /* deprecated: a contract that can only say it through the environment */
  json_object_foreach(json_object_get(o->platform, "exact_env"), ek, ev) if (json_is_string(ev)) {
    setenv(ek, json_string_value(ev), 1);
    fprintf(stderr, "mi-verify: stages 2-%d: %s=%s (the platform's exact path)\n", a->stage, ek,
            json_string_value(ev));
  }
  if (json_object_size(json_object_get(o->platform, "exact_env")))
    json_object_set(rep, "exact_env", json_object_get(o->platform, "exact_env"));
}

/* Stages 2 and 3, each run only on what passed the ones before it. */
static void run_stages_2_3(const verify_args *a, mi_ckb *c, vf_stage_opts *o, json_t *stages, tally *t) {
  char title[8400]; /* model_dir: up to 8200 bytes */
  if (a->stage >= 2) {
    json_t *t2 = find_stage_contract(c, 2, "decoder_layer");
    const mi_ckb_entry *me = mi_ckb_find(c, a->model_id);
    json_t *s2;
    if (!t->pass)
      s2 = json_pack("{s:i, s:s, s:s, s:s}", "stage", 2, "name", "decoder_layer", "verdict", "SKIPPED",
                     "message", "stage 1 failed");
    else if (!me || !me->kind || strcmp(me->kind, "model"))
      s2 = json_pack("{s:i, s:s, s:s, s:s}", "stage", 2, "name", "decoder_layer", "verdict", "FAIL",
                     "message", "no such model contract (see --model-contract)");
    else
      s2 = vf_stage2(o, me->json, t2);
    snprintf(title, sizeof title, "stage 2 (one decoder layer of %s)", a->model_id);
    add_stage(stages, s2, t2, title, json_object_get(s2, "units") != NULL, a->verbose);
    int p2 = !strcmp(json_string_value(json_object_get(s2, "verdict")), "PASS");
    t->passed += p2;
    t->failed += !p2;
    t->pass = t->pass && p2;
  }
  if (a->stage >= 3) {
    json_t *t3 = find_stage_contract(c, 3, "weight_loading");
    json_t *s3 = t->pass ? vf_stage3(o, c, a->model_dir)
                         : json_pack("{s:i, s:s, s:s, s:s}", "stage", 3, "name", "weight_loading",
                                     "verdict", "SKIPPED", "message", "an earlier stage failed");
    snprintf(title, sizeof title, "stage 3 (weight files of %s%s)", a->model_dir,
             a->model_plugin && a->tp <= 1 ? ", read-back through the engine" : "");
    add_stage(stages, s3, t3, title, json_object_get(s3, "units") != NULL, a->verbose);
    int p3 = !strcmp(json_string_value(json_object_get(s3, "verdict")), "PASS");
    t->passed += p3;
    t->failed += !p3;
    t->pass = t->pass && p3;
  }
}

/* Stages 4-6 up to --stage: N/A counts neither way, SKIPPED as skipped. */
static void run_stages_4_6(const verify_args *a, mi_ckb *c, vf_stage_opts *o, json_t *stages, tally *t) {
  static const char *const later_names[] = {NULL, NULL, NULL, NULL, "end_to_end", "authenticity", "performance"};
  static const char *const later_titles[] = {NULL, NULL, NULL, NULL, "end to end against goldens",
                                             "authenticity and single path", "performance gates"};
  for (int sn = 4; sn <= a->stage; sn++) {
    json_t *tc = find_stage_contract(c, sn, later_names[sn]);
    json_t *sj;
    if (!t->pass)
      sj = json_pack("{s:i, s:s, s:s, s:s}", "stage", sn, "name", later_names[sn], "verdict", "SKIPPED", "message",
                     "an earlier stage failed");
    else if (sn >= 5 && a->tp > 1) /* their units load the engine in one process: a rank of N */
      sj = json_pack("{s:i, s:s, s:s, s:s}", "stage", sn, "name", later_names[sn], "verdict", "N/A", "message",
                     sn == 5 ? "at --tp N the engine loads only as N ranks under mpirun; stage 5's units load it in one "
                               "process (stage 4 ran the ranks as deployed against llama.cpp)"
                             : "at --tp N the engine loads only as N ranks under mpirun; stage 6 measures one process "
                               "(mi-gen's 6d gate runs the ranks)");
    else if (sn == 4) sj = vf_stage4(o, tc);
    else if (sn == 5) sj = vf_stage5(o, tc);
    else sj = vf_stage6(o, tc);
    char title[128];
    snprintf(title, sizeof title, "stage %d (%s)", sn, later_titles[sn]);
    add_stage(stages, sj, tc, title, json_array_size(json_object_get(sj, "units")) > 0, a->verbose);
    const char *v = json_string_value(json_object_get(sj, "verdict"));
    if (!strcmp(v, "N/A")) continue; /* nothing was required: neither passed nor failed */
    if (!strcmp(v, "SKIPPED")) {
      t->skipped++;
      continue;
    }
    int p = !strcmp(v, "PASS");
    t->passed += p;
    t->failed += !p;
    t->pass = t->pass && p;
  }
}

/* Stages 1 to --stage into the report, the stages not run named in it;
 * the exit status. */
static int run_stages(verify_args *a, mi_ckb *c, json_t *t1, vf_stage_opts *o, mi_options *popts, json_t *rep) {
  json_t *stages = json_object_get(rep, "stages");
  json_t *s1 = vf_stage1(o);
  char title[300];
  snprintf(title, sizeof title, "stage 1 (operator units%s%.200s)", o->pack_path ? " of the kernel pack " : "",
           o->pack_path ? json_string_value(json_object_get(o->pack_manifest, "name")) : "");
  add_stage(stages, s1, t1, title, 1, a->verbose);
  tally t = {!strcmp(json_string_value(json_object_get(s1, "verdict")), "PASS"),
             (int)json_integer_value(json_object_get(s1, "passed")), (int)json_integer_value(json_object_get(s1, "failed")), 0};
  if (a->stage >= 2) use_exact_path(a, o, popts, rep);
  run_stages_2_3(a, c, o, stages, &t);
  run_stages_4_6(a, c, o, stages, &t);
  /* The stages not run, so a report says what it does not cover. */
  json_t *later = json_array();
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "test") || json_integer_value(json_object_get(e->json, "stage")) <= a->stage) continue;
    json_array_append_new(later, json_pack("{s:O, s:s, s:O}", "stage", json_object_get(e->json, "stage"),
                                           "test_contract", e->id, "status", json_object_get(e->json, "status")));
  }
  json_object_set_new(rep, "not_run", later);
  json_object_set_new(rep, "verdict", json_string(t.pass ? "PASS" : "FAIL"));
  fprintf(stderr, "mi-verify: %s: %d passed, %d failed%s (seed %llu)\n", t.pass ? "PASS" : "FAIL", t.passed,
          t.failed, t.skipped ? ", later stages skipped" : "", (unsigned long long)a->seed);
  return t.pass ? 0 : 1;
}

/* --contract-patches: the repairs the engine was composed with, applied to
 * the model contract in memory, so stages 2 and 5 interpret the contract
 * the engine claims to implement (units are forked: they see it too). -1
 * to go on, else the exit status. */
static int apply_patches(verify_args *a, mi_ckb *c) {
  if (!a->patches) return -1;
  json_error_t je;
  json_t *arr = json_load_file(a->patches, 0, &je);
  const mi_ckb_entry *me = a->model_id ? mi_ckb_find(c, a->model_id) : NULL;
  if (!json_is_array(arr)) {
    fprintf(stderr, "mi-verify: %s: %s\n", a->patches, arr ? "not a JSON array of patches" : je.text);
    json_decref(arr);
    return 2;
  }
  if (!me) {
    fprintf(stderr, "mi-verify: %s: no model contract to patch (give --model or --model-contract)\n", a->patches);
    json_decref(arr);
    return 2;
  }
  size_t i;
  json_t *p;
  json_array_foreach(arr, i, p) if (mi_ckb_apply_patch((json_t *)me->json, p) < 0) {
    fprintf(stderr, "mi-verify: %s: patch %zu lacks operator, arg or value\n", a->patches, i);
    json_decref(arr);
    return 2;
  }
  fprintf(stderr, "mi-verify: %s: %zu patch%s applied from %s\n", me->id, json_array_size(arr),
          json_array_size(arr) == 1 ? "" : "es", a->patches);
  json_decref(arr);
  return -1;
}

int main(int argc, char **argv) {
  static verify_args a; /* large buffers: off the stack */
  mi_out_init();
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  if (a.rank_dir) { /* a rank of stage 1's collective unit: no CKB, no report; the unit judges */
    mi_options ro = {a.kv, a.nkv};
    if (!a.have_seed || a.tp < 2) {
      fprintf(stderr, "mi-verify: --collective-rank needs --seed and --tp N > 1 (mi-verify starts it itself)\n");
      return 2;
    }
    return vf_collective_rank(a.plugin, &ro, a.seed, a.tp, a.rank_dir);
  }
  mi_ckb *c = open_ckb(&a, argv[0]);
  if (!c) return 2;
  if ((rc = resolve_inputs(&a, c)) >= 0 || (rc = apply_patches(&a, c)) >= 0) {
    mi_ckb_close(c);
    return rc;
  }
  json_t *t1 = find_stage_contract(c, 1, "operator_units");
  mi_options popts = {a.kv, a.nkv};
  vf_stage_opts o;
  stage_options(&a, c, t1, &popts, &o);
  if (a.pack) {
    char perr[4600];
    o.pack_path = a.pack;
    if (!(o.pack_manifest = vf_pack_manifest_load(a.pack, perr, sizeof perr))) {
      fprintf(stderr, "mi-verify: %s\n", perr);
      json_decref(o.operators);
      mi_ckb_close(c);
      return 2;
    }
  }
  json_t *rep = json_pack("{s:s, s:i, s:I, s:{s:s}, s:{s:f, s:f, s:I}}", "tool", "mi-verify",
                          "format", 1, "seed", (json_int_t)a.seed, "ckb", "dir", a.ckb_dir, "limits",
                          "timeout_s", o.lim.timeout_s, "cpu_s", o.lim.cpu_s, "mem_mb",
                          (json_int_t)o.lim.mem_mb);
  /* Which layers confine each unit here (cgroups, namespaces, ...). */
  fprintf(stderr, "mi-verify: containment: %s\n", vf_containment());
  json_object_set_new(rep, "containment", json_string(vf_containment()));
  json_t *probe = vf_probe_plugin(&o);
  json_object_set_new(probe, "path", json_string(a.plugin));
  json_object_set(rep, "plugin", probe);
  json_object_set_new(rep, "stages", json_array());
  mi_ckb_entry vendor;
  json_t *vj = a.platform_contract ? load_vendor_contract(a.platform_contract, c, &vendor) : NULL;
  if (a.platform_contract && !vj) rc = 2;
  else if ((rc = bind_platform(&a, c, probe, vj ? &vendor : NULL, rep, &o)) < 0 && (rc = probe_pack(&o, rep)) < 0)
    rc = run_stages(&a, c, t1, &o, &popts, rep);
  if (a.report) { /* whole or not at all: temp file, checked writes, rename */
    char *js = json_dumps(rep, JSON_INDENT(2));
    char werr[1200] = "out of memory";
    if (!js || mi_out_write_file(a.report, js, strlen(js), werr, sizeof werr) != 0) {
      fprintf(stderr, "mi-verify: %s: cannot write the report: %s\n", a.report, werr);
      if (rc == 0) rc = 2;
    }
    free(js);
  }
  json_decref(probe);
  json_decref(rep);
  json_decref(vj);
  json_decref(o.operators);
  json_decref(o.pack_manifest);
  mi_ckb_close(c);
  return mi_out_finish("mi-verify", rc);
}
