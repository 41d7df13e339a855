/* mi-serve: an OpenAI-compatible HTTP server for an engine (libmicrohttpd).
 *
 * Threads: libmicrohttpd runs one thread per connection; a handler parses
 * and tokenizes a request, puts it on a bounded queue and waits (or streams)
 * while ONE scheduler thread owns the model: it admits queued requests into
 * up to --parallel resident sequences, prefills each, and then runs every
 * resident sequence's decode step, in one batched forward pass when the
 * model plugin has forward_batch (ABI 1.3), else one at a time. A handler
 * that sees its client hang up marks the request cancelled; the scheduler
 * frees that sequence at its next step. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/cli/cli_common.h"
#include "core/serve/prefix_cache.h"
#include "core/serve/request.h"
#include "core/serve/tools.h"
#include "core/grammar/json_schema.h"
#include "core/runtime/host.h"
#include "core/runtime/loader.h"
#include "core/runtime/session.h"
#include "core/template/jinja.h"

#ifndef MI_VERSION
#define MI_VERSION "0.1.0"
#endif

/* ---------- configuration and global state ---------- */

typedef struct serve_cfg {
  const char *host;
  int port;
  const char *api_key;
  const char *alias;
  int parallel;     /* resident sequences */
  int queue_max;    /* waiting requests before 503 */
  int64_t ctx;      /* per-request context limit (tokens) */
  size_t max_body;  /* bytes */
  size_t max_header; /* bytes of request line + headers */
  int batched;      /* use forward_batch when the plugin has it */
  double drain_s;   /* SIGTERM: time left to in-flight requests */
  int64_t prefill_chunk; /* prompt tokens per scheduler step (0: whole prompts) */
  int64_t cache_mib;     /* prefix cache limit (0: off; -1: the default) */
  int cache_block;       /* tokens per prefix-cache block */
} serve_cfg;

typedef struct req req;
typedef struct choice choice;

typedef struct metrics {
  unsigned long long requests[6]; /* by status class 1xx..5xx (index 1..5) */
  unsigned long long rejected_busy, cancelled, prompt_tokens, gen_tokens;
  double ttft_sum, rate_sum;
  unsigned long long ttft_count, rate_count;
  unsigned long long ttft_b[12], rate_b[10];
  serve_cache_stats cache; /* the prefix cache's, copied by the scheduler */
} metrics;

static const double TTFT_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double RATE_BOUNDS[] = {1, 5, 10, 25, 50, 100, 250, 500, 1000};

static struct {
  serve_cfg cfg;
  mi_session *eng;
  int has_chat;
  serve_tools_fmt tools_fmt; /* the tool-call format the chat template asks for */
  volatile int ready;
  pthread_mutex_t mu; /* queue, slots count, metrics, flags below */
  pthread_cond_t cv;  /* the scheduler's wake-up */
  choice *q_head, *q_tail; /* choices waiting for a sequence */
  int q_len, running;
  int stopping;       /* SIGTERM: accept nothing new */
  int cancel_all;     /* drain time over */
  int sched_exit;
  metrics m;
  int have_batch;
  serve_cache *cache; /* NULL: no prefix cache */
  mi_token_trie *trie; /* the vocabulary for structured output, or NULL: */
  char trie_why[200];  /* why not */
} S;

/* ---------- one request ---------- */

enum { R_QUEUED, R_RUNNING, R_DONE };

/* One of a request's n choices: its own sequence, seed and output. */
struct choice {
  req *r;
  int index;
  mi_gen_params gp;      /* the request's, with this choice's seed and constraint */
  mi_json_matcher *jm;   /* structured output: the grammar's parse state, or NULL */
  mi_gen_constraint con;
  /* non-stream accumulation */
  char *content;
  size_t c_len, c_cap;
  json_t *lp; /* chat: array of logprob entries; completions: object of arrays */
  size_t text_off;
  int started;           /* stream: first chunk sent */
  serve_tool_stream ts;  /* stream: holds text from a tool-call marker on */
  int ended;
  int called;            /* its tool calls were parsed */
  mi_gen_stats st;       /* set when it ended without an error */
  choice *next;          /* the scheduler's queue */
};

struct req {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  int state;
  int cancelled;
  serve_req r;
  int32_t *ids;
  size_t n_ids;
  char id[48];
  long long created;
  double t_enqueue;
  double ttft_s; /* enqueued → first token sampled (queueing included) */
  /* output: the SSE bytes (stream) or the final JSON body */
  char *out;
  size_t out_len, out_cap, sent;
  int status;
  choice *ch;            /* [n_ch] */
  int n_ch, n_ended;
  int err_status;        /* the first choice that failed: its status, 0: none */
  serve_tools_fmt tfmt;  /* tool calls parsed from the output: NONE when no tools or tool_choice none */
  mi_json_grammar *grammar; /* response_format json_object/json_schema, or NULL */
  char *echo_text;       /* completions with echo: the prompt's text */
  int64_t n_gen;         /* tokens generated by all choices (the log line) */
};

static void req_unref(req *r) {
  pthread_mutex_lock(&r->mu);
  int left = --r->refs;
  pthread_mutex_unlock(&r->mu);
  if (left) return;
  serve_req_free(&r->r);
  free(r->ids);
  free(r->out);
  for (int i = 0; i < r->n_ch; i++) {
    choice *c = &r->ch[i];
    free(c->content);
    if (c->lp) json_decref(c->lp);
    serve_tool_stream_free(&c->ts);
    mi_json_matcher_free(c->jm);
  }
  free(r->ch);
  mi_json_grammar_free(r->grammar);
  free(r->echo_text);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

static int buf_append(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t nc = *cap ? *cap : 256;
    while (*len + n + 1 > nc) nc *= 2;
    char *nb = realloc(*b, nc);
    if (!nb) return -1;
    *b = nb;
    *cap = nc;
  }
  memcpy(*b + *len, s, n);
  *len += n;
  (*b)[*len] = 0;
  return 0;
}

/* Appends one SSE event "data: JSON\n\n" (steals j). Caller holds r->mu. */
static void sse_json(req *r, json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
  json_decref(j);
  if (!s) return;
  buf_append(&r->out, &r->out_len, &r->out_cap, "data: ", 6);
  buf_append(&r->out, &r->out_len, &r->out_cap, s, strlen(s));
  buf_append(&r->out, &r->out_len, &r->out_cap, "\n\n", 2);
  free(s);
}

/* A JSON string of text that may not be UTF-8 (a client's model name in a
 * message): bytes outside printable ASCII become '?' when it is not. */
static json_t *safe_string(const char *s) {
  json_t *j = json_string(s);
  if (j) return j;
  char *c = strdup(s);
  if (!c) return json_string("?");
  for (char *p = c; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
  j = json_string(c);
  free(c);
  return j;
}

static json_t *error_json(int status, const char *type, const char *code, const char *param,
                          const char *msg) {
  (void)status;
  return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", safe_string(msg), "type", type,
                   "param", param && *param ? safe_string(param) : json_null(), "code",
                   code ? json_string(code) : json_null());
}

/* ---------- token text and logprobs ---------- */

/* One token's text, lossy UTF-8, as a JSON string; its raw bytes too. */
static json_t *token_entry(int32_t id, double lp, int with_bytes) {
  const mi_tokenizer *tok = S.eng->tok;
  size_t n = 0;
  const unsigned char *b =
      id >= 0 && (size_t)id < mi_tokenizer_vocab_size(tok) ? mi_tokenizer_token_bytes(tok, id, &n)
                                                            : NULL;
  char *txt = b ? mi_tokenizer_decode_after(tok, &id, 1, NULL, NULL) : NULL; /* its piece */
  json_t *e = json_object();
  json_object_set_new(e, "token", json_string(txt ? txt : ""));
  json_object_set_new(e, "logprob", json_real(lp));
  if (with_bytes) {
    json_t *arr = json_array();
    for (size_t i = 0; b && i < n; i++) json_array_append_new(arr, json_integer(b[i]));
    json_object_set_new(e, "bytes", arr);
  }
  free(txt);
  return e;
}

static json_t *chat_lp_entry(const mi_gen_token *t) {
  json_t *e = token_entry(t->id, t->logprob, 1);
  json_t *top = json_array();
  for (int i = 0; i < t->n_top; i++)
    json_array_append_new(top, token_entry(t->top_ids[i], t->top_lps[i], 1));
  json_object_set_new(e, "top_logprobs", top);
  return e;
}

/* completions: {tokens, token_logprobs, top_logprobs, text_offset} */
static json_t *compl_lp_new(void) {
  return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs",
                   "text_offset");
}

/* One token into completions logprobs; has_lp 0: null (echo's first token). */
static void compl_lp_add_id(json_t *lp, int32_t id, int has_lp, double logprob, const int32_t *top_ids,
                            const double *top_lps, int n_top, size_t off) {
  json_t *e = token_entry(id, logprob, 0);
  json_array_append(json_object_get(lp, "tokens"), json_object_get(e, "token"));
  json_array_append_new(json_object_get(lp, "token_logprobs"),
                        has_lp ? json_real(logprob) : json_null());
  json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)off));
  json_t *top = json_object();
  for (int i = 0; i < n_top; i++) {
    json_t *te = token_entry(top_ids[i], top_lps[i], 0);
    json_object_set(top, json_string_value(json_object_get(te, "token")),
                    json_object_get(te, "logprob"));
    json_decref(te);
  }
  json_array_append_new(json_object_get(lp, "top_logprobs"), has_lp && n_top ? top : json_null());
  if (!(has_lp && n_top)) json_decref(top);
  json_decref(e);
}

static void compl_lp_add(json_t *lp, const mi_gen_token *t, size_t off) {
  compl_lp_add_id(lp, t->id, 1, t->logprob, t->top_ids, t->top_lps, t->n_top, off);
}

/* ---------- response bodies ---------- */

static json_t *chunk_base(req *r) {
  return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object",
                   r->r.chat ? "chat.completion.chunk" : "text_completion", "created",
                   (json_int_t)r->created, "model", S.cfg.alias);
}

/* A streamed chunk with one choice: delta text (or NULL), logprobs, finish;
 * chat: or a whole delta object (steals it; tool calls). */
static void stream_chunk_delta(choice *ch, const char *text, size_t len, json_t *lp,
                               const char *finish, json_t *delta) {
  req *r = ch->r;
  json_t *c = chunk_base(r);
  json_t *choice = json_pack("{s:i}", "index", ch->index);
  json_t *t = text ? json_stringn(text, len) : NULL;
  if (text && !t) t = json_string("\xef\xbf\xbd");
  if (r->r.chat) {
    if (!delta) delta = json_object();
    if (!ch->started) json_object_set_new(delta, "role", json_string("assistant"));
    if (t) json_object_set_new(delta, "content", t);
    else if (!ch->started && !json_object_get(delta, "content") &&
             !json_object_get(delta, "tool_calls"))
      json_object_set_new(delta, "content", json_string(""));
    json_object_set_new(choice, "delta", delta);
    json_object_set_new(choice, "logprobs",
                        lp ? json_pack("{s:[o]}", "content", lp) : json_null());
  } else {
    json_object_set_new(choice, "text", t ? t : json_string(""));
    json_object_set_new(choice, "logprobs", lp ? lp : json_null());
  }
  ch->started = 1;
  json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
  json_object_set_new(c, "choices", json_pack("[o]", choice));
  sse_json(r, c);
}

static void stream_chunk(choice *ch, const char *text, size_t len, json_t *lp, const char *finish) {
  stream_chunk_delta(ch, text, len, lp, finish, NULL);
}

static json_t *usage_json(const mi_gen_stats *st) {
  return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)st->n_prompt,
                   "completion_tokens", (json_int_t)st->n_gen, "total_tokens",
                   (json_int_t)(st->n_prompt + st->n_gen), "prompt_tokens_details",
                   "cached_tokens", (json_int_t)st->n_cached);
}

/* llama.cpp's "timings" */
static json_t *timings_json(const mi_gen_stats *st) {
  double pms = st->prefill_s * 1e3;
  int64_t dn = st->n_gen > 1 ? st->n_gen - 1 : 0;
  double dms = st->decode_s * 1e3;
  return json_pack("{s:I,s:f,s:f,s:f,s:I,s:f,s:f,s:f,s:f}", "prompt_n", (json_int_t)st->n_prompt,
                   "prompt_ms", pms, "prompt_per_token_ms",
                   st->n_prompt ? pms / (double)st->n_prompt : 0.0, "prompt_per_second",
                   pms > 0 ? (double)st->n_prompt / st->prefill_s : 0.0, "predicted_n",
                   (json_int_t)st->n_gen, "predicted_ms", dms, "predicted_per_token_ms",
                   dn ? dms / (double)dn : 0.0, "predicted_per_second",
                   dms > 0 && dn ? (double)dn / st->decode_s : 0.0, "ttft_ms", st->ttft_s * 1e3);
}

static const char *finish_of(const char *stop_reason) {
  if (!stop_reason) return "length";
  if (!strcmp(stop_reason, "eos") || !strcmp(stop_reason, "stop string")) return "stop";
  return "length";
}

/* ---------- structured output: the grammar as a sampling constraint ---------- */

static int is_end_id(int32_t id) { return mi_session_is_eos(S.eng, id); }

/* A token's bytes, or NULL for ids without text (special, padding). */
static const unsigned char *plain_bytes(int32_t id, size_t *n) {
  const mi_tokenizer *tok = S.eng->tok;
  *n = 0;
  if (id < 0 || (size_t)id >= mi_tokenizer_vocab_size(tok) || mi_tokenizer_is_special(tok, id))
    return NULL;
  const unsigned char *b = mi_tokenizer_token_bytes(tok, id, n);
  return b && *n ? b : NULL;
}

static int json_allows(void *user, int32_t id) {
  choice *c = user;
  if (is_end_id(id)) return mi_json_matcher_can_end(c->jm);
  size_t n;
  const unsigned char *b = plain_bytes(id, &n);
  return b && mi_json_matcher_can_feed(c->jm, b, n);
}

static size_t json_mask(void *user, uint8_t *allowed) {
  choice *c = user;
  memset(allowed, 0, (size_t)S.eng->info.vocab_size);
  return mi_token_mask(S.trie, c->jm, S.eng->eos_ids, (size_t)S.eng->n_eos, allowed);
}

static int json_accept(void *user, int32_t id) {
  choice *c = user;
  if (is_end_id(id)) return mi_json_matcher_can_end(c->jm) ? 0 : -1;
  size_t n;
  const unsigned char *b = plain_bytes(id, &n);
  return b ? mi_json_matcher_feed(c->jm, b, n) : -1;
}

/* The vocabulary as a byte trie, once: masks are walked over it. */
static void open_structured_output(void) {
  size_t tv = mi_tokenizer_vocab_size(S.eng->tok);
  if ((int64_t)tv > S.eng->info.vocab_size) {
    snprintf(S.trie_why, sizeof S.trie_why,
             "the tokenizer has %zu ids, more than the model's %lld logits", tv,
             (long long)S.eng->info.vocab_size);
    return;
  }
  S.trie = mi_token_trie_build(S.eng->tok, S.trie_why, sizeof S.trie_why);
}

/* ---------- scheduler side: token emission and completion ---------- */

/* echo: the prompt's text before the first token, with its tokens'
 * logprobs when asked (the first token has none). Caller holds r->mu. */
static void echo_prompt(choice *c, mi_gen *g) {
  req *r = c->r;
  const char *txt = r->echo_text ? r->echo_text : "";
  size_t n = strlen(txt);
  json_t *lp = NULL;
  if (r->r.logprobs) {
    lp = compl_lp_new();
    size_t off = 0;
    for (size_t i = 0; i < r->n_ids; i++) {
      double v = 0;
      const int32_t *ti = NULL;
      const double *tl = NULL;
      int nt = 0;
      int has = mi_gen_prompt_logprob(g, (int64_t)i, &v, &ti, &tl, &nt) == 0;
      compl_lp_add_id(lp, r->ids[i], has, v, ti, tl, nt, c->text_off + off);
      size_t nb = 0;
      if (r->ids[i] >= 0 && (size_t)r->ids[i] < mi_tokenizer_vocab_size(S.eng->tok))
        mi_tokenizer_token_bytes(S.eng->tok, r->ids[i], &nb);
      off += nb;
    }
  }
  if (r->r.stream) {
    stream_chunk(c, txt, n, lp, NULL);
  } else {
    buf_append(&c->content, &c->c_len, &c->c_cap, txt, n);
    if (lp) c->lp = lp;
  }
  c->text_off += n;
}

static void emit_token(choice *c, const mi_gen_token *t) {
  req *r = c->r;
  pthread_mutex_lock(&r->mu);
  if (t->step == 0 && c->index == 0) r->ttft_s = mi_now_seconds() - r->t_enqueue;
  if (r->r.stream) {
    json_t *lp = NULL;
    if (r->r.logprobs) {
      if (r->r.chat) {
        lp = chat_lp_entry(t);
      } else {
        lp = compl_lp_new();
        compl_lp_add(lp, t, c->text_off);
      }
    }
    if (r->tfmt != SERVE_TOOLS_NONE) { /* content until a tool call may be starting */
      char *out = NULL;
      size_t out_len = 0;
      serve_tool_stream_feed(&c->ts, t->visible, t->visible_len, &out, &out_len);
      if (out_len || lp || !c->started) stream_chunk(c, out_len ? out : NULL, out_len, lp, NULL);
      free(out);
    } else if (t->visible_len || lp || !c->started) {
      stream_chunk(c, t->visible, t->visible_len, lp, NULL);
    }
  } else {
    if (r->r.logprobs) {
      if (!c->lp) c->lp = r->r.chat ? json_array() : compl_lp_new();
      if (r->r.chat) json_array_append_new(c->lp, chat_lp_entry(t));
      else compl_lp_add(c->lp, t, c->c_len);
    }
    buf_append(&c->content, &c->c_len, &c->c_cap, t->visible, t->visible_len);
  }
  c->text_off += t->visible_len;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void metrics_finish(const mi_gen_stats *st, double ttft_s) {
  pthread_mutex_lock(&S.mu);
  S.m.prompt_tokens += (unsigned long long)st->n_prompt;
  S.m.gen_tokens += (unsigned long long)st->n_gen;
  if (st->n_gen > 0) {
    S.m.ttft_sum += ttft_s;
    S.m.ttft_count++;
    for (size_t i = 0; i < sizeof TTFT_BOUNDS / sizeof *TTFT_BOUNDS; i++)
      if (ttft_s <= TTFT_BOUNDS[i]) S.m.ttft_b[i]++;
  }
  if (st->n_gen > 1 && st->decode_s > 0) {
    double rate = (double)(st->n_gen - 1) / st->decode_s;
    S.m.rate_sum += rate;
    S.m.rate_count++;
    for (size_t i = 0; i < sizeof RATE_BOUNDS / sizeof *RATE_BOUNDS; i++)
      if (rate <= RATE_BOUNDS[i]) S.m.rate_b[i]++;
  }
  pthread_mutex_unlock(&S.mu);
}

/* A streamed choice's end: the text held back, its tool calls, its finish. */
static void stream_choice_end(choice *c, const mi_gen_stats *st) {
  req *r = c->r;
  if (r->tfmt != SERVE_TOOLS_NONE) {
    char *out = NULL;
    size_t out_len = 0;
    serve_tool_stream_feed(&c->ts, st->tail, strlen(st->tail), &out, &out_len);
    if (out_len) stream_chunk(c, out, out_len, NULL, NULL);
    free(out);
    json_t *deltas = serve_tool_stream_end(&c->ts, &c->called);
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) stream_chunk_delta(c, NULL, 0, NULL, NULL, json_incref(d));
    json_decref(deltas);
  } else if (st->tail[0]) {
    stream_chunk(c, st->tail, strlen(st->tail), NULL, NULL);
  }
  stream_chunk(c, NULL, 0, NULL, c->called ? "tool_calls" : finish_of(st->stop_reason));
}

/* The usage of the whole request: the prompt once, every choice's tokens. */
static mi_gen_stats req_stats(const req *r) {
  mi_gen_stats st = r->ch[0].st;
  st.n_prompt = (int64_t)r->n_ids;
  st.n_gen = 0;
  for (int i = 0; i < r->n_ch; i++) st.n_gen += r->ch[i].st.n_gen;
  return st;
}

static json_t *choice_json(choice *c) {
  req *r = c->r;
  json_t *o = json_pack("{s:i}", "index", c->index);
  if (r->r.chat) { /* the text, or its tool calls (serve_tools.c) */
    json_object_set_new(o, "message",
                        serve_tools_message(r->tfmt, c->content ? c->content : "", c->c_len,
                                            r->r.parallel_tool_calls, &c->called));
    json_object_set_new(o, "logprobs",
                        r->r.logprobs ? json_pack("{s:O}", "content", c->lp ? c->lp : json_array())
                                      : json_null());
  } else {
    json_t *text = json_stringn(c->content ? c->content : "", c->c_len);
    json_object_set_new(o, "text", text ? text : json_string("\xef\xbf\xbd"));
    json_object_set_new(o, "logprobs",
                        r->r.logprobs ? (c->lp ? json_incref(c->lp) : compl_lp_new()) : json_null());
  }
  json_object_set_new(o, "finish_reason",
                      json_string(c->called ? "tool_calls" : finish_of(c->st.stop_reason)));
  return o;
}

/* Every choice has ended: the body, or the stream's last events. Caller
 * holds r->mu. */
static void req_complete(req *r) {
  if (r->r.stream) {
    if (!r->err_status && r->r.include_usage) {
      mi_gen_stats st = req_stats(r);
      json_t *c = chunk_base(r);
      json_object_set_new(c, "choices", json_array());
      json_object_set_new(c, "usage", usage_json(&st));
      json_object_set_new(c, "timings", timings_json(&r->ch[0].st));
      sse_json(r, c);
    }
    buf_append(&r->out, &r->out_len, &r->out_cap, "data: [DONE]\n\n", 14);
    r->status = r->err_status ? r->err_status : 200;
  } else if (!r->err_status) {
    mi_gen_stats st = req_stats(r);
    json_t *choices = json_array();
    for (int i = 0; i < r->n_ch; i++) json_array_append_new(choices, choice_json(&r->ch[i]));
    json_t *body = json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object",
                             r->r.chat ? "chat.completion" : "text_completion", "created",
                             (json_int_t)r->created, "model", S.cfg.alias);
    json_object_set_new(body, "choices", choices);
    json_object_set_new(body, "usage", usage_json(&st));
    json_object_set_new(body, "timings", timings_json(&r->ch[0].st));
    char *s = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(body);
    r->out_len = 0;
    if (s) buf_append(&r->out, &r->out_len, &r->out_cap, s, strlen(s));
    free(s);
    r->status = s ? 200 : 500;
  }
  r->state = R_DONE;
  pthread_cond_broadcast(&r->cv);
}

/* Ends one choice: success (st) or an error (status, msg); the request
 * ends with its last choice, failed when any failed. */
static void finish_choice(choice *c, const mi_gen_stats *st, int status, const char *msg) {
  req *r = c->r;
  pthread_mutex_lock(&r->mu);
  if (c->ended) {
    pthread_mutex_unlock(&r->mu);
    return;
  }
  if (msg) {
    if (!r->err_status) { /* the first failure is the request's */
      r->err_status = status;
      json_t *ej = error_json(status, "server_error", NULL, NULL, msg);
      if (r->r.stream) { /* the 200 and the event stream are already under way */
        sse_json(r, ej);
      } else {
        r->out_len = 0;
        char *s = json_dumps(ej, JSON_COMPACT);
        json_decref(ej);
        if (s) buf_append(&r->out, &r->out_len, &r->out_cap, s, strlen(s));
        free(s);
        r->status = status;
      }
    }
  } else {
    c->st = *st;
    r->n_gen += st->n_gen;
    if (r->r.stream) stream_choice_end(c, st);
    else buf_append(&c->content, &c->c_len, &c->c_cap, st->tail, strlen(st->tail));
  }
  c->ended = 1;
  if (++r->n_ended == r->n_ch) req_complete(r);
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

typedef struct slot {
  req *r;    /* the request of */
  choice *c; /* this choice */
  mi_gen *g;
  int decoding;   /* the prompt has run: a token is sampled every step */
  int begun;      /* the prefix cache was asked (the prompt's first step) */
  int64_t snap_at; /* fixed-state models: the prefill stops here once so the
                      prefix cache can keep the state there (0: no stop) */
} slot;

/* The prefix cache's counters into the metrics (under S.mu). */
static void cache_metrics(void) {
  if (!S.cache) return;
  serve_cache_stats cs;
  serve_cache_stats_get(S.cache, &cs);
  pthread_mutex_lock(&S.mu);
  S.m.cache = cs;
  pthread_mutex_unlock(&S.mu);
}

/* Keeps the sequence's whole blocks of tokens in the prefix cache: after
 * its prompt ran, and when it ends (the answer, for the conversation's next
 * turn). A failure costs future hits only. */
static void cache_store(slot *s, int64_t len) {
  if (!S.cache || !s->g) return;
  size_t n;
  const int32_t *toks = mi_gen_tokens(s->g, &n);
  int64_t in_seq = S.eng->M->seq_len(S.eng->model, mi_gen_seq(s->g));
  if (len > in_seq) len = in_seq;
  if (len > (int64_t)n) len = (int64_t)n;
  char err[512];
  if (len >= serve_cache_block(S.cache) &&
      serve_cache_store(S.cache, toks, len, mi_gen_seq(s->g), err, sizeof err) != 0)
    mi_log(MI_LOG_WARN, "mi-serve", "%s: prefix cache: %s", s->r->id, err);
  cache_metrics();
}

static void slot_release(slot *s) {
  req_unref(s->r);
  *s = (slot){0};
  pthread_mutex_lock(&S.mu);
  S.running--;
  pthread_mutex_unlock(&S.mu);
}

static void slot_end(slot *s, int status, const char *msg) {
  mi_gen_stats st;
  /* a model without fixed state resumes anywhere: keep the answer too */
  if (!msg && s->decoding && S.cache && !serve_cache_has_fixed(S.cache)) cache_store(s, INT64_MAX);
  mi_gen_end(s->g, &st);
  metrics_finish(&st, s->r->ttft_s); /* tokens of cancelled and failed requests count too */
  int cancelled;
  pthread_mutex_lock(&s->r->mu);
  cancelled = s->r->cancelled;
  pthread_mutex_unlock(&s->r->mu);
  if (cancelled && !msg) {
    msg = "the request was cancelled";
    status = 499;
    pthread_mutex_lock(&S.mu);
    S.m.cancelled++;
    pthread_mutex_unlock(&S.mu);
  }
  finish_choice(s->c, msg ? NULL : &st, status, msg);
  slot_release(s);
}

static int req_cancelled(req *r) {
  pthread_mutex_lock(&r->mu);
  int c = r->cancelled;
  pthread_mutex_unlock(&r->mu);
  return c;
}

/* A request taken into a slot: its generation begins (the prompt left to
 * prefill_step) and whatever prefix the cache holds is copied in. */
static void slot_start(slot *s, int cancel_all) {
  req *r = s->r;
  char err[1024];
  pthread_mutex_lock(&r->mu);
  r->state = R_RUNNING;
  pthread_mutex_unlock(&r->mu);
  if (req_cancelled(r) || cancel_all) {
    finish_choice(s->c, NULL, cancel_all ? 503 : 499,
                  cancel_all ? "the server is shutting down" : "the request was cancelled");
    slot_release(s);
    return;
  }
  if (mi_gen_begin(S.eng, r->ids, r->n_ids, &s->c->gp, &s->g, err, sizeof err) != 0) {
    mi_log(MI_LOG_ERROR, "mi-serve", "%s: %s", r->id, err);
    finish_choice(s->c, NULL, 500, err);
    slot_release(s);
    return;
  }
  s->begun = !S.cache || s->c->gp.prompt_logprobs; /* nothing to restore: the prompt runs as is */
}

/* A prompt's first step: the longest prefix the cache holds is copied in
 * (another sequence may have stored it since this one was admitted), and
 * with fixed state the prefill is set to stop once at the last block
 * boundary for a snapshot. */
static void slot_restore(slot *s) {
  req *r = s->r;
  char err[1024];
  s->begun = 1;
  mi_seq *seq = mi_gen_seq(s->g);
  int64_t hit = serve_cache_restore(S.cache, r->ids, (int64_t)r->n_ids, seq, err, sizeof err);
  if (hit > 0 && mi_gen_set_cached(s->g, hit, err, sizeof err) != 0) hit = -1;
  if (hit < 0) { /* computed in full instead */
    mi_log(MI_LOG_WARN, "mi-serve", "%s: prefix cache: %s", r->id, err);
    S.eng->M->seq_truncate(S.eng->model, seq, 0);
    hit = 0;
  }
  cache_metrics();
  s->snap_at = 0;
  if (serve_cache_has_fixed(S.cache)) {
    int64_t B = serve_cache_block(S.cache), at = ((int64_t)r->n_ids - 1) / B * B;
    if (at > hit) s->snap_at = at;
  }
}

/* Runs up to `budget` prompt tokens of the slots still prefilling, those
 * with the fewest left first: a short prompt that arrives during a long one
 * waits one chunk, not the whole long prefill (chunked prefill). */
static void prefill_step(slot *slots, int P, int64_t budget) {
  char err[1024];
  while (budget > 0) {
    /* prompts not begun whose prefix another sequence has cached since: take it now */
    for (int i = 0; i < P; i++)
      if (slots[i].g && !slots[i].begun &&
          serve_cache_peek(S.cache, slots[i].r->ids, (int64_t)slots[i].r->n_ids) > 0)
        slot_restore(&slots[i]);
    slot *s = NULL;
    for (int i = 0; i < P; i++)
      if (slots[i].g && !slots[i].decoding &&
          (!s || mi_gen_prefill_left(slots[i].g) < mi_gen_prefill_left(s->g)))
        s = &slots[i];
    if (!s) return;
    if (!s->begun) slot_restore(s);
    int64_t left = mi_gen_prefill_left(s->g), done = (int64_t)s->r->n_ids - left;
    int64_t want = left < budget ? left : budget;
    if (s->snap_at > done && done + want > s->snap_at) want = s->snap_at - done;
    if (req_cancelled(s->r)) {
      slot_end(s, 0, NULL);
      continue;
    }
    int64_t rem = mi_gen_prefill(s->g, want, err, sizeof err);
    budget -= want;
    if (rem < 0) {
      mi_log(MI_LOG_ERROR, "mi-serve", "%s: %s", s->r->id, err);
      slot_end(s, 500, err);
      continue;
    }
    /* what ran is cached at once: prompts waiting with the same prefix
     * (32 clients over one system prompt) restore it instead of running it */
    if (S.cache && !serve_cache_has_fixed(S.cache)) cache_store(s, done + want);
    if (s->snap_at && done + want == s->snap_at) {
      cache_store(s, s->snap_at);
      s->snap_at = 0;
    }
    if (rem == 0) {
      s->decoding = 1;
      if (s->r->r.echo) { /* the prompt (and its logprobs) before any token; max_tokens 0 too */
        pthread_mutex_lock(&s->r->mu);
        echo_prompt(s->c, s->g);
        pthread_cond_broadcast(&s->r->cv);
        pthread_mutex_unlock(&s->r->mu);
      }
      if (mi_gen_done(s->g)) slot_end(s, 0, NULL); /* max_tokens 0 */
    }
  }
}

/* One decode step for every sequence whose prompt has run: sample, emit,
 * then feed all the sampled tokens in one batched pass. */
static void decode_step(slot *slots, int P, int cancel_all, mi_seq **seqs, int32_t *ids,
                        float **logits, int *pend) {
  char err[1024];
  mi_session *e = S.eng;
  int n_fwd = 0;
  for (int i = 0; i < P; i++) {
    pend[i] = 0;
    if (!slots[i].r) continue;
    req *r = slots[i].r;
    if (cancel_all) {
      slot_end(&slots[i], 503, "the server is shutting down");
      continue;
    }
    if (req_cancelled(r)) { /* the client left: free the sequence now */
      slot_end(&slots[i], 0, NULL);
      continue;
    }
    if (!slots[i].decoding) continue;
    mi_gen_token t;
    if (mi_gen_sample(slots[i].g, &t, err, sizeof err) != 0) {
      slot_end(&slots[i], 500, err);
      continue;
    }
    emit_token(slots[i].c, &t);
    if (!mi_gen_advance(slots[i].g, 0)) {
      slot_end(&slots[i], 0, NULL);
      continue;
    }
    pend[i] = 1;
    n_fwd++;
  }
  if (n_fwd == 0) return;
  if (S.have_batch && n_fwd > 1) {
    int n = 0;
    for (int i = 0; i < P; i++)
      if (pend[i]) {
        seqs[n] = mi_gen_seq(slots[i].g);
        ids[n] = mi_gen_last(slots[i].g);
        logits[n] = mi_gen_logits(slots[i].g);
        n++;
      }
    if (e->M->forward_batch(e->model, seqs, ids, n, logits, err, sizeof err) != 0) {
      mi_log(MI_LOG_ERROR, "mi-serve", "batched decode of %d sequences: %s", n, err);
      for (int i = 0; i < P; i++)
        if (pend[i]) slot_end(&slots[i], 500, err);
    } else {
      for (int i = 0; i < P; i++)
        if (pend[i] && mi_gen_check_logits(slots[i].g, err, sizeof err) != 0)
          slot_end(&slots[i], 500, err);
    }
  } else {
    for (int i = 0; i < P; i++)
      if (pend[i] && mi_gen_forward(slots[i].g, err, sizeof err) != 0) slot_end(&slots[i], 500, err);
  }
}

static void *scheduler(void *arg) {
  (void)arg;
  const int P = S.cfg.parallel;
  slot *slots = calloc((size_t)P, sizeof *slots);
  mi_seq **seqs = calloc((size_t)P, sizeof *seqs);
  int32_t *ids = calloc((size_t)P, sizeof *ids);
  float **logits = calloc((size_t)P, sizeof *logits);
  int *pend = calloc((size_t)P, sizeof *pend);
  if (!slots || !seqs || !ids || !logits || !pend) abort();
  const int64_t budget = S.cfg.prefill_chunk > 0 ? S.cfg.prefill_chunk : INT64_MAX;
  for (;;) {
    /* admit */
    int n_active = 0;
    for (int i = 0; i < P; i++) n_active += slots[i].r != NULL;
    pthread_mutex_lock(&S.mu);
    while (!S.sched_exit && n_active == 0 && !S.q_head) pthread_cond_wait(&S.cv, &S.mu);
    if (S.sched_exit && n_active == 0 && !S.q_head) {
      pthread_mutex_unlock(&S.mu);
      break;
    }
    int admitted[256], n_adm = 0;
    for (int i = 0; i < P && S.q_head; i++) {
      if (slots[i].r) continue;
      choice *ch = S.q_head;
      S.q_head = ch->next;
      if (!S.q_head) S.q_tail = NULL;
      S.q_len--;
      S.running++;
      slots[i].c = ch;
      slots[i].r = ch->r;
      admitted[n_adm++] = i;
    }
    int cancel_all = S.cancel_all;
    pthread_mutex_unlock(&S.mu);
    for (int k = 0; k < n_adm; k++) slot_start(&slots[admitted[k]], cancel_all);
    prefill_step(slots, P, budget);
    decode_step(slots, P, cancel_all, seqs, ids, logits, pend);
  }
  free(slots);
  free(seqs);
  free(ids);
  free(logits);
  free(pend);
  return NULL;
}

/* ---------- HTTP side ---------- */

typedef struct conn {
  char *body;
  size_t len, cap;
  int too_big;
  int fd;
  /* the request's log line (completed) */
  double t0;
  int status;    /* 0: no response queued */
  char method[8];
  char path[96]; /* printable ASCII, truncated: never a prompt */
  req *r;        /* completions: a reference for the token counts */
} conn;

/* The connection this thread answers (one thread per connection): lets
 * send_buf record the status for the log line without threading the
 * connection state through every reply helper. */
static __thread conn *cur_conn;

static enum MHD_Result send_buf(struct MHD_Connection *c, int status, const char *ctype,
                                const char *body, size_t len, const char *retry_after) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", ctype);
  if (retry_after) MHD_add_response_header(resp, "Retry-After", retry_after);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  if (cur_conn) cur_conn->status = status;
  pthread_mutex_lock(&S.mu);
  if (status / 100 >= 1 && status / 100 <= 5) S.m.requests[status / 100]++;
  pthread_mutex_unlock(&S.mu);
  return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *j,
                                 const char *retry_after) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
  json_decref(j);
  enum MHD_Result ret = send_buf(c, status, "application/json", s ? s : "{}", s ? strlen(s) : 2,
                                 retry_after);
  free(s);
  return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *type,
                                  const char *code, const char *param, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return send_json(c, status, error_json(status, type, code, param, msg),
                   status == 503 ? "1" : NULL);
}

/* Constant-time comparison of the Authorization header with "Bearer KEY":
 * the time depends only on the lengths, never on where they differ. */
static int auth_ok(struct MHD_Connection *c) {
  if (!S.cfg.api_key) return 1;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!h) h = "";
  const char *key = S.cfg.api_key;
  size_t hl = strlen(h), kl = strlen(key);
  unsigned diff = hl != kl + 7;
  static const char bearer[] = "Bearer ";
  for (size_t i = 0; i < kl + 7; i++) {
    unsigned char want = i < 7 ? (unsigned char)bearer[i] : (unsigned char)key[i - 7];
    unsigned char got = i < hl ? (unsigned char)h[i] : 0;
    diff |= (unsigned)(want ^ got);
  }
  return diff == 0;
}

static int peer_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return 0;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

typedef struct stream_ctx {
  req *r;
  int fd;
} stream_ctx;

/* Waits (r->mu held) up to 50 ms for r to change: the waiters look at
 * their peer's socket between ticks. */
static void wait_tick(req *r) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 50 * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

static void cancel_req(req *r) {
  pthread_mutex_lock(&r->mu);
  int was = r->state != R_DONE && !r->cancelled;
  r->cancelled = 1;
  pthread_mutex_unlock(&r->mu);
  if (!was) return;
  /* still queued: leave the queue now (its place goes to the next client);
   * running: the scheduler frees its sequence at its next step */
  choice *gone[SERVE_MAX_N];
  int n_gone = 0;
  pthread_mutex_lock(&S.mu);
  choice *prev = NULL;
  for (choice **pp = &S.q_head; *pp;) {
    if ((*pp)->r == r && n_gone < SERVE_MAX_N) {
      gone[n_gone++] = *pp;
      *pp = (*pp)->next;
      S.q_len--;
      continue;
    }
    prev = *pp;
    pp = &(*pp)->next;
  }
  S.q_tail = prev;
  if (n_gone) S.m.cancelled++;
  pthread_cond_signal(&S.cv);
  pthread_mutex_unlock(&S.mu);
  for (int i = 0; i < n_gone; i++) {
    finish_choice(gone[i], NULL, 499, "the request was cancelled");
    req_unref(r); /* the scheduler's reference */
  }
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  stream_ctx *sc = cls;
  req *r = sc->r;
  (void)pos;
  pthread_mutex_lock(&r->mu);
  while (r->sent == r->out_len && r->state != R_DONE) {
    wait_tick(r);
    if (r->sent == r->out_len && r->state != R_DONE && peer_gone(sc->fd)) {
      pthread_mutex_unlock(&r->mu);
      cancel_req(r);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
  if (r->sent < r->out_len) {
    size_t k = r->out_len - r->sent < max ? r->out_len - r->sent : max;
    memcpy(buf, r->out + r->sent, k);
    r->sent += k;
    if (r->sent == r->out_len) r->sent = r->out_len = 0; /* all sent: reuse the buffer */
    pthread_mutex_unlock(&r->mu);
    return (ssize_t)k;
  }
  pthread_mutex_unlock(&r->mu);
  return MHD_CONTENT_READER_END_OF_STREAM;
}

static void sse_free(void *cls) {
  stream_ctx *sc = cls;
  cancel_req(sc->r); /* no-op when it finished */
  req_unref(sc->r);
  free(sc);
}

/* One Prometheus histogram: HELP and TYPE, a bucket per bound, +Inf, _sum
 * and _count. */
static void out_histogram(char **b, size_t *len, size_t *cap, const char *name, const char *help,
                          const double *bounds, size_t n, const unsigned long long *buckets,
                          unsigned long long count, double sum) {
  char line[512];
  int k = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  buf_append(b, len, cap, line, (size_t)k);
  for (size_t i = 0; i < n; i++) {
    k = snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], buckets[i]);
    buf_append(b, len, cap, line, (size_t)k);
  }
  k = snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, count, name,
               sum, name, count);
  buf_append(b, len, cap, line, (size_t)k);
}

static enum MHD_Result handle_metrics(struct MHD_Connection *c) {
  char *b = NULL;
  size_t len = 0, cap = 0;
  char line[512];
#define OUT(...)                                                                                   \
  do {                                                                                             \
    int n_ = snprintf(line, sizeof line, __VA_ARGS__);                                            \
    buf_append(&b, &len, &cap, line, (size_t)n_);                                                 \
  } while (0)
  pthread_mutex_lock(&S.mu);
  metrics m = S.m;
  int q = S.q_len, run = S.running;
  pthread_mutex_unlock(&S.mu);
  OUT("# HELP mi_requests_total HTTP requests answered, by status class.\n"
      "# TYPE mi_requests_total counter\n");
  for (int i = 1; i <= 5; i++) OUT("mi_requests_total{code=\"%dxx\"} %llu\n", i, m.requests[i]);
  OUT("# HELP mi_requests_rejected_busy_total Requests answered 503 because the queue was full.\n"
      "# TYPE mi_requests_rejected_busy_total counter\nmi_requests_rejected_busy_total %llu\n",
      m.rejected_busy);
  OUT("# HELP mi_requests_cancelled_total Requests whose client left before the end.\n"
      "# TYPE mi_requests_cancelled_total counter\nmi_requests_cancelled_total %llu\n",
      m.cancelled);
  OUT("# HELP mi_prompt_tokens_total Prompt tokens processed.\n"
      "# TYPE mi_prompt_tokens_total counter\nmi_prompt_tokens_total %llu\n", m.prompt_tokens);
  OUT("# HELP mi_generation_tokens_total Tokens generated.\n"
      "# TYPE mi_generation_tokens_total counter\nmi_generation_tokens_total %llu\n", m.gen_tokens);
  OUT("# HELP mi_queue_depth Requests waiting for a sequence slot.\n"
      "# TYPE mi_queue_depth gauge\nmi_queue_depth %d\n", q);
  OUT("# HELP mi_requests_running Requests holding a sequence slot.\n"
      "# TYPE mi_requests_running gauge\nmi_requests_running %d\n", run);
  out_histogram(&b, &len, &cap, "mi_time_to_first_token_seconds",
                "Request queued to first token sampled (queueing and prefill).", TTFT_BOUNDS,
                sizeof TTFT_BOUNDS / sizeof *TTFT_BOUNDS, m.ttft_b, m.ttft_count, m.ttft_sum);
  out_histogram(&b, &len, &cap, "mi_decode_tokens_per_second", "Per-request decode rate after the first token.",
                RATE_BOUNDS, sizeof RATE_BOUNDS / sizeof *RATE_BOUNDS, m.rate_b, m.rate_count, m.rate_sum);
  const serve_cache_stats *pc = &m.cache;
  OUT("# HELP mi_prefix_cache_lookup_tokens_total Prompt tokens looked up in the prefix cache.\n"
      "# TYPE mi_prefix_cache_lookup_tokens_total counter\nmi_prefix_cache_lookup_tokens_total %llu\n",
      (unsigned long long)pc->lookup_tokens);
  OUT("# HELP mi_prefix_cache_hit_tokens_total Prompt tokens restored from the prefix cache.\n"
      "# TYPE mi_prefix_cache_hit_tokens_total counter\nmi_prefix_cache_hit_tokens_total %llu\n",
      (unsigned long long)pc->hit_tokens);
  OUT("# HELP mi_prefix_cache_hit_rate Restored over looked-up prompt tokens.\n"
      "# TYPE mi_prefix_cache_hit_rate gauge\nmi_prefix_cache_hit_rate %.6f\n",
      pc->lookup_tokens ? (double)pc->hit_tokens / (double)pc->lookup_tokens : 0.0);
  OUT("# HELP mi_prefix_cache_bytes Host memory the prefix cache holds (limit: _max).\n"
      "# TYPE mi_prefix_cache_bytes gauge\nmi_prefix_cache_bytes %llu\nmi_prefix_cache_bytes_max %llu\n",
      (unsigned long long)pc->bytes, (unsigned long long)pc->max_bytes);
  OUT("# HELP mi_prefix_cache_blocks Blocks held (and state snapshots among them).\n"
      "# TYPE mi_prefix_cache_blocks gauge\nmi_prefix_cache_blocks %llu\nmi_prefix_cache_snapshots %llu\n",
      (unsigned long long)pc->blocks, (unsigned long long)pc->snapshots);
  OUT("# HELP mi_prefix_cache_evictions_total Blocks evicted to stay within the limit.\n"
      "# TYPE mi_prefix_cache_evictions_total counter\nmi_prefix_cache_evictions_total %llu\n",
      (unsigned long long)pc->evictions);
#undef OUT
  enum MHD_Result ret = send_buf(c, 200, "text/plain; version=0.0.4", b ? b : "", len, NULL);
  free(b);
  return ret;
}

/* The prompt's token ids for a parsed request. 0, or -1 with e set. */
static int build_prompt(serve_req *sr, int32_t **ids, size_t *n, serve_err *e) {
  const mi_tokenizer *tok = S.eng->tok;
  if (!sr->chat && sr->prompt_ids) {
    for (size_t i = 0; i < sr->n_prompt_ids; i++)
      if (sr->prompt_ids[i] >= S.eng->info.vocab_size) {
        e->status = 400;
        e->type = "invalid_request_error";
        snprintf(e->param, sizeof e->param, "prompt");
        snprintf(e->message, sizeof e->message, "token id %d is outside the vocabulary",
                 sr->prompt_ids[i]);
        return -1;
      }
    *ids = malloc(sr->n_prompt_ids * sizeof(int32_t) + 4);
    if (!*ids) goto oom;
    memcpy(*ids, sr->prompt_ids, sr->n_prompt_ids * sizeof(int32_t));
    *n = sr->n_prompt_ids;
    return 0;
  }
  char *rendered = NULL;
  const char *text = sr->prompt;
  if (sr->chat) {
    if (!S.has_chat) {
      e->status = 400;
      e->type = "invalid_request_error";
      snprintf(e->message, sizeof e->message,
               "this model declares no chat template this server can parse (its log says why at start): use /v1/completions");
      return -1;
    }
    /* as transformers renders it: messages (tool calls' arguments as
     * mappings), tools as sent, add_generation_prompt, enable_thinking */
    json_t *ctx = json_pack("{s:O,s:b,s:b}", "messages", (json_t *)sr->tmpl_msgs,
                            "add_generation_prompt", 1, "enable_thinking", sr->enable_thinking != 0);
    if (!ctx || (sr->tools && json_object_set(ctx, "tools", (json_t *)sr->tools))) {
      json_decref(ctx);
      goto oom;
    }
    char terr[300] = "";
    rendered = mi_tokenizer_chat_render_ctx(tok, ctx, terr, sizeof terr);
    json_decref(ctx);
    if (!rendered && !strcmp(terr, "out of memory")) goto oom;
    if (!rendered) { /* the template's own raise_exception ("roles must alternate"), or a limit */
      e->status = 400;
      e->type = "invalid_request_error";
      snprintf(e->param, sizeof e->param, "messages");
      snprintf(e->message, sizeof e->message, "the model's chat template refuses these messages: %s", terr);
      return -1;
    }
    text = rendered;
  }
  /* chat: the template's special tokens are parsed; a completion's prompt
   * is taken as mi-run -p takes it (special tokens parsed too) */
  int rc = rendered ? mi_tokenizer_encode(tok, text, strlen(text), 1, ids, n)
                    : mi_tokenizer_encode_prompt(tok, text, strlen(text), 1, ids, n); /* a post-processor's BOS first */
  free(rendered);
  if (rc != 0) {
    e->status = 400;
    e->type = "invalid_request_error";
    snprintf(e->message, sizeof e->message, "cannot tokenize the prompt: %s",
             mi_tokenizer_strerror(rc));
    return -1;
  }
  if (*n == 0) {
    e->status = 400;
    e->type = "invalid_request_error";
    snprintf(e->param, sizeof e->param, sr->chat ? "messages" : "prompt");
    snprintf(e->message, sizeof e->message, "the prompt is empty");
    return -1;
  }
  return 0;
oom:
  e->status = 500;
  e->type = "server_error";
  snprintf(e->message, sizeof e->message, "out of memory");
  return -1;
}

static json_t *model_json(void) {
  return json_pack("{s:s,s:s,s:I,s:s,s:{s:I,s:I}}", "id", S.cfg.alias, "object", "model",
                   "created", (json_int_t)time(NULL), "owned_by", "metainfer", "meta", "n_ctx",
                   (json_int_t)S.cfg.ctx, "n_vocab", (json_int_t)S.eng->info.vocab_size);
}

/* llama-server's /props, with what this server knows */
static enum MHD_Result handle_props(struct MHD_Connection *c) {
  const char *tmpl = mi_tokenizer_chat_template(S.eng->tok);
  json_t *j = json_object();
  json_object_set_new(j, "model", json_string(S.cfg.alias));
  json_object_set_new(j, "architecture", safe_string(S.eng->info.architecture));
  json_object_set_new(j, "model_plugin", safe_string(S.eng->model_plugin->desc->name));
  json_object_set_new(j, "platform", safe_string(S.eng->platform_plugin->desc->name));
  json_object_set_new(j, "n_ctx", json_integer((json_int_t)S.cfg.ctx));
  json_object_set_new(j, "n_ctx_train", json_integer((json_int_t)S.eng->info.max_position));
  json_object_set_new(j, "n_vocab", json_integer((json_int_t)S.eng->info.vocab_size));
  json_object_set_new(j, "has_chat_template", json_boolean(tmpl && *tmpl));
  json_object_set_new(j, "chat_template_supported", json_boolean(S.has_chat));
  json_object_set_new(j, "total_slots", json_integer(S.cfg.parallel));
  json_object_set_new(j, "queue_max", json_integer(S.cfg.queue_max));
  json_object_set_new(j, "batched_decode", json_boolean(S.have_batch));
  json_object_set_new(j, "max_logit_bias", json_integer(SERVE_MAX_LOGIT_BIAS));
  json_object_set_new(j, "max_n", json_integer(SERVE_MAX_N));
  json_object_set_new(j, "prefill_chunk", json_integer((json_int_t)S.cfg.prefill_chunk));
  json_object_set_new(j, "structured_output", json_boolean(S.trie != NULL));
  if (S.cache) { /* the limits (fixed at start); what it holds now is in /metrics */
    pthread_mutex_lock(&S.mu);
    uint64_t max_bytes = S.m.cache.max_bytes; /* the scheduler's copy: it owns the cache */
    pthread_mutex_unlock(&S.mu);
    json_object_set_new(j, "prefix_cache",
                        json_pack("{s:I,s:i,s:b}", "max_bytes", (json_int_t)max_bytes,
                                  "block_tokens", serve_cache_block(S.cache), "fixed_state_snapshots",
                                  serve_cache_has_fixed(S.cache)));
  } else {
    json_object_set_new(j, "prefix_cache", json_null());
  }
  json_object_set_new(j, "default_generation_settings",
                      json_pack("{s:f,s:i,s:f,s:f,s:f}", "temperature", 0.8, "top_k", 40, "top_p",
                                0.95, "min_p", 0.05, "repeat_penalty", 1.0));
  char build[128];
  snprintf(build, sizeof build, "mi-serve (MetaInfer) %s, plugin ABI %d.%d", MI_VERSION,
           MI_ABI_MAJOR, MI_ABI_MINOR);
  json_object_set_new(j, "build_info", json_string(build));
  return send_json(c, 200, j, NULL);
}

/* The JSON object body of /tokenize or /detokenize, or NULL after a 400. */
static json_t *small_body(struct MHD_Connection *c, conn *cs, enum MHD_Result *ret) {
  json_error_t je;
  json_t *j = json_loadb(cs->body ? cs->body : "", cs->len, JSON_REJECT_DUPLICATES, &je);
  if (!j || !json_is_object(j)) {
    char msg[256];
    if (j) snprintf(msg, sizeof msg, "the request body must be a JSON object");
    else snprintf(msg, sizeof msg, "We could not parse the JSON body of your request: %s (line %d, "
                  "column %d)", je.text, je.line, je.column);
    for (char *p = msg; *p; p++)
      if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
    json_decref(j);
    *ret = send_error(c, 400, "invalid_request_error", "invalid_json", NULL, "%s", msg);
    return NULL;
  }
  return j;
}

/* POST /tokenize {content | prompt, add_special?, parse_special?, with_pieces?}
 * → {tokens:[ids]} (or [{id, piece}]), as llama-server. The text is
 * tokenized as a completion's prompt is: special tokens parsed, nothing
 * added unless add_special (the BOS tokenizer_config.json declares). */
static enum MHD_Result handle_tokenize(struct MHD_Connection *c, conn *cs) {
  enum MHD_Result ret;
  json_t *j = small_body(c, cs, &ret);
  if (!j) return ret;
  const char *pname = json_object_get(j, "content") ? "content" : "prompt";
  json_t *t = json_object_get(j, pname);
  json_t *as = json_object_get(j, "add_special"), *ps = json_object_get(j, "parse_special");
  json_t *wp = json_object_get(j, "with_pieces");
  const char *bad = !json_is_string(t) ? pname
                    : as && !json_is_boolean(as) ? "add_special"
                    : ps && !json_is_boolean(ps) ? "parse_special"
                    : wp && !json_is_boolean(wp) ? "with_pieces"
                                                 : NULL;
  if (bad) {
    ret = send_error(c, 400, "invalid_request_error", "invalid_type", bad,
                     !strcmp(bad, pname) ? "'%s' must be a string" : "'%s' must be a boolean", bad);
    json_decref(j);
    return ret;
  }
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = mi_tokenizer_encode(S.eng->tok, json_string_value(t), json_string_length(t),
                               !ps || json_is_true(ps), &ids, &n);
  if (rc != 0) {
    ret = send_error(c, 400, "invalid_request_error", "invalid_value", pname,
                     "cannot tokenize '%s': %s", pname, mi_tokenizer_strerror(rc));
    json_decref(j);
    return ret;
  }
  json_t *arr = json_array();
  int32_t bos = mi_tokenizer_bos_id(S.eng->tok);
  if (json_is_true(as) && bos >= 0) json_array_append_new(arr, json_integer(bos));
  for (size_t i = 0; i < n; i++) {
    if (json_is_true(wp)) {
      char *piece = mi_tokenizer_decode_after(S.eng->tok, &ids[i], 1, NULL, NULL);
      json_array_append_new(arr, json_pack("{s:i,s:o}", "id", ids[i],
                                           "piece", json_string(piece ? piece : "")));
      free(piece);
    } else {
      json_array_append_new(arr, json_integer(ids[i]));
    }
  }
  free(ids);
  json_decref(j);
  return send_json(c, 200, json_pack("{s:o}", "tokens", arr), NULL);
}

/* POST /detokenize {tokens:[ids]} → {content}. The body limit bounds the
 * array; every id must be in the tokenizer's vocabulary. */
static enum MHD_Result handle_detokenize(struct MHD_Connection *c, conn *cs) {
  enum MHD_Result ret;
  json_t *j = small_body(c, cs, &ret);
  if (!j) return ret;
  json_t *t = json_object_get(j, "tokens");
  if (!json_is_array(t)) {
    json_decref(j);
    return send_error(c, 400, "invalid_request_error", "invalid_type", "tokens",
                      "'tokens' must be an array of token ids");
  }
  size_t n = json_array_size(t), vocab = mi_tokenizer_vocab_size(S.eng->tok);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) {
    json_decref(j);
    return send_error(c, 500, "server_error", NULL, NULL, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(t, i);
    json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
    if (id < 0 || (size_t)id >= vocab || !mi_tokenizer_token_str(S.eng->tok, (int32_t)id)) {
      free(ids);
      json_decref(j);
      return send_error(c, 400, "invalid_request_error", "invalid_value", "tokens",
                        "'tokens[%zu]' is not a token id of this model's vocabulary (%zu ids)", i,
                        vocab);
    }
    ids[i] = (int32_t)id;
  }
  json_decref(j);
  int rc = 0;
  size_t len = 0;
  char *s = mi_tokenizer_decode(S.eng->tok, ids, n, &len, &rc);
  free(ids);
  if (!s)
    return send_error(c, 400, "invalid_request_error", "invalid_value", "tokens",
                      "cannot detokenize: %s", mi_tokenizer_strerror(rc));
  json_t *content = json_stringn(s, len);
  free(s);
  return send_json(c, 200, json_pack("{s:o}", "content", content ? content : json_string("")),
                   NULL);
}

/* tool_choice "required" or naming a function: the answer is one call in
 * the template's format, its arguments valid for that tool's parameters:
 * {"name": NAME, "arguments"|"parameters": ...}, inside <tool_call> lines
 * for tagged templates, the whole message for bare-JSON ones. NULL with err
 * (a tool's parameters the grammar cannot take, named by their path). */
static mi_json_grammar *tool_call_grammar(const serve_req *sr, char *err, size_t err_len) {
  const char *args_key = S.tools_fmt == SERVE_TOOLS_BARE_JSON ? "parameters" : "arguments";
  json_t *alts = json_array();
  size_t i;
  json_t *t;
  json_array_foreach((json_t *)sr->tools, i, t) {
    json_t *fn = json_object_get(t, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name || (sr->tool_choice == SERVE_TOOL_CHOICE_NAMED && strcmp(name, sr->tool_name)))
      continue;
    json_t *params = json_object_get(fn, "parameters");
    char path[64];
    snprintf(path, sizeof path, "tools[%zu].function.parameters", i);
    mi_json_grammar *alone = params ? mi_json_grammar_compile_at(params, path, err, err_len) : NULL;
    if (params && !alone) {
      json_decref(alts);
      return NULL;
    }
    mi_json_grammar_free(alone);
    json_t *props = json_pack("{s:{s:s}}", "name", "const", name);
    json_object_set_new(props, args_key,
                        params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object"));
    json_array_append_new(alts, json_pack("{s:s,s:o,s:[s,s],s:b}", "type", "object", "properties",
                                          props, "required", "name", args_key,
                                          "additionalProperties", 0));
  }
  json_t *schema = json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0))
                                              : json_pack("{s:O}", "anyOf", alts);
  json_decref(alts);
  mi_json_grammar *g = mi_json_grammar_compile_at(schema, "tools", err, err_len);
  json_decref(schema);
  if (g && S.tools_fmt == SERVE_TOOLS_TAGGED &&
      mi_json_grammar_wrap(g, "<tool_call>\n", "\n</tool_call>") != 0) {
    mi_json_grammar_free(g);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  return g;
}

/* A parsed request this server cannot serve as asked (another model, a
 * logit_bias id outside the vocabulary, tools without a tool-call format):
 * the error sent into *ret, 1; else 0. */
static int refuse_request(struct MHD_Connection *c, const serve_req *sr, enum MHD_Result *ret) {
  if (sr->model && strcmp(sr->model, S.cfg.alias) != 0) {
    *ret = send_error(c, 404, "invalid_request_error", "model_not_found", "model",
                      "The model '%s' does not exist (this server serves '%s')",
                      sr->model, S.cfg.alias);
    return 1;
  }
  for (size_t i = 0; i < sr->n_bias; i++)
    if (sr->bias_ids[i] >= S.eng->info.vocab_size) {
      *ret = send_error(c, 400, "invalid_request_error", "invalid_value",
                        "logit_bias",
                        "'logit_bias' token %d is outside the vocabulary (%lld ids)",
                        sr->bias_ids[i], (long long)S.eng->info.vocab_size);
      return 1;
    }
  if (sr->tools && sr->tool_choice != SERVE_TOOL_CHOICE_NONE && S.has_chat &&
      S.tools_fmt == SERVE_TOOLS_NONE) {
    *ret = send_error(c, 400, "invalid_request_error", "unsupported_parameter",
                      "tools",
                      "this model's chat template asks for no tool-call format this "
                      "server parses (<tool_call> blocks, or a bare "
                      "{\"name\", \"parameters\"} JSON message)");
    return 1;
  }
  return 0;
}

/* A prompt of n_ids tokens (plus max_tokens) past the context: the error
 * sent into *ret, 1; else 0. */
static int refuse_context(struct MHD_Connection *c, const serve_req *sr, size_t n_ids, enum MHD_Result *ret) {
  int64_t ctx = S.cfg.ctx;
  if ((int64_t)n_ids >= ctx || (sr->max_tokens > 0 && (int64_t)n_ids + sr->max_tokens > ctx)) {
    *ret = send_error(
        c, 400, "invalid_request_error", "context_length_exceeded",
        sr->chat ? "messages" : "prompt",
        "This model's maximum context length is %lld tokens. However, you requested %lld tokens "
        "(%zu in the prompt, %lld for the completion). Please reduce the prompt or max_tokens.",
        (long long)ctx, (long long)n_ids + (sr->max_tokens > 0 ? sr->max_tokens : 1), n_ids,
        (long long)(sr->max_tokens > 0 ? sr->max_tokens : 1));
    return 1;
  }
  return 0;
}

/* The grammar the output is held to (response_format json_object /
 * json_schema, or a required tool call) into *grammar (NULL: none); when it
 * cannot be made, the error sent into *ret, 1; else 0. */
static int request_grammar(struct MHD_Connection *c, serve_req *sr, mi_json_grammar **grammar, enum MHD_Result *ret) {
  *grammar = NULL;
  int forced_call = sr->tools && (sr->tool_choice == SERVE_TOOL_CHOICE_REQUIRED ||
                                  sr->tool_choice == SERVE_TOOL_CHOICE_NAMED);
  if (!sr->json_mode && !forced_call) return 0;
  char gerr[512] = "";
  const char *param = forced_call ? "tool_choice" : "response_format";
  if (!S.trie)
    snprintf(gerr, sizeof gerr, "structured output is off on this server: %s", S.trie_why);
  else if (sr->json_mode && forced_call)
    snprintf(gerr, sizeof gerr, "'response_format' and a required tool call exclude each other");
  else if (forced_call)
    *grammar = tool_call_grammar(sr, gerr, sizeof gerr);
  else
    *grammar = mi_json_grammar_compile(sr->json_mode == 2 ? (const json_t *)sr->json_schema : NULL,
                                       gerr, sizeof gerr);
  if (*grammar) return 0;
  *ret = send_error(c, 400, "invalid_request_error", "invalid_value", param, "%s", gerr);
  return 1;
}

/* The generation parameters every choice of r starts from (the request's
 * sampling; request number k seeds a request without a seed). */
static mi_gen_params request_params(const req *r, unsigned long long k) {
  const serve_req *sr = &r->r;
  mi_gen_params gp = {0};
  gp.n_predict = sr->max_tokens >= 0 ? sr->max_tokens : S.cfg.ctx - (int64_t)r->n_ids;
  gp.n_ctx = (int64_t)r->n_ids + gp.n_predict;
  gp.ignore_eos = sr->ignore_eos;
  gp.top_logprobs = sr->logprobs ? sr->top_logprobs : 0;
  gp.prompt_logprobs = sr->echo && sr->logprobs;
  mi_sampler_defaults(&gp.sampling);
  gp.sampling.temp = (float)sr->temperature;
  gp.sampling.top_k = sr->top_k;
  gp.sampling.top_p = (float)sr->top_p;
  gp.sampling.min_p = (float)sr->min_p;
  gp.sampling.repeat_penalty = (float)sr->repeat_penalty;
  gp.sampling.seed = sr->has_seed ? sr->seed : (uint64_t)time(NULL) * 6364136223846793005ULL + k;
  gp.stop = sr->stop;
  gp.n_stop = sr->n_stop;
  gp.defer_prefill = 1; /* the scheduler runs it in chunks, after the prefix cache */
  /* the sampler copies these: this sequence only */
  gp.sampling.bias_ids = sr->bias_ids;
  gp.sampling.bias_vals = sr->bias_vals;
  gp.sampling.n_bias = sr->n_bias;
  return gp;
}

/* The request object for a checked request (it takes sr, ids and grammar):
 * its id, echo text and choices. NULL when out of memory (everything given
 * freed). */
static req *new_req(serve_req *sr, int32_t *ids, size_t n_ids, mi_json_grammar *grammar, int chat) {
  req *r = calloc(1, sizeof *r);
  if (r) r->ch = calloc((size_t)sr->n, sizeof *r->ch);
  if (!r || !r->ch) {
    free(r);
    free(ids);
    mi_json_grammar_free(grammar);
    serve_req_free(sr);
    return NULL;
  }
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->r = *sr;
  r->ids = ids;
  r->n_ids = n_ids;
  r->n_ch = sr->n;
  r->grammar = grammar;
  /* this handler (or its stream) + the log line + the scheduler's, one per choice */
  r->refs = 2 + r->n_ch;
  /* tool_choice none: the tools are rendered, the output is not parsed (vLLM's default) */
  r->tfmt = chat && sr->tools && sr->tool_choice != SERVE_TOOL_CHOICE_NONE ? S.tools_fmt
                                                                           : SERVE_TOOLS_NONE;
  r->created = (long long)time(NULL);
  static unsigned long long counter;
  unsigned long long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  snprintf(r->id, sizeof r->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl",
           (unsigned long long)r->created, k);
  if (sr->echo)
    r->echo_text = sr->prompt ? strdup(sr->prompt)
                              : mi_tokenizer_decode(S.eng->tok, ids, n_ids, NULL, NULL);
  mi_gen_params gp = request_params(r, k);
  int oom = sr->echo && !r->echo_text;
  for (int i = 0; i < r->n_ch; i++) {
    choice *ch = &r->ch[i];
    ch->r = r;
    ch->index = i;
    ch->gp = gp;
    ch->gp.sampling.seed = gp.sampling.seed + (uint64_t)i; /* n > 1: distinct draws */
    serve_tool_stream_init(&ch->ts, r->tfmt, sr->parallel_tool_calls);
    if (grammar) {
      ch->jm = mi_json_matcher_new(grammar);
      ch->con = (mi_gen_constraint){.user = ch, .allows = json_allows, .mask = json_mask,
                                    .accept = json_accept};
      ch->gp.constraint = &ch->con;
      oom |= !ch->jm;
    }
  }
  if (oom) {
    r->refs = 1;
    req_unref(r);
    return NULL;
  }
  return r;
}

/* r's choices onto the scheduler's queue (cs keeps a reference for the log
 * line); when the queue is full or the server stops, the 503 sent into
 * *ret, r dropped, 1; else 0. */
static int enqueue(struct MHD_Connection *c, conn *cs, req *r, enum MHD_Result *ret) {
  pthread_mutex_lock(&S.mu);
  if (S.stopping || S.q_len >= S.cfg.queue_max) {
    int stopping = S.stopping;
    if (!stopping) S.m.rejected_busy++;
    pthread_mutex_unlock(&S.mu);
    r->refs = 1;
    req_unref(r);
    *ret = send_error(c, 503, "server_error", stopping ? "shutting_down" : "server_busy", NULL,
                      stopping ? "the server is shutting down"
                               : "the server is busy (the queue is full): retry later");
    return 1;
  }
  r->t_enqueue = mi_now_seconds();
  for (int i = 0; i < r->n_ch; i++) {
    choice *ch = &r->ch[i];
    if (S.q_tail) S.q_tail->next = ch;
    else S.q_head = ch;
    S.q_tail = ch;
    S.q_len++;
  }
  cs->r = r; /* completed() logs its token counts and drops this reference */
  mi_log(MI_LOG_INFO, "mi-serve", "%s queued (%d waiting, %d running)", r->id, S.q_len, S.running);
  pthread_cond_signal(&S.cv);
  pthread_mutex_unlock(&S.mu);
  return 0;
}

/* stream: server-sent events, written as the scheduler makes them */
static enum MHD_Result stream_response(struct MHD_Connection *c, conn *cs, req *r) {
  stream_ctx *sc = calloc(1, sizeof *sc);
  if (!sc) {
    cancel_req(r);
    req_unref(r);
    return MHD_NO;
  }
  sc->r = r;
  sc->fd = cs->fd;
  struct MHD_Response *resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, sc, sse_free);
  if (!resp) {
    sse_free(sc);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "text/event-stream");
  MHD_add_response_header(resp, "Cache-Control", "no-cache");
  enum MHD_Result ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp);
  cs->status = 200;
  pthread_mutex_lock(&S.mu);
  S.m.requests[2]++;
  pthread_mutex_unlock(&S.mu);
  return ret;
}

/* non-streaming: wait here (one thread per connection), watching the peer */
static enum MHD_Result wait_response(struct MHD_Connection *c, conn *cs, req *r) {
  pthread_mutex_lock(&r->mu);
  while (r->state != R_DONE) {
    wait_tick(r);
    if (r->state != R_DONE && !r->cancelled && peer_gone(cs->fd)) {
      pthread_mutex_unlock(&r->mu);
      cancel_req(r);
      pthread_mutex_lock(&r->mu);
    }
  }
  int status = r->status ? r->status : 500;
  enum MHD_Result ret;
  if (status == 499) {
    cs->status = 499;
    ret = MHD_NO; /* nobody is listening */
  } else {
    ret = send_buf(c, status, "application/json", r->out ? r->out : "{}", r->out ? r->out_len : 2,
                   status == 503 ? "1" : NULL);
  }
  pthread_mutex_unlock(&r->mu);
  req_unref(r);
  return ret;
}

static enum MHD_Result handle_completion(struct MHD_Connection *c, conn *cs, int chat) {
  serve_req sr;
  serve_err e;
  enum MHD_Result ret;
  if (serve_req_parse(cs->body ? cs->body : "", cs->len, chat, &sr, &e) != 0) {
    serve_req_free(&sr);
    return send_error(c, e.status, e.type, e.code, e.param, "%s", e.message);
  }
  if (refuse_request(c, &sr, &ret)) {
    serve_req_free(&sr);
    return ret;
  }
  int32_t *ids = NULL;
  size_t n_ids = 0;
  if (build_prompt(&sr, &ids, &n_ids, &e) != 0) {
    serve_req_free(&sr);
    return send_error(c, e.status, e.type, e.code, e.param, "%s", e.message);
  }
  mi_json_grammar *grammar = NULL;
  if (refuse_context(c, &sr, n_ids, &ret) || request_grammar(c, &sr, &grammar, &ret)) {
    free(ids);
    serve_req_free(&sr);
    return ret;
  }
  req *r = new_req(&sr, ids, n_ids, grammar, chat);
  if (!r) return send_error(c, 500, "server_error", NULL, NULL, "out of memory");
  if (enqueue(c, cs, r, &ret)) return ret;
  return r->r.stream ? stream_response(c, cs, r) : wait_response(c, cs, r);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state) {
  (void)cls;
  (void)version;
  conn *cs = *state;
  if (!cs) {
    cs = calloc(1, sizeof *cs);
    if (!cs) return MHD_NO;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    cs->fd = ci ? ci->connect_fd : -1;
    cs->t0 = mi_now_seconds();
    snprintf(cs->method, sizeof cs->method, "%s", method);
    snprintf(cs->path, sizeof cs->path, "%s", url);
    for (char *p = cs->method; *p; p++)
      if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
    for (char *p = cs->path; *p; p++)
      if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
    *state = cs;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > S.cfg.max_body) cs->too_big = 1;
    if (!cs->too_big) return MHD_YES;
  }
  if (*upload_size) {
    if (!cs->too_big && buf_append(&cs->body, &cs->len, &cs->cap, upload, *upload_size) != 0)
      cs->too_big = 1;
    if (cs->len > S.cfg.max_body) cs->too_big = 1;
    *upload_size = 0;
    return MHD_YES;
  }
  cur_conn = cs;
  int is_get = !strcmp(method, "GET"), is_post = !strcmp(method, "POST");
  if (!strcmp(url, "/health") && is_get) {
    if (!S.ready)
      return send_json(c, 503, json_pack("{s:s}", "status", "loading model"), "1");
    return send_json(c, 200, json_pack("{s:s}", "status", "ok"), NULL);
  }
  if (!auth_ok(c))
    return send_error(c, 401, "invalid_request_error", "invalid_api_key", NULL,
                      "Incorrect API key provided");
  if (cs->too_big)
    return send_error(c, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body is over the %zu byte limit", S.cfg.max_body);
  int is_chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions");
  int is_compl = !strcmp(url, "/v1/completions") || !strcmp(url, "/completions");
  int is_models = !strcmp(url, "/v1/models") || !strcmp(url, "/models");
  int is_metrics = !strcmp(url, "/metrics");
  int is_tok = !strcmp(url, "/tokenize"), is_detok = !strcmp(url, "/detokenize");
  int is_props = !strcmp(url, "/props");
  const char *model_id = !strncmp(url, "/v1/models/", 11) ? url + 11
                         : !strncmp(url, "/models/", 8)   ? url + 8
                                                          : NULL;
  if (model_id && !*model_id) model_id = NULL;
  if (!is_chat && !is_compl && !is_models && !is_metrics && !is_tok && !is_detok && !is_props &&
      !model_id)
    return send_error(c, 404, "invalid_request_error", "not_found", NULL, "no route %s %s",
                      method, url);
  if ((is_chat || is_compl || is_tok || is_detok) ? !is_post : !is_get)
    return send_error(c, 405, "invalid_request_error", "method_not_allowed", NULL,
                      "%s %s is not allowed", method, url);
  if (is_metrics) return handle_metrics(c);
  if (!S.ready)
    return send_error(c, 503, "server_error", "loading", NULL, "the model is loading");
  if (is_models) return send_json(c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data",
                                                   model_json()), NULL);
  if (model_id) {
    if (strcmp(model_id, S.cfg.alias) != 0)
      return send_error(c, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%s' does not exist (this server serves '%s')", model_id,
                        S.cfg.alias);
    return send_json(c, 200, model_json(), NULL);
  }
  if (is_props) return handle_props(c);
  if (is_tok) return handle_tokenize(c, cs);
  if (is_detok) return handle_detokenize(c, cs);
  return handle_completion(c, cs, is_chat);
}

static void completed(void *cls, struct MHD_Connection *c, void **state,
                      enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  conn *cs = *state;
  if (!cs) return;
  /* one line per request: never the prompt or the answer */
  char toks[96] = "";
  if (cs->r) {
    pthread_mutex_lock(&cs->r->mu);
    snprintf(toks, sizeof toks, " prompt=%zu completion=%lld", cs->r->n_ids,
             (long long)cs->r->n_gen);
    pthread_mutex_unlock(&cs->r->mu);
    req_unref(cs->r);
  }
  fprintf(stderr, "mi-serve: %s %s %d%s %.1f ms\n", cs->method, cs->path, cs->status, toks,
          (mi_now_seconds() - cs->t0) * 1e3);
  if (cur_conn == cs) cur_conn = NULL;
  free(cs->body);
  free(cs);
  *state = NULL;
}

/* ---------- main ---------- */

static void usage(FILE *f) {
  fputs("usage: mi-serve -m MODEL_DIR [options]\n"
        "\n"
        "An OpenAI-compatible server: POST /v1/chat/completions, POST /v1/completions,\n"
        "GET /v1/models, GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /props,\n"
        "GET /health, GET /metrics. One line per request on stderr.\n"
        "\n"
        "  -m, --model DIR          Hugging Face model directory\n"
        "      --alias NAME         the model's name in the API (default: the folder's name)\n"
        "      --host ADDR          address to bind (default 127.0.0.1)\n"
        "      --port N             (default 8080)\n"
        "      --api-key KEY        require Authorization: Bearer KEY (also $MI_API_KEY)\n"
        "  -np, --parallel N        sequences resident at once (default 4)\n"
        "      --queue N            requests waiting for a sequence before 503 (default 64)\n"
        "  -c, --ctx-size N         context limit per request in tokens (default: the model's,\n"
        "                           capped at 4096)\n"
        "      --max-body BYTES     request body limit (default 1048576)\n"
        "      --no-batch           step sequences one at a time even when the model plugin\n"
        "                           offers batched decode\n"
        "      --drain-timeout S    on SIGTERM, time left to in-flight requests (default 10)\n"
        "  -b, --batch-size N       prefill batch (default 512)\n"
        "      --prefill-chunk N    prompt tokens per scheduler step, so decoding sequences\n"
        "                           go on during a long prefill (default 256; 0: whole prompts)\n"
        "      --cache-mem MIB      prefix cache: host memory for the model state of earlier\n"
        "                           prompts (default: a quarter of what is free, at most 4096;\n"
        "                           0: off)\n"
        "      --cache-block N      tokens per prefix-cache block (default 32)\n"
        "      --kv-type T          f32 (default), f16 or bf16\n"
        "      --plugin-dir DIR     look for plugins.conf and plugins (an engine) in DIR first\n"
        "      --plugins-conf FILE  use this plugins.conf\n"
        "      --platform NAME      platform plugin (default: best score)\n"
        "  -t, --threads N          threads for the CPU platform\n"
        "      --mmap | --no-mmap   how weights are loaded (as mi-run)\n"
        "  -v, --verbose            more logging\n"
        "  -h, --help | --version\n",
        f);
}

/* The prefix cache (prefix_cache.h) within --cache-mem, or a line saying
 * why there is none. */
static void open_prefix_cache(char *line, size_t len) {
  uint64_t mib = (uint64_t)S.cfg.cache_mib;
  if (S.cfg.cache_mib < 0) { /* a quarter of what the session may still use, at most 4 GiB */
    uint64_t avail = S.eng->mem_avail, used = mi_peak_rss_bytes();
    mib = avail > used ? (avail - used) / 4 / 1048576 : 0;
    if (mib > 4096) mib = 4096;
  }
  if (mib == 0) {
    snprintf(line, len, "prefix cache off");
    return;
  }
  char why[300];
  S.cache = serve_cache_new(S.eng, mib * 1048576, S.cfg.cache_block, why, sizeof why);
  if (!S.cache) {
    snprintf(line, len, "prefix cache off (%s)", why);
    return;
  }
  snprintf(line, len, "prefix cache %llu MiB in blocks of %d tokens%s", (unsigned long long)mib,
           S.cfg.cache_block,
           serve_cache_has_fixed(S.cache) ? " (fixed-state model: hits end at prompt ends)" : "");
  cache_metrics();
}

/* mi-serve's options beyond S.cfg (and the option strings made from them,
 * which the plugins and the session may keep pointers to). */
typedef struct serve_args {
  const char *model_dir, *plugin_dir, *conf_path, *platform, *kv_type;
  long threads, batch;
  int verbose, weights_load;
  char tbuf[32], bbuf[32];
} serve_args;

enum { O_ALIAS = 256, O_HOST, O_PORT, O_KEY, O_PAR, O_QUEUE, O_MAXBODY, O_NOBATCH, O_DRAIN,
       O_KV, O_PDIR, O_CONF, O_PLAT, O_MMAP, O_NOMMAP, O_VERSION, O_CHUNK, O_CMEM, O_CBLOCK };
static const struct option serve_longopts[] = {
    {"model", required_argument, 0, 'm'},       {"alias", required_argument, 0, O_ALIAS},
    {"host", required_argument, 0, O_HOST},     {"port", required_argument, 0, O_PORT},
    {"api-key", required_argument, 0, O_KEY},   {"parallel", required_argument, 0, O_PAR},
    {"queue", required_argument, 0, O_QUEUE},   {"ctx-size", required_argument, 0, 'c'},
    {"max-body", required_argument, 0, O_MAXBODY}, {"no-batch", no_argument, 0, O_NOBATCH},
    {"drain-timeout", required_argument, 0, O_DRAIN}, {"batch-size", required_argument, 0, 'b'},
    {"kv-type", required_argument, 0, O_KV},    {"plugin-dir", required_argument, 0, O_PDIR},
    {"plugins-conf", required_argument, 0, O_CONF}, {"platform", required_argument, 0, O_PLAT},
    {"threads", required_argument, 0, 't'},     {"mmap", no_argument, 0, O_MMAP},
    {"no-mmap", no_argument, 0, O_NOMMAP},      {"verbose", no_argument, 0, 'v'},
    {"help", no_argument, 0, 'h'},              {"version", no_argument, 0, O_VERSION},
    {"prefill-chunk", required_argument, 0, O_CHUNK}, {"cache-mem", required_argument, 0, O_CMEM},
    {"cache-block", required_argument, 0, O_CBLOCK},
    {0, 0, 0, 0}};

/* The integer options, checked here before parse_args stores them. */
static const cli_int_opt serve_ints[] = {
    {O_PORT, "--port", 0, 65535},
    {O_PAR, "--parallel", 1, 256},
    {O_QUEUE, "--queue", 0, 1 << 20},
    {'c', "-c", 2, INT_MAX},
    {O_MAXBODY, "--max-body", 64, 1L << 30},
    {O_DRAIN, "--drain-timeout", 0, 3600},
    {'b', "-b", 1, 65536},
    {O_CHUNK, "--prefill-chunk", 0, 1L << 30},
    {O_CMEM, "--cache-mem", 0, 1L << 30},
    {O_CBLOCK, "--cache-block", 1, 4096},
    {'t', "-t", 1, 1024},
};

/* The command line into S.cfg and a; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, serve_args *a) {
  serve_cfg *cfg = &S.cfg;
  long v = 0;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":m:c:b:t:vh", serve_longopts, NULL)) != -1) {
    if (cli_int_option("mi-serve", serve_ints, sizeof serve_ints / sizeof *serve_ints, c, optarg, &v)) return 2;
    switch (c) {
    case 'm': a->model_dir = optarg; break;
    case O_ALIAS: cfg->alias = optarg; break;
    case O_HOST: cfg->host = optarg; break;
    case O_PORT: cfg->port = (int)v; break;
    case O_KEY: cfg->api_key = *optarg ? optarg : NULL; break;
    case O_PAR: cfg->parallel = (int)v; break;
    case O_QUEUE: cfg->queue_max = (int)v; break;
    case 'c': cfg->ctx = v; break;
    case O_MAXBODY: cfg->max_body = (size_t)v; break;
    case O_NOBATCH: cfg->batched = 0; break;
    case O_DRAIN: cfg->drain_s = (double)v; break;
    case 'b': a->batch = v; break;
    case O_CHUNK: cfg->prefill_chunk = v; break;
    case O_CMEM: cfg->cache_mib = v; break;
    case O_CBLOCK: cfg->cache_block = (int)v; break;
    case 't': a->threads = v; break;
    case O_KV:
      if (cli_kv_type("mi-serve", optarg, &a->kv_type)) return 2;
      break;
    case O_PDIR: a->plugin_dir = optarg; break;
    case O_CONF: a->conf_path = optarg; break;
    case O_PLAT: a->platform = optarg; break;
    case O_MMAP: a->weights_load = MI_SESSION_WEIGHTS_MMAP; break;
    case O_NOMMAP: a->weights_load = MI_SESSION_WEIGHTS_READ; break;
    case 'v': a->verbose++; break;
    case 'h': usage(stdout); return 0;
    default: return cli_other_option("mi-serve", c, c == O_VERSION, argv);
    }
  }
  int rc = cli_no_operands("mi-serve", argc, argv);
  if (rc >= 0) return rc;
  if (!a->model_dir) {
    fprintf(stderr, "mi-serve: no model: give -m MODEL_DIR (see --help)\n");
    return 2;
  }
  return -1;
}

/* The name the server answers to without --alias: the model folder's. */
static const char *default_alias(const char *model_dir) {
  const char *b = model_dir + strlen(model_dir);
  while (b > model_dir && b[-1] == '/') b--;
  const char *a = b;
  while (a > model_dir && a[-1] != '/') a--;
  static char alias[256];
  snprintf(alias, sizeof alias, "%.*s", (int)(b - a), a);
  return alias[0] ? alias : "model";
}

/* Listens on --host:--port (/health answers 503 while the model loads):
 * the daemon into *d; -1 to go on, else the exit status. */
static int start_listening(struct MHD_Daemon **d) {
  serve_cfg *cfg = &S.cfg;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                   MHD_USE_ITC | MHD_USE_ERROR_LOG;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  const int v6 = strchr(cfg->host, ':') != NULL;
  if (v6) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)cfg->port);
    flags |= MHD_USE_IPv6;
  } else {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)cfg->port);
  }
  if (inet_pton(v6 ? AF_INET6 : AF_INET, cfg->host, v6 ? (void *)&a6->sin6_addr : (void *)&a4->sin_addr) != 1) {
    fprintf(stderr, "mi-serve: --host '%s' is not an IPv%d address\n", cfg->host, v6 ? 6 : 4);
    return 2;
  }
  *d = MHD_start_daemon(
      flags, (uint16_t)cfg->port, NULL, NULL, answer, NULL, MHD_OPTION_SOCK_ADDR,
      (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_MEMORY_LIMIT, cfg->max_header,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->queue_max + cfg->parallel + 64),
      MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
      MHD_OPTION_END);
  if (!*d) {
    fprintf(stderr, "mi-serve: cannot listen on %s:%d: %s\n", cfg->host, cfg->port,
            strerror(errno));
    return 1;
  }
  return -1;
}

/* The plugins into *reg; NULL after a line on stderr. */
static mi_registry *load_plugins(serve_args *a) {
  char err[2048] = "";
  int fatal;
  mi_registry *reg = cli_load_registry(a->plugin_dir, a->conf_path, a->threads, a->tbuf, &fatal, err, sizeof err);
  if (!reg || fatal) {
    fprintf(stderr, "mi-serve: %s\n", reg ? err : "out of memory loading plugins");
    mi_registry_free(reg);
    return NULL;
  }
  return reg;
}

/* The model's session into S.eng, the context checked against it; 0, or -1
 * after a line on stderr. */
static int open_model(serve_args *a, mi_registry *reg) {
  serve_cfg *cfg = &S.cfg;
  char err[2048] = "";
  mi_kv mopts[2];
  mi_options model_opts = cli_model_opts(mopts, a->kv_type, a->batch, a->bbuf);
  mi_session_opts eo = {.model_dir = a->model_dir, .platform = a->platform, .model_opts = &model_opts,
                        .tp_rank = 0, .tp_size = 1, .weights = a->weights_load};
  if (mi_session_open(reg, &eo, &S.eng, err, sizeof err) != 0) {
    fprintf(stderr, "mi-serve: %s\n", err);
    return -1;
  }
  if (cfg->ctx <= 0) cfg->ctx = S.eng->info.max_position < 4096 ? S.eng->info.max_position : 4096;
  if (cfg->ctx > S.eng->info.max_position) {
    fprintf(stderr, "mi-serve: -c %lld is over the model's max_position_embeddings %lld\n",
            (long long)cfg->ctx, (long long)S.eng->info.max_position);
    return -1;
  }
  return 0;
}

/* The chat template, rendered by the Jinja engine (core/template): a
 * template it cannot parse is said once, here; and its tool-call format. */
static void detect_chat_template(const char *model_dir) {
  const char *tmpl = mi_tokenizer_chat_template(S.eng->tok);
  char terr[300] = "";
  mi_jinja *jt = tmpl ? mi_jinja_parse(tmpl, strlen(tmpl), terr, sizeof terr) : NULL;
  S.has_chat = jt != NULL;
  S.tools_fmt = jt ? serve_tools_detect(tmpl) : SERVE_TOOLS_NONE;
  mi_jinja_free(jt);
  if (tmpl && !jt)
    fprintf(stderr, "mi-serve: %s: chat template line %s: /v1/chat/completions answers 400\n", model_dir,
            strncmp(terr, "line ", 5) ? terr : terr + 5);
}

/* After SIGTERM or SIGINT: no new connections, the queued requests 503, the
 * running sequences finish for up to --drain-timeout s and are cancelled
 * then; the scheduler thread ends. */
static void drain(struct MHD_Daemon *d, int sig, pthread_t sched) {
  MHD_socket lfd = MHD_quiesce_daemon(d);
  if (lfd != MHD_INVALID_SOCKET) close(lfd);
  fprintf(stderr, "mi-serve: %s: finishing in-flight requests (up to %.0f s)\n",
          sig == SIGTERM ? "SIGTERM" : "SIGINT", S.cfg.drain_s);
  /* stop taking work; let the running sequences finish, then cancel */
  pthread_mutex_lock(&S.mu);
  S.stopping = 1;
  /* queued requests that never started: 503 */
  while (S.q_head) {
    choice *ch = S.q_head;
    S.q_head = ch->next;
    S.q_len--;
    pthread_mutex_unlock(&S.mu);
    req *r = ch->r;
    finish_choice(ch, NULL, 503, "the server is shutting down");
    req_unref(r);
    pthread_mutex_lock(&S.mu);
  }
  S.q_tail = NULL;
  pthread_mutex_unlock(&S.mu);
  double t_end = mi_now_seconds() + S.cfg.drain_s;
  for (;;) {
    pthread_mutex_lock(&S.mu);
    int run = S.running;
    pthread_mutex_unlock(&S.mu);
    if (run == 0) break;
    if (mi_now_seconds() >= t_end) {
      pthread_mutex_lock(&S.mu);
      S.cancel_all = 1;
      pthread_cond_signal(&S.cv);
      pthread_mutex_unlock(&S.mu);
      break;
    }
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&S.mu);
  S.sched_exit = 1;
  pthread_cond_signal(&S.cv);
  pthread_mutex_unlock(&S.mu);
  pthread_join(sched, NULL);
}

/* Serves until SIGTERM or SIGINT (sigs), then drains; 0, or 1 when the
 * model or the scheduler could not start. */
static int serve(serve_args *a, struct MHD_Daemon *d, sigset_t *sigs, mi_registry *reg) {
  serve_cfg *cfg = &S.cfg;
  if (open_model(a, reg) != 0) return 1;
  detect_chat_template(a->model_dir);
  S.have_batch = cfg->batched && mi_model_has(S.eng->M, forward_batch);
  char cache_line[400];
  open_prefix_cache(cache_line, sizeof cache_line);
  open_structured_output();
  pthread_t sched;
  if (pthread_create(&sched, NULL, scheduler, NULL) != 0) {
    fprintf(stderr, "mi-serve: cannot start the scheduler thread\n");
    return 1;
  }
  S.ready = 1;
  fprintf(stderr,
          "mi-serve: ready: model '%s' (%s, plugin %s, platform %s), %d sequences of up to %lld "
          "tokens, %s decode, %s, loaded in %.2f s\n",
          cfg->alias, S.eng->info.architecture, S.eng->model_plugin->desc->name,
          S.eng->platform_plugin->desc->name, cfg->parallel, (long long)cfg->ctx,
          S.have_batch ? "batched" : "one-at-a-time", cache_line, S.eng->load_seconds);
  int sig = 0;
  sigwait(sigs, &sig);
  drain(d, sig, sched);
  return 0;
}

int main(int argc, char **argv) {
  static serve_args a = {.threads = -1, .weights_load = MI_SESSION_WEIGHTS_AUTO};
  serve_cfg *cfg = &S.cfg;
  *cfg = (serve_cfg){.host = "127.0.0.1", .port = 8080, .parallel = 4, .queue_max = 64,
                     .ctx = 0, .max_body = 1 << 20, .max_header = 64 << 10, .batched = 1,
                     .drain_s = 10, .prefill_chunk = 256, .cache_mib = -1, .cache_block = 32};
  cfg->api_key = getenv("MI_API_KEY");
  if (cfg->api_key && !*cfg->api_key) cfg->api_key = NULL;
  /* -np as llama-server spells it */
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-np")) argv[i] = "--parallel";
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  mi_log_set_level(a.verbose >= 2 ? MI_LOG_DEBUG : a.verbose ? MI_LOG_INFO : MI_LOG_WARN);
  mi_progress_enable(0);
  if (!cfg->alias) cfg->alias = default_alias(a.model_dir);
  /* signals: every thread blocks them; main waits for them */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  pthread_mutex_init(&S.mu, NULL);
  pthread_cond_init(&S.cv, NULL);
  /* listen first: /health answers 503 while the model loads */
  struct MHD_Daemon *d;
  if ((rc = start_listening(&d)) >= 0) return rc;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  int port = di ? di->port : cfg->port;
  fprintf(stderr, "mi-serve: listening on http://%s:%d (loading %s)\n", cfg->host, port, a.model_dir);
  mi_registry *reg = load_plugins(&a);
  if (!reg) {
    MHD_stop_daemon(d);
    return 1;
  }
  rc = serve(&a, d, &sigs, reg);
  MHD_stop_daemon(d); /* waits for the connection threads: their requests are done */
  serve_cache_free(S.cache);
  mi_token_trie_free(S.trie);
  mi_session_close(S.eng);
  mi_registry_free(reg);
  if (rc == 0) fprintf(stderr, "mi-serve: stopped\n");
  return rc;
}
