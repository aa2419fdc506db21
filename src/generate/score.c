/* Scoring a given sequence: the log-probability of every token under the
 * model (perplexity, echo with logprobs). The sequence runs through the
 * model's own cache in chunks whose every row's logits are kept, then each
 * row goes through a log-softmax accumulated in double. */
#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows per chunk: bounds the logits buffer (rows * vocab floats). */
#define SCORE_CHUNK 128

/* log p(target) and the top_k entries of one row of logits. */
static void score_row(const float *logits, int64_t V, int32_t target, float *lp, int top_k,
                      int32_t *top_ids, float *top_lp) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int64_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    if (lp) *lp = (float)((double)logits[target] - lse);
    for (int k = 0; k < top_k; k++) {
        int64_t best = -1;
        for (int64_t i = 0; i < V; i++) {
            bool taken = false;
            for (int j = 0; j < k && !taken; j++) taken = top_ids[j] == i;
            if (!taken && logits[i] == logits[i] && (best < 0 || logits[i] > logits[best]))
                best = i;
        }
        top_ids[k] = (int32_t)best;
        top_lp[k] = best < 0 ? -INFINITY : (float)((double)logits[best] - lse);
    }
}

wna16_status wna16_model_logprobs(wna16_ctx *ctx, wna16_model *m, const int32_t *ids, int64_t n,
                                  float *logprobs, int top_k, int32_t *top_ids,
                                  float *top_logprobs) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || !ids || n < 1 || !logprobs || top_k < 0 || (top_k && (!top_ids || !top_logprobs)))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "logprobs: NULL argument, no tokens, or top_k < 0 / top_k without its "
                          "arrays");
    wna16_diag_clear(d);
    int64_t V = m->cfg.vocab_size;
    if (top_k > V) top_k = (int)V;
    if (!m->rt)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "logprobs: this model was loaded without its own KV cache");
    if (n > m->context)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "logprobs: %lld tokens exceed the context of %lld; score shorter "
                          "windows (wna16 perplexity --ctx) or load with a longer context",
                          (long long)n, (long long)m->context);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return wna16_fail(d, WNA16_ERR_TOKEN_ID,
                              "token id %d at position %lld is outside the vocabulary [0, %lld)",
                              ids[i], (long long)i, (long long)V);
    int64_t chunk = n < SCORE_CHUNK ? n : SCORE_CHUNK;
    float *logits = wna16_malloc((size_t)(chunk * V) * sizeof *logits);
    int64_t *pos = wna16_malloc((size_t)chunk * sizeof *pos);
    int64_t *rows_out = wna16_malloc((size_t)chunk * sizeof *rows_out);
    int32_t *seq = wna16_calloc((size_t)chunk, sizeof *seq);
    wna16_status st = logits && pos && rows_out && seq
                          ? WNA16_OK
                          : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                                       "logprobs: %lld rows of %lld logits", (long long)chunk,
                                       (long long)V);
    wna16_model_reset(m);
    logprobs[0] = 0.0f;
    for (int k = 0; k < top_k; k++) top_ids[k] = -1, top_logprobs[k] = -INFINITY;
    wna16_kv_cache *c = m->rt->cache;
    for (int64_t at = 0; st == WNA16_OK && at < n - 1; at += chunk) {
        /* rows at..at+k-1 predict tokens at+1..at+k; the last token needs no row */
        int64_t k = n - 1 - at < chunk ? n - 1 - at : chunk;
        for (int64_t t = 0; t < k; t++) pos[t] = at + t, rows_out[t] = t;
        st = wna16_kv_cache_reserve(d, c, 0, at + k);
        wna16_rows rows = {.n = k, .ids = ids + at, .seq = seq, .pos = pos, .n_logits = k,
                           .logit_rows = rows_out, .logits = logits};
        if (st == WNA16_OK) st = wna16_exec_step(d, m, c, &rows);
        for (int64_t t = 0; st == WNA16_OK && t < k; t++) {
            int64_t p = at + t + 1;
            score_row(logits + t * V, V, ids[p], &logprobs[p], top_k,
                      top_k ? top_ids + p * top_k : NULL, top_k ? top_logprobs + p * top_k : NULL);
        }
        if (st == WNA16_OK) {
            wna16_progress(d, "score", (double)(at + k), (double)(n - 1));
            st = wna16_check_abort(d, "logprobs");
        }
    }
    if (st == WNA16_OK && n == 1) wna16_progress(d, "score", 0, 0);
    wna16_model_reset(m);
    wna16_free(logits);
    wna16_free(pos);
    wna16_free(rows_out);
    wna16_free(seq);
    return st;
}
