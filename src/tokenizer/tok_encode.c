/* Encoding: added tokens -> normalizer -> pre-tokenizer -> BPE, in the
 * order and with the semantics of Hugging Face `tokenizers`. */
#include "tokenizer/tok_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Words longer than this (bytes, after byte mapping) are not cached. */
#define CACHE_MAX_WORD 256
/* The cache is dropped and restarted when it holds this many words. */
#define CACHE_MAX_WORDS 200000

typedef struct bpe_sym {
    int32_t id, prev, next;
    bool alive;
} bpe_sym;

typedef struct bpe_merge {
    int32_t rank, pos, left, right, new_id;
} bpe_merge;

/* A match of a Split regex, or a gap between matches. */
typedef struct tok_span {
    size_t start, end;
    bool match;
} tok_span;

typedef struct enc {
    wna16_tokenizer *t;
    wna16_diag *d;
    int32_t *ids;
    size_t n, cap;
    wna16_buf work;    /* text of the gap being pre-tokenized */
    tok_pieces pa, pb; /* piece lists, swapped between pre-tokenizer steps */
    bpe_sym *syms;
    size_t syms_cap;
    bpe_merge *heap;
    size_t heap_n, heap_cap;
    char *mapped;
    size_t mapped_cap;
    tok_span *spans; /* matches and gaps of the piece being split */
    size_t nspans, spans_cap;
    wna16_buf scratch; /* a piece being rewritten before it joins work */
    bool parse_special;
    bool at_origin; /* the text being handled starts at offset 0 of the input */
} enc;

static wna16_status oom(enc *e) {
    return wna16_fail(e->d, WNA16_ERR_OUT_OF_MEMORY, "out of memory while encoding");
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = wna16_realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static wna16_status emit(enc *e, int32_t id) {
    if (!grow((void **)&e->ids, &e->cap, e->n + 1, sizeof *e->ids)) return oom(e);
    e->ids[e->n++] = id;
    return WNA16_OK;
}

/* ------------------------------------------------------------- BPE heap */

static bool merge_less(const bpe_merge *a, const bpe_merge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static bool heap_push(enc *e, bpe_merge m) {
    if (!grow((void **)&e->heap, &e->heap_cap, e->heap_n + 1, sizeof *e->heap)) return false;
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = m;
    return true;
}

static bpe_merge heap_pop(enc *e) {
    bpe_merge top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(&e->heap[c + 1], &e->heap[c])) c++;
        if (!merge_less(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

/* Queues the merge of the symbol at pos with its right neighbour, if any. */
static bool queue_pair(enc *e, int32_t pos) {
    if (pos < 0 || e->syms[pos].next < 0) return true;
    int32_t l = e->syms[pos].id, r = e->syms[e->syms[pos].next].id, rank, id;
    if (!tok_pairmap_get(&e->t->merges, l, r, &rank, &id)) return true;
    return heap_push(e, (bpe_merge){rank, pos, l, r, id});
}

/* ------------------------------------------------------------ BPE model */

static bool add_sym(enc *e, size_t *n, int32_t id) {
    if (!grow((void **)&e->syms, &e->syms_cap, *n + 1, sizeof *e->syms)) return false;
    e->syms[*n] = (bpe_sym){id, (int32_t)*n - 1, -1, true};
    if (*n) e->syms[*n - 1].next = (int32_t)*n;
    (*n)++;
    return true;
}

static int32_t char_to_id(const wna16_tokenizer *t, const char *s, size_t len) {
    uint32_t cp;
    wna16_utf8_decode((const uint8_t *)s, &cp);
    if (cp < 512) return t->char_id[cp];
    return tok_strmap_get(&t->vocab, s, len);
}

/* The initial symbols of a word: one per character, with HF's handling of
 * characters missing from the vocabulary (byte fallback, then unk). */
static bool initial_symbols(enc *e, const char *w, size_t len, size_t *n) {
    const wna16_tokenizer *t = e->t;
    bool pending_unk = false;
    for (size_t i = 0; i < len;) {
        size_t cl = wna16_utf8_valid_len((const uint8_t *)w + i, len - i);
        if (!cl) cl = 1; /* cannot happen: text was validated */
        int32_t id = char_to_id(t, w + i, cl);
        if (id >= 0) {
            if (pending_unk && !add_sym(e, n, t->unk_id)) return false;
            pending_unk = false;
            if (!add_sym(e, n, id)) return false;
        } else {
            bool fell_back = t->byte_fallback;
            for (size_t k = 0; fell_back && k < cl; k++)
                fell_back = t->byte_fallback_id[(uint8_t)w[i + k]] >= 0;
            for (size_t k = 0; fell_back && k < cl; k++)
                if (!add_sym(e, n, t->byte_fallback_id[(uint8_t)w[i + k]])) return false;
            if (!fell_back && t->unk_id >= 0) {
                if (pending_unk && !t->fuse_unk && !add_sym(e, n, t->unk_id)) return false;
                pending_unk = true;
            }
        }
        i += cl;
    }
    if (pending_unk && !add_sym(e, n, t->unk_id)) return false;
    return true;
}

/* Rank-priority merging with lazy invalidation: O(n log n) per word. */
static bool merge_all(enc *e, size_t n) {
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (!queue_pair(e, (int32_t)i)) return false;
    while (e->heap_n) {
        bpe_merge m = heap_pop(e);
        bpe_sym *s = &e->syms[m.pos];
        if (!s->alive || s->next < 0) continue;
        bpe_sym *r = &e->syms[s->next];
        if (s->id != m.left || r->id != m.right) continue; /* stale entry */
        s->id = m.new_id;
        r->alive = false;
        s->next = r->next;
        if (s->next >= 0) e->syms[s->next].prev = m.pos;
        if (!queue_pair(e, s->prev) || !queue_pair(e, m.pos)) return false;
    }
    return true;
}

static void cache_put(tok_cache *c, const char *w, size_t len, const int32_t *ids, size_t n) {
    if (len > CACHE_MAX_WORD) return;
    if (c->nents >= CACHE_MAX_WORDS) {
        tok_strmap_clear(&c->map);
        c->nents = c->pool_len = 0;
    }
    /* A failed allocation only costs speed: the cache is an optimisation. */
    if (!grow((void **)&c->pool, &c->pool_cap, c->pool_len + n, sizeof *c->pool)) return;
    if (!grow((void **)&c->ents, &c->ents_cap, c->nents + 1, sizeof *c->ents)) return;
    if (!tok_strmap_put(&c->map, w, len, (int32_t)c->nents, NULL)) return;
    if (n) memcpy(c->pool + c->pool_len, ids, n * sizeof *ids);
    c->ents[c->nents++] = (struct tok_cache_ent){(uint32_t)c->pool_len, (uint32_t)n};
    c->pool_len += n;
}

void tok_cache_free(tok_cache *c) {
    tok_strmap_free(&c->map);
    wna16_free(c->ents);
    wna16_free(c->pool);
    memset(c, 0, sizeof *c);
}

/* Maps raw bytes to the ByteLevel alphabet (each byte -> one code point). */
static bool byte_map(enc *e, const char *w, size_t len, size_t *out_len) {
    if (!grow((void **)&e->mapped, &e->mapped_cap, 2 * len + 1, 1)) return false;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += wna16_utf8_encode(tok_byte_to_cp[(uint8_t)w[i]], e->mapped + n);
    *out_len = n;
    return true;
}

/* Symbol positions are int32: bounds one pre-token (bytes). */
#define MAX_WORD_BYTES ((size_t)1 << 29)

static wna16_status bpe_word(enc *e, const char *w, size_t len) {
    wna16_tokenizer *t = e->t;
    if (len > MAX_WORD_BYTES)
        return wna16_fail(e->d, WNA16_ERR_LIMIT,
                          "tokenizer_encode: one pre-token is %zu bytes; at most %zu are "
                          "supported; split the input into smaller pieces",
                          len, MAX_WORD_BYTES);
    if (t->byte_level) {
        if (!byte_map(e, w, len, &len)) return oom(e);
        w = e->mapped;
    }
    int32_t hit = len <= CACHE_MAX_WORD ? tok_strmap_get(&t->cache.map, w, len) : -1;
    if (hit >= 0) {
        struct tok_cache_ent ce = t->cache.ents[hit];
        for (uint32_t i = 0; i < ce.n; i++) WNA16_TRY(emit(e, t->cache.pool[ce.off + i]));
        return WNA16_OK;
    }
    if (t->ignore_merges) {
        int32_t id = tok_strmap_get(&t->vocab, w, len);
        if (id >= 0) return emit(e, id);
    }
    size_t n = 0;
    if (!initial_symbols(e, w, len, &n) || !merge_all(e, n)) return oom(e);
    size_t first = e->n;
    for (int32_t i = n ? 0 : -1; i >= 0; i = e->syms[i].next) WNA16_TRY(emit(e, e->syms[i].id));
    /* e->ids is NULL when nothing was emitted yet: no pointer arithmetic on it */
    cache_put(&t->cache, w, len, e->n > first ? e->ids + first : NULL, e->n - first);
    return WNA16_OK;
}

/* -------------------------------------------------------- pre-tokenizer */

/* Finds every match of p in the piece and records matches and the gaps
 * between them as spans covering it (HF Pattern::find_matches). */
static wna16_status find_spans(enc *e, const tok_pre *p, const char *s, size_t n) {
    size_t pos = 0, prev = 0;
    e->nspans = 0;
    while (pos <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, p->md, NULL);
        /* The JIT's small default stack can run out on huge pieces; the
         * interpreter keeps its backtracking state on the heap. */
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, p->md,
                             NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0)
            return wna16_fail(e->d, WNA16_ERR_TOKENIZER_REGEX,
                              "%s: pre_tokenizer regex failed while matching (PCRE2 error %d); "
                              "the pattern may need too much backtracking",
                              e->t->path, rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
        size_t ms = ov[0], me = ov[1];
        if (!grow((void **)&e->spans, &e->spans_cap, e->nspans + 2, sizeof *e->spans))
            return oom(e);
        if (prev != ms) e->spans[e->nspans++] = (tok_span){prev, ms, false};
        e->spans[e->nspans++] = (tok_span){ms, me, true};
        prev = me;
        if (me > ms)
            pos = me;
        else if (me >= n)
            break;
        else { /* empty match: step over one character */
            size_t cl = wna16_utf8_valid_len((const uint8_t *)s + me, n - me);
            pos = me + (cl ? cl : 1);
        }
    }
    if (prev == n) return WNA16_OK;
    if (!grow((void **)&e->spans, &e->spans_cap, e->nspans + 1, sizeof *e->spans)) return oom(e);
    e->spans[e->nspans++] = (tok_span){prev, n, false};
    return WNA16_OK;
}

/* Turns the spans into pieces by the Split's behaviour, mirroring the folds
 * of HF SplitDelimiterBehavior, then drops empty pieces as HF does. */
static wna16_status apply_behavior(enc *e, const tok_pre *p, size_t base, tok_pieces *out) {
    size_t first_out = out->n, pending = SIZE_MAX; /* MergedWithNext: match awaiting its piece */
    for (size_t i = 0; i < e->nspans; i++) {
        bool m = e->spans[i].match != p->invert;
        bool prev_m = i > 0 && (e->spans[i - 1].match != p->invert);
        bool next_m = i + 1 < e->nspans && (e->spans[i + 1].match != p->invert);
        bool have = out->n > first_out, extend = false;
        size_t a = base + e->spans[i].start, b = base + e->spans[i].end;
        switch (p->behavior) {
        case SPLIT_ISOLATED:
            break;
        case SPLIT_REMOVED:
            if (m) continue;
            break;
        case SPLIT_MERGED_PREV:
            extend = m && !prev_m && have;
            break;
        case SPLIT_CONTIGUOUS:
            extend = m == prev_m && have;
            break;
        case SPLIT_MERGED_NEXT:
            if (m && i + 1 < e->nspans && !next_m) {
                pending = a;
                continue;
            }
            if (pending != SIZE_MAX) a = pending;
            pending = SIZE_MAX;
            break;
        }
        if (extend)
            out->v[out->n - 1].len = b - out->v[out->n - 1].off;
        else if (!tok_pieces_push(out, a, b - a))
            return oom(e);
    }
    size_t k = first_out;
    for (size_t i = first_out; i < out->n; i++)
        if (out->v[i].len) out->v[k++] = out->v[i];
    out->n = k;
    return WNA16_OK;
}

static wna16_status split_piece(enc *e, const tok_pre *p, tok_piece in, tok_pieces *out) {
    WNA16_TRY(find_spans(e, p, e->work.data + in.off, in.len));
    return apply_behavior(e, p, in.off, out);
}

/* ByteLevel's add_prefix_space: each piece not starting with a space gets
 * one (HF applies it to every piece present at that point). */
static wna16_status prefix_spaces(enc *e, tok_pieces *in) {
    for (size_t i = 0; i < in->n; i++) {
        tok_piece *p = &in->v[i];
        if (p->len && e->work.data[p->off] == ' ') continue;
        /* built aside: appending work to itself could move it mid-copy */
        e->scratch.len = 0;
        wna16_buf_put(&e->scratch, " ", 1);
        wna16_buf_put(&e->scratch, e->work.data + p->off, p->len);
        size_t off = e->work.len;
        if (e->scratch.failed) return oom(e);
        wna16_buf_put(&e->work, e->scratch.data, e->scratch.len);
        if (e->work.failed) return oom(e);
        *p = (tok_piece){off, p->len + 1};
    }
    return WNA16_OK;
}

/* Metaspace: spaces become the replacement, which also goes before each
 * piece that does not start with it (prepend_scheme always), or only
 * before the piece at the start of the input (first; HF checks that the
 * piece's original offset is 0, so text after an added token gets none). */
static wna16_status metaspace(enc *e, const tok_pre *p, tok_pieces *in) {
    for (size_t i = 0; i < in->n; i++) {
        tok_piece *q = &in->v[i];
        const char *s = e->work.data + q->off;
        bool starts =
            q->len && (s[0] == ' ' || (q->len >= p->rep_len && !memcmp(s, p->rep, p->rep_len)));
        bool prepend = !starts && (p->prepend == PREPEND_ALWAYS ||
                                   (p->prepend == PREPEND_FIRST && e->at_origin && q->off == 0));
        e->scratch.len = 0;
        if (prepend) wna16_buf_put(&e->scratch, p->rep, p->rep_len);
        size_t last = 0;
        for (size_t k = 0; k < q->len; k++) {
            if (s[k] != ' ') continue;
            wna16_buf_put(&e->scratch, s + last, k - last);
            wna16_buf_put(&e->scratch, p->rep, p->rep_len);
            last = k + 1;
        }
        wna16_buf_put(&e->scratch, s + last, q->len - last);
        if (e->scratch.failed) return oom(e);
        size_t off = e->work.len;
        wna16_buf_put(&e->work, e->scratch.data, e->scratch.len);
        if (e->work.failed) return oom(e);
        *q = (tok_piece){off, e->scratch.len};
    }
    return WNA16_OK;
}

static wna16_status pre_step(enc *e, const tok_pre *p) {
    if (p->kind == PRE_BYTELEVEL && p->add_prefix_space) WNA16_TRY(prefix_spaces(e, &e->pa));
    if (p->kind == PRE_METASPACE) WNA16_TRY(metaspace(e, p, &e->pa));
    if (!p->re) return WNA16_OK;
    e->pb.n = 0;
    for (size_t i = 0; i < e->pa.n; i++) WNA16_TRY(split_piece(e, p, e->pa.v[i], &e->pb));
    tok_pieces tmp = e->pa;
    e->pa = e->pb;
    e->pb = tmp;
    return WNA16_OK;
}

/* Pre-tokenizes normalized text and runs the model on every piece. */
static wna16_status encode_normalized(enc *e, const char *s, size_t n) {
    if (!n) return WNA16_OK;
    e->work.len = 0;
    wna16_buf_put(&e->work, s, n);
    e->pa.n = 0;
    if (e->work.failed || !tok_pieces_push(&e->pa, 0, n)) return oom(e);
    for (int i = 0; i < e->t->n_pres; i++) WNA16_TRY(pre_step(e, &e->t->pres[i]));
    for (size_t i = 0; i < e->pa.n; i++)
        if (e->pa.v[i].len) WNA16_TRY(bpe_word(e, e->work.data + e->pa.v[i].off, e->pa.v[i].len));
    return WNA16_OK;
}

/* ---------------------------------------------------------- added tokens */

/* Rust's char::is_whitespace (Unicode White_Space). */
static bool is_ws(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_word_char(uint32_t c) {
    if (c == '_') return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* Code point ending just before s[i]. */
static uint32_t cp_before(const char *s, size_t i, size_t *start) {
    size_t j = i - 1;
    while (j > 0 && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
    uint32_t cp;
    wna16_utf8_decode((const uint8_t *)s + j, &cp);
    if (start) *start = j;
    return cp;
}

static bool single_word_ok(const char *s, size_t n, size_t start, size_t stop) {
    uint32_t cp;
    if (start > 0 && is_word_char(cp_before(s, start, NULL))) return false;
    if (stop < n) {
        wna16_utf8_decode((const uint8_t *)s + stop, &cp);
        if (is_word_char(cp)) return false;
    }
    return true;
}

typedef wna16_status (*gap_fn)(enc *e, const char *s, size_t n);

/* Cuts s around the added tokens of trie (leftmost-longest, like HF's
 * aho-corasick matcher), emitting their ids and passing the gaps on. */
static wna16_status split_added(enc *e, const tok_trie *trie, const char *s, size_t n, gap_fn gap) {
    size_t start_offset = 0, i = 0;
    bool origin = e->at_origin; /* s starts at offset 0 of the input */
    while (trie->n && i < n) {
        size_t mlen = 0;
        int32_t a = tok_trie_longest(trie, s + i, n - i, &mlen);
        if (a < 0) {
            i++;
            continue;
        }
        const tok_added *x = &e->t->added[a];
        size_t start = i, stop = i + mlen;
        i = stop; /* matches never overlap */
        if (x->special && !e->parse_special) continue;
        if (x->single_word && !single_word_ok(s, n, start, stop)) continue;
        if (x->lstrip) {
            size_t j = start, k;
            while (j > start_offset && is_ws(cp_before(s, j, &k))) j = k;
            start = j;
        }
        if (x->rstrip) {
            uint32_t cp;
            while (stop < n && is_ws((wna16_utf8_decode((const uint8_t *)s + stop, &cp), cp)))
                stop += wna16_utf8_valid_len((const uint8_t *)s + stop, n - stop);
        }
        if (start < start_offset) start = start_offset;
        e->at_origin = origin && start_offset == 0;
        if (start_offset < start) WNA16_TRY(gap(e, s + start_offset, start - start_offset));
        WNA16_TRY(emit(e, x->id));
        start_offset = stop;
        if (i < stop) i = stop;
    }
    e->at_origin = origin && start_offset == 0;
    if (start_offset < n) WNA16_TRY(gap(e, s + start_offset, n - start_offset));
    return WNA16_OK;
}

static wna16_status normalized_gap(enc *e, const char *s, size_t n) {
    return encode_normalized(e, s, n);
}

static bool all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)s[i] >= 0x80) return false;
    return true;
}

/* Every match of re in s replaced by rep (HF NormalizedString::replace);
 * *out stays NULL when nothing matched. Allocated with malloc. */
static wna16_status replace_matches(wna16_diag *d, const wna16_tokenizer *t, const tok_norm *x,
                                    const char *s, size_t n, char **out, size_t *out_len) {
    wna16_buf b = {0};
    size_t pos = 0, last = 0;
    bool any = false;
    *out = NULL;
    while (pos <= n) {
        int rc = pcre2_match(x->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, x->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(x->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, x->md,
                             NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            wna16_buf_free(&b);
            return wna16_fail(d, WNA16_ERR_TOKENIZER_REGEX,
                              "%s: normalizer Replace pattern failed while matching (PCRE2 "
                              "error %d)",
                              t->path, rc);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(x->md);
        size_t ms = ov[0], me = ov[1];
        any = true;
        wna16_buf_put(&b, s + last, ms - last);
        wna16_buf_put(&b, x->str, x->len);
        last = me;
        if (me > ms)
            pos = me;
        else if (me >= n)
            break;
        else {
            size_t cl = wna16_utf8_valid_len((const uint8_t *)s + me, n - me);
            pos = me + (cl ? cl : 1);
        }
    }
    if (!any) return WNA16_OK;
    wna16_buf_put(&b, s + last, n - last);
    if (b.failed) {
        wna16_buf_free(&b);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory while normalizing");
    }
    *out = malloc(b.len + 1);
    if (*out) memcpy(*out, b.data ? b.data : "", b.len + 1);
    *out_len = b.len;
    wna16_buf_free(&b);
    return *out ? WNA16_OK : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
}

wna16_status tok_normalize(wna16_diag *d, const wna16_tokenizer *t, const char *s, size_t n,
                           char **norm, size_t *norm_len) {
    *norm = NULL;
    *norm_len = n;
    for (int k = 0; k < t->n_norms; k++) {
        const tok_norm *x = &t->norms[k];
        const char *cur = *norm ? *norm : s;
        char *next = NULL;
        size_t next_len = 0;
        if (x->kind == NORM_PREPEND) {
            if (!*norm_len) continue; /* HF prepends to non-empty text only */
            next_len = x->len + *norm_len;
            if (!(next = malloc(next_len + 1)))
                return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory while normalizing");
            memcpy(next, x->str, x->len);
            memcpy(next + x->len, cur, *norm_len);
            next[next_len] = 0;
        } else if (x->kind == NORM_REPLACE) {
            wna16_status st = replace_matches(d, t, x, cur, *norm_len, &next, &next_len);
            if (st != WNA16_OK) {
                free(*norm);
                *norm = NULL;
                return st;
            }
            if (!next) continue;
        } else {
            /* Every normal form maps ASCII to itself, so skip the work for it. */
            if (all_ascii(cur, *norm_len)) continue;
            static const int flags[] = {
                [NORM_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
                [NORM_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
                [NORM_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                [NORM_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
            };
            utf8proc_uint8_t *out = NULL;
            utf8proc_ssize_t r =
                utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)*norm_len, &out,
                             (utf8proc_option_t)flags[x->kind]);
            if (r < 0) {
                free(out);
                free(*norm);
                *norm = NULL;
                return r == UTF8PROC_ERROR_NOMEM
                           ? wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                                        "out of memory while normalizing")
                           : wna16_fail(d, WNA16_ERR_INVALID_UTF8,
                                        "%s: the normalizer rejected the text: %s", t->path,
                                        utf8proc_errmsg(r));
            }
            next = (char *)out; /* utf8proc allocates with malloc: free with free() */
            next_len = (size_t)r;
        }
        free(*norm);
        *norm = next;
        *norm_len = next_len;
    }
    return WNA16_OK;
}

/* A gap between raw-text added tokens: normalize it, then cut out the
 * added tokens that match on normalized text. */
static wna16_status raw_gap(enc *e, const char *s, size_t n) {
    char *norm;
    size_t len;
    WNA16_TRY(tok_normalize(e->d, e->t, s, n, &norm, &len));
    wna16_status st = split_added(e, &e->t->trie_norm, norm ? norm : s, len, normalized_gap);
    free(norm);
    return st;
}

/* ------------------------------------------------------------------ API */

static void enc_free(enc *e) {
    wna16_buf_free(&e->work);
    wna16_free(e->pa.v);
    wna16_free(e->pb.v);
    wna16_free(e->syms);
    wna16_free(e->heap);
    wna16_free(e->mapped);
    wna16_free(e->spans);
    wna16_buf_free(&e->scratch);
}

wna16_status wna16_tokenizer_encode(wna16_ctx *ctx, wna16_tokenizer *tok, const char *text,
                                    size_t len, unsigned flags, int32_t **ids, size_t *n_ids) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!tok || (!text && len) || !ids || !n_ids)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "tokenizer_encode: tok, ids and n_ids are required (text may be NULL "
                          "only when len is 0)");
    *ids = NULL;
    *n_ids = 0;
    size_t bad = wna16_utf8_check((const uint8_t *)text, len);
    if (bad < len)
        return wna16_fail(
            d, WNA16_ERR_INVALID_UTF8,
            "tokenizer_encode: the input is not valid UTF-8: the sequence starting "
            "with byte 0x%02X at offset %zu is invalid or truncated; convert the text "
            "to UTF-8 first",
            (uint8_t)text[bad], bad);
    enc e = {.t = tok,
             .d = d,
             .parse_special = (flags & WNA16_TOK_PARSE_SPECIAL) != 0,
             .at_origin = true};
    wna16_status st = WNA16_OK;
    bool add = (flags & WNA16_TOK_ADD_SPECIAL) != 0;
    for (size_t i = 0; add && st == WNA16_OK && i < tok->n_post_prefix; i++)
        st = emit(&e, tok->post_prefix[i]);
    if (st == WNA16_OK) st = split_added(&e, &tok->trie_raw, text, len, raw_gap);
    for (size_t i = 0; add && st == WNA16_OK && i < tok->n_post_suffix; i++)
        st = emit(&e, tok->post_suffix[i]);
    enc_free(&e);
    if (st != WNA16_OK) {
        wna16_free(e.ids);
        return st;
    }
    *ids = e.ids;
    *n_ids = e.n;
    return WNA16_OK;
}
