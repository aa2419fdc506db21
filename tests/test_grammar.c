/* The grammar engine (src/grammar, docs/grammar.md): each spec kind accepts
 * its strings and refuses others at the first wrong byte; the JSON Schema
 * subset keyword by keyword, generated JSON re-parsed and validated by an
 * independent validator (PCRE2 for patterns); unsupported keywords and
 * constructs named in errors; token masks equal to a brute-force check of
 * every token; random walks under the mask always complete; the limits
 * trip with clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar.h"
#include "testing.h"

static wna16_diag D;
static grammar_vocab *bytes_vocab; /* ids 0..255: one byte each; 256: stop */
static grammar_vocab *mixed_vocab; /* bytes, multi-byte pieces, partial UTF-8; stop last */
static grammar_vocab *qwen_vocab;
static wna16_tokenizer *qwen_tok;
static wna16_ctx *ctx;

/* ------------------------------------------------------------- helpers */

static grammar *compile_spec(grammar_kind kind, const char *text, bool strict) {
    grammar_spec s = {.kind = kind, .text = text, .len = text ? strlen(text) : 0, .strict = strict};
    grammar *g = NULL;
    wna16_status st = grammar_compile(&D, &s, &g);
    if (st) fprintf(stderr, "compile failed (%s): %s\n  for: %s\n", wna16_status_str(st), D.detail, text);
    return g;
}

static grammar *gbnf(const char *t) { return compile_spec(GRAMMAR_GBNF, t, true); }
static grammar *schema(const char *t) { return compile_spec(GRAMMAR_JSON_SCHEMA, t, true); }
static grammar *regex(const char *t) { return compile_spec(GRAMMAR_REGEX, t, true); }

/* Compiling fails with want and a detail containing sub. */
#define CHECK_COMPILE_FAILS(kind_, text_, want, sub)                                               \
    do {                                                                                           \
        grammar_spec s_ = {.kind = (kind_), .text = (text_), .len = strlen(text_), .strict = true};\
        grammar *g_ = NULL;                                                                        \
        wna16_status st_ = grammar_compile(&D, &s_, &g_);                                          \
        CHECK_MSG(st_ == (want) && strstr(D.detail, sub), "%s -> %s \"%s\" (want %s \"%s\")",      \
                  text_, wna16_status_str(st_), st_ ? D.detail : "", wna16_status_str(want), sub); \
        grammar_free(g_);                                                                          \
    } while (0)

/* Feeds s byte by byte: the offset of the first refused byte, -2 when all
 * are taken but the text is not complete, -1 when it is a whole string. */
static int refused_at(const grammar *g, const char *s, size_t n) {
    grammar_matcher *m;
    if (grammar_matcher_create(&D, g, bytes_vocab, &m)) return -3;
    int r = -1;
    for (size_t i = 0; i < n && r == -1; i++)
        if (grammar_matcher_accept_bytes(&D, m, s + i, 1)) r = (int)i;
    if (r == -1 && !grammar_matcher_can_end(m)) r = -2;
    grammar_matcher_free(m);
    return r;
}

#define ACCEPTS(g, s)                                                                              \
    do {                                                                                           \
        int r_ = (g) ? refused_at(g, s, strlen(s)) : -4;                                           \
        CHECK_MSG(r_ == -1, "'%s' refused at %d", s, r_);                                          \
    } while (0)
#define REFUSES_AT(g, s, at)                                                                       \
    do {                                                                                           \
        int r_ = (g) ? refused_at(g, s, strlen(s)) : -4;                                           \
        CHECK_MSG(r_ == (at), "'%s' refused at %d, want %d", s, r_, at);                           \
    } while (0)

static uint32_t rng_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Token masks against the reference: every token checked byte by byte. */
static int mask_mismatches(grammar_matcher *m, const grammar_vocab *v, const uint64_t *mask) {
    int bad = 0;
    for (size_t id = 0; id < grammar_vocab_n_logits(v); id++) {
        size_t len;
        const char *b = grammar_vocab_token(v, (int32_t)id, &len);
        bool ref = false;
        if (grammar_vocab_is_stop(v, (int32_t)id))
            ref = grammar_matcher_can_end(m);
        else if (b)
            grammar_matcher_check_bytes(&D, m, b, len, &ref);
        bool got = mask[id >> 6] >> (id & 63) & 1;
        if (got != ref && bad++ < 3)
            fprintf(stderr, "  mask %d, reference %d for token %zu '%.*s'\n", got, ref, id,
                    (int)len, b ? b : "");
    }
    return bad;
}

static bool is_closer(const char *b, size_t len) {
    return len && strchr("\"}],:;)>\n", b[0]) != NULL;
}

/* A random walk under the mask: leans towards tokens that close things so
 * that it ends. Returns the text (malloc'd), NULL on a failure; *ended
 * tells whether a stop token was taken. check_every > 0 compares the mask
 * with the reference every that many steps (mismatches counted). */
static char *random_walk(const grammar *g, const grammar_vocab *v, uint32_t seed, int max_steps,
                         int check_every, int *mismatches, bool *ended, size_t *out_len) {
    grammar_matcher *m;
    *ended = false;
    if (grammar_matcher_create(&D, g, v, &m)) return NULL;
    size_t words = grammar_mask_words(v), n_logits = grammar_vocab_n_logits(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    int32_t *allowed = malloc(n_logits * sizeof *allowed), *closers = malloc(n_logits * sizeof *closers);
    wna16_buf out = {0};
    uint32_t rng = seed * 2654435761u + 1;
    bool ok = true;
    for (int step = 0; step < max_steps && ok; step++) {
        if (grammar_matcher_fill_mask(&D, m, mask)) {
            fprintf(stderr, "fill_mask: %s\n", D.detail);
            ok = false;
            break;
        }
        if (check_every > 0 && step % check_every == 0 && mismatches)
            *mismatches += mask_mismatches(m, v, mask);
        size_t n = 0, nc = 0;
        int32_t stop = -1;
        for (size_t id = 0; id < n_logits; id++) {
            if (!(mask[id >> 6] >> (id & 63) & 1)) continue;
            if (grammar_vocab_is_stop(v, (int32_t)id)) {
                stop = (int32_t)id;
                continue;
            }
            size_t len;
            const char *b = grammar_vocab_token(v, (int32_t)id, &len);
            allowed[n++] = (int32_t)id;
            if (is_closer(b, len)) closers[nc++] = (int32_t)id;
        }
        int32_t pick;
        if (stop >= 0 && (!n || rng_next(&rng) % 2)) {
            pick = stop;
        } else if (!n) {
            fprintf(stderr, "empty mask at step %d after '%.*s'\n", step, (int)out.len, out.data);
            ok = false;
            break;
        } else if (nc && rng_next(&rng) % 3) {
            pick = closers[rng_next(&rng) % nc];
        } else {
            pick = allowed[rng_next(&rng) % n];
        }
        if (grammar_matcher_accept(&D, m, pick)) {
            fprintf(stderr, "accept %d: %s\n", pick, D.detail);
            ok = false;
            break;
        }
        if (pick == stop) {
            *ended = true;
            break;
        }
        size_t len;
        const char *b = grammar_vocab_token(v, pick, &len);
        wna16_buf_put(&out, b, len);
    }
    if (out_len) *out_len = out.len;
    wna16_buf_put(&out, "", 0);
    free(mask);
    free(allowed);
    free(closers);
    grammar_matcher_free(m);
    if (!ok) {
        wna16_buf_free(&out);
        return NULL;
    }
    return out.data;
}

/* ------------------------------------------------------ JSON validator */

static bool validate(json_t *s, json_t *root, json_t *v, int depth);

static bool regex_search(const char *pattern, const char *text, size_t len) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    if (!re) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)text, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((uint8_t)s[i] & 0xC0) != 0x80;
    return c;
}

static bool type_is(json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static const char *format_regex(const char *f) {
    if (!strcmp(f, "date")) return "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$";
    if (!strcmp(f, "uuid")) return "^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$";
    if (!strcmp(f, "ipv4")) return "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$";
    if (!strcmp(f, "email")) return "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$";
    if (!strcmp(f, "date-time")) return "^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?(Z|[+-]\\d\\d:\\d\\d)$";
    return NULL;
}

static bool validate_object(json_t *s, json_t *root, json_t *v, int depth) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return false;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        json_t *ps = json_object_get(props, k);
        if (ps) {
            if (!validate(ps, root, x, depth + 1)) return false;
        } else if (!addl || json_is_false(addl)) { /* strict: absent means false */
            return false;
        } else if (json_is_object(addl) && !validate(addl, root, x, depth + 1)) {
            return false;
        }
    }
    return true;
}

static bool validate_array(json_t *s, json_t *root, json_t *v, int depth) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    size_t n = json_array_size(v), k = json_array_size(prefix);
    if (mn && n < (size_t)json_integer_value(mn)) return false;
    if (mx && n > (size_t)json_integer_value(mx)) return false;
    for (size_t i = 0; i < n; i++) {
        json_t *is = i < k ? json_array_get(prefix, i) : items;
        if (is && !validate(is, root, json_array_get(v, i), depth + 1)) return false;
    }
    return true;
}

static bool validate(json_t *s, json_t *root, json_t *v, int depth) {
    if (depth > 64) return false;
    if (json_is_true(s)) return true;
    json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        const char *r = json_string_value(x);
        json_t *t = root;
        if (!strncmp(r, "#/$defs/", 8)) t = json_object_get(json_object_get(root, "$defs"), r + 8);
        return t && validate(t, root, v, depth + 1);
    }
    if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        int hits = 0;
        for (size_t i = 0; i < json_array_size(x); i++) hits += validate(json_array_get(x, i), root, v, depth + 1);
        return json_object_get(s, "oneOf") ? hits == 1 : hits > 0;
    }
    if ((x = json_object_get(s, "const"))) return json_equal(x, v);
    if ((x = json_object_get(s, "enum"))) {
        for (size_t i = 0; i < json_array_size(x); i++)
            if (json_equal(json_array_get(x, i), v)) return true;
        return false;
    }
    json_t *type = json_object_get(s, "type");
    if (json_is_string(type) && !type_is(v, json_string_value(type))) return false;
    if (json_is_array(type)) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(type); i++) any |= type_is(v, json_string_value(json_array_get(type, i)));
        if (!any) return false;
    }
    if (json_is_object(v) && !validate_object(s, root, v, depth)) return false;
    if (json_is_array(v) && !validate_array(s, root, v, depth)) return false;
    if (json_is_string(v)) {
        const char *t = json_string_value(v);
        size_t n = json_string_length(v), chars = utf8_chars(t, n);
        if ((x = json_object_get(s, "pattern")) && !regex_search(json_string_value(x), t, n)) return false;
        if ((x = json_object_get(s, "format")) && !regex_search(format_regex(json_string_value(x)), t, n)) return false;
        if ((x = json_object_get(s, "minLength")) && chars < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxLength")) && chars > (size_t)json_integer_value(x)) return false;
    }
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if ((x = json_object_get(s, "minimum")) && i < json_number_value(x)) return false;
        if ((x = json_object_get(s, "maximum")) && i > json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMinimum")) && i <= json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMaximum")) && i >= json_number_value(x)) return false;
    }
    return true;
}

/* Random walks of a schema's grammar: every output parses and validates. */
static int valid_replies;

static void check_schema_walks(const char *schema_text, const grammar_vocab *v, int walks,
                               int check_every) {
    grammar *g = schema(schema_text);
    CHECK_MSG(g != NULL, "%s", schema_text);
    if (!g) return;
    json_t *s = json_loads(schema_text, 0, NULL);
    int mism = 0;
    for (int w = 0; w < walks; w++) {
        bool ended;
        size_t text_len;
        char *text = random_walk(g, v, (uint32_t)w + 1, 3000, check_every, &mism, &ended, &text_len);
        CHECK_MSG(text && ended, "walk %d of %s did not end: %s", w, schema_text, text ? text : "(failed)");
        if (text && ended) {
            json_error_t err;
            json_t *j = json_loadb(text, text_len, JSON_DECODE_ANY, &err);
            CHECK_MSG(j != NULL, "not JSON (%s): %s\n  schema %s", err.text, text, schema_text);
            if (j) CHECK_MSG(validate(s, s, j, 0), "invalid for %s: %s", schema_text, text);
            if (j && validate(s, s, j, 0)) valid_replies++;
            json_decref(j);
        }
        free(text);
    }
    CHECK_MSG(mism == 0, "%d mask mismatches for %s", mism, schema_text);
    json_decref(s);
    grammar_free(g);
}

/* ----------------------------------------------------------------- GBNF */

static void test_gbnf(void) {
    grammar *g = gbnf("root ::= \"ab\" [c-e]* \"f\"  # a comment\n");
    ACCEPTS(g, "abf");
    ACCEPTS(g, "abcdedcf");
    REFUSES_AT(g, "abxf", 2);
    REFUSES_AT(g, "abc", -2);
    REFUSES_AT(g, "abff", 3);
    grammar_free(g);

    g = gbnf("root ::= item (\",\" item)*\nitem ::= \"x\" | \"(\" root \")\"\n");
    ACCEPTS(g, "x,(x,(x)),x");
    REFUSES_AT(g, "((x)", -2);
    REFUSES_AT(g, "x,)", 2);
    grammar_free(g);

    /* groups across lines; repetition counts, negated classes, any char, UTF-8 */
    g = gbnf("root ::= (\n  \"a\" |\n  \"b\"\n)+ # more\n\n");
    ACCEPTS(g, "abba");
    REFUSES_AT(g, "abc", 2);
    grammar_free(g);
    g = gbnf("root ::= [0-9]{2,3} [^a-z\\]] . \"日本\"?\n");
    ACCEPTS(g, "12XY日本");
    ACCEPTS(g, "123-é");
    REFUSES_AT(g, "1X", 1);
    REFUSES_AT(g, "123456", 5);
    REFUSES_AT(g, "12]x", 2);
    REFUSES_AT(g, "12Xa日x", 7);
    grammar_free(g);
    g = gbnf("root ::= \"\\x41\\u00e9\\n\" | \"\\\"q\\\"\" | \"\\U0001F600\"\n");
    ACCEPTS(g, "Aé\n");
    ACCEPTS(g, "\"q\"");
    ACCEPTS(g, "😀");
    REFUSES_AT(g, "A\xc3\xa8", 2); /* è, not é: the second byte differs */
    grammar_free(g);
    /* empty alternatives, nullable rules, right recursion stays shallow */
    g = gbnf("root ::= a b\na ::= | \"x\" a\nb ::= \"y\"?\n");
    ACCEPTS(g, "");
    ACCEPTS(g, "xxxxy");
    REFUSES_AT(g, "xyx", 2);
    grammar_free(g);
    g = gbnf("root ::= \"(\" root \")\" | \"\"\n");
    char deep[2001];
    for (int i = 0; i < 1000; i++) deep[i] = '(', deep[1000 + i] = ')';
    deep[2000] = '\0';
    ACCEPTS(g, deep); /* under the default stack depth */
    grammar_free(g);

    /* a branch that can never finish is cut: its first byte is refused */
    g = gbnf("root ::= \"a\" x | \"b\"\nx ::= \"c\" x\n");
    REFUSES_AT(g, "a", 0);
    ACCEPTS(g, "b");
    grammar_free(g);

    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= foo\n", WNA16_ERR_INVALID_ARGUMENT, "rule 'foo' is used but not defined");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "start ::= \"a\"\n", WNA16_ERR_INVALID_ARGUMENT, "no rule 'root'");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= root \"a\" | \"b\"\n", WNA16_ERR_INVALID_ARGUMENT,
                        "left recursion (root -> root)");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= x\nx ::= y? \"a\"\ny ::= x | \"b\"\n",
                        WNA16_ERR_INVALID_ARGUMENT, "left recursion");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"a\"\nroot ::= \"b\"\n", WNA16_ERR_INVALID_ARGUMENT, "defined twice");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"abc\n", WNA16_ERR_INVALID_ARGUMENT, "line 1, column 14: unterminated");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"a\"\n  x ::= [b-a]\n", WNA16_ERR_INVALID_ARGUMENT, "line 2, column 13: class range out of order");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= <think>\n", WNA16_ERR_UNSUPPORTED, "token references");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"\\q\"\n", WNA16_ERR_INVALID_ARGUMENT, "unknown escape");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= * \"a\"\n", WNA16_ERR_INVALID_ARGUMENT, "repetition without an item");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"a\"{3,1}\n", WNA16_ERR_INVALID_ARGUMENT, "n < m");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= x\nx ::= x \"a\"\n", WNA16_ERR_INVALID_ARGUMENT, "matches no string");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"a\" )\n", WNA16_ERR_INVALID_ARGUMENT, "expected a newline");
}

/* --------------------------------------------------- regex and choice */

static void test_regex_choice(void) {
    grammar *g = regex("^[a-z]+@[a-z]+\\.(com|org)$");
    ACCEPTS(g, "ab@cd.com");
    ACCEPTS(g, "x@y.org");
    REFUSES_AT(g, "ab@cd.net", 6);
    REFUSES_AT(g, "@x.com", 0);
    grammar_free(g);
    g = regex("\\d{3}-\\d{2,}|[^\\s]\\w?\\.?x*?");
    ACCEPTS(g, "123-45");
    ACCEPTS(g, "123-4567");
    ACCEPTS(g, "é_.xx");
    REFUSES_AT(g, "123-4", -2);
    REFUSES_AT(g, " a", 0);
    grammar_free(g);
    g = regex("(?:ab|cd)+(?P<n>[0-9])\\u00e9\\x41\\t.{2}");
    ACCEPTS(g, "abcdab7éA\tzz");
    REFUSES_AT(g, "abc7", 3);
    REFUSES_AT(g, "ab7éA\t\nz", 7);
    grammar_free(g);
    g = regex("");
    ACCEPTS(g, "");
    REFUSES_AT(g, "a", 0);
    grammar_free(g);
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "a(?=b)", WNA16_ERR_UNSUPPORTED, "lookaround");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "(a)\\1", WNA16_ERR_UNSUPPORTED, "backreferences");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "\\bword", WNA16_ERR_UNSUPPORTED, "word boundaries");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "a^b", WNA16_ERR_UNSUPPORTED, "anchors");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "[[:alpha:]]", WNA16_ERR_UNSUPPORTED, "POSIX classes");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "(ab", WNA16_ERR_INVALID_ARGUMENT, "regex offset 3: missing ')'");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "a**", WNA16_ERR_INVALID_ARGUMENT, "multiple repeat");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "\\p{L}", WNA16_ERR_UNSUPPORTED, "Unicode property");

    const char *choices[] = {"yes", "no", "maybe so", "\"quoted\"\n"};
    grammar_spec s = {.kind = GRAMMAR_CHOICE, .choices = choices, .n_choices = 4};
    CHECK(grammar_compile(&D, &s, &g) == WNA16_OK);
    ACCEPTS(g, "yes");
    ACCEPTS(g, "maybe so");
    ACCEPTS(g, "\"quoted\"\n");
    REFUSES_AT(g, "ye", -2);
    REFUSES_AT(g, "yess", 3);
    REFUSES_AT(g, "nope", 2);
    grammar_free(g);
    s.n_choices = 0;
    CHECK(grammar_compile(&D, &s, &g) == WNA16_ERR_INVALID_ARGUMENT && strstr(D.detail, "at least one"));
}

/* ---------------------------------------------------------- JSON Schema */

static void test_json_object(void) {
    grammar *g = compile_spec(GRAMMAR_JSON_OBJECT, NULL, false);
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"a\": [1, -2.5e+3, true, false, null, \"\\u00e9\\n\"], \"b\": {\"c\": {}}}");
    ACCEPTS(g, "{\n  \"a\" : 1\n}");
    REFUSES_AT(g, "[1]", 0);
    REFUSES_AT(g, "{\"a\":}", 5);
    REFUSES_AT(g, "{\"a\": 01}", 7);
    REFUSES_AT(g, "{\"a\": \"\\uD800\"}", 10); /* a lone surrogate escape */
    REFUSES_AT(g, "{\"a\": \"\x01\"}", 7);
    REFUSES_AT(g, "{\"a\":     1}", 6); /* whitespace is bounded: one space, or a newline and indent */
    grammar_free(g);
    g = compile_spec(GRAMMAR_JSON_OBJECT, NULL, false);
    grammar_spec s = {.kind = GRAMMAR_JSON_OBJECT, .ws = GRAMMAR_WS_COMPACT};
    grammar_free(g);
    CHECK(grammar_compile(&D, &s, &g) == WNA16_OK);
    ACCEPTS(g, "{\"a\":[1,{}]}");
    REFUSES_AT(g, "{ ", 1);
    grammar_free(g);
}

static void test_schema_keywords(void) {
    grammar *g;
    /* type, each */
    g = schema("{\"type\": \"integer\"}");
    ACCEPTS(g, "-12");
    REFUSES_AT(g, "1.5", 1);
    grammar_free(g);
    g = schema("{\"type\": [\"string\", \"null\"]}");
    ACCEPTS(g, "null");
    ACCEPTS(g, "\"x\"");
    REFUSES_AT(g, "1", 0);
    grammar_free(g);
    g = schema("{\"type\": \"boolean\"}");
    ACCEPTS(g, "false");
    REFUSES_AT(g, "nul", 0);
    grammar_free(g);
    g = schema("{\"type\": \"number\"}");
    ACCEPTS(g, "0.25E-7");
    REFUSES_AT(g, ".5", 0);
    grammar_free(g);
    /* properties in order, required, additionalProperties (strict: none) */
    g = schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": "
               "{\"type\": \"string\"}, \"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}");
    ACCEPTS(g, "{\"b\": \"x\"}");
    ACCEPTS(g, "{\"a\": 1, \"b\": \"x\", \"c\": true}");
    ACCEPTS(g, "{\"b\": \"x\", \"c\": false}");
    REFUSES_AT(g, "{\"a\": 1}", 7);            /* b is required */
    REFUSES_AT(g, "{\"b\": \"x\", \"a\": 1}", 12); /* the schema's order */
    REFUSES_AT(g, "{\"b\": \"x\", \"d\": 1}", 12); /* no other key */
    grammar_free(g);
    /* additionalProperties: a schema; other keys never spell a declared one */
    g = schema("{\"properties\": {\"ab\": {\"type\": \"integer\"}}, \"additionalProperties\": "
               "{\"type\": \"boolean\"}}");
    ACCEPTS(g, "{\"ab\": 1, \"a\": true, \"abc\": false, \"x\\n\": true}");
    ACCEPTS(g, "{\"zz\": true}");
    REFUSES_AT(g, "{\"ab\": 1, \"ab\": true}", 13);
    REFUSES_AT(g, "{\"a\\u0062\": true}", 3); /* an escape while a declared key is still possible */
    REFUSES_AT(g, "{\"zz\": 1}", 7);
    grammar_free(g);
    g = compile_spec(GRAMMAR_JSON_SCHEMA, "{\"type\": \"object\"}", false); /* not strict: any keys */
    ACCEPTS(g, "{\"k\": [1, {\"x\": null}]}");
    grammar_free(g);
    /* enum (filtered by type), const */
    g = schema("{\"type\": \"string\", \"enum\": [\"red\", \"green\", 3, null, \"é\\\"\"]}");
    ACCEPTS(g, "\"red\"");
    ACCEPTS(g, "\"é\\\"\"");
    REFUSES_AT(g, "3", 0);
    REFUSES_AT(g, "\"blue\"", 1);
    grammar_free(g);
    g = schema("{\"const\": {\"a\": [1, \"x\"]}}");
    ACCEPTS(g, "{\"a\":[1,\"x\"]}");
    REFUSES_AT(g, "{\"a\": ", 5);
    grammar_free(g);
    /* items, prefixItems, minItems, maxItems */
    g = schema("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 2, \"maxItems\": 3}");
    ACCEPTS(g, "[1, 2]");
    ACCEPTS(g, "[1,2,3]");
    REFUSES_AT(g, "[1]", 2);
    REFUSES_AT(g, "[1, 2, 3, 4]", 8);
    REFUSES_AT(g, "[\"a\"]", 1);
    grammar_free(g);
    g = schema("{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": false}");
    ACCEPTS(g, "[]");
    ACCEPTS(g, "[\"a\"]");
    ACCEPTS(g, "[\"a\", 1]");
    REFUSES_AT(g, "[1]", 1);
    REFUSES_AT(g, "[\"a\", 1, 2]", 7);
    grammar_free(g);
    /* anyOf, oneOf, allOf of one */
    g = schema("{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"array\", \"items\": {\"const\": true}}]}");
    ACCEPTS(g, "7");
    ACCEPTS(g, "[true, true]");
    REFUSES_AT(g, "[false]", 1);
    grammar_free(g);
    g = schema("{\"oneOf\": [{\"const\": 1}, {\"const\": \"one\"}], \"title\": \"t\"}");
    ACCEPTS(g, "1");
    ACCEPTS(g, "\"one\"");
    REFUSES_AT(g, "2", 0);
    grammar_free(g);
    g = schema("{\"allOf\": [{\"type\": \"null\"}]}");
    ACCEPTS(g, "null");
    grammar_free(g);
    /* $ref and $defs, recursive */
    g = schema("{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": "
               "\"integer\"}, \"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}},"
               " \"required\": [\"v\"]}}, \"$ref\": \"#/$defs/node\"}");
    ACCEPTS(g, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": [{\"v\": 4, \"kids\": []}]}]}");
    REFUSES_AT(g, "{\"v\": 1, \"kids\": [{\"kids\": []}]}", 20);
    grammar_free(g);
    /* strings: pattern (a search unless anchored; JSON escapes), format, lengths */
    g = schema("{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}\\\\d+\\\"?$\"}");
    ACCEPTS(g, "\"AB12\"");
    ACCEPTS(g, "\"AB12\\\"\"");
    REFUSES_AT(g, "\"A1", 2);
    grammar_free(g);
    g = schema("{\"type\": \"string\", \"pattern\": \"ab\"}");
    ACCEPTS(g, "\"xxabyy\"");
    ACCEPTS(g, "\"ab\"");
    REFUSES_AT(g, "\"xa\"", 3);
    grammar_free(g);
    g = schema("{\"type\": \"string\", \"format\": \"date-time\"}");
    ACCEPTS(g, "\"2024-02-29T23:59:60.5+05:30\"");
    REFUSES_AT(g, "\"2024-13", 7);
    grammar_free(g);
    g = schema("{\"type\": \"string\", \"format\": \"uuid\"}");
    ACCEPTS(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    REFUSES_AT(g, "\"123e4567e", 9);
    grammar_free(g);
    g = schema("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}");
    ACCEPTS(g, "\"ab\"");
    ACCEPTS(g, "\"é\\n\\u0041\"");
    REFUSES_AT(g, "\"a\"", 2);
    REFUSES_AT(g, "\"abcd\"", 4);
    grammar_free(g);
    /* integer ranges, exclusive bounds */
    g = schema("{\"type\": \"integer\", \"minimum\": -15, \"exclusiveMaximum\": 1234}");
    ACCEPTS(g, "-15");
    ACCEPTS(g, "0");
    ACCEPTS(g, "1233");
    ACCEPTS(g, "999");
    REFUSES_AT(g, "-16", 2);
    REFUSES_AT(g, "1234", 3);
    REFUSES_AT(g, "12345", 3);
    REFUSES_AT(g, "-0", 1);
    grammar_free(g);
    g = schema("{\"type\": \"integer\", \"minimum\": 7}");
    ACCEPTS(g, "7");
    ACCEPTS(g, "123456789012");
    REFUSES_AT(g, "6", -2); /* 60 is valid */
    REFUSES_AT(g, "0", 0);
    REFUSES_AT(g, "-", 0);
    grammar_free(g);
}

static void test_schema_errors(void) {
    const struct {
        const char *schema, *detail;
        wna16_status st;
    } bad[] = {
        {"{\"not\": {}}", "keyword 'not' is not supported", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"if\": {}}}}", "#/properties/a: keyword 'if'", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"number\", \"multipleOf\": 2}", "'multipleOf'", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"number\", \"minimum\": 2}", "'minimum' is supported for integers only", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"array\", \"uniqueItems\": true}", "'uniqueItems'", WNA16_ERR_UNSUPPORTED},
        {"{\"patternProperties\": {}}", "'patternProperties'", WNA16_ERR_UNSUPPORTED},
        {"{\"allOf\": [{}, {}]}", "allOf with more than one schema", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"format\": \"hostname\"}", "format 'hostname' is not supported", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"pattern\": \"(?=x)\"}", "#: pattern: regex offset", WNA16_ERR_UNSUPPORTED},
        {"{\"$ref\": \"http://x/y.json\"}", "only local references", WNA16_ERR_UNSUPPORTED},
        {"{\"$ref\": \"#/$defs/missing\"}", "points at nothing", WNA16_ERR_INVALID_ARGUMENT},
        {"{\"type\": \"objekt\"}", "unknown type 'objekt'", WNA16_ERR_INVALID_ARGUMENT},
        {"{\"type\": \"array\", \"maxItems\": 100000}", "'maxItems' over 4096", WNA16_ERR_UNSUPPORTED},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "range is empty", WNA16_ERR_INVALID_ARGUMENT},
        {"{\"enum\": []}", "non-empty array", WNA16_ERR_INVALID_ARGUMENT},
        {"{\"type\": \"object\", \"anyOf\": [{}]}", "anyOf together with type", WNA16_ERR_UNSUPPORTED},
        {"{\"a\": 1, \"a\": 2}", "not valid JSON", WNA16_ERR_INVALID_ARGUMENT},
        {"{\"type\": ", "not valid JSON: line 1", WNA16_ERR_INVALID_ARGUMENT},
        {"false", "schema false admits no value", WNA16_ERR_INVALID_ARGUMENT},
        {"{\"properties\": 3}", "'properties' must be an object", WNA16_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_COMPILE_FAILS(GRAMMAR_JSON_SCHEMA, bad[i].schema, bad[i].st, bad[i].detail);
    /* nesting past the limit */
    wna16_buf deep = {0};
    for (int i = 0; i < 100; i++) wna16_buf_printf(&deep, "{\"type\": \"array\", \"items\": ");
    wna16_buf_printf(&deep, "{}");
    for (int i = 0; i < 100; i++) wna16_buf_put(&deep, "}", 1);
    wna16_buf_put(&deep, "", 0);
    CHECK_COMPILE_FAILS(GRAMMAR_JSON_SCHEMA, deep.data, WNA16_ERR_LIMIT, "nested more than 64 deep");
    wna16_buf_free(&deep);
}

/* Generated output parses and validates, on the mixed vocabulary with the
 * mask checked against the reference all along. */
static void test_schema_walks(void) {
    const char *schemas[] = {
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12}, "
        "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120}, \"tags\": {\"type\": "
        "\"array\", \"items\": {\"enum\": [\"a\", \"b\", \"c\"]}, \"maxItems\": 4}, \"ok\": "
        "{\"type\": \"boolean\"}}, \"required\": [\"name\", \"age\"]}",
        "{\"type\": \"object\", \"properties\": {\"user\": {\"type\": \"object\", \"properties\": "
        "{\"id\": {\"type\": \"string\", \"format\": \"uuid\"}, \"email\": {\"type\": \"string\", "
        "\"format\": \"email\"}}, \"required\": [\"id\"]}, \"when\": {\"type\": \"string\", "
        "\"format\": \"date\"}, \"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{3}-\\\\d{2}$\"}}, "
        "\"required\": [\"user\", \"when\", \"code\"]}",
        "{\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"number\"}, "
        "\"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/t\"}, {\"type\": \"null\"}]}}, \"required\": "
        "[\"v\", \"next\"]}}, \"$ref\": \"#/$defs/t\"}",
        "{\"type\": \"array\", \"prefixItems\": [{\"const\": \"head\"}, {\"type\": \"integer\", "
        "\"exclusiveMinimum\": -3, \"maximum\": 3}], \"items\": {\"oneOf\": [{\"type\": \"string\", "
        "\"minLength\": 1, \"maxLength\": 2}, {\"type\": \"null\"}]}, \"minItems\": 2, \"maxItems\": 5}",
        "{\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"integer\"}}, "
        "\"additionalProperties\": {\"type\": [\"string\", \"boolean\"]}}",
        "{\"type\": \"object\", \"properties\": {\"any\": {}, \"list\": {\"type\": \"array\"}}, "
        "\"required\": [\"any\"]}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++)
        check_schema_walks(schemas[i], mixed_vocab, 8, 1);
}

/* The acceptance case: 100 replies of several schemas at the real
 * vocabulary all parse and validate. */
static void test_schema_walks_qwen(void) {
    if (!qwen_vocab) return;
    const char *schemas[] = {
        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 20}, "
        "\"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\", "
        "\"minimum\": 1, \"maximum\": 14}}, \"required\": [\"city\", \"unit\"], "
        "\"additionalProperties\": false}",
        "{\"type\": \"object\", \"properties\": {\"items\": {\"type\": \"array\", \"items\": {\"type\": "
        "\"object\", \"properties\": {\"sku\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{2}[0-9]{4}$\"}, "
        "\"qty\": {\"type\": \"integer\", \"minimum\": 1}}, \"required\": [\"sku\", \"qty\"]}, "
        "\"minItems\": 1, \"maxItems\": 3}, \"express\": {\"type\": \"boolean\"}}, \"required\": [\"items\"]}",
        "{\"type\": \"object\", \"properties\": {\"answer\": {\"anyOf\": [{\"type\": \"number\"}, "
        "{\"type\": \"null\"}]}, \"confidence\": {\"enum\": [\"low\", \"medium\", \"high\"]}, "
        "\"notes\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 8}, "
        "\"maxItems\": 2}}, \"required\": [\"answer\", \"confidence\", \"notes\"]}",
        "{\"type\": \"object\", \"properties\": {\"user\": {\"type\": \"object\", \"properties\": "
        "{\"id\": {\"type\": \"string\", \"format\": \"uuid\"}, \"born\": {\"type\": \"string\", "
        "\"format\": \"date\"}}, \"required\": [\"id\", \"born\"]}}, \"required\": [\"user\"]}",
    };
    valid_replies = 0;
    for (size_t i = 0; i < 4; i++) check_schema_walks(schemas[i], qwen_vocab, 25, i == 0 ? 25 : 0);
    printf("qwen3 vocabulary: %d of 100 schema replies parse and validate\n", valid_replies);
    CHECK(valid_replies == 100);
}

/* ---------------------------------------------------------- token masks */

/* Masks at the real vocabulary equal the brute-force check on states
 * sampled along walks of a recursive GBNF, any-JSON and a regex. */
static void test_masks_qwen(void) {
    if (!qwen_vocab) return;
    const char *specs[][2] = {
        {"g", "root ::= stmt (\"\\n\" stmt)*\nstmt ::= [a-z]+ \" = \" expr \";\"\n"
              "expr ::= term ([-+] term)*\nterm ::= [0-9]+ | [a-z]+ | \"(\" expr \")\"\n"},
        {"j", NULL},
        {"r", "(\\d{1,3}\\.){3}\\d{1,3}( [a-zé ]{1,20})?"},
        {"g", "root ::= \"<tool_call>\" [^<]* \"</tool_call>\"\n"},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        grammar_kind k = specs[i][0][0] == 'g' ? GRAMMAR_GBNF
                         : specs[i][0][0] == 'j' ? GRAMMAR_JSON_OBJECT
                                                 : GRAMMAR_REGEX;
        grammar *g = compile_spec(k, specs[i][1], false);
        CHECK(g != NULL);
        if (!g) continue;
        for (uint32_t seed = 1; seed <= 2; seed++) {
            int mism = 0;
            bool ended;
            char *t = random_walk(g, qwen_vocab, seed, 40, 7, &mism, &ended, NULL);
            CHECK_MSG(t && mism == 0, "spec %zu seed %u: %d mismatches after '%s'", i, seed, mism, t ? t : "");
            free(t);
        }
        grammar_free(g);
    }
}

/* Many states of small grammars on the mixed vocabulary (partial UTF-8
 * tokens, tokens that cross rule ends), every step against the reference. */
static void test_masks_mixed(void) {
    const char *gram[] = {
        "root ::= (\"ab\" | \"a\" x)+\nx ::= \"b\" x | \"c\"\n",
        "root ::= q (\", \" q)*\nq ::= \"\\\"\" [^\"]* \"\\\"\" | \"[\" root \"]\"\n",
        "root ::= [é日本a-c]{1,6} (\"\\n\" root)?\n",
        "root ::= a a\na ::= \"x\" | \"xy\" | \"\"\n",
        /* a token that ends q, then reads on through a call, then leaves q's
         * rule for the context: only the context can accept "a(!" */
        "root ::= q \"(!\"\nq ::= \"a\" | \"a(\" s \")\" | \"{\" q \"}\"\ns ::= \"x\" | \"[\" s \"]\"\n",
    };
    for (size_t i = 0; i < sizeof gram / sizeof gram[0]; i++) {
        grammar *g = gbnf(gram[i]);
        CHECK(g != NULL);
        if (!g) continue;
        for (uint32_t seed = 1; seed <= 6; seed++) {
            int mism = 0;
            bool ended;
            size_t n;
            char *t = random_walk(g, mixed_vocab, seed, 60, 1, &mism, &ended, &n);
            CHECK_MSG(t && mism == 0, "grammar %zu seed %u: %d mismatches after '%s'", i, seed, mism, t ? t : "");
            if (t && ended) CHECK_MSG(refused_at(g, t, n) == -1, "walk output refused: %s", t);
            free(t);
        }
        grammar_free(g);
    }
}

/* ------------------------------------------------------------ tool calls */

static void test_tool_calls(void) {
    grammar_tool tools[] = {
        {"get_weather", "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
                        "\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}"},
        {"ping", NULL},
    };
    grammar *g;
    CHECK(grammar_compile_tool_calls(&D, GRAMMAR_TOOLS_HERMES, tools, 2, true, true, NULL, &g) == WNA16_OK);
    ACCEPTS(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>");
    ACCEPTS(g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
               "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}\n</tool_call>");
    REFUSES_AT(g, "<tool_call>\n{\"name\": \"get_time\"", 26);
    REFUSES_AT(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}", 51);
    REFUSES_AT(g, "Sure!", 0);
    grammar_free(g);
    CHECK(grammar_compile_tool_calls(&D, GRAMMAR_TOOLS_HERMES, tools, 2, false, true, NULL, &g) == WNA16_OK);
    REFUSES_AT(g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n", 58);
    grammar_free(g);
    CHECK(grammar_compile_tool_calls(&D, GRAMMAR_TOOLS_LLAMA3_JSON, tools, 2, false, true, NULL, &g) == WNA16_OK);
    ACCEPTS(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
    REFUSES_AT(g, "{\"name\": \"get_weather\", \"arguments\"", 25);
    grammar_free(g);
    CHECK(grammar_compile_tool_calls(&D, GRAMMAR_TOOLS_MISTRAL, tools, 2, true, true, NULL, &g) == WNA16_OK);
    ACCEPTS(g, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"get_weather\", "
               "\"arguments\": {\"city\": \"Rome\"}}]");
    REFUSES_AT(g, "[TOOL_CALLS][]", 13);
    grammar_free(g);
    grammar_tool bad[] = {{"f", "{\"type\": \"object\", \"not\": {}}"}};
    CHECK(grammar_compile_tool_calls(&D, GRAMMAR_TOOLS_HERMES, bad, 1, false, true, NULL, &g) == WNA16_ERR_UNSUPPORTED &&
          strstr(D.detail, "tool 'f' parameters") && strstr(D.detail, "'not'"));
    CHECK(grammar_compile_tool_calls(&D, GRAMMAR_TOOLS_HERMES, tools, 0, false, true, NULL, &g) == WNA16_ERR_INVALID_ARGUMENT);

    /* the builder: literal text, a schema value and a regex composed */
    grammar_builder *b;
    CHECK(grammar_builder_create(&D, NULL, &b) == WNA16_OK);
    const char *val = "{\"type\": \"integer\", \"maximum\": 9}";
    grammar_builder_add_json_schema(&D, b, "val", val, strlen(val), true, GRAMMAR_WS_COMPACT);
    grammar_builder_add_regex(&D, b, "id", "[a-z]{2}", 8);
    CHECK(grammar_builder_add_rule(&D, b, "root", "\"<\" id \"=\" val \">\" (\",\" root)?") == WNA16_OK);
    CHECK(grammar_builder_compile(&D, b, "root", &g) == WNA16_OK);
    ACCEPTS(g, "<ab=7>,<cd=-3>");
    REFUSES_AT(g, "<ab=10>", 5);
    grammar_free(g);
    CHECK(grammar_builder_add_rule(&D, b, "bad name", "\"x\"") == WNA16_ERR_INVALID_ARGUMENT);
    CHECK(grammar_builder_compile(&D, b, "root", &g) == WNA16_ERR_INVALID_ARGUMENT && strstr(D.detail, "bad rule name"));
    grammar_builder_free(b);
}

/* ----------------------------------------------------- vocabulary, API */

static void test_vocab(void) {
    if (qwen_tok) {
        size_t len;
        int32_t id = wna16_tokenizer_token_id(qwen_tok, "Ġhello");
        const char *b = grammar_vocab_token(qwen_vocab, id, &len);
        CHECK(b && len == 6 && !memcmp(b, " hello", 6)); /* the GPT-2 byte alphabet undone */
        CHECK(!grammar_vocab_token(qwen_vocab, 151657, &len)); /* <tool_call>: added, left out */
        CHECK(!grammar_vocab_token(qwen_vocab, 151644, &len)); /* <|im_start|>: special */
        CHECK(!grammar_vocab_token(qwen_vocab, 151900, &len)); /* past the tokenizer's ids */
        CHECK(grammar_vocab_is_stop(qwen_vocab, 151645));
        grammar_vocab *v;
        int32_t stop = 151645;
        CHECK(grammar_vocab_create(&D, qwen_tok, 151936, &stop, 1, GRAMMAR_VOCAB_ADDED_AS_TEXT, &v) == WNA16_OK);
        b = grammar_vocab_token(v, 151657, &len);
        CHECK(b && len == 11 && !memcmp(b, "<tool_call>", 11));
        CHECK(!grammar_vocab_token(v, 151644, &len));
        grammar_vocab_free(v);
    }
    wna16_tokenizer *tok;
    if (!wna16_tokenizer_load(ctx, "tests/data/tokenizer/llama2", &tok)) { /* byte fallback */
        grammar_vocab *v;
        CHECK(grammar_vocab_create(&D, tok, 0, NULL, 0, 0, &v) == WNA16_OK);
        size_t len;
        const char *b = grammar_vocab_token(v, wna16_tokenizer_token_id(tok, "<0x41>"), &len);
        CHECK(b && len == 1 && b[0] == 'A');
        b = grammar_vocab_token(v, wna16_tokenizer_token_id(tok, "▁the"), &len);
        CHECK(b && len == 4 && !memcmp(b, " the", 4));
        grammar_vocab_free(v);
        wna16_tokenizer_free(tok);
    } else {
        CHECK_MSG(false, "llama2 tokenizer: %s", wna16_ctx_error(ctx));
    }
    int32_t bad_stop = 999;
    grammar_vocab *v;
    const char *t[] = {"a"};
    size_t l[] = {1};
    CHECK(grammar_vocab_from_bytes(&D, t, l, 1, 4, &bad_stop, 1, &v) == WNA16_ERR_INVALID_ARGUMENT &&
          strstr(D.detail, "stop token id 999"));
}

static void test_matcher_api(void) {
    grammar *g = gbnf("root ::= \"ab\" \"c\"?\n");
    grammar_matcher *m, *c;
    CHECK(grammar_matcher_create(&D, g, bytes_vocab, &m) == WNA16_OK);
    uint64_t mask[5];
    CHECK(grammar_matcher_fill_mask(&D, m, mask) == WNA16_OK);
    CHECK(mask[1] == 1ull << ('a' - 64) && mask[0] == 0 && mask[4] == 0);
    CHECK(grammar_matcher_accept(&D, m, 256) == WNA16_ERR_INVALID_ARGUMENT && strstr(D.detail, "before the output is complete"));
    CHECK(grammar_matcher_accept(&D, m, 'b') == WNA16_ERR_INVALID_ARGUMENT && strstr(D.detail, "not allowed"));
    CHECK(grammar_matcher_accept(&D, m, 300) == WNA16_ERR_INVALID_ARGUMENT && strstr(D.detail, "outside"));
    CHECK(grammar_matcher_accept(&D, m, 'a') == WNA16_OK && grammar_matcher_accept(&D, m, 'b') == WNA16_OK);
    CHECK(grammar_matcher_can_end(m) && !grammar_matcher_is_finished(m));
    CHECK(grammar_matcher_fill_mask(&D, m, mask) == WNA16_OK);
    CHECK(mask[1] == 1ull << ('c' - 64) && mask[4] == 1); /* c, or stop (256) */
    CHECK(grammar_matcher_clone(&D, m, &c) == WNA16_OK);
    CHECK(grammar_matcher_accept(&D, c, 'c') == WNA16_OK && grammar_matcher_is_finished(c));
    CHECK(grammar_matcher_accept(&D, m, 256) == WNA16_OK && grammar_matcher_is_finished(m));
    CHECK(grammar_matcher_fill_mask(&D, m, mask) == WNA16_OK && mask[4] == 1 && mask[1] == 0);
    CHECK(grammar_matcher_accept(&D, m, 'c') == WNA16_ERR_INVALID_ARGUMENT && strstr(D.detail, "after the grammar's end"));
    grammar_matcher_reset(m);
    CHECK(grammar_matcher_accept_bytes(&D, m, "abc", 3) == WNA16_OK);
    CHECK(grammar_matcher_accept_bytes(&D, m, "x", 1) == WNA16_ERR_INVALID_ARGUMENT);
    CHECK(grammar_matcher_can_end(m)); /* unchanged by the refused text */
    grammar_matcher_free(c);
    grammar_matcher_free(m);
    grammar_free(g);
}

/* A long nested text (300k bytes, depth up to 500): the interned stacks
 * stay exact, every closer must match its opener. */
static void test_long_nesting(void) {
    grammar *g = gbnf("root ::= r\nr ::= (\"(\" r \")\" | \"[\" r \"]\" | \"x\")*\n");
    grammar_matcher *m;
    CHECK(g && grammar_matcher_create(&D, g, bytes_vocab, &m) == WNA16_OK);
    if (!g) return;
    char stack[600];
    int depth = 0, refused = 0;
    uint32_t rng = 7;
    for (int i = 0; i < 300000 && !refused; i++) {
        uint32_t r = rng_next(&rng) % 8;
        char c;
        if (depth < 500 && r < 3) {
            c = r ? '(' : '[';
            stack[depth++] = c;
        } else if (depth > 0 && r < 6) {
            c = stack[--depth] == '(' ? ')' : ']';
        } else {
            c = 'x';
        }
        refused += grammar_matcher_accept_bytes(&D, m, &c, 1) != WNA16_OK;
    }
    CHECK(!refused);
    while (depth > 0 && !refused) {
        char want = stack[depth - 1] == '(' ? ')' : ']', wrong = want == ')' ? ']' : ')';
        refused += grammar_matcher_accept_bytes(&D, m, &wrong, 1) == WNA16_OK; /* must be refused */
        refused += grammar_matcher_accept_bytes(&D, m, &want, 1) != WNA16_OK;
        depth--;
    }
    CHECK(!refused && grammar_matcher_can_end(m));
    grammar_matcher_free(m);
    grammar_free(g);
}

/* --------------------------------------------------------------- limits */

static void test_limits(void) {
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= (\"ab\"{1000}){1000}\n", WNA16_ERR_LIMIT, "NFA states");
    CHECK_COMPILE_FAILS(GRAMMAR_REGEX, "(a|b)*a(a|b){20}", WNA16_ERR_LIMIT, "DFA states");
    CHECK_COMPILE_FAILS(GRAMMAR_GBNF, "root ::= \"a\"{1000000}\n", WNA16_ERR_LIMIT, "repetition count too large");
    grammar_limits lim = {.max_text = 16};
    grammar_spec s = {.kind = GRAMMAR_GBNF, .text = "root ::= \"0123456789\"\n", .len = 22, .limits = &lim};
    grammar *g;
    CHECK(grammar_compile(&D, &s, &g) == WNA16_ERR_LIMIT && strstr(D.detail, "over the limit of 16"));
    /* an ambiguous grammar: the parses multiply until the bound */
    lim = (grammar_limits){.max_stacks = 16};
    s = (grammar_spec){.kind = GRAMMAR_GBNF, .text = "root ::= x\nx ::= \"a\" x | \"a\" x x | \"\"\n", .limits = &lim};
    s.len = strlen(s.text);
    CHECK(grammar_compile(&D, &s, &g) == WNA16_OK);
    grammar_matcher *m;
    CHECK(grammar_matcher_create(&D, g, bytes_vocab, &m) == WNA16_OK);
    wna16_status st = WNA16_OK;
    for (int i = 0; i < 100 && !st; i++) st = grammar_matcher_accept_bytes(&D, m, "a", 1);
    CHECK_MSG(st == WNA16_ERR_LIMIT && strstr(D.detail, "too ambiguous"), "%s: %s", wna16_status_str(st), D.detail);
    grammar_matcher_free(m);
    grammar_free(g);
    /* a step cut short by the bound leaves nothing behind: the next byte is judged afresh */
    lim = (grammar_limits){.max_stacks = 64};
    s = (grammar_spec){.kind = GRAMMAR_GBNF, .text = "root ::= x\nx ::= \"a\" x \"a\" x \"b\" x | \"\"\n", .limits = &lim};
    s.len = strlen(s.text);
    CHECK(grammar_compile(&D, &s, &g) == WNA16_OK);
    CHECK(grammar_matcher_create(&D, g, bytes_vocab, &m) == WNA16_OK);
    st = WNA16_OK;
    for (int i = 0; i < 100 && !st; i++) st = grammar_matcher_accept_bytes(&D, m, "a", 1);
    CHECK_MSG(st == WNA16_ERR_LIMIT, "%s: %s", wna16_status_str(st), D.detail);
    st = grammar_matcher_accept_bytes(&D, m, "q", 1);
    CHECK_MSG(st == WNA16_ERR_INVALID_ARGUMENT, "%s: %s", wna16_status_str(st), D.detail);
    grammar_matcher_free(m);
    grammar_free(g);
    /* the stack depth: deeper nesting is not offered */
    lim = (grammar_limits){.max_stack_depth = 8};
    s = (grammar_spec){.kind = GRAMMAR_GBNF, .text = "root ::= \"(\" root \")\" | \"x\"\n", .limits = &lim};
    s.len = strlen(s.text);
    CHECK(grammar_compile(&D, &s, &g) == WNA16_OK);
    CHECK(grammar_matcher_create(&D, g, bytes_vocab, &m) == WNA16_OK);
    int taken = 0;
    while (taken < 20 && !grammar_matcher_accept_bytes(&D, m, "(", 1)) taken++;
    CHECK_MSG(taken == 8, "%d", taken);
    uint64_t mask[5];
    CHECK(grammar_matcher_fill_mask(&D, m, mask) == WNA16_OK && mask[1] >> ('x' - 64) & 1);
    grammar_matcher_free(m);
    grammar_free(g);
}

/* ----------------------------------------------------------------- main */

static grammar_vocab *make_mixed(void) {
    static const char *pieces[] = {
        "\", \"", "\": \"", "\"}", "\"]", "{\"", "true", "false", "null", " \"", "\n  ", "ab", "abc",
        "é", "日本", "\xe6\x97", "\x97\xa5", "12", "3.5", "-1", "e+", "name", "\"name\"", "\": 1}",
        "}]", "]}", "\\u00", "\\n", "x\"", "a\"b", "\",\"", "[\"", "xy", "c\n", "((", "))", ")\n(",
        "T12:", "-0", "@ex", ".com", "ZZ-", "[1,", "e9", "\\\"", " = ", "; ", "\n\n", "aé", "a(!", NULL};
    const char *toks[400];
    size_t lens[400];
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        toks[i] = &bytes[i];
        lens[i] = 1;
    }
    size_t n = 256;
    for (size_t i = 0; pieces[i]; i++, n++) {
        toks[n] = pieces[i];
        lens[n] = strlen(pieces[i]);
    }
    int32_t stop = (int32_t)n;
    grammar_vocab *v = NULL;
    CHECK(grammar_vocab_from_bytes(&D, toks, lens, n, n + 1, &stop, 1, &v) == WNA16_OK);
    return v;
}

int main(void) {
    wna16_ctx_create(&ctx);
    const char *toks[256];
    size_t lens[256];
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        toks[i] = &bytes[i];
        lens[i] = 1;
    }
    int32_t stop = 256;
    CHECK(grammar_vocab_from_bytes(&D, toks, lens, 256, 260, &stop, 1, &bytes_vocab) == WNA16_OK);
    mixed_vocab = make_mixed();
    int32_t stops[2] = {151643, 151645};
    if (wna16_tokenizer_load(ctx, "tests/data/tokenizer/qwen3", &qwen_tok) ||
        grammar_vocab_create(&D, qwen_tok, 151936, stops, 2, 0, &qwen_vocab))
        CHECK_MSG(false, "qwen3 vocabulary: %s %s", wna16_ctx_error(ctx), D.detail);

    test_gbnf();
    test_regex_choice();
    test_json_object();
    test_schema_keywords();
    test_schema_errors();
    test_schema_walks();
    test_masks_mixed();
    test_tool_calls();
    test_vocab();
    test_matcher_api();
    test_long_nesting();
    test_limits();
    test_masks_qwen();
    test_schema_walks_qwen();

    grammar_vocab_free(bytes_vocab);
    grammar_vocab_free(mixed_vocab);
    grammar_vocab_free(qwen_vocab);
    wna16_tokenizer_free(qwen_tok);
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
