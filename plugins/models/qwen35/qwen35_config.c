/* config.json of the hybrid, read through the host's JSON functions. Every
 * refusal is one line naming the field ("text_config.<field>" in the
 * wrapped layout, so the user finds it in the file). */
#include "qwen35_config.h"

#include <stdio.h>
#include <string.h>

#include "mi/model_glue.h"

/* The file's own strings go into messages: keep them one line and short. */
static void one_line(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20) *s = ' ';
}

/* A boolean; absent gives dflt. */
static int get_bool(mi_glue_json *r, const mi_json *obj, const char *key, const char *prefix,
                    int dflt, int *out) {
  const mi_json *v = r->h->json_get(obj, key);
  *out = dflt;
  if (!v || r->h->json_type(v) == MI_JSON_NULL) return 0;
  if (r->h->json_bool(v, out) != 0) {
    snprintf(r->err, r->err_len, "field \"%s%s\" must be true or false", prefix, key);
    return -1;
  }
  return 0;
}

/* The per-layer kinds: layer_types when present, else HF's default (every
 * full_attention_interval-th layer is full attention). */
static int read_layer_types(mi_glue_json *r, qwen35_config *c) {
  const mi_host_api *h = r->h;
  const mi_json *lt = h->json_get(r->obj, "layer_types");
  if (lt && h->json_type(lt) != MI_JSON_NULL) {
    if (h->json_type(lt) != MI_JSON_ARRAY || (int64_t)h->json_array_size(lt) != c->n_layers) {
      snprintf(r->err, r->err_len,
               "field \"%slayer_types\" must be an array of num_hidden_layers (%lld) strings",
               r->prefix, (long long)c->n_layers);
      return -1;
    }
    for (int64_t l = 0; l < c->n_layers; l++) {
      const char *t = h->json_string(h->json_array_get(lt, (size_t)l));
      if (t && strcmp(t, "full_attention") == 0) {
        c->full[l] = 1;
      } else if (t && strcmp(t, "linear_attention") == 0) {
        c->full[l] = 0;
      } else {
        snprintf(r->err, r->err_len,
                 "field \"%slayer_types\"[%lld] = \"%.40s\" is neither linear_attention nor "
                 "full_attention",
                 r->prefix, (long long)l, t ? t : "(not a string)");
        one_line(r->err);
        return -1;
      }
    }
  } else {
    int64_t iv = 4; /* HF's Qwen3_5TextConfig default */
    if (h->json_get(r->obj, "full_attention_interval") &&
        mi_glue_json_int(r, "full_attention_interval", 1, Q35_MAX_LAYERS, &iv))
      return -1;
    for (int64_t l = 0; l < c->n_layers; l++)
      c->full[l] = (l + 1) % iv == 0;
  }
  c->n_full = 0;
  for (int64_t l = 0; l < c->n_layers; l++)
    c->n_full += c->full[l];
  return 0;
}

int qwen35_config_read(const mi_host_api *h, const mi_json *cfg, qwen35_config *c, char *err,
                       size_t n) {
  memset(c, 0, sizeof *c);
  mi_glue_json r;
  if (mi_glue_json_open(&r, h, cfg, err, n) != 0) return -1;
  const mi_json *tc = h->json_get(cfg, "text_config");
  if (tc && h->json_type(tc) != MI_JSON_NULL) {
    if (h->json_type(tc) != MI_JSON_OBJECT) {
      snprintf(err, n, "field \"text_config\" must be an object");
      return -1;
    }
    r.obj = tc;
    r.prefix = "text_config.";
    c->wrapped = 1;
  }
  /* Limits are generous (past any released model) but bounded. */
  if (mi_glue_json_int(&r, "hidden_size", 1, 65536, &c->hidden) ||
      mi_glue_json_int(&r, "num_hidden_layers", 1, Q35_MAX_LAYERS, &c->n_layers) ||
      mi_glue_json_int(&r, "num_attention_heads", 1, 1024, &c->n_heads) ||
      mi_glue_json_int(&r, "num_key_value_heads", 1, 1024, &c->n_kv_heads) ||
      mi_glue_json_int(&r, "head_dim", 2, 1024, &c->head_dim) ||
      mi_glue_json_int(&r, "intermediate_size", 1, 1 << 20, &c->ffn) ||
      mi_glue_json_int(&r, "vocab_size", 1, 1 << 24, &c->vocab) ||
      mi_glue_json_int(&r, "linear_num_key_heads", 1, 1024, &c->lin_kh) ||
      mi_glue_json_int(&r, "linear_num_value_heads", 1, 1024, &c->lin_vh) ||
      mi_glue_json_int(&r, "linear_key_head_dim", 1, 1024, &c->lin_dk) ||
      mi_glue_json_int(&r, "linear_value_head_dim", 1, 1024, &c->lin_dv) ||
      mi_glue_json_int(&r, "linear_conv_kernel_dim", 1, 64, &c->conv_k))
    return -1;
  c->max_pos = 262144;
  if (h->json_get(r.obj, "max_position_embeddings") &&
      mi_glue_json_int(&r, "max_position_embeddings", 1, 1 << 24, &c->max_pos))
    return -1;
  if (mi_glue_json_real(&r, r.obj, "rms_norm_eps", "rms_norm_eps", 0.0, 1.0, 1e-6, &c->eps))
    return -1;
  /* rotary: rope_parameters (the current HF layout) or the top level */
  const mi_json *rp = h->json_get(r.obj, "rope_parameters");
  if (rp && h->json_type(rp) != MI_JSON_NULL && h->json_type(rp) != MI_JSON_OBJECT) {
    snprintf(err, n, "field \"%srope_parameters\" must be an object", r.prefix);
    return -1;
  }
  if (rp && h->json_type(rp) == MI_JSON_NULL) rp = NULL;
  double theta_top, prf_top, prf;
  if (mi_glue_json_real(&r, r.obj, "rope_theta", "rope_theta", 1.0, 1e12, 1e7, &theta_top) ||
      mi_glue_json_real(&r, rp, "rope_theta", "rope_parameters.rope_theta", 1.0, 1e12, theta_top,
                        &c->rope_theta) ||
      mi_glue_json_real(&r, r.obj, "partial_rotary_factor", "partial_rotary_factor", 0.0, 1.0, 0.25,
                        &prf_top) ||
      mi_glue_json_real(&r, rp, "partial_rotary_factor", "rope_parameters.partial_rotary_factor",
                        0.0, 1.0, prf_top, &prf))
    return -1;
  c->rot_dim = (int64_t)(prf * (double)c->head_dim);
  if (c->rot_dim < 2 || c->rot_dim % 2 != 0) {
    snprintf(err, n,
             "field \"%spartial_rotary_factor\" = %g gives %lld rotary channels of head_dim %lld "
             "(need an even number >= 2)",
             r.prefix, prf, (long long)c->rot_dim, (long long)c->head_dim);
    return -1;
  }
  const char *rt = rp ? h->json_string(h->json_get(rp, "rope_type")) : NULL;
  if (rt && strcmp(rt, "default") != 0) {
    snprintf(err, n,
             "field \"%srope_parameters.rope_type\" = \"%.40s\" is not supported (only default)",
             r.prefix, rt);
    one_line(err);
    return -1;
  }
  const mi_json *rs = h->json_get(r.obj, "rope_scaling");
  if (rs && h->json_type(rs) != MI_JSON_NULL) {
    snprintf(err, n, "field \"%srope_scaling\" is not supported by the qwen35 plugin", r.prefix);
    return -1;
  }
  /* tie_word_embeddings may sit at either level of the wrapped layout */
  int tied_text = 0, tied_top = 0;
  if (get_bool(&r, r.obj, "tie_word_embeddings", r.prefix, 0, &tied_text) ||
      (c->wrapped && get_bool(&r, cfg, "tie_word_embeddings", "", 0, &tied_top)))
    return -1;
  c->tied = tied_text || tied_top;
  /* variants this plugin does not implement: refuse rather than run wrong */
  int gate = 1, bias = 0, swa = 0;
  if (get_bool(&r, r.obj, "attn_output_gate", r.prefix, 1, &gate) ||
      get_bool(&r, r.obj, "attention_bias", r.prefix, 0, &bias) ||
      get_bool(&r, r.obj, "use_sliding_window", r.prefix, 0, &swa))
    return -1;
  if (swa) { /* the full-attention layers attend to every cached position */
    snprintf(err, n, "field \"%suse_sliding_window\" = true is not supported", r.prefix);
    return -1;
  }
  if (!gate) {
    snprintf(err, n,
             "field \"%sattn_output_gate\" = false is not supported (q_proj must carry the gate)",
             r.prefix);
    return -1;
  }
  if (bias) {
    snprintf(err, n, "field \"%sattention_bias\" = true is not supported", r.prefix);
    return -1;
  }
  const char *act = h->json_string(h->json_get(r.obj, "hidden_act"));
  if (act && strcmp(act, "silu") != 0) {
    snprintf(err, n, "field \"%shidden_act\" = \"%.40s\" is not supported (only silu)", r.prefix,
             act);
    one_line(err);
    return -1;
  }
  if (c->n_heads % c->n_kv_heads != 0) {
    snprintf(
        err, n,
        "field \"%snum_attention_heads\" (%lld) is not a multiple of num_key_value_heads (%lld)",
        r.prefix, (long long)c->n_heads, (long long)c->n_kv_heads);
    return -1;
  }
  if (c->lin_vh % c->lin_kh != 0) {
    snprintf(err, n,
             "field \"%slinear_num_value_heads\" (%lld) is not a multiple of linear_num_key_heads "
             "(%lld)",
             r.prefix, (long long)c->lin_vh, (long long)c->lin_kh);
    return -1;
  }
  return read_layer_types(&r, c);
}
