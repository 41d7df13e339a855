/* Misbehaving: calls exit(0) from a constructor (EXIT_IN_CTOR, so inside
 * dlopen) or from init (otherwise), printing nothing. Built into
 * tests/plugins/misbehave/, away from the scanned set. */
#include "minimal_platform.h"

#ifdef EXIT_IN_CTOR
__attribute__((constructor)) static void quit_on_load(void) { exit(0); }
static const mi_plugin_desc desc = {MP_DESC("bad-exitctor", "0.1")};
#else
static int quit_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                     size_t n) {
  exit(0);
}
static const mi_plugin_desc desc = {MP_DESC("bad-exitinit", "0.1"), .init = quit_init};
#endif
MI_PLUGIN_DEFINE(desc)
