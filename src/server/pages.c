/* The URL of each embedded page (pages.h). The arrays come from the build
 * (build/pages/page_NAME.c); keeping the HTML as HTML keeps it editable. */
#include "server/pages.h"

#include <string.h>

extern const unsigned char srv_page_chat[], srv_page_stats[];
extern const size_t srv_page_chat_len, srv_page_stats_len;
extern const char srv_page_chat_csp[], srv_page_stats_csp[];

bool srv_page_find(const char *url, srv_page *out) {
    if (!strcmp(url, "/")) {
        *out = (srv_page){srv_page_chat, srv_page_chat_len, srv_page_chat_csp};
    } else if (!strcmp(url, "/stats")) {
        *out = (srv_page){srv_page_stats, srv_page_stats_len, srv_page_stats_csp};
    } else {
        return false;
    }
    return true;
}
