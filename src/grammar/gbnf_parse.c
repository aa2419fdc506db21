/* GBNF as llama.cpp writes it (docs/grammar.md §GBNF):
 *   name ::= alternatives        one rule per line (newlines inside ( ) are free)
 *   "literal"  [class]  [^class]  .  name  ( ... )  x*  x+  x?  x{m}  x{m,}  x{m,n}  x{,n}
 *   # comments; escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \] \-
 * into the AST of grammar_internal.h. Literals and classes are code points
 * (UTF-8 in the text); the compiler lowers them to bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define GBNF_MAX_NESTING 128
#define GBNF_MAX_REPEAT  100000

typedef struct gbnf_parser {
    wna16_diag *d;
    const char *s, *end, *line_start;
    uint32_t line;
    gx_ast *ast;
    int nesting;
    wna16_status st;
} gbnf_parser;

/* ------------------------------------------------------------ AST store */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *np = wna16_realloc(*p, c * elem);
    if (!np) return false;
    *p = np;
    *cap = c;
    return true;
}

static int32_t add_node(gbnf_parser *p, gx_node n) {
    gx_ast *a = p->ast;
    if (!grow((void **)&a->nodes, &a->cap_nodes, a->n_nodes + 1, sizeof *a->nodes)) return -1;
    a->nodes[a->n_nodes] = n;
    return (int32_t)a->n_nodes++;
}

static int32_t add_kids(gbnf_parser *p, const int32_t *kids, size_t n) {
    gx_ast *a = p->ast;
    if (!grow((void **)&a->kids, &a->cap_kids, a->n_kids + n, sizeof *a->kids)) return -1;
    if (n) memcpy(a->kids + a->n_kids, kids, n * sizeof *kids);
    int32_t at = (int32_t)a->n_kids;
    a->n_kids += n;
    return at;
}

int32_t gx_rule_find(const gx_ast *ast, const char *name, size_t len) {
    for (size_t i = 0; i < ast->n_rules; i++)
        if (strlen(ast->rules[i].name) == len && !memcmp(ast->rules[i].name, name, len))
            return (int32_t)i;
    return -1;
}

static int32_t rule_get(gbnf_parser *p, const char *name, size_t len) {
    int32_t r = gx_rule_find(p->ast, name, len);
    if (r >= 0) return r;
    gx_ast *a = p->ast;
    if (!grow((void **)&a->rules, &a->cap_rules, a->n_rules + 1, sizeof *a->rules)) return -1;
    char *nm = wna16_malloc(len + 1);
    if (!nm) return -1;
    memcpy(nm, name, len);
    nm[len] = '\0';
    a->rules[a->n_rules] = (gx_rule){.name = nm, .body = -1, .line = p->line};
    return (int32_t)a->n_rules++;
}

void gx_ast_free(gx_ast *a) {
    for (size_t i = 0; i < a->n_rules; i++) wna16_free(a->rules[i].name);
    wna16_free(a->rules);
    wna16_free(a->nodes);
    wna16_free(a->kids);
    wna16_free(a->ranges);
    wna16_free(a->bytes);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------- lexing */

static wna16_status fail_at(gbnf_parser *p, wna16_status st, const char *what) {
    if (p->st != WNA16_OK) return p->st;
    p->st = wna16_fail(p->d, st, "GBNF line %u, column %u: %s", p->line,
                       (unsigned)(p->s - p->line_start) + 1, what);
    return p->st;
}

static wna16_status oom(gbnf_parser *p) {
    if (p->st != WNA16_OK) return p->st;
    p->st = wna16_fail(p->d, WNA16_ERR_OUT_OF_MEMORY, "out of memory parsing the grammar");
    return p->st;
}

static void skip_space(gbnf_parser *p, bool newline_ok) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == ' ' || c == '\t') {
            p->s++;
        } else if (c == '#') {
            while (p->s < p->end && *p->s != '\n' && *p->s != '\r') p->s++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            if (c == '\n') {
                p->line++;
                p->line_start = p->s + 1;
            }
            p->s++;
        } else {
            break;
        }
    }
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One character of a literal or class: an escape or one UTF-8 code point.
 * Returns false (with p->st set) on a malformed one. */
static bool parse_char(gbnf_parser *p, uint32_t *cp) {
    if (p->s >= p->end) return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "unexpected end of text"), false;
    if (*p->s == '\\') {
        if (p->s + 1 >= p->end)
            return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "unexpected end of text after '\\'"), false;
        char e = p->s[1];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = p->s + 2 + i < p->end ? hexval(p->s[2 + i]) : -1;
                if (h < 0)
                    return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected hex digits in escape"),
                           false;
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return fail_at(p, WNA16_ERR_INVALID_ARGUMENT,
                               "escape is not a Unicode scalar value"),
                       false;
            p->s += 2 + digits;
            *cp = v;
            return true;
        }
        const char *from = "trn\\\"[]-^";
        const char *to = "\t\r\n\\\"[]-^";
        const char *f = memchr(from, e, strlen(from));
        if (!f || !e)
            return fail_at(p, WNA16_ERR_INVALID_ARGUMENT,
                           "unknown escape (known: \\x \\u \\U \\t \\r \\n \\\\ \\\" \\[ \\] \\- \\^)"),
                   false;
        *cp = (uint8_t)to[f - from];
        p->s += 2;
        return true;
    }
    size_t n = grammar_utf8_decode((const uint8_t *)p->s, (size_t)(p->end - p->s), cp);
    if (!n) return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "invalid UTF-8"), false;
    if (*cp == '\n' || *cp == '\r') {
        fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "unterminated literal or class at end of line");
        return false;
    }
    p->s += n;
    return true;
}

/* ------------------------------------------------------------- parsing */

static int32_t parse_alternates(gbnf_parser *p, bool nested);

static int32_t parse_literal(gbnf_parser *p) {
    p->s++; /* opening quote */
    gx_ast *a = p->ast;
    size_t start = a->n_bytes;
    while (p->s < p->end && *p->s != '"') {
        uint32_t cp;
        if (!parse_char(p, &cp)) return -1;
        uint8_t u[4];
        size_t n = grammar_utf8_encode(cp, u);
        if (!grow((void **)&a->bytes, &a->cap_bytes, a->n_bytes + n, 1)) return oom(p), -1;
        if (n) memcpy(a->bytes + a->n_bytes, u, n);
        a->n_bytes += n;
    }
    if (p->s >= p->end) return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "unterminated literal"), -1;
    p->s++;
    int32_t id = add_node(p, (gx_node){.kind = GX_BYTES, .a = (int32_t)start,
                                       .n = (int32_t)(a->n_bytes - start)});
    return id < 0 ? (oom(p), -1) : id;
}

static int cmp_range(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

/* Sorts and merges the ranges [from, n_ranges); negate: their complement
 * over the Unicode scalar values. */
static bool normalize_ranges(gbnf_parser *p, size_t from, bool negate) {
    gx_ast *a = p->ast;
    size_t n = (a->n_ranges - from) / 2;
    uint32_t *r = n ? a->ranges + from : NULL; /* an empty class may have no buffer yet */
    if (n > 1) qsort(r, n, 2 * sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * m - 1] + 1) {
            if (r[2 * i + 1] > r[2 * m - 1]) r[2 * m - 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    a->n_ranges = from + 2 * m;
    if (!negate) return true;
    uint32_t *tmp = wna16_malloc((2 * m + 2) * sizeof *tmp);
    if (!tmp) return false;
    size_t k = 0;
    uint32_t lo = 0;
    for (size_t i = 0; i < m; i++) {
        if (r[2 * i] > lo) {
            tmp[k++] = lo;
            tmp[k++] = r[2 * i] - 1;
        }
        lo = r[2 * i + 1] + 1;
    }
    if (lo <= 0x10FFFF) {
        tmp[k++] = lo;
        tmp[k++] = 0x10FFFF;
    }
    if (!grow((void **)&a->ranges, &a->cap_ranges, from + k, sizeof *a->ranges)) {
        wna16_free(tmp);
        return false;
    }
    if (k) memcpy(a->ranges + from, tmp, k * sizeof *tmp);
    a->n_ranges = from + k;
    wna16_free(tmp);
    return true;
}

static bool push_range(gbnf_parser *p, uint32_t lo, uint32_t hi) {
    gx_ast *a = p->ast;
    if (!grow((void **)&a->ranges, &a->cap_ranges, a->n_ranges + 2, sizeof *a->ranges)) return false;
    a->ranges[a->n_ranges++] = lo;
    a->ranges[a->n_ranges++] = hi;
    return true;
}

static int32_t class_node(gbnf_parser *p, size_t from) {
    int32_t id = add_node(p, (gx_node){.kind = GX_CLASS, .a = (int32_t)from,
                                       .n = (int32_t)((p->ast->n_ranges - from) / 2)});
    return id < 0 ? (oom(p), -1) : id;
}

static int32_t parse_class(gbnf_parser *p) {
    p->s++; /* [ */
    bool negate = p->s < p->end && *p->s == '^';
    if (negate) p->s++;
    size_t from = p->ast->n_ranges;
    while (p->s < p->end && *p->s != ']') {
        uint32_t lo, hi;
        if (!parse_char(p, &lo)) return -1;
        hi = lo;
        if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            if (!parse_char(p, &hi)) return -1;
            if (hi < lo) return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "class range out of order"), -1;
        }
        if (!push_range(p, lo, hi)) return oom(p), -1;
    }
    if (p->s >= p->end) return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "unterminated class"), -1;
    p->s++;
    if (!normalize_ranges(p, from, negate)) return oom(p), -1;
    return class_node(p, from);
}

static bool parse_int(gbnf_parser *p, int32_t *v) {
    if (p->s >= p->end || *p->s < '0' || *p->s > '9') return false;
    int64_t x = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        x = x * 10 + (*p->s++ - '0');
        if (x > GBNF_MAX_REPEAT) {
            fail_at(p, WNA16_ERR_LIMIT, "repetition count too large (at most 100000)");
            return false;
        }
    }
    *v = (int32_t)x;
    return true;
}

/* {m}, {m,}, {m,n}, {,n} after an item. */
static bool parse_braces(gbnf_parser *p, int32_t *min, int32_t *max) {
    p->s++;
    skip_space(p, true);
    *min = 0;
    *max = -1;
    bool have_min = parse_int(p, min);
    if (p->st) return false;
    skip_space(p, true);
    if (p->s < p->end && *p->s == ',') {
        p->s++;
        skip_space(p, true);
        if (!parse_int(p, max)) {
            if (p->st) return false;
            *max = -1;
        }
        skip_space(p, true);
    } else if (have_min) {
        *max = *min;
    } else {
        fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected a number in {}");
        return false;
    }
    if (p->s >= p->end || *p->s != '}') {
        fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected '}'");
        return false;
    }
    p->s++;
    if (*max >= 0 && *max < *min) {
        fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "repetition {m,n} with n < m");
        return false;
    }
    return true;
}

/* One item before its suffixes: literal, class, reference, group or '.'. */
static int32_t parse_item(gbnf_parser *p, bool nested) {
    char c = *p->s;
    if (c == '"') return parse_literal(p);
    if (c == '[') return parse_class(p);
    if (c == '.') {
        p->s++;
        size_t from = p->ast->n_ranges;
        if (!push_range(p, 0, 0x10FFFF)) return oom(p), -1;
        return class_node(p, from);
    }
    if (c == '(') {
        if (++p->nesting > GBNF_MAX_NESTING)
            return fail_at(p, WNA16_ERR_LIMIT, "groups nested too deeply (at most 128)"), -1;
        p->s++;
        skip_space(p, true);
        int32_t body = parse_alternates(p, true);
        if (body < 0) return -1;
        if (p->s >= p->end || *p->s != ')')
            return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected ')'"), -1;
        p->s++;
        p->nesting--;
        return body;
    }
    if (is_word(c)) {
        const char *w = p->s;
        while (p->s < p->end && is_word(*p->s)) p->s++;
        int32_t r = rule_get(p, w, (size_t)(p->s - w));
        if (r < 0) return oom(p), -1;
        int32_t id = add_node(p, (gx_node){.kind = GX_REF, .a = r});
        return id < 0 ? (oom(p), -1) : id;
    }
    if (c == '<')
        return fail_at(p, WNA16_ERR_UNSUPPORTED, "token references (<...>) are not supported"), -1;
    if (c == '!')
        return fail_at(p, WNA16_ERR_UNSUPPORTED, "token negation (!) is not supported"), -1;
    (void)nested;
    return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "unexpected character"), -1;
}

static bool at_item(const gbnf_parser *p) {
    if (p->s >= p->end) return false;
    char c = *p->s;
    return c == '"' || c == '[' || c == '.' || c == '(' || c == '<' || c == '!' || is_word(c);
}

static int32_t parse_sequence(gbnf_parser *p, bool nested) {
    int32_t local[64], *kids = local;
    size_t n = 0, cap = 64;
    int32_t result = -1;
    int suffixes = 0; /* on the last item: bounds the AST's depth */
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (++suffixes > 4) {
                fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "more than 4 repetition suffixes on one item");
                goto out;
            }
            if (!n) {
                fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "repetition without an item before it");
                goto out;
            }
            int32_t min = c == '+', max = c == '?' ? 1 : -1;
            if (c == '{') {
                if (!parse_braces(p, &min, &max)) goto out;
            } else {
                p->s++;
            }
            int32_t id = add_node(p, (gx_node){.kind = GX_REP, .a = kids[n - 1], .min = min,
                                               .max = max});
            if (id < 0) {
                oom(p);
                goto out;
            }
            kids[n - 1] = id;
        } else if (at_item(p)) {
            int32_t id = parse_item(p, nested);
            if (id < 0) goto out;
            suffixes = 0;
            if (n == cap) {
                int32_t *nk = wna16_malloc(2 * cap * sizeof *nk);
                if (!nk) {
                    oom(p);
                    goto out;
                }
                if (n) memcpy(nk, kids, n * sizeof *nk);
                if (kids != local) wna16_free(kids);
                kids = nk;
                cap *= 2;
            }
            kids[n++] = id;
        } else {
            break;
        }
        skip_space(p, nested);
    }
    if (n == 1) {
        result = kids[0];
    } else {
        int32_t at = add_kids(p, kids, n);
        result = at < 0 ? -1 : add_node(p, (gx_node){.kind = GX_SEQ, .a = at, .n = (int32_t)n});
        if (result < 0) oom(p);
    }
out:
    if (kids != local) wna16_free(kids);
    return p->st ? -1 : result;
}

static int32_t parse_alternates(gbnf_parser *p, bool nested) {
    int32_t local[16], *alts = local;
    size_t n = 0, cap = 16;
    int32_t result = -1;
    for (;;) {
        int32_t s = parse_sequence(p, nested);
        if (s < 0) goto out;
        if (n == cap) {
            int32_t *na = wna16_malloc(2 * cap * sizeof *na);
            if (!na) {
                oom(p);
                goto out;
            }
            if (n) memcpy(na, alts, n * sizeof *na);
            if (alts != local) wna16_free(alts);
            alts = na;
            cap *= 2;
        }
        alts[n++] = s;
        if (p->s < p->end && *p->s == '|') {
            p->s++;
            skip_space(p, true);
            continue;
        }
        break;
    }
    if (n == 1) {
        result = alts[0];
    } else {
        int32_t at = add_kids(p, alts, n);
        result = at < 0 ? -1 : add_node(p, (gx_node){.kind = GX_ALT, .a = at, .n = (int32_t)n});
        if (result < 0) oom(p);
    }
out:
    if (alts != local) wna16_free(alts);
    return p->st ? -1 : result;
}

static bool parse_rule(gbnf_parser *p) {
    const char *w = p->s;
    while (p->s < p->end && is_word(*p->s)) p->s++;
    if (p->s == w) return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected a rule name"), false;
    size_t wlen = (size_t)(p->s - w);
    skip_space(p, false);
    if (p->end - p->s < 3 || memcmp(p->s, "::=", 3))
        return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected '::='"), false;
    p->s += 3;
    int32_t r = rule_get(p, w, wlen);
    if (r < 0) return oom(p), false;
    if (p->ast->rules[r].body >= 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "rule '%.*s' is defined twice", (int)(wlen > 64 ? 64 : wlen), w);
        return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, msg), false;
    }
    p->ast->rules[r].line = p->line;
    skip_space(p, true);
    int32_t body = parse_alternates(p, false);
    if (body < 0) return false;
    p->ast->rules[r].body = body;
    if (p->s < p->end) {
        if (*p->s != '\n' && *p->s != '\r')
            return fail_at(p, WNA16_ERR_INVALID_ARGUMENT, "expected a newline or the end of the rule"),
                   false;
    }
    skip_space(p, true);
    return true;
}

wna16_status gbnf_parse(wna16_diag *d, const char *text, size_t len, const grammar_limits *lim,
                        gx_ast *ast) {
    if (len > lim->max_text)
        return wna16_fail(d, WNA16_ERR_LIMIT, "grammar text of %zu bytes is over the limit of %zu",
                          len, lim->max_text);
    gbnf_parser p = {.d = d, .s = text, .end = text + len, .line_start = text, .line = 1,
                     .ast = ast};
    skip_space(&p, true);
    while (p.s < p.end && p.st == WNA16_OK) parse_rule(&p);
    return p.st;
}
