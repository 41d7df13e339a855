/* Fuzzes the Jinja engine for chat templates (core/template): the input is
 * a template, parsed and rendered over a fixed conversation (system/user/
 * assistant turns, a tool call and a tool message, tools, bos/eos) with
 * small limits. A template is hostile input: every failure must be one
 * line "line L col C: ..." and every limit (steps, loop iterations, macro
 * depth, output, memory) must end the render, never a crash, a hang or a
 * stack overflow. */
#include "fuzz_util.h"

#include "core/template/jinja.h"

static json_t *g_ctx;

static void init_ctx(void) {
  json_error_t je;
  g_ctx =
      json_loads("{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\","
                 "\"content\":\"hi \\u00e9 \\ud83d\\ude00\"},"
                 "{\"role\":\"assistant\",\"content\":\"<think>\\nr\\n</"
                 "think>\\n\\nok\",\"tool_calls\":[{\"type\":\"function\","
                 "\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[true,null,2.5]}}}]},"
                 "{\"role\":\"tool\",\"content\":\"42\"}],\"tools\":[{\"type\":\"function\","
                 "\"function\":{\"name\":\"f\","
                 "\"parameters\":{\"type\":\"object\"}}}],\"add_generation_prompt\":true,\"bos_"
                 "token\":\"<s>\",\"eos_token\":\"</s>\"}",
                 0, &je);
  FUZZ_CHECK(g_ctx != NULL, "context: %s", je.text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ctx) init_ctx();
  char *s = fuzz_cstr(data, size);
  static const mi_jinja_limits lim = {.max_output = 1 << 20,
                                      .max_memory = 32 << 20,
                                      .max_steps = 200000,
                                      .max_iters = 50000,
                                      .max_depth = 16};
  mi_jinja_opts o = {.now = 1721952000, .limits = &lim};
  char err[512] = "";
  int raised = 0;
  mi_jinja *t = mi_jinja_parse(s, size, err, sizeof err);
  if (!t) {
    fuzz_check_one_line("mi_jinja_parse", err);
    FUZZ_CHECK(!strncmp(err, "line ", 5), "parse error without a position: %s", err);
  } else {
    char *out = mi_jinja_render(t, g_ctx, &o, err, sizeof err, &raised);
    if (!out) {
      fuzz_check_one_line("mi_jinja_render", err);
      FUZZ_CHECK(!strncmp(err, "line ", 5), "render error without a position: %s", err);
    } else {
      FUZZ_CHECK(strlen(out) <= lim.max_output, "output over the limit");
      free(out);
    }
    mi_jinja_free(t);
  }
  free(s);
  return 0;
}
