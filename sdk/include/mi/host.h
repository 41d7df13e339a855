/* The host API table: what the core lends to every plugin.
 * Plugins use these rather than linking the core's internals, so one plugin
 * binary works with any core of the same ABI major. */
#ifndef MI_HOST_H
#define MI_HOST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mi_log_level {
  MI_LOG_ERROR = 0,
  MI_LOG_WARN = 1,
  MI_LOG_INFO = 2,
  MI_LOG_DEBUG = 3,
} mi_log_level;

/* key=value options from plugins.conf and the command line. */
typedef struct mi_kv {
  const char *key;
  const char *value;
} mi_kv;

typedef struct mi_options {
  const mi_kv *items;
  size_t count;
} mi_options;

/* An opaque JSON value owned by the core (backed by jansson). */
typedef struct mi_json mi_json;

typedef enum mi_json_type {
  MI_JSON_NULL = 0,
  MI_JSON_BOOL,
  MI_JSON_INT,
  MI_JSON_REAL,
  MI_JSON_STRING,
  MI_JSON_ARRAY,
  MI_JSON_OBJECT,
  MI_JSON_INVALID,
} mi_json_type;

/* One tensor of a model's weight files, as stored (mmapped, read-only). */
typedef struct mi_weight_info {
  const char *name;
  int dtype; /* mi_dtype */
  int ndim;
  int64_t shape[8];
  const void *data; /* host address inside the mmapped file */
  size_t nbytes;
  const char *file; /* the file it lives in */
} mi_weight_info;

typedef struct mi_weights mi_weights; /* a model's weight files */

typedef struct mi_host_api {
  uint32_t struct_size;
  uint32_t abi_minor;

  /* logging: goes to stderr (never stdout), prefixed with the plugin name */
  void (*log)(mi_log_level level, const char *who, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;

  /* memory: aligned host allocation (align a power of two, >= sizeof(void*)) */
  void *(*alloc)(size_t size, size_t align);
  void (*free)(void *p);

  /* options: the value for key, or NULL */
  const char *(*opt_get)(const mi_options *opts, const char *key);

  /* JSON: read-only access to documents the core parsed (config.json, ...).
   * Returned values are borrowed from their parent; NULL when absent. */
  mi_json_type (*json_type)(const mi_json *v);
  const mi_json *(*json_get)(const mi_json *obj, const char *key);
  size_t (*json_array_size)(const mi_json *arr);
  const mi_json *(*json_array_get)(const mi_json *arr, size_t i);
  int (*json_int)(const mi_json *v, int64_t *out);  /* 0 ok, -1 wrong type */
  int (*json_real)(const mi_json *v, double *out);  /* ints convert */
  int (*json_bool)(const mi_json *v, int *out);
  const char *(*json_string)(const mi_json *v);     /* NULL if not a string */

  /* progress: long operations (loading, verification) report here */
  void (*progress)(const char *what, double done, double total);

  /* weights: find a tensor by name in a model's weight files */
  int (*weights_find)(const mi_weights *w, const char *name, mi_weight_info *out);
  size_t (*weights_count)(const mi_weights *w);
  int (*weights_at)(const mi_weights *w, size_t i, mi_weight_info *out);
} mi_host_api;

#ifdef __cplusplus
}
#endif
#endif
