/* The browser pages of `wna16 serve` (pages.c): a chat page at GET / and a
 * live view of /metrics at GET /stats, embedded into the binary at build
 * time from src/server/pages/NAME.html (cmake/embed_page.cmake). */
#ifndef WNA16_SERVER_PAGES_H
#define WNA16_SERVER_PAGES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_page {
    const unsigned char *html;
    size_t len;
    const char *csp; /* the page's Content-Security-Policy */
} srv_page;

/* Whether url is a page; if so, the page in *out. */
bool srv_page_find(const char *url, srv_page *out);

#endif
