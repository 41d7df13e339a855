/* The kernel-pack generator (core/gen/pack, `mi-ckb pack`): the source is
 * the same bytes run after run; the pack builds, loads as a plugin of kind
 * MI_PLUGIN_KERNELS and lists the CKB's map operators with their versions;
 * bind refuses a platform it cannot run on, with the reason; bound to a
 * serial run_host and to the real CPU platform, each kernel computes its
 * contract's math, checked against float64 formulas written here (not the
 * CKB's expressions); the contract's checks (constraints, NULL buffers, a
 * failing run_host) return -1 with a reason; bad requests and entries are
 * refused with one line naming them. */
#define _GNU_SOURCE
#define PACK_RNG_SEED 0x9e3779b97f4a7c15ull /* this file's inputs */
#include <check.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/gen/gen.h"
#include "core/gen/pack/pack.h"
#include "core/runtime/loader.h"
#include "mi/kernel_pack.h"
#include "mi/plugin.h"
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"
#include "tests/pack/pack_fixture.h"
#include "tests/pack/pack_values.h"
#include "tests/pack/serial_platform.h"

static const char *const MAP_OPS[] = {"operator.bias_add", "operator.gelu_mul",
                                      "operator.gelu_tanh_mul", "operator.softcap"};
#define N_MAP_OPS (sizeof MAP_OPS / sizeof *MAP_OPS)
/* the pack the tests read: the map operators (a rotary one is test_pack_stage1's) */
static const char *const MAP_IDS[] = {"operator.bias_add", "operator.gelu_mul", "operator.gelu_tanh_mul",
                                      "operator.softcap", NULL};


/* Once for the test case, in the runner's process: the pack of every map
 * operator (the tests fork from here and only read it). */
static void build_pack(void) { build_pack_of(MAP_IDS, "test", "test"); }

static void need_pack(void) {
  ck_assert_msg(!pack_err[0], "the test pack was not built: %s", pack_err);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s: cannot open", path);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  int ch;
  while ((ch = fgetc(f)) != EOF)
    fputc(ch, m);
  fclose(f);
  fclose(m);
  return buf;
}

/* ---------- a pack, opened as the loader would ---------- */

typedef sp_pack pack;

static void pack_open(pack *p) {
  need_pack();
  char so[4200];
  snprintf(so, sizeof so, "%s/libmi-pack-test.so", pack_dir);
  sp_pack_open(p, so, 0);
  ck_assert_ptr_nonnull(p->iface);
}

static void pack_close(pack *p) { sp_pack_close(p); }

typedef int (*bias_add_fn)(void *, mi_stream *, float *, const float *, const float *, int64_t,
                           int64_t);
typedef int (*gate_fn)(void *, mi_stream *, float *, const float *, const float *, int64_t);
typedef int (*softcap_fn)(void *, mi_stream *, float *, const float *, float, int64_t);

/* ---------- fake platforms ---------- */

static int fake_host_memory = 1, fake_info_fails = 0, fake_run_fails = 0;
static int64_t fake_chunks_run = 0;

static int fake_device_info(void *ctx, int device, mi_device_info *out) {
  (void)ctx, (void)device;
  if (fake_info_fails) return -1;
  out->host_memory = fake_host_memory;
  return 0;
}
static const char *fake_last_error(void *ctx) {
  (void)ctx;
  return "fake platform: run_host refused on purpose";
}
/* Serial, one chunk a call and last chunk first: every chunk must stand on
 * its own and together they must cover the domain. */
static int fake_run_host(void *ctx, mi_stream *s, void (*body)(void *, int64_t, int64_t), void *arg,
                         int64_t n) {
  (void)ctx, (void)s;
  if (fake_run_fails) return -1;
  for (int64_t c = n - 1; c >= 0; c--)
    body(arg, c, c + 1), fake_chunks_run++;
  return 0;
}

static mi_platform_iface fake_platform(void) {
  mi_platform_iface p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.device_info = fake_device_info;
  p.last_error = fake_last_error;
  p.run_host = fake_run_host;
  return p;
}

static void bind_fake(pack *p) {
  static mi_platform_iface plat;
  plat = fake_platform();
  char err[300] = "";
  ck_assert_msg(p->iface->bind(p->ctx, &plat, NULL, err, sizeof err) == 0, "bind: %s", err);
}

/* ---------- float64 formulas, written here from the papers' definitions ---------- */

static double gelu_tanh(double g) {
  return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}
static double gelu_erf(double g) {
  return 0.5 * g * (1.0 + erf(g / sqrt(2.0)));
}

static double tolerance(const char *op) {
  char err[512];
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  const mi_ckb_entry *e = mi_ckb_find(c, op);
  ck_assert_ptr_nonnull(e);
  double t = json_number_value(json_object_get(json_object_get(e->json, "tolerance"), "f32"));
  mi_ckb_close(c);
  ck_assert(t > 0);
  return t;
}


/* ---------- tests ---------- */

START_TEST(same_bytes) {
  need_pack();
  char err[1024];
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  char *a, *b;
  json_t *ka, *kb;
  ck_assert_msg(mi_pack_emit(c, MAP_IDS, "test", &a, &ka, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(mi_pack_emit(c, MAP_IDS, "test", &b, &kb, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(a, b);
  ck_assert(json_equal(ka, kb));
  /* a second generation into another folder writes the same pack.c and pack.json */
  char dir2[] = "/tmp/mi-pack-test2.XXXXXX", p1[4200], p2[4200];
  ck_assert_ptr_nonnull(mkdtemp(dir2));
  ck_assert_msg(mi_pack_generate(c, MAP_IDS, "test", dir2, sdk_dir, err, sizeof err) == 0, "%s", err);
  const char *files[] = {"pack.c", "pack.json"};
  for (int i = 0; i < 2; i++) {
    snprintf(p1, sizeof p1, "%s/%s", pack_dir, files[i]);
    snprintf(p2, sizeof p2, "%s/%s", dir2, files[i]);
    char *x = slurp(p1), *y = slurp(p2);
    ck_assert_msg(!strcmp(x, y), "%s differs between two runs", files[i]);
    if (i == 0) ck_assert_str_eq(x, a); /* what was written is what was emitted */
    free(x), free(y);
  }
  /* no date, no path of this machine in the source */
  ck_assert_ptr_null(strstr(a, pack_dir));
  ck_assert_ptr_null(strstr(a, src_dir));
  /* the manifest: its fields, the source's hash, the kernels in id order */
  snprintf(p1, sizeof p1, "%s/pack.json", pack_dir);
  json_t *m = json_load_file(p1, JSON_REJECT_DUPLICATES, NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "test");
  ck_assert_str_eq(json_string_value(json_object_get(m, "target")), "host-c");
  char abi[16];
  snprintf(abi, sizeof abi, "%d.%d", MI_ABI_MAJOR, MI_ABI_MINOR);
  ck_assert_str_eq(json_string_value(json_object_get(m, "abi")), abi);
  ck_assert_int_ge(MI_ABI_MINOR, 6);
  ck_assert_str_eq(json_string_value(json_object_get(m, "library")), "libmi-pack-test.so");
  ck_assert_str_eq(json_string_value(json_object_get(m, "source")), "pack.c");
  char sha[65];
  snprintf(p1, sizeof p1, "%s/pack.c", pack_dir);
  ck_assert_int_eq(mi_sha256_file(p1, sha), 0);
  ck_assert_str_eq(json_string_value(json_object_get(m, "source_sha256")), sha);
  json_t *ks = json_object_get(m, "kernels");
  ck_assert_uint_eq(json_array_size(ks), N_MAP_OPS);
  for (size_t i = 0; i < N_MAP_OPS; i++) {
    json_t *k = json_array_get(ks, i);
    const mi_ckb_entry *e = mi_ckb_find(c, MAP_OPS[i]);
    ck_assert_str_eq(json_string_value(json_object_get(k, "operator")), MAP_OPS[i]);
    ck_assert_str_eq(json_string_value(json_object_get(k, "version")), e->version);
    ck_assert_str_eq(json_string_value(json_object_get(k, "math")),
                     json_string_value(json_object_get(json_object_get(e->json, "map"), "expr")));
    ck_assert_ptr_nonnull(strstr(a, json_string_value(json_object_get(k, "symbol"))));
  }
  json_decref(m);
  /* the generated C is clean under the warnings the project builds with */
  ck_assert_int_eq(
      mi_test_sh("/usr/bin/cc -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -I '%s' '%s'", sdk_dir,
                 p1),
      0);
  free(a), free(b);
  json_decref(ka), json_decref(kb);
  mi_test_sh("rm -rf '%s'", dir2);
  mi_ckb_close(c);
}
END_TEST

START_TEST(descriptor_and_kernels) {
  pack p;
  pack_open(&p);
  ck_assert_uint_eq(p.desc->kind, MI_PLUGIN_KERNELS);
  ck_assert_uint_eq(p.desc->kind, 5);
  ck_assert_uint_eq(p.desc->abi_major, 1);
  ck_assert_uint_ge(p.desc->abi_minor, 6);
  ck_assert_str_eq(p.desc->name, "pack-test");
  ck_assert_uint_eq(p.iface->struct_size, sizeof(mi_kernel_pack_iface));
  ck_assert_str_eq(p.iface->target, MI_PACK_TARGET_HOST_C);
  ck_assert_int_eq(p.iface->n_kernels, (int64_t)N_MAP_OPS);
  char err[512];
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  for (size_t i = 0; i < N_MAP_OPS; i++) {
    const mi_pack_kernel *k = mi_pack_find(p.iface, MAP_OPS[i]);
    ck_assert_msg(k != NULL, "%s is not in the pack", MAP_OPS[i]);
    ck_assert_str_eq(k->op_version, mi_ckb_find(c, MAP_OPS[i])->version);
    ck_assert_str_eq(k->math,
                     json_string_value(json_object_get(
                         json_object_get(mi_ckb_find(c, MAP_OPS[i])->json, "map"), "expr")));
    ck_assert_ptr_nonnull(k->fn);
  }
  ck_assert_ptr_null(mi_pack_find(p.iface, "operator.add"));
  ck_assert_ptr_nonnull(p.iface->last_error(p.ctx));
  mi_ckb_close(c);
  pack_close(&p);

  /* the core's loader takes it as a plugin of its own kind */
  char so[4200];
  snprintf(so, sizeof so, "%s/libmi-pack-test.so", pack_dir);
  mi_plugin *pl = mi_plugin_load_file(so, NULL);
  ck_assert_ptr_nonnull(pl);
  ck_assert_msg(pl->status == MI_PLUGIN_LOADED, "the loader refused the pack: %s",
                pl->reason ? pl->reason : "?");
  ck_assert_int_eq(mi_plugin_kind_of(pl), MI_PLUGIN_KERNELS);
  mi_plugin_unload(pl);
}
END_TEST

START_TEST(bind_refusals) {
  pack p;
  pack_open(&p);
  softcap_fn softcap = (softcap_fn)sp_kernel(&p, "operator.softcap");
  float x[4] = {1, 2, 3, 4}, y[4];
  /* before any bind, a kernel refuses */
  ck_assert_int_eq(softcap(p.ctx, NULL, y, x, 30.0f, 4), -1);
  ck_assert_ptr_nonnull(strstr(p.iface->last_error(p.ctx), "not bound"));

  char err[300];
  struct {
    const char *what, *why;
    size_t size;
    int null_run_host, host_memory, info_fails;
  } cases[] = {
      {"an ABI 1.5 platform (its struct ends before run_host)", "run_host",
       offsetof(mi_platform_iface, run_host), 0, 1, 0},
      {"a 1.6 platform without run_host", "run_host", sizeof(mi_platform_iface), 1, 1, 0},
      {"device memory that is not host memory", "not host memory", sizeof(mi_platform_iface), 0, 0,
       0},
      {"device_info fails", "device_info", sizeof(mi_platform_iface), 0, 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    mi_platform_iface plat = fake_platform();
    plat.struct_size = (uint32_t)cases[i].size;
    if (cases[i].null_run_host) plat.run_host = NULL;
    fake_host_memory = cases[i].host_memory, fake_info_fails = cases[i].info_fails;
    err[0] = 0;
    ck_assert_msg(p.iface->bind(p.ctx, &plat, NULL, err, sizeof err) == -1, "%s: bound",
                  cases[i].what);
    ck_assert_msg(strstr(err, cases[i].why) && strstr(err, "pack-test"), "%s: '%s'", cases[i].what,
                  err);
    ck_assert_str_eq(p.iface->last_error(p.ctx), err);
    ck_assert_int_eq(softcap(p.ctx, NULL, y, x, 30.0f, 4), -1);
  }
  fake_host_memory = 1, fake_info_fails = 0;
  ck_assert_int_eq(p.iface->bind(p.ctx, NULL, NULL, err, sizeof err), -1);
  /* and a platform it can run on */
  bind_fake(&p);
  ck_assert_int_eq(softcap(p.ctx, NULL, y, x, 30.0f, 4), 0);
  pack_close(&p);
}
END_TEST

/* bias_add over rows: every output is one f32 add, exactly x + b rounded */
static void check_bias_add(bias_add_fn f, void *ctx, int64_t rows, int64_t n, int in_place) {
  float *x = malloc(sizeof(float) * (size_t)(rows * n)), *b = malloc(sizeof(float) * (size_t)n);
  float *y = in_place ? x : malloc(sizeof(float) * (size_t)(rows * n));
  double *want = malloc(sizeof(double) * (size_t)(rows * n));
  for (int64_t i = 0; i < n; i++)
    b[i] = (float)uniform(-2, 2);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < n; i++) {
      x[r * n + i] = (float)uniform(-100, 100);
      want[r * n + i] = (float)((double)x[r * n + i] + (double)b[i]);
    }
  if (!in_place)
    for (int64_t i = 0; i < rows * n; i++)
      y[i] = NAN;
  ck_assert_int_eq(f(ctx, NULL, y, x, b, rows, n), 0);
  for (int64_t i = 0; i < rows * n; i++)
    ck_assert_msg(y[i] == want[i], "bias_add %lldx%lld%s: y[%lld] = %.9g, want %.9g",
                  (long long)rows, (long long)n, in_place ? " in place" : "", (long long)i, y[i],
                  want[i]);
  if (!in_place) free(y);
  free(x), free(b), free(want);
}

START_TEST(values_serial) {
  pack p;
  pack_open(&p);
  bind_fake(&p);
  bias_add_fn bias_add = (bias_add_fn)sp_kernel(&p, "operator.bias_add");
  gate_fn gelu_tanh_mul = (gate_fn)sp_kernel(&p, "operator.gelu_tanh_mul"),
          gelu_mul = (gate_fn)sp_kernel(&p, "operator.gelu_mul");
  softcap_fn softcap = (softcap_fn)sp_kernel(&p, "operator.softcap");

  /* whole-row chunks (16 rows of 1000, the last short), pieces of long rows, tiny */
  fake_chunks_run = 0;
  check_bias_add(bias_add, p.ctx, 40, 1000, 0);
  ck_assert_int_eq(fake_chunks_run, 3);
  fake_chunks_run = 0;
  check_bias_add(bias_add, p.ctx, 2, 20000, 0);
  ck_assert_int_eq(fake_chunks_run, 4);
  check_bias_add(bias_add, p.ctx, 3, 5, 0);
  check_bias_add(bias_add, p.ctx, 7, 333, 1);

  /* the gates at points: saturation both ways, gate^3 past f32's range */
  const float gs[] = {-1e15f, -1e4f, -100, -12, -10, -5, -3, -1,  -0.5f, -1e-3f,
                      0,      1e-3f, 0.5f, 1,   3,   5,  10, 100, 1e4f,  1e15f};
  enum { NG = sizeof gs / sizeof *gs };
  float up[NG], y[NG];
  for (int i = 0; i < NG; i++)
    up[i] = (float)(0.25 + 0.1 * i) * (i % 2 ? -1 : 1);
  for (int which = 0; which < 2; which++) {
    gate_fn f = which ? gelu_mul : gelu_tanh_mul;
    ck_assert_int_eq(f(p.ctx, NULL, y, gs, up, NG), 0);
    for (int i = 0; i < NG; i++) {
      /* 1 + tanh (1 + erf) cancels for gate < 0: f32's rounding of that
       * sum, about FLT_EPSILON, times |gate * up|, is all a kernel can do */
      double want = (which ? gelu_erf(gs[i]) : gelu_tanh(gs[i])) * up[i];
      double bound = 1e-5 * fabs(want) + 2 * FLT_EPSILON * fabs((double)gs[i] * up[i]);
      ck_assert_msg(isfinite(y[i]) && fabs(y[i] - want) <= bound, "%s(%g) * %g = %.9g, want %.9g",
                    which ? "gelu" : "gelu_tanh", gs[i], up[i], y[i], want);
    }
  }
  /* softcap at points: |x| << cap, around cap, saturated */
  const float xs[] = {-1e30f, -1e4f, -60, -30, -1, -1e-6f, 0, 1e-6f, 1, 29, 30, 31, 1e4f, 1e30f};
  enum { NX = sizeof xs / sizeof *xs };
  float ys[NX];
  ck_assert_int_eq(softcap(p.ctx, NULL, ys, xs, 30.0f, NX), 0);
  for (int i = 0; i < NX; i++) {
    double want = 30.0 * tanh(xs[i] / 30.0);
    ck_assert_msg(fabs(ys[i] - want) <= 2e-6 * fabs(want) + 1e-37, "softcap(%g) = %.9g, want %.9g",
                  xs[i], ys[i], want);
  }

  /* long random inputs, several chunks, against each contract's own tolerance */
  const int64_t n = 70001;
  float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n),
        *o = malloc(sizeof(float) * n);
  double *want = malloc(sizeof(double) * n);
  for (int64_t i = 0; i < n; i++)
    g[i] = (float)uniform(-9, 9), u[i] = (float)uniform(-1, 1);
  const char *ops[] = {"operator.gelu_tanh_mul", "operator.gelu_mul", "operator.softcap"};
  for (int k = 0; k < 3; k++) {
    for (int64_t i = 0; i < n; i++) {
      o[i] = NAN;
      want[i] = k == 0   ? gelu_tanh(g[i]) * u[i]
                : k == 1 ? gelu_erf(g[i]) * u[i]
                         : 5.0 * tanh(g[i] / 5.0);
    }
    fake_chunks_run = 0;
    int rc = k < 2 ? ((gate_fn)sp_kernel(&p, ops[k]))(p.ctx, NULL, o, g, u, n)
                   : softcap(p.ctx, NULL, o, g, 5.0f, n);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(fake_chunks_run, (n + 16383) / 16384);
    double rel = max_rel(o, want, n), tol = tolerance(ops[k]);
    ck_assert_msg(rel <= tol, "%s: max rel error %g > tolerance %g", ops[k], rel, tol);
  }
  /* in place: y == gate */
  for (int64_t i = 0; i < n; i++)
    o[i] = g[i], want[i] = gelu_tanh(g[i]) * u[i];
  ck_assert_int_eq(gelu_tanh_mul(p.ctx, NULL, o, o, u, n), 0);
  ck_assert(max_rel(o, want, n) <= tolerance("operator.gelu_tanh_mul"));
  free(g), free(u), free(o), free(want);
  pack_close(&p);
}
END_TEST

START_TEST(contract_checks) {
  pack p;
  pack_open(&p);
  bind_fake(&p);
  bias_add_fn bias_add = (bias_add_fn)sp_kernel(&p, "operator.bias_add");
  softcap_fn softcap = (softcap_fn)sp_kernel(&p, "operator.softcap");
  float x[8] = {0}, y[8], b[4] = {0};
  ck_assert_int_eq(softcap(p.ctx, NULL, y, x, 30.0f, 0), -1);
  ck_assert_ptr_nonnull(strstr(p.iface->last_error(p.ctx),
                               "operator.softcap: constraint 'n >= 1' does not hold (n=0)"));
  ck_assert_int_eq(bias_add(p.ctx, NULL, y, x, b, 0, 4), -1);
  ck_assert_ptr_nonnull(
      strstr(p.iface->last_error(p.ctx), "constraint 'rows >= 1' does not hold (rows=0, n=4)"));
  ck_assert_int_eq(bias_add(p.ctx, NULL, y, x, NULL, 2, 4), -1);
  ck_assert_ptr_nonnull(
      strstr(p.iface->last_error(p.ctx), "operator.bias_add: buffer 'b' is NULL"));
  fake_run_fails = 1;
  ck_assert_int_eq(bias_add(p.ctx, NULL, y, x, b, 2, 4), -1);
  ck_assert_ptr_nonnull(strstr(p.iface->last_error(p.ctx),
                               "run_host failed: fake platform: run_host refused on purpose"));
  fake_run_fails = 0;
  ck_assert_int_eq(bias_add(p.ctx, NULL, y, x, b, 2, 4), 0);
  pack_close(&p);
}
END_TEST

/* Bound to the CPU platform: its run_host, its threads, its buffers. */
START_TEST(cpu_platform) {
  need_pack();
  char so[4200];
  snprintf(so, sizeof so, "%s/lib/metainfer/libmi-cpu.so", build_dir);
  static const mi_kv kv[] = {{"threads", "2"}};
  mi_options opts = {kv, 1};
  mi_plugin *cpu = mi_plugin_load_file(so, &opts);
  ck_assert_ptr_nonnull(cpu);
  ck_assert_msg(cpu->status == MI_PLUGIN_LOADED, "%s: %s", so, cpu->reason ? cpu->reason : "?");
  const mi_platform_iface *P = cpu->iface;
  ck_assert_msg(mi_platform_has(P, run_host), "the CPU platform has no run_host");
  pack p;
  pack_open(&p);
  char err[300] = "";
  ck_assert_msg(p.iface->bind(p.ctx, P, cpu->ctx, err, sizeof err) == 0, "bind: %s", err);

  const int64_t rows = 37, n = 3001, total = rows * n;
  mi_buffer *bx, *bb, *by;
  ck_assert_int_eq(P->buffer_alloc(cpu->ctx, sizeof(float) * total, &bx), 0);
  ck_assert_int_eq(P->buffer_alloc(cpu->ctx, sizeof(float) * n, &bb), 0);
  ck_assert_int_eq(P->buffer_alloc(cpu->ctx, sizeof(float) * total, &by), 0);
  float *x = malloc(sizeof(float) * total), *b = malloc(sizeof(float) * n),
        *y = malloc(sizeof(float) * total);
  for (int64_t i = 0; i < total; i++)
    x[i] = (float)uniform(-50, 50);
  for (int64_t i = 0; i < n; i++)
    b[i] = (float)uniform(-1, 1);
  float *dx = P->buffer_ptr(cpu->ctx, bx), *db = P->buffer_ptr(cpu->ctx, bb),
        *dy = P->buffer_ptr(cpu->ctx, by);
  ck_assert_int_eq(P->memcpy_h2d(cpu->ctx, NULL, dx, x, sizeof(float) * total), 0);
  ck_assert_int_eq(P->memcpy_h2d(cpu->ctx, NULL, db, b, sizeof(float) * n), 0);

  ck_assert_int_eq(((bias_add_fn)sp_kernel(&p, "operator.bias_add"))(p.ctx, NULL, dy, dx, db, rows, n),
                   0);
  ck_assert_int_eq(P->memcpy_d2h(cpu->ctx, NULL, y, dy, sizeof(float) * total), 0);
  for (int64_t i = 0; i < total; i++)
    ck_assert_msg(y[i] == (float)((double)x[i] + (double)b[i % n]), "y[%lld] = %.9g", (long long)i,
                  y[i]);

  /* softcap in place over the whole buffer (several chunks on two threads) */
  ck_assert_int_eq(((softcap_fn)sp_kernel(&p, "operator.softcap"))(p.ctx, NULL, dx, dx, 30.0f, total),
                   0);
  ck_assert_int_eq(P->memcpy_d2h(cpu->ctx, NULL, y, dx, sizeof(float) * total), 0);
  double *want = malloc(sizeof(double) * total);
  for (int64_t i = 0; i < total; i++)
    want[i] = 30.0 * tanh(x[i] / 30.0);
  double rel = max_rel(y, want, total);
  ck_assert_msg(rel <= tolerance("operator.softcap"),
                "softcap on the CPU platform: max rel error %g", rel);

  P->buffer_free(cpu->ctx, bx), P->buffer_free(cpu->ctx, bb), P->buffer_free(cpu->ctx, by);
  free(x), free(b), free(y), free(want);
  pack_close(&p);
  mi_plugin_unload(cpu);
}
END_TEST

/* mi-ckb pack: what it prints, and the one line it refuses with. */
START_TEST(cli) {
  need_pack();
  char dir[] = "/tmp/mi-pack-cli.XXXXXX", cmd[16384], out[8192];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cmd, sizeof cmd,
           "'%s/bin/mi-ckb' --ckb '%s' pack '%s/p' --ops operator.softcap,operator.bias_add --name "
           "cli 2>&1",
           build_dir, ckb_dir, dir);
  ck_assert_int_eq(mi_test_popen_out(cmd, out, sizeof out), 0);
  char want[4400];
  snprintf(want, sizeof want, "%s/p/libmi-pack-cli.so\n", dir);
  ck_assert_msg(strstr(out, want) != NULL, "%s", out);
  ck_assert_msg(strstr(out, "operator.softcap") &&
                    strstr(out, "operator.bias_add") < strstr(out, want) &&
                    strstr(out, "operator.softcap") < strstr(out, "operator.bias_add"),
                "kernels not listed in the order asked: %s", out);
  snprintf(want, sizeof want, "%s/p/libmi-pack-cli.so", dir);
  ck_assert_int_eq(access(want, R_OK), 0);

  struct {
    const char *args, *names;
  } bad[] = {
      {"--ops operator.nosuch", "operator.nosuch: no operator contract"},
      {"--ops operator.add", "operator.add: not an operator stated as an expression"},
      {"--ops model.qwen3", "model.qwen3: no operator contract"},
      {"--ops operator.softcap,operator.softcap", "operator.softcap: listed twice"},
      {"--name 'Bad/Name'", "pack name 'Bad/Name'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' pack '%s/q' %s 2>&1", build_dir, ckb_dir,
             dir, bad[i].args);
    int st = mi_test_popen_out(cmd, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0, "%s: exit 0", bad[i].args);
    ck_assert_msg(strstr(out, bad[i].names) != NULL, "%s: %s", bad[i].args, out);
    ck_assert_msg(strchr(out, '\n') == out + strlen(out) - 1, "%s: not one line: %s", bad[i].args,
                  out);
    snprintf(want, sizeof want, "%s/q", dir);
    ck_assert_msg(access(want, F_OK) != 0, "%s: wrote %s", bad[i].args, want);
  }
  mi_test_sh("rm -rf '%s'", dir);
}
END_TEST

/* A CKB copy whose entry the generator must refuse, with the line naming
 * it; a compiler that refuses the source is reported, its output kept. */
START_TEST(generator_refusals) {
  need_pack();
  char dir[] = "/tmp/mi-pack-ckb.XXXXXX", err[1024], path[4200];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(
      mi_test_sh("cp -r '%s/.' '%s/' && find '%s' -mindepth 1 -name '.*' -exec rm -rf {} +",
                 ckb_dir, dir, dir),
      0);
  /* softcap's cap renamed mi_cap: the generator's own prefix */
  snprintf(path, sizeof path, "%s/operators/softcap.json", dir);
  json_t *j = json_load_file(path, 0, NULL);
  ck_assert_ptr_nonnull(j);
  json_object_set_new(json_array_get(json_object_get(json_object_get(j, "signature"), "args"), 4),
                      "name", json_string("mi_cap"));
  json_object_set_new(json_object_get(j, "map"), "expr", json_string("mi_cap * tanh(x / mi_cap)"));
  json_t *cs;
  size_t i;
  json_array_foreach(json_object_get(j, "cases"), i, cs) {
    json_object_set(cs, "mi_cap", json_object_get(cs, "cap"));
    json_object_del(cs, "cap");
  }
  ck_assert_int_eq(json_dump_file(j, path, JSON_INDENT(2)), 0);
  json_decref(j);
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(mi_ckb_validate(c, NULL, NULL), 0); /* a good entry, only not for C */
  char *src;
  json_t *ks;
  const char *only[] = {"operator.softcap", NULL};
  ck_assert_int_eq(mi_pack_emit(c, only, "x", &src, &ks, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "operator.softcap: argument 'mi_cap'"), "%s", err);
  /* every map operator: the same refusal */
  ck_assert_int_eq(mi_pack_emit(c, NULL, "x", &src, &ks, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "operator.softcap"), "%s", err);

  /* SDK headers the compiler refuses: reported in one line, build.log kept */
  const char *ok[] = {"operator.bias_add", NULL};
  char sdk[4300], out[4300];
  snprintf(sdk, sizeof sdk, "%s/badsdk", dir);
  ck_assert_int_eq(
      mi_test_sh("mkdir -p '%s/mi' && echo '#error not the SDK' > '%s/mi/kernel_pack.h'", sdk, sdk),
      0);
  snprintf(out, sizeof out, "%s/out", dir);
  ck_assert_int_eq(mi_pack_generate(c, ok, "x", out, sdk, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "the compiler refused it") && strstr(err, "not the SDK") &&
                    strstr(err, "build.log"),
                "%s", err);
  ck_assert_ptr_null(strchr(err, '\n'));
  snprintf(path, sizeof path, "%s/pack.json", out);
  ck_assert_msg(access(path, F_OK) != 0, "a manifest without a library");
  snprintf(path, sizeof path, "%s/libmi-pack-x.so", out);
  ck_assert_msg(access(path, F_OK) != 0, "a library from a failed build");
  /* no SDK at all */
  ck_assert_int_eq(mi_pack_generate(c, ok, "x", out, "/nonexistent", err, sizeof err), -1);
  ck_assert_msg(strstr(err, "/nonexistent/mi/kernel_pack.h"), "%s", err);
  mi_ckb_close(c);
  mi_test_sh("rm -rf '%s'", dir);
}
END_TEST

static void collect(void *user, const char *line) {
  char *buf = user;
  size_t l = strlen(buf);
  snprintf(buf + l, 4096 - l, "%s\n", line);
}

/* The CKB's check of the map form: member "pack", reference "map" and a
 * "map" come together, and the map must read against the signature. */
START_TEST(ckb_map_check) {
  paths();
  char err[512];
  mi_ckb *c = mi_ckb_open(ckb_dir, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  const mi_ckb_entry *e = mi_ckb_find(c, "operator.bias_add");
  ck_assert_ptr_nonnull(e);
  struct {
    const char *what, *want;
  } cases[] = {
      {"no map", "needs \"member\": \"pack\" and one form, 'map' with \"reference\": \"map\" or 'rotary'"},
      {"member add", "(it has member \"add\", reference \"map\", a 'map')"},
      {"reference add", "reference \"add\""},
      {"unknown name", "field 'map': operator.bias_add: map.expr reads 'q'"},
      {"bad expr", "field 'map': operator.bias_add: map.expr"},
      {"out is an input", "field 'map': operator.bias_add: map.out 'x'"},
      {"map on a platform operator", "needs \"member\": \"pack\" and one form"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    json_t *j = json_deep_copy(i == 6 ? mi_ckb_find(c, "operator.add")->json : e->json);
    json_t *map = json_object_get(j, "map");
    switch (i) {
    case 0: json_object_del(j, "map"); break;
    case 1: json_object_set_new(j, "member", json_string("add")); break;
    case 2: json_object_set_new(j, "reference", json_string("add")); break;
    case 3: json_object_set_new(map, "expr", json_string("x + q")); break;
    case 4: json_object_set_new(map, "expr", json_string("x + (b")); break;
    case 5: json_object_set_new(map, "out", json_string("x")); break;
    case 6:
      json_object_set_new(j, "map", json_pack("{s:s, s:s}", "out", "y", "expr", "a + b"));
      break;
    }
    char lines[4096] = "";
    int n = mi_ckb_validate_entry(c, j, i == 6 ? mi_ckb_find(c, "operator.add")->path : e->path,
                                  collect, lines);
    ck_assert_msg(n >= 1 && strstr(lines, cases[i].want), "%s: %d problems: %s", cases[i].what, n,
                  lines);
    json_decref(j);
  }
  ck_assert_int_eq(mi_ckb_validate(c, NULL, NULL), 0);
  mi_ckb_close(c);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("pack_gen");
  TCase *tc = mi_check_case(s, "pack", 240, NULL, NULL);
  tcase_add_unchecked_fixture(tc, build_pack, remove_pack);
  mi_check_add(tc, MI_CHECK_TESTS(same_bytes, descriptor_and_kernels, bind_refusals, values_serial,
                                  contract_checks, cpu_platform, cli, generator_refusals,
                                  ckb_map_check));
  return s;
}

int main(void) {
  return mi_check_run(suite());
}
