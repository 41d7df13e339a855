/* Candidate directories and sonames for the GPU runtimes (see the header). */
#define _GNU_SOURCE
#include "gpu_libsearch.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Newest ABI first: a DTK/ROCm install may ship several. */
static const char *const hip_names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                                        "libamdhip64.so.5", "libamdhip64.so.4", NULL};
/* Only the driver's soname: "libcuda.so" without .1 is usually the toolkit's
 * link-time stub (it fails every call with CUDA_ERROR_STUB_LIBRARY). */
static const char *const cuda_names[] = {"libcuda.so.1", NULL};
/* Collective libraries for tensor parallelism. RCCL ships librccl.so (dev
 * symlink) and librccl.so.1; NCCL's runtime soname is libnccl.so.2. */
static const char *const rccl_names[] = {"librccl.so", "librccl.so.1", NULL};
static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void add_dir(gpu_lib_search *s, const char *dir) {
  if (!dir || !*dir || s->ndirs >= GPU_LIB_MAX_DIRS) return;
  if (strlen(dir) >= GPU_LIB_PATH_LEN) return;
  for (int i = 0; i < s->ndirs; i++)
    if (strcmp(s->dirs[i], dir) == 0) return;
  if (!is_dir(dir)) return;
  snprintf(s->dirs[s->ndirs++], GPU_LIB_PATH_LEN, "%s", dir);
}

static void add_prefix(gpu_lib_search *s, const char *prefix) {
  if (!prefix || !*prefix) return;
  char buf[GPU_LIB_PATH_LEN];
  /* ROCm puts the runtime in lib/; DTK and older ROCm also have hip/lib. */
  if (snprintf(buf, sizeof buf, "%s/lib", prefix) < (int)sizeof buf) add_dir(s, buf);
  if (snprintf(buf, sizeof buf, "%s/hip/lib", prefix) < (int)sizeof buf) add_dir(s, buf);
  if (snprintf(buf, sizeof buf, "%s/lib64", prefix) < (int)sizeof buf) add_dir(s, buf);
}

static int cmp_desc(const void *a, const void *b) {
  return -strverscmp(*(char *const *)a, *(char *const *)b);
}

/* Every root/opt/<stem>-* directory, highest version first. */
static void add_versioned(gpu_lib_search *s, const char *root, const char *stem) {
  char opt[GPU_LIB_PATH_LEN];
  snprintf(opt, sizeof opt, "%s/opt", root);
  DIR *d = opendir(opt);
  if (!d) return;
  char *names[64];
  int n = 0;
  size_t sl = strlen(stem);
  struct dirent *e;
  while ((e = readdir(d)) && n < 64)
    if (strncmp(e->d_name, stem, sl) == 0 && e->d_name[sl] == '-') names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_desc);
  for (int i = 0; i < n; i++) {
    if (names[i]) {
      char p[GPU_LIB_PATH_LEN];
      if (snprintf(p, sizeof p, "%s/%s", opt, names[i]) < (int)sizeof p) add_prefix(s, p);
    }
    free(names[i]);
  }
}

static const char *real_getenv(const char *n) { return getenv(n); }

static void search_init(gpu_lib_search *s, const char *const *names) {
  memset(s, 0, sizeof *s);
  s->names = names;
}

/* add (add_dir or add_prefix) of root + rel: root stands for "/" in tests. */
static void add_rooted(gpu_lib_search *s, void (*add)(gpu_lib_search *, const char *),
                       const char *root, const char *rel) {
  char p[GPU_LIB_PATH_LEN];
  snprintf(p, sizeof p, "%s%s", root ? root : "", rel);
  add(s, p);
}

/* The HIP install directories, appended to s (see the header for the order). */
static void hip_dirs(gpu_lib_search *s, gpu_getenv_fn env, const char *root) {
  const char *vars[] = {"ROCM_PATH", "HIP_PATH", "DTK_HOME", "DTK_PATH"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) add_prefix(s, env(vars[i]));
  add_rooted(s, add_prefix, root, "/opt/dtk");
  add_versioned(s, root, "dtk");
  add_rooted(s, add_prefix, root, "/opt/rocm");
  add_versioned(s, root, "rocm");
}

void gpu_lib_search_hip(gpu_lib_search *s, gpu_getenv_fn env, const char *root) {
  search_init(s, hip_names);
  hip_dirs(s, env ? env : real_getenv, root ? root : "");
}

/* The directory part of a library path, when it has one. */
static void add_dir_of(gpu_lib_search *s, const char *lib) {
  const char *slash = lib ? strrchr(lib, '/') : NULL;
  if (!slash || slash == lib) return;
  char d[GPU_LIB_PATH_LEN];
  size_t n = (size_t)(slash - lib);
  if (n >= sizeof d) return;
  memcpy(d, lib, n);
  d[n] = '\0';
  add_dir(s, d);
}

void gpu_lib_search_rccl(gpu_lib_search *s, const char *rt_lib, gpu_getenv_fn env,
                         const char *root) {
  search_init(s, rccl_names);
  /* RCCL is linked against a HIP runtime; the one beside the runtime this
   * plugin opened is the one most likely to be the same library (two HIP
   * runtimes in one process do not share devices, streams or memory). */
  add_dir_of(s, rt_lib);
  hip_dirs(s, env ? env : real_getenv, root ? root : "");
}

void gpu_lib_search_nccl(gpu_lib_search *s, gpu_getenv_fn env, const char *root) {
  search_init(s, nccl_names);
  if (!env) env = real_getenv;
  add_prefix(s, env("NCCL_HOME"));
  add_prefix(s, env("CUDA_HOME"));
  add_rooted(s, add_prefix, root, "/usr/local/cuda");
}

void gpu_lib_search_cuda(gpu_lib_search *s, gpu_getenv_fn env, const char *root) {
  search_init(s, cuda_names);
  if (!env) env = real_getenv;
  add_dir(s, env("CUDA_DRIVER_PATH"));
  add_rooted(s, add_dir, root, "/usr/lib/wsl/lib");
}

/* Appends to a bounded string; keeps the result terminated. */
static void cat(char *dst, size_t len, const char *src) {
  size_t n = strlen(dst);
  if (n + 1 < len) snprintf(dst + n, len - n, "%s", src);
}

void *gpu_lib_open(const gpu_lib_search *s, const char *what, char *opened, size_t opened_len,
                   char *why, size_t why_len) {
  char last[GPU_LIB_PATH_LEN + 512] = "";
  for (int d = 0; d <= s->ndirs; d++) {
    for (int i = 0; s->names[i]; i++) {
      char path[GPU_LIB_PATH_LEN + 64];
      if (d < s->ndirs)
        snprintf(path, sizeof path, "%s/%s", s->dirs[d], s->names[i]);
      else
        snprintf(path, sizeof path, "%s", s->names[i]); /* default search path */
      if (d < s->ndirs && access(path, F_OK) != 0) continue;
      dlerror();
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) {
        if (opened && opened_len) snprintf(opened, opened_len, "%s", path);
        return h;
      }
      const char *e = dlerror();
      snprintf(last, sizeof last, "%s", e ? e : path);
    }
  }
  if (why && why_len) {
    snprintf(why, why_len, "no %s found (tried ", what);
    for (int i = 0; s->names[i]; i++) {
      if (i) cat(why, why_len, ", ");
      cat(why, why_len, s->names[i]);
    }
    cat(why, why_len, " in ");
    for (int d = 0; d < s->ndirs; d++) {
      cat(why, why_len, s->dirs[d]);
      cat(why, why_len, ", ");
    }
    cat(why, why_len, "the default library path)");
    if (*last) {
      cat(why, why_len, ": ");
      cat(why, why_len, last);
    }
  }
  return NULL;
}
