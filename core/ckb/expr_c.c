/* A contract expression ("(num_key_value_heads / TP) * head_dim", "pos0 + T")
 * as C source, for code generators: the syntax is the evaluator's
 * (mi_expr_names checks it), each name becomes what the caller says (a
 * config field its macro, a runtime name itself), and numbers, operators,
 * parentheses and spacing are kept as written, so the C reads like the
 * contract. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core/ckb/ckb.h"

static void count_name(void *user, const char *name, size_t len) {
  (void)name, (void)len;
  ++*(int *)user;
}

int mi_expr_c(const char *expr, mi_expr_c_name fn, void *user, char *out, size_t out_len, char *err,
              size_t err_len) {
  int names = 0;
  if (err_len) err[0] = 0;
  if (!expr || !out || !out_len) {
    snprintf(err, err_len, "expression: nothing to write");
    return -1;
  }
  if (mi_expr_names(expr, count_name, &names, err, err_len) != 0) return -1;
  size_t n = 0;
  out[0] = 0;
  for (const char *p = expr; *p;) {
    if (isalpha((unsigned char)*p) || *p == '_') {
      const char *s = p;
      while (isalnum((unsigned char)*p) || *p == '_')
        p++;
      if (fn(user, s, (size_t)(p - s), out + n, out_len - n) != 0) {
        if (err_len && !err[0])
          snprintf(err, err_len, "expression '%s': no C for '%.*s'", expr, (int)(p - s), s);
        return -1;
      }
      n += strlen(out + n);
    } else {
      if (n + 1 < out_len)
        out[n++] = *p, out[n] = 0;
      else
        n = out_len; /* marks the overflow below */
      p++;
    }
    if (n + 1 >= out_len) {
      snprintf(err, err_len, "expression '%.80s': its C does not fit %zu bytes", expr, out_len);
      return -1;
    }
  }
  return 0;
}
