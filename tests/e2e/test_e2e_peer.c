/* End-to-end: mi-run against llama.cpp goldens (tests/goldens/<name>.json).
 *
 * For every golden (one Check loop iteration each) and every case in it:
 *   mi-run -m $MI_BUILD_DIR/models/<golden name> -p PROMPT -n STEPS --temp 0
 *          --ignore-eos --json --top-logprobs K  [$MI_E2E_ARGS...]
 * is run with fork/exec (the prompt travels in argv: quotes, newlines and
 * special tokens arrive untouched) and its JSON lines are checked:
 *   - prompt_ids equal the golden's (llama.cpp's tokenizer, specials parsed);
 *   - at every step the greedy token equals the golden's, until a step where
 *     the golden's top-1 and top-2 logprobs are within NEAR_TIE: there a
 *     different pick is a genuine tie, not a bug, so the rest of that case is
 *     skipped (counted and printed);
 *   - top-K logprobs: each id in both lists agrees within TOL, and an id in
 *     one list may be missing from the other only near that list's K-th
 *     value (else the engine's ranking is wrong).
 *
 * Why TOL = 1e-3. The goldens come from llama.cpp with an all-F32 GGUF (the
 * bf16 checkpoint widened exactly, so both engines see identical weights)
 * and an F32 KV cache, logprobs renormalised in float64. Against a float64
 * Qwen3 forward pass of the same HF files (tools/peer/ref_forward.mjs, run by
 * goldens.mjs --check-ref) llama.cpp's top-10 logprobs were off by at most
 * 1.2e-5 (tiny), 1.8e-5 (tiny-untied) and 2.4e-5 (small) over 8 prompts x 32
 * steps (logits have std ~5 with these weights). An engine computing in f32
 * with its own summation order, rsqrt and exp lands within a few 1e-5 of
 * exact, so 1e-3 keeps a margin of 40x and more, while an
 * engine that rounds activations or the KV cache to bf16/f16 (measured
 * 5e-3 .. 0.14 for llama.cpp itself) fails, as it should in an exact test.
 * NEAR_TIE = 2*TOL: two logprobs each off by up to TOL can swap order only
 * when the golden gap is at most 2*TOL.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/util/check_main.h"

#define TOL 1e-3
#define NEAR_TIE (2 * TOL)
#define MAX_TOPK 64
#define MAX_EXTRA_ARGS 32

/* MI_TEST_QUICK (the sanitizer tree sets it, tests/CMakeLists.txt): the
 * goldens share their 8 prompts, so each prompt (its tokenizer path:
 * quotes, newlines, CJK, emoji, special tokens) runs once, on one of the
 * models (golden g takes the cases c with c % n_goldens == g), for its
 * first QUICK_STEPS steps: the sanitizers look for memory errors, and the
 * cost there is one mi-run process per case; the Release run and the
 * CPU-variant reruns compare every case and step. */
#define QUICK_STEPS 4

static glob_t g_goldens; /* the golden files (glob of tests/goldens), sorted */

typedef struct {
  json_int_t id;
  double lp;
} tok_lp;

typedef struct {
  int cases, steps_compared, near_tie_divergences;
  double max_abs_dlp;
} stats;

static const char *need_env(const char *name) {
  const char *v = getenv(name);
  ck_assert_msg(v && *v, "environment variable %s is not set (run through ctest)", name);
  return v;
}

/* Run argv[0] with argv, stdout captured into *out (NUL-terminated, malloc'd);
 * stderr passes through. Returns the exit status, or -1 if it did not exit. */
static int run_capture(char *const argv[], char **out) {
  int fds[2];
  ck_assert_msg(pipe(fds) == 0, "pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv);
    fprintf(stderr, "test_e2e_peer: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ck_assert(buf != NULL);
  for (;;) {
    if (cap - len < 4096) {
      cap *= 2;
      buf = realloc(buf, cap);
      ck_assert(buf != NULL);
    }
    ssize_t n = read(fds[0], buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  *out = buf;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* [[id, lp], ...] -> out[0..n); returns n (at most max). */
static int parse_pairs(json_t *arr, tok_lp *out, int max, const char *what) {
  ck_assert_msg(json_is_array(arr), "%s: not an array", what);
  int n = 0;
  for (size_t i = 0; i < json_array_size(arr) && n < max; i++) {
    json_t *p = json_array_get(arr, i);
    ck_assert_msg(json_is_array(p) && json_array_size(p) == 2 && json_is_integer(json_array_get(p, 0)) &&
                      json_is_number(json_array_get(p, 1)),
                  "%s: entry %zu is not [id, logprob]", what, i);
    out[n].id = json_integer_value(json_array_get(p, 0));
    out[n].lp = json_number_value(json_array_get(p, 1));
    n++;
  }
  return n;
}

/* FNV-1a 32 of a whole file (same as tools/peer/goldens.mjs); 0 on read error. */
static int fnv1a32_file(const char *path, unsigned *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  static unsigned char buf[1 << 16];
  uint32_t h = 0x811c9dc5u;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x01000193u;
  int ok = !ferror(f);
  fclose(f);
  *out = h;
  return ok;
}

static const tok_lp *find_id(const tok_lp *v, int n, json_int_t id) {
  for (int i = 0; i < n; i++)
    if (v[i].id == id) return &v[i];
  return NULL;
}

static double min_lp(const tok_lp *v, int n) {
  double m = INFINITY;
  for (int i = 0; i < n; i++) m = fmin(m, v[i].lp);
  return m;
}

/* Ids of `a` absent from `b` are allowed only within 2*TOL of a's smallest
 * entry (they may fall just outside b's top-K); anything higher means b
 * ranks tokens differently. */
static void check_membership(const tok_lp *a, int na, const tok_lp *b, int nb, const char *aname, const char *bname,
                             const char *where) {
  double floor_a = min_lp(a, na);
  for (int i = 0; i < na; i++) {
    if (find_id(b, nb, a[i].id)) continue;
    ck_assert_msg(a[i].lp <= floor_a + 2 * TOL,
                  "%s: token %lld (logprob %.6f in %s) is missing from %s's top-%d (it is %.2e above %s's K-th)",
                  where, (long long)a[i].id, a[i].lp, aname, bname, nb, a[i].lp - floor_a, aname);
  }
}

static void check_case(const char *gpath, int ci, json_t *gc, int top_k, const char *mirun, const char *model,
                       stats *s) {
  const char *prompt = json_string_value(json_object_get(gc, "prompt"));
  json_t *gids = json_object_get(gc, "prompt_ids");
  json_t *gsteps = json_object_get(gc, "steps");
  ck_assert_msg(prompt && json_is_array(gids) && json_is_array(gsteps), "%s: case %d lacks prompt/prompt_ids/steps",
                gpath, ci);
  int nsteps = (int)json_array_size(gsteps);
  if (getenv("MI_TEST_QUICK") && nsteps > QUICK_STEPS) nsteps = QUICK_STEPS;

  char nbuf[32], kbuf[32];
  snprintf(nbuf, sizeof nbuf, "%d", nsteps);
  snprintf(kbuf, sizeof kbuf, "%d", top_k);
  char *argv[32 + MAX_EXTRA_ARGS];
  int ac = 0;
  argv[ac++] = (char *)mirun;
  argv[ac++] = "-m";
  argv[ac++] = (char *)model;
  argv[ac++] = "-p";
  argv[ac++] = (char *)prompt;
  argv[ac++] = "-n";
  argv[ac++] = nbuf;
  argv[ac++] = "--temp";
  argv[ac++] = "0";
  argv[ac++] = "--ignore-eos";
  argv[ac++] = "--json";
  argv[ac++] = "--top-logprobs";
  argv[ac++] = kbuf;
  /* MI_E2E_ARGS: extra whitespace-separated mi-run arguments (e.g. "-t 2"). */
  char *extra = getenv("MI_E2E_ARGS") ? strdup(getenv("MI_E2E_ARGS")) : NULL;
  for (char *save = NULL, *tok = extra ? strtok_r(extra, " \t", &save) : NULL; tok && ac < 31 + MAX_EXTRA_ARGS;
       tok = strtok_r(NULL, " \t", &save))
    argv[ac++] = tok;
  argv[ac] = NULL;

  char *out = NULL;
  int rc = run_capture(argv, &out);
  ck_assert_msg(rc == 0, "%s case %d: mi-run exited with status %d (prompt %.40s...)", gpath, ci, rc, prompt);

  char where[512];
  int line_no = 0, step = 0, diverged = 0, got_prompt = 0;
  for (char *line = out, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    line_no++;
    if (!*line) continue;
    json_error_t jerr;
    json_t *o = json_loads(line, 0, &jerr);
    ck_assert_msg(o && json_is_object(o), "%s case %d: mi-run stdout line %d is not a JSON object: %s", gpath, ci,
                  line_no, o ? "not an object" : jerr.text);
    if (!got_prompt) {
      json_t *mids = json_object_get(o, "prompt_ids");
      ck_assert_msg(json_is_array(mids), "%s case %d: first JSON line has no prompt_ids", gpath, ci);
      if (!json_equal(mids, gids)) {
        size_t i = 0;
        while (i < json_array_size(mids) && i < json_array_size(gids) &&
               json_equal(json_array_get(mids, i), json_array_get(gids, i)))
          i++;
        ck_abort_msg("%s case %d: prompt_ids differ from llama.cpp's at index %zu (%zu vs %zu ids; mi-run %lld, "
                     "llama.cpp %lld)",
                     gpath, ci, i, json_array_size(mids), json_array_size(gids),
                     (long long)json_integer_value(json_array_get(mids, i)),
                     (long long)json_integer_value(json_array_get(gids, i)));
      }
      got_prompt = 1;
      json_decref(o);
      continue;
    }
    json_t *jstep = json_object_get(o, "step");
    if (!json_is_integer(jstep)) { /* e.g. a final stats line */
      json_decref(o);
      continue;
    }
    if (diverged || step >= nsteps) {
      json_decref(o);
      step++;
      continue;
    }
    snprintf(where, sizeof where, "%s case %d step %d", gpath, ci, step);
    ck_assert_msg(json_integer_value(jstep) == step, "%s: \"step\" is %lld", where,
                  (long long)json_integer_value(jstep));
    json_t *gs = json_array_get(gsteps, (size_t)step);
    tok_lp g[MAX_TOPK], m[MAX_TOPK];
    int ng = parse_pairs(json_object_get(gs, "top"), g, top_k, "golden top");
    int nm = parse_pairs(json_object_get(o, "top_logprobs"), m, top_k, "mi-run top_logprobs");
    ck_assert_msg(ng >= 2 && nm == ng, "%s: mi-run gave %d top_logprobs, expected %d", where, nm, ng);

    for (int i = 0; i < ng; i++) {
      const tok_lp *x = find_id(m, nm, g[i].id);
      if (!x) continue;
      double d = fabs(x->lp - g[i].lp);
      if (d > s->max_abs_dlp) s->max_abs_dlp = d;
      ck_assert_msg(d <= TOL, "%s: token %lld logprob %.6f, llama.cpp %.6f (|diff| %.2e > %.0e)", where,
                    (long long)g[i].id, x->lp, g[i].lp, d, TOL);
    }
    check_membership(g, ng, m, nm, "llama.cpp", "mi-run", where);
    check_membership(m, nm, g, ng, "mi-run", "llama.cpp", where);

    json_int_t gtok = json_integer_value(json_object_get(gs, "token_id"));
    json_t *jtok = json_object_get(o, "token_id");
    ck_assert_msg(json_is_integer(jtok), "%s: no token_id", where);
    json_int_t mtok = json_integer_value(jtok);
    json_t *jlp = json_object_get(o, "logprob");
    const tok_lp *gsel = find_id(g, ng, mtok);
    if (json_is_number(jlp) && gsel)
      ck_assert_msg(fabs(json_number_value(jlp) - gsel->lp) <= TOL, "%s: logprob %.6f of token %lld, llama.cpp %.6f",
                    where, json_number_value(jlp), (long long)mtok, gsel->lp);
    if (mtok != gtok) {
      double gap = g[0].lp - g[1].lp;
      ck_assert_msg(gap <= NEAR_TIE,
                    "%s: greedy token %lld, llama.cpp %lld (golden top-1/top-2 gap %.2e > %.0e: not a tie)", where,
                    (long long)mtok, (long long)gtok, gap, NEAR_TIE);
      fprintf(stderr, "%s: near-tie divergence (gap %.2e): mi-run %lld, llama.cpp %lld; rest of case skipped\n", where,
              gap, (long long)mtok, (long long)gtok);
      s->near_tie_divergences++;
      diverged = 1;
    }
    s->steps_compared++;
    json_decref(o);
    step++;
  }
  ck_assert_msg(got_prompt, "%s case %d: mi-run printed no JSON (is --json implemented?)", gpath, ci);
  ck_assert_msg(step >= nsteps, "%s case %d: mi-run printed %d steps, expected %d", gpath, ci, step, nsteps);
  s->cases++;
  free(extra);
  free(out);
}

START_TEST(test_golden) {
  const char *gpath = g_goldens.gl_pathv[_i];
  const char *build = need_env("MI_BUILD_DIR");
  char mirun[4096], model[4096];
  snprintf(mirun, sizeof mirun, "%s/bin/mi-run", build);
  ck_assert_msg(access(mirun, X_OK) == 0, "%s: not found or not executable; build the mi-run target first", mirun);

  json_error_t jerr;
  json_t *gold = json_load_file(gpath, 0, &jerr);
  ck_assert_msg(gold != NULL, "%s:%d: %s", gpath, jerr.line, jerr.text);
  /* Model dir name = golden file name without .json (made by the e2e_model_* fixture). */
  const char *base = strrchr(gpath, '/');
  base = base ? base + 1 : gpath;
  snprintf(model, sizeof model, "%s/models/%.*s", build, (int)(strlen(base) - 5), base);
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/config.json", model);
  ck_assert_msg(access(cfg, R_OK) == 0, "%s: missing; the e2e_model_* ctest fixture makes it (run via ctest)", cfg);

  /* The golden pins the exact weights: if mi-mkmodel's generator changed,
   * say so instead of failing later on mysterious logprob differences. */
  const char *want = json_string_value(json_object_get(json_object_get(gold, "model"), "safetensors_fnv1a32"));
  if (want) {
    char st[4200], have[16];
    unsigned h = 0;
    snprintf(st, sizeof st, "%s/model.safetensors", model);
    ck_assert_msg(fnv1a32_file(st, &h), "%s: cannot read", st);
    snprintf(have, sizeof have, "%08x", h);
    ck_assert_msg(strcmp(have, want) == 0,
                  "%s: fnv1a32 %s, but %s was made from weights with %s: mi-mkmodel's output changed; regenerate the "
                  "goldens (tools/peer/README.md)",
                  st, have, gpath, want);
  }

  json_t *tk = json_object_get(gold, "top_k");
  int top_k = json_is_integer(tk) ? (int)json_integer_value(tk) : 10;
  ck_assert_msg(top_k >= 2 && top_k <= MAX_TOPK, "%s: top_k %d out of range", gpath, top_k);
  json_t *cases = json_object_get(gold, "cases");
  ck_assert_msg(json_is_array(cases) && json_array_size(cases) > 0, "%s: no cases", gpath);

  stats s = {0};
  const int quick = getenv("MI_TEST_QUICK") != NULL;
  for (size_t ci = 0; ci < json_array_size(cases); ci++)
    if (!quick || ci % g_goldens.gl_pathc == (size_t)_i)
      check_case(gpath, (int)ci, json_array_get(cases, ci), top_k, mirun, model, &s);
  ck_assert_int_gt(s.cases, 0);
  fprintf(stderr, "%s: %d cases, %d steps compared, max |dlogprob| %.2e (tol %.0e), %d near-tie divergences\n",
          base, s.cases, s.steps_compared, s.max_abs_dlp, TOL, s.near_tie_divergences);
  json_decref(gold);
}
END_TEST

START_TEST(test_no_goldens) {
  ck_abort_msg("no tests/goldens/*.json under $MI_SOURCE_DIR (regenerate with tools/peer/goldens.mjs)");
}
END_TEST

int main(void) {
  /* An exact test (see the top): the CPU platform's exact matmul path.
   * Its default on AVX512_BF16 hosts rounds prefill activations to bf16
   * (matmul_act=auto, the matmul contract's bf16_activations mode), which
   * moves these logprobs by 3e-3 .. 3e-2 against F32-GGUF goldens; mi-run
   * inherits this. */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  const char *src = getenv("MI_SOURCE_DIR");
  char pat[4096];
  snprintf(pat, sizeof pat, "%s/tests/goldens/*.json", src ? src : ".");
  int grc = glob(pat, 0, NULL, &g_goldens); /* glob sorts by name */

  Suite *su = suite_create("e2e_peer");
  TCase *tc = tcase_create("llama.cpp goldens");
  tcase_set_timeout(tc, 300); /* one golden: 8 mi-run calls; generous for sanitizer builds */
  if (grc == 0 && g_goldens.gl_pathc > 0)
    tcase_add_loop_test(tc, test_golden, 0, (int)g_goldens.gl_pathc);
  else
    tcase_add_test(tc, test_no_goldens);
  suite_add_tcase(su, tc);
  const int failed = mi_check_run(su) != EXIT_SUCCESS;
  if (grc == 0) globfree(&g_goldens);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
