/* core/tokenizer/tokenizer.h — BPE tokenizer read from a Hugging Face
 * tokenizer.json: byte-level BPE (GPT-2's kind) and the SentencePiece-style
 * BPE (tests/tokenizer/README.md names which families ship which).
 *
 * What is implemented (and matched against Hugging Face / transformers.js
 * goldens in tests/tokenizer/):
 *   - model.type "BPE" with model.vocab (object token -> id) and model.merges
 *     (either "a b" strings or ["a","b"] arrays; rank = position);
 *     ignore_merges (a word that is a token is that token); byte_fallback,
 *     unk_token and fuse_unk (SentencePiece's kind: a character without a
 *     token becomes its "<0xXX>" byte tokens, else the unk token, one per
 *     run when fused, else nothing, as HF drops it);
 *     continuing_subword_prefix / end_of_word_suffix are refused;
 *   - which kind a file is: one with a ByteLevel step is byte level; one
 *     with byte_fallback or a step only SentencePiece's kind uses (Prepend,
 *     Replace, Metaspace, ByteFallback, Fuse, Strip) works on characters
 *     (core/tokenizer/pipeline.c);
 *   - added_tokens (special and non-special), split out of the text before
 *     normalisation and pre-tokenisation, longest match first, as HF does;
 *     the lstrip / rstrip flags are honoured (whitespace next to the token is
 *     swallowed); single_word is honoured; "normalized" is ignored (all added
 *     tokens are matched on the raw text — every added token of those files has
 *     normalized=false, which is the case where this is exact);
 *   - normalizer: null, "NFC", "Prepend", "Replace" with a {"String": ...}
 *     pattern, or a "Sequence" of those, run on each stretch of text between
 *     added tokens (NFC is implemented in core/tokenizer/nfc.c from Unicode
 *     14 tables; other normalizers are refused at load time with a clear
 *     error rather than ignored);
 *   - pre_tokenizer: "Split" with a {"Regex": ...} or {"String": ...}
 *     pattern (PCRE2, UTF+UCP, JIT when available) and behaviour Isolated,
 *     Removed, MergedWithPrevious or MergedWithNext; "ByteLevel"
 *     (use_regex=false, add_prefix_space=false; use_regex=true uses the
 *     GPT-2 pattern); "Metaspace" (replacement, prepend_scheme always /
 *     first / never or the older add_prefix_space, split); or a "Sequence";
 *   - decoder: ByteLevel (GPT-2 bytes_to_unicode inverse); or a Sequence of
 *     Replace ({"String": ...}), ByteFallback, Fuse, Strip (" ", after Fuse,
 *     stop 0) and Metaspace. Metaspace's decoder drops every replacement of
 *     the first token; here one leading space is taken off the text, the
 *     same wherever a first token holds one replacement at its start.
 * Regex engines differ on what \s is: PCRE2 (UCP) counts U+0085 and U+180E,
 * not U+FEFF; HF's Oniguruma counts U+0085, not U+180E or U+FEFF; JS counts
 * U+FEFF, not U+0085. With the project tokenizer's pattern none of these changed any id in
 * the corpus (which has all three), but U+180E could in principle.
 * Chat templates: rendered by the Jinja engine in core/template
 * (mi_chat_render_template, mi_tokenizer_chat_render; docs/chat-templates.md);
 * mi_chat_render keeps the hard-coded ChatML renderer.
 * Not implemented: dropout, other model types (Unigram, WordPiece).
 *
 * Thread safety: a loaded tokenizer is immutable except for an internal
 * word cache guarded by a mutex; encode/decode may run concurrently.
 */
#ifndef MI_CORE_TOKENIZER_H
#define MI_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_tokenizer mi_tokenizer;

/* Resource limits enforced by the loader (a file beyond them is refused). */
/* tokenizer.json size: the largest real ones are ~35 MB (the project tokenizer: 11 MB);
 * jansson holds a parsed file in up to ~22x its size, so 64 MiB bounds a
 * hostile file at ~1.5 GB of memory (256 MiB allowed ~6 GB). */
#define MI_TOK_MAX_FILE_BYTES   (64u * 1024u * 1024u)
#define MI_TOK_MAX_VOCAB        (4u * 1024u * 1024u)   /* entries and max id + 1 */
#define MI_TOK_MAX_TOKEN_BYTES  (64u * 1024u)          /* one token string */

/* Error codes returned by encode / decode functions (0 = success). */
#define MI_TOK_OK          0
#define MI_TOK_ENOMEM     -1  /* allocation failed */
#define MI_TOK_EUTF8      -2  /* encode input is not valid UTF-8 */
#define MI_TOK_EINVAL     -3  /* NULL argument */
#define MI_TOK_EID        -4  /* decode: token id out of range */
#define MI_TOK_EREGEX     -5  /* PCRE2 matching failed or ran past its work budget */

/* The pre-tokenizer regex's work budget for one encode call (a hostile
 * tokenizer.json pattern must not take minutes): each pcre2_match gets
 * MIN + PER_BYTE x (bytes it can still see) steps (PCRE2's match and depth
 * limits; at most MAX, PCRE2's own default), and the call as a whole
 * SECONDS, plus SECONDS per MiB of text. Past either: MI_TOK_EREGEX.
 * (Measured: "(?:a|aa){1,18}c|[\s\S]" over 3000 'a' stays under every
 * per-match limit and took 15 s; it now stops at the 5 s budget.) */
#define MI_TOK_REGEX_MIN_STEPS 100000u
#define MI_TOK_REGEX_STEPS_PER_BYTE 256u
#define MI_TOK_REGEX_MAX_STEPS 10000000u
#define MI_TOK_REGEX_SECONDS 5.0
const char *mi_tokenizer_strerror(int rc);

/* Load tokenizer.json. Returns NULL on error and writes one line
 * "PATH: problem" into err (if err_len > 0). */
mi_tokenizer *mi_tokenizer_load(const char *tokenizer_json_path, char *err, size_t err_len);

/* Optional: read tokenizer_config.json for eos/bos/pad token names (strings
 * or {"content": ...} objects), resolved to ids, and for the chat template
 * (see mi_tokenizer_chat_template). A field that is absent or null leaves
 * the id at -1. Returns 0, or -1 with "PATH: problem". */
int mi_tokenizer_load_config(mi_tokenizer *tok, const char *tokenizer_config_path,
                             char *err, size_t err_len);

/* The same from a tokenizer.json already parsed (or built in memory, e.g.
 * from a GGUF file's tokenizer.ggml.* keys): root is only read (the caller
 * keeps its reference); name is the PATH of error lines. */
typedef struct json_t json_t;
mi_tokenizer *mi_tokenizer_load_json(const json_t *root, const char *name, char *err, size_t err_len);

/* A BPE vocabulary (byte level, or SentencePiece's: see below) given as arrays rather than as a
 * tokenizer.json (a GGUF file's tokenizer.ggml.tokens, token_type and
 * merges): the same tokenizer mi_tokenizer_load_json builds from the
 * tokenizer.json these arrays stand for, without that JSON in between (for
 * a 151k vocabulary ~30 MB of small nodes at its peak, beside the model):
 *   - a NORMAL token is an entry of model.vocab (a string twice is refused);
 *   - SPECIAL and ADDED tokens are added_tokens, special or not (lstrip,
 *     rstrip, single_word false), listed after model.vocab;
 *   - a SKIP token is left out (its id unused);
 *   - merge i is the string "a b" at model.merges[i];
 *   - normalizer NFC when nfc, else none; pre_tokenizer a Split on
 *     split_regex (Isolated; none when NULL), then ByteLevel without a
 *     regex; decoder ByteLevel.
 * The callbacks hand out token i's (merge i's) bytes, which need not be
 * NUL-terminated and must stay valid during the call; token returns its
 * mi_tok_kind. Each is called more than once per index. tokens_name and
 * merges_name name the arrays in error lines ("tokens", "merges" when NULL). */
typedef enum mi_tok_kind {
    MI_TOK_KIND_NORMAL = 0,
    MI_TOK_KIND_SPECIAL = 1,
    MI_TOK_KIND_ADDED = 2,
    MI_TOK_KIND_SKIP = 3,
} mi_tok_kind;

typedef struct mi_tok_arrays {
    size_t n_tokens; /* ids 0 .. n_tokens-1; 1 .. MI_TOK_MAX_VOCAB */
    int (*token)(const void *ctx, size_t i, const char **s, size_t *len);
    size_t n_merges;
    void (*merge)(const void *ctx, size_t i, const char **s, size_t *len);
    const void *ctx;
    int nfc;
    const char *split_regex;
    const char *tokens_name, *merges_name;
    /* SentencePiece's vocabulary (a GGUF file of that kind)
     * instead of a byte-level one: no merges are given (n_merges 0);
     * score(ctx, i) stands for them, as llama.cpp reads such a file: a
     * token made of two tokens is their merge, the higher score first, the
     * leftmost pair among equal scores. Words are not split; ' ' is "▁",
     * also put before each stretch of text when space_prefix; a character
     * without a token is its "<0xXX>" tokens, else unk_id (-1: dropped);
     * the decoder turns "▁" back into ' ' and "<0xXX>" into the byte, and
     * takes the prefix space off (space_prefix). nfc and split_regex must
     * be 0 and NULL. */
    int sentencepiece;
    float (*score)(const void *ctx, size_t i);
    int space_prefix;
    int32_t unk_id;
} mi_tok_arrays;

/* NULL with "NAME: problem" in err on a vocabulary it refuses (a token
 * empty, over MI_TOK_MAX_TOKEN_BYTES, holding a NUL or not UTF-8; a merge
 * not of two tokens of the vocabulary; a byte with no one-byte token). */
mi_tokenizer *mi_tokenizer_load_arrays(const mi_tok_arrays *a, const char *name, char *err, size_t err_len);

/* What mi_tokenizer_load_config reads, given directly (a GGUF file's
 * tokenizer.ggml.*_token_id and tokenizer.chat_template): ids -1 when
 * unknown, chat_template NULL when none (copied). 0, or -1 with "NAME:
 * problem" for an id outside the vocabulary. */
int mi_tokenizer_set_config(mi_tokenizer *tok, int32_t eos, int32_t bos, int32_t pad,
                            const char *chat_template, const char *name, char *err, size_t err_len);

void mi_tokenizer_free(mi_tokenizer *tok);

/* Encode len bytes of UTF-8 text. parse_special != 0: added tokens marked
 * special (e.g. <|im_start|>) are recognised in the text; parse_special == 0:
 * they are tokenised as plain text (HF's split_special_tokens=True).
 * Non-special added tokens (e.g. <think>) are always recognised, as in HF.
 * No BOS/EOS is added. On success *ids is a malloc'd array (free() it; may
 * be NULL when *n == 0) and 0 is returned; on failure a MI_TOK_E* code. */
int mi_tokenizer_encode(const mi_tokenizer *tok, const char *text, size_t len,
                        int parse_special, int32_t **ids, size_t *n);

/* A prompt as HF's tokenizer(text) encodes it (add_special_tokens=True):
 * the token the tokenizer puts before a text (mi_tokenizer_prefix_id), if
 * any, then mi_tokenizer_encode's ids. For a raw prompt (mi-run -p, a
 * completion); a rendered chat template writes its own (HF's
 * apply_chat_template encodes without adding it). */
int mi_tokenizer_encode_prompt(const mi_tokenizer *tok, const char *text, size_t len,
                               int parse_special, int32_t **ids, size_t *n);

/* The token put before a prompt: tokenizer.json's TemplateProcessing
 * post-processor's leading special token (a <|begin_of_text|> or <bos>), a
 * GGUF's tokenizer.ggml.add_bos_token; -1 when none. */
int32_t mi_tokenizer_prefix_id(const mi_tokenizer *tok);

/* Sets it (-1: none); 0, or -1 with "NAME: problem" for an id outside the
 * vocabulary. */
int mi_tokenizer_set_prefix(mi_tokenizer *tok, int32_t id, const char *name, char *err, size_t err_len);

/* One-shot decode: ids -> malloc'd NUL-terminated UTF-8 string (length in
 * *out_len if not NULL). Special tokens are emitted as their text (no
 * skipping). Invalid UTF-8 byte sequences produced by the ids are replaced
 * by U+FFFD, one per maximal invalid subpart — the same as HF's
 * String::from_utf8_lossy and the WHATWG TextDecoder used by transformers.js.
 * Returns NULL with *rc set (if rc != NULL) on error. */
char *mi_tokenizer_decode(const mi_tokenizer *tok, const int32_t *ids, size_t n,
                          size_t *out_len, int *rc);
/* The same as a continuation (mi_tok_stream_init_after): a token's piece
 * ("▁Paris" is " Paris"), a generated text after its prompt. */
char *mi_tokenizer_decode_after(const mi_tokenizer *tok, const int32_t *ids, size_t n,
                                size_t *out_len, int *rc);

/* Streaming decoder. Feed ids one at a time; each call appends to out only
 * complete, valid UTF-8 characters; a partial multi-byte sequence is held
 * back until the next token completes it. A byte sequence that can no longer
 * become valid is emitted as U+FFFD immediately. flush() emits a U+FFFD for a
 * held-back incomplete tail and resets the state. Concatenating all outputs
 * plus flush equals mi_tokenizer_decode() of the same ids, byte for byte. */
typedef struct mi_tok_stream {
    const mi_tokenizer *tok;
    unsigned char pend[4]; /* held-back prefix of one UTF-8 character */
    unsigned npend;
    unsigned lead;         /* leading spaces still to strip (the decoder's Strip) */
} mi_tok_stream;

void mi_tok_stream_init(mi_tok_stream *st, const mi_tokenizer *tok);
/* The same for text that continues one already shown (generation after a
 * prompt): the leading spaces a decoder strips from the start of a text
 * (Strip, Metaspace) are kept, as llama.cpp and servers decoding in the
 * prompt's context show them ("The capital is" + " Paris"). */
void mi_tok_stream_init_after(mi_tok_stream *st, const mi_tokenizer *tok);
/* Writes the newly completed text to out (not NUL-terminated). out_cap must
 * be at least 3 * (this token's byte length + 4); mi_tok_stream_max_out(tok)
 * is enough for any token. Returns bytes written (>= 0; 0 when the token only
 * extends a held-back prefix), MI_TOK_EID for an unknown id (state kept), or
 * MI_TOK_EINVAL when out_cap is too small. */
int mi_tok_stream_feed(mi_tok_stream *st, int32_t id, char *out, size_t out_cap);
/* out_cap >= 3. Returns bytes written (0 or 3). */
int mi_tok_stream_flush(mi_tok_stream *st, char *out, size_t out_cap);
/* Buffer size that fits any feed call: 3 * (longest token bytes + 4). */
size_t mi_tok_stream_max_out(const mi_tokenizer *tok);

/* Lookups. */
size_t mi_tokenizer_vocab_size(const mi_tokenizer *tok);   /* max id + 1 */
/* Id of a token given exactly as written in tokenizer.json (an added token's
 * content like "<|im_end|>", or a vocab key in byte-level form like "Ġthe");
 * -1 if absent. */
int32_t mi_tokenizer_token_id(const mi_tokenizer *tok, const char *token);
/* The token's string as written in tokenizer.json, or NULL if id is unused. */
const char *mi_tokenizer_token_str(const mi_tokenizer *tok, int32_t id);
/* Decoded bytes of one token (not NUL-terminated) and their count. */
const unsigned char *mi_tokenizer_token_bytes(const mi_tokenizer *tok, int32_t id, size_t *len);
int mi_tokenizer_is_special(const mi_tokenizer *tok, int32_t id); /* special added token */
/* From mi_tokenizer_load_config (-1 when unknown). */
int32_t mi_tokenizer_eos_id(const mi_tokenizer *tok);
int32_t mi_tokenizer_bos_id(const mi_tokenizer *tok);
int32_t mi_tokenizer_pad_id(const mi_tokenizer *tok);

/* The chat template the model folder declares: tokenizer_config.json
 * "chat_template" (a string, or a list of {name, template} of which
 * "default" is used), else chat_template.jinja beside it. NULL when the
 * folder declares none (or mi_tokenizer_load_config was not called). */
const char *mi_tokenizer_chat_template(const mi_tokenizer *tok);

/* Chat rendering without a Jinja engine. mi_chat_format_detect() reads what
 * a template's text declares and picks a renderer: today the ChatML family
 * ("<|im_start|>ROLE\nCONTENT<|im_end|>\n" turns), with reasoning blocks
 * when the template handles "</think>" and <tool_response> turns when it
 * wraps tool output so (the exact rules are in core/tokenizer/chat.c). The
 * renderer is checked against @huggingface/jinja rendering real templates
 * (tests/tokenizer/golden_chat.json). Roles other than system/user/
 * assistant/tool are rendered like user. Not supported: tools /
 * tool_calls / reasoning_content fields. */
typedef enum mi_chat_family {
    MI_CHAT_NONE = 0,
    MI_CHAT_CHATML = 1,
} mi_chat_family;

typedef struct mi_chat_format {
    mi_chat_family family;
    int reasoning;     /* <think> blocks in assistant turns and the generation prompt */
    int tool_response; /* tool messages as <tool_response> blocks in one user turn */
} mi_chat_format;

/* 0 with *out set, or -1 when the template is none this renderer knows. */
int mi_chat_format_detect(const char *chat_template, mi_chat_format *out);
const char *mi_chat_family_name(mi_chat_family f);

typedef struct mi_chat_msg {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content;
} mi_chat_msg;

/* A malloc'd prompt; NULL on ENOMEM or a format of family NONE.
 * enable_thinking matters only to a format with reasoning. */
char *mi_chat_render(const mi_chat_format *f, const mi_chat_msg *msgs, size_t n_msgs,
                     int add_generation_prompt, int enable_thinking);

/* Any chat template, rendered by the Jinja engine (core/template/jinja.h)
 * as transformers renders it: the variables are messages (a list of
 * {role, content}), add_generation_prompt, enable_thinking, and bos_token /
 * eos_token when given (NULL: left undefined). It reproduces
 * tests/tokenizer/golden_chat.json and tests/template/golden_templates.json
 * (the real templates docs/chat-templates.md names) byte for
 * byte. A malloc'd prompt, or NULL with err set to one line
 * "chat template line L col C: PROBLEM" (a template that does not parse,
 * one outside the engine's subset, the template's own raise_exception(),
 * a limit hit) or "out of memory". */
typedef struct mi_chat_template_vars {
    int add_generation_prompt;
    int enable_thinking;
    const char *bos_token, *eos_token;
} mi_chat_template_vars;
char *mi_chat_render_template(const char *chat_template, const mi_chat_msg *msgs, size_t n_msgs,
                              const mi_chat_template_vars *vars, char *err, size_t errlen);

/* The tokenizer's own template (mi_tokenizer_chat_template) through
 * mi_chat_render_template, with bos_token / eos_token the text of the
 * tokens tokenizer_config.json names (left undefined where it names none).
 * NULL with err set when the folder declares no template, as above otherwise. */
char *mi_tokenizer_chat_render(const mi_tokenizer *tok, const mi_chat_msg *msgs, size_t n_msgs,
                               int add_generation_prompt, int enable_thinking, char *err, size_t errlen);

/* The same renders with the template's variables given as one jansson
 * object (struct json_t: core/template/jinja.h), so messages may carry
 * what mi_chat_msg cannot: tool_calls (function.arguments a mapping or a
 * string), tool_call_id, name, reasoning_content; and tools (the list as
 * an OpenAI client sends it), add_generation_prompt, enable_thinking,
 * anything else the template reads. The object is not changed;
 * mi_tokenizer_chat_render_ctx sets bos_token / eos_token (as above) on a
 * shallow copy of it unless it has them. Errors as above. */
struct json_t;
char *mi_chat_render_template_ctx(const char *chat_template, const struct json_t *ctx, char *err,
                                  size_t errlen);
char *mi_tokenizer_chat_render_ctx(const mi_tokenizer *tok, const struct json_t *ctx, char *err,
                                   size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
