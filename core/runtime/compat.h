/* Platform members by name (from the SDK's MI_PLATFORM_MEMBERS list) and the
 * model/platform compatibility check: does a loaded platform provide every
 * member a model plugin declares it needs (mi_model_iface.platform_needs)? */
#ifndef MI_CORE_COMPAT_H
#define MI_CORE_COMPAT_H

#include <stddef.h>

#include "core/runtime/loader.h"
#include "mi/model.h"
#include "mi/platform.h"

/* Byte offset of a mi_platform_iface member, or -1 for a name that is none. */
long mi_platform_member_offset(const char *name);

/* Does `iface` (within the struct_size it declared) provide `name`, non-NULL? */
int mi_platform_provides(const mi_platform_iface *iface, const char *name);

/* The smallest struct_size a platform interface of ABI 1.minor may have:
 * it covers every member of minor <= `minor` in MI_PLATFORM_MEMBERS. */
size_t mi_platform_iface_min_size(unsigned minor);

/* The same for a model interface (1.0/1.1: up to forward; 1.2: platform_needs;
 * 1.3/1.4: forward_batch; 1.5: seq_state_write). */
size_t mi_model_iface_min_size(unsigned minor);

/* Checks a model interface's platform_needs list at load (names known,
 * list bounded). 0, or -1 with a reason. */
int mi_model_needs_valid(const mi_plugin_desc *d, const mi_model_iface *m, char *why, size_t n);

/* Can `platform` serve `model` for this load (tp_size, the model's options)?
 * Counts the core's own needs too (last_error, device_info; comm_info and
 * broadcast with tp > 1). 0, or -1 with one line in err: "platform 'P' cannot serve model
 * 'M': lacks a, b". model_opts may be NULL. */
int mi_compat_check(const mi_plugin *platform, const mi_plugin *model, int tp_size,
                    const mi_options *model_opts, char *err, size_t err_len);

/* For the listing, into out: "M" when the platform serves every plain load
 * of model M, "M (not with --tp > 1: lacks comm_info, broadcast; kv_type
 * other than f32: convert)" when it lacks only conditional needs (returns
 * 0), "M: lacks rope, attention" when it cannot serve M at all (returns -1). */
int mi_compat_describe(const mi_plugin *platform, const mi_plugin *model, char *out, size_t n);

#endif
