/* mi-gen's strategy selection, LLM endpoint, budgets and source references
 * (the flags of the LLM-backed agents), kept apart from mi-gen.c's loop:
 * the loop calls these hooks and knows nothing of endpoints or budgets. */
#ifndef MI_CLI_MI_GEN_LLM_H
#define MI_CLI_MI_GEN_LLM_H

#include <getopt.h>
#include <jansson.h>
#include <stddef.h>

#include "core/gen/gen.h"

/* mi-gen's exit status when a budget (iterations, tokens, requests, wall
 * time; per run or per role) is spent: the best partial result is in
 * ENGINE_DIR/partial. */
#define GEN_EX_BUDGET 9

/* base + this module's long options, in one array owned here */
const struct option *gen_llm_longopts(const struct option *base);
/* 0: the option was this module's and is fine; 1: not this module's; -1: a
 * bad value (the line printed). */
int gen_llm_option(int ch, const char *arg);
/* The usage lines of these options. */
const char *gen_llm_usage(void);
/* Applies --budget-iterations / --budget-wall (run) onto mi-gen's own. */
void gen_llm_run_limits(int *max_iter, double *wall_s);
/* After the CKB, model, constraints and run dir are known: checks the
 * endpoint settings and the roots. 0, or -1 with the line printed. */
int gen_llm_setup(const char *ckb_abs, const char *model_abs, const char *cons_file, const char *exe_dir,
                  const char *run_dir);

const char *gen_llm_strategy(const char *role); /* "compose", "rules", "llm", "stages" */
int gen_llm_is_llm(const char *role);
void gen_llm_plugin_path(const char *exe_dir, const char *role, const char *strategy, char *out, size_t n);
double gen_llm_timeout(const char *role, double dflt);
/* Adds what an LLM strategy needs to its task (SDK headers, references,
 * the previous candidate, sampling settings). */
void gen_llm_decorate_task(const char *role, json_t *task);
/* Runs one agent with the host services of its role. */
int gen_llm_run_agent(const char *plugin_path, const char *role, json_t *task, const char *ckb_dir,
                      const char *run_dir, double timeout_s, mi_agent_outcome *o);
/* Books what the call spent and read; adds the host report to its journal line. */
void gen_llm_account(const char *role, const mi_agent_outcome *o, json_t *journal_line);
/* A spent budget before the next call of `role`: the reason (static), or NULL. */
const char *gen_llm_budget_check(const char *role);
/* The last call ended on a spent budget (the host refused an LLM request). */
const char *gen_llm_budget_spent(void);
/* A candidate and how far it got (stages passed; -1 rejected by review). */
void gen_llm_note_candidate(const char *source_sha, int iteration, int stages_passed);
/* Writes OUT/partial/{engine.c, manifest.json} for the best candidate. */
void gen_llm_write_partial(const char *out_abs, const char *run_dir, const char *reason, json_t *constraints);
/* The manifest's "generation" section: strategies, endpoint (never the key),
 * budgets, spend per role, references and every read. New reference. */
json_t *gen_llm_manifest(void);
void gen_llm_free(void);

/* The i-th --refs folder (NULL past the last): mi-gen --evolve reads its
 * references there. */
const char *gen_llm_ref(int i);

#endif
