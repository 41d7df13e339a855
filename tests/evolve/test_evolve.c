/* mi-gen --evolve (core/gen/evolve, docs/evolution.md) against what is
 * known independently of it:
 *  - the variant search, generic over ckb/variants/ and interpreting each
 *    edited contract in float64, on llama.cpp's goldens of two probe shapes
 *    (tests/goldens/hybrid/evolve-probe-attn*), picks the reading the
 *    checkpoints were made with (mi-mkmodel's hybrid: 1+w norms, 1+w q/k
 *    norms, partial rotary, interleaved gate), the true candidate within
 *    tolerance, every other scored one outside it, and the readings that
 *    cannot explain the checkpoint's weights (no gate: q_proj's shape) not
 *    scored, naming the weight;
 *  - fed an oracle of another model (a golden recomputed as a model whose
 *    q_norm/k_norm multiply by w would answer) it picks that reading instead,
 *    so the search is not hard-wired;
 *  - a checkpoint with a config field or weight the result does not explain
 *    stops the loop naming it, and the CKB stays byte for byte as it was;
 *  - every file under --refs is logged with its size and SHA-256 (computed
 *    here again); with references off nothing is;
 *  - the consolidator's entries validate in the CKB, are the same bytes on
 *    a second run, and its model contract's full-attention layer is the one
 *    hand-checked in tests/gen/contracts/qwen35.draft.json;
 *  - a bundle with a broken operator contract is rejected naming it. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/gen/evolve/evolve.h"
#include "core/gen/gen.h"
#include "core/runtime/safetensors.h"
#include "core/verify/interp.h"
#include "tests/safetensors/st_writer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_json.h"
#include "tests/util/test_logits.h"
#include "tests/util/test_proc.h"

static const char *TRUE_READING = "gate=interleaved norm=1+w qk=1+w rotary=partial";
/* the vocabulary's entries that make it up, and those of every group the probes show evidence of */
static const char *const TRUE_IDS[] = {"variant.gate_interleaved", "variant.layer_kind_interval", "variant.norm_1w",
                                       "variant.qk_norm_1w", "variant.rope_parameters_default", "variant.rotary_partial",
                                       "variant.sandwich_none", "variant.config_class_qwen3_5_text", NULL};
static const char *PROBES[] = {"evolve-probe-attn-seed5.json", "evolve-probe-attn-b-seed6.json"};

static void gguf_runs_as_the_folder(const char *ckb, const char *run, const char *model, const char *tmp);
static void gguf_section_as_shipped(const json_t *m, const char *rel, const char *arch);

static char *src(const char *rel) {
  char *p = NULL;
  ck_assert(asprintf(&p, "%s/%s", getenv("MI_SOURCE_DIR"), rel) > 0);
  return p;
}

/* A fresh copy of ckb/ as it was before evolution (mi_ckb_export_curated:
 * the entries with provenance evolved and the kernels naming them left
 * out), so the loop starts from the same knowledge whatever ckb/ holds. */
static void curated_ckb(const char *from, const char *to) {
  char err[1024];
  mi_ckb *c = mi_ckb_open(from, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  ck_assert_msg(mi_ckb_export_curated(c, to, NULL, err, sizeof err) == 0, "%s", err);
  mi_ckb_close(c);
}

static json_t *load_src(const char *rel) {
  char *p = src(rel);
  json_error_t je;
  json_t *j = json_load_file(p, 0, &je);
  ck_assert_msg(j, "%s: %s", p, je.text);
  free(p);
  return j;
}

/* A reading as phase 3 hands it on: the closest contract (model.qwen3) in
 * probe form for cfg, edited by the named variants of ckb/. */
static json_t *reading(const json_t *cfg, const char *const *ids, const char *name) {
  char err[1024], *ck = src("ckb");
  mi_ckb *k = mi_ckb_open(ck, err, sizeof err);
  ck_assert_msg(k, "%s", err);
  const mi_ckb_entry *base = mi_ckb_find(k, "model.qwen3");
  ck_assert_ptr_nonnull(base);
  json_t *vars = json_array(), *vids = json_array();
  for (int i = 0; ids[i]; i++) {
    const mi_ckb_entry *v = mi_ckb_find(k, ids[i]);
    ck_assert_msg(v, "%s not in ckb/variants", ids[i]);
    json_array_append(vars, v->json);
    json_array_append_new(vids, json_string(ids[i]));
  }
  json_t *pf = ev_probe_form(base->json, cfg, NULL);
  json_t *m = ev_apply(pf, vars, cfg);
  json_t *f = json_pack("{s:s, s:s, s:o, s:o, s:[], s:[]}", "name", name, "base", "model.qwen3", "variants", vids,
                        "contract", m, "deferred", "operators");
  json_decref(pf);
  json_decref(vars);
  mi_ckb_close(k);
  free(ck);
  return f;
}

/* The CKB at dir with its vocabulary cut to the true reading's members:
 * one candidate, for the tests of the later phases (the search over the
 * whole vocabulary is search_picks_true_variants_on_two_probes's), so the
 * sanitizer run stays short. */
static void true_reading_only(const char *dir) {
  const char *drop[] = {"gate_none", "gate_half", "norm_w", "qk_norm_w", "qk_norm_none", "rotary_full"};
  for (int i = 0; i < 6; i++) {
    char p[4400];
    snprintf(p, sizeof p, "%s/variants/%s.json", dir, drop[i]);
    ck_assert_msg(unlink(p) == 0, "%s", p);
  }
}

/* refs folder holding the named goldens of tests/goldens/DIR cut to their
 * first prompt's first `steps` steps: the same oracle, a fraction of the
 * reference's work (the sanitizer run stays short); docs/evolution.md has
 * runs on the whole goldens. Returns the tmp root. */
static char *make_refs_from(const char *dir, const char *const *goldens, int n, int steps_kept, char **refs_out) {
  char *tmp = tw_mkdtemp("evolve");
  char *refs = tw_path(tmp, "refs");
  ck_assert_int_eq(mkdir(refs, 0755), 0);
  for (int i = 0; i < n; i++) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/goldens/%s/%s", dir, goldens[i]);
    json_t *g = load_src(rel);
    json_t *cases = json_object_get(g, "cases");
    while (json_array_size(cases) > 1) json_array_remove(cases, json_array_size(cases) - 1);
    json_t *steps = json_object_get(json_array_get(cases, 0), "steps");
    while (json_array_size(steps) > (size_t)steps_kept) json_array_remove(steps, json_array_size(steps) - 1);
    char *out = tw_path(refs, goldens[i]);
    ck_assert_int_eq(json_dump_file(g, out, JSON_COMPACT), 0);
    free(out);
    json_decref(g);
  }
  *refs_out = refs;
  return tmp;
}

/* the hybrid's probes (tests/goldens/hybrid), 2 steps: a quarter of the reference's work */
static char *make_refs(const char *const *goldens, int n, char **refs_out) {
  return make_refs_from("hybrid", goldens, n, 2, refs_out);
}

/* MI_TEST_QUICK (the sanitizer run): the golden rel cut to its first 2
 * cases of 4 steps, under its own name in the folder dir (made), which a
 * revalidation's stage 4 picks for the same checkpoint (the Release run
 * compares every case: the committed goldens). */
static void short_golden(const char *rel, const char *dir) {
  json_t *g = load_src(rel), *cases = json_object_get(g, "cases");
  ck_assert_int_ge(json_array_size(cases), 2);
  while (json_array_size(cases) > 2) json_array_remove(cases, json_array_size(cases) - 1);
  for (size_t i = 0; i < 2; i++) {
    json_t *steps = json_object_get(json_array_get(cases, i), "steps");
    while (json_array_size(steps) > 4) json_array_remove(steps, json_array_size(steps) - 1);
  }
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  char *out = tw_path(dir, strrchr(rel, '/') + 1);
  ck_assert_int_eq(json_dump_file(g, out, JSON_COMPACT), 0);
  fprintf(stderr, "test_evolve: MI_TEST_QUICK: revalidation against %s's first 2 cases of 4 steps\n", rel);
  free(out);
  json_decref(g);
}

/* mi-gen --evolve; returns its exit status and the parsed evolve.json */
static int run_evolve(const char *tmp, const char *refs, const char *cand, json_t **report) {
  char *ckb = tw_path(tmp, "ckb"), *run = tw_path(tmp, "run"), *ck = src("ckb");
  struct stat st;
  if (stat(ckb, &st) != 0) curated_ckb(ck, ckb);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-gen' --evolve %s%s%s %s%s%s --ckb '%s' --run-dir '%s' 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs ? "--refs '" : "", refs ? refs : "", refs ? "'" : "", cand ? "--candidates '" : "",
           cand ? cand : "", cand ? "'" : "", ckb, run, tmp);
  int s = system(cmd);
  ck_assert(WIFEXITED(s));
  char *rp = tw_path(run, "evolve.json");
  json_error_t je;
  *report = json_load_file(rp, 0, &je);
  ck_assert_msg(*report, "%s: %s", rp, je.text);
  free(rp);
  free(ckb);
  free(run);
  free(ck);
  return WEXITSTATUS(s);
}

/* the table: per probe, 24 rows (gate 3 x norm 2 x q/k norm 2 x rotary 2:
 * q_norm present rules out "no q/k norm"), the 8 without a gate not scored
 * (q_proj holds query and gate rows), the true reading the only pass */
static void check_table_n(const json_t *table, const char *probe, const char *want, int want_rows, int want_unexplained) {
  size_t i;
  json_t *r;
  int rows = 0, found = 0, unexplained = 0;
  json_array_foreach(table, i, r) {
    if (strcmp(json_string_value(json_object_get(r, "probe")), probe)) continue;
    rows++;
    const char *cand = json_string_value(json_object_get(r, "candidate"));
    const char *v = json_string_value(json_object_get(r, "verdict"));
    if (!strcmp(v, "unexplained")) {
      unexplained++;
      ck_assert_msg(strstr(cand, "gate=none"), "%s %s: unexplained", probe, cand);
      ck_assert_msg(strstr(json_string_value(json_array_get(json_object_get(r, "unexplained"), 0)), "q_proj.weight"),
                    "%s %s: the q_proj shape is not named", probe, cand);
      continue;
    }
    double e = json_number_value(json_object_get(r, "error"));
    ck_assert_int_gt(json_integer_value(json_object_get(r, "steps")), 0);
    if (!strcmp(cand, want)) {
      found++;
      ck_assert_msg(e < EV_TOL && !strcmp(v, "pass"), "%s %s: error %g %s", probe, cand, e, v);
    } else {
      /* far outside: one wrong reading moves logprobs by O(0.1..10) */
      ck_assert_msg(e > 10 * EV_TOL && !strcmp(v, "fail"), "%s %s: error %g %s", probe, cand, e, v);
    }
  }
  ck_assert_int_eq(rows, want_rows);
  ck_assert_int_eq(unexplained, want_unexplained);
  ck_assert_int_eq(found, 1);
}

static void check_table(const json_t *table, const char *probe, const char *want) {
  check_table_n(table, probe, want, 24, 8);
}

/* The loop over the probe goldens under refs with the candidate bundle
 * (the gate's operators, copy2d and sigmoid_mul, come with it) and no
 * end-to-end golden: it stops after the search (exit 13), having found the
 * true reading. Its report. */
static json_t *search_with_bundle(const char *tmp, const char *refs) {
  json_t *r;
  char *cand = src("candidates/hybrid-deltanet");
  int rc = run_evolve(tmp, refs, cand, &r);
  free(cand);
  ck_assert_int_eq(rc, EV_EX_BUNDLE);
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), TRUE_READING);
  return r;
}

START_TEST(search_picks_true_variants_on_two_probes) {
  char *refs;
  char *tmp = make_refs(PROBES, 2, &refs);
  json_t *r = search_with_bundle(tmp, refs);
  ck_assert_str_eq(json_string_value(json_object_get(r, "base")), "model.qwen3");
  /* the DeltaNet layers' weights and fields are left to the bundle, by name */
  char *def = json_dumps(json_object_get(r, "deferred"), JSON_COMPACT);
  ck_assert_msg(def && strstr(def, "linear_attn.out_proj.weight") && strstr(def, "linear_conv_kernel_dim"), "%s", def);
  free(def);
  json_t *table = json_object_get(r, "variant_search");
  ck_assert_int_eq(json_array_size(table), 48);
  check_table(table, "probe-attn", TRUE_READING);
  check_table(table, "probe-attn-b", TRUE_READING);
  ck_assert(json_is_false(json_object_get(r, "llm")));
  /* the reads: both goldens and the bundle's contracts (each once), their
   * sizes and SHA-256 recomputed here */
  json_t *reads = json_object_get(r, "reads");
  ck_assert_int_eq(json_array_size(reads), 2 + 1 + 7);
  size_t i;
  json_t *x;
  json_array_foreach(reads, i, x) {
    if (i >= 2) {
      ck_assert_str_eq(json_string_value(json_object_get(x, "phase")), "variant_search");
      ck_assert(!strncmp(json_string_value(json_object_get(x, "ref")), "candidates/", 11));
      continue;
    }
    const char *p = json_string_value(json_object_get(x, "path"));
    char h[65];
    ck_assert_int_eq(mi_sha256_file(p, h), 0);
    ck_assert_str_eq(h, json_string_value(json_object_get(x, "sha256")));
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(x, "bytes")), st.st_size);
    ck_assert_str_eq(json_string_value(json_object_get(x, "phase")), "exploration");
    ck_assert(!strncmp(json_string_value(json_object_get(x, "ref")), "refs/evolve-probe-attn", 22));
  }
  /* the markdown report has the table */
  char *md = tw_path(tmp, "run/evolve.md");
  size_t n;
  char *text = tw_read_all(md, &n);
  ck_assert_ptr_nonnull(text);
  ck_assert_ptr_nonnull(strstr(text, "| probe-attn-b | gate=interleaved norm=1+w qk=1+w rotary=partial |"));
  free(text);
  free(md);
  json_decref(r);
  tw_rmtree(tmp);
  free(tmp);
  free(refs);
}
END_TEST

START_TEST(references_off_reads_nothing) {
  char *refs;
  char *tmp = make_refs(PROBES, 1, &refs);
  json_t *r;
  int rc = run_evolve(tmp, NULL, NULL, &r);
  ck_assert_int_eq(rc, EV_EX_GAP);
  ck_assert_int_eq(json_array_size(json_object_get(r, "reads")), 0);
  ck_assert(json_is_null(json_object_get(r, "references")));
  ck_assert_int_eq(json_array_size(json_object_get(r, "variant_search")), 0);
  json_t *ph = json_array_get(json_object_get(r, "phases"), 1);
  ck_assert_str_eq(json_string_value(json_object_get(ph, "phase")), "exploration");
  ck_assert_str_eq(json_string_value(json_object_get(ph, "status")), "off");
  json_decref(r);
  tw_rmtree(tmp);
  free(tmp);
  free(refs);
}
END_TEST

/* The golden's top-10 replaced by what the contract of the given reading
 * answers on the same tokens (interpreted in float64): the oracle of
 * another model. */
static void tamper(json_t *g, const char *dir, const char *const *ids) {
  json_t *cfg = mi_test_json_at(dir, "config.json");
  char err[512], *ck = src("ckb");
  mi_weights *w = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(w, "%s", err);
  mi_ckb *k = mi_ckb_open(ck, err, sizeof err);
  ck_assert_msg(k, "%s", err);
  json_t *f = reading(cfg, ids, "tampered");
  vf_interp *m = vf_interp_open_json(k, json_object_get(f, "contract"), cfg, w, err, sizeof err);
  ck_assert_msg(m, "%s", err);
  const int V = (int)json_integer_value(json_object_get(cfg, "vocab_size"));
  double *lp = malloc((size_t)V * sizeof(double));
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(g, "cases"), i, c) {
    json_t *pids = json_object_get(c, "prompt_ids"), *steps = json_object_get(c, "steps");
    int np = (int)json_array_size(pids), ns = (int)json_array_size(steps);
    int32_t *ids2 = malloc((size_t)(np + ns) * sizeof(int32_t));
    for (int t = 0; t < np; t++) ids2[t] = (int32_t)json_integer_value(json_array_get(pids, (size_t)t));
    for (int t = 0; t < ns; t++)
      ids2[np + t] = (int32_t)json_integer_value(json_object_get(json_array_get(steps, (size_t)t), "token_id"));
    double *lg = vf_interp_forward(m, ids2, np + ns - 1, ns, NULL, err, sizeof err);
    ck_assert_msg(lg, "%s", err);
    for (int t = 0; t < ns; t++) {
      mi_test_log_softmax_of(NULL, lg + (size_t)t * (size_t)V, lp, V);
      int best[10];
      for (int q = 0; q < 10; q++) best[q] = -1;
      for (int u = 0; u < V; u++) { /* insertion into the 10 largest */
        int q = 10;
        while (q > 0 && (best[q - 1] < 0 || lp[u] > lp[best[q - 1]])) q--;
        if (q == 10) continue;
        memmove(best + q + 1, best + q, (size_t)(9 - q) * sizeof *best);
        best[q] = u;
      }
      json_t *top = json_array();
      for (int q = 0; q < 10; q++) json_array_append_new(top, json_pack("[i, f]", best[q], lp[best[q]]));
      json_object_set_new(json_array_get(steps, (size_t)t), "top", top);
    }
    free(lg);
    free(ids2);
  }
  free(lp);
  vf_interp_close(m);
  json_decref(f);
  mi_ckb_close(k);
  mi_weights_close(w);
  json_decref(cfg);
  free(ck);
}

START_TEST(tampered_oracle_picks_the_other_variant) {
  char *refs;
  char *tmp = make_refs(PROBES + 1, 0, &refs);
  char *gp = src("tests/goldens/hybrid/evolve-probe-attn-b-seed6.json");
  json_t *g = json_load_file(gp, 0, NULL);
  ck_assert_ptr_nonnull(g);
  json_t *cases = json_object_get(g, "cases"); /* the first prompt, 2 steps (as make_refs) */
  while (json_array_size(cases) > 1) json_array_remove(cases, json_array_size(cases) - 1);
  json_t *steps0 = json_object_get(json_array_get(cases, 0), "steps");
  while (json_array_size(steps0) > 2) json_array_remove(steps0, json_array_size(steps0) - 1);
  char *dir = tw_path(tmp, "m");
  ev_opts o = {.exe_dir = NULL};
  char bin[4096], err[1024];
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  o.exe_dir = bin;
  ck_assert_msg(ev_remake_checkpoint(&o, g, dir, err, sizeof err) == 0, "%s", err);
  const char *ids[9];
  memcpy(ids, TRUE_IDS, sizeof ids);
  ids[3] = "variant.qk_norm_w"; /* a model whose q_norm and k_norm multiply by w */
  tamper(g, dir, ids);
  char *out = tw_path(refs, "tampered-probe-attn-b.json");
  ck_assert_int_eq(json_dump_file(g, out, JSON_COMPACT), 0);
  json_t *r;
  /* the vocabulary cut to the true reading's members plus the other q/k
   * norm: both q/k readings scored on the tampered oracle (the whole
   * product is search_picks_true_variants_on_two_probes's) */
  char *ckb = tw_path(tmp, "ckb"), *ck = src("ckb"), *qkw = tw_path(tmp, "qk_norm_w.json");
  curated_ckb(ck, ckb);
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "cp '%s/variants/qk_norm_w.json' '%s'", ckb, qkw);
  ck_assert_int_eq(system(cmd), 0);
  true_reading_only(ckb);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/variants/qk_norm_w.json'", qkw, ckb);
  ck_assert_int_eq(system(cmd), 0);
  char *cand = src("candidates/hybrid-deltanet");
  int rc = run_evolve(tmp, refs, cand, &r);
  free(cand);
  ck_assert_int_eq(rc, EV_EX_BUNDLE);
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), "gate=interleaved norm=1+w qk=w rotary=partial");
  check_table_n(json_object_get(r, "variant_search"), "probe-attn-b", "gate=interleaved norm=1+w qk=w rotary=partial", 2,
                0);
  const json_t *other = json_array_get(json_object_get(r, "variant_search"), 1);
  ck_assert_str_eq(json_string_value(json_object_get(other, "candidate")), TRUE_READING); /* the true model's: far off */
  free(ckb);
  free(ck);
  free(qkw);
  json_decref(r);
  json_decref(g);
  free(out);
  free(dir);
  free(gp);
  tw_rmtree(tmp);
  free(tmp);
  free(refs);
}
END_TEST



static void noop_diag(void *u, const char *line) { fprintf(stderr, "%s%s\n", (const char *)u, line); }

/* The consolidator into a fresh copy of ckb/: the bundle's layer and the
 * true reading; returns the tmp root (the CKB in ROOT/ckb). */
static char *consolidate_once(json_t **written) {
  char *tmp = tw_mkdtemp("evolve-cons");
  char *ckb = tw_path(tmp, "ckb"), *ck = src("ckb");
  curated_ckb(ck, ckb);
  ev_opts o = {.ckb = ckb, .run_dir = tmp};
  ev_ctx c = {.o = &o, .reads = json_array(), .report = json_object()};
  /* what exploration would have logged and phase 3 would have kept */
  json_array_append_new(c.reads, json_pack("{s:s, s:s, s:s}", "path", "/x/refs/evolve-probe-attn-seed5.json", "ref",
                                           "refs/evolve-probe-attn-seed5.json", "sha256",
                                           "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"));
  c.model_cfg = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b, s:s, s:b, s:[s, s, s],"
                          "s:i, s:i, s:i, s:i, s:i, s:{s:f, s:f}}",
                          "architectures", "Qwen3_5ForCausalLM", "hidden_size", 64, "num_hidden_layers", 3,
                          "num_attention_heads", 4, "num_key_value_heads", 2, "head_dim", 32, "intermediate_size", 128,
                          "vocab_size", 151936, "rms_norm_eps", 1e-6, "tie_word_embeddings", 0, "torch_dtype",
                          "bfloat16", "attn_output_gate", 1, "layer_types", "linear_attention", "full_attention",
                          "full_attention", "linear_conv_kernel_dim", 4, "linear_key_head_dim", 16,
                          "linear_value_head_dim", 16, "linear_num_key_heads", 2, "linear_num_value_heads", 4,
                          "rope_parameters", "rope_theta", 1e7, "partial_rotary_factor", 0.25);
  /* the candidate bundle's operators (as the CKB will hold them) and layer */
  json_t *ops = json_array(), *bj = load_src("candidates/hybrid-deltanet/bundle.json");
  size_t i;
  json_t *id;
  json_array_foreach(json_object_get(bj, "operators"), i, id) {
    char rel[256];
    snprintf(rel, sizeof rel, "candidates/hybrid-deltanet/operators/%s.json", json_string_value(id) + 9);
    json_t *op = load_src(rel);
    json_object_set_new(op, "provenance", json_pack("{s:s}", "source", "evolved"));
    json_array_append_new(ops, op);
  }
  json_t *bundle = bj; /* as phase 4 hands it on: the bundle with its entries and layer */
  json_object_set_new(bundle, "operator_entries", ops);
  json_object_set_new(bundle, "layer", load_src("candidates/hybrid-deltanet/layer_linear_attention.json"));
  json_t *found = reading(c.model_cfg, TRUE_IDS, TRUE_READING);
  char err[1024];
  json_t *search = json_array();
  ck_assert_msg(ev_consolidate(&c, found, bundle, search, written, err, sizeof err) == 0, "%s", err);
  json_decref(search);
  json_decref(found);
  mi_ckb *k = mi_ckb_open(ckb, err, sizeof err);
  ck_assert_ptr_nonnull(k);
  ck_assert_int_eq(mi_ckb_validate(k, noop_diag, "consolidated CKB: "), 0);
  mi_ckb_close(k);
  json_decref(bundle);
  json_decref(c.reads);
  json_decref(c.report);
  json_decref(c.model_cfg);
  free(ckb);
  free(ck);
  return tmp;
}

static json_t *names(const json_t *arr, const char *key) {
  json_t *o = json_object();
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) json_object_set_new(o, json_string_value(json_object_get(x, key)), json_true());
  return o;
}

/* steps equal in name, operator and arguments (the "what" text aside) */
static void same_steps(const json_t *a, const json_t *b, const char *what) {
  ck_assert_msg(json_array_size(a) == json_array_size(b), "%s: %zu steps, the draft %zu", what, json_array_size(a),
                json_array_size(b));
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
    char *sx = json_dumps(json_object_get(x, "args"), JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    char *sy = json_dumps(json_object_get(y, "args"), JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    if (!sx) sx = strdup("none");
    if (!sy) sy = strdup("none");
    ck_assert_msg(json_equal(json_object_get(x, "step"), json_object_get(y, "step")) &&
                      json_equal(json_object_get(x, "operator"), json_object_get(y, "operator")) && !strcmp(sx, sy),
                  "%s step %zu: %s %s, the draft %s %s", what, i, json_string_value(json_object_get(x, "step")), sx,
                  json_string_value(json_object_get(y, "step")), sy);
    free(sx);
    free(sy);
  }
}

START_TEST(consolidator_entries_validate_are_deterministic_and_match_the_draft) {
  json_t *w1, *w2;
  char *t1 = consolidate_once(&w1), *t2 = consolidate_once(&w2);
  ck_assert_int_eq(json_array_size(w1), 7 + 3); /* the seven operators, platform, model, experience */
  const char *files[] = {"ckb/models/qwen35.json", "ckb/experience/evolved_qwen35_variants.json"};
  for (int i = 0; i < 2; i++) {
    char *a = tw_path(t1, files[i]), *b = tw_path(t2, files[i]);
    size_t na, nb;
    char *x = tw_read_all(a, &na), *y = tw_read_all(b, &nb);
    ck_assert_msg(x && y && na == nb && !memcmp(x, y, na), "%s differs between two runs", files[i]);
    free(x);
    free(y);
    free(a);
    free(b);
  }
  /* the model contract against the hand-checked draft */
  char *mp = tw_path(t1, "ckb/models/qwen35.json");
  json_t *m = json_load_file(mp, 0, NULL), *d = load_src("tests/gen/contracts/qwen35.draft.json");
  ck_assert_ptr_nonnull(m);
  json_t *mk = json_object_get(json_object_get(m, "layer_kinds"), "kinds");
  json_t *dk = json_object_get(json_object_get(d, "layer_kinds"), "kinds");
  same_steps(json_object_get(json_object_get(mk, "full_attention"), "sequence"),
             json_object_get(json_object_get(dk, "full_attention"), "sequence"), "full_attention");
  same_steps(json_object_get(json_object_get(mk, "linear_attention"), "sequence"),
             json_object_get(json_object_get(dk, "linear_attention"), "sequence"), "linear_attention");
  same_steps(json_object_get(m, "epilogue"), json_object_get(d, "epilogue"), "epilogue");
  json_t *a = names(json_object_get(m, "config"), "name"), *b = names(json_object_get(d, "config"), "name");
  char *sa = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT), *sb = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
  ck_assert_msg(!strcmp(sa, sb), "config fields %s, the draft %s", sa, sb);
  free(sa);
  free(sb);
  json_decref(a);
  json_decref(b);
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(d, "weights"), i, w) { /* each weight of the draft, same shape and kind */
    json_t *mine = NULL, *x;
    size_t k;
    json_array_foreach(json_object_get(m, "weights"), k, x) if (json_equal(json_object_get(x, "key"),
                                                                          json_object_get(w, "key"))) mine = x;
    ck_assert_msg(mine, "weight %s missing", json_string_value(json_object_get(w, "key")));
    ck_assert_msg(json_equal(json_object_get(mine, "shape"), json_object_get(w, "shape")) &&
                      !strcmp(json_string_value(json_object_get(mine, "layer_kind")) ?: "",
                              json_string_value(json_object_get(w, "layer_kind")) ?: ""),
                  "weight %s: shape or layer_kind differ from the draft", json_string_value(json_object_get(w, "key")));
  }
  ck_assert_int_eq(json_array_size(json_object_get(m, "weights")), json_array_size(json_object_get(d, "weights")));
  gguf_section_as_shipped(m, "models/qwen35.json", "qwen35"); /* the config class's, as ckb/ ships it */
  json_t *prov = json_object_get(m, "provenance");
  ck_assert_str_eq(json_string_value(json_object_get(prov, "source")), "evolved");
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(prov, "refs"), 0)),
                   "refs/evolve-probe-attn-seed5.json#sha256=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  json_decref(m);
  json_decref(d);
  free(mp);
  json_decref(w1);
  json_decref(w2);
  if (getenv("MI_EVOLVE_KEEP")) fprintf(stderr, "kept %s\n", t1); /* to try mi-gen on the consolidated CKB by hand */
  else tw_rmtree(t1);
  tw_rmtree(t2);
  free(t1);
  free(t2);
}
END_TEST

/* The folders of a bundle test (the scratch folder tmp, removed, with the
 * CKB copy in it; the source CKB and the candidate bundle): freed. */
static void drop_bundle_dirs(char *tmp, char *ckb, char *ck, char *cand) {
  free(cand);
  free(ck);
  free(ckb);
  tw_rmtree(tmp);
  free(tmp);
}

/* A bundle whose operator contract lacks its "math": rejected before any
 * unit runs, the line naming the contract and the problem. */
START_TEST(bundle_with_broken_operator_contract_is_rejected_naming_it) {
  char *tmp = tw_mkdtemp("evolve-bundle");
  char *ckb = tw_path(tmp, "ckb"), *ck = src("ckb"), *cand = tw_path(tmp, "cand"), *ops = tw_path(cand, "operators");
  curated_ckb(ck, ckb);
  ck_assert_int_eq(mkdir(cand, 0755), 0);
  ck_assert_int_eq(mkdir(ops, 0755), 0);
  /* a sigmoid_mul contract shaped like the curated silu_mul one, then broken */
  json_t *op = load_src("ckb/operators/silu_mul.json");
  json_object_set_new(op, "id", json_string("operator.sigmoid_mul"));
  json_object_set_new(op, "member", json_string("sigmoid_mul"));
  json_object_set_new(op, "provenance", json_pack("{s:s}", "source", "evolved"));
  json_object_del(op, "math");
  char *opp = tw_path(ops, "sigmoid_mul.json");
  ck_assert_int_eq(json_dump_file(op, opp, 0), 0);
  json_t *b = json_pack("{s:s, s:[s], s:s}", "id", "bundle.test", "operators", "operator.sigmoid_mul", "layer_kind",
                        "linear_attention");
  char *bp = tw_path(cand, "bundle.json");
  ck_assert_int_eq(json_dump_file(b, bp, 0), 0);
  ev_opts o = {.ckb = ckb, .run_dir = tmp, .candidates = cand};
  ev_ctx c = {.o = &o, .reads = json_array(), .report = json_object()};
  json_t *found = json_object(); /* rejected before any reading is used */
  json_t *bundle = NULL, *rep = NULL, *e2e = json_array();
  char err[2048] = "";
  ck_assert_int_eq(ev_bundle_verify(&c, found, e2e, &bundle, &rep, err, sizeof err), 1);
  json_decref(found);
  ck_assert_ptr_null(bundle);
  ck_assert_msg(strstr(err, "operator.sigmoid_mul") && strstr(err, "rejected") && strstr(err, "math"), "%s", err);
  /* both bundle files were read through the log */
  ck_assert_int_eq(json_array_size(c.reads), 2);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(c.reads, 1), "ref")),
                   "candidates/operators/sigmoid_mul.json");
  json_decref(rep);
  json_decref(e2e);
  json_decref(c.reads);
  json_decref(c.report);
  json_decref(b);
  json_decref(op);
  free(bp);
  free(opp);
  free(ops);
  drop_bundle_dirs(tmp, ckb, ck, cand);
}
END_TEST

/* The real candidate bundle (candidates/hybrid-deltanet): its seven
 * operators pass as operator units on the CPU plugin, and the true reading
 * with its DeltaNet layers agrees with llama.cpp end to end on the
 * probe-deltanet golden (only DeltaNet layers speak there). */
START_TEST(real_bundle_is_accepted) {
  char *tmp = tw_mkdtemp("evolve-bundle-ok");
  char *ckb = tw_path(tmp, "ckb"), *ck = src("ckb"), *cand = src("candidates/hybrid-deltanet");
  curated_ckb(ck, ckb);
  char bin[4096];
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts o = {.ckb = ckb, .run_dir = tmp, .candidates = cand, .exe_dir = bin, .platform = "cpu"};
  ev_ctx c = {.o = &o, .reads = json_array(), .report = json_object()};
  json_t *e2e = json_array();
  json_t *gold = load_src("tests/goldens/hybrid/evolve-probe-deltanet-seed7.json");
  json_array_append_new(e2e, json_pack("{s:s, s:o}", "path", "evolve-probe-deltanet-seed7.json", "golden", gold));
  /* the reading as the search hands it on, for this checkpoint's config */
  char *mdir = tw_path(tmp, "m");
  char e0[1024];
  ck_assert_msg(ev_remake_checkpoint(&o, gold, mdir, e0, sizeof e0) == 0, "%s", e0);
  char *mcp = tw_path(mdir, "config.json");
  json_t *mcfg = json_load_file(mcp, 0, NULL);
  ck_assert_ptr_nonnull(mcfg);
  json_t *found = reading(mcfg, TRUE_IDS, TRUE_READING);
  json_t *bundle = NULL, *rep = NULL;
  char err[2048] = "";
  ck_assert_msg(ev_bundle_verify(&c, found, e2e, &bundle, &rep, err, sizeof err) == 0, "%s", err);
  json_t *units = json_object_get(rep, "operator_units");
  ck_assert_int_eq(json_array_size(units), 7);
  size_t i;
  json_t *u;
  json_array_foreach(units, i, u) ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "PASS");
  json_t *row = json_array_get(json_object_get(rep, "end_to_end"), 0);
  ck_assert_double_lt(json_number_value(json_object_get(row, "error")), EV_TOL);
  ck_assert_int_eq(json_integer_value(json_object_get(row, "steps")), 8);
  ck_assert_int_eq(json_array_size(json_object_get(bundle, "operator_entries")), 7);
  ck_assert_int_eq(json_array_size(c.reads), 1 + 7 + 1); /* bundle.json, the operators, the layer */
  /* the same bundle under a wrong reading fails end to end:
   * probe-deltanet's full layer is muted, so only a DeltaNet-side change
   * could show here; the norms are shared, so norm=w does */
  json_decref(bundle);
  json_decref(rep);
  json_decref(found);
  const char *ids[9];
  memcpy(ids, TRUE_IDS, sizeof ids);
  ids[2] = "variant.norm_w";
  found = reading(mcfg, ids, "norm=w");
  ck_assert_int_eq(ev_bundle_verify(&c, found, e2e, &bundle, &rep, err, sizeof err), 1);
  ck_assert_msg(strstr(err, "end to end"), "%s", err);
  json_decref(rep);
  json_decref(found);
  json_decref(mcfg);
  free(mcp);
  free(mdir);
  json_decref(e2e);
  json_decref(c.reads);
  json_decref(c.report);
  drop_bundle_dirs(tmp, ckb, ck, cand);
}
END_TEST

/* Bad input: one line naming the path, a usage exit, no crash. */
START_TEST(bad_input_is_named) {
  char *tmp = tw_mkdtemp("evolve-bad");
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-gen' --evolve --refs '%s/nope' --ckb '%s/ckb' --run-dir '%s/run' 2>'%s/err'",
           getenv("MI_BUILD_DIR"), tmp, getenv("MI_SOURCE_DIR"), tmp, tmp);
  int st = system(cmd);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == EV_EX_USAGE);
  char *ep = tw_path(tmp, "err");
  size_t n;
  char *e = tw_read_all(ep, &n);
  ck_assert_msg(e && strstr(e, "--refs") && strstr(e, "/nope") && strchr(e, '\n') == e + n - 1, "%s", e ? e : "");
  free(e);
  /* a golden under --refs whose checkpoint cannot be remade: named */
  char *refs = tw_path(tmp, "refs");
  ck_assert_int_eq(mkdir(refs, 0755), 0);
  json_t *g = load_src("tests/goldens/hybrid/evolve-probe-attn-seed5.json");
  json_object_set_new(json_object_get(g, "model"), "safetensors_fnv1a32", json_string("00000000"));
  char *gp = tw_path(refs, "bad-probe.json");
  ck_assert_int_eq(json_dump_file(g, gp, 0), 0);
  json_t *r;
  int rc = run_evolve(tmp, refs, NULL, &r);
  ck_assert_int_eq(rc, EV_EX_USAGE);
  const char *why = json_string_value(json_object_get(r, "outcome"));
  ck_assert_msg(strstr(why, "bad-probe.json") && strstr(why, "other weights"), "%s", why);
  json_decref(r);
  json_decref(g);
  free(gp);
  free(refs);
  free(ep);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST


/* The workspace of an evolve run on the hybrid, under the folder *tmp: the
 * references of both probes (*refs), a curated copy (*ckb) of the source
 * CKB (*ck) that holds the true reading alone, the real candidate bundle
 * (*cand) and a tiny qwen35 checkpoint (*model). The caller frees them. */
static void hybrid_workspace(char **tmp, char **refs, char **ckb, char **ck, char **cand,
                             char **model) {
  const char *goldens[] = {"evolve-probe-attn-seed5.json", "evolve-probe-deltanet-seed7.json"};
  *tmp = make_refs(goldens, 2, refs);
  *ckb = tw_path(*tmp, "ckb"), *ck = src("ckb"), *cand = src("candidates/hybrid-deltanet");
  *model = tw_path(*tmp, "m");
  curated_ckb(*ck, *ckb);
  true_reading_only(*ckb);
  ck_assert_int_eq(
      mi_test_sh("'%s/bin/mi-mkmodel' --family qwen35 --shape tiny --seed 1 --out '%s' >/dev/null",
                 getenv("MI_BUILD_DIR"), *model),
      0);
}
/* The loop through mi-gen, phases 1-5: coverage names the gaps of a
 * hybrid checkpoint, the search finds the reading, the real bundle is
 * accepted, and the consolidated CKB validates and covers the checkpoint
 * (revalidation, a minute per shape, is the by-hand run of
 * docs/evolution.md). */
START_TEST(cli_phases_one_to_five) {
  /* one probe (the two-probe search is search_picks_true_variants_on_two_probes's) */
  char *tmp, *refs, *ckb, *ck, *cand, *model;
  hybrid_workspace(&tmp, &refs, &ckb, &ck, &cand, &model);
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-gen' --evolve --refs '%s' --candidates '%s' --ckb '%s' --model '%s' --run-dir '%s/run' "
           "--no-revalidate 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, cand, ckb, model, tmp, tmp);
  int st = system(cmd);
  ck_assert(WIFEXITED(st));
  char *rp = tw_path(tmp, "run/evolve.json");
  json_t *r = json_load_file(rp, 0, NULL);
  ck_assert_ptr_nonnull(r);
  ck_assert_msg(WEXITSTATUS(st) == EV_EX_OK, "exit %d: %s", WEXITSTATUS(st),
                json_string_value(json_object_get(r, "outcome")));
  const json_t *cov = json_object_get(r, "coverage");
  ck_assert(json_is_false(json_object_get(cov, "covered")));
  ck_assert_int_gt(json_array_size(json_object_get(cov, "missing")), 5);
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), TRUE_READING);
  ck_assert_int_eq(json_array_size(json_object_get(r, "variant_search")), 1); /* the vocabulary cut to it */
  ck_assert_int_eq(json_array_size(json_object_get(json_object_get(r, "bundle"), "operator_units")), 7);
  ck_assert_int_eq(json_array_size(json_object_get(r, "entries")), 10);
  /* 2 goldens under --refs, 9 bundle files: each read logged once (the
   * search reads the operator contracts, phase 4 again) */
  ck_assert_int_eq(json_array_size(json_object_get(r, "reads")), 2 + 9);
  const char *names[] = {"coverage", "exploration", "variant_search", "bundle", "consolidation", "revalidation"};
  for (int i = 0; i < 6; i++)
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(r, "phases"), (size_t)i), "phase")),
                     names[i]);
  /* the updated CKB validates and now covers the checkpoint */
  char err[1024];
  mi_ckb *k = mi_ckb_open(ckb, err, sizeof err);
  ck_assert_ptr_nonnull(k);
  ck_assert_int_eq(mi_ckb_validate(k, noop_diag, "evolved CKB: "), 0);
  json_t *c2 = NULL;
  ck_assert_int_eq(mi_ckb_coverage(k, model, "cpu", &c2, err, sizeof err), 0);
  json_decref(c2);
  const mi_ckb_entry *op = mi_ckb_find(k, "operator.gated_delta_rule");
  ck_assert_ptr_nonnull(op);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(op->json, "provenance"), "source")), "evolved");
  mi_ckb_close(k);
  json_decref(r);
  free(rp);
  free(model);
  drop_bundle_dirs(tmp, ckb, ck, cand);
  free(refs);
}
END_TEST

/* A hash of every file under dir (names and bytes), as text. */
static void tree_hash(const char *dir, char *out, size_t n) {
  char cmd[8192], f[4200];
  snprintf(f, sizeof f, "%s.hash", dir);
  snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum > '%s'",
           dir, f);
  ck_assert_int_eq(system(cmd), 0);
  FILE *h = fopen(f, "r");
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(fgets(out, (int)n, h));
  fclose(h);
  unlink(f);
}

/* Evolution is a transaction: a run killed in the middle of writing its
 * entries, and a run whose revalidation fails, leave the CKB byte for byte
 * as it was; a run that passes commits everything at once. */
static void evolve_leaves_ckb(const char *crash, const char *act, int want_exit) {
  char *tmp, *refs, *ckb, *ck, *cand, *model;
  hybrid_workspace(&tmp, &refs, &ckb, &ck, &cand, &model);
  char cmd[8192], before[200], after[200];
  if (act) { /* a model the CKB cannot be made to cover: its revalidation fails */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"hidden_act\": \"silu\"/\"hidden_act\": \"%s\"/' '%s/config.json' && "
             "grep -q '\"hidden_act\": \"%s\"' '%s/config.json'", act, model, act, model);
    ck_assert_int_eq(system(cmd), 0);
  }
  tree_hash(ckb, before, sizeof before);
  snprintf(cmd, sizeof cmd,
           "%s%s '%s/bin/mi-gen' --evolve --refs '%s' --candidates '%s' --ckb '%s' --model '%s' --run-dir '%s/run' "
           "%s 2>'%s/stderr'",
           crash ? "MI_CKB_TEST_CRASH=" : "", crash ? crash : "", getenv("MI_BUILD_DIR"), refs, cand, ckb, model, tmp,
           act ? "" : "--no-revalidate", tmp);
  int st = system(cmd);
  ck_assert(WIFEXITED(st));
  char *errp = tw_path(tmp, "stderr");
  size_t el;
  char *errs = tw_read_all(errp, &el);
  ck_assert_msg(WEXITSTATUS(st) == want_exit, "exit %d, want %d:\n%s", WEXITSTATUS(st), want_exit, errs ? errs : "");
  tree_hash(ckb, after, sizeof after);
  ck_assert_msg(!strcmp(before, after), "the CKB changed (%s -> %s):\n%s", before, after, errs ? errs : "");
  /* the field the result cannot explain is named, and nothing is written */
  if (act) ck_assert_msg(errs && strstr(errs, "nothing written") && strstr(errs, "hidden_act") && strstr(errs, act), "%s",
                         errs ? errs : "");
  /* a later run on the same CKB removes what a killed one left beside it
   * and commits (the staging copy of the dead run is gone) */
  if (crash) {
    snprintf(cmd, sizeof cmd,
             "'%s/bin/mi-gen' --evolve --refs '%s' --candidates '%s' --ckb '%s' --model '%s' --run-dir '%s/run2' "
             "--no-revalidate 2>'%s/stderr2' && ls -a '%s' | grep -c '^\\.ckb\\.txn-' | grep -qx 0",
             getenv("MI_BUILD_DIR"), refs, cand, ckb, model, tmp, tmp, tmp);
    ck_assert_int_eq(system(cmd), 0);
    tree_hash(ckb, after, sizeof after);
    ck_assert_msg(strcmp(before, after), "the passing run committed nothing");
    char err[1024];
    mi_ckb *k = mi_ckb_open(ckb, err, sizeof err);
    ck_assert_ptr_nonnull(k);
    ck_assert_ptr_nonnull(mi_ckb_find(k, "model.qwen35"));
    mi_ckb_close(k);
  }
  free(errs);
  free(errp);
  free(model);
  drop_bundle_dirs(tmp, ckb, ck, cand);
  free(refs);
}

START_TEST(killed_evolve_leaves_the_ckb_unchanged) { evolve_leaves_ckb("before_rename", NULL, 86); }
END_TEST
/* A Gemma-like activation no variant of the vocabulary explains: the loop
 * finds the attention reading, then refuses to write a contract that would
 * claim the checkpoint (exit EV_EX_UNEXPLAINED, the field named). */
START_TEST(unexplained_field_leaves_the_ckb_unchanged) {
  evolve_leaves_ckb(NULL, "gelu_pytorch_tanh", EV_EX_UNEXPLAINED);
}
END_TEST

/* The hybrid again, this time as its released checkpoints are stored
 * (mi-mkmodel --layout conditional: a Qwen3_5ForConditionalGeneration
 * wrapper, the text config under text_config, the weights under
 * model.language_model., a vision tower and a multi-token-prediction head
 * beside them): the same loop from the curated CKB finds the same reading,
 * the vocabulary's layout entry gives the new contract that layout (its
 * template from the checkpoint's own wrapper), and revalidation with
 * references off passes every stage, stage 4 against llama.cpp's golden of
 * this very checkpoint, the unread tensors named once per prefix. */
/* Every stage of the report's revalidation PASS (asserted); 1 when stage 4's
 * detail says s4 and stage 3's says both s3a and s3b (the skipped parts of
 * a wrapped checkpoint). */
static int revalidation_says(const json_t *r, const char *s4, const char *s3a, const char *s3b) {
  size_t i;
  json_t *stg;
  int seen4 = 0, seen3 = 0;
  json_array_foreach(json_object_get(json_object_get(r, "revalidation"), "stages"), i, stg) {
    const char *id = json_string_value(json_object_get(stg, "stage")), *d = json_string_value(json_object_get(stg, "detail"));
    ck_assert_msg(!strcmp(json_string_value(json_object_get(stg, "verdict")), "PASS"), "stage %s: %s", id, d);
    seen4 |= !strcmp(id, "4") && strstr(d, s4) != NULL;
    seen3 |= !strcmp(id, "3") && strstr(d, s3a) && strstr(d, s3b);
  }
  return seen4 && seen3;
}

/* The evolved CKB validates and covers the wrapped checkpoint: its weight
 * check skips two prefixes, `prefix` with n tensors under it. */
static void covers_wrapped(const char *ckb, const char *model, const char *prefix, json_int_t n) {
  char err[1024];
  mi_ckb *k = mi_ckb_open(ckb, err, sizeof err);
  ck_assert_msg(k, "%s", err);
  ck_assert_int_eq(mi_ckb_validate(k, noop_diag, "evolved CKB: "), 0);
  json_t *wr = NULL;
  ck_assert_int_eq(mi_ckb_check_weights(k, model, &wr, err, sizeof err), 0);
  ck_assert_int_eq(json_object_size(json_object_get(wr, "skipped")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(wr, "skipped"), prefix), "tensors")), n);
  json_decref(wr);
  mi_ckb_close(k);
}

START_TEST(wrapped_layout_absorbed_and_revalidated) {
  char *tmp, *refs, *ckb, *ck, *cand, *model;
  hybrid_workspace(&tmp, &refs, &ckb, &ck, &cand, &model);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && '%s/bin/mi-mkmodel' --family qwen35 --shape tiny --seed 1 --layout conditional "
           "--out '%s' >/dev/null", model, getenv("MI_BUILD_DIR"), model);
  ck_assert_int_eq(system(cmd), 0);
  char *goldens = src("tests/goldens/hybrid");
  if (getenv("MI_TEST_QUICK")) { /* the sanitizer run: the revalidation's stage 4 on fewer steps */
    free(goldens);
    goldens = tw_path(tmp, "goldens-short");
    short_golden("tests/goldens/hybrid/tiny-conditional-seed1.json", goldens);
  }
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-gen' --evolve --refs '%s' --candidates '%s' --ckb '%s' --model '%s' --run-dir '%s/run' "
           "--goldens '%s' 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, cand, ckb, model, tmp, goldens, tmp);
  int st = system(cmd);
  char *rp = tw_path(tmp, "run/evolve.json");
  json_t *r = json_load_file(rp, 0, NULL);
  ck_assert_ptr_nonnull(r);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EV_EX_OK, "exit %d: %s", WEXITSTATUS(st),
                json_string_value(json_object_get(r, "outcome")) ?: "?");
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), TRUE_READING);
  /* every stage of the revalidation passed, stage 4 on the oracle's golden */
  ck_assert_msg(revalidation_says(r, "identical to llama.cpp", "skipped 4 tensors under model.visual.",
                                  "skipped 4 tensors under mtp."),
                "stage 4 against the golden and stage 3's skipped prefixes");
  /* the contract: the causal architecture, the wrapper as a layout */
  char *mp = tw_path(ckb, "models/qwen35.json");
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(m, "architectures"), 0)), "Qwen3_5ForCausalLM");
  const json_t *lay = json_object_get(json_object_get(m, "layouts"), "conditional");
  ck_assert_ptr_nonnull(lay);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(lay, "config"), "architectures"), 0)),
                   "Qwen3_5ForConditionalGeneration");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(lay, "config"), "text_config")), "$config");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(lay, "rename"), "model.")), "model.language_model.");
  ck_assert_ptr_nonnull(json_object_get(json_object_get(lay, "unused"), "mtp."));
  /* the evolved CKB covers the wrapped checkpoint; its weights check names the skipped prefixes */
  covers_wrapped(ckb, model, "model.visual.", 4);
  /* how llama.cpp's qwen35 files store the text model (value heads tiled,
   * A_log as -exp(A_log), the conv squeezed, norms as 1 + w): the section
   * the config class declares is the one ckb/ ships (test_gen_gguf runs
   * such a file through it; this engine was made for the wrapper's
   * architecture, which a file's config does not name) */
  gguf_section_as_shipped(m, "models/qwen35.json", "qwen35");
  json_decref(m);
  json_decref(r);
  free(mp), free(rp), free(goldens), free(model);
  drop_bundle_dirs(tmp, ckb, ck, cand);
  free(refs);
}
END_TEST

/* A wrapper holding what the vocabulary's layout does not account for (an
 * audio tower's config and weights-free key): the loop names the field and
 * writes nothing. */
START_TEST(wrapper_with_an_unknown_part_leaves_the_ckb_unchanged) {
  char *tmp, *refs, *ckb, *ck, *cand, *model;
  hybrid_workspace(&tmp, &refs, &ckb, &ck, &cand, &model);
  char cmd[8192], before[200], after[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && '%s/bin/mi-mkmodel' --family qwen35 --shape tiny --seed 1 --layout conditional "
           "--out '%s' >/dev/null && sed -i 's/\"image_token_id\"/\"audio_config\": {\"layers\": 2},\\n  \"image_token_id\"/' "
           "'%s/config.json' && grep -q audio_config '%s/config.json'", model, getenv("MI_BUILD_DIR"), model, model, model);
  ck_assert_int_eq(system(cmd), 0);
  tree_hash(ckb, before, sizeof before);
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-gen' --evolve --refs '%s' --candidates '%s' --ckb '%s' --model '%s' --run-dir '%s/run' "
           "--no-revalidate 2>'%s/stderr'", getenv("MI_BUILD_DIR"), refs, cand, ckb, model, tmp, tmp);
  int st = system(cmd);
  char *errp = tw_path(tmp, "stderr");
  size_t el;
  char *errs = tw_read_all(errp, &el);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EV_EX_UNEXPLAINED, "exit %d:\n%s", WEXITSTATUS(st), errs ?: "");
  ck_assert_msg(errs && strstr(errs, "nothing written") && strstr(errs, "audio_config"), "%s", errs ?: "");
  tree_hash(ckb, after, sizeof after);
  ck_assert_str_eq(before, after);
  free(errs), free(errp), free(model);
  drop_bundle_dirs(tmp, ckb, ck, cand);
  free(refs);
}
END_TEST

/* ev_explain names every config field and weight a contract leaves
 * unexplained: a field config.json gains, a weight the contract drops. */
START_TEST(explain_names_fields_and_weights) {
  char *tmp = tw_mkdtemp("evolve-explain"), *dir = tw_path(tmp, "m");
  char bin[4096], err[1024];
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts o = {.exe_dir = bin};
  json_t *g = load_src("tests/goldens/hybrid/evolve-probe-attn-seed5.json");
  ck_assert_msg(ev_remake_checkpoint(&o, g, dir, err, sizeof err) == 0, "%s", err);
  json_t *cfg = mi_test_json_at(dir, "config.json");
  mi_weights *w = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(w, "%s", err);
  json_t *f = reading(cfg, TRUE_IDS, TRUE_READING);
  json_t *m = json_object_get(f, "contract"), *un = json_array(), *def = json_array();
  /* the true reading explains everything but the DeltaNet layer's part */
  ck_assert_int_eq(ev_explain(m, cfg, w, un, def), 0);
  ck_assert_int_gt(json_array_size(def), 9);
  /* a field no entry binds, and the contract without its q_norm weight */
  json_object_set_new(cfg, "logit_softcap", json_real(30.0));
  json_t *ws = json_object_get(m, "weights");
  for (size_t i = json_array_size(ws); i-- > 0;)
    if (strstr(json_string_value(json_object_get(json_array_get(ws, i), "key")), "q_norm")) json_array_remove(ws, i);
  json_array_clear(def);
  ck_assert_int_gt(ev_explain(m, cfg, w, un, def), 0);
  char *s = json_dumps(un, JSON_COMPACT);
  ck_assert_msg(strstr(s, "'model.layers.1.self_attn.q_norm.weight'") && strstr(s, "'model.layers.2.self_attn.q_norm.weight'"),
                "%s", s);
  free(s);
  /* with no layer kind left to a bundle, the field is unexplained too */
  json_array_clear(un);
  ck_assert_int_gt(ev_explain(m, cfg, w, un, NULL), 0);
  s = json_dumps(un, JSON_COMPACT);
  ck_assert_msg(strstr(s, "logit_softcap") && strstr(s, "linear_attn.out_proj.weight"), "%s", s);
  free(s);
  json_decref(un);
  json_decref(def);
  json_decref(f);
  mi_weights_close(w);
  json_decref(cfg);
  json_decref(g);
  free(dir);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST

/* A family the curated CKB has never seen, in its own layout: a Qwen2
 * checkpoint (q/k/v biases, no q/k norm, a config.json with Qwen2's keys:
 * no head_dim; mi-mkmodel --variants and --drop-config, so no contract for
 * it exists) and llama.cpp's qwen2 answers on it
 * (tests/goldens/families/qwen2-probe-tiny-seed3.json, goldens.mjs --role
 * probe). The search reaches it through the vocabulary alone: the bias
 * reading needs operator.bias_add, which no platform offers and the CKB
 * states as an expression (its float64 reference is the expression's), and
 * the consolidator writes model.qwen2 with no C written for the family. */
/* The checkpoint model as hf2gguf.mjs writes it (llama.cpp's names and
 * storage) runs on the revalidated engine (run/revalidation/engine),
 * config, tokenizer and weights read from the file through ckb's contract,
 * with the same tokens and top-5 logprobs, byte for byte, as the folder
 * (which stage 4 held to llama.cpp). */
static void gguf_runs_as_the_folder(const char *ckb, const char *run, const char *model, const char *tmp) {
  char cmd[8400], *src_dir = src(".");
  snprintf(cmd, sizeof cmd, "node '%s/tools/peer/hf2gguf.mjs' '%s' '%s/m.gguf' --type bf16 >/dev/null", src_dir, model,
           tmp);
  ck_assert_int_eq(system(cmd), 0);
  free(src_dir);
  for (int k = 0; k < 2; k++) {
    snprintf(cmd, sizeof cmd,
             "MI_CKB_DIR='%s' '%s/bin/mi-run' --plugin-dir '%s/revalidation/engine' -m '%s%s' -p 'Hello, world! 你好' "
             "-n 8 --temp 0 --json --top-logprobs 5 >'%s/out%d.json' 2>'%s/err%d.txt'",
             ckb, getenv("MI_BUILD_DIR"), run, k ? tmp : model, k ? "/m.gguf" : "", tmp, k, tmp, k);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
  }
  char *o0 = tw_path(tmp, "out0.json"), *o1 = tw_path(tmp, "out1.json");
  size_t l0, l1;
  char *t0 = tw_read_all(o0, &l0), *t1 = tw_read_all(o1, &l1);
  ck_assert_msg(t0 && t1 && l0 > 100 && l0 == l1 && !memcmp(t0, t1, l0), "folder and GGUF differ:\n%s\n%s", t0 ?: "",
                t1 ?: "");
  free(t0), free(t1), free(o0), free(o1);
}

/* The consolidated contract m's gguf section is the one ckb/ ships for the
 * family (rel, "models/gemma2.json"): the shipped file is what the
 * vocabulary gives, not a hand edit. */
static void gguf_section_as_shipped(const json_t *m, const char *rel, const char *arch) {
  char path[300];
  snprintf(path, sizeof path, "ckb/%s", rel);
  json_t *shipped = load_src(path);
  const json_t *a = json_object_get(m, "gguf"), *b = json_object_get(shipped, "gguf");
  ck_assert_str_eq(json_string_value(json_object_get(a, "architecture")) ?: "", arch);
  char *da = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT), *db = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
  ck_assert_msg(da && db && json_equal(a, b), "%s's gguf section differs from the consolidated one:\n%s\n%s", path,
                db ?: "", da ?: "");
  free(da), free(db);
  json_decref(shipped);
}

START_TEST(qwen2_layout_found_through_a_generated_operator) {
  char *tmp = tw_mkdtemp("evolve");
  char *refs = tw_path(tmp, "refs"), *ckb = tw_path(tmp, "ckb"), *run = tw_path(tmp, "run"), *ck = src("ckb");
  ck_assert_int_eq(mkdir(refs, 0755), 0);
  char *g = src("tests/goldens/families/qwen2-probe-tiny-seed3.json");
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", g, refs);
  ck_assert_int_eq(system(cmd), 0);
  curated_ckb(ck, ckb);
  /* the checkpoint the golden was made on (its mkmodel_args), for phase 5
   * and the revalidation: mi-gen from the consolidated CKB, references off,
   * stage 4 against the same llama.cpp golden */
  char *model = tw_path(tmp, "model"), *gold = src("tests/goldens/families"), err[1024];
  json_t *golden = load_src("tests/goldens/families/qwen2-probe-tiny-seed3.json");
  char bin[4096];
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts eo = {.exe_dir = bin};
  ck_assert_msg(ev_remake_checkpoint(&eo, golden, model, err, sizeof err) == 0, "%s", err);
  json_decref(golden);
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-gen' --evolve --refs '%s' --ckb '%s' --model '%s' --goldens '%s' --run-dir '%s' 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, ckb, model, gold, run, tmp);
  int st = system(cmd);
  ck_assert(WIFEXITED(st));
  char *rp = tw_path(run, "evolve.json");
  json_t *r = json_load_file(rp, 0, NULL);
  ck_assert_ptr_nonnull(r);
  ck_assert_msg(WEXITSTATUS(st) == EV_EX_OK, "exit %d: %s", WEXITSTATUS(st),
                json_string_value(json_object_get(r, "outcome")) ?: "?");
  const char *truth = "bias=qkv head_dim=derived norm=w qk=none";
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), truth);
  ck_assert_str_eq(json_string_value(json_object_get(r, "base")), "model.qwen3");
  /* Qwen2's config.json has no head_dim: read as Qwen3's field (default
   * 128) the projections' shapes are not the contract's; without biases
   * they are read by no step; the two norms left are scored, the true one
   * within the oracle's tolerance, the other far off */
  json_t *table = json_object_get(r, "variant_search");
  ck_assert_int_eq(json_array_size(table), 8);
  size_t i;
  json_t *row;
  int scored = 0;
  json_array_foreach(table, i, row) {
    const char *cand = json_string_value(json_object_get(row, "candidate"));
    const char *v = json_string_value(json_object_get(row, "verdict"));
    if (strstr(cand, "bias=none") || strstr(cand, "head_dim=field")) {
      ck_assert_str_eq(v, "unexplained");
      char *u = json_dumps(json_object_get(row, "unexplained"), JSON_COMPACT);
      ck_assert_msg(strstr(u, strstr(cand, "head_dim=field") ? "self_attn.q_proj.weight" : "self_attn.q_proj.bias"),
                    "%s: %s", cand, u);
      free(u);
      continue;
    }
    scored++;
    double e = json_number_value(json_object_get(row, "error"));
    if (!strcmp(cand, truth))
      ck_assert_msg(e < EV_TOL && !strcmp(v, "pass"), "%s: %g %s", cand, e, v);
    else
      ck_assert_msg(e > 10 * EV_TOL && !strcmp(v, "fail"), "%s: %g %s", cand, e, v);
  }
  ck_assert_int_eq(scored, 2);
  /* the consolidated contract: the family's own name, the bias steps on
   * the generated operator, no q/k norm; the CKB still validates */
  char *mp = tw_path(ckb, "models/qwen2.json");
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(m, "architectures"), 0)), "Qwen2ForCausalLM");
  const json_t *seq = json_object_get(m, "layer_sequence");
  const char *want[] = {"q_bias", "k_bias", "v_bias"};
  for (int k = 0; k < 3; k++) {
    const json_t *stp = mi_ckb_named(seq, "step", want[k]);
    ck_assert_msg(stp, "no step %s", want[k]);
    ck_assert_str_eq(json_string_value(json_object_get(stp, "operator")), "operator.bias_add");
  }
  ck_assert_ptr_null(mi_ckb_named(seq, "step", "q_norm"));
  /* head_dim derived where config.json lacks it, as Qwen2's own config class does */
  const json_t *hd = mi_ckb_named(json_object_get(m, "config"), "name", "head_dim");
  ck_assert_str_eq(json_string_value(json_object_get(hd, "default_expr")), "hidden_size / num_attention_heads");
  mi_ckb *c = mi_ckb_open(ckb, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  ck_assert_int_eq(mi_ckb_validate(c, NULL, NULL), 0);
  mi_ckb_close(c);
  /* revalidated: every stage passed with references off, the engine calling
   * the generated pack (stage 1 held it to float64, stage 4 to llama.cpp) */
  const json_t *rv = json_object_get(r, "revalidation");
  ck_assert_int_eq(json_integer_value(json_object_get(rv, "mi_gen_exit")), 0);
  char *rvs = json_dumps(json_object_get(rv, "stages"), JSON_COMPACT);
  ck_assert_msg(rvs && strstr(rvs, "identical to llama.cpp") && !strstr(rvs, "FAIL"), "%s", rvs ? rvs : "?");
  free(rvs);
  char *conf = tw_path(run, "revalidation/engine/plugins.conf");
  size_t clen;
  char *ctext = tw_read_all(conf, &clen);
  ck_assert_msg(ctext && strstr(ctext, "kernels  pack-qwen2 ./libmi-pack-qwen2.so required"), "%s", ctext ? ctext : conf);
  free(ctext);
  free(conf);
  /* the family's GGUF names (variant.config_class_qwen2 declares llama.cpp's
   * architecture, variant.bias_qkv the biases' names): the checkpoint as
   * hf2gguf.mjs writes it runs on the revalidated engine, config, tokenizer
   * and weights read from the file, with the same tokens and logprobs as
   * the folder (which stage 4 held to llama.cpp) */
  const json_t *gs = json_object_get(m, "gguf");
  ck_assert_str_eq(json_string_value(json_object_get(gs, "architecture")) ?: "", "qwen2");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(gs, "tensors"), "blk.{i}.attn_q.bias")) ?: "",
                   "model.layers.{i}.self_attn.q_proj.bias");
  ck_assert_ptr_null(json_object_get(json_object_get(gs, "tensors"), "blk.{i}.attn_q_norm.weight"));
  gguf_runs_as_the_folder(ckb, run, model, tmp);
  free(model);
  free(gold);
  json_decref(m);
  json_decref(r);
  free(mp);
  free(rp);
  free(g);
  tw_rmtree(tmp);
  free(tmp);
  free(refs);
  free(ckb);
  free(run);
  free(ck);
}
END_TEST

/* Llama and Mistral in their layouts (Llama 3.0's and Mistral v0.3's
 * config.json keys: no head_dim, Llama's pretraining_tp and mlp_bias,
 * Mistral's sliding_window null), each from its llama.cpp golden, through
 * the search and the consolidator from mi-ckb curated (the revalidation,
 * mi-gen on the consolidated contract, is the Qwen2 test's; docs/evolution.md
 * has these two revalidated too). Returns the consolidated contract. */
/* How absorb_family_in starts: from mi-ckb curated, or from the shipped CKB
 * less the family's own entries (knowledge an earlier absorption brought,
 * such as the hybrid's operator.copy2d, stays). */
enum { FROM_CURATED, FROM_SHIPPED };

/* golden2 (or NULL): a second probe in the references; extra_pass: passing
 * rows besides the found reading's own, one per probe (a probe that leaves a
 * field at its identity passes two readings, which another probe tells
 * apart) */
static json_t *absorb_family_in(int from, const char *golden, const char *golden2, const char *truth,
                                const char *model_file, const char *arch, int extra_pass) {
  char *tmp = tw_mkdtemp("evolve");
  char *refs = tw_path(tmp, "refs"), *ckb = tw_path(tmp, "ckb"), *run = tw_path(tmp, "run"), *ck = src("ckb");
  ck_assert_int_eq(mkdir(refs, 0755), 0);
  char rel[256], cmd[8400];
  for (int k = 0; k < 2; k++) {
    if (k && !golden2) break;
    snprintf(rel, sizeof rel, "tests/goldens/families/%s", k ? golden2 : golden);
    char *g = src(rel);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", g, refs);
    ck_assert_int_eq(system(cmd), 0);
    free(g);
  }
  if (from == FROM_CURATED) curated_ckb(ck, ckb);
  else {
    /* models/NAME.json: the family's contract and experience entry left out */
    char fam[128];
    snprintf(fam, sizeof fam, "%s", strrchr(model_file, '/') + 1);
    *strrchr(fam, '.') = 0;
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && rm -f '%s/%s' '%s/experience/evolved_%s_variants.json'", ck, ckb, ckb,
             model_file, ckb, fam);
    ck_assert_int_eq(system(cmd), 0);
  }
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-gen' --evolve --refs '%s' --ckb '%s' --run-dir '%s' --no-revalidate 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, ckb, run, tmp);
  int st = system(cmd);
  char *rp = tw_path(run, "evolve.json");
  json_t *r = json_load_file(rp, 0, NULL);
  ck_assert_ptr_nonnull(r);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EV_EX_OK, "%s: exit %d: %s", golden, WEXITSTATUS(st),
                json_string_value(json_object_get(r, "outcome")) ?: "?");
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), truth);
  /* the true reading within the oracle's tolerance, every other scored one far off */
  size_t i;
  json_t *row;
  int pass = 0, pass_truth = 0;
  json_array_foreach(json_object_get(r, "variant_search"), i, row) {
    const char *v = json_string_value(json_object_get(row, "verdict"));
    double e = json_number_value(json_object_get(row, "error"));
    /* the row's own tolerance where an operator widens the oracle's (a GELU llama.cpp
     * computes through an f16 table) */
    const json_t *rt = json_object_get(row, "tolerance");
    const double tol = json_is_number(rt) && json_number_value(rt) > EV_TOL ? json_number_value(rt) : EV_TOL;
    if (!strcmp(v, "pass")) pass++, ck_assert_msg(e < tol, "%g (tolerance %g)", e, tol);
    else if (!strcmp(v, "fail")) ck_assert_msg(e > 10 * tol, "%s: %g", json_string_value(json_object_get(row, "candidate")), e);
    if (!strcmp(v, "pass") && !strcmp(json_string_value(json_object_get(row, "candidate")) ?: "", truth)) pass_truth++;
  }
  ck_assert_int_eq(pass_truth, golden2 ? 2 : 1); /* the same reading on every probe */
  ck_assert_int_eq(pass, pass_truth + extra_pass);
  char *mp = tw_path(ckb, model_file);
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_msg(m, "%s", mp);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(m, "architectures"), 0)), arch);
  if (strstr(truth, "qk=none")) ck_assert_ptr_null(mi_ckb_named(json_object_get(m, "layer_sequence"), "step", "q_norm"));
  char err[1024];
  mi_ckb *c = mi_ckb_open(ckb, err, sizeof err);
  ck_assert_msg(c, "%s", err);
  ck_assert_int_eq(mi_ckb_validate(c, NULL, NULL), 0);
  mi_ckb_close(c);
  json_decref(r);
  free(mp), free(rp), free(refs), free(ckb), free(run), free(ck);
  tw_rmtree(tmp);
  free(tmp);
  return m;
}

static json_t *absorb_family(const char *golden, const char *golden2, const char *truth, const char *model_file,
                             const char *arch) {
  return absorb_family_in(FROM_CURATED, golden, golden2, truth, model_file, arch, 0);
}

START_TEST(llama_layout_absorbed) {
  json_t *m = absorb_family("llama-probe-tiny-seed4.json", NULL, "head_dim=derived llama_fields=present norm=w qk=none",
                            "models/llama.json", "LlamaForCausalLM");
  /* pretraining_tp is inert; mlp_bias is read, false the only value computed */
  ck_assert_ptr_nonnull(mi_ckb_named(json_object_get(m, "config_inert"), "name", "pretraining_tp"));
  const json_t *mb = mi_ckb_named(json_object_get(m, "config"), "name", "mlp_bias");
  ck_assert_ptr_nonnull(mb);
  ck_assert(json_is_false(json_array_get(json_object_get(mb, "values"), 0)));
  json_decref(m);
}
END_TEST

/* ev_explain leaves cfg unexplained, its lines (into un) saying `want`. */
static void explain_names(const json_t *m, const json_t *cfg, const mi_weights *w, json_t *un, const char *want) {
  ck_assert_int_gt(ev_explain(m, cfg, w, un, NULL), 0);
  char *s = json_dumps(un, JSON_COMPACT);
  ck_assert_msg(s && strstr(s, want), "%s", s ? s : "?");
  free(s);
}

/* A golden's probe checkpoint remade in a scratch folder, with its
 * config, its weights and the shipped CKB open: what the checks of a
 * contract against the oracle's golden read. */
typedef struct probe_fix {
  char *tmp, *dir, *ck;
  json_t *g, *cfg;
  mi_weights *w;
  mi_ckb *k;
} probe_fix;

static void probe_open(probe_fix *p, const char *golden) {
  char bin[4096], err[1024];
  p->tmp = tw_mkdtemp("evolve-probe"), p->dir = tw_path(p->tmp, "m"), p->ck = src("ckb");
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts o = {.exe_dir = bin};
  p->g = load_src(golden);
  ck_assert_msg(ev_remake_checkpoint(&o, p->g, p->dir, err, sizeof err) == 0, "%s", err);
  p->cfg = mi_test_json_at(p->dir, "config.json");
  p->w = mi_weights_open(p->dir, err, sizeof err);
  ck_assert_msg(p->w, "%s", err);
  p->k = mi_ckb_open(p->ck, err, sizeof err);
  ck_assert_msg(p->k, "%s", err);
}

/* Contract m on config cfg against the golden: max |top-10 logprob - llama.cpp's|. */
static double probe_error(const probe_fix *p, const json_t *m, const json_t *cfg) {
  char err[1024];
  double e = 0;
  int steps = 0;
  ck_assert_msg(ev_oracle_error(p->k, m, cfg, p->w, p->g, &e, &steps, err, sizeof err) == 0, "%s", err);
  ck_assert_int_gt(steps, 0);
  return e;
}

static void probe_close(probe_fix *p) {
  mi_ckb_close(p->k);
  mi_weights_close(p->w);
  json_decref(p->cfg), json_decref(p->g);
  tw_rmtree(p->tmp);
  free(p->tmp), free(p->dir), free(p->ck);
}

/* Llama 3.1's rope scaling (rope_type llama3): a rotation whose pair
 * frequencies the CKB states as an expression (operator.rope_llama3, the
 * rotary form, generated into a pack). The probe's original context is 64
 * so all three bands bite within the prompts; llama.cpp applies it through
 * the rope_freqs tensor hf2gguf.mjs writes. The unscaled reading cannot
 * explain rope_scaling; computed anyway it is 9.7 off this oracle. */
/* A contract absorbed from a probe with rope scaling, on the unscaled
 * golden's checkpoint (rope_scaling absent or null): every field explained
 * (the members at their identity defaults), within EV_TOL of llama.cpp in
 * float64; then with `scaling` (a set rope_scaling lacking its factor) the
 * factor is named as absent, never defaulted. Takes scaling. */
static void holds_unscaled_checkpoint(const json_t *m, const char *golden, json_t *scaling) {
  probe_fix p;
  probe_open(&p, golden);
  json_t *un = json_array();
  ck_assert(!json_object_get(p.cfg, "rope_scaling") || json_is_null(json_object_get(p.cfg, "rope_scaling")));
  ck_assert_int_eq(ev_explain(m, p.cfg, p.w, un, NULL), 0);
  const double e = probe_error(&p, m, p.cfg);
  ck_assert_msg(e < EV_TOL, "%s under the scaled contract: %g", golden, e);
  json_object_set_new(p.cfg, "rope_scaling", scaling);
  explain_names(m, p.cfg, p.w, un, "'rope_scaling.factor' is absent");
  json_decref(un);
  probe_close(&p);
}

/* Config classes (docs/evolution.md): a field config.json leaves out means
 * its transformers class's default, not the curated base's. A Llama 1/2-era
 * config (tests/goldens/families/llama2-probe-tiny-seed13.json: no
 * rope_theta, rms_norm_eps, max_position_embeddings, head_dim; llama.cpp's
 * golden, hf2gguf giving the file LlamaConfig's 10000): the shipped
 * model.llama explains it and, interpreted in float64, is within EV_TOL of
 * llama.cpp; with Qwen3's released 1e6 as its default (the contract before
 * the class entry) it is far off. A Mistral config without sliding_window
 * (MistralConfig: 4096) is explained, its window read as the class's 4096. */
START_TEST(config_class_defaults_hold_against_the_oracle) {
  char *tmp = tw_mkdtemp("evolve-class"), *dir = tw_path(tmp, "m"), bin[4096], err[1024], *ck = src("ckb");
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts o = {.exe_dir = bin};
  json_t *g = load_src("tests/goldens/families/llama2-probe-tiny-seed13.json");
  ck_assert_msg(ev_remake_checkpoint(&o, g, dir, err, sizeof err) == 0, "%s", err);
  if (getenv("MI_TEST_QUICK")) { /* the sanitizer run: the first 2 cases of 4 steps (the float64 model is the cost) */
    json_t *cases = json_object_get(g, "cases");
    while (json_array_size(cases) > 2) json_array_remove(cases, json_array_size(cases) - 1);
    for (size_t q = 0; q < json_array_size(cases); q++) {
      json_t *steps = json_object_get(json_array_get(cases, q), "steps");
      while (json_array_size(steps) > 4) json_array_remove(steps, json_array_size(steps) - 1);
    }
    fprintf(stderr, "test_evolve: MI_TEST_QUICK: the config-class defaults on the golden's first 2 cases of 4 steps\n");
  }
  json_t *cfg = mi_test_json_at(dir, "config.json"), *un = json_array();
  ck_assert_ptr_null(json_object_get(cfg, "rope_theta"));
  mi_weights *w = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(w, "%s", err);
  mi_ckb *k = mi_ckb_open(ck, err, sizeof err);
  ck_assert_msg(k, "%s", err);
  json_t *m = json_deep_copy(mi_ckb_find(k, "model.llama")->json);
  ck_assert_int_eq(ev_explain(m, cfg, w, un, NULL), 0);
  double e = 1, e_base = 0;
  int steps = 0;
  ck_assert_msg(ev_oracle_error(k, m, cfg, w, g, &e, &steps, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(e < EV_TOL && steps > 0, "model.llama on a config without rope_theta: %g over %d steps", e, steps);
  json_object_set_new((json_t *)mi_ckb_named(json_object_get(m, "config"), "name", "rope_theta"), "default",
                      json_real(1e6));
  ck_assert_msg(ev_oracle_error(k, m, cfg, w, g, &e_base, &steps, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(e_base > 10 * EV_TOL, "rope_theta 1e6 where the config leaves it out: %g", e_base);
  fprintf(stderr, "test_evolve: a config without rope_theta: %.3g under LlamaConfig's default, %.3g under 1e6\n", e,
          e_base);
  json_decref(m), json_decref(g), json_decref(cfg);
  mi_weights_close(w);
  tw_rmtree(dir);
  /* Mistral without the key: the class's window, refused by name */
  g = load_src("tests/goldens/families/mistral-probe-tiny-seed5.json");
  ck_assert_msg(ev_remake_checkpoint(&o, g, dir, err, sizeof err) == 0, "%s", err);
  cfg = mi_test_json_at(dir, "config.json");
  w = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(w, "%s", err);
  m = mi_ckb_find(k, "model.mistral")->json;
  json_array_clear(un);
  ck_assert_int_eq(ev_explain(m, cfg, w, un, NULL), 0); /* sliding_window null: explained */
  json_object_set_new(cfg, "max_position_embeddings", json_integer(32768));
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "sliding_window", 14)), 32768); /* null: none */
  json_object_del(cfg, "sliding_window");
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "sliding_window", 14)), 4096); /* the class's */
  mi_ckb_close(k);
  mi_weights_close(w);
  json_decref(un), json_decref(cfg), json_decref(g);
  tw_rmtree(tmp);
  free(tmp), free(dir), free(ck);
}
END_TEST

START_TEST(llama31_rope_scaling_absorbed) {
  json_t *m = absorb_family("llama31-probe-tiny-seed6.json", NULL, "head_dim=derived llama_fields=present norm=w qk=none rope_scaling=llama3", "models/llama.json",
                            "LlamaForCausalLM");
  const json_t *seq = json_object_get(m, "layer_sequence");
  ck_assert_str_eq(json_string_value(json_object_get(mi_ckb_named(seq, "step", "q_rope"), "operator")),
                   "operator.rope_llama3");
  ck_assert_str_eq(json_string_value(json_object_get(mi_ckb_named(seq, "step", "k_rope"), "operator")),
                   "operator.rope_llama3");
  /* rope_scaling bound member by member: llama3 the only type computed */
  const json_t *cf = json_object_get(m, "config");
  ck_assert_ptr_null(mi_ckb_named(cf, "name", "rope_scaling"));
  const json_t *rt = mi_ckb_named(cf, "name", "rope_type");
  ck_assert_str_eq(json_string_value(json_object_get(rt, "path")), "rope_scaling.rope_type");
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(rt, "values"), 0)), "llama3");
  ck_assert_str_eq(json_string_value(json_object_get(mi_ckb_named(cf, "name", "factor"), "path")), "rope_scaling.factor");
  /* one contract for the architecture: a Llama 3.0 checkpoint (rope_scaling
   * null) reads every member at its default, factor 1, plain RoPE; the
   * contract explains it and matches llama.cpp's golden of it; a
   * rope_scaling that is set must give every member: none defaults then */
  holds_unscaled_checkpoint(m, "tests/goldens/families/llama-probe-tiny-seed4.json",
                            json_pack("{s:s, s:f, s:f, s:i}", "rope_type", "llama3", "low_freq_factor", 1.0,
                                      "high_freq_factor", 4.0, "original_max_position_embeddings", 64));
  json_decref(m);
}
END_TEST

/* Qwen2.5 with YaRN (tests/goldens/families/qwen2-probe-tiny-yarn-seed11.json:
 * rope_scaling {"type": "yarn", "factor": 4, "original_max_position_embeddings":
 * 64}, the older key Qwen2.5's documentation gives; llama.cpp's qwen2 the
 * oracle, reading the rope.scaling.* keys): the frequencies and the
 * attention factor the CKB states as expressions (operator.rope_yarn, a
 * rotary form with an amplitude; floor and ceil for the correction range)
 * reach it with no C written for it. The unscaled probe sorts first: the
 * candidates are every probe's evidence, so YaRN is one whichever probe
 * shows it, and the one reading passes on both. One contract for both: a Qwen2
 * checkpoint without rope_scaling reads factor 1 (plain RoPE) and matches
 * llama.cpp's golden of it; a set rope_scaling must give its factor. */
START_TEST(qwen25_yarn_absorbed) {
  json_t *m = absorb_family("qwen2-probe-tiny-seed3.json", "qwen2-probe-tiny-yarn-seed11.json",
                            "bias=qkv head_dim=derived norm=w qk=none rope_scaling=yarn",
                            "models/qwen2.json", "Qwen2ForCausalLM");
  const json_t *seq = json_object_get(m, "layer_sequence");
  for (int q = 0; q < 2; q++) {
    const json_t *st = mi_ckb_named(seq, "step", q ? "k_rope" : "q_rope");
    ck_assert_str_eq(json_string_value(json_object_get(st, "operator")), "operator.rope_yarn");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(st, "args"), "original_max_position_embeddings")),
                     "config:original_max_position_embeddings");
  }
  const json_t *cf = json_object_get(m, "config");
  ck_assert_ptr_null(mi_ckb_named(cf, "name", "rope_scaling"));
  ck_assert_str_eq(json_string_value(json_object_get(mi_ckb_named(cf, "name", "type"), "path")), "rope_scaling.type");
  ck_assert_ptr_null(mi_ckb_named(cf, "name", "rope_type")); /* if_present: the probe spells it "type" */
  ck_assert_double_eq(json_number_value(json_object_get(mi_ckb_named(cf, "name", "beta_fast"), "default")), 32);
  holds_unscaled_checkpoint(m, "tests/goldens/families/qwen2-probe-tiny-seed3.json",
                            json_pack("{s:s, s:i}", "type", "yarn", "original_max_position_embeddings", 64));
  json_decref(m);
}
END_TEST

/* Mistral from two probes: sliding_window null (v0.2 on) and 2048 under a
 * 4096 context (v0.1's 4096 under 32768, scaled; llama.cpp's llama has no
 * window, and the probes' runs never reach 2048 positions, so it is the
 * oracle for both). On the null probe window=by_field and window=every_layer
 * both pass (one extra passing row); only every_layer explains the set
 * window, so it is found, and one contract computes both: a null window
 * reads as the context (null_expr), an absent one as MistralConfig's 4096. */
START_TEST(mistral_layout_absorbed) {
  json_t *m = absorb_family_in(FROM_CURATED, "mistral-probe-tiny-seed5.json", "mistral-probe-tiny-window-seed30.json",
                               "head_dim=derived norm=w qk=none window=every_layer", "models/mistral.json",
                               "MistralForCausalLM", 1);
  const json_t *att = mi_ckb_named(json_object_get(m, "layer_sequence"), "step", "attention");
  ck_assert_str_eq(json_string_value(json_object_get(att, "operator")) ?: "", "operator.attention_window");
  ck_assert_ptr_null(mi_ckb_named(json_object_get(m, "config_inert"), "name", "sliding_window"));
  json_t *cfg = json_pack("{s:i, s:i, s:i}", "max_position_embeddings", 32768, "hidden_size", 64,
                          "num_attention_heads", 4);
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "sliding_window", 14)), 4096); /* absent */
  json_object_set_new(cfg, "sliding_window", json_null());
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "sliding_window", 14)), 32768); /* null */
  json_object_set_new(cfg, "sliding_window", json_integer(4096));
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, cfg, "sliding_window", 14)), 4096);
  /* a window that masks nothing (at least the context) reduces to the
   * platform's attention (operator.attention_window's reduces_to): the
   * composer calls it, its window argument dropped; a narrower one does not */
  char err[1024], *ck = src("ckb");
  mi_ckb *k = mi_ckb_open(ck, err, sizeof err);
  ck_assert_msg(k, "%s", err);
  ck_assert_ptr_null(mi_ckb_step_reduction(k, m, cfg, att)); /* 4096 under 32768 */
  json_object_set_new(cfg, "sliding_window", json_null());
  ck_assert_str_eq(mi_ckb_step_reduction(k, m, cfg, att) ?: "", "operator.attention");
  json_t *bare = json_deep_copy(att); /* a step without an argument the plainer operator needs: not reduced */
  json_object_del(json_object_get(bare, "args"), "scale");
  ck_assert_ptr_null(mi_ckb_step_reduction(k, m, cfg, bare));
  json_decref(bare);
  json_t *r = json_deep_copy(m);
  ck_assert_int_eq(mi_ckb_model_reduce(k, r, cfg), 1);
  const json_t *ra = mi_ckb_named(json_object_get(r, "layer_sequence"), "step", "attention");
  ck_assert_str_eq(json_string_value(json_object_get(ra, "operator")) ?: "", "operator.attention");
  ck_assert_ptr_null(json_object_get(json_object_get(ra, "args"), "window"));
  ck_assert_str_eq(json_string_value(json_object_get(ra, "reduced_from")) ?: "", "operator.attention_window");
  json_decref(r);
  mi_ckb_close(k);
  free(ck);
  json_decref(cfg);
  json_decref(m);
}
END_TEST

/* Phi-3 (Phi3ForCausalLM: q/k/v in one qkv_proj, gate and up in one
 * gate_up_proj; tests/goldens/families/phi3-probe-tiny-seed18.json and
 * phi3-probe-tiny-partial-seed19.json, the second with partial_rotary_factor
 * 0.5; llama.cpp's phi3 the oracle, its fused tensors as they are). Two
 * vocabulary entries (variant.qkv_fused, variant.mlp_in_fused: one matmul,
 * then copy2d splits) absorb it with no C written for it; copy2d is the
 * operator the hybrid's absorption brought, so the run starts from the
 * shipped CKB less model.phi3, and from the curated one the fused readings
 * are named as needing it. The first probe passes the full and the partial
 * rotary alike (its factor is absent: 1.0, Phi3Config's); the second tells
 * them apart, and the one reading passing on both is the answer. */
START_TEST(phi3_fused_layout_absorbed) {
  json_t *m = absorb_family_in(FROM_SHIPPED, "phi3-probe-tiny-seed18.json", "phi3-probe-tiny-partial-seed19.json",
                               "head_dim=derived mlp_in=fused norm=w qk=none qkv=fused rotary=partial window=by_field",
                               "models/phi3.json", "Phi3ForCausalLM", 1);
  const json_t *seq = json_object_get(m, "layer_sequence");
  const char *gone[] = {"k_proj", "v_proj", "up_proj"}, *there[] = {"q_split", "k_split", "v_split", "gate_split",
                                                                     "up_split"};
  for (int k = 0; k < 3; k++) ck_assert_ptr_null(mi_ckb_named(seq, "step", gone[k]));
  for (int k = 0; k < 5; k++) ck_assert_ptr_nonnull(mi_ckb_named(seq, "step", there[k]));
  const json_t *ws = json_object_get(m, "weights");
  ck_assert_ptr_null(mi_ckb_named(ws, "key", "model.layers.{i}.self_attn.q_proj.weight"));
  const json_t *qkv = mi_ckb_named(ws, "key", "model.layers.{i}.self_attn.qkv_proj.weight");
  ck_assert_ptr_nonnull(qkv);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(qkv, "shape"), 0)),
                   "(num_attention_heads + 2 * num_key_value_heads) * head_dim");
  /* fused rows have no shard mode: no tensor parallelism, so --tp 2 is refused */
  ck_assert_ptr_null(json_object_get(m, "tensor_parallel"));
  ck_assert_ptr_null(json_object_get(qkv, "shard"));
  const json_t *prf = mi_ckb_named(json_object_get(m, "config"), "name", "partial_rotary_factor");
  ck_assert_double_eq(json_number_value(json_object_get(prf, "default")), 1.0);
  const json_t *gs = json_object_get(m, "gguf");
  ck_assert_str_eq(json_string_value(json_object_get(gs, "architecture")) ?: "", "phi3");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(gs, "tensors"), "blk.{i}.ffn_up.weight")) ?: "",
                   "model.layers.{i}.mlp.gate_up_proj.weight");
  json_decref(m);
  /* from the curated CKB: the fused readings need operator.copy2d, named */
  char *tmp = tw_mkdtemp("evolve-phi3"), *refs = tw_path(tmp, "refs"), *ckb = tw_path(tmp, "ckb"),
       *run = tw_path(tmp, "run"), *ck = src("ckb"), *g = src("tests/goldens/families/phi3-probe-tiny-seed18.json"),
       cmd[8400];
  ck_assert_int_eq(mkdir(refs, 0755), 0);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", g, refs);
  ck_assert_int_eq(system(cmd), 0);
  curated_ckb(ck, ckb);
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-gen' --evolve --refs '%s' --ckb '%s' --run-dir '%s' --no-revalidate 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, ckb, run, tmp);
  int st = system(cmd);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 12, "exit %d", WEXITSTATUS(st));
  char *errp = tw_path(tmp, "stderr");
  size_t len;
  char *text = tw_read_all(errp, &len);
  ck_assert_msg(text && strstr(text, "qkv=fused") && strstr(text, "needs operator.copy2d"), "%s", text ? text : "?");
  free(text), free(errp), free(g), free(ck), free(run), free(ckb), free(refs);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST

/* StableLM (StableLmForCausalLM, tests/goldens/families/stablelm-probe-tiny-seed20.json:
 * LayerNorm with biases, layer_norm_eps, q/k/v biases switched on by
 * use_qkv_bias, a quarter of each head rotated; llama.cpp's stablelm the
 * oracle). From mi-ckb curated, with no C written for it: the LayerNorm is
 * operator.layer_norm, which the CKB states as an expression with two row
 * reductions (the map form's "reduce") and a kernel pack computes;
 * variant.norm_kind_layer replaces the three norm steps and their weights'
 * biases, and reads layer_norm_eps in place of rms_norm_eps. */
START_TEST(stablelm_layernorm_absorbed) {
  json_t *m = absorb_family("stablelm-probe-tiny-seed20.json", NULL,
                            "bias=qkv head_dim=derived norm=w norm_kind=layer qk=none rotary=partial",
                            "models/stablelm.json", "StableLmForCausalLM");
  const char *norms[] = {"attn_norm", "mlp_norm"};
  for (int k = 0; k < 2; k++) {
    const json_t *st = mi_ckb_named(json_object_get(m, "layer_sequence"), "step", norms[k]);
    ck_assert_str_eq(json_string_value(json_object_get(st, "operator")) ?: "", "operator.layer_norm");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(st, "args"), "eps")) ?: "",
                     "config:layer_norm_eps");
  }
  const json_t *fin = mi_ckb_named(json_object_get(m, "epilogue"), "step", "final_norm");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fin, "args"), "b")) ?: "", "weight:model.norm.bias");
  ck_assert_ptr_nonnull(mi_ckb_named(json_object_get(m, "weights"), "key", "model.layers.{i}.input_layernorm.bias"));
  const json_t *cf = json_object_get(m, "config");
  ck_assert_ptr_null(mi_ckb_named(cf, "name", "rms_norm_eps"));
  ck_assert_ptr_nonnull(mi_ckb_named(cf, "name", "layer_norm_eps"));
  /* StableLmConfig's defaults where config.json is silent: a quarter rotated */
  ck_assert_double_eq(json_number_value(json_object_get(mi_ckb_named(cf, "name", "partial_rotary_factor"), "default")),
                      0.25);
  /* the switches read, their computed value the only one: a parallel-residual
   * or q/k-LayerNorm checkpoint is a gap named by the field */
  const json_t *pr = mi_ckb_named(cf, "name", "use_parallel_residual");
  ck_assert(pr && json_is_false(json_array_get(json_object_get(pr, "values"), 0)));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "gguf"), "architecture")) ?: "", "stablelm");
  json_decref(m);
}
END_TEST

/* SmolLM3 (SmolLM3ForCausalLM, tests/goldens/families/smollm3-probe-6l-seed22.json:
 * every 4th layer without a rotary embedding, config.json's no_rope_layers
 * a 0/1 per layer; llama.cpp's smollm3 the oracle, whose step is fixed at
 * 4). variant.nope_layers splits the layer into kinds by that array of
 * numbers (layer_kinds.values: 0 nope, 1 rope) and removes the RoPE steps
 * from the nope kind alone (remove_steps with a kind): no C written for the
 * family. The NoPE layer is seen by the oracle: with every layer rotated
 * (no_rope_layers all 1) the contract is far from llama.cpp. */
START_TEST(smollm3_nope_layers_absorbed) {
  json_t *m = absorb_family("smollm3-probe-6l-seed22.json", NULL, "llama_fields=present nope=interval norm=w qk=none",
                            "models/smollm3.json", "SmolLM3ForCausalLM");
  const json_t *lk = json_object_get(m, "layer_kinds");
  ck_assert_str_eq(json_string_value(json_object_get(lk, "config")) ?: "", "no_rope_layers");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(lk, "values"), "0")) ?: "", "nope");
  const json_t *kinds = json_object_get(lk, "kinds");
  ck_assert_ptr_null(mi_ckb_named(json_object_get(json_object_get(kinds, "nope"), "sequence"), "step", "q_rope"));
  ck_assert_ptr_nonnull(mi_ckb_named(json_object_get(json_object_get(kinds, "rope"), "sequence"), "step", "q_rope"));
  probe_fix p;
  probe_open(&p, "tests/goldens/families/smollm3-probe-6l-seed22.json");
  ck_assert_str_eq(mi_ckb_layer_kind(m, p.cfg, 3) ?: "", "nope");
  ck_assert_str_eq(mi_ckb_layer_kind(m, p.cfg, 2) ?: "", "rope");
  /* a number layer_kinds.values does not name is no kind (the composer then names it) */
  json_t *odd = json_deep_copy(p.cfg);
  json_array_set_new(json_object_get(odd, "no_rope_layers"), 3, json_integer(2));
  ck_assert_ptr_null(mi_ckb_layer_kind(m, odd, 3));
  json_decref(odd);
  const double e = probe_error(&p, m, p.cfg);
  ck_assert_msg(e < EV_TOL, "the absorbed contract: %g", e);
  json_t *all = json_array();
  for (int l = 0; l < 6; l++) json_array_append_new(all, json_integer(1));
  json_object_set_new(p.cfg, "no_rope_layers", all);
  const double e_all = probe_error(&p, m, p.cfg);
  fprintf(stderr, "test_evolve: smollm3 with its NoPE layer: %.3g from llama.cpp; every layer rotated: %.3g\n", e, e_all);
  ck_assert_msg(e_all > 10 * EV_TOL, "every layer rotated is only %g from llama.cpp", e_all);
  probe_close(&p);
  json_decref(m);
}
END_TEST

/* OLMo 2 (Olmo2ForCausalLM, tests/goldens/families/olmo2-probe-tiny-seed24.json:
 * no norm before attention or the MLP, each block's output normed before its
 * residual add, q/k RMSNorm over each token's whole projection; llama.cpp's
 * olmo2 the oracle). Two vocabulary entries, no C for the family:
 * variant.norm_place_post and variant.qk_norm_full, whose evidence is the
 * q norm's length (elements_equal hidden_size: a per-head norm is head_dim
 * long, so the Qwen3-style probes never make it a candidate). */
START_TEST(olmo2_post_norm_absorbed) {
  json_t *m = absorb_family("olmo2-probe-tiny-seed24.json", NULL, "head_dim=derived norm=w norm_place=post qk=full",
                            "models/olmo2.json", "Olmo2ForCausalLM");
  const json_t *seq = json_object_get(m, "layer_sequence");
  ck_assert_ptr_null(mi_ckb_named(seq, "step", "attn_norm"));
  ck_assert_ptr_null(mi_ckb_named(seq, "step", "mlp_norm"));
  const json_t *qa = json_object_get(mi_ckb_named(seq, "step", "q_proj"), "args");
  ck_assert_str_eq(json_string_value(json_object_get(qa, "x")) ?: "", "x");
  const json_t *qn = json_object_get(mi_ckb_named(seq, "step", "q_norm"), "args");
  ck_assert_str_eq(json_string_value(json_object_get(qn, "dim")) ?: "", "num_attention_heads * head_dim");
  ck_assert_str_eq(json_string_value(json_object_get(qn, "rows")) ?: "", "T");
  ck_assert_ptr_nonnull(mi_ckb_named(seq, "step", "post_mlp_norm"));
  ck_assert_ptr_null(mi_ckb_named(json_object_get(m, "weights"), "key", "model.layers.{i}.input_layernorm.weight"));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "gguf"), "architecture")) ?: "", "olmo2");
  json_decref(m);
}
END_TEST

/* StarCoder2 (Starcoder2ForCausalLM, tests/goldens/families/starcoder2-probe-tiny-seed25.json:
 * a non-gated GELU MLP (c_fc, act, c_proj), every projection biased
 * (use_bias), LayerNorm with eps under the class's own key norm_epsilon,
 * sliding_window 2048 on every layer; llama.cpp's starcoder2 the oracle).
 * From mi-ckb curated with no C written for the family: variant.mlp_in_c_fc
 * removes the gate and rebinds the gated activation to its one-input form
 * (operator.gelu_tanh, a pack operator stated as an expression; its gated
 * arguments removed by null set_args), variant.mlp_bias_c_fc and
 * variant.o_bias_o add the biases, variant.window_every_layer puts every
 * layer on operator.attention_window, and the config class binds
 * layer_norm_eps to norm_epsilon. */
START_TEST(starcoder2_plain_mlp_absorbed) {
  json_t *m = absorb_family("starcoder2-probe-tiny-seed25.json", NULL,
                            "bias=qkv head_dim=derived mlp_act=gelu_tanh mlp_bias=c_fc mlp_in=c_fc norm=w "
                            "norm_kind=layer o_bias=o qk=none window=every_layer",
                            "models/starcoder2.json", "Starcoder2ForCausalLM");
  const json_t *seq = json_object_get(m, "layer_sequence");
  ck_assert_ptr_null(mi_ckb_named(seq, "step", "gate_proj"));
  const json_t *act = mi_ckb_named(seq, "step", "swiglu"), *aa = json_object_get(act, "args");
  ck_assert_str_eq(json_string_value(json_object_get(act, "operator")) ?: "", "operator.gelu_tanh");
  ck_assert_str_eq(json_string_value(json_object_get(aa, "x")) ?: "", "up");
  ck_assert_ptr_null(json_object_get(aa, "gate"));
  ck_assert_ptr_null(json_object_get(aa, "up"));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(mi_ckb_named(seq, "step", "down_proj"), "args"),
                                                     "x")) ?: "",
                   "up");
  /* the biases in order: after c_fc before the activation, after c_proj, after o_proj */
  const char *order[] = {"o_proj", "o_bias", "attn_residual", "mlp_norm", "up_proj", "up_bias", "swiglu",
                         "down_proj", "down_bias", "mlp_residual"};
  size_t at = 0, i;
  json_t *st;
  json_array_foreach(seq, i, st) if (at < 10 && !strcmp(json_string_value(json_object_get(st, "step")) ?: "", order[at]))
      at++;
  ck_assert_int_eq(at, 10);
  const json_t *att = mi_ckb_named(seq, "step", "attention");
  ck_assert_str_eq(json_string_value(json_object_get(att, "operator")) ?: "", "operator.attention_window");
  const json_t *cf = json_object_get(m, "config");
  ck_assert_str_eq(json_string_value(json_object_get(mi_ckb_named(cf, "name", "layer_norm_eps"), "path")) ?: "",
                   "norm_epsilon");
  const json_t *ub = mi_ckb_named(cf, "name", "use_bias");
  ck_assert(ub && json_is_true(json_array_get(json_object_get(ub, "values"), 0)));
  /* a null window reads as the context, so one contract computes both */
  probe_fix p;
  probe_open(&p, "tests/goldens/families/starcoder2-probe-tiny-seed25.json");
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, p.cfg, "sliding_window", 14)), 2048);
  json_object_set_new(p.cfg, "sliding_window", json_null());
  ck_assert_int_eq(json_integer_value(mi_ckb_config_value(m, p.cfg, "sliding_window", 14)), 4096);
  json_t *un = json_array();
  ck_assert_int_eq(ev_explain(m, p.cfg, p.w, un, NULL), 0); /* the null window is explained too */
  json_decref(un);
  probe_close(&p);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "gguf"), "architecture")) ?: "", "starcoder2");
  json_decref(m);
}
END_TEST

/* Phi-2 (PhiForCausalLM, tests/goldens/families/phi2-probe-tiny-seed28.json:
 * attention and the MLP both from one shared LayerNorm (parallel residual),
 * every projection biased, the output projection stored as self_attn.dense,
 * fc1/fc2, model.final_layernorm, a bias on the head, half of each head
 * rotated; llama.cpp's phi2 the oracle). Thirteen groups in play: 8192
 * candidates, above the cap, so the groups a weight decides (a weight only
 * one member reads, which the probe holds) are fixed first and the product
 * of the rest is scored. No C written for the family. Then the two new
 * structural readings are shown to be seen by the oracle: the MLP reading
 * the stream after attention's add (a sequential block normed by the same
 * weights), or the head's bias dropped, is far from llama.cpp. */
START_TEST(phi2_parallel_residual_absorbed) {
  json_t *m = absorb_family("phi2-probe-tiny-seed28.json", NULL,
                            "bias=qkv final_norm_name=final_layernorm head_bias=bias head_dim=derived mlp_act=gelu_tanh "
                            "mlp_bias=fc1 mlp_in=fc1 norm=w norm_kind=layer o_bias=o o_name=dense qk=none "
                            "residual=parallel_shared rotary=partial",
                            "models/phi.json", "PhiForCausalLM");
  json_t *seq = json_object_get(m, "layer_sequence");
  ck_assert_ptr_null(mi_ckb_named(seq, "step", "mlp_norm"));
  ck_assert_ptr_null(mi_ckb_named(json_object_get(m, "weights"), "key",
                                  "model.layers.{i}.post_attention_layernorm.weight"));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(mi_ckb_named(seq, "step", "o_proj"), "args"),
                                                     "w")) ?: "",
                   "weight:model.layers.{i}.self_attn.dense.weight");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(mi_ckb_named(seq, "step", "o_bias"), "args"),
                                                     "b")) ?: "",
                   "weight:model.layers.{i}.self_attn.dense.bias");
  ck_assert_ptr_nonnull(mi_ckb_named(json_object_get(m, "epilogue"), "step", "head_bias"));
  const json_t *kv = mi_ckb_named(json_object_get(m, "config"), "name", "num_key_value_heads");
  ck_assert_str_eq(json_string_value(json_object_get(kv, "default_expr")) ?: "", "num_attention_heads");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "gguf"), "architecture")) ?: "", "phi2");
  probe_fix p;
  probe_open(&p, "tests/goldens/families/phi2-probe-tiny-seed28.json");
  /* sequential: the MLP normed from the stream after attention's add */
  json_t *sq = json_deep_copy(m), *s2 = json_object_get(sq, "layer_sequence");
  size_t at = 0, i;
  json_t *st;
  json_array_foreach(s2, i, st) if (!strcmp(json_string_value(json_object_get(st, "step")) ?: "", "attn_residual")) at = i;
  json_t *again = json_deep_copy(mi_ckb_named(s2, "step", "attn_norm"));
  json_object_set_new(again, "step", json_string("mlp_norm"));
  json_array_insert_new(s2, at + 1, again);
  const double e_seq = probe_error(&p, sq, p.cfg);
  /* the head's bias dropped */
  json_t *nb = json_deep_copy(m), *ep = json_object_get(nb, "epilogue");
  json_array_foreach(ep, i, st) if (!strcmp(json_string_value(json_object_get(st, "step")) ?: "", "head_bias")) break;
  json_array_remove(ep, i);
  const double e_nb = probe_error(&p, nb, p.cfg);
  fprintf(stderr, "test_evolve: phi2 read sequentially %.3g, without its head bias %.3g from llama.cpp\n", e_seq, e_nb);
  ck_assert_msg(e_seq > 1.0 && e_nb > 1.0, "%g %g: within ten times the GELU's peer tolerance", e_seq, e_nb);
  json_decref(sq), json_decref(nb);
  probe_close(&p);
  json_decref(m);
}
END_TEST

/* Granite (GraniteForCausalLM, tests/goldens/families/granite-probe-tiny-seed16.json:
 * Llama's layout plus four muP-style multipliers; llama.cpp's granite the
 * oracle, reading them from the keys hf2gguf.mjs writes). One vocabulary
 * entry (variant.multipliers_granite: three operator.scale steps, the
 * attention scale bound to the field, and the logits through
 * operator.scale_div, a pack operator the CKB states as an expression)
 * absorbs it with no C written for it. Then each multiplier is shown to be
 * seen by the oracle: the consolidated contract with that field at 1.0 (the
 * multiplier left out) is far from llama.cpp, so no one of the four could be
 * misplaced or dropped unnoticed. */
START_TEST(granite_multipliers_absorbed) {
  json_t *m = absorb_family("granite-probe-tiny-seed16.json", NULL, "head_dim=derived multipliers=granite norm=w qk=none",
                            "models/granite.json", "GraniteForCausalLM");
  const json_t *seq = json_object_get(m, "layer_sequence");
  const char *after_o[] = {"o_proj", "attn_out_multiplier", "attn_residual"};
  for (int k = 0; k < 3; k++) ck_assert_ptr_nonnull(mi_ckb_named(seq, "step", after_o[k]));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(mi_ckb_named(seq, "step", "attention"), "args"),
                                                     "scale")),
                   "config:attention_multiplier");
  const json_t *ls = mi_ckb_named(json_object_get(m, "epilogue"), "step", "logits_scaling");
  ck_assert_str_eq(json_string_value(json_object_get(ls, "operator")) ?: "", "operator.scale_div");
  /* GraniteConfig's defaults where config.json is silent: 1.0 each (the
   * attention scores unscaled then, not 1/sqrt(head_dim)) */
  const json_t *am = mi_ckb_named(json_object_get(m, "config"), "name", "attention_multiplier");
  ck_assert_double_eq(json_number_value(json_object_get(am, "default")), 1.0);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "gguf"), "architecture")) ?: "", "granite");

  probe_fix p;
  probe_open(&p, "tests/goldens/families/granite-probe-tiny-seed16.json");
  const char *fields[] = {"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"};
  for (int f = 0; f < 4; f++) {
    json_t *c = json_deep_copy(p.cfg);
    json_object_set_new(c, fields[f], json_real(1.0));
    const double e = probe_error(&p, m, c);
    fprintf(stderr, "test_evolve: granite with %s left out (1.0): %.3g from llama.cpp\n", fields[f], e);
    ck_assert_msg(e > 10 * EV_TOL, "%s at 1.0 is only %g from llama.cpp", fields[f], e);
    json_decref(c);
  }
  probe_close(&p);
  json_decref(m);
}
END_TEST

/* The experience of an earlier absorption in the CKB (the hybrid's, as the
 * consolidator wrote it) shortens the search: the reading it names is
 * scored first, then its one-group neighbours (gate none/half, norm w,
 * qk w, rotary full); that reading passing and every neighbour failing
 * settles it: 6 of the 24 candidates per probe, the same answer as the
 * whole product (search_picks_true_variants_on_two_probes). */
START_TEST(experience_shortens_the_search) {
  char *refs;
  char *tmp = make_refs(PROBES, 2, &refs);
  char *ckb = tw_path(tmp, "ckb"), *ck = src("ckb"), cmd[8400];
  curated_ckb(ck, ckb);
  snprintf(cmd, sizeof cmd, "cp '%s/experience/evolved_qwen35_variants.json' '%s/experience/'", ck, ckb);
  ck_assert_int_eq(system(cmd), 0);
  json_t *r = search_with_bundle(tmp, refs);
  json_t *table = json_object_get(r, "variant_search");
  ck_assert_int_eq(json_array_size(table), 2 * 6);
  /* the experienced reading first on each probe, passing; the rest far off or unexplained */
  size_t i;
  json_t *row;
  json_array_foreach(table, i, row) {
    const char *cand_name = json_string_value(json_object_get(row, "candidate"));
    const char *v = json_string_value(json_object_get(row, "verdict"));
    if (i % 6 == 0) ck_assert_str_eq(cand_name, TRUE_READING);
    if (!strcmp(cand_name, TRUE_READING)) ck_assert_str_eq(v, "pass");
    else ck_assert_msg(!strcmp(v, "fail") || !strcmp(v, "unexplained"), "%s: %s", cand_name, v);
  }
  const char *k;
  json_t *sv;
  int probes = 0;
  json_object_foreach(json_object_get(r, "search"), k, sv) {
    probes++;
    ck_assert_str_eq(json_string_value(json_object_get(sv, "mode")), "experience");
    ck_assert_int_eq(json_integer_value(json_object_get(sv, "looked_at")), 6);
    ck_assert_int_eq(json_integer_value(json_object_get(sv, "candidates")), 24);
  }
  ck_assert_int_eq(probes, 2);
  json_decref(r);
  tw_rmtree(tmp);
  free(tmp), free(refs), free(ckb), free(ck);
}
END_TEST

/* Gemma 3 in its own layout, on two probes (tests/goldens/families/
 * gemma3-probe-6l-linear-seed10.json: six layers S S F S S F, window 8,
 * the keys transformers >= 4.53 writes (layer_types) and the 4B-27B's
 * linear rope scaling (factor 8); gemma3-probe-6l-seed9.json: S S S S S F,
 * the released 1B's keys (sliding_window_pattern 6 only, no rope_scaling);
 * llama.cpp's gemma3 the oracle): the vocabulary reaches it with no C
 * written for it, through a layer split into two kinds, the sliding one on
 * operator.attention_window (a kernel generated from its masked-attention
 * form) with its own rope base, the full one on operator.rope_linear (a
 * kernel generated from its rotary form; factor 1 where rope_scaling is
 * absent, so one contract reads both probes), the embedding scaled by
 * sqrt(hidden), the attention by query_pre_attn_scalar, GeGLU, sandwich
 * and (1 + w) norms. llama.cpp's
 * GELU runs through an f16 table: the true reading is held to
 * operator.gelu_tanh_mul's peer tolerance, every other scored one is off by
 * far more. Revalidation with references off passes every stage (the
 * released layout, without layer_types, is the checkpoint). A Gemma 2-like
 * final soft-cap is then refused by name, the CKB unchanged. */
/* the members of gemma's reading (ckb/experience/evolved_gemma3_variants.json) */
#define GEMMA_TRUE_VARIANTS                                                                                        \
  "attn_scale_query_pre_attn_scalar bias_none embed_scale_sqrt gate_none head_dim_field mlp_gelu_tanh norm_1w "    \
  "qk_norm_1w rope_local_base rope_linear rotary_full sandwich_norms softcap_none window_layer_kinds config_class_gemma3_text"
/* quick (the sanitizer run, MI_TEST_QUICK): 0 the whole search; 1 its
 * experience in the CKB (the reading first, then its one-group neighbours);
 * 2 the vocabulary cut to the reading's members. The whole product over
 * every variant is the Release run's (the same search code, more
 * candidates, each a float64 interpretation of six layers). */
static char *gemma_workspace(char **refs, char **ckb, char **model, int quick) {
  char *tmp = tw_mkdtemp("evolve");
  *refs = tw_path(tmp, "refs"), *ckb = tw_path(tmp, "ckb"), *model = tw_path(tmp, "model");
  ck_assert_int_eq(mkdir(*refs, 0755), 0);
  char *ck = src("ckb"), *g8 = src("tests/goldens/families/gemma3-probe-6l-linear-seed10.json"),
       *g9 = src("tests/goldens/families/gemma3-probe-6l-seed9.json"), cmd[8400], err[1024], bin[4096];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' '%s/'", g8, g9, *refs);
  ck_assert_int_eq(system(cmd), 0);
  /* the first probe (by name) without cache_implementation, which seed 9
   * and the checkpoint have: the reading's inert entries ("if_present")
   * are judged on every probe's fields and the checkpoint's, not on the
   * first probe's alone */
  char *first = tw_path(*refs, "gemma3-probe-6l-linear-seed10.json");
  json_t *fg = json_load_file(first, 0, NULL), *args = json_object_get(json_object_get(fg, "model"), "mkmodel_args");
  size_t i, n = json_array_size(args);
  for (i = 0; i + 1 < n && strcmp(json_string_value(json_array_get(args, i + 1)) ?: "", "cache_implementation=\"hybrid\""); i++)
    ;
  ck_assert_int_lt(i + 1, n);
  json_array_remove(args, i + 1), json_array_remove(args, i);
  ck_assert_int_eq(json_dump_file(fg, first, 0), 0);
  json_decref(fg), free(first);
  curated_ckb(ck, *ckb);
  if (quick == 1) { /* the search from the experience of gemma's absorption: its reading and the neighbours */
    snprintf(cmd, sizeof cmd, "cp '%s/experience/evolved_gemma3_variants.json' '%s/experience/'", ck, *ckb);
    ck_assert_int_eq(system(cmd), 0);
  } else if (quick == 2) { /* the vocabulary cut to the true reading's members: one candidate per probe */
    snprintf(cmd, sizeof cmd, "cd '%s/variants' && for f in *.json; do case \" %s \" in *\" ${f%%.json} \"*) ;; *) rm \"$f\" ;; esac; done",
             *ckb, GEMMA_TRUE_VARIANTS);
    ck_assert_int_eq(system(cmd), 0);
  }
  json_t *golden = load_src("tests/goldens/families/gemma3-probe-6l-seed9.json");
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts eo = {.exe_dir = bin};
  ck_assert_msg(ev_remake_checkpoint(&eo, golden, *model, err, sizeof err) == 0, "%s", err);
  json_decref(golden);
  free(ck), free(g8), free(g9);
  return tmp;
}

/* mi-gen --evolve on gemma_workspace's folders (revalidation against
 * tests/goldens/families unless quick); exit 0 asserted; its report */
static json_t *gemma_evolve(const char *refs, const char *ckb, const char *model, const char *tmp, int quick) {
  char *gold = src("tests/goldens/families"), *run = tw_path(tmp, "run"), cmd[8400];
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-gen' --evolve --refs '%s' --ckb '%s' --model '%s' --goldens '%s' --run-dir '%s'%s 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, ckb, model, gold, run, quick ? " --no-revalidate" : "", tmp);
  int st = system(cmd);
  char *rp = tw_path(run, "evolve.json");
  json_t *r = json_load_file(rp, 0, NULL);
  ck_assert_ptr_nonnull(r);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EV_EX_OK, "exit %d: %s", WEXITSTATUS(st),
                json_string_value(json_object_get(r, "outcome")) ?: "?");
  free(gold), free(run), free(rp);
  return r;
}

static const json_t *kind_step(const json_t *m, const char *kind, const char *step) {
  return mi_ckb_named(json_object_get(json_object_get(json_object_get(json_object_get(m, "layer_kinds"), "kinds"), kind),
                                      "sequence"),
                      "step", step);
}

/* A Gemma search's rows in report r: exactly two pass (the same reading,
 * truth, on both probes), within the widened tolerance of llama.cpp's GELU
 * and above min_pass (Gemma 3's probes: wider than the SiLU families'
 * tolerance); every other scored one far off (more than 1 nat), not near
 * the tolerance. The scored rows, counted. */
static int gemma_search_rows(json_t *r, const char *truth, double min_pass) {
  size_t i;
  json_t *row;
  int pass = 0, scored = 0;
  json_array_foreach(json_object_get(r, "variant_search"), i, row) {
    const char *v = json_string_value(json_object_get(row, "verdict"));
    const char *cand = json_string_value(json_object_get(row, "candidate"));
    double e = json_number_value(json_object_get(row, "error"));
    if (!strcmp(v, "pass")) {
      pass++;
      ck_assert_str_eq(cand, truth);
      ck_assert_msg(e < json_number_value(json_object_get(row, "tolerance")) && e > min_pass, "%s: %g", cand, e);
    } else if (!strcmp(v, "fail")) {
      scored++;
      ck_assert_msg(e > 1.0, "%s: %g", cand, e);
    }
  }
  ck_assert_int_eq(pass, 2);
  return scored;
}

START_TEST(gemma3_layout_absorbed_and_revalidated) {
  /* the sanitizer run (MI_TEST_QUICK) searches from the experience and
   * stops after consolidation: its kernels are test_pack_masked's there,
   * the whole product and the revalidation are Release's */
  const int quick = getenv("MI_TEST_QUICK") != NULL;
  if (quick)
    fprintf(stderr, "test_evolve: MI_TEST_QUICK: gemma3 searched from its experience and not revalidated (the "
                    "whole product and the revalidation: the Release run)\n");
  char *refs, *ckb, *model, *tmp = gemma_workspace(&refs, &ckb, &model, quick);
  char *run = tw_path(tmp, "run"), *rp = tw_path(run, "evolve.json");
  json_t *r = gemma_evolve(refs, ckb, model, tmp, quick);
  const char *truth = "attn_scale=query_pre_attn_scalar embed_scale=sqrt_hidden mlp_act=gelu_tanh norm=1+w qk=1+w "
                      "rope_local=local_base rope_scaling=linear sandwich=pre+post window=layer_kinds";
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), truth);
  int scored = gemma_search_rows(r, truth, EV_TOL);
  /* from the experience: the reading's one-group neighbours that explain the probe, 7 of them */
  ck_assert_int_ge(scored, quick ? 7 : 8);
  if (quick) {
    const char *k;
    json_t *sv;
    json_object_foreach(json_object_get(r, "search"), k, sv) ck_assert_str_eq(json_string_value(json_object_get(sv, "mode")),
                                                                              "experience");
  }
  /* the consolidated contract: two layer kinds of the same steps, the
   * sliding one windowed on its own rope base; the scaled embedding */
  char *mp = tw_path(ckb, "models/gemma3.json");
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_ptr_null(json_object_get(m, "layer_sequence"));
  const json_t *lk = json_object_get(m, "layer_kinds");
  ck_assert_str_eq(json_string_value(json_object_get(lk, "interval")), "sliding_window_pattern");
  const json_t *sa = kind_step(m, "sliding_attention", "attention"), *fa = kind_step(m, "full_attention", "attention");
  ck_assert_str_eq(json_string_value(json_object_get(sa, "operator")), "operator.attention_window");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(sa, "args"), "window")), "sliding_window");
  ck_assert_str_eq(json_string_value(json_object_get(fa, "operator")), "operator.attention");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fa, "args"), "scale")), "rsqrt:query_pre_attn_scalar");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(kind_step(m, "sliding_attention", "k_rope"), "args"), "theta")),
                   "config:rope_local_base_freq");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(kind_step(m, "full_attention", "k_rope"), "args"), "theta")),
                   "config:rope_theta");
  /* linear rope scaling on the full kind alone (kind_if_split), read member
   * by member: factor 1 where a checkpoint has no rope_scaling */
  for (int q = 0; q < 2; q++) {
    const char *st = q ? "k_rope" : "q_rope";
    ck_assert_str_eq(json_string_value(json_object_get(kind_step(m, "full_attention", st), "operator")), "operator.rope_linear");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(kind_step(m, "full_attention", st), "args"), "factor")),
                     "config:factor");
    ck_assert_str_eq(json_string_value(json_object_get(kind_step(m, "sliding_attention", st), "operator")), "operator.rope");
    ck_assert_ptr_null(json_object_get(json_object_get(kind_step(m, "sliding_attention", st), "args"), "factor"));
  }
  ck_assert_ptr_nonnull(mi_ckb_named(json_object_get(m, "config_inert"), "name", "cache_implementation"));
  const json_t *fac = mi_ckb_named(json_object_get(m, "config"), "name", "factor");
  ck_assert_str_eq(json_string_value(json_object_get(fac, "path")), "rope_scaling.factor");
  ck_assert_double_eq(json_number_value(json_object_get(fac, "default")), 1.0);
  const json_t *es = mi_ckb_named(json_object_get(m, "prologue"), "step", "embed_scale");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(es, "args"), "alpha")), "sqrt:hidden_size");
  /* revalidation, references off: every stage, stage 4 at the peer's tolerance for its GELU */
  char *rv = quick ? NULL : json_dumps(json_object_get(r, "revalidation"), JSON_COMPACT);
  ck_assert_msg(quick || (rv && strstr(rv, "identical to llama.cpp") && strstr(rv, "operator.gelu_tanh_mul's peer entry") &&
                          !strstr(rv, "FAIL")),
                "%s", rv ? rv : "?");
  free(rv);
  /* llama.cpp's gemma3 file: the q/k norms stored 1 + w too, the sliding
   * layers' rotary base and pattern and the linear scaling from their keys */
  gguf_section_as_shipped(m, "models/gemma3.json", "gemma3");
  const json_t *gc = json_object_get(json_object_get(m, "gguf"), "config");
  ck_assert_str_eq(json_string_value(json_object_get(gc, "rope_local_base_freq")) ?: "", "{arch}.rope.freq_base_swa");
  ck_assert_str_eq(json_string_value(json_object_get(gc, "factor")) ?: "", "{arch}.rope.scaling.factor");
  ck_assert_ptr_nonnull(json_object_get(json_object_get(json_object_get(m, "gguf"), "transforms"), "blk.{i}.attn_q_norm.weight"));
  if (!quick) gguf_runs_as_the_folder(ckb, run, model, tmp);
  json_decref(m), json_decref(r);
  free(mp), free(rp), free(run), free(refs), free(ckb), free(model);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST

/* A final soft-cap without an attention one (Gemma 3's probes with
 * final_logit_softcapping 30, attn_logit_softcapping null): no member of
 * the vocabulary's soft-cap group reads it (variant.softcap_none: both
 * null; variant.softcap_capped: both set, Gemma 2's), so the loop refuses
 * the field by name and leaves the CKB as it was. */
START_TEST(gemma2_softcap_is_refused_by_name) {
  /* the sanitizer run (MI_TEST_QUICK): the vocabulary cut to the true reading's members (the refusal follows
   * the search whatever its size); the whole search is the Release run's */
  const int quick = getenv("MI_TEST_QUICK") != NULL;
  if (quick) fprintf(stderr, "test_evolve: MI_TEST_QUICK: gemma2's soft-cap refused after a one-candidate search\n");
  char *refs, *ckb, *model, *tmp = gemma_workspace(&refs, &ckb, &model, quick ? 2 : 0), cmd[8400], before[200], after[200];
  /* both probes as Gemma 2 would have them: a final soft-cap of 30 */
  snprintf(cmd, sizeof cmd,
           "cd '%s' && for f in *.json; do sed -i 's/\"final_logit_softcapping=null\"/\"final_logit_softcapping=30.0\"/' \"$f\" && "
           "grep -q 'final_logit_softcapping=30.0' \"$f\" || exit 1; done",
           refs);
  ck_assert_int_eq(system(cmd), 0);
  tree_hash(ckb, before, sizeof before);
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-gen' --evolve --refs '%s' --ckb '%s' --run-dir '%s/run' --no-revalidate 2>'%s/stderr'",
           getenv("MI_BUILD_DIR"), refs, ckb, tmp, tmp);
  int st = system(cmd);
  char *errp = tw_path(tmp, "stderr");
  size_t el;
  char *errs = tw_read_all(errp, &el);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != EV_EX_OK, "exit %d:\n%s", WEXITSTATUS(st), errs ?: "");
  ck_assert_msg(errs && strstr(errs, "final_logit_softcapping"), "%s", errs ?: "");
  tree_hash(ckb, after, sizeof after);
  ck_assert_str_eq(before, after);
  free(errs), free(errp), free(refs), free(ckb), free(model);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST

/* Gemma 2, absorbed from the curated CKB with no C written for it (tests/
 * goldens/families/gemma2-probe-6l-seed14.json: layer_types S F S F S F as
 * transformers >= 4.53 writes them, soft-caps 40 on the logits and 3 on the
 * attention scores, both far past the tolerance on a tiny model (a reading
 * without them is off by 5-25 nats); gemma2-probe-6l-seed15.json: the
 * released keys, no layer_types and no pattern (transformers' Gemma2Config
 * alternates), caps 30 and 50; llama.cpp's gemma2 the oracle, itself within
 * 4.3e-3 of a float64 forward written from HF's Gemma 2 in
 * tools/peer/ref_forward.mjs): the search finds one reading on both probes,
 * the consolidated contract rebinds each kind's attention to its
 * soft-capped form (variant.softcap_capped's rebind_operators, whichever
 * operator the window variant chose: a kernel generated from the masked
 * form's score map), caps the logits after lm_head, takes the pattern 2 of
 * Gemma2Config (variant.config_class_gemma2) where layer_types is absent,
 * and revalidates with references off on the released-layout checkpoint.
 * The probes are cut to their first prompt and 4 steps for the search (the
 * revalidation reads the whole goldens). Quick (the sanitizer run): the
 * search from the experience of the shipped absorption, no revalidation. */
#define GEMMA2_TRUTH                                                                                                     \
  "attn_scale=query_pre_attn_scalar embed_scale=sqrt_hidden mlp_act=gelu_tanh norm=1+w qk=none sandwich=pre+post "    \
  "softcap=attn+final window=layer_kinds"
START_TEST(gemma2_absorbed_and_revalidated) {
  const int quick = getenv("MI_TEST_QUICK") != NULL;
  if (quick)
    fprintf(stderr, "test_evolve: MI_TEST_QUICK: gemma2 searched from its experience and not revalidated (the whole "
                    "product and the revalidation: the Release run)\n");
  const char *probes[] = {"gemma2-probe-6l-seed14.json", "gemma2-probe-6l-seed15.json"};
  char *refs, *tmp = make_refs_from("families", probes, 2, 4, &refs), *ckb = tw_path(tmp, "ckb"),
       *model = tw_path(tmp, "model"), *ck = src("ckb"), cmd[8400], err[1024], bin[4096];
  curated_ckb(ck, ckb);
  if (quick) {
    snprintf(cmd, sizeof cmd, "cp '%s/experience/evolved_gemma2_variants.json' '%s/experience/'", ck, ckb);
    ck_assert_int_eq(system(cmd), 0);
  }
  json_t *golden = load_src("tests/goldens/families/gemma2-probe-6l-seed15.json");
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts eo = {.exe_dir = bin};
  ck_assert_msg(ev_remake_checkpoint(&eo, golden, model, err, sizeof err) == 0, "%s", err);
  json_decref(golden);
  json_t *r = gemma_evolve(refs, ckb, model, tmp, quick);
  ck_assert_str_eq(json_string_value(json_object_get(r, "found")), GEMMA2_TRUTH);
  int scored = gemma_search_rows(r, GEMMA2_TRUTH, 0);
  size_t i;
  json_t *row;
  ck_assert_int_ge(scored, quick ? 4 : 20);
  char *mp = tw_path(ckb, "models/gemma2.json");
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_ptr_nonnull(m);
  const json_t *sa = kind_step(m, "sliding_attention", "attention"), *fa = kind_step(m, "full_attention", "attention");
  ck_assert_str_eq(json_string_value(json_object_get(sa, "operator")), "operator.attention_window_softcap");
  ck_assert_str_eq(json_string_value(json_object_get(fa, "operator")), "operator.attention_softcap");
  for (int k = 0; k < 2; k++)
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(k ? fa : sa, "args"), "cap")),
                     "config:attn_logit_softcapping");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(sa, "args"), "window")), "sliding_window");
  ck_assert_ptr_null(kind_step(m, "full_attention", "q_norm")); /* no q/k norms */
  /* the logits capped right after the head, in place */
  const json_t *ep = json_object_get(m, "epilogue");
  size_t head = SIZE_MAX, cap = SIZE_MAX;
  json_array_foreach(ep, i, row) {
    const char *stn = json_string_value(json_object_get(row, "step"));
    if (!strcmp(stn, "lm_head")) head = i;
    if (!strcmp(stn, "final_softcap")) cap = i;
  }
  ck_assert_msg(head != SIZE_MAX && cap == head + 1, "final_softcap at %zu, lm_head at %zu", cap, head);
  const json_t *fs = json_array_get(ep, cap);
  ck_assert_str_eq(json_string_value(json_object_get(fs, "operator")), "operator.softcap");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fs, "args"), "cap")), "config:final_logit_softcapping");
  /* the released configs' layer kinds: Gemma2Config's pattern 2 */
  const json_t *pat = mi_ckb_named(json_object_get(m, "config"), "name", "sliding_window_pattern");
  ck_assert_int_eq(json_integer_value(json_object_get(pat, "default")), 2);
  /* llama.cpp's file of the family, from the vocabulary (the config class's
   * architecture and attention scale, the sandwich norms' names, the 1 + w
   * norms' storage, the soft-caps' and the window's keys): the section
   * ckb/ ships, and (Release) the released-layout checkpoint's file runs
   * on the revalidated engine as the folder does */
  gguf_section_as_shipped(m, "models/gemma2.json", "gemma2");
  const json_t *gs = json_object_get(m, "gguf"), *gt = json_object_get(gs, "tensors");
  ck_assert_str_eq(json_string_value(json_object_get(gt, "blk.{i}.ffn_norm.weight")) ?: "",
                   "model.layers.{i}.pre_feedforward_layernorm.weight");
  ck_assert_double_eq(json_number_value(json_object_get(
                          json_object_get(json_object_get(gs, "transforms"), "blk.{i}.post_ffw_norm.weight"), "add")),
                      -1);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(gs, "config"), "attn_logit_softcapping")) ?: "",
                   "{arch}.attn_logit_softcapping");
  char *rv = quick ? NULL : json_dumps(json_object_get(r, "revalidation"), JSON_COMPACT);
  ck_assert_msg(quick || (rv && strstr(rv, "identical to llama.cpp") && !strstr(rv, "FAIL")), "%s", rv ? rv : "?");
  free(rv);
  if (!quick) {
    char *run = tw_path(tmp, "run");
    gguf_runs_as_the_folder(ckb, run, model, tmp);
    free(run);
  }
  json_decref(m), json_decref(r);
  free(mp), free(refs), free(ckb), free(model), free(ck);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST

/* Gemma 3 4B-27B as released (tests/goldens/families/gemma3-probe-6l-
 * conditional-seed12.json, llama.cpp's golden on the wrapped checkpoint
 * itself): a Gemma3ForConditionalGeneration whose text_config lists only
 * what differs from transformers' Gemma3TextConfig (no tie_word_embeddings,
 * rms_norm_eps, rope_theta, rope_local_base_freq, hidden_activation,
 * sliding_window_pattern: the class's defaults hold), its weights under
 * language_model.model., a vision tower and an image projector beside them.
 * The same probes and search as above; the vocabulary's config class gives
 * the contract the class's defaults and its wrapper layout the storage, with
 * no C written for either. Revalidation (Release) runs every stage on the
 * wrapped checkpoint, stage 4 against that golden. */
START_TEST(gemma3_released_wrapper_absorbed) {
  const int quick = getenv("MI_TEST_QUICK") != NULL;
  if (quick)
    fprintf(stderr, "test_evolve: MI_TEST_QUICK: the wrapped gemma3 searched from its experience and not revalidated\n");
  char *refs, *ckb, *model, *tmp = gemma_workspace(&refs, &ckb, &model, quick), err[1024], bin[4096];
  json_t *golden = load_src("tests/goldens/families/gemma3-probe-6l-conditional-seed12.json");
  snprintf(bin, sizeof bin, "%s/bin", getenv("MI_BUILD_DIR"));
  ev_opts eo = {.exe_dir = bin};
  tw_rmtree(model);
  ck_assert_msg(ev_remake_checkpoint(&eo, golden, model, err, sizeof err) == 0, "%s", err);
  json_decref(golden);
  char *run = tw_path(tmp, "run"), *rp = tw_path(run, "evolve.json");
  json_t *r = gemma_evolve(refs, ckb, model, tmp, quick);
  /* the contract: the causal architecture, the wrapper as a layout, the class's defaults */
  char *mp = tw_path(ckb, "models/gemma3.json");
  json_t *m = json_load_file(mp, 0, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(m, "architectures"), 0)), "Gemma3ForCausalLM");
  const json_t *lay = json_object_get(json_object_get(m, "layouts"), "conditional"), *cf = json_object_get(m, "config");
  ck_assert_ptr_nonnull(lay);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(lay, "config"), "architectures"), 0)),
                   "Gemma3ForConditionalGeneration");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(lay, "rename"), "model.")), "language_model.model.");
  ck_assert_ptr_nonnull(json_object_get(json_object_get(lay, "unused"), "vision_tower."));
  ck_assert(json_is_true(json_object_get(mi_ckb_named(cf, "name", "tie_word_embeddings"), "default")));
  ck_assert_int_eq(json_integer_value(json_object_get(mi_ckb_named(cf, "name", "head_dim"), "default")), 256);
  ck_assert_int_eq(json_integer_value(json_object_get(mi_ckb_named(cf, "name", "rope_local_base_freq"), "default")), 10000);
  ck_assert(!json_is_true(json_object_get(mi_ckb_named(cf, "name", "hidden_activation"), "required")));
  /* the evolved CKB covers the wrapped checkpoint, naming the two skipped parts */
  covers_wrapped(ckb, model, "vision_tower.", 3);
  /* revalidation, references off: every stage on the wrapped checkpoint, stage 4 on llama.cpp's golden */
  ck_assert_msg(quick || revalidation_says(r, "256 greedy steps identical to llama.cpp",
                                           "skipped 3 tensors under vision_tower.",
                                           "skipped 2 tensors under multi_modal_projector."),
                "stage 4 against the golden and stage 3's skipped prefixes");
  json_decref(m), json_decref(r);
  free(mp), free(rp), free(run), free(refs), free(ckb), free(model);
  tw_rmtree(tmp);
  free(tmp);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("evolve");
  /* consolidate runs first: the order the cases were always added in */
  TCase *tk = mi_check_case(s, "consolidate", 120, NULL, NULL);
  TCase *tc = mi_check_case(s, "search", 300, NULL, NULL);
  mi_check_add(tc, MI_CHECK_TESTS(search_picks_true_variants_on_two_probes,
                                  references_off_reads_nothing,
                                  tampered_oracle_picks_the_other_variant, bad_input_is_named,
                                  qwen2_layout_found_through_a_generated_operator, llama_layout_absorbed,
                                  mistral_layout_absorbed, llama31_rope_scaling_absorbed, qwen25_yarn_absorbed,
                                  granite_multipliers_absorbed, phi3_fused_layout_absorbed,
                                  stablelm_layernorm_absorbed, smollm3_nope_layers_absorbed, olmo2_post_norm_absorbed,
                                  starcoder2_plain_mlp_absorbed, phi2_parallel_residual_absorbed,
                                  config_class_defaults_hold_against_the_oracle,
                                  experience_shortens_the_search));
  mi_check_add(
      tk, MI_CHECK_TESTS(
              consolidator_entries_validate_are_deterministic_and_match_the_draft,
              bundle_with_broken_operator_contract_is_rejected_naming_it, real_bundle_is_accepted,
              cli_phases_one_to_five, killed_evolve_leaves_the_ckb_unchanged,
              unexplained_field_leaves_the_ckb_unchanged, explain_names_fields_and_weights));
  TCase *tg = mi_check_case(s, "gemma", 900, NULL, NULL);
  mi_check_add(tg, MI_CHECK_TESTS(gemma3_layout_absorbed_and_revalidated, gemma2_softcap_is_refused_by_name,
                                  gemma3_released_wrapper_absorbed, gemma2_absorbed_and_revalidated));
  TCase *tw = mi_check_case(s, "wrapped", 900, NULL, NULL);
  mi_check_add(tw, MI_CHECK_TESTS(wrapped_layout_absorbed_and_revalidated,
                                  wrapper_with_an_unknown_part_leaves_the_ckb_unchanged));
  return s;
}

int main(void) {
  return mi_check_run(suite());
}
