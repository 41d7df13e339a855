/* Stage 6 of the verifier: performance gates. The gates come from the test
 * contract's "gates" (the deployment constraints put them there), each
 *   {"metric": "decode_tok_s" | "prefill_tok_s" | "ttft_s",
 *    "prompt": P, "generate": G, "min": X  (or "max": X for ttft_s),
 *    "shape": "tiny" (optional: the gate applies only to that model shape,
 *               matched against the folder's config hidden_size/num_layers
 *               as "hidden x layers", e.g. "64x2"), "note": "..."}
 * measured through the engine (mi_generate, greedy, EOS ignored) on a
 * seeded random prompt, best of 2 runs. Whatever the contract states, the
 * default gate runs too: decode growth, the platform work each decode step
 * requests counted after a short and a long prefix (growth.c).
 * The engine's child returns the raw figures of each run (gates_child);
 * the parent computes the metric and decides (gates_judge). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/model_input.h"
#include "core/runtime/session.h"
#include "core/util/file.h"
#include "core/verify/verify.h"

typedef struct s6_job {
  const vf_stage_opts *o;
  json_t *gates;
  const char *workdir;
  char shape[64]; /* "hidden x layers" from config.json, read by the parent */
} s6_job;

/* A gate the parent can run: 1, or 0 (malformed). */
static int gate_ok(json_t *g) {
  const char *metric = json_string_value(json_object_get(g, "metric"));
  int P = (int)json_integer_value(json_object_get(g, "prompt")),
      G = (int)json_integer_value(json_object_get(g, "generate"));
  return metric && P >= 1 && P <= 65536 && G >= 2 && G <= 65536 &&
         (json_is_number(json_object_get(g, "min")) || json_is_number(json_object_get(g, "max"))) &&
         (!strcmp(metric, "decode_tok_s") || !strcmp(metric, "prefill_tok_s") || !strcmp(metric, "ttft_s"));
}

static int gate_applies(const s6_job *j, json_t *g) {
  const char *gs = json_string_value(json_object_get(g, "shape"));
  return !gs || !strcmp(gs, j->shape);
}

static int count_tok(void *user, const mi_gen_token *t) {
  (void)t;
  ++*(int *)user;
  return 0;
}

/* Per gate the raw figures of 2 runs, nothing judged:
 * double [2][4] = {n_prompt, n_gen, prefill_s, decode_s} and ttft_s after
 * (double [2][5]); a run that failed is a FAIL record. */
static int gates_child(void *arg, int fd) {
  s6_job *j = arg;
  char err[2048] = "", msg[2600];
  mi_registry *reg;
  mi_session *e = vf_child_engine(j->o, j->workdir, j->o->model_dir, fd, &reg);
  if (!e) return 1;
  vf_rec_write(fd, VF_REC_OUT, 0, 0, NULL, NULL, 0);
  size_t gi;
  json_t *g;
  json_array_foreach(j->gates, gi, g) {
    if (!gate_ok(g) || !gate_applies(j, g)) continue;
    int P = (int)json_integer_value(json_object_get(g, "prompt")),
        G = (int)json_integer_value(json_object_get(g, "generate"));
    int32_t *ids = malloc((size_t)P * sizeof(int32_t));
    double fig[2][5];
    int ok = ids != NULL;
    if (ids) vf_random_prompt(j->o->seed + gi, ids, P, 0, e->info.vocab_size);
    for (int rep = 0; ok && rep < 2; rep++) {
      mi_gen_params gp;
      vf_greedy_gen_params(&gp, G);
      mi_gen_stats st;
      memset(&st, 0, sizeof st);
      int n = 0;
      if (mi_generate(e, ids, (size_t)P, &gp, count_tok, &n, &st, err, sizeof err) != 0) ok = 0;
      double f[5] = {(double)st.n_prompt, (double)st.n_gen, st.prefill_s, st.decode_s, st.ttft_s};
      memcpy(fig[rep], f, sizeof f);
    }
    free(ids);
    if (ok) vf_rec_write(fd, VF_REC_OUT, 1 + (int)gi, 0, NULL, fig, sizeof fig);
    else {
      snprintf(msg, sizeof msg, "generation failed: %s", ids ? err : "out of memory");
      vf_rec_write(fd, VF_REC_FAIL, 1 + (int)gi, 0, msg, NULL, 0);
    }
  }
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

static json_t *gates_judge(void *arg, const vf_child_result *r) {
  s6_job *j = arg;
  json_t *ev = json_array();
  int ng = (int)json_array_size(j->gates);
  vf_rec *sl = calloc((size_t)ng + 1, sizeof *sl);
  if (!sl || vf_raw_read(r, "stage 6 (performance gates)", ng + 1, sl, ev) < 0 ||
      !vf_ev_engine_load(ev, &sl[0], j->o->model_dir))
    goto done;
  for (int gi = 0; gi < ng; gi++) {
    json_t *g = json_array_get(j->gates, (size_t)gi);
    const char *metric = json_string_value(json_object_get(g, "metric"));
    int P = (int)json_integer_value(json_object_get(g, "prompt")),
        G = (int)json_integer_value(json_object_get(g, "generate"));
    json_t *jmin = json_object_get(g, "min"), *jmax = json_object_get(g, "max");
    char cname[160];
    snprintf(cname, sizeof cname, "%s P=%d G=%d", metric ? metric : "?", P, G);
    const vf_rec *rec = &sl[1 + gi];
    if (!gate_ok(g)) {
      vf_ev_end(ev, cname, gi + 1, 0, 0, NULL, "malformed gate %d in the test contract", gi);
      continue;
    }
    if (!gate_applies(j, g)) {
      vf_ev_end(ev, cname, gi + 1, 1, 0, json_pack("{s:b}", "not_applicable", 1), "gate for shape %s, model is %s: N/A",
                json_string_value(json_object_get(g, "shape")), j->shape);
      continue;
    }
    if (!rec->type) {
      vf_ev_start(ev, cname, gi + 1, cname);
      break;
    }
    if (rec->type == VF_REC_FAIL || rec->payload_len != sizeof(double) * 10) {
      vf_ev_end(ev, cname, gi + 1, 0, 0, NULL, "%s: %s", cname,
                rec->type == VF_REC_FAIL ? rec->msg : "a record of the wrong size");
      continue;
    }
    double fig[2][5], best = NAN;
    memcpy(fig, rec->payload, sizeof fig);
    for (int rep = 0; rep < 2; rep++) {
      double v = !strcmp(metric, "decode_tok_s")    ? (fig[rep][1] - 1) / fmax(fig[rep][3], 1e-9)
                 : !strcmp(metric, "prefill_tok_s") ? fig[rep][0] / fmax(fig[rep][2], 1e-9)
                                                    : fig[rep][4];
      if (!isfinite(v)) continue;
      if (isnan(best) || (json_is_number(jmax) ? v < best : v > best)) best = v;
    }
    int pass = isfinite(best) && (!json_is_number(jmin) || best >= json_number_value(jmin)) &&
               (!json_is_number(jmax) || best <= json_number_value(jmax));
    vf_ev_end(ev, cname, gi + 1, pass, 0, json_pack("{s:f}", "measured", isfinite(best) ? best : -1),
              "%s = %.4g (gate: %s %g)", cname, best, json_is_number(jmin) ? ">=" : "<=",
              json_number_value(json_is_number(jmin) ? jmin : jmax));
  }
done:
  free(sl);
  return ev;
}

json_t *vf_stage6(const vf_stage_opts *o, json_t *contract) {
  json_t *gates = json_object_get(contract, "gates");
  if (!json_is_array(gates) || !json_array_size(gates)) {
    /* no gate stated: the default one still holds (decode growth, counted) */
    json_t *units = json_array();
    json_array_append_new(units, vf_decode_growth(o));
    json_t *s = vf_stage_result(6, "performance", units);
    json_object_set_new(s, "message", json_string("no gates stated (the test contract's \"gates\" is empty): "
                                                  "the default decode-growth gate only"));
    return s;
  }
  char wd[4096], path[4200], err[4400];
  mi_model_input_config_name(o->model_dir, path, sizeof path);
  json_t *cfg = mi_model_input_config(o->model_dir, 0, err, sizeof err);
  if (!cfg)
    return json_pack("{s:i, s:s, s:s, s:s}", "stage", 6, "name", "performance", "verdict", "FAIL", "message", err);
  s6_job j = {o, gates, wd, ""};
  snprintf(j.shape, sizeof j.shape, "%lldx%lld", (long long)json_integer_value(json_object_get(cfg, "hidden_size")),
           (long long)json_integer_value(json_object_get(cfg, "num_hidden_layers")));
  json_decref(cfg);
  if (vf_workdir_new(wd, sizeof wd) != 0)
    return json_pack("{s:i, s:s, s:s, s:s}", "stage", 6, "name", "performance", "verdict", "FAIL",
                     "message", "cannot create a scratch folder");
  json_t *units = json_array();
  size_t cap = VF_REC_SIZE(0) * 8 + (json_array_size(gates) + 1) * VF_REC_SIZE(sizeof(double) * 10);
  json_array_append_new(units, vf_run_unit_raw(o, "performance", "gates", "performance gates", gates_child, &j, 300,
                                               cap, gates_judge));
  json_array_append_new(units, vf_decode_growth(o));
  vf_rmtree(wd);
  return vf_stage_result(6, "performance", units);
}
