/* Broken: exports no mi_plugin_get_descriptor (a typo'd entry point). */
#include "minimal_platform.h"

static const mi_plugin_desc desc = {MP_DESC("bad-nosym", "0.1")};
MI_EXPORT const mi_plugin_desc *mi_plugin_get_descriptr(void);
MI_EXPORT const mi_plugin_desc *mi_plugin_get_descriptr(void) { return &desc; }
