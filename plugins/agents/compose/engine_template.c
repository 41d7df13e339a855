/* engine_template.c -- the fixed part of every engine implementer.compose
 * writes: the weight binder, the memory plan's frame, the sequence glue, the
 * model interface and the plugin descriptor. Nothing here depends on a
 * contract; the composer (source.c) copies this file into the engine and
 * fills it in:
 *   - a line holding only MI_GEN_<PART> is replaced by that generated part
 *     (the config constants, the weight fields, the forward pass's steps, ...);
 *   - #if MI_GEN_<FLAG> / #else / #endif keep one branch, chosen per
 *     engine (layer kinds or one KV cache layout, dotted config paths, ...),
 *     and the directives themselves are dropped;
 *   - everything else is copied as it is.
 * The names the generated parts define and this file uses: the config
 * constants, N_LAYERS, TP, BATCH, LOGIT_ROWS, WEIGHT_DTYPE, WEIGHT_DTYPES, WEIGHT_ACCEPT, KV_DTYPE, KV_TYPE,
 * KV_ELEM, N_CACHE and CACHE_ROW (one KV layout) or the kind tables (layer
 * kinds), ENGINE_NAME, ARCHITECTURE, MODEL_ID, PLATFORM_NAME, DTYPE_NAME,
 * the figures for info() and k_digest.
 * Its weight binding, kernel-call check, forward and sequence checks and
 * platform-needs entries are the SDK's model glue (mi/model_glue.h), the
 * same code the hand-written model plugins and the SDK template use.
 * The build compiles this file on its own with template_check.h, which fills
 * each part with a small hand-written stand-in (both branches of every flag),
 * so a mistake here fails the build, not the first mi-gen run. */
MI_GEN_HEADER
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mi/engine.h"
#include "mi/model_glue.h"
#include "mi/plugin.h"

MI_GEN_CONSTANTS

typedef mi_glue_weight weight; /* buf (NULL when borrowed), ptr (device address), dtype */

typedef struct layer {
  MI_GEN_LAYER_WEIGHTS
} layer;

struct mi_model {
  mi_glue glue; /* what binding weights takes: host, platform, weights, the model's folder */
  const mi_host_api *host;
  const mi_platform_iface *P;
  void *pc;
  const mi_weights *weights;
  MI_GEN_PACK_KERNELS
  MI_GEN_MODEL_WEIGHTS
  layer layers[N_LAYERS];
  mi_buffer *arena; /* the static memory plan: every activation below, one allocation */
  MI_GEN_BUFFERS
  int rank; /* this rank of TP */
  int64_t chunk; /* tokens per forward chunk: BATCH, or the batch option (1..BATCH) */
  int32_t pos_host[BATCH];
  uint64_t weight_bytes;
};

MI_GEN_CACHE_LAYOUT

struct mi_seq {
  int64_t n_ctx, len;
  mi_buffer *buf;
#if MI_GEN_KINDS
  float *zeros; /* STATE_MAX zero floats after the layers' parts: seq_truncate(0) copies them */
  unsigned char *layer_state[N_LAYERS]; /* each layer's part of the slab, by its kind (LAYER_BYTES) */
#else
  KV_ELEM *cache; /* [N_LAYERS][N_CACHE][n_ctx, CACHE_ROW]: the caches listed above */
#endif
};

static int fail(char *err, size_t n, const char *fmt, const char *a, const char *b) {
  snprintf(err, n, fmt, a, b);
  return -1;
}

#define K(call) MI_GLUE_K("engine", call)

/* Binds one weight [d0, d1]: a matrix in a dtype of WEIGHT_DTYPES (this rank's rows
 * zero-copy when shard = SHARD_ROWS, its columns copied when SHARD_COLS),
 * a vector widened to f32. */
enum { WHOLE = 0, SHARD_ROWS = 1, SHARD_COLS = 2 };
static int bind(mi_model *m, const char *key, int64_t d0, int64_t d1, int vector, int shard, weight *w,
                char *err, size_t err_len) {
  const mi_glue *g = &m->glue;
  mi_weight_info wi;
  if (vector) {
#if MI_GEN_MULTI_VEC
    /* a vector may be stored with unit or kernel dims ([C, 1, K]): bound as stored when its element count is d0 */
    if (m->host->weights_find(m->weights, key, &wi) == 0 && wi.ndim == vector) {
      int64_t numel = 1;
      for (int i = 0; i < wi.ndim; i++) numel *= wi.shape[i];
      if (numel == d0) return mi_glue_bind_f32(g, key, wi.ndim, wi.shape, w, err, err_len);
    }
#endif
    return mi_glue_bind_vector(g, key, d0, w, err, err_len);
  }
  const int64_t dims[2] = {d0, d1};
  if (mi_glue_find(g, key, 2, dims, WEIGHT_ACCEPT, &wi, err, err_len) != 0) return -1;
  if (!((WEIGHT_DTYPES >> wi.dtype) & 1u))
    return fail(err, err_len, "engine: tensor %s is stored as %s; this engine was generated for " DTYPE_NAME, key,
                mi_glue_dtype_str(&wi));
  if (shard == SHARD_COLS && TP > 1) /* [d0, d1/TP]: a copy of this rank's columns */
    return mi_glue_bind_cols(g, key, d0, d1, m->rank * (d1 / TP), d1 / TP, WEIGHT_ACCEPT, w, err, err_len);
  const int64_t rows = shard == SHARD_ROWS ? d0 / TP : d0; /* this rank's rows: zero-copy */
  return mi_glue_bind_rows(g, key, d0, d1, shard == SHARD_ROWS ? m->rank * rows : 0, rows, WEIGHT_ACCEPT, w,
                           err, err_len);
}

static int load_weights(mi_model *m, char *err, size_t err_len) {
  char key[160];
  MI_GEN_LOAD_WEIGHTS
  (void)key;
  return 0;
}

/* The static memory plan: every activation buffer at a fixed offset of one arena. */
static int plan_memory(mi_model *m, char *err, size_t err_len) {
  size_t off = 0;
  const mi_platform_iface *P = m->P;
  MI_GEN_ARENA_OFFSETS
  if (P->buffer_alloc(m->pc, off, &m->arena) != 0)
    return fail(err, err_len, "engine: cannot allocate the %s arena: %s", "activation", P->last_error(m->pc));
  char *base = P->buffer_ptr(m->pc, m->arena);
  MI_GEN_ARENA_POINTERS
  return 0;
}

/* T <= BATCH tokens (ids already in m->ids) at positions s->len .. s->len+T-1. */
static int forward_chunk(mi_model *m, mi_seq *s, int64_t T, char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  const int64_t pos0 = s->len;
  MI_GEN_PROLOGUE
  for (int l = 0; l < N_LAYERS; l++) {
    const layer *L = &m->layers[l];
    MI_GEN_LAYER
  }
  s->len += T;
  return 0;
}

/* Logits of rows r0 .. r0+n-1 of the last chunk, to host memory. */
static int logits_rows(mi_model *m, int64_t r0, int64_t n, float *out, char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  for (int64_t done = 0; done < n; done += LOGIT_ROWS, r0 += LOGIT_ROWS) {
    const int64_t R = n - done < LOGIT_ROWS ? n - done : LOGIT_ROWS;
    MI_GEN_EPILOGUE
    K(P->memcpy_d2h(pc, NULL, out + (size_t)done * VOCAB_SIZE, m->logits, (size_t)(R * VOCAB_SIZE) * sizeof(float)));
  }
  K(P->stream_sync(pc, NULL));
  return 0;
}

/* ---- the model interface (mi/model.h), embedded in the engine interface ---- */

static const mi_host_api *g_host;

#if MI_GEN_PATHS
/* a config field by its dotted path (rope_parameters.rope_theta) */
static const mi_json *cfg_at(const mi_host_api *h, const mi_json *cfg, const char *path) {
  char seg[64];
  const mi_json *v = cfg;
  while (v && *path) {
    size_t n = strcspn(path, ".");
    snprintf(seg, sizeof seg, "%.*s", (int)n, path);
    v = h->json_type(v) == MI_JSON_OBJECT ? h->json_get(v, seg) : NULL;
    path += n + (path[n] == '.');
  }
  return v;
}

#endif
static int e_check_config(void *ctx, const mi_json *cfg, char *err, size_t err_len) {
  /* k_digest lists every contract field as name=value; each must be what this engine was made for */
  (void)ctx;
  const mi_host_api *h = g_host;
  const char *archs = h->json_string(h->json_array_get(h->json_get(cfg, "architectures"), 0));
  if (!archs || strcmp(archs, ARCHITECTURE))
    return fail(err, err_len, "engine " ENGINE_NAME " was generated for " ARCHITECTURE " only%s%s", "", "");
  if (CONFIG_ROOT[0]) { /* a wrapper layout: the model's own fields are in that object */
    cfg = h->json_get(cfg, CONFIG_ROOT);
    if (!cfg || h->json_type(cfg) != MI_JSON_OBJECT)
      return fail(err, err_len, "engine " ENGINE_NAME " refuses this config: field %s%s is not an object", CONFIG_ROOT, "");
  }
  const char *p = k_digest;
  while (*p) {
    const char *eq = strchr(p, '='), *end = strchr(p, ';');
    char name[64], want[64], got[64] = "(absent)";
    snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
    snprintf(want, sizeof want, "%.*s", (int)(end - eq - 1), eq + 1);
#if MI_GEN_PATHS
    const mi_json *v = cfg_at(h, cfg, name);
#else
    const mi_json *v = h->json_get(cfg, name);
#endif
    int64_t iv;
    double dv;
    int bv;
    if (v && h->json_type(v) == MI_JSON_INT && h->json_int(v, &iv) == 0) snprintf(got, sizeof got, "%lld", (long long)iv);
    else if (v && h->json_type(v) == MI_JSON_REAL && h->json_real(v, &dv) == 0) snprintf(got, sizeof got, "%.17g", dv);
    else if (v && h->json_type(v) == MI_JSON_BOOL && h->json_bool(v, &bv) == 0) snprintf(got, sizeof got, "%d", bv);
    else if (v && h->json_string(v)) snprintf(got, sizeof got, "%s", h->json_string(v));
    else if (!v || h->json_type(v) == MI_JSON_NULL) snprintf(got, sizeof got, "%s", want); /* the contract's default */
    if (strcmp(got, want)) {
      snprintf(err, err_len, "engine " ENGINE_NAME " refuses this config: %s = %s, it was generated for %s = %s", name, got, name, want);
      return -1;
    }
    p = end + 1;
  }
#if MI_GEN_KINDS
  /* each layer's kind: config.json's LAYER_KINDS_CONFIG array, else LAYER_KIND_DEFAULT(l) */
  const mi_json *kinds = h->json_get(cfg, LAYER_KINDS_CONFIG);
  if (kinds && (h->json_type(kinds) != MI_JSON_ARRAY || h->json_array_size(kinds) != N_LAYERS))
    return fail(err, err_len, "engine " ENGINE_NAME " refuses this config: " LAYER_KINDS_CONFIG " is not an array of %s layer kinds%s", STR(N_LAYERS), "");
  for (int l = 0; l < N_LAYERS; l++) {
    const mi_json *kv = kinds ? h->json_array_get(kinds, (size_t)l) : NULL;
    int64_t kn = 0;
    int kb = 0;
    /* a kind's name, or a number whose kind layer_kinds.values gives (LAYER_KIND_OF_INT) */
    const char *got = !kinds                      ? LAYER_KIND_DEFAULT(l)
                      : h->json_string(kv)        ? h->json_string(kv)
                      : h->json_int(kv, &kn) == 0 ? LAYER_KIND_OF_INT(kn)
                      : h->json_bool(kv, &kb) == 0 ? LAYER_KIND_OF_INT((int64_t)kb)
                                                   : (const char *)NULL;
    if (!got || strcmp(got, k_kind_name[k_layer_kind[l]])) {
      snprintf(err, err_len, "engine " ENGINE_NAME " refuses this config: " LAYER_KINDS_CONFIG "[%d] = %s, it was generated for %s", l,
               got ? got : "(absent)", k_kind_name[k_layer_kind[l]]);
      return -1;
    }
  }
#endif
  return 0;
}

static void e_unload(mi_model *m);

static int e_load(void *ctx, const mi_model_load_args *a, mi_model **out, char *err, size_t err_len) {
  (void)ctx;
  *out = NULL;
  if ((a->tp_size > 0 ? a->tp_size : 1) != TP)
    return fail(err, err_len, "engine " ENGINE_NAME " was generated for --tp " STR(TP) " only%s%s", "", "");
#if MI_GEN_TP
  if (!mi_platform_has(a->platform.iface, allreduce_sum_f32))
    return fail(err, err_len, "engine: tensor parallelism needs the platform's allreduce%s%s", "", "");
#endif
  if (e_check_config(NULL, a->config, err, err_len) != 0) return -1;
  /* the KV cache type is baked in: a run asking for another (mi-run --kv-type) is refused */
  const char *kvopt = a->opts ? g_host->opt_get(a->opts, "kv_type") : NULL;
  if (kvopt && strcmp(kvopt, KV_TYPE))
    return fail(err, err_len, "engine: kv_type=%s asked; this engine was generated for a %s KV cache", kvopt, KV_TYPE);
  /* the batch option (mi-run -b) sets a smaller prefill chunk; the arena stays sized for BATCH */
  int64_t chunk = BATCH;
  const char *bopt = a->opts ? g_host->opt_get(a->opts, "batch") : NULL;
  if (bopt) {
    const char *q = bopt;
    for (chunk = 0; *q >= '0' && *q <= '9' && chunk <= BATCH; q++) chunk = chunk * 10 + (*q - '0');
    if (*q || q == bopt || chunk < 1 || chunk > BATCH)
      return fail(err, err_len, "engine: batch=%s must be an integer in [1, %s] (the engine's BATCH)", bopt, STR(BATCH));
  }
  mi_model *m = g_host->alloc(sizeof *m, 64);
  if (!m) return fail(err, err_len, "engine: out of memory%s%s", "", "");
  memset(m, 0, sizeof *m);
  m->host = g_host;
  m->P = a->platform.iface;
  m->pc = a->platform.ctx;
  m->weights = a->weights;
  m->rank = a->tp_rank;
  m->chunk = chunk;
  m->glue = (mi_glue){.tag = "engine", .host = m->host, .P = m->P, .pc = m->pc, .weights = m->weights,
                      .model_dir = a->model_dir ? a->model_dir : "engine", .weight_bytes = &m->weight_bytes};
  MI_GEN_PACK_LOOKUP
  if (load_weights(m, err, err_len) != 0 || plan_memory(m, err, err_len) != 0) {
    e_unload(m);
    return -1;
  }
  *out = m;
  return 0;
}

static void free_w(mi_model *m, weight *w) { mi_glue_weight_free(m->P, m->pc, w); }

static void e_unload(mi_model *m) {
  if (!m) return;
  MI_GEN_FREE_WEIGHTS
  if (m->arena) m->P->buffer_free(m->pc, m->arena);
  m->host->free(m);
}

static int e_info(mi_model *m, mi_model_info *dst) {
  size_t room = dst->struct_size ? dst->struct_size : offsetof(mi_model_info, prefill_flops_token);
  if (room > sizeof(mi_model_info)) room = sizeof(mi_model_info);
  mi_model_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = (uint32_t)room;
  i.architecture = ARCHITECTURE;
  i.vocab_size = VOCAB_SIZE;
  i.hidden_size = HIDDEN_SIZE;
  i.n_layers = N_LAYERS;
  i.max_position = MAX_POSITION_EMBEDDINGS;
  i.weight_bytes = m->weight_bytes;
#if MI_GEN_KINDS
  for (int l = 0; l < N_LAYERS; l++) { /* caches grow per token; the state of the other kinds is fixed */
    i.state_bytes_token += k_kv_row[k_layer_kind[l]] * sizeof(KV_ELEM);
    i.state_bytes_fixed += k_state[k_layer_kind[l]] * sizeof(float);
  }
#else
  i.state_bytes_token = (uint64_t)N_LAYERS * N_CACHE * CACHE_ROW * sizeof(KV_ELEM);
#endif
  i.decode_weight_bytes = DECODE_WEIGHT_BYTES;
  i.prefill_flops_token = PREFILL_FLOPS_TOKEN;
  i.attn_flops_pos = ATTN_FLOPS_POS;
  memcpy(dst, &i, room);
  return 0;
}

static int e_seq_create(mi_model *m, int64_t n_ctx, mi_seq **out, char *err, size_t err_len) {
  *out = NULL;
  mi_seq *s = mi_glue_seq_alloc("engine", n_ctx, MAX_POSITION_EMBEDDINGS, sizeof *s, err, err_len);
  if (!s) return -1;
  s->n_ctx = n_ctx;
#if MI_GEN_KINDS
  size_t bytes = 0, most = 0; /* one slab: each layer's caches and state, then zeros for a reset */
  for (int l = 0; l < N_LAYERS; l++) {
    bytes += LAYER_BYTES(n_ctx, k_layer_kind[l]);
    if (k_state[k_layer_kind[l]] > most) most = k_state[k_layer_kind[l]];
  }
  if (m->P->buffer_alloc(m->pc, bytes + most * sizeof(float), &s->buf) != 0) { /* zeroed: a new sequence's state */
    free(s);
    return fail(err, err_len, "engine: cannot allocate the sequence's caches and state: %s%s", m->P->last_error(m->pc), "");
  }
  unsigned char *p = m->P->buffer_ptr(m->pc, s->buf);
  for (int l = 0; l < N_LAYERS; l++) {
    s->layer_state[l] = p;
    p += LAYER_BYTES(n_ctx, k_layer_kind[l]);
  }
  s->zeros = (float *)p;
#else
  size_t bytes = (size_t)N_LAYERS * N_CACHE * (size_t)n_ctx * CACHE_ROW * sizeof(KV_ELEM);
  if (m->P->buffer_alloc(m->pc, bytes, &s->buf) != 0) {
    free(s);
    return fail(err, err_len, "engine: cannot allocate the KV cache: %s%s", m->P->last_error(m->pc), "");
  }
  s->cache = m->P->buffer_ptr(m->pc, s->buf);
#endif
  *out = s;
  return 0;
}

static void e_seq_destroy(mi_model *m, mi_seq *s) {
  if (!s) return;
  if (s->buf) m->P->buffer_free(m->pc, s->buf);
  free(s);
}

#if MI_GEN_KINDS
/* The fixed state summarises every position so far: a sequence is kept whole or
 * restarted (n_keep 0 zeroes the state), never cut in between. Kinds with no
 * fixed state (sliding- and full-attention layers) hold only caches, cut
 * like any KV cache. */
static int e_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {
  if (n_keep == s->len) return 0;
  int stateful = 0;
  for (int l = 0; l < N_LAYERS; l++) stateful |= k_state[k_layer_kind[l]] != 0;
  if (!stateful) {
    if (n_keep < 0 || n_keep > s->len) return -1;
    s->len = n_keep;
    return 0;
  }
  if (n_keep != 0) {
    m->host->log(MI_LOG_ERROR, ENGINE_NAME, "a sequence with recurrent state can be truncated only to 0 or its "
                 "length %lld, not to %lld", (long long)s->len, (long long)n_keep);
    return -1;
  }
  for (int l = 0; l < N_LAYERS; l++) {
    const size_t n = k_state[k_layer_kind[l]];
    if (n && m->P->memcpy_d2d(m->pc, NULL, s->layer_state[l] + KV_PART_BYTES(s->n_ctx, k_layer_kind[l]),
                              s->zeros, n * sizeof(float)) != 0)
      return -1;
  }
  s->len = 0;
  return 0;
}
#else
static int e_seq_truncate(mi_model *m, mi_seq *s, int64_t n_keep) {
  (void)m;
  if (n_keep < 0 || n_keep > s->len) return -1;
  s->len = n_keep;
  return 0;
}
#endif

static int64_t e_seq_len(mi_model *m, mi_seq *s) {
  (void)m;
  return s->len;
}

static int e_forward(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n, float *logits, int all_logits,
                     char *err, size_t err_len) {
  const mi_platform_iface *P = m->P;
  void *pc = m->pc;
  if (mi_glue_check_forward("engine", ids, n, s->len, s->n_ctx, VOCAB_SIZE, err, err_len) != 0) return -1;
  for (int64_t done = 0; done < n;) {
    const int64_t T = n - done < m->chunk ? n - done : m->chunk;
    K(P->memcpy_h2d(pc, NULL, m->ids, ids + done, (size_t)T * sizeof(int32_t)));
    if (forward_chunk(m, s, T, err, err_len) != 0) return -1;
    if (logits && all_logits && logits_rows(m, 0, T, logits + (size_t)done * VOCAB_SIZE, err, err_len) != 0) return -1;
    if (logits && !all_logits && done + T == n && logits_rows(m, T - 1, 1, logits, err, err_len) != 0) return -1;
    done += T;
  }
  return 0;
}

static const char *const k_architectures[] = {ARCHITECTURE, NULL};

MI_GEN_PLATFORM_NEEDS

static const mi_engine_iface k_iface = {
    .model = {.struct_size = sizeof(mi_model_iface), .architectures = k_architectures,
              .check_config = e_check_config, .load = e_load, .unload = e_unload, .info = e_info,
              .seq_create = e_seq_create, .seq_destroy = e_seq_destroy, .seq_truncate = e_seq_truncate,
              .seq_len = e_seq_len, .forward = e_forward, .platform_needs = k_needs},
    .struct_size = sizeof(mi_engine_iface),
    .constraints = "{\"model\":\"" MODEL_ID "\",\"platform\":\"" PLATFORM_NAME "\",\"dtype\":\"" DTYPE_NAME
                   "\",\"tp\":" STR(TP) ",\"kv_type\":\"" KV_TYPE "\"}",
    .config_digest = k_digest,
    .generator = "implementer.compose 0.1.0",
};

static int e_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err, size_t err_len) {
  (void)opts;
  if (!host || host->struct_size < sizeof(mi_host_api)) return fail(err, err_len, "host API table too old%s%s", "", "");
  g_host = host;
  *ctx = (void *)&g_host;
  return 0;
}

static const void *e_get_iface(void *ctx) {
  (void)ctx;
  return &k_iface;
}

static const mi_plugin_desc k_desc = {
    .abi_major = MI_ABI_MAJOR, .abi_minor = MI_ABI_MINOR, .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_ENGINE, .name = ENGINE_NAME, .version = "1.0.0",
    .description = "generated " ARCHITECTURE " engine (" PLATFORM_NAME ", " DTYPE_NAME ", tp " STR(TP) ")",
    .init = e_init, .get_iface = e_get_iface,
};

MI_PLUGIN_DEFINE(k_desc)
