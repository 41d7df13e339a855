/* How much memory a run may use, and how much it uses: the numbers behind
 * "needs X GiB, Y available" (core/runtime/session.c). */
#ifndef MI_CORE_MEM_H
#define MI_CORE_MEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes this process may still allocate: MemAvailable from /proc/meminfo,
 * or the limit minus the usage of its cgroup (and each parent) when lower:
 * v2 memory.max - memory.current, v1 memory.limit_in_bytes -
 * memory.usage_in_bytes. *source says which ("MemAvailable", "cgroup
 * memory.max", "cgroup v1 memory.limit_in_bytes"). 0 when nothing can be
 * read. */
uint64_t mi_mem_available(const char **source);

/* The same, reading the given files in place of /proc/meminfo,
 * /proc/self/cgroup and the cgroup mount /sys/fs/cgroup (for tests). */
uint64_t mi_mem_available_at(const char *meminfo, const char *proc_cgroup, const char *cgroup_fs,
                             const char **source);

/* Resident set size now, bytes (/proc/self/statm); 0 when unknown. */
uint64_t mi_mem_rss(void);

/* Bytes of the weight files a model directory names: model.safetensors,
 * or each distinct shard of model.safetensors.index.json (stat only; a
 * file that cannot be read counts 0 and is reported later by the loader). */
uint64_t mi_mem_weight_file_bytes(const char *model_dir);

/* "1.50 GiB", or "12.3 MiB" below 1 GiB */
void mi_mem_gib(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
