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
 * that may be hostile and calls plugin code; the read-back child only
 * returns logits (raw.c), the verdicts are the parent's (readback_judge).
 * Read-back perturbs a sample: every global tensor and every tensor of the
 * first, the last and two seeded layers (sample_tensors). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/runtime/rng.h"
#include "core/util/file.h"
#include "core/runtime/session.h"
#include "core/runtime/model_input.h"
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
  if (n == 0) {
    /* The tensor names for read-back's sample: this child loads no plugin,
     * so the list is the verifier's own reading of the files. */
    mi_weights *w = mi_model_input_weights(j->model_dir, mi_model_input_all_blocks(), err, sizeof err);
    json_t *names = json_array();
    /* what the checkpoint's layout leaves unread (a vision tower: the
     * check's "skipped" prefixes) is no engine's to read back */
    const json_t *skipped = json_object_get(r, "skipped");
    for (size_t i = 0, nt = w ? mi_weights_count(w) : 0; i < nt; i++) {
      mi_weight_info wi;
      const char *pre;
      json_t *sk;
      int unread = 0;
      if (mi_weights_at(w, i, &wi) != 0) continue;
      json_object_foreach((json_t *)skipped, pre, sk) unread |= !strncmp(wi.name, pre, strlen(pre));
      if (!unread) json_array_append_new(names, json_string(wi.name));
    }
    if (w) mi_weights_close(w);
    vf_emit(fd, json_pack("{s:s, s:o}", "event", "tensors", "names", names));
  }
  json_decref(r);
  return n != 0;
}

/* ---------- (2) read-back: the plan, the child, the judge ---------- */

typedef struct rb_job {
  const vf_stage_opts *o;
  const char *model_dir;
  const char *workdir;
  char **names; /* the tensors perturbed, chosen by the parent */
  int n;
  int64_t V;    /* vocabulary from config.json: the size of every logits record */
} rb_job;

static double max_abs(const float *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i]);
    if (!(d <= m)) m = d; /* NaN wins */
  }
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

/* Slot 0: the engine's logits on the model folder; 1: on a plain copy;
 * 2 + k: on the copy with tensor k perturbed. Only logits leave the child. */
static int readback_child(void *arg, int fd) {
  rb_job *j = arg;
  char err[2048] = "", copy[4200];
  mi_registry *reg;
  mi_session *e = vf_child_engine(j->o, j->workdir, j->model_dir, fd, &reg);
  if (!e) return 1;
  const int64_t V = e->info.vocab_size;
  int32_t ids[S3_PROMPT], tok;
  vf_random_prompt(j->o->seed ^ 0x53334, ids, S3_PROMPT, 0, V);
  float *base = malloc((size_t)V * sizeof(float)); /* [V] */
  if (!base || vf_greedy(e->M, e->model, V, ids, S3_PROMPT, 1, base, &tok, err, sizeof err) != 0) {
    char m[2600];
    snprintf(m, sizeof m, "forward pass through the engine failed: %s", err);
    vf_rec_write(fd, VF_REC_FAIL, 0, 0, m, NULL, 0);
    goto out;
  }
  vf_rec_write(fd, VF_REC_OUT, 0, 0, NULL, base, (uint64_t)V * sizeof(float));
  snprintf(copy, sizeof copy, "%s/copy", j->workdir);
  float *lc = NULL;
  if (vf_copy_model_dir(j->model_dir, copy, err, sizeof err) != 0 ||
      !(lc = logits_from(e, copy, ids, S3_PROMPT, err, sizeof err))) {
    char m[2600];
    snprintf(m, sizeof m, "cannot run a copy of the model folder: %s", err);
    vf_rec_write(fd, VF_REC_FAIL, 1, 0, m, NULL, 0);
    goto out;
  }
  vf_rec_write(fd, VF_REC_OUT, 1, 0, NULL, lc, (uint64_t)V * sizeof(float));
  free(lc);
  for (int i = 0; i < j->n; i++) {
    vf_tensor_loc loc;
    unsigned char *saved = NULL;
    float *lp = NULL;
    if (vf_tensor_locate(copy, j->names[i], &loc, err, sizeof err) != 0 ||
        vf_tensor_edit(&loc, 1.0, 0.5, j->o->seed + (uint64_t)i, &saved, err, sizeof err) != 0 ||
        !(lp = logits_from(e, copy, ids, S3_PROMPT, err, sizeof err))) {
      char m[2600];
      snprintf(m, sizeof m, "tensor \"%s\": cannot run the perturbed copy: %s", j->names[i], err);
      vf_rec_write(fd, VF_REC_FAIL, 2 + i, 0, m, NULL, 0);
    } else {
      vf_rec_write(fd, VF_REC_OUT, 2 + i, 0, NULL, lp, (uint64_t)V * sizeof(float));
    }
    if (saved) vf_tensor_restore(&loc, saved);
    free(saved);
    free(lp);
  }
out:
  free(base);
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

static json_t *readback_judge(void *arg, const vf_child_result *r) {
  rb_job *j = arg;
  json_t *ev = json_array();
  int ns = 2 + j->n;
  vf_rec *sl = calloc((size_t)ns, sizeof *sl);
  if (!sl || vf_raw_read(r, "stage 3 (read-back)", ns, sl, ev) < 0) goto done;
  const size_t lbytes = (size_t)j->V * sizeof(float);
  const char *names[2] = {"engine_load", "copy"};
  for (int k = 0; k < 2; k++) {
    if (!sl[k].type) { /* in flight when the child ended */
      vf_ev_start(ev, names[k], k, k ? "a copy of the model folder" : j->model_dir);
      goto done;
    }
    if (sl[k].type == VF_REC_FAIL) {
      vf_ev_end(ev, names[k], k, 0, 0, NULL, "%s", sl[k].msg);
      goto done;
    }
    if (sl[k].payload_len != lbytes) {
      vf_ev_end(ev, names[k], k, 0, 0, NULL,
                "the engine returned %zu bytes of logits, config.json's vocab_size %lld needs %zu",
                sl[k].payload_len, (long long)j->V, lbytes);
      goto done;
    }
  }
  /* records are not aligned in the pipe: copied out before use */
  float *base = malloc(lbytes), *lg = malloc(lbytes);
  if (!base || !lg) {
    free(base), free(lg);
    vf_ev_error(ev, "stage 3: out of memory in the verifier");
    goto done;
  }
  memcpy(base, sl[0].payload, lbytes);
  const double scale = max_abs(base, j->V);
  if (!isfinite(scale) || scale == 0)
    vf_ev_end(ev, "engine_load", 0, 0, 0, NULL, "the engine's logits are %s", scale == 0 ? "all zero" : "not finite");
  else {
    vf_ev_end(ev, "engine_load", 0, 1, 0, json_pack("{s:f}", "max_abs_logit", scale), NULL);
    memcpy(lg, sl[1].payload, lbytes);
    double d0 = max_diff(lg, base, j->V) / scale;
    if (!(d0 <= S3_MIN_CHANGE))
      vf_ev_end(ev, "copy", 1, 0, d0, NULL,
                "an identical copy of the model folder gives different logits (max rel difference %.3g): "
                "outputs do not depend on the weights alone", d0);
    else {
      vf_ev_end(ev, "copy", 1, 1, d0, NULL, NULL);
      /* Every sampled tensor; the verdicts after a summary case, so the
       * unit's message names the pattern: nothing read from the folder
       * (baked-in weights, another path) or some tensors unused. */
      json_t *evs = json_array();
      size_t n_unread = 0, n_run = 0;
      const char *first_unread = NULL;
      int fails = 0, stopped = 0;
      for (int i = 0; i < j->n && !stopped; i++) {
        char cname[300];
        snprintf(cname, sizeof cname, "read:%s", j->names[i]);
        const vf_rec *s = &sl[2 + i];
        if (!s->type) {
          vf_ev_start(evs, cname, i + 3, j->names[i]);
          stopped = 1;
        } else if (s->type == VF_REC_FAIL || s->payload_len != lbytes) {
          vf_ev_end(evs, cname, i + 3, 0, 0, NULL, "%s",
                    s->type == VF_REC_FAIL ? s->msg : "a logits record of the wrong size");
          fails++;
        } else {
          memcpy(lg, s->payload, lbytes);
          double d = max_diff(lg, base, j->V) / scale;
          int pass = d > S3_MIN_CHANGE;
          n_run++;
          if (!pass) {
            n_unread++;
            if (!first_unread) first_unread = j->names[i];
          }
          json_t *x = json_pack("{s:f}", "rel_change", d);
          if (pass) vf_ev_end(evs, cname, i + 3, 1, 0, x, NULL);
          else
            vf_ev_end(evs, cname, i + 3, 0, 0, x,
                      "tensor \"%s\" was not read from the given model folder: perturbing it (+-50%%) in a copy "
                      "left the logits unchanged (max rel change %.3g)", j->names[i], d);
        }
      }
      if (!stopped) {
        if (n_unread && n_unread == n_run)
          vf_ev_end(ev, "every tensor read", 2, 0, 0, NULL,
                    "no tensor was read from the given model folder: perturbing each of the %zu in a copy left the "
                    "logits unchanged -- weights baked in or read from another path", n_run);
        else if (n_unread)
          vf_ev_end(ev, "every tensor read", 2, 0, 0, NULL,
                    "%zu of %zu tensors are never read: perturbing \"%s\"%s in a copy left the logits unchanged -- "
                    "the forward pass skips them (e.g. a norm not applied) or reads them from elsewhere",
                    n_unread, n_run, first_unread, n_unread > 1 ? " (and others)" : "");
        else
          vf_ev_end(ev, "every tensor read", 2, !fails, 0, NULL, "all %zu tensors sampled change the logits when perturbed",
                    n_run);
      }
      size_t k;
      json_t *e;
      json_array_foreach(evs, k, e) json_array_append(ev, e);
      json_decref(evs);
    }
  }
  free(base);
  free(lg);
done:
  free(sl);
  return ev;
}

/* The tensors read-back perturbs: every global tensor (not under
 * model.layers.N.) and every tensor of a sample of layers: the first, the
 * last and two drawn with `seed` from those between. Each perturbation costs
 * a model load and a forward, so all 311 tensors of a 28-layer model would
 * take many minutes; a candidate that skips tensors of one layer only is
 * caught with probability (sampled layers)/(layers) per run, one that skips
 * a kind of tensor (a norm) in every layer always. The seed comes from the
 * parent when the unit starts, so the candidate cannot know the sample. */
static int layer_of(const char *name) {
  int l = -1, n = 0;
  if (sscanf(name, "model.layers.%d.%n", &l, &n) == 1 && n > 0) return l;
  return -1;
}

static int sample_tensors(json_t *names, uint64_t seed, char ***out, int *nout, char *desc, size_t dlen) {
  int L = 0;
  size_t i;
  json_t *v;
  json_array_foreach(names, i, v) {
    int l = layer_of(json_string_value(v));
    if (l + 1 > L) L = l + 1;
  }
  char *pick = calloc((size_t)L + 1, 1);
  *out = calloc(json_array_size(names) + 1, sizeof **out);
  if (!pick || !*out) {
    free(pick);
    return -1;
  }
  int nl = 0;
  if (L <= 4) {
    for (int l = 0; l < L; l++) pick[l] = 1;
  } else {
    pick[0] = pick[L - 1] = 1;
    uint64_t s = seed;
    for (int d = 0; d < 2;) {
      int l = 1 + (int)mi_rng_int(&s, 0, L - 3);
      if (!pick[l]) pick[l] = 1, d++;
    }
  }
  size_t dl = (size_t)snprintf(desc, dlen, "layers");
  for (int l = 0; l < L; l++)
    if (pick[l]) {
      nl++;
      if (dl < dlen) dl += (size_t)snprintf(desc + dl, dlen - dl, "%s%d", nl > 1 ? "," : " ", l);
    }
  *nout = 0;
  json_array_foreach(names, i, v) {
    const char *nm = json_string_value(v);
    int l = layer_of(nm);
    if (nm && (l < 0 || pick[l])) (*out)[(*nout)++] = strdup(nm);
  }
  if (dl < dlen)
    snprintf(desc + dl, dlen - dl, " of %d (seed 0x%016llx) and every global tensor: %d of %zu tensors", L,
             (unsigned long long)seed, *nout, json_array_size(names));
  free(pick);
  return 0;
}

static uint64_t fresh_seed(uint64_t mix) {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    s = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
  }
  return s ^ mix;
}

json_t *vf_stage3(const vf_stage_opts *o, const void *ckb, const char *model_dir) {
  s3_job job = {ckb, model_dir};
  json_t *tensors_ev = NULL;
  vf_child_result r;
  json_t *u;
  if (vf_run_child(&o->lim, weights_child, &job, &r) != 0) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "weights", "id", model_dir, "verdict",
                  "FAIL", "status", "ERROR", "message", "cannot fork a child");
  } else {
    /* the tensor list is not a case: taken out before the report */
    for (size_t i = 0; i < json_array_size(r.events); i++) {
      json_t *e = json_array_get(r.events, i);
      if (!strcmp(json_string_value(json_object_get(e, "event")) ?: "", "tensors")) {
        tensors_ev = json_incref(e);
        json_array_remove(r.events, i);
        break;
      }
    }
    u = vf_unit_report("weights", model_dir, "-", "weights", &r, o->lim.timeout_s, o->lim.cpu_s);
    vf_child_result_free(&r);
    json_t *c0 = json_array_get(json_object_get(u, "cases"), 0);
    if (o->model_plugin_path && c0) {
      /* what the checkpoint's layout leaves unread, each prefix named once */
      char skipped[1200] = "";
      size_t l = 0;
      const char *pre;
      json_t *sk;
      json_object_foreach(json_object_get(c0, "skipped"), pre, sk) if (l < sizeof skipped)
        l += (size_t)snprintf(skipped + l, sizeof skipped - l, "; skipped %lld tensors under %s (%s)",
                              (long long)json_integer_value(json_object_get(sk, "tensors")), pre,
                              json_string_value(json_object_get(sk, "why")) ?: "?");
      json_object_set_new(
          u, "summary", json_sprintf("files: key map and shapes as the model contract gives them%s", skipped));
    }
  }
  int pass = !strcmp(json_string_value(json_object_get(u, "verdict")), "PASS");
  json_t *units = json_array();
  json_array_append_new(units, u);
  if (!o->model_plugin_path || o->tp > 1) {
    json_decref(tensors_ev);
    /* at --tp N the engine loads only as N ranks under mpirun: the
     * read-back loads it in one process, so it is not run (stage 4 runs
     * the ranks as deployed) */
    return json_pack("{s:i, s:s, s:s, s:s, s:o, s:i, s:i}", "stage", 3, "name", "weight_loading",
                     "verdict", pass ? "PASS" : "FAIL", "status",
                     o->tp > 1 ? "partial: files only (the read-back loads one process; the engine runs as --tp ranks)"
                               : "partial: files only (no model plugin given)",
                     "units", units, "passed", pass, "failed", !pass);
  }
  json_t *names = NULL;
  if (pass) {
    char wd[4096], err[4400], path[4200], desc[600];
    mi_model_input_config_name(model_dir, path, sizeof path);
    json_t *cfg = mi_model_input_config(model_dir, 0, err, sizeof err);
    const json_t *jv = mi_ckb_config_value(NULL, cfg, "vocab_size", 10); /* a wrapper's too */
    rb_job rj = {o, model_dir, wd, NULL, 0, json_is_integer(jv) ? json_integer_value(jv) : 0};
    json_decref(cfg);
    if (!cfg || rj.V < 1 || rj.V > (1 << 24)) {
      if (cfg) snprintf(err, sizeof err, "%s: no usable vocab_size", path);
      json_array_append_new(units, json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "readback", "id", model_dir,
                                             "verdict", "FAIL", "status", "ERROR", "message", err));
    } else if (!(names = json_incref(json_object_get(tensors_ev, "names"))) ||
               sample_tensors(names, fresh_seed(o->seed), &rj.names, &rj.n, desc, sizeof desc) != 0 ||
               vf_workdir_new(wd, sizeof wd) != 0) {
      json_array_append_new(units, json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "readback", "id",
                                             model_dir, "verdict", "FAIL", "status", "ERROR",
                                             "message", "cannot list the tensors or create a scratch folder"));
    } else {
      /* a model load and a forward per tensor: the deadline grows with the sample */
      size_t cap = VF_REC_SIZE(0) * 8 + (size_t)(rj.n + 2) * VF_REC_SIZE((size_t)rj.V * sizeof(float));
      json_t *rb = vf_run_unit_raw(o, "readback", model_dir, "weights read-back", readback_child, &rj,
                                   60 + 8.0 * rj.n, cap, readback_judge);
      /* The figure that matters: the smallest logit move a perturbation caused. */
      double mn = INFINITY;
      size_t k, nt = 0;
      json_t *c;
      json_array_foreach(json_object_get(rb, "cases"), k,
                         c) if (json_is_number(json_object_get(c, "rel_change"))) {
        mn = fmin(mn, json_number_value(json_object_get(c, "rel_change")));
        nt++;
      }
      json_object_set_new(rb, "sample", json_string(desc));
      if (nt)
        json_object_set_new(
            rb, "summary",
            json_sprintf("read-back: %zu tensors perturbed one at a time in a copy (%s), "
                         "smallest logit move %.3g (relative)",
                         nt, desc, mn));
      json_array_append_new(units, rb);
      vf_rmtree(wd);
    }
    for (int i = 0; i < rj.n; i++) free(rj.names[i]);
    free(rj.names);
  }
  json_decref(names);
  json_decref(tensors_ev);
  return vf_stage_result(3, "weight_loading", units);
}
