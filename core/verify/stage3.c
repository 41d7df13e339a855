/* Stage 3 of the verifier: (1) the model folder's weight files against the
 * model contract's weight map (key set, shapes from the config formulas);
 * (2) read-back through the engine: the model plugin under test, loaded by
 * the engine on the platform plugin, must have read every tensor from the
 * folder it was given. Proof by perturbation: in a scratch copy of the
 * folder, each tensor in turn gets seeded multiplicative noise (±50%, plus
 * a small absolute part so zeros move), the plugin loads the copy again and
 * the logits of a seeded prompt must change; the tensor's bytes are then
 * restored. A tensor whose perturbation leaves the logits unchanged was not
 * read from the given path (baked-in weights, a fixed path, a tensor the
 * forward pass never uses). Each part runs in a child, since it mmaps files
 * that may be hostile and calls plugin code. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/runtime/session.h"
#include "core/runtime/safetensors.h"
#include "core/verify/verify.h"

/* Relative change of the logits below which a perturbation "did nothing":
 * f32 runs of the same weights are bit-identical here, while ±50% noise
 * on any tensor the forward reads moves logits by 1e-3 .. 1 relative. */
#define S3_MIN_CHANGE 1e-6
#define S3_PROMPT 8

typedef struct s3_job {
  const mi_ckb *ckb;
  const char *model_dir;
} s3_job;

static int weights_child(void *arg, int fd) {
  s3_job *j = arg;
  char where[4200];
  snprintf(where, sizeof where, "in %s (case files)", j->model_dir);
  vf_emit(fd, json_pack("{s:s, s:s, s:i, s:s}", "event", "case_start", "case", "files", "index", 0,
                        "where", where));
  json_t *r = NULL;
  char err[1024];
  int n = mi_ckb_check_weights(j->ckb, j->model_dir, &r, err, sizeof err);
  json_t *ev = json_pack("{s:s, s:s, s:i}", "event", "case_end", "case", "files", "index", 0);
  if (n < 0) {
    json_object_set_new(ev, "verdict", json_string("FAIL"));
    json_object_set_new(ev, "message", json_string(err));
  } else {
    json_object_update(ev, r);
    json_object_set_new(ev, "verdict", json_string(n ? "FAIL" : "PASS"));
    if (n) {
      char msg[1200];
      snprintf(msg, sizeof msg, "weights: %d problem%s, first: %s", n, n == 1 ? "" : "s",
               json_string_value(json_array_get(json_object_get(r, "problems"), 0)));
      json_object_set_new(ev, "message", json_string(msg));
    }
  }
  json_object_set_new(ev, "max_rel_err", json_real(0));
  vf_emit(fd, ev);
  json_decref(r);
  return n != 0;
}

typedef struct rb_job {
  const vf_stage_opts *o;
  const char *model_dir;
  const char *workdir;
} rb_job;

static double max_abs(const float *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)a[i]));
  return m;
}

static double max_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= m)) m = d; /* NaN wins */
  }
  return m;
}

/* Logits of the last prompt token, model loaded directly from dir. */
static float *logits_from(const mi_session *e, const char *dir, const int32_t *ids, int n, char *err,
                          size_t err_len) {
  vf_loaded l;
  if (vf_load_direct(e, dir, &l, err, err_len) != 0) return NULL;
  float *lg = malloc((size_t)l.V * sizeof(float)); /* [V] */
  int32_t tok;
  if (lg && vf_greedy(l.M, l.m, l.V, ids, n, 1, lg, &tok, err, err_len) != 0) {
    free(lg);
    lg = NULL;
  }
  vf_unload_direct(&l);
  return lg;
}

static int readback_child(void *arg, int fd) {
  rb_job *j = arg;
  char err[2048] = "", copy[4200];
  vf_case_start(fd, "engine_load", 0, j->model_dir);
  mi_registry *reg = vf_open_registry(j->o, j->workdir, err, sizeof err);
  mi_session *e = reg ? vf_open_engine(reg, j->model_dir, err, sizeof err) : NULL;
  if (!e) {
    vf_case_end(fd, "engine_load", 0, 0, 0, NULL, "the engine cannot load %s: %s", j->model_dir,
                err);
    if (reg) mi_registry_free(reg);
    return 1;
  }
  const int64_t V = e->info.vocab_size;
  int32_t ids[S3_PROMPT], tok;
  vf_random_prompt(j->o->seed ^ 0x53334, ids, S3_PROMPT, 0, V);
  float *base = malloc((size_t)V * sizeof(float)); /* [V] */
  int rc = 1;
  if (!base || vf_greedy(e->M, e->model, V, ids, S3_PROMPT, 1, base, &tok, err, sizeof err) != 0) {
    vf_case_end(fd, "engine_load", 0, 0, 0, NULL, "forward pass through the engine failed: %s",
                err);
    goto out;
  }
  const double scale = max_abs(base, V);
  if (!isfinite(scale) || scale == 0) {
    vf_case_end(fd, "engine_load", 0, 0, 0, NULL, "the engine's logits are %s",
                scale == 0 ? "all zero" : "not finite");
    goto out;
  }
  vf_case_end(fd, "engine_load", 0, 1, 0, json_pack("{s:f}", "max_abs_logit", scale), NULL);

  /* A copy must give the same logits, or changes below mean nothing. */
  snprintf(copy, sizeof copy, "%s/copy", j->workdir);
  vf_case_start(fd, "copy", 1, copy);
  float *lc = NULL;
  if (vf_copy_model_dir(j->model_dir, copy, err, sizeof err) != 0 ||
      !(lc = logits_from(e, copy, ids, S3_PROMPT, err, sizeof err))) {
    vf_case_end(fd, "copy", 1, 0, 0, NULL, "cannot run a copy of the model folder: %s", err);
    goto out;
  }
  double d0 = max_diff(lc, base, V) / scale;
  free(lc);
  if (!(d0 <= S3_MIN_CHANGE)) {
    vf_case_end(
        fd, "copy", 1, 0, d0, NULL,
        "an identical copy of the model folder gives different logits (max rel difference %.3g): "
        "outputs do not depend on the weights alone",
        d0);
    goto out;
  }
  vf_case_end(fd, "copy", 1, 1, d0, NULL, NULL);

  /* Every tensor perturbed in turn; the verdicts are emitted after a
   * summary case, so the unit's message names the pattern: nothing read
   * from the folder (baked-in weights, another path) or some tensors unused. */
  rc = 0;
  size_t nt = mi_weights_count(e->weights), n_unread = 0, n_run = 0;
  json_t *evs = json_array();
  const char *first_unread = NULL;
  for (size_t i = 0; i < nt; i++) {
    mi_weight_info wi;
    if (mi_weights_at(e->weights, i, &wi) != 0) continue;
    char cname[300];
    snprintf(cname, sizeof cname, "read:%s", wi.name);
    json_array_append_new(evs, json_pack("{s:s, s:s, s:i, s:s}", "event", "case_start", "case",
                                         cname, "index", (int)i + 3, "where", wi.name));
    vf_tensor_loc loc;
    unsigned char *saved = NULL;
    float *lp = NULL;
    if (vf_tensor_locate(copy, wi.name, &loc, err, sizeof err) != 0 ||
        vf_tensor_edit(&loc, 1.0, 0.5, j->o->seed + i, &saved, err, sizeof err) != 0 ||
        !(lp = logits_from(e, copy, ids, S3_PROMPT, err, sizeof err))) {
      char m2[2600];
      snprintf(m2, sizeof m2, "tensor \"%s\": cannot run the perturbed copy: %s", wi.name, err);
      json_array_append_new(evs, json_pack("{s:s, s:s, s:i, s:s, s:s, s:f}", "event", "case_end",
                                           "case", cname, "index", (int)i + 3, "verdict", "FAIL",
                                           "message", m2, "max_rel_err", 0.0));
      rc = 1;
    } else {
      double d = max_diff(lp, base, V) / scale;
      int pass = d > S3_MIN_CHANGE;
      rc |= !pass;
      n_run++;
      char m2[1200] = "";
      if (!pass) {
        n_unread++;
        if (!first_unread) first_unread = wi.name;
        snprintf(
            m2, sizeof m2,
            "tensor \"%s\" was not read from the given model folder: perturbing it (+-50%%) in "
            "a copy left the logits unchanged (max rel change %.3g)",
            wi.name, d);
      }
      json_t *ev = json_pack("{s:s, s:s, s:i, s:s, s:f, s:f}", "event", "case_end", "case", cname,
                             "index", (int)i + 3, "verdict", pass ? "PASS" : "FAIL", "max_rel_err",
                             0.0, "rel_change", d);
      if (!pass) json_object_set_new(ev, "message", json_string(m2));
      json_array_append_new(evs, ev);
    }
    if (saved && vf_tensor_restore(&loc, saved) != 0) rc = 1;
    free(saved);
    free(lp);
  }
  vf_case_start(fd, "every tensor read", 2, copy);
  if (n_unread && n_unread == n_run)
    vf_case_end(fd, "every tensor read", 2, 0, 0, NULL,
                "no tensor was read from the given model folder: perturbing each of the %zu in a "
                "copy left the "
                "logits unchanged -- weights baked in or read from another path",
                n_run);
  else if (n_unread)
    vf_case_end(fd, "every tensor read", 2, 0, 0, NULL,
                "%zu of %zu tensors are never read: perturbing \"%s\"%s in a copy left the logits "
                "unchanged -- the "
                "forward pass skips them (e.g. a norm not applied) or reads them from elsewhere",
                n_unread, n_run, first_unread, n_unread > 1 ? " (and others)" : "");
  else
    vf_case_end(fd, "every tensor read", 2, !rc, 0, NULL,
                "all %zu tensors change the logits when perturbed", n_run);
  size_t k;
  json_t *ev;
  json_array_foreach(evs, k, ev) vf_emit(fd, json_incref(ev));
  json_decref(evs);
out:
  free(base);
  mi_session_close(e);
  mi_registry_free(reg);
  return rc;
}

json_t *vf_stage3(const vf_stage_opts *o, const void *ckb, const char *model_dir) {
  s3_job job = {ckb, model_dir};
  vf_child_result r;
  json_t *u;
  if (vf_run_child(&o->lim, weights_child, &job, &r) != 0) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "weights", "id", model_dir, "verdict",
                  "FAIL", "status", "ERROR", "message", "cannot fork a child");
  } else {
    u = vf_unit_report("weights", model_dir, "-", "weights", &r, o->lim.timeout_s, o->lim.cpu_s);
    vf_child_result_free(&r);
    json_t *c0 = json_array_get(json_object_get(u, "cases"), 0);
    if (o->model_plugin_path && c0)
      json_object_set_new(
          u, "summary", json_sprintf("files: key map and shapes as the model contract gives them"));
  }
  int pass = !strcmp(json_string_value(json_object_get(u, "verdict")), "PASS");
  json_t *units = json_array();
  json_array_append_new(units, u);
  if (!o->model_plugin_path) {
    return json_pack("{s:i, s:s, s:s, s:s, s:o, s:i, s:i}", "stage", 3, "name", "weight_loading",
                     "verdict", pass ? "PASS" : "FAIL", "status",
                     "partial: files only (no model plugin given)", "units", units, "passed", pass,
                     "failed", !pass);
  }
  if (pass) {
    char wd[4096];
    if (vf_workdir_new(wd, sizeof wd) != 0) {
      json_array_append_new(units, json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "readback", "id",
                                             model_dir, "verdict", "FAIL", "status", "ERROR",
                                             "message", "cannot create a scratch folder"));
    } else {
      rb_job rj = {o, model_dir, wd};
      json_t *rb =
          vf_run_unit(o, "readback", model_dir, "weights read-back", readback_child, &rj, 120);
      /* The figure that matters: the smallest logit move a perturbation caused. */
      double mn = INFINITY;
      size_t k, nt = 0;
      json_t *c;
      json_array_foreach(json_object_get(rb, "cases"), k,
                         c) if (json_is_number(json_object_get(c, "rel_change"))) {
        mn = fmin(mn, json_number_value(json_object_get(c, "rel_change")));
        nt++;
      }
      if (nt)
        json_object_set_new(
            rb, "summary",
            json_sprintf("read-back: %zu tensors perturbed one at a time in a copy, "
                         "smallest logit move %.3g (relative)",
                         nt, mn));
      json_array_append_new(units, rb);
      vf_rmtree(wd);
    }
  }
  return vf_stage_result(3, "weight_loading", units);
}
