/* What mi-run and mi-serve read and set up the same way: the strict
 * integer options, --kv-type, getopt's leftovers, and the plugin and model
 * options built from the command line. */
#ifndef MI_CORE_CLI_COMMON_H
#define MI_CORE_CLI_COMMON_H

#include <stddef.h>

#include "mi/host.h"

struct mi_registry;

/* An integer option's name (as said in errors) and range. */
typedef struct cli_int_opt {
  int code; /* getopt_long's answer for it */
  const char *name;
  long lo, hi;
} cli_int_opt;

/* arg in [lo, hi] into *out (core/util/num.h's strict parser); -1 after a
 * line on stderr. */
int cli_parse_long(const char *prog, const char *opt, const char *arg, long lo, long hi, long *out);
/* When code is one of tab's options, its arg into *out; -1 after a line on
 * stderr when it is out of range, else 0 (also for any other code). */
int cli_int_option(const char *prog, const cli_int_opt *tab, size_t n, int code, const char *arg,
                   long *out);
/* --kv-type: f32, f16 or bf16 into *out; -1 after a line on stderr. */
int cli_kv_type(const char *prog, const char *arg, const char **out);
/* The getopt_long answers no tool handles itself: --version (is_version),
 * a missing value (':'), an unknown option. The exit status. */
int cli_other_option(const char *prog, int code, int is_version, char **argv);
/* After getopt_long: 2 after a line on stderr when an operand is left,
 * else -1 (go on). */
int cli_no_operands(const char *prog, int argc, char **argv);

/* The registry of the plugins (-t N given to them as "threads", its text in
 * tbuf); NULL only when out of memory; *fatal and err as mi_registry_load. */
struct mi_registry *cli_load_registry(const char *plugin_dir, const char *conf_path, long threads,
                                      char tbuf[32], int *fatal, char *err, size_t err_len);
/* The model plugin's options from --kv-type and -b (its text in bbuf),
 * in mopts[2]. */
mi_options cli_model_opts(mi_kv mopts[2], const char *kv_type, long batch, char bbuf[32]);

#endif
