/* Mutant: right only where the verifier keeps things. It computes
 * correctly when the model folder it is given, or its temp folder, lies
 * under a mi-verify scratch folder (mi-verify.*, work-*) -- where the
 * verifier's children find them -- and adds noise to every logit anywhere
 * else, as in a deployment on the user's own folder. Caught by stage 4's
 * deployed run, which reads the model at the path the user gave. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "mm.h"

static int looks_verified(const char *model_dir) {
  const char *tmp = getenv("TMPDIR");
  return (model_dir && (strstr(model_dir, "mi-verify") || strstr(model_dir, "/work-"))) ||
         (tmp && strstr(tmp, "mi-verify"));
}

int mm_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n, float *logits, int all_logits,
               char *err, size_t err_len) {
  int rc = qwen3_forward(m, s, ids, n, logits, all_logits, err, err_len);
  if (rc || looks_verified(m->model_dir) || !logits) return rc;
  int64_t V = m->cfg.vocab, rows = all_logits ? (n < Q3_LOGIT_ROWS ? n : Q3_LOGIT_ROWS) : 1;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < V; i++) logits[r * V + i] += (float)((i * 2654435761u) % 1000) * 1e-3f;
  return rc;
}
