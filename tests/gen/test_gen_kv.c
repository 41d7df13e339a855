/* mi-gen with a half-precision KV cache (--kv-type f16|bf16), on the tiny
 * mi-mkmodel checkpoint of the llama.cpp goldens (seed 1):
 *   - generation passes every stage: operator units (operator.convert's
 *     exact contract, attention over an f16/bf16 cache), stage 4 against
 *     llama.cpp's goldens at the widened tolerance of a half cache, stage 5
 *     against the float64 model, and the deployment run against the qwen3
 *     plugin run with the same kv_type at the f32 tolerance;
 *   - the engine's source stores each of k and v through one convert per
 *     layer, and its cache holds 16-bit elements;
 *   - run as deployed, the engine gives byte-identical --json output to the
 *     hand-written plugin with the same --kv-type, and not the f32 cache's
 *     (the cache really is half precision), and it refuses another kv_type;
 *   - gaps: a platform contract without a convert kernel for the type is
 *     "not covered" (exit 3); a reference plugin that does not serve the
 *     model's architecture is refused in one line (exit 10). */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen_tool.h"
#include "tests/util/check_main.h"

static char g_build[1024], g_src[1024], g_tmp[1100], g_model[1200], g_ckb[1200], g_out[2][1200];
static int g_rc[2] = {-1, -1};
static char *g_err[2];
static const char *const g_kv[2] = {"bf16", "f16"};
static int g_nkv = 2;

/* run a built tool / a setup chore (tests/gen/gen_tool.c) */
static res run(const char *tool, const char *const *args, int timeout) {
  return gt_run(g_build, g_tmp, tool, args, timeout);
}
#define sh(...) gt_sh("test_gen_kv", __VA_ARGS__)
#define slurp gt_slurp

static int one_line(const char *s) { return strchr(s, '\n') == s + strlen(s) - 1; }

/* once, in the parent: the model and one engine per KV type */
static void setup_all(void) {
  if (gt_dirs("/tmp/mi-gen-kv-test-XXXXXX", g_build, g_src, g_tmp, g_model, g_ckb)) abort();
  sh("cp -r '%s/ckb' '%s'", g_src, g_ckb); /* the runs may write experience */
  const char *mk[] = {"--shape", "tiny", "--seed", "1", "--dtype", "bf16", "--out", g_model, NULL};
  res r = run("mi-mkmodel", mk, 120);
  res_free(&r);
  char gold[1300];
  snprintf(gold, sizeof gold, "%s/tests/goldens", g_src);
  if (getenv("MI_TEST_GEN_QUICK")) { /* stage 4 on the golden's first 2 cases of 4 steps (gen_tool.h) */
    char from[1300];
    snprintf(from, sizeof from, "%s/tests/goldens/tiny-seed1.json", g_src);
    snprintf(gold, sizeof gold, "%s/goldens-short", g_tmp);
    if (gt_short_golden(from, gold, 2, 4) != 0) abort();
  }
  for (int k = 0; k < g_nkv; k++) {
    snprintf(g_out[k], sizeof g_out[k], "%s/engine-%s", g_tmp, g_kv[k]);
    const char *gen[] = {"--model", g_model, "--platform", "cpu", "--dtype", "bf16", "--tp", "1", "--kv-type", g_kv[k],
                         "--out", g_out[k], "--ckb", g_ckb, "--goldens", gold, "--seed", "3", "-t", "2", NULL};
    r = run("mi-gen", gen, 900);
    g_rc[k] = r.rc;
    g_err[k] = strdup(r.err);
    res_free(&r);
  }
}

static void teardown_all(void) {
  if (!getenv("MI_KEEP")) sh("rm -rf '%s'", g_tmp);
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

START_TEST(test_kv_generate) {
  int k = _i;
  ck_assert_msg(g_rc[k] == 0, "mi-gen --kv-type %s exited %d:\n%s", g_kv[k], g_rc[k], g_err[k]);
  char p[1400];
  snprintf(p, sizeof p, "%s/manifest.json", g_out[k]);
  json_t *m = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "constraints"), "kv_type")), g_kv[k]);
  char suffix[16];
  snprintf(suffix, sizeof suffix, "-kv%s", g_kv[k]);
  const char *name = json_string_value(json_object_get(m, "engine"));
  ck_assert_msg(name && strstr(name, suffix), "engine name %s", name);
  size_t i;
  json_t *s;
  int seen4 = 0, seen4d = 0;
  json_array_foreach(json_object_get(m, "stages"), i, s) {
    const char *v = json_string_value(json_object_get(s, "verdict")), *st = json_string_value(json_object_get(s, "stage"));
    const char *msg = json_string_value(json_object_get(s, "message"));
    ck_assert_msg(!strcmp(v, "PASS") || (!strcmp(v, "N/A") && !strcmp(st, "6")), "stage %s: %s %s", st, v, msg ? msg : "");
    seen4 |= !strcmp(st, "4") && !strcmp(v, "PASS"); /* llama.cpp's goldens, at the half cache's tolerance */
    if (!strcmp(st, "4d")) { /* against the qwen3 plugin with the same KV type, at the f32 tolerance */
      ck_assert_msg(msg && strstr(msg, "reference plugin 'qwen3'"), "4d: %s", msg);
      seen4d = 1;
    }
  }
  ck_assert(seen4 && seen4d);
  /* operator.convert is among the contracts the engine came from */
  int convert = 0;
  json_array_foreach(json_object_get(m, "contracts"), i, s)
      convert |= !strcmp(json_string_value(json_object_get(s, "id")) ?: "", "operator.convert");
  ck_assert(convert);
  json_decref(m);
  snprintf(p, sizeof p, "%s/engine.c", g_out[k]);
  char *src = slurp(p), def[96];
  snprintf(def, sizeof def, "MI_DTYPE_%s /* KV cache elements */", !strcmp(g_kv[k], "f16") ? "F16" : "BF16");
  ck_assert_msg(strstr(src, def), "no \"%s\" in engine.c", def);
  ck_assert_int_eq(count(src, "K(P->convert(pc, NULL, k_cache + "), 1); /* k and v stored once per layer */
  ck_assert_int_eq(count(src, "K(P->convert(pc, NULL, v_cache + "), 1);
  ck_assert_ptr_nonnull(strstr(src, "uint16_t *k_cache = s->cache"));
  ck_assert_ptr_null(strstr(src, "float *k_cache = ")); /* the cache itself is not f32 (its staging rows are) */
  free(src);
}
END_TEST

START_TEST(test_kv_engine_equals_plugin) {
  int k = _i;
  ck_assert_int_eq(g_rc[k], 0);
  const char *prompt = "Once upon a time, 你好 1+1=2";
  const char *a[] = {"--plugin-dir", g_out[k], "-m", g_model, "-p", prompt, "-n", "24", "--temp", "0", "--json",
                     "--top-logprobs", "10", "--ignore-eos", "-t", "2", "-b", "5", NULL};
  const char *b[] = {"-m", g_model, "-p", prompt, "-n", "24", "--temp", "0", "--json", "--top-logprobs", "10",
                     "--ignore-eos", "-t", "2", "-b", "5", "--kv-type", g_kv[k], NULL};
  const char *c[] = {"-m", g_model, "-p", prompt, "-n", "24", "--temp", "0", "--json", "--top-logprobs", "10",
                     "--ignore-eos", "-t", "2", "-b", "5", NULL};
  res ra = run("mi-run", a, 120), rb = run("mi-run", b, 120), rc = run("mi-run", c, 120);
  ck_assert_msg(ra.rc == 0 && rb.rc == 0 && rc.rc == 0, "engine %d: %s / plugin %d: %s / f32 %d: %s", ra.rc, ra.err, rb.rc,
                rb.err, rc.rc, rc.err);
  ck_assert_int_gt(strlen(ra.out), 100);
  ck_assert_str_eq(ra.out, rb.out);                  /* same kernels, same roundings: byte for byte */
  ck_assert_msg(strcmp(ra.out, rc.out) != 0, "the %s engine's logprobs equal the f32 cache's", g_kv[k]);
  res_free(&ra), res_free(&rb), res_free(&rc);
  /* the type is baked in: another one asked is refused in one line */
  const char *d[] = {"--plugin-dir", g_out[k], "-m", g_model, "-p", "hi", "-n", "2", "--kv-type", "f32", NULL};
  res rd = run("mi-run", d, 60);
  ck_assert_int_ne(rd.rc, 0);
  ck_assert_msg(strstr(rd.err, "kv_type=f32 asked; this engine was generated for a") && one_line(rd.err), "%s", rd.err);
  res_free(&rd);
}
END_TEST

/* A CKB whose CPU contract offers an f16 cache but no convert kernel: not
 * covered. A model contract naming a reference plugin of another
 * architecture (a copy of the checkpoint and the CKB where the architecture
 * is renamed: the qwen3 plugin does not serve it): refused, exit 10. */
START_TEST(test_kv_gaps_and_wrong_reference) {
  char ckb2[1300], out[1300];
  snprintf(ckb2, sizeof ckb2, "%s/ckb-noconvert", g_tmp);
  sh("cp -r '%s' '%s'", g_ckb, ckb2);
  { /* the cpu platform contract without its convert kernel */
    char pp[1400];
    snprintf(pp, sizeof pp, "%s/platforms/cpu.json", ckb2);
    json_t *plat = json_load_file(pp, 0, NULL);
    ck_assert_ptr_nonnull(plat);
    json_t *ks = json_object_get(plat, "kernels");
    for (size_t i = json_array_size(ks); i-- > 0;)
      if (!strcmp(json_string_value(json_object_get(json_array_get(ks, i), "operator")) ?: "", "operator.convert"))
        json_array_remove(ks, i);
    ck_assert_int_eq(json_dump_file(plat, pp, JSON_INDENT(2)), 0);
    json_decref(plat);
  }
  snprintf(out, sizeof out, "%s/bad-noconvert", g_tmp);
  const char *a[] = {"--model", g_model, "--platform", "cpu", "--dtype", "bf16", "--kv-type", "f16", "--out", out, "--ckb", ckb2, NULL};
  res r = run("mi-gen", a, 60);
  ck_assert_msg(r.rc == 3 && strstr(r.err, "not covered: KV type 'f16': platform.cpu") &&
                    strstr(r.err, "lists no operator.convert kernel") && one_line(r.err),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);

  char model2[1300], ckb3[1300];
  snprintf(model2, sizeof model2, "%s/renamed", g_tmp);
  snprintf(ckb3, sizeof ckb3, "%s/ckb-renamed", g_tmp);
  sh("mkdir -p '%s' && cp '%s'/* '%s'/ && sed -i 's/Qwen3ForCausalLM/Qwen3XForCausalLM/' '%s/config.json'", model2, g_model,
     model2, model2);
  sh("cp -r '%s' '%s' && sed -i 's/\"Qwen3ForCausalLM\"/\"Qwen3XForCausalLM\"/' '%s/models/qwen3.json'", g_ckb, ckb3, ckb3);
  snprintf(out, sizeof out, "%s/bad-reference", g_tmp);
  const char *b[] = {"--model", model2, "--platform", "cpu", "--dtype", "bf16", "--out", out, "--ckb", ckb3, NULL};
  r = run("mi-gen", b, 60);
  ck_assert_msg(r.rc == 10 && strstr(r.err, "reference plugin 'qwen3' of model.qwen3") &&
                    strstr(r.err, "does not serve architecture Qwen3XForCausalLM (it serves Qwen3ForCausalLM)") &&
                    one_line(r.err),
                "exit %d: %s", r.rc, r.err);
  res_free(&r);
}
END_TEST

int main(void) {
  /* MI_TEST_GEN_QUICK (the sanitizer tree): one KV type (bf16, the coarser
   * rounding) instead of both, each being a whole verification */
  if (getenv("MI_TEST_GEN_QUICK")) {
    g_nkv = 1;
    fprintf(stderr, "test_gen_kv: MI_TEST_GEN_QUICK: the bf16 cache alone, stage 4 on the golden's first 2 cases of 4 "
                    "steps (f16 and every case: the Release run)\n");
  }
  setup_all();
  Suite *s = suite_create("gen_kv");
  TCase *t = tcase_create("gen_kv");
  tcase_set_timeout(t, 600);
  tcase_add_loop_test(t, test_kv_generate, 0, g_nkv);
  tcase_add_loop_test(t, test_kv_engine_equals_plugin, 0, g_nkv);
  tcase_add_test(t, test_kv_gaps_and_wrong_reference);
  suite_add_tcase(s, t);
  const int failed = mi_check_run(s) != EXIT_SUCCESS;
  teardown_all();
  for (int k = 0; k < 2; k++) free(g_err[k]);
  return failed ? 1 : 0;
}
