/* Running a helper program without a shell, and file-tree chores done
 * without `rm -rf` / `cp -r` strings: every path stays one argument, so a
 * path holding quotes, `;` or `$(...)` is only ever a path. */
#ifndef MI_UTIL_SPAWN_H
#define MI_UTIL_SPAWN_H

#include <stddef.h>

/* Runs argv[0] (a path; no PATH search) with argv, stdin from /dev/null,
 * stdout to `out` (truncated) when given, else to `log`, stderr to `log`
 * (appended; NULL: both inherited), killed by SIGALRM after timeout_s
 * seconds when timeout_s > 0 (the alarm survives exec). Returns the exit
 * status (127: it could not be executed), or -1 when it could not start,
 * was killed by a signal, or ran to timeout_s and did not exit 0 (a
 * launcher such as mpirun passes the alarm to its children and exits 1). */
int mi_spawn_wait(char *const argv[], const char *log, const char *out, int timeout_s);

/* mi_spawn_wait, the folder `ro_dir` (when not NULL) read-only for the
 * program: in the child, before exec, a private mount namespace (as root
 * directly, else inside a user namespace that maps the program's own uid and
 * gid to themselves, so it never sees itself as root) where ro_dir is
 * bind-mounted on itself read-only, submounts included where the kernel has
 * mount_setattr. Every other path is as it was. A step that fails (no
 * permission, seccomp, no user namespaces) leaves the program to run without
 * it, never failing the run: *ro_out (when given) says which happened: 1 the
 * program saw ro_dir read-only, 0 it did not (or ro_dir was NULL), -1 the
 * child stopped before it got that far (it could not be started). */
int mi_spawn_wait_ro(char *const argv[], const char *log, const char *out, int timeout_s, const char *ro_dir,
                     int *ro_out);

/* The mount at `path` and every mount below it read-only (on = 1) or
 * writable (on = 0), through mount_setattr(2) (Linux 5.12+). 0, or -1 with
 * errno (ENOSYS where the kernel or the headers lack it). */
int mi_mount_set_rdonly(const char *path, int on);

/* The first executable `name` in a folder of $PATH (else
 * /usr/local/bin:/usr/bin:/bin) into buf[n]: buf, or NULL (buf then
 * empty) when there is none. */
const char *mi_find_in_path(const char *name, char *buf, size_t n);
/* The MPI launcher every TP run starts ranks with: $MI_MPIRUN (NULL when
 * it is not an executable), else mpirun on PATH (into buf); NULL when none. */
const char *mi_find_mpirun(char *buf, size_t n);

/* Removes `path` and everything below it (a missing path is no error;
 * symlinks are removed, never followed). 0 or -1 with errno. */
int mi_remove_tree(const char *path);

/* Copies the directory tree `src` to `dst` (which must not exist): folders
 * and regular files only, symlinks and special files skipped. 0 or -1 with
 * errno. */
int mi_copy_tree(const char *src, const char *dst);

#endif
