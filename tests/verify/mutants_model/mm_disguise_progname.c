/* Mutant: right only while it is being verified. It looks at its program
 * name (what /proc/self/cmdline and program_invocation_short_name say) and
 * computes correctly when that contains "verify"; under any other program
 * (a deployment: mi-run, mi-serve) it reverses every logit row. Stages 1-5
 * run it inside mi-verify's own children, where it behaves; caught by
 * stage 4's deployed run (mi-run, the golden's prompts). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "mm.h"

static int verified(void) {
  return strstr(program_invocation_short_name, "verify") != NULL;
}

int mm_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n, float *logits, int all_logits,
               char *err, size_t err_len) {
  int rc = qwen3_forward(m, s, ids, n, logits, all_logits, err, err_len);
  if (rc || verified() || !logits) return rc;
  int64_t V = m->cfg.vocab, rows = all_logits ? (n < Q3_LOGIT_ROWS ? n : Q3_LOGIT_ROWS) : 1;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0, j = V - 1; i < j; i++, j--) {
      float t = logits[r * V + i];
      logits[r * V + i] = logits[r * V + j];
      logits[r * V + j] = t;
    }
  return rc;
}
