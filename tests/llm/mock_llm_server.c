/* The scripted OpenAI-compatible server (mock_llm_server.h). */
#define _GNU_SOURCE
#include "mock_llm_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REQ 64

struct mock_server {
  struct MHD_Daemon *d;
  const mock_reply *script;
  size_t n, next;
  pthread_mutex_t lock;
  char *bodies[MAX_REQ], *auths[MAX_REQ];
  size_t n_req;
  int port;
  char url[64];
};

typedef struct conn {
  char *body;
  size_t len;
} conn;

typedef struct reader {
  const mock_reply *r;
  size_t len, sent;
} reader;

static ssize_t read_body(void *cls, uint64_t pos, char *buf, size_t max) {
  reader *rd = cls;
  if (rd->r->hang_s > 0) {
    struct timespec ts = {(time_t)rd->r->hang_s, (long)((rd->r->hang_s - (double)(time_t)rd->r->hang_s) * 1e9)};
    nanosleep(&ts, NULL);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t stop = rd->r->cut ? rd->len / 2 : rd->len;
  if (pos >= stop) return rd->r->cut ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
  size_t k = stop - pos < max ? stop - pos : max;
  memcpy(buf, rd->r->body + pos, k);
  rd->sent = pos + k;
  return (ssize_t)k;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
  mock_server *m = cls;
  conn *cs = *state;
  if (!cs) {
    *state = calloc(1, sizeof(conn));
    return *state ? MHD_YES : MHD_NO;
  }
  if (*upload_size) {
    char *b = realloc(cs->body, cs->len + *upload_size + 1);
    if (!b) return MHD_NO;
    memcpy(b + cs->len, upload, *upload_size);
    cs->len += *upload_size;
    b[cs->len] = 0;
    cs->body = b;
    *upload_size = 0;
    return MHD_YES;
  }
  static const mock_reply not_found = {404, NULL, NULL, "{\"error\":{\"message\":\"no such route\"}}", 0, 0};
  static const mock_reply exhausted = {500, NULL, NULL, "{\"error\":{\"message\":\"script exhausted\"}}", 0, 0};
  const mock_reply *r = &not_found;
  if (!strcmp(method, "POST") && !strcmp(url, "/v1/chat/completions")) {
    pthread_mutex_lock(&m->lock);
    r = m->next < m->n ? &m->script[m->next++] : &exhausted;
    if (m->n_req < MAX_REQ) {
      const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
      m->bodies[m->n_req] = strdup(cs->body ? cs->body : "");
      m->auths[m->n_req] = strdup(auth ? auth : "");
      m->n_req++;
    }
    pthread_mutex_unlock(&m->lock);
  }
  reader *rd = calloc(1, sizeof *rd);
  if (!rd) return MHD_NO;
  rd->r = r;
  rd->len = strlen(r->body ? r->body : "");
  struct MHD_Response *resp = MHD_create_response_from_callback(
      (r->cut || r->hang_s > 0) ? MHD_SIZE_UNKNOWN : rd->len, 4096, read_body, rd, free);
  if (!resp) {
    free(rd);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "application/json");
  if (r->retry_after) MHD_add_response_header(resp, "Retry-After", r->retry_after);
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
  MHD_destroy_response(resp);
  return ok;
}

static void done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode t) {
  conn *cs = *state;
  if (cs) free(cs->body);
  free(cs);
  *state = NULL;
}

mock_server *mock_start(const mock_reply *script, size_t n) {
  mock_server *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->script = script;
  m->n = n;
  pthread_mutex_init(&m->lock, NULL);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
                          answer, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                          MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_END);
  if (!m->d) {
    free(m);
    return NULL;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
  m->port = di ? di->port : 0;
  snprintf(m->url, sizeof m->url, "http://127.0.0.1:%d", m->port);
  return m;
}

int mock_port(const mock_server *m) { return m->port; }
const char *mock_url(const mock_server *m) { return m->url; }

size_t mock_requests(mock_server *m) {
  pthread_mutex_lock(&m->lock);
  size_t n = m->n_req;
  pthread_mutex_unlock(&m->lock);
  return n;
}

const char *mock_request_body(mock_server *m, size_t i) { return i < m->n_req ? m->bodies[i] : ""; }
const char *mock_request_auth(mock_server *m, size_t i) { return i < m->n_req ? m->auths[i] : ""; }

void mock_stop(mock_server *m) {
  if (!m) return;
  MHD_stop_daemon(m->d);
  for (size_t i = 0; i < m->n_req; i++) {
    free(m->bodies[i]);
    free(m->auths[i]);
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
}
