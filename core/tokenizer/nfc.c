/* core/tokenizer/nfc.c — UTF-8 validation and Unicode NFC normalisation for
 * the tokenizer (a tokenizer.json may ask for NFC; PCRE2 has none).
 *
 * NFC = canonical decomposition, canonical reordering of combining marks,
 * canonical composition (Unicode UAX #15), with Hangul done algorithmically
 * and the rest from tables generated from Unicode 14 (tokenizer_nfc_data.h).
 * Fast path: text made only of characters that NFC can never touch (no
 * decomposition, combining class 0, never the second of a composable pair)
 * is returned unchanged without copying — that is nearly all real text. */
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/internal.h"
#include "core/tokenizer/nfc_data.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

size_t mi_tok_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t L;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) L = 2;
        else if (c >= 0xE0 && c <= 0xEF) { L = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { L = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return i;
        if (n - i < L) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < L; k++) if ((s[i + k] & 0xC0) != 0x80) return i;
        i += L;
    }
    return n;
}

/* Valid UTF-8 assumed. */
static size_t dec(const unsigned char *s, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); return 2; }
    if (c < 0xF0) { *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu); return 3; }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

static size_t enc(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12)); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18)); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Binary search over a table whose rows start with a code point. */
static long find_row(const uint32_t *tab, size_t rows, size_t width, uint32_t cp) {
    size_t lo = 0, hi = rows;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t v = tab[mid * width];
        if (v == cp) return (long)mid;
        if (v < cp) lo = mid + 1; else hi = mid;
    }
    return -1;
}

static unsigned ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    long r = find_row(&nfc_ccc[0][0], NELEM(nfc_ccc), 2, cp);
    return r < 0 ? 0 : nfc_ccc[r][1];
}

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7,
       LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

/* Can NFC change anything around this character? */
static int needs_nfc(uint32_t cp) {
    if (cp < 0x300) return 0;
    if (cp >= VBASE && cp < VBASE + VCOUNT) return 1;          /* Hangul V jamo */
    if (cp > TBASE && cp < TBASE + TCOUNT) return 1;           /* Hangul T jamo */
    if (cp >= SBASE && cp < SBASE + SCOUNT) return 0;          /* already composed */
    if (ccc_of(cp)) return 1;
    if (find_row(&nfc_decomp_idx[0][0], NELEM(nfc_decomp_idx), 3, cp) >= 0) return 1;
    return find_row(nfc_seconds, NELEM(nfc_seconds), 1, cp) >= 0;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = NELEM(nfc_pairs);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *p = nfc_pairs[mid];
        if (p[0] == a && p[1] == b) return p[2];
        if (p[0] < a || (p[0] == a && p[1] < b)) lo = mid + 1; else hi = mid;
    }
    return 0;
}

int mi_tok_nfc(const unsigned char *s, size_t n, unsigned char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    size_t i = 0;
    for (; i < n; ) {
        if (s[i] < 0xCC) { i += s[i] < 0x80 ? 1 : 2; continue; } /* U+0000..U+02FF */
        uint32_t cp;
        size_t k = dec(s + i, &cp);
        if (needs_nfc(cp)) break;
        i += k;
    }
    if (i >= n) return 0; /* untouched */

    /* Decompose everything into cps[] (a character decomposes into at most
     * 4 code points in Unicode 14; 4 per input byte is a safe bound). */
    uint32_t *cps = malloc(4 * n * sizeof *cps);
    unsigned char *cls = malloc(4 * n);
    if (!cps || !cls) { free(cps); free(cls); return MI_TOK_ENOMEM; }
    size_t m = 0;
    for (size_t j = 0; j < n; ) {
        uint32_t cp;
        j += dec(s + j, &cp);
        if (cp >= SBASE && cp < SBASE + SCOUNT) {
            uint32_t si = cp - SBASE;
            cps[m++] = LBASE + si / NCOUNT;
            cps[m++] = VBASE + (si % NCOUNT) / TCOUNT;
            if (si % TCOUNT) cps[m++] = TBASE + si % TCOUNT;
            continue;
        }
        long r = cp < 0xC0 ? -1 : find_row(&nfc_decomp_idx[0][0], NELEM(nfc_decomp_idx), 3, cp);
        if (r < 0) { cps[m++] = cp; continue; }
        for (uint32_t q = 0; q < nfc_decomp_idx[r][2]; q++) cps[m++] = nfc_decomp_seq[nfc_decomp_idx[r][1] + q];
    }
    for (size_t j = 0; j < m; j++) cls[j] = (unsigned char)ccc_of(cps[j]);
    /* Canonical ordering: stable insertion sort of each run of non-starters. */
    for (size_t j = 1; j < m; j++) {
        if (!cls[j]) continue;
        size_t q = j;
        while (q > 0 && cls[q - 1] > cls[q]) {
            uint32_t tc = cps[q]; cps[q] = cps[q - 1]; cps[q - 1] = tc;
            unsigned char tk = cls[q]; cls[q] = cls[q - 1]; cls[q - 1] = tk;
            q--;
        }
    }
    /* Canonical composition: a character joins the last starter unless a
     * character in between has class 0 or a class >= its own. */
    size_t w = 0;
    long starter = -1;
    int last = -1; /* class of the last character kept (-1: none since starter) */
    for (size_t j = 0; j < m; j++) {
        uint32_t c = cps[j];
        int cc = cls[j];
        if (starter >= 0 && (last == -1 ? 1 : (last != 0 && last < cc))) {
            uint32_t comp = compose(cps[starter], c);
            if (comp) { cps[starter] = comp; continue; }
        }
        if (cc == 0) { starter = (long)w; last = -1; }
        else last = cc;
        cps[w] = c; cls[w] = (unsigned char)cc; w++;
    }
    unsigned char *o = malloc(4 * w + 1);
    if (!o) { free(cps); free(cls); return MI_TOK_ENOMEM; }
    size_t ol = 0;
    for (size_t j = 0; j < w; j++) ol += enc(cps[j], o + ol);
    free(cps); free(cls);
    *out = o;
    *out_len = ol;
    return 0;
}
