/* OpenAI request bodies to engine parameters (api.c). Each parser returns 0,
 * or an HTTP status (400; 503 when memory ran out) with the message in err. */
#ifndef WNA16_SERVER_API_H
#define WNA16_SERVER_API_H

#include "server/requests.h"

#include <jansson.h>

#define SRV_ERR_MAX 512
#define SRV_MAX_CHOICES 64 /* n and best_of at most */

enum { SRV_TOOL_CHOICE_AUTO, SRV_TOOL_CHOICE_NONE, SRV_TOOL_CHOICE_REQUIRED, SRV_TOOL_CHOICE_NAMED };

typedef struct srv_request_info {
    const char *model; /* as the client named it (borrowed from the body) */
    bool stream, echo, include_usage;
    int n, best_of;    /* choices returned, sequences generated per prompt */
    unsigned given;    /* WNA16_GEN_* bits of the sampler fields the request set */
    bool include_reasoning;
    /* chat (srv_parse_chat_fields) */
    char *messages;        /* JSON text (malloc'd) */
    char *tools;           /* JSON text of the tools list (malloc'd) or NULL */
    int tool_choice;       /* SRV_TOOL_CHOICE_* */
    const char *named_tool; /* SRV_TOOL_CHOICE_NAMED (borrowed from the body) */
    bool parallel_tool_calls;
    char *template_kwargs;     /* JSON text (malloc'd) or NULL */
    const char *chat_template; /* per request (borrowed) or NULL */
    bool add_generation_prompt, add_special_tokens;
} srv_request_info;

void srv_request_info_free(srv_request_info *info);

/* max_tokens is left -1 when absent (the caller picks the endpoint's default). */
int srv_parse_params(const json_t *body, bool chat, int64_t vocab, srv_request_info *info,
                     srv_params *p, char *err);
/* Everything a request may carry beyond srv_parse_params: structured
 * outputs (response_format, vLLM's structured_outputs and guided_*),
 * logit_bias, n and best_of, prompt_logprobs, the output's text options,
 * and the known fields this server cannot honour (400, naming them). */
int srv_parse_extras(const json_t *body, bool chat, int64_t vocab, srv_request_info *info,
                     srv_params *p, char *err);
/* The chat fields: messages, tools, tool_choice, parallel_tool_calls,
 * chat_template_kwargs, chat_template, add_generation_prompt (default
 * add_gen), add_special_tokens. */
int srv_parse_chat_fields(const json_t *body, bool add_gen, srv_request_info *info, char *err);
/* *text (borrowed) or *ids (malloc'd, checked against vocab). */
int srv_parse_prompt(const json_t *body, int64_t vocab, const char **text, int32_t **ids,
                     int64_t *n, char *err);
/* Completions' prompt count: 1, or the length of a list of prompts
 * (strings or token-id lists); 0 when it is neither. */
size_t srv_prompt_count(const json_t *body);
/* The i-th prompt of a list (or the body's one prompt). */
int srv_parse_prompt_at(const json_t *body, size_t i, int64_t vocab, const char **text,
                        int32_t **ids, int64_t *n, char *err);
/* 64 unpredictable bits from the operating system (getrandom): the seeds of
 * unseeded requests, tool-call ids. */
uint64_t srv_random_u64(void);
/* {"error": {"message", "type", "param", "code"}}. */
json_t *srv_error_json(const char *message, int status);

#endif
