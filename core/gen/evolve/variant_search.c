/* Phase 3, the variant search: which reading of the math does the oracle
 * agree with? Generic over the vocabulary of ckb/variants/ (kind
 * "variant"): from the closest contract (the CKB's model contract that
 * explains most of the first probe's weights and fields), the candidates
 * are every combination of one member per variant group, among the members
 * whose evidence (config fields and values, weight keys) holds in the
 * probe's checkpoint; a group's order-0 member is the base's own reading,
 * so the first candidate is the closest contract as it is. Each candidate
 * is the base edited by its members (ev_apply). A candidate whose contract
 * leaves a config field or weight of the probe unexplained is not scored
 * (verdict "unexplained", the first names kept); one that needs an
 * operator the CKB (plus the candidate bundle's contracts) lacks neither;
 * every other is interpreted in float64 (core/verify/interp.h) and
 * teacher-forced on llama.cpp's goldens of the probe checkpoints: its
 * error is the max |top-10 logprob diff| over prompts x steps, and it
 * passes within the tolerance. A reading is found when exactly one
 * candidate passes on each probe and the probes agree. No LLM, no
 * randomness: the order is fixed and every score is logged. A candidate's
 * name is group=value for each group the search varies or whose member is
 * not the base's own reading (order 0). */
#define _GNU_SOURCE
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/gen/evolve/evolve.h"
#include "core/runtime/safetensors.h"
#include "core/util/spawn.h"
#include "core/verify/interp.h"

#define EV_MAX_CANDIDATES 4096

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

int ev_oracle_error(const mi_ckb *c, const json_t *contract, const json_t *cfg, const mi_weights *w,
                    const json_t *golden, double *max_err, int *steps_out, char *err, size_t n) {
  double worst = 0;
  int steps = 0, rc = 0;
  const json_t *vv = mi_ckb_config_value(contract, cfg, "vocab_size", 10);
  const int V = json_is_integer(vv) ? (int)json_integer_value(vv) : 0;
  vf_interp *m = V > 0 ? vf_interp_open_json(c, contract, cfg, w, err, n) : NULL;
  double *lp = m ? malloc((size_t)V * sizeof(double)) : NULL;
  if (!lp) {
    if (V <= 0) snprintf(err, n, "the contract binds no vocab_size on this config.json");
    else if (m) snprintf(err, n, "out of memory");
    vf_interp_close(m);
    return -1;
  }
  size_t i;
  json_t *cs;
  json_array_foreach(json_object_get(golden, "cases"), i, cs) {
    json_t *pids = json_object_get(cs, "prompt_ids"), *st = json_object_get(cs, "steps");
    const int np = (int)json_array_size(pids), ns = (int)json_array_size(st);
    if (np < 1 || ns < 1) {
      snprintf(err, n, "golden case %zu: no prompt_ids or steps", i);
      rc = -1;
      break;
    }
    /* the prompt and every step's token but the last: causal, so the
     * logits at position np-1+t are step t's, state carried as in decode */
    const int T = np + ns - 1;
    int32_t *ids = malloc((size_t)T * sizeof(int32_t));
    if (!ids) {
      snprintf(err, n, "out of memory");
      rc = -1;
      break;
    }
    for (int t = 0; t < np; t++) ids[t] = (int32_t)json_integer_value(json_array_get(pids, (size_t)t));
    for (int t = 0; t + 1 < ns; t++)
      ids[np + t] = (int32_t)json_integer_value(json_object_get(json_array_get(st, (size_t)t), "token_id"));
    double *lg = vf_interp_forward(m, ids, T, ns, NULL, err, n); /* [ns, V] */
    free(ids);
    if (!lg) {
      rc = -1;
      break;
    }
    for (int t = 0; t < ns && rc == 0; t++) {
      log_softmax(lg + (size_t)t * (size_t)V, lp, V);
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
    free(lg);
    if (rc) break;
  }
  free(lp);
  vf_interp_close(m);
  *max_err = worst;
  if (steps_out) *steps_out = steps;
  return rc;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const mi_ckb_entry *ev_closest_contract(const mi_ckb *c, const json_t *cfg, const mi_weights *w) {
  const mi_ckb_entry *best = NULL;
  long best_score = -1;
  /* the vocabulary's readings are edits of the curated contracts (a
   * group's order-0 member is what a curated base already computes): an
   * evolved contract is such a base plus variants, and searching from it
   * would read its edits as the base's own. Curated contracts only, where
   * the CKB has any. */
  int any_curated = 0;
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    any_curated |= e->kind && !strcmp(e->kind, "model") &&
                   !strcmp(json_string_value(json_object_get(json_object_get(e->json, "provenance"), "source")) ?: "", "curated");
  }
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "model") || !e->id) continue;
    if (any_curated &&
        strcmp(json_string_value(json_object_get(json_object_get(e->json, "provenance"), "source")) ?: "", "curated"))
      continue;
    /* tensors a weight key matches count most; bound config fields break ties */
    long score = 0;
    for (size_t k = 0; k < mi_weights_count(w); k++) {
      mi_weight_info x;
      size_t j;
      json_t *spec;
      if (mi_weights_at(w, k, &x) != 0) continue;
      json_array_foreach(json_object_get(e->json, "weights"), j, spec) {
        const char *key = json_string_value(json_object_get(spec, "key"));
        const char *p = key ? strstr(key, "{i}") : NULL;
        int hit = 0;
        if (key && !p) hit = !strcmp(key, x.name);
        else if (p && !strncmp(key, x.name, (size_t)(p - key))) {
          const char *q = x.name + (p - key);
          while (*q >= '0' && *q <= '9') q++;
          hit = q > x.name + (p - key) && !strcmp(q, p + 3);
        }
        if (hit) {
          score += 1000;
          break;
        }
      }
    }
    size_t j;
    json_t *f;
    json_array_foreach(json_object_get(e->json, "config"), j, f) {
      const char *nm = json_string_value(json_object_get(f, "name"));
      if (nm && ev_cfg_field(cfg, nm)) score++;
    }
    if (score > best_score || (score == best_score && best && strcmp(e->id, best->id) < 0)) best = e, best_score = score;
  }
  return best;
}

int ev_scratch_ckb(ev_ctx *c, const char *name, char *dir, size_t dn, char *err, size_t n) {
  snprintf(dir, dn, "%s/%s", c->o->run_dir, name);
  if (mi_remove_tree(dir) != 0 || mi_copy_tree(c->o->ckb, dir) != 0) {
    snprintf(err, n, "%s: cannot copy the CKB there", dir);
    return -1;
  }
  if (!c->o->candidates) return 0;
  char p[4400], e2[1024];
  snprintf(p, sizeof p, "%s/bundle.json", c->o->candidates);
  json_t *b = ev_read_json(c, p, "variant_search", e2, sizeof e2);
  if (!b) return 0; /* phase 4 rejects the bundle, naming why */
  mi_ckb *ck = mi_ckb_open(dir, e2, sizeof e2);
  size_t i;
  json_t *id;
  json_array_foreach(json_object_get(b, "operators"), i, id) {
    const char *s = json_string_value(id);
    char why[200];
    if (!ck || !s || strncmp(s, "operator.", 9) || mi_ckb_name_check(s + 9, why, sizeof why) != 0 || mi_ckb_find(ck, s))
      continue;
    char op[4400], dp[4400];
    snprintf(op, sizeof op, "%s/operators/%s.json", c->o->candidates, s + 9);
    snprintf(dp, sizeof dp, "%s/operators/%s.json", dir, s + 9);
    json_t *e = ev_read_json(c, op, "variant_search", e2, sizeof e2);
    if (e) json_dump_file(e, dp, JSON_INDENT(2)); /* scored with; verified as a unit in phase 4 */
    json_decref(e);
  }
  if (ck) mi_ckb_close(ck);
  json_decref(b);
  return 0;
}

/* The probes' checkpoints, each remade once from its golden into
 * RUN/probes/K-SHAPE and open for the whole search. */
typedef struct probe_set {
  size_t n;
  json_t **cfg;     /* [n] config.json */
  mi_weights **w;   /* [n] */
  char (*dir)[4400]; /* [n] the checkpoint's folder */
} probe_set;

static void probe_set_free(probe_set *s) {
  for (size_t k = 0; k < s->n; k++) {
    if (s->cfg) json_decref(s->cfg[k]);
    if (s->w && s->w[k]) mi_weights_close(s->w[k]);
  }
  free(s->cfg), free(s->w), free(s->dir);
  memset(s, 0, sizeof *s);
}

static int probe_set_load(const ev_ctx *c, const json_t *probes, probe_set *s, char *err, size_t n) {
  const size_t np = json_array_size(probes);
  s->n = np;
  s->cfg = calloc(np, sizeof *s->cfg);
  s->w = calloc(np, sizeof *s->w);
  s->dir = calloc(np, sizeof *s->dir);
  if (!s->cfg || !s->w || !s->dir) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  for (size_t pi = 0; pi < np; pi++) {
    const json_t *p = json_array_get(probes, pi), *g = json_object_get(p, "golden");
    const char *shape = json_string_value(json_object_get(json_object_get(g, "model"), "shape")) ?: "probe";
    char cp[4500], e2[2048];
    snprintf(s->dir[pi], sizeof s->dir[pi], "%s/probes/%zu-%s", c->o->run_dir, pi, shape);
    if (ev_remake_checkpoint(c->o, g, s->dir[pi], e2, sizeof e2) != 0) {
      snprintf(err, n, "%s: %s", json_string_value(json_object_get(p, "path")), e2);
      return -1;
    }
    snprintf(cp, sizeof cp, "%s/config.json", s->dir[pi]);
    json_error_t je;
    s->cfg[pi] = json_load_file(cp, 0, &je);
    s->w[pi] = s->cfg[pi] ? mi_weights_open(s->dir[pi], e2, sizeof e2) : NULL;
    if (!s->w[pi]) {
      snprintf(err, n, "%s: %s", s->cfg[pi] ? s->dir[pi] : cp, s->cfg[pi] ? e2 : je.text);
      return -1;
    }
  }
  return 0;
}

/* The vocabulary's members whose evidence holds on any probe, by group in
 * the vocabulary's order: a variant one probe shows is a candidate on
 * every probe (one reading must explain them all), whichever probe sorts
 * first (a scaled checkpoint beside an unscaled one). */
static json_t *any_evidence(const json_t *vocab, const probe_set *s) {
  json_t *groups = json_object();
  size_t i;
  json_t *v;
  json_array_foreach(vocab, i, v) {
    int any = 0;
    for (size_t k = 0; k < s->n && !any; k++) any = ev_evidence(v, s->cfg[k], s->w[k]);
    const char *gname = json_string_value(json_object_get(v, "group"));
    if (!any || !gname) continue;
    json_t *arr = json_object_get(groups, gname);
    if (!arr) json_object_set_new(groups, gname, arr = json_array());
    json_array_append(arr, v);
  }
  return groups;
}

/* The weight keys a member's edit reads: those it adds, and the names it
 * renames weights to. */
static json_t *keys_read(const json_t *v) {
  json_t *out = json_array(), *ed = json_object_get(v, "edit"), *x;
  size_t i;
  json_array_foreach(json_object_get(ed, "add_weights"), i, x) if (json_is_string(json_object_get(x, "key")))
      json_array_append(out, json_object_get(x, "key"));
  const char *k;
  json_object_foreach(json_object_get(ed, "rename_weights"), k, x) if (json_is_string(x)) json_array_append(out, x);
  return out;
}

/* Does any member in play other than `self` (or the base) read key? */
static int read_elsewhere(const json_t *groups, const json_t *base, const json_t *self, const char *key) {
  if (mi_ckb_named(json_object_get(base, "weights"), "key", key)) return 1;
  const char *g;
  json_t *arr, *v;
  size_t i, j;
  json_object_foreach((json_t *)groups, g, arr) json_array_foreach(arr, i, v) {
    if (v == self) continue;
    json_t *ks = keys_read(v), *x;
    int hit = 0;
    json_array_foreach(ks, j, x) hit |= !strcmp(json_string_value(x), key);
    json_decref(ks);
    if (hit) return 1;
  }
  return 0;
}

/* A product above the cap, staged: a group one of whose members alone reads
 * a weight some probe holds (no other member in play, nor the base, reads
 * that key) is decided for that member before the product is taken, since
 * every candidate without it leaves the weight unread ("no contract step
 * reads it"). Such groups are fixed (named on stderr and in the report);
 * the others stay in the product. */
static void decide_by_weights(ev_ctx *c, json_t *groups, const json_t *base, const probe_set *s) {
  json_t *decided = json_object();
  const char *g;
  json_t *arr;
  json_object_foreach(groups, g, arr) {
    if (json_array_size(arr) < 2) continue;
    long pick = -1;
    int conflict = 0;
    char why[300] = "";
    size_t i, j;
    json_t *v, *x;
    json_array_foreach(arr, i, v) {
      json_t *ks = keys_read(v);
      json_array_foreach(ks, j, x) {
        const char *key = json_string_value(x);
        int held = 0;
        for (size_t p = 0; p < s->n && !held; p++) held = ev_has_weight(s->w[p], key);
        if (!held || read_elsewhere(groups, base, v, key)) continue;
        if (pick >= 0 && pick != (long)i) conflict = 1;
        pick = (long)i;
        snprintf(why, sizeof why, "%s", key);
      }
      json_decref(ks);
    }
    if (pick < 0 || conflict) continue;
    json_t *v1 = json_incref(json_array_get(arr, (size_t)pick));
    json_array_clear(arr);
    json_array_append_new(arr, v1);
    json_object_set_new(decided, g, json_pack("{s:s, s:s}", "value", json_string_value(json_object_get(v1, "value")) ?: "?",
                                              "weight", why));
    fprintf(stderr, "mi-gen: evolve: %s=%s decided: only it reads %s, which the probes hold\n", g,
            json_string_value(json_object_get(v1, "value")) ?: "?", why);
  }
  json_object_set_new(c->report, "decided_by_weights", decided);
}

/* Candidate k of the product (the last group fastest): its members and name. */
static json_t *candidate(const json_t *groups, size_t k, char *name, size_t n) {
  json_t *members = json_array();
  const char *keys[64];
  size_t ng = 0;
  const char *g;
  json_t *arr;
  json_object_foreach((json_t *)groups, g, arr) if (ng < 64) keys[ng++] = g;
  /* jansson iterates in insertion order, which is the vocabulary's (by group) */
  size_t idx[64];
  for (size_t q = ng; q-- > 0;) {
    size_t m = json_array_size(json_object_get(groups, keys[q]));
    idx[q] = k % m;
    k /= m;
  }
  size_t l = 0;
  name[0] = 0;
  for (size_t q = 0; q < ng; q++) {
    json_t *grp = json_object_get(groups, keys[q]), *v = json_array_get(grp, idx[q]);
    json_array_append(members, v);
    /* named: a group the search varies, or a member other than the base's own reading */
    if ((json_array_size(grp) > 1 || json_integer_value(json_object_get(v, "order")) > 0) && l < n)
      l += (size_t)snprintf(name + l, n - l, "%s%s=%s", l ? " " : "", keys[q], json_string_value(json_object_get(v, "value")) ?: "?");
  }
  if (!name[0]) snprintf(name, n, "as the closest contract");
  return members;
}

static json_t *ids_of(const json_t *members) {
  json_t *ids = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(members, i, v) json_array_append(ids, json_object_get(v, "id"));
  return ids;
}

/* The operators the edited contract's steps name that the CKB lacks. */
static json_t *missing_ops(const mi_ckb *c, const json_t *m) {
  json_t *out = json_array(), *seqs = mi_ckb_model_sequences(m);
  size_t i, k;
  json_t *seq, *st;
  json_array_foreach(seqs, i, seq) json_array_foreach(seq, k, st) {
    const char *op = json_string_value(json_object_get(st, "operator"));
    if (!op || mi_ckb_find(c, op)) continue;
    int dup = 0;
    size_t j;
    json_t *x;
    json_array_foreach(out, j, x) dup |= !strcmp(json_string_value(x), op);
    if (!dup) json_array_append_new(out, json_string(op));
  }
  json_decref(seqs);
  return out;
}

static char *joined(const json_t *lines, size_t max) {
  size_t cap = 1024, l = 0;
  char *s = calloc(1, cap);
  size_t i;
  json_t *x;
  json_array_foreach(lines, i, x) {
    if (i == max) {
      l += (size_t)snprintf(s + l, cap - l, "; and %zu more", json_array_size(lines) - max);
      break;
    }
    const char *t = json_string_value(x) ?: "";
    if (l + strlen(t) + 8 >= cap) {
      cap = 2 * (cap + strlen(t));
      char *ns = realloc(s, cap);
      if (!ns) break;
      s = ns;
    }
    l += (size_t)snprintf(s + l, cap - l, "%s%s", i ? "; " : "", t);
  }
  return s;
}

/* One probe as the candidates are scored on it. */
typedef struct probe_ctx {
  const mi_ckb *ck;
  const json_t *cfg;
  const mi_weights *w;
  const json_t *golden;
  const char *gpath, *shape;
  int first; /* the first probe: a passing row keeps what it defers */
  double tol;
} probe_ctx;

/* Candidate k (its members, its name) on one probe: its row appended to
 * table. 1 pass, 0 fail or not scored, -1 error (err). */
static int score_one(const probe_ctx *p, const json_t *base, const json_t *members, const char *name, size_t k,
                     json_t *table, char *err, size_t n) {
  json_t *m = ev_apply(base, members, p->cfg), *unexp = json_array(), *deferred = json_array();
  json_t *row = json_pack("{s:s, s:s, s:I, s:s, s:o}", "probe", p->shape, "golden", p->gpath, "index", (json_int_t)k,
                          "candidate", name, "variants", ids_of(members));
  double t0 = now_s(), e = 0;
  int steps = 0, rc = 0;
  char e2[2048];
  json_t *ops = missing_ops(p->ck, m);
  if (ev_explain(m, p->cfg, p->w, unexp, deferred) > 0) { /* not scored: what it cannot explain */
    char *why = joined(unexp, 3);
    json_object_set_new(row, "verdict", json_string("unexplained"));
    json_object_set(row, "unexplained", unexp);
    fprintf(stderr, "mi-gen: evolve: %-14s %-52s unexplained: %s\n", p->shape, name, why ? why : "");
    free(why);
  } else if (json_array_size(ops)) { /* not scored: an operator neither the CKB nor the bundle has */
    json_object_set_new(row, "verdict", json_string("no operator"));
    json_object_set(row, "operators_missing", ops);
    fprintf(stderr, "mi-gen: evolve: %-14s %-52s needs %s\n", p->shape, name, json_string_value(json_array_get(ops, 0)));
  } else if (ev_oracle_error(p->ck, m, p->cfg, p->w, p->golden, &e, &steps, e2, sizeof e2) != 0) {
    snprintf(err, n, "%s, candidate %s: %s", p->gpath, name, e2);
    rc = -1;
  } else {
    /* an operator the peer computes less exactly widens the tolerance (its "peer" entry) */
    const double tol = mi_ckb_peer_logprob_tol(p->ck, m, p->tol, NULL);
    const int pass = e <= tol; /* a NaN error fails */
    if (tol > p->tol) json_object_set_new(row, "tolerance", json_real(tol));
    json_object_set_new(row, "error", json_real(isfinite(e) ? e : 1e300));
    json_object_set_new(row, "steps", json_integer(steps));
    json_object_set_new(row, "verdict", json_string(pass ? "pass" : "fail"));
    fprintf(stderr, "mi-gen: evolve: %-14s %-52s %.3g %s\n", p->shape, name, e, pass ? "pass" : "fail");
    if (pass && p->first) json_object_set(row, "deferred", deferred);
    rc = pass;
  }
  json_object_set_new(row, "wall_s", json_real(now_s() - t0));
  json_array_append_new(table, row);
  json_decref(ops);
  json_decref(unexp);
  json_decref(deferred);
  json_decref(m);
  return rc;
}

/* The variants earlier absorptions found: the experience entries the
 * consolidator writes (experience.evolved_NAME_variants), whose root_cause
 * names them; an object id -> true (empty when the CKB holds none). */
static json_t *experienced_variants(const mi_ckb *ck) {
  json_t *seen = json_object();
  for (size_t i = 0; i < mi_ckb_count(ck); i++) {
    const mi_ckb_entry *e = mi_ckb_at(ck, i);
    if (!e->id || strncmp(e->id, "experience.evolved_", 19)) continue;
    const char *rc = json_string_value(json_object_get(e->json, "root_cause")) ?: "";
    for (const char *q = strstr(rc, "variant."); q; q = strstr(q + 8, "variant.")) {
      size_t l = 8;
      while ((q[l] >= 'a' && q[l] <= 'z') || (q[l] >= '0' && q[l] <= '9') || q[l] == '_') l++;
      char id[128];
      if (l > 8 && l < sizeof id) {
        memcpy(id, q, l), id[l] = 0;
        json_object_set_new(seen, id, json_true());
      }
    }
  }
  return seen;
}

/* The candidate experience points at: in each group the member an earlier
 * absorption found, else the group's first (its order-0 reading); its
 * index in candidate()'s numbering into *prior, and the indices of its
 * one-group neighbours (one group's member changed) into nb (at most max):
 * their count. */
static size_t experience_candidates(const json_t *groups, const json_t *seen, size_t *prior, size_t *nb, size_t max) {
  const char *keys[64];
  size_t ng = 0, idx[64], radix[64];
  const char *g;
  json_t *arr;
  json_object_foreach((json_t *)groups, g, arr) if (ng < 64) keys[ng++] = g;
  for (size_t q = 0; q < ng; q++) {
    json_t *grp = json_object_get(groups, keys[q]);
    radix[q] = json_array_size(grp);
    idx[q] = 0;
    for (size_t m = 0; m < radix[q]; m++)
      if (json_object_get(seen, json_string_value(json_object_get(json_array_get(grp, m), "id")) ?: "")) {
        idx[q] = m;
        break;
      }
  }
  /* candidate(): the last group varies fastest */
  size_t k = 0, count = 0;
  for (size_t q = 0; q < ng; q++) k = k * radix[q] + idx[q];
  *prior = k;
  size_t stride = 1;
  for (size_t q = ng; q-- > 0;) {
    for (size_t m = 0; m < radix[q] && count < max; m++)
      if (m != idx[q]) nb[count++] = k - idx[q] * stride + m * stride;
    stride *= radix[q];
  }
  return count;
}

/* The candidates on one probe, the experience of earlier absorptions first:
 * the reading it names, then each of its one-group neighbours. That reading
 * passing and every neighbour failing (or unexplained) is the answer, unique
 * among the readings one change away; anything else scores the whole
 * product. MI_EVOLVE_FULL_SEARCH=1 always scores the whole product. Counts
 * the passing candidates into *passing, marks each in passed[k] (a
 * candidate not scored is not marked) and records the probe's "search" entry in the report. 0, or -1
 * with err. */
static int score_probe(ev_ctx *c, const probe_ctx *pc, const json_t *base, const json_t *groups, const json_t *seen,
                       size_t total, json_t *table, int *passing, unsigned char *passed, char *err, size_t n) {
  int rc = 0;
  size_t order[EV_MAX_CANDIDATES], norder = 0, prior = 0, nb[256];
  const char *full_env = getenv("MI_EVOLVE_FULL_SEARCH");
  const int use_exp = json_object_size(seen) && !(full_env && !strcmp(full_env, "1"));
  size_t nnb = use_exp ? experience_candidates(groups, seen, &prior, nb, sizeof nb / sizeof *nb) : 0;
  if (use_exp) {
    order[norder++] = prior;
    for (size_t q = 0; q < nnb && norder < EV_MAX_CANDIDATES; q++) order[norder++] = nb[q];
  }
  int prior_pass = 0, shortened = 0;
  unsigned char *done = calloc(total ? total : 1, 1);
  for (size_t step = 0; rc == 0 && done && step < norder + total; step++) {
    size_t k = step < norder ? order[step] : step - norder;
    if (step == norder && use_exp && prior_pass && *passing == 1) { /* the neighbourhood settled it */
      shortened = 1;
      break;
    }
    if (k >= total || done[k]) continue;
    done[k] = 1;
    char name[512];
    json_t *members = candidate(groups, k, name, sizeof name);
    const int r = score_one(pc, base, members, name, k, table, err, n);
    if (r < 0) rc = -1;
    else if (r == 1) {
      ++*passing;
      if (step == 0 && use_exp) prior_pass = 1;
      passed[k] = 1;
    }
    json_decref(members);
  }
  if (!done && rc == 0) {
    snprintf(err, n, "out of memory");
    rc = -1;
  }
  size_t scored_rows = 0;
  for (size_t k = 0; done && k < total; k++) scored_rows += done[k];
  free(done);
  if (use_exp)
    fprintf(stderr, "mi-gen: evolve: %s: experience of earlier absorptions: %s (%zu of %zu candidates looked at)\n",
            pc->shape, shortened ? "settled among the found reading's one-group neighbours" : "not settled, the whole product",
            scored_rows, total);
  json_t *sr = json_object_get(c->report, "search");
  if (!json_is_object(sr)) json_object_set_new(c->report, "search", sr = json_object());
  json_object_set_new(sr, pc->shape, json_pack("{s:s, s:I, s:I}", "mode", shortened ? "experience" : "full", "looked_at",
                                           (json_int_t)scored_rows, "candidates", (json_int_t)total));
  return rc;
}

/* Fields of `from` that `into` lacks, added (one object level down too):
 * the config entries the found reading adds (ev_apply: add_config, and
 * add_inert's "if_present", a field inert where it appears) are judged on
 * the first probe's config with every field another probe or the absorbed
 * checkpoint has besides, not on the first probe's alone. The contract's
 * name and layer kinds stay the first probe's (c->model_cfg). */
static void union_missing(json_t *into, const json_t *from, int depth) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)from, k, v) {
    json_t *have = json_object_get(into, k);
    if (!have) json_object_set_new(into, k, json_deep_copy(v));
    else if (depth > 0 && json_is_object(have) && json_is_object(v)) union_missing(have, v, depth - 1);
  }
}

/* The first probe's config with every field another probe or the absorbed
 * checkpoint (model, or NULL) has besides (union_missing). */
static json_t *probe_fields(const probe_set *s, const char *model) {
  json_t *f = json_deep_copy(s->cfg[0]);
  for (size_t k = 1; k < s->n; k++) union_missing(f, s->cfg[k], 1);
  if (model) {
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/config.json", model);
    json_t *mc = json_load_file(mp, 0, NULL);
    if (mc) union_missing(f, mc, 1);
    json_decref(mc);
  }
  return f;
}

/* The one candidate alive[] leaves (passing on every probe): its members
 * and name; none, or more than one (named, the probes cannot tell them
 * apart: another probe must), is 1 with err. */
static int pick_alive(const json_t *groups, const unsigned char *alive, size_t total, json_t **members, char *name,
                      size_t nn, char *err, size_t n) {
  size_t count = 0, first = 0, second = 0;
  for (size_t k = 0; alive && k < total; k++)
    if (alive[k] && count++ == 0) first = k;
    else if (alive[k] && count == 2) second = k;
  if (count == 1) {
    *members = candidate(groups, first, name, nn);
    return 0;
  }
  if (count == 0) {
    snprintf(err, n, "no candidate passes on every probe (each passes some; the probes disagree on the reading)");
    return 1;
  }
  char a[512], b[512];
  json_decref(candidate(groups, first, a, sizeof a));
  json_decref(candidate(groups, second, b, sizeof b));
  snprintf(err, n, "%zu candidates pass on every probe (%s; %s%s): the probes cannot tell them apart, add a probe that can",
           count, a, b, count > 2 ? "; ..." : "");
  return 1;
}

int ev_variant_search(ev_ctx *c, json_t *probes, json_t **table, json_t **found, char *err, size_t n) {
  const double tol = c->o->tol > 0 ? c->o->tol : EV_TOL;
  *table = json_array();
  *found = NULL;
  /* each scored candidate is a forward from scratch that widens the
   * embedding and lm_head to float64 (V x hidden doubles each): keep those
   * blocks in the heap once freed, rather than mapping and faulting them
   * in again for the next candidate (most of the search's time otherwise) */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (!json_array_size(probes)) {
    snprintf(err, n, "no probe golden (model.role \"probe\", or a model.shape starting with probe-attn) under the references");
    return 1;
  }
  char sdir[4400], e2[2048];
  if (ev_scratch_ckb(c, "search-ckb", sdir, sizeof sdir, e2, sizeof e2) != 0) {
    snprintf(err, n, "%s", e2);
    return -1;
  }
  mi_ckb *ck = mi_ckb_open(sdir, e2, sizeof e2);
  if (!ck) {
    snprintf(err, n, "%s", e2);
    return -1;
  }
  json_t *vocab = ev_vocab(ck), *groups = NULL, *base = NULL, *pick_members = NULL;
  json_t *seen = experienced_variants(ck);
  char pick_name[512] = "";
  /* alive[k]: candidate k passed on every probe so far. A reading is found
   * when exactly one passes on all of them: a probe that cannot tell two
   * readings apart (a field it leaves at the identity: partial_rotary_factor
   * absent) is not an answer, and not a contradiction, when another probe
   * can. */
  unsigned char *alive = NULL;
  size_t alive_total = 0;
  probe_set ps = {0};
  int rc = probe_set_load(c, probes, &ps, err, n);
  size_t pi;
  json_t *p;
  json_array_foreach(probes, pi, p) {
    if (rc) break;
    const char *gpath = json_string_value(json_object_get(p, "path"));
    const json_t *g = json_object_get(p, "golden");
    const char *shape = json_string_value(json_object_get(json_object_get(g, "model"), "shape")) ?: "probe";
    json_t *cfg = ps.cfg[pi];
    mi_weights *w = ps.w[pi];
    if (!base) { /* the first probe picks the base; the candidates are every probe's evidence */
      const mi_ckb_entry *be = ev_closest_contract(ck, cfg, w);
      if (!be) {
        snprintf(err, n, "%s: no model contract to start from", c->o->ckb);
        rc = 1;
      } else {
        groups = any_evidence(vocab, &ps);
        base = ev_probe_form(be->json, cfg, groups);
        size_t all = 1;
        const char *gk;
        json_t *ga;
        json_object_foreach(groups, gk, ga) all *= json_array_size(ga);
        if (all > EV_MAX_CANDIDATES) {
          fprintf(stderr, "mi-gen: evolve: %zu candidates (at most %d): groups a weight decides are fixed first\n", all,
                  EV_MAX_CANDIDATES);
          decide_by_weights(c, groups, base, &ps);
        }
        json_object_set_new(c->report, "base", json_string(be->id));
        c->model_cfg = json_incref(cfg);
        snprintf(c->probe_dir, sizeof c->probe_dir, "%s", ps.dir[pi]);
        fprintf(stderr, "mi-gen: evolve: closest contract %s; %zu variant group(s) with evidence\n", be->id,
                json_object_size(groups));
      }
    }
    size_t total = 1;
    const char *gk;
    json_t *ga;
    json_object_foreach(groups, gk, ga) total *= json_array_size(ga);
    if (rc == 0 && total > EV_MAX_CANDIDATES) {
      snprintf(err, n, "%zu candidates (at most %d): the evidence selects too many variants", total, EV_MAX_CANDIDATES);
      rc = 1;
    }
    int passing = 0;
    unsigned char *passed = rc == 0 ? calloc(total, 1) : NULL;
    if (rc == 0 && !passed) snprintf(err, n, "out of memory"), rc = -1;
    if (rc == 0) {
      probe_ctx pc = {ck, cfg, w, g, gpath, shape, pi == 0, tol};
      rc = score_probe(c, &pc, base, groups, seen, total, *table, &passing, passed, err, n);
    }
    if (rc == 0 && passing == 0) {
      snprintf(err, n, "%s (%s): 0 of %zu candidates within %g of the oracle (need exactly one on every probe)", gpath,
               shape, total, tol);
      rc = 1;
    }
    if (rc == 0) {
      if (!alive) alive = passed, alive_total = total, passed = NULL;
      else
        for (size_t k = 0; k < total && k < alive_total; k++) alive[k] &= passed[k];
    }
    free(passed);
  }
  if (rc == 0) rc = pick_alive(groups, alive, alive_total, &pick_members, pick_name, sizeof pick_name, err, n);
  free(alive);
  if (rc == 0) {
    /* the found reading on the first probe: what stays for a candidate bundle */
    json_t *fields = probe_fields(&ps, c->o->model);
    json_t *m = ev_apply(base, pick_members, fields), *deferred = NULL;
    json_decref(fields);
    size_t i;
    json_t *r;
    json_array_foreach(*table, i, r) if (!strcmp(json_string_value(json_object_get(r, "verdict")) ?: "", "pass") &&
                                         !strcmp(json_string_value(json_object_get(r, "candidate")) ?: "", pick_name) &&
                                         json_object_get(r, "deferred") && !deferred) deferred =
        json_object_get(r, "deferred");
    *found = json_pack("{s:s, s:O, s:o, s:o, s:o, s:o}", "name", pick_name, "base", json_object_get(c->report, "base"),
                       "variants", ids_of(pick_members), "contract", m, "deferred",
                       deferred ? json_deep_copy(deferred) : json_array(), "operators", json_array());
    /* the operators it needs that the target CKB (not the scratch copy) lacks */
    mi_ckb *tk = mi_ckb_open(c->o->ckb, e2, sizeof e2);
    if (tk) {
      json_object_set_new(*found, "operators", missing_ops(tk, m));
      mi_ckb_close(tk);
    }
  }
  probe_set_free(&ps);
  json_decref(pick_members);
  json_decref(groups);
  json_decref(base);
  json_decref(vocab);
  json_decref(seen);
  mi_ckb_close(ck);
  return rc;
}
