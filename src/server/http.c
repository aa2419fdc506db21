/* HTTP for `wna16 serve` (http.h): libmicrohttpd (a thread per connection,
 * so a streaming reply may block waiting for tokens) and jansson. The
 * OpenAI endpoints, /tokenize and /detokenize, /v1/models, /health and
 * /metrics; the browser pages at / and /stats (pages.c); OpenAI-shaped
 * errors for everything refused. Who may call is guard.c's; what one
 * request may ask is limits.c's; connections are bounded in number (per
 * client too) and closed when idle, so no client can hold the others out. */
#include "server/http.h"

#include "server/guard.h"
#include "server/idle.h"
#include "server/openai.h"
#include "server/pages.h"
#include "server/prep.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_http {
    struct MHD_Daemon *daemon;
    srv_engine *e;
    srv_api api; /* what the OpenAI endpoints share (openai.h) */
    srv_http_options o;
    srv_guard guard;
    srv_prep *prep; /* parsing, templates, tokenizing, large replies (prep.h) */
    srv_idle *idle; /* closes idle connections (idle.h) */
    int64_t vocab, context;
    atomic_bool draining;
    atomic_int in_flight;
    atomic_uint_fast64_t next_id;
};

typedef struct stream_state {
    srv_call *k;
    const char *data; /* the call's events, valid until its next call */
    size_t len, off;
} stream_state;

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_big, counted;
} conn;

/* What every response of this thread's current request adds: the CORS
 * header for an origin let in, and Connection: close while draining (set
 * by handle; a connection is served by one thread). */
static _Thread_local struct {
    const char *cors_origin;
    bool close;
} reply_extra;

static void add_extra_headers(struct MHD_Response *r) {
    if (reply_extra.cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", reply_extra.cors_origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (reply_extra.close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* ------------------------------------------------------------ responses */

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type,
                                 const char *text, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    add_extra_headers(r);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!s) return send_text(c, 500, "application/json", "{}", 2);
    enum MHD_Result ok = send_text(c, status, "application/json", s, strlen(s));
    free(s);
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *message) {
    return send_json(c, status, srv_error_json(message, status));
}

/* A page: static bytes, so no copy. The pages are public (a browser cannot
 * send a key when it navigates); they ask for the key and send it as the
 * OpenAI clients do when the API wants one. */
static enum MHD_Result send_page(struct MHD_Connection *c, const srv_page *p) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(p->len, (void *)p->html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", p->csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    add_extra_headers(r);
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

/* ------------------------------------------------------------- requests */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_state *st = cls;
    if (st->off == st->len) {
        if (!srv_call_events(st->k, &st->data, &st->len)) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = 0;
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the client went away): sequences still
 * running are aborted and their blocks freed by the engine. */
static void stream_free(void *cls) {
    stream_state *st = cls;
    srv_call_free(st->k);
    free(st);
}

static enum MHD_Result reply_stream(struct MHD_Connection *c, srv_call *k) {
    stream_state *st = calloc(1, sizeof *st);
    if (!st) {
        srv_call_free(k);
        return send_error(c, 503, "out of memory");
    }
    st->k = k;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    add_extra_headers(resp);
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Whether the client closed its end (or the connection broke) while a
 * whole reply is computed: bytes waiting (a pipelined request) mean it is
 * still there. The connection's thread is the one waiting, so nothing else
 * reads the socket meanwhile. */
static bool client_gone(void *cls) {
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(cls, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!i) return false;
    char b;
    ssize_t n = recv(i->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* A POST body's preparation, run on the preparation worker: parsed,
 * checked against the limits, and for the generating endpoints started in
 * the engine (template, tokenizer); for /tokenize and /detokenize the
 * whole answer. */
typedef struct post_job {
    srv_http *h;
    const conn *cn;
    bool chat, comp, tok;
    int status; /* 0: k started; else the answer's status */
    char err[SRV_ERR_MAX];
    json_t *reply;
    srv_call *k;
} post_job;

static void tokenize(post_job *j, const json_t *body);
static void detokenize(post_job *j, const json_t *body);

static void prepare_post(void *arg) {
    post_job *j = arg;
    json_error_t je;
    json_t *body = json_loadb(j->cn->body ? j->cn->body : "", j->cn->len, JSON_REJECT_DUPLICATES,
                              &je);
    if (!json_is_object(body)) {
        snprintf(j->err, sizeof j->err, "the body is not a JSON object (line %d, column %d: %s)",
                 je.line, je.column, body ? "not an object" : je.text);
        j->status = 400;
    } else if (j->tok) {
        tokenize(j, body);
    } else if (!j->chat && !j->comp) {
        detokenize(j, body);
    } else {
        j->status = srv_check_limits(body, j->chat, &j->h->o.limits, j->err);
        if (!j->status) j->status = srv_call_start(&j->h->api, body, j->chat, &j->k, j->err);
    }
    json_decref(body);
}

/* A reply's JSON encoded on the preparation worker: an echo with
 * log-probabilities for every prompt position is megabytes of text. */
typedef struct dump_job {
    json_t *j;
    char *text;
} dump_job;

static void dump_reply(void *arg) {
    dump_job *d = arg;
    d->text = d->j ? json_dumps(d->j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(d->j);
}

static enum MHD_Result send_prepared_json(struct MHD_Connection *c, srv_http *h, int status,
                                          json_t *j) {
    dump_job d = {.j = j};
    srv_prep_run(h->prep, dump_reply, &d);
    if (!d.text) return send_text(c, 500, "application/json", "{}", 2);
    enum MHD_Result ok = send_text(c, status, "application/json", d.text, strlen(d.text));
    free(d.text);
    return ok;
}

static enum MHD_Result generate(struct MHD_Connection *c, srv_http *h, srv_call *k) {
    if (srv_call_streams(k)) return reply_stream(c, k);
    json_t *j = NULL;
    int status = srv_call_whole(k, client_gone, c, &j);
    srv_call_free(k); /* aborts what still runs when the client left */
    if (!status) return MHD_NO; /* nobody to answer: close the connection */
    return send_prepared_json(c, h, status, j);
}

/* vLLM's /tokenize: a prompt, or messages through the chat template
 * (add_generation_prompt true unless the body says otherwise, as vLLM). */
static void tokenize(post_job *j, const json_t *body) {
    srv_http *h = j->h;
    int32_t *ids = NULL;
    int64_t n = 0;
    bool chat = json_object_get(body, "messages") != NULL;
    int rc = srv_check_limits(body, chat, &h->o.limits, j->err);
    if (rc) {
    } else if (chat) {
        srv_request_info info = {0};
        rc = srv_chat_prompt(&h->api, body, true, &info, &ids, &n, j->err);
        srv_request_info_free(&info);
    } else {
        const json_t *p = json_object_get(body, "prompt");
        const json_t *add = json_object_get(body, "add_special_tokens");
        rc = json_is_string(p)
                 ? srv_encode(&h->api, json_string_value(p), !json_is_false(add), &ids, &n, j->err)
                 : (snprintf(j->err, sizeof j->err, "'prompt' must be a string"), 400);
    }
    if (rc) {
        free(ids);
        j->status = rc;
        return;
    }
    json_t *toks = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    free(ids);
    j->status = 200;
    j->reply = json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len",
                         (json_int_t)h->context, "tokens", toks);
}

static void detokenize(post_job *j, const json_t *body) {
    srv_http *h = j->h;
    const json_t *t = json_object_get(body, "tokens");
    j->status = 400;
    if (!json_is_array(t)) {
        snprintf(j->err, sizeof j->err, "'tokens' must be a list of token ids");
        return;
    }
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        j->status = 503;
        snprintf(j->err, sizeof j->err, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= h->vocab) {
            free(ids);
            snprintf(j->err, sizeof j->err, "'tokens' item %zu is not a token id in [0, %lld)", i,
                     (long long)h->vocab);
            return;
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    wna16_ctx *ctx = srv_thread_ctx();
    char *text = NULL;
    if (!ctx) {
        j->status = 503;
        snprintf(j->err, sizeof j->err, "out of memory");
    } else if (wna16_tokenizer_decode(ctx, h->api.tok, ids, n, false, &text, NULL) != WNA16_OK) {
        snprintf(j->err, sizeof j->err, "%s", wna16_ctx_error(ctx));
    } else {
        j->status = 200;
        j->reply = json_pack("{s:s}", "prompt", text);
    }
    wna16_free(text);
    free(ids);
}

static enum MHD_Result models(struct MHD_Connection *c, srv_http *h) {
    /* vocab_size (ours, beside vLLM's fields): token-id prompts for clients
     * without the tokenizer (wna16 bench serve) */
    return send_json(c, 200,
                     json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:I, s:I}]}", "object", "list",
                               "data", "id", h->o.served_name, "object", "model", "created",
                               (json_int_t)h->o.created, "owned_by", "wna16", "root",
                               h->o.model_dir, "max_model_len", (json_int_t)h->context,
                               "vocab_size", (json_int_t)h->vocab));
}

/* --------------------------------------------------------------- routing */

static bool authorized(struct MHD_Connection *c, const srv_http *h) {
    return srv_guard_key_ok(&h->guard,
                            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
}

static enum MHD_Result route_post(struct MHD_Connection *c, srv_http *h, const char *url,
                                  const conn *cn) {
    bool chat = !strcmp(url, "/v1/chat/completions"), comp = !strcmp(url, "/v1/completions");
    bool tok = !strcmp(url, "/tokenize"), detok = !strcmp(url, "/detokenize");
    if (!chat && !comp && !tok && !detok) return send_error(c, 404, "no such endpoint");
    if (cn->too_big) {
        char err[SRV_ERR_MAX];
        snprintf(err, sizeof err, "the request body is over the limit of %zu bytes",
                 h->o.max_body_bytes);
        return send_error(c, 413, err);
    }
    /* a form or text/plain body is what a web page may post anywhere
     * without asking first: only JSON is taken */
    if (!srv_guard_json_type(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
        return send_error(c, 415, "the body must be JSON: send the header "
                                  "'Content-Type: application/json'");
    if ((chat || comp) && atomic_load(&h->draining)) {
        /* stopping because the engine failed: say why */
        char why[SRV_ERR_MAX];
        return send_error(c, 503,
                          srv_engine_dead(h->e, why, sizeof why) ? why : "the server is shutting down");
    }
    post_job j = {.h = h, .cn = cn, .chat = chat, .comp = comp, .tok = tok};
    srv_prep_run(h->prep, prepare_post, &j);
    if (j.status == 200) return send_prepared_json(c, h, 200, j.reply);
    if (j.status) return send_error(c, j.status, j.err);
    return generate(c, h, j.k);
}

/* The connection's entry in the idle reaper (idle.h), or NULL. */
static srv_idle_conn *idle_record(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

static void connection_event(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode why) {
    srv_http *h = cls;
    if (why == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *i =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = i ? srv_idle_add(h->idle, i->connect_fd) : NULL;
    } else {
        srv_idle_remove(h->idle, *socket_context);
        *socket_context = NULL;
    }
}

/* A CORS preflight from an origin let in (guard.c). */
static enum MHD_Result preflight(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, HEAD");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    add_extra_headers(r);
    enum MHD_Result ok = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result route(struct MHD_Connection *c, srv_http *h, const char *url,
                             const char *method, const conn *cn) {
    /* HEAD is GET without the body (libmicrohttpd leaves the body out) */
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    char why[256];
    bool cors = false;
    int refused = srv_guard_check(&h->guard, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"),
                                  MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"), &cors,
                                  why, sizeof why);
    if (refused) return send_error(c, refused, why);
    if (cors) reply_extra.cors_origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (cors && !strcmp(method, "OPTIONS")) return preflight(c);
    if (get && !strcmp(url, "/health")) {
        if (srv_engine_dead(h->e, why, sizeof why)) return send_error(c, 503, why);
        /* load balancers stop sending new requests */
        if (atomic_load(&h->draining)) return send_error(c, 503, "the server is shutting down");
        return send_text(c, 200, "text/plain", "", 0);
    }
    srv_page page;
    if (get && srv_page_find(url, &page)) return send_page(c, &page);
    if (!authorized(c, h)) return send_error(c, 401, "Unauthorized: a valid API key is required");
    if (get && !strcmp(url, "/v1/models")) return models(c, h);
    if (get && !strcmp(url, "/version"))
        return send_json(c, 200, json_pack("{s:s}", "version", wna16_version()));
    if (get && !strcmp(url, "/metrics")) {
        char *m = srv_engine_metrics(h->e);
        if (!m) return send_error(c, 503, "out of memory");
        enum MHD_Result ok =
            send_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", m, strlen(m));
        free(m);
        return ok;
    }
    if (post) return route_post(c, h, url, cn);
    return send_error(c, get ? 404 : 405, get ? "no such endpoint" : "method not allowed");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    conn *cn = *con_cls;
    srv_idle_touch(idle_record(c), false);
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        atomic_fetch_add(&h->in_flight, 1);
        cn->counted = true;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cn->too_big || cn->len + n > h->o.max_body_bytes) {
            cn->too_big = true;
            return MHD_YES;
        }
        if (cn->len + n + 1 > cn->cap) {
            size_t cap = cn->cap ? cn->cap : 4096;
            while (cap < cn->len + n + 1) cap *= 2;
            char *p = realloc(cn->body, cap);
            if (!p) return MHD_NO;
            cn->body = p;
            cn->cap = cap;
        }
        memcpy(cn->body + cn->len, upload, n);
        cn->len += n;
        return MHD_YES;
    }
    reply_extra.cors_origin = NULL;
    reply_extra.close = atomic_load(&h->draining);
    srv_idle_touch(idle_record(c), true);
    enum MHD_Result ok = route(c, h, url, method, cn);
    reply_extra.cors_origin = NULL;
    return ok;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why) {
    (void)why;
    srv_http *h = cls;
    srv_idle_touch(idle_record(c), false);
    conn *cn = *con_cls;
    if (!cn) return;
    if (cn->counted) atomic_fetch_sub(&h->in_flight, 1);
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

/* libmicrohttpd's messages (one per broken connection, so a client could
 * flood the log): at most one a second, with a count of those left out. */
static void http_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static double last = -1e9;
    static long skipped;
    pthread_mutex_lock(&mu);
    double now = srv_now();
    if (now - last < 1.0) {
        skipped++;
    } else {
        if (skipped) fprintf(stderr, "wna16 serve: (%ld more HTTP messages left out)\n", skipped);
        fputs("wna16 serve: ", stderr);
        vfprintf(stderr, fmt, ap);
        last = now;
        skipped = 0;
    }
    pthread_mutex_unlock(&mu);
}

/* Whether an address is a loopback one (127.0.0.0/8, ::1). */
static bool loopback_addr(const struct sockaddr *a) {
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    if (a->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
    return false;
}

/* The preparation worker's nice value: a tenth of a core's share against
 * each busy engine thread, all of an idle one. */
#define PREP_NICE 10

int srv_http_start(const srv_http_options *o, srv_engine *e, wna16_tokenizer *tok,
                   int64_t vocab, srv_http **out, char *err, size_t err_len) {
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(o->host, port, &hints, &ai);
    if (g) {
        snprintf(err, err_len, "--host %s: %s", o->host, gai_strerror(g));
        return 1;
    }
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        snprintf(err, err_len, "out of memory");
        return 1;
    }
    h->o = *o;
    h->e = e;
    h->vocab = vocab;
    h->context = srv_engine_context(e);
    h->api = (srv_api){.e = e, .tok = tok, .vocab = vocab, .context = h->context,
                       .served_name = o->served_name, .chat_template = o->chat_template,
                       .tool_format = o->tool_format, .reasoning = o->reasoning,
                       .gen = o->gen};
    h->guard = (srv_guard){.api_key = o->api_key, .allowed_hosts = o->allowed_hosts,
                           .allowed_origins = o->allowed_origins,
                           .loopback = loopback_addr(ai->ai_addr)};
    pthread_mutex_init(&h->api.tok_mu, NULL);
    h->prep = srv_prep_start(PREP_NICE);
    h->idle = srv_idle_start(o->idle_timeout_s);
    if (!h->prep || !h->idle) {
        snprintf(err, err_len, "out of memory or threads");
        srv_prep_stop(h->prep);
        srv_idle_stop(h->idle);
        pthread_mutex_destroy(&h->api.tok_mu);
        freeaddrinfo(ai);
        free(h);
        return 1;
    }
    /* poll, not select: more connections than FD_SETSIZE */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, http_log,
        NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, connection_event, h, MHD_OPTION_CONNECTION_LIMIT,
        o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_connections_per_client,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        snprintf(err, err_len, "cannot listen on %s:%d (in use, or not an address of this host); "
                               "pick another --port or --host",
                 o->host, o->port);
        srv_prep_stop(h->prep);
        srv_idle_stop(h->idle);
        pthread_mutex_destroy(&h->api.tok_mu);
        free(h);
        return 1;
    }
    *out = h;
    return 0;
}

int srv_http_port(const srv_http *h) {
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}

void srv_http_drain(srv_http *h) { atomic_store(&h->draining, true); }

int srv_http_in_flight(const srv_http *h) { return atomic_load(&h->in_flight); }

void srv_http_stop(srv_http *h, double grace_s) {
    if (!h) return;
    atomic_store(&h->draining, true);
    /* every request the engine has ended (aborted ones too) gets its answer
     * out before the connections close */
    double until = srv_now() + grace_s;
    while (atomic_load(&h->in_flight) > 0 && srv_now() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(h->daemon);
    srv_prep_stop(h->prep);
    srv_idle_stop(h->idle);
    pthread_mutex_destroy(&h->api.tok_mu);
    free(h);
}
