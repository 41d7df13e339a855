/* Phase 5, the consolidator: what the loop learned, written into the target
 * CKB (--ckb) as ordinary entries, each with provenance "evolved" listing
 * the references read (path#sha256):
 *   operators/<op>.json    the bundle's operator contracts
 *   platforms/<p>.json     the platform contract, listing the bundle's kernels
 *   models/NAME.json       the closest contract edited by the variants the
 *                          search found, plus the bundle's layer kind
 *                          (ev_model_entry: NAME from the checkpoint's
 *                          architectures, not a constant)
 *   experience/evolved_NAME_variants.json   what the search measured
 * Deterministic: no dates or timings in the entries, keys sorted, the same
 * inputs give the same bytes. An entry already there is updated (its
 * version's patch grows) when its content differs, else left alone. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/ckb.h"
#include "core/runtime/safetensors.h"
#include "core/gen/evolve/evolve.h"
static json_t *refs_of(const ev_ctx *c) {
  json_t *refs = json_array();
  size_t i;
  json_t *r;
  json_array_foreach(c->reads, i, r) {
    char s[4400];
    snprintf(s, sizeof s, "%s#sha256=%s", json_string_value(json_object_get(r, "ref")),
             json_string_value(json_object_get(r, "sha256")));
    int dup = 0;
    size_t k;
    json_t *x;
    json_array_foreach(refs, k, x) dup |= !strcmp(json_string_value(x), s);
    if (!dup) json_array_append_new(refs, json_string(s));
  }
  return refs;
}

/* "Abc3_5ForSomeTask" -> "abc35": the architecture without its For...
 * suffix, lowercase letters and digits only. 0, or -1. */
static int model_name(const json_t *cfg, char *out, size_t n) {
  const json_t *a = json_object_get(cfg, "architectures");
  const char *arch = json_string_value(json_array_get(a, 0));
  if (!arch) return -1;
  const char *end = strstr(arch, "For");
  if (!end || end == arch) end = arch + strlen(arch);
  size_t l = 0;
  for (const char *p = arch; p < end && l + 1 < n; p++)
    if (isalnum((unsigned char)*p)) out[l++] = (char)tolower((unsigned char)*p);
  out[l] = 0;
  return l ? 0 : -1;
}

/* --model stored in a wrapper layout the vocabulary describes (a variant
 * whose edit has "add_layout" and whose evidence holds there): that layout
 * (rename, unused prefixes, unused config keys) with its config template
 * taken from --model's own wrapper: the wrapped object as "$config", a key
 * that copies a field of the wrapped config as "$FIELD", the keys the
 * layout names (its template's, its unused ones) as written. NULL when --model is not wrapped or nothing in the vocabulary
 * reads it (the explanation check then names what stays unexplained).
 * Its name in the contract's "layouts" is in the result's "x-name". */
static json_t *wrapper_layout(const ev_ctx *c, const json_t *m) {
  if (!c->o->model) return NULL;
  char cp[4200], e2[1024];
  snprintf(cp, sizeof cp, "%s/config.json", c->o->model);
  json_t *mcfg = json_load_file(cp, 0, NULL);
  mi_weights *w = mcfg ? mi_weights_open(c->o->model, e2, sizeof e2) : NULL;
  mi_ckb *ck = w ? mi_ckb_open(c->o->ckb, e2, sizeof e2) : NULL;
  json_t *vocab = ck ? ev_vocab(ck) : json_array(), *out = NULL;
  const char *arch = json_string_value(json_array_get(json_object_get(mcfg, "architectures"), 0));
  size_t i, k;
  json_t *v, *a;
  int own = 0;
  json_array_foreach(json_object_get(m, "architectures"), k, a) own |= arch && !strcmp(json_string_value(a), arch);
  json_array_foreach(vocab, i, v) {
    const char *ln;
    json_t *lay;
    if (own || out) break;
    json_object_foreach(json_object_get(json_object_get(v, "edit"), "add_layout"), ln, lay) {
      if (out || !ev_evidence(v, mcfg, w)) continue;
      const char *ik = mi_ckb_layout_inner_key(lay), *tk;
      json_t *tv;
      const json_t *inner = ik ? json_object_get(mcfg, ik) : NULL;
      if (!json_is_object(inner)) continue;
      out = json_deep_copy(lay);
      json_t *tmpl = json_object();
      /* only what the layout accounts for: a key it names neither a copy, nor
       * its own, nor unused stays out, and the explanation check names it */
      json_object_foreach(mcfg, tk, tv) {
        const json_t *same = json_object_get(inner, tk);
        if (!strcmp(tk, ik)) json_object_set_new(tmpl, tk, json_string("$config"));
        else if (strcmp(tk, "architectures") && same && json_equal(same, tv))
          json_object_set_new(tmpl, tk, json_sprintf("$%s", tk));
        else if (!strcmp(tk, "architectures") || json_object_get(json_object_get(lay, "config"), tk) ||
                 json_object_get(json_object_get(lay, "unused_config"), tk))
          json_object_set(tmpl, tk, tv);
      }
      json_object_set_new(out, "config", tmpl);
      json_object_set_new(out, "doc", json_sprintf("%s's layout, as %s describes it: %s", arch,
                                                   json_string_value(json_object_get(v, "id")) ?: "?",
                                                   json_string_value(json_object_get(out, "doc")) ?: ""));
      json_object_set_new(out, "x-name", json_string(ln));
    }
  }
  json_decref(vocab);
  if (ck) mi_ckb_close(ck);
  if (w) mi_weights_close(w);
  json_decref(mcfg);
  return out;
}

json_t *ev_model_entry(const ev_ctx *c, const json_t *found, const json_t *bundle, char *err, size_t n) {
  const json_t *cfg = c->model_cfg;
  char name[96];
  if (!cfg || model_name(cfg, name, sizeof name) != 0) {
    snprintf(err, n, "the checkpoint's config.json names no architecture to call the new contract by");
    return NULL;
  }
  const json_t *layer = json_object_get(bundle, "layer");
  json_t *m = layer ? ev_with_layer(json_object_get(found, "contract"), layer, cfg)
                    : json_deep_copy(json_object_get(found, "contract"));
  json_t *miss = ev_missing_kinds(m, cfg);
  if (json_array_size(miss)) {
    snprintf(err, n, "layer kind %s: no candidate bundle computes it", json_string_value(json_array_get(miss, 0)));
    json_decref(miss);
    json_decref(m);
    return NULL;
  }
  json_decref(miss);
  char id[128], notes[1024];
  snprintf(id, sizeof id, "model.%s", name);
  json_object_set_new(m, "id", json_string(id));
  json_object_set_new(m, "version", json_string("1.0.0"));
  snprintf(notes, sizeof notes, "mi-gen --evolve: %s edited by the variants the oracle picked (%s)%s%s",
           json_string_value(json_object_get(found, "base")) ?: "?", json_string_value(json_object_get(found, "name")) ?: "",
           layer ? ", plus the candidate bundle's layer kind " : "",
           layer ? json_string_value(json_object_get(layer, "layer_kind")) ?: "" : "");
  json_object_set_new(m, "provenance", json_pack("{s:s, s:o, s:s}", "source", "evolved", "refs", refs_of(c), "notes", notes));
  char summary[1024];
  snprintf(summary, sizeof summary, "%s as %s read it: %s (evolved from %s).",
           json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0)),
           "the oracle", json_string_value(json_object_get(found, "name")) ?: "",
           json_string_value(json_object_get(found, "base")) ?: "?");
  json_object_set_new(m, "summary", json_string(summary));
  json_object_set_new(m, "architectures", json_pack("[O]", json_array_get(json_object_get(cfg, "architectures"), 0)));
  /* what belonged to the base family: its reference plugin, checkpoint
   * presets and failure modes are not this model's; its GGUF names are
   * where a config class declared the family's (ev_gguf_section) */
  json_object_del(m, "reference_plugin");
  ev_gguf_section(m);
  json_object_del(m, "checkpoint");
  json_object_set_new(m, "failure_modes", json_array());
  json_t *lay = wrapper_layout(c, m);
  if (lay) { /* --model is the same model in a wrapper the vocabulary reads */
    char ln[128];
    snprintf(ln, sizeof ln, "%s", json_string_value(json_object_get(lay, "x-name")));
    json_object_del(lay, "x-name");
    json_object_set_new(m, "layouts", json_pack("{s:o}", ln, lay));
  }
  return m;
}

static json_t *experience_entry(const json_t *found, const json_t *model, const json_t *search, json_t *refs) {
  const char *mid = json_string_value(json_object_get(model, "id"));
  const char *fname = json_string_value(json_object_get(found, "name")) ?: "";
  double worst_right = 0, best_wrong = 1e300;
  json_int_t scored = 0, unexplained = 0;
  size_t i;
  json_t *r;
  json_array_foreach(search, i, r) {
    const char *v = json_string_value(json_object_get(r, "verdict")) ?: "";
    double e = json_number_value(json_object_get(r, "error"));
    if (!strcmp(v, "pass")) worst_right = e > worst_right ? e : worst_right, scored++;
    else if (!strcmp(v, "fail")) best_wrong = e < best_wrong ? e : best_wrong, scored++;
    else unexplained++;
  }
  char id[160], summary[1024], fix[1024], symptom[600];
  snprintf(id, sizeof id, "experience.evolved_%s_variants", mid + 6);
  snprintf(summary, sizeof summary, "%s reads %s's math as %s (found by the variant search).",
           json_string_value(json_array_get(json_object_get(model, "architectures"), 0)) ?: mid,
           json_string_value(json_object_get(found, "base")) ?: "?", fname);
  snprintf(symptom, sizeof symptom, "An engine of %s's contract on a %s checkpoint: logprobs off from the first step.",
           json_string_value(json_object_get(found, "base")) ?: "?", mid);
  snprintf(fix, sizeof fix, "%s is %s edited by the variants %s.", mid,
           json_string_value(json_object_get(found, "base")) ?: "?", fname);
  char *vs = json_dumps(json_object_get(found, "variants"), JSON_COMPACT);
  char cause[1024];
  snprintf(cause, sizeof cause, "The checkpoint computes with the variants %s of the vocabulary (ckb/variants/).", vs ? vs : "?");
  free(vs);
  return json_pack(
      "{s:s, s:s, s:s, s:{s:s, s:O}, s:s, s:s, s:s, s:s, s:s, s:s, s:{s:f, s:f, s:I, s:I}, s:[s, s]}", "id", id, "kind",
      "experience", "version", "1.0.0", "provenance", "source", "evolved", "refs", refs, "summary", summary, "symptom",
      symptom, "root_cause", cause, "detection",
      "Each combination of the variants whose evidence the checkpoint shows, applied to the closest contract, "
      "interpreted in float64 and teacher-forced on llama.cpp goldens of probe checkpoints: one reading within "
      "tolerance, every other far outside or unable to explain the checkpoint's fields and weights.",
      "fix", fix, "verification", "Revalidation: mi-gen from scratch with references off on the updated CKB.",
      "measured", "max_error_found", worst_right, "min_error_other", best_wrong, "candidates_scored", scored,
      "candidates_unexplained", unexplained, "related", mid, "test.stage4_end_to_end");
}

/* Writes e (adds, or updates with a grown patch version when it differs). */
static int put(const char *dir, json_t *e, json_t *written, char *err, size_t n) {
  char e2[1024];
  mi_ckb *ck = mi_ckb_open(dir, e2, sizeof e2);
  if (!ck) {
    snprintf(err, n, "%s", e2);
    return -1;
  }
  const char *id = json_string_value(json_object_get(e, "id"));
  const mi_ckb_entry *old = mi_ckb_find(ck, id);
  mi_ckb_put_mode mode = MI_CKB_ADD;
  int same = 0;
  if (old) {
    json_t *a = json_deep_copy(old->json), *b = json_deep_copy(e);
    json_object_del(a, "version");
    json_object_del(b, "version");
    same = json_equal(a, b);
    json_decref(a);
    json_decref(b);
    if (!same) { /* the next patch version */
      int M = 1, m = 0, p = 0;
      sscanf(old->version ? old->version : "1.0.0", "%d.%d.%d", &M, &m, &p);
      char ver[48];
      snprintf(ver, sizeof ver, "%d.%d.%d", M, m, p + 1);
      json_object_set_new(e, "version", json_string(ver));
      mode = MI_CKB_UPDATE;
    }
  }
  mi_ckb_close(ck);
  if (!same) {
    ev_diag_buf d = {{0}, 0};
    if (mi_ckb_put(dir, e, mode, ev_diag_first, &d) != 0) {
      snprintf(err, n, "consolidator: %s not written: %s", id, d.n ? d.text : "mi_ckb_put failed");
      return -1;
    }
  }
  json_array_append_new(written, json_pack("{s:s, s:s, s:s}", "id", id, "version",
                                           json_string_value(json_object_get(e, "version")), "action",
                                           same ? "unchanged" : mode == MI_CKB_ADD ? "added" : "updated"));
  return 0;
}

int ev_consolidate(ev_ctx *c, const json_t *found, const json_t *bundle, const json_t *search, json_t **out,
                   char *err, size_t n) {
  *out = json_array();
  char e2[1024];
  json_t *refs = refs_of(c);
  int rc = 0;
  size_t i;
  json_t *op;
  json_array_foreach(json_object_get(bundle, "operator_entries"), i, op) {
    json_t *e = json_deep_copy(op);
    json_object_set(json_object_get(e, "provenance"), "refs", refs);
    rc = put(c->o->ckb, e, *out, err, n);
    json_decref(e);
    if (rc) break;
  }
  if (rc == 0 && json_array_size(json_object_get(bundle, "operator_entries"))) {
    /* the platform contract gains the bundle's kernels and ABI minor */
    const char *plat = c->o->platform ? c->o->platform : "cpu";
    mi_ckb *k2 = mi_ckb_open(c->o->ckb, e2, sizeof e2);
    const mi_ckb_entry *pe = k2 ? mi_ckb_find_platform(k2, plat) : NULL;
    json_t *np = pe ? ev_platform_with_bundle(pe->json, bundle, plat, err, n) : NULL;
    if (k2) mi_ckb_close(k2);
    if (!np) {
      if (!pe) snprintf(err, n, "%s: no platform contract platform.%s", c->o->ckb, plat);
      rc = -1;
    } else {
      rc = put(c->o->ckb, np, *out, err, n);
      json_decref(np);
    }
  }
  json_t *m = rc == 0 ? ev_model_entry(c, found, bundle, err, n) : NULL;
  if (rc == 0 && !m) rc = -1;
  if (rc == 0) rc = put(c->o->ckb, m, *out, err, n);
  if (rc == 0) {
    json_t *x = experience_entry(found, m, search, refs);
    rc = put(c->o->ckb, x, *out, err, n);
    json_decref(x);
  }
  json_decref(m);
  json_decref(refs);
  return rc;
}
