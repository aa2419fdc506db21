/* Request preparation off the engine's cores (prep.c): parsing a body,
 * checking it, rendering its chat template and tokenizing it, and encoding
 * a large reply, are CPU work whose size each client chooses. It runs on
 * one worker thread at a lower scheduling priority than the engine's, one
 * job at a time, so however many clients send at once they queue for that
 * worker while the engine's threads keep the cores. */
#ifndef WNA16_SERVER_PREP_H
#define WNA16_SERVER_PREP_H

#include <stdbool.h>

typedef struct srv_prep srv_prep;

/* The worker, niced by `nice` (0: the engine's priority). NULL when out of
 * memory or threads. */
srv_prep *srv_prep_start(int nice);

/* Runs fn(arg) on the worker and returns when it has run (on the caller's
 * thread when p is NULL). */
void srv_prep_run(srv_prep *p, void (*fn)(void *), void *arg);

/* Stops the worker after the jobs queued; every srv_prep_run has returned. */
void srv_prep_stop(srv_prep *p);

#endif
