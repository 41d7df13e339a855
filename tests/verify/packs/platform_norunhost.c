/* The CPU platform without run_host (as a platform built before ABI 1.6):
 * the real plugin with that member NULL, through the mutants' wrapper.
 * Every kernel of its own still passes; a host-C kernel pack must refuse
 * to bind to it, and stage 1 --pack must report that refusal. */
#include <stddef.h>

#include "mutant.h"

const char mutant_name[] = "cpu_norunhost";

void mutant_patch(mi_platform_iface *it) {
  it->run_host = NULL;
}
