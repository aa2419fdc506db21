/* Lexer of the Jinja subset: template text to tokens, following jinja2's
 * lexer.py with transformers' settings: trim_blocks (the newline after a
 * block or comment tag goes), lstrip_blocks (the spaces before a block or
 * comment tag on its own line go), `-` and `+` whitespace control, brackets
 * balanced before a tag can end (so "}}" inside a dict literal is not an
 * end), newlines normalized to \n and one trailing newline dropped
 * (keep_trailing_newline=False). */
#include "core/utf8.h"
#include "jinja/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jlex {
    wna16_diag *d;
    jarena *a;
    const char *src;
    size_t n, pos;
    int line;
    jtok *toks;
    size_t ntoks, cap;
    bool line_starting;
} jlex;

static wna16_status lex_fail(jlex *L, int line, const char *msg) {
    return wna16_fail(L->d, WNA16_ERR_INVALID_ARGUMENT, "chat template line %d: %s", line, msg);
}

static wna16_status lex_oom(jlex *L) {
    if (L->a->total > JINJA_MAX_MEMORY)
        return wna16_fail(L->d, WNA16_ERR_LIMIT, "chat template needs more than %u MiB to parse",
                          JINJA_MAX_MEMORY >> 20);
    return wna16_fail(L->d, WNA16_ERR_OUT_OF_MEMORY, "chat template: out of memory");
}

static wna16_status push(jlex *L, jtok t) {
    if (L->ntoks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *nt = wna16_jinja_alloc(L->a, cap * sizeof *nt);
        if (!nt) return lex_oom(L);
        if (L->ntoks) memcpy(nt, L->toks, L->ntoks * sizeof *nt);
        L->toks = nt, L->cap = cap;
    }
    L->toks[L->ntoks++] = t;
    return WNA16_OK;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Length of the whitespace code point at s (Python's str.isspace), or 0. */
static size_t space_at(const char *s, size_t n) {
    uint32_t cp;
    size_t k = wna16_jinja_u8_decode(s, n, &cp);
    return k && wna16_jinja_u8_is_space(cp) ? k : 0;
}

/* Python's text.rstrip() on [s, s + *n). */
static void rstrip_ws(const char *s, size_t *n) {
    while (*n > 0) {
        size_t k = 1; /* back up to the start of the last code point */
        while (k < *n && k < 4 && ((unsigned char)s[*n - k] & 0xC0) == 0x80) k++;
        if (!space_at(s + *n - k, k)) break;
        *n -= k;
    }
}

static size_t skip_ws(const char *s, size_t n, size_t p) {
    for (size_t k; p < n && (k = space_at(s + p, n - p));) p += k;
    return p;
}

/* lstrip_blocks: the text between the last newline and a block or comment
 * tag goes when it is all whitespace (and the tag starts a line). */
static void lstrip_text(const jlex *L, const char *s, size_t *n) {
    size_t l = *n;
    while (l > 0 && s[l - 1] != '\n') l--;
    if (l == 0 && !L->line_starting) return;
    if (l == *n) return;
    if (skip_ws(s, *n, l) == *n) *n = l;
}

/* ------------------------------------------------------- expression tokens */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python's unicode-escape decoding of a string literal's body. */
static wna16_status decode_string(jlex *L, int line, const char *s, size_t n, jtok *t) {
    char *o = wna16_jinja_alloc(L->a, n + 1);
    if (!o) return lex_oom(L);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            o[k++] = s[i];
            continue;
        }
        char e = s[++i];
        const char *simple = strchr("\\'\"abfnrtv", e);
        if (e && simple) {
            static const char map[] = "\\'\"\a\b\f\n\r\t\v";
            o[k++] = map[simple - "\\'\"abfnrtv"];
        } else if (e == '\n') {
            /* a backslash-newline continues the line */
        } else if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int m = 0; m < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; m++)
                v = v * 8 + (s[++i] - '0');
            k += wna16_utf8_encode((uint32_t)v, o + k);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int m = 0; m < digits; m++) {
                int h = i + 1 < n ? hexval(s[i + 1]) : -1;
                if (h < 0) return lex_fail(L, line, "truncated \\x, \\u or \\U escape in a string");
                v = v * 16 + (uint32_t)h, i++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return lex_fail(L, line, "string escape is not a Unicode scalar value");
            k += wna16_utf8_encode(v, o + k);
        } else if (e == 'N') {
            return wna16_fail(L->d, WNA16_ERR_UNSUPPORTED,
                              "chat template line %d: \\N{...} string escapes are not supported",
                              line);
        } else {
            o[k++] = '\\'; /* unknown escapes stay as written */
            o[k++] = e;
        }
    }
    o[k] = 0;
    t->t = T_STRING, t->s = o, t->n = k;
    return WNA16_OK;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* digits with single underscores between them (1_000); returns the end. */
static size_t scan_digits(const char *s, size_t n, size_t p) {
    while (p < n && (is_digit(s[p]) || (s[p] == '_' && p + 1 < n && is_digit(s[p + 1])))) p++;
    return p;
}

static wna16_status lex_number(jlex *L, jtok *t) {
    const char *s = L->src;
    size_t p = scan_digits(s, L->n, L->pos), end = p;
    bool is_float = false;
    if (p + 1 < L->n && s[p] == '.' && is_digit(s[p + 1]))
        end = scan_digits(s, L->n, p + 1), is_float = true;
    if (end < L->n && (s[end] == 'e' || s[end] == 'E')) {
        size_t q = end + 1;
        if (q < L->n && (s[q] == '+' || s[q] == '-')) q++;
        if (q < L->n && is_digit(s[q])) end = scan_digits(s, L->n, q), is_float = true;
    }
    char buf[128];
    size_t k = 0;
    for (size_t i = L->pos; i < end && k + 1 < sizeof buf; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = 0;
    if (end - L->pos >= sizeof buf - 1) return lex_fail(L, L->line, "number literal too long");
    t->line = L->line;
    if (is_float) {
        t->t = T_FLOAT, t->f = strtod(buf, NULL);
    } else {
        char *e;
        unsigned long long v = strtoull(buf, &e, 10);
        if (v > INT64_MAX)
            return wna16_fail(L->d, WNA16_ERR_UNSUPPORTED,
                              "chat template line %d: integer literal beyond 64 bits", L->line);
        t->t = T_INT, t->i = (int64_t)v;
    }
    L->pos = end;
    return WNA16_OK;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";

static wna16_status lex_operator(jlex *L, jtok *t, int *balance) {
    const char *s = L->src + L->pos;
    size_t left = L->n - L->pos;
    t->t = T_OP, t->line = L->line, t->s = s;
    for (size_t i = 0; i < sizeof OPS2 / sizeof *OPS2; i++)
        if (left >= 2 && !memcmp(s, OPS2[i], 2)) {
            t->n = 2, L->pos += 2;
            return WNA16_OK;
        }
    if (!strchr(OPS1, *s) || !*s) {
        char msg[64];
        snprintf(msg, sizeof msg, "unexpected character '%c' in a tag",
                 (*s >= 32 && *s < 127) ? *s : '?');
        return lex_fail(L, L->line, msg);
    }
    if (*s == '(' || *s == '[' || *s == '{') (*balance)++;
    if ((*s == ')' || *s == ']' || *s == '}') && --(*balance) < 0)
        return lex_fail(L, L->line, "unbalanced closing bracket");
    t->n = 1, L->pos++;
    return WNA16_OK;
}

static wna16_status lex_token(jlex *L, int *balance) {
    const char *s = L->src;
    char ch = s[L->pos];
    jtok t = {.line = L->line};
    if (is_digit(ch)) {
        WNA16_TRY(lex_number(L, &t));
    } else if (is_name_start(ch)) {
        size_t p = L->pos;
        while (p < L->n && (is_name_start(s[p]) || is_digit(s[p]))) p++;
        t.t = T_NAME, t.s = s + L->pos, t.n = p - L->pos;
        L->pos = p;
    } else if (ch == '\'' || ch == '"') {
        size_t p = L->pos + 1;
        while (p < L->n && s[p] != ch) p += s[p] == '\\' ? 2 : 1;
        if (p >= L->n) return lex_fail(L, L->line, "unterminated string literal");
        WNA16_TRY(decode_string(L, L->line, s + L->pos + 1, p - L->pos - 1, &t));
        L->line += count_nl(s + L->pos, p - L->pos);
        L->pos = p + 1;
    } else {
        WNA16_TRY(lex_operator(L, &t, balance));
    }
    return push(L, t);
}

/* Matches a tag end ("%}" or "}}") at L->pos with its whitespace control;
 * consumes it and what it trims. */
static bool lex_tag_end(jlex *L, char close1, bool trim_newline) {
    const char *s = L->src;
    size_t p = L->pos, n = L->n;
    char sign = 0;
    if (p < n && (s[p] == '-' || s[p] == '+') && close1 == '%')
        sign = s[p++];
    else if (p < n && s[p] == '-')
        sign = s[p++];
    if (p + 1 >= n || s[p] != close1 || s[p + 1] != '}') return false;
    p += 2;
    if (sign == '-')
        p = skip_ws(s, n, p);
    else if (sign != '+' && trim_newline && p < n && s[p] == '\n')
        p++;
    L->line += count_nl(s + L->pos, p - L->pos);
    L->line_starting = p > L->pos && s[p - 1] == '\n';
    L->pos = p;
    return true;
}

/* The inside of {{ ... }} or {% ... %}, up to and including its end. */
static wna16_status lex_tag(jlex *L, bool block, int start_line) {
    int balance = 0;
    for (;;) {
        size_t p = skip_ws(L->src, L->n, L->pos);
        L->line += count_nl(L->src + L->pos, p - L->pos);
        L->pos = p;
        if (L->pos >= L->n)
            return lex_fail(L, start_line,
                            block ? "unterminated {% ... %} tag" : "unterminated {{ ... }} tag");
        if (balance == 0 && lex_tag_end(L, block ? '%' : '}', block))
            return push(L, (jtok){.t = block ? T_BLOCK_END : T_VAR_END, .line = L->line});
        WNA16_TRY(lex_token(L, &balance));
    }
}

static wna16_status lex_comment(jlex *L, int start_line) {
    const char *s = L->src;
    for (size_t p = L->pos; p + 1 < L->n; p++) {
        if (s[p] != '#' || s[p + 1] != '}') continue;
        size_t q = p + 2;
        char sign = p > L->pos ? s[p - 1] : 0;
        if (sign == '-')
            q = skip_ws(s, L->n, q);
        else if (sign != '+' && q < L->n && s[q] == '\n')
            q++;
        L->line += count_nl(s + L->pos, q - L->pos);
        L->line_starting = s[q - 1] == '\n';
        L->pos = q;
        return WNA16_OK;
    }
    return lex_fail(L, start_line, "unterminated {# ... #} comment");
}

/* Next "{{", "{%" or "{#" at or after p, or n. */
static size_t find_tag(const char *s, size_t n, size_t p) {
    for (; p + 1 < n; p++)
        if (s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')) return p;
    return n;
}

static wna16_status lex_all(jlex *L) {
    L->line_starting = true;
    while (L->pos < L->n) {
        size_t tag = find_tag(L->src, L->n, L->pos);
        const char *text = L->src + L->pos;
        size_t tn = tag - L->pos;
        int text_line = L->line;
        L->line += count_nl(text, tn);
        char kind = tag < L->n ? L->src[tag + 1] : 0;
        char sign = tag + 2 < L->n ? L->src[tag + 2] : 0;
        if (kind && sign == '-')
            rstrip_ws(text, &tn);
        else if (kind && kind != '{' && sign != '+')
            lstrip_text(L, text, &tn);
        if (tn) WNA16_TRY(push(L, (jtok){.t = T_DATA, .line = text_line, .s = text, .n = tn}));
        if (!kind) break;
        L->pos = tag + 2 + (sign == '-' || sign == '+');
        L->line_starting = false;
        int line = L->line;
        if (kind == '#') {
            WNA16_TRY(lex_comment(L, line));
        } else {
            WNA16_TRY(
                push(L, (jtok){.t = kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, .line = line}));
            WNA16_TRY(lex_tag(L, kind == '%', line));
        }
    }
    return push(L, (jtok){.t = T_EOF, .line = L->line});
}

/* \r\n and \r become \n; one trailing newline goes. */
static char *normalize(jarena *a, const char *src, size_t n, size_t *out_n) {
    char *o = wna16_jinja_alloc(a, n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            if (i + 1 < n && src[i + 1] == '\n') i++;
            o[k++] = '\n';
        } else {
            o[k++] = src[i];
        }
    }
    if (k && o[k - 1] == '\n') k--;
    o[k] = 0;
    *out_n = k;
    return o;
}

wna16_status wna16_jinja_lex(wna16_diag *d, jarena *a, const char *src, size_t n,
                             const jtok **toks) {
    jlex L = {.d = d, .a = a, .line = 1};
    L.src = normalize(a, src, n, &L.n);
    if (!L.src) return lex_oom(&L);
    WNA16_TRY(lex_all(&L));
    *toks = L.toks;
    return WNA16_OK;
}
