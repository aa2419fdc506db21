/* Who may call the server (guard.h). With no API key and a loopback
 * address, the default, the server's only clients are programs of this
 * machine and its own pages; a web page open in a browser here could
 * otherwise post to it (a "simple" cross-site request needs no preflight)
 * or, through a DNS name it points at 127.0.0.1, read the answers. So such
 * requests must name a loopback host and, when a browser sends an Origin,
 * come from the server's own origin; --allowed-hosts and --allowed-origins
 * open it to others. */
#include "server/guard.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

bool srv_guard_key_ok(const srv_guard *g, const char *a) {
    if (!g->api_key) return true;
    if (!a) return false;
    static const char prefix[] = "Bearer ";
    size_t np = sizeof prefix - 1, nk = strlen(g->api_key), na = strlen(a);
    unsigned diff = na != np + nk;
    for (size_t i = 0; i < np + nk; i++) {
        unsigned char want = i < np ? prefix[i] : g->api_key[i - np];
        unsigned char got = i < na ? a[i] : 0;
        diff |= want ^ got;
    }
    return diff == 0;
}

/* The host name of a Host header ("name", "name:port", "[v6]:port") into
 * out; false when it does not fit. */
static bool host_name(const char *host, char *out, size_t cap) {
    const char *end;
    if (host[0] == '[') {
        end = strchr(host, ']');
        if (!end) return false;
        host++;
    } else {
        end = strchr(host, ':');
        if (!end) end = host + strlen(host);
    }
    size_t n = (size_t)(end - host);
    if (n >= cap) return false;
    memcpy(out, host, n);
    out[n] = '\0';
    return true;
}

static bool is_loopback_name(const char *name) {
    unsigned a, b, c, d;
    char tail;
    return !strcasecmp(name, "localhost") || !strcmp(name, "::1") ||
           (sscanf(name, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
            c < 256 && d < 256);
}

/* Whether item is in a comma-separated list (case-insensitive; "*" any). */
static bool listed(const char *list, const char *item) {
    size_t n = strlen(item);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        size_t k = (size_t)(t - p);
        if ((k == 1 && *p == '*') || (k == n && k && !strncasecmp(p, item, n))) return true;
        p = e;
    }
    return false;
}

/* The server's own origin for a Host header: "http://HOST". */
static bool same_origin(const char *host, const char *origin) {
    return host && !strncasecmp(origin, "http://", 7) && !strcasecmp(origin + 7, host);
}

int srv_guard_check(const srv_guard *g, const char *host, const char *origin, bool *cors,
                    char *err, size_t err_len) {
    *cors = false;
    bool closed = !g->api_key && g->loopback; /* the default: loopback clients only */
    char name[256];
    if (g->allowed_hosts || closed) {
        bool ok = host && host_name(host, name, sizeof name) &&
                  (g->allowed_hosts ? listed(g->allowed_hosts, name) : is_loopback_name(name));
        if (!ok) {
            snprintf(err, err_len,
                     "the Host header \"%.80s\" is not a name of this server; call it by "
                     "localhost or 127.0.0.1, or start it with --allowed-hosts NAME (or --api-key)",
                     host ? host : "");
            return 403;
        }
    }
    if (!origin || same_origin(host, origin)) return 0;
    if (g->allowed_origins && listed(g->allowed_origins, origin)) {
        *cors = true;
        return 0;
    }
    if (!closed && !g->allowed_origins) return 0; /* the key decides */
    snprintf(err, err_len,
             "requests from the web page at %.80s are refused; start the server with "
             "--allowed-origins %.80s to let it call the server (or --api-key)",
             origin, origin);
    return 403;
}

bool srv_guard_json_type(const char *t) {
    if (!t) return false;
    while (*t == ' ') t++;
    size_t n = strcspn(t, "; \t");
    if (n == 16 && !strncasecmp(t, "application/json", 16)) return true;
    return n > 17 && !strncasecmp(t, "application/", 12) && !strncasecmp(t + n - 5, "+json", 5);
}
