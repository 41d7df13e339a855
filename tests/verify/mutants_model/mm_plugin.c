/* The qwen3 descriptor and interface glue, unchanged, with its two calls
 * into the model code routed through the mutant's hooks (see mm.h). */
#define qwen3_model_load mm_model_load
#define qwen3_forward mm_forward
#include "qwen3_plugin.c"
