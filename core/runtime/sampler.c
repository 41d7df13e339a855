#include "core/runtime/sampler.h"

#include "core/runtime/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mi_sampler {
  mi_sampler_params p;
  int64_t vocab;
  float *work;    /* [vocab] penalised logits */
  int32_t *cand;  /* [vocab] candidate ids, best first */
  double *prob;   /* [vocab] candidate probabilities */
  int32_t *bias_ids; /* [p.n_bias] owned copies of p.bias_* */
  float *bias_vals;
  uint64_t rng;
};

void mi_sampler_defaults(mi_sampler_params *p) {
  /* llama.cpp's defaults, so users get the behaviour they know. */
  p->temp = 0.8f;
  p->top_k = 40;
  p->top_p = 0.95f;
  p->min_p = 0.05f;
  p->repeat_penalty = 1.0f;
  p->repeat_last_n = 64;
  p->seed = 0x5eed;
  p->bias_ids = NULL;
  p->bias_vals = NULL;
  p->n_bias = 0;
}

mi_sampler *mi_sampler_create(const mi_sampler_params *p, int64_t vocab) {
  mi_sampler *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->p = *p;
  s->vocab = vocab;
  s->work = malloc((size_t)vocab * sizeof(float));
  s->cand = malloc((size_t)vocab * sizeof(int32_t));
  s->prob = malloc((size_t)vocab * sizeof(double));
  s->rng = p->seed ^ 0x9e3779b97f4a7c15ull;
  s->p.bias_ids = NULL;
  s->p.bias_vals = NULL;
  if (p->n_bias > 0) {
    s->bias_ids = malloc(p->n_bias * sizeof(int32_t));
    s->bias_vals = malloc(p->n_bias * sizeof(float));
    if (s->bias_ids && s->bias_vals) {
      memcpy(s->bias_ids, p->bias_ids, p->n_bias * sizeof(int32_t));
      memcpy(s->bias_vals, p->bias_vals, p->n_bias * sizeof(float));
    }
  }
  if (!s->work || !s->cand || !s->prob || (p->n_bias > 0 && (!s->bias_ids || !s->bias_vals))) {
    mi_sampler_free(s);
    return NULL;
  }
  return s;
}

void mi_sampler_free(mi_sampler *s) {
  if (!s) return;
  free(s->work);
  free(s->cand);
  free(s->prob);
  free(s->bias_ids);
  free(s->bias_vals);
  free(s);
}

/* Is a better than b (higher value, lower id on ties)? */
static int better(const float *v, int32_t a, int32_t b) {
  return v[a] > v[b] || (v[a] == v[b] && a < b);
}

/* Restores the min-heap (the worst id on top) of out[size] after its top
 * was replaced. */
static void sift_down(const float *v, int32_t *out, int size) {
  int c = 0;
  for (;;) {
    int l = 2 * c + 1, r = l + 1, w = c;
    if (l < size && better(v, out[w], out[l])) w = l;
    if (r < size && better(v, out[w], out[r])) w = r;
    if (w == c) break;
    int32_t t = out[c];
    out[c] = out[w];
    out[w] = t;
    c = w;
  }
}

/* The k best ids of v[n] into out[k], best first: a min-heap of size k,
 * then a sort. O(n log k). */
static void select_topk(const float *v, int64_t n, int k, int32_t *out) {
  int size = 0;
  for (int32_t i = 0; i < n; i++) {
    if (size < k) {
      int c = size++;
      out[c] = i;
      while (c > 0 && better(v, out[(c - 1) / 2], out[c])) { /* sift up: worst on top */
        int32_t t = out[c];
        out[c] = out[(c - 1) / 2];
        out[(c - 1) / 2] = t;
        c = (c - 1) / 2;
      }
    } else if (better(v, i, out[0])) {
      out[0] = i;
      sift_down(v, out, size);
    }
  }
  /* heap-sort in place: repeatedly move the worst to the end */
  for (int end = size - 1; end > 0; end--) {
    int32_t t = out[0];
    out[0] = out[end];
    out[end] = t;
    sift_down(v, out, end);
  }
}

int32_t mi_sampler_sample(mi_sampler *s, const float *logits, const int32_t *history,
                          size_t n_history) {
  const int64_t V = s->vocab;
  const float *v = logits;
  /* logit bias first, as llama.cpp orders its samplers: a banned token stays
   * banned whatever the penalty does after */
  if (s->p.n_bias > 0) {
    memcpy(s->work, logits, (size_t)V * sizeof(float));
    for (size_t i = 0; i < s->p.n_bias; i++)
      if (s->bias_ids[i] >= 0 && s->bias_ids[i] < V) s->work[s->bias_ids[i]] += s->bias_vals[i];
    v = s->work;
  }
  if (s->p.repeat_penalty != 1.0f && n_history > 0) {
    if (v != s->work) memcpy(s->work, logits, (size_t)V * sizeof(float));
    size_t from = s->p.repeat_last_n > 0 && n_history > (size_t)s->p.repeat_last_n
                      ? n_history - (size_t)s->p.repeat_last_n
                      : 0;
    /* CTRL-style penalty, as llama.cpp: divide positive logits, multiply
     * negative ones; each distinct token penalised once. */
    for (size_t i = from; i < n_history; i++) {
      int32_t t = history[i];
      if (t < 0 || t >= V) continue;
      int seen = 0;
      for (size_t j = from; j < i; j++) seen |= history[j] == t;
      if (seen) continue;
      s->work[t] = s->work[t] > 0 ? s->work[t] / s->p.repeat_penalty
                                  : s->work[t] * s->p.repeat_penalty;
    }
    v = s->work;
  }
  if (s->p.temp <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
      if (v[i] > v[best]) best = i;
    return best;
  }
  int k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : (int)V;
  select_topk(v, V, k, s->cand);
  /* softmax over candidates at temperature, in float64 */
  double mx = v[s->cand[0]] / s->p.temp, sum = 0;
  for (int i = 0; i < k; i++) {
    s->prob[i] = exp(v[s->cand[i]] / s->p.temp - mx);
    sum += s->prob[i];
  }
  for (int i = 0; i < k; i++) s->prob[i] /= sum;
  /* top-p: smallest prefix with mass ≥ top_p (at least one) */
  int n = k;
  if (s->p.top_p < 1.0f) {
    double c = 0;
    for (int i = 0; i < k; i++) {
      c += s->prob[i];
      if (c >= s->p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  /* min-p: drop tokens below min_p × the best one's probability */
  if (s->p.min_p > 0.0f) {
    int m = 1;
    while (m < n && s->prob[m] >= s->p.min_p * s->prob[0]) m++;
    n = m;
  }
  double total = 0;
  for (int i = 0; i < n; i++) total += s->prob[i];
  double r = (double)(mi_rng_next(&s->rng) >> 11) * 0x1.0p-53 * total;
  for (int i = 0; i < n; i++) {
    r -= s->prob[i];
    if (r < 0) return s->cand[i];
  }
  return s->cand[n - 1];
}

int mi_logprobs_topk(const float *logits, int64_t vocab, int32_t chosen, double *chosen_lp,
                     int k, int32_t *top_ids, double *top_lps) {
  double mx = logits[0];
  for (int64_t i = 1; i < vocab; i++)
    if (logits[i] > mx) mx = logits[i];
  double sum = 0;
  for (int64_t i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
  double lse = mx + log(sum);
  if (chosen_lp) *chosen_lp = chosen >= 0 && chosen < vocab ? (double)logits[chosen] - lse : NAN;
  if (k > vocab) k = (int)vocab;
  if (k > 0) {
    select_topk(logits, vocab, k, top_ids);
    for (int i = 0; i < k; i++) top_lps[i] = (double)logits[top_ids[i]] - lse;
  }
  return k < 0 ? 0 : k;
}
