/* Internals of the Jinja subset (jinja.h): the arena, values, the syntax
 * tree, and what the parser (jinja_parse.c), the evaluator (jinja_eval.c)
 * and the builtins (jinja_builtins.c) share. */
#ifndef WNA16_JINJA_INTERNAL_H
#define WNA16_JINJA_INTERNAL_H

#include "jinja/jinja.h"

/* ----------------------------------------------------------------- arena */

/* Every value, node and scope of one render lives in one arena, freed at
 * once at the end: values are shared freely (Python semantics) without
 * reference counts, and no error path can leak. */
typedef struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    max_align_t data[];
} jarena_chunk;

typedef struct jarena {
    jarena_chunk *head;
    size_t total; /* bytes held, against JINJA_MAX_MEMORY */
} jarena;

/* NULL when out of memory or past the cap (see jarena.total). */
void *wna16_jinja_alloc(jarena *a, size_t n);
void wna16_jinja_arena_free(jarena *a);

/* ---------------------------------------------------------------- values */

typedef enum {
    JV_UNDEF, /* Jinja's default Undefined: renders empty, is falsy */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (jlist.tuple) */
    JV_DICT,
    JV_NS,   /* namespace(): a dict whose attributes `set ns.x` assigns */
    JV_LOOP, /* the `loop` variable of a for */
    JV_MACRO,
    JV_FUNC, /* a global function (range, namespace, ...) */
} jv_type;

struct jnode;
struct jlist;
struct jdict;
struct jloop;

typedef struct jv {
    jv_type t;
    size_t n; /* JV_STR: byte length; JV_UNDEF: length of the name */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s; /* JV_STR (not NUL-terminated); JV_UNDEF: the missing name */
        struct jlist *l;
        struct jdict *d; /* JV_DICT and JV_NS */
        struct jloop *loop;
        const struct jnode *macro;
        int func;
    } u;
} jv;

typedef struct jlist {
    jv *v;
    size_t n;
    bool tuple;
} jlist;

typedef struct jdict {
    jv *keys, *vals; /* insertion order, like Python */
    size_t n, cap;
} jdict;

typedef struct jloop {
    const jv *items;
    int64_t index0, length;
    int depth;
} jloop;

static inline jv jv_undef(const char *name, size_t n) {
    jv v = {.t = JV_UNDEF, .n = n};
    v.u.s = name;
    return v;
}
static inline jv jv_none(void) { return (jv){.t = JV_NONE}; }
/* Numbers as Python sees them: bool is an int. */
static inline bool jv_is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline int64_t jv_num_i(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }
static inline jv jv_bool(bool b) {
    jv v = {.t = JV_BOOL};
    v.u.b = b;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {.t = JV_INT};
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {.t = JV_FLOAT};
    v.u.f = f;
    return v;
}
static inline jv jv_str(const char *s, size_t n) {
    jv v = {.t = JV_STR, .n = n};
    v.u.s = s;
    return v;
}

/* ------------------------------------------------------------ syntax tree */

typedef enum {
    /* statements */
    N_DATA,   /* str: literal text */
    N_OUTPUT, /* a: expression */
    N_IF,     /* a: test, b: body, c: else body, d: the elif (an N_IF) */
    N_FOR,    /* t: targets, a: iterable, d: filter test, b: body, c: else */
    N_SET,    /* t: targets, a: value, or b: body (block set) */
    N_SET_NS, /* str: namespace name, str2: attribute, a: value */
    N_MACRO,  /* str: name, t: parameters (E_NAME, a: default), b: body */
    N_BREAK,
    N_CONTINUE,
    N_BLOCK, /* b: body rendered as is ({% generation %}) */
    /* expressions */
    E_CONST,  /* value */
    E_NAME,   /* str */
    E_ATTR,   /* a.str */
    E_ITEM,   /* a[b] */
    E_SLICE,  /* a[b:c:d], missing parts NULL */
    E_CALL,   /* a(args...): t: arguments (E_KWARG for name=value) */
    E_FILTER, /* a|str(args...): t: arguments */
    E_TEST,   /* a is [not] str(args...): op = negated, t: arguments */
    E_KWARG,  /* str=a */
    E_NEG,    /* -a */
    E_POS,    /* +a */
    E_NOT,    /* not a */
    E_AND,    /* a and b */
    E_OR,     /* a or b */
    E_BIN,    /* a op b: op is a JOP_* */
    E_CMP,    /* a, then t: chain of E_CMPOP (op, a) */
    E_CMPOP,
    E_COND,  /* b if a else c (c may be NULL) */
    E_LIST,  /* t: items */
    E_TUPLE, /* t: items */
    E_DICT,  /* t: E_PAIR (a: key, b: value) */
    E_PAIR,
} jnode_kind;

enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
};

typedef struct jnode {
    jnode_kind kind;
    int line;
    int op;
    const char *str, *str2;
    size_t len, len2;
    jv value;
    struct jnode *a, *b, *c, *d, *t;
    struct jnode *next; /* the next statement of a body, argument, item or target */
} jnode;

/* ---------------------------------------------------------------- tokens */

typedef enum {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
} jtok_type;

typedef struct jtok {
    jtok_type t;
    int line;
    const char *s; /* name, operator or decoded string / data text */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* Tokenizes template source (jinja_lex.c); the array ends with T_EOF. */
wna16_status wna16_jinja_lex(wna16_diag *d, jarena *a, const char *src, size_t n,
                             const jtok **toks);

/* Parses template source into a statement list (*body, NULL when empty).
 * Nodes live in the arena. */
wna16_status wna16_jinja_parse(wna16_diag *d, jarena *a, const char *src, size_t n, jnode **body);

/* ------------------------------------------------------------- evaluator */

typedef struct jvar {
    const char *name;
    size_t n;
    jv v;
} jvar;

typedef struct jscope {
    struct jscope *parent;
    jvar *vars;
    size_t n, cap;
} jscope;

typedef struct jctx {
    wna16_diag *d;
    jarena *a;
    wna16_buf *out; /* where output goes now (captures swap it) */
    jscope *root, *cur;
    uint64_t steps;
    int depth;
    int loopctl; /* 1: break, 2: continue, pending */
    int in_loop; /* for loops open around the statement (in this macro) */
    int line;    /* line of the node being evaluated, for messages */
} jctx;

/* Errors and budgets (jinja_value.c). Fails with "chat template line N:
 * ..." (the node's line). */
wna16_status wna16_jinja_fail(jctx *c, wna16_status s, const char *fmt, ...) WNA16_PRINTF(3, 4);
wna16_status wna16_jinja_oom(jctx *c);
/* Charges k steps against JINJA_MAX_STEPS (LIMIT past it). */
wna16_status wna16_jinja_steps(jctx *c, uint64_t k);
/* "'name' is undefined" for an undefined value used as a defined one. */
wna16_status wna16_jinja_undefined(jctx *c, jv v);
/* Integer arithmetic past 64 bits (UNSUPPORTED). */
wna16_status wna16_jinja_overflow(jctx *c);

/* Operators (jinja_ops.c), Python semantics: a op b for an arithmetic
 * JOP_* (+, //, **, ~, ...); for a comparison JOP_* (==, <, in, ...); the
 * unary minus (negate) or plus. */
wna16_status wna16_jinja_arith(jctx *c, int op, jv a, jv b, jv *out);
wna16_status wna16_jinja_compare(jctx *c, int op, jv a, jv b, bool *out);
wna16_status wna16_jinja_sign(jctx *c, bool negate, jv v, jv *out);

/* Value helpers (jinja_value.c). */
bool wna16_jinja_truthy(jv v);
bool wna16_jinja_equal(jv a, jv b);
/* Python str(v) appended to b; repr when `repr`. */
wna16_status wna16_jinja_to_text(jctx *c, jv v, bool repr, wna16_buf *b);
/* str(v) as a string value in the arena. */
wna16_status wna16_jinja_to_str(jctx *c, jv v, jv *out);
wna16_status wna16_jinja_make_str(jctx *c, const char *s, size_t n, jv *out);
wna16_status wna16_jinja_make_list(jctx *c, size_t n, jv *out);
wna16_status wna16_jinja_make_dict(jctx *c, jv *out, jv_type t);
wna16_status wna16_jinja_dict_set(jctx *c, jdict *d, jv key, jv val);
/* Item lookup; false when absent. */
bool wna16_jinja_dict_get(const jdict *d, jv key, jv *out);
/* Items of an iterable (list, dict keys, string characters; undefined: none). */
wna16_status wna16_jinja_iterate(jctx *c, jv v, jv *list_out);
/* JSON input to values. */
wna16_status wna16_jinja_from_json(jctx *c, const json_t *j, jv *out, int depth);
const char *wna16_jinja_type_name(jv v);

/* Attribute / item access with Jinja's rules (missing: undefined). */
wna16_status wna16_jinja_getattr(jctx *c, jv obj, const char *name, size_t n, jv *out);
wna16_status wna16_jinja_getitem(jctx *c, jv obj, jv key, jv *out);

/* Arguments of a call after evaluation: positional, then keyword. */
typedef struct jargs {
    jv *pos;
    size_t npos;
    const char **kwname;
    size_t *kwlen;
    jv *kw;
    size_t nkw;
} jargs;

/* Keyword argument by name, or positional index i (-1: keyword only). */
bool wna16_jinja_arg(const jargs *a, size_t i, const char *name, jv *out);

wna16_status wna16_jinja_filter(jctx *c, const char *name, size_t n, jv v, const jargs *a, jv *out);
wna16_status wna16_jinja_test(jctx *c, const char *name, size_t n, jv v, const jargs *a, bool *out);
/* A method call obj.name(args) on a string, dict or the loop; *handled is
 * false when obj has no such method. */
wna16_status wna16_jinja_method(jctx *c, jv obj, const char *name, size_t n, const jargs *a,
                                jv *out, bool *handled);
/* The tojson filter (jinja_tojson.c). */
wna16_status wna16_jinja_tojson(jctx *c, jv v, const jargs *a, jv *out);
/* A global function by name (JV_FUNC id), or -1. */
int wna16_jinja_global_id(const char *name, size_t n);
wna16_status wna16_jinja_call_global(jctx *c, int id, const jargs *a, jv *out);

/* UTF-8 helpers. */
size_t wna16_jinja_u8_count(const char *s, size_t n);
bool wna16_jinja_u8_is_space(uint32_t cp);
size_t wna16_jinja_u8_decode(const char *s, size_t n, uint32_t *cp);

#endif
