/* The model-architecture interface. A model plugin (kind MI_PLUGIN_MODEL)
 * turns a Hugging Face model directory (config.json + weights) into a
 * forward pass built from platform kernels.
 *
 * Sequence state is the model's business: a dense transformer keeps a KV
 * cache, a hybrid (gated DeltaNet) keeps recurrent and conv states as well.
 * The core only creates, resets and feeds sequences.
 */
#ifndef MI_MODEL_H
#define MI_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"
#include "mi/kernel_pack.h"
#include "mi/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_model mi_model; /* opaque: defined by each model plugin */
typedef struct mi_seq mi_seq;     /* opaque: one sequence's state */

typedef struct mi_platform_ref {
  const mi_platform_iface *iface;
  void *ctx;
} mi_platform_ref;

typedef struct mi_model_load_args {
  uint32_t struct_size;
  const char *model_dir;
  const mi_json *config;     /* parsed config.json */
  const mi_weights *weights; /* the model's safetensors, mmapped */
  mi_platform_ref platform;
  int tp_rank; /* tensor parallelism: this rank, 0-based */
  int tp_size; /* 1 without tensor parallelism */
  const mi_options *opts;
  /* ABI 1.6 (appended; read only when struct_size covers them): the kernel
   * packs (mi/kernel_pack.h) the host loaded and bound to this platform,
   * for operators no platform member computes. A model finds a kernel with
   * mi_pack_find (mi_glue_pack in mi/model_glue.h). NULL / 0: none. */
  const mi_pack_ref *packs;
  int n_packs;
} mi_model_load_args;

typedef struct mi_model_info {
  uint32_t struct_size;
  const char *architecture; /* e.g. "Qwen3ForCausalLM" */
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t n_layers;
  int64_t max_position; /* max_position_embeddings */
  uint64_t weight_bytes;      /* bytes of weights one forward reads */
  uint64_t state_bytes_token; /* per-token state (KV cache) bytes */
  uint64_t state_bytes_fixed; /* per-sequence fixed state (recurrent) bytes */
  uint64_t decode_weight_bytes; /* weight bytes one decode step must read
                                   (all but the unread rows of an untied embedding) */
  /* ABI 1.1 (appended): arithmetic per token, for prefill rooflines. 0 = unknown. */
  uint64_t prefill_flops_token; /* matmul FLOPs of one prompt token, logits excluded */
  uint64_t attn_flops_pos;      /* attention FLOPs of one token per earlier position */
} mi_model_info;

/* One platform member a model needs (ABI 1.2): `member` names a
 * mi_platform_iface member (see MI_PLATFORM_MEMBERS); `when` says for which
 * loads. The core checks the list when it pairs the model with a platform
 * (after the platform's init, before the model's load) and refuses a platform
 * lacking one with a line naming every missing member; `mi-run
 * --list-plugins` shows which models each platform can serve. A need is
 * declared as data, not code, so it can be read without calling the plugin. */
typedef enum mi_need_when {
  MI_NEED_ALWAYS = 0, /* every load */
  MI_NEED_TP = 1,     /* only with tensor parallelism (tp_size > 1) */
  MI_NEED_OPTION = 2, /* only when model option `key` is set to a value other than `unless` */
} mi_need_when;

typedef struct mi_platform_need {
  const char *member; /* NULL ends the list */
  int when;           /* mi_need_when */
  const char *key;    /* MI_NEED_OPTION: the option, e.g. "kv_type" */
  const char *unless; /* MI_NEED_OPTION: the value that needs nothing, e.g. "f32" */
} mi_platform_need;

typedef struct mi_model_iface {
  uint32_t struct_size;

  /* config.json "architectures" values this plugin implements (NULL-terminated) */
  const char *const *architectures;

  /* 0 if the config is supported; otherwise a one-line reason in err. */
  int (*check_config)(void *ctx, const mi_json *config, char *err, size_t err_len);

  int (*load)(void *ctx, const mi_model_load_args *args, mi_model **out, char *err,
              size_t err_len);
  void (*unload)(mi_model *m);
  /* The caller sets out->struct_size to the size of ITS mi_model_info (0 is
   * read as the ABI 1.0 size); the plugin writes no more than that, so an
   * older host and a newer plugin (or the reverse) stay compatible. */
  int (*info)(mi_model *m, mi_model_info *out);

  /* A sequence holding up to n_ctx tokens. */
  int (*seq_create)(mi_model *m, int64_t n_ctx, mi_seq **out, char *err, size_t err_len);
  void (*seq_destroy)(mi_model *m, mi_seq *s);
  /* Keep the first n_keep tokens (0 clears). A recurrent model may refuse
   * values other than 0 and the current length. */
  int (*seq_truncate)(mi_model *m, mi_seq *s, int64_t n_keep);
  int64_t (*seq_len)(mi_model *m, mi_seq *s);

  /* Appends n tokens to the sequence and runs them in one batched pass.
   * logits (host memory): NULL for none; else [n, vocab] when all_logits,
   * otherwise [vocab] for the last token. */
  int (*forward)(mi_model *m, mi_seq *s, const int32_t *ids, int64_t n, float *logits,
                 int all_logits, char *err, size_t err_len);

  /* ABI 1.2 (appended): the platform members load/forward call, ended by an
   * entry with member NULL. Required from a plugin declaring abi_minor >= 2
   * (an empty list is { {NULL} }); a 1.0/1.1 plugin has none and is paired
   * with any platform, as before. Members the model calls only after
   * checking mi_platform_has() need not be listed. */
  const mi_platform_need *platform_needs;

  /* ABI 1.3 (appended; optional, NULL = not supported: a server then steps
   * its sequences one at a time). One decode step for n distinct sequences
   * in one batched pass: appends ids[i] to seqs[i] and writes that
   * sequence's [vocab] logits to logits[i] (host memory). The results equal
   * n forward() calls of one token each. On failure no sequence may be left
   * half-advanced: either all n advanced, or none (-1, err set). */
  int (*forward_batch)(mi_model *m, mi_seq *const *seqs, const int32_t *ids, int64_t n,
                       float *const *logits, char *err, size_t err_len);

  /* ABI 1.5 (appended; optional, NULL = no prefix caching). The per-position
   * state (KV cache) of positions [pos, pos+n) of s, copied into host memory
   * at dst: n * state_bytes_token bytes in the plugin's own layout (only the
   * same plugin, same load options, reads it back), position by position:
   * the reads of adjacent ranges, concatenated, are the read of their union
   * (a cache may keep blocks and write several at once). Requires
   * pos+n <= seq_len. fixed_dst: NULL, or state_bytes_fixed bytes receiving
   * the fixed (recurrent) state, which exists only at the current length: it
   * requires pos + n == seq_len(s). Under tensor parallelism each rank reads
   * and writes its own share (its state_bytes_*). Both return 0, or -1 with
   * one line in err. */
  int (*seq_state_read)(mi_model *m, mi_seq *s, int64_t pos, int64_t n, void *dst,
                        void *fixed_dst, char *err, size_t err_len);
  /* Appends positions [pos, pos+n) from src (as seq_state_read wrote them):
   * requires pos == seq_len(s) and pos+n within the sequence's context; then
   * seq_len(s) == pos + n. A model with fixed state (state_bytes_fixed > 0)
   * requires fixed_src (the fixed state at pos + n) and refuses NULL; a model
   * without ignores it. On failure the sequence is unchanged (except that a
   * device copy failing half way through a fixed state replaced in place
   * leaves it refusing forwards until seq_truncate(0), as a failed forward
   * does). */
  int (*seq_state_write)(mi_model *m, mi_seq *s, int64_t pos, int64_t n, const void *src,
                         const void *fixed_src, char *err, size_t err_len);
} mi_model_iface;

/* Whether a model interface has a member (covered by its struct_size, set). */
#define mi_model_has(iface, m)                                                                     \
  ((iface)->struct_size >= offsetof(mi_model_iface, m) + sizeof((iface)->m) && (iface)->m != NULL)

#ifdef __cplusplus
}
#endif
#endif
