/* The HTTP front of `wna16 serve` (http.c). */
#ifndef WNA16_SERVER_HTTP_H
#define WNA16_SERVER_HTTP_H

#include "server/limits.h"
#include "server/requests.h"

#include <stddef.h>

typedef struct srv_http srv_http;

typedef struct srv_http_options {
    const char *host;
    int port; /* 0: any free port (srv_http_port says which) */
    const char *api_key;     /* NULL: none asked */
    const char *served_name; /* the model's name in requests and responses */
    const char *model_dir;
    size_t max_body_bytes;
    long long created;
    const char *chat_template;     /* --chat-template text, or NULL: the model's */
    int tool_format;               /* WNA16_TOOLS_*, or -1: requests with tools are refused */
    bool reasoning;                /* --reasoning-parser qwen3 */
    wna16_generation_defaults gen; /* generation_config.json's sampling defaults (none: set 0) */
    srv_limits limits;             /* per request (limits.h) */
    const char *allowed_hosts, *allowed_origins; /* guard.h; NULL: the defaults */
    unsigned idle_timeout_s;  /* a connection with no byte in or out this long is closed */
    unsigned max_connections; /* open at once, all clients together */
    unsigned max_connections_per_client; /* open at once from one address */
} srv_http_options;

/* Listens; 0, or 1 with a message in err. */
int srv_http_start(const srv_http_options *o, srv_engine *e, wna16_tokenizer *tok,
                   int64_t vocab, srv_http **out, char *err, size_t err_len);
int srv_http_port(const srv_http *h);
/* New generation requests get 503 from now on. */
void srv_http_drain(srv_http *h);
/* Requests whose response is not finished yet. */
int srv_http_in_flight(const srv_http *h);
/* Waits (up to grace_s) for every response under way to be sent, then
 * closes every connection and frees h. */
void srv_http_stop(srv_http *h, double grace_s);

#endif
