/* The OpenAI endpoints' semantics (openai.c), apart from the HTTP
 * transport (http.c): a completions or chat body becomes engine requests
 * (one per returned or best_of choice and per prompt), and their outputs
 * become OpenAI's response, whole or as server-sent events, with tool
 * calls and reasoning split out of the text by the model family's parser.
 * Also the tokenizer services /tokenize shares. */
#ifndef WNA16_SERVER_OPENAI_H
#define WNA16_SERVER_OPENAI_H

#include "server/api.h"

#include <pthread.h>

/* What every request of the server shares (set up by http.c). */
typedef struct srv_api {
    srv_engine *e;
    wna16_tokenizer *tok;
    pthread_mutex_t tok_mu; /* encode and chat templates: one HTTP thread at a time */
    int64_t vocab, context;
    const char *served_name;
    const char *chat_template; /* --chat-template text, or NULL: the model's */
    int tool_format;           /* WNA16_TOOLS_*, or -1: tools are refused */
    bool reasoning;            /* --reasoning-parser qwen3 */
    wna16_generation_defaults gen; /* applied where a request leaves a field unset */
} srv_api;

/* The HTTP thread's library context (made on first use; NULL without memory). */
wna16_ctx *srv_thread_ctx(void);
/* Text to ids under the tokenizer lock; 400 with err for bad UTF-8. */
int srv_encode(srv_api *a, const char *text, bool special, int32_t **ids, int64_t *n, char *err);
/* A token's text (malloc'd). */
char *srv_token_text(srv_api *a, int32_t id);
/* The chat prompt of a body's messages (with its tools and template
 * kwargs), encoded; info gets the chat fields. */
int srv_chat_prompt(srv_api *a, const json_t *body, bool add_gen_default, srv_request_info *info,
                    int32_t **ids, int64_t *n, char *err);

typedef struct srv_call srv_call;

/* Parses and submits a completions (chat false) or chat body. 0 and *out,
 * or an HTTP status with the message in err. */
int srv_call_start(srv_api *a, const json_t *body, bool chat, srv_call **out, char *err);
bool srv_call_streams(const srv_call *k);
/* The whole reply, once every sequence ended: 200 and the response, or an
 * error status and OpenAI's error object. gone(user) (may be NULL) is asked
 * a few times a second while it waits: when it says the client left, 0 and
 * no response (srv_call_free then aborts what still runs). */
int srv_call_whole(srv_call *k, bool (*gone)(void *), void *user, json_t **out);
/* The next server-sent events (blocking for tokens): *data is valid until
 * the next call; false once the stream has ended. */
bool srv_call_events(srv_call *k, const char **data, size_t *len);
/* The response is gone: running sequences are aborted, and k is freed. */
void srv_call_free(srv_call *k);

#endif
