/* Running a helper program without a shell, and file-tree chores done
 * without `rm -rf` / `cp -r` strings: every path stays one argument, so a
 * path holding quotes, `;` or `$(...)` is only ever a path. */
#ifndef MI_UTIL_SPAWN_H
#define MI_UTIL_SPAWN_H

/* Runs argv[0] (a path; no PATH search) with argv, stdin from /dev/null,
 * stdout to `out` (truncated) when given, else to `log`, stderr to `log`
 * (appended; NULL: both inherited), killed by SIGALRM after timeout_s
 * seconds when timeout_s > 0 (the alarm survives exec). Returns the exit
 * status (127: it could not be executed), or -1 when it could not start or
 * was killed by a signal. */
int mi_spawn_wait(char *const argv[], const char *log, const char *out, int timeout_s);

/* Removes `path` and everything below it (a missing path is no error;
 * symlinks are removed, never followed). 0 or -1 with errno. */
int mi_remove_tree(const char *path);

/* Copies the directory tree `src` to `dst` (which must not exist): folders
 * and regular files only, symlinks and special files skipped. 0 or -1 with
 * errno. */
int mi_copy_tree(const char *src, const char *dst);

#endif
