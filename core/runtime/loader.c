/* Plugin loader and registry (API and search order in core/runtime/loader.h).
 *
 * Which files are loaded:
 *   - plugins.conf is opts->conf_path, else the first search directory that
 *     holds a file named plugins.conf. Its entries load first, in file
 *     order. Each entry's PATH is resolved through the search directories
 *     (first hit wins) unless it contains a '/': then it is taken relative
 *     to the conf file's directory (or as is, when absolute).
 *   - Then every libmi-*.so in the search directories that come BEFORE the
 *     one holding plugins.conf (all of them when there is no plugins.conf;
 *     none when conf_path was given) loads as optional, directory by
 *     directory, files in name order, skipping files already loaded. So
 *     `--plugin-dir DIR` with a vendor's plugin and no plugins.conf adds
 *     that plugin to the installed set, while directories of lower priority
 *     than the chosen plugins.conf only serve its lookups (an engine
 *     directory's plugins.conf gets exactly its plugins).
 *   - A plugin of the same kind and name as one already loaded is rejected
 *     as "shadowed by FILE" before its probe runs.
 *
 * Every step that touches a plugin is checked before the next one runs,
 * because a plugin is foreign code: readable regular file -> ELF -> dlopen
 * -> entry symbol -> descriptor header (ABI major, minor, size) -> the rest
 * of the descriptor -> plugins.conf agreement -> probe -> init -> get_iface.
 * The first failure becomes the plugin's one-line reason and is logged.
 *
 * Handles are kept open until mi_plugin_unload (even for rejected plugins),
 * because strings and code from the plugin (descriptor, iface, contexts) may
 * still be referenced; unload runs fini first, then dlclose.
 */
#define _GNU_SOURCE /* program_invocation_short_name */
#include "core/runtime/loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/runtime/compat.h"
#include "core/runtime/host.h"
#include "mi/kernel_pack.h"
#include "mi/model.h"
#include "mi/platform.h"

#define WHO "loader"
#define REASON_MAX 512

/* ABI 1.0 sizes: the struct up to and including its last 1.0 member. They stay
 * fixed when later minors append members (sizeof would not). Interface sizes
 * by minor come from core/runtime/compat.c (MI_PLATFORM_MEMBERS). */
#define END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))
#define DESC_SIZE_1_0 END_OF(mi_plugin_desc, get_iface)

/* A set of strings (open addressing, FNV-1a): the directory scan looks a
 * file up in constant time, so a folder of n files costs O(n log n) (the
 * sort), not O(n^2). */
typedef struct strset {
  char **slot;
  size_t cap, n; /* cap: a power of two, or 0 */
} strset;

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int strset_has(const strset *t, const char *s) {
  if (!t->cap) return 0;
  for (size_t i = str_hash(s) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!t->slot[i]) return 0;
    if (strcmp(t->slot[i], s) == 0) return 1;
  }
}

/* 0 (added or already there) or -1 (out of memory). */
static int strset_add(strset *t, const char *s) {
  if (strset_has(t, s)) return 0;
  if ((t->n + 1) * 2 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    for (size_t j = 0; j < t->cap; j++) {
      if (!t->slot[j]) continue;
      size_t i = str_hash(t->slot[j]) & (cap - 1);
      while (slot[i]) i = (i + 1) & (cap - 1);
      slot[i] = t->slot[j];
    }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
  }
  char *c = strdup(s);
  if (!c) return -1;
  size_t i = str_hash(s) & (t->cap - 1);
  while (t->slot[i]) i = (i + 1) & (t->cap - 1);
  t->slot[i] = c;
  t->n++;
  return 0;
}

static void strset_free(strset *t) {
  for (size_t i = 0; i < t->cap; i++) free(t->slot[i]);
  free(t->slot);
  t->slot = NULL;
  t->cap = t->n = 0;
}

/* mi_plugin plus what the loader keeps privately. `pub` must stay first: the
 * public pointer and the private one are the same address. */
typedef struct plugin_priv {
  mi_plugin pub;
  int kind;        /* from the descriptor once read, else from plugins.conf, else 0 */
  char *name;      /* copies: the descriptor may be too small to read safely */
  char *version;
  mi_kv *opt_items; /* merged options (owned copies), alive as long as the plugin */
  mi_options opts;
} plugin_priv;

struct mi_registry {
  plugin_priv **items;
  size_t count, cap;
  char *conf_path;     /* the plugins.conf used, or NULL */
  char *search;        /* search directories joined by ':' (for messages) */
  char **dirs;
  size_t n_dirs;
  mi_conf conf;
  strset paths;  /* every plugin's resolved path: a file is recorded once */
  strset loaded; /* "KIND NAME" of every loaded plugin: later ones are shadowed */
};

/* ---------- small helpers ---------- */

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

/* Plugin-supplied text goes into one-line messages: keep it on one line. */
static void one_line(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = ' ';
}

static void set_reason(plugin_priv *p, mi_plugin_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(plugin_priv *p, mi_plugin_status st, const char *fmt, ...) {
  char buf[REASON_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  one_line(buf);
  free(p->pub.reason);
  p->pub.reason = strdup(buf);
  p->pub.status = st;
}

static void log_outcome(const plugin_priv *p) {
  if (p->pub.status == MI_PLUGIN_LOADED) {
    mi_log(MI_LOG_DEBUG, WHO, "plugin %s: loaded %s '%s' %s (score %d)", p->pub.path,
           mi_plugin_kind_name(p->kind), p->name, p->version, p->pub.score);
    return;
  }
  /* An optional plugin that cannot run on this machine is expected (a GPU
   * plugin on a CPU host): say it at info level; failures are warnings. A
   * required one's failure is returned to the caller as the run's one fatal
   * line (file + reason), so logging it too would say it twice. */
  mi_log_level lvl = p->pub.required                          ? MI_LOG_INFO
                     : p->pub.status == MI_PLUGIN_UNSUITED ? MI_LOG_INFO
                                                              : MI_LOG_WARN;
  mi_log(lvl, WHO, "plugin %s: %s", p->pub.path,
         p->pub.reason ? p->pub.reason : "(no reason)");
}

/* Options given to probe/init: the conf entry's, then extra ones; an extra
 * key replaces a conf key of the same name. */
static int merge_opts(plugin_priv *p, const mi_options *a, const mi_kv *b, size_t nb) {
  size_t na = a ? a->count : 0;
  p->opt_items = calloc(na + nb + 1, sizeof *p->opt_items);
  if (!p->opt_items) return -1;
  size_t n = 0;
  for (size_t i = 0; i < na; i++) {
    int overridden = 0;
    for (size_t j = 0; j < nb; j++)
      if (b[j].key && a->items[i].key && strcmp(b[j].key, a->items[i].key) == 0) overridden = 1;
    if (overridden || !a->items[i].key) continue;
    p->opt_items[n].key = xstrdup(a->items[i].key);
    p->opt_items[n].value = xstrdup(a->items[i].value ? a->items[i].value : "");
    if (!p->opt_items[n].key || !p->opt_items[n].value) goto oom;
    n++;
  }
  for (size_t j = 0; j < nb; j++) {
    if (!b[j].key) continue;
    p->opt_items[n].key = xstrdup(b[j].key);
    p->opt_items[n].value = xstrdup(b[j].value ? b[j].value : "");
    if (!p->opt_items[n].key || !p->opt_items[n].value) goto oom;
    n++;
  }
  p->opts.items = p->opt_items;
  p->opts.count = n;
  return 0;
oom:
  p->opts.count = n + 1; /* free what was set */
  return -1;
}

/* The smallest interface a plugin of this kind and ABI minor may return. */
static size_t iface_min_size(int kind, unsigned minor) {
  switch (kind) {
  case MI_PLUGIN_PLATFORM: return mi_platform_iface_min_size(minor);
  case MI_PLUGIN_MODEL:
  case MI_PLUGIN_ENGINE: /* mi/engine.h: starts with a model iface */
    return mi_model_iface_min_size(minor);
  case MI_PLUGIN_KERNELS: /* mi/kernel_pack.h: its whole 1.6 struct */
    return sizeof(mi_kernel_pack_iface);
  default: return sizeof(uint32_t); /* agent: struct_size, then mi/agent.h */
  }
}

/* ---------- deadlines and exit() from plugin code ---------- */

/* Plugin code runs on the caller's thread (a GPU runtime or MPI may insist
 * on it); a watchdog thread waits for it to return. A hung call cannot be
 * cancelled or unloaded safely, so past the deadline the watchdog prints one
 * line and ends the process with _exit(1). */
#define PROBE_TIMEOUT_S 10.0 /* dlopen (constructors), the descriptor, probe */
#define INIT_TIMEOUT_S 60.0  /* init: may open a device or join an MPI group */
#define TIMEOUT_MAX_S 86400.0

typedef struct watchdog {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  double limit;
  char msg[PATH_MAX + 256];
} watchdog;

/* MI_PLUGIN_TIMEOUT=SECONDS replaces both limits; 0 turns them off. */
static double plugin_timeout(double dflt) {
  const char *e = getenv("MI_PLUGIN_TIMEOUT");
  if (!e || !e[0]) return dflt;
  char *end;
  errno = 0;
  double v = strtod(e, &end);
  if (errno || *end || !(v >= 0 && v <= TIMEOUT_MAX_S)) {
    static int warned;
    if (!warned++)
      mi_log(MI_LOG_WARN, WHO, "MI_PLUGIN_TIMEOUT='%.32s' is not a number of seconds in [0, %g]; "
             "using the defaults", e, TIMEOUT_MAX_S);
    return dflt;
  }
  return v;
}

static void *watchdog_main(void *arg) {
  watchdog *w = arg;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double whole = (double)(long long)w->limit;
  ts.tv_sec += (time_t)whole;
  ts.tv_nsec += (long)((w->limit - whole) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&w->mu);
  while (!w->done) {
    if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT && !w->done) {
      ssize_t unused = write(STDERR_FILENO, w->msg, strlen(w->msg));
      (void)unused;
      _exit(1);
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Starts a watchdog for `what` (e.g. "init") of the plugin at `path`;
 * returns 1 when one runs (watch_end must follow), 0 when not (limit 0, or
 * no thread could be made: the call then runs unguarded). */
static int watch_begin(watchdog *w, pthread_t *th, const char *path, const char *what,
                       double dflt) {
  double limit = plugin_timeout(dflt);
  if (limit <= 0) return 0;
  w->done = 0;
  w->limit = limit;
  snprintf(w->msg, sizeof w->msg,
           "%s: plugin %s: %s did not return within %g s (MI_PLUGIN_TIMEOUT=SECONDS changes the "
           "limit); stopping, since a hung plugin cannot be unloaded",
           program_invocation_short_name, path, what, limit);
  one_line(w->msg);
  strcat(w->msg, "\n");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(th, NULL, watchdog_main, w) != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    mi_log(MI_LOG_DEBUG, WHO, "no watchdog thread for %s of %s: running it unguarded", what, path);
    return 0;
  }
  return 1;
}

static void watch_end(watchdog *w, pthread_t th) {
  pthread_mutex_lock(&w->mu);
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(th, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
}

/* exit() from plugin code (a constructor, probe, init...) would end the run
 * with the plugin's status (often 0) and no output. A program arms the guard
 * for its whole run; an exit() while armed prints one line naming the plugin
 * being loaded (or the last one loaded) and makes the status 1. _exit() and
 * signals cannot be caught this way. */
static char g_loading[PATH_MAX];     /* the plugin being loaded, or "" */
static char g_last_loaded[PATH_MAX]; /* the last plugin whose loading finished */
static const char *g_guard_prog;     /* armed when non-NULL */

static void exit_guard(void) {
  if (!g_guard_prog) return;
  if (g_loading[0])
    fprintf(stderr, "%s: a plugin called exit() during loading (last plugin being loaded: %s)\n",
            g_guard_prog, g_loading);
  else
    fprintf(stderr, "%s: exit() was called before the run finished, from plugin code (last "
            "plugin loaded: %s)\n", g_guard_prog, g_last_loaded[0] ? g_last_loaded : "none");
  fflush(stderr);
  _exit(1);
}

void mi_exit_guard_arm(const char *prog) {
  static int registered;
  if (!registered) registered = atexit(exit_guard) == 0;
  g_guard_prog = prog ? prog : "mi";
}

void mi_exit_guard_disarm(void) { g_guard_prog = NULL; }

static void loading_begin(const char *path) { snprintf(g_loading, sizeof g_loading, "%s", path); }

static void loading_end(void) {
  if (g_loading[0]) snprintf(g_last_loaded, sizeof g_last_loaded, "%s", g_loading);
  g_loading[0] = '\0';
}

/* ---------- loading one file ---------- */

static plugin_priv *plugin_new(const char *path, const char *origin) {
  plugin_priv *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  char real[PATH_MAX];
  p->pub.path = strdup(realpath(path, real) ? real : path);
  p->pub.origin = strdup(origin ? origin : "direct");
  p->pub.score = -1;
  p->pub.status = MI_PLUGIN_REJECTED;
  if (!p->pub.path || !p->pub.origin) {
    free(p->pub.path);
    free(p->pub.origin);
    free(p);
    return NULL;
  }
  return p;
}

static int looks_like_elf(const char *path) {
  unsigned char m[4] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(m, 1, 4, f);
  fclose(f);
  return n == 4 && m[0] == 0x7f && m[1] == 'E' && m[2] == 'L' && m[3] == 'F';
}

/* The machine this core runs on: a plugin for another one cannot load. */
#if defined(__x86_64__)
#define HOST_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_ELF_MACHINE EM_AARCH64
#endif

/* Is [off, off + count * entsize) inside a file of `size` bytes? Overflow-safe. */
static int range_in_file(uint64_t off, uint64_t count, uint64_t entsize, uint64_t size) {
  if (off > size) return 0;
  if (entsize && count > (size - off) / entsize) return 0;
  return 1;
}

/* Checks the ELF headers before dlopen: glibc maps PT_LOAD segments as the
 * program headers say, and touching a page past the end of a truncated file
 * is SIGBUS inside dlopen. Returns 0 when the file is fit for dlopen (or is
 * not ELF at all: dlopen then says "invalid ELF header"), -1 with a reason.
 * (A file rewritten between this check and dlopen is not covered.) */
static int check_elf(const char *path, char *why, size_t why_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, why_len, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat st;
  int rc = -1;
  Elf64_Phdr *ph = NULL;
  if (fstat(fd, &st) != 0) {
    snprintf(why, why_len, "cannot stat: %s", strerror(errno));
    goto out;
  }
  uint64_t size = (uint64_t)st.st_size;
  unsigned char ident[EI_NIDENT] = {0};
  ssize_t got = pread(fd, ident, sizeof ident, 0);
  if (got < 4 || memcmp(ident, ELFMAG, SELFMAG) != 0) {
    rc = 0; /* not ELF: left to dlopen's own message */
    goto out;
  }
  Elf64_Ehdr eh;
  if (size < sizeof eh || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) {
    snprintf(why, why_len, "ELF file of %llu bytes is shorter than an ELF header (%zu bytes)",
             (unsigned long long)size, sizeof eh);
    goto out;
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    snprintf(why, why_len, "ELF class %u data %u: not a 64-bit little-endian file",
             eh.e_ident[EI_CLASS], eh.e_ident[EI_DATA]);
    goto out;
  }
#ifdef HOST_ELF_MACHINE
  if (eh.e_machine != HOST_ELF_MACHINE) {
    snprintf(why, why_len, "ELF machine %u, this host is %u", eh.e_machine, HOST_ELF_MACHINE);
    goto out;
  }
#endif
  if (eh.e_type != ET_DYN) {
    snprintf(why, why_len, "ELF type %u is not a shared object (ET_DYN)", eh.e_type);
    goto out;
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM) {
    snprintf(why, why_len, "ELF program header table of %u entries of %u bytes is not valid",
             eh.e_phnum, eh.e_phentsize);
    goto out;
  }
  if (!range_in_file(eh.e_phoff, eh.e_phnum, sizeof(Elf64_Phdr), size)) {
    snprintf(why, why_len,
             "ELF program header table (offset %llu, %u entries) lies outside the file (%llu bytes)",
             (unsigned long long)eh.e_phoff, eh.e_phnum, (unsigned long long)size);
    goto out;
  }
  size_t phbytes = (size_t)eh.e_phnum * sizeof *ph;
  if (!(ph = malloc(phbytes))) {
    snprintf(why, why_len, "out of memory");
    goto out;
  }
  if (pread(fd, ph, phbytes, (off_t)eh.e_phoff) != (ssize_t)phbytes) {
    snprintf(why, why_len, "cannot read the ELF program headers");
    goto out;
  }
  int n_load = 0, n_dyn = 0;
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    if (ph[i].p_type != PT_LOAD && ph[i].p_type != PT_DYNAMIC) continue;
    const char *what = ph[i].p_type == PT_LOAD ? "PT_LOAD" : "PT_DYNAMIC";
    if (ph[i].p_type == PT_LOAD) n_load++;
    else n_dyn++;
    if (!range_in_file(ph[i].p_offset, ph[i].p_filesz, 1, size)) {
      snprintf(why, why_len,
               "ELF %s segment %u (file bytes %llu + %llu) lies outside the file (%llu bytes): "
               "truncated?",
               what, i, (unsigned long long)ph[i].p_offset, (unsigned long long)ph[i].p_filesz,
               (unsigned long long)size);
      goto out;
    }
  }
  if (eh.e_shoff != 0 || eh.e_shnum != 0) {
    /* e_shnum 0 with a table: the count is in section 0 (at least one entry) */
    uint64_t n = eh.e_shnum ? eh.e_shnum : 1;
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !range_in_file(eh.e_shoff, n, sizeof(Elf64_Shdr), size)) {
      snprintf(why, why_len,
               "ELF section header table (offset %llu, %u entries of %u bytes) lies outside the "
               "file (%llu bytes)",
               (unsigned long long)eh.e_shoff, eh.e_shnum, eh.e_shentsize, (unsigned long long)size);
      goto out;
    }
  }
  if (!n_load || !n_dyn) {
    snprintf(why, why_len, "ELF file has no %s segment", !n_load ? "PT_LOAD" : "PT_DYNAMIC");
    goto out;
  }
  rc = 0;
out:
  free(ph);
  close(fd);
  return rc;
}

/* Reads and checks the descriptor; returns it, or NULL with a reason set.
 * The order matters: nothing past the 12-byte header is read before
 * struct_size is known to cover it. */
static const mi_plugin_desc *read_descriptor(plugin_priv *p, const mi_conf_entry *ce) {
  dlerror();
  void *sym = dlsym(p->pub.dl, MI_PLUGIN_ENTRY_SYMBOL);
  if (!sym) {
    set_reason(p, MI_PLUGIN_REJECTED, "no descriptor: symbol %s not exported",
               MI_PLUGIN_ENTRY_SYMBOL);
    return NULL;
  }
  mi_plugin_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry); /* object pointer -> function pointer, POSIX-style */
  const mi_plugin_desc *d = entry();
  if (!d) {
    set_reason(p, MI_PLUGIN_REJECTED, "no descriptor: %s() returned NULL",
               MI_PLUGIN_ENTRY_SYMBOL);
    return NULL;
  }
  if (d->abi_major != MI_ABI_MAJOR) {
    set_reason(p, MI_PLUGIN_REJECTED, "ABI major %u, this core speaks %d", d->abi_major,
               MI_ABI_MAJOR);
    return NULL;
  }
  if (d->abi_minor > MI_ABI_MINOR) {
    set_reason(p, MI_PLUGIN_REJECTED, "built for ABI %u.%u, this core is %d.%d: upgrade MetaInfer",
               d->abi_major, d->abi_minor, MI_ABI_MAJOR, MI_ABI_MINOR);
    return NULL;
  }
  if (d->struct_size < DESC_SIZE_1_0) {
    set_reason(p, MI_PLUGIN_REJECTED,
               "descriptor struct_size %u is smaller than the ABI %d.0 descriptor (%zu bytes)",
               d->struct_size, MI_ABI_MAJOR, (size_t)DESC_SIZE_1_0);
    return NULL;
  }
  if (d->kind < MI_PLUGIN_PLATFORM || d->kind > MI_PLUGIN_KERNELS) {
    set_reason(p, MI_PLUGIN_REJECTED, "descriptor kind %u is not a known plugin kind", d->kind);
    return NULL;
  }
  if (d->kind == MI_PLUGIN_KERNELS && d->abi_minor < 6) {
    set_reason(p, MI_PLUGIN_REJECTED, "a kernel pack declares ABI %u.%u; packs exist from ABI 1.6",
               d->abi_major, d->abi_minor);
    return NULL;
  }
  p->kind = (int)d->kind;
  /* copies for the listing, taken as soon as they are safe to read */
  if (d->name && d->name[0]) {
    free(p->name);
    p->name = strndup(d->name, 64);
  }
  if (d->version) {
    free(p->version);
    p->version = strndup(d->version, 64);
  }
  if ((d->name && d->name[0] && !p->name) || (d->version && !p->version)) {
    set_reason(p, MI_PLUGIN_REJECTED, "out of memory");
    return NULL;
  }
  if (p->name) one_line(p->name);
  if (p->version) one_line(p->version);
  static const char *const members[] = {"name", "version", "init", "get_iface"};
  const int missing[] = {!d->name || !d->name[0], !d->version, !d->init, !d->get_iface};
  for (int i = 0; i < 4; i++) {
    if (missing[i]) {
      set_reason(p, MI_PLUGIN_REJECTED, "descriptor member %s is %s", members[i],
                 i == 0 && d->name ? "empty" : "NULL");
      return NULL;
    }
  }
  if (ce && (ce->kind != (int)d->kind || strcmp(ce->name, d->name) != 0)) {
    set_reason(p, MI_PLUGIN_REJECTED, "plugins.conf says %s '%s', file is %s '%s'",
               mi_plugin_kind_name(ce->kind), ce->name, mi_plugin_kind_name((int)d->kind),
               p->name);
    return NULL;
  }
  return d;
}

/* The `loaded` set's key for a plugin: "KIND NAME" (names are <= 64 bytes). */
static const char *loaded_key(int kind, const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%d %s", kind, name ? name : "");
  return buf;
}

/* Runs every step on one file. `already` (may be NULL) is checked for a
 * loaded plugin of the same kind and name, which shadows this one. */
static plugin_priv *load_one(const char *path, const char *origin, const mi_conf_entry *ce,
                             const mi_options *base_opts, const mi_kv *extra, size_t n_extra,
                             const mi_registry *already) {
  plugin_priv *p = plugin_new(path, origin);
  if (!p) return NULL;
  if (ce) {
    p->kind = ce->kind;
    p->pub.required = ce->required;
    p->pub.conf = (mi_conf_entry *)ce;
    p->name = xstrdup(ce->name);
  }
  if (merge_opts(p, ce ? &ce->opts : base_opts, extra, n_extra) != 0) {
    set_reason(p, MI_PLUGIN_REJECTED, "out of memory");
    goto done;
  }

  struct stat st;
  if (stat(path, &st) != 0) {
    set_reason(p, MI_PLUGIN_REJECTED, "cannot open: %s", strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    set_reason(p, MI_PLUGIN_REJECTED, "not a regular file");
    goto done;
  }
  if (access(path, R_OK) != 0) {
    set_reason(p, MI_PLUGIN_REJECTED, "cannot read: %s", strerror(errno));
    goto done;
  }
  {
    char why[REASON_MAX];
    if (check_elf(path, why, sizeof why) != 0) {
      set_reason(p, MI_PLUGIN_REJECTED, "%s", why);
      goto done;
    }
  }
  /* dlopen needs a '/' to take the name as a path rather than search for it */
  const char *open_path = p->pub.path;
  char dotpath[PATH_MAX];
  if (!strchr(open_path, '/')) {
    snprintf(dotpath, sizeof dotpath, "./%s", open_path);
    open_path = dotpath;
  }
  loading_begin(p->pub.path);
  watchdog w;
  pthread_t wt;
  int watched = watch_begin(&w, &wt, p->pub.path, "loading (dlopen and its constructors)",
                            PROBE_TIMEOUT_S);
  dlerror();
  p->pub.dl = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
  if (watched) watch_end(&w, wt);
  if (!p->pub.dl) {
    const char *e = dlerror();
    if (!e) e = "unknown error";
    /* glibc says "PATH: problem"; the log line already names the file */
    size_t pl = strlen(open_path);
    if (strncmp(e, open_path, pl) == 0 && e[pl] == ':' && e[pl + 1] == ' ') e += pl + 2;
    set_reason(p, MI_PLUGIN_REJECTED, "%sdlopen failed: %s",
               looks_like_elf(path) ? "" : "not an ELF file: ", e);
    goto done;
  }

  char key[96];
  watched = watch_begin(&w, &wt, p->pub.path, MI_PLUGIN_ENTRY_SYMBOL "()", PROBE_TIMEOUT_S);
  const mi_plugin_desc *d = read_descriptor(p, ce);
  if (watched) watch_end(&w, wt);
  if (!d) goto done;
  p->pub.desc = d; /* checked: safe to read from here on */

  if (already && strset_has(&already->loaded, loaded_key(p->kind, p->name, key, sizeof key))) {
    /* Checked before probe/init so a shadowed GPU plugin never touches the
     * device. (The set says that one exists; finding which is one pass.) */
    for (size_t i = 0; i < already->count; i++) {
      const plugin_priv *q = already->items[i];
      if (q->pub.status == MI_PLUGIN_LOADED && q->kind == p->kind && strcmp(q->name, p->name) == 0) {
        set_reason(p, MI_PLUGIN_REJECTED, "shadowed by %s", q->pub.path);
        goto done;
      }
    }
  }

  const mi_host_api *host = mi_host_api_get();
  char msg[REASON_MAX];
  if (d->probe) {
    msg[0] = '\0';
    watched = watch_begin(&w, &wt, p->pub.path, "probe", PROBE_TIMEOUT_S);
    int score = d->probe(host, &p->opts, msg, sizeof msg);
    if (watched) watch_end(&w, wt);
    msg[sizeof msg - 1] = '\0';
    p->pub.score = score < 0 ? 0 : score > 100 ? 100 : score;
    if (p->pub.score == 0) {
      set_reason(p, MI_PLUGIN_UNSUITED, "probe scored 0: %s",
                 msg[0] ? msg : "(the plugin gave no reason)");
      goto done;
    }
  } else {
    p->pub.score = 1; /* documented default: always runs, score 1 */
  }

  msg[0] = '\0';
  void *ctx = NULL;
  watched = watch_begin(&w, &wt, p->pub.path, "init", INIT_TIMEOUT_S);
  int init_rc = d->init(host, &p->opts, &ctx, msg, sizeof msg);
  if (watched) watch_end(&w, wt);
  if (init_rc != 0) {
    msg[sizeof msg - 1] = '\0';
    set_reason(p, MI_PLUGIN_REJECTED, "init failed: %s",
               msg[0] ? msg : "(the plugin gave no message)");
    goto done;
  }
  p->pub.ctx = ctx; /* fini is now owed: on failure below, or in mi_plugin_unload */
  watched = watch_begin(&w, &wt, p->pub.path, "get_iface", PROBE_TIMEOUT_S);
  const void *iface = d->get_iface(ctx);
  if (watched) watch_end(&w, wt);
  if (!iface) {
    set_reason(p, MI_PLUGIN_REJECTED, "get_iface returned NULL");
    goto done;
  }
  uint32_t isize;
  memcpy(&isize, iface, sizeof isize);
  size_t need = iface_min_size(p->kind, d->abi_minor);
  if (isize < need) {
    set_reason(p, MI_PLUGIN_REJECTED,
               "%s interface struct_size %u is smaller than the ABI %d.%u interface (%zu bytes)",
               mi_plugin_kind_name(p->kind), isize, MI_ABI_MAJOR, d->abi_minor, need);
    goto done;
  }
  if ((p->kind == MI_PLUGIN_MODEL || p->kind == MI_PLUGIN_ENGINE) &&
      mi_model_needs_valid(d, iface, msg, sizeof msg) != 0) {
    set_reason(p, MI_PLUGIN_REJECTED, "%s", msg);
    goto done;
  }
  p->pub.iface = iface;
  p->pub.status = MI_PLUGIN_LOADED;
  free(p->pub.reason);
  p->pub.reason = NULL;

done:
  if (p->pub.status != MI_PLUGIN_LOADED && p->pub.ctx) {
    /* init succeeded but a later check failed: undo init now */
    if (p->pub.desc->fini) p->pub.desc->fini(p->pub.ctx);
    p->pub.ctx = NULL;
  }
  loading_end();
  if (p->pub.status != MI_PLUGIN_LOADED && !p->pub.reason)
    set_reason(p, MI_PLUGIN_REJECTED, "out of memory");
  log_outcome(p);
  return p;
}

mi_plugin *mi_plugin_load_file(const char *path, const mi_options *opts) {
  if (!path) return NULL;
  plugin_priv *p = load_one(path, "direct", NULL, opts, NULL, 0, NULL);
  return p ? &p->pub : NULL;
}

void mi_plugin_unload(mi_plugin *pub) {
  if (!pub) return;
  plugin_priv *p = (plugin_priv *)pub;
  if (pub->ctx && pub->desc && pub->desc->fini) pub->desc->fini(pub->ctx);
  if (pub->dl) dlclose(pub->dl);
  free(pub->path);
  free(pub->origin);
  free(pub->reason);
  free(p->name);
  free(p->version);
  for (size_t i = 0; p->opt_items && i < p->opts.count; i++) {
    free((void *)p->opt_items[i].key);
    free((void *)p->opt_items[i].value);
  }
  free(p->opt_items);
  free(p);
}

/* ---------- the registry ---------- */

static int reg_push(mi_registry *r, plugin_priv *p) {
  char key[96];
  if (strset_add(&r->paths, p->pub.path) != 0) return -1;
  if (p->pub.status == MI_PLUGIN_LOADED &&
      strset_add(&r->loaded, loaded_key(p->kind, p->name, key, sizeof key)) != 0)
    return -1;
  if (r->count == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 16;
    plugin_priv **items = realloc(r->items, cap * sizeof *items);
    if (!items) return -1;
    r->items = items;
    r->cap = cap;
  }
  r->items[r->count++] = p;
  return 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Adds a search directory (canonical when it exists), skipping repeats. */
static int add_dir(mi_registry *r, const char *dir) {
  if (!dir || !dir[0]) return 0;
  char real[PATH_MAX];
  const char *d = realpath(dir, real) ? real : dir;
  for (size_t i = 0; i < r->n_dirs; i++)
    if (strcmp(r->dirs[i], d) == 0) return 0;
  char **dirs = realloc(r->dirs, (r->n_dirs + 1) * sizeof *dirs);
  if (!dirs) return -1;
  r->dirs = dirs;
  if (!(r->dirs[r->n_dirs] = strdup(d))) return -1;
  r->n_dirs++;
  return 0;
}

static int build_search_path(mi_registry *r, const mi_loader_opts *o) {
  if (add_dir(r, o->plugin_dir) != 0) return -1;
  const char *env = getenv("MI_PLUGIN_PATH");
  if (env) {
    char *copy = strdup(env), *save = NULL;
    if (!copy) return -1;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
      if (add_dir(r, d) != 0) {
        free(copy);
        return -1;
      }
    free(copy);
  }
  char exe[PATH_MAX];
  const char *e = o->exe_path;
  if (!e) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = '\0';
      e = exe;
    }
  } else if (realpath(e, exe)) {
    e = exe;
  }
  if (e && strchr(e, '/')) {
    char dir[PATH_MAX], lib[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s", e);
    *strrchr(dir, '/') = '\0';
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
    snprintf(lib, sizeof lib, "%s/../lib/metainfer", dir);
    if (add_dir(r, lib) != 0 || add_dir(r, dir) != 0) return -1;
  }
  size_t len = 1;
  for (size_t i = 0; i < r->n_dirs; i++) len += strlen(r->dirs[i]) + 1;
  if (!(r->search = malloc(len))) return -1;
  r->search[0] = '\0';
  for (size_t i = 0; i < r->n_dirs; i++) {
    if (i) strcat(r->search, ":");
    strcat(r->search, r->dirs[i]);
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads every libmi-*.so of one directory, in name order, as optional. */
static int scan_dir(mi_registry *r, const char *dir, const mi_loader_opts *o) {
  DIR *dp = opendir(dir);
  if (!dp) return 0; /* a search directory that does not exist is not an error */
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (struct dirent *de; (de = readdir(dp));) {
    size_t l = strlen(de->d_name);
    if (l < 9 || strncmp(de->d_name, "libmi-", 6) != 0 || strcmp(de->d_name + l - 3, ".so") != 0)
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) {
        rc = -1;
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(de->d_name))) {
      rc = -1;
      break;
    }
    n++;
  }
  closedir(dp);
  if (n) qsort(names, n, sizeof *names, cmp_str);
  char origin[PATH_MAX + 16];
  snprintf(origin, sizeof origin, "scan of %s", dir);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    char path[PATH_MAX], real[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    /* already loaded through plugins.conf: one file, one record */
    if (realpath(path, real) && strset_has(&r->paths, real)) continue;
    plugin_priv *p = load_one(path, origin, NULL, NULL, o->extra_opts, o->n_extra_opts, r);
    if (!p || reg_push(r, p) != 0) {
      if (p) mi_plugin_unload(&p->pub);
      rc = -1;
    }
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

/* Where a plugins.conf PATH points: relative to the conf's directory when it
 * contains '/', else the first search directory holding it. */
static void resolve_entry(const mi_registry *r, const mi_conf_entry *e, char *out, size_t n) {
  if (e->path[0] == '/') {
    snprintf(out, n, "%s", e->path);
    return;
  }
  if (strchr(e->path, '/')) {
    const char *slash = strrchr(r->conf_path, '/');
    int dl = slash ? (int)(slash - r->conf_path) : 1;
    snprintf(out, n, "%.*s/%s", dl, slash ? r->conf_path : ".", e->path);
    return;
  }
  for (size_t i = 0; i < r->n_dirs; i++) {
    snprintf(out, n, "%s/%s", r->dirs[i], e->path);
    if (access(out, F_OK) == 0) return;
  }
  out[0] = '\0';
}

static int load_from_conf(mi_registry *r, const mi_loader_opts *o) {
  for (size_t i = 0; i < r->conf.count; i++) {
    const mi_conf_entry *e = &r->conf.entries[i];
    char path[PATH_MAX + 256], origin[PATH_MAX + 32];
    snprintf(origin, sizeof origin, "%s:%d", r->conf_path, e->line);
    resolve_entry(r, e, path, sizeof path);
    plugin_priv *p;
    if (path[0]) {
      p = load_one(path, origin, e, NULL, o->extra_opts, o->n_extra_opts, r);
    } else {
      /* not found: record it under its conf name so the listing shows it */
      p = plugin_new(e->path, origin);
      if (p) {
        p->kind = e->kind;
        p->name = xstrdup(e->name);
        p->pub.required = e->required;
        p->pub.conf = (mi_conf_entry *)e;
        set_reason(p, MI_PLUGIN_REJECTED, "not found in the search path (%s)",
                   r->search[0] ? r->search : "empty");
        log_outcome(p);
      }
    }
    if (!p || reg_push(r, p) != 0) {
      if (p) mi_plugin_unload(&p->pub);
      return -1;
    }
  }
  return 0;
}

mi_registry *mi_registry_load(const mi_loader_opts *opts, int *fatal, char *err, size_t err_len) {
  static const mi_loader_opts none = {0};
  const mi_loader_opts *o = opts ? opts : &none;
  int dummy;
  if (!fatal) fatal = &dummy;
  *fatal = 0;
  if (err && err_len) err[0] = '\0';
  mi_registry *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  if (build_search_path(r, o) != 0) goto oom;

  char path[PATH_MAX + 32];
  size_t scan_upto = 0; /* directories [0, scan_upto) are scanned */
  if (o->conf_path) {
    snprintf(path, sizeof path, "%s", o->conf_path);
  } else {
    path[0] = '\0';
    for (scan_upto = 0; scan_upto < r->n_dirs; scan_upto++) {
      snprintf(path, sizeof path, "%s/plugins.conf", r->dirs[scan_upto]);
      if (is_file(path)) break;
      path[0] = '\0';
    }
  }
  if (path[0]) {
    char real[PATH_MAX];
    if (!(r->conf_path = strdup(realpath(path, real) ? real : path))) goto oom;
    char cerr[1024];
    if (mi_conf_parse_file(path, &r->conf, cerr, sizeof cerr) != 0) {
      *fatal = 1;
      if (err && err_len) /* the caller reports it */
        snprintf(err, err_len, "%s", cerr);
      else
        mi_log(MI_LOG_ERROR, WHO, "%s", cerr);
      return r;
    }
    if (load_from_conf(r, o) != 0) goto oom;
  }
  for (size_t i = 0; i < scan_upto; i++)
    if (is_dir(r->dirs[i]) && scan_dir(r, r->dirs[i], o) != 0) goto oom;

  for (size_t i = 0; i < r->count; i++) {
    const plugin_priv *p = r->items[i];
    if (!p->pub.required || p->pub.status == MI_PLUGIN_LOADED) continue;
    /* named as plugins.conf names it: that is what the user asked for */
    const mi_conf_entry *e = p->pub.conf;
    if (!*fatal && err && err_len)
      snprintf(err, err_len, "%s: required %s plugin '%s' not usable: %s", p->pub.path,
               mi_plugin_kind_name(e ? e->kind : p->kind), e ? e->name : p->name,
               p->pub.reason);
    *fatal = 1;
  }
  return r;
oom:
  mi_registry_free(r);
  return NULL;
}

size_t mi_registry_count(const mi_registry *r) { return r ? r->count : 0; }

mi_plugin *mi_registry_at(const mi_registry *r, size_t i) {
  return r && i < r->count ? &r->items[i]->pub : NULL;
}

mi_plugin *mi_registry_best(const mi_registry *r, mi_plugin_kind kind, const char *name) {
  plugin_priv *best = NULL;
  for (size_t i = 0; r && i < r->count; i++) {
    plugin_priv *p = r->items[i];
    if (p->pub.status != MI_PLUGIN_LOADED || p->kind != (int)kind) continue;
    if (name && strcmp(p->name, name) != 0) continue;
    if (!best || p->pub.score > best->pub.score) best = p; /* ties: the first wins */
  }
  return best ? &best->pub : NULL;
}

const char *mi_registry_conf_path(const mi_registry *r) { return r ? r->conf_path : NULL; }

const char *mi_registry_search_path(const mi_registry *r) { return r ? r->search : NULL; }

const char *mi_plugin_name(const mi_plugin *p) {
  return p && ((const plugin_priv *)p)->name ? ((const plugin_priv *)p)->name : "?";
}

const char *mi_plugin_version(const mi_plugin *p) {
  return p && ((const plugin_priv *)p)->version ? ((const plugin_priv *)p)->version : "?";
}

int mi_plugin_kind_of(const mi_plugin *p) { return p ? ((const plugin_priv *)p)->kind : 0; }

static const char *status_name(mi_plugin_status s) {
  switch (s) {
  case MI_PLUGIN_LOADED: return "loaded";
  case MI_PLUGIN_UNSUITED: return "unsuited";
  default: return "rejected";
  }
}

/* Under a loaded platform: which loaded model plugins it can serve (from
 * their platform_needs), e.g. "serves: M" / "cannot serve: M: lacks rope". */
static void print_serves(const mi_registry *r, const mi_plugin *platform, FILE *out) {
  char yes[1024] = "", no[1024] = "", one[512];
  for (size_t i = 0; i < r->count; i++) {
    const plugin_priv *m = r->items[i];
    if (m->pub.status != MI_PLUGIN_LOADED || (m->kind != MI_PLUGIN_MODEL && m->kind != MI_PLUGIN_ENGINE))
      continue;
    char *list = mi_compat_describe(platform, &m->pub, one, sizeof one) == 0 ? yes : no;
    size_t l = strlen(list);
    snprintf(list + l, sizeof yes - l, "%s%s", l ? "; " : "", one);
  }
  if (yes[0]) fprintf(out, "          serves: %s\n", yes);
  if (no[0]) fprintf(out, "          cannot serve: %s\n", no);
}

void mi_registry_print(const mi_registry *r, FILE *out) {
  if (!r || !out) return;
  fprintf(out, "plugins.conf: %s; search path: %s\n",
          r->conf_path ? r->conf_path : "none (scanned libmi-*.so)",
          r->search && r->search[0] ? r->search : "(empty)");
  fprintf(out, "%-9s %-16s %-10s %5s  %-9s %s  %s\n", "KIND", "NAME", "VERSION", "SCORE",
          "STATUS", "PATH", "ORIGIN");
  for (size_t i = 0; i < r->count; i++) {
    const plugin_priv *p = r->items[i];
    char score[16];
    if (p->pub.score < 0) snprintf(score, sizeof score, "-");
    else snprintf(score, sizeof score, "%d", p->pub.score);
    fprintf(out, "%-9s %-16s %-10s %5s  %-9s %s  %s\n",
            p->kind ? mi_plugin_kind_name(p->kind) : "-", p->name ? p->name : "-",
            p->version ? p->version : "-", score, status_name(p->pub.status), p->pub.path,
            p->pub.origin);
    if (p->pub.status != MI_PLUGIN_LOADED)
      fprintf(out, "          reason: %s\n", p->pub.reason ? p->pub.reason : "(none)");
    if (p->pub.status == MI_PLUGIN_LOADED && p->kind == MI_PLUGIN_PLATFORM)
      print_serves(r, &p->pub, out);
  }
}

void mi_registry_free(mi_registry *r) {
  if (!r) return;
  for (size_t i = r->count; i-- > 0;) mi_plugin_unload(&r->items[i]->pub);
  free(r->items);
  for (size_t i = 0; i < r->n_dirs; i++) free(r->dirs[i]);
  free(r->dirs);
  free(r->search);
  free(r->conf_path);
  mi_conf_free(&r->conf);
  strset_free(&r->paths);
  strset_free(&r->loaded);
  free(r);
}
