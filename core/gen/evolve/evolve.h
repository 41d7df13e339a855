/* The knowledge-evolution loop (issue #15): `mi-gen --evolve --refs DIR
 * [--candidates DIR]` absorbs a model family the CKB does not cover, with
 * no LLM, in six timed phases, each written to RUN_DIR/evolve.json and
 * RUN_DIR/evolve.md (docs/evolution.md):
 *   1 coverage        the gap report of core/ckb/coverage.c
 *   2 exploration     every file under --refs (and of the candidate bundle)
 *                     read through ev_read, which logs path, bytes, sha256
 *                     and phase; with no --refs nothing there is read
 *   3 variant search  candidate readings of the closest contract's math,
 *                     each scored by the float64 reference against the
 *                     llama.cpp goldens of the probe checkpoints
 *   4 bundle          the candidate operators as operator units, then the
 *                     found variants with the DeltaNet layers end to end
 *   5 consolidation   operator, model and experience entries into --ckb
 *   6 revalidation    mi-gen from scratch, references off, on the new CKB
 * One file per job: reads.c (the logged reads), variant_search.c,
 * bundle.c, consolidate.c, report.c, evolve.c (the phases). */
#ifndef MI_CORE_GEN_EVOLVE_H
#define MI_CORE_GEN_EVOLVE_H

#include <jansson.h>
#include <stddef.h>

#include "core/verify/models/qwen35.h"

/* Exit statuses of the loop (mi-gen's own run 0..11). */
enum {
  EV_EX_OK = 0,          /* absorbed: revalidation passed every stage */
  EV_EX_USAGE = 2,       /* a run that cannot be set up */
  EV_EX_GAP = 3,         /* references off: the gap stays (nothing to search with) */
  EV_EX_NO_VARIANT = 12, /* the variant search found no single passing reading (or the probes disagree) */
  EV_EX_BUNDLE = 13,     /* the candidate bundle was rejected (the line names the contract) */
  EV_EX_CONSOLIDATE = 14,/* an entry did not validate in the target CKB */
  EV_EX_REVALIDATE = 15, /* revalidation ran and a stage failed */
  EV_EX_COMPOSER = 16    /* revalidation: the composer lacks layer kinds (no hybrid engines yet) */
};

typedef struct ev_opts {
  const char *refs;       /* NULL: references off */
  const char *candidates; /* the candidate bundle folder, or NULL */
  const char *ckb;        /* the target CKB (written by the consolidator) */
  const char *model;      /* a hybrid checkpoint: coverage and revalidation (NULL: skipped) */
  const char *platform, *dtype;
  const char *run_dir;    /* the report and scratch (checkpoints remade from goldens) */
  const char *exe_dir;    /* where mi-mkmodel, mi-verify and mi-gen are */
  const char *goldens;    /* revalidation's stage-4 goldens (mi-gen --goldens), or NULL: mi-gen's default */
  double tol;             /* the oracle tolerance on top-10 logprobs (0: EV_TOL) */
  int no_revalidate;      /* skip phase 6 (tests of the earlier phases) */
} ev_opts;

/* |logprob(reference) - logprob(llama.cpp)| over the top 10 that counts as
 * agreement: the reference-vs-llama.cpp tolerance of test_hybrid_peer
 * (docs/hybrid.md: worst seen 3.7e-5 over 576 steps; 5.8e-6 on probe-attn),
 * and far below what one wrong reading costs (0.36 for no output gate,
 * 0.46 for q_norm w instead of 1+w). */
#define EV_TOL 2e-3

/* Runs the loop; returns one of the EV_EX_* statuses. */
int ev_run(const ev_opts *o);
/* mi-gen's --evolve: resolves the paths (defaults as mi-gen's own run) and
 * runs the loop. The report goes to run_dir, else OUT/evolve. */
int ev_main(const char *argv0, const char *exe_dir, const char *refs, const char *candidates, const char *ckb,
            const char *model, const char *platform, const char *dtype, const char *out, const char *run_dir,
            const char *goldens, int no_revalidate);

/* ---- shared by the phases ---- */
typedef struct ev_ctx {
  const ev_opts *o;
  json_t *reads;   /* [{path, bytes, sha256, phase}] */
  json_t *report;  /* the evolve.json object under construction */
  double t0;       /* the run's start (monotonic seconds) */
  json_t *model_cfg; /* a probe checkpoint's config.json: where the new fields live (set by phase 3) */
  char refs_abs[4096];
} ev_ctx;

/* Reads a whole file and logs it (path, bytes, sha256, phase) when it is
 * under --refs or the candidate bundle. NULL with a message naming the file. */
unsigned char *ev_read(ev_ctx *c, const char *path, const char *phase, size_t *len, char *err, size_t n);
json_t *ev_read_json(ev_ctx *c, const char *path, const char *phase, char *err, size_t n);
/* Every regular file under dir, sorted (deterministic), as a JSON array of
 * paths; NULL with a message. */
json_t *ev_list_files(const char *dir, char *err, size_t n);

/* One reading of the math: a point in the variant space. */
typedef struct ev_candidate {
  vf_qwen35_variant v;
  char name[96]; /* "norm=1+w qk=1+w rotary=partial gate=interleaved" */
} ev_candidate;
/* The whole product of the four dimensions in a fixed order (36); the
 * first is the closest covered contract's reading (model.qwen3). */
int ev_candidates(ev_candidate *out, int max);
void ev_candidate_name(const vf_qwen35_variant *v, char *out, size_t n);

/* A golden's checkpoint remade from its recorded mi-mkmodel arguments
 * into dir (its bytes checked against the recorded hash). 0, or -1. */
int ev_remake_checkpoint(const ev_opts *o, const json_t *golden, const char *dir, char *err, size_t n);

/* Max |top-10 logprob difference| of the reference (as configured) against
 * a golden, teacher-forced, state carried; *steps counts the steps. 0, or -1. */
int ev_oracle_error(vf_qwen35 *m, const json_t *golden, double *max_err, int *steps, char *err, size_t n);

/* Phase 3: scores every candidate on every probe golden (array of
 * {"path", "golden"}); writes rows to *table and the found reading to
 * *found. 0 found (one passing candidate, the same on every probe), 1 none
 * or ambiguous (the reason in err), -1 error. */
int ev_variant_search(ev_ctx *c, json_t *probes, json_t **table, vf_qwen35_variant *found, char *err, size_t n);

/* Phase 4: the bundle (operators as units, then end to end). Writes its
 * part of the report to *out; 0 accepted, 1 rejected (err names it), -1. */
int ev_bundle_verify(ev_ctx *c, const vf_qwen35_variant *found, json_t *e2e_goldens, json_t **bundle,
                     json_t **out, char *err, size_t n);

/* The platform contract `plat` extended by the bundle's kernels for
 * `platform` (bundle "kernels": {"cpu": [...]}): each operator listed with
 * dtype f32, abi.minor raised to the bundle's "abi". A new object, or NULL
 * when the bundle has no kernels for that platform (why in err). */
json_t *ev_platform_with_bundle(const json_t *plat, const json_t *bundle, const char *platform, char *err, size_t n);

/* Phase 5: writes the entries into o->ckb; *out lists them. 0, or -1. */
int ev_consolidate(ev_ctx *c, const vf_qwen35_variant *found, const json_t *bundle, const json_t *search,
                   json_t **out, char *err, size_t n);

/* The report: RUN_DIR/evolve.json and evolve.md. */
int ev_report_write(const ev_ctx *c, char *err, size_t n);

#endif
