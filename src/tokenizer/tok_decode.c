/* Decoding (whole sequences and streams) and read-only queries. */
#include "tokenizer/tok_internal.h"

#include <string.h>

static bool valid_id(const wna16_tokenizer *t, int32_t id) {
    return id >= 0 && (size_t)id < t->n_ids && t->id_flags[id];
}

static wna16_status bad_id(wna16_diag *d, const wna16_tokenizer *t, int32_t id, size_t index) {
    return wna16_fail(d, WNA16_ERR_TOKEN_ID,
                      "tokenizer_decode: ids[%zu] = %d is not a token of %s (valid ids are 0..%zu "
                      "with gaps); the ids were made by another tokenizer or are corrupt",
                      index, id, t->path, t->n_ids - 1);
}

static bool skipped(const wna16_tokenizer *t, int32_t id, bool skip_special) {
    return skip_special && (t->id_flags[id] & TOK_ID_SPECIAL);
}

/* The ByteLevel map: each character back to its byte; a token holding any
 * character outside that alphabet is taken as raw UTF-8, as HF does. */
static void byte_level_bytes(const char *s, size_t len, wna16_buf *out) {
    size_t start = out->len;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = wna16_utf8_valid_len((const uint8_t *)s + i, len - i);
        if (!l) break;
        wna16_utf8_decode((const uint8_t *)s + i, &cp);
        int b = tok_cp_to_byte(cp);
        if (b < 0) {
            out->len = start;
            wna16_buf_put(out, s, len);
            return;
        }
        char c = (char)b;
        wna16_buf_put(out, &c, 1);
        i += l;
    }
}

/* Appends s with every occurrence of from replaced by to. */
static void replace_all(const char *s, size_t n, const char *from, size_t from_len, const char *to,
                        size_t to_len, wna16_buf *out) {
    size_t i = 0, last = 0;
    while (from_len && i + from_len <= n) {
        if (memcmp(s + i, from, from_len)) {
            i++;
            continue;
        }
        wna16_buf_put(out, s + last, i - last);
        wna16_buf_put(out, to, to_len);
        i += from_len;
        last = i;
    }
    wna16_buf_put(out, s + last, n - last);
}

bool tok_decode_token(const wna16_tokenizer *t, const char *s, size_t len, bool first,
                      wna16_buf *out) {
    wna16_buf tmp[2] = {{0}, {0}};
    const char *cur = s;
    size_t cur_len = len;
    for (int k = 0; k < t->n_dec_steps; k++) {
        const tok_dec_step *x = &t->dec_steps[k];
        wna16_buf *dst = &tmp[k & 1];
        dst->len = 0;
        replace_all(cur, cur_len, x->from, x->from_len, x->to,
                    x->metaspace && first && x->strip_first ? 0 : x->to_len, dst);
        wna16_buf_put(dst, "", 0);
        cur = dst->data ? dst->data : "";
        cur_len = dst->len;
    }
    if (t->decoder_byte_level)
        byte_level_bytes(cur, cur_len, out);
    else
        wna16_buf_put(out, cur, cur_len);
    bool ok = !tmp[0].failed && !tmp[1].failed && !out->failed;
    wna16_buf_free(&tmp[0]);
    wna16_buf_free(&tmp[1]);
    return ok;
}

/* HF ByteFallback: a run of byte tokens is its text when the whole run is
 * valid UTF-8, else one U+FFFD per byte. */
static void flush_run(wna16_buf *run, wna16_buf *out) {
    if (!run->len) return;
    if (wna16_utf8_check((const uint8_t *)run->data, run->len) == run->len)
        wna16_buf_put(out, run->data, run->len);
    else
        for (size_t i = 0; i < run->len; i++) wna16_buf_put(out, "\xEF\xBF\xBD", 3);
    run->len = 0;
}

/* Appends the bytes of one token: byte tokens gather in run until a
 * token of another kind (or the end) comes. */
static void put_token(const wna16_tokenizer *t, int32_t id, bool first, wna16_buf *run,
                      wna16_buf *out) {
    const char *b = (const char *)t->dec_arena + t->dec_off[id];
    if (t->id_flags[id] & TOK_ID_BYTE) {
        wna16_buf_put(run, b, 1);
        return;
    }
    flush_run(run, out);
    if (first && t->dec_first_differs) {
        if (!tok_decode_token(t, t->id_str[id], t->id_len[id], true, out)) out->failed = true;
        return;
    }
    wna16_buf_put(out, b, t->dec_len[id]);
}

/* Strip after Fuse: drops up to *left leading copies of the character from
 * text (b->data from offset start); *left is spent as they go, and is 0
 * once any other character was seen. */
static void strip_start(const wna16_tokenizer *t, wna16_buf *b, size_t start, int *left) {
    size_t cut = start;
    while (*left > 0 && cut < b->len) {
        uint32_t cp;
        size_t l = wna16_utf8_valid_len((const uint8_t *)b->data + cut, b->len - cut);
        if (!l) break;
        wna16_utf8_decode((const uint8_t *)b->data + cut, &cp);
        if (cp != t->dec_strip_cp) {
            *left = 0;
            break;
        }
        cut += l;
        (*left)--;
    }
    if (cut == start) return;
    memmove(b->data + start, b->data + cut, b->len - cut);
    b->len -= cut - start;
}

wna16_status wna16_tokenizer_decode(wna16_ctx *ctx, const wna16_tokenizer *tok, const int32_t *ids,
                                    size_t n_ids, bool skip_special, char **text, size_t *len) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!tok || (!ids && n_ids) || !text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "tokenizer_decode: tok, ids and text are required");
    *text = NULL;
    wna16_buf bytes = {0}, out = {0}, run = {0};
    size_t n_used = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (!valid_id(tok, ids[i])) {
            wna16_buf_free(&bytes);
            wna16_buf_free(&run);
            return bad_id(d, tok, ids[i], i);
        }
        if (skipped(tok, ids[i], skip_special)) continue;
        put_token(tok, ids[i], n_used++ == 0, &run, &bytes);
    }
    flush_run(&run, &bytes);
    tok_utf8_lossy(&out, (const uint8_t *)bytes.data, bytes.len, false);
    wna16_buf_put(&out, "", 0); /* makes data non-NULL when empty */
    int left = tok->dec_strip_start;
    strip_start(tok, &out, 0, &left);
    if (out.data) out.data[out.len] = 0;
    bool failed = bytes.failed || run.failed;
    wna16_buf_free(&bytes);
    wna16_buf_free(&run);
    if (failed || out.failed) {
        wna16_buf_free(&out);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "tokenizer_decode: out of memory");
    }
    *text = out.data;
    if (len) *len = out.len;
    return WNA16_OK;
}

/* ----------------------------------------------------------------- stream */

struct wna16_detok_stream {
    const wna16_tokenizer *tok;
    bool skip_special;
    wna16_buf pending; /* bytes of an incomplete character */
    wna16_buf run;     /* byte tokens (ByteFallback) not yet resolved */
    wna16_buf out;     /* text returned by the last call */
    size_t n_used;     /* tokens decoded so far (not skipped) */
    int strip_left;    /* leading characters Strip may still drop */
};

wna16_status wna16_detok_stream_create(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                       bool skip_special, wna16_detok_stream **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!tok || !out)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "detok_stream_create: tok and out "
                          "are required");
    *out = wna16_calloc(1, sizeof **out);
    if (!*out) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    (*out)->tok = tok;
    (*out)->skip_special = skip_special;
    (*out)->strip_left = tok->dec_strip_start;
    return WNA16_OK;
}

/* Converts pending bytes to text, keeping a possibly incomplete tail. */
static wna16_status stream_drain(wna16_diag *d, wna16_detok_stream *s, bool final,
                                 const char **text, size_t *len) {
    s->out.len = 0;
    wna16_buf_put(&s->out, "", 0);
    if (final) flush_run(&s->run, &s->pending);
    size_t used = tok_utf8_lossy(&s->out, (const uint8_t *)s->pending.data, s->pending.len, !final);
    if (s->pending.len) memmove(s->pending.data, s->pending.data + used, s->pending.len - used);
    s->pending.len -= used;
    strip_start(s->tok, &s->out, 0, &s->strip_left);
    if (s->out.data) s->out.data[s->out.len] = 0;
    if (s->out.failed || s->pending.failed || s->run.failed)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "detok_stream: out of memory");
    *text = s->out.data;
    if (len) *len = s->out.len;
    return WNA16_OK;
}

wna16_status wna16_detok_stream_push(wna16_ctx *ctx, wna16_detok_stream *s, int32_t id,
                                     const char **text, size_t *len) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!s || !text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "detok_stream_push: s and text are "
                          "required");
    const wna16_tokenizer *t = s->tok;
    if (!valid_id(t, id))
        return wna16_fail(d, WNA16_ERR_TOKEN_ID,
                          "detok_stream_push: id %d is not a token of %s (valid ids are 0..%zu "
                          "with gaps); the ids were made by another tokenizer or are corrupt",
                          id, t->path, t->n_ids - 1);
    if (!skipped(t, id, s->skip_special)) put_token(t, id, s->n_used++ == 0, &s->run, &s->pending);
    return stream_drain(d, s, false, text, len);
}

wna16_status wna16_detok_stream_flush(wna16_ctx *ctx, wna16_detok_stream *s, const char **text,
                                      size_t *len) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!s || !text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "detok_stream_flush: s and text are "
                          "required");
    return stream_drain(d, s, true, text, len);
}

void wna16_detok_stream_free(wna16_detok_stream *s) {
    if (!s) return;
    wna16_buf_free(&s->pending);
    wna16_buf_free(&s->run);
    wna16_buf_free(&s->out);
    wna16_free(s);
}

/* ---------------------------------------------------------------- queries */

size_t wna16_tokenizer_vocab_size(const wna16_tokenizer *tok) { return tok ? tok->vocab_size : 0; }

int32_t wna16_tokenizer_token_id(const wna16_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    size_t len = strlen(token);
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && !memcmp(tok->added[i].content, token, len))
            return tok->added[i].id;
    return tok_strmap_get(&tok->vocab, token, len);
}

const char *wna16_tokenizer_token_str(const wna16_tokenizer *tok, int32_t id) {
    return tok && valid_id(tok, id) ? tok->id_str[id] : NULL;
}

bool wna16_tokenizer_is_special(const wna16_tokenizer *tok, int32_t id) {
    return tok && valid_id(tok, id) && (tok->id_flags[id] & TOK_ID_SPECIAL);
}
