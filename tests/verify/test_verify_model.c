/* mi-verify stages 3-6 on the tiny model (the golden tiny-seed1 weights):
 *   - the real qwen3 plugin on the real CPU plugin passes stages 1-6 (stage
 *     6: the default decode-growth gate, the contract stating none);
 *   - each model mutant (tests/verify/mutants_model, one planted defect
 *     each) is rejected at the stage meant to catch it, with the symptom
 *     named, every earlier stage passing and every later one skipped;
 *   - a model without a golden fails stage 4 with that said;
 *   - the forged-PASS model plugin fails each of stages 3-6 (the stage named),
 *     and plugins whose forward or teardown never returns are killed at the
 *     unit's deadline and reported as TIMEOUT;
 *   - a model plugin that writes into its model folder when deployed leaves
 *     the folder unchanged (read-only for stage 4's mi-run), or fails stage
 *     4 naming the change (the folder's fingerprint, deployed.c).
 * The mutant table here is the one in tests/verify/README.md. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/verify/deployed.h"
#include "core/verify/verify.h"
#include "tests/util/check_main.h"
#include "tests/verify/verify_test.h"

static char bin[4096], mkmodel[4096], cpu_so[4096], mm_dir[4096], ckb[4096], goldens[4096];
static char model[4096]; /* tiny seed 1: also the fixed path the "baked" mutant reads */

static void make_model(const char *dir, const char *seed) {
  char cfg[4200], tmp[4200];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  if (access(cfg, R_OK) == 0) return;
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", dir, (int)getpid());
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    execl(mkmodel, mkmodel, "--shape", "tiny", "--seed", seed, "--dtype", "bf16", "--out", tmp,
          (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed", mkmodel);
  /* Another test process may have won the race: then its copy stays. */
  if (rename(tmp, dir) != 0) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    ck_assert(system(cmd) == 0);
  }
}

static void setup(void) {
  const char *b, *s;
  vt_env(&b, &s, bin, cpu_so);
  snprintf(mkmodel, sizeof mkmodel, "%s/bin/mi-mkmodel", b);
  snprintf(mm_dir, sizeof mm_dir, "%s/tests/mutants_model", b);
  snprintf(ckb, sizeof ckb, "%s/ckb", s);
  snprintf(goldens, sizeof goldens, "%s/tests/goldens", s);
  char d[4200];
  snprintf(d, sizeof d, "%s/tests/verify_models", b);
  mkdir(d, 0755);
  snprintf(model, sizeof model, "%s/tiny-seed1", d);
  make_model(model, "1");
}

/* Runs mi-verify --stage 6 on `dir` with the model plugin `mp` (NULL: the
 * default next to the CPU plugin); returns its exit status, the report in *rep. */
static const char *g_extra[8]; /* more mi-verify arguments, NULL-terminated */
static const char *g_goldens;  /* --goldens (NULL: tests/goldens) */
/* MI_TEST_QUICK: a goldens folder whose tiny-seed1.json holds the first
 * cases of the committed one, a few steps each (made by main) */
static char g_short_goldens[4200];
static const char *g_stage;    /* --stage (NULL: 6) */
static int g_no_unshare;       /* mi-verify and all it runs get EPERM from unshare(2) (seccomp) */

/* Where no mount namespace can be made (no permission, a seccomp policy, a
 * kernel without user namespaces): unshare(2) fails with EPERM. */
static void deny_unshare(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    _exit(126);
}

static int run_verify(const char *mp, const char *dir, json_t **rep, char *log, size_t log_len) {
  char report[4200], logf[4200];
  snprintf(report, sizeof report, "%s/tests/verify_models/report-%d.json", getenv("MI_BUILD_DIR"),
           (int)getpid());
  snprintf(logf, sizeof logf, "%s.log", report);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    FILE *f = freopen(logf, "w", stderr);
    (void)f;
    if (g_no_unshare) deny_unshare();
    const char *argv[32] = {bin,     "--platform-plugin", cpu_so,             "--ckb",   ckb, "--goldens",
                            g_goldens ? g_goldens : goldens, "--stage", g_stage ? g_stage : "6", "--model", dir, "--seed",
                            "7",     "--report",          report};
    int ac = 15;
    for (int k = 0; g_extra[k]; k++) argv[ac++] = g_extra[k];
    if (mp) {
      argv[ac++] = "--model-plugin";
      argv[ac++] = mp;
    }
    argv[ac] = NULL;
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  FILE *f = fopen(logf, "r");
  size_t n = f ? fread(log, 1, log_len - 1, f) : 0;
  log[n] = 0;
  if (f) fclose(f);
  json_error_t je;
  *rep = json_load_file(report, 0, &je);
  unlink(report);
  unlink(logf);
  ck_assert_msg(*rep, "mi-verify wrote no report (%s); its output:\n%s", je.text, log);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *stage_of(json_t *rep, int n) {
  size_t i;
  json_t *s;
  json_array_foreach(json_object_get(rep, "stages"), i,
                     s) if (json_integer_value(json_object_get(s, "stage")) == n) return s;
  return NULL;
}

static const char *verdict(json_t *rep, int n) {
  const char *v = json_string_value(json_object_get(stage_of(rep, n), "verdict"));
  return v ? v : "(missing)";
}

START_TEST(real_plugin_passes_all_stages) {
  char log[65536];
  json_t *rep = NULL;
  int rc = run_verify(NULL, model, &rep, log, sizeof log);
  ck_assert_msg(rc == 0, "mi-verify exited %d on the real plugins:\n%s", rc, log);
  for (int s = 1; s <= 5; s++)
    ck_assert_msg(!strcmp(verdict(rep, s), "PASS"), "stage %d: %s\n%s", s, verdict(rep, s), log);
  /* no gate stated: the default decode-growth gate (counted work) holds */
  ck_assert_msg(!strcmp(verdict(rep, 6), "PASS"), "stage 6: %s\n%s", verdict(rep, 6), log);
  json_t *dg = json_array_get(json_object_get(stage_of(rep, 6), "units"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(dg, "id")), "decode_growth");
  /* Stage 3 really perturbed every tensor of the tiny model (2 layers x 11 + embed + norm). */
  json_t *rb = json_array_get(json_object_get(stage_of(rep, 3), "units"), 1);
  ck_assert_msg(rb && json_array_size(json_object_get(rb, "cases")) == 3 + 24,
                "stage 3 read-back: %zu cases", json_array_size(json_object_get(rb, "cases")));
  /* Stage 4: the 8 golden cases, each through 32 steps or to a near tie. */
  json_t *g = json_array_get(json_object_get(stage_of(rep, 4), "units"), 0);
  ck_assert_uint_eq(json_array_size(json_object_get(g, "cases")), 1 + 8);
  ck_assert_uint_eq(json_array_size(json_object_get(stage_of(rep, 5), "units")), 4);
  /* The sharpened prompt really drives attention scores past ln(FLT_MAX). */
  json_t *un = json_array_get(json_object_get(stage_of(rep, 5), "units"), 2);
  json_t *sharp = json_array_get(json_object_get(un, "cases"), 4);
  ck_assert_msg(json_number_value(json_object_get(sharp, "max_attention_score")) > 88.73,
                "sharp-attention case: scores only up to %g",
                json_number_value(json_object_get(sharp, "max_attention_score")));
  json_decref(rep);
}
END_TEST

/* mutant -> the stage that must catch it, the unit, words of its message.
 * quick: run under MI_TEST_QUICK (the sanitizer tree, tests/CMakeLists.txt):
 * one mutant per failing unit and symptom path of the verifier; the others
 * plant another defect caught by the same unit with the same code (a
 * golden mismatch, an unseen-prompt mismatch, an import), so they are
 * numerics the Release run holds, not new paths for ASan+UBSan. */
static const struct {
  const char *name;
  int stage;
  const char *unit, *symptom;
  int quick;
} k_mutants[] = {
    {"rmsnorm_eps", 4, "tiny-seed1.json", "step 0: token", 0},
    {"qnorm_skip", 3, NULL,
     "tensors are never read: perturbing \"model.layers.0.self_attn.q_norm.weight\"", 1},
    {"rope_half", 4, "tiny-seed1.json", "llama.cpp", 0},
    {"kv_offbyone", 4, "tiny-seed1.json", "step 1: token", 1},
    {"softmax_nomax", 5, "unseen_prompts",
     "not finite (NaN/Inf) on a 300-token prompt: an overflow", 1},
    {"canned", 5, "unseen_prompts", "unseen prompt 0 (5 tokens) step 0", 0},
    {"baked", 3, NULL, "no tensor was read from the given model folder", 1},
    {"foreign_llama", 5, "imports",
     "links libllama.so (DT_NEEDED), which is not in the allowlist: a foreign inference library", 1},
    {"dlopen_ggml", 5, "imports", "imports dlopen", 0},
    {"forged_pass", 3, NULL, "stage 3 (read-back): the unit's result pipe broke the verifier's protocol", 1},
    /* right only while verified: caught by the run as deployed */
    {"disguise_progname", 4, "mi-run", "case 0 step 0", 1},
    {"disguise_path", 4, "mi-run", "case 0 step 0", 0},
    /* right below position 512 only */
    {"kv_ring512", 5, "unseen_prompts", "deep positions", 1},
};
static int g_quick, g_run[16], g_nrun; /* the k_mutants indices this run checks */

START_TEST(mutant_rejected_at_its_stage) {
  char so[4400], log[65536];
  const int m = g_run[_i]; /* the k_mutants entry */
  snprintf(so, sizeof so, "%s/libmm-%s.so", mm_dir, k_mutants[m].name);
  json_t *rep = NULL;
  if (g_short_goldens[0]) g_goldens = g_short_goldens; /* stage 4 passed or failed on its first cases */
  int rc = run_verify(so, model, &rep, log, sizeof log);
  g_goldens = NULL;
  const int st = k_mutants[m].stage;
  ck_assert_msg(rc == 1, "mutant %s: mi-verify exited %d (expected 1):\n%s", k_mutants[m].name, rc,
                log);
  for (int s = 1; s < st; s++)
    ck_assert_msg(!strcmp(verdict(rep, s), "PASS"),
                  "mutant %s: stage %d is %s, expected PASS (caught too early?)\n%s",
                  k_mutants[m].name, s, verdict(rep, s), log);
  ck_assert_msg(!strcmp(verdict(rep, st), "FAIL"), "mutant %s: stage %d is %s, expected FAIL\n%s",
                k_mutants[m].name, st, verdict(rep, st), log);
  for (int s = st + 1; s <= 6; s++)
    ck_assert_str_eq(verdict(rep, s), "SKIPPED");
  /* The failing unit names the symptom. */
  size_t i;
  json_t *u;
  int found = 0;
  json_array_foreach(json_object_get(stage_of(rep, st), "units"), i, u) {
    const char *v = json_string_value(json_object_get(u, "verdict")),
               *id = json_string_value(json_object_get(u, "id"));
    const char *msg = json_string_value(json_object_get(u, "message"));
    if (strcmp(v, "FAIL") || (k_mutants[m].unit && strcmp(id, k_mutants[m].unit))) continue;
    ck_assert_msg(msg && strstr(msg, k_mutants[m].symptom),
                  "mutant %s: unit %s says \"%s\", expected \"%s\"", k_mutants[m].name, id,
                  msg ? msg : "(none)", k_mutants[m].symptom);
    found = 1;
  }
  ck_assert_msg(found, "mutant %s: no failing unit %s in stage %d\n%s", k_mutants[m].name,
                k_mutants[m].unit ? k_mutants[m].unit : "", st, log);
  json_decref(rep);
}
END_TEST

START_TEST(model_without_golden_fails_stage4) {
  char dir[4200], log[65536];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/tiny-seed5", getenv("MI_BUILD_DIR"));
  make_model(dir, "5");
  json_t *rep = NULL;
  int rc = run_verify(NULL, dir, &rep, log, sizeof log);
  ck_assert_int_eq(rc, 1);
  ck_assert_str_eq(verdict(rep, 3), "PASS");
  ck_assert_str_eq(verdict(rep, 4), "FAIL");
  const char *msg = json_string_value(json_object_get(stage_of(rep, 4), "message"));
  ck_assert_msg(msg && strstr(msg, "no golden for this model"), "stage 4 says: %s",
                msg ? msg : "(none)");
  json_decref(rep);
}
END_TEST

/* A checkpoint that declares a short context (max_position_embeddings 96,
 * as an emulator run scales one to): stage 5's cases fit in it, the
 * 300-token sharp-attention prompt cut to 94 (the engine rightly refused
 * "context size 302"; a correct model failed stage 5), and still pushes
 * the scores past the f32 exp overflow. No golden: stage 4 N/A. */
START_TEST(short_declared_context_fits_stage5) {
  char dir[4200], cfgp[4400], log[65536];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/tiny-ctx96", getenv("MI_BUILD_DIR"));
  make_model(dir, "1");
  snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
  json_t *cfg = json_load_file(cfgp, 0, NULL);
  ck_assert_ptr_nonnull(cfg);
  json_object_set_new(cfg, "max_position_embeddings", json_integer(96));
  ck_assert_int_eq(json_dump_file(cfg, cfgp, JSON_INDENT(2)), 0);
  json_decref(cfg);
  const char *extra[] = {"--goldens-optional", "--no-oracle", NULL};
  memcpy(g_extra, extra, sizeof extra);
  g_stage = "5";
  json_t *rep = NULL;
  int rc = run_verify(NULL, dir, &rep, log, sizeof log);
  g_extra[0] = NULL, g_stage = NULL;
  ck_assert_msg(rc == 0 && !strcmp(verdict(rep, 5), "PASS"), "exit %d, stage 5 %s:\n%s", rc, verdict(rep, 5), log);
  char *all = json_dumps(stage_of(rep, 5), JSON_COMPACT);
  ck_assert_msg(all && strstr(all, "sharp attention (94 tokens") && strstr(all, "94-token prompt (sharpened)") &&
                    !strstr(all, "not exercised"),
                "%s", all ? all : "");
  free(all);
  json_decref(rep);
}
END_TEST

/* MI_TEST_QUICK: the real oracle (tools/peer/oracle.mjs, linked) on the
 * first 2 of its prompts, through MI_PEER_DIR (mi-verify passes it the
 * prompts.json beside the script): llama.cpp's 32 steps over the whole
 * vocabulary cost about 5 s a prompt in node, the same outside the
 * sanitizers; the Release run makes the golden of all 8. Sets MI_PEER_DIR
 * to the folder, written into dir; the number of prompts. */
static int short_oracle(char *dir, size_t n) {
  const char *s = getenv("MI_SOURCE_DIR");
  snprintf(dir, n, "%s/tests/verify_models/peer-short-%d", getenv("MI_BUILD_DIR"), (int)getpid());
  char p[4400];
  snprintf(p, sizeof p, "rm -rf '%s' && mkdir -p '%s' && ln -s '%s/tools/peer/oracle.mjs' '%s/oracle.mjs'", dir, dir, s, dir);
  ck_assert_int_eq(system(p), 0);
  snprintf(p, sizeof p, "%s/tools/peer/prompts.json", s);
  json_t *pj = json_load_file(p, 0, NULL);
  json_t *pr = json_object_get(pj, "prompts");
  ck_assert_int_ge(json_array_size(pr), 2);
  while (json_array_size(pr) > 2) json_array_remove(pr, json_array_size(pr) - 1);
  snprintf(p, sizeof p, "%s/prompts.json", dir);
  ck_assert_int_eq(json_dump_file(pj, p, 0), 0);
  json_decref(pj);
  setenv("MI_PEER_DIR", dir, 1);
  fprintf(stderr, "test_verify_model: MI_TEST_QUICK: the oracle on 2 of its 8 prompts (all 8: the Release run)\n");
  return 2;
}

/* No committed golden: the oracle makes one for this checkpoint (llama.cpp
 * on the checkpoint's own F32 GGUF), stage 4 passes against it, and the
 * next run takes it from the cache. */
START_TEST(model_without_golden_gets_one_from_the_oracle) {
  char dir[4200], cache[4200], log[65536];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/tiny-seed5", getenv("MI_BUILD_DIR"));
  make_model(dir, "5");
  snprintf(cache, sizeof cache, "%s/tests/verify_models/oracle-cache-%d", getenv("MI_BUILD_DIR"), (int)getpid());
  char rm[4300];
  snprintf(rm, sizeof rm, "rm -rf '%s'", cache);
  ck_assert_int_eq(system(rm), 0);
  setenv("MI_ORACLE", "1", 1);
  char peer[4300] = "";
  const int ncases = g_quick ? short_oracle(peer, sizeof peer) : 8;
  g_extra[0] = "--oracle-cache";
  g_extra[1] = cache;
  g_stage = "4"; /* what the oracle feeds; stages 5-6 are the other tests' */
  for (int run = 0; run < 2; run++) {
    json_t *rep = NULL;
    int rc = run_verify(NULL, dir, &rep, log, sizeof log);
    ck_assert_msg(rc == 0, "run %d: exit %d:\n%s", run, rc, log);
    ck_assert_str_eq(verdict(rep, 4), "PASS");
    json_t *s4 = stage_of(rep, 4), *orc = json_object_get(s4, "oracle");
    ck_assert_msg(json_is_object(orc), "run %d: no oracle evidence:\n%s", run, log);
    ck_assert_int_eq(json_is_true(json_object_get(orc, "made_now")), run == 0);
    const char *g = json_string_value(json_object_get(s4, "golden"));
    ck_assert_msg(g && !strncmp(g, cache, strlen(cache)), "golden %s", g ? g : "(none)");
    /* every case compared, against llama.cpp's tokens */
    json_t *u = json_array_get(json_object_get(s4, "units"), 0);
    const char *sum = json_string_value(json_object_get(u, "summary"));
    char want[32];
    snprintf(want, sizeof want, "%d cases", ncases);
    ck_assert_msg(sum && strstr(sum, want) && strstr(sum, "greedy steps identical to llama.cpp"), "%s",
                  sum ? sum : "(none)");
    json_decref(rep);
  }
  g_extra[0] = g_extra[1] = NULL;
  g_stage = NULL;
  setenv("MI_ORACLE", "0", 1);
  ck_assert_int_eq(system(rm), 0);
  if (peer[0]) {
    unsetenv("MI_PEER_DIR");
    snprintf(rm, sizeof rm, "rm -rf '%s'", peer);
    ck_assert_int_eq(system(rm), 0);
  }
}
END_TEST

/* A golden is chosen by weights and config together: the committed golden
 * of tiny-seed1 does not hold for the same weights under another config. */
START_TEST(golden_is_picked_by_config_too) {
  char dir[4200], log[65536], cmd[9000];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/tiny-seed1-eps", getenv("MI_BUILD_DIR"));
  make_model(dir, "1");
  snprintf(cmd, sizeof cmd, "sed -i 's/\"rms_norm_eps\": 1e-6,/\"rms_norm_eps\": 1e-05,/' '%s/config.json' && "
           "grep -q '\"rms_norm_eps\": 1e-05' '%s/config.json'", dir, dir);
  ck_assert_int_eq(system(cmd), 0);
  g_extra[0] = "--no-oracle";
  json_t *rep = NULL;
  int rc = run_verify(NULL, dir, &rep, log, sizeof log);
  g_extra[0] = NULL;
  ck_assert_int_eq(rc, 1);
  ck_assert_str_eq(verdict(rep, 4), "FAIL");
  const char *msg = json_string_value(json_object_get(stage_of(rep, 4), "message"));
  ck_assert_msg(msg && strstr(msg, "no golden for this model") && strstr(msg, "no oracle to make one"), "%s",
                msg ? msg : "(none)");
  json_decref(rep);
}
END_TEST

/* Stage 6 measures the gates a contract states (here written by the test):
 * one met, one impossible, one for another shape (N/A); none at all: the
 * default decode-growth gate alone. */
START_TEST(stage6_gates_measured) {
  char q3[4200];
  snprintf(q3, sizeof q3, "%s/lib/metainfer/libmi-qwen3.so", getenv("MI_BUILD_DIR"));
  vf_stage_opts o = {cpu_so, NULL, NULL, NULL, 7, {120, 240, 0, 0}, NULL, q3, model, NULL, 0, 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, 0};
  json_t *none = json_pack("{s:[]}", "gates");
  json_t *s = vf_stage6(&o, none); /* the default gate only */
  ck_assert_str_eq(json_string_value(json_object_get(s, "verdict")), "PASS");
  ck_assert_uint_eq(json_array_size(json_object_get(s, "units")), 1);
  json_decref(s);
  json_decref(none);
  json_t *c =
      json_pack("{s:[{s:s, s:i, s:i, s:f}, {s:s, s:i, s:i, s:f}, {s:s, s:i, s:i, s:f, s:s}]}",
                "gates", "metric", "decode_tok_s", "prompt", 4, "generate", 8, "min", 0.5, "metric",
                "prefill_tok_s", "prompt", 8, "generate", 2, "min", 1e12, "metric", "decode_tok_s",
                "prompt", 4, "generate", 4, "min", 1e12, "shape", "1024x28");
  s = vf_stage6(&o, c);
  ck_assert_str_eq(json_string_value(json_object_get(s, "verdict")), "FAIL");
  json_t *cases = json_object_get(json_array_get(json_object_get(s, "units"), 0), "cases");
  ck_assert_uint_eq(json_array_size(cases), 4); /* engine load + 3 gates */
  const char *want[] = {"PASS", "PASS", "FAIL", "PASS"};
  for (size_t i = 0; i < 4; i++)
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(cases, i), "verdict")),
                     want[i]);
  ck_assert(json_number_value(json_object_get(json_array_get(cases, 1), "measured")) > 0.5);
  ck_assert(json_is_true(json_object_get(json_array_get(cases, 3), "not_applicable")));
  json_decref(s);
  json_decref(c);
}
END_TEST

static const char *unit_message(json_t *stage, const char *id) {
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(stage, "units"), i, u) if (!strcmp(json_string_value(json_object_get(u, "id")), id))
    return json_string_value(json_object_get(u, "message"));
  return NULL;
}

/* The stage result `stage` is a FAIL whose unit `id` says `want` (`what`
 * names the check in the failure message). */
static void expect_failed_unit(json_t *stage, const char *id, const char *want, const char *what) {
  ck_assert_str_eq(json_string_value(json_object_get(stage, "verdict")), "FAIL");
  const char *m = unit_message(stage, id);
  ck_assert_msg(m && strstr(m, want), "%s says: %s", what, m ? m : "(none)");
}

/* The forged-PASS model plugin (mutants_model/mm_forged_pass.c) against
 * stages 4-6 one by one (stage 3 catches it first in a full run: see
 * k_mutants): each stage that runs the engine fails it, naming itself. */
START_TEST(forged_pass_rejected_at_stages_4_to_6) {
  char so[4400];
  snprintf(so, sizeof so, "%s/libmm-forged_pass.so", mm_dir);
  char err[600];
  mi_ckb *kb = mi_ckb_open(ckb, err, sizeof err); /* stage 5 interprets the model contract */
  ck_assert_msg(kb, "%s", err);
  vf_stage_opts o = {cpu_so, NULL, NULL, NULL, 7, {120, 240, 0, 0}, NULL, so, model, goldens, 0, 0, NULL, NULL, NULL, NULL, 0, NULL, kb, NULL, NULL, 0};
  json_t *none = json_object();
  json_t *s = vf_stage4(&o, none);
  expect_failed_unit(s, "tiny-seed1.json",
                     "stage 4 (end to end): the unit's result pipe broke the verifier's protocol", "stage 4");
  json_decref(s);
  s = vf_stage5(&o, none);
  static const char *const parts[][2] = {{"follows_weights", "stage 5 (b) outputs follow the weights: the unit's"},
                                         {"unseen_prompts", "stage 5 (c) unseen prompts: the unit's"},
                                         {"weights_path", "stage 5 (d) weights from the given path: the unit's"}};
  for (int k = 0; k < 3; k++) {
    char what[64];
    snprintf(what, sizeof what, "stage 5 %s", parts[k][0]);
    expect_failed_unit(s, parts[k][0], parts[k][1], what);
  }
  json_decref(s);
  json_t *c = json_pack("{s:[{s:s, s:i, s:i, s:f}]}", "gates", "metric", "decode_tok_s", "prompt", 4, "generate",
                        8, "min", 0.5);
  s = vf_stage6(&o, c);
  expect_failed_unit(s, "gates", "stage 6 (performance gates): the unit's result pipe broke", "stage 6");
  json_decref(s);
  mi_ckb_close(kb);
  json_decref(c);
  json_decref(none);
}
END_TEST

/* Stage 6's default gate on the mutant that recomputes its whole prefix at
 * every decode step (right logits, so only the cost shows it): run alone,
 * as a full run would spend half a minute on stages 1-5 first. */
START_TEST(decode_growth_catches_prefix_recompute) {
  char so[4400];
  snprintf(so, sizeof so, "%s/libmm-recompute_prefix.so", mm_dir);
  vf_stage_opts o = {cpu_so, NULL, NULL, NULL, 7, {120, 240, 0, 0}, NULL, so, model, goldens, 0, 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, 0};
  json_t *none = json_pack("{s:[]}", "gates");
  json_t *s = vf_stage6(&o, none);
  expect_failed_unit(s, "decode_growth",
                     "decode cost grows with the prefix: non-attention work per decode step (step 0)",
                     "decode growth");
  json_decref(s);
  json_decref(none);
}
END_TEST

/* A model plugin whose forward never returns, and one whose teardown
 * (buffer_free) never returns after every output was produced: each unit
 * is killed at its deadline (3 s here) and reported as a TIMEOUT. */
START_TEST(hung_plugin_killed_at_the_deadline) {
  char so[4400], err[600], ckbdir[4200];
  snprintf(ckbdir, sizeof ckbdir, "%s", ckb);
  mi_ckb *kb = mi_ckb_open(ckbdir, err, sizeof err);
  ck_assert_msg(kb, "%s", err);
  snprintf(so, sizeof so, "%s/libmm-forward_hang.so", mm_dir);
  vf_stage_opts o = {cpu_so, NULL, NULL, NULL, 7, {120, 240, 0, 0}, NULL, so, model, goldens, 0, 3, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, 0};
  json_t *s = vf_stage3(&o, kb, model);
  ck_assert_str_eq(json_string_value(json_object_get(s, "verdict")), "FAIL");
  json_t *rb = json_array_get(json_object_get(s, "units"), 1);
  const char *m = json_string_value(json_object_get(rb, "message"));
  ck_assert_str_eq(json_string_value(json_object_get(rb, "status")), "TIMEOUT");
  ck_assert_msg(m && strstr(m, "weights read-back: TIMEOUT: no result within 3s during a call"), "read-back says: %s",
                m ? m : "(none)");
  json_decref(s);
  snprintf(so, sizeof so, "%s/libmm-fini_hang.so", mm_dir);
  json_t *c = json_pack("{s:[{s:s, s:i, s:i, s:f}]}", "gates", "metric", "decode_tok_s", "prompt", 4, "generate",
                        4, "min", 0.5);
  s = vf_stage6(&o, c);
  ck_assert_str_eq(json_string_value(json_object_get(s, "verdict")), "FAIL");
  json_t *u = json_array_get(json_object_get(s, "units"), 0);
  m = json_string_value(json_object_get(u, "message"));
  ck_assert_str_eq(json_string_value(json_object_get(u, "status")), "TIMEOUT");
  ck_assert_msg(m && strstr(m, "performance gates: TIMEOUT: no result within 3s"), "stage 6 says: %s", m ? m : "(none)");
  json_decref(s);
  json_decref(c);
  mi_ckb_close(kb);
}
END_TEST

/* Puts a hostile file at path: 0 a FIFO, 1 a directory, 2 a sparse file
 * over `big` bytes, 3 truncated JSON. */
static void plant(const char *path, int kind, off_t big) {
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  ck_assert(system(cmd) == 0);
  if (kind == 0) ck_assert(mkfifo(path, 0600) == 0);
  else if (kind == 1) ck_assert(mkdir(path, 0700) == 0);
  else {
    FILE *f = fopen(path, "w");
    ck_assert(f);
    fputs("{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 6", f);
    fclose(f);
    if (kind == 2) ck_assert(truncate(path, big) == 0);
  }
}

static const char *const k_hostile_line[] = {"not a regular file (a FIFO)", "not a regular file (a directory)",
                                             "bytes, over the", "invalid JSON at line 1"};

/* mi-verify's own readers refuse what is not a JSON file, with one line
 * naming it, and never wait on a FIFO: config.json of the model folder
 * (mi-verify.c), a golden in the goldens folder (stage 4). */
START_TEST(hostile_files_refused_with_one_line) {
  char dir[4200], cfg[4300], logf[4300], log[8192];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/hostile-%d", getenv("MI_BUILD_DIR"), (int)getpid());
  mkdir(dir, 0700);
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  snprintf(logf, sizeof logf, "%s/log", dir);
  for (int k = 0; k < 4; k++) {
    plant(cfg, k, 2 << 20);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
      if (!freopen(logf, "w", stderr)) _exit(126);
      alarm(60); /* a reader that waits on the FIFO fails the test rather than hanging it */
      execl(bin, bin, "--platform-plugin", cpu_so, "--ckb", ckb, "--stage", "3", "--model", dir, (char *)NULL);
      _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(logf, "r");
    size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
    log[n] = 0;
    if (f) fclose(f);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "config.json kind %d: status %d\n%s", k, st, log);
    char want[4600];
    snprintf(want, sizeof want, "mi-verify: %s: ", cfg);
    ck_assert_msg(strstr(log, want) && strstr(log, k_hostile_line[k]) && strchr(log, '\n') == log + n - 1,
                  "config.json kind %d: expected one line '%s...%s', got:\n%s", k, want, k_hostile_line[k], log);
  }
  /* goldens: the one file of the folder is hostile; stage 4 says which */
  char gdir[4300], gold[4400];
  snprintf(gdir, sizeof gdir, "%s/goldens", dir);
  mkdir(gdir, 0700);
  snprintf(gold, sizeof gold, "%s/x.json", gdir);
  vf_stage_opts o = {cpu_so, NULL, NULL, NULL, 7, {120, 240, 0, 0}, NULL, cpu_so, model, gdir, 0, 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, 0};
  for (int k = 0; k < 4; k++) {
    plant(gold, k, (off_t)65 << 20);
    json_t *s = vf_stage4(&o, NULL);
    const char *m = json_string_value(json_object_get(s, "message"));
    char want[4600];
    snprintf(want, sizeof want, "a golden that cannot be read: %s: ", gold);
    ck_assert_msg(m && strstr(m, want) && strstr(m, k_hostile_line[k]), "golden kind %d: stage 4 says %s", k,
                  m ? m : "(none)");
    json_decref(s);
  }
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert(system(cmd) == 0);
}
END_TEST

/* The folder's fingerprint (deployed.c) sees every kind of change a
 * plugin could make, names the first, and nothing when nothing changed;
 * reading is no change, and a FIFO or a symlink in it is never opened. */
START_TEST(model_folder_fingerprint_sees_changes) {
  char dir[4200], p[4400], q[4400], what[800], err[600], cmd[9000];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/fp-%d", getenv("MI_BUILD_DIR"), (int)getpid());
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/sub' && echo '{}' > '%s/config.json' && echo abc > '%s/sub/w'",
           dir, dir, dir, dir);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(p, sizeof p, "%s/fifo", dir);
  ck_assert_int_eq(mkfifo(p, 0600), 0);
  snprintf(p, sizeof p, "%s/link", dir);
  ck_assert_int_eq(symlink("/nonexistent/target", p), 0);
  vf_fp *a = NULL, *b = NULL;
  /* each step: a baseline, a change on a later clock tick, what the diff says */
#define FP_STEP(change, want)                                                                                   \
  do {                                                                                                          \
    vf_fp_free(a);                                                                                              \
    a = vf_fp_take(dir, err, sizeof err);                                                                       \
    ck_assert_msg(a, "%s", err);                                                                                \
    usleep(30000);                                                                                              \
    change;                                                                                                     \
    b = vf_fp_take(dir, err, sizeof err);                                                                       \
    ck_assert_msg(b, "%s", err);                                                                                \
    what[0] = 0;                                                                                                \
    int d = vf_fp_diff(a, b, what, sizeof what);                                                                \
    ck_assert_msg((want)[0] ? d == 1 && !strcmp(what, want) : d == 0, "expected \"%s\", got %d \"%s\"", want, d, \
                  what);                                                                                        \
    vf_fp_free(b);                                                                                              \
  } while (0)
  FP_STEP((void)0, "");
  snprintf(p, sizeof p, "%s/config.json", dir);
  FP_STEP({ /* a read is no change (atime is not in the fingerprint) */
    FILE *f = fopen(p, "r");
    ck_assert(f && fgetc(f) == '{');
    fclose(f);
  }, "");
  FP_STEP(ck_assert_int_eq(utimensat(AT_FDCWD, p, NULL, 0), 0), "config.json (mtime, ctime)");
  FP_STEP(ck_assert_int_eq(chmod(p, 0600), 0), "config.json (ctime)");
  snprintf(p, sizeof p, "%s/sub/new", dir);
  FP_STEP(ck_assert_int_eq(close(open(p, O_WRONLY | O_CREAT, 0644)), 0), "created sub/new");
  snprintf(p, sizeof p, "%s/sub/w", dir);
  snprintf(q, sizeof q, "%s/sub/w2", dir);
  FP_STEP(ck_assert_int_eq(rename(p, q), 0), "removed sub/w");
  snprintf(cmd, sizeof cmd, "echo abcd > '%s'", q);
  FP_STEP(ck_assert_int_eq(system(cmd), 0), "sub/w2 (size, mtime, ctime)");
  FP_STEP(ck_assert_int_eq(chmod(dir, 0700), 0), "the folder itself (ctime)");
  /* a single-file model (a GGUF) is its own entry: a write to it is seen */
  {
    char keep[4200];
    snprintf(keep, sizeof keep, "%s", dir);
    snprintf(dir, sizeof dir, "%s/sub/w2", keep);
    FP_STEP((void)0, "");
    snprintf(cmd, sizeof cmd, "printf x >> '%s'", dir);
    FP_STEP(ck_assert_int_eq(system(cmd), 0), "the model file (size, mtime, ctime)");
    snprintf(dir, sizeof dir, "%s", keep);
  }
  /* gone: one line naming the folder */
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_ptr_null(vf_fp_take(dir, err, sizeof err));
  ck_assert_msg(strstr(err, dir) && strstr(err, "cannot fingerprint the folder") && !strchr(err, '\n'), "%s", err);
  vf_fp_free(a);
#undef FP_STEP
}
END_TEST

/* Names, types, sizes, modes and content hashes of every file under dir:
 * the test's own view of the folder, independent of the verifier's. */
static char *listing(const char *dir) {
  char cmd[9000];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && find . -printf '%%p %%y %%s %%m\\n' | LC_ALL=C sort && "
           "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum",
           dir);
  FILE *f = popen(cmd, "r");
  ck_assert(f);
  size_t cap = 1 << 16, n = 0, k;
  char *buf = malloc(cap);
  ck_assert(buf);
  while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0)
    if ((n += k) == cap - 1) ck_assert(buf = realloc(buf, cap *= 2));
  buf[n] = 0;
  ck_assert_int_eq(pclose(f), 0);
  return buf;
}

static json_t *unit_of(json_t *stage, const char *id) {
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(stage, "units"), i, u) if (!strcmp(json_string_value(json_object_get(u, "id")), id))
    return u;
  return NULL;
}

/* The writes_model_dir mutant (mutants_model/mm_writes_model_dir.c) creates
 * .marker in its model folder once a program other than mi-verify loads it:
 * stage 4's deployed run, on the folder the user gave. Run 1 as this
 * machine allows: mi-run sees the folder read-only (then the folder is
 * unchanged, byte for byte, and stage 4 passes: the write failed), or the
 * verifier's fingerprint names the change and fails every deployed case.
 * Run 2 with unshare(2) denied (seccomp), no mount namespace anywhere: the
 * mutant really writes, and stage 4 fails naming .marker. */
START_TEST(model_folder_held_as_deployed) {
  char dir[4200], so[4400], cmd[9000], log[65536];
  snprintf(dir, sizeof dir, "%s/tests/verify_models/tiny-seed1-w-%d", getenv("MI_BUILD_DIR"), (int)getpid());
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", dir, model, dir);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(so, sizeof so, "%s/libmm-writes_model_dir.so", mm_dir);
  g_stage = "4"; /* stage 4 holds the deployed run; 5-6 are the other tests' */
  if (g_short_goldens[0]) g_goldens = g_short_goldens; /* every case of the deployed run, fewer of them */
  for (int run = 0; run < 2; run++) {
    char *before = listing(dir);
    json_t *rep = NULL;
    g_no_unshare = run == 1;
    int rc = run_verify(so, dir, &rep, log, sizeof log);
    g_no_unshare = 0;
    char *after = listing(dir);
    json_t *s4 = stage_of(rep, 4), *du = unit_of(s4, "mi-run"), *mf = json_object_get(du, "model_folder");
    ck_assert_msg(json_is_object(mf), "run %d: no model_folder evidence in the deployed unit:\n%s", run, log);
    const char *msg = json_string_value(json_object_get(du, "message"));
    if (json_is_true(json_object_get(mf, "read_only"))) {
      ck_assert_msg(run == 0, "run %d: read-only with unshare(2) denied?", run);
      ck_assert_msg(!strcmp(before, after), "run %d: the model folder changed although read-only:\n%s\n---\n%s", run,
                    before, after);
      ck_assert_msg(rc == 0 && !strcmp(verdict(rep, 4), "PASS"), "run %d: exit %d, stage 4 %s:\n%s", run, rc,
                    verdict(rep, 4), log);
      ck_assert(json_is_true(json_object_get(mf, "fingerprinted")) && json_is_false(json_object_get(mf, "changed")));
      const char *sum = json_string_value(json_object_get(du, "summary"));
      ck_assert_msg(sum && strstr(sum, "the model folder read-only for mi-run (a mount namespace)"), "%s",
                    sum ? sum : "(none)");
    } else {
      ck_assert_msg(rc == 1 && !strcmp(verdict(rep, 3), "PASS") && !strcmp(verdict(rep, 4), "FAIL"),
                    "run %d: exit %d, stage 3 %s, stage 4 %s:\n%s", run, rc, verdict(rep, 3), verdict(rep, 4), log);
      ck_assert_msg(msg && strstr(msg, "as deployed, the model under test changed the model folder: created .marker"),
                    "run %d: unit mi-run says: %s", run, msg ? msg : "(none)");
      ck_assert(strstr(after, "./.marker f 1 ") && !strstr(before, ".marker"));
      /* every case fails, not the first alone */
      size_t i;
      json_t *c;
      json_array_foreach(json_object_get(du, "cases"), i, c) if (i > 0) ck_assert_str_eq(
          json_string_value(json_object_get(c, "verdict")), "FAIL");
      snprintf(cmd, sizeof cmd, "rm -f '%s/.marker'", dir);
      ck_assert_int_eq(system(cmd), 0);
    }
    free(before);
    free(after);
    json_decref(rep);
  }
  g_stage = NULL;
  g_goldens = NULL;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(bad_arguments_are_refused) {
  /* --stage 4 without --model: a usage error (2), one line naming it. */
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(126);
    execl(bin, bin, "--platform-plugin", cpu_so, "--ckb", ckb, "--stage", "4", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(126);
    execl(bin, bin, "--platform-plugin", cpu_so, "--ckb", ckb, "--stage", "7", "--model", model,
          (char *)NULL);
    _exit(127);
  }
  waitpid(pid, &st, 0);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}
END_TEST

/* MI_TEST_QUICK: g_short_goldens, a folder holding tiny-seed1.json cut to
 * its first 2 cases of 4 steps (the same model, so stage 4 picks it): what
 * the mutant runs and the deployed-folder runs compare there. Each mutant
 * still fails at its stage with its symptom (kv_offbyone at case 0 step 1,
 * disguise_progname at case 0 step 0) or passes stage 4 to be caught
 * later; real_plugin_passes_all_stages keeps the whole golden, and the
 * Release run compares every case in every run. 0, or -1. */
static int make_short_goldens(void) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  if (!b || !s) return -1;
  char p[4300];
  snprintf(p, sizeof p, "%s/tests/goldens/tiny-seed1.json", s);
  json_t *g = json_load_file(p, 0, NULL);
  json_t *cases = json_object_get(g, "cases");
  if (!g || json_array_size(cases) < 2) {
    json_decref(g);
    return -1;
  }
  while (json_array_size(cases) > 2) json_array_remove(cases, json_array_size(cases) - 1);
  for (size_t i = 0; i < 2; i++) {
    json_t *steps = json_object_get(json_array_get(cases, i), "steps");
    while (json_array_size(steps) > 4) json_array_remove(steps, json_array_size(steps) - 1);
  }
  snprintf(g_short_goldens, sizeof g_short_goldens, "%s/tests/verify_models/goldens-short-%d", b, (int)getpid());
  snprintf(p, sizeof p, "%s/tests/verify_models", b);
  mkdir(p, 0755);
  mkdir(g_short_goldens, 0755);
  snprintf(p, sizeof p, "%s/tiny-seed1.json", g_short_goldens);
  const int rc = json_dump_file(g, p, JSON_COMPACT);
  json_decref(g);
  return rc;
}

int main(void) {
  g_quick = getenv("MI_TEST_QUICK") != NULL;
  if (g_quick && make_short_goldens() != 0) {
    fprintf(stderr, "test_verify_model: cannot make the short goldens folder\n");
    return 1;
  }
  for (int i = 0; i < (int)(sizeof k_mutants / sizeof k_mutants[0]); i++)
    if (!g_quick || k_mutants[i].quick) g_run[g_nrun++] = i;
  if (g_quick)
    fprintf(stderr,
            "test_verify_model: MI_TEST_QUICK: %d of the %d model mutants (one per failing unit); the mutants and the "
            "deployed-folder runs on the golden's first 2 cases of 4 steps: the rest left to the Release run\n",
            g_nrun, (int)(sizeof k_mutants / sizeof k_mutants[0]));
  Suite *s = suite_create("verify_model");
  TCase *tc = tcase_create("stages3to6");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 300);
  mi_check_add(tc, MI_CHECK_TESTS(bad_arguments_are_refused, stage6_gates_measured,
                                  real_plugin_passes_all_stages));
  mi_check_add_loop(tc, MI_CHECK_TESTS(mutant_rejected_at_its_stage), 0, g_nrun);
  mi_check_add(tc, MI_CHECK_TESTS(
                       model_without_golden_fails_stage4, golden_is_picked_by_config_too,
                       model_without_golden_gets_one_from_the_oracle,
                       forged_pass_rejected_at_stages_4_to_6, hung_plugin_killed_at_the_deadline,
                       decode_growth_catches_prefix_recompute, hostile_files_refused_with_one_line,
                       model_folder_fingerprint_sees_changes, model_folder_held_as_deployed,
                       short_declared_context_fits_stage5));
  suite_add_tcase(s, tc);
  const int rc = mi_check_run(s);
  if (g_short_goldens[0]) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_short_goldens);
    if (system(cmd) != 0) fprintf(stderr, "test_verify_model: could not remove %s\n", g_short_goldens);
  }
  return rc;
}
