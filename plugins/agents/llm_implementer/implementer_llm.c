/* implementer.llm: asks a language model (through the host's LLM client)
 * for a whole engine.c.
 *
 * The prompt holds the constraints, the model's config.json and weight
 * header, the contracts that apply (model, platform, the platform's
 * operators), the experience and failure modes related to them, the SDK
 * headers an engine is written against, the patches the orchestrator asks
 * for, and on a retry the previous candidate and the reviewer's or
 * verifier's structured report (stage, verdict, the failed stage's message:
 * never evidence, goldens or the verifier's seed, which it is never given).
 * Everything is read through the host's file tool.
 *
 * The answer must carry the source in one fenced block (```c); the longest
 * such block is taken and size-checked (at least MIN_SRC bytes, at most
 * task.max_source_bytes, and a plugin: MI_PLUGIN_DEFINE). A malformed
 * answer (no block, a fence left open, too small or too large) is noted in
 * the journal and asked again; each answer counts against the run's
 * request and token budgets, and after task.llm.attempts answers (default
 * 3) the agent gives up.
 *
 * With source references on (task.refs non-empty) the model is offered one
 * tool, read_file(path): the host's file tool answers it (a path outside
 * the allowed roots is refused, and the refusal is the tool's answer); at
 * most MAX_TOOL_ROUNDS such rounds per answer, each a request against the
 * budgets. A tool call answered by the model with references off is
 * answered the same way (and refused unless the path is in the CKB etc.).
 *
 * Task: the implementer's (constraints, model_dir, engine_name, patches,
 * iteration, feedback) plus sdk_include, refs, llm {temperature, seed},
 * previous_source. Result: {"status":"ok", "source": SHA, "engine_name",
 * "contracts", "experience", "patches", "lines", "answers"}. */
#define _GNU_SOURCE
#include "../common.h"
#include "../llm_common.h"
#include "core/gen/gen.h"
#include "mi/agent.h"
#include "mi/plugin.h"

#define MIN_SRC 200
#define MAX_TOOL_ROUNDS 8
#define MAX_TOOL_READ ((size_t)256 << 10)
#define MAX_SRC_DEFAULT ((size_t)1 << 20)

static const char *const k_headers[] = {"plugin.h", "host.h", "tensor.h", "platform.h", "model.h", "engine.h"};

static json_t *ref_of(json_t *entry) {
  char *t = json_dumps(entry, JSON_COMPACT | JSON_SORT_KEYS);
  char sha[65] = "";
  if (t) mi_sha256_buf(t, strlen(t), sha);
  free(t);
  return json_pack("{s:O?, s:O?, s:s}", "id", json_object_get(entry, "id"), "version", json_object_get(entry, "version"),
                   "content_sha256", sha);
}

static char *build_prompt(const mi_agent_host *h, const mi_agent_task *t, json_t *task, json_t *ctr, char *err, size_t el) {
  lc_buf b = {0};
  const char *model_dir = json_string_value(json_object_get(task, "model_dir"));
  lc_add(&b, "Write the whole engine.c of a MetaInfer generated engine plugin (kind MI_PLUGIN_ENGINE) for the\n"
             "constraints below. It is compiled alone with `cc -std=gnu11 -O2 -fPIC -shared` against the SDK headers\n"
             "and libm, so it may call only the host API and the platform's kernels. Follow the model contract's\n"
             "operator sequence in order, bake the config in as constants, refuse any other config in one line,\n"
             "and allocate nothing in the forward pass. Answer with the complete file in one ```c fenced block.\n\n");
  lc_add(&b, "Engine name: %s\n\n", json_string_value(json_object_get(task, "engine_name")) ?: "?");
  lc_add_json(&b, "Constraints", json_object_get(task, "constraints"));
  lc_add_json(&b, "config.json", json_object_get(ctr, "config"));
  if (model_dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", model_dir);
    char e2[256];
    size_t n = 0;
    char *hd = lc_read(h, p, (size_t)1 << 20, &n, e2, sizeof e2);
    if (hd) lc_add(&b, "### Weight header (model.safetensors)\n```json\n%s\n```\n\n", hd);
    free(hd);
  }
  lc_add_json(&b, "Model contract", json_object_get(ctr, "model"));
  lc_add_json(&b, "Platform contract", json_object_get(ctr, "platform"));
  lc_add_json(&b, "Operator contracts", json_object_get(ctr, "operators"));
  if (json_array_size(json_object_get(ctr, "experience"))) lc_add_json(&b, "Experience", json_object_get(ctr, "experience"));
  if (json_array_size(json_object_get(ctr, "failure_modes")))
    lc_add_json(&b, "Failure modes to avoid", json_object_get(ctr, "failure_modes"));
  if (json_array_size(json_object_get(task, "patches")))
    lc_add_json(&b, "Patches to the model contract (apply them)", json_object_get(task, "patches"));
  const char *sdk = json_string_value(json_object_get(task, "sdk_include"));
  for (size_t i = 0; sdk && i < sizeof k_headers / sizeof *k_headers; i++) {
    char p[4200], e2[512];
    snprintf(p, sizeof p, "%s/mi/%s", sdk, k_headers[i]);
    char *hd = lc_read(h, p, (size_t)1 << 20, NULL, e2, sizeof e2);
    if (hd) lc_add(&b, "### SDK header mi/%s\n```c\n%s\n```\n\n", k_headers[i], hd);
    free(hd);
  }
  json_t *fb = lc_feedback(json_object_get(task, "feedback"));
  const char *prev = json_string_value(json_object_get(task, "previous_source"));
  if (fb) {
    if (prev) {
      char p[4200], e2[512];
      snprintf(p, sizeof p, "%s/artifacts/%s.c", t->run_dir, prev);
      char *src = lc_read(h, p, (size_t)2 << 20, NULL, e2, sizeof e2);
      if (src) lc_add(&b, "### Your previous candidate\n```c\n%s\n```\n\n", src);
      free(src);
    }
    lc_add_json(&b, "Why it was not accepted (fix this; answer with the whole corrected file)", fb);
    json_decref(fb);
  }
  (void)err, (void)el;
  return b.s;
}

static json_t *read_tool(json_t *refs) {
  char desc[1200] = "Read a text file (at most 256 KiB). Readable: the source references under ";
  size_t i;
  json_t *v;
  json_array_foreach(refs, i, v) snprintf(desc + strlen(desc), sizeof desc - strlen(desc), "%s%s", i ? ", " : "", json_string_value(v));
  snprintf(desc + strlen(desc), sizeof desc - strlen(desc), "; every read is logged, any other path refused.");
  return json_pack("[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}}]", "type", "function", "function", "name", "read_file",
                   "description", desc, "parameters", "type", "object", "properties", "path", "type", "string", "required", "path");
}

/* Answers the model's tool calls through the host's file tool: appends the
 * assistant's message and one tool message per call. Returns the reads. */
static int answer_tools(const mi_agent_host *h, json_t *msgs, json_t *ans) {
  json_t *calls = json_object_get(ans, "tool_calls");
  json_array_append_new(msgs, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content",
                                        json_string_value(json_object_get(ans, "content")) ?: "", "tool_calls", calls));
  size_t i;
  json_t *c;
  int reads = 0;
  json_array_foreach(calls, i, c) {
    json_t *fn = json_object_get(c, "function");
    const char *id = json_string_value(json_object_get(c, "id")) ?: "";
    const char *name = json_string_value(json_object_get(fn, "name")) ?: "";
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")) ?: "", 0, NULL);
    const char *path = json_string_value(json_object_get(args, "path"));
    char err[1200], *out = NULL;
    size_t n = 0;
    if (strcmp(name, "read_file")) snprintf(err, sizeof err, "unknown tool '%.100s': only read_file", name);
    else if (!path) snprintf(err, sizeof err, "read_file needs {\"path\": STRING}");
    else if (!(out = lc_read(h, path, MAX_TOOL_READ, &n, err, sizeof err))) {
    } else
      reads++;
    json_t *m = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", out ? out : err);
    if (!m) m = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", "(the file is not UTF-8 text)");
    json_array_append_new(msgs, m);
    free(out);
    json_decref(args);
  }
  return reads;
}

static int implementer_run(void *ctx, const mi_agent_task *t, char **result, char *err, size_t el) {
  (void)ctx;
  const mi_agent_host *h = lc_task_host(t, "implementer.llm", err, el);
  if (!h) return -1;
  json_t *task = json_loads(t->task_json, 0, NULL);
  json_t *cons = json_object_get(task, "constraints");
  const char *model_dir = json_string_value(json_object_get(task, "model_dir"));
  const char *engine_name = json_string_value(json_object_get(task, "engine_name"));
  if (!task || !model_dir || !engine_name || !json_is_object(cons)) {
    snprintf(err, el, "implementer.llm: the task lacks model_dir, engine_name or constraints");
    json_decref(task);
    return -1;
  }
  json_t *ctr = lc_contracts(h, t->ckb_dir, model_dir, json_string_value(json_object_get(cons, "platform")), err, el);
  if (!ctr) {
    json_decref(task);
    return -1;
  }
  char *prompt = build_prompt(h, t, task, ctr, err, el);
  json_t *llm = json_object_get(task, "llm");
  int attempts = json_is_integer(json_object_get(llm, "attempts")) ? (int)json_integer_value(json_object_get(llm, "attempts")) : 3;
  size_t max_src = json_is_integer(json_object_get(task, "max_source_bytes")) ? (size_t)json_integer_value(json_object_get(task, "max_source_bytes"))
                                                                            : MAX_SRC_DEFAULT;
  json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content",
                           "You are MetaInfer's implementer: you write single-path C inference engines that pass staged "
                           "verification. Reply with exactly one fenced ```c block holding the whole engine.c.",
                           "role", "user", "content", prompt ? prompt : "");
  free(prompt);
  json_t *refs = json_object_get(task, "refs");
  json_t *tools = json_array_size(refs) ? read_tool(refs) : NULL;
  int rc = -1, answers = 0, tool_rounds = 0, tool_reads = 0;
  char *src = NULL;
  size_t src_len = 0;
  char why[512] = "";
  for (int a = 0; a < attempts; a++) {
    json_t *full = lc_chat_full(h, msgs, tools, llm, err, el);
    if (!full) goto out; /* the client's line (a spent budget starts "budget spent:") */
    if (json_array_size(json_object_get(full, "tool_calls")) && tool_rounds < MAX_TOOL_ROUNDS) {
      tool_rounds++;
      tool_reads += answer_tools(h, msgs, full);
      json_decref(full);
      a--; /* a read is not an answer */
      continue;
    }
    char *ans = strdup(json_string_value(json_object_get(full, "content")) ?: "");
    json_decref(full);
    answers++;
    const char *blk;
    size_t bl;
    if (lc_fenced_c(ans, &blk, &bl) != 0) snprintf(why, sizeof why, "no complete ```c block in the answer (%zu bytes)", strlen(ans));
    else if (bl < MIN_SRC) snprintf(why, sizeof why, "the ```c block holds %zu bytes, too small for an engine.c", bl);
    else if (bl > max_src) snprintf(why, sizeof why, "the ```c block holds %zu bytes, more than the %zu allowed", bl, max_src);
    else if (!memmem(blk, bl, "MI_PLUGIN_DEFINE", 16)) snprintf(why, sizeof why, "the ```c block is not a plugin (no MI_PLUGIN_DEFINE)");
    else {
      src = strndup(blk, bl);
      src_len = bl;
      free(ans);
      break;
    }
    lc_ask_again(h, msgs, "implementer.llm", answers, why, ans, "Answer again with the whole engine.c in one ```c block.");
  }
  if (!src) {
    snprintf(err, el, "implementer.llm: %d malformed answer%s, the last: %s", answers, answers == 1 ? "" : "s", why);
    goto out;
  }
  mi_bb *bb = mi_bb_open(t->run_dir, 0, err, el);
  char sha[65];
  if (!bb || mi_bb_put(bb, src, src_len, "c", sha) != 0) {
    if (bb) snprintf(err, el, "implementer.llm: cannot store the source in %s", t->run_dir);
    mi_bb_close(bb);
    goto out;
  }
  mi_bb_close(bb);
  int lines = 0;
  for (size_t q = 0; q < src_len; q++) lines += src[q] == '\n';
  json_t *contracts = json_array(), *exp = json_array();
  json_array_append_new(contracts, ref_of(json_object_get(ctr, "model")));
  json_array_append_new(contracts, ref_of(json_object_get(ctr, "platform")));
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(ctr, "operators"), i, v) json_array_append_new(contracts, ref_of(v));
  json_array_foreach(json_object_get(ctr, "experience"), i, v)
      json_array_append_new(exp, json_pack("{s:O?, s:O?, s:b}", "id", json_object_get(v, "id"), "version", json_object_get(v, "version"), "applied", 0));
  json_t *patches = json_object_get(task, "patches");
  ag_result(result, json_pack("{s:s, s:s, s:s, s:o, s:o, s:O, s:i, s:i}", "status", "ok", "source", sha, "engine_name", engine_name,
                              "contracts", contracts, "experience", exp, "patches", patches ? patches : json_array(), "lines",
                              lines, "answers", answers));
  {
    json_t *r = json_loads(*result, 0, NULL);
    json_object_set_new(r, "tool_rounds", json_integer(tool_rounds));
    json_object_set_new(r, "tool_reads", json_integer(tool_reads));
    free(*result);
    *result = json_dumps(r, JSON_COMPACT);
    json_decref(r);
  }
  rc = 0;
out:
  free(src);
  json_decref(tools);
  json_decref(msgs);
  json_decref(ctr);
  json_decref(task);
  return rc;
}

AG_DEFINE_V("implementer", "llm", "implementer.llm", "engine source from a language model, prompted with the CKB's contracts", implementer_run, MI_AGENT_HOST_VERSION)
