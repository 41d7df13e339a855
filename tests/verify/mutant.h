/* Mutant platform plugins for the verifier's own test: each wraps the real
 * CPU plugin (loaded with dlopen) and replaces one kernel with a defective
 * one. mi-verify stage 1 must reject every mutant, naming the symptom, and
 * pass every kernel that was not touched. */
#ifndef MI_TEST_MUTANT_H
#define MI_TEST_MUTANT_H

#include "mi/platform.h"
#include "mi/plugin.h"

/* The real CPU plugin's interface, for mutants that call through. */
extern const mi_platform_iface *mutant_real;

/* Defined by each mutant: its name and the one member it replaces. */
extern const char mutant_name[];
void mutant_patch(mi_platform_iface *it);

#endif
