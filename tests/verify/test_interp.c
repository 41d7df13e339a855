/* The model contract in float64 (core/verify/interp.c) against the
 * hand-written float64 models of core/verify/models/ (written from the
 * families' math, sharing no code with the interpreter but the operator
 * references): for every family the CKB holds and several shapes, the same
 * logits to float64 rounding and the same largest attention score. And the
 * interpreter follows the contract, not a family: a contract edited (a
 * literal RoPE base, a (1+w) norm) moves its logits away from the
 * hand-written model's, a contract it cannot bind fails in one line naming
 * the step. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/runtime/safetensors.h"
#include "core/verify/driver.h"
#include "core/verify/interp.h"

static char g_build[1024], g_src[1024], g_tmp[1100];

static void setup_paths(void) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_src, sizeof g_src, "%s", s ? s : ".");
  if (!g_tmp[0]) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mi-interp-test-XXXXXX");
    if (!mkdtemp(g_tmp)) {
      perror("test_interp: mkdtemp");
      exit(1);
    }
  }
}

/* mi-mkmodel FAMILY SHAPE SEED -> its folder */
static void make_model(const char *family, const char *shape, int seed, char *dir, size_t n) {
  snprintf(dir, n, "%s/%s-%s-%d", g_tmp, family, shape, seed);
  char cmd[4000];
  snprintf(cmd, sizeof cmd,
           "test -f '%s/config.json' || '%s/bin/mi-mkmodel' --family %s --shape %s --seed %d --out "
           "'%s' >/dev/null 2>&1",
           dir, g_build, family, shape, seed, dir);
  ck_assert_msg(system(cmd) == 0, "mi-mkmodel %s %s failed", family, shape);
}

typedef struct both {
  mi_ckb *ckb;
  json_t *cfg;
  mi_weights *w;
  const vf_model_driver *drv;
  void *hand;
  vf_interp *in;
} both;

static void open_both(both *b, const char *ckb_dir, const char *model) {
  char err[1200], p[1400];
  memset(b, 0, sizeof *b);
  b->ckb = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_msg(b->ckb != NULL, "%s", err);
  snprintf(p, sizeof p, "%s/config.json", model);
  b->cfg = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(b->cfg);
  b->w = mi_weights_open(model, err, sizeof err);
  ck_assert_msg(b->w != NULL, "%s", err);
  const char *arch = json_string_value(json_array_get(json_object_get(b->cfg, "architectures"), 0));
  b->drv = vf_model_driver_for_arch(arch);
  ck_assert_msg(b->drv != NULL, "no hand-written model for %s", arch);
  ck_assert_msg(b->drv->ref_open(b->cfg, b->w, &b->hand, err, sizeof err) == 0, "%s", err);
  const mi_ckb_entry *me = mi_ckb_find_model(b->ckb, json_object_get(b->cfg, "architectures"));
  ck_assert_ptr_nonnull(me);
  b->in = vf_interp_open(b->ckb, me, b->cfg, b->w, err, sizeof err);
  ck_assert_msg(b->in != NULL, "%s", err);
}

static void close_both(both *b) {
  vf_interp_close(b->in);
  b->drv->ref_close(b->hand);
  mi_weights_close(b->w);
  json_decref(b->cfg);
  mi_ckb_close(b->ckb);
}

/* max over the logits of |a - b| / (1 + |b|) */
static double rel_diff(const double *a, const double *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]) / (1 + fabs(b[i]));
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst;
}

/* Both models on the same prompt: the largest relative logit difference */
static double compare(both *b, const int32_t *ids, int T, int n_out, double *score_gap) {
  char err[1200];
  double ms_h = 0, ms_i = 0;
  double *lh = b->drv->ref_forward(b->hand, ids, T, n_out, &ms_h, err, sizeof err);
  ck_assert_msg(lh != NULL, "hand-written: %s", err);
  double *li = vf_interp_forward(b->in, ids, T, n_out, &ms_i, err, sizeof err);
  ck_assert_msg(li != NULL, "interpreter: %s", err);
  int64_t V = json_integer_value(json_object_get(b->cfg, "vocab_size"));
  double d = rel_diff(li, lh, (size_t)n_out * (size_t)V);
  if (score_gap) *score_gap = fabs(ms_h - ms_i) / (1 + fabs(ms_h));
  free(lh);
  free(li);
  return d;
}

static const int32_t PROMPT[] = {9707, 11,  1879, 0,  151644, 872, 198,
                                 3838, 374, 220,  17, 10,     17,  30};
#define NP ((int)(sizeof PROMPT / sizeof PROMPT[0]))

/* every family the CKB holds, several shapes: the contract in float64 is
 * the hand-written model, to float64 rounding */
START_TEST(interpreter_matches_hand_written_models) {
  setup_paths();
  static const char *const cases[][2] = {
      {"qwen3", "tiny"},         {"qwen3", "tiny-untied"},   {"qwen35", "tiny"},
      {"qwen35", "tiny-untied"}, {"qwen35", "probe-attn-b"},
  };
  char ckb[1200], model[1300];
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    make_model(cases[c][0], cases[c][1], 3, model, sizeof model);
    both b;
    open_both(&b, ckb, model);
    double gap = 0;
    double d1 = compare(&b, PROMPT, NP, 3, &gap);
    double d2 = compare(&b, PROMPT + 4, 1, 1, NULL);
    printf("%s %s: max relative logit difference %.2e (T=%d), %.2e (T=1); attention score %.2e\n",
           cases[c][0], cases[c][1], d1, NP, d2, gap);
    ck_assert_msg(d1 < 1e-10 && d2 < 1e-10 && gap < 1e-10, "%s %s: %.3e / %.3e / score %.3e",
                  cases[c][0], cases[c][1], d1, d2, gap);
    close_both(&b);
  }
}
END_TEST

/* A copy of the CKB whose model.qwen3 has one edit */
static void edited_ckb(char *dir, size_t n, const char *what) {
  snprintf(dir, n, "%s/ckb-%s", g_tmp, what);
  char cmd[3000], p[1300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s/ckb' '%s'", dir, g_src, dir);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(p, sizeof p, "%s/models/qwen3.json", dir);
  json_t *m = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(m);
  json_t *all = mi_ckb_model_sequences(m);
  size_t s, i;
  json_t *seq, *st;
  json_array_foreach(all, s, seq) json_array_foreach(seq, i, st) {
    const char *op = json_string_value(json_object_get(st, "operator"));
    json_t *a = json_object_get(st, "args");
    if (!strcmp(what, "theta") && !strcmp(op, "operator.rope"))
      json_object_set_new(a, "theta", json_string("10000"));
    if (!strcmp(what, "norm") && !strcmp(op, "operator.rmsnorm"))
      json_object_set_new(a, "w_offset", json_string("1"));
    if (!strcmp(what, "unbound") && !strcmp(op, "operator.silu_mul"))
      json_object_set_new(a, "up", json_string("no_such_buffer"));
  }
  json_decref(all);
  ck_assert_int_eq(json_dump_file(m, p, JSON_INDENT(2)), 0);
  json_decref(m);
}

/* the interpreter computes what the contract says, whatever it says */
START_TEST(interpreter_follows_the_contract) {
  setup_paths();
  char model[1300], ckb[1300];
  make_model("qwen3", "tiny-untied", 4, model, sizeof model);
  static const char *const edits[] = {"theta", "norm"};
  for (int e = 0; e < 2; e++) {
    edited_ckb(ckb, sizeof ckb, edits[e]);
    both b;
    open_both(&b, ckb, model);
    double d = compare(&b, PROMPT, NP, 2, NULL);
    printf("edit %s: the contract's logits move %.2e from the hand-written model's\n", edits[e], d);
    ck_assert_msg(d > 1e-3, "edit %s: logits moved only %.3e", edits[e], d);
    close_both(&b);
  }
  /* a binding that names nothing: one line naming the step */
  edited_ckb(ckb, sizeof ckb, "unbound");
  both b;
  open_both(&b, ckb, model);
  char err[1200] = "";
  double *l = vf_interp_forward(b.in, PROMPT, NP, 1, NULL, err, sizeof err);
  ck_assert_ptr_null(l);
  ck_assert_msg(strstr(err, "operator.silu_mul") && strstr(err, "no_such_buffer") &&
                    !strchr(err, '\n'),
                "%s", err);
  /* ids outside the vocabulary, bad lengths */
  int32_t bad = 1 << 30;
  ck_assert_ptr_null(vf_interp_forward(b.in, &bad, 1, 1, NULL, err, sizeof err));
  ck_assert_ptr_nonnull(strstr(err, "outside"));
  ck_assert_ptr_null(vf_interp_forward(b.in, PROMPT, 2, 3, NULL, err, sizeof err));
  close_both(&b);
}
END_TEST

int main(void) {
  setup_paths(); /* before the tests fork: they share the folder, main removes it */
  Suite *s = suite_create("interp");
  TCase *t = tcase_create("interp");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, interpreter_matches_hand_written_models);
  tcase_add_test(t, interpreter_follows_the_contract);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  if (!failed && !getenv("MI_KEEP") && g_tmp[0]) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "test_interp: could not remove %s\n", g_tmp);
  }
  return failed ? 1 : 0;
}
