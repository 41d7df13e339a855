/* Loader and registry: every broken test plugin is rejected with the right
 * reason and one log line naming the file, the good one loads and computes,
 * required vs optional, plugins.conf resolution, and the search order.
 * Test plugins live in $MI_BUILD_DIR/tests/plugins (tests/loader/plugins/).
 * The test plugins use major+1 and minor+5; the expected texts follow
 * MI_ABI_MINOR. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/compat.h"
#include "core/runtime/host.h"

#define MI_STR2(x) #x
#define MI_STR(x) MI_STR2(x)
#include "core/runtime/loader.h"
#include "mi/platform.h"
#include "test_helpers.h"
#include "tests/util/check_main.h"

static char g_plugins[PATH_MAX]; /* $MI_BUILD_DIR/tests/plugins */
static char g_tmp[PATH_MAX];     /* per-test scratch dir */

static void setup(void) {
  const char *b = getenv("MI_BUILD_DIR");
  ck_assert_msg(b != NULL, "MI_BUILD_DIR not set (run through ctest)");
  snprintf(g_plugins, sizeof g_plugins, "%s/tests/plugins", b);
  snprintf(g_tmp, sizeof g_tmp, "/tmp/mi-loader-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_tmp));
  unsetenv("MI_PLUGIN_PATH");
  mi_log_set_level(MI_LOG_INFO);
}

static void teardown(void) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  ck_assert_int_eq(system(cmd), 0);
}

static void plugin_path(char *out, size_t n, const char *file) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/%s", g_plugins, file);
  ck_assert_msg(realpath(p, out) != NULL, "missing test plugin %s", p);
  (void)n;
}

/* Runs a kernel through the interface the way a model would: device buffers,
 * h2d copies, kernel, d2h copy. Compares with float64 references. */
static void check_platform_computes(const mi_platform_iface *pf, void *ctx) {
  ck_assert(mi_platform_has(pf, add));
  ck_assert(mi_platform_has(pf, matmul));
  ck_assert(mi_platform_has(pf, buffer_alloc));
  enum { N = 1000, M = 3, NN = 5, K = 7 };
  float a[N], b[N], y[N];
  srand(7);
  for (int i = 0; i < N; i++) {
    a[i] = (float)rand() / RAND_MAX * 8 - 4;
    b[i] = (float)rand() / RAND_MAX * 8 - 4;
  }
  mi_buffer *ba, *bb, *by;
  ck_assert_int_eq(pf->buffer_alloc(ctx, sizeof a, &ba), 0);
  ck_assert_int_eq(pf->buffer_alloc(ctx, sizeof b, &bb), 0);
  ck_assert_int_eq(pf->buffer_alloc(ctx, sizeof y, &by), 0);
  float *da = pf->buffer_ptr(ctx, ba), *db = pf->buffer_ptr(ctx, bb), *dy = pf->buffer_ptr(ctx, by);
  /* the test plugins' "device" is host memory, so plain memcpy stands in for h2d */
  memcpy(da, a, sizeof a);
  memcpy(db, b, sizeof b);
  ck_assert_int_eq(pf->add(ctx, NULL, dy, da, db, N), 0);
  memcpy(y, dy, sizeof y);
  /* IEEE addition is correctly rounded: the float64 sum rounded once is exact */
  for (int i = 0; i < N; i++) ck_assert_float_eq(y[i], (float)((double)a[i] + (double)b[i]));

  float x[M * K], w[NN * K], out[M * NN];
  for (int i = 0; i < M * K; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < NN * K; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
  ck_assert_int_eq(pf->matmul(ctx, NULL, dy, x, w, MI_DTYPE_F32, M, NN, K), 0);
  memcpy(out, dy, sizeof out);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < NN; n++) {
      double ref = 0;
      for (int k = 0; k < K; k++) ref += (double)x[m * K + k] * w[n * K + k];
      ck_assert_double_eq_tol(out[m * NN + n], ref, 1e-5);
    }
  pf->buffer_free(ctx, ba);
  pf->buffer_free(ctx, bb);
  pf->buffer_free(ctx, by);
}

/* ---------- each broken plugin on its own ---------- */

static const struct {
  const char *file;
  mi_plugin_status status;
  const char *words[2];
  int init_ran; /* init succeeded and a later check failed: fini must have run */
} broken[] = {
    {"libmi-bad-text.so", MI_PLUGIN_REJECTED, {"not an ELF file", "invalid ELF header"}, 0},
    {"libmi-bad-nosym.so", MI_PLUGIN_REJECTED,
     {"no descriptor: symbol mi_plugin_get_descriptor not exported"}, 0},
    {"libmi-bad-nulldesc.so", MI_PLUGIN_REJECTED, {"no descriptor", "returned NULL"}, 0},
    {"libmi-bad-major.so", MI_PLUGIN_REJECTED, {"ABI major 2, this core speaks 1"}, 0},
    {"libmi-bad-minor.so", MI_PLUGIN_REJECTED,
     {"built for ABI 1.", ", this core is 1." MI_STR(MI_ABI_MINOR) ": upgrade MetaInfer"}, 0},
    {"libmi-bad-size.so", MI_PLUGIN_REJECTED,
     {"struct_size 16", "smaller than the ABI 1.0 descriptor"}, 0},
    {"libmi-bad-kind.so", MI_PLUGIN_REJECTED, {"kind 9 is not a known plugin kind"}, 0},
    {"libmi-bad-noinit.so", MI_PLUGIN_REJECTED, {"descriptor member init is NULL"}, 0},
    {"libmi-bad-noiface.so", MI_PLUGIN_REJECTED, {"descriptor member get_iface is NULL"}, 0},
    {"libmi-bad-noname.so", MI_PLUGIN_REJECTED, {"descriptor member name is NULL"}, 0},
    {"libmi-bad-initfail.so", MI_PLUGIN_REJECTED,
     {"init failed: cannot open /dev/fake0: no such device"}, 0},
    {"libmi-bad-probe0.so", MI_PLUGIN_UNSUITED, {"probe scored 0: no fake accelerator found"}, 0},
    {"libmi-bad-ifacenull.so", MI_PLUGIN_REJECTED, {"get_iface returned NULL"}, 1},
    {"libmi-bad-ifacesmall.so", MI_PLUGIN_REJECTED,
     {"platform interface struct_size 8", "smaller than the ABI 1." MI_STR(MI_ABI_MINOR) " interface"}, 1},
};
#define N_BROKEN ((int)(sizeof broken / sizeof broken[0]))

/* Loads the built plugin `file` (its path into path[PATH_MAX]) with option
 * fini_mark=MARK, the file its fini writes "fini\n" to (g_tmp/fini, into
 * mark[PATH_MAX + 16]); what the loader logged meanwhile into *log. */
static mi_plugin *load_marked(const char *file, char *path, char *mark, char **log) {
  plugin_path(path, PATH_MAX, file);
  snprintf(mark, PATH_MAX + 16, "%s/fini", g_tmp);
  mi_kv kv[] = {{"fini_mark", mark}};
  mi_options opts = {kv, 1};
  capture cap;
  capture_begin(&cap);
  mi_plugin *p = mi_plugin_load_file(path, &opts);
  *log = capture_end(&cap);
  return p;
}

START_TEST(broken_plugin_is_rejected_with_reason) {
  char path[PATH_MAX], mark[PATH_MAX + 16], *log;
  mi_plugin *p = load_marked(broken[_i].file, path, mark, &log);

  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(p->status, broken[_i].status);
  ck_assert_ptr_nonnull(p->reason);
  for (int w = 0; w < 2 && broken[_i].words[w]; w++)
    ck_assert_msg(strstr(p->reason, broken[_i].words[w]), "%s: reason '%s' lacks '%s'",
                  broken[_i].file, p->reason, broken[_i].words[w]);
  ck_assert_ptr_null(strchr(p->reason, '\n'));
  ck_assert_str_eq(p->path, path);
  ck_assert_ptr_null(p->iface);
  ck_assert_ptr_null(p->ctx);

  /* exactly one log line: "... plugin FILE: REASON" */
  ck_assert_msg(count_lines(log) == 1, "%s: log is not one line:\n%s", broken[_i].file, log);
  char want[PATH_MAX + 1024];
  snprintf(want, sizeof want, "plugin %s: %s\n", path, p->reason);
  ck_assert_msg(strstr(log, want), "%s: log '%s' lacks '%s'", broken[_i].file, log, want);
  free(log);

  /* init ran and was undone exactly when a check after init failed */
  char *m = read_text(mark);
  ck_assert_str_eq(m, broken[_i].init_ran ? "fini\n" : "");
  free(m);
  mi_plugin_unload(p);
  m = read_text(mark);
  ck_assert_str_eq(m, broken[_i].init_ran ? "fini\n" : ""); /* never twice */
  free(m);
}
END_TEST

START_TEST(missing_and_non_regular_files) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/libmi-nothere.so", g_tmp);
  capture cap;
  capture_begin(&cap);
  mi_plugin *p = mi_plugin_load_file(path, NULL);
  mi_plugin *d = mi_plugin_load_file(g_tmp, NULL);
  char *log = capture_end(&cap);
  ck_assert_int_eq(p->status, MI_PLUGIN_REJECTED);
  ck_assert_ptr_nonnull(strstr(p->reason, "cannot open: No such file"));
  ck_assert_int_eq(d->status, MI_PLUGIN_REJECTED);
  ck_assert_str_eq(d->reason, "not a regular file");
  ck_assert_int_eq(count_lines(log), 2);
  ck_assert_ptr_nonnull(strstr(log, "libmi-nothere.so: cannot open"));
  free(log);
  mi_plugin_unload(p);
  mi_plugin_unload(d);
  mi_plugin_unload(NULL);
}
END_TEST

/* ---------- the good plugin ---------- */

START_TEST(good_plugin_loads_and_computes) {
  char path[PATH_MAX], mark[PATH_MAX + 16], *log;
  mi_plugin *p = load_marked("libmi-good.so", path, mark, &log);
  ck_assert_str_eq(log, ""); /* nothing to say at info level */
  free(log);
  ck_assert_int_eq(p->status, MI_PLUGIN_LOADED);
  ck_assert_ptr_null(p->reason);
  ck_assert_int_eq(p->score, 10);
  ck_assert_int_eq(mi_plugin_kind_of(p), MI_PLUGIN_PLATFORM);
  ck_assert_str_eq(mi_plugin_name(p), "good");
  ck_assert_str_eq(mi_plugin_version(p), "1.0.0");
  ck_assert_ptr_nonnull(p->desc);
  ck_assert_str_eq(p->origin, "direct");
  const mi_platform_iface *pf = p->iface;
  ck_assert_uint_eq(pf->struct_size, sizeof(mi_platform_iface));
  ck_assert(!mi_platform_has(pf, rope)); /* NULL member = not provided */
  check_platform_computes(pf, p->ctx);
  char *m = read_text(mark);
  ck_assert_str_eq(m, ""); /* alive: fini not called yet */
  free(m);
  mi_plugin_unload(p);
  m = read_text(mark);
  ck_assert_str_eq(m, "fini\n");
  free(m);
}
END_TEST

START_TEST(probe_score_comes_from_options_and_is_clamped) {
  char path[PATH_MAX];
  plugin_path(path, sizeof path, "libmi-good.so");
  static const struct {
    const char *score;
    int want;
    mi_plugin_status st;
  } cases[] = {{"42", 42, MI_PLUGIN_LOADED}, {"1000", 100, MI_PLUGIN_LOADED},
               {"0", 0, MI_PLUGIN_UNSUITED}, {"-5", 0, MI_PLUGIN_UNSUITED}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mi_kv kv[] = {{"score", cases[i].score}};
    mi_options o = {kv, 1};
    capture cap;
    capture_begin(&cap);
    mi_plugin *p = mi_plugin_load_file(path, &o);
    free(capture_end(&cap));
    ck_assert_int_eq(p->score, cases[i].want);
    ck_assert_int_eq(p->status, cases[i].st);
    if (cases[i].st == MI_PLUGIN_UNSUITED)
      ck_assert_str_eq(p->reason, "probe scored 0: (the plugin gave no reason)");
    mi_plugin_unload(p);
  }
}
END_TEST

/* ---------- plugins.conf: required vs optional, resolution ---------- */

static mi_registry *load_conf(const char *conf_text, const mi_kv *extra, size_t n_extra,
                              int *fatal, char *err, size_t err_len, char **log) {
  char conf[PATH_MAX + 32], exe[PATH_MAX + 32];
  snprintf(conf, sizeof conf, "%s/plugins.conf", g_tmp);
  snprintf(exe, sizeof exe, "%s/mi-fake", g_tmp);
  write_text(conf, conf_text);
  mi_loader_opts o = {.conf_path = conf, .exe_path = exe, .extra_opts = extra,
                      .n_extra_opts = n_extra};
  capture cap;
  capture_begin(&cap);
  mi_registry *r = mi_registry_load(&o, fatal, err, err_len);
  char *l = capture_end(&cap);
  if (log) *log = l;
  else free(l);
  ck_assert_ptr_nonnull(r);
  return r;
}

START_TEST(required_broken_plugin_is_fatal) {
  char text[4 * PATH_MAX], err[1024], init_path[PATH_MAX];
  plugin_path(init_path, sizeof init_path, "libmi-bad-initfail.so");
  snprintf(text, sizeof text,
           "platform good %s/libmi-good.so required\n"
           "platform bad-initfail %s/libmi-bad-initfail.so required\n"
           "platform bad-probe0 %s/libmi-bad-probe0.so optional\n",
           g_plugins, g_plugins, g_plugins);
  int fatal = -1;
  char *log;
  mi_registry *r = load_conf(text, NULL, 0, &fatal, err, sizeof err, &log);
  ck_assert_int_eq(fatal, 1);
  char want[2 * PATH_MAX];
  snprintf(want, sizeof want,
           "%s: required platform plugin 'bad-initfail' not usable: init failed: cannot open "
           "/dev/fake0: no such device", init_path);
  ck_assert_str_eq(err, want);
  /* the failure reaches the user once: as the fatal line above, which the
   * CLI prints; the loader does not also log it as an error */
  ck_assert_ptr_null(strstr(log, "error: plugin "));
  free(log);
  ck_assert_uint_eq(mi_registry_count(r), 3);
  ck_assert_str_eq(mi_registry_at(r, 1)->origin + strlen(mi_registry_at(r, 1)->origin) - 14,
                   "plugins.conf:2");
  ck_assert_int_eq(mi_registry_at(r, 1)->required, 1);
  ck_assert_int_eq(mi_registry_at(r, 2)->status, MI_PLUGIN_UNSUITED);
  mi_registry_free(r);

  /* a required plugin that is unsuited here is fatal too */
  snprintf(text, sizeof text, "platform bad-probe0 %s/libmi-bad-probe0.so required\n", g_plugins);
  r = load_conf(text, NULL, 0, &fatal, err, sizeof err, NULL);
  ck_assert_int_eq(fatal, 1);
  ck_assert_ptr_nonnull(strstr(err, "libmi-bad-probe0.so: required platform plugin 'bad-probe0' "
                                    "not usable: probe scored 0: no fake accelerator found"));
  mi_registry_free(r);
}
END_TEST

START_TEST(optional_broken_plugins_are_skipped) {
  char text[16 * PATH_MAX], err[1024] = "x";
  int off = snprintf(text, sizeof text, "platform good %s/libmi-good.so required\n", g_plugins);
  for (int i = 0; i < N_BROKEN; i++)
    off += snprintf(text + off, sizeof text - (size_t)off, "platform b%d %s/%s optional\n", i,
                    g_plugins, broken[i].file);
  int fatal = -1;
  mi_registry *r = load_conf(text, NULL, 0, &fatal, err, sizeof err, NULL);
  ck_assert_int_eq(fatal, 0);
  ck_assert_str_eq(err, "");
  ck_assert_uint_eq(mi_registry_count(r), 1 + N_BROKEN);
  for (size_t i = 1; i < mi_registry_count(r); i++)
    ck_assert_int_ne(mi_registry_at(r, i)->status, MI_PLUGIN_LOADED);
  /* still usable */
  mi_plugin *g = mi_registry_best(r, MI_PLUGIN_PLATFORM, NULL);
  ck_assert_ptr_nonnull(g);
  ck_assert_str_eq(mi_plugin_name(g), "good");
  ck_assert_ptr_eq(mi_registry_best(r, MI_PLUGIN_PLATFORM, "good"), g);
  ck_assert_ptr_null(mi_registry_best(r, MI_PLUGIN_PLATFORM, "cpu"));
  ck_assert_ptr_null(mi_registry_best(r, MI_PLUGIN_MODEL, NULL));
  check_platform_computes(g->iface, g->ctx);
  mi_registry_free(r);
}
END_TEST

START_TEST(conf_kind_and_name_must_match_the_file) {
  char text[2 * PATH_MAX], err[1024];
  snprintf(text, sizeof text, "model qwen3 %s/libmi-good.so required\n"
           "platform other %s/libmi-good.so optional\n", g_plugins, g_plugins);
  int fatal;
  mi_registry *r = load_conf(text, NULL, 0, &fatal, err, sizeof err, NULL);
  ck_assert_int_eq(fatal, 1);
  ck_assert_ptr_nonnull(strstr(err, "libmi-good.so: required model plugin 'qwen3' not usable: "
                                    "plugins.conf says model 'qwen3', file is platform 'good'"));
  ck_assert_str_eq(mi_registry_at(r, 1)->reason,
                   "plugins.conf says platform 'other', file is platform 'good'");
  mi_registry_free(r);
}
END_TEST

START_TEST(conf_paths_and_missing_files) {
  /* no '/': searched; 'sub/x': relative to the conf's directory */
  char sub[PATH_MAX + 8], dst[PATH_MAX + 32], src[PATH_MAX], err[1024];
  snprintf(sub, sizeof sub, "%s/sub", g_tmp);
  mkdir_p(sub);
  plugin_path(src, sizeof src, "libmi-good.so");
  snprintf(dst, sizeof dst, "%s/libmi-good.so", sub);
  copy_file(src, dst);
  int fatal;
  char *log;
  mi_registry *r = load_conf("platform good sub/libmi-good.so required\n"
                             "platform cpu libmi-nothere.so required\n",
                             NULL, 0, &fatal, err, sizeof err, &log);
  ck_assert_int_eq(mi_registry_at(r, 0)->status, MI_PLUGIN_LOADED);
  char real[PATH_MAX];
  ck_assert_str_eq(mi_registry_at(r, 0)->path, realpath(dst, real));
  ck_assert_int_eq(fatal, 1);
  ck_assert_ptr_nonnull(strstr(err, "libmi-nothere.so: required platform plugin 'cpu' not usable: "
                                    "not found in the search path ("));
  ck_assert_ptr_nonnull(strstr(log, "plugin libmi-nothere.so: not found"));
  free(log);
  mi_registry_free(r);
}
END_TEST

START_TEST(extra_options_override_conf_options) {
  char text[PATH_MAX + 128], err[1024];
  snprintf(text, sizeof text, "platform good %s/libmi-good.so optional score=20\n", g_plugins);
  int fatal;
  mi_registry *r = load_conf(text, NULL, 0, &fatal, err, sizeof err, NULL);
  ck_assert_int_eq(mi_registry_at(r, 0)->score, 20);
  mi_registry_free(r);
  mi_kv extra[] = {{"score", "30"}, {"other", "1"}};
  r = load_conf(text, extra, 2, &fatal, err, sizeof err, NULL);
  ck_assert_int_eq(mi_registry_at(r, 0)->score, 30);
  ck_assert_ptr_nonnull(mi_registry_at(r, 0)->conf);
  ck_assert_str_eq(mi_registry_at(r, 0)->conf->opts.items[0].value, "20"); /* conf untouched */
  mi_registry_free(r);
}
END_TEST

START_TEST(malformed_conf_is_fatal) {
  char err[1024], conf[PATH_MAX + 32], real[PATH_MAX];
  int fatal = 0;
  mi_registry *r = load_conf("# x\nplatfrom cpu libmi-cpu.so required\n", NULL, 0, &fatal, err,
                             sizeof err, NULL);
  ck_assert_int_eq(fatal, 1);
  snprintf(conf, sizeof conf, "%s/plugins.conf", g_tmp);
  char want[PATH_MAX + 128];
  snprintf(want, sizeof want, "%s:2: unknown plugin kind 'platfrom'", conf);
  ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "'%s'", err);
  ck_assert_uint_eq(mi_registry_count(r), 0);
  ck_assert_str_eq(mi_registry_conf_path(r), realpath(conf, real));
  mi_registry_free(r);
}
END_TEST

/* ---------- search order ---------- */

static char *listing(const mi_registry *r) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  mi_registry_print(r, f);
  long n = ftell(f);
  char *buf = calloc(1, (size_t)n + 1);
  rewind(f);
  ck_assert_int_eq(fread(buf, 1, (size_t)n, f), n);
  fclose(f);
  return buf;
}

static mi_registry *load_dirs(const char *plugin_dir, const char *exe, int *fatal) {
  mi_loader_opts o = {.plugin_dir = plugin_dir, .exe_path = exe};
  char err[1024];
  capture cap;
  capture_begin(&cap);
  mi_registry *r = mi_registry_load(&o, fatal, err, sizeof err);
  free(capture_end(&cap));
  ck_assert_ptr_nonnull(r);
  return r;
}

START_TEST(search_order_plugin_dir_then_env_then_exe_dir) {
  /* tmp/a (--plugin-dir): 1.0.0   tmp/b ($MI_PLUGIN_PATH): 2.0.0
   * tmp/prefix/lib/metainfer: 3.0.0   tmp/prefix/bin (exe dir): 1.0.0 */
  char a[PATH_MAX + 16], b[PATH_MAX + 16], lib[PATH_MAX + 32], bin[PATH_MAX + 32],
      exe[PATH_MAX + 48], f[PATH_MAX + 64], src[PATH_MAX];
  snprintf(a, sizeof a, "%s/a", g_tmp);
  snprintf(b, sizeof b, "%s/b", g_tmp);
  snprintf(lib, sizeof lib, "%s/prefix/lib/metainfer", g_tmp);
  snprintf(bin, sizeof bin, "%s/prefix/bin", g_tmp);
  snprintf(exe, sizeof exe, "%s/mi-fake", bin);
  const char *dirs[] = {a, b, lib, bin};
  const char *srcs[] = {"libmi-good.so", "variants/libmi-good-v2.so", "variants/libmi-good-v3.so",
                        "libmi-good.so"};
  for (int i = 0; i < 4; i++) {
    mkdir_p(dirs[i]);
    plugin_path(src, sizeof src, srcs[i]);
    snprintf(f, sizeof f, "%s/libmi-good.so", dirs[i]);
    copy_file(src, f);
  }
  setenv("MI_PLUGIN_PATH", b, 1);

  static const struct {
    int use_dir, use_env, drop_lib;
    const char *version;
    int winner;
  } steps[] = {{1, 1, 0, "1.0.0", 0}, {0, 1, 0, "2.0.0", 1}, {0, 0, 0, "3.0.0", 2},
               {0, 0, 1, "1.0.0", 3}};
  for (int s = 0; s < 4; s++) {
    if (!steps[s].use_env) unsetenv("MI_PLUGIN_PATH");
    if (steps[s].drop_lib) {
      snprintf(f, sizeof f, "%s/libmi-good.so", lib);
      ck_assert_int_eq(unlink(f), 0);
    }
    int fatal = -1;
    mi_registry *r = load_dirs(steps[s].use_dir ? a : NULL, exe, &fatal);
    ck_assert_int_eq(fatal, 0);
    ck_assert_ptr_null(mi_registry_conf_path(r));
    mi_plugin *p = mi_registry_best(r, MI_PLUGIN_PLATFORM, "good");
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(strcmp(mi_plugin_version(p), steps[s].version) == 0, "step %d: got %s", s,
                  mi_plugin_version(p));
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "scan of %s", dirs[steps[s].winner]);
    ck_assert_str_eq(p->origin, want);
    /* every other copy: shadowed by the winner, and never initialised */
    int n_loaded = 0;
    for (size_t i = 0; i < mi_registry_count(r); i++) {
      mi_plugin *q = mi_registry_at(r, i);
      if (q->status == MI_PLUGIN_LOADED) {
        n_loaded++;
        continue;
      }
      snprintf(want, sizeof want, "shadowed by %s", p->path);
      ck_assert_str_eq(q->reason, want);
      ck_assert_int_eq(q->score, -1);
    }
    ck_assert_int_eq(n_loaded, 1);
    /* the listing says where the winner came from */
    char *txt = listing(r);
    char line[2 * PATH_MAX];
    snprintf(line, sizeof line, "%-9s %-16s %-10s %5d  %-9s %s  scan of %s\n", "platform", "good",
             steps[s].version, 10, "loaded", p->path, dirs[steps[s].winner]);
    ck_assert_msg(strstr(txt, line), "step %d: listing lacks\n%s\nin\n%s", s, line, txt);
    int o = snprintf(want, sizeof want, "search path: ");
    if (steps[s].use_dir) o += snprintf(want + o, sizeof want - (size_t)o, "%s:", a);
    if (steps[s].use_env) o += snprintf(want + o, sizeof want - (size_t)o, "%s:", b);
    snprintf(want + o, sizeof want - (size_t)o, "%s:%s\n", lib, bin);
    ck_assert_msg(strstr(txt, want), "step %d: listing lacks '%s' in\n%s", s, want, txt);
    free(txt);
    mi_registry_free(r);
  }
}
END_TEST

START_TEST(conf_is_searched_like_plugins) {
  /* plugins.conf only in $MI_PLUGIN_PATH's dir; the file it names is found
   * first in --plugin-dir, which is also scanned (it comes before the conf's
   * dir) for plugins the conf does not name; the conf's own dir is not. */
  char a[PATH_MAX + 16], b[PATH_MAX + 16], f[PATH_MAX + 64], src[PATH_MAX], exe[PATH_MAX + 16];
  snprintf(a, sizeof a, "%s/a", g_tmp);
  snprintf(b, sizeof b, "%s/b", g_tmp);
  snprintf(exe, sizeof exe, "%s/mi-fake", g_tmp);
  mkdir_p(a);
  mkdir_p(b);
  plugin_path(src, sizeof src, "variants/libmi-good-v2.so");
  snprintf(f, sizeof f, "%s/libmi-good.so", a);
  copy_file(src, f);
  plugin_path(src, sizeof src, "libmi-good.so");
  snprintf(f, sizeof f, "%s/libmi-good.so", b);
  copy_file(src, f);
  plugin_path(src, sizeof src, "libmi-bad-probe0.so");
  snprintf(f, sizeof f, "%s/libmi-bad-probe0.so", a); /* extra, in the scanned dir */
  copy_file(src, f);
  snprintf(f, sizeof f, "%s/libmi-bad-initfail.so", b); /* extra, in the conf's dir */
  plugin_path(src, sizeof src, "libmi-bad-initfail.so");
  copy_file(src, f);
  snprintf(f, sizeof f, "%s/plugins.conf", b);
  write_text(f, "platform good libmi-good.so required\n");
  setenv("MI_PLUGIN_PATH", b, 1);
  int fatal;
  mi_registry *r = load_dirs(a, exe, &fatal);
  ck_assert_int_eq(fatal, 0);
  ck_assert_str_eq(mi_registry_conf_path(r), f);
  ck_assert_uint_eq(mi_registry_count(r), 2);
  mi_plugin *p = mi_registry_at(r, 0);
  ck_assert_str_eq(mi_plugin_version(p), "2.0.0");
  char want[PATH_MAX + 32];
  snprintf(want, sizeof want, "%s:1", f);
  ck_assert_str_eq(p->origin, want);
  mi_plugin *x = mi_registry_at(r, 1);
  ck_assert_str_eq(mi_plugin_name(x), "bad-probe0");
  ck_assert_int_eq(x->status, MI_PLUGIN_UNSUITED);
  snprintf(want, sizeof want, "scan of %s", a);
  ck_assert_str_eq(x->origin, want);
  char *txt = listing(r);
  snprintf(want, sizeof want, "plugins.conf: %s; search path: %s:%s:", f, a, b);
  ck_assert_msg(strncmp(txt, want, strlen(want)) == 0, "%s", txt);
  free(txt);
  mi_registry_free(r);
}
END_TEST

/* ---------- scanning the whole broken set ---------- */

START_TEST(scan_of_broken_dir_lists_every_file) {
  char exe[PATH_MAX + 16];
  snprintf(exe, sizeof exe, "%s/mi-fake", g_tmp); /* no plugins.conf anywhere */
  int fatal = -1;
  mi_registry *r = load_dirs(g_plugins, exe, &fatal);
  ck_assert_int_eq(fatal, 0);
  ck_assert_uint_eq(mi_registry_count(r), 1 + N_BROKEN);
  char *txt = listing(r);
  /* keep a copy for people reading test output */
  char out[PATH_MAX + 64];
  snprintf(out, sizeof out, "%s/../loader_broken_listing.txt", g_plugins);
  write_text(out, txt);
  ck_assert_int_eq(count_lines(txt), 2 + 1 + 2 * N_BROKEN); /* headers, good, bad + reasons */
  for (int i = 0; i < N_BROKEN; i++) {
    char path[PATH_MAX], line[PATH_MAX + 64];
    plugin_path(path, sizeof path, broken[i].file);
    snprintf(line, sizeof line, "%s %s  scan of ", broken[i].status == MI_PLUGIN_UNSUITED
             ? "unsuited " : "rejected ", path);
    char *at = strstr(txt, line);
    ck_assert_msg(at, "listing lacks '%s'", line);
    char *reason = strchr(at, '\n') + 1;
    ck_assert_msg(strncmp(reason, "          reason: ", 18) == 0, "no reason line after %s", path);
    ck_assert_msg(strncmp(reason + 18, broken[i].words[0], strlen(broken[i].words[0])) == 0 ||
                  strstr(reason, broken[i].words[0]), "%s", reason);
  }
  ck_assert_ptr_nonnull(strstr(txt, "platform  good             1.0.0         10  loaded    "));
  free(txt);
  mi_registry_free(r);
}
END_TEST

START_TEST(null_and_empty_arguments_do_not_crash) {
  ck_assert_ptr_null(mi_plugin_load_file(NULL, NULL));
  ck_assert_uint_eq(mi_registry_count(NULL), 0);
  ck_assert_ptr_null(mi_registry_at(NULL, 0));
  ck_assert_ptr_null(mi_registry_best(NULL, MI_PLUGIN_PLATFORM, NULL));
  ck_assert_ptr_null(mi_registry_conf_path(NULL));
  mi_registry_print(NULL, stdout);
  mi_registry_free(NULL);
  /* a search path of nothing but non-existent directories */
  char exe[PATH_MAX + 32], dir[PATH_MAX + 32];
  snprintf(exe, sizeof exe, "%s/nothing/mi-fake", g_tmp);
  snprintf(dir, sizeof dir, "%s/nowhere", g_tmp);
  setenv("MI_PLUGIN_PATH", "::/nonexistent-dir:", 1);
  int fatal = -1;
  mi_registry *r = load_dirs(dir, exe, &fatal);
  ck_assert_int_eq(fatal, 0);
  ck_assert_uint_eq(mi_registry_count(r), 0);
  ck_assert_ptr_null(mi_registry_at(r, 0));
  mi_registry_free(r);
}
END_TEST

/* ---------- ABI 1.2: interface sizes by minor, platform_needs ---------- */

#define END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

START_TEST(host_api_reports_the_core_abi_minor) {
  ck_assert_uint_eq(mi_host_api_get()->abi_minor, MI_ABI_MINOR);
  ck_assert_uint_eq(mi_host_api_get()->struct_size, sizeof(mi_host_api));
}
END_TEST

START_TEST(interface_sizes_follow_the_member_list) {
  ck_assert_uint_eq(mi_platform_iface_min_size(0), END_OF(mi_platform_iface, argmax));
  ck_assert_uint_eq(mi_platform_iface_min_size(1), END_OF(mi_platform_iface, convert));
  ck_assert_uint_eq(mi_platform_iface_min_size(3), END_OF(mi_platform_iface, convert));
  ck_assert_uint_eq(mi_platform_iface_min_size(4), END_OF(mi_platform_iface, rmsnorm_gated));
  ck_assert_uint_eq(mi_platform_iface_min_size(MI_ABI_MINOR), sizeof(mi_platform_iface));
  ck_assert_uint_eq(mi_model_iface_min_size(1), END_OF(mi_model_iface, forward));
  ck_assert_uint_eq(mi_model_iface_min_size(2), END_OF(mi_model_iface, platform_needs));
  ck_assert_uint_eq(mi_model_iface_min_size(3), END_OF(mi_model_iface, forward_batch));
  ck_assert_uint_eq(mi_model_iface_min_size(4), END_OF(mi_model_iface, forward_batch));
  ck_assert_uint_eq(mi_model_iface_min_size(MI_ABI_MINOR), sizeof(mi_model_iface));
  ck_assert_int_eq(mi_platform_member_offset("convert"), (long)offsetof(mi_platform_iface, convert));
  ck_assert_int_eq(mi_platform_member_offset("variant"), (long)offsetof(mi_platform_iface, variant));
  ck_assert_int_eq(mi_platform_member_offset("struct_size"), -1);
  ck_assert_int_eq(mi_platform_member_offset("nosuch"), -1);
  /* every member is listed once, in struct order */
  size_t prev = 0, n = 0;
#define X(name_, minor_, kernel_)                                                                  \
  ck_assert_uint_gt(offsetof(mi_platform_iface, name_), prev);                                     \
  prev = offsetof(mi_platform_iface, name_);                                                       \
  n++;
  MI_PLATFORM_MEMBERS(X)
#undef X
  ck_assert_uint_eq(prev + sizeof(void (*)(void)), sizeof(mi_platform_iface));
  ck_assert_uint_eq(n, (sizeof(mi_platform_iface) - offsetof(mi_platform_iface, variant)) /
                           sizeof(void (*)(void)));
  /* a provided member past a short struct_size is not provided */
  mi_platform_iface f = {.struct_size = (uint32_t)END_OF(mi_platform_iface, argmax)};
  f.add = (void *)1;
  f.convert = (void *)1;
  ck_assert(mi_platform_provides(&f, "add"));
  ck_assert(!mi_platform_provides(&f, "convert"));
  ck_assert(!mi_platform_provides(&f, "scale"));
}
END_TEST

static mi_plugin *load_compat(const char *file) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/compat/%s", g_plugins, file);
  mi_plugin *pl = mi_plugin_load_file(p, NULL);
  ck_assert_ptr_nonnull(pl);
  return pl;
}

START_TEST(old_abi_plugins_still_load) {
  mi_plugin *pf = load_compat("libmi-good-abi10.so");
  ck_assert_msg(pf->status == MI_PLUGIN_LOADED, "ABI 1.0 platform: %s", pf->reason);
  mi_plugin *m = load_compat("libmi-needs-old.so");
  ck_assert_msg(m->status == MI_PLUGIN_LOADED, "ABI 1.1 model: %s", m->reason);
  /* no needs declared: only the core's own (last_error, device_info) count */
  char err[512] = "";
  ck_assert_int_eq(mi_compat_check(pf, m, 1, NULL, err, sizeof err), 0);
  ck_assert_int_eq(mi_compat_describe(pf, m, err, sizeof err), 0);
  ck_assert_str_eq(err, "needs-old (not with --tp > 1: lacks comm_info, broadcast)");
  mi_plugin_unload(m);
  mi_plugin_unload(pf);
}
END_TEST

START_TEST(bad_platform_needs_are_rejected) {
  mi_plugin *m = load_compat("libmi-needs-null.so");
  ck_assert_int_eq(m->status, MI_PLUGIN_REJECTED);
  ck_assert_str_eq(m->reason, "model interface member platform_needs is NULL (required from ABI 1.2)");
  mi_plugin_unload(m);
  m = load_compat("libmi-needs-unknown.so");
  ck_assert_int_eq(m->status, MI_PLUGIN_REJECTED);
  ck_assert_str_eq(m->reason, "platform_needs[0] names 'frobnicate', which is not a platform member");
  mi_plugin_unload(m);
}
END_TEST

START_TEST(platform_needs_with_conditions) {
  char path[PATH_MAX];
  plugin_path(path, sizeof path, "libmi-good.so");
  mi_plugin *pf = mi_plugin_load_file(path, NULL);
  ck_assert_int_eq(pf->status, MI_PLUGIN_LOADED);
  mi_plugin *m = load_compat("libmi-needs-ok.so");
  ck_assert_msg(m->status == MI_PLUGIN_LOADED, "%s", m->reason);
  char err[512] = "";
  /* add and matmul always: the test platform has them */
  ck_assert_int_eq(mi_compat_check(pf, m, 1, NULL, err, sizeof err), 0);
  /* rope (and the core's comm_info, broadcast) only with tp > 1 */
  ck_assert_int_eq(mi_compat_check(pf, m, 2, NULL, err, sizeof err), -1);
  ck_assert_str_eq(err, "platform 'good' cannot serve model 'needs-ok' with tensor parallelism: "
                        "lacks comm_info, broadcast, rope");
  /* convert only when kv_type is set to other than f32 */
  mi_kv kv[] = {{"kv_type", "f32"}};
  mi_options o = {kv, 1};
  ck_assert_int_eq(mi_compat_check(pf, m, 1, &o, err, sizeof err), 0);
  kv[0].value = "f16";
  ck_assert_int_eq(mi_compat_check(pf, m, 1, &o, err, sizeof err), -1);
  ck_assert_str_eq(err, "platform 'good' cannot serve model 'needs-ok': lacks convert");
  ck_assert_int_eq(mi_compat_describe(pf, m, err, sizeof err), 0);
  ck_assert_str_eq(err, "needs-ok (not with --tp > 1: lacks comm_info, broadcast, rope; kv_type "
                        "other than f32: convert)");
  /* an ABI 1.0 platform lacks what it cannot have: scale is there, convert not */
  mi_plugin *p10 = load_compat("libmi-good-abi10.so");
  ck_assert_int_eq(mi_compat_check(p10, m, 1, &o, err, sizeof err), -1);
  ck_assert_str_eq(err, "platform 'good-abi10' cannot serve model 'needs-ok': lacks convert");
  mi_plugin_unload(p10);
  mi_plugin_unload(m);
  mi_plugin_unload(pf);
}
END_TEST

int main(void) {
  Suite *s = suite_create("loader");
  TCase *tb = mi_check_case(s, "broken", 0, setup, teardown);
  tcase_add_loop_test(tb, broken_plugin_is_rejected_with_reason, 0, N_BROKEN);
  tcase_add_test(tb, missing_and_non_regular_files);

  mi_check_add(mi_check_case(s, "good", 0, setup, teardown),
               MI_CHECK_TESTS(good_plugin_loads_and_computes,
                              probe_score_comes_from_options_and_is_clamped));

  mi_check_add(mi_check_case(s, "registry", 0, setup, teardown),
               MI_CHECK_TESTS(required_broken_plugin_is_fatal, optional_broken_plugins_are_skipped,
                              conf_kind_and_name_must_match_the_file, conf_paths_and_missing_files,
                              extra_options_override_conf_options, malformed_conf_is_fatal,
                              search_order_plugin_dir_then_env_then_exe_dir,
                              conf_is_searched_like_plugins, scan_of_broken_dir_lists_every_file,
                              null_and_empty_arguments_do_not_crash));

  mi_check_add(mi_check_case(s, "abi", 0, setup, teardown),
               MI_CHECK_TESTS(host_api_reports_the_core_abi_minor,
                              interface_sizes_follow_the_member_list, old_abi_plugins_still_load,
                              bad_platform_needs_are_rejected, platform_needs_with_conditions));

  return mi_check_run(s);
}
