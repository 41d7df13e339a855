/* Broken: built against a newer SDK (minor 5) than this core. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-minor", "0.1"), .abi_minor = MI_ABI_MINOR + 5};
MI_PLUGIN_DEFINE(desc)
