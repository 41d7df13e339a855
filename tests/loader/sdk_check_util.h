/* What the SDK template checks (sdk_check.c, sdk_model_check.c) share:
 * CHECK counts a failed condition and says why on stderr, prefixed with
 * SDK_CHECK_NAME (define it before including), and the check goes on, so
 * one run reports every disagreement; `fails` is the count main returns on. */
#ifndef MI_TESTS_LOADER_SDK_CHECK_UTIL_H
#define MI_TESTS_LOADER_SDK_CHECK_UTIL_H

#include <stdio.h>

static int fails = 0;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, SDK_CHECK_NAME ": " __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

#endif
