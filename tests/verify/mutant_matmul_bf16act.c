/* Defect: matmul rounds the activations to bf16 (round to nearest even, as
 * a VDPBF16PS path does) but the plugin claims the exact mode: its variant
 * name drops the "+bf16act" tag the platform contract ties to the
 * bf16_activations mode, so stage 1 holds it to the exact tolerance. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mutant.h"

const char mutant_name[] = "mutant_matmul_bf16act";

static float bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (!isnan(f)) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

static int bad_matmul(void *ctx, mi_stream *s, float *y, const float *x, const void *w,
                      mi_dtype w_dtype, int64_t M, int64_t N, int64_t K) {
  if (M <= 0 || K <= 0 || !x) return mutant_real->matmul(ctx, s, y, x, w, w_dtype, M, N, K);
  float *xr = malloc((size_t)(M * K) * sizeof *xr);
  if (!xr) return -1;
  for (int64_t i = 0; i < M * K; i++) xr[i] = bf16_rne(x[i]); /* host memory on the CPU platform */
  int rc = mutant_real->matmul(ctx, s, y, xr, w, w_dtype, M, N, K);
  free(xr);
  return rc;
}

/* the real name without its "+..." mode tags: "avx512bf16+bf16act" -> "avx512bf16" */
static const char *exact_variant(void *ctx) {
  static char buf[64];
  const char *v = mutant_real->variant ? mutant_real->variant(ctx) : "?";
  size_t n = strcspn(v, "+");
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, v, n);
  buf[n] = 0;
  return buf;
}

void mutant_patch(mi_platform_iface *it) {
  it->matmul = bad_matmul;
  it->variant = exact_variant;
}
