/* Stage 1's inputs of a block type (quant_input.c). */
#ifndef MI_CORE_VERIFY_QUANT_INPUT_H
#define MI_CORE_VERIFY_QUANT_INPUT_H

#include <stdint.h>

#include "mi/tensor.h"

/* n values of block type t (n whole blocks) as bytes at dst. codes = 0:
 * val[] holds the drawn values on entry, each block is quantized from them
 * (round to nearest); codes = 1: random codes and scales, values of typical
 * size std. On return val[] holds the blocks' exact values and, when not
 * NULL, absval[] the magnitude of the terms each value is formed from
 * (|value|, but |d·sc·q| + |dmin·m| for Q4_K). -1 when t is not a block
 * type or n not whole blocks. */
int vf_quant_input(mi_dtype t, int64_t n, int codes, double std, uint64_t *rng, unsigned char *dst,
                   double *val, double *absval);

#endif
