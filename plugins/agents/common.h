/* Small helpers shared by the agent plugins (header-only, static). */
#ifndef MI_AGENTS_COMMON_H
#define MI_AGENTS_COMMON_H
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline char *ag_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, r;
  char *b = malloc(cap + 1);
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) b = realloc(b, (cap *= 2) + 1);
  }
  fclose(f);
  if (b) b[n] = 0;
  if (len) *len = n;
  return b;
}

static inline void ag_result(char **result, json_t *res) {
  *result = json_dumps(res, JSON_COMPACT);
  json_decref(res);
}

/* the descriptor, interface and no-op init of an agent plugin; hostv_: the
 * version of the host's services (mi_agent_host) the agent needs, 0 none */
#define AG_DEFINE(role_, strategy_, name_, desc_, run_) AG_DEFINE_V(role_, strategy_, name_, desc_, run_, 0)
#define AG_DEFINE_V(role_, strategy_, name_, desc_, run_, hostv_)                                  \
  static const mi_agent_iface k_iface = {.struct_size = sizeof(mi_agent_iface),                    \
                                         .role = role_,                                            \
                                         .strategy = strategy_,                                    \
                                         .run = run_,                                              \
                                         .host_version = hostv_};                                  \
  static int a_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,        \
                    size_t err_len) {                                                              \
    (void)host, (void)opts, (void)err, (void)err_len;                                              \
    *ctx = NULL;                                                                                   \
    return 0;                                                                                      \
  }                                                                                                \
  static const void *a_iface(void *ctx) {                                                          \
    (void)ctx;                                                                                     \
    return &k_iface;                                                                               \
  }                                                                                                \
  static const mi_plugin_desc k_desc = {.abi_major = MI_ABI_MAJOR, .abi_minor = MI_ABI_MINOR,      \
                                        .struct_size = sizeof(mi_plugin_desc),                     \
                                        .kind = MI_PLUGIN_AGENT, .name = name_,                    \
                                        .version = "0.1.0", .description = desc_,                 \
                                        .init = a_init, .get_iface = a_iface};                     \
  MI_PLUGIN_DEFINE(k_desc)
#endif
