#!/usr/bin/env bash
# long_functions.sh: list C function definitions whose body is longer than a limit.
#
#   scripts/long_functions.sh [-n LINES] [PATH...]
#
# PATH is a file or a folder (searched for *.c, *.h, *.cu); the default is core, plugins and sdk
# under the repository root. Tests, fuzz harnesses and generated or vendored tables are left out
# (folders named tests or fuzz, and the files in EXCLUDE below), because issue 26's rule "no
# non-test function over 150 lines" is about the code a reader maintains.
#
# Prints one line per long function, `path:line: name N lines`, where line is the line of the
# function's name and N counts the lines from the opening brace to the closing brace, both
# included. Exits 1 when it printed any, 0 when none, 2 on bad usage.
#
# The scan is a brace counter, not a C parser. It follows comments (a // comment spliced on by a
# backslash included), string and character literals, and preprocessor directives with their
# continuation lines (so a function-like macro is not a function, whatever braces it holds); each
# branch of an #if/#elif/#else starts from the state at its #if, and what follows the #endif from
# the state its first branch left, so a brace opened in both branches counts once (measured from
# the last). A top-level `{` opens a function body when the text before it (since the previous
# top-level `;` or `}`) ends with a parenthesised parameter list, trailing __attribute__/asm groups
# left out, and has no `=` outside parentheses (an initializer); the name is the identifier before
# that list, or inside a parenthesised declarator (`(*f(int))(void)`, `(f)(int)`). A `{` right
# after a `;` opens one when a declaration just before reads `name(a, b) type` (K&R parameter
# declarations). GNU and K&R brace placement both work: the count starts at the brace.
set -euo pipefail

limit=150
while getopts "n:h" opt; do
  case "$opt" in
    n) limit="$OPTARG" ;;
    h)
      sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
case "$limit" in
  '' | *[!0-9]*)
    echo "long_functions.sh: -n wants a whole number of lines, got '$limit'" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -eq 0 ]; then
  cd "$root"
  set -- core plugins sdk
fi

# Generated or vendored data, not code anyone reads as functions.
EXCLUDE='(^|/)core/tokenizer/nfc_data\.h$'

files=()
for p in "$@"; do
  if [ -d "$p" ]; then
    while IFS= read -r f; do files+=("$f"); done < <(
      find "$p" \( -type d \( -name tests -o -name fuzz -o -name 'build*' \) -prune \) -o \
        -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print | LC_ALL=C sort)
  elif [ -f "$p" ]; then
    files+=("$p")
  else
    echo "long_functions.sh: $p: no such file or folder" >&2
    exit 2
  fi
done

kept=()
if [ ${#files[@]} -gt 0 ]; then
  while IFS= read -r f; do kept+=("$f"); done < <(printf '%s\n' "${files[@]}" | grep -Ev "$EXCLUDE" || true)
fi
[ ${#kept[@]} -eq 0 ] && exit 0

awk -v limit="$limit" '
# Index of the ( that opens the parenthesised group whose ) is at e in t, or 0.
function open_paren(t, e,    d, i, c) {
  d = 0
  for (i = e; i > 0; i--) {
    c = substr(t, i, 1)
    if (c == ")") d++
    else if (c == "(") { d--; if (d == 0) return i }
  }
  return 0
}

# t without trailing whitespace and trailing attribute or asm groups: `f(void) __attribute__((cold))`.
function strip_attrs(t,    i, j, k, w) {
  while (1) {
    sub(/[ \t\n]+$/, "", t)
    if (substr(t, length(t), 1) != ")") return t
    i = open_paren(t, length(t))
    if (i <= 0) return t
    j = i - 1
    while (j > 0 && substr(t, j, 1) ~ /[ \t\n]/) j--
    k = j
    while (k > 0 && substr(t, k, 1) ~ /[A-Za-z0-9_]/) k--
    w = substr(t, k + 1, j - k)
    if (w !~ /^(__attribute__|__attribute|__asm__|__asm|asm|__declspec)$/) return t
    t = substr(t, 1, k)
  }
}

# Whether t has an = outside parentheses: an initializer, not a signature.
function has_init(t,    d, i, c) {
  d = 0
  for (i = 1; i <= length(t); i++) {
    c = substr(t, i, 1)
    if (c == "(") d++
    else if (c == ")") d--
    else if (c == "=" && d == 0) return 1
  }
  return 0
}

# Called at a top-level `{`: whether `s` (the significant text since the last top-level `;` or `}`,
# comments and literals removed) is a function signature; its name (and name_line), else "".
function signature_name(s,    t, i, j, k, name, p) {
  t = strip_attrs(s)
  if (substr(t, length(t), 1) != ")" || has_init(t)) return ""
  i = open_paren(t, length(t)) # the parameter list
  while (1) {
    if (i <= 0) return ""
    j = i - 1
    while (j > 0 && substr(t, j, 1) ~ /[ \t\n]/) j--
    if (j <= 0 || substr(t, j, 1) != ")") break
    # A parenthesised declarator, `(*name(params))(params)` or `(name)(params)`: the name is inside.
    t = substr(t, 1, j - 1)
    sub(/[ \t\n]+$/, "", t)
    if (substr(t, length(t), 1) != ")") { j = length(t); break }
    i = open_paren(t, length(t))
  }
  k = j
  while (k > 0 && substr(t, k, 1) ~ /[A-Za-z0-9_]/) k--
  name = substr(t, k + 1, j - k)
  if (name == "" || name ~ /^[0-9]/) return ""
  if (name ~ /^(if|for|while|switch|return|sizeof|_Alignof|_Generic|__attribute__|__attribute)$/) return ""
  p = substr(t, 1, k)
  name_line = pend_line + gsub(/\n/, "\n", p)
  return name
}

# Called at a top-level `{` right after a `;`: a K&R definition, `int f(a, b) int a; char *b; {`,
# whose head is one of the declarations just ended; its name (and name_line), else "".
function kr_name(    m, s, pre, name) {
  for (m = nseg; m >= 1 && m > nseg - 64; m--) {
    s = seg[m]
    if (!match(s, /[A-Za-z_][A-Za-z0-9_]*[ \t\n]*\([ \t\n]*[A-Za-z_][A-Za-z0-9_]*([ \t\n]*,[ \t\n]*[A-Za-z_][A-Za-z0-9_]*)*[ \t\n]*\)[ \t\n]*[A-Za-z_]/))
      continue
    pre = substr(s, 1, RSTART - 1)
    name = substr(s, RSTART)
    match(name, /^[A-Za-z_][A-Za-z0-9_]*/)
    name = substr(name, 1, RLENGTH)
    name_line = segline[m] + gsub(/\n/, "\n", pre)
    return name
  }
  return ""
}

BEGIN { sq = sprintf("%c", 39) }
FNR == 1 {
  depth = 0; in_block = 0; in_lc = 0; in_pp = 0; lit = ""; pend = ""; pend_line = FNR; fn = ""; nseg = 0; sp = 0
}
{
  line = $0
  n = length(line)
  cont = (line ~ /\\[ \t]*$/) # a backslash-newline splices the next line onto this one
  if (in_lc) { # a // comment spliced onto this line
    in_lc = cont
    in_pp = in_pp && cont
    next
  }
  # A preprocessor directive (and what is spliced onto it) holds no code we count: only its
  # comments and literals are followed, so a /* opened there is seen, and a { in a
  # function-like macro is not.
  pp = in_pp || (!in_block && lit == "" && line ~ /^[ \t]*#/)
  inc = pp && line ~ /^[ \t]*#[ \t]*(include|include_next|import)[ \t]*</
  # Conditional branches may each open (or close) the same brace: `#if A` `int f(int a) {` `#else`
  # `int f(long a) {` `#endif`. Each branch starts from the state at its #if, and what follows
  # the #endif from the state the first branch left.
  if (pp && !in_pp) {
    if (line ~ /^[ \t]*#[ \t]*if(def|ndef)?([^A-Za-z0-9_]|$)/) {
      sp++; sdepth[sp] = depth; spend[sp] = pend; spline[sp] = pend_line; sseg[sp] = nseg; sfirst[sp] = -1
    } else if (sp > 0 && line ~ /^[ \t]*#[ \t]*(elif|elifdef|elifndef|else)([^A-Za-z0-9_]|$)/) {
      if (sfirst[sp] < 0) sfirst[sp] = depth
      depth = sdepth[sp]; pend = spend[sp]; pend_line = spline[sp]; nseg = sseg[sp]
    } else if (sp > 0 && line ~ /^[ \t]*#[ \t]*endif([^A-Za-z0-9_]|$)/) {
      if (sfirst[sp] >= 0) depth = sfirst[sp]
      sp--
    }
  }
  i = 1
  while (i <= n) {
    c = substr(line, i, 1)
    if (in_block) {
      if (c == "*" && substr(line, i + 1, 1) == "/") { in_block = 0; i += 2; continue }
      i++; continue
    }
    if (lit != "") { # inside a string or character literal; a backslash escapes the next character
      if (c == "\\") { i += 2; continue }
      if (c == lit) lit = ""
      i++; continue
    }
    if (c == "/" && substr(line, i + 1, 1) == "*") { in_block = 1; i += 2; continue }
    if (c == "/" && substr(line, i + 1, 1) == "/") { in_lc = cont; break }
    if (c == "\"" || (c == sq && !inc)) {
      lit = c; i++
      if (!pp && depth == 0) pend = pend "0"
      continue
    }
    if (pp) { i++; continue }
    if (c == "{") {
      # `extern "C" {` wraps declarations without nesting them.
      if (depth == 0 && pend ~ /extern[ \t\n]*0[ \t\n]*$/) { pend = ""; nseg = 0; i++; continue }
      if (depth == 0) {
        fn = signature_name(pend)
        if (fn == "" && pend == "") fn = kr_name()
        fn_line = name_line
        open_line = FNR
      }
      depth++
    } else if (c == "}") {
      if (depth > 0) depth--
      if (depth == 0) {
        if (fn != "") {
          len = FNR - open_line + 1
          if (len > limit) { printf "%s:%d: %s %d lines\n", FILENAME, fn_line, fn, len; found = 1 }
        }
        fn = ""; pend = ""; pend_line = FNR; nseg = 0
      }
    } else if (depth == 0) {
      if (c == ";") { seg[++nseg] = pend; segline[nseg] = pend_line; pend = ""; pend_line = FNR }
      else {
        if (pend == "" && c ~ /[ \t]/) { i++; continue }
        if (pend == "") pend_line = FNR
        pend = pend c
      }
    }
    i++
  }
  if (lit != "" && !cont) lit = "" # an unterminated literal ends with its line (the compiler says so)
  in_pp = pp && (cont || in_block || in_lc)
  if (depth == 0 && pend != "") pend = pend "\n"
}
END { exit found ? 1 : 0 }
' "${kept[@]}"
