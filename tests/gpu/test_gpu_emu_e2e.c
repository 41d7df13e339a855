/* Qwen3 end to end on an emulated GPU: mi-run --json on a generated model
 * (tiny-untied: GQA 4/1, head_dim*heads != hidden, separate lm_head) with
 * --platform gpuemu32 / gpuemu64 (the real GPU plugin host code and kernel
 * source over tests/gpu/gpu_emu.cpp) against --platform cpu: the same
 * greedy tokens and top-5 logprobs within 2e-4. The 12-token prompt takes
 * the tiled matmul path in prefill and the GEMV path in decode; the GPU
 * attention runs with split-K (the emulator reports 8 compute units). */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/runtime/loader.h"
#include "mi/platform.h"
#include "tests/util/check_main.h"
#include "tests/util/test_json.h"

static char g_dir[PATH_MAX], g_build[PATH_MAX];

static int sh(const char *cmd) {
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void setup(void) {
  const char *b = getenv("MI_BUILD_DIR");
  ck_assert_ptr_nonnull(b);
  snprintf(g_build, sizeof g_build, "%s", b);
  snprintf(g_dir, sizeof g_dir, "%s/tests/gpu-emu-e2e-%d", b, (int)getpid());
  char cmd[4 * PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "rm -rf '%s' && mkdir -p '%s' && '%s/bin/mi-mkmodel' --shape tiny-untied --seed 21 "
           "--dtype bf16 --out '%s/model' >/dev/null",
           g_dir, g_dir, b, g_dir);
  ck_assert_int_eq(sh(cmd), 0);
  snprintf(cmd, sizeof cmd,
           "printf 'platform cpu %s/lib/metainfer/libmi-cpu.so required threads=2\\n"
           "model qwen3 %s/lib/metainfer/libmi-qwen3.so required\\n"
           "platform gpuemu32 %s/tests/gpu-emu/libmi-gpuemu32.so optional\\n"
           "platform gpuemu64 %s/tests/gpu-emu/libmi-gpuemu64.so optional\\n' > '%s/plugins.conf'",
           b, b, b, b, g_dir);
  ck_assert_int_eq(sh(cmd), 0);
}

static void teardown(void) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (sh(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
}

/* Runs mi-run on a platform and a model (a folder or a GGUF file under
 * g_dir), -v to err; returns the JSON lines (one json_t per line). */
static json_t *run_model(const char *platform, const char *model, const char *tag) {
  char cmd[4 * PATH_MAX], out[PATH_MAX + 32];
  snprintf(out, sizeof out, "%s/%s-%s.jsonl", g_dir, tag, platform);
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-run' --plugins-conf '%s/plugins.conf' --platform %s -m '%s/%s' "
           "-p 'One two three four five six seven eight nine ten eleven' -n 2 --temp 0 "
           "--json --top-logprobs 5 -v >'%s' 2>'%s.err'",
           g_build, g_dir, platform, g_dir, model, out, out);
  ck_assert_msg(sh(cmd) == 0, "mi-run --platform %s -m %s failed (see %s.err)", platform, model, out);
  return mi_test_json_lines(out);
}

static json_t *run_json(const char *platform) { return run_model(platform, "model", "model"); }

/* The greedy tokens of a and b equal, and every one of a's top 5 (the 5th
 * may fall out on a near tie) within b's with its logprob; the largest
 * |dlogprob|. */
static double compare_runs(json_t *a_lines, json_t *b_lines, const char *what) {
  ck_assert_int_ge(json_array_size(a_lines), 3); /* prompt_ids + 2 steps */
  ck_assert_int_eq(json_array_size(b_lines), json_array_size(a_lines));
  double maxd = 0;
  for (size_t i = 1; i < json_array_size(a_lines); i++) {
    json_t *a = json_array_get(a_lines, i), *b = json_array_get(b_lines, i);
    ck_assert_msg(json_integer_value(json_object_get(a, "token_id")) == json_integer_value(json_object_get(b, "token_id")),
                  "%s step %zu: token %lld against %lld", what, i, (long long)json_integer_value(json_object_get(b, "token_id")),
                  (long long)json_integer_value(json_object_get(a, "token_id")));
    json_t *ta = json_object_get(a, "top_logprobs"), *tb = json_object_get(b, "top_logprobs");
    ck_assert_int_eq(json_array_size(ta), 5);
    ck_assert_int_eq(json_array_size(tb), 5);
    for (size_t k = 0; k < 5; k++) {
      json_t *ea = json_array_get(ta, k);
      /* the order of near-ties may differ; match ids */
      json_int_t id = json_integer_value(json_array_get(ea, 0));
      int found = 0;
      for (size_t m = 0; m < 5; m++) {
        json_t *em = json_array_get(tb, m);
        if (json_integer_value(json_array_get(em, 0)) != id) continue;
        double d = fabs(json_number_value(json_array_get(ea, 1)) - json_number_value(json_array_get(em, 1)));
        if (d > maxd) maxd = d;
        found = 1;
      }
      ck_assert_msg(found || k == 4, "%s step %zu: token %lld of the reference's top 5 missing", what, i, (long long)id);
    }
  }
  return maxd;
}

START_TEST(emulated_gpu_matches_cpu) {
  const char *plats[] = {"gpuemu32", "gpuemu64"};
  json_t *cpu = run_json("cpu");
  json_t *p0 = json_object_get(json_array_get(cpu, 0), "prompt_ids");
  ck_assert_int_gt(json_array_size(p0), 8); /* prefill takes the tiled matmul path */
  for (int p = 0; p < 2; p++) {
    json_t *gpu = run_json(plats[p]);
    const double maxd = compare_runs(cpu, gpu, plats[p]);
    printf("%s vs cpu: max |dlogprob| %.2e\n", plats[p], maxd);
    ck_assert_msg(maxd <= 2e-4, "%s vs cpu: max |dlogprob| %.3e", plats[p], maxd);
    json_decref(gpu);
  }
  json_decref(cpu);
}
END_TEST

/* GGUF files of GGUF's other block types (tools/peer/hf2gguf.mjs): the
 * Q3_K_M mix (Q3_K, Q4_K, Q5_K and Q6_K in one file), Q2_K and Q5_1 (a
 * fifth bit and a min), on the emulated GPU as stored (its -v line: kept as
 * stored, nothing widened) against the CPU platform's exact path on the
 * same file (each weight dequantized exactly, f32 activations: the
 * arithmetic the GPU kernels state). The small shape (hidden 256, ffn
 * 768): every row is whole 256-value blocks, so no tensor falls back to
 * another type. Wavefront 64 takes every file, warp 32 the mix (the
 * kernels' indexing does not depend on the type). Each type's kernels,
 * Q4_1 and Q5_0 among them, are held to float64 by gpu_conformance; this
 * is the path from a file to the tokens. */
START_TEST(emulated_gpu_block_types_match_cpu) {
  const char *src = getenv("MI_SOURCE_DIR");
  ck_assert_ptr_nonnull(src);
  char cmd[4 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel' --shape small --seed 5 --dtype bf16 --out '%s/small' >/dev/null", g_build,
           g_dir);
  ck_assert_int_eq(sh(cmd), 0);
  static const struct {
    const char *type, *kept, *warp32;
  } files[] = {{"q3_k_m", "q3_k q4_k q5_k q6_k", "gpuemu32"}, {"q5_1", "q5_1", NULL}, {"q2_k", "q2_k", NULL}};
  /* MI_TEST_QUICK (the sanitizer preset): the mix and one legacy type */
  const int n = getenv("MI_TEST_QUICK") ? 2 : (int)(sizeof files / sizeof files[0]);
  for (int f = 0; f < n; f++) {
    char gguf[64];
    snprintf(gguf, sizeof gguf, "small-%s.gguf", files[f].type);
    snprintf(cmd, sizeof cmd, "node '%s/tools/peer/hf2gguf.mjs' '%s/small' '%s/%s' --type %s >/dev/null 2>&1", src, g_dir,
             g_dir, gguf, files[f].type);
    ck_assert_msg(sh(cmd) == 0, "hf2gguf --type %s failed", files[f].type);
    json_t *cpu = run_model("cpu", gguf, files[f].type);
    const char *plats[] = {"gpuemu64", files[f].warp32};
    for (int p = 0; p < 2 && plats[p]; p++) {
      json_t *gpu = run_model(plats[p], gguf, files[f].type);
      /* the loader kept each block type of the file as stored for the
       * emulated GPU, and widened nothing */
      char err[PATH_MAX + 64];
      snprintf(err, sizeof err, "%s/%s-%s.jsonl.err", g_dir, files[f].type, plats[p]);
      snprintf(cmd, sizeof cmd, "! grep -q 'widened' '%s'", err);
      ck_assert_msg(sh(cmd) == 0, "%s on %s: the loader widened a block type (see %s)", gguf, plats[p], err);
      char kept[64];
      snprintf(kept, sizeof kept, "%s", files[f].kept);
      for (char *save = NULL, *t = strtok_r(kept, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        snprintf(cmd, sizeof cmd, "grep 'kept as stored:' '%s' | grep -q ' %s x'", err, t);
        ck_assert_msg(sh(cmd) == 0, "%s on %s: the loader did not keep %s as stored (see %s)", gguf, plats[p], t, err);
      }
      char what[96];
      snprintf(what, sizeof what, "%s on %s", files[f].type, plats[p]);
      const double maxd = compare_runs(cpu, gpu, what);
      printf("%s vs cpu (exact path): max |dlogprob| %.2e\n", what, maxd);
      ck_assert_msg(maxd <= 2e-4, "%s vs cpu: max |dlogprob| %.3e", what, maxd);
      json_decref(gpu);
    }
    json_decref(cpu);
  }
}
END_TEST

/* The emulator's device memory is not host memory: a host write through a
 * device pointer must crash (which is what makes the e2e above prove that
 * the model plugin never touches device memory from the host). */
START_TEST(device_memory_not_host_accessible) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/tests/gpu-emu/libmi-gpuemu64.so", getenv("MI_BUILD_DIR"));
  mi_plugin *p = mi_plugin_load_file(path, NULL);
  ck_assert_int_eq(p->status, MI_PLUGIN_LOADED);
  const mi_platform_iface *P = p->iface;
  mi_buffer *b;
  ck_assert_int_eq(P->buffer_alloc(p->ctx, 64, &b), 0);
  float one = 1.0f, back = 0.0f;
  float *d = P->buffer_ptr(p->ctx, b);
  ck_assert_int_eq(P->memcpy_h2d(p->ctx, NULL, d, &one, 4), 0);
  ck_assert_int_eq(P->memcpy_d2h(p->ctx, NULL, &back, d, 4), 0);
  ck_assert(back == 1.0f);
  *(volatile float *)d = 2.0f; /* SIGSEGV */
}
END_TEST

int main(void) {
  /* The emulated GPU computes in f32: compared with the CPU platform's exact
   * matmul path (its default on AVX512_BF16 hosts rounds prefill
   * activations to bf16, the matmul contract's bf16_activations mode). */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  Suite *s = suite_create("gpu_emu_e2e");
  TCase *tc = tcase_create("qwen3");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, emulated_gpu_matches_cpu);
  tcase_add_test(tc, emulated_gpu_block_types_match_cpu);
  /* no fixture: the test dies by the signal, teardown would not run */
  TCase *tm = tcase_create("memory");
  tcase_add_test_raise_signal(tm, device_memory_not_host_accessible, SIGSEGV);
  suite_add_tcase(s, tm);
  suite_add_tcase(s, tc);
  return mi_check_run(s);
}
