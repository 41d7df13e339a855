/* The one good test plugin: a minimal platform. GOOD_VERSION tells the
 * copies used by the search-order test apart. */
#include "minimal_platform.h"

#ifndef GOOD_VERSION
#define GOOD_VERSION "1.0.0"
#endif

static const mi_plugin_desc desc = {MP_DESC("good", GOOD_VERSION)};
MI_PLUGIN_DEFINE(desc)
