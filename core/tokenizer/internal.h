/* core/tokenizer/internal.h — shared state of the tokenizer implementation
 * (tokenizer_load.c, tokenizer_encode.c, tokenizer_decode.c,
 * tokenizer_nfc.c). Not a public API. */
#ifndef MI_CORE_TOKENIZER_INTERNAL_H
#define MI_CORE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer/tokenizer.h"

/* String -> id open-addressing hash (keys point into tok->strpool). */
typedef struct {
    uint32_t *slots;   /* [cap] id+1, 0 = empty */
    uint32_t cap;      /* power of two */
} mi_tok_strmap;

/* (left id, right id) -> merge, open addressing. */
typedef struct {
    uint64_t key;      /* ((uint64_t)left << 32) | right; UINT64_MAX = empty */
    uint32_t rank;     /* merge priority: lower merges first */
    int32_t result;    /* id of the merged token */
} mi_tok_merge;

typedef struct {
    const char *content;  /* as in tokenizer.json, NUL-terminated */
    uint32_t len;
    int32_t id;
    unsigned char special, lstrip, rstrip, single_word;
} mi_tok_added;

/* Word cache: direct-mapped, fixed size; short words only. */
#define MI_TOK_CACHE_SLOTS 16384
#define MI_TOK_CACHE_KEY   24      /* bytes of word kept (longer: not cached) */
typedef struct {
    uint32_t hash;
    uint8_t klen;                  /* 0 = empty slot */
    uint8_t nids;
    unsigned char key[MI_TOK_CACHE_KEY];
    int32_t ids[MI_TOK_CACHE_KEY]; /* a word of k bytes gives <= k ids */
} mi_tok_cache_slot;

/* Pre-tokenizer steps, applied in order to each non-added-token segment. */
enum { MI_TOK_PRE_SPLIT = 1 };

struct mi_tokenizer {
    /* per id, [vocab_size] */
    uint32_t vocab_size;
    uint32_t *str_off;       /* offset of the tokenizer.json string in strpool, UINT32_MAX = unused id */
    uint32_t *str_len;
    uint32_t *bytes_off;     /* offset of the decoded bytes in bytepool */
    uint32_t *bytes_len;
    unsigned char *is_special;
    char *strpool;           /* NUL-terminated token strings */
    unsigned char *bytepool; /* decoded bytes */
    size_t max_token_bytes;

    mi_tok_strmap strmap;    /* tokenizer.json string -> id (vocab + added) */

    int32_t byte_id[256];    /* id of the one-byte token for each byte, -1 = none */
    mi_tok_merge *merges;    /* [merge_cap] */
    uint32_t merge_cap;      /* power of two */

    mi_tok_added *added;     /* [n_added], sorted by length, longest first */
    uint32_t n_added;
    unsigned char added_first[256]; /* 1 if some added token starts with this byte */

    int nfc;                 /* normalizer NFC */
    int n_split;             /* number of regex split steps (0..4) */
    pcre2_code *split_re[4];
    int split_jit[4];

    int32_t eos_id, bos_id, pad_id;
    int32_t prefix_id;   /* put before an encoded prompt (HF add_special_tokens), -1 = none */
    char *chat_template; /* declared by the model folder, or NULL */

    pthread_mutex_t cache_lock;
    mi_tok_cache_slot *cache; /* [MI_TOK_CACHE_SLOTS] */
};

/* FNV-1a: used by the string map and the word cache. */
static inline uint32_t mi_tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 16777619u; }
    return h;
}

static inline const mi_tok_merge *mi_tok_merge_find(const mi_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t mask = t->merge_cap - 1, i = (uint32_t)(h >> 32) & mask;
    for (;;) {
        const mi_tok_merge *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
        i = (i + 1) & mask;
    }
}

/* UTF-8 helpers (tokenizer_nfc.c). */
/* Length of a valid UTF-8 prefix of s (the whole of n when valid). */
size_t mi_tok_utf8_valid_prefix(const unsigned char *s, size_t n);
/* NFC-normalise s[0..n). Returns 0 and sets *out (malloc'd, *out_len) only
 * when the text changes; returns 0 with *out = NULL when already NFC;
 * MI_TOK_ENOMEM on failure. Input must be valid UTF-8. */
int mi_tok_nfc(const unsigned char *s, size_t n, unsigned char **out, size_t *out_len);

#endif
