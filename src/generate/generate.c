/* The generation loop: prefill the prompt in one batched pass, then decode
 * one token at a time, sampling, streaming text, stopping on EOS ids or
 * stop strings. */
#include "kernels/machine_limits.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_eos(const wna16_model *m, int32_t id) {
    for (size_t i = 0; i < m->n_eos; i++)
        if (m->eos[i] == id) return true;
    return false;
}

/* The first stop string found in text, or NULL. */
static const char *find_stop(const wna16_generate_options *o, const char *text) {
    for (size_t i = 0; i < o->n_stop; i++)
        if (o->stop[i][0] && strstr(text, o->stop[i])) return strstr(text, o->stop[i]);
    return NULL;
}

typedef struct gen_state {
    wna16_buf text;
    size_t emitted; /* bytes of text already given to the callback */
    size_t hold;    /* longest stop string - 1: bytes held back in case a stop begins */
} gen_state;

static bool emit(gen_state *g, const wna16_generate_options *o, bool final) {
    if (!o->on_text) return true;
    size_t ready = g->text.len;
    if (!final) ready = ready > g->hold ? ready - g->hold : 0;
    if (ready <= g->emitted) return true;
    bool go = o->on_text(o->user, g->text.data + g->emitted, ready - g->emitted);
    g->emitted = ready;
    return go;
}

/* The model's vocabulary is often padded past the tokenizer's (Qwen3:
 * 151936 logits, 151669 tokens). A trained model never picks the padding,
 * but a random or damaged one can, and the text stream could not go on:
 * ids the tokenizer has no token for are never sampled. Their list is made
 * once per call (NULL with *n = 0 when there are none). */
static int32_t *untokenizable(const wna16_tokenizer *tok, int64_t V, size_t *n) {
    *n = 0;
    for (int64_t id = 0; tok && id < V; id++) *n += !wna16_tokenizer_token_str(tok, (int32_t)id);
    int32_t *ids = *n ? wna16_malloc(*n * sizeof *ids) : NULL;
    for (int64_t id = 0, k = 0; ids && id < V; id++)
        if (!wna16_tokenizer_token_str(tok, (int32_t)id)) ids[k++] = (int32_t)id;
    return ids;
}

static wna16_status check_options(wna16_diag *d, wna16_ctx *ctx, const wna16_generate_options *o) {
    if (o->max_tokens < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: max_tokens %lld is negative",
                          (long long)o->max_tokens);
    if (o->n_stop && !o->stop)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: %zu stop strings but stop is NULL",
                          o->n_stop);
    for (size_t i = 0; i < o->n_stop; i++)
        if (!o->stop[i])
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: stop string %zu is NULL", i);
    return wna16_sampler_check(ctx, &o->sampler);
}

wna16_status wna16_generate(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                            const int32_t *prompt, size_t n_prompt,
                            const wna16_generate_options *options, wna16_generate_result *res) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || !prompt || !n_prompt || !options || !res)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: empty prompt or NULL argument");
    memset(res, 0, sizeof *res);
    wna16_generate_options taken;
    WNA16_TRY(wna16_options_take(d, "generate options", &taken, sizeof taken, options));
    const wna16_generate_options *o = &taken;
    WNA16_TRY(check_options(d, ctx, o));
    if ((int64_t)n_prompt + (o->max_tokens > 0 ? o->max_tokens : 0) > m->context)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "the prompt (%zu tokens) plus %lld new tokens exceed the context of "
                          "%lld; ask for fewer tokens or load with a longer --ctx",
                          n_prompt, (long long)o->max_tokens, (long long)m->context);
    int64_t V = m->cfg.vocab_size;
    float *logits = wna16_malloc((size_t)V * sizeof *logits);
    size_t cap = n_prompt + (size_t)(o->max_tokens > 0 ? o->max_tokens : 0) + 1;
    int32_t *hist = wna16_malloc(cap * sizeof *hist);
    gen_state g = {0};
    for (size_t i = 0; i < o->n_stop; i++)
        if (strlen(o->stop[i]) > g.hold + 1) g.hold = strlen(o->stop[i]) - 1;
    wna16_detok_stream *ds = NULL;
    size_t n_masked = 0;
    int32_t *masked = untokenizable(tok, V, &n_masked);
    wna16_status s = (!logits || !hist || (n_masked && !masked))
                         ? wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "generate")
                         : WNA16_OK;
    if (s == WNA16_OK && tok) s = wna16_detok_stream_create(ctx, tok, true, &ds);
    if (s == WNA16_OK) {
        memcpy(hist, prompt, n_prompt * sizeof *hist);
        wna16_model_reset(m);
        double t0 = wna16_now();
        s = wna16_model_eval(ctx, m, prompt, (int64_t)n_prompt, logits);
        res->prefill_seconds = wna16_now() - t0;
        res->prompt_tokens = (int64_t)n_prompt;
    }
    uint64_t rng = o->sampler.seed;
    size_t n_hist = n_prompt;
    res->stop_reason = "length";
    double t1 = wna16_now();
    for (int64_t step = 0; s == WNA16_OK && step < o->max_tokens; step++) {
        for (size_t i = 0; i < n_masked; i++) logits[masked[i]] = -INFINITY;
        int32_t id = wna16_sample(&o->sampler, logits, V, hist, n_hist, &rng);
        if (id < 0) {
            s = wna16_fail(d, WNA16_ERR_INTERNAL,
                           "generate: no token to sample at step %lld (every logit is NaN or -inf, "
                           "or memory ran out); the model's weights may be damaged",
                           (long long)step);
            break;
        }
        hist[n_hist++] = id;
        res->generated++;
        if (is_eos(m, id)) {
            res->stop_reason = "eos";
            break;
        }
        if (ds) {
            const char *piece;
            size_t len;
            if ((s = wna16_detok_stream_push(ctx, ds, id, &piece, &len)) != WNA16_OK) break;
            wna16_buf_put(&g.text, piece, len);
            const char *stop = g.text.data ? find_stop(o, g.text.data) : NULL;
            if (stop) {
                g.text.len = (size_t)(stop - g.text.data);
                g.text.data[g.text.len] = '\0';
                res->stop_reason = "stop";
                break;
            }
            if (!emit(&g, o, false)) {
                res->stop_reason = "callback";
                break;
            }
        }
        if (step + 1 == o->max_tokens) break;
        if ((s = wna16_check_abort(d, "generate")) != WNA16_OK) break;
        s = wna16_model_eval(ctx, m, &id, 1, logits);
    }
    res->decode_seconds = wna16_now() - t1;
    if (s == WNA16_OK && ds) {
        const char *piece;
        size_t len;
        if (!strcmp(res->stop_reason, "length") || !strcmp(res->stop_reason, "eos"))
            if (wna16_detok_stream_flush(ctx, ds, &piece, &len) == WNA16_OK)
                wna16_buf_put(&g.text, piece, len);
        emit(&g, o, true);
    }
    wna16_detok_stream_free(ds);
    wna16_free(masked);
    wna16_free(logits);
    if (s != WNA16_OK) {
        wna16_free(hist);
        wna16_buf_free(&g.text);
        return s;
    }
    res->ids = hist + n_prompt;
    res->ids_base = hist;
    res->text = g.text.data ? g.text.data : wna16_strdup("");
    return WNA16_OK;
}

void wna16_generate_result_free(wna16_generate_result *r) {
    if (!r) return;
    wna16_free(r->ids_base);
    wna16_free(r->text);
    memset(r, 0, sizeof *r);
}
