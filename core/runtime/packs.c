/* Binding kernel packs to the platform a session runs on (core/runtime/packs.h). */
#include "core/runtime/packs.h"

#include <stdio.h>
#include <string.h>

int mi_pack_bind_plugin(const mi_plugin *p, const mi_platform_iface *P, void *pc, mi_pack_ref *out, char *err,
                        size_t err_len) {
  const char *path = p && p->path ? p->path : "?";
  if (!p || p->status != MI_PLUGIN_LOADED || mi_plugin_kind_of(p) != MI_PLUGIN_KERNELS || !p->iface) {
    snprintf(err, err_len, "%s: not a loaded kernel pack%s%s", path, p && p->reason ? ": " : "",
             p && p->reason ? p->reason : "");
    return -1;
  }
  const mi_kernel_pack_iface *k = p->iface;
  const char *name = mi_plugin_name(p);
  if (!k->target || strcmp(k->target, MI_PACK_TARGET_HOST_C)) {
    snprintf(err, err_len, "%s: kernel pack %s: target '%.40s' is not one this core hosts (%s)", path, name,
             k->target ? k->target : "(none)", MI_PACK_TARGET_HOST_C);
    return -1;
  }
  if (!k->bind || !k->last_error || k->n_kernels < 0 || k->n_kernels > MI_PACK_MAX_KERNELS ||
      (k->n_kernels && !k->kernels)) {
    snprintf(err, err_len, "%s: kernel pack %s: no bind or last_error, or a kernel table that does not match its count "
             "(%lld; at most %d)", path, name, (long long)k->n_kernels, MI_PACK_MAX_KERNELS);
    return -1;
  }
  for (int64_t i = 0; i < k->n_kernels; i++) {
    const mi_pack_kernel *pk = &k->kernels[i];
    if (!pk->op || strncmp(pk->op, "operator.", 9) || !pk->op_version || !pk->fn) {
      snprintf(err, err_len, "%s: kernel pack %s: kernel %lld has no operator id, version or function", path, name,
               (long long)i);
      return -1;
    }
  }
  char why[512] = "";
  if (k->bind(p->ctx, P, pc, why, sizeof why) != 0) {
    snprintf(err, err_len, "%s: kernel pack %s cannot run on this platform: %s", path, name,
             why[0] ? why : "its bind refused without a reason");
    return -1;
  }
  out->iface = k;
  out->ctx = p->ctx;
  return 0;
}

int mi_packs_bind(const mi_registry *reg, const mi_platform_iface *P, void *pc, mi_pack_ref *out, int max,
                  const char *who) {
  int n = 0;
  for (size_t i = 0; reg && i < mi_registry_count(reg); i++) {
    const mi_plugin *p = mi_registry_at((mi_registry *)reg, i);
    if (mi_plugin_kind_of(p) != MI_PLUGIN_KERNELS || p->status != MI_PLUGIN_LOADED) continue;
    char err[1024];
    if (n >= max) {
      fprintf(stderr, "%s: warning: more than %d kernel packs; %s left out\n", who, max, p->path);
      continue;
    }
    if (mi_pack_bind_plugin(p, P, pc, &out[n], err, sizeof err) == 0) n++;
    else fprintf(stderr, "%s: warning: %s\n", who, err);
  }
  return n;
}
