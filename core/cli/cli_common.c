/* See cli_common.h. */
#include "core/cli/cli_common.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/loader.h"
#include "core/util/num.h"
#include "core/util/out.h"
#include "mi/plugin.h"

#ifndef MI_VERSION
#define MI_VERSION "0.1.0"
#endif

/* every number through the shared strict parser (core/util/num.h) */
int cli_parse_long(const char *prog, const char *opt, const char *arg, long lo, long hi,
                   long *out) {
  int64_t v;
  if (mi_opt_i64(prog, opt, arg, lo, hi, &v)) return -1;
  *out = (long)v;
  return 0;
}

int cli_int_option(const char *prog, const cli_int_opt *tab, size_t n, int code, const char *arg,
                   long *out) {
  for (size_t i = 0; i < n; i++)
    if (tab[i].code == code)
      return cli_parse_long(prog, tab[i].name, arg, tab[i].lo, tab[i].hi, out);
  return 0;
}

int cli_kv_type(const char *prog, const char *arg, const char **out) {
  if (strcmp(arg, "f32") && strcmp(arg, "f16") && strcmp(arg, "bf16")) {
    fprintf(stderr, "%s: --kv-type must be f32, f16 or bf16, got '%s'\n", prog, arg);
    return -1;
  }
  *out = arg;
  return 0;
}

int cli_other_option(const char *prog, int code, int is_version, char **argv) {
  if (is_version) {
    printf("%s (MetaInfer) %s, plugin ABI %d.%d\n", prog, MI_VERSION, MI_ABI_MAJOR, MI_ABI_MINOR);
    return mi_out_finish(prog, 0);
  }
  fprintf(stderr,
          code == ':' ? "%s: option %s needs a value (see --help)\n"
                      : "%s: unknown option %s (see --help)\n",
          prog, argv[optind - 1]);
  return 2;
}

int cli_no_operands(const char *prog, int argc, char **argv) {
  if (optind >= argc) return -1;
  fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, argv[optind]);
  return 2;
}

struct mi_registry *cli_load_registry(const char *plugin_dir, const char *conf_path, long threads,
                                      char tbuf[32], int *fatal, char *err, size_t err_len) {
  mi_kv extra[1];
  size_t n_extra = 0;
  if (threads > 0) {
    snprintf(tbuf, 32, "%ld", threads);
    extra[n_extra++] = (mi_kv){"threads", tbuf};
  }
  mi_loader_opts lo = {.plugin_dir = plugin_dir,
                       .conf_path = conf_path,
                       .exe_path = NULL,
                       .extra_opts = extra,
                       .n_extra_opts = n_extra};
  *fatal = 0;
  return mi_registry_load(&lo, fatal, err, err_len);
}

mi_options cli_model_opts(mi_kv mopts[2], const char *kv_type, long batch, char bbuf[32]) {
  size_t n = 0;
  if (kv_type) mopts[n++] = (mi_kv){"kv_type", kv_type};
  if (batch > 0) {
    snprintf(bbuf, 32, "%ld", batch);
    mopts[n++] = (mi_kv){"batch", bbuf};
  }
  return (mi_options){mopts, n};
}
