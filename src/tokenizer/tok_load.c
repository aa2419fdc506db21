/* Loading a Hugging Face tokenizer.json (byte-level BPE) and validating
 * every field we rely on. Each error names the file, the JSON field, what
 * was expected, what was found, and what to do. */
#include "core/json_get.h"
#include "tokenizer/tok_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIX_HINT "re-export it with Hugging Face tokenizers (tokenizer.save)"

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

static wna16_status bad_field(wna16_diag *d, const wna16_tokenizer *t, const char *field,
                              const char *expected, const json_t *found) {
    return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID, "%s: field %s: expected %s, found %s; %s",
                      t->path, field, expected, found ? json_kind(found) : "nothing", FIX_HINT);
}

/* Optional boolean: absent or null gives def. */
static wna16_status get_bool(wna16_diag *d, const wna16_tokenizer *t, const json_t *obj,
                             const char *key, const char *where, bool def, bool *out) {
    *out = def;
    if (wna16_json_bool(obj, key, out) != WNA16_JSON_WRONG_TYPE) return WNA16_OK;
    char field[160];
    snprintf(field, sizeof field, "%s.%s", where, key);
    return bad_field(d, t, field, "true or false", json_object_get(obj, key));
}

static wna16_status get_id(wna16_diag *d, const wna16_tokenizer *t, const json_t *v,
                           const char *field, int32_t *out) {
    if (!json_is_integer(v)) return bad_field(d, t, field, "an integer token id", v);
    json_int_t id = json_integer_value(v);
    if (id < 0 || id >= TOK_MAX_ID)
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: field %s: token id %lld is out of range; expected 0 <= id < %d; "
                          "%s",
                          t->path, field, (long long)id, TOK_MAX_ID, FIX_HINT);
    *out = (int32_t)id;
    return WNA16_OK;
}

/* ------------------------------------------------------------ normalizer */

static wna16_status out_of_memory(wna16_diag *d) {
    return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
}

static wna16_status add_norm(wna16_diag *d, wna16_tokenizer *t, const char *where, tok_norm **out) {
    if (t->n_norms == (int)(sizeof t->norms / sizeof t->norms[0]))
        return wna16_fail(d, WNA16_ERR_LIMIT, "%s: %s: more than %d normalizers", t->path, where,
                          (int)(sizeof t->norms / sizeof t->norms[0]));
    *out = &t->norms[t->n_norms++];
    memset(*out, 0, sizeof **out);
    return WNA16_OK;
}

/* A string field that must be present (may be empty when allow_empty). */
static wna16_status get_str(wna16_diag *d, const wna16_tokenizer *t, const json_t *obj,
                            const char *key, const char *where, bool allow_empty, char **out,
                            size_t *len) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v) || (!allow_empty && !json_string_length(v))) {
        char field[160];
        snprintf(field, sizeof field, "%s.%s", where, key);
        return bad_field(d, t, field, allow_empty ? "a string" : "a non-empty string", v);
    }
    /* JSON strings may hold NUL; token text is C strings here */
    if (strlen(json_string_value(v)) != json_string_length(v)) {
        char field[160];
        snprintf(field, sizeof field, "%s.%s", where, key);
        return bad_field(d, t, field, "a string without NUL characters", v);
    }
    *len = json_string_length(v);
    if (!(*out = wna16_strdup(json_string_value(v)))) return out_of_memory(d);
    return WNA16_OK;
}

/* {"String": "..."} or {"Regex": "..."}; literal tells which. */
static wna16_status get_pattern(wna16_diag *d, const wna16_tokenizer *t, const json_t *obj,
                                const char *where, const char **pat, bool *literal) {
    const json_t *p = json_object_get(obj, "pattern");
    const char *regex = json_string_value(json_object_get(p, "Regex"));
    const char *lit = json_string_value(json_object_get(p, "String"));
    if ((!regex && !lit) || (lit && !*lit) || (regex && !*regex)) {
        char field[160];
        snprintf(field, sizeof field, "%s.pattern", where);
        return bad_field(d, t, field, "{\"String\": \"...\"} or {\"Regex\": \"...\"}, not empty",
                         p);
    }
    *pat = regex ? regex : lit;
    *literal = !regex;
    return WNA16_OK;
}

static wna16_status parse_normalizer(wna16_diag *d, wna16_tokenizer *t, const json_t *n,
                                     const char *where) {
    if (!n || json_is_null(n)) return WNA16_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!json_is_object(n) || !type) return bad_field(d, t, where, "an object with a \"type\"", n);
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return bad_field(d, t, where, "\"normalizers\": [...]", list);
        for (size_t i = 0; i < json_array_size(list); i++)
            WNA16_TRY(parse_normalizer(d, t, json_array_get(list, i), where));
        return WNA16_OK;
    }
    tok_norm *x = NULL;
    if (!strcmp(type, "Prepend")) {
        WNA16_TRY(add_norm(d, t, where, &x));
        x->kind = NORM_PREPEND;
        return get_str(d, t, n, "prepend", "normalizer Prepend", true, &x->str, &x->len);
    }
    if (!strcmp(type, "Replace")) {
        const char *pat;
        bool literal;
        WNA16_TRY(add_norm(d, t, where, &x));
        x->kind = NORM_REPLACE;
        WNA16_TRY(get_pattern(d, t, n, "normalizer Replace", &pat, &literal));
        WNA16_TRY(get_str(d, t, n, "content", "normalizer Replace", true, &x->str, &x->len));
        return tok_regex_compile(d, t->path, "normalizer Replace.pattern", pat, literal, &x->re,
                                 &x->md);
    }
    static const struct {
        const char *name;
        tok_norm_kind kind;
    } forms[] = {{"NFC", NORM_NFC}, {"NFD", NORM_NFD}, {"NFKC", NORM_NFKC}, {"NFKD", NORM_NFKD}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (strcmp(type, forms[i].name)) continue;
        WNA16_TRY(add_norm(d, t, where, &x));
        x->kind = forms[i].kind;
        return WNA16_OK;
    }
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                      "%s: %s: normalizer type \"%s\" is not supported; supported: NFC, NFD, "
                      "NFKC, NFKD, Prepend, Replace, Sequence of these, or null",
                      t->path, where, type);
}

/* --------------------------------------------------------- pre-tokenizer */

static wna16_status parse_behavior(wna16_diag *d, wna16_tokenizer *t, const json_t *v,
                                   tok_split_behavior *out) {
    static const struct {
        const char *name;
        tok_split_behavior b;
    } names[] = {{"Removed", SPLIT_REMOVED},
                 {"Isolated", SPLIT_ISOLATED},
                 {"MergedWithPrevious", SPLIT_MERGED_PREV},
                 {"MergedWithNext", SPLIT_MERGED_NEXT},
                 {"Contiguous", SPLIT_CONTIGUOUS}};
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].b;
            return WNA16_OK;
        }
    return bad_field(d, t, "pre_tokenizer Split.behavior",
                     "one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", v);
}

static wna16_status add_pre(wna16_diag *d, wna16_tokenizer *t, tok_pre **out) {
    if (t->n_pres == (int)(sizeof t->pres / sizeof t->pres[0]))
        return wna16_fail(d, WNA16_ERR_LIMIT, "%s: pre_tokenizer: more than %d steps", t->path,
                          (int)(sizeof t->pres / sizeof t->pres[0]));
    *out = &t->pres[t->n_pres++];
    memset(*out, 0, sizeof **out);
    return WNA16_OK;
}

static wna16_status parse_split(wna16_diag *d, wna16_tokenizer *t, const json_t *p) {
    const json_t *pat = json_object_get(p, "pattern");
    const char *regex = json_string_value(json_object_get(pat, "Regex"));
    const char *literal = json_string_value(json_object_get(pat, "String"));
    if (!regex && !literal)
        return bad_field(d, t, "pre_tokenizer Split.pattern",
                         "{\"Regex\": \"...\"} or {\"String\": \"...\"}", pat);
    tok_pre *pre = NULL;
    WNA16_TRY(add_pre(d, t, &pre));
    pre->kind = PRE_SPLIT;
    WNA16_TRY(parse_behavior(d, t, json_object_get(p, "behavior"), &pre->behavior));
    WNA16_TRY(get_bool(d, t, p, "invert", "pre_tokenizer Split", false, &pre->invert));
    return tok_regex_compile(d, t->path, "pre_tokenizer Split.pattern", regex ? regex : literal,
                             !regex, &pre->re, &pre->md);
}

static wna16_status parse_bytelevel(wna16_diag *d, wna16_tokenizer *t, const json_t *p) {
    tok_pre *pre = NULL;
    bool use_regex;
    WNA16_TRY(add_pre(d, t, &pre));
    pre->kind = PRE_BYTELEVEL;
    pre->behavior = SPLIT_ISOLATED;
    WNA16_TRY(get_bool(d, t, p, "add_prefix_space", "pre_tokenizer ByteLevel", true,
                       &pre->add_prefix_space));
    WNA16_TRY(get_bool(d, t, p, "use_regex", "pre_tokenizer ByteLevel", true, &use_regex));
    t->byte_level = true;
    if (!use_regex) return WNA16_OK;
    return tok_regex_compile(d, t->path, "ByteLevel GPT-2 pattern", tok_gpt2_pattern, false,
                             &pre->re, &pre->md);
}

/* The replacement character of a Metaspace (pre-tokenizer or decoder):
 * exactly one character. */
static wna16_status get_replacement(wna16_diag *d, const wna16_tokenizer *t, const json_t *p,
                                    const char *where, char *rep, size_t *rep_len) {
    const json_t *v = json_object_get(p, "replacement");
    const char *s = json_string_value(v);
    size_t n = s ? json_string_length(v) : 0;
    size_t cl = n ? wna16_utf8_valid_len((const uint8_t *)s, n) : 0;
    if (!s || !cl || cl != n || (n == 1 && !*s)) {
        char field[96];
        snprintf(field, sizeof field, "%s.replacement", where);
        return bad_field(d, t, field, "a string of one character", v);
    }
    memcpy(rep, s, n);
    rep[n] = 0;
    *rep_len = n;
    return WNA16_OK;
}

/* prepend_scheme ("always", "first", "never"), or the older
 * add_prefix_space (true: always, false: never). */
static wna16_status get_prepend(wna16_diag *d, const wna16_tokenizer *t, const json_t *p,
                                const char *where, tok_prepend *out) {
    const json_t *v = json_object_get(p, "prepend_scheme");
    if (v && !json_is_null(v)) {
        const char *s = json_string_value(v);
        static const char *const names[] = {"always", "first", "never"};
        for (int i = 0; s && i < 3; i++)
            if (!strcmp(s, names[i])) {
                *out = (tok_prepend)i;
                return WNA16_OK;
            }
        char field[96];
        snprintf(field, sizeof field, "%s.prepend_scheme", where);
        return bad_field(d, t, field, "\"always\", \"first\" or \"never\"", v);
    }
    bool add;
    WNA16_TRY(get_bool(d, t, p, "add_prefix_space", where, true, &add));
    *out = add ? PREPEND_ALWAYS : PREPEND_NEVER;
    return WNA16_OK;
}

static wna16_status parse_metaspace(wna16_diag *d, wna16_tokenizer *t, const json_t *p) {
    tok_pre *pre = NULL;
    bool split;
    WNA16_TRY(add_pre(d, t, &pre));
    pre->kind = PRE_METASPACE;
    pre->behavior = SPLIT_MERGED_NEXT;
    WNA16_TRY(get_replacement(d, t, p, "pre_tokenizer Metaspace", pre->rep, &pre->rep_len));
    WNA16_TRY(get_prepend(d, t, p, "pre_tokenizer Metaspace", &pre->prepend));
    WNA16_TRY(get_bool(d, t, p, "split", "pre_tokenizer Metaspace", true, &split));
    if (!split) return WNA16_OK;
    return tok_regex_compile(d, t->path, "pre_tokenizer Metaspace.replacement", pre->rep, true,
                             &pre->re, &pre->md);
}

static wna16_status parse_pre(wna16_diag *d, wna16_tokenizer *t, const json_t *p) {
    if (!p || json_is_null(p)) return WNA16_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!json_is_object(p) || !type)
        return bad_field(d, t, "pre_tokenizer", "an object with a \"type\"", p);
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return bad_field(d, t, "pre_tokenizer.pretokenizers", "an array", list);
        for (size_t i = 0; i < json_array_size(list); i++)
            WNA16_TRY(parse_pre(d, t, json_array_get(list, i)));
        return WNA16_OK;
    }
    if (!strcmp(type, "Split")) return parse_split(d, t, p);
    if (!strcmp(type, "ByteLevel")) return parse_bytelevel(d, t, p);
    if (!strcmp(type, "Metaspace")) return parse_metaspace(d, t, p);
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                      "%s: pre_tokenizer type \"%s\" is not supported; supported: Split, "
                      "ByteLevel, Metaspace and Sequence of these",
                      t->path, type);
}

/* ------------------------------------------------------- decoder, post */

/* Where a decoder sequence stands while it is parsed: the order of the
 * steps matters, and only the orders real files use are supported. */
typedef struct dec_state {
    bool seq_step; /* ByteFallback, Fuse, Strip or ByteLevel seen */
    bool fused;    /* the tokens are one text now (Fuse or ByteLevel) */
    bool stripped;
} dec_state;

static wna16_status dec_order(wna16_diag *d, const wna16_tokenizer *t, const char *type,
                              const char *why) {
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                      "%s: decoder %s %s; supported orders: per-token steps (Replace, "
                      "Metaspace) first, then ByteFallback, Fuse, then Strip (start only), or "
                      "ByteLevel",
                      t->path, type, why);
}

static wna16_status add_dec_step(wna16_diag *d, wna16_tokenizer *t, const char *type,
                                 const dec_state *st, tok_dec_step **out) {
    if (st->seq_step)
        return dec_order(d, t, type, "comes after ByteFallback, Fuse, Strip or ByteLevel");
    if (t->n_dec_steps == (int)(sizeof t->dec_steps / sizeof t->dec_steps[0]))
        return wna16_fail(d, WNA16_ERR_LIMIT, "%s: decoder: more than %d Replace/Metaspace steps",
                          t->path, (int)(sizeof t->dec_steps / sizeof t->dec_steps[0]));
    *out = &t->dec_steps[t->n_dec_steps++];
    memset(*out, 0, sizeof **out);
    return WNA16_OK;
}

static wna16_status parse_decoder(wna16_diag *d, wna16_tokenizer *t, const json_t *p,
                                  dec_state *st) {
    if (!p || json_is_null(p)) return WNA16_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!json_is_object(p) || !type)
        return bad_field(d, t, "decoder", "an object with a \"type\"", p);
    tok_dec_step *x = NULL;
    if (!strcmp(type, "ByteLevel")) {
        if (st->stripped) return dec_order(d, t, type, "comes after Strip");
        t->decoder_byte_level = true;
        st->seq_step = st->fused = true;
        return WNA16_OK;
    }
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "decoders");
        if (!json_is_array(list)) return bad_field(d, t, "decoder.decoders", "an array", list);
        for (size_t i = 0; i < json_array_size(list); i++)
            WNA16_TRY(parse_decoder(d, t, json_array_get(list, i), st));
        return WNA16_OK;
    }
    if (!strcmp(type, "ByteFallback")) {
        /* after ByteLevel the tokens are one text already: nothing to do */
        if (!t->decoder_byte_level) t->dec_byte_fallback = true;
        st->seq_step = true;
        return WNA16_OK;
    }
    if (!strcmp(type, "Fuse")) {
        st->seq_step = st->fused = true;
        return WNA16_OK;
    }
    if (!strcmp(type, "Strip")) {
        const json_t *c = json_object_get(p, "content"), *a = json_object_get(p, "start"),
                     *b = json_object_get(p, "stop");
        const char *cs = json_string_value(c);
        size_t cl = cs ? json_string_length(c) : 0;
        if (!cs || !cl || wna16_utf8_valid_len((const uint8_t *)cs, cl) != cl)
            return bad_field(d, t, "decoder Strip.content", "a string of one character", c);
        if (!json_is_integer(a) || json_integer_value(a) < 0 || json_integer_value(a) > 1024)
            return bad_field(d, t, "decoder Strip.start", "an integer 0..1024", a);
        if (!json_is_integer(b) || json_integer_value(b) < 0)
            return bad_field(d, t, "decoder Strip.stop", "an integer >= 0", b);
        if (json_integer_value(b) != 0)
            return dec_order(d, t, type, "has stop > 0 (stripping the end is not supported)");
        if (!st->fused) return dec_order(d, t, type, "comes before Fuse");
        if (st->stripped) return dec_order(d, t, type, "appears twice");
        wna16_utf8_decode((const uint8_t *)cs, &t->dec_strip_cp);
        t->dec_strip_start = (int)json_integer_value(a);
        st->seq_step = st->stripped = true;
        return WNA16_OK;
    }
    if (!strcmp(type, "Replace")) {
        const char *pat;
        bool literal;
        WNA16_TRY(get_pattern(d, t, p, "decoder Replace", &pat, &literal));
        if (!literal)
            return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                              "%s: decoder Replace with a Regex pattern is not supported; only "
                              "{\"String\": ...}",
                              t->path);
        WNA16_TRY(add_dec_step(d, t, type, st, &x));
        if (!(x->from = wna16_strdup(pat))) return out_of_memory(d);
        x->from_len = strlen(pat);
        return get_str(d, t, p, "content", "decoder Replace", true, &x->to, &x->to_len);
    }
    if (!strcmp(type, "Metaspace")) {
        char rep[8];
        size_t rep_len;
        tok_prepend scheme;
        WNA16_TRY(get_replacement(d, t, p, "decoder Metaspace", rep, &rep_len));
        WNA16_TRY(get_prepend(d, t, p, "decoder Metaspace", &scheme));
        WNA16_TRY(add_dec_step(d, t, type, st, &x));
        x->metaspace = true;
        x->strip_first = scheme != PREPEND_NEVER;
        t->dec_first_differs |= x->strip_first;
        if (!(x->from = wna16_strdup(rep)) || !(x->to = wna16_strdup(" "))) return out_of_memory(d);
        x->from_len = rep_len;
        x->to_len = 1;
        return WNA16_OK;
    }
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                      "%s: decoder type \"%s\" is not supported; supported: ByteLevel, "
                      "ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence of these, or null",
                      t->path, type);
}

static wna16_status push_id(wna16_diag *d, int32_t **v, size_t *n, int32_t id) {
    int32_t *q = wna16_realloc(*v, (*n + 1) * sizeof **v);
    if (!q) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    q[(*n)++] = id;
    *v = q;
    return WNA16_OK;
}

/* TemplateProcessing "single": special tokens before and after $A. */
static wna16_status parse_template(wna16_diag *d, wna16_tokenizer *t, const json_t *p) {
    const json_t *single = json_object_get(p, "single"),
                 *specials = json_object_get(p, "special_tokens");
    if (!json_is_array(single)) return bad_field(d, t, "post_processor.single", "an array", single);
    bool seen_seq = false;
    for (size_t i = 0; i < json_array_size(single); i++) {
        const json_t *item = json_array_get(single, i);
        if (json_object_get(item, "Sequence")) {
            seen_seq = true;
            continue;
        }
        const char *name =
            json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
        const json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return bad_field(d, t, "post_processor.single[]",
                             "{\"SpecialToken\": {\"id\": NAME}} with NAME in special_tokens",
                             item);
        for (size_t k = 0; k < json_array_size(ids); k++) {
            int32_t id = -1;
            WNA16_TRY(get_id(d, t, json_array_get(ids, k), "post_processor.special_tokens", &id));
            if (seen_seq)
                WNA16_TRY(push_id(d, &t->post_suffix, &t->n_post_suffix, id));
            else
                WNA16_TRY(push_id(d, &t->post_prefix, &t->n_post_prefix, id));
        }
    }
    return WNA16_OK;
}

static wna16_status parse_post(wna16_diag *d, wna16_tokenizer *t, const json_t *p) {
    if (!p || json_is_null(p)) return WNA16_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!json_is_object(p) || !type)
        return bad_field(d, t, "post_processor", "an object with a \"type\"", p);
    if (!strcmp(type, "ByteLevel")) return WNA16_OK; /* only moves offsets */
    if (!strcmp(type, "TemplateProcessing")) return parse_template(d, t, p);
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "processors");
        for (size_t i = 0; i < json_array_size(list); i++)
            WNA16_TRY(parse_post(d, t, json_array_get(list, i)));
        return WNA16_OK;
    }
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                      "%s: post_processor type \"%s\" is not supported; supported: ByteLevel, "
                      "TemplateProcessing, Sequence of these, or null",
                      t->path, type);
}

/* ----------------------------------------------------------------- model */

static wna16_status parse_vocab(wna16_diag *d, wna16_tokenizer *t, const json_t *vocab,
                                int32_t *max_id) {
    const char *key;
    json_t *v;
    if (!json_is_object(vocab))
        return bad_field(d, t, "model.vocab", "an object {token: id}", vocab);
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = -1;
        size_t len = strlen(key); /* jansson rejects NUL in keys by default */
        char field[96];
        snprintf(field, sizeof field, "model.vocab[\"%.40s\"]", key);
        WNA16_TRY(get_id(d, t, v, field, &id));
        if (!len || len > TOK_MAX_TOKEN_LEN)
            return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                              "%s: %s: token length %zu; expected 1..%d bytes; %s", t->path, field,
                              len, TOK_MAX_TOKEN_LEN, FIX_HINT);
        if (!tok_strmap_put(&t->vocab, key, len, id, NULL))
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: out of memory for the vocab",
                              t->path);
        if (id > *max_id) *max_id = id;
    }
    return WNA16_OK;
}

/* Splits one merges entry into its two tokens. */
static wna16_status merge_parts(wna16_diag *d, wna16_tokenizer *t, const json_t *m, size_t i,
                                const char **a, size_t *alen, const char **b, size_t *blen) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (sp && sp != s && sp[1] && !strchr(sp + 1, ' ')) {
            *a = s, *alen = (size_t)(sp - s), *b = sp + 1, *blen = strlen(sp + 1);
            return WNA16_OK;
        }
    } else if (json_is_array(m) && json_array_size(m) == 2 &&
               json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0)), *alen = strlen(*a);
        *b = json_string_value(json_array_get(m, 1)), *blen = strlen(*b);
        return WNA16_OK;
    }
    char field[48];
    snprintf(field, sizeof field, "model.merges[%zu]", i);
    return bad_field(d, t, field, "\"A B\" or [\"A\", \"B\"]", m);
}

static wna16_status unknown_merge_token(wna16_diag *d, const wna16_tokenizer *t, size_t i,
                                        const char *s, size_t len) {
    return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                      "%s: model.merges[%zu] names the token \"%.*s\" which is not in "
                      "model.vocab; every merge part and its concatenation must be vocabulary "
                      "entries; %s",
                      t->path, i, (int)(len > 80 ? 80 : len), s, FIX_HINT);
}

static wna16_status parse_merges(wna16_diag *d, wna16_tokenizer *t, const json_t *merges) {
    if (!json_is_array(merges)) return bad_field(d, t, "model.merges", "an array", merges);
    char *cat = NULL;
    size_t cat_cap = 0;
    wna16_status s = WNA16_OK;
    for (size_t i = 0; i < json_array_size(merges) && s == WNA16_OK; i++) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        s = merge_parts(d, t, json_array_get(merges, i), i, &a, &alen, &b, &blen);
        if (s != WNA16_OK) break;
        int32_t ia = tok_strmap_get(&t->vocab, a, alen), ib = tok_strmap_get(&t->vocab, b, blen);
        if (ia < 0 || ib < 0) {
            s = ia < 0 ? unknown_merge_token(d, t, i, a, alen)
                       : unknown_merge_token(d, t, i, b, blen);
            break;
        }
        if (alen + blen > cat_cap) {
            char *q = wna16_realloc(cat, cat_cap = (alen + blen) * 2);
            if (!q) {
                s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            cat = q;
        }
        memcpy(cat, a, alen);
        memcpy(cat + alen, b, blen);
        int32_t merged = tok_strmap_get(&t->vocab, cat, alen + blen);
        if (merged < 0)
            s = unknown_merge_token(d, t, i, cat, alen + blen);
        else if (!tok_pairmap_put(&t->merges, ia, ib, (int32_t)i, merged))
            s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: out of memory for merges", t->path);
    }
    wna16_free(cat);
    return s;
}

static wna16_status check_model_options(wna16_diag *d, wna16_tokenizer *t, const json_t *m) {
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(m, keys[i]));
        if (v && *v)
            return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                              "%s: model.%s is \"%s\"; only \"\" or null is supported "
                              "(byte-level BPE)",
                              t->path, keys[i], v);
    }
    const json_t *dropout = json_object_get(m, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: model.dropout is %g; BPE dropout makes encoding random and is "
                          "not supported; set it to null",
                          t->path, json_number_value(dropout));
    WNA16_TRY(get_bool(d, t, m, "fuse_unk", "model", false, &t->fuse_unk));
    WNA16_TRY(get_bool(d, t, m, "byte_fallback", "model", false, &t->byte_fallback));
    return get_bool(d, t, m, "ignore_merges", "model", false, &t->ignore_merges);
}

static wna16_status parse_model(wna16_diag *d, wna16_tokenizer *t, const json_t *m,
                                int32_t *max_id) {
    if (!json_is_object(m))
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: field model: expected an object with type \"BPE\", vocab and "
                          "merges, found %s; is this a Hugging Face tokenizer.json?",
                          t->path, m ? json_kind(m) : "nothing");
    const char *type = json_string_value(json_object_get(m, "type"));
    if (type && strcmp(type, "BPE")) {
        bool known =
            !strcmp(type, "WordPiece") || !strcmp(type, "WordLevel") || !strcmp(type, "Unigram");
        return wna16_fail(d, known ? WNA16_ERR_UNSUPPORTED : WNA16_ERR_TOKENIZER_INVALID,
                          "%s: model.type is \"%s\"; %s; only \"BPE\" (byte-level BPE as used by "
                          "Qwen, Llama-3, GPT-2) is supported",
                          t->path, type,
                          known ? "that model type is not supported" : "unknown model type");
    }
    WNA16_TRY(check_model_options(d, t, m));
    WNA16_TRY(parse_vocab(d, t, json_object_get(m, "vocab"), max_id));
    WNA16_TRY(parse_merges(d, t, json_object_get(m, "merges")));
    const char *unk = json_string_value(json_object_get(m, "unk_token"));
    t->unk_id = unk ? tok_strmap_get(&t->vocab, unk, strlen(unk)) : -1;
    if (unk && t->unk_id < 0)
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: model.unk_token \"%.80s\" is not in model.vocab; %s", t->path, unk,
                          FIX_HINT);
    return WNA16_OK;
}

/* ---------------------------------------------------------- added tokens */

/* HF matches normalized added tokens in a second pass, on normalized text,
 * by their normalized content; the others on the raw text. */
static wna16_status add_to_trie(wna16_diag *d, wna16_tokenizer *t, tok_added *x, int32_t index) {
    if (!x->normalized) {
        if (!tok_trie_add(&t->trie_raw, x->content, x->len, index))
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
        return WNA16_OK;
    }
    char *norm;
    size_t len;
    WNA16_TRY(tok_normalize(d, t, x->content, x->len, &norm, &len));
    bool ok = !len || tok_trie_add(&t->trie_norm, norm ? norm : x->content, len, index);
    /* HF names (and decodes) such a token by its normalized content */
    if (ok && norm && len && len <= TOK_MAX_TOKEN_LEN) {
        ok = (x->norm = wna16_malloc(len + 1)) != NULL;
        if (ok) {
            memcpy(x->norm, norm, len);
            x->norm[len] = 0;
            x->norm_len = len;
        }
    }
    free(norm);
    return ok ? WNA16_OK : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
}

static wna16_status parse_added(wna16_diag *d, wna16_tokenizer *t, const json_t *list,
                                int32_t *max_id) {
    if (!list || json_is_null(list)) return WNA16_OK;
    if (!json_is_array(list)) return bad_field(d, t, "added_tokens", "an array", list);
    t->added = wna16_calloc(json_array_size(list), sizeof *t->added);
    if (!t->added) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *a = json_array_get(list, i);
        char field[48];
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        const char *content = json_string_value(json_object_get(a, "content"));
        if (!json_is_object(a) || !content || !*content)
            return bad_field(d, t, field, "an object with a non-empty \"content\"", a);
        tok_added *x = &t->added[t->n_added];
        snprintf(field, sizeof field, "added_tokens[%zu].id", i);
        WNA16_TRY(get_id(d, t, json_object_get(a, "id"), field, &x->id));
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        WNA16_TRY(get_bool(d, t, a, "special", field, false, &x->special));
        WNA16_TRY(get_bool(d, t, a, "lstrip", field, false, &x->lstrip));
        WNA16_TRY(get_bool(d, t, a, "rstrip", field, false, &x->rstrip));
        WNA16_TRY(get_bool(d, t, a, "single_word", field, false, &x->single_word));
        WNA16_TRY(get_bool(d, t, a, "normalized", field, !x->special, &x->normalized));
        x->len = strlen(content);
        if (!(x->content = wna16_strdup(content)))
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
        t->n_added++;
        if (x->id > *max_id) *max_id = x->id;
        WNA16_TRY(add_to_trie(d, t, x, (int32_t)(t->n_added - 1)));
    }
    return WNA16_OK;
}

/* ------------------------------------------------------------------ load */

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static wna16_status load_json(wna16_diag *d, const char *path, json_t **out) {
    json_error_t err;
    if (!is_file(path))
        return wna16_fail(d, WNA16_ERR_IO,
                          "%s: no such file; pass a directory holding tokenizer.json or the "
                          "path of tokenizer.json itself",
                          path);
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!*out)
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: not valid JSON at line %d, column %d: %s; the file must be a "
                          "Hugging Face tokenizer.json (JSON without duplicate keys)",
                          path, err.line, err.column, err.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: the top level is not a JSON object; expected a Hugging Face "
                          "tokenizer.json",
                          path);
    }
    return WNA16_OK;
}

static wna16_status parse_all(wna16_diag *d, wna16_tokenizer *t, const json_t *root) {
    int32_t max_id = -1;
    WNA16_TRY(parse_normalizer(d, t, json_object_get(root, "normalizer"), "normalizer"));
    WNA16_TRY(parse_pre(d, t, json_object_get(root, "pre_tokenizer")));
    dec_state dst = {0};
    WNA16_TRY(parse_decoder(d, t, json_object_get(root, "decoder"), &dst));
    WNA16_TRY(parse_model(d, t, json_object_get(root, "model"), &max_id));
    WNA16_TRY(parse_added(d, t, json_object_get(root, "added_tokens"), &max_id));
    WNA16_TRY(parse_post(d, t, json_object_get(root, "post_processor")));
    if (max_id < 0)
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: model.vocab is empty; expected at least one token; %s", t->path,
                          FIX_HINT);
    WNA16_TRY(tok_build_id_tables(d, t, max_id));
    for (size_t i = 0; i < t->n_post_prefix + t->n_post_suffix; i++) {
        int32_t id =
            i < t->n_post_prefix ? t->post_prefix[i] : t->post_suffix[i - t->n_post_prefix];
        if ((size_t)id >= t->n_ids || !t->id_flags[id])
            return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                              "%s: post_processor names token id %d which is not in the "
                              "vocabulary; %s",
                              t->path, id, FIX_HINT);
    }
    return WNA16_OK;
}

/* A file given by path is read as a tiktoken.model when so named. */
static bool tiktoken_name(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    return !strcmp(base, "tiktoken.model") || (n > 9 && !strcmp(base + n - 9, ".tiktoken"));
}

/* Resolves PATH (directory or file) into tokenizer.json (or, in a
 * directory without one, tiktoken.model) and the optional
 * tokenizer_config.json beside it. */
static wna16_status resolve_paths(wna16_diag *d, const char *path, char **json_path,
                                  char **config_path, bool *tiktoken) {
    *tiktoken = false;
    if (is_dir(path)) {
        *json_path = wna16_asprintf("%s/tokenizer.json", path);
        if (*json_path && !is_file(*json_path)) {
            char *tt = wna16_asprintf("%s/tiktoken.model", path);
            if (tt && is_file(tt)) {
                wna16_free(*json_path);
                *json_path = tt;
                *tiktoken = true;
            } else {
                wna16_free(tt);
            }
        }
    } else {
        *json_path = wna16_strdup(path);
        *tiktoken = tiktoken_name(path);
    }
    if (!*json_path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    const char *slash = strrchr(*json_path, '/');
    int dirlen = slash ? (int)(slash - *json_path) : 1;
    *config_path = wna16_asprintf("%.*s/tokenizer_config.json", dirlen, slash ? *json_path : ".");
    if (!*config_path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    return WNA16_OK;
}

wna16_status wna16_tokenizer_load(wna16_ctx *ctx, const char *path, wna16_tokenizer **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!path || !out)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "tokenizer_load: path and out are "
                          "required");
    *out = NULL;
    wna16_tokenizer *t = wna16_calloc(1, sizeof *t);
    if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    t->bos_id = t->eos_id = t->pad_id = t->unk_id = -1;
    char *config_path = NULL;
    json_t *root = NULL;
    bool tiktoken = false;
    wna16_status s = tok_check_path(d, path);
    if (s == WNA16_OK) s = resolve_paths(d, path, &t->path, &config_path, &tiktoken);
    if (s == WNA16_OK && tiktoken) {
        s = tok_load_tiktoken_file(d, t, config_path);
    } else {
        if (s == WNA16_OK) s = load_json(d, t->path, &root);
        if (s == WNA16_OK) s = parse_all(d, t, root);
    }
    json_decref(root);
    if (s == WNA16_OK && is_file(config_path)) s = tok_load_config(d, t, config_path);
    if (s == WNA16_OK) s = tok_load_chat_template_file(d, t);
    wna16_free(config_path);
    if (s != WNA16_OK) {
        wna16_tokenizer_free(t);
        return s;
    }
    *out = t;
    return WNA16_OK;
}

wna16_status tok_load_memory(wna16_diag *d, const char *label, const char *json, size_t len,
                             wna16_tokenizer **out) {
    wna16_diag_clear(d);
    if (!out || (!json && len))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "tok_load_memory: NULL argument");
    *out = NULL;
    wna16_tokenizer *t = wna16_calloc(1, sizeof *t);
    if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    t->bos_id = t->eos_id = t->pad_id = t->unk_id = -1;
    t->path = wna16_strdup(label ? label : "(memory)");
    if (!t->path) {
        wna16_tokenizer_free(t);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    }
    json_error_t err;
    json_t *root = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &err);
    wna16_status s = WNA16_OK;
    if (!root)
        s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                       "%s: not valid JSON at line %d, column %d: %s; the file must be a "
                       "Hugging Face tokenizer.json (JSON without duplicate keys)",
                       t->path, err.line, err.column, err.text);
    else if (!json_is_object(root))
        s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                       "%s: the top level is not a JSON object; expected a Hugging Face "
                       "tokenizer.json",
                       t->path);
    if (s == WNA16_OK) s = parse_all(d, t, root);
    json_decref(root);
    if (s != WNA16_OK) {
        wna16_tokenizer_free(t);
        return s;
    }
    *out = t;
    return WNA16_OK;
}

wna16_status tok_load_tiktoken_memory(wna16_diag *d, const char *label, const char *text,
                                      size_t len, const char *config_json, size_t config_len,
                                      wna16_tokenizer **out) {
    wna16_diag_clear(d);
    if (!out || (!text && len) || (!config_json && config_len))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "tok_load_tiktoken_memory: NULL argument");
    *out = NULL;
    wna16_tokenizer *t = wna16_calloc(1, sizeof *t);
    if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    t->bos_id = t->eos_id = t->pad_id = t->unk_id = -1;
    json_t *config = NULL;
    wna16_status s = (t->path = wna16_strdup(label ? label : "(memory)"))
                         ? WNA16_OK
                         : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == WNA16_OK && config_json) {
        json_error_t err;
        config = json_loadb(config_json, config_len,
                            JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
        if (!config)
            s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                           "%s: tokenizer_config.json is not valid JSON (line %d: %s)", t->path,
                           err.line, err.text);
        else if (!json_is_object(config))
            s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                           "%s: tokenizer_config.json is not a JSON object", t->path);
    }
    if (s == WNA16_OK) s = tok_parse_tiktoken(d, t, text ? text : "", len, config);
    json_decref(config);
    if (s != WNA16_OK) {
        wna16_tokenizer_free(t);
        return s;
    }
    *out = t;
    return WNA16_OK;
}

void wna16_tokenizer_free(wna16_tokenizer *t) {
    if (!t) return;
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
    wna16_free(t->id_str);
    wna16_free(t->id_len);
    wna16_free(t->id_flags);
    wna16_free(t->dec_arena);
    wna16_free(t->dec_off);
    wna16_free(t->dec_len);
    for (int i = 0; i < t->n_pres; i++) {
        pcre2_match_data_free(t->pres[i].md);
        pcre2_code_free(t->pres[i].re);
    }
    for (int i = 0; i < t->n_norms; i++) {
        wna16_free(t->norms[i].str);
        pcre2_match_data_free(t->norms[i].md);
        pcre2_code_free(t->norms[i].re);
    }
    for (int i = 0; i < t->n_dec_steps; i++) {
        wna16_free(t->dec_steps[i].from);
        wna16_free(t->dec_steps[i].to);
    }
    wna16_free(t->post_prefix);
    wna16_free(t->post_suffix);
    for (size_t i = 0; i < t->n_added; i++) {
        wna16_free(t->added[i].content);
        wna16_free(t->added[i].norm);
    }
    wna16_free(t->added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    wna16_free(t->chat_template);
    tok_cache_free(&t->cache);
    wna16_free(t->path);
    wna16_free(t);
}
