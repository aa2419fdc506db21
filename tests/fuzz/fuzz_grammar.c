/* libFuzzer target: the grammar engine (src/grammar) on arbitrary text.
 * The first byte picks the kind (GBNF, JSON Schema, regex, choice lines);
 * the rest is the spec up to a 0xFF byte, then the bytes fed to a matcher
 * over a small vocabulary (single bytes and a few pieces): each step fills
 * the mask, checks that the chosen token's mask bit agrees with accepting
 * it, and accepts it. Compile and match must end in bounded time with a
 * status, never crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "grammar/grammar.h"

static grammar_vocab *vocab(void) {
    static grammar_vocab *v;
    if (v) return v;
    static const char *pieces[] = {"\"", "{\"", "\": ", "\", \"", "\"}", "true", "null", "ab", "é",
                                   "\xe6\x97", "12", "\n  ", "]}"};
    const char *toks[256 + 13];
    size_t lens[256 + 13];
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        toks[i] = &bytes[i];
        lens[i] = 1;
    }
    for (int i = 0; i < 13; i++) {
        toks[256 + i] = pieces[i];
        lens[256 + i] = strlen(pieces[i]);
    }
    int32_t stop = 256 + 13;
    FUZZ_CHECK(grammar_vocab_from_bytes(NULL, toks, lens, 256 + 13, 256 + 14, &stop, 1, &v) == WNA16_OK);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    if (size < 1) return 0;
    grammar_kind kinds[4] = {GRAMMAR_GBNF, GRAMMAR_JSON_SCHEMA, GRAMMAR_REGEX, GRAMMAR_CHOICE};
    grammar_kind kind = kinds[data[0] & 3];
    const uint8_t *spec = data + 1, *end = data + size;
    const uint8_t *sep = memchr(spec, 0xFF, (size_t)(end - spec));
    size_t spec_len = sep ? (size_t)(sep - spec) : (size_t)(end - spec);
    const uint8_t *feed = sep ? sep + 1 : end;
    char *text = malloc(spec_len + 1);
    if (!text) return 0;
    memcpy(text, spec, spec_len);
    text[spec_len] = '\0';
    /* choices: the lines of the text */
    const char *choices[16];
    size_t n_choices = 0;
    if (kind == GRAMMAR_CHOICE)
        for (char *p = text; p && n_choices < 16;) {
            choices[n_choices++] = p;
            p = strchr(p, '\n');
            if (p) *p++ = '\0';
        }
    /* small limits so that the fuzzer meets them */
    grammar_limits lim = {.max_nfa_states = 20000, .max_dfa_states = 5000, .max_stacks = 64,
                          .max_work = 200000, .max_stack_depth = 64, .max_cache_bytes = 1 << 20};
    grammar_spec s = {.kind = kind, .text = text, .len = spec_len, .choices = choices,
                      .n_choices = n_choices, .strict = data[0] & 4, .limits = &lim,
                      .ws = data[0] & 8 ? GRAMMAR_WS_COMPACT : GRAMMAR_WS_FLEXIBLE};
    wna16_diag d = {0};
    grammar *g = NULL;
    wna16_status st = grammar_compile(&d, &s, &g);
    fuzz_note("compile", st);
    FUZZ_CHECK((st == WNA16_OK) == (g != NULL));
    FUZZ_CHECK(st == WNA16_OK || d.detail[0]);
    if (g) {
        grammar_vocab *v = vocab();
        grammar_matcher *m = NULL;
        uint64_t mask[(256 + 14 + 63) / 64];
        if (grammar_matcher_create(&d, g, v, &m) == WNA16_OK) {
            for (const uint8_t *p = feed; p < end && p < feed + 24; p++) {
                if (grammar_matcher_fill_mask(&d, m, mask)) break;
                int32_t id = (int32_t)(*p % (256 + 14));
                bool allowed = mask[id >> 6] >> (id & 63) & 1;
                wna16_status a = grammar_matcher_accept(&d, m, id);
                /* the mask and accepting agree, except where a bound was hit */
                FUZZ_CHECK(a == WNA16_ERR_LIMIT || a == WNA16_ERR_OUT_OF_MEMORY || allowed == (a == WNA16_OK));
                if (a != WNA16_OK && !allowed) { /* take an allowed one instead */
                    for (id = 0; id < 256 + 14 && !(mask[id >> 6] >> (id & 63) & 1); id++) {
                    }
                    if (id == 256 + 14) break;
                    if (grammar_matcher_accept(&d, m, id)) break;
                }
                if (grammar_matcher_is_finished(m)) break;
            }
            grammar_matcher_free(m);
        }
        grammar_free(g);
    }
    free(text);
    return 0;
}
