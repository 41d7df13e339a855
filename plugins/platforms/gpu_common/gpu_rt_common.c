/* Shared bits of the runtime tables (gpu_rt.h). */
#include <stdarg.h>
#include <stdio.h>

#include "gpu_rt.h"

int gpu_rt_fail(gpu_rt *rt, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rt->err, sizeof rt->err, fmt, ap);
  va_end(ap);
  return -1;
}
