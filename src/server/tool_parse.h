/* A model's raw output split as vLLM's parsers split it (tool_parse.c):
 * reasoning (Qwen3's <think> block) from the answer, and the answer into
 * content and OpenAI tool calls by a model family's syntax (vLLM's
 * --tool-call-parser names: hermes, llama3_json, mistral). The stream
 * splitters give the same result piece by piece: what they emit, joined,
 * equals the whole-output parse. jansson only (no server state), so the
 * parsers can be fuzzed on their own. */
#ifndef WNA16_SERVER_TOOL_PARSE_H
#define WNA16_SERVER_TOOL_PARSE_H

#include "wna16.h"

#include <stdbool.h>
#include <stddef.h>

/* vLLM's names; -1 when unknown. */
int srv_tool_format_from_name(const char *name);
const char *srv_tool_format_name(int format);
/* The format a chat template's text shows (Hermes <tool_call>, Llama 3's
 * ipython / "parameters", Mistral's [TOOL_CALLS]), or -1 when unclear. */
int srv_tool_format_detect(const char *chat_template);

/* A growable string (the server sees only wna16.h). */
typedef struct srv_text {
    char *data; /* NUL-terminated once anything was put */
    size_t len, cap;
} srv_text;
bool srv_text_put(srv_text *t, const char *s, size_t n);
void srv_text_free(srv_text *t);

typedef struct srv_tool_call {
    char *name;
    char *arguments; /* JSON text, as vLLM writes it (json.dumps) */
} srv_tool_call;

typedef struct srv_tool_calls {
    srv_tool_call *v;
    size_t n;
} srv_tool_calls;
void srv_tool_calls_free(srv_tool_calls *c);

/* Splits a whole answer: *content (malloc'd, NULL when none is left) and
 * the calls. Output that does not parse as calls is all content (as vLLM).
 * Returns false only when memory ran out. */
bool srv_tools_parse(int format, const char *text, size_t len, char **content,
                     srv_tool_calls *calls);

/* Qwen3's reasoning: an output that begins with <think> is reasoning up to
 * </think> (all of it when it never closes); the rest is the answer. */
typedef struct srv_reasoning_split {
    char *reasoning, *content; /* malloc'd, NULL when empty */
} srv_reasoning_split;
bool srv_reasoning_parse(const char *text, size_t len, srv_reasoning_split *out);

/* ---------------------------------------------------------- streaming */

/* Pieces of output in, deltas out: reasoning and content as soon as they
 * cannot be part of a marker, tool calls at the end (parsed from the whole
 * held text, so they equal the non-streamed parse). */
typedef struct srv_stream_split {
    bool reasoning;    /* --reasoning-parser qwen3 */
    int tool_format;   /* -1: no tool parsing */
    int state;         /* internal */
    srv_text pending;  /* bytes not yet decided */
    srv_text held;     /* tool-call text held to the end */
} srv_stream_split;

typedef struct srv_stream_delta {
    srv_text reasoning, content; /* to send now (may be empty) */
    srv_tool_calls calls;         /* at the end only */
} srv_stream_delta;

void srv_stream_split_init(srv_stream_split *s, bool reasoning, int tool_format);
/* Takes a piece (final: the output ended) and appends what can go out to
 * d (cleared by the caller with srv_stream_delta_clear). */
bool srv_stream_split_push(srv_stream_split *s, const char *text, size_t len, bool final,
                           srv_stream_delta *d);
void srv_stream_split_free(srv_stream_split *s);
void srv_stream_delta_clear(srv_stream_delta *d);

#endif
