/* Fuzzes one CKB entry of any kind against the real knowledge base: the
 * input is parsed as mi_ckb_open parses entry files (jansson, duplicates
 * rejected) and checked with mi_ckb_validate_entry as if stored where its
 * id says (so placement, schema, x-ref, x-expr and the per-kind semantic
 * checks all run). Every diagnostic must be one non-empty line. */
#include "fuzz_util.h"

#include <jansson.h>

#include "core/ckb/ckb.h"

static mi_ckb *g_ckb;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char buf[1024], err[512];
  g_ckb = mi_ckb_open(fuzz_input_path("MI_FUZZ_CKB_DIR", "ckb", buf, sizeof buf), err, sizeof err);
  fuzz_setup_check(g_ckb, "fuzz_ckb_entry", err, "");
  return 0;
}

static void diag(void *user, const char *line) {
  fuzz_check_one_line("ckb diagnostic", line);
  ++*(int *)user;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t je;
  json_t *e = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
  if (!e) return 0;
  /* Store it where its id would put it, when the id names a known kind;
   * otherwise somewhere plausible (placement is then reported). */
  char path[1200] = "ckb/fuzz/entry.json";
  const char *id = json_string_value(json_object_get(e, "id"));
  const char *dot = id ? strchr(id, '.') : NULL;
  if (dot && dot - id < 200) {
    char kind[200];
    memcpy(kind, id, (size_t)(dot - id));
    kind[dot - id] = 0;
    const char *kdir = mi_ckb_kind_dir(g_ckb, kind);
    if (kdir && strlen(dot + 1) < 900) snprintf(path, sizeof path, "ckb/%s/%s.json", kdir, dot + 1);
  }
  int seen = 0;
  int n = mi_ckb_validate_entry(g_ckb, e, path, diag, &seen);
  FUZZ_CHECK(n == seen, "returned %d problems but reported %d", n, seen);
  json_decref(e);
  return 0;
}
