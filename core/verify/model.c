/* Engine-level helpers for the verifier's stages 3-6: a registry holding
 * exactly the platform plugin and the model plugin under test, a model
 * opened through the engine (or loaded again from another folder with the
 * same plugins), greedy runs that return raw logits, scratch copies of a
 * model folder and in-place edits of one tensor's bytes in such a copy.
 * Everything here runs inside a stage's forked child. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runtime/session.h"
#include "core/runtime/host.h"
#include "core/runtime/gguf_model.h"
#include "core/runtime/model_input.h"
#include "core/runtime/safetensors.h"
#include "core/runtime/rng.h"
#include "core/util/file.h"
#include "core/verify/verify.h"

/* ---------- scratch folders ---------- */

int vf_workdir_new(char *out, size_t n) {
  /* in the verifier's scratch folder: the one place a unit's child may write */
  snprintf(out, n, "%s/work-XXXXXX", vf_scratch_root());
  return mkdtemp(out) ? 0 : -1;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p) != 0 && errno != ENOENT;
}

void vf_rmtree(const char *dir) {
  if (dir && *dir) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int copy_file(const char *sp, const char *dp, char *err, size_t err_len) {
  static char buf[1 << 16];
  int rc = 0, in = open(sp, O_RDONLY | O_CLOEXEC), out = open(dp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (in < 0 || out < 0) {
    snprintf(err, err_len, "%s: cannot copy to %s: %s", sp, dp, strerror(errno));
    rc = -1;
  }
  ssize_t r;
  while (rc == 0 && (r = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, (size_t)r) != r) {
      snprintf(err, err_len, "%s: write failed: %s", dp, strerror(errno));
      rc = -1;
    }
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return rc;
}

int vf_copy_model_dir(const char *src, const char *dst, char *err, size_t err_len) {
  if (mi_model_input_is_gguf(src)) return copy_file(src, dst, err, err_len); /* the model is the file */
  if (mkdir(dst, 0700) != 0 && errno != EEXIST) {
    snprintf(err, err_len, "%s: cannot create: %s", dst, strerror(errno));
    return -1;
  }
  DIR *d = opendir(src);
  if (!d) {
    snprintf(err, err_len, "%s: cannot read the folder: %s", src, strerror(errno));
    return -1;
  }
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    char sp[4096], dp[4096];
    snprintf(sp, sizeof sp, "%s/%s", src, de->d_name);
    snprintf(dp, sizeof dp, "%s/%s", dst, de->d_name);
    struct stat st;
    if (de->d_name[0] == '.' || stat(sp, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    rc = copy_file(sp, dp, err, err_len);
  }
  closedir(d);
  return rc;
}

/* ---------- the plugins under test in a registry of their own ---------- */

/* The model plugin's kv_type option (mi-verify --kv-type), set with the
 * registry: every load of the model under test in this process (one model
 * per mi-verify run) gets it, as mi-run --kv-type gives it. An engine has
 * its KV type baked in and gets nothing. */
static mi_kv g_kv_opt[1];
static mi_options g_model_opts = {g_kv_opt, 0};

/* The names (and whether the second is an engine) of the two plugins under
 * test: loads them, so only a unit's child may call it. */
int vf_plugin_names(const vf_stage_opts *o, char names[2][128], int *is_engine, char *err, size_t err_len) {
  const char *paths[2] = {o->plugin_path, o->model_plugin_path};
  *is_engine = 0;
  for (int i = 0; i < 2; i++) {
    mi_plugin *p = mi_plugin_load_file(paths[i], NULL);
    if (!p || p->status != MI_PLUGIN_LOADED || !p->desc) {
      snprintf(err, err_len, "%s: cannot load the plugin: %s", paths[i],
               p && p->reason ? p->reason : "out of memory");
      mi_plugin_unload(p);
      return -1;
    }
    /* the model under test: a model plugin or a generated engine (mi/engine.h) */
    int kind_ok = i ? ((int)p->desc->kind == MI_PLUGIN_MODEL || (int)p->desc->kind == MI_PLUGIN_ENGINE)
                    : (int)p->desc->kind == MI_PLUGIN_PLATFORM;
    if (!kind_ok) {
      snprintf(err, err_len, "%s: not a %s plugin", paths[i], i ? "model or engine" : "platform");
      mi_plugin_unload(p);
      return -1;
    }
    if (i) *is_engine = (int)p->desc->kind == MI_PLUGIN_ENGINE;
    snprintf(names[i], 128, "%s", p->desc->name);
    mi_plugin_unload(p);
  }
  return 0;
}

/* A plugins.conf naming only the two plugins, so nothing installed next to
 * the executable can stand in for them (the loader then scans no folder):
 * the platform with its options, then the model or engine under test. */
int vf_write_plugins_conf(const vf_stage_opts *o, const char *conf, char names[2][128], int is_engine, char *err,
                          size_t err_len) {
  const char *paths[2] = {o->plugin_path, o->model_plugin_path};
  FILE *f = fopen(conf, "w");
  if (!f) {
    snprintf(err, err_len, "%s: cannot write: %s", conf, strerror(errno));
    return -1;
  }
  char ap[2][4096];
  for (int i = 0; i < 2; i++)
    if (!realpath(paths[i], ap[i])) snprintf(ap[i], sizeof ap[i], "%s", paths[i]);
  fprintf(f, "platform %s %s required", names[0], ap[0]);
  const mi_options *po = o->plugin_opts;
  for (size_t i = 0; po && i < po->count; i++)
    fprintf(f, " %s=%s", po->items[i].key, po->items[i].value);
  fprintf(f, "\n%s %s %s required\n", is_engine ? "engine" : "model", names[1], ap[1]);
  /* --pack: the kernel pack the engine's pack operators come from */
  if (o->pack_path) {
    char pp[4096];
    mi_plugin *p = mi_plugin_load_file(o->pack_path, NULL);
    int ok = p && p->status == MI_PLUGIN_LOADED && p->desc && (int)p->desc->kind == MI_PLUGIN_KERNELS;
    if (ok) {
      if (!realpath(o->pack_path, pp)) snprintf(pp, sizeof pp, "%s", o->pack_path);
      fprintf(f, "kernels %s %s required\n", p->desc->name, pp);
    } else {
      snprintf(err, err_len, "%s: not a loadable kernel pack: %s", o->pack_path,
               p && p->reason ? p->reason : "wrong plugin kind");
    }
    mi_plugin_unload(p);
    if (!ok) {
      fclose(f);
      return -1;
    }
  }
  if (fclose(f) != 0) {
    snprintf(err, err_len, "%s: cannot write: %s", conf, strerror(errno));
    return -1;
  }
  return 0;
}

mi_registry *vf_open_registry(const vf_stage_opts *o, const char *workdir, char *err,
                              size_t err_len) {
  char conf[4200];
  snprintf(conf, sizeof conf, "%s/plugins.conf", workdir);
  char names[2][128];
  int is_engine = 0;
  if (vf_plugin_names(o, names, &is_engine, err, err_len) != 0 ||
      vf_write_plugins_conf(o, conf, names, is_engine, err, err_len) != 0)
    return NULL;
  g_kv_opt[0] = (mi_kv){"kv_type", o->kv_type ? o->kv_type : "f32"};
  g_model_opts.count = !is_engine && o->kv_type ? 1 : 0;
  mi_loader_opts lo = {.conf_path = conf};
  int fatal = 0;
  mi_registry *r = mi_registry_load(&lo, &fatal, err, err_len);
  if (r && fatal) {
    mi_registry_free(r);
    r = NULL;
  }
  if (!r && !err[0]) snprintf(err, err_len, "cannot load the plugins");
  return r;
}

mi_session *vf_open_engine(mi_registry *reg, const char *model_dir, char *err, size_t err_len) {
  mi_session_opts eo = {.model_dir = model_dir, .tp_size = 1, .model_opts = &g_model_opts};
  mi_session *e = NULL;
  if (mi_session_open(reg, &eo, &e, err, err_len) != 0) return NULL;
  return e;
}

mi_session *vf_child_engine(const vf_stage_opts *o, const char *workdir, const char *model_dir, int fd,
                            mi_registry **reg) {
  char err[2048] = "", msg[2600];
  *reg = vf_open_registry(o, workdir, err, sizeof err);
  mi_session *e = *reg ? vf_open_engine(*reg, model_dir, err, sizeof err) : NULL;
  if (!e) {
    snprintf(msg, sizeof msg, "the engine cannot load %s: %s", model_dir, err);
    vf_rec_write(fd, VF_REC_FAIL, 0, 0, msg, NULL, 0);
    if (*reg) mi_registry_free(*reg);
    *reg = NULL;
  }
  return e;
}

void vf_greedy_gen_params(mi_gen_params *gp, int n_predict) {
  memset(gp, 0, sizeof *gp);
  mi_sampler_defaults(&gp->sampling);
  gp->sampling.temp = 0;
  gp->n_predict = n_predict;
  gp->ignore_eos = 1;
}

/* ---------- the model under test loaded from another folder ---------- */

/* What mi_session_open does for the weights, with the engine's plugins, and
 * without the tokenizer (which costs ~0.4 s and does not touch weights). */
int vf_load_direct(const mi_session *e, const char *dir, vf_loaded *out, char *err, size_t err_len) {
  return vf_load_direct_on(e, dir, e->P, out, err, err_len);
}

int vf_load_direct_on(const mi_session *e, const char *dir, const mi_platform_iface *P, vf_loaded *out, char *err,
                      size_t err_len) {
  memset(out, 0, sizeof *out);
  out->cfg = mi_model_input_config(dir, 0, err, err_len);
  if (!out->cfg) return -1;
  /* a GGUF's block-type matrices as the session serves them: as stored
   * where this platform's kernels take the dtype */
  out->w = mi_model_input_weights(dir, mi_gguf_platform_blocks(P, e->pc), err, err_len);
  if (!out->w) goto fail;
  mi_model_load_args a = {
      .struct_size = sizeof a,
      .model_dir = dir,
      .config = mi_json_wrap(out->cfg),
      .weights = out->w,
      .platform = {.iface = P, .ctx = e->pc},
      .tp_rank = 0,
      .tp_size = 1,
      .opts = &g_model_opts,
      .packs = e->packs,
      .n_packs = e->n_packs,
  };
  out->M = e->M;
  if (e->M->load(e->model_plugin->ctx, &a, &out->m, err, err_len) != 0) goto fail;
  mi_model_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  e->M->info(out->m, &info);
  out->V = info.vocab_size;
  return 0;
fail:
  vf_unload_direct(out);
  return -1;
}

void vf_unload_direct(vf_loaded *l) {
  if (l->m) l->M->unload(l->m);
  if (l->w) mi_weights_close(l->w);
  json_decref(l->cfg);
  memset(l, 0, sizeof *l);
}

/* ---------- greedy runs with raw logits ---------- */

int64_t vf_argmax(const float *x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* Prefill `prompt`, then steps-1 greedy decode steps: logits [steps, V]
 * (row s: the distribution for generated token s), tokens [steps]. */
int vf_greedy(const mi_model_iface *M, mi_model *m, int64_t V, const int32_t *prompt, int64_t n,
              int steps, float *logits, int32_t *tokens, char *err, size_t err_len) {
  mi_seq *s = NULL;
  if (M->seq_create(m, n + steps, &s, err, err_len) != 0) return -1;
  int rc = M->forward(m, s, prompt, n, logits, 0, err, err_len);
  for (int i = 0; rc == 0 && i < steps; i++) {
    tokens[i] = (int32_t)vf_argmax(logits + (size_t)i * V, V);
    if (i + 1 < steps)
      rc = M->forward(m, s, &tokens[i], 1, logits + (size_t)(i + 1) * V, 0, err, err_len);
  }
  M->seq_destroy(m, s);
  return rc;
}

void vf_random_prompt(uint64_t seed, int32_t *ids, int64_t n, int64_t lo, int64_t hi) {
  uint64_t x = seed;
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)mi_rng_int(&x, lo, hi - 1);
}

/* ---------- tensors in a safetensors file ---------- */

/* A GGUF file's tensor serving the Hugging Face name, through the model
 * contract's gguf map (its bytes at the data section plus its offset). */
static int locate_gguf(const char *path, const char *name, vf_tensor_loc *out, char *err, size_t err_len) {
  mi_gguf_model *m = mi_model_input_open_gguf(path, err, err_len);
  if (!m) return -1;
  int dt = -1;
  const mi_gguf_tensor *t = mi_gguf_model_tensor(m, name, &dt);
  if (!t || dt < 0) snprintf(err, err_len, "%s: no tensor serves \"%s\"%s", path, name, t ? " in a type read" : "");
  else {
    snprintf(out->file, sizeof out->file, "%s", path);
    out->offset = mi_gguf_data_offset(m->g) + t->offset;
    out->nbytes = (size_t)t->nbytes;
    out->dtype = dt;
    out->shift = mi_gguf_model_tensor_shift(m, t);
  }
  mi_gguf_model_close(m);
  return t && dt >= 0 ? 0 : -1;
}

int vf_tensor_locate(const char *model_dir, const char *name, vf_tensor_loc *out, char *err,
                     size_t err_len) {
  if (mi_model_input_is_gguf(model_dir)) return locate_gguf(model_dir, name, out, err, err_len);
  mi_weights *w = mi_weights_open(model_dir, err, err_len);
  if (!w) return -1;
  mi_weight_info wi;
  if (mi_weights_find(w, name, &wi) != 0) {
    snprintf(err, err_len, "%s: no tensor \"%s\"", model_dir, name);
    mi_weights_close(w);
    return -1;
  }
  snprintf(out->file, sizeof out->file, "%s", wi.file);
  out->nbytes = wi.nbytes;
  out->dtype = wi.dtype;
  out->shift = 0;
  mi_weights_close(w);
  /* The offset from the header itself: 8-byte length, JSON, data. */
  char e2[600];
  int hfd = mi_file_open(out->file, 0, 0, NULL, NULL, e2, sizeof e2);
  FILE *f = hfd >= 0 ? fdopen(hfd, "rb") : NULL;
  if (hfd >= 0 && !f) close(hfd);
  uint64_t hl = 0;
  if (!f || fread(&hl, 8, 1, f) != 1 || hl > (1u << 28)) {
    snprintf(err, err_len, "%s: cannot read the safetensors header", out->file);
    if (f) fclose(f);
    return -1;
  }
  char *h = malloc(hl + 1);
  size_t got = h ? fread(h, 1, hl, f) : 0;
  fclose(f);
  json_t *j = NULL;
  if (got == hl) {
    h[hl] = 0;
    j = json_loads(h, 0, NULL);
  }
  free(h);
  json_t *off = json_array_get(json_object_get(json_object_get(j, name), "data_offsets"), 0);
  if (!json_is_integer(off)) {
    snprintf(err, err_len, "%s: no data_offsets for \"%s\"", out->file, name);
    json_decref(j);
    return -1;
  }
  out->offset = 8 + hl + (uint64_t)json_integer_value(off);
  json_decref(j);
  return 0;
}

static double to_f64(int dtype, const unsigned char *p) {
  uint16_t h;
  float f;
  switch (dtype) {
  case MI_DTYPE_BF16: memcpy(&h, p, 2); return mi_bf16_to_f32(h);
  case MI_DTYPE_F16: memcpy(&h, p, 2); return mi_f16_to_f32(h);
  default: memcpy(&f, p, 4); return f;
  }
}

static void from_f64(int dtype, unsigned char *p, double v) {
  uint16_t h;
  float f = (float)v;
  switch (dtype) {
  case MI_DTYPE_BF16:
    h = mi_f32_to_bf16(f);
    memcpy(p, &h, 2);
    break;
  case MI_DTYPE_F16:
    h = mi_f32_to_f16(f);
    memcpy(p, &h, 2);
    break;
  default: memcpy(p, &f, 4);
  }
}

/* The bytes of a tensor to edit in place (malloc'd), its file open in *fd
 * to write them back with tensor_write; NULL with why. */
static unsigned char *tensor_read(const vf_tensor_loc *t, int *fd, char *err, size_t err_len) {
  if (t->dtype != MI_DTYPE_BF16 && t->dtype != MI_DTYPE_F16 && t->dtype != MI_DTYPE_F32 &&
      !(t->dtype >= 0 && t->dtype < MI_DTYPE_COUNT && mi_dtype_is_block((mi_dtype)t->dtype))) {
    snprintf(err, err_len, "%s: tensor dtype %d cannot be edited", t->file, t->dtype);
    return NULL;
  }
  unsigned char *b = malloc(t->nbytes ? t->nbytes : 1);
  *fd = open(t->file, O_RDWR | O_CLOEXEC);
  if (!b || *fd < 0 || pread(*fd, b, t->nbytes, (off_t)t->offset) != (ssize_t)t->nbytes) {
    snprintf(err, err_len, "%s: cannot read a tensor at offset %llu", t->file,
             (unsigned long long)t->offset);
    free(b);
    if (*fd >= 0) close(*fd);
    return NULL;
  }
  return b;
}

/* tensor_read's bytes written back, fd closed and b freed; 0 or -1 with why. */
static int tensor_write(const vf_tensor_loc *t, int fd, unsigned char *b, char *err, size_t err_len) {
  int rc = pwrite(fd, b, t->nbytes, (off_t)t->offset) == (ssize_t)t->nbytes ? 0 : -1;
  if (rc) snprintf(err, err_len, "%s: cannot write a tensor: %s", t->file, strerror(errno));
  close(fd);
  free(b);
  return rc;
}

/* The values an edit moves: every element of a float tensor, or each block's
 * f16 scales of a block type (quant.h: d, and Q4_K's dmin after it; scaling
 * them scales the block's values). Element i is at first + (i / per) * step
 * + (i % per) * 2; its dtype. */
typedef struct edit_walk {
  size_t n, step, first, per;
  int dtype;
} edit_walk;

static unsigned char *walk_at(const edit_walk *e, unsigned char *b, size_t i) {
  return b + e->first + (i / e->per) * e->step + (i % e->per) * 2;
}

/* Where a block of t keeps its f16 scales (quant.h): d at *first, and
 * dmin or m right after it (*per 2) in the types with a min; scaling them
 * all scales every value. */
static void block_scales(mi_dtype t, size_t *first, size_t *per) {
  switch (t) {
  case MI_DTYPE_Q6_K: *first = 208, *per = 1; return;
  case MI_DTYPE_Q3_K: *first = 108, *per = 1; return;
  case MI_DTYPE_Q2_K: *first = 80, *per = 2; return;
  case MI_DTYPE_Q4_K:
  case MI_DTYPE_Q5_K:
  case MI_DTYPE_Q4_1:
  case MI_DTYPE_Q5_1: *first = 0, *per = 2; return;
  default: *first = 0, *per = 1; return;
  }
}

static edit_walk walk_of(const vf_tensor_loc *t) {
  if (t->dtype >= 0 && t->dtype < MI_DTYPE_COUNT && mi_dtype_is_block((mi_dtype)t->dtype)) {
    const size_t bb = mi_dtype_block_bytes((mi_dtype)t->dtype);
    size_t first, per;
    block_scales((mi_dtype)t->dtype, &first, &per);
    return (edit_walk){t->nbytes / bb * per, bb, first, per, MI_DTYPE_F16};
  }
  const size_t es = t->dtype == MI_DTYPE_F32 ? 4 : 2;
  return (edit_walk){t->nbytes / es, es, 0, 1, t->dtype};
}

int vf_tensor_edit(const vf_tensor_loc *t, double scale, double noise, uint64_t seed,
                   unsigned char **saved, char *err, size_t err_len) {
  if (walk_of(t).dtype != t->dtype && t->shift != 0) {
    snprintf(err, err_len, "%s: a block-type tensor's values cannot be shifted (only scaled)", t->file);
    return -1;
  }
  int fd;
  unsigned char *b = tensor_read(t, &fd, err, err_len);
  if (!b) return -1;
  if (saved) {
    *saved = malloc(t->nbytes ? t->nbytes : 1);
    if (*saved) memcpy(*saved, b, t->nbytes);
  }
  const edit_walk e = walk_of(t);
  uint64_t x = seed | 1;
  for (size_t i = 0; i < e.n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u = (double)(x >> 11) / 9007199254740992.0 * 2 - 1; /* [-1, 1) */
    unsigned char *p = walk_at(&e, b, i);
    double v = to_f64(e.dtype, p) + t->shift;
    /* Noise proportional to the value and an absolute part, so zeros move too. */
    from_f64(e.dtype, p, v * scale * (1 + noise * u) + noise * 0.05 * u - t->shift);
  }
  return tensor_write(t, fd, b, err, err_len);
}

int vf_tensor_affine(const vf_tensor_loc *t, double scale, double add, char *err, size_t err_len) {
  const edit_walk e = walk_of(t);
  if (e.dtype != t->dtype && (add != 0 || t->shift != 0)) {
    snprintf(err, err_len, "%s: a block-type tensor's values cannot be shifted (only scaled)", t->file);
    return -1;
  }
  int fd;
  unsigned char *b = tensor_read(t, &fd, err, err_len);
  if (!b) return -1;
  for (size_t i = 0; i < e.n; i++) {
    unsigned char *p = walk_at(&e, b, i);
    from_f64(e.dtype, p, (to_f64(e.dtype, p) + t->shift) * scale + add - t->shift);
  }
  return tensor_write(t, fd, b, err, err_len);
}

int vf_tensor_restore(const vf_tensor_loc *t, const unsigned char *saved) {
  int fd = open(t->file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = pwrite(fd, saved, t->nbytes, (off_t)t->offset) == (ssize_t)t->nbytes ? 0 : -1;
  close(fd);
  return rc;
}

uint32_t vf_fnv1a32_file(const char *path, int *ok) {
  char err[600];
  int fd = mi_file_open(path, 0, 0, NULL, NULL, err, sizeof err); /* a FIFO there must not block */
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  uint32_t h = 0x811c9dc5u;
  *ok = 0;
  if (fd >= 0 && !f) close(fd);
  if (!f) return 0;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++)
      h = (h ^ buf[i]) * 0x01000193u;
  *ok = !ferror(f);
  fclose(f);
  return h;
}

/* ---------- one check in a child ---------- */

json_t *vf_run_unit(const vf_stage_opts *o, const char *kind, const char *id, const char *member,
                    int (*fn)(void *arg, int fd), void *arg, double timeout_s) {
  vf_limits lim = o->lim;
  if (timeout_s > lim.timeout_s) lim.timeout_s = timeout_s;
  if (timeout_s * 2 > lim.cpu_s) lim.cpu_s = timeout_s * 2;
  vf_child_result r;
  if (vf_run_child(&lim, fn, arg, &r) != 0)
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", kind, "id", id, "verdict", "FAIL",
                     "status", "ERROR", "message", "cannot fork a child");
  json_t *u = vf_unit_report(kind, id, "-", member, &r, lim.timeout_s, lim.cpu_s);
  vf_child_result_free(&r);
  return u;
}

void vf_case_end(int fd, const char *name, int index, int pass, double max_err, json_t *extra,
                 const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *ev = vf_case_end_event(name, index, pass, max_err, extra, fmt, ap);
  va_end(ap);
  vf_emit(fd, ev);
}

void vf_case_start(int fd, const char *name, int index, const char *where) {
  vf_emit(fd, json_pack("{s:s, s:s, s:i, s:s}", "event", "case_start", "case", name, "index", index,
                        "where", where ? where : name));
}

json_t *vf_stage_result(int stage, const char *name, json_t *units) {
  int fails = 0;
  size_t i;
  json_t *u;
  json_array_foreach(units, i, u) fails +=
      strcmp(json_string_value(json_object_get(u, "verdict")), "PASS") != 0;
  size_t n = json_array_size(units);
  return json_pack("{s:i, s:s, s:s, s:o, s:i, s:i}", "stage", stage, "name", name, "verdict",
                   (fails || !n) ? "FAIL" : "PASS", "units", units, "passed",
                   (int)(n - (size_t)fails), "failed", fails);
}
