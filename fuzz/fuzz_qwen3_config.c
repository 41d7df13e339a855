/* Fuzzes config.json as the qwen3 model plugin reads it: jansson parses the
 * input (as the core does for the model directory), then qwen3_config_read
 * checks it through the host API table plugins get. On success the config
 * must be one the plugin can build a model from without dividing by zero or
 * asking for absurd sizes. */
#include "fuzz_util.h"

#include <jansson.h>
#include <math.h>

#include "core/runtime/host.h"
#include "qwen3_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t je;
  /* the core loads config.json with default flags (ckb_weights.c, loader) */
  json_t *j = json_loadb((const char *)data, size, 0, &je);
  if (!j) return 0;
  qwen3_config c;
  char err[512] = "";
  int rc = qwen3_config_read(mi_host_api_get(), mi_json_wrap(j), &c, err, sizeof err);
  json_decref(j);
  if (rc != 0) {
    fuzz_check_one_line("qwen3_config_read", err);
    return 0;
  }
  FUZZ_CHECK(c.hidden >= 1 && c.hidden <= 65536, "hidden %lld", (long long)c.hidden);
  FUZZ_CHECK(c.n_layers >= 1 && c.n_layers <= 1024, "layers");
  FUZZ_CHECK(c.n_heads >= 1 && c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0,
             "heads %lld/%lld", (long long)c.n_heads, (long long)c.n_kv_heads);
  FUZZ_CHECK(c.head_dim >= 2 && c.head_dim <= 1024 && c.head_dim % 2 == 0, "head_dim %lld",
             (long long)c.head_dim);
  FUZZ_CHECK(c.ffn >= 1 && c.vocab >= 1 && c.max_pos >= 1, "sizes");
  FUZZ_CHECK(isfinite(c.eps) && c.eps >= 0 && isfinite(c.rope_theta) && c.rope_theta >= 1,
             "eps %g theta %g", c.eps, c.rope_theta);
  return 0;
}
