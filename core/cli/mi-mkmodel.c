/* mi-mkmodel: writes a random-weight checkpoint in a model family's Hugging
 * Face layout (config.json, generation_config.json, model*.safetensors
 * [+ index], tokenizer.json, tokenizer_config.json), for tests and
 * benchmarks, of any family whose model contract in the CKB has a
 * "checkpoint" block. Everything about the family is that contract's data
 * (core/ckb/checkpoint.c reads it): config.json as a template in key order,
 * named presets (--shape) of its config values, other layouts (--layout),
 * the weight map's keys and shape expressions, each weight's random_init
 * (mean + std / sqrt(fan) * z, expressions over config fields) and the
 * tokenizer folder; this file only generates and writes.
 *
 *   mi-mkmodel [--family NAME] --shape NAME --out DIR [--seed N]
 *              [--dtype bf16|f32] [--shards N] [--tokenizer-dir DIR]
 *              [--layout causal|NAME] [--ckb DIR] [--list-shapes]
 *              [--variants ID,ID] [--config KEY=JSON]... [--drop-config KEY]...
 *
 * --family: a model contract's name (model.NAME) or id; without it, the
 * one whose checkpoint block says "default": true. --ckb: the CKB (default
 * as mi-gen finds it: $MI_CKB_DIR, ./ckb, next to the executable, then the
 * source tree this file was built from). --layout: "causal" (the contract's
 * config template, the default) or one of its checkpoint.layouts, e.g. a
 * config nested under text_config with the weights renamed; the values are
 * those of the causal layout with the same seed (the generator is keyed by
 * the causal name), so the layouts are the same model.
 *
 * --variants: the family's contract edited by those CKB variants
 * (ckb/variants/, the edits evolution searches) before anything is
 * planned: e.g. qk_norm_none,bias_qkv turn a contract without biases into
 * one whose q, k and v projections carry them. --config KEY=JSON sets a config.json key
 * the variants' readers look at (architectures, model_type, hidden_act;
 * a value that is not JSON is taken as a string); a key of the shape
 * preset is refused (the tensors' shapes come from those); a number the
 * family's config template states (vocab_size) is set there before the
 * tensors are planned, so those that follow it (the embedding) do. --drop-config
 * KEY leaves a key out of config.json (a family that derives it, as
 * head_dim = hidden_size / num_attention_heads; the preset must agree, the
 * tensors are drawn from its value). Together they
 * make probe checkpoints in another family's layout for its oracle
 * (tools/peer/goldens.mjs --mkmodel-args) without a contract for it. A
 * listed variant's wrapper layout (edit.add_layout) is one --layout can
 * name; with a wrapper, --config and --drop-config act on the model's own
 * config inside it (text_config), as a released wrapper leaves out there
 * what its config class defaults.
 *
 * Determinism: every element is a pure function of (seed, tensor name,
 * element index) through a counter-based generator, so the same seed gives the
 * same tensor bytes whatever the sharding, machine or libm (only integer
 * arithmetic and one exact double multiply-add per element).
 *
 * Streaming: tensors are generated in small chunks straight into a buffered
 * FILE, so a 16 GB checkpoint needs a few MiB of memory.
 *
 * Why the contracts' random_init scales are what they are (H = hidden,
 * L = layers, z = approximately standard normal, see gen_normal()); each
 * weight's "why" says it too:
 *  - norm weights: 1 + 0.1 z (0.1 z for a zero-centred norm that multiplies
 *      by 1 + w). Not all ones, so a bug that ignores a norm weight, or uses
 *      w for 1 + w, changes the output.
 *  - input projections: z / sqrt(fan_in) (the unit-RMS RMSNorm output gives
 *      unit-variance outputs; per-head q/k norms keep scores q.k/sqrt(hd)
 *      at std ~1: attention is neither one-hot nor flat).
 *  - attention output: 3 z / sqrt(fan_in * 2L); MLP down: 8 z / sqrt(fan_in
 *      * 2L). The 1/sqrt(2L) keeps the summed residual bounded at any depth
 *      (GPT-2-style): the final stream has RMS ~3-5 for 2 to 28 layers, well
 *      above the embedding's 5/sqrt(H), so the layers, not the input
 *      embedding, decide the output. The MLP (per-token) outweighs attention
 *      (which averages over positions) because with equal weights 28 layers
 *      of near-uniform attention make every position alike ("rank
 *      collapse"): a 28-layer shape then predicted the same token at every
 *      position and greedy decoding repeated one token forever. Attention
 *      still matters: dropping its branch changes every top-1 token.
 *  - embeddings and lm_head: 5 z / sqrt(H). The final RMSNorm output has
 *      unit RMS, so logits have std ~5 over a 151936-entry vocabulary, which
 *      puts top-1 probability mostly in 0.1..0.9 (with std 3 it is ~0.02-0.3,
 *      the bulk of the vocabulary outweighs the top few). With tied
 *      embeddings the current token's own logit is favoured by about
 *      5 / RMS(final stream) std; the large residual branches keep that ~1-2
 *      std, so greedy decoding does not just echo its input.
 *  Checked with a throwaway float64 reference forward (12 prompt + 12
 *  greedy tokens; 10 + 10 for the 28-layer shape): final-stream RMS 2.3-4.9,
 *  logit std 4.9-5.2, top-1 p 0.05-0.96 (mostly 0.1-0.5), no greedy loop.
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

#include "core/ckb/ckb.h"
#include "core/gen/evolve/evolve.h"
#include "core/runtime/rng.h"

#include "mi/tensor.h"
#include "core/util/file.h"
#include "core/util/num.h"

/* One tensor as written: the plan's (names, dims, mean + sigma * z) and
 * where it goes. */
typedef struct tensor_spec {
  const char *name; /* in the chosen layout */
  const char *key;  /* the name the generator is keyed by (the causal-layout name) */
  int ndim;
  const int64_t *dims; /* [ndim] */
  double mean, sigma;
  uint64_t count, nbytes;
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

/* ---- writing ------------------------------------------------------------ */

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
  const uint64_t count = t->count;
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

/* ---- tokenizer files ---------------------------------------------------- */

static int has_tokenizer(const char *dir) {
  char p[PATH_MAX];
  path_join(p, sizeof p, dir, "tokenizer.json");
  if (access(p, R_OK) != 0) return 0;
  path_join(p, sizeof p, dir, "tokenizer_config.json");
  return access(p, R_OK) == 0;
}

/* Remembers a candidate in tried[] (for the error message); 1 if usable. */
static int try_tokenizer(const char *dir, char *tried, size_t n) {
  size_t used = strlen(tried);
  snprintf(tried + used, n - used, "%s%s", used ? ", " : "", dir);
  return has_tokenizer(dir);
}

/* The source tree this file was compiled from (__FILE__ is
 * <src>/core/cli/mi-mkmodel.c when built by CMake); NULL if unknown. */
static const char *source_root(char *buf, size_t n) {
  if (strlen(__FILE__) >= n || __FILE__[0] != '/') return NULL;
  memcpy(buf, __FILE__, strlen(__FILE__) + 1);
  for (int up = 0; up < 3; up++) {
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    *slash = 0;
  }
  return buf;
}

/* --tokenizer-dir, then $MI_TOKENIZER_DIR, then each folder the contract's
 * checkpoint.tokenizer lists, under <exe>/../../ (a build folder in the
 * source tree), <exe>/../ (an install prefix) and the source tree. An
 * explicit choice that is wrong is an error, not a reason to look
 * elsewhere. */
static const char *find_tokenizer(const char *flag, const json_t *rels, char *buf, size_t n, char *tried, size_t tn) {
  tried[0] = 0;
  if (flag) return try_tokenizer(flag, tried, tn) ? flag : NULL;
  const char *env = getenv("MI_TOKENIZER_DIR");
  if (env && *env) return try_tokenizer(env, tried, tn) ? env : NULL;
  char bases[3][PATH_MAX];
  int nb = 0;
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* exe now = bin dir */
    if (path_join(bases[nb], sizeof bases[nb], exe, "../..") == 0) nb++;
    if (path_join(bases[nb], sizeof bases[nb], exe, "..") == 0) nb++;
  }
  if (source_root(bases[nb], sizeof bases[nb])) nb++;
  for (int b = 0; b < nb; b++) {
    size_t i;
    json_t *r;
    json_array_foreach(rels, i, r) {
      if (json_is_string(r) && path_join(buf, n, bases[b], json_string_value(r)) == 0 && try_tokenizer(buf, tried, tn))
        return buf;
    }
  }
  return NULL;
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: mi-mkmodel [--family NAME] --shape NAME --out DIR [--seed N] [--dtype bf16|f32] [--shards N]\n"
          "                  [--tokenizer-dir DIR] [--layout causal|NAME] [--ckb DIR] [--list-shapes]\n"
          "                  [--variants ID,ID] [--config KEY=JSON]... [--drop-config KEY]...\n"
          "families and shapes: the model contracts of the CKB with a \"checkpoint\" block (--list-shapes)\n");
}

/* `fam`'s presets (every family's when fam is NULL), one line each:
 * parameters, the preset's config values and its doc. */
static void list_shapes(FILE *f, const mi_ckb *c, const mi_ckb_entry *fam) {
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "model") || !e->id || strncmp(e->id, "model.", 6) || (fam && e != fam)) continue;
    const json_t *presets = json_object_get(json_object_get(e->json, "checkpoint"), "presets");
    const char *pn;
    json_t *pv;
    json_object_foreach((json_t *)presets, pn, pv) {
      mi_ckb_ckpt ck;
      char err[800];
      fprintf(f, "  %-8s %-14s", e->id + 6, pn);
      if (mi_ckb_checkpoint_plan(e, pn, NULL, "bfloat16", &ck, err, sizeof err) != 0) {
        fprintf(f, " (cannot be made: %s)\n", err);
        continue;
      }
      double params = 0;
      for (size_t t = 0; t < ck.n; t++) {
        double cnt = 1;
        for (int d = 0; d < ck.t[t].ndim; d++) cnt *= (double)ck.t[t].dims[d];
        params += cnt;
      }
      fprintf(f, " %.3gB params", params / 1e9);
      const char *k;
      json_t *v;
      json_object_foreach(json_object_get(pv, "config"), k, v) {
        char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        fprintf(f, ", %s %s", k, s ? s : "?");
        free(s);
      }
      const char *doc = json_string_value(json_object_get(pv, "doc"));
      fprintf(f, "%s%s%s\n", doc ? "  (" : "", doc ? doc : "", doc ? ")" : "");
      mi_ckb_checkpoint_free(&ck);
    }
  }
}

/* the shared strict parser (core/util/num.h): decimal, no sign, no junk */
static int parse_u64(const char *s, uint64_t *out) { return mi_parse_u64(s, 0, UINT64_MAX, out); }

/* The CKB as mi-gen finds it, else the source tree's; NULL with a line. */
static mi_ckb *open_ckb(const char *flag, const char *argv0) {
  char buf[PATH_MAX], src[PATH_MAX], err[1200];
  const char *dir = flag ? flag : mi_ckb_default_dir(argv0, buf, sizeof buf);
  if (!dir && source_root(src, sizeof src) && path_join(buf, sizeof buf, src, "ckb") == 0 &&
      strlen(buf) + 20 < sizeof buf) {
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/schemas/common.json", buf);
    if (access(probe, R_OK) == 0) dir = buf;
  }
  if (!dir) {
    fprintf(stderr, "mi-mkmodel: %s\n", buf);
    return NULL;
  }
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  if (!c) fprintf(stderr, "mi-mkmodel: %s\n", err);
  return c;
}

/* What the command line asked for. */
typedef struct {
  const char *shape_name, *out, *tok_flag, *family, *layout, *ckb_flag, *variants;
  const char *sets[32]; /* --config KEY=JSON, in order */
  int n_sets;
  const char *drops[32]; /* --drop-config KEY */
  int n_drops;
  int list, help;
  uint64_t seed, nshards;
  mi_dtype dt;
} mk_args;

/* Where the options that take a plain string keep it; NULL for any other. */
static const char **string_option(mk_args *a, const char *o) {
  const struct {
    const char *name;
    const char **to;
  } opts[] = {{"--shape", &a->shape_name}, {"--layout", &a->layout}, {"--family", &a->family},
              {"--ckb", &a->ckb_flag},     {"--out", &a->out},       {"--tokenizer-dir", &a->tok_flag},
              {"--variants", &a->variants}};
  for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
    if (!strcmp(o, opts[k].name)) return opts[k].to;
  return NULL;
}

/* Fills *a from argv; 0 when the run may go on, else the exit code (2) after a line on stderr. */
static int parse_args(int argc, char **argv, mk_args *a) {
  *a = (mk_args){.seed = 1, .nshards = 1, .dt = MI_DTYPE_BF16};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--list-shapes")) {
      a->list = 1;
      continue;
    } else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      a->help = a->list = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "mi-mkmodel: %s: missing value or unknown option\n", o);
      usage(stderr);
      return 2;
    }
    i++;
    const char **str = string_option(a, o);
    if (str) {
      *str = v;
    } else if (!strcmp(o, "--config")) {
      if (!strchr(v, '=') || v[0] == '=' || a->n_sets >= 32) {
        fprintf(stderr, "mi-mkmodel: --config %s: must be KEY=JSON (at most 32)\n", v);
        return 2;
      }
      a->sets[a->n_sets++] = v;
    } else if (!strcmp(o, "--drop-config")) {
      if (!v[0] || a->n_drops >= 32) {
        fprintf(stderr, "mi-mkmodel: --drop-config '%s': a config.json key (at most 32)\n", v);
        return 2;
      }
      a->drops[a->n_drops++] = v;
    } else if (!strcmp(o, "--seed")) {
      if (parse_u64(v, &a->seed)) {
        fprintf(stderr, "mi-mkmodel: --seed %s: not a non-negative integer\n", v);
        return 2;
      }
    } else if (!strcmp(o, "--shards")) {
      if (parse_u64(v, &a->nshards) || a->nshards < 1 || a->nshards > 99999) {
        fprintf(stderr, "mi-mkmodel: --shards %s: must be an integer from 1 to 99999\n", v);
        return 2;
      }
    } else if (!strcmp(o, "--dtype")) {
      if (!strcmp(v, "bf16"))
        a->dt = MI_DTYPE_BF16;
      else if (!strcmp(v, "f32"))
        a->dt = MI_DTYPE_F32;
      else {
        fprintf(stderr, "mi-mkmodel: --dtype %s: must be bf16 or f32\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "mi-mkmodel: %s: unknown option\n", o);
      usage(stderr);
      return 2;
    }
  }
  if (!a->list && (!a->shape_name || !a->out)) {
    fprintf(stderr, "mi-mkmodel: --shape and --out are required\n");
    usage(stderr);
    return 2;
  }
  return 0;
}

/* --list-shapes (and --help): the shapes of one family, or of all; the exit code. */
static int list_mode(mi_ckb *ckb, const mk_args *a) {
  char err[1600];
  if (a->help) usage(stdout);
  const mi_ckb_entry *only = a->family ? mi_ckb_checkpoint_family(ckb, a->family, err, sizeof err) : NULL;
  if (a->family && !only) {
    fprintf(stderr, "mi-mkmodel: %s\n", err);
    return 2;
  }
  list_shapes(stdout, ckb, only);
  return 0;
}

/* The checkpoint's files in out: config(s), shards (+ index), the tokenizer copied from tokdir; 0 or 1. */
static int write_checkpoint(const mk_args *a, const mi_ckb_ckpt *ck, tensor_spec *t, int n, const char *tokdir) {
  const char *out = a->out;
  int nshards = (int)a->nshards;
  assign_shards(t, n, nshards);
  /* drop the other layout's leftovers so readers see exactly one layout */
  char stale[PATH_MAX];
  path_join(stale, sizeof stale, out, nshards > 1 ? "model.safetensors" : "model.safetensors.index.json");
  unlink(stale);
  int rc = write_json(out, "config.json", ck->config);
  if (rc == 0 && ck->generation_config) rc = write_json(out, "generation_config.json", ck->generation_config);
  for (int s = 0; s < nshards && rc == 0; s++) rc = write_shard(out, t, n, s, nshards, a->seed, a->dt);
  if (rc == 0 && nshards > 1) rc = write_index(out, t, n, nshards);
  if (rc == 0) {
    char src[PATH_MAX], dst[PATH_MAX];
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int k = 0; k < 2 && rc == 0; k++) {
      path_join(src, sizeof src, tokdir, files[k]);
      path_join(dst, sizeof dst, out, files[k]);
      rc = copy_file(src, dst);
    }
  }
  return rc ? 1 : 0;
}

/* Builds the planned checkpoint ck of family fam: tensor specs, shard count check, tokenizer,
 * output folder, then the files; the exit code. */
static int make_checkpoint(const mk_args *a, const mi_ckb_entry *fam, const mi_ckb_ckpt *ck) {
  const size_t esize = mi_dtype_size(a->dt);
  const char *out = a->out;
  int n = (int)ck->n, rc = 0;
  tensor_spec *t = calloc(ck->n ? ck->n : 1, sizeof *t);
  if (!t || ck->n > INT_MAX) rc = 1;
  for (int i = 0; rc == 0 && i < n; i++) {
    const mi_ckb_ckpt_tensor *c = &ck->t[i];
    t[i] = (tensor_spec){c->name, c->key, c->ndim, c->dims, c->mean, c->sigma, 1, 0, 0};
    for (int d = 0; d < c->ndim; d++) t[i].count *= (uint64_t)c->dims[d];
    t[i].nbytes = t[i].count * esize;
  }
  if (rc == 0 && (uint64_t)n < a->nshards) {
    fprintf(stderr, "mi-mkmodel: --shards %llu: shape '%s' has only %d tensors\n", (unsigned long long)a->nshards,
            a->shape_name, n);
    rc = 2;
  }

  char tokbuf[PATH_MAX], tried[4 * PATH_MAX + 16];
  const char *tokdir =
      rc ? NULL : find_tokenizer(a->tok_flag, ck->tokenizer, tokbuf, sizeof tokbuf, tried, sizeof tried);
  if (rc == 0 && !tokdir) {
    fprintf(stderr,
            "mi-mkmodel: %s: no tokenizer.json + tokenizer_config.json there (set --tokenizer-dir or "
            "MI_TOKENIZER_DIR, or run 'npm ci' in tools/node)\n",
            tried[0] ? tried : fam->path);
    rc = 1;
  }
  if (rc == 0 && (strlen(out) > PATH_MAX - 64 || strlen(tokdir) > PATH_MAX - 64)) {
    fprintf(stderr, "mi-mkmodel: %s: path too long\n", strlen(out) > PATH_MAX - 64 ? out : tokdir);
    rc = 1;
  }
  if (rc == 0 && mi_mkdir_p(out) != 0) {
    fprintf(stderr, "mi-mkmodel: %s: cannot create or write output directory: %s\n", out, strerror(errno));
    rc = 1;
  }
  if (rc == 0) rc = write_checkpoint(a, ck, t, n, tokdir);
  free(t);
  return rc;
}

/* --variants: fam's contract edited by the listed variant entries (ids
 * with or without "variant."), or NULL after a line. */
static json_t *apply_variants(const mi_ckb *ckb, const mi_ckb_entry *fam, const char *list) {
  json_t *vs = json_array();
  char *copy = strdup(list), *save = NULL;
  int bad = !copy;
  for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && !bad; t = strtok_r(NULL, ",", &save)) {
    char id[160];
    snprintf(id, sizeof id, "%s%s", strncmp(t, "variant.", 8) ? "variant." : "", t);
    const mi_ckb_entry *e = mi_ckb_find(ckb, id);
    if (!e || !e->kind || strcmp(e->kind, "variant")) {
      fprintf(stderr, "mi-mkmodel: --variants: no variant '%.120s' in the CKB (ckb/variants/)\n", t);
      bad = 1;
    } else {
      json_array_append(vs, e->json);
    }
  }
  free(copy);
  json_t *m = bad ? NULL : ev_apply(fam->json, vs, NULL);
  /* a variant's add_layout (a wrapper layout, with the config template and
   * extra tensors of such a checkpoint) is one --layout can name */
  size_t i;
  json_t *v;
  json_array_foreach(m ? vs : NULL, i, v) {
    const char *ln;
    json_t *lay, *ls = json_object_get(m, "layouts");
    json_object_foreach(json_object_get(json_object_get(v, "edit"), "add_layout"), ln, lay) {
      if (!json_is_object(ls)) json_object_set_new(m, "layouts", ls = json_object());
      if (!json_object_get(ls, ln)) json_object_set(ls, ln, lay);
    }
  }
  json_decref(vs);
  return m;
}

/* A copy of fam's JSON whose checkpoint.config template holds the --config
 * values of the numbers it states (vocab_size: what a tensor's shape can
 * follow; a key the shape preset sets, a "$" value, is left to set_config,
 * which refuses it, and so are names and lists, which the plan checks
 * against the contract); NULL after a line. */
static json_t *template_sets(const mk_args *a, const mi_ckb_entry *fam) {
  json_t *copy = json_deep_copy(fam->json);
  json_t *tmpl = json_object_get(json_object_get(copy, "checkpoint"), "config");
  if (!json_is_object(tmpl)) {
    fprintf(stderr, "mi-mkmodel: %s has no checkpoint.config template\n", fam->id);
    json_decref(copy);
    return NULL;
  }
  for (int i = 0; i < a->n_sets; i++) {
    const char *eq = strchr(a->sets[i], '=');
    char *key = strndup(a->sets[i], (size_t)(eq - a->sets[i]));
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (key && json_is_number(json_object_get(tmpl, key)) && json_is_number(v))
      json_object_set_new(tmpl, key, v);
    else
      json_decref(v);
    free(key);
  }
  return copy;
}

/* --config KEY=JSON into config.json, after the plan (into the model's own
 * config: a wrapper layout's text_config); a key the shape preset sets is
 * refused. 0, or -1 after a line. */
static int set_config(const mk_args *a, const mi_ckb_entry *fam, json_t *config) {
  if (a->layout && strcmp(a->layout, "causal")) {
    const json_t *lay = json_object_get(json_object_get(fam->json, "layouts"), a->layout);
    config = (json_t *)mi_ckb_layout_inner(lay, config);
  }
  const json_t *preset = json_object_get(
      json_object_get(json_object_get(json_object_get(fam->json, "checkpoint"), "presets"), a->shape_name), "config");
  for (int i = 0; i < a->n_sets; i++) {
    const char *eq = strchr(a->sets[i], '=');
    char key[128];
    size_t kl = (size_t)(eq - a->sets[i]);
    if (kl >= sizeof key) {
      fprintf(stderr, "mi-mkmodel: --config %.60s...: key too long\n", a->sets[i]);
      return -1;
    }
    memcpy(key, a->sets[i], kl);
    key[kl] = 0;
    if (json_object_get(preset, key)) {
      fprintf(stderr, "mi-mkmodel: --config %s: shape '%s' sets %s (the tensors' shapes follow it); pick another shape\n",
              key, a->shape_name, key);
      return -1;
    }
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    json_object_set_new(config, key, v ? v : json_string(eq + 1));
  }
  for (int i = 0; i < a->n_drops; i++)
    if (json_object_del(config, a->drops[i]) != 0) {
      fprintf(stderr, "mi-mkmodel: --drop-config %s: config.json has no such key\n", a->drops[i]);
      return -1;
    }
  return 0;
}

int main(int argc, char **argv) {
  mk_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  mi_ckb *ckb = open_ckb(a.ckb_flag, argv[0]);
  if (!ckb) return 2;
  if (a.list) {
    rc = list_mode(ckb, &a);
    mi_ckb_close(ckb);
    return rc;
  }
  char err[1600];
  const mi_ckb_entry *fam = mi_ckb_checkpoint_family(ckb, a.family, err, sizeof err);
  if (!fam) {
    fprintf(stderr, "mi-mkmodel: %s\n", err);
    mi_ckb_close(ckb);
    return 2;
  }
  json_t *edited = NULL;
  mi_ckb_entry with_variants;
  if (a.variants) {
    if (!(edited = apply_variants(ckb, fam, a.variants))) {
      mi_ckb_close(ckb);
      return 2;
    }
    with_variants = *fam;
    with_variants.json = edited;
    fam = &with_variants;
  }
  /* the --config values in the template too, so that the plan draws the
   * tensors from them (vocab_size sizes the embedding); set_config writes
   * them again below, where a wrapper layout puts the model's own config */
  json_t *with_sets = NULL;
  mi_ckb_entry set_fam;
  if (a.n_sets && !(with_sets = template_sets(&a, fam))) {
    json_decref(edited);
    mi_ckb_close(ckb);
    return 2;
  }
  if (with_sets) {
    set_fam = *fam;
    set_fam.json = with_sets;
    fam = &set_fam;
  }
  mi_ckb_ckpt ck;
  int prc = mi_ckb_checkpoint_plan(fam, a.shape_name, a.layout, a.dt == MI_DTYPE_BF16 ? "bfloat16" : "float32", &ck,
                                   err, sizeof err);
  if (prc == 1) {
    fprintf(stderr, "mi-mkmodel: unknown shape '%s' in family %s; known shapes:\n", a.shape_name, fam->id + 6);
    list_shapes(stderr, ckb, fam);
  } else if (prc != 0) {
    fprintf(stderr, "mi-mkmodel: %s\n", err);
  }
  if (prc == 0 && set_config(&a, fam, ck.config) != 0) {
    mi_ckb_checkpoint_free(&ck);
    prc = -1;
  }
  if (prc != 0) {
    json_decref(with_sets);
    json_decref(edited);
    mi_ckb_close(ckb);
    return 2;
  }
  rc = make_checkpoint(&a, fam, &ck);
  mi_ckb_checkpoint_free(&ck);
  json_decref(with_sets);
  json_decref(edited);
  mi_ckb_close(ckb);
  return rc;
}
