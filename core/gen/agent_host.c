/* The agent host: one agent, one process. The orchestrator forks; the child
 * dlopens the agent plugin (the parent never does), runs one task and writes
 * the result on a pipe only the parent holds the reading end of. The parent
 * knows the child's pid because it forked it: that, not anything in the
 * result, is what the journal records as the author. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/gen/gen.h"
#include "core/runtime/loader.h"
#include "mi/agent.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void child_main(const char *plugin_path, json_t *task, const char *ckb_dir,
                       const char *run_dir, int wfd) {
  char err[1024] = "";
  char *res = NULL;
  dup2(2, 1); /* an agent's prints never reach mi-gen's stdout */
  mi_plugin *p = mi_plugin_load_file(plugin_path, NULL);
  if (!p || p->status != MI_PLUGIN_LOADED || !p->desc || p->desc->kind != MI_PLUGIN_AGENT) {
    snprintf(err, sizeof err, "%s: not a loadable agent plugin: %s", plugin_path,
             p && p->reason ? p->reason : "wrong kind");
  } else {
    const mi_agent_iface *A = p->iface;
    if (A->struct_size < sizeof(mi_agent_iface) || !A->run) {
      snprintf(err, sizeof err, "%s: agent interface too small or without run()", plugin_path);
    } else {
      char *text = json_dumps(task, JSON_COMPACT);
      mi_agent_task t = {sizeof t, text, ckb_dir, run_dir};
      if (A->run(p->ctx, &t, &res, err, sizeof err) != 0) {
        free(res);
        res = NULL;
        if (!err[0]) snprintf(err, sizeof err, "the agent failed without a message");
      }
      free(text);
    }
  }
  if (!res) {
    json_t *e = json_pack("{s:s, s:s}", "status", "error", "message", err);
    res = json_dumps(e, JSON_COMPACT);
    json_decref(e);
  }
  size_t n = strlen(res), off = 0;
  while (off < n) {
    ssize_t w = write(wfd, res + off, n - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(wfd);
  _exit(0);
}

int mi_agent_run(const char *plugin_path, json_t *task, const char *ckb_dir, const char *run_dir,
                 double timeout_s, mi_agent_outcome *out) {
  memset(out, 0, sizeof *out);
  out->exit_code = -1;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(out->message, sizeof out->message, "pipe: %s", strerror(errno));
    return -1;
  }
  fflush(NULL);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(out->message, sizeof out->message, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    close(fds[0]);
    setpgid(0, 0); /* its own group: a timeout kills what it started too */
    child_main(plugin_path, task, ckb_dir, run_dir, fds[1]);
  }
  setpgid(pid, pid);
  close(fds[1]);
  out->pid = pid;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    double left = timeout_s - (now_s() - t0);
    if (left <= 0) {
      out->timed_out = 1;
      kill(-pid, SIGKILL);
      break;
    }
    struct pollfd pf = {fds[0], POLLIN, 0};
    int pr = poll(&pf, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
    ssize_t r = read(fds[0], buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  out->wall_s = now_s() - t0;
  if (WIFEXITED(st)) out->exit_code = WEXITSTATUS(st);
  buf[n] = 0;
  if (out->timed_out) {
    snprintf(out->message, sizeof out->message, "the agent ran past %.0f s and was killed", timeout_s);
  } else if (WIFSIGNALED(st)) {
    snprintf(out->message, sizeof out->message, "the agent died of signal %d", WTERMSIG(st));
  } else {
    json_error_t je;
    out->result = json_loads(buf, 0, &je);
    if (!out->result || !json_is_object(out->result)) {
      json_decref(out->result);
      out->result = NULL;
      snprintf(out->message, sizeof out->message, "the agent's result is not a JSON object: %s", je.text);
    }
  }
  free(buf);
  return out->result ? 0 : -1;
}

void mi_agent_outcome_free(mi_agent_outcome *o) {
  json_decref(o->result);
  o->result = NULL;
}
