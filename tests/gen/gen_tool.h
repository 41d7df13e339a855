/* What the mi-gen end-to-end tests share: running a built tool with its
 * output captured, reading a file whole, a shell line for setup chores. */
#ifndef MI_TESTS_GEN_TOOL_H
#define MI_TESTS_GEN_TOOL_H

typedef struct res {
  int rc;          /* exit status, or minus the signal */
  char *out, *err; /* what it wrote (never NULL) */
} res;

/* The whole file, NUL-terminated; "" when it cannot be read. */
char *gt_slurp(const char *path);

/* Runs BUILD/bin/TOOL with args (NULL-ended) and stdin from /dev/null,
 * stdout and stderr captured through files under tmp, killed after
 * timeout seconds. */
res gt_run(const char *build, const char *tmp, const char *tool, const char *const *args, int timeout);
void res_free(res *r);

/* The folders a mi-gen test works in: build and source trees
 * ($MI_BUILD_DIR, $MI_SOURCE_DIR; "build" and "." when unset), a fresh
 * folder tmp made from the mkdtemp template tmpl, and under it model
 * ("tiny") and ckb ("ckb"), either NULL when unwanted. The buffers are the
 * tests' own: build[1024], src[1024], tmp[1100], model[1200], ckb[1200].
 * 0, or -1 when the folder could not be made. */
int gt_dirs(const char *tmpl, char *build, char *src, char *tmp, char *model, char *ckb);

/* The golden `from` cut to its first ncases cases of nsteps steps each,
 * written under its own name into the folder dir (made): stage 4 picks it
 * for the same checkpoint as the whole one. What the sanitizer tree's runs
 * compare (MI_TEST_GEN_QUICK: the same paths, fewer steps); the Release run
 * compares every case. 0, or -1 with a line on stderr. */
int gt_short_golden(const char *from, const char *dir, int ncases, int nsteps);

/* A setup chore through the shell; a failure is reported, not fatal. */
void gt_sh(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
