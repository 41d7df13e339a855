/* Output that must not be lost: checked writes to stdout and to files.
 *
 * A CLI calls mi_out_init() first (so a closed stdin/stdout/stderr cannot
 * hand its descriptor to the next open(): it gets /dev/null, and a closed
 * stdout is remembered as an error), and returns mi_out_finish(prog, rc)
 * from main: it flushes and closes stdout and, when anything written there
 * was lost, prints one line and turns a 0 into 1:
 *   PROG: standard output: write failed: No space left on device
 *   PROG: standard output is closed: nothing could be written
 * Files written whole go through mi_out_write_file(): a temp file next to
 * the target, every write checked, fsync, rename. */
#ifndef MI_CORE_UTIL_OUT_H
#define MI_CORE_UTIL_OUT_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

void mi_out_init(void);
/* 1 once something written to stdout is known lost (closed, write error). */
int mi_out_stdout_failed(void);
/* Flushes stdout; 0, or -1 when it is closed or a write failed. Cheap: for
 * a streaming loop that should stop when nobody can read it. */
int mi_out_flush_stdout(void);
/* Flush + close stdout, report a loss once; returns rc, or 1 when rc was 0
 * and output was lost. */
int mi_out_finish(const char *prog, int rc);
/* Writes data to path: a regular file or a new path atomically
 * (PATH.tmp.PID beside it, fsync, rename; the file's mode kept); a symlink's
 * target likewise, the link kept; a device, FIFO or socket written through
 * (never replaced: /dev/full fails with ENOSPC, /dev/null swallows it, a
 * FIFO with no reader is refused rather than waited on); a directory
 * refused. 0, or -1 with "PATH: cannot write: WHY" in err. */
int mi_out_write_file(const char *path, const void *data, size_t len, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
