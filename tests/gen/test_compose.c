/* implementer.compose on its own, over the constraints it takes, for both
 * families the CKB holds (mi-mkmodel tiny checkpoints; the whole mi-gen
 * pipeline on them is test_gen, test_gen_kv and test_gen_hybrid): every
 * engine it writes
 *   - fills every part of engine_template.c and resolves every one of its
 *     flags (no MI_GEN_ name is left in the source);
 *   - is C that a compiler takes with -Wall -Wextra -Werror, whichever
 *     branches of the skeleton it kept (one KV layout or layer kinds, dotted
 *     config paths, multi-dim vector weights, TP);
 *   - bakes in the constraints it was asked for and the KV layout of its
 *     contract;
 * and a half-precision KV cache with layer kinds stages and converts the
 * kinds' caches while their fixed state stays f32. Also the
 * expression-to-C writer the composer uses (core/ckb/expr_c.c). */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_tool.h"

#include "core/ckb/ckb.h"
#include "core/gen/gen.h"
#include "tests/util/check_main.h"

static char g_build[1024], g_src[1024], g_tmp[1100];

typedef struct ccase {
  const char *family, *dtype, *kv;
  int tp;
} ccase;
static const ccase k_cases[] = {
    {"qwen3", "bf16", "f32", 1},  {"qwen3", "f32", "f16", 1},  {"qwen3", "bf16", "bf16", 2},
    {"qwen35", "bf16", "f32", 1}, {"qwen35", "f32", "f32", 2},  {"qwen35", "bf16", "f16", 1},
    {"qwen35", "f32", "bf16", 1},
};

/* Runs the compose agent; the engine source (NULL when refused, *why then says why). */
static char *compose(const ccase *c, char **why) {
  char plugin[1300], model[1300], run_dir[1300];
  snprintf(plugin, sizeof plugin, "%s/lib/metainfer/libmi-agent-compose.so", g_build);
  snprintf(model, sizeof model, "%s/%s", g_tmp, c->family);
  snprintf(run_dir, sizeof run_dir, "%s/run-%s-%s-%s-%d", g_tmp, c->family, c->dtype, c->kv, c->tp);
  char err[512] = "";
  mi_bb *bb = mi_bb_open(run_dir, 1, err, sizeof err);
  ck_assert_msg(bb != NULL, "%s", err);
  json_t *task = json_pack("{s:{s:s, s:s, s:i, s:s}, s:s, s:s, s:[]}", "constraints", "platform",
                           "cpu", "dtype", c->dtype, "tp", c->tp, "kv_type", c->kv, "model_dir",
                           model, "engine_name", "compose-check", "patches");
  char ckb[1300];
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  mi_agent_outcome o;
  memset(&o, 0, sizeof o);
  int rc = mi_agent_run(plugin, task, ckb, run_dir, 120, &o);
  json_decref(task);
  char *src = NULL;
  const char *st = json_string_value(json_object_get(o.result, "status"));
  if (rc == 0 && st && !strcmp(st, "ok")) {
    char p[1500];
    ck_assert_int_eq(mi_bb_artifact(bb, json_string_value(json_object_get(o.result, "source")), "c",
                                    p, sizeof p),
                     0);
    src = gt_slurp(p);
  } else {
    const char *m = json_string_value(json_object_get(o.result, "message"));
    *why = strdup(m ? m : o.message);
  }
  mi_bb_close(bb);
  mi_agent_outcome_free(&o);
  return src;
}

START_TEST(test_compose_compiles) {
  const ccase *c = &k_cases[_i];
  char *why = NULL;
  char *src = compose(c, &why);
  ck_assert_msg(src != NULL, "%s %s tp %d kv %s: %s", c->family, c->dtype, c->tp, c->kv,
                why ? why : "?");
  ck_assert_msg(!strstr(src, "MI_GEN_"), "an MI_GEN_ part or flag is left in the source: %s",
                strstr(src, "MI_GEN_"));
  char want[200];
  snprintf(want, sizeof want, "#define TP                         %d ", c->tp);
  ck_assert_msg(strstr(src, want), "no \"%s\"", want);
  snprintf(want, sizeof want, "#define KV_TYPE                    \"%s\"", c->kv);
  ck_assert_msg(strstr(src, want), "no \"%s\"", want);
  snprintf(want, sizeof want, "#define DTYPE_NAME                 \"%s\"", c->dtype);
  ck_assert_msg(strstr(src, want), "no \"%s\"", want);
  int kinds = !strcmp(
      c->family, "qwen35"); /* the hybrid: layer kinds, one slab of caches and state per layer */
  ck_assert_int_eq(strstr(src, "unsigned char *layer_state[N_LAYERS];") != NULL, kinds);
  /* the cache element's C type follows the KV type, with layer kinds too */
  ck_assert_msg(strstr(src, strcmp(c->kv, "f32") ? "#define KV_ELEM uint16_t" : "#define KV_ELEM float"),
                "%s kv %s: KV_ELEM of the wrong type", c->family, c->kv);
  ck_assert_int_eq(strstr(src, "KV_ELEM *cache;") != NULL, !kinds);
  ck_assert_int_eq(strstr(src, "(!mi_platform_has(a->platform.iface, allreduce_sum_f32))") != NULL,
                   c->tp > 1);
  char path[1400];
  snprintf(path, sizeof path, "%s/%s-%s-%s-%d.c", g_tmp, c->family, c->dtype, c->kv, c->tp);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(src, f);
  fclose(f);
  char inc[1200], cmd[4000];
  snprintf(inc, sizeof inc, "%s/sdk/include", g_src);
  snprintf(cmd, sizeof cmd, "cc -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -I '%s' '%s' 2>&1",
           inc, path);
  FILE *p = popen(cmd, "r");
  char out[2000] = "";
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = 0;
  int rc = p ? pclose(p) : -1;
  ck_assert_msg(rc == 0, "%s does not compile cleanly:\n%s", path, out);
  free(src);
}
END_TEST

/* A half-precision cache with layer kinds: the kinds' caches are half and
 * staged (one convert per cache entry of the kind that has them: the
 * hybrid's full-attention k and v), their fixed state stays f32. */
START_TEST(test_compose_half_kv_kinds) {
  ccase c = {"qwen35", "bf16", "f16", 1};
  char *why = NULL;
  char *src = compose(&c, &why);
  ck_assert_msg(src != NULL, "%s", why ? why : "?");
  ck_assert_msg(strstr(src, "KV_ELEM *k_cache = (KV_ELEM *)slab") && strstr(src, "KV_ELEM *v_cache = (KV_ELEM *)slab"),
                "the full-attention kind's caches are not KV_ELEM");
  ck_assert_msg(strstr(src, "float *conv_state = (float *)(slab + KV_PART_BYTES(") &&
                    strstr(src, "float *rec_state = (float *)(slab + KV_PART_BYTES("),
                "the linear kind's state is not f32 after the caches");
  int converts = 0;
  for (const char *p = src; (p = strstr(p, "K(P->convert(")); p++) converts++;
  ck_assert_int_eq(converts, 2);
  ck_assert_msg(strstr(src, "m->k_cache_new") && strstr(src, "m->v_cache_new"), "no f32 staging of the new rows");
  ck_assert_msg(!strstr(src, "conv_state_new") && !strstr(src, "rec_state_new"), "fixed state staged as if a cache");
  free(src);
  free(why);
}
END_TEST

/* names for mi_expr_c: "n" is refused, "b" is a split field, others their upper case */
static int as_macro(void *user, const char *name, size_t len, char *out, size_t out_len) {
  (void)user;
  if (len == 1 && name[0] == 'n') return -1;
  if (len == 1 && name[0] == 'b') return snprintf(out, out_len, "(B / TP)") < 0 ? -1 : 0;
  size_t i = 0;
  for (; i < len && i + 1 < out_len; i++) out[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
  out[i] = 0;
  return 0;
}

START_TEST(test_expr_c) {
  char out[64], err[200];
  ck_assert_int_eq(mi_expr_c("(head_dim + 2) * b - T", as_macro, NULL, out, sizeof out, err, sizeof err), 0);
  ck_assert_str_eq(out, "(HEAD_DIM + 2) * (B / TP) - T"); /* spacing and numbers kept, names replaced */
  ck_assert_int_eq(mi_expr_c("a +", as_macro, NULL, out, sizeof out, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'a +'") && !strchr(err, '\n'), "%s", err); /* the evaluator's syntax */
  ck_assert_int_eq(mi_expr_c("a * n", as_macro, NULL, out, sizeof out, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'n'"), "%s", err);
  ck_assert_int_eq(mi_expr_c("a_long_name * a_long_name", as_macro, NULL, out, 16, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "does not fit"), "%s", err);
}
END_TEST

int main(void) {
  if (gt_dirs("/tmp/mi-compose-test-XXXXXX", g_build, g_src, g_tmp, NULL, NULL)) abort();
  const char *fam[] = {"qwen3", "qwen35"};
  for (int i = 0; i < 2; i++) {
    char out[1300];
    snprintf(out, sizeof out, "%s/%s", g_tmp, fam[i]);
    const char *mk[] = {"--family", fam[i], "--shape", "tiny", "--seed", "1",
                        "--dtype",  "bf16", "--out",   out,    NULL};
    res r = gt_run(g_build, g_tmp, "mi-mkmodel", mk, 120);
    if (r.rc != 0) fprintf(stderr, "test_compose: mi-mkmodel --family %s: %s\n", fam[i], r.err);
    res_free(&r);
  }
  Suite *su = suite_create("compose");
  TCase *t = tcase_create("compose");
  tcase_set_timeout(t, 300);
  tcase_add_loop_test(t, test_compose_compiles, 0, (int)(sizeof k_cases / sizeof *k_cases));
  mi_check_add(t, MI_CHECK_TESTS(test_compose_half_kv_kinds, test_expr_c));
  suite_add_tcase(su, t);
  const int failed = mi_check_run(su) != EXIT_SUCCESS;
  if (!getenv("MI_KEEP")) gt_sh("test_compose", "rm -rf '%s'", g_tmp);
  return failed ? 1 : 0;
}
