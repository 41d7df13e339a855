/* Stage 3 of the verifier, the part implemented: the model folder's weight
 * files against the model contract's weight map (key set, shapes from the
 * config formulas), run in a child like every unit, since it mmaps files
 * that may be hostile. Read-back through an engine is still to come. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/ckb.h"
#include "core/verify.h"

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

json_t *vf_stage3(const vf_stage_opts *o, const void *ckb, const char *model_dir) {
  s3_job job = {ckb, model_dir};
  vf_child_result r;
  json_t *u;
  if (vf_run_child(&o->lim, weights_child, &job, &r) != 0) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "weights", "id", model_dir, "verdict", "FAIL",
                  "status", "ERROR", "message", "cannot fork a child");
  } else {
    u = vf_unit_report("weights", model_dir, "-", "weights", &r, o->lim.timeout_s, o->lim.cpu_s);
    vf_child_result_free(&r);
  }
  int pass = !strcmp(json_string_value(json_object_get(u, "verdict")), "PASS");
  json_t *units = json_array();
  json_array_append_new(units, u);
  return json_pack("{s:i, s:s, s:s, s:s, s:o, s:i, s:i}", "stage", 3, "name", "weight_loading",
                   "verdict", pass ? "PASS" : "FAIL", "status", "partial: files only", "units",
                   units, "passed", pass, "failed", !pass);
}
