/* Idle connections closed by the server itself (idle.c). libmicrohttpd's
 * own connection timeout, in thread-per-connection mode, keeps every idle
 * connection's thread polling without sleeping through the last second
 * before it expires (its clock counts seconds, its poll milliseconds): a
 * few hundred idle sockets then take the cores from the engine for most of
 * a second. So the server asks libmicrohttpd for no timeout and a reaper
 * thread shuts down, every quarter of the timeout, each connection that has
 * no request in progress and has seen no activity for the timeout: an idle
 * keep-alive, or headers or a body that stopped coming. */
#ifndef WNA16_SERVER_IDLE_H
#define WNA16_SERVER_IDLE_H

#include <stdbool.h>

typedef struct srv_idle srv_idle;
typedef struct srv_idle_conn srv_idle_conn;

/* The reaper for connections idle over timeout_s (> 0). NULL when out of
 * memory or threads. */
srv_idle *srv_idle_start(double timeout_s);

/* A new connection on socket fd; NULL when out of memory (it is then never
 * reaped). */
srv_idle_conn *srv_idle_add(srv_idle *r, int fd);

/* Activity on a connection; `busy`: a request is being answered (never
 * reaped while it is). c may be NULL. */
void srv_idle_touch(srv_idle_conn *c, bool busy);

/* The connection is closing (before its socket is closed): forgotten. */
void srv_idle_remove(srv_idle *r, srv_idle_conn *c);

/* Stops the reaper; connections still listed are forgotten. */
void srv_idle_stop(srv_idle *r);

#endif
