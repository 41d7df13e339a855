/* The evolution loop's phases, in order, each timed and written to the
 * report (evolve.h has the overview, docs/evolution.md the details). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "core/ckb/ckb.h"
#include "core/gen/evolve/evolve.h"
#include "core/runtime/safetensors.h"
#include "core/util/spawn.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void phase(ev_ctx *c, const char *name, double t0, const char *status, const char *detail, int iterations) {
  json_t *p = json_pack("{s:s, s:f, s:s, s:s, s:i}", "phase", name, "wall_s", now_s() - t0, "status", status, "detail",
                        detail, "iterations", iterations);
  json_array_append_new(json_object_get(c->report, "phases"), p);
  fprintf(stderr, "mi-gen: evolve: phase %-14s %-8s %.2f s  %s\n", name, status, now_s() - t0, detail);
}

static int finish(ev_ctx *c, int rc, const char *why) {
  json_object_set_new(c->report, "exit", json_integer(rc));
  json_object_set_new(c->report, "wall_s", json_real(now_s() - c->t0));
  json_object_set_new(c->report, "outcome", json_string(why));
  json_object_set(c->report, "reads", c->reads);
  char err[1024];
  if (ev_report_write(c, err, sizeof err) != 0) fprintf(stderr, "mi-gen: evolve: %s\n", err);
  fprintf(stderr, "mi-gen: evolve: %s (exit %d; report %s/evolve.md)\n", why, rc, c->o->run_dir);
  json_decref(c->reads);
  json_decref(c->report);
  json_decref(c->model_cfg);
  return rc;
}

/* A golden made by tools/peer/goldens.mjs: model.mkmodel_args (how its
 * checkpoint is remade) and cases. */
static int is_golden(const json_t *j) {
  return json_is_array(json_object_get(json_object_get(j, "model"), "mkmodel_args")) &&
         json_is_array(json_object_get(j, "cases"));
}

/* Every config field and weight of the checkpoint in dir explained by the
 * model entry m; the unexplained appended to `lines` ("DIR: ..."). */
static void explain_dir(const json_t *m, const char *dir, json_t *lines) {
  char cp[4500], e2[1024];
  snprintf(cp, sizeof cp, "%s/config.json", dir);
  json_error_t je;
  json_t *cfg = json_load_file(cp, 0, &je);
  mi_weights *w = cfg ? mi_weights_open(dir, e2, sizeof e2) : NULL;
  if (!w) {
    json_array_append_new(lines, json_sprintf("%s: %s", cfg ? dir : cp, cfg ? e2 : je.text));
    json_decref(cfg);
    return;
  }
  json_t *un = json_array();
  ev_explain(m, cfg, w, un, NULL);
  size_t i;
  json_t *x;
  json_array_foreach(un, i, x) json_array_append_new(lines, json_sprintf("%s: %s", dir, json_string_value(x)));
  json_decref(un);
  mi_weights_close(w);
  json_decref(cfg);
}

/* Phase 4 when the reading found leaves a layer kind or an operator to a
 * candidate bundle: -1 to go on (*bundle the verified bundle, or NULL when
 * none was needed), else the exit status to finish with (why says why). */
static int bundle_phase(ev_ctx *c, const json_t *found, json_t *e2e, json_t **bundle, char *why, size_t wn) {
  const double t0 = now_s();
  const size_t n_def = json_array_size(json_object_get(found, "deferred"));
  const size_t n_ops = json_array_size(json_object_get(found, "operators"));
  *bundle = NULL;
  if (!n_def && !n_ops) {
    phase(c, "bundle", t0, "not needed", "the variants explain the probes with the CKB's operators", 0);
    return -1;
  }
  if (!c->o->candidates) {
    char *d = json_dumps(json_object_get(found, n_def ? "deferred" : "operators"), JSON_COMPACT);
    snprintf(why, wn, "no --candidates: left to a candidate bundle: %.1500s", d ? d : "?");
    free(d);
    phase(c, "bundle", t0, "skipped", why, 0);
    snprintf(why, wn, "variants found; no candidate bundle for what they leave unexplained, the gap stays");
    return EV_EX_GAP;
  }
  if (!json_array_size(e2e)) {
    phase(c, "bundle", t0, "rejected", "no golden of a checkpoint where the new layer kind speaks under the references", 0);
    snprintf(why, wn, "candidate bundle: no end-to-end oracle (a golden other than a probe-attn* one)");
    return EV_EX_BUNDLE;
  }
  json_t *brep = NULL;
  int br = ev_bundle_verify(c, found, e2e, bundle, &brep, why, wn);
  json_object_set_new(c->report, "bundle", brep);
  if (br != 0) {
    phase(c, "bundle", t0, br < 0 ? "error" : "rejected", why, 1);
    return br < 0 ? EV_EX_USAGE : EV_EX_BUNDLE;
  }
  phase(c, "bundle", t0, "accepted", "operator units and end to end against the oracle", 1);
  return -1;
}

/* The model entry phase 5 would write, held to the first probe's
 * checkpoint and to --model: EV_EX_OK when it explains every config field
 * and weight of both, else EV_EX_UNEXPLAINED (each one named in why and in
 * the report's "unexplained") or EV_EX_CONSOLIDATE. */
static int explained(ev_ctx *c, const json_t *found, const json_t *bundle, char *why, size_t wn) {
  json_t *m = ev_model_entry(c, found, bundle, why, wn);
  if (!m) return EV_EX_CONSOLIDATE;
  json_t *un = json_array();
  explain_dir(m, c->probe_dir, un);
  if (c->o->model) explain_dir(m, c->o->model, un);
  json_decref(m);
  if (!json_array_size(un)) {
    json_decref(un);
    return EV_EX_OK;
  }
  size_t l = (size_t)snprintf(why, wn, "%zu config field(s) or weight(s) unexplained, nothing written: ", json_array_size(un));
  size_t i;
  json_t *x;
  json_array_foreach(un, i, x) if (l < wn) l += (size_t)snprintf(why + l, wn - l, "%s%s", i ? "; " : "", json_string_value(x));
  json_object_set_new(c->report, "unexplained", un);
  return EV_EX_UNEXPLAINED;
}

static int revalidate(ev_ctx *c, json_t **out, char *why, size_t n) {
  const ev_opts *o = c->o;
  char log[4400], exe[4200], dir[4400], eng[4400], run[4400];
  snprintf(log, sizeof log, "%s/revalidation.log", o->run_dir);
  snprintf(exe, sizeof exe, "%s/mi-gen", o->exe_dir);
  snprintf(dir, sizeof dir, "%s/revalidation", o->run_dir);
  snprintf(eng, sizeof eng, "%s/revalidation/engine", o->run_dir);
  snprintf(run, sizeof run, "%s/revalidation/run", o->run_dir);
  /* from scratch: a fresh run dir and engine dir; no --refs, no candidates.
   * Run without a shell: every path is one argument. */
  int rc = -1;
  if (mi_remove_tree(dir) == 0 && mi_remove_tree(log) == 0) {
    char *argv[] = {exe, "--model", (char *)o->model, "--platform", (char *)(o->platform ? o->platform : "cpu"),
                    "--dtype", (char *)(o->dtype ? o->dtype : "bf16"), "--ckb", (char *)o->ckb, "--out", eng,
                    "--run-dir", run, "--seed", "1", o->goldens ? "--goldens" : NULL, (char *)o->goldens, NULL};
    rc = mi_spawn_wait(argv, log, NULL, 0);
  }
  /* the stages the run reached: its stderr lines that name one */
  json_t *lines = json_array();
  FILE *f = fopen(log, "r");
  char line[2048], last[2048] = "";
  int composer = 0;
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    const char *st = strstr(line, "verifier: stage ");
    char id[32];
    int used = 0;
    const char *vw = NULL;
    static const char *const verdicts[] = {" PASS", " FAIL", " N/A", " SKIPPED"};
    if (st && sscanf(st + 16, "%31s %n", id, &used) == 1 && used > 0)
      for (size_t k = 0; k < 4; k++) {
        const char *hit = strstr(st + 16 + used, verdicts[k]);
        if (hit && (!vw || hit < vw)) vw = hit;
      }
    if (vw) {
      /* "stage 4 end_to_end   PASS: detail" -> {stage, name, verdict, detail} */
      const char *name = st + 16 + used, *ne = vw;
      while (ne > name && ne[-1] == ' ') ne--;
      size_t vl = strcspn(vw + 1, ": ");
      const char *detail = vw + 1 + vl;
      while (*detail == ':' || *detail == ' ') detail++;
      json_array_append_new(lines, json_pack("{s:s, s:s#, s:s#, s:s}", "stage", id, "name", name, (int)(ne - name),
                                             "verdict", vw + 1, (int)vl, "detail", detail));
    } else if (strstr(line, "missing") || strstr(line, "not covered") || strstr(line, "FAIL"))
      json_array_append_new(lines, json_pack("{s:s}", "line", line));
    if (strstr(line, "layer_kinds") || strstr(line, "layer_sequence") || strstr(line, "layer kind")) composer = 1;
    if (line[0]) snprintf(last, sizeof last, "%s", line);
  }
  if (f) fclose(f);
  *out = json_pack("{s:i, s:s, s:o, s:s}", "mi_gen_exit", rc, "log", log, "stages", lines, "last_line", last);
  if (rc == 0) {
    snprintf(why, n, "revalidation: mi-gen with references off passed every stage");
    return EV_EX_OK;
  }
  if (composer) {
    snprintf(why, n, "revalidation: composer lacks layer kinds (mi-gen exit %d: %s)", rc, last);
    return EV_EX_COMPOSER;
  }
  snprintf(why, n, "revalidation: mi-gen with references off failed (exit %d: %s)", rc, last);
  return EV_EX_REVALIDATE;
}

/* ev_run's text buffers, shared by its phases: a callee's error, the phase's one-line outcome. */
typedef struct run_text {
  char err[2048], why[2300];
} run_text;

/* The phases below return -1 to go on, else the run's exit code (after finish). */

/* 1. coverage: what the CKB lacks for the model */
static int coverage_phase(ev_ctx *c, run_text *t) {
  const ev_opts *o = c->o;
  double t0 = now_s();
  if (!o->model) {
    phase(c, "coverage", t0, "skipped", "no --model", 0);
    return -1;
  }
  mi_ckb *ck = mi_ckb_open(o->ckb, t->err, sizeof t->err);
  json_t *cov = NULL;
  int cr = ck ? mi_ckb_coverage(ck, o->model, o->platform ? o->platform : "cpu", &cov, t->err, sizeof t->err) : -1;
  if (ck) mi_ckb_close(ck);
  if (cr < 0) {
    phase(c, "coverage", t0, "error", t->err, 1);
    return finish(c, EV_EX_USAGE, t->err);
  }
  json_object_set_new(c->report, "coverage", json_pack("{s:b, s:O?}", "covered", cr == 0, "missing",
                                                       json_object_get(cov, "missing")));
  snprintf(t->why, sizeof t->why, "%zu gap line(s) for %s", json_array_size(json_object_get(cov, "missing")),
           o->model);
  json_decref(cov);
  phase(c, "coverage", t0, cr == 0 ? "covered" : "gaps", t->why, 1);
  return -1;
}

/* 2. exploration: every file under --refs, read through the log; the goldens it finds sorted into
 * *probes (attention probes) and *e2e (end to end), both set only when it goes on. */
static int explore_phase(ev_ctx *c, run_text *t, json_t **probes_out, json_t **e2e_out) {
  double t0 = now_s();
  if (!c->o->refs) {
    phase(c, "exploration", t0, "off", "references off: nothing under any reference folder is read", 0);
    return finish(c, EV_EX_GAP, "references off: no oracle to search the variants with, the gap stays");
  }
  json_t *files = ev_list_files(c->refs_abs, t->err, sizeof t->err);
  if (!files) {
    phase(c, "exploration", t0, "error", t->err, 0);
    return finish(c, EV_EX_USAGE, t->err);
  }
  json_t *probes = json_array(), *e2e = json_array();
  size_t i;
  json_t *f;
  json_array_foreach(files, i, f) {
    size_t len = 0;
    unsigned char *b = ev_read(c, json_string_value(f), "exploration", &len, t->err, sizeof t->err);
    if (!b) continue; /* logged nowhere: it was not read */
    json_t *j = json_loadb((const char *)b, len, 0, NULL);
    free(b);
    if (j && is_golden(j)) {
      /* a probe isolates the attention layers (the search's oracle); any
       * other golden holds a bundle's layer end to end. The golden says so
       * (model.role, goldens.mjs --role), else its shape's name does */
      const json_t *model = json_object_get(j, "model");
      const char *shape = json_string_value(json_object_get(model, "shape")) ?: "";
      const char *role = json_string_value(json_object_get(model, "role"));
      int probe = role ? !strcmp(role, "probe") : !strncmp(shape, "probe-attn", 10);
      json_array_append_new(probe ? probes : e2e,
                            json_pack("{s:O, s:O}", "path", f, "golden", j));
    }
    json_decref(j);
  }
  snprintf(t->why, sizeof t->why, "%zu file(s) read; %zu probe golden(s), %zu end-to-end golden(s)",
           json_array_size(c->reads), json_array_size(probes), json_array_size(e2e));
  phase(c, "exploration", t0, "done", t->why, (int)json_array_size(files));
  json_decref(files);
  *probes_out = probes;
  *e2e_out = e2e;
  return -1;
}

/* 3. the variant search over the probe goldens (consumed); the reading found into *found. */
static int search_phase(ev_ctx *c, run_text *t, json_t *probes, json_t **found) {
  double t0 = now_s();
  json_t *table = NULL;
  int vr = ev_variant_search(c, probes, &table, found, t->err, sizeof t->err);
  json_object_set_new(c->report, "variant_search", table ? table : json_array());
  json_decref(probes);
  if (vr != 0) {
    phase(c, "variant_search", t0, vr < 0 ? "error" : "no variant", t->err, (int)json_array_size(table));
    return finish(c, vr < 0 ? EV_EX_USAGE : EV_EX_NO_VARIANT, t->err);
  }
  const char *fname = json_string_value(json_object_get(*found, "name"));
  json_object_set_new(c->report, "found", json_string(fname));
  json_object_set_new(c->report, "found_variants", json_deep_copy(json_object_get(*found, "variants")));
  json_object_set_new(c->report, "deferred", json_deep_copy(json_object_get(*found, "deferred")));
  snprintf(t->why, sizeof t->why, "found %s", fname);
  phase(c, "variant_search", t0, "found", t->why, (int)json_array_size(table));
  return -1;
}

/* 5. consolidation into the staging copy (c->o is the staged options), once the result explains
 * the probe and the model; found and bundle consumed. On a stop the transaction is aborted and
 * c->o is back to o. */
static int consolidate_phase(ev_ctx *c, run_text *t, const ev_opts *o, mi_ckb_txn *txn, json_t *found,
                             json_t *bundle, double t0) {
  json_t *entries = NULL;
  int ux = explained(c, found, bundle, t->why, sizeof t->why);
  if (ux != EV_EX_OK) {
    mi_ckb_txn_abort(txn);
    c->o = o;
    json_decref(bundle);
    json_decref(found);
    phase(c, "consolidation", t0, ux == EV_EX_UNEXPLAINED ? "unexplained" : "error", t->why, 1);
    return finish(c, ux, t->why);
  }
  int cr = ev_consolidate(c, found, bundle, json_object_get(c->report, "variant_search"), &entries, t->err,
                          sizeof t->err);
  json_decref(bundle);
  json_decref(found);
  json_object_set_new(c->report, "entries", entries ? entries : json_array());
  if (cr != 0) {
    mi_ckb_txn_abort(txn);
    c->o = o;
    phase(c, "consolidation", t0, "error", t->err, 1);
    return finish(c, EV_EX_CONSOLIDATE, t->err);
  }
  mi_ckb *ck = mi_ckb_open(c->o->ckb, t->err, sizeof t->err);
  int probs = ck ? mi_ckb_validate(ck, NULL, NULL) : -1;
  if (ck) mi_ckb_close(ck);
  if (probs != 0) {
    mi_ckb_txn_abort(txn);
    c->o = o;
    snprintf(t->why, sizeof t->why,
             "%s: the CKB would not validate after consolidation (%d problem(s)); nothing written to it", o->ckb,
             probs);
    phase(c, "consolidation", t0, "error", t->why, 1);
    return finish(c, EV_EX_CONSOLIDATE, t->why);
  }
  snprintf(t->why, sizeof t->why, "%zu entries in a staging copy of %s, which validates",
           json_array_size(json_object_get(c->report, "entries")), o->ckb);
  phase(c, "consolidation", t0, "done", t->why, 1);
  return -1;
}

/* 5-6 in a staging copy of the CKB (a transaction): nothing reaches o->ckb until revalidation
 * passes, then one atomic switch; a failed or killed run leaves the CKB byte for byte as it was.
 * found and bundle consumed; the run's exit code. */
static int staged_phases(ev_ctx *c, run_text *t, json_t *found, json_t *bundle) {
  const ev_opts *o = c->o;
  double t0 = now_s();
  mi_ckb_txn txn;
  if (mi_ckb_txn_begin(&txn, o->ckb, t->err, sizeof t->err) != 0) {
    json_decref(bundle);
    json_decref(found);
    phase(c, "consolidation", t0, "error", t->err, 1);
    return finish(c, EV_EX_CONSOLIDATE, t->err);
  }
  ev_opts staged = *o;
  staged.ckb = txn.staging;
  c->o = &staged;
  int x = consolidate_phase(c, t, o, &txn, found, bundle, t0);
  if (x >= 0) return x;

  /* 6. revalidation, references off, on the staged CKB */
  t0 = now_s();
  int rr = EV_EX_OK;
  if (o->no_revalidate || !o->model) {
    phase(c, "revalidation", t0, "skipped", o->model ? "--no-revalidate" : "no --model", 0);
    snprintf(t->why, sizeof t->why, "consolidated (revalidation skipped)");
  } else {
    json_t *rv = NULL;
    rr = revalidate(c, &rv, t->why, sizeof t->why);
    json_object_set_new(c->report, "revalidation", rv);
    phase(c, "revalidation", t0, rr == EV_EX_OK ? "passed" : "failed", t->why, 1);
  }
  c->o = o;
  if (rr != EV_EX_OK) {
    mi_ckb_txn_abort(&txn);
    size_t l = strlen(t->why);
    snprintf(t->why + l, sizeof t->why - l, "; %s left as it was (the staged entries discarded)", o->ckb);
    return finish(c, rr, t->why);
  }
  char how[600];
  if (mi_ckb_txn_commit(&txn, how, sizeof how, t->err, sizeof t->err) != 0)
    return finish(c, EV_EX_CONSOLIDATE, t->err); /* the staging copy stays for a look; the next run removes it */
  json_object_set_new(c->report, "commit", json_string(how));
  size_t l = strlen(t->why);
  snprintf(t->why + l, sizeof t->why - l, "; committed to %s (%s)", o->ckb, how);
  return finish(c, EV_EX_OK, t->why);
}

int ev_run(const ev_opts *o) {
  ev_ctx c = {.o = o, .reads = json_array(), .report = json_object()};
  run_text t;
  c.t0 = now_s();
  if (mkdir(o->run_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "mi-gen: evolve: %s: %s\n", o->run_dir, strerror(errno));
    json_decref(c.reads);
    json_decref(c.report);
    return EV_EX_USAGE;
  }
  if (o->refs && !realpath(o->refs, c.refs_abs)) {
    fprintf(stderr, "mi-gen: evolve: --refs %s: %s\n", o->refs, strerror(errno));
    json_decref(c.reads);
    json_decref(c.report);
    return EV_EX_USAGE;
  }
  json_object_set_new(c.report, "references", o->refs ? json_string(c.refs_abs) : json_null());
  json_object_set_new(c.report, "candidates", o->candidates ? json_string(o->candidates) : json_null());
  json_object_set_new(c.report, "ckb", json_string(o->ckb));
  json_object_set_new(c.report, "tolerance", json_real(o->tol > 0 ? o->tol : EV_TOL));
  json_object_set_new(c.report, "llm", json_false());
  json_object_set_new(c.report, "phases", json_array());

  int x = coverage_phase(&c, &t);
  if (x >= 0) return x;
  json_t *probes = NULL, *e2e = NULL, *found = NULL;
  if ((x = explore_phase(&c, &t, &probes, &e2e)) >= 0) return x;
  if ((x = search_phase(&c, &t, probes, &found)) >= 0) {
    json_decref(e2e);
    return x;
  }

  /* 4. the candidate bundle, when the reading found leaves a layer kind or
   * an operator to one */
  json_t *bundle = NULL;
  int bx = bundle_phase(&c, found, e2e, &bundle, t.why, sizeof t.why);
  json_decref(e2e);
  if (bx >= 0) {
    json_decref(found);
    return finish(&c, bx, t.why);
  }
  return staged_phases(&c, &t, found, bundle);
}

int ev_main(const char *argv0, const char *exe_dir, const char *refs, const char *candidates, const char *ckb,
            const char *model, const char *platform, const char *dtype, const char *out, const char *run_dir,
            const char *goldens, int no_revalidate) {
  char buf[4096], ckb_abs[PATH_MAX], run[PATH_MAX + 16], model_abs[PATH_MAX], cand_abs[PATH_MAX];
  if (!ckb && !(ckb = mi_ckb_default_dir(argv0, buf, sizeof buf))) {
    fprintf(stderr, "mi-gen: evolve: %s\n", buf);
    return EV_EX_USAGE;
  }
  if (!realpath(ckb, ckb_abs)) {
    fprintf(stderr, "mi-gen: evolve: --ckb %s: %s\n", ckb, strerror(errno));
    return EV_EX_USAGE;
  }
  if (model && !realpath(model, model_abs)) {
    fprintf(stderr, "mi-gen: evolve: --model %s: %s\n", model, strerror(errno));
    return EV_EX_USAGE;
  }
  if (candidates && !realpath(candidates, cand_abs)) {
    fprintf(stderr, "mi-gen: evolve: --candidates %s: %s\n", candidates, strerror(errno));
    return EV_EX_USAGE;
  }
  if (!run_dir && !out) {
    fprintf(stderr, "mi-gen: evolve: --run-dir DIR (or --out DIR: the report goes to DIR/evolve) is needed\n");
    return EV_EX_USAGE;
  }
  if (run_dir) snprintf(run, sizeof run, "%s", run_dir);
  else {
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "mi-gen: evolve: --out %s: %s\n", out, strerror(errno));
      return EV_EX_USAGE;
    }
    snprintf(run, sizeof run, "%s/evolve", out);
  }
  ev_opts o = {.refs = refs, .candidates = candidates ? cand_abs : NULL, .ckb = ckb_abs,
               .model = model ? model_abs : NULL, .platform = platform ? platform : "cpu", .dtype = dtype ? dtype : "bf16",
               .run_dir = run, .exe_dir = exe_dir, .goldens = goldens, .no_revalidate = no_revalidate};
  return ev_run(&o);
}
