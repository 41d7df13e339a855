/* A GGUF file as a model input: see gguf_model.h and docs/gguf.md. */
#define _GNU_SOURCE
#include "core/runtime/gguf_model.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tokenizer/tokenizer.h"
#include "core/runtime/host.h"
#include "core/runtime/mem.h"
#include "core/util/file.h"
#include "core/util/kexpr.h"
#include "mi/quant.h"
#include "mi/tensor.h"

/* A contract file is small; jansson needs ~20x its size. */
#define GGUF_CONTRACT_MAX_BYTES (4u << 20)

static int has_dir(const char *d, const char *sub) {
  char p[4096];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", d, sub);
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_models(const char *d) { return has_dir(d, "models"); }

const char *mi_gguf_ckb_dir(char *buf, size_t n) {
  const char *env = getenv("MI_CKB_DIR");
  if (env && *env) {
    snprintf(buf, n, "%s", env);
    return buf;
  }
  if (has_dir("ckb", "models") && has_dir("ckb", "schemas")) {
    snprintf(buf, n, "ckb");
    return buf;
  }
  const char *const rel[] = {"../share/metainfer/ckb", "../../ckb"};
  if (mi_exe_rel_dir(NULL, rel, 2, has_models, buf, n)) return buf;
  snprintf(buf, n,
           "no CKB folder found (tried $MI_CKB_DIR, ./ckb, <exe>/../share/metainfer/ckb, "
           "<exe>/../../ckb)");
  return NULL;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The contract under ckb_dir/models whose gguf.architecture is arch (files
 * in name order; unreadable ones are skipped: mi-ckb validate reports them). */
static json_t *find_contract(const char *ckb_dir, const char *arch, char *path_out, size_t n,
                             char *known, size_t known_len) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/models", ckb_dir);
  known[0] = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  char **names = NULL;
  size_t nn = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
    if (nn == cap) {
      cap = cap ? 2 * cap : 16;
      char **nb = realloc(names, cap * sizeof *nb);
      if (!nb) break;
      names = nb;
    }
    if (!(names[nn] = strdup(de->d_name))) break;
    nn++;
  }
  closedir(d);
  if (nn) qsort(names, nn, sizeof *names, cmp_str);
  json_t *hit = NULL;
  size_t used = 0;
  for (size_t i = 0; i < nn; i++) {
    char p[4096 + 256];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    json_t *c = hit ? NULL
                    : mi_file_load_json(p, 0, GGUF_CONTRACT_MAX_BYTES, "model contract",
                                        JSON_REJECT_DUPLICATES, NULL, 0);
    const char *a = json_string_value(json_object_get(json_object_get(c, "gguf"), "architecture"));
    if (a && !strcmp(a, arch)) {
      hit = c;
      if ((size_t)snprintf(path_out, n, "%s", p) >= n) path_out[n - 1] = 0;
    } else {
      if (a && used + strlen(a) + 3 < known_len)
        used += (size_t)snprintf(known + used, known_len - used, "%s%s", used ? ", " : "", a);
      json_decref(c);
    }
    free(names[i]);
  }
  free(names);
  return hit;
}

/* key with "{arch}" replaced by arch. */
static int expand_key(const char *pat, const char *arch, char *out, size_t n) {
  const char *at = strstr(pat, "{arch}");
  int k = at ? snprintf(out, n, "%.*s%s%s", (int)(at - pat), pat, arch, at + 6)
             : snprintf(out, n, "%s", pat);
  return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* The contract's config entry named name (its "type", "required"). */
static json_t *contract_field(json_t *contract, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(contract, "config"), i, e) {
    const char *nm = json_string_value(json_object_get(e, "name"));
    if (nm && !strcmp(nm, name)) return e;
  }
  return NULL;
}

/* The shortest decimal that reads back as the same float: an f32 1e-6
 * becomes the double 1e-6, as config.json writes it, not 9.99999997e-07. */
static double f32_as_decimal(double v) {
  char b[64];
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(b, sizeof b, "%.*g", prec, v);
    if ((float)strtod(b, NULL) == (float)v) return strtod(b, NULL);
  }
  return v;
}

/* A float key's value as JSON (an f32 as its shortest decimal); NaN and the
 * infinities, which JSON cannot hold, are refused by name. */
static json_t *real_value(const mi_gguf_kv *kv, double d, const char *field, const char *key, const char *path,
                          char *err, size_t el) {
  json_t *j = isfinite(d) ? json_real(kv->type == MI_GGUF_F32 ? f32_as_decimal(d) : d) : NULL;
  if (!j) mi_path_err(err, el, path, "GGUF key '%s' (for %s) is %g, not a finite number", key, field, d);
  return j;
}

/* A JSON value for one metadata value, typed as the contract's field says. */
static json_t *kv_to_json(const mi_gguf_kv *kv, const char *type, const char *field,
                          const char *key, const char *path, char *err, size_t el) {
  int64_t i;
  double d;
  if (kv->type == MI_GGUF_ARRAY) {
    mi_path_err(err, el, path, "GGUF key '%s' (for %s) is an array", key, field);
    return NULL;
  }
  if (type && !strcmp(type, "boolean")) {
    if (kv->type == MI_GGUF_BOOL) return json_boolean(kv->p[0]);
  } else if (type && !strcmp(type, "integer")) {
    if (kv->type != MI_GGUF_BOOL && kv->type != MI_GGUF_F32 && kv->type != MI_GGUF_F64 &&
        mi_gguf_kv_int(kv, &i) == 0)
      return json_integer(i);
    /* a whole number stored as a float (llama.cpp's rope.freq_base_swa) */
    if ((kv->type == MI_GGUF_F32 || kv->type == MI_GGUF_F64) && mi_gguf_kv_real(kv, &d) == 0 && fabs(d) < 9e15 &&
        d == floor(d))
      return json_integer((json_int_t)d);
  } else if (type && !strcmp(type, "number")) {
    if (kv->type != MI_GGUF_BOOL && mi_gguf_kv_real(kv, &d) == 0) return real_value(kv, d, field, key, path, err, el);
  } else if (type && !strcmp(type, "string")) {
    size_t n;
    const char *s = mi_gguf_kv_str(kv, &n);
    json_t *j = s ? json_stringn(s, n) : NULL;
    if (j) return j;
  } else { /* the contract does not type it: as stored */
    if (kv->type == MI_GGUF_BOOL) return json_boolean(kv->p[0]);
    if (kv->type == MI_GGUF_F32 || kv->type == MI_GGUF_F64) {
      mi_gguf_kv_real(kv, &d);
      return real_value(kv, d, field, key, path, err, el);
    }
    if (mi_gguf_kv_int(kv, &i) == 0) return json_integer(i);
    size_t n;
    const char *s = mi_gguf_kv_str(kv, &n);
    json_t *j = s ? json_stringn(s, n) : NULL;
    if (j) return j;
  }
  mi_path_err(err, el, path, "GGUF key '%s' (for %s) is a %s, not a%s %s", key, field,
              mi_gguf_vtype_name(kv->type), type && type[0] == 'i' ? "n" : "",
              type ? type : "scalar");
  return NULL;
}

/* Sets the config field (at its contract "path", "rope_scaling.factor",
 * when it has one: objects made on the way). 0, or -1 when the path runs
 * into a value that is not an object. */
static int set_field(json_t *cfg, json_t *cf, const char *field, json_t *v) {
  const char *path = json_string_value(json_object_get(cf, "path"));
  if (!path) return json_object_set_new(cfg, field, v) ? -1 : 0;
  json_t *at = cfg;
  for (const char *dot; (dot = strchr(path, '.')); path = dot + 1) {
    char part[128];
    snprintf(part, sizeof part, "%.*s", (int)(dot - path < 127 ? dot - path : 127), path);
    json_t *next = json_object_get(at, part);
    if (!next) json_object_set_new(at, part, next = json_object());
    if (!json_is_object(next)) {
      json_decref(v);
      return -1;
    }
    at = next;
  }
  return json_object_set_new(at, path, v) ? -1 : 0;
}

/* The GGUF key pattern an expression's "keys" entry binds: {NAME: KEY} or
 * {NAME: {"key": KEY, "default": NUMBER}}; NULL for neither. */
static const char *bound_key(const json_t *kb) {
  return json_is_string(kb) ? json_string_value(kb) : json_string_value(json_object_get(kb, "key"));
}

/* A gguf.config expression's names bound (v[k] for name k): a name its
 * "keys" binds, the number that GGUF key holds; else the config field the
 * file gave, else its contract default; a boolean as 0/1. NULL, or the
 * first name that is none of these (*absent: a key it binds is missing). */
static const char *expr_bind(const mi_kexpr *x, const mi_gguf *g, json_t *keys, const char *arch, json_t *contract,
                             json_t *cfg, double v[16], int *absent) {
  *absent = 0;
  for (int k = 0; k < mi_kexpr_n_names(x); k++) {
    const char *nm = mi_kexpr_name(x, k);
    const json_t *kb = json_object_get(keys, nm), *dflt = json_object_get(kb, "default"); /* where the file has no such key */
    const char *kp = bound_key(kb);
    char key[512];
    if (kp) {
      const mi_gguf_kv *kv = g && expand_key(kp, arch, key, sizeof key) == 0 ? mi_gguf_get(g, key) : NULL;
      if (!kv && json_is_number(dflt)) {
        v[k] = json_number_value(dflt);
        continue;
      }
      if (!kv) *absent = 1;
      if (!kv || kv->type == MI_GGUF_ARRAY || kv->type == MI_GGUF_STRING || mi_gguf_kv_real(kv, &v[k]) != 0)
        return nm;
      continue;
    }
    const json_t *j = json_object_get(cfg, nm);
    if (!j) j = json_object_get(contract_field(contract, nm), "default");
    if (json_is_number(j)) v[k] = json_number_value(j);
    else if (json_is_boolean(j)) v[k] = json_is_true(j);
    else return nm;
  }
  return NULL;
}

/* {"array": KEY, "values": {ELEMENT: VALUE}}: a per-layer array the file
 * states as numbers (llama.cpp's attention.recurrent_layers, 0/1) as the
 * config's array of what each number means ("linear_attention"); without
 * "values", the elements as stored. NULL + err, *skip when the key is absent
 * and the field not required. */
static json_t *array_value(const mi_gguf *g, json_t *spec, json_t *cf, json_t *cfg, const char *field, const char *arch,
                           int *skip, char *err, size_t el) {
  const char *path = mi_gguf_path(g);
  char key[512];
  if (expand_key(json_string_value(json_object_get(spec, "array")), arch, key, sizeof key)) {
    mi_path_err(err, el, path, "the contract's key for %s is too long", field);
    return NULL;
  }
  const mi_gguf_kv *kv = mi_gguf_get(g, key);
  if (!kv) {
    if (json_is_true(json_object_get(cf, "required"))) mi_path_err(err, el, path, "GGUF key '%s' (for %s) is missing", key, field);
    else *skip = 1;
    return NULL;
  }
  if (kv->type != MI_GGUF_ARRAY || kv->n > (1u << 20)) {
    mi_path_err(err, el, path, "GGUF key '%s' (for %s) is not an array (of at most 2^20 elements)", key, field);
    return NULL;
  }
  /* "length": the first elements only (llama.cpp lists its appended
   * multi-token-prediction layers in the same array) */
  uint64_t n = kv->n;
  const json_t *len = json_object_get(spec, "length");
  if (len) {
    const json_t *lv = json_is_string(len) ? json_object_get(cfg, json_string_value(len)) : len;
    if (!json_is_integer(lv) || json_integer_value(lv) < 0 || (uint64_t)json_integer_value(lv) > kv->n) {
      mi_path_err(err, el, path, "GGUF key '%s' (for %s) has %llu elements, fewer than its length %s", key, field,
                  (unsigned long long)kv->n, json_is_string(len) ? json_string_value(len) : "(not a whole number)");
      return NULL;
    }
    n = (uint64_t)json_integer_value(lv);
  }
  json_t *values = json_object_get(spec, "values"), *out = json_array();
  for (uint64_t i = 0; out && i < n; i++) {
    int64_t iv;
    const char *s;
    size_t sl;
    char name[64];
    json_t *e = NULL;
    if (mi_gguf_arr_int(kv, i, &iv) == 0) {
      snprintf(name, sizeof name, "%lld", (long long)iv);
      e = values ? json_deep_copy(json_object_get(values, name)) : json_integer((json_int_t)iv);
    } else if (mi_gguf_arr_str(kv, i, &s, &sl) == 0 && sl < sizeof name && !memchr(s, 0, sl)) {
      snprintf(name, sizeof name, "%.*s", (int)sl, s);
      e = values ? json_deep_copy(json_object_get(values, name)) : json_stringn(s, sl);
    } else {
      snprintf(name, sizeof name, "(a %s)", mi_gguf_vtype_name(kv->arr_type));
    }
    if (!e) {
      mi_path_err(err, el, path, "GGUF key '%s' (for %s): element %llu is %s, which the contract gives no meaning", key,
                  field, (unsigned long long)i, name);
      json_decref(out);
      return NULL;
    }
    json_array_append_new(out, e);
  }
  return out;
}

/* The value one gguf.config entry gives field, or NULL with *skip set (the
 * file states nothing: the contract's default) or err set. */
static json_t *config_value(const mi_gguf *g, json_t *contract, json_t *cfg, const char *field,
                            json_t *spec, const char *arch, int *skip, char *err, size_t el) {
  const char *path = mi_gguf_path(g);
  json_t *cf = contract_field(contract, field);
  const char *type = json_string_value(json_object_get(cf, "type"));
  char key[512];
  *skip = 0;
  if (json_is_string(spec)) {
    if (expand_key(json_string_value(spec), arch, key, sizeof key)) {
      mi_path_err(err, el, path, "the contract's key for %s is too long", field);
      return NULL;
    }
    const mi_gguf_kv *kv = mi_gguf_get(g, key);
    if (!kv) {
      if (json_is_true(json_object_get(cf, "required")) && !json_object_get(cf, "when_present")) {
        mi_path_err(err, el, path, "GGUF key '%s' (for %s) is missing", key, field);
        return NULL;
      }
      *skip = 1; /* the model's default */
      return NULL;
    }
    return kv_to_json(kv, type, field, key, path, err, el);
  }
  const char *al = json_string_value(json_object_get(spec, "array_length"));
  if (al) {
    if (expand_key(al, arch, key, sizeof key)) {
      mi_path_err(err, el, path, "the contract's key for %s is too long", field);
      return NULL;
    }
    const mi_gguf_kv *kv = mi_gguf_get(g, key);
    if (!kv || kv->type != MI_GGUF_ARRAY) {
      mi_path_err(err, el, path, "GGUF key '%s' (for %s) is %s", key, field, kv ? "not an array" : "missing");
      return NULL;
    }
    return json_integer((json_int_t)kv->n);
  }
  const char *ta = json_string_value(json_object_get(spec, "tensor_absent"));
  if (ta) return json_boolean(!mi_gguf_tensor_find(g, ta));
  if (json_is_string(json_object_get(spec, "array"))) return array_value(g, spec, cf, cfg, field, arch, skip, err, el);
  /* {"value": JSON}: what the architecture's graph always computes with
   * (a hybrid architecture that always gates its attention output: no key says so) */
  if (json_object_get(spec, "value") && json_object_size(spec) == 1) return json_deep_copy(json_object_get(spec, "value"));
  const char *ex = json_string_value(json_object_get(spec, "expr"));
  if (ex) { /* what llama.cpp computes from other fields (no key states it) */
    char why[256];
    double v[16];
    mi_kexpr *x = mi_kexpr_parse(ex, why, sizeof why);
    if (!x) {
      mi_path_err(err, el, path, "the model contract's gguf.config.%s: %s", field, why);
      return NULL;
    }
    char missing[64] = "";
    int absent = 0;
    json_t *keys = json_object_get(spec, "keys");
    const char *nm =
        mi_kexpr_n_names(x) > 16 ? "(more than 16 names)" : expr_bind(x, g, keys, arch, contract, cfg, v, &absent);
    if (nm) snprintf(missing, sizeof missing, "%s", nm);
    const double r = nm ? 0 : mi_kexpr_eval(x, v);
    mi_kexpr_free(x);
    if (absent && !json_is_true(json_object_get(cf, "required"))) {
      *skip = 1; /* a key it reads is not in the file: the contract's default */
      return NULL;
    }
    if (missing[0]) {
      const char *kp = bound_key(json_object_get(keys, missing));
      char key[512] = "";
      if (kp && expand_key(kp, arch, key, sizeof key)) key[0] = 0;
      mi_path_err(err, el, path, "%s is computed from %s%s%s%s, which the file does not give as a number", field, missing,
                  kp ? " (GGUF key '" : "", kp ? key : "", kp ? "')" : "");
      return NULL;
    }
    if (type && !strcmp(type, "integer")) {
      if (!(fabs(r) < 9e15) || r != floor(r)) {
        mi_path_err(err, el, path, "%s is computed as %g, not a whole number", field, r);
        return NULL;
      }
      return json_integer((json_int_t)r);
    }
    if (!isfinite(r)) {
      mi_path_err(err, el, path, "%s is computed as %g", field, r);
      return NULL;
    }
    return json_real(r);
  }
  mi_path_err(err, el, path,
              "the model contract's gguf.config.%s is not a key, {\"array_length\": KEY}, "
              "{\"array\": KEY}, {\"tensor_absent\": NAME}, {\"value\": JSON} or {\"expr\": EXPR}",
              field);
  return NULL;
}

/* The config.json the file's metadata states: each gguf.config field from
 * its key, array or tensor, then (pass 1) those computed from them, then
 * (pass 2) arrays cut to a length such a field gives. */
static json_t *build_config(const mi_gguf *g, json_t *contract, const char *arch, char *err,
                            size_t el) {
  const char *path = mi_gguf_path(g);
  json_t *map = json_object_get(json_object_get(contract, "gguf"), "config");
  json_t *cfg = json_object();
  const char *a0 = json_string_value(json_array_get(json_object_get(contract, "architectures"), 0));
  if (!cfg || !a0) {
    mi_path_err(err, el, path, "the model contract names no architectures");
    json_decref(cfg);
    return NULL;
  }
  json_object_set_new(cfg, "architectures", json_pack("[s]", a0));
  for (int pass = 0; pass < 3; pass++) {
    const char *field;
    json_t *spec;
    json_object_foreach(map, field, spec) {
      const int at = json_object_get(spec, "expr") ? 1 : json_object_get(spec, "length") ? 2 : 0;
      if (at != pass) continue;
      int skip;
      json_t *v = config_value(g, contract, cfg, field, spec, arch, &skip, err, el);
      if (skip) continue;
      if (!v) goto fail;
      if (set_field(cfg, contract_field(contract, field), field, v)) {
        mi_path_err(err, el, path, "the model contract's path for %s crosses a value that is not an object", field);
        goto fail;
      }
    }
  }
  return cfg;
fail:
  json_decref(cfg);
  return NULL;
}

/* ---- the tokenizer -------------------------------------------------------- */

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int tok_id(const mi_gguf *g, const char *key, uint64_t n_tokens, int32_t *out, char *err,
                  size_t el) {
  *out = -1;
  const mi_gguf_kv *kv = mi_gguf_get(g, key);
  if (!kv) return 0;
  int64_t v;
  if (kv->type == MI_GGUF_BOOL || mi_gguf_kv_int(kv, &v) != 0 || v < 0 || (uint64_t)v >= n_tokens) {
    mi_path_err(err, el, mi_gguf_path(g), "%s is not a token id below %llu", key,
                (unsigned long long)n_tokens);
    return -1;
  }
  *out = (int32_t)v;
  return 0;
}

/* The GGUF arrays as the tokenizer reads them (mi_tok_arrays): a token's
 * ggml type gives its kind. */
typedef struct gguf_tok_src {
  const mi_gguf_kv *toks, *types, *merges, *scores;
} gguf_tok_src;

static int gguf_token(const void *ctx, size_t i, const char **s, size_t *n) {
  const gguf_tok_src *src = ctx;
  int64_t tt = TT_NORMAL;
  if (src->types) mi_gguf_arr_int(src->types, i, &tt);
  mi_gguf_arr_str(src->toks, i, s, n);
  switch (tt) {
  case TT_UNUSED: return MI_TOK_KIND_SKIP; /* padding rows ([PAD151669] ...) */
  case TT_CONTROL:
  case TT_UNKNOWN: return MI_TOK_KIND_SPECIAL; /* matched in a text as llama.cpp does */
  case TT_USER: return MI_TOK_KIND_ADDED;
  default: return MI_TOK_KIND_NORMAL;
  }
}

static void gguf_merge(const void *ctx, size_t i, const char **s, size_t *n) {
  mi_gguf_arr_str(((const gguf_tok_src *)ctx)->merges, i, s, n);
}

static float gguf_score(const void *ctx, size_t i) {
  double v = 0;
  mi_gguf_arr_real(((const gguf_tok_src *)ctx)->scores, i, &v);
  return (float)v;
}

/* The contract's entry for the file's tokenizer.ggml.pre, or NULL (also
 * for a name with a NUL or of 128 bytes or more, which no entry has). */
static json_t *pre_entry(const mi_gguf *g, json_t *spec) {
  size_t n;
  const char *s = mi_gguf_kv_str(mi_gguf_get(g, "tokenizer.ggml.pre"), &n);
  char pre[128];
  if (!s || n >= sizeof pre || memchr(s, 0, n)) return NULL;
  snprintf(pre, sizeof pre, "%.*s", (int)n, s);
  return json_object_get(json_object_get(spec, "pre"), pre);
}

/* The contract's pre-tokenizer for tokenizer.ggml.pre: its regex, and the
 * normalizer the Hugging Face tokenizer of that kind runs (an entry
 * {"regex", "normalizer"}: its own, none when it says none; a string: the
 * regex, with the section's normalizer). NULL with err naming the ones it
 * knows. */
static const char *pre_regex(const mi_gguf *g, json_t *spec, int *nfc, char *err, size_t el) {
  size_t n;
  const char *s = mi_gguf_kv_str(mi_gguf_get(g, "tokenizer.ggml.pre"), &n);
  if (!s) {
    mi_path_err(err, el, mi_gguf_path(g),
                "tokenizer.ggml.pre is missing (which pre-tokenizer is unknown)");
    return NULL;
  }
  char pre[128]; /* for messages */
  snprintf(pre, sizeof pre, "%.*s", (int)(n < 127 ? n : 127), s);
  json_t *entry = pre_entry(g, spec);
  const char *regex = json_is_object(entry) ? json_string_value(json_object_get(entry, "regex")) : json_string_value(entry);
  if (regex) {
    json_t *nv = json_is_object(entry) ? json_object_get(entry, "normalizer") : json_object_get(spec, "normalizer");
    const char *nn = json_string_value(nv);
    if (nv && !json_is_null(nv) && (!nn || (strcmp(nn, "NFC") && strcmp(nn, "none")))) {
      mi_path_err(err, el, mi_gguf_path(g), "the model contract's normalizer for pre-tokenizer '%s' is not \"NFC\" or \"none\"", pre);
      return NULL;
    }
    *nfc = nn && !strcmp(nn, "NFC");
    return regex;
  }
  char known[256] = "";
  size_t used = 0;
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(spec, "pre"), k, v) if (used + strlen(k) + 3 < sizeof known)
      used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", k);
  mi_path_err(err, el, mi_gguf_path(g),
              "tokenizer.ggml.pre '%s' is not one the model contract knows (%s)", pre, known);
  return NULL;
}

/* A byte-level BPE (tokenizer.ggml.model the contract's "model"): the
 * merges, and the pre-tokenizer the contract knows for tokenizer.ggml.pre. */
static int bpe_arrays(const mi_gguf *g, json_t *spec, const gguf_tok_src *src, mi_tok_arrays *a, char *err,
                      size_t el) {
  if (!src->merges || src->merges->type != MI_GGUF_ARRAY || src->merges->arr_type != MI_GGUF_STRING) {
    mi_path_err(err, el, mi_gguf_path(g), "tokenizer.ggml.merges is missing or not an array of strings");
    return -1;
  }
  if (!(a->split_regex = pre_regex(g, spec, &a->nfc, err, el))) return -1;
  a->n_merges = (size_t)src->merges->n;
  return 0;
}

/* A SentencePiece vocabulary (tokenizer.ggml.model the contract's
 * "sentencepiece"), as llama.cpp reads one: the scores stand for the
 * merges, ' ' is put first unless tokenizer.ggml.add_space_prefix is false,
 * the unknown token is tokenizer.ggml.unknown_token_id or the token typed
 * unknown; tokenizer.ggml.pre and merges, if present, are not used. */
static int sentencepiece_arrays(const mi_gguf *g, const gguf_tok_src *src, mi_tok_arrays *a, char *err, size_t el) {
  const char *path = mi_gguf_path(g);
  double v;
  if (!src->scores || src->scores->type != MI_GGUF_ARRAY || src->scores->n != src->toks->n ||
      mi_gguf_arr_real(src->scores, 0, &v) != 0) {
    mi_path_err(err, el, path, "tokenizer.ggml.scores is missing or not a float array as long as tokenizer.ggml.tokens "
                               "(a SentencePiece vocabulary needs its scores)");
    return -1;
  }
  const mi_gguf_kv *sp = mi_gguf_get(g, "tokenizer.ggml.add_space_prefix");
  int64_t flag = 1;
  if (sp && (sp->type != MI_GGUF_BOOL || mi_gguf_kv_int(sp, &flag) != 0)) {
    mi_path_err(err, el, path, "tokenizer.ggml.add_space_prefix is not a bool");
    return -1;
  }
  int32_t unk = -1;
  if (tok_id(g, "tokenizer.ggml.unknown_token_id", src->toks->n, &unk, err, el)) return -1;
  for (uint64_t i = 0; unk < 0 && src->types && i < src->types->n; i++) {
    int64_t tt;
    if (mi_gguf_arr_int(src->types, i, &tt) == 0 && tt == TT_UNKNOWN) unk = (int32_t)i;
  }
  a->sentencepiece = 1;
  a->score = gguf_score;
  a->space_prefix = flag != 0;
  a->unk_id = unk;
  a->merge = NULL;
  return 0;
}

/* The tokenizer, built straight from the file's arrays (the tokenizer.json
 * they stand for is never made: see mi_tok_arrays), and the special ids and
 * chat template into m. */
static mi_tokenizer *build_tokenizer(const mi_gguf *g, json_t *spec, mi_gguf_model *m, char *err,
                                     size_t el) {
  const char *path = mi_gguf_path(g);
  size_t n;
  const char *s;
  mi_tokenizer *tok = NULL;
#define TFAIL(...)                                                                                 \
  do {                                                                                             \
    mi_path_err(err, el, path, __VA_ARGS__);                                                       \
    goto fail;                                                                                     \
  } while (0)
  if (!spec) TFAIL("the model contract says nothing of the tokenizer (gguf.tokenizer)");
  const char *want = json_string_value(json_object_get(spec, "model")),
             *spm = json_string_value(json_object_get(spec, "sentencepiece"));
  s = mi_gguf_kv_str(mi_gguf_get(g, "tokenizer.ggml.model"), &n);
  if (!s) TFAIL("tokenizer.ggml.model is missing (the file holds no tokenizer)");
  int is_spm = spm && strlen(spm) == n && !memcmp(s, spm, n);
  if (!is_spm && (!want || strlen(want) != n || memcmp(s, want, n)))
    TFAIL("tokenizer.ggml.model '%.*s' is not supported (the contract reads '%s'%s%s%s)", (int)(n < 60 ? n : 60), s,
          want ? want : "?", spm ? " and SentencePiece's '" : "", spm ? spm : "", spm ? "'" : "");
  gguf_tok_src src = {mi_gguf_get(g, "tokenizer.ggml.tokens"), mi_gguf_get(g, "tokenizer.ggml.token_type"),
                      mi_gguf_get(g, "tokenizer.ggml.merges"), mi_gguf_get(g, "tokenizer.ggml.scores")};
  if (!src.toks || src.toks->type != MI_GGUF_ARRAY || src.toks->arr_type != MI_GGUF_STRING)
    TFAIL("tokenizer.ggml.tokens is missing or not an array of strings");
  if (src.types && (src.types->type != MI_GGUF_ARRAY || src.types->n != src.toks->n ||
                    src.types->arr_type == MI_GGUF_STRING || src.types->arr_type == MI_GGUF_F32 ||
                    src.types->arr_type == MI_GGUF_F64))
    TFAIL("tokenizer.ggml.token_type is not an integer array as long as tokenizer.ggml.tokens");
  mi_tok_arrays arrays = {
      .n_tokens = (size_t)src.toks->n,
      .token = gguf_token,
      .merge = gguf_merge,
      .ctx = &src,
      .tokens_name = "tokenizer.ggml.tokens",
      .merges_name = "tokenizer.ggml.merges",
  };
  if ((is_spm ? sentencepiece_arrays(g, &src, &arrays, err, el) : bpe_arrays(g, spec, &src, &arrays, err, el)))
    goto fail;
  if (!(tok = mi_tokenizer_load_arrays(&arrays, path, err, el))) goto fail;
  if (tok_id(g, "tokenizer.ggml.bos_token_id", src.toks->n, &m->bos, err, el) ||
      tok_id(g, "tokenizer.ggml.eos_token_id", src.toks->n, &m->eos, err, el) ||
      tok_id(g, "tokenizer.ggml.padding_token_id", src.toks->n, &m->pad, err, el))
    goto fail;
  /* what HF's tokenizer(text) adds, as the file states it (llama.cpp's
   * converter writes the tokenizer.json post-processor's BOS as this) */
  const mi_gguf_kv *ab = mi_gguf_get(g, "tokenizer.ggml.add_bos_token"),
                   *ae = mi_gguf_get(g, "tokenizer.ggml.add_eos_token");
  int64_t flag = 0;
  if ((ab && ab->type != MI_GGUF_BOOL) || (ae && ae->type != MI_GGUF_BOOL))
    TFAIL("tokenizer.ggml.add_%s_token is not a bool", ab && ab->type != MI_GGUF_BOOL ? "bos" : "eos");
  if (ae && mi_gguf_kv_int(ae, &flag) == 0 && flag)
    TFAIL("tokenizer.ggml.add_eos_token is true: a token after every prompt is not supported");
  /* without the key, llama.cpp adds the BOS of a SentencePiece vocabulary,
   * and of the byte-level pre-tokenizers the contract marks (llama-bpe) */
  const int bos_default = is_spm || json_is_true(json_object_get(pre_entry(g, spec), "add_bos"));
  if (ab ? mi_gguf_kv_int(ab, &flag) == 0 && flag : bos_default && m->bos >= 0) {
    if (m->bos < 0) TFAIL("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
    if (mi_tokenizer_set_prefix(tok, m->bos, path, err, el)) goto fail;
  }
  const mi_gguf_kv *ct = mi_gguf_get(g, "tokenizer.chat_template");
  if (ct) {
    s = mi_gguf_kv_str(ct, &n);
    if (!s || memchr(s, 0, n)) TFAIL("tokenizer.chat_template is not a string without NULs");
    if (!(m->chat_template = strndup(s, n))) TFAIL("out of memory");
  }
  return tok;
fail:
#undef TFAIL
  mi_tokenizer_free(tok);
  return NULL;
}

mi_tokenizer *mi_gguf_tokenizer(const mi_gguf *g, json_t *spec, char *err, size_t el) {
  mi_gguf_model m = {.bos = -1, .eos = -1, .pad = -1};
  mi_tokenizer *tok = build_tokenizer(g, spec, &m, err, el);
  if (tok && mi_tokenizer_set_config(tok, m.eos, m.bos, m.pad, m.chat_template, mi_gguf_path(g), err, el)) {
    mi_tokenizer_free(tok);
    tok = NULL;
  }
  free(m.chat_template);
  return tok;
}

/* ---- open ------------------------------------------------------------------ */

void mi_gguf_model_close(mi_gguf_model *m) {
  if (!m) return;
  mi_gguf_close(m->g);
  free(m->contract_path);
  json_decref(m->contract);
  json_decref(m->config);
  mi_tokenizer_free(m->tok);
  free(m->chat_template);
  free(m);
}

/* Is key one the section names? values: gguf.config, whose entries name
 * their keys as a string or inside a form ({"array": KEY}, {"array_length":
 * KEY}, an expression's {"keys": {NAME: KEY}}); else the object's names
 * (gguf.inert, gguf.checks), as "{arch}.KEY". */
static int names_key_str(const char *pat, const char *arch, const char *key) {
  char full[512];
  return pat && expand_key(pat, arch, full, sizeof full) == 0 && !strcmp(full, key);
}

static int names_key(const json_t *pat, const char *arch, const char *key) {
  return names_key_str(json_string_value(pat), arch, key);
}

static int section_names(json_t *obj, int values, const char *arch, const char *key) {
  const char *k, *kk;
  json_t *v, *kv;
  json_object_foreach(obj, k, v) {
    if (!values) {
      if (names_key_str(k, arch, key)) return 1;
      continue;
    }
    if (names_key(v, arch, key) || names_key(json_object_get(v, "array"), arch, key) ||
        names_key(json_object_get(v, "array_length"), arch, key))
      return 1;
    json_object_foreach(json_object_get(v, "keys"), kk, kv) if (names_key_str(bound_key(kv), arch, key)) return 1;
  }
  return 0;
}

/* Every "{arch}." key of the file is read or inert: a key the contract does
 * not know (rope scaling, a sliding window, a soft-cap) changes the math,
 * and running without it would be a silent wrong answer. 0, or -1 + err. */
static int unread_keys(const mi_gguf *g, json_t *sec, const char *arch, const char *contract_path, char *err,
                       size_t el) {
  size_t al = strlen(arch);
  for (size_t i = 0; i < mi_gguf_kv_count(g); i++) {
    const mi_gguf_kv *kv = mi_gguf_kv_at(g, i);
    if (!kv || strncmp(kv->key, arch, al) || kv->key[al] != '.') continue;
    if (section_names(json_object_get(sec, "config"), 1, arch, kv->key) ||
        section_names(json_object_get(sec, "inert"), 0, arch, kv->key) ||
        section_names(json_object_get(sec, "checks"), 0, arch, kv->key))
      continue;
    mi_path_err(err, el, mi_gguf_path(g),
                "GGUF key '%s' is not read by %s (its gguf section neither maps it to a config field nor names it "
                "inert): the model it describes is not the one the contract computes",
                kv->key, contract_path);
    return -1;
  }
  return 0;
}

/* gguf.checks: a key that must equal a config field the file gives
 * otherwise ("{arch}.rope.dimension_count": "head_dim": llama.cpp's n_rot,
 * the rotated width, which this contract takes as the whole head). Where
 * the config has no such field (the file left it to the default), the key
 * is its value, and the weights' shapes then hold it. 0, or -1 + err. */
static int check_keys(const mi_gguf *g, json_t *sec, const char *arch, json_t *cfg, const char *contract_path,
                      char *err, size_t el) {
  const char *pat;
  json_t *field;
  json_object_foreach(json_object_get(sec, "checks"), pat, field) {
    char key[512];
    const char *f = json_string_value(field);
    if (!f || expand_key(pat, arch, key, sizeof key)) continue;
    const mi_gguf_kv *kv = mi_gguf_get(g, key);
    int64_t v;
    if (!kv) continue;
    if (mi_gguf_kv_int(kv, &v) != 0) {
      mi_path_err(err, el, mi_gguf_path(g), "GGUF key '%s' is not an integer", key);
      return -1;
    }
    json_t *have = json_object_get(cfg, f);
    if (!have) {
      json_object_set_new(cfg, f, json_integer((json_int_t)v));
    } else if (!json_is_integer(have) || json_integer_value(have) != v) {
      mi_path_err(err, el, mi_gguf_path(g),
                  "GGUF key '%s' = %lld but %s = %lld: %s computes only models where they are equal", key,
                  (long long)v, f, (long long)json_integer_value(have), contract_path);
      return -1;
    }
  }
  return 0;
}

/* ---- config fields a tensor states (gguf.derive) ---------------------------- */

/* The expression's names bound for one setting (kexpr reads at most 16): a
 * member of the setting, else a number of the config; "i", the element,
 * is left to the caller (*i_at, -1 when the expression does not read it).
 * -1 + err when a name is neither. */
static int derive_bind(const mi_kexpr *x, const json_t *setting, const json_t *cfg, double v[16], int *i_at,
                       const char *tname, const char *path, char *err, size_t el) {
  *i_at = -1;
  for (int k = 0; k < mi_kexpr_n_names(x); k++) {
    const char *nm = mi_kexpr_name(x, k);
    const json_t *j = json_object_get(setting, nm);
    if (!j) j = json_object_get(cfg, nm);
    if (!strcmp(nm, "i")) *i_at = k;
    else if (json_is_number(j)) v[k] = json_number_value(j);
    else {
      mi_path_err(err, el, path,
                  "the model contract's gguf.derive for '%s' reads '%s', which neither its setting nor the config gives as a number",
                  tname, nm);
      return -1;
    }
  }
  return 0;
}

/* How far a setting's values are from the F32 vector t[n] (max relative
 * difference; HUGE_VAL when one is not finite), or -1 + err. */
static double derive_distance(const mi_kexpr *x, const json_t *setting, const json_t *cfg, const mi_gguf_tensor *t,
                              int64_t n, const char *path, char *err, size_t el) {
  double v[16], worst = 0;
  int i_at;
  if (derive_bind(x, setting, cfg, v, &i_at, t->name, path, err, el)) return -1;
  for (int64_t i = 0; i < n; i++) {
    if (i_at >= 0) v[i_at] = (double)i;
    const double want = mi_kexpr_eval(x, v), have = mi_float_value(MI_DTYPE_F32, t->data, (size_t)i);
    const double d = fabs(have - want) / fmax(1.0, fabs(want));
    if (!isfinite(d)) return HUGE_VAL;
    worst = fmax(worst, d);
  }
  return worst;
}

/* gguf.derive: a tensor that holds what config.json states as fields
 * (llama.cpp's converter writes a rotary scaling as each pair's frequency
 * divisor, rope_freqs, and no key). {TENSOR: {"value": EXPR over i, the
 * setting's members and config numbers, "config": FIELD, "set": {..},
 * "settings": [{..}]}}: the first setting whose values the F32 vector holds
 * (each within 1e-6 relative, f32 rounding of the converter's float64) is
 * the config's FIELD, with "set" added. A tensor no setting gives is
 * refused by name with the nearest setting (a rotary scaling computed
 * otherwise than the file's is a silent wrong answer). 0, or -1 + err. */
static int derive_config(const mi_gguf *g, json_t *sec, json_t *cfg, const char *contract_path, char *err, size_t el) {
  const char *path = mi_gguf_path(g), *tname;
  json_t *d;
  json_object_foreach(json_object_get(sec, "derive"), tname, d) {
    const mi_gguf_tensor *t = mi_gguf_tensor_find(g, tname);
    if (!t) continue; /* the file states nothing: the config's default */
    const char *field = json_string_value(json_object_get(d, "config"));
    json_t *settings = json_object_get(d, "settings");
    if (!field || !json_is_array(settings)) {
      mi_path_err(err, el, path, "the model contract %s: gguf.derive for '%s' has no \"config\" or \"settings\"", contract_path, tname);
      return -1;
    }
    int64_t n = (int64_t)t->ne[0];
    for (uint32_t k = 1; k < t->n_dims; k++) n *= t->ne[k] == 1 ? 1 : -1;
    if (t->type != MI_GGML_F32 || !t->data || n <= 0 || n > 1 << 20) {
      mi_path_err(err, el, path, "tensor '%s' is not an F32 vector (type %s, %u dims): the contract reads its values as %s",
                  tname, mi_gguf_type_name(t->type), t->n_dims, field);
      return -1;
    }
    const char *value = json_string_value(json_object_get(d, "value"));
    char why[400];
    mi_kexpr *x = mi_kexpr_parse(value ? value : "", why, sizeof why);
    if (!x) {
      mi_path_err(err, el, path, "the model contract %s: gguf.derive for '%s': %s", contract_path, tname, why);
      return -1;
    }
    size_t i;
    json_t *st, *match = NULL, *near = NULL;
    double best = HUGE_VAL;
    int unbound = 0;
    json_array_foreach(settings, i, st) {
      const double dist = derive_distance(x, st, cfg, t, n, path, err, el);
      if ((unbound = dist < 0)) break;
      if (dist < best) best = dist, near = st;
      if (dist <= 1e-6) {
        match = st;
        break;
      }
    }
    mi_kexpr_free(x);
    if (unbound) return -1; /* err names the name */
    if (!match) {
      char *shown = near ? json_dumps(near, JSON_COMPACT) : NULL;
      mi_path_err(err, el, path,
                  "tensor '%s' holds %s values none of the %zu settings of %s's gguf.derive gives (nearest %s, off by %.2g): "
                  "add the checkpoint's %s to them",
                  tname, field, json_array_size(settings), contract_path, shown ? shown : "none", best, field);
      free(shown);
      return -1;
    }
    json_t *v = json_deep_copy(match);
    json_object_update(v, json_object_get(d, "set"));
    json_object_set_new(cfg, field, v);
  }
  return 0;
}

static int model_from(mi_gguf *g, json_t *contract, const char *contract_path, int with_tokenizer,
                      mi_gguf_model **out, char *err, size_t err_len) {
  *out = NULL;
  mi_gguf_model *m = calloc(1, sizeof *m);
  if (!m) {
    mi_gguf_close(g);
    mi_path_err(err, err_len, mi_gguf_path(g), "out of memory");
    return -1;
  }
  m->g = g;
  m->contract = json_incref(contract);
  m->contract_path = strdup(contract_path ? contract_path : "(contract)");
  m->bos = m->eos = m->pad = -1;
  json_t *sec = json_object_get(contract, "gguf");
  const char *arch = json_string_value(json_object_get(sec, "architecture"));
  if (!arch) {
    mi_path_err(err, err_len, mi_gguf_path(g), "the model contract %s has no gguf section",
                m->contract_path);
    goto fail;
  }
  if (!(m->config = build_config(g, contract, arch, err, err_len))) goto fail;
  if (unread_keys(g, sec, arch, m->contract_path, err, err_len) != 0) goto fail;
  if (check_keys(g, sec, arch, m->config, m->contract_path, err, err_len) != 0) goto fail;
  if (derive_config(g, sec, m->config, m->contract_path, err, err_len) != 0) goto fail;
  if (with_tokenizer &&
      !(m->tok = build_tokenizer(g, json_object_get(sec, "tokenizer"), m, err, err_len)))
    goto fail;
  json_t *et = json_object_get(sec, "end_tokens");
  m->end_tokens = json_is_array(et) ? et : NULL;
  *out = m;
  return 0;
fail:
  mi_gguf_model_close(m);
  return -1;
}

int mi_gguf_model_from(mi_gguf *g, json_t *contract, const char *contract_path, mi_gguf_model **out,
                       char *err, size_t err_len) {
  return model_from(g, contract, contract_path, 1, out, err, err_len);
}

static int model_open(const char *path, const char *ckb_dir, mi_weights_load how,
                      int with_tokenizer, mi_gguf_model **out, char *err, size_t err_len) {
  *out = NULL;
  mi_gguf *g = mi_gguf_open(path, how, err, err_len);
  if (!g) return -1;
  size_t n;
  const char *a = mi_gguf_kv_str(mi_gguf_get(g, "general.architecture"), &n);
  if (!a || n == 0 || n > 64 || memchr(a, 0, n)) {
    mi_path_err(err, err_len, path, "general.architecture is missing or not a short string");
    mi_gguf_close(g);
    return -1;
  }
  char arch[65], cpath[4096], known[256];
  snprintf(arch, sizeof arch, "%.*s", (int)n, a);
  json_t *c = find_contract(ckb_dir, arch, cpath, sizeof cpath, known, sizeof known);
  if (!c) {
    mi_path_err(err, err_len, path,
                "GGUF architecture '%s' is not described by any model contract in %s/models "
                "(those with a gguf section: %s)",
                arch, ckb_dir, known[0] ? known : "none");
    mi_gguf_close(g);
    return -1;
  }
  int rc = model_from(g, c, cpath, with_tokenizer, out, err, err_len);
  json_decref(c);
  return rc;
}

int mi_gguf_model_open(const char *path, const char *ckb_dir, mi_weights_load how,
                       mi_gguf_model **out, char *err, size_t err_len) {
  return model_open(path, ckb_dir, how, 1, out, err, err_len);
}

int mi_gguf_model_open_config(const char *path, const char *ckb_dir, mi_weights_load how,
                              mi_gguf_model **out, char *err, size_t err_len) {
  return model_open(path, ckb_dir, how, 0, out, err, err_len);
}

/* ---- weights ----------------------------------------------------------------- */

typedef struct gguf_owner {
  mi_gguf *g;
  char **names;
  void **dequant; /* [n]: a tensor widened to f32 or transformed at load, else NULL */
  size_t n;
} gguf_owner;

static void owner_close(void *p) {
  gguf_owner *o = p;
  if (!o) return;
  for (size_t i = 0; i < o->n; i++) {
    free(o->names[i]);
    if (o->dequant) free(o->dequant[i]);
  }
  free(o->names);
  free(o->dequant);
  mi_gguf_close(o->g);
  free(o);
}

/* name matches pat ("blk.{i}.attn_q.weight"): the Hugging Face name from
 * hf with {i} replaced by the same digits. 1 matched, 0 not. */
static int map_name(const char *pat, const char *hf, const char *name, char *out, size_t n) {
  const char *at = strstr(pat, "{i}");
  if (!at) {
    if (strcmp(pat, name)) return 0;
    return snprintf(out, n, "%s", hf) < (int)n;
  }
  size_t pre = (size_t)(at - pat), suf = strlen(at + 3), nl = strlen(name);
  if (nl < pre + suf + 1 || strncmp(name, pat, pre) || strcmp(name + nl - suf, at + 3)) return 0;
  const char *d = name + pre;
  size_t dl = nl - pre - suf;
  if (dl > 9 || (dl > 1 && d[0] == '0')) return 0;
  for (size_t k = 0; k < dl; k++)
    if (d[k] < '0' || d[k] > '9') return 0;
  const char *hat = strstr(hf, "{i}");
  int k = hat ? snprintf(out, n, "%.*s%.*s%s", (int)(hat - hf), hf, (int)dl, d, hat + 3)
              : snprintf(out, n, "%s", hf);
  return k > 0 && (size_t)k < n;
}

/* The ggml block types quant.h defines, as MetaInfer dtypes; -1 for any
 * other ggml type. (ggml's numbers: Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8,
 * Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14.) */
static int block_dtype(uint32_t ggml_type) {
  switch (ggml_type) {
  case MI_GGML_Q8_0: return MI_DTYPE_Q8_0;
  case 2u: return MI_DTYPE_Q4_0;
  case 3u: return MI_DTYPE_Q4_1;
  case 6u: return MI_DTYPE_Q5_0;
  case 7u: return MI_DTYPE_Q5_1;
  case 10u: return MI_DTYPE_Q2_K;
  case 11u: return MI_DTYPE_Q3_K;
  case 12u: return MI_DTYPE_Q4_K;
  case 13u: return MI_DTYPE_Q5_K;
  case 14u: return MI_DTYPE_Q6_K;
  default: return -1;
  }
}

/* A block-type tensor as f32 (malloc'd), or NULL: each value as quant.h
 * defines it, rounded once to f32 (Q8_0, Q4_0, Q5_0, Q3_K and Q6_K exactly:
 * an f16 times small integers fits 24 bits; the types with a min, d*sc*q -
 * dmin*m or d*q + m, may round). The
 * caller has checked that its rows are whole blocks (the reader has too). */
static float *widen_blocks(mi_dtype dt, const mi_gguf_tensor *t) {
  const int64_t qk = mi_dtype_block(dt);
  const uint64_t nb = t->nbytes / mi_dtype_block_bytes(dt);
  float *out = malloc((size_t)(nb ? nb : 1) * (size_t)qk * sizeof(float)); /* [nb * qk] */
  if (!out) return NULL;
  mi_quant_row_f32(dt, t->data, (int64_t)nb * qk, out);
  return out;
}

int mi_gguf_platform_takes(const mi_platform_iface *P, void *ctx, mi_dtype dt) {
  if (!P || !mi_dtype_is_block(dt) || !mi_platform_has(P, matmul) || !mi_platform_has(P, embed))
    return 0;
  const int64_t blk = mi_dtype_block(dt);
  return P->matmul(ctx, NULL, NULL, NULL, NULL, dt, 0, 0, blk) == 0 &&
         P->embed(ctx, NULL, NULL, NULL, dt, NULL, 0, 0, blk) == 0;
}

uint32_t mi_gguf_platform_blocks(const mi_platform_iface *P, void *ctx) {
  /* MI_GGUF_WIDEN=1: widen every block type even where the platform takes
   * it, the exact path to hold its kernels (and llama.cpp) against */
  const char *w = getenv("MI_GGUF_WIDEN");
  if (w && !strcmp(w, "1")) return 0;
  uint32_t mask = 0;
  for (int dt = 0; dt < MI_DTYPE_COUNT; dt++)
    if (mi_dtype_is_block((mi_dtype)dt) && mi_gguf_platform_takes(P, ctx, (mi_dtype)dt))
      mask |= 1u << dt;
  return mask;
}

/* The dtype tensor t is served as: a block-type matrix stays as stored where
 * the platform takes its dtype; else it (and a block-type vector always:
 * norms are read as f32) is widened, *widen = its dtype. -1 + err for a
 * ggml type the model cannot take, or rows that are not whole blocks. */
static int serve_dtype(const mi_gguf_model *m, const mi_gguf_tensor *t, const char *hf, int *widen,
                       char *err, size_t err_len) {
  const char *path = mi_gguf_path(m->g);
  const int bd = block_dtype(t->type);
  *widen = -1;
  if (bd >= 0) {
    if (!t->known || mi_dtype_row_bytes((mi_dtype)bd, (int64_t)t->ne[0]) == 0) {
      mi_path_err(err, err_len, path, "tensor '%s' (%s) is %s with rows of %llu values: not whole blocks of %lld",
                  t->name, hf, mi_gguf_type_name(t->type), (unsigned long long)t->ne[0],
                  (long long)mi_dtype_block((mi_dtype)bd));
      return -1;
    }
    if (t->n_dims == 2 && (m->keep_blocks >> bd & 1u)) return bd;
    *widen = bd;
    return MI_DTYPE_F32;
  }
  if (t->type == MI_GGML_F32) return MI_DTYPE_F32;
  if (t->type == MI_GGML_F16) return MI_DTYPE_F16;
  if (t->type == MI_GGML_BF16) return MI_DTYPE_BF16;
  const char *tn = mi_gguf_type_name(t->type);
  if (tn)
    mi_path_err(err, err_len, path,
                "tensor '%s' (%s) has ggml type %s, which is not supported yet (F32, F16, BF16, "
                "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are)",
                t->name, hf, tn);
  else
    mi_path_err(err, err_len, path, "tensor '%s' (%s) has ggml type %u, unknown to this reader",
                t->name, hf, t->type);
  return -1;
}

/* The Hugging Face name of GGUF tensor name under the contract's map, in
 * hf; 0 when the model does not read it. */
static int hf_name(json_t *map, const char *name, char *hf, size_t n) {
  const char *pat;
  json_t *v;
  json_object_foreach(map, pat, v) {
    if (json_is_string(v) && map_name(pat, json_string_value(v), name, hf, n)) return 1;
  }
  return 0;
}

/* gguf.unused {"layers": "blk.{i}.", "from": FIELD, "why": TEXT}: a
 * tensor of layer i >= the config's FIELD is not served (llama.cpp appends
 * a model's multi-token-prediction layers after its own, under the same
 * names: draft tokens for speculative decoding, not the next-token logits).
 * The layer index when name is one, else -1. */
static long long unused_layer(const mi_gguf_model *m, const char *name) {
  const json_t *u = json_object_get(json_object_get(m->contract, "gguf"), "unused");
  const char *pat = json_string_value(json_object_get(u, "layers")), *from = json_string_value(json_object_get(u, "from"));
  const char *at = pat ? strstr(pat, "{i}") : NULL;
  if (!at || !from) return -1;
  const size_t pre = (size_t)(at - pat), suf = strlen(at + 3);
  if (strncmp(name, pat, pre) || name[pre] < '0' || name[pre] > '9') return -1;
  char *end;
  const long long li = strtoll(name + pre, &end, 10);
  const json_int_t nl = json_integer_value(json_object_get(m->config, from));
  return strncmp(end, at + 3, suf) == 0 && nl > 0 && li >= nl ? li : -1;
}

/* Host memory: the file's tensors (read or mapped, they stay) plus the f32
 * copies widening makes must fit m->mem_avail; the session's check before
 * the file was opened counted the file alone. 0, or -1 + err. */
static int transform_widens(const mi_gguf_model *m, const mi_gguf_tensor *t, int bd);

static int widened_fit(const mi_gguf_model *m, json_t *map, char *err, size_t err_len) {
  if (!m->mem_avail) return 0;
  uint64_t file = 0, wide = 0;
  for (size_t i = 0; i < mi_gguf_tensor_count(m->g); i++) {
    const mi_gguf_tensor *t = mi_gguf_tensor_at(m->g, i);
    char hf[512];
    file += t->nbytes;
    const int bd = block_dtype(t->type);
    if (bd < 0 || !t->known || unused_layer(m, t->name) >= 0 || !hf_name(map, t->name, hf, sizeof hf)) continue;
    if (t->n_dims == 2 && (m->keep_blocks >> bd & 1u) && !transform_widens(m, t, bd)) continue;
    wide += t->nbytes / mi_dtype_block_bytes((mi_dtype)bd) * (uint64_t)mi_dtype_block((mi_dtype)bd) * 4u;
  }
  if (file + wide <= m->mem_avail) return 0;
  char need[32], w[32], have[32];
  mi_mem_gib(file + wide, need, sizeof need);
  mi_mem_gib(wide, w, sizeof w);
  mi_mem_gib(m->mem_avail, have, sizeof have);
  mi_path_err(err, err_len, mi_gguf_path(m->g),
              "needs %s for the weights (%s of them quantized tensors widened to f32 at load: the "
              "platform's kernels do not take their type), %s available; override with --mem-limit",
              need, w, have);
  return -1;
}

/* One info line (-v) saying which block types reach the platform as stored
 * and which were widened: the evidence, for a user or a test, of the path a
 * quantized file took. n[dt][0] kept, n[dt][1] widened, per tensor. */
static void log_blocks(const char *path, unsigned n[MI_DTYPE_COUNT][2]) {
  char line[512];
  size_t u = 0;
  for (int how = 0; how < 2; how++) {
    int any = 0;
    for (int dt = 0; dt < MI_DTYPE_COUNT; dt++) {
      if (!n[dt][how] || u >= sizeof line) continue;
      u += (size_t)snprintf(line + u, sizeof line - u, "%s%s %s x%u", any ? "," : u ? "; " : "",
                            any ? "" : how ? "widened to f32 at load:" : "kept as stored:",
                            mi_dtype_name((mi_dtype)dt), n[dt][how]);
      any = 1;
    }
  }
  if (u) mi_log(MI_LOG_INFO, "gguf", "%s: quantized tensors %s", path, line);
}

/* The gguf.transforms entry whose name pattern matches tensor name, or NULL. */
static json_t *transform_spec(const mi_gguf_model *m, const char *name) {
  const char *pat;
  json_t *spec = NULL, *v;
  char tmp[512];
  json_object_foreach(json_object_get(json_object_get(m->contract, "gguf"), "transforms"), pat, v) {
    if (map_name(pat, pat, name, tmp, sizeof tmp)) spec = v;
  }
  return spec;
}

/* A transform's steps: an array of them, or one (no transform: none). */
static size_t n_steps(const json_t *spec) { return json_is_array(spec) ? json_array_size(spec) : spec ? 1 : 0; }
static const json_t *step_at(const json_t *spec, size_t i) { return json_is_array(spec) ? json_array_get(spec, i) : spec; }

/* A transform's size argument: a JSON integer, or an expression over the
 * config's fields (their contract defaults where the file gave none). 0, or
 * -1 + err naming the tensor. */
static int step_size(const mi_gguf_model *m, const json_t *spec, const char *what, const mi_gguf_tensor *t,
                     int64_t *out, char *err, size_t err_len) {
  const char *path = mi_gguf_path(m->g);
  if (json_is_integer(spec)) {
    *out = (int64_t)json_integer_value(spec);
    return 0;
  }
  char why[256];
  double v[16];
  int absent;
  mi_kexpr *x = json_is_string(spec) ? mi_kexpr_parse(json_string_value(spec), why, sizeof why) : NULL;
  if (!x) {
    mi_path_err(err, err_len, path, "the model contract %s: gguf.transforms for '%s': %s is %s", m->contract_path,
                t->name, what, json_is_string(spec) ? why : "not an integer or an expression");
    return -1;
  }
  const char *nm = mi_kexpr_n_names(x) > 16 ? "(more than 16 names)"
                                            : expr_bind(x, NULL, NULL, "", m->contract, m->config, v, &absent);
  const double r = nm ? 0 : mi_kexpr_eval(x, v);
  if (nm) mi_path_err(err, err_len, path, "tensor '%s': its transform's %s reads %s, which the config does not give as a number",
                      t->name, what, nm);
  mi_kexpr_free(x);
  if (nm) return -1;
  if (!(fabs(r) < 1e15) || r != floor(r)) {
    mi_path_err(err, err_len, path, "tensor '%s': its transform's %s is %g, not a whole number", t->name, what, r);
    return -1;
  }
  *out = (int64_t)r;
  return 0;
}

/* Will t's transform widen it although the platform takes its block type
 * bd? A value step does; so does a column regroup whose runs are not whole
 * blocks. (A malformed step is the transform's to report: 0 here.) */
static int transform_widens(const mi_gguf_model *m, const mi_gguf_tensor *t, int bd) {
  const json_t *spec = transform_spec(m, t->name);
  const int64_t qk = mi_dtype_block((mi_dtype)bd);
  for (size_t i = 0; i < n_steps(spec); i++) {
    const json_t *st = step_at(spec, i), *rg = json_object_get(st, "regroup");
    if (json_object_get(st, "value")) return 1;
    const char *axis = json_string_value(json_object_get(rg, "axis"));
    int64_t from = 0, D = 0;
    char e[256];
    if (!axis || strcmp(axis, "cols")) continue;
    if ((json_object_get(rg, "from") && step_size(m, json_object_get(rg, "from"), "from", t, &from, e, sizeof e)) ||
        step_size(m, json_object_get(rg, "width"), "width", t, &D, e, sizeof e))
      return 0;
    if (from % qk || D % qk) return 1;
  }
  return 0;
}

/* w's data replaced by a new buffer (owned through *own). */
static void take(mi_weight_info *w, void **own, void *data) {
  free(*own);
  *own = data;
  w->data = data;
}

/* A block-type tensor widened to f32 (an elementwise step cannot act on its
 * blocks); other dtypes unchanged. 0, or -1 when out of memory. */
static int widen_info(mi_weight_info *w, void **own) {
  if (!mi_dtype_is_block((mi_dtype)w->dtype)) return 0;
  const int64_t qk = mi_dtype_block((mi_dtype)w->dtype);
  const size_t nb = w->nbytes / mi_dtype_block_bytes((mi_dtype)w->dtype);
  float *f = malloc((nb ? nb : 1) * (size_t)qk * sizeof(float)); /* [nb * qk] */
  if (!f) return -1;
  mi_quant_row_f32((mi_dtype)w->dtype, w->data, (int64_t)nb * qk, f);
  take(w, own, f);
  w->dtype = MI_DTYPE_F32;
  w->nbytes = nb * (size_t)qk * sizeof(float);
  return 0;
}

/* {"unpermute_heads": FIELD}: the rows of each of FIELD heads interleaved
 * (row 2j + i of a head holds the checkpoint's row i·hd/2 + j), as llama.cpp
 * permutes q and k for its adjacent-pair rotation; rows of any dtype (a
 * block type's rows are whole blocks) and 1-D biases alike. */
static int step_unpermute(const mi_gguf_model *m, const mi_gguf_tensor *t, const char *hf, const char *field,
                          mi_weight_info *w, void **own, char *err, size_t err_len) {
  const json_int_t nh = json_integer_value(json_object_get(m->config, field));
  const int64_t rows = w->shape[0];
  if (nh <= 0 || rows % nh || (rows / nh) % 2 || w->nbytes % (size_t)rows) {
    mi_path_err(err, err_len, mi_gguf_path(m->g), "tensor '%s' (%s): %lld rows cannot be un-permuted over %s = %lld heads",
                t->name, hf, (long long)rows, field, (long long)nh);
    return -1;
  }
  const size_t rb = w->nbytes / (size_t)rows;
  const int64_t hd = rows / nh, half = hd / 2;
  unsigned char *out = malloc(w->nbytes ? w->nbytes : 1);
  if (!out) return -2;
  const unsigned char *in = w->data;
  for (int64_t h = 0; h < nh; h++)
    for (int64_t i = 0; i < 2; i++)
      for (int64_t j = 0; j < half; j++)
        memcpy(out + (size_t)(h * hd + i * half + j) * rb, in + (size_t)(h * hd + 2 * j + i) * rb, rb);
  take(w, own, out);
  return 0;
}

/* {"add": X}: a float vector stored minus X (norms stored as 1 + w: add -1);
 * {"value": EXPR}: each value v served as EXPR with x = v (llama.cpp stores
 * A_log as -exp(A_log): "log(-x)"); any tensor, served as f32 (a block type
 * widened first). A value that is not finite is refused by position. */
static int step_values(const mi_gguf_model *m, const mi_gguf_tensor *t, const char *hf, const json_t *step,
                       mi_weight_info *w, void **own, char *err, size_t err_len) {
  const char *path = mi_gguf_path(m->g);
  const json_t *add = json_object_get(step, "add");
  const char *ex = json_string_value(json_object_get(step, "value"));
  if (add && (w->ndim != 1 || (w->dtype != MI_DTYPE_F32 && w->dtype != MI_DTYPE_F16 && w->dtype != MI_DTYPE_BF16))) {
    mi_path_err(err, err_len, path, "tensor '%s' (%s): \"add\" takes an F32, F16 or BF16 vector", t->name, hf);
    return -1;
  }
  if (widen_info(w, own)) return -2;
  mi_kexpr *x = NULL;
  double v[16] = {0};
  int x_at = -1;
  if (ex) {
    char why[256];
    if (!(x = mi_kexpr_parse(ex, why, sizeof why))) {
      mi_path_err(err, err_len, path, "the model contract %s: gguf.transforms for '%s': %s", m->contract_path, t->name, why);
      return -1;
    }
    for (int k = 0; k < mi_kexpr_n_names(x); k++) {
      if (!strcmp(mi_kexpr_name(x, k), "x")) x_at = k;
      else {
        mi_path_err(err, err_len, path, "the model contract %s: gguf.transforms for '%s' reads '%s' (a value's expression reads x alone)",
                    m->contract_path, t->name, mi_kexpr_name(x, k));
        mi_kexpr_free(x);
        return -1;
      }
    }
  }
  const size_t n = w->nbytes / mi_dtype_size((mi_dtype)w->dtype);
  float *out = malloc((n ? n : 1) * sizeof(float)); /* [n] */
  if (!out) {
    mi_kexpr_free(x);
    return -2;
  }
  const double shift = json_number_value(add);
  for (size_t k = 0; k < n; k++) {
    const double in = (double)mi_float_value((mi_dtype)w->dtype, w->data, k);
    if (x_at >= 0) v[x_at] = in;
    const double r = x ? mi_kexpr_eval(x, v) : in + shift;
    if (!isfinite(r) && isfinite(in)) {
      mi_path_err(err, err_len, path, "tensor '%s' (%s): value %zu is %g, which its transform (%s) makes %g", t->name, hf, k,
                  in, ex ? ex : "add", r);
      mi_kexpr_free(x);
      free(out);
      return -1;
    }
    out[k] = (float)r;
  }
  mi_kexpr_free(x);
  take(w, own, out);
  w->dtype = MI_DTYPE_F32;
  w->nbytes = n * sizeof(float);
  return 0;
}

/* {"regroup": {"axis": "rows"|"cols", "from": N, "groups": G, "per_group": R,
 * "width": D}}: rows (or columns) [from, from + G·R·D) stored as R tiles of
 * G blocks of D ([r][g][d]), served grouped ([g][r][d]): llama.cpp orders a
 * hybrid's value heads so (each key head's R value heads apart). Rows of
 * any dtype; columns of a block type widen it to f32 first. */
static int step_regroup(const mi_gguf_model *m, const mi_gguf_tensor *t, const char *hf, const json_t *rg,
                        mi_weight_info *w, void **own, char *err, size_t err_len) {
  const char *path = mi_gguf_path(m->g), *axis = json_string_value(json_object_get(rg, "axis"));
  int64_t from = 0, G, R, D;
  if (!axis || (strcmp(axis, "rows") && strcmp(axis, "cols"))) {
    mi_path_err(err, err_len, path, "the model contract %s: gguf.transforms for '%s': regroup's axis is not \"rows\" or \"cols\"",
                m->contract_path, t->name);
    return -1;
  }
  if ((json_object_get(rg, "from") && step_size(m, json_object_get(rg, "from"), "from", t, &from, err, err_len)) ||
      step_size(m, json_object_get(rg, "groups"), "groups", t, &G, err, err_len) ||
      step_size(m, json_object_get(rg, "per_group"), "per_group", t, &R, err, err_len) ||
      step_size(m, json_object_get(rg, "width"), "width", t, &D, err, err_len))
    return -1;
  const int cols = axis[0] == 'c';
  if (cols && w->ndim != 2) {
    mi_path_err(err, err_len, path, "tensor '%s' (%s): columns regrouped in a tensor of %d dims", t->name, hf, w->ndim);
    return -1;
  }
  /* columns of a block type move as whole blocks where every run is whole
   * blocks (Q8_0 under 128-wide heads); else the tensor is widened to f32 */
  const int64_t qk = mi_dtype_is_block((mi_dtype)w->dtype) ? mi_dtype_block((mi_dtype)w->dtype) : 1;
  if (cols && qk > 1 && (from % qk || D % qk) && widen_info(w, own)) return -2;
  const int64_t unit = cols && mi_dtype_is_block((mi_dtype)w->dtype) ? qk : 1; /* columns per moved unit */
  const int64_t rows = w->shape[0], n = cols ? w->shape[1] : rows;
  if (G <= 0 || R <= 0 || D <= 0 || from < 0 || rows <= 0 || G > n || R > n || D > n || from > n || G * R > n ||
      G * R * D > n - from || w->nbytes % (size_t)rows) {
    mi_path_err(err, err_len, path,
                "tensor '%s' (%s): %s %lld..%lld regrouped as %lld x %lld blocks of %lld: the tensor has %lld", t->name, hf,
                axis, (long long)from, (long long)(from + G * R * D), (long long)R, (long long)G, (long long)D, (long long)n);
    return -1;
  }
  /* bytes of a row, and of one moved unit: a row, a column, or a block of columns */
  const size_t rb = w->nbytes / (size_t)rows, es = cols ? rb / (size_t)(n / unit) : rb;
  const int64_t f0 = from / unit, du = D / unit;
  unsigned char *out = malloc(w->nbytes ? w->nbytes : 1);
  if (!out) return -2;
  memcpy(out, w->data, w->nbytes);
  const unsigned char *in = w->data;
  for (int64_t line = 0; line < (cols ? rows : 1); line++) {
    const size_t base = cols ? (size_t)line * rb : 0;
    for (int64_t g = 0; g < G; g++)
      for (int64_t r = 0; r < R; r++) {
        const size_t to = (size_t)(f0 + (g * R + r) * du), fr = (size_t)(f0 + (r * G + g) * du);
        memcpy(out + base + to * es, in + base + fr * es, (size_t)du * es);
      }
  }
  take(w, own, out);
  return 0;
}

/* {"unsqueeze": AXIS}: a dimension of 1 inserted at AXIS (llama.cpp
 * squeezes a depthwise conv's [C, 1, K] to [C, K]). */
static int step_unsqueeze(const mi_gguf_model *m, const mi_gguf_tensor *t, const char *hf, const json_t *ax,
                          mi_weight_info *w, char *err, size_t err_len) {
  const json_int_t a = json_integer_value(ax);
  if (!json_is_integer(ax) || a < 0 || a > w->ndim || w->ndim >= 8) {
    mi_path_err(err, err_len, mi_gguf_path(m->g), "tensor '%s' (%s): cannot insert a dimension at %lld of %d", t->name, hf,
                (long long)a, w->ndim);
    return -1;
  }
  memmove(&w->shape[a + 1], &w->shape[a], (size_t)(w->ndim - a) * sizeof w->shape[0]);
  w->shape[a] = 1;
  w->ndim++;
  return 0;
}

/* llama.cpp's converter stores some tensors otherwise than the checkpoint;
 * the contract's gguf.transforms says which and how (one step, or an array
 * of steps applied in order), and the load undoes it into a copy (*own,
 * freed with the weights). The steps: unpermute_heads, add, value, regroup,
 * unsqueeze (each above). 0 (w unchanged when no transform names t), or
 * -1 + err. */
static int transform(const mi_gguf_model *m, const mi_gguf_tensor *t, const char *hf, mi_weight_info *w,
                     void **own, char *err, size_t err_len) {
  const char *path = mi_gguf_path(m->g);
  const json_t *spec = transform_spec(m, t->name);
  for (size_t i = 0; i < n_steps(spec); i++) {
    const json_t *st = step_at(spec, i);
    const char *field = json_string_value(json_object_get(st, "unpermute_heads"));
    const json_t *rg = json_object_get(st, "regroup"), *un = json_object_get(st, "unsqueeze");
    int rc;
    if (json_object_size(st) != 1) rc = -3;
    else if (field) rc = step_unpermute(m, t, hf, field, w, own, err, err_len);
    else if (json_is_number(json_object_get(st, "add")) || json_is_string(json_object_get(st, "value")))
      rc = step_values(m, t, hf, st, w, own, err, err_len);
    else if (json_is_object(rg)) rc = step_regroup(m, t, hf, rg, w, own, err, err_len);
    else if (un) rc = step_unsqueeze(m, t, hf, un, w, err, err_len);
    else rc = -3;
    if (rc == -3)
      mi_path_err(err, err_len, path,
                  "the model contract %s: gguf.transforms for '%s': step %zu is not one of {\"unpermute_heads\": FIELD}, "
                  "{\"add\": NUMBER}, {\"value\": EXPR}, {\"regroup\": {..}}, {\"unsqueeze\": AXIS}",
                  m->contract_path, t->name, i);
    if (rc == -2) mi_path_err(err, err_len, path, "tensor '%s': out of memory undoing its GGUF transform", t->name);
    if (rc) return -1;
  }
  return 0;
}

mi_weights *mi_gguf_model_weights(mi_gguf_model *m, char *err, size_t err_len) {
  mi_gguf *g = m->g;
  const char *path = mi_gguf_path(g);
  json_t *map = json_object_get(json_object_get(m->contract, "gguf"), "tensors");
  size_t nt = mi_gguf_tensor_count(g);
  gguf_owner *o = calloc(1, sizeof *o);
  mi_weight_info *tab = calloc(nt ? nt : 1, sizeof *tab);
  if (o) o->names = calloc(nt ? nt : 1, sizeof *o->names);
  if (o) o->dequant = calloc(nt ? nt : 1, sizeof *o->dequant);
  if (!o || !tab || !o->names || !o->dequant) {
    mi_path_err(err, err_len, path, "out of memory");
    goto fail;
  }
  if (widened_fit(m, map, err, err_len) != 0) goto fail;
  unsigned blocks[MI_DTYPE_COUNT][2] = {{0}};
  size_t k = 0, unused = 0;
  long long unused_from = -1;
  for (size_t i = 0; i < nt; i++) {
    const mi_gguf_tensor *t = mi_gguf_tensor_at(g, i);
    char hf[512];
    const long long ul = unused_layer(m, t->name);
    if (ul >= 0) { /* a layer past the model's own: not served, named once below */
      unused++;
      if (unused_from < 0 || ul < unused_from) unused_from = ul;
      continue;
    }
    if (json_object_get(json_object_get(json_object_get(m->contract, "gguf"), "derive"), t->name))
      continue; /* read into the config (derive_config), not a weight */
    if (!hf_name(map, t->name, hf, sizeof hf)) {
      /* a tensor the contract does not read changes what the file means
       * (a rope_freqs table: a rotary scaling the keys do not say): never ignored */
      mi_path_err(err, err_len, path,
                  "tensor '%s' is not read by the model contract %s (its gguf.tensors): the file "
                  "describes something this contract does not compute",
                  t->name, m->contract_path);
      goto fail;
    }
    int widen;
    const int dt = serve_dtype(m, t, hf, &widen, err, err_len);
    if (dt < 0) goto fail;
    if (!(o->names[k] = strdup(hf))) {
      mi_path_err(err, err_len, path, "out of memory");
      goto fail;
    }
    o->n = k + 1;
    mi_weight_info *w = &tab[k++];
    w->name = o->names[k - 1];
    w->dtype = dt;
    w->ndim = (int)t->n_dims;
    for (uint32_t d = 0; d < t->n_dims; d++)
      w->shape[d] = (int64_t)t->ne[t->n_dims - 1 - d];
    w->data = t->data;
    w->nbytes = (size_t)t->nbytes;
    if (widen >= 0) {
      float *f = widen_blocks((mi_dtype)widen, t);
      if (!f) {
        mi_path_err(err, err_len, path, "tensor '%s': out of memory widening %s to f32", t->name,
                    mi_gguf_type_name(t->type));
        goto fail;
      }
      o->dequant[k - 1] = f;
      w->data = f;
      w->nbytes = (size_t)(t->nbytes / mi_dtype_block_bytes((mi_dtype)widen)) *
                  (size_t)mi_dtype_block((mi_dtype)widen) * sizeof(float);
    }
    if (transform(m, t, hf, w, &o->dequant[k - 1], err, err_len) != 0) goto fail;
    /* as served: a block type kept, or widened (at load, or by a transform
     * that could not move its blocks) */
    const int stored = block_dtype(t->type);
    if (stored >= 0) blocks[stored][!mi_dtype_is_block((mi_dtype)w->dtype)]++;
    w->file = path;
  }
  log_blocks(path, blocks);
  if (unused)
    mi_log(MI_LOG_INFO, "gguf", "%s: skipped %zu tensors of layers %lld and after: %s", path, unused, unused_from,
           json_string_value(json_object_get(json_object_get(json_object_get(m->contract, "gguf"), "unused"), "why")) ?: "");
  o->g = g;
  mi_weights *ws = mi_weights_from_table(tab, k, o, owner_close, path, err, err_len);
  free(tab);
  if (!ws) {
    o->g = NULL; /* still m's */
    owner_close(o);
    return NULL;
  }
  m->g = NULL;
  return ws;
fail:
  free(tab);
  if (o) o->g = NULL;
  owner_close(o);
  return NULL;
}

const mi_gguf_tensor *mi_gguf_model_tensor(const mi_gguf_model *m, const char *hf, int *dtype) {
  json_t *map = json_object_get(json_object_get(m->contract, "gguf"), "tensors");
  for (size_t i = 0, nt = m->g ? mi_gguf_tensor_count(m->g) : 0; i < nt; i++) {
    const mi_gguf_tensor *t = mi_gguf_tensor_at(m->g, i);
    char name[512];
    if (!hf_name(map, t->name, name, sizeof name) || strcmp(name, hf)) continue;
    const int b = block_dtype(t->type);
    *dtype = b >= 0                      ? b
             : t->type == MI_GGML_F32  ? MI_DTYPE_F32
             : t->type == MI_GGML_F16  ? MI_DTYPE_F16
             : t->type == MI_GGML_BF16 ? MI_DTYPE_BF16
                                       : -1;
    return t;
  }
  return NULL;
}

double mi_gguf_model_tensor_shift(const mi_gguf_model *m, const mi_gguf_tensor *t) {
  /* the adds of its steps (a reordering moves values without changing them) */
  const json_t *spec = transform_spec(m, t->name);
  double shift = 0;
  for (size_t i = 0; i < n_steps(spec); i++) {
    const json_t *add = json_object_get(step_at(spec, i), "add");
    if (json_is_number(add)) shift += json_number_value(add);
  }
  return shift;
}
