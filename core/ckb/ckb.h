/* The contract knowledge base (CKB): a directory of versioned JSON entries,
 * one file each, checked against JSON schemas that live in the CKB itself.
 *
 * Layout: DIR/schemas/common.json holds shared definitions; every other
 * DIR/schemas/KIND.json describes one kind ("kind", the folder its entries
 * live in ("dir"), and a "schema"). An entry's id is "KIND.NAME" and its
 * file is DIR/<dir>/NAME.json. Files whose name starts with '.' (temp files
 * of an interrupted write, the lock file) are never read as entries.
 *
 * Reading never fails on a bad entry: mi_ckb_open() keeps what parses and
 * records what does not; mi_ckb_validate() reports everything, one line per
 * problem, each naming the file and the field.
 */
#ifndef MI_CORE_CKB_H
#define MI_CORE_CKB_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mi_ckb mi_ckb;

typedef struct mi_ckb_entry {
  const char *id;      /* "operator.rmsnorm" (NULL if the file has none) */
  const char *kind;    /* "operator" (NULL if absent or not a string) */
  const char *version; /* "1.0.0" (NULL if absent) */
  const char *path;    /* the file as opened: DIR/operators/rmsnorm.json */
  const char *rel;     /* relative to DIR: operators/rmsnorm.json */
  json_t *json;        /* the whole entry (borrowed from the store) */
} mi_ckb_entry;

/* One problem per call: "FILE: message". */
typedef void (*mi_ckb_diag_fn)(void *user, const char *line);

/* The CKB folder to use when none is given: $MI_CKB_DIR, else ./ckb, else
 * <dir of exe>/../share/metainfer/ckb, else <dir of exe>/../../ckb (a build
 * folder inside the source tree). Returns buf, or NULL (buf then lists
 * what was tried). */
const char *mi_ckb_default_dir(const char *argv0, char *buf, size_t n);

/* Opens DIR: reads the schemas and every entry. NULL (with a one-line
 * reason in err) only when DIR or DIR/schemas cannot be used at all. */
mi_ckb *mi_ckb_open(const char *dir, char *err, size_t err_len);
void mi_ckb_close(mi_ckb *c);

const char *mi_ckb_dir(const mi_ckb *c);

/* Writes the curated base of the CKB into out_dir (a new folder): a copy
 * without the entries knowledge evolution wrote (provenance "evolved") and
 * without the platform kernels that name them, i.e. the CKB an evolution
 * run starts from. *n_left_out: how many entries were left out. 0, or -1
 * with a line in err. */
int mi_ckb_export_curated(const mi_ckb *c, const char *out_dir, int *n_left_out, char *err, size_t err_len);
size_t mi_ckb_count(const mi_ckb *c);
const mi_ckb_entry *mi_ckb_at(const mi_ckb *c, size_t i);
const mi_ckb_entry *mi_ckb_find(const mi_ckb *c, const char *id);

/* The known kinds (from the schema files), e.g. "operator". */
size_t mi_ckb_kind_count(const mi_ckb *c);
const char *mi_ckb_kind_at(const mi_ckb *c, size_t i);
/* The largest CKB file (entry or schema) read or written: jansson holds a
 * parsed file in ~20x its size. */
#define MI_CKB_MAX_FILE (4u << 20)

/* The one rule for names that become paths: an entry id's NAME (after
 * "KIND.") and a schema's `dir`: [a-z0-9][a-z0-9._-]{0,127}, so a single
 * path component, no '/', no control characters, never "." or "..".
 * Returns 0, or -1 with the reason in why. */
int mi_ckb_name_check(const char *name, char *why, size_t why_len);

/* The folder (relative to DIR) holding entries of `kind`, or NULL. */
const char *mi_ckb_kind_dir(const mi_ckb *c, const char *kind);

/* Checks every entry: load errors, schema rules, cross-references, ids,
 * file placement, duplicates and per-kind consistency. Returns the number
 * of problems (0 = valid); each goes to diag (NULL: stderr). */
int mi_ckb_validate(const mi_ckb *c, mi_ckb_diag_fn diag, void *user);

/* Checks one entry (not necessarily in the store) as if it were stored at
 * `path`. Returns the number of problems. */
int mi_ckb_validate_entry(const mi_ckb *c, json_t *entry, const char *path, mi_ckb_diag_fn diag,
                          void *user);

/* Semver-like comparison of "MAJOR.MINOR.PATCH[-pre]": <0, 0, >0; a string
 * that does not parse compares below every one that does. */
int mi_ckb_version_cmp(const char *a, const char *b);

/* ---- writing: atomic add/update ----
 * Takes DIR/.lock (flock, exclusive: concurrent writers wait), re-reads the
 * store under the lock, validates the entry (schema, references, and for
 * add: the id is new; for update: it exists and the version grows), writes
 * DIR/<dir>/.NAME.json.tmp.XXXXXX, fsyncs it, renames it over NAME.json and
 * fsyncs the folder. A crash at any point leaves either the old file or the
 * new one, never a mix; leftover temp files are removed by the next writer.
 * Problems go to diag; returns 0 on success, -1 otherwise. */
typedef enum mi_ckb_put_mode { MI_CKB_ADD = 0, MI_CKB_UPDATE = 1 } mi_ckb_put_mode;
int mi_ckb_put(const char *dir, json_t *entry, mi_ckb_put_mode mode, mi_ckb_diag_fn diag,
               void *user);

/* ---- integer expressions (shapes, constraints) ----
 * Grammar: comparisons (== != < <= > >=) over + - * / % with unary minus,
 * parentheses, integer literals and names. lookup returns 0 and sets *out
 * when it knows the name. Returns 0, or -1 with a message in err. */
typedef int (*mi_expr_lookup)(void *user, const char *name, size_t len, int64_t *out);
int mi_expr_eval(const char *expr, mi_expr_lookup lookup, void *user, int64_t *out, char *err,
                 size_t err_len);
/* The same over doubles, without comparisons ("partial_rotary_factor *
 * head_dim"): real division, decimal numbers; a result that is not finite
 * is an error. */
typedef int (*mi_expr_lookup_f64)(void *user, const char *name, size_t len, double *out);
int mi_expr_eval_f64(const char *expr, mi_expr_lookup_f64 lookup, void *user, double *out,
                     char *err, size_t err_len);
/* Calls fn for every name in expr (for checks); -1 on a syntax error. */
int mi_expr_names(const char *expr, void (*fn)(void *user, const char *name, size_t len),
                  void *user, char *err, size_t err_len);
/* expr as C source (core/ckb/expr_c.c): the syntax checked as above, each
 * name replaced by what fn writes at out (at most out_len bytes, NUL
 * included; fn returns -1 to refuse the name: err then names it), the rest
 * copied as written. 0, or -1 with a one-line message in err. */
typedef int (*mi_expr_c_name)(void *user, const char *name, size_t len, char *out, size_t out_len);
int mi_expr_c(const char *expr, mi_expr_c_name fn, void *user, char *out, size_t out_len, char *err,
              size_t err_len);

/* The platform contract for a name: its id, its "plugin" or one of its
 * "aliases". NULL if none. */
const mi_ckb_entry *mi_ckb_find_platform(const mi_ckb *c, const char *name);

/* The model contract of a config.json "architectures" array: the first
 * architecture that some model contract lists, else the first that one of
 * a model contract's layouts lists (a released wrapper of the same model).
 * NULL if none. */
const mi_ckb_entry *mi_ckb_find_model(const mi_ckb *c, const json_t *architectures);

/* ---- layouts: other ways the same model is stored (core/ckb/layout.c) ----
 * A model contract's "layouts" object names checkpoints that hold the
 * contract's model in another spelling: a wrapper architecture (a
 * conditional-generation model: the text model's fields under text_config,
 * its weights renamed), tensors present and left unread (a vision tower, a
 * multi-token-prediction head), each prefix with the reason.
 * mi_ckb_model_layout: the layout config.json `cfg`'s architectures name,
 * or NULL (the contract's own layout); mi_ckb_layout_for_arch: the layout
 * whose config template names architecture `arch`, or NULL.
 * mi_ckb_layout_rename: the contract's
 * weight key `key` as this layout spells it (the first "rename" prefix that
 * matches; a NULL layout copies it). mi_ckb_layout_unused: the reason
 * tensor `name` is left unread (the first "unused" prefix it starts with;
 * *prefix, when not NULL, gets that prefix), or NULL. */
const json_t *mi_ckb_model_layout(const json_t *model, const json_t *cfg);
const json_t *mi_ckb_layout_for_arch(const json_t *model, const char *arch);
void mi_ckb_layout_rename(const json_t *layout, const char *key, char *out, size_t n);
/* The key of the layout's config template whose value is "$config" (where
 * the wrapper keeps the model's own config, e.g. text_config), or NULL. */
const char *mi_ckb_layout_inner_key(const json_t *layout);
/* The object of config.json `cfg` that holds the model's own config under
 * `layout` (e.g. cfg.text_config); cfg itself when layout is NULL or cfg
 * has no such object. */
const json_t *mi_ckb_layout_inner(const json_t *layout, const json_t *cfg);
/* The other way: a tensor's name in the layout as the contract's key. */
void mi_ckb_layout_unrename(const json_t *layout, const char *name, char *out, size_t n);
/* A checkpoint no contract names: the first layout in the CKB (a model
 * contract's, or a variant's "add_layout" in the vocabulary) whose template
 * wraps "$config" under a key that config.json `cfg` holds as an object
 * and, when its weights `w` are given, under whose renamed prefixes some
 * tensor is stored; *inner gets that object (the text model's config).
 * NULL when none. */
typedef struct mi_weights mi_weights; /* core/runtime/safetensors.h */
const json_t *mi_ckb_wrapper_layout(const mi_ckb *c, const json_t *cfg, const mi_weights *w, const json_t **inner);
const char *mi_ckb_layout_unused(const json_t *layout, const char *name, const char **prefix);

/* ---- reading a model contract ----
 * Every step sequence of a model contract, in order: prologue,
 * layer_sequence, epilogue, then each layer kind's sequence (a new array
 * holding references, json_null() for a section it lacks; json_decref it).
 * mi_ckb_config_at: the value at a dotted path (rope_parameters.rope_theta)
 * of a config.json object, or NULL. */
json_t *mi_ckb_model_sequences(const json_t *model);
/* The logprob tolerance against the peer (llama.cpp) for a model computed
 * by these steps: tol, or more where an operator the steps call states the
 * peer computes it less exactly ("peer": {"logprob_tolerance": X, "why":
 * ...}: llama.cpp's GELU through an f16 table). *why_op (may be NULL): the
 * operator that widened it, or NULL. */
double mi_ckb_peer_logprob_tol(const mi_ckb *c, const json_t *model, double tol, const char **why_op);
const json_t *mi_ckb_config_at(const json_t *cfg, const char *path);

/* ---- binding a model contract to a checkpoint's config.json ----
 * mi_ckb_config_value: the value of the config field `name` the contract
 * lists (its `path` where it is nested, else its name; in text_config when
 * the top level lacks it), else the entry's `default`; for a name the
 * contract does not list, config.json's own top-level value. NULL (or JSON
 * null) when there is none. mi_ckb_layer_kind: layer l's kind in a contract
 * with layer_kinds (config.json's per-layer array, else every interval-th
 * layer the first-listed kind and the others the second: the composer's
 * rule); NULL when the contract has no kinds or cannot tell. */
const json_t *mi_ckb_config_value(const json_t *model, const json_t *cfg, const char *name, size_t len);

/* The names an integer expression over a contract's config fields reads
 * (mi_expr_eval's lookup, user a mi_ckb_layer_ctx): "i" is the layer, any
 * other name mi_ckb_config_value's integer (a boolean as 0 or 1). */
typedef struct mi_ckb_layer_ctx {
  const json_t *model, *cfg;
  int64_t layer;
} mi_ckb_layer_ctx;
int mi_ckb_layer_lookup(void *user, const char *name, size_t len, int64_t *out);

/* A weight's "when" on the config: "FIELD" holds when the field is true,
 * "!FIELD" when it is not; NULL always holds. */
int mi_ckb_when_holds(const json_t *model, const json_t *cfg, const char *when);

/* The element of the array `arr` whose string member `field` is `value`
 * (a contract's config field by "name", weight by "key", step by "step"),
 * or NULL. */
json_t *mi_ckb_named(const json_t *arr, const char *field, const char *value);

/* A repair's patch ({"operator", "arg", "value"}: mi-gen's failure-mode and
 * experience repairs) applied in place to every step of `model` that calls
 * that operator with that argument. Returns how many arguments it set, or
 * -1 for a patch without operator, arg or value. The implementer composes
 * from the patched contract and the verifier interprets the same one. */
int mi_ckb_apply_patch(json_t *model, const json_t *patch);
const char *mi_ckb_layer_kind(const json_t *model, const json_t *cfg, int64_t l);

/* Operator reductions (core/ckb/reduce.c): where a step's operator contract
 * says "reduces_to": {"operator": PLAIN, "when": EXPR} and EXPR holds for
 * this checkpoint (names: the step's integer arguments, then config fields;
 * a window at least the context: "window >= max_position_embeddings"), the
 * step computes exactly what PLAIN computes. mi_ckb_step_reduction: PLAIN's
 * id, or NULL. mi_ckb_model_reduce: every such step of `model` (a copy the
 * caller owns) rewritten to PLAIN, the arguments PLAIN has no parameter for
 * dropped, "reduced_from" naming the operator it was; how many. */
const char *mi_ckb_step_reduction(const mi_ckb *c, const json_t *model, const json_t *cfg, const json_t *step);
int mi_ckb_model_reduce(const mi_ckb *c, json_t *model, const json_t *cfg);
/* One element e of the per-layer array as a kind's name: a string as it is;
 * a number (or boolean, 0 / 1) through layer_kinds.values ({"0": KIND,
 * "1": KIND}: SmolLM3's no_rope_layers); NULL otherwise (not checked
 * against the kinds). */
const char *mi_ckb_layer_kind_named(const json_t *layer_kinds, const json_t *e);

/* ---- transactions ----
 * A staging copy of the CKB beside it (staging), written and checked, then
 * switched in by one atomic exchange (commit; *how says how it was done),
 * or removed (abort). Nothing reaches the live CKB before the commit: a
 * failed or killed writer leaves it byte for byte as it was. */
typedef struct mi_ckb_txn {
  char live[4096];    /* the CKB folder, resolved */
  char staging[4700]; /* its staging copy; empty when none */
} mi_ckb_txn;
int mi_ckb_txn_begin(mi_ckb_txn *t, const char *ckb_dir, char *err, size_t err_len);
int mi_ckb_txn_commit(mi_ckb_txn *t, char *how, size_t how_len, char *err, size_t err_len);
void mi_ckb_txn_abort(mi_ckb_txn *t);

/* ---- config fields ----
 * One line appended to `lines` per config.json field or value the model
 * contract does not account for (bound in "config", supported in its
 * "values"/"items", or listed in "config_inert"), and per required field
 * that is absent: "config field 'hidden_act' = \"gelu\": model.NAME
 * supports only \"silu\"". Returns the number of lines added. */
size_t mi_ckb_config_gaps(const mi_ckb_entry *model, const json_t *config, json_t *lines);

/* ---- coverage ----
 * Which contracts apply to a model directory on a platform, and what is
 * missing. Writes a JSON report to *out (caller frees with json_decref).
 * Among its members, "matrix_dtypes": {dtype: {"count", "first"}}, the
 * stored types of the 2-D weights the model reads (blocks as stored) and
 * the first of each by name (mi-gen's --dtype check reads it).
 * Returns 0 when everything needed is covered, 1 when something is
 * missing, -1 on an error (message in err). */
int mi_ckb_coverage(const mi_ckb *c, const char *model_dir, const char *platform, json_t **out,
                    char *err, size_t err_len);

/* ---- a model directory's weights against its model contract ----
 * Every key of the contract's weight map (per-layer keys for each layer,
 * "when" keys by their config flag) must be in the safetensors files with
 * the shape its formulas give on config.json, and no other key may be.
 * Writes a JSON report ({"problems": [...], "expected", "found", "dtypes"})
 * to *out. Returns the number of problems, or -1 on an error (err). */
int mi_ckb_check_weights(const mi_ckb *c, const char *model_dir, json_t **out, char *err,
                         size_t err_len);

/* ---- a random-weight checkpoint from a model contract (mi-mkmodel) ----
 * The contract's "checkpoint" block (config.json template, presets, layouts,
 * file order) and each weight's "random_init" (mean + std / sqrt(fan) * z,
 * expressions over config fields); core/ckb/checkpoint.c has the rules.
 * mi_ckb_checkpoint_family: the model contract named NAME or model.NAME
 * with a checkpoint block (NULL name: the one marked checkpoint.default);
 * NULL with one line in err. mi_ckb_checkpoint_plan: preset PRESET in
 * layout LAYOUT (NULL or "causal": the flat one): config.json, the optional
 * generation_config.json and every tensor in file order. 0; 1 when the
 * contract has no such preset; -1 on any other problem ("FILE: what",
 * one line). Free with mi_ckb_checkpoint_free. */
#define MI_CKB_CKPT_MAX_DIMS 8
typedef struct mi_ckb_ckpt_tensor {
  char name[192]; /* in the chosen layout */
  char key[192];  /* in the causal layout: what the values are keyed by */
  int ndim;
  int64_t dims[MI_CKB_CKPT_MAX_DIMS];
  double mean, sigma; /* element = mean + sigma * z */
} mi_ckb_ckpt_tensor;
typedef struct mi_ckb_ckpt {
  json_t *config;            /* config.json */
  json_t *generation_config; /* NULL when the contract has none */
  const json_t *tokenizer;   /* checkpoint.tokenizer (borrowed), or NULL */
  mi_ckb_ckpt_tensor *t;     /* [n] in file order */
  size_t n;
} mi_ckb_ckpt;
const mi_ckb_entry *mi_ckb_checkpoint_family(const mi_ckb *c, const char *name, char *err, size_t n);
int mi_ckb_checkpoint_plan(const mi_ckb_entry *model, const char *preset, const char *layout, const char *torch_dtype,
                           mi_ckb_ckpt *out, char *err, size_t n);
void mi_ckb_checkpoint_free(mi_ckb_ckpt *ck);

#endif
