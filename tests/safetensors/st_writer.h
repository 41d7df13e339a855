/* Test helpers: temp dirs and hand-made safetensors files (good or broken). */
#ifndef MI_TEST_ST_WRITER_H
#define MI_TEST_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* mkdtemp under $TMPDIR or /tmp; aborts the test on failure. Caller frees. */
char *tw_mkdtemp(const char *tag);
/* rm -rf dir (only what we made: regular files and subdirectories). */
void tw_rmtree(const char *dir);
/* dir/name into a malloc'd string. */
char *tw_path(const char *dir, const char *name);

/* Writes bytes verbatim; returns 0 ok. */
int tw_write_raw(const char *path, const void *bytes, size_t n);
/* Writes a safetensors file: u64 LE len(header), header, data. */
int tw_write_st(const char *path, const char *header, const void *data, size_t data_len);
/* Same with an explicit header-length field (to lie about it). */
int tw_write_st_len(const char *path, uint64_t hlen_field, const char *header, const void *data, size_t data_len);
/* Whole file into malloc'd memory (*n = size); NULL on error. */
void *tw_read_all(const char *path, size_t *n);

#endif
