/* The one good test plugin: a minimal platform. GOOD_VERSION tells the
 * copies used by the search-order test apart. */
#include "minimal_platform.h"

#ifndef GOOD_VERSION
#define GOOD_VERSION "1.0.0"
#endif

#ifdef GOOD_ABI10
/* As a plugin built against ABI 1.0 saw it: the interface ends at argmax. */
static mi_platform_iface iface10;
static const void *get_iface10(void *ctx) {
  iface10 = mp_iface;
  iface10.struct_size = offsetof(mi_platform_iface, argmax) + sizeof iface10.argmax;
  return &iface10;
}
static const mi_plugin_desc desc = {MP_DESC("good-abi10", GOOD_VERSION), .abi_minor = 0,
                                    .get_iface = get_iface10};
#else
static const mi_plugin_desc desc = {MP_DESC("good", GOOD_VERSION)};
#endif
MI_PLUGIN_DEFINE(desc)
