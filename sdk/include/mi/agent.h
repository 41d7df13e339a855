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
 * Host services (agent host API, versioned apart from the plugin ABI): the
 * task carries a table of what the core lends an agent -- one chat
 * completion through the core's OpenAI-compatible client (endpoint, key,
 * retries, record/replay and budgets stay the core's), and read-only file
 * access limited to the allowed roots (the CKB, the constraints, the model's
 * config and weight headers, the SDK headers, the run's candidate sources,
 * and --refs folders when references are on). Every read, allowed or
 * refused, is logged in the journal and listed in the manifest. An agent
 * that needs the services sets mi_agent_iface.host_version; the host refuses
 * one that needs a newer version than it lends, with a line naming both.
 * Agents built before the services existed load and run as before.
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

/* Version 1 of the host services. A later version only appends members. */
#define MI_AGENT_HOST_VERSION 1

typedef struct mi_agent_host {
  uint32_t struct_size;
  uint32_t version; /* MI_AGENT_HOST_VERSION of the lending core */
  void *ctx;        /* the first argument of every call below */
  /* One chat completion. request_json: {"messages":[{"role","content",
   * "tool_call_id"?, "tool_calls"?}], "temperature"?, "seed"?, "max_tokens"?, "tools"?,
   * "stream"?}. On 0, *response_json (malloc'd, free()) is {"content",
   * "tool_calls"|null, "finish_reason", "usage":{"prompt_tokens",
   * "completion_tokens","estimated"}}. On -1 one line in err; when the
   * run's or the role's budget is spent the line starts "budget spent:". */
  int (*llm_chat)(void *ctx, const char *request_json, char **response_json, char *err, size_t err_len);
  /* Reads a file under the allowed roots (at most max bytes; a weight file
   * gives its header only). 0 with *data malloc'd and NUL-terminated, or -1
   * with the reason (a read outside the roots is refused and logged). */
  int (*read_file)(void *ctx, const char *path, size_t max, char **data, size_t *len, char *err, size_t err_len);
  /* The names in a folder under the allowed roots, one a line, sorted
   * (malloc'd), or -1 with the reason. */
  int (*list_dir)(void *ctx, const char *path, char **names, char *err, size_t err_len);
  /* A one-line note for the journal (e.g. why an answer was refused). */
  void (*note)(void *ctx, const char *line);
} mi_agent_host;

typedef struct mi_agent_task {
  uint32_t struct_size;
  const char *task_json; /* the task, a JSON object as text */
  const char *ckb_dir;   /* read-only CKB view */
  const char *run_dir;   /* the blackboard: artifacts go under run_dir/artifacts */
  /* appended (host services v1): NULL when the core lends none */
  const mi_agent_host *host;
} mi_agent_task;

typedef struct mi_agent_iface {
  uint32_t struct_size;
  const char *role;     /* "implementer" | "reviewer" | "verifier" | ... */
  const char *strategy; /* "compose", "rules", "stages", "llm", ... */
  /* Runs one task. On success returns 0 and a malloc'd JSON object text in
   * *result (freed by the caller with free()); otherwise -1 and one line in err. */
  int (*run)(void *ctx, const mi_agent_task *task, char **result, char *err, size_t err_len);
  /* appended: the host services version the agent needs (0: none) */
  uint32_t host_version;
} mi_agent_iface;

/* The host table of a task, or NULL when the core lends none or an older
 * version than `need` (an agent then refuses in one line). */
static inline const mi_agent_host *mi_agent_task_host(const mi_agent_task *t, uint32_t need) {
  if (t->struct_size < offsetof(mi_agent_task, host) + sizeof(t->host) || !t->host) return NULL;
  if (t->host->struct_size < offsetof(mi_agent_host, note) + sizeof(t->host->note) || t->host->version < need)
    return NULL;
  return t->host;
}

#ifdef __cplusplus
}
#endif
#endif
