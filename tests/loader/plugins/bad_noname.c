/* Broken: name is NULL. */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC(NULL, "0.1")};
MI_PLUGIN_DEFINE(desc)
