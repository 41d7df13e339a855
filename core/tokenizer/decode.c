/* core/tokenizer/decode.c — token ids -> UTF-8 text, one-shot and
 * streaming. Each token's bytes were precomputed at load time (byte-level
 * inverse, or the raw text of tokens that are not byte-level, as HF's
 * ByteLevel decoder does; for SentencePiece's kind the decoder's
 * replacements and "<0xXX>" bytes, pipeline.c), and leading spaces the
 * decoder strips are taken off the start of the text. The byte stream is then checked as UTF-8 with the
 * WHATWG / Unicode "maximal subpart" rule: every maximal invalid subpart
 * becomes one U+FFFD. That is exactly Rust's String::from_utf8_lossy (HF
 * tokenizers) and TextDecoder (transformers.js), and it can be run
 * incrementally, so streaming and one-shot output agree byte for byte. */
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/internal.h"

static const unsigned char REPL[3] = { 0xEF, 0xBF, 0xBD }; /* U+FFFD */

/* Total length of the UTF-8 sequence started by lead byte c (0 = invalid lead). */
static unsigned seq_len(unsigned c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Allowed range of the byte following pend[0..k) (k >= 1). */
static void next_range(const unsigned char *pend, unsigned k, unsigned *lo, unsigned *hi) {
    *lo = 0x80; *hi = 0xBF;
    if (k != 1) return;
    switch (pend[0]) { /* excludes overlongs, surrogates and > U+10FFFF */
    case 0xE0: *lo = 0xA0; break;
    case 0xED: *hi = 0x9F; break;
    case 0xF0: *lo = 0x90; break;
    case 0xF4: *hi = 0x8F; break;
    default: break;
    }
}

/* Push one byte through the validator; writes to o, returns bytes written. */
static size_t utf8_byte(mi_tok_stream *st, unsigned b, unsigned char *o) {
    size_t w = 0;
    if (st->npend) {
        unsigned lo, hi;
        next_range(st->pend, st->npend, &lo, &hi);
        if (b >= lo && b <= hi) {
            st->pend[st->npend++] = (unsigned char)b;
            if (st->npend == seq_len(st->pend[0])) {
                memcpy(o, st->pend, st->npend);
                w = st->npend;
                st->npend = 0;
            }
            return w;
        }
        /* the held prefix can no longer complete: one U+FFFD for it, then
         * b starts afresh */
        memcpy(o, REPL, 3);
        w = 3;
        st->npend = 0;
    }
    unsigned L = seq_len(b);
    if (L == 1) o[w++] = (unsigned char)b;
    else if (L == 0) { memcpy(o + w, REPL, 3); w += 3; }
    else st->pend[st->npend++] = (unsigned char)b;
    return w;
}

void mi_tok_stream_init(mi_tok_stream *st, const mi_tokenizer *tok) {
    memset(st, 0, sizeof *st);
    st->tok = tok;
    st->lead = tok ? tok->strip_lead : 0;
}

void mi_tok_stream_init_after(mi_tok_stream *st, const mi_tokenizer *tok) {
    mi_tok_stream_init(st, tok);
    st->lead = 0;
}

size_t mi_tok_stream_max_out(const mi_tokenizer *tok) {
    /* worst case: every byte, and the held prefix, becomes a 3-byte U+FFFD */
    return tok ? 3 * (tok->max_token_bytes + 4) : 0;
}

int mi_tok_stream_feed(mi_tok_stream *st, int32_t id, char *out, size_t cap) {
    const mi_tokenizer *t = st ? st->tok : NULL;
    if (!t || !out) return MI_TOK_EINVAL;
    if (id < 0 || (uint32_t)id >= t->vocab_size || t->str_off[id] == UINT32_MAX) return MI_TOK_EID;
    size_t nb = t->bytes_len[id];
    if (cap < 3 * (nb + 4)) return MI_TOK_EINVAL;
    const unsigned char *b = t->bytepool + t->bytes_off[id];
    size_t w = 0;
    for (size_t i = 0; i < nb; i++) {
        if (st->lead) { /* the decoder's Strip: leading spaces of the text */
            if (b[i] == ' ') { st->lead--; continue; }
            st->lead = 0;
        }
        w += utf8_byte(st, b[i], (unsigned char *)out + w);
    }
    return (int)w;
}

int mi_tok_stream_flush(mi_tok_stream *st, char *out, size_t cap) {
    if (!st || !out || cap < 3) return MI_TOK_EINVAL;
    if (!st->npend) return 0;
    st->npend = 0;
    memcpy(out, REPL, 3);
    return 3;
}

static char *decode_ids(const mi_tokenizer *t, const int32_t *ids, size_t n, size_t *out_len, int *rc, int after);

char *mi_tokenizer_decode(const mi_tokenizer *t, const int32_t *ids, size_t n, size_t *out_len, int *rc) {
    return decode_ids(t, ids, n, out_len, rc, 0);
}

char *mi_tokenizer_decode_after(const mi_tokenizer *t, const int32_t *ids, size_t n, size_t *out_len, int *rc) {
    return decode_ids(t, ids, n, out_len, rc, 1);
}

static char *decode_ids(const mi_tokenizer *t, const int32_t *ids, size_t n, size_t *out_len, int *rc, int after) {
    if (out_len) *out_len = 0;
    if (rc) *rc = 0;
    if (!t || (!ids && n)) { if (rc) *rc = MI_TOK_EINVAL; return NULL; }
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);
    if (!buf) { if (rc) *rc = MI_TOK_ENOMEM; return NULL; }
    mi_tok_stream st;
    if (after) mi_tok_stream_init_after(&st, t);
    else mi_tok_stream_init(&st, t);
    for (size_t i = 0; i <= n; i++) {
        int32_t id = i < n ? ids[i] : -1;
        size_t need = i < n && id >= 0 && (uint32_t)id < t->vocab_size ? 3 * ((size_t)t->bytes_len[id] + 4) : 3;
        if (len + need + 1 > cap) {
            while (len + need + 1 > cap) cap *= 2;
            char *p = realloc(buf, cap);
            if (!p) { free(buf); if (rc) *rc = MI_TOK_ENOMEM; return NULL; }
            buf = p;
        }
        int w = i < n ? mi_tok_stream_feed(&st, id, buf + len, cap - len) : mi_tok_stream_flush(&st, buf + len, cap - len);
        if (w < 0) { free(buf); if (rc) *rc = w; return NULL; }
        len += (size_t)w;
    }
    buf[len] = 0;
    if (out_len) *out_len = len;
    return buf;
}
