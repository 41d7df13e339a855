/* The GPU platform plugins this build made, as the tests that load each of
 * them see them: GPU_TEST_PLUGINS (gpu_test_config.h, written by
 * tests/gpu/CMakeLists.txt from what gpu_plugin.cmake built) as a table. */
#ifndef MI_TESTS_GPU_GPU_TEST_PLUGINS_H
#define MI_TESTS_GPU_GPU_TEST_PLUGINS_H

#include "gpu_test_config.h"

typedef struct gpu_plugin_info {
  const char *name, *api;
  int have_code;                /* built with device code for arch */
  const char *code_file, *arch; /* the code object the plugin embeds, its target */
} gpu_plugin_info;

static const gpu_plugin_info plugins[] = {GPU_TEST_PLUGINS};
#define NPLUGINS ((int)(sizeof plugins / sizeof plugins[0]))

#endif
