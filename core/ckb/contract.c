/* Reading a model contract (ckb.h): its step sequences in order, and a
 * config.json value at the dotted path a config entry names. The composer,
 * the orchestrator's repair and experience checks, coverage and the config
 * field check all walk these the same way. */
#include <stdio.h>
#include <string.h>

#include "core/ckb/ckb.h"

json_t *mi_ckb_model_sequences(const json_t *model) {
  static const char *const secs[] = {"prologue", "layer_sequence", "epilogue"};
  json_t *all = json_array();
  for (int s = 0; s < 3; s++) json_array_append(all, json_object_get(model, secs[s]) ?: json_null());
  const char *kn;
  json_t *kv;
  json_object_foreach(json_object_get(json_object_get(model, "layer_kinds"), "kinds"), kn, kv)
      json_array_append(all, json_object_get(kv, "sequence") ?: json_null());
  return all;
}

const json_t *mi_ckb_config_at(const json_t *cfg, const char *path) {
  const json_t *v = cfg;
  for (const char *p = path; v && p && *p;) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    char seg[128];
    snprintf(seg, sizeof seg, "%.*s", (int)(n < 127 ? n : 127), p);
    v = json_is_object(v) ? json_object_get(v, seg) : NULL;
    p = dot ? dot + 1 : NULL;
  }
  return v;
}
