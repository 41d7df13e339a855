/* loader_sdk_check PLUGIN.so: loads a platform plugin built out of tree from
 * sdk/templates/platform and runs its kernels through device buffers,
 * against float64 references. Exit 0 when all agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "mi/platform.h"

#define SDK_CHECK_NAME "loader_sdk_check"
#include "sdk_check_util.h"

static float urand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* Uploads n bytes into a fresh device buffer. */
static float *upload(const mi_platform_iface *pf, void *ctx, mi_buffer **b, const void *src,
                     size_t n) {
  if (pf->buffer_alloc(ctx, n, b) != 0) return NULL;
  void *d = pf->buffer_ptr(ctx, *b);
  if (src && pf->memcpy_h2d(ctx, NULL, d, src, n) != 0) return NULL;
  return d;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: loader_sdk_check PLUGIN.so\n");
    return 2;
  }
  mi_plugin *p = mi_plugin_load_file(argv[1], NULL);
  if (!p || p->status != MI_PLUGIN_LOADED) {
    fprintf(stderr, "loader_sdk_check: %s: %s\n", argv[1], p && p->reason ? p->reason : "?");
    mi_plugin_unload(p);
    return 1;
  }
  CHECK(mi_plugin_kind_of(p) == MI_PLUGIN_PLATFORM, "not a platform plugin");
  const mi_platform_iface *pf = p->iface;
  void *ctx = p->ctx;
  CHECK(mi_platform_has(pf, add) && mi_platform_has(pf, matmul) && mi_platform_has(pf, memcpy_h2d)
        && mi_platform_has(pf, memcpy_d2h), "add/matmul/memcpy missing");
  if (fails) return 1;

  /* add: exact (one IEEE rounding of the exact sum) */
  enum { N = 4096 };
  static float a[N], b[N], y[N];
  srand(1234);
  for (int i = 0; i < N; i++) a[i] = urand() * 100, b[i] = urand();
  mi_buffer *ba, *bb, *by;
  float *da = upload(pf, ctx, &ba, a, sizeof a), *db = upload(pf, ctx, &bb, b, sizeof b);
  float *dy = upload(pf, ctx, &by, NULL, sizeof y);
  CHECK(da && db && dy, "buffer alloc/upload failed: %s", pf->last_error(ctx));
  if (fails) return 1;
  CHECK(pf->add(ctx, NULL, dy, da, db, N) == 0, "add failed");
  CHECK(pf->memcpy_d2h(ctx, NULL, y, dy, sizeof y) == 0, "d2h failed");
  int bad = 0;
  for (int i = 0; i < N; i++) bad += y[i] != (float)((double)a[i] + (double)b[i]);
  CHECK(bad == 0, "add: %d of %d elements differ from the float64 reference", bad, N);

  /* matmul, f32 and bf16 weights: y[M,Nn] = x[M,K] · w[Nn,K]ᵀ */
  enum { M = 4, NN = 33, K = 65 };
  static float x[M * K], w[NN * K], out[M * NN];
  static uint16_t wb[NN * K];
  for (int i = 0; i < M * K; i++) x[i] = urand();
  for (int i = 0; i < NN * K; i++) w[i] = urand(), wb[i] = mi_f32_to_bf16(w[i]);
  mi_buffer *bx, *bw, *bwb, *bo;
  float *dx = upload(pf, ctx, &bx, x, sizeof x), *dw = upload(pf, ctx, &bw, w, sizeof w);
  float *dwb = upload(pf, ctx, &bwb, wb, sizeof wb), *dout = upload(pf, ctx, &bo, NULL, sizeof out);
  CHECK(dx && dw && dwb && dout, "upload failed");
  if (fails) return 1;
  for (int bf = 0; bf < 2; bf++) {
    CHECK(pf->matmul(ctx, NULL, dout, dx, bf ? (const void *)dwb : dw,
                     bf ? MI_DTYPE_BF16 : MI_DTYPE_F32, M, NN, K) == 0, "matmul failed");
    pf->memcpy_d2h(ctx, NULL, out, dout, sizeof out);
    double max_err = 0;
    for (int m = 0; m < M; m++)
      for (int n = 0; n < NN; n++) {
        double ref = 0;
        for (int k = 0; k < K; k++)
          ref += (double)x[m * K + k] * (bf ? mi_bf16_to_f32(wb[n * K + k]) : w[n * K + k]);
        double e = fabs(out[m * NN + n] - ref);
        if (e > max_err) max_err = e;
      }
    /* f32 accumulation of K=65 terms of magnitude <= 1: well under 1e-4 */
    CHECK(max_err < 1e-4, "matmul %s: max abs error %g vs float64", bf ? "bf16" : "f32", max_err);
    printf("matmul %s [%d,%d]x[%d,%d]^T: max abs error vs float64 %.3g\n", bf ? "bf16" : "f32", M,
           K, NN, K, max_err);
  }
  printf("add n=%d: exact\n", N);
  pf->buffer_free(ctx, ba);
  pf->buffer_free(ctx, bb);
  pf->buffer_free(ctx, by);
  pf->buffer_free(ctx, bx);
  pf->buffer_free(ctx, bw);
  pf->buffer_free(ctx, bwb);
  pf->buffer_free(ctx, bo);
  printf("%s: %s %s loaded, score %d\n", argv[1], mi_plugin_name(p), mi_plugin_version(p),
         p->score);
  mi_plugin_unload(p);
  return fails ? 1 : 0;
}
