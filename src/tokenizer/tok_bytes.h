/* Internal token queries for the layers above the tokenizer (the grammar
 * engine): a token's bytes as the decoder writes them, and its kind. */
#ifndef WNA16_TOKENIZER_BYTES_H
#define WNA16_TOKENIZER_BYTES_H

#include "core/common.h"

#define TOK_KIND_PRESENT 1u /* the id names a token */
#define TOK_KIND_ADDED   2u /* an added token (tokenizer.json's added_tokens) */
#define TOK_KIND_SPECIAL 4u /* an added token marked special */

/* Table size of the tokenizer's ids: every id is below it. */
size_t tok_n_ids(const wna16_tokenizer *t);

/* The bytes token id decodes to in the middle of a text: byte-level
 * tokens through the GPT-2 byte alphabet, byte-fallback <0xNN> tokens as
 * their one byte, the per-token decoder steps applied (`▁` -> space). The
 * first token of a text may decode differently (Metaspace and Strip drop a
 * leading space); these are the bytes everywhere else. Returns NULL (and
 * *kind 0) for an id the tokenizer does not have. */
const uint8_t *tok_token_bytes(const wna16_tokenizer *t, int32_t id, size_t *len, unsigned *kind);

#endif
