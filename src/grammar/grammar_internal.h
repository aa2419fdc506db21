/* Internals of the grammar engine (docs/grammar.md §Algorithm).
 *
 * Every input kind becomes GBNF text; the GBNF parser makes an AST per rule
 * (gx_*); the compiler inlines every rule that is not recursive into its
 * callers, builds a byte-level NFA per remaining rule and determinizes it.
 * The result is a recursive transition network of DFAs: each DFA state has
 * byte transitions (through byte classes), calls (push a return state and
 * start a rule) and may accept (return to the caller). */
#ifndef WNA16_GRAMMAR_INTERNAL_H
#define WNA16_GRAMMAR_INTERNAL_H

#include <pthread.h>

#include "grammar/grammar.h"

/* ------------------------------------------------------------------ AST */

typedef enum { GX_SEQ, GX_ALT, GX_REP, GX_REF, GX_CLASS, GX_BYTES } gx_kind;

/* SEQ/ALT: children kids[a .. a+n). REP: child a, min, max (-1: no bound).
 * REF: rule a. CLASS: code point ranges ranges[a .. a+n) (pairs lo, hi).
 * BYTES: literal bytes bytes[a .. a+n). */
typedef struct gx_node {
    uint8_t kind;
    int32_t a, n;
    int32_t min, max;
} gx_node;

typedef struct gx_rule {
    char *name;
    int32_t body;     /* node, -1 while only referenced */
    uint32_t line;    /* where defined, or first referenced */
} gx_rule;

typedef struct gx_ast {
    gx_node *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *kids;
    size_t n_kids, cap_kids;
    uint32_t *ranges;
    size_t n_ranges, cap_ranges;
    uint8_t *bytes;
    size_t n_bytes, cap_bytes;
    gx_rule *rules;
    size_t n_rules, cap_rules;
} gx_ast;

/* Parses GBNF text into ast (which may hold rules already). */
wna16_status gbnf_parse(wna16_diag *d, const char *text, size_t len, const grammar_limits *lim,
                        gx_ast *ast);
int32_t gx_rule_find(const gx_ast *ast, const char *name, size_t len);
void gx_ast_free(gx_ast *ast);

/* -------------------------------------------------------------- compiled */

#define GSTATE_ACCEPT 1u    /* the rule may return here */
#define GSTATE_BYTES  2u    /* some byte transition exists */
#define GSTATE_SIMPLE 4u    /* no calls and not accepting: a pure byte state */
#define GSTATE_FINAL  8u    /* accepting with nothing else: a call returning here needs no frame */

typedef struct grammar_call {
    int32_t rule;  /* callee */
    int32_t ret;   /* state of the caller after the callee returns */
} grammar_call;

/* Per-state mask facts (matcher_cache.c), computed on first use. */
typedef struct grammar_posinfo grammar_posinfo;
void grammar_posinfo_free(grammar_posinfo *pi);

struct grammar {
    grammar_limits lim;
    size_t n_rules;      /* compiled rules (call targets) */
    int32_t *rule_start; /* DFA start state of each rule */
    char **rule_name;
    int32_t root;        /* rule index of the start rule */
    size_t n_states;
    uint8_t *flags;      /* GSTATE_* */
    int32_t *next;       /* n_states * n_classes; -1: no transition */
    uint32_t *call_off;  /* calls[call_off[s] .. call_off[s+1]) */
    grammar_call *calls;
    uint8_t byte_class[256];
    int n_classes;

    /* mask cache, bound to the first vocabulary a matcher uses */
    pthread_mutex_t lock;
    bool lock_ready;
    const grammar_vocab *cache_vocab;
    grammar_posinfo **posinfo; /* n_states */
    size_t cache_bytes;
};

/* Byte-level NFA of one compiled rule. */
enum { NE_EPS, NE_RANGE, NE_CALL };
typedef struct gnfa_edge {
    int32_t to, next;
    uint8_t kind, lo, hi;
    int32_t rule; /* NE_CALL: compiled rule */
} gnfa_edge;
typedef struct gnfa {
    int32_t *first; /* per state: its first edge, -1 */
    size_t n, cap;
    gnfa_edge *edges;
    size_t n_edges, cap_edges;
    int32_t start, final;
} gnfa;

/* Subset construction of every rule's NFA into g (byte classes set). */
wna16_status grammar_determinize(wna16_diag *d, const grammar_limits *lim, grammar *g,
                                 const gnfa *nfas, size_t n_rules);
/* Trims rules that derive nothing and states that cannot finish, sets the
 * GSTATE_* flags, refuses left recursion. */
wna16_status grammar_analyze(wna16_diag *d, grammar *g);

wna16_status grammar_from_ast(wna16_diag *d, gx_ast *ast, const char *root,
                              const grammar_limits *lim, grammar **out);

static inline int32_t grammar_next(const grammar *g, int32_t s, uint8_t b) {
    return g->next[(size_t)s * (size_t)g->n_classes + g->byte_class[b]];
}

/* -------------------------------------------------------------- builder */

struct grammar_builder {
    wna16_buf text;
    grammar_limits lim;
    wna16_status err;
    wna16_diag err_diag;
    unsigned counter; /* unique helper-rule names */
};

/* Emits GBNF for a regex (whole-string match) as the body of rule name.
 * REGEX_JSON_STRING: the regex describes a JSON string's decoded content; the
 * body is its encoded form (quotes and backslashes escaped). */
#define REGEX_JSON_STRING 1u /* see above */
#define REGEX_SEARCH      2u /* JSON Schema's `pattern`: matches anywhere unless anchored */
wna16_status regex_to_gbnf(wna16_diag *d, const char *re, size_t len, unsigned flags,
                           const grammar_limits *lim, wna16_buf *out);
/* Emits rules for a JSON schema under rule name (schema NULL: any object). */
wna16_status json_schema_to_gbnf(wna16_diag *d, const char *schema, size_t len, bool strict,
                                 grammar_json_ws ws, const char *name, const grammar_limits *lim,
                                 wna16_buf *out);
/* Appends one code point as a GBNF character (escaped where needed) to a
 * literal ("...") or a class ([...]). */
void gbnf_put_cp(wna16_buf *out, uint32_t cp, bool in_class);

/* UTF-8 of one code point; returns its length (0 for an invalid one). */
size_t grammar_utf8_encode(uint32_t cp, uint8_t *out);
/* Decodes one code point of valid UTF-8 at s (n left); 0 when invalid. */
size_t grammar_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

#endif
