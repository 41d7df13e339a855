/* What the masked-attention pack tests read back: mi-verify's stage 1 of a
 * pack (its exit code and report), a case's verdict in a unit of that
 * report, and the lines of the CKB's check of an entry. Include after
 * pack_fixture.h (build_dir), once per test file. */
#ifndef MI_TESTS_PACK_CHECKS_H
#define MI_TESTS_PACK_CHECKS_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

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

/* mi_ckb_validate_entry's sink: each line appended to a 4096-byte buffer. */
static void collect(void *user, const char *line) {
  char *buf = user;
  size_t l = strlen(buf);
  snprintf(buf + l, 4096 - l, "%s\n", line);
}

#endif
