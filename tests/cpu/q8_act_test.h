/* What the tests of the CPU platform's quantized matmuls (test_cpu_q8_0,
 * test_cpu_quant) share: the variants they open one by one, activations
 * that reach every case of the quantization, and the activation scheme
 * written out as specified (cpu_q8_0.h), independently of the plugin.
 * Include after cpu_test_harness.h (EXPECT, rng_*, open_with). */
#ifndef MI_TESTS_CPU_Q8_ACT_TEST_H
#define MI_TESTS_CPU_Q8_ACT_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ISAS[] = {"generic", "avx2", "avx512", "avx512bf16"};
#define NISA 4

/* Opens ISA i with `threads`, the exact mode when exact; 0 when this host
 * cannot run it (said on stdout). The plugin's log line above the RUN line
 * names the quantized kernels the variant uses. */
static int open_isa(int i, const char *threads, int exact, plat *p) {
  mi_kv kv[] = {{"isa", ISAS[i]}, {"threads", threads}, {"matmul_act", exact ? "f32" : "auto"}};
  char why[256] = "";
  if (open_with(kv, 3, p, why, sizeof why) <= 0) {
    printf("SKIP isa=%s: not available here (%s)\n", ISAS[i], why);
    return 0;
  }
  printf("RUN isa=%s threads=%s%s\n", ISAS[i], threads, exact ? " matmul_act=f32" : "");
  return 1;
}

/* x [M, K]: blocks of varied magnitude (1e-3 .. 1e2), one of zeros, one
 * with a single outlier, one of values below 2^-100 (quantized to 0). */
static float *rand_x(int64_t M, int64_t K) {
  float *x = malloc((size_t)(M * K) * sizeof *x);
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < K / 32; b++) {
      float *xb = x + m * K + b * 32;
      const int kind = (int)((m * 7 + b) % 9);
      const double mag = pow(10.0, rng_unif(-3, 2));
      for (int i = 0; i < 32; i++)
        xb[i] = (float)(mag * rng_unif(-1, 1));
      if (kind == 3) memset(xb, 0, 32 * sizeof *xb);
      if (kind == 5) xb[(int)(rng_u64() % 32)] = (float)(mag * 300);
      if (kind == 7 && K > 32)
        for (int i = 0; i < 32; i++)
          xb[i] = (float)ldexp(rng_unif(-1, 1), -105);
    }
  return x;
}

/* The activation scheme, as specified: q[32], returns d. */
static float quant_block(int8_t *q, const float *x) {
  float amax = 0.0f;
  int bad = 0;
  for (int i = 0; i < 32; i++) {
    bad |= !isfinite(x[i]);
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
  }
  if (bad || amax < 0x1p-100f) {
    memset(q, 0, 32);
    return bad ? NAN : 0.0f;
  }
  const float d = amax / 127.0f, id = 1.0f / d;
  for (int i = 0; i < 32; i++) {
    const long r = lrintf(x[i] * id); /* round to nearest even */
    EXPECT(r >= -127 && r <= 127, "quantized %ld out of range", r);
    q[i] = (int8_t)r;
  }
  return d;
}

#endif
