/* The core side of the host API: logging and the table lent to plugins. */
#ifndef MI_CORE_HOST_H
#define MI_CORE_HOST_H

#include <stdarg.h>

#include "mi/host.h"

/* The table handed to every plugin's probe/init. */
const mi_host_api *mi_host_api_get(void);

/* Log to stderr (never stdout): "mi: [who] message". Levels above the
 * current verbosity are dropped. */
void mi_log(mi_log_level level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mi_vlog(mi_log_level level, const char *who, const char *fmt, va_list ap);
void mi_log_set_level(mi_log_level level);
mi_log_level mi_log_get_level(void);

/* Progress reporting: off unless enabled (CLIs enable it on a terminal). */
void mi_progress_enable(int on);

/* jansson json_t* <-> mi_json* (the opaque type plugins see). */
struct json_t;
static inline const mi_json *mi_json_wrap(const struct json_t *j) { return (const mi_json *)j; }

/* Option lookup (last match wins, so later options override earlier ones). */
const char *mi_opt_get(const mi_options *opts, const char *key);

#endif
