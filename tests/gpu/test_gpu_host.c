/* Host-side logic of the GPU plugins, testable without a GPU:
 *  - launch geometry (gpu_launch.c): every output row/column and every
 *    (token, head) pair is covered exactly once, by enumerating blocks the
 *    way the kernels in mi_kernels.cu decode their indices; shared memory and
 *    register budgets hold; split-K key ranges tile [0, L) exactly;
 *  - runtime library search (gpu_libsearch.c): order of directories from the
 *    environment and /opt/dtk-* versions, the "tried ..." message; where
 *    RCCL / NCCL are looked for;
 *  - gpu_comm.c built without MPI: one rank, no-op collectives, and the
 *    "built without MPI" message for a process launched as one of several. */
#define _GNU_SOURCE
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_comm.h"
#include "gpu_kernels.h"
#include "gpu_launch.h"
#include "gpu_libsearch.h"
#include "tests/util/check_main.h"

static gpu_tunables tunables(int warp, int cus) {
  gpu_tunables t = {.warp = warp, .mm_bm = 64, .mm_bn = 64, .mm_bk = 16, .mm_tm = 4, .mm_tn = 4,
                    .gemv_max_m = 8, .gemv_threads = 256, .att_rows = 16, .att_smem = 49152,
                    .cus = cus};
  return t;
}

/* A small deterministic generator (tests must be reproducible). */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t lo, int64_t hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

START_TEST(matmul_plan_paths) {
  gpu_tunables t = tunables(64, 64);
  gpu_mm_plan p;
  /* decode: GEMV, one warp (64 lanes) per weight row, 4 rows per block */
  ck_assert_int_eq(gpu_plan_matmul(&t, 1, 4096, 4096, 0x1000, 0x2000, &p), 0);
  ck_assert_int_eq(p.gemv, 1);
  ck_assert_int_eq(p.vec, 1);
  ck_assert_uint_eq(p.grid[0], 4096 / 4);
  ck_assert_uint_eq(p.block[0], 256);
  /* misaligned weights or K % 8 != 0: scalar loads */
  ck_assert_int_eq(gpu_plan_matmul(&t, 1, 10, 4096, 0x1002, 0x2000, &p), 0);
  ck_assert_int_eq(p.vec, 0);
  ck_assert_int_eq(gpu_plan_matmul(&t, 8, 10, 100, 0x1000, 0x2000, &p), 0);
  ck_assert_int_eq(p.gemv, 1);
  ck_assert_int_eq(p.vec, 0);
  /* M = 9: tiled */
  ck_assert_int_eq(gpu_plan_matmul(&t, 9, 130, 64, 0x1000, 0x2000, &p), 0);
  ck_assert_int_eq(p.gemv, 0);
  ck_assert_uint_eq(p.grid[0], 3);
  ck_assert_uint_eq(p.grid[1], 1);
  ck_assert_uint_eq(p.block[0], 256);
  /* warp 32 (NVIDIA): 8 rows per GEMV block */
  t = tunables(32, 132);
  ck_assert_int_eq(gpu_plan_matmul(&t, 1, 100, 64, 0, 0, &p), 0);
  ck_assert_uint_eq(p.grid[0], 13);
  ck_assert_int_eq(gpu_plan_matmul(&t, 0, 100, 64, 0, 0, &p), -1);
}
END_TEST

/* Every y[m, n] is produced by exactly one thread (coverage as in mm_body /
 * gemv_body). */
START_TEST(matmul_plan_coverage) {
  for (int it = 0; it < 40; it++) {
    gpu_tunables t = tunables(it % 2 ? 32 : 64, 80);
    if (it % 3 == 0) {
      t.mm_bm = t.mm_bn = 128;
      t.mm_tm = t.mm_tn = 8;
    }
    int64_t M = rnd(1, 200), N = rnd(1, 200), K = rnd(1, 64);
    gpu_mm_plan p;
    ck_assert_int_eq(gpu_plan_matmul(&t, M, N, K, 0, 0, &p), 0);
    unsigned char *hit = calloc((size_t)(M * N), 1);
    if (p.gemv) {
      int wpb = (int)p.block[0] / t.warp;
      for (unsigned b = 0; b < p.grid[0]; b++)
        for (int w = 0; w < wpb; w++) {
          int64_t n = (int64_t)b * wpb + w;
          if (n < N)
            for (int64_t m = 0; m < M; m++) hit[m * N + n]++;
        }
    } else {
      int sy = t.mm_bm / t.mm_tm, sx = t.mm_bn / t.mm_tn;
      ck_assert_uint_eq(p.block[0], (unsigned)(sx * sy));
      for (unsigned by = 0; by < p.grid[1]; by++)
        for (unsigned bx = 0; bx < p.grid[0]; bx++)
          for (unsigned tid = 0; tid < p.block[0]; tid++)
            for (int i = 0; i < t.mm_tm; i++)
              for (int j = 0; j < t.mm_tn; j++) {
                int64_t m = (int64_t)by * t.mm_bm + (int)(tid / sx) + i * sy;
                int64_t n = (int64_t)bx * t.mm_bn + (int)(tid % sx) + j * sx;
                if (m < M && n < N) hit[m * N + n]++;
              }
    }
    for (int64_t i = 0; i < M * N; i++)
      ck_assert_msg(hit[i] == 1, "M=%lld N=%lld: y[%lld] written %d times", (long long)M,
                    (long long)N, (long long)i, hit[i]);
    free(hit);
  }
}
END_TEST

/* Attention: decode the block index exactly as mi_k_attn does and check that
 * each (t, h) output row is written by exactly one block per split, that the
 * splits tile the keys, and that the budgets hold. */
START_TEST(attention_plan_coverage) {
  for (int it = 0; it < 100; it++) {
    int64_t Hkv = rnd(1, 8), G = rnd(1, 20), D = rnd(1, 4) * 32, T = rnd(1, 40),
            pos0 = rnd(0, 3000);
    if (it % 5 == 0) D = rnd(1, MI_ATT_MAX_D);
    if (it % 7 == 0) T = 1; /* decode */
    int64_t Hq = Hkv * G;
    gpu_tunables t = tunables(it % 2 ? 32 : 64, (int)rnd(1, 200));
    gpu_attn_plan p;
    ck_assert_int_eq(gpu_plan_attention(&t, T, Hq, Hkv, D, pos0, &p), 0);
    int R = p.TQ * p.GB;
    ck_assert_int_le((int64_t)R * D, MI_ATT_THREADS * MI_ATT_ACC_MAX);
    ck_assert_int_le(R, t.att_rows);
    ck_assert_uint_le(p.smem, (size_t)t.att_smem);
    ck_assert_uint_eq(p.smem, gpu_attn_smem_bytes(R, p.BJ, D));
    ck_assert_int_ge(p.BJ, 1);
    ck_assert_int_le(p.BJ, 64);
    ck_assert_int_ge(p.nsplit, 1);
    ck_assert_int_le(p.nsplit, 64);
    ck_assert_int_eq(p.split_len % p.BJ, 0);
    /* splits tile [0, pos0 + T) with no empty split at the end */
    int64_t L = pos0 + T;
    ck_assert_int_ge(p.split_len * p.nsplit, L);
    ck_assert_int_lt(p.split_len * (p.nsplit - 1), L);
    ck_assert_uint_eq(p.grid[1], (unsigned)p.nsplit);
    ck_assert_uint_eq(p.ws_bytes, p.nsplit > 1 ? (size_t)p.nsplit * T * Hq * (D + 2) * 4 : 0);
    /* coverage */
    unsigned char *hit = calloc((size_t)(T * Hq), 1);
    int64_t ngt = (G + p.GB - 1) / p.GB;
    for (unsigned bx = 0; bx < p.grid[0]; bx++) {
      int64_t kvh = bx % Hkv, gt = (bx / Hkv) % ngt, qt = bx / (Hkv * ngt);
      for (int r = 0; r < R; r++) {
        int64_t tt = qt * p.TQ + r / p.GB, g = gt * p.GB + r % p.GB;
        if (tt < T && g < G) hit[tt * Hq + kvh * G + g]++;
      }
    }
    for (int64_t i = 0; i < T * Hq; i++)
      ck_assert_msg(hit[i] == 1, "T=%lld Hq=%lld Hkv=%lld: row %lld covered %d times",
                    (long long)T, (long long)Hq, (long long)Hkv, (long long)i, hit[i]);
    free(hit);
  }
}
END_TEST

START_TEST(attention_plan_decode_splits) {
  /* Qwen3-8B decode at position 1500 on 132 SMs: 8 KV heads alone would use
   * 8 blocks; split-K must raise that to about two per SM. */
  gpu_tunables t = tunables(32, 132);
  gpu_attn_plan p;
  ck_assert_int_eq(gpu_plan_attention(&t, 1, 32, 8, 128, 1500, &p), 0);
  ck_assert_int_eq(p.GB, 4);
  ck_assert_int_eq(p.TQ, 1);
  ck_assert_int_ge((int64_t)p.grid[0] * p.grid[1], 132);
  ck_assert_int_gt(p.nsplit, 1);
  /* prefill 1021 tokens: plenty of blocks, no split */
  ck_assert_int_eq(gpu_plan_attention(&t, 1021, 32, 8, 128, 0, &p), 0);
  ck_assert_int_eq(p.nsplit, 1);
  ck_assert_int_eq(p.TQ * p.GB, 16);
  /* unservable shapes */
  ck_assert_int_eq(gpu_plan_attention(&t, 1, 32, 8, MI_ATT_MAX_D + 1, 0, &p), -1);
  ck_assert_int_eq(gpu_plan_attention(&t, 1, 30, 8, 128, 0, &p), -1);
}
END_TEST

START_TEST(ew_blocks) {
  ck_assert_uint_eq(gpu_ew_blocks(1, 256), 1);
  ck_assert_uint_eq(gpu_ew_blocks(256, 256), 1);
  ck_assert_uint_eq(gpu_ew_blocks(257, 256), 2);
  ck_assert_uint_eq(gpu_ew_blocks((int64_t)1 << 40, 256), 65535);
}
END_TEST

/* ---- library search ---- */

static char g_root[PATH_MAX];
static const char *fake_env(const char *name) {
  static char buf[PATH_MAX + 16];
  if (strcmp(name, "ROCM_PATH") == 0) {
    snprintf(buf, sizeof buf, "%s/custom", g_root);
    return buf;
  }
  return NULL;
}
static const char *empty_env(const char *name) {
  (void)name;
  return NULL;
}

static void mkdirs(const char *rel) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "mkdir -p '%s/%s'", g_root, rel);
  ck_assert_int_eq(system(p), 0);
}

START_TEST(libsearch_hip_order) {
  snprintf(g_root, sizeof g_root, "/tmp/mi-gpu-libsearch-%d", (int)getpid());
  mkdirs("custom/lib");
  mkdirs("opt/dtk-23.10/lib");
  mkdirs("opt/dtk-24.04.1/lib");
  mkdirs("opt/dtk-24.04.1/hip/lib");
  mkdirs("opt/rocm/lib");
  gpu_lib_search s;
  gpu_lib_search_hip(&s, fake_env, g_root);
  char want[5][PATH_MAX + 64];
  snprintf(want[0], sizeof want[0], "%s/custom/lib", g_root);
  snprintf(want[1], sizeof want[1], "%s/opt/dtk-24.04.1/lib", g_root);
  snprintf(want[2], sizeof want[2], "%s/opt/dtk-24.04.1/hip/lib", g_root);
  snprintf(want[3], sizeof want[3], "%s/opt/dtk-23.10/lib", g_root);
  snprintf(want[4], sizeof want[4], "%s/opt/rocm/lib", g_root);
  ck_assert_int_eq(s.ndirs, 5);
  for (int i = 0; i < 5; i++) ck_assert_str_eq(s.dirs[i], want[i]);
  ck_assert_str_eq(s.names[0], "libamdhip64.so");

  /* A broken library in the first directory: its dlopen error is reported,
   * and the message lists every name and directory tried. */
  char bad[PATH_MAX + 64];
  snprintf(bad, sizeof bad, "%s/custom/lib/libamdhip64.so.6", g_root);
  FILE *f = fopen(bad, "w");
  ck_assert_ptr_nonnull(f);
  fputs("this is not an ELF file, but long enough to be read as a header............\n", f);
  fclose(f);
  gpu_lib_search_hip(&s, fake_env, g_root);
  /* no real libamdhip64 may be found by the bare names: drop them */
  static const char *const only[] = {"libamdhip64.so.6", NULL};
  s.names = only;
  char why[4096], opened[512] = "";
  /* the bare-name fallback could find an installed runtime: only test the
   * message when it does not */
  void *h = gpu_lib_open(&s, "HIP runtime", opened, sizeof opened, why, sizeof why);
  if (!h) {
    ck_assert_ptr_nonnull(strstr(why, "no HIP runtime found (tried libamdhip64.so.6 in "));
    ck_assert_ptr_nonnull(strstr(why, want[4]));
    ck_assert_ptr_nonnull(strstr(why, "the default library path"));
  } else {
    ck_assert_str_eq(opened, "libamdhip64.so.6");
  }
  snprintf(bad, sizeof bad, "rm -rf '%s'", g_root);
  ck_assert_int_eq(system(bad), 0);
}
END_TEST

START_TEST(libsearch_nothing) {
  snprintf(g_root, sizeof g_root, "/tmp/mi-gpu-libsearch-none-%d", (int)getpid());
  gpu_lib_search s;
  gpu_lib_search_cuda(&s, empty_env, g_root);
  ck_assert_int_eq(s.ndirs, 0);
  static const char *const names[] = {"libmi-no-such-runtime.so.9", NULL};
  s.names = names;
  char why[1024];
  ck_assert_ptr_null(gpu_lib_open(&s, "CUDA driver", NULL, 0, why, sizeof why));
  ck_assert_str_eq(why, "no CUDA driver found (tried libmi-no-such-runtime.so.9 in the default "
                        "library path): libmi-no-such-runtime.so.9: cannot open shared object "
                        "file: No such file or directory");
  /* a tiny buffer truncates, never overflows */
  char small[16];
  gpu_lib_open(&s, "CUDA driver", NULL, 0, small, sizeof small);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
}
END_TEST

/* RCCL is looked for beside the HIP runtime that was opened first (the same
 * runtime must serve both), then where the HIP runtime is searched; NCCL in
 * $NCCL_HOME, $CUDA_HOME, /usr/local/cuda. */
static const char *ccl_env(const char *name) {
  static char buf[PATH_MAX + 16];
  if (strcmp(name, "NCCL_HOME") == 0) {
    snprintf(buf, sizeof buf, "%s/nccl", g_root);
    return buf;
  }
  return NULL;
}

START_TEST(libsearch_ccl_order) {
  snprintf(g_root, sizeof g_root, "/tmp/mi-gpu-libsearch-ccl-%d", (int)getpid());
  mkdirs("opt/dtk-24.04/lib");
  mkdirs("opt/rocm/lib");
  mkdirs("nccl/lib");
  mkdirs("usr/local/cuda/lib64");
  char rt[PATH_MAX + 64], want[3][PATH_MAX + 64];
  snprintf(rt, sizeof rt, "%s/opt/rocm/lib/libamdhip64.so.6", g_root);
  gpu_lib_search s;
  gpu_lib_search_rccl(&s, rt, empty_env, g_root);
  snprintf(want[0], sizeof want[0], "%s/opt/rocm/lib", g_root);
  snprintf(want[1], sizeof want[1], "%s/opt/dtk-24.04/lib", g_root);
  ck_assert_int_eq(s.ndirs, 2); /* rocm/lib once: first, as the runtime's directory */
  ck_assert_str_eq(s.dirs[0], want[0]);
  ck_assert_str_eq(s.dirs[1], want[1]);
  ck_assert_str_eq(s.names[0], "librccl.so");
  ck_assert_str_eq(s.names[1], "librccl.so.1");
  ck_assert_ptr_null(s.names[2]);
  /* a bare soname (found on the default path) adds no directory */
  gpu_lib_search_rccl(&s, "libamdhip64.so", empty_env, g_root);
  ck_assert_int_eq(s.ndirs, 2);
  ck_assert_str_eq(s.dirs[0], want[1]);

  gpu_lib_search_nccl(&s, ccl_env, g_root);
  snprintf(want[0], sizeof want[0], "%s/nccl/lib", g_root);
  snprintf(want[1], sizeof want[1], "%s/usr/local/cuda/lib64", g_root);
  ck_assert_int_eq(s.ndirs, 2);
  ck_assert_str_eq(s.dirs[0], want[0]);
  ck_assert_str_eq(s.dirs[1], want[1]);
  ck_assert_str_eq(s.names[0], "libnccl.so.2");
  ck_assert_str_eq(s.names[1], "libnccl.so");

  /* the message names every soname and directory */
  static const char *const none[] = {"libmi-no-such-rccl.so.1", NULL};
  gpu_lib_search_rccl(&s, rt, empty_env, g_root);
  s.names = none;
  char why[2048];
  ck_assert_ptr_null(gpu_lib_open(&s, "RCCL", NULL, 0, why, sizeof why));
  snprintf(want[2], sizeof want[2],
           "no RCCL found (tried libmi-no-such-rccl.so.1 in %s/opt/rocm/lib, %s/opt/dtk-24.04/lib, "
           "the default library path): libmi-no-such-rccl.so.1: cannot open shared object file: "
           "No such file or directory",
           g_root, g_root);
  ck_assert_str_eq(why, want[2]);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* gpu_comm.c as built WITHOUT MPI (this test does not define MI_GPU_MPI):
 * a group of one whose collectives are no-ops, and a process that a
 * launcher started as one of several ranks is told why --tp cannot work. */
START_TEST(comm_without_mpi) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
  gpu_comm g;
  char err[512] = "";
  ck_assert_int_eq(gpu_comm_join(&g, err, sizeof err), 0);
  ck_assert_int_eq(g.rank, 0);
  ck_assert_int_eq(g.size, 1);
  ck_assert_int_eq(gpu_comm_check(&g, err, sizeof err), 0);
  gpu_comm_spec spec = {.api = "CUDA", .forced = "/nonexistent/libnccl.so.2", .rt_lib = NULL};
  ck_assert_int_eq(gpu_comm_connect(&g, &spec, err, sizeof err), 0); /* one rank: nothing loaded */
  float x[3] = {1, 2, 3};
  ck_assert_int_eq(gpu_comm_allreduce_sum_f32(&g, x, 3, NULL, err, sizeof err), 0);
  ck_assert(x[0] == 1 && x[1] == 2 && x[2] == 3);
  ck_assert_int_ne(gpu_comm_allreduce_sum_f32(&g, x, -3, NULL, err, sizeof err), 0);
  ck_assert_str_eq(err, "allreduce_sum_f32: negative n=-3");
  ck_assert_int_eq(gpu_comm_broadcast(&g, x, sizeof x, 0, err, sizeof err), 0);
  ck_assert_int_ne(gpu_comm_broadcast(&g, x, sizeof x, 1, err, sizeof err), 0);
  ck_assert_str_eq(err, "broadcast: root 1 is not a rank of this group of 1");

  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  ck_assert_int_eq(gpu_comm_join(&g, err, sizeof err), 0);
  ck_assert_int_eq(g.size, 1);
  ck_assert_int_ne(gpu_comm_check(&g, err, sizeof err), 0);
  ck_assert_str_eq(err, "built without MPI: tensor parallelism needs MetaInfer configured with "
                        "-DMI_WITH_MPI=ON (this process is one of 3 ranks)");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  gpu_comm_close(&g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_host");
  TCase *tc = tcase_create("launch");
  mi_check_add(tc, MI_CHECK_TESTS(matmul_plan_paths, matmul_plan_coverage, attention_plan_coverage,
                                  attention_plan_decode_splits, ew_blocks));
  suite_add_tcase(s, tc);
  TCase *tl = tcase_create("libsearch");
  mi_check_add(tl, MI_CHECK_TESTS(libsearch_hip_order, libsearch_nothing, libsearch_ccl_order));
  suite_add_tcase(s, tl);
  TCase *tm = tcase_create("comm");
  tcase_add_test(tm, comm_without_mpi);
  suite_add_tcase(s, tm);
  return mi_check_run(s);
}
