/* Mutant: writes into the model folder it is given. Once loaded by any
 * program but the verifier (its program name has no "verify": mi-run, a
 * deployment) it creates, or appends to, ".marker" in its model folder --
 * a stand-in for a plugin that leaves state there or corrupts the weights
 * -- and otherwise computes correctly. Only the deployed run of stage 4
 * reaches it (mi-verify's own units are forks of mi-verify, their tree
 * read-only besides), so that run must see the folder read-only, or its
 * fingerprint must catch the change and fail every deployed case. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mm.h"

int mm_model_load(const mi_host_api *host, const mi_model_load_args *a, qwen3_model **out, char *err,
                  size_t err_len) {
  if (!strstr(program_invocation_short_name, "verify") && a->model_dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.marker", a->model_dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) { /* EROFS where the folder is read-only: then it just goes on */
      ssize_t w = write(fd, "x", 1);
      (void)w;
      close(fd);
    }
  }
  return mm_load_shimmed(host, a, out, err, err_len);
}
