/* The whole engine source: the contract's steps written first (they record
 * which weights are matrices and which vectors), then each generated part,
 * then engine_template.c -- embedded at build time, compiled on its own by
 * the build -- filled in with them. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/agents/compose/compose.h"

#include "engine_template.inc" /* k_engine_template: engine_template.c's bytes (embed.cmake) */

/* One #if MI_GEN_<FLAG> level, or (gen 0) a directive of the template's own */
typedef struct level {
  int gen, cond, active; /* a composer flag; its value; lines here are written */
} level;

static int is_flag_on(const char *name, size_t n, const char *const *on) {
  for (; *on; on++)
    if (strlen(*on) == n && !strncmp(*on, name, n)) return 1;
  return 0;
}

/* the part a line holding only MI_GEN_<NAME> stands for; NULL if the line is not one */
static const char *part_line(const char *t, const char *end, const tpl_part *parts, size_t n_parts,
                             int *unknown) {
  *unknown = 0;
  if (strncmp(t, "MI_GEN_", 7)) return NULL;
  const char *p = t + 7, *name = p;
  while (p < end && (isupper((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_'))
    p++;
  for (const char *q = p; q < end; q++)
    if (!isspace((unsigned char)*q)) return NULL;
  for (size_t i = 0; i < n_parts; i++)
    if (strlen(parts[i].name) == (size_t)(p - name) &&
        !strncmp(parts[i].name, name, (size_t)(p - name)))
      return parts[i].text;
  *unknown = 1;
  return NULL;
}

/* a conditional directive: 1 when handled (the line is dropped or kept per *keep), 0 otherwise, -1
 * malformed */
static int directive(const char *t, const char *end, level *st, int *depth,
                     const char *const *flags_on, int *keep) {
  int parent = *depth ? st[*depth - 1].active : 1;
  *keep = 0;
  if (!strncmp(t, "#if", 3)) {
    if (*depth >= 16) return -1;
    const char *f = t + 3;
    while (f < end && *f == ' ')
      f++;
    int gen = !strncmp(t, "#if ", 4) && !strncmp(f, "MI_GEN_", 7);
    const char *nm = f + 7, *ne = nm;
    while (gen && ne < end && !isspace((unsigned char)*ne))
      ne++;
    int cond = gen && is_flag_on(nm, (size_t)(ne - nm), flags_on);
    st[(*depth)++] = (level){gen, cond, gen ? parent && cond : parent};
    *keep = !gen && parent;
    return 1;
  }
  if (!strncmp(t, "#else", 5) || !strncmp(t, "#endif", 6)) {
    if (!*depth) return -1;
    level *l = &st[*depth - 1];
    int outer = *depth > 1 ? st[*depth - 2].active : 1;
    *keep = !l->gen && outer;
    if (t[2] == 'l')
      l->active = l->gen ? outer && !l->cond : outer;
    else
      (*depth)--;
    return 1;
  }
  return 0;
}

int fill_template(const char *tpl, const tpl_part *parts, size_t n_parts,
                  const char *const *flags_on, sb *out, char *err, size_t err_len) {
  const char *p = strstr(tpl, "\nMI_GEN_HEADER"); /* the template's own preamble is not copied */
  level st[16];
  int depth = 0, line = 1;
  if (!p) return snprintf(err, err_len, "engine template: no MI_GEN_HEADER line"), -1;
  for (const char *q = tpl; q <= p; q++)
    line += *q == '\n';
  for (p++; *p; line++) {
    const char *end = strchr(p, '\n') ? strchr(p, '\n') : p + strlen(p), *t = p;
    while (t < end && (*t == ' ' || *t == '\t'))
      t++;
    int keep, unknown, d = directive(t, end, st, &depth, flags_on, &keep);
    int active = depth ? st[depth - 1].active : 1;
    const char *text = d ? NULL : part_line(t, end, parts, n_parts, &unknown);
    if (d < 0 || (!d && unknown)) {
      snprintf(err, err_len, "engine template line %d: %s", line,
               d < 0 ? "unbalanced or too deep #if" : "unknown part");
      return -1;
    }
    if (d ? keep : active) sp(out, "%s", text ? text : "");
    if ((d ? keep : active) && !text) sp(out, "%.*s\n", (int)(end - p), p);
    p = *end ? end + 1 : end;
  }
  if (depth) return snprintf(err, err_len, "engine template: an #if is not closed"), -1;
  return 0;
}

/* the contract's steps: prologue, the layer loop's body, epilogue */
static int emit_sequences(gen *g, sb *pro, sb *lay, sb *epi) {
  if (g->kinds && plan_kinds(g)) return -1;
  if (emit_steps(g, json_object_get(g->model, "prologue"), pro, "  ")) return -1;
  if (g->kinds ? emit_kinds(g, lay)
               : emit_steps(g, json_object_get(g->model, "layer_sequence"), lay, "    "))
    return -1;
  return emit_steps(g, json_object_get(g->model, "epilogue"), epi, "    ");
}

/* a vector weight stored with more than one dim ([C, 1, K]): bind() checks its element count */
static int multi_dim_vectors(gen *g) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(g->model, "weights"), i, e) {
    if (weight_is_vector(g, json_string_value(json_object_get(e, "key"))) &&
        json_array_size(json_object_get(e, "shape")) > 1)
      return 1;
  }
  return 0;
}

enum {
  P_HEADER,
  P_CONSTANTS,
  P_LAYER_W,
  P_MODEL_W,
  P_BUFFERS,
  P_CACHE,
  P_LOAD,
  P_OFFSETS,
  P_POINTERS,
  P_PROLOGUE,
  P_LAYER,
  P_EPILOGUE,
  P_FREE,
  P_NEEDS,
  P_PACK_FIELDS,
  P_PACK_LOOKUP,
  P_COUNT
};
static const char *const k_part_names[P_COUNT] = {
    "HEADER",       "CONSTANTS",    "LAYER_WEIGHTS", "MODEL_WEIGHTS",  "BUFFERS",
    "CACHE_LAYOUT", "LOAD_WEIGHTS", "ARENA_OFFSETS", "ARENA_POINTERS", "PROLOGUE",
    "LAYER",        "EPILOGUE",     "FREE_WEIGHTS",  "PLATFORM_NEEDS", "PACK_KERNELS",
    "PACK_LOOKUP"};

/* every generated part but the platform needs (which are read off the rest) */
static int write_parts(gen *g, json_t *contracts, json_t *experience, json_t *patches,
                       const char *engine_name, sb *pt) {
  sb pro = {0}, lay = {0}, epi = {0};
  int rc = emit_sequences(g, &pro, &lay, &epi);
  if (!rc) {
    part_header(g, contracts, experience, patches, &pt[P_HEADER]);
    part_constants(g, engine_name, &pt[P_CONSTANTS]);
    part_weight_fields(g, 1, &pt[P_LAYER_W]);
    part_weight_fields(g, 0, &pt[P_MODEL_W]);
    part_buffers(g, &pt[P_BUFFERS]);
    rc = part_cache_layout(g, &pt[P_CACHE]) || part_load_weights(g, &pt[P_LOAD]) ? -1 : 0;
    part_arena(g, &pt[P_OFFSETS], &pt[P_POINTERS]);
    part_prologue(g, pro.s ? pro.s : "", &pt[P_PROLOGUE]);
    part_layer(g, lay.s ? lay.s : "", &pt[P_LAYER]);
    sp(&pt[P_EPILOGUE], "%s", epi.s ? epi.s : "");
    part_free_weights(g, &pt[P_FREE]);
    part_pack_fields(g, &pt[P_PACK_FIELDS]);
    part_pack_lookup(g, &pt[P_PACK_LOOKUP]);
  }
  free(pro.s);
  free(lay.s);
  free(epi.s);
  return rc;
}

int compose_source(gen *g, json_t *contracts, json_t *experience, json_t *patches,
                   const char *engine_name, sb *o) {
  sb pt[P_COUNT] = {{0}}, first = {0};
  tpl_part parts[P_COUNT];
  int rc = write_parts(g, contracts, experience, patches, engine_name, pt);
  const char *flags[5];
  int nf = 0;
  if (g->kinds) flags[nf++] = "KINDS";
  if (multi_dim_vectors(g)) flags[nf++] = "MULTI_VEC";
  if (g->has_paths) flags[nf++] = "PATHS";
  if (g->tp > 1) flags[nf++] = "TP";
  flags[nf] = NULL;
  for (int i = 0; i < P_COUNT; i++)
    parts[i] = (tpl_part){k_part_names[i], pt[i].s ? pt[i].s : ""};
  /* once without the needs, to read off the platform members the source calls */
  if (!rc)
    rc = fill_template(k_engine_template, parts, P_COUNT, flags, &first, g->err, sizeof g->err);
  if (!rc) {
    part_platform_needs(first.s, &pt[P_NEEDS]);
    parts[P_NEEDS].text = pt[P_NEEDS].s;
    rc = fill_template(k_engine_template, parts, P_COUNT, flags, o, g->err, sizeof g->err);
  }
  for (int i = 0; i < P_COUNT; i++)
    free(pt[i].s);
  free(first.s);
  return rc;
}
