/* mi-bench: the paper's workload matrix (prompt lengths × generation lengths)
 * on one model directory, with the memory-bandwidth roofline (decode) and
 * the FMA peak of the kernel variant in use (prefill) beside it and,
 * with --peer, llama.cpp (node-llama-cpp, same thread count) run cell by cell
 * in the same session for a ratio; with --baseline, MetaInfer itself with
 * another set of plugins (a generated engine against the hand-written
 * plugin, a new platform build against the old one), run by run in
 * alternating order, for a ratio that the host's noise moves least.
 *
 * Each run of a cell happens in a fresh child process, so peak RSS is per
 * cell and one cell cannot disturb the next. Figures are medians over
 * repeats. Progress goes to stderr; the table (or --json) to stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include "core/cli/bandwidth.h"
#include "core/runtime/safetensors.h"
#include "core/runtime/session.h"
#include "core/runtime/host.h"
#include "core/runtime/loader.h"
#include "core/util/num.h"
#include "core/util/out.h"

#define MAX_CELLS 8
#define MAX_WINDOWS 64 /* decode-by-position points per cell */

typedef struct cell_result {
  int ok;
  double ttft_ms, prefill_tps, decode_tps;
  double peak_rss_mib;
  double load_s;
  uint64_t decode_weight_bytes, state_bytes_token;
  uint64_t state_bytes_fixed; /* a recurrent model's per-sequence state (0 for a KV-only model) */
  uint64_t prefill_flops_token, attn_flops_pos;
  uint64_t weight_bytes; /* every weight the model loaded */
  double peak_gflops; /* the platform's matmul rate, measured in the same process */
  mi_dtype mm_dtype;  /* the type most matrix bytes are in: what peak_gflops ran on */
  char wmix[96];      /* the matrices' types by share of bytes */
  int exact_act;      /* MI_CPU_MATMUL_ACT=f32 was set: no activation rounding */
  /* the FMA peak of the platform's variant (register-only loop, same
   * process; 0 when the variant has no loop): the roofline is the
   * one-thread rate × threads; the rate of all threads at once is kept
   * beside it (below the roofline when threads share a core or the host
   * is busy) */
  double fma_gflops, fma_thread_gflops, fma_all_gflops;
  /* the bf16 dot-product peak (VDPBF16PS loop), measured the same way, when
   * the variant's prefill uses it (the CPU platform's "+bf16act"); else 0 */
  double bf16_gflops, bf16_thread_gflops;
  char variant[32];
  /* decode tokens/s by position: window w covers generated tokens
   * [w·win, (w+1)·win), i.e. positions P + w·win ... */
  int n_windows, win;
  double window_tps[MAX_WINDOWS];
  int64_t n_layers;
  char conf[1024]; /* the plugins.conf this run loaded (--baseline: which side is which) */
  char err[1024]; /* as long as the engine's messages: never cut */
} cell_result;

typedef struct bench_opts {
  const char *model_dir, *plugin_dir, *platform, *peer_gguf, *peer_script, *kv_type, *json_file;
  int baseline;               /* --baseline given */
  const char *baseline_dir;   /* its plugin directory; NULL: the default search */
  int weights; /* MI_SESSION_WEIGHTS_* */
  int threads, repeats, json, peer;
  int warmup; /* untimed runs of the same cell before the timed one, each side */
  int prompts[MAX_CELLS], n_prompts, gens[MAX_CELLS], n_gens;
  uint64_t seed;
} bench_opts;

static int parse_list(const char *s, int *out, int *n) {
  *n = 0;
  char *dup = strdup(s), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int64_t v;
    if (mi_parse_i64(t, 1, 1 << 20, &v) || *n == MAX_CELLS) {
      free(dup);
      return -1;
    }
    out[(*n)++] = (int)v;
  }
  free(dup);
  return *n > 0 ? 0 : -1;
}

/* The benchmark prompt: P token ids from a fixed seed, away from special
 * tokens, so MetaInfer and the peer see the same ids with no tokenizer in
 * between. */
static void make_prompt(int32_t *ids, int P, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < P; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ids[i] = (int32_t)(x % 151000u);
  }
}

/* The platform's own matmul rate on a prefill-shaped, compute-bound
 * problem (M = 256 tokens, N = 4·hidden, K = hidden, bf16 weights): the
 * "peak" the prefill roofline compares against. Best of 5; 0 on failure. */
/* The type most of the model's matrices (2-D weights) are stored in, by
 * bytes, and a line such as "q4_k 64%, q6_k 34%, f32 2%" listing them:
 * what the prefill's matmuls and the mm column run on. */
static mi_dtype weight_mix(const mi_session *e, char *line, size_t n) {
  double bytes[MI_DTYPE_COUNT] = {0}, total = 0;
  mi_weight_info wi;
  for (size_t i = 0; mi_weights_at(e->weights, i, &wi) == 0; i++)
    if (wi.ndim == 2 && wi.dtype >= 0 && wi.dtype < MI_DTYPE_COUNT) {
      bytes[wi.dtype] += (double)wi.nbytes;
      total += (double)wi.nbytes;
    }
  mi_dtype top = MI_DTYPE_BF16;
  size_t at = 0;
  line[0] = 0;
  for (int pass = 0; pass < MI_DTYPE_COUNT && total > 0; pass++) {
    int best = -1; /* largest share not yet listed */
    for (int t = 0; t < MI_DTYPE_COUNT; t++)
      if (bytes[t] > 0 && (best < 0 || bytes[t] > bytes[best])) best = t;
    if (best < 0) break;
    if (pass == 0) top = (mi_dtype)best;
    if (at < n)
      at += (size_t)snprintf(line + at, n - at, "%s%s %.0f%%", pass ? ", " : "",
                             mi_dtype_name((mi_dtype)best), 100 * bytes[best] / total);
    bytes[best] = 0;
  }
  return top;
}

/* Synthetic weights [N, K] in dt: small values for the element types,
 * random codes with unit scales for the block types (every field a block
 * holds is valid: the f16 scales are set, the codes are any bits).
 * malloc'd, its size in *bytes; NULL when K is not whole blocks. */
static void *synthetic_weights(mi_dtype dt, int64_t N, int64_t K, size_t *bytes) {
  const size_t row = mi_dtype_row_bytes(dt, K);
  if (row == 0) return NULL;
  *bytes = row * (size_t)N;
  uint8_t *w = malloc(*bytes);
  if (!w) return NULL;
  uint32_t h = 2654435761u;
  for (size_t i = 0; i < *bytes; i++) {
    h = h * 1664525u + 1013904223u;
    w[i] = (uint8_t)(h >> 24);
  }
  const uint16_t one = 0x3c00, small = 0x2000; /* f16 1.0 and 2^-7 */
  const size_t bb = mi_dtype_block_bytes(dt);
  for (size_t b = 0; bb && b < *bytes / bb; b++) {
    uint8_t *blk = w + b * bb;
    if (dt == MI_DTYPE_Q6_K) {
      memcpy(blk + 208, &small, 2);
    } else {
      memcpy(blk, &small, 2);
      if (dt == MI_DTYPE_Q4_K || dt == MI_DTYPE_Q5_K) memcpy(blk + 2, &one, 2);
    }
  }
  for (size_t i = 0; !bb && dt == MI_DTYPE_F32 && i < *bytes / 4; i++) {
    const float v = (float)((int)(i % 17) - 8) * 0.0625f;
    memcpy(w + 4 * i, &v, 4);
  }
  for (size_t i = 0; !bb && dt != MI_DTYPE_F32 && i < *bytes / 2; i++) {
    const uint16_t v = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 256);
    memcpy(w + 2 * i, &v, 2);
  }
  return w;
}

/* The platform's own matmul rate on weights in dt (the model's main matrix
 * type), M = 256 tokens, K = hidden, N = 4K: best of 5 after a warm-up. */
static double measure_peak_matmul(mi_session *e, mi_dtype dt) {
  const int64_t M = 256, K = e->info.hidden_size, N = 4 * K;
  const mi_platform_iface *P = e->P;
  size_t xb = (size_t)(M * K) * sizeof(float), wb = 0, yb = (size_t)(M * N) * sizeof(float);
  mi_buffer *bx = NULL, *bw = NULL, *by = NULL;
  double best = 0;
  if (K <= 0) return 0;
  void *hw = synthetic_weights(dt, N, K, &wb);
  if (!hw && dt != MI_DTYPE_BF16) hw = synthetic_weights(dt = MI_DTYPE_BF16, N, K, &wb);
  float *hx = malloc(xb);
  if (!hw || !hx || P->buffer_alloc(e->pc, xb, &bx) != 0 || P->buffer_alloc(e->pc, wb, &bw) != 0 ||
      P->buffer_alloc(e->pc, yb, &by) != 0)
    goto done;
  for (int64_t i = 0; i < M * K; i++) hx[i] = (float)((i % 17) - 8) * 0.0625f;
  int ok = P->memcpy_h2d(e->pc, NULL, P->buffer_ptr(e->pc, bx), hx, xb) == 0 &&
           P->memcpy_h2d(e->pc, NULL, P->buffer_ptr(e->pc, bw), hw, wb) == 0;
  for (int r = 0; ok && r < 6; r++) {
    double t0 = mi_now_seconds();
    ok = P->matmul(e->pc, NULL, P->buffer_ptr(e->pc, by), P->buffer_ptr(e->pc, bx),
                   P->buffer_ptr(e->pc, bw), dt, M, N, K) == 0 &&
         P->stream_sync(e->pc, NULL) == 0;
    double dt_s = mi_now_seconds() - t0;
    double rate = 2.0 * (double)M * (double)N * (double)K / dt_s / 1e9;
    if (ok && r > 0 && rate > best) best = rate; /* run 0 warms up */
  }
done:
  free(hx);
  free(hw);
  if (by) P->buffer_free(e->pc, by);
  if (bw) P->buffer_free(e->pc, bw);
  if (bx) P->buffer_free(e->pc, bx);
  return best;
}

/* How the prefill's matmuls treat activations, from the variant and the
 * main matrix type: an id for the JSON and a sentence for the table. */
static const char *prefill_path_id(const cell_result *r) {
  if (r->exact_act) return "exact";
  if (mi_dtype_is_block(r->mm_dtype)) return "q8_activations";
  return r->mm_dtype == MI_DTYPE_BF16 && strstr(r->variant, "+bf16act") ? "bf16_activations" : "exact";
}

static const char *prefill_path_text(const cell_result *r) {
  const char *id = prefill_path_id(r);
  if (!strcmp(id, "q8_activations"))
    return "block-quantized weights read as stored, activations quantized to 8 bits per block of "
           "32 with an f32 scale, integer dot products (MI_CPU_MATMUL_ACT=f32 for the exact path)";
  if (!strcmp(id, "bf16_activations"))
    return "bf16 weights from a few rows on VDPBF16PS, activations rounded to bf16 (matmul "
           "contract mode bf16_activations; MI_CPU_MATMUL_ACT=f32 for the exact path)";
  return "exact (activations f32)";
}

/* Token timestamps for the decode-by-position series. */
typedef struct tok_clock {
  double *t;
  int64_t n, cap;
} tok_clock;

static int on_token(void *user, const mi_gen_token *tk) {
  tok_clock *c = user;
  (void)tk;
  if (c->n < c->cap) c->t[c->n++] = mi_now_seconds();
  return 0;
}

/* Runs one cell in this (child) process. */
static void run_cell(const bench_opts *o, int P, int G, cell_result *r) {
  memset(r, 0, sizeof *r);
  char tbuf[32];
  snprintf(tbuf, sizeof tbuf, "%d", o->threads);
  mi_kv extra[] = {{"threads", tbuf}};
  mi_loader_opts lo = {.plugin_dir = o->plugin_dir, .extra_opts = extra,
                       .n_extra_opts = o->threads > 0 ? 1 : 0};
  int fatal = 0;
  char err[1024] = "";
  mi_registry *reg = mi_registry_load(&lo, &fatal, err, sizeof err);
  if (!reg || fatal) {
    snprintf(r->err, sizeof r->err, "%s", err);
    mi_registry_free(reg);
    return;
  }
  const char *conf = mi_registry_conf_path(reg);
  snprintf(r->conf, sizeof r->conf, "%s", conf ? conf : "(none: plugins found by listing)");
  mi_session *e = NULL;
  mi_kv mkv[] = {{"kv_type", o->kv_type}};
  mi_options mo = {mkv, o->kv_type ? 1 : 0};
  mi_session_opts eo = {.model_dir = o->model_dir, .platform = o->platform, .model_opts = &mo,
                       .tp_size = 1, .weights = o->weights};
  if (mi_session_open(reg, &eo, &e, err, sizeof err) != 0) {
    snprintf(r->err, sizeof r->err, "%s", err);
    mi_registry_free(reg);
    return;
  }
  int32_t *ids = malloc((size_t)P * sizeof(int32_t));
  make_prompt(ids, P, o->seed);
  mi_gen_params gp = {.n_predict = G, .n_ctx = P + G, .ignore_eos = 1};
  mi_sampler_defaults(&gp.sampling);
  gp.sampling.temp = 0;
  mi_gen_stats st;
  /* Warm-up, as llama-bench does: the same prompt, two tokens, untimed. The
   * first forward after a load pays for first-touch page faults of the
   * sequence's and the platform's scratch, the thread pool's start and the
   * clock ramping up: without it the first cell of a run measured up to 2x
   * slower than the same cell later in the run. Each run gets a fresh
   * sequence, so nothing of the warm-up is reused but warm memory. */
  for (int w = 0; w < o->warmup; w++) {
    mi_gen_params wp = gp;
    wp.n_predict = G < 2 ? G : 2;
    tok_clock none = {NULL, 0, 0};
    if (mi_generate(e, ids, (size_t)P, &wp, on_token, &none, &st, err, sizeof err) != 0) {
      snprintf(r->err, sizeof r->err, "warm-up: %.1000s", err);
      free(ids);
      mi_session_close(e);
      mi_registry_free(reg);
      return;
    }
  }
  tok_clock clk = {malloc((size_t)G * sizeof(double)), 0, G};
  if (!clk.t) clk.cap = 0;
  if (mi_generate(e, ids, (size_t)P, &gp, on_token, &clk, &st, err, sizeof err) != 0) {
    snprintf(r->err, sizeof r->err, "%s", err);
  } else {
    r->ok = 1;
    r->ttft_ms = st.ttft_s * 1e3;
    r->prefill_tps = P / st.prefill_s;
    r->decode_tps = st.n_gen > 1 ? (st.n_gen - 1) / st.decode_s : 0;
    r->peak_rss_mib = mi_peak_rss_bytes() / 1048576.0;
    r->load_s = e->load_seconds;
    r->decode_weight_bytes = e->info.decode_weight_bytes;
    r->state_bytes_token = e->info.state_bytes_token;
    r->state_bytes_fixed = e->info.state_bytes_fixed;
    r->n_layers = e->info.n_layers;
    r->prefill_flops_token = e->info.prefill_flops_token;
    r->weight_bytes = e->info.weight_bytes;
    r->attn_flops_pos = e->info.attn_flops_pos;
    r->mm_dtype = weight_mix(e, r->wmix, sizeof r->wmix);
    const char *act = getenv("MI_CPU_MATMUL_ACT");
    r->exact_act = act && !strcmp(act, "f32");
    r->peak_gflops = measure_peak_matmul(e, r->mm_dtype);
    /* The prefill roofline: what the cores can do with the instructions the
     * chosen variant uses. It is a register-only loop, so unlike the matmul
     * rate it does not move with cache or memory contention; best of 40
     * runs of ~2 ms (~0.2 s in all). */
    const char *var = e->P->variant ? e->P->variant(e->pc) : NULL;
    snprintf(r->variant, sizeof r->variant, "%s", var ? var : "?");
    mi_fma_peak fp;
    if (mi_measure_fma_peak(var, o->threads, 40, &fp) == 0) {
      /* one thread's best × threads: the busy neighbours of a shared
       * host rarely let every thread run a whole rep at once, but one
       * thread finds a quiet 2 ms window easily, so this figure is the
       * one that stays put between runs */
      r->fma_gflops = fp.per_thread_gflops * o->threads;
      r->fma_thread_gflops = fp.per_thread_gflops;
      r->fma_all_gflops = fp.all_gflops;
    }
    /* the variant's prefill may run on VDPBF16PS (2x the multiply-adds per
     * instruction): its own peak beside the FMA one, which %peak keeps */
    if (r->mm_dtype == MI_DTYPE_BF16 && mi_measure_bf16dot_peak(var, o->threads, 40, &fp) == 0) {
      r->bf16_gflops = fp.per_thread_gflops * o->threads;
      r->bf16_thread_gflops = fp.per_thread_gflops;
    }
    /* windows of at least 32 tokens, at most MAX_WINDOWS of them; the rate
     * of window w is its tokens over the time from the token before it */
    r->win = G / MAX_WINDOWS > 32 ? (G + MAX_WINDOWS - 1) / MAX_WINDOWS : 32;
    for (int64_t a = 1; a + r->win - 1 < clk.n && r->n_windows < MAX_WINDOWS; a += r->win)
      r->window_tps[r->n_windows++] = r->win / (clk.t[a + r->win - 1] - clk.t[a - 1]);
  }
  free(clk.t);
  free(ids);
  mi_session_close(e);
  mi_registry_free(reg);
}

static int run_cell_forked(const bench_opts *o, int P, int G, cell_result *r) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fd[0]);
    cell_result cr;
    run_cell(o, P, G, &cr);
    ssize_t w = write(fd[1], &cr, sizeof cr);
    _exit(w == (ssize_t)sizeof cr ? 0 : 1);
  }
  close(fd[1]);
  ssize_t n = read(fd[0], r, sizeof *r);
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  if (n != (ssize_t)sizeof *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->err, sizeof r->err, "benchmark child died (status %d)", st);
    return -1;
  }
  return r->ok ? 0 : -1;
}

/* The same cell with the baseline's plugins (--baseline). */
static int run_baseline(const bench_opts *o, int P, int G, cell_result *r) {
  bench_opts b = *o;
  b.plugin_dir = o->baseline_dir;
  return run_cell_forked(&b, P, G, r);
}

typedef struct peer_result {
  int ok;
  double ttft_ms, prefill_tps, decode_tps, peak_rss_mib;
} peer_result;

/* Runs llama.cpp through the Node script for one cell; parses its last
 * JSON line. No shell: node gets an argument vector (posix_spawnp), so a
 * path with quotes or `;` in it is only ever a path. */
static int run_peer(const bench_opts *o, int P, int G, peer_result *r, char *why, size_t why_len) {
  memset(r, 0, sizeof *r);
  char sp[16], sg[16], st_[16], ss[32];
  snprintf(sp, sizeof sp, "%d", P);
  snprintf(sg, sizeof sg, "%d", G);
  snprintf(st_, sizeof st_, "%d", o->threads);
  snprintf(ss, sizeof ss, "%llu", (unsigned long long)o->seed);
  char sw[16];
  snprintf(sw, sizeof sw, "%d", o->warmup);
  char *argv[] = {"node", (char *)o->peer_script, "--gguf", (char *)o->peer_gguf, "--prompt-len", sp,
                  "--gen", sg, "--threads", st_, "--seed", ss, "--warmup", sw, NULL};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(why, why_len, "pipe: %s", strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  pid_t pid;
  int e = posix_spawnp(&pid, "node", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (e != 0) {
    close(fds[0]);
    snprintf(why, why_len, "cannot start node: %s", strerror(e));
    return -1;
  }
  FILE *p = fdopen(fds[0], "r");
  char line[4096], last[4096] = "";
  while (p && fgets(line, sizeof line, p))
    if (line[0] == '{') snprintf(last, sizeof last, "%s", line);
  if (p) fclose(p);
  else close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  json_error_t je;
  json_t *j = json_loads(last, 0, &je);
  if (st != 0 || !j) {
    if (WIFSIGNALED(st)) snprintf(why, why_len, "node killed by signal %d", WTERMSIG(st));
    else if (st != 0) snprintf(why, why_len, "node exited with %d", WEXITSTATUS(st));
    else snprintf(why, why_len, "no JSON result line from node");
    json_decref(j);
    return -1;
  }
  r->ttft_ms = json_number_value(json_object_get(j, "ttft_ms"));
  r->prefill_tps = json_number_value(json_object_get(j, "prefill_tps"));
  r->decode_tps = json_number_value(json_object_get(j, "decode_tps"));
  r->peak_rss_mib = json_number_value(json_object_get(j, "peak_rss_mib"));
  r->ok = r->decode_tps > 0;
  if (!r->ok) snprintf(why, why_len, "no decode speed in node's result");
  json_decref(j);
  return r->ok ? 0 : -1;
}

/* --peer and --peer-script name regular files; checked before any work. */
static int check_file_arg(const char *opt, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    fprintf(stderr, "mi-bench: %s %s: %s\n", opt, path, strerror(errno));
    return -1;
  }
  if (!S_ISREG(sb.st_mode)) {
    fprintf(stderr, "mi-bench: %s %s: not a regular file\n", opt, path);
    return -1;
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(FILE *f) {
  fputs("usage: mi-bench -m MODEL_DIR [options]\n"
        "  -t, --threads N        threads (default: all cores), for MetaInfer, STREAM and the peer\n"
        "  -p, --prompts LIST     prompt lengths (default 11,256,1021)\n"
        "  -g, --gens LIST        generation lengths (default 256,1024,2048)\n"
        "  -r, --repeats N        runs per cell; figures are medians (default 3)\n"
        "      --json             machine-readable output on stdout\n"
        "      --json-file FILE   also write that JSON to FILE (the table stays on stdout)\n"
        "      --peer GGUF        also run llama.cpp (node-llama-cpp) on GGUF, interleaved\n"
        "      --peer-script JS   the Node driver (default tools/bench/llamacpp_bench.mjs); a peer run\n"
        "                         that fails is said in a line, its figures are n/a (JSON null),\n"
        "                         and mi-bench exits 3\n"
        "      --plugin-dir DIR, --platform NAME   as for mi-run\n"
        "      --baseline DIR     also run each cell with the plugins in DIR (`default`: the\n"
        "                         search without --plugin-dir), alternating run by run, and\n"
        "                         print this side / baseline (e.g. an mi-gen engine against\n"
        "                         the hand-written plugin: --plugin-dir ENGINE --baseline default)\n"
        "      --seed N           prompt token seed (default 1)\n"
        "      --warmup N         untimed runs of each cell before the timed one, both sides\n"
        "                         (default 1, as llama-bench; 0: cold first-forward figures)\n"
        "      --kv-type T        KV cache type f32 (default), f16 or bf16\n"
        "      --mmap, --no-mmap  how MetaInfer loads the weights, as for mi-run\n"
        "environment: MI_BENCH_STREAM_MIB=N  each of STREAM's three arrays N MiB (default 256:\n"
        "                         well past any cache; a smaller one measures caches too)\n",
        f);
}

/* The command line into o; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){.repeats = 3, .seed = 1, .warmup = 1, .peer_script = "tools/bench/llamacpp_bench.mjs"};
  o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  parse_list("11,256,1021", o->prompts, &o->n_prompts);
  parse_list("256,1024,2048", o->gens, &o->n_gens);
  enum { O_JSON = 256, O_PEER, O_PSCRIPT, O_PDIR, O_PLAT, O_SEED, O_KVT, O_JFILE, O_MMAP, O_NOMMAP, O_WARM, O_BASE };
  static const struct option lopts[] = {
      {"model", required_argument, 0, 'm'},   {"threads", required_argument, 0, 't'},
      {"prompts", required_argument, 0, 'p'}, {"gens", required_argument, 0, 'g'},
      {"repeats", required_argument, 0, 'r'}, {"json", no_argument, 0, O_JSON},
      {"peer", required_argument, 0, O_PEER}, {"peer-script", required_argument, 0, O_PSCRIPT},
      {"plugin-dir", required_argument, 0, O_PDIR}, {"platform", required_argument, 0, O_PLAT},
      {"seed", required_argument, 0, O_SEED}, {"help", no_argument, 0, 'h'},
      {"kv-type", required_argument, 0, O_KVT},
      {"json-file", required_argument, 0, O_JFILE},
      {"mmap", no_argument, 0, O_MMAP},       {"no-mmap", no_argument, 0, O_NOMMAP},
      {"warmup", required_argument, 0, O_WARM},
      {"baseline", required_argument, 0, O_BASE},
      {0, 0, 0, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":m:t:p:g:r:h", lopts, NULL)) != -1) {
    int64_t v;
    switch (c) {
    case 'm': o->model_dir = optarg; break;
    case 't':
      if (mi_opt_i64("mi-bench", "--threads", optarg, 1, 1024, &v)) return 2;
      o->threads = (int)v;
      break;
    case 'p':
    case 'g':
      if (parse_list(optarg, c == 'p' ? o->prompts : o->gens, c == 'p' ? &o->n_prompts : &o->n_gens)) {
        fprintf(stderr, "mi-bench: %s expects a comma-separated list of positive integers\n", argv[optind - 1]);
        return 2;
      }
      break;
    case 'r':
      if (mi_opt_i64("mi-bench", "--repeats", optarg, 1, 100, &v)) return 2;
      o->repeats = (int)v;
      break;
    case O_JSON: o->json = 1; break;
    case O_PEER: o->peer = 1; o->peer_gguf = optarg; break;
    case O_PSCRIPT: o->peer_script = optarg; break;
    case O_PDIR: o->plugin_dir = optarg; break;
    case O_PLAT: o->platform = optarg; break;
    case O_SEED:
      if (mi_opt_u64("mi-bench", "--seed", optarg, 0, UINT64_MAX, &o->seed)) return 2;
      break;
    case O_KVT: o->kv_type = optarg; break;
    case O_JFILE: o->json_file = optarg; break;
    case O_MMAP: o->weights = MI_SESSION_WEIGHTS_MMAP; break;
    case O_NOMMAP: o->weights = MI_SESSION_WEIGHTS_READ; break;
    case O_WARM:
      if (mi_opt_i64("mi-bench", "--warmup", optarg, 0, 10, &v)) return 2;
      o->warmup = (int)v;
      break;
    case O_BASE:
      o->baseline = 1;
      o->baseline_dir = strcmp(optarg, "default") == 0 ? NULL : optarg;
      break;
    case 'h': usage(stdout); return 0;
    default:
      fprintf(stderr, "mi-bench: bad or incomplete option %s (see --help)\n", argv[optind - 1]);
      return 2;
    }
  }
  if (!o->model_dir) {
    fprintf(stderr, "mi-bench: no model: give -m MODEL_DIR\n");
    return 2;
  }
  if (o->threads < 1 || o->threads > 1024 || o->repeats < 1 || o->repeats > 100) {
    fprintf(stderr, "mi-bench: --threads must be 1..1024 and --repeats 1..100\n");
    return 2;
  }
  if (o->baseline_dir) {
    struct stat sb;
    if (stat(o->baseline_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      fprintf(stderr, "mi-bench: --baseline %s: %s\n", o->baseline_dir,
              stat(o->baseline_dir, &sb) != 0 ? strerror(errno) : "not a directory");
      return 2;
    }
  }
  if (o->peer && (check_file_arg("--peer", o->peer_gguf) || check_file_arg("--peer-script", o->peer_script)))
    return 2;
  return -1;
}

/* The table's header lines, before any cell has run. */
static void print_header(const bench_opts *o) {
  printf("model %s, KV cache %s, %d threads, %d repeats (medians); decode roofline = triad bandwidth / "
         "bytes per decoded token; prefill 'GF/s' = its FLOP rate, 'mm GF/s' = the platform's "
         "own matmul rate on the model's main matrix type (the matrices line), both measured in "
         "each run; %%mm = prefill / mm; %%peak = prefill / the FMA peak of the kernel variant "
         "(see the fma line); %%bf16 = prefill / the bf16 dot-product peak, where the prefill "
         "uses it (bf16 matrices, '+bf16act': activations rounded to bf16, VDPBF16PS), else -\n",
         o->model_dir, o->kv_type ? o->kv_type : "f32", o->threads, o->repeats);
  if (o->baseline)
    printf("baseline: the same cells with the plugins of %s, alternating with this side run by "
           "run; '/b' = median of the per-run ratios this side / baseline\n",
           o->baseline_dir ? o->baseline_dir : "the default search (no --plugin-dir)");
}

/* The whole run: machine figures, cells done, failures, and every cell's
 * median FMA peaks for the run's summary line. */
typedef struct bench_run {
  mi_bandwidth bw;
  json_t *jcells;
  int failures, total, done, peer_failures;
  char peer_why[256];
  double cell_fma[MAX_CELLS * MAX_CELLS], cell_fma1[MAX_CELLS * MAX_CELLS], cell_fmaa[MAX_CELLS * MAX_CELLS],
      cell_bf1[MAX_CELLS * MAX_CELLS], cell_bf[MAX_CELLS * MAX_CELLS];
  int n_fma, n_bf, shown_path;
  char variant[32];
} bench_run;

/* One cell's runs (at most 100 repeats): this side's n, the peer's pn, the
 * baseline's bn with the paired ratios rpre/rdec. */
typedef struct cell_samples {
  double ttft[100], pre[100], dec[100], rss[100], peak[100], fma[100], fma1[100], fmaa[100], bf[100], bf1[100];
  double pttft[100], ppre[100], pdec[100], prss[100];
  double bttft[100], bpre[100], bdec[100], brss[100], rpre[100], rdec[100];
  char bconf[1024];
  int n, pn, bn, peer_failed;
  cell_result last; /* this side's last run */
} cell_samples;

/* The baseline's run br beside this side's cr, or its failure counted. */
static void add_baseline(bench_run *b, cell_samples *s, int P, int G, int b_ok, const cell_result *cr, const cell_result *br) {
  if (b_ok) {
    snprintf(s->bconf, sizeof s->bconf, "%s", br->conf);
    s->bttft[s->bn] = br->ttft_ms;
    s->bpre[s->bn] = br->prefill_tps;
    s->bdec[s->bn] = br->decode_tps;
    s->brss[s->bn] = br->peak_rss_mib;
    /* paired ratios: both runs of this repeat saw about the same host */
    s->rpre[s->bn] = br->prefill_tps > 0 ? cr->prefill_tps / br->prefill_tps : 0;
    s->rdec[s->bn++] = br->decode_tps > 0 ? cr->decode_tps / br->decode_tps : 0;
  } else {
    fprintf(stderr, "\nmi-bench: baseline failed on prompt %d gen %d: %s\n", P, G, br->err);
    b->failures++;
  }
}

/* The peer (llama.cpp) on the same cell, once. */
static void add_peer(const bench_opts *o, bench_run *b, cell_samples *s, int P, int G) {
  peer_result pr;
  char why[256] = "";
  if (run_peer(o, P, G, &pr, why, sizeof why) == 0) {
    s->pttft[s->pn] = pr.ttft_ms;
    s->ppre[s->pn] = pr.prefill_tps;
    s->pdec[s->pn] = pr.decode_tps;
    s->prss[s->pn++] = pr.peak_rss_mib;
  } else {
    fprintf(stderr, "\nmi-bench: peer failed on prompt %d gen %d: %s\n", P, G, why);
    if (!b->peer_failures++) snprintf(b->peer_why, sizeof b->peer_why, "%s", why);
    s->peer_failed++;
  }
}

/* Repeat r of cell (P, G): this side, the baseline alternating with it, the
 * peer. -1 when this side failed (the cell's repeats end there). */
static int run_repeat(const bench_opts *o, bench_run *b, cell_samples *s, int P, int G, int r) {
  fprintf(stderr, "\rmi-bench: cell %d/%d (prompt %d, gen %d) run %d/%d      ", b->done + 1, b->total, P, G, r + 1,
          o->repeats);
  static cell_result cr, br; /* large: off the stack */
  int b_ok = 0;
  /* the baseline runs before this side on odd repeats: neither side
   * always gets the first (or the warmer) slot */
  if (o->baseline && r % 2 == 1) b_ok = run_baseline(o, P, G, &br) == 0;
  if (run_cell_forked(o, P, G, &cr) != 0) {
    fprintf(stderr, "\nmi-bench: prompt %d gen %d: %s\n", P, G, cr.err);
    b->failures++;
    return -1;
  }
  s->ttft[s->n] = cr.ttft_ms;
  s->pre[s->n] = cr.prefill_tps;
  s->dec[s->n] = cr.decode_tps;
  s->peak[s->n] = cr.peak_gflops;
  s->fma[s->n] = cr.fma_gflops;
  s->fma1[s->n] = cr.fma_thread_gflops;
  s->fmaa[s->n] = cr.fma_all_gflops;
  s->bf[s->n] = cr.bf16_gflops;
  s->bf1[s->n] = cr.bf16_thread_gflops;
  s->rss[s->n++] = cr.peak_rss_mib;
  s->last = cr;
  if (o->baseline && r % 2 == 0) b_ok = run_baseline(o, P, G, &br) == 0;
  if (o->baseline && b_ok && b->done == 0 && r == 0) {
    fprintf(stderr, "\nmi-bench: this side loads %s; the baseline %s\n", cr.conf, br.conf);
    if (strcmp(cr.conf, br.conf) == 0)
      fprintf(stderr, "mi-bench: warning: both sides load the same plugins.conf: the "
                      "ratios compare a build with itself\n");
  }
  if (o->baseline) add_baseline(b, s, P, G, b_ok, &cr, &br);
  if (o->peer) add_peer(o, b, s, P, G);
  return 0;
}

/* A cell's figures: medians over its runs, and what they are against. */
typedef struct cell_figs {
  double ttft, pre, dec, rss, peak, fma, fma1, fmaa, bf, bf1;
  double flops_tok, pre_frac, fma_frac, bf_frac, bytes, roof;
  double p_pre, p_dec, p_ttft, p_rss; /* the peer's; 0 without runs */
} cell_figs;

static void cell_figures(const bench_run *b, cell_samples *s, int P, int G, cell_figs *f) {
  int n = s->n, pn = s->pn;
  const cell_result *last = &s->last;
  f->ttft = median(s->ttft, n), f->pre = median(s->pre, n), f->dec = median(s->dec, n);
  f->rss = median(s->rss, n), f->peak = median(s->peak, n), f->fma = median(s->fma, n);
  f->fma1 = median(s->fma1, n), f->fmaa = median(s->fmaa, n), f->bf = median(s->bf, n);
  f->bf1 = median(s->bf1, n);
  /* prefill arithmetic: every matmul once per prompt token, attention
   * over (P+1)/2 positions on average under the causal mask */
  f->flops_tok = (double)last->prefill_flops_token + (double)last->attn_flops_pos * (P + 1) / 2.0;
  f->pre_frac = f->peak > 0 && f->flops_tok > 0 ? f->pre * f->flops_tok / 1e9 / f->peak : 0;
  f->fma_frac = f->fma > 0 && f->flops_tok > 0 ? f->pre * f->flops_tok / 1e9 / f->fma : 0;
  f->bf_frac = f->bf > 0 && f->flops_tok > 0 ? f->pre * f->flops_tok / 1e9 / f->bf : 0;
  /* bytes a decode step moves on average over the cell: all weights a
   * token touches + the KV cache up to its position + a recurrent
   * model's fixed state, read and written every step (hybrids) */
  double avg_pos = P + G / 2.0;
  f->bytes = (double)last->decode_weight_bytes + (double)last->state_bytes_token * avg_pos +
             2.0 * (double)last->state_bytes_fixed;
  f->roof = b->bw.triad_gbs * 1e9 / f->bytes;
  f->p_pre = pn ? median(s->ppre, pn) : 0, f->p_dec = pn ? median(s->pdec, pn) : 0;
  f->p_ttft = pn ? median(s->pttft, pn) : 0, f->p_rss = pn ? median(s->prss, pn) : 0;
}

/* The baseline's figures (medians of its runs, and the ratios this side /
 * baseline) into the cell's JSON object jc. */
static void cell_json_baseline(const bench_opts *o, cell_samples *s, const cell_figs *f, json_t *jc) {
  int bn = s->bn;
  double b_pre = median(s->bpre, bn), b_dec = median(s->bdec, bn);
  json_object_set_new(
      jc, "baseline",
      json_pack("{s:s?,s:s,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "plugin_dir", o->baseline_dir,
                "plugins_conf", s->bconf, "runs", bn, "ttft_ms", median(s->bttft, bn), "prefill_tps", b_pre,
                "decode_tps", b_dec, "peak_rss_mib", median(s->brss, bn), "prefill_ratio",
                b_pre > 0 ? f->pre / b_pre : 0, "decode_ratio", b_dec > 0 ? f->dec / b_dec : 0,
                "prefill_ratio_paired", median(s->rpre, bn), "decode_ratio_paired",
                median(s->rdec, bn)));
}

/* The peer's figures (null when it gave none) into jc. */
static void cell_json_peer(const cell_samples *s, const cell_figs *f, json_t *jc) {
  if (s->pn)
    json_object_set_new(jc, "peer",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "ttft_ms", f->p_ttft,
                                  "prefill_tps", f->p_pre, "decode_tps", f->p_dec,
                                  "peak_rss_mib", f->p_rss, "prefill_ratio",
                                  f->p_pre > 0 ? f->pre / f->p_pre : 0, "decode_ratio",
                                  f->p_dec > 0 ? f->dec / f->p_dec : 0));
  else
    json_object_set_new(jc, "peer", json_null()); /* no figure, not a 0 ratio */
  json_object_set_new(jc, "peer_failed_runs", json_integer(s->peer_failed));
}

/* The cell as a JSON object (--json, --json-file). */
static json_t *cell_json(const bench_opts *o, cell_samples *s, const cell_figs *f, int P, int G) {
  const cell_result *last = &s->last;
  json_t *jc = json_pack("{s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "prompt", P,
                         "gen", G, "ttft_ms", f->ttft, "prefill_tps", f->pre,
                         "prefill_gflops", f->pre * f->flops_tok / 1e9, "peak_matmul_gflops",
                         f->peak, "prefill_peak_fraction", f->pre_frac, "decode_tps", f->dec,
                         "roofline_tps", f->roof, "roofline_fraction", f->dec / f->roof,
                         "peak_rss_mib", f->rss, "bytes_per_token", f->bytes);
  /* the FMA roofline (the figure %peak in the table refers to) */
  json_object_set_new(jc, "variant", json_string(last->variant));
  json_object_set_new(jc, "plugins_conf", json_string(last->conf));
  json_object_set_new(jc, "fma_peak_gflops", json_real(f->fma));
  json_object_set_new(jc, "fma_peak_thread_gflops", json_real(f->fma1));
  json_object_set_new(jc, "fma_measured_all_gflops", json_real(f->fmaa));
  json_object_set_new(jc, "prefill_fma_fraction", json_real(f->fma_frac));
  json_object_set_new(jc, "matmul_fma_fraction", json_real(f->fma > 0 ? f->peak / f->fma : 0));
  if (s->bn) cell_json_baseline(o, s, f, jc);
  /* the prefill kernel path: "+bf16act" in the variant = bf16-weight
   * matmuls from a few rows on VDPBF16PS with activations rounded to
   * bf16 (the matmul contract's mode "bf16_activations") */
  json_object_set_new(jc, "prefill_matmul", json_string(prefill_path_id(last)));
  json_object_set_new(jc, "matrix_dtype", json_string(mi_dtype_name(last->mm_dtype)));
  json_object_set_new(jc, "matrix_dtypes", json_string(last->wmix));
  if (f->bf > 0) {
    json_object_set_new(jc, "bf16dot_peak_gflops", json_real(f->bf));
    json_object_set_new(jc, "bf16dot_peak_thread_gflops", json_real(f->bf1));
    json_object_set_new(jc, "prefill_bf16dot_fraction", json_real(f->bf_frac));
  }
  if (o->peer) cell_json_peer(s, f, jc);
  /* decode tokens/s by position (last repeat): [first position, tok/s] */
  json_t *jw = json_array();
  for (int w = 0; w < last->n_windows; w++)
    json_array_append_new(jw, json_pack("[i,f]", P + w * last->win, last->window_tps[w]));
  json_object_set_new(jc, "decode_by_position", jw);
  /* the memory bound: weights + the KV cache of the whole
   * context (prompt + gen) + 10% */
  double w_mib = (double)last->weight_bytes / 1048576.0;
  double kv_mib = (double)last->state_bytes_token * (P + G) / 1048576.0;
  json_object_set_new(jc, "weights_mib", json_real(w_mib));
  json_object_set_new(jc, "kv_cache_mib", json_real(kv_mib));
  json_object_set_new(jc, "rss_bound_mib", json_real(1.1 * (w_mib + kv_mib)));
  return jc;
}
/* The table's row for the cell, after the header's last lines when this is
 * the first cell (the kernel path is known once a cell has run). */
static void print_row(const bench_opts *o, bench_run *b, cell_samples *s, const cell_figs *f, int P, int G) {
  const cell_result *last = &s->last;
  int bn = s->bn;
  fprintf(stderr, "\r%80s\r", "");
  if (!b->shown_path++) {
    printf("matrices: %s of their bytes; 'mm GF/s' runs on %s\n", last->wmix, mi_dtype_name(last->mm_dtype));
    printf("prefill matmul path: variant %s, %s\n", last->variant, prefill_path_text(last));
    printf("%6s %6s | %9s %11s %7s %7s %6s %6s %6s %10s %10s %6s %9s", "prompt", "gen",
           "TTFT ms", "prefill t/s", "GF/s", "mm GF/s", "%mm", "%peak", "%bf16", "decode t/s",
           "roof t/s", "%roof", "RSS MiB");
    if (o->peer) printf(" | %11s %10s | %7s %7s", "peer pre", "peer dec", "x pre", "x dec");
    printf("\n");
  }
  char bfcol[16] = "     -";
  if (f->bf > 0) snprintf(bfcol, sizeof bfcol, "%5.0f%%", 100 * f->bf_frac);
  printf("%6d %6d | %9.1f %11.1f %7.1f %7.0f %5.0f%% %5.0f%% %6s %10.2f %10.2f %5.0f%% %9.1f", P,
         G, f->ttft, f->pre, f->pre * f->flops_tok / 1e9, f->peak, 100 * f->pre_frac, 100 * f->fma_frac,
         bfcol, f->dec, f->roof, 100 * f->dec / f->roof, f->rss);
  if (o->baseline) {
    /* medians of the paired (same-repeat) ratios */
    double b_pre = bn ? median(s->bpre, bn) : 0, b_dec = bn ? median(s->bdec, bn) : 0;
    printf(" | %9.1f %9.2f | %6.3fx %6.3fx", b_pre, b_dec, bn ? median(s->rpre, bn) : 0,
           bn ? median(s->rdec, bn) : 0);
  }
  if (o->peer && s->pn)
    printf(" | %11.1f %10.2f | %6.2fx %6.2fx", f->p_pre, f->p_dec, f->p_pre > 0 ? f->pre / f->p_pre : 0,
           f->p_dec > 0 ? f->dec / f->p_dec : 0);
  else if (o->peer)
    printf(" | %11s %10s | %7s %7s", "n/a", "n/a", "n/a", "n/a");
  printf("\n");
  (void)mi_out_flush_stdout(); /* a failure is reported at exit, with its errno */
}

/* One cell (prompt P, generation G): its repeats, figures, JSON and row. */
static void run_one_cell(const bench_opts *o, bench_run *b, int P, int G) {
  static cell_samples s; /* large: off the stack */
  memset(&s, 0, sizeof s);
  for (int r = 0; r < o->repeats; r++)
    if (run_repeat(o, b, &s, P, G, r) != 0) break;
  b->done++;
  if (s.n == 0) return;
  cell_figs f;
  cell_figures(b, &s, P, G, &f);
  if (f.fma > 0) {
    b->cell_fma[b->n_fma] = f.fma;
    b->cell_fmaa[b->n_fma] = f.fmaa;
    b->cell_fma1[b->n_fma++] = f.fma1;
  }
  if (f.bf > 0) {
    b->cell_bf[b->n_bf] = f.bf;
    b->cell_bf1[b->n_bf++] = f.bf1;
  }
  snprintf(b->variant, sizeof b->variant, "%s", s.last.variant);
  json_array_append_new(b->jcells, cell_json(o, &s, &f, P, G));
  if (!o->json) print_row(o, b, &s, &f, P, G);
}

/* The run's JSON (stdout with --json, the file with --json-file), after the
 * fma summary line of the table; the exit status. */
static int finish(const bench_opts *o, bench_run *b) {
  fprintf(stderr, "\r%80s\r", "");
  double fma_roof = median(b->cell_fma, b->n_fma), fma_one = median(b->cell_fma1, b->n_fma),
         fma_all = median(b->cell_fmaa, b->n_fma), bf_roof = median(b->cell_bf, b->n_bf),
         bf_one = median(b->cell_bf1, b->n_bf);
  if (!o->json && b->n_fma > 0) {
    printf("fma: FMA peak of variant %s (register-only loop, medians over cells): %.1f GFLOP/s "
           "per thread; roofline %.1f = %d threads x that; measured with all %d at once: %.1f",
           b->variant, fma_one, fma_roof, o->threads, o->threads, fma_all);
    if (b->n_bf > 0)
      printf("; bf16 dot (VDPBF16PS, prefill's bf16-weight matmuls with activations rounded to "
             "bf16): %.1f per thread, %.1f for %d", bf_one, bf_roof, o->threads);
    printf("\n");
  }
  else if (!o->json && b->variant[0])
    printf("fma: no FMA loop for variant %s: %%peak not measured\n", b->variant);
  json_t *root = json_pack("{s:s,s:i,s:i,s:s,s:{s:f,s:f},s:o}", "model", o->model_dir, "threads",
                           o->threads, "repeats", o->repeats, "kv_type",
                           o->kv_type ? o->kv_type : "f32", "bandwidth_gbs", "triad", b->bw.triad_gbs,
                           "read", b->bw.read_gbs, "cells", b->jcells);
  json_object_set_new(root, "warmup", json_integer(o->warmup));
  if (o->baseline)
    json_object_set_new(root, "baseline_plugin_dir",
                        o->baseline_dir ? json_string(o->baseline_dir) : json_string("default"));
  if (o->plugin_dir) json_object_set_new(root, "plugin_dir", json_string(o->plugin_dir));
  json_object_set_new(root, "fma_peak",
                      json_pack("{s:s,s:f,s:f,s:f}", "variant", b->variant, "thread_gflops", fma_one,
                                "roofline_gflops", fma_roof, "measured_all_gflops", fma_all));
  if (b->n_bf > 0)
    json_object_set_new(root, "bf16dot_peak",
                        json_pack("{s:s,s:f,s:f}", "variant", b->variant, "thread_gflops", bf_one,
                                  "roofline_gflops", bf_roof));
  char *js = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  json_decref(root);
  if (o->json && js) puts(js);
  if (o->json_file && js) {
    /* whole or not at all: a temp file, every write checked, renamed */
    char werr[1200];
    size_t jl = strlen(js);
    js[jl] = '\n'; /* json_dumps' NUL becomes the final newline */
    if (mi_out_write_file(o->json_file, js, jl + 1, werr, sizeof werr) != 0) {
      fprintf(stderr, "mi-bench: %s\n", werr);
      b->failures++;
    }
  } else if (o->json_file) {
    fprintf(stderr, "mi-bench: %s: nothing written: out of memory\n", o->json_file);
    b->failures++;
  }
  free(js);
  if (b->peer_failures) { /* a comparison that did not happen is not a result */
    fprintf(stderr, "mi-bench: the peer (node %s) failed on %d run%s (first: %s): its figures and ratios are n/a\n",
            o->peer_script, b->peer_failures, b->peer_failures == 1 ? "" : "s", b->peer_why);
    return mi_out_finish("mi-bench", 3);
  }
  return mi_out_finish("mi-bench", b->failures ? 1 : 0);
}

int main(int argc, char **argv) {
  bench_opts o;
  mi_out_init();
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  static bench_run b;
  /* machine figures, measured once per run with the same thread count */
  size_t stream_mib = 256;
  const char *sm = getenv("MI_BENCH_STREAM_MIB");
  if (sm && *sm) {
    char *end = NULL;
    long v = strtol(sm, &end, 10);
    if (!end || *end || v < 1 || v > 65536) {
      fprintf(stderr, "mi-bench: MI_BENCH_STREAM_MIB=%s: a number of MiB, 1 to 65536\n", sm);
      return 2;
    }
    stream_mib = (size_t)v;
  }
  if (mi_measure_bandwidth(o.threads, stream_mib << 20, 5, &b.bw) != 0) {
    fprintf(stderr, "mi-bench: cannot allocate the STREAM arrays\n");
    return 1;
  }
  fprintf(stderr, "mi-bench: memory bandwidth, %d threads: triad %.1f GB/s, read %.1f GB/s%s\n",
          o.threads, b.bw.triad_gbs, b.bw.read_gbs, stream_mib == 256 ? "" : " (MI_BENCH_STREAM_MIB arrays)");
  b.jcells = json_array();
  if (!o.json) print_header(&o);
  b.total = o.n_prompts * o.n_gens;
  for (int pi = 0; pi < o.n_prompts; pi++)
    for (int gi = 0; gi < o.n_gens; gi++) run_one_cell(&o, &b, o.prompts[pi], o.gens[gi]);
  return finish(&o, &b);
}
