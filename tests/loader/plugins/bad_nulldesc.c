/* Broken: the entry point returns NULL. */
#include "mi/plugin.h"

MI_EXPORT const mi_plugin_desc *mi_plugin_get_descriptor(void);
MI_EXPORT const mi_plugin_desc *mi_plugin_get_descriptor(void) { return NULL; }
