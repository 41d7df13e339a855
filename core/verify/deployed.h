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
/* The golden's cases through one mi-run (--prompts: one model load):
 * recs[i] as the in-process child would have written case i (VF_REC_OUT,
 * its payload in payloads[i], the caller frees), or VF_REC_FAIL with why.
 * 0, or -1 when mi-run failed (the cases it finished are still judged). */
int vf_deploy_run(const vf_stage_opts *o, const char *dir, const char *conf, int is_engine, json_t *cases, int K,
                  vf_rec *recs, char **payloads);

#endif
