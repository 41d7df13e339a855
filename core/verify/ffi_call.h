/* A platform kernel called through libffi from its operator contract's
 * signature: the argument slots and the call, shared by stage 1's operator
 * units (unit.c) and stage 2's contract-driven layer (stage2.c). */
#ifndef MI_CORE_VERIFY_FFI_CALL_H
#define MI_CORE_VERIFY_FFI_CALL_H

#include <ffi.h>
#include <stdint.h>

#include "core/verify/verify.h"

/* One argument's value, where values[k] points. */
typedef union vf_ffi_slot {
  void *p;
  int64_t i64;
  int32_t i32;
  float f32;
  double f64;
  int dt; /* a C enum (mi_dtype) is passed as int */
} vf_ffi_slot;

/* A pointer argument (ctx, stream, buffers) into *s; its libffi type. */
static inline ffi_type *vf_ffi_pointer(vf_ffi_slot *s, void *p) {
  s->p = p;
  return &ffi_type_pointer;
}

/* A scalar argument of kind VF_I64, VF_I32, VF_F32, VF_F64 or VF_DTYPE
 * (i, f or dt, as the kind says) into *s; its libffi type. */
static inline ffi_type *vf_ffi_scalar(vf_ffi_slot *s, vf_kind kind, int64_t i, double f, int dt) {
  switch (kind) {
  case VF_I64: s->i64 = i; return &ffi_type_sint64;
  case VF_I32: s->i32 = (int32_t)i; return &ffi_type_sint32;
  case VF_F32: s->f32 = (float)f; return &ffi_type_float;
  case VF_F64: s->f64 = f; return &ffi_type_double;
  default: s->dt = dt; return &ffi_type_sint;
  }
}

/* fn(values[n]) with the signature types[n] returning int: 0 with its
 * return code in *rc, or -1 when libffi cannot prepare that call. */
static inline int vf_ffi_call(void *fn, int n, ffi_type **types, void **values, int *rc) {
  ffi_cif cif;
  if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, (unsigned)n, &ffi_type_sint, types) != FFI_OK) return -1;
  ffi_arg r = 0;
  ffi_call(&cif, FFI_FN(fn), &r, values);
  *rc = (int)r;
  return 0;
}

#endif
