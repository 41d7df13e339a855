/* A CKB transaction (ckb.h, mi_ckb_txn_*): a staging copy beside the CKB,
 * written and checked at leisure, then one atomic switch.
 *
 * The staging copy lives in the CKB's parent folder (".NAME.txn-PID-N"),
 * so the switch is a rename on one filesystem: renameat2(RENAME_EXCHANGE)
 * swaps the two folders in one step, and the old CKB, now at the staging
 * path, is removed. A process killed at any point before the exchange
 * leaves the CKB as it was, byte for byte (and a staging folder, which the
 * next transaction on the same CKB removes once its process is gone). A
 * filesystem without RENAME_EXCHANGE gets each changed file renamed into
 * place instead: every file then switches atomically, the set does not
 * (said in *how). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/util/spawn.h"

static void split(const char *path, char *parent, size_t pn, char *base, size_t bn) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(parent, pn, ".");
    snprintf(base, bn, "%s", path);
  } else {
    snprintf(parent, pn, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    snprintf(base, bn, "%s", slash + 1);
  }
}

/* Staging folders of transactions whose process is gone. */
static void remove_stale(const char *parent, const char *base) {
  char prefix[4200];
  snprintf(prefix, sizeof prefix, ".%s.txn-", base);
  DIR *d = opendir(parent);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
    long pid = strtol(e->d_name + strlen(prefix), NULL, 10);
    if (pid <= 0 || pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
      char p[4400];
      snprintf(p, sizeof p, "%s/%s", parent, e->d_name);
      if (pid != (long)getpid()) mi_remove_tree(p);
    }
  }
  closedir(d);
}

int mi_ckb_txn_begin(mi_ckb_txn *t, const char *ckb_dir, char *err, size_t n) {
  memset(t, 0, sizeof *t);
  char *real = realpath(ckb_dir, NULL);
  if (!real) {
    snprintf(err, n, "%s: %s", ckb_dir, strerror(errno));
    return -1;
  }
  snprintf(t->live, sizeof t->live, "%s", real);
  free(real);
  char parent[4096], base[4096];
  split(t->live, parent, sizeof parent, base, sizeof base);
  remove_stale(parent, base);
  static int seq;
  snprintf(t->staging, sizeof t->staging, "%.3000s/.%.1000s.txn-%ld-%d", parent, base, (long)getpid(), ++seq);
  mi_remove_tree(t->staging);
  if (mi_copy_tree(t->live, t->staging) != 0) {
    snprintf(err, n, "%s: cannot make the staging copy of %s: %s", t->staging, t->live, strerror(errno));
    mi_remove_tree(t->staging);
    t->staging[0] = 0;
    return -1;
  }
  return 0;
}

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    char x[8192], y[8192];
    size_t na = fread(x, 1, sizeof x, fa), nb = fread(y, 1, sizeof y, fb);
    if (na != nb || memcmp(x, y, na)) same = 0;
    if (na < sizeof x) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

/* Each file of src that differs from dst's (or that dst lacks) moved into
 * dst by rename; folders made as needed. */
static int move_changed(const char *src, const char *dst) {
  DIR *d = opendir(src);
  if (!d) return -1;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char s[4400], t[4400];
    snprintf(s, sizeof s, "%s/%s", src, e->d_name);
    snprintf(t, sizeof t, "%s/%s", dst, e->d_name);
    struct stat st;
    if (lstat(s, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (mkdir(t, 0755) != 0 && errno != EEXIST) rc = -1;
      else rc = move_changed(s, t);
    } else if (S_ISREG(st.st_mode) && !same_file(s, t)) {
      if (rename(s, t) != 0) rc = -1;
    }
  }
  closedir(d);
  return rc;
}

int mi_ckb_txn_commit(mi_ckb_txn *t, char *how, size_t hn, char *err, size_t n) {
  if (!t->staging[0]) {
    snprintf(err, n, "no transaction in progress");
    return -1;
  }
  if (renameat2(AT_FDCWD, t->staging, AT_FDCWD, t->live, RENAME_EXCHANGE) == 0) {
    /* the old CKB is now at the staging path */
    mi_remove_tree(t->staging);
    t->staging[0] = 0;
    snprintf(how, hn, "one atomic exchange of %s with its staging copy", t->live);
    return 0;
  }
  int e = errno;
  if (e != EINVAL && e != ENOSYS && e != ENOTSUP) {
    snprintf(err, n, "%s: cannot switch to the staging copy %s: %s", t->live, t->staging, strerror(e));
    return -1;
  }
  if (move_changed(t->staging, t->live) != 0) {
    snprintf(err, n, "%s: moving the staged files in failed midway: %s (the staging copy %s is kept)", t->live,
             strerror(errno), t->staging);
    return -1;
  }
  mi_remove_tree(t->staging);
  t->staging[0] = 0;
  snprintf(how, hn, "each changed file renamed into %s (this filesystem has no RENAME_EXCHANGE: %s)", t->live,
           strerror(e));
  return 0;
}

void mi_ckb_txn_abort(mi_ckb_txn *t) {
  if (t->staging[0]) mi_remove_tree(t->staging);
  t->staging[0] = 0;
}
