/* Loading the plugins a build made, as the tests that open sessions on
 * them do. Shared by the tests (include as "tests/util/test_registry.h";
 * link mi_runtime). */
#ifndef MI_TESTS_UTIL_TEST_REGISTRY_H
#define MI_TESTS_UTIL_TEST_REGISTRY_H

#include <check.h>
#include <stdio.h>

#include "core/runtime/loader.h"
#include "core/runtime/session.h"

/* The plugins under BUILD/lib/metainfer, loaded as mi-run loads them; the
 * test fails naming the loader's error when any is fatal. */
static inline mi_registry *mi_test_registry(const char *build) {
  char pdir[1100];
  snprintf(pdir, sizeof pdir, "%s/lib/metainfer", build);
  mi_loader_opts lo = {.plugin_dir = pdir};
  int fatal = 0;
  char err[1024];
  mi_registry *r = mi_registry_load(&lo, &fatal, err, sizeof err);
  ck_assert_msg(r && !fatal, "plugins: %s", err);
  return r;
}

/* A sequence of n_ctx tokens on e's model; the test fails naming the
 * plugin's error. */
static inline mi_seq *mi_test_seq(const mi_session *e, int64_t n_ctx) {
  char err[512];
  mi_seq *s = NULL;
  ck_assert_msg(e->M->seq_create(e->model, n_ctx, &s, err, sizeof err) == 0, "%s", err);
  return s;
}

/* e's forward of ids[0, n) on s (the logits of every position when `all`,
 * else the last one's), asserting success. */
static inline void mi_test_forward(const mi_session *e, mi_seq *s, const int32_t *ids, int64_t n,
                                   float *logits, int all) {
  char err[512];
  ck_assert_msg(e->M->forward(e->model, s, ids, n, logits, all, err, sizeof err) == 0, "%s", err);
}

/* Closes the session e, then the registry it was opened on. */
static inline void mi_test_session_close(mi_session *e, mi_registry *reg) {
  mi_session_close(e);
  mi_registry_free(reg);
}

#endif
