/* A scripted OpenAI-compatible server on loopback (libmicrohttpd) for the
 * LLM client's and the LLM agents' tests: POST /v1/chat/completions answers
 * with the next reply of its script, as written (status, headers, body),
 * optionally cut mid-body or held open without a byte. What each request
 * carried is kept for the test to check. */
#ifndef MI_TESTS_MOCK_LLM_SERVER_H
#define MI_TESTS_MOCK_LLM_SERVER_H

#include <stddef.h>

typedef struct mock_reply {
  int status;              /* HTTP status */
  const char *retry_after; /* Retry-After header value, or NULL */
  const char *content_type; /* NULL: application/json */
  const char *body;
  int cut;                 /* 1: send half the body, then drop the connection */
  double hang_s;           /* > 0: send nothing for this long, then drop the connection */
} mock_reply;

typedef struct mock_server mock_server;

/* Replies in order; past the end of the script: 500. NULL on failure. */
mock_server *mock_start(const mock_reply *script, size_t n);
int mock_port(const mock_server *m);
/* "http://127.0.0.1:PORT" */
const char *mock_url(const mock_server *m);
size_t mock_requests(mock_server *m);
/* The i-th request's body and Authorization header ("" when absent); the
 * strings live until mock_stop. */
const char *mock_request_body(mock_server *m, size_t i);
const char *mock_request_auth(mock_server *m, size_t i);
void mock_stop(mock_server *m);

#endif
