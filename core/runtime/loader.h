/* Plugin loader and registry: finds plugins (plugins.conf or a directory
 * scan), dlopens them, checks each descriptor before calling anything in it,
 * probes, inits, and keeps a record of what was loaded or rejected and why.
 *
 * Search order for plugins.conf and for plugin files named in it (first hit
 * wins, and the listing says which one was used):
 *   1. --plugin-dir DIR (the CLI passes it as `plugin_dir`)
 *   2. the directories in $MI_PLUGIN_PATH (colon-separated)
 *   3. next to the executable: <exe_dir>/../lib/metainfer and <exe_dir>
 * A path in plugins.conf that is absolute, or contains a '/', is taken
 * relative to the conf file's directory and not searched.
 * When a search directory has no plugins.conf, every libmi-*.so in it is
 * loaded as optional.
 * (Loader, precisely: plugins.conf entries load first; then the libmi-*.so
 * of every search directory that comes before the one holding plugins.conf
 * -- all of them when there is none, none with --plugins-conf -- skipping
 * files already loaded. A later plugin with the same kind and name as a
 * loaded one is rejected as "shadowed by FILE". See core/runtime/loader.c.)
 */
#ifndef MI_CORE_LOADER_H
#define MI_CORE_LOADER_H

#include <stddef.h>

#include "core/runtime/conf.h"
#include "mi/plugin.h"

typedef enum mi_plugin_status {
  MI_PLUGIN_LOADED = 0,   /* descriptor valid, probe > 0, init succeeded */
  MI_PLUGIN_REJECTED = 1, /* unusable: see reason */
  MI_PLUGIN_UNSUITED = 2, /* valid, but probe scored 0 here: see reason */
} mi_plugin_status;

typedef struct mi_plugin {
  char *path;   /* the file, as resolved */
  char *origin; /* where it came from: "plugins.conf:3", "scan of DIR" */
  mi_plugin_status status;
  char *reason; /* why rejected/unsuited; NULL when loaded */
  int required; /* from plugins.conf */
  int score;    /* probe result (0..100), -1 if never probed */
  /* valid when the descriptor was read: */
  void *dl;
  const mi_plugin_desc *desc;
  /* valid when loaded: */
  void *ctx;
  const void *iface;
  mi_conf_entry *conf; /* the plugins.conf entry (options), or NULL for a scan */
} mi_plugin;

typedef struct mi_registry mi_registry;

typedef struct mi_loader_opts {
  const char *plugin_dir;   /* --plugin-dir, or NULL */
  const char *conf_path;    /* --plugins-conf FILE, or NULL: searched */
  const char *exe_path;     /* argv[0] resolved, for "next to the executable" */
  const mi_kv *extra_opts;  /* options appended to every plugin's (e.g. threads) */
  size_t n_extra_opts;
} mi_loader_opts;

/* Loads everything. Returns NULL only on out-of-memory; otherwise a registry
 * whose entries say what happened. *fatal is set (with a one-line message in
 * err) when a required plugin failed or plugins.conf is malformed. */
mi_registry *mi_registry_load(const mi_loader_opts *opts, int *fatal, char *err, size_t err_len);

/* Loads one plugin file directly (tests, mi-verify). Never NULL except OOM. */
mi_plugin *mi_plugin_load_file(const char *path, const mi_options *opts);
void mi_plugin_unload(mi_plugin *p);

size_t mi_registry_count(const mi_registry *r);
mi_plugin *mi_registry_at(const mi_registry *r, size_t i);

/* The loaded plugin of `kind` with the highest score; with `name`, only that
 * name. NULL if none. */
mi_plugin *mi_registry_best(const mi_registry *r, mi_plugin_kind kind, const char *name);

/* Prints one line per plugin: kind, name, version, score, status, path,
 * origin and reason. */
void mi_registry_print(const mi_registry *r, FILE *out);

/* Where plugins.conf was found, and the directories that were searched. */
const char *mi_registry_conf_path(const mi_registry *r);

void mi_registry_free(mi_registry *r);

/* Plugin code runs under deadlines: dlopen (constructors), the descriptor
 * function, probe and get_iface 10 s each, init 60 s; $MI_PLUGIN_TIMEOUT
 * (seconds; 0 = none) replaces both. Past one, the process prints one line
 * ("PROG: plugin FILE: init did not return within N s ...") and ends with
 * _exit(1): a hung plugin can be neither cancelled nor unloaded.
 *
 * exit() from plugin code: a program arms the guard for the part of its run
 * that must not end through exit() (mi-run: all of main). While armed, an
 * exit() prints one line naming the plugin being loaded ("PROG: a plugin
 * called exit() during loading (last plugin being loaded: FILE)") or the last
 * one loaded, and the status becomes 1. Disarm before returning normally. */
void mi_exit_guard_arm(const char *prog);
void mi_exit_guard_disarm(void);

/* The search directories, ':'-joined, in
 * search order; and a plugin's kind, name and version as the loader read
 * them (from the descriptor once it was checked, else from plugins.conf;
 * "?" / 0 when unknown). Use these rather than p->desc, which is NULL for a
 * plugin whose descriptor failed the checks. */
const char *mi_registry_search_path(const mi_registry *r);
int mi_plugin_kind_of(const mi_plugin *p);
const char *mi_plugin_name(const mi_plugin *p);
const char *mi_plugin_version(const mi_plugin *p);

#endif
