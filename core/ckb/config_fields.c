/* Every config.json field accounted for (ckb.h, mi_ckb_config_gaps).
 *
 * A model contract names the fields it binds (its "config" entries, by name
 * or dotted "path"), the values it supports ("values"; "items" for each
 * element of an array), and the fields that do not change the computation
 * ("config_inert", each with why, optionally only at some values). A field
 * config.json holds that is none of these, or a value outside what the
 * contract lists, is a gap: the contract does not say what the model
 * computes with it, so nothing generated from the contract may claim to
 * compute that model. A nested object (rope_parameters, text_config) is
 * checked member by member unless the contract names it as a whole. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/internal.h"

/* The one field every contract reads by construction: it picked the contract. */
static const char *const MATCHED[] = {"architectures", NULL};


/* compact JSON of a value, cut at 60 characters */
static void show(const json_t *v, char *out, size_t n) {
  char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(6));
  snprintf(out, n, "%s", t ? t : "?");
  if (strlen(out) > 60) strcpy(out + 56, "...");
  free(t);
}

/* "\"silu\"", "null or \"linear\"": the listed values, as text */
static void show_list(const json_t *vals, char *out, size_t n) {
  size_t i, l = 0;
  json_t *v;
  out[0] = 0;
  json_array_foreach(vals, i, v) {
    char one[80];
    show(v, one, sizeof one);
    if (l + strlen(one) + 8 >= n) {
      snprintf(out + l, n - l, ", ...");
      return;
    }
    l += (size_t)snprintf(out + l, n - l, "%s%s", !i ? "" : i + 1 == json_array_size(vals) ? " or " : ", ", one);
  }
}

static int listed(const json_t *vals, const json_t *v) {
  size_t i;
  json_t *x;
  json_array_foreach(vals, i, x) if (json_equal(x, v) || (json_is_number(x) && json_is_number(v) &&
                                                           json_number_value(x) == json_number_value(v))) return 1;
  return 0;
}

static const char *where(const json_t *entry) {
  const char *p = json_string_value(json_object_get(entry, "path"));
  return p ? p : json_string_value(json_object_get(entry, "name"));
}

/* The contract's entry (bound or inert) for a dotted field name. */
static const json_t *entry_for(const json_t *list, const char *field) {
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) {
    const char *w = where(e);
    if (w && !strcmp(w, field)) return e;
  }
  return NULL;
}

/* Does the contract name anything under "field." (so an object there is
 * walked member by member)? */
static int names_under(const json_t *model, const char *field) {
  const char *lists[] = {"config", "config_inert"};
  size_t fl = strlen(field);
  for (int k = 0; k < 2; k++) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(model, lists[k]), i, e) {
      const char *w = where(e);
      if (w && !strncmp(w, field, fl) && w[fl] == '.') return 1;
    }
  }
  return 0;
}

/* A field read only when another is set ("when_present": rope_scaling's
 * members): 1 when that one is absent or null, where the field takes its
 * default (the contract says what absence means, e.g. no scaling). */
static int parent_absent(const json_t *e, const json_t *cfg) {
  const char *p = json_string_value(json_object_get(e, "when_present"));
  const json_t *v = p ? mi_ckb_config_at(cfg, p) : NULL;
  return p && (!v || json_is_null(v));
}

/* 1 when some config entry is read only when `field` is set: its null is
 * what those entries' defaults stand for. */
static int is_when_present(const json_t *model, const char *field) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(model, "config"), i, e) {
    const char *p = json_string_value(json_object_get(e, "when_present"));
    if (p && !strcmp(p, field)) return 1;
  }
  return 0;
}

/* Fields a contract reads outside its "config" list: the layer-kind table's
 * per-layer array and interval. */
static int read_elsewhere(const json_t *model, const char *field) {
  const json_t *lk = json_object_get(model, "layer_kinds");
  const char *a = json_string_value(json_object_get(lk, "config"));
  const char *b = json_string_value(json_object_get(lk, "interval"));
  const char *layers = json_string_value(json_object_get(model, "layers"));
  return (a && !strcmp(a, field)) || (b && !strcmp(b, field)) || (layers && !strcmp(layers, field));
}

/* A config field may be null whatever its type; a type the field entry
 * names that is no value type ("null" among them) checks nothing. */
static int type_ok(const char *type, const json_t *v) {
  return !type || json_is_null(v) || !strcmp(type, "null") || ckb_type_is(type, v) != 0;
}

/* The value against an entry's "values" / "items"; one line when outside. */
static void check_values(const char *id, const char *field, const json_t *e, const json_t *v, json_t *lines) {
  char have[80], want[300];
  const json_t *vals = json_object_get(e, "values");
  if (json_is_array(vals) && !listed(vals, v)) {
    show(v, have, sizeof have);
    show_list(vals, want, sizeof want);
    ckb_line(lines, "config field '%s' = %s: %s supports only %s", field, have, id, want);
    return;
  }
  const json_t *items = json_object_get(e, "items");
  if (json_is_array(items) && json_is_array(v)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!listed(items, x)) {
      show(x, have, sizeof have);
      show_list(items, want, sizeof want);
      ckb_line(lines, "config field '%s' has %s at index %zu: %s supports only %s in it", field, have, i, id, want);
      return; /* one line per field */
    }
  }
}

/* Deeper than this, a config is not a model's (HF nests two levels:
 * text_config.rope_parameters): one line, not a recursion as deep as the
 * file. */
#define MAX_NESTING 8

static void walk(const json_t *model, const char *id, const json_t *obj, const char *prefix, int depth,
                 json_t *lines) {
  const json_t *bound = json_object_get(model, "config"), *inert = json_object_get(model, "config_inert");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)obj, k, v) {
    char field[512], have[80];
    snprintf(field, sizeof field, "%s%s", prefix, k);
    int top = !prefix[0];
    const char *const *m = MATCHED;
    int matched = 0;
    for (; top && *m; m++) matched |= !strcmp(*m, k);
    if (matched) continue;
    const json_t *e = entry_for(bound, field);
    if (e) {
      const char *type = json_string_value(json_object_get(e, "type"));
      if (!type_ok(type, v)) {
        show(v, have, sizeof have);
        ckb_line(lines, "config field '%s' = %s: %s reads it as %s %s", field, have, id,
             type[0] == 'a' || type[0] == 'i' || type[0] == 'o' ? "an" : "a", type);
        continue;
      }
      check_values(id, field, e, v, lines);
      continue;
    }
    if (top && read_elsewhere(model, k)) continue;
    if ((e = entry_for(inert, field))) {
      check_values(id, field, e, v, lines); /* inert only at these values, where it says */
      continue;
    }
    if (json_is_null(v) && is_when_present(model, field)) continue; /* its members' defaults */
    if (json_is_object(v) && (names_under(model, field) || json_object_size(v))) {
      if (depth >= MAX_NESTING) {
        ckb_line(lines, "config field '%s' nests objects deeper than %d levels: %s does not read it", field,
             MAX_NESTING, id);
        continue;
      }
      char sub[520];
      snprintf(sub, sizeof sub, "%s.", field);
      walk(model, id, v, sub, depth + 1, lines);
      continue;
    }
    show(v, have, sizeof have);
    ckb_line(lines, "config field '%s' = %s: %s does not read it", field, have, id);
  }
}

/* A config.json in one of the contract's layouts (a wrapper): each key of
 * the wrapper accounted for by the layout (the wrapped config, a copy of
 * one of its fields, a value the template writes, a field named unused),
 * else a line; returns the wrapped config the contract reads, or NULL. */
static const json_t *unwrap(const mi_ckb_entry *model, const json_t *layout, const json_t *outer, json_t *lines) {
  const char *ik = mi_ckb_layout_inner_key(layout);
  const json_t *inner = ik ? json_object_get(outer, ik) : NULL;
  if (!json_is_object(inner)) {
    ckb_line(lines, "config field '%s' is not an object: %s's layout wraps the model's config in it", ik ? ik : "?",
             model->id);
    return NULL;
  }
  const json_t *tmpl = json_object_get(layout, "config"), *inert = json_object_get(model->json, "config_inert");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)outer, k, v) {
    const json_t *t = json_object_get(tmpl, k);
    const char *ts = json_string_value(t);
    char have[80];
    if (!strcmp(k, ik) || !strcmp(k, "architectures") || json_object_get(json_object_get(layout, "unused_config"), k))
      continue;
    if (ts && ts[0] == '$') { /* a copy of one of the wrapped model's fields */
      char f[128];
      snprintf(f, sizeof f, "%s", ts + 1);
      if (f[0] && f[strlen(f) - 1] == '?') f[strlen(f) - 1] = 0;
      const json_t *want = mi_ckb_config_value(model->json, inner, f, strlen(f));
      if (!want && !strcmp(f, "torch_dtype")) continue; /* the files' dtype, read from the tensors */
      if (want && !json_equal(want, v) && !(json_is_number(want) && json_is_number(v) &&
                                             json_number_value(want) == json_number_value(v))) {
        show(v, have, sizeof have);
        ckb_line(lines, "config field '%s' = %s: the wrapped config's '%s' differs, and %s reads that one", k, have, f,
                 model->id);
      }
      continue;
    }
    if (t && json_equal(t, v)) continue;
    if (entry_for(inert, k)) continue;
    show(v, have, sizeof have);
    ckb_line(lines, "config field '%s' = %s: neither %s nor its layout for %s reads it", k, have, model->id,
             json_string_value(json_array_get(json_object_get(outer, "architectures"), 0)) ?: "?");
  }
  return inner;
}

/* An inert field the config leaves out is its config class's "default"
 * (transformers fills it in: a sliding window of 4096 where the class says so),
 * held to the entry's "values" like a written one. */
static void absent_inert(const mi_ckb_entry *model, const json_t *config, json_t *lines) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(model->json, "config_inert"), i, e) {
    const char *name = json_string_value(json_object_get(e, "name"));
    const json_t *d = json_object_get(e, "default"), *vals = json_object_get(e, "values");
    if (!name || !d || !json_is_array(vals) || mi_ckb_config_at(config, name) || listed(vals, d)) continue;
    char have[80], want[300];
    show(d, have, sizeof have);
    show_list(vals, want, sizeof want);
    ckb_line(lines, "config field '%s' is absent, which its config class reads as %s: %s supports only %s", name, have,
             model->id, want);
  }
}

size_t ckb_config_field_gaps(const mi_ckb_entry *model, const json_t *config, json_t *lines) {
  size_t before = json_array_size(lines);
  const json_t *layout = json_is_object(config) ? mi_ckb_model_layout(model->json, config) : NULL;
  if (layout) config = unwrap(model, layout, config, lines);
  if (!json_is_object(config)) {
    if (!layout) ckb_line(lines, "config: not a JSON object");
  } else {
    walk(model->json, model->id, config, "", 0, lines);
    absent_inert(model, config, lines);
  }
  return json_array_size(lines) - before;
}

size_t mi_ckb_config_gaps(const mi_ckb_entry *model, const json_t *config, json_t *lines) {
  size_t before = json_array_size(lines);
  if (!json_is_object(config)) {
    ckb_line(lines, "config: not a JSON object");
    return 1;
  }
  ckb_config_field_gaps(model, config, lines);
  config = mi_ckb_layout_inner(mi_ckb_model_layout(model->json, config), config);
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(model->json, "config"), i, e) {
    const char *w = where(e);
    const json_t *v = w ? mi_ckb_config_at(config, w) : NULL;
    if (json_is_true(json_object_get(e, "required")) && (!v || json_is_null(v)) && !parent_absent(e, config))
      ckb_line(lines, "config field '%s' is absent; %s requires it", w ? w : "?", model->id);
  }
  return json_array_size(lines) - before;
}
