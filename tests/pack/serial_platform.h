/* A generated kernel pack opened as the loader would (dlopen, the plugin
 * entry, init, get_iface) and bound to a fake platform whose run_host runs
 * the chunks serially, last first (each chunk must stand on its own), or
 * refuses when sp_run_fails is set: what the kernel-pack tests share
 * (test_pack_gen binds a platform of its own). Each test file includes it once. */
#ifndef MI_TESTS_PACK_SERIAL_PLATFORM_H
#define MI_TESTS_PACK_SERIAL_PLATFORM_H

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "mi/kernel_pack.h"
#include "mi/plugin.h"

static int sp_run_fails = 0;

static int sp_device_info(void *ctx, int device, mi_device_info *out) {
  (void)ctx, (void)device;
  out->host_memory = 1;
  return 0;
}
static const char *sp_last_error(void *ctx) {
  (void)ctx;
  return "fake platform: run_host refused on purpose";
}
static int sp_run_host(void *ctx, mi_stream *s, void (*body)(void *, int64_t, int64_t), void *arg, int64_t n) {
  (void)ctx, (void)s;
  if (sp_run_fails) return -1;
  for (int64_t c = n - 1; c >= 0; c--) body(arg, c, c + 1);
  return 0;
}

typedef struct sp_pack {
  void *dl;
  const mi_plugin_desc *desc;
  void *ctx;
  const mi_kernel_pack_iface *iface;
} sp_pack;

/* Opens the pack library at so (asserting every step); bound to the
 * serial platform when bind. */
static void sp_pack_open(sp_pack *p, const char *so, int bind) {
  p->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(p->dl != NULL, "dlopen %s: %s", so, dlerror());
  mi_plugin_entry_fn entry = (mi_plugin_entry_fn)dlsym(p->dl, MI_PLUGIN_ENTRY_SYMBOL);
  ck_assert_ptr_nonnull(entry);
  p->desc = entry();
  char err[300] = "";
  ck_assert_int_eq(p->desc->init(NULL, NULL, &p->ctx, err, sizeof err), 0);
  p->iface = p->desc->get_iface(p->ctx);
  if (!bind) return;
  static mi_platform_iface plat;
  memset(&plat, 0, sizeof plat);
  plat.struct_size = sizeof plat;
  plat.device_info = sp_device_info;
  plat.last_error = sp_last_error;
  plat.run_host = sp_run_host;
  ck_assert_msg(p->iface->bind(p->ctx, &plat, NULL, err, sizeof err) == 0, "bind: %s", err);
}

static void sp_pack_close(sp_pack *p) {
  p->desc->fini(p->ctx);
  dlclose(p->dl);
}

/* Kernel op's function in the pack (asserted present). */
static void *sp_kernel(const sp_pack *p, const char *op) {
  const mi_pack_kernel *k = mi_pack_find(p->iface, op);
  ck_assert_msg(k && k->fn, "the pack has no kernel for %s", op);
  return (void *)k->fn;
}

#endif
