/* What the kernel-pack tests read back: mi-verify's stage 1 of a pack (its
 * exit code and report), a unit of that report and a case's verdict in it,
 * a copy of the CKB to edit, and the lines of the CKB's check of an entry.
 * Include after pack_fixture.h (build_dir, ckb_dir), once per test file. */
#ifndef MI_TESTS_PACK_CHECKS_H
#define MI_TESTS_PACK_CHECKS_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/gen/pack/pack.h"
#include "tests/util/test_proc.h"

/* mi-verify --stage 1 on the CPU platform with the pack at so, held to the
 * CKB at ckb: its exit code; its report in *rep. */
static int verify(const char *ckb, const char *so, const char *dir, json_t **rep) {
  int rc = mi_test_sh("'%s/bin/mi-verify' --ckb '%s' --platform-plugin '%s/lib/metainfer/libmi-cpu.so' --platform cpu "
                      "--pack '%s' --stage 1 --seed 5 -o threads=3 --report '%s/report.json' >'%s/verify.txt' 2>&1",
                      build_dir, ckb, build_dir, so, dir, dir);
  char path[4300];
  snprintf(path, sizeof path, "%s/report.json", dir);
  *rep = json_load_file(path, 0, NULL);
  ck_assert_msg(*rep != NULL, "no report (exit %d): see %s/verify.txt", rc, dir);
  return rc;
}

/* The verdict of case `name` at dtype `dt` in unit u. */
static const char *case_verdict(json_t *u, const char *name, const char *dt) {
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(u, "cases"), i, c) {
    if (!strcmp(json_string_value(json_object_get(c, "case")), name) &&
        !strcmp(json_string_value(json_object_get(c, "dtype")), dt))
      return json_string_value(json_object_get(c, "verdict"));
  }
  ck_abort_msg("no case %s at %s", name, dt);
  return NULL;
}

/* The stage-1 unit `id` of a mi-verify report (aborts the test without one). */
static inline json_t *report_unit(json_t *rep, const char *id) {
  size_t i;
  json_t *u;
  json_array_foreach(json_object_get(json_array_get(json_object_get(rep, "stages"), 0), "units"), i, u) {
    if (!strcmp(json_string_value(json_object_get(u, "id")), id)) return u;
  }
  ck_abort_msg("no unit %s in the report", id);
  return NULL;
}

/* The pack `name` of operators `ops` (comma-separated) generated from the
 * CKB at ckb into dir/p, then verified against the real CKB (ckb_dir):
 * mi-verify's exit code, the report in *rep. */
static inline int pack_and_verify_ops(const char *ckb, const char *dir, const char *ops, const char *name,
                                      json_t **rep) {
  ck_assert_int_eq(mi_test_sh("'%s/bin/mi-ckb' --ckb '%s' pack '%s/p' --ops %s --name %s >/dev/null 2>'%s/err.txt'",
                              build_dir, ckb, dir, ops, name, dir),
                   0);
  char so[4300];
  snprintf(so, sizeof so, "%s/p/libmi-pack-%s.so", dir, name);
  return verify(ckb_dir, so, dir, rep);
}

/* The pack source mi_pack_emit writes for the operators ids of the CKB at
 * ckb_dir (free it). */
static inline char *emitted_source(const char *const *ids, const char *name) {
  char err[1024];
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  char *src;
  json_t *ks;
  ck_assert_msg(mi_pack_emit(c, ids, name, &src, &ks, err, sizeof err) == 0, "%s", err);
  json_decref(ks);
  mi_ckb_close(c);
  return src;
}

/* The fixture's pack.c compiles clean under the project's warnings. */
static inline void pack_source_compiles_clean(void) {
  ck_assert_int_eq(mi_test_sh("/usr/bin/cc -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -I '%s' '%s/pack.c'", sdk_dir,
                              pack_dir),
                   0);
}

/* A copy of the CKB at ckb_dir in tmp/ckb (its hidden files, the lock and
 * staging folders, left out), for a test to edit an entry of. */
static inline void copy_ckb(const char *tmp) {
  ck_assert_int_eq(mi_test_sh("mkdir -p '%s/ckb' && cp -r '%s/.' '%s/ckb/' && find '%s/ckb' -mindepth 1 -name '.*' -exec "
                              "rm -rf {} +",
                              tmp, ckb_dir, tmp, tmp),
                   0);
}

/* mi_ckb_validate_entry's sink: each line appended to a 4096-byte buffer. */
static void collect(void *user, const char *line) {
  char *buf = user;
  size_t l = strlen(buf);
  snprintf(buf + l, 4096 - l, "%s\n", line);
}

#endif
