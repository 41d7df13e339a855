/* mi/model_glue.h against a fake host (three stored tensors) and a fake
 * host-memory platform: what the bound weights hold (rows and column shards
 * against slices taken here element by element, bf16 widened to values
 * written down by hand), the one-line refusals (they name the file and the
 * tensor), the checks before a forward, and the KV export/import layout
 * (each host byte against its cache position, computed independently). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/model_glue.h"
#include "tests/util/check_main.h"

/* ---- a fake host: weights by name ---- */

static float g_mat[6][4]; /* "m" [6, 4] f32: g_mat[r][c] = 10r + c */
static uint16_t g_vec[3]; /* "v" [3] bf16: 1.5, -2, 0.25 */
static int16_t g_bad[2];  /* "i" [2] I16: no mi_dtype */

static int fake_find(const mi_weights *w, const char *name, mi_weight_info *out) {
  (void)w;
  memset(out, 0, sizeof *out);
  out->name = name;
  out->file = "model.safetensors";
  if (strcmp(name, "m") == 0) {
    *out = (mi_weight_info){name, MI_DTYPE_F32, 2, {6, 4}, g_mat, sizeof g_mat, out->file};
    return 0;
  }
  if (strcmp(name, "v") == 0) {
    *out = (mi_weight_info){name, MI_DTYPE_BF16, 1, {3}, g_vec, sizeof g_vec, out->file};
    return 0;
  }
  if (strcmp(name, "i") == 0) {
    *out = (mi_weight_info){name, MI_DTYPE_COUNT + 7, 1, {2}, g_bad, sizeof g_bad, out->file};
    return 0;
  }
  return -1;
}

/* ---- a fake platform: device memory is host memory ---- */

struct mi_buffer {
  void *p;
  int owned;
};

static int g_fail_copies; /* memcpy_* fail while set */

static const char *f_last_error(void *ctx) {
  (void)ctx;
  return "fake failure";
}
static int f_alloc(void *ctx, size_t n, mi_buffer **out) {
  (void)ctx;
  *out = malloc(sizeof **out);
  (*out)->p = calloc(1, n), (*out)->owned = 1;
  return 0;
}
static int f_wrap(void *ctx, const void *host, size_t n, mi_buffer **out) {
  (void)ctx, (void)n;
  *out = malloc(sizeof **out);
  (*out)->p = (void *)host, (*out)->owned = 0;
  return 0;
}
static void f_free(void *ctx, mi_buffer *b) {
  (void)ctx;
  if (b->owned) free(b->p);
  free(b);
}
static void *f_ptr(void *ctx, mi_buffer *b) {
  (void)ctx;
  return b->p;
}
static int f_copy(void *ctx, mi_stream *s, void *dst, const void *src, size_t n) {
  (void)ctx, (void)s;
  if (g_fail_copies) return -1;
  memcpy(dst, src, n);
  return 0;
}

static mi_platform_iface g_P;
static mi_host_api g_host;
static uint64_t g_bytes;
static mi_glue g_glue;

static void setup(void) {
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 4; c++)
      g_mat[r][c] = (float)(10 * r + c);
  g_vec[0] = 0x3FC0, g_vec[1] = 0xC000, g_vec[2] = 0x3E80; /* bf16 1.5, -2, 0.25 */
  memset(&g_P, 0, sizeof g_P);
  g_P.struct_size = sizeof g_P, g_P.last_error = f_last_error, g_P.buffer_alloc = f_alloc;
  g_P.buffer_wrap_host = f_wrap, g_P.buffer_free = f_free, g_P.buffer_ptr = f_ptr;
  g_P.memcpy_h2d = f_copy, g_P.memcpy_d2h = f_copy;
  g_host = (mi_host_api){.struct_size = sizeof g_host, .weights_find = fake_find};
  g_bytes = 0, g_fail_copies = 0;
  g_glue = (mi_glue){"tm", &g_host, &g_P, NULL, NULL, "/models/x", &g_bytes};
}

START_TEST(binds_rows_cols_and_widens) {
  char err[256];
  mi_glue_weight w = {0};
  /* rows [2, 5) of [6, 4]: zero-copy, row 2 first */
  ck_assert_int_eq(mi_glue_bind_rows(&g_glue, "m", 6, 4, 2, 3, MI_GLUE_FLOATS, &w, err, sizeof err),
                   0);
  ck_assert_ptr_eq(w.ptr, &g_mat[2][0]);
  ck_assert_uint_eq(g_bytes, 3 * 4 * sizeof(float));
  mi_glue_weight_free(&g_P, NULL, &w);
  /* columns [1, 3): a copy [6, 2] */
  ck_assert_int_eq(mi_glue_bind_cols(&g_glue, "m", 6, 4, 1, 2, MI_GLUE_FLOATS, &w, err, sizeof err),
                   0);
  const float *cs = w.ptr;
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 2; c++)
      ck_assert_float_eq(cs[r * 2 + c], (float)(10 * r + c + 1));
  mi_glue_weight_free(&g_P, NULL, &w);
  ck_assert_ptr_null(w.buf);
  /* bf16 widened */
  ck_assert_int_eq(mi_glue_bind_vector(&g_glue, "v", 3, &w, err, sizeof err), 0);
  const float *v = w.ptr;
  ck_assert_int_eq(w.dtype, MI_DTYPE_F32);
  ck_assert_float_eq(v[0], 1.5f);
  ck_assert_float_eq(v[1], -2.0f);
  ck_assert_float_eq(v[2], 0.25f);
  mi_glue_weight_free(&g_P, NULL, &w);
}
END_TEST

START_TEST(refusals_name_file_and_tensor) {
  char err[256];
  mi_glue_weight w = {0};
  ck_assert_int_ne(mi_glue_bind_matrix(&g_glue, "nope", 6, 4, MI_GLUE_FLOATS, &w, err, sizeof err),
                   0);
  ck_assert_str_eq(err, "/models/x: missing tensor \"nope\" (not in any weight file)");
  ck_assert_int_ne(mi_glue_bind_matrix(&g_glue, "m", 6, 5, MI_GLUE_FLOATS, &w, err, sizeof err), 0);
  ck_assert_str_eq(err,
                   "model.safetensors: tensor \"m\" has shape [6, 4], config.json implies [6, 5]");
  ck_assert_int_ne(mi_glue_bind_vector(&g_glue, "i", 2, &w, err, sizeof err), 0);
  ck_assert_str_eq(
      err, "model.safetensors: tensor \"i\" has dtype (unsupported); expected BF16, F16 or F32");
  g_fail_copies = 1;
  ck_assert_int_ne(mi_glue_bind_vector(&g_glue, "v", 3, &w, err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: cannot upload \"v\": fake failure");
  ck_assert_uint_eq(g_bytes, 0); /* nothing counted for what was refused */
  mi_glue_weight_free(&g_P, NULL, &w);
}
END_TEST

struct mi_seq {
  int64_t len, n_ctx;
  int broken;
};

static const char *seq_state(const mi_seq *s, int64_t *len, int64_t *n_ctx) {
  *len = s->len, *n_ctx = s->n_ctx;
  return s->broken ? "is broken" : NULL;
}

START_TEST(checks_before_forward) {
  char err[256];
  const int32_t ids[3] = {0, 9, 10};
  ck_assert_int_eq(mi_glue_check_forward("tm", ids, 2, 0, 4, 10, err, sizeof err), 0);
  ck_assert_int_ne(mi_glue_check_forward("tm", ids, 3, 0, 4, 10, err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: token id 10 is outside the vocabulary [0, 10)");
  ck_assert_int_ne(mi_glue_check_forward("tm", ids, 2, 3, 4, 10, err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: 2 tokens do not fit: the context holds 4 and 3 are used");
  ck_assert_int_ne(mi_glue_check_forward("tm", ids, 0, 0, 4, 10, err, sizeof err), 0);
  mi_seq a = {0, 4, 0}, b = {4, 4, 0}, c = {0, 4, 1};
  float l0[1], l1[1];
  mi_seq *two[2] = {&a, &a};
  float *lg[2] = {l0, l1};
  ck_assert_int_ne(mi_glue_check_batch("tm", two, ids, 2, lg, 10, seq_state, err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: forward_batch: sequence 1 appears twice");
  two[1] = &b;
  ck_assert_int_ne(mi_glue_check_batch("tm", two, ids, 2, lg, 10, seq_state, err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: forward_batch: sequence 1 is full (4 tokens)");
  two[1] = &c;
  ck_assert_int_ne(mi_glue_check_batch("tm", two, ids, 2, lg, 10, seq_state, err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: forward_batch: sequence 1 is broken");
  c.broken = 0;
  ck_assert_int_eq(mi_glue_check_batch("tm", two, ids, 2, lg, 10, seq_state, err, sizeof err), 0);
}
END_TEST

/* A cache of parts = 3 runs of [n_ctx = 5, row = 2 bytes]; host rows are
 * position-major: host[t][part][byte]. */
START_TEST(kv_copy_layout_and_round_trip) {
  char err[256];
  enum { PARTS = 3, NCTX = 5, ROW = 2 };
  char kv[PARTS * NCTX * ROW], host[2 * PARTS * ROW], back[2 * PARTS * ROW];
  for (int i = 0; i < (int)sizeof kv; i++)
    kv[i] = (char)i;
  /* positions [2, 4) to host */
  ck_assert_int_eq(
      mi_glue_kv_copy(&g_glue, kv, PARTS, ROW, NCTX, 2, 2, host, 1, "read", err, sizeof err), 0);
  for (int t = 0; t < 2; t++)
    for (int p = 0; p < PARTS; p++)
      for (int b = 0; b < ROW; b++)
        ck_assert_int_eq(host[(t * PARTS + p) * ROW + b], (char)((p * NCTX + 2 + t) * ROW + b));
  /* written back at positions [0, 2) and read again: the same bytes */
  ck_assert_int_eq(
      mi_glue_kv_copy(&g_glue, kv, PARTS, ROW, NCTX, 0, 2, host, 0, "write", err, sizeof err), 0);
  ck_assert_int_eq(
      mi_glue_kv_copy(&g_glue, kv, PARTS, ROW, NCTX, 0, 2, back, 1, "read", err, sizeof err), 0);
  ck_assert_mem_eq(back, host, sizeof host);
  g_fail_copies = 1;
  ck_assert_int_ne(
      mi_glue_kv_copy(&g_glue, kv, PARTS, ROW, NCTX, 0, 1, back, 1, "read", err, sizeof err), 0);
  ck_assert_str_eq(err, "tm: read: copying the KV cache failed: fake failure");
}
END_TEST

/* A misspelt member would not compile; a right one is its own name. */
static const mi_platform_need k_needs[] = {MI_GLUE_NEEDS_MEMORY, MI_GLUE_NEED_TP(broadcast),
                                           MI_GLUE_NEED_OPTION(convert, "kv_type", "f32"),
                                           MI_GLUE_NEEDS_END};

START_TEST(needs_table) {
  ck_assert_str_eq(k_needs[0].member, "last_error");
  ck_assert_str_eq(k_needs[6].member, "memcpy_d2h");
  ck_assert_int_eq(k_needs[7].when, MI_NEED_TP);
  ck_assert_str_eq(k_needs[8].member, "convert");
  ck_assert_str_eq(k_needs[8].unless, "f32");
  ck_assert_ptr_null(k_needs[9].member);
}
END_TEST

int main(void) {
  return mi_check_run(mi_check_suite(
      "model_glue", "glue", 0, setup, NULL,
      MI_CHECK_TESTS(binds_rows_cols_and_widens, refusals_name_file_and_tensor,
                     checks_before_forward, kv_copy_layout_and_round_trip, needs_table)));
}
