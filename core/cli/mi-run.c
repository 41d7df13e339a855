/* mi-run: run a model directory on a platform, llama.cpp-style.
 *
 * The answer goes to stdout (plain text, or JSON lines with --json); logs,
 * progress and --stats go to stderr. mi-run never reads stdin unless told
 * to (-f -), so it never waits on a pipe or a closed terminal. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli_common.h"
#include "core/runtime/session.h"
#include "core/runtime/host.h"
#include "core/runtime/loader.h"
#include "core/runtime/model_input.h"
#include "core/util/num.h"
#include "core/util/out.h"

#define MAX_STOPS 16

#ifndef MI_VERSION
#define MI_VERSION "0.1.0"
#endif

static void usage(FILE *f) {
  fputs("usage: mi-run -m MODEL_DIR (-p PROMPT | -f FILE | --prompts FILE | -i) [options]\n"
        "       mi-run [--plugin-dir DIR] --list-plugins\n"
        "\n"
        "model and prompt:\n"
        "  -m, --model DIR          Hugging Face model directory (config.json, *.safetensors,\n"
        "                           tokenizer.json), or a GGUF file (F32, F16, BF16, Q8_0, Q4_0,\n"
        "                           Q4_K, Q6_K: Q4_K_M files; docs/gguf.md)\n"
        "  -p, --prompt TEXT        prompt text (special tokens like <|im_start|> are parsed)\n"
        "  -f, --file FILE          read the prompt from FILE ('-' reads stdin)\n"
        "      --prompts FILE       several prompts, one JSON string per line ('-' reads stdin), each\n"
        "                           generated on its own from an empty context, one model load for all\n"
        "                           (with --json each starts with {\"prompt_index\":I,\"prompt_ids\":[...]})\n"
        "      --chat               wrap the prompt in the chat template the model declares\n"
        "  -i, --interactive        a conversation: one user turn per line of stdin (end a line with '\\'\n"
        "                           to go on), each answered with the whole conversation so far;\n"
        "                           /reset forgets it, /exit or the end of input ends it\n"
        "      --system TEXT        system message for --chat\n"
        "      --no-think           --chat: turn reasoning off (templates with <think> blocks)\n"
        "generation:\n"
        "  -n, --n-predict N        tokens to generate (default 128; -1: until EOS/context end)\n"
        "  -c, --ctx-size N         context size in tokens (default: prompt + n-predict)\n"
        "  -b, --batch-size N       prefill batch (tokens per forward chunk, default 512)\n"
        "      --kv-type T          KV cache type: f32 (default, exact), f16 or bf16 (half the memory)\n"
        "      --temp T             temperature (default 0.8; 0 = greedy)\n"
        "      --top-k K            (default 40; 0 = off)\n"
        "      --top-p P            (default 0.95; 1 = off)\n"
        "      --min-p P            (default 0.05; 0 = off)\n"
        "      --repeat-penalty R   (default 1.0 = off)\n"
        "      --repeat-last-n N    (default 64)\n"
        "      --seed N             sampling seed (default 24301)\n"
        "      --ignore-eos         keep generating past end-of-sequence tokens\n"
        "      --stop STR           stop when STR is generated (repeatable)\n"
        "output:\n"
        "      --json               JSON lines: {\"prompt_ids\":[...]} then one line per token\n"
        "      --top-logprobs K     with --json: the K best log-probabilities per step\n"
        "      --prompt-logprobs    with --json: a line with every prompt token's log-probability\n"
        "                           (and its top K), as mi-serve's completions echo reports them\n"
        "      --stats              load time, TTFT, prefill/decode tokens/s, peak RSS\n"
        "  -v, --verbose            more logging on stderr (repeat for debug)\n"
        "plugins:\n"
        "      --plugin-dir DIR     look for plugins.conf and plugins in DIR first\n"
        "      --plugins-conf FILE  use this plugins.conf\n"
        "      --platform NAME      use this platform plugin (default: best score)\n"
        "  -t, --threads N          threads for the CPU platform (default: all cores)\n"
        "      --mmap               map the weight files (no copy; 4 KiB pages)\n"
        "      --no-mmap            read the weights into huge pages (default on the CPU platform:\n"
        "                           faster decode, one copy at load time)\n"
        "      --mem-limit SIZE     memory the run may use (e.g. 6G; default: MemAvailable, or the\n"
        "                           cgroup's memory.max if lower; also $MI_MEM_LIMIT): a model whose\n"
        "                           weights + state + scratch need more is refused before loading\n"
        "      --tp N               tensor parallelism over N ranks (launch with mpirun -np N)\n"
        "      --list-plugins       list plugins found, loaded or rejected (and why), and exit\n"
        "  -h, --help               this help\n"
        "      --version            version and plugin ABI\n"
        "\n"
        "Plugin search order: --plugin-dir, then $MI_PLUGIN_PATH (colon-separated), then\n"
        "<exe>/../lib/metainfer and <exe> (next to the executable).\n",
        f);
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
  return cli_parse_long("mi-run", opt, s, lo, hi, out);
}

static int parse_float(const char *opt, const char *s, double lo, double hi, float *out) {
  double v;
  if (mi_opt_double("mi-run", opt, s, lo, hi, &v)) return -1;
  *out = (float)v;
  return 0;
}

/* Reads a whole file (or stdin for "-"). NULL with a message on error. */
static char *read_all(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "mi-run: %s: %s\n", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    if (n + 1 >= cap) {
      if (cap > (size_t)256 << 20) {
        fprintf(stderr, "mi-run: %s: prompt file larger than 256 MiB\n", path);
        free(buf);
        buf = NULL;
        break;
      }
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    n += r;
    if (r == 0) {
      if (ferror(f)) {
        fprintf(stderr, "mi-run: %s: read error\n", path);
        free(buf);
        buf = NULL;
      }
      break;
    }
  }
  if (f != stdin) fclose(f);
  if (buf) {
    buf[n] = 0;
    *len = n;
  }
  return buf;
}

typedef struct run_out {
  int json;
  int quiet;      /* a tensor-parallel rank other than 0 */
  char *answer;   /* -i: the visible text generated, kept for the next turn (NULL: not kept) */
  size_t alen, acap;
  int keep;       /* keep the answer */
} run_out;

static void keep_text(run_out *o, const char *s, size_t n) {
  if (!o->keep || !n) return;
  if (o->alen + n + 1 > o->acap) {
    size_t c = o->acap ? o->acap : 256;
    while (o->alen + n + 1 > c) c *= 2;
    char *p = realloc(o->answer, c);
    if (!p) return; /* the answer stays as far as it got */
    o->answer = p, o->acap = c;
  }
  memcpy(o->answer + o->alen, s, n);
  o->alen += n;
  o->answer[o->alen] = 0;
}

static int on_token(void *user, const mi_gen_token *t) {
  run_out *o = user;
  keep_text(o, t->visible, t->visible_len);
  if (o->quiet) return 0;
  if (!o->json) {
    fwrite(t->visible, 1, t->visible_len, stdout);
    /* nobody can read the answer (stdout closed, disk full): stop now;
     * main reports it and exits 1 */
    return mi_out_flush_stdout() != 0;
  }
  json_t *line = json_object();
  json_object_set_new(line, "step", json_integer(t->step));
  json_object_set_new(line, "token_id", json_integer(t->id));
  json_t *text = json_stringn(t->text, t->text_len);
  json_object_set_new(line, "text", text ? text : json_string("\xef\xbf\xbd"));
  json_object_set_new(line, "logprob", json_real(t->logprob));
  if (t->n_top > 0) {
    json_t *top = json_array();
    for (int i = 0; i < t->n_top; i++)
      json_array_append_new(top, json_pack("[I,f]", (json_int_t)t->top_ids[i], t->top_lps[i]));
    json_object_set_new(line, "top_logprobs", top);
  }
  char *s = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(10));
  if (s) {
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
  }
  json_decref(line);
  return !s || mi_out_flush_stdout() != 0;
}

/* What every prompt of one mi-run shares. */
typedef struct run_opts {
  const char *src_name, *model_dir, *system_msg;
  int chat, no_think, json, quiet, stats, prompt_logprobs;
  long top_logprobs;
  const mi_gen_params *gp;
  const char **stops;
  size_t n_stops;
} run_opts;

/* --prompt-logprobs: {"prompt_logprobs":[null, {"id","logprob","top":[[id, lp]...]}, ...]},
 * from a pass over the prompt with every position's logits (as mi-serve's
 * echo computes them). */
static int print_prompt_logprobs(mi_session *eng, const int32_t *ids, size_t n_ids,
                                 const mi_gen_params *p, char *err, size_t err_len) {
  mi_gen_params gp = *p;
  gp.prompt_logprobs = 1;
  gp.n_predict = 0;
  gp.n_ctx = (int64_t)n_ids;
  gp.defer_prefill = 0;
  mi_gen *g;
  if (mi_gen_begin(eng, ids, n_ids, &gp, &g, err, err_len) != 0) return -1;
  json_t *arr = json_array();
  json_array_append_new(arr, json_null());
  for (size_t i = 1; i < n_ids; i++) {
    double lp;
    const int32_t *ti;
    const double *tl;
    int nt;
    if (mi_gen_prompt_logprob(g, (int64_t)i, &lp, &ti, &tl, &nt) != 0) break;
    json_t *top = json_array();
    for (int k = 0; k < nt; k++) json_array_append_new(top, json_pack("[i,f]", ti[k], tl[k]));
    json_array_append_new(arr, json_pack("{s:i,s:f,s:o}", "id", ids[i], "logprob", lp, "top", top));
  }
  mi_gen_end(g, NULL);
  json_t *o = json_pack("{s:o}", "prompt_logprobs", arr);
  char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(o);
  if (s) printf("%s\n", s);
  free(s);
  (void)mi_out_flush_stdout();
  return 0;
}

/* One prompt: chat-rendered when asked (turns: the conversation so far, the
 * last a user turn; NULL: the system message, if any, and the prompt),
 * tokenized, generated, printed (text, or --json lines), with --stats after
 * it. index >= 0: --prompts' index, said in its first --json line. answer
 * (may be NULL): the visible text generated, malloc'd. 0, or -1 after a line
 * on stderr. */
static int run_prompt(mi_session *eng, const run_opts *r, const char *prompt_text, size_t plen, long index,
                      const mi_chat_msg *turns, size_t n_turns, int32_t **ids_out, size_t *n_ids_out,
                      char **rendered_out, char **answer) {
  mi_gen_params gp = *r->gp;
  const char *src_name = r->src_name, *model_dir = r->model_dir;
  const int json = r->json, quiet = r->quiet, stats = r->stats;
  char err[2048] = "";
  int32_t *ids = NULL;
  size_t n_ids = 0;
  char *rendered = NULL;
  int rc = -1;
  const char *to_encode = prompt_text;
  size_t enc_len = plen;
  run_out ro = {.json = json, .quiet = quiet, .keep = answer != NULL};
  if (answer) *answer = NULL;
  if (r->chat) {
    mi_chat_msg one[2];
    size_t nm = 0;
    if (!turns) {
      if (r->system_msg) one[nm++] = (mi_chat_msg){"system", r->system_msg};
      one[nm++] = (mi_chat_msg){"user", prompt_text};
      turns = one, n_turns = nm;
    }
    /* the model folder's template, rendered by the Jinja engine (core/template) */
    char cerr[600];
    rendered = mi_tokenizer_chat_render(eng->tok, turns, n_turns, 1, !r->no_think, cerr, sizeof cerr);
    if (!rendered) {
      /* a GGUF file's template is its tokenizer.chat_template key */
      if (mi_model_input_is_gguf(eng->model_dir) && !mi_tokenizer_chat_template(eng->tok))
        fprintf(stderr, "mi-run: %s: the file has no tokenizer.chat_template (--chat needs one; -p alone runs the raw prompt)\n",
                eng->model_dir);
      else
        fprintf(stderr, "mi-run: %s/tokenizer_config.json: %s\n", eng->model_dir, cerr);
      goto done;
    }
    to_encode = rendered;
    enc_len = strlen(rendered);
  }
  /* a raw prompt as HF's tokenizer(text) encodes it (a post-processor's BOS first);
   * a rendered chat template writes its own */
  int trc = r->chat ? mi_tokenizer_encode(eng->tok, to_encode, enc_len, 1, &ids, &n_ids)
                    : mi_tokenizer_encode_prompt(eng->tok, to_encode, enc_len, 1, &ids, &n_ids);
  if (trc == MI_TOK_EREGEX) { /* the model's file is at fault, not the prompt */
    fprintf(stderr, "mi-run: %s/tokenizer.json: cannot tokenize the prompt: %s\n", model_dir,
            mi_tokenizer_strerror(trc));
    goto done;
  }
  if (trc != 0) {
    fprintf(stderr, "mi-run: %s: cannot tokenize the prompt: %s\n",
            src_name, mi_tokenizer_strerror(trc));
    goto done;
  }
  if (n_ids == 0) {
    fprintf(stderr, "mi-run: the prompt is empty\n");
    goto done;
  }
  if (json) {
    json_t *first = json_object(), *arr = json_array();
    for (size_t i = 0; i < n_ids; i++) json_array_append_new(arr, json_integer(ids[i]));
    if (index >= 0) json_object_set_new(first, "prompt_index", json_integer(index));
    json_object_set_new(first, "prompt_ids", arr);
    char *s = json_dumps(first, JSON_COMPACT);
    printf("%s\n", s);
    (void)mi_out_flush_stdout();
    free(s);
    json_decref(first);
  }
  gp.top_logprobs = json ? (int)r->top_logprobs : 0;
  gp.stop = r->stops;
  gp.n_stop = r->n_stops;
  if (json && r->prompt_logprobs && print_prompt_logprobs(eng, ids, n_ids, &gp, err, sizeof err) != 0) {
    fprintf(stderr, "mi-run: %s\n", err);
    goto done;
  }
  mi_gen_stats st;
  if (mi_generate(eng, ids, n_ids, &gp, on_token, &ro, &st, err, sizeof err) != 0) {
    fprintf(stderr, "mi-run: %s\n", err);
    goto done;
  }
  keep_text(&ro, st.tail, strlen(st.tail));
  if (!json && !quiet) {
    fputs(st.tail, stdout);
    fputc('\n', stdout);
  }
  (void)mi_out_flush_stdout();
  if (stats && !quiet) {
    double pre_tps = st.prefill_s > 0 ? st.n_prompt / st.prefill_s : 0;
    double dec_tps = st.n_gen > 1 && st.decode_s > 0 ? (st.n_gen - 1) / st.decode_s : 0;
    double rss_mib = mi_peak_rss_bytes() / 1048576.0;
    fprintf(stderr,
            "mi-run: load %.3f s | prompt %lld tok, prefill %.1f tok/s | TTFT %.1f ms | "
            "generated %lld tok, decode %.2f tok/s | ctx %lld | peak RSS %.1f MiB | stop: %s\n",
            eng->load_seconds, (long long)st.n_prompt, pre_tps, st.ttft_s * 1e3,
            (long long)st.n_gen, dec_tps, (long long)st.n_ctx, rss_mib, st.stop_reason);
    if (json) {
      printf("{\"stats\":{\"load_s\":%.6f,\"n_prompt\":%lld,\"prefill_tps\":%.3f,\"ttft_ms\":%.3f,"
             "\"n_gen\":%lld,\"decode_tps\":%.3f,\"n_ctx\":%lld,\"peak_rss_bytes\":%llu,"
             "\"stop_reason\":\"%s\"}}\n",
             eng->load_seconds, (long long)st.n_prompt, pre_tps, st.ttft_s * 1e3,
             (long long)st.n_gen, dec_tps, (long long)st.n_ctx,
             (unsigned long long)mi_peak_rss_bytes(), st.stop_reason);
    }
  }
  rc = 0;
done:
  *ids_out = ids;
  *n_ids_out = n_ids;
  *rendered_out = rendered;
  if (answer && rc == 0) *answer = ro.answer ? ro.answer : strdup("");
  else free(ro.answer);
  return rc;
}

/* -i: a conversation on stdin, one user turn a line (a line ending in '\\'
 * goes on on the next), each answered with the whole conversation rendered
 * through the model's template; "/reset" forgets it, "/exit" or the end of
 * input ends it. The prompt marker goes to stderr, and only on a terminal:
 * stdout holds the answers alone. Every turn is prefilled whole (no KV kept
 * between turns). 0, or 1 when some turn failed (each said on stderr). */
static int run_interactive(mi_session *eng, const run_opts *r) {
  mi_chat_msg *turns = NULL;
  size_t n = 0, cap = 0, lcap = 0, len = 0;
  char *line = NULL, *text = NULL;
  int failed = 0, tty = isatty(STDIN_FILENO);
  const size_t keep_sys = r->system_msg ? 1 : 0;
  for (;;) {
    if (tty) fputs(len ? ". " : "> ", stderr);
    ssize_t got = getline(&line, &lcap, stdin);
    if (got < 0) break;
    while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
    int more = got > 0 && line[got - 1] == '\\';
    if (more) line[--got] = 0;
    char *t = realloc(text, len + (size_t)got + 2);
    if (!t) break;
    text = t;
    memcpy(text + len, line, (size_t)got);
    len += (size_t)got;
    if (more) {
      text[len++] = '\n';
      continue;
    }
    text[len] = 0;
    size_t tl = len;
    len = 0;
    if (!text[strspn(text, " \t")]) continue;
    if (!strcmp(text, "/exit") || !strcmp(text, "/quit")) break;
    json_t *utf8 = json_stringn(text, tl); /* the same UTF-8 check as every prompt */
    json_decref(utf8);
    if (!utf8) {
      fprintf(stderr, "mi-run: stdin: this turn is not valid UTF-8; skipped\n");
      failed = 1;
      continue;
    }
    if (n + 2 > cap) {
      size_t c = cap ? 2 * cap : 16;
      mi_chat_msg *p = realloc(turns, c * sizeof *p);
      if (!p) break;
      turns = p, cap = c;
    }
    if (n == 0 && r->system_msg) turns[n++] = (mi_chat_msg){"system", strdup(r->system_msg)};
    if (!strcmp(text, "/reset")) {
      while (n > keep_sys) free((char *)turns[--n].content);
      if (tty) fputs("(conversation cleared)\n", stderr);
      continue;
    }
    turns[n++] = (mi_chat_msg){"user", strdup(text)};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *rendered = NULL, *answer = NULL;
    if (run_prompt(eng, r, text, tl, -1, turns, n, &ids, &n_ids, &rendered, &answer) != 0) {
      free((char *)turns[--n].content); /* the turn is forgotten: the next one starts where this one did */
      failed = 1;
    } else {
      turns[n++] = (mi_chat_msg){"assistant", answer};
    }
    free(ids);
    free(rendered);
  }
  while (n) free((char *)turns[--n].content);
  free(turns);
  free(line);
  free(text);
  return failed;
}

/* The command line (and the option strings made from it, which the plugins
 * and the session may keep pointers to). */
typedef struct cli_args {
  const char *model_dir, *prompt_arg, *prompt_file, *system_msg, *prompts_file;
  const char *plugin_dir, *conf_path, *platform, *kv_type;
  const char *stops[MAX_STOPS];
  size_t n_stops;
  int chat, no_think, json, stats, prompt_logprobs, list_plugins, verbose, interactive;
  long threads, batch, top_logprobs, tp;
  mi_gen_params gp;
  int weights_load;
  uint64_t mem_limit; /* 0: what the machine has (MemAvailable, cgroup) */
  char tbuf[32], bbuf[32];
} cli_args;

/* mi-run's long options (the short ones are in parse_args' optstring). */
enum {
  O_CHAT = 256, O_SYSTEM, O_NOTHINK, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_REPP, O_REPN, O_SEED,
  O_IGNEOS, O_STOP, O_JSON, O_TOPLP, O_STATS, O_PLUGDIR, O_CONF, O_PLATFORM, O_LIST, O_TP,
  O_KVTYPE, O_VERSION, O_MMAP, O_NOMMAP, O_MEMLIMIT, O_PROMPTS, O_PROMPTLP,
};
static const struct option longopts[] = {
    {"model", required_argument, 0, 'm'},       {"prompt", required_argument, 0, 'p'},
    {"file", required_argument, 0, 'f'},        {"chat", no_argument, 0, O_CHAT},
    {"interactive", no_argument, 0, 'i'},
    {"prompts", required_argument, 0, O_PROMPTS},
    {"system", required_argument, 0, O_SYSTEM}, {"no-think", no_argument, 0, O_NOTHINK},
    {"n-predict", required_argument, 0, 'n'},   {"ctx-size", required_argument, 0, 'c'},
    {"batch-size", required_argument, 0, 'b'},  {"temp", required_argument, 0, O_TEMP},
    {"top-k", required_argument, 0, O_TOPK},    {"top-p", required_argument, 0, O_TOPP},
    {"min-p", required_argument, 0, O_MINP},    {"repeat-penalty", required_argument, 0, O_REPP},
    {"repeat-last-n", required_argument, 0, O_REPN}, {"seed", required_argument, 0, O_SEED},
    {"ignore-eos", no_argument, 0, O_IGNEOS},   {"stop", required_argument, 0, O_STOP},
    {"json", no_argument, 0, O_JSON},           {"top-logprobs", required_argument, 0, O_TOPLP},
    {"prompt-logprobs", no_argument, 0, O_PROMPTLP},
    {"stats", no_argument, 0, O_STATS},         {"verbose", no_argument, 0, 'v'},
    {"plugin-dir", required_argument, 0, O_PLUGDIR}, {"plugins-conf", required_argument, 0, O_CONF},
    {"platform", required_argument, 0, O_PLATFORM}, {"threads", required_argument, 0, 't'},
    {"list-plugins", no_argument, 0, O_LIST},   {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, O_VERSION},
    {"tp", required_argument, 0, O_TP},         {"kv-type", required_argument, 0, O_KVTYPE},
    {"mmap", no_argument, 0, O_MMAP},           {"no-mmap", no_argument, 0, O_NOMMAP},
    {"mem-limit", required_argument, 0, O_MEMLIMIT},
    {0, 0, 0, 0}};

/* The command line into a; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, cli_args *a) {
  a->threads = -1, a->tp = 1;
  a->gp = (mi_gen_params){.n_predict = 128};
  mi_sampler_defaults(&a->gp.sampling);
  a->gp.sampling.seed = 24301;
  a->weights_load = MI_SESSION_WEIGHTS_AUTO;
  const char *env_limit = getenv("MI_MEM_LIMIT");
  if (env_limit && *env_limit && mi_opt_size("mi-run", "MI_MEM_LIMIT", env_limit, &a->mem_limit))
    return 2;
  int c;
  long v;
  mi_gen_params *gp = &a->gp;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":m:p:f:n:c:b:t:ivh", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': a->model_dir = optarg; break;
    case 'p': a->prompt_arg = optarg; break;
    case 'f': a->prompt_file = optarg; break;
    case O_PROMPTS: a->prompts_file = optarg; break;
    case O_CHAT: a->chat = 1; break;
    case 'i': a->interactive = a->chat = 1; break;
    case O_SYSTEM: a->system_msg = optarg; break;
    case O_NOTHINK: a->no_think = 1; break;
    case 'n':
      if (parse_long("-n", optarg, -1, INT_MAX, &v)) return 2;
      gp->n_predict = v;
      break;
    case 'c':
      if (parse_long("-c", optarg, 1, INT_MAX, &v)) return 2;
      gp->n_ctx = v;
      break;
    case 'b':
      if (parse_long("-b", optarg, 1, 65536, &a->batch)) return 2;
      break;
    case 't':
      if (parse_long("-t", optarg, 1, 1024, &a->threads)) return 2;
      break;
    case O_TEMP: if (parse_float("--temp", optarg, 0, 100, &gp->sampling.temp)) return 2; break;
    case O_TOPK:
      if (parse_long("--top-k", optarg, 0, INT_MAX, &v)) return 2;
      gp->sampling.top_k = (int)v;
      break;
    case O_TOPP: if (parse_float("--top-p", optarg, 0, 1, &gp->sampling.top_p)) return 2; break;
    case O_MINP: if (parse_float("--min-p", optarg, 0, 1, &gp->sampling.min_p)) return 2; break;
    case O_REPP:
      if (parse_float("--repeat-penalty", optarg, 0.01, 100, &gp->sampling.repeat_penalty)) return 2;
      break;
    case O_REPN:
      if (parse_long("--repeat-last-n", optarg, 0, INT_MAX, &v)) return 2;
      gp->sampling.repeat_last_n = (int)v;
      break;
    case O_SEED: {
      uint64_t s;
      if (mi_opt_u64("mi-run", "--seed", optarg, 0, UINT64_MAX, &s)) return 2;
      gp->sampling.seed = s;
      break;
    }
    case O_MEMLIMIT:
      if (mi_opt_size("mi-run", "--mem-limit", optarg, &a->mem_limit)) return 2;
      break;
    case O_IGNEOS: gp->ignore_eos = 1; break;
    case O_STOP:
      if (a->n_stops == MAX_STOPS || !optarg[0]) {
        fprintf(stderr, "mi-run: --stop: at most %d non-empty strings\n", MAX_STOPS);
        return 2;
      }
      a->stops[a->n_stops++] = optarg;
      break;
    case O_JSON: a->json = 1; break;
    case O_TOPLP:
      if (parse_long("--top-logprobs", optarg, 0, 1000, &a->top_logprobs)) return 2;
      break;
    case O_STATS: a->stats = 1; break;
    case O_PROMPTLP: a->prompt_logprobs = 1; break;
    case 'v': a->verbose++; break;
    case O_PLUGDIR: a->plugin_dir = optarg; break;
    case O_CONF: a->conf_path = optarg; break;
    case O_PLATFORM: a->platform = optarg; break;
    case O_LIST: a->list_plugins = 1; break;
    case O_MMAP: a->weights_load = MI_SESSION_WEIGHTS_MMAP; break;
    case O_NOMMAP: a->weights_load = MI_SESSION_WEIGHTS_READ; break;
    case O_KVTYPE:
      if (cli_kv_type("mi-run", optarg, &a->kv_type)) return 2;
      break;
    case O_TP:
      if (parse_long("--tp", optarg, 1, 1024, &a->tp)) return 2;
      break;
    case 'h': usage(stdout); return mi_out_finish("mi-run", 0);
    default: return cli_other_option("mi-run", c, c == O_VERSION, argv);
    }
  }
  return cli_no_operands("mi-run", argc, argv);
}

/* A run (not --list-plugins) needs a model and exactly one source of
 * prompts. -1 to go on, else the exit status. */
static int check_run_args(const cli_args *a) {
  if (!a->model_dir) {
    fprintf(stderr, "mi-run: no model: give -m MODEL_DIR (see --help)\n");
    return 2;
  }
  if (a->interactive && a->tp > 1) { /* only rank 0 reads stdin: the others would run out of turns first */
    fprintf(stderr, "mi-run: -i runs on one process: not with --tp %ld\n", a->tp);
    return 2;
  }
  if (a->interactive && (a->prompt_arg || a->prompt_file || a->prompts_file)) {
    fprintf(stderr, "mi-run: -i reads the conversation from stdin: give no -p, -f or --prompts with it\n");
    return 2;
  }
  if (!a->interactive && !a->prompt_arg && !a->prompt_file && !a->prompts_file) {
    fprintf(stderr, "mi-run: no prompt: give -p TEXT, -f FILE (-f - reads stdin), --prompts FILE or -i\n");
    return 2;
  }
  if (!!a->prompt_arg + !!a->prompt_file + !!a->prompts_file > 1) {
    fprintf(stderr, "mi-run: give one of -p, -f and --prompts\n");
    return 2;
  }
  return -1;
}

/* The plugins into *reg (--list-plugins: listed, and the run ends there).
 * -1 to go on, else the exit status. */
static int load_plugins(cli_args *a, mi_registry **reg) {
  int fatal;
  char err[2048] = "";
  *reg = cli_load_registry(a->plugin_dir, a->conf_path, a->threads, a->tbuf, &fatal, err, sizeof err);
  if (!*reg) {
    fprintf(stderr, "mi-run: out of memory loading plugins\n");
    return 1;
  }
  if (a->list_plugins) {
    mi_registry_print(*reg, stdout);
    if (fatal) fprintf(stderr, "mi-run: %s\n", err);
    mi_registry_free(*reg);
    return mi_out_finish("mi-run", fatal ? 1 : 0);
  }
  if (fatal) {
    fprintf(stderr, "mi-run: %s\n", err);
    mi_registry_free(*reg);
    return 1;
  }
  return -1;
}

/* The prompts: -p, -f, or one JSON string per line of --prompts (the file's
 * text into *text, the caller frees it); NULL after a line on stderr. */
static json_t *read_prompts(const cli_args *a, char **text) {
  size_t plen = 0;
  json_t *plist = json_array();
  if (a->prompts_file) {
    *text = read_all(a->prompts_file, &plen);
    if (!*text) return json_decref(plist), NULL;
    size_t lineno = 0;
    for (char *line = *text, *next; line && *line; line = next) {
      next = strchr(line, '\n');
      if (next) *next++ = 0;
      lineno++;
      if (!line[strspn(line, " \t\r")]) continue;
      json_error_t je;
      json_t *v = json_loads(line, JSON_DECODE_ANY, &je);
      if (!json_is_string(v)) {
        fprintf(stderr, "mi-run: %s:%zu: not a JSON string (one prompt per line, e.g. \"Hello\")\n", a->prompts_file,
                lineno);
        json_decref(v);
        json_decref(plist);
        return NULL;
      }
      json_array_append_new(plist, v);
    }
    if (!json_array_size(plist)) {
      fprintf(stderr, "mi-run: %s: no prompt in it\n", a->prompts_file);
      json_decref(plist);
      return NULL;
    }
  } else if (a->prompt_file) {
    *text = read_all(a->prompt_file, &plen);
    if (!*text) return json_decref(plist), NULL;
    json_array_append_new(plist, json_stringn(*text, plen));
  } else {
    json_array_append_new(plist, json_string(a->prompt_arg));
  }
  if (json_array_size(plist) == 1 && !json_string_value(json_array_get(plist, 0))) {
    fprintf(stderr, "mi-run: %s: the prompt is not valid UTF-8\n", a->prompt_file ? a->prompt_file : "prompt");
    json_decref(plist);
    return NULL;
  }
  return plist;
}

/* Each prompt in turn; 0, or 1 after a line on stderr. */
static int run_prompts(mi_session *eng, run_opts *ropt, const cli_args *a) {
  char *prompt_text = NULL, *rendered = NULL;
  int32_t *ids = NULL;
  size_t n_ids = 0;
  int rc = 1;
  json_t *plist = read_prompts(a, &prompt_text);
  const char *src_name = a->prompts_file ? a->prompts_file : a->prompt_file ? a->prompt_file : "prompt";
  for (size_t pi = 0; plist && pi < json_array_size(plist); pi++) {
    const char *one = json_string_value(json_array_get(plist, pi));
    size_t one_len = json_string_length(json_array_get(plist, pi));
    free(ids);
    ids = NULL;
    n_ids = 0;
    free(rendered);
    rendered = NULL;
    ropt->src_name = src_name;
    if (run_prompt(eng, ropt, one, one_len, a->prompts_file ? (long)pi : -1, NULL, 0, &ids, &n_ids, &rendered, NULL) != 0)
      goto out;
  }
  if (plist) rc = 0;
out:
  json_decref(plist);
  free(ids);
  free(rendered);
  free(prompt_text);
  return rc;
}

/* The session on the loaded plugins, then the conversation (-i) or the
 * prompts; the exit status. */
static int run_session(cli_args *a, mi_registry *reg) {
  char err[2048] = "";
  int rc = 1;
  mi_session *eng = NULL;
  mi_kv mopts[2];
  mi_options model_opts = cli_model_opts(mopts, a->kv_type, a->batch, a->bbuf);
  mi_session_opts eo = {.model_dir = a->model_dir, .platform = a->platform, .model_opts = &model_opts,
                       .tp_rank = 0, .tp_size = (int)a->tp, .weights = a->weights_load,
                       .mem_limit = a->mem_limit};
  if (mi_session_open(reg, &eo, &eng, err, sizeof err) != 0) {
    fprintf(stderr, "mi-run: %s\n", err);
    mi_session_close(eng);
    return rc;
  }
  /* With tensor parallelism every rank computes; rank 0 alone answers. */
  const int quiet = eng->tp_rank != 0;
  mi_log(MI_LOG_INFO, "mi-run", "platform %s (%s), model plugin %s, %s loaded in %.2f s",
         eng->platform_plugin->desc->name, eng->P->variant ? eng->P->variant(eng->pc) : "-",
         eng->model_plugin->desc->name, eng->info.architecture, eng->load_seconds);
  run_opts ropt = {.model_dir = a->model_dir, .system_msg = a->system_msg, .chat = a->chat, .no_think = a->no_think,
                   .json = quiet ? 0 : a->json, .quiet = quiet, .stats = a->stats, .top_logprobs = a->top_logprobs,
                   .gp = &a->gp, .prompt_logprobs = a->prompt_logprobs, .stops = a->stops, .n_stops = a->n_stops};
  if (a->interactive) {
    ropt.src_name = "stdin";
    rc = run_interactive(eng, &ropt);
  } else {
    rc = run_prompts(eng, &ropt, a);
  }
  mi_session_close(eng);
  return rc;
}

static int run(int argc, char **argv) {
  static cli_args a;
  mi_out_init();
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  mi_log_set_level(a.verbose >= 2 ? MI_LOG_DEBUG : a.verbose ? MI_LOG_INFO : MI_LOG_WARN);
  mi_progress_enable(isatty(STDERR_FILENO) && !a.json);
  if (!a.list_plugins && (rc = check_run_args(&a)) >= 0) return rc;
  mi_registry *reg;
  if ((rc = load_plugins(&a, &reg)) >= 0) return rc;
  rc = run_session(&a, reg);
  mi_registry_free(reg);
  return mi_out_finish("mi-run", rc);
}

/* A plugin that calls exit() (from a constructor, probe, init or a kernel)
 * must not end the run with status 0 and no output: the guard turns any
 * exit() before run() returns into one line and status 1. */
int main(int argc, char **argv) {
  mi_exit_guard_arm("mi-run");
  int rc = run(argc, argv);
  mi_exit_guard_disarm();
  return rc;
}
