/* What a tool that writes a file does when the path is not a plain file
 * (mi_out_write_file), and how much memory a run may use under a cgroup v1
 * or v2 limit (mi_mem_available_at on a fake /proc and cgroup mount). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runtime/mem.h"
#include "core/util/out.h"
#include "core/util/spawn.h"
#include "tests/util/check_main.h"

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/mi-files.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void put(const char *path, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = 0;
    mkdir(p, 0755);
    *s = '/';
  }
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

static char *slurp(const char *path) {
  static char buf[256];
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

START_TEST(regular_file_replaced_whole_mode_kept) {
  char p[128], err[256];
  snprintf(p, sizeof p, "%s/out.json", dir);
  ck_assert_int_eq(mi_out_write_file(p, "new\n", 4, err, sizeof err), 0); /* a new path */
  ck_assert_str_eq(slurp(p), "new\n");
  ck_assert_int_eq(chmod(p, 0600), 0);
  ck_assert_int_eq(mi_out_write_file(p, "again\n", 6, err, sizeof err), 0);
  ck_assert_str_eq(slurp(p), "again\n");
  struct stat st;
  ck_assert_int_eq(stat(p, &st), 0);
  ck_assert_int_eq(st.st_mode & 07777, 0600);
}
END_TEST

START_TEST(symlink_target_written_link_kept) {
  char target[128], link[128], err[256];
  snprintf(target, sizeof target, "%s/real.json", dir);
  snprintf(link, sizeof link, "%s/link.json", dir);
  put(target, "old\n");
  ck_assert_int_eq(symlink(target, link), 0);
  ck_assert_int_eq(mi_out_write_file(link, "through\n", 8, err, sizeof err), 0);
  struct stat st;
  ck_assert_int_eq(lstat(link, &st), 0);
  ck_assert_msg(S_ISLNK(st.st_mode), "the symlink was replaced by a file");
  ck_assert_str_eq(slurp(target), "through\n");
  /* a link to nothing: refused, nothing created */
  char dangling[128];
  snprintf(dangling, sizeof dangling, "%s/dangling.json", dir);
  snprintf(target, sizeof target, "%s/missing/x.json", dir);
  ck_assert_int_eq(symlink(target, dangling), 0);
  ck_assert_int_eq(mi_out_write_file(dangling, "x", 1, err, sizeof err), -1);
  ck_assert_msg(strstr(err, dangling) && strstr(err, "symbolic link"), "%s", err);
}
END_TEST

START_TEST(devices_written_through_never_replaced) {
  char err[256];
  struct stat before, after;
  ck_assert_int_eq(stat("/dev/null", &before), 0);
  ck_assert_int_eq(mi_out_write_file("/dev/null", "x\n", 2, err, sizeof err), 0);
  ck_assert_int_eq(stat("/dev/null", &after), 0);
  ck_assert(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev);
  if (stat("/dev/full", &before) == 0 && S_ISCHR(before.st_mode)) {
    ck_assert_int_eq(mi_out_write_file("/dev/full", "x\n", 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/dev/full: cannot write: No space left on device"), "%s", err);
    ck_assert_int_eq(stat("/dev/full", &after), 0);
    ck_assert_msg(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev,
                  "/dev/full is no longer the device node");
  }
  char p[128];
  snprintf(p, sizeof p, "%s", dir); /* a directory: refused */
  ck_assert_int_eq(mi_out_write_file(p, "x", 1, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "it is a directory"), "%s", err);
}
END_TEST

START_TEST(fifo_without_reader_refused_not_waited_on) {
  char p[128], err[256];
  snprintf(p, sizeof p, "%s/fifo", dir);
  ck_assert_int_eq(mkfifo(p, 0600), 0);
  ck_assert_int_eq(mi_out_write_file(p, "x", 1, err, sizeof err), -1); /* CK timeout = a hang */
  ck_assert_msg(strstr(err, "a FIFO with no reader"), "%s", err);
  struct stat st;
  ck_assert_int_eq(lstat(p, &st), 0);
  ck_assert(S_ISFIFO(st.st_mode));
  /* with a reader: written through */
  int rd = open(p, O_RDONLY | O_NONBLOCK);
  ck_assert_int_ge(rd, 0);
  ck_assert_int_eq(mi_out_write_file(p, "via fifo", 8, err, sizeof err), 0);
  char got[16] = {0};
  ck_assert_int_eq(read(rd, got, sizeof got - 1), 8);
  ck_assert_str_eq(got, "via fifo");
  close(rd);
}
END_TEST

/* A fake /proc/meminfo with 8 GiB available. */
static void meminfo(char *path, size_t n) {
  snprintf(path, n, "%s/meminfo", dir);
  put(path, "MemTotal:       16777216 kB\nMemAvailable:    8388608 kB\n");
}

/* The fake files a cgroup case reads, under dir: meminfo (as above) into
 * mi[128], /proc/self/cgroup's path into pc[128] and the cgroup mount's
 * into fs[128]. */
static void fake_proc(char *mi, char *pc, char *fs) {
  meminfo(mi, 128);
  snprintf(pc, 128, "%s/cgroup", dir);
  snprintf(fs, 128, "%s/sys", dir);
}

/* put() of FS/REL. */
static void put_at(const char *fs, const char *rel, const char *text) {
  char f[256];
  snprintf(f, sizeof f, "%s/%s", fs, rel);
  put(f, text);
}

START_TEST(cgroup_v1_limit_counts) {
  char mi[128], pc[128], fs[128], f[256];
  fake_proc(mi, pc, fs);
  /* a Docker-on-cgroup-v1 container: 2 GiB limit, 512 MiB used */
  put(pc, "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n");
  put_at(fs, "memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  put_at(fs, "memory/docker/abc/memory.usage_in_bytes", "536870912\n");
  const char *src = NULL;
  uint64_t got = mi_mem_available_at(mi, pc, fs, &src);
  ck_assert_uint_eq(got, 1536ull << 20);
  ck_assert_str_eq(src, "cgroup v1 memory.limit_in_bytes");
  /* inside the container the mount's root is its own cgroup: no
   * /docker/abc folder, the limit at the root */
  snprintf(f, sizeof f, "rm -rf %s/memory/docker", fs);
  ck_assert_int_eq(system(f), 0);
  put_at(fs, "memory/memory.limit_in_bytes", "1073741824\n");
  put_at(fs, "memory/memory.usage_in_bytes", "0\n");
  ck_assert_uint_eq(mi_mem_available_at(mi, pc, fs, &src), 1ull << 30);
  /* v1's "no limit" (a page-rounded LONG_MAX) does not win over MemAvailable */
  put_at(fs, "memory/memory.limit_in_bytes", "9223372036854771712\n");
  ck_assert_uint_eq(mi_mem_available_at(mi, pc, fs, &src), 8ull << 30);
  ck_assert_str_eq(src, "MemAvailable");
}
END_TEST

START_TEST(cgroup_v2_limit_and_parents_count) {
  char mi[128], pc[128], fs[128], f[256];
  fake_proc(mi, pc, fs);
  put(pc, "0::/kubepods/pod1/c1\n");
  put_at(fs, "kubepods/pod1/c1/memory.max", "max\n");
  put_at(fs, "kubepods/pod1/c1/memory.current", "100\n");
  put_at(fs, "kubepods/pod1/memory.max", "3221225472\n"); /* the pod's limit binds */
  put_at(fs, "kubepods/pod1/memory.current", "1073741824\n");
  const char *src = NULL;
  ck_assert_uint_eq(mi_mem_available_at(mi, pc, fs, &src), 2ull << 30);
  ck_assert_str_eq(src, "cgroup memory.max");
  /* nothing readable at all: 0, "unknown" */
  snprintf(f, sizeof f, "%s/none", dir);
  ck_assert_uint_eq(mi_mem_available_at(f, f, f, &src), 0);
  ck_assert_str_eq(src, "unknown");
}
END_TEST

/* mi_spawn_wait's timeout: a program the alarm ends is -1; so is a
 * launcher that outlives the limit by passing the alarm on and exiting 1
 * itself (mpirun: "rank 0 exited on signal 14"), which was read as an
 * ordinary exit 1; a quick exit keeps its status. */
START_TEST(spawn_timeout_is_said_as_one) {
  char *const quick0[] = {"/bin/sh", "-c", "exit 0", NULL};
  char *const quick3[] = {"/bin/sh", "-c", "exit 3", NULL};
  char *const hang[] = {"/bin/sh", "-c", "sleep 5", NULL};
  /* ignores SIGALRM as a launcher's own handler would, then exits 1 */
  char *const launcher[] = {"/bin/sh", "-c", "trap '' ALRM; sleep 2; exit 1", NULL};
  ck_assert_int_eq(mi_spawn_wait(quick0, "/dev/null", NULL, 10), 0);
  ck_assert_int_eq(mi_spawn_wait(quick3, "/dev/null", NULL, 10), 3);
  ck_assert_int_eq(mi_spawn_wait(hang, "/dev/null", NULL, 1), -1);
  ck_assert_int_eq(mi_spawn_wait(launcher, "/dev/null", NULL, 1), -1);
  ck_assert_int_eq(mi_spawn_wait(launcher, "/dev/null", NULL, 0), 1); /* no limit: its own status */
}
END_TEST

int main(void) {
  return mi_check_run(mi_check_suite(
      "files_and_limits", "files", 20, setup, teardown,
      MI_CHECK_TESTS(regular_file_replaced_whole_mode_kept, symlink_target_written_link_kept,
                     devices_written_through_never_replaced,
                     fifo_without_reader_refused_not_waited_on, cgroup_v1_limit_counts,
                     cgroup_v2_limit_and_parents_count, spawn_timeout_is_said_as_one)));
}
