/* See gen_tool.h. */
#define _GNU_SOURCE
#include "gen_tool.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *gt_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
  size_t r = n > 0 ? fread(b, 1, (size_t)n, f) : 0;
  b[r] = 0;
  fclose(f);
  return b;
}

res gt_run(const char *build, const char *tmp, const char *tool, const char *const *args, int timeout) {
  char exe[1200], o[1300], e[1300];
  snprintf(exe, sizeof exe, "%s/bin/%s", build, tool);
  static int k;
  snprintf(o, sizeof o, "%s/out.%d.%d", tmp, getpid(), k);
  snprintf(e, sizeof e, "%s/err.%d.%d", tmp, getpid(), k++);
  const char *argv[64] = {exe};
  int n = 1;
  for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int nul = open("/dev/null", O_RDONLY);
    dup2(nul, 0), dup2(fo, 1), dup2(fe, 2);
    alarm((unsigned)timeout);
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  res r = {WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), gt_slurp(o), gt_slurp(e)};
  return r;
}

void res_free(res *r) {
  free(r->out);
  free(r->err);
}

int gt_dirs(const char *tmpl, char *build, char *src, char *tmp, char *model, char *ckb) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  snprintf(build, 1024, "%s", b ? b : "build");
  snprintf(src, 1024, "%s", s ? s : ".");
  snprintf(tmp, 1100, "%s", tmpl);
  if (!mkdtemp(tmp)) return -1;
  if (model) snprintf(model, 1200, "%s/tiny", tmp);
  if (ckb) snprintf(ckb, 1200, "%s/ckb", tmp);
  return 0;
}

void gt_sh(const char *who, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (system(cmd) != 0) fprintf(stderr, "%s: command failed: %s\n", who, cmd);
}

int gt_short_golden(const char *from, const char *dir, int ncases, int nsteps) {
  json_error_t je;
  json_t *g = json_load_file(from, 0, &je);
  json_t *cases = json_object_get(g, "cases");
  if (!g || (int)json_array_size(cases) < ncases) {
    fprintf(stderr, "gt_short_golden: %s: %s\n", from, g ? "too few cases" : je.text);
    json_decref(g);
    return -1;
  }
  while ((int)json_array_size(cases) > ncases) json_array_remove(cases, json_array_size(cases) - 1);
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    json_t *steps = json_object_get(c, "steps");
    while ((int)json_array_size(steps) > nsteps) json_array_remove(steps, json_array_size(steps) - 1);
  }
  const char *base = strrchr(from, '/');
  char out[2400];
  snprintf(out, sizeof out, "%s/%s", dir, base ? base + 1 : from);
  mkdir(dir, 0755);
  const int rc = json_dump_file(g, out, JSON_COMPACT);
  json_decref(g);
  if (rc) fprintf(stderr, "gt_short_golden: cannot write %s\n", out);
  return rc ? -1 : 0;
}
