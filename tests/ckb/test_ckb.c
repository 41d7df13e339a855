/* The CKB store: the real ckb/ validates; hand-broken copies are rejected
 * with the file and the field named; atomic add/update holds under
 * concurrent writers and a crash mid-write; coverage; expressions. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "tests/util/check_main.h"
#include "tests/util/test_json.h"
#include "tests/util/test_proc.h"

/* ---------- helpers ---------- */

static char src_ckb[4096];

static void setup(void) {
  const char *s = getenv("MI_SOURCE_DIR");
  ck_assert_msg(s != NULL, "MI_SOURCE_DIR must be set (ctest sets it)");
  snprintf(src_ckb, sizeof src_ckb, "%s/ckb", s);
}

typedef struct diags {
  char text[65536];
  int n;
} diags;

static void collect(void *user, const char *line) {
  diags *d = user;
  size_t l = strlen(d->text);
  snprintf(d->text + l, sizeof d->text - l, "%s\n", line);
  d->n++;
}

/* A private copy of the real CKB in a temp folder: its entries and schemas
 * only. Hidden files (a writer's .lock, a live or dead writer's
 * .NAME.json.tmp.*) are what a concurrent `mi-ckb add` in the source tree
 * leaves for a moment; copied, they would change what the tests below count. */
static char *copy_ckb(void) {
  char *dir = strdup("/tmp/mi-ckb-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "cp -r '%s/.' '%s/' && find '%s' -mindepth 1 -name '.*' -exec rm -rf {} +",
           src_ckb, dir, dir);
  ck_assert_int_eq(system(cmd), 0);
  return dir;
}

static void remove_tree(char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  free(dir);
}

static void save(const char *dir, const char *rel, json_t *j) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  ck_assert_int_eq(json_dump_file(j, p, JSON_INDENT(2)), 0);
  json_decref(j);
}

static void write_text(const char *dir, const char *rel, const char *text) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void validate_dir(const char *dir, diags *d) {
  char err[512];
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  memset(d, 0, sizeof *d);
  int n = mi_ckb_validate(c, collect, d);
  ck_assert_int_eq(n, d->n);
  mi_ckb_close(c);
}

/* The diagnostics must contain one line with both the file and the text. */
static void expect_line(const diags *d, const char *file, const char *text) {
  const char *p = d->text;
  while (p && *p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)len, p);
    if (strstr(line, file) && strstr(line, text)) return;
    p = nl ? nl + 1 : NULL;
  }
  ck_abort_msg("no diagnostic naming '%s' with '%s'; got:\n%s", file, text, d->text);
}

/* Breaks one copy with `edit`, validates, and expects the message. */
#define BROKEN(name, rel, edit_block, file_part, text)                                             \
  START_TEST(name) {                                                                               \
    char *dir = copy_ckb();                                                                        \
    json_t *j = mi_test_json_at(dir, rel);                                                         \
    edit_block;                                                                                    \
    save(dir, rel, j);                                                                             \
    diags d;                                                                                       \
    validate_dir(dir, &d);                                                                         \
    ck_assert_int_ge(d.n, 1);                                                                      \
    expect_line(&d, file_part, text);                                                              \
    remove_tree(dir);                                                                              \
  }                                                                                                \
  END_TEST

/* ---------- the real CKB ---------- */

START_TEST(real_ckb_is_valid) {
  char err[512];
  mi_ckb *c = mi_ckb_open(src_ckb, err, sizeof err);
  ck_assert_msg(c != NULL, "%s", err);
  diags d = {0};
  int n = mi_ckb_validate(c, collect, &d);
  ck_assert_msg(n == 0, "real ckb/ has %d problems:\n%s", n, d.text);
  /* Every kind is represented, and Qwen3 / CPU are curated. */
  const char *kinds[] = {"model", "operator", "platform", "test", "experience", "failure_mode"};
  for (size_t k = 0; k < 6; k++) {
    int found = 0;
    for (size_t i = 0; i < mi_ckb_count(c); i++)
      found += mi_ckb_at(c, i)->kind && !strcmp(mi_ckb_at(c, i)->kind, kinds[k]);
    ck_assert_msg(found > 0, "no entry of kind %s", kinds[k]);
  }
  ck_assert_ptr_nonnull(mi_ckb_find(c, "model.qwen3"));
  ck_assert_ptr_nonnull(mi_ckb_find(c, "platform.cpu"));
  ck_assert_ptr_nonnull(mi_ckb_find(c, "operator.rmsnorm"));
  ck_assert_ptr_nonnull(mi_ckb_find_platform(c, "cpu"));
  mi_ckb_close(c);
}
END_TEST

START_TEST(cli_validate_and_show) {
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' validate 2>&1", getenv("MI_BUILD_DIR"), src_ckb);
  FILE *p = popen(cmd, "r");
  char out[4096] = "";
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  ck_assert_int_eq(pclose(p), 0);
  ck_assert_msg(strstr(out, "0 problems"), "%s", out);

  char *dir = copy_ckb();
  json_t *j = mi_test_json_at(dir, "operators/rmsnorm.json");
  json_object_set_new(json_object_get(j, "tolerance"), "bf16", json_string("tight"));
  save(dir, "operators/rmsnorm.json", j);
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' validate 2>&1", getenv("MI_BUILD_DIR"), dir);
  p = popen(cmd, "r");
  n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  int st = pclose(p);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  ck_assert_msg(strstr(out, "operators/rmsnorm.json: field 'tolerance.bf16' must be a number"), "%s", out);
  remove_tree(dir);
}
END_TEST

/* ---------- hand-broken entries ---------- */

BROKEN(missing_field, "operators/rmsnorm.json", json_object_del(j, "math"),
       "operators/rmsnorm.json", "missing field 'math'")
BROKEN(missing_nested_field, "operators/rope.json",
       json_object_del(json_object_get(j, "signature"), "returns"), "operators/rope.json",
       "missing field 'signature.returns'")
BROKEN(tolerance_wrong_type, "operators/rmsnorm.json",
       json_object_set_new(json_object_get(j, "tolerance"), "bf16", json_string("tight")),
       "operators/rmsnorm.json", "field 'tolerance.bf16' must be a number")
BROKEN(tolerance_unknown_dtype, "operators/add.json",
       json_object_set_new(json_object_get(j, "tolerance"), "f8", json_real(0.1)),
       "operators/add.json", "field name 'tolerance.f8' must be one of")
BROKEN(dangling_reference, "platforms/cpu.json",
       json_object_set_new(json_array_get(json_object_get(j, "kernels"), 0), "operator",
                           json_string("operator.nosuch")),
       "platforms/cpu.json", "field 'kernels[0].operator' refers to unknown entry 'operator.nosuch'")
BROKEN(reference_wrong_kind, "failure_modes/kernel_crash.json",
       json_array_append_new(json_object_get(j, "affects"), json_string("test.stage1_operators")),
       "failure_modes/kernel_crash.json", "refers to 'test.stage1_operators' of kind test, expected model or operator or platform")
BROKEN(model_step_dangling, "models/qwen3.json",
       json_object_set_new(json_array_get(json_object_get(j, "layer_sequence"), 0), "operator",
                           json_string("operator.layernorm")),
       "models/qwen3.json", "field 'layer_sequence[0].operator' refers to unknown entry 'operator.layernorm'")
/* a layout that wraps nothing, and one that writes a tensor it does not skip */
BROKEN(layout_without_config_slot, "models/qwen35.json",
       json_object_del(json_object_get(json_object_get(json_object_get(j, "layouts"), "conditional"), "config"),
                       "text_config"),
       "models/qwen35.json", "field 'layouts.conditional.config' has no key whose value is \"$config\"")
BROKEN(layout_extra_weight_not_skipped, "models/qwen35.json",
       json_object_set_new(json_array_get(json_object_get(json_object_get(json_object_get(j, "layouts"), "conditional"),
                                                          "extra_weights"), 0),
                           "key", json_string("audio.proj.weight")),
       "models/qwen35.json", "'audio.proj.weight' is under none of the layout's 'unused' prefixes")
BROKEN(unknown_kind, "operators/scale.json", json_object_set_new(j, "kind", json_string("widget")),
       "operators/scale.json", "field 'kind' is an unknown kind \"widget\"")
BROKEN(bad_id_format, "operators/scale.json", json_object_set_new(j, "id", json_string("operator.Scale-2")),
       "operators/scale.json", "field 'id' must be an id of the form operator.NAME")
BROKEN(id_file_mismatch, "operators/scale.json", json_object_set_new(j, "id", json_string("operator.scale2")),
       "operators/scale.json", "entry 'operator.scale2' must be stored as operators/scale2.json")
BROKEN(version_not_semver, "tests/stage3_weights.json", json_object_set_new(j, "version", json_string("1.0")),
       "tests/stage3_weights.json", "field 'version' must be a semver-like version")
BROKEN(version_wrong_type, "models/qwen3.json", json_object_set_new(j, "version", json_integer(1)),
       "models/qwen3.json", "field 'version' must be a string")
BROKEN(provenance_bad_enum, "experience/llamacpp_f16_kv_cache.json",
       json_object_set_new(json_object_get(j, "provenance"), "source", json_string("guessed")),
       "experience/llamacpp_f16_kv_cache.json", "field 'provenance.source' must be one of \"curated\", \"evolved\", \"experience\"")
BROKEN(unknown_field, "platforms/cpu.json", json_object_set_new(j, "colour", json_string("blue")),
       "platforms/cpu.json", "unknown field 'colour'")
BROKEN(case_unknown_arg, "operators/rmsnorm.json",
       json_object_set_new(json_array_get(json_object_get(j, "cases"), 0), "rowz", json_integer(3)),
       "operators/rmsnorm.json", "field 'cases[0].rowz' names no scalar argument")
BROKEN(case_missing_arg, "operators/rmsnorm.json",
       json_object_del(json_array_get(json_object_get(j, "cases"), 1), "eps"),
       "operators/rmsnorm.json", "missing field 'cases[1].eps'")
BROKEN(shape_unknown_name, "operators/matmul.json",
       json_array_set_new(json_object_get(json_array_get(json_object_get(json_object_get(j, "signature"), "args"), 4), "shape"),
                          0, json_string("N_out")),
       "operators/matmul.json", "field 'signature.args[4].shape[0]' uses 'N_out', which is not an integer argument")
BROKEN(alias_to_output, "operators/add.json",
       json_object_set_new(json_array_get(json_object_get(j, "cases"), 0), "alias", json_pack("{s:s}", "y", "n")),
       "operators/add.json", "field 'cases[0].alias.y' must name an in buffer")
BROKEN(generator_for_output, "operators/add.json",
       json_object_set_new(json_object_get(j, "inputs"), "y", json_pack("{s:s}", "dist", "normal")),
       "operators/add.json", "field 'inputs.y' names no input buffer")
BROKEN(expression_syntax, "operators/attention.json",
       json_array_set_new(json_object_get(j, "constraints"), 0, json_string("T >= ")),
       "operators/attention.json", "field 'constraints[0]': expression 'T >= '")
BROKEN(model_shape_unknown_config, "models/qwen3.json",
       json_array_set_new(json_object_get(json_array_get(json_object_get(j, "weights"), 0), "shape"), 0,
                          json_string("n_vocab")),
       "models/qwen3.json", "field 'weights[0].shape[0]' uses 'n_vocab', which is not a field of 'config'")

START_TEST(duplicate_ids) {
  char *dir = copy_ckb();
  json_t *j = mi_test_json_at(dir, "operators/rmsnorm.json");
  save(dir, "operators/rmsnorm_copy.json", j); /* same id, second file */
  diags d;
  validate_dir(dir, &d);
  expect_line(&d, "operators/rmsnorm_copy.json", "duplicate id 'operator.rmsnorm'");
  remove_tree(dir);
}
END_TEST

START_TEST(invalid_json) {
  char *dir = copy_ckb();
  write_text(dir, "operators/add.json", "{\"id\": \"operator.add\",\n \"kind\": }\n");
  diags d;
  validate_dir(dir, &d);
  expect_line(&d, "operators/add.json", "invalid JSON at line 2");
  /* ...and the dangling references to it are reported too. */
  expect_line(&d, "platforms/cpu.json", "refers to unknown entry 'operator.add'");
  remove_tree(dir);
}
END_TEST

START_TEST(missing_kind_and_non_object) {
  char *dir = copy_ckb();
  write_text(dir, "tests/list.json", "[1, 2]\n");
  write_text(dir, "tests/nokind.json", "{\"id\": \"test.nokind\"}\n");
  diags d;
  validate_dir(dir, &d);
  expect_line(&d, "tests/list.json", "must be a JSON object");
  expect_line(&d, "tests/nokind.json", "missing field 'kind'");
  remove_tree(dir);
}
END_TEST

/* ---------- atomic add / update ---------- */

static json_t *experience(const char *name, const char *version) {
  char id[128];
  snprintf(id, sizeof id, "experience.%s", name);
  return json_pack("{s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:s, s:s, s:s, s:s, s:[s]}", "id", id, "kind",
                   "experience", "version", version, "provenance", "source", "experience",
                   "summary", "a test record", "symptom", "s", "root_cause", "r", "detection", "d",
                   "fix", "f", "verification", "v", "related", "operator.rmsnorm");
}

static int count_temp_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) n += strstr(de->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return n;
}

START_TEST(add_then_update) {
  char *dir = copy_ckb();
  diags d = {0};
  json_t *e = experience("added_once", "1.0.0");
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), 0);
  /* Adding again: refused. */
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), -1);
  ck_assert_ptr_nonnull(strstr(d.text, "already exists"));
  /* Update with the same version: refused; with a higher one: done. */
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_UPDATE, collect, &d), -1);
  ck_assert_ptr_nonnull(strstr(d.text, "field 'version': 1.0.0 must be greater than the stored 1.0.0"));
  json_object_set_new(e, "version", json_string("1.1.0"));
  json_object_set_new(e, "fix", json_string("the better fix"));
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_UPDATE, collect, &d), 0);
  json_decref(e);
  /* Update of an entry that does not exist: refused. */
  e = experience("never_added", "2.0.0");
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_UPDATE, collect, &d), -1);
  ck_assert_ptr_nonnull(strstr(d.text, "does not exist"));
  json_decref(e);
  /* An invalid entry: refused with the field named, nothing written. */
  e = experience("broken", "1.0.0");
  json_object_set_new(e, "related", json_pack("[s]", "operator.nosuch"));
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), -1);
  ck_assert_ptr_nonnull(strstr(d.text, "experience/broken.json: field 'related[0]' refers to unknown entry 'operator.nosuch'"));
  json_decref(e);

  char err[512];
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  const mi_ckb_entry *got = mi_ckb_find(c, "experience.added_once");
  ck_assert_ptr_nonnull(got);
  ck_assert_str_eq(got->version, "1.1.0");
  ck_assert_str_eq(json_string_value(json_object_get(got->json, "fix")), "the better fix");
  ck_assert_ptr_null(mi_ckb_find(c, "experience.broken"));
  ck_assert_int_eq(mi_ckb_validate(c, NULL, NULL), 0);
  mi_ckb_close(c);
  remove_tree(dir);
}
END_TEST

/* Waits for one child; retries on EINTR. Returns its exit code, or fails
 * the test naming it when it did not exit normally. */
static int child_exit_code(pid_t pid, const char *what) {
  int st = 0;
  pid_t r;
  while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
  }
  ck_assert_msg(r == pid, "%s: waitpid: %s", what, strerror(errno));
  ck_assert_msg(WIFEXITED(st), "%s: killed by signal %d", what, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return WEXITSTATUS(st);
}

/* A writer process: waits until the gate opens (EOF on the pipe), so all
 * writers contend for the store at the same moment however slowly the
 * machine forks them, then adds experience.NAME. Exit 0: added; 1: refused
 * because the id already exists; 2: anything else. */
static pid_t spawn_writer(const char *dir, const char *name, int gate[2]) {
  pid_t pid = fork();
  ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(gate[1]);
    char c;
    while (read(gate[0], &c, 1) < 0 && errno == EINTR) {
    }
    diags d = {0};
    json_t *e = experience(name, "1.0.0");
    int rc = mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d);
    _exit(rc == 0 ? 0 : strstr(d.text, "already exists") ? 1 : 2);
  }
  return pid;
}

START_TEST(concurrent_writers) {
  char *dir = copy_ckb();
  enum { N = 8, SAME = 4 };
  int gate[2];
  ck_assert_int_eq(pipe(gate), 0);
  /* N writers of distinct new ids, and SAME writers racing to add one id */
  pid_t pids[N], same[SAME];
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "writer_%d", i);
    pids[i] = spawn_writer(dir, name, gate);
  }
  for (int i = 0; i < SAME; i++) same[i] = spawn_writer(dir, "contended", gate);
  close(gate[1]); /* all forked: open the gate */
  close(gate[0]);
  for (int i = 0; i < N; i++) {
    char what[32];
    snprintf(what, sizeof what, "writer %d", i);
    ck_assert_msg(child_exit_code(pids[i], what) == 0, "writer %d failed", i);
  }
  /* exactly one adds it; the others are refused because it exists */
  int winners = 0;
  for (int i = 0; i < SAME; i++) {
    int rc = child_exit_code(same[i], "contended writer");
    ck_assert_msg(rc == 0 || rc == 1, "contended writer %d failed otherwise (exit %d)", i, rc);
    winners += rc == 0;
  }
  ck_assert_int_eq(winners, 1);

  char err[512];
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  for (int i = 0; i < N; i++) {
    char id[64];
    snprintf(id, sizeof id, "experience.writer_%d", i);
    ck_assert_msg(mi_ckb_find(c, id) != NULL, "%s missing", id);
  }
  ck_assert_ptr_nonnull(mi_ckb_find(c, "experience.contended"));
  diags d = {0};
  ck_assert_msg(mi_ckb_validate(c, collect, &d) == 0, "%s", d.text);
  mi_ckb_close(c);
  char sub[4200];
  snprintf(sub, sizeof sub, "%s/experience", dir);
  ck_assert_int_eq(count_temp_files(sub), 0);
  remove_tree(dir);
}
END_TEST

/* A writer killed mid-write (the real code path, stopped by a test hook
 * before the rename) leaves a partial temp file: the old entry is intact,
 * readers ignore the temp file, and the next writer removes it. */
static void crash_during(const char *point) {
  char *dir = copy_ckb();
  char path[4200], sub[4200];
  snprintf(path, sizeof path, "%s/operators/rmsnorm.json", dir);
  snprintf(sub, sizeof sub, "%s/operators", dir);
  json_t *before = mi_test_json_at(dir, "operators/rmsnorm.json");

  pid_t pid = fork();
  if (pid == 0) {
    setenv("MI_CKB_TEST_CRASH", point, 1);
    json_t *e = mi_test_json_at(dir, "operators/rmsnorm.json");
    json_object_set_new(e, "version", json_string("99.0.0"));
    json_object_set_new(e, "summary", json_string("the update that never landed"));
    mi_ckb_put(dir, e, MI_CKB_UPDATE, NULL, NULL);
    _exit(0); /* not reached: the hook exits with 86 */
  }
  ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
  ck_assert_int_eq(child_exit_code(pid, "crashing writer"), 86);
  ck_assert_int_eq(count_temp_files(sub), 1);

  json_t *after = mi_test_json_at(dir, "operators/rmsnorm.json");
  ck_assert(json_equal(before, after));
  json_decref(after);
  diags d;
  validate_dir(dir, &d);
  ck_assert_msg(d.n == 0, "%s", d.text);

  /* The next writer (any entry of that folder) cleans up and lands. */
  json_object_set_new(before, "version", json_string("99.0.1"));
  ck_assert_int_eq(mi_ckb_put(dir, before, MI_CKB_UPDATE, NULL, NULL), 0);
  ck_assert_int_eq(count_temp_files(sub), 0);
  after = mi_test_json_at(dir, "operators/rmsnorm.json");
  ck_assert_str_eq(json_string_value(json_object_get(after, "version")), "99.0.1");
  json_decref(after);
  json_decref(before);
  remove_tree(dir);
}

START_TEST(crash_mid_write) { crash_during("mid_write"); }
END_TEST
START_TEST(crash_before_rename) { crash_during("before_rename"); }
END_TEST

START_TEST(cli_add_update) {
  char *dir = copy_ckb();
  char file[4200], cmd[9000];
  snprintf(file, sizeof file, "%s/../mi-ckb-new-%d.json", dir, (int)getpid());
  json_t *e = experience("from_cli", "0.1.0");
  ck_assert_int_eq(json_dump_file(e, file, 0), 0);
  const char *b = getenv("MI_BUILD_DIR");
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' add '%s' 2>/dev/null", b, dir, file);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_ne(system(cmd), 0); /* second add refused */
  json_object_set_new(e, "version", json_string("0.2.0"));
  ck_assert_int_eq(json_dump_file(e, file, 0), 0);
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' update '%s' 2>/dev/null", b, dir, file);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' show experience.from_cli | grep -q '\"0.2.0\"'", b, dir);
  ck_assert_int_eq(system(cmd), 0);
  unlink(file);
  json_decref(e);
  remove_tree(dir);
}
END_TEST

/* Hostile ids, sizes and schema folders: refused before any write, one line each. */
static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) n += de->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

START_TEST(add_refuses_hostile_ids) {
  char *dir = copy_ckb();
  char exp[4200];
  snprintf(exp, sizeof exp, "%s/experience", dir);
  int before = count_files(exp);
  static const struct {
    const char *name, *why;
  } bad[] = {
      {"x\n", "NAME has control character 0x0a at offset 1"},
      {"a/../../../escaped", "NAME has '/' at offset 1"},
      {"..", "NAME has '.' at offset 0"},
      {"Upper", "NAME has 'U' at offset 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    diags d = {0};
    json_t *e = experience(bad[i].name, "1.0.0");
    ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), -1);
    ck_assert_int_eq(d.n, 1);
    expect_line(&d, "(new entry)", "is not KIND.NAME with NAME a file name ([a-z0-9][a-z0-9._-]{0,127})");
    expect_line(&d, "(new entry)", bad[i].why);
    ck_assert_ptr_eq(strchr(d.text, '\n'), d.text + strlen(d.text) - 1); /* one line */
    json_decref(e);
  }
  /* 129 characters: too long */
  char longname[140];
  memset(longname, 'a', 129);
  longname[129] = 0;
  diags d = {0};
  json_t *e = experience("x", "1.0.0");
  char longid[200];
  snprintf(longid, sizeof longid, "experience.%s", longname);
  json_object_set_new(e, "id", json_string(longid));
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), -1);
  expect_line(&d, "(new entry)", "NAME is 129 bytes long (at most 128)");
  json_decref(e);
  ck_assert_int_eq(count_files(exp), before);
  ck_assert_int_eq(count_temp_files(exp), 0);
  /* The schema's id pattern no longer takes "$" as "before a final newline". */
  char nl[4300];
  snprintf(nl, sizeof nl, "%s/nl.json", exp);
  e = experience("nl\n", "1.0.0");
  ck_assert_int_eq(json_dump_file(e, nl, 0), 0);
  json_decref(e);
  validate_dir(dir, &d);
  expect_line(&d, "experience/nl.json", "field 'id' must be an id of the form experience.NAME");
  remove_tree(dir);
}
END_TEST

START_TEST(add_refuses_oversized_entry) {
  char *dir = copy_ckb();
  json_t *e = experience("huge", "1.0.0");
  size_t n = (size_t)5 << 20;
  char *big = malloc(n + 1);
  memset(big, 'x', n);
  big[n] = 0;
  json_object_set_new(e, "fix", json_string(big));
  free(big);
  diags d = {0};
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), -1);
  ck_assert_int_eq(d.n, 1);
  expect_line(&d, "experience/huge.json", "bytes as written, over the 4194304 byte limit for a CKB file");
  char p[4300];
  snprintf(p, sizeof p, "%s/experience/huge.json", dir);
  ck_assert_int_ne(access(p, F_OK), 0);
  /* mi-ckb add reads at most the limit: a 100 MB file is refused unparsed. */
  char file[4300], cmd[9000], out[2048] = "";
  snprintf(file, sizeof file, "%s/../mi-ckb-huge-%d.json", dir, (int)getpid());
  FILE *f = fopen(file, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(truncate(file, 100 << 20), 0);
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-ckb' --ckb '%s' add '%s' 2>&1; echo \"rc=$?\"", getenv("MI_BUILD_DIR"), dir, file);
  mi_test_popen_out(cmd, out, sizeof out);
  ck_assert_msg(strstr(out, ": larger than 4194304 bytes, the limit for a CKB file\nrc=1"), "%s", out);
  unlink(file);
  json_decref(e);
  remove_tree(dir);
}
END_TEST

START_TEST(schema_dir_outside_ckb) {
  char *dir = copy_ckb();
  json_t *j = mi_test_json_at(dir, "schemas/experience.json");
  json_object_set_new(j, "dir", json_string("../x"));
  save(dir, "schemas/experience.json", j);
  char err[512];
  ck_assert_ptr_null(mi_ckb_open(dir, err, sizeof err));
  ck_assert_msg(strstr(err, "schemas/experience.json: field 'dir' must be one folder name ([a-z0-9][a-z0-9._-]*): '../x' has '.' at offset 0"), "%s", err);
  /* add refuses too (it opens the store first), and nothing appears beside the CKB */
  diags d = {0};
  json_t *e = experience("out", "1.0.0");
  ck_assert_int_eq(mi_ckb_put(dir, e, MI_CKB_ADD, collect, &d), -1);
  expect_line(&d, "schemas/experience.json", "field 'dir' must be one folder name");
  char x[4300];
  snprintf(x, sizeof x, "%s/../x", dir);
  ck_assert_int_ne(access(x, F_OK), 0);
  json_decref(e);
  remove_tree(dir);
}
END_TEST

/* ---------- coverage ---------- */

static char *model_dir(const char *arch) {
  char *dir = strdup("/tmp/mi-ckb-model.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char cfg[256];
  snprintf(cfg, sizeof cfg, "{\"architectures\": [\"%s\"], \"torch_dtype\": \"bfloat16\"}\n", arch);
  write_text(dir, "config.json", cfg);
  return dir;
}

static char *make_model(const char *shape);

START_TEST(coverage_qwen3_cpu) {
  char err[512];
  mi_ckb *c = mi_ckb_open(src_ckb, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  /* a config that names the architecture and nothing else: the contract's
   * required fields are gaps, and so are the weights it has none of */
  char *m = model_dir("Qwen3ForCausalLM");
  json_t *r;
  ck_assert_int_eq(mi_ckb_coverage(c, m, "cpu", &r, err, sizeof err), 1);
  char *s = json_dumps(r, 0);
  ck_assert_msg(strstr(s, "config field 'hidden_size' is absent; model.qwen3 requires it") &&
                    strstr(s, "weights: cannot read them to compare"), "%s", s);
  free(s);
  json_decref(r);
  /* a whole checkpoint: covered */
  char *whole = make_model("tiny"), mdir[4200];
  snprintf(mdir, sizeof mdir, "%s/m", whole);
  int rc = mi_ckb_coverage(c, mdir, "cpu", &r, err, sizeof err);
  s = json_dumps(r, 0);
  ck_assert_msg(rc == 0, "%s", s);
  free(s);
  remove_tree(whole);
  ck_assert_str_eq(json_string_value(json_object_get(r, "model_contract")), "model.qwen3@1.5.3");
  ck_assert_str_eq(json_string_value(json_object_get(r, "platform_contract")), "platform.cpu@1.12.0");
  ck_assert_int_ge(json_array_size(json_object_get(r, "operators")), 8);
  ck_assert_int_ge(json_array_size(json_object_get(r, "tests")), 6);
  json_decref(r);

  /* An unknown platform, an unknown architecture: not covered, and why. */
  ck_assert_int_eq(mi_ckb_coverage(c, m, "tpu9", &r, err, sizeof err), 1);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "missing"), 0)),
                   "platform contract for 'tpu9'");
  json_decref(r);
  char *m2 = model_dir("GPTNeoXForCausalLM"); /* a family the CKB has not absorbed */
  ck_assert_int_eq(mi_ckb_coverage(c, m2, "cpu", &r, err, sizeof err), 1);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "missing"), 0)),
                   "model contract for architecture GPTNeoXForCausalLM");
  json_decref(r);
  /* No config.json: an error naming the file. */
  ck_assert_int_eq(mi_ckb_coverage(c, "/nonexistent", "cpu", &r, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent/config.json"));
  remove_tree(m);
  remove_tree(m2);
  mi_ckb_close(c);
}
END_TEST

/* ---------- weight files against the model contract ---------- */

static char *make_model(const char *shape) {
  char *dir = strdup("/tmp/mi-ckb-w.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "'%s/bin/mi-mkmodel' --shape %s --seed 2 --out '%s/m' >/dev/null 2>&1",
           getenv("MI_BUILD_DIR"), shape, dir);
  ck_assert_int_eq(system(cmd), 0);
  return dir;
}

static int weights_problems(mi_ckb *c, const char *dir, json_t **r) {
  char m[4200], err[1024];
  snprintf(m, sizeof m, "%s/m", dir);
  int n = mi_ckb_check_weights(c, m, r, err, sizeof err);
  ck_assert_msg(n >= 0, "%s", err);
  return n;
}

static int has_problem(json_t *r, const char *text) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(r, "problems"), i, v) if (strstr(json_string_value(v), text)) return 1;
  return 0;
}

START_TEST(weights_against_contract) {
  char err[512];
  mi_ckb *c = mi_ckb_open(src_ckb, err, sizeof err);
  ck_assert_ptr_nonnull(c);
  const char *shapes[] = {"tiny", "tiny-untied"};
  for (int s = 0; s < 2; s++) {
    char *dir = make_model(shapes[s]);
    json_t *r;
    ck_assert_int_eq(weights_problems(c, dir, &r), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "expected")),
                     json_integer_value(json_object_get(r, "found")));
    json_decref(r);
    /* The config no longer matches the files: each change is named. */
    char cfgp[4200];
    snprintf(cfgp, sizeof cfgp, "%s/m/config.json", dir);
    json_t *cfg = json_load_file(cfgp, 0, NULL);
    int64_t layers = json_integer_value(json_object_get(cfg, "num_hidden_layers"));
    json_object_set_new(cfg, "num_hidden_layers", json_integer(layers - 1));
    json_object_set_new(cfg, "tie_word_embeddings", json_boolean(s == 1)); /* flipped */
    json_object_set_new(cfg, "head_dim", json_integer(json_integer_value(json_object_get(cfg, "head_dim")) * 2));
    ck_assert_int_eq(json_dump_file(cfg, cfgp, 0), 0);
    json_decref(cfg);
    ck_assert_int_gt(weights_problems(c, dir, &r), 0);
    char want[200];
    snprintf(want, sizeof want, "unexpected weight 'model.layers.%lld.input_layernorm.weight'", (long long)layers - 1);
    ck_assert_msg(has_problem(r, want), "%s", json_dumps(r, 0));
    ck_assert(has_problem(r, s == 0 ? "missing weight 'lm_head.weight'" : "unexpected weight 'lm_head.weight'"));
    ck_assert(has_problem(r, "the contract says") && has_problem(r, "num_attention_heads * head_dim"));
    json_decref(r);
    remove_tree(dir);
  }
  mi_ckb_close(c);
}
END_TEST

/* Found by fuzz/fuzz_ckb_entry.c: a field name carrying a newline split the
 * diagnostic over two lines (control characters now print as spaces). */
BROKEN(field_name_with_newline, "platforms/cpu.json",
       json_object_set_new(j, "col\nour", json_string("blue")), "platforms/cpu.json",
       "unknown field 'col our'")

/* A constraint nested past the C stack's reach is an error (fuzz_expr.c). */
static const char *deep_parens(void) {
  static char buf[200003];
  memset(buf, '(', 100000);
  buf[100000] = '1';
  memset(buf + 100001, ')', 100000);
  buf[200001] = 0;
  return buf;
}
BROKEN(expression_too_deep, "operators/attention.json",
       json_array_set_new(json_object_get(j, "constraints"), 0, json_string(deep_parens())),
       "operators/attention.json", "nested too deeply")

/* An entry file over the size limit is a load error, not a multi-GB parse
 * (a sparse file: no disk is used). */
START_TEST(entry_file_too_big) {
  char *dir = copy_ckb();
  char p[4200];
  snprintf(p, sizeof p, "%s/operators/huge.json", dir);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(truncate(p, 5 << 20), 0);
  diags d;
  validate_dir(dir, &d);
  expect_line(&d, "operators/huge.json", "file is 5242880 bytes, over the 4194304 byte limit");
  remove_tree(dir);
}
END_TEST

/* A FIFO in place of an entry is a load error naming it, not a wait. */
START_TEST(entry_is_a_fifo) {
  char *dir = copy_ckb();
  char p[4200];
  snprintf(p, sizeof p, "%s/operators/fifo.json", dir);
  ck_assert_int_eq(mkfifo(p, 0644), 0);
  alarm(60);
  diags d;
  validate_dir(dir, &d);
  alarm(0);
  expect_line(&d, "operators/fifo.json", "not a regular file (a FIFO)");
  remove_tree(dir);
}
END_TEST

/* ---------- expressions and versions ---------- */

static int lk(void *user, const char *name, size_t len, int64_t *out) {
  (void)user;
  if (len == 1 && name[0] == 'T') return *out = 5, 0;
  if (len == 4 && !strncmp(name, "pos0", 4)) return *out = 37, 0;
  return -1;
}

START_TEST(expressions) {
  int64_t v;
  char err[256];
  ck_assert_int_eq(mi_expr_eval("pos0 + T", lk, NULL, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 42);
  ck_assert_int_eq(mi_expr_eval("(T * 2 + 1) % 4 == 3", lk, NULL, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 1);
  ck_assert_int_eq(mi_expr_eval("-T * 3 >= -15", lk, NULL, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 1);
  ck_assert_int_eq(mi_expr_eval("T +", lk, NULL, &v, err, sizeof err), -1);
  ck_assert_int_eq(mi_expr_eval("Hq % Hkv", lk, NULL, &v, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "unknown name 'Hq'"));
  ck_assert_int_eq(mi_expr_eval("T / (T - 5)", lk, NULL, &v, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "division by zero"));
  ck_assert_int_eq(mi_expr_eval("99999999999999999999", lk, NULL, &v, err, sizeof err), -1);
}
END_TEST

/* Hostile expressions (found by fuzz/fuzz_expr.c): deep nesting is an
 * error, not a stack overflow; INT64_MIN / -1 is an overflow error, not UB;
 * a newline in the expression does not reach the one-line message. */
START_TEST(expressions_hostile) {
  int64_t v;
  char err[256];
  size_t n = 300000;
  char *deep = malloc(2 * n + 2);
  ck_assert_ptr_nonnull(deep);
  memset(deep, '(', n);
  deep[n] = '1';
  memset(deep + n + 1, ')', n);
  deep[2 * n + 1] = 0;
  ck_assert_int_eq(mi_expr_eval(deep, lk, NULL, &v, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "nested too deeply"));
  ck_assert_int_eq(mi_expr_names(deep, NULL, NULL, err, sizeof err), -1);
  memset(deep, '-', 2 * n);
  deep[2 * n] = '1';
  ck_assert_int_eq(mi_expr_eval(deep, lk, NULL, &v, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "nested too deeply"));
  free(deep);
  /* 256 levels still work */
  char ok[600];
  memset(ok, '(', 255);
  ok[255] = '7';
  memset(ok + 256, ')', 255);
  ok[511] = 0;
  ck_assert_int_eq(mi_expr_eval(ok, lk, NULL, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 7);
  ck_assert_int_eq(mi_expr_eval("(-9223372036854775807 - 1) / -1", lk, NULL, &v, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "overflow"));
  ck_assert_int_eq(mi_expr_eval("(-9223372036854775807 - 1) % -1", lk, NULL, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 0);
  ck_assert_int_eq(mi_expr_eval("-(-9223372036854775807 - 1)", lk, NULL, &v, err, sizeof err), -1);
  ck_assert_int_eq(mi_expr_eval("T +\n", lk, NULL, &v, err, sizeof err), -1);
  ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(versions) {
  ck_assert_int_lt(mi_ckb_version_cmp("1.0.0", "1.0.1"), 0);
  ck_assert_int_lt(mi_ckb_version_cmp("1.9.0", "1.10.0"), 0);
  ck_assert_int_lt(mi_ckb_version_cmp("2.0.0-rc1", "2.0.0"), 0);
  ck_assert_int_eq(mi_ckb_version_cmp("3.2.1", "3.2.1"), 0);
  ck_assert_int_gt(mi_ckb_version_cmp("1.0.0", "bogus"), 0);
}
END_TEST

int main(void) {
  Suite *s = mi_check_suite(
      "ckb", "store", 60, setup, NULL,
      MI_CHECK_TESTS(
          real_ckb_is_valid, cli_validate_and_show, missing_field, missing_nested_field,
          tolerance_wrong_type, tolerance_unknown_dtype, dangling_reference, reference_wrong_kind,
          model_step_dangling, layout_without_config_slot, layout_extra_weight_not_skipped, unknown_kind, bad_id_format, id_file_mismatch, version_not_semver,
          version_wrong_type, provenance_bad_enum, unknown_field, case_unknown_arg,
          case_missing_arg, shape_unknown_name, generator_for_output, alias_to_output,
          expression_syntax, model_shape_unknown_config, duplicate_ids, invalid_json,
          missing_kind_and_non_object, add_then_update, concurrent_writers, crash_mid_write,
          crash_before_rename, cli_add_update, add_refuses_hostile_ids, add_refuses_oversized_entry,
          schema_dir_outside_ckb, coverage_qwen3_cpu, weights_against_contract, expressions,
          expressions_hostile, field_name_with_newline, expression_too_deep, entry_file_too_big,
          entry_is_a_fifo, versions));
  return mi_check_run(s);
}
