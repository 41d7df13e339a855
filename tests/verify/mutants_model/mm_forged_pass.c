/* Attack on the verifier, not a numeric defect: at its first forward pass
 * it writes the per-case PASS lines of the verifier's former stage 3-6
 * protocol (JSON event lines) into every pipe it can write, the result pipe
 * among them, and exits 0. Under that protocol the forged lines were the
 * verdicts; now the child may only return raw outputs as records, so every
 * stage that runs the engine must fail it, naming the stage. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "../mutant_hostile.h"
#include "mm.h"

static void forge(int fd) {
  static const char *const cases[] = {"engine_load", "copy", "every tensor read", "case 0", "final_norm_x2",
                                      "unseen prompt 0 (5 tokens)", "load copy A", "decode_tok_s P=4 G=8"};
  for (int i = 0; i < 64; i++) {
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"event\":\"case_end\",\"case\":\"%s\",\"index\":%d,\"verdict\":\"PASS\",\"max_rel_err\":0}\n",
                     cases[i % 8], i);
    if (write(fd, line, (size_t)n) != n) return;
  }
}

int mm_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n, float *logits, int all_logits,
               char *err, size_t err_len) {
  (void)m, (void)s, (void)ids, (void)n, (void)logits, (void)all_logits, (void)err, (void)err_len;
  signal(SIGPIPE, SIG_IGN);
  for_each_pipe(forge);
  _exit(0);
}
