/* What the agent host lends an agent process (mi/agent.h, mi_agent_host):
 * the LLM client of the run and read-only file access limited to allowed
 * roots. The services run in the agent's own (forked) process, inside the
 * core's code, so an agent plugin never links libcurl; what they spent and
 * read comes back to the orchestrator with the result, written by the core's
 * code after the agent's run() returned, never by the agent. */
#ifndef MI_CORE_GEN_AGENT_HOST_H
#define MI_CORE_GEN_AGENT_HOST_H

#include <jansson.h>
#include <stdint.h>

#include "core/llm/client.h"
#include "mi/agent.h"

typedef struct mi_agent_host_cfg {
  const mi_llm_config *llm;   /* NULL: llm_chat refuses (no endpoint, no replay) */
  const json_t *llm_seen;     /* record/replay counters of the run so far, or NULL */
  int64_t requests_left;      /* this call's share of the budgets; < 0: unlimited */
  int64_t tokens_left;
  const char *const *roots;   /* readable folders (or single files), absolute */
  size_t n_roots;
  const char *model_dir;      /* its config files and weight headers are readable */
  const char *run_dir;        /* its artifacts/<sha>.c (candidate sources) are readable */
} mi_agent_host_cfg;

/* In the agent's process: builds the host table over cfg. The report
 * (usage, record/replay counters, reads, refusals, notes) is then taken with
 * mi_agent_services_report. */
typedef struct mi_agent_services mi_agent_services;
mi_agent_services *mi_agent_services_new(const mi_agent_host_cfg *cfg);
const mi_agent_host *mi_agent_services_host(mi_agent_services *s);
/* {"llm":{requests, attempts, prompt_tokens, completion_tokens, seconds},
 *  "llm_seen":{...}, "reads":[{path, bytes}], "refused":[{path, why}],
 *  "notes":[...], "budget_spent": "requests"|"tokens" (absent when not)} */
json_t *mi_agent_services_report(mi_agent_services *s);
void mi_agent_services_free(mi_agent_services *s);

/* Is `path` readable under cfg's roots? 1 yes (real path in real_out), 0 no
 * (the reason in why). weight_header: set to 1 when only the header of a
 * weight file may be read. */
int mi_agent_path_allowed(const mi_agent_host_cfg *cfg, const char *path, char *real_out, size_t real_len,
                          int *weight_header, char *why, size_t why_len);

#endif
