/* Unsuited: a valid plugin whose probe scores 0 here (like a GPU plugin on a
 * machine without the GPU). */
#include "minimal_platform.h"

static int probe0(const mi_host_api *host, const mi_options *opts, char *why, size_t n) {
  snprintf(why, n, "no fake accelerator found");
  return 0;
}

static const mi_plugin_desc desc = {MP_DESC("bad-probe0", "0.1"), .probe = probe0};
MI_PLUGIN_DEFINE(desc)
