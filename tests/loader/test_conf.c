/* plugins.conf parser: the accepted format, and one error "FILE:LINE:" per
 * kind of malformed line. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runtime/conf.h"
#include "core/runtime/host.h"
#include "mi/plugin.h"
#include "tests/util/check_main.h"

START_TEST(parses_entries_comments_and_options) {
  const char *text = "# a comment\n"
                     "\n"
                     "   \t  \n"
                     "platform cpu libmi-cpu.so required threads=4 isa=avx2 # trailing\n"
                     "model\tqwen3\tsub/libmi-qwen3.so\toptional\r\n"
                     "agent x libx.so optional key=a#b url=http://h:1/p?q=1\n"
                     "engine e /abs/libmi-e.so required"; /* no final newline */
  mi_conf c;
  char err[256] = "";
  ck_assert_int_eq(mi_conf_parse_string("t.conf", text, &c, err, sizeof err), 0);
  ck_assert_str_eq(c.file, "t.conf");
  ck_assert_uint_eq(c.count, 4);
  ck_assert_int_eq(c.entries[0].kind, MI_PLUGIN_PLATFORM);
  ck_assert_str_eq(c.entries[0].name, "cpu");
  ck_assert_str_eq(c.entries[0].path, "libmi-cpu.so");
  ck_assert_int_eq(c.entries[0].required, 1);
  ck_assert_int_eq(c.entries[0].line, 4);
  ck_assert_uint_eq(c.entries[0].opts.count, 2);
  ck_assert_str_eq(c.entries[0].opts.items[0].key, "threads");
  ck_assert_str_eq(c.entries[0].opts.items[0].value, "4");
  ck_assert_str_eq(c.entries[0].opts.items[1].key, "isa");
  ck_assert_str_eq(c.entries[0].opts.items[1].value, "avx2");
  ck_assert_int_eq(c.entries[1].kind, MI_PLUGIN_MODEL);
  ck_assert_str_eq(c.entries[1].path, "sub/libmi-qwen3.so"); /* CRLF stripped */
  ck_assert_int_eq(c.entries[1].required, 0);
  ck_assert_uint_eq(c.entries[1].opts.count, 0);
  /* '#' inside a value is not a comment; '=' after the first is part of it */
  ck_assert_str_eq(c.entries[2].opts.items[0].value, "a#b");
  ck_assert_str_eq(c.entries[2].opts.items[1].value, "http://h:1/p?q=1");
  ck_assert_int_eq(c.entries[3].kind, MI_PLUGIN_ENGINE);
  ck_assert_int_eq(c.entries[3].line, 7);
  mi_conf_free(&c);
}
END_TEST

START_TEST(kind_names_round_trip) {
  for (int k = MI_PLUGIN_PLATFORM; k <= MI_PLUGIN_ENGINE; k++)
    ck_assert_int_eq(mi_plugin_kind_from_string(mi_plugin_kind_name(k)), k);
  ck_assert_int_eq(mi_plugin_kind_from_string("Platform"), -1);
  ck_assert_int_eq(mi_plugin_kind_from_string(""), -1);
  ck_assert_int_eq(mi_plugin_kind_from_string(NULL), -1);
  ck_assert_str_eq(mi_plugin_kind_name(0), "?");
}
END_TEST

/* One malformed line per case, after a valid first line, so the error must
 * name line 3 (line 2 is a comment). */
static const struct {
  const char *line;
  const char *words; /* expected in the message after "bad.conf:3: " */
} bad_lines[] = {
    {"gpu foo libfoo.so required", "unknown plugin kind 'gpu'"},
    {"platform foo", "missing field PATH"},
    {"platform", "missing field NAME"},
    {"platform foo libfoo.so", "missing field required|optional"},
    {"platform foo libfoo.so mandatory", "expected 'required' or 'optional', got 'mandatory'"},
    {"platform foo libfoo.so required threads", "option 'threads' has no '='"},
    {"platform foo libfoo.so required =4", "empty key"},
    {"platform foo libfoo.so required a=1 a=2", "option 'a' given twice"},
    {"platform cpu libother.so optional", "duplicate entry platform 'cpu' (first at line 1)"},
    {"platform foo lib\x01.so required", "control character 0x01 at column 17"},
    {"platform foo lib\xff.so required", "invalid UTF-8 byte 0xff"},
    {"platform foo lib\xc3(.so required", "invalid UTF-8 sequence"},
    {"platform foo lib\xc0\xaf.so required", "invalid UTF-8"}, /* overlong '/' */
    {"platform foo lib\xed\xa0\x80.so required", "invalid UTF-8"}, /* surrogate */
    {"platform foo lib\xe2\x82", "truncated UTF-8"},
    {"platform foo lib.so required \x7f", "control character 0x7f"},
};

START_TEST(malformed_line_names_file_and_line) {
  char text[512];
  snprintf(text, sizeof text, "platform cpu libmi-cpu.so required\n# c\n%s\nmodel m m.so optional\n",
           bad_lines[_i].line);
  mi_conf c;
  char err[256] = "";
  ck_assert_int_eq(mi_conf_parse_string("bad.conf", text, &c, err, sizeof err), -1);
  ck_assert_msg(strncmp(err, "bad.conf:3: ", 12) == 0, "case %d: '%s'", _i, err);
  ck_assert_msg(strstr(err, bad_lines[_i].words), "case %d: '%s' lacks '%s'", _i, err,
                bad_lines[_i].words);
  ck_assert_ptr_null(c.entries); /* nothing half-parsed left behind */
  ck_assert_uint_eq(c.count, 0);
}
END_TEST

START_TEST(valid_utf8_is_accepted) {
  mi_conf c;
  char err[256];
  ck_assert_int_eq(mi_conf_parse_string("u.conf", "platform cpu libmi-cpu.so optional "
                                        "note=caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80 # \xc3\xa9\n",
                                        &c, err, sizeof err), 0);
  ck_assert_str_eq(c.entries[0].opts.items[0].value, "caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80");
  mi_conf_free(&c);
}
END_TEST

START_TEST(long_line_is_an_error) {
  size_t n = 4097 + 64;
  char *text = malloc(n + 64);
  int off = sprintf(text, "# ok\nplatform cpu x.so optional k=");
  memset(text + off, 'v', 4097);
  strcpy(text + off + 4097, "\n");
  mi_conf c;
  char err[256] = "";
  ck_assert_int_eq(mi_conf_parse_string("long.conf", text, &c, err, sizeof err), -1);
  ck_assert_str_eq(err, "long.conf:2: line longer than 4096 bytes");
  /* exactly 4096 is fine */
  text[4096 + 5] = '\0'; /* line 2 = text[5 .. 5+4096) */
  ck_assert_int_eq(mi_conf_parse_string("long.conf", text, &c, err, sizeof err), 0);
  mi_conf_free(&c);
  free(text);
}
END_TEST

START_TEST(too_many_entries_is_an_error) {
  char *text = malloc(300 * 64);
  size_t off = 0;
  for (int i = 0; i < 257; i++) off += (size_t)sprintf(text + off, "agent a%d liba.so optional\n", i);
  mi_conf c;
  char err[256] = "";
  ck_assert_int_eq(mi_conf_parse_string("many.conf", text, &c, err, sizeof err), -1);
  ck_assert_str_eq(err, "many.conf:257: more than 256 plugin entries");
  /* 256 is the limit, inclusive */
  *strstr(text, "agent a256") = '\0';
  ck_assert_int_eq(mi_conf_parse_string("many.conf", text, &c, err, sizeof err), 0);
  ck_assert_uint_eq(c.count, 256);
  mi_conf_free(&c);
  free(text);
}
END_TEST

START_TEST(file_errors) {
  char dir[] = "/tmp/mi-conf-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256], err[512] = "";
  mi_conf c;
  snprintf(path, sizeof path, "%s/missing.conf", dir);
  ck_assert_int_eq(mi_conf_parse_file(path, &c, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, path));
  ck_assert_ptr_nonnull(strstr(err, "cannot open"));

  /* a FIFO in place of the file: refused at once (fopen used to wait for a
   * writer forever), and a directory */
  snprintf(path, sizeof path, "%s/fifo.conf", dir);
  ck_assert_int_eq(mkfifo(path, 0644), 0);
  alarm(20);
  ck_assert_int_eq(mi_conf_parse_file(path, &c, err, sizeof err), -1);
  alarm(0);
  char want_fifo[300];
  snprintf(want_fifo, sizeof want_fifo, "%s: not a regular file (a FIFO)", path);
  ck_assert_str_eq(err, want_fifo);
  unlink(path);
  ck_assert_int_eq(mi_conf_parse_file(dir, &c, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "not a regular file (a directory)"));

  /* a NUL byte on line 2 */
  snprintf(path, sizeof path, "%s/nul.conf", dir);
  FILE *f = fopen(path, "wb");
  fwrite("platform cpu a.so required\nmodel q\0b.so optional\n", 1, 50, f);
  fclose(f);
  ck_assert_int_eq(mi_conf_parse_file(path, &c, err, sizeof err), -1);
  char want[300];
  snprintf(want, sizeof want, "%s:2: control character 0x00", path);
  ck_assert_str_eq(err, want);
  unlink(path);

  snprintf(path, sizeof path, "%s/ok.conf", dir);
  f = fopen(path, "w");
  fputs("platform cpu a.so required\n", f);
  fclose(f);
  ck_assert_int_eq(mi_conf_parse_file(path, &c, err, sizeof err), 0);
  ck_assert_str_eq(c.file, path);
  ck_assert_uint_eq(c.count, 1);
  mi_conf_free(&c);
  mi_conf_free(&c); /* idempotent */
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("loader_conf");
  TCase *tc = mi_check_case(s, "conf", 0, NULL, NULL);
  mi_check_add(tc, MI_CHECK_TESTS(parses_entries_comments_and_options, kind_names_round_trip));
  tcase_add_loop_test(tc, malformed_line_names_file_and_line, 0,
                      (int)(sizeof bad_lines / sizeof bad_lines[0]));
  mi_check_add(tc, MI_CHECK_TESTS(valid_utf8_is_accepted, long_line_is_an_error,
                                  too_many_entries_is_an_error, file_errors));
  return mi_check_run(s);
}
