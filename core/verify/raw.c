/* The result protocol of stages 3-6, where a unit's child loads the model
 * plugin under test (and the platform plugin) and so may run hostile code:
 * the child only returns raw outputs (logits, token ids, logprobs, counts)
 * as records on the result pipe, one per slot of a plan the parent fixed
 * before the fork, in order; the parent, after the child has ended, reads
 * them back here and writes every case event and verdict itself (the
 * judges in stage3.c .. stage6.c). A line of JSON the child writes, a PASS
 * among them, is not a record: the unit fails with the stage named.
 *
 * Children that load no candidate code (stage 3's file check, stage 5's
 * ELF import scan) still report events with vf_case_end: their verdicts
 * are the verifier's own. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verify/verify.h"

void vf_ev_start(json_t *ev, const char *name, int index, const char *where) {
  json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:s}", "event", "case_start", "case", name, "index",
                                      index, "where", where ? where : name));
}

json_t *vf_case_end_event(const char *name, int index, int pass, double max_err, json_t *extra, const char *fmt,
                          va_list ap) {
  json_t *e = json_pack("{s:s, s:s, s:i, s:s, s:f}", "event", "case_end", "case", name, "index", index,
                        "verdict", pass ? "PASS" : "FAIL", "max_rel_err", isfinite(max_err) ? max_err : 1e300);
  if (extra) json_object_update(e, extra);
  json_decref(extra);
  if (fmt) {
    char msg[1200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    json_object_set_new(e, pass ? "note" : "message", json_string(msg));
  }
  return e;
}

void vf_ev_end(json_t *ev, const char *name, int index, int pass, double max_err, json_t *extra,
               const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_array_append_new(ev, vf_case_end_event(name, index, pass, max_err, extra, fmt, ap));
  va_end(ap);
}

int vf_ev_engine_load(json_t *ev, const vf_rec *slot0, const char *model_dir) {
  if (!slot0->type) {
    vf_ev_start(ev, "engine_load", 0, model_dir);
    return 0;
  }
  if (slot0->type == VF_REC_FAIL) {
    vf_ev_end(ev, "engine_load", 0, 0, 0, NULL, "%s", slot0->msg);
    return 0;
  }
  vf_ev_end(ev, "engine_load", 0, 1, 0, NULL, NULL);
  return 1;
}

void vf_ev_error(json_t *ev, const char *fmt, ...) {
  char msg[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_array_append_new(ev, json_pack("{s:s, s:s}", "event", "error", "message", msg));
}

int vf_raw_read(const vf_child_result *r, const char *stage, int nslots, vf_rec *slots, json_t *ev) {
  for (int i = 0; i < nslots; i++) slots[i].type = 0;
  size_t off = 0;
  int last = -1, got = 0;
  vf_rec rec;
  char why[200] = "";
  for (;;) {
    int n = vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why);
    if (n == 0) return got;
    if (n > 0 && rec.type == VF_REC_ERROR) {
      vf_ev_error(ev, "%s", rec.msg);
      continue;
    }
    if (n > 0 && (rec.index <= last || rec.index >= nslots)) {
      snprintf(why, sizeof why, "a record for slot %d after slot %d (%d slots)", rec.index, last, nslots);
      n = -1;
    }
    if (n < 0) {
      vf_ev_error(ev, "%s: the unit's result pipe broke the verifier's protocol (%s): a unit may only return raw "
                  "outputs, the verifier decides", stage, why);
      return -1;
    }
    slots[rec.index] = rec;
    last = rec.index;
    got++;
  }
}

json_t *vf_run_unit_raw(const vf_stage_opts *o, const char *kind, const char *id, const char *member,
                        int (*fn)(void *arg, int fd), void *arg, double timeout_s, size_t result_cap,
                        json_t *(*judge)(void *arg, const vf_child_result *r)) {
  vf_limits lim = o->lim;
  if (o->unit_timeout_s > 0) timeout_s = o->unit_timeout_s, lim.timeout_s = 0;
  if (timeout_s > lim.timeout_s) lim.timeout_s = timeout_s;
  if (timeout_s * 2 > lim.cpu_s) lim.cpu_s = timeout_s * 2;
  lim.result_cap = result_cap;
  vf_child_result r;
  if (vf_run_child(&lim, fn, arg, &r) != 0)
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", kind, "id", id, "verdict", "FAIL", "status", "ERROR",
                     "message", "cannot fork a child");
  json_decref(r.events); /* whatever JSON the child wrote is not a result */
  r.events = judge(arg, &r);
  json_t *u = vf_unit_report(kind, id, "-", member, &r, lim.timeout_s, lim.cpu_s);
  vf_child_result_free(&r);
  return u;
}
