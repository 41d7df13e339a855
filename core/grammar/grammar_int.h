/* core/grammar/grammar_int.h — what the schema compiler, the matcher and the
 * token mask share: the compiled grammar's tables and the matcher's frames. */
#ifndef MI_CORE_GRAMMAR_INT_H
#define MI_CORE_GRAMMAR_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/grammar/json_schema.h"

#define JG_NONE 0xFFFFFFFFu
#define JG_INF 255                     /* need: no value within the nesting limit */
#define JG_MAX_THREADS 32              /* parses the matcher follows at once (anyOf branches) */
#define JG_INT_LIMIT 999999999999999LL /* 15 digits */
#define JG_MAX_EXP 293                 /* 999999999999999.9e293 < DBL_MAX: every number is finite */

/* JSON types, as a bitmask of what a value may be. */
enum {
  T_NULL = 1,
  T_BOOL = 2,
  T_INT = 4,
  T_NUM = 8,
  T_STR = 16,
  T_ARR = 32,
  T_OBJ = 64,
  T_ALL = 127
};

/* Node kinds: VALUE constrains one value; ALIAS ($ref, allOf of one) and
 * ANYOF (anyOf, oneOf) consume nothing themselves — their values are those of
 * the VALUE nodes in their closure. */
enum { N_VALUE, N_ALIAS, N_ANYOF };

/* A byte string in g->blob. */
typedef struct jg_text {
  uint32_t off, len;
} jg_text;

typedef struct jg_node {
  uint8_t kind;
  uint8_t types;    /* VALUE: T_* the value may be (types no value can satisfy removed) */
  uint8_t need;     /* containers a value needs below and including itself (JG_INF: none fits) */
  uint8_t need_obj; /* VALUE: need of an object value (JG_INF when no object can be) */
  uint8_t need_arr; /* VALUE: need of an array value */
  uint32_t target;  /* ALIAS: the node it stands for */
  uint32_t alt_first, alt_n;     /* ANYOF: node ids in g->ids */
  uint32_t clo_first, clo_n;     /* the VALUE nodes a value of this node starts as, in g->ids */
  uint32_t lit_first, lit_n;     /* VALUE with enum/const: the values' compact JSON texts, sorted,
                                    in g->lits (lit_n 0 with lit_first JG_NONE: no enum) */
  uint32_t min_len, max_len;     /* strings, in code points (max JG_NONE: unbounded) */
  int64_t imin, imax;            /* numbers, inclusive (integers at most 15 digits) */
  uint8_t bounded;               /* minimum/maximum given: imin/imax narrower than 15 digits */
  uint32_t prop_first, prop_n;   /* objects: declared keys in g->prop_*, sorted by key text */
  uint32_t nreq;                 /* of them required */
  uint32_t addl;                 /* node of any other key's value, JG_NONE: no other key */
  uint32_t pre_first, pre_n;     /* arrays: prefixItems nodes in g->ids */
  uint32_t items;                /* node of the items after them, JG_NONE: none */
  uint32_t min_items, max_items; /* max JG_NONE: unbounded */
} jg_node;

struct mi_json_grammar {
  jg_node *nodes;
  uint32_t n_nodes, root;
  uint32_t *ids; /* [n_ids] node-id lists: anyOf alternatives, prefixItems, closures */
  uint32_t n_ids;
  jg_text *prop_key;   /* [n_props] a declared key as JSON text, quotes included */
  uint32_t *prop_node; /* [n_props] its value's node */
  uint8_t *prop_req;   /* [n_props] 1: required */
  uint32_t n_props;
  jg_text *lits; /* [n_lits] enum/const texts, then "false","true", then "null" */
  uint32_t n_lits, lit_bool, lit_null; /* first index of the two built-in sets */
  char *blob;                          /* the bytes jg_text points into */
  size_t blob_len;
  /* mi_json_grammar_wrap: literal text before and after the value (a tool
   * call's "<tool_call>\n" ... "\n</tool_call>"), NULL: none */
  char *prefix, *suffix;
  uint32_t prefix_len, suffix_len;
};

/* ---- the matcher's frames ----
 * A parse is a stack of frames linked by parent index; frames are never
 * changed once made (a byte makes new top frames that point at the old ones
 * below), so a state is just its top indices and a copy of it costs nothing:
 * the token mask walks the vocabulary from saved states and drops the frames
 * a branch made by resetting the arena's length. */
enum { F_ROOT, F_OBJ, F_ARR, F_STR, F_LIT, F_NUM, F_KEYREC };

/* Fields by kind (every field is set; unused ones are 0):
 *   ROOT   phase: R_PREFIX / R_VALUE / R_SUFFIX / R_DONE; d: bytes of the
 *          prefix or suffix matched
 *   OBJ    node, depth, phase O_*, ws; a: last KEYREC (JG_NONE: no key yet);
 *          b: node of the current key's value; c: required keys seen;
 *          sub: keys not in "properties" seen
 *   ARR    node, depth, phase A_*, ws; a: items so far
 *   STR    node (the object's, for a key); phase: lexer S_*; sub: bytes still due in
 *          a UTF-8 character / hex digits read; flags: STRF_*;
 *          value: a = code points so far; key: a = first candidate key, c = end of
 *          the candidates, d = bytes matched, h = FNV-1a of the key's bytes;
 *          b: lexer scratch (\u value so far, or the next byte's range lo | hi << 8)
 *   LIT    node; a..c: candidate texts [a, c) in g->lits; d: bytes matched
 *   NUM    node, phase NU_*, flags NUMF_*; a: integer digits; b: fraction digits;
 *          c: exponent value, sub: its digits; h: the integer part's value (bounds)
 *   KEYREC a key seen in an object: a = its declared index or JG_NONE, h = FNV-1a of
 *          an undeclared key's text; parent = the key before it */
typedef struct jg_frame {
  uint32_t parent, node;
  uint8_t kind, phase, ws, depth;
  uint8_t flags, sub, pad0, pad1;
  uint32_t a, b, c, d;
  uint64_t h;
} jg_frame;

enum { STRF_KEY = 1, STRF_FREE = 2 };

/* The frames one feed works in: [0, nbase) are the matcher's (read-only),
 * from nbase on this walk's own. */
typedef struct jg_arena {
  const jg_frame *base;
  uint32_t nbase;
  jg_frame *buf;
  uint32_t len, cap;
  int oom;
  int heap; /* buf was malloc'd (not the caller's) */
} jg_arena;

/* A parse state: the tops of the parses still alive (anyOf branches). */
typedef struct jg_state {
  uint32_t n;
  uint32_t top[JG_MAX_THREADS];
} jg_state;

struct mi_json_matcher {
  const mi_json_grammar *g;
  jg_frame *frames; /* [n_frames] the live frames (compacted after each feed) */
  uint32_t n_frames;
  jg_state st;
};

/* json_matcher.c */
void jg_arena_init(jg_arena *A, const mi_json_matcher *m, jg_frame *buf, uint32_t cap);
void jg_arena_free(jg_arena *A);
/* out = in after byte c; 0, or -1 when no parse takes c (or out of memory). */
int jg_state_feed(const mi_json_grammar *g, jg_arena *A, const jg_state *in, int c, jg_state *out);
int jg_state_can_end(const mi_json_grammar *g, const jg_arena *A, const jg_state *s);
int64_t jg_state_plain_budget(const mi_json_grammar *g, const jg_arena *A, const jg_state *s);

#endif
