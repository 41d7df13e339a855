/* The fixture the kernel-pack tests share: the source, build, CKB and SDK
 * folders from the environment, and one pack generated from the CKB's
 * entries into a temporary folder, once per test case, in the runner's
 * process (the tests fork from there and only read it). Each test file
 * includes it once. */
#ifndef MI_TESTS_PACK_FIXTURE_H
#define MI_TESTS_PACK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "core/ckb/ckb.h"
#include "core/gen/pack/pack.h"
#include "tests/util/test_proc.h"

static char src_dir[4096], build_dir[4096], ckb_dir[4200], sdk_dir[4200];
static char pack_dir[64] = "";   /* the pack the tests read, built once */
static char pack_err[1024] = ""; /* why it could not be built */

static void paths(void) {
  const char *s = getenv("MI_SOURCE_DIR"), *b = getenv("MI_BUILD_DIR");
  snprintf(src_dir, sizeof src_dir, "%s", s ? s : ".");
  snprintf(build_dir, sizeof build_dir, "%s", b ? b : "build");
  snprintf(ckb_dir, sizeof ckb_dir, "%s/ckb", src_dir);
  snprintf(sdk_dir, sizeof sdk_dir, "%s/sdk/include", src_dir);
}

/* The pack `name` of operators ids, into a fresh /tmp/mi-pack-TAG.XXXXXX. */
static void build_pack_of(const char *const *ids, const char *name, const char *tag) {
  paths();
  snprintf(pack_dir, sizeof pack_dir, "/tmp/mi-pack-%s.XXXXXX", tag);
  if (!mkdtemp(pack_dir)) {
    snprintf(pack_err, sizeof pack_err, "mkdtemp failed");
    return;
  }
  char err[1024];
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  if (!c)
    snprintf(pack_err, sizeof pack_err, "%s", err);
  else if (mi_pack_generate(c, ids, name, pack_dir, sdk_dir, err, sizeof err) != 0)
    snprintf(pack_err, sizeof pack_err, "%s", err);
  mi_ckb_close(c);
}

static void remove_pack(void) {
  if (pack_dir[0]) mi_test_sh("rm -rf '%s'", pack_dir);
}

#endif
