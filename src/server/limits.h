/* Per-request limits of `wna16 serve` (limits.c): what one request may ask
 * of the shared threads, checked on the parsed body before any template,
 * tokenizer or engine work, each a flag (docs/serving.md). */
#ifndef WNA16_SERVER_LIMITS_H
#define WNA16_SERVER_LIMITS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_limits {
    int max_logprobs;        /* logprobs / top_logprobs / prompt_logprobs, at most 20 */
    size_t max_messages;     /* chat messages per request */
    size_t max_prompt_bytes; /* a text prompt, or every message's content together */
    size_t max_stop;         /* stop strings per request */
    size_t max_stop_bytes;   /* bytes of one stop string */
} srv_limits;

#define SRV_LIMITS_DEFAULT                                                             \
    ((srv_limits){.max_logprobs = 20, .max_messages = 4096, .max_prompt_bytes = 1 << 20, \
                  .max_stop = 16, .max_stop_bytes = 4096})

/* 0 when the body is within the limits, else 400 with the message (naming
 * the flag that sets the limit) in err (SRV_ERR_MAX bytes). Fields of the
 * wrong type are left to the parsers. */
int srv_check_limits(const json_t *body, bool chat, const srv_limits *l, char *err);

#endif
