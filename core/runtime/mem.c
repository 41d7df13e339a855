/* Memory figures: see mem.h. */
#include "core/runtime/mem.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/file.h"

static int read_u64_file(const char *path, uint64_t *out) {
  char buf[64];
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  int ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok || !strncmp(buf, "max", 3)) return -1;
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  if (end == buf) return -1;
  *out = v;
  return 0;
}

/* The tightest cgroup limit on the path from dir up to root (root
 * included: inside a container the mount's root is the container's own
 * cgroup): limit_name minus usage_name in each folder that has both. */
static void cgroup_walk(const char *root, const char *rel, const char *limit_name,
                        const char *usage_name, const char *label, uint64_t *best,
                        const char **src) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s%s", root, strcmp(rel, "/") ? rel : "");
  size_t root_len = strlen(root);
  for (;;) {
    char pm[4300], pc[4300];
    uint64_t max, cur;
    snprintf(pm, sizeof pm, "%s/%s", dir, limit_name);
    snprintf(pc, sizeof pc, "%s/%s", dir, usage_name);
    if (read_u64_file(pm, &max) == 0 && read_u64_file(pc, &cur) == 0) {
      uint64_t left = max > cur ? max - cur : 0;
      if (!*src || left < *best) {
        *best = left;
        *src = label;
      }
    }
    char *slash = strrchr(dir, '/');
    if (!slash || slash < dir + root_len || strlen(dir) <= root_len) break;
    *slash = 0;
  }
}

/* Does a cgroup v1 line's controller list ("cpu,cpuacct" / "memory")
 * name the memory controller? */
static int names_memory(const char *list, size_t n) {
  for (const char *p = list; p < list + n;) {
    const char *c = memchr(p, ',', (size_t)(list + n - p));
    size_t len = c ? (size_t)(c - p) : (size_t)(list + n - p);
    if (len == 6 && !memcmp(p, "memory", 6)) return 1;
    p += len + 1;
  }
  return 0;
}

uint64_t mi_mem_available_at(const char *meminfo, const char *proc_cgroup, const char *cgroup_fs,
                             const char **source) {
  uint64_t best = 0;
  const char *src = NULL;
  FILE *f = fopen(meminfo, "re");
  if (f) {
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        best = (uint64_t)kb * 1024;
        src = "MemAvailable";
        break;
      }
    fclose(f);
  }
  /* cgroup v2: "0::/some/path"; cgroup v1 (older Docker and Kubernetes
   * nodes): "4:memory:/some/path", its files under <fs>/memory. A host
   * may have both (hybrid mode): each limit counts. v1 reports no limit as
   * a huge number, which never wins. */
  f = fopen(proc_cgroup, "re");
  if (f) {
    char line[4096];
    while (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\n")] = 0;
      char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      if (!c2 || c2[1] != '/') continue;
      char root[4200];
      if (c2 == c1 + 1 && !strncmp(line, "0:", 2)) {
        snprintf(root, sizeof root, "%s", cgroup_fs);
        cgroup_walk(root, c2 + 1, "memory.max", "memory.current", "cgroup memory.max", &best, &src);
      } else if (names_memory(c1 + 1, (size_t)(c2 - c1 - 1))) {
        snprintf(root, sizeof root, "%s/memory", cgroup_fs);
        cgroup_walk(root, c2 + 1, "memory.limit_in_bytes", "memory.usage_in_bytes",
                    "cgroup v1 memory.limit_in_bytes", &best, &src);
      }
    }
    fclose(f);
  }
  if (source) *source = src ? src : "unknown";
  return best;
}

uint64_t mi_mem_available(const char **source) {
  return mi_mem_available_at("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup", source);
}

uint64_t mi_mem_rss(void) {
  FILE *f = fopen("/proc/self/statm", "re");
  if (!f) return 0;
  unsigned long long size, res;
  int n = fscanf(f, "%llu %llu", &size, &res);
  fclose(f);
  return n == 2 ? (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

static uint64_t file_bytes(const char *dir, const char *name) {
  char p[4096];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return stat(p, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

uint64_t mi_mem_weight_file_bytes(const char *model_dir) {
  struct stat st;
  if (stat(model_dir, &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return (uint64_t)st.st_size;
  uint64_t single = file_bytes(model_dir, "model.safetensors");
  if (single) return single;
  char p[4096];
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", model_dir);
  json_t *idx = mi_file_load_json(p, 0, 64u << 20, NULL, 0, NULL, 0);
  uint64_t total = 0;
  json_t *seen = json_object();
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(idx, "weight_map"), k, v) {
    const char *s = json_string_value(v);
    if (!s || strchr(s, '/') || json_object_get(seen, s)) continue;
    json_object_set_new(seen, s, json_true());
    total += file_bytes(model_dir, s);
  }
  json_decref(seen);
  json_decref(idx);
  return total;
}

void mi_mem_gib(uint64_t bytes, char *buf, size_t len) {
  if (bytes >= (1ull << 30))
    snprintf(buf, len, "%.2f GiB", (double)bytes / (double)(1ull << 30));
  else
    snprintf(buf, len, "%.1f MiB", (double)bytes / (double)(1ull << 20));
}
