/* The model contract in float64 (core/verify/interp.c): it computes what
 * the contract says, whatever it says -- a contract edited (a literal RoPE
 * base, a (1+w) norm) moves its logits, a contract it cannot bind fails in
 * one line naming the step -- and on the hybrid it is the hand-written
 * float64 model of tests/hybrid/ref/qwen35_f64.c (written from the family's
 * math, sharing no code with the interpreter but the operator references)
 * to float64 rounding. tests/qwen3 and tests/hybrid hold it to llama.cpp's
 * goldens. Stage 2's twin (vf_interp_layer_*) is the same interpreter on
 * one layer: a layer run on the checkpoint's own layer 0 weights, fed the
 * embedding rows, is what the whole model computes there. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/runtime/safetensors.h"
#include "core/verify/bind.h"
#include "core/verify/interp.h"
#include "tests/hybrid/ref/qwen35_f64.h"
#include "tests/util/check_main.h"

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

/* The interpreter on one CKB and checkpoint */
typedef struct both {
  mi_ckb *ckb;
  json_t *cfg;
  mi_weights *w;
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
  const mi_ckb_entry *me = mi_ckb_find_model(b->ckb, json_object_get(b->cfg, "architectures"));
  ck_assert_ptr_nonnull(me);
  b->in = vf_interp_open(b->ckb, me, b->cfg, b->w, err, sizeof err);
  ck_assert_msg(b->in != NULL, "%s", err);
}

static void close_both(both *b) {
  vf_interp_close(b->in);
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

/* The interpreter against the hand-written hybrid (from scratch, the
 * recurrent DeltaNet form): the largest relative logit difference */
static double compare_hand(both *b, const int32_t *ids, int T, int n_out, double *score_gap) {
  char err[1200];
  double ms_h = 0, ms_i = 0;
  vf_qwen35 *m = NULL;
  ck_assert_msg(vf_qwen35_open(b->cfg, b->w, &m, err, sizeof err) == 0, "%s", err);
  int64_t V = vf_qwen35_vocab(m);
  vf_qwen35_seq *s = vf_qwen35_seq_new(m, T);
  double *lh = malloc((size_t)n_out * (size_t)V * sizeof(double)); /* [n_out, V] */
  ck_assert(s && lh);
  ck_assert_msg(vf_qwen35_forward(m, s, ids, T, n_out, lh, 0, &ms_h, err, sizeof err) == 0, "hand-written: %s", err);
  double *li = vf_interp_forward(b->in, ids, T, n_out, &ms_i, err, sizeof err);
  ck_assert_msg(li != NULL, "interpreter: %s", err);
  double d = rel_diff(li, lh, (size_t)n_out * (size_t)V);
  if (score_gap) *score_gap = fabs(ms_h - ms_i) / (1 + fabs(ms_h));
  free(lh);
  free(li);
  vf_qwen35_seq_free(s);
  vf_qwen35_close(m);
  return d;
}

/* Two interpreters (two CKBs) on the same prompt */
static double compare_two(both *a, both *b, const int32_t *ids, int T, int n_out) {
  char err[1200];
  double *la = vf_interp_forward(a->in, ids, T, n_out, NULL, err, sizeof err);
  ck_assert_msg(la != NULL, "%s", err);
  double *lb = vf_interp_forward(b->in, ids, T, n_out, NULL, err, sizeof err);
  ck_assert_msg(lb != NULL, "%s", err);
  int64_t V = json_integer_value(json_object_get(a->cfg, "vocab_size"));
  double d = rel_diff(lb, la, (size_t)n_out * (size_t)V);
  free(la);
  free(lb);
  return d;
}

static const int32_t PROMPT[] = {9707, 11,  1879, 0,  151644, 872, 198,
                                 3838, 374, 220,  17, 10,     17,  30};
#define NP ((int)(sizeof PROMPT / sizeof PROMPT[0]))

/* the hybrid's contract in float64 is the hand-written model, to float64
 * rounding, on several shapes (qwen3's contract is held to llama.cpp's
 * goldens by tests/qwen3) */
START_TEST(interpreter_matches_hand_written_hybrid) {
  setup_paths();
  static const char *const shapes[] = {"tiny", "tiny-untied", "probe-attn-b"};
  char ckb[1200], model[1300];
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    make_model("qwen35", shapes[c], 3, model, sizeof model);
    both b;
    open_both(&b, ckb, model);
    double gap = 0;
    double d1 = compare_hand(&b, PROMPT, NP, 3, &gap);
    double d2 = compare_hand(&b, PROMPT + 4, 1, 1, NULL);
    printf("qwen35 %s: max relative logit difference %.2e (T=%d), %.2e (T=1); attention score %.2e\n", shapes[c], d1,
           NP, d2, gap);
    ck_assert_msg(d1 < 1e-10 && d2 < 1e-10 && gap < 1e-10, "qwen35 %s: %.3e / %.3e / score %.3e", shapes[c], d1, d2,
                  gap);
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
  char orig[1200];
  snprintf(orig, sizeof orig, "%s/ckb", g_src);
  both o;
  open_both(&o, orig, model);
  for (int e = 0; e < 2; e++) {
    edited_ckb(ckb, sizeof ckb, edits[e]);
    both b;
    open_both(&b, ckb, model);
    double d = compare_two(&o, &b, PROMPT, NP, 2);
    printf("edit %s: the contract's logits move %.2e from the unedited contract's\n", edits[e], d);
    ck_assert_msg(d > 1e-3, "edit %s: logits moved only %.3e", edits[e], d);
    close_both(&b);
  }
  close_both(&o);
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

/* ---------- stage 2's twin: one layer ---------- */

typedef struct draw {
  const json_t *model;
} draw;

/* deterministic weights from the key, shaped like stage 2's */
static double *draw_weight(void *user, const char *key, const char *name, int64_t n, char *err, size_t err_len) {
  const draw *d = user;
  (void)name, (void)err, (void)err_len;
  const char *init = json_string_value(json_object_get(vf_bind_weight_spec(d->model, key), "init"));
  uint64_t h = 1469598103934665603ull;
  for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; v && i < n; i++) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    double z = ((double)(h >> 11) / 9007199254740992.0 - 0.5) * 3.4;
    v[i] = init && !strcmp(init, "ones") ? 1 + 0.1 * z : init ? 0.1 * z : z / 8;
  }
  return v;
}

/* Seven tokens in one call equal five, then one, then one through the same
 * caches and state: the twin carries what a decode step needs (the KV rows
 * at @pos0, the conv and recurrent state), for every layer kind of every
 * family the CKB holds, on each family's tiny checkpoint config. */
START_TEST(layer_twin_carries_its_state) {
  setup_paths();
  char ckb_dir[1200], model[1300], p[1400], err[1200];
  snprintf(ckb_dir, sizeof ckb_dir, "%s/ckb", g_src);
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  static const char *const fams[] = {"qwen3", "qwen35"};
  for (int f = 0; f < 2; f++) {
    make_model(fams[f], "tiny", 5, model, sizeof model);
    snprintf(p, sizeof p, "%s/config.json", model);
    json_t *cfg = json_load_file(p, 0, NULL);
    const mi_ckb_entry *me = mi_ckb_find_model(c, json_object_get(cfg, "architectures"));
    ck_assert_ptr_nonnull(me);
    const json_t *kinds = json_object_get(json_object_get(me->json, "layer_kinds"), "kinds");
    const char *kind = NULL;
    void *it = kinds ? json_object_iter((json_t *)kinds) : NULL;
    do {
      kind = it ? json_object_iter_key(it) : NULL;
      draw d = {me->json};
      vf_interp_layer *one = vf_interp_layer_new(c, me->json, cfg, kind, 7, 16, draw_weight, &d, err, sizeof err);
      ck_assert_msg(one != NULL, "%s", err);
      vf_interp_layer *inc = vf_interp_layer_new(c, me->json, cfg, kind, 7, 16, draw_weight, &d, err, sizeof err);
      ck_assert_msg(inc != NULL, "%s", err);
      int64_t H = vf_interp_layer_width(one);
      double *x = malloc(sizeof(double) * 7 * (size_t)H), *y1 = malloc(sizeof(double) * 7 * (size_t)H);
      double *y2 = malloc(sizeof(double) * 7 * (size_t)H); /* [7, H] */
      for (int64_t i = 0; i < 7 * H; i++) x[i] = sin(0.37 * (double)i + 1.0);
      ck_assert_msg(vf_interp_layer_run(one, x, 7, 0, y1, err, sizeof err) == 0, "%s", err);
      ck_assert_msg(vf_interp_layer_run(inc, x, 5, 0, y2, err, sizeof err) == 0, "%s", err);
      ck_assert_msg(vf_interp_layer_run(inc, x + 5 * H, 1, 5, y2 + 5 * H, err, sizeof err) == 0, "%s", err);
      ck_assert_msg(vf_interp_layer_run(inc, x + 6 * H, 1, 6, y2 + 6 * H, err, sizeof err) == 0, "%s", err);
      double dd = rel_diff(y2, y1, (size_t)(7 * H)), moved = rel_diff(y1, x, (size_t)(7 * H));
      printf("%s %s: 5+1+1 vs 7 tokens %.2e (the layer moves its input %.2e)\n", fams[f], kind ? kind : "layer", dd,
             moved);
      ck_assert_msg(dd < 1e-12 && moved > 1e-2, "%s %s: %.3e / %.3e", fams[f], kind ? kind : "layer", dd, moved);
      /* a call past its positions: one line */
      ck_assert_int_eq(vf_interp_layer_run(inc, x, 1, 16, y2, err, sizeof err), -1);
      ck_assert_ptr_nonnull(strstr(err, "outside"));
      free(x);
      free(y1);
      free(y2);
      vf_interp_layer_free(one);
      vf_interp_layer_free(inc);
      it = it ? json_object_iter_next((json_t *)kinds, it) : NULL;
    } while (it);
    json_decref(cfg);
  }
  mi_ckb_close(c);
}
END_TEST

int main(void) {
  setup_paths(); /* before the tests fork: they share the folder, main removes it */
  Suite *s = mi_check_suite("interp", "interp", 600, NULL, NULL,
                            MI_CHECK_TESTS(interpreter_matches_hand_written_hybrid,
                                           layer_twin_carries_its_state,
                                           interpreter_follows_the_contract));
  const int failed = mi_check_run(s) != EXIT_SUCCESS;
  if (!failed && !getenv("MI_KEEP") && g_tmp[0]) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "test_interp: could not remove %s\n", g_tmp);
  }
  return failed ? 1 : 0;
}
