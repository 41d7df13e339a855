/* CKB internals shared by ckb_store.c, ckb_schema.c, ckb_check.c,
 * ckb_write.c and ckb_coverage.c. Not part of any public API. */
#ifndef MI_CORE_CKB_INTERNAL_H
#define MI_CORE_CKB_INTERNAL_H

#include <jansson.h>
#include <stdarg.h>

#include "core/ckb/ckb.h"

typedef struct ckb_kind {
  char *kind;     /* "operator" */
  char *dir;      /* "operators" */
  char *file;     /* the schema file, for messages */
  json_t *schema; /* the "schema" member */
  json_t *defs;   /* the schema file's own "defs" (may be NULL) */
} ckb_kind;

typedef struct ckb_load_error {
  char *line; /* "FILE: message" */
} ckb_load_error;

struct mi_ckb {
  char *dir;
  json_t *common_defs; /* schemas/common.json "defs" */
  ckb_kind *kinds;
  size_t n_kinds;
  mi_ckb_entry *entries;
  size_t n_entries, cap_entries;
  char **load_errors; /* files that could not be read as entries */
  size_t n_load_errors, cap_load_errors;
};

/* A diagnostics sink that counts. */
typedef struct ckb_diag {
  mi_ckb_diag_fn fn;
  void *user;
  int count;
} ckb_diag;

void ckb_report(ckb_diag *d, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One formatted line appended to a JSON array of lines (a report's
 * problems, what is missing, ...). */
void ckb_line(json_t *lines, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether v is of the JSON Schema type t: 1 or 0; -1 when t names no type. */
int ckb_type_is(const char *t, const json_t *v);

const ckb_kind *ckb_kind_find(const mi_ckb *c, const char *kind);

/* Schema rules: checks `value` against kind k's schema; problems name `file`
 * and the field path. */
void ckb_schema_check(const mi_ckb *c, const ckb_kind *k, json_t *value, const char *file,
                      ckb_diag *d);

/* Per-kind consistency checks that a schema cannot express (names used in
 * shapes and cases are declared, ...). */
void ckb_semantic_check(const mi_ckb *c, json_t *entry, const char *kind, const char *file,
                        ckb_diag *d);

/* The store with `entry` added or replacing the one of the same id (for
 * write-time validation): returns entries by id. */
typedef const mi_ckb_entry *(*ckb_finder)(const mi_ckb *c, const char *id);

/* mi_ckb_config_gaps without its required-field lines: the fields and
 * values config.json holds that the contract does not account for
 * (coverage against the closest contract words absent fields itself). */
size_t ckb_config_field_gaps(const mi_ckb_entry *model, const json_t *config, json_t *lines);

#endif
