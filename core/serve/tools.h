/* mi-serve's tool calls, response side: the model's generated text → OpenAI
 * tool_calls. Pure: no model, no I/O, no locks (unit-tested by
 * tests/serve/test_serve_tools.c).
 *
 * Formats, chosen by what the chat template's text asks the model for:
 *  - TAGGED (the template mentions <tool_call>, the Hermes-style tags):
 *    <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, any number,
 *    text around them; an unclosed last block runs to the end of the text.
 *  - BARE_JSON (the template asks for {"name": ..., "parameters": ...}):
 *    the whole message (after an optional <|python_tag|>) is one
 *    JSON object {"name", "parameters" (or "arguments")}, or several
 *    separated by ';'.
 * A malformed call (not JSON, no name, arguments not an object) leaves the
 * whole text plain content, as vLLM does; nothing here crashes or grows
 * without bound (at most SERVE_MAX_TOOL_CALLS calls, JSON nesting at most
 * SERVE_MAX_JSON_DEPTH). */
#ifndef MI_CORE_SERVE_TOOLS_H
#define MI_CORE_SERVE_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#define SERVE_MAX_TOOL_CALLS 128

typedef enum { SERVE_TOOLS_NONE = 0, SERVE_TOOLS_TAGGED, SERVE_TOOLS_BARE_JSON } serve_tools_fmt;

/* The format a chat template's text asks for; NONE for NULL or no known one. */
serve_tools_fmt serve_tools_detect(const char *chat_template);

/* Parses text[0..len). Returns the number of calls found (0: none, or a
 * malformed one) and, when > 0, *calls: a new array of OpenAI tool calls
 * [{id: "call_...", type: "function", function: {name, arguments: JSON
 * string}}] (only the first when !parallel) and *content: a new string of
 * the text outside the calls, trimmed, or NULL when that is empty. -1 on
 * out of memory. */
int serve_tools_parse(serve_tools_fmt fmt, const char *text, size_t len, int parallel,
                      json_t **calls, json_t **content);

/* A non-streamed chat message: {role: "assistant", content, tool_calls?}
 * from the generated text; *called is set to 1 when it holds tool calls
 * (finish_reason then "tool_calls"). NULL on out of memory. fmt NONE:
 * plain content. */
json_t *serve_tools_message(serve_tools_fmt fmt, const char *text, size_t len, int parallel,
                            int *called);

/* Streaming: content deltas pass through until a call may be starting
 * (TAGGED: "<tool_call>", or a prefix of it at the end of what came so far;
 * BARE_JSON: the message's first non-space text is '{' or <|python_tag|>); from
 * there the text is held, and serve_tool_stream_end parses it. */
typedef struct serve_tool_stream {
  serve_tools_fmt fmt;
  int parallel;
  int holding; /* a call may have started: everything from `held` on is held */
  int decided; /* BARE_JSON: the message's start has been seen */
  char *buf;   /* text not yet released */
  size_t len, cap;
} serve_tool_stream;

void serve_tool_stream_init(serve_tool_stream *s, serve_tools_fmt fmt, int parallel);
/* Feeds one piece; *out / *out_len: the text to send as content now (a
 * malloc'd string the caller frees, NULL when nothing). -1 on out of memory. */
int serve_tool_stream_feed(serve_tool_stream *s, const char *text, size_t len, char **out,
                           size_t *out_len);
/* The end of the text: a new array of the deltas still to send, in order:
 * {content} for held text that is not a call (or text around calls), then
 * for each call i {tool_calls: [{index: i, id, type: "function", function:
 * {name, arguments: ""}}]} and {tool_calls: [{index: i, function:
 * {arguments}}]}. *called: 1 when calls were found. NULL on out of memory. */
json_t *serve_tool_stream_end(serve_tool_stream *s, int *called);
void serve_tool_stream_free(serve_tool_stream *s);

#endif
