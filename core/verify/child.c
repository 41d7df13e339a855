/* Isolation for verification units: every unit runs in a forked child with
 * a wall-clock limit (the parent kills it), RLIMIT_CPU, RLIMIT_AS (not under
 * ASan, whose shadow memory needs terabytes of address space) and no core
 * dumps. The child's stdout and stderr are captured as raw evidence; its
 * results come back as JSON lines on a separate pipe, so a kernel printing
 * to stdout cannot forge them. Whatever the child does, the parent returns. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/verify/verify.h"

#if defined(__SANITIZE_ADDRESS__)
#define VF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VF_ASAN 1
#endif
#endif

#define OUTPUT_CAP (256 * 1024) /* raw output kept: the tail, when longer */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int truncated;
} sbuf;

static void sbuf_add(sbuf *b, const char *s, size_t n, size_t limit) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  if (limit && b->n > limit) { /* keep the tail: the end of a crash log matters most */
    size_t drop = b->n - limit;
    memmove(b->p, b->p + drop, b->n - drop + 1);
    b->n -= drop;
    b->truncated = 1;
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void set_limits(const vf_limits *lim) {
  struct rlimit r;
  r.rlim_cur = r.rlim_max = 0;
  setrlimit(RLIMIT_CORE, &r); /* a crashing kernel must not litter core files */
  if (lim->cpu_s > 0) {
    r.rlim_cur = (rlim_t)(lim->cpu_s + 0.999);
    r.rlim_max = r.rlim_cur + 1;
    setrlimit(RLIMIT_CPU, &r);
  }
#ifndef VF_ASAN
  if (lim->mem_mb > 0) {
    r.rlim_cur = r.rlim_max = (rlim_t)lim->mem_mb << 20;
    setrlimit(RLIMIT_AS, &r);
  }
#endif
}

int vf_run_child(const vf_limits *lim, int (*fn)(void *arg, int result_fd), void *arg,
                 vf_child_result *out) {
  memset(out, 0, sizeof *out);
  out->events = json_array();
  int op[2], rp[2];
  if (pipe2(op, O_CLOEXEC) != 0) return -1;
  if (pipe2(rp, O_CLOEXEC) != 0) {
    close(op[0]);
    close(op[1]);
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    close(op[0]), close(op[1]), close(rp[0]), close(rp[1]);
    return -1;
  }
  if (pid == 0) {
    /* Own process group, so a timeout kills whatever the plugin started too;
     * and die with the verifier, so an interrupted run leaves no hung child. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(3); /* the parent is already gone */
    close(op[0]);
    close(rp[0]);
    dup2(op[1], 1);
    dup2(op[1], 2);
    close(op[1]);
    set_limits(lim);
    int rc = fn(arg, rp[1]);
    fflush(stdout);
    fflush(stderr);
    _exit(rc ? 1 : 0); /* no atexit handlers: the parent's state is not ours */
  }
  close(op[1]);
  close(rp[1]);

  sbuf outb = {0}, resb = {0};
  struct pollfd pf[2] = {{op[0], POLLIN, 0}, {rp[0], POLLIN, 0}};
  int open_fds = 2;
  double deadline = t0 + (lim->timeout_s > 0 ? lim->timeout_s : 1e9), drain_until = 0;
  while (open_fds) {
    double now = now_s();
    if (!out->timed_out && now >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      out->timed_out = 1;
      drain_until = now + 2.0; /* a grandchild may still hold the pipes */
    }
    if (out->timed_out && now >= drain_until) break;
    double until = out->timed_out ? drain_until : deadline;
    int ms = (int)((until - now) * 1000) + 1;
    int n = poll(pf, 2, ms > 1000 ? 1000 : ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; i++) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      ssize_t r = read(pf[i].fd, buf, sizeof buf);
      if (r > 0) sbuf_add(i ? &resb : &outb, buf, (size_t)r, i ? 0 : OUTPUT_CAP);
      else if (r == 0 || errno != EINTR) {
        close(pf[i].fd);
        pf[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (pf[i].fd >= 0) close(pf[i].fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  out->wall_s = now_s() - t0;
  if (WIFEXITED(st)) out->exited = 1, out->exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) out->signaled = 1, out->term_signal = WTERMSIG(st);
  if (outb.truncated) {
    sbuf tmp = {0};
    const char *note = "[... earlier output dropped ...]\n";
    sbuf_add(&tmp, note, strlen(note), 0);
    sbuf_add(&tmp, outb.p, outb.n, 0);
    free(outb.p);
    outb = tmp;
  }
  out->output = outb.p ? outb.p : strdup("");
  /* Event lines; a torn last line (the child died mid-write) is dropped. */
  for (char *line = resb.p, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
    *nl = 0;
    json_t *ev = json_loads(line, 0, NULL);
    if (json_is_object(ev)) json_array_append_new(out->events, ev);
    else json_decref(ev);
  }
  free(resb.p);
  return 0;
}

void vf_child_result_free(vf_child_result *r) {
  free(r->output);
  json_decref(r->events);
  memset(r, 0, sizeof *r);
}
