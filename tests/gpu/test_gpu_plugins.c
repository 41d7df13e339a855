/* The GPU platform plugins on a machine without a GPU:
 *  - each built plugin loads through the real loader and is UNSUITED (score
 *    0) with a one-line reason naming what is missing: device code for the
 *    target, the runtime library (and what was tried), or the device;
 *  - a forced runtime path that does not exist is reported as such;
 *  - the .so has no DT_NEEDED on any GPU runtime (read from its ELF dynamic
 *    section here, not with readelf);
 *  - the plugin embeds its code object byte for byte, the code object is of
 *    the right kind (clang offload bundle / CUDA fatbin), carries the target
 *    and defines every kernel the host looks up. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/loader.h"
#include "gpu_kernels.h"
#include "gpu_test_plugins.h"
#include "tests/util/check_main.h"

static const char *const kernel_names[] = {
#define X(n) #n,
    MI_GPU_KERNEL_LIST(X)
#undef X
};

static void plugin_path(const gpu_plugin_info *p, char *out, size_t len) {
  const char *b = getenv("MI_BUILD_DIR");
  ck_assert_ptr_nonnull(b);
  snprintf(out, len, "%s/lib/metainfer/libmi-%s.so", b, p->name);
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)sz + 1);
  ck_assert_uint_eq(fread(buf, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  *n = (size_t)sz;
  return buf;
}

/* Would this process find the runtime the plugin looks for? (Decides which
 * of the two expected reasons applies; both name what is missing.) */
static int runtime_loadable(const char *api) {
  const char *names[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", NULL};
  const char *cuda[] = {"libcuda.so.1", NULL};
  const char **list = strcmp(api, "hip") == 0 ? names : cuda;
  for (int i = 0; list[i]; i++) {
    void *h = dlopen(list[i], RTLD_LAZY | RTLD_LOCAL);
    if (h) return 1; /* kept open: a GPU runtime may not like being unloaded */
  }
  return 0;
}

START_TEST(unsuited_with_reason) {
  const gpu_plugin_info *g = &plugins[_i];
  char path[PATH_MAX];
  plugin_path(g, path, sizeof path);
  mi_plugin *p = mi_plugin_load_file(path, NULL);
  ck_assert_ptr_nonnull(p);
  ck_assert_msg(p->status == MI_PLUGIN_UNSUITED, "%s: status %d reason %s", g->name, p->status,
                p->reason ? p->reason : "(none)");
  ck_assert_int_eq(p->score, 0);
  ck_assert_ptr_nonnull(p->reason);
  ck_assert_ptr_null(strchr(p->reason, '\n'));
  ck_assert_str_eq(mi_plugin_name(p), g->name);
  const char *r = p->reason;
  if (!g->have_code) {
    char want[128];
    snprintf(want, sizeof want, "built without device code for %s", g->arch);
    ck_assert_msg(strstr(r, want), "%s: reason '%s' lacks '%s'", g->name, r, want);
  } else if (strcmp(g->api, "hip") == 0) {
    if (runtime_loadable("hip"))
      ck_assert_msg(strstr(r, "hipGetDeviceCount: hipErrorNoDevice (100)") ||
                        strstr(r, "hipGetDeviceCount: hipErrorInvalidDevice") ||
                        strstr(r, "no HIP device (device count 0"),
                    "%s: reason '%s'", g->name, r);
    else
      ck_assert_msg(strstr(r, "no HIP runtime found (tried libamdhip64.so"), "%s: reason '%s'",
                    g->name, r);
  } else {
    if (runtime_loadable("cuda"))
      ck_assert_msg(strstr(r, "cuInit") || strstr(r, "cuDeviceGetCount") ||
                        strstr(r, "no CUDA device (device count 0"),
                    "%s: reason '%s'",
                    g->name, r);
    else
      ck_assert_msg(strstr(r, "no CUDA driver found (tried libcuda.so.1"), "%s: reason '%s'",
                    g->name, r);
  }
  mi_plugin_unload(p);
}
END_TEST

/* Plugin g loaded with the one option key=value: it must come out
 * unsuited (the caller checks why and unloads it). */
static mi_plugin *load_unsuited_with(const gpu_plugin_info *g, const char *key, const char *value) {
  char path[PATH_MAX];
  plugin_path(g, path, sizeof path);
  mi_kv kv[] = {{key, value}};
  mi_options opts = {kv, 1};
  mi_plugin *p = mi_plugin_load_file(path, &opts);
  ck_assert_int_eq(p->status, MI_PLUGIN_UNSUITED);
  return p;
}

START_TEST(forced_runtime_missing) {
  const gpu_plugin_info *g = &plugins[_i];
  if (!g->have_code) return; /* stops earlier, at "built without device code" */
  mi_plugin *p = load_unsuited_with(g, "runtime", "/nonexistent/libgpu-runtime.so");
  ck_assert_msg(strstr(p->reason, "(tried runtime=/nonexistent/libgpu-runtime.so)") &&
                    strstr(p->reason, "No such file"),
                "%s: reason '%s'", g->name, p->reason);
  mi_plugin_unload(p);
}
END_TEST

START_TEST(bad_device_option) {
  mi_plugin *p = load_unsuited_with(&plugins[_i], "device", "first");
  ck_assert_msg(strstr(p->reason, "option device=first must be an integer"), "reason '%s'",
                p->reason);
  mi_plugin_unload(p);
}
END_TEST

/* DT_NEEDED entries of an ELF64 shared object, from its dynamic section. */
static int needed_libs(const unsigned char *f, size_t n, char out[][128], int max) {
  ck_assert_uint_ge(n, sizeof(Elf64_Ehdr));
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
  ck_assert_int_eq(memcmp(eh->e_ident, ELFMAG, SELFMAG), 0);
  ck_assert_int_eq(eh->e_ident[EI_CLASS], ELFCLASS64);
  ck_assert_uint_le(eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr), n);
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
  int count = 0, found_dynamic = 0;
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNAMIC) continue;
    found_dynamic = 1;
    const Elf64_Shdr *strs = &sh[sh[i].sh_link];
    ck_assert_uint_le(sh[i].sh_offset + sh[i].sh_size, n);
    const Elf64_Dyn *d = (const Elf64_Dyn *)(f + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof *d && d[k].d_tag != DT_NULL; k++)
      if (d[k].d_tag == DT_NEEDED && count < max) {
        ck_assert_uint_lt(strs->sh_offset + d[k].d_un.d_val, n);
        snprintf(out[count++], 128, "%s", (const char *)f + strs->sh_offset + d[k].d_un.d_val);
      }
  }
  ck_assert_msg(found_dynamic, "no dynamic section");
  return count;
}

START_TEST(no_runtime_needed) {
  const gpu_plugin_info *g = &plugins[_i];
  char path[PATH_MAX];
  plugin_path(g, path, sizeof path);
  size_t n;
  unsigned char *f = read_file(path, &n);
  char needed[32][128];
  int k = needed_libs(f, n, needed, 32);
  ck_assert_int_ge(k, 1); /* libc at least: the parser works */
  int libc = 0;
  for (int i = 0; i < k; i++) {
    libc |= strncmp(needed[i], "libc.so", 7) == 0;
    static const char *const banned[] = {"amdhip64", "cudart", "libcuda", "hiprtc",
                                         "nccl",     "rccl",   "hsa-runtime", NULL};
    for (int b = 0; banned[b]; b++)
      ck_assert_msg(!strstr(needed[i], banned[b]), "%s: DT_NEEDED %s", g->name, needed[i]);
  }
  ck_assert(libc);
  free(f);
}
END_TEST

START_TEST(code_object_embedded) {
  const gpu_plugin_info *g = &plugins[_i];
  if (!g->have_code) return;
  size_t cn, sn;
  unsigned char *code = read_file(g->code_file, &cn);
  char path[PATH_MAX];
  plugin_path(g, path, sizeof path);
  unsigned char *so = read_file(path, &sn);
  ck_assert_uint_gt(cn, 1024);
  if (strcmp(g->api, "hip") == 0) {
    ck_assert_int_eq(memcmp(code, "__CLANG_OFFLOAD_BUNDLE__", 24), 0);
    char target[96];
    snprintf(target, sizeof target, "amdgcn-amd-amdhsa--%s", g->arch);
    ck_assert_msg(memmem(code, cn, target, strlen(target)), "no %s in the bundle", target);
  } else {
    uint32_t magic;
    memcpy(&magic, code, 4);
    ck_assert_uint_eq(magic, 0xBA55ED50u); /* fatbin header */
    ck_assert_msg(memmem(code, cn, ".target sm_", 11), "no PTX in the fatbin");
  }
  for (size_t k = 0; k < sizeof kernel_names / sizeof kernel_names[0]; k++)
    ck_assert_msg(memmem(code, cn, kernel_names[k], strlen(kernel_names[k])),
                  "%s: kernel %s missing from the code object", g->name, kernel_names[k]);
  /* the whole code object, byte for byte, inside the plugin */
  ck_assert_msg(memmem(so, sn, code, cn), "%s does not embed %s", path, g->code_file);
  free(code);
  free(so);
}
END_TEST

int main(void) {
  return mi_check_run(mi_check_loop_suite("gpu_plugins", "no_gpu", 60,
                                          MI_CHECK_TESTS(unsuited_with_reason,
                                                         forced_runtime_missing, bad_device_option,
                                                         no_runtime_needed, code_object_embedded),
                                          0, NPLUGINS));
}
