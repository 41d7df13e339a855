/* plugins.conf: one plugin per line,
 *
 *   # comment
 *   KIND  NAME  PATH  required|optional  [key=value ...]
 *
 * KIND is platform | model | agent | engine | kernels (a kernel pack). Blank lines and '#' comments
 * are ignored. A malformed line is an error naming the file and line.
 */
#ifndef MI_CORE_CONF_H
#define MI_CORE_CONF_H

#include <stddef.h>
#include <stdio.h>

#include "mi/host.h"

typedef struct mi_conf_entry {
  int kind; /* mi_plugin_kind */
  char *name;
  char *path;
  int required;
  int line;
  mi_options opts; /* items owned by the entry */
} mi_conf_entry;

typedef struct mi_conf {
  char *file;
  mi_conf_entry *entries;
  size_t count;
} mi_conf;

/* Parses a file. Returns 0, or -1 with "FILE:LINE: problem" in err. */
int mi_conf_parse_file(const char *path, mi_conf *out, char *err, size_t err_len);
/* Parses text (name is used in messages). */
int mi_conf_parse_string(const char *name, const char *text, mi_conf *out, char *err,
                         size_t err_len);
void mi_conf_free(mi_conf *c);

int mi_plugin_kind_from_string(const char *s); /* -1 if unknown */
const char *mi_plugin_kind_name(int kind);

#endif
