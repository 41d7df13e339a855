/* The float64 Qwen3.5 reference (tests/hybrid/ref/qwen35_f64.h) opened on a
 * checkpoint folder, as test_hybrid_peer and test_hybrid_reference run it. */
#ifndef MI_TESTS_HYBRID_F64_MODEL_H
#define MI_TESTS_HYBRID_F64_MODEL_H

#include <check.h>
#include <jansson.h>

#include "core/runtime/safetensors.h"
#include "tests/hybrid/ref/qwen35_f64.h"
#include "tests/util/test_json.h"

typedef struct hy_f64 {
  json_t *cfg;   /* the checkpoint's config.json */
  mi_weights *w; /* its weights */
  vf_qwen35 *m;  /* the model on them */
} hy_f64;

/* The reference on the checkpoint dir; the test fails naming why it cannot
 * be opened. Close it with hy_f64_close. */
static inline hy_f64 hy_f64_open(const char *dir) {
  hy_f64 f = {mi_test_json_at(dir, "config.json"), NULL, NULL};
  char err[1024] = "";
  f.w = mi_weights_open(dir, err, sizeof err);
  ck_assert_msg(f.w, "%s", err);
  ck_assert_msg(vf_qwen35_open(f.cfg, f.w, &f.m, err, sizeof err) == 0, "%s", err);
  return f;
}

static inline void hy_f64_close(hy_f64 *f) {
  vf_qwen35_close(f->m);
  mi_weights_close(f->w);
  json_decref(f->cfg);
}

#endif
