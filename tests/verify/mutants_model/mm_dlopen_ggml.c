/* Mutant: tries to dlopen a foreign inference library (libggml.so) at load,
 * carrying on when it is absent. Caught by stage 5 (a): the plugin imports
 * dlopen and names libggml. */
#include <dlfcn.h>

#include "mm.h"

void mm_patch(mi_platform_iface *p) {
  (void)p;
  void *h = dlopen("libggml.so", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
}
