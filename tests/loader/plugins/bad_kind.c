/* Broken: a kind no core knows. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-kind", "0.1"), .kind = 9};
MI_PLUGIN_DEFINE(desc)
