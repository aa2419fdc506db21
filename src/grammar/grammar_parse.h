/* The parser that runs a grammar over bytes (grammar_parse.c), shared by
 * the matcher and its mask walks.
 *
 * A parse is a set of configurations: the top frame's DFA state and the
 * rest of the stack, an interned node (state to return to, parent). Every
 * configuration in a set is ready to read a byte (its state has byte
 * transitions); a set also says whether the input may end here (the root
 * rule returned) and, in walks that start from one state with an unknown
 * context below it (parent GP_BOTTOM), whether that context was reached. */
#ifndef WNA16_GRAMMAR_PARSE_H
#define WNA16_GRAMMAR_PARSE_H

#include "grammar/grammar_internal.h"

#define GP_NIL    0u /* nothing below: the root frame */
#define GP_BOTTOM 1u /* an unknown context (walks of one state) */

typedef struct gp_cfg {
    uint32_t state, parent;
} gp_cfg;

typedef struct gp_node {
    uint32_t state, parent, depth;
} gp_node;

/* Interned stack nodes: equal stacks are equal ids. */
typedef struct gp_pool {
    gp_node *v;
    size_t n, cap;
    uint32_t *slots; /* id, 0 = empty */
    size_t n_slots;
} gp_pool;

/* A growable set of configurations. */
typedef struct gp_set {
    gp_cfg *v;
    size_t n, cap;
} gp_set;

/* Scratch of one parser: the dedupe table of a step and the work stack. */
typedef struct gp_parser {
    const grammar *g;
    gp_pool *pool;
    uint64_t *seen; /* key + 1, stamped by gen */
    uint32_t *seen_gen;
    size_t n_seen_slots, n_seen;
    uint32_t gen;
    gp_cfg *work;
    size_t n_work, cap_work;
    size_t work_done; /* expansions since the caller reset it */
    wna16_diag *d;
    wna16_status st;
    /* results of the last step */
    bool can_end, escaped;
} gp_parser;

bool gp_pool_init(gp_pool *p);
void gp_pool_clear(gp_pool *p);
void gp_pool_free(gp_pool *p);

/* The node (state, parent), made if new; 0 when out of memory. */
uint32_t gp_pool_intern(gp_pool *p, uint32_t state, uint32_t parent);

bool gp_parser_init(gp_parser *ps, const grammar *g, gp_pool *pool);
void gp_parser_free(gp_parser *ps);

/* out = the closure of the configurations in (starts, n): calls expanded,
 * returns taken, until every one is ready for a byte. Sets can_end and
 * escaped. False on an error (ps->st). */
bool gp_closure(gp_parser *ps, const gp_cfg *starts, size_t n, gp_set *out);
/* out = the set after reading byte b from in (then the closure). */
bool gp_step(gp_parser *ps, const gp_cfg *in, size_t n_in, uint8_t b, gp_set *out);

bool gp_set_reserve(gp_set *s, size_t n);
/* Records an out-of-memory error on ps; returns false. */
bool gp_fail_oom(gp_parser *ps);

#endif
