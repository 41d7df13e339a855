/* mi-verify internals: staged verification of a platform plugin (stages
 * 1-2) and of a model plugin through the engine (stages 3-6) against CKB
 * contracts:
 *   ref/f64.c        the float64 operator references (one set for everything)
 *   ref/ops.c        the operator contracts' references, selected by name
 *   ref/map.c        the reference of every operator stated as an expression
 *                    (its contract's "map" form, core/ckb/map_form.h)
 *   unit.c           one operator contract: cases, inputs, libffi call, compare
 *   child.c          fork + time limit + rlimits around every unit
 *   raw.c            stages 3-6's result protocol: raw records from the
 *                    candidate's child, events and verdicts in the parent
 *   stage1..6.c      the stages
 *   growth.c         stage 6's default gate: platform work per decode step
 *   model.c          engine-level helpers: registry of the two plugins,
 *                    model copies, tensor edits, greedy runs
 *   bind.c           the binder: a model contract's step arguments on one
 *                    config and call (bind.h), shared by
 *   interp.c         the model contract in float64 (stage 5, the model
 *                    tests) and one layer of it (stage 2's twin)
 * Nothing here names a model family: what a family is comes from its
 * contract alone. */
#ifndef MI_CORE_VERIFY_H
#define MI_CORE_VERIFY_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "mi/platform.h"

/* ---------- arguments as the contract declares them ---------- */

typedef enum vf_kind {
  VF_CTX, VF_STREAM, VF_IN, VF_OUT, VF_INOUT, VF_I64, VF_I32, VF_F32, VF_F64, VF_DTYPE,
} vf_kind;

int vf_kind_parse(const char *s, vf_kind *out);
int vf_dtype_parse(const char *s, mi_dtype *out);

typedef struct vf_arg {
  const char *name;
  vf_kind kind;
  mi_dtype dtype; /* buffers: element type; VF_DTYPE: the value passed */
  int64_t n;      /* buffers: element count (product of the shape) */
  double *val;    /* buffers: float64 values. Inputs: exactly what the kernel
                     gets (already rounded to dtype). Outputs: the reference
                     writes here. */
  int64_t i;      /* VF_I64 / VF_I32 */
  double f;       /* VF_F32 (rounded to float) / VF_F64 */
  int64_t *shape; /* buffers: dims */
  int ndim;
  /* inputs of a block type: the magnitude of the terms each value is formed
   * from, which a mode's bound scales with (quant_input.h); NULL: |val| */
  double *absval;
} vf_arg;

typedef struct vf_call {
  vf_arg *args;
  int nargs;
  /* the operator contract called, or NULL: the references that read more
   * of it than the arguments need it (the "map" reference: its expression) */
  const json_t *op;
} vf_call;

/* A float64 reference: reads inputs, writes out/inout buffers' val.
 * Returns 0, or -1 with a message (e.g. an argument it needs is missing). */
typedef int (*vf_ref_fn)(vf_call *c, char *err, size_t err_len);
vf_ref_fn vf_ref_find(const char *name);
/* The call's argument named `name`, or NULL (a caller need not pass them in
 * the signature's order). */
vf_arg *vf_call_arg(vf_call *c, const char *name);
/* The names known, NULL-terminated (for checks against the schema enum). */
const char *const *vf_ref_names(void);

/* ---------- the platform interface by member name ---------- */

/* offsetof(mi_platform_iface, member), or -1 when the name is unknown. */
long vf_member_offset(const char *member);
const char *const *vf_member_names(void);
/* The function pointer of `member` in iface, or NULL (unknown, absent from
 * the plugin's struct_size, or NULL). */
void *vf_member_fn(const mi_platform_iface *iface, const char *member);

/* ---------- one unit ---------- */

typedef struct vf_unit_opts {
  uint64_t seed;           /* master seed */
  json_t *operator_entry;  /* the operator contract */
  json_t *platform_kernel; /* the platform contract's kernels[] item (dtypes, modes) */
  int result_fd;           /* unused (kept for layout) */
  /* the plugin's variant() name (from the probe), or NULL: a mode the
   * platform contract lists for this kernel (kernels[].modes: mode -> tag)
   * is on when its tag is part of this name, and the operator contract's
   * bound for that mode replaces the tolerance on the dtypes it covers */
  const char *variant;
  /* the kernel comes from this kernel pack (stage 1 --pack), not from a
   * platform member: messages name the operator id; NULL otherwise */
  const char *pack;
  /* the options the plugin was opened with (-o KEY=VALUE), or NULL: a mode
   * the platform contract ties to options ({"unless_options": {...}}) is on
   * unless every one of them is given with its value */
  const void *plugin_opts; /* const mi_options * */
} vf_unit_opts;

/* One operator contract as a plan: the parent draws every case's inputs
 * (vf_op_plan_new), a child calls the kernels and returns only the output
 * buffers as records (vf_op_plan_run), and the parent, after the child has
 * ended, computes the float64 references, compares and decides
 * (vf_op_plan_judge: the events vf_unit_report reads: case_end per case,
 * case_start for a case in flight, case_skip, error). */
typedef struct vf_op_plan vf_op_plan;
struct vf_child_result;
vf_op_plan *vf_op_plan_new(const vf_unit_opts *o);
size_t vf_op_plan_result_bytes(const vf_op_plan *p); /* the most a correct child writes */
int vf_op_plan_run(const vf_op_plan *p, const mi_platform_iface *iface, void *ctx, int fd);
/* The same with the kernel given: fn (the contract's signature) called with
 * kctx in the VF_CTX slot, last_error(kctx) the reason for a non-zero
 * return; the platform (iface, ctx) still provides buffers and copies. How
 * a kernel pack's kernel is run (stage 1 --pack). */
typedef struct vf_kernel {
  void *fn;
  void *kctx;
  const char *(*last_error)(void *kctx);
} vf_kernel;
int vf_op_plan_run_kernel(const vf_op_plan *p, const mi_platform_iface *iface, void *ctx, const vf_kernel *k,
                          int fd);
/* The operator id the plan is for (NULL when the contract has none). */
const char *vf_op_plan_op_id(const vf_op_plan *p);
json_t *vf_op_plan_judge(vf_op_plan *p, const struct vf_child_result *r);
void vf_op_plan_free(vf_op_plan *p);

/* Seeds: the per-case seed is a hash of the master seed, the operator id
 * and the case's position, so one --seed reproduces every case. */
uint64_t vf_case_seed(uint64_t master, const char *op_id, int case_index, int variant);

/* ---------- isolation ---------- */

typedef struct vf_limits {
  double timeout_s; /* wall clock; the child is killed after it */
  double cpu_s;     /* RLIMIT_CPU */
  uint64_t mem_mb;  /* the memory cap: a cgroup's where one is available, RLIMIT_AS
                       (not under ASan) and RLIMIT_FSIZE; 0 = none */
  size_t result_cap; /* bytes of the result pipe read at most (0: 4 MiB); more is a flood */
} vf_limits;

typedef struct vf_child_result {
  int exited;      /* 1: exited normally with exit_code */
  int exit_code;
  int signaled;    /* 1: killed by term_signal */
  int term_signal;
  int timed_out;   /* 1: killed by us after timeout_s */
  double wall_s;
  char *output;    /* raw stdout+stderr of the child (tail, NUL-terminated) */
  json_t *events;  /* array of the JSON event lines it emitted (stages 3-6) */
  char *results;   /* the raw result pipe (at most result_cap bytes) */
  size_t results_len;
  int flooded;        /* 1: it wrote more than result_cap bytes there (killed) */
  size_t result_cap;
  int strays;         /* processes still running when its main process ended (killed) */
  char stray_desc[160];
  int oom_killed;     /* the memory cgroup's OOM killer fired */
  int contain_failed; /* the child could not set up a containment layer the probe had */
} vf_child_result;

/* What confines a unit on this machine, in words (probed once). */
const char *vf_containment(void);
/* The verifier's scratch folder (units' folders, model copies): writable
 * for the children, removed at exit when empty. */
const char *vf_scratch_root(void);

/* ---------- the stage 1-2 result protocol ----------
 * The child only returns output buffers, as records on the result pipe; the
 * parent drew the inputs, computes the expected outputs after the child has
 * ended, compares and decides. A record: header, msg_len bytes of text
 * (a failure's reason), payload_len bytes (the outputs, whose size the
 * parent knows). Nothing else is accepted there. */
#define VF_REC_MAGIC 0x5256494du /* "MIVR" */
#define VF_REC_MAX_MSG 1024
enum { VF_REC_OUT = 1, VF_REC_FAIL = 2, VF_REC_ERROR = 3 };
/* The rc of an ERROR record written before any case ran, saying the unit
 * cannot be run as set up (a kernel pack that refuses the platform, has no
 * kernel for the operator, or one of another contract version): the unit's
 * status is then ERROR, not FAIL (both fail the stage). */
#define VF_REC_RC_UNRUNNABLE 2
typedef struct vf_rec_hdr {
  uint32_t magic, type;
  int32_t index, rc;
  uint32_t msg_len, pad;
  uint64_t payload_len;
} vf_rec_hdr;
typedef struct vf_rec {
  uint32_t type;
  int index, rc;
  char msg[VF_REC_MAX_MSG + 1]; /* control characters made spaces */
  const char *payload;
  size_t payload_len;
} vf_rec;
void vf_rec_write(int fd, uint32_t type, int index, int rc, const char *msg, const void *payload,
                  uint64_t n);
/* The record at *off of buf[len]: 1 (and *off advanced), 0 at the end, -1
 * (why) when the bytes are not a record. */
int vf_rec_next(const char *buf, size_t len, size_t *off, vf_rec *out, char *why, size_t wl);
/* Bytes one record takes on the pipe, for result_cap. */
#define VF_REC_SIZE(payload) (sizeof(vf_rec_hdr) + VF_REC_MAX_MSG + (size_t)(payload))

/* Runs fn(arg, result_fd) in a forked child under the limits, capturing its
 * output and event lines. Never lets the child's fate reach the caller. */
int vf_run_child(const vf_limits *lim, int (*fn)(void *arg, int result_fd), void *arg,
                 vf_child_result *out);
void vf_child_result_free(vf_child_result *r);

/* Writes one event line (a JSON object) to fd; steals ev. */
void vf_emit(int fd, json_t *ev);

/* ---------- stages ---------- */

typedef struct vf_stage_opts {
  const char *plugin_path;
  const void *plugin_opts; /* const mi_options * */
  json_t *platform;        /* the platform contract */
  json_t *operators;       /* object: operator id -> operator contract */
  uint64_t seed;
  vf_limits lim;
  const char *only; /* comma-separated operator ids or member names, or NULL */
  /* stages 3-6: the model plugin under test, the model folder, the
   * goldens folder (stage 4) */
  const char *model_plugin_path;
  const char *model_dir;
  const char *goldens_dir;
  /* stage 4 with no golden for this model's weights: N/A instead of FAIL
   * (mi-gen on a checkpoint no peer has seen: stage 5's float64 reference
   * still holds the engine to the math) */
  int goldens_optional;
  /* stages 3-6: every unit's wall-clock deadline, instead of the stage's own
   * (tests of a plugin that never returns); 0: the stage's */
  double unit_timeout_s;
  /* --kv-type: the KV cache element type the model under test was asked for
   * (NULL or "f32": f32). A model plugin gets it as its kv_type option; an
   * engine has it baked in. Stages 4 and 5 compare logprobs within
   * vf_logprob_tol (a half-precision cache rounds every key and value). */
  const char *kv_type;
  /* stage 4 with no golden in goldens_dir: the oracle that makes one for
   * this checkpoint (llama.cpp through tools/peer/oracle.mjs), cached in
   * oracle_cache by the weights' and the config's hashes. NULL node or
   * script: no oracle (stage 4 then N/A or FAIL as before). */
  const char *oracle_node;   /* the node executable (a path) */
  const char *oracle_script; /* tools/peer/oracle.mjs */
  const char *oracle_cache;  /* a folder, created when missing */
  int oracle_timeout_s;      /* 0: 1800 */
  /* stage 4, deployed: the mi-run executable that runs the golden's prompts
   * as a deployment does (NULL: that unit is not run) */
  const char *mi_run;
  /* the CKB (stage 5: the model contract interpreted in float64,
   * core/verify/interp.c, for an architecture the verifier has no
   * hand-written float64 model of; NULL: none) */
  const struct mi_ckb *ckb;
  /* stage 1 --pack: a kernel pack (MI_PLUGIN_KERNELS) and its manifest
   * (pack.json beside it, vf_pack_manifest_load): stage 1 then runs the
   * manifest's kernels, from the pack, on the platform plugin's threads
   * and buffers. NULL: the platform contract's kernels. */
  const char *pack_path;
  json_t *pack_manifest;
  /* --tp N: the ranks a tensor-parallel deployment runs; N > 1 adds stage
   * 1's collective unit (test.stage1_collectives, core/verify/collectives.c) */
  int tp;
} vf_stage_opts;

/* Stage 1's collective unit at o->tp = tp > 1 ranks: the platform's
 * all-reduce and broadcast across tp processes under mpirun ($MI_MPIRUN,
 * else PATH), judged here against a float64 sum; a unit report. */
json_t *vf_stage1_collectives(const vf_stage_opts *o, int tp);
/* One rank of it (mi-verify --collective-rank DIR, run by mpirun): loads
 * the plugin (plugin_opts: a const mi_options *), runs the cases, writes
 * DIR/rank-R.json and DIR/rank-R.bin; the exit status. */
int vf_collective_rank(const char *plugin_path, const void *plugin_opts, uint64_t seed, int tp, const char *dir);

/* KV cache types (core/verify/kv.c; docs/mi-gen.md, "KV cache types"):
 * the logprob tolerance for a model whose cache is o->kv_type, from the f32
 * one, against goldens of an f32 cache (stage 4) and against the float64
 * twin that rounds its cache the same way (stage 5); the twin's setting
 * (stage 5 sets it before its reference child forks) and its rounding of
 * n keys or values (the float64 models call it when they store them). */
double vf_logprob_tol(const vf_stage_opts *o, double f32_tol);
double vf_logprob_tol_twin(const vf_stage_opts *o, double f32_tol);
void vf_ref_set_kv(const vf_stage_opts *o);
void vf_ref_round_kv(double *x, int64_t n);
/* x rounded to nearest even in t (f32, f16, bf16): operator.convert's reference */
double vf_f64_round_dtype(double x, mi_dtype t);

/* Loads the plugin in a child and describes it: {"verdict": "PASS"|"FAIL",
 * "name", "version", "kind", "variant", "members": [...], "message", ...}. */
json_t *vf_probe_plugin(const vf_stage_opts *o);

/* A kernel pack's manifest: pack.json in the folder of pack_path, an
 * object with "name" and a non-empty "kernels" array of objects naming an
 * "operator" and its "version" (mi/kernel_pack.h). NULL with one line in
 * err naming the file and the problem. */
json_t *vf_pack_manifest_load(const char *pack_path, char *err, size_t err_len);
/* Loads the pack (o->pack_path) in a child and describes it: {"verdict",
 * "name", "version", "kind": "kernels", "abi", "target", "kernels":
 * [{operator, version, math}], "message" on a FAIL}. */
json_t *vf_probe_pack(const vf_stage_opts *o);
/* A unit's child on a pack: loads the platform plugin and the pack, binds
 * the pack to the platform, and runs the plan with the operator's kernel
 * from the pack (vf_op_plan_run_kernel). The pack's refusal, a missing
 * kernel or one generated from another contract version is an ERROR record
 * with rc VF_REC_RC_UNRUNNABLE. The child's exit status. */
int vf_pack_unit_run(const vf_stage_opts *o, const vf_op_plan *plan, int fd);

/* Stage 1: one unit per kernel of the platform contract (with
 * o->pack_path: of the pack's manifest). Returns the stage
 * object of the report ({"stage": 1, "verdict", "units": [...]}). */
json_t *vf_stage1(const vf_stage_opts *o);

/* Shared by the stages: the plugin loaded inside a child (NULL after an
 * "error" event on fd), and the verdict of one unit from its child's
 * events and fate. `member` labels messages ("rmsnorm", "layer"). */
struct mi_plugin;
struct mi_plugin *vf_load_plugin(const vf_stage_opts *o, int fd);
/* The same for stages 1-2: a failure is an ERROR record on fd. */
struct mi_plugin *vf_load_plugin_rec(const vf_stage_opts *o, int fd);
json_t *vf_unit_report(const char *kind, const char *id, const char *version, const char *member,
                       const vf_child_result *r, double timeout_s, double cpu_s);
const char *vf_sig_name(int sig);

/* Stage 2: one decoder layer of `model` (a model contract) composed from
 * the platform's kernels with random weights, prefill then decode, against
 * a float64 reference of the layer. */
json_t *vf_stage2(const vf_stage_opts *o, json_t *model, json_t *test_contract);

/* Stage 3: the model folder's weight files against
 * its model contract (mi_ckb_check_weights), in a child. `ckb` is a
 * const mi_ckb *. */
json_t *vf_stage3(const vf_stage_opts *o, const void *ckb, const char *model_dir);

/* Stages 4-6 (verify_stage4.c .. verify_stage6.c): the engine built from
 * o->plugin_path + o->model_plugin_path on o->model_dir; `contract` is the
 * stage's test contract (its parameters: held-out cases, gates). */
json_t *vf_stage4(const vf_stage_opts *o, json_t *contract);
json_t *vf_stage5(const vf_stage_opts *o, json_t *contract);
json_t *vf_stage6(const vf_stage_opts *o, json_t *contract);
/* Stage 6's default gate (growth.c): the platform work each decode step
 * requests, counted, must not grow with the prefix beyond attention's
 * linear share. A unit report. */
json_t *vf_decode_growth(const vf_stage_opts *o);

/* ---------- engine-level helpers (verify_model.c), used in children ---------- */

struct mi_registry;
struct mi_session;
struct mi_weights;
struct mi_model;
struct mi_model_iface;

int vf_workdir_new(char *out, size_t n); /* a fresh folder under $TMPDIR or /tmp */
void vf_rmtree(const char *dir);
/* Copies the regular files of a model folder (not recursive) into the
 * folder dst; a GGUF model (one file) is copied to the file dst. */
int vf_copy_model_dir(const char *src, const char *dst, char *err, size_t err_len);
/* A registry with exactly the platform and the model plugin under test
 * (a plugins.conf written into workdir). NULL + err. */
struct mi_registry *vf_open_registry(const vf_stage_opts *o, const char *workdir, char *err, size_t err_len);
/* The two plugins' names and kinds (loads them: a unit's child only), and
 * the plugins.conf vf_open_registry loads from them: the platform (with
 * its options) and the model or engine under test, by absolute path. */
int vf_plugin_names(const vf_stage_opts *o, char names[2][128], int *is_engine, char *err, size_t err_len);
int vf_write_plugins_conf(const vf_stage_opts *o, const char *conf, char names[2][128], int is_engine, char *err,
                          size_t err_len);
struct mi_session *vf_open_engine(struct mi_registry *reg, const char *model_dir, char *err, size_t err_len);
/* A candidate's child opening the engine under test on model_dir: NULL when
 * it cannot, after slot 0's FAIL record "the engine cannot load DIR: why"
 * (*reg then NULL); the caller writes slot 0's OUT record. */
struct mi_session *vf_child_engine(const vf_stage_opts *o, const char *workdir, const char *model_dir, int fd,
                                   struct mi_registry **reg);
/* Greedy decoding of exactly n_predict tokens (temperature 0, EOS ignored). */
struct mi_gen_params;
void vf_greedy_gen_params(struct mi_gen_params *gp, int n_predict);

/* The engine's model plugin loaded again on another folder (no tokenizer). */
typedef struct vf_loaded {
  json_t *cfg;
  struct mi_weights *w;
  struct mi_model *m;
  const struct mi_model_iface *M;
  int64_t V; /* vocabulary */
} vf_loaded;
int vf_load_direct(const struct mi_session *e, const char *dir, vf_loaded *out, char *err, size_t err_len);
/* The same with another platform table for the model (one that wraps the
 * engine's: stage 6 counts the work each step asks for). */
int vf_load_direct_on(const struct mi_session *e, const char *dir, const mi_platform_iface *P, vf_loaded *out,
                      char *err, size_t err_len);
void vf_unload_direct(vf_loaded *l);

int64_t vf_argmax(const float *x, int64_t n);
/* Prefill then greedy decode: logits [steps, V], tokens [steps]. */
int vf_greedy(const struct mi_model_iface *M, struct mi_model *m, int64_t V, const int32_t *prompt, int64_t n,
              int steps, float *logits, int32_t *tokens, char *err, size_t err_len);
/* n ids uniform in [lo, hi) from seed (core/runtime/rng.h). */
void vf_random_prompt(uint64_t seed, int32_t *ids, int64_t n, int64_t lo, int64_t hi);

/* A tensor's bytes in its safetensors file. */
typedef struct vf_tensor_loc {
  char file[4096];
  uint64_t offset;
  size_t nbytes;
  int dtype;    /* mi_dtype */
  double shift; /* the load serves stored + shift (a GGUF norm stored as 1 + w: -1); edits act on what is served */
} vf_tensor_loc;
int vf_tensor_locate(const char *model_dir, const char *name, vf_tensor_loc *out, char *err, size_t err_len);
/* In place, on the values the load serves (t->shift): v <- v*scale*(1 + noise*u) + 0.05*noise*u, u uniform in [-1, 1)
 * from seed; the old bytes in *saved (malloc'd) when saved is not NULL. */
int vf_tensor_edit(const vf_tensor_loc *t, double scale, double noise, uint64_t seed, unsigned char **saved,
                   char *err, size_t err_len);
int vf_tensor_restore(const vf_tensor_loc *t, const unsigned char *saved);
/* In place: v <- v*scale + add, rounded to the tensor's dtype (a zero-centred
 * norm weight w: scale s, add s - 1 scales 1 + w by s; scale 0, add -1 makes
 * 1 + w zero). */
int vf_tensor_affine(const vf_tensor_loc *t, double scale, double add, char *err, size_t err_len);
uint32_t vf_fnv1a32_file(const char *path, int *ok);

/* One check run in a child (timeout at least timeout_s), as a unit report,
 * its verdicts the child's own events: only for children that load no
 * candidate code (stage 3's file check, stage 5's import scan). */
json_t *vf_run_unit(const vf_stage_opts *o, const char *kind, const char *id, const char *member,
                    int (*fn)(void *arg, int fd), void *arg, double timeout_s);
void vf_case_start(int fd, const char *name, int index, const char *where);
/* Emits a case_end; `extra` (stolen, may be NULL) is merged in; the message
 * is "message" on a FAIL and "note" on a PASS. */
void vf_case_end(int fd, const char *name, int index, int pass, double max_err, json_t *extra, const char *fmt,
                 ...) __attribute__((format(printf, 7, 8)));
json_t *vf_stage_result(int stage, const char *name, json_t *units);

/* ---------- the stage 3-6 result protocol (raw.c) ----------
 * A child that loads the candidate returns raw outputs only: one record per
 * slot of the parent's plan, in slot order (VF_REC_OUT with the outputs, or
 * VF_REC_FAIL with why it could not produce them). The parent's judge reads
 * them with vf_raw_read and writes the case events with vf_ev_*. */
void vf_ev_start(json_t *ev, const char *name, int index, const char *where);
void vf_ev_end(json_t *ev, const char *name, int index, int pass, double max_err, json_t *extra,
               const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* The case_end event vf_case_end and vf_ev_end write (fmt may be NULL). */
json_t *vf_case_end_event(const char *name, int index, int pass, double max_err, json_t *extra, const char *fmt,
                          va_list ap);
/* The engine_load event of slot 0 (vf_child_engine's record): 1 when the
 * engine loaded, else 0 (the case started or failed). */
int vf_ev_engine_load(json_t *ev, const vf_rec *slot0, const char *model_dir);
void vf_ev_error(json_t *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* slots[i].type: 0 for a slot with no record. Returns the records read, or
 * -1 (an error event naming `stage` appended) when the pipe holds anything
 * but records in slot order. ERROR records become error events. */
int vf_raw_read(const vf_child_result *r, const char *stage, int nslots, vf_rec *slots, json_t *ev);
/* vf_run_unit for a candidate's child: the pipe read up to result_cap,
 * the child's own events dropped, the events judge(arg, r) writes reported. */
json_t *vf_run_unit_raw(const vf_stage_opts *o, const char *kind, const char *id, const char *member,
                        int (*fn)(void *arg, int fd), void *arg, double timeout_s, size_t result_cap,
                        json_t *(*judge)(void *arg, const vf_child_result *r));

#endif
