/* The platform interface by member name: operator contracts name the
 * mi_platform_iface member that implements them ("member": "rmsnorm"), and
 * the verifier finds the function pointer through this offset table, within
 * the struct_size the plugin declared (an older plugin's struct is shorter). */
#include <stddef.h>
#include <string.h>

#include "core/verify/verify.h"

#define M(name) {#name, offsetof(mi_platform_iface, name)}
static const struct {
  const char *name;
  size_t off;
} members[] = {
    M(matmul), M(rmsnorm), M(rope), M(attention), M(silu_mul),
    M(add),    M(scale),   M(embed), M(argmax),
};
#undef M

long vf_member_offset(const char *member) {
  for (size_t i = 0; member && i < sizeof members / sizeof *members; i++)
    if (!strcmp(members[i].name, member)) return (long)members[i].off;
  return -1;
}

const char *const *vf_member_names(void) {
  static const char *names[sizeof members / sizeof *members + 1];
  for (size_t i = 0; i < sizeof members / sizeof *members; i++) names[i] = members[i].name;
  return names;
}

void *vf_member_fn(const mi_platform_iface *iface, const char *member) {
  long off = vf_member_offset(member);
  if (off < 0 || !iface || iface->struct_size < (size_t)off + sizeof(void (*)(void))) return NULL;
  void *fn;
  /* Function pointer read as object bytes: POSIX guarantees they round-trip. */
  memcpy(&fn, (const char *)iface + off, sizeof fn);
  return fn;
}

int vf_kind_parse(const char *s, vf_kind *out) {
  static const char *names[] = {"ctx", "stream", "in", "out", "inout", "i64", "i32", "f32", "f64", "dtype"};
  for (int i = 0; s && i < (int)(sizeof names / sizeof *names); i++)
    if (!strcmp(names[i], s)) {
      *out = (vf_kind)i;
      return 0;
    }
  return -1;
}

int vf_dtype_parse(const char *s, mi_dtype *out) {
  for (int i = 0; s && i < MI_DTYPE_COUNT; i++)
    if (!strcmp(mi_dtype_name((mi_dtype)i), s)) {
      *out = (mi_dtype)i;
      return 0;
    }
  return -1;
}
