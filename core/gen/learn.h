/* What a mi-gen run learns besides a repair, written into the CKB it uses.
 *
 *   failure_report  every failed candidate: keyed by the model contract and
 *                   the symptom (stage, test contract, the message with its
 *                   numbers and paths taken out), so the same failure seen
 *                   again on another shape, seed or run is one entry whose
 *                   occurrences and checkpoints grow, never a new file per
 *                   run; open until a failure-mode repair clears it, then
 *                   repaired (the failure mode, the patch, the experience)
 *   knowledge_gap   every line of a coverage gap (a config field or value
 *                   no contract reads, a weight outside the map, an
 *                   architecture no contract lists, ...), keyed by the line
 *
 * Both are bounded by what differs, not by how often mi-gen runs: a CKB
 * that tests or users point mi-gen at again and again grows by one entry
 * per distinct symptom. MI_CKB_LEARN=0 (or off/no/false) turns both off
 * (the test suites set it: they run mi-gen on the shipped CKB). A CKB that
 * cannot be written (an installed, read-only one) costs one line on
 * stderr, never the run. Read-modify-write: two runs writing the same entry
 * at once may count one occurrence once; each write itself is atomic
 * (mi_ckb_put). */
#ifndef MI_CORE_GEN_LEARN_H
#define MI_CORE_GEN_LEARN_H

#include <jansson.h>
#include <stddef.h>

#include "core/ckb/ckb.h"

/* 0 when MI_CKB_LEARN says off, else 1. */
int mi_learn_enabled(void);

/* The message with every number replaced by '#' and every path-like word
 * by "<path>", blanks collapsed, at most n-1 bytes: what a symptom is keyed
 * by, so "diff 3.2e-02 at step 17" and "diff 4.1e-03 at step 9" are one. */
void mi_learn_signature(const char *msg, char *out, size_t n);

/* Records one failed candidate of `contract` (the model contract entry).
 * cfg_path: the checkpoint's config.json; cons: the constraints object
 * (platform, dtype, tp, kv_type); stage: "1".."6", "review", ...; tried:
 * the failure modes tried so far (array of ids, may be NULL). The report's
 * id goes to id_out. Returns 1 when a new entry was written, 0 when an
 * existing one was updated, -1 when nothing was written (a line on stderr). */
int mi_learn_failure(const char *ckb_dir, const mi_ckb_entry *contract, const char *cfg_path,
                     const json_t *cons, const char *stage, const char *test_contract,
                     const char *message, const json_t *tried, const char *run_dir, char *id_out,
                     size_t id_n);

/* Marks the report `report_id` repaired by `failure_mode` with `patch`
 * ({operator, arg, value}) and the experience it led to (may be NULL). */
int mi_learn_repaired(const char *ckb_dir, const char *report_id, const char *failure_mode,
                      const json_t *patch, const char *experience_id);

/* The failure mode that cleared the report `report_id` the last time it
 * was repaired (its repaired_by), into out; 0, or -1 when it has none. A
 * later run tries that repair first for the same symptom. */
int mi_learn_last_repair(const char *ckb_dir, const char *report_id, char *out, size_t n);

/* Records every line of cov's "missing" (mi_ckb_coverage's report) as a
 * knowledge gap. *n_new / *n_seen: how many were new and how many had been
 * seen before. Returns 0, or -1 when some could not be written. */
int mi_learn_gaps(const char *ckb_dir, const json_t *cov, const char *cfg_path,
                  const char *platform, int *n_new, int *n_seen);

#endif
