/* implementer.compose: writes a single-path engine's C source from contracts
 * alone -- the model contract's weight map, buffers, cache and operator
 * sequence (prologue, layer, epilogue, each step binding every argument of
 * its operator), the operator contracts' C signatures and platform members,
 * the platform contract, the constraints and the model's config.json.
 * Nothing about a model family is written here: change the contract and
 * the engine changes with it. A contract whose layers are of several kinds
 * (layer_kinds: a hybrid's linear- and full-attention layers) gives a
 * per-layer kind table, one switch case per kind in the layer loop, and per
 * sequence one slab holding each layer's caches (growing with the context)
 * and fixed state (carried across forwards, zeroed by seq_truncate(0)).
 * A half-precision KV cache (kv_type f16/bf16) is derived from the same
 * contract: steps that write a cache row in f32 write a staging buffer
 * instead, stored by one operator.convert per cache entry before the cache
 * is read (store_staged); with layer kinds, each kind's caches the same way
 * (its fixed state stays f32).
 * This file is the agent (the task, the contracts, experience, patches);
 * the engine's fixed part is engine_template.c, a real C file the build
 * compiles on its own, and the files compose.h lists write the rest.
 *
 * Task: {"constraints": {"platform","dtype","tp","kv_type"}, "model_dir",
 *        "patches": [{"operator","arg","value","why"}], "engine_name"?}
 * Before writing it consults ckb/experience: an entry whose "applies_to"
 * names this model contract at this content hash has its "patch" applied;
 * every experience related to a contract in use is listed in the result
 * and in the source's header.
 * Result: {"status":"ok", "source": SHA (artifact .c), "engine_name",
 *          "contracts": [{id, version, sha256}], "experience": [...],
 *          "patches": [...applied], "lines": N} */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/model_input.h"
#include "core/ckb/ckb.h"
#include "core/gen/gen.h"
#include "mi/agent.h"
#include "mi/model.h"
#include "mi/plugin.h"
#include "plugins/agents/compose/compose.h"

/* ---- the agent ---- */

static json_t *entry_ref(const mi_ckb_entry *e) {
  char sha[65] = "";
  mi_sha256_file(e->path, sha);
  return json_pack("{s:s, s:s, s:s}", "id", e->id, "version", e->version ? e->version : "?",
                   "sha256", sha);
}

/* Does some step of the binding's operator bind its argument as `was`? */
static int carries_binding(json_t *model, json_t *bd) {
  const char *op = json_string_value(json_object_get(bd, "operator"));
  const char *arg = json_string_value(json_object_get(bd, "arg"));
  const char *was = json_string_value(json_object_get(bd, "was"));
  if (!op || !arg || !was) return 0;
  json_t *all = mi_ckb_model_sequences(model);
  int hit = 0;
  for (size_t s = 0; !hit && s < json_array_size(all); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(all, s), i, st) {
      const char *b = json_string_value(json_object_get(json_object_get(st, "args"), arg));
      if (!strcmp(json_string_value(json_object_get(st, "operator")) ?: "", op) && b &&
          !strcmp(b, was))
        hit = 1;
    }
  }
  json_decref(all);
  return hit;
}


/* The model contract for config.json's architecture and the platform
 * contract: both found, or -1 with why in err. */
static int find_contracts(mi_ckb *c, json_t *config, const char *pname, const mi_ckb_entry **me,
                          const mi_ckb_entry **pe, char *err, size_t err_len) {
  const char *arch = json_string_value(json_array_get(json_object_get(config, "architectures"), 0));
  *me = mi_ckb_find_model(c, json_object_get(config, "architectures")); /* its own, or a layout's */
  *pe = mi_ckb_find_platform(c, pname);
  if (*me && *pe) return 0;
  snprintf(err, err_len, "compose: no %s contract for %s", *me ? "platform" : "model",
           *me    ? pname
           : arch ? arch
                  : "(no architecture)");
  return -1;
}

/* The operator contracts of the platform's kernels (into g->ops), each
 * listed in `contracts` after the model's and the platform's. */
static json_t *gather_contracts(mi_ckb *c, gen *g, const mi_ckb_entry *me, const mi_ckb_entry *pe) {
  json_t *contracts = json_array();
  json_array_append_new(contracts, entry_ref(me));
  json_array_append_new(contracts, entry_ref(pe));
  size_t i;
  json_t *k;
  json_array_foreach(json_object_get(pe->json, "kernels"), i, k) {
    const char *id = json_string_value(json_object_get(k, "operator"));
    const mi_ckb_entry *oe = mi_ckb_find(c, id);
    if (!oe) continue;
    json_object_set(g->ops, id, oe->json);
    json_array_append_new(contracts, entry_ref(oe));
  }
  /* the model's operators no platform member computes (member "pack"), on
   * a platform that hosts kernel packs: the engine calls a generated pack */
  int hosts = 0;
  json_array_foreach(json_object_get(pe->json, "kernel_packs"), i, k) hosts |= !strcmp(json_string_value(k) ?: "", "host-c");
  json_t *seqs = hosts ? mi_ckb_model_sequences(g->model) : NULL; /* after reductions */
  for (size_t q = 0; q < json_array_size(seqs); q++) {
    json_array_foreach(json_array_get(seqs, q), i, k) {
      const char *id = json_string_value(json_object_get(k, "operator"));
      const mi_ckb_entry *oe = id && !json_object_get(g->ops, id) ? mi_ckb_find(c, id) : NULL;
      if (!oe || strcmp(json_string_value(json_object_get(oe->json, "member")) ?: "", "pack")) continue;
      json_object_set(g->ops, id, oe->json);
      json_array_append_new(contracts, entry_ref(oe));
    }
  }
  json_decref(seqs);
  return contracts;
}

/* The staging buffer of cache entry k: [T, its row] in f32, named
 * <cache>_new. Layer kinds that name a cache alike share one, which must then
 * have the same row in each. 0, or -1 with why in err. */
static int stage_buffer(gen *g, json_t *k, const char *mid, char *err, size_t err_len) {
  json_t *bufs = json_object_get(g->model, "buffers");
  json_t *sh = json_deep_copy(json_object_get(k, "shape"));
  json_array_set_new(sh, 0, json_string("T"));
  const char *cn = json_string_value(json_object_get(k, "name"));
  char bn[160];
  snprintf(bn, sizeof bn, "%s_new", cn ? cn : "?");
  size_t i;
  json_t *b;
  json_array_foreach(bufs, i, b) if (!strcmp(json_string_value(json_object_get(b, "name")) ?: "", bn)) {
    int same = json_equal(json_object_get(b, "shape"), sh);
    json_decref(sh);
    if (same) return 0;
    snprintf(err, err_len, "compose: %s: cache '%s' has another shape in another layer kind: a %s cache stages each in one buffer",
             mid, cn, g->kv);
    return -1;
  }
  json_array_append_new(bufs, json_pack("{s:s, s:o, s:o}", "name", bn, "shape", sh, "doc",
                                        json_sprintf("new rows of %s in f32, stored into the %s cache by convert", cn, g->kv)));
  return 0;
}

/* A half-precision KV cache: needs operator.convert, and gets per cache
 * entry (every layer kind's, where the contract has kinds; their fixed
 * state stays f32) an f32 staging buffer [T, the entry's row] in the
 * arena. 0, or -1 with why in err. */
static int plan_half_kv(gen *g, const char *mid, const char *pid, char *err, size_t err_len) {
  if (!g->half_kv) return 0;
  if (!json_object_get(g->ops, "operator.convert")) {
    snprintf(err, err_len, "compose: KV type %s needs operator.convert among the kernels of %s",
             g->kv, pid);
    return -1;
  }
  size_t i;
  json_t *k;
  json_array_foreach(json_object_get(g->model, "cache"), i, k) if (stage_buffer(g, k, mid, err, err_len)) return -1;
  const char *kn;
  json_t *kv;
  json_object_foreach(json_object_get(json_object_get(g->model, "layer_kinds"), "kinds"), kn, kv)
    json_array_foreach(json_object_get(kv, "cache"), i, k) if (stage_buffer(g, k, mid, err, err_len)) return -1;
  return 0;
}

/* Experience, consulted before anything is written: every entry related to
 * a contract in use is listed in `exp`; one that applies to this model
 * contract has its patch appended to `patches`. */
static void consult_experience(mi_ckb *c, gen *g, const mi_ckb_entry *me, json_t *contracts,
                               json_t *patches, json_t *exp) {
  char model_sha[65] = "";
  mi_sha256_file(me->path, model_sha);
  for (size_t n = 0; n < mi_ckb_count(c); n++) {
    const mi_ckb_entry *e = mi_ckb_at(c, n);
    if (!e->kind || strcmp(e->kind, "experience")) continue;
    int related = 0;
    size_t q, z;
    json_t *r, *ci;
    json_array_foreach(json_object_get(e->json, "related"), q, r) {
      json_array_foreach(contracts, z, ci) related |=
          !strcmp(json_string_value(r), json_string_value(json_object_get(ci, "id")));
    }
    json_t *ap = json_object_get(e->json, "applies_to");
    /* Applies to this contract when it is the very file the experience was
     * written for, or when it still carries the defect the experience
     * repaired (its binding: any later version, any shape or seed of the
     * family), and the repair would change something. */
    int same_contract =
        ap && !strcmp(json_string_value(json_object_get(ap, "contract")) ?: "", me->id);
    json_t *bd = json_object_get(ap, "binding");
    int applies = same_contract &&
                  (!strcmp(json_string_value(json_object_get(ap, "sha256")) ?: "", model_sha) ||
                   (bd && carries_binding(g->model, bd)));
    if (!related && !applies) continue;
    json_array_foreach(applies ? json_object_get(e->json, "patch") : NULL, q, r) {
      json_t *p = json_deep_copy(r);
      json_object_set_new(p, "why", json_sprintf("experience %s", e->id));
      json_array_append_new(patches, p);
    }
    json_array_append_new(
        exp, json_pack("{s:s, s:s, s:b}", "id", e->id, "version", e->version, "applied", applies));
  }
}

/* The source stored in the run's blackboard; the result names it. */
static int store_result(const mi_agent_task *t, const sb *src, const char *engine_name,
                        json_t *contracts, json_t *exp, json_t *patches, char **result, char *err,
                        size_t err_len) {
  mi_bb *bb = mi_bb_open(t->run_dir, 0, err, err_len);
  char sha[65];
  if (!bb || mi_bb_put(bb, src->s, src->n, "c", sha) != 0) {
    if (bb) snprintf(err, err_len, "compose: cannot store the source in %s", t->run_dir);
    mi_bb_close(bb);
    return -1;
  }
  mi_bb_close(bb);
  int lines = 0;
  for (size_t q = 0; q < src->n; q++)
    lines += src->s[q] == '\n';
  json_t *res = json_pack("{s:s, s:s, s:s, s:O, s:O, s:O, s:i}", "status", "ok", "source", sha,
                          "engine_name", engine_name, "contracts", contracts, "experience", exp,
                          "patches", patches, "lines", lines);
  *result = json_dumps(res, JSON_COMPACT);
  json_decref(res);
  return 0;
}

/* The dtypes a matrix of the engine may be stored in: the platform's
 * dtypes.weight_sets entry for the dtype constraint (a GGUF file type such
 * as q4_k_m: Q4_K matrices, Q6_K where llama.cpp gives more bits, Q8_0
 * where a row is not whole super-blocks, F32 where the load widened a
 * matrix a transform could not move as blocks), else the dtype alone. A
 * float engine's kernels get WEIGHT_DTYPE, a block one's each matrix's
 * dtype; a block set may hold f32 (its engine then also takes floats), no
 * other float. */
static int weight_set(gen *g, char *err, size_t err_len) {
  json_t *set = json_object_get(json_object_get(json_object_get(g->platform, "dtypes"), "weight_sets"), g->dtype);
  g->wset = json_is_array(set) && json_array_size(set) ? json_incref(set) : json_pack("[s]", g->dtype);
  size_t i, nb = 0, nf32 = 0;
  json_t *d;
  json_array_foreach(g->wset, i, d) {
    const char *s = json_string_value(d);
    if (!s || !weight_dtype_const(s)) {
      snprintf(err, err_len, "compose: dtype '%s': %s is no weight dtype an engine binds", g->dtype,
               s ? s : "(not a string)");
      return -1;
    }
    nb += !dtype_const(s);
    nf32 += !strcmp(s, "f32");
  }
  if (nb && nb + nf32 != json_array_size(g->wset)) {
    snprintf(err, err_len, "compose: dtype '%s': its weight set mixes block types with f16 or bf16", g->dtype);
    return -1;
  }
  if (nb && dtype_const(json_string_value(json_array_get(g->wset, 0)))) {
    snprintf(err, err_len, "compose: dtype '%s': its weight set lists f32 first (the set's first is its main type)", g->dtype);
    return -1;
  }
  g->blocks = nb > 0;
  g->block_floats = nb > 0 && nf32 > 0;
  return 0;
}

/* The generator's state from the task's constraints and the contracts. */
static int setup_gen(gen *g, json_t *cons, const mi_ckb_entry *me, const mi_ckb_entry *pe,
                     char *err, size_t err_len) {
  g->model = json_deep_copy(me->json);
  g->kinds = json_object_get(json_object_get(g->model, "layer_kinds"), "kinds");
  g->platform = pe->json;
  g->dtype = json_string_value(json_object_get(cons, "dtype"));
  g->tp = json_is_integer(json_object_get(cons, "tp"))
              ? (int)json_integer_value(json_object_get(cons, "tp"))
              : 1;
  if (g->tp < 1) g->tp = 1;
  g->ops = json_object();
  g->weights_seen = json_object();
  g->pending = json_object();
  g->kv = json_string_value(json_object_get(cons, "kv_type")) ?: "f32";
  if (!dtype_const(g->kv)) {
    snprintf(err, err_len, "compose: kv_type '%s': the engine's KV cache holds f32, f16 or bf16",
             g->kv);
    return -1;
  }
  g->half_kv = strcmp(g->kv, "f32") != 0;
  return weight_set(g, err, err_len);
}

static void free_gen(gen *g) {
  json_decref(g->model);
  json_decref(g->wset);
  json_decref(g->ops);
  json_decref(g->weights_seen);
  free(g->kind_of);
  json_decref(g->pending);
  json_decref(g->packs);
  json_decref(g->config);
}

static int compose_run(void *ctx, const mi_agent_task *t, char **result, char *err,
                       size_t err_len) {
  (void)ctx;
  json_error_t je;
  json_t *task = json_loads(t->task_json, 0, &je), *cons = json_object_get(task, "constraints");
  const char *model_dir = json_string_value(json_object_get(task, "model_dir"));
  const char *pname = json_string_value(json_object_get(cons, "platform"));
  const char *engine_name = json_string_value(json_object_get(task, "engine_name"));
  int rc = -1;
  gen g = {0};
  sb src = {0};
  mi_ckb *c = NULL;
  const mi_ckb_entry *me, *pe;
  json_t *contracts = NULL, *patches = json_array(), *exp = json_array();
  if (!task || !model_dir || !pname || !json_string_value(json_object_get(cons, "dtype")) ||
      !engine_name) {
    snprintf(err, err_len,
             "compose: the task lacks model_dir, engine_name or constraints.platform/dtype");
    goto out;
  }
  if (!(c = mi_ckb_open(t->ckb_dir, err, err_len))) goto out;
  if (!(g.config = mi_model_input_config(model_dir, JSON_REJECT_DUPLICATES, err, err_len))) goto out;
  if (find_contracts(c, g.config, pname, &me, &pe, err, err_len) ||
      setup_gen(&g, cons, me, pe, err, err_len))
    goto out;
  /* a masked form that masks nothing at this checkpoint's values (a window
   * as wide as the context) is called as its plain operator (reduce.c) */
  mi_ckb_model_reduce(c, g.model, g.config);
  contracts = gather_contracts(c, &g, me, pe);
  if (plan_half_kv(&g, me->id, pe->id, err, err_len)) goto out;
  consult_experience(c, &g, me, contracts, patches, exp);
  size_t i;
  json_t *k;
  json_array_foreach(json_object_get(task, "patches"), i, k) json_array_append(patches, k);
  json_array_foreach(patches, i, k) mi_ckb_apply_patch(g.model, k);
  if (compose_source(&g, contracts, exp, patches, engine_name, &src) != 0) {
    snprintf(err, err_len, "compose: %s", g.err);
    goto out;
  }
  rc = store_result(t, &src, engine_name, contracts, exp, patches, result, err, err_len);
out:
  free(src.s);
  free_gen(&g);
  json_decref(contracts);
  json_decref(patches);
  json_decref(exp);
  json_decref(task);
  mi_ckb_close(c);
  return rc;
}

static const mi_agent_iface k_iface = {.struct_size = sizeof(mi_agent_iface),
                                       .role = "implementer",
                                       .strategy = "compose",
                                       .run = compose_run};

static int a_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                  size_t err_len) {
  (void)host, (void)opts, (void)err, (void)err_len;
  *ctx = NULL;
  return 0;
}
static const void *a_iface(void *ctx) {
  (void)ctx;
  return &k_iface;
}
static const mi_plugin_desc k_desc = {.abi_major = MI_ABI_MAJOR,
                                      .abi_minor = MI_ABI_MINOR,
                                      .struct_size = sizeof(mi_plugin_desc),
                                      .kind = MI_PLUGIN_AGENT,
                                      .name = "implementer.compose",
                                      .version = "0.1.0",
                                      .description =
                                          "deterministic engine source from the CKB's contracts",
                                      .init = a_init,
                                      .get_iface = a_iface};
MI_PLUGIN_DEFINE(k_desc)
