/* A request's life in the engine: its copy of the parameters, sampling
 * (penalties from running tables: penalties.c; the sampler, log-probabilities), the
 * output processor's text, the end, and the outputs of each step. */
#include "engine/engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* -------------------------------------------------------------- request */

static wna16_status copy_rules(wna16_diag *d, wna16_engine *e, engine_request *r,
                               const wna16_sampling_params *p) {
    wna16_output_rules *u = &r->rules;
    u->eos = e->eos;
    u->n_eos = e->n_eos;
    u->ignore_eos = p->ignore_eos;
    u->include_stop_str = p->include_stop_str_in_output;
    u->skip_special = p->skip_special_tokens;
    u->min_tokens = p->min_tokens;
    u->max_tokens = r->params.max_tokens;
    if (p->n_stop) {
        u->stop = wna16_calloc(p->n_stop, sizeof *u->stop);
        if (!u->stop) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "stop strings");
        for (size_t i = 0; i < p->n_stop; i++) {
            if (!(u->stop[i] = wna16_strdup(p->stop[i])))
                return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "stop strings");
            u->n_stop++;
        }
    }
    if (p->n_stop_token_ids) {
        int32_t *ids = wna16_malloc(p->n_stop_token_ids * sizeof *ids);
        if (!ids) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "stop token ids");
        memcpy(ids, p->stop_token_ids, p->n_stop_token_ids * sizeof *ids);
        u->stop_ids = ids;
        u->n_stop_ids = p->n_stop_token_ids;
    }
    r->params.stop = (const char *const *)u->stop;
    r->params.stop_token_ids = u->stop_ids;
    return WNA16_OK;
}

wna16_status engine_request_new(wna16_diag *d, wna16_engine *e, const char *id,
                                const int32_t *prompt, int64_t n_prompt,
                                const wna16_sampling_params *params, wna16_output_fn on_output,
                                void *user, engine_request **out) {
    *out = NULL;
    engine_request *r = wna16_calloc(1, sizeof *r);
    if (!r) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "request");
    r->seq = -1;
    r->user = user;
    r->on_output = on_output;
    r->params = *params;
    r->n_prompt = n_prompt;
    r->prompt_lp_next = 1; /* nothing predicts the first token */
    r->rng = params->sampler.seed;
    r->id = wna16_strdup(id);
    r->cap_toks = n_prompt + 1;
    r->toks = wna16_malloc((size_t)r->cap_toks * sizeof *r->toks);
    wna16_status s = r->id && r->toks ? copy_rules(d, e, r, params)
                                      : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "request");
    if (s == WNA16_OK) s = engine_structured_setup(d, e, r, params);
    if (s == WNA16_OK) {
        memcpy(r->toks, prompt, (size_t)n_prompt * sizeof *r->toks);
        r->n_toks = n_prompt;
        s = engine_penalties_init(d, r);
    }
    if (s == WNA16_OK) {
        s = wna16_output_init(e->ctx, &r->out, e->tok, &r->rules);
        if (s != WNA16_OK) s = wna16_fail(d, s, "%s", wna16_ctx_error(e->ctx));
    }
    if (s != WNA16_OK) {
        engine_request_free(e, r);
        return s;
    }
    *out = r;
    return WNA16_OK;
}

void engine_request_free(wna16_engine *e, engine_request *r) {
    if (!r) return;
    engine_structured_release(e, r);
    for (size_t i = 0; i < r->rules.n_stop; i++) wna16_free(r->rules.stop[i]);
    wna16_free(r->rules.stop);
    wna16_free((void *)r->rules.stop_ids);
    wna16_output_free(&r->out);
    engine_counts_free(&r->counts);
    engine_counts_free(&r->seen);
    wna16_free(r->id);
    wna16_free(r->toks);
    wna16_free(r->step_ids);
    wna16_free(r->step_lps);
    wna16_free(r->step_plps);
    wna16_buf_free(&r->step_text);
    wna16_free(r);
}

static bool fit(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 4;
    while (c < need) c *= 2;
    void *q = wna16_realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

void engine_touch(wna16_engine *e, engine_request *r) {
    if (r->touched) return;
    if (e->n_touched == e->cap_touched) {
        size_t cap = e->cap_touched;
        void *t = e->touched, *o = e->outs;
        if (!fit(&t, &cap, e->n_touched + 1, sizeof *e->touched)) return;
        e->touched = t;
        cap = e->cap_touched;
        if (!fit(&o, &cap, e->n_touched + 1, sizeof *e->outs)) return;
        e->outs = o;
        e->cap_touched = cap;
    }
    r->touched = true;
    e->touched[e->n_touched++] = r;
}

void engine_request_finish(wna16_engine *e, engine_request *r, wna16_finish_reason reason,
                           const char *error) {
    if (r->seq >= 0) {
        wna16_kv_cache_seq_drop(e->cache, r->seq);
        e->free_seqs[e->n_free_seqs++] = r->seq;
        r->seq = -1;
    }
    if (!r->out.finish) r->out.finish = reason;
    r->error = error;
    engine_touch(e, r);
    pthread_mutex_lock(&e->mu);
    e->met.requests_finished[r->out.finish]++;
    pthread_mutex_unlock(&e->mu);
}

void engine_request_score_prompt(wna16_engine *e, engine_request *r, const float *logits,
                                 int64_t pos) {
    int64_t t = pos + 1;
    if (t < r->prompt_lp_next || t >= r->n_prompt) return;
    if (!fit((void **)&r->step_plps, &r->cap_step_plps, r->n_step_plps + 1, sizeof *r->step_plps))
        return;
    if (!r->n_step_plps) r->step_plp_start = t;
    wna16_logprob_row(logits, e->vocab, r->toks[t], r->params.prompt_logprobs,
                      &r->step_plps[r->n_step_plps++]);
    r->prompt_lp_next = t + 1;
    engine_touch(e, r);
}

void engine_request_sample(wna16_engine *e, engine_request *r, float *logits) {
    if (r->params.max_tokens == 0) { /* scoring the prompt only (echo) */
        r->out.finish = WNA16_FINISH_LENGTH;
        engine_touch(e, r);
        return;
    }
    bool want_lp = r->params.logprobs >= 0;
    if (want_lp) memcpy(e->scratch, logits, (size_t)e->vocab * sizeof *logits);
    for (size_t i = 0; i < e->n_masked; i++) logits[e->masked[i]] = -INFINITY;
    engine_apply_penalties(r, logits, e->vocab);
    const char *why = engine_structured_mask(e, r, logits);
    wna16_sampler_options so = r->params.sampler;
    so.repetition_penalty = 1.0f; /* applied above from the running table */
    int32_t id = why ? -1 : wna16_sample(&so, logits, e->vocab, NULL, 0, &r->rng);
    engine_touch(e, r);
    bool format_done = false;
    if (id >= 0) why = engine_structured_accept(r, id, &format_done);
    if (why) {
        r->out.finish = WNA16_FINISH_ERROR;
        r->error = why;
        return;
    }
    if (id < 0 && r->matcher) {
        r->out.finish = WNA16_FINISH_ERROR;
        r->error = "sampling failed: no token the output format allows has a finite logit "
                   "(a logit_bias of -100 on every one of them?)";
        return;
    }
    if (id < 0 ||
        !fit((void **)&r->toks, (size_t *)&r->cap_toks, (size_t)r->n_toks + 1, sizeof *r->toks) ||
        !fit((void **)&r->step_ids, &r->cap_step, r->n_step + 1, sizeof *r->step_ids) ||
        (want_lp && !fit((void **)&r->step_lps, &r->cap_step_lps, r->n_step + 1, sizeof *r->step_lps))) {
        r->out.finish = WNA16_FINISH_ERROR;
        r->error = id < 0 ? "sampling failed: no logit is a number (the weights may be damaged)"
                          : "out of memory";
        return;
    }
    if (want_lp) wna16_logprob_row(e->scratch, e->vocab, id, r->params.logprobs, &r->step_lps[r->n_step]);
    r->step_ids[r->n_step++] = id;
    r->toks[r->n_toks++] = id;
    if (!engine_penalties_add(r, id)) {
        r->out.finish = WNA16_FINISH_ERROR;
        r->error = "out of memory";
        return;
    }
    pthread_mutex_lock(&e->mu);
    e->met.generation_tokens++;
    pthread_mutex_unlock(&e->mu);
    if (wna16_output_push(e->ctx, &r->out, id, e->context - r->n_toks) != WNA16_OK) {
        r->out.finish = WNA16_FINISH_ERROR;
        r->error = "detokenization failed";
    } else if (format_done && !r->out.finish) {
        /* the format is complete: nothing but its end could follow */
        wna16_output_end(e->ctx, &r->out, grammar_vocab_is_stop(e->gvocab, id) ? id : -1);
    }
}

/* ---------------------------------------------------------------- outputs */

static void fill_output(engine_request *r, wna16_request_output *o) {
    const char *t;
    size_t len;
    wna16_output_take(&r->out, &t, &len);
    r->step_text.len = 0;
    wna16_buf_put(&r->step_text, t, len);
    bool want_lp = r->params.logprobs >= 0;
    *o = (wna16_request_output){
        .request_id = r->id,
        .user = r->user,
        .token_ids = r->step_ids,
        .n_tokens = r->n_step,
        .text = r->step_text.data ? r->step_text.data : "",
        .text_len = r->step_text.len,
        .logprobs = want_lp && r->n_step ? r->step_lps : NULL,
        .prompt_logprobs = r->n_step_plps ? r->step_plps : NULL,
        .n_prompt_logprobs = r->n_step_plps,
        .prompt_logprobs_start = r->step_plp_start,
        .finished = r->out.finish != WNA16_FINISH_NONE,
        .finish_reason = r->out.finish,
        .stop_str = r->out.stop_str,
        .stop_token = r->out.stop_token,
        .error = r->error ? r->error : "",
        .prompt_tokens = r->n_prompt,
        .completion_tokens = r->out.generated,
        .cached_tokens = r->cached_tokens,
    };
}

void engine_emit(wna16_engine *e) {
    e->n_outs = 0;
    for (size_t i = 0; i < e->n_touched; i++) {
        engine_request *r = e->touched[i];
        wna16_request_output *o = &e->outs[e->n_outs++];
        fill_output(r, o);
        if (r->on_output) r->on_output(r->user, o);
    }
}
