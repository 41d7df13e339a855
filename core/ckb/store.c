/* CKB store: reads the schemas and every entry file of a CKB directory. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ckb/internal.h"
#include "core/util/file.h"

static char *path_join(const char *a, const char *b) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", a, b) < 0) return NULL;
  return p;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of a folder that pass `want`; NULL-terminated. */
static char **list_dir(const char *dir, int (*want)(const char *dir, const char *name)) {
  DIR *d = opendir(dir);
  if (!d) return NULL;
  size_t n = 0, cap = 16;
  char **v = malloc(cap * sizeof *v);
  struct dirent *de;
  while (v && (de = readdir(d))) {
    if (!want(dir, de->d_name)) continue;
    if (n + 1 >= cap) {
      char **nv = realloc(v, (cap *= 2) * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    v[n++] = strdup(de->d_name);
  }
  closedir(d);
  if (!v) return NULL;
  v[n] = NULL;
  qsort(v, n, sizeof *v, cmp_str);
  return v;
}

static void free_list(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

static int want_json(const char *dir, const char *name) {
  (void)dir;
  /* '.' files are the lock and the temp files of interrupted writes. */
  return name[0] != '.' && ends_with(name, ".json");
}

static int want_subdir(const char *dir, const char *name) {
  if (name[0] == '.' || strcmp(name, "schemas") == 0) return 0;
  char *p = path_join(dir, name);
  struct stat st;
  int ok = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
  free(p);
  return ok;
}

void ckb_line(json_t *lines, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_array_append_new(lines, json_vsprintf(fmt, ap));
  va_end(ap);
}

int ckb_type_is(const char *t, const json_t *v) {
  if (!strcmp(t, "object")) return json_is_object(v);
  if (!strcmp(t, "array")) return json_is_array(v);
  if (!strcmp(t, "string")) return json_is_string(v);
  if (!strcmp(t, "number")) return json_is_number(v);
  if (!strcmp(t, "integer")) return json_is_integer(v);
  if (!strcmp(t, "boolean")) return json_is_boolean(v);
  if (!strcmp(t, "null")) return json_is_null(v);
  return -1;
}

void ckb_report(ckb_diag *d, const char *file, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char line[1400];
  snprintf(line, sizeof line, "%s: %s", file, msg);
  /* Field names and values come from the entry: a control character in one
   * (a key "a\nb") must not split the one-line diagnostic. */
  for (char *p = line; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
  d->count++;
  if (d->fn) d->fn(d->user, line);
  else fprintf(stderr, "%s\n", line);
}

/* Entries and schemas are a few KiB; jansson holds a parsed file in ~20x
 * its size, so a hostile multi-GB file would otherwise cost tens of GB.
 * (MI_CKB_MAX_FILE is in ckb.h: the writer enforces it too.) */

int mi_ckb_name_check(const char *name, char *why, size_t why_len) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0) return snprintf(why, why_len, "is empty"), -1;
  if (n > 128) return snprintf(why, why_len, "is %zu bytes long (at most 128)", n), -1;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)name[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
             (i > 0 && (ch == '.' || ch == '_' || ch == '-'));
    if (ok) continue;
    if (ch < 0x20 || ch == 0x7f) snprintf(why, why_len, "has control character 0x%02x at offset %zu", ch, i);
    else if (ch == '/') snprintf(why, why_len, "has '/' at offset %zu", i);
    else snprintf(why, why_len, "has '%c' at offset %zu", ch >= 0x80 ? '?' : ch, i);
    return -1;
  }
  return 0;
}

/* A CKB file through the shared reader (size limit, no FIFO or device,
 * never a wait): the JSON, or NULL with "PATH: problem" in err. */
static json_t *load_ckb_file(const char *path, size_t jflags, char *err, size_t err_len) {
  return mi_file_load_json(path, 0, MI_CKB_MAX_FILE, "CKB file", jflags, err, err_len);
}

/* err without its leading "PATH: " */
static const char *after_path(const char *err, const char *path) {
  size_t n = strlen(path);
  return strncmp(err, path, n) == 0 && err[n] == ':' && err[n + 1] == ' ' ? err + n + 2 : err;
}

static void load_error(mi_ckb *c, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void load_error(mi_ckb *c, const char *file, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->n_load_errors == c->cap_load_errors) {
    size_t cap = c->cap_load_errors ? c->cap_load_errors * 2 : 8;
    char **v = realloc(c->load_errors, cap * sizeof *v);
    if (!v) return;
    c->load_errors = v;
    c->cap_load_errors = cap;
  }
  char *line = NULL;
  if (asprintf(&line, "%s: %s", file, msg) >= 0) c->load_errors[c->n_load_errors++] = line;
}

static const char *str_member(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static int load_schemas(mi_ckb *c, char *err, size_t err_len) {
  char *sdir = path_join(c->dir, "schemas");
  char **files = sdir ? list_dir(sdir, want_json) : NULL;
  if (!files) {
    snprintf(err, err_len, "%s/schemas: cannot read the schema folder (%s)", c->dir,
             strerror(errno));
    free(sdir);
    return -1;
  }
  int rc = 0;
  size_t n = 0;
  while (files[n]) n++;
  c->kinds = calloc(n ? n : 1, sizeof *c->kinds);
  for (size_t i = 0; files[i] && rc == 0; i++) {
    char *path = path_join(sdir, files[i]);
    json_t *doc = load_ckb_file(path, 0, err, err_len);
    if (!doc) {
      rc = -1;
    } else if (strcmp(files[i], "common.json") == 0) {
      c->common_defs = json_incref(json_object_get(doc, "defs"));
      if (!json_is_object(c->common_defs)) {
        snprintf(err, err_len, "%s: field 'defs' must be an object", path);
        rc = -1;
      }
    } else {
      const char *kind = str_member(doc, "kind"), *dir = str_member(doc, "dir");
      json_t *schema = json_object_get(doc, "schema");
      char why[160];
      if (!kind || !dir || !json_is_object(schema)) {
        snprintf(err, err_len, "%s: a schema file needs string 'kind', string 'dir' and object 'schema'",
                 path);
        rc = -1;
      } else if (mi_ckb_name_check(dir, why, sizeof why) != 0) {
        /* "dir": "../x" would make add write outside the CKB. */
        snprintf(err, err_len, "%s: field 'dir' must be one folder name ([a-z0-9][a-z0-9._-]*): '%.80s' %s",
                 path, dir, why);
        for (char *p = err; *p; p++)
          if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
        rc = -1;
      } else {
        ckb_kind *k = &c->kinds[c->n_kinds++];
        k->kind = strdup(kind);
        k->dir = strdup(dir);
        k->file = strdup(path);
        k->schema = json_incref(schema);
        json_t *defs = json_object_get(doc, "defs");
        k->defs = json_is_object(defs) ? json_incref(defs) : NULL;
      }
    }
    json_decref(doc);
    free(path);
  }
  if (rc == 0 && !c->common_defs) {
    snprintf(err, err_len, "%s/common.json: missing (shared schema definitions)", sdir);
    rc = -1;
  }
  free_list(files);
  free(sdir);
  return rc;
}

static void add_entry(mi_ckb *c, const char *path, const char *rel, json_t *doc) {
  if (c->n_entries == c->cap_entries) {
    size_t cap = c->cap_entries ? c->cap_entries * 2 : 32;
    mi_ckb_entry *v = realloc(c->entries, cap * sizeof *v);
    if (!v) {
      json_decref(doc);
      return;
    }
    c->entries = v;
    c->cap_entries = cap;
  }
  mi_ckb_entry *e = &c->entries[c->n_entries++];
  e->json = doc;
  e->path = strdup(path);
  e->rel = strdup(rel);
  e->id = str_member(doc, "id");
  e->kind = str_member(doc, "kind");
  e->version = str_member(doc, "version");
}

static void load_entries(mi_ckb *c) {
  char **subs = list_dir(c->dir, want_subdir);
  for (size_t i = 0; subs && subs[i]; i++) {
    char *sub = path_join(c->dir, subs[i]);
    char **files = sub ? list_dir(sub, want_json) : NULL;
    for (size_t j = 0; files && files[j]; j++) {
      char *path = path_join(sub, files[j]);
      char *rel = path_join(subs[i], files[j]);
      char lerr[900] = "out of memory";
      json_t *doc = path ? load_ckb_file(path, JSON_REJECT_DUPLICATES, lerr, sizeof lerr) : NULL;
      if (!doc) load_error(c, path ? path : subs[i], "%s", path ? after_path(lerr, path) : lerr);
      else if (!json_is_object(doc)) {
        load_error(c, path, "an entry must be a JSON object");
        json_decref(doc);
      } else add_entry(c, path, rel, doc);
      free(path);
      free(rel);
    }
    free_list(files);
    free(sub);
  }
  free_list(subs);
}

mi_ckb *mi_ckb_open(const char *dir, char *err, size_t err_len) {
  struct stat st;
  if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, err_len, "%s: not a CKB directory (%s)", dir ? dir : "(null)",
             dir ? strerror(errno ? errno : ENOTDIR) : "no path");
    return NULL;
  }
  mi_ckb *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->dir = strdup(dir);
  size_t n = strlen(c->dir);
  while (n > 1 && c->dir[n - 1] == '/') c->dir[--n] = 0;
  if (load_schemas(c, err, err_len) != 0) {
    mi_ckb_close(c);
    return NULL;
  }
  load_entries(c);
  return c;
}

void mi_ckb_close(mi_ckb *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n_entries; i++) {
    json_decref(c->entries[i].json);
    free((char *)c->entries[i].path);
    free((char *)c->entries[i].rel);
  }
  free(c->entries);
  for (size_t i = 0; i < c->n_kinds; i++) {
    free(c->kinds[i].kind);
    free(c->kinds[i].dir);
    free(c->kinds[i].file);
    json_decref(c->kinds[i].schema);
    json_decref(c->kinds[i].defs);
  }
  free(c->kinds);
  for (size_t i = 0; i < c->n_load_errors; i++) free(c->load_errors[i]);
  free(c->load_errors);
  json_decref(c->common_defs);
  free(c->dir);
  free(c);
}

const char *mi_ckb_dir(const mi_ckb *c) { return c->dir; }
size_t mi_ckb_count(const mi_ckb *c) { return c->n_entries; }
const mi_ckb_entry *mi_ckb_at(const mi_ckb *c, size_t i) {
  return i < c->n_entries ? &c->entries[i] : NULL;
}

const mi_ckb_entry *mi_ckb_find(const mi_ckb *c, const char *id) {
  for (size_t i = 0; id && i < c->n_entries; i++)
    if (c->entries[i].id && strcmp(c->entries[i].id, id) == 0) return &c->entries[i];
  return NULL;
}

size_t mi_ckb_kind_count(const mi_ckb *c) { return c->n_kinds; }
const char *mi_ckb_kind_at(const mi_ckb *c, size_t i) {
  return i < c->n_kinds ? c->kinds[i].kind : NULL;
}

const ckb_kind *ckb_kind_find(const mi_ckb *c, const char *kind) {
  for (size_t i = 0; kind && i < c->n_kinds; i++)
    if (strcmp(c->kinds[i].kind, kind) == 0) return &c->kinds[i];
  return NULL;
}

const char *mi_ckb_kind_dir(const mi_ckb *c, const char *kind) {
  const ckb_kind *k = ckb_kind_find(c, kind);
  return k ? k->dir : NULL;
}

/* "1.2.3-rc1": numeric parts compared as numbers; a pre-release sorts
 * before the release. */
static int parse_ver(const char *s, long v[3], const char **pre) {
  if (!s) return -1;
  char *end;
  for (int i = 0; i < 3; i++) {
    if (*s < '0' || *s > '9') return -1;
    v[i] = strtol(s, &end, 10);
    s = end;
    if (i < 2) {
      if (*s != '.') return -1;
      s++;
    }
  }
  if (*s && *s != '-') return -1;
  *pre = *s ? s + 1 : NULL;
  return 0;
}

int mi_ckb_version_cmp(const char *a, const char *b) {
  long va[3], vb[3];
  const char *pa = NULL, *pb = NULL;
  int oka = parse_ver(a, va, &pa) == 0, okb = parse_ver(b, vb, &pb) == 0;
  if (!oka || !okb) return oka - okb;
  for (int i = 0; i < 3; i++)
    if (va[i] != vb[i]) return va[i] < vb[i] ? -1 : 1;
  if (!pa || !pb) return (pa ? -1 : 0) + (pb ? 1 : 0);
  return strcmp(pa, pb);
}

static int is_ckb_dir(const char *d) {
  char p[4096];
  struct stat st;
  snprintf(p, sizeof p, "%s/schemas/common.json", d);
  return stat(p, &st) == 0;
}

const char *mi_ckb_default_dir(const char *argv0, char *buf, size_t n) {
  const char *env = getenv("MI_CKB_DIR");
  if (env && *env) {
    snprintf(buf, n, "%s", env);
    return buf;
  }
  if (is_ckb_dir("ckb")) {
    snprintf(buf, n, "ckb");
    return buf;
  }
  const char *const rel[] = {"../share/metainfer/ckb", "../../ckb"};
  if (mi_exe_rel_dir(argv0, rel, 2, is_ckb_dir, buf, n)) return buf;
  snprintf(buf, n, "no CKB folder found: tried $MI_CKB_DIR, ./ckb, <exe>/../share/metainfer/ckb, <exe>/../../ckb; pass --ckb DIR");
  return NULL;
}
