/* Platform members by name, interface sizes by ABI minor, and the
 * model/platform compatibility check (see core/runtime/compat.h). Every
 * table here is generated from MI_PLATFORM_MEMBERS in sdk/include/mi/platform.h. */
#include "core/runtime/compat.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/runtime/host.h"

#define END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* A model's needs list is walked until its NULL member: bound it. */
#define MAX_NEEDS 256

static const struct {
  const char *name;
  size_t off, end;
  unsigned minor;
} k_members[] = {
#define X(name_, minor_, kernel_)                                                                  \
  {#name_, offsetof(mi_platform_iface, name_), END_OF(mi_platform_iface, name_), (minor_)},
    MI_PLATFORM_MEMBERS(X)
#undef X
};
#define N_MEMBERS (sizeof k_members / sizeof *k_members)

/* What the core itself calls on a platform during a session. */
static const mi_platform_need k_core_needs[] = {
    {"last_error", MI_NEED_ALWAYS, NULL, NULL},
    {"device_info", MI_NEED_ALWAYS, NULL, NULL},
    {"comm_info", MI_NEED_TP, NULL, NULL}, /* the group must have tp_size ranks */
    {"broadcast", MI_NEED_TP, NULL, NULL}, /* the sampled token, rank 0 to all */
    {NULL, 0, NULL, NULL},
};

long mi_platform_member_offset(const char *name) {
  for (size_t i = 0; name && i < N_MEMBERS; i++)
    if (strcmp(k_members[i].name, name) == 0) return (long)k_members[i].off;
  return -1;
}

int mi_platform_provides(const mi_platform_iface *iface, const char *name) {
  for (size_t i = 0; iface && name && i < N_MEMBERS; i++) {
    if (strcmp(k_members[i].name, name) != 0) continue;
    if (iface->struct_size < k_members[i].end) return 0;
    void *fn;
    memcpy(&fn, (const char *)iface + k_members[i].off, sizeof fn);
    return fn != NULL;
  }
  return 0;
}

size_t mi_platform_iface_min_size(unsigned minor) {
  size_t end = sizeof(uint32_t);
  for (size_t i = 0; i < N_MEMBERS; i++)
    if (k_members[i].minor <= minor && k_members[i].end > end) end = k_members[i].end;
  return end;
}

size_t mi_model_iface_min_size(unsigned minor) {
  return minor >= 5   ? END_OF(mi_model_iface, seq_state_write)
         : minor >= 3 ? END_OF(mi_model_iface, forward_batch)
         : minor >= 2 ? END_OF(mi_model_iface, platform_needs)
                      : END_OF(mi_model_iface, forward);
}

/* The model's list, or NULL when the plugin predates ABI 1.2. */
static const mi_platform_need *model_needs(const mi_plugin *model) {
  if (!model || !model->desc || !model->iface || model->desc->abi_minor < 2) return NULL;
  const mi_model_iface *m = model->iface;
  if (m->struct_size < END_OF(mi_model_iface, platform_needs)) return NULL;
  return m->platform_needs;
}

int mi_model_needs_valid(const mi_plugin_desc *d, const mi_model_iface *m, char *why, size_t n) {
  if (d->abi_minor < 2) return 0;
  if (!m->platform_needs) {
    snprintf(why, n, "model interface member platform_needs is NULL (required from ABI 1.2)");
    return -1;
  }
  for (size_t i = 0;; i++) {
    if (i == MAX_NEEDS) {
      snprintf(why, n, "platform_needs has more than %d entries (is it NULL-terminated?)",
               MAX_NEEDS);
      return -1;
    }
    const mi_platform_need *e = &m->platform_needs[i];
    if (!e->member) return 0;
    if (mi_platform_member_offset(e->member) < 0) {
      snprintf(why, n, "platform_needs[%zu] names '%.64s', which is not a platform member", i,
               e->member);
      return -1;
    }
    if (e->when < MI_NEED_ALWAYS || e->when > MI_NEED_OPTION ||
        (e->when == MI_NEED_OPTION && !e->key)) {
      snprintf(why, n, "platform_needs[%zu] (%s): condition %d is not valid", i, e->member,
               e->when);
      return -1;
    }
  }
}

/* Is this need in force for the load? opts NULL with tp 0: only ALWAYS. */
static int applies(const mi_platform_need *e, int tp_size, const mi_options *opts) {
  switch (e->when) {
  case MI_NEED_ALWAYS: return 1;
  case MI_NEED_TP: return tp_size > 1;
  case MI_NEED_OPTION: {
    const char *v = opts ? mi_opt_get(opts, e->key) : NULL;
    return v && (!e->unless || strcmp(v, e->unless) != 0);
  }
  default: return 1;
  }
}

/* Appends ", name" (or "name") to out, once. */
static void add_name(char *out, size_t n, const char *name) {
  size_t l = strlen(out), nl = strlen(name);
  /* already listed? */
  for (const char *p = out; (p = strstr(p, name)); p += nl)
    if ((p == out || p[-1] == ' ') && (p[nl] == ',' || p[nl] == '\0')) return;
  snprintf(out + l, n - l, "%s%s", l ? ", " : "", name);
}

/* Missing members of one list into out. */
static void collect(const mi_platform_need *needs, const mi_platform_iface *P, int tp_size,
                    const mi_options *opts, int only_when, char *out, size_t n) {
  for (size_t i = 0; needs && i < MAX_NEEDS && needs[i].member; i++) {
    const mi_platform_need *e = &needs[i];
    if (only_when >= 0 ? e->when != only_when : !applies(e, tp_size, opts)) continue;
    if (!mi_platform_provides(P, e->member)) add_name(out, n, e->member);
  }
}

int mi_compat_check(const mi_plugin *platform, const mi_plugin *model, int tp_size,
                    const mi_options *model_opts, char *err, size_t err_len) {
  char missing[512] = "";
  const mi_platform_iface *P = platform->iface;
  collect(k_core_needs, P, tp_size, model_opts, -1, missing, sizeof missing);
  collect(model_needs(model), P, tp_size, model_opts, -1, missing, sizeof missing);
  if (!missing[0]) return 0;
  snprintf(err, err_len, "platform '%s' cannot serve model '%s'%s: lacks %s",
           mi_plugin_name(platform), mi_plugin_name(model),
           tp_size > 1 ? " with tensor parallelism" : "", missing);
  return -1;
}

int mi_compat_describe(const mi_plugin *platform, const mi_plugin *model, char *out, size_t n) {
  const mi_platform_iface *P = platform->iface;
  const mi_platform_need *needs = model_needs(model);
  char always[256] = "", tp[256] = "", opt[256] = "";
  collect(k_core_needs, P, 1, NULL, MI_NEED_ALWAYS, always, sizeof always);
  collect(needs, P, 1, NULL, MI_NEED_ALWAYS, always, sizeof always);
  if (always[0]) {
    snprintf(out, n, "%s: lacks %s", mi_plugin_name(model), always);
    return -1;
  }
  collect(k_core_needs, P, 2, NULL, MI_NEED_TP, tp, sizeof tp);
  collect(needs, P, 2, NULL, MI_NEED_TP, tp, sizeof tp);
  for (size_t i = 0; needs && i < MAX_NEEDS && needs[i].member; i++)
    if (needs[i].when == MI_NEED_OPTION && !mi_platform_provides(P, needs[i].member)) {
      size_t l = strlen(opt);
      snprintf(opt + l, sizeof opt - l, "%s%s other than %s: %s", l ? "; " : "", needs[i].key,
               needs[i].unless ? needs[i].unless : "unset", needs[i].member);
    }
  snprintf(out, n, "%s%s%s%s%s%s%s", mi_plugin_name(model), tp[0] || opt[0] ? " (not with " : "",
           tp[0] ? "--tp > 1: lacks " : "", tp, tp[0] && opt[0] ? "; " : "", opt,
           tp[0] || opt[0] ? ")" : "");
  return 0;
}
