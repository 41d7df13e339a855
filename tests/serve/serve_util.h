/* Test helpers for mi-serve: start it on a free loopback port, raw HTTP/1.0
 * over sockets (the malformed cases need bytes no client library sends). */
#ifndef MI_TEST_SERVE_UTIL_H
#define MI_TEST_SERVE_UTIL_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct srv {
  pid_t pid;
  int port;
  char log[1024];
} srv;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Starts BUILD/bin/mi-serve --port 0 ARGS...; waits for its port. */
static int srv_start(srv *s, const char *build, const char *const *args) {
  static int n;
  snprintf(s->log, sizeof s->log, "%s/serve-test-%d-%d.log", build, (int)getpid(), n++);
  char exe[1100];
  snprintf(exe, sizeof exe, "%s/bin/mi-serve", build);
  const char *argv[64];
  int k = 0;
  argv[k++] = exe;
  argv[k++] = "--port";
  argv[k++] = "0";
  for (int i = 0; args[i] && k < 62; i++) argv[k++] = args[i];
  argv[k] = NULL;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    FILE *f = freopen(s->log, "w", stderr);
    (void)f;
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  s->pid = pid;
  s->port = 0;
  for (double t0 = now_s(); now_s() - t0 < 60;) {
    FILE *f = fopen(s->log, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
      const char *p = strstr(line, "listening on http://127.0.0.1:");
      if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
    }
    if (f) fclose(f);
    if (s->port > 0) return 0;
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return -1;
    usleep(5000);
  }
  return -1;
}

/* SIGTERM, then the exit status (or -1 if it had to be killed). */
static int srv_stop(srv *s) {
  if (s->pid <= 0) return -1;
  kill(s->pid, SIGTERM);
  int st = 0;
  for (double t0 = now_s(); now_s() - t0 < 30;) {
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      s->pid = 0;
      int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (rc == 0) unlink(s->log); /* kept when something went wrong */
      return rc;
    }
    usleep(10000);
  }
  kill(s->pid, SIGKILL);
  waitpid(s->pid, &st, 0);
  s->pid = 0;
  return -1;
}

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  struct timeval tv = {120, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

static int send_all(int fd, const char *b, size_t n) {
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Sends a request (HTTP/1.0: the server closes when done). extra: header
 * lines each ending in \r\n, or NULL. */
static int http_send(int port, const char *method, const char *path, const char *extra,
                     const char *body) {
  int fd = tcp_connect(port);
  if (fd < 0) return -1;
  /* the request line and fixed headers, then extra as it is (a test may
   * send more than any fixed buffer holds: oversized headers), then the
   * length and the blank line */
  char head[8192], tail[96];
  int n = snprintf(head, sizeof head, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
                   method, path);
  int t = body ? snprintf(tail, sizeof tail, "Content-Length: %zu\r\n\r\n", strlen(body))
               : snprintf(tail, sizeof tail, "\r\n");
  if (n < 0 || (size_t)n >= sizeof head || send_all(fd, head, (size_t)n) != 0 ||
      (extra && send_all(fd, extra, strlen(extra)) != 0) || send_all(fd, tail, (size_t)t) != 0 ||
      (body && send_all(fd, body, strlen(body)) != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

typedef struct http_resp {
  int status;
  char *raw;   /* everything received */
  char *body;  /* points into raw */
  size_t len;
} http_resp;

static void http_read(int fd, http_resp *r) {
  size_t cap = 65536, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (n + 4096 > cap) b = realloc(b, cap *= 2);
    ssize_t k = recv(fd, b + n, cap - n - 1, 0);
    if (k <= 0) break;
    n += (size_t)k;
  }
  close(fd);
  b[n] = 0;
  r->raw = b;
  r->status = 0;
  sscanf(b, "HTTP/1.%*d %d", &r->status);
  char *e = strstr(b, "\r\n\r\n");
  r->body = e ? e + 4 : b + n;
  r->len = (size_t)(b + n - r->body);
}

static http_resp http(int port, const char *method, const char *path, const char *extra,
                      const char *body) {
  http_resp r = {0};
  int fd = http_send(port, method, path, extra, body);
  if (fd < 0) {
    r.raw = strdup("");
    r.body = r.raw;
    return r;
  }
  http_read(fd, &r);
  return r;
}

static const char *header_of(const http_resp *r, const char *name) {
  static char v[256];
  char pat[128];
  snprintf(pat, sizeof pat, "\r\n%s:", name);
  const char *p = strcasestr(r->raw, pat);
  if (!p || p > r->body) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  size_t k = strcspn(p, "\r\n");
  snprintf(v, sizeof v, "%.*s", (int)k, p);
  return v;
}

#endif
