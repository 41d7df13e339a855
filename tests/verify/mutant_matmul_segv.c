/* Defect: matmul dereferences a wild pointer (SIGSEGV). */
#include <stdint.h>

#include "mutant.h"

const char mutant_name[] = "mutant_matmul_segv";

static int bad_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                      mi_dtype w_dtype, int64_t M, int64_t N, int64_t K) {
  (void)ctx, (void)s, (void)x, (void)w, (void)w_dtype, (void)K;
  /* An address in the never-mapped first page, read from a volatile so the
   * compiler cannot prove anything about it (and drop the store). */
  volatile uintptr_t addr = 64;
  float *wild = (float *)addr;
  *wild = y && M * N > 0 ? y[0] : 0.0f;
  return 0;
}

void mutant_patch(mi_platform_iface *it) { it->matmul = bad_matmul; }
