/* reviewer.llm: a language model reviews an engine's source against the
 * contracts, before anything of it runs. The source and the contracts go in
 * (read through the host's file tool); a JSON verdict comes out:
 *   {"verdict": "approved"|"rejected",
 *    "findings": [{"severity": "error"|"warning"|"info", "rule": STRING,
 *                  "line": INTEGER >= 0, "message": STRING}]}
 * schema-checked: an answer that is not such an object (or rejects with no
 * error finding, or approves with one) is malformed, noted in the journal and
 * asked again, each answer counting against the budgets; after
 * task.llm.attempts answers (default 3) the agent gives up.
 * Task: {"source": SHA, "constraints", "model_dir", "llm"}. Result:
 * {"status":"ok", "verdict", "findings", "answers"} (reviewer.rules'). */
#define _GNU_SOURCE
#include "../common.h"
#include "../llm_common.h"
#include "mi/agent.h"
#include "mi/plugin.h"

/* 0 when v is a verdict object; otherwise why in `why`. */
static int check_verdict(json_t *v, char *why, size_t wl) {
  if (!json_is_object(v)) return snprintf(why, wl, "the answer holds no JSON object"), -1;
  const char *verdict = json_string_value(json_object_get(v, "verdict"));
  if (!verdict || (strcmp(verdict, "approved") && strcmp(verdict, "rejected")))
    return snprintf(why, wl, "\"verdict\" must be \"approved\" or \"rejected\""), -1;
  json_t *fs = json_object_get(v, "findings");
  if (!json_is_array(fs)) return snprintf(why, wl, "\"findings\" must be an array"), -1;
  size_t i;
  json_t *f;
  int errors = 0;
  json_array_foreach(fs, i, f) {
    const char *sev = json_string_value(json_object_get(f, "severity"));
    json_t *line = json_object_get(f, "line"), *rule = json_object_get(f, "rule");
    if (!json_is_object(f) || !sev || (strcmp(sev, "error") && strcmp(sev, "warning") && strcmp(sev, "info")))
      return snprintf(why, wl, "findings[%zu].severity must be error, warning or info", i), -1;
    if (!json_is_string(json_object_get(f, "message")))
      return snprintf(why, wl, "findings[%zu].message must be a string", i), -1;
    if (line && (!json_is_integer(line) || json_integer_value(line) < 0))
      return snprintf(why, wl, "findings[%zu].line must be an integer >= 0", i), -1;
    if (rule && !json_is_string(rule)) return snprintf(why, wl, "findings[%zu].rule must be a string", i), -1;
    errors += !strcmp(sev, "error");
  }
  if (!strcmp(verdict, "rejected") && !errors) return snprintf(why, wl, "a rejection needs at least one error finding"), -1;
  if (!strcmp(verdict, "approved") && errors) return snprintf(why, wl, "an approval cannot carry error findings"), -1;
  return 0;
}

static int reviewer_run(void *ctx, const mi_agent_task *t, char **result, char *err, size_t el) {
  (void)ctx;
  const mi_agent_host *h = lc_task_host(t, "reviewer.llm", err, el);
  if (!h) return -1;
  json_t *task = json_loads(t->task_json, 0, NULL);
  const char *sha = json_string_value(json_object_get(task, "source"));
  const char *model_dir = json_string_value(json_object_get(task, "model_dir"));
  json_t *cons = json_object_get(task, "constraints");
  if (!task || !sha || !model_dir) {
    snprintf(err, el, "reviewer.llm: the task lacks source or model_dir");
    json_decref(task);
    return -1;
  }
  char p[4200];
  snprintf(p, sizeof p, "%s/artifacts/%s.c", t->run_dir, sha);
  char *src = lc_read(h, p, (size_t)4 << 20, NULL, err, el);
  json_t *ctr = src ? lc_contracts(h, t->ckb_dir, model_dir, json_string_value(json_object_get(cons, "platform")), err, el) : NULL;
  if (!src || !ctr) {
    free(src);
    json_decref(task);
    return -1;
  }
  lc_buf b = {0};
  lc_add(&b, "Review this generated engine.c against the contracts: operator sequence and order, constants equal to\n"
             "config.json, no allocation in the forward pass, no file/network/environment access, only the platform\n"
             "members the platform contract lists. Answer with one JSON object only:\n"
             "{\"verdict\": \"approved\"|\"rejected\", \"findings\": [{\"severity\": \"error\"|\"warning\"|\"info\",\n"
             "  \"rule\": \"...\", \"line\": N, \"message\": \"...\"}]}\n"
             "Reject only with at least one error finding.\n\n");
  lc_add_json(&b, "Constraints", cons);
  lc_add_json(&b, "config.json", json_object_get(ctr, "config"));
  lc_add_json(&b, "Model contract", json_object_get(ctr, "model"));
  lc_add_json(&b, "Platform contract", json_object_get(ctr, "platform"));
  lc_add(&b, "### engine.c\n```c\n%s\n```\n", src);
  free(src);
  json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content",
                           "You are MetaInfer's spec reviewer. You answer with a JSON verdict and nothing else.", "role",
                           "user", "content", b.s ? b.s : "");
  free(b.s);
  json_t *llm = json_object_get(task, "llm");
  int attempts = json_is_integer(json_object_get(llm, "attempts")) ? (int)json_integer_value(json_object_get(llm, "attempts")) : 3;
  int rc = -1, answers = 0;
  char why[300] = "";
  for (int a = 0; a < attempts; a++) {
    char *ans = lc_chat(h, msgs, llm, err, el);
    if (!ans) goto out;
    answers++;
    json_t *v = lc_answer_json(ans);
    if (check_verdict(v, why, sizeof why) == 0) {
      free(ans);
      ag_result(result, json_pack("{s:s, s:O, s:O, s:i}", "status", "ok", "verdict", json_object_get(v, "verdict"), "findings",
                                  json_object_get(v, "findings"), "answers", answers));
      json_decref(v);
      rc = 0;
      goto out;
    }
    json_decref(v);
    lc_ask_again(h, msgs, "reviewer.llm", answers, why, ans, "Answer again with the JSON verdict only.");
  }
  snprintf(err, el, "reviewer.llm: %d malformed answer%s, the last: %s", answers, answers == 1 ? "" : "s", why);
out:
  json_decref(msgs);
  json_decref(ctr);
  json_decref(task);
  return rc;
}

AG_DEFINE_V("reviewer", "llm", "reviewer.llm", "spec review by a language model, a schema-checked JSON verdict", reviewer_run, MI_AGENT_HOST_VERSION)
