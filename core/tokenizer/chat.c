/* core/tokenizer/chat.c — chat templates.
 *
 * mi_chat_render_template / mi_tokenizer_chat_render render any template
 * with the Jinja engine (core/template). mi_chat_format_detect /
 * mi_chat_render below are the older renderer without a Jinja engine:
 * A model folder declares its template (tokenizer_config.json
 * "chat_template", or chat_template.jinja beside it). mi_chat_format_detect()
 * reads what the template text declares and picks a renderer; only the
 * ChatML family is rendered today, with two features a template may carry:
 *
 *   plain ChatML: each message "<|im_start|>ROLE\nCONTENT<|im_end|>\n";
 *     add_generation_prompt: "<|im_start|>assistant\n".
 *   reasoning (the template handles "</think>", as reasoning models' templates do):
 *     assistant content is split at the last "</think>" (text before it is
 *     reasoning, text after it, left-stripped of '\n', is the answer). After
 *     the last user query, the final message -- or one with non-empty
 *     reasoning -- is rendered as
 *       "<|im_start|>assistant\n<think>\nREASONING\n</think>\n\nANSWER<|im_end|>\n"
 *     (REASONING stripped of '\n' at both ends); earlier ones as
 *       "<|im_start|>assistant\nANSWER<|im_end|>\n";
 *     add_generation_prompt adds "<think>\n\n</think>\n\n" when
 *     enable_thinking == 0.
 *   tool responses (the template wraps tool output in <tool_response>):
 *     consecutive tool messages share one user turn:
 *       "<|im_start|>user" + ("\n<tool_response>\nCONTENT\n</tool_response>")* + "<|im_end|>\n"
 *     and the "last user query" is the last user message whose content is
 *     not wrapped in <tool_response>...</tool_response>.
 * Both are checked against @huggingface/jinja rendering the real templates
 * (tests/tokenizer/golden_chat.json, made by tools/node/chat_goldens.mjs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/template/jinja.h"
#include "core/tokenizer/internal.h"
#include "core/tokenizer/tokenizer.h"

typedef struct { char *p; size_t n, cap; int oom; } sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (b->n + n + 1 > c) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q; b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static int ends_with(const char *s, const char *p) {
    size_t a = strlen(s), b = strlen(p);
    return a >= b && memcmp(s + a - b, p, b) == 0;
}

/* Last occurrence of needle in [s, s+n), or NULL. */
static const char *last_of(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    if (n < k) return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0) return s + i;
    return NULL;
}

int mi_chat_format_detect(const char *tmpl, mi_chat_format *out) {
    memset(out, 0, sizeof *out);
    if (!tmpl || !strstr(tmpl, "<|im_start|>") || !strstr(tmpl, "<|im_end|>")) return -1;
    out->family = MI_CHAT_CHATML;
    out->reasoning = strstr(tmpl, "</think>") != NULL;
    out->tool_response = strstr(tmpl, "<tool_response>") != NULL;
    return 0;
}

const char *mi_chat_family_name(mi_chat_family f) {
    return f == MI_CHAT_CHATML ? "chatml" : "none";
}

char *mi_chat_render(const mi_chat_format *f, const mi_chat_msg *msgs, size_t n,
                     int add_generation_prompt, int enable_thinking) {
    if (!f || f->family != MI_CHAT_CHATML) return NULL;
    sbuf b = {0};
    put(&b, "", 0); /* an empty conversation renders "" rather than NULL */
    /* index of the last real user query (the template's ns.last_query_index) */
    long last_query = (long)n - 1;
    for (size_t k = n; k-- > 0;) {
        const char *r = msgs[k].role ? msgs[k].role : "", *c = msgs[k].content ? msgs[k].content : "";
        if (!strcmp(r, "user") &&
            !(f->tool_response && starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = (long)k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role ? msgs[i].role : "";
        const char *content = msgs[i].content ? msgs[i].content : "";
        if (f->reasoning && !strcmp(role, "assistant")) {
            size_t cl = strlen(content);
            const char *ans = content, *rs = "", *re = rs;
            const char *et = last_of(content, cl, "</think>");
            if (et) {
                /* content.split('</think>')[-1].lstrip('\n') */
                ans = et + 8;
                while (*ans == '\n') ans++;
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *first_et = strstr(content, "</think>");
                const char *rend = first_et;
                while (rend > content && rend[-1] == '\n') rend--;
                const char *st = last_of(content, (size_t)(rend - content), "<think>");
                rs = st ? st + 7 : content;
                while (rs < rend && *rs == '\n') rs++;
                re = rend;
            }
            puts_(&b, "<|im_start|>assistant\n");
            if ((long)i > last_query && (i + 1 == n || re > rs)) {
                /* reasoning_content.strip('\n') */
                while (rs < re && *rs == '\n') rs++;
                while (re > rs && re[-1] == '\n') re--;
                puts_(&b, "<think>\n");
                put(&b, rs, (size_t)(re - rs));
                puts_(&b, "\n</think>\n\n");
                while (*ans == '\n') ans++;
            }
            puts_(&b, ans);
            puts_(&b, "<|im_end|>\n");
        } else if (f->tool_response && !strcmp(role, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role ? msgs[i - 1].role : "", "tool")) puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            puts_(&b, content);
            puts_(&b, "\n</tool_response>");
            if (i + 1 == n || strcmp(msgs[i + 1].role ? msgs[i + 1].role : "", "tool")) puts_(&b, "<|im_end|>\n");
        } else {
            puts_(&b, "<|im_start|>");
            puts_(&b, role);
            puts_(&b, "\n");
            puts_(&b, content);
            puts_(&b, "<|im_end|>\n");
        }
    }
    if (add_generation_prompt) {
        puts_(&b, "<|im_start|>assistant\n");
        if (f->reasoning && !enable_thinking) puts_(&b, "<think>\n\n</think>\n\n");
    }
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}

/* tmpl rendered with ctx, which it frees; oom: building ctx ran out of memory. */
static char *render_ctx(const char *tmpl, json_t *ctx, int oom, char *err, size_t el) {
    if (oom) {
        json_decref(ctx);
        if (err && el) snprintf(err, el, "out of memory");
        return NULL;
    }
    char *s = mi_chat_render_template_ctx(tmpl, ctx, err, el);
    json_decref(ctx);
    return s;
}

char *mi_chat_render_template(const char *tmpl, const mi_chat_msg *msgs, size_t n,
                              const mi_chat_template_vars *v, char *err, size_t el) {
    if (err && el) err[0] = 0;
    if (!tmpl) { if (err && el) snprintf(err, el, "no chat template"); return NULL; }
    json_t *ctx = json_object(), *ms = json_array();
    int oom = !ctx || !ms || json_object_set_new(ctx, "messages", ms);
    for (size_t i = 0; i < n && !oom; i++) {
        json_t *m = json_object();
        oom = !m || json_array_append_new(ms, m) ||
              json_object_set_new(m, "role", json_string(msgs[i].role ? msgs[i].role : "")) ||
              json_object_set_new(m, "content", json_string(msgs[i].content ? msgs[i].content : ""));
    }
    if (!oom && v) {
        oom = json_object_set_new(ctx, "add_generation_prompt", json_boolean(v->add_generation_prompt)) ||
              json_object_set_new(ctx, "enable_thinking", json_boolean(v->enable_thinking)) ||
              (v->bos_token && json_object_set_new(ctx, "bos_token", json_string(v->bos_token))) ||
              (v->eos_token && json_object_set_new(ctx, "eos_token", json_string(v->eos_token)));
    }
    return render_ctx(tmpl, ctx, oom, err, el);
}

char *mi_chat_render_template_ctx(const char *tmpl, const json_t *ctx, char *err, size_t el) {
    char e[512] = "";
    if (err && el) err[0] = 0;
    if (!tmpl) { if (err && el) snprintf(err, el, "no chat template"); return NULL; }
    mi_jinja_opts o = {.now = (int64_t)time(NULL)};
    char *s = mi_jinja_render_text(tmpl, ctx, &o, e, sizeof e, NULL);
    if (!s && err && el) snprintf(err, el, "chat template %s", e);
    return s;
}

static const char *token_text(const mi_tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->vocab_size || t->str_off[id] == UINT32_MAX) return NULL;
    return t->strpool + t->str_off[id];
}

char *mi_tokenizer_chat_render(const mi_tokenizer *tok, const mi_chat_msg *msgs, size_t n,
                               int add_generation_prompt, int enable_thinking, char *err, size_t el) {
    const char *tmpl = mi_tokenizer_chat_template(tok);
    if (!tmpl) {
        if (err && el) snprintf(err, el, "declares no chat_template (nor is there a chat_template.jinja)");
        return NULL;
    }
    mi_chat_template_vars v = {add_generation_prompt, enable_thinking, token_text(tok, tok->bos_id), token_text(tok, tok->eos_id)};
    return mi_chat_render_template(tmpl, msgs, n, &v, err, el);
}

char *mi_tokenizer_chat_render_ctx(const mi_tokenizer *tok, const json_t *ctx, char *err, size_t el) {
    if (err && el) err[0] = 0;
    const char *tmpl = mi_tokenizer_chat_template(tok);
    if (!tmpl) {
        if (err && el) snprintf(err, el, "declares no chat_template (nor is there a chat_template.jinja)");
        return NULL;
    }
    json_t *c = json_is_object(ctx) ? json_copy((json_t *)ctx) : json_object();
    const char *bos = token_text(tok, tok->bos_id), *eos = token_text(tok, tok->eos_id);
    int oom = !c || (bos && !json_object_get(c, "bos_token") && json_object_set_new(c, "bos_token", json_string(bos))) ||
              (eos && !json_object_get(c, "eos_token") && json_object_set_new(c, "eos_token", json_string(eos)));
    return render_ctx(tmpl, c, oom, err, el);
}
