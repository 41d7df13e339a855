/* mi-run on bad input: each case must end with a non-zero exit, nothing on
 * stdout, and ONE line on stderr that names the offending file (or option)
 * and the problem. Never a crash, never a hang (each run has a time limit). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tokenizer/tokenizer.h"
#include "tests/util/check_main.h"
#include "tests/util/test_proc.h"

static char g_build[1024], g_good[1200], g_tmp[1200];
static int g_no_pad; /* edit_header: leave the header unpadded */

typedef struct run_result {
  int status; /* exit code, or 128+signal */
  char out[8192], err[8192];
} run_result;

static void read_fd(int fd, char *buf, size_t cap) {
  size_t n = 0;
  ssize_t r;
  while ((r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
}

/* How a run's stdout is set up. */
enum { OUT_FILE, OUT_CLOSED, OUT_FULL };

/* Runs build/bin/TOOL with argv (NULL-terminated), stdin from /dev/null,
 * stdout to a file (or closed, or /dev/full), 60 s cap. */
static void run_tool_out(run_result *res, const char *tool, int out_mode, const char *const *args) {
  char exe[1200];
  snprintf(exe, sizeof exe, "%s/bin/%s", g_build, tool);
  char of[1300], ef[1300];
  snprintf(of, sizeof of, "%s/out.txt", g_tmp);
  snprintf(ef, sizeof ef, "%s/err.txt", g_tmp);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    int o = open(of, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(ef, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, 0);
    if (out_mode == OUT_FULL) {
      close(o);
      o = open("/dev/full", O_WRONLY);
    }
    dup2(o, 1);
    dup2(e, 2);
    close(o);
    close(e);
    if (out_mode == OUT_CLOSED) close(1);
    mi_test_exec(exe, args, 60);
  }
  int st;
  waitpid(pid, &st, 0);
  res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  int fd = open(of, O_RDONLY);
  read_fd(fd, res->out, sizeof res->out);
  close(fd);
  fd = open(ef, O_RDONLY);
  read_fd(fd, res->err, sizeof res->err);
  close(fd);
}

static void run_mi(run_result *res, const char *const *args) {
  run_tool_out(res, "mi-run", OUT_FILE, args);
}

/* Exactly one line on stderr, containing want (and want2 when given). */
static void expect_one_line(const run_result *r, const char *want, const char *want2) {
  const char *nl = strchr(r->err, '\n');
  ck_assert_msg(nl && nl[1] == 0, "expected exactly one line on stderr, got: %s", r->err);
  ck_assert_msg(strstr(r->err, want), "stderr lacks '%s': %s", want, r->err);
  if (want2) ck_assert_msg(strstr(r->err, want2), "stderr lacks '%s': %s", want2, r->err);
}

/* A fresh copy of the good model to break. */
static void copy_model(const char *name, char *dir, size_t n) {
  snprintf(dir, n, "%s/%s", g_tmp, name);
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, g_good, dir);
  ck_assert(system(cmd) == 0);
}

/* copy_model into d[1300], and the path of the copy's `file` into p[1400]. */
static void copy_model_file(const char *name, const char *file, char *d, char *p) {
  copy_model(name, d, 1300);
  snprintf(p, 1400, "%s/%s", d, file);
}

static void expect_error(const char *dir, const char *want1, const char *want2) {
  run_result r;
  const char *args[] = {"-m", dir, "-p", "hello", "-n", "2", "--temp", "0", NULL};
  run_mi(&r, args);
  ck_assert_msg(r.status != 0, "exit 0 for a broken model; stderr: %s", r.err);
  ck_assert_msg(r.status < 128, "mi-run crashed (status %d); stderr: %s", r.status, r.err);
  ck_assert_msg(r.out[0] == 0, "stdout not empty: %s", r.out);
  expect_one_line(&r, want1, want2);
}

/* A copy `name` of the model whose `file` is cut to len bytes (-1: half
 * its size): mi-run refuses it naming `want`. */
static void truncated_case(const char *name, const char *file, off_t len, const char *want) {
  char d[1300], p[1400];
  copy_model_file(name, file, d, p);
  if (len < 0) {
    struct stat sb;
    ck_assert(stat(p, &sb) == 0);
    len = sb.st_size / 2;
  }
  ck_assert(truncate(p, len) == 0);
  expect_error(d, want, NULL);
}

/* DIR/model.safetensors (its path into path[1300]) opened with mode and
 * read up to its data: the header's length into *hl, the header parsed
 * into *j; the caller closes the file and decrefs *j. */
static FILE *open_safetensors(const char *dir, const char *mode, char *path, uint64_t *hl,
                              json_t **j) {
  snprintf(path, 1300, "%s/model.safetensors", dir);
  FILE *f = fopen(path, mode);
  ck_assert(f);
  ck_assert(fread(hl, 8, 1, f) == 1);
  char *hdr = malloc(*hl + 1);
  ck_assert(fread(hdr, 1, *hl, f) == *hl);
  hdr[*hl] = 0;
  *j = json_loads(hdr, 0, NULL);
  ck_assert(*j);
  free(hdr);
  return f;
}

/* Rewrites model.safetensors with its header edited by fn. */
static void edit_header(const char *dir, void (*fn)(json_t *hdr, size_t data_len)) {
  char path[1300];
  uint64_t hl;
  json_t *j;
  FILE *f = open_safetensors(dir, "rb", path, &hl, &j);
  fseek(f, 0, SEEK_END);
  size_t data_len = (size_t)ftell(f) - 8 - hl;
  char *data = malloc(data_len);
  fseek(f, (long)(8 + hl), SEEK_SET);
  ck_assert(fread(data, 1, data_len, f) == data_len);
  fclose(f);
  fn(j, data_len);
  char *nh = json_dumps(j, JSON_COMPACT);
  uint64_t nl = strlen(nh), padded = (nl + 7) & ~(uint64_t)7; /* as the format pads */
  if (g_no_pad) padded = nl;
  f = fopen(path, "wb");
  fwrite(&padded, 8, 1, f);
  fwrite(nh, 1, nl, f);
  for (uint64_t k = nl; k < padded; k++) fputc(' ', f);
  fwrite(data, 1, data_len, f);
  fclose(f);
  free(nh);
  json_decref(j);
  free(data);
}

static void shift_norm_past_end(json_t *h, size_t data_len) {
  json_t *t = json_object_get(h, "model.norm.weight");
  json_t *off = json_object_get(t, "data_offsets");
  json_int_t b = json_integer_value(json_array_get(off, 0));
  json_int_t e = json_integer_value(json_array_get(off, 1));
  json_array_set_new(off, 0, json_integer((json_int_t)data_len + 64));
  json_array_set_new(off, 1, json_integer((json_int_t)data_len + 64 + (e - b)));
}

static void norm_dtype_i16(json_t *h, size_t data_len) {
  (void)data_len;
  json_object_set_new(json_object_get(h, "model.layers.0.mlp.up_proj.weight"), "dtype",
                      json_string("I16"));
}

static void rename_norm(json_t *h, size_t data_len) {
  (void)data_len;
  json_t *t = json_object_get(h, "model.norm.weight");
  json_object_set(h, "model.norm.weight_renamed", t);
  json_object_del(h, "model.norm.weight");
}

static void edit_json(const char *path, const char *key, json_t *val) {
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  ck_assert_msg(j, "%s: %s", path, je.text);
  if (val)
    json_object_set_new(j, key, val);
  else
    json_object_del(j, key);
  ck_assert(json_dump_file(j, path, JSON_INDENT(1)) == 0);
  json_decref(j);
}

/* The model copied to name, its safetensors header edited by fn: mi-run
 * must refuse it with one line naming want1 and want2. */
static void header_case(const char *name, void (*fn)(json_t *hdr, size_t data_len), const char *want1,
                        const char *want2) {
  char d[1300];
  copy_model(name, d, sizeof d);
  edit_header(d, fn);
  expect_error(d, want1, want2);
}

/* The model copied to name with key of its file set to val (NULL: removed):
 * mi-run must refuse it with one line naming want1 and want2. */
static void json_case(const char *name, const char *file, const char *key, json_t *val, const char *want1,
                      const char *want2) {
  char d[1300], p[1400];
  copy_model_file(name, file, d, p);
  edit_json(p, key, val);
  expect_error(d, want1, want2);
}

START_TEST(good_model_runs) {
  run_result r;
  const char *args[] = {"-m", g_good, "-p", "hello", "-n", "3", "--temp", "0", NULL};
  run_mi(&r, args);
  ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
  ck_assert_msg(r.out[0] != 0, "no output");
}
END_TEST

START_TEST(truncated_safetensors) {
  truncated_case("trunc", "model.safetensors", -1, "model.safetensors");
}
END_TEST

START_TEST(tiny_safetensors) {
  truncated_case("tiny", "model.safetensors", 5, "model.safetensors");
}
END_TEST

START_TEST(offsets_past_end) {
  header_case("offsets", shift_norm_past_end, "model.safetensors", "model.norm.weight");
}
END_TEST

START_TEST(wrong_dtype) {
  header_case("dtype", norm_dtype_i16, "model.safetensors", "up_proj");
}
END_TEST

START_TEST(missing_tensor) {
  header_case("missing", rename_norm, "missing tensor", "model.norm.weight");
}
END_TEST

START_TEST(shape_mismatch) {
  json_case("shape", "config.json", "intermediate_size", json_integer(4096), "mlp.gate_proj.weight",
            "shape");
}
END_TEST

START_TEST(invalid_config_json) {
  truncated_case("badjson", "config.json", 20, "config.json");
}
END_TEST

START_TEST(config_too_large) {
  char d[1300], p[1400];
  copy_model_file("bigcfg", "config.json", d, p);
  char *pad = malloc(2 << 20);
  memset(pad, 'x', (2 << 20) - 1);
  pad[(2 << 20) - 1] = 0;
  edit_json(p, "padding", json_string(pad));
  free(pad);
  expect_error(d, "config.json", "limit");
}
END_TEST

START_TEST(unknown_architecture) {
  char d[1300], p[1400];
  copy_model_file("arch", "config.json", d, p);
  json_t *a = json_array();
  json_array_append_new(a, json_string("MambaForCausalLM"));
  edit_json(p, "architectures", a);
  expect_error(d, "config.json", "MambaForCausalLM");
}
END_TEST

START_TEST(unsupported_config_value) {
  json_case("heads", "config.json", "num_key_value_heads", json_integer(3), "config.json",
            "num_key_value_heads");
}
END_TEST

/* Found by fuzz/fuzz_qwen3_config.c: with no head_dim, hidden_size /
 * num_attention_heads was used unchecked (0 here, or past 1024). */
START_TEST(derived_head_dim_out_of_range) {
  char d[1300], p[1400];
  copy_model_file("headdim", "config.json", d, p);
  edit_json(p, "head_dim", NULL);
  edit_json(p, "hidden_size", json_integer(1));
  edit_json(p, "num_attention_heads", json_integer(2));
  edit_json(p, "num_key_value_heads", json_integer(1));
  expect_error(d, "config.json", "head_dim");
}
END_TEST

/* The value of hidden_act is the file's: a newline in it must not make the
 * error two lines (expect_error checks for exactly one). */
START_TEST(config_value_with_newline) {
  json_case("act", "config.json", "hidden_act", json_string("gelu\nsecond line"), "config.json",
            "hidden_act");
}
END_TEST

START_TEST(tokenizer_missing_model) {
  json_case("tok", "tokenizer.json", "model", NULL, "tokenizer.json", "model");
}
END_TEST

START_TEST(missing_model_dir) {
  expect_error("/nonexistent/model/dir", "/nonexistent/model/dir", NULL);
}
END_TEST

START_TEST(prompt_longer_than_context) {
  run_result r;
  const char *args[] = {"-m", g_good, "-p", "one two three four five six seven eight nine ten",
                        "-c", "4", "-n", "2", NULL};
  run_mi(&r, args);
  ck_assert_int_ne(r.status, 0);
  ck_assert_int_lt(r.status, 128);
  ck_assert_msg(strstr(r.err, "context"), "stderr: %s", r.err);
  ck_assert_msg(r.out[0] == 0, "stdout: %s", r.out);
}
END_TEST

START_TEST(no_prompt_does_not_read_stdin) {
  /* stdin is /dev/null-like but must not even be consulted: mi-run asks for
   * -p/-f instead of waiting. */
  run_result r;
  const char *args[] = {"-m", g_good, NULL};
  run_mi(&r, args);
  ck_assert_int_eq(r.status, 2);
  ck_assert_msg(strstr(r.err, "no prompt"), "stderr: %s", r.err);
}
END_TEST

START_TEST(bad_option_values) {
  run_result r;
  const char *a1[] = {"-m", g_good, "-p", "x", "-n", "lots", NULL};
  run_mi(&r, a1);
  ck_assert_int_eq(r.status, 2);
  ck_assert_msg(strstr(r.err, "-n"), "stderr: %s", r.err);
  const char *a2[] = {"-m", g_good, "-p", "x", "--frobnicate", NULL};
  run_mi(&r, a2);
  ck_assert_int_eq(r.status, 2);
  ck_assert_msg(strstr(r.err, "--frobnicate"), "stderr: %s", r.err);
  const char *a3[] = {"-m", g_good, "-p", "x", "--platform", "z200", NULL};
  run_mi(&r, a3);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "z200"), "stderr: %s", r.err);
}
END_TEST

/* ---------- model facts come from the model folder's own files ---------- */

/* The token_id of each step line of `mi-run --json` output, in order. */
static int json_steps(const char *out, int *ids, int cap) {
  int n = 0;
  for (const char *p = out; (p = strstr(p, "\"token_id\":")) && n < cap; p++)
    ids[n++] = atoi(p + 11);
  return n;
}

START_TEST(eos_from_generation_config) {
  char d[1300], p[1400];
  copy_model("eos", d, sizeof d);
  run_result r;
  const char *a[] = {"-m", d, "-p", "hello", "-n", "4", "--temp", "0", "--json", "--ignore-eos", NULL};
  run_mi(&r, a);
  ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
  int ids[8];
  ck_assert_int_eq(json_steps(r.out, ids, 8), 4);
  /* Only generation_config.json names the greedy first token as an end
   * token: generation must stop right after it. */
  snprintf(p, sizeof p, "%s/config.json", d);
  edit_json(p, "eos_token_id", NULL);
  snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
  edit_json(p, "eos_token", NULL);
  snprintf(p, sizeof p, "%s/generation_config.json", d);
  edit_json(p, "eos_token_id", json_pack("[i]", ids[0]));
  const char *b[] = {"-m", d, "-p", "hello", "-n", "4", "--temp", "0", "--json", NULL};
  run_mi(&r, b);
  ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
  int got[8];
  ck_assert_int_eq(json_steps(r.out, got, 8), 1);
  ck_assert_int_eq(got[0], ids[0]);
  run_mi(&r, a); /* --ignore-eos still runs to -n */
  ck_assert_int_eq(json_steps(r.out, got, 8), 4);
  /* and a malformed one is refused, naming the file */
  edit_json(p, "eos_token_id", json_string("<|im_end|>"));
  expect_error(d, "generation_config.json", "eos_token_id");
}
END_TEST

START_TEST(chat_template_from_model_folder) {
  char d[1300], p[1400];
  copy_model_file("chat", "tokenizer_config.json", d, p);
  /* the plain ChatML template: --chat must render exactly its turns */
  edit_json(p, "chat_template",
            json_string("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
                        "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"));
  run_result r, want;
  const char *a[] = {"-m", d, "--chat", "-p", "hi", "-n", "1", "--temp", "0", "--json", NULL};
  run_mi(&r, a);
  ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
  const char *b[] = {"-m", d, "-p", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                     "-n", "1", "--temp", "0", "--json", NULL};
  run_mi(&want, b);
  ck_assert_msg(want.status == 0, "status %d: %s", want.status, want.err);
  char *nl = strchr(r.out, '\n'), *wnl = strchr(want.out, '\n');
  ck_assert(nl && wnl);
  *nl = *wnl = 0;
  ck_assert_str_eq(r.out, want.out); /* the prompt_ids line */
  /* a template of another family renders through the Jinja engine (core/template) */
  edit_json(p, "chat_template", json_string("{% for m in messages %}<|im_start|>{{ m['role'] | upper }}"
                                            "<|im_end|>{{ m['content'] }}{% endfor %}"));
  run_mi(&r, a);
  ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
  /* one outside the engine's subset, or none at all: one line, no guess */
  edit_json(p, "chat_template", json_string("{% for m in messages %}{{ m['content'] | wordwrap }}{% endfor %}"));
  run_mi(&r, a);
  ck_assert_int_ne(r.status, 0);
  ck_assert_msg(strstr(r.err, "tokenizer_config.json: chat template line 1 col ") &&
                strstr(r.err, "unknown filter 'wordwrap'") && strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                "stderr: %s", r.err);
  edit_json(p, "chat_template", NULL);
  run_mi(&r, a);
  ck_assert_int_ne(r.status, 0);
  ck_assert_msg(strstr(r.err, "declares no chat_template"), "stderr: %s", r.err);
  ck_assert_msg(r.out[0] == 0, "stdout: %s", r.out);
}
END_TEST

/* ---- issue 18: hostile inputs, round two -------------------------------- */

/* A FIFO in place of each file mi-run reads from a model directory: one
 * line naming it, never a wait (run_tool_out's alarm would show a hang as
 * status 128+14). */
START_TEST(fifo_in_place_of_files) {
  const char *files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                         "model.safetensors"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char d[1300], p[1500];
    copy_model_file("fifo", files[i], d, p);
    ck_assert(unlink(p) == 0);
    ck_assert(mkfifo(p, 0644) == 0);
    expect_error(d, files[i], "not a regular file (a FIFO)");
  }
}
END_TEST

START_TEST(fifo_plugins_conf) {
  char p[1300];
  snprintf(p, sizeof p, "%s/fifo-plugins.conf", g_tmp);
  unlink(p);
  ck_assert(mkfifo(p, 0644) == 0);
  run_result r;
  const char *args[] = {"--plugins-conf", p, "-m", g_good, "-p", "x", NULL};
  run_mi(&r, args);
  ck_assert_msg(r.status == 1, "status %d: %s", r.status, r.err);
  ck_assert_msg(strstr(r.err, "fifo-plugins.conf: not a regular file (a FIFO)"), "%s", r.err);
}
END_TEST

/* A weight file that is a symlink out of the model folder is refused; one
 * to a file inside it is fine. */
START_TEST(symlink_shard_outside) {
  char d[1300], p[1400], out[1400];
  copy_model_file("symout", "model.safetensors", d, p);
  snprintf(out, sizeof out, "%s/outside.safetensors", g_tmp);
  ck_assert(rename(p, out) == 0);
  ck_assert(symlink(out, p) == 0);
  expect_error(d, "model.safetensors: leads outside the model folder", "refused");

  copy_model_file("symin", "model.safetensors", d, p);
  snprintf(out, sizeof out, "%s/weights.bin", d);
  ck_assert(rename(p, out) == 0);
  ck_assert(symlink("weights.bin", p) == 0);
  run_result r;
  const char *args[] = {"-m", d, "-p", "hello", "-n", "2", "--temp", "0", NULL};
  run_mi(&r, args);
  ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
}
END_TEST

static void no_edit(json_t *h, size_t data_len) {
  (void)h;
  (void)data_len;
}

/* An unpadded header (length not a multiple of 8) would leave every tensor
 * misaligned: refused in one line (was a UBSan misaligned load). */
START_TEST(header_not_multiple_of_8) {
  char d[1300];
  copy_model("unpadded", d, sizeof d);
  g_no_pad = 1;
  edit_header(d, no_edit);
  g_no_pad = 0;
  expect_error(d, "model.safetensors: header length", "is not a multiple of 8");
}
END_TEST

/* Configs that ask for more memory than there is: refused before
 * allocating, "needs X, Y available". */
START_TEST(memory_estimate) {
  run_result r;
  const char *a1[] = {"-m", g_good, "-p", "hi", "-n", "2", "--mem-limit", "1K", NULL};
  run_mi(&r, a1);
  ck_assert_int_eq(r.status, 1);
  expect_one_line(&r, "needs 18.", "MiB for the weights, 0.0 MiB available (--mem-limit)");

  char d[1300], p[1400];
  copy_model_file("bigctx", "config.json", d, p);
  edit_json(p, "max_position_embeddings", json_integer(16777216));
  /* the tiny model's KV cache: 2 layers x K,V x 2 heads x 16 x 4 bytes = 512 B a token */
  const char *a2[] = {"-m", d, "-p", "hi", "-n", "2", "-c", "16777216", "--mem-limit", "1G", NULL};
  run_mi(&r, a2);
  ck_assert_int_eq(r.status, 1);
  expect_one_line(&r, "needs 8.", "(KV cache for 16777216 tokens: 8.00 GiB");
  ck_assert_msg(strstr(r.err, "1.00 GiB available (--mem-limit); lower -c"), "%s", r.err);

  /* a limit the file fits but the weights as loaded (read into memory)
   * reach: named as the weights' shortfall, not the scratch's "0.0 MiB" */
  char wfile[1300], exact[32];
  snprintf(wfile, sizeof wfile, "%s/model.safetensors", g_good);
  struct stat st;
  ck_assert_int_eq(stat(wfile, &st), 0);
  snprintf(exact, sizeof exact, "%lld", (long long)st.st_size);
  const char *a4[] = {"-m", g_good, "-p", "hi", "-n", "2", "--mem-limit", exact, NULL};
  run_mi(&r, a4);
  ck_assert_int_eq(r.status, 1);
  expect_one_line(&r, "the weights as loaded take", "available (--mem-limit)");

  const char *a3[] = {"-m", g_good, "-p", "hi", "-n", "2", "-b", "65536", "--mem-limit", "64M", NULL};
  run_mi(&r, a3);
  ck_assert_int_eq(r.status, 1);
  expect_one_line(&r, "qwen3: the scratch buffers (batch 65536) need", "available; lower -b");
}
END_TEST

/* Every numeric option strictly parsed, one line naming it. */
START_TEST(numbers_that_are_not_numbers) {
  struct {
    const char *tool, *opt, *val, *want;
  } cases[] = {
      {"mi-run", "--seed", "abc", "mi-run: --seed expects an integer"},
      {"mi-run", "--mem-limit", "abc", "mi-run: --mem-limit expects a size"},
      {"mi-run", "--mem-limit", "0", "mi-run: --mem-limit expects a size"},
      {"mi-run", "--temp", "nan", "mi-run: --temp expects a number"},
      {"mi-run", "-n", "12abc", "mi-run: -n expects an integer"},
      {"mi-run", "--seed", " 7", "mi-run: --seed expects an integer"},
      {"mi-run", "--seed", "-1", "mi-run: --seed expects an integer"},
      {"mi-bench", "--seed", "abc", "mi-bench: --seed expects an integer"},
      {"mi-bench", "-t", "4x", "mi-bench: --threads expects an integer in [1, 1024]"},
      {"mi-bench", "-r", "0", "mi-bench: --repeats expects an integer in [1, 100]"},
      {"mi-bench", "--warmup", "11", "mi-bench: --warmup expects an integer in [0, 10]"},
      {"mi-verify", "--timeout", "abc", "mi-verify: --timeout expects a number"},
      {"mi-verify", "--mem-limit", "abc", "mi-verify: --mem-limit expects an integer"},
      {"mi-verify", "--cpu-limit", "0", "mi-verify: --cpu-limit expects a number"},
      {"mi-verify", "--stage", "2x", "mi-verify: --stage expects an integer in [1, 6]"},
      {"mi-mkmodel", "--seed", "12abc", "mi-mkmodel: --seed 12abc"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_result r;
    const char *args[] = {cases[i].opt, cases[i].val, "-m", g_good, "-p", "x", NULL};
    run_tool_out(&r, cases[i].tool, OUT_FILE, args);
    ck_assert_msg(r.status == 2, "%s %s %s: status %d: %s", cases[i].tool, cases[i].opt,
                  cases[i].val, r.status, r.err);
    ck_assert_msg(strstr(r.err, cases[i].want), "%s %s '%s': stderr: %s", cases[i].tool,
                  cases[i].opt, cases[i].val, r.err);
  }
  /* MI_MEM_LIMIT is parsed the same way */
  setenv("MI_MEM_LIMIT", "lots", 1);
  run_result r;
  const char *args[] = {"-m", g_good, "-p", "x", NULL};
  run_mi(&r, args);
  unsetenv("MI_MEM_LIMIT");
  ck_assert_int_eq(r.status, 2);
  expect_one_line(&r, "mi-run: MI_MEM_LIMIT expects a size", "got 'lots'");
}
END_TEST

/* Rewrites every element of one bf16 tensor as NaN. */
static void poison_tensor(const char *dir, const char *name) {
  char path[1300];
  uint64_t hl;
  json_t *j;
  FILE *f = open_safetensors(dir, "r+b", path, &hl, &j);
  json_t *off = json_object_get(json_object_get(j, name), "data_offsets");
  long b = (long)json_integer_value(json_array_get(off, 0)),
       e = (long)json_integer_value(json_array_get(off, 1));
  ck_assert(e > b);
  fseek(f, (long)(8 + hl) + b, SEEK_SET);
  for (long k = b; k < e; k += 2) {
    fputc(0xc0, f); /* bf16 0x7fc0: a quiet NaN */
    fputc(0x7f, f);
  }
  ck_assert(fclose(f) == 0);
  json_decref(j);
}

/* NaN weights: stop at the first non-finite logits, naming the step, with
 * a non-zero status (was token 0 forever, exit 0, --json lines without
 * logprob). */
START_TEST(nan_weights) {
  char d[1300];
  copy_model("nan", d, sizeof d);
  poison_tensor(d, "model.norm.weight");
  run_result r;
  const char *args[] = {"-m", d, "-p", "hello", "-n", "4", "--json", NULL};
  run_mi(&r, args);
  ck_assert_int_eq(r.status, 1);
  expect_one_line(&r, "step 0 (prefill): the logits are not finite (NaN or infinity)", "nan");
  ck_assert_msg(!strstr(r.out, "token_id"), "tokens were printed: %s", r.out);
}
END_TEST

/* Output that is lost: stdout closed or on a full disk is an error. */
START_TEST(output_lost) {
  const char *args[] = {"-m", g_good, "-p", "hello", "-n", "3", "--temp", "0", NULL};
  const char *jargs[] = {"-m", g_good, "-p", "hello", "-n", "3", "--json", NULL};
  char ckb[1300];
  const char *src = getenv("MI_SOURCE_DIR");
  snprintf(ckb, sizeof ckb, "%s/ckb", src ? src : ".");
  const char *largs[] = {"--ckb", ckb, "list", NULL};
  const struct {
    const char *tool;
    int out_mode;
    const char *const *args;
    const char *want; /* the one line on stderr; exit status 1 */
  } cases[] = {
      {"mi-run", OUT_FULL, args, "mi-run: standard output: write failed: No space left on device"},
      {"mi-run", OUT_CLOSED, args, "mi-run: standard output is closed"},
      {"mi-run", OUT_FULL, jargs, "mi-run: standard output: write failed"},
      {"mi-ckb", OUT_FULL, largs, "mi-ckb: standard output: write failed: No space left on device"},
      {"mi-ckb", OUT_CLOSED, largs, "mi-ckb: standard output is closed"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_result r;
    run_tool_out(&r, cases[i].tool, cases[i].out_mode, cases[i].args);
    ck_assert_msg(r.status == 1, "%s case %zu: status %d", cases[i].tool, i, r.status);
    expect_one_line(&r, cases[i].want, NULL);
  }
}
END_TEST

/* -i: a conversation on stdin. Each turn's prompt (its --json prompt_ids,
 * decoded by the tokenizer here) holds the conversation so far: the earlier
 * user turns and answers, in order; /reset forgets them; a line ending in
 * '\\' goes on; stdout holds the answers alone, stderr nothing. */
static json_t *turn_prompts(const char *input, const char *extra, char *err_out, size_t en, int *status) {
  char in[1300], out[1300], er[1300], cmd[5000];
  snprintf(in, sizeof in, "%s/turns.txt", g_tmp);
  snprintf(out, sizeof out, "%s/turns.out", g_tmp);
  snprintf(er, sizeof er, "%s/turns.err", g_tmp);
  FILE *f = fopen(in, "w");
  ck_assert_ptr_nonnull(f);
  fputs(input, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "timeout 120 '%s/bin/mi-run' -m '%s' -i -n 6 --temp 0 -t 1 %s < '%s' > '%s' 2> '%s'", g_build,
           g_good, extra, in, out, er);
  int st = system(cmd);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  f = fopen(er, "r");
  size_t k = f ? fread(err_out, 1, en - 1, f) : 0;
  err_out[k] = 0;
  if (f) fclose(f);
  /* [{prompt: [ids], answer: [ids]}] per turn */
  json_t *turns = json_array(), *cur = NULL;
  f = fopen(out, "r");
  char line[65536];
  while (f && fgets(line, sizeof line, f)) {
    json_t *j = json_loads(line, 0, NULL);
    if (json_object_get(j, "prompt_ids")) {
      cur = json_pack("{s:O, s:[]}", "prompt", json_object_get(j, "prompt_ids"), "answer");
      json_array_append_new(turns, cur);
    } else if (cur && json_object_get(j, "token_id"))
      json_array_append(json_object_get(cur, "answer"), json_object_get(j, "token_id"));
    json_decref(j);
  }
  if (f) fclose(f);
  return turns;
}

static char *decode(const mi_tokenizer *tok, json_t *ids) {
  size_t n = json_array_size(ids);
  int32_t *v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
  char *s = mi_tokenizer_decode(tok, v, n, NULL, NULL);
  free(v);
  ck_assert_ptr_nonnull(s);
  return s;
}

/* haystack holds the needles in this order */
static int in_order(const char *hay, const char *const *needles, int n) {
  const char *p = hay;
  for (int i = 0; i < n; i++) {
    p = strstr(p, needles[i]);
    if (!p) return 0;
    p += strlen(needles[i]);
  }
  return 1;
}

START_TEST(interactive_conversation) {
  char tp[1300], err[4096];
  snprintf(tp, sizeof tp, "%s/tokenizer.json", g_good);
  mi_tokenizer *tok = mi_tokenizer_load(tp, err, sizeof err);
  ck_assert_msg(tok != NULL, "%s", err);
  int st = -1;
  json_t *t = turn_prompts("Hello there\nAgain please\n/reset\nline one\\\nline two\n/exit\nnever read\n", "--json", err,
                           sizeof err, &st);
  ck_assert_msg(st == 0 && err[0] == 0, "exit %d, stderr: %s", st, err);
  ck_assert_int_eq(json_array_size(t), 3);
  char *p1 = decode(tok, json_object_get(json_array_get(t, 0), "prompt"));
  char *a1 = decode(tok, json_object_get(json_array_get(t, 0), "answer"));
  char *p2 = decode(tok, json_object_get(json_array_get(t, 1), "prompt"));
  char *p3 = decode(tok, json_object_get(json_array_get(t, 2), "prompt"));
  /* the first answer as the template keeps it: surrounding blanks aside */
  char *a = a1;
  while (*a == ' ' || *a == '\n') a++;
  for (size_t k = strlen(a); k && (a[k - 1] == ' ' || a[k - 1] == '\n');) a[--k] = 0;
  const char *want2[] = {"<|im_start|>user\nHello there", "<|im_start|>assistant\n", a, "<|im_start|>user\nAgain please",
                         "<|im_start|>assistant\n"};
  ck_assert_msg(strstr(p1, "Hello there") && !strstr(p1, "Again"), "turn 1: %s", p1);
  ck_assert_msg(in_order(p2, want2, 5), "turn 2 lacks the conversation so far:\n%s\n(answer 1: %s)", p2, a);
  ck_assert_msg(strlen(p2) > strlen(p1) + strlen(a), "turn 2 is not longer than turn 1 and its answer");
  ck_assert_msg(!strstr(p3, "Hello") && strstr(p3, "line one\nline two"), "after /reset: %s", p3);
  free(p1), free(a1), free(p2), free(p3);
  json_decref(t);
  /* plain text: the answers on stdout, nothing else; -i with -p refused */
  t = turn_prompts("Hi\n", "", err, sizeof err, &st);
  ck_assert_int_eq(st, 0);
  json_decref(t);
  run_result r;
  const char *args[] = {"-m", g_good, "-i", "-p", "hello", NULL};
  run_mi(&r, args);
  ck_assert_int_eq(r.status, 2);
  expect_one_line(&r, "-i reads the conversation from stdin", NULL);
  mi_tokenizer_free(tok);
}
END_TEST

int main(void) {
  const char *b = getenv("MI_BUILD_DIR");
  snprintf(g_build, sizeof g_build, "%s", b ? b : "build");
  snprintf(g_tmp, sizeof g_tmp, "%s/tests/tmp-cli-errors", g_build);
  snprintf(g_good, sizeof g_good, "%s/good", g_tmp);
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "rm -rf '%s' && mkdir -p '%s' && '%s/bin/mi-mkmodel' --shape tiny --seed 5 --out '%s' "
           ">/dev/null",
           g_tmp, g_tmp, g_build, g_good);
  if (system(cmd) != 0) {
    fprintf(stderr, "cannot generate the test model: %s\n", cmd);
    return 1;
  }
  Suite *s = mi_check_suite(
      "cli_errors", "bad_input", 120, NULL, NULL,
      MI_CHECK_TESTS(good_model_runs, truncated_safetensors, tiny_safetensors, offsets_past_end,
                     wrong_dtype, missing_tensor, shape_mismatch, invalid_config_json,
                     config_too_large, unknown_architecture, unsupported_config_value,
                     derived_head_dim_out_of_range, config_value_with_newline,
                     tokenizer_missing_model, missing_model_dir, prompt_longer_than_context,
                     no_prompt_does_not_read_stdin, bad_option_values, eos_from_generation_config,
                     chat_template_from_model_folder, interactive_conversation,
                     fifo_in_place_of_files, fifo_plugins_conf, symlink_shard_outside,
                     header_not_multiple_of_8, memory_estimate, numbers_that_are_not_numbers,
                     nan_weights, output_lost));
  setenv("CK_FORK", "no", 1); /* run_mi uses one shared tmp dir: keep it serial */
  return mi_check_run(s);
}
