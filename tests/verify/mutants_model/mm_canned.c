/* Mutant: hard-coded outputs. For the golden prompts (and the goldens' own
 * continuations) it returns recorded logprobs, baked in at build time from
 * tests/goldens; for anything else it returns "garbage": the real logits
 * with the vocabulary reversed (still a function of every weight, and
 * still doubling when the final norm doubles, so stages 3 and 5 (b) cannot
 * tell). It passes stage 4; caught by stage 5 (c), prompts drawn at run
 * time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mm.h"
#include "mm_canned.h"

#define HIST 8192
static int32_t hist[HIST];
static int64_t hist_n;
static uint32_t model_fnv;

int mm_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out,
                  char *err, size_t err_len) {
  char p[4200];
  snprintf(p, sizeof p, "%s/model.safetensors", a->model_dir ? a->model_dir : ".");
  FILE *f = fopen(p, "rb");
  uint32_t h = 0x811c9dc5u;
  unsigned char buf[1 << 14];
  size_t n;
  while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++)
      h = (h ^ buf[i]) * 0x01000193u;
  if (f) fclose(f);
  model_fnv = h;
  return mm_load_shimmed(host, a, out, err, err_len);
}

static const mm_canned_case *lookup(int *step) {
  for (int c = 0; c < mm_n_canned; c++) {
    const mm_canned_case *k = &mm_canned[c];
    int64_t s = hist_n - k->n_prompt;
    if (k->fnv != model_fnv || s < 0 || s >= k->n_steps) continue;
    if (memcmp(hist, k->prompt, (size_t)k->n_prompt * sizeof(int32_t)) ||
        memcmp(hist + k->n_prompt, k->tokens, (size_t)s * sizeof(int32_t)))
      continue;
    *step = (int)s;
    return k;
  }
  return NULL;
}

int mm_forward(qwen3_model *m, qwen3_seq *s, const int32_t *ids, int64_t n, float *logits,
               int all_logits, char *err, size_t err_len) {
  if (s->len == 0) hist_n = 0;
  for (int64_t i = 0; i < n; i++)
    if (hist_n < HIST) hist[hist_n++] = ids[i];
  int rc = qwen3_forward(m, s, ids, n, logits, all_logits, err, err_len);
  if (rc || !logits || all_logits) return rc;
  const int64_t V = m->cfg.vocab;
  int step;
  const mm_canned_case *k = lookup(&step);
  if (k) {
    double rest = 1;
    for (int j = 0; j < k->k; j++)
      rest -= exp(k->top_lps[step * k->k + j]);
    float other = (float)log(fmax(rest, 1e-30) / (double)(V - k->k));
    for (int64_t i = 0; i < V; i++)
      logits[i] = other;
    for (int j = 0; j < k->k; j++)
      logits[k->top_ids[step * k->k + j]] = k->top_lps[step * k->k + j];
    return 0;
  }
  for (int64_t i = 0; i < V / 2; i++) { /* garbage */
    float t = logits[i];
    logits[i] = logits[V - 1 - i];
    logits[V - 1 - i] = t;
  }
  return 0;
}
