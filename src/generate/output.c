/* The output processor: one sequence's sampled tokens become its text and
 * its end. Text is decoded incrementally (a UTF-8 character split across
 * tokens is held until it completes); stop strings are looked for where
 * they could end in the new text; the last (longest stop string - 1) bytes are held back until no
 * stop string can begin in them; stop ids and EOS end the sequence once
 * min_tokens are out; max_tokens and the context end it by length. */
#include "generate/generate.h"

#include <string.h>

wna16_status wna16_output_init(wna16_ctx *ctx, wna16_output *o, const wna16_tokenizer *tok,
                               const wna16_output_rules *rules) {
    memset(o, 0, sizeof *o);
    o->rules = rules;
    o->tok = tok;
    o->stop_token = -1;
    for (size_t i = 0; i < rules->n_stop; i++) {
        size_t n = strlen(rules->stop[i]);
        if (n > o->hold + 1) o->hold = n - 1;
    }
    return tok ? wna16_detok_stream_create(ctx, tok, rules->skip_special, &o->detok) : WNA16_OK;
}

void wna16_output_free(wna16_output *o) {
    wna16_detok_stream_free(o->detok);
    wna16_buf_free(&o->text);
    memset(o, 0, sizeof *o);
}

static bool in_list(const int32_t *ids, size_t n, int32_t id) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static bool ends_here(const wna16_output_rules *r, int32_t id) {
    return (!r->ignore_eos && in_list(r->eos, r->n_eos, id)) ||
           in_list(r->stop_ids, r->n_stop_ids, id);
}

/* Bytes a character never completed become U+FFFD, as a decode of the
 * whole sequence has them. */
static wna16_status flush(wna16_ctx *ctx, wna16_output *o) {
    const char *t;
    size_t len;
    if (!o->detok) return WNA16_OK;
    WNA16_TRY(wna16_detok_stream_flush(ctx, o->detok, &t, &len));
    wna16_buf_put(&o->text, t, len);
    return WNA16_OK;
}

/* The first stop string (in the rules' order) that ends in the new text
 * (after `from`): each is looked for from its length - 1 bytes before it,
 * as vLLM does, so a match that lay whole in older text (before min_tokens)
 * does not count now. */
static void find_stop(wna16_output *o, size_t from) {
    const wna16_output_rules *r = o->rules;
    for (size_t i = 0; i < r->n_stop; i++) {
        const char *s = r->stop[i];
        size_t back = strlen(s) ? strlen(s) - 1 : 0;
        size_t scan = from > back ? from - back : 0;
        const char *hit = s[0] ? strstr(o->text.data + scan, s) : NULL;
        if (!hit) continue;
        size_t end = (size_t)(hit - o->text.data) + (r->include_stop_str ? strlen(s) : 0);
        o->text.len = end;
        o->text.data[end] = '\0';
        if (o->released > end) o->released = end;
        o->finish = WNA16_FINISH_STOP;
        o->stop_str = s;
        return;
    }
}

wna16_status wna16_output_push(wna16_ctx *ctx, wna16_output *o, int32_t id, int64_t context_left) {
    const wna16_output_rules *r = o->rules;
    o->generated++;
    bool may_stop = o->generated >= r->min_tokens;
    if (may_stop && ends_here(r, id)) {
        o->finish = WNA16_FINISH_STOP;
        o->stop_token = id;
        return flush(ctx, o);
    }
    if (o->detok) {
        const char *t;
        size_t len;
        WNA16_TRY(wna16_detok_stream_push(ctx, o->detok, id, &t, &len));
        size_t from = o->text.len;
        wna16_buf_put(&o->text, t, len);
        if (len && may_stop && r->n_stop) find_stop(o, from);
        if (o->finish) return WNA16_OK;
    }
    if (o->generated >= r->max_tokens || context_left <= 0) {
        o->finish = WNA16_FINISH_LENGTH;
        return flush(ctx, o);
    }
    return WNA16_OK;
}

wna16_status wna16_output_end(wna16_ctx *ctx, wna16_output *o, int32_t stop_token) {
    o->finish = WNA16_FINISH_STOP;
    o->stop_token = stop_token;
    return flush(ctx, o);
}

void wna16_output_take(wna16_output *o, const char **text, size_t *len) {
    size_t ready = o->text.len;
    if (!o->finish) ready = ready > o->hold ? ready - o->hold : 0;
    /* the text is whole characters: never end inside one */
    while (ready > o->released && ready < o->text.len &&
           ((unsigned char)o->text.data[ready] & 0xC0) == 0x80)
        ready--;
    if (ready < o->released) ready = o->released;
    *text = o->text.data ? o->text.data + o->released : "";
    *len = ready - o->released;
    o->released = ready;
}
