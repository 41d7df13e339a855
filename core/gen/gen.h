/* mi-gen's core: the blackboard (run directory) and the agent host.
 *
 * Blackboard = RUN_DIR/journal.jsonl (append-only JSON lines, each fsync'd,
 * written only by the orchestrator process) + RUN_DIR/artifacts/<sha256>.<ext>
 * (content-addressed; written to a temp file, fsync'd, renamed). Agents may
 * write artifacts; the orchestrator re-hashes an artifact before using it,
 * so a file whose bytes do not match its name is never used.
 *
 * Trust: every journal line names the role and pid of the process whose
 * pipe produced it ("by"). Decisions in a live run come from the pipes, never
 * from reading the journal; on --resume the journal tells which candidates
 * were tried (the work to skip), and a recorded verdict is never trusted:
 * the candidate that is to be shipped is verified again by a verifier
 * process of this run.
 */
#ifndef MI_CORE_GEN_H
#define MI_CORE_GEN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* SHA-256 as 64 hex digits (libcrypto). */
void mi_sha256_buf(const void *data, size_t n, char out[65]);
int mi_sha256_file(const char *path, char out[65]); /* 0, or -1 when unreadable */

typedef struct mi_bb mi_bb;
/* Opens (create: makes) RUN_DIR. NULL + err. */
mi_bb *mi_bb_open(const char *run_dir, int create, char *err, size_t err_len);
void mi_bb_close(mi_bb *b);
const char *mi_bb_dir(const mi_bb *b);
/* Appends one line (a "seq" and "time" are added; the entry is not stolen). 0 or -1. */
int mi_bb_append(mi_bb *b, json_t *entry);
/* Stores bytes as artifacts/<sha>.<ext>; sha_out gets the hash. 0 or -1. */
int mi_bb_put(mi_bb *b, const void *data, size_t n, const char *ext, char sha_out[65]);
int mi_bb_put_file(mi_bb *b, const char *path, const char *ext, char sha_out[65]);
/* The artifact's path (in out) after re-hashing it: 0 when its bytes match
 * its name, -1 otherwise (missing or tampered with). */
int mi_bb_artifact(const mi_bb *b, const char *sha, const char *ext, char *out, size_t n);
/* Every journal line of RUN_DIR as an array (lines that do not parse are
 * skipped and counted in *bad). NULL when there is no journal. */
json_t *mi_bb_read_journal(const char *run_dir, int *bad);

/* ---- the agent host ---- */
typedef struct mi_agent_outcome {
  json_t *result; /* parsed result object (owned), or NULL */
  pid_t pid;      /* the agent's process */
  int exit_code;  /* -1 when killed by a signal */
  int timed_out;
  double wall_s;
  char message[512]; /* why there is no result */
  json_t *host_report; /* what the lent services spent and read (agent_host.h), or NULL */
} mi_agent_outcome;
/* Runs the agent plugin at `plugin_path` on `task` in a forked child (the
 * plugin is dlopened there, never in the caller), waits at most timeout_s. */
int mi_agent_run(const char *plugin_path, json_t *task, const char *ckb_dir, const char *run_dir,
                 double timeout_s, mi_agent_outcome *out);
void mi_agent_outcome_free(mi_agent_outcome *o);
/* The same, lending the agent the host services over `cfg` (LLM, file tool;
 * core/gen/agent_host.h). cfg NULL: the file tool reads the CKB only and no
 * LLM is lent. An agent that needs a newer host services version than this
 * core lends is refused with a line naming both. */
struct mi_agent_host_cfg;
int mi_agent_run_ex(const char *plugin_path, json_t *task, const char *ckb_dir, const char *run_dir,
                    double timeout_s, const struct mi_agent_host_cfg *cfg, mi_agent_outcome *out);

#endif
