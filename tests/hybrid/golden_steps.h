/* Reading a llama.cpp golden case (tools/peer's JSON: prompt_ids, then
 * steps of token_id and the top [token, logprob] pairs) and checking a
 * decode step against it. Shared by test_hybrid_runtime (the engine) and
 * test_hybrid_peer (the float64 model). */
#ifndef MI_TESTS_HYBRID_GOLDEN_STEPS_H
#define MI_TESTS_HYBRID_GOLDEN_STEPS_H

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/safetensors/st_writer.h"

/* The golden g (read from file) was made from the weights in the checkpoint
 * dir: its model.safetensors has the FNV-1a (32-bit) the golden records;
 * `hint` ends the failure message (what to do about it). */
static inline void hy_check_golden_weights(const json_t *g, const char *dir, const char *file,
                                           const char *hint) {
  char *st = tw_path(dir, "model.safetensors");
  size_t n = 0;
  unsigned char *b = tw_read_all(st, &n);
  ck_assert_msg(b != NULL, "%s: cannot read", st);
  uint32_t h = 0x811c9dc5u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x01000193u;
  free(b);
  free(st);
  char hash[16];
  snprintf(hash, sizeof hash, "%08x", h);
  const char *want =
      json_string_value(json_object_get(json_object_get(g, "model"), "safetensors_fnv1a32"));
  ck_assert_msg(want && !strcmp(hash, want),
                "%s was made from other weights (model.safetensors FNV-1a %s, golden %s)%s", file,
                hash, want ? want : "?", hint);
}

/* The case's prompt ids, then the token of each of its first ns steps
 * (malloc'd, [np + ns]); *np the prompt's length. */
static inline int32_t *hy_golden_ids(const json_t *c, int ns, int *np) {
  const json_t *pids = json_object_get(c, "prompt_ids"), *steps = json_object_get(c, "steps");
  *np = (int)json_array_size(pids);
  int32_t *ids = malloc((size_t)(*np + ns) * sizeof(int32_t));
  for (int t = 0; t < *np; t++) ids[t] = (int32_t)json_integer_value(json_array_get(pids, (size_t)t));
  for (int t = 0; t < ns; t++)
    ids[*np + t] = (int32_t)json_integer_value(json_object_get(json_array_get(steps, (size_t)t), "token_id"));
  return ids;
}

/* Step t of case i of golden file, against the log-probabilities lp[V]
 * computed here: every top pair within tol (the largest difference raises
 * *worst), and the greedy token the golden's token `want`, unless a
 * near-tie within tol picks another (counted in *ties). */
static inline void hy_check_step(const json_t *steps, int t, const double *lp, int V, int32_t want, double tol,
                                 const char *file, size_t i, double *worst, int *ties) {
  const json_t *top = json_object_get(json_array_get(steps, (size_t)t), "top");
  size_t k;
  const json_t *pair;
  json_array_foreach(top, k, pair) {
    int id = (int)json_integer_value(json_array_get(pair, 0));
    double d = fabs(lp[id] - json_number_value(json_array_get(pair, 1)));
    *worst = fmax(*worst, d);
    ck_assert_msg(d < tol, "%s case %zu step %d: token %d logprob %.6f, llama.cpp %.6f", file, i, t, id, lp[id],
                  json_number_value(json_array_get(pair, 1)));
  }
  int best = 0;
  for (int v = 1; v < V; v++)
    if (lp[v] > lp[best]) best = v;
  if (best != want) { /* only a near-tie may pick another token */
    ck_assert_msg(fabs(lp[best] - lp[want]) < tol, "%s case %zu step %d: greedy %d, llama.cpp %d", file, i, t, best,
                  want);
    (*ties)++;
  }
}

#endif
