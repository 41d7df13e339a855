/* Kernel packs (ABI 1.6): operators no platform offers, generated from the
 * CKB's operator contracts and built into a plugin of kind
 * MI_PLUGIN_KERNELS. get_iface() returns a mi_kernel_pack_iface.
 *
 * What a pack holds. One kernel per operator contract whose semantics the
 * CKB states as an expression (an operator with a "map" form:
 * ckb/README.md). Each kernel has exactly the signature its contract
 * declares, ctx being the PACK's context (not the platform's):
 *     int fn(void *pack_ctx, mi_stream *s, <the contract's other arguments>)
 * so the verifier calls it through libffi from the contract, as it calls a
 * platform member, and a generated engine calls it like one.
 *
 * Where it runs. A pack names its target. "host-c": portable C over host
 * addresses, run on the threads of a platform that provides run_host
 * (mi/platform.h, ABI 1.6) and whose device memory is host memory (the CPU
 * platform). bind() ties the pack to one loaded platform before any kernel
 * is called; it refuses, with a readable reason, a platform it cannot run
 * on. A kernel called before a successful bind returns -1.
 *
 * Provenance. Each kernel records the contract id and version it was
 * generated from and the expression it computes; the pack's manifest
 * (pack.json beside the library) repeats them with the SHA-256 of the
 * generated source, so a pack is tied to the knowledge it came from.
 */
#ifndef MI_KERNEL_PACK_H
#define MI_KERNEL_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "mi/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MI_PACK_TARGET_HOST_C "host-c"

typedef struct mi_pack_kernel {
  const char *op;         /* the operator contract's id, e.g. "operator.bias_add" */
  const char *op_version; /* the contract version the kernel was generated from */
  const char *math;       /* the expression it computes, as the contract states it */
  void (*fn)(void);       /* the contract's signature, ctx = the pack's context */
} mi_pack_kernel;

typedef struct mi_kernel_pack_iface {
  uint32_t struct_size;
  const char *target; /* MI_PACK_TARGET_HOST_C */
  /* Ties the pack to the platform its kernels run on (its interface and
   * context). 0, or -1 with the reason in err (e.g. no run_host). */
  int (*bind)(void *ctx, const mi_platform_iface *platform, void *platform_ctx, char *err,
              size_t err_len);
  int64_t n_kernels;
  const mi_pack_kernel *kernels;
  /* The last failure's one-line reason (a kernel that returned -1, a bind
   * that refused). Never NULL. */
  const char *(*last_error)(void *ctx);
} mi_kernel_pack_iface;

/* A pack bound to a platform, as a model receives it (mi_model_load_args
 * packs, ABI 1.6): its interface and its context. */
typedef struct mi_pack_ref {
  const mi_kernel_pack_iface *iface;
  void *ctx;
} mi_pack_ref;

/* The kernel computing operator `op` in a pack, or NULL. */
static inline const mi_pack_kernel *mi_pack_find(const mi_kernel_pack_iface *pack, const char *op) {
  for (int64_t i = 0; pack && op && i < pack->n_kernels; i++) {
    const char *a = pack->kernels[i].op, *b = op;
    while (a && *a && *a == *b) a++, b++;
    if (a && *a == *b) return &pack->kernels[i];
  }
  return NULL;
}

#ifdef __cplusplus
}
#endif
#endif
