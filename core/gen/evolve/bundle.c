/* Phase 4, the candidate bundle: new operators (contract + float64
 * reference + platform kernels) from the LLM explorer or a researcher
 * (--candidates DIR, layout in docs/evolution.md). Nothing of it is
 * trusted: each operator contract must validate as a CKB entry of the
 * target CKB (schema, references), then pass as operator units (mi-verify
 * --stage 1 on a temporary CKB = the target plus these operators, against
 * their float64 references and the platform's kernels), and the found
 * found reading with the bundle's layer kind must then agree with the
 * oracle end to end (the edited contract interpreted in float64,
 * core/verify/interp.h, on the goldens of checkpoints where that kind
 * speaks). A rejection names the contract that failed. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ckb/ckb.h"
#include "core/gen/evolve/evolve.h"
#include "core/runtime/safetensors.h"
#include "core/util/spawn.h"

/* The bundle's operator as the CKB will hold it: provenance "evolved",
 * naming the candidate and what it cites (the schema's provenance has no
 * "candidate" source: the loop only ever writes verified knowledge). */
static json_t *as_evolved(const json_t *op, const char *bundle_id, const json_t *reads) {
  json_t *e = json_deep_copy(op);
  json_t *refs = json_array();
  json_t *old = json_object_get(json_object_get(op, "provenance"), "refs");
  size_t i;
  json_t *r;
  json_array_foreach(old, i, r) if (json_is_string(r)) json_array_append(refs, r);
  json_array_foreach(reads, i, r) {
    char s[4400];
    snprintf(s, sizeof s, "%s#sha256=%s", json_string_value(json_object_get(r, "path")),
             json_string_value(json_object_get(r, "sha256")));
    json_array_append_new(refs, json_string(s));
  }
  char notes[512];
  snprintf(notes, sizeof notes, "from candidate bundle %s, verified as operator units and end to end by mi-gen --evolve",
           bundle_id);
  json_object_set_new(e, "provenance", json_pack("{s:s, s:o, s:s}", "source", "evolved", "refs", refs, "notes", notes));
  return e;
}

json_t *ev_platform_with_bundle(const json_t *plat, const json_t *bundle, const char *platform, char *err, size_t n) {
  const json_t *ks = json_object_get(json_object_get(bundle, "kernels"), platform);
  if (!json_is_array(ks) || !json_array_size(ks)) {
    snprintf(err, n, "candidate bundle: no kernels for platform %s (\"kernels\": {\"%s\": [sources]})", platform,
             platform);
    return NULL;
  }
  json_t *p = json_deep_copy(plat), *kernels = json_object_get(p, "kernels");
  if (!json_is_array(kernels)) json_object_set_new(p, "kernels", kernels = json_array());
  size_t i, k;
  json_t *id, *x;
  json_array_foreach(json_object_get(bundle, "operators"), i, id) {
    int have = 0;
    json_array_foreach(kernels, k, x) have |= json_equal(json_object_get(x, "operator"), id);
    if (!have) json_array_append_new(kernels, json_pack("{s:O, s:[s]}", "operator", id, "dtypes", "f32"));
  }
  json_int_t want = json_integer_value(json_object_get(json_object_get(bundle, "abi"), "minor"));
  json_t *abi = json_object_get(p, "abi");
  if (json_is_object(abi) && want > json_integer_value(json_object_get(abi, "minor")))
    json_object_set_new(abi, "minor", json_integer(want));
  return p;
}

/* One ev_bundle_verify run, shared by its phases: the bundle, the scratch buffers (a phase's error
 * text may be read by the next) and what the phases build. */
typedef struct bundle_run {
  ev_ctx *c;
  const ev_opts *o;
  json_t *b;                 /* bundle.json */
  const char *bid;           /* its id */
  char p[4400], e2[2048];    /* the file at hand, the last callee's error */
  char tmp[4300];            /* the temporary CKB: the target plus the bundle's operators */
  char only[2048];           /* the bundle's operator ids, comma-separated (mi-verify --only) */
  json_t *entries, *units;   /* the operator entries as the CKB will hold them; stage-1 unit rows */
  json_t *layer, *rows;      /* the new layer kind's sequence; end-to-end rows */
  char *err;
  size_t n;
} bundle_run;

/* 1. each contract as a CKB entry of the target, into r->entries and r->only; 0, 1 (rejected). */
static int bundle_entries(bundle_run *r, mi_ckb *ck) {
  const ev_opts *o = r->o;
  char *err = r->err;
  size_t n = r->n, i;
  json_t *id;
  json_array_foreach(json_object_get(r->b, "operators"), i, id) {
    const char *s = json_string_value(id);
    const char *name = s && !strncmp(s, "operator.", 9) ? s + 9 : NULL;
    char why[256];
    if (!name || mi_ckb_name_check(name, why, sizeof why) != 0) {
      snprintf(err, n, "candidate bundle: %s: operators[%zu] is not an operator id (operator.NAME)", r->p, i);
      return 1;
    }
    char op_path[4400];
    snprintf(op_path, sizeof op_path, "%s/operators/%s.json", o->candidates, name);
    json_t *op = ev_read_json(r->c, op_path, "bundle", r->e2, sizeof r->e2);
    if (!op) {
      snprintf(err, n, "candidate bundle: operator contract %s rejected: %s", s, r->e2);
      return 1;
    }
    json_t *ev = as_evolved(op, r->bid, NULL);
    json_decref(op);
    char rel[4400];
    snprintf(rel, sizeof rel, "%s/operators/%s.json", o->ckb, name);
    ev_diag_buf d = {{0}, 0};
    int probs = mi_ckb_validate_entry(ck, ev, rel, ev_diag_first, &d);
    if (probs) {
      snprintf(err, n, "candidate bundle: operator contract %s (%s) rejected: %d problem(s), first: %s", s, op_path, probs,
               d.text);
      json_decref(ev);
      return 1;
    }
    json_array_append_new(r->entries, ev);
    size_t l = strlen(r->only);
    snprintf(r->only + l, sizeof r->only - l, "%s%s", l ? "," : "", s);
  }
  return 0;
}

/* 2a. the temporary CKB: a copy of the target, the bundle's operators, and the platform contract
 * listing the bundle's kernels (as the consolidator will); 0, 1 (bundle at fault), -1. */
static int bundle_temp_ckb(bundle_run *r) {
  const ev_opts *o = r->o;
  char *err = r->err;
  size_t n = r->n, i;
  json_t *id;
  int rc = 0;
  if (mi_remove_tree(r->tmp) != 0 || mi_copy_tree(o->ckb, r->tmp) != 0) {
    snprintf(err, n, "%s: cannot copy the CKB there", r->tmp);
    return -1;
  }
  json_array_foreach(r->entries, i, id) {
    char dp[4500];
    snprintf(dp, sizeof dp, "%s/operators/%s.json", r->tmp, json_string_value(json_object_get(id, "id")) + 9);
    if (json_dump_file(id, dp, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
      snprintf(err, n, "%s: cannot write", dp);
      return -1;
    }
  }
  char pp[4500];
  snprintf(pp, sizeof pp, "%s/platforms/%s.json", r->tmp, o->platform ? o->platform : "cpu");
  json_t *plat = json_load_file(pp, 0, NULL);
  json_t *np = plat ? ev_platform_with_bundle(plat, r->b, o->platform ? o->platform : "cpu", r->e2, sizeof r->e2) : NULL;
  if (!np || json_dump_file(np, pp, JSON_INDENT(2)) != 0) {
    snprintf(err, n, "%s", plat ? r->e2 : "the platform contract is not in the CKB");
    rc = plat && !np ? 1 : -1;
  }
  json_decref(plat);
  json_decref(np);
  return rc;
}

/* 2b. operator units: mi-verify --stage 1 on the temporary CKB, its units into r->units and the
 * exit into *out; 0 or 1 (a unit failed). */
static int bundle_stage1(bundle_run *r, json_t *out) {
  const ev_opts *o = r->o;
  char plugin[4400], rep[4400];
  snprintf(plugin, sizeof plugin, "%s/../lib/metainfer/libmi-%s.so", o->exe_dir, o->platform ? o->platform : "cpu");
  snprintf(rep, sizeof rep, "%s/bundle-stage1.json", o->run_dir);
  char exe[4200], log[4400];
  snprintf(exe, sizeof exe, "%s/mi-verify", o->exe_dir);
  snprintf(log, sizeof log, "%s/bundle-stage1.log", o->run_dir);
  char *argv[] = {exe, "--platform-plugin", plugin, "--ckb", r->tmp, "--stage", "1", "--only", r->only,
                  "--seed", "1", "--report", rep, NULL};
  int vr = mi_remove_tree(log) == 0 ? mi_spawn_wait(argv, log, NULL, 0) : -1;
  json_t *rep_j = json_load_file(rep, 0, NULL);
  json_t *st = json_object_get(json_object_get(rep_j, "stages"), "1");
  if (!st) st = json_array_get(json_object_get(rep_j, "stages"), 0);
  size_t k;
  json_t *u;
  int rc = 0;
  json_array_foreach(json_object_get(st, "units"), k, u)
      json_array_append_new(r->units, json_pack("{s:O?, s:O?, s:O?}", "id", json_object_get(u, "id"), "verdict",
                                                json_object_get(u, "verdict"), "message", json_object_get(u, "message")));
  json_object_set_new(out, "stage1_exit", json_integer(vr));
  if (vr != 0) {
    const char *bad = NULL;
    json_array_foreach(json_object_get(st, "units"), k, u) if (!bad &&
                                                               strcmp(json_string_value(json_object_get(u, "verdict")) ?: "", "PASS"))
        bad = json_string_value(json_object_get(u, "id"));
    snprintf(r->err, r->n, "candidate bundle: operator units failed (mi-verify --stage 1 exit %d%s%s; %s/bundle-stage1.log)",
             vr, bad ? ", first failing: " : "", bad ? bad : "", o->run_dir);
    rc = 1;
  }
  json_decref(rep_j);
  return rc;
}

/* 4, one golden g (the i-th): remake its checkpoint, interpret the found reading with the bundle's
 * layer kind in float64 and compare with the oracle; a row into r->rows; 0, 1 (over tol), -1. */
static int bundle_e2e_one(bundle_run *r, const json_t *found, size_t i, const json_t *g, double tol) {
  const ev_opts *o = r->o;
  char *err = r->err, *e2 = r->e2;
  size_t n = r->n;
  int rc = 0;
  const char *gpath = json_string_value(json_object_get(g, "path"));
  const json_t *gold = json_object_get(g, "golden");
  const char *shape = json_string_value(json_object_get(json_object_get(gold, "model"), "shape"));
  char dir[4400];
  snprintf(dir, sizeof dir, "%s/e2e/%zu-%s", o->run_dir, i, shape ? shape : "model");
  if (ev_remake_checkpoint(o, gold, dir, e2, sizeof r->e2) != 0) {
    snprintf(err, n, "%s: %s", gpath, e2);
    return -1;
  }
  char cp[4500];
  snprintf(cp, sizeof cp, "%s/config.json", dir);
  json_t *cfg = json_load_file(cp, 0, NULL);
  mi_weights *w = cfg ? mi_weights_open(dir, e2, sizeof r->e2) : NULL;
  mi_ckb *tk = w ? mi_ckb_open(r->tmp, e2, sizeof r->e2) : NULL;
  /* the found reading with the bundle's layer as the kind it stands for */
  json_t *m = tk ? ev_with_layer(json_object_get(found, "contract"), r->layer, cfg) : NULL;
  double e = 0;
  int steps = 0;
  if (!m) {
    snprintf(err, n, "%s: %s", dir, cfg ? e2 : "no config.json");
    rc = -1;
  } else if (ev_oracle_error(tk, m, cfg, w, gold, &e, &steps, e2, sizeof r->e2) != 0) {
    snprintf(err, n, "%s: %s", gpath, e2);
    rc = -1;
  }
  json_decref(m);
  if (tk) mi_ckb_close(tk);
  if (rc == 0) {
    const int pass = e <= tol;
    json_array_append_new(r->rows, json_pack("{s:s, s:s, s:f, s:i, s:s}", "golden", gpath, "shape", shape ? shape : "?",
                                             "error", isfinite(e) ? e : 1e300, "steps", steps, "verdict",
                                             pass ? "pass" : "fail"));
    fprintf(stderr, "mi-gen: evolve: end to end %s: %.3g over %d steps, %s\n", shape ? shape : "?", e, steps,
            pass ? "pass" : "fail");
    if (!pass) {
      snprintf(err, n, "candidate bundle: end to end on %s: max |logprob diff| %.3g > %g", gpath, e, tol);
      rc = 1;
    }
  }
  if (w) mi_weights_close(w);
  json_decref(cfg);
  return rc;
}

int ev_bundle_verify(ev_ctx *c, const json_t *found, json_t *e2e, json_t **bundle_out, json_t **out, char *err,
                     size_t n) {
  const ev_opts *o = c->o;
  *out = json_object();
  *bundle_out = NULL;
  bundle_run run = {.c = c, .o = o, .err = err, .n = n}, *r = &run;
  snprintf(r->p, sizeof r->p, "%s/bundle.json", o->candidates);
  json_t *b = r->b = ev_read_json(c, r->p, "bundle", r->e2, sizeof r->e2);
  if (!b) {
    snprintf(err, n, "candidate bundle: %s", r->e2);
    return 1;
  }
  const char *bid = r->bid = json_string_value(json_object_get(b, "id"));
  json_t *ops = json_object_get(b, "operators");
  if (!bid || !json_is_array(ops) || !json_array_size(ops)) {
    snprintf(err, n, "candidate bundle: %s: needs \"id\" and a non-empty \"operators\" array", r->p);
    json_decref(b);
    return 1;
  }
  json_object_set_new(*out, "id", json_string(bid));
  mi_ckb *ck = mi_ckb_open(o->ckb, r->e2, sizeof r->e2);
  if (!ck) {
    snprintf(err, n, "%s", r->e2);
    json_decref(b);
    return -1;
  }
  r->entries = json_array();
  r->units = json_array();
  int rc = bundle_entries(r, ck);
  mi_ckb_close(ck);
  /* 2. operator units on a temporary CKB: the target plus these operators */
  snprintf(r->tmp, sizeof r->tmp, "%s/bundle-ckb", o->run_dir);
  if (rc == 0) rc = bundle_temp_ckb(r);
  if (rc == 0) rc = bundle_stage1(r, *out);
  json_object_set_new(*out, "operator_units", r->units);
  /* 3. the layer sequence of the new layer kind */
  if (rc == 0) {
    snprintf(r->p, sizeof r->p, "%s/layer_%s.json", o->candidates,
             json_string_value(json_object_get(b, "layer_kind")) ?: "linear_attention");
    r->layer = ev_read_json(c, r->p, "bundle", r->e2, sizeof r->e2);
    if (!r->layer) {
      snprintf(err, n, "candidate bundle: %s", r->e2);
      rc = 1;
    }
  }
  /* 4. end to end: the found reading with the bundle's layer kind against the oracle */
  r->rows = json_array();
  const double tol = o->tol > 0 ? o->tol : EV_TOL;
  size_t i;
  json_t *g;
  json_array_foreach(e2e, i, g) {
    if (rc) break;
    rc = bundle_e2e_one(r, found, i, g, tol);
  }
  json_object_set_new(*out, "end_to_end", r->rows);
  if (rc == 0) {
    json_object_set_new(b, "operator_entries", r->entries);
    json_object_set_new(b, "layer", r->layer);
    *bundle_out = b;
  } else {
    json_decref(r->entries);
    json_decref(r->layer);
    json_decref(b);
  }
  return rc;
}
