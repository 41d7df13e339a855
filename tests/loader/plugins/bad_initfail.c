/* Broken: init fails with a message (a multi-line one: the loader must keep
 * its log line to one line). */
#include "minimal_platform.h"

static int fail_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                     size_t n) {
  snprintf(err, n, "cannot open /dev/fake0:\nno such device");
  return -1;
}

static const mi_plugin_desc desc = {MP_DESC("bad-initfail", "0.1"), .init = fail_init};
MI_PLUGIN_DEFINE(desc)
