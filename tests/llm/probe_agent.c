/* A test agent: reads through the host's file tool every path its task
 * lists ("read": [...], "list": [...]) and returns which reads the host
 * allowed ({"status":"ok", "read": {path: bytes | "refused: why"}}).
 * Built twice: as is (host services v1), and with PROBE_NEEDS set to a
 * version no core lends (the host must refuse it with a readable line). */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mi/agent.h"
#include "mi/plugin.h"

#ifndef PROBE_NEEDS
#define PROBE_NEEDS MI_AGENT_HOST_VERSION
#endif

static int probe_run(void *ctx, const mi_agent_task *t, char **result, char *err, size_t el) {
  (void)ctx;
  const mi_agent_host *h = mi_agent_task_host(t, 1);
  if (!h) {
    snprintf(err, el, "probe: no host services");
    return -1;
  }
  json_t *task = json_loads(t->task_json, 0, NULL), *out = json_object();
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(task, "read"), i, v) {
    char *d = NULL, e[1024];
    size_t n = 0;
    if (h->read_file(h->ctx, json_string_value(v), 0, &d, &n, e, sizeof e) == 0) {
      json_object_set_new(out, json_string_value(v), json_integer((json_int_t)n));
      free(d);
    } else {
      json_object_set_new(out, json_string_value(v), json_sprintf("refused: %s", e));
    }
  }
  json_array_foreach(json_object_get(task, "list"), i, v) {
    char *d = NULL, e[1024];
    if (h->list_dir(h->ctx, json_string_value(v), &d, e, sizeof e) == 0) json_object_set_new(out, json_string_value(v), json_string(d));
    else json_object_set_new(out, json_string_value(v), json_sprintf("refused: %s", e));
    free(d);
  }
  h->note(h->ctx, "probe: done");
  json_t *res = json_pack("{s:s, s:o}", "status", "ok", "read", out);
  *result = json_dumps(res, JSON_COMPACT);
  json_decref(res);
  json_decref(task);
  return 0;
}

static const mi_agent_iface k_iface = {.struct_size = sizeof(mi_agent_iface), .role = "explorer", .strategy = "probe",
                                       .run = probe_run, .host_version = PROBE_NEEDS};
static int a_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err, size_t err_len) {
  (void)host, (void)opts, (void)err, (void)err_len;
  *ctx = NULL;
  return 0;
}
static const void *a_iface(void *ctx) {
  (void)ctx;
  return &k_iface;
}
static const mi_plugin_desc k_desc = {.abi_major = MI_ABI_MAJOR, .abi_minor = MI_ABI_MINOR,
                                      .struct_size = sizeof(mi_plugin_desc), .kind = MI_PLUGIN_AGENT,
                                      .name = "explorer.probe", .version = "0.1.0",
                                      .description = "test agent: reads through the host's file tool",
                                      .init = a_init, .get_iface = a_iface};
MI_PLUGIN_DEFINE(k_desc)
