/* mi-ckb: list, show, validate and extend the contract knowledge base,
 * check what it covers for a model directory on a platform, and build the
 * kernel pack of its operators stated as expressions. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ckb/ckb.h"
#include "core/gen/pack/pack.h"
#include "core/util/file.h"
#include "core/util/out.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mi-ckb [--ckb DIR] COMMAND [ARGS]\n"
          "  list [--kind KIND]                    one line per entry: id, version, kind, provenance, file\n"
          "  show ID                               the entry's JSON\n"
          "  validate                              check every entry (schemas, references, ids); exit 1 on problems\n"
          "  coverage --model DIR --platform NAME [--json]\n"
          "                                        contracts that apply and what is missing; exit 2 when not covered\n"
          "  weights --model DIR [--json]          the model's safetensors against its model contract's weight map; exit 1 on problems\n"
          "  curated OUT_DIR                       copy the CKB into OUT_DIR without what evolution added\n"
          "                                        (entries with provenance evolved, platform kernels naming them)\n"
          "  add FILE | update FILE                atomic write of one entry (FILE '-' = stdin); update needs a higher version\n"
          "  pack OUT_DIR [--ops ID,ID] [--name NAME] [--ckb DIR]\n"
          "                                        generate and build the kernel pack of the operators stated as an\n"
          "                                        expression (all, or --ops) into OUT_DIR: pack.c, libmi-pack-NAME.so,\n"
          "                                        pack.json (NAME default: ckb; docs/kernel-packs.md)\n"
          "CKB folder: --ckb DIR, else $MI_CKB_DIR, ./ckb, <exe>/../share/metainfer/ckb, <exe>/../../ckb\n");
}

static void print_line(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "%s\n", line);
}

static int cmd_list(mi_ckb *c, int argc, char **argv) {
  const char *kind = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--kind") && i + 1 < argc) kind = argv[++i];
    else {
      fprintf(stderr, "mi-ckb list: unexpected argument '%s'\n", argv[i]);
      return 1;
    }
  }
  for (size_t i = 0; i < mi_ckb_count(c); i++) {
    const mi_ckb_entry *e = mi_ckb_at(c, i);
    if (kind && (!e->kind || strcmp(e->kind, kind))) continue;
    const char *prov = json_string_value(json_object_get(json_object_get(e->json, "provenance"), "source"));
    printf("%-40s %-8s %-13s %-10s %s\n", e->id ? e->id : "?", e->version ? e->version : "?",
           e->kind ? e->kind : "?", prov ? prov : "?", e->rel);
  }
  return 0;
}

static void print_json(const json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2));
  printf("%s\n", s ? s : "");
  free(s);
}

static int cmd_show(mi_ckb *c, int argc, char **argv) {
  if (argc != 1) {
    fprintf(stderr, "mi-ckb show: expected one ID\n");
    return 1;
  }
  const mi_ckb_entry *e = mi_ckb_find(c, argv[0]);
  if (!e) {
    fprintf(stderr, "mi-ckb show: no entry '%s' in %s\n", argv[0], mi_ckb_dir(c));
    return 1;
  }
  print_json(e->json);
  return 0;
}

static int cmd_validate(mi_ckb *c) {
  int n = mi_ckb_validate(c, print_line, NULL);
  fprintf(stderr, "%s: %zu entries, %d problem%s\n", mi_ckb_dir(c), mi_ckb_count(c), n,
          n == 1 ? "" : "s");
  return n ? 1 : 0;
}

/* A check's report r: its error said when rc < 0 (then -1, r not set),
 * else the JSON (--json) or text(r, arg, rc) printed and r freed (0). */
static int report(const char *cmd, int rc, json_t *r, const char *err, int as_json,
                  void (*text)(json_t *r, const char *arg, int rc), const char *arg) {
  if (rc < 0) {
    fprintf(stderr, "mi-ckb %s: %s\n", cmd, err);
    return -1;
  }
  if (as_json) print_json(r);
  else text(r, arg, rc);
  json_decref(r);
  return 0;
}

static void coverage_text(json_t *r, const char *platform, int rc) {
  json_t *v;
  size_t i;
  const char *mc = json_string_value(json_object_get(r, "model_contract"));
  const char *pc = json_string_value(json_object_get(r, "platform_contract"));
  printf("model     %s -> %s\n", json_string_value(json_array_get(json_object_get(r, "architectures"), 0)),
         mc ? mc : "(none)");
  printf("platform  %s -> %s\n", platform, pc ? pc : "(none)");
  json_array_foreach(json_object_get(r, "operators"), i, v)
    printf("operator  %-24s contract %-3s platform %s\n", json_string_value(json_object_get(v, "id")),
           json_is_true(json_object_get(v, "contract")) ? "yes" : "NO",
           json_is_true(json_object_get(v, "platform")) ? "yes" : "NO");
  json_array_foreach(json_object_get(r, "tests"), i, v)
    printf("test      stage %lld %-28s %s\n", (long long)json_integer_value(json_object_get(v, "stage")),
           json_string_value(json_object_get(v, "id")), json_string_value(json_object_get(v, "status")));
  json_array_foreach(json_object_get(r, "failure_modes"), i, v)
    printf("watch     %s\n", json_string_value(v));
  json_array_foreach(json_object_get(r, "experience"), i, v)
    printf("recall    %s\n", json_string_value(v));
  json_array_foreach(json_object_get(r, "missing"), i, v) printf("MISSING   %s\n", json_string_value(v));
  printf("%s\n", rc == 0 ? "covered" : "NOT covered");
}

static void weights_text(json_t *r, const char *model, int n) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(r, "problems"), i, v) printf("%s: %s\n", model, json_string_value(v));
  const char *pre;
  json_object_foreach(json_object_get(r, "skipped"), pre, v)
    printf("%s: skipped %lld tensor%s under %s: %s\n", model, (long long)json_integer_value(json_object_get(v, "tensors")),
           json_integer_value(json_object_get(v, "tensors")) == 1 ? "" : "s", pre,
           json_string_value(json_object_get(v, "why")));
  printf("%s: %lld weights expected by %s, %lld found, %d problem%s\n", model,
         (long long)json_integer_value(json_object_get(r, "expected")),
         json_string_value(json_object_get(r, "model_contract")),
         (long long)json_integer_value(json_object_get(r, "found")), n, n == 1 ? "" : "s");
}

static int cmd_coverage(mi_ckb *c, int argc, char **argv) {
  const char *model = NULL, *platform = NULL;
  int as_json = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--platform") && i + 1 < argc) platform = argv[++i];
    else if (!strcmp(argv[i], "--json")) as_json = 1;
    else {
      fprintf(stderr, "mi-ckb coverage: unexpected argument '%s'\n", argv[i]);
      return 1;
    }
  }
  if (!model || !platform) {
    fprintf(stderr, "mi-ckb coverage: needs --model DIR and --platform NAME\n");
    return 1;
  }
  json_t *r = NULL;
  char err[512];
  int rc = mi_ckb_coverage(c, model, platform, &r, err, sizeof err);
  if (report("coverage", rc, r, err, as_json, coverage_text, platform) < 0) return 1;
  return rc == 0 ? 0 : 2;
}

static int cmd_weights(mi_ckb *c, int argc, char **argv) {
  const char *model = NULL;
  int as_json = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--json")) as_json = 1;
    else {
      fprintf(stderr, "mi-ckb weights: unexpected argument '%s'\n", argv[i]);
      return 1;
    }
  }
  if (!model) {
    fprintf(stderr, "mi-ckb weights: needs --model DIR\n");
    return 1;
  }
  json_t *r = NULL;
  char err[1024];
  int n = mi_ckb_check_weights(c, model, &r, err, sizeof err);
  if (report("weights", n, r, err, as_json, weights_text, model) < 0) return 1;
  return n ? 1 : 0;
}

static int cmd_put(const char *dir, int argc, char **argv, mi_ckb_put_mode mode) {
  if (argc != 1) {
    fprintf(stderr, "mi-ckb %s: expected one FILE\n", mode == MI_CKB_ADD ? "add" : "update");
    return 1;
  }
  /* Read at most the limit (+1 to see it exceeded) before parsing: a
   * 100 MB file costs 2 GB in jansson and could never be stored anyway. */
  FILE *in = !strcmp(argv[0], "-") ? stdin : fopen(argv[0], "rb");
  if (!in) {
    fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
    return 1;
  }
  char *buf = malloc((size_t)MI_CKB_MAX_FILE + 1);
  size_t n = buf ? fread(buf, 1, (size_t)MI_CKB_MAX_FILE + 1, in) : 0;
  int rerr = ferror(in);
  if (in != stdin) fclose(in);
  if (!buf || rerr) {
    fprintf(stderr, "%s: %s\n", argv[0], buf ? "read error" : "out of memory");
    free(buf);
    return 1;
  }
  if (n > MI_CKB_MAX_FILE) {
    fprintf(stderr, "%s: larger than %u bytes, the limit for a CKB file\n", argv[0], MI_CKB_MAX_FILE);
    free(buf);
    return 1;
  }
  json_error_t je;
  json_t *e = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
  free(buf);
  if (!e) {
    fprintf(stderr, "%s: invalid JSON at line %d: %s\n", argv[0], je.line, je.text);
    return 1;
  }
  int rc = mi_ckb_put(dir, e, mode, print_line, NULL);
  if (rc == 0)
    fprintf(stderr, "%s %s %s\n", mode == MI_CKB_ADD ? "added" : "updated",
            json_string_value(json_object_get(e, "id")), json_string_value(json_object_get(e, "version")));
  json_decref(e);
  return rc == 0 ? 0 : 1;
}

/* The SDK headers a pack is built against: beside the build tree's bin/
 * (<exe>/../../sdk/include), else an install's (<exe>/../include). */
static int has_pack_header(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/mi/kernel_pack.h", dir);
  return access(p, R_OK) == 0;
}

static int cmd_pack(const char *dir, const char *argv0, int argc, char **argv) {
  const char *out_dir = NULL, *name = "ckb", *ops = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--ops") && i + 1 < argc) ops = argv[++i];
    else if (!strcmp(argv[i], "--name") && i + 1 < argc) name = argv[++i];
    else if (!strcmp(argv[i], "--ckb") && i + 1 < argc) dir = argv[++i];
    else if (argv[i][0] != '-' && !out_dir) out_dir = argv[i];
    else {
      fprintf(stderr, "mi-ckb pack: unexpected argument '%s'\n", argv[i]);
      return 1;
    }
  }
  if (!out_dir) {
    fprintf(stderr, "mi-ckb pack: expected an OUT_DIR\n");
    return 1;
  }
  char buf[4096], sdk[4096], err[1024];
  if (!dir && !(dir = mi_ckb_default_dir(argv0, buf, sizeof buf))) {
    fprintf(stderr, "mi-ckb: %s\n", buf);
    return 1;
  }
  const char *const rel[] = {"../../sdk/include", "../include"};
  if (!mi_exe_rel_dir(argv0, rel, 2, has_pack_header, sdk, sizeof sdk)) {
    fprintf(stderr, "mi-ckb pack: no SDK headers (mi/kernel_pack.h) in <exe>/../../sdk/include or <exe>/../include\n");
    return 1;
  }
  /* --ops a,b,c: the ids in the pack's order */
  char *list = ops ? strdup(ops) : NULL;
  const char **ids = NULL;
  if (ops) {
    size_t n = 1;
    for (const char *p = ops; *p; p++) n += *p == ',';
    ids = calloc(n + 1, sizeof *ids);
    size_t k = 0;
    for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t && ids; t = strtok_r(NULL, ",", &save))
      ids[k++] = t;
    if (!list || !ids || !k) {
      fprintf(stderr, "mi-ckb pack: --ops '%s' names no operator\n", ops);
      free(ids);
      free(list);
      return 1;
    }
  }
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  int rc = 1;
  if (!c) fprintf(stderr, "mi-ckb: %s\n", err);
  else if (mi_pack_generate(c, ids, name, out_dir, sdk, err, sizeof err) != 0)
    fprintf(stderr, "mi-ckb pack: %s\n", err);
  else {
    /* what was built, from the manifest it wrote */
    char path[4200], lib[128];
    snprintf(path, sizeof path, "%s/pack.json", out_dir);
    json_t *m = json_load_file(path, 0, NULL);
    size_t i;
    json_t *k;
    json_array_foreach(json_object_get(m, "kernels"), i, k)
      printf("%-28s %-8s %-24s %s\n", json_string_value(json_object_get(k, "operator")),
             json_string_value(json_object_get(k, "version")), json_string_value(json_object_get(k, "symbol")),
             json_string_value(json_object_get(k, "math")));
    mi_pack_library_name(name, lib, sizeof lib);
    printf("%s/%s\n", out_dir, lib);
    rc = m ? 0 : (fprintf(stderr, "mi-ckb pack: %s: cannot read back the manifest\n", path), 1);
    json_decref(m);
  }
  mi_ckb_close(c);
  free(ids);
  free(list);
  return rc;
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  int i = 1;
  mi_out_init();
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--ckb") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return mi_out_finish("mi-ckb", 0);
    } else {
      fprintf(stderr, "mi-ckb: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 1;
  }
  if (!strcmp(argv[i], "pack")) /* it takes --ckb after the command too */
    return mi_out_finish("mi-ckb", cmd_pack(dir, argv[0], argc - i - 1, argv + i + 1));
  char buf[4096];
  if (!dir && !(dir = mi_ckb_default_dir(argv[0], buf, sizeof buf))) {
    fprintf(stderr, "mi-ckb: %s\n", buf);
    return 1;
  }
  const char *cmd = argv[i++];
  int rest = argc - i;
  char **rargv = argv + i;
  if (!strcmp(cmd, "add")) return cmd_put(dir, rest, rargv, MI_CKB_ADD);
  if (!strcmp(cmd, "update")) return cmd_put(dir, rest, rargv, MI_CKB_UPDATE);

  char err[512];
  mi_ckb *c = mi_ckb_open(dir, err, sizeof err);
  if (!c) {
    fprintf(stderr, "mi-ckb: %s\n", err);
    return 1;
  }
  int rc;
  if (!strcmp(cmd, "list")) rc = cmd_list(c, rest, rargv);
  else if (!strcmp(cmd, "show")) rc = cmd_show(c, rest, rargv);
  else if (!strcmp(cmd, "validate")) rc = rest ? (fprintf(stderr, "mi-ckb validate: takes no arguments\n"), 1) : cmd_validate(c);
  else if (!strcmp(cmd, "coverage")) rc = cmd_coverage(c, rest, rargv);
  else if (!strcmp(cmd, "weights")) rc = cmd_weights(c, rest, rargv);
  else if (!strcmp(cmd, "curated")) {
    int n = 0;
    if (rest != 1) {
      fprintf(stderr, "mi-ckb curated: expected one OUT_DIR\n");
      rc = 1;
    } else if (mi_ckb_export_curated(c, rargv[0], &n, err, sizeof err) != 0) {
      fprintf(stderr, "mi-ckb curated: %s\n", err);
      rc = 1;
    } else {
      fprintf(stderr, "mi-ckb: the curated base of %s is in %s (%d evolved entries left out)\n", dir, rargv[0], n);
      rc = 0;
    }
  }
  else {
    fprintf(stderr, "mi-ckb: unknown command '%s'\n", cmd);
    usage(stderr);
    rc = 1;
  }
  mi_ckb_close(c);
  return mi_out_finish("mi-ckb", rc);
}
