/* Broken: get_iface is NULL. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-noiface", "0.1"), .get_iface = NULL};
MI_PLUGIN_DEFINE(desc)
