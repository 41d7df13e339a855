/* Stage 4 as deployed (deployed.c): the golden's prompts through mi-run. */
#ifndef MI_CORE_VERIFY_DEPLOYED_H
#define MI_CORE_VERIFY_DEPLOYED_H

#include "core/verify/verify.h"

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
