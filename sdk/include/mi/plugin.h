/* MetaInfer plugin ABI: the one descriptor every plugin .so exports.
 *
 * A plugin exports exactly one symbol, MI_PLUGIN_ENTRY_SYMBOL, a function
 * returning a pointer to a const mi_plugin_desc. The core reads the
 * descriptor and checks it BEFORE calling anything else in the plugin:
 *   - abi_major must equal the core's MI_ABI_MAJOR;
 *   - abi_minor must be <= the core's MI_ABI_MINOR (a plugin built against a
 *     newer SDK may use members this core does not know);
 *   - struct_size must cover every member of the plugin's abi_minor;
 *   - kind, name, version, init and get_iface must be set.
 * Any failure is one readable line naming the file and the reason; the
 * plugin is skipped, or the run stops when plugins.conf marks it required.
 *
 * Compatibility rule (for SDK maintainers): members are only ever appended to
 * the structs in this SDK, and each append bumps MI_ABI_MINOR. Every struct
 * starts with its own size, so the core knows which members a plugin has.
 */
#ifndef MI_PLUGIN_H
#define MI_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "mi/host.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MI_ABI_MAJOR 1
/* 1.1: mi_model_info prefill_flops_token, attn_flops_pos.
 * 1.2: mi_model_iface platform_needs (the platform members a model calls).
 * 1.3: mi_model_iface forward_batch (one decode step for many sequences).
 * 1.4: mi_platform_iface copy2d, l2norm, sigmoid_mul, conv1d_causal,
 *      deltanet_gates, gated_delta_rule, rmsnorm_gated (gated-DeltaNet hybrids).
 * 1.5: mi_model_iface seq_state_read, seq_state_write (prefix caching).
 * 1.6: kernel packs: plugin kind MI_PLUGIN_KERNELS (mi/kernel_pack.h) and
 *      mi_platform_iface run_host (how a platform hosts a pack's kernels). */
#define MI_ABI_MINOR 6

#define MI_PLUGIN_ENTRY_SYMBOL "mi_plugin_get_descriptor"

#if defined(__GNUC__)
#define MI_EXPORT __attribute__((visibility("default")))
#else
#define MI_EXPORT
#endif

typedef enum mi_plugin_kind {
  MI_PLUGIN_PLATFORM = 1, /* devices, memory, kernels: mi/platform.h */
  MI_PLUGIN_MODEL = 2,    /* a model architecture: mi/model.h */
  MI_PLUGIN_AGENT = 3,    /* an agent strategy for mi-gen */
  MI_PLUGIN_ENGINE = 4,   /* a generated single-path engine */
  MI_PLUGIN_KERNELS = 5,  /* a kernel pack: operators generated from the CKB, mi/kernel_pack.h (ABI 1.6) */
} mi_plugin_kind;

typedef struct mi_plugin_desc {
  uint32_t abi_major;   /* MI_ABI_MAJOR the plugin was built against */
  uint32_t abi_minor;   /* MI_ABI_MINOR the plugin was built against */
  uint32_t struct_size; /* sizeof(mi_plugin_desc) as the plugin saw it */
  uint32_t kind;        /* mi_plugin_kind */
  const char *name;     /* short, e.g. "cpu", "qwen3" */
  const char *version;  /* the plugin's own version, e.g. "0.3.1" */
  const char *description;

  /* Cheap, side-effect free: can this plugin run here, and how well?
   * Returns a score 0..100 (0 = cannot run here; the reason goes in `why`).
   * NULL means "always runs, score 1". Must not allocate devices. */
  int (*probe)(const mi_host_api *host, const mi_options *opts, char *why, size_t why_len);

  /* Creates the plugin's context. Returns 0 on success; otherwise a message
   * in err. Called at most once per load. */
  int (*init)(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
              size_t err_len);

  /* Destroys the context made by init. NULL: nothing to free. */
  void (*fini)(void *ctx);

  /* The kind-specific interface (mi_platform_iface, mi_model_iface, ...).
   * Its first member is always a uint32_t struct_size. */
  const void *(*get_iface)(void *ctx);
} mi_plugin_desc;

typedef const mi_plugin_desc *(*mi_plugin_entry_fn)(void);

/* Use once per plugin:  MI_PLUGIN_DEFINE(my_descriptor)  */
#define MI_PLUGIN_DEFINE(desc_var)                                                                 \
  MI_EXPORT const mi_plugin_desc *mi_plugin_get_descriptor(void);                                  \
  MI_EXPORT const mi_plugin_desc *mi_plugin_get_descriptor(void) { return &(desc_var); }

#ifdef __cplusplus
}
#endif
#endif
