/* Contracts whose layers are of several kinds (layer_kinds: a hybrid's
 * linear- and full-attention layers): each layer's kind from config.json,
 * baked into the engine as a table; per kind its cache row and fixed state
 * sizes, and one case of the layer loop's switch with its caches and state
 * named and its sequence written. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "plugins/agents/compose/compose.h"

/* Each layer's kind from config.json: the array the contract names
 * (layer_types; numbers through layer_kinds.values), else every
 * interval-th layer is the first-listed kind and the others the second.
 * The table is baked into the engine. */
int plan_kinds(gen *g) {
  json_t *lk = json_object_get(g->model, "layer_kinds");
  const char *mid = json_string_value(json_object_get(g->model, "id"));
  sb t = {0};
  int rc = expr_c(g, json_string_value(json_object_get(g->model, "layers")), &t, &g->n_layers);
  free(t.s);
  if (rc || g->n_layers < 1 || g->n_layers > 100000) {
    if (!rc)
      snprintf(g->err, sizeof g->err, "%s: the layer count is %lld", mid, (long long)g->n_layers);
    return -1;
  }
  g->kind_of = calloc((size_t)g->n_layers, 1);
  const char *arr_name = json_string_value(json_object_get(lk, "config"));
  json_t *arr = arr_name ? json_object_get(g->config, arr_name) : NULL;
  size_t nk = json_object_size(g->kinds);
  if (!g->kind_of || nk < 1 || nk > 255) {
    snprintf(g->err, sizeof g->err, "%s: layer_kinds lists %zu kinds", mid, nk);
    return -1;
  }
  if (arr) {
    if (!json_is_array(arr) || (int64_t)json_array_size(arr) != g->n_layers) {
      snprintf(g->err, sizeof g->err, "config.json: \"%s\" must be an array of %lld layer kinds",
               arr_name, (long long)g->n_layers);
      return -1;
    }
    for (int64_t l = 0; l < g->n_layers; l++) {
      const char *k = mi_ckb_layer_kind_named(lk, json_array_get(arr, (size_t)l));
      size_t idx = 0;
      const char *kn;
      json_t *kv;
      int found = 0;
      json_object_foreach(g->kinds, kn, kv) {
        if (k && !strcmp(kn, k)) {
          g->kind_of[l] = (unsigned char)idx;
          found = 1;
        }
        idx++;
      }
      if (!found) {
        char *shown = json_dumps(json_array_get(arr, (size_t)l), JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(g->err, sizeof g->err, "config.json: %s[%lld] = %.64s is not a layer kind of %s%s", arr_name,
                 (long long)l, shown ? shown : "?", mid,
                 json_object_get(lk, "values") ? " (nor a value its layer_kinds.values names)" : "");
        free(shown);
        return -1;
      }
    }
    return 0;
  }
  const char *iv_name = json_string_value(json_object_get(lk, "interval"));
  json_t *ie = iv_name ? cfg_entry(g, iv_name, strlen(iv_name)) : NULL;
  json_t *iv = ie ? cfg_value(g, ie) : NULL;
  if (!json_is_integer(iv) || json_integer_value(iv) < 1 || nk != 2) {
    snprintf(g->err, sizeof g->err,
             "config.json has no \"%s\" array and %s gives no interval to derive it from",
             arr_name ? arr_name : "layer kinds", mid);
    return -1;
  }
  for (int64_t l = 0; l < g->n_layers; l++)
    g->kind_of[l] = (l + 1) % json_integer_value(iv) == 0 ? 0 : 1;
  return 0;
}

int64_t kind_count(gen *g, size_t idx) {
  int64_t n = 0;
  for (int64_t l = 0; l < g->n_layers; l++)
    n += g->kind_of[l] == idx;
  return n;
}

/* the kind's index (its order in layer_kinds.kinds), or -1 */
int kind_index(gen *g, const char *name) {
  size_t idx = 0;
  const char *kn;
  json_t *kv;
  json_object_foreach(g->kinds, kn, kv) {
    if (!strcmp(kn, name)) return (int)idx;
    idx++;
  }
  return -1;
}

/* "static const size_t <name>[] = {<MACRO>KIND_A, <MACRO>KIND_B, ...};": one
 * entry per kind, in the order of layer_kinds.kinds (the KIND_ indices). */
static void kind_table(gen *g, const char *name, const char *macro, sb *o) {
  const char *kn;
  json_t *kv;
  size_t idx = 0;
  sp(o, "static const size_t %s[] = {", name);
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sp(o, "%s%s%s", idx++ ? ", " : "", macro, U);
  }
  sp(o, "};\n");
}

/* Per kind: KV_ROW_<KIND> floats per position (its caches, which grow with
 * the context) and STATE_<KIND> fixed floats (its state). A layer's part of
 * a sequence's slab is n_ctx · KV_ROW then STATE floats. */
int kind_macros(gen *g, sb *o) {
  const char *kn;
  json_t *kv;
  size_t idx = 0;
  sp(o,
     "/* layer kinds (%s.layer_kinds): a layer's part of a sequence's slab is n_ctx * "
     "KV_ROW_<KIND>\n"
     " * cache elements (one row per position; KV_ELEM, %s), then STATE_<KIND> floats of fixed "
     "state */\n",
     json_string_value(json_object_get(g->model, "id")), g->kv);
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sb row = {0}, st = {0};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(kv, "cache"), i, c) {
      sb rw = {0};
      if (row_width(g, c, &rw)) return -1;
      sp(&row, "%s(%s)", i ? " + " : "", rw.s);
      free(rw.s);
    }
    json_array_foreach(json_object_get(kv, "state"), i, c) {
      json_t *sh = json_object_get(c, "shape");
      sp(&st, "%s(", i ? " + " : "");
      for (size_t k = 0; k < json_array_size(sh); k++) {
        sb e = {0};
        if (expr_c(g, json_string_value(json_array_get(sh, k)), &e, NULL)) return -1;
        sp(&st, "%s(%s)", k ? " * " : "", e.s);
        free(e.s);
      }
      sp(&st, ")");
    }
    sp(o, "#define KIND_%-24s %zu /* %lld layers */\n", U, idx, (long long)kind_count(g, idx));
    sp(o, "#define KV_ROW_%-22s (%s) /* cache elements per position */\n", U, row.s ? row.s : "0");
    sp(o, "#define STATE_%-23s (%s) /* fixed floats */\n", U, st.s ? st.s : "0");
    free(row.s);
    free(st.s);
    idx++;
  }
  sp(o, "static const unsigned char k_layer_kind[%lld] = {", (long long)g->n_layers);
  for (int64_t l = 0; l < g->n_layers; l++)
    sp(o, "%s%d", l ? ", " : "", g->kind_of[l]);
  sp(o, "};\nstatic const char *const k_kind_name[] = {");
  idx = 0;
  json_object_foreach(g->kinds, kn, kv) sp(o, "%s\"%s\"", idx++ ? ", " : "", kn);
  sp(o, "};\n");
  kind_table(g, "k_kv_row", "KV_ROW_", o);
  kind_table(g, "k_state", "STATE_", o);
  sp(o, "\n");
  return 0;
}

/* The layer loop's body: one case per kind, its caches and state named, then
 * its sequence. */
int emit_kinds(gen *g, sb *o) {
  const char *kn;
  json_t *kv;
  sp(o, "    unsigned char *slab = s->layer_state[l]; /* this layer's part of the sequence's slab */\n");
  sp(o, "    switch (k_layer_kind[l]) {\n");
  json_object_foreach(g->kinds, kn, kv) {
    char U[96];
    upper(U, kn, sizeof U);
    sp(o, "    case KIND_%s: { /* %s */\n", U, kn);
    sb off = {0};
    sp(&off, "0");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(kv, "cache"), i, c) {
      sb rw = {0}, sh = {0};
      if (row_width(g, c, &rw)) return -1;
      shape_comment(g, c, &sh, 0);
      sp(o, "      KV_ELEM *%s = (KV_ELEM *)slab + (size_t)s->n_ctx * (%s); /* %s */\n",
         json_string_value(json_object_get(c, "name")), off.s, sh.s);
      sp(&off, " + %s", rw.s);
      free(rw.s);
      free(sh.s);
    }
    sb soff = {0};
    sp(&soff, "0");
    json_array_foreach(json_object_get(kv, "state"), i, c) {
      sb sh = {0};
      shape_comment(g, c, &sh, 0);
      sp(o, "      float *%s = (float *)(slab + KV_PART_BYTES(s->n_ctx, KIND_%s)) + %s; /* %s, carried across forwards */\n",
         json_string_value(json_object_get(c, "name")), U, soff.s, sh.s);
      json_t *shp = json_object_get(c, "shape");
      for (size_t k = 0; k < json_array_size(shp); k++) {
        sb e = {0};
        expr_c(g, json_string_value(json_array_get(shp, k)), &e, NULL);
        sp(&soff, "%s(%s)", k ? " * " : " + ", e.s);
        free(e.s);
      }
      free(sh.s);
    }
    free(off.s);
    free(soff.s);
    g->cur_kind = kv;
    int rc = emit_steps(g, json_object_get(kv, "sequence"), o, "      ");
    g->cur_kind = NULL;
    if (rc) {
      char e2[sizeof g->err];
      snprintf(e2, sizeof e2, "%s", g->err);
      snprintf(g->err, sizeof g->err, "layer kind %s: %.900s", kn, e2);
      return -1;
    }
    sp(o, "      break;\n    }\n");
  }
  sp(o, "    }\n");
  return 0;
}
