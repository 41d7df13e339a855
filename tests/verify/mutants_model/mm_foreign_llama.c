/* Mutant: links a foreign inference library (DT_NEEDED libllama.so, built
 * here as a stub) and calls into it at load. Caught by stage 5 (a). */
#include "mm.h"

int llama_backend_init(void);

void mm_patch(mi_platform_iface *p) {
  (void)p;
  llama_backend_init();
}
