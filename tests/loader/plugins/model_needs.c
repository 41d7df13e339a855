/* Test model plugins for platform_needs (ABI 1.2), built into
 * tests/plugins/compat/ with one of:
 *   NEEDS_OK       abi 1.2, needs add + matmul always, rope with tp > 1,
 *                  convert when option kv_type is not f32
 *   NEEDS_NULL     abi 1.2 with platform_needs NULL: rejected
 *   NEEDS_UNKNOWN  abi 1.2 naming a member no platform has: rejected
 *   NEEDS_OLD      abi 1.1, interface without platform_needs: loads, and
 *                  pairs with any platform as before
 * Nothing but the loader and the compatibility check looks at them. */
#include <stddef.h>
#include <stdlib.h>

#include "mi/model.h"
#include "mi/plugin.h"

#define END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

static const char *const archs[] = {"TestNeedsForCausalLM", NULL};

#if defined(NEEDS_OK)
#define NAME "needs-ok"
static const mi_platform_need needs[] = {
    {"add", MI_NEED_ALWAYS, NULL, NULL},
    {"matmul", MI_NEED_ALWAYS, NULL, NULL},
    {"rope", MI_NEED_TP, NULL, NULL},
    {"convert", MI_NEED_OPTION, "kv_type", "f32"},
    {NULL, 0, NULL, NULL},
};
#define NEEDS needs
#elif defined(NEEDS_UNKNOWN)
#define NAME "needs-unknown"
static const mi_platform_need needs[] = {{"frobnicate", MI_NEED_ALWAYS, NULL, NULL}, {NULL, 0, NULL, NULL}};
#define NEEDS needs
#elif defined(NEEDS_NULL)
#define NAME "needs-null"
#define NEEDS NULL
#else
#define NAME "needs-old"
#define NEEDS NULL
#define OLD 1
#endif

static const mi_model_iface iface = {
#ifdef OLD
    .struct_size = END_OF(mi_model_iface, forward),
#else
    .struct_size = sizeof(mi_model_iface),
#endif
    .architectures = archs,
    .platform_needs = NEEDS,
};

static int init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                size_t n) {
  *ctx = NULL;
  return 0;
}
static const void *get_iface(void *ctx) { return &iface; }

static const mi_plugin_desc desc = {
    .abi_major = MI_ABI_MAJOR,
#ifdef OLD
    .abi_minor = 1,
#else
    .abi_minor = MI_ABI_MINOR,
#endif
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_MODEL,
    .name = NAME,
    .version = "0.1",
    .init = init,
    .get_iface = get_iface,
};
MI_PLUGIN_DEFINE(desc)
