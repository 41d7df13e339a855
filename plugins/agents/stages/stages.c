/* verifier.stages: builds an engine's source against the SDK headers and
 * holds the library to the staged test contracts, keeping raw output as
 * evidence (artifacts):
 *   build  cc -O2 -fPIC -shared against sdk/include, nothing else linked but libm
 *   1-6    mi-verify --model-plugin ENGINE.so --stage 6 (stage 4 against the
 *          llama.cpp golden of these weights when there is one, N/A otherwise;
 *          stage 5 against the float64 model); each unit in mi-verify's
 *          limited child processes
 *   4d     the engine run exactly as a deployment runs it -- mi-run
 *          --plugin-dir with the engine directory's plugins.conf, no
 *          verifier process around it -- on prompts drawn from the seed
 *          (a 1-token prefill, odd -b 7 chunks, then several full chunks and
 *          decode up to the context the engine declares, and one past it,
 *          which it must refuse in a line), greedy tokens and top-5 logprobs
 *          against the model contract's reference plugin run the same way
 *   6d     decode cost against prefix length (the default gate)
 *   6p     the --perf gates, by mi-bench on the deployed engine
 * Task: {"source", "engine_name", "model_dir", "seed", "threads", "constraints"
 *        {"platform", "tp", "perf_gates"}, "tools": {"sdk_include",
 *        "platform_plugin", "mi_verify", "mi_run", "mi_bench", "goldens",
 *        "reference_plugin", "reference_name"}}
 * Result: {"status":"ok", "verdict": "PASS"|"FAIL", "library": SHA,
 *          "stages": [{stage, name, verdict, message, test_contract,
 *          evidence}], "failed_stage", "failed_test_contract", "report",
 *          "build_command", "perf_gates": [{gate, measured, figures, verdict}]} */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/runtime/model_input.h"
#include "core/ckb/ckb.h"
#include "../common.h"
#include "core/gen/gen.h"
#include "core/util/spawn.h"
#include "mi/agent.h"
#include "mi/plugin.h"

static void log_line(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(const char *log, const char *fmt, ...) {
  FILE *f = fopen(log, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

static json_t *stage_obj(const char *stage, const char *name, const char *verdict, const char *msg, const char *tc,
                         const char *ev) {
  json_t *s = json_pack("{s:s, s:s, s:s}", "stage", stage, "name", name, "verdict", verdict);
  if (msg) json_object_set_new(s, "message", json_string(msg));
  if (tc) json_object_set_new(s, "test_contract", json_string(tc));
  if (ev) json_object_set_new(s, "evidence", json_string(ev));
  return s;
}

/* the prompts of the deployment check, drawn from the seed: `count` words
 * (0: the seeded default, 5-21 words) */
static void make_prompt(uint64_t seed, int k, int count, char *buf, size_t n) {
  static const char *const words[] = {"river", "quantum", "bread", "silent", "copper", "north", "violin", "seven",
                                      "garden", "ledger", "orbit", "maple", "thunder", "paper", "glass", "harbor",
                                      "falcon", "winter", "logic", "amber", "你好", "世界", "λ", "café"};
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull + (uint64_t)k * 0x9e3779b97f4a7c15ull;
  if (count <= 0) count = 5 + (int)(x % 17);
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < count && o + 16 < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? " " : "", words[x % (sizeof words / sizeof words[0])]);
  }
}

/* the JSON object on the first line of `path` that has `key`, or NULL */
static json_t *json_line_with(const char *path, const char *key) {
  char *txt = ag_read_file(path, NULL), *save = NULL;
  json_t *hit = NULL;
  for (char *l = txt ? strtok_r(txt, "\n", &save) : NULL; l && !hit; l = strtok_r(NULL, "\n", &save)) {
    json_t *j = json_loads(l, 0, NULL);
    if (json_object_get(j, key)) hit = j;
    else json_decref(j);
  }
  free(txt);
  return hit;
}

/* compares two mi-run --json outputs: tokens identical, top logprobs within tol */
static int compare_json_runs(const char *a, const char *b, double tol, char *msg, size_t n, double *worst) {
  char *x = ag_read_file(a, NULL), *y = ag_read_file(b, NULL);
  int rc = 0, steps = 0;
  *worst = 0;
  if (!x || !y) {
    snprintf(msg, n, "no output to compare");
    free(x), free(y);
    return -1;
  }
  char *sx, *sy;
  char *lx = strtok_r(x, "\n", &sx), *ly = strtok_r(y, "\n", &sy);
  for (; lx && ly; lx = strtok_r(NULL, "\n", &sx), ly = strtok_r(NULL, "\n", &sy)) {
    json_t *jx = json_loads(lx, 0, NULL), *jy = json_loads(ly, 0, NULL);
    if (!jx || !jy) {
      snprintf(msg, n, "unparseable output line");
      rc = -1;
    } else if (json_object_get(jx, "prompt_ids")) {
      if (!json_equal(json_object_get(jx, "prompt_ids"), json_object_get(jy, "prompt_ids"))) {
        snprintf(msg, n, "the prompt's token ids differ");
        rc = -1;
      }
    } else if (json_object_get(jx, "token_id")) {
      steps++;
      if (json_integer_value(json_object_get(jx, "token_id")) != json_integer_value(json_object_get(jy, "token_id"))) {
        snprintf(msg, n, "step %d: the engine chose token %lld, the reference %lld", steps - 1,
                 (long long)json_integer_value(json_object_get(jx, "token_id")), (long long)json_integer_value(json_object_get(jy, "token_id")));
        rc = -1;
      }
      json_t *tx = json_object_get(jx, "top_logprobs"), *ty = json_object_get(jy, "top_logprobs");
      for (size_t i = 0; rc == 0 && i < json_array_size(tx) && i < json_array_size(ty); i++) {
        double d = fabs(json_number_value(json_array_get(json_array_get(tx, i), 1)) - json_number_value(json_array_get(json_array_get(ty, i), 1)));
        if (d > *worst) *worst = d;
        if (json_integer_value(json_array_get(json_array_get(tx, i), 0)) != json_integer_value(json_array_get(json_array_get(ty, i), 0)) && d > tol)
          *worst = fmax(*worst, 1.0);
      }
      if (rc == 0 && *worst > tol) {
        snprintf(msg, n, "step %d: top logprobs differ by %.3g (tolerance %.g)", steps - 1, *worst, tol);
        rc = -1;
      }
    }
    json_decref(jx), json_decref(jy);
    if (rc) break;
  }
  if (rc == 0 && (lx || ly)) {
    snprintf(msg, n, "the runs have different lengths");
    rc = -1;
  }
  if (rc == 0) snprintf(msg, n, "%d steps identical, max |logprob diff| %.2e", steps, *worst);
  free(x), free(y);
  return rc;
}

/* One verification of one candidate: the task's fields, the candidate's
 * private build folder, and the stages found so far. */
typedef struct stg {
  json_t *task;
  const char *sha, *name, *model, *sdk, *plat, *mv, *mr, *gold, *refplug, *refname, *bench, *kvt;
  const char *pack, *pack_name; /* tools.pack: the kernel pack of the engine's pack operators, or NULL */
  const char *pname;         /* the platform plugin's name for plugins.conf */
  const char *contract_plat; /* the platform contract (constraints.platform) */
  const mi_agent_task *t;
  uint64_t seed;
  int threads, tp;
  char tp_s[16], np_s[16];
  char mpirun[4096]; /* the MPI launcher at TP > 1 (mi_find_mpirun, as mi-verify finds it) */
  mi_bb *bb;
  char dir[4400], p[4600], so[4600], log[4600], dep[4600], ref[4600];
  char ev[65]; /* the evidence artifact of the stage run last */
  json_t *stages, *perf_res;
  char failed_stage[16], failed_tc[128], lib_sha[65], rep_sha[65];
} stg;

/* The task's fields into s; -1 with err when it lacks one. */
/* mi-gen's --verify-timeout (seconds per unit), or 0 when not given. */
static double unit_timeout(const stg *s) {
  return json_number_value(json_object_get(s->task, "unit_timeout"));
}

static int read_task(stg *s, const mi_agent_task *t, char *err, size_t err_len) {
  json_t *task = s->task = json_loads(t->task_json, 0, NULL);
  s->t = t;
  s->sha = json_string_value(json_object_get(task, "source"));
  s->name = json_string_value(json_object_get(task, "engine_name"));
  s->model = json_string_value(json_object_get(task, "model_dir"));
  json_t *tools = json_object_get(task, "tools");
  s->sdk = json_string_value(json_object_get(tools, "sdk_include"));
  s->plat = json_string_value(json_object_get(tools, "platform_plugin"));
  s->mv = json_string_value(json_object_get(tools, "mi_verify"));
  s->mr = json_string_value(json_object_get(tools, "mi_run"));
  s->gold = json_string_value(json_object_get(tools, "goldens"));
  s->refplug = json_string_value(json_object_get(tools, "reference_plugin"));
  s->refname = json_string_value(json_object_get(tools, "reference_name"));
  s->bench = json_string_value(json_object_get(tools, "mi_bench"));
  s->pack = json_string_value(json_object_get(tools, "pack"));
  s->pack_name = json_string_value(json_object_get(tools, "pack_name"));
  s->pname = json_string_value(json_object_get(json_object_get(task, "constraints"), "platform"));
  /* mi-gen --platform-plugin: the plugin's own name for plugins.conf, and the
   * contract (constraints.platform) named to mi-verify, which says and checks
   * a stand-in (the GPU emulator for a GPU platform's contract) */
  s->contract_plat = s->pname;
  json_t *pplug = json_object_get(json_object_get(task, "constraints"), "platform_plugin");
  if (json_string_value(json_object_get(pplug, "name"))) s->pname = json_string_value(json_object_get(pplug, "name"));
  s->kvt = json_string_value(json_object_get(json_object_get(task, "constraints"), "kv_type")) ?: "f32";
  s->seed = (uint64_t)json_integer_value(json_object_get(task, "seed"));
  s->threads = (int)json_integer_value(json_object_get(task, "threads"));
  s->tp = (int)json_integer_value(json_object_get(json_object_get(task, "constraints"), "tp"));
  if (s->tp < 1) s->tp = 1;
  snprintf(s->tp_s, sizeof s->tp_s, "%d", s->tp);
  snprintf(s->np_s, sizeof s->np_s, "%d", s->tp);
  char mpb[sizeof s->mpirun];
  const char *mp = mi_find_mpirun(mpb, sizeof mpb); /* none: "mpirun", whose spawn then says it cannot run */
  snprintf(s->mpirun, sizeof s->mpirun, "%s", mp ? mp : "mpirun");
  if (s->tp > 1) { /* OpenMPI under a root container, as tests/tp sets it */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  }
  if (!s->sha || !s->name || !s->model || !s->sdk || !s->plat || !s->mv || !s->mr || !s->refplug || !s->refname || !s->pname) {
    snprintf(err, err_len, "stages: the task lacks source, engine_name, model_dir, constraints.platform or tools (reference_plugin)");
    return -1;
  }
  return 0;
}

/* The source artifact into a private build folder per candidate and seed;
 * -1 with err when the blackboard or the artifact is not there. */
static int open_candidate(stg *s, char *err, size_t err_len) {
  s->bb = mi_bb_open(s->t->run_dir, 0, err, err_len);
  char src[4400];
  if (!s->bb || mi_bb_artifact(s->bb, s->sha, "c", src, sizeof src) != 0) {
    if (s->bb) snprintf(err, err_len, "stages: the source artifact is missing or altered");
    return -1;
  }
  snprintf(s->dir, sizeof s->dir, "%s/verify", s->t->run_dir);
  mkdir(s->dir, 0755);
  snprintf(s->dir, sizeof s->dir, "%s/verify/%.16s-%llu", s->t->run_dir, s->sha, (unsigned long long)s->seed);
  mkdir(s->dir, 0755);
  snprintf(s->p, sizeof s->p, "%s/engine.c", s->dir);
  char *text = ag_read_file(src, NULL);
  FILE *f = fopen(s->p, "w");
  if (f && text) fputs(text, f);
  if (f) fclose(f);
  free(text);
  snprintf(s->so, sizeof s->so, "%s/libmi-engine-%s.so", s->dir, s->name);
  return 0;
}

/* Records the stage that failed first (and its test contract); returns -1. */
static int failed(stg *s, const char *stage, const char *tc) {
  snprintf(s->failed_stage, sizeof s->failed_stage, "%s", stage);
  if (tc) snprintf(s->failed_tc, sizeof s->failed_tc, "%s", tc);
  return -1;
}

/* argv run under `mpirun -np TP`, one rank per process, into m (room for
 * argv's entries and 11 more) */
static void under_mpirun(const stg *s, char **m, char *const *argv) {
  int q = 0;
  m[q++] = (char *)s->mpirun, m[q++] = "-np", m[q++] = (char *)s->np_s, m[q++] = "--oversubscribe", m[q++] = "--bind-to",
  m[q++] = "none";
  for (int z = 0; argv[z]; z++) m[q++] = argv[z];
  m[q++] = "--tp", m[q++] = (char *)s->tp_s, m[q++] = "-t", m[q++] = "1", m[q] = NULL;
}

/* build: cc -O2 -fPIC -shared against the SDK headers, nothing but libm */
static int stage_build(stg *s) {
  snprintf(s->log, sizeof s->log, "%s/build.log", s->dir);
  unlink(s->log);
  char *cc_argv[] = {"/usr/bin/cc", "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-I", (char *)s->sdk,
                     s->p, "-o", s->so, "-lm", NULL};
  log_line(s->log, "$ cc -std=gnu11 -O2 -fPIC -shared -fvisibility=hidden -Wall -I %s %s -o %s -lm\n", s->sdk, s->p, s->so);
  int brc = mi_spawn_wait(cc_argv, s->log, NULL, 300);
  mi_bb_put_file(s->bb, s->log, "txt", s->ev);
  if (brc != 0) {
    json_array_append_new(s->stages, stage_obj("build", "build against the SDK", "FAIL", "the compiler refused the source", NULL, s->ev));
    return failed(s, "build", NULL);
  }
  json_array_append_new(s->stages, stage_obj("build", "build against the SDK", "PASS", NULL, NULL, s->ev));
  mi_bb_put_file(s->bb, s->so, "so", s->lib_sha);
  return 0;
}

/* A stage of mi-verify's report as a stage of ours: its message, else the
 * first failing unit's message, else the units' summaries. */
static void add_report_stage(stg *s, json_t *rs) {
  char st[16], tc[128] = "";
  snprintf(st, sizeof st, "%lld", (long long)json_integer_value(json_object_get(rs, "stage")));
  const char *tcs = json_string_value(json_object_get(rs, "test_contract"));
  if (tcs) snprintf(tc, sizeof tc, "%.*s", (int)strcspn(tcs, "@"), tcs);
  const char *v = json_string_value(json_object_get(rs, "verdict"));
  const char *msg = json_string_value(json_object_get(rs, "message"));
  char buf[600] = "";
  if (!msg) {
    size_t k;
    json_t *u;
    json_array_foreach(json_object_get(rs, "units"), k, u) {
      const char *um = json_string_value(json_object_get(u, "message")) ?: json_string_value(json_object_get(u, "summary"));
      /* a unit that repeats another's message (a golden's, then its failing case's) once */
      if (um && !strstr(buf, um) && strlen(buf) + strlen(um) + 4 < sizeof buf) {
        if (strcmp(json_string_value(json_object_get(u, "verdict")) ?: "", "PASS") || !buf[0])
          snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", buf[0] ? "; " : "", um);
      }
    }
    msg = buf[0] ? buf : NULL;
  }
  json_array_append_new(s->stages, stage_obj(st, json_string_value(json_object_get(rs, "name")) ?: "?", v ?: "?", msg, tc[0] ? tc : NULL, s->ev));
  if (v && strcmp(v, "PASS") && strcmp(v, "N/A") && !s->failed_stage[0]) failed(s, st, tc);
}

/* stages 1-6: mi-verify on the library, each stage of its report ours */
static int stage_mi_verify(stg *s) {
  snprintf(s->log, sizeof s->log, "%s/mi-verify.log", s->dir);
  unlink(s->log);
  char rep[4600], seed_s[32], thr[32], gopt[4200];
  snprintf(rep, sizeof rep, "%s/report.json", s->dir);
  snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)s->seed);
  snprintf(thr, sizeof thr, "threads=%d", s->threads);
  snprintf(gopt, sizeof gopt, "%s", s->gold ? s->gold : "/nonexistent");
  char *mv_argv[] = {(char *)s->mv, "--platform-plugin", (char *)s->plat, "--model-plugin", s->so, "--model", (char *)s->model, "--stage", "6",
                     "--goldens", gopt, "--goldens-optional", "--ckb", (char *)s->t->ckb_dir, "--seed", seed_s, "--report", rep,
                     "-o", thr, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  char tmo[32];
  double ut = unit_timeout(s);
  int na_v = 20;
  if (ut > 0) {
    snprintf(tmo, sizeof tmo, "%g", ut);
    mv_argv[na_v++] = "--timeout";
    mv_argv[na_v++] = tmo;
  }
  if (s->contract_plat && strcmp(s->contract_plat, s->pname)) {
    mv_argv[na_v++] = "--platform";
    mv_argv[na_v++] = (char *)s->contract_plat;
  }
  char pf[4700];
  json_t *patches = json_object_get(s->task, "patches");
  if (json_array_size(patches)) { /* the repairs the engine was composed with: the contract stage 5 interprets */
    snprintf(pf, sizeof pf, "%s/contract-patches.json", s->dir);
    if (json_dump_file(patches, pf, 0) == 0) mv_argv[na_v++] = "--contract-patches", mv_argv[na_v++] = pf;
  }
  if (s->pack) { /* the engine's pack operators: stage 1 holds the pack's kernels too, stages 2-6 load it */
    mv_argv[na_v++] = "--pack";
    mv_argv[na_v++] = (char *)s->pack;
  }
  if (strcmp(s->kvt, "f32")) { /* the KV type asked: stages 4-5 compare at its tolerance */
    mv_argv[na_v++] = "--kv-type";
    mv_argv[na_v++] = (char *)s->kvt;
  }
  if (s->tp > 1) { /* stage 1 holds the platform's collectives across the ranks too (test.stage1_collectives) */
    mv_argv[na_v++] = "--tp";
    mv_argv[na_v++] = s->tp_s;
  }
  int vrc = mi_spawn_wait(mv_argv, s->log, NULL, ut > 0 ? (int)(20 * ut) : 1500);
  mi_bb_put_file(s->bb, s->log, "txt", s->ev);
  json_t *r = json_load_file(rep, 0, NULL);
  if (r) mi_bb_put_file(s->bb, rep, "json", s->rep_sha);
  size_t i;
  json_t *rs;
  json_array_foreach(json_object_get(r, "stages"), i, rs) add_report_stage(s, rs);
  json_decref(r);
  if (vrc != 0 && !s->failed_stage[0]) {
    failed(s, "mi-verify", NULL);
    json_array_append_new(s->stages, stage_obj("1-6", "mi-verify", "FAIL", "mi-verify failed without a report", NULL, s->ev));
  }
  return s->failed_stage[0] ? -1 : 0;
}

/* The deployment run's progress over its cases. */
typedef struct deploy {
  long long max_pos, reach; /* the context the engine declares; the positions run */
  int ok;
  char msg[1024];
  double worst_all, words_per_tok;
  long long long_prompt, long_end;
  int odd_words; /* case 1's prompt, capped to fit a short declared context */
  int capped_by_user; /* reach from mi-gen --deploy-reach */
  int32_t *one_ids;   /* case 0's prompt as the model's tokenizer encodes it */
  size_t n_one;
} deploy;

/* The cases of the deployment run: the shortest prompt (a digit, after the
 * BOS and space a tokenizer may put first), one token a prefill chunk; odd chunks of 7 at
 * unaligned positions; several full chunks up to near the declared context,
 * then decode until it is full (decode itself is 1-token chunks at every
 * position). */
static const struct {
  int words, n;
  const char *batch;
  const char *what;
} deploy_cases[] = {{1, 12, "1", "shortest prompt, -b 1"}, {400, 12, "7", "odd chunks, -b 7"}, {-1, 0, NULL, "to the context"}};
enum { N_CASES = sizeof deploy_cases / sizeof deploy_cases[0], K_ODD = 1, K_LONG = 2 };

/* deploy/ and reference/: plugins.conf for the engine and for the reference
 * model plugin, on the same platform plugin */
static void write_deploy_confs(stg *s) {
  char conf[4700];
  snprintf(s->dep, sizeof s->dep, "%s/deploy", s->dir);
  snprintf(s->ref, sizeof s->ref, "%s/reference", s->dir);
  mkdir(s->dep, 0755);
  mkdir(s->ref, 0755);
  snprintf(conf, sizeof conf, "%s/plugins.conf", s->dep);
  FILE *f = fopen(conf, "w");
  if (f) {
    fprintf(f, "platform %s %s required threads=%d\nengine %s %s required\n", s->pname, s->plat, s->threads, s->name, s->so);
    if (s->pack) fprintf(f, "kernels %s %s required\n", s->pack_name ? s->pack_name : "pack", s->pack);
    fclose(f);
  }
  snprintf(conf, sizeof conf, "%s/plugins.conf", s->ref);
  f = *s->refplug ? fopen(conf, "w") : NULL; /* no reference plugin: nothing to run beside the engine */
  if (f) {
    fprintf(f, "platform %s %s required threads=%d\nmodel %s %s required\n", s->pname, s->plat, s->threads, s->refname, s->refplug);
    fclose(f);
  }
}

/* The bytes of the model's weights file: model.safetensors, or the GGUF
 * file the model is (0 when neither: a sharded checkpoint). */
static double weight_file_bytes(const char *model) {
  char p[4700];
  struct stat st;
  if (mi_model_input_is_gguf(model)) snprintf(p, sizeof p, "%s", model);
  else snprintf(p, sizeof p, "%s/model.safetensors", model);
  return stat(p, &st) == 0 ? (double)st.st_size : 0;
}

/* The context the engine declares (its MAX_POSITION_EMBEDDINGS is
 * config.json's, which review holds it to), and a cap from the cost of one
 * prefill that long (~2 FLOP per weight per token; 1e12 FLOP is seconds on a
 * tiny shape and ~1000 positions of the 0.6B one). */
static void deploy_reach(const stg *s, deploy *d) {
  char e2[600];
  json_t *mcfg = mi_model_input_config(s->model, 0, e2, sizeof e2);
  /* a wrapper layout keeps it in the wrapped config (text_config) */
  d->max_pos = (long long)json_integer_value(mi_ckb_config_value(NULL, mcfg, "max_position_embeddings", 23));
  json_decref(mcfg);
  const double wb = weight_file_bytes(s->model);
  double params = wb > 0 ? wb / 2 : 1e9; /* bf16 bytes (a quantized GGUF: fewer); sharded: assume 1e9 */
  long long cap = (long long)(1e12 / (2 * params));
  d->reach = d->max_pos;
  if (cap > 32768) cap = 32768;
  if (d->reach > cap) d->reach = cap;
  /* mi-gen --deploy-reach: the user's cap */
  const json_int_t ur = json_integer_value(json_object_get(s->task, "deploy_reach"));
  if (ur > 0 && d->reach > ur) d->reach = ur, d->capped_by_user = 1;
}

/* What case k's run showed beyond equal tokens: the prompt's length, and
 * for the long case that decode went on until the context was full. */
static void check_case_lengths(const stg *s, deploy *d, int k, int words, const char *oa) {
  json_t *pl = json_line_with(oa, "prompt_ids"), *st = json_line_with(oa, "stats");
  long long np = (long long)json_array_size(json_object_get(pl, "prompt_ids"));
  long long ng = (long long)json_integer_value(json_object_get(json_object_get(st, "stats"), "n_gen"));
  if (k == K_ODD && np > 0) d->words_per_tok = (double)words / (double)np;
  /* the digit as the tokenizer encodes a prompt: one token, after the BOS
   * (and the space) a tokenizer may put first */
  int same = np == (long long)d->n_one;
  for (long long i = 0; same && i < np; i++)
    same = json_integer_value(json_array_get(json_object_get(pl, "prompt_ids"), (size_t)i)) == d->one_ids[i];
  if (d->ok && k == 0 && (!same || np > 3)) {
    snprintf(d->msg, sizeof d->msg, "case 0: the 1-digit prompt ran as %lld tokens, not the tokenizer's %zu%s", np, d->n_one,
             same ? " (more than a BOS, a space and the digit)" : "");
    d->ok = 0;
  }
  if (d->ok && k == K_ODD && !(d->words_per_tok > 0)) {
    snprintf(d->msg, sizeof d->msg, "case 1: no prompt_ids in the engine's output");
    d->ok = 0;
  }
  if (d->ok && k == K_LONG) { /* decoded until the context was full */
    d->long_prompt = np, d->long_end = np + ng - 1;
    const char *why = json_string_value(json_object_get(json_object_get(st, "stats"), "stop_reason"));
    if (!why || strcmp(why, "context full") || d->long_end < d->reach) {
      snprintf(d->msg, sizeof d->msg, "case 2: the run ended at position %lld (%s), not at the context of %lld", d->long_end,
               why ? why : "no stats", d->reach);
      d->ok = 0;
    }
  }
  json_decref(pl), json_decref(st);
}

/* The long case's prompt within reach - 40 tokens as the model's tokenizer
 * encodes it: case 1's tokens per word is an estimate, and this prompt's
 * mix of words (CJK, accents) can make it overshoot the context, which
 * mi-run then refuses (a seed-dependent failure of a correct engine).
 * Fewer words keep the same first words, so the count only falls. */
static void fit_long_prompt(const stg *s, const deploy *d, int *words, char *prompt) {
  for (int tries = 0; tries < 8 && *words > 1; tries++) {
    int32_t *ids = NULL;
    size_t nt = 0;
    char err[600];
    if (mi_model_input_encode_prompt(s->model, prompt, &ids, &nt, err, sizeof err) != 0) return; /* mi-run will say */
    free(ids);
    if ((long long)nt <= d->reach - 40) return;
    const int w = (int)((double)*words * (double)(d->reach - 40) / (double)nt * 0.97);
    *words = w < 1 ? 1 : w < *words ? w : *words - 1;
    make_prompt(s->seed, K_LONG, *words, prompt, 1 << 20);
  }
}

/* Case k of the deployment run: the engine and the reference plugin on the
 * same prompt, greedy, tokens and top logprobs compared. */
static void deploy_case(stg *s, deploy *d, int k, char *prompt) {
  char oa[4700], ob[4700], msg[400], n_s[32], c_s[32];
  int words = deploy_cases[k].words;
  if (words < 0) { /* sized from the odd case's tokens per word to end ~40 positions short of `reach` */
    words = (int)((double)(d->reach - 40) * d->words_per_tok * 0.97);
    if (words < 1) words = 1;
  }
  if (k == K_ODD) { /* within the context the engine declares (an emulator's scaled checkpoint: 96), at up to 3 tokens a word */
    long long cap = (d->reach - deploy_cases[k].n - 8) / 3;
    if (words > cap) words = cap < 1 ? 1 : (int)cap;
    d->odd_words = words;
  }
  make_prompt(s->seed, k, words, prompt, 1 << 20);
  if (k == K_LONG) fit_long_prompt(s, d, &words, prompt);
  if (k == 0) { /* a digit: one token in a BPE that splits digits (after the BOS and space it may put first) */
    snprintf(prompt, 4, "%d", (int)(s->seed % 10));
    if (mi_model_input_encode_prompt(s->model, prompt, &d->one_ids, &d->n_one, d->msg, sizeof d->msg) != 0) {
      d->ok = 0;
      return;
    }
  }
  char pf[4700]; /* a file: a long prompt would pass the kernel's limit on one argument */
  snprintf(pf, sizeof pf, "%s/prompt-%d.txt", s->dep, k);
  FILE *pff = fopen(pf, "w");
  if (pff) fputs(prompt, pff), fclose(pff);
  snprintf(oa, sizeof oa, "%s/engine-%d.jsonl", s->dep, k);
  snprintf(ob, sizeof ob, "%s/reference-%d.jsonl", s->ref, k);
  snprintf(n_s, sizeof n_s, "%d", deploy_cases[k].n ? deploy_cases[k].n : (int)d->reach);
  snprintf(c_s, sizeof c_s, "%lld", deploy_cases[k].n ? 2048 < d->max_pos ? 2048 : d->max_pos : d->reach);
  const char *a_argv[40] = {s->mr, "--plugin-dir", s->dep, "-m", s->model, "-f", pf, "-n", n_s, "--temp", "0",
                            "--json", "--top-logprobs", "5", "--ignore-eos", "--stats", "-c", c_s};
  int na = 18;
  if (deploy_cases[k].batch) a_argv[na++] = "-b", a_argv[na++] = deploy_cases[k].batch;
  /* a half-precision cache: the reference plugin runs with the same one
   * (same kernels, same roundings); the engine, which has it baked in,
   * is asked for it too and must accept */
  if (strcmp(s->kvt, "f32")) a_argv[na++] = "--kv-type", a_argv[na++] = s->kvt;
  a_argv[na] = NULL;
  char *m_argv[48];
  if (s->tp > 1) under_mpirun(s, m_argv, (char *const *)a_argv); /* the engine as a TP deployment runs it */
  log_line(s->log, "$ mi-run --plugin-dir %s -m %s -p <prompt %d: %d words, %zu chars> -n %s --temp 0 --json --top-logprobs 5 --ignore-eos --stats -c %s%s%s\n",
           s->dep, s->model, k, words, strlen(prompt), n_s, c_s, deploy_cases[k].batch ? " -b " : "", deploy_cases[k].batch ? deploy_cases[k].batch : "");
  /* 300 s a run, or mi-gen's --verify-timeout where longer (a slow platform:
   * the emulator decodes the long case at well under 1 token/s) */
  const double ut = unit_timeout(s);
  const int tmo = ut > 300 ? (int)ut : 300;
  int ra = mi_spawn_wait(s->tp > 1 ? m_argv : (char *const *)a_argv, s->log, oa, tmo);
  a_argv[2] = s->ref;
  /* no reference plugin: the run as deployed is checked (exit, lengths, the
   * context) and its tokens are stage 4's to hold to llama.cpp. (The engine
   * against itself prefilled token by token is no oracle: the matmul and
   * GEMV paths round differently, and a long greedy run drifts apart.) */
  int rb = *s->refplug ? mi_spawn_wait((char *const *)a_argv, s->log, ob, tmo) : 0;
  double worst = 0;
  snprintf(msg, sizeof msg, "ran as deployed");
  if (ra != 0 || rb != 0) {
    snprintf(d->msg, sizeof d->msg, "case %d (%s): mi-run exited %d (engine) / %d (reference)", k, deploy_cases[k].what, ra, rb);
    d->ok = 0;
  } else if (*s->refplug && compare_json_runs(oa, ob, 1e-3, msg, sizeof msg, &worst) != 0) {
    snprintf(d->msg, sizeof d->msg, "case %d (%s): %s", k, deploy_cases[k].what, msg);
    d->ok = 0;
  }
  check_case_lengths(s, d, k, words, oa);
  log_line(s->log, "case %d (%s): %s\n", k, deploy_cases[k].what, d->ok ? msg : d->msg);
  if (worst > d->worst_all) d->worst_all = worst;
}

/* One past the declared context: the engine refuses in one line. */
static void refuse_past_context(stg *s, deploy *d) {
  char oa[4700], c_s[32], e_log[4700];
  snprintf(oa, sizeof oa, "%s/engine-past.jsonl", s->dep);
  snprintf(e_log, sizeof e_log, "%s/engine-past.err", s->dep);
  snprintf(c_s, sizeof c_s, "%lld", d->max_pos + 1);
  char *p_argv[48] = {(char *)s->mr, "--plugin-dir", s->dep, "-m", (char *)s->model, "-p", "river", "-n", "4", "-c", c_s, NULL};
  char *pm_argv[48];
  if (s->tp > 1) under_mpirun(s, pm_argv, p_argv);
  unlink(e_log);
  int rp = mi_spawn_wait(s->tp > 1 ? pm_argv : p_argv, e_log, oa, 120);
  char *etxt = ag_read_file(e_log, NULL);
  int lines = 0;
  for (char *q = etxt; q && *q; q++) lines += *q == '\n';
  log_line(s->log, "$ mi-run --plugin-dir %s -m %s -p river -n 4 -c %s\nexit %d, stderr: %s", s->dep, s->model, c_s, rp, etxt ? etxt : "(none)\n");
  if (rp <= 0 || rp == 127 || !etxt || !strstr(etxt, "context") || (s->tp == 1 && lines != 1)) {
    snprintf(d->msg, sizeof d->msg, "-c %s (one past max_position_embeddings): the engine %s", c_s,
             rp == 0 ? "ran instead of refusing" : rp < 0 ? "died on a signal instead of refusing" : "did not refuse in one line naming the context");
    d->ok = 0;
  }
  free(etxt);
}

/* A reference plugin that cannot be the engine's twin on this model: a
 * half-precision cache asked of one that runs only an f32 one, or weights
 * of a type it does not read (the hand-written qwen35 reads bf16, f16 and
 * f32; a Q8_0 file is the engine's alone). It refuses in a clean exit, and
 * the run goes on as with no reference plugin (tokens are stage 4's to hold
 * to llama.cpp), its refusal said in the stage's message. A reference that
 * dies on a signal fails the stage as before. */
static void reference_takes_model(stg *s, char *note, size_t n) {
  note[0] = 0;
  if (!*s->refplug) return;
  char o[4700], e[4700];
  snprintf(o, sizeof o, "%s/reference-probe.jsonl", s->ref);
  snprintf(e, sizeof e, "%s/reference-probe.err", s->ref);
  char *argv[] = {(char *)s->mr, "--plugin-dir", s->ref, "-m", (char *)s->model, "-p", "1", "-n", "1", "--temp", "0",
                  "-c", "64", NULL, NULL, NULL};
  if (strcmp(s->kvt, "f32")) argv[13] = "--kv-type", argv[14] = (char *)s->kvt;
  unlink(e);
  const int rc = mi_spawn_wait(argv, e, o, 120);
  if (rc <= 0) return; /* it runs (or died on a signal: the cases below say so) */
  char *why = ag_read_file(e, NULL);
  char *nl = why ? strchr(why, '\n') : NULL;
  if (nl) *nl = 0;
  snprintf(note, n, "the reference plugin '%s' does not run this model%s%s (%s); ", s->refname,
           strcmp(s->kvt, "f32") ? " with a cache of " : "", strcmp(s->kvt, "f32") ? s->kvt : "", why && *why ? why : "no message");
  log_line(s->log, "%s\n", note);
  free(why);
  s->refplug = "";
}

/* 4d: mi-run --plugin-dir, the engine vs the reference model plugin the
 * model contract names (tools.reference_plugin), run the same way */
static int stage_deploy(stg *s) {
  write_deploy_confs(s);
  snprintf(s->log, sizeof s->log, "%s/deploy.log", s->dir);
  unlink(s->log);
  char note[400];
  reference_takes_model(s, note, sizeof note);
  deploy d = {0};
  deploy_reach(s, &d);
  d.ok = (!*s->refplug || access(s->refplug, R_OK) == 0) && d.max_pos > 0;
  snprintf(d.msg, sizeof d.msg, "%s", d.max_pos > 0 ? "the reference model plugin is not there" : "config.json has no max_position_embeddings");
  char *prompt = malloc(1 << 20);
  for (int k = 0; d.ok && prompt && k < N_CASES; k++) deploy_case(s, &d, k, prompt);
  char one[48];
  snprintf(one, sizeof one, "%zu-token prompt", d.n_one);
  if (d.ok && d.reach == d.max_pos) refuse_past_context(s, &d);
  free(prompt);
  char tp_mpi[48];
  snprintf(tp_mpi, sizeof tp_mpi, "mpirun -np %d: ", s->tp);
  if (d.ok && !*s->refplug)
    snprintf(d.msg, sizeof d.msg,
             "%s%s3 cases as deployed, greedy (no reference plugin: tokens are stage 4's to hold to llama.cpp): %s "
             "(prefill batch 1); %d words at -b 7 (odd chunks); %lld prompt tokens in 512-token chunks then decode to position %lld "
             "(declared context %lld%s)%s",
             note, s->tp > 1 ? tp_mpi : "", one, d.odd_words, d.long_prompt, d.long_end, d.max_pos, d.reach < d.max_pos ? d.capped_by_user ? ", capped by --deploy-reach" : ", capped by the prefill cost" : "",
             d.reach == d.max_pos ? "; -c max+1 refused in one line" : "");
  else if (d.ok)
    snprintf(d.msg, sizeof d.msg,
             "%s3 cases, greedy as deployed, tokens identical to the reference plugin '%s'%s, max |logprob diff| %.2e: "
             "%s (prefill batch 1); %d words at -b 7 (odd chunks); %lld prompt tokens in 512-token chunks then decode to position %lld "
             "(declared context %lld%s)%s",
             s->tp > 1 ? tp_mpi : "", s->refname, s->tp > 1 ? " at TP 1" : "", d.worst_all, one, d.odd_words, d.long_prompt, d.long_end, d.max_pos,
             d.reach < d.max_pos ? d.capped_by_user ? ", capped by --deploy-reach" : ", capped by the prefill cost" : "", d.reach == d.max_pos ? "; -c max+1 refused in one line" : "");
  free(d.one_ids);
  mi_bb_put_file(s->bb, s->log, "txt", s->ev);
  json_array_append_new(s->stages, stage_obj("4d", "deployment run (mi-run --plugin-dir)", d.ok ? "PASS" : "FAIL", d.msg,
                                             "test.stage4_end_to_end", s->ev));
  return d.ok ? 0 : failed(s, "4d", "test.stage4_end_to_end");
}

/* The best decode tok/s of 3 runs as deployed after prompt k of the decode
 * growth gate (k 0: the seeded short prompt, 1: 1200 words), and the prompt's
 * length; 0 with gmsg set when mi-run failed. */
static double growth_decode_tps(stg *s, int k, long long max_pos, int *plen, char *gmsg, size_t gmsg_len) {
  char prompt[8192], o[4700], n_s[16], c_s[32];
  double best = 0;
  /* 1200 words and 48 steps in a 2048 context, scaled down to fit a short
   * declared context (an emulator's scaled checkpoint: 96) at up to 3
   * tokens a word; the short prompt stays at most a third of the long one */
  long long ctx = max_pos > 0 && max_pos < 2048 ? max_pos : 2048, n = ctx / 4 < 48 ? ctx / 4 : 48;
  long long long_words = (ctx - n - 8) / 3 < 1200 ? (ctx - n - 8) / 3 : 1200;
  int words = k ? (int)long_words : long_words < 63 ? (int)(long_words / 3) : 0; /* 0: the seeded 5-21 */
  make_prompt(s->seed + 1000, k ? 3 : 0, words > 0 || k ? (words < 1 ? 1 : words) : 0, prompt, sizeof prompt);
  snprintf(n_s, sizeof n_s, "%lld", n);
  snprintf(c_s, sizeof c_s, "%lld", ctx);
  for (int rep = 0; rep < 3; rep++) {
    snprintf(o, sizeof o, "%s/growth-%d-%d.jsonl", s->dep, k, rep);
    char *g_argv[] = {(char *)s->mr, "--plugin-dir", s->dep, "-m", (char *)s->model, "-p", prompt, "-n", n_s, "--temp", "0",
                      "--json", "--stats", "--ignore-eos", "-c", c_s, NULL};
    char *gm_argv[32];
    if (s->tp > 1) under_mpirun(s, gm_argv, g_argv);
    if (mi_spawn_wait(s->tp > 1 ? gm_argv : g_argv, s->log, o, 300) != 0) {
      snprintf(gmsg, gmsg_len, "mi-run failed (prompt %d)", k);
      break;
    }
    char *txt = ag_read_file(o, NULL);
    char *st = txt ? strstr(txt, "{\"stats\"") : NULL;
    json_t *js = st ? json_loads(st, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    double t = json_number_value(json_object_get(json_object_get(js, "stats"), "decode_tps"));
    *plen = (int)json_integer_value(json_object_get(json_object_get(js, "stats"), "n_prompt"));
    if (t > best) best = t;
    json_decref(js);
    free(txt);
  }
  return best;
}

/* 6d: decode cost must not grow with the prefix beyond what reading the
 * longer KV cache costs (a default gate when the contract states none):
 * decode tok/s after a short and after a long prompt, best of 3 runs each,
 * as deployed. Expected slowdown from the model files: (W + p_long*S) /
 * (W + p_short*S), W the safetensors bytes, S the f32 KV bytes per
 * position. The gate is 6x that: wall time on a shared 2-core VM put a
 * correct tiny TP 2 engine at 4.4x. It catches gross growth only: on the
 * tiny shape the vocabulary projection dominates a step, and an engine that
 * recomputes its prefix with batched matmuls measured 4.1x on an AVX-512
 * host (8.5x elsewhere), so it can pass. At TP 1 mi-verify's stage 6
 * (run above) already holds the engine to the counted gate
 * (core/verify/growth.c: the platform work each decode step requests,
 * which no load skews), so this timed gate runs only where mi-verify
 * cannot load the engine: TP > 1, one rank per process under mpirun. */
static int stage_decode_growth(stg *s) {
  char e2[600];
  json_t *cfg = mi_model_input_config(s->model, 0, e2, sizeof e2);
  long long max_pos = (long long)json_integer_value(mi_ckb_config_value(NULL, cfg, "max_position_embeddings", 23));
  double S = 4.0 * 2 * (double)json_integer_value(json_object_get(cfg, "num_hidden_layers")) *
             (double)json_integer_value(json_object_get(cfg, "num_key_value_heads")) *
             (double)(json_integer_value(json_object_get(cfg, "head_dim")) ?: 128);
  json_decref(cfg);
  double W = weight_file_bytes(s->model);
  double tps[2] = {0, 0};
  int plen[2] = {0, 0};
  char gmsg[512] = "";
  snprintf(s->log, sizeof s->log, "%s/decode-growth.log", s->dir);
  unlink(s->log);
  for (int k = 0; k < 2 && !gmsg[0]; k++) tps[k] = growth_decode_tps(s, k, max_pos, &plen[k], gmsg, sizeof gmsg);
  double expect = (W + (plen[1] + 24) * S) / (W + (plen[0] + 24) * S), ratio = tps[1] > 0 ? tps[0] / tps[1] : 1e9;
  int g_ok = !gmsg[0] && tps[0] > 0 && ratio <= 6 * expect;
  if (!gmsg[0])
    snprintf(gmsg, sizeof gmsg,
             "decode %.1f tok/s after %d prompt tokens, %.1f after %d: %.2fx slower, the KV cache explains %.2fx (gate %.2fx)",
             tps[0], plen[0], tps[1], plen[1], ratio, expect, 6 * expect);
  log_line(s->log, "%s\n", gmsg);
  mi_bb_put_file(s->bb, s->log, "txt", s->ev);
  json_array_append_new(s->stages, stage_obj("6d", "decode cost vs prefix (default gate)", g_ok ? "PASS" : "FAIL", gmsg,
                                             "test.stage6_performance", s->ev));
  return g_ok ? 0 : failed(s, "6d", "test.stage6_performance");
}

/* mi-bench's figures for the --perf gates */
typedef struct bench_figs {
  int rc;
  json_t *cell; /* the first cell, NULL when mi-bench gave none */
  double tri, dec, roof, pre, pgf, peak;
} bench_figs;

/* Gate g against the figures: the measured value into *got, the sentence
 * into fig; 1 when met. */
static int gate_met(json_t *g, const bench_figs *b, double *got, char *fig, size_t fig_len) {
  const char *metric = json_string_value(json_object_get(g, "metric")), *unit = json_string_value(json_object_get(g, "unit"));
  double min = json_number_value(json_object_get(g, "min"));
  int dec_m = metric && !strcmp(metric, "decode"), roofl = !unit || strcmp(unit, "tok/s");
  if (dec_m && roofl) {
    *got = b->roof > 0 ? b->dec / b->roof : 0;
    snprintf(fig, fig_len, "decode %.1f tok/s = %.3g of the roofline %.1f tok/s (triad %.1f GB/s)", b->dec, *got, b->roof, b->tri);
  } else if (dec_m) {
    *got = b->dec;
    snprintf(fig, fig_len, "decode %.1f tok/s", b->dec);
  } else if (roofl) {
    *got = b->peak > 0 ? b->pgf / b->peak : 0;
    snprintf(fig, fig_len, "prefill %.1f tok/s, %.2f GFLOP/s = %.3g of the platform's matmul peak %.1f GFLOP/s", b->pre, b->pgf, *got,
             b->peak);
  } else {
    *got = b->pre;
    snprintf(fig, fig_len, "prefill %.1f tok/s", b->pre);
  }
  int ok = b->rc == 0 && b->cell && *got >= min;
  if (!b->cell) snprintf(fig, fig_len, "mi-bench gave no figures (exit %d)", b->rc);
  return ok;
}

/* 6p: the --perf gates, measured by mi-bench on the engine as deployed,
 * each against a roofline measured in the same run (decode: tok/s over
 * triad bandwidth / bytes per token; prefill: FLOP/s over the platform's
 * matmul peak), or in tok/s when the gate says so */
static int stage_perf_gates(stg *s, json_t *gates) {
  char bo[4700], thr_s[32];
  snprintf(bo, sizeof bo, "%s/bench.json", s->dir);
  snprintf(s->log, sizeof s->log, "%s/perf-gates.log", s->dir);
  unlink(s->log);
  snprintf(thr_s, sizeof thr_s, "%d", s->threads > 0 ? s->threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
  char *b_argv[] = {(char *)(s->bench ? s->bench : "mi-bench"), "--plugin-dir", s->dep, "-m", (char *)s->model, "-p", "128", "-g", "64",
                    "-r", "3", "-t", thr_s, "--json", NULL};
  log_line(s->log, "$ mi-bench --plugin-dir %s -m %s -p 128 -g 64 -r 3 -t %s --json\n", s->dep, s->model, thr_s);
  bench_figs b = {.rc = s->bench ? mi_spawn_wait(b_argv, s->log, bo, 600) : -1};
  json_t *bj = json_load_file(bo, 0, NULL);
  b.cell = json_array_get(json_object_get(bj, "cells"), 0);
  b.tri = json_number_value(json_object_get(json_object_get(bj, "bandwidth_gbs"), "triad"));
  b.dec = json_number_value(json_object_get(b.cell, "decode_tps")), b.roof = json_number_value(json_object_get(b.cell, "roofline_tps"));
  b.pre = json_number_value(json_object_get(b.cell, "prefill_tps")), b.pgf = json_number_value(json_object_get(b.cell, "prefill_gflops"));
  b.peak = json_number_value(json_object_get(b.cell, "peak_matmul_gflops"));
  json_t *results = json_array();
  char pmsg[1024] = "", fmsg[600] = "";
  size_t gi;
  json_t *g;
  json_array_foreach(gates, gi, g) {
    const char *spec = json_string_value(json_object_get(g, "gate")), *unit = json_string_value(json_object_get(g, "unit"));
    double min = json_number_value(json_object_get(g, "min")), got = 0;
    char fig[300];
    int ok = gate_met(g, &b, &got, fig, sizeof fig);
    json_array_append_new(results, json_pack("{s:s, s:f, s:s, s:f, s:s, s:s}", "gate", spec ? spec : "?", "min", min, "unit",
                                             !unit || strcmp(unit, "tok/s") ? "roofline" : "tok/s", "measured", got, "figures", fig,
                                             "verdict", ok ? "PASS" : "FAIL"));
    if (!ok && !fmsg[0]) snprintf(fmsg, sizeof fmsg, "%s not met: %s", spec ? spec : "?", fig);
    snprintf(pmsg + strlen(pmsg), sizeof pmsg - strlen(pmsg), "%s%s %s: %s", pmsg[0] ? "; " : "", spec ? spec : "?", ok ? "met" : "NOT met", fig);
  }
  json_decref(bj);
  log_line(s->log, "%s\n", pmsg);
  mi_bb_put_file(s->bb, s->log, "txt", s->ev);
  json_array_append_new(s->stages, stage_obj("6p", "performance gates (--perf)", fmsg[0] ? "FAIL" : "PASS", fmsg[0] ? fmsg : pmsg,
                                             "test.stage6_performance", s->ev));
  s->perf_res = results;
  return fmsg[0] ? failed(s, "6p", "test.stage6_performance") : 0;
}

static int stages_run(void *ctx, const mi_agent_task *t, char **result, char *err, size_t err_len) {
  (void)ctx;
  stg s = {0};
  if (read_task(&s, t, err, err_len) != 0 || open_candidate(&s, err, err_len) != 0) {
    mi_bb_close(s.bb);
    json_decref(s.task);
    return -1;
  }
  s.stages = json_array();
  char build_cmd[600];
  snprintf(build_cmd, sizeof build_cmd,
           "cc -std=gnu11 -O2 -fPIC -shared -fvisibility=hidden -Wall -I \"${MI_SDK_INCLUDE:-%s}\" engine.c -o libmi-engine-%s.so -lm",
           s.sdk, s.name);
  json_t *gates = json_object_get(json_object_get(s.task, "constraints"), "perf_gates");
  int pass = stage_build(&s) == 0 && stage_mi_verify(&s) == 0 && stage_deploy(&s) == 0 &&
             (s.tp <= 1 || stage_decode_growth(&s) == 0) && (!json_array_size(gates) || stage_perf_gates(&s, gates) == 0);
  json_t *res = json_pack("{s:s, s:s, s:o, s:s}", "status", "ok", "verdict", pass ? "PASS" : "FAIL", "stages", s.stages,
                          "build_command", build_cmd);
  if (s.lib_sha[0]) json_object_set_new(res, "library", json_string(s.lib_sha));
  if (s.rep_sha[0]) json_object_set_new(res, "report", json_string(s.rep_sha));
  if (s.failed_stage[0]) json_object_set_new(res, "failed_stage", json_string(s.failed_stage));
  if (s.failed_tc[0]) json_object_set_new(res, "failed_test_contract", json_string(s.failed_tc));
  if (s.perf_res) json_object_set_new(res, "perf_gates", s.perf_res);
  ag_result(result, res);
  mi_bb_close(s.bb);
  json_decref(s.task);
  return 0;
}

AG_DEFINE("verifier", "stages", "verifier.stages", "builds an engine and runs the staged test contracts on it", stages_run)
