/* Broken: init succeeds, get_iface returns NULL (the loader must call fini). */
#include "minimal_platform.h"

static const void *null_iface(void *ctx) { return NULL; }

static const mi_plugin_desc desc = {MP_DESC("bad-ifacenull", "0.1"), .get_iface = null_iface};
MI_PLUGIN_DEFINE(desc)
