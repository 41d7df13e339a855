/* CKB coverage: given a model directory (its config.json "architectures")
 * and a platform name, which contracts apply and what is missing. This is
 * the check mi-gen runs before choosing zero-reference generation or the
 * knowledge-evolution loop. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/ckb/internal.h"
#include "core/util/file.h"

static int str_in(json_t *arr, const char *s) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), s)) return 1;
  return 0;
}

static void add_unique(json_t *arr, const char *s) {
  if (s && !str_in(arr, s)) json_array_append_new(arr, json_string(s));
}

static void missing(json_t *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void missing(json_t *report, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  json_array_append_new(json_object_get(report, "missing"), json_string(buf));
}

const mi_ckb_entry *mi_ckb_find_platform(const mi_ckb *c, const char *name) {
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || strcmp(e->kind, "platform") || !e->id) continue;
    const char *plugin = json_string_value(json_object_get(e->json, "plugin"));
    if (!strcmp(e->id, name) || (plugin && !strcmp(plugin, name)) ||
        str_in(json_object_get(e->json, "aliases"), name))
      return e;
  }
  return NULL;
}

const mi_ckb_entry *mi_ckb_find_model(const mi_ckb *c, const json_t *archs) {
  size_t j;
  json_t *a;
  json_array_foreach(archs, j, a) {
    for (size_t i = 0; json_is_string(a) && i < mi_ckb_count(c); i++) {
      const mi_ckb_entry *e = mi_ckb_at(c, i);
      if (e->kind && !strcmp(e->kind, "model") &&
          str_in(json_object_get(e->json, "architectures"), json_string_value(a)))
        return e;
    }
  }
  return NULL;
}

static const char *hf_dtype(const char *torch_dtype) {
  if (!torch_dtype) return NULL;
  if (!strcmp(torch_dtype, "float32")) return "f32";
  if (!strcmp(torch_dtype, "float16")) return "f16";
  if (!strcmp(torch_dtype, "bfloat16")) return "bf16";
  return NULL;
}

static json_t *platform_kernel(const mi_ckb_entry *p, const char *op) {
  size_t i;
  json_t *k;
  json_array_foreach(json_object_get(p->json, "kernels"), i, k) {
    const char *o = json_string_value(json_object_get(k, "operator"));
    if (o && !strcmp(o, op)) return k;
  }
  return NULL;
}

static void add_tests(const mi_ckb *c, json_t *ids, json_t *tests, json_t *report) {
  size_t i;
  json_t *v;
  json_array_foreach(ids, i, v) {
    const char *id = json_string_value(v);
    if (!id) continue;
    int seen = 0;
    size_t j;
    json_t *t;
    json_array_foreach(tests, j, t) seen |= !strcmp(json_string_value(json_object_get(t, "id")), id);
    if (seen) continue;
    const mi_ckb_entry *e = mi_ckb_find(c, id);
    if (!e) {
      missing(report, "test contract '%s'", id);
      continue;
    }
    json_array_append_new(tests, json_pack("{s:s, s:O, s:O}", "id", id, "stage",
                                           json_object_get(e->json, "stage"), "status",
                                           json_object_get(e->json, "status")));
  }
}

int mi_ckb_coverage(const mi_ckb *c, const char *model_dir, const char *platform, json_t **out,
                    char *err, size_t err_len) {
  *out = NULL;
  char cfg_path[4096];
  snprintf(cfg_path, sizeof cfg_path, "%s/config.json", model_dir);
  json_t *cfg = mi_file_load_json(cfg_path, 0, MI_CONFIG_JSON_MAX_BYTES, "config file", 0, err,
                                  err_len);
  if (!cfg) return -1;
  json_t *archs = json_object_get(cfg, "architectures");
  if (!json_is_array(archs) || json_array_size(archs) == 0) {
    snprintf(err, err_len, "%s: field 'architectures' must be a non-empty array", cfg_path);
    json_decref(cfg);
    return -1;
  }
  json_t *r = json_pack("{s:s, s:O, s:s, s:[], s:[], s:[], s:[], s:[]}", "model_dir", model_dir,
                        "architectures", archs, "platform", platform, "operators", "tests",
                        "failure_modes", "experience", "missing");

  const mi_ckb_entry *model = mi_ckb_find_model(c, archs);
  if (model) json_object_set_new(r, "model_contract", json_sprintf("%s@%s", model->id, model->version));
  else missing(r, "model contract for architecture %s", json_string_value(json_array_get(archs, 0)));

  const mi_ckb_entry *plat = mi_ckb_find_platform(c, platform);
  if (plat) json_object_set_new(r, "platform_contract", json_sprintf("%s@%s", plat->id, plat->version));
  else missing(r, "platform contract for '%s'", platform);

  json_t *used = json_array(); /* every id in play, for failure modes / experience */
  if (model) add_unique(used, model->id);
  if (plat) add_unique(used, plat->id);

  /* Weight dtype against what the platform stores. */
  const char *wdt = hf_dtype(json_string_value(json_object_get(cfg, "torch_dtype")));
  if (wdt) json_object_set_new(r, "weights_dtype", json_string(wdt));
  if (wdt && plat &&
      !str_in(json_object_get(json_object_get(plat->json, "dtypes"), "weights"), wdt))
    missing(r, "platform '%s' does not store %s weights", plat->id, wdt);

  /* Operators: every step of the model's sequences. */
  const char *seqs[] = {"prologue", "layer_sequence", "epilogue"};
  json_t *ops = json_object_get(r, "operators");
  for (int s = 0; model && s < 3; s++) {
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(model->json, seqs[s]), i, step) {
      const char *op = json_string_value(json_object_get(step, "operator"));
      if (!op || str_in(used, op)) continue;
      add_unique(used, op);
      const mi_ckb_entry *oe = mi_ckb_find(c, op);
      json_t *k = plat ? platform_kernel(plat, op) : NULL;
      json_array_append_new(ops, json_pack("{s:s, s:b, s:b}", "id", op, "contract", oe != NULL,
                                           "platform", k != NULL));
      if (!oe) missing(r, "operator contract '%s'", op);
      if (plat && !k) missing(r, "platform '%s' provides no kernel for '%s'", plat->id, op);
    }
  }

  json_t *tests = json_object_get(r, "tests");
  if (model) add_tests(c, json_object_get(model->json, "test_contracts"), tests, r);
  if (plat) add_tests(c, json_object_get(plat->json, "test_contracts"), tests, r);
  size_t ti;
  json_t *tv;
  json_array_foreach(tests, ti, tv) add_unique(used, json_string_value(json_object_get(tv, "id")));

  /* Failure modes and experience that touch anything in play. */
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (!e->kind || !e->id) continue;
    const char *field = !strcmp(e->kind, "failure_mode") ? "affects"
                        : !strcmp(e->kind, "experience") ? "related" : NULL;
    if (!field) continue;
    size_t j;
    json_t *v;
    int hit = 0;
    json_array_foreach(json_object_get(e->json, field), j, v) hit |=
        json_is_string(v) && str_in(used, json_string_value(v));
    if (hit)
      json_array_append_new(json_object_get(r, !strcmp(e->kind, "experience") ? "experience" : "failure_modes"),
                            json_string(e->id));
  }
  json_decref(used);
  json_decref(cfg);
  int covered = json_array_size(json_object_get(r, "missing")) == 0;
  json_object_set_new(r, "covered", json_boolean(covered));
  *out = r;
  return covered ? 0 : 1;
}
