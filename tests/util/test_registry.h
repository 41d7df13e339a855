/* Loading the plugins a build made, as the tests that open sessions on
 * them do. Shared by the tests (include as "tests/util/test_registry.h";
 * link mi_runtime). */
#ifndef MI_TESTS_UTIL_TEST_REGISTRY_H
#define MI_TESTS_UTIL_TEST_REGISTRY_H

#include <check.h>
#include <stdio.h>

#include "core/runtime/loader.h"

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

#endif
