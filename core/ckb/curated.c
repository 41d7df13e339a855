/* The curated base of a CKB: a copy without what knowledge evolution added
 * (see ckb.h, mi_ckb_export_curated). Evolution only ever adds entries with
 * provenance "evolved" and appends their operators to a platform's kernel
 * list, so leaving those out gives the CKB an evolution run starts from. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/util/spawn.h"

static int is_evolved(const mi_ckb_entry *e) {
  const char *src = json_string_value(json_object_get(json_object_get(e->json, "provenance"), "source"));
  return src && !strcmp(src, "evolved");
}

int mi_ckb_export_curated(const mi_ckb *c, const char *out_dir, int *n_left_out, char *err, size_t err_len) {
  const char *dir = mi_ckb_dir(c);
  if (n_left_out) *n_left_out = 0;
  if (access(out_dir, F_OK) == 0) {
    snprintf(err, err_len, "%s: exists already (the curated copy goes into a new folder)", out_dir);
    return -1;
  }
  if (mi_copy_tree(dir, out_dir) != 0) {
    snprintf(err, err_len, "%s: cannot copy %s there: %s", out_dir, dir, strerror(errno));
    return -1;
  }
  json_t *gone = json_object(); /* ids left out */
  char p[4200];
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!is_evolved(e) || !e->id) continue;
    snprintf(p, sizeof p, "%s/%s", out_dir, e->rel);
    if (unlink(p) != 0) {
      snprintf(err, err_len, "%s: cannot remove: %s", p, strerror(errno));
      rc = -1;
    }
    json_object_set_new(gone, e->id, json_true());
  }
  /* platform contracts: drop the kernels whose operator was left out */
  for (size_t i = 0; rc == 0 && i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (is_evolved(e) || !e->kind || strcmp(e->kind, "platform")) continue;
    json_t *ks = json_object_get(e->json, "kernels");
    json_t *keep = json_array();
    size_t k;
    json_t *x;
    json_array_foreach(ks, k, x) if (!json_object_get(gone, json_string_value(json_object_get(x, "operator")) ?: ""))
        json_array_append(keep, x);
    if (json_array_size(keep) != json_array_size(ks)) {
      json_t *np = json_deep_copy(e->json);
      json_object_set(np, "kernels", keep);
      snprintf(p, sizeof p, "%s/%s", out_dir, e->rel);
      if (json_dump_file(np, p, JSON_INDENT(2)) != 0) {
        snprintf(err, err_len, "%s: cannot write", p);
        rc = -1;
      }
      json_decref(np);
    }
    json_decref(keep);
  }
  if (n_left_out) *n_left_out = (int)json_object_size(gone);
  json_decref(gone);
  return rc;
}
