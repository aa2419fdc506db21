/* Text helpers every stage shares: UTF-8 encoding and decoding, and GBNF
 * literals (the schema, regex and tool-call compilers emit GBNF text). */
#include <stdio.h>

#include "grammar/grammar_internal.h"

/* ---------------------------------------------------------------- UTF-8 */

size_t grammar_utf8_encode(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    o[0] = (uint8_t)(0xF0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t grammar_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (!n) return 0;
    uint8_t c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* ------------------------------------------------------------- literals */

void gbnf_put_cp(wna16_buf *out, uint32_t cp, bool in_class) {
    char tmp[16];
    if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
        tmp[0] = '\\';
        tmp[1] = (char)cp;
        wna16_buf_put(out, tmp, 2);
    } else if (cp < 0x20 || cp == 0x7F) {
        snprintf(tmp, sizeof tmp, "\\x%02X", (unsigned)cp);
        wna16_buf_put(out, tmp, 4);
    } else {
        uint8_t u[4];
        size_t n = grammar_utf8_encode(cp, u);
        if (!n) {
            snprintf(tmp, sizeof tmp, "\\U%08X", (unsigned)cp);
            wna16_buf_put(out, tmp, 10);
        } else {
            wna16_buf_put(out, (const char *)u, n);
        }
    }
}

void grammar_gbnf_literal(wna16_buf *out, const char *text, size_t len) {
    wna16_buf_put(out, "\"", 1);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = grammar_utf8_decode((const uint8_t *)text + i, len - i, &cp);
        if (!n) { /* not UTF-8: the byte as a code point keeps the text parseable */
            cp = (uint8_t)text[i];
            n = 1;
        }
        gbnf_put_cp(out, cp, false);
        i += n;
    }
    wna16_buf_put(out, "\"", 1);
}
