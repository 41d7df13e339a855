/* reviewer.rules: spec review of an engine's source against the contracts,
 * before anything of it runs. Rules (each finding: severity, rule, line,
 * message):
 *   include     only <math.h> <stdio.h> <string.h> <stdint.h> <stddef.h> and the mi/ SDK headers
 *   forbidden   no call that loads code, runs programs, opens sockets or
 *               files, reads the environment or the process's limits (the
 *               weights come through the host API only), clocks, counters
 *               or the process's identity; no name of the environment,
 *               program name or arguments, no extern declaration, no
 *               /proc /sys /dev /tmp /etc /run path in a string literal:
 *               nothing by which an engine could tell a verification from
 *               a deployment
 *   alloc       no allocation in the forward pass (forward_chunk, logits_rows, e_forward)
 *   sequence    the platform calls of the forward pass are the model
 *               contract's operator sequence, in order (prologue + layer;
 *               epilogue in logits_rows); a step whose operator reduces to a
 *               plainer one at this checkpoint (reduces_to) may call either
 *   members     every platform member used is one the platform contract lists
 *               (its kernels' members) or memory/stream plumbing
 *   constants   every #define of a config field equals config.json's value
 *               (or the contract's default)
 *   kind        the descriptor declares MI_PLUGIN_ENGINE
 * Task: {"source": SHA, "model_dir"}. Result: {"status":"ok", "verdict":
 * "approved"|"rejected", "findings": [...]} */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>

#include "../common.h"
#include "core/runtime/model_input.h"
#include "core/ckb/ckb.h"
#include "core/gen/gen.h"
#include "mi/agent.h"
#include "mi/plugin.h"

static void finding(json_t *fs, const char *sev, const char *rule, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void finding(json_t *fs, const char *sev, const char *rule, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_array_append_new(fs, json_pack("{s:s, s:s, s:i, s:s}", "severity", sev, "rule", rule, "line", line, "message", msg));
}

/* comments and the insides of string/char literals blanked (newlines kept) */
static char *code_only(const char *s) {
  char *o = strdup(s);
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '/' && s[i + 1] == '*') {
      size_t j = i;
      while (j < n && !(s[j] == '*' && s[j + 1] == '/')) {
        if (s[j] != '\n') o[j] = ' ';
        j++;
      }
      if (j < n) o[j] = o[j + 1] = ' ';
      i = j + 1;
    } else if (s[i] == '/' && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') o[i++] = ' ';
    } else if (s[i] == '"' || s[i] == '\'') {
      char q = s[i++];
      while (i < n && s[i] != q && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n) o[i++] = ' ';
        o[i++] = ' ';
      }
    }
  }
  return o;
}

/* the insides of string literals, everything else blanked (newlines kept;
 * the same offsets as the source) */
static char *literals_only(const char *s) {
  char *o = strdup(s);
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '/' && s[i + 1] == '*') {
      for (; i < n && !(s[i] == '*' && s[i + 1] == '/'); i++)
        if (o[i] != '\n') o[i] = ' ';
      if (i < n) o[i] = o[i + 1] = ' ', i++;
    } else if (s[i] == '/' && s[i + 1] == '/') {
      for (; i < n && s[i] != '\n'; i++) o[i] = ' ';
    } else if (s[i] == '\'') {
      o[i++] = ' ';
      while (i < n && s[i] != '\'' && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n) o[i++] = ' ';
        o[i++] = ' ';
      }
      if (i < n && o[i] != '\n') o[i] = ' ';
    } else if (s[i] == '"') {
      o[i++] = ' ';
      while (i < n && s[i] != '"' && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n) i++; /* an escape stays as written */
        i++;
      }
      if (i < n && o[i] != '\n') o[i] = ' ';
    } else if (o[i] != '\n') {
      o[i] = ' ';
    }
  }
  return o;
}

static int line_of(const char *base, const char *p) {
  int l = 1;
  for (const char *q = base; q < p; q++) l += *q == '\n';
  return l;
}

/* the body of `static int NAME(...) {...}` : [*b, *e) */
static int body_of(const char *code, const char *name, const char **b, const char **e) {
  char pat[128];
  snprintf(pat, sizeof pat, " %s(", name);
  const char *p = code;
  while ((p = strstr(p, pat))) {
    const char *q = p + strlen(pat);
    int depth = 1;
    while (*q && depth) depth += (*q == '(') - (*q == ')'), q++;
    while (*q && isspace((unsigned char)*q)) q++;
    if (*q == '{') {
      const char *s = q;
      depth = 0;
      do {
        depth += (*q == '{') - (*q == '}');
        q++;
      } while (*q && depth);
      *b = s;
      *e = q;
      return 0;
    }
    p = q;
  }
  return -1;
}

static int is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* calls NAME( in [b, e) as an array of {"name", "line"} ; with member_only, only ->NAME( */
static json_t *calls_in(const char *base, const char *b, const char *e, int member_only) {
  json_t *out = json_array();
  for (const char *p = b; p < e; p++) {
    if (!is_ident(*p) || (p > b && is_ident(p[-1]))) continue;
    const char *s = p;
    while (p < e && is_ident(*p)) p++;
    const char *q = p;
    while (q < e && (*q == ' ' || *q == '\t')) q++;
    if (q < e && *q == '(') {
      int member = s >= base + 2 && s[-1] == '>' && s[-2] == '-';
      if (!member_only || member)
        json_array_append_new(out, json_pack("{s:s%, s:i, s:b}", "name", s, (size_t)(p - s), "line", line_of(base, s), "member", member));
    }
    p--;
  }
  return out;
}

static const char *const k_forbidden[] = {
    "dlopen", "dlsym", "dlmopen", "dlvsym", "system", "popen", "fork", "vfork", "clone", "execl", "execlp", "execle",
    "execv", "execvp", "execve", "execvpe", "posix_spawn", "posix_spawnp", "socket", "connect", "accept", "listen",
    "sendto", "recvfrom", "getaddrinfo", "fopen", "freopen", "fdopen", "open", "openat", "creat", "read", "write",
    "pread", "pwrite", "mmap", "syscall", "getenv", "secure_getenv", "unlink", "remove", "rename", "kill", "ptrace",
    "getrlimit", "prlimit", "getppid", "readlink", "opendir", "stat", "lstat", "access", "pthread_create", "signal",
    "sigaction", "setenv", "putenv", "chdir", "asm", "__asm__", "time", "clock_gettime", "gettimeofday",
    /* what else tells a run from a run: clocks and counters, the process's
     * identity, its files' names, the host it is on */
    "clock", "clock_getres", "timespec_get", "times", "getrusage", "__rdtsc", "__rdtscp", "__builtin_ia32_rdtsc",
    "__builtin_ia32_rdtscp", "__builtin_readcyclecounter", "getpid", "gettid", "getuid", "geteuid", "getgid",
    "getpgrp", "getsid", "getcwd", "get_current_dir_name", "realpath", "uname", "gethostname", "sysconf",
    "getauxval", "dladdr", "dl_iterate_phdr", "sched_getaffinity", "sched_getcpu", "getpwuid", "getlogin",
    "getentropy", "getrandom", "fstat", "fstatat", "statx", "ttyname", "isatty", "tmpnam", "tmpfile", "mkstemp",
    NULL};
/* identifiers an engine may not name at all, called or not: the process's
 * environment, its program name and its arguments (an engine that reads them
 * can behave while verified and cheat when deployed) */
static const char *const k_identity[] = {"environ", "__environ", "_environ", "program_invocation_name",
                                         "program_invocation_short_name", "__progname", "__progname_full",
                                         "__libc_argv", "__libc_argc", "_dl_argv", "stdin", NULL};
/* path prefixes a string literal of an engine may not hold: the process's own
 * view of itself and of the machine (/proc/self/cmdline, /proc/self/environ,
 * /proc/self/exe, /sys/fs/cgroup, /dev/tty...) */
static const char *const k_paths[] = {"/proc", "/sys/", "/dev/", "/tmp", "/etc/", "/run/", NULL};
static const char *const k_alloc[] = {"malloc", "calloc", "realloc", "free", "alloc", "aligned_alloc", "posix_memalign",
                                      "strdup", "buffer_alloc", "buffer_wrap_host", "alloca", NULL};
static const char *const k_plumbing[] = {"memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "buffer_alloc", "buffer_wrap_host",
                                         "buffer_free", "buffer_ptr", "stream_sync", "last_error", NULL};
/* the SDK's headers an engine may include: declarations, and the model glue
 * (mi/model_glue.h: the weight binding, checks and needs entries the
 * hand-written plugins share; SDK code, reviewed with the SDK, not per engine) */
static const char *const k_includes[] = {"<math.h>", "<stdio.h>", "<string.h>", "<stdint.h>", "<stddef.h>",
                                         "\"mi/engine.h\"", "\"mi/plugin.h\"", "\"mi/model.h\"", "\"mi/platform.h\"",
                                         "\"mi/host.h\"", "\"mi/tensor.h\"", "\"mi/model_glue.h\"", NULL};

static int in_list(const char *const *l, const char *s) {
  for (int i = 0; l[i]; i++)
    if (!strcmp(l[i], s)) return 1;
  return 0;
}

/* The name the source calls for operator op: its platform member, or, for
 * an operator computed by a kernel pack (member "pack"), the engine's field
 * pk_NAME (operator.NAME; the composer's pack_field). */
static void called_member(json_t *ops, const char *op, char *out, size_t n) {
  const char *m = json_string_value(json_object_get(json_object_get(ops, op ? op : ""), "member"));
  if (m && !strcmp(m, "pack") && strchr(op, '.')) snprintf(out, n, "pk_%s", strchr(op, '.') + 1);
  else snprintf(out, n, "%s", m ? m : "?");
}

/* `seqs`: the step arrays the function's platform calls follow, in order (the
 * prologue, then the layer sequence or each layer kind's in the contract's
 * order: the source writes one switch case per kind in that order).
 * `half_kv`: the cache holds f16/bf16, so convert calls store new rows. */
static void check_sequence(json_t *fs, const char *base, const char *code, const char *fn, json_t *model,
                           json_t *seqs, json_t *ops, int tp, int half_kv, const mi_ckb *ck, const json_t *cfg) {
  const char *b, *e;
  if (body_of(code, fn, &b, &e)) {
    finding(fs, "error", "sequence", 0, "no function %s: the forward pass cannot be checked", fn);
    return;
  }
  json_t *want = json_array();
  for (size_t s = 0; s < json_array_size(seqs); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(seqs, s), i, st) {
      if (json_is_true(json_object_get(st, "optional"))) continue;
      const char *op = json_string_value(json_object_get(st, "operator"));
      char member[160], alt[160] = "";
      called_member(ops, op, member, sizeof member);
      /* a masked form that masks nothing here may be called as its plain
       * operator (core/ckb/reduce.c: the composer does) */
      const char *to = mi_ckb_step_reduction(ck, model, cfg, st);
      if (to) called_member(ops, to, alt, sizeof alt);
      json_array_append_new(want, json_pack("{s:s, s:s, s:s}", "member", member, "alt", alt, "step",
                                            json_string_value(json_object_get(st, "step"))));
      if (json_object_get(st, "reduce") && tp > 1)
        json_array_append_new(want, json_pack("{s:s, s:s}", "member", "allreduce_sum_f32", "step", json_string_value(json_object_get(st, "step"))));
    }
  }
  json_t *got = calls_in(base, b, e, 1);
  size_t gi = 0, wi = 0, stores = 0;
  json_t *c;
  for (; gi < json_array_size(got); gi++) {
    c = json_array_get(got, gi);
    const char *n = json_string_value(json_object_get(c, "name"));
    if (in_list(k_plumbing, n)) continue;
    if (half_kv && !strcmp(n, "convert")) { /* the new rows stored into the half-precision cache */
      stores++;
      continue;
    }
    int line = (int)json_integer_value(json_object_get(c, "line"));
    if (wi >= json_array_size(want)) {
      finding(fs, "error", "sequence", line, "%s: platform call %s past the end of the contract's sequence", fn, n);
      continue;
    }
    json_t *w = json_array_get(want, wi++);
    const char *alt = json_string_value(json_object_get(w, "alt"));
    if (strcmp(n, json_string_value(json_object_get(w, "member"))) && (!alt || !alt[0] || strcmp(n, alt)))
      finding(fs, "error", "sequence", line, "%s: step %s of the contract is %s, the source calls %s here", fn,
              json_string_value(json_object_get(w, "step")), json_string_value(json_object_get(w, "member")), n);
  }
  if (wi < json_array_size(want))
    finding(fs, "error", "sequence", line_of(base, e), "%s: the contract's step %s (and %zu after it) is missing", fn,
            json_string_value(json_object_get(json_array_get(want, wi), "step")), json_array_size(want) - wi - 1);
  /* a half-precision KV cache: each cache entry's new rows stored once per
   * layer (layer kinds: once in each kind's case of the layer loop) */
  size_t ncache = json_array_size(json_object_get(model, "cache"));
  const char *kname;
  json_t *kind;
  json_object_foreach(json_object_get(json_object_get(model, "layer_kinds"), "kinds"), kname, kind)
    ncache += json_array_size(json_object_get(kind, "cache"));
  if (half_kv && !strcmp(fn, "forward_chunk") && stores != ncache)
    finding(fs, "error", "sequence", line_of(base, b), "%s: a half-precision KV cache needs one convert per cache entry (%zu), "
            "the source has %zu", fn, ncache, stores);
  json_decref(want);
  json_decref(got);
}

/* The model contract whose architectures name arch, the operators by id (into ops) and the platform
 * contract the task asks for (default cpu), from the CKB c (NULL: none of them). */
static json_t *find_contracts(mi_ckb *c, const json_t *task, const char *arch, json_t *ops,
                              const mi_ckb_entry **pe) {
  json_t *model = NULL, *archs = json_pack("[s?]", arch);
  const mi_ckb_entry *me = c && arch ? mi_ckb_find_model(c, archs) : NULL; /* its own, or a layout's */
  json_decref(archs);
  if (me) model = me->json;
  for (size_t i = 0; c && i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (e->kind && !strcmp(e->kind, "operator")) json_object_set(ops, e->id, e->json);
  }
  *pe = c ? mi_ckb_find_platform(c, json_string_value(json_object_get(json_object_get(task, "constraints"), "platform")) ?: "cpu") : NULL;
  return model;
}

/* includes: only the engine's allowed headers */
static void check_includes(json_t *fs, const char *src) {
  for (const char *p = src; (p = strstr(p, "#include")); p += 8) {
    const char *q = p + 8;
    while (*q == ' ') q++;
    char inc[128];
    size_t n = strcspn(q, "\n");
    snprintf(inc, sizeof inc, "%.*s", (int)(n < 127 ? n : 127), q);
    for (char *z = inc + strlen(inc); z > inc && isspace((unsigned char)z[-1]);) *--z = 0;
    if (!in_list(k_includes, inc)) finding(fs, "error", "include", line_of(src, p), "#include %s is not allowed in an engine", inc);
  }
}

/* What an engine may not do anywhere: forbidden calls (all: the calls in code), names of the
 * process's identity, extern declarations, path literals (in src's string literals). */
static void check_forbidden(json_t *fs, const char *src, const char *code, const json_t *all) {
  size_t i;
  json_t *cl;
  json_array_foreach(all, i, cl) {
    const char *n = json_string_value(json_object_get(cl, "name"));
    if (in_list(k_forbidden, n))
      finding(fs, "error", "forbidden", (int)json_integer_value(json_object_get(cl, "line")),
              "call to %s: an engine may not load code, run programs, use sockets, files (other than the host's weight API), the environment, clocks or limits", n);
  }
  /* names of the process's identity, and extern declarations: what an
   * engine needs comes from its allowed headers and the host API, so a
   * declaration of its own of something defined elsewhere can only be a way
   * around the list above */
  for (const char *p = code; *p; p++) {
    if (!is_ident(*p) || (p > code && is_ident(p[-1]))) continue;
    const char *b = p;
    while (is_ident(*p)) p++;
    size_t n = (size_t)(p - b);
    char id[64];
    if (n < sizeof id) {
      memcpy(id, b, n);
      id[n] = 0;
      if (in_list(k_identity, id))
        finding(fs, "error", "forbidden", line_of(code, b),
                "use of %s: an engine may not read its environment, program name or arguments", id);
      else if (!strcmp(id, "extern"))
        finding(fs, "error", "forbidden", line_of(code, b),
                "extern declaration: an engine may name nothing defined outside it but its headers and the host API");
    }
    p--;
  }
  /* path literals: the insides of string literals only, wherever in them */
  char *lits = literals_only(src);
  for (int k = 0; k_paths[k]; k++)
    for (const char *p = lits; (p = strstr(p, k_paths[k])); p++)
      finding(fs, "error", "forbidden", line_of(lits, p),
              "string literal naming %s...: an engine may not look at the process, the machine or files by name", k_paths[k]);
  free(lits);
}

/* allocation in the forward pass */
static void check_hot_alloc(json_t *fs, const char *code) {
  static const char *const hot[] = {"forward_chunk", "logits_rows", "e_forward", NULL};
  for (int h = 0; hot[h]; h++) {
    const char *b, *e;
    if (body_of(code, hot[h], &b, &e)) {
      finding(fs, "error", "alloc", 0, "no function %s: the forward pass must be forward_chunk, logits_rows and e_forward", hot[h]);
      continue;
    }
    json_t *cs = calls_in(code, b, e, 0);
    size_t i;
    json_t *cl;
    json_array_foreach(cs, i, cl) {
      const char *n = json_string_value(json_object_get(cl, "name"));
      if (in_list(k_alloc, n))
        finding(fs, "error", "alloc", (int)json_integer_value(json_object_get(cl, "line")), "%s allocates (%s) in the forward pass", hot[h], n);
    }
    json_decref(cs);
  }
}

/* the step sequences: forward_chunk against the prologue and every layer kind's sequence,
 * logits_rows against the epilogue */
static void check_sequences(json_t *fs, const char *code, const json_t *task, json_t *model, json_t *ops,
                            const mi_ckb *c, const json_t *cfg) {
  int tp = (int)json_integer_value(json_object_get(json_object_get(task, "constraints"), "tp"));
  json_t *body = json_array(), *epi = json_array();
  json_array_append(body, json_object_get(model, "prologue") ?: json_null());
  json_t *kinds = json_object_get(json_object_get(model, "layer_kinds"), "kinds");
  if (kinds) {
    const char *kn;
    json_t *kv;
    json_object_foreach(kinds, kn, kv) json_array_append(body, json_object_get(kv, "sequence") ?: json_null());
  } else {
    json_array_append(body, json_object_get(model, "layer_sequence") ?: json_null());
  }
  json_array_append(epi, json_object_get(model, "epilogue") ?: json_null());
  const char *kvt = json_string_value(json_object_get(json_object_get(task, "constraints"), "kv_type"));
  int half_kv = kvt && strcmp(kvt, "f32") != 0;
  check_sequence(fs, code, code, "forward_chunk", model, body, ops, tp, half_kv, c, cfg);
  check_sequence(fs, code, code, "logits_rows", model, epi, ops, tp, half_kv, c, cfg);
  json_decref(body);
  json_decref(epi);
}

/* members: every member call is a kernel of the platform pe, platform plumbing or the host's */
static void check_members(json_t *fs, const json_t *all, const mi_ckb_entry *pe, json_t *ops) {
  const json_t *platform = pe->json;
  size_t i;
  json_t *cl;
  json_t *allowed = json_array();
  json_array_foreach(json_object_get(platform, "kernels"), i, cl) {
    const char *m = json_string_value(json_object_get(json_object_get(ops, json_string_value(json_object_get(cl, "operator"))), "member"));
    if (m) json_array_append_new(allowed, json_string(m));
  }
  json_array_foreach(json_object_get(json_object_get(platform, "collectives"), "ops"), i, cl) json_array_append(allowed, cl);
  /* a platform that hosts kernel packs: the pack kernels of the CKB's pack operators */
  int hosts = 0;
  json_array_foreach(json_object_get(platform, "kernel_packs"), i, cl) hosts |= !strcmp(json_string_value(cl) ?: "", "host-c");
  const char *oid;
  json_t *oc;
  if (hosts) json_object_foreach(ops, oid, oc) if (!strcmp(json_string_value(json_object_get(oc, "member")) ?: "", "pack")) {
      char m[160];
      called_member(ops, oid, m, sizeof m);
      json_array_append_new(allowed, json_string(m));
    }
  json_array_foreach(all, i, cl) {
    if (!json_is_true(json_object_get(cl, "member"))) continue;
    const char *n = json_string_value(json_object_get(cl, "name"));
    int okm = in_list(k_plumbing, n);
    size_t k;
    json_t *a;
    json_array_foreach(allowed, k, a) okm |= !strcmp(json_string_value(a), n);
    /* the host API table's members are the host's, not the platform's */
    static const char *const host_members[] = {"weights_find", "alloc", "free", "json_string", "json_array_get", "json_get",
                                               "json_type", "json_int", "json_real", "json_bool", "log", "opt_get",
                                               "json_array_size", NULL};
    okm |= in_list(host_members, n);
    if (!okm) finding(fs, "error", "members", (int)json_integer_value(json_object_get(cl, "line")),
                      "member %s is neither a kernel of %s nor platform plumbing", n, pe->id);
  }
  json_decref(allowed);
}

/* constants: each numeric config field the model contract names has its #define, equal to
 * config.json's value (or the contract's default) */
static void check_constants(json_t *fs, const char *code, const json_t *model, json_t *cfg) {
  size_t i;
  json_t *ce;
  json_array_foreach(json_object_get(model, "config"), i, ce) {
    const char *n = json_string_value(json_object_get(ce, "name"));
    if (!n) continue;
    /* the value as the contract reads config.json: its path (rope_parameters.rope_theta),
     * text_config, a default, or one derived from other fields (default_expr) */
    const json_t *v = mi_ckb_config_value(model, cfg, n, strlen(n));
    if (!json_is_number(v) && !json_is_boolean(v)) continue;
    char U[96], pat[128];
    size_t k = 0;
    for (; n[k] && k < 95; k++) U[k] = (char)toupper((unsigned char)n[k]);
    U[k] = 0;
    snprintf(pat, sizeof pat, "#define %s ", U);
    const char *p = strstr(code, pat);
    if (!p) {
      snprintf(pat, sizeof pat, "#define %s", U);
      p = strstr(code, pat);
      if (p && is_ident(p[strlen(pat)])) p = NULL;
    }
    if (!p) {
      finding(fs, "warning", "constants", 0, "config field %s has no #define %s", n, U);
      continue;
    }
    double want = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
    double got = strtod(p + strlen(pat), NULL);
    if (fabs(got - want) > 1e-6 * fabs(want))
      finding(fs, "error", "constants", line_of(code, p), "%s is %.9g in the source, config.json says %s = %.9g", U, got, n, want);
  }
}

static int rules_run(void *ctx, const mi_agent_task *t, char **result, char *err, size_t err_len) {
  (void)ctx;
  json_t *task = json_loads(t->task_json, 0, NULL);
  const char *sha = json_string_value(json_object_get(task, "source"));
  const char *model_dir = json_string_value(json_object_get(task, "model_dir"));
  char path[4400];
  mi_bb *bb = mi_bb_open(t->run_dir, 0, err, err_len);
  if (!bb || !sha || mi_bb_artifact(bb, sha, "c", path, sizeof path) != 0) {
    if (bb) snprintf(err, err_len, "rules: the source artifact %s is missing or altered", sha ? sha : "(none)");
    mi_bb_close(bb);
    json_decref(task);
    return -1;
  }
  mi_bb_close(bb);
  char *src = ag_read_file(path, NULL);
  char *code = code_only(src);
  json_t *fs = json_array();
  mi_ckb *c = mi_ckb_open(t->ckb_dir, err, err_len);
  char e2[600];
  json_t *cfg = mi_model_input_config(model_dir ? model_dir : ".", 0, e2, sizeof e2);
  const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
  json_t *ops = json_object();
  const mi_ckb_entry *pe = NULL;
  json_t *model = find_contracts(c, task, arch, ops, &pe);
  const json_t *platform = pe ? pe->json : NULL;
  if (!model || !platform) finding(fs, "error", "contracts", 0, "no model or platform contract to review against");

  check_includes(fs, src);
  json_t *all = calls_in(code, code, code + strlen(code), 0);
  check_forbidden(fs, src, code, all);
  check_hot_alloc(fs, code);
  if (model && platform) {
    check_sequences(fs, code, task, model, ops, c, cfg);
    check_members(fs, all, pe, ops);
    check_constants(fs, code, model, cfg);
  }
  if (!strstr(code, "MI_PLUGIN_ENGINE")) finding(fs, "error", "kind", 0, "the descriptor does not declare MI_PLUGIN_ENGINE");
  int errors = 0;
  size_t i;
  json_t *cl;
  json_array_foreach(fs, i, cl) errors += !strcmp(json_string_value(json_object_get(cl, "severity")), "error");
  ag_result(result, json_pack("{s:s, s:s, s:o, s:i}", "status", "ok", "verdict", errors ? "rejected" : "approved", "findings", fs,
                              "errors", errors));
  json_decref(all);
  json_decref(ops);
  json_decref(cfg);
  json_decref(task);
  mi_ckb_close(c);
  free(src);
  free(code);
  return 0;
}

AG_DEFINE("reviewer", "rules", "reviewer.rules", "spec review of an engine's source against the contracts", rules_run)
