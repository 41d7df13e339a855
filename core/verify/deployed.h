/* Stage 4 as deployed (deployed.c): the golden's prompts through mi-run. */
#ifndef MI_CORE_VERIFY_DEPLOYED_H
#define MI_CORE_VERIFY_DEPLOYED_H

#include "core/verify/verify.h"

/* The record of one stage-4 case, in the layout the in-process child
 * writes and judge_case reads: int32 n_ids, n_gen, K; int32 ids[n_ids];
 * int32 gen[n_gen]; int32 top[n_gen*K]; double lps[n_gen*K]. Malloc'ed
 * (its size in *len), or NULL. */
char *vf_s4_record(int n_ids, const int32_t *ids, int n_gen, const int32_t *gen, const int32_t *top,
                   const double *lps, int K, size_t *len);

/* A deployment folder under the user's temp folder (dir) with a plugins.conf
 * (conf) naming the platform (its options) and the model under test;
 * *is_engine set. 0, or -1 with err. */
int vf_deploy_prepare(const vf_stage_opts *o, char *dir, size_t dn, char *conf, size_t cn, int *is_engine, char *err,
                      size_t el);
/* What held the user's model folder during the deployed run. */
typedef struct vf_deploy_guard {
  int read_only;     /* 1 mi-run saw it read-only (a mount namespace), 0 not, -1 mi-run did not start */
  int fingerprinted; /* 1 fingerprinted before and after mi-run */
  int changed;       /* 1 the fingerprints differ: every case failed, `what` says where */
  char what[700];    /* "config.json (mtime, ctime)", "created .marker"; or why it was not fingerprinted */
} vf_deploy_guard;

/* The golden's cases through one mi-run (--prompts: one model load):
 * recs[i] as the in-process child would have written case i (VF_REC_OUT,
 * its payload in payloads[i], the caller frees), or VF_REC_FAIL with why.
 * The model folder is read-only for mi-run where a mount namespace can be
 * made, and fingerprinted before and after it: a change fails every case
 * (*g says which happened). 0, or -1 when mi-run failed or changed the
 * model folder (the cases it finished are still judged when it did not). */
int vf_deploy_run(const vf_stage_opts *o, const char *dir, const char *conf, int is_engine, json_t *cases, int K,
                  vf_rec *recs, char **payloads, vf_deploy_guard *g);

/* A fingerprint of a folder: every entry below it (recursively, symlinks
 * not followed, at most 32 levels and 200000 entries) by relative name,
 * type, inode, size, mtime and ctime (nanoseconds). ctime cannot be set
 * back from user space, so a write, rename, chmod or new entry changes it.
 * A regular file (a GGUF model) is fingerprinted as its one entry. NULL
 * with err when the folder itself cannot be read. */
typedef struct vf_fp vf_fp;
vf_fp *vf_fp_take(const char *dir, char *err, size_t el);
/* 0 when a and b are the same; 1 with the first difference in what
 * ("config.json (size, mtime, ctime)", "created .marker", "removed x"):
 * created, removed and changed entries first, a folder's own times (which
 * change with any entry made in it) only when nothing else differs. */
int vf_fp_diff(const vf_fp *a, const vf_fp *b, char *what, size_t wl);
void vf_fp_free(vf_fp *f);

#endif
