/* Sampling: repetition penalty, temperature, top-k, top-p, min-p, seeded. */
#include "core/common.h"

#include <math.h>
#include <stdio.h>
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

/* Moves the k first of c[0..n) in by_logit_desc order to c[0..k)
 * (quickselect; their order among themselves is unspecified). */
static void select_top(cand *c, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        cand pivot = c[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (by_logit_desc(&c[i], &pivot) < 0) i++;
            while (by_logit_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* The largest logit (lowest id on ties); -1 when no logit is a number above -inf. */
static int32_t argmax(const float *logits, int64_t vocab) {
    int64_t best = -1;
    for (int64_t i = 0; i < vocab; i++)
        if (logits[i] > -INFINITY && (best < 0 || logits[i] > logits[best])) best = i;
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

/* The first thing wrong with the options, or NULL: every field is checked
 * so that NaN, negative or out-of-range values never reach the sampler
 * (NaN compares false everywhere and would silently pick token 0). */
/* A value as the message shows it: "nan" whatever the NaN's sign bit. */
static double shown(float v) { return isnan(v) ? (double)NAN : (double)v; }

static const char *sampler_problem(const wna16_sampler_options *o, char *why, size_t cap) {
    if (!o) return "NULL options";
    if (!isfinite(o->temperature) || o->temperature < 0)
        return snprintf(why, cap, "temperature %g: expected a finite number >= 0 (0 = greedy)",
                        shown(o->temperature)), why;
    if (!(o->top_p >= 0 && o->top_p <= 1))
        return snprintf(why, cap, "top_p %g: expected a number in (0, 1] (0 or 1 = off)",
                        shown(o->top_p)), why;
    if (!(o->min_p >= 0 && o->min_p <= 1))
        return snprintf(why, cap, "min_p %g: expected a number in [0, 1]", shown(o->min_p)), why;
    if (!isfinite(o->repetition_penalty) || o->repetition_penalty < 0)
        return snprintf(why, cap, "repetition_penalty %g: expected a finite number > 0 (1 = off)",
                        shown(o->repetition_penalty)), why;
    if (o->top_k < -1)
        return snprintf(why, cap, "top_k %d: expected >= 1, or 0 or -1 for all tokens", o->top_k), why;
    return NULL;
}

wna16_status wna16_sampler_check(wna16_ctx *ctx, const wna16_sampler_options *options) {
    if (!options)
        return wna16_fail(wna16_ctx_diag(ctx), WNA16_ERR_INVALID_ARGUMENT, "sampling: NULL options");
    wna16_sampler_options o;
    WNA16_TRY(wna16_options_take(wna16_ctx_diag(ctx), "sampler options", &o, sizeof o, options));
    char why[160];
    const char *problem = sampler_problem(&o, why, sizeof why);
    if (!problem) return WNA16_OK;
    return wna16_fail(wna16_ctx_diag(ctx), WNA16_ERR_INVALID_ARGUMENT, "sampling: %s", problem);
}

/* NaN logits (a damaged model) never win: they rank as -inf. */
static float rank_value(float logit) { return isnan(logit) ? -INFINITY : logit; }

int32_t wna16_sample(const wna16_sampler_options *options, float *logits, int64_t vocab,
                     const int32_t *history, size_t n_history, uint64_t *rng) {
    char why[160];
    wna16_sampler_options taken;
    if (!options || wna16_options_take(NULL, "", &taken, sizeof taken, options) != WNA16_OK) return -1;
    const wna16_sampler_options *o = &taken;
    if (!logits || vocab <= 0 || !rng || sampler_problem(o, why, sizeof why)) return -1;
    if (o->repetition_penalty != 1.0f && o->repetition_penalty > 0.0f) {
        /* each distinct id once */
        uint8_t *seen = calloc((size_t)vocab, 1);
        if (!seen) return -1;
        for (size_t i = 0; history && i < n_history; i++) {
            int32_t id = history[i];
            if (id < 0 || id >= vocab || seen[id]) continue;
            seen[id] = 1;
            penalize(logits, vocab, &id, 1, o->repetition_penalty);
        }
        free(seen);
    }
    /* as vLLM: below 1e-5 the scaled logits would overflow, so it is greedy */
    if (o->temperature < 1e-5f) return argmax(logits, vocab);
    int64_t k = o->top_k > 0 && o->top_k < vocab ? o->top_k : vocab;
    bool top_p = o->top_p > 0.0f && o->top_p < 1.0f;
    cand *c = malloc((size_t)vocab * sizeof *c);
    double *p = malloc((size_t)k * sizeof *p);
    if (!c || !p) {
        free(c);
        free(p);
        return -1;
    }
    /* No sort of the whole vocabulary (a 152k-entry qsort per token cost
     * ~20 ms, more than a small model's forward): the best first, top-k
     * by selection, and a sort only of what top-p must walk in order. */
    int64_t best = 0;
    for (int64_t i = 0; i < vocab; i++) {
        c[i] = (cand){rank_value(logits[i]) / o->temperature, (int32_t)i};
        if (c[i].logit > c[best].logit) best = i;
    }
    if (c[best].logit == -INFINITY || c[best].logit == INFINITY) { /* nothing to weigh */
        int32_t id = c[best].logit == INFINITY ? c[best].id : -1;
        free(p);
        free(c);
        return id;
    }
    float mx = c[best].logit;
    int32_t id = c[best].id;
    if (k < vocab) select_top(c, vocab, k);
    if (top_p) qsort(c, (size_t)k, sizeof *c, by_logit_desc);
    double sum = 0;
    for (int64_t i = 0; i < k; i++) sum += p[i] = exp((double)(c[i].logit - mx));
    int64_t keep = k;
    if (top_p) {
        double acc = 0;
        for (int64_t i = 0; i < k; i++) {
            acc += p[i] / sum;
            if (acc >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    /* min-p: the best has weight 1; drop what weighs under min_p of it */
    if (o->min_p > 0.0f)
        for (int64_t i = 0; i < keep; i++)
            if (p[i] < o->min_p) p[i] = 0;
    double total = 0;
    for (int64_t i = 0; i < keep; i++) total += p[i];
    double r = next_unit(rng) * total;
    for (int64_t i = 0; i < keep; i++) {
        if (p[i] <= 0) continue;
        id = c[i].id;
        r -= p[i];
        if (r < 0) break;
    }
    free(p);
    free(c);
    return id;
}
