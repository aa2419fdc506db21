/* Sampling: repetition penalty, temperature, top-k, top-p, min-p, seeded. */
#include "core/common.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64: small, fast, and the same sequence on every platform. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

typedef struct cand {
    float logit;
    int32_t id;
} cand;

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id; /* ties: lowest id first, deterministic */
}

static int32_t argmax(const float *logits, int64_t vocab) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

static void penalize(float *logits, int64_t vocab, const int32_t *hist, size_t n, float penalty) {
    if (penalty == 1.0f || penalty <= 0.0f) return;
    for (size_t i = 0; i < n; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= vocab) continue;
        /* as transformers: divide positive logits, multiply negative ones (once per id) */
        float *l = &logits[id];
        if (isnan(*l)) continue;
        *l = *l > 0 ? *l / penalty : *l * penalty;
    }
}

int32_t wna16_sample(const wna16_sampler_options *o, float *logits, int64_t vocab,
                     const int32_t *history, size_t n_history, uint64_t *rng) {
    if (o->repetition_penalty != 1.0f && o->repetition_penalty > 0.0f) {
        /* each distinct id once */
        uint8_t *seen = calloc((size_t)vocab, 1);
        for (size_t i = 0; seen && i < n_history; i++) {
            int32_t id = history[i];
            if (id < 0 || id >= vocab || seen[id]) continue;
            seen[id] = 1;
            penalize(logits, vocab, &id, 1, o->repetition_penalty);
        }
        free(seen);
    }
    if (o->temperature <= 0.0f) return argmax(logits, vocab);
    int64_t k = o->top_k > 0 && o->top_k < vocab ? o->top_k : vocab;
    cand *c = malloc((size_t)vocab * sizeof *c);
    if (!c) return argmax(logits, vocab);
    for (int64_t i = 0; i < vocab; i++) c[i] = (cand){logits[i] / o->temperature, (int32_t)i};
    qsort(c, (size_t)vocab, sizeof *c, by_logit_desc);
    double sum = 0;
    double *p = malloc((size_t)k * sizeof *p);
    if (!p) {
        int32_t id = c[0].id;
        free(c);
        return id;
    }
    for (int64_t i = 0; i < k; i++) sum += p[i] = exp((double)(c[i].logit - c[0].logit));
    int64_t keep = k;
    if (o->top_p > 0.0f && o->top_p < 1.0f) {
        double acc = 0;
        for (int64_t i = 0; i < k; i++) {
            acc += p[i] / sum;
            if (acc >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (o->min_p > 0.0f)
        for (int64_t i = 1; i < keep; i++)
            if (p[i] < o->min_p * p[0]) {
                keep = i;
                break;
            }
    double total = 0;
    for (int64_t i = 0; i < keep; i++) total += p[i];
    double r = next_unit(rng) * total;
    int32_t id = c[keep - 1].id;
    for (int64_t i = 0; i < keep; i++) {
        r -= p[i];
        if (r < 0) {
            id = c[i].id;
            break;
        }
    }
    free(p);
    free(c);
    return id;
}
