/* Log-probabilities of a row of logits: the log-sum-exp in double, and the
 * top k by a heap of k entries (never k passes over the vocabulary). */
#include "generate/generate.h"

#include <math.h>

/* a ranks before b: the larger logit, ties to the lower id */
static bool before(const float *l, int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* heap[0] is the entry that ranks last (the first to go) */
static void sift_down(const float *l, int32_t *heap, int n, int i) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(l, heap[c], heap[c + 1])) c++;
        if (!before(l, heap[i], heap[c])) return;
        int32_t t = heap[i];
        heap[i] = heap[c];
        heap[c] = t;
        i = c;
    }
}

static void sift_up(const float *l, int32_t *heap, int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!before(l, heap[p], heap[i])) return;
        int32_t t = heap[i];
        heap[i] = heap[p];
        heap[p] = t;
        i = p;
    }
}

void wna16_logprob_row(const float *logits, int64_t V, int32_t id, int k,
                       wna16_token_logprob *out) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int64_t i = 0; i < V; i++)
        if (logits[i] == logits[i]) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    out->id = id;
    out->logprob = id >= 0 && id < V ? (float)((double)logits[id] - lse) : -INFINITY;
    if (k > 20) k = 20;
    if (k < 0) k = 0;
    int32_t heap[20];
    int n = 0;
    for (int64_t i = 0; i < V && k > 0; i++) {
        if (logits[i] != logits[i]) continue;
        if (n < k) {
            heap[n] = (int32_t)i;
            sift_up(logits, heap, n++);
        } else if (before(logits, (int32_t)i, heap[0])) {
            heap[0] = (int32_t)i;
            sift_down(logits, heap, n, 0);
        }
    }
    out->n_top = n;
    for (int j = n - 1; j >= 0; j--) { /* pop the last-ranked into the back */
        out->top_ids[j] = heap[0];
        out->top_logprobs[j] = (float)((double)logits[heap[0]] - lse);
        heap[0] = heap[j];
        sift_down(logits, heap, j, 0);
    }
}
