/* mi-gen on GGUF files, quantized ones included (issue 28: `mi-gen --dtype
 * q8_0|q4_k_m` generates engines for quantized checkpoints and verifies
 * them at every stage). The files are made here from mi-mkmodel
 * checkpoints by the project's quantizer (tools/peer/hf2gguf.mjs); stage 4
 * holds each engine to llama.cpp on the file's weights dequantized exactly
 * (tests/goldens/gguf, made by tools/peer/oracle.mjs from the same files).
 *   - q8_0, tiny seed 1: every stage passes; stage 2 ran the layer on every
 *     block type (Q4_K and Q6_K on block_layer_config); the engine binds
 *     Q8_0 matrices and hands each matrix's dtype to its kernel; run as
 *     deployed it gives the same --json as the hand-written qwen3 plugin on
 *     the same file;
 *   - q4_k_m, tiny-blocks seed 5 (Q4_K with Q6_K where llama.cpp gives more
 *     bits): every stage passes; an engine that hands one matrix the set's
 *     first dtype instead of its own (the Q6_K ffn_down read as Q4_K) is
 *     rejected at stage 3;
 *   - refusals, one line each, exit 6: a block dtype on a folder, a file
 *     whose matrices are not in the dtype's set;
 *   - a Llama file (hf2gguf.mjs permutes q and k rows per head for
 *     llama.cpp's adjacent-pair rotation, as llama.cpp's converter does):
 *     the model contract's gguf.transforms undo it at load, so the engine
 *     mi-gen makes from the file passes stage 4 against llama.cpp, and
 *     without the transforms the same engine answers otherwise;
 *   - Llama 3.1-style files (the rope scaling a rope_freqs tensor, no key):
 *     the contract's gguf.derive reads a published setting back through
 *     the shipped CKB (the engine mi-gen makes from the file runs the folder
 *     to the same bytes), another once it is added as data; a setting the
 *     contract does not list is refused by the tensor's name;
 *   - a Gemma 2 file (norms stored 1 + w, sandwich norms, soft-caps and
 *     window as keys), bf16 and Q4_K_M: every stage, stage 4 against
 *     llama.cpp on the file; the folder to the same bytes (bf16); the
 *     norms' storage exercised;
 *   - a Qwen3.5 hybrid file (arch qwen35: value heads tiled, A_log as
 *     -exp(A_log), conv1d squeezed, zero-centred norms as 1 + w, the
 *     recurrent layers as a 0/1 array): every stage, stage 4 against
 *     llama.cpp on the file, the folder to the same bytes; the storage
 *     exercised; its Q8_0 file (the matrix whose columns cannot move
 *     as blocks widened at load, which the q8_0 weight set allows); and
 *     its released layout with a whole multi-token-prediction head, whose
 *     appended layer the section skips. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_tool.h"
#include "tests/util/check_main.h"

static char g_build[1024], g_src[1024], g_tmp[1100], g_model[1200], g_gold[1300];
static char g_q8[1300], g_wide[1300], g_q4km[1300], g_out_q8[1300], g_out_q4km[1300];
static char g_llama[1300], g_llama_gguf[1300], g_out_llama[1300];
static char g_gemma2[1300], g_gemma2_gguf[1300], g_out_gemma2[1300];
static char g_gemma2q[1300], g_gemma2q_gguf[1300], g_out_gemma2q[1300];
static char g_q35[1300], g_q35_gguf[1300], g_out_q35[1300], g_q35q8[1300], g_out_q35q8[1300];
static res g_gen_q8, g_gen_q4km, g_gen_llama, g_gen_gemma2, g_gen_gemma2q, g_gen_q35, g_gen_q35q8;

static res run(const char *tool, const char *const *args, int timeout) {
  return gt_run(g_build, g_tmp, tool, args, timeout);
}
#define sh(...) gt_sh("test_gen_gguf", __VA_ARGS__)

/* Llama 3.1's and 3.2's published llama3 rope scaling (a setting model.llama's
 * gguf.derive lists) */
#define ROPE_PUBLISHED                                                                                              \
  "rope_scaling={\"factor\":8.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"                             \
  "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}"
/* the probe's (tests/goldens/families/llama31-probe-tiny-seed6.json): the
 * bands inside a tiny model's positions, so the scaling moves its logits */
#define ROPE_PROBE                                                                                                  \
  "rope_scaling={\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"                            \
  "\"original_max_position_embeddings\":64,\"rope_type\":\"llama3\"}"

/* the Llama probe of tests/goldens/families/llama-probe-tiny-seed4.json;
 * rope (ROPE_*) adds a llama3 rope scaling */
static int mk_llama(const char *out, const char *seed, const char *rope) {
  const char *a[] = {"--family", "qwen3", "--shape", "tiny", "--seed", seed, "--dtype", "bf16", "--variants",
                     "qk_norm_none", "--config", "architectures=[\"LlamaForCausalLM\"]", "--config",
                     "model_type=llama", "--config", "pretraining_tp=1", "--config", "mlp_bias=false", "--config",
                     "rope_theta=500000.0", "--drop-config", "head_dim", "--drop-config", "use_sliding_window",
                     "--drop-config", "sliding_window", "--drop-config", "max_window_layers", "--out", out,
                     rope ? "--config" : NULL, rope, NULL};
  res r = run("mi-mkmodel", a, 120);
  int rc = r.rc;
  res_free(&r);
  return rc;
}
static int g_quick;

/* the Gemma 2 probe of tests/goldens/families/gemma2-probe-6l-seed15.json
 * (its mkmodel_args: the released layout, sandwich 1 + w norms, soft-caps,
 * alternating sliding layers), into out; replace: (old, new) argument
 * pairs, NULL-terminated, or NULL */
static int mk_from_golden(const char *golden_rel, const char *out, const char *const *replace) {
  char p[1400];
  snprintf(p, sizeof p, "%s/%s", g_src, golden_rel);
  json_t *g = json_load_file(p, 0, NULL), *args = json_object_get(json_object_get(g, "model"), "mkmodel_args");
  const char *a[72];
  size_t i, n = 0;
  json_t *x;
  json_array_foreach(args, i, x) if (n < 68) {
    a[n] = json_string_value(x);
    for (int r = 0; replace && replace[r]; r += 2) /* (old, new) pairs: an argument replaced whole */
      if (a[n] && !strcmp(a[n], replace[r])) a[n] = replace[r + 1];
    n++;
  }
  a[n++] = "--out", a[n++] = out, a[n] = NULL;
  int rc = -1;
  if (json_array_size(args) > 0 && json_array_size(args) <= 68) {
    res r = run("mi-mkmodel", a, 120);
    rc = r.rc;
    res_free(&r);
  }
  json_decref(g);
  return rc;
}

static int one_line(const char *s) {
  return strchr(s, '\n') == s + strlen(s) - 1;
}

/* node (or $MI_NODE) converting DIR to OUT of type T; 0 when OUT was written */
static int hf2gguf(const char *dir, const char *out, const char *type) {
  const char *node = getenv("MI_NODE") ? getenv("MI_NODE") : "node";
  char cmd[5000];
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/tools/peer/hf2gguf.mjs' '%s' '%s' --type %s > '%s/hf2gguf.log' 2>&1", node,
           g_src, dir, out, type, g_tmp);
  return system(cmd) == 0 ? 0 : -1;
}

static res gen_seed(const char *model, const char *dtype, const char *out, const char *ckb, const char *seed) {
  const char *a[] = {"--model", model,   "--platform", "cpu",   "--dtype", dtype,       "--tp",
                     "1",       "--out", out,          "--ckb", ckb,       "--goldens", g_gold,
                     "--seed",  seed,    "-t",         "2",     NULL};
  return run("mi-gen", a, 900);
}

static res gen_ckb(const char *model, const char *dtype, const char *out, const char *ckb) {
  return gen_seed(model, dtype, out, ckb, "3");
}

static res gen(const char *model, const char *dtype, const char *out) {
  char ckb[1300];
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  return gen_ckb(model, dtype, out, ckb);
}

/* The Gemma 2 probe's checkpoint (mk_from_golden with replace) in
 * g_tmp/name (general.name, which the golden's file hash holds), its GGUF
 * of type in g_tmp/name-type.gguf, and (not quick) the engine mi-gen makes
 * from the file at seed into g_tmp/engine-name; 0, or -1 when the
 * checkpoint or the file could not be made. */
static int gemma2_file(const char *name, const char *const *replace, const char *type, const char *seed, char *dir,
                       char *gguf, char *out, res *gen_res) {
  char ckb[1300];
  snprintf(dir, 1300, "%s/%s", g_tmp, name);
  snprintf(gguf, 1300, "%s/%s-%s.gguf", g_tmp, name, type);
  snprintf(out, 1300, "%s/engine-%s", g_tmp, name);
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  if (mk_from_golden("tests/goldens/families/gemma2-probe-6l-seed15.json", dir, replace) != 0 ||
      hf2gguf(dir, gguf, type) != 0)
    return -1;
  if (!g_quick) *gen_res = gen_seed(gguf, type, out, ckb, seed);
  return 0;
}

/* once: the checkpoints, their GGUF files and the engines */
static int setup_all(void) {
  if (gt_dirs("/tmp/mi-gen-gguf-test-XXXXXX", g_build, g_src, g_tmp, g_model, NULL)) abort();
  snprintf(g_gold, sizeof g_gold, "%s/tests/goldens/gguf", g_src);
  const char *mk[] = {"--shape", "tiny", "--seed", "1", "--out", g_model, NULL};
  res r = run("mi-mkmodel", mk, 120);
  res_free(&r);
  snprintf(g_q8, sizeof g_q8, "%s/tiny-seed1-q8_0.gguf", g_tmp);
  if (hf2gguf(g_model, g_q8, "q8_0") != 0) return -1;
  snprintf(g_out_q8, sizeof g_out_q8, "%s/engine-q8_0", g_tmp);
  g_gen_q8 = gen(g_q8, "q8_0", g_out_q8);
  snprintf(g_wide, sizeof g_wide, "%s/tiny-blocks", g_tmp);
  const char *mk2[] = {"--shape", "tiny-blocks", "--seed", "5", "--out", g_wide, NULL};
  r = run("mi-mkmodel", mk2, 120);
  res_free(&r);
  snprintf(g_q4km, sizeof g_q4km, "%s/tiny-blocks-seed5-q4_k_m.gguf", g_tmp);
  if (hf2gguf(g_wide, g_q4km, "q4_k_m") != 0) return -1;
  snprintf(g_out_q4km, sizeof g_out_q4km, "%s/engine-q4_k_m", g_tmp);
  if (!g_quick) g_gen_q4km = gen(g_q4km, "q4_k_m", g_out_q4km);
  /* general.name is the folder's name: the golden's file hash needs this one */
  snprintf(g_llama, sizeof g_llama, "%s/llama-probe-tiny-seed4", g_tmp);
  snprintf(g_llama_gguf, sizeof g_llama_gguf, "%s/llama-probe-tiny-seed4-bf16.gguf", g_tmp);
  if (mk_llama(g_llama, "4", NULL) != 0 || hf2gguf(g_llama, g_llama_gguf, "bf16") != 0) return -1;
  snprintf(g_out_llama, sizeof g_out_llama, "%s/engine-llama", g_tmp);
  if (!g_quick) g_gen_llama = gen(g_llama_gguf, "bf16", g_out_llama);
  /* seed 2: stage 4d's long prompt, sized from case 1's tokens per word,
   * comes out at 4151 tokens for a 4096 context before it is measured
   * with the tokenizer and cut (plugins/agents/stages: fit_long_prompt) */
  if (gemma2_file("gemma2-probe-6l-seed15", NULL, "bf16", "2", g_gemma2, g_gemma2_gguf, g_out_gemma2, &g_gen_gemma2))
    return -1;
  /* the same probe at the tiny-blocks shape (rows of whole 256-value blocks),
   * as llama-quantize's Q4_K_M mix: Q4_K, Q6_K for the tied embedding and
   * the layers' attn_v/ffn_down it gives more bits */
  static const char *const blocks[] = {"probe-6l", "tiny-blocks", "query_pre_attn_scalar=32", "query_pre_attn_scalar=64", NULL};
  if (gemma2_file("gemma2-tiny-blocks-seed15", blocks, "q4_k_m", "3", g_gemma2q, g_gemma2q_gguf, g_out_gemma2q,
                  &g_gen_gemma2q))
    return -1;
  /* the hybrid: 2 key heads over 4 value heads, so the tiled order differs */
  snprintf(g_q35, sizeof g_q35, "%s/qwen35-tiny-seed3", g_tmp);
  snprintf(g_q35_gguf, sizeof g_q35_gguf, "%s/qwen35-tiny-seed3-bf16.gguf", g_tmp);
  snprintf(g_out_q35, sizeof g_out_q35, "%s/engine-qwen35", g_tmp);
  const char *mk3[] = {"--family", "qwen35", "--shape", "tiny", "--seed", "3", "--out", g_q35, NULL};
  r = run("mi-mkmodel", mk3, 120);
  const int mk3_rc = r.rc;
  res_free(&r);
  if (mk3_rc != 0 || hf2gguf(g_q35, g_q35_gguf, "bf16") != 0) return -1;
  if (!g_quick) g_gen_q35 = gen(g_q35_gguf, "bf16", g_out_q35);
  /* its Q8_0 file: value-head rows moved as Q8_0 rows, out_proj's 16-wide
   * column runs not whole blocks of 32, so that matrix widened to f32 */
  snprintf(g_q35q8, sizeof g_q35q8, "%s/qwen35-tiny-seed3-q8_0.gguf", g_tmp);
  snprintf(g_out_q35q8, sizeof g_out_q35q8, "%s/engine-qwen35-q8_0", g_tmp);
  if (hf2gguf(g_q35, g_q35q8, "q8_0") != 0) return -1;
  if (!g_quick) g_gen_q35q8 = gen(g_q35q8, "q8_0", g_out_q35q8);
  return 0;
}

/* every stage of the manifest PASS (6 may be N/A), stage 4 against llama.cpp */
static void all_stages_pass(const char *out, const char *what) {
  char p[1400];
  snprintf(p, sizeof p, "%s/manifest.json", out);
  json_t *m = json_load_file(p, 0, NULL);
  ck_assert_msg(m != NULL, "%s: no manifest", what);
  size_t i;
  json_t *s;
  int seen4 = 0;
  json_array_foreach(json_object_get(m, "stages"), i, s) {
    const char *v = json_string_value(json_object_get(s, "verdict")),
               *st = json_string_value(json_object_get(s, "stage"));
    const char *msg = json_string_value(json_object_get(s, "message"));
    ck_assert_msg(!strcmp(v, "PASS") || (!strcmp(v, "N/A") && !strcmp(st, "6")),
                  "%s: stage %s: %s %s", what, st, v, msg ? msg : "");
    if (!strcmp(st, "4")) {
      ck_assert_msg(msg && strstr(msg, "greedy steps identical to llama.cpp"), "%s: stage 4: %s",
                    what, msg);
      seen4 = 1;
    }
  }
  ck_assert_msg(seen4, "%s: no stage 4", what);
  json_decref(m);
}

/* the stage 2 units of the verifier's report: the dtypes their cases ran */
static void stage2_ran(const char *out, const char *const *want, int n) {
  char p[1400];
  snprintf(p, sizeof p, "%s/evidence/mi-verify-report.json", out);
  json_t *r = json_load_file(p, 0, NULL);
  ck_assert_msg(r != NULL, "no %s", p);
  char seen[256] = "";
  size_t i, k;
  json_t *st, *u, *c;
  json_array_foreach(json_object_get(r, "stages"), i, st) {
    if (json_integer_value(json_object_get(st, "stage")) != 2) continue;
    json_array_foreach(json_object_get(st, "units"), k, u) {
      ck_assert_str_eq(json_string_value(json_object_get(u, "verdict")), "PASS");
      size_t q;
      json_array_foreach(json_object_get(u, "cases"), q, c) {
        const char *d = json_string_value(json_object_get(c, "dtype"));
        if (d && !strstr(seen, d) && strlen(seen) + strlen(d) + 2 < sizeof seen)
          strcat(strcat(seen, d), " ");
      }
    }
  }
  for (int w = 0; w < n; w++)
    ck_assert_msg(strstr(seen, want[w]), "stage 2 ran %s; no %s", seen, want[w]);
  json_decref(r);
}

START_TEST(test_q8_0_engine) {
  ck_assert_msg(g_gen_q8.rc == 0, "mi-gen --dtype q8_0 exited %d:\n%s", g_gen_q8.rc, g_gen_q8.err);
  all_stages_pass(g_out_q8, "q8_0");
  const char *want[] = {"f32", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"};
  stage2_ran(g_out_q8, want, 6);
  char p[1400];
  snprintf(p, sizeof p, "%s/engine.c", g_out_q8);
  char *src = gt_slurp(p);
  ck_assert_ptr_nonnull(
      strstr(src, "(1u << MI_DTYPE_Q8_0 | 1u << MI_DTYPE_F32) /* the dtypes a matrix may be stored in"));
  ck_assert_ptr_nonnull(
      strstr(src, "L->mlp_down_proj.ptr, L->mlp_down_proj.dtype,")); /* each matrix its own */
  free(src);
  /* as deployed: the same --json as the hand-written plugin on the same file */
  const char *prompt = "Once upon a time, 你好 1+1=2";
  const char *a[] = {"--plugin-dir",
                     g_out_q8,
                     "-m",
                     g_q8,
                     "-p",
                     prompt,
                     "-n",
                     "16",
                     "--temp",
                     "0",
                     "--json",
                     "--top-logprobs",
                     "10",
                     "--ignore-eos",
                     "-t",
                     "2",
                     "-b",
                     "5",
                     NULL};
  const char *b[] = {
      "-m", g_q8,           "-p", prompt, "-n", "16", "--temp", "0", "--json", "--top-logprobs",
      "10", "--ignore-eos", "-t", "2",    "-b", "5",  NULL};
  res ra = run("mi-run", a, 120), rb = run("mi-run", b, 120);
  ck_assert_msg(ra.rc == 0 && rb.rc == 0, "engine %d: %s / plugin %d: %s", ra.rc, ra.err, rb.rc,
                rb.err);
  ck_assert_int_gt(strlen(ra.out), 100);
  ck_assert_str_eq(ra.out, rb.out);
  res_free(&ra), res_free(&rb);
}
END_TEST

START_TEST(test_q4_k_m_engine_and_mutant) {
  ck_assert_msg(g_gen_q4km.rc == 0, "mi-gen --dtype q4_k_m exited %d:\n%s", g_gen_q4km.rc,
                g_gen_q4km.err);
  all_stages_pass(g_out_q4km, "q4_k_m");
  char p[1400];
  snprintf(p, sizeof p, "%s/engine.c", g_out_q4km);
  char *src = gt_slurp(p);
  ck_assert_ptr_nonnull(
      strstr(src, "(1u << MI_DTYPE_Q4_K | 1u << MI_DTYPE_Q6_K | 1u << MI_DTYPE_Q5_K | 1u << MI_DTYPE_Q8_0 | 1u << MI_DTYPE_F32)"));
  free(src);
  /* the mutant: ffn_down (Q6_K on both layers of this file) handed WEIGHT_DTYPE (Q4_K) */
  char mut[1300], so[1500];
  snprintf(mut, sizeof mut, "%s/mutant", g_tmp);
  sh("cp -r '%s' '%s' && cd '%s' && sed -i 's/L->mlp_down_proj\\.dtype/WEIGHT_DTYPE/' engine.c && "
     "MI_SDK_INCLUDE='%s/sdk/include' sh build.sh",
     g_out_q4km, mut, mut, g_src);
  snprintf(p, sizeof p, "%s/engine.c", mut);
  src = gt_slurp(p);
  ck_assert_ptr_null(strstr(src, "L->mlp_down_proj.dtype"));
  free(src);
  sh("ls '%s'/libmi-engine-*.so > '%s/mutant.so.txt'", mut, g_tmp);
  snprintf(p, sizeof p, "%s/mutant.so.txt", g_tmp);
  char *l = gt_slurp(p);
  snprintf(so, sizeof so, "%.*s", (int)strcspn(l, "\n"), l);
  free(l);
  char plat[1300];
  snprintf(plat, sizeof plat, "%s/lib/metainfer/libmi-cpu.so", g_build);
  const char *v[] = {
      "--platform-plugin", plat,   "--model-plugin", so,  "--model", g_q4km, "--stage", "4",
      "--goldens",         g_gold, "--seed",         "3", NULL};
  res r = run("mi-verify", v, 600);
  ck_assert_msg(r.rc == 1 && strstr(r.err, "stage 3 (weight files") &&
                    strstr(r.err, "later stages skipped"),
                "exit %d:\n%s", r.rc, r.err);
  res_free(&r);
}
END_TEST

START_TEST(test_refusals) {
  char out[1300];
  snprintf(out, sizeof out, "%s/refused", g_tmp);
  res r = gen(g_model, "q8_0", out); /* a folder holds floats */
  ck_assert_msg(r.rc == 6 && strstr(r.err, "is a folder; q8_0 weights come in a GGUF file") &&
                    one_line(r.err),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);
  r = gen(g_q4km, "q8_0", out); /* the file's matrices are Q4_K and Q6_K */
  ck_assert_msg(
      r.rc == 6 &&
          strstr(r.err, "an engine for q8_0 binds matrices in [\"q8_0\",\"f32\"] (this file's: q4_k x") &&
          one_line(r.err),
      "exit %d: %s", r.rc, r.err);
  res_free(&r);
  char f32[1400];
  snprintf(f32, sizeof f32, "%s/tiny-seed1-f32.gguf", g_tmp);
  ck_assert_int_eq(hf2gguf(g_model, f32, "f32"), 0);
  r = gen(f32, "q8_0", out); /* an F32 file: the set's f32 is for matrices the load widened, not a whole file */
  ck_assert_msg(r.rc == 6 && strstr(r.err, "no matrix is stored in a block type (this file's: f32 x") && one_line(r.err),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);
  r = gen(g_q8, "bf16", out);
  ck_assert_msg(r.rc == 6 && strstr(r.err, "is q8_0; an engine for bf16 binds matrices in bf16") &&
                    one_line(r.err),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);
}
END_TEST

/* The engine eng runs the file (through the shipped CKB) and the folder it
 * was converted from (NULL: a quantized file, not the folder's weights) to
 * the same --json bytes; read through a scratch CKB whose contract
 * `family` lacks its gguf.transforms, the file answers otherwise (what the
 * transforms undo is exercised: why names it). */
static void file_as_folder_and_transforms_matter(const char *eng, const char *file, const char *folder,
                                                 const char *family, const char *why) {
  char ckb2[1300], pp[1400];
  snprintf(ckb2, sizeof ckb2, "%s/ckb-%s-notransforms", g_tmp, family);
  sh("rm -rf '%s' && cp -r '%s/ckb' '%s'", ckb2, g_src, ckb2);
  snprintf(pp, sizeof pp, "%s/models/%s.json", ckb2, family);
  json_t *m = json_load_file(pp, 0, NULL);
  ck_assert_ptr_nonnull(json_object_get(json_object_get(m, "gguf"), "transforms"));
  json_object_del(json_object_get(m, "gguf"), "transforms");
  ck_assert_int_eq(json_dump_file(m, pp, JSON_INDENT(2)), 0);
  json_decref(m);
  const char *a[] = {"--plugin-dir", eng, "-m", file, "-p", "Once upon a time", "-n", "8", "--temp",
                     "0", "--json", "--top-logprobs", "5", "--ignore-eos", "-t", "2", NULL};
  const char *b[] = {"--plugin-dir", eng, "-m", folder, "-p", "Once upon a time", "-n", "8", "--temp",
                     "0", "--json", "--top-logprobs", "5", "--ignore-eos", "-t", "2", NULL};
  res ra = run("mi-run", a, 120), rb = folder ? run("mi-run", b, 120) : ra;
  ck_assert_msg(ra.rc == 0 && rb.rc == 0, "%s / %s", ra.err, rb.err);
  ck_assert_str_eq(ra.out, rb.out); /* the file, as the transforms read it, is the folder */
  setenv("MI_CKB_DIR", ckb2, 1);
  res rc = run("mi-run", a, 120);
  unsetenv("MI_CKB_DIR");
  ck_assert_msg(rc.rc == 0, "%s", rc.err);
  ck_assert_msg(strcmp(ra.out, rc.out) != 0, "%s read as stored gave the same answer: the transform is not exercised", why);
  if (folder) res_free(&rb);
  res_free(&ra), res_free(&rc);
}

START_TEST(test_llama_file_unpermuted) {
  ck_assert_msg(g_gen_llama.rc == 0, "mi-gen on the Llama GGUF exited %d:\n%s", g_gen_llama.rc, g_gen_llama.err);
  all_stages_pass(g_out_llama, "llama");
  file_as_folder_and_transforms_matter(g_out_llama, g_llama_gguf, g_llama, "llama", "the permuted q/k rows");
}
END_TEST

/* A Gemma 2 file as llama.cpp's converter writes it (arch gemma2: every
 * norm stored as 1 + w, the sandwich norms under their own names, the
 * soft-caps and the window as keys, no query_pre_attn_scalar key): the
 * shipped model.gemma2's gguf section, which the vocabulary of variants
 * gives (test_evolve holds that), reads it; the engine mi-gen makes from
 * the file passes every stage, stage 4 against llama.cpp on the file, and
 * runs the folder to the same bytes; read without the norms' transforms
 * the same engine answers otherwise (the storage is exercised). */
START_TEST(test_gemma2_file) {
  ck_assert_msg(g_gen_gemma2.rc == 0, "mi-gen on the Gemma 2 GGUF exited %d:\n%s", g_gen_gemma2.rc, g_gen_gemma2.err);
  all_stages_pass(g_out_gemma2, "gemma2");
  ck_assert_msg(strstr(g_gen_gemma2.err, "prompt tokens in 512-token chunks then decode to position 4096"), "%s",
                g_gen_gemma2.err);
  file_as_folder_and_transforms_matter(g_out_gemma2, g_gemma2_gguf, g_gemma2, "gemma2", "the 1 + w norms");
}
END_TEST

/* The Gemma 2 file as llama-quantize's Q4_K_M (Q4_K and Q6_K matrices, the
 * norms F32 as 1 + w): `mi-gen --dtype q4_k_m` from it passes every stage,
 * stage 4 against llama.cpp on the file's weights dequantized exactly
 * (tests/goldens/gguf/gemma2-tiny-blocks-seed15-q4_k_m.json); the norms'
 * storage matters on the quantized file too. */
START_TEST(test_gemma2_q4_k_m_file) {
  ck_assert_msg(g_gen_gemma2q.rc == 0, "mi-gen on the Gemma 2 Q4_K_M GGUF exited %d:\n%s", g_gen_gemma2q.rc,
                g_gen_gemma2q.err);
  all_stages_pass(g_out_gemma2q, "gemma2 q4_k_m");
  file_as_folder_and_transforms_matter(g_out_gemma2q, g_gemma2q_gguf, NULL, "gemma2", "the 1 + w norms");
}
END_TEST

/* A Qwen3.5 hybrid file as llama.cpp's converter writes it (arch qwen35):
 * the shipped model.qwen35's gguf section, which the vocabulary gives
 * (variant.config_class_qwen3_5_text; test_evolve holds that), undoes the
 * tiled value heads, -exp(A_log), the squeezed conv and the 1 + w norms;
 * the engine mi-gen makes from the file passes every stage, stage 4
 * against llama.cpp on the file (tests/goldens/gguf/qwen35-tiny-seed3-bf16.json),
 * and runs the folder to the same bytes; read as stored it answers
 * otherwise. */
START_TEST(test_qwen35_file) {
  ck_assert_msg(g_gen_q35.rc == 0, "mi-gen on the Qwen3.5 GGUF exited %d:\n%s", g_gen_q35.rc, g_gen_q35.err);
  all_stages_pass(g_out_q35, "qwen35");
  /* each transform on its own: the file read with that one entry left out
   * answers otherwise than with all of them, or is refused (the squeezed
   * conv's shape): none is a no-op here */
  char ckb2[1300], pp[1400], src[1400];
  snprintf(ckb2, sizeof ckb2, "%s/ckb-qwen35-one-less", g_tmp);
  snprintf(src, sizeof src, "%s/ckb/models/qwen35.json", g_src);
  snprintf(pp, sizeof pp, "%s/models/qwen35.json", ckb2);
  sh("rm -rf '%s' && cp -r '%s/ckb' '%s'", ckb2, g_src, ckb2);
  json_t *shipped = json_load_file(src, 0, NULL);
  const json_t *tr = json_object_get(json_object_get(shipped, "gguf"), "transforms");
  ck_assert_int_ge(json_object_size(tr), 8);
  const char *a[] = {"--plugin-dir", g_out_q35, "-m", g_q35_gguf, "-p", "Once upon a time", "-n", "8", "--temp",
                     "0", "--json", "--top-logprobs", "5", "--ignore-eos", "-t", "2", NULL};
  const char *b[] = {"--plugin-dir", g_out_q35, "-m", g_q35, "-p", "Once upon a time", "-n", "8", "--temp",
                     "0", "--json", "--top-logprobs", "5", "--ignore-eos", "-t", "2", NULL};
  res all = run("mi-run", a, 120), folder = run("mi-run", b, 120);
  ck_assert_msg(all.rc == 0 && folder.rc == 0, "%s / %s", all.err, folder.err);
  ck_assert_str_eq(all.out, folder.out); /* the file, as the transforms read it, is the folder */
  res_free(&folder);
  int refused = 0;
  const char *name;
  json_t *v;
  json_object_foreach((json_t *)tr, name, v) {
    json_t *m = json_deep_copy(shipped);
    json_object_del(json_object_get(json_object_get(m, "gguf"), "transforms"), name);
    ck_assert_int_eq(json_dump_file(m, pp, JSON_INDENT(2)), 0);
    json_decref(m);
    setenv("MI_CKB_DIR", ckb2, 1);
    res one = run("mi-run", a, 120);
    unsetenv("MI_CKB_DIR");
    ck_assert_msg(one.rc != 0 || strcmp(one.out, all.out) != 0, "without the transform of %s: the same answer", name);
    if (one.rc != 0) {
      ck_assert_msg(strstr(one.err, "has shape") && one_line(one.err), "without the transform of %s: %s", name, one.err);
      refused++;
    }
    res_free(&one);
  }
  ck_assert_int_le(refused, 1); /* the conv alone changes a shape */
  res_free(&all);
  json_decref(shipped);
}
END_TEST

/* A half-precision cache for the hybrid's file: the hand-written qwen35
 * plugin runs only an f32 one, so stage 4d's probe finds it cannot be the
 * engine's twin, says why in the stage's message and runs the engine as
 * deployed (its tokens are stage 4's to hold to llama.cpp, at the half
 * cache's tolerance); every stage passes. */
START_TEST(test_qwen35_half_cache_reference_refuses) {
  char out[1300], ckb[1300];
  snprintf(out, sizeof out, "%s/engine-qwen35-f16", g_tmp);
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  const char *a[] = {"--model", g_q35_gguf, "--platform", "cpu", "--dtype", "bf16", "--kv-type", "f16", "--tp", "1", "--out",
                     out, "--ckb", ckb, "--goldens", g_gold, "--seed", "3", "-t", "2", NULL};
  res r = run("mi-gen", a, 900);
  ck_assert_msg(r.rc == 0, "exit %d:\n%s", r.rc, r.err);
  all_stages_pass(out, "qwen35 f16 cache");
  ck_assert_msg(strstr(r.err, "the reference plugin 'qwen35' does not run this model with a cache of f16 (mi-run: qwen35: "
                              "option kv_type=f16 is not supported") &&
                    strstr(r.err, "no reference plugin: tokens are stage 4's"),
                "%s", r.err);
  res_free(&r);
}
END_TEST

/* The hybrid in its released layout (text weights under
 * model.language_model., a vision tower) with a whole multi-token-prediction
 * head (tools/peer/mtp_head.mjs completes mi-mkmodel's), as llama.cpp's
 * converter writes it by default: block_count counts the head's layer,
 * nextn_predict_layers says so, its tensors sit past the model's layers
 * under the same names. Read through the shipped section (num_hidden_layers
 * = block_count - nextn_predict_layers, gguf.unused): the head's 15 tensors
 * skipped and said once, and the file gives the folder's bytes and those of
 * the causal file of the same seed. (llama.cpp loads such a file: stage 4
 * on it, by hand, docs/gguf.md.) */
START_TEST(test_qwen35_file_with_mtp_head) {
  char dir[1300], file[1400];
  snprintf(dir, sizeof dir, "%s/qwen35-tiny-seed3-conditional", g_tmp);
  snprintf(file, sizeof file, "%s/qwen35-tiny-seed3-conditional-bf16.gguf", g_tmp);
  const char *mk[] = {"--family", "qwen35", "--shape", "tiny", "--seed", "3", "--layout", "conditional", "--out", dir, NULL};
  res r = run("mi-mkmodel", mk, 120);
  ck_assert_int_eq(r.rc, 0);
  res_free(&r);
  const char *node = getenv("MI_NODE") ? getenv("MI_NODE") : "node";
  sh("'%s' '%s/tools/peer/mtp_head.mjs' '%s' 2>/dev/null", node, g_src, dir);
  ck_assert_int_eq(hf2gguf(dir, file, "bf16"), 0);
  const char *models[] = {file, dir, g_q35_gguf};
  res out[3];
  for (int k = 0; k < 3; k++) {
    const char *a[] = {"-m", models[k], "-p", "Once upon a time", "-n", "8", "--temp", "0", "--json", "--top-logprobs", "5",
                       "--ignore-eos", "-t", "2", "-v", NULL};
    out[k] = run("mi-run", a, 120);
    ck_assert_msg(out[k].rc == 0, "%s: %s", models[k], out[k].err);
  }
  ck_assert_msg(strstr(out[0].err, "skipped 15 tensors of layers 4 and after: the multi-token-prediction layers"), "%s",
                out[0].err);
  ck_assert_str_eq(out[0].out, out[1].out);
  ck_assert_str_eq(out[0].out, out[2].out);
  for (int k = 0; k < 3; k++) res_free(&out[k]);
}
END_TEST

/* The same hybrid as a Q8_0 file: `mi-gen --dtype q8_0` passes every stage,
 * stage 4 against llama.cpp on the file's weights dequantized exactly
 * (tests/goldens/gguf/qwen35-tiny-seed3-q8_0.json); stage 4d against
 * the hand-written qwen35 plugin on the same file (it binds block types
 * too); the load says which matrices it widened. */
START_TEST(test_qwen35_q8_0_file) {
  ck_assert_msg(g_gen_q35q8.rc == 0, "mi-gen on the Qwen3.5 Q8_0 GGUF exited %d:\n%s", g_gen_q35q8.rc, g_gen_q35q8.err);
  all_stages_pass(g_out_q35q8, "qwen35 q8_0");
  ck_assert_msg(strstr(g_gen_q35q8.err, "tokens identical to the reference plugin 'qwen35'"), "%s", g_gen_q35q8.err);
  const char *a[] = {"--plugin-dir", g_out_q35q8, "-m", g_q35q8, "-p", "hi", "-n", "2", "-v", NULL};
  res r = run("mi-run", a, 120);
  ck_assert_msg(r.rc == 0 && strstr(r.err, "quantized tensors kept as stored: q8_0 x") &&
                    strstr(r.err, "widened to f32 at load: q8_0 x2"),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);
}
END_TEST

/* mi-run's --json on model (folder or file) through the engine in eng,
 * MI_CKB_DIR ckb when not NULL */
static res run_llama(const char *eng, const char *model, const char *ckb) {
  const char *a[] = {"--plugin-dir", eng, "-m", model, "-p", "Once upon a time there was a tiny model that", "-n", "8",
                     "--temp", "0", "--json", "--top-logprobs", "5", "--ignore-eos", "-t", "2", NULL};
  if (ckb) setenv("MI_CKB_DIR", ckb, 1);
  res r = run("mi-run", a, 120);
  unsetenv("MI_CKB_DIR");
  return r;
}

/* A scratch copy of the CKB whose model.llama gguf.derive settings are edit
 * (a JSON array), or whose derive is gone (edit NULL) */
static void scratch_ckb(const char *dir, const char *edit) {
  sh("rm -rf '%s' && cp -r '%s/ckb' '%s'", dir, g_src, dir);
  char pp[1400];
  snprintf(pp, sizeof pp, "%s/models/llama.json", dir);
  json_t *m = json_load_file(pp, 0, NULL), *gg = json_object_get(m, "gguf");
  json_t *d = json_object_get(json_object_get(gg, "derive"), "rope_freqs.weight");
  ck_assert_ptr_nonnull(d);
  if (edit) json_object_set_new(d, "settings", json_loads(edit, 0, NULL));
  else json_object_del(gg, "derive");
  ck_assert_int_eq(json_dump_file(m, pp, JSON_INDENT(2)), 0);
  json_decref(m);
}

/* Llama 3.1+ files carry their rope scaling as rope_freqs (each pair's
 * frequency divisor) and no key: model.llama's gguf.derive reads it back as
 * the listed setting the tensor holds (checked against the contract's own
 * formula), and refuses the file by the tensor's name when none does. */
START_TEST(test_llama31_rope_freqs) {
  char dir[1300], file[1300], ckb[1300], out[1300], scratch[1300];
  snprintf(dir, sizeof dir, "%s/llama31-probe", g_tmp);
  snprintf(file, sizeof file, "%s/llama31-probe-bf16.gguf", g_tmp);
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  snprintf(out, sizeof out, "%s/engine-llama31", g_tmp);
  snprintf(scratch, sizeof scratch, "%s/ckb-derive", g_tmp);
  ck_assert_int_eq(mk_llama(dir, "6", ROPE_PROBE), 0);
  ck_assert_int_eq(hf2gguf(dir, file, "bf16"), 0);
  /* the probe's scaling is not a published one: a gap of the CKB (exit 3)
   * whose line names the tensor and the nearest setting */
  res r = gen(file, "bf16", out);
  ck_assert_msg(r.rc == 3 && strstr(r.err, "tensor 'rope_freqs.weight' holds rope_scaling values none of the 2 settings") &&
                    strstr(r.err, "add the checkpoint's rope_scaling to them"),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);
  if (g_quick) return; /* the engine and the runs below: the Release run */
  /* a published setting, through the shipped CKB: mi-gen passes on the
   * file, and its engine runs the folder to the same bytes as the file (an
   * engine refuses a config other than the one it was made for, so the
   * folder runs only if the file gave its rope_scaling, every member) */
  char pub[1300], pubf[1300];
  snprintf(pub, sizeof pub, "%s/llama31-published", g_tmp);
  snprintf(pubf, sizeof pubf, "%s/llama31-published-bf16.gguf", g_tmp);
  ck_assert_int_eq(mk_llama(pub, "6", ROPE_PUBLISHED), 0);
  ck_assert_int_eq(hf2gguf(pub, pubf, "bf16"), 0);
  r = gen(pubf, "bf16", out);
  ck_assert_msg(r.rc == 0, "mi-gen on the file with a published setting exited %d:\n%s", r.rc, r.err);
  res_free(&r);
  res rf = run_llama(out, pubf, NULL), rd = run_llama(out, pub, NULL);
  ck_assert_msg(rf.rc == 0 && rd.rc == 0, "%s / %s", rf.err, rd.err);
  ck_assert_str_eq(rf.out, rd.out);
  /* the probe's setting added as data: its file reads (the engine, made for
   * the published one, refuses it by the value it differs in) */
  scratch_ckb(scratch, "[{\"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 64}]");
  res rp = run_llama(out, file, scratch);
  ck_assert_msg(rp.rc != 0 && strstr(rp.err, "refuses this config: rope_scaling.") && one_line(rp.err), "exit %d: %s",
                rp.rc, rp.err);
  /* without the derive entry the tensor is one the contract does not read;
   * listed off by one member, the setting is refused */
  scratch_ckb(scratch, NULL);
  res rn = run_llama(out, pubf, scratch);
  ck_assert_msg(rn.rc != 0 && strstr(rn.err, "tensor 'rope_freqs.weight' is not read by the model contract") && one_line(rn.err),
                "exit %d: %s", rn.rc, rn.err);
  res_free(&rn);
  scratch_ckb(scratch, "[{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 2.0, "
                       "\"original_max_position_embeddings\": 8192}]");
  rn = run_llama(out, pubf, scratch);
  ck_assert_msg(rn.rc != 0 && strstr(rn.err, "none of the 1 settings") && one_line(rn.err), "exit %d: %s", rn.rc, rn.err);
  res_free(&rf), res_free(&rd), res_free(&rp), res_free(&rn);
}
END_TEST

int main(void) {
  /* MI_TEST_GEN_QUICK (the sanitizer tree): the q8_0 engine and the
   * refusals; the q4_k_m engine and its mutant in the Release run */
  g_quick = getenv("MI_TEST_GEN_QUICK") != NULL;
  if (setup_all() != 0) {
    fprintf(stderr,
            "test_gen_gguf: SKIP: node could not convert the checkpoints (tools/peer/hf2gguf.mjs; "
            "see %s/hf2gguf.log)\n",
            g_tmp);
    return 77;
  }
  Suite *s = suite_create("gen_gguf");
  TCase *t = tcase_create("gen_gguf");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, test_q8_0_engine);
  if (!g_quick) tcase_add_test(t, test_q4_k_m_engine_and_mutant);
  if (!g_quick) tcase_add_test(t, test_llama_file_unpermuted);
  if (!g_quick) tcase_add_test(t, test_gemma2_file);
  if (!g_quick) tcase_add_test(t, test_gemma2_q4_k_m_file);
  if (!g_quick) tcase_add_test(t, test_qwen35_file);
  if (!g_quick) tcase_add_test(t, test_qwen35_q8_0_file);
  tcase_add_test(t, test_qwen35_file_with_mtp_head);
  if (!g_quick) tcase_add_test(t, test_qwen35_half_cache_reference_refuses);
  tcase_add_test(t, test_llama31_rope_freqs);
  tcase_add_test(t, test_refusals);
  suite_add_tcase(s, t);
  const int failed = mi_check_run(s) != EXIT_SUCCESS;
  if (!getenv("MI_KEEP")) sh("rm -rf '%s'", g_tmp);
  res_free(&g_gen_q8);
  if (!g_quick) res_free(&g_gen_q4km), res_free(&g_gen_llama), res_free(&g_gen_gemma2),
                   res_free(&g_gen_gemma2q), res_free(&g_gen_q35), res_free(&g_gen_q35q8);
  return failed ? 1 : 0;
}
