/* Stage 2 of the verifier: one decoder layer with random weights, composed
 * from the platform's kernels the way the model contract's layer_sequence
 * describes it, run as a prefill and then two decode steps through the
 * same state (the KV cache), against a float64 twin of the layer on the
 * same (dtype-rounded) weights. It catches what single kernels cannot:
 * in-place use, strides between kernels, the KV cache layout and the copies
 * that fill it (memcpy_d2d), positions across calls.
 *
 * The composition is C, one layer driver per model contract, looked up by
 * the contract's id (core/verify/driver.h; core/verify/models/ has one file
 * per contract). This file only draws the weights and inputs from the seed,
 * runs the phases and compares; the test contract's tolerance is what the
 * layer is held to.
 *
 * Results come from the verifier's side: the parent draws the weights and
 * the inputs of every phase (l2_plan) before the child exists; the child
 * uploads them, runs the driver's composition and returns only its outputs,
 * as records (VF_REC_OUT: T*hidden floats); the parent runs the float64
 * twin after the child has ended, compares and decides (l2_judge). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "core/runtime/rng.h"
#include "core/verify/driver.h"
#include "core/verify/verify.h"

static double round_dt(mi_dtype t, double v) {
  if (t == MI_DTYPE_BF16) return mi_bf16_to_f32(mi_f32_to_bf16((float)v));
  if (t == MI_DTYPE_F16) return mi_f16_to_f32(mi_f32_to_f16((float)v));
  return (float)v;
}

/* A weight of the driver's layer drawn from rng: the values the kernels get. */
static double *draw_weight(const vf_layer_weight *ws, mi_dtype wt, uint64_t *rng) {
  size_t n = (size_t)ws->rows * ws->cols;
  double *w = malloc(n * sizeof(double));
  for (size_t i = 0; w && i < n; i++) {
    double z = mi_rng_normal(rng);
    w[i] = ws->init == VF_W_NORM_ONE    ? (float)(1.0 + 0.1 * z)
           : ws->init == VF_W_NORM_ZERO ? (float)(0.1 * z)
           : ws->init == VF_W_F32       ? (float)(z / sqrt((double)ws->cols))
                                        : round_dt(wt, z / sqrt((double)ws->cols));
  }
  return w;
}

/* ---------- the unit ---------- */

static const struct {
  const char *name;
  int T, pos0;
} phases[] = {{"prefill", 5, 0}, {"decode_1", 1, 5}, {"decode_2", 1, 6}};
enum { NPHASE = 3 };

typedef struct l2_set { /* one weight dtype */
  mi_dtype wt;
  char seed_hex[24];
  double **w;            /* [n_weights], the values the kernels get */
  double *x[NPHASE];     /* [T, hidden] */
} l2_set;

typedef struct l2_job {
  const vf_stage_opts *o;
  const char *model_id;
  const vf_layer_driver *drv;
  json_t *dtypes; /* weight dtypes to run: the platform's, among f32/f16/bf16 */
  double tol;
  l2_set *sets;
  int nsets;
} l2_job;

static void l2_plan(l2_job *j) {
  const vf_layer_driver *D = j->drv;
  char seed_label[300];
  snprintf(seed_label, sizeof seed_label, "%s/layer", j->model_id);
  j->sets = calloc(json_array_size(j->dtypes) + 1, sizeof *j->sets);
  size_t di;
  json_t *dv;
  json_array_foreach(j->dtypes, di, dv) {
    mi_dtype wt;
    if (!j->sets || vf_dtype_parse(json_string_value(dv), &wt) != 0) continue;
    l2_set *S = &j->sets[j->nsets++];
    S->wt = wt;
    uint64_t seed = vf_case_seed(j->o->seed, seed_label, 0, (int)di), rng = seed;
    snprintf(S->seed_hex, sizeof S->seed_hex, "0x%016llx", (unsigned long long)seed);
    S->w = calloc((size_t)D->n_weights, sizeof *S->w);
    for (int k = 0; S->w && k < D->n_weights; k++) S->w[k] = draw_weight(&D->weights[k], wt, &rng);
    for (int ph = 0; ph < NPHASE; ph++) {
      S->x[ph] = malloc(sizeof(double) * (size_t)phases[ph].T * (size_t)D->hidden);
      for (int i = 0; S->x[ph] && i < phases[ph].T * D->hidden; i++) S->x[ph][i] = (float)mi_rng_normal(&rng);
    }
  }
}

static void l2_free(l2_job *j) {
  for (int s = 0; j->sets && s < j->nsets; s++) {
    for (int k = 0; j->sets[s].w && k < j->drv->n_weights; k++) free(j->sets[s].w[k]);
    free(j->sets[s].w);
    for (int ph = 0; ph < NPHASE; ph++) free(j->sets[s].x[ph]);
  }
  free(j->sets);
}

static int layer_child(void *arg, int fd) {
  l2_job *j = arg;
  const vf_layer_driver *D = j->drv;
  struct mi_plugin *plug = vf_load_plugin_rec(j->o, fd);
  if (!plug) return 1;
  const mi_platform_iface *pi = plug->iface;
  const char *lacks = !pi->memcpy_h2d ? "memcpy_h2d" : !pi->memcpy_d2h ? "memcpy_d2h"
                      : !pi->memcpy_d2d ? "memcpy_d2d" : NULL;
  for (const char *const *m = D->needs; !lacks && m && *m; m++)
    if (!vf_member_fn(pi, *m)) lacks = *m;
  if (lacks) {
    char msg[200];
    snprintf(msg, sizeof msg, "layer: the platform lacks %s", lacks);
    vf_rec_write(fd, VF_REC_ERROR, -1, 0, msg, NULL, 0);
    mi_plugin_unload(plug);
    return 1;
  }
  const int H = D->hidden, TM = D->t_max;
  for (int s = 0; s < j->nsets; s++) {
    const l2_set *S = &j->sets[s];
    vf_dev d = {.pi = pi, .ctx = plug->ctx};
    void **wd = calloc((size_t)D->n_weights, sizeof *wd);
    int ok = wd && S->w;
    for (int k = 0; ok && k < D->n_weights; k++) {
      const vf_layer_weight *ws = &D->weights[k];
      wd[k] = S->w[k] ? vf_dev_upload(&d, S->w[k], (size_t)ws->rows * ws->cols,
                                      ws->init == VF_W_MATRIX ? S->wt : MI_DTYPE_F32)
                      : NULL;
      ok &= wd[k] != NULL;
    }
    void *dl = ok ? D->dev_new(&d, wd) : NULL;
    float *xf = malloc(sizeof(float) * TM * H), *got = malloc(sizeof(float) * TM * H); /* [T, H] */
    ok &= dl && xf && got;
    for (int ph = 0; ph < NPHASE; ph++) {
      int slot = s * NPHASE + ph, T = phases[ph].T, pos0 = phases[ph].pos0;
      if (!ok || !S->x[ph] || T > TM || pos0 + T > D->n_ctx) {
        vf_rec_write(fd, VF_REC_FAIL, slot, 0, "layer: cannot allocate the layer's buffers", NULL, 0);
        continue;
      }
      for (int i = 0; i < T * H; i++) xf[i] = (float)S->x[ph][i];
      if (D->dev_run(&d, dl, S->wt, xf, T, pos0, got) != 0) vf_rec_write(fd, VF_REC_FAIL, slot, 0, d.err, NULL, 0);
      else vf_rec_write(fd, VF_REC_OUT, slot, 0, NULL, got, sizeof(float) * (size_t)T * H);
    }
    if (dl) D->dev_free(dl);
    free(xf);
    free(got);
    free(wd);
    vf_dev_free_all(&d);
  }
  mi_plugin_unload(plug);
  return 0;
}

/* The parent, after the child has ended: the events vf_unit_report reads. */
static json_t *l2_judge(l2_job *j, const vf_child_result *r) {
  const vf_layer_driver *D = j->drv;
  const int H = D->hidden;
  json_t *ev = json_array();
  size_t off = 0;
  vf_rec rec;
  char why[200] = "";
  int bad = 0, stop = 0;
  double *want = malloc(sizeof(double) * (size_t)D->t_max * H);
  float *got = malloc(sizeof(float) * (size_t)D->t_max * H);
  for (int s = 0; s < j->nsets && !bad && !stop; s++) {
    l2_set *S = &j->sets[s];
    void *st = D->ref_new();
    int failed = 0;
    for (int ph = 0; ph < NPHASE && !bad && !stop; ph++) {
      int slot = s * NPHASE + ph, T = phases[ph].T, pos0 = phases[ph].pos0;
      char where[300];
      snprintf(where, sizeof where, "on %s T=%d pos0=%d (%s weights, %s)", phases[ph].name, T, pos0,
               mi_dtype_name(S->wt), D->shape);
      int have = 0;
      for (;;) {
        int n = vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why);
        if (n < 0) bad = 1;
        if (n <= 0) break;
        if (rec.type == VF_REC_ERROR) {
          json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", rec.msg));
          continue;
        }
        if (rec.index != slot || (rec.type == VF_REC_OUT && rec.payload_len != sizeof(float) * (size_t)T * H)) {
          snprintf(why, sizeof why, "a record for slot %d with %zu bytes where slot %d was due", rec.index,
                   rec.payload_len, slot);
          bad = 1;
          break;
        }
        have = 1;
        break;
      }
      if (bad) break;
      json_t *params = json_pack("{s:i, s:i}", "T", T, "pos0", pos0);
      if (!have) { /* in flight when the child ended */
        json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:s}", "event", "case_start", "case",
                                            phases[ph].name, "index", ph, "dtype", mi_dtype_name(S->wt), "seed",
                                            S->seed_hex, "params", params, "where", where));
        stop = 1;
        break;
      }
      if (failed) { /* later phases depend on a failed one's state: not reported */
        json_decref(params);
        continue;
      }
      json_t *res = json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:f}", "event", "case_end", "case", phases[ph].name,
                              "index", ph, "dtype", mi_dtype_name(S->wt), "seed", S->seed_hex, "params", params,
                              "tol", j->tol);
      char msg[1400] = "";
      int pass = 0;
      if (rec.type == VF_REC_FAIL) {
        snprintf(msg, sizeof msg, "%s %s", rec.msg, where);
      } else if (!st || !want || !got || D->ref_run(st, S->w, S->x[ph], want, T, pos0) != 0) {
        snprintf(msg, sizeof msg, "layer: the float64 reference failed (out of memory) %s", where);
      } else {
        memcpy(got, rec.payload, sizeof(float) * (size_t)T * H);
        double maxabs = 0, refmax = 0;
        int at = 0, nonfinite = 0;
        for (int i = 0; i < T * H; i++) {
          if (fabs(want[i]) > refmax) refmax = fabs(want[i]);
          if (!isfinite(got[i])) {
            nonfinite++;
            continue;
          }
          if (fabs(got[i] - want[i]) > maxabs) maxabs = fabs(got[i] - want[i]), at = i;
        }
        double rel = nonfinite ? INFINITY : maxabs / (refmax > 0 ? refmax : 1);
        json_object_set_new(res, "max_abs_err", json_real(maxabs));
        json_object_set_new(res, "max_rel_err", nonfinite ? json_string("inf") : json_real(rel));
        pass = rel <= j->tol;
        if (!pass && nonfinite)
          snprintf(msg, sizeof msg, "layer: %d NaN/Inf values in the output %s", nonfinite, where);
        else if (!pass)
          snprintf(msg, sizeof msg, "layer: max rel error %.2g > tol %g %s (max abs %.2g at token %d, channel %d: got %.6g, want %.6g)",
                   rel, j->tol, where, maxabs, at / H, at % H, (double)got[at], want[at]);
      }
      json_object_set_new(res, "verdict", json_string(pass ? "PASS" : "FAIL"));
      if (!pass) json_object_set_new(res, "message", json_string(msg));
      json_array_append_new(ev, res);
      failed |= !pass;
    }
    if (st) D->ref_free(st);
  }
  free(want);
  free(got);
  if (!bad && !stop && vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why) != 0) {
    bad = 1;
    if (off >= r->results_len) snprintf(why, sizeof why, "an extra record after the last phase");
  }
  if (bad) {
    char msg[600];
    snprintf(msg, sizeof msg, "layer: the unit's result pipe broke the verifier's protocol (%s): a unit may only "
             "return output buffers", why);
    json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", msg));
  }
  return ev;
}

/* One unit: the layer driver `ld` (NULL: none known) under the id `uid`. */
static json_t *layer_unit(const vf_stage_opts *o, json_t *model, json_t *dtypes, double tol, const char *uid,
                          const vf_layer_driver *ld) {
  const char *mid = json_string_value(json_object_get(model, "id"));
  l2_job job = {o, uid, ld, dtypes, tol, NULL, 0};
  json_t *u;
  vf_child_result r;
  vf_limits lim = o->lim;
  if (!job.drv) {
    char known[512], msg[700];
    vf_model_driver_list(known, sizeof known);
    snprintf(msg, sizeof msg,
             "the verifier has no layer driver for model contract '%s' (core/verify/models/ has: %s)",
             mid ? mid : "?", known);
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", mid ? mid : "?", "verdict",
                  "FAIL", "status", "ERROR", "message", msg);
  } else if ((l2_plan(&job),
              lim.result_cap = VF_REC_SIZE(0) * 8 + (size_t)json_array_size(dtypes) * NPHASE *
                                                      VF_REC_SIZE(sizeof(float) * (size_t)job.drv->t_max * job.drv->hidden),
              vf_run_child(&lim, layer_child, &job, &r)) != 0) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "layer", "id", uid, "verdict", "FAIL",
                  "status", "ERROR", "message", "cannot fork a child");
  } else {
    json_decref(r.events); /* whatever JSON the child wrote is not a result */
    r.events = l2_judge(&job, &r);
    u = vf_unit_report("layer", uid, json_string_value(json_object_get(model, "version")), "layer",
                       &r, o->lim.timeout_s, o->lim.cpu_s);
    vf_child_result_free(&r);
  }
  if (job.drv) l2_free(&job);
  return u;
}

json_t *vf_stage2(const vf_stage_opts *o, json_t *model, json_t *test_contract) {
  const char *mid = json_string_value(json_object_get(model, "id"));
  const vf_model_driver *drv = vf_model_driver_find(mid);
  json_t *units = json_array();
  json_t *dtypes = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(json_object_get(o->platform, "dtypes"), "weights"), i, v) {
    const char *s = json_string_value(v);
    if (s && (!strcmp(s, "f32") || !strcmp(s, "f16") || !strcmp(s, "bf16")))
      json_array_append(dtypes, v);
  }
  json_t *tol = json_object_get(json_object_get(test_contract, "tolerance"), "f32");
  double t = json_is_number(tol) ? json_number_value(tol) : 1e-4;
  int npass = 0, nfail = 0;
  if (drv && !drv->layer && drv->layer_kinds) {
    /* layers of several kinds: a unit per kind, "model.NAME/KIND" */
    for (const vf_layer_kind *k = drv->layer_kinds; k->kind; k++) {
      char uid[300];
      snprintf(uid, sizeof uid, "%s/%s", mid, k->kind);
      json_t *u = layer_unit(o, model, dtypes, t, uid, k->layer);
      if (!strcmp(json_string_value(json_object_get(u, "verdict")), "PASS")) npass++;
      else nfail++;
      json_array_append_new(units, u);
    }
  } else {
    json_t *u = layer_unit(o, model, dtypes, t, mid ? mid : "?", drv ? drv->layer : NULL);
    if (!strcmp(json_string_value(json_object_get(u, "verdict")), "PASS")) npass++;
    else nfail++;
    json_array_append_new(units, u);
  }
  json_decref(dtypes);
  int pass = nfail == 0 && npass > 0;
  return json_pack("{s:i, s:s, s:s, s:o, s:i, s:i}", "stage", 2, "name", "decoder_layer", "verdict",
                   pass ? "PASS" : "FAIL", "units", units, "passed", npass, "failed", nfail);
}
