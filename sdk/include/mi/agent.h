/* The agent interface for `mi-gen`. An agent plugin (kind MI_PLUGIN_AGENT)
 * is one strategy for one role of the generation loop: implementer
 * (compose, llm), reviewer (rules, llm), verifier (stages), and later
 * explorer, consolidator, optimizer.
 *
 * The orchestrator runs every agent in a process of its own (fork, then the
 * child dlopens the agent plugin and calls run() once). An agent shares
 * nothing with the others but the blackboard (the run directory) and a
 * read-only view of the CKB. Its task and its result are JSON text; the
 * result travels back over a pipe the orchestrator owns, which records the
 * role and pid it came from: a file an agent (or a candidate engine) writes
 * into the run directory is never taken as a result. Only a result that
 * arrived on the verifier's pipe can record a stage as passed.
 *
 * Task (JSON object), common fields:
 *   "role", "strategy", "ckb_dir" (read-only), "run_dir", "constraints",
 *   "model_dir", "iteration"; role-specific fields are documented with each
 *   strategy (plugins/agents/<name>/README.md).
 * Result (JSON object): "status": "ok" | "error", "message", and the role's
 *   payload (an artifact written under run_dir/artifacts is named by its
 *   sha256; the orchestrator re-hashes it before using it).
 *
 * Members are only ever appended (see mi/plugin.h).
 */
#ifndef MI_AGENT_H
#define MI_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_agent_task {
  uint32_t struct_size;
  const char *task_json; /* the task, a JSON object as text */
  const char *ckb_dir;   /* read-only CKB view */
  const char *run_dir;   /* the blackboard: artifacts go under run_dir/artifacts */
} mi_agent_task;

typedef struct mi_agent_iface {
  uint32_t struct_size;
  const char *role;     /* "implementer" | "reviewer" | "verifier" | ... */
  const char *strategy; /* "compose", "rules", "stages", "llm", ... */
  /* Runs one task. On success returns 0 and a malloc'd JSON object text in
   * *result (freed by the caller with free()); otherwise -1 and one line in err. */
  int (*run)(void *ctx, const mi_agent_task *task, char **result, char *err, size_t err_len);
} mi_agent_iface;

#ifdef __cplusplus
}
#endif
#endif
