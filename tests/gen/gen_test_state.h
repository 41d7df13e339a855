/* What test_gen.c and test_gen_hybrid.c share: their folders, the mi-gen
 * run their setup makes once (its exit status and stderr, which every test
 * reads first), and the shorthands for running tools. Included once, after
 * gen_tool.h, with GEN_TEST_NAME (the test, as setup messages name it). */
#ifndef MI_TESTS_GEN_TEST_STATE_H
#define MI_TESTS_GEN_TEST_STATE_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_tool.h"

static char g_build[1024], g_src[1024], g_tmp[1100], g_model[1200], g_ckb[1200], g_out[1200];
static int g_gen_rc = -1;
static char *g_gen_err;

/* run a built tool / a setup chore (tests/gen/gen_tool.c) */
static res run(const char *tool, const char *const *args, int timeout) {
  return gt_run(g_build, g_tmp, tool, args, timeout);
}
#define sh(...) gt_sh(GEN_TEST_NAME, __VA_ARGS__)
#define slurp gt_slurp

/* Keeps what setup's mi-gen run r said (its exit status and stderr), then
 * frees r. */
static void keep_gen_run(res *r) {
  g_gen_rc = r->rc;
  g_gen_err = strdup(r->err);
  res_free(r);
}

/* Setup's mi-gen run succeeded: its manifest (the caller decrefs it). */
static json_t *gen_manifest(void) {
  ck_assert_msg(g_gen_rc == 0, "mi-gen exited %d:\n%s", g_gen_rc, g_gen_err);
  char p[1400];
  snprintf(p, sizeof p, "%s/manifest.json", g_out);
  json_t *m = json_load_file(p, 0, NULL);
  ck_assert_msg(m != NULL, "%s: not JSON", p);
  return m;
}

/* After every test: the scratch folder goes (MI_KEEP keeps it). */
static void teardown_all(void) {
  if (!getenv("MI_KEEP")) sh("rm -rf '%s'", g_tmp);
  free(g_gen_err);
}

#endif
