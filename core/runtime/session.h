/* An engine: one platform plugin + one model plugin + one model directory
 * (config.json, weights, tokenizer), and the generation loop over it. */
#ifndef MI_CORE_RUNTIME_SESSION_H
#define MI_CORE_RUNTIME_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "core/runtime/loader.h"
#include "core/runtime/packs.h"
#include "core/runtime/sampler.h"
#include "core/tokenizer/tokenizer.h"
#include "mi/model.h"

typedef struct mi_session_opts {
  const char *model_dir;
  const char *platform;   /* plugin name, or NULL for the best-scoring one */
  const mi_options *model_opts; /* e.g. batch=512 */
  int tp_rank, tp_size;
  /* How the weights are loaded: MI_SESSION_WEIGHTS_AUTO reads them into huge
   * pages when the platform's kernels use host memory directly (the CPU),
   * and maps the files otherwise (a GPU uploads them anyway). */
  int weights; /* MI_SESSION_WEIGHTS_* */
  /* Host memory the session may use, in bytes (--mem-limit); 0: what the
   * machine has now (MemAvailable, or the cgroup's memory.max minus its
   * usage when lower). Weights, scratch and the KV cache are estimated
   * against it before they are allocated. */
  uint64_t mem_limit;
} mi_session_opts;

#define MI_SESSION_WEIGHTS_AUTO 0
#define MI_SESSION_WEIGHTS_MMAP 1 /* --mmap */
#define MI_SESSION_WEIGHTS_READ 2 /* --no-mmap */

typedef struct mi_session {
  char *model_dir;
  mi_plugin *platform_plugin;
  const mi_platform_iface *P;
  void *pc;
  mi_plugin *model_plugin;
  const mi_model_iface *M;
  void *config;        /* json_t* of config.json */
  mi_weights *weights;
  mi_model *model;
  mi_model_info info;
  mi_tokenizer *tok;
  int tp_rank, tp_size; /* tensor parallelism: this rank of tp_size */
  int32_t eos_ids[8];  /* end-of-generation tokens */
  int n_eos;
  double load_seconds;
  /* memory accounting (host-memory platforms): what may be used, from
   * where, and the RSS when the session started */
  int mem_host;
  uint64_t mem_avail, rss_start;
  const char *mem_source;
  /* kernel packs bound to the platform (core/runtime/packs.h), for the model */
  mi_pack_ref packs[MI_PACKS_MAX];
  int n_packs;
} mi_session;

/* Opens DIR/config.json, picks the model plugin by "architectures", opens
 * the weights and the tokenizer, loads the model onto the platform.
 * 0, or -1 with one line naming the file and the problem. */
int mi_session_open(mi_registry *reg, const mi_session_opts *o, mi_session **out, char *err,
                   size_t err_len);
void mi_session_close(mi_session *e);
int mi_session_is_eos(const mi_session *e, int32_t id);

typedef struct mi_gen_params {
  int64_t n_predict;   /* tokens to generate (< 0: until EOS or context end) */
  int64_t n_ctx;       /* 0: prompt + n_predict, capped by the model */
  int ignore_eos;
  int top_logprobs;    /* report the k best logprobs per step (0: none) */
  mi_sampler_params sampling;
  const char *const *stop; /* stop strings */
  size_t n_stop;
  /* mi_gen_begin leaves the prompt to mi_gen_prefill (chunked prefill, a
   * prefix restored into the sequence first): 0 runs it all in begin */
  int defer_prefill;
  /* the log-probability of every prompt token after the first, with the
   * top_logprobs best (echo): the prompt runs with all positions' logits */
  int prompt_logprobs;
  /* constrained decoding (structured output): NULL, or the tokens allowed */
  const struct mi_gen_constraint *constraint;
} mi_gen_params;

/* Which tokens may come next (a grammar's view of the text so far). The
 * sampler draws from the raw distribution first and asks `allows`; only
 * when the draw is refused does it build the whole mask and draw again from
 * the masked distribution: the result is distributed as a draw from the
 * masked logits, at the cost of one mask on the refused steps only. */
typedef struct mi_gen_constraint {
  void *user;
  int (*allows)(void *user, int32_t id);        /* 1: id may come next */
  size_t (*mask)(void *user, uint8_t *allowed); /* allowed[vocab]; returns how many */
  int (*accept)(void *user, int32_t id);        /* id was drawn: advance; -1 refuses */
} mi_gen_constraint;

typedef struct mi_gen_token {
  int64_t step;
  int32_t id;
  const char *text;      /* this token's decoded text (complete UTF-8 only) */
  size_t text_len;
  const char *visible;   /* text safe to show now (held back near stop strings) */
  size_t visible_len;
  double logprob;        /* log-softmax of the raw logits, float64 */
  int n_top;
  const int32_t *top_ids;
  const double *top_lps;
} mi_gen_token;

/* Called once per generated token; return non-zero to stop. */
typedef int (*mi_gen_cb)(void *user, const mi_gen_token *t);

typedef struct mi_gen_stats {
  int64_t n_prompt, n_gen, n_ctx;
  double ttft_s;     /* prompt submitted → first token sampled */
  double prefill_s;  /* the batched prompt pass */
  double decode_s;   /* all decode steps after the first token */
  int64_t n_cached;  /* prompt tokens restored from a prefix cache, not computed */
  const char *stop_reason; /* "eos", "length", "stop string", "context full", "callback" */
  char tail[256];    /* visible text held back at the end and flushed */
} mi_gen_stats;

int mi_generate(mi_session *e, const int32_t *prompt, size_t n_prompt, const mi_gen_params *p,
                mi_gen_cb cb, void *user, mi_gen_stats *st, char *err, size_t err_len);

/* The same loop one step at a time, for a caller that interleaves many
 * sequences (mi-serve); mi_generate is built on it.
 *   mi_gen_begin   checks, allocates, creates the sequence, runs the prompt
 *   mi_gen_sample  samples from the current logits and fills *t (valid
 *                  until the next call)
 *   mi_gen_advance decides whether generation goes on (cb_stop: the caller
 *                  asks to stop); 1: the sampled token (mi_gen_last) must be
 *                  fed, by mi_gen_forward or by the caller into
 *                  mi_gen_seq/mi_gen_logits; 0: finished (stop_reason set)
 *   mi_gen_end     frees; with st, flushes the held-back tail into st->tail */
typedef struct mi_gen mi_gen;
int mi_gen_begin(mi_session *e, const int32_t *prompt, size_t n_prompt, const mi_gen_params *p,
                 mi_gen **out, char *err, size_t err_len);
/* With defer_prefill: the first n prompt tokens are already in
 * mi_gen_seq(g) (restored by the caller, e.g. from a prefix cache); call
 * before any mi_gen_prefill, n < the prompt's length (the last prompt token
 * always runs: its logits start the generation). */
int mi_gen_set_cached(mi_gen *g, int64_t n, char *err, size_t err_len);
/* With defer_prefill: runs up to max_tokens (≤ 0: all) more prompt tokens.
 * Returns the prompt tokens still to run (0: ready to sample), or -1. */
int64_t mi_gen_prefill(mi_gen *g, int64_t max_tokens, char *err, size_t err_len);
int64_t mi_gen_prefill_left(const mi_gen *g);
/* echo (prompt_logprobs): prompt token i ≥ 1's logprob and its top ids and
 * logprobs (top_logprobs of them, ≤ n_top); 0, or -1 when not recorded */
int mi_gen_prompt_logprob(const mi_gen *g, int64_t i, double *lp, const int32_t **top_ids,
                          const double **top_lps, int *n_top);
int mi_gen_done(const mi_gen *g);
int mi_gen_sample(mi_gen *g, mi_gen_token *t, char *err, size_t err_len);
int mi_gen_advance(mi_gen *g, int cb_stop);
int mi_gen_forward(mi_gen *g, char *err, size_t err_len); /* + mi_gen_check_logits */
/* After the caller fed the token itself (e.g. forward_batch into
 * mi_gen_logits): -1 with a line when the logits hold a NaN or infinity. */
int mi_gen_check_logits(mi_gen *g, char *err, size_t err_len);
mi_seq *mi_gen_seq(mi_gen *g);
float *mi_gen_logits(mi_gen *g); /* [vocab]: where the next step's logits go */
int32_t mi_gen_last(const mi_gen *g);
/* the prompt and the tokens sampled so far: [n] */
const int32_t *mi_gen_tokens(const mi_gen *g, size_t *n);
const mi_gen_stats *mi_gen_stats_now(const mi_gen *g);
void mi_gen_end(mi_gen *g, mi_gen_stats *st);

/* Peak resident set size of this process, in bytes. */
uint64_t mi_peak_rss_bytes(void);
double mi_now_seconds(void);

#endif
