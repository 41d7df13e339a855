/* The evolution run's report: RUN_DIR/evolve.json (everything) and
 * RUN_DIR/evolve.md (the tables a reader wants: phases, reads, the variant
 * search, end to end, what entered the CKB). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "core/gen/evolve/evolve.h"

/* A table cell: '|' escaped, at most 200 characters. */
static void cell(FILE *f, const char *s) {
  for (int i = 0; s && s[i] && i < 200; i++) {
    if (s[i] == '|') fputc('\\', f);
    fputc(s[i] == '\n' ? ' ' : s[i], f);
  }
}

static const char *str(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

int ev_report_write(const ev_ctx *c, char *err, size_t n) {
  char p[4400];
  snprintf(p, sizeof p, "%s/evolve.json", c->o->run_dir);
  if (json_dump_file(c->report, p, JSON_INDENT(1) | JSON_SORT_KEYS) != 0) {
    snprintf(err, n, "%s: cannot write", p);
    return -1;
  }
  snprintf(p, sizeof p, "%s/evolve.md", c->o->run_dir);
  FILE *f = fopen(p, "w");
  if (!f) {
    snprintf(err, n, "%s: cannot write", p);
    return -1;
  }
  const json_t *r = c->report;
  fprintf(f, "# mi-gen --evolve\n\nOutcome: %s (exit %lld). References: %s. LLM: none.\n\n", str(r, "outcome"),
          (long long)json_integer_value(json_object_get(r, "exit")),
          json_is_string(json_object_get(r, "references")) ? str(r, "references") : "off");
  fprintf(f, "## Phases\n\n| phase | status | wall s | iterations | detail |\n| --- | --- | --- | --- | --- |\n");
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(r, "phases"), i, x) {
    fprintf(f, "| %s | %s | %.2f | %lld | ", str(x, "phase"), str(x, "status"),
            json_number_value(json_object_get(x, "wall_s")),
            (long long)json_integer_value(json_object_get(x, "iterations")));
    cell(f, str(x, "detail"));
    fprintf(f, " |\n");
  }
  fprintf(f, "\n## Reads (references on)\n\n");
  if (!json_array_size(json_object_get(r, "reads"))) fprintf(f, "None.\n");
  else fprintf(f, "| file | bytes | sha256 | phase |\n| --- | --- | --- | --- |\n");
  json_array_foreach(json_object_get(r, "reads"), i, x)
      fprintf(f, "| %s | %lld | %.16s… | %s |\n", str(x, "ref"), (long long)json_integer_value(json_object_get(x, "bytes")),
              str(x, "sha256"), str(x, "phase"));
  if (json_array_size(json_object_get(r, "variant_search"))) {
    fprintf(f, "\n## Variant search (tolerance %g on max |top-10 logprob diff|)\n\n",
            json_number_value(json_object_get(r, "tolerance")));
    fprintf(f, "From **%s**.\n\n| probe | candidate | oracle error | verdict |\n| --- | --- | --- | --- |\n", str(r, "base"));
    json_array_foreach(json_object_get(r, "variant_search"), i, x) {
      fprintf(f, "| %s | %s | ", str(x, "probe"), str(x, "candidate"));
      if (json_object_get(x, "error")) fprintf(f, "%.3g | %s |\n", json_number_value(json_object_get(x, "error")), str(x, "verdict"));
      else { /* not scored: why */
        const json_t *why = json_object_get(x, "unexplained") ?: json_object_get(x, "operators_missing");
        fprintf(f, "- | %s: ", str(x, "verdict"));
        cell(f, json_string_value(json_array_get(why, 0)) ?: "");
        fprintf(f, " |\n");
      }
    }
    if (json_is_string(json_object_get(r, "found"))) fprintf(f, "\nFound: **%s**\n", str(r, "found"));
    if (json_array_size(json_object_get(r, "deferred"))) {
      fprintf(f, "\nLeft to a candidate bundle (a layer kind the base lacks):\n\n");
      json_array_foreach(json_object_get(r, "deferred"), i, x) fprintf(f, "- %s\n", json_string_value(x));
    }
  }
  const json_t *b = json_object_get(r, "bundle");
  if (b) {
    fprintf(f, "\n## Candidate bundle %s\n\n| operator unit | verdict |\n| --- | --- |\n", str(b, "id"));
    json_array_foreach(json_object_get(b, "operator_units"), i, x)
        fprintf(f, "| %s | %s |\n", str(x, "id"), str(x, "verdict"));
    fprintf(f, "\n| end to end | oracle error | steps | verdict |\n| --- | --- | --- | --- |\n");
    json_array_foreach(json_object_get(b, "end_to_end"), i, x)
        fprintf(f, "| %s | %.3g | %lld | %s |\n", str(x, "shape"), json_number_value(json_object_get(x, "error")),
                (long long)json_integer_value(json_object_get(x, "steps")), str(x, "verdict"));
  }
  if (json_array_size(json_object_get(r, "unexplained"))) {
    fprintf(f, "\n## Unexplained (nothing written)\n\n");
    json_array_foreach(json_object_get(r, "unexplained"), i, x) fprintf(f, "- %s\n", json_string_value(x));
  }
  if (json_array_size(json_object_get(r, "entries"))) {
    fprintf(f, "\n## Entered the CKB\n\n| entry | version | action |\n| --- | --- | --- |\n");
    json_array_foreach(json_object_get(r, "entries"), i, x)
        fprintf(f, "| %s | %s | %s |\n", str(x, "id"), str(x, "version"), str(x, "action"));
  }
  const json_t *rv = json_object_get(r, "revalidation");
  if (rv) {
    fprintf(f, "\n## Revalidation (references off)\n\nmi-gen exit %lld; log %s\n\n",
            (long long)json_integer_value(json_object_get(rv, "mi_gen_exit")), str(rv, "log"));
    fprintf(f, "| stage | name | verdict | detail |\n| --- | --- | --- | --- |\n");
    json_array_foreach(json_object_get(rv, "stages"), i, x) {
      if (json_object_get(x, "line")) fprintf(f, "| | | | ");
      else fprintf(f, "| %s | %s | %s | ", str(x, "stage"), str(x, "name"), str(x, "verdict"));
      cell(f, json_object_get(x, "line") ? str(x, "line") : str(x, "detail"));
      fprintf(f, " |\n");
    }
  }
  return fclose(f) == 0 ? 0 : -1;
}
