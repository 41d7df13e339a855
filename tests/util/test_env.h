/* Where a test finds the build tree and the random checkpoints it runs on.
 * Shared by the tests (include as "tests/util/test_env.h"). */
#ifndef MI_TESTS_UTIL_TEST_ENV_H
#define MI_TESTS_UTIL_TEST_ENV_H

#include <stdio.h>
#include <stdlib.h>

/* $MI_BUILD_DIR (ctest sets it), or def when unset, into buf; returns buf. */
static inline const char *mi_test_build_dir(char *buf, size_t n, const char *def) {
  const char *b = getenv("MI_BUILD_DIR");
  snprintf(buf, n, "%s", b ? b : def);
  return buf;
}

/* The checkpoint BUILD/models/NAME (its path into dir), made by
 * `BUILD/bin/mi-mkmodel ARGS` when it has no config.json yet: later tests
 * and runs reuse it (a suite whose cases fork makes it before they start).
 * 0, or -1 with the command that failed in cmd [cmd_n]. */
static inline int mi_test_checkpoint(const char *build, const char *args, const char *name,
                                     char *dir, size_t n, char *cmd, size_t cmd_n) {
  snprintf(dir, n, "%s/models/%s", build, name);
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  FILE *f = fopen(cfg, "r");
  if (f) {
    fclose(f);
    return 0;
  }
  snprintf(cmd, cmd_n, "mkdir -p '%s/models' && '%s/bin/mi-mkmodel' %s --out '%s' >/dev/null",
           build, build, args, dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* What mpirun needs to start the ranks of a test: the launcher
 * ($MI_MPIRUN, or mpirun) into buf; OpenMPI told that running as root is
 * fine (CI containers) and to do without single-copy (CMA) transfers, which
 * need ptrace rights containers lack; oversubscription allowed. Under the
 * sanitizer build, OpenMPI's components leak by design and are dlclosed
 * before LeakSanitizer reports, so their frames cannot even be suppressed
 * by library name: leak checking is left to the single-process tests, only
 * ASan/UBSan errors count here. */
static inline void mi_test_mpi_env(char *mpirun, size_t n) {
  const char *mr = getenv("MI_MPIRUN");
  snprintf(mpirun, n, "%s", mr ? mr : "mpirun");
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  const char *asan = getenv("ASAN_OPTIONS");
  char opts[1024];
  snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "", asan ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
}

#endif
