/* The kernel-pack generator's writer: C source for the target "host-c" from
 * the CKB's map operators (core/gen/pack/pack.h). One kernel per operator:
 * an args struct, a loop body over chunks of the output's domain, and the
 * kernel with exactly the contract's signature that checks what the
 * contract says (bound pack, constraints, buffers, shape) and hands the
 * body to the bound platform's run_host. Then the pack's context, bind,
 * the interface and the plugin descriptor.
 *
 * Every name the generated code declares itself starts with "mi_"; an
 * argument may not (nor be a C keyword or a function the expression calls),
 * so the contract's argument names are used as they are, and the kernel
 * reads like its contract. Nothing depends on the time, the paths or the
 * order of the CKB's files: the same entries give the same bytes. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckb/map_form.h"
#include "core/gen/gen.h"
#include "core/gen/pack/pack.h"
#include "mi/plugin.h"

#define PK_CHUNK 16384 /* elements a chunk: a few L1/L2 pages, big enough to amortise a task */
#define PK_EXPR_MAX 8192

typedef struct pk_op {
  const mi_ckb_entry *e;
  const char *id, *base, *version, *expr, *math;
  const char *score_expr; /* a masked form's score map as the CKB states it, or NULL */
  json_t *args; /* signature.args (borrowed) */
  mi_map_form f;
  int parsed;
  int rotary;        /* the rotary form (core/ckb/map_form.h) instead of a map */
  mi_rotary_form rf; /* its frequency expression and operator.rope's arguments */
  int masked;                  /* the masked-attention form instead of a map */
  mi_masked_attention_form mf; /* its first-key expression */
  char sha[65]; /* of the entry's canonical JSON: which knowledge the kernel came from */
  char body_c[PK_EXPR_MAX]; /* the expression as float C over the body's names */
  char amp_c[PK_EXPR_MAX];  /* a rotary form's amplitude as double C ("1.0" without one) */
  char score_c[PK_EXPR_MAX]; /* a masked form's score map as double C over mi_s ("" without one) */
  char red_sum_c[MI_MAP_MAX_REDUCE][PK_EXPR_MAX];  /* a map's row reductions: each sum's term, double C */
  char red_then_c[MI_MAP_MAX_REDUCE][PK_EXPR_MAX]; /* and what follows the sum ("" for none) */
} pk_op;

/* ---------- small writers ---------- */

/* s as the inside of a C string literal; printf-safe too when fmt (% doubled). */
static void put_lit(FILE *o, const char *s, int fmt) {
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(o, "\\%c", ch);
    else if (ch == '%' && fmt)
      fputs("%%", o);
    else if (ch == '?')
      fputs("\\?", o); /* no trigraph can form */
    else if (ch < 0x20 || ch == 0x7f)
      fprintf(o, "\\%03o", ch);
    else
      fputc(ch, o);
  }
}

/* s inside a block comment: one line, and never the comment's end. */
static void put_comment(FILE *o, const char *s) {
  for (const char *p = s; p && *p; p++) {
    if (p[0] == '*' && p[1] == '/')
      fputs("* ", o);
    else
      fputc((unsigned char)*p < 0x20 ? ' ' : *p, o);
  }
}

static const char *arg_name(json_t *a) {
  return json_string_value(json_object_get(a, "name"));
}
static const char *arg_kind(json_t *a) {
  const char *k = json_string_value(json_object_get(a, "kind"));
  return k ? k : "";
}

/* The C type of an argument of the contract; NULL when a host-C kernel
 * cannot carry it. */
static const char *c_type(json_t *a) {
  const char *k = arg_kind(a), *dt = json_string_value(json_object_get(a, "dtype"));
  if (!strcmp(k, "ctx")) return "void *";
  if (!strcmp(k, "stream")) return "mi_stream *";
  if (!strcmp(k, "i64")) return "int64_t ";
  if (!strcmp(k, "i32")) return "int32_t ";
  if (!strcmp(k, "f32")) return "float ";
  if (!strcmp(k, "f64")) return "double ";
  if (!strcmp(k, "dtype")) return "mi_dtype ";
  if (dt && !strcmp(dt, "i32") && !strcmp(k, "in")) return "const int32_t *"; /* positions */
  if (dt && dt[0] == '$' && !strcmp(k, "in")) return "const void *"; /* in the dtype its argument names */
  if (!dt || strcmp(dt, "f32")) return NULL; /* f32 buffers only: the expression is float C */
  if (!strcmp(k, "in")) return "const float *";
  if (!strcmp(k, "out") || !strcmp(k, "inout")) return "float *";
  return NULL;
}

/* c_type, less what only the masked-attention form reads: a dtype
 * argument and a buffer in the dtype one names. */
static const char *plain_c_type(json_t *a) {
  const char *dt = json_string_value(json_object_get(a, "dtype"));
  if (!strcmp(arg_kind(a), "dtype") || (dt && dt[0] == '$')) return NULL;
  return c_type(a);
}

static int is_buffer(json_t *a) {
  const char *k = arg_kind(a);
  return !strcmp(k, "in") || !strcmp(k, "out") || !strcmp(k, "inout");
}
static int is_int(json_t *a) {
  return !strcmp(arg_kind(a), "i64") || !strcmp(arg_kind(a), "i32");
}

/* A name the generated C cannot give an argument: a keyword, a type or a
 * function the kernel uses, or the generator's own "mi_" prefix. */
static int reserved_name(const char *n) {
  static const char *const words[] = {
      "auto",     "break",  "case",   "char",     "const",    "continue", "default",  "do",
      "double",   "else",   "enum",   "extern",   "float",    "for",      "goto",     "if",
      "inline",   "int",    "long",   "register", "restrict", "return",   "short",    "signed",
      "sizeof",   "static", "struct", "switch",   "typedef",  "union",    "unsigned", "void",
      "volatile", "while",  "asm",    "typeof",   "int64_t",  "int32_t",  "size_t",   "va_list",
      "NULL",     "expf",   "logf",   "log1pf",   "tanhf",    "sqrtf",    "fabsf",    "erff",
      "fminf",    "fmaxf",  "powf"};
  if (!strncmp(n, "mi_", 3) || !strncmp(n, "MI_", 3) || n[0] == '_') return 1;
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    if (!strcmp(n, words[i])) return 1;
  return 0;
}

/* mi_expr_c's name writer: an integer argument is a parameter of the
 * kernel, spelled as it is. */
static int int_param(void *user, const char *name, size_t len, char *out, size_t out_len) {
  json_t *args = user, *a;
  size_t i;
  json_array_foreach(args, i, a) {
    const char *n = arg_name(a);
    if (n && strlen(n) == len && !strncmp(n, name, len) && is_int(a)) {
      snprintf(out, out_len, "%s", n);
      return strlen(n) < out_len ? 0 : -1;
    }
  }
  return -1;
}

/* ---------- choosing and reading the operators ---------- */

static void first_problem(void *user, const char *line) {
  char *buf = user;
  if (!buf[0]) snprintf(buf, 400, "%s", line);
}

static int cmp_op_id(const void *a, const void *b) {
  return strcmp(((const pk_op *)a)->id, ((const pk_op *)b)->id);
}

/* The SHA-256 of the entry's canonical JSON into op->sha: which knowledge
 * the kernel came from. */
static int entry_sha(const mi_ckb_entry *e, pk_op *op, char *err, size_t err_len) {
  char *canon = json_dumps(e->json, JSON_COMPACT | JSON_SORT_KEYS);
  if (!canon) {
    snprintf(err, err_len, "%s: out of memory", e->id);
    return -1;
  }
  mi_sha256_buf(canon, strlen(canon), op->sha);
  free(canon);
  return 0;
}

/* A form's expression x as double C over the index mi_i and the scalar
 * arguments (each spelled arg_prefix NAME), into out. */
static int form_c64_index(const mi_ckb_entry *e, const pk_op *op, const mi_kexpr *x, int n_names,
                          const int *name_arg, const char *index_c, const char *arg_prefix, char *out, size_t out_len,
                          char *err, size_t err_len) {
  const char *names[MI_MAP_MAX_NAMES];
  char store[MI_MAP_MAX_NAMES][96];
  for (int k = 0; k < n_names; k++) {
    if (name_arg[k] < 0) snprintf(store[k], sizeof store[k], "((double)%s)", index_c);
    else snprintf(store[k], sizeof store[k], "((double)%s%s)", arg_prefix, arg_name(json_array_get(op->args, (size_t)name_arg[k])));
    names[k] = store[k];
  }
  char kerr[300];
  if (mi_kexpr_c64(x, names, out, out_len, kerr, sizeof kerr) != 0) {
    snprintf(err, err_len, "%s: %s", e->id, kerr);
    return -1;
  }
  return 0;
}

/* form_c64_index over the index mi_i. */
static int form_c64(const mi_ckb_entry *e, const pk_op *op, const mi_kexpr *x, int n_names, const int *name_arg,
                    const char *arg_prefix, char *out, size_t out_len, char *err, size_t err_len) {
  return form_c64_index(e, op, x, n_names, name_arg, "mi_i", arg_prefix, out, out_len, err, err_len);
}

/* What the rotary and masked-attention forms share: every argument one a
 * host-C kernel can carry (carry), the form's expression x as double C over
 * the index mi_i and the scalar arguments (each spelled arg_prefix NAME),
 * then the entry's hash. */
static int read_double_form(const mi_ckb_entry *e, pk_op *op, const mi_kexpr *x, int n_names, const int *name_arg,
                            const char *arg_prefix, const char *(*carry)(json_t *), char *err, size_t err_len) {
  size_t i;
  json_t *a;
  json_array_foreach(op->args, i, a) {
    const char *n = arg_name(a);
    if (reserved_name(n) || !carry(a)) {
      snprintf(err, err_len, "%s: argument '%s' cannot be a host-C kernel's (a reserved name, or a type it cannot carry)",
               e->id, n);
      return -1;
    }
  }
  if (form_c64(e, op, x, n_names, name_arg, arg_prefix, op->body_c, sizeof op->body_c, err, err_len) != 0) return -1;
  return entry_sha(e, op, err, err_len);
}

/* A rotary operator: operator.rope's arguments, its frequency in double C
 * over the pair index mi_i and the scalar arguments. */
static int read_rotary(const mi_ckb_entry *e, pk_op *op, char *err, size_t err_len) {
  op->expr = json_string_value(json_object_get(json_object_get(e->json, "rotary"), "freq"));
  if (mi_rotary_form_parse(e->json, &op->rf, err, err_len) != 0) return -1;
  op->parsed = 2;
  snprintf(op->amp_c, sizeof op->amp_c, "1.0");
  if (op->rf.amp &&
      form_c64(e, op, op->rf.amp, op->rf.n_amp_names, op->rf.amp_name_arg, "", op->amp_c, sizeof op->amp_c, err, err_len))
    return -1;
  return read_double_form(e, op, op->rf.freq, op->rf.n_names, op->rf.name_arg, "", plain_c_type, err, err_len);
}

/* A masked-attention operator: operator.attention's arguments and scalars of
 * its own, its first key in double C over the query's position mi_i and the
 * scalar arguments (read from the body's args struct). */
static int read_masked(const mi_ckb_entry *e, pk_op *op, char *err, size_t err_len) {
  op->expr = json_string_value(json_object_get(json_object_get(e->json, "masked_attention"), "first_key"));
  if (mi_masked_attention_form_parse(e->json, &op->mf, err, err_len) != 0) return -1;
  op->parsed = 3;
  op->score_c[0] = 0;
  op->score_expr = op->mf.score ? json_string_value(json_object_get(json_object_get(e->json, "masked_attention"), "score")) : NULL;
  if (op->mf.score && form_c64_index(e, op, op->mf.score, op->mf.n_score_names, op->mf.score_name_arg, "mi_s",
                                     "mi_a->", op->score_c, sizeof op->score_c, err, err_len) != 0)
    return -1;
  return read_double_form(e, op, op->mf.first_key, op->mf.n_names, op->mf.name_arg, "mi_a->", c_type, err, err_len);
}

/* Expression e of a map form as C over the body's names: a buffer element
 * at mi_i (its row's pointer set for a [rows, n] one), a row value at mi_r,
 * a scalar by name (an integer one as float, as the reference reads it), a
 * row reduction as mi_sJ. In float arithmetic (the element's expression)
 * or, c64, in double (a reduction's term and its then). */
static int map_c(const mi_ckb_entry *e, const pk_op *op, const mi_kexpr *x, const mi_map_names *nm, int c64,
                 char *out, size_t out_len, char *err, size_t err_len) {
  const char *names[MI_MAP_MAX_NAMES];
  char store[MI_MAP_MAX_NAMES][96];
  for (int k = 0; k < nm->n; k++) {
    if (nm->role[k] == MI_MAP_STAT) {
      snprintf(store[k], sizeof store[k], "mi_s%d", nm->arg[k]);
      names[k] = store[k];
      continue;
    }
    json_t *na = json_array_get(op->args, (size_t)nm->arg[k]);
    const char *n = arg_name(na);
    if (nm->role[k] == MI_MAP_ROW)
      snprintf(store[k], sizeof store[k], "%s[mi_r]", n);
    else if (nm->role[k] == MI_MAP_SCALAR)
      snprintf(store[k], sizeof store[k],
               c64 ? "((double)%s)" : strcmp(arg_kind(na), "f32") ? "((float)%s)" : "%s", n);
    else
      snprintf(store[k], sizeof store[k], c64 ? "((double)%s[mi_i])" : "%s[mi_i]", n);
    names[k] = store[k];
  }
  char kerr[300];
  if ((c64 ? mi_kexpr_c64 : mi_kexpr_c)(x, names, out, out_len, kerr, sizeof kerr) != 0) {
    snprintf(err, err_len, "%s: %s", e->id, kerr);
    return -1;
  }
  return 0;
}

/* Reads one operator entry into op: a map, rotary or masked-attention
 * operator the C can carry. */
static int read_op(const mi_ckb *ckb, const mi_ckb_entry *e, pk_op *op, char *err, size_t err_len) {
  json_t *j = e->json;
  const char *member = json_string_value(json_object_get(j, "member"));
  op->e = e;
  op->id = e->id;
  op->version = e->version ? e->version : "?";
  op->rotary = json_object_get(j, "rotary") != NULL;
  op->masked = json_object_get(j, "masked_attention") != NULL;
  if ((!json_object_get(j, "map") && !op->rotary && !op->masked) || !member || strcmp(member, "pack")) {
    snprintf(err, err_len,
             "%s: not an operator stated as an expression (member \"%s\", %s): a pack holds only "
             "operators with \"member\": \"pack\" and a \"map\" (or a \"rotary\" or \"masked_attention\" form)",
             e->id, member ? member : "?", json_object_get(j, "map") ? "a \"map\"" : "no \"map\"");
    return -1;
  }
  char problem[400] = "";
  if (mi_ckb_validate_entry(ckb, j, e->path, first_problem, problem) != 0) {
    snprintf(err, err_len, "%s: the entry does not validate: %s", e->id, problem);
    return -1;
  }
  op->base = e->id + strlen("operator.");
  op->math = json_string_value(json_object_get(j, "math"));
  op->args = json_object_get(json_object_get(j, "signature"), "args");
  if (op->rotary) return read_rotary(e, op, err, err_len);
  if (op->masked) return read_masked(e, op, err, err_len);
  op->expr = json_string_value(json_object_get(json_object_get(j, "map"), "expr"));
  if (mi_map_form_parse(j, &op->f, err, err_len) != 0) return -1;
  op->parsed = 1;

  size_t i;
  json_t *a;
  json_array_foreach(op->args, i, a) {
    const char *n = arg_name(a);
    if (reserved_name(n)) {
      snprintf(
          err, err_len,
          "%s: argument '%s' cannot be named so in C (a keyword, a name the kernel uses, or the "
          "generator's mi_ prefix)",
          e->id, n);
      return -1;
    }
    if (!plain_c_type(a)) {
      const char *dt = json_string_value(json_object_get(a, "dtype"));
      snprintf(err, err_len,
               "%s: argument '%s' (%s%s%s) has no host-C form: a pack kernel takes f32 buffers and "
               "i64, i32, f32, f64 scalars",
               e->id, n, arg_kind(a), dt ? " " : "", dt ? dt : "");
      return -1;
    }
    if ((int)i != op->f.out_arg && strcmp(arg_kind(a), "out") == 0) {
      snprintf(err, err_len,
               "%s: argument '%s' is a second out buffer: a map operator writes only map.out '%s'",
               e->id, n, op->f.out);
      return -1;
    }
  }

  if (map_c(e, op, op->f.expr, &op->f.names, 0, op->body_c, sizeof op->body_c, err, err_len) != 0) return -1;
  for (int j = 0; j < op->f.n_reduce; j++) {
    const mi_map_reduce *m = &op->f.reduce[j];
    op->red_then_c[j][0] = 0;
    if (map_c(e, op, m->sum, &m->sum_names, 1, op->red_sum_c[j], sizeof op->red_sum_c[j], err, err_len) != 0 ||
        (m->then && map_c(e, op, m->then, &m->then_names, 1, op->red_then_c[j], sizeof op->red_then_c[j], err,
                                 err_len) != 0))
      return -1;
  }
  return entry_sha(e, op, err, err_len);
}

static void free_ops(pk_op *ops, size_t n) {
  for (size_t k = 0; ops && k < n; k++)
    if (ops[k].parsed == 1) mi_map_form_free(&ops[k].f);
    else if (ops[k].parsed == 2) mi_rotary_form_free(&ops[k].rf);
    else if (ops[k].parsed == 3) mi_masked_attention_form_free(&ops[k].mf);
  free(ops);
}

/* The operators of the pack, in its order: op_ids as given, else every map
 * operator by id. *out (free with free_ops), -1 with err. */
static int choose_ops(const mi_ckb *ckb, const char *const *op_ids, pk_op **out, size_t *n_out,
                      char *err, size_t err_len) {
  size_t n = 0, cap = 0;
  pk_op *ops = NULL;
  const mi_ckb_entry **pick = NULL;
  if (op_ids) {
    for (size_t k = 0; op_ids[k]; k++)
      cap++;
    pick = calloc(cap + 1, sizeof *pick);
    for (size_t k = 0; pick && op_ids[k]; k++) {
      const mi_ckb_entry *e = mi_ckb_find(ckb, op_ids[k]);
      if (!e || !e->kind || strcmp(e->kind, "operator")) {
        snprintf(err, err_len, "%s: no operator contract with this id in %s", op_ids[k],
                 mi_ckb_dir(ckb));
        free(pick);
        return -1;
      }
      for (size_t j = 0; j < n; j++)
        if (pick[j] == e) {
          snprintf(err, err_len, "%s: listed twice", op_ids[k]);
          free(pick);
          return -1;
        }
      pick[n++] = e;
    }
  } else {
    cap = mi_ckb_count(ckb);
    pick = calloc(cap + 1, sizeof *pick);
    for (size_t i = 0; pick && i < cap; i++) {
      const mi_ckb_entry *e = mi_ckb_at(ckb, i);
      if (e->id && e->kind && !strcmp(e->kind, "operator") &&
          (json_object_get(e->json, "map") || json_object_get(e->json, "rotary") ||
           json_object_get(e->json, "masked_attention")))
        pick[n++] = e;
    }
  }
  if (!pick) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  if (!n) {
    snprintf(err, err_len, "%s: no operator has a \"map\" form: nothing to put in a pack",
             mi_ckb_dir(ckb));
    free(pick);
    return -1;
  }
  ops = calloc(n, sizeof *ops);
  for (size_t k = 0; ops && k < n; k++) {
    if (read_op(ckb, pick[k], &ops[k], err, err_len) != 0) {
      free_ops(ops, k + 1);
      free(pick);
      return -1;
    }
  }
  free(pick);
  if (!ops) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  if (!op_ids) qsort(ops, n, sizeof *ops, cmp_op_id);
  *out = ops;
  *n_out = n;
  return 0;
}


/* ---------- the source ---------- */

/* What a masked-attention kernel reads its cache with: f16 and bf16 bit
 * patterns to f32 (an f16's subnormals, infinities and NaNs kept), and one
 * row of D values in the cache's dtype as f32. */
static void emit_kv_readers(FILE *o) {
  fprintf(o, "/* ---------- the KV cache's dtypes (masked attention) ---------- */\n\n");
  fprintf(o, "#define MI_PK_ATT_DMAX 2048 /* channels a head: the rows read are converted on the stack */\n\n");
  fprintf(o, "static inline float mi_pk_bits_f32(uint32_t b) {\n  float f;\n  memcpy(&f, &b, sizeof f);\n"
             "  return f;\n}\n\n");
  fprintf(o, "static inline float mi_pk_f16(uint16_t h) {\n");
  fprintf(o, "  const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n");
  fprintf(o, "  if (e == 0x1fu) return mi_pk_bits_f32(s | 0x7f800000u | (m << 13)); /* inf, NaN */\n");
  fprintf(o, "  if (e) return mi_pk_bits_f32(s | ((e + 112u) << 23) | (m << 13));\n");
  fprintf(o, "  const float f = (float)m * 5.9604644775390625e-8f; /* zero, subnormal: m * 2^-24 */\n");
  fprintf(o, "  return s ? -f : f;\n}\n\n");
  fprintf(o, "static inline float mi_pk_bf16(uint16_t h) {\n  return mi_pk_bits_f32((uint32_t)h << 16);\n}\n\n");
  fprintf(o, "/* n values of a cache from element off, as f32: the cache itself for f32, else buf */\n");
  fprintf(o, "static inline const float *mi_pk_kv_row(float *buf, const void *base, mi_dtype dt, int64_t off, "
             "int64_t n) {\n");
  fprintf(o, "  if (dt == MI_DTYPE_F32) return (const float *)base + off;\n");
  fprintf(o, "  const uint16_t *p = (const uint16_t *)base + off;\n");
  fprintf(o, "  if (dt == MI_DTYPE_F16)\n    for (int64_t d = 0; d < n; d++) buf[d] = mi_pk_f16(p[d]);\n");
  fprintf(o, "  else\n    for (int64_t d = 0; d < n; d++) buf[d] = mi_pk_bf16(p[d]);\n");
  fprintf(o, "  return buf;\n}\n\n");
}

static void emit_preamble(FILE *o, const char *name, const pk_op *ops, size_t n) {
  fprintf(o,
          "/* Kernel pack \"%s\": %zu kernel%s for the target host-c (ABI %d.%d), generated by\n",
          name, n, n == 1 ? "" : "s", MI_ABI_MAJOR, MI_ABI_MINOR);
  fprintf(o, " * `mi-ckb pack` from these operator contracts of the CKB, each stated as an\n");
  fprintf(o, " * expression (its \"map\" form). Do not edit: change the contract and generate\n");
  fprintf(o, " * again (docs/kernel-packs.md).\n *\n");
  for (size_t k = 0; k < n; k++) {
    fprintf(o, " *   %s %s (%s, entry sha256 %.16s)\n", ops[k].id, ops[k].version, ops[k].e->rel,
            ops[k].sha);
    fputs(" *     math: ", o);
    put_comment(o, ops[k].math);
    if (ops[k].rotary) {
      fputs("\n *     rotary: freq(i) = ", o);
    } else if (ops[k].masked) {
      fputs("\n *     masked attention: first_key(i) = ", o);
    } else {
      fputs("\n *     map:  ", o);
      put_comment(o, ops[k].f.out);
      fputs(" = ", o);
    }
    put_comment(o, ops[k].expr);
    if (ops[k].score_expr) {
      fputs(", score = ", o);
      put_comment(o, ops[k].score_expr);
    }
    fputs("\n", o);
  }
  fprintf(o,
          " *\n * Each kernel has its contract's signature, ctx being this pack's context. It\n");
  fprintf(o, " * checks what the contract states, then hands its loop body to the platform the\n");
  fprintf(o, " * pack is bound to (run_host), whose threads run it over chunks of about\n");
  fprintf(o, " * MI_PK_CHUNK elements: pieces of an [n] output; whole rows of a [rows, n] one,\n");
  fprintf(o, " * or pieces of one row when a row is longer than a chunk. */\n");
  fprintf(o, "#include <math.h>\n#include <stdarg.h>\n#include <stdint.h>\n#include <stdio.h>\n"
             "#include <stdlib.h>\n#include <string.h>\n\n");
  fprintf(o, "#include \"mi/kernel_pack.h\"\n#include \"mi/plugin.h\"\n\n");
  fprintf(o, "#define MI_PK_CHUNK %d\n\n", PK_CHUNK);

  fprintf(o, "/* ---------- the pack's context ---------- */\n\n");
  fprintf(o, "typedef struct mi_pk_ctx {\n");
  fprintf(o, "  const mi_platform_iface *platform; /* NULL until bind() succeeds */\n");
  fprintf(o, "  void *platform_ctx;\n");
  fprintf(o, "  char err[512];\n");
  fprintf(o, "} mi_pk_ctx;\n\n");
  fprintf(o, "static int mi_pk_fail(mi_pk_ctx *c, const char *fmt, ...) "
             "__attribute__((format(printf, 2, 3)));\n");
  fprintf(o, "static int mi_pk_fail(mi_pk_ctx *c, const char *fmt, ...) {\n");
  fprintf(o, "  if (!c) return -1;\n");
  fprintf(o, "  va_list ap;\n  va_start(ap, fmt);\n  vsnprintf(c->err, sizeof c->err, fmt, ap);\n  "
             "va_end(ap);\n");
  fprintf(o, "  return -1;\n}\n\n");
  fprintf(o, "/* The platform's reason for a failed run_host, never NULL. */\n");
  fprintf(o, "static const char *mi_pk_platform_error(const mi_pk_ctx *c) {\n");
  fprintf(o, "  const char *e = c->platform->last_error ? c->platform->last_error(c->platform_ctx) "
             ": NULL;\n");
  fprintf(o, "  return e && e[0] ? e : \"no reason given\";\n}\n\n");

  fprintf(o, "/* ---------- chunks of a [rows, n] domain ([n]: rows 1) ---------- */\n\n");
  fprintf(o, "typedef struct mi_pk_range {\n  int64_t r0, r1, i0, i1; /* rows [r0, r1), columns "
             "[i0, i1) */\n} mi_pk_range;\n\n");
  fprintf(o, "static inline int64_t mi_pk_chunks(int64_t rows, int64_t n) {\n");
  fprintf(o, "  if (n <= MI_PK_CHUNK) {\n");
  fprintf(o, "    int64_t per = MI_PK_CHUNK / n; /* whole rows a chunk */\n");
  fprintf(o, "    return (rows + per - 1) / per;\n  }\n");
  fprintf(o,
          "  return rows * ((n + MI_PK_CHUNK - 1) / MI_PK_CHUNK); /* pieces of each row */\n}\n\n");
  fprintf(o, "static inline mi_pk_range mi_pk_chunk(int64_t rows, int64_t n, int64_t c) {\n");
  fprintf(o, "  mi_pk_range q;\n");
  fprintf(o, "  if (n <= MI_PK_CHUNK) {\n");
  fprintf(o, "    int64_t per = MI_PK_CHUNK / n;\n");
  fprintf(o, "    q.r0 = c * per;\n    q.r1 = q.r0 + per < rows ? q.r0 + per : rows;\n");
  fprintf(o, "    q.i0 = 0;\n    q.i1 = n;\n");
  fprintf(o, "  } else {\n");
  fprintf(o, "    int64_t per = (n + MI_PK_CHUNK - 1) / MI_PK_CHUNK;\n");
  fprintf(o, "    q.r0 = c / per;\n    q.r1 = q.r0 + 1;\n");
  fprintf(o, "    q.i0 = (c %% per) * MI_PK_CHUNK;\n    q.i1 = q.i0 + MI_PK_CHUNK < n ? q.i0 + "
             "MI_PK_CHUNK : n;\n");
  fprintf(o, "  }\n  return q;\n}\n\n");
  for (size_t k = 0; k < n; k++)
    if (ops[k].masked) {
      emit_kv_readers(o);
      break;
    }
}

/* The loop body of a map with row reductions: rows [mi_c0, mi_c1), each
 * whole (its reductions, in double, before any of its elements is written,
 * as the reference computes them). */
static void emit_reduce_body(FILE *o, const pk_op *op) {
  const mi_map_form *f = &op->f;
  fprintf(o, "/* rows [mi_c0, mi_c1) of %s, each whole: its reductions, then its elements */\n", f->out);
  fprintf(o, "static void mi_%s_body(void *mi_arg, int64_t mi_c0, int64_t mi_c1) {\n", op->base);
  fprintf(o, "  const mi_%s_args *mi_a = mi_arg;\n", op->base);
  size_t i;
  json_t *a;
  /* every argument any of the expressions may read: scalars by name, buffers as pointers */
  json_array_foreach(op->args, i, a) {
    if (i < 2 || (int)i == f->out_arg) continue;
    if (is_buffer(a))
      fprintf(o, "  const float *const mi_base_%s = mi_a->%s;\n", arg_name(a), arg_name(a));
    else
      fprintf(o, "  const %s%s = mi_a->%s;\n  (void)%s;\n", c_type(a), arg_name(a), arg_name(a), arg_name(a));
  }
  fprintf(o, "  const int64_t mi_n = mi_a->mi_n;\n");
  fprintf(o, "  for (int64_t mi_r = mi_c0; mi_r < mi_c1; mi_r++) {\n");
  fprintf(o, "    float *%s = mi_a->%s + mi_r * mi_n;\n", f->out, f->out);
  /* a buffer of the output's shape at its row; one per column or per row as it is */
  json_array_foreach(op->args, i, a) {
    if (i < 2 || (int)i == f->out_arg || !is_buffer(a)) continue;
    const json_t *shape = json_object_get(a, "shape");
    const int row_ptr = json_array_size(shape) == 2 || (f->dims == 1);
    fprintf(o, "    const float *%s = mi_base_%s%s;\n", arg_name(a), arg_name(a), row_ptr ? " + mi_r * mi_n" : "");
    fprintf(o, "    (void)%s;\n", arg_name(a));
  }
  for (int j = 0; j < f->n_reduce; j++) {
    fprintf(o, "    double mi_s%d = 0; /* %s */\n", j, f->reduce[j].name);
    fprintf(o, "    for (int64_t mi_i = 0; mi_i < mi_n; mi_i++) mi_s%d += %s;\n", j, op->red_sum_c[j]);
    if (op->red_then_c[j][0]) fprintf(o, "    mi_s%d = %s;\n", j, op->red_then_c[j]);
  }
  fprintf(o, "    for (int64_t mi_i = 0; mi_i < mi_n; mi_i++)\n");
  fprintf(o, "      %s[mi_i] = %s;\n", f->out, op->body_c);
  fprintf(o, "  }\n}\n\n");
}

/* The loop body: chunks [mi_c0, mi_c1) of the output's domain. */
static void emit_body(FILE *o, const pk_op *op) {
  const mi_map_form *f = &op->f;
  if (f->n_reduce) {
    emit_reduce_body(o, op);
    return;
  }
  fprintf(o, "/* chunks [mi_c0, mi_c1) of %s's %s */\n", f->out,
          f->dims == 2 ? "[rows, n]" : "[n]");
  fprintf(o, "static void mi_%s_body(void *mi_arg, int64_t mi_c0, int64_t mi_c1) {\n", op->base);
  fprintf(o, "  const mi_%s_args *mi_a = mi_arg;\n", op->base);
  /* what holds for the whole call: scalars, per-column and per-row buffers */
  const mi_map_names *nm = &f->names;
  for (int k = 0; k < nm->n; k++) {
    json_t *a = json_array_get(op->args, (size_t)nm->arg[k]);
    if (nm->role[k] == MI_MAP_SCALAR)
      fprintf(o, "  const %s%s = mi_a->%s;\n", c_type(a), arg_name(a), arg_name(a));
    else if (nm->role[k] == MI_MAP_COL || nm->role[k] == MI_MAP_ROW || f->dims == 1)
      fprintf(o, "  const float *%s = mi_a->%s;%s\n", arg_name(a), arg_name(a),
              nm->role[k] == MI_MAP_COL   ? " /* one per column */"
              : nm->role[k] == MI_MAP_ROW ? " /* one per row */"
                                         : "");
  }
  if (f->dims == 1) {
    fprintf(o, "  float *%s = mi_a->%s;\n", f->out, f->out);
    fprintf(o, "  const int64_t mi_i0 = mi_c0 * MI_PK_CHUNK;\n");
    fprintf(o, "  const int64_t mi_i1 = mi_c1 * MI_PK_CHUNK < mi_a->mi_n ? mi_c1 * MI_PK_CHUNK : "
               "mi_a->mi_n;\n");
    fprintf(o, "  for (int64_t mi_i = mi_i0; mi_i < mi_i1; mi_i++)\n");
    fprintf(o, "    %s[mi_i] = %s;\n}\n\n", f->out, op->body_c);
    return;
  }
  fprintf(o, "  const int64_t mi_n = mi_a->mi_n;\n");
  fprintf(o, "  for (int64_t mi_c = mi_c0; mi_c < mi_c1; mi_c++) {\n");
  fprintf(o, "    const mi_pk_range mi_q = mi_pk_chunk(mi_a->mi_rows, mi_n, mi_c);\n");
  fprintf(o, "    for (int64_t mi_r = mi_q.r0; mi_r < mi_q.r1; mi_r++) {\n");
  fprintf(o, "      float *%s = mi_a->%s + mi_r * mi_n;\n", f->out, f->out);
  for (int k = 0; k < nm->n; k++) {
    json_t *a = json_array_get(op->args, (size_t)nm->arg[k]);
    if (nm->role[k] == MI_MAP_ELEM)
      fprintf(o, "      const float *%s = mi_a->%s + mi_r * mi_n;\n", arg_name(a), arg_name(a));
  }
  fprintf(o, "      for (int64_t mi_i = mi_q.i0; mi_i < mi_q.i1; mi_i++)\n");
  fprintf(o, "        %s[mi_i] = %s;\n", f->out, op->body_c);
  fprintf(o, "    }\n  }\n}\n\n");
}

/* The kernel's checks after the bound-pack one: the contract's constraints
 * over its integer arguments (a failure prints every integer argument), and
 * no NULL buffer. */
static int emit_checks(FILE *o, const pk_op *op, char *err, size_t err_len) {
  size_t i;
  json_t *a;
  /* the contract's constraints, over its integer arguments; a failure
   * prints every integer argument */
  char ints_fmt[1024] = "", ints_val[2048] = "";
  json_array_foreach(op->args, i, a) {
    if (!is_int(a)) continue;
    size_t l = strlen(ints_fmt), m = strlen(ints_val);
    snprintf(ints_fmt + l, sizeof ints_fmt - l, "%s%s=%%lld", l ? ", " : "", arg_name(a));
    snprintf(ints_val + m, sizeof ints_val - m, ", (long long)%s", arg_name(a));
  }
  json_t *c;
  json_array_foreach(json_object_get(op->e->json, "constraints"), i, c) {
    char cc[1024];
    char num[32];
    const char *cs = json_string_value(c);
    if (!cs && json_is_integer(c))
      snprintf(num, sizeof num, "%lld", (long long)json_integer_value(c)), cs = num;
    if (!cs || mi_expr_c(cs, int_param, op->args, cc, sizeof cc, err, err_len) != 0) {
      char why[300];
      snprintf(why, sizeof why, "%s", cs ? err : "not an expression");
      snprintf(err, err_len, "%s: constraints[%zu]: %s", op->id, i, why);
      return -1;
    }
    fprintf(o, "  if (!(%s))\n", cc);
    fprintf(o, "    return mi_pk_fail(mi_p, \"%s: constraint '", op->id);
    put_lit(o, cs, 1);
    if (ints_fmt[0])
      fprintf(o, "' does not hold (%s)\"%s);\n", ints_fmt, ints_val);
    else
      fprintf(o, "' does not hold\");\n");
  }

  json_array_foreach(op->args, i, a) {
    if (!is_buffer(a)) continue;
    fprintf(o, "  if (!%s) return mi_pk_fail(mi_p, \"%s: buffer '%s' is NULL\");\n", arg_name(a),
            op->id, arg_name(a));
  }

  return 0;
}

/* Every form's kernel starts alike: the contract's signature, ctx the
 * pack's context (refused until bound), then the contract's checks. */
static int emit_kernel_head(FILE *o, const pk_op *op, char *err, size_t err_len) {
  size_t i;
  json_t *a;
  fprintf(o, "static int mi_%s(", op->base);
  json_array_foreach(op->args, i, a) fprintf(o, "%s%s%s", i ? ", " : "", c_type(a), arg_name(a));
  fprintf(o, ") {\n");
  fprintf(o, "  mi_pk_ctx *mi_p = %s;\n", arg_name(json_array_get(op->args, 0)));
  fprintf(o, "  if (!mi_p || !mi_p->platform)\n");
  fprintf(o, "    return mi_pk_fail(mi_p, \"%s: the pack is not bound to a platform (bind it first)\");\n", op->id);
  return emit_checks(o, op, err, err_len);
}

/* The kernel: the contract's signature; checks, then run_host. */
static int emit_kernel(FILE *o, const pk_op *op, char *err, size_t err_len) {
  const mi_map_form *f = &op->f;
  size_t i;
  json_t *a;
  const char *stream = arg_name(json_array_get(op->args, 1));

  if (emit_kernel_head(o, op, err, err_len) != 0) return -1;

  /* the output's shape: the loop domain */
  char rows_c[1024] = "1", n_c[1024];
  if (mi_expr_c(f->n_expr, int_param, op->args, n_c, sizeof n_c, err, err_len) != 0 ||
      (f->dims == 2 &&
       mi_expr_c(f->rows_expr, int_param, op->args, rows_c, sizeof rows_c, err, err_len) != 0)) {
    char why[300];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, err_len, "%s: the shape of '%s': %s", op->id, f->out, why);
    return -1;
  }
  if (f->dims == 2) {
    fprintf(o, "  const int64_t mi_rows = %s, mi_n = %s;\n", rows_c, n_c);
    fprintf(o, "  if (mi_rows < 0 || mi_n < 0)\n");
    fprintf(o,
            "    return mi_pk_fail(mi_p, \"%s: the shape of '%s' is negative ([%%lld, %%lld])\", "
            "(long long)mi_rows,\n",
            op->id, f->out);
    fprintf(o, "                      (long long)mi_n);\n");
    fprintf(o, "  if (mi_rows == 0 || mi_n == 0) return 0; /* nothing to compute */\n");
  } else {
    fprintf(o, "  const int64_t mi_rows = 1, mi_n = %s;\n", n_c);
    fprintf(o, "  if (mi_n < 0)\n");
    fprintf(o,
            "    return mi_pk_fail(mi_p, \"%s: the shape of '%s' is negative ([%%lld])\", (long "
            "long)mi_n);\n",
            op->id, f->out);
    fprintf(o, "  if (mi_n == 0) return 0; /* nothing to compute */\n");
  }

  fprintf(o, "  mi_%s_args mi_a = {", op->base);
  int first = 1;
  json_array_foreach(op->args, i, a) {
    if (i < 2) continue;
    fprintf(o, "%s.%s = %s", first ? "" : ", ", arg_name(a), arg_name(a));
    first = 0;
  }
  fprintf(o, "%s.mi_rows = mi_rows, .mi_n = mi_n};\n", first ? "" : ", ");
  fprintf(o,
          "  if (mi_p->platform->run_host(mi_p->platform_ctx, %s, mi_%s_body, &mi_a, %s) != 0)\n",
          stream, op->base, f->n_reduce ? "mi_rows /* whole rows: each has its reductions */" : "mi_pk_chunks(mi_rows, mi_n)");
  fprintf(o,
          "    return mi_pk_fail(mi_p, \"%s: the platform's run_host failed: %%s\", "
          "mi_pk_platform_error(mi_p));\n",
          op->id);
  fprintf(o, "  return 0;\n}\n\n");
  return 0;
}

static int emit_rotary(FILE *o, const pk_op *op, char *err, size_t err_len);
static int emit_masked(FILE *o, const pk_op *op, char *err, size_t err_len);

static int emit_op(FILE *o, const pk_op *op, char *err, size_t err_len) {
  size_t i;
  json_t *a;
  if (op->rotary) return emit_rotary(o, op, err, err_len);
  if (op->masked) return emit_masked(o, op, err, err_len);
  fprintf(o, "/* ---------- %s %s: %s = ", op->id, op->version, op->f.out);
  put_comment(o, op->expr);
  fprintf(o, " ---------- */\n\n");
  fprintf(o, "typedef struct mi_%s_args {\n", op->base);
  json_array_foreach(op->args, i, a) {
    if (i < 2) continue; /* ctx and stream stay with the kernel */
    fprintf(o, "  %s%s;\n", c_type(a), arg_name(a));
  }
  fprintf(o, "  int64_t mi_rows, mi_n; /* the shape of %s: the loop domain */\n", op->f.out);
  fprintf(o, "} mi_%s_args;\n\n", op->base);
  emit_body(o, op);
  return emit_kernel(o, op, err, err_len);
}

/* A rotary operator: the frequency of each pair computed once per call in
 * double, then the rotation over tokens (the chunks run_host splits),
 * pairs and heads, as operator.rope pairs channels (i, i + rot_dim/2). */
static int emit_rotary(FILE *o, const pk_op *op, char *err, size_t err_len) {
  const char *nm[MI_ROTARY_ARGS];
  for (int k = 0; k < MI_ROTARY_ARGS; k++) nm[k] = arg_name(json_array_get(op->args, (size_t)op->rf.arg[k]));
  const char *x = nm[0], *pos = nm[1], *T = nm[2], *H = nm[3], *ts = nm[4], *hs = nm[5], *rot = nm[6];
  fprintf(o, "/* ---------- %s %s: rotary, freq(i) = ", op->id, op->version);
  put_comment(o, op->expr);
  fprintf(o, " ---------- */\n\n");
  fprintf(o, "#define MI_PK_ROT_MAX 4096 /* pairs a head: rot_dim up to 8192 */\n\n");
  fprintf(o, "typedef struct mi_%s_args {\n  float *%s;\n  const int32_t *%s;\n", op->base, x, pos);
  fprintf(o, "  int64_t %s, %s, %s, %s, %s;\n", T, H, ts, hs, rot);
  fprintf(o, "  const double *mi_freq; /* [rot_dim / 2]: each pair's frequency */\n");
  fprintf(o, "  const double *mi_amp;  /* [rot_dim / 2]: each pair's amplitude */\n} mi_%s_args;\n\n", op->base);
  fprintf(o, "/* tokens [mi_t0, mi_t1) */\n");
  fprintf(o, "static void mi_%s_body(void *mi_arg, int64_t mi_t0, int64_t mi_t1) {\n", op->base);
  fprintf(o, "  const mi_%s_args *mi_a = mi_arg;\n", op->base);
  fprintf(o, "  const int64_t mi_half = mi_a->%s / 2;\n", rot);
  fprintf(o, "  for (int64_t mi_t = mi_t0; mi_t < mi_t1; mi_t++)\n");
  fprintf(o, "    for (int64_t mi_i = 0; mi_i < mi_half; mi_i++) {\n");
  fprintf(o, "      const double mi_ang = (double)mi_a->%s[mi_t] * mi_a->mi_freq[mi_i];\n", pos);
  fprintf(o, "      const float mi_c = (float)(mi_a->mi_amp[mi_i] * cos(mi_ang)), mi_s = (float)(mi_a->mi_amp[mi_i] * sin(mi_ang));\n");
  fprintf(o, "      for (int64_t mi_h = 0; mi_h < mi_a->%s; mi_h++) {\n", H);
  fprintf(o, "        float *mi_v = mi_a->%s + mi_t * mi_a->%s + mi_h * mi_a->%s;\n", x, ts, hs);
  fprintf(o, "        const float mi_x0 = mi_v[mi_i], mi_x1 = mi_v[mi_i + mi_half];\n");
  fprintf(o, "        mi_v[mi_i] = mi_x0 * mi_c - mi_x1 * mi_s;\n");
  fprintf(o, "        mi_v[mi_i + mi_half] = mi_x1 * mi_c + mi_x0 * mi_s;\n      }\n    }\n}\n\n");

  if (emit_kernel_head(o, op, err, err_len) != 0) return -1;
  fprintf(o, "  if (%s < 2 || %s %% 2 || %s / 2 > MI_PK_ROT_MAX)\n", rot, rot, rot);
  fprintf(o, "    return mi_pk_fail(mi_p, \"%s: rot_dim %%lld: an even number of channels, at most %%d pairs\", "
             "(long long)%s, MI_PK_ROT_MAX);\n", op->id, rot);
  fprintf(o, "  if (%s <= 0 || %s <= 0) return 0; /* nothing to rotate */\n", T, H);
  fprintf(o, "  double mi_freq[MI_PK_ROT_MAX], mi_amp[MI_PK_ROT_MAX];\n");
  fprintf(o, "  for (int64_t mi_i = 0; mi_i < %s / 2; mi_i++) {\n", rot);
  fprintf(o, "    mi_freq[mi_i] = %s;\n", op->body_c);
  fprintf(o, "    mi_amp[mi_i] = %s;\n  }\n", op->amp_c);
  fprintf(o, "  mi_%s_args mi_a = {%s, %s, %s, %s, %s, %s, %s, mi_freq, mi_amp};\n", op->base, x, pos, T, H, ts, hs,
          rot);
  fprintf(o, "  if (mi_p->platform->run_host(mi_p->platform_ctx, %s, mi_%s_body, &mi_a, %s) != 0)\n",
          arg_name(json_array_get(op->args, 1)), op->base, T);
  fprintf(o, "    return mi_pk_fail(mi_p, \"%s: the platform's run_host failed: %%s\", mi_pk_platform_error(mi_p));\n",
          op->id);
  fprintf(o, "  return 0;\n}\n\n");
  return 0;
}

/* A masked-attention operator's loop body: one (query, head) pair a step,
 * its keys from the first the expression gives to the query's own, scores
 * in f32 with an online softmax (a running max and sum; the output rescaled
 * when the max grows), so no scratch but two rows on the stack, at any
 * context length. One pair is one task's, in a fixed order: the same bytes
 * on any number of threads. */
static void emit_masked_body(FILE *o, const pk_op *op) {
  fprintf(o, "/* (query, head) pairs [mi_c0, mi_c1) of T * Hq: query mi_c / Hq, head mi_c %% Hq */\n");
  fprintf(o, "static void mi_%s_body(void *mi_arg, int64_t mi_c0, int64_t mi_c1) {\n", op->base);
  fprintf(o, "  const mi_%s_args *mi_a = mi_arg;\n", op->base);
  fprintf(o, "  /* the call's values in locals: the output's stores cannot change them */\n");
  fprintf(o, "  const int64_t mi_D = mi_a->D, mi_Hq = mi_a->Hq, mi_Hkv = mi_a->Hkv, mi_G = mi_Hq / mi_Hkv;\n");
  fprintf(o, "  const float mi_scale = mi_a->scale;\n");
  fprintf(o, "  const void *const mi_kc = mi_a->k_cache, *const mi_vc = mi_a->v_cache;\n");
  fprintf(o, "  const mi_dtype mi_dt = mi_a->kv_dtype;\n");
  fprintf(o, "  float mi_kb[MI_PK_ATT_DMAX], mi_vb[MI_PK_ATT_DMAX];\n");
  fprintf(o, "  for (int64_t mi_c = mi_c0; mi_c < mi_c1; mi_c++) {\n");
  fprintf(o, "    const int64_t mi_t = mi_c / mi_Hq, mi_g = mi_c %% mi_Hq / mi_G, mi_i = mi_a->pos0 + mi_t;\n");
  fprintf(o, "    /* the first key: floor(first_key), clamped to [0, i] (NaN: 0) */\n");
  fprintf(o, "    const double mi_fk = floor(%s);\n", op->body_c);
  fprintf(o, "    const int64_t mi_j0 = !(mi_fk > 0) ? 0 : mi_fk >= (double)mi_i ? mi_i : (int64_t)mi_fk;\n");
  fprintf(o, "    const float *mi_q = mi_a->q + mi_c * mi_D;\n");
  fprintf(o, "    float *mi_o = mi_a->out + mi_c * mi_D;\n");
  fprintf(o, "    float mi_m = -INFINITY, mi_l = 0;\n");
  fprintf(o, "    for (int64_t mi_d = 0; mi_d < mi_D; mi_d++) mi_o[mi_d] = 0;\n");
  fprintf(o, "    for (int64_t mi_j = mi_j0; mi_j <= mi_i; mi_j++) {\n");
  fprintf(o, "      const int64_t mi_row = (mi_j * mi_Hkv + mi_g) * mi_D;\n");
  fprintf(o, "      const float *mi_k = mi_pk_kv_row(mi_kb, mi_kc, mi_dt, mi_row, mi_D);\n");
  fprintf(o, "      float mi_s = 0;\n");
  fprintf(o, "      for (int64_t mi_d = 0; mi_d < mi_D; mi_d++) mi_s += mi_q[mi_d] * mi_k[mi_d];\n");
  fprintf(o, "      mi_s *= mi_scale;\n");
  if (op->score_c[0]) fprintf(o, "      mi_s = (float)(%s); /* the form's score map */\n", op->score_c);
  fprintf(o, "      if (mi_s > mi_m) { /* a new max: what was summed so far is rescaled */\n");
  fprintf(o, "        const float mi_r = expf(mi_m - mi_s);\n");
  fprintf(o, "        mi_l *= mi_r;\n");
  fprintf(o, "        for (int64_t mi_d = 0; mi_d < mi_D; mi_d++) mi_o[mi_d] *= mi_r;\n");
  fprintf(o, "        mi_m = mi_s;\n      }\n");
  fprintf(o, "      const float mi_p = expf(mi_s - mi_m);\n");
  fprintf(o, "      const float *mi_v = mi_pk_kv_row(mi_vb, mi_vc, mi_dt, mi_row, mi_D);\n");
  fprintf(o, "      mi_l += mi_p;\n");
  fprintf(o, "      for (int64_t mi_d = 0; mi_d < mi_D; mi_d++) mi_o[mi_d] += mi_p * mi_v[mi_d];\n    }\n");
  fprintf(o, "    for (int64_t mi_d = 0; mi_d < mi_D; mi_d++) mi_o[mi_d] /= mi_l;\n  }\n}\n\n");
}

/* A masked-attention operator: operator.attention's arguments (by their
 * names: the form holds the signature to them) and scalars of its own. */
static int emit_masked(FILE *o, const pk_op *op, char *err, size_t err_len) {
  size_t i;
  json_t *a;
  fprintf(o, "/* ---------- %s %s: masked attention, first_key(i) = ", op->id, op->version);
  put_comment(o, op->expr);
  if (op->score_expr) {
    fputs(", score = ", o);
    put_comment(o, op->score_expr);
  }
  fprintf(o, " ---------- */\n\n");
  fprintf(o, "typedef struct mi_%s_args {\n", op->base);
  json_array_foreach(op->args, i, a) if (i >= 2) fprintf(o, "  %s%s;\n", c_type(a), arg_name(a));
  fprintf(o, "} mi_%s_args;\n\n", op->base);
  emit_masked_body(o, op);

  if (emit_kernel_head(o, op, err, err_len) != 0) return -1;
  fprintf(o, "  if (kv_dtype != MI_DTYPE_F32 && kv_dtype != MI_DTYPE_F16 && kv_dtype != MI_DTYPE_BF16)\n");
  fprintf(o, "    return mi_pk_fail(mi_p, \"%s: kv_dtype %%d: the cache is f32, f16 or bf16\", (int)kv_dtype);\n",
          op->id);
  fprintf(o, "  if (T < 1 || Hkv < 1 || Hq < Hkv || Hq %% Hkv || D < 1 || D > MI_PK_ATT_DMAX || pos0 < 0)\n");
  fprintf(o, "    return mi_pk_fail(mi_p, \"%s: T=%%lld Hq=%%lld Hkv=%%lld D=%%lld pos0=%%lld: not an attention this "
             "kernel computes (D at most %%d)\",\n", op->id);
  fprintf(o, "                      (long long)T, (long long)Hq, (long long)Hkv, (long long)D, (long long)pos0, "
             "MI_PK_ATT_DMAX);\n");
  fprintf(o, "  mi_%s_args mi_a = {", op->base);
  json_array_foreach(op->args, i, a) if (i >= 2) fprintf(o, "%s%s", i > 2 ? ", " : "", arg_name(a));
  fprintf(o, "};\n");
  fprintf(o, "  if (mi_p->platform->run_host(mi_p->platform_ctx, %s, mi_%s_body, &mi_a, T * Hq) != 0)\n",
          arg_name(json_array_get(op->args, 1)), op->base);
  fprintf(o, "    return mi_pk_fail(mi_p, \"%s: the platform's run_host failed: %%s\", mi_pk_platform_error(mi_p));\n",
          op->id);
  fprintf(o, "  return 0;\n}\n\n");
  return 0;
}

static void emit_plugin(FILE *o, const char *name, const pk_op *ops, size_t n) {
  fprintf(o, "/* ---------- the plugin ---------- */\n\n");
  fprintf(o, "/* A host-C pack runs on a platform whose threads it can borrow (run_host)\n");
  fprintf(o, " * and whose buffers are host memory (its kernels read them directly). */\n");
  fprintf(o, "static int mi_pk_bind(void *ctx, const mi_platform_iface *platform, void "
             "*platform_ctx, char *err,\n");
  fprintf(o, "                      size_t err_len) {\n");
  fprintf(o, "  mi_pk_ctx *c = ctx;\n  const char *why = NULL;\n  mi_device_info di;\n");
  fprintf(o, "  memset(&di, 0, sizeof di);\n  di.struct_size = sizeof di;\n");
  fprintf(o, "  if (!c) why = \"no pack context\";\n");
  fprintf(o, "  else if (!platform) why = \"no platform interface\";\n");
  fprintf(o, "  else if (!mi_platform_has(platform, run_host))\n");
  fprintf(o,
          "    why = \"the platform has no run_host (ABI 1.6): it cannot run host-C kernels\";\n");
  fprintf(o, "  else if (!mi_platform_has(platform, device_info) || "
             "platform->device_info(platform_ctx, 0, &di) != 0)\n");
  fprintf(o, "    why = \"the platform's device_info failed: whether its memory is host memory is "
             "unknown\";\n");
  fprintf(o, "  else if (!di.host_memory)\n");
  fprintf(o, "    why = \"the platform's device memory is not host memory: host-C kernels cannot "
             "read its buffers\";\n");
  fprintf(o, "  if (why) {\n");
  fprintf(o, "    if (c) {\n      c->platform = NULL;\n");
  fprintf(o, "      snprintf(c->err, sizeof c->err, \"pack-%s: cannot bind: %%s\", why);\n    }\n",
          name);
  fprintf(o,
          "    if (err && err_len) snprintf(err, err_len, \"pack-%s: cannot bind: %%s\", why);\n",
          name);
  fprintf(o, "    return -1;\n  }\n");
  fprintf(o, "  c->platform = platform;\n  c->platform_ctx = platform_ctx;\n  c->err[0] = 0;\n  "
             "return 0;\n}\n\n");
  fprintf(o, "static const char *mi_pk_last_error(void *ctx) {\n");
  fprintf(o, "  const mi_pk_ctx *c = ctx;\n  return c ? c->err : \"no pack context\";\n}\n\n");

  fprintf(o, "static const mi_pack_kernel mi_pk_kernels[] = {\n");
  for (size_t k = 0; k < n; k++) {
    fprintf(o, "    {\"");
    put_lit(o, ops[k].id, 0);
    fprintf(o, "\", \"");
    put_lit(o, ops[k].version, 0);
    fprintf(o, "\", \"");
    put_lit(o, ops[k].expr, 0);
    fprintf(o, "\", (void (*)(void))mi_%s},\n", ops[k].base);
  }
  fprintf(o, "};\n\n");
  fprintf(o, "static const mi_kernel_pack_iface mi_pk_iface = {\n");
  fprintf(o, "    .struct_size = sizeof(mi_kernel_pack_iface),\n");
  fprintf(o, "    .target = MI_PACK_TARGET_HOST_C,\n");
  fprintf(o, "    .bind = mi_pk_bind,\n");
  fprintf(o, "    .n_kernels = sizeof mi_pk_kernels / sizeof *mi_pk_kernels,\n");
  fprintf(o, "    .kernels = mi_pk_kernels,\n");
  fprintf(o, "    .last_error = mi_pk_last_error,\n};\n\n");
  fprintf(o, "static int mi_pk_init(const mi_host_api *host, const mi_options *opts, void **ctx, "
             "char *err, size_t err_len) {\n");
  fprintf(o, "  (void)host, (void)opts;\n");
  fprintf(o, "  mi_pk_ctx *c = calloc(1, sizeof *c);\n");
  fprintf(
      o,
      "  if (!c) {\n    snprintf(err, err_len, \"pack-%s: out of memory\");\n    return -1;\n  }\n",
      name);
  fprintf(o, "  *ctx = c;\n  return 0;\n}\n\n");
  fprintf(o, "static void mi_pk_fini(void *ctx) { free(ctx); }\n\n");
  fprintf(o, "static const void *mi_pk_get_iface(void *ctx) {\n  (void)ctx;\n  return "
             "&mi_pk_iface;\n}\n\n");
  fprintf(o, "static const mi_plugin_desc mi_pk_desc = {\n");
  fprintf(o, "    .abi_major = MI_ABI_MAJOR,\n    .abi_minor = MI_ABI_MINOR,\n");
  fprintf(o, "    .struct_size = sizeof(mi_plugin_desc),\n    .kind = MI_PLUGIN_KERNELS,\n");
  fprintf(o, "    .name = \"pack-%s\",\n    .version = \"1.0.0\",\n", name);
  fprintf(o,
          "    .description = \"kernel pack %s: %zu host-C kernel%s generated from the CKB's map "
          "operators\",\n",
          name, n, n == 1 ? "" : "s");
  fprintf(
      o,
      "    .init = mi_pk_init,\n    .fini = mi_pk_fini,\n    .get_iface = mi_pk_get_iface,\n};\n");
  fprintf(o, "MI_PLUGIN_DEFINE(mi_pk_desc)\n");
}

static int name_ok(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n < 1 || n > 48) return 0;
  for (size_t i = 0; i < n; i++)
    if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '_' &&
        name[i] != '-')
      return 0;
  return 1;
}

void mi_pack_library_name(const char *name, char *out, size_t out_len) {
  snprintf(out, out_len, "libmi-pack-%s.so", name ? name : "");
}

int mi_pack_emit(const mi_ckb *ckb, const char *const *op_ids, const char *name, char **src,
                 json_t **kernels, char *err, size_t err_len) {
  *src = NULL;
  *kernels = NULL;
  if (!name_ok(name)) {
    snprintf(err, err_len, "pack name '%.60s': use 1 to 48 of a-z, 0-9, '_' and '-'",
             name ? name : "");
    return -1;
  }
  pk_op *ops;
  size_t n;
  if (choose_ops(ckb, op_ids, &ops, &n, err, err_len) != 0) return -1;
  /* two operators may not share a C name (ids are unique, so bases are) */
  char *buf = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&buf, &len);
  if (!o) {
    snprintf(err, err_len, "out of memory");
    free_ops(ops, n);
    return -1;
  }
  emit_preamble(o, name, ops, n);
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++)
    rc = emit_op(o, &ops[k], err, err_len);
  if (rc == 0) emit_plugin(o, name, ops, n);
  if (fclose(o) != 0 && rc == 0) {
    snprintf(err, err_len, "out of memory");
    rc = -1;
  }
  json_t *ks = json_array();
  for (size_t k = 0; rc == 0 && k < n; k++) {
    char sym[160];
    snprintf(sym, sizeof sym, "mi_%s", ops[k].base);
    json_array_append_new(ks, json_pack("{s:s, s:s, s:s, s:s}", "operator", ops[k].id, "version",
                                        ops[k].version, "math", ops[k].expr, "symbol", sym));
  }
  free_ops(ops, n);
  if (rc != 0) {
    free(buf);
    json_decref(ks);
    return -1;
  }
  *src = buf;
  *kernels = ks;
  return 0;
}
