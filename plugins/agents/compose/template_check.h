/* template_check.h -- fills engine_template.c's parts with a small
 * hand-written engine so the build compiles the skeleton on its own (force-
 * included before it; see CMakeLists.txt, which builds it once per value of
 * the flags). The stand-in is one layer of a residual matmul: embed, h = x W,
 * x += h, then a norm and the tied lm_head -- enough to use every name the
 * skeleton takes from the generated part, with the types the composer gives
 * them. Nothing runs it: a real engine's behaviour is tested by tests/gen. */
#ifndef MI_TEMPLATE_CHECK_H
#define MI_TEMPLATE_CHECK_H
#include <stddef.h>
#include <stdint.h>

/* the flags: -D on the command line picks the branch */
#ifndef MI_GEN_KINDS
#define MI_GEN_KINDS 0
#endif
#ifndef MI_GEN_MULTI_VEC
#define MI_GEN_MULTI_VEC 0
#endif
#ifndef MI_GEN_PATHS
#define MI_GEN_PATHS 0
#endif
#ifndef MI_GEN_TP
#define MI_GEN_TP 0
#endif

#define MI_GEN_HEADER
#define MI_GEN_CONSTANTS

/* the constants part */
#define HIDDEN_SIZE 4
#define VOCAB_SIZE 8
#define MAX_POSITION_EMBEDDINGS 16
#define RMS_NORM_EPS 1e-06f
#define N_LAYERS 2
#define TP (MI_GEN_TP ? 2 : 1)
#define BATCH 4
#define STR_(x) #x
#define STR(x) STR_(x)
#define LOGIT_ROWS 2
#define WEIGHT_DTYPE MI_DTYPE_BF16
#define WEIGHT_DTYPES (1u << WEIGHT_DTYPE)
#define WEIGHT_ACCEPT MI_GLUE_FLOATS
#define KV_DTYPE MI_DTYPE_F32
#define KV_TYPE "f32"
#define ENGINE_NAME "template-check"
#define ARCHITECTURE "TemplateCheckForCausalLM"
#define CONFIG_ROOT "text_config"
#define MODEL_ID "model.template_check"
#define PLATFORM_NAME "cpu"
#define DTYPE_NAME "bf16"
static const char k_digest[] = "hidden_size=4;vocab_size=8;";
#define WEIGHT_BYTES 160ull
#define DECODE_WEIGHT_BYTES 160ull
#define PREFILL_FLOPS_TOKEN (2ull * 16ull * N_LAYERS)
#define ATTN_FLOPS_POS 0ull

#define MI_GEN_LAYER_WEIGHTS weight w; /* [HIDDEN_SIZE, HIDDEN_SIZE] bf16 */
#define MI_GEN_MODEL_WEIGHTS \
  weight embed_tokens;       \
  weight norm;
#define MI_GEN_BUFFERS \
  float *x;            \
  float *h;            \
  float *logits;       \
  int32_t *ids;

/* the cache layout part */
#if MI_GEN_KINDS
#define MI_GEN_CACHE_LAYOUT
#define KIND_PLAIN 0
#define KIND_STATEFUL 1
static const unsigned char k_layer_kind[N_LAYERS] = {0, 1};
static const char *const k_kind_name[] = {"plain", "stateful"};
static const size_t k_kv_row[] = {2 * HIDDEN_SIZE, 0};
static const size_t k_state[] = {0, HIDDEN_SIZE};
#define KV_ELEM float
#define KV_PART_BYTES(n_ctx, kind) ((((size_t)(n_ctx) * k_kv_row[kind] * sizeof(KV_ELEM)) + 63) & ~(size_t)63)
#define LAYER_BYTES(n_ctx, kind) (KV_PART_BYTES(n_ctx, kind) + ((k_state[kind] * sizeof(float) + 63) & ~(size_t)63))
#define LAYER_KINDS_CONFIG "layer_types"
#define LAYER_KIND_DEFAULT(l) k_kind_name[(l) % 2]
#define LAYER_KIND_OF_INT(v) ((v) == 0LL ? "plain" : (v) == 1LL ? "stateful" : (const char *)NULL)
#else
#define MI_GEN_CACHE_LAYOUT
#define KV_ELEM float
#define N_CACHE 2
#define CACHE_ROW HIDDEN_SIZE
#endif

#define MI_GEN_LOAD_WEIGHTS                                                                                   \
  if (bind(m, "model.embed_tokens.weight", VOCAB_SIZE, HIDDEN_SIZE, 0, WHOLE, &m->embed_tokens, err, err_len)) \
    return -1;                                                                                                \
  if (bind(m, "model.norm.weight", HIDDEN_SIZE, 0, 1, WHOLE, &m->norm, err, err_len)) return -1;             \
  for (int l = 0; l < N_LAYERS; l++) {                                                                        \
    snprintf(key, sizeof key, "model.layers.%d.w.weight", l);                                                 \
    if (bind(m, key, HIDDEN_SIZE, HIDDEN_SIZE, 0, SHARD_COLS, &m->layers[l].w, err, err_len)) return -1;      \
  }
#define MI_GEN_ARENA_OFFSETS                                                                  \
  size_t off_x = off;                                                                         \
  off += ((size_t)BATCH * HIDDEN_SIZE * 4 + 63) & ~(size_t)63;                                \
  size_t off_h = off;                                                                         \
  off += ((size_t)BATCH * HIDDEN_SIZE * 4 + 63) & ~(size_t)63;                                \
  size_t off_logits = off;                                                                    \
  off += ((size_t)LOGIT_ROWS * VOCAB_SIZE * 4 + 63) & ~(size_t)63;                            \
  size_t off_ids = off;                                                                       \
  off += ((size_t)BATCH * 4 + 63) & ~(size_t)63;
#define MI_GEN_ARENA_POINTERS                 \
  m->x = (float *)(base + off_x);             \
  m->h = (float *)(base + off_h);             \
  m->logits = (float *)(base + off_logits);   \
  m->ids = (int32_t *)(base + off_ids);
#define MI_GEN_PROLOGUE \
  K(P->embed(pc, NULL, m->x, m->embed_tokens.ptr, WEIGHT_DTYPE, m->ids, T, VOCAB_SIZE, HIDDEN_SIZE));
#if MI_GEN_KINDS
#define MI_GEN_LAYER_CACHE KV_ELEM *cache = (KV_ELEM *)s->layer_state[l] + (size_t)pos0 * k_kv_row[k_layer_kind[l]];
#else
#define MI_GEN_LAYER_CACHE float *cache = s->cache + ((size_t)l * N_CACHE * (size_t)s->n_ctx + (size_t)pos0) * CACHE_ROW;
#endif
#define MI_GEN_LAYER                                                                        \
  MI_GEN_LAYER_CACHE                                                                        \
  K(P->matmul(pc, NULL, m->h, m->x, L->w.ptr, WEIGHT_DTYPE, T, HIDDEN_SIZE, HIDDEN_SIZE));   \
  K(P->add(pc, NULL, m->x, m->x, m->h, T * HIDDEN_SIZE));                                   \
  K(P->memcpy_d2d(pc, NULL, cache, m->h, (size_t)T * HIDDEN_SIZE * sizeof(float)));
#define MI_GEN_EPILOGUE                                                                                        \
  K(P->rmsnorm(pc, NULL, m->h, m->x + (size_t)r0 * HIDDEN_SIZE, m->norm.ptr, R, HIDDEN_SIZE, RMS_NORM_EPS,      \
               0.0f));                                                                                         \
  K(P->matmul(pc, NULL, m->logits, m->h, m->embed_tokens.ptr, WEIGHT_DTYPE, R, VOCAB_SIZE, HIDDEN_SIZE));
#define MI_GEN_FREE_WEIGHTS                                            \
  free_w(m, &m->embed_tokens);                                         \
  free_w(m, &m->norm);                                                 \
  for (int l = 0; l < N_LAYERS; l++) free_w(m, &m->layers[l].w);
#define MI_GEN_PLATFORM_NEEDS                  \
  static const mi_platform_need k_needs[] = { \
      MI_GLUE_NEED(matmul),                   \
      MI_GLUE_NEEDS_END,                      \
  };
/* one kernel-pack operator, as part_pack_fields / part_pack_lookup write it */
#define MI_GEN_PACK_KERNELS                                                     \
  int (*pk_op)(void *, mi_stream *, float *, const float *, int64_t); /* op */ \
  void *pk_op_ctx;
#define MI_GEN_PACK_LOOKUP                                                                              \
  {                                                                                                     \
    void (*fn)(void) = NULL;                                                                            \
    if (mi_glue_pack("engine", a, "operator.op", "1.0.0", &fn, &m->pk_op_ctx, err, err_len) != 0) {     \
      e_unload(m);                                                                                      \
      return -1;                                                                                        \
    }                                                                                                   \
    m->pk_op = (int (*)(void *, mi_stream *, float *, const float *, int64_t))fn;                       \
  }

#endif
