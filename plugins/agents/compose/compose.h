/* implementer.compose's parts, shared by its files:
 *   compose.c      the agent: the task, the contracts, experience, patches
 *   bindings.c     config values and contract expressions as C (core/ckb's
 *                  expression library), weight keys, buffer shapes
 *   emit_steps.c   a step sequence as platform calls
 *   layer_kinds.c  contracts whose layers are of several kinds
 *   engine_parts.c the generated parts of the engine (constants, weights,
 *                  memory plan, forward pass)
 *   source.c       engine_template.c filled in with them */
#ifndef MI_COMPOSE_H
#define MI_COMPOSE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- a growing string ---- */
typedef struct sb {
  char *s;
  size_t n, cap;
} sb;
__attribute__((format(printf, 2, 3))) void sp(sb *b, const char *fmt, ...);

typedef struct gen {
  json_t *model, *platform, *config; /* contract (patched copy), platform contract, config.json */
  json_t *ops;                       /* operator id -> contract */
  const char *dtype;                 /* weight dtype constraint, e.g. "bf16", "q8_0", "q4_k_m" */
  json_t *wset; /* the dtypes a matrix may be stored in: the platform's dtypes.weight_sets[dtype], else [dtype] */
  int blocks;   /* wset holds block types (GGUF's): each matrix's own dtype goes to its kernels */
  int block_floats; /* ... and f32 too: matrices the load widened (the glue takes floats as well) */
  int tp;                            /* tensor-parallel degree (constraint) */
  int nosplit;                       /* 1 while writing full (unsharded) weight shapes */
  const char *kv;  /* KV cache element type (constraint kv_type): f32, f16 or bf16 */
  int half_kv;     /* kv is f16/bf16: steps write new k/v rows in f32 to a staging
                      buffer, then operator.convert stores them (store_staged) */
  json_t *pending; /* cache name -> true: staged rows not yet converted into the cache */
  char err[1024];
  json_t *weights_seen; /* key -> {"kind": "matrix"|"vector", "field"} */
  /* layers of several kinds (the contract's layer_kinds): */
  json_t *kinds;          /* layer_kinds.kinds (kind name -> {sequence, cache, state}), or NULL */
  json_t *cur_kind;       /* the kind whose sequence is being written: its cache and state names */
  unsigned char *kind_of; /* [layers] index of each layer's kind, in the order of `kinds` */
  int64_t n_layers;
  int has_paths; /* a config field lives under a dotted path of config.json */
  json_t *packs;  /* operator id -> contract: the kernel-pack operators the steps call (member "pack") */
} gen;

/* bindings.c */
const char *flit(double d, char *buf, size_t n);
void upper(char *dst, const char *src, size_t n);
const char *dtype_const(const char *d);
const char *weight_dtype_const(const char *d); /* dtype_const and the block types q8_0, q4_0, q4_k, q6_k */
json_t *cfg_entry(gen *g, const char *name, size_t len);
const char *cfg_where(json_t *entry);
json_t *cfg_value(gen *g, json_t *entry);
int int_binding(gen *g, const char *ex, int64_t *val);
int expr_c(gen *g, const char *ex, sb *out, int64_t *val);
int64_t expr_value(gen *g, const char *ex);
json_t *find_named(json_t *arr, const char *name, size_t n);
int row_width(gen *g, json_t *buf, sb *out);
void shape_comment(gen *g, json_t *buf, sb *out, int T_is_batch);
void weight_field(const char *key, char *out, size_t n);
json_t *weight_entry(gen *g, const char *key);
const char *bound_key(gen *g, const char *key);
int64_t shape_numel(gen *g, json_t *shape);
int weight_is_vector(gen *g, const char *key);

/* emit_steps.c */
int emit_step(gen *g, json_t *step, sb *out, const char *indent);
/* The engine's field for a kernel-pack operator ("operator.bias_add" -> "pk_bias_add"). */
void pack_field(const char *op_id, char *out, size_t n);

/* engine_parts.c: the kernel-pack kernels the steps call (g->packs): their
 * function pointers in struct mi_model, and their lookup at load */
void part_pack_fields(gen *g, sb *o);
void part_pack_lookup(gen *g, sb *o);
int emit_steps(gen *g, json_t *steps, sb *out, const char *indent);

/* layer_kinds.c */
int plan_kinds(gen *g);
int64_t kind_count(gen *g, size_t idx);
int kind_index(gen *g, const char *name);
int kind_macros(gen *g, sb *o);
int emit_kinds(gen *g, sb *o);

/* engine_parts.c: each writes one part of engine_template.c (MI_GEN_<PART>) */
void part_header(gen *g, json_t *contracts, json_t *experience, json_t *patches, sb *o);
void part_constants(gen *g, const char *engine_name, sb *o);
void part_figures(gen *g, sb *o);
void part_weight_fields(gen *g, int per_layer, sb *o);
void part_buffers(gen *g, sb *o);
int part_cache_layout(gen *g, sb *o);
int part_load_weights(gen *g, sb *o);
void part_arena(gen *g, sb *offsets, sb *pointers);
void part_prologue(gen *g, const char *steps, sb *o);
void part_layer(gen *g, const char *steps, sb *o);
void part_free_weights(gen *g, sb *o);
void part_platform_needs(const char *source, sb *o);

/* source.c */
int compose_source(gen *g, json_t *contracts, json_t *experience, json_t *patches,
                   const char *engine_name, sb *o);
/* engine_template.c with its parts and flags: 0, or -1 with why in err */
typedef struct tpl_part {
  const char *name; /* MI_GEN_<name> */
  const char *text;
} tpl_part;
int fill_template(const char *tpl, const tpl_part *parts, size_t n_parts,
                  const char *const *flags_on, sb *out, char *err, size_t err_len);

#endif
