/* Stage 5 of the verifier: single path and authenticity, four units.
 *   (a) imports: the model plugin's ELF, read here (dynamic section and
 *       dynamic symbol table): every DT_NEEDED within the contract's
 *       allowlist; no import of dlopen/dlmopen/dlsym (a model plugin loads no
 *       library of its own: kernels come from the platform); no undefined
 *       symbol and no string anywhere in the file naming a known inference
 *       framework (libllama, ggml, libtorch, onnxruntime, ...).
 *   (b) outputs follow the weights: in a copy of the model, the final norm's
 *       weight (the model contract's epilogue names it) times 2 (exact in
 *       bf16/f16/f32); for a zero-centred norm (w_offset), -1 so 1 + w = 0.
 *       The final RMSNorm output, hence every logit, must then be exactly
 *       twice the original (logits' = 2·logits, the float64 relation; f32
 *       scaling by 2 is exact too), or exactly 0.
 *   (c) unseen prompts: token sequences drawn now from the seed, greedy
 *       decode through the plugin, against a float64 forward pass of the
 *       same weight files (the model contract interpreted: interp.h): top-1
 *       identical (until a near tie), top-K logprobs within TOL. One case
 *       uses a long prompt on a copy whose query/key norm weights (the
 *       contract's norms of attention's q and k) are scaled up so scores
 *       exceed 88 (e^88 overflows f32): a softmax without max subtraction
 *       gives NaN there.
 *   (d) the path: the engine loads a copy A; no weight file outside A is
 *       mapped or open in the process; A renamed to B: loading A fails and
 *       loading B gives the same logits.
 * (a) loads no plugin: its child judges. (b)-(d) load the candidate: their
 * children return logits, tokens and what they observed (raw.c); the parent
 * made the copies they run on before the fork and decides; (c)'s float64
 * reference runs afterwards in a child of its own that loads no plugin, on
 * the tokens the candidate chose, and the copies must be unchanged. */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runtime/session.h"
#include "core/runtime/rng.h"
#include "core/runtime/model_input.h"
#include "core/runtime/safetensors.h"
#include "core/util/file.h"
#include "core/verify/bind.h"
#include "core/verify/interp.h"
#include "core/verify/verify.h"

#define TOL 1e-3
#define NEAR_TIE (2 * TOL)
#define TOPK 10

typedef struct s5_job {
  const vf_stage_opts *o;
  json_t *contract;
  const char *workdir;
  int64_t V; /* vocabulary from config.json: the size of logits records */
  int zc;    /* the final norm multiplies by 1 + w (the contract's w_offset says so) */
  /* the tensors stage 5 edits, from the model contract's data flow
   * (s5_keys): the final norm; per layer ({i}), the norms of attention's
   * queries and keys and the projections that write them; zc_qk: those
   * norms multiply by 1 + w; layout: the checkpoint layout config.json
   * names (renamed weights), or NULL; layers: the layer count */
  char final_norm[256], q_norm[256], k_norm[256], q_proj[256], k_proj[256];
  char final_norm_b[256]; /* the final norm's bias (a LayerNorm's), "" without one: (b) scales it with the weight */
  char head_b[256];       /* a bias added to the logits after the head (an lm_head.bias), "" without one: (b)
                             scales it too */
  int zc_qk;
  const json_t *layout;
  int64_t layers;
  int64_t declared; /* the context the model declares (run_unseen): every (c) case fits in it */
} s5_job;

static json_t *param(const s5_job *j, const char *key) {
  return json_object_get(json_object_get(j->contract, "parameters"), key);
}

/* ================= (a) imports ================= */

static const char *const k_needed_default[] = {
    "libc.so",     "libm.so",  "libdl.so",   "libpthread.so", "librt.so",
    "libgcc_s.so", "ld-linux", "libasan.so", "libubsan.so",   NULL};
static const char *const k_foreign_default[] = {
    "libllama",    "libggml",       "ggml_",       "llama_model", "libtorch",
    "onnxruntime", "libtensorflow", "tensorflow_", "libcublas",   "libcudnn",
    "ctranslate2", "openvino",      "libvllm",     "libmlc",      NULL};
static const char *const k_dl_syms[] = {"dlopen", "dlmopen", "dlsym", "dlvsym", NULL};

static int allowed(const char *name, json_t *list, const char *const *dflt) {
  size_t i;
  json_t *v;
  if (json_is_array(list)) {
    json_array_foreach(list, i, v) if (json_string_value(v) &&
                                       !strncmp(name, json_string_value(v),
                                                strlen(json_string_value(v)))) return 1;
    return 0;
  }
  for (; *dflt; dflt++)
    if (!strncmp(name, *dflt, strlen(*dflt))) return 1;
  return 0;
}

/* The NUL-terminated string at off in a string table of size n, or NULL. */
static const char *str_at(const char *tab, uint64_t n, uint64_t off) {
  return off < n && memchr(tab + off, 0, n - off) ? tab + off : NULL;
}

/* Reads the ELF's DT_NEEDED list and undefined dynamic symbols. 0, or -1
 * with a message for a file that is not a sane 64-bit ELF. */
static int elf_imports(const unsigned char *b, size_t n, json_t *needed, json_t *undef, char *err,
                       size_t err_len) {
  if (n < sizeof(Elf64_Ehdr) || memcmp(b, ELFMAG, SELFMAG) || b[EI_CLASS] != ELFCLASS64 ||
      b[EI_DATA] != ELFDATA2LSB) {
    snprintf(err, err_len, "not a 64-bit little-endian ELF file");
    return -1;
  }
  Elf64_Ehdr eh;
  memcpy(&eh, b, sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > n ||
      (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > n - eh.e_shoff) {
    snprintf(err, err_len, "ELF section headers out of the file");
    return -1;
  }
  const Elf64_Shdr *sh = (const void *)(b + eh.e_shoff);
  for (int i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr s;
    memcpy(&s, &sh[i], sizeof s);
    if (s.sh_type != SHT_DYNAMIC && s.sh_type != SHT_DYNSYM) continue;
    if (s.sh_link >= eh.e_shnum || s.sh_offset > n || s.sh_size > n - s.sh_offset) {
      snprintf(err, err_len, "ELF section %d out of the file", i);
      return -1;
    }
    Elf64_Shdr str;
    memcpy(&str, &sh[s.sh_link], sizeof str);
    if (str.sh_offset > n || str.sh_size > n - str.sh_offset || !str.sh_size) {
      snprintf(err, err_len, "ELF string table of section %d out of the file", i);
      return -1;
    }
    const char *strtab = (const char *)b + str.sh_offset;
#define STR(off) str_at(strtab, str.sh_size, (off))
    if (s.sh_type == SHT_DYNAMIC) {
      for (size_t k = 0; k + sizeof(Elf64_Dyn) <= s.sh_size; k += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        memcpy(&d, b + s.sh_offset + k, sizeof d);
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_NEEDED && STR(d.d_un.d_val))
          json_array_append_new(needed, json_string(STR(d.d_un.d_val)));
      }
    } else {
      for (size_t k = sizeof(Elf64_Sym); k + sizeof(Elf64_Sym) <= s.sh_size;
           k += sizeof(Elf64_Sym)) {
        Elf64_Sym y;
        memcpy(&y, b + s.sh_offset + k, sizeof y);
        if (y.st_shndx == SHN_UNDEF && STR(y.st_name) && *STR(y.st_name))
          json_array_append_new(undef, json_string(STR(y.st_name)));
      }
    }
#undef STR
  }
  return 0;
}

static int imports_child(void *arg, int fd) {
  s5_job *j = arg;
  const char *path = j->o->model_plugin_path;
  vf_case_start(fd, "imports", 0, path);
  char rerr[1200];
  size_t flen = 0;
  unsigned char *b = (unsigned char *)mi_file_read_all(path, 0, 1u << 30, "plugin", &flen, rerr, sizeof rerr);
  long n = (long)flen;
  if (!b) {
    vf_case_end(fd, "imports", 0, 0, 0, NULL, "%s", rerr);
    return 1;
  }
  json_t *needed = json_array(), *undef = json_array();
  char err[512];
  if (elf_imports(b, (size_t)n, needed, undef, err, sizeof err) != 0) {
    vf_case_end(fd, "imports", 0, 0, 0,
                json_pack("{s:o, s:o}", "needed", needed, "undefined", undef), "%s: %s", path, err);
    free(b);
    return 1;
  }
  char msg[1024] = "";
  size_t i;
  json_t *v;
  json_t *foreign = param(j, "foreign_names");
  json_array_foreach(needed, i, v) {
    const char *nm = json_string_value(v);
    if (!msg[0] && !allowed(nm, param(j, "allowed_needed"), k_needed_default))
      snprintf(msg, sizeof msg, "%s links %s (DT_NEEDED), which is not in the allowlist%s", path,
               nm, allowed(nm, foreign, k_foreign_default) ? ": a foreign inference library" : "");
  }
  json_array_foreach(undef, i, v) {
    const char *nm = json_string_value(v);
    char base[256];
    snprintf(base, sizeof base, "%s", nm);
    char *at = strchr(base, '@');
    if (at) *at = 0;
    for (const char *const *d = k_dl_syms; *d && !msg[0]; d++)
      if (!strcmp(base, *d))
        snprintf(
            msg, sizeof msg,
            "%s imports %s: a model plugin may not load libraries of its own (kernels come from "
            "the platform)",
            path, base);
    if (!msg[0] && allowed(base, foreign, k_foreign_default))
      snprintf(msg, sizeof msg, "%s imports the symbol %s of a foreign inference framework", path,
               base);
  }
  /* Names anywhere in the file: a dlopen by another route (a syscall, a
   * helper library) still has to spell the library's name. */
  const char *const *fl = k_foreign_default;
  const char *fbuf[64];
  if (json_is_array(foreign)) {
    size_t k = 0;
    json_array_foreach(foreign, i, v) if (k < 63 && json_string_value(v)) fbuf[k++] =
        json_string_value(v);
    fbuf[k] = NULL;
    fl = fbuf;
  }
  for (; *fl && !msg[0]; fl++) {
    size_t ln = strlen(*fl);
    for (long p = 0; p + (long)ln <= n && !msg[0]; p++)
      if (!strncasecmp((const char *)b + p, *fl, ln))
        snprintf(msg, sizeof msg, "%s names \"%.*s\" (at byte %ld): a foreign inference framework",
                 path, (int)ln, (const char *)b + p, p);
  }
  free(b);
  char ok[600] = "DT_NEEDED";
  json_array_foreach(needed, i, v) {
    size_t l = strlen(ok);
    snprintf(ok + l, sizeof ok - l, "%s%s", i ? ", " : " ", json_string_value(v));
  }
  snprintf(ok + strlen(ok), sizeof ok - strlen(ok),
           " within the allowlist; no dlopen, no foreign name");
  vf_case_end(
      fd, "imports", 0, !msg[0], 0,
      json_pack("{s:o, s:i}", "needed", needed, "undefined_symbols", (int)json_array_size(undef)),
      "%s", msg[0] ? msg : ok);
  json_decref(undef);
  return msg[0] != 0;
}

/* ================= shared ================= */

static double max_abs(const float *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

static int open_engine(const s5_job *j, const char *dir, mi_registry **reg, mi_session **e, char *err,
                       size_t err_len) {
  err[0] = 0;
  *e = NULL;
  if (!*reg) *reg = vf_open_registry(j->o, j->workdir, err, err_len);
  if (*reg) *e = vf_open_engine(*reg, dir, err, err_len);
  return *e ? 0 : -1;
}

static void rec_fail(int fd, int slot, const char *fmt, const char *a, const char *b) {
  char m[9000]; /* cut to VF_REC_MAX_MSG by vf_rec_write */
  snprintf(m, sizeof m, fmt, a, b);
  vf_rec_write(fd, VF_REC_FAIL, slot, 0, m, NULL, 0);
}

/* The files of a folder, hashed (names and bytes), to see that a unit's
 * child left the copies the parent made as they were. */
static uint32_t dir_hash(const char *dir) {
  uint32_t h = 0;
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    int ok = 0;
    uint32_t f = vf_fnv1a32_file(p, &ok);
    h ^= f * 0x9E3779B1u ^ (uint32_t)mi_fnv1a64(de->d_name);
  }
  if (d) closedir(d);
  return h;
}

static int64_t config_vocab(const char *dir, json_t **cfg_out, char *err, size_t n) {
  char path[4200];
  mi_model_input_config_name(dir, path, sizeof path);
  json_t *cfg = mi_model_input_config(dir, 0, err, n);
  const json_t *v = mi_ckb_config_value(NULL, cfg, "vocab_size", 10); /* a wrapper's too */
  int64_t V = json_is_integer(v) ? json_integer_value(v) : 0;
  if (cfg && (V < 1 || V > (1 << 24))) {
    snprintf(err, n, "%.1000s: no usable vocab_size", path);
    V = 0;
  }
  if (cfg_out) *cfg_out = cfg;
  else json_decref(cfg);
  return V;
}

static json_t *unit_error(const char *id, const char *msg) {
  return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "authenticity", "id", id, "verdict", "FAIL", "status",
                   "ERROR", "message", msg);
}

/* ================= (b) outputs follow the weights ================= */

/* Slot 0: logits [V] on the model; slot 1: on the copy the parent made with
 * model.norm.weight x2. */
static int follow_child(void *arg, int fd) {
  s5_job *j = arg;
  char err[2048] = "", copy[4200];
  mi_registry *reg;
  mi_session *e = vf_child_engine(j->o, j->workdir, j->o->model_dir, fd, &reg);
  if (!e) return 1;
  const int64_t V = e->info.vocab_size;
  int32_t ids[12], tok;
  vf_random_prompt(j->o->seed ^ 0x5b, ids, 12, 0, V);
  float *l0 = malloc((size_t)V * sizeof(float)), *l1 = malloc((size_t)V * sizeof(float)); /* [V] each */
  vf_loaded ld = {0};
  snprintf(copy, sizeof copy, "%s/b", j->workdir);
  if (!l0 || !l1 || vf_greedy(e->M, e->model, V, ids, 12, 1, l0, &tok, err, sizeof err) != 0)
    rec_fail(fd, 0, "forward pass failed: %s%s", err, "");
  else {
    vf_rec_write(fd, VF_REC_OUT, 0, 0, NULL, l0, (uint64_t)V * sizeof(float));
    if (vf_load_direct(e, copy, &ld, err, sizeof err) != 0 ||
        vf_greedy(ld.M, ld.m, V, ids, 12, 1, l1, &tok, err, sizeof err) != 0)
      rec_fail(fd, 1, "cannot run the scaled copy: %s%s", err, "");
    else vf_rec_write(fd, VF_REC_OUT, 1, 0, NULL, l1, (uint64_t)V * sizeof(float));
  }
  vf_unload_direct(&ld);
  free(l0);
  free(l1);
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

static json_t *follow_judge(void *arg, const vf_child_result *r) {
  s5_job *j = arg;
  json_t *ev = json_array();
  vf_rec sl[2];
  const char *cn = j->zc ? "final_norm_zeroed" : "final_norm_x2";
  if (vf_raw_read(r, "stage 5 (b) outputs follow the weights", 2, sl, ev) < 0) return ev;
  if (!sl[0].type || (sl[0].type == VF_REC_OUT && !sl[1].type)) {
    vf_ev_start(ev, cn, 0, j->o->model_dir);
    return ev;
  }
  const size_t lb = (size_t)j->V * sizeof(float);
  for (int k = 0; k < 2; k++)
    if (sl[k].type == VF_REC_FAIL || sl[k].payload_len != lb) {
      vf_ev_end(ev, cn, 0, 0, 0, NULL, "%s", sl[k].type == VF_REC_FAIL ? sl[k].msg : "a logits record of the wrong size");
      return ev;
    }
  float *l0 = malloc(lb), *l1 = malloc(lb);
  if (!l0 || !l1) {
    vf_ev_error(ev, "stage 5: out of memory in the verifier");
  } else {
    memcpy(l0, sl[0].payload, lb);
    memcpy(l1, sl[1].payload, lb);
    if (j->zc) { /* 1 + w = 0: the final norm's output, hence every logit, is exactly 0 */
      double m0 = max_abs(l0, j->V), m1 = max_abs(l1, j->V);
      if (!(m0 > 0) || m1 != 0)
        vf_ev_end(ev, cn, 0, 0, m1, json_pack("{s:f, s:f}", "max_abs_logit", m0, "max_abs_logit_copy", m1),
                  "outputs do not follow the weights: %s = -1 in a copy (a zero-centred norm: 1 + w = "
                  "0) must make every logit 0, but the largest is %.4g (%.4g on the model)", j->final_norm, m1, m0);
      else
        vf_ev_end(ev, cn, 0, 1, 0, json_pack("{s:f}", "max_abs_logit", m0),
                  "every logit 0 with 1 + w = 0 in the final norm (%.4g on the model)", m0);
      free(l0);
      free(l1);
      return ev;
    }
    double scale = 2 * max_abs(l0, j->V), dev = 0, dot = 0, nn = 0;
    for (int64_t i = 0; i < j->V; i++) {
      double d = fabs((double)l1[i] - 2.0 * l0[i]);
      if (!(d <= dev)) dev = d;
      dot += (double)l1[i] * l0[i];
      nn += (double)l0[i] * l0[i];
    }
    double rel = scale > 0 ? dev / scale : INFINITY, factor = nn > 0 ? dot / nn : NAN;
    if (!(rel <= 1e-5))
      vf_ev_end(ev, cn, 0, 0, rel, json_pack("{s:f}", "observed_factor", isfinite(factor) ? factor : 0),
                "outputs do not follow the weights: %s x2%s in a copy must double every logit "
                "(float64 relation logits' = 2*logits), but the logits changed by a factor %.4g (max deviation "
                "%.3g relative)", j->final_norm, j->final_norm_b[0] || j->head_b[0] ? " (and its biases)" : "", factor, rel);
    else
      vf_ev_end(ev, cn, 0, 1, rel, json_pack("{s:f}", "observed_factor", factor),
                "logits doubled (max deviation %.2g relative)", rel);
  }
  free(l0);
  free(l1);
  return ev;
}

/* ================= (c) unseen prompts vs float64 ================= */

/* log-softmax of a row in float64 */
static void log_softmax_f(const float *x, int64_t n, double *out) {
  double mx = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; i++)
    mx = fmax(mx, (double)x[i]);
  for (int64_t i = 0; i < n; i++)
    s += exp((double)x[i] - mx);
  double l = mx + log(s);
  for (int64_t i = 0; i < n; i++)
    out[i] = (double)x[i] - l;
}

static void log_softmax_d(const double *x, int64_t n, double *out) {
  double mx = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; i++)
    mx = fmax(mx, x[i]);
  for (int64_t i = 0; i < n; i++)
    s += exp(x[i] - mx);
  double l = mx + log(s);
  for (int64_t i = 0; i < n; i++)
    out[i] = x[i] - l;
}

/* top-k indices of x (k small) */
static void topk(const double *x, int64_t n, int k, int64_t *idx) {
  for (int i = 0; i < k; i++)
    idx[i] = -1;
  for (int64_t v = 0; v < n; v++) {
    int p = k;
    while (p > 0 && (idx[p - 1] < 0 || x[v] > x[idx[p - 1]]))
      p--;
    if (p >= k) continue;
    memmove(idx + p + 1, idx + p, (size_t)(k - 1 - p) * sizeof *idx);
    idx[p] = v;
  }
}

typedef struct uc { /* one case of (c), fixed by the parent */
  char cname[96], dir[4200];
  int32_t *ids;
  int n, steps;
  double tol, need_score;
  char prep_err[4600]; /* the parent could not make its copy */
} uc;

typedef struct uc_job {
  s5_job *j;
  uc *c;
  int nc;
  vf_child_result cand; /* the candidate's records, for the reference child */
  vf_rec *sl;
} uc_job;

/* The candidate: per case, logits [steps, V] then tokens [steps]. */
static int unseen_child(void *arg, int fd) {
  uc_job *u = arg;
  s5_job *j = u->j;
  char err[2048] = "";
  mi_registry *reg;
  mi_session *e = vf_child_engine(j->o, j->workdir, j->o->model_dir, fd, &reg);
  if (!e) return 1;
  const int64_t V = e->info.vocab_size;
  for (int k = 0; k < u->nc; k++) {
    uc *c = &u->c[k];
    if (c->prep_err[0]) {
      vf_rec_write(fd, VF_REC_OUT, k, 0, NULL, NULL, 0);
      continue;
    }
    vf_loaded ld = {0}, *pl = &ld;
    vf_loaded me = {(json_t *)e->config, e->weights, e->model, e->M, V};
    if (!strcmp(c->dir, j->o->model_dir)) pl = &me;
    else if (vf_load_direct(e, c->dir, &ld, err, sizeof err) != 0) {
      rec_fail(fd, k, "cannot run the copy: %s%s", err, "");
      continue;
    }
    size_t lb = (size_t)c->steps * (size_t)V * sizeof(float);
    char *pay = malloc(lb + (size_t)c->steps * sizeof(int32_t));
    if (!pay || vf_greedy(pl->M, pl->m, pl->V, c->ids, c->n, c->steps, (float *)pay, (int32_t *)(pay + lb), err,
                          sizeof err) != 0 || pl->V != V)
      rec_fail(fd, k, "the plugin's forward failed: %s%s", pay ? err : "out of memory", "");
    else vf_rec_write(fd, VF_REC_OUT, k, 0, NULL, pay, lb + (size_t)c->steps * sizeof(int32_t));
    free(pay);
    vf_unload_direct(&ld);
  }
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

/* The reference: no plugin loaded here. Per case, on the prompt followed by
 * the tokens the candidate chose: double max_score, then logits [steps, V]
 * in float64. */
static int reference_child(void *arg, int fd) {
  uc_job *u = arg;
  for (int k = 0; k < u->nc; k++) {
    uc *c = &u->c[k];
    const vf_rec *cr = &u->sl[k];
    size_t lb = (size_t)c->steps * (size_t)u->j->V * sizeof(float);
    if (c->prep_err[0] || cr->type != VF_REC_OUT || cr->payload_len != lb + (size_t)c->steps * sizeof(int32_t)) {
      vf_rec_write(fd, VF_REC_OUT, k, 0, NULL, NULL, 0);
      continue;
    }
    char err[2048] = "";
    json_t *cfg = NULL;
    int64_t V = config_vocab(c->dir, &cfg, err, sizeof err);
    /* a GGUF's block types as stored: the reference takes each value exactly
     * as quant.h defines it (vf_weight_f64), with no f32 copy of the model */
    mi_weights *w = cfg ? mi_model_input_weights(c->dir, mi_model_input_all_blocks(), err, sizeof err) : NULL;
    const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
    const mi_ckb_entry *me = u->j->o->ckb ? vf_bind_find_model(u->j->o->ckb, cfg, NULL) : NULL;
    int32_t *seq = malloc((size_t)(c->n + c->steps) * sizeof(int32_t));
    double *ref = NULL, ms = 0;
    if (!w || !seq) {
      rec_fail(fd, k, "float64 reference: %s%s", err[0] ? err : "out of memory", "");
    } else if (!me) {
      rec_fail(fd, k, "the CKB has no model contract for architecture '%s' (the float64 reference interprets it)%s",
               arch ? arch : "?", "");
    } else {
      memcpy(seq, c->ids, (size_t)c->n * sizeof(int32_t));
      memcpy(seq + c->n, cr->payload + lb, (size_t)c->steps * sizeof(int32_t));
      /* the model contract interpreted in float64 (interp.h) */
      vf_interp *in = vf_interp_open(u->j->o->ckb, me, cfg, w, err, sizeof err);
      ref = in ? vf_interp_forward(in, seq, c->n + c->steps - 1, c->steps, &ms, err, sizeof err) : NULL;
      vf_interp_close(in);
      if (!ref || V != u->j->V)
        rec_fail(fd, k, "float64 reference: %s%s", err, "");
      else {
        size_t rb = (size_t)c->steps * (size_t)V * sizeof(double);
        char *pay = malloc(sizeof(double) + rb);
        if (pay) {
          memcpy(pay, &ms, sizeof ms);
          memcpy(pay + sizeof ms, ref, rb);
          vf_rec_write(fd, VF_REC_OUT, k, 0, NULL, pay, sizeof(double) + rb);
        } else rec_fail(fd, k, "float64 reference: out of memory%s%s", "", "");
        free(pay);
      }
    }
    free(ref);
    free(seq);
    if (w) mi_weights_close(w);
    json_decref(cfg);
  }
  return 0;
}

/* One case: the candidate's logits against the reference's. */
static void unseen_judge_case(json_t *ev, int ci, const uc *c, const vf_rec *cr, const vf_rec *rr, int64_t V) {
  const int steps = c->steps, n = c->n;
  const char *cname = c->cname;
  char msg[3400] = "";
  double mx = 0, max_score = 0;
  int compared = 0, tie = -1;
  size_t lb = (size_t)steps * (size_t)V * sizeof(float);
  float *lg = malloc(lb + 1);
  int32_t *tok = malloc((size_t)steps * sizeof(int32_t));
  double *ref = malloc((size_t)steps * (size_t)V * sizeof(double) + 1), *lp = malloc((size_t)V * sizeof(double)),
         *rp = malloc((size_t)V * sizeof(double));
  if (c->prep_err[0]) snprintf(msg, sizeof msg, "%.3000s", c->prep_err);
  else if (cr->type == VF_REC_FAIL) snprintf(msg, sizeof msg, "%s: %s", cname, cr->msg);
  else if (cr->payload_len != lb + (size_t)steps * sizeof(int32_t))
    snprintf(msg, sizeof msg, "%s: the unit returned %zu bytes, %zu due", cname, cr->payload_len,
             lb + (size_t)steps * sizeof(int32_t));
  else if (!rr || rr->type != VF_REC_OUT || rr->payload_len != sizeof(double) * (1 + (size_t)steps * V))
    snprintf(msg, sizeof msg, "%s: %s", cname, rr && rr->type == VF_REC_FAIL ? rr->msg : "float64 reference: no result");
  else if (!lg || !tok || !ref || !lp || !rp) snprintf(msg, sizeof msg, "%s: out of memory in the verifier", cname);
  if (msg[0]) goto out;
  memcpy(lg, cr->payload, lb);
  memcpy(tok, cr->payload + lb, (size_t)steps * sizeof(int32_t));
  memcpy(&max_score, rr->payload, sizeof(double));
  memcpy(ref, rr->payload + sizeof(double), (size_t)steps * (size_t)V * sizeof(double));
  for (int s = 0; s < steps && !msg[0] && tie < 0; s++) {
    const float *row = lg + (size_t)s * V;
    if (!isfinite(max_abs(row, V))) {
      snprintf(msg, sizeof msg,
               "%s step %d: the plugin's logits are not finite (NaN/Inf) on a %d-token prompt: "
               "an overflow (e.g. softmax without max subtraction)", cname, s, n);
      break;
    }
    log_softmax_f(row, V, lp);
    log_softmax_d(ref + (size_t)s * V, V, rp);
    int64_t top[TOPK];
    topk(rp, V, TOPK, top);
    for (int i = 0; i < TOPK && !msg[0]; i++) {
      double d = fabs(lp[top[i]] - rp[top[i]]);
      if (!(d <= mx)) mx = d;
      if (!(d <= c->tol))
        snprintf(msg, sizeof msg, "%s step %d: token %lld logprob %.6f, float64 reference %.6f (|diff| %.2e > %.0e)",
                 cname, s, (long long)top[i], lp[top[i]], rp[top[i]], d, c->tol);
    }
    if (msg[0]) break;
    if (tok[s] != top[0]) {
      if (rp[top[0]] - rp[top[1]] <= 2 * c->tol) tie = s; /* NEAR_TIE at this case's tolerance */
      else
        snprintf(msg, sizeof msg, "%s step %d: greedy token %d, float64 reference %lld (gap %.2e: not a tie)", cname,
                 s, tok[s], (long long)top[0], rp[top[0]] - rp[top[1]]);
    }
    compared++;
  }
out:;
  json_t *extra = json_pack("{s:i, s:i, s:f, s:f}", "prompt_tokens", n, "steps_compared", compared,
                            "max_abs_logprob_diff", isfinite(mx) ? mx : 1e300, "max_attention_score", max_score);
  if (msg[0]) vf_ev_end(ev, cname, ci, 0, mx, extra, "%s", msg);
  else
    vf_ev_end(ev, cname, ci, 1, mx, extra,
              "%d-token prompt%s: %d steps match, max |logprob diff| %.1e, attention scores up to %.1f%s%s", n,
              c->need_score > 0 ? " (sharpened)" : "", compared, mx, max_score,
              tie >= 0 ? " (stopped at a near tie)" : "",
              max_score < c->need_score ? " -- scores stayed below the f32 exp overflow: not exercised" : "");
  free(lg);
  free(tok);
  free(ref);
  free(lp);
  free(rp);
}

/* A copy of the model folder with the tensors qk[2] ({i}: the layer) of
 * the first L layers that have them (a hybrid's linear-attention layers
 * have none) scaled; `zc`: they are zero-centred norm weights, so 1 + w is
 * what is scaled. */
static void scaled_copy(uc *c, const s5_job *j, const char *dst, const char *const qk[2], int64_t L, double scale,
                        int zc) {
  char err[2048] = "";
  snprintf(c->dir, sizeof c->dir, "%s", dst);
  int ok = qk[0][0] && qk[1][0], done = 0;
  if (!ok) snprintf(err, sizeof err, "the model contract does not say which tensors norm or project attention's q and k");
  ok = ok && vf_copy_model_dir(j->o->model_dir, dst, err, sizeof err) == 0;
  for (int64_t l = 0; ok && done < L && l < j->layers; l++) {
    char tn[2][300];
    vf_tensor_loc loc;
    for (int h = 0; h < 2; h++) {
      char key[300];
      const char *p = strstr(qk[h], "{i}");
      if (p) snprintf(key, sizeof key, "%.*s%lld%s", (int)(p - qk[h]), qk[h], (long long)l, p + 3);
      else snprintf(key, sizeof key, "%s", qk[h]);
      mi_ckb_layout_rename(j->layout, key, tn[h], sizeof tn[h]);
    }
    if (vf_tensor_locate(dst, tn[0], &loc, err, sizeof err) != 0) continue; /* a layer without them */
    for (int h = 0; h < 2 && ok; h++)
      ok = vf_tensor_locate(dst, tn[h], &loc, err, sizeof err) == 0 &&
           (zc ? vf_tensor_affine(&loc, scale, scale - 1, err, sizeof err)
               : vf_tensor_edit(&loc, scale, 0, 0, NULL, err, sizeof err)) == 0;
    done++;
  }
  if (ok && !done) snprintf(err, sizeof err, "no layer has %s", qk[0]);
  if (!ok || !done) snprintf(c->prep_err, sizeof c->prep_err, "%s: cannot make the copy: %s", c->cname, err);
}

/* The context config.json declares (max_position_embeddings, a wrapper's
 * too, as vocab_size above), else 2048. */
static int64_t declared_context(const json_t *cfg) {
  const json_t *mp = mi_ckb_config_value(NULL, cfg, "max_position_embeddings", 23);
  return json_is_integer(mp) && json_integer_value(mp) > 0 ? json_integer_value(mp) : 2048;
}

/* A prompt of n tokens cut so that it and its steps fit the declared
 * context: the engine refuses a longer one, rightly (a checkpoint scaled
 * to a short context failed here on the 300-token case). At least 1. */
static int fit_context(const s5_job *j, int n, int steps) {
  const int64_t room = j->declared - steps;
  return room < 1 ? 1 : n > room ? (int)room : n;
}

/* Plain prompts into c (room for 8): lengths and steps from the contract, else the defaults; how
 * many. */
static int plain_cases(s5_job *j, uc *c) {
  const vf_stage_opts *o = j->o;
  int lens[8] = {5, 23, 61}, steps[8] = {8, 6, 4}, np = 3;
  json_t *cases = param(j, "unseen_prompts");
  if (json_is_array(cases) && json_array_size(cases)) {
    np = 0;
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) if (np < 8) {
      lens[np] = (int)json_integer_value(json_object_get(cs, "tokens"));
      steps[np] = (int)json_integer_value(json_object_get(cs, "steps"));
      if (lens[np] > 0 && lens[np] <= 4096 && steps[np] > 0 && steps[np] <= 64) np++;
    }
  }
  for (int k = 0; k < np; k++) {
    lens[k] = fit_context(j, lens[k], steps[k]);
    snprintf(c[k].cname, sizeof c[k].cname, "unseen prompt %d (%d tokens)", k, lens[k]);
    snprintf(c[k].dir, sizeof c[k].dir, "%s", o->model_dir);
    c[k].n = lens[k], c[k].steps = steps[k], c[k].tol = vf_logprob_tol_twin(o, TOL);
    c[k].ids = malloc((size_t)lens[k] * sizeof(int32_t));
    if (c[k].ids) vf_random_prompt(o->seed * 7919 + (uint64_t)k, c[k].ids, lens[k], 0, j->V);
  }
  return np;
}

/* Long prompt, sharpened attention: q_norm and k_norm x s in a copy, so
 * scores (x s^2) reach well past 88 (e^88 overflows f32). Measured on the
 * tiny shape with s = 8: the real plugin stays within 3.1e-5 of float64
 * there, so the same TOL applies (the contract may set another); a
 * NaN/Inf fails whatever it is. Only the first `layers` layers are
 * sharpened: one suffices to overflow a max-less softmax, and the rounding
 * of near-one-hot attention in f32 then does not compound. */
static void sharp_case(s5_job *j, uc *x) {
  const vf_stage_opts *o = j->o;
  json_t *sh = param(j, "sharp_attention");
  int sl = json_is_integer(json_object_get(sh, "tokens")) ? (int)json_integer_value(json_object_get(sh, "tokens")) : 300;
  double sf = json_is_number(json_object_get(sh, "norm_scale")) ? json_number_value(json_object_get(sh, "norm_scale")) : 8;
  int64_t L = j->layers;
  if (json_is_integer(json_object_get(sh, "layers")) && json_integer_value(json_object_get(sh, "layers")) < L)
    L = json_integer_value(json_object_get(sh, "layers"));
  else if (!json_is_integer(json_object_get(sh, "layers")))
    L = 1;
  /* q/k norms where the contract has them, else the q/k projections: either
   * way q and k grow s-fold and the scores s^2-fold */
  const int by_norm = j->q_norm[0] && j->k_norm[0];
  x->n = fit_context(j, sl > 0 && sl <= 65536 ? sl : 300, 2), x->steps = 2, x->need_score = 88.73 /* ln(FLT_MAX) */;
  snprintf(x->cname, sizeof x->cname, "long prompt, sharp attention (%d tokens, q/k %s x%g)", x->n, by_norm ? "norms" : "projections", sf);
  /* A half-precision cache: the twin rounds the same keys, but a key whose
   * f32 and float64 values round to different neighbours moves a score by
   * s^2 times as much here (a sliding-window probe, f16: 6.4e-3, the unsharpened
   * cases 4e-5 at f32), so this case takes stage 4's half-cache width; what
   * it is for, a softmax that overflows, is a NaN/Inf or O(1) whatever. */
  x->tol = vf_logprob_tol(o, json_is_number(json_object_get(sh, "tolerance")) ? json_number_value(json_object_get(sh, "tolerance")) : TOL);
  x->ids = malloc((size_t)x->n * sizeof(int32_t));
  if (x->ids) vf_random_prompt(o->seed * 104729 + 17, x->ids, x->n, 0, j->V);
  char dst[4200];
  snprintf(dst, sizeof dst, "%s/c", j->workdir);
  const char *norms[2] = {j->q_norm, j->k_norm}, *projs[2] = {j->q_proj, j->k_proj};
  scaled_copy(x, j, dst, by_norm ? norms : projs, L, sf, by_norm && j->zc_qk);
}

/* Small magnitudes: q_proj and k_proj x 2^-8 in a copy (exact in every
 * float format), so mean(q^2) inside the q/k RMSNorms falls to the order
 * of eps: an eps other than the config's (a hard-coded 1e-5, the wrong
 * config field) moves the logits far past TOL here, while on unit-scale
 * rows it hides under it. */
static void small_case(s5_job *j, uc *x) {
  const vf_stage_opts *o = j->o;
  json_t *sm = param(j, "small_magnitude");
  double ss = json_is_number(json_object_get(sm, "scale")) ? json_number_value(json_object_get(sm, "scale")) : 1.0 / 256;
  int sml = json_is_integer(json_object_get(sm, "tokens")) ? (int)json_integer_value(json_object_get(sm, "tokens")) : 23;
  x->n = fit_context(j, sml > 0 && sml <= 65536 ? sml : 23, 4), x->steps = 4, x->tol = vf_logprob_tol_twin(o, TOL);
  snprintf(x->cname, sizeof x->cname, "small magnitudes (%d tokens, q/k projections x%g)", x->n, ss);
  x->ids = malloc((size_t)x->n * sizeof(int32_t));
  if (x->ids) vf_random_prompt(o->seed * 15485863 + 29, x->ids, x->n, 0, j->V);
  char dst[4200];
  snprintf(dst, sizeof dst, "%s/s", j->workdir);
  const char *projs[2] = {j->q_proj, j->k_proj};
  scaled_copy(x, j, dst, projs, j->layers, ss, 0);
}

/* Deep positions: a prompt reaching far into the declared context
 * (max_position_embeddings; at most the contract's long_context.max_tokens,
 * default 2048, within the time a float64 forward takes), its length drawn
 * from the seed in [cap/2, cap]: a KV cache kept as a ring of a few
 * hundred rows, a position table cut short, a rotary angle computed in
 * low precision show only past where the other prompts end. Into *x when
 * the context allows one (then 1), else 0. */
static int deep_case(s5_job *j, uc *x) {
  const vf_stage_opts *o = j->o;
  json_t *lc = param(j, "long_context");
  const int64_t declared = j->declared;
  int64_t lcap = json_is_integer(json_object_get(lc, "max_tokens")) ? json_integer_value(json_object_get(lc, "max_tokens")) : 2048;
  if (lcap > declared) lcap = declared;
  if (lcap > 65536) lcap = 65536;
  if (lcap < 16) return 0;
  int ls = 3;
  uint64_t r = o->seed * 2862933555777941757ull + 3037000493ull;
  int ln = (int)(lcap / 2 + (int64_t)((r >> 33) % (uint64_t)(lcap / 2 - ls + 1)));
  snprintf(x->cname, sizeof x->cname, "deep positions (%d tokens of the declared context %lld, then %d steps)", ln,
           (long long)declared, ls);
  snprintf(x->dir, sizeof x->dir, "%s", o->model_dir);
  x->n = ln, x->steps = ls, x->tol = vf_logprob_tol_twin(o, TOL);
  x->ids = malloc((size_t)x->n * sizeof(int32_t));
  if (x->ids) vf_random_prompt(o->seed * 32452843 + 41, x->ids, x->n, 0, j->V);
  return 1;
}

/* The verdicts of (c) into ev: the engine load, then each case the candidate reached, against the
 * float64 reference's records ref (NULL: none). */
static void unseen_judge(s5_job *j, json_t *ev, const uc_job *u, const vf_rec *ref) {
  const uc *c = u->c;
  if (!u->sl[0].type) vf_ev_start(ev, "engine_load", 0, j->o->model_dir);
  else if (u->sl[0].type == VF_REC_FAIL && !strncmp(u->sl[0].msg, "the engine cannot", 17))
    vf_ev_end(ev, "engine_load", 0, 0, 0, NULL, "%s", u->sl[0].msg);
  else {
    vf_ev_end(ev, "engine_load", 0, 1, 0, NULL, NULL);
    for (int k = 0; k < u->nc; k++) {
      if (!u->sl[k].type) {
        vf_ev_start(ev, c[k].cname, k + 1, c[k].cname);
        break;
      }
      unseen_judge_case(ev, k + 1, &c[k], &u->sl[k], ref ? &ref[k] : NULL, j->V);
    }
  }
}

/* (c) run: the candidate on the cases c (in a child), a check that it left the copies as made (h0:
 * their hashes), the float64 reference on them (in another child), the verdicts; the unit. */
static json_t *unseen_run(s5_job *j, const char *id, const char *member, uc *c, int nc, const uint32_t *h0) {
  const vf_stage_opts *o = j->o;
  uc_job u = {j, c, nc, {0}, NULL};
  size_t cap = VF_REC_SIZE(0) * 8;
  for (int k = 0; k < nc; k++)
    cap += VF_REC_SIZE((size_t)c[k].steps * ((size_t)j->V * sizeof(double) + 4) + 8);
  vf_limits lim = o->lim;
  double timeout = o->unit_timeout_s > 0 ? o->unit_timeout_s : 300;
  if (o->unit_timeout_s > 0 || timeout > lim.timeout_s) lim.timeout_s = timeout;
  if (timeout * 2 > lim.cpu_s) lim.cpu_s = timeout * 2;
  lim.result_cap = cap;
  json_t *unit;
  vf_child_result rr;
  memset(&rr, 0, sizeof rr);
  u.sl = calloc((size_t)nc, sizeof *u.sl);
  if (!u.sl || vf_run_child(&lim, unseen_child, &u, &u.cand) != 0) {
    free(u.sl);
    return unit_error(id, "cannot fork a child");
  }
  json_t *ev = json_array();
  int got = vf_raw_read(&u.cand, "stage 5 (c) unseen prompts", nc, u.sl, ev);
  /* The copies must be as the parent made them: the reference reads them. */
  for (int k = 0; got >= 0 && k < nc; k++)
    if (h0[k] && dir_hash(c[k].dir) != h0[k] && !c[k].prep_err[0]) {
      char m[4600];
      snprintf(m, sizeof m, "the unit changed the files of the copy %s", c[k].dir);
      memcpy(c[k].prep_err, m, sizeof m);
    }
  vf_rec *ref = calloc((size_t)nc, sizeof *ref);
  int have_ref = 0;
  if (got > 0 && ref) {
    vf_limits rl = lim;
    rl.result_cap = cap;
    if (vf_run_child(&rl, reference_child, &u, &rr) == 0 &&
        vf_raw_read(&rr, "stage 5 (c) float64 reference", nc, ref, ev) >= 0)
      have_ref = 1;
    if (rr.timed_out || rr.signaled)
      vf_ev_error(ev, "stage 5 (c): the float64 reference %s", rr.timed_out ? "timed out" : "crashed");
  }
  if (got >= 0) unseen_judge(j, ev, &u, have_ref ? ref : NULL);
  free(ref);
  json_decref(u.cand.events);
  u.cand.events = ev;
  unit = vf_unit_report("authenticity", id, "-", member, &u.cand, lim.timeout_s, lim.cpu_s);
  vf_child_result_free(&u.cand);
  if (rr.output) vf_child_result_free(&rr);
  free(u.sl);
  return unit;
}

static json_t *run_unseen(s5_job *j, const char *id, const char *member) {
  const vf_stage_opts *o = j->o;
  char err[4400];
  json_t *cfg = NULL;
  if (!config_vocab(o->model_dir, &cfg, err, sizeof err)) {
    json_decref(cfg);
    return unit_error(id, err);
  }
  uc c[12];
  memset(c, 0, sizeof c);
  j->declared = declared_context(cfg);
  int nc = plain_cases(j, c);
  sharp_case(j, &c[nc++]);
  small_case(j, &c[nc++]);
  nc += deep_case(j, &c[nc]);
  json_decref(cfg);
  uint32_t h0[12];
  for (int k = 0; k < nc; k++) {
    if (!c[k].ids) snprintf(c[k].prep_err, sizeof c[k].prep_err, "out of memory");
    h0[k] = strcmp(c[k].dir, o->model_dir) ? dir_hash(c[k].dir) : 0;
  }
  json_t *unit = unseen_run(j, id, member, c, nc, h0);
  for (int k = 0; k < nc; k++) free(c[k].ids);
  return unit;
}

/* ================= (d) the path ================= */

static int is_weight_file(const char *p) {
  static const char *const ext[] = {".safetensors", ".gguf", ".bin",  ".pt", ".pth",
                                    ".ckpt",        ".npz",  ".onnx", NULL};
  size_t n = strlen(p);
  for (const char *const *e = ext; *e; e++)
    if (n >= strlen(*e) && !strcmp(p + n - strlen(*e), *e)) return 1;
  return 0;
}

/* A weight file mapped or open in this process outside `dir` (a folder, or
 * the GGUF file that is the model), or "". */
static void foreign_weight_files(const char *dir, char *out, size_t n) {
  out[0] = 0;
  char rdir[4096];
  if (!realpath(dir, rdir)) snprintf(rdir, sizeof rdir, "%s", dir);
  size_t rl = strlen(rdir);
  FILE *f = fopen("/proc/self/maps", "r");
  char line[4600];
  while (f && fgets(line, sizeof line, f) && !out[0]) {
    char *p = strchr(line, '/');
    if (!p) continue;
    p[strcspn(p, "\n")] = 0;
    if (is_weight_file(p) && (strncmp(p, rdir, rl) || (p[rl] != '/' && p[rl])))
      snprintf(out, n, "%s (mapped)", p);
  }
  if (f) fclose(f);
  DIR *d = opendir("/proc/self/fd");
  struct dirent *de;
  while (d && (de = readdir(d)) && !out[0]) {
    char lp[300], tgt[4096];
    snprintf(lp, sizeof lp, "/proc/self/fd/%s", de->d_name);
    ssize_t k = readlink(lp, tgt, sizeof tgt - 1);
    if (k <= 0) continue;
    tgt[k] = 0;
    if (is_weight_file(tgt) && (strncmp(tgt, rdir, rl) || (tgt[rl] != '/' && tgt[rl])))
      snprintf(out, n, "%s (open)", tgt);
  }
  if (d) closedir(d);
}

/* Slot 0: logits [V] on copy A, then the weight file found in use outside A
 * (text, may be empty); slot 1: int32 "loading A after the rename worked",
 * logits [V] on B, the weight file in use outside B. */
static int path_child(void *arg, int fd) {
  s5_job *j = arg;
  char err[2048] = "", a[4200], bdir[4200], other[4800];
  mi_registry *reg = NULL;
  mi_session *e = NULL;
  snprintf(a, sizeof a, "%s/A", j->workdir);
  snprintf(bdir, sizeof bdir, "%s/B", j->workdir);
  if (open_engine(j, a, &reg, &e, err, sizeof err) != 0) {
    rec_fail(fd, 0, "the engine cannot load %s: %s", a, err);
    if (reg) mi_registry_free(reg);
    return 1;
  }
  const int64_t V = e->info.vocab_size;
  int32_t ids[8], tok;
  vf_random_prompt(j->o->seed ^ 0xd, ids, 8, 0, V);
  size_t lb = (size_t)V * sizeof(float);
  char *pay = malloc(4 + lb + sizeof other);
  if (!pay || vf_greedy(e->M, e->model, V, ids, 8, 1, (float *)pay, &tok, err, sizeof err) != 0) {
    rec_fail(fd, 0, "forward on copy A failed: %s%s", err, "");
    goto out;
  }
  foreign_weight_files(a, other, sizeof other);
  memcpy(pay + lb, other, strlen(other));
  vf_rec_write(fd, VF_REC_OUT, 0, 0, NULL, pay, lb + strlen(other));
  mi_session_close(e);
  e = NULL;
  if (rename(a, bdir) != 0) {
    rec_fail(fd, 1, "cannot rename %s to %s", a, bdir);
    goto out;
  }
  int32_t old_ok = 0;
  e = vf_open_engine(reg, a, err, sizeof err);
  if (e) {
    old_ok = 1;
    mi_session_close(e);
  }
  e = NULL;
  if (open_engine(j, bdir, &reg, &e, err, sizeof err) != 0) {
    rec_fail(fd, 1, "the engine cannot load %s: %s", bdir, err);
    goto out;
  }
  if (vf_greedy(e->M, e->model, V, ids, 8, 1, (float *)(pay + 4), &tok, err, sizeof err) != 0) {
    rec_fail(fd, 1, "forward on B failed: %s%s", err, "");
    goto out;
  }
  foreign_weight_files(bdir, other, sizeof other);
  memcpy(pay, &old_ok, 4);
  memcpy(pay + 4 + lb, other, strlen(other));
  vf_rec_write(fd, VF_REC_OUT, 1, 0, NULL, pay, 4 + lb + strlen(other));
out:
  free(pay);
  mi_session_close(e);
  mi_registry_free(reg);
  return 0;
}

static json_t *path_judge(void *arg, const vf_child_result *r) {
  s5_job *j = arg;
  json_t *ev = json_array();
  vf_rec sl[2];
  char a[4200], bdir[4200], other[1100];
  snprintf(a, sizeof a, "%s/A", j->workdir);
  snprintf(bdir, sizeof bdir, "%s/B", j->workdir);
  if (vf_raw_read(r, "stage 5 (d) weights from the given path", 2, sl, ev) < 0) return ev;
  const size_t lb = (size_t)j->V * sizeof(float);
  const char *c0 = "load copy A", *c1 = "rename A to B";
  if (!sl[0].type) return vf_ev_start(ev, c0, 0, a), ev;
  if (sl[0].type == VF_REC_FAIL || sl[0].payload_len < lb || sl[0].payload_len > lb + 1024)
    return vf_ev_end(ev, c0, 0, 0, 0, NULL, "%s", sl[0].type == VF_REC_FAIL ? sl[0].msg : "a record of the wrong size"),
           ev;
  snprintf(other, sizeof other, "%.*s", (int)(sl[0].payload_len - lb), sl[0].payload + lb);
  if (other[0])
    return vf_ev_end(ev, c0, 0, 0, 0, NULL, "weights read from outside the given folder: %s is in use after loading %s",
                     other, a),
           ev;
  vf_ev_end(ev, c0, 0, 1, 0, NULL, "no weight file outside the given folder is mapped or open");
  if (!sl[1].type) return vf_ev_start(ev, c1, 1, bdir), ev;
  if (sl[1].type == VF_REC_FAIL || sl[1].payload_len < 4 + lb || sl[1].payload_len > 4 + lb + 1024)
    return vf_ev_end(ev, c1, 1, 0, 0, NULL, "%s", sl[1].type == VF_REC_FAIL ? sl[1].msg : "a record of the wrong size"),
           ev;
  int32_t old_ok;
  memcpy(&old_ok, sl[1].payload, 4);
  snprintf(other, sizeof other, "%.*s", (int)(sl[1].payload_len - 4 - lb), sl[1].payload + 4 + lb);
  if (old_ok)
    return vf_ev_end(ev, c1, 1, 0, 0, NULL,
                     "loading %s succeeded after it was renamed away: the weights come from somewhere else", a),
           ev;
  float *la = malloc(lb), *lbv = malloc(lb);
  if (la && lbv) {
    memcpy(la, sl[0].payload, lb);
    memcpy(lbv, sl[1].payload + 4, lb);
    double dev = 0, sc = max_abs(la, j->V);
    for (int64_t i = 0; i < j->V; i++) {
      double d = fabs((double)la[i] - lbv[i]);
      if (!(d <= dev)) dev = d;
    }
    if (!(dev <= 1e-6 * sc) || other[0])
      vf_ev_end(ev, c1, 1, 0, dev, NULL, "%s", other[0] ? other : "the model loaded from the new path gives different logits");
    else vf_ev_end(ev, c1, 1, 1, dev, NULL, "the old path fails, the new path gives the same logits");
  } else vf_ev_error(ev, "stage 5: out of memory in the verifier");
  free(la);
  free(lbv);
  return ev;
}

/* 1 when a step of the contract reads weight `key` ({i} as the steps write
 * it) through a non-zero w_offset: a zero-centred norm, (1 + w). */
static int norm_offset(const json_t *model, const char *key) {
  json_t *seqs = mi_ckb_model_sequences(model);
  char want[300];
  snprintf(want, sizeof want, "weight:%s", key);
  int zc = 0;
  size_t i, k;
  json_t *seq, *st;
  json_array_foreach(seqs, i, seq) json_array_foreach(seq, k, st) {
    const json_t *args = json_object_get(st, "args");
    const char *w = json_string_value(json_object_get(args, "w"));
    const char *wo = json_string_value(json_object_get(args, "w_offset"));
    if (w && !strcmp(w, want) && wo && strtod(wo, NULL) != 0) zc = 1;
  }
  json_decref(seqs);
  return zc;
}

/* The buffer an argument binding names ("k_cache@pos0" -> "k_cache"). */
static void buf_of(const json_t *b, char *out, size_t n) {
  const char *s = json_string_value(b) ?: "";
  snprintf(out, n, "%.*s", strchr(s, ':') ? 0 : (int)strcspn(s, "@+"), s);
}

/* The weight of the steps of seq before `before` that write buffer `buf`:
 * norm = 1, the weighted norm (w and eps) among them; else the first
 * projection (w, no eps), following steps that only move rows (no weight)
 * back to their input x. */
static void writer_weight(const json_t *seq, size_t before, const char *buf, int norm, char *out, size_t n,
                          int depth) {
  out[0] = 0;
  for (size_t k = 0; k < before; k++) {
    const json_t *args = json_object_get(json_array_get(seq, k), "args");
    char y[128], x[128];
    buf_of(json_object_get(args, "y"), y, sizeof y);
    if (strcmp(y, buf)) continue;
    const char *w = json_string_value(json_object_get(args, "w"));
    int is_norm = json_object_get(args, "eps") != NULL, weighted = w && !strncmp(w, "weight:", 7);
    if (weighted && is_norm == norm) {
      snprintf(out, n, "%s", w + 7);
      return;
    }
    buf_of(json_object_get(args, "x"), x, sizeof x);
    if (!norm && !weighted && depth < 4 && x[0] && strcmp(x, buf)) {
      writer_weight(seq, k, x, 0, out, n, depth + 1);
      if (out[0]) return;
    }
  }
}

/* The tensors stage 5 edits, from the model contract: the final norm (the
 * epilogue's weighted norm), and in the first layer sequence holding an
 * attention step the norms and projections of its queries and keys. */
static void s5_keys(s5_job *j, const mi_ckb *c, const json_t *model, const json_t *cfg) {
  size_t i, k;
  json_t *st, *seq;
  json_array_foreach(json_object_get(model, "epilogue"), i, st) {
    const json_t *args = json_object_get(st, "args");
    const char *w = json_string_value(json_object_get(args, "w"));
    const char *b = json_string_value(json_object_get(args, "b"));
    if (!j->final_norm[0] && w && !strncmp(w, "weight:", 7) && json_object_get(args, "eps")) {
      snprintf(j->final_norm, sizeof j->final_norm, "%s", w + 7);
      if (b && !strncmp(b, "weight:", 7)) snprintf(j->final_norm_b, sizeof j->final_norm_b, "%s", b + 7);
    } else if (j->final_norm[0] && !j->head_b[0] && b && !strncmp(b, "weight:", 7) && !json_object_get(args, "eps"))
      snprintf(j->head_b, sizeof j->head_b, "%s", b + 7); /* after the norm, no eps: a bias on the logits */
  }
  json_t *seqs = mi_ckb_model_sequences(model);
  json_array_foreach(seqs, i, seq) json_array_foreach(seq, k, st) {
    const char *op = json_string_value(json_object_get(st, "operator"));
    const mi_ckb_entry *oe = op ? mi_ckb_find(c, op) : NULL;
    const char *ref = oe ? json_string_value(json_object_get(oe->json, "reference")) : NULL;
    /* an attention: the platform's, or one over a window of keys or with a score map (a pack's) */
    if (j->q_norm[0] || !ref || (strcmp(ref, "attention") && strcmp(ref, "masked_attention"))) continue;
    char q[128], kc[128];
    buf_of(json_object_get(json_object_get(st, "args"), "q"), q, sizeof q);
    buf_of(json_object_get(json_object_get(st, "args"), "k_cache"), kc, sizeof kc);
    writer_weight(seq, k, q, 1, j->q_norm, sizeof j->q_norm, 0);
    writer_weight(seq, k, kc, 1, j->k_norm, sizeof j->k_norm, 0);
    writer_weight(seq, k, q, 0, j->q_proj, sizeof j->q_proj, 0);
    writer_weight(seq, k, kc, 0, j->k_proj, sizeof j->k_proj, 0);
  }
  json_decref(seqs);
  j->zc = j->final_norm[0] && norm_offset(model, j->final_norm);
  j->zc_qk = j->q_norm[0] && norm_offset(model, j->q_norm);
  j->layout = mi_ckb_model_layout(model, cfg);
  char e[300];
  vf_binder b = {.model = model, .cfg = cfg, .layer = -1, .err = e, .err_len = sizeof e};
  const char *lf = json_string_value(json_object_get(model, "layers"));
  if (!lf || vf_bind_int(&b, lf, &j->layers) != 0) j->layers = 0;
}

/* ================= the stage ================= */

/* A bias in the copy at dst x2, or 0 where the final norm is zero-centred
 * (its weight set to -1, so 1 + w = 0): (b)'s logits then still double or
 * vanish exactly. Nothing to do for "" (no such bias). */
static int s5_scale_bias(const char *dst, const char *name, int zc, char *err, size_t n) {
  vf_tensor_loc bloc;
  if (!name[0]) return 0;
  if (vf_tensor_locate(dst, name, &bloc, err, n) != 0) return -1;
  return zc ? vf_tensor_affine(&bloc, 0, 0, err, n) : vf_tensor_edit(&bloc, 2.0, 0, 0, NULL, err, n);
}

json_t *vf_stage5(const vf_stage_opts *o, json_t *contract) {
  json_t *units = json_array();
  const char *ids[4] = {"imports", "follows_weights", "unseen_prompts", "weights_path"};
  vf_ref_set_kv(o); /* the float64 twin's cache: the type the model under test was asked for */
  const char *members[4] = {"(a) imports allowlist", "(b) outputs follow the weights", "(c) unseen prompts vs float64",
                            "(d) weights from the given path"};
  char err[4400];
  json_t *cfg0 = NULL;
  int64_t V = config_vocab(o->model_dir, &cfg0, err, sizeof err);
  /* what (b) and (c) edit, and whether those norms multiply by (1 + w) so
   * the edits keep their meaning through it: from the model contract */
  const mi_ckb_entry *me = o->ckb ? vf_bind_find_model(o->ckb, cfg0, NULL) : NULL;
  s5_job keys = {.o = o};
  if (me) s5_keys(&keys, o->ckb, me->json, cfg0);
  if (!keys.final_norm[0]) snprintf(keys.final_norm, sizeof keys.final_norm, "(no model contract names a final norm)");
  char final_norm[300], final_norm_b[300] = "", head_b[300] = ""; /* their names in this checkpoint's layout */
  mi_ckb_layout_rename(keys.layout, keys.final_norm, final_norm, sizeof final_norm);
  if (keys.final_norm_b[0]) mi_ckb_layout_rename(keys.layout, keys.final_norm_b, final_norm_b, sizeof final_norm_b);
  if (keys.head_b[0]) mi_ckb_layout_rename(keys.layout, keys.head_b, head_b, sizeof head_b);
  json_decref(cfg0); /* keys.layout is the contract's */
  for (int i = 0; i < 4; i++) {
    char wd[4096];
    if (vf_workdir_new(wd, sizeof wd) != 0) {
      json_array_append_new(units, unit_error(ids[i], "cannot create a scratch folder"));
      continue;
    }
    s5_job j = keys;
    j.contract = contract, j.workdir = wd, j.V = V;
    json_t *u = NULL;
    char dst[4200];
    size_t cap = VF_REC_SIZE(0) * 8 + 2 * VF_REC_SIZE((size_t)V * sizeof(float) + 1024);
    if (i == 0) u = vf_run_unit(o, "authenticity", ids[i], members[i], imports_child, &j, 30); /* no plugin loaded */
    else if (!V) u = unit_error(ids[i], err);
    else if (i == 1) {
      /* the parent makes the scaled copy: the candidate never touches it first */
      vf_tensor_loc loc;
      snprintf(dst, sizeof dst, "%s/b", wd);
      /* a norm with a bias (LayerNorm): the bias too, x2 (or 0 with 1 + w = 0), so the norm's output
       * still doubles (or vanishes) exactly; a bias on the logits after the head likewise */
      if (vf_copy_model_dir(o->model_dir, dst, err, sizeof err) != 0 ||
          vf_tensor_locate(dst, final_norm, &loc, err, sizeof err) != 0 ||
          (j.zc ? vf_tensor_affine(&loc, 0, -1, err, sizeof err) : vf_tensor_edit(&loc, 2.0, 0, 0, NULL, err, sizeof err)) != 0 ||
          s5_scale_bias(dst, final_norm_b, j.zc, err, sizeof err) != 0 ||
          s5_scale_bias(dst, head_b, j.zc, err, sizeof err) != 0)
        u = unit_error(ids[i], err);
      else u = vf_run_unit_raw(o, "authenticity", ids[i], members[i], follow_child, &j, 120, cap, follow_judge);
    } else if (i == 2) u = run_unseen(&j, ids[i], members[i]);
    else {
      snprintf(dst, sizeof dst, "%s/A", wd);
      if (vf_copy_model_dir(o->model_dir, dst, err, sizeof err) != 0) u = unit_error(ids[i], err);
      else u = vf_run_unit_raw(o, "authenticity", ids[i], members[i], path_child, &j, 120, cap, path_judge);
    }
    vf_rmtree(wd);
    /* One line for the console: the notes of its cases. */
    char sm[1024] = "";
    size_t k, used = 0;
    json_t *c;
    json_array_foreach(json_object_get(u, "cases"), k, c) {
      const char *nt = json_string_value(json_object_get(c, "note"));
      if (nt && used + 4 < sizeof sm)
        used += (size_t)snprintf(sm + used, sizeof sm - used, "%s%s", used ? "; " : "", nt);
    }
    if (used) json_object_set_new(u, "summary", json_string(sm));
    json_array_append_new(units, u);
  }
  return vf_stage_result(5, "authenticity", units);
}
