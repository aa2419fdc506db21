/* Internal token queries (tok_bytes.h). */
#include "tokenizer/tok_bytes.h"
#include "tokenizer/tok_internal.h"

size_t tok_n_ids(const wna16_tokenizer *t) { return t ? t->n_ids : 0; }

const uint8_t *tok_token_bytes(const wna16_tokenizer *t, int32_t id, size_t *len, unsigned *kind) {
    *len = 0;
    *kind = 0;
    if (!t || id < 0 || (size_t)id >= t->n_ids || !t->id_flags[id]) return NULL;
    uint8_t f = t->id_flags[id];
    *kind = TOK_KIND_PRESENT | (f & TOK_ID_ADDED ? TOK_KIND_ADDED : 0) |
            (f & TOK_ID_SPECIAL ? TOK_KIND_SPECIAL : 0);
    *len = t->dec_len[id];
    return t->dec_arena + t->dec_off[id];
}
