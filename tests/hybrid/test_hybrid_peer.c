/* The hybrid's float64 reference (tests/hybrid/ref/qwen35_f64.c) against
 * llama.cpp's `qwen35` on the same weights: the goldens in
 * tests/goldens/hybrid/ (tools/peer/goldens.mjs --family qwen35: greedy
 * tokens and top-10 logprobs from llama.cpp on an all-F32 GGUF written by
 * tools/peer/hf2gguf.mjs). Each golden's checkpoint is remade from its
 * recorded mi-mkmodel arguments (and its bytes checked against the recorded
 * hash); the reference is teacher-forced on the golden's tokens with its
 * sequence state carried (prefill, then one token per step), and at every
 * step its greedy token and its log-probabilities of llama.cpp's top 10 must
 * agree. Two independent implementations and the converter's value changes
 * (1+w norms, -exp(A_log), conv squeeze, value-head reorder) all meet here. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/safetensors.h"
#include "tests/hybrid/f64_model.h"
#include "tests/hybrid/ref/qwen35_f64.h"
#include "tests/safetensors/st_writer.h"
#include "tests/hybrid/golden_steps.h"
#include "tests/util/check_main.h"
#include "tests/util/test_json.h"
#include "tests/util/test_logits.h"

/* Tolerance on |logprob(reference) - logprob(llama.cpp)| over the top 10.
 * llama.cpp computes in float32 (F32 weights and KV cache); on the Qwen3
 * goldens its error against a float64 reference is ~1e-5..1e-4. 2e-3 is
 * ten times the worst seen on these shapes, far below a real defect (a
 * missing 1+w, gate, conv SiLU, beta or head reorder moves logprobs by
 * O(0.1..1)). */
#define LOGPROB_TOL 2e-3

/* MI_TEST_QUICK (the sanitizer tree sets it, tests/CMakeLists.txt): the
 * goldens of the two tiny shapes only (tied and untied, a layer_types list
 * and an interval: every layer kind and weight layout), the first case of
 * each, QUICK_STEPS steps (the prefill and decode steps with the state
 * carried). Under ASan most of the time goes to widening each checkpoint
 * to float64 (vf_weight_f64), so the other goldens (the same code on the
 * `small` shape and on the evolution's probes) would add minutes and no
 * path; the Release run holds every golden, case and step to llama.cpp. */
#define QUICK_STEPS 4
static int g_quick;

/* The `small` golden has the 8 prompts of tools/peer/prompts.json; the
 * float64 reference teacher-forces only the two of prompts_short.json there
 * (its cost per step is ~50x the tiny shapes', and the sanitizer run must
 * stay short). test_hybrid_runtime holds the qwen35 plugin to all eight. */
static int reference_skips(const json_t *g, const json_t *c) {
  const char *shape = json_string_value(json_object_get(json_object_get(g, "model"), "shape"));
  if (!shape || strcmp(shape, "small") != 0) return 0;
  char f[1024];
  snprintf(f, sizeof f, "%s/tools/peer/prompts_short.json", getenv("MI_SOURCE_DIR"));
  json_t *ps = json_load_file(f, 0, NULL);
  ck_assert_msg(ps, "%s: cannot read", f);
  const char *prompt = json_string_value(json_object_get(c, "prompt"));
  int found = 0;
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(ps, "prompts"), i, p) found |= prompt && !strcmp(prompt, json_string_value(p));
  json_decref(ps);
  return !found;
}

static void check_golden(const char *file) {
  json_error_t je;
  json_t *g = json_load_file(file, 0, &je);
  ck_assert_msg(g, "%s: %s", file, je.text);
  char *tmp = tw_mkdtemp("hybrid-peer");
  char *dir = tw_path(tmp, "m");
  /* the checkpoint from the golden's own mi-mkmodel arguments */
  char cmd[4096];
  int len = snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel'", getenv("MI_BUILD_DIR"));
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(json_object_get(g, "model"), "mkmodel_args"), i, a) len +=
      snprintf(cmd + len, sizeof cmd - (size_t)len, " '%s'", json_string_value(a));
  snprintf(cmd + len, sizeof cmd - (size_t)len, " --out '%s' >/dev/null", dir);
  ck_assert_msg(system(cmd) == 0, "%s", cmd);
  hy_check_golden_weights(g, dir, file,
                          ": regenerate it with tools/peer/goldens.mjs --family qwen35 "
                          "(tools/peer/README.md)");
  hy_f64 f = hy_f64_open(dir);
  char err[1024] = "";
  const int V = vf_qwen35_vocab(f.m);
  double *lg = malloc((size_t)V * sizeof(double)), *lp = malloc((size_t)V * sizeof(double));
  double worst = 0;
  int steps_total = 0, ties = 0, cases = 0;
  json_t *c;
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    if (reference_skips(g, c)) continue;
    if (g_quick && cases == 1) break;
    cases++;
    json_t *steps = json_object_get(c, "steps");
    int ns = (int)json_array_size(steps), np;
    if (g_quick && ns > QUICK_STEPS) ns = QUICK_STEPS;
    int32_t *ids = hy_golden_ids(c, ns, &np);
    vf_qwen35_seq *s = vf_qwen35_seq_new(f.m, np + ns);
    for (int t = 0; t < ns; t++) {
      /* step t predicts ids[np + t]: prefill the prompt, then one token per step */
      int rc = t == 0 ? vf_qwen35_forward(f.m, s, ids, np, 1, lg, 0, NULL, err, sizeof err)
                      : vf_qwen35_forward(f.m, s, ids + np + t - 1, 1, 1, lg, 0, NULL, err, sizeof err);
      ck_assert_msg(rc == 0, "%s", err);
      mi_test_log_softmax_of(NULL, lg, lp, V);
      hy_check_step(steps, t, lp, V, ids[np + t], LOGPROB_TOL, file, i, &worst, &ties);
      steps_total++;
    }
    vf_qwen35_seq_free(s);
    free(ids);
  }
  fprintf(stderr, "%s: %d cases, %d steps%s, max |logprob - llama.cpp| %.3g over the top 10, %d near-tie greedy picks\n",
          strrchr(file, '/') + 1, cases, steps_total, g_quick ? " (MI_TEST_QUICK)" : "", worst, ties);
  ck_assert_int_gt(steps_total, 0);
  free(lg);
  free(lp);
  hy_f64_close(&f);
  json_decref(g);
  free(dir);
  tw_rmtree(tmp);
  free(tmp);
}

START_TEST(reference_matches_llamacpp) {
  char gdir[1024];
  snprintf(gdir, sizeof gdir, "%s/tests/goldens/hybrid", getenv("MI_SOURCE_DIR"));
  DIR *d = opendir(gdir);
  ck_assert_msg(d, "%s: no hybrid goldens", gdir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
    if (g_quick && strncmp(e->d_name, "tiny-", 5)) continue;
    char f[2048];
    snprintf(f, sizeof f, "%s/%s", gdir, e->d_name);
    check_golden(f);
    n++;
  }
  closedir(d);
  ck_assert_int_ge(n, g_quick ? 2 : 1);
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite("hybrid_peer", "peer", 300, NULL, NULL,
                        MI_CHECK_TESTS(reference_matches_llamacpp));
}

int main(void) {
  g_quick = getenv("MI_TEST_QUICK") != NULL;
  return mi_check_run(suite());
}
