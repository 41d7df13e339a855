/* The kernel-pack generator (docs/kernel-packs.md): from the CKB's operator
 * contracts stated as an expression (the "map" form, core/ckb/map_form.h),
 * one C kernel each, written into a plugin of kind MI_PLUGIN_KERNELS
 * (sdk/include/mi/kernel_pack.h) for the target "host-c", built with the
 * system compiler against the SDK headers, and described by a manifest.
 *
 * What it writes into OUT_DIR:
 *   pack.c                the generated source (readable C; do not edit)
 *   libmi-pack-NAME.so    the plugin, built from pack.c
 *   pack.json             the manifest: {"name", "target", "abi", "library",
 *                         "source", "source_sha256", "kernels": [{"operator",
 *                         "version", "math", "symbol"}]}
 * The same CKB entries and name give the same pack.c and pack.json, byte for
 * byte (no dates, no paths, entries in a fixed order). */
#ifndef MI_CORE_GEN_PACK_PACK_H
#define MI_CORE_GEN_PACK_PACK_H

#include <jansson.h>
#include <stddef.h>

#include "core/ckb/ckb.h"

/* The pack's source in memory: *src (malloc'd, NUL-terminated; free() it)
 * and *kernels (the manifest's "kernels" array; json_decref it). op_ids: a
 * NULL-terminated list of operator ids, in the pack's order, or NULL for
 * every operator with a map form, by id. name: [a-z0-9_-]{1,48}. 0, or -1
 * with one line in err naming the operator and the problem (no such entry,
 * not a map operator, an entry that does not validate, an argument the C
 * cannot carry). */
int mi_pack_emit(const mi_ckb *ckb, const char *const *op_ids, const char *name, char **src,
                 json_t **kernels, char *err, size_t err_len);

/* mi_pack_emit, then OUT_DIR (made when missing) gets pack.c, the library
 * built by `/usr/bin/cc -std=gnu11 -O2 -fPIC -shared -fvisibility=hidden
 * -Wall -I SDK_INCLUDE pack.c -lm` (a compiler failure leaves its output in
 * OUT_DIR/build.log and says so) and pack.json, written last, so a manifest
 * only ever describes a library that was built. 0, or -1 with one line in
 * err. */
int mi_pack_generate(const mi_ckb *ckb, const char *const *op_ids, const char *name,
                     const char *out_dir, const char *sdk_include, char *err, size_t err_len);

/* The library's file name for a pack: "libmi-pack-NAME.so" into out. */
void mi_pack_library_name(const char *name, char *out, size_t out_len);

#endif
