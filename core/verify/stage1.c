/* Stage 1 of the verifier (operator units) and the plugin probe that
 * precedes it. Each unit is one operator contract, run in its own child
 * (verify_child.c) so a crash, a hang or a runaway allocation in one kernel
 * is that unit's FAIL and nothing more. The plugin is loaded inside each
 * child, never in the verifier's own process. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/loader.h"
#include "core/verify/verify.h"

const char *vf_sig_name(int sig) {
  static char buf[32];
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev) snprintf(buf, sizeof buf, "SIG%s", abbrev);
  else snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

mi_plugin *vf_load_plugin(const vf_stage_opts *o, int fd) {
  mi_plugin *p = mi_plugin_load_file(o->plugin_path, (const mi_options *)o->plugin_opts);
  const char *why = NULL;
  if (!p) why = "out of memory";
  else if (p->status != MI_PLUGIN_LOADED) why = p->reason ? p->reason : "not loaded";
  else if (p->desc && p->desc->kind == MI_PLUGIN_KERNELS)
    why = "a kernel pack, not a platform plugin (mi-verify runs a pack with --pack, on a platform plugin)";
  else if (!p->desc || p->desc->kind != MI_PLUGIN_PLATFORM) why = "not a platform plugin";
  else if (!p->iface) why = "no interface";
  if (!why) return p;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s: cannot use the plugin: %s", o->plugin_path, why);
  vf_emit(fd, json_pack("{s:s, s:s}", "event", "error", "message", msg));
  mi_plugin_unload(p);
  return NULL;
}

/* ---------- probe ---------- */

static int probe_child(void *arg, int fd) {
  const vf_stage_opts *o = arg;
  mi_plugin *p = vf_load_plugin(o, fd);
  if (!p) return 1;
  const mi_platform_iface *pi = p->iface;
  json_t *members = json_array();
  for (const char *const *m = vf_member_names(); *m; m++)
    if (vf_member_fn(pi, *m)) json_array_append_new(members, json_string(*m));
  json_t *ev = json_pack("{s:s, s:s, s:s, s:i, s:i, s:o}", "event", "plugin", "name",
                         p->desc->name ? p->desc->name : "?", "version",
                         p->desc->version ? p->desc->version : "?", "abi_major",
                         (int)p->desc->abi_major, "abi_minor", (int)p->desc->abi_minor, "members",
                         members);
  if (pi->variant) json_object_set_new(ev, "variant", json_string(pi->variant(p->ctx)));
  mi_device_info di;
  memset(&di, 0, sizeof di);
  di.struct_size = sizeof di;
  if (pi->device_info && pi->device_info(p->ctx, 0, &di) == 0) {
    json_object_set_new(ev, "device", json_string(di.name));
    /* what a stand-in for another platform is held to (mi-verify --platform) */
    json_object_set_new(ev, "simd_width", json_integer(di.simd_width));
    json_object_set_new(ev, "host_memory", json_boolean(di.host_memory));
  }
  vf_emit(fd, ev);
  mi_plugin_unload(p);
  return 0;
}

static json_t *first_event(json_t *events, const char *type) {
  size_t i;
  json_t *e;
  json_array_foreach(events, i, e) {
    const char *t = json_string_value(json_object_get(e, "event"));
    if (t && !strcmp(t, type)) return e;
  }
  return NULL;
}

static json_t *child_json(const vf_child_result *r) {
  json_t *c = json_pack("{s:b, s:f}", "timed_out", r->timed_out, "wall_s", r->wall_s);
  if (r->exited) json_object_set_new(c, "exit_code", json_integer(r->exit_code));
  if (r->signaled) json_object_set_new(c, "signal", json_string(vf_sig_name(r->term_signal)));
  return c;
}

json_t *vf_probe_plugin(const vf_stage_opts *o) {
  vf_child_result r;
  json_t *out;
  if (vf_run_child(&o->lim, probe_child, (void *)o, &r) != 0)
    return json_pack("{s:s, s:s}", "verdict", "FAIL", "message", "cannot fork a child");
  json_t *ev = first_event(r.events, "plugin"), *err = first_event(r.events, "error");
  if (ev && r.exited && r.exit_code == 0) {
    out = json_deep_copy(ev);
    json_object_del(out, "event");
    json_object_set_new(out, "verdict", json_string("PASS"));
  } else {
    char msg[1200];
    if (err) snprintf(msg, sizeof msg, "%s", json_string_value(json_object_get(err, "message")));
    else if (r.timed_out) snprintf(msg, sizeof msg, "%s: loading timed out after %gs", o->plugin_path, o->lim.timeout_s);
    else if (r.signaled) snprintf(msg, sizeof msg, "%s: crashed (%s) while loading", o->plugin_path, vf_sig_name(r.term_signal));
    else snprintf(msg, sizeof msg, "%s: loading failed (exit code %d)", o->plugin_path, r.exit_code);
    out = json_pack("{s:s, s:s, s:s}", "verdict", "FAIL", "message", msg, "raw_output", r.output);
  }
  json_object_set_new(out, "child", child_json(&r));
  vf_child_result_free(&r);
  return out;
}

/* ---------- stage 1 ---------- */

typedef struct unit_job {
  const vf_stage_opts *o;
  const vf_op_plan *plan;
  int from_pack; /* the kernel comes from the --pack, not the platform */
} unit_job;

/* Loads the plugin as vf_load_plugin does, a failure being an ERROR record
 * (stages 1-2 accept nothing else on the result pipe). */
struct mi_plugin *vf_load_plugin_rec(const vf_stage_opts *o, int fd) {
  int pp[2];
  if (pipe(pp) != 0) return NULL;
  mi_plugin *p = vf_load_plugin(o, pp[1]);
  close(pp[1]);
  if (!p) {
    char buf[2048];
    ssize_t n = read(pp[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    json_t *ev = json_loads(buf, 0, NULL);
    const char *m = json_string_value(json_object_get(ev, "message"));
    vf_rec_write(fd, VF_REC_ERROR, -1, 0, m ? m : "cannot load the plugin", NULL, 0);
    json_decref(ev);
  }
  close(pp[0]);
  return p;
}

static int unit_child(void *arg, int fd) {
  unit_job *j = arg;
  if (j->from_pack) return vf_pack_unit_run(j->o, j->plan, fd);
  mi_plugin *p = vf_load_plugin_rec(j->o, fd);
  if (!p) return 1;
  int rc = vf_op_plan_run(j->plan, p->iface, p->ctx, fd);
  mi_plugin_unload(p);
  return rc;
}

/* The verdict of one unit from what its child did and said. */
json_t *vf_unit_report(const char *kind, const char *op_id, const char *version,
                       const char *member, const vf_child_result *r, double timeout_s,
                       double cpu_s) {
  json_t *cases = json_array(), *skipped = json_array(), *errors = json_array();
  json_t *open_case = NULL, *first_fail = NULL;
  size_t i;
  json_t *ev;
  double worst = 0;
  json_array_foreach(r->events, i, ev) {
    const char *t = json_string_value(json_object_get(ev, "event"));
    if (!t) continue; /* not one of ours */
    json_t *copy = json_deep_copy(ev);
    json_object_del(copy, "event");
    if (!strcmp(t, "case_start")) {
      open_case = ev;
      json_decref(copy);
      continue;
    }
    if (!strcmp(t, "case_end")) {
      open_case = NULL;
      const char *v = json_string_value(json_object_get(ev, "verdict"));
      if (v && strcmp(v, "PASS") && !first_fail) first_fail = ev;
      json_t *rel = json_object_get(ev, "max_rel_err");
      if (json_is_number(rel) && json_number_value(rel) > worst) worst = json_number_value(rel);
      json_array_append_new(cases, copy);
    } else if (!strcmp(t, "case_skip")) {
      json_array_append_new(skipped, copy);
    } else {
      json_array_append_new(errors, copy);
    }
  }
  char msg[1400] = "";
  const char *where = open_case ? json_string_value(json_object_get(open_case, "where")) : NULL;
  const char *status = "FAIL";
  if (r->contain_failed)
    snprintf(msg, sizeof msg, "%s: the unit's process could not set up its containment (%s)", member,
             vf_containment());
  else if (r->flooded)
    snprintf(msg, sizeof msg, "%s: flooded the result pipe (more than the %zu bytes a correct unit writes); killed",
             member, r->result_cap);
  else if (r->oom_killed)
    snprintf(msg, sizeof msg, "%s: killed by the memory cgroup's cap %s%s", member,
             where ? "during a call " : "outside any kernel call", where ? where : "");
  else if (r->timed_out)
    snprintf(msg, sizeof msg, "%s: TIMEOUT: no result within %gs %s%s", member, timeout_s,
             where ? "during a call " : "outside any kernel call", where ? where : "");
  else if (open_case && r->signaled && r->term_signal == SIGXCPU)
    snprintf(msg, sizeof msg, "%s: crashed (SIGXCPU: over the CPU time limit of %gs) %s", member,
             cpu_s, where);
  else if (open_case && r->signaled)
    snprintf(msg, sizeof msg, "%s: crashed (%s) %s", member, vf_sig_name(r->term_signal), where);
  else if (open_case)
    snprintf(msg, sizeof msg, "%s: crashed (child exited with %d before returning a result) %s",
             member, r->exit_code, where);
  else if (r->signaled)
    snprintf(msg, sizeof msg, "%s: crashed (%s) outside any kernel call", member, vf_sig_name(r->term_signal));
  else if (json_array_size(errors)) {
    json_t *e0 = json_array_get(errors, 0);
    snprintf(msg, sizeof msg, "%s", json_string_value(json_object_get(e0, "message")));
    const char *es = json_string_value(json_object_get(e0, "status"));
    if (es && !strcmp(es, "ERROR")) status = "ERROR"; /* could not be set up: vf_op_plan_judge */
  }
  else if (first_fail)
    snprintf(msg, sizeof msg, "%s", json_string_value(json_object_get(first_fail, "message")));
  else if (!r->exited || r->exit_code != 0)
    snprintf(msg, sizeof msg, "%s: child exited with %d", member, r->exit_code);
  else if (!json_array_size(cases))
    snprintf(msg, sizeof msg, "%s: no case ran", member);
  else status = "PASS";
  if (r->strays) { /* the unit's processes must end with it, whatever else happened */
    size_t l = strlen(msg);
    snprintf(msg + l, sizeof msg - l, "%s%s: left %d process%s running after the unit ended (%s); all killed",
             l ? "; and " : "", member, r->strays, r->strays == 1 ? "" : "es", r->stray_desc);
    status = "FAIL"; /* never PASS, nor ERROR: something of it did run */
  }
  if (r->timed_out && !r->flooded && !r->contain_failed) status = "TIMEOUT";
  else if (strstr(msg, ": crashed (") && !r->strays) status = "CRASH";

  json_t *u = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:s}", "kind",
                        kind, "id", op_id, "version", version ? version : "?", "member",
                        member ? member : "?", "verdict", strcmp(status, "PASS") ? "FAIL" : "PASS",
                        "max_rel_err", json_real(worst), "cases", cases, "skipped", skipped,
                        "errors", errors, "child", child_json(r), "raw_output",
                        r->output ? r->output : "");
  json_object_set_new(u, "status", json_string(status));
  if (msg[0]) json_object_set_new(u, "message", json_string(msg));
  return u;
}

static int selected(const char *only, const char *id, const char *member) {
  if (!only) return 1;
  char *list = strdup(only), *save = NULL;
  int hit = 0;
  for (char *t = strtok_r(list, ",", &save); t && !hit; t = strtok_r(NULL, ",", &save))
    hit = !strcmp(t, id) || (member && !strcmp(t, member));
  free(list);
  return hit;
}

/* 1 when some kernel of the platform contract lists modes: the plugin's
 * variant() name then says which one is on. */
static int lists_modes(const vf_stage_opts *o) {
  size_t i;
  json_t *k;
  int any = 0;
  json_array_foreach(json_object_get(o->platform, "kernels"), i, k) any |= json_object_size(json_object_get(k, "modes")) > 0;
  return any;
}

static json_t *unit_error(const char *op_id, const char *msg) {
  return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "operator", "id", op_id, "verdict", "FAIL", "status",
                   "ERROR", "message", msg);
}

/* The units of one kernel list (the platform contract's, or a pack
 * manifest's when from_pack) appended to units; the failures counted. */
/* 1 when the probed plugin's interface holds `member` (a non-NULL pointer
 * within its struct_size); a failed probe lists nothing and says so in
 * its own line, so every unit is then run and judged as before. */
static int provides(const json_t *probe, const char *member) {
  const json_t *ms = json_object_get(probe, "members");
  size_t i;
  json_t *m;
  if (!json_is_array(ms)) return 1;
  json_array_foreach(ms, i, m) if (member && !strcmp(json_string_value(m), member)) return 1;
  return 0;
}

static void run_units(const vf_stage_opts *o, json_t *kernels, int from_pack, const char *variant,
                      const json_t *probe, json_t *units, int *fails) {
  const char *pack = json_string_value(json_object_get(o->pack_manifest, "name"));
  size_t i;
  json_t *k;
  json_array_foreach(kernels, i, k) {
    const char *op_id = json_string_value(json_object_get(k, "operator"));
    json_t *op = json_object_get(o->operators, op_id ? op_id : "");
    const char *member = json_string_value(json_object_get(op, "member"));
    const char *version = json_string_value(json_object_get(op, "version"));
    const char *listed = json_string_value(json_object_get(k, "version")); /* a pack's manifest says it */
    if (!op_id || !selected(o->only, op_id, member)) continue;
    json_t *u;
    char msg[600];
    if (!op) {
      u = unit_error(op_id, "no operator contract with this id");
    } else if (!from_pack && !provides(probe, member)) {
      /* the contract lists it, the plugin does not implement it: said, not run */
      snprintf(msg, sizeof msg, "not provided: %s's mi_platform_iface has no '%s' (NULL, or past its struct_size)",
               json_string_value(json_object_get(probe, "name")) ?: "the plugin", member ? member : "?");
      u = unit_error(op_id, msg);
      json_object_set_new(u, "status", json_string("MISSING"));
      json_object_set_new(u, "member", json_string(member ? member : "?"));
    } else if (from_pack && (!listed || !version || strcmp(listed, version))) {
      snprintf(msg, sizeof msg, "%s: the pack's manifest lists version %s of the contract, the CKB's is version %s",
               op_id, listed ? listed : "(none)", version ? version : "(none)");
      u = unit_error(op_id, msg);
    } else {
      /* The inputs are drawn here, before the child exists; the expected
       * outputs only after it has ended (vf_op_plan_judge). */
      vf_unit_opts uo = {o->seed, op, k, -1, from_pack ? NULL : variant, from_pack ? (pack ? pack : "?") : NULL,
                         o->plugin_opts};
      vf_op_plan *plan = vf_op_plan_new(&uo);
      unit_job job = {o, plan, from_pack};
      vf_limits lim = o->lim;
      lim.result_cap = plan ? vf_op_plan_result_bytes(plan) : 0;
      vf_child_result r;
      if (!plan || vf_run_child(&lim, unit_child, &job, &r) != 0) {
        u = unit_error(op_id, "cannot fork a child");
      } else {
        json_decref(r.events); /* whatever JSON the child wrote is not a result */
        r.events = vf_op_plan_judge(plan, &r);
        /* a pack's kernel is named by its operator: it is no platform member */
        u = vf_unit_report("operator", op_id, version, from_pack ? op_id : member, &r, o->lim.timeout_s,
                           o->lim.cpu_s);
        vf_child_result_free(&r);
      }
      vf_op_plan_free(plan);
    }
    if (from_pack) {
      json_object_set_new(u, "member", json_string(member ? member : "?"));
      json_object_set_new(u, "pack", json_string(pack ? pack : "?"));
    }
    if (strcmp(json_string_value(json_object_get(u, "verdict")), "PASS")) (*fails)++;
    json_array_append_new(units, u);
  }
}

json_t *vf_stage1(const vf_stage_opts *o) {
  json_t *units = json_array();
  int fails = 0;
  json_t *probe = NULL;
  /* the platform's kernels, unless only a pack is under test: a model's
   * run (--model-plugin) holds both, since its engine calls both */
  const int platform_units = !o->pack_path || o->model_plugin_path;
  /* each kernel is judged in the mode the plugin says it runs (a pack's
   * manifest lists no modes: its kernels run the contracts' tolerances) */
  if (platform_units) probe = vf_probe_plugin(o); /* the members it provides, its variant() */
  const char *variant = probe && lists_modes(o) ? json_string_value(json_object_get(probe, "variant")) : NULL;
  const char *pack = json_string_value(json_object_get(o->pack_manifest, "name"));
  if (platform_units) run_units(o, json_object_get(o->platform, "kernels"), 0, variant, probe, units, &fails);
  if (o->pack_path) run_units(o, json_object_get(o->pack_manifest, "kernels"), 1, NULL, probe, units, &fails);
  /* at --tp N > 1 the platform's collectives across N ranks as well */
  if (platform_units && o->tp > 1 && selected(o->only, "test.stage1_collectives", "collectives")) {
    json_t *u = vf_stage1_collectives(o, o->tp);
    if (strcmp(json_string_value(json_object_get(u, "verdict")), "PASS")) fails++;
    json_array_append_new(units, u);
  }
  size_t n = json_array_size(units);
  json_t *res = json_pack("{s:i, s:s, s:s, s:o, s:i, s:i}", "stage", 1, "name", "operator_units",
                          "verdict", (fails || !n) ? "FAIL" : "PASS", "units", units, "passed",
                          (int)(n - (size_t)fails), "failed", fails);
  if (variant) json_object_set_new(res, "variant", json_string(variant));
  if (o->pack_path) json_object_set_new(res, "pack", json_string(pack ? pack : "?"));
  json_decref(probe);
  return res;
}
