/* Internal structures of the byte-level BPE tokenizer (docs/tokenizer.md).
 * The pipeline mirrors Hugging Face `tokenizers`: added tokens are cut out
 * of the raw text first, the gaps are normalized, pre-tokenized into
 * pieces, and each piece goes through the BPE model. */
#ifndef WNA16_TOKENIZER_INTERNAL_H
#define WNA16_TOKENIZER_INTERNAL_H

#include "core/common.h"
#include "core/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Largest token id we accept: bounds every id-indexed table we allocate, so
 * a corrupt file cannot ask for gigabytes. Real vocabularies are < 300k. */
#define TOK_MAX_ID (1 << 24)
/* Longest token string (bytes); real ones are < 300. */
#define TOK_MAX_TOKEN_LEN 65536

/* ------------------------------------------------------------ string map */

/* Open-addressing hash map from byte strings to int32 values. Keys are
 * copied into an internal arena, so callers may pass temporaries. */
typedef struct tok_strmap {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t nslots;   /* power of two */
    struct tok_strent {
        uint32_t off, len, hash;
        int32_t val;
    } * ents;
    size_t n, ents_cap;
    char *arena;
    size_t arena_len, arena_cap;
} tok_strmap;

/* FNV-1a: the hash of a string grows byte by byte from TOK_HASH_SEED, so
 * the hashes of all prefixes of a string cost one pass. */
#define TOK_HASH_SEED 2166136261u
static inline uint32_t tok_hash_add(uint32_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}
uint32_t tok_hash(const char *s, size_t n);
/* Returns false when out of memory. *existed tells whether the key was
 * already there (its value is then replaced). */
bool tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val, bool *existed);
/* Value or -1 when absent. */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);
/* The same, with hash = tok_hash(key, len) already known. */
int32_t tok_strmap_get_hashed(const tok_strmap *m, const char *key, size_t len, uint32_t hash);
void tok_strmap_clear(tok_strmap *m);
void tok_strmap_free(tok_strmap *m);
static inline const char *tok_strmap_key(const tok_strmap *m, size_t i, size_t *len) {
    *len = m->ents[i].len;
    return m->arena + m->ents[i].off;
}

/* Map from a pair of ids to (rank, merged id). */
typedef struct tok_pairmap {
    struct tok_pairent {
        uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
        int32_t rank, id;
    } * slots;
    size_t nslots, n;
} tok_pairmap;
bool tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
/* False when the pair has no merge. */
bool tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id);
void tok_pairmap_free(tok_pairmap *m);

/* ---------------------------------------------------------------- pieces */

/* A piece of text: a byte range of a working buffer. */
typedef struct tok_piece {
    size_t off, len;
} tok_piece;

typedef struct tok_pieces {
    tok_piece *v;
    size_t n, cap;
} tok_pieces;
bool tok_pieces_push(tok_pieces *p, size_t off, size_t len);

/* --------------------------------------------------------------- stages */

typedef enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE } tok_norm_kind;

/* One normalizer step. PREPEND: str goes before non-empty text. REPLACE:
 * every match of re (a literal for {"String": ...}) becomes str. */
typedef struct tok_norm {
    tok_norm_kind kind;
    char *str;
    size_t len;
    pcre2_code *re;
    pcre2_match_data *md;
} tok_norm;

/* How a Split keeps its delimiters (HF SplitDelimiterBehavior). */
typedef enum {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_PREV,
    SPLIT_MERGED_NEXT,
    SPLIT_CONTIGUOUS
} tok_split_behavior;

typedef enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE } tok_pre_kind;

/* Metaspace prepend_scheme: when the replacement goes before a piece. */
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } tok_prepend;

typedef struct tok_pre {
    tok_pre_kind kind;
    /* PRE_SPLIT, and PRE_BYTELEVEL with use_regex (GPT-2 pattern) */
    pcre2_code *re;
    pcre2_match_data *md;
    tok_split_behavior behavior;
    bool invert;
    /* PRE_BYTELEVEL */
    bool add_prefix_space;
    /* PRE_METASPACE: spaces become rep (one character); re splits on it
     * (MergedWithNext) when split is true, else it is NULL */
    char rep[8];
    size_t rep_len;
    tok_prepend prepend;
} tok_pre;

/* A per-token decoder step (applied to each token string before the
 * sequence-level steps): Replace of a literal, or Metaspace's
 * replacement -> space (removed from the first token unless prepend
 * scheme is never). */
typedef struct tok_dec_step {
    bool metaspace;
    char *from, *to;
    size_t from_len, to_len;
    bool strip_first; /* metaspace: the first token drops its replacements */
} tok_dec_step;

typedef struct tok_added {
    char *content;
    size_t len;
    char *norm; /* normalized=true: the normalized content (HF's id_to_token), or NULL */
    size_t norm_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* A byte trie over added-token contents, for leftmost-longest matching. */
typedef struct tok_trie_node {
    int32_t child, sibling; /* node indices; -1 = none */
    int32_t added;          /* index into added[] ending here; -1 = none */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *nodes;
    size_t n, cap;
} tok_trie;

/* Cached BPE result of one word: ids[off .. off+n) in the cache pool. */
typedef struct tok_cache {
    tok_strmap map; /* word -> entry index */
    struct tok_cache_ent {
        uint32_t off, n;
    } * ents;
    size_t nents, ents_cap;
    int32_t *pool;
    size_t pool_len, pool_cap;
} tok_cache;

struct wna16_tokenizer {
    char *path; /* tokenizer.json, for error messages */

    /* model */
    tok_strmap vocab; /* token string -> id */
    tok_pairmap merges;
    char **id_str;      /* id -> token string (model vocab or added content) */
    uint32_t *id_len;   /* byte length of id_str[i] */
    uint8_t *dec_arena; /* decoded bytes of every id (after the decoder's byte map) */
    uint32_t *dec_off, *dec_len;
    uint8_t *id_flags;    /* TOK_ID_* */
    size_t n_ids;         /* table size: max id + 1 */
    size_t vocab_size;    /* distinct ids, model + added */
    int32_t char_id[512]; /* id of the one-char token for code points < 512, or -1 */
    int32_t unk_id;       /* -1 when none */
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_fallback_id[256];

    /* normalizer steps in sequence */
    tok_norm norms[8];
    int n_norms;

    /* pre-tokenizer sequence */
    tok_pre pres[8];
    int n_pres;
    bool byte_level; /* pieces are byte-mapped before the model */

    /* decoder: per-token steps, then (sequence level) ByteFallback runs,
     * ByteLevel's byte map, and Strip of the whole text's start */
    bool decoder_byte_level;
    bool added_decode_raw; /* added tokens decode as their own text (tiktoken) */
    tok_dec_step dec_steps[8];
    int n_dec_steps;
    bool dec_first_differs; /* the first token decodes differently (Metaspace) */
    bool dec_byte_fallback; /* "<0xHH>" tokens are bytes; an invalid run gives U+FFFD each */
    uint32_t dec_strip_cp;  /* Strip after Fuse: up to dec_strip_start leading copies */
    int dec_strip_start;

    /* post-processor template (single sequence) */
    int32_t *post_prefix, *post_suffix;
    size_t n_post_prefix, n_post_suffix;

    /* added tokens */
    tok_added *added;
    size_t n_added;
    tok_trie trie_raw;  /* non-normalized added tokens: matched on raw text */
    tok_trie trie_norm; /* normalized ones: matched after normalization */

    /* tokenizer_config.json */
    int32_t bos_id, eos_id, pad_id;
    bool add_bos, add_eos;
    char *chat_template;

    tok_cache cache;
};

#define TOK_ID_PRESENT 1u
#define TOK_ID_ADDED   2u
#define TOK_ID_SPECIAL 4u
#define TOK_ID_BYTE    8u /* decodes to the one byte in the decode table (ByteFallback) */

/* ByteLevel alphabet (GPT-2 bytes_to_unicode). */
extern const uint16_t tok_byte_to_cp[256];
/* Code point -> byte, or -1, for code points < 324. */
int tok_cp_to_byte(uint32_t cp);

/* Appends s to b with every invalid sequence replaced by U+FFFD (one per
 * maximal invalid subpart, as Python and Rust do). If hold_tail, an
 * incomplete but possibly valid sequence at the end is not consumed;
 * returns the number of input bytes consumed. */
size_t tok_utf8_lossy(wna16_buf *b, const uint8_t *s, size_t n, bool hold_tail);

/* Trie of added tokens. */
bool tok_trie_add(tok_trie *t, const char *s, size_t len, int32_t added_index);
/* Longest added token starting at s (n bytes left): its index or -1. */
int32_t tok_trie_longest(const tok_trie *t, const char *s, size_t n, size_t *match_len);
void tok_trie_free(tok_trie *t);

/* Compiles a pattern (PCRE2 UTF+UCP, JIT when available). */
wna16_status tok_regex_compile(wna16_diag *d, const char *path, const char *where,
                               const char *pattern, bool literal, pcre2_code **re,
                               pcre2_match_data **md);

/* The GPT-2 pattern used by ByteLevel when use_regex is true. */
extern const char tok_gpt2_pattern[];

/* Applies the normalizer sequence. *norm is NULL when the text is
 * unchanged (then *norm_len == n); otherwise free it with free(). */
wna16_status tok_normalize(wna16_diag *d, const wna16_tokenizer *t, const char *s, size_t n,
                           char **norm, size_t *norm_len);

/* Loads tokenizer_config.json fields (bos/eos, chat template). */
wna16_status tok_load_config(wna16_diag *d, wna16_tokenizer *t, const char *config_path);
/* Reads chat_template.jinja beside t->path, when there is one (it replaces
 * the config's chat_template). */
wna16_status tok_load_chat_template_file(wna16_diag *d, wna16_tokenizer *t);
struct json_t;
/* A chat template's variables but the messages (tok_chat.c): tools and
 * documents None, add_generation_prompt, the special tokens. */
wna16_status tok_chat_vars(wna16_diag *d, const wna16_tokenizer *t, bool gen, struct json_t **out);
/* Refuses a path with no tokenizer.json to read, naming what it is
 * (missing, a GGUF file, a directory without one) and what to do
 * (tok_path.c). */
wna16_status tok_check_path(wna16_diag *d, const char *path);

void tok_cache_free(tok_cache *c);

/* Decoded bytes of one token through the per-token decoder steps and
 * the ByteLevel map (first: it is the first token of the sequence). */
bool tok_decode_token(const wna16_tokenizer *t, const char *s, size_t len, bool first,
                      wna16_buf *out);

/* Loads tokenizer.json text held in memory (no tokenizer_config.json is
 * read); label names it in messages. The loader behind the tokenizer fuzz
 * target: same checks as wna16_tokenizer_load, without the file system. */
wna16_status tok_load_memory(wna16_diag *d, const char *label, const char *json, size_t len,
                             wna16_tokenizer **out);

/* Fills the id-indexed tables (strings, flags, decoded bytes) from the
 * vocab and added tokens, for ids 0..max_id (tok_load.c). */
wna16_status tok_build_id_tables(wna16_diag *d, wna16_tokenizer *t, int32_t max_id);

/* Kimi-K2's pre-tokenization pattern in PCRE2 syntax (tok_tiktoken.c). */
extern const char tok_kimi_pattern[];

/* Fills t from a tiktoken.model held in memory (text, len) and the parsed
 * tokenizer_config.json (config, may be NULL): the byte-level BPE of
 * tiktoken, with Kimi's pattern and special tokens (tok_tiktoken.c).
 * Messages name t->path. */
struct json_t;
wna16_status tok_parse_tiktoken(wna16_diag *d, wna16_tokenizer *t, const char *text, size_t len,
                                const struct json_t *config);
/* Loads t->path as a tiktoken.model, with the special tokens of
 * config_path (tokenizer_config.json) when that file exists. */
wna16_status tok_load_tiktoken_file(wna16_diag *d, wna16_tokenizer *t, const char *config_path);
/* tok_load_memory for a tiktoken.model: config_json (may be NULL) is the
 * tokenizer_config.json text. The loader behind the fuzz target. */
wna16_status tok_load_tiktoken_memory(wna16_diag *d, const char *label, const char *text,
                                      size_t len, const char *config_json, size_t config_len,
                                      wna16_tokenizer **out);

#endif
