/* Fuzzes plugins.conf: mi_conf_parse_string on the input as text, and
 * mi_conf_parse_file on the same bytes (which also sees NUL bytes and the
 * file size limit). Both must agree; an accepted entry must be well formed. */
#include "fuzz_util.h"

#include "core/runtime/conf.h"
#include "core/runtime/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  mi_conf c;
  char err[512] = "";
  int rc = mi_conf_parse_string("fuzz.conf", text, &c, err, sizeof err);
  if (rc != 0) {
    fuzz_check_one_line("mi_conf_parse_string", err);
  } else {
    FUZZ_CHECK(c.count <= 256, "%zu entries", c.count);
    for (size_t i = 0; i < c.count; i++) {
      const mi_conf_entry *e = &c.entries[i];
      FUZZ_CHECK(mi_plugin_kind_name(e->kind)[0] != '?', "kind %d", e->kind);
      /* "a#b" is not a comment (only a # at the start or after a blank is) */
      FUZZ_CHECK(e->name[0] && !strpbrk(e->name, " \t\n"), "name [%s]", e->name);
      FUZZ_CHECK(e->path[0] && !strpbrk(e->path, " \t\n"), "path [%s]", e->path);
      FUZZ_CHECK(e->required == 0 || e->required == 1, "required");
      for (size_t k = 0; k < e->opts.count; k++) {
        FUZZ_CHECK(e->opts.items[k].key[0] && !strchr(e->opts.items[k].key, '='), "key");
        FUZZ_CHECK(mi_opt_get(&e->opts, e->opts.items[k].key) != NULL, "opt lookup");
      }
      for (size_t k = 0; k < i; k++)
        FUZZ_CHECK(c.entries[k].kind != e->kind || strcmp(c.entries[k].name, e->name),
                   "duplicate entry accepted");
    }
    mi_conf_free(&c);
  }
  /* parse_file: same verdict unless the text hid bytes after a NUL */
  mi_conf c2;
  char err2[512] = "";
  int rc2 = mi_conf_parse_file(fuzz_memfile(data, size), &c2, err2, sizeof err2);
  if (rc2 != 0) fuzz_check_one_line("mi_conf_parse_file", err2);
  else mi_conf_free(&c2);
  if (!memchr(data, 0, size) && size <= (1u << 20))
    FUZZ_CHECK(rc == rc2, "parse_string %d vs parse_file %d (%s | %s)", rc, rc2, err, err2);
  free(text);
  return 0;
}
