/* The id-indexed tables of a loaded vocabulary: token strings, flags and
 * each id's decoded bytes (shared by the tokenizer.json and tiktoken.model
 * loaders). */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <string.h>

#define FIX_HINT "re-export it with Hugging Face tokenizers (tokenizer.save)"

/* Rust's u8::from_str_radix(s, 16) on two characters: two hex digits, or
 * '+' and one. */
static int hex_byte(const char *s) {
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char c = s[i];
        int x = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (x < 0 && !(i == 0 && c == '+')) return -1;
        v = x < 0 ? 0 : v * 16 + x;
    }
    return v;
}

static wna16_status build_decode_table(wna16_diag *d, wna16_tokenizer *t) {
    wna16_buf arena = {0}, tmp = {0};
    t->dec_off = wna16_calloc(t->n_ids, sizeof *t->dec_off);
    t->dec_len = wna16_calloc(t->n_ids, sizeof *t->dec_len);
    if (!t->dec_off || !t->dec_len)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory for the decode table");
    for (size_t i = 0; i < t->n_ids; i++) {
        if (!t->id_str[i]) continue;
        tmp.len = 0;
        if (t->added_decode_raw && (t->id_flags[i] & TOK_ID_ADDED))
            wna16_buf_put(&tmp, t->id_str[i], t->id_len[i]);
        else if (!tok_decode_token(t, t->id_str[i], t->id_len[i], false, &tmp))
            break;
        int b = -1;
        if (t->dec_byte_fallback && tmp.len == 6 && !memcmp(tmp.data, "<0x", 3) &&
            tmp.data[5] == '>')
            b = hex_byte(tmp.data + 3);
        if (arena.len > UINT32_MAX - tmp.len) {
            arena.failed = true;
            break;
        }
        t->dec_off[i] = (uint32_t)arena.len;
        if (b >= 0) {
            char c = (char)b;
            t->id_flags[i] |= TOK_ID_BYTE;
            wna16_buf_put(&arena, &c, 1);
        } else {
            wna16_buf_put(&arena, tmp.data, tmp.len);
        }
        t->dec_len[i] = (uint32_t)(arena.len - t->dec_off[i]);
    }
    wna16_buf_put(&arena, "", 0);
    wna16_buf_free(&tmp);
    if (arena.failed || tmp.failed) {
        wna16_buf_free(&arena);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory for the decode table");
    }
    t->dec_arena = (uint8_t *)arena.data;
    return WNA16_OK;
}

wna16_status tok_build_id_tables(wna16_diag *d, wna16_tokenizer *t, int32_t max_id) {
    t->n_ids = (size_t)max_id + 1;
    t->id_str = wna16_calloc(t->n_ids, sizeof *t->id_str);
    t->id_len = wna16_calloc(t->n_ids, sizeof *t->id_len);
    t->id_flags = wna16_calloc(t->n_ids, 1);
    if (!t->id_str || !t->id_len || !t->id_flags)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory for %zu token ids", t->n_ids);
    for (size_t i = 0; i < t->vocab.n; i++) {
        size_t len;
        const char *s = tok_strmap_key(&t->vocab, i, &len);
        int32_t id = t->vocab.ents[i].val;
        if (t->id_str[id])
            return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                              "%s: model.vocab: id %d is used by both \"%.60s\" and \"%.60s\"; "
                              "each id must name one token; %s",
                              t->path, id, t->id_str[id], s, FIX_HINT);
        t->id_str[id] = (char *)s;
        t->id_len[id] = (uint32_t)len;
        t->id_flags[id] = TOK_ID_PRESENT;
        t->vocab_size++;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (!t->id_flags[a->id]) t->vocab_size++;
        t->id_str[a->id] = a->norm ? a->norm : a->content;
        t->id_len[a->id] = (uint32_t)(a->norm ? a->norm_len : a->len);
        t->id_flags[a->id] = TOK_ID_PRESENT | TOK_ID_ADDED | (a->special ? TOK_ID_SPECIAL : 0);
    }
    for (uint32_t cp = 0; cp < 512; cp++) {
        char u[4];
        t->char_id[cp] = tok_strmap_get(&t->vocab, u, wna16_utf8_encode(cp, u));
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_fallback_id[b] = tok_strmap_get(&t->vocab, name, strlen(name));
    }
    return build_decode_table(d, t);
}
