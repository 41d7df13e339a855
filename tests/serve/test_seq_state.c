/* seq_state_read / seq_state_write (model ABI 1.5, the prefix cache's
 * export and import of a sequence's state), on the qwen3 plugin (f32, bf16
 * and f16 KV) and the qwen35 hybrid (KV + the DeltaNet's fixed state):
 *   - a sequence restored from exported state, then fed the rest of the
 *     prompt, computes bit for bit what the sequence that ran the whole
 *     prompt computes, and so do 8 greedy decode steps after it;
 *   - the exported bytes are exactly n × state_bytes_token (and
 *     state_bytes_fixed): every byte written, none past them; reads of
 *     adjacent blocks concatenate to the read of their union, and such a
 *     gathered buffer restores in one write (the prefix cache's use);
 *   - refusals (a range past the length, a write not at the length or past
 *     the context, a hybrid write without its fixed state, a fixed state
 *     asked for short of the length) are -1 with one line, and leave the
 *     sequence as it was: its length, and the logits that follow. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "core/runtime/session.h"
#include "tests/util/check_main.h"
#include "tests/util/test_env.h"
#include "tests/util/test_logits.h"
#include "tests/util/test_registry.h"

static char g_build[1024];

/* K_LEN positions restored (4 blocks of 16), of a prompt of P_LEN. One
 * prefill of P_LEN equals K_LEN then P_LEN - K_LEN bit for bit only where
 * the platform computes each row the same whatever the chunk: on the CPU's
 * exact path (MI_CPU_MATMUL_ACT=f32, set by CMakeLists.txt) a chunk of 2-32
 * rows takes other bf16 matmul kernels than a longer one (with a tail of
 * 29 rows the logits move by 3e-7 of the spread), and the hybrid's chunked
 * delta rule goes in chunks of 64 tokens from each call's start. Hence
 * K_LEN = 64 and a tail of 36; then every CPU variant agrees bit for bit. */
#define K_LEN 64
#define P_LEN 100
#define BLOCK 16
#define N_DEC 8 /* greedy steps after the prompt */
#define N_CTX 128

/* mi-mkmodel into the build's model folder, under a name only this suite
 * uses (suites run in parallel; another one's generation is not waited for) */
static int make_model(const char *args, const char *name, char *dir, size_t n) {
  char full[128], cmd[4096];
  snprintf(full, sizeof full, "seq-state-%s", name);
  if (mi_test_checkpoint(g_build, args, full, dir, n, cmd, sizeof cmd) == 0) return 0;
  fprintf(stderr, "mi-mkmodel failed: %s\n", cmd);
  return -1;
}

typedef struct rt {
  mi_registry *reg;
  mi_session *e;
  const mi_model_iface *M;
  mi_model *m;
  int64_t V;
  size_t tok_bytes, fixed_bytes; /* the plugin's mi_model_info */
} rt;

static void rt_open(rt *r, const char *args, const char *name, const char *kv_type,
                    const char *plugin) {
  char dir[1200], err[2048];
  ck_assert_int_eq(make_model(args, name, dir, sizeof dir), 0);
  r->reg = mi_test_registry(g_build);
  mi_kv kv[] = {{"kv_type", kv_type}};
  mi_options mo = {kv, kv_type ? 1 : 0};
  mi_session_opts eo = {.model_dir = dir, .model_opts = &mo, .tp_size = 1};
  r->e = NULL;
  ck_assert_msg(mi_session_open(r->reg, &eo, &r->e, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(r->e->model_plugin->desc->name, plugin);
  r->M = r->e->M;
  r->m = r->e->model;
  r->V = r->e->info.vocab_size;
  r->tok_bytes = (size_t)r->e->info.state_bytes_token;
  r->fixed_bytes = (size_t)r->e->info.state_bytes_fixed;
  ck_assert_msg(mi_model_has(r->M, seq_state_read) && mi_model_has(r->M, seq_state_write),
                "the %s plugin has no seq_state_read/seq_state_write", plugin);
  /* a plugin built before ABI 1.5 (a shorter struct): no state export,
   * whatever lies past its end */
  mi_model_iface old = *r->M;
  old.struct_size = (uint32_t)offsetof(mi_model_iface, seq_state_read);
  ck_assert(!mi_model_has(&old, seq_state_read) && !mi_model_has(&old, seq_state_write));
  ck_assert_uint_gt(r->tok_bytes, 0);
}

static int32_t argmax(const float *l, int64_t V) {
  int64_t b = 0;
  for (int64_t i = 1; i < V; i++)
    if (l[i] > l[b]) b = i;
  return (int32_t)b;
}

#define CANARY 64

/* seq_state_read of [pos, pos+n) (+ the fixed state when `fixed`), into
 * buffers that say how much was written: the read runs twice, over 0x00
 * and over 0xFF; both results must agree on exactly n × state_bytes_token
 * (and state_bytes_fixed) bytes, and the bytes after them stay untouched. */
static void read_exact(rt *r, mi_seq *s, int64_t pos, int64_t n, int fixed, void **kv_out,
                       void **fixed_out) {
  const size_t kb = (size_t)n * r->tok_bytes, fb = r->fixed_bytes;
  unsigned char *k[2], *f[2];
  char err[512];
  for (int i = 0; i < 2; i++) {
    k[i] = malloc(kb + CANARY);
    f[i] = malloc(fb + CANARY);
    memset(k[i], i ? 0xFF : 0x00, kb + CANARY);
    memset(f[i], i ? 0xFF : 0x00, fb + CANARY);
    ck_assert_msg(
        r->M->seq_state_read(r->m, s, pos, n, k[i], fixed ? f[i] : NULL, err, sizeof err) == 0,
        "%s", err);
    for (size_t j = 0; j < CANARY; j++) {
      ck_assert_msg(k[i][kb + j] == (i ? 0xFF : 0x00),
                    "seq_state_read wrote past n x state_bytes_token (%zu bytes)", kb);
      ck_assert_msg(f[i][fb + j] == (i ? 0xFF : 0x00),
                    "seq_state_read wrote past state_bytes_fixed (%zu bytes)", fb);
    }
  }
  ck_assert_msg(memcmp(k[0], k[1], kb) == 0,
                "seq_state_read left part of its n x state_bytes_token = %zu bytes unwritten", kb);
  if (fixed)
    ck_assert_msg(memcmp(f[0], f[1], fb) == 0,
                  "seq_state_read left part of its state_bytes_fixed = %zu bytes unwritten", fb);
  free(k[1]);
  free(f[1]);
  *kv_out = k[0];
  if (fixed_out)
    *fixed_out = f[0];
  else
    free(f[0]);
}

static void write_ok(rt *r, mi_seq *s, int64_t pos, int64_t n, const void *src, const void *fsrc) {
  char err[512];
  ck_assert_msg(r->M->seq_state_write(r->m, s, pos, n, src, fsrc, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r->M->seq_len(r->m, s), pos + n);
}

/* A refused call: -1, one line naming the problem, the length unchanged. */
static void refused(rt *r, mi_seq *s, int64_t len, int rc, const char *err, const char *what) {
  ck_assert_msg(rc == -1, "%s: accepted (rc %d)", what, rc);
  ck_assert_msg(err[0] != '\0', "%s: refused without a message", what);
  ck_assert_msg(strchr(err, '\n') == NULL, "%s: message is not one line: %s", what, err);
  ck_assert_msg(r->M->seq_len(r->m, s) == len, "%s: the length moved to %lld", what,
                (long long)r->M->seq_len(r->m, s));
  fprintf(stderr, "  refused (%s): %s\n", what, err);
}

/* The refusals, on a sequence of length len: each leaves it of length len,
 * and the caller's next steps check its logits (the writes' sources are
 * zeros: copied anywhere, they would move them). */
static void check_refusals(rt *r, mi_seq *s, const char *tag) {
  const int64_t len = r->M->seq_len(r->m, s);
  ck_assert_int_ge(len, BLOCK);
  const size_t kb = (size_t)BLOCK * r->tok_bytes;
  unsigned char *buf = calloc(1, kb + 16), *fbuf = calloc(1, r->fixed_bytes + 16);
  char err[512], what[128];
  fprintf(stderr, "%s, refusals on a sequence of %lld:\n", tag, (long long)len);
  /* a range past the length */
  err[0] = '\0';
  snprintf(what, sizeof what, "%s: read [%lld, %lld)", tag, (long long)(len - BLOCK / 2),
           (long long)(len + BLOCK / 2));
  refused(r, s, len,
          r->M->seq_state_read(r->m, s, len - BLOCK / 2, BLOCK, buf, NULL, err, sizeof err), err,
          what);
  err[0] = '\0';
  refused(r, s, len, r->M->seq_state_read(r->m, s, -1, 1, buf, NULL, err, sizeof err), err,
          "read at -1");
  /* the fixed state short of the length */
  err[0] = '\0';
  snprintf(what, sizeof what, "%s: fixed state of [0, %d) at length %lld", tag, BLOCK,
           (long long)len);
  refused(r, s, len, r->M->seq_state_read(r->m, s, 0, BLOCK, buf, fbuf, err, sizeof err), err,
          what);
  /* writes not at the length: behind it (would overwrite) and past it (a gap) */
  const int64_t bad_pos[] = {len - BLOCK, len + 1};
  for (int i = 0; i < 2; i++) {
    err[0] = '\0';
    snprintf(what, sizeof what, "%s: write at %lld", tag, (long long)bad_pos[i]);
    refused(r, s, len,
            r->M->seq_state_write(r->m, s, bad_pos[i], BLOCK, buf, fbuf, err, sizeof err), err,
            what);
    ck_assert_int_eq(r->M->seq_len(r->m, s), len);
  }
  /* past the context */
  err[0] = '\0';
  snprintf(what, sizeof what, "%s: write of %lld past the context", tag,
           (long long)(N_CTX - len + 1));
  unsigned char *big = calloc((size_t)(N_CTX - len + 1), r->tok_bytes);
  refused(r, s, len,
          r->M->seq_state_write(r->m, s, len, N_CTX - len + 1, big, fbuf, err, sizeof err), err,
          what);
  free(big);
  /* a hybrid's KV rows without the fixed state at their end */
  if (r->fixed_bytes) {
    err[0] = '\0';
    snprintf(what, sizeof what, "%s: write without fixed_src", tag);
    refused(r, s, len, r->M->seq_state_write(r->m, s, len, BLOCK, buf, NULL, err, sizeof err), err,
            what);
    ck_assert_int_eq(r->M->seq_len(r->m, s), len);
  }
  free(buf);
  free(fbuf);
}

/* The property, on one model:
 *   A: the whole prompt of P_LEN tokens in one forward (the reference);
 *   C: the first K_LEN tokens, later the other P_LEN - K_LEN in a second
 *      forward (B's chunking);
 *   B: restored with positions [0, K_LEN) as a prefix cache would: blocks
 *      of BLOCK read one by one — from A for a model without fixed state
 *      (positions short of A's length), from C for a hybrid, the last
 *      block with the fixed state at K_LEN — then written one by one and
 *      gathered (qwen3), or all gathered with the fixed state (hybrid);
 *      then fed the other tokens in one forward;
 * then N_DEC greedy steps: B picks, A and C are fed the same ids. B must
 * equal C bit for bit (a restored sequence is the one it came from: if
 * not, the copy is wrong) and A bit for bit (if only this fails, the
 * platform's rows depend on the chunk: see K_LEN). */
static void restore_and_continue(const char *args, const char *name, const char *kv_type,
                                 const char *plugin) {
  rt r;
  rt_open(&r, args, name, kv_type, plugin);
  const int64_t V = r.V;
  const size_t lbytes = (size_t)V * sizeof(float);
  const int hybrid = r.fixed_bytes > 0;
  char tag[96], err[512];
  snprintf(tag, sizeof tag, "%s%s%s", name, kv_type ? " kv_type=" : "", kv_type ? kv_type : "");
  int32_t ids[P_LEN];
  mi_test_prompt(ids, P_LEN, 7);
  float *la = malloc(lbytes), *lb = malloc(lbytes), *lc = malloc(lbytes);

  mi_seq *a = mi_test_seq(r.e, N_CTX), *b = mi_test_seq(r.e, N_CTX), *c = mi_test_seq(r.e, N_CTX);
  mi_test_forward(r.e, a, ids, P_LEN, la, 0);
  mi_test_forward(r.e, c, ids, K_LEN, NULL, 0);
  /* the prefix cache's blocks: read one by one (the last with the fixed
   * state at K_LEN, which the hybrid's source C ends at); concatenated,
   * they are the read of the whole range */
  mi_seq *src = hybrid ? c : a;
  const size_t bb = (size_t)BLOCK * r.tok_bytes;
  unsigned char *cat = malloc((size_t)K_LEN * r.tok_bytes);
  void *fx = NULL, *whole;
  for (int64_t p = 0; p < K_LEN; p += BLOCK) {
    void *blk;
    int last = hybrid && p + BLOCK == K_LEN;
    read_exact(&r, src, p, BLOCK, last, &blk, last ? &fx : NULL);
    memcpy(cat + (size_t)(p / BLOCK) * bb, blk, bb);
    free(blk);
  }
  read_exact(&r, src, 0, K_LEN, 0, &whole, NULL);
  ck_assert_msg(memcmp(cat, whole, (size_t)K_LEN * r.tok_bytes) == 0,
                "%s: reads of adjacent blocks, concatenated, differ from the read of their union",
                tag);
  free(whole);
  /* reading leaves the source as it was */
  ck_assert_int_eq(r.M->seq_len(r.m, src), hybrid ? K_LEN : P_LEN);
  if (!hybrid) {
    /* two blocks one at a time, then two gathered in one write */
    write_ok(&r, b, 0, BLOCK, cat, NULL);
    write_ok(&r, b, BLOCK, BLOCK, cat + bb, NULL);
    write_ok(&r, b, 2 * BLOCK, K_LEN - 2 * BLOCK, cat + 2 * bb, NULL);
  } else {
    /* the fixed state exists only at the last block's end: all gathered */
    write_ok(&r, b, 0, K_LEN, cat, fx);
  }
  free(cat);
  free(fx);
  /* refused calls on the restored sequence: its logits below must still
   * be those of a sequence that was refused nothing */
  check_refusals(&r, b, tag);
  mi_test_forward(r.e, b, ids + K_LEN, P_LEN - K_LEN, lb, 0);
  mi_test_forward(r.e, c, ids + K_LEN, P_LEN - K_LEN, lc, 0);
  ck_assert_int_eq(r.M->seq_len(r.m, b), P_LEN);
  ck_assert_msg(memcmp(lc, lb, lbytes) == 0,
                "%s: after the prompt, the restored sequence's logits differ from those of the "
                "sequence it came from (%.3g of the spread)",
                tag, mi_test_rel_err(lb, lc, V));
  ck_assert_msg(memcmp(la, lb, lbytes) == 0,
                "%s: after the prompt, the restored sequence's logits differ from one prefill's "
                "(%.3g of the spread; it equals its source fed in the same two chunks)",
                tag, mi_test_rel_err(lb, la, V));

  for (int step = 0; step < N_DEC; step++) {
    int32_t next = argmax(lb, V);
    ck_assert_int_eq(argmax(la, V), next);
    ck_assert_int_eq(argmax(lc, V), next);
    if (step == N_DEC / 2) check_refusals(&r, b, tag); /* mid-decode too */
    mi_test_forward(r.e, b, &next, 1, lb, 0);
    mi_test_forward(r.e, c, &next, 1, lc, 0);
    mi_test_forward(r.e, a, &next, 1, la, 0);
    ck_assert_msg(memcmp(lc, lb, lbytes) == 0,
                  "%s: decode step %d: the restored sequence's logits differ from those of the "
                  "sequence it came from (%.3g of the spread)",
                  tag, step, mi_test_rel_err(lb, lc, V));
    ck_assert_msg(memcmp(la, lb, lbytes) == 0,
                  "%s: decode step %d: the restored sequence's logits differ from one prefill's "
                  "(%.3g of the spread)",
                  tag, step, mi_test_rel_err(lb, la, V));
  }
  ck_assert_int_eq(r.M->seq_len(r.m, b), P_LEN + N_DEC);
  fprintf(stderr,
          "%s: restored %d of %d positions (%zu bytes/token, %zu fixed), then %d greedy steps: "
          "bit-identical to one prefill\n",
          tag, K_LEN, P_LEN, r.tok_bytes, r.fixed_bytes, N_DEC);

  /* zero positions: nothing to copy, nothing changes */
  mi_seq *d = mi_test_seq(r.e, N_CTX);
  ck_assert_int_eq(r.M->seq_state_read(r.m, a, 0, 0, NULL, NULL, err, sizeof err), 0);
  if (!hybrid) {
    ck_assert_int_eq(r.M->seq_state_write(r.m, d, 0, 0, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_eq(r.M->seq_len(r.m, d), 0);
  }
  r.M->seq_destroy(r.m, d);

  r.M->seq_destroy(r.m, a);
  r.M->seq_destroy(r.m, b);
  r.M->seq_destroy(r.m, c);
  free(la);
  free(lb);
  free(lc);
  mi_test_session_close(r.e, r.reg);
}

START_TEST(qwen3_f32) {
  restore_and_continue("--shape tiny --seed 5", "tiny-seed5", NULL, "qwen3");
}
END_TEST

START_TEST(qwen3_bf16) {
  restore_and_continue("--shape tiny --seed 5", "tiny-seed5", "bf16", "qwen3");
}
END_TEST

START_TEST(qwen3_f16) {
  restore_and_continue("--shape tiny --seed 5", "tiny-seed5", "f16", "qwen3");
}
END_TEST

START_TEST(hybrid) {
  restore_and_continue("--family qwen35 --shape tiny --seed 51", "qwen35-tiny-seed51", NULL,
                       "qwen35");
}
END_TEST

int main(void) {
  mi_test_build_dir(g_build, sizeof g_build, "build");
  /* generated once, before the forked cases can race to make them */
  char dir[1200];
  if (make_model("--shape tiny --seed 5", "tiny-seed5", dir, sizeof dir) != 0 ||
      make_model("--family qwen35 --shape tiny --seed 51", "qwen35-tiny-seed51", dir, sizeof dir) !=
          0)
    return 1;
  return mi_check_run(mi_check_suite("seq_state", "seq_state", 300, NULL, NULL,
                                     MI_CHECK_TESTS(qwen3_f32, qwen3_bf16, qwen3_f16, hybrid)));
}
