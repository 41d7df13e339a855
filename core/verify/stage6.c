/* Stage 6 of the verifier: performance gates. The gates come from the test
 * contract's "gates" (the deployment constraints put them there), each
 *   {"metric": "decode_tok_s" | "prefill_tok_s" | "ttft_s",
 *    "prompt": P, "generate": G, "min": X  (or "max": X for ttft_s),
 *    "shape": "tiny" (optional: the gate applies only to that model shape,
 *               matched against the folder's config hidden_size/num_layers
 *               as "hidden x layers", e.g. "64x2"), "note": "..."}
 * measured through the engine (mi_generate, greedy, EOS ignored) on a
 * seeded random prompt, best of 2 runs. With no gate stated the stage is
 * "N/A" (not a PASS): nothing was required, so nothing was shown. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/session.h"
#include "core/verify/verify.h"

typedef struct s6_job {
  const vf_stage_opts *o;
  json_t *gates;
  const char *workdir;
} s6_job;

static int count_tok(void *user, const mi_gen_token *t) {
  (void)t;
  ++*(int *)user;
  return 0;
}

static int gates_child(void *arg, int fd) {
  s6_job *j = arg;
  char err[2048] = "";
  vf_case_start(fd, "engine_load", 0, j->o->model_dir);
  mi_registry *reg = vf_open_registry(j->o, j->workdir, err, sizeof err);
  mi_session *e = reg ? vf_open_engine(reg, j->o->model_dir, err, sizeof err) : NULL;
  if (!e) {
    vf_case_end(fd, "engine_load", 0, 0, 0, NULL, "the engine cannot load %s: %s", j->o->model_dir,
                err);
    if (reg) mi_registry_free(reg);
    return 1;
  }
  vf_case_end(fd, "engine_load", 0, 1, 0, NULL, NULL);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)e->info.hidden_size,
           (long long)e->info.n_layers);
  int fails = 0;
  size_t gi;
  json_t *g;
  json_array_foreach(j->gates, gi, g) {
    const char *metric = json_string_value(json_object_get(g, "metric"));
    const char *gs = json_string_value(json_object_get(g, "shape"));
    int P = (int)json_integer_value(json_object_get(g, "prompt")),
        G = (int)json_integer_value(json_object_get(g, "generate"));
    json_t *jmin = json_object_get(g, "min"), *jmax = json_object_get(g, "max");
    char cname[160];
    snprintf(cname, sizeof cname, "%s P=%d G=%d", metric ? metric : "?", P, G);
    int ci = (int)gi + 1;
    vf_case_start(fd, cname, ci, cname);
    if (gs && strcmp(gs, shape)) {
      vf_case_end(fd, cname, ci, 1, 0, json_pack("{s:b}", "not_applicable", 1),
                  "gate for shape %s, model is %s: N/A", gs, shape);
      continue;
    }
    if (!metric || P < 1 || G < 2 || (!json_is_number(jmin) && !json_is_number(jmax)) ||
        (strcmp(metric, "decode_tok_s") && strcmp(metric, "prefill_tok_s") &&
         strcmp(metric, "ttft_s"))) {
      vf_case_end(fd, cname, ci, 0, 0, NULL, "malformed gate %d in the test contract", (int)gi);
      fails++;
      continue;
    }
    int32_t *ids = malloc((size_t)P * sizeof(int32_t));
    vf_random_prompt(j->o->seed + gi, ids, P, 0, e->info.vocab_size);
    double best = NAN;
    for (int rep = 0; rep < 2; rep++) {
      mi_gen_params gp;
      memset(&gp, 0, sizeof gp);
      mi_sampler_defaults(&gp.sampling);
      gp.sampling.temp = 0;
      gp.n_predict = G;
      gp.ignore_eos = 1;
      mi_gen_stats st;
      memset(&st, 0, sizeof st);
      int n = 0;
      if (mi_generate(e, ids, (size_t)P, &gp, count_tok, &n, &st, err, sizeof err) != 0) break;
      double v = !strcmp(metric, "decode_tok_s")    ? (st.n_gen - 1) / fmax(st.decode_s, 1e-9)
                 : !strcmp(metric, "prefill_tok_s") ? st.n_prompt / fmax(st.prefill_s, 1e-9)
                                                    : st.ttft_s;
      if (isnan(best) || (json_is_number(jmax) ? v < best : v > best)) best = v;
    }
    free(ids);
    if (isnan(best)) {
      vf_case_end(fd, cname, ci, 0, 0, NULL, "%s: generation failed: %s", cname, err);
      fails++;
      continue;
    }
    int pass = (!json_is_number(jmin) || best >= json_number_value(jmin)) &&
               (!json_is_number(jmax) || best <= json_number_value(jmax));
    fails += !pass;
    vf_case_end(fd, cname, ci, pass, 0, json_pack("{s:f}", "measured", best),
                "%s = %.4g (gate: %s %g)", cname, best, json_is_number(jmin) ? ">=" : "<=",
                json_number_value(json_is_number(jmin) ? jmin : jmax));
  }
  mi_session_close(e);
  mi_registry_free(reg);
  return fails != 0;
}

json_t *vf_stage6(const vf_stage_opts *o, json_t *contract) {
  json_t *gates = json_object_get(contract, "gates");
  if (!json_is_array(gates) || !json_array_size(gates))
    return json_pack("{s:i, s:s, s:s, s:s, s:o, s:i, s:i}", "stage", 6, "name", "performance",
                     "verdict", "N/A", "message",
                     "no gates stated (the test contract's \"gates\" is empty): nothing measured",
                     "units", json_array(), "passed", 0, "failed", 0);
  char wd[4096];
  if (vf_workdir_new(wd, sizeof wd) != 0)
    return json_pack("{s:i, s:s, s:s, s:s}", "stage", 6, "name", "performance", "verdict", "FAIL",
                     "message", "cannot create a scratch folder");
  s6_job j = {o, gates, wd};
  json_t *units = json_array();
  json_array_append_new(
      units, vf_run_unit(o, "performance", "gates", "performance gates", gates_child, &j, 300));
  vf_rmtree(wd);
  return vf_stage_result(6, "performance", units);
}
