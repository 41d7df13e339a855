/* Strict number parsing: see num.h. */
#include "core/util/num.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what strto* would skip or accept that a strict reader must not */
static int plain_start(const char *s) {
  return s && *s && !isspace((unsigned char)*s);
}

int mi_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!plain_start(s)) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int64_t)v;
  return 0;
}

int mi_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (!plain_start(s) || !isdigit((unsigned char)*s)) return -1; /* strtoull takes "-1" */
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (uint64_t)v;
  return 0;
}

int mi_parse_double(const char *s, double lo, double hi, double *out) {
  if (!plain_start(s)) return -1;
  /* decimal only: strtod also reads "nan", "inf" and hex floats */
  for (const char *p = s; *p; p++)
    if (!strchr("0123456789+-.eE", *p)) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

int mi_parse_size(const char *s, uint64_t *out) {
  if (!plain_start(s) || !isdigit((unsigned char)*s)) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned shift = 0;
  if (*end) {
    switch (*end) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: return -1;
    }
    end++;
    if (!strcmp(end, "iB") || !strcmp(end, "B")) end += strlen(end);
    if (*end) return -1;
  }
  if (v == 0 || (shift && v > (UINT64_MAX >> shift))) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

/* the value as the user gave it, cut and one line */
static void shown(const char *s, char *buf, size_t n) {
  snprintf(buf, n, "%s", s ? s : "");
  for (char *p = buf; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
}

int mi_opt_i64(const char *prog, const char *opt, const char *s, int64_t lo, int64_t hi,
               int64_t *out) {
  if (mi_parse_i64(s, lo, hi, out) == 0) return 0;
  char b[80];
  shown(s, b, sizeof b);
  fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], got '%s'\n", prog, opt,
          (long long)lo, (long long)hi, b);
  return -1;
}

int mi_opt_u64(const char *prog, const char *opt, const char *s, uint64_t lo, uint64_t hi,
               uint64_t *out) {
  if (mi_parse_u64(s, lo, hi, out) == 0) return 0;
  char b[80];
  shown(s, b, sizeof b);
  fprintf(stderr, "%s: %s expects an integer in [%llu, %llu], got '%s'\n", prog, opt,
          (unsigned long long)lo, (unsigned long long)hi, b);
  return -1;
}

int mi_opt_double(const char *prog, const char *opt, const char *s, double lo, double hi,
                  double *out) {
  if (mi_parse_double(s, lo, hi, out) == 0) return 0;
  char b[80];
  shown(s, b, sizeof b);
  fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", prog, opt, lo, hi, b);
  return -1;
}

int mi_opt_size(const char *prog, const char *opt, const char *s, uint64_t *out) {
  if (mi_parse_size(s, out) == 0) return 0;
  char b[80];
  shown(s, b, sizeof b);
  fprintf(stderr, "%s: %s expects a size (bytes, or with K, M, G, T: 8G, 512M), got '%s'\n", prog,
          opt, b);
  return -1;
}
