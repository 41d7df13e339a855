/* A model contract's layouts (ckb.h): the same model stored another way.
 * Read by every reader of a checkpoint (the coverage, the weight check,
 * the verifier's binder, the composer, mi-mkmodel), so a wrapper is
 * described once, in the CKB, and no reader knows one by name. */
#include <stdio.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/runtime/safetensors.h"

static int lists(const json_t *archs, const char *arch) {
  size_t i;
  json_t *a;
  json_array_foreach(archs, i, a) if (json_is_string(a) && !strcmp(json_string_value(a), arch)) return 1;
  return 0;
}

const json_t *mi_ckb_layout_for_arch(const json_t *model, const char *arch) {
  const char *k;
  json_t *lay;
  json_object_foreach(json_object_get(model, "layouts"), k, lay) {
    if (lists(json_object_get(json_object_get(lay, "config"), "architectures"), arch)) return lay;
  }
  return NULL;
}

const json_t *mi_ckb_model_layout(const json_t *model, const json_t *cfg) {
  const json_t *archs = json_object_get(cfg, "architectures");
  size_t i;
  json_t *a;
  /* an architecture the contract lists itself is its own layout */
  json_array_foreach(archs, i, a) if (json_is_string(a) && lists(json_object_get(model, "architectures"),
                                                                  json_string_value(a))) return NULL;
  json_array_foreach(archs, i, a) {
    const json_t *lay = json_is_string(a) ? mi_ckb_layout_for_arch(model, json_string_value(a)) : NULL;
    if (lay) return lay;
  }
  return NULL;
}

/* s with the first "rename" prefix that matches replaced: contract key ->
 * layout name (forward), or layout name -> contract key (back). */
static void swap_prefix(const json_t *layout, const char *s, char *out, size_t n, int forward) {
  const char *key;
  json_t *val;
  json_object_foreach(json_object_get(layout, "rename"), key, val) {
    const char *v = json_string_value(val);
    const char *from = forward ? key : v, *to = forward ? v : key;
    if (v && (forward || *v) && !strncmp(s, from, strlen(from))) {
      snprintf(out, n, "%s%s", to, s + strlen(from));
      return;
    }
  }
  snprintf(out, n, "%s", s);
}

void mi_ckb_layout_rename(const json_t *layout, const char *key, char *out, size_t n) {
  swap_prefix(layout, key, out, n, 1);
}

const char *mi_ckb_layout_unused(const json_t *layout, const char *name, const char **prefix) {
  const char *p;
  json_t *why;
  json_object_foreach(json_object_get(layout, "unused"), p, why) {
    if (json_is_string(why) && *p && !strncmp(name, p, strlen(p))) {
      if (prefix) *prefix = p;
      return json_string_value(why);
    }
  }
  return NULL;
}

void mi_ckb_layout_unrename(const json_t *layout, const char *name, char *out, size_t n) {
  swap_prefix(layout, name, out, n, 0);
}

const char *mi_ckb_layout_inner_key(const json_t *layout) {
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(layout, "config"), k, v) {
    if (json_is_string(v) && !strcmp(json_string_value(v), "$config")) return k;
  }
  return NULL;
}

const json_t *mi_ckb_layout_inner(const json_t *layout, const json_t *cfg) {
  const char *ik = mi_ckb_layout_inner_key(layout);
  const json_t *in = ik ? json_object_get(cfg, ik) : NULL;
  return json_is_object(in) ? in : cfg;
}

/* Does a tensor of w start with one of the layout's renamed prefixes? (A
 * wrapper key such as text_config is shared by layouts that store the
 * weights under different names.) Yes when w is NULL. */
static int holds_renamed(const json_t *layout, const mi_weights *w) {
  if (!w) return 1;
  const char *key;
  json_t *val;
  json_object_foreach(json_object_get(layout, "rename"), key, val) {
    const char *v = json_string_value(val);
    mi_weight_info info;
    for (size_t i = 0; v && *v && mi_weights_at(w, i, &info) == 0; i++)
      if (info.name && !strncmp(info.name, v, strlen(v))) return 1;
  }
  return 0;
}

const json_t *mi_ckb_wrapper_layout(const mi_ckb *c, const json_t *cfg, const mi_weights *w, const json_t **inner) {
  *inner = NULL;
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    const json_t *lays = NULL;
    if (e->kind && !strcmp(e->kind, "model")) lays = json_object_get(e->json, "layouts");
    else if (e->kind && !strcmp(e->kind, "variant")) lays = json_object_get(json_object_get(e->json, "edit"), "add_layout");
    const char *k;
    json_t *lay;
    json_object_foreach((json_t *)lays, k, lay) {
      const json_t *in = mi_ckb_layout_inner(lay, cfg);
      if (in != cfg && holds_renamed(lay, w)) {
        *inner = in;
        return lay;
      }
    }
  }
  return NULL;
}
