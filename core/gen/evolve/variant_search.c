/* Phase 3, the variant search: which reading of the math does the oracle
 * agree with? From the closest covered contract (model.qwen3: norms ·w,
 * full rotary, q/k RMSNorm ·w, no output gate) the candidates are every
 * combination of
 *   layer/final norm   w | 1+w
 *   q/k norm           w | 1+w | none
 *   rotary             full | partial_rotary_factor
 *   attention output   none | sigmoid gate interleaved per head | gate as q_proj's second half
 * (36, the full product: small enough that nothing needs pruning, and the
 * table then shows every reading's distance from the oracle). Each is the
 * float64 reference (core/verify/models/qwen35.c) with that knob setting,
 * teacher-forced on llama.cpp's goldens of the probe checkpoints (only
 * full-attention layers speak); its error is the max |top-10 logprob diff|
 * over prompts x steps, and it passes within EV_TOL. A reading is found
 * when exactly one candidate passes on each probe and the probes agree.
 * No LLM, no randomness: the order is fixed and every score is logged. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/gen/evolve/evolve.h"
#include "core/runtime/safetensors.h"
#include "core/util/spawn.h"

static const char *qk_name[] = {"1+w", "w", "none"};
static const char *gate_name[] = {"interleaved", "half", "none"};

void ev_candidate_name(const vf_qwen35_variant *v, char *out, size_t n) {
  snprintf(out, n, "norm=%s qk=%s rotary=%s gate=%s", v->norm_offset != 0 ? "1+w" : "w", qk_name[v->qk],
           v->full_rotary ? "full" : "partial", gate_name[v->gate]);
}

int ev_candidates(ev_candidate *out, int max) {
  /* the closest contract's reading first, then the product with each
   * dimension's covered value first */
  static const double norms[] = {0.0, 1.0};
  static const vf_q35_qk_norm qks[] = {VF_Q35_QK_W, VF_Q35_QK_1W, VF_Q35_QK_NONE};
  static const int rots[] = {1, 0};
  static const vf_q35_gate gates[] = {VF_Q35_GATE_NONE, VF_Q35_GATE_INTERLEAVED, VF_Q35_GATE_HALF};
  int k = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int r = 0; r < 2; r++)
        for (int g = 0; g < 3; g++) {
          if (k >= max) return -1;
          ev_candidate *c = &out[k++];
          c->v.norm_offset = norms[a];
          c->v.qk = qks[b];
          c->v.full_rotary = rots[r];
          c->v.gate = gates[g];
          ev_candidate_name(&c->v, c->name, sizeof c->name);
        }
  return k;
}

static uint32_t fnv1a32_file(const char *path, int *ok) {
  FILE *f = fopen(path, "rb");
  uint32_t h = 0x811c9dc5u;
  *ok = f != NULL;
  if (!f) return 0;
  unsigned char buf[1 << 16];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < r; i++) h = (h ^ buf[i]) * 0x01000193u;
  fclose(f);
  return h;
}

int ev_remake_checkpoint(const ev_opts *o, const json_t *golden, const char *dir, char *err, size_t n) {
  const json_t *model = json_object_get(golden, "model");
  const json_t *args = json_object_get(model, "mkmodel_args");
  const char *want = json_string_value(json_object_get(model, "safetensors_fnv1a32"));
  if (!json_is_array(args) || !want) {
    snprintf(err, n, "golden: no model.mkmodel_args / model.safetensors_fnv1a32");
    return -1;
  }
  /* mi-mkmodel ARGS... --out DIR, run without a shell: the golden's
   * arguments are data from a file, never words of a command line */
  char exe[4200];
  snprintf(exe, sizeof exe, "%s/mi-mkmodel", o->exe_dir);
  size_t na = json_array_size(args);
  if (na > 64) {
    snprintf(err, n, "golden: mkmodel_args has %zu entries (at most 64)", na);
    return -1;
  }
  char *argv[64 + 4];
  size_t k = 0;
  argv[k++] = exe;
  size_t i;
  json_t *a;
  json_array_foreach(args, i, a) {
    if (!json_is_string(a) || json_string_length(a) > 1000) {
      snprintf(err, n, "golden: mkmodel_args[%zu] is not a short string", i);
      return -1;
    }
    argv[k++] = (char *)json_string_value(a);
  }
  argv[k++] = "--out";
  argv[k++] = (char *)dir;
  argv[k] = NULL;
  if (mi_spawn_wait(argv, "/dev/null", NULL, 600) != 0) {
    snprintf(err, n, "mi-mkmodel failed remaking the golden's checkpoint into %s", dir);
    return -1;
  }
  char st[4200];
  snprintf(st, sizeof st, "%s/model.safetensors", dir);
  int ok;
  char got[16];
  snprintf(got, sizeof got, "%08x", fnv1a32_file(st, &ok));
  if (!ok || strcmp(got, want)) {
    snprintf(err, n, "%s: FNV-1a %s, the golden's weights %s (golden made from other weights)", st, got, want);
    return -1;
  }
  return 0;
}

static void log_softmax(const double *l, double *out, int V) {
  double mx = -INFINITY, s = 0;
  for (int i = 0; i < V; i++) mx = fmax(mx, l[i]);
  for (int i = 0; i < V; i++) s += exp(l[i] - mx);
  double lz = mx + log(s);
  for (int i = 0; i < V; i++) out[i] = l[i] - lz;
}

int ev_oracle_error(vf_qwen35 *m, const json_t *golden, double *max_err, int *steps_out, char *err, size_t n) {
  const int V = vf_qwen35_vocab(m);
  double *lg = malloc((size_t)V * sizeof(double)), *lp = malloc((size_t)V * sizeof(double));
  double worst = 0;
  int steps = 0, rc = 0;
  size_t i;
  json_t *c;
  if (!lg || !lp) {
    snprintf(err, n, "out of memory");
    rc = -1;
  }
  json_array_foreach(json_object_get(golden, "cases"), i, c) {
    if (rc) break;
    json_t *pids = json_object_get(c, "prompt_ids"), *st = json_object_get(c, "steps");
    const int np = (int)json_array_size(pids), ns = (int)json_array_size(st);
    if (np < 1 || ns < 1) {
      snprintf(err, n, "golden case %zu: no prompt_ids or steps", i);
      rc = -1;
      break;
    }
    int32_t *ids = malloc((size_t)(np + ns) * sizeof(int32_t));
    vf_qwen35_seq *s = ids ? vf_qwen35_seq_new(m, np + ns) : NULL;
    if (!s) {
      snprintf(err, n, "out of memory");
      free(ids);
      rc = -1;
      break;
    }
    for (int t = 0; t < np; t++) ids[t] = (int32_t)json_integer_value(json_array_get(pids, (size_t)t));
    for (int t = 0; t < ns; t++)
      ids[np + t] = (int32_t)json_integer_value(json_object_get(json_array_get(st, (size_t)t), "token_id"));
    for (int t = 0; t < ns && rc == 0; t++) {
      /* step t predicts ids[np + t]: the prompt, then one token per step, state carried */
      if ((t == 0 ? vf_qwen35_forward(m, s, ids, np, 1, lg, 0, NULL, err, n)
                  : vf_qwen35_forward(m, s, ids + np + t - 1, 1, 1, lg, 0, NULL, err, n)) != 0) {
        rc = -1;
        break;
      }
      log_softmax(lg, lp, V);
      size_t k;
      json_t *pair;
      json_array_foreach(json_object_get(json_array_get(st, (size_t)t), "top"), k, pair) {
        json_int_t id = json_integer_value(json_array_get(pair, 0));
        if (id < 0 || id >= V) {
          snprintf(err, n, "golden case %zu step %d: token id %lld outside the vocabulary", i, t, (long long)id);
          rc = -1;
          break;
        }
        worst = fmax(worst, fabs(lp[id] - json_number_value(json_array_get(pair, 1))));
      }
      steps++;
    }
    vf_qwen35_seq_free(s);
    free(ids);
  }
  free(lg);
  free(lp);
  *max_err = worst;
  if (steps_out) *steps_out = steps;
  return rc;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static json_t *variant_json(const vf_qwen35_variant *v) {
  return json_pack("{s:s, s:s, s:s, s:s}", "norm", v->norm_offset != 0 ? "1+w" : "w", "qk_norm", qk_name[v->qk],
                   "rotary", v->full_rotary ? "full" : "partial", "gate", gate_name[v->gate]);
}

static int same_variant(const vf_qwen35_variant *a, const vf_qwen35_variant *b) {
  return a->norm_offset == b->norm_offset && a->qk == b->qk && a->full_rotary == b->full_rotary && a->gate == b->gate;
}

int ev_variant_search(ev_ctx *c, json_t *probes, json_t **table, vf_qwen35_variant *found, char *err, size_t n) {
  const double tol = c->o->tol > 0 ? c->o->tol : EV_TOL;
  ev_candidate cand[64];
  const int nc = ev_candidates(cand, 64);
  *table = json_array();
  int rc = 0, have = 0;
  size_t pi;
  json_t *p;
  json_array_foreach(probes, pi, p) {
    const char *gpath = json_string_value(json_object_get(p, "path"));
    const json_t *g = json_object_get(p, "golden");
    const char *shape = json_string_value(json_object_get(json_object_get(g, "model"), "shape"));
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/probes/%zu-%s", c->o->run_dir, pi, shape ? shape : "probe");
    char e2[1024];
    if (ev_remake_checkpoint(c->o, g, dir, e2, sizeof e2) != 0) {
      snprintf(err, n, "%s: %s", gpath, e2);
      return -1;
    }
    char cp[4300];
    snprintf(cp, sizeof cp, "%s/config.json", dir);
    json_error_t je;
    json_t *cfg = json_load_file(cp, 0, &je);
    mi_weights *w = cfg ? mi_weights_open(dir, e2, sizeof e2) : NULL;
    vf_qwen35 *m = NULL;
    if (!cfg || !w || vf_qwen35_open(cfg, w, &m, e2, sizeof e2) != 0) {
      snprintf(err, n, "%s: %s", cfg ? dir : cp, cfg ? e2 : je.text);
      if (w) mi_weights_close(w);
      json_decref(cfg);
      return -1;
    }
    if (!c->model_cfg) c->model_cfg = json_incref(cfg);
    int passing = 0, pick = -1;
    for (int k = 0; k < nc; k++) {
      vf_qwen35_set_variant(m, &cand[k].v);
      double e = 0, t0 = now_s();
      int steps = 0;
      if (ev_oracle_error(m, g, &e, &steps, e2, sizeof e2) != 0) {
        snprintf(err, n, "%s, candidate %s: %s", gpath, cand[k].name, e2);
        rc = -1;
        break;
      }
      const int pass = e <= tol; /* a NaN error fails */
      if (pass) passing++, pick = k;
      json_t *row = json_pack("{s:s, s:s, s:i, s:s, s:o, s:f, s:s, s:i, s:f}", "probe", shape ? shape : "?", "golden",
                              gpath, "index", k, "candidate", cand[k].name, "variant", variant_json(&cand[k].v),
                              "error", isfinite(e) ? e : 1e300, "verdict", pass ? "pass" : "fail", "steps", steps,
                              "wall_s", now_s() - t0);
      json_array_append_new(*table, row);
      fprintf(stderr, "mi-gen: evolve: %-14s %-52s %.3g %s\n", shape ? shape : "?", cand[k].name, e,
              pass ? "pass" : "fail");
    }
    vf_qwen35_close(m);
    mi_weights_close(w);
    json_decref(cfg);
    if (rc) return rc;
    if (passing != 1) {
      snprintf(err, n, "%s (%s): %d of %d candidates within %g of the oracle (need exactly one)", gpath,
               shape ? shape : "?", passing, nc, tol);
      return 1;
    }
    if (have && !same_variant(&cand[pick].v, found)) {
      char a[96];
      ev_candidate_name(found, a, sizeof a);
      snprintf(err, n, "the probes disagree: %s picks %s, an earlier probe %s", gpath, cand[pick].name, a);
      return 1;
    }
    *found = cand[pick].v;
    have = 1;
  }
  if (!have) {
    snprintf(err, n, "no probe golden (a golden whose model.shape starts with probe-attn) under the references");
    return 1;
  }
  return 0;
}
