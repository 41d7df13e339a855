/* Strict parsing of numbers given on a command line or in an environment
 * variable: the one helper every CLI uses, so "abc", "12abc", " 7", "",
 * overflow, NaN and out-of-range values are errors, never 0.
 *
 * mi_parse_* return 0 and store the value, or -1 and leave *out alone.
 * mi_opt_* also print one line on stderr:
 *   PROG: OPT expects an integer in [LO, HI], got 'abc'
 *   PROG: OPT expects a number in [LO, HI], got 'nan'
 *   PROG: OPT expects a size (bytes, or with K, M, G, T: 8G, 512M), got '1X' */
#ifndef MI_CORE_UTIL_NUM_H
#define MI_CORE_UTIL_NUM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decimal integer, optional sign, nothing before or after, in [lo, hi]. */
int mi_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Decimal unsigned integer (no sign at all) in [lo, hi]. */
int mi_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A finite decimal number in [lo, hi] (no NaN, no infinity, no hex). */
int mi_parse_double(const char *s, double lo, double hi, double *out);
/* A byte count: an unsigned integer, optionally followed by one of K, M,
 * G, T (powers of 1024; "KiB"/"K"/"k", "MiB"/"M", ...), not 0, no overflow. */
int mi_parse_size(const char *s, uint64_t *out);

int mi_opt_i64(const char *prog, const char *opt, const char *s, int64_t lo, int64_t hi,
               int64_t *out);
int mi_opt_u64(const char *prog, const char *opt, const char *s, uint64_t lo, uint64_t hi,
               uint64_t *out);
int mi_opt_double(const char *prog, const char *opt, const char *s, double lo, double hi,
                  double *out);
int mi_opt_size(const char *prog, const char *opt, const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
