/* A request's penalties from running tables, so a step costs the distinct
 * tokens a request has seen, never every token so far: the generated
 * tokens' counts (presence and frequency penalties, OpenAI's and vLLM's
 * definition) and the distinct ids of the prompt and the output (the
 * repetition penalty, as transformers and vLLM apply it). */
#include "engine/engine_internal.h"

#include <math.h>
#include <string.h>

static uint32_t slot_of(const token_counts *c, int32_t id) {
    uint32_t h = (uint32_t)id * 2654435761u, mask = c->cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask)
        if (c->ids[i] == id || c->ids[i] < 0) return i;
}

static bool counts_grow(token_counts *c) {
    uint32_t cap = c->cap ? c->cap * 2 : 64;
    token_counts n = {wna16_malloc(cap * sizeof(int32_t)), wna16_calloc(cap, sizeof(int32_t)),
                      cap, c->n};
    if (!n.ids || !n.counts) {
        wna16_free(n.ids);
        wna16_free(n.counts);
        return false;
    }
    memset(n.ids, 0xff, cap * sizeof(int32_t));
    for (uint32_t i = 0; i < c->cap; i++)
        if (c->ids[i] >= 0) {
            uint32_t s = slot_of(&n, c->ids[i]);
            n.ids[s] = c->ids[i];
            n.counts[s] = c->counts[i];
        }
    wna16_free(c->ids);
    wna16_free(c->counts);
    *c = n;
    return true;
}

bool engine_counts_add(token_counts *c, int32_t id) {
    if ((c->n + 1) * 2 > c->cap && !counts_grow(c)) return false;
    uint32_t s = slot_of(c, id);
    if (c->ids[s] < 0) c->ids[s] = id, c->n++;
    c->counts[s]++;
    return true;
}

void engine_counts_free(token_counts *c) {
    wna16_free(c->ids);
    wna16_free(c->counts);
    memset(c, 0, sizeof *c);
}

static bool repetition_on(const wna16_sampling_params *p) {
    float rp = p->sampler.repetition_penalty;
    return rp != 1.0f && rp > 0.0f;
}

wna16_status engine_penalties_init(wna16_diag *d, engine_request *r) {
    if (!repetition_on(&r->params)) return WNA16_OK;
    for (int64_t i = 0; i < r->n_toks; i++)
        if (!engine_counts_add(&r->seen, r->toks[i]))
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "repetition penalty");
    return WNA16_OK;
}

bool engine_penalties_add(engine_request *r, int32_t id) {
    return engine_counts_add(&r->counts, id) &&
           (!repetition_on(&r->params) || engine_counts_add(&r->seen, id));
}

/* logit -= frequency * count + presence * [count > 0]; then each id seen
 * once: a positive logit divided by the repetition penalty, a negative one
 * multiplied (wna16_sample's own rule, so the tokens are the same). */
void engine_apply_penalties(const engine_request *r, float *logits, int64_t V) {
    float pres = r->params.presence_penalty, freq = r->params.frequency_penalty;
    const token_counts *c = &r->counts;
    for (uint32_t i = 0; (pres != 0 || freq != 0) && i < c->cap; i++)
        if (c->ids[i] >= 0 && c->ids[i] < V) logits[c->ids[i]] -= freq * (float)c->counts[i] + pres;
    if (!repetition_on(&r->params)) return;
    float rp = r->params.sampler.repetition_penalty;
    const token_counts *s = &r->seen;
    for (uint32_t i = 0; i < s->cap; i++) {
        int32_t id = s->ids[i];
        if (id < 0 || id >= V || isnan(logits[id])) continue;
        logits[id] = logits[id] > 0 ? logits[id] / rp : logits[id] * rp;
    }
}
