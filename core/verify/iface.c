/* The platform interface by member name: operator contracts name the
 * mi_platform_iface kernel that implements them ("member": "rmsnorm"), and
 * the verifier finds the function pointer through this offset table, within
 * the struct_size the plugin declared (an older plugin's struct is shorter). */
#include <stddef.h>
#include <string.h>

#include "core/verify/verify.h"

/* The kernels of MI_PLATFORM_MEMBERS (sdk/include/mi/platform.h). */
#define M(name_, minor_, kernel_) {(kernel_) ? #name_ : NULL, offsetof(mi_platform_iface, name_)},
static const struct {
  const char *name; /* NULL: not a kernel (devices, memory, streams, collectives) */
  size_t off;
} all_members[] = {MI_PLATFORM_MEMBERS(M)};
#undef M
#define N_ALL (sizeof all_members / sizeof *all_members)

long vf_member_offset(const char *member) {
  for (size_t i = 0; member && i < N_ALL; i++)
    if (all_members[i].name && !strcmp(all_members[i].name, member)) return (long)all_members[i].off;
  return -1;
}

const char *const *vf_member_names(void) {
  static const char *names[N_ALL + 1];
  size_t n = 0;
  for (size_t i = 0; i < N_ALL; i++)
    if (all_members[i].name) names[n++] = all_members[i].name;
  names[n] = NULL;
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
