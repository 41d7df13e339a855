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

#include "core/gen/agent_host.h"
#include "core/gen/gen.h"
#include "core/runtime/loader.h"
#include "mi/agent.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void child_main(const char *plugin_path, json_t *task, const char *ckb_dir, const char *run_dir,
                       const mi_agent_host_cfg *cfg, int wfd) {
  char err[1024] = "";
  char *res = NULL;
  dup2(2, 1); /* an agent's prints never reach mi-gen's stdout */
  const char *ckb_root[] = {ckb_dir};
  mi_agent_host_cfg dflt = {.requests_left = -1, .tokens_left = -1, .roots = ckb_root, .n_roots = 1, .run_dir = run_dir};
  mi_agent_services *svc = mi_agent_services_new(cfg ? cfg : &dflt);
  mi_plugin *p = mi_plugin_load_file(plugin_path, NULL);
  if (!p || p->status != MI_PLUGIN_LOADED || !p->desc || p->desc->kind != MI_PLUGIN_AGENT) {
    snprintf(err, sizeof err, "%s: not a loadable agent plugin: %s", plugin_path,
             p && p->reason ? p->reason : "wrong kind");
  } else {
    const mi_agent_iface *A = p->iface;
    uint32_t need = A->struct_size >= offsetof(mi_agent_iface, host_version) + sizeof(uint32_t) ? A->host_version : 0;
    if (A->struct_size < offsetof(mi_agent_iface, run) + sizeof(A->run) || !A->run) {
      snprintf(err, sizeof err, "%s: agent interface too small or without run()", plugin_path);
    } else if (need > MI_AGENT_HOST_VERSION) {
      snprintf(err, sizeof err, "%s: the agent needs host services version %u; this mi-gen lends version %u (rebuild one of them)",
               plugin_path, need, MI_AGENT_HOST_VERSION);
    } else {
      char *text = json_dumps(task, JSON_COMPACT);
      mi_agent_task t = {sizeof t, text, ckb_dir, run_dir, svc ? mi_agent_services_host(svc) : NULL};
      if (A->run(p->ctx, &t, &res, err, sizeof err) != 0) {
        free(res);
        res = NULL;
        if (!err[0]) snprintf(err, sizeof err, "the agent failed without a message");
      }
      free(text);
    }
  }
  /* the envelope: the agent's result (or its error) and, written by this
   * code and not the agent's, what the lent services spent and read */
  json_t *env = json_object();
  if (res) {
    json_error_t je;
    json_t *r = json_loads(res, 0, &je);
    if (r && json_is_object(r)) json_object_set_new(env, "result", r);
    else {
      json_decref(r);
      json_object_set_new(env, "result_error", json_string(je.text));
    }
  } else {
    json_object_set_new(env, "result", json_pack("{s:s, s:s}", "status", "error", "message", err));
  }
  free(res);
  if (svc) json_object_set_new(env, "host", mi_agent_services_report(svc));
  res = json_dumps(env, JSON_COMPACT);
  json_decref(env);
  size_t n = res ? strlen(res) : 0, off = 0;
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
  return mi_agent_run_ex(plugin_path, task, ckb_dir, run_dir, timeout_s, NULL, out);
}

int mi_agent_run_ex(const char *plugin_path, json_t *task, const char *ckb_dir, const char *run_dir,
                    double timeout_s, const mi_agent_host_cfg *cfg, mi_agent_outcome *out) {
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
    child_main(plugin_path, task, ckb_dir, run_dir, cfg, fds[1]);
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
    json_t *env = json_loads(buf, 0, &je);
    out->result = json_incref(json_object_get(env, "result"));
    if (json_is_object(json_object_get(env, "host"))) out->host_report = json_incref(json_object_get(env, "host"));
    if (!out->result || !json_is_object(out->result)) {
      json_decref(out->result);
      out->result = NULL;
      snprintf(out->message, sizeof out->message, "the agent's result is not a JSON object: %s",
               env ? json_string_value(json_object_get(env, "result_error")) ?: "no result" : je.text);
    }
    json_decref(env);
  }
  free(buf);
  return out->result ? 0 : -1;
}

void mi_agent_outcome_free(mi_agent_outcome *o) {
  json_decref(o->result);
  o->result = NULL;
  json_decref(o->host_report);
  o->host_report = NULL;
}
