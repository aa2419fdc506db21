/* wna16_generate: one request through an engine of one sequence, stepped
 * on the caller's thread, so that a single generation and a served one
 * share the scheduler, the sampling and the output processor (the same
 * tokens and text for the same request). */
#include "core/clock.h"
#include "core/common.h"

#include <stdio.h>
#include <string.h>

static wna16_status check_options(wna16_diag *d, const wna16_generate_options *o) {
    if (o->max_tokens < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: max_tokens %lld is negative",
                          (long long)o->max_tokens);
    if (o->n_stop && !o->stop)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "generate: %zu stop strings but stop is NULL", o->n_stop);
    for (size_t i = 0; i < o->n_stop; i++)
        if (!o->stop[i])
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: stop string %zu is NULL", i);
    return WNA16_OK;
}

/* What the steps gave the one request. */
typedef struct gen_run {
    wna16_generate_result *res;
    const wna16_generate_options *o;
    wna16_buf text;
    int32_t *ids;
    int64_t n_ids;
    double t0, t_first;
    bool stopped_by_callback, eos, failed;
    char error[256];
    const int32_t *eos_ids;
    size_t n_eos;
} gen_run;

static bool is_eos(const gen_run *g, int32_t id) {
    for (size_t i = 0; i < g->n_eos; i++)
        if (g->eos_ids[i] == id) return true;
    return false;
}

static void take(gen_run *g, const wna16_request_output *out) {
    for (size_t i = 0; i < out->n_tokens; i++) g->ids[g->n_ids++] = out->token_ids[i];
    if (out->n_tokens && !g->t_first) g->t_first = wna16_now();
    if (out->text_len) {
        wna16_buf_put(&g->text, out->text, out->text_len);
        if (g->o->on_text && !g->o->on_text(g->o->user, out->text, out->text_len))
            g->stopped_by_callback = true;
    }
    if (!out->finished) return;
    g->res->stop_reason = out->finish_reason == WNA16_FINISH_LENGTH ? "length"
                          : out->finish_reason != WNA16_FINISH_STOP ? "callback"
                          : out->stop_str                           ? "stop"
                          : is_eos(g, out->stop_token)              ? "eos"
                                                                    : "stop";
    if (out->finish_reason == WNA16_FINISH_ERROR) {
        g->failed = true;
        snprintf(g->error, sizeof g->error, "%s", out->error);
    }
}

static wna16_status run(wna16_ctx *ctx, wna16_engine *e, gen_run *g) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    bool aborted = false;
    while (wna16_engine_has_unfinished(e)) {
        const wna16_request_output *outs;
        size_t n;
        WNA16_TRY(wna16_engine_step(ctx, e, &outs, &n));
        for (size_t i = 0; i < n; i++) take(g, &outs[i]);
        if (!aborted && wna16_engine_has_unfinished(e) &&
            (g->stopped_by_callback || wna16_check_abort(d, "generate") != WNA16_OK)) {
            aborted = true;
            (void)wna16_engine_abort(NULL, e, "generate");
        }
    }
    if (g->failed)
        return wna16_fail(d, WNA16_ERR_INTERNAL, "generate: %s", g->error[0] ? g->error
                                                                              : "the step failed");
    if (aborted && !g->stopped_by_callback)
        return wna16_fail(d, WNA16_ERR_ABORTED, "generate: stopped by the abort callback");
    return WNA16_OK;
}

wna16_status wna16_generate(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                            const int32_t *prompt, size_t n_prompt,
                            const wna16_generate_options *options, wna16_generate_result *res) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || !prompt || !n_prompt || !options || !res)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "generate: empty prompt or NULL argument");
    memset(res, 0, sizeof *res);
    wna16_generate_options o;
    WNA16_TRY(wna16_options_take(d, "generate options", &o, sizeof o, options));
    WNA16_TRY(check_options(d, &o));
    WNA16_TRY(wna16_sampler_check(ctx, &o.sampler));
    int64_t context = wna16_model_context(m);
    if ((int64_t)n_prompt + o.max_tokens > context)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "the prompt (%zu tokens) plus %lld new tokens exceed the context of "
                          "%lld; ask for fewer tokens or load with a longer --ctx",
                          n_prompt, (long long)o.max_tokens, (long long)context);
    wna16_engine_options eo;
    wna16_engine_options_init(&eo);
    eo.tokenizer = tok;
    eo.max_num_seqs = 1;
    eo.max_num_batched_tokens = (int64_t)n_prompt; /* the prompt in one pass */
    eo.kv_cache_blocks = (n_prompt + (size_t)o.max_tokens + WNA16_KV_BLOCK_SIZE - 1) /
                         WNA16_KV_BLOCK_SIZE;
    eo.enable_prefix_caching = false;
    wna16_engine *e = NULL;
    WNA16_TRY(wna16_engine_create(ctx, m, &eo, &e));
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = o.max_tokens;
    p.sampler = o.sampler;
    p.stop = o.stop;
    p.n_stop = o.n_stop;
    gen_run g = {.res = res, .o = &o, .t0 = wna16_now()};
    g.n_eos = wna16_model_eos(m, &g.eos_ids);
    g.ids = wna16_malloc(((size_t)o.max_tokens + 1) * sizeof *g.ids);
    wna16_prompt pr = {.ids = prompt, .n_ids = n_prompt};
    wna16_status s = g.ids ? WNA16_OK : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "generate");
    res->stop_reason = "length";
    if (s == WNA16_OK) s = wna16_engine_add_request(ctx, e, "generate", &pr, &p, NULL, NULL);
    if (s == WNA16_OK) s = run(ctx, e, &g);
    wna16_engine_free(e);
    double t_end = wna16_now(), t_first = g.t_first ? g.t_first : t_end;
    if (s != WNA16_OK) {
        wna16_free(g.ids);
        wna16_buf_free(&g.text);
        memset(res, 0, sizeof *res);
        return s;
    }
    res->ids = g.ids;
    res->generated = g.n_ids;
    res->prompt_tokens = (int64_t)n_prompt;
    res->prefill_seconds = t_first - g.t0;
    res->decode_seconds = t_end - t_first;
    res->text = g.text.data ? g.text.data : wna16_strdup("");
    return WNA16_OK;
}

void wna16_generate_result_free(wna16_generate_result *r) {
    if (!r) return;
    wna16_free(r->ids);
    wna16_free(r->text);
    memset(r, 0, sizeof *r);
}
