/* The wrapper shared by all mutants: a platform plugin whose descriptor
 * forwards to the real CPU plugin, and whose interface is a copy of the real
 * one with mutant_patch() applied. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mutant.h"

const mi_platform_iface *mutant_real;
static const mi_plugin_desc *real;
static mi_platform_iface patched;

static int load_real(char *err, size_t len) {
  if (real) return 0;
  const char *path = getenv("MI_MUTANT_REAL_PLUGIN");
  if (!path) path = MI_CPU_PLUGIN_PATH; /* set by tests/verify/CMakeLists.txt */
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* never closed: its code backs ours */
  mi_plugin_entry_fn entry = dl ? (mi_plugin_entry_fn)dlsym(dl, MI_PLUGIN_ENTRY_SYMBOL) : NULL;
  if (!entry) {
    snprintf(err, len, "mutant: cannot load the real plugin %s: %s", path, dlerror());
    return -1;
  }
  real = entry();
  return 0;
}

static int m_probe(const mi_host_api *host, const mi_options *opts, char *why, size_t len) {
  if (load_real(why, len) != 0) return 0;
  return real->probe ? real->probe(host, opts, why, len) : 1;
}

static int m_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                  size_t len) {
  if (load_real(err, len) != 0) return -1;
  return real->init(host, opts, ctx, err, len);
}

static void m_fini(void *ctx) {
  if (real && real->fini) real->fini(ctx);
}

static const void *m_get_iface(void *ctx) {
  mutant_real = real->get_iface(ctx);
  size_t n = mutant_real->struct_size < sizeof patched ? mutant_real->struct_size : sizeof patched;
  memcpy(&patched, mutant_real, n);
  mutant_patch(&patched);
  return &patched;
}

static const mi_plugin_desc desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = MI_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_PLATFORM,
    .name = mutant_name,
    .version = "0.0.1",
    .description = "the cpu platform with one planted defect (verifier test)",
    .probe = m_probe,
    .init = m_init,
    .fini = m_fini,
    .get_iface = m_get_iface,
};
MI_PLUGIN_DEFINE(desc)
