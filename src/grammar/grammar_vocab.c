/* The vocabulary as byte strings and a trie over them (grammar.h).
 *
 * The trie is stored in depth-first order: node i's subtree is nodes
 * [i, next[i]), and its tokens, sorted by their bytes, are
 * sorted[tok[i] .. sub_end[i]), the ntok[i] ending exactly at i first. A
 * mask walk is then one forward pass that skips a dead subtree in one jump. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_vocab.h"
#include "tokenizer/tok_bytes.h"

static const uint8_t *tok_bytes_of(const grammar_vocab *v, int32_t id, size_t *len) {
    *len = v->tok_len[id];
    return v->bytes + v->tok_off[id];
}

static const grammar_vocab *sort_vocab; /* qsort has no context argument in C11 */

static int cmp_tokens(const void *a, const void *b) {
    size_t la, lb;
    const uint8_t *x = tok_bytes_of(sort_vocab, *(const int32_t *)a, &la);
    const uint8_t *y = tok_bytes_of(sort_vocab, *(const int32_t *)b, &lb);
    int c = memcmp(x, y, la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

static wna16_status v_oom(wna16_diag *d) {
    return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar vocabulary");
}

static wna16_status build_trie(wna16_diag *d, grammar_vocab *v) {
    size_t n = 0;
    for (size_t i = 0; i < v->n_logits; i++) n += v->tok_len[i] > 0;
    v->sorted = wna16_malloc((n ? n : 1) * sizeof *v->sorted);
    if (!v->sorted) return v_oom(d);
    n = 0;
    for (size_t i = 0; i < v->n_logits; i++)
        if (v->tok_len[i]) v->sorted[n++] = (int32_t)i;
    v->n_sorted = n;
    /* qsort without a context: vocabularies are built once, under a lock */
    static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&sort_lock);
    sort_vocab = v;
    if (n > 1) qsort(v->sorted, n, sizeof *v->sorted, cmp_tokens);
    pthread_mutex_unlock(&sort_lock);

    size_t cap = 1024;
    v->nodes = wna16_malloc(cap * sizeof *v->nodes);
    uint32_t *path = wna16_malloc((v->max_len + 1) * sizeof *path);
    if (!v->nodes || !path) {
        wna16_free(path);
        return v_oom(d);
    }
    v->nodes[0] = (grammar_trie_node){.tok = 0};
    v->n_nodes = 1;
    path[0] = 0;
    size_t depth = 0; /* nodes open on the path: path[0 .. depth] */
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    for (size_t k = 0; k <= n; k++) {
        size_t len = 0, lcp = 0;
        const uint8_t *b = k < n ? tok_bytes_of(v, v->sorted[k], &len) : NULL;
        if (b)
            while (lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) { /* close nodes off the new path */
            grammar_trie_node *c = &v->nodes[path[depth--]];
            c->next = (uint32_t)v->n_nodes;
            c->sub_end = (uint32_t)k;
        }
        if (!b) break;
        for (size_t i = lcp; i < len; i++) {
            if (v->n_nodes == cap) {
                grammar_trie_node *nn = wna16_realloc(v->nodes, 2 * cap * sizeof *nn);
                if (!nn) {
                    wna16_free(path);
                    return v_oom(d);
                }
                v->nodes = nn;
                cap *= 2;
            }
            v->nodes[v->n_nodes] = (grammar_trie_node){
                .tok = (uint32_t)k, .depth = (uint16_t)(i + 1), .byte = b[i]};
            path[++depth] = (uint32_t)v->n_nodes++;
        }
        grammar_trie_node *end = &v->nodes[path[len]];
        if (end->ntok == UINT8_MAX) {
            wna16_free(path);
            return wna16_fail(d, WNA16_ERR_LIMIT, "more than 255 tokens with the same bytes");
        }
        end->ntok++;
        prev = b;
        prev_len = len;
    }
    v->nodes[0].next = (uint32_t)v->n_nodes;
    v->nodes[0].sub_end = (uint32_t)n;
    wna16_free(path);
    return WNA16_OK;
}

static wna16_status set_stops(wna16_diag *d, grammar_vocab *v, const int32_t *stops, size_t n) {
    v->is_stop = wna16_calloc(v->n_logits ? v->n_logits : 1, 1);
    v->stops = wna16_malloc((n ? n : 1) * sizeof *v->stops);
    if (!v->is_stop || !v->stops) return v_oom(d);
    for (size_t i = 0; i < n; i++) {
        if (stops[i] < 0 || (size_t)stops[i] >= v->n_logits)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "stop token id %d is outside the %zu logits", (int)stops[i],
                              v->n_logits);
        if (!v->is_stop[stops[i]]) v->stops[v->n_stops++] = stops[i];
        v->is_stop[stops[i]] = 1;
    }
    return WNA16_OK;
}

static wna16_status vocab_alloc(wna16_diag *d, size_t n_logits, size_t n_bytes, grammar_vocab **out) {
    *out = NULL;
    if (!n_logits || n_logits > (1u << 24))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "vocabulary of %zu logits (want 1 .. 16M)", n_logits);
    grammar_vocab *v = wna16_calloc(1, sizeof *v);
    if (!v) return v_oom(d);
    v->n_logits = n_logits;
    v->tok_off = wna16_calloc(n_logits, sizeof *v->tok_off);
    v->tok_len = wna16_calloc(n_logits, sizeof *v->tok_len);
    v->bytes = wna16_malloc(n_bytes ? n_bytes : 1);
    if (!v->tok_off || !v->tok_len || !v->bytes) {
        grammar_vocab_free(v);
        return v_oom(d);
    }
    *out = v;
    return WNA16_OK;
}

/* Adds token id's bytes (tokens longer than a trie depth holds are left out). */
static void vocab_put(grammar_vocab *v, size_t *used, int32_t id, const uint8_t *b, size_t len) {
    if (!len || len > UINT16_MAX) return;
    if (len) memcpy(v->bytes + *used, b, len);
    v->tok_off[id] = (uint32_t)*used;
    v->tok_len[id] = (uint32_t)len;
    *used += len;
    if (len > v->max_len) v->max_len = len;
}

static wna16_status vocab_finish(wna16_diag *d, grammar_vocab *v, const int32_t *stops, size_t n) {
    wna16_status st = set_stops(d, v, stops, n);
    if (!st) {
        /* a stop token is only ever the end, never text */
        for (size_t i = 0; i < v->n_stops; i++) v->tok_len[v->stops[i]] = 0;
        st = build_trie(d, v);
    }
    return st;
}

wna16_status grammar_vocab_from_bytes(wna16_diag *d, const char *const *tokens,
                                      const size_t *lens, size_t n_tokens, size_t n_logits,
                                      const int32_t *stop_ids, size_t n_stops,
                                      grammar_vocab **out) {
    if (n_tokens > n_logits)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "%zu tokens but only %zu logits", n_tokens,
                          n_logits);
    size_t total = 0;
    for (size_t i = 0; i < n_tokens; i++) total += tokens[i] ? lens[i] : 0;
    grammar_vocab *v;
    WNA16_TRY(vocab_alloc(d, n_logits, total, &v));
    size_t used = 0;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i]) vocab_put(v, &used, (int32_t)i, (const uint8_t *)tokens[i], lens[i]);
    wna16_status st = vocab_finish(d, v, stop_ids, n_stops);
    if (st) {
        grammar_vocab_free(v);
        return st;
    }
    *out = v;
    return WNA16_OK;
}

wna16_status grammar_vocab_create(wna16_diag *d, const wna16_tokenizer *tok, size_t n_logits,
                                  const int32_t *stop_ids, size_t n_stops, unsigned flags,
                                  grammar_vocab **out) {
    size_t n_ids = tok_n_ids(tok);
    if (!n_logits) n_logits = n_ids;
    size_t total = 0, len;
    unsigned kind;
    for (size_t i = 0; i < n_ids && i < n_logits; i++)
        if (tok_token_bytes(tok, (int32_t)i, &len, &kind)) total += len;
    grammar_vocab *v;
    WNA16_TRY(vocab_alloc(d, n_logits, total, &v));
    size_t used = 0;
    for (size_t i = 0; i < n_ids && i < n_logits; i++) {
        const uint8_t *b = tok_token_bytes(tok, (int32_t)i, &len, &kind);
        if (!b || (kind & TOK_KIND_SPECIAL)) continue;
        if ((kind & TOK_KIND_ADDED) && !(flags & GRAMMAR_VOCAB_ADDED_AS_TEXT)) continue;
        vocab_put(v, &used, (int32_t)i, b, len);
    }
    wna16_status st = vocab_finish(d, v, stop_ids, n_stops);
    if (st) {
        grammar_vocab_free(v);
        return st;
    }
    *out = v;
    return WNA16_OK;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    wna16_free(v->tok_off);
    wna16_free(v->tok_len);
    wna16_free(v->bytes);
    wna16_free(v->is_stop);
    wna16_free(v->stops);
    wna16_free(v->sorted);
    wna16_free(v->nodes);
    wna16_free(v);
}

size_t grammar_vocab_n_logits(const grammar_vocab *v) { return v->n_logits; }

const char *grammar_vocab_token(const grammar_vocab *v, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || (size_t)id >= v->n_logits || !v->tok_len[id]) return NULL;
    return (const char *)tok_bytes_of(v, id, len);
}

bool grammar_vocab_is_stop(const grammar_vocab *v, int32_t id) {
    return id >= 0 && (size_t)id < v->n_logits && v->is_stop[id];
}

size_t grammar_vocab_trie_nodes(const grammar_vocab *v) { return v->n_nodes; }

size_t grammar_mask_words(const grammar_vocab *v) { return (v->n_logits + 63) / 64; }
