/* Stage 1's collective units (test.stage1_collectives), when tensor
 * parallelism is asked for (mi-verify --tp N, N > 1): the platform's
 * all-reduce and broadcast run across N ranks, one process each, launched
 * as a deployment launches them (mpirun -np N), and are held to a float64
 * sum the verifier computes itself.
 *
 * Who does what. The unit's child (vf_run_child: contained, time-limited)
 * starts `mpirun -np N <this mi-verify> --collective-rank DIR ...`; each
 * rank loads the platform plugin (its init joins the group: MPI on the CPU
 * platform, RCCL/NCCL on GPUs), runs the cases below through the plugin's
 * members and writes what it got, raw, into DIR. The child then returns
 * those files as records on the result pipe, and the verifier's own process
 * judges them: it draws every rank's inputs again from the seed, sums them
 * in float64 and compares. No process that loaded the plugin decides.
 *
 * Cases (the same on every rank, sizes drawn from the seed):
 *   allreduce_sum_f32 on device memory, n = 1, 7, ~1000 and ~16400 floats
 *     of mixed magnitudes (1e-2 .. 1e2), each rank its own values:
 *     |got - Σ_r x_r| <= 1e-6 · Σ_r |x_r| element by element (f32 summation
 *     of N terms errs by at most (N-1)·2^-24 of Σ|x|), and every rank's
 *     result bitwise the same as rank 0's (the iface promises it; ranks
 *     that disagree decode different tokens);
 *   broadcast of host bytes from root 0 and from root N-1 (a plugin that
 *     ignores the root passes the first only): every rank's buffer equal to
 *     the root's input, byte for byte.
 * A plugin that does not reduce (a missing all-reduce) leaves each rank its
 * own input: the sum check fails on every element. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/runtime/loader.h"
#include "core/runtime/rng.h"
#include "core/util/spawn.h"
#include "core/verify/verify.h"
#include "mi/platform.h"

#define AR_CASES 4
#define BC_CASES 3
#define AR_TOL 1e-6

/* The cases of one run, from the seed and the group size. */
typedef struct coll_layout {
  int64_t ar_n[AR_CASES];
  size_t bc_n[BC_CASES];
  int bc_root[BC_CASES];
  size_t bytes; /* one rank's results: the all-reduce outputs, then the broadcast buffers */
} coll_layout;

static void coll_layout_make(uint64_t seed, int tp, coll_layout *L) {
  uint64_t st = mi_mix64(seed ^ 0xc011ec7ull);
  L->ar_n[0] = 1;
  L->ar_n[1] = 7;
  L->ar_n[2] = 1000 + mi_rng_int(&st, 0, 96);
  L->ar_n[3] = 16384 + mi_rng_int(&st, 1, 63); /* past any 16K chunk a library might use */
  L->bc_n[0] = 1, L->bc_root[0] = 0;
  L->bc_n[1] = 13, L->bc_root[1] = tp - 1;
  L->bc_n[2] = 4096 + (size_t)mi_rng_int(&st, 1, 15), L->bc_root[2] = tp - 1;
  L->bytes = 0;
  for (int c = 0; c < AR_CASES; c++)
    L->bytes += (size_t)L->ar_n[c] * sizeof(float);
  for (int c = 0; c < BC_CASES; c++)
    L->bytes += L->bc_n[c];
}

/* Rank r's input of all-reduce case c: normal values scaled by 10^k,
 * k in -2..2 per element, so the sum mixes magnitudes. */
static void ar_input(uint64_t seed, int c, int r, float *x, int64_t n) {
  uint64_t st = mi_mix64(seed + 0x100u * (uint64_t)c + (uint64_t)r * MI_RNG_GOLDEN);
  for (int64_t i = 0; i < n; i++) {
    double v = mi_rng_normal(&st);
    int k = (int)mi_rng_int(&st, -2, 2);
    x[i] = (float)(v * pow(10.0, k));
  }
}

/* Rank r's bytes for broadcast case c. */
static void bc_input(uint64_t seed, int c, int r, unsigned char *b, size_t n) {
  uint64_t st = mi_mix64(seed + 0x10000u * (uint64_t)(c + 1) + (uint64_t)r * MI_RNG_GOLDEN);
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)mi_rng_next(&st);
}

/* ---------- one rank (mi-verify --collective-rank DIR) ---------- */

typedef struct rank_run {
  const mi_platform_iface *pi;
  void *ctx;
  mi_stream *s;
  char where[160], err[800];
} rank_run;

static int rank_fail(rank_run *k, const char *member, int rc) {
  const char *le = k->pi->last_error ? k->pi->last_error(k->ctx) : NULL;
  snprintf(k->err, sizeof k->err, "%s returned %d%s%s", member, rc, le && *le ? ": " : "",
           le && *le ? le : "");
  return -1;
}

/* The cases through the plugin, results into out (layout L); 0 or -1 with k->err. */
static int rank_cases(rank_run *k, uint64_t seed, int rank, const coll_layout *L,
                      unsigned char *out) {
  const mi_platform_iface *pi = k->pi;
  int64_t maxn = L->ar_n[AR_CASES - 1];
  mi_buffer *buf = NULL;
  int rc = pi->buffer_alloc(k->ctx, (size_t)maxn * sizeof(float), &buf);
  if (rc) return rank_fail(k, "buffer_alloc", rc);
  float *dev = pi->buffer_ptr(k->ctx, buf);
  size_t off = 0;
  for (int c = 0; c < AR_CASES && !k->err[0]; c++) {
    size_t nb = (size_t)L->ar_n[c] * sizeof(float);
    float *x = (float *)(out + off); /* the input goes in, the sum comes back over it */
    ar_input(seed, c, rank, x, L->ar_n[c]);
    snprintf(k->where, sizeof k->where, "allreduce_sum_f32 n=%lld", (long long)L->ar_n[c]);
    if ((rc = pi->memcpy_h2d(k->ctx, k->s, dev, x, nb)))
      rank_fail(k, "memcpy_h2d", rc);
    else if ((rc = pi->allreduce_sum_f32(k->ctx, k->s, dev, L->ar_n[c])))
      rank_fail(k, "allreduce_sum_f32", rc);
    else if ((rc = pi->memcpy_d2h(k->ctx, k->s, x, dev, nb)))
      rank_fail(k, "memcpy_d2h", rc);
    else if (pi->stream_sync && (rc = pi->stream_sync(k->ctx, k->s)))
      rank_fail(k, "stream_sync", rc);
    off += nb;
  }
  pi->buffer_free(k->ctx, buf);
  for (int c = 0; c < BC_CASES && !k->err[0]; c++) {
    bc_input(seed, c, rank, out + off, L->bc_n[c]);
    snprintf(k->where, sizeof k->where, "broadcast %zu bytes from root %d", L->bc_n[c],
             L->bc_root[c]);
    if ((rc = pi->broadcast(k->ctx, k->s, out + off, L->bc_n[c], L->bc_root[c])))
      rank_fail(k, "broadcast", rc);
    off += L->bc_n[c];
  }
  return k->err[0] ? -1 : 0;
}

/* DIR/rank-R.json (what happened) and DIR/rank-R.bin (the results). */
static void rank_write(const char *dir, int rank, int size, const rank_run *k, const void *out,
                       size_t n) {
  char path[4200];
  snprintf(path, sizeof path, "%s/rank-%d.bin", dir, rank);
  FILE *f = out ? fopen(path, "wb") : NULL;
  if (f) {
    if (fwrite(out, 1, n, f) != n)
      fprintf(stderr, "mi-verify: rank %d: cannot write %s\n", rank, path);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/rank-%d.json", dir, rank);
  json_t *m = json_pack("{s:i, s:i}", "rank", rank, "size", size);
  if (k->err[0]) json_object_set_new(m, "error", json_string(k->err));
  if (k->err[0] && k->where[0]) json_object_set_new(m, "where", json_string(k->where));
  if (json_dump_file(m, path, JSON_COMPACT) != 0)
    fprintf(stderr, "mi-verify: rank %d: cannot write %s\n", rank, path);
  json_decref(m);
}

int vf_collective_rank(const char *plugin_path, const void *plugin_opts, uint64_t seed, int tp,
                       const char *dir) {
  rank_run k = {0};
  const char *er = getenv("OMPI_COMM_WORLD_RANK") ?: getenv("PMI_RANK");
  int rank = er ? atoi(er) : 0, size = 0;
  mi_plugin *p = mi_plugin_load_file(plugin_path, (const mi_options *)plugin_opts);
  if (!p || p->status != MI_PLUGIN_LOADED || !p->iface || !p->desc ||
      p->desc->kind != MI_PLUGIN_PLATFORM) {
    snprintf(k.err, sizeof k.err, "cannot load the platform plugin %s: %s", plugin_path,
             !p          ? "out of memory"
             : p->reason ? p->reason
                         : "not a platform plugin");
  } else {
    k.pi = p->iface, k.ctx = p->ctx;
    /* members the cases call, within the struct_size the plugin declared */
#define OFF(m)                                                                                     \
  { #m, offsetof(mi_platform_iface, m) }
    static const struct {
      const char *name;
      size_t off;
    } need[] = {OFF(comm_info),  OFF(allreduce_sum_f32), OFF(broadcast),  OFF(buffer_alloc),
                OFF(buffer_ptr), OFF(buffer_free),       OFF(memcpy_h2d), OFF(memcpy_d2h)};
#undef OFF
    for (size_t i = 0; i < sizeof need / sizeof *need && !k.err[0]; i++) {
      void *fn = NULL;
      if (k.pi->struct_size >= need[i].off + sizeof fn)
        memcpy(&fn, (const char *)k.pi + need[i].off, sizeof fn);
      if (!fn)
        snprintf(k.err, sizeof k.err,
                 "not provided: %s's mi_platform_iface has no '%s' (NULL, or past its struct_size)",
                 p->desc->name, need[i].name);
    }
  }
  int rc = k.err[0] ? -1 : k.pi->comm_info(k.ctx, &rank, &size);
  if (!k.err[0] && rc)
    rank_fail(&k, "comm_info", rc);
  else if (!k.err[0] && size != tp)
    snprintf(
        k.err, sizeof k.err,
        "comm_info: the plugin's group has %d rank%s, not the %d launched (no MPI start-up in it?)",
        size, size == 1 ? "" : "s", tp);
  if (!k.err[0] && k.pi->stream_create && (rc = k.pi->stream_create(k.ctx, &k.s)))
    rank_fail(&k, "stream_create", rc);
  coll_layout L;
  coll_layout_make(seed, tp, &L);
  unsigned char *out = k.err[0] ? NULL : calloc(1, L.bytes);
  if (!k.err[0] && !out) snprintf(k.err, sizeof k.err, "out of memory");
  if (!k.err[0]) rank_cases(&k, seed, rank, &L, out);
  rank_write(dir, rank, size, &k, k.err[0] ? NULL : out, L.bytes);
  if (k.err[0])
    fprintf(stderr, "mi-verify: rank %d: %s%s%s\n", rank, k.where[0] ? k.where : "",
            k.where[0] ? ": " : "", k.err);
  if (k.s && k.pi->stream_destroy) k.pi->stream_destroy(k.ctx, k.s);
  free(out);
  mi_plugin_unload(p);
  return k.err[0] ? 1 : 0; /* a rank that fails makes mpirun end the others */
}

/* ---------- the unit (in the verifier) ---------- */

typedef struct coll_job {
  const vf_stage_opts *o;
  const char *mpirun, *self;
  int tp;
  size_t bytes;
} coll_job;

/* In the unit's child: mpirun runs the ranks in this (the unit's) folder,
 * then each rank's two files go back as one record (index = rank: the
 * payload its results, the message its JSON line). */
static int coll_child(void *arg, int fd) {
  coll_job *j = arg;
  const mi_options *po = j->o->plugin_opts;
  char np[16], seed[32], tp[16], kv[32][512];
  snprintf(np, sizeof np, "%d", j->tp);
  snprintf(tp, sizeof tp, "%d", j->tp);
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)j->o->seed);
  char *argv[96] = {(char *)j->mpirun,
                    "-np",
                    np,
                    "--oversubscribe",
                    "--bind-to",
                    "none",
                    (char *)j->self,
                    "--collective-rank",
                    ".",
                    "--platform-plugin",
                    (char *)j->o->plugin_path,
                    "--seed",
                    seed,
                    "--tp",
                    tp};
  int a = 15;
  for (size_t i = 0; po && i < po->count && i < 32; i++) {
    snprintf(kv[i], sizeof kv[i], "%s=%s", po->items[i].key, po->items[i].value);
    argv[a++] = "-o", argv[a++] = kv[i];
  }
  argv[a] = NULL;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1",
         1); /* a root container, as tests/tp and mi-gen's 4d run it */
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  /* a sanitizer build's ranks: the MPI start-up the plugin dlopens leaves
   * allocations that LeakSanitizer, after the plugin is unloaded, can no
   * longer attribute to a module (so no suppression can name them); the
   * rank's leak check is off, as for every MPI process of the tests */
  const char *ao = getenv("ASAN_OPTIONS");
  char aob[1024];
  snprintf(aob, sizeof aob, "%s%sdetect_leaks=0", ao ? ao : "", ao && *ao ? ":" : "");
  setenv("ASAN_OPTIONS", aob, 1);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv);
    fprintf(stderr, "mi-verify: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
  for (int r = 0; r < j->tp; r++) {
    char path[64];
    snprintf(path, sizeof path, "rank-%d.json", r);
    json_t *m = json_load_file(path, 0, NULL);
    char *line = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    snprintf(path, sizeof path, "rank-%d.bin", r);
    FILE *f = fopen(path, "rb");
    unsigned char *b = f ? malloc(j->bytes) : NULL;
    size_t got = b ? fread(b, 1, j->bytes, f) : 0;
    if (f) fclose(f);
    if (line && got == j->bytes)
      vf_rec_write(fd, VF_REC_OUT, r, 0, line, b, got);
    else
      vf_rec_write(fd, VF_REC_FAIL, r, 1, line ? line : "wrote no result", NULL, 0);
    free(line);
    free(b);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static json_t *case_end(const char *name, double worst, const char *fail) {
  json_t *e = json_pack("{s:s, s:s, s:s, s:f}", "event", "case_end", "case", name, "verdict",
                        fail ? "FAIL" : "PASS", "max_rel_err", worst);
  if (fail) json_object_set_new(e, "message", json_string(fail));
  return e;
}

/* All-reduce case c against the float64 sum of every rank's input; the
 * case_end event. res[r]: rank r's results. */
static json_t *judge_allreduce(const vf_stage_opts *o, int tp, const coll_layout *L, int c,
                               size_t off, unsigned char *const *res) {
  int64_t n = L->ar_n[c];
  float *x = malloc((size_t)n * sizeof(float));
  double *sum = calloc((size_t)n, sizeof(double)), *mag = calloc((size_t)n, sizeof(double));
  char name[64], msg[600] = "";
  snprintf(name, sizeof name, "allreduce_sum_f32 n=%lld", (long long)n);
  if (!x || !sum || !mag) snprintf(msg, sizeof msg, "%s: out of memory", name);
  for (int r = 0; r < tp && !msg[0]; r++) {
    ar_input(o->seed, c, r, x, n);
    for (int64_t i = 0; i < n; i++)
      sum[i] += x[i], mag[i] += fabs(x[i]);
  }
  double worst = 0;
  for (int r = 0; r < tp && !msg[0]; r++) {
    const float *y = (const float *)(res[r] + off), *y0 = (const float *)(res[0] + off);
    for (int64_t i = 0; i < n && !msg[0]; i++) {
      double e = fabs((double)y[i] - sum[i]) / (mag[i] > 0 ? mag[i] : 1);
      if (!(e <= AR_TOL))
        snprintf(msg, sizeof msg,
                 "allreduce_sum_f32: rank %d, n=%lld: y[%lld] = %.9g, the float64 sum over the %d "
                 "ranks is %.9g "
                 "(error %.3g of sum|x| %.4g; tolerance %g)",
                 r, (long long)n, (long long)i, y[i], tp, sum[i], e, mag[i], AR_TOL);
      else if (memcmp(&y[i], &y0[i], sizeof(float)))
        snprintf(msg, sizeof msg,
                 "allreduce_sum_f32: n=%lld: rank %d's y[%lld] = %.9g, rank 0's %.9g: every rank "
                 "must get bitwise the same sum",
                 (long long)n, r, (long long)i, y[i], y0[i]);
      if (e > worst && e == e) worst = e;
    }
  }
  free(x), free(sum), free(mag);
  return case_end(name, worst, msg[0] ? msg : NULL);
}

static json_t *judge_broadcast(const vf_stage_opts *o, int tp, const coll_layout *L, int c,
                               size_t off, unsigned char *const *res) {
  size_t n = L->bc_n[c];
  unsigned char *want = malloc(n);
  char name[64], msg[400] = "";
  snprintf(name, sizeof name, "broadcast %zu bytes root %d", n, L->bc_root[c]);
  if (!want)
    snprintf(msg, sizeof msg, "%s: out of memory", name);
  else
    bc_input(o->seed, c, L->bc_root[c], want, n);
  for (int r = 0; r < tp && !msg[0]; r++)
    for (size_t i = 0; i < n && !msg[0]; i++)
      if (res[r][off + i] != want[i])
        snprintf(
            msg, sizeof msg,
            "broadcast from root %d (%zu bytes): rank %d's buf[%zu] = 0x%02x, the root's 0x%02x",
            L->bc_root[c], n, r, i, res[r][off + i], want[i]);
  free(want);
  return case_end(name, 0, msg[0] ? msg : NULL);
}

/* The records the child returned into per-rank results and events. */
static json_t *judge(const vf_stage_opts *o, int tp, const coll_layout *L,
                     const vf_child_result *r) {
  json_t *ev = json_array();
  unsigned char **res = calloc((size_t)tp, sizeof *res);
  size_t off = 0;
  vf_rec rec;
  char why[200];
  int missing = 0;
  while (res && vf_rec_next(r->results, r->results_len, &off, &rec, why, sizeof why) == 1) {
    if (rec.index < 0 || rec.index >= tp) continue;
    json_t *m = json_loads(rec.msg, 0, NULL);
    const char *err = json_string_value(json_object_get(m, "error")),
               *where = json_string_value(json_object_get(m, "where"));
    if (rec.type == VF_REC_OUT && !err && rec.payload_len == L->bytes && !res[rec.index]) {
      /* a copy: the payload sits at any byte offset of the pipe's buffer, the floats want alignment */
      if ((res[rec.index] = malloc(L->bytes))) memcpy(res[rec.index], rec.payload, L->bytes);
    } else {
      char msg[1200];
      snprintf(msg, sizeof msg, "rank %d: %s%s%s", rec.index, where ? where : "", where ? ": " : "",
               err ? err
               : m ? "returned no results"
                   : rec.msg);
      /* a rank that said why first: the ranks mpirun ended after it wrote nothing */
      json_array_insert_new(ev, err ? 0 : json_array_size(ev),
                            json_pack("{s:s, s:s}", "event", "error", "message", msg));
    }
    json_decref(m);
  }
  for (int k = 0; res && k < tp; k++)
    missing += !res[k];
  if (res && !missing) {
    size_t at = 0;
    for (int c = 0; c < AR_CASES; c++) {
      json_array_append_new(ev, judge_allreduce(o, tp, L, c, at, res));
      at += (size_t)L->ar_n[c] * sizeof(float);
    }
    for (int c = 0; c < BC_CASES; c++) {
      json_array_append_new(ev, judge_broadcast(o, tp, L, c, at, res));
      at += L->bc_n[c];
    }
  } else if (res && !json_array_size(ev)) {
    json_array_append_new(
        ev,
        json_pack(
            "{s:s, s:s}", "event", "error", "message",
            "no rank returned a result (mpirun could not start the ranks? see the raw output)"));
  }
  for (int k = 0; res && k < tp; k++) free(res[k]);
  free(res);
  return ev;
}

static json_t *coll_error(const char *version, const char *msg) {
  return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "kind", "collectives", "id",
                   "test.stage1_collectives", "version", version, "member",
                   "allreduce_sum_f32, broadcast", "verdict", "FAIL", "status", "ERROR", "message",
                   msg);
}

json_t *vf_stage1_collectives(const vf_stage_opts *o, int tp) {
  const mi_ckb_entry *tc = o->ckb ? mi_ckb_find(o->ckb, "test.stage1_collectives") : NULL;
  const char *version = tc ? json_string_value(json_object_get(tc->json, "version")) : NULL;
  json_t *coll = json_object_get(o->platform, "collectives");
  const char *status = json_string_value(json_object_get(coll, "status"));
  char mbuf[4200], self[4200], msg[600];
  const char *mpirun = mi_find_mpirun(mbuf, sizeof mbuf);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (!status || strcmp(status, "provided")) {
    snprintf(msg, sizeof msg, "--tp %d: the platform contract %s states no collectives it provides",
             tp, json_string_value(json_object_get(o->platform, "id")) ?: "?");
    return coll_error(version ?: "?", msg);
  }
  if (!mpirun) {
    snprintf(msg, sizeof msg,
             "--tp %d: no MPI launcher: %s (set MI_MPIRUN, or install OpenMPI's mpirun)", tp,
             getenv("MI_MPIRUN") && *getenv("MI_MPIRUN") ? "$MI_MPIRUN is not an executable"
                                                         : "no mpirun on PATH");
    return coll_error(version ?: "?", msg);
  }
  if (sl <= 0)
    return coll_error(version ?: "?",
                      "cannot find this mi-verify's own executable (/proc/self/exe)");
  self[sl] = 0;
  coll_layout L;
  coll_layout_make(o->seed, tp, &L);
  coll_job job = {o, mpirun, self, tp, L.bytes};
  /* the contract's own limits where longer than stage 1's: mpirun and tp
   * processes start, each loading the plugin (under a sanitizer or on the
   * GPU emulator, tens of seconds) */
  vf_limits lim = o->lim;
  json_t *tl = tc ? json_object_get(tc->json, "limits") : NULL;
  double t_s = json_number_value(json_object_get(tl, "timeout_s")), c_s = json_number_value(json_object_get(tl, "cpu_s"));
  if (t_s > lim.timeout_s) lim.timeout_s = t_s;
  if (c_s > lim.cpu_s) lim.cpu_s = c_s;
  lim.result_cap = (size_t)tp * VF_REC_SIZE(L.bytes);
  vf_child_result r;
  if (vf_run_child(&lim, coll_child, &job, &r) != 0)
    return coll_error(version ?: "?", "cannot fork a child");
  json_decref(r.events);
  r.events = judge(o, tp, &L, &r);
  char member[64];
  snprintf(member, sizeof member, "collectives (%d ranks)", tp);
  json_t *u = vf_unit_report("collectives", "test.stage1_collectives", version, member, &r,
                             lim.timeout_s, lim.cpu_s);
  json_object_set_new(u, "ranks", json_integer(tp));
  json_object_set_new(u, "launcher", json_string(mpirun));
  vf_child_result_free(&r);
  return u;
}
