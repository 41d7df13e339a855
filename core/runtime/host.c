/* The host API table: logging, memory, options, JSON (jansson) and weights,
 * lent to plugins so they never link the core. */
#include "core/runtime/host.h"
#include "mi/plugin.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/safetensors.h"

static mi_log_level g_level = MI_LOG_WARN;
static int g_progress = 0;

void mi_log_set_level(mi_log_level level) { g_level = level; }
mi_log_level mi_log_get_level(void) { return g_level; }
void mi_progress_enable(int on) { g_progress = on; }

void mi_vlog(mi_log_level level, const char *who, const char *fmt, va_list ap) {
  if (level > g_level) return;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  /* One write per line so lines from threads/processes do not interleave. */
  char line[2300];
  int n = snprintf(line, sizeof line, "mi: %s%s%s%s: %s\n", who ? "[" : "", who ? who : "",
                   who ? "] " : "", names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
  if (n > (int)sizeof line) n = (int)sizeof line;
  if (n > 0) (void)!write(STDERR_FILENO, line, (size_t)n);
}

void mi_log(mi_log_level level, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  mi_vlog(level, who, fmt, ap);
  va_end(ap);
}

static void *host_alloc(size_t size, size_t align) {
  if (align < sizeof(void *)) align = sizeof(void *);
  void *p = NULL;
  if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
  return p;
}

static void host_free(void *p) { free(p); }

const char *mi_opt_get(const mi_options *opts, const char *key) {
  if (!opts || !key) return NULL;
  for (size_t i = opts->count; i-- > 0;)
    if (opts->items[i].key && strcmp(opts->items[i].key, key) == 0) return opts->items[i].value;
  return NULL;
}

static const json_t *J(const mi_json *v) { return (const json_t *)v; }

static mi_json_type host_json_type(const mi_json *v) {
  if (!v) return MI_JSON_INVALID;
  switch (json_typeof(J(v))) {
  case JSON_NULL: return MI_JSON_NULL;
  case JSON_TRUE:
  case JSON_FALSE: return MI_JSON_BOOL;
  case JSON_INTEGER: return MI_JSON_INT;
  case JSON_REAL: return MI_JSON_REAL;
  case JSON_STRING: return MI_JSON_STRING;
  case JSON_ARRAY: return MI_JSON_ARRAY;
  case JSON_OBJECT: return MI_JSON_OBJECT;
  }
  return MI_JSON_INVALID;
}

static const mi_json *host_json_get(const mi_json *obj, const char *key) {
  if (!obj || !json_is_object(J(obj))) return NULL;
  return (const mi_json *)json_object_get(J(obj), key);
}

static size_t host_json_array_size(const mi_json *arr) {
  return arr && json_is_array(J(arr)) ? json_array_size(J(arr)) : 0;
}

static const mi_json *host_json_array_get(const mi_json *arr, size_t i) {
  if (!arr || !json_is_array(J(arr))) return NULL;
  return (const mi_json *)json_array_get(J(arr), i);
}

static int host_json_int(const mi_json *v, int64_t *out) {
  if (!v || !json_is_integer(J(v))) return -1;
  *out = (int64_t)json_integer_value(J(v));
  return 0;
}

static int host_json_real(const mi_json *v, double *out) {
  if (!v || !json_is_number(J(v))) return -1;
  *out = json_number_value(J(v));
  return 0;
}

static int host_json_bool(const mi_json *v, int *out) {
  if (!v || !json_is_boolean(J(v))) return -1;
  *out = json_is_true(J(v));
  return 0;
}

static const char *host_json_string(const mi_json *v) {
  return v && json_is_string(J(v)) ? json_string_value(J(v)) : NULL;
}

static void host_progress(const char *what, double done, double total) {
  if (!g_progress) return;
  fprintf(stderr, "\rmi: %s %5.1f%%%s", what, total > 0 ? 100.0 * done / total : 0.0,
          done >= total ? "\n" : "");
}

static const mi_host_api g_host = {
    .struct_size = sizeof(mi_host_api),
    .abi_minor = MI_ABI_MINOR,
    .log = mi_log,
    .alloc = host_alloc,
    .free = host_free,
    .opt_get = mi_opt_get,
    .json_type = host_json_type,
    .json_get = host_json_get,
    .json_array_size = host_json_array_size,
    .json_array_get = host_json_array_get,
    .json_int = host_json_int,
    .json_real = host_json_real,
    .json_bool = host_json_bool,
    .json_string = host_json_string,
    .progress = host_progress,
    .weights_find = mi_weights_find,
    .weights_count = mi_weights_count,
    .weights_at = mi_weights_at,
};

const mi_host_api *mi_host_api_get(void) { return &g_host; }
