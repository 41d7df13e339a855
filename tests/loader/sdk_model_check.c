/* loader_sdk_model_check PLUGIN_DIR MODEL_DIR [MI_RUN_JSON]: the model
 * plugin built out of tree from sdk/templates/model, loaded by the core
 * (PLUGIN_DIR first, then the plugins next to this executable) on the CPU
 * platform, against the project's float64 implementation of the same
 * architecture (the verifier's float64 model of contract model.qwen3,
 * the model contract interpreted in float64 (core/verify/interp.c), which shares no code with it):
 *   - logits of every position of a prompt longer than the template's
 *     chunk (64 tokens), in one call;
 *   - a prefill followed by single-token decode steps (KV cache positions);
 *   - with MI_RUN_JSON (the output of `mi-run --json --top-logprobs K`):
 *     every step's top log-probabilities against the float64 log-softmax at
 *     that position, and the greedy token against its argmax.
 * Exit 0 when all agree. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/session.h"
#include "core/verify/interp.h"

/* Weights are bf16 (exact in f32 and f64); the plugin computes in f32, so
 * logits differ from float64 by ~1e-5 on these shapes (tests/qwen3 shows the
 * same); a wrong norm, RoPE pairing or KV row moves them by O(1). */
#define TOL 1e-3

#define SDK_CHECK_NAME "loader_sdk_model_check"
#include "sdk_check_util.h"

static double max_diff(const float *a, const double *b, int V) {
  double m = 0;
  for (int i = 0; i < V; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* mi-run's --json output against the reference: returns the worst |Δlogprob|. */
/* The float64 model the template is held to. */
typedef struct ref_model {
  mi_ckb *ckb;
  vf_interp *in; /* model.qwen3 interpreted in float64 */
  int V;         /* vocabulary */
} ref_model;

static double check_mi_run(const ref_model *rm, const char *path) {
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "%s: cannot open", path);
  if (!f) return INFINITY;
  int32_t ids[512];
  int n = 0, n_prompt = -1, steps = 0;
  json_t *tops[64];
  char line[1 << 16];
  while (fgets(line, sizeof line, f)) {
    json_t *j = json_loads(line, 0, NULL);
    if (!j) continue;
    json_t *p = json_object_get(j, "prompt_ids"), *v;
    size_t i;
    if (p) {
      json_array_foreach(p, i, v) if (n < 448) ids[n++] = (int32_t)json_integer_value(v);
      n_prompt = n;
    } else if (json_object_get(j, "step") && steps < 64 && n < 512) {
      ids[n++] = (int32_t)json_integer_value(json_object_get(j, "token_id"));
      tops[steps++] = json_incref(json_object_get(j, "top_logprobs"));
    }
    json_decref(j);
  }
  fclose(f);
  CHECK(n_prompt > 0 && steps > 0, "%s: no prompt_ids or no steps", path);
  if (n_prompt <= 0 || steps == 0) return INFINITY;
  char err[512];
  /* step s is predicted at position n_prompt - 1 + s */
  double *ref = vf_interp_forward(rm->in, ids, n_prompt + steps - 1, steps, NULL, err, sizeof err);
  CHECK(ref != NULL, "reference: %s", err);
  if (!ref) return INFINITY;
  double worst = 0;
  for (int s = 0; s < steps; s++) {
    const double *r = ref + (size_t)s * rm->V;
    double mx = -INFINITY, sum = 0;
    int arg = 0;
    for (int i = 0; i < rm->V; i++)
      if (r[i] > mx) mx = r[i], arg = i;
    for (int i = 0; i < rm->V; i++) sum += exp(r[i] - mx);
    const double lse = mx + log(sum);
    size_t k;
    json_t *pair;
    json_array_foreach(tops[s], k, pair) {
      int id = (int)json_integer_value(json_array_get(pair, 0));
      double lp = json_number_value(json_array_get(pair, 1));
      CHECK(id >= 0 && id < rm->V, "step %d: token id %d", s, id);
      if (id < 0 || id >= rm->V) break;
      double d = fabs(lp - (r[id] - lse));
      worst = fmax(worst, d);
      CHECK(d < TOL, "mi-run step %d: logprob of %d is %.6f, float64 %.6f", s, id, lp, r[id] - lse);
    }
    /* greedy: the token mi-run chose is the reference's best (or ties it) */
    const int chosen = ids[n_prompt + s];
    CHECK(r[chosen] >= r[arg] - TOL, "mi-run step %d chose %d, float64 argmax %d", s, chosen, arg);
    json_decref(tops[s]);
  }
  free(ref);
  return worst;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: loader_sdk_model_check PLUGIN_DIR MODEL_DIR [MI_RUN_JSON]\n");
    return 2;
  }
  char exe[4096];
  ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[el > 0 ? el : 0] = 0;
  mi_loader_opts lo = {.plugin_dir = argv[1], .exe_path = exe};
  int fatal = 0;
  char err[2048];
  mi_registry *reg = mi_registry_load(&lo, &fatal, err, sizeof err);
  if (!reg || fatal) {
    fprintf(stderr, "loader_sdk_model_check: plugins: %s\n", err);
    return 1;
  }
  mi_options none = {NULL, 0};
  mi_session_opts eo = {.model_dir = argv[2], .platform = "cpu", .model_opts = &none, .tp_size = 1};
  mi_session *e = NULL;
  if (mi_session_open(reg, &eo, &e, err, sizeof err) != 0) {
    fprintf(stderr, "loader_sdk_model_check: %s\n", err);
    return 1;
  }
  CHECK(strcmp(mi_plugin_name(e->model_plugin), "mymodel") == 0, "model plugin is %s, not mymodel",
        mi_plugin_name(e->model_plugin));
  CHECK(e->info.architecture && strcmp(e->info.architecture, "MyModelForCausalLM") == 0,
        "info.architecture is %s", e->info.architecture ? e->info.architecture : "NULL");
  ref_model rm = {mi_ckb_open(MI_CKB_DIR, err, sizeof err), NULL, (int)e->info.vocab_size};
  const mi_ckb_entry *me = rm.ckb ? mi_ckb_find(rm.ckb, "model.qwen3") : NULL;
  if (!me || !(rm.in = vf_interp_open(rm.ckb, me, e->config, e->weights, err, sizeof err))) {
    fprintf(stderr, "loader_sdk_model_check: reference: %s\n",
            me ? err : "no model.qwen3 in " MI_CKB_DIR);
    return 1;
  }
  const int T = 70, V = rm.V; /* more than one 64-token chunk */
  int32_t ids[70];
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919 + 13) % V);
  double *ref = vf_interp_forward(rm.in, ids, T, T, NULL, err, sizeof err); /* [T, V] */
  float *lg = malloc((size_t)T * V * sizeof(float));                  /* [T, V] */
  if (!ref || !lg) {
    fprintf(stderr, "loader_sdk_model_check: reference: %s\n", err);
    return 1;
  }
  mi_seq *s = NULL;
  CHECK(e->M->seq_create(e->model, 128, &s, err, sizeof err) == 0, "seq_create: %s", err);
  if (fails) return 1;

  /* (1) every position in one call */
  double worst = 0;
  CHECK(e->M->forward(e->model, s, ids, T, lg, 1, err, sizeof err) == 0, "forward: %s", err);
  for (int t = 0; t < T && !fails; t++) {
    double d = max_diff(lg + (size_t)t * V, ref + (size_t)t * V, V);
    worst = fmax(worst, d);
    CHECK(d < TOL, "position %d: logits differ from float64 by %g", t, d);
  }
  /* (2) prefill T-5, then five decode steps */
  CHECK(e->M->seq_truncate(e->model, s, 0) == 0 && e->M->seq_len(e->model, s) == 0, "truncate");
  CHECK(e->M->forward(e->model, s, ids, T - 5, lg, 0, err, sizeof err) == 0, "prefill: %s", err);
  for (int t = T - 5; t < T && !fails; t++) {
    CHECK(e->M->forward(e->model, s, ids + t, 1, lg, 0, err, sizeof err) == 0, "decode: %s", err);
    double d = max_diff(lg, ref + (size_t)t * V, V);
    worst = fmax(worst, d);
    CHECK(d < TOL, "decode at position %d: logits differ from float64 by %g", t, d);
  }
  CHECK(e->M->seq_len(e->model, s) == T, "seq_len %lld after %d tokens",
        (long long)e->M->seq_len(e->model, s), T);
  printf("mymodel: max |logit - float64| = %.3g over %d positions and 5 decode steps\n", worst, T);
  if (argc == 4) {
    double w = check_mi_run(&rm, argv[3]);
    printf("mi-run --json: max |logprob - float64| = %.3g\n", w);
  }
  free(lg);
  free(ref);
  e->M->seq_destroy(e->model, s);
  vf_interp_close(rm.in);
  mi_ckb_close(rm.ckb);
  mi_session_close(e);
  mi_registry_free(reg);
  return fails ? 1 : 0;
}
