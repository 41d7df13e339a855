/* The kernel-pack generator's builder (core/gen/pack/pack.h): the emitted
 * source written into OUT_DIR, compiled into the plugin with the system
 * compiler against the SDK headers (as mi-gen's build stage compiles an
 * engine), and the manifest written last, so that a pack.json beside a
 * library always describes the library that was built from pack.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gen/gen.h"
#include "core/gen/pack/pack.h"
#include "core/util/file.h"
#include "core/util/out.h"
#include "core/util/spawn.h"
#include "mi/kernel_pack.h"
#include "mi/plugin.h"

/* The compiler's first line that says "error" (else its last line): the
 * one line a failed build is reported with. */
static void first_error(const char *log, char *out, size_t n) {
  out[0] = 0;
  FILE *f = fopen(log, "r");
  char line[1024];
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (strstr(line, "error")) {
      size_t l = strlen(line) < n ? strlen(line) : n - 1;
      memcpy(out, line, l);
      out[l] = 0;
      break;
    }
  }
  if (f) fclose(f);
  if (!out[0]) mi_file_last_line(log, out, n);
}

static int write_manifest(const char *path, const char *name, const char *lib, const char *src_sha,
                          json_t *kernels, char *err, size_t err_len) {
  char abi[32];
  snprintf(abi, sizeof abi, "%d.%d", MI_ABI_MAJOR, MI_ABI_MINOR);
  json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:O}", "name", name, "target",
                        MI_PACK_TARGET_HOST_C, "abi", abi, "library", lib, "source", "pack.c",
                        "source_sha256", src_sha, "kernels", kernels);
  char *text = m ? json_dumps(m, JSON_INDENT(2)) : NULL;
  json_decref(m);
  if (!text) {
    snprintf(err, err_len, "%s: out of memory", path);
    return -1;
  }
  size_t len = strlen(text);
  char *withnl = realloc(text, len + 2);
  if (!withnl) {
    free(text);
    snprintf(err, err_len, "%s: out of memory", path);
    return -1;
  }
  withnl[len] = '\n', withnl[len + 1] = 0;
  int rc = mi_out_write_file(path, withnl, len + 1, err, err_len);
  free(withnl);
  return rc;
}

int mi_pack_generate(const mi_ckb *ckb, const char *const *op_ids, const char *name,
                     const char *out_dir, const char *sdk_include, char *err, size_t err_len) {
  char hdr[4096];
  snprintf(hdr, sizeof hdr, "%s/mi/kernel_pack.h", sdk_include ? sdk_include : "");
  if (!sdk_include || access(hdr, R_OK) != 0) {
    snprintf(err, err_len, "%s: cannot read the SDK header a pack is built against (%s)", hdr,
             strerror(errno));
    return -1;
  }
  char *src;
  json_t *kernels;
  if (mi_pack_emit(ckb, op_ids, name, &src, &kernels, err, err_len) != 0) return -1;

  int rc = -1;
  char lib[128], c_path[4096], so[4352], tmp[4352], log[4096], manifest[4096];
  mi_pack_library_name(name, lib, sizeof lib);
  snprintf(c_path, sizeof c_path, "%s/pack.c", out_dir);
  snprintf(so, sizeof so, "%s/%s", out_dir, lib);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", out_dir, lib);
  snprintf(log, sizeof log, "%s/build.log", out_dir);
  snprintf(manifest, sizeof manifest, "%s/pack.json", out_dir);
  char sha[65];
  mi_sha256_buf(src, strlen(src), sha);

  if (mi_mkdir_p(out_dir) != 0) {
    snprintf(err, err_len, "%s: cannot make the folder: %s", out_dir, strerror(errno));
    goto done;
  }
  if (mi_out_write_file(c_path, src, strlen(src), err, err_len) != 0) goto done;

  /* Built under a temporary name and renamed: a loader never sees half a
   * library, and a failed build leaves the previous one in place. */
  unlink(log);
  unlink(tmp);
  char *cc_argv[] = {"/usr/bin/cc", "-std=gnu11", "-O2",
                     "-fPIC",       "-shared",    "-fvisibility=hidden",
                     "-Wall",       "-I",         (char *)sdk_include,
                     c_path,        "-o",         tmp,
                     "-lm",         NULL};
  int brc = mi_spawn_wait(cc_argv, log, NULL, 300);
  if (brc != 0) {
    char line[600];
    first_error(log, line, sizeof line);
    if (brc == 127)
      snprintf(err, err_len, "/usr/bin/cc: cannot be run to build %s", c_path);
    else
      snprintf(err, err_len, "%s: the compiler refused it (%s%d): %s (its output is in %s)", c_path,
               brc < 0 ? "killed, " : "exit ", brc, line[0] ? line : "no message", log);
    unlink(tmp);
    goto done;
  }
  if (rename(tmp, so) != 0) {
    snprintf(err, err_len, "%s: cannot put the library in place: %s", so, strerror(errno));
    unlink(tmp);
    goto done;
  }
  unlink(log);
  rc = write_manifest(manifest, name, lib, sha, kernels, err, err_len);
done:
  free(src);
  json_decref(kernels);
  return rc;
}
