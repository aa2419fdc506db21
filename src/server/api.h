/* OpenAI request bodies to engine parameters (api.c). Each parser returns 0,
 * or an HTTP status (400; 503 when memory ran out) with the message in err. */
#ifndef WNA16_SERVER_API_H
#define WNA16_SERVER_API_H

#include "server/requests.h"

#include <jansson.h>

#define SRV_ERR_MAX 256

typedef struct srv_request_info {
    const char *model; /* as the client named it (borrowed from the body) */
    bool stream, echo, include_usage;
} srv_request_info;

/* max_tokens is left -1 when absent (the caller picks the endpoint's default). */
int srv_parse_params(const json_t *body, bool chat, int64_t vocab, srv_request_info *info,
                     srv_params *p, char *err);
/* *text (borrowed) or *ids (malloc'd, checked against vocab). */
int srv_parse_prompt(const json_t *body, int64_t vocab, const char **text, int32_t **ids,
                     int64_t *n, char *err);
/* Messages whose contents are malloc'd; free with srv_messages_free. */
int srv_parse_messages(const json_t *body, wna16_chat_message **out, size_t *n_out, char *err);
void srv_messages_free(wna16_chat_message *m, size_t n);
/* {"error": {"message", "type", "param", "code"}}. */
json_t *srv_error_json(const char *message, int status);

#endif
