/* core/tokenizer/internal.h — shared state of the tokenizer implementation
 * (load.c, encode.c, decode.c, nfc.c). Not a public API. */
#ifndef MI_CORE_TOKENIZER_INTERNAL_H
#define MI_CORE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <jansson.h>
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

/* Normalizer steps, applied in order to each stretch of text between added
 * tokens (HF normalises after splitting the added tokens out). */
enum { MI_TOK_NORM_NFC = 1, MI_TOK_NORM_PREPEND, MI_TOK_NORM_REPLACE };
typedef struct {
    int kind;
    char *a, *b;       /* PREPEND: a; REPLACE: every a (a literal) -> b */
    size_t na, nb;
} mi_tok_norm;

/* Pre-tokenizer steps, applied in order to each normalised stretch; each
 * cuts its pieces further. A Split's behaviour says where a match goes:
 * a piece of its own, dropped, or joined to the piece before or after it. */
enum { MI_TOK_PRE_SPLIT = 1, MI_TOK_PRE_METASPACE };
enum { MI_TOK_ISOLATED = 0, MI_TOK_REMOVED, MI_TOK_MERGED_PREV, MI_TOK_MERGED_NEXT };
enum { MI_TOK_PREPEND_NEVER = 0, MI_TOK_PREPEND_FIRST, MI_TOK_PREPEND_ALWAYS };
typedef struct {
    int kind;
    int behavior;           /* SPLIT: MI_TOK_ISOLATED .. */
    pcre2_code *re;         /* SPLIT */
    int jit;
    char rep[8];            /* METASPACE: the replacement of ' ' (UTF-8) */
    size_t nrep;
    int prepend, split;     /* METASPACE: MI_TOK_PREPEND_*, cut before each rep */
} mi_tok_pre;
#define MI_TOK_MAX_STEPS 4

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

    /* Byte-level BPE (GPT-2's ByteLevel) starts a word as one symbol per
     * byte; the other kind (SentencePiece's) one symbol per character,
     * looked up by its text. */
    int byte_level;
    int32_t byte_id[256];    /* byte level: the one-byte token of each byte */
    int32_t fallback_id[256];/* chars: "<0xXX>" of each byte (byte_fallback), -1 = none */
    int byte_fallback;
    int32_t unk_id;          /* chars: the model's unk_token, -1 = none (the char is dropped) */
    int fuse_unk;            /* consecutive unknown chars give one unk */
    int ignore_merges;       /* a word that is a token is that token, merges or not */
    mi_tok_merge *merges;    /* [merge_cap] */
    uint32_t merge_cap;      /* power of two */

    mi_tok_added *added;     /* [n_added], sorted by length, longest first */
    uint32_t n_added;
    unsigned char added_first[256]; /* 1 if some added token starts with this byte */

    mi_tok_norm norm[MI_TOK_MAX_STEPS];
    int n_norm;
    mi_tok_pre pre[MI_TOK_MAX_STEPS];
    int n_pre;
    unsigned strip_lead;     /* decoder: leading spaces taken off a decoded text (Strip, Metaspace) */

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

/* "PATH: problem" into err, one line (load.c). */
void mi_tok_err(char *err, size_t err_len, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The id of the token whose text is s[0, n), or -1 (load.c). */
int32_t mi_tok_lookup(const mi_tokenizer *t, const char *s, size_t n);

/* The steps around the BPE model (pipeline.c). */
/* 1 when root describes a byte-level BPE, 0 for SentencePiece's kind. */
int mi_tok_byte_level(json_t *root);
/* A Split step on pat[0, n) (a literal when literal), with the behaviour
 * MI_TOK_ISOLATED ..; -1 with err set. */
int mi_tok_add_split(mi_tokenizer *t, const char *pat, size_t n, int literal, int behavior, const char *path,
                     char *err, size_t el);
/* normalizer, pre_tokenizer, decoder and the model's fields of its kind
 * (t->byte_level set, the tokens and string map filled). */
int mi_tok_load_steps(mi_tokenizer *t, json_t *root, const char *path, char *err, size_t el);
void mi_tok_free_steps(mi_tokenizer *t);
/* A SentencePiece vocabulary given as arrays (t->byte_fallback set): the
 * "<0xXX>" tokens found and every token's bytes as its decoder gives them
 * ("▁" is ' ', "<0xXX>" the byte). */
int mi_tok_sentencepiece_bytes(mi_tokenizer *t, const char *path, char *err, size_t el);
/* Every non-overlapping from[0, nf) in s[0, n), left to right, as
 * to[0, nt): 0 with a malloc'd *out (*out_len bytes), or *out NULL when
 * none was there; MI_TOK_ENOMEM. The normalizer's and the decoder's
 * Replace. */
int mi_tok_replace_all(const unsigned char *s, size_t n, const char *from, size_t nf, const char *to, size_t nt,
                       unsigned char **out, size_t *out_len);

/* UTF-8 helpers (nfc.c). */
/* Length of a valid UTF-8 prefix of s (the whole of n when valid). */
size_t mi_tok_utf8_valid_prefix(const unsigned char *s, size_t n);
/* NFC-normalise s[0..n). Returns 0 and sets *out (malloc'd, *out_len) only
 * when the text changes; returns 0 with *out = NULL when already NFC;
 * MI_TOK_ENOMEM on failure. Input must be valid UTF-8. */
int mi_tok_nfc(const unsigned char *s, size_t n, unsigned char **out, size_t *out_len);

#endif
