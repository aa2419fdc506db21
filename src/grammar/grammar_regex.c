/* Regular expressions (Python / ECMAScript syntax, the subset of
 * docs/grammar.md §Regex) to a GBNF expression. The whole output must match
 * (anchors at the ends are allowed and change nothing); REGEX_SEARCH gives
 * JSON Schema's `pattern` meaning (a match anywhere unless anchored), and
 * REGEX_JSON_STRING emits the text as it appears inside a JSON string:
 * quotes, backslashes and control characters as their escapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define RE_MAX_NESTING 128

typedef struct rparse {
    wna16_diag *d;
    const char *s, *start, *end;
    unsigned flags;
    int nesting;
    wna16_status st;
} rparse;

/* A class as sorted, merged code point ranges. */
typedef struct rclass {
    uint32_t r[2 * 64];
    size_t n; /* ranges */
    bool overflow;
} rclass;

static wna16_status r_fail(rparse *p, wna16_status st, const char *what) {
    if (!p->st)
        p->st = wna16_fail(p->d, st, "regex offset %zu: %s", (size_t)(p->s - p->start), what);
    return p->st;
}

static void class_add(rclass *c, uint32_t lo, uint32_t hi) {
    if (c->n == 64) {
        c->overflow = true;
        return;
    }
    c->r[2 * c->n] = lo;
    c->r[2 * c->n + 1] = hi;
    c->n++;
}

static int cmp_pair(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void class_normalize(rclass *c, bool negate) {
    if (c->n > 1) qsort(c->r, c->n, 2 * sizeof *c->r, cmp_pair);
    size_t m = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (m && c->r[2 * i] <= c->r[2 * m - 1] + 1) {
            if (c->r[2 * i + 1] > c->r[2 * m - 1]) c->r[2 * m - 1] = c->r[2 * i + 1];
        } else {
            c->r[2 * m] = c->r[2 * i];
            c->r[2 * m + 1] = c->r[2 * i + 1];
            m++;
        }
    }
    c->n = m;
    if (!negate) return;
    rclass out = {.n = 0};
    uint32_t lo = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->r[2 * i] > lo) class_add(&out, lo, c->r[2 * i] - 1);
        lo = c->r[2 * i + 1] + 1;
    }
    if (lo <= 0x10FFFF) class_add(&out, lo, 0x10FFFF);
    out.overflow |= c->overflow;
    *c = out;
}

/* \d \w \s and their negations into c (negations complemented at once). */
static bool perl_class(char e, rclass *c) {
    rclass t = {.n = 0};
    switch (e | 0x20) {
    case 'd': class_add(&t, '0', '9'); break;
    case 'w':
        class_add(&t, '0', '9');
        class_add(&t, 'A', 'Z');
        class_add(&t, 'a', 'z');
        class_add(&t, '_', '_');
        break;
    case 's':
        class_add(&t, '\t', '\r');
        class_add(&t, ' ', ' ');
        break;
    default: return false;
    }
    class_normalize(&t, e >= 'A' && e <= 'Z');
    for (size_t i = 0; i < t.n; i++) class_add(c, t.r[2 * i], t.r[2 * i + 1]);
    return true;
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* An escape after '\' (p->s at the letter): one code point in *cp, or a
 * class (returns 2 with cls filled), or 0 on error. */
static int parse_escape(rparse *p, uint32_t *cp, rclass *cls) {
    if (p->s >= p->end) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "pattern ends with '\\'"), 0;
    char e = *p->s++;
    if (perl_class(e, cls)) return 2;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p->s < p->end ? hexv(*p->s) : -1;
            if (h < 0) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "bad \\x or \\u escape"), 0;
            v = v * 16 + (uint32_t)h;
            p->s++;
        }
        *cp = v;
        return 1;
    }
    switch (e) {
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0': *cp = 0; return 1;
    case 'b':
    case 'B': return r_fail(p, WNA16_ERR_UNSUPPORTED, "word boundaries (\\b, \\B) are not supported"), 0;
    case 'A':
    case 'Z':
    case 'z': return r_fail(p, WNA16_ERR_UNSUPPORTED, "anchors \\A \\Z are not supported"), 0;
    case 'p':
    case 'P':
        return r_fail(p, WNA16_ERR_UNSUPPORTED, "Unicode property classes (\\p{...}) are not supported"), 0;
    }
    if (e >= '1' && e <= '9')
        return r_fail(p, WNA16_ERR_UNSUPPORTED, "backreferences are not supported"), 0;
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
        return r_fail(p, WNA16_ERR_UNSUPPORTED, "unknown escape"), 0;
    *cp = (uint8_t)e; /* an escaped punctuation character is itself */
    return 1;
}

static bool next_cp(rparse *p, uint32_t *cp) {
    size_t n = grammar_utf8_decode((const uint8_t *)p->s, (size_t)(p->end - p->s), cp);
    if (!n) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "invalid UTF-8"), false;
    p->s += n;
    return true;
}

/* ------------------------------------------------------------- emitting */

static bool json_needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

static void json_escape_literal(wna16_buf *out, uint32_t cp) {
    char e[8];
    const char *shorts = "\b\f\n\r\t\"\\", *letters = "bfnrt\"\\";
    const char *f = cp ? strchr(shorts, (int)cp) : NULL;
    if (f)
        snprintf(e, sizeof e, "\\%c", letters[f - shorts]);
    else
        snprintf(e, sizeof e, "\\u%04X", (unsigned)cp);
    grammar_gbnf_literal(out, e, strlen(e));
}

static void emit_char(rparse *p, wna16_buf *out, uint32_t cp) {
    if ((p->flags & REGEX_JSON_STRING) && json_needs_escape(cp)) {
        json_escape_literal(out, cp);
        return;
    }
    wna16_buf_put(out, "\"", 1);
    gbnf_put_cp(out, cp, false);
    wna16_buf_put(out, "\"", 1);
}

static void emit_ranges(wna16_buf *out, const uint32_t *r, size_t n) {
    wna16_buf_put(out, "[", 1);
    for (size_t i = 0; i < n; i++) {
        gbnf_put_cp(out, r[2 * i], true);
        if (r[2 * i + 1] != r[2 * i]) {
            wna16_buf_put(out, "-", 1);
            gbnf_put_cp(out, r[2 * i + 1], true);
        }
    }
    wna16_buf_put(out, "]", 1);
}

static void emit_class(rparse *p, wna16_buf *out, const rclass *c) {
    if (!c->n) { /* matches nothing: a class GBNF cannot write */
        wna16_buf_put(out, "[^\\x00-\\U0010FFFF]", 18);
        return;
    }
    if (!(p->flags & REGEX_JSON_STRING)) {
        emit_ranges(out, c->r, c->n);
        return;
    }
    /* the class minus the characters JSON escapes, then each escape */
    rclass raw = {.n = 0}, esc = {.n = 0};
    for (size_t i = 0; i < c->n; i++) {
        uint32_t lo = c->r[2 * i], hi = c->r[2 * i + 1];
        for (uint32_t x = lo; x <= hi && x < 0x20; x++) class_add(&esc, x, x);
        uint32_t cuts[3] = {0x20, '"', '\\'};
        uint32_t from = lo < 0x20 ? 0x20 : lo;
        for (int k = 1; k < 3 && from <= hi; k++) {
            if (cuts[k] >= from && cuts[k] <= hi) {
                if (cuts[k] > from) class_add(&raw, from, cuts[k] - 1);
                class_add(&esc, cuts[k], cuts[k]);
                from = cuts[k] + 1;
            }
        }
        if (from <= hi) class_add(&raw, from, hi);
    }
    size_t alts = (raw.n > 0) + esc.n;
    if (alts > 1) wna16_buf_put(out, "(", 1);
    if (raw.n) emit_ranges(out, raw.r, raw.n);
    for (size_t i = 0; i < esc.n; i++) {
        if (raw.n || i) wna16_buf_put(out, " | ", 3);
        json_escape_literal(out, esc.r[2 * i]);
    }
    if (alts > 1) wna16_buf_put(out, ")", 1);
}

/* ------------------------------------------------------------- parsing */

static bool parse_alt(rparse *p, wna16_buf *out);

static bool parse_class(rparse *p, rclass *c) {
    p->s++; /* [ */
    bool negate = p->s < p->end && *p->s == '^';
    if (negate) p->s++;
    bool first = true;
    while (p->s < p->end && (*p->s != ']' || first)) {
        first = false;
        uint32_t lo, hi;
        if (*p->s == '[' && p->s + 1 < p->end && p->s[1] == ':')
            return r_fail(p, WNA16_ERR_UNSUPPORTED, "POSIX classes ([:alpha:]) are not supported"), false;
        if (*p->s == '\\') {
            p->s++;
            int k = parse_escape(p, &lo, c);
            if (!k) return false;
            if (k == 2) continue;
        } else if (!next_cp(p, &lo)) {
            return false;
        }
        hi = lo;
        if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            if (*p->s == '\\') {
                p->s++;
                rclass junk = {.n = 0};
                int k = parse_escape(p, &hi, &junk);
                if (!k) return false;
                if (k == 2) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "a class as a range end"), false;
            } else if (!next_cp(p, &hi)) {
                return false;
            }
            if (hi < lo) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "class range out of order"), false;
        }
        class_add(c, lo, hi);
    }
    if (p->s >= p->end) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "unterminated class"), false;
    p->s++;
    if (c->overflow) return r_fail(p, WNA16_ERR_LIMIT, "class with more than 64 ranges"), false;
    class_normalize(c, negate);
    return true;
}

static bool parse_group(rparse *p, wna16_buf *out) {
    p->s++; /* ( */
    if (p->s < p->end && *p->s == '?') {
        if (p->end - p->s >= 2 && p->s[1] == ':') {
            p->s += 2;
        } else if (p->end - p->s >= 3 && (p->s[1] == 'P' || p->s[1] == '<') &&
                   (p->s[1] == 'P' ? p->s[2] == '<' : p->s[2] != '=' && p->s[2] != '!')) {
            const char *gt = memchr(p->s, '>', (size_t)(p->end - p->s));
            if (!gt) return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "unterminated group name"), false;
            p->s = gt + 1;
        } else {
            return r_fail(p, WNA16_ERR_UNSUPPORTED,
                          "lookaround, flags and other (?...) groups are not supported"),
                   false;
        }
    }
    if (++p->nesting > RE_MAX_NESTING)
        return r_fail(p, WNA16_ERR_LIMIT, "groups nested more than 128 deep"), false;
    wna16_buf_put(out, "(", 1);
    if (!parse_alt(p, out)) return false;
    if (p->s >= p->end || *p->s != ')') return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "missing ')'"), false;
    p->s++;
    p->nesting--;
    wna16_buf_put(out, ")", 1);
    return true;
}

/* One atom into out; false at the end of a concatenation or on error. */
static bool parse_atom(rparse *p, wna16_buf *out) {
    char c = *p->s;
    if (c == '(') return parse_group(p, out);
    if (c == '[') {
        rclass cl = {.n = 0};
        if (!parse_class(p, &cl)) return false;
        emit_class(p, out, &cl);
        return true;
    }
    if (c == '.') {
        p->s++;
        rclass cl = {.n = 0};
        class_add(&cl, '\n', '\n');
        class_normalize(&cl, true);
        emit_class(p, out, &cl);
        return true;
    }
    if (c == '*' || c == '+' || c == '?')
        return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "nothing to repeat"), false;
    uint32_t cp;
    if (c == '\\') {
        p->s++;
        rclass cl = {.n = 0};
        int k = parse_escape(p, &cp, &cl);
        if (!k) return false;
        if (k == 2) {
            emit_class(p, out, &cl);
            return true;
        }
    } else if (!next_cp(p, &cp)) {
        return false;
    }
    emit_char(p, out, cp);
    return true;
}

/* {m}, {m,}, {m,n}, {,n}: false (and p->s unchanged) when it is not one,
 * which makes the brace a literal as in Python. */
static bool parse_count(rparse *p, int32_t *min, int32_t *max) {
    const char *s = p->s + 1;
    int64_t a = -1, b = -1;
    for (; s < p->end && *s >= '0' && *s <= '9'; s++) a = (a < 0 ? 0 : a) * 10 + (*s - '0'), a = a > 1000000 ? 1000000 : a;
    bool comma = s < p->end && *s == ',';
    if (comma)
        for (s++; s < p->end && *s >= '0' && *s <= '9'; s++) b = (b < 0 ? 0 : b) * 10 + (*s - '0'), b = b > 1000000 ? 1000000 : b;
    if (s >= p->end || *s != '}' || (a < 0 && b < 0)) return false;
    *min = a < 0 ? 0 : (int32_t)a;
    *max = comma ? (int32_t)b : *min;
    p->s = s + 1;
    return true;
}

static bool parse_concat(rparse *p, wna16_buf *out) {
    bool any = false;
    while (p->s < p->end && *p->s != '|' && *p->s != ')') {
        if (*p->s == '^' || *p->s == '$') {
            bool at_start = p->s == p->start, at_end = p->s + 1 == p->end;
            if ((*p->s == '^' && !at_start) || (*p->s == '$' && !at_end))
                return r_fail(p, WNA16_ERR_UNSUPPORTED, "anchors (^, $) only at the ends of the pattern"),
                       false;
            p->s++;
            continue;
        }
        wna16_buf atom = {0};
        if (!parse_atom(p, &atom)) {
            wna16_buf_free(&atom);
            return false;
        }
        int reps = 0;
        for (;;) {
            int32_t min = -2, max = -1;
            if (p->s < p->end && *p->s == '*') min = 0, max = -1, p->s++;
            else if (p->s < p->end && *p->s == '+') min = 1, max = -1, p->s++;
            else if (p->s < p->end && *p->s == '?') min = 0, max = 1, p->s++;
            else if (p->s < p->end && *p->s == '{' && parse_count(p, &min, &max)) {
                if (max >= 0 && max < min) {
                    wna16_buf_free(&atom);
                    return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "repetition {m,n} with n < m"), false;
                }
            }
            if (min == -2) break;
            if (++reps > 1) {
                wna16_buf_free(&atom);
                return r_fail(p, WNA16_ERR_INVALID_ARGUMENT, "multiple repeat"), false;
            }
            if (p->s < p->end && (*p->s == '?' || *p->s == '+')) p->s++; /* lazy/possessive: same language */
            wna16_buf w = {0};
            wna16_buf_put(&w, "(", 1);
            wna16_buf_put(&w, atom.data ? atom.data : "", atom.len);
            if (max < 0 && min <= 1)
                wna16_buf_put(&w, min ? ")+" : ")*", 2);
            else if (max < 0)
                wna16_buf_printf(&w, "){%d,}", (int)min);
            else
                wna16_buf_printf(&w, "){%d,%d}", (int)min, (int)max);
            wna16_buf_free(&atom);
            atom = w;
        }
        if (any) wna16_buf_put(out, " ", 1);
        wna16_buf_put(out, atom.data ? atom.data : "", atom.len);
        wna16_buf_free(&atom);
        any = true;
    }
    if (!any) wna16_buf_put(out, "\"\"", 2);
    return !p->st;
}

static bool parse_alt(rparse *p, wna16_buf *out) {
    for (;;) {
        if (!parse_concat(p, out)) return false;
        if (p->s < p->end && *p->s == '|') {
            p->s++;
            wna16_buf_put(out, " | ", 3);
            continue;
        }
        return true;
    }
}

wna16_status regex_to_gbnf(wna16_diag *d, const char *re, size_t len, unsigned flags,
                           const grammar_limits *lim, wna16_buf *out) {
    if (len > lim->max_text)
        return wna16_fail(d, WNA16_ERR_LIMIT, "regex of %zu bytes is over the limit of %zu", len,
                          lim->max_text);
    rparse p = {.d = d, .s = re, .start = re, .end = re + len, .flags = flags};
    bool search = flags & REGEX_SEARCH;
    bool head = search && !(len && re[0] == '^');
    bool tail = search && !(len && re[len - 1] == '$' && (len < 2 || re[len - 2] != '\\'));
    wna16_buf_put(out, "(", 1);
    if (head) {
        rparse any = p;
        rclass cl = {.n = 0};
        class_add(&cl, '\n', '\n');
        class_normalize(&cl, true);
        wna16_buf_put(out, "(", 1);
        emit_class(&any, out, &cl);
        wna16_buf_put(out, ")* ", 3);
    }
    wna16_buf_put(out, "(", 1);
    bool ok = parse_alt(&p, out);
    if (ok && p.s < p.end) r_fail(&p, WNA16_ERR_INVALID_ARGUMENT, "unbalanced ')'");
    wna16_buf_put(out, ")", 1);
    if (tail) {
        rclass cl = {.n = 0};
        class_add(&cl, '\n', '\n');
        class_normalize(&cl, true);
        wna16_buf_put(out, " (", 2);
        emit_class(&p, out, &cl);
        wna16_buf_put(out, ")*", 2);
    }
    wna16_buf_put(out, ")", 1);
    if (!p.st && out->failed) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    return p.st;
}
