/* Token sampling: repetition penalty, then greedy (temp ≤ 0) or
 * top-k → temperature softmax → top-p → min-p → a draw from a seeded RNG.
 * All work arrays are allocated once at creation: sampling never allocates. */
#ifndef MI_CORE_SAMPLER_H
#define MI_CORE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct mi_sampler_params {
  float temp;           /* ≤ 0: greedy */
  int top_k;            /* ≤ 0: whole vocabulary */
  float top_p;          /* 1: off */
  float min_p;          /* 0: off */
  float repeat_penalty; /* 1: off */
  int repeat_last_n;    /* tokens of history the penalty looks at */
  uint64_t seed;
  /* OpenAI logit_bias: bias_vals[i] is added to the logit of bias_ids[i]
   * before anything else (greedy included). mi_sampler_create copies them:
   * the arrays need not outlive that call. Ids outside the vocabulary are
   * skipped. */
  const int32_t *bias_ids;
  const float *bias_vals;
  size_t n_bias;
} mi_sampler_params;

void mi_sampler_defaults(mi_sampler_params *p);

typedef struct mi_sampler mi_sampler;

mi_sampler *mi_sampler_create(const mi_sampler_params *p, int64_t vocab);
void mi_sampler_free(mi_sampler *s);

/* Picks the next token from logits [vocab] (not modified). history: the
 * tokens so far (prompt + generated) for the repetition penalty. */
int32_t mi_sampler_sample(mi_sampler *s, const float *logits, const int32_t *history,
                          size_t n_history);

/* log-softmax of raw logits in float64: the chosen token's logprob and the
 * k best (ids descending by logprob, ties by lower id). Returns k actually
 * filled (≤ vocab). */
int mi_logprobs_topk(const float *logits, int64_t vocab, int32_t chosen, double *chosen_lp,
                     int k, int32_t *top_ids, double *top_lps);

#endif
