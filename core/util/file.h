/* Opening and reading files that may come from someone else (a model
 * directory, a plugin folder, the CKB): the one place where the rules live.
 *
 *   - never wait: opened with O_NONBLOCK, so a FIFO or a device in place of
 *     a file does not block open(); then fstat, and anything that is not a
 *     regular file is refused ("PATH: not a regular file (a FIFO)");
 *   - a size limit checked on the open file, before any byte is read;
 *   - every error is one line "PATH: problem" in err.
 *
 * Readers of untrusted files use mi_file_read_all (whole file, NUL-terminated)
 * or mi_file_open (a descriptor, e.g. to mmap). */
#ifndef MI_CORE_UTIL_FILE_H
#define MI_CORE_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A model's config.json is a few KB: the limit every reader of one uses. */
#define MI_CONFIG_JSON_MAX_BYTES (1u << 20)

/* flags */
#define MI_FILE_NOFOLLOW 1u /* refuse a symlink as the last path component */

/* Opens path read-only (O_CLOEXEC, blocking mode restored after the open)
 * and returns the descriptor of a regular file of at most max_bytes bytes
 * (0: no limit), its size in *size. Otherwise -1 and one line in err:
 *   PATH: cannot open: No such file or directory
 *   PATH: not a regular file (a FIFO)
 *   PATH: file is N bytes, over the M byte limit[ for a WHAT]
 * what (may be NULL) names the kind of file in the limit message. */
int mi_file_open(const char *path, unsigned flags, uint64_t max_bytes, const char *what,
                 uint64_t *size, char *err, size_t err_len);

/* The whole file (mi_file_open's rules), NUL-terminated, its length in
 * *len; free() it. NULL with one line in err (also "PATH: read failed: ..."
 * and "PATH: file changed size while being read"). */
char *mi_file_read_all(const char *path, unsigned flags, uint64_t max_bytes, const char *what,
                       size_t *len, char *err, size_t err_len);

/* The file (mi_file_read_all's rules) parsed by jansson with jflags
 * (e.g. JSON_REJECT_DUPLICATES); NULL with one line in err:
 *   PATH: invalid JSON at line L column C: TEXT */
typedef struct json_t json_t;
json_t *mi_file_load_json(const char *path, unsigned flags, uint64_t max_bytes, const char *what,
                          size_t jflags, char *err, size_t err_len);

/* "a FIFO", "a directory", "a socket", "a character device", ... for st_mode. */
const char *mi_file_kind(unsigned mode);

/* 1 when path's real location (symlinks resolved) lies inside dir's real
 * location, else 0 (also when either cannot be resolved). */
int mi_file_inside(const char *path, const char *dir);

/* Makes dir and every missing parent (0777 before the umask); 0 when dir
 * then is a writable directory, else -1 with errno (ENOTDIR when it, or a
 * parent, is something else). */
int mi_mkdir_p(const char *dir);

/* The first folder of rel[] (paths relative to the folder of the running
 * executable: /proc/self/exe, else argv0 when not NULL) for which ok(dir)
 * holds, in buf; NULL when none does. */
const char *mi_exe_rel_dir(const char *argv0, const char *const *rel, size_t n_rel,
                           int (*ok)(const char *dir), char *buf, size_t n);

/* Copies src to dst (created or truncated) byte for byte; 0, or -1 when
 * either cannot be opened, else fclose(dst)'s result. */
int mi_file_copy(const char *src, const char *dst);

/* The last non-empty line of a text file (a child's log), without its
 * newline, into out[n]; "" when there is none or it cannot be read. */
void mi_file_last_line(const char *path, char *out, size_t n);

/* err = "PATH: " + the formatted message, control characters replaced by
 * spaces so the line stays one line (paths and file contents are the user's). */
void mi_path_err(char *err, size_t len, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif
