/* The knowledge-evolution loop (issue #15): `mi-gen --evolve --refs DIR
 * [--candidates DIR]` absorbs a model family the CKB does not cover, with
 * no LLM, in six timed phases, each written to RUN_DIR/evolve.json and
 * RUN_DIR/evolve.md (docs/evolution.md):
 *   1 coverage        the gap report of core/ckb/coverage.c
 *   2 exploration     every file under --refs (and of the candidate bundle)
 *                     read through ev_read, which logs path, bytes, sha256
 *                     and phase; with no --refs nothing there is read
 *   3 variant search  the closest contract edited by combinations of the
 *                     vocabulary's variants (ckb/variants/) whose evidence
 *                     the checkpoint shows, each interpreted in float64
 *                     against the llama.cpp goldens of the probe checkpoints
 *   4 bundle          (when a layer kind or operator is missing) the
 *                     candidate operators as operator units, then the found
 *                     reading with the bundle's layer kind end to end
 *   5 consolidation   operator, model and experience entries into --ckb,
 *                     once the result explains every config field and
 *                     weight of the probes and of --model
 *   6 revalidation    mi-gen from scratch, references off, on the new CKB
 * One file per job: reads.c (the logged reads), contract_edit.c (the
 * vocabulary and contract edits), variant_search.c, bundle.c,
 * consolidate.c, report.c, evolve.c (the phases). */
#ifndef MI_CORE_GEN_EVOLVE_H
#define MI_CORE_GEN_EVOLVE_H

#include <jansson.h>
#include <stddef.h>

#include "core/ckb/ckb.h"

struct mi_weights;

/* Exit statuses of the loop (mi-gen's own run 0..11). */
enum {
  EV_EX_OK = 0,          /* absorbed: revalidation passed every stage */
  EV_EX_USAGE = 2,       /* a run that cannot be set up */
  EV_EX_GAP = 3,         /* references off: the gap stays (nothing to search with) */
  EV_EX_NO_VARIANT = 12, /* the variant search found no single passing reading (or the probes disagree) */
  EV_EX_BUNDLE = 13,     /* the candidate bundle was rejected (the line names the contract) */
  EV_EX_CONSOLIDATE = 14,/* an entry did not validate in the target CKB */
  EV_EX_REVALIDATE = 15, /* revalidation ran and a stage failed */
  EV_EX_COMPOSER = 16,   /* revalidation: the composer lacks layer kinds (no hybrid engines yet) */
  EV_EX_UNEXPLAINED = 17 /* the result leaves config fields or weights of a checkpoint unexplained (each named) */
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
  char probe_dir[4400]; /* the first probe's checkpoint, remade (set by phase 3) */
  char refs_abs[4096];
} ev_ctx;

/* A CKB check's diagnostics (mi_ckb_diag_fn ev_diag_first): the first
 * line, and how many there were. */
typedef struct ev_diag_buf {
  char text[2048];
  int n;
} ev_diag_buf;
void ev_diag_first(void *user, const char *line);
/* Reads a whole file and logs it (path, bytes, sha256, phase) when it is
 * under --refs or the candidate bundle. NULL with a message naming the file. */
unsigned char *ev_read(ev_ctx *c, const char *path, const char *phase, size_t *len, char *err, size_t n);
json_t *ev_read_json(ev_ctx *c, const char *path, const char *phase, char *err, size_t n);
/* Every regular file under dir, sorted (deterministic), as a JSON array of
 * paths; NULL with a message. */
json_t *ev_list_files(const char *dir, char *err, size_t n);

/* ---- the vocabulary (contract_edit.c; entries of kind "variant") ----
 * ev_vocab: every variant entry of the CKB, by group, then order, then id
 * (a new array). ev_cfg_field: a config.json field at the top level, one
 * object down or by dotted path. ev_evidence: 1 when every evidence item of
 * the entry holds in the checkpoint. ev_apply: the contract edited by the
 * entries (an array), structure first, then settings (a new object).
 * ev_missing_kinds: the per-layer kinds the checkpoint names that the
 * contract does not compute (a new array). ev_probe_form: the contract with
 * each such kind as a layer kind marked "muted": the layer from its first
 * residual add on (a probe zeroes that kind's output projection), unless a
 * member of groups (group -> members in play; may be NULL) splits the layer
 * into those kinds (split_kinds): then they are computed, not muted.
 * ev_with_layer: the muted kind replaced by a candidate bundle's layer
 * (sequence, state, weights, buffers, the config fields it reads).
 * ev_explain: appends one line per config field or weight of the
 * checkpoint the contract does not explain to `unexplained`, or (when
 * `deferred` is given) to `deferred` when it belongs to a kind the contract
 * lacks; returns the number of unexplained lines. */
json_t *ev_vocab(const mi_ckb *c);
const json_t *ev_cfg_field(const json_t *cfg, const char *name);
int ev_evidence(const json_t *variant, const json_t *cfg, const struct mi_weights *w);
/* 1 when the checkpoint holds a tensor matching key ({i}: any layer) */
int ev_has_weight(const struct mi_weights *w, const char *key);
json_t *ev_apply(const json_t *contract, const json_t *variants, const json_t *cfg);
json_t *ev_missing_kinds(const json_t *contract, const json_t *cfg);
json_t *ev_probe_form(const json_t *base, const json_t *cfg, const json_t *groups);
json_t *ev_with_layer(const json_t *contract, const json_t *layer, const json_t *cfg);
/* The consolidated contract's GGUF section: kept when a member variant
 * declared it ("set_gguf": the architecture llama.cpp names the family),
 * its tensors pruned to the contract's weights; dropped otherwise, or when
 * a weight has no GGUF name. 1 kept, 0 dropped. */
int ev_gguf_section(json_t *m);

int ev_explain(const json_t *contract, const json_t *cfg, const struct mi_weights *w, json_t *unexplained,
               json_t *deferred);

/* The model contract of c whose weight map and config fields explain most
 * of the checkpoint (tensors matched, then fields bound; ties by id). */
const mi_ckb_entry *ev_closest_contract(const mi_ckb *c, const json_t *cfg, const struct mi_weights *w);

/* A golden's checkpoint remade from its recorded mi-mkmodel arguments
 * into dir (its bytes checked against the recorded hash). 0, or -1. */
int ev_remake_checkpoint(const ev_opts *o, const json_t *golden, const char *dir, char *err, size_t n);

/* Max |top-10 logprob difference| of the contract, interpreted in float64
 * over the operators of c (core/verify/interp.h), against a golden,
 * teacher-forced: one forward per case over the prompt and the steps'
 * tokens, the logits of each step's position compared. *steps counts the
 * steps. 0, or -1. */
int ev_oracle_error(const mi_ckb *c, const json_t *contract, const json_t *cfg, const struct mi_weights *w,
                    const json_t *golden, double *max_err, int *steps, char *err, size_t n);

/* Phase 3: from the closest contract, every combination of the members of
 * each variant group whose evidence holds in the first probe's checkpoint,
 * applied as a contract edit; candidates that leave a field or weight
 * unexplained are not scored; the others are scored on every probe golden
 * (array of {"path", "golden"}). Rows go to *table; *found is {"name",
 * "base", "variants": [ids], "contract": the edited contract in probe form,
 * "deferred": [what the candidate bundle must explain], "operators": [ids
 * the CKB lacks]}. 0 found (one passing candidate, the same on every
 * probe), 1 none or ambiguous (the reason in err), -1 error. */
int ev_variant_search(ev_ctx *c, json_t *probes, json_t **table, json_t **found, char *err, size_t n);

/* A copy of the CKB under run_dir/NAME with the candidate bundle's
 * operator contracts the target lacks (read through the log); the path in
 * dir. 0, or -1. Without --candidates: a plain copy. */
int ev_scratch_ckb(ev_ctx *c, const char *name, char *dir, size_t dn, char *err, size_t n);

/* Phase 4: the bundle (operators as units, then end to end with `found`'s
 * contract and the bundle's layer). Writes its part of the report to *out;
 * 0 accepted, 1 rejected (err names it), -1. */
int ev_bundle_verify(ev_ctx *c, const json_t *found, json_t *e2e_goldens, json_t **bundle, json_t **out, char *err,
                     size_t n);

/* The platform contract `plat` extended by the bundle's kernels for
 * `platform` (bundle "kernels": {"cpu": [...]}): each operator listed with
 * dtype f32, abi.minor raised to the bundle's "abi". A new object, or NULL
 * when the bundle has no kernels for that platform (why in err). */
json_t *ev_platform_with_bundle(const json_t *plat, const json_t *bundle, const char *platform, char *err, size_t n);

/* The model entry phase 5 writes: found's contract (with the bundle's
 * layer when one was verified), named from the checkpoint's config
 * (architectures[0] without its For... suffix, lowercased: model.NAME).
 * A new object, or NULL with the reason in err. */
json_t *ev_model_entry(const ev_ctx *c, const json_t *found, const json_t *bundle, char *err, size_t n);

/* Phase 5: writes the entries into o->ckb; *out lists them. 0, or -1. */
int ev_consolidate(ev_ctx *c, const json_t *found, const json_t *bundle, const json_t *search, json_t **out,
                   char *err, size_t n);

/* The report: RUN_DIR/evolve.json and evolve.md. */
int ev_report_write(const ev_ctx *c, char *err, size_t n);

#endif
