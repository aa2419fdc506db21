/* Containers and UTF-8 helpers used by the tokenizer. */
#include "tokenizer/tok_internal.h"

#include <string.h>

/* ------------------------------------------------------------ string map */

/* FNV-1a: short keys, good enough spread, no dependencies. */
uint32_t tok_hash(const char *s, size_t n) { return tok_hash_add(TOK_HASH_SEED, s, n); }

static bool strmap_grow_slots(tok_strmap *m) {
    size_t nslots = m->nslots ? m->nslots * 2 : 64;
    uint32_t *slots = wna16_calloc(nslots, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->ents[i].hash & (nslots - 1);
        while (slots[j]) j = (j + 1) & (nslots - 1);
        slots[j] = (uint32_t)i + 1;
    }
    wna16_free(m->slots);
    m->slots = slots;
    m->nslots = nslots;
    return true;
}

static bool reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = wna16_realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static size_t strmap_find(const tok_strmap *m, const char *key, size_t len, uint32_t h) {
    size_t j = h & (m->nslots - 1);
    while (m->slots[j]) {
        const struct tok_strent *e = &m->ents[m->slots[j] - 1];
        if (e->hash == h && e->len == len && !memcmp(m->arena + e->off, key, len)) return j;
        j = (j + 1) & (m->nslots - 1);
    }
    return j;
}

bool tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val, bool *existed) {
    if (existed) *existed = false;
    if (len > UINT32_MAX || m->arena_len + len > UINT32_MAX) return false;
    if ((m->n + 1) * 2 > m->nslots && !strmap_grow_slots(m)) return false;
    uint32_t h = tok_hash(key, len);
    size_t j = strmap_find(m, key, len, h);
    if (m->slots[j]) {
        m->ents[m->slots[j] - 1].val = val;
        if (existed) *existed = true;
        return true;
    }
    if (!reserve((void **)&m->ents, &m->ents_cap, m->n + 1, sizeof *m->ents)) return false;
    if (!reserve((void **)&m->arena, &m->arena_cap, m->arena_len + len + 1, 1)) return false;
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = '\0'; /* keys double as C strings */
    m->ents[m->n] = (struct tok_strent){(uint32_t)m->arena_len, (uint32_t)len, h, val};
    m->arena_len += len + 1;
    m->slots[j] = (uint32_t)++m->n;
    return true;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->nslots) return -1;
    size_t j = strmap_find(m, key, len, tok_hash(key, len));
    return m->slots[j] ? m->ents[m->slots[j] - 1].val : -1;
}

int32_t tok_strmap_get_hashed(const tok_strmap *m, const char *key, size_t len, uint32_t hash) {
    if (!m->nslots) return -1;
    size_t j = strmap_find(m, key, len, hash);
    return m->slots[j] ? m->ents[m->slots[j] - 1].val : -1;
}

void tok_strmap_clear(tok_strmap *m) {
    if (m->slots) memset(m->slots, 0, m->nslots * sizeof *m->slots);
    m->n = 0;
    m->arena_len = 0;
}

void tok_strmap_free(tok_strmap *m) {
    wna16_free(m->slots);
    wna16_free(m->ents);
    wna16_free(m->arena);
    memset(m, 0, sizeof *m);
}

/* -------------------------------------------------------------- pair map */

static uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static size_t pair_slot(uint64_t key, size_t nslots) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    return (size_t)(h >> 32) & (nslots - 1);
}

static bool pairmap_grow(tok_pairmap *m) {
    size_t nslots = m->nslots ? m->nslots * 2 : 1024;
    struct tok_pairent *s = wna16_calloc(nslots, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i < m->nslots; i++) {
        if (!m->slots[i].key) continue;
        size_t j = pair_slot(m->slots[i].key, nslots);
        while (s[j].key) j = (j + 1) & (nslots - 1);
        s[j] = m->slots[i];
    }
    wna16_free(m->slots);
    m->slots = s;
    m->nslots = nslots;
    return true;
}

bool tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->nslots && !pairmap_grow(m)) return false;
    uint64_t key = pair_key(a, b);
    size_t j = pair_slot(key, m->nslots);
    while (m->slots[j].key && m->slots[j].key != key) j = (j + 1) & (m->nslots - 1);
    if (!m->slots[j].key) m->n++;
    /* A repeated pair keeps its last rank, as HF's HashMap collect does. */
    m->slots[j] = (struct tok_pairent){key, rank, id};
    return true;
}

bool tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id) {
    if (!m->nslots) return false;
    uint64_t key = pair_key(a, b);
    size_t j = pair_slot(key, m->nslots);
    while (m->slots[j].key) {
        if (m->slots[j].key == key) {
            *rank = m->slots[j].rank;
            *id = m->slots[j].id;
            return true;
        }
        j = (j + 1) & (m->nslots - 1);
    }
    return false;
}

void tok_pairmap_free(tok_pairmap *m) {
    wna16_free(m->slots);
    memset(m, 0, sizeof *m);
}

bool tok_pieces_push(tok_pieces *p, size_t off, size_t len) {
    if (!reserve((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) return false;
    p->v[p->n++] = (tok_piece){off, len};
    return true;
}

/* ------------------------------------------------------------------ trie */

static int32_t trie_new_node(tok_trie *t, uint8_t byte) {
    if (!reserve((void **)&t->nodes, &t->cap, t->n + 1, sizeof *t->nodes)) return -1;
    t->nodes[t->n] = (tok_trie_node){-1, -1, -1, byte};
    return (int32_t)t->n++;
}

static int32_t trie_child(const tok_trie *t, int32_t node, uint8_t byte) {
    for (int32_t c = t->nodes[node].child; c >= 0; c = t->nodes[c].sibling)
        if (t->nodes[c].byte == byte) return c;
    return -1;
}

bool tok_trie_add(tok_trie *t, const char *s, size_t len, int32_t added_index) {
    if (!t->n && trie_new_node(t, 0) < 0) return false; /* root */
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t c = trie_child(t, node, (uint8_t)s[i]);
        if (c < 0) {
            c = trie_new_node(t, (uint8_t)s[i]);
            if (c < 0) return false;
            t->nodes[c].sibling = t->nodes[node].child;
            t->nodes[node].child = c;
        }
        node = c;
    }
    /* Same content twice: the first one wins, like HF's vocabulary. */
    if (t->nodes[node].added < 0) t->nodes[node].added = added_index;
    return true;
}

int32_t tok_trie_longest(const tok_trie *t, const char *s, size_t n, size_t *match_len) {
    int32_t best = -1, node = 0;
    if (!t->n) return -1;
    for (size_t i = 0; i < n; i++) {
        node = trie_child(t, node, (uint8_t)s[i]);
        if (node < 0) break;
        if (t->nodes[node].added >= 0) {
            best = t->nodes[node].added;
            *match_len = i + 1;
        }
    }
    return best;
}

void tok_trie_free(tok_trie *t) {
    wna16_free(t->nodes);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------------ UTF-8 */

/* Length of the longest prefix of s that could still start a valid
 * sequence (the "maximal subpart" of Unicode §3.9), at least 1. */
static size_t utf8_maximal_subpart(const uint8_t *s, size_t n, bool *could_complete) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    *could_complete = false;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    if (i < n) {
        if (s[1] < lo || s[1] > hi) return 1;
        i = 2;
        while (i < need && i < n && (s[i] & 0xC0) == 0x80) i++;
    }
    if (i == n && i < need) *could_complete = true;
    return i;
}

size_t tok_utf8_lossy(wna16_buf *b, const uint8_t *s, size_t n, bool hold_tail) {
    size_t i = 0, run = 0; /* run: start of the pending valid run */
    if (!n) return 0;      /* s may be NULL then */
    while (i < n) {
        size_t l = s[i] < 0x80 ? 1 : wna16_utf8_valid_len(s + i, n - i);
        if (l) {
            i += l;
            continue;
        }
        wna16_buf_put(b, (const char *)s + run, i - run);
        bool could_complete;
        size_t bad = utf8_maximal_subpart(s + i, n - i, &could_complete);
        if (could_complete && hold_tail) return i;
        wna16_buf_put(b, "\xEF\xBF\xBD", 3);
        i += bad;
        run = i;
    }
    wna16_buf_put(b, (const char *)s + run, n - run);
    return n;
}

/* ------------------------------------------------------------- ByteLevel */

/* clang-format off */
const uint16_t tok_byte_to_cp[256] = {
    /* 0x00-0x20 -> U+0100..U+0120 */
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10A, 0x10B, 0x10C,
    0x10D, 0x10E, 0x10F, 0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117, 0x118, 0x119,
    0x11A, 0x11B, 0x11C, 0x11D, 0x11E, 0x11F, 0x120,
    /* 0x21-0x7E identity */
    0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F,
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x3B, 0x3C, 0x3D, 0x3E,
    0x3F, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D,
    0x4E, 0x4F, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x5B, 0x5C,
    0x5D, 0x5E, 0x5F, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x6B,
    0x6C, 0x6D, 0x6E, 0x6F, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A,
    0x7B, 0x7C, 0x7D, 0x7E,
    /* 0x7F-0xA0 -> U+0121..U+0142 */
    0x121, 0x122, 0x123, 0x124, 0x125, 0x126, 0x127, 0x128, 0x129, 0x12A, 0x12B, 0x12C, 0x12D,
    0x12E, 0x12F, 0x130, 0x131, 0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13A,
    0x13B, 0x13C, 0x13D, 0x13E, 0x13F, 0x140, 0x141, 0x142,
    /* 0xA1-0xAC identity */
    0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB, 0xAC,
    /* 0xAD -> U+0143 */
    0x143,
    /* 0xAE-0xFF identity */
    0xAE, 0xAF, 0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xBB, 0xBC,
    0xBD, 0xBE, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB,
    0xCC, 0xCD, 0xCE, 0xCF, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA,
    0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0xE0, 0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9,
    0xEA, 0xEB, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
    0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF,
};
/* clang-format on */

int tok_cp_to_byte(uint32_t cp) {
    /* The inverse is small and fixed; a linear scan is avoided by the
     * observation that identity-mapped bytes map to themselves. */
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
    if (cp == 0x143) return 0xAD;
    return -1;
}

/* --------------------------------------------------------------- regexes */

const char tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* The pattern with \s and \S as Unicode White_Space (malloc'd; NULL when
 * out of memory). The reference tokenizers' regex engines (Rust's regex and
 * fancy-regex, tiktoken) mean White_Space by \s; PCRE2's \s under UCP also
 * takes U+180E, which Unicode dropped from it. \p{White_Space} reads the
 * same inside a class and out. */
static char *white_space_classes(const char *pattern) {
    static const char ws[] = "\\p{White_Space}";
    size_t n = strlen(pattern), extra = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (pattern[i] == '\\') {
            if (pattern[i + 1] == 's' || pattern[i + 1] == 'S') extra += sizeof ws - 3;
            i++;
        }
    char *out = malloc(n + extra + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (pattern[i] == '\\' && i + 1 < n && (pattern[i + 1] == 's' || pattern[i + 1] == 'S')) {
            memcpy(o, ws, sizeof ws - 1);
            if (pattern[i + 1] == 'S') o[1] = 'P';
            o += sizeof ws - 1;
            i++;
        } else if (pattern[i] == '\\' && i + 1 < n) {
            *o++ = pattern[i++];
            *o++ = pattern[i];
        } else {
            *o++ = pattern[i];
        }
    }
    *o = 0;
    return out;
}

wna16_status tok_regex_compile(wna16_diag *d, const char *path, const char *where,
                               const char *pattern, bool literal, pcre2_code **re,
                               pcre2_match_data **md) {
    int err = 0;
    PCRE2_SIZE erroff = 0;
    /* PCRE2 refuses UCP together with LITERAL; a literal needs no classes. */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    char *own = literal ? NULL : white_space_classes(pattern);
    if (!literal && !own)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: %s: the pattern", path, where);
    *re = pcre2_compile((PCRE2_SPTR)(own ? own : pattern), PCRE2_ZERO_TERMINATED, opts, &err,
                        &erroff, NULL);
    free(own);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return wna16_fail(d, WNA16_ERR_TOKENIZER_REGEX,
                          "%s: %s: the pattern \"%.200s\" does not compile at offset %zu: %s; "
                          "fix the regex (PCRE2 syntax with Unicode properties)",
                          path, where, pattern, (size_t)erroff, (const char *)msg);
    }
    /* JIT is an optimisation only: fall back to the interpreter if absent. */
    (void)pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE);
    *md = pcre2_match_data_create_from_pattern(*re, NULL);
    if (!*md) {
        pcre2_code_free(*re);
        *re = NULL;
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: out of memory for regex", path);
    }
    return WNA16_OK;
}
