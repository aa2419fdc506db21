/* The state of one OpenAI call, shared by its start (openai.c) and its
 * replies (openai_reply.c). */
#ifndef WNA16_SERVER_OPENAI_INTERNAL_H
#define WNA16_SERVER_OPENAI_INTERNAL_H

#include "server/openai.h"
#include "server/tool_parse.h"

/* One generated sequence. */
typedef struct seq {
    srv_request *r;
    int prompt;           /* which prompt of the list */
    char *echo;           /* completions with echo: the prompt's text */
    bool echo_pending;    /* streamed echo waiting for the prompt's logprobs */
    size_t text_offset;   /* completions' logprobs: bytes of text before the next token */
    srv_text all;         /* the whole text (whole replies) */
    srv_stream_split split;
    bool sent_role, finished, called;
    double score;         /* best_of: cumulative logprob */
} seq;

struct srv_call {
    srv_api *a;
    bool chat, stream, usage, echo, hide_logprobs;
    int n, best_of, n_prompts, n_seqs;
    seq *s;
    char id[48];
    long long created;
    /* chat */
    int tool_format; /* -1: the output is not parsed for calls */
    bool named_tool, reasoning, include_reasoning;
    /* streaming */
    srv_text out;
    bool started, ended;
};

#endif
