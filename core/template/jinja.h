/* core/template/jinja.h — a small Jinja engine for chat templates.
 *
 * The subset real chat templates use (docs/chat-templates.md lists it), with
 * the whitespace rules transformers and @huggingface/jinja apply (one trailing
 * newline of the template dropped, trim_blocks and lstrip_blocks ON, '-'
 * on either side of a tag). Values come in as a jansson object whose members
 * are the template's variables. Every failure -- a template that does not
 * parse, a construct outside the subset, raise_exception(), a limit hit -- is
 * one line "line L col C: PROBLEM" (L, C: 1-based, in the template's own
 * text), never a crash. Hostile templates are bounded by mi_jinja_limits.
 * Thread safety: a parsed template is immutable; renders may run
 * concurrently. */
#ifndef MI_CORE_TEMPLATE_JINJA_H
#define MI_CORE_TEMPLATE_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_jinja mi_jinja;

typedef struct mi_jinja_limits {
  size_t max_output;  /* bytes of rendered text (default 16 MiB) */
  size_t max_memory;  /* bytes of values made while rendering (default 256 MiB) */
  uint64_t max_steps; /* statements + expressions evaluated (default 20 M) */
  uint64_t max_iters; /* loop iterations, all loops together (default 1 M) */
  int max_depth;      /* nesting of macro calls (default 64) */
} mi_jinja_limits;

typedef struct mi_jinja_opts {
  int64_t now;                   /* strftime_now()'s clock: seconds since the epoch, UTC */
  const mi_jinja_limits *limits; /* NULL: the defaults */
} mi_jinja_opts;

/* Nesting of expressions and blocks the parser accepts. */
#define MI_JINJA_MAX_NEST 64

/* Parses a template; NULL with err set ("line L col C: ...") when it does not parse. */
mi_jinja *mi_jinja_parse(const char *src, size_t len, char *err, size_t errlen);
void mi_jinja_free(mi_jinja *t);

/* Renders with the members of vars (a JSON object, or NULL) as variables.
 * A malloc'd NUL-terminated string, or NULL with err set. *raised (if not
 * NULL) is set to 1 when the error came from the template's own
 * raise_exception(), else 0. */
char *mi_jinja_render(const mi_jinja *t, const json_t *vars, const mi_jinja_opts *o, char *err,
                      size_t errlen, int *raised);

/* Parse + render in one call. */
char *mi_jinja_render_text(const char *src, const json_t *vars, const mi_jinja_opts *o, char *err,
                           size_t errlen, int *raised);

#ifdef __cplusplus
}
#endif
#endif
