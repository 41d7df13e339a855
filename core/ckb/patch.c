/* A repair's patch applied to a model contract in memory (ckb.h): the one
 * place the implementer and the verifier agree on what a patch means, so
 * the engine and the contract stage 5 interprets carry the same repair. */
#include <string.h>

#include "core/ckb/ckb.h"

int mi_ckb_apply_patch(json_t *model, const json_t *patch) {
  const char *op = json_string_value(json_object_get(patch, "operator"));
  const char *arg = json_string_value(json_object_get(patch, "arg"));
  json_t *val = json_object_get(patch, "value");
  if (!op || !arg || !val) return -1;
  int n = 0;
  json_t *all = mi_ckb_model_sequences(model); /* the sections' steps and each layer kind's */
  for (size_t s = 0; s < json_array_size(all); s++) {
    size_t i;
    json_t *st;
    json_array_foreach(json_array_get(all, s), i, st) {
      json_t *args = json_object_get(st, "args");
      const char *sop = json_string_value(json_object_get(st, "operator"));
      if (args && sop && !strcmp(sop, op) && json_object_get(args, arg)) {
        json_object_set(args, arg, val);
        n++;
      }
    }
  }
  json_decref(all);
  return n;
}
