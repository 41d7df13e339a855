/* An OpenAI-compatible chat client (POST {base}/v1/chat/completions) for
 * the LLM-backed agent strategies, over libcurl and jansson. The core lends
 * it to agent plugins through the host API, so no plugin links libcurl.
 *
 *   - non-streaming and streaming (server-sent events, with
 *     stream_options.include_usage): the same mi_llm_response either way;
 *   - tools (function calling): tool_calls come back with their arguments
 *     as the JSON string the server sent;
 *   - timeouts: connect, total, and idle (no byte for idle_s mid-answer);
 *   - retries with exponential backoff and jitter on connection failures,
 *     408, 409, 429 and 5xx, honouring Retry-After; never on other 4xx or on
 *     a 429 whose error code is insufficient_quota;
 *   - token accounting from "usage", estimated (bytes / 4) when a cut
 *     stream never sent it;
 *   - record (every request and response to a folder) and replay (answers
 *     from such a folder with no network; a request not recorded fails).
 * The API key goes into the Authorization header and nowhere else: never
 * into logs, error messages or recordings. */
#ifndef MI_CORE_LLM_CLIENT_H
#define MI_CORE_LLM_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mi_llm_config {
  const char *base_url;   /* e.g. http://127.0.0.1:8080 (".../v1" is accepted too) */
  const char *model;      /* the "model" field */
  const char *api_key;    /* Bearer token, or NULL */
  double connect_s;       /* 0: 10 s */
  double total_s;         /* one attempt, 0: 300 s */
  double idle_s;          /* no byte received for this long: 0: 60 s */
  int max_retries;        /* < 0: 2 (the official clients' default) */
  double backoff_s;       /* first backoff, doubled each retry, with jitter; 0: 0.5 s */
  double max_backoff_s;   /* cap, Retry-After included; 0: 30 s */
  uint64_t jitter_seed;   /* the jitter's generator */
  const char *record_dir; /* save every exchange here, or NULL */
  const char *replay_dir; /* answer from here with no network, or NULL */
  size_t max_response_bytes; /* 0: 8 MiB; a larger answer is refused */
} mi_llm_config;

/* Reads MI_LLM_BASE_URL, MI_LLM_MODEL and MI_LLM_API_KEY (then
 * OPENAI_BASE_URL, OPENAI_API_KEY) into the fields left NULL. */
void mi_llm_config_from_env(mi_llm_config *c);

typedef struct mi_llm_message {
  const char *role;         /* system, user, assistant, tool */
  const char *content;
  const char *tool_call_id; /* role tool: the call answered, else NULL */
  const json_t *tool_calls; /* role assistant: the calls it made (as answered), else NULL */
} mi_llm_message;

typedef struct mi_llm_request {
  const mi_llm_message *messages;
  size_t n_messages;
  const json_t *tools;      /* [{type:"function", function:{name, description, parameters}}], or NULL */
  double temperature;       /* < 0: not sent */
  int64_t seed;             /* < 0: not sent */
  int max_tokens;           /* <= 0: not sent */
  int stream;               /* 1: server-sent events */
} mi_llm_request;

typedef struct mi_llm_response {
  char *content;            /* the assistant's text ("" when none), malloc'd */
  json_t *tool_calls;       /* [{id, type, function:{name, arguments}}] or NULL */
  char finish_reason[32];   /* stop, length, tool_calls, ... ("" if none was sent) */
  int64_t prompt_tokens, completion_tokens;
  int usage_estimated;      /* 1: the server sent no usage (a cut stream): estimated */
  int attempts;             /* HTTP attempts made (1 + retries); 0 when replayed */
  int http_status;          /* of the last attempt (0: no response) */
  double seconds;           /* wall time, retries and backoff included */
} mi_llm_response;

typedef struct mi_llm_client mi_llm_client;

/* NULL with a one-line reason (e.g. no base URL, replay folder missing). */
mi_llm_client *mi_llm_client_new(const mi_llm_config *cfg, char *err, size_t err_len);
void mi_llm_client_free(mi_llm_client *c);

/* 0 with *out filled (free with mi_llm_response_free), or -1 with one line
 * in err: what failed, after how many attempts. Even on failure *out holds
 * what was spent (attempts, tokens of a cut stream, seconds). */
int mi_llm_chat(mi_llm_client *c, const mi_llm_request *req, mi_llm_response *out, char *err,
                size_t err_len);
void mi_llm_response_free(mi_llm_response *r);

/* Totals over the client's life (for budgets and manifests). */
typedef struct mi_llm_usage {
  int64_t requests, attempts, prompt_tokens, completion_tokens;
  double seconds;
} mi_llm_usage;
void mi_llm_client_usage(const mi_llm_client *c, mi_llm_usage *out);

/* Record/replay files are named by the request's hash and how many times
 * the same request was sent before. A run that spreads its requests over
 * several clients (one per agent process) carries that count from one to
 * the next: export it after a client's calls, import it into the next one.
 * seen: {hash: times}; borrowed (get) or copied (set). */
const json_t *mi_llm_client_seen(const mi_llm_client *c);
void mi_llm_client_set_seen(mi_llm_client *c, const json_t *seen);

#endif
