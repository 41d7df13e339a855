/* Atomic add/update of CKB entries.
 *
 * Why each step: the lock (flock on DIR/.lock) serialises writers across
 * processes, so two adds never both see "id is new", and a writer never
 * removes another live writer's temp file. The store is re-read under the
 * lock so references and duplicates are checked against what is really
 * there. The temp file is in the same folder as the target so rename() is
 * atomic (same filesystem); fsync of the file before the rename and of the
 * folder after it makes the new name durable: after a crash the target is
 * either the complete old file or the complete new one. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ckb/internal.h"

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Test hook: MI_CKB_TEST_CRASH=mid_write dies with half the temp file
 * written, =before_rename with all of it written; both before the rename,
 * exactly like a power cut there. */
static void maybe_crash(const char *point) {
  const char *want = getenv("MI_CKB_TEST_CRASH");
  if (want && !strcmp(want, point)) _exit(86);
}

/* Removes temp files of writers that died: safe because we hold the lock. */
static void clean_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_name[0] == '.' && strstr(de->d_name, ".json.tmp.")) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
      unlink(p);
    }
  closedir(d);
}

static int put_locked(const char *dir, json_t *entry, mi_ckb_put_mode mode, ckb_diag *d) {
  char err[512];
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  if (!c) {
    ckb_report(d, dir, "%s", err);
    return -1;
  }
  int rc = -1;
  char *kdir = NULL, *target = NULL, *tmp = NULL, *text = NULL;
  const char *kind = json_string_value(json_object_get(entry, "kind"));
  const char *id = json_string_value(json_object_get(entry, "id"));
  const char *version = json_string_value(json_object_get(entry, "version"));
  const char *sub = kind ? mi_ckb_kind_dir(c, kind) : NULL;
  size_t kl = kind ? strlen(kind) : 0;
  if (!sub || !id || strncmp(id, kind, kl) != 0 || id[kl] != '.' || !id[kl + 1]) {
    /* Validation below names the exact problem; the path is a placeholder. */
    mi_ckb_validate_entry(c, entry, "(new entry)", d->fn, d->user);
    if (d->fn) d->fn(d->user, "(new entry): needs a known 'kind' and an id 'KIND.NAME'");
    d->count++;
    goto out;
  }
  /* The name becomes a file name: checked before anything else, whatever
   * the schema's pattern says ("x\n" would be a second file for one id). */
  char why[160];
  if (mi_ckb_name_check(id + kl + 1, why, sizeof why) != 0) {
    ckb_report(d, "(new entry)", "field 'id': '%.140s' is not KIND.NAME with NAME a file name ([a-z0-9][a-z0-9._-]{0,127}): NAME %s",
               id, why);
    goto out;
  }
  if (asprintf(&kdir, "%s/%s", c->dir, sub) < 0 ||
      asprintf(&target, "%s/%s.json", kdir, id + kl + 1) < 0)
    goto out;
  int n = mi_ckb_validate_entry(c, entry, target, d->fn, d->user);
  d->count += n;
  if (n) goto out;

  const mi_ckb_entry *old = mi_ckb_find(c, id);
  if (mode == MI_CKB_ADD && old) {
    ckb_report(d, target, "entry '%s' already exists (version %s); use update", id,
               old->version ? old->version : "?");
    goto out;
  }
  if (mode == MI_CKB_UPDATE) {
    if (!old) {
      ckb_report(d, target, "entry '%s' does not exist; use add", id);
      goto out;
    }
    if (mi_ckb_version_cmp(version, old->version) <= 0) {
      ckb_report(d, target, "field 'version': %s must be greater than the stored %s", version,
                 old->version ? old->version : "?");
      goto out;
    }
    if (strcmp(old->path, target) != 0) {
      ckb_report(d, target, "entry '%s' is stored as %s, not here", id, old->path);
      goto out;
    }
  }

  if (mkdir(kdir, 0755) != 0 && errno != EEXIST) {
    ckb_report(d, kdir, "cannot create folder: %s", strerror(errno));
    goto out;
  }
  clean_stale(kdir);
  text = json_dumps(entry, JSON_INDENT(2));
  if (text && strlen(text) + 1 > MI_CKB_MAX_FILE) {
    /* Refused here, not by the next validate: the reader would refuse it. */
    ckb_report(d, target, "entry is %zu bytes as written, over the %u byte limit for a CKB file",
               strlen(text) + 1, MI_CKB_MAX_FILE);
    goto out;
  }
  struct stat tst;
  if (lstat(target, &tst) == 0 && !S_ISREG(tst.st_mode)) {
    /* rename() would replace a device, FIFO or symlink there with a file. */
    ckb_report(d, target, "cannot write: it is not a regular file (a %s); refusing to replace it",
               S_ISLNK(tst.st_mode) ? "symbolic link" : S_ISDIR(tst.st_mode) ? "directory" : "device, FIFO or socket");
    goto out;
  }
  if (!text || asprintf(&tmp, "%s/.%s.json.tmp.XXXXXX", kdir, id + kl + 1) < 0) goto out;
  int fd = mkstemp(tmp);
  if (fd < 0) {
    ckb_report(d, tmp, "cannot create temp file: %s", strerror(errno));
    goto out;
  }
  size_t len = strlen(text);
  int ok = write_all(fd, text, len / 2) == 0;
  maybe_crash("mid_write");
  ok = ok && write_all(fd, text + len / 2, len - len / 2) == 0 && write_all(fd, "\n", 1) == 0;
  ok = ok && fsync(fd) == 0;
  if (fchmod(fd, 0644) != 0) ok = 0;
  if (close(fd) != 0) ok = 0;
  maybe_crash("before_rename");
  if (!ok || rename(tmp, target) != 0) {
    ckb_report(d, target, "cannot write: %s", strerror(errno));
    unlink(tmp);
    goto out;
  }
  int dfd = open(kdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  rc = 0;
out:
  free(text);
  free(tmp);
  free(target);
  free(kdir);
  mi_ckb_close(c);
  return rc;
}

int mi_ckb_put(const char *dir, json_t *entry, mi_ckb_put_mode mode, mi_ckb_diag_fn diag,
               void *user) {
  ckb_diag d = {diag, user, 0};
  if (!json_is_object(entry)) {
    ckb_report(&d, "(new entry)", "an entry must be a JSON object");
    return -1;
  }
  char lock[4096];
  snprintf(lock, sizeof lock, "%s/.lock", dir);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    ckb_report(&d, lock, "cannot open the lock file: %s", strerror(errno));
    return -1;
  }
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ckb_report(&d, lock, "cannot lock: %s", strerror(errno));
      close(fd);
      return -1;
    }
  }
  int rc = put_locked(dir, entry, mode, &d);
  flock(fd, LOCK_UN);
  close(fd);
  return rc;
}
