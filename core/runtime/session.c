/* Engine assembly (plugins + model directory) and the generation loop. */
#define _GNU_SOURCE /* memmem */
#include "core/runtime/session.h"
#include "core/runtime/packs.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/runtime/compat.h"
#include "core/runtime/gguf_model.h"
#include "core/runtime/host.h"
#include "core/runtime/mem.h"
#include "core/runtime/safetensors.h"
#include "core/util/file.h"


double mi_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t mi_peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

static int arch_supported(const mi_model_iface *M, const char *arch) {
  for (const char *const *a = M->architectures; a && *a; a++)
    if (strcmp(*a, arch) == 0) return 1;
  return 0;
}

/* The model plugin that implements `arch`, or NULL with the list of what is
 * loaded in `names`. */
static mi_plugin *find_model_plugin(mi_registry *reg, const char *arch, char *names,
                                    size_t names_len) {
  size_t used = 0;
  names[0] = 0;
  for (size_t i = 0; i < mi_registry_count(reg); i++) {
    mi_plugin *p = mi_registry_at(reg, i);
    if (p->status != MI_PLUGIN_LOADED || p->desc->kind != MI_PLUGIN_MODEL) continue;
    const mi_model_iface *M = p->iface;
    if (arch_supported(M, arch)) return p;
    for (const char *const *a = M->architectures; a && *a && used + 2 < names_len; a++)
      used += (size_t)snprintf(names + used, names_len - used, "%s%s", used ? ", " : "", *a);
  }
  return NULL;
}

static void add_eos(mi_session *e, int64_t id) {
  if (id < 0 || id > INT32_MAX || e->n_eos >= (int)(sizeof e->eos_ids / sizeof e->eos_ids[0]))
    return;
  for (int i = 0; i < e->n_eos; i++)
    if (e->eos_ids[i] == id) return;
  e->eos_ids[e->n_eos++] = (int32_t)id;
}

/* "eos_token_id" of a config: absent, an id, or a list of ids. */
static int add_eos_field(mi_session *e, json_t *cfg, const char *path, char *err, size_t err_len) {
  json_t *eos = json_object_get(cfg, "eos_token_id");
  if (!eos || json_is_null(eos)) return 0;
  if (json_is_integer(eos)) {
    add_eos(e, json_integer_value(eos));
    return 0;
  }
  size_t i;
  json_t *v;
  if (json_is_array(eos)) {
    json_array_foreach(eos, i, v) {
      if (!json_is_integer(v)) break;
      add_eos(e, json_integer_value(v));
    }
    if (i == json_array_size(eos)) return 0;
  }
  snprintf(err, err_len, "%s: \"eos_token_id\" must be a token id or a list of token ids", path);
  return -1;
}

/* A small JSON file (config.json, generation_config.json) through the
 * shared reader: a FIFO or a device in its place is refused, never waited
 * on, and the size is checked first, since jansson builds a tree ~20x the
 * file before any check. */
/* The memory the session may use (e->mem_*, from the platform, --mem-limit
 * or the host), and whether the weight files fit in it: 0, or -1 with one
 * line naming the model and the shortfall. Host-memory platforms only (a
 * GPU's own memory is its plugin's to check). */
static int weights_fit(mi_session *e, const mi_session_opts *o, char *err, size_t err_len) {
  mi_device_info mdi = {.struct_size = sizeof mdi};
  e->mem_host = e->P->device_info(e->pc, 0, &mdi) == 0 && mdi.host_memory;
  e->mem_source = "--mem-limit";
  e->mem_avail = o->mem_limit ? o->mem_limit : mi_mem_available(&e->mem_source);
  e->rss_start = mi_mem_rss();
  if (!e->mem_host || !e->mem_avail) return 0;
  uint64_t wb = mi_mem_weight_file_bytes(o->model_dir);
  if (wb <= e->mem_avail) return 0;
  char need[32], have[32];
  mi_mem_gib(wb, need, sizeof need);
  mi_mem_gib(e->mem_avail, have, sizeof have);
  snprintf(err, err_len, "%s: needs %s for the weights, %s available (%s%s)", o->model_dir, need,
           have, e->mem_source, o->mem_limit ? "" : "; override with --mem-limit");
  return -1;
}

/* Host memory: the weights read into huge pages unless --mmap; else mapped. */
static mi_weights_load weights_load_mode(const mi_session *e, const mi_session_opts *o) {
  return o->weights == MI_SESSION_WEIGHTS_READ || (o->weights == MI_SESSION_WEIGHTS_AUTO && e->mem_host)
             ? MI_WEIGHTS_READ
             : MI_WEIGHTS_MMAP;
}

static json_t *load_small_json(const char *path, char *err, size_t err_len) {
  size_t len;
  char *text = mi_file_read_all(path, 0, MI_CONFIG_JSON_MAX_BYTES, "config file", &len, err, err_len);
  if (!text) return NULL;
  json_error_t jerr;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!j) {
    snprintf(err, err_len, "%s: %s (line %d)", path, jerr.text, jerr.line);
    return NULL;
  }
  if (!json_is_object(j)) {
    snprintf(err, err_len, "%s: not a JSON object", path);
    json_decref(j);
    return NULL;
  }
  return j;
}

int mi_session_is_eos(const mi_session *e, int32_t id) {
  for (int i = 0; i < e->n_eos; i++)
    if (e->eos_ids[i] == id) return 1;
  return 0;
}

/* The platform plugin (-p, else the best loaded) into e, and its process
 * group, which must be the size --tp asks for. */
static int open_platform(mi_registry *reg, const mi_session_opts *o, mi_session *e, char *err, size_t err_len) {
  e->platform_plugin = mi_registry_best(reg, MI_PLUGIN_PLATFORM, o->platform);
  if (!e->platform_plugin) {
    /* Name the reason the loader recorded (e.g. a GPU probe's "no device"). */
    const char *why = NULL;
    for (size_t i = 0; o->platform && i < mi_registry_count(reg) && !why; i++) {
      const mi_plugin *p = mi_registry_at(reg, i);
      if (mi_plugin_kind_of(p) == MI_PLUGIN_PLATFORM && p->reason &&
          strcmp(mi_plugin_name(p), o->platform) == 0)
        why = p->reason;
    }
    if (o->platform && why)
      snprintf(err, err_len, "platform '%s' is not available: %s", o->platform, why);
    else if (o->platform)
      snprintf(err, err_len, "platform '%s' is not available (see --list-plugins for why)",
               o->platform);
    else
      snprintf(err, err_len, "no platform plugin is loaded (see --list-plugins for why)");
    return -1;
  }
  e->P = e->platform_plugin->iface;
  e->pc = e->platform_plugin->ctx;
  e->n_packs = mi_packs_bind(reg, e->P, e->pc, e->packs, (int)(sizeof e->packs / sizeof *e->packs), "metainfer");
  /* tensor parallelism: the platform's group must be the size asked for */
  e->tp_size = o->tp_size > 0 ? o->tp_size : 1;
  int rank = 0, size = 1;
  if (mi_platform_has(e->P, comm_info) && e->P->comm_info(e->pc, &rank, &size) != 0) {
    snprintf(err, err_len, "platform '%s': cannot query its process group: %s",
             e->platform_plugin->desc->name, e->P->last_error(e->pc));
    return -1;
  }
  if (size != e->tp_size) {
    snprintf(err, err_len,
             "--tp %d needs %d ranks, but platform '%s' runs %d (start with e.g. mpirun -np %d)",
             e->tp_size, e->tp_size, e->platform_plugin->desc->name, size, e->tp_size);
    return -1;
  }
  e->tp_rank = rank;
  return 0;
}

/* config.json into e->config: the folder's, or a GGUF file's through its
 * model contract (opened into *gm). path (n bytes) is set to what messages
 * about the config name. */
static int open_config(mi_session *e, const mi_session_opts *o, int is_gguf, mi_gguf_model **gm, char *path, size_t n,
                       char *err, size_t err_len) {
  snprintf(path, n, "%s/config.json", o->model_dir);
  json_t *cfg;
  if (is_gguf) {
    snprintf(path, n, "%s", o->model_dir); /* messages name the file */
    /* the memory check first: reading the file is reading the weights */
    if (weights_fit(e, o, err, err_len) != 0) return -1;
    mi_weights_load ghow = weights_load_mode(e, o);
    char ckb[4096];
    if (!mi_gguf_ckb_dir(ckb, sizeof ckb)) {
      snprintf(err, err_len, "%s: a GGUF file is read through its model contract: %s", o->model_dir,
               ckb);
      return -1;
    }
    if (mi_gguf_model_open(o->model_dir, ckb, ghow, gm, err, err_len) != 0) return -1;
    cfg = json_incref((*gm)->config);
  } else {
    struct stat mst;
    if (stat(o->model_dir, &mst) == 0 && !S_ISDIR(mst.st_mode)) {
      snprintf(err, err_len, "%s: not a model folder (config.json, *.safetensors) or a GGUF file "
               "(no \"GGUF\" magic)", o->model_dir);
      return -1;
    }
    cfg = load_small_json(path, err, err_len);
  }
  if (!cfg) return -1;
  e->config = cfg;
  return 0;
}

/* The model plugin for the config's architecture into e: a generated engine
 * (mi/engine.h: a model interface baked for one config) is preferred when it
 * accepts this config.json; its refusal is reported when no model plugin
 * can take the model either. Then the plugin's own check of the config, and
 * the platform's and the model's needs against each other. */
static int pick_model_plugin(mi_registry *reg, const mi_session_opts *o, mi_session *e, const char *path, char *err,
                             size_t err_len) {
  json_t *cfg = e->config;
  json_t *archs = json_object_get(cfg, "architectures");
  const char *arch = json_string_value(json_array_get(archs, 0));
  if (!arch) {
    snprintf(err, err_len, "%s: \"architectures\" must be a non-empty array of strings", path);
    return -1;
  }
  char names[512];
  char engine_err[1024] = "";
  e->model_plugin = NULL;
  for (size_t i = 0; i < mi_registry_count(reg) && !e->model_plugin; i++) {
    mi_plugin *p = mi_registry_at(reg, i);
    if (p->status != MI_PLUGIN_LOADED || p->desc->kind != MI_PLUGIN_ENGINE ||
        !arch_supported(p->iface, arch))
      continue;
    const mi_model_iface *EM = p->iface;
    if (EM->check_config(p->ctx, mi_json_wrap(cfg), engine_err, sizeof engine_err) == 0)
      e->model_plugin = p;
  }
  if (!e->model_plugin) {
    e->model_plugin = find_model_plugin(reg, arch, names, sizeof names);
    if (!e->model_plugin && engine_err[0]) {
      snprintf(err, err_len, "%s: %s", path, engine_err);
      return -1;
    }
  }
  if (!e->model_plugin) {
    snprintf(err, err_len, "%s: architecture '%s' is not supported by any loaded model plugin%s%s",
             path, arch, names[0] ? " (loaded: " : "", names[0] ? names : "");
    if (names[0]) strncat(err, ")", err_len - strlen(err) - 1);
    return -1;
  }
  e->M = e->model_plugin->iface;
  char perr[1024];
  if (e->M->check_config(e->model_plugin->ctx, mi_json_wrap(cfg), perr, sizeof perr) != 0) {
    snprintf(err, err_len, "%s: %s", path, perr);
    return -1;
  }
  if (mi_compat_check(e->platform_plugin, e->model_plugin, e->tp_size, o->model_opts, err, err_len)) return -1;
  return 0;
}

/* The tokenizer (a GGUF file's was built from its arrays when the file was
 * opened), and the end-of-generation tokens as the model declares them. */
static int open_tokenizer(mi_session *e, const mi_session_opts *o, mi_gguf_model *gm, char *err, size_t err_len) {
  char path[4096];
  if (gm) {
    e->tok = gm->tok; /* built with the file's other parts */
    gm->tok = NULL;
    if (!e->tok || mi_tokenizer_set_config(e->tok, gm->eos, gm->bos, gm->pad, gm->chat_template,
                                           o->model_dir, err, err_len) != 0)
      return -1;
  } else {
    snprintf(path, sizeof path, "%s/tokenizer.json", o->model_dir);
    e->tok = mi_tokenizer_load(path, err, err_len);
    if (!e->tok) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", o->model_dir);
    if (access(path, F_OK) == 0) { /* not fopen: a FIFO would block it */
      if (mi_tokenizer_load_config(e->tok, path, err, err_len) != 0) return -1;
    }
  }
  /* tokenizer.json's parse (~30 MB of small jansson nodes for a 151k
   * vocabulary) is freed: hand that heap back before the weights come in,
   * so that it does not stay in the process's RSS beside them. */
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  return 0;
}

/* End-of-generation tokens, as the model folder declares them:
 * generation_config.json and config.json "eos_token_id" (an id or a list),
 * and tokenizer_config.json "eos_token". A GGUF file: its eos id (set on
 * the tokenizer) and the contract's end tokens present in its vocabulary
 * (llama.cpp stops at those too). */
static int collect_eos(mi_session *e, const mi_session_opts *o, mi_gguf_model *gm, char *err, size_t err_len) {
  char path[4096];
  struct stat cst;
  for (size_t i = 0; gm && i < json_array_size(gm->end_tokens); i++) {
    const char *t = json_string_value(json_array_get(gm->end_tokens, i));
    if (t) add_eos(e, mi_tokenizer_token_id(e->tok, t));
  }
  snprintf(path, sizeof path, "%s/config.json", o->model_dir);
  if (!gm && add_eos_field(e, e->config, path, err, err_len) != 0) return -1;
  snprintf(path, sizeof path, "%s/generation_config.json", o->model_dir);
  if (!gm && stat(path, &cst) == 0) {
    json_t *gen = load_small_json(path, err, err_len);
    int bad = !gen || add_eos_field(e, gen, path, err, err_len) != 0;
    json_decref(gen);
    if (bad) return -1;
  }
  add_eos(e, mi_tokenizer_eos_id(e->tok));
  if (e->n_eos == 0)
    mi_log(MI_LOG_WARN, "session",
           "%s declares no end-of-sequence token (generation_config.json, config.json or "
           "tokenizer_config.json): generation stops only at -n or the context end",
           o->model_dir);
  return 0;
}

/* The weights, then the model plugin's load of them. Block-type matrices
 * (Q8_0, Q4_0, Q4_K, Q6_K) stay as stored where the platform's kernels take
 * their dtype (asked per dtype, core/runtime/gguf_model.h); else they are
 * widened to f32, which the memory check counts there. */
static int load_model(mi_session *e, const mi_session_opts *o, mi_gguf_model *gm, char *err, size_t err_len) {
  if (gm) {
    gm->keep_blocks = mi_gguf_platform_blocks(e->P, e->pc);
    gm->mem_avail = e->mem_host ? e->mem_avail : 0;
  }
  e->weights = gm ? mi_gguf_model_weights(gm, err, err_len)
                 : mi_weights_open_ex(o->model_dir, weights_load_mode(e, o), err, err_len);
  if (!e->weights) return -1;
  mi_options none = {0};
  /* the model's options plus mem_budget: bytes left for its scratch */
  const mi_options *uo = o->model_opts ? o->model_opts : &none;
  mi_kv kvs[65];
  char budget[32];
  mi_options with_budget = {kvs, 0};
  if (e->mem_host && e->mem_avail && uo->count < 64) {
    uint64_t rss = mi_mem_rss(), used = rss > e->rss_start ? rss - e->rss_start : 0;
    if (used >= e->mem_avail) { /* the weights as loaded (widened ones at f32) took it all */
      char took[32], file[32], have[32];
      mi_mem_gib(used, took, sizeof took);
      mi_mem_gib(mi_mem_weight_file_bytes(o->model_dir), file, sizeof file);
      mi_mem_gib(e->mem_avail, have, sizeof have);
      snprintf(err, err_len, "%s: the weights as loaded take %s (the file%s %s%s), %s available (%s%s)",
               o->model_dir, took, gm ? " holds" : "s hold", file, gm ? "; matrices widened to f32 take more" : "",
               have, e->mem_source, o->mem_limit ? "" : "; override with --mem-limit");
      return -1;
    }
    snprintf(budget, sizeof budget, "%llu",
             (unsigned long long)(e->mem_avail > used ? e->mem_avail - used : 1));
    for (size_t i = 0; i < uo->count; i++) kvs[i] = uo->items[i];
    kvs[uo->count] = (mi_kv){"mem_budget", budget};
    with_budget.count = uo->count + 1;
    uo = &with_budget;
  }
  mi_model_load_args a = {
      .struct_size = sizeof a,
      .model_dir = o->model_dir,
      .config = mi_json_wrap(e->config),
      .weights = e->weights,
      .platform = {.iface = e->P, .ctx = e->pc},
      .tp_rank = e->tp_rank,
      .tp_size = e->tp_size,
      .opts = uo,
      .packs = e->packs,
      .n_packs = e->n_packs,
  };
  if (e->M->load(e->model_plugin->ctx, &a, &e->model, err, err_len) != 0) return -1;
  e->info.struct_size = sizeof e->info;
  e->M->info(e->model, &e->info);
  if ((int64_t)mi_tokenizer_vocab_size(e->tok) > e->info.vocab_size) {
    snprintf(err, err_len, "%s%s: %zu tokens but the model's vocab_size is %lld", o->model_dir,
             gm ? "" : "/tokenizer.json", mi_tokenizer_vocab_size(e->tok),
             (long long)e->info.vocab_size);
    return -1;
  }
  return 0;
}

int mi_session_open(mi_registry *reg, const mi_session_opts *o, mi_session **out, char *err,
                   size_t err_len) {
  double t0 = mi_now_seconds();
  *out = NULL;
  mi_session *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  e->model_dir = strdup(o->model_dir);
  char path[4096];
  /* -m names a Hugging Face folder, or a GGUF file (known by its magic):
   * then config, tokenizer and weights all come from that one file through
   * its model contract (core/runtime/gguf_model.h, docs/gguf.md). */
  mi_gguf_model *gm = NULL;
  const int is_gguf = mi_gguf_sniff(o->model_dir);
  if (open_platform(reg, o, e, err, err_len) != 0 ||
      open_config(e, o, is_gguf, &gm, path, sizeof path, err, err_len) != 0 ||
      pick_model_plugin(reg, o, e, path, err, err_len) != 0 || open_tokenizer(e, o, gm, err, err_len) != 0 ||
      collect_eos(e, o, gm, err, err_len) != 0)
    goto fail;
  /* Memory, estimated before anything big is allocated: the weight files
   * here, the model's scratch in its load (option mem_budget), the KV cache
   * in mi_generate. Host-memory platforms only (a GPU's own memory is its
   * plugin's to check). */
  if (!gm && weights_fit(e, o, err, err_len) != 0) goto fail; /* a GGUF file's was checked above */
  if (load_model(e, o, gm, err, err_len) != 0) goto fail;
  e->load_seconds = mi_now_seconds() - t0;
  mi_gguf_model_close(gm);
  *out = e;
  return 0;
fail:
  mi_gguf_model_close(gm);
  mi_session_close(e);
  return -1;
}

void mi_session_close(mi_session *e) {
  if (!e) return;
  if (e->model) e->M->unload(e->model);
  if (e->weights) mi_weights_close(e->weights);
  if (e->tok) mi_tokenizer_free(e->tok);
  if (e->config) json_decref((json_t *)e->config);
  free(e->model_dir);
  free(e);
}

/* Length of the longest suffix of text[0,n) that is a proper prefix of a
 * stop string (that much must be held back: it may become a stop). */
static size_t stop_holdback(const char *text, size_t n, const char *const *stop, size_t n_stop) {
  size_t best = 0;
  for (size_t s = 0; s < n_stop; s++) {
    size_t L = strlen(stop[s]);
    if (L == 0) continue;
    for (size_t k = L > n + 1 ? n : L - 1; k > best; k--)
      if (memcmp(text + n - k, stop[s], k) == 0) {
        best = k;
        break;
      }
  }
  return best;
}

/* 0 when a NaN or an infinity is among the logits: exponent bits all
 * ones, which adding 1 to the exponent carries into bit 31. A branch-free
 * and/add/or over the row, vectorised, once per step; cloned for AVX2 and
 * AVX-512 (measured, 152k logits: ~15 us there, ~100 us with SSE2 alone). */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
static int logits_finite(const float *l, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &l[i], sizeof b);
    bad |= (b & 0x7f800000u) + 0x00800000u;
  }
  return !(bad & 0x80000000u);
}

struct mi_gen {
  mi_session *e;
  mi_gen_params p;
  mi_gen_stats st;
  mi_seq *seq;
  mi_sampler *smp;
  float *logits;
  int32_t *hist;
  size_t n_hist;
  int k;
  int32_t *top_ids;
  double *top_lps;
  size_t tok_cap;
  char *tok_text;
  size_t pend_cap, pend_len, show;
  char *pend;
  mi_tok_stream ts;
  double t0, t_first;
  int64_t step;
  int32_t last;
  int is_eos, stop_hit, done;
  /* the prompt: hist[0, n_prompt); n_run of it is in the sequence */
  int64_t n_prompt, n_run;
  /* echo: prompt token i's logprob plp[i] and top plp_ids/plp_lps[i*k ..] */
  double *plp;
  int32_t *plp_ids;
  double *plp_lps;
  float *chunk_logits; /* [MI_GEN_LP_CHUNK, vocab] all-positions logits */
  /* constrained decoding: allowed[vocab] and the masked logits [vocab] */
  uint8_t *allowed;
  float *masked;
};

/* Prompt positions per forward when every position's logits are kept
 * (echo): bounds that scratch to 64 × vocab floats. */
#define MI_GEN_LP_CHUNK 64

void mi_gen_end(mi_gen *g, mi_gen_stats *st) {
  if (!g) return;
  if (st) {
    if (g->st.n_gen > 0) g->st.decode_s = mi_now_seconds() - g->t_first;
    /* whatever was held back (a partial stop-string prefix, a partial UTF-8 tail) */
    if (g->pend) {
      int fl = mi_tok_stream_flush(&g->ts, g->pend + g->pend_len, g->pend_cap - g->pend_len);
      if (fl > 0) g->pend_len += (size_t)fl;
      if (g->pend_len >= sizeof g->st.tail) g->pend_len = sizeof g->st.tail - 1;
      memcpy(g->st.tail, g->pend, g->pend_len);
      g->st.tail[g->pend_len] = 0;
    }
    *st = g->st;
  }
  if (g->seq) g->e->M->seq_destroy(g->e->model, g->seq);
  mi_sampler_free(g->smp);
  free(g->logits);
  free(g->hist);
  free(g->top_ids);
  free(g->top_lps);
  free(g->tok_text);
  free(g->pend);
  free(g->plp);
  free(g->plp_ids);
  free(g->plp_lps);
  free(g->chunk_logits);
  free(g->allowed);
  free(g->masked);
  free(g);
}

int mi_gen_begin(mi_session *e, const int32_t *prompt, size_t n_prompt, const mi_gen_params *p,
                 mi_gen **out, char *err, size_t err_len) {
  *out = NULL;
  const int64_t V = e->info.vocab_size;
  if (n_prompt == 0) {
    snprintf(err, err_len, "the prompt is empty");
    return -1;
  }
  int64_t n_ctx = p->n_ctx;
  if (n_ctx <= 0) {
    /* just what this request needs; open-ended generation (-n -1) gets
     * llama.cpp's default 4096 (or the prompt + 1) rather than the model's
     * whole window, whose KV cache could be gigabytes */
    int64_t want = (int64_t)n_prompt + (p->n_predict >= 0 ? p->n_predict : 0);
    if (p->n_predict < 0) want = want + 1 > 4096 ? want + 1 : 4096;
    n_ctx = want < e->info.max_position ? want : e->info.max_position;
  }
  if ((int64_t)n_prompt > n_ctx) {
    snprintf(err, err_len, "the prompt has %zu tokens but the context holds %lld (raise -c/--ctx-size)",
             n_prompt, (long long)n_ctx);
    return -1;
  }
  mi_gen *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  g->e = e;
  g->p = *p;
  g->st.n_ctx = n_ctx;
  g->st.n_prompt = (int64_t)n_prompt;
  g->smp = mi_sampler_create(&p->sampling, V);
  g->logits = malloc((size_t)V * sizeof(float));
  g->hist = malloc((size_t)n_ctx * sizeof(int32_t) + 4);
  g->k = p->top_logprobs > 0 ? p->top_logprobs : 0;
  g->top_ids = malloc((size_t)(g->k + 1) * sizeof(int32_t));
  g->top_lps = malloc((size_t)(g->k + 1) * sizeof(double));
  g->tok_cap = mi_tok_stream_max_out(e->tok) + 4;
  g->tok_text = malloc(g->tok_cap);
  /* visible text not yet shown: at most the longest stop string + a token */
  size_t max_stop = 0;
  for (size_t i = 0; i < p->n_stop; i++)
    if (strlen(p->stop[i]) > max_stop) max_stop = strlen(p->stop[i]);
  g->pend_cap = max_stop + g->tok_cap + 8;
  g->pend = malloc(g->pend_cap);
  if (!g->smp || !g->logits || !g->hist || !g->top_ids || !g->top_lps || !g->tok_text ||
      !g->pend) {
    snprintf(err, err_len, "out of memory");
    goto fail;
  }
  if (e->mem_host && e->mem_avail) {
    /* the KV cache (and fixed state) on top of what the session holds now */
    uint64_t now = mi_mem_rss(), used = now > e->rss_start ? now - e->rss_start : 0;
    double kv = (double)e->info.state_bytes_token * (double)n_ctx + (double)e->info.state_bytes_fixed;
    if ((double)used + kv > (double)e->mem_avail) {
      char need[32], kvs[32], inuse[32], have[32];
      mi_mem_gib((uint64_t)((double)used + kv), need, sizeof need);
      mi_mem_gib((uint64_t)kv, kvs, sizeof kvs);
      mi_mem_gib(used, inuse, sizeof inuse);
      mi_mem_gib(e->mem_avail, have, sizeof have);
      snprintf(err, err_len,
               "%s: needs %s (KV cache for %lld tokens: %s, model: %s), %s available (%s); "
               "lower -c%s",
               e->model_dir, need, (long long)n_ctx, kvs, inuse, have, e->mem_source,
               strcmp(e->mem_source, "--mem-limit") ? " or override with --mem-limit" : "");
      goto fail;
    }
  }
  if (e->M->seq_create(e->model, n_ctx, &g->seq, err, err_len) != 0) goto fail;
  memcpy(g->hist, prompt, n_prompt * sizeof(int32_t));
  g->n_hist = n_prompt;
  g->n_prompt = (int64_t)n_prompt;
  mi_tok_stream_init_after(&g->ts, e->tok); /* the text continues the prompt's */
  if (p->prompt_logprobs) {
    size_t kk = (size_t)(g->k > 0 ? g->k : 1);
    g->plp = calloc(n_prompt, sizeof(double));
    g->plp_ids = calloc(n_prompt * kk, sizeof(int32_t));
    g->plp_lps = calloc(n_prompt * kk, sizeof(double));
    g->chunk_logits = malloc((size_t)MI_GEN_LP_CHUNK * (size_t)V * sizeof(float));
    if (!g->plp || !g->plp_ids || !g->plp_lps || !g->chunk_logits) {
      snprintf(err, err_len, "out of memory (prompt logprobs for %zu tokens)", n_prompt);
      goto fail;
    }
  }
  if (p->constraint) {
    g->allowed = malloc((size_t)V);
    g->masked = malloc((size_t)V * sizeof(float));
    if (!g->allowed || !g->masked) {
      snprintf(err, err_len, "out of memory");
      goto fail;
    }
  }
  g->st.stop_reason = "length";
  g->t0 = mi_now_seconds();
  *out = g;
  if (!p->defer_prefill && mi_gen_prefill(g, 0, err, err_len) != 0) {
    *out = NULL;
    goto fail;
  }
  return 0;
fail:
  mi_gen_end(g, NULL);
  return -1;
}

int mi_gen_set_cached(mi_gen *g, int64_t n, char *err, size_t err_len) {
  if (g->n_run != 0 || n < 0 || n >= g->n_prompt || g->p.prompt_logprobs) {
    snprintf(err, err_len, "a cached prefix of %lld tokens cannot start a prompt of %lld%s",
             (long long)n, (long long)g->n_prompt,
             g->p.prompt_logprobs ? " whose logprobs are asked for" : "");
    return -1;
  }
  int64_t len = g->e->M->seq_len(g->e->model, g->seq);
  if (len != n) {
    snprintf(err, err_len, "the sequence holds %lld tokens, not the %lld cached", (long long)len,
             (long long)n);
    return -1;
  }
  g->n_run = n;
  g->st.n_cached = n;
  return 0;
}

int64_t mi_gen_prefill_left(const mi_gen *g) { return g->n_prompt - g->n_run; }

/* Prompt logprobs of the tokens after a chunk's positions: row j of the
 * chunk's logits predicts prompt token pos0 + j + 1. */
static void record_prompt_logprobs(mi_gen *g, int64_t pos0, int64_t T) {
  const int64_t V = g->e->info.vocab_size;
  const int kk = g->k > 0 ? g->k : 1;
  for (int64_t j = 0; j < T && pos0 + j + 1 < g->n_prompt; j++) {
    int64_t i = pos0 + j + 1;
    mi_logprobs_topk(g->chunk_logits + (size_t)j * (size_t)V, V, g->hist[i], &g->plp[i], g->k,
                     g->plp_ids + (size_t)i * (size_t)kk, g->plp_lps + (size_t)i * (size_t)kk);
  }
}

int64_t mi_gen_prefill(mi_gen *g, int64_t max_tokens, char *err, size_t err_len) {
  mi_session *e = g->e;
  const int64_t V = e->info.vocab_size;
  int64_t left = g->n_prompt - g->n_run;
  if (left <= 0) return 0;
  int64_t todo = max_tokens > 0 && max_tokens < left ? max_tokens : left;
  double t = mi_now_seconds();
  while (todo > 0) {
    int64_t T = todo;
    if (g->p.prompt_logprobs && T > MI_GEN_LP_CHUNK) T = MI_GEN_LP_CHUNK;
    const int32_t *ids = g->hist + g->n_run;
    int last_chunk = g->n_run + T == g->n_prompt;
    if (g->p.prompt_logprobs) {
      if (e->M->forward(e->model, g->seq, ids, T, g->chunk_logits, 1, err, err_len) != 0) return -1;
      record_prompt_logprobs(g, g->n_run, T);
      if (last_chunk)
        memcpy(g->logits, g->chunk_logits + (size_t)(T - 1) * (size_t)V, (size_t)V * sizeof(float));
    } else if (e->M->forward(e->model, g->seq, ids, T, last_chunk ? g->logits : NULL, 0, err,
                             err_len) != 0) {
      return -1;
    }
    g->n_run += T;
    todo -= T;
  }
  g->st.prefill_s += mi_now_seconds() - t;
  left = g->n_prompt - g->n_run;
  if (left > 0) return left;
  if (!logits_finite(g->logits, V)) {
    snprintf(err, err_len,
             "%s: step 0 (prefill): the logits are not finite (NaN or infinity): broken weights?",
             e->model_dir);
    return -1;
  }
  g->done = g->p.n_predict == 0;
  return 0;
}

int mi_gen_prompt_logprob(const mi_gen *g, int64_t i, double *lp, const int32_t **top_ids,
                          const double **top_lps, int *n_top) {
  if (!g->plp || i < 1 || i >= g->n_run) return -1;
  const int kk = g->k > 0 ? g->k : 1;
  *lp = g->plp[i];
  *top_ids = g->plp_ids + (size_t)i * (size_t)kk;
  *top_lps = g->plp_lps + (size_t)i * (size_t)kk;
  const int64_t V = g->e->info.vocab_size;
  *n_top = g->k < V ? g->k : (int)V;
  return 0;
}

int mi_gen_done(const mi_gen *g) { return g->done; }
mi_seq *mi_gen_seq(mi_gen *g) { return g->seq; }
float *mi_gen_logits(mi_gen *g) { return g->logits; }
int32_t mi_gen_last(const mi_gen *g) { return g->last; }
const int32_t *mi_gen_tokens(const mi_gen *g, size_t *n) {
  *n = g->n_hist;
  return g->hist;
}
const mi_gen_stats *mi_gen_stats_now(const mi_gen *g) { return &g->st; }

/* The drawn token *id, or a draw from the masked logits when the
 * constraint refuses it (see mi_gen_constraint); then the constraint
 * advances over the token. */
static int constrain(mi_gen *g, int32_t *id, char *err, size_t err_len) {
  const mi_gen_constraint *c = g->p.constraint;
  const int64_t V = g->e->info.vocab_size;
  if (!c->allows(c->user, *id)) {
    if (c->mask(c->user, g->allowed) == 0) {
      snprintf(err, err_len, "step %lld: no token can continue the structured output",
               (long long)g->step);
      return -1;
    }
    for (int64_t v = 0; v < V; v++) g->masked[v] = g->allowed[v] ? g->logits[v] : -INFINITY;
    *id = mi_sampler_sample(g->smp, g->masked, g->hist, g->n_hist);
    if (*id < 0 || *id >= V || !g->allowed[*id]) { /* every finite logit penalised away: the best allowed */
      int64_t best = -1;
      for (int64_t v = 0; v < V; v++)
        if (g->allowed[v] && (best < 0 || g->logits[v] > g->logits[best])) best = v;
      *id = (int32_t)best;
    }
  }
  if (c->accept(c->user, *id) != 0) {
    snprintf(err, err_len, "step %lld: token %d does not continue the structured output",
             (long long)g->step, *id);
    return -1;
  }
  return 0;
}

int mi_gen_sample(mi_gen *g, mi_gen_token *tok, char *err, size_t err_len) {
  mi_session *e = g->e;
  const mi_gen_params *p = &g->p;
  const int64_t V = e->info.vocab_size;
  int32_t id = mi_sampler_sample(g->smp, g->logits, g->hist, g->n_hist);
  if (p->constraint && constrain(g, &id, err, err_len) != 0) return -1;
  /* every rank continues with rank 0's choice, whatever rounding did */
  if (e->tp_size > 1 && e->P->broadcast(e->pc, NULL, &id, sizeof id, 0) != 0) {
    snprintf(err, err_len, "broadcast of the sampled token failed: %s", e->P->last_error(e->pc));
    return -1;
  }
  mi_gen_token t = {.step = g->step, .id = id, .top_ids = g->top_ids, .top_lps = g->top_lps};
  t.n_top = mi_logprobs_topk(g->logits, V, id, &t.logprob, g->k, g->top_ids, g->top_lps);
  if (g->step == 0) {
    g->t_first = mi_now_seconds();
    g->st.ttft_s = g->t_first - g->t0;
  }
  g->st.n_gen++;
  g->hist[g->n_hist++] = id;
  g->last = id;
  g->is_eos = mi_session_is_eos(e, id);
  /* Ids past the tokenizer's vocabulary but inside the model's (a model may pad
   * its embedding to 151936 rows) have no text: they decode to nothing,
   * as in Hugging Face. */
  int n = id < (int32_t)mi_tokenizer_vocab_size(e->tok)
              ? mi_tok_stream_feed(&g->ts, id, g->tok_text, g->tok_cap)
              : 0;
  if (n < 0) {
    snprintf(err, err_len, "token id %d cannot be decoded by the tokenizer", id);
    return -1;
  }
  t.text = g->tok_text;
  t.text_len = (size_t)n;
  /* stop strings: look for one in pending + this text; hold back what
   * may still turn into one. */
  char *pend = g->pend;
  g->stop_hit = 0;
  memcpy(pend + g->pend_len, g->tok_text, (size_t)n);
  g->pend_len += (size_t)n;
  size_t show = g->pend_len;
  for (size_t s = 0; s < p->n_stop; s++) {
    const char *hit = memmem(pend, g->pend_len, p->stop[s], strlen(p->stop[s]));
    if (hit && (size_t)(hit - pend) <= show) {
      show = (size_t)(hit - pend);
      g->stop_hit = 1;
    }
  }
  if (!g->stop_hit) show = g->pend_len - stop_holdback(pend, g->pend_len, p->stop, p->n_stop);
  g->show = show;
  t.visible = pend;
  t.visible_len = (g->is_eos && !p->ignore_eos) ? 0 : show;
  *tok = t;
  return 0;
}

int mi_gen_advance(mi_gen *g, int cb_stop) {
  const mi_gen_params *p = &g->p;
  memmove(g->pend, g->pend + g->show, g->pend_len - g->show);
  g->pend_len -= g->show;
  g->show = 0;
  int64_t step = g->step++;
  g->done = 1;
  if (g->is_eos && !p->ignore_eos) {
    g->st.stop_reason = "eos";
    g->pend_len = 0;
    return 0;
  }
  if (g->stop_hit) {
    g->st.stop_reason = "stop string";
    g->pend_len = 0;
    return 0;
  }
  if (cb_stop) {
    g->st.stop_reason = "callback";
    return 0;
  }
  if (p->n_predict >= 0 && step + 1 >= p->n_predict) return 0;
  if (g->e->M->seq_len(g->e->model, g->seq) >= g->st.n_ctx) {
    g->st.stop_reason = "context full";
    return 0;
  }
  g->done = 0;
  return 1;
}

int mi_gen_check_logits(mi_gen *g, char *err, size_t err_len) {
  if (logits_finite(g->logits, g->e->info.vocab_size)) return 0;
  snprintf(err, err_len, "%s: step %lld: the logits are not finite (NaN or infinity): broken weights?",
           g->e->model_dir, (long long)g->step);
  return -1;
}

int mi_gen_forward(mi_gen *g, char *err, size_t err_len) {
  if (g->e->M->forward(g->e->model, g->seq, &g->last, 1, g->logits, 0, err, err_len) != 0)
    return -1;
  return mi_gen_check_logits(g, err, err_len);
}

int mi_generate(mi_session *e, const int32_t *prompt, size_t n_prompt, const mi_gen_params *p,
                mi_gen_cb cb, void *user, mi_gen_stats *st, char *err, size_t err_len) {
  memset(st, 0, sizeof *st);
  mi_gen *g;
  if (mi_gen_begin(e, prompt, n_prompt, p, &g, err, err_len) != 0) return -1;
  while (!mi_gen_done(g)) {
    mi_gen_token t;
    if (mi_gen_sample(g, &t, err, err_len) != 0) goto fail;
    int cb_stop = cb ? cb(user, &t) : 0;
    if (!mi_gen_advance(g, cb_stop)) break;
    if (mi_gen_forward(g, err, err_len) != 0) goto fail;
  }
  mi_gen_end(g, st);
  return 0;
fail:
  mi_gen_end(g, NULL);
  return -1;
}
