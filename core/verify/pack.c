/* Stage 1 on a kernel pack (mi/kernel_pack.h, mi-verify --pack): the
 * pack's manifest read in the parent, the pack described by a probe child,
 * and each unit's child loading the platform plugin and the pack, binding
 * one to the other and calling the operator's kernel from the pack through
 * the same libffi path as a platform member (unit.c), on the platform's
 * buffers and, through run_host, its threads. The verdicts are unit.c's:
 * the pack's kernels are held to the same float64 references and
 * tolerances as a platform's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/loader.h"
#include "core/runtime/packs.h"
#include "core/util/file.h"
#include "core/verify/verify.h"
#include "mi/kernel_pack.h"

#define MANIFEST_MAX_BYTES (4u << 20) /* one line per kernel: far below */

/* The manifest's checks after parsing: "" when it is usable, else why not. */
static void manifest_problem(const json_t *m, const char *lib, char *why, size_t n) {
  const json_t *ks = json_object_get(m, "kernels");
  const char *name = json_string_value(json_object_get(m, "name"));
  const char *target = json_string_value(json_object_get(m, "target"));
  const char *library = json_string_value(json_object_get(m, "library"));
  why[0] = 0;
  if (!json_is_object(m))
    snprintf(why, n, "not a JSON object");
  else if (!name || !name[0])
    snprintf(why, n, "no \"name\" string");
  else if (target && strcmp(target, MI_PACK_TARGET_HOST_C))
    snprintf(why, n, "target '%.64s': stage 1 runs \"" MI_PACK_TARGET_HOST_C "\" packs only",
             target);
  else if (library && strcmp(library, lib))
    snprintf(why, n, "it describes the library '%.200s', not '%.200s'", library, lib);
  else if (!json_is_array(ks) || !json_array_size(ks))
    snprintf(why, n, "no non-empty \"kernels\" array");
  if (why[0]) return;
  size_t i, j;
  json_t *k, *k2;
  json_array_foreach(ks, i, k) {
    const char *op = json_string_value(json_object_get(k, "operator"));
    if (!op || !json_is_string(json_object_get(k, "version"))) {
      snprintf(why, n, "kernels[%zu] has no \"operator\" and \"version\" strings", i);
      return;
    }
    for (j = 0; j < i; j++) {
      k2 = json_array_get(ks, j);
      if (!strcmp(op, json_string_value(json_object_get(k2, "operator")))) {
        snprintf(why, n, "kernels[%zu] lists '%.200s' again (first at kernels[%zu])", i, op, j);
        return;
      }
    }
  }
}

json_t *vf_pack_manifest_load(const char *pack_path, char *err, size_t err_len) {
  const char *slash = strrchr(pack_path, '/');
  const char *lib = slash ? slash + 1 : pack_path;
  char path[4200], why[600];
  snprintf(path, sizeof path, "%.*spack.json", (int)(lib - pack_path), pack_path);
  char e[4400];
  json_t *m = mi_file_load_json(path, 0, MANIFEST_MAX_BYTES, "pack manifest",
                                JSON_REJECT_DUPLICATES, e, sizeof e);
  if (!m) {
    snprintf(err, err_len, "the pack's manifest: %s", e);
    return NULL;
  }
  manifest_problem(m, lib, why, sizeof why);
  if (why[0]) {
    snprintf(err, err_len, "%s: not a usable pack manifest: %s", path, why);
    json_decref(m);
    return NULL;
  }
  return m;
}

/* The pack loaded in this (child) process, or NULL with why (n bytes). */
static mi_plugin *load_pack(const char *path, char *why, size_t n) {
  mi_plugin *p = mi_plugin_load_file(path, NULL);
  const char *w = NULL;
  const mi_kernel_pack_iface *k = p ? p->iface : NULL;
  if (!p)
    w = "out of memory";
  else if (p->status != MI_PLUGIN_LOADED)
    w = p->reason ? p->reason : "not loaded";
  else if (!p->desc || p->desc->kind != MI_PLUGIN_KERNELS)
    w = "not a kernel pack (its descriptor's kind is not \"kernels\")";
  else if (!k)
    w = "no interface";
  else if (!k->target || strcmp(k->target, MI_PACK_TARGET_HOST_C))
    w = "its target is not \"" MI_PACK_TARGET_HOST_C "\", the only one stage 1 runs";
  else if (!k->bind || !k->last_error || k->n_kernels < 0 || (k->n_kernels && !k->kernels))
    w = "its interface lacks bind, last_error or its kernels";
  if (!w) return p;
  snprintf(why, n, "%s: cannot use the pack: %s", path, w);
  mi_plugin_unload(p);
  return NULL;
}

/* ---------- the probe ---------- */

static int probe_child(void *arg, int fd) {
  const vf_stage_opts *o = arg;
  char why[1200];
  mi_plugin *p = load_pack(o->pack_path, why, sizeof why);
  if (!p) {
    vf_emit(fd, json_pack("{s:s, s:s}", "event", "error", "message", why));
    return 1;
  }
  const mi_kernel_pack_iface *k = p->iface;
  if (k->n_kernels < 0 || k->n_kernels > MI_PACK_MAX_KERNELS || (k->n_kernels && !k->kernels)) {
    snprintf(why, sizeof why, "%s: a kernel table that does not match its count (%lld; at most %d)", o->pack_path,
             (long long)k->n_kernels, MI_PACK_MAX_KERNELS);
    vf_emit(fd, json_pack("{s:s, s:s}", "event", "error", "message", why));
    mi_plugin_unload(p);
    return 1;
  }
  json_t *ks = json_array();
  for (int64_t i = 0; i < k->n_kernels; i++) {
    const mi_pack_kernel *pk = &k->kernels[i];
    json_array_append_new(ks, json_pack("{s:s, s:s, s:s}", "operator", pk->op ? pk->op : "?",
                                        "version", pk->op_version ? pk->op_version : "?", "math",
                                        pk->math ? pk->math : ""));
  }
  char abi[32];
  snprintf(abi, sizeof abi, "%u.%u", p->desc->abi_major, p->desc->abi_minor);
  vf_emit(fd, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "event", "pack", "name",
                        p->desc->name ? p->desc->name : "?", "version",
                        p->desc->version ? p->desc->version : "?", "kind",
                        mi_plugin_kind_name((int)p->desc->kind), "abi", abi, "target", k->target,
                        "kernels", ks));
  mi_plugin_unload(p);
  return 0;
}

json_t *vf_probe_pack(const vf_stage_opts *o) {
  vf_child_result r;
  if (vf_run_child(&o->lim, probe_child, (void *)o, &r) != 0)
    return json_pack("{s:s, s:s}", "verdict", "FAIL", "message", "cannot fork a child");
  json_t *ev = NULL, *err = NULL, *e, *out;
  size_t i;
  json_array_foreach(r.events, i, e) {
    const char *t = json_string_value(json_object_get(e, "event"));
    if (t && !strcmp(t, "pack") && !ev) ev = e;
    if (t && !strcmp(t, "error") && !err) err = e;
  }
  if (ev && r.exited && r.exit_code == 0) {
    out = json_deep_copy(ev);
    json_object_del(out, "event");
    json_object_set_new(out, "verdict", json_string("PASS"));
  } else {
    char msg[1400];
    if (err)
      snprintf(msg, sizeof msg, "%s", json_string_value(json_object_get(err, "message")));
    else if (r.timed_out)
      snprintf(msg, sizeof msg, "%s: loading timed out after %gs", o->pack_path, o->lim.timeout_s);
    else if (r.signaled)
      snprintf(msg, sizeof msg, "%s: crashed (%s) while loading", o->pack_path,
               vf_sig_name(r.term_signal));
    else
      snprintf(msg, sizeof msg, "%s: loading failed (exit code %d)", o->pack_path, r.exit_code);
    out = json_pack("{s:s, s:s, s:s}", "verdict", "FAIL", "message", msg, "raw_output",
                    r.output ? r.output : "");
  }
  vf_child_result_free(&r);
  return out;
}

/* ---------- one unit's child ---------- */

/* An ERROR record saying the unit cannot run as set up (its status ERROR). */
static void unrunnable(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unrunnable(int fd, const char *fmt, ...) {
  char msg[VF_REC_MAX_MSG];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  vf_rec_write(fd, VF_REC_ERROR, -1, VF_REC_RC_UNRUNNABLE, msg, NULL, 0);
}

int vf_pack_unit_run(const vf_stage_opts *o, const vf_op_plan *plan, int fd) {
  const char *op = vf_op_plan_op_id(plan);
  const char *want =
      json_string_value(json_object_get(json_object_get(o->operators, op ? op : ""), "version"));
  mi_plugin *plat = vf_load_plugin_rec(o, fd);
  if (!plat) return 1;
  char why[1200] = "";
  mi_plugin *pp = load_pack(o->pack_path, why, sizeof why);
  int rc = 1;
  if (!pp) {
    unrunnable(fd, "%s", why);
    goto out;
  }
  const mi_kernel_pack_iface *K = pp->iface;
  const char *pname = pp->desc->name ? pp->desc->name : "?";
  /* the pack's kernels run on this platform's threads (run_host) and take
   * its buffers: the pack says whether it can */
  /* the table checked and the pack bound as every session binds one
   * (core/runtime/packs.c): a count past the kernels it holds is refused
   * before anything iterates it */
  mi_pack_ref ref;
  if (mi_pack_bind_plugin(pp, plat->iface, plat->ctx, &ref, why, sizeof why) != 0) {
    unrunnable(fd, "%s: pack '%s' refuses the platform: %s", op, pname, why);
    goto out;
  }
  const mi_pack_kernel *pk = mi_pack_find(K, op);
  if (!pk)
    unrunnable(fd, "%s: pack '%s' has no kernel for this operator", op, pname);
  else if (!pk->op_version || !want || strcmp(pk->op_version, want))
    unrunnable(fd,
               "%s: pack '%s' has a kernel generated from version %s of the contract, the CKB's is "
               "version %s",
               op, pname, pk->op_version ? pk->op_version : "(none recorded)",
               want ? want : "(none)");
  else if (!pk->fn)
    unrunnable(fd, "%s: pack '%s' lists a kernel without a function", op, pname);
  else {
    vf_kernel k = {NULL, pp->ctx, K->last_error};
    memcpy(&k.fn, &pk->fn, sizeof k.fn); /* POSIX: function and object pointers round-trip */
    rc = vf_op_plan_run_kernel(plan, plat->iface, plat->ctx, &k, fd);
  }
out:
  mi_plugin_unload(pp);
  mi_plugin_unload(plat);
  return rc;
}
