/* The LLM-backed agents (implementer.llm, reviewer.llm) through mi-gen,
 * against the scripted OpenAI-compatible server on loopback, on a tiny
 * mi-mkmodel checkpoint. The answer that passes is the engine.c that
 * implementer.compose writes for that checkpoint, made at run time (so it
 * cannot go stale); the answers that fail are that source broken.
 *   - end to end: a malformed answer, a candidate the reviewer rejects (after
 *     a malformed verdict), one that fails the verifier's build stage, one
 *     that builds and passes stages 1-3 but fails stage 4 (end to end
 *     against the llama.cpp golden of the tiny checkpoint: its final norm
 *     uses the zero-centred (1+w) weights), then one that passes: exit 0,
 *     the engine is the good source, the journal records each candidate's
 *     verdicts, the manifest what each role spent and every file read; the
 *     implementer's retry prompts carry the failure reports and never the
 *     goldens;
 *   - the API key reaches the server's Authorization header and nothing
 *     else: not stderr, the journal, the manifest or the recordings;
 *   - the recorded run replayed with no server: the same engine hash and the
 *     same review and stage verdicts; a request not recorded fails loudly;
 *   - each failure an endpoint can give (malformed JSON, no code block, 429
 *     with Retry-After, 500, a hung connection, a cut answer, a huge answer)
 *     ends as the policy says, with its one-line reason in the journal;
 *   - budgets (requests, tokens per role, iterations) end with exit 9 and
 *     the best partial result;
 *   - the host's file tool: reads inside the allowed roots work, reads
 *     outside (goldens, the journal, /etc) are refused and reported, --refs
 *     roots only when given; an agent needing newer host services is refused
 *     with a readable line;
 *   - no endpoint: refused at setup (exit 2) or when nobody answers (exit 4). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/gen/agent_host.h"
#include "core/gen/gen.h"
#include "mock_llm_server.h"
#include "tests/util/check_main.h"
#include "tests/util/test_files.h"

#define KEY "sk-test-SECRET-0451"

static char g_build[1024], g_src[1024], g_tmp[1100], g_model[1200], g_ckb[1200], g_gold[1200];
static char g_engine_name[128];
static char *g_good, *g_bad1, *g_bad2, *g_bad4;
static char g_good_sha[65], g_bad4_sha[65];
static char *S_good, *S_reject, *A_good, *A_bad1, *A_bad2, *A_bad4, *A_noblock, *A_huge, *R_reject, *R_approve, *R_prose;

typedef struct res {
  int rc;
  char *err;
  char out_dir[1300];
} res;

/* a file's text, "" when missing or unreadable */
static char *slurp(const char *path) {
  char *s = mi_test_slurp(path);
  return s ? s : strdup("");
}

/* A chat completion whose message is `content` (usage 100 + 50 tokens). */
static char *answer(const char *content) {
  json_t *a = json_pack("{s:s, s:s, s:[{s:i, s:{s:s, s:s}, s:s}], s:{s:i, s:i, s:i}}", "id", "chatcmpl-1", "object",
                        "chat.completion", "choices", "index", 0, "message", "role", "assistant", "content", content,
                        "finish_reason", "stop", "usage", "prompt_tokens", 100, "completion_tokens", 50, "total_tokens", 150);
  char *s = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  return s;
}

/* The same answer as server-sent events: content deltas of 3000 bytes,
 * the finish, the usage chunk, [DONE]. */
static char *sse_answer(const char *content) {
  size_t n = strlen(content), cap = n * 2 + 4096, len = 0;
  char *s = malloc(cap);
  for (size_t off = 0; off < n; off += 3000) {
    json_t *d = json_pack("{s:[{s:i, s:{s:s%}}]}", "choices", "index", 0, "delta", "content", content + off,
                          n - off < 3000 ? n - off : (size_t)3000);
    char *t = json_dumps(d, JSON_COMPACT);
    size_t tl = strlen(t);
    if (len + tl + 64 > cap) s = realloc(s, cap = (len + tl + 64) * 2);
    len += (size_t)sprintf(s + len, "data: %s\n\n", t);
    free(t);
    json_decref(d);
  }
  if (len + 512 > cap) s = realloc(s, cap = len + 512);
  len += (size_t)sprintf(s + len, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                                   "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":50,\"total_tokens\":150}}\n\n"
                                   "data: [DONE]\n\n");
  return s;
}

static char *fenced(const char *pre, const char *code) {
  char *s = NULL;
  if (asprintf(&s, "%s\n\n```c\n%s```\n\nThat is the whole file.", pre, code) < 0) abort();
  return s;
}

/* mi-gen with the tiny model and the given extra arguments; OUT is a fresh
 * folder named `name`. The key is in MI_TEST_KEY, named by --llm-key-env. */
static res gen(const char *name, const char *const *extra) {
  res r = {0};
  snprintf(r.out_dir, sizeof r.out_dir, "%s/%s", g_tmp, name);
  char exe[1200], e[1400];
  snprintf(exe, sizeof exe, "%s/bin/mi-gen", g_build);
  snprintf(e, sizeof e, "%s.stderr", r.out_dir);
  const char *argv[64] = {exe, "--model", g_model, "--platform", "cpu", "--dtype", "bf16", "--tp", "1", "--out", r.out_dir,
                          "--ckb", g_ckb, "--goldens", g_gold, "--seed", "5", "-t", "2", "--llm-key-env", "MI_TEST_KEY"};
  int n = 21;
  for (int i = 0; extra[i] && n < 62; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    int fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644), nul = open("/dev/null", O_RDWR);
    dup2(nul, 0), dup2(nul, 1), dup2(fe, 2);
    unsetenv("MI_LLM_BASE_URL"), unsetenv("OPENAI_BASE_URL"), unsetenv("MI_LLM_API_KEY"), unsetenv("OPENAI_API_KEY");
    setenv("MI_TEST_KEY", KEY, 1);
    alarm(600);
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  r.err = slurp(e);
  ck_assert_ptr_null(strstr(r.err, "SECRET")); /* never on stderr */
  return r;
}

static json_t *journal(const res *r) {
  char p[1400];
  snprintf(p, sizeof p, "%s/run", r->out_dir);
  int bad = 0;
  return mi_bb_read_journal(p, &bad);
}

/* the agent_result lines of a role, in order */
static json_t *results_of(json_t *j, const char *role) {
  json_t *out = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(j, i, v) if (!strcmp(json_string_value(json_object_get(v, "event")) ?: "", "agent_result") &&
                                  !strcmp(json_string_value(json_object_get(v, "role")) ?: "", role)) json_array_append(out, v);
  return out;
}

/* the sequence of review verdicts and stage verdicts of a run, one string */
static char *verdicts(json_t *j) {
  size_t cap = 4096, n = 0, i;
  char *s = calloc(1, cap);
  json_t *v;
  json_array_foreach(j, i, v) {
    if (strcmp(json_string_value(json_object_get(v, "event")) ?: "", "agent_result")) continue;
    json_t *r = json_object_get(v, "result");
    const char *role = json_string_value(json_object_get(v, "role"));
    if (!strcmp(role, "reviewer")) n += (size_t)snprintf(s + n, cap - n, "review:%s ", json_string_value(json_object_get(r, "verdict")) ?: "-");
    if (!strcmp(role, "verifier")) {
      size_t k;
      json_t *st;
      json_array_foreach(json_object_get(r, "stages"), k, st)
          n += (size_t)snprintf(s + n, cap - n, "%s:%s ", json_string_value(json_object_get(st, "stage")),
                                json_string_value(json_object_get(st, "verdict")));
    }
    if (!strcmp(role, "implementer"))
      n += (size_t)snprintf(s + n, cap - n, "impl:%.12s ", json_string_value(json_object_get(r, "source")) ?: "-");
  }
  return s;
}

/* no file under dir holds `needle` */
static void assert_absent(const char *dir, const char *needle) {
  char cmd[1500];
  snprintf(cmd, sizeof cmd, "grep -rqs -- '%s' '%s'", needle, dir);
  ck_assert_msg(system(cmd) != 0, "%s found under %s", needle, dir);
}

static void setup_all(void) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_src, sizeof g_src, "%s", s ? s : ".");
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mi-llm-agents-XXXXXX");
  if (!mkdtemp(g_tmp)) abort();
  snprintf(g_model, sizeof g_model, "%s/tiny", g_tmp);
  snprintf(g_ckb, sizeof g_ckb, "%s/ckb", g_tmp);
  snprintf(g_gold, sizeof g_gold, "%s/tests/goldens", g_src);
  char cmd[4000];
  snprintf(cmd, sizeof cmd, "cp -r '%s/ckb' '%s' && '%s/bin/mi-mkmodel' --shape tiny --seed 1 --dtype bf16 --out '%s' >/dev/null 2>&1",
           g_src, g_ckb, g_build, g_model);
  if (system(cmd) != 0) fprintf(stderr, "test_llm_agents: setup failed: %s\n", cmd);
  /* the good answer: what implementer.compose writes for this checkpoint */
  char cfg[1300], sha[65], rd[1300], plug[1300];
  snprintf(cfg, sizeof cfg, "%s/config.json", g_model);
  mi_sha256_file(cfg, sha);
  snprintf(g_engine_name, sizeof g_engine_name, "qwen3-%.8s-bf16-tp1", sha);
  snprintf(rd, sizeof rd, "%s/compose-run", g_tmp);
  mi_bb *bb = mi_bb_open(rd, 1, cmd, sizeof cmd);
  mi_bb_close(bb);
  snprintf(plug, sizeof plug, "%s/lib/metainfer/libmi-agent-compose.so", g_build);
  json_t *task = json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:i, s:s}, s:s, s:[], s:s, s:i}", "role", "implementer", "strategy",
                           "compose", "constraints", "model", g_model, "platform", "cpu", "dtype", "bf16", "tp", 1, "kv_type",
                           "f32", "model_dir", g_model, "patches", "engine_name", g_engine_name, "iteration", 1);
  mi_agent_outcome o;
  if (mi_agent_run(plug, task, g_ckb, rd, 120, &o) == 0) {
    const char *src = json_string_value(json_object_get(o.result, "source"));
    snprintf(g_good_sha, sizeof g_good_sha, "%s", src ? src : "");
    snprintf(cmd, sizeof cmd, "%s/artifacts/%s.c", rd, g_good_sha);
    g_good = slurp(cmd);
  } else {
    fprintf(stderr, "test_llm_agents: compose failed: %s\n", o.message);
    g_good = strdup("");
  }
  mi_agent_outcome_free(&o);
  json_decref(task);
  /* broken candidates: they do not build (the verifier's first stage) */
  if (asprintf(&g_bad1, "%s\n#error candidate one does not build\n", g_good) < 0 ||
      asprintf(&g_bad2, "%s\n#error candidate two does not build either\n", g_good) < 0)
    abort();
  /* a candidate that builds and that stages 1 (the platform's kernels), 2 (one
   * decoder layer, composed by the verifier) and 3 (every tensor read back:
   * the logits still move with each one) cannot tell from the good one, but
   * stage 4 (end to end against llama.cpp's golden) can: the final norm takes
   * the zero-centred (1+w) weights of Gemma-style norms, not Qwen3's w, so
   * every logit is scaled and the logprobs drift */
  static const char final_norm_ok[] = "RMS_NORM_EPS, 0.0f)); /* final_norm", final_norm_bad[] = "RMS_NORM_EPS, 1.0f)); /* final_norm";
  const char *at = strstr(g_good, final_norm_ok);
  if (!at || strstr(at + 1, final_norm_ok)) fprintf(stderr, "test_llm_agents: the final norm call is not in the composed source once\n");
  g_bad4 = strdup(g_good);
  if (at) memcpy(g_bad4 + (at - g_good), final_norm_bad, sizeof final_norm_bad - 1);
  mi_sha256_buf(g_bad4, strlen(g_bad4), g_bad4_sha);
  char *t;
  A_good = answer(t = fenced("Here is the corrected engine.", g_good));
  S_good = sse_answer(t), free(t);
  A_bad1 = answer(t = fenced("Here is the engine.", g_bad1)), free(t);
  A_bad2 = answer(t = fenced("Here is the engine, reviewed.", g_bad2)), free(t);
  A_bad4 = answer(t = fenced("Here is the engine; it builds now.", g_bad4)), free(t);
  A_noblock = answer("I would write the engine with the platform's kernels, step by step, as the contract says.");
  /* a block of 2 MiB: under the client's 8 MiB answer limit, over the 1 MiB source limit */
  size_t hn = (size_t)2 << 20;
  char *huge = malloc(hn + 64);
  strcpy(huge, "MI_PLUGIN_DEFINE(x)\n");
  memset(huge + 20, 'x', hn);
  strcpy(huge + 20 + hn, "\n");
  A_huge = answer(t = fenced("Big:", huge)), free(t), free(huge);
  static const char reject[] = "{\"verdict\":\"rejected\",\"findings\":[{\"severity\":\"error\",\"rule\":\"sequence\",\"line\":12,"
                               "\"message\":\"REVIEW-FINDING-7: the layer loop skips the post-attention norm\"}]}";
  R_reject = answer(reject);
  S_reject = sse_answer(reject);
  R_approve = answer("```json\n{\"verdict\":\"approved\",\"findings\":[]}\n```");
  R_prose = answer("The engine looks fine to me.");
}

static void teardown_all(void) {
  if (!getenv("MI_KEEP")) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "test_llm_agents: cleanup failed\n");
  }
  free(S_good), free(S_reject), free(g_good), free(g_bad1), free(g_bad2), free(g_bad4), free(A_good), free(A_bad1), free(A_bad2), free(A_bad4), free(A_noblock), free(A_huge);
  free(R_reject), free(R_approve), free(R_prose);
}

static const char *const LLM_BOTH[] = {"--implementer", "llm", "--reviewer", "llm", NULL};

START_TEST(test_end_to_end_record_replay) {
  ck_assert_msg(g_good_sha[0] && strlen(g_good) > 1000, "compose gave no source");
  ck_assert_msg(strcmp(g_bad4, g_good), "the stage-4 candidate was not made (no final norm call in the composed source)");
  mock_reply s[] = {
      {200, NULL, NULL, A_noblock, 0, 0}, /* implementer, answer 1: malformed */
      {200, NULL, NULL, A_bad1, 0, 0},    /* implementer, answer 2: candidate 1 */
      {200, NULL, NULL, R_prose, 0, 0},   /* reviewer: not JSON, asked again */
      {200, NULL, NULL, R_reject, 0, 0},  /* reviewer: rejects candidate 1 */
      {200, NULL, NULL, A_bad2, 0, 0},    /* implementer: candidate 2 */
      {200, NULL, NULL, R_approve, 0, 0}, /* reviewer approves; the verifier's build fails */
      {200, NULL, NULL, A_bad4, 0, 0},    /* implementer: candidate 3 */
      {200, NULL, NULL, R_approve, 0, 0}, /* reviewer approves; the verifier fails it at stage 4 */
      {200, NULL, NULL, A_good, 0, 0},    /* implementer: candidate 4 */
      {200, NULL, NULL, R_approve, 0, 0}, /* reviewer approves; the verifier passes */
  };
  enum { N_REQ = sizeof s / sizeof *s };
  mock_server *m = mock_start(s, N_REQ);
  ck_assert_ptr_nonnull(m);
  char rec[1300];
  snprintf(rec, sizeof rec, "%s/recording", g_tmp);
  const char *a[] = {"--implementer", "llm", "--reviewer", "llm", "--llm-base", mock_url(m), "--llm-model", "tiny-coder",
                     "--llm-record", rec, "--llm-retries", "0", NULL};
  res r = gen("e2e", a);
  ck_assert_msg(r.rc == 0, "exit %d\n%s", r.rc, r.err);
  ck_assert_int_eq(mock_requests(m), N_REQ);
  /* the key went to the server, in the header only */
  for (size_t i = 0; i < N_REQ; i++) {
    ck_assert_str_eq(mock_request_auth(m, i), "Bearer " KEY);
    ck_assert_ptr_null(strstr(mock_request_body(m, i), "SECRET"));
  }
  /* the implementer's retry prompts carry the structured failure reports */
  const char *p2 = mock_request_body(m, 4), *p3 = mock_request_body(m, 6), *p4 = mock_request_body(m, 8);
  ck_assert_msg(strstr(p2, "REVIEW-FINDING-7"), "the reviewer's finding is not in the next prompt");
  ck_assert_msg(strstr(p3, "build") && strstr(p3, "FAIL"), "the verifier's report is not in the next prompt");
  ck_assert_msg(strstr(p3, "candidate two does not build"), "the previous candidate is not in the prompt");
  ck_assert_msg(strstr(p4, "end_to_end") && strstr(p4, "FAIL"), "the stage 4 report is not in the next prompt");
  ck_assert_msg(strstr(p4, "RMS_NORM_EPS, 1.0f)); /* final_norm"), "the stage-4 candidate is not in the next prompt");
  /* never the goldens (their folder, their file, a value from them) or the
   * verifier's seed: the stage 4 message passed on in the retry after it
   * (request 8) keeps the candidate's own figures and the size of the miss,
   * with the golden's path and llama.cpp's value redacted */
  for (size_t i = 0; i < N_REQ; i++) {
    const char *q = mock_request_body(m, i);
    ck_assert_ptr_null(strstr(q, "\"seed\":5"));
    ck_assert_msg(!strstr(q, g_gold) && !strstr(q, "tiny-seed1"), "request %zu names the goldens", i);
  }
  ck_assert_msg(strstr(p4, "llama.cpp <hidden>") && strstr(p4, "|diff|"), "the stage 4 message lost its redaction or its figure");
  mock_stop(m);
  /* the engine is the good answer's source */
  char p[1500], sha[65];
  snprintf(p, sizeof p, "%s/engine.c", r.out_dir);
  ck_assert_int_eq(mi_sha256_file(p, sha), 0);
  ck_assert_str_eq(sha, g_good_sha);
  /* the manifest: the spend per role and the reads */
  snprintf(p, sizeof p, "%s/manifest.json", r.out_dir);
  json_t *man = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(man);
  json_t *gsec = json_object_get(man, "generation"), *sp = json_object_get(gsec, "spent");
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sp, "implementer"), "requests")), 5);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sp, "reviewer"), "requests")), 5);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sp, "run"), "prompt_tokens")), 100 * N_REQ);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sp, "run"), "completion_tokens")), 50 * N_REQ);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sp, "implementer"), "calls")), 4);
  ck_assert_int_eq(json_integer_value(json_object_get(man, "iterations")), 4);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(gsec, "strategies"), "implementer")), "llm");
  int read_model = 0, read_weights = 0;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(gsec, "reads"), i, v) {
    const char *rp = json_string_value(json_object_get(v, "path"));
    read_model |= strstr(rp, "/ckb/models/qwen3.json") != NULL;
    read_weights |= strstr(rp, "model.safetensors") != NULL;
    ck_assert_ptr_null(strstr(rp, "goldens"));
  }
  ck_assert(read_model && read_weights);
  ck_assert_int_eq(json_array_size(json_object_get(gsec, "refused")), 0);
  json_decref(man);
  /* the journal: the malformed answers' one-line reasons */
  json_t *j = journal(&r);
  char *jt = json_dumps(j, JSON_COMPACT);
  ck_assert_msg(strstr(jt, "implementer.llm: answer 1 malformed: no complete ```c block"), "no note for the malformed answer");
  ck_assert_msg(strstr(jt, "reviewer.llm: answer 1 malformed: the answer holds no JSON object"), "no note for the bad verdict");
  free(jt);
  char *v1 = verdicts(j);
  ck_assert_msg(strstr(v1, "review:rejected") && strstr(v1, "build:FAIL") && strstr(v1, "4d:PASS"), "%s", v1);
  /* the verifier's calls: the build fails; then the stage-4 candidate
   * passes build and stages 1-3 and fails at 4 (5 and 6 not run); then the
   * good one passes every stage */
  json_t *ver = results_of(j, "verifier");
  ck_assert_int_eq(json_array_size(ver), 3);
  json_t *v_b = json_object_get(json_array_get(ver, 0), "result"), *v_4 = json_object_get(json_array_get(ver, 1), "result"),
         *v_ok = json_object_get(json_array_get(ver, 2), "result");
  ck_assert_str_eq(json_string_value(json_object_get(v_b, "failed_stage")) ?: "-", "build");
  ck_assert_str_eq(json_string_value(json_object_get(v_4, "verdict")) ?: "-", "FAIL");
  ck_assert_str_eq(json_string_value(json_object_get(v_4, "failed_stage")) ?: "-", "4");
  ck_assert_str_eq(json_string_value(json_object_get(v_4, "failed_test_contract")) ?: "-", "test.stage4_end_to_end");
  char *s4 = NULL;
  {
    size_t n = 0, cap = 256, k;
    json_t *st;
    s4 = calloc(1, cap);
    json_array_foreach(json_object_get(v_4, "stages"), k, st)
        n += (size_t)snprintf(s4 + n, cap - n, "%s:%s ", json_string_value(json_object_get(st, "stage")),
                              json_string_value(json_object_get(st, "verdict")));
  }
  ck_assert_msg(!strncmp(s4, "build:PASS 1:PASS 2:PASS 3:PASS 4:FAIL ", 39) && !strstr(s4, "5:FAIL") && !strstr(s4, "5:PASS"),
                "the stage-4 candidate's stages: %s", s4);
  free(s4);
  ck_assert_str_eq(json_string_value(json_object_get(v_ok, "verdict")) ?: "-", "PASS");
  ck_assert_msg(!json_object_get(v_ok, "failed_stage") || json_is_null(json_object_get(v_ok, "failed_stage")), "the good candidate failed");
  /* the candidate the verifier failed at stage 4 is the edited source */
  size_t k;
  json_t *ev;
  int seen4 = 0;
  json_array_foreach(j, k, ev) if (!strcmp(json_string_value(json_object_get(ev, "event")) ?: "", "verdict") &&
                                   !strcmp(json_string_value(json_object_get(ev, "source")) ?: "", g_bad4_sha)) {
    ck_assert_str_eq(json_string_value(json_object_get(ev, "verdict")) ?: "-", "FAIL");
    seen4++;
  }
  ck_assert_int_eq(seen4, 1);
  json_decref(ver);
  json_decref(j);
  /* nothing holds the key */
  assert_absent(r.out_dir, "SECRET");
  assert_absent(rec, "SECRET");
  free(r.err);

  /* replayed with no server: the same engine and verdicts */
  const char *b[] = {"--implementer", "llm", "--reviewer", "llm", "--llm-base", "http://127.0.0.1:9", "--llm-model", "tiny-coder",
                     "--llm-replay", rec, NULL};
  res r2 = gen("e2e-replay", b);
  ck_assert_msg(r2.rc == 0, "replay exit %d\n%s", r2.rc, r2.err);
  snprintf(p, sizeof p, "%s/engine.c", r2.out_dir);
  ck_assert_int_eq(mi_sha256_file(p, sha), 0);
  ck_assert_str_eq(sha, g_good_sha);
  j = journal(&r2);
  char *v2 = verdicts(j);
  ck_assert_str_eq(v1, v2);
  free(v1), free(v2);
  json_decref(j);
  free(r2.err);

  /* a request that was not recorded fails loudly (another model name) */
  const char *c[] = {"--implementer", "llm", "--llm-model", "another-model", "--llm-replay", rec, NULL};
  res r3 = gen("e2e-unmatched", c);
  ck_assert_msg(r3.rc == 4 && strstr(r3.err, "replay: no recorded answer"), "exit %d\n%s", r3.rc, r3.err);
  free(r3.err);
}
END_TEST

/* one failure policy: the script, extra flags, the exit, what the
 * implementer's journal line must say */
typedef struct policy {
  const char *name;
  mock_reply script[6];
  size_t n;
  const char *flags[8];
  int rc;
  const char *journal_says;
} policy;

static void run_policy(const policy *pc) {
  mock_server *m = mock_start(pc->script, pc->n);
  ck_assert_ptr_nonnull(m);
  const char *a[24] = {"--implementer", "llm", "--reviewer", "llm", "--llm-base", mock_url(m), "--llm-timeout", "2",
                       "--llm-retries", "1", "--budget-iterations", "1"};
  int n = 12;
  for (int i = 0; pc->flags[i]; i++) a[n++] = pc->flags[i];
  a[n] = NULL;
  res r = gen(pc->name, a);
  mock_stop(m);
  ck_assert_msg(r.rc == pc->rc, "%s: exit %d, expected %d\n%s", pc->name, r.rc, pc->rc, r.err);
  json_t *j = journal(&r);
  json_t *imp = results_of(j, "implementer"), *last = json_array_get(imp, json_array_size(imp) - 1);
  char *t = json_dumps(last, JSON_COMPACT);
  ck_assert_msg(t && strstr(t, pc->journal_says), "%s: the journal does not say \"%s\": %s", pc->name, pc->journal_says, t ? t : "(none)");
  /* the reason is one line */
  const char *e = json_string_value(json_object_get(last, "error"));
  ck_assert_msg(!e || !strchr(e, '\n'), "%s: a reason of more than one line", pc->name);
  free(t);
  json_decref(imp);
  json_decref(j);
  free(r.err);
}

START_TEST(test_failure_policies) {
  const char *bad_json = "{\"choices\": [ this is not json";
  policy ps[] = {
      {"malformed-json", {{200, NULL, NULL, bad_json, 0, 0}}, 1, {NULL}, 4, "the answer is not JSON"},
      {"no-code-block", {{200, NULL, NULL, A_noblock, 0, 0}, {200, NULL, NULL, A_noblock, 0, 0}, {200, NULL, NULL, A_noblock, 0, 0}},
       3, {NULL}, 4, "3 malformed answers, the last: no complete ```c block"},
      {"rate-limited", {{429, "1", NULL, "{\"error\":{\"message\":\"slow down\",\"code\":\"rate_limit\"}}", 0, 0},
                        {429, "1", NULL, "{\"error\":{\"message\":\"slow down\",\"code\":\"rate_limit\"}}", 0, 0}},
       2, {NULL}, 4, "HTTP 429: slow down [rate_limit] (after 2 attempts)"},
      {"server-error", {{500, NULL, NULL, "{\"error\":{\"message\":\"boom\"}}", 0, 0}, {500, NULL, NULL, "{\"error\":{\"message\":\"boom\"}}", 0, 0}},
       2, {NULL}, 4, "HTTP 500: boom (after 2 attempts)"},
      {"hung", {{200, NULL, NULL, A_good, 0, 5}, {200, NULL, NULL, A_good, 0, 5}}, 2, {NULL}, 4, "(after 2 attempts)"},
      {"cut", {{200, NULL, NULL, A_good, 1, 0}, {200, NULL, NULL, A_good, 1, 0}}, 2, {NULL}, 4, "the answer was cut"},
      {"cut-stream", {{200, NULL, "text/event-stream", S_good, 1, 0}, {200, NULL, "text/event-stream", S_good, 1, 0}}, 2,
       {"--llm-stream", NULL}, 4, "the stream was cut"},
      {"huge", {{200, NULL, NULL, A_huge, 0, 0}, {200, NULL, NULL, A_huge, 0, 0}, {200, NULL, NULL, A_huge, 0, 0}}, 3, {NULL}, 4,
       "more than the 1048576 allowed"},
  };
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) run_policy(&ps[i]);
}
END_TEST

static json_t *partial_manifest(const res *r) {
  char p[1400];
  snprintf(p, sizeof p, "%s/partial/manifest.json", r->out_dir);
  return json_load_file(p, 0, NULL);
}

START_TEST(test_budgets) {
  /* requests: two malformed answers, the third request refused by the host */
  policy req = {"budget-requests", {{200, NULL, NULL, A_noblock, 0, 0}, {200, NULL, NULL, A_noblock, 0, 0}, {200, NULL, NULL, A_noblock, 0, 0}},
                3, {"--budget-requests", "2", NULL}, 9, "budget spent: requests"};
  run_policy(&req);
  res r = {0};
  snprintf(r.out_dir, sizeof r.out_dir, "%s/budget-requests", g_tmp);
  json_t *pm = partial_manifest(&r);
  ck_assert_ptr_nonnull(pm);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(json_object_get(pm, "generation"), "spent"), "implementer"), "requests")), 2);
  ck_assert_ptr_null(json_object_get(pm, "best"));
  json_decref(pm);
  /* tokens, per role: 150 spent by the first answer, 100 allowed */
  policy tok = {"budget-tokens", {{200, NULL, NULL, A_noblock, 0, 0}, {200, NULL, NULL, A_noblock, 0, 0}}, 2,
                {"--budget-tokens", "implementer=100", NULL}, 9, "budget spent: tokens"};
  run_policy(&tok);
  /* iterations: a 429 honoured (Retry-After 0), a candidate, rejected by
   * review: the one iteration allowed is spent, the candidate is the
   * partial result */
  policy it = {"budget-iterations",
               {{429, "0", NULL, "{\"error\":{\"message\":\"busy\"}}", 0, 0}, {200, NULL, NULL, A_bad1, 0, 0}, {200, NULL, NULL, R_reject, 0, 0}},
               3, {NULL}, 9, "\"status\":\"ok\""};
  run_policy(&it);
  snprintf(r.out_dir, sizeof r.out_dir, "%s/budget-iterations", g_tmp);
  pm = partial_manifest(&r);
  ck_assert_ptr_nonnull(pm);
  ck_assert_int_eq(json_is_true(json_object_get(json_object_get(pm, "best"), "review_rejected")), 1);
  json_decref(pm);
  char p[1500];
  snprintf(p, sizeof p, "%s/partial/engine.c", r.out_dir);
  char *got = slurp(p);
  ck_assert_str_eq(got, g_bad1);
  free(got);
  /* wall time, per role: the verifier is given none, so an approved
   * candidate is the partial result, never verified */
  policy wall = {"budget-wall", {{200, NULL, NULL, A_bad2, 0, 0}, {200, NULL, NULL, R_approve, 0, 0}}, 2,
                 {"--budget-wall", "verifier=0", NULL}, 9, "\"status\":\"ok\""};
  run_policy(&wall);
  snprintf(r.out_dir, sizeof r.out_dir, "%s/budget-wall", g_tmp);
  pm = partial_manifest(&r);
  ck_assert_ptr_nonnull(pm);
  ck_assert_msg(strstr(json_string_value(json_object_get(pm, "reason")) ?: "", "verifier's wall-time budget"), "%s",
                json_string_value(json_object_get(pm, "reason")));
  ck_assert_int_eq(json_is_false(json_object_get(json_object_get(pm, "best"), "review_rejected")), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(json_object_get(pm, "generation"), "spent"), "verifier"), "calls")), 0);
  json_decref(pm);
  /* a streamed answer (server-sent events) gives the same candidate */
  policy st = {"budget-stream", {{200, NULL, "text/event-stream", S_good, 0, 0}, {200, NULL, "text/event-stream", S_reject, 0, 0}}, 2,
               {"--llm-stream", NULL}, 9, "\"status\":\"ok\""};
  run_policy(&st);
  snprintf(r.out_dir, sizeof r.out_dir, "%s/budget-stream", g_tmp);
  snprintf(p, sizeof p, "%s/partial/engine.c", r.out_dir);
  got = slurp(p);
  ck_assert_str_eq(got, g_good);
  free(got);
  /* bad budget syntax */
  const char *bad[] = {"--budget-tokens", "planner=5", NULL};
  res rb = gen("budget-bad", bad);
  ck_assert_msg(rb.rc == 2 && strstr(rb.err, "unknown role 'planner'"), "exit %d\n%s", rb.rc, rb.err);
  free(rb.err);
}
END_TEST

/* A reference folder g_tmp/DIR (its path into refs[1300]) holding the file
 * NAME (its path into file[1400]) with `text`. */
static void write_reference(char *refs, const char *dir, char *file, const char *name,
                            const char *text) {
  snprintf(refs, 1300, "%s/%s", g_tmp, dir);
  mkdir(refs, 0755);
  snprintf(file, 1400, "%s/%s", refs, name);
  FILE *f = fopen(file, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* references on and off, the same scripted model: it asks to read a
 * reference file, then answers a candidate the reviewer rejects (one
 * iteration allowed: exit 9, so no verifier runs) */
START_TEST(test_references_on_off) {
  char refs[1300], ref[1400];
  write_reference(refs, "refs-src", ref, "llama-model.cpp",
                  "// REFERENCE-MARKER-3: how a peer builds the graph\n");
  char args[1500];
  snprintf(args, sizeof args, "{\"path\":\"%s\"}", ref);
  json_t *tc = json_pack("{s:[{s:i, s:{s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}, s:s}], s:{s:i, s:i, s:i}}", "choices", "index", 0,
                         "message", "role", "assistant", "content", "tool_calls", "id", "call_7", "type", "function", "function",
                         "name", "read_file", "arguments", args, "finish_reason", "tool_calls", "usage", "prompt_tokens", 100,
                         "completion_tokens", 20, "total_tokens", 120);
  char *tool_answer = json_dumps(tc, JSON_COMPACT);
  json_decref(tc);
  for (int on = 1; on >= 0; on--) {
    mock_reply sc[] = {{200, NULL, NULL, tool_answer, 0, 0}, {200, NULL, NULL, A_bad1, 0, 0}, {200, NULL, NULL, R_reject, 0, 0}};
    mock_server *m = mock_start(sc, 3);
    ck_assert_ptr_nonnull(m);
    const char *a[] = {"--implementer", "llm", "--reviewer", "llm", "--llm-base", mock_url(m), "--budget-iterations", "1",
                       on ? "--refs" : NULL, refs, NULL};
    res r = gen(on ? "refs-on" : "refs-off", a);
    ck_assert_msg(r.rc == 9, "refs %s: exit %d\n%s", on ? "on" : "off", r.rc, r.err);
    ck_assert_int_eq(mock_requests(m), 3);
    const char *q0 = mock_request_body(m, 0), *q1 = mock_request_body(m, 1);
    if (on) {
      ck_assert_msg(strstr(q0, "\"tools\"") && strstr(q0, "read_file"), "no read_file tool offered with references on");
      ck_assert_msg(strstr(q1, "REFERENCE-MARKER-3"), "the reference's text did not reach the model");
      ck_assert_msg(strstr(q1, "call_7"), "the tool answer does not name its call");
    } else {
      ck_assert_msg(!strstr(q0, "\"tools\""), "a tool offered with references off");
      ck_assert_msg(!strstr(q1, "REFERENCE-MARKER-3"), "a reference was read with references off");
      ck_assert_msg(strstr(q1, "outside the allowed roots"), "the refusal is not the tool's answer");
    }
    mock_stop(m);
    json_t *pm = partial_manifest(&r), *g = json_object_get(pm, "generation");
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(json_is_true(json_object_get(json_object_get(g, "references"), "on")), on);
    int read = 0, refused = 0;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(g, "reads"), i, v) read |= !strcmp(json_string_value(json_object_get(v, "path")), ref);
    json_array_foreach(json_object_get(g, "refused"), i, v) refused |= strstr(json_string_value(json_object_get(v, "path")), "llama-model.cpp") != NULL;
    ck_assert_int_eq(read, on);
    ck_assert_int_eq(refused, !on);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(g, "spent"), "implementer"), "requests")), 2);
    json_decref(pm);
    free(r.err);
  }
  free(tool_answer);
}
END_TEST

START_TEST(test_no_endpoint) {
  res r = gen("no-endpoint", LLM_BOTH);
  ck_assert_msg(r.rc == 2 && strstr(r.err, "needs an endpoint"), "exit %d\n%s", r.rc, r.err);
  free(r.err);
  const char *a[] = {"--implementer", "llm", "--llm-base", "http://127.0.0.1:9", "--llm-retries", "0", NULL};
  r = gen("nobody-answers", a);
  ck_assert_msg(r.rc == 4 && strstr(r.err, "http://127.0.0.1:9/v1/chat/completions"), "exit %d\n%s", r.rc, r.err);
  free(r.err);
  /* the same endpoint from a config file; a key in it is refused */
  char cf[1300];
  snprintf(cf, sizeof cf, "%s/llm.json", g_tmp);
  FILE *f = fopen(cf, "w");
  fputs("{\"base_url\": \"http://127.0.0.1:9/v1\", \"model\": \"m\", \"key_env\": \"MI_TEST_KEY\", \"retries\": 0}", f);
  fclose(f);
  const char *c[] = {"--implementer", "llm", "--llm-config", cf, NULL};
  r = gen("config-file", c);
  ck_assert_msg(r.rc == 4 && strstr(r.err, "http://127.0.0.1:9/v1/chat/completions") && strstr(r.err, "after 1 attempt"), "exit %d\n%s",
                r.rc, r.err);
  free(r.err);
  f = fopen(cf, "w");
  fputs("{\"base_url\": \"http://127.0.0.1:9\", \"api_key\": \"sk-in-a-file\"}", f);
  fclose(f);
  r = gen("config-key", c);
  ck_assert_msg(r.rc == 2 && strstr(r.err, "unknown field \"api_key\"") && !strstr(r.err, "sk-in-a-file"), "exit %d\n%s", r.rc, r.err);
  free(r.err);
}
END_TEST

START_TEST(test_file_tool_roots) {
  char rd[1300], refs[1300], plug[1300], p[1400];
  snprintf(rd, sizeof rd, "%s/probe-run", g_tmp);
  write_reference(refs, "refs", p, "llama.h", "/* a reference */\n");
  char e[256], sha_c[65], sha_t[65];
  mi_bb *bb = mi_bb_open(rd, 1, e, sizeof e);
  ck_assert_ptr_nonnull(bb);
  mi_bb_put(bb, "int x;\n", 7, "c", sha_c);      /* a candidate source: readable */
  mi_bb_put(bb, "evidence\n", 9, "txt", sha_t);  /* the verifier's evidence: not */
  json_t *jl = json_pack("{s:s}", "event", "start");
  mi_bb_append(bb, jl);
  json_decref(jl);
  mi_bb_close(bb);
  char in_ckb[1300], in_model[1300], weights[1300], gold[1300], jpath[1300], art[1400], txt[1400], passwd[] = "/etc/passwd",
      ref_file[1400];
  snprintf(in_ckb, sizeof in_ckb, "%s/models/qwen3.json", g_ckb);
  snprintf(in_model, sizeof in_model, "%s/config.json", g_model);
  snprintf(weights, sizeof weights, "%s/model.safetensors", g_model);
  snprintf(gold, sizeof gold, "%s/tiny-seed1.json", g_gold);
  snprintf(jpath, sizeof jpath, "%s/journal.jsonl", rd);
  snprintf(art, sizeof art, "%s/artifacts/%s.c", rd, sha_c);
  snprintf(txt, sizeof txt, "%s/artifacts/%s.txt", rd, sha_t);
  snprintf(ref_file, sizeof ref_file, "%s/llama.h", refs);
  snprintf(plug, sizeof plug, "%s/tests/libmi-agent-probe.so", g_build);
  for (int with_refs = 0; with_refs < 2; with_refs++) {
    json_t *task = json_pack("{s:[s, s, s, s, s, s, s, s, s], s:[s, s]}", "read", in_ckb, in_model, weights, gold, jpath, art, txt,
                             passwd, ref_file, "list", g_ckb, "/etc");
    const char *roots[] = {g_ckb, refs};
    mi_agent_host_cfg cfg = {.requests_left = -1, .tokens_left = -1, .roots = roots, .n_roots = with_refs ? 2 : 1,
                             .model_dir = g_model, .run_dir = rd};
    mi_agent_outcome o;
    ck_assert_msg(mi_agent_run_ex(plug, task, g_ckb, rd, 60, &cfg, &o) == 0, "%s", o.message);
    json_t *got = json_object_get(o.result, "read");
    ck_assert(json_is_integer(json_object_get(got, in_ckb)));
    ck_assert(json_is_integer(json_object_get(got, in_model)));
    ck_assert(json_is_integer(json_object_get(got, art)));
    /* a weight file gives its header only */
    struct stat st;
    stat(weights, &st);
    ck_assert(json_is_integer(json_object_get(got, weights)));
    ck_assert_int_lt(json_integer_value(json_object_get(got, weights)), st.st_size);
    const char *refused[] = {gold, jpath, txt, passwd, "/etc"};
    for (int k = 0; k < 5; k++) {
      const char *s = json_string_value(json_object_get(got, refused[k]));
      ck_assert_msg(s && strstr(s, "outside the allowed roots"), "%s: %s", refused[k], s ? s : "read");
    }
    const char *rs = json_string_value(json_object_get(got, ref_file));
    if (with_refs) ck_assert_msg(json_is_integer(json_object_get(got, ref_file)), "a --refs file was refused");
    else ck_assert_msg(rs && strstr(rs, "outside the allowed roots"), "a reference was readable with references off");
    /* the host's report, written by the core: every refusal and every read */
    json_t *rep = o.host_report;
    ck_assert_ptr_nonnull(rep);
    ck_assert_int_eq(json_array_size(json_object_get(rep, "refused")), with_refs ? 5 : 6);
    ck_assert_int_eq(json_array_size(json_object_get(rep, "reads")), with_refs ? 6 : 5);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(rep, "notes"), 0)), "probe: done");
    mi_agent_outcome_free(&o);
    json_decref(task);
  }
  /* an agent that needs newer host services is refused, readably */
  snprintf(plug, sizeof plug, "%s/tests/libmi-agent-probe99.so", g_build);
  json_t *task = json_pack("{s:[]}", "read");
  mi_agent_outcome o;
  mi_agent_run_ex(plug, task, g_ckb, rd, 60, NULL, &o);
  const char *msg = json_string_value(json_object_get(o.result, "message"));
  ck_assert_msg(msg && strstr(msg, "needs host services version 99; this mi-gen lends version 1"), "%s", msg ? msg : o.message);
  mi_agent_outcome_free(&o);
  json_decref(task);
}
END_TEST

int main(void) {
  setup_all();
  Suite *s = suite_create("llm_agents");
  /* two cases: CK_RUN_CASE=policies runs the fast ones alone */
  TCase *t = tcase_create("policies"), *e = tcase_create("end_to_end");
  tcase_set_timeout(t, 300);
  tcase_set_timeout(e, 900);
  mi_check_add(t, MI_CHECK_TESTS(test_file_tool_roots, test_no_endpoint, test_failure_policies,
                                 test_budgets, test_references_on_off));
  tcase_add_test(e, test_end_to_end_record_replay);
  suite_add_tcase(s, t);
  suite_add_tcase(s, e);
  const int rc = mi_check_run(s);
  teardown_all();
  return rc;
}
