/* Fuzzes the CKB integer expression language (shapes "pos0 + T",
 * constraints "Hq % Hkv == 0"): mi_expr_eval with names bound to extreme
 * values, mi_expr_eval_f64 (real-valued bindings such as
 * "int:partial_rotary_factor * head_dim": the result finite or an error),
 * mi_expr_names (the validator's syntax/name pass), and the kernel
 * expressions of map operators (mi_kexpr_parse, its float64 value at
 * extreme inputs, its C: NaN and infinities are values there, never a
 * crash; an error is one line). Any
 * overflow must be an error, never undefined behaviour; a deep nesting must
 * be an error, never a stack overflow. */
#include "fuzz_util.h"

#include <math.h>

#include "core/ckb/ckb.h"
#include "core/ckb/map_form.h"

static int lookup(void *user, const char *name, size_t len, int64_t *out) {
  (void)user;
  static const struct { const char *n; int64_t v; } vars[] = {
      {"T", 7}, {"H", 4096}, {"Z", 0}, {"N", -1}, {"MAX", INT64_MAX}, {"MIN", INT64_MIN}};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (strlen(vars[i].n) == len && !memcmp(vars[i].n, name, len)) {
      *out = vars[i].v;
      return 0;
    }
  return -1;
}

static int lookup_f64(void *user, const char *name, size_t len, double *out) {
  int64_t v;
  if (lookup(user, name, len, &v) == 0) return *out = (double)v, 0;
  if (len == 1 && name[0] == 'F') return *out = 0.25, 0;
  if (len == 3 && !memcmp(name, "BIG", 3)) return *out = 1e308, 0;
  return -1;
}

static void count_name(void *user, const char *name, size_t len) {
  FUZZ_CHECK(len > 0, "empty name");
  ++*(size_t *)user;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  char err[256] = "";
  int64_t v;
  if (mi_expr_eval(s, lookup, NULL, &v, err, sizeof err) != 0) fuzz_check_one_line("mi_expr_eval", err);
  double d;
  err[0] = 0;
  if (mi_expr_eval_f64(s, lookup_f64, NULL, &d, err, sizeof err) != 0) fuzz_check_one_line("mi_expr_eval_f64", err);
  else FUZZ_CHECK(isfinite(d), "mi_expr_eval_f64 returned %g", d);
  size_t n = 0;
  err[0] = 0;
  if (mi_expr_names(s, count_name, &n, err, sizeof err) != 0) fuzz_check_one_line("mi_expr_names", err);
  err[0] = 0;
  mi_kexpr *k = mi_kexpr_parse(s, err, sizeof err);
  if (!k) {
    fuzz_check_one_line("mi_kexpr_parse", err);
  } else {
    int nn = mi_kexpr_n_names(k);
    FUZZ_CHECK(nn >= 0 && nn <= 16, "mi_kexpr_n_names %d", nn);
    double vals[16];
    const char *cn[16];
    char names[16][8];
    for (int i = 0; i < nn; i++) {
      FUZZ_CHECK(mi_kexpr_name(k, i) && mi_kexpr_name(k, i)[0], "name %d", i);
      vals[i] = i % 3 == 0 ? 1e300 : i % 3 == 1 ? -0.0 : -7.5;
      snprintf(names[i], sizeof names[i], "v%d", i);
      cn[i] = names[i];
    }
    (void)mi_kexpr_eval(k, vals);
    char c[4096];
    err[0] = 0;
    if (mi_kexpr_c(k, cn, c, sizeof c, err, sizeof err) != 0) fuzz_check_one_line("mi_kexpr_c", err);
    mi_kexpr_free(k);
  }
  free(s);
  return 0;
}
