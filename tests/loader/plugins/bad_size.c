/* Broken: struct_size smaller than the ABI 1.0 descriptor. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-size", "0.1"), .struct_size = 16};
MI_PLUGIN_DEFINE(desc)
