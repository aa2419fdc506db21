/* Who may call `wna16 serve` (guard.c): the API key, compared in constant
 * time; the Host and Origin a browser sends, so that with no key on a
 * loopback address no web page can drive the server (cross-site requests,
 * DNS rebinding); CORS for the origins let in; JSON bodies only. */
#ifndef WNA16_SERVER_GUARD_H
#define WNA16_SERVER_GUARD_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_guard {
    const char *api_key;         /* NULL: none asked */
    const char *allowed_hosts;   /* comma-separated host names, "*" any; NULL: the default */
    const char *allowed_origins; /* comma-separated origins ("http://host:port"), "*" any;
                                  * NULL: none but the server's own */
    bool loopback;               /* listening on a loopback address only */
} srv_guard;

/* Whether the Authorization header (may be NULL) is "Bearer KEY": the time
 * depends on the key's length only. True when no key is asked. */
bool srv_guard_key_ok(const srv_guard *g, const char *authorization);

/* Host and Origin headers (either may be NULL): 0 when the request may go
 * on (*cors set when its cross-origin Origin was let in: the response then
 * names it in Access-Control-Allow-Origin), else 403 with why in err. */
int srv_guard_check(const srv_guard *g, const char *host, const char *origin, bool *cors,
                    char *err, size_t err_len);

/* Whether a Content-Type is JSON (application/json or application/...+json,
 * any parameters). */
bool srv_guard_json_type(const char *content_type);

#endif
