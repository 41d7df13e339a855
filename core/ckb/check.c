/* CKB validation: load errors, unknown kinds, schema rules, ids and file
 * placement, duplicate ids, and the per-kind consistency checks a schema
 * cannot express (every name an operator's shapes, cases and generators use
 * is an argument of its signature; an operator stated as an expression has
 * a map form the generator and the verifier can read; a model's weight
 * shapes use only its config fields). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/ckb/internal.h"
#include "core/ckb/map_form.h"

/* ---------- operator contracts ---------- */

typedef struct names_ctx {
  json_t *args; /* the signature's args array */
  const char *want; /* "int": only i64/i32 args are acceptable */
  const char *file, *path;
  ckb_diag *d;
} names_ctx;

static json_t *arg_by_name(json_t *args, const char *name, size_t len) {
  size_t i;
  json_t *a;
  json_array_foreach(args, i, a) {
    const char *n = json_string_value(json_object_get(a, "name"));
    if (n && strlen(n) == len && strncmp(n, name, len) == 0) return a;
  }
  return NULL;
}

static const char *arg_kind(json_t *a) {
  const char *k = json_string_value(json_object_get(a, "kind"));
  return k ? k : "";
}

static int is_int_kind(const char *k) { return !strcmp(k, "i64") || !strcmp(k, "i32"); }
static int is_buffer_kind(const char *k) {
  return !strcmp(k, "in") || !strcmp(k, "out") || !strcmp(k, "inout");
}
static int is_scalar_kind(const char *k) {
  return is_int_kind(k) || !strcmp(k, "f32") || !strcmp(k, "f64") || !strcmp(k, "dtype");
}

static void name_is_int_arg(void *user, const char *name, size_t len) {
  names_ctx *n = user;
  json_t *a = arg_by_name(n->args, name, len);
  if (!a || !is_int_kind(arg_kind(a)))
    ckb_report(n->d, n->file, "field '%s' uses '%.*s', which is not an integer argument of the signature",
               n->path, (int)len, name);
}

/* Checks the names in an expression (string) value. */
static void expr_names(json_t *v, json_t *args, const char *file, const char *path, ckb_diag *d) {
  if (!json_is_string(v)) return;
  names_ctx n = {args, "int", file, path, d};
  char err[200];
  mi_expr_names(json_string_value(v), name_is_int_arg, &n, err, sizeof err); /* syntax: schema */
}

static void check_generator(json_t *gen, json_t *args, const char *file, const char *path,
                            ckb_diag *d) {
  const char *ends[] = {"lo", "hi"};
  for (int i = 0; i < 2; i++) {
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, ends[i]);
    json_t *v = json_object_get(gen, ends[i]);
    if (json_is_string(v)) {
      char err[200];
      if (mi_expr_names(json_string_value(v), NULL, NULL, err, sizeof err) != 0)
        ckb_report(d, file, "field '%s': %s", p, err);
      else expr_names(v, args, file, p, d);
    }
  }
  const char *dist = json_string_value(json_object_get(gen, "dist"));
  if (dist && (!strcmp(dist, "uniform") || !strcmp(dist, "int_uniform")) &&
      (!json_object_get(gen, "lo") || !json_object_get(gen, "hi")))
    ckb_report(d, file, "field '%s' (dist %s) needs 'lo' and 'hi'", path, dist);
  if (dist && !strcmp(dist, "values") && !json_object_get(gen, "values"))
    ckb_report(d, file, "field '%s' (dist values) needs 'values'", path);
}

static int dtype_name_ok(const char *s) {
  const char *ok[] = {"f32", "f16", "bf16", "i32", "i64", "u8", "q8_0", "q4_0", "q4_k", "q6_k", "q5_k",
                      "q4_1", "q5_0", "q5_1", "q2_k", "q3_k"};
  for (size_t i = 0; s && i < sizeof ok / sizeof *ok; i++)
    if (!strcmp(s, ok[i])) return 1;
  return 0;
}

static void check_case_value(json_t *a, json_t *v, json_t *args, json_t *tol, const char *file,
                             const char *path, ckb_diag *d) {
  const char *k = arg_kind(a);
  if (!strcmp(k, "dtype")) {
    json_t *one;
    size_t i;
    json_t *list = json_is_array(v) ? v : NULL;
    if (!list && !json_is_string(v)) {
      ckb_report(d, file, "field '%s' must be a dtype name or a list of them", path);
      return;
    }
    for (i = 0; list ? i < json_array_size(list) : i < 1; i++) {
      one = list ? json_array_get(list, i) : v;
      const char *s = json_string_value(one);
      if (!dtype_name_ok(s)) ckb_report(d, file, "field '%s' has unknown dtype '%s'", path, s ? s : "?");
      else if (!json_object_get(tol, s))
        ckb_report(d, file, "missing field 'tolerance.%s' (used by '%s')", s, path);
    }
  } else if (is_int_kind(k)) {
    if (json_is_integer(v)) return;
    if (json_is_string(v)) {
      char err[200];
      if (mi_expr_names(json_string_value(v), NULL, NULL, err, sizeof err) != 0)
        ckb_report(d, file, "field '%s': %s", path, err);
      else expr_names(v, args, file, path, d);
      return;
    }
    json_t *r = json_object_get(v, "range"), *m = json_object_get(v, "multiple");
    const json_int_t mul = json_is_integer(m) ? json_integer_value(m) : 1;
    if (json_is_object(v) && json_object_size(v) == 1 + (m != NULL) && json_is_array(r) &&
        json_array_size(r) == 2 && json_is_integer(json_array_get(r, 0)) &&
        json_is_integer(json_array_get(r, 1)) && mul >= 1 &&
        (json_integer_value(json_array_get(r, 0)) + mul - 1) / mul <= json_integer_value(json_array_get(r, 1)) / mul)
      return;
    ckb_report(d, file,
               "field '%s' must be an integer, an expression or {\"range\": [lo, hi]} (with \"multiple\": m, a "
               "multiple of m >= 1 in it)",
               path);
  } else if (!json_is_number(v)) {
    ckb_report(d, file, "field '%s' must be a number", path);
  }
}

/* An operator stated as an expression: "member": "pack", a "reference"
 * naming its form and the form's object come together, one form of three:
 * "map" (elementwise), "rotary" (a rotation of pairs) or "masked_attention"
 * (operator.attention over the keys from an expression on). The pack
 * generator writes its kernel from the form, the verifier's reference
 * evaluates the same form, and the form must read against the signature
 * (core/ckb/map_form.h: the one reader the generator and the reference use
 * too, so an entry that passes here is one they both accept). */
static void check_map_form(json_t *e, const char *file, ckb_diag *d) {
  static const char *const forms[] = {"map", "rotary", "masked_attention"};
  const char *member = json_string_value(json_object_get(e, "member"));
  const char *ref = json_string_value(json_object_get(e, "reference"));
  int is_pack = member && !strcmp(member, "pack"), n_forms = 0, ref_form = 0;
  const char *want = NULL;
  for (size_t k = 0; k < sizeof forms / sizeof *forms; k++) {
    if (json_object_get(e, forms[k])) n_forms++, want = forms[k];
    if (ref && !strcmp(ref, forms[k])) ref_form = 1;
  }
  if (n_forms != 1) want = NULL;
  if ((is_pack || n_forms || ref_form) && (!is_pack || !want || !ref || strcmp(ref, want))) {
    ckb_report(d, file,
               "an operator stated as an expression needs \"member\": \"pack\" and one form, 'map' with "
               "\"reference\": \"map\" or 'rotary' with \"reference\": \"rotary\" or 'masked_attention' with "
               "\"reference\": \"masked_attention\" (it has member \"%s\", reference \"%s\", %s%s%s)",
               member ? member : "?", ref ? ref : "?", n_forms > 1 ? "several forms" : want ? "a '" : "no form",
               n_forms == 1 ? want : "", n_forms == 1 ? "'" : "");
    return;
  }
  if (!want) return;
  char err[400];
  int bad;
  if (!strcmp(want, "map")) {
    mi_map_form f;
    if (!(bad = mi_map_form_parse(e, &f, err, sizeof err) != 0)) mi_map_form_free(&f);
  } else if (!strcmp(want, "rotary")) {
    mi_rotary_form f;
    if (!(bad = mi_rotary_form_parse(e, &f, err, sizeof err) != 0)) mi_rotary_form_free(&f);
  } else {
    mi_masked_attention_form f;
    if (!(bad = mi_masked_attention_form_parse(e, &f, err, sizeof err) != 0)) mi_masked_attention_form_free(&f);
  }
  if (bad) ckb_report(d, file, "field '%s': %s", want, err);
}

static void check_operator(json_t *e, const char *file, ckb_diag *d) {
  json_t *sig = json_object_get(e, "signature");
  json_t *args = json_object_get(sig, "args");
  if (!json_is_array(args)) return; /* the schema reported it */
  check_map_form(e, file, d);
  size_t i, j;
  json_t *a;
  int n_out = 0;
  json_array_foreach(args, i, a) {
    char p[256];
    const char *name = json_string_value(json_object_get(a, "name"));
    const char *k = arg_kind(a);
    for (j = 0; name && j < i; j++)
      if (!strcmp(name, json_string_value(json_object_get(json_array_get(args, j), "name")) ?: ""))
        ckb_report(d, file, "field 'signature.args[%zu].name': duplicate argument '%s'", i, name);
    if ((i == 0 && strcmp(k, "ctx")) || (i == 1 && strcmp(k, "stream")))
      ckb_report(d, file, "field 'signature.args[%zu].kind' must be \"%s\" (every kernel takes ctx, then a stream)",
                 i, i == 0 ? "ctx" : "stream");
    if (!is_buffer_kind(k)) {
      if (json_object_get(a, "dtype") || json_object_get(a, "shape"))
        ckb_report(d, file, "field 'signature.args[%zu]': only buffers have 'dtype' and 'shape'", i);
      continue;
    }
    if (strcmp(k, "in")) n_out++;
    const char *dt = json_string_value(json_object_get(a, "dtype"));
    json_t *shape = json_object_get(a, "shape");
    if (!dt) ckb_report(d, file, "missing field 'signature.args[%zu].dtype'", i);
    if (!shape) ckb_report(d, file, "missing field 'signature.args[%zu].shape'", i);
    if (dt && dt[0] == '$') {
      json_t *da = arg_by_name(args, dt + 1, strlen(dt + 1));
      if (!da || strcmp(arg_kind(da), "dtype"))
        ckb_report(d, file, "field 'signature.args[%zu].dtype' refers to '%s', which is not a dtype argument",
                   i, dt + 1);
    }
    json_t *dim;
    json_array_foreach(shape, j, dim) {
      snprintf(p, sizeof p, "signature.args[%zu].shape[%zu]", i, j);
      expr_names(dim, args, file, p, d);
    }
  }
  if (!n_out) ckb_report(d, file, "field 'signature.args' has no out or inout buffer");

  json_t *c;
  json_array_foreach(json_object_get(e, "constraints"), i, c) {
    char p[64];
    snprintf(p, sizeof p, "constraints[%zu]", i);
    expr_names(c, args, file, p, d);
  }

  /* Generators: one per input buffer, and only for input buffers. */
  json_t *inputs = json_object_get(e, "inputs");
  const char *key;
  json_t *gen;
  json_object_foreach(inputs, key, gen) {
    char p[256];
    snprintf(p, sizeof p, "inputs.%s", key);
    json_t *ia = arg_by_name(args, key, strlen(key));
    if (!ia || (strcmp(arg_kind(ia), "in") && strcmp(arg_kind(ia), "inout")))
      ckb_report(d, file, "field '%s' names no input buffer of the signature", p);
    else check_generator(gen, args, file, p, d);
  }
  json_array_foreach(args, i, a) {
    const char *k = arg_kind(a), *name = json_string_value(json_object_get(a, "name"));
    if (name && (!strcmp(k, "in") || !strcmp(k, "inout")) && json_is_object(inputs) &&
        !json_object_get(inputs, name))
      ckb_report(d, file, "missing field 'inputs.%s' (a generator for input buffer '%s')", name, name);
  }

  /* Modes (a looser contract a platform may announce): the bound's term
   * count is an expression over the signature's integers, and a mode's
   * dtypes are ones the contract has a tolerance for. */
  json_t *tol = json_object_get(e, "tolerance");
  json_t *mode;
  json_object_foreach(json_object_get(e, "modes"), key, mode) {
    char p[256];
    snprintf(p, sizeof p, "modes.%s.bound.terms", key);
    expr_names(json_object_get(json_object_get(mode, "bound"), "terms"), args, file, p, d);
    json_t *ab = json_object_get(json_object_get(mode, "bound"), "act_block");
    const char *abin = json_string_value(json_object_get(ab, "input"));
    json_t *aba = abin ? arg_by_name(args, abin, strlen(abin)) : NULL;
    if (abin && (!aba || strcmp(arg_kind(aba), "in")))
      ckb_report(d, file, "field 'modes.%s.bound.act_block.input' names '%s', which is no input buffer of the signature",
                 key, abin);
    json_t *dt;
    json_array_foreach(json_object_get(mode, "dtypes"), i, dt)
      if (json_is_string(dt) && json_is_object(tol) && !json_object_get(tol, json_string_value(dt)))
        ckb_report(d, file, "field 'modes.%s.dtypes' lists %s, which has no tolerance", key,
                   json_string_value(dt));
  }

  /* Cases: every scalar argument set, nothing else. */
  int has_dtype_arg = 0;
  json_array_foreach(args, i, a) has_dtype_arg |= !strcmp(arg_kind(a), "dtype");
  if (!has_dtype_arg && json_is_object(tol) && !json_object_get(tol, "f32"))
    ckb_report(d, file, "missing field 'tolerance.f32' (the signature has no dtype argument)");
  json_t *cs;
  json_array_foreach(json_object_get(e, "cases"), i, cs) {
    if (!json_is_object(cs)) continue;
    json_object_foreach(cs, key, gen) {
      char p[256];
      snprintf(p, sizeof p, "cases[%zu].%s", i, key);
      if (!strcmp(key, "name") || !strcmp(key, "why")) continue;
      if (!strcmp(key, "alias")) {
        const char *k2;
        json_t *v2;
        json_object_foreach(gen, k2, v2) {
          json_t *oa = arg_by_name(args, k2, strlen(k2));
          const char *in = json_string_value(v2);
          json_t *ia = in ? arg_by_name(args, in, strlen(in)) : NULL;
          if (!oa || strcmp(arg_kind(oa), "out"))
            ckb_report(d, file, "field '%s.%s' names no out buffer of the signature", p, k2);
          else if (!ia || strcmp(arg_kind(ia), "in"))
            ckb_report(d, file, "field '%s.%s' must name an in buffer of the signature", p, k2);
          else if (!json_equal(json_object_get(oa, "shape"), json_object_get(ia, "shape")) ||
                   !json_equal(json_object_get(oa, "dtype"), json_object_get(ia, "dtype")))
            ckb_report(d, file, "field '%s.%s': '%s' and '%s' differ in shape or dtype", p, k2, k2, in);
        }
        continue;
      }
      if (!strcmp(key, "inputs")) {
        const char *k2;
        json_t *g2;
        json_object_foreach(gen, k2, g2) {
          char p2[300];
          snprintf(p2, sizeof p2, "%s.%s", p, k2);
          json_t *ia = arg_by_name(args, k2, strlen(k2));
          if (!ia || (strcmp(arg_kind(ia), "in") && strcmp(arg_kind(ia), "inout")))
            ckb_report(d, file, "field '%s' names no input buffer of the signature", p2);
          else check_generator(g2, args, file, p2, d);
        }
        continue;
      }
      json_t *ca = arg_by_name(args, key, strlen(key));
      if (!ca || !is_scalar_kind(arg_kind(ca)))
        ckb_report(d, file, "field '%s' names no scalar argument of the signature", p);
      else check_case_value(ca, gen, args, tol, file, p, d);
    }
    json_array_foreach(args, j, a) {
      const char *name = json_string_value(json_object_get(a, "name"));
      if (name && is_scalar_kind(arg_kind(a)) && !json_object_get(cs, name))
        ckb_report(d, file, "missing field 'cases[%zu].%s'", i, name);
    }
  }
}

/* ---------- model contracts ---------- */

typedef struct cfg_names {
  json_t *config;
  const char *file, *path;
  ckb_diag *d;
} cfg_names;

static void name_is_config(void *user, const char *name, size_t len) {
  cfg_names *n = user;
  size_t i;
  json_t *f;
  json_array_foreach(n->config, i, f) {
    const char *fn = json_string_value(json_object_get(f, "name"));
    if (fn && strlen(fn) == len && !strncmp(fn, name, len)) return;
  }
  ckb_report(n->d, n->file, "field '%s' uses '%.*s', which is not a field of 'config'", n->path,
             (int)len, name);
}

/* Each layout wraps the model's config somewhere ("$config" in its
 * template), names the architectures it is read for, and writes extra
 * tensors only where it says they are left unread. */
static void check_layouts(json_t *e, const char *file, ckb_diag *d) {
  const char *ln;
  json_t *lay, *x;
  size_t i;
  json_object_foreach(json_object_get(e, "layouts"), ln, lay) {
    if (!mi_ckb_layout_inner_key(lay))
      ckb_report(d, file, "field 'layouts.%s.config' has no key whose value is \"$config\" (where the model's config sits)",
                 ln);
    if (!json_array_size(json_object_get(json_object_get(lay, "config"), "architectures")))
      ckb_report(d, file, "field 'layouts.%s.config.architectures' must list the architectures the layout is read for", ln);
    json_array_foreach(json_object_get(lay, "extra_weights"), i, x) {
      const char *k = json_string_value(json_object_get(x, "key"));
      if (k && !mi_ckb_layout_unused(lay, k, NULL))
        ckb_report(d, file, "field 'layouts.%s.extra_weights[%zu].key' '%s' is under none of the layout's 'unused' prefixes",
                   ln, i, k);
    }
  }
}

static void check_model(json_t *e, const char *file, ckb_diag *d) {
  json_t *config = json_object_get(e, "config");
  size_t i, j;
  json_t *w, *dim;
  const char *layers = json_string_value(json_object_get(e, "layers"));
  if (layers) {
    cfg_names n = {config, file, "layers", d};
    name_is_config(&n, layers, strlen(layers));
  }
  /* one layer of one kind (layer_sequence) or layers of several (layer_kinds), not both */
  if (!json_object_get(e, "layer_sequence") == !json_object_get(e, "layer_kinds"))
    ckb_report(d, file, "a model contract needs exactly one of 'layer_sequence' and 'layer_kinds' (it has %s)",
               json_object_get(e, "layer_sequence") ? "both" : "neither");
  json_array_foreach(json_object_get(e, "weights"), i, w) {
    const char *when = json_string_value(json_object_get(w, "when"));
    if (when) {
      char p[64];
      snprintf(p, sizeof p, "weights[%zu].when", i);
      cfg_names n = {config, file, p, d};
      name_is_config(&n, when + (when[0] == '!'), strlen(when + (when[0] == '!')));
    }
    const char *lk = json_string_value(json_object_get(w, "layer_kind"));
    if (lk && !json_object_get(json_object_get(json_object_get(e, "layer_kinds"), "kinds"), lk))
      ckb_report(d, file, "field 'weights[%zu].layer_kind' names '%s', which is not a kind of 'layer_kinds.kinds'", i,
                 lk);
    json_array_foreach(json_object_get(w, "shape"), j, dim) {
      if (!json_is_string(dim)) continue;
      char p[128];
      snprintf(p, sizeof p, "weights[%zu].shape[%zu]", i, j);
      cfg_names n = {config, file, p, d};
      char err[200];
      mi_expr_names(json_string_value(dim), name_is_config, &n, err, sizeof err);
    }
  }
  check_layouts(e, file, d);
}

void ckb_semantic_check(const mi_ckb *c, json_t *entry, const char *kind, const char *file,
                        ckb_diag *d) {
  (void)c;
  if (!strcmp(kind, "operator")) check_operator(entry, file, d);
  else if (!strcmp(kind, "model")) check_model(entry, file, d);
}

/* ---------- entries and the store ---------- */

static int validate_entry(const mi_ckb *c, json_t *e, const char *path, ckb_diag *d) {
  int before = d->count;
  json_t *kv = json_object_get(e, "kind");
  const char *kind = json_string_value(kv);
  if (!kv) {
    ckb_report(d, path, "missing field 'kind'");
    return d->count - before;
  }
  const ckb_kind *k = ckb_kind_find(c, kind);
  if (!k) {
    char known[400] = "";
    for (size_t i = 0; i < c->n_kinds; i++) {
      size_t l = strlen(known);
      snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", c->kinds[i].kind);
    }
    char shown[80];
    char *s = json_dumps(kv, JSON_ENCODE_ANY);
    snprintf(shown, sizeof shown, "%s", s ? s : "?");
    free(s);
    ckb_report(d, path, "field 'kind' is an unknown kind %s (known: %s)", shown, known);
    return d->count - before;
  }
  ckb_schema_check(c, k, e, path, d);

  /* The id decides the file: KIND.NAME lives in <dir>/NAME.json. */
  const char *id = json_string_value(json_object_get(e, "id"));
  size_t kl = strlen(kind);
  if (id && !strncmp(id, kind, kl) && id[kl] == '.') {
    char want[512];
    snprintf(want, sizeof want, "/%s/%s.json", k->dir, id + kl + 1);
    size_t pl = strlen(path), wl = strlen(want);
    if (pl < wl || strcmp(path + pl - wl, want) != 0)
      ckb_report(d, path, "field 'id': entry '%s' must be stored as %s/%s.json", id, k->dir,
                 id + kl + 1);
  }
  if (d->count == before) ckb_semantic_check(c, e, kind, path, d);
  return d->count - before;
}

int mi_ckb_validate_entry(const mi_ckb *c, json_t *entry, const char *path, mi_ckb_diag_fn diag,
                          void *user) {
  ckb_diag d = {diag, user, 0};
  if (!json_is_object(entry)) {
    ckb_report(&d, path, "an entry must be a JSON object");
    return d.count;
  }
  return validate_entry(c, entry, path, &d);
}

int mi_ckb_validate(const mi_ckb *c, mi_ckb_diag_fn diag, void *user) {
  ckb_diag d = {diag, user, 0};
  for (size_t i = 0; i < c->n_load_errors; i++) {
    d.count++;
    if (diag) diag(user, c->load_errors[i]);
    else fprintf(stderr, "%s\n", c->load_errors[i]);
  }
  for (size_t i = 0; i < c->n_entries; i++) {
    const mi_ckb_entry *e = &c->entries[i];
    validate_entry(c, e->json, e->path, &d);
    for (size_t j = 0; e->id && j < i; j++)
      if (c->entries[j].id && !strcmp(c->entries[j].id, e->id)) {
        ckb_report(&d, e->path, "field 'id': duplicate id '%s' (also in %s)", e->id,
                   c->entries[j].path);
        break;
      }
  }
  return d.count;
}
