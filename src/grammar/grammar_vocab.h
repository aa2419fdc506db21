/* The vocabulary's layout, shared by the matcher's walks (grammar_vocab.c). */
#ifndef WNA16_GRAMMAR_VOCAB_H
#define WNA16_GRAMMAR_VOCAB_H

#include <pthread.h>

#include "grammar/grammar.h"

/* One trie node in depth-first order: the subtree is [this, next), its
 * tokens sorted[tok .. sub_end), the first ntok of them ending here. */
typedef struct grammar_trie_node {
    uint32_t next, tok, sub_end;
    uint16_t depth;
    uint8_t byte, ntok;
} grammar_trie_node;

struct grammar_vocab {
    size_t n_logits;
    uint32_t *tok_off, *tok_len; /* per id; len 0: never text */
    uint8_t *bytes;
    uint8_t *is_stop;
    int32_t *stops;
    size_t n_stops;
    size_t max_len;
    int32_t *sorted; /* ids with bytes, in trie order */
    size_t n_sorted;
    grammar_trie_node *nodes;
    size_t n_nodes;
};

#endif
