/* Safetensors reader: hand-made good files must read back exactly, and every
 * kind of broken file must be refused with "PATH: problem". */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/safetensors.h"
#include "st_writer.h"
#include "tests/util/check_main.h"

static char *g_dir;

static void setup(void) { g_dir = tw_mkdtemp("st"); }
static void teardown(void) {
  tw_rmtree(g_dir);
  free(g_dir);
}

/* 24 + 8 + 8 = 40 bytes of distinct data */
static unsigned char DATA[40];
static void fill_data(void) {
  for (int i = 0; i < 40; i++) DATA[i] = (unsigned char)(i * 37 + 11);
}

/* Header listing the tensors out of offset order, with metadata. */
static const char *GOOD3 =
    "{\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}";

START_TEST(valid_three_tensors) {
  fill_data();
  char *p = tw_path(g_dir, "model.safetensors");
  ck_assert_int_eq(tw_write_st(p, GOOD3, DATA, 40), 0);
  char err[512] = "";
  mi_st_file *f = mi_st_open_file(p, err, sizeof err);
  ck_assert_msg(f != NULL, "%s", err);
  ck_assert_uint_eq(mi_st_count(f), 3);
  ck_assert_str_eq(mi_st_metadata(f, "format"), "pt");
  ck_assert_ptr_null(mi_st_metadata(f, "nope"));

  mi_weight_info wi;
  ck_assert_int_eq(mi_st_find(f, "a", &wi), 0);
  ck_assert_int_eq(wi.dtype, MI_DTYPE_F32);
  ck_assert_int_eq(wi.ndim, 2);
  ck_assert_int_eq(wi.shape[0], 2);
  ck_assert_int_eq(wi.shape[1], 3);
  ck_assert_uint_eq(wi.nbytes, 24);
  ck_assert_int_eq(memcmp(wi.data, DATA, 24), 0);
  ck_assert_str_eq(wi.file, p);

  ck_assert_int_eq(mi_st_find(f, "b", &wi), 0);
  ck_assert_int_eq(wi.dtype, MI_DTYPE_BF16);
  ck_assert_int_eq(wi.ndim, 1);
  ck_assert_int_eq(wi.shape[0], 4);
  ck_assert_int_eq(memcmp(wi.data, DATA + 24, 8), 0);

  ck_assert_int_eq(mi_st_find(f, "c", &wi), 0);
  ck_assert_int_eq(wi.dtype, MI_DTYPE_I64);
  ck_assert_int_eq(wi.ndim, 0);
  ck_assert_uint_eq(wi.nbytes, 8);
  ck_assert_int_eq(memcmp(wi.data, DATA + 32, 8), 0);

  ck_assert_int_eq(mi_st_find(f, "d", &wi), -1);
  ck_assert_int_eq(mi_st_find(f, "__metadata__", &wi), -1);
  /* file order is offset order */
  ck_assert_int_eq(mi_st_at(f, 0, &wi), 0);
  ck_assert_str_eq(wi.name, "a");
  ck_assert_str_eq(mi_st_dtype_string(f, 2), "I64");
  ck_assert_int_eq(mi_st_at(f, 3, &wi), -1);
  mi_st_close_file(f);

  /* the same through the directory API */
  mi_weights *w = mi_weights_open(g_dir, err, sizeof err);
  ck_assert_msg(w != NULL, "%s", err);
  ck_assert_uint_eq(mi_weights_count(w), 3);
  ck_assert_uint_eq(mi_weights_total_bytes(w), 40);
  const char *order[] = {"a", "b", "c"};
  for (size_t i = 0; i < 3; i++) {
    ck_assert_int_eq(mi_weights_at(w, i, &wi), 0);
    ck_assert_str_eq(wi.name, order[i]);
  }
  ck_assert_int_eq(mi_weights_at(w, 3, &wi), -1);
  ck_assert_int_eq(mi_weights_find(w, "b", &wi), 0);
  ck_assert_int_eq(memcmp(wi.data, DATA + 24, 8), 0);
  ck_assert_int_eq(mi_weights_find(w, "zz", &wi), -1);
  mi_weights_close(w);
  free(p);
}
END_TEST

START_TEST(other_dtypes_and_empty_tensor) {
  unsigned char d[8 + 2] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  char *p = tw_path(g_dir, "x.safetensors");
  ck_assert_int_eq(tw_write_st(p,
                               "{\"f\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                               "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[8,8]},"
                               "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[8,10]}}",
                               d, sizeof d),
                   0);
  char err[512] = "";
  mi_weights *w = mi_weights_open(p, err, sizeof err); /* a file path works too */
  ck_assert_msg(w != NULL, "%s", err);
  mi_weight_info wi;
  ck_assert_int_eq(mi_weights_find(w, "f", &wi), 0);
  ck_assert_int_eq(wi.dtype, MI_ST_DTYPE_OTHER);
  ck_assert_uint_eq(wi.nbytes, 8);
  ck_assert_int_eq(mi_weights_find(w, "e", &wi), 0);
  ck_assert_uint_eq(wi.nbytes, 0);
  ck_assert_int_eq(wi.shape[0], 0);
  ck_assert_int_eq(mi_weights_find(w, "h", &wi), 0);
  ck_assert_int_eq(wi.dtype, MI_DTYPE_F16);
  ck_assert_int_eq(((const unsigned char *)wi.data)[1], 10);
  mi_weights_close(w);
  free(p);
}
END_TEST

/* shard1: x [2] F32, y [3] U8 ; shard2: z [2] BF16 */
static void write_two_shards(const char *index_json) {
  unsigned char d1[11] = {0, 0, 128, 63, 0, 0, 0, 64, 7, 8, 9}, d2[4] = {0x80, 0x3f, 0x00, 0x40};
  char *p1 = tw_path(g_dir, "model-00001-of-00002.safetensors");
  char *p2 = tw_path(g_dir, "model-00002-of-00002.safetensors");
  char *pi = tw_path(g_dir, "model.safetensors.index.json");
  ck_assert_int_eq(tw_write_st(p1,
                               "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                               "\"y\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}",
                               d1, sizeof d1),
                   0);
  ck_assert_int_eq(
      tw_write_st(p2, "{\"z\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", d2, sizeof d2), 0);
  ck_assert_int_eq(tw_write_raw(pi, index_json, strlen(index_json)), 0);
  free(p1);
  free(p2);
  free(pi);
}

START_TEST(two_shard_index) {
  write_two_shards("{\"metadata\":{\"total_size\":15},\"weight_map\":{"
                   "\"z\":\"model-00002-of-00002.safetensors\","
                   "\"x\":\"model-00001-of-00002.safetensors\","
                   "\"y\":\"model-00001-of-00002.safetensors\"}}");
  char err[512] = "";
  mi_weights *w = mi_weights_open(g_dir, err, sizeof err);
  ck_assert_msg(w != NULL, "%s", err);
  ck_assert_uint_eq(mi_weights_count(w), 3);
  ck_assert_uint_eq(mi_weights_total_bytes(w), 15);
  mi_weight_info wi;
  ck_assert_int_eq(mi_weights_find(w, "x", &wi), 0);
  ck_assert_ptr_nonnull(strstr(wi.file, "model-00001-of-00002.safetensors"));
  float xs[2];
  memcpy(xs, wi.data, 8);
  ck_assert_float_eq(xs[0], 1.0f);
  ck_assert_float_eq(xs[1], 2.0f);
  ck_assert_int_eq(mi_weights_find(w, "z", &wi), 0);
  ck_assert_ptr_nonnull(strstr(wi.file, "model-00002-of-00002.safetensors"));
  ck_assert_int_eq(wi.dtype, MI_DTYPE_BF16);
  uint16_t z[2]; /* memcpy: data need not be aligned (this header is not padded) */
  memcpy(z, wi.data, sizeof z);
  ck_assert_float_eq(mi_bf16_to_f32(z[0]), 1.0f);
  ck_assert_float_eq(mi_bf16_to_f32(z[1]), 2.0f);
  ck_assert_int_eq(mi_weights_find(w, "y", &wi), 0);
  ck_assert_int_eq(wi.dtype, MI_DTYPE_U8);
  ck_assert_int_eq(((const unsigned char *)wi.data)[2], 9);
  ck_assert_int_eq(mi_weights_at(w, 2, &wi), 0);
  ck_assert_str_eq(wi.name, "z");
  mi_weights_close(w);
}
END_TEST

/* MI_WEIGHTS_READ (the file read into private memory) gives every tensor
 * with the same metadata and bytes as the mapping, for one file and for a
 * sharded directory. */
static void expect_same_both_ways(const char *path) {
  char err[512] = "";
  mi_weights *a = mi_weights_open_ex(path, MI_WEIGHTS_MMAP, err, sizeof err);
  ck_assert_msg(a != NULL, "%s", err);
  mi_weights *b = mi_weights_open_ex(path, MI_WEIGHTS_READ, err, sizeof err);
  ck_assert_msg(b != NULL, "%s", err);
  ck_assert_uint_eq(mi_weights_count(a), mi_weights_count(b));
  ck_assert_uint_gt(mi_weights_count(a), 0);
  for (size_t i = 0; i < mi_weights_count(a); i++) {
    mi_weight_info x, y;
    ck_assert_int_eq(mi_weights_at(a, i, &x), 0);
    ck_assert_int_eq(mi_weights_at(b, i, &y), 0);
    ck_assert_str_eq(x.name, y.name);
    ck_assert_int_eq(x.dtype, y.dtype);
    ck_assert_uint_eq(x.nbytes, y.nbytes);
    ck_assert_ptr_ne(x.data, y.data); /* a copy, not the mapping */
    ck_assert_int_eq(memcmp(x.data, y.data, x.nbytes), 0);
  }
  mi_weights_close(a);
  mi_weights_close(b);
}

START_TEST(read_mode_same_as_mmap) {
  fill_data();
  char *p = tw_path(g_dir, "model.safetensors");
  ck_assert_int_eq(tw_write_st(p, GOOD3, DATA, 40), 0);
  expect_same_both_ways(g_dir);
  ck_assert_int_eq(unlink(p), 0);
  free(p);
  write_two_shards("{\"weight_map\":{\"z\":\"model-00002-of-00002.safetensors\","
                   "\"x\":\"model-00001-of-00002.safetensors\","
                   "\"y\":\"model-00001-of-00002.safetensors\"}}");
  expect_same_both_ways(g_dir);
}
END_TEST

/* ---- rejections ---------------------------------------------------------- */

/* Opening `path` (file or dir, via mi_weights_open) fails with a message
 * that names `who` and contains `want`. */
static void expect_fail(const char *path, const char *who, const char *want) {
  /* mapped or read into memory: the same refusal */
  for (int how = MI_WEIGHTS_MMAP; how <= MI_WEIGHTS_READ; how++) {
    char err[512] = "";
    mi_weights *w = mi_weights_open_ex(path, (mi_weights_load)how, err, sizeof err);
    ck_assert_msg(w == NULL, "%s: expected failure '%s'", path, want);
    ck_assert_msg(strstr(err, who) != NULL, "message does not name %s: %s", who, err);
    ck_assert_msg(strstr(err, want) != NULL, "message lacks '%s': %s", want, err);
    ck_assert_msg(strchr(err, '\n') == NULL, "not one line: %s", err);
  }
}

/* A file with this header (and `dlen` data bytes) is refused with `want`. */
static void reject_header(const char *header, size_t dlen, const char *want) {
  unsigned char data[64] = {0};
  ck_assert_uint_le(dlen, sizeof data);
  char *p = tw_path(g_dir, "bad.safetensors");
  ck_assert_int_eq(tw_write_st(p, header, data, dlen), 0);
  char err[512] = "";
  mi_st_file *f = mi_st_open_file(p, err, sizeof err);
  ck_assert_msg(f == NULL, "accepted: %s", header);
  ck_assert_msg(strstr(err, p) == err, "message does not start with the path: %s", err);
  ck_assert_msg(strstr(err, want) != NULL, "message lacks '%s': %s", want, err);
  expect_fail(p, p, want);
  free(p);
}

START_TEST(reject_empty_and_short) {
  char *p = tw_path(g_dir, "empty.safetensors");
  ck_assert_int_eq(tw_write_raw(p, "", 0), 0);
  expect_fail(p, p, "too small");
  ck_assert_int_eq(tw_write_raw(p, "\x02\0\0\0", 4), 0);
  expect_fail(p, p, "too small");
  free(p);
  expect_fail(g_dir, g_dir, "no model.safetensors"); /* empty directory */
}
END_TEST

START_TEST(reject_header_length) {
  char *p = tw_path(g_dir, "len.safetensors");
  ck_assert_int_eq(tw_write_st_len(p, 100, "{}", NULL, 0), 0);
  expect_fail(p, p, "past end of file");
  ck_assert_int_eq(tw_write_st_len(p, 1ull << 40, "{}", NULL, 0), 0);
  expect_fail(p, p, "too large");
  ck_assert_int_eq(tw_write_st_len(p, UINT64_MAX, "{}", NULL, 0), 0);
  expect_fail(p, p, "too large");
  /* a header just over the 16 MiB limit that the file really holds: refused
   * by its length, before jansson sees (and multiplies) it */
  size_t n = (16u << 20) + 1;
  char *big = malloc(8 + n);
  ck_assert(big);
  for (int b = 0; b < 8; b++) big[b] = (char)(((uint64_t)n >> (8 * b)) & 0xff);
  memset(big + 8, ' ', n);
  big[8] = '{';
  big[8 + n - 1] = '}';
  ck_assert_int_eq(tw_write_raw(p, big, 8 + n), 0);
  free(big);
  expect_fail(p, p, "too large (limit 16777216)");
  free(p);
}
END_TEST

START_TEST(reject_bad_json) {
  reject_header("{\"a\": {", 0, "not valid JSON");
  reject_header("", 0, "not valid JSON");
  reject_header("[1,2]", 0, "not an object");
  reject_header("\"str\"", 0, "not valid JSON"); /* jansson refuses bare scalars */
  reject_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, "duplicate");
  reject_header("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__");
  reject_header("{\"__metadata__\":[]}", 0, "__metadata__");
}
END_TEST

START_TEST(reject_missing_fields) {
  reject_header("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'t': missing dtype");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "'t': missing shape");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'t': missing data_offsets");
  reject_header("{\"t\":[1]}", 4, "'t': entry is not a JSON object");
  reject_header("{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'t': dtype is not a string");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "'t': data_offsets");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "not an integer");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, "shape is not an array");
}
END_TEST

START_TEST(reject_bad_values) {
  reject_header("{\"t\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'t': unknown dtype 'Q7'");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past end of data");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "begin 4 > end 0");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "byte length 4 != ");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative dimension");
  reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "negative data_offsets");
  reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,4]}}", 4,
                "overflows");
  reject_header("{\"t\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}", 4,
                "overflows");
  reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
                "9 dimensions");
  reject_header("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor name");
  /* a control character in a name does not split the one-line message
   * (found by fuzz/fuzz_safetensors.c; expect_fail checks for one line) */
  reject_header("{\"a\\nb\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'a b': unknown dtype");
}
END_TEST

START_TEST(reject_layout) {
  reject_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                12, "'a' and 'b' overlap");
  reject_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                4, "overlap");
  reject_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "before tensor 'a'");
  reject_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "4 trailing bytes");
}
END_TEST

START_TEST(reject_index) {
  char *pi = tw_path(g_dir, "model.safetensors.index.json");
  write_two_shards("{\"weight_map\":{\"x\":\"../x.safetensors\"}}");
  expect_fail(g_dir, pi, "'../x.safetensors'");
  write_two_shards("{\"weight_map\":{\"x\":\"/etc/passwd\"}}");
  expect_fail(g_dir, pi, "not a plain file name");
  write_two_shards("{\"weight_map\":{\"x\":\"sub/model-00001-of-00002.safetensors\"}}");
  expect_fail(g_dir, pi, "not a plain file name");
  /* control characters, or a name longer than a file name can be (found by
   * fuzz/fuzz_st_index.c: the message used to carry the raw bytes) */
  write_two_shards("{\"weight_map\":{\"x\":\"a\\nb.safetensors\"}}");
  expect_fail(g_dir, pi, "'a b.safetensors' for 'x' is not a plain file name");
  {
    char idx[700];
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"x\":\"%0600d\"}}", 0);
    write_two_shards(idx);
    expect_fail(g_dir, pi, "is not a plain file name");
  }

  write_two_shards("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                   "\"q\":\"model-00009-of-00009.safetensors\"}}");
  char *missing = tw_path(g_dir, "model-00009-of-00009.safetensors");
  expect_fail(g_dir, missing, "cannot open");
  free(missing);

  write_two_shards("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                   "\"z\":\"model-00001-of-00002.safetensors\"}}");
  expect_fail(g_dir, pi, "'z' is mapped to model-00001-of-00002.safetensors, which does not contain it");

  write_two_shards("{\"weight_map\":{\"x\":3}}");
  expect_fail(g_dir, pi, "not a string");
  write_two_shards("{\"metadata\":{}}");
  expect_fail(g_dir, pi, "no \"weight_map\"");
  write_two_shards("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                   "\"x\":\"model-00001-of-00002.safetensors\"}}");
  expect_fail(g_dir, pi, "duplicate");
  write_two_shards("{\"weight_map\":");
  expect_fail(g_dir, pi, "not valid JSON");
  /* an index over the size limit is refused before parsing (sparse file) */
  ck_assert_int_eq(truncate(pi, 65 << 20), 0);
  expect_fail(g_dir, pi, "file is 68157440 bytes, over the 67108864 byte limit for a safetensors index");

  /* a broken shard is reported under its own name */
  write_two_shards("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\"}}");
  char *p1 = tw_path(g_dir, "model-00001-of-00002.safetensors");
  ck_assert_int_eq(tw_write_raw(p1, "abc", 3), 0);
  expect_fail(g_dir, p1, "too small");
  free(p1);
  free(pi);
}
END_TEST

/* ---- issue 18: files that are not files, point elsewhere, break the
 * format's promises, or change while mapped -------------------------------- */

START_TEST(reject_misaligned) {
  /* a header whose length is not a multiple of 8: every tensor misaligned */
  char *p = tw_path(g_dir, "unpadded.safetensors");
  const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"; /* 54 bytes */
  ck_assert_uint_ne(strlen(h) % 8, 0);
  ck_assert_int_eq(tw_write_st_len(p, strlen(h), h, "\0\0\0\0", 4), 0);
  expect_fail(p, p, "header length 54 is not a multiple of 8");
  free(p);
  /* a tensor whose offset is not a multiple of its element size */
  reject_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
                6, "tensor 'b': data offset 2 is not a multiple of its I32 element size 4");
}
END_TEST

START_TEST(reject_fifo_and_device) {
  char *p = tw_path(g_dir, "model.safetensors");
  ck_assert_int_eq(mkfifo(p, 0644), 0);
  /* would block forever in open() before; now one line, at once */
  alarm(20);
  expect_fail(g_dir, p, "not a regular file (a FIFO)");
  expect_fail("/dev/zero", "/dev/zero", "not a regular file (a character device)");
  alarm(0);
  unlink(p);
  /* a FIFO as the index, and as a shard the index names */
  char *pi = tw_path(g_dir, "model.safetensors.index.json");
  ck_assert_int_eq(mkfifo(pi, 0644), 0);
  alarm(20);
  expect_fail(g_dir, pi, "not a regular file (a FIFO)");
  alarm(0);
  unlink(pi);
  write_two_shards("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                   "\"q\":\"fifo.safetensors\"}}");
  char *pf = tw_path(g_dir, "fifo.safetensors");
  ck_assert_int_eq(mkfifo(pf, 0644), 0);
  alarm(20);
  expect_fail(g_dir, pf, "not a regular file (a FIFO)");
  alarm(0);
  free(pf);
  free(pi);
  free(p);
}
END_TEST

START_TEST(reject_shard_outside) {
  /* an index naming a shard that is a symlink leading out of the folder */
  char *outside = tw_mkdtemp("st-out");
  char *target = tw_path(outside, "model-00002-of-00002.safetensors");
  write_two_shards("{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                   "\"z\":\"model-00002-of-00002.safetensors\"}}");
  char *p2 = tw_path(g_dir, "model-00002-of-00002.safetensors");
  ck_assert_int_eq(rename(p2, target), 0);
  ck_assert_int_eq(symlink(target, p2), 0);
  expect_fail(g_dir, p2, "leads outside the model folder");
  /* a symlink to a file inside the folder is fine */
  unlink(p2);
  char *inside = tw_path(g_dir, "blob-z");
  ck_assert_int_eq(rename(target, inside), 0);
  ck_assert_int_eq(symlink("blob-z", p2), 0);
  char err[512] = "";
  mi_weights *w = mi_weights_open(g_dir, err, sizeof err);
  ck_assert_msg(w != NULL, "%s", err);
  mi_weights_close(w);
  /* the Hugging Face hub cache: snapshots/REV/x -> ../../blobs/HASH */
  char *repo = tw_mkdtemp("models--org--name");
  char *snaps = tw_path(repo, "snapshots"), *blobs = tw_path(repo, "blobs");
  ck_assert_int_eq(mkdir(snaps, 0755), 0);
  ck_assert_int_eq(mkdir(blobs, 0755), 0);
  char *rev = tw_path(snaps, "abc123"), *blob = tw_path(blobs, "hash1");
  ck_assert_int_eq(mkdir(rev, 0755), 0);
  ck_assert_int_eq(tw_write_st(blob, GOOD3, DATA, 40), 0);
  char *link = tw_path(rev, "model.safetensors");
  ck_assert_int_eq(symlink("../../blobs/hash1", link), 0);
  w = mi_weights_open(rev, err, sizeof err);
  ck_assert_msg(w != NULL, "HF cache layout refused: %s", err);
  mi_weights_close(w);
  tw_rmtree(repo);
  free(link), free(rev), free(blob), free(snaps), free(blobs), free(repo);
  free(inside), free(p2), free(target);
  tw_rmtree(outside);
  free(outside);
}
END_TEST

/* --mmap, and the file truncated under the mapping: the next touch of the
 * lost pages is a SIGBUS; the guard names the file and exits 1. */
START_TEST(truncated_while_mapped) {
  fill_data();
  char *p = tw_path(g_dir, "model.safetensors");
  /* data past the first page, so truncating to the header loses it */
  static unsigned char big[3 * 4096];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)i;
  ck_assert_int_eq(
      tw_write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[12288],\"data_offsets\":[0,12288]}}",
                  big, sizeof big),
      0);
  char err[512] = "";
  mi_st_file *f = mi_st_open_file_ex(p, MI_WEIGHTS_MMAP, err, sizeof err);
  ck_assert_msg(f != NULL, "%s", err);
  mi_weight_info wi;
  ck_assert_int_eq(mi_st_find(f, "a", &wi), 0);
  int pe[2];
  ck_assert_int_eq(pipe(pe), 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    dup2(pe[1], 2);
    close(pe[0]);
    if (truncate(p, 100) != 0) _exit(3);
    volatile unsigned char sum = 0;
    for (size_t i = 0; i < wi.nbytes; i += 512) sum += ((const volatile unsigned char *)wi.data)[i];
    _exit(sum == 255 ? 4 : 5); /* not reached: the touch faults */
  }
  close(pe[1]);
  char msg[1024];
  ssize_t n = 0, r;
  while (n < (ssize_t)sizeof msg - 1 && (r = read(pe[0], msg + n, sizeof msg - 1 - (size_t)n)) > 0) n += r;
  msg[n > 0 ? n : 0] = 0;
  close(pe[0]);
  int st;
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d (signal %d): %s", st,
                WIFSIGNALED(st) ? WTERMSIG(st) : 0, msg);
  ck_assert_msg(strstr(msg, "model.safetensors: the file changed while mapped (truncated?)"), "%s", msg);
  ck_assert_msg(strchr(msg, '\n') == msg + strlen(msg) - 1, "not one line: %s", msg);
  mi_st_close_file(f);
  free(p);
}
END_TEST

static Suite *suite(void) {
  return mi_check_suite(
      "safetensors", "reader", 0, setup, teardown,
      MI_CHECK_TESTS(valid_three_tensors, other_dtypes_and_empty_tensor, two_shard_index,
                     read_mode_same_as_mmap, reject_empty_and_short, reject_header_length,
                     reject_bad_json, reject_missing_fields, reject_bad_values, reject_layout,
                     reject_index, reject_misaligned, reject_fifo_and_device, reject_shard_outside,
                     truncated_while_mapped));
}

int main(void) {
  return mi_check_run(suite());
}
