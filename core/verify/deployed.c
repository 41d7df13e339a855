/* Stage 4 as deployed (deployed.h): the golden's prompts through mi-run, the
 * program a deployment runs, with nothing of the verifier around it.
 *
 * What the model under test sees is what it sees in a deployment: the
 * program is mi-run (its own name, its own argv), the environment is the
 * user's (mi-verify sets nothing in it: the exact path comes through the
 * platform's options in plugins.conf, as a deployment gives them), the
 * model is read from the folder the user named (not a copy), the temp
 * folder is the user's, and plugins.conf lives in a folder named like any
 * other. Only the plugins' names are learnt in a contained child (loading
 * a candidate is a child's job); the parent writes the conf, runs mi-run
 * once per case and turns its --json output into the record stage 4's
 * judge reads, so a deployed case is judged exactly as an in-process one.
 *
 * The user's folder, not a copy, is the one thing a deployed plugin could
 * harm: mi-run sees it read-only (a bind mount in a mount namespace of its
 * own, mi_spawn_wait_ro; where none can be made it runs writable), and the
 * folder is fingerprinted before and after (vf_fp_*: names, types, inodes,
 * sizes, mtimes, ctimes): a change fails every deployed case, naming it. */
#define _GNU_SOURCE
#include "core/verify/deployed.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/file.h"
#include "core/util/spawn.h"

static int names_child(void *arg, int fd) {
  const vf_stage_opts *o = arg;
  char names[2][128], err[1024] = "", buf[300];
  int eng = 0;
  if (vf_plugin_names(o, names, &eng, err, sizeof err) != 0) {
    vf_rec_write(fd, VF_REC_FAIL, 0, 0, err, NULL, 0);
    return 1;
  }
  int n = snprintf(buf, sizeof buf, "%d\n%s\n%s\n", eng, names[0], names[1]);
  vf_rec_write(fd, VF_REC_OUT, 0, 0, NULL, buf, (uint64_t)n);
  return 0;
}

static int plain_name(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return 0;
  return 1;
}

int vf_deploy_prepare(const vf_stage_opts *o, char *dir, size_t dn, char *conf, size_t cn, int *is_engine, char *err,
                      size_t el) {
  vf_limits lim = o->lim;
  if (lim.timeout_s < 60) lim.timeout_s = 60;
  lim.result_cap = 4096;
  vf_child_result r;
  if (vf_run_child(&lim, names_child, (void *)o, &r) != 0) {
    snprintf(err, el, "cannot fork a child to read the plugins' names");
    return -1;
  }
  size_t off = 0;
  vf_rec rec;
  char why[300] = "";
  int got = r.results ? vf_rec_next(r.results, r.results_len, &off, &rec, why, sizeof why) : 0;
  char names[2][128] = {"", ""};
  int eng = -1;
  if (got == 1 && rec.type == VF_REC_OUT && rec.payload_len < 300) {
    char buf[300];
    memcpy(buf, rec.payload, rec.payload_len);
    buf[rec.payload_len] = 0;
    char *a = strchr(buf, '\n'), *b = a ? strchr(a + 1, '\n') : NULL, *c = b ? strchr(b + 1, '\n') : NULL;
    if (c) {
      *a = *b = *c = 0;
      eng = buf[0] == '1' && !buf[1] ? 1 : buf[0] == '0' && !buf[1] ? 0 : -1;
      snprintf(names[0], 128, "%s", a + 1);
      snprintf(names[1], 128, "%s", b + 1);
    }
  } else if (got == 1 && rec.type == VF_REC_FAIL) {
    snprintf(err, el, "%s", rec.msg);
    vf_child_result_free(&r);
    return -1;
  }
  vf_child_result_free(&r);
  if (eng < 0 || !plain_name(names[0]) || !plain_name(names[1])) {
    snprintf(err, el, "the child that reads the plugins' names returned no usable answer%s%s", why[0] ? ": " : "",
             why);
    return -1;
  }
  *is_engine = eng;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, dn, "%s/metainfer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    snprintf(err, el, "%s: cannot create: %s", dir, strerror(errno));
    return -1;
  }
  snprintf(conf, cn, "%s/plugins.conf", dir);
  return vf_write_plugins_conf(o, conf, names, eng, err, el);
}

char *vf_s4_record(int n_ids, const int32_t *ids, int n_gen, const int32_t *gen, const int32_t *top,
                   const double *lps, int K, size_t *len) {
  size_t bytes = 12 + 4 * ((size_t)n_ids + (size_t)n_gen + (size_t)n_gen * K) + 8 * (size_t)n_gen * K;
  char *pl = malloc(bytes);
  if (!pl) return NULL;
  int32_t hdr[3] = {n_ids, n_gen, K};
  char *p = pl;
  memcpy(p, hdr, 12), p += 12;
  memcpy(p, ids, 4 * (size_t)n_ids), p += 4 * (size_t)n_ids;
  memcpy(p, gen, 4 * (size_t)n_gen), p += 4 * (size_t)n_gen;
  memcpy(p, top, 4 * (size_t)n_gen * K), p += 4 * (size_t)n_gen * K;
  memcpy(p, lps, 8 * (size_t)n_gen * K);
  *len = bytes;
  return pl;
}

/* ---------- the model folder's fingerprint ---------- */

#define FP_MAX_DEPTH 32
#define FP_MAX_ENTRIES 200000

typedef struct fp_ent {
  char *name; /* relative to the folder; "." for the folder itself */
  mode_t type;
  ino_t ino;
  off_t size;
  struct timespec mt, ct;
} fp_ent;

struct vf_fp {
  fp_ent *e;
  size_t n, cap;
};

static int fp_add(vf_fp *f, const char *name, const struct stat *st) {
  if (f->n == FP_MAX_ENTRIES) return -1; /* the same cap on both sides: the first entries are compared */
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 64;
    fp_ent *e = realloc(f->e, cap * sizeof *e);
    if (!e) return -1;
    f->e = e, f->cap = cap;
  }
  fp_ent *e = &f->e[f->n];
  if (!(e->name = strdup(name))) return -1;
  e->type = st->st_mode & S_IFMT;
  e->ino = st->st_ino;
  e->size = st->st_size;
  e->mt = st->st_mtim;
  e->ct = st->st_ctim;
  f->n++;
  return 0;
}

/* The entries under the open folder dfd (closed here), named from rel.
 * Entries are stat'ed, never opened, but folders (O_NOFOLLOW): a FIFO or a
 * symlink out of the tree is recorded as itself. -1 only when out of memory
 * or at the entry cap. */
static int fp_walk(vf_fp *f, int dfd, const char *rel, int depth) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return 0; /* an unreadable folder: its own entry holds it */
  }
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char sub[PATH_MAX];
    struct stat st;
    if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >= (int)sizeof sub ||
        fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue; /* too deep a name to say, or gone between readdir and stat */
    rc = fp_add(f, sub, &st);
    if (rc == 0 && S_ISDIR(st.st_mode) && depth < FP_MAX_DEPTH) {
      int c = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (c >= 0) rc = fp_walk(f, c, sub, depth + 1);
    }
  }
  closedir(d);
  return f->n == FP_MAX_ENTRIES ? 0 : rc;
}

static int fp_cmp(const void *a, const void *b) {
  return strcmp(((const fp_ent *)a)->name, ((const fp_ent *)b)->name);
}

vf_fp *vf_fp_take(const char *dir, char *err, size_t el) {
  vf_fp *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, el, "%s: cannot fingerprint the folder: out of memory", dir);
    return NULL;
  }
  /* the folder the user named, followed as mi-run follows it; nothing below.
   * A single-file model (GGUF) is its one entry: the file itself. */
  struct stat st;
  if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) {
    if (fp_add(f, ".", &st) != 0) {
      snprintf(err, el, "%s: cannot fingerprint the file: out of memory", dir);
      vf_fp_free(f);
      return NULL;
    }
    return f;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = dfd < 0 || fstat(dfd, &st) != 0 || fp_add(f, ".", &st) != 0 ? -1 : 0;
  if (rc != 0 && dfd >= 0) {
    int e = errno;
    close(dfd);
    errno = e;
  }
  if (rc == 0) rc = fp_walk(f, dfd, "", 1); /* closes dfd */
  if (rc != 0) {
    snprintf(err, el, "%s: cannot fingerprint the folder: %s", dir, strerror(errno));
    vf_fp_free(f);
    return NULL;
  }
  qsort(f->e, f->n, sizeof *f->e, fp_cmp);
  return f;
}

void vf_fp_free(vf_fp *f) {
  if (!f) return;
  for (size_t i = 0; i < f->n; i++) free(f->e[i].name);
  free(f->e);
  free(f);
}

static int ts_ne(struct timespec a, struct timespec b) {
  return a.tv_sec != b.tv_sec || a.tv_nsec != b.tv_nsec;
}

/* "name (size, mtime)": the fields of one entry that differ; 0 when none. */
static int fp_ent_diff(const fp_ent *a, const fp_ent *b, char *what, size_t wl) {
  const char *f[5];
  int n = 0;
  if (a->type != b->type) f[n++] = "type";
  if (a->ino != b->ino) f[n++] = "inode";
  if (a->size != b->size) f[n++] = "size";
  if (ts_ne(a->mt, b->mt)) f[n++] = "mtime";
  if (ts_ne(a->ct, b->ct)) f[n++] = "ctime";
  if (!n) return 0;
  int l = snprintf(what, wl, "%s (", strcmp(a->name, ".")    ? a->name
                                     : a->type == S_IFREG ? "the model file"
                                                          : "the folder itself");
  for (int k = 0; k < n && l >= 0 && (size_t)l < wl; k++)
    l += snprintf(what + l, wl - (size_t)l, "%s%s", k ? ", " : "", f[k]);
  if (l >= 0 && (size_t)l < wl) snprintf(what + l, wl - (size_t)l, ")");
  return 1;
}

int vf_fp_diff(const vf_fp *a, const vf_fp *b, char *what, size_t wl) {
  char dir_change[700] = ""; /* a folder's own change: said only when nothing below it says more */
  size_t i = 0, j = 0;
  while (i < a->n || j < b->n) {
    int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->e[i].name, b->e[j].name);
    if (c) {
      snprintf(what, wl, "%s %s", c < 0 ? "removed" : "created", c < 0 ? a->e[i].name : b->e[j].name);
      return 1;
    }
    const fp_ent *x = &a->e[i++], *y = &b->e[j++];
    if (x->type == S_IFDIR && y->type == S_IFDIR && x->ino == y->ino) {
      if (!dir_change[0]) fp_ent_diff(x, y, dir_change, sizeof dir_change);
    } else if (fp_ent_diff(x, y, what, wl)) {
      return 1;
    }
  }
  if (!dir_change[0]) return 0;
  snprintf(what, wl, "%s", dir_change);
  return 1;
}

/* One case's record from what mi-run printed for it. */
static void make_rec(vf_rec *rec, char **payload, int ci, int n_ids, const int32_t *ids, int n_gen, const int32_t *gen,
                     const int32_t *top, const double *lps, int K) {
  size_t len = 0;
  char *pl = vf_s4_record(n_ids, ids, n_gen, gen, top, lps, K, &len);
  rec->index = 1 + ci;
  if (!pl) {
    rec->type = VF_REC_FAIL;
    snprintf(rec->msg, sizeof rec->msg, "out of memory in the verifier");
    return;
  }
  rec->type = VF_REC_OUT;
  rec->payload = pl;
  rec->payload_len = len;
  *payload = pl;
}

/* Why the deployed run stopped, from its log: mi-run's own last one-line
 * error (a rank's "mi-run: ..."), else mpirun's line naming a
 * rank that died on a signal, else the log's last line that is not one of
 * mpirun's banner rules ("-----"), which alone said nothing. */
static void deploy_why(const char *log, char *out, size_t n) {
  out[0] = 0;
  FILE *f = fopen(log, "re");
  if (!f) return;
  char line[600], own[600] = "", sig[600] = "", other[600] = "";
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!strncmp(line, "mi-run:", 7))
      snprintf(own, sizeof own, "%s", line);
    else if (strstr(line, "on signal") || strstr(line, "exited on"))
      snprintf(sig, sizeof sig, "%s", line);
    else if (line[strspn(line, "- \t")] != 0)
      snprintf(other, sizeof other, "%s", line);
  }
  fclose(f);
  const char *why = own[0] ? own : sig[0] ? sig : other;
  const size_t k = strlen(why) < n ? strlen(why) : n - 1; /* cut to the message's room */
  memcpy(out, why, k);
  out[k] = 0;
}

int vf_deploy_run(const vf_stage_opts *o, const char *dir, const char *conf, int is_engine, json_t *cases, int K,
                  vf_rec *recs, char **payloads, vf_deploy_guard *g) {
  memset(g, 0, sizeof *g);
  g->read_only = -1;
  int nc = (int)json_array_size(cases), ns_max = 0;
  for (int ci = 0; ci < nc; ci++) {
    memset(&recs[ci], 0, sizeof recs[ci]);
    payloads[ci] = NULL;
    recs[ci].type = VF_REC_FAIL;
    recs[ci].index = 1 + ci;
    snprintf(recs[ci].msg, sizeof recs[ci].msg, "as deployed, mi-run printed nothing for this case");
  }
  /* the prompts, one JSON string a line: one mi-run, one model load */
  char pf[4400], out[4400], log[4400], nsb[16], kb[16];
  snprintf(pf, sizeof pf, "%s/prompts.jsonl", dir);
  snprintf(out, sizeof out, "%s/out.jsonl", dir);
  snprintf(log, sizeof log, "%s/run.log", dir);
  FILE *f = fopen(pf, "we");
  for (int ci = 0; f && ci < nc; ci++) {
    json_t *gc = json_array_get(cases, (size_t)ci);
    json_t *pr = json_object_get(gc, "prompt");
    int ns = (int)json_array_size(json_object_get(gc, "steps"));
    if (ns > ns_max) ns_max = ns;
    char *t = json_is_string(pr) ? json_dumps(pr, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    fprintf(f, "%s\n", t ? t : "\"\"");
    free(t);
  }
  if (!f || fclose(f) != 0 || ns_max < 1 || K < 1) {
    for (int ci = 0; ci < nc; ci++)
      snprintf(recs[ci].msg, sizeof recs[ci].msg, "as deployed: cannot write %.900s (or no case to run)", pf);
    return -1;
  }
  snprintf(nsb, sizeof nsb, "%d", ns_max);
  snprintf(kb, sizeof kb, "%d", K);
  /* at --tp N, the ranks as a deployment starts them: mpirun -np N mi-run
   * ... --tp N -t 1 (rank 0 prints) */
  char mpb[4200], npb[16];
  const char *mpirun = o->tp > 1 ? mi_find_mpirun(mpb, sizeof mpb) : NULL;
  snprintf(npb, sizeof npb, "%d", o->tp);
  char *argv[40];
  int ac = 0;
  if (mpirun) {
    static char *const mp[] = {"-np", NULL, "--oversubscribe", "--bind-to", "none", "--allow-run-as-root",
                               "--mca", "btl_vader_single_copy_mechanism", "none"};
    argv[ac++] = (char *)mpirun;
    for (size_t q = 0; q < sizeof mp / sizeof *mp; q++) argv[ac++] = mp[q] ? mp[q] : npb;
  }
  char *const run[] = {(char *)o->mi_run, "--plugins-conf", (char *)conf, "-m", (char *)o->model_dir, "--prompts",
                       pf, "-n", nsb, "--temp", "0", "--ignore-eos", "--json", "--top-logprobs", kb};
  for (size_t q = 0; q < sizeof run / sizeof *run; q++) argv[ac++] = run[q];
  if (!is_engine && o->kv_type) {
    argv[ac++] = "--kv-type";
    argv[ac++] = (char *)o->kv_type;
  }
  if (mpirun) argv[ac++] = "--tp", argv[ac++] = npb, argv[ac++] = "-t", argv[ac++] = "1";
  argv[ac] = NULL;
  if (o->tp > 1 && !mpirun) {
    for (int ci = 0; ci < nc; ci++)
      snprintf(recs[ci].msg, sizeof recs[ci].msg, "as deployed at --tp %d: no MPI launcher (set MI_MPIRUN, or install "
               "OpenMPI's mpirun)", o->tp);
    return -1;
  }
  int tmo = o->unit_timeout_s > 0 ? (int)o->unit_timeout_s : 300 + 30 * nc;
  /* The user's folder, not a copy, so the model under test could write into
   * it: mi-run sees it read-only where a mount namespace can be made, and a
   * fingerprint before and after catches a change where it cannot (or where
   * a root program undid the mount). */
  vf_fp *fp0 = vf_fp_take(o->model_dir, g->what, sizeof g->what);
  int rc = mi_spawn_wait_ro(argv, log, out, tmo, o->model_dir, &g->read_only);
  if (fp0) {
    char why[600];
    vf_fp *fp1 = vf_fp_take(o->model_dir, why, sizeof why);
    g->fingerprinted = 1;
    if (!fp1) /* gone or unreadable now: as much a change as a new file */
      g->changed = 1, snprintf(g->what, sizeof g->what, "%s", why);
    else
      g->changed = vf_fp_diff(fp0, fp1, g->what, sizeof g->what);
    vf_fp_free(fp0);
    vf_fp_free(fp1);
  }
  /* {"prompt_index":I,"prompt_ids":[...]} then one line per step with
   * "token_id" and "top_logprobs":[[id,lp],...]; cases in order */
  f = fopen(out, "re");
  int32_t *ids = malloc(4 * 8192), *gen = malloc(4 * (size_t)ns_max), *top = malloc(4 * (size_t)ns_max * K);
  double *lps = malloc(8 * (size_t)ns_max * K);
  int cur = -1, n_ids = 0, n_gen = 0, ns_cur = 0;
  size_t llen = 0;
  char *line = NULL;
  while (f && ids && gen && top && lps && getline(&line, &llen, f) > 0) {
    json_t *j = json_loads(line, 0, NULL);
    json_t *pi = json_object_get(j, "prompt_ids");
    if (json_is_array(pi)) {
      if (cur >= 0 && cur < nc) make_rec(&recs[cur], &payloads[cur], cur, n_ids, ids, n_gen, gen, top, lps, K);
      cur = (int)json_integer_value(json_object_get(j, "prompt_index"));
      n_ids = (int)json_array_size(pi);
      if (n_ids > 8192) n_ids = 8192;
      for (int i = 0; i < n_ids; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pi, (size_t)i));
      n_gen = 0;
      ns_cur = cur >= 0 && cur < nc ? (int)json_array_size(json_object_get(json_array_get(cases, (size_t)cur), "steps")) : 0;
    } else if (json_is_integer(json_object_get(j, "token_id")) && cur >= 0 && n_gen < ns_cur) {
      gen[n_gen] = (int32_t)json_integer_value(json_object_get(j, "token_id"));
      json_t *tl = json_object_get(j, "top_logprobs");
      for (int k = 0; k < K; k++) {
        json_t *e = json_array_get(tl, (size_t)k);
        top[(size_t)n_gen * K + k] = e ? (int32_t)json_integer_value(json_array_get(e, 0)) : -1;
        lps[(size_t)n_gen * K + k] = e ? json_number_value(json_array_get(e, 1)) : -INFINITY;
      }
      n_gen++;
    }
    json_decref(j);
  }
  if (cur >= 0 && cur < nc && ids && gen && top && lps)
    make_rec(&recs[cur], &payloads[cur], cur, n_ids, ids, n_gen, gen, top, lps, K);
  free(line);
  if (f) fclose(f);
  free(ids);
  free(gen);
  free(top);
  free(lps);
  if (g->changed) { /* whatever it printed: a deployment of it harms the user's model */
    for (int ci = 0; ci < nc; ci++) {
      free(payloads[ci]);
      payloads[ci] = NULL;
      memset(&recs[ci], 0, sizeof recs[ci]);
      recs[ci].type = VF_REC_FAIL;
      recs[ci].index = 1 + ci;
      snprintf(recs[ci].msg, sizeof recs[ci].msg, "as deployed, the model under test changed the model folder: %s",
               g->what);
    }
    return -1;
  }
  if (rc != 0) { /* what it printed before it stopped is judged; the rest says why */
    char last[400];
    deploy_why(log, last, sizeof last);
    for (int ci = 0; ci < nc; ci++)
      if (recs[ci].type != VF_REC_OUT || ci == cur)
        snprintf(recs[ci].msg, sizeof recs[ci].msg, "as deployed, mi-run %s%s%s",
                 rc < 0 ? "was killed or timed out" : rc == 127 ? "could not be run" : "exited non-zero",
                 last[0] ? ": " : "", last), recs[ci].type = VF_REC_FAIL;
    return -1;
  }
  return 0;
}
