/* See learn.h. */
#define _GNU_SOURCE
#include "core/gen/learn.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/gen/gen.h"
#include "core/runtime/model_input.h"
#include "core/util/file.h"

#define MAX_CHECKPOINTS 32 /* config hashes kept per entry: enough to see "many shapes", bounded   \
                            */

int mi_learn_enabled(void) {
  const char *v = getenv("MI_CKB_LEARN");
  if (!v || !*v) return 1;
  return !(!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "no") ||
           !strcasecmp(v, "false"));
}

static int numchar(char c) {
  return isdigit((unsigned char)c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
}

void mi_learn_signature(const char *msg, char *out, size_t n) {
  size_t o = 0;
  if (!n) return;
  const char *s = msg ? msg : "";
  while (*s && o + 8 < n) {
    /* a word holding a '/' is a path (run folders, temp files): "<path>" */
    if (!isspace((unsigned char)*s) && (s == msg || isspace((unsigned char)s[-1]))) {
      const char *e = s;
      int slash = 0;
      while (*e && !isspace((unsigned char)*e))
        slash |= *e++ == '/';
      if (slash) {
        o += (size_t)snprintf(out + o, n - o, "<path>");
        s = e;
        continue;
      }
    }
    /* a number (with its sign, point and exponent) that is not part of a
     * word ("float64", "libc.so.6" stay): '#' */
    int at_start = s == msg || !(isalnum((unsigned char)s[-1]) || s[-1] == '_' || s[-1] == '.');
    if (at_start && (isdigit((unsigned char)*s) ||
                     ((*s == '-' || *s == '+' || *s == '.') && isdigit((unsigned char)s[1])))) {
      while (*s && numchar(*s) &&
             !((*s == 'e' || *s == 'E') &&
               !(isdigit((unsigned char)s[1]) || s[1] == '-' || s[1] == '+')))
        s++;
      out[o++] = '#';
      continue;
    }
    if (isspace((unsigned char)*s)) {
      if (o && out[o - 1] != ' ') out[o++] = ' ';
      s++;
      continue;
    }
    out[o++] = (char)(iscntrl((unsigned char)*s) ? '?' : *s);
    s++;
  }
  while (o && out[o - 1] == ' ')
    o--;
  out[o] = 0;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* [a-z0-9_] only, at most 32 bytes, starting with a letter: part of an id */
static void id_part(const char *s, char *out, size_t n) {
  size_t o = 0;
  if (n < 3) return;
  if (!s || !isalpha((unsigned char)*s)) out[o++] = 'x';
  for (; s && *s && o + 1 < n && o < 32; s++) {
    char c = (char)tolower((unsigned char)*s);
    out[o++] = isalnum((unsigned char)c) ? c : '_';
  }
  out[o] = 0;
}

static void today(char out[11]) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 11, "%Y-%m-%d", &tm);
}

/* Which checkpoint: its config.json's hash; a GGUF file's, the config its
 * contract builds from the metadata (never the whole file, gigabytes, on
 * every failure), or when none builds its name and size. */
static void cfg_hash16(const char *cfg_path, char out[17]) {
  char sha[65] = "";
  out[0] = 0;
  if (!cfg_path) return;
  if (mi_model_input_is_gguf(cfg_path)) {
    char err[600];
    json_t *cfg = mi_model_input_config(cfg_path, 0, err, sizeof err);
    char *text = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    struct stat st;
    char id[4200];
    if (!text && stat(cfg_path, &st) == 0) {
      const char *base = strrchr(cfg_path, '/');
      snprintf(id, sizeof id, "%s %lld", base ? base + 1 : cfg_path, (long long)st.st_size);
      text = strdup(id);
    }
    if (text) mi_sha256_buf(text, strlen(text), sha);
    free(text);
    json_decref(cfg);
  } else if (mi_sha256_file(cfg_path, sha) != 0) {
    sha[0] = 0;
  }
  if (sha[0]) snprintf(out, 17, "%.16s", sha);
}

/* "1.0.7" -> "1.0.8"; anything else -> NULL (the update is then refused) */
static json_t *bump(const char *v) {
  unsigned long a, b, c;
  int n = 0;
  if (!v || sscanf(v, "%lu.%lu.%lu%n", &a, &b, &c, &n) != 3 || v[n] || c >= 1000000000ul)
    return NULL;
  return json_sprintf("%lu.%lu.%lu", a, b, c + 1);
}

typedef struct diag_buf {
  char line[600];
} diag_buf;

static void keep_first(void *user, const char *line) {
  diag_buf *d = user;
  if (!d->line[0]) snprintf(d->line, sizeof d->line, "%s", line);
}

/* Adds `fresh` as DIR/<dir>/<name>.json, or, when that entry exists, counts
 * one more occurrence on it (and lets `update` change it) and writes it as
 * the next version. *existing (may be NULL): 1 when it was there. 0 or -1. */
static int upsert(const char *ckb_dir, const char *dir, const char *name, json_t *fresh,
                  const char *cfg16, void (*update)(json_t *entry, void *u), void *u,
                  int *existing) {
  char path[PATH_MAX], err[600] = "";
  snprintf(path, sizeof path, "%s/%s/%s.json", ckb_dir, dir, name);
  json_t *old = access(path, F_OK) == 0 ? mi_file_load_json(path, MI_FILE_NOFOLLOW, MI_CKB_MAX_FILE,
                                                            "CKB entry", 0, err, sizeof err)
                                        : NULL;
  if (existing) *existing = old != NULL;
  if (!old && err[0]) {
    fprintf(stderr, "mi-gen: learn: %s\n", err);
    return -1;
  }
  json_t *e = old ? old : json_incref(fresh);
  char day[11];
  today(day);
  if (old) {
    json_t *v = bump(json_string_value(json_object_get(old, "version")));
    if (!v) {
      fprintf(stderr, "mi-gen: learn: %s: version is not MAJOR.MINOR.PATCH; not updated\n", path);
      json_decref(old);
      return -1;
    }
    json_object_set_new(old, "version", v);
    json_object_set_new(old, "occurrences",
                        json_integer(json_integer_value(json_object_get(old, "occurrences")) + 1));
    json_object_set_new(old, "last_seen", json_string(day));
  }
  if (cfg16 && cfg16[0]) {
    json_t *cps = json_object_get(e, "checkpoints");
    if (!json_is_array(cps)) json_object_set_new(e, "checkpoints", cps = json_array());
    int have = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cps, i, c) have |= !strcmp(json_string_value(c) ?: "", cfg16);
    if (!have && json_array_size(cps) < MAX_CHECKPOINTS)
      json_array_append_new(cps, json_string(cfg16));
  }
  if (update) update(e, u);
  diag_buf d = {""};
  int rc = mi_ckb_put(ckb_dir, e, old ? MI_CKB_UPDATE : MI_CKB_ADD, keep_first, &d);
  if (rc != 0)
    fprintf(stderr, "mi-gen: learn: %s not written: %s\n", path, d.line[0] ? d.line : "?");
  json_decref(e);
  return rc;
}

static json_t *fresh_entry(const char *kind, const char *name, const char *summary,
                           const char *run_dir) {
  char day[11];
  today(day);
  json_t *e =
      json_pack("{s:s++, s:s, s:s, s:{s:s, s:s}, s:s, s:i, s:s, s:s}", "id", kind, ".", name,
                "kind", kind, "version", "1.0.0", "provenance", "source", "experience", "date", day,
                "summary", summary, "occurrences", 1, "first_seen", day, "last_seen", day);
  if (e && run_dir)
    json_object_set_new(json_object_get(e, "provenance"), "refs", json_pack("[s]", run_dir));
  return e;
}

/* ---- failure reports ---- */

typedef struct fail_upd {
  const mi_ckb_entry *contract;
  const char *sha, *message;
  const json_t *tried;
} fail_upd;

static void fail_update(json_t *e, void *u) {
  fail_upd *f = u;
  json_t *c = json_pack("{s:s, s:s}", "id", f->contract->id, "version",
                        f->contract->version ? f->contract->version : "0.0.0");
  if (f->sha[0]) json_object_set_new(c, "sha256", json_string(f->sha));
  json_object_set_new(e, "contract", c);
  /* seen again: open until a repair clears it this time too (repaired_by
   * keeps the repair that cleared it last, a hint for whoever reads it) */
  json_object_set_new(e, "status", json_string("open"));
  json_t *sy = json_object_get(e, "symptom");
  if (json_is_object(sy) && f->message)
    json_object_set_new(sy, "message", json_sprintf("%.1000s", f->message));
  /* the failure modes tried on it, as a set */
  json_t *tr = json_object_get(e, "tried");
  if (!json_is_array(tr)) json_object_set_new(e, "tried", tr = json_array());
  size_t i, k;
  json_t *t, *h;
  json_array_foreach(f->tried, i, t) {
    int have = 0;
    json_array_foreach(tr, k, h) have |= json_equal(h, t);
    if (!have && json_is_string(t)) json_array_append(tr, t);
  }
  if (!json_array_size(tr)) json_object_del(e, "tried");
}

int mi_learn_failure(const char *ckb_dir, const mi_ckb_entry *contract, const char *cfg_path,
                     const json_t *cons, const char *stage, const char *test_contract,
                     const char *message, const json_t *tried, const char *run_dir, char *id_out,
                     size_t id_n) {
  if (id_n) id_out[0] = 0;
  if (!contract || !contract->id || !strchr(contract->id, '.')) return -1;
  char sig[300], key[1200], cname[40], name[96], summary[700];
  mi_learn_signature(message, sig, sizeof sig);
  if (!sig[0]) snprintf(sig, sizeof sig, "no message");
  snprintf(key, sizeof key, "%s|%s|%s|%s", contract->id, stage ? stage : "?",
           test_contract ? test_contract : "", sig);
  id_part(strchr(contract->id, '.') + 1, cname, sizeof cname);
  char st[12] = "";
  for (size_t k = 0, o = 0; stage && stage[k] && o + 1 < sizeof st; k++)
    if (isalnum((unsigned char)stage[k]))
      st[o++] = (char)tolower((unsigned char)stage[k]), st[o] = 0;
  snprintf(name, sizeof name, "%s_s%s_%010llx", cname, st[0] ? st : "x",
           (unsigned long long)(fnv1a(key) & 0xffffffffffull));
  snprintf(summary, sizeof summary, "%s: a generated engine failed %s%s%s%s%s: %.400s",
           contract->id, stage && isdigit((unsigned char)stage[0]) ? "stage " : "",
           stage ? stage : "?", test_contract ? " (" : "", test_contract ? test_contract : "",
           test_contract ? ")" : "", sig);
  json_t *e = fresh_entry("failure_report", name, summary, run_dir);
  json_t *sy = json_pack("{s:s, s:s}", "stage", stage ? stage : "?", "signature", sig);
  if (test_contract) json_object_set_new(sy, "test_contract", json_string(test_contract));
  json_object_set_new(e, "symptom", sy);
  json_object_set_new(e, "status", json_string("open"));
  json_t *c = json_object(), *v;
  if ((v = json_object_get(cons, "platform")) && json_is_string(v))
    json_object_set(c, "platform", v);
  if ((v = json_object_get(cons, "dtype")) && json_is_string(v)) json_object_set(c, "dtype", v);
  if ((v = json_object_get(cons, "tp")) && json_is_integer(v)) json_object_set(c, "tp", v);
  if ((v = json_object_get(cons, "kv_type")) && json_is_string(v)) json_object_set(c, "kv_type", v);
  json_object_set_new(e, "constraints", c);
  char sha[65] = "", cfg16[17];
  mi_sha256_file(contract->path, sha);
  cfg_hash16(cfg_path, cfg16);
  fail_upd f = {contract, sha, message, tried};
  int existing = 0;
  int rc = upsert(ckb_dir, "failure_reports", name, e, cfg16, fail_update, &f, &existing);
  json_decref(e);
  if (rc != 0) return -1;
  snprintf(id_out, id_n, "failure_report.%s", name);
  return existing ? 0 : 1;
}

typedef struct rep_upd {
  const char *fm, *exp;
  const json_t *patch;
} rep_upd;

static void rep_update(json_t *e, void *u) {
  rep_upd *r = u;
  json_t *p =
      json_pack("{s:O?, s:O?, s:O?}", "operator", json_object_get(r->patch, "operator"), "arg",
                json_object_get(r->patch, "arg"), "value", json_object_get(r->patch, "value"));
  json_t *by = json_pack("{s:s, s:o}", "failure_mode", r->fm, "patch", p);
  if (r->exp) json_object_set_new(by, "experience", json_string(r->exp));
  json_object_set_new(e, "repaired_by", by);
  json_object_set_new(e, "status", json_string("repaired"));
  /* marking it repaired is not another occurrence */
  json_object_set_new(e, "occurrences",
                      json_integer(json_integer_value(json_object_get(e, "occurrences")) - 1));
}

int mi_learn_repaired(const char *ckb_dir, const char *report_id, const char *failure_mode,
                      const json_t *patch, const char *experience_id) {
  if (!report_id || strncmp(report_id, "failure_report.", 15) || !failure_mode) return -1;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/failure_reports/%s.json", ckb_dir, report_id + 15);
  if (access(path, F_OK) != 0) return -1; /* only an existing report is marked */
  rep_upd r = {failure_mode, experience_id, patch};
  json_t *none = json_object();
  int rc = upsert(ckb_dir, "failure_reports", report_id + 15, none, NULL, rep_update, &r, NULL);
  json_decref(none);
  return rc;
}

int mi_learn_last_repair(const char *ckb_dir, const char *report_id, char *out, size_t n) {
  if (n) out[0] = 0;
  if (!report_id || strncmp(report_id, "failure_report.", 15)) return -1;
  char path[PATH_MAX], err[600];
  snprintf(path, sizeof path, "%s/failure_reports/%s.json", ckb_dir, report_id + 15);
  json_t *e =
      mi_file_load_json(path, MI_FILE_NOFOLLOW, MI_CKB_MAX_FILE, "CKB entry", 0, err, sizeof err);
  const char *fm =
      json_string_value(json_object_get(json_object_get(e, "repaired_by"), "failure_mode"));
  int rc = fm && strncmp(fm, "failure_mode.", 13) == 0 ? 0 : -1;
  if (rc == 0) snprintf(out, n, "%s", fm);
  json_decref(e);
  return rc;
}

/* ---- knowledge gaps ---- */

/* What the coverage line is about, from its wording (core/ckb/coverage.c,
 * config_fields.c): the class and, for a config line, the field. */
static const char *gap_class(const char *line, char *field, size_t fn) {
  field[0] = 0;
  const char *q = strstr(line, "config field '");
  if (q) {
    q += 14;
    const char *e = strchr(q, '\'');
    if (e) snprintf(field, fn, "%.*s", (int)(e - q) < 200 ? (int)(e - q) : 200, q);
    return strstr(line, "does not read") ? "config_field" : "config_value";
  }
  if (strstr(line, "weight") || strstr(line, "tensor")) return "weight";
  if (strstr(line, "architecture")) return "architecture";
  if (strstr(line, "operator")) return "operator";
  if (strstr(line, "platform")) return "platform";
  return "other";
}

int mi_learn_gaps(const char *ckb_dir, const json_t *cov, const char *cfg_path,
                  const char *platform, int *n_new, int *n_seen) {
  *n_new = *n_seen = 0;
  char cfg16[17], contract[200] = "";
  cfg_hash16(cfg_path, cfg16);
  const char *mc = json_string_value(json_object_get(cov, "model_contract"));
  if (!mc) mc = json_string_value(json_object_get(cov, "closest_model_contract"));
  if (mc) snprintf(contract, sizeof contract, "%s", mc);
  if (strchr(contract, '@')) *strchr(contract, '@') = 0;
  const char *arch = json_string_value(json_array_get(json_object_get(cov, "architectures"), 0));
  int bad = 0;
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(cov, "missing"), i, m) {
    const char *line = json_string_value(m);
    if (!line || !*line) continue;
    char field[256], key[1400], base[40], name[96];
    const char *cls = gap_class(line, field, sizeof field);
    snprintf(key, sizeof key, "%s|%s|%s", contract, platform ? platform : "", line);
    id_part(contract[0] && strchr(contract, '.') ? strchr(contract, '.') + 1
            : arch                               ? arch
                                                 : "model",
            base, sizeof base);
    snprintf(name, sizeof name, "%s_%010llx", base,
             (unsigned long long)(fnv1a(key) & 0xffffffffffull));
    json_t *e = fresh_entry("knowledge_gap", name, line, NULL);
    json_t *g = json_pack("{s:s, s:s}", "line", line, "class", cls);
    if (field[0]) json_object_set_new(g, "field", json_string(field));
    if (arch) json_object_set_new(g, "architecture", json_string(arch));
    if (contract[0]) json_object_set_new(g, "contract", json_string(contract));
    json_object_set_new(e, "gap", g);
    if (platform) json_object_set_new(e, "platform", json_string(platform));
    json_object_set_new(e, "status", json_string("open"));
    json_object_set_new(
        e, "next",
        json_string(!strcmp(cls, "config_field") || !strcmp(cls, "config_value")
                        ? "bind the field in the model contract (config, with the values it "
                          "supports) or list it in "
                          "config_inert with why; or let mi-gen --evolve search the CKB's variants"
                    : !strcmp(cls, "platform") || !strcmp(cls, "operator")
                        ? "a platform contract (and plugin) that provides the operator, or an "
                          "operator contract"
                        : "a model contract (or a variant of one) that maps it; mi-gen --evolve "
                          "searches for one"));
    int existing = 0;
    if (upsert(ckb_dir, "knowledge_gaps", name, e, cfg16, NULL, NULL, &existing) != 0)
      bad = 1;
    else if (existing)
      ++*n_seen;
    else
      ++*n_new;
    json_decref(e);
  }
  return bad ? -1 : 0;
}
