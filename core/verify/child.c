/* Isolation for verification units: every unit runs in a forked child that
 * the verifier contains and then removes entirely, whatever the plugin in it
 * does. The layers (each tried once, by a probe child, and named in the
 * report's "containment"; a layer that is unavailable is skipped, one that
 * was available and then fails to set up fails the unit):
 *
 *   session     the child calls setsid(): its own process group, killed
 *               whole (kill(-pgid, SIGKILL)) at the unit's end
 *   subreaper   the verifier is PR_SET_CHILD_SUBREAPER, so a daemon that
 *               double-forks and setsid()s is re-parented to it, found by
 *               /proc (ppid, start time) and killed
 *   cgroup      a cgroup v2 per unit (cgroup.kill at the end; memory.max
 *               when the v2 hierarchy offers the memory controller)
 *   memcg       a memory cap that counts memfd/tmpfs pages: cgroup v2
 *               memory.max, else a cgroup v1 memory cgroup
 *               (memory.limit_in_bytes, memsw likewise). Without it only
 *               RLIMIT_AS (mappings) and RLIMIT_FSIZE (each file, memfds
 *               included) bound memory: N memfds of FSIZE each is the gap.
 *   mntns       a private mount namespace: the whole tree read-only
 *               (mount_setattr AT_RECURSIVE), a private size-capped tmpfs
 *               as the unit's folder (cwd and $TMPDIR), another on
 *               /dev/shm, and the verifier's scratch folder writable (the
 *               stages' model copies live there)
 *   caps        every capability dropped (bounding set too) and
 *               no_new_privs, so a root child cannot undo the mounts,
 *               leave its cgroup, raise a limit or ptrace the verifier
 *
 * Processes left running when the unit's main process ends make the unit
 * fail ("left N processes running"); so do a flood of the result pipe (it
 * is read up to a cap the caller sets, then the unit is killed) and the
 * memory cap's OOM kill. stdout/stderr are kept as raw evidence (the tail,
 * bounded). Whatever the child does, the parent returns. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util/spawn.h"
#include "core/verify/verify.h"

#if defined(__SANITIZE_ADDRESS__)
#define VF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VF_ASAN 1
#endif
#endif

#define OUTPUT_CAP (256 * 1024)         /* raw output kept: the tail, when longer */
#define RESULT_CAP_DEFAULT (4u << 20)   /* JSON event lines of stages 3-6 */
#define VF_EXIT_CONTAIN 121             /* the child could not set up its containment */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int truncated;
} sbuf;

static int sbuf_add(sbuf *b, const char *s, size_t n, size_t limit) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
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
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---------- small file helpers ---------- */

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  errno = e;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

static size_t read_file(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t r = read(fd, buf, n - 1);
  close(fd);
  buf[r > 0 ? r : 0] = 0;
  return r > 0 ? (size_t)r : 0;
}

/* "key N" in a flat keyed file (memory.events, memory.oom_control). */
static long long keyed(const char *path, const char *key) {
  char buf[4096];
  if (!read_file(path, buf, sizeof buf)) return -1;
  size_t kl = strlen(key);
  for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, key, kl) && l[kl] == ' ') return atoll(l + kl + 1);
  return -1;
}

/* ---------- the containment layers, probed once ---------- */

static struct {
  int probed;
  unsigned active;
  char root[4096];  /* the verifier's scratch folder (units' folders, model copies) */
  char cg2[4096];   /* where per-unit v2 cgroups go ("" = none) */
  int cg2_mem;      /* ... and they get the memory controller */
  char memv1[4096]; /* where per-unit v1 memory cgroups go ("" = none) */
  unsigned seq;
  char text[600];
} C;

static int disabled(const char *layer) {
  /* MI_VERIFY_NO_CONTAIN=mntns,cgroup,... switches layers off (tests of the
   * fallbacks); never needed in normal use. */
  const char *s = getenv("MI_VERIFY_NO_CONTAIN");
  return s && strstr(s, layer) != NULL;
}

static void rm_root(void) {
  if (C.root[0]) rmdir(C.root);
}

const char *vf_scratch_root(void) {
  if (!C.root[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(C.root, sizeof C.root, "%s/mi-verify.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(C.root)) {
      C.root[0] = 0;
      return tmp && *tmp ? tmp : "/tmp";
    }
    atexit(rm_root);
  }
  return C.root;
}

/* The mount point of a cgroup hierarchy (fstype, and for v1 a controller in
 * the super options) from /proc/self/mountinfo, plus our path in it. */
static int cg_find(const char *fstype, const char *controller, char *out, size_t n) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char line[4096], mnt[4096] = "";
  while (f && fgets(line, sizeof line, f)) {
    char *sep = strstr(line, " - ");
    if (!sep) continue;
    char fs[64], src[256], opts[1024] = "", mp[4096];
    if (sscanf(sep + 3, "%63s %255s %1023s", fs, src, opts) < 2 || strcmp(fs, fstype)) continue;
    if (controller) {
      int hit = 0;
      char *save = NULL;
      for (char *t = strtok_r(opts, ",", &save); t; t = strtok_r(NULL, ",", &save)) hit |= !strcmp(t, controller);
      if (!hit) continue;
    }
    if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1) snprintf(mnt, sizeof mnt, "%s", mp);
    break;
  }
  if (f) fclose(f);
  if (!mnt[0]) return -1;
  f = fopen("/proc/self/cgroup", "re");
  char path[4096] = "";
  int found = 0;
  while (f && fgets(line, sizeof line, f)) {
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = 0;
    const char *ctl = a + 1;
    int hit = controller ? 0 : (line[0] == '0' && a == line + 1 && !*ctl);
    if (controller) {
      char tmp[256];
      snprintf(tmp, sizeof tmp, "%s", ctl);
      char *save = NULL;
      for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) hit |= !strcmp(t, controller);
    }
    if (hit) {
      snprintf(path, sizeof path, "%s", b + 1);
      path[strcspn(path, "\n")] = 0;
      found = 1;
      break;
    }
  }
  if (f) fclose(f);
  if (!found) return -1;
  snprintf(out, n, "%s%s", mnt, strcmp(path, "/") ? path : "");
  return 0;
}

typedef struct cgs {
  char v2[4200], v1[4200];
} cgs;

static void cg_make(cgs *g, uint64_t mem_mb) {
  g->v2[0] = g->v1[0] = 0;
  unsigned n = ++C.seq;
  char val[64];
  snprintf(val, sizeof val, "%llu", (unsigned long long)mem_mb << 20);
  if (C.cg2[0]) {
    snprintf(g->v2, sizeof g->v2, "%s/mi-verify-%d-%u", C.cg2, (int)getpid(), n);
    if (mkdir(g->v2, 0755) != 0) g->v2[0] = 0;
    else if (C.cg2_mem && mem_mb) {
      char p[4300];
      snprintf(p, sizeof p, "%s/memory.max", g->v2);
      write_file(p, val);
      snprintf(p, sizeof p, "%s/memory.swap.max", g->v2);
      write_file(p, "0");
    }
  }
  if (C.memv1[0] && mem_mb && !(C.cg2_mem && g->v2[0])) {
    snprintf(g->v1, sizeof g->v1, "%s/mi-verify-%d-%u", C.memv1, (int)getpid(), n);
    if (mkdir(g->v1, 0755) != 0) g->v1[0] = 0;
    else {
      char p[4300];
      snprintf(p, sizeof p, "%s/memory.limit_in_bytes", g->v1);
      if (write_file(p, val) != 0) {
        rmdir(g->v1);
        g->v1[0] = 0;
      } else {
        snprintf(p, sizeof p, "%s/memory.memsw.limit_in_bytes", g->v1);
        write_file(p, val); /* no swap as a way around the cap (absent without swap accounting) */
      }
    }
  }
}

/* In the child: join the unit's cgroups. */
static int cg_join(const cgs *g) {
  char p[4300];
  int rc = 0;
  if (g->v2[0]) {
    snprintf(p, sizeof p, "%s/cgroup.procs", g->v2);
    rc |= write_file(p, "0");
  }
  if (g->v1[0]) {
    snprintf(p, sizeof p, "%s/cgroup.procs", g->v1);
    rc |= write_file(p, "0");
  }
  return rc;
}

/* Kills every process in a cgroup. */
static void cg_kill(const char *dir) {
  if (!dir[0]) return;
  char p[4300], buf[65536];
  snprintf(p, sizeof p, "%s/cgroup.kill", dir);
  if (write_file(p, "1") == 0) return;
  snprintf(p, sizeof p, "%s/cgroup.procs", dir);
  for (int round = 0; round < 50 && read_file(p, buf, sizeof buf); round++) {
    for (char *l = buf; *l;) {
      kill((pid_t)atoi(l), SIGKILL);
      char *nl = strchr(l, '\n');
      if (!nl) break;
      l = nl + 1;
    }
    usleep(2000);
  }
}

static void cg_remove(const char *dir) {
  if (!dir[0]) return;
  for (int i = 0; i < 200 && rmdir(dir) != 0 && errno == EBUSY; i++) usleep(5000);
}

/* ---------- processes the unit left behind ---------- */

static unsigned long long proc_start(const char *stat) {
  const char *rp = strrchr(stat, ')');
  if (!rp) return 0;
  /* after ')': state ppid pgrp session ... field 22 is starttime */
  unsigned long long st = 0;
  int field = 2;
  for (const char *p = rp + 1; *p; p++)
    if (*p == ' ' && ++field == 22) {
      st = strtoull(p + 1, NULL, 10);
      break;
    }
  return st;
}

/* Processes of the unit other than `main`: in its process group, or in its
 * cgroups, or re-parented to us (the subreaper) and started after the unit
 * began. Kills them when `kill_them`; returns how many; the first named. */
static int strays(pid_t main, const cgs *g, unsigned long long t0_ticks, int kill_them, char *desc,
                  size_t dlen) {
  int n = 0;
  pid_t self = getpid();
  char cgp[2][4300];
  snprintf(cgp[0], sizeof cgp[0], "%s/cgroup.procs", g->v2);
  snprintf(cgp[1], sizeof cgp[1], "%s/cgroup.procs", g->v1);
  char inc[2][65536];
  inc[0][0] = inc[1][0] = 0;
  if (g->v2[0]) read_file(cgp[0], inc[0], sizeof inc[0]);
  if (g->v1[0]) read_file(cgp[1], inc[1], sizeof inc[1]);
  DIR *d = opendir("/proc");
  struct dirent *de;
  while (d && (de = readdir(d))) {
    pid_t pid = (pid_t)atoi(de->d_name);
    if (pid <= 0 || pid == main || pid == self) continue;
    char p[64], st[1024];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    if (!read_file(p, st, sizeof st)) continue;
    const char *rp = strrchr(st, ')');
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (!rp || sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
    if (state == 'Z') continue; /* dead, only not reaped yet */
    char key[32];
    snprintf(key, sizeof key, "%d\n", (int)pid);
    int in_cg = 0;
    for (int k = 0; k < 2; k++) {
      const char *hit = inc[k][0] ? strstr(inc[k], key) : NULL;
      in_cg |= hit && (hit == inc[k] || hit[-1] == '\n');
    }
    int mine = pgrp == (int)main || in_cg || (ppid == (int)self && proc_start(st) + 1 >= t0_ticks);
    if (!mine) continue;
    if (!n && desc) {
      char comm[64] = "?";
      const char *lp = strchr(st, '(');
      if (lp && rp > lp) snprintf(comm, sizeof comm, "%.*s", (int)(rp - lp - 1), lp + 1);
      snprintf(desc, dlen, "pid %d '%s'%s", (int)pid, comm,
               pgrp == (int)main ? ", in its process group" : in_cg ? ", in its cgroup" : ", re-parented");
    }
    n++;
    if (kill_them) kill(pid, SIGKILL);
  }
  if (d) closedir(d);
  return n;
}

static unsigned long long now_ticks(void) {
  struct timespec t;
  clock_gettime(CLOCK_BOOTTIME, &t);
  long hz = sysconf(_SC_CLK_TCK);
  return (unsigned long long)t.tv_sec * (unsigned long long)hz +
         (unsigned long long)t.tv_nsec / (1000000000ull / (unsigned long long)hz);
}

/* Kills everything of the unit and reaps what was re-parented to us; the
 * main child's status goes to *main_st (*main_done set) if reaped here. */
static void kill_all(pid_t pid, const cgs *g, unsigned long long t0, int *main_st, int *main_done) {
  if (!*main_done) kill(pid, SIGKILL);
  kill(-pid, SIGKILL);
  cg_kill(g->v2);
  cg_kill(g->v1);
  for (int round = 0; round < 200; round++) {
    int left = strays(pid, g, t0, 1, NULL, 0);
    pid_t w;
    int st;
    while ((w = waitpid(-1, &st, WNOHANG)) > 0)
      if (w == pid) *main_st = st, *main_done = 1;
    if (!left && *main_done) break;
    usleep(2000);
  }
}

/* ---------- the child's side of containment ---------- */

enum {
  L_SESSION = 1, L_SUBREAPER = 2, L_CGROUP = 4, L_MEMCG = 8, L_MNTNS = 16, L_RDONLY = 32,
  L_TMPFS = 64, L_CAPS = 128, L_USERNS = 256,
};

/* A mount namespace: directly as root, else inside an unprivileged user
 * namespace mapping our uid to 0 (where the kernel allows those). */
static unsigned new_mount_ns(void) {
  if (unshare(CLONE_NEWNS) == 0) return L_MNTNS;
  if (geteuid() == 0) return 0;
  char uid_map[64], gid_map[64];
  snprintf(uid_map, sizeof uid_map, "0 %u 1", (unsigned)geteuid());
  snprintf(gid_map, sizeof gid_map, "0 %u 1", (unsigned)getegid());
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 0;
  write_file("/proc/self/setgroups", "deny");
  if (write_file("/proc/self/uid_map", uid_map) != 0 || write_file("/proc/self/gid_map", gid_map) != 0) return 0;
  return L_MNTNS | L_USERNS;
}

/* Sets up the child's confinement; `want` is the layers to try. Returns
 * the layers that worked. */
static unsigned confine(unsigned want, const char *unit_dir, uint64_t mem_mb) {
  unsigned got = 0;
  unsigned ns = (want & L_MNTNS) ? new_mount_ns() : 0;
  if (ns && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
    got |= ns;
    if ((want & L_RDONLY) && mi_mount_set_rdonly("/", 1) == 0) {
      got |= L_RDONLY;
      /* the scratch folder (model copies of stages 3-6) stays writable */
      if (mount(C.root, C.root, NULL, MS_BIND | MS_REC, NULL) != 0 || mi_mount_set_rdonly(C.root, 0) != 0)
        got &= ~(unsigned)L_RDONLY;
    }
    char opts[64];
    snprintf(opts, sizeof opts, "size=%llum,mode=0700", (unsigned long long)(mem_mb ? mem_mb : 1024));
    if ((want & L_TMPFS) && mount("tmpfs", unit_dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == 0) {
      got |= L_TMPFS;
      struct stat sb;
      if (stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) &&
          mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        got &= ~(unsigned)L_TMPFS;
    }
  }
  if (chdir(unit_dir) == 0) setenv("TMPDIR", unit_dir, 1);
  if (want & L_CAPS) {
    int ok = 1;
    for (int cap = 0; cap <= 63; cap++)
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) ok = 0;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct dat[2];
    memset(dat, 0, sizeof dat);
    if (syscall(SYS_capset, &h, dat) != 0) ok = 0;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ok = 0;
    if (ok) got |= L_CAPS;
  }
  return got;
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
  if (lim->mem_mb > 0) {
    /* every file, a memfd included, at most the memory limit */
    r.rlim_cur = r.rlim_max = (rlim_t)lim->mem_mb << 20;
    setrlimit(RLIMIT_FSIZE, &r);
#ifndef VF_ASAN
    setrlimit(RLIMIT_AS, &r);
#endif
  }
}

/* The probe: which layers this machine offers. */
static void probe(void) {
  if (C.probed) return;
  C.probed = 1;
  vf_scratch_root();
  unsigned want = L_SESSION;
  if (!disabled("subreaper") && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0) C.active |= L_SUBREAPER;
  if (!disabled("cgroup") && cg_find("cgroup2", NULL, C.cg2, sizeof C.cg2) == 0) {
    char p[4200], buf[512];
    snprintf(p, sizeof p, "%s/cgroup.controllers", C.cg2);
    if (read_file(p, buf, sizeof buf) && strstr(buf, "memory") && !disabled("memcg")) {
      snprintf(p, sizeof p, "%s/cgroup.subtree_control", C.cg2);
      C.cg2_mem = write_file(p, "+memory") == 0;
    }
  } else C.cg2[0] = 0;
  if (!disabled("memcg") && cg_find("cgroup", "memory", C.memv1, sizeof C.memv1) != 0) C.memv1[0] = 0;
  if (disabled("memcg")) C.memv1[0] = 0;
  if (!disabled("mntns")) want |= L_MNTNS | L_RDONLY | L_TMPFS;
  if (!disabled("caps")) want |= L_CAPS;

  cgs g;
  cg_make(&g, 64);
  char dir[4300];
  snprintf(dir, sizeof dir, "%s/probe.XXXXXX", C.root);
  int have_dir = mkdtemp(dir) != NULL;
  int pp[2];
  unsigned got = 0;
  if (have_dir && pipe2(pp, O_CLOEXEC) == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      unsigned r = setsid() > 0 ? L_SESSION : 0;
      cgs only2 = g, only1 = g;
      only2.v1[0] = 0;
      only1.v2[0] = 0;
      if (g.v2[0] && cg_join(&only2) == 0) r |= L_CGROUP | (C.cg2_mem ? L_MEMCG : 0);
      if (g.v1[0] && cg_join(&only1) == 0) r |= L_MEMCG;
      r |= confine(want, dir, 64);
      ssize_t w = write(pp[1], &r, sizeof r);
      _exit(w == sizeof r ? 0 : 1);
    }
    close(pp[1]);
    if (pid > 0) {
      if (read(pp[0], &got, sizeof got) != sizeof got) got = 0;
      int st;
      waitpid(pid, &st, 0);
    }
    close(pp[0]);
  }
  if (have_dir) rmdir(dir);
  cg_remove(g.v2);
  cg_remove(g.v1);
  if (!(got & L_CGROUP)) C.cg2[0] = 0, C.cg2_mem = 0;
  if (!(got & L_MEMCG)) C.memv1[0] = 0, C.cg2_mem = 0;
  C.active |= got;
  snprintf(C.text, sizeof C.text, "%s%s%s%s%s%s%s%s%s",
           C.active & L_SESSION ? "session (own process group)" : "no session",
           C.active & L_SUBREAPER ? ", subreaper" : ", no subreaper",
           C.active & L_CGROUP ? ", cgroup v2 (cgroup.kill)" : ", no cgroup v2",
           C.active & L_MEMCG ? (C.cg2_mem ? ", memory cap: cgroup v2 memory.max" : ", memory cap: cgroup v1 memory.limit_in_bytes")
                              : ", memory cap: RLIMIT_AS + RLIMIT_FSIZE only (memfds beyond one file's size not bounded)",
           C.active & L_MNTNS ? (C.active & L_USERNS ? ", mount namespace (in a user namespace)" : ", mount namespace")
                              : ", no mount namespace (writes confined only by cwd)",
           C.active & L_RDONLY ? " with a read-only root" : "",
           C.active & L_TMPFS ? " and a private tmpfs" : "",
           C.active & L_CAPS ? ", capabilities dropped" : ", capabilities kept",
#ifdef VF_ASAN
           ", no RLIMIT_AS (ASan)"
#else
           ""
#endif
  );
}

const char *vf_containment(void) {
  probe();
  return C.text;
}

/* ---------- records: what a stage 1-2 child sends back ---------- */

void vf_rec_write(int fd, uint32_t type, int index, int rc, const char *msg, const void *payload,
                  uint64_t n) {
  vf_rec_hdr h = {VF_REC_MAGIC, type, index, rc, 0, 0, n};
  size_t ml = msg ? strnlen(msg, VF_REC_MAX_MSG) : 0;
  h.msg_len = (uint32_t)ml;
  const char *parts[3] = {(const char *)&h, msg, payload};
  size_t lens[3] = {sizeof h, ml, (size_t)n};
  for (int i = 0; i < 3; i++) {
    const char *p = parts[i];
    size_t left = lens[i];
    while (left) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      p += w;
      left -= (size_t)w;
    }
  }
}

int vf_rec_next(const char *buf, size_t len, size_t *off, vf_rec *out, char *why, size_t wl) {
  if (*off == len) return 0;
  if (len - *off < sizeof(vf_rec_hdr)) {
    snprintf(why, wl, "a torn record header at byte %zu", *off);
    return -1;
  }
  vf_rec_hdr h;
  memcpy(&h, buf + *off, sizeof h);
  if (h.magic != VF_REC_MAGIC || h.type < VF_REC_OUT || h.type > VF_REC_ERROR || h.msg_len > VF_REC_MAX_MSG ||
      h.payload_len > len) {
    snprintf(why, wl, "bytes at %zu are not a result record of the verifier's protocol", *off);
    return -1;
  }
  size_t need = sizeof h + h.msg_len + (size_t)h.payload_len;
  if (len - *off < need) {
    snprintf(why, wl, "a torn record at byte %zu", *off);
    return -1;
  }
  out->type = h.type;
  out->index = h.index;
  out->rc = h.rc;
  size_t ml = h.msg_len < sizeof out->msg - 1 ? h.msg_len : sizeof out->msg - 1;
  memcpy(out->msg, buf + *off + sizeof h, ml);
  out->msg[ml] = 0;
  for (char *p = out->msg; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
  out->payload = buf + *off + sizeof h + h.msg_len;
  out->payload_len = (size_t)h.payload_len;
  *off += need;
  return 1;
}

/* ---------- the run ---------- */

static int pidfd_open_(pid_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

/* The child side of vf_run_child, in the forked process: its own session, output on op, the unit
 * confined (every layer the probe found, else exit VF_EXIT_CONTAIN), limits set, then fn with its
 * result pipe rp. Never returns. */
static _Noreturn void run_unit(const vf_limits *lim, cgs *g, const char *unit_dir, int op[2], int rp[2],
                               pid_t parent, int (*fn)(void *arg, int result_fd), void *arg) {
  /* Own session and process group; die with the verifier. */
  setsid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(3); /* the parent is already gone */
  close(op[0]);
  close(rp[0]);
  dup2(op[1], 1);
  dup2(op[1], 2);
  close(op[1]);
  unsigned want = C.active & (L_MNTNS | L_RDONLY | L_TMPFS | L_CAPS | L_USERNS);
  int need_v2 = (C.active & L_CGROUP) != 0, need_v1 = (C.active & L_MEMCG) && !C.cg2_mem && lim->mem_mb;
  if ((need_v2 && !g->v2[0]) || (need_v1 && !g->v1[0]) || cg_join(g) != 0) _exit(VF_EXIT_CONTAIN);
  unsigned need = want & ~(unsigned)L_USERNS; /* how the namespace came is not a layer */
  if ((confine(want, unit_dir, lim->mem_mb) & need) != need) _exit(VF_EXIT_CONTAIN);
  set_limits(lim);
  int rc = fn(arg, rp[1]);
  fflush(stdout);
  fflush(stderr);
  _exit(rc ? 1 : 0); /* no atexit handlers: the parent's state is not ours */
}

/* The parent side while unit pid runs: read its output (out_fd, into outb, capped) and results
 * (res_fd, into resb, up to the cap, else flooded), kill it and what it left behind at the
 * deadline, on a flood or when it exits, then reap it; its wait status into *st. */
static void supervise(const vf_limits *lim, pid_t pid, cgs *g, int out_fd, int res_fd, double t0,
                      unsigned long long t0_ticks, vf_child_result *out, sbuf *outb, sbuf *resb, int *st) {
  int pfd = pidfd_open_(pid);
  size_t res_cap = lim->result_cap ? lim->result_cap : RESULT_CAP_DEFAULT;
  out->result_cap = res_cap;
  struct pollfd pf[3] = {{out_fd, POLLIN, 0}, {res_fd, POLLIN, 0}, {pfd, POLLIN, 0}};
  int open_fds = 2, exited = 0, killed = 0;
  double deadline = t0 + (lim->timeout_s > 0 ? lim->timeout_s : 1e9), drain_until = 1e18;
  while (open_fds || !exited) {
    double now = now_s();
    if (!exited && waitpid(pid, st, WNOHANG) == pid) exited = 1;
    if (exited && pfd >= 0) close(pfd), pf[2].fd = pfd = -1;
    if (exited && !killed) {
      /* The unit is over when its main process is: anything still running
       * was left behind. */
      out->strays = strays(pid, g, t0_ticks, 0, out->stray_desc, sizeof out->stray_desc);
      kill_all(pid, g, t0_ticks, st, &exited);
      killed = 1;
      drain_until = now + 2.0; /* whatever holds the pipes is dead now */
    }
    if (!out->timed_out && !exited && now >= deadline) {
      kill_all(pid, g, t0_ticks, st, &exited);
      killed = 1;
      out->timed_out = 1;
      drain_until = now + 2.0;
    }
    if (out->flooded && !killed) {
      kill_all(pid, g, t0_ticks, st, &exited);
      killed = 1;
      drain_until = now + 2.0;
    }
    if (now >= drain_until || (!open_fds && exited)) break;
    double until = exited || killed ? drain_until : deadline;
    int ms = (int)((until - now) * 1000) + 1;
    if (ms > 1000) ms = 1000;
    if (pfd < 0 && !exited && ms > 20) ms = 20; /* no pidfd: notice the exit by polling */
    int n = poll(pf, 3, ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; i++) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t r = read(pf[i].fd, buf, sizeof buf);
      if (r > 0 && i == 0) sbuf_add(outb, buf, (size_t)r, OUTPUT_CAP);
      else if (r > 0 && (out->flooded || resb->n + (size_t)r > res_cap)) {
        out->flooded = 1; /* nothing more is kept: the parent stays bounded */
      } else if (r > 0) {
        if (sbuf_add(resb, buf, (size_t)r, 0) != 0) out->flooded = 1;
      } else if (r == 0 || errno != EINTR) {
        close(pf[i].fd);
        pf[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (int i = 0; i < 3; i++)
    if (pf[i].fd >= 0) close(pf[i].fd);
  if (!exited) kill_all(pid, g, t0_ticks, st, &exited);
  if (!exited) { /* unkillable for now (e.g. in uninterruptible sleep): wait */
    while (waitpid(pid, st, 0) < 0 && errno == EINTR) {
    }
    exited = 1;
  }
  kill_all(pid, g, t0_ticks, st, &exited); /* and reap what is left */
}

/* Whether the kernel OOM-killed anything in the unit's cgroups (v2 and v1 counters). */
static int oom_killed(const cgs *g) {
  char p[4400];
  long long ooms = 0;
  if (g->v2[0]) {
    snprintf(p, sizeof p, "%s/memory.events", g->v2);
    long long k = keyed(p, "oom_kill");
    if (k > 0) ooms += k;
  }
  if (g->v1[0]) {
    snprintf(p, sizeof p, "%s/memory.oom_control", g->v1);
    long long k = keyed(p, "oom_kill");
    if (k > 0) ooms += k;
  }
  return ooms > 0;
}

/* The unit's output and results into out (both owned by it now), and the event lines parsed. */
static void take_output(vf_child_result *out, sbuf outb, sbuf resb) {
  if (outb.truncated) {
    sbuf tmp = {0};
    const char *note = "[... earlier output dropped ...]\n";
    sbuf_add(&tmp, note, strlen(note), 0);
    sbuf_add(&tmp, outb.p, outb.n, 0);
    free(outb.p);
    outb = tmp;
  }
  out->output = outb.p ? outb.p : strdup("");
  out->results = resb.p ? resb.p : strdup("");
  out->results_len = resb.n;
  /* Event lines (stages 3-6); a torn last line (the child died mid-write)
   * is dropped. Stages 1-2 read `results` as records instead. */
  char *copy = malloc(resb.n + 1);
  if (copy) {
    memcpy(copy, out->results, resb.n);
    copy[resb.n] = 0;
    for (char *line = copy, *nl; (nl = memchr(line, '\n', resb.n - (size_t)(line - copy))); line = nl + 1) {
      *nl = 0;
      json_t *ev = json_loads(line, 0, NULL);
      if (json_is_object(ev)) json_array_append_new(out->events, ev);
      else json_decref(ev);
    }
    free(copy);
  }
}

int vf_run_child(const vf_limits *lim, int (*fn)(void *arg, int result_fd), void *arg,
                 vf_child_result *out) {
  memset(out, 0, sizeof *out);
  out->events = json_array();
  probe();
  char unit_dir[4300];
  snprintf(unit_dir, sizeof unit_dir, "%s/unit.XXXXXX", C.root);
  if (!mkdtemp(unit_dir)) snprintf(unit_dir, sizeof unit_dir, "%s", C.root);
  cgs g;
  cg_make(&g, lim->mem_mb);
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
  unsigned long long t0_ticks = now_ticks();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(op[0]), close(op[1]), close(rp[0]), close(rp[1]);
    return -1;
  }
  if (pid == 0) run_unit(lim, &g, unit_dir, op, rp, parent, fn, arg);
  close(op[1]);
  close(rp[1]);

  sbuf outb = {0}, resb = {0};
  int st = 0;
  supervise(lim, pid, &g, op[0], rp[0], t0, t0_ticks, out, &outb, &resb, &st);
  out->wall_s = now_s() - t0;
  out->oom_killed = oom_killed(&g);
  cg_remove(g.v2);
  cg_remove(g.v1);
  if (strcmp(unit_dir, C.root)) vf_rmtree(unit_dir);
  if (WIFEXITED(st)) out->exited = 1, out->exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) out->signaled = 1, out->term_signal = WTERMSIG(st);
  out->contain_failed = out->exited && out->exit_code == VF_EXIT_CONTAIN;
  take_output(out, outb, resb);
  return 0;
}

void vf_child_result_free(vf_child_result *r) {
  free(r->output);
  free(r->results);
  json_decref(r->events);
  memset(r, 0, sizeof *r);
}
