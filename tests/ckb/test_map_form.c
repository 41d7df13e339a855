/* Kernel expressions and the map form (core/ckb/map_form.h): values
 * against C's math computed here independently, the C each expression
 * becomes compiled into this test by hand and compared, every malformed
 * expression or signature refused with one line that names the problem,
 * and hostile input (deep nesting, huge node counts, control characters)
 * bounded. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/map_form.h"
#include "tests/util/check_main.h"

static double eval1(const char *src, const char *name, double v) {
  char err[256] = "";
  mi_kexpr *e = mi_kexpr_parse(src, err, sizeof err);
  ck_assert_msg(e, "%s: %s", src, err);
  double vals[16] = {0};
  for (int i = 0; i < mi_kexpr_n_names(e); i++) {
    ck_assert_msg(!strcmp(mi_kexpr_name(e, i), name), "%s: reads '%s'", src, mi_kexpr_name(e, i));
    vals[i] = v;
  }
  double r = mi_kexpr_eval(e, vals);
  mi_kexpr_free(e);
  return r;
}

START_TEST(test_eval) {
  const double xs[] = {-95.0, -3.5, -1e-3, 0.0, 0.25, 2.0, 40.0, 95.0};
  for (size_t k = 0; k < sizeof xs / sizeof *xs; k++) {
    double x = xs[k];
    double g = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    ck_assert_double_eq_tol(eval1("0.5*x*(1+tanh(0.7978845608028654*(x+0.044715*x*x*x)))", "x", x), g,
                            1e-12 * (1 + fabs(g)));
    ck_assert_double_eq_tol(eval1("30 * tanh(x / 30)", "x", x), 30 * tanh(x / 30), 1e-12);
    ck_assert_double_eq_tol(eval1("sigmoid(x)", "x", x), 1 / (1 + exp(-x)), 1e-15);
    double sp = x > 30 ? x : log(1 + exp(x));
    ck_assert_double_eq_tol(eval1("softplus(x)", "x", x), sp, 1e-12 * (1 + fabs(sp)));
    ck_assert_double_eq_tol(eval1("- -x - 2 * -x", "x", x), 3 * x, 1e-12 * (1 + fabs(x)));
    ck_assert_double_eq_tol(eval1("max(x, 0) + min(x, 0) - x", "x", x), 0, 1e-12);
    ck_assert_double_eq_tol(eval1("abs(x) * 1.5e1 / 3E+0", "x", x), fabs(x) * 5, 1e-12 * (1 + fabs(x)));
    ck_assert_double_eq_tol(eval1("x * 0.5 * (1 + erf(x / sqrt(2)))", "x", x),
                            x * 0.5 * (1 + erf(x / sqrt(2))), 1e-12 * (1 + fabs(x)));
    ck_assert_double_eq(eval1("floor(x) + ceil(x)", "x", x), floor(x) + ceil(x));
  }
  /* floor and ceil round toward -inf and +inf (YaRN's correction range) */
  ck_assert_double_eq(eval1("floor(-0.5)", "q", 0), -1);
  ck_assert_double_eq(eval1("ceil(-0.5) + ceil(1.25)", "q", 0), 2);
  /* precedence and left associativity */
  ck_assert_double_eq(eval1("8 - 2 - 1 + 2 * 3 / 4", "q", 0), 6.5);
  ck_assert_double_eq(eval1("pow(2, 10) - exp(log(4))", "q", 0), 1020);
}
END_TEST

/* two names, in first-use order, and the C written for them */
START_TEST(test_names_and_c) {
  char err[256] = "", c[512];
  mi_kexpr *e = mi_kexpr_parse("up * sigmoid(gate) + gate - up", err, sizeof err);
  ck_assert_msg(e, "%s", err);
  ck_assert_int_eq(mi_kexpr_n_names(e), 2);
  ck_assert_str_eq(mi_kexpr_name(e, 0), "up");
  ck_assert_str_eq(mi_kexpr_name(e, 1), "gate");
  ck_assert_ptr_null(mi_kexpr_name(e, 2));
  const char *names[] = {"u[i]", "g[i]"};
  ck_assert_int_eq(mi_kexpr_c(e, names, c, sizeof c, err, sizeof err), 0);
  ck_assert_str_eq(c, "(((u[i] * (1.0f / (1.0f + expf(-(g[i]))))) + g[i]) - u[i])");
  /* too small a buffer is an error, not a cut expression */
  ck_assert_int_eq(mi_kexpr_c(e, names, c, 12, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "does not fit"));
  mi_kexpr_free(e);

  e = mi_kexpr_parse("2 * x + 1e-5 + .5 + softplus(x)", err, sizeof err);
  const char *xn[] = {"v"};
  ck_assert_int_eq(mi_kexpr_c(e, xn, c, sizeof c, err, sizeof err), 0);
  ck_assert_str_eq(c, "((((2.0f * v) + 1e-5f) + .5f) + (fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v)))))");
  mi_kexpr_free(e);
}
END_TEST

static void parse_bad(const char *src, const char *want) {
  char err[256] = "";
  mi_kexpr *e = mi_kexpr_parse(src, err, sizeof err);
  ck_assert_msg(!e, "'%s' parsed", src);
  ck_assert_msg(strstr(err, want), "'%s': got \"%s\", want \"%s\"", src, err, want);
  ck_assert_ptr_null(strchr(err, '\n'));
}

START_TEST(test_refused) {
  parse_bad("", "unexpected end");
  parse_bad("x +", "unexpected end");
  parse_bad("(x", "expected ')'");
  parse_bad("x)", "trailing text");
  parse_bad("cosh(x)", "unknown function 'cosh'");
  parse_bad("exp + 1", "without '('");
  parse_bad("exp(x, y)", "one argument");
  parse_bad("max(x)", "two arguments");
  parse_bad("1e+", "exponent");
  parse_bad("1e999", "out of range");
  parse_bad("x $ y", "trailing text");
  parse_bad("x\n+ 1", "trailing text");
  parse_bad("0x10", "trailing text");
  parse_bad("a+b+c+d+e+f+g+h+i+j+k+l+m+n+o+p+q", "more than 16");
  /* hostile: deep nesting and node floods are refused, not recursed into */
  char *deep = malloc(200001);
  memset(deep, '(', 100000);
  memset(deep + 100000, ')', 100000);
  deep[200000] = 0;
  parse_bad(deep, "deeper than 64");
  memset(deep, '-', 200000);
  parse_bad(deep, "deeper than 64");
  for (int i = 0; i < 100000; i++) deep[2 * i] = 'x', deep[2 * i + 1] = '+';
  deep[199999] = 0;
  parse_bad(deep, "more than 1024 nodes");
  free(deep);
}
END_TEST

static json_t *op_with(const char *map, const char *args) {
  char buf[2048];
  snprintf(buf, sizeof buf, "{\"id\": \"operator.t\", \"map\": %s, \"signature\": {\"args\": [%s]}}", map, args);
  json_error_t je;
  json_t *op = json_loads(buf, 0, &je);
  ck_assert_msg(op, "%s", je.text);
  return op;
}

#define A_CTX "{\"name\":\"ctx\",\"kind\":\"ctx\"},{\"name\":\"s\",\"kind\":\"stream\"}"
#define A_Y2 "{\"name\":\"y\",\"kind\":\"out\",\"dtype\":\"f32\",\"shape\":[\"rows\",\"n\"]}"
#define A_X2 "{\"name\":\"x\",\"kind\":\"in\",\"dtype\":\"f32\",\"shape\":[\"rows\", \"n\"]}"
#define A_B "{\"name\":\"b\",\"kind\":\"in\",\"dtype\":\"f32\",\"shape\":[\"n\"]}"
#define A_R "{\"name\":\"g\",\"kind\":\"in\",\"dtype\":\"f32\",\"shape\":[\"rows\"]}"
#define A_N "{\"name\":\"rows\",\"kind\":\"i64\"},{\"name\":\"n\",\"kind\":\"i64\"},{\"name\":\"c\",\"kind\":\"f32\"}"

START_TEST(test_form) {
  char err[512] = "";
  mi_map_form f;
  json_t *op = op_with("{\"out\":\"y\",\"expr\":\"c * x * g + b\"}", A_CTX "," A_Y2 "," A_X2 "," A_B "," A_R "," A_N);
  ck_assert_msg(mi_map_form_parse(op, &f, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(f.dims, 2);
  ck_assert_int_eq(f.out_arg, 2);
  ck_assert_str_eq(f.rows_expr, "rows");
  ck_assert_str_eq(f.n_expr, "n");
  ck_assert_int_eq(f.names.n, 4);
  const int want_arg[] = {8, 3, 5, 4};
  const mi_map_role want_role[] = {MI_MAP_SCALAR, MI_MAP_ELEM, MI_MAP_ROW, MI_MAP_COL};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(f.names.arg[k], want_arg[k]);
    ck_assert_int_eq(f.names.role[k], want_role[k]);
  }
  mi_map_form_free(&f);
  json_decref(op);

  struct {
    const char *map, *args, *want;
  } bad[] = {
      {"{\"out\":\"y\"}", A_CTX "," A_Y2, "no \"map\""},
      {"{\"out\":\"x\",\"expr\":\"b\"}", A_CTX "," A_X2 "," A_B, "must name an f32 \"out\""},
      {"{\"out\":\"y\",\"expr\":\"x + z\"}", A_CTX "," A_Y2 "," A_X2, "'z', which is no argument"},
      {"{\"out\":\"y\",\"expr\":\"y + x\"}", A_CTX "," A_Y2 "," A_X2, "reads 'y', an argument of kind out"},
      {"{\"out\":\"y\",\"expr\":\"x +\"}", A_CTX "," A_Y2 "," A_X2, "map.expr: kernel expression"},
      {"{\"out\":\"y\",\"expr\":\"x + w\"}",
       A_CTX "," A_Y2 "," A_X2 ",{\"name\":\"w\",\"kind\":\"in\",\"dtype\":\"f32\",\"shape\":[\"m\"]}",
       "input 'w' has a shape"},
      {"{\"out\":\"y\",\"expr\":\"x + w\"}",
       A_CTX "," A_Y2 "," A_X2 ",{\"name\":\"w\",\"kind\":\"in\",\"dtype\":\"bf16\",\"shape\":[\"n\"]}",
       "non-f32"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    op = op_with(bad[i].map, bad[i].args);
    ck_assert_int_eq(mi_map_form_parse(op, &f, err, sizeof err), -1);
    ck_assert_msg(strstr(err, bad[i].want) && strstr(err, "operator.t"), "case %zu: got \"%s\", want \"%s\"", i,
                  err, bad[i].want);
    ck_assert_ptr_null(f.expr);
    json_decref(op);
  }
}
END_TEST

/* operator.rope_llama3's frequency, as the CKB states it (one clamped
 * expression), against Llama 3.1's definition written here band by band:
 * wavelengths under original / high_freq_factor kept, over original /
 * low_freq_factor divided by factor, the band between interpolated with
 * smooth = (original / wavelength - low) / (high - low). */
static double llama3_piecewise(double theta, int64_t i, int64_t rot, double factor, double low, double high,
                               double orig) {
  const double inv = pow(theta, -2.0 * (double)i / (double)rot), wl = 2 * M_PI / inv;
  if (wl < orig / high) return inv;
  if (wl > orig / low) return inv / factor;
  const double sm = (orig / wl - low) / (high - low);
  return (1 - sm) * inv / factor + sm * inv;
}

START_TEST(rope_llama3_frequency) {
  char path[4200], err[512] = "";
  snprintf(path, sizeof path, "%s/ckb/operators/rope_llama3.json", getenv("MI_SOURCE_DIR"));
  json_error_t je;
  json_t *op = json_load_file(path, 0, &je);
  ck_assert_msg(op, "%s: %s", path, je.text);
  mi_rotary_form f;
  ck_assert_msg(mi_rotary_form_parse(op, &f, err, sizeof err) == 0, "%s", err);
  const struct {
    double theta, factor, low, high, orig;
    int64_t rot;
  } cfgs[] = {{500000, 8, 1, 4, 8192, 128}, {500000, 32, 1, 4, 8192, 64}, {10000, 32, 1, 4, 64, 16},
              {500000, 16, 2, 8, 512, 128}};
  for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++)
    for (int64_t i = 0; i < cfgs[c].rot / 2; i++) {
      double v[MI_MAP_MAX_NAMES];
      for (int k = 0; k < f.n_names; k++) {
        const char *n = mi_kexpr_name(f.freq, k);
        v[k] = !strcmp(n, "i") ? (double)i : !strcmp(n, "rot_dim") ? (double)cfgs[c].rot : !strcmp(n, "theta") ? cfgs[c].theta
             : !strcmp(n, "factor") ? cfgs[c].factor : !strcmp(n, "low_freq_factor") ? cfgs[c].low
             : !strcmp(n, "high_freq_factor") ? cfgs[c].high : !strcmp(n, "original_max_position_embeddings") ? cfgs[c].orig
             : NAN;
      }
      const double got = mi_kexpr_eval(f.freq, v);
      const double want = llama3_piecewise(cfgs[c].theta, i, cfgs[c].rot, cfgs[c].factor, cfgs[c].low, cfgs[c].high,
                                           cfgs[c].orig);
      ck_assert_msg(fabs(got - want) <= 1e-12 * want, "config %zu pair %lld: %.17g vs %.17g", c, (long long)i, got, want);
    }
  mi_rotary_form_free(&f);
  /* a rotary form without operator.rope's arguments is refused by name */
  json_array_remove(json_object_get(json_object_get(op, "signature"), "args"), 3); /* pos */
  ck_assert_int_eq(mi_rotary_form_parse(op, &f, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "operator.rope_llama3") && strstr(err, "'pos'"), "%s", err);
  ck_assert_ptr_null(f.freq);
  json_decref(op);
}
END_TEST

/* The masked-attention form: operator.attention_window's window as the
 * definition states it (visible iff i - j < window), the floor and the
 * clamp to [0, i] on expressions made here, and each malformed form or
 * signature refused with one line naming the operator. */
static json_t *load_op(const char *file) {
  char path[4200];
  snprintf(path, sizeof path, "%s/ckb/operators/%s.json", getenv("MI_SOURCE_DIR"), file);
  json_error_t je;
  json_t *op = json_load_file(path, 0, &je);
  ck_assert_msg(op, "%s: %s", path, je.text);
  return op;
}

/* name k's value: `window` is w, every other scalar NaN (i is the form's) */
static void window_values(const mi_masked_attention_form *f, double w, double *v) {
  for (int k = 0; k < f->n_names; k++) v[k] = !strcmp(mi_kexpr_name(f->first_key, k), "window") ? w : NAN;
}

START_TEST(masked_attention_form) {
  char err[512] = "";
  json_t *op = load_op("attention_window");
  mi_masked_attention_form f;
  ck_assert_msg(mi_masked_attention_form_parse(op, &f, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(f.n_names, 2);
  const int64_t windows[] = {1, 2, 5, 4096};
  for (size_t w = 0; w < sizeof windows / sizeof *windows; w++)
    for (int64_t i = 0; i < 200; i++) {
      double v[MI_MAP_MAX_NAMES];
      window_values(&f, (double)windows[w], v);
      int64_t first = mi_masked_attention_first(&f, i, v), want = 0;
      while (want <= i && !(i - want < windows[w])) want++; /* the first j with i - j < window */
      ck_assert_msg(first == want, "window %lld i %lld: %lld, want %lld", (long long)windows[w], (long long)i,
                    (long long)first, (long long)want);
    }
  mi_masked_attention_form_free(&f);
  ck_assert_ptr_null(f.first_key);

  /* floor, then [0, i]: a fraction rounds down, past i is i, NaN is 0 */
  const struct {
    const char *expr;
    double window;
    int64_t i, want;
  } fk[] = {{"i - window / 2", 5, 10, 7},     {"i - window / 2", 5, 1, 0},  {"0 - window / 2", 3, 4, 0},
            {"i + window", 3, 4, 4},          {"window * 0.5", 7, 9, 3},    {"window / 0", 1, 6, 6},
            {"sqrt(0 - window)", 1, 6, 0},    {"max(i - window, 2)", 3, 1, 1}};
  for (size_t k = 0; k < sizeof fk / sizeof *fk; k++) {
    json_object_set_new(json_object_get(op, "masked_attention"), "first_key", json_string(fk[k].expr));
    ck_assert_msg(mi_masked_attention_form_parse(op, &f, err, sizeof err) == 0, "%s", err);
    double v[MI_MAP_MAX_NAMES];
    window_values(&f, fk[k].window, v);
    ck_assert_msg(mi_masked_attention_first(&f, fk[k].i, v) == fk[k].want, "%s at i %lld window %g: %lld, want %lld",
                  fk[k].expr, (long long)fk[k].i, fk[k].window, (long long)mi_masked_attention_first(&f, fk[k].i, v),
                  (long long)fk[k].want);
    mi_masked_attention_form_free(&f);
  }
  json_decref(op);

  /* refusals, each one line naming the operator */
  struct {
    const char *what, *want;
  } bad[] = {
      {"a name that is no argument", "first_key reads 'n_ctx', which is neither i (the query's position) nor a scalar"},
      {"a buffer", "first_key reads 'q', which is neither i (the query's position) nor a scalar"},
      {"the dtype", "first_key reads 'kv_dtype', which is neither i"},
      {"no form", "no \"masked_attention\" with a \"first_key\" string"},
      {"a bad expression", "masked_attention.first_key: kernel expression"},
      {"attention's arguments in another order", "starts with exactly operator.attention's arguments; argument 8 is not 'Hq'"},
      {"a missing argument", "argument 12 is not 'scale' (f32)"},
      {"k_cache in f32", "argument 4 is not 'k_cache' (in $kv_dtype)"},
      {"another shape", "argument 5 is not 'v_cache'"},
      {"a buffer of its own", "argument 'bias' after operator.attention's is of kind in"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    op = load_op("attention_window");
    json_t *form = json_object_get(op, "masked_attention"), *args = json_object_get(json_object_get(op, "signature"), "args");
    switch (k) {
    case 0: json_object_set_new(form, "first_key", json_string("i - n_ctx")); break;
    case 1: json_object_set_new(form, "first_key", json_string("i - q")); break;
    case 2: json_object_set_new(form, "first_key", json_string("kv_dtype")); break;
    case 3: json_object_del(op, "masked_attention"); break;
    case 4: json_object_set_new(form, "first_key", json_string("i - window +")); break;
    case 5: {
      json_t *hkv = json_incref(json_array_get(args, 9));
      json_array_remove(args, 9);
      json_array_insert_new(args, 8, hkv);
      break;
    }
    case 6: json_array_remove(args, 12); break;
    case 7: json_object_set_new(json_array_get(args, 4), "dtype", json_string("f32")); break;
    case 8: json_array_set_new(json_object_get(json_array_get(args, 5), "shape"), 0, json_string("T")); break;
    case 9:
      json_array_append_new(args, json_pack("{s:s, s:s, s:s, s:[s]}", "name", "bias", "kind", "in", "dtype", "f32",
                                            "shape", "D"));
      break;
    }
    ck_assert_int_eq(mi_masked_attention_form_parse(op, &f, err, sizeof err), -1);
    ck_assert_msg(strstr(err, bad[k].want) && !strncmp(err, "operator.attention_window: ", 27) && !strchr(err, '\n'),
                  "%s: got \"%s\", want \"%s\"", bad[k].what, err, bad[k].want);
    ck_assert_ptr_null(f.first_key);
    json_decref(op);
  }
}
END_TEST

int main(void) {
  return mi_check_run(mi_check_suite("map_form", "map_form", 60, NULL, NULL,
                                     MI_CHECK_TESTS(test_eval, test_names_and_c, test_refused, test_form, rope_llama3_frequency,
                                                    masked_attention_form)));
}
