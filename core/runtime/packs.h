/* Kernel packs at run time (ABI 1.6, mi/kernel_pack.h): the loaded
 * plugins of kind "kernels" bound to the session's platform, handed to the
 * model in its load args. A pack the platform cannot host (its bind
 * refuses: no run_host, device memory that is not host memory) is left out
 * with one warning line naming the pack and the reason; a model that needs
 * one of its kernels then fails to load, naming the operator. */
#ifndef MI_CORE_RUNTIME_PACKS_H
#define MI_CORE_RUNTIME_PACKS_H

#include "core/runtime/loader.h"
#include "mi/kernel_pack.h"

#define MI_PACKS_MAX 16
#define MI_PACK_MAX_KERNELS 4096 /* a count past this is a corrupt table, not a pack */

/* Binds one loaded kernels plugin to the platform into *out. 0, or -1 with
 * "PATH: kernel pack NAME: reason" in err. */
int mi_pack_bind_plugin(const mi_plugin *p, const mi_platform_iface *P, void *pc, mi_pack_ref *out, char *err,
                        size_t err_len);

/* Every loaded kernels plugin of reg bound to the platform, at most max,
 * into out; the count. Refusals are warnings on stderr (prefix `who`). */
int mi_packs_bind(const mi_registry *reg, const mi_platform_iface *P, void *pc, mi_pack_ref *out, int max,
                  const char *who);

#endif
