/* Broken: built for a future ABI major. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-major", "0.1"), .abi_major = MI_ABI_MAJOR + 1};
MI_PLUGIN_DEFINE(desc)
