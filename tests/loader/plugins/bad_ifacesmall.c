/* Broken: the interface's struct_size is smaller than the ABI 1.0 platform
 * interface (the loader must call fini). */
#include "minimal_platform.h"

static const mi_platform_iface small = {.struct_size = 8};
static const void *small_iface(void *ctx) { return &small; }

static const mi_plugin_desc desc = {MP_DESC("bad-ifacesmall", "0.1"), .get_iface = small_iface};
MI_PLUGIN_DEFINE(desc)
