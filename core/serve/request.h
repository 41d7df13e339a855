/* mi-serve's request parser: the JSON body of POST /v1/chat/completions or
 * /v1/completions → a checked request, or an OpenAI-shaped error (HTTP
 * status, type, param, message). Pure: no model, no I/O (fuzzed by
 * fuzz/fuzz_serve_req.c). */
#ifndef MI_CORE_SERVE_REQUEST_H
#define MI_CORE_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOP 16
#define SERVE_MAX_TOP_LOGPROBS 20
#define SERVE_MAX_MESSAGES 4096
#define SERVE_MAX_LOGIT_BIAS 1024 /* entries of logit_bias */
#define SERVE_MAX_TOOLS 128      /* entries of tools, and tool_calls of one message */
#define SERVE_MAX_N 16            /* choices of one request */
#define SERVE_MAX_JSON_DEPTH 64  /* nesting of a tool's parameters, a call's arguments */

/* tool_choice: auto (the model decides), none (rendered, not parsed),
 * required (a call, constrained by the tools' schemas), named (a call of
 * tool_name) */
enum {
  SERVE_TOOL_CHOICE_AUTO = 0,
  SERVE_TOOL_CHOICE_NONE = 1,
  SERVE_TOOL_CHOICE_REQUIRED = 2,
  SERVE_TOOL_CHOICE_NAMED = 3
};

typedef struct serve_err {
  int status;        /* HTTP status */
  const char *type;  /* "invalid_request_error", ... */
  const char *code;  /* NULL or e.g. "context_length_exceeded" */
  char param[64];    /* the offending field, "" for none */
  char message[512];
} serve_err;

typedef struct serve_msg {
  const char *role;
  char *content; /* malloc'd: text parts joined */
} serve_msg;

typedef struct serve_req {
  int chat;             /* 1: chat completions, 0: completions */
  const char *model;    /* NULL: not given */
  serve_msg *msgs;      /* chat */
  size_t n_msgs;
  const char *prompt;   /* completions: text, or NULL with prompt_ids */
  int32_t *prompt_ids;  /* completions: token ids given directly */
  size_t n_prompt_ids;
  int64_t max_tokens;   /* -1: not given */
  double temperature, top_p, min_p, repeat_penalty;
  int top_k;
  int has_seed;
  uint64_t seed;
  const char *stop[SERVE_MAX_STOP];
  size_t n_stop;
  int logprobs;         /* report the sampled token's logprob */
  int top_logprobs;     /* and the k best */
  int stream, include_usage;
  int ignore_eos;
  int enable_thinking;  /* -1: template default */
  int32_t *bias_ids;    /* logit_bias: ids (not yet checked against the vocabulary) */
  float *bias_vals;     /* and their biases in [-100, 100] */
  size_t n_bias;
  /* chat: the template's view of the messages (json_t* array of
   * {role, content, tool_calls?, tool_call_id?, name?, reasoning_content?},
   * content the joined text ("" for null), each tool call's
   * function.arguments parsed from its JSON string into an object) */
  void *tmpl_msgs;
  const void *tools;    /* json_t* array as sent (borrowed from root), NULL: none or [] */
  int tool_choice;      /* SERVE_TOOL_CHOICE_* */
  const char *tool_name; /* SERVE_TOOL_CHOICE_NAMED: one of tools' names */
  int parallel_tool_calls; /* 0: at most one call is returned */
  int n;                /* choices (n), 1..SERVE_MAX_N */
  int echo;             /* completions: the prompt before the text (and its logprobs) */
  int json_mode;        /* response_format: 0 text, 1 json_object, 2 json_schema */
  const void *json_schema; /* json_mode 2: json_t* schema (borrowed from root) */
  void *root;           /* json_t* owning the strings above */
} serve_req;

/* 0, or -1 with *e filled. On success free with serve_req_free.
 * Fields: those the server honours are parsed; harmless ones that cannot
 * change the output (user, metadata, store, service_tier, ...) are
 * accepted; fields known to change the output that the server does not
 * implement (grammar, functions,
 * ...) are
 * refused with a 400 naming them (a value that means "off", e.g.
 * typical_p 1, passes); any other field is ignored, as llama-server and
 * vLLM (outside strict mode) do. */
int serve_req_parse(const char *body, size_t len, int chat, serve_req *out, serve_err *e);
/* 1 when v nests arrays and objects deeper than max (a tool's parameters, a
 * call's arguments: the request's and the model's alike), else 0. */
typedef struct json_t json_t;
int serve_json_too_deep(const json_t *v, int max);
void serve_req_free(serve_req *r);

#endif
