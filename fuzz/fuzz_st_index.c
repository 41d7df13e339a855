/* Fuzzes model.safetensors.index.json: the weight_map and its shard names.
 * Input: the index file. The model directory (a temp dir made once) holds
 * two valid shards, a.safetensors {x, y} and b.safetensors {z}, so a
 * mutated index can name real shards, missing ones, or hostile paths. On
 * success every mapped tensor must be found in name order. */
#include "fuzz_util.h"

#include <sys/stat.h>

#include "core/runtime/safetensors.h"

static char g_dir[256];

/* A minimal valid safetensors file: header {"NAME": F32 [1] ...} + data. */
static void write_shard(const char *file, const char *hdr, size_t data_len) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, file);
  size_t hl = strlen(hdr);
  unsigned char buf[512] = {0};
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hl >> (8 * b));
  memcpy(buf + 8, hdr, hl);
  fuzz_write_file(path, buf, 8 + hl + data_len);
}

static void rm_dir(void) {
  char p[512];
  const char *files[] = {"a.safetensors", "b.safetensors", "model.safetensors.index.json"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
    unlink(p);
  }
  rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  /* every input is written to disk: prefer a RAM-backed folder */
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/mi-fuzz-index-XXXXXX", tmp);
  if (!mkdtemp(g_dir)) abort();
  atexit(rm_dir);
  write_shard("a.safetensors",
              "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"y\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
              8);
  write_shard("b.safetensors", "{\"z\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", g_dir);
  fuzz_write_file(p, data, size);
  char err[512] = "";
  mi_weights *w = mi_weights_open(g_dir, err, sizeof err);
  if (!w) {
    fuzz_check_one_line("mi_weights_open", err);
    return 0;
  }
  FUZZ_CHECK(mi_weights_count(w) <= 3, "%zu tensors from 3 in the shards", mi_weights_count(w));
  const char *prev = NULL;
  uint64_t total = 0;
  for (size_t i = 0; i < mi_weights_count(w); i++) {
    mi_weight_info wi;
    FUZZ_CHECK(mi_weights_at(w, i, &wi) == 0, "at(%zu)", i);
    FUZZ_CHECK(!prev || strcmp(prev, wi.name) < 0, "names not sorted/unique at %zu", i);
    prev = wi.name;
    total += wi.nbytes;
    FUZZ_CHECK(mi_weights_find(w, wi.name, NULL) == 0, "find '%s'", wi.name);
  }
  FUZZ_CHECK(total == mi_weights_total_bytes(w), "total bytes");
  mi_weights_close(w);
  return 0;
}
