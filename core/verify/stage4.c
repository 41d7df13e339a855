/* Stage 4 of the verifier: end to end against goldens from an independent
 * implementation (llama.cpp, tests/goldens/NAME.json, made by tools/peer). The
 * golden is chosen by the FNV-1a 32 of the model's model.safetensors and of
 * its config.json (the golden records both), so goldens can never be
 * compared with other weights or another config. When the goldens folder
 * has none, the oracle makes one for this checkpoint (tools/peer/oracle.mjs:
 * convert to an F32 GGUF, llama.cpp on the prompt set), kept in a cache by
 * the same two hashes; N/A only where llama.cpp knows no conversion for the
 * architecture, saying so.
 * For each golden case, through the engine (mi_session_open + mi_generate,
 * the path mi-run takes): the prompt's tokenisation equals llama.cpp's
 * prompt_ids, then greedy generation of as many steps as the golden holds
 * with its top-K logprobs, compared with the rules of tests/e2e:
 *   - greedy tokens identical, until a step whose golden top-1/top-2 gap is
 *     within NEAR_TIE (a genuine tie: the rest of that case is skipped);
 *   - each id in both top-K lists within TOL; an id missing from the other
 *     list only within 2·TOL of its list's K-th value.
 * Held-out prompts: a case with "held_out": true in the golden (or listed
 * by index in the contract's parameters.held_out, file name -> [indices]) is
 * counted apart; the report says how many cases were held out. The three
 * goldens in tests/goldens are all used by tests/e2e during development, so
 * none of them is held out: stage 5 (c) supplies prompts drawn at run time.
 * TOL = 1e-3 and NEAR_TIE = 2e-3: see the reasoning in tests/e2e/test_e2e_peer.c.
 * The child that runs the engine only returns, per case, the prompt's ids
 * and the greedy steps with their top-K (child_case); the parent read the
 * golden (bounded reader) and compares (judge_case). */
#define _GNU_SOURCE
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/runtime/model_input.h"
#include "core/runtime/session.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/file.h"
#include "core/util/spawn.h"
#include "core/verify/bind.h"
#include "core/verify/deployed.h"
#include "core/verify/verify.h"

/* 1e-3 with an f32 KV cache; wider with a half-precision one (vf_logprob_tol),
 * set by vf_stage4 in the parent, which alone judges */
static double g_tol = 1e-3;
#define TOL g_tol
#define NEAR_TIE (2 * TOL)
#define MAX_TOPK 64
#define GOLDEN_MAX_BYTES (64u << 20) /* the largest golden in tests/goldens is ~100 KB */

typedef struct s4_job {
  const vf_stage_opts *o;
  json_t *contract;
  const char *workdir;
  char golden[4096];
  json_t *gold; /* the golden, read by the parent */
} s4_job;

typedef struct gen_rec {
  int n, cap, k;
  int32_t *ids; /* [cap] */
  int32_t *top; /* [cap, k] */
  double *lps;  /* [cap, k] */
  double *lp;   /* [cap] */
} gen_rec;

static int on_token(void *user, const mi_gen_token *t) {
  gen_rec *g = user;
  if (g->n >= g->cap) return 1;
  g->ids[g->n] = t->id;
  g->lp[g->n] = t->logprob;
  for (int i = 0; i < g->k; i++) {
    g->top[(size_t)g->n * g->k + i] = i < t->n_top ? t->top_ids[i] : -1;
    g->lps[(size_t)g->n * g->k + i] = i < t->n_top ? t->top_lps[i] : -INFINITY;
  }
  g->n++;
  return 0;
}

static int find_id(const int32_t *ids, int n, int64_t id) {
  for (int i = 0; i < n; i++)
    if (ids[i] == id) return i;
  return -1;
}

static int held_out(json_t *contract, const char *golden, int ci, json_t *gc) {
  if (json_is_true(json_object_get(gc, "held_out"))) return 1;
  const char *base = strrchr(golden, '/');
  base = base ? base + 1 : golden;
  size_t i;
  json_t *v;
  json_array_foreach(
      json_object_get(json_object_get(json_object_get(contract, "parameters"), "held_out"), base),
      i, v) if (json_integer_value(v) == ci) return 1;
  return 0;
}

/* The golden's cases the model's declared context cannot hold (prompt and
 * steps past max_position_embeddings: a golden the oracle made for a
 * checkpoint scaled to a short context, whose prompts llama.cpp ran past
 * it) are taken out; the held-out marks are resolved by the original
 * indices first. The number taken out; *max_pos the declared context (0:
 * none found, nothing taken out). */
static int drop_past_context(const vf_stage_opts *o, s4_job *j, long long *max_pos) {
  char err[4400];
  json_t *cfg = mi_model_input_config(o->model_dir, 0, err, sizeof err);
  const json_t *mp = cfg ? mi_ckb_config_value(NULL, cfg, "max_position_embeddings", 23) : NULL;
  *max_pos = json_is_integer(mp) ? (long long)json_integer_value(mp) : 0;
  json_decref(cfg);
  json_t *cases = json_object_get(j->gold, "cases");
  size_t i;
  json_t *gc;
  json_array_foreach(cases, i, gc) if (json_is_object(gc) && held_out(j->contract, j->golden, (int)i, gc))
    json_object_set_new(gc, "held_out", json_true());
  int dropped = 0;
  for (i = json_array_size(cases); *max_pos > 0 && i-- > 0;) {
    gc = json_array_get(cases, i);
    long long need = (long long)json_array_size(json_object_get(gc, "prompt_ids")) +
                     (long long)json_array_size(json_object_get(gc, "steps"));
    if (need > *max_pos) {
      json_array_remove(cases, i);
      dropped++;
    }
  }
  return dropped;
}

/* The child's record for one case: what the engine made of the prompt and
 * the greedy steps with their top-K, nothing judged:
 *   int32 n_ids, n_gen, K; int32 ids[n_ids]; int32 gen[n_gen];
 *   int32 top[n_gen*K]; double lps[n_gen*K] */
static void child_case(int fd, mi_session *e, int slot, json_t *gc, int K) {
  const char *prompt = json_string_value(json_object_get(gc, "prompt"));
  int ns = (int)json_array_size(json_object_get(gc, "steps"));
  char err[1024] = "", msg[1400];
  if (!prompt || ns < 1 || K < 2 || K > MAX_TOPK) { /* the parent reports the golden as malformed */
    vf_rec_write(fd, VF_REC_OUT, slot, 0, NULL, NULL, 0);
    return;
  }
  int32_t *ids = NULL;
  size_t n_ids = 0;
  if (mi_tokenizer_encode_prompt(e->tok, prompt, strlen(prompt), 1, &ids, &n_ids) != 0) { /* as mi-run -p */
    vf_rec_write(fd, VF_REC_FAIL, slot, 0, "the tokenizer cannot encode the prompt", NULL, 0);
    return;
  }
  gen_rec g = {0, ns, K, malloc(ns * sizeof(int32_t)), malloc((size_t)ns * K * sizeof(int32_t)),
               malloc((size_t)ns * K * sizeof(double)), malloc(ns * sizeof(double))};
  mi_gen_params gp;
  vf_greedy_gen_params(&gp, ns);
  gp.top_logprobs = K;
  mi_gen_stats st;
  memset(&st, 0, sizeof st);
  char *pl = NULL;
  size_t pn = 0;
  if (!g.ids || !g.top || !g.lps || !g.lp) {
    vf_rec_write(fd, VF_REC_FAIL, slot, 0, "out of memory", NULL, 0);
  } else if (mi_generate(e, ids, n_ids, &gp, on_token, &g, &st, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "generation failed: %s", err);
    vf_rec_write(fd, VF_REC_FAIL, slot, 0, msg, NULL, 0);
  } else if (!(pl = vf_s4_record((int)n_ids, ids, g.n, g.ids, g.top, g.lps, K, &pn))) {
    vf_rec_write(fd, VF_REC_FAIL, slot, 0, "out of memory", NULL, 0);
  } else {
    vf_rec_write(fd, VF_REC_OUT, slot, 0, NULL, pl, (uint64_t)pn);
  }
  free(pl);
  free(ids);
  free(g.ids);
  free(g.top);
  free(g.lps);
  free(g.lp);
}

static int goldens_child(void *arg, int fd) {
  s4_job *j = arg;
  mi_registry *reg;
  mi_session *e = vf_child_engine(j->o, j->workdir, j->o->model_dir, fd, &reg);
  if (!e) return 1;
  vf_rec_write(fd, VF_REC_OUT, 0, 0, NULL, NULL, 0);
  int K = (int)json_integer_value(json_object_get(j->gold, "top_k"));
  size_t ci;
  json_t *gc;
  json_array_foreach(json_object_get(j->gold, "cases"), ci, gc) child_case(fd, e, 1 + (int)ci, gc, K);
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

/* One golden case against the child's record; 0 pass, 1 fail. */
static int judge_case(json_t *ev, const vf_rec *rec, const char *gname, int ci, json_t *gc, int K, int held,
                      double *worst) {
  char cname[64], where[4200];
  snprintf(cname, sizeof cname, "case %d%s", ci, held ? " (held out)" : "");
  snprintf(where, sizeof where, "%s case %d", gname, ci);
  const int evi = ci + 1; /* event index: 0 is the engine load */
  const char *prompt = json_string_value(json_object_get(gc, "prompt"));
  json_t *gids = json_object_get(gc, "prompt_ids"), *gsteps = json_object_get(gc, "steps");
  int np = (int)json_array_size(gids), ns = (int)json_array_size(gsteps);
  if (!prompt || np < 1 || ns < 1 || K < 2 || K > MAX_TOPK) {
    vf_ev_end(ev, cname, evi, 0, 0, NULL, "%s: malformed golden case (prompt, prompt_ids, steps, top_k)", where);
    return 1;
  }
  if (rec->type == VF_REC_FAIL) {
    vf_ev_end(ev, cname, evi, 0, 0, NULL, "%s: %s", where, rec->msg);
    return 1;
  }
  int32_t hdr[3] = {0, 0, 0};
  if (rec->payload_len >= 12) memcpy(hdr, rec->payload, 12);
  const int64_t n_ids = hdr[0], gn = hdr[1];
  if (rec->payload_len < 12 || hdr[2] != K || n_ids < 0 || gn < 0 || gn > ns ||
      rec->payload_len != (size_t)(12 + 4 * (n_ids + gn + gn * K) + 8 * gn * K)) {
    vf_ev_end(ev, cname, evi, 0, 0, NULL, "%s: the unit returned a malformed record (%zu bytes)", where,
              rec->payload_len);
    return 1;
  }
  const char *p = rec->payload + 12;
  int32_t *ids = malloc(4 * (size_t)(n_ids + 1)), *gtok = malloc(4 * (size_t)(gn + 1)),
          *top = malloc(4 * (size_t)(gn * K + 1));
  double *lps = malloc(8 * (size_t)(gn * K + 1));
  int rc = 1;
  if (!ids || !gtok || !top || !lps) {
    vf_ev_end(ev, cname, evi, 0, 0, NULL, "%s: out of memory in the verifier", where);
    goto out;
  }
  memcpy(ids, p, 4 * (size_t)n_ids), p += 4 * n_ids;
  memcpy(gtok, p, 4 * (size_t)gn), p += 4 * gn;
  memcpy(top, p, 4 * (size_t)(gn * K)), p += 4 * gn * K;
  memcpy(lps, p, 8 * (size_t)(gn * K));
  for (int i = 0; i < np; i++)
    if (i >= n_ids || ids[i] != json_integer_value(json_array_get(gids, (size_t)i)) || n_ids != np) {
      vf_ev_end(ev, cname, evi, 0, 0, NULL, "%s: prompt tokenisation differs from llama.cpp's at index %d (%lld vs %d ids)",
                where, i, (long long)n_ids, np);
      goto out;
    }
  double mx = 0;
  int compared = 0, tie = -1;
  char msg[6000] = "";
  if (gn < ns) {
    snprintf(msg, sizeof msg, "%s: the engine generated %lld tokens, the golden has %d", where, (long long)gn, ns);
  } else {
    for (int s = 0; s < ns && !msg[0] && tie < 0; s++) {
      json_t *gs = json_array_get(gsteps, (size_t)s), *gtop = json_object_get(gs, "top");
      int gk = (int)json_array_size(gtop);
      if (gk > K) gk = K;
      int32_t gid[MAX_TOPK];
      double glp[MAX_TOPK], gfloor = INFINITY, mfloor = INFINITY;
      for (int i = 0; i < gk; i++) {
        gid[i] = (int32_t)json_integer_value(json_array_get(json_array_get(gtop, (size_t)i), 0));
        glp[i] = json_number_value(json_array_get(json_array_get(gtop, (size_t)i), 1));
        gfloor = fmin(gfloor, glp[i]);
      }
      const int32_t *mid = top + (size_t)s * K;
      const double *mlp = lps + (size_t)s * K;
      for (int i = 0; i < K; i++) mfloor = fmin(mfloor, mlp[i]);
      for (int i = 0; i < gk && !msg[0]; i++) {
        int jx = find_id(mid, K, gid[i]);
        if (jx < 0) {
          if (glp[i] > gfloor + 2 * TOL)
            snprintf(msg, sizeof msg, "%s step %d: token %d (llama.cpp logprob %.6f) is missing from the engine's top-%d",
                     where, s, gid[i], glp[i], K);
          continue;
        }
        double d = fabs(mlp[jx] - glp[i]);
        if (!(d <= mx)) mx = d;
        if (!(d <= TOL))
          snprintf(msg, sizeof msg, "%s step %d: token %d logprob %.6f, llama.cpp %.6f (|diff| %.2e > %.0e)", where, s,
                   gid[i], mlp[jx], glp[i], d, TOL);
      }
      for (int i = 0; i < K && !msg[0]; i++)
        if (find_id(gid, gk, mid[i]) < 0 && mlp[i] > mfloor + 2 * TOL)
          snprintf(msg, sizeof msg, "%s step %d: the engine's token %d (logprob %.6f) is missing from llama.cpp's top-%d",
                   where, s, mid[i], mlp[i], gk);
      if (msg[0]) break;
      int64_t gt = json_integer_value(json_object_get(gs, "token_id"));
      if (gtok[s] != gt) {
        double gap = gk >= 2 ? glp[0] - glp[1] : INFINITY;
        if (gap <= NEAR_TIE) tie = s;
        else
          snprintf(msg, sizeof msg, "%s step %d: greedy token %d, llama.cpp %lld (top-1/top-2 gap %.2e: not a tie)",
                   where, s, gtok[s], (long long)gt, gap);
      }
      compared++;
    }
  }
  rc = msg[0] != 0;
  if (mx > *worst) *worst = mx;
  json_t *extra = json_pack("{s:i, s:i, s:f, s:b}", "steps_compared", compared, "prompt_tokens", np,
                            "max_abs_logprob_diff", mx, "held_out", held);
  if (tie >= 0) json_object_set_new(extra, "near_tie_at_step", json_integer(tie));
  if (rc) vf_ev_end(ev, cname, evi, 0, mx, extra, "%s", msg);
  else
    vf_ev_end(ev, cname, evi, 1, mx, extra, "%d steps identical, max |logprob diff| %.2e%s", compared, mx,
              tie >= 0 ? " (stopped at a near tie)" : "");
out:
  free(ids);
  free(gtok);
  free(top);
  free(lps);
  return rc;
}

static json_t *goldens_judge(void *arg, const vf_child_result *r) {
  s4_job *j = arg;
  json_t *ev = json_array(), *cases = json_object_get(j->gold, "cases");
  int nc = (int)json_array_size(cases), K = (int)json_integer_value(json_object_get(j->gold, "top_k"));
  vf_rec *sl = calloc((size_t)nc + 1, sizeof *sl);
  if (!sl || vf_raw_read(r, "stage 4 (end to end)", nc + 1, sl, ev) < 0 ||
      !vf_ev_engine_load(ev, &sl[0], j->o->model_dir))
    goto done;
  double worst = 0;
  for (int ci = 0; ci < nc; ci++) {
    json_t *gc = json_array_get(cases, (size_t)ci);
    int h = held_out(j->contract, j->golden, ci, gc);
    if (!sl[1 + ci].type) {
      char cname[64], where[4200];
      snprintf(cname, sizeof cname, "case %d%s", ci, h ? " (held out)" : "");
      snprintf(where, sizeof where, "%s case %d", j->golden, ci);
      vf_ev_start(ev, cname, ci + 1, where);
      break;
    }
    judge_case(ev, &sl[1 + ci], j->golden, ci, gc, K, h, &worst);
  }
done:
  free(sl);
  return ev;
}

/* The model's two hashes, as hex; 0, or -1 with why. */
static int model_hashes(const char *model_dir, char whex[16], char chex[16], char *why, size_t why_len) {
  char st[4200], cf[4200];
  if (mi_model_input_is_gguf(model_dir)) { /* one file: weights and config (golden's gguf_fnv1a32) */
    int ok = 0;
    uint32_t h = vf_fnv1a32_file(model_dir, &ok);
    if (!ok) {
      snprintf(why, why_len, "%s: cannot read it to find its golden", model_dir);
      return -1;
    }
    snprintf(whex, 16, "%08x", h);
    snprintf(chex, 16, "%08x", h);
    return 0;
  }
  snprintf(st, sizeof st, "%s/model.safetensors", model_dir);
  snprintf(cf, sizeof cf, "%s/config.json", model_dir);
  int ok = 0, cok = 0;
  uint32_t h = vf_fnv1a32_file(st, &ok), ch = vf_fnv1a32_file(cf, &cok);
  if (!ok || !cok) {
    snprintf(why, why_len, "%s: cannot read it to find its golden%s", ok ? cf : st,
             ok ? "" : " (sharded checkpoints have no goldens yet)");
    return -1;
  }
  snprintf(whex, 16, "%08x", h);
  snprintf(chex, 16, "%08x", ch);
  return 0;
}

/* The golden in dir whose recorded hashes are the model's (a golden that
 * records no config hash matches on the weights alone). */
static int find_golden(const char *dir, int gguf, const char *whex, const char *chex, char *out, size_t n,
                       char *why, size_t why_len) {
  char pat[4200];
  snprintf(pat, sizeof pat, "%s/*.json", dir);
  glob_t g;
  int found = 0;
  char unreadable[700] = ""; /* the first golden that could not be read, said in the message */
  if (glob(pat, 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc && !found; i++) {
      char e2[600];
      json_t *j = mi_file_load_json(g.gl_pathv[i], 0, GOLDEN_MAX_BYTES, "golden", 0, e2, sizeof e2);
      if (!j && !unreadable[0]) snprintf(unreadable, sizeof unreadable, "%s", e2);
      json_t *m = json_object_get(j, "model");
      const char *f = json_string_value(json_object_get(m, gguf ? "gguf_fnv1a32" : "safetensors_fnv1a32"));
      const char *c = gguf ? NULL : json_string_value(json_object_get(m, "config_fnv1a32"));
      if (f && !strcasecmp(f, whex) && (!c || !strcasecmp(c, chex))) {
        snprintf(out, n, "%s", g.gl_pathv[i]);
        found = 1;
      }
      json_decref(j);
    }
    globfree(&g);
  }
  if (!found)
    snprintf(why, why_len, "%s: no golden for this model (%s FNV-1a %s, config.json %s)%s%s", dir,
             gguf ? "GGUF file" : "model.safetensors", whex, gguf ? "in it" : chex,
             unreadable[0] ? "; a golden that cannot be read: " : "", unreadable);
  return found ? 0 : -1;
}

/* The oracle's golden for this checkpoint: from the cache, else made now.
 * 0 (path in out; *made, *secs), 3 llama.cpp has no conversion for it
 * (why), -1 it could not be made (why). */
static int oracle_golden(const vf_stage_opts *o, const char *whex, const char *chex, char *out, size_t n,
                         int *made, double *secs, char *why, size_t why_len) {
  *made = 0;
  *secs = 0;
  char tmp[600];
  if (find_golden(o->oracle_cache, mi_model_input_is_gguf(o->model_dir), whex, chex, out, n, tmp, sizeof tmp) == 0)
    return 0;
  if (mi_mkdir_p(o->oracle_cache) != 0) {
    snprintf(why, why_len, "%s: cannot create the oracle's cache: %s", o->oracle_cache, strerror(errno));
    return -1;
  }
  char dst[4096], log[4096], prompts[4096];
  snprintf(dst, sizeof dst, "%s/%s-%s.json", o->oracle_cache, whex, chex);
  snprintf(log, sizeof log, "%s/.%s-%s.log", o->oracle_cache, whex, chex);
  snprintf(prompts, sizeof prompts, "%.4000s", o->oracle_script);
  char *slash = strrchr(prompts, '/');
  snprintf(slash ? slash + 1 : prompts, sizeof prompts - (size_t)(slash ? slash + 1 - prompts : 0), "prompts.json");
  unlink(log);
  char *argv[] = {(char *)o->oracle_node, (char *)o->oracle_script, "--model", (char *)o->model_dir,
                  "--out", dst, "--prompts", prompts, NULL};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = mi_spawn_wait(argv, log, NULL, o->oracle_timeout_s > 0 ? o->oracle_timeout_s : 1800);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  /* its last line says why when it did not write one */
  char last[600];
  mi_file_last_line(log, last, sizeof last);
  if (rc == 0 && access(dst, R_OK) == 0) {
    unlink(log);
    snprintf(out, n, "%s", dst);
    *made = 1;
    return 0;
  }
  if (rc == 3) {
    snprintf(why, why_len, "no golden for this model, and the oracle cannot make one: %.590s", last[0] ? last : "?");
    return 3;
  }
  snprintf(why, why_len, "the oracle (%.200s %.300s) %s after %.0f s%s%.400s (log: %.300s)", o->oracle_node, o->oracle_script,
           rc < 0 ? "was killed or timed out" : rc == 127 ? "could not be run" : "failed", *secs, last[0] ? ": " : "",
           last, log);
  return -1;
}

/* The golden's prompts as deployed (deployed.c), judged as the in-process
 * unit's: one unit, its events the same case events. */
static json_t *deployed_unit(const vf_stage_opts *o, s4_job *j) {
  json_t *ev = json_array(), *cases = json_object_get(j->gold, "cases");
  int K = (int)json_integer_value(json_object_get(j->gold, "top_k"));
  char dir[4200] = "", conf[4300], err[2000] = "";
  int is_engine = 0;
  vf_deploy_guard g = {-1, 0, 0, ""};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (vf_deploy_prepare(o, dir, sizeof dir, conf, sizeof conf, &is_engine, err, sizeof err) != 0) {
    vf_ev_end(ev, "engine_load", 0, 0, 0, NULL, "as deployed: %s", err);
  } else {
    vf_ev_end(ev, "engine_load", 0, 1, 0, NULL, NULL);
    double worst = 0;
    size_t nc = json_array_size(cases), ci;
    vf_rec *recs = calloc(nc + 1, sizeof *recs);
    char **pls = calloc(nc + 1, sizeof *pls);
    json_t *gc;
    if (recs && pls) vf_deploy_run(o, dir, conf, is_engine, cases, K, recs, pls, &g);
    json_array_foreach(cases, ci, gc) {
      if (!recs || !pls) break;
      judge_case(ev, &recs[ci], j->golden, (int)ci, gc, K, held_out(j->contract, j->golden, (int)ci, gc), &worst);
      free(pls[ci]);
    }
    free(recs);
    free(pls);
  }
  if (dir[0]) vf_rmtree(dir);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  vf_child_result r;
  memset(&r, 0, sizeof r);
  r.exited = 1;
  r.events = ev;
  r.wall_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  json_t *u = vf_unit_report("deployed", "mi-run", "-", "end to end as deployed", &r, o->lim.timeout_s, o->lim.cpu_s);
  json_decref(ev);
  /* evidence: how the user's model folder was held during the run */
  char how[900];
  snprintf(how, sizeof how, "%s, %s%s%s",
           g.read_only == 1   ? "read-only for mi-run (a mount namespace)"
           : g.read_only == 0 ? "writable for mi-run (no mount namespace could be made)"
                              : "not reached (mi-run did not start)",
           !g.fingerprinted ? "not fingerprinted" : g.changed ? "changed" : "fingerprinted: unchanged",
           g.what[0] ? ": " : "", g.what);
  json_t *mf = json_pack("{s:b, s:b, s:b, s:s}", "read_only", g.read_only == 1, "fingerprinted", g.fingerprinted,
                         "changed", g.changed, "how", how);
  json_object_set_new(u, "model_folder", mf);
  return u;
}

/* The model's own contract may call an operator the peer computes less
 * exactly than its contract (its "peer" entry: llama.cpp's GELU through an
 * f16 table): the tolerance widens to what that entry states, measured,
 * and the near-tie margin with it. Returns that operator's id, or NULL. */
static const char *peer_tolerance(const vf_stage_opts *o) {
  if (!o->ckb || !o->model_dir) return NULL;
  char e2[600];
  json_t *cfg = mi_model_input_config(o->model_dir, 0, e2, sizeof e2);
  const mi_ckb_entry *me = cfg ? vf_bind_find_model(o->ckb, cfg, NULL) : NULL;
  const char *why = NULL;
  if (me) g_tol = mi_ckb_peer_logprob_tol(o->ckb, me->json, g_tol, &why);
  json_decref(cfg);
  return why;
}

json_t *vf_stage4(const vf_stage_opts *o, json_t *contract) {
  json_t *units = json_array();
  s4_job j = {o, contract, NULL, "", NULL};
  g_tol = vf_logprob_tol(o, 1e-3);
  const char *widened_by = peer_tolerance(o);
  char why[4400], whex[16], chex[16];
  json_t *oracle = NULL; /* evidence: where the golden came from */
  int have = model_hashes(o->model_dir, whex, chex, why, sizeof why) == 0;
  if (have && !o->goldens_dir) {
    snprintf(why, sizeof why, "no goldens folder (give --goldens DIR)");
    have = 0;
  }
  if (have && find_golden(o->goldens_dir, mi_model_input_is_gguf(o->model_dir), whex, chex, j.golden, sizeof j.golden, why, sizeof why) != 0) {
    have = 0;
    if (o->oracle_node && o->oracle_script && o->oracle_cache) {
      int made = 0;
      double secs = 0;
      char owhy[2000] = "";
      int orc = oracle_golden(o, whex, chex, j.golden, sizeof j.golden, &made, &secs, owhy, sizeof owhy);
      if (orc == 0) {
        have = 1;
        oracle = json_pack("{s:s, s:b, s:f}", "golden", j.golden, "made_now", made, "seconds", secs);
        fprintf(stderr, "mi-verify: stage 4: %s llama.cpp golden for this checkpoint: %s\n",
                made ? "made a" : "the cached", j.golden);
        if (made) fprintf(stderr, "mi-verify: stage 4: the oracle took %.1f s (cached for the next run)\n", secs);
      } else {
        snprintf(why, sizeof why, "%s", owhy);
        if (orc == 3) { /* llama.cpp does not know it: N/A, saying so */
          json_t *s = vf_stage_result(4, "end_to_end", units);
          json_object_set_new(s, "verdict", json_string("N/A"));
          json_object_set_new(s, "message", json_string(why));
          return s;
        }
      }
    } else {
      size_t l = strlen(why);
      snprintf(why + l, sizeof why - l, "; no oracle to make one (mi-verify --no-oracle, or node / tools/peer not found)");
    }
  }
  if (!have) {
    json_t *s = vf_stage_result(4, "end_to_end", units);
    json_object_set_new(s, "verdict", json_string(o->goldens_optional ? "N/A" : "FAIL"));
    json_object_set_new(s, "message", json_string(why));
    return s;
  }
  char wd[4096];
  if (vf_workdir_new(wd, sizeof wd) != 0) {
    json_decref(units);
    return json_pack("{s:i, s:s, s:s, s:s}", "stage", 4, "name", "end_to_end", "verdict", "FAIL",
                     "message", "cannot create a scratch folder");
  }
  j.workdir = wd;
  const char *gb = strrchr(j.golden, '/');
  char gerr[1200];
  j.gold = mi_file_load_json(j.golden, 0, GOLDEN_MAX_BYTES, "golden", 0, gerr, sizeof gerr);
  long long max_pos = 0;
  const int past = j.gold && json_is_array(json_object_get(j.gold, "cases")) ? drop_past_context(o, &j, &max_pos) : 0;
  if (j.gold && past && !json_array_size(json_object_get(j.gold, "cases"))) {
    snprintf(gerr, sizeof gerr, "%.1000s: every case needs more positions than the declared context of %lld", j.golden,
             max_pos);
    json_decref(j.gold);
    j.gold = NULL;
  }
  json_t *u = NULL;
  if (!j.gold) {
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "goldens", "id", gb ? gb + 1 : j.golden, "verdict", "FAIL",
                  "status", "ERROR", "message", gerr);
  } else if (o->tp <= 1) { /* at --tp N only the ranks under mpirun load it: the deployed unit below */
    /* what a correct child writes: per case its ids, steps and top-K */
    size_t cap = VF_REC_SIZE(0) * 8, ci;
    json_t *gc;
    size_t K = (size_t)json_integer_value(json_object_get(j.gold, "top_k"));
    json_array_foreach(json_object_get(j.gold, "cases"), ci, gc) {
      size_t ns = json_array_size(json_object_get(gc, "steps"));
      cap += VF_REC_SIZE(12 + 4 * (json_array_size(json_object_get(gc, "prompt_ids")) * 4 + 64 + ns + ns * K) +
                         8 * ns * K);
    }
    u = vf_run_unit_raw(o, "goldens", gb ? gb + 1 : j.golden, "end to end", goldens_child, &j, 300, cap,
                        goldens_judge);
  }
  json_t *du = j.gold && o->mi_run ? deployed_unit(o, &j) : NULL;
  if (!u && !du) /* --tp N with no mi-run beside mi-verify: nothing could run the ranks */
    u = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "deployed", "id", "mi-run", "verdict", "FAIL", "status", "ERROR",
                  "message", "at --tp N the engine runs only as deployed, and there is no mi-run beside mi-verify");
  json_decref(j.gold);
  vf_rmtree(wd);
  int steps = 0, held = 0, cases = 0;
  double mx = 0;
  size_t k;
  json_t *c;
  json_array_foreach(json_object_get(u, "cases"), k,
                     c) if (u && json_is_integer(json_object_get(c, "steps_compared"))) {
    cases++;
    steps += (int)json_integer_value(json_object_get(c, "steps_compared"));
    held += json_is_true(json_object_get(c, "held_out"));
    mx = fmax(mx, json_number_value(json_object_get(c, "max_abs_logprob_diff")));
  }
  char whence[160] = "";
  if (oracle && json_is_true(json_object_get(oracle, "made_now")))
    snprintf(whence, sizeof whence, " (a golden the oracle made for this checkpoint in %.1f s)",
             json_number_value(json_object_get(oracle, "seconds")));
  else if (oracle)
    snprintf(whence, sizeof whence, " (the oracle's cached golden for this checkpoint)");
  char wide[300] = "";
  if (past)
    snprintf(wide, sizeof wide, "; %d case%s past the declared context of %lld not run", past, past == 1 ? "" : "s",
             max_pos);
  if (widened_by)
    snprintf(wide + strlen(wide), sizeof wide - strlen(wide),
             "; tolerance %.2g, as %s's peer entry states (llama.cpp computes it less exactly)", TOL, widened_by);
  if (u && j.gold && o->tp <= 1)
    json_object_set_new(
        u, "summary",
        json_sprintf("%d cases (%d held out), %d greedy steps identical to llama.cpp, "
                     "max |logprob diff| %.2e%s%s",
                     cases, held, steps, mx, whence, wide));
  if (u) json_array_append_new(units, u);
  if (du) {
    int dc = 0, ds = 0;
    double dmx = 0;
    json_array_foreach(json_object_get(du, "cases"), k, c) if (json_is_integer(json_object_get(c, "steps_compared"))) {
      dc++;
      ds += (int)json_integer_value(json_object_get(c, "steps_compared"));
      dmx = fmax(dmx, json_number_value(json_object_get(c, "max_abs_logprob_diff")));
    }
    const char *how = json_string_value(json_object_get(json_object_get(du, "model_folder"), "how"));
    char tpl[48] = "";
    if (o->tp > 1) snprintf(tpl, sizeof tpl, "mpirun -np %d ", o->tp);
    json_object_set_new(du, "summary",
                        json_sprintf("as deployed (%smi-run, the user's model path, environment and temp folder): "
                                     "%d cases, %d greedy steps identical to llama.cpp, max |logprob diff| %.2e%s%s; "
                                     "the model folder %s",
                                     tpl, dc, ds, dmx, o->tp > 1 ? whence : "",
                                     o->tp > 1 ? wide : "", how ? how : "?"));
    json_array_append_new(units, du);
  }
  json_t *s = vf_stage_result(4, "end_to_end", units);
  json_object_set_new(s, "golden", json_string(j.golden));
  if (oracle) json_object_set_new(s, "oracle", oracle);
  return s;
}
