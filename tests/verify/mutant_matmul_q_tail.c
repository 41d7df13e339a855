/* Defect: a block-type matmul whose walk over a row stops one block short
 * (the loop bound written as K / block - 1, or a grid that skips a row's
 * tail): the last block of every weight row never counts. Played by the
 * real kernels on a copy of the weights whose last block in each row has
 * its scales zeroed, so the defect sits in exactly that block; element
 * types and every other kernel are the real plugin's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mi/quant.h"
#include "mutant.h"

const char mutant_name[] = "mutant_matmul_q_tail";

static int bad_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                      mi_dtype w_dtype, int64_t M, int64_t N, int64_t K) {
  const size_t row = mi_dtype_row_bytes(w_dtype, K), bb = mi_dtype_block_bytes(w_dtype);
  if (!mi_dtype_is_block(w_dtype) || !row || N <= 0 || !w)
    return mutant_real->matmul(ctx, s, y, x, w, w_dtype, M, N, K);
  uint8_t *wc = malloc(row * (size_t)N); /* host memory on the CPU platform */
  if (!wc) return -1;
  memcpy(wc, w, row * (size_t)N);
  /* the f16 scales of the row's last block: Q6_K keeps d at its end */
  const size_t d_at = w_dtype == MI_DTYPE_Q6_K ? 208 : 0, d_len = w_dtype == MI_DTYPE_Q4_K ? 4 : 2;
  for (int64_t n = 0; n < N; n++)
    memset(wc + row * (size_t)(n + 1) - bb + d_at, 0, d_len);
  int rc = mutant_real->matmul(ctx, s, y, x, wc, w_dtype, M, N, K);
  free(wc);
  return rc;
}

void mutant_patch(mi_platform_iface *it) {
  it->matmul = bad_matmul;
}
