/* Loading a tiktoken-format BPE (Kimi-K2's tiktoken.model): one line per
 * token, "<base64 of its bytes> <rank>", where the rank is both the token
 * id and the merge priority of the byte string. It fills the structures a
 * byte-level tokenizer.json fills, so encoding and decoding are the shared
 * code (tok_encode.c, tok_decode.c):
 *   - each token's bytes go through the ByteLevel alphabet into the vocab;
 *   - tiktoken merges the adjacent pair whose concatenation has the lowest
 *     rank, leftmost first: every split of a token into two ranked tokens
 *     becomes a merge of that rank, which the shared rank-ordered merge
 *     (ties to the leftmost pair) then reproduces;
 *   - a piece that is itself a token is that token (ignore_merges);
 *   - the text is cut by Kimi's pattern and only the matches are encoded,
 *     as tiktoken's find_iter does;
 *   - tokenizer_config.json's added_tokens_decoder names the special
 *     tokens; the 256 ids after the last rank that it leaves unnamed are
 *     <|reserved_token_ID|>, as Kimi's tokenizer makes them. */
#include "tokenizer/tok_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TT_HINT                                                                                    \
    "use the model's own tiktoken.model (one \"<base64 token> <rank>\" line per token, ranks "     \
    "0..N-1)"
/* Kimi's tokenizer: ids N..N+255 after the N ranks are special tokens. */
#define KIMI_RESERVED 256

/* Unicode White_Space: \s of tiktoken's regex engine. PCRE2's \s also
 * matches U+180E (in its \h), which is no longer White_Space. */
#define WS                                                                                         \
    "\\t\\n\\x0b\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"      \
    "\\x{205f}\\x{3000}"

/* tokenization_kimi.py's pat_str. Its class intersections
 * [...&&[^\p{Han}]] (Rust regex syntax) are written as a negative
 * lookahead before the class, which PCRE2 (before 10.45) needs; \s and \S
 * as the White_Space class. */
const char tok_kimi_pattern[] =
    "[\\p{sc:Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*"
    "(?:(?!\\p{sc:Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+"
    "(?:(?!\\p{sc:Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";
#undef WS

static wna16_status oom(wna16_diag *d) {
    return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory loading tiktoken.model");
}

/* ---------------------------------------------------------------- base64 */

static int b64_digit(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding. On failure *bad is the offset of the first
 * character that cannot be there (n when the length is wrong). */
static bool b64_decode(const char *s, size_t n, uint8_t *out, size_t *out_len, size_t *bad) {
    *out_len = 0;
    if (!n || n % 4) {
        *bad = n;
        return false;
    }
    for (size_t g = 0; g < n; g += 4) {
        bool last = g + 4 == n;
        int v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = b64_digit((unsigned char)s[g + k]);
            bool pad_ok = s[g + k] == '=' && last && k >= 2 && (k == 3 || s[g + 3] == '=');
            if (v[k] < 0 && !pad_ok) {
                *bad = g + (size_t)k;
                return false;
            }
        }
        uint32_t bits = (uint32_t)(v[0] << 18 | v[1] << 12 | (v[2] < 0 ? 0 : v[2]) << 6 |
                                   (v[3] < 0 ? 0 : v[3]));
        out[(*out_len)++] = (uint8_t)(bits >> 16);
        if (v[2] >= 0) out[(*out_len)++] = (uint8_t)(bits >> 8);
        if (v[3] >= 0) out[(*out_len)++] = (uint8_t)bits;
    }
    return true;
}

/* ----------------------------------------------------------- rank lines */

typedef struct tt_parse {
    wna16_diag *d;
    wna16_tokenizer *t;
    size_t n_tokens;     /* non-empty lines: the ranks must be 0..n_tokens-1 */
    uint32_t *rank_line; /* rank -> line number holding it; 0 = not seen */
    size_t far_line;     /* first line whose rank is >= n_tokens, or 0 */
    uint32_t far_rank;
    uint8_t *bytes;
    char *mapped;
} tt_parse;

/* The next line of text from *pos, without its end of line (and a CR). */
static bool next_line(const char *text, size_t len, size_t *pos, const char **line, size_t *n) {
    if (*pos >= len) return false;
    const char *s = text + *pos, *nl = memchr(s, '\n', len - *pos);
    size_t l = nl ? (size_t)(nl - s) : len - *pos;
    *pos += l + (nl ? 1 : 0);
    if (l && s[l - 1] == '\r') l--;
    *line = s;
    *n = l;
    return true;
}

static wna16_status line_error(tt_parse *p, size_t lineno, const char *what, const char *line,
                               size_t n) {
    return wna16_fail(p->d, WNA16_ERR_TOKENIZER_INVALID, "%s:%zu: %s (line \"%.*s\"); %s",
                      p->t->path, lineno, what, (int)(n > 60 ? 60 : n), line, TT_HINT);
}

/* A rank: decimal digits only, below TOK_MAX_ID. */
static bool parse_rank(const char *s, size_t n, uint32_t *out) {
    uint64_t v = 0;
    if (!n || n > 9) return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v >= TOK_MAX_ID) return false;
    *out = (uint32_t)v;
    return true;
}

static wna16_status add_token(tt_parse *p, size_t lineno, const char *line, size_t n, size_t nbytes,
                              uint32_t rank) {
    size_t mlen = 0;
    for (size_t i = 0; i < nbytes; i++)
        mlen += wna16_utf8_encode(tok_byte_to_cp[p->bytes[i]], p->mapped + mlen);
    int32_t old = tok_strmap_get(&p->t->vocab, p->mapped, mlen);
    if (old >= 0) {
        char what[96];
        snprintf(what, sizeof what, "the same token is on line %u (rank %d)", p->rank_line[old],
                 old);
        return line_error(p, lineno, what, line, n);
    }
    if (!tok_strmap_put(&p->t->vocab, p->mapped, mlen, (int32_t)rank, NULL)) return oom(p->d);
    return WNA16_OK;
}

static wna16_status parse_line(tt_parse *p, size_t lineno, const char *line, size_t n) {
    const char *sp = memchr(line, ' ', n);
    if (!sp) return line_error(p, lineno, "no rank after the token", line, n);
    size_t tok_len = (size_t)(sp - line), bad = 0, nbytes = 0;
    const char *r = sp + 1;
    size_t rlen = n - tok_len - 1;
    while (rlen && (r[rlen - 1] == ' ' || r[rlen - 1] == '\t')) rlen--;
    uint32_t rank = 0;
    if (!rlen) return line_error(p, lineno, "no rank after the token", line, n);
    if (!parse_rank(r, rlen, &rank)) {
        char what[96];
        snprintf(what, sizeof what, "the rank \"%.*s\" is not a number 0..%d",
                 (int)(rlen > 20 ? 20 : rlen), r, TOK_MAX_ID - 1);
        return line_error(p, lineno, what, line, n);
    }
    if (tok_len / 4 * 3 > TOK_MAX_TOKEN_LEN) {
        char what[64];
        snprintf(what, sizeof what, "the token is longer than %d bytes", TOK_MAX_TOKEN_LEN);
        return line_error(p, lineno, what, line, n);
    }
    if (!b64_decode(line, tok_len, p->bytes, &nbytes, &bad)) {
        char what[128];
        if (bad >= tok_len)
            snprintf(what, sizeof what,
                     "the token is not base64: its length %zu is not a positive multiple of 4",
                     tok_len);
        else
            snprintf(what, sizeof what, "the token is not base64: character '%c' at column %zu",
                     (unsigned char)line[bad] >= 0x20 && (unsigned char)line[bad] < 0x7F ? line[bad]
                                                                                         : '?',
                     bad + 1);
        return line_error(p, lineno, what, line, n);
    }
    if (rank >= p->n_tokens) {
        /* refused after the pass, naming the first missing rank */
        if (!p->far_line) p->far_line = lineno, p->far_rank = rank;
        return WNA16_OK;
    }
    if (p->rank_line[rank]) {
        char what[96];
        snprintf(what, sizeof what, "rank %u is also on line %u; each rank must appear once", rank,
                 p->rank_line[rank]);
        return line_error(p, lineno, what, line, n);
    }
    p->rank_line[rank] = (uint32_t)lineno;
    return add_token(p, lineno, line, n, nbytes, rank);
}

static wna16_status parse_lines(tt_parse *p, const char *text, size_t len) {
    const char *line;
    size_t n, pos = 0, lineno = 0;
    while (next_line(text, len, &pos, &line, &n))
        if (n) p->n_tokens++;
    if (!p->n_tokens)
        return wna16_fail(p->d, WNA16_ERR_TOKENIZER_INVALID, "%s: no tokens in the file; %s",
                          p->t->path, TT_HINT);
    if (p->n_tokens >= TOK_MAX_ID)
        return wna16_fail(p->d, WNA16_ERR_LIMIT, "%s: more than %d tokens", p->t->path,
                          TOK_MAX_ID - 1);
    p->rank_line = wna16_calloc(p->n_tokens, sizeof *p->rank_line);
    p->bytes = wna16_malloc(TOK_MAX_TOKEN_LEN + 4);
    p->mapped = wna16_malloc(2 * (TOK_MAX_TOKEN_LEN + 4));
    if (!p->rank_line || !p->bytes || !p->mapped) return oom(p->d);
    for (pos = 0; next_line(text, len, &pos, &line, &n);) {
        lineno++;
        if (n) WNA16_TRY(parse_line(p, lineno, line, n)); /* tiktoken skips empty lines */
    }
    if (!p->far_line) return WNA16_OK;
    size_t missing = 0;
    while (missing < p->n_tokens && p->rank_line[missing]) missing++;
    return wna16_fail(p->d, WNA16_ERR_TOKENIZER_INVALID,
                      "%s:%zu: rank %u is out of range and rank %zu is missing: the %zu tokens "
                      "must have the ranks 0..%zu, each once (special tokens take the ids after "
                      "them); %s",
                      p->t->path, p->far_line, p->far_rank, missing, p->n_tokens, p->n_tokens - 1,
                      TT_HINT);
}

/* tiktoken starts every piece from its single bytes: all 256 need a rank. */
static wna16_status check_bytes(wna16_diag *d, const wna16_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char u[4];
        if (tok_strmap_get(&t->vocab, u, wna16_utf8_encode(tok_byte_to_cp[b], u)) < 0)
            return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                              "%s: the single byte 0x%02X has no rank; tiktoken needs a line for "
                              "each of the 256 bytes; %s",
                              t->path, b, TT_HINT);
    }
    return WNA16_OK;
}

/* Every split of a token into two tokens is a merge with the token's rank.
 * The prefixes' hashes grow along the token, so only a prefix that is a
 * token costs a lookup of its suffix: the work stays linear in the token's
 * length times the (few) tokens that start it, whatever a file holds. */
static wna16_status build_merges(wna16_diag *d, wna16_tokenizer *t) {
    for (size_t i = 0; i < t->vocab.n; i++) {
        size_t len, k = 0, cl;
        const char *s = tok_strmap_key(&t->vocab, i, &len);
        int32_t id = t->vocab.ents[i].val;
        uint32_t h = TOK_HASH_SEED;
        while ((cl = wna16_utf8_valid_len((const uint8_t *)s + k, len - k)) && k + cl < len) {
            h = tok_hash_add(h, s + k, cl);
            k += cl;
            int32_t a = tok_strmap_get_hashed(&t->vocab, s, k, h);
            int32_t b = a < 0 ? -1 : tok_strmap_get(&t->vocab, s + k, len - k);
            if (b >= 0 && !tok_pairmap_put(&t->merges, a, b, id, id)) return oom(d);
        }
    }
    return WNA16_OK;
}

/* ------------------------------------------------------- special tokens */

static wna16_status config_error(wna16_diag *d, const wna16_tokenizer *t, const char *key,
                                 const char *what) {
    return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                      "%s: tokenizer_config.json added_tokens_decoder[\"%.20s\"]: %s; fix it or "
                      "use the model's own tokenizer_config.json",
                      t->path, key, what);
}

static wna16_status add_special(wna16_diag *d, wna16_tokenizer *t, const char *key,
                                const char *content, int32_t id, int32_t *max_id) {
    size_t len = strlen(content), mlen = 0;
    int32_t dup = tok_trie_longest(&t->trie_raw, content, len, &mlen);
    if (dup >= 0 && mlen == len) return config_error(d, t, key, "its content names two ids");
    tok_added *x = &t->added[t->n_added];
    x->id = id;
    x->len = len;
    x->special = true;
    if (!(x->content = wna16_strdup(content))) return oom(d);
    t->n_added++;
    if (!tok_trie_add(&t->trie_raw, x->content, len, (int32_t)(t->n_added - 1))) return oom(d);
    if (id > *max_id) *max_id = id;
    return WNA16_OK;
}

/* The id of an added_tokens_decoder key: a decimal id after the ranks. */
static wna16_status config_id(wna16_diag *d, const wna16_tokenizer *t, const char *key,
                              size_t n_ranks, int32_t *id) {
    uint32_t v;
    if (!parse_rank(key, strlen(key), &v))
        return config_error(d, t, key, "the key is not a token id");
    if (v < n_ranks) {
        char what[128];
        snprintf(what, sizeof what, "id %u is a rank of tiktoken.model (special ids start at %zu)",
                 v, n_ranks);
        return config_error(d, t, key, what);
    }
    *id = (int32_t)v;
    return WNA16_OK;
}

static wna16_status parse_specials(wna16_diag *d, wna16_tokenizer *t, const json_t *config,
                                   int32_t n_ranks, int32_t *max_id) {
    const json_t *dec = json_object_get(config, "added_tokens_decoder"), *v;
    const char *key;
    if (dec && !json_is_null(dec) && !json_is_object(dec))
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: tokenizer_config.json added_tokens_decoder is not an object {id: "
                          "{\"content\": ...}}; fix it or use the model's own file",
                          t->path);
    bool named[KIMI_RESERVED] = {0};
    t->added = wna16_calloc(json_object_size(dec) + KIMI_RESERVED, sizeof *t->added);
    if (!t->added) return oom(d);
    json_object_foreach((json_t *)dec, key, v) {
        int32_t id = -1;
        WNA16_TRY(config_id(d, t, key, (size_t)n_ranks, &id));
        const json_t *c = json_object_get(v, "content");
        if (!json_is_string(c) || !json_string_length(c) ||
            strlen(json_string_value(c)) != json_string_length(c))
            return config_error(d, t, key, "expected {\"content\": a non-empty string}");
        if (json_string_length(c) > TOK_MAX_TOKEN_LEN)
            return config_error(d, t, key, "the content is too long");
        WNA16_TRY(add_special(d, t, key, json_string_value(c), id, max_id));
        if (id - n_ranks < KIMI_RESERVED) named[id - n_ranks] = true;
    }
    for (int i = 0; i < KIMI_RESERVED; i++) {
        if (named[i]) continue;
        char name[48], k[16];
        snprintf(name, sizeof name, "<|reserved_token_%d|>", n_ranks + i);
        snprintf(k, sizeof k, "%d", n_ranks + i);
        WNA16_TRY(add_special(d, t, k, name, n_ranks + i, max_id));
    }
    return WNA16_OK;
}

/* ------------------------------------------------------------------ load */

wna16_status tok_parse_tiktoken(wna16_diag *d, wna16_tokenizer *t, const char *text, size_t len,
                                const json_t *config) {
    tt_parse p = {.d = d, .t = t};
    wna16_status s = parse_lines(&p, text, len);
    wna16_free(p.rank_line);
    wna16_free(p.bytes);
    wna16_free(p.mapped);
    WNA16_TRY(s);
    WNA16_TRY(check_bytes(d, t));
    WNA16_TRY(build_merges(d, t));
    t->byte_level = t->decoder_byte_level = t->added_decode_raw = true;
    t->ignore_merges = true;
    tok_pre *pre = &t->pres[t->n_pres++];
    memset(pre, 0, sizeof *pre);
    pre->kind = PRE_SPLIT;
    pre->behavior = SPLIT_REMOVED;
    pre->invert = true; /* keep the matches, drop what lies between */
    WNA16_TRY(tok_regex_compile(d, t->path, "Kimi pre-tokenizer pattern", tok_kimi_pattern, false,
                                &pre->re, &pre->md));
    int32_t max_id = (int32_t)p.n_tokens - 1;
    WNA16_TRY(parse_specials(d, t, config, (int32_t)p.n_tokens, &max_id));
    return tok_build_id_tables(d, t, max_id);
}

/* The whole file, NUL-terminated; a tiktoken.model is a few MiB. */
#define TT_MAX_FILE ((size_t)1 << 30)
static wna16_status read_file(wna16_diag *d, const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return wna16_fail(d, WNA16_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    wna16_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len <= TT_MAX_FILE)
        wna16_buf_put(&b, chunk, n);
    bool err = ferror(f);
    fclose(f);
    wna16_buf_put(&b, "", 0);
    wna16_status s = WNA16_OK;
    if (err)
        s = wna16_fail(d, WNA16_ERR_IO, "%s: read error", path);
    else if (b.failed)
        s = oom(d);
    else if (b.len > TT_MAX_FILE)
        s = wna16_fail(d, WNA16_ERR_LIMIT, "%s: over %zu MiB; not a tiktoken.model", path,
                       TT_MAX_FILE >> 20);
    if (s != WNA16_OK) {
        wna16_buf_free(&b);
        return s;
    }
    *text = b.data;
    *len = b.len;
    return WNA16_OK;
}

wna16_status tok_load_tiktoken_file(wna16_diag *d, wna16_tokenizer *t, const char *config_path) {
    char *text = NULL;
    size_t len = 0;
    json_t *config = NULL;
    WNA16_TRY(read_file(d, t->path, &text, &len));
    FILE *cf = fopen(config_path, "rb");
    wna16_status s = WNA16_OK;
    if (cf) {
        fclose(cf);
        json_error_t err;
        config =
            json_load_file(config_path, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
        if (!config)
            s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                           "%s: not valid JSON (line %d, column %d: %s); fix or remove "
                           "tokenizer_config.json",
                           config_path, err.line, err.column, err.text);
        else if (!json_is_object(config))
            s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                           "%s: not a JSON object; fix or remove tokenizer_config.json",
                           config_path);
    }
    if (s == WNA16_OK) s = tok_parse_tiktoken(d, t, text, len, config);
    json_decref(config);
    wna16_free(text);
    return s;
}
