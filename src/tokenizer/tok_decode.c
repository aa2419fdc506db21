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

wna16_status wna16_tokenizer_decode(wna16_ctx *ctx, const wna16_tokenizer *tok, const int32_t *ids,
                                    size_t n_ids, bool skip_special, char **text, size_t *len) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!tok || (!ids && n_ids) || !text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "tokenizer_decode: tok, ids and text are required");
    *text = NULL;
    wna16_buf bytes = {0}, out = {0};
    for (size_t i = 0; i < n_ids; i++) {
        if (!valid_id(tok, ids[i])) {
            wna16_buf_free(&bytes);
            return bad_id(d, tok, ids[i], i);
        }
        if (skipped(tok, ids[i], skip_special)) continue;
        wna16_buf_put(&bytes, (const char *)tok->dec_arena + tok->dec_off[ids[i]],
                      tok->dec_len[ids[i]]);
    }
    tok_utf8_lossy(&out, (const uint8_t *)bytes.data, bytes.len, false);
    wna16_buf_put(&out, "", 0); /* makes data non-NULL when empty */
    wna16_buf_free(&bytes);
    if (bytes.failed || out.failed) {
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
    wna16_buf out;     /* text returned by the last call */
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
    return WNA16_OK;
}

/* Converts pending bytes to text, keeping a possibly incomplete tail. */
static wna16_status stream_drain(wna16_diag *d, wna16_detok_stream *s, bool final,
                                 const char **text, size_t *len) {
    s->out.len = 0;
    wna16_buf_put(&s->out, "", 0);
    size_t used = tok_utf8_lossy(&s->out, (const uint8_t *)s->pending.data, s->pending.len, !final);
    if (s->pending.len) memmove(s->pending.data, s->pending.data + used, s->pending.len - used);
    s->pending.len -= used;
    if (s->out.failed || s->pending.failed)
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
    if (!skipped(t, id, s->skip_special))
        wna16_buf_put(&s->pending, (const char *)t->dec_arena + t->dec_off[id], t->dec_len[id]);
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
