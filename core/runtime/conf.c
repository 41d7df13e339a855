/* plugins.conf parser (format in core/runtime/conf.h).
 *
 * The file is small and written by people or by mi-gen, so the parser is
 * strict: anything it does not understand is an error "FILE:LINE: problem"
 * rather than a guess. Limits (line length, entry count, file size) keep a
 * corrupt or hostile file from costing more than a few kilobytes.
 */
#include "core/runtime/conf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mi/plugin.h"
#include "core/util/file.h"

#define MI_CONF_MAX_LINE 4096
#define MI_CONF_MAX_ENTRIES 256
#define MI_CONF_MAX_FILE (1u << 20) /* 1 MiB: 256 entries of 4 KiB each */
#define MI_CONF_MAX_TOKENS (MI_CONF_MAX_LINE / 2 + 1)

static const char *const kind_names[] = {NULL, "platform", "model", "agent", "engine", "kernels"};

int mi_plugin_kind_from_string(const char *s) {
  if (!s) return -1;
  for (int k = MI_PLUGIN_PLATFORM; k <= MI_PLUGIN_KERNELS; k++)
    if (strcmp(s, kind_names[k]) == 0) return k;
  return -1;
}

const char *mi_plugin_kind_name(int kind) {
  if (kind >= MI_PLUGIN_PLATFORM && kind <= MI_PLUGIN_KERNELS) return kind_names[kind];
  return "?";
}

static void set_err(char *err, size_t err_len, const char *fmt, ...) {
  if (!err || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

static void entry_free(mi_conf_entry *e) {
  free(e->name);
  free(e->path);
  for (size_t i = 0; i < e->opts.count; i++) {
    free((void *)e->opts.items[i].key);
    free((void *)e->opts.items[i].value);
  }
  free((void *)e->opts.items);
  memset(e, 0, sizeof *e);
}

void mi_conf_free(mi_conf *c) {
  if (!c) return;
  for (size_t i = 0; i < c->count; i++) entry_free(&c->entries[i]);
  free(c->entries);
  free(c->file);
  memset(c, 0, sizeof *c);
}

/* Returns 0 if s[0..n) is valid UTF-8 with no control characters other than
 * tab; otherwise -1 with the 1-based column and a description in *what. */
static int check_text(const unsigned char *s, size_t n, size_t *col, const char **what,
                      unsigned *byte) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    *col = i + 1;
    *byte = c;
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        *what = "control character";
        return -1;
      }
      i++;
      continue;
    }
    /* multi-byte: lead byte gives the length; reject overlongs and surrogates */
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else {
      *what = "invalid UTF-8 byte";
      return -1;
    }
    if (i + len > n) {
      *what = "truncated UTF-8 sequence";
      return -1;
    }
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) {
        *what = "invalid UTF-8 sequence";
        return -1;
      }
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      *what = "invalid UTF-8 sequence";
      return -1;
    }
    if (cp >= 0x80 && cp < 0xa0) { /* C1 controls */
      *what = "control character";
      return -1;
    }
    i += len;
  }
  return 0;
}

/* Parses one line (already length- and charset-checked, NUL-terminated,
 * modifiable). Appends an entry to c unless the line is blank. */
static int parse_line(mi_conf *c, const char *name, int lineno, char *line, char *err,
                      size_t err_len) {
  /* strip a comment: '#' at the start or after whitespace (so key=a#b stays) */
  for (char *p = line; *p; p++) {
    if (*p == '#' && (p == line || p[-1] == ' ' || p[-1] == '\t')) {
      *p = '\0';
      break;
    }
  }
  char *tok[MI_CONF_MAX_TOKENS];
  size_t nt = 0;
  char *save = NULL;
  for (char *p = strtok_r(line, " \t", &save); p; p = strtok_r(NULL, " \t", &save))
    tok[nt++] = p;
  if (nt == 0) return 0;

  static const char *const fields[] = {"KIND", "NAME", "PATH", "required|optional"};
  if (nt < 4) {
    set_err(err, err_len, "%s:%d: missing field %s (expected: KIND NAME PATH required|optional "
            "[key=value ...])", name, lineno, fields[nt]);
    return -1;
  }
  int kind = mi_plugin_kind_from_string(tok[0]);
  if (kind < 0) {
    set_err(err, err_len, "%s:%d: unknown plugin kind '%s' (expected platform, model, agent or "
            "engine)", name, lineno, tok[0]);
    return -1;
  }
  int required;
  if (strcmp(tok[3], "required") == 0) required = 1;
  else if (strcmp(tok[3], "optional") == 0) required = 0;
  else {
    set_err(err, err_len, "%s:%d: expected 'required' or 'optional', got '%s'", name, lineno,
            tok[3]);
    return -1;
  }
  for (size_t i = 4; i < nt; i++) {
    char *eq = strchr(tok[i], '=');
    if (!eq) {
      set_err(err, err_len, "%s:%d: option '%s' has no '=' (expected key=value)", name, lineno,
              tok[i]);
      return -1;
    }
    if (eq == tok[i]) {
      set_err(err, err_len, "%s:%d: option '%s' has an empty key", name, lineno, tok[i]);
      return -1;
    }
    for (size_t j = 4; j < i; j++) {
      size_t kl = (size_t)(eq - tok[i]);
      if (strncmp(tok[j], tok[i], kl) == 0 && tok[j][kl] == '=') {
        set_err(err, err_len, "%s:%d: option '%.*s' given twice", name, lineno, (int)kl, tok[i]);
        return -1;
      }
    }
  }
  for (size_t i = 0; i < c->count; i++) {
    if (c->entries[i].kind == kind && strcmp(c->entries[i].name, tok[1]) == 0) {
      set_err(err, err_len, "%s:%d: duplicate entry %s '%s' (first at line %d)", name, lineno,
              tok[0], tok[1], c->entries[i].line);
      return -1;
    }
  }
  if (c->count >= MI_CONF_MAX_ENTRIES) {
    set_err(err, err_len, "%s:%d: more than %d plugin entries", name, lineno,
            MI_CONF_MAX_ENTRIES);
    return -1;
  }

  mi_conf_entry e = {.kind = kind, .required = required, .line = lineno};
  e.name = strdup(tok[1]);
  e.path = strdup(tok[2]);
  size_t nopt = nt - 4;
  mi_kv *items = nopt ? calloc(nopt, sizeof *items) : NULL;
  e.opts.items = items;
  int oom = !e.name || !e.path || (nopt && !items);
  for (size_t i = 0; !oom && i < nopt; i++) {
    char *eq = strchr(tok[4 + i], '=');
    items[i].key = strndup(tok[4 + i], (size_t)(eq - tok[4 + i]));
    items[i].value = strdup(eq + 1);
    e.opts.count = i + 1;
    oom = !items[i].key || !items[i].value;
  }
  /* entries are allocated once at full capacity: at most 256 of them */
  if (!oom && !c->entries) {
    c->entries = calloc(MI_CONF_MAX_ENTRIES, sizeof *c->entries);
    oom = !c->entries;
  }
  if (oom) {
    entry_free(&e);
    set_err(err, err_len, "%s:%d: out of memory", name, lineno);
    return -1;
  }
  c->entries[c->count++] = e;
  return 0;
}

int mi_conf_parse_string(const char *name, const char *text, mi_conf *out, char *err,
                         size_t err_len) {
  memset(out, 0, sizeof *out);
  if (!name) name = "plugins.conf";
  out->file = strdup(name);
  if (!out->file || !text) {
    set_err(err, err_len, "%s: %s", name, text ? "out of memory" : "no text");
    mi_conf_free(out);
    return -1;
  }
  char line[MI_CONF_MAX_LINE + 1];
  const char *p = text;
  int lineno = 0;
  while (*p) {
    lineno++;
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    size_t content = n;
    if (content > 0 && p[content - 1] == '\r') content--; /* CRLF files */
    if (content > MI_CONF_MAX_LINE) {
      set_err(err, err_len, "%s:%d: line longer than %d bytes", name, lineno, MI_CONF_MAX_LINE);
      goto fail;
    }
    size_t col;
    const char *what;
    unsigned byte;
    if (check_text((const unsigned char *)p, content, &col, &what, &byte) != 0) {
      set_err(err, err_len, "%s:%d: %s 0x%02x at column %zu", name, lineno, what, byte, col);
      goto fail;
    }
    memcpy(line, p, content);
    line[content] = '\0';
    if (parse_line(out, name, lineno, line, err, err_len) != 0) goto fail;
    p = nl ? nl + 1 : p + n;
  }
  return 0;
fail:
  mi_conf_free(out);
  return -1;
}

int mi_conf_parse_file(const char *path, mi_conf *out, char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  size_t n;
  /* the shared reader: a FIFO or a device in place of the file is refused,
   * never waited on; the size is checked before reading */
  char *buf = mi_file_read_all(path, 0, MI_CONF_MAX_FILE, "plugins.conf", &n, err, err_len);
  if (!buf) return -1;
  /* A NUL byte would silently end the text: report it like any control char. */
  const char *nul = memchr(buf, '\0', n);
  if (nul) {
    int lineno = 1;
    for (const char *q = buf; q < nul; q++) lineno += *q == '\n';
    set_err(err, err_len, "%s:%d: control character 0x00", path, lineno);
    free(buf);
    return -1;
  }
  buf[n] = '\0';
  int rc = mi_conf_parse_string(path, buf, out, err, err_len);
  free(buf);
  return rc;
}
