/* The generated-engine interface. An engine plugin (kind MI_PLUGIN_ENGINE) is
 * what `mi-gen` builds: one model shape, one platform, one TP degree, one
 * dtype, baked in. Its interface EMBEDS the model interface as its first
 * member, so the core runs an engine exactly as it runs a model plugin
 * (mi_session: check_config, load, seq_*, forward) -- nothing in the
 * runtime path can tell the two apart, and nothing has to.
 *
 *   get_iface() returns a const mi_engine_iface *; its first uint32_t is
 *   model.struct_size (the loader checks it covers the ABI 1.0 model
 *   interface), and (const mi_model_iface *)iface is valid.
 *
 * check_config accepts exactly the config the engine was generated for and
 * refuses any other with one line naming the first field that differs.
 * Members after `model` are only ever appended.
 */
#ifndef MI_ENGINE_H
#define MI_ENGINE_H

#include <stdint.h>

#include "mi/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_engine_iface {
  mi_model_iface model;      /* first: an engine is a model interface */
  uint32_t struct_size;      /* sizeof(mi_engine_iface) as the engine saw it */
  const char *constraints;   /* JSON text: model contract, platform, dtype, tp, kv_type */
  const char *config_digest; /* the accepted config fields, "name=value;..." */
  const char *generator;     /* e.g. "implementer.compose 0.1.0" */
} mi_engine_iface;

#ifdef __cplusplus
}
#endif
#endif
