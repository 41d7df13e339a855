/* GGUF files as a model input (core/runtime/gguf.h, gguf_model.h, docs/gguf.md).
 *
 * test_gguf (no node needed): a small Qwen3-shaped GGUF written here in C
 * (a byte-level tokenizer of 263 tokens, one layer, F32 weights) is read
 * back field by field and runs through mi-run; then it is broken byte by
 * byte (truncated at every length, absurd counts, a string past the end,
 * an unknown value type, offsets out of range / misaligned / overlapping,
 * a needed tensor of a quantized or unknown ggml type, an architecture no
 * contract lists, ...): each must be one line "PATH: problem" from the
 * reader and from mi-run (exit 1, never a signal).
 *
 * test_gguf_peer (argument "peer"; skipped, exit 77, without node): a
 * mi-mkmodel checkpoint converted by tools/peer/hf2gguf.mjs to an F32 and a
 * BF16 GGUF gives mi-run the same prompt ids and the same greedy tokens as
 * the folder, and the same tokenizer (ids of special tokens, unicode),
 * special ids, end tokens and chat template. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/runtime/gguf.h"
#include "core/runtime/gguf_model.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_gpt2.h"
#include "tests/util/test_proc.h"

static char g_build[1024], g_src[1024], g_tmp[1024];

/* ---- a GGUF writer --------------------------------------------------------- */

typedef struct gw {
  unsigned char *b;
  size_t len, cap;
} gw;

static void put(gw *w, const void *p, size_t n) {
  if (w->len + n > w->cap) {
    w->cap = (w->len + n) * 2 + 4096;
    w->b = realloc(w->b, w->cap);
    ck_assert_ptr_nonnull(w->b);
  }
  memcpy(w->b + w->len, p, n);
  w->len += n;
}
static void u32(gw *w, uint32_t v) {
  unsigned char b[4] = {v, v >> 8, v >> 16, v >> 24};
  put(w, b, 4);
}
static void u64(gw *w, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  put(w, b, 8);
}
static void str(gw *w, const char *s) {
  u64(w, strlen(s));
  put(w, s, strlen(s));
}
__attribute__((noinline)) static void set_u32(gw *w, size_t at, uint32_t v) {
  for (int i = 0; i < 4; i++)
    w->b[at + i] = (unsigned char)(v >> (8 * i));
}
/* Offset of the first s in w (the test fails when there is none). */
static size_t find(const gw *w, const char *s) {
  const unsigned char *h = memmem(w->b, w->len, s, strlen(s));
  if (!h) ck_abort_msg("'%s' not in the file", s);
  return (size_t)(h - w->b);
}
__attribute__((noinline)) static void set_u64(gw *w, size_t at, uint64_t v) {
  for (int i = 0; i < 8; i++)
    w->b[at + i] = (unsigned char)(v >> (8 * i));
}

/* Where the fields a test breaks were written. */
typedef struct layout {
  size_t n_tensors, n_kv; /* the counts */
  size_t first_key_len;   /* length of the first key */
  size_t first_vtype;     /* value type of the first key */
  size_t arch_value;      /* the bytes "qwen3" of general.architecture */
  size_t tokens_count;    /* element count of tokenizer.ggml.tokens */
  size_t merges_vtype;    /* value type of tokenizer.ggml.merges */
  size_t t_ndims[16], t_ne0[16], t_type[16], t_off[16];
  const char *t_name[16];
  uint64_t t_offset[16], t_bytes[16];
  size_t n_t;
  size_t data_start, data_end; /* file offsets */
} layout;

#define D 64  /* hidden */
#define F 128 /* ffn */
#define HQ 4
#define HK 2
#define HD 16
#define NV 263 /* 256 byte tokens + "hi" + 4 special + 2 unused */

static uint32_t g_rng = 12345;
static float frand(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return ((float)(g_rng >> 8) / (float)(1u << 24) - 0.5f) * 0.2f;
}

/* A one-layer Qwen3 GGUF (F32), its layout in L. */
/* with_unmapped: the last tensor, rope_freqs.unused, which no contract maps (a
 * model refuses it; the reader keeps it, whatever its type) */
/* g_mtp: a second block that is llama.cpp's appended multi-token-prediction
 * layer (block_count 2, nextn_predict_layers 1, blk.1.attn_norm and
 * blk.1.nextn.eh_proj), as its converter writes a Qwen3.5 with its MTP head */
static int g_mtp;

static gw make_model_x(layout *L, int with_unmapped) {
  gw w = {0};
  memset(L, 0, sizeof *L);
  put(&w, "GGUF", 4);
  u32(&w, 3);
  L->n_tensors = w.len;
  u64(&w, 0);
  L->n_kv = w.len;
  u64(&w, 0);
  uint64_t nkv = 0;
#define KV(k, t) (str(&w, k), u32(&w, t), nkv++)
  L->first_key_len = w.len;
  KV("general.architecture", MI_GGUF_STRING);
  L->first_vtype = w.len - 4;
  L->arch_value = w.len + 8;
  str(&w, "qwen3");
  KV("general.alignment", MI_GGUF_U32), u32(&w, 32);
  KV("qwen3.block_count", MI_GGUF_U32), u32(&w, g_mtp ? 2 : 1);
  if (g_mtp) KV("qwen3.nextn_predict_layers", MI_GGUF_U32), u32(&w, 1);
  KV("qwen3.context_length", MI_GGUF_U32), u32(&w, 256);
  KV("qwen3.embedding_length", MI_GGUF_U32), u32(&w, D);
  KV("qwen3.feed_forward_length", MI_GGUF_U32), u32(&w, F);
  KV("qwen3.attention.head_count", MI_GGUF_U32), u32(&w, HQ);
  KV("qwen3.attention.head_count_kv", MI_GGUF_U32), u32(&w, HK);
  KV("qwen3.attention.key_length", MI_GGUF_U32), u32(&w, HD);
  KV("qwen3.attention.value_length", MI_GGUF_U32), u32(&w, HD);
  float eps = 1e-6f, theta = 1e6f;
  KV("qwen3.attention.layer_norm_rms_epsilon", MI_GGUF_F32), put(&w, &eps, 4);
  KV("qwen3.rope.freq_base", MI_GGUF_F32), put(&w, &theta, 4);
  KV("general.some_flag", MI_GGUF_BOOL), put(&w, "\1", 1);
  KV("general.some_i64s", MI_GGUF_ARRAY), u32(&w, MI_GGUF_I64), u64(&w, 2), u64(&w, 7),
      u64(&w, (uint64_t)-3);
  KV("tokenizer.ggml.model", MI_GGUF_STRING), str(&w, "gpt2");
  KV("tokenizer.ggml.pre", MI_GGUF_STRING), str(&w, "qwen2");
  KV("tokenizer.ggml.tokens", MI_GGUF_ARRAY), u32(&w, MI_GGUF_STRING);
  L->tokens_count = w.len;
  u64(&w, NV);
  for (int b = 0; b < 256; b++) {
    char c[4];
    int n = mi_test_byte_char(b, c);
    u64(&w, (uint64_t)n);
    put(&w, c, (size_t)n);
  }
  const char *extra[] = {"hi",      "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                         "<think>", "[PAD261]",      "[PAD262]"};
  const int32_t extra_type[] = {1, 3, 3, 3, 4, 5, 5};
  for (int i = 0; i < 7; i++)
    str(&w, extra[i]);
  KV("tokenizer.ggml.token_type", MI_GGUF_ARRAY), u32(&w, MI_GGUF_I32), u64(&w, NV);
  for (int i = 0; i < 256; i++)
    u32(&w, 1);
  for (int i = 0; i < 7; i++)
    u32(&w, (uint32_t)extra_type[i]);
  KV("tokenizer.ggml.merges", MI_GGUF_ARRAY);
  L->merges_vtype = w.len - 4;
  u32(&w, MI_GGUF_STRING), u64(&w, 1), str(&w, "h i");
  KV("tokenizer.ggml.eos_token_id", MI_GGUF_U32), u32(&w, 259);
  KV("tokenizer.ggml.padding_token_id", MI_GGUF_U32), u32(&w, 257);
  KV("tokenizer.chat_template", MI_GGUF_STRING),
      str(&w, "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
              "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}");
#undef KV
  set_u64(&w, L->n_kv, nkv);
  /* tensors: name, ne (innermost first) */
  struct {
    const char *name;
    uint64_t ne0, ne1;
    int nd, ones;
  } T[] = {
      {"token_embd.weight", D, NV, 2, 0},
      {"output_norm.weight", D, 1, 1, 1},
      {"blk.0.attn_norm.weight", D, 1, 1, 1},
      {"blk.0.attn_q.weight", D, HQ * HD, 2, 0},
      {"blk.0.attn_k.weight", D, HK * HD, 2, 0},
      {"blk.0.attn_v.weight", D, HK * HD, 2, 0},
      {"blk.0.attn_output.weight", HQ * HD, D, 2, 0},
      {"blk.0.attn_q_norm.weight", HD, 1, 1, 1},
      {"blk.0.attn_k_norm.weight", HD, 1, 1, 1},
      {"blk.0.ffn_norm.weight", D, 1, 1, 1},
      {"blk.0.ffn_gate.weight", D, F, 2, 0},
      {"blk.0.ffn_up.weight", D, F, 2, 0},
      {"blk.0.ffn_down.weight", F, D, 2, 0},
      {"rope_freqs.unused", 4, 1, 1, 1},
      {"blk.1.attn_norm.weight", D, 1, 1, 1},
      {"blk.1.nextn.eh_proj.weight", 2 * D, D, 2, 0},
  };
  /* the MTP layer's two last; rope_freqs.unused before them */
  L->n_t = sizeof T / sizeof T[0] - 2 - (with_unmapped ? 0 : 1);
  if (g_mtp) { /* in place of rope_freqs.unused when that is left out */
    if (!with_unmapped) T[L->n_t] = T[L->n_t + 1], T[L->n_t + 1] = T[L->n_t + 2];
    L->n_t += 2;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < L->n_t; i++) {
    L->t_name[i] = T[i].name;
    str(&w, T[i].name);
    L->t_ndims[i] = w.len;
    u32(&w, (uint32_t)T[i].nd);
    L->t_ne0[i] = w.len;
    u64(&w, T[i].ne0);
    if (T[i].nd == 2) u64(&w, T[i].ne1);
    L->t_type[i] = w.len;
    u32(&w, 0);
    L->t_off[i] = w.len;
    u64(&w, off);
    L->t_offset[i] = off;
    L->t_bytes[i] = T[i].ne0 * T[i].ne1 * 4;
    off += (L->t_bytes[i] + 31) / 32 * 32;
  }
  set_u64(&w, L->n_tensors, L->n_t);
  while (w.len % 32)
    put(&w, "\0", 1);
  L->data_start = w.len;
  for (size_t i = 0; i < L->n_t; i++) {
    for (uint64_t k = 0; k < T[i].ne0 * T[i].ne1; k++) {
      float v = T[i].ones ? 1.0f : frand();
      put(&w, &v, 4);
    }
    while ((w.len - L->data_start) % 32)
      put(&w, "\0", 1);
  }
  L->data_end = L->data_start + L->t_offset[L->n_t - 1] + L->t_bytes[L->n_t - 1];
  return w;
}

static gw make_model(layout *L) { return make_model_x(L, 1); }

static void write_file(const char *path, const gw *w, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(w->b, 1, len, f), len);
  fclose(f);
}

/* ---- running mi-run -------------------------------------------------------- */

typedef struct run_result {
  int status; /* exit code, or 128 + signal */
  char *out, *err;
} run_result;

static char *slurp(const char *p) {
  FILE *f = fopen(p, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t r = fread(b, 1, (size_t)n, f);
  b[r] = 0;
  fclose(f);
  return b;
}

static void run_free(run_result *r) {
  free(r->out);
  free(r->err);
}

static run_result run_mi(const char *const *args) {
  char exe[1200], of[1300], ef[1300];
  snprintf(exe, sizeof exe, "%s/bin/mi-run", g_build);
  snprintf(of, sizeof of, "%s/out.txt", g_tmp);
  snprintf(ef, sizeof ef, "%s/err.txt", g_tmp);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY), o = open(of, O_WRONLY | O_CREAT | O_TRUNC, 0644),
        e = open(ef, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    alarm(120);
    const char *argv[64] = {exe};
    int n = 1;
    for (; args[n - 1] && n < 63; n++)
      argv[n] = args[n - 1];
    argv[n] = NULL;
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  run_result r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(of);
  r.err = slurp(ef);
  return r;
}

/* mi-run on a broken file: exit 1, nothing on stdout, one line on stderr
 * naming the file and containing want. */
static void expect_run_error(const char *path, const char *want) {
  const char *args[] = {"-m", path, "-p", "hi", "-n", "2", "--temp", "0", NULL};
  run_result r = run_mi(args);
  ck_assert_msg(r.status == 1, "%s: exit %d (want 1); stderr: %s", path, r.status, r.err);
  ck_assert_msg(r.out[0] == 0, "stdout not empty: %s", r.out);
  char *nl = strchr(r.err, '\n');
  ck_assert_msg(nl && nl[1] == 0, "expected one line on stderr, got: %s", r.err);
  ck_assert_msg(strstr(r.err, path), "stderr does not name %s: %s", path, r.err);
  ck_assert_msg(strstr(r.err, want), "stderr lacks '%s': %s", want, r.err);
  run_free(&r);
}

/* The reader on bytes in memory: refused with one line "NAME: ...want...". */
static void expect_reader_error(const gw *w, size_t len, const char *want) {
  char err[512] = "";
  mi_gguf *g = mi_gguf_open_mem(w->b, len, "mem.gguf", err, sizeof err);
  ck_assert_msg(g == NULL, "accepted a broken file (want '%s')", want ? want : "");
  ck_assert_msg(!strncmp(err, "mem.gguf: ", 10), "not 'PATH: problem': %s", err);
  ck_assert_msg(!strchr(err, '\n'), "more than one line: %s", err);
  if (want) ck_assert_msg(strstr(err, want), "error lacks '%s': %s", want, err);
}

/* ---- tests: the reader ------------------------------------------------------ */

START_TEST(reader_reads_what_was_written) {
  layout L;
  gw w = make_model(&L);
  char p[1200], err[512];
  snprintf(p, sizeof p, "%s/good.gguf", g_tmp);
  write_file(p, &w, w.len);
  ck_assert_int_eq(mi_gguf_sniff(p), 1);
  for (int how = 0; how < 2; how++) {
    mi_gguf *g = mi_gguf_open(p, how ? MI_WEIGHTS_READ : MI_WEIGHTS_MMAP, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_uint_eq(mi_gguf_version(g), 3);
    ck_assert_uint_eq(mi_gguf_alignment(g), 32);
    size_t n;
    const char *s = mi_gguf_kv_str(mi_gguf_get(g, "general.architecture"), &n);
    ck_assert(s && n == 5 && !memcmp(s, "qwen3", 5));
    int64_t v;
    ck_assert_int_eq(mi_gguf_kv_int(mi_gguf_get(g, "qwen3.embedding_length"), &v), 0);
    ck_assert_int_eq(v, D);
    double d;
    ck_assert_int_eq(mi_gguf_kv_real(mi_gguf_get(g, "qwen3.rope.freq_base"), &d), 0);
    ck_assert(d == 1e6);
    ck_assert_int_eq(mi_gguf_kv_int(mi_gguf_get(g, "general.some_flag"), &v), 0);
    ck_assert_int_eq(v, 1);
    const mi_gguf_kv *a = mi_gguf_get(g, "general.some_i64s");
    ck_assert(a && a->type == MI_GGUF_ARRAY && a->n == 2);
    ck_assert_int_eq(mi_gguf_arr_int(a, 1, &v), 0);
    ck_assert_int_eq(v, -3);
    ck_assert_int_eq(mi_gguf_arr_int(a, 2, &v), -1);
    const mi_gguf_kv *t = mi_gguf_get(g, "tokenizer.ggml.tokens");
    ck_assert(t && t->n == NV);
    ck_assert_int_eq(mi_gguf_arr_str(t, 256, &s, &n), 0);
    ck_assert(n == 2 && !memcmp(s, "hi", 2));
    ck_assert_ptr_null(mi_gguf_get(g, "no.such.key"));
    ck_assert_uint_eq(mi_gguf_tensor_count(g), L.n_t);
    const mi_gguf_tensor *q = mi_gguf_tensor_find(g, "blk.0.attn_q.weight");
    ck_assert_ptr_nonnull(q);
    ck_assert(q->n_dims == 2 && q->ne[0] == D && q->ne[1] == HQ * HD && q->type == MI_GGML_F32);
    ck_assert_uint_eq(q->nbytes, (uint64_t)D * HQ * HD * 4);
    ck_assert(q->known && q->data);
    ck_assert_int_eq(memcmp(q->data, w.b + L.data_start + L.t_offset[3], q->nbytes), 0);
    ck_assert_str_eq(mi_gguf_type_name(12), "Q4_K");
    ck_assert_ptr_null(mi_gguf_type_name(4));
    mi_gguf_close(g);
  }
  /* not GGUF */
  char np[1200];
  snprintf(np, sizeof np, "%s/not.gguf", g_tmp);
  FILE *f = fopen(np, "w");
  fputs("hello, not a model\n", f);
  fclose(f);
  ck_assert_int_eq(mi_gguf_sniff(np), 0);
  ck_assert_int_eq(mi_gguf_sniff(g_tmp), 0);
  free(w.b);
}
END_TEST

START_TEST(reader_refuses_truncation_at_every_length) {
  layout L;
  gw w = make_model(&L);
  /* every length inside the header and the first tensors, then a stride */
  for (size_t len = 0; len < L.data_end; len += len < L.data_start + 4096 ? 1 : 509)
    expect_reader_error(&w, len, NULL);
  free(w.b);
}
END_TEST

START_TEST(reader_refuses_hostile_headers) {
  layout L;
  gw w = make_model(&L);
  gw c = {0};
#define MUT(stmt, want)                                                                            \
  do {                                                                                             \
    c.len = 0;                                                                                     \
    put(&c, w.b, w.len);                                                                           \
    stmt;                                                                                          \
    expect_reader_error(&c, c.len, want);                                                          \
  } while (0)
  MUT(set_u32(&c, 4, 1), "version 1");
  MUT(set_u32(&c, 4, 0x03000000u), "big-endian");
  MUT(memcpy(c.b, "GGUG", 4), "magic");
  MUT(set_u64(&c, L.n_tensors, 1ull << 40), "tensors (limit");
  MUT(set_u64(&c, L.n_kv, UINT64_MAX), "metadata keys (limit");
  MUT(set_u64(&c, L.n_kv, 200), NULL); /* more keys than written: parsing runs into the tensors */
  MUT(set_u64(&c, L.first_key_len, c.len), "string of");
  MUT(set_u64(&c, L.first_key_len, 1ull << 62), "string of");
  MUT(set_u64(&c, L.first_key_len, 0), "empty");
  MUT(set_u32(&c, L.first_vtype, 99), "unknown value type 99");
  MUT(set_u64(&c, L.tokens_count, 1ull << 40), "array of");
  MUT(set_u32(&c, L.merges_vtype + 4, MI_GGUF_ARRAY), "arrays of arrays");
  MUT(set_u32(&c, L.merges_vtype + 4, 13), "array of unknown value type");
  MUT(set_u32(&c, L.t_ndims[3], 5), "5 dimensions");
  MUT(set_u32(&c, L.t_ndims[3], 0), "0 dimensions");
  MUT(set_u64(&c, L.t_ne0[3], 1ull << 62), "overflows");
  MUT(set_u64(&c, L.t_off[3], 1ull << 40), "past the end of the data");
  MUT(set_u64(&c, L.t_off[3], UINT64_MAX - 31), "past the end of the data");
  MUT(set_u64(&c, L.t_off[3], L.t_offset[3] + 4), "not a multiple of the alignment");
  MUT(set_u64(&c, L.t_off[4], L.t_offset[3]), "overlap");
  MUT(set_u64(&c, L.t_off[4], L.t_offset[3] + 32), "overlap");
  MUT(set_u32(&c, L.t_type[3], 12), "not a multiple of the Q4_K block"); /* ne[0] 64 < 256 */
  /* a tensor name twice */
  MUT(memcpy(c.b + L.t_ndims[5] - strlen("blk.0.attn_v.weight"), "blk.0.attn_k.weight", 19),
      "appears twice");
  {
    /* a key twice: "qwen3.block_count" becomes a second "general.alignment" (17 bytes each) */
    c.len = 0;
    put(&c, w.b, w.len);
    unsigned char *hit = c.b + find(&c, "qwen3.block_count");
    ck_assert_ptr_nonnull(hit);
    memcpy(hit, "general.alignment", 17);
    expect_reader_error(&c, c.len, "'general.alignment' appears twice");
  }
  {
    c.len = 0;
    put(&c, w.b, w.len);
    unsigned char *hit = c.b + find(&c, "qwen3.embedding_length");
    ck_assert_ptr_nonnull(hit);
    memcpy(hit, "qwen3.context_length\0\0", 22); /* control characters: refused */
    expect_reader_error(&c, c.len, "control character");
    memcpy(hit - 8, "\x14\0\0\0\0\0\0\0", 8); /* length 20: the rest reads as garbage */
    expect_reader_error(&c, c.len, NULL);
  }
  /* general.alignment that is not a power of two, or of the wrong type */
  {
    c.len = 0;
    put(&c, w.b, w.len);
    unsigned char *hit = c.b + find(&c, "general.alignment");
    ck_assert_ptr_nonnull(hit);
    set_u32(&c, (size_t)(hit - c.b) + 17 + 4, 24);
    expect_reader_error(&c, c.len, "general.alignment");
    set_u32(&c, (size_t)(hit - c.b) + 17, MI_GGUF_I32);
    expect_reader_error(&c, c.len, "general.alignment");
  }
  /* a bool that is neither 0 nor 1 */
  {
    c.len = 0;
    put(&c, w.b, w.len);
    unsigned char *hit = c.b + find(&c, "general.some_flag");
    c.b[(hit - c.b) + 17 + 4] = 7;
    expect_reader_error(&c, c.len, "bool value 7");
  }
  /* an unknown ggml type is kept (the reader accepts it; its user refuses it) */
  {
    c.len = 0;
    put(&c, w.b, w.len);
    set_u32(&c, L.t_type[13], 77);
    char err[512];
    mi_gguf *g = mi_gguf_open_mem(c.b, c.len, "mem.gguf", err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    const mi_gguf_tensor *t = mi_gguf_tensor_find(g, "rope_freqs.unused");
    ck_assert(t && !t->known && t->type == 77 && t->data == NULL);
    mi_gguf_close(g);
  }
#undef MUT
  free(c.b);
  free(w.b);
}
END_TEST

/* ---- tests: the model through mi-run -------------------------------------- */

START_TEST(model_from_c_gguf_runs_and_maps) {
  layout L;
  char p[1200], err[512], ckb[1200];
  snprintf(p, sizeof p, "%s/model.gguf", g_tmp);
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  mi_gguf_model *m;
  { /* a tensor the contract does not map is refused by name, never skipped */
    gw x = make_model_x(&L, 1);
    write_file(p, &x, x.len);
    ck_assert_msg(mi_gguf_model_open(p, ckb, MI_WEIGHTS_MMAP, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(mi_gguf_model_weights(m, err, sizeof err));
    ck_assert_msg(strstr(err, "tensor 'rope_freqs.unused' is not read by the model contract"), "%s", err);
    mi_gguf_model_close(m);
    free(x.b);
  }
  gw w = make_model_x(&L, 0);
  write_file(p, &w, w.len);
  ck_assert_msg(mi_gguf_model_open(p, ckb, MI_WEIGHTS_MMAP, &m, err, sizeof err) == 0, "%s", err);
  /* the config, as the contract maps it */
  json_t *c = m->config;
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
                   "Qwen3ForCausalLM");
  ck_assert_int_eq(json_integer_value(json_object_get(c, "hidden_size")), D);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "head_dim")), HD);
  ck_assert_int_eq(json_integer_value(json_object_get(c, "vocab_size")), NV);
  ck_assert(json_real_value(json_object_get(c, "rms_norm_eps")) == 1e-6);
  ck_assert(json_is_true(json_object_get(c, "tie_word_embeddings")));
  ck_assert_int_eq(m->eos, 259);
  ck_assert_int_eq(m->pad, 257);
  ck_assert_int_eq(m->bos, -1);
  ck_assert_ptr_nonnull(strstr(m->chat_template, "<|im_start|>"));
  /* the tokenizer */
  mi_tokenizer *t = m->tok;
  ck_assert_ptr_nonnull(t);
  ck_assert_uint_eq(mi_tokenizer_vocab_size(t), 261); /* the 2 unused rows are left out */
  int32_t *ids;
  size_t n;
  ck_assert_int_eq(mi_tokenizer_encode(t, "hi<|im_end|><think>", 19, 1, &ids, &n), 0);
  ck_assert_uint_eq(n, 3);
  ck_assert_int_eq(ids[0], 256);
  ck_assert_int_eq(ids[1], 259);
  ck_assert_int_eq(ids[2], 260);
  free(ids);
  ck_assert(mi_tokenizer_is_special(t, 259) && !mi_tokenizer_is_special(t, 260));
  /* the weights, by Hugging Face name, shapes reversed */
  mi_weights *ws = mi_gguf_model_weights(m, err, sizeof err);
  ck_assert_msg(ws != NULL, "%s", err);
  ck_assert_ptr_null(m->g);
  mi_gguf_model_close(m);
  mi_weight_info wi;
  ck_assert_int_eq(mi_weights_find(ws, "model.layers.0.mlp.down_proj.weight", &wi), 0);
  ck_assert(wi.ndim == 2 && wi.shape[0] == D && wi.shape[1] == F && wi.dtype == 0);
  ck_assert_int_eq(mi_weights_find(ws, "model.embed_tokens.weight", &wi), 0);
  ck_assert(wi.shape[0] == NV && wi.shape[1] == D && wi.nbytes == (size_t)NV * D * 4);
  ck_assert_int_eq(mi_weights_find(ws, "lm_head.weight", NULL), -1);
  ck_assert_int_eq(mi_weights_find(ws, "rope_freqs.unused", NULL), -1);
  ck_assert_uint_eq(mi_weights_count(ws), 13);
  mi_weights_close(ws);

  /* mi-run generates from it, greedy, twice the same */
  setenv("MI_CKB_DIR", ckb, 1);
  const char *args[] = {"-m", p,        "-p", "hi hi<|im_start|>", "-n", "6", "--temp",
                        "0",  "--json", NULL};
  run_result r1 = run_mi(args), r2 = run_mi(args);
  ck_assert_msg(r1.status == 0, "exit %d: %s", r1.status, r1.err);
  ck_assert_ptr_nonnull(strstr(r1.out, "\"prompt_ids\":[256,32,256,258]"));
  ck_assert_str_eq(r1.out, r2.out);
  run_free(&r1);
  run_free(&r2);
  /* --chat on a file without tokenizer.chat_template (the key renamed in
   * place): one line naming the file and the key, not a tokenizer_config.json
   * under it */
  size_t at = find(&w, "tokenizer.chat_template");
  ck_assert(at > 0);
  w.b[at + strlen("tokenizer.chat_template") - 1] = 'X';
  char p2[1300];
  snprintf(p2, sizeof p2, "%s/notemplate.gguf", g_tmp);
  write_file(p2, &w, w.len);
  const char *chat[] = {"-m", p2, "--chat", "-p", "hi", "-n", "2", "--temp", "0", NULL};
  run_result r3 = run_mi(chat);
  ck_assert_msg(r3.status == 1, "exit %d: %s", r3.status, r3.err);
  ck_assert_msg(strstr(r3.err, p2) && strstr(r3.err, "has no tokenizer.chat_template") && !strstr(r3.err, "tokenizer_config.json") &&
                    strchr(r3.err, '\n') == r3.err + strlen(r3.err) - 1,
                "%s", r3.err);
  run_free(&r3);
  free(w.b);
}
END_TEST

/* gguf.config's other forms: a field with a path lands inside its object
 * (rope_scaling.factor), a whole float read for an integer field (llama.cpp
 * writes rope.freq_base_swa as f32), {"expr"} computed from the fields the
 * file gave or their defaults (Gemma's query_pre_attn_scalar, which llama.cpp
 * derives from the layer count and no key states); an expression over a
 * field neither given nor defaulted, a fractional result for an integer
 * field, a path through a number: one line each, naming the field. */
static int config_with(const gw *w, json_t *base, const char *fields, const char *map, json_t **cfg, char *err,
                       size_t el) {
  json_t *c = json_deep_copy(base), *add = json_loads(fields, 0, NULL), *mp = json_loads(map, 0, NULL);
  ck_assert(c && add && mp);
  json_array_extend(json_object_get(c, "config"), add);
  json_object_update(json_object_get(json_object_get(c, "gguf"), "config"), mp);
  mi_gguf *g = mi_gguf_open_mem(w->b, w->len, "m.gguf", err, el);
  ck_assert_msg(g, "%s", err);
  mi_gguf_model *m;
  int rc = mi_gguf_model_from(g, c, "qwen3.json", &m, err, el);
  if (rc == 0) {
    *cfg = json_incref(m->config);
    mi_gguf_model_close(m);
  }
  json_decref(c), json_decref(add), json_decref(mp);
  return rc;
}

START_TEST(config_forms_path_whole_float_and_expr) {
  layout L;
  char p[1200], err[512];
  snprintf(p, sizeof p, "%s/ckb/models/qwen3.json", g_src);
  json_t *base = json_load_file(p, 0, NULL), *cfg = NULL;
  ck_assert_ptr_nonnull(base);
  gw w = make_model_x(&L, 0);
  const char *fields =
      "[{\"name\": \"factor\", \"type\": \"number\", \"path\": \"rope_scaling.factor\", \"meaning\": \"m\"},"
      " {\"name\": \"theta_whole\", \"type\": \"integer\", \"meaning\": \"m\"},"
      " {\"name\": \"qpas\", \"type\": \"integer\", \"meaning\": \"m\"},"
      " {\"name\": \"big\", \"type\": \"integer\", \"meaning\": \"m\"},"
      " {\"name\": \"dflt\", \"type\": \"integer\", \"default\": 5, \"meaning\": \"m\"},"
      " {\"name\": \"nodflt\", \"type\": \"integer\", \"meaning\": \"m\"}]";
  ck_assert_msg(config_with(&w, base, fields,
                            "{\"factor\": \"{arch}.rope.freq_base\", \"theta_whole\": \"{arch}.rope.freq_base\","
                            " \"qpas\": {\"expr\": \"head_dim + max(0, 1 - abs(num_hidden_layers - 1)) * (floor(hidden_size / "
                            "num_attention_heads) - head_dim) + dflt\"},"
                            " \"big\": {\"expr\": \"head_dim + max(0, 1 - abs(num_hidden_layers - 46)) * 1000\"}}",
                            &cfg, err, sizeof err) == 0,
                "%s", err);
  ck_assert(json_real_value(json_object_get(json_object_get(cfg, "rope_scaling"), "factor")) == 1e6);
  ck_assert_ptr_null(json_object_get(cfg, "factor"));
  ck_assert(json_is_integer(json_object_get(cfg, "theta_whole")));
  ck_assert_int_eq(json_integer_value(json_object_get(cfg, "theta_whole")), 1000000);
  /* one layer: the expression's other branch (hidden / heads), plus the default 5 */
  ck_assert_int_eq(json_integer_value(json_object_get(cfg, "qpas")), D / HQ + 5);
  ck_assert_int_eq(json_integer_value(json_object_get(cfg, "big")), HD);
  json_decref(cfg);
  /* refused, each naming the field */
  ck_assert_int_ne(config_with(&w, base, fields, "{\"qpas\": {\"expr\": \"nodflt * 2\"}}", &cfg, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "m.gguf: qpas is computed from nodflt, which the file does not give"), "%s", err);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"qpas\": {\"expr\": \"head_dim / 3\"}}", &cfg, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "qpas is computed as") && strstr(err, "not a whole number"), "%s", err);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"qpas\": {\"expr\": \"head_dim +\"}}", &cfg, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "gguf.config.qpas"), "%s", err);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"theta_whole\": \"{arch}.attention.layer_norm_rms_epsilon\"}", &cfg,
                               err, sizeof err),
                   0);
  ck_assert_msg(strstr(err, "theta_whole") && strstr(err, "f32"), "%s", err);
  ck_assert_int_ne(config_with(&w, base,
                               "[{\"name\": \"deep\", \"type\": \"number\", \"path\": \"rope_scaling.factor.x\", "
                               "\"meaning\": \"m\"}, {\"name\": \"factor\", \"type\": \"number\", \"path\": "
                               "\"rope_scaling.factor\", \"meaning\": \"m\"}]",
                               "{\"factor\": \"{arch}.rope.freq_base\", \"deep\": \"{arch}.rope.freq_base\"}", &cfg, err,
                               sizeof err),
                   0);
  ck_assert_msg(strstr(err, "path for deep crosses a value that is not an object"), "%s", err);
  free(w.b);
  json_decref(base);
}
END_TEST

/* gguf.config's forms for a hybrid's keys: {"array", "values"} (llama.cpp's
 * attention.recurrent_layers, 0/1 per layer, as layer_types' names), an
 * expression over GGUF keys its "keys" binds (the value head width from
 * ssm.inner_size / time_step_rank), {"value"} (what the architecture always
 * computes with). An element no value names, a bound key that is missing
 * (a required field) or is a string: one line naming the field and key. */
START_TEST(config_forms_array_keys_and_value) {
  layout L;
  char p[1200], err[512];
  snprintf(p, sizeof p, "%s/ckb/models/qwen3.json", g_src);
  json_t *base = json_load_file(p, 0, NULL), *cfg = NULL;
  ck_assert_ptr_nonnull(base);
  gw w = make_model_x(&L, 0);
  const char *fields = "[{\"name\": \"kinds\", \"meaning\": \"m\"}, {\"name\": \"raw\", \"meaning\": \"m\"},"
                       " {\"name\": \"twice\", \"type\": \"integer\", \"meaning\": \"m\"},"
                       " {\"name\": \"opt\", \"type\": \"integer\", \"default\": 9, \"meaning\": \"m\"},"
                       " {\"name\": \"need\", \"type\": \"integer\", \"required\": true, \"meaning\": \"m\"},"
                       " {\"name\": \"gate\", \"type\": \"boolean\", \"meaning\": \"m\"}]";
  ck_assert_msg(config_with(&w, base, fields,
                            "{\"kinds\": {\"array\": \"general.some_i64s\", \"values\": {\"7\": \"a\", \"-3\": \"b\"}},"
                            " \"raw\": {\"array\": \"general.some_i64s\"},"
                            " \"twice\": {\"expr\": \"2 * n + head_dim\", \"keys\": {\"n\": \"{arch}.feed_forward_length\"}},"
                            " \"opt\": {\"expr\": \"n\", \"keys\": {\"n\": \"{arch}.no_such_key\"}},"
                            " \"gate\": {\"value\": true}}",
                            &cfg, err, sizeof err) == 0,
                "%s", err);
  char *k = json_dumps(json_object_get(cfg, "kinds"), JSON_COMPACT), *r = json_dumps(json_object_get(cfg, "raw"), JSON_COMPACT);
  ck_assert_str_eq(k, "[\"a\",\"b\"]");
  ck_assert_str_eq(r, "[7,-3]");
  free(k), free(r);
  ck_assert_int_eq(json_integer_value(json_object_get(cfg, "twice")), 2 * F + HD);
  ck_assert_ptr_null(json_object_get(cfg, "opt")); /* its key absent: the contract's default */
  ck_assert(json_is_true(json_object_get(cfg, "gate")));
  json_decref(cfg);
  /* the keys an expression or an array reads count as read */
  ck_assert_int_eq(config_with(&w, base, fields, "{\"twice\": {\"expr\": \"n\", \"keys\": {\"n\": \"{arch}.attention.value_length\"}}}",
                               &cfg, err, sizeof err),
                   0);
  json_decref(cfg);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"kinds\": {\"array\": \"general.some_i64s\", \"values\": {\"7\": \"a\"}}}",
                               &cfg, err, sizeof err),
                   0);
  ck_assert_msg(strstr(err, "m.gguf: GGUF key 'general.some_i64s' (for kinds): element 1 is -3, which the contract gives no meaning"),
                "%s", err);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"need\": {\"expr\": \"n\", \"keys\": {\"n\": \"{arch}.no_such_key\"}}}", &cfg,
                               err, sizeof err),
                   0);
  ck_assert_msg(strstr(err, "need is computed from n (GGUF key 'qwen3.no_such_key')"), "%s", err);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"twice\": {\"expr\": \"n\", \"keys\": {\"n\": \"tokenizer.ggml.pre\"}}}", &cfg,
                               err, sizeof err),
                   0);
  ck_assert_msg(strstr(err, "twice is computed from n (GGUF key 'tokenizer.ggml.pre')"), "%s", err);
  ck_assert_int_ne(config_with(&w, base, fields, "{\"kinds\": {\"array\": \"{arch}.block_count\"}}", &cfg, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "GGUF key 'qwen3.block_count' (for kinds) is not an array"), "%s", err);
  free(w.b);
  json_decref(base);
}
END_TEST

/* The served weights of the synthetic model under the transforms map
 * (a JSON object merged into the qwen3 contract's gguf.transforms), or NULL
 * with err. */
static mi_weights *weights_with(const gw *w, json_t *base, const char *map, char *err, size_t el) {
  json_t *c = json_deep_copy(base), *mp = json_loads(map, 0, NULL);
  ck_assert(c && mp);
  json_t *gg = json_object_get(c, "gguf");
  if (!json_object_get(gg, "transforms")) json_object_set_new(gg, "transforms", json_object());
  json_object_update(json_object_get(gg, "transforms"), mp);
  json_decref(mp);
  mi_gguf *g = mi_gguf_open_mem(w->b, w->len, "m.gguf", err, el);
  ck_assert_msg(g, "%s", err);
  mi_gguf_model *m;
  mi_weights *ws = NULL;
  if (mi_gguf_model_from(g, c, "qwen3.json", &m, err, el) == 0) {
    ws = mi_gguf_model_weights(m, err, el);
    mi_gguf_model_close(m);
  }
  json_decref(c);
  return ws;
}

static const float *stored(const gw *w, const layout *L, const char *name) {
  for (size_t i = 0; i < L->n_t; i++)
    if (!strcmp(L->t_name[i], name)) return (const float *)(w->b + L->data_start + L->t_offset[i]);
  ck_abort_msg("no tensor %s", name);
  return NULL;
}

/* gguf.transforms' steps, held to their definitions on a file whose values
 * are known: rows from..from+G*R*W stored as R tiles of G blocks of W served
 * grouped (llama.cpp's tiled value heads), the same on columns, {"value"}
 * after {"add"} in sequence, {"unsqueeze"}; a value the expression makes
 * non-finite, a range past the tensor, an unknown step and a value
 * expression reading another name: one line naming the tensor. */
START_TEST(transform_steps_regroup_value_unsqueeze) {
  layout L;
  char p[1200], err[512];
  snprintf(p, sizeof p, "%s/ckb/models/qwen3.json", g_src);
  json_t *base = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(base);
  gw w = make_model_x(&L, 0);
  enum { G = 2, R = 3, W = 5, FROM = 4 }; /* q has HQ*HD = 64 rows, o_proj 64 columns */
  mi_weights *ws = weights_with(&w, base,
                                "{\"blk.{i}.attn_q.weight\": {\"regroup\": {\"axis\": \"rows\", \"from\": \"head_dim / 4\","
                                " \"groups\": 2, \"per_group\": \"num_attention_heads - 1\", \"width\": 5}},"
                                " \"blk.{i}.attn_output.weight\": {\"regroup\": {\"axis\": \"cols\", \"groups\": 2, \"per_group\": 3,"
                                " \"width\": 5}},"
                                " \"blk.{i}.ffn_norm.weight\": [{\"add\": 2}, {\"value\": \"log(x)\"}],"
                                " \"blk.{i}.attn_q_norm.weight\": [{\"unsqueeze\": 0}, {\"unsqueeze\": 2}]}",
                                err, sizeof err);
  ck_assert_msg(ws, "%s", err);
  mi_weight_info q, o, n, qn;
  ck_assert_int_eq(mi_weights_find(ws, "model.layers.0.self_attn.q_proj.weight", &q), 0);
  ck_assert_int_eq(mi_weights_find(ws, "model.layers.0.self_attn.o_proj.weight", &o), 0);
  ck_assert_int_eq(mi_weights_find(ws, "model.layers.0.post_attention_layernorm.weight", &n), 0);
  ck_assert_int_eq(mi_weights_find(ws, "model.layers.0.self_attn.q_norm.weight", &qn), 0);
  const float *sq = stored(&w, &L, "blk.0.attn_q.weight"), *so = stored(&w, &L, "blk.0.attn_output.weight");
  const float *fq = q.data, *fo = o.data, *fn = n.data;
  /* served row t holds the stored row t outside the range, and inside it
   * the row of the same (group, tile, offset) in tiled order */
  for (int t = 0; t < HQ * HD; t++) {
    int from = t;
    if (t >= FROM && t < FROM + G * R * W) {
      const int u = t - FROM, g = u / (R * W), r = u / W % R, x = u % W;
      from = FROM + (r * G + g) * W + x;
    }
    ck_assert_msg(!memcmp(fq + (size_t)t * D, sq + (size_t)from * D, D * sizeof(float)), "q row %d", t);
  }
  for (int row = 0; row < D; row++)
    for (int c = 0; c < HQ * HD; c++) {
      int from = c;
      if (c < G * R * W) from = (c / W % R * G + c / (R * W)) * W + c % W;
      ck_assert(fo[(size_t)row * HQ * HD + c] == so[(size_t)row * HQ * HD + from]);
    }
  for (int k = 0; k < D; k++) ck_assert(fn[k] == (float)log(3.0)); /* the ones, + 2, log */
  ck_assert(n.dtype == MI_DTYPE_F32 && n.ndim == 1);
  ck_assert(qn.ndim == 3 && qn.shape[0] == 1 && qn.shape[1] == HD && qn.shape[2] == 1);
  mi_weights_close(ws);
  /* refused, each naming the tensor */
  struct {
    const char *map, *want;
  } bad[] = {
      {"{\"blk.{i}.ffn_norm.weight\": {\"value\": \"log(-x)\"}}",
       "m.gguf: tensor 'blk.0.ffn_norm.weight' (model.layers.0.post_attention_layernorm.weight): value 0 is 1, which its "
       "transform (log(-x)) makes"},
      {"{\"blk.{i}.attn_q.weight\": {\"regroup\": {\"axis\": \"rows\", \"from\": 10, \"groups\": 2, \"per_group\": 3, \"width\": 10}}}",
       "tensor 'blk.0.attn_q.weight' (model.layers.0.self_attn.q_proj.weight): rows 10..70 regrouped as 3 x 2 blocks of 10: the "
       "tensor has 64"},
      {"{\"blk.{i}.attn_q.weight\": {\"regroup\": {\"axis\": \"rows\", \"groups\": 0, \"per_group\": 3, \"width\": 1}}}",
       "regrouped as 3 x 0 blocks"},
      {"{\"blk.{i}.attn_q.weight\": {\"regroup\": {\"axis\": \"diagonal\", \"groups\": 1, \"per_group\": 1, \"width\": 1}}}",
       "regroup's axis is not"},
      {"{\"blk.{i}.attn_q.weight\": {\"regroup\": {\"axis\": \"rows\", \"groups\": \"head_dim / 3\", \"per_group\": 1, \"width\": 1}}}",
       "tensor 'blk.0.attn_q.weight': its transform's groups is 5.33333, not a whole number"},
      {"{\"blk.{i}.attn_q.weight\": {\"regroup\": {\"axis\": \"rows\", \"groups\": \"nope\", \"per_group\": 1, \"width\": 1}}}",
       "its transform's groups reads nope"},
      {"{\"blk.{i}.attn_q.weight\": [{\"transpose\": true}]}", "gguf.transforms for 'blk.0.attn_q.weight': step 0 is not one of"},
      {"{\"blk.{i}.attn_q.weight\": [{\"unsqueeze\": 9}]}", "cannot insert a dimension at 9 of 2"},
      {"{\"blk.{i}.ffn_norm.weight\": {\"value\": \"x * y\"}}", "reads 'y' (a value's expression reads x alone)"},
      {"{\"blk.{i}.attn_q.weight\": {\"add\": 1}}", "\"add\" takes an F32, F16 or BF16 vector"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    mi_weights *b = weights_with(&w, base, bad[i].map, err, sizeof err);
    ck_assert_msg(!b && strstr(err, bad[i].want) && !strchr(err, '\n'), "case %zu: %s", i, err);
  }
  free(w.b);
  json_decref(base);
}
END_TEST

/* A file with llama.cpp's appended multi-token-prediction layer (the
 * block count counts it, nextn_predict_layers says how many): a section
 * whose num_hidden_layers is block_count - nextn_predict_layers (0 where
 * the file has no such key) and whose gguf.unused names the layers past it
 * serves the model's own layers only; without gguf.unused the MTP tensors
 * are refused by name, as any tensor no contract reads. */
START_TEST(unused_layers_past_the_model) {
  layout L;
  char p[1200], err[512];
  snprintf(p, sizeof p, "%s/ckb/models/qwen3.json", g_src);
  json_t *base = json_load_file(p, 0, NULL);
  ck_assert_ptr_nonnull(base);
  json_t *gg = json_object_get(base, "gguf");
  json_object_set_new(json_object_get(gg, "config"), "num_hidden_layers",
                      json_pack("{s:s, s:{s:s, s:{s:s, s:i}}}", "expr", "n - m", "keys", "n", "{arch}.block_count", "m", "key",
                                "{arch}.nextn_predict_layers", "default", 0));
  for (int mtp = 0; mtp < 2; mtp++) {
    g_mtp = mtp;
    gw w = make_model_x(&L, 0);
    g_mtp = 0;
    for (int with_unused = 0; with_unused < 2; with_unused++) {
      if (with_unused)
        json_object_set_new(gg, "unused", json_pack("{s:s, s:s, s:s}", "layers", "blk.{i}.", "from", "num_hidden_layers",
                                                    "why", "multi-token prediction"));
      else json_object_del(gg, "unused");
      mi_gguf *g = mi_gguf_open_mem(w.b, w.len, "m.gguf", err, sizeof err);
      ck_assert_msg(g, "%s", err);
      mi_gguf_model *m;
      ck_assert_msg(mi_gguf_model_from(g, base, "qwen3.json", &m, err, sizeof err) == 0, "%s", err);
      ck_assert_int_eq(json_integer_value(json_object_get(m->config, "num_hidden_layers")), 1);
      mi_weights *ws = mi_gguf_model_weights(m, err, sizeof err);
      mi_gguf_model_close(m);
      if (mtp && !with_unused) {
        ck_assert_msg(!ws && strstr(err, "tensor 'blk.1.nextn.eh_proj.weight' is not read by the model contract"), "%s", err);
        continue;
      }
      ck_assert_msg(ws, "mtp %d unused %d: %s", mtp, with_unused, err);
      ck_assert_uint_eq(mi_weights_count(ws), 13); /* the model's own, as without the MTP layer */
      ck_assert_int_eq(mi_weights_find(ws, "model.layers.1.input_layernorm.weight", NULL), -1);
      mi_weights_close(ws);
    }
    free(w.b);
  }
  json_decref(base);
}
END_TEST

START_TEST(mi_run_refuses_hostile_files) {
  layout L;
  gw w = make_model(&L);
  char ckb[1200], p[1300];
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  setenv("MI_CKB_DIR", ckb, 1);
  gw c = {0};
  int k = 0;
#define BADLEN(len_, want)                                                                         \
  do {                                                                                             \
    c.len = 0;                                                                                     \
    put(&c, w.b, w.len);                                                                           \
    snprintf(p, sizeof p, "%s/bad%d.gguf", g_tmp, k++);                                            \
    write_file(p, &c, (len_));                                                                     \
    expect_run_error(p, want);                                                                     \
  } while (0)
#define BAD(stmt, want)                                                                            \
  do {                                                                                             \
    c.len = 0;                                                                                     \
    put(&c, w.b, w.len);                                                                           \
    stmt;                                                                                          \
    snprintf(p, sizeof p, "%s/bad%d.gguf", g_tmp, k++);                                            \
    write_file(p, &c, c.len);                                                                      \
    expect_run_error(p, want);                                                                     \
  } while (0)
  BADLEN(3, "not a model folder");
  BADLEN(23, "too small");
  BADLEN(100, "metadata keys"); /* cut early: the counts no longer fit what is left */
  BADLEN(L.data_start - 7, "truncated");
  BADLEN(L.data_start + 1000, "past the end of the data");
  BADLEN(L.data_end - 1, "past the end of the data");
  BAD(set_u64(&c, L.n_tensors, 1ull << 40), "tensors (limit");
  BAD(set_u64(&c, L.n_kv, 1ull << 33), "metadata keys");
  BAD(set_u64(&c, L.first_key_len, 1ull << 40), "string of");
  BAD(set_u32(&c, L.first_vtype, 99), "unknown value type 99");
  BAD(set_u64(&c, L.tokens_count, 1ull << 40), "tokenizer.ggml.tokens");
  BAD(set_u64(&c, L.t_off[3], 1ull << 40), "blk.0.attn_q.weight");
  BAD(set_u64(&c, L.t_off[4], L.t_offset[3]), "overlap");
  /* a needed tensor of a quantized type not read yet (IQ4_NL blocks of 32 fit ne[0] = 64) */
  BAD(set_u32(&c, L.t_type[3], 20),
      "tensor 'blk.0.attn_q.weight' (model.layers.0.self_attn.q_proj.weight) has ggml type IQ4_NL");
  /* a type that is read, but rows (64) that are not whole blocks of it (256) */
  BAD(set_u32(&c, L.t_type[3], 12),
      "tensor 'blk.0.attn_q.weight': ne[0] = 64 is not a multiple of the Q4_K block of 256");
  BAD(set_u32(&c, L.t_type[3], 14),
      "tensor 'blk.0.attn_q.weight': ne[0] = 64 is not a multiple of the Q6_K block of 256");
  BAD(set_u32(&c, L.t_type[10], 77),
      "tensor 'blk.0.ffn_gate.weight' (model.layers.0.mlp.gate_proj.weight) has ggml type 77");
  /* an unneeded tensor of an unknown type is fine: covered by the reader test */
  /* an architecture no contract lists */
  BAD(memcpy(c.b + L.arch_value, "qwen9", 5),
      "GGUF architecture 'qwen9' is not described by any model contract");
  /* a key of the architecture the contract neither maps nor names inert (a window, a rope scaling): the file
   * describes another model, refused by name rather than run without it */
  BAD(memcpy(c.b + find(&c, "value_length"), "sliding_wndw", 12),
      "GGUF key 'qwen3.attention.sliding_wndw' is not read by");
  /* a tokenizer the contract does not read */
  BAD(memcpy(c.b + find(&c, "gpt2"), "gpt3", 4), "tokenizer.ggml.model 'gpt3'");
  BAD(memcpy(c.b + find(&c, "qwen2"), "qwen7", 5), "tokenizer.ggml.pre 'qwen7'");
  /* a special id outside the vocabulary */
  BAD(set_u32(&c, find(&c, "tokenizer.ggml.eos_token_id") + 27 + 4, 5000),
      "tokenizer.ggml.eos_token_id");
  /* a float key JSON cannot hold (the fuzzer's find: it was refused with an empty message) */
  BAD(set_u32(&c, find(&c, "qwen3.attention.layer_norm_rms_epsilon") + 38 + 4, 0x7fc00000u),
      "GGUF key 'qwen3.attention.layer_norm_rms_epsilon' (for rms_norm_eps) is nan, not a finite number");
  BAD(set_u32(&c, find(&c, "qwen3.rope.freq_base") + 20 + 4, 0x7f800000u),
      "GGUF key 'qwen3.rope.freq_base' (for rope_theta) is inf, not a finite number");
  /* a required config key missing (renamed) */
  BAD(memcpy(c.b + find(&c, "qwen3.embedding_length"), "qwen3.embedding_lengtX", 22),
      "GGUF key 'qwen3.embedding_length' (for hidden_size) is missing");
#undef BAD
#undef BADLEN
  free(c.b);
  free(w.b);
}
END_TEST

/* ---- the peer test: hf2gguf.mjs conversions of a mi-mkmodel checkpoint ---- */

/* mi-run --json on n prompts (--prompts: one process, each prompt a fresh
 * sequence, as stage 4's deployed run uses it; one load of the model and
 * its tokenizer instead of n, most of a run under the sanitizers): for each
 * prompt its prompt ids line and its generated ids, as one string in
 * out[i] (malloc'd). */
static void run_ids(const char *model, const char *const *prompts, size_t n, int chat, char **out) {
  char pf[1300];
  snprintf(pf, sizeof pf, "%s/prompts.jsonl", g_tmp);
  FILE *f = fopen(pf, "w");
  ck_assert_ptr_nonnull(f);
  for (size_t i = 0; i < n; i++) {
    json_t *js = json_string(prompts[i]);
    char *line = json_dumps(js, JSON_ENCODE_ANY);
    json_decref(js);
    ck_assert_ptr_nonnull(line);
    fprintf(f, "%s\n", line);
    free(line);
  }
  fclose(f);
  const char *a1[] = {"-m", model, "--prompts", pf, "-n", "16", "--temp", "0", "--json", NULL};
  const char *a2[] = {"-m", model, "--chat", "--prompts", pf, "-n", "16", "--temp", "0", "--json", NULL};
  run_result r = run_mi(chat ? a2 : a1);
  ck_assert_msg(r.status == 0, "%s: exit %d: %s", model, r.status, r.err);
  size_t used[16] = {0};
  ck_assert_uint_le(n, 16);
  for (size_t i = 0; i < n; i++) out[i] = calloc(1, 65536);
  long at = -1;
  for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
    json_t *j = json_loads(line, 0, NULL);
    json_t *pi = json_object_get(j, "prompt_ids"), *id = json_object_get(j, "token_id");
    if (json_is_integer(json_object_get(j, "prompt_index"))) at = (long)json_integer_value(json_object_get(j, "prompt_index"));
    ck_assert_msg(at >= 0 && at < (long)n, "%s: a line outside the %zu prompts: %s", model, n, line);
    if (pi) {
      char *s = json_dumps(pi, JSON_COMPACT);
      used[at] += (size_t)snprintf(out[at] + used[at], 65536 - used[at], "%s |", s);
      free(s);
    } else if (id) {
      used[at] += (size_t)snprintf(out[at] + used[at], 65536 - used[at], " %lld", (long long)json_integer_value(id));
    }
    json_decref(j);
  }
  for (size_t i = 0; i < n; i++) ck_assert_msg(strchr(out[i], '|'), "%s: no prompt ids for prompt %zu", model, i);
  run_free(&r);
}

/* Every id of the two tokenizers alike: its string (the one both map back
 * to this id, unless an added token of the same string wins it in both), its
 * bytes and whether it is special (but for what a GGUF does not carry: a
 * <|...|> token is control there, special or not in tokenizer.json; see
 * docs/gguf.md). */
static void same_vocab(const mi_tokenizer *hf, const mi_tokenizer *gt) {
  for (int32_t id = 0; id < (int32_t)mi_tokenizer_vocab_size(hf); id++) {
    const char *a = mi_tokenizer_token_str(hf, id), *b = mi_tokenizer_token_str(gt, id);
    ck_assert_msg((a == NULL) == (b == NULL) && (!a || !strcmp(a, b)), "id %d: strings differ", id);
    size_t la, lb;
    const unsigned char *ba = mi_tokenizer_token_bytes(hf, id, &la),
                        *bb = mi_tokenizer_token_bytes(gt, id, &lb);
    ck_assert_msg(la == lb && (!la || !memcmp(ba, bb, la)), "id %d: bytes differ", id);
    const size_t n = a ? strlen(a) : 0;
    const int ctl = n > 4 && !strncmp(a, "<|", 2) && !strcmp(a + n - 2, "|>");
    if (!ctl || mi_tokenizer_is_special(hf, id))
      ck_assert_int_eq(mi_tokenizer_is_special(gt, id), mi_tokenizer_is_special(hf, id));
    if (a) ck_assert_int_eq(mi_tokenizer_token_id(gt, a), mi_tokenizer_token_id(hf, a));
  }
}

/* The tokenizer suite's corpus (tests/tokenizer/corpus.json) encodes to the
 * same ids through both, special tokens parsed or not. */
static void same_corpus_ids(const mi_tokenizer *hf, const mi_tokenizer *gt) {
  char p[1200];
  snprintf(p, sizeof p, "%s/tests/tokenizer/corpus.json", g_src);
  json_error_t je;
  json_t *c = json_load_file(p, 0, &je);
  ck_assert_msg(c != NULL, "%s: %s", p, je.text);
  json_t *cases = json_object_get(c, "cases");
  ck_assert_uint_gt(json_array_size(cases), 50);
  for (size_t i = 0; i < json_array_size(cases); i++) {
    json_t *t = json_object_get(json_array_get(cases, i), "text");
    const char *text = json_string_value(t);
    size_t len = json_string_length(t);
    for (int ps = strstr(text, "<|") ? 1 : 0; ps < 2; ps++) { /* as above */
      int32_t *a = NULL, *b = NULL;
      size_t na = 0, nb = 0;
      int ra = mi_tokenizer_encode(hf, text, len, ps, &a, &na),
          rb = mi_tokenizer_encode(gt, text, len, ps, &b, &nb);
      ck_assert_msg(ra == rb && na == nb && (!na || !memcmp(a, b, na * sizeof *a)),
                    "corpus case %zu (special %d): ids differ", i, ps);
      free(a);
      free(b);
    }
  }
  json_decref(c);
}

START_TEST(peer_hf2gguf_matches_the_folder) {
  char dir[1200], f32[1300], bf16[1300], ckb[1200];
  snprintf(dir, sizeof dir, "%s/tiny", g_tmp);
  snprintf(f32, sizeof f32, "%s/tiny-f32.gguf", g_tmp);
  snprintf(bf16, sizeof bf16, "%s/tiny-bf16.gguf", g_tmp);
  snprintf(ckb, sizeof ckb, "%s/ckb", g_src);
  setenv("MI_CKB_DIR", ckb, 1);
  ck_assert_int_eq(
      mi_test_sh("'%s/bin/mi-mkmodel' --shape tiny --seed 1 --out '%s' >/dev/null", g_build, dir),
      0);
  ck_assert_int_eq(
      mi_test_sh("node '%s/tools/peer/hf2gguf.mjs' '%s' '%s' --type f32", g_src, dir, f32), 0);
  ck_assert_int_eq(
      mi_test_sh("node '%s/tools/peer/hf2gguf.mjs' '%s' '%s' --type bf16", g_src, dir, bf16), 0);
  const char *prompts[] = {"Hello, world! The quick brown fox",
                           "你好，世界 🙂 <|im_start|>user\nhi<|im_end|>",
                           "  spaces\t\ttabs\n\nnewlines 12345 ÀÉÎ"};
  enum { NP = sizeof prompts / sizeof *prompts };
  for (int chat = 0; chat < 2; chat++) {
    char *want[NP], *a[NP], *b[NP];
    run_ids(dir, prompts, NP, chat, want);
    run_ids(bf16, prompts, NP, chat, a);
    run_ids(f32, prompts, NP, chat, b);
    for (size_t i = 0; i < NP; i++) {
      ck_assert_msg(!strcmp(want[i], a[i]), "bf16 GGUF differs (chat %d, prompt %zu):\n%s\n%s", chat, i,
                    want[i], a[i]);
      ck_assert_msg(!strcmp(want[i], b[i]), "f32 GGUF differs (chat %d, prompt %zu):\n%s\n%s", chat, i,
                    want[i], b[i]);
      free(want[i]);
      free(a[i]);
      free(b[i]);
    }
  }
  /* the tokenizer itself: the same ids for texts with special tokens and
   * unicode, the same special ids and chat template */
  char tp[1300], cp[1300], err[512];
  snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
  snprintf(cp, sizeof cp, "%s/tokenizer_config.json", dir);
  mi_tokenizer *hf = mi_tokenizer_load(tp, err, sizeof err);
  ck_assert_msg(hf && mi_tokenizer_load_config(hf, cp, err, sizeof err) == 0, "%s", err);
  mi_gguf_model *m;
  ck_assert_msg(mi_gguf_model_open(bf16, ckb, MI_WEIGHTS_MMAP, &m, err, sizeof err) == 0, "%s",
                err);
  mi_tokenizer *gt = m->tok; /* built from the file's arrays, no tokenizer.json between */
  m->tok = NULL;
  ck_assert_msg(gt && mi_tokenizer_set_config(gt, m->eos, m->bos, m->pad, m->chat_template, bf16,
                                              err, sizeof err) == 0,
                "%s", err);
  ck_assert_uint_eq(mi_tokenizer_vocab_size(gt), mi_tokenizer_vocab_size(hf));
  ck_assert_int_eq(mi_tokenizer_eos_id(gt), mi_tokenizer_eos_id(hf));
  ck_assert_int_eq(mi_tokenizer_pad_id(gt), mi_tokenizer_pad_id(hf));
  ck_assert_str_eq(mi_tokenizer_chat_template(gt), mi_tokenizer_chat_template(hf));
  const char *texts[] = {"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n",
                         "<think>\nreasoning</think>\n\n<tool_call>{}</tool_call>",
                         "naïve café — 日本語のテキスト, 한국어, العربية, emoji 👩‍👩‍👧 "
                         "e\u0301",
                         "don't I'll WE'RE 1234567 3.14159 $$$ \r\n\r\n  x",
                         "<|endoftext|><|endoftext|>x<|im_end"};
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
    for (int ps = 0; ps < 2; ps++) {
      if (!ps && strstr(texts[i], "<|")) continue; /* see docs/gguf.md: <|fim_*|> */
      int32_t *a, *b;
      size_t na, nb;
      ck_assert_int_eq(mi_tokenizer_encode(hf, texts[i], strlen(texts[i]), ps, &a, &na), 0);
      ck_assert_int_eq(mi_tokenizer_encode(gt, texts[i], strlen(texts[i]), ps, &b, &nb), 0);
      ck_assert_msg(na == nb && !memcmp(a, b, na * sizeof *a), "text %zu (special %d): ids differ",
                    i, ps);
      char *da = mi_tokenizer_decode(hf, a, na, NULL, NULL),
           *db = mi_tokenizer_decode(gt, b, nb, NULL, NULL);
      ck_assert_str_eq(da, db); /* (NFC: not always the text itself) */
      free(da);
      free(db);
      free(a);
      free(b);
    }
  same_vocab(hf, gt);
  same_corpus_ids(hf, gt);
  mi_tokenizer_free(hf);
  mi_tokenizer_free(gt);
  mi_gguf_model_close(m);
}
END_TEST

int main(int argc, char **argv) {
  const char *b = getenv("MI_BUILD_DIR"), *s = getenv("MI_SOURCE_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_src, sizeof g_src, "%s", s ? s : ".");
  int peer = argc > 1 && !strcmp(argv[1], "peer");
  if (peer && system("node --version >/dev/null 2>&1") != 0) {
    printf("SKIP: node is not installed (scripts/setup.sh installs it): the hf2gguf.mjs "
           "comparison needs it\n");
    return 77;
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mi-gguf-test-XXXXXX");
  if (!mkdtemp(g_tmp)) return 1;
  /* bf16 weights with 4+ rows round activations on AVX512_BF16 hosts by
   * default (README): compare on the exact path, as tests/serve does */
  setenv("MI_CPU_MATMUL_ACT", "f32", 1);
  Suite *su = suite_create("gguf");
  TCase *tc = tcase_create("gguf");
  tcase_set_timeout(tc, 300);
  if (peer) {
    tcase_add_test(tc, peer_hf2gguf_matches_the_folder);
  } else {
    mi_check_add(tc, MI_CHECK_TESTS(reader_reads_what_was_written,
                                    reader_refuses_truncation_at_every_length,
                                    reader_refuses_hostile_headers, model_from_c_gguf_runs_and_maps,
                                    config_forms_path_whole_float_and_expr, config_forms_array_keys_and_value,
                                    transform_steps_regroup_value_unsqueeze, unused_layers_past_the_model,
                                    mi_run_refuses_hostile_files));
  }
  suite_add_tcase(su, tc);
  const int nf = mi_check_run(su) != EXIT_SUCCESS;
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd)) {
  }
  return nf ? 1 : 0;
}
