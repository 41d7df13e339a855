/* Kernel expressions: the small float64 expression language the CKB states
 * operators and derived quantities in (decimal numbers, names, + - * /,
 * unary minus, parentheses and the functions exp log tanh sqrt abs erf
 * erfc sigmoid softplus floor ceil (one argument) and min max pow (two)).
 * The CKB's map form (core/ckb/map_form.h), the verifier's references and
 * the runtime's GGUF reading (a tensor's values checked against the
 * contract's formula) evaluate them; the kernel-pack generator writes them
 * as C. */
#ifndef MI_CORE_UTIL_KEXPR_H
#define MI_CORE_UTIL_KEXPR_H

#include <stddef.h>

typedef struct mi_kexpr mi_kexpr;

/* Parses src. NULL with a one-line message in err (syntax, an unknown
 * function, a wrong argument count, nesting deeper than 64, more than 1024
 * nodes). */
mi_kexpr *mi_kexpr_parse(const char *src, char *err, size_t err_len);
void mi_kexpr_free(mi_kexpr *e);
/* The names the expression reads (not function names), each once, in
 * order of first use. */
int mi_kexpr_n_names(const mi_kexpr *e);
const char *mi_kexpr_name(const mi_kexpr *e, int i);
/* The value with name i bound to values[i], in float64 (IEEE: a NaN or an
 * infinity propagates as C's math does). */
double mi_kexpr_eval(const mi_kexpr *e, const double *values);
/* The expression as one C expression in float arithmetic (expf, tanhf, ...,
 * literals with an f suffix; sigmoid and softplus written out), name i
 * spelled c_names[i]. 0, or -1 with a message (out_len too small). */
int mi_kexpr_c(const mi_kexpr *e, const char *const *c_names, char *out, size_t out_len, char *err,
               size_t err_len);
/* The same in double arithmetic (exp, pow, literals as written). */
int mi_kexpr_c64(const mi_kexpr *e, const char *const *c_names, char *out, size_t out_len, char *err,
                 size_t err_len);

#endif
