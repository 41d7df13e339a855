/* Shared by the tensor-parallel tests (tests/tp, tests/gpu): run one
 * `mi-run --json --top-logprobs TOPK` command line and collect its greedy
 * tokens, top logprobs, exit status and stderr. The includer defines STEPS
 * and TOPK and includes <check.h>, <jansson.h>, <stdio.h>, <string.h> and
 * <sys/wait.h> first. */
#ifndef MI_TESTS_TP_RUN_JSON_H
#define MI_TESTS_TP_RUN_JSON_H

typedef struct run_out {
  int status;
  int n_prompt;
  int tokens[STEPS];
  int top_ids[STEPS][TOPK];
  double top_lps[STEPS][TOPK];
  int steps;
  char err[8192];
} run_out;

/* cmd writes its stderr to errf; r is filled from its JSON lines. */
static void run_json(const char *cmd, const char *errf, run_out *r) {
  memset(r, 0, sizeof *r);
  FILE *p = popen(cmd, "r");
  ck_assert(p);
  char line[16384];
  while (fgets(line, sizeof line, p)) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    ck_assert_msg(j, "not JSON: %s", line);
    if (json_object_get(j, "prompt_ids")) {
      r->n_prompt = (int)json_array_size(json_object_get(j, "prompt_ids"));
    } else if (json_object_get(j, "step")) {
      int s = (int)json_integer_value(json_object_get(j, "step"));
      ck_assert(s == r->steps && s < STEPS);
      r->tokens[s] = (int)json_integer_value(json_object_get(j, "token_id"));
      json_t *top = json_object_get(j, "top_logprobs");
      for (int k = 0; k < TOPK; k++) {
        r->top_ids[s][k] = (int)json_integer_value(json_array_get(json_array_get(top, k), 0));
        r->top_lps[s][k] = json_number_value(json_array_get(json_array_get(top, k), 1));
      }
      r->steps++;
    }
    json_decref(j);
  }
  int st = pclose(p);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  FILE *f = fopen(errf, "r");
  if (f) {
    size_t n = fread(r->err, 1, sizeof r->err - 1, f);
    r->err[n] = 0;
    fclose(f);
  }
}

#endif
