/* Broken: init is NULL. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-noinit", "0.1"), .init = NULL};
MI_PLUGIN_DEFINE(desc)
