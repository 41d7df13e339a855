/* Misbehaving: probe (HANG_IN_PROBE) or init (otherwise) never returns.
 * Built into tests/plugins/misbehave/, away from the scanned set. */
#include <unistd.h>

#include "minimal_platform.h"

#ifdef HANG_IN_PROBE
static int hang_probe(const mi_host_api *host, const mi_options *opts, char *why, size_t n) {
  for (;;) pause();
  return 10;
}
static const mi_plugin_desc desc = {MP_DESC("bad-hangprobe", "0.1"), .probe = hang_probe};
#else
static int hang_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                     size_t n) {
  for (;;) pause();
  return -1;
}
static const mi_plugin_desc desc = {MP_DESC("bad-hanginit", "0.1"), .init = hang_init};
#endif
MI_PLUGIN_DEFINE(desc)
