/* Times tokenizer load, encode and decode on a file (docs/performance.md).
 * Build (after scripts/build.sh):
 *   cc -O2 -Iinclude tools/tok_bench.c build/libwna16.a \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -fopenmp -lm -o build/tok_bench
 * Run: build/tok_bench TOKENIZER_PATH FILE [REPEATS]
 * Each encode starts from a fresh tokenizer (cold word cache) unless
 * REPEATS > 1, where the later runs show the warm-cache time too. */
#include "wna16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench TOKENIZER_PATH FILE [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return perror(argv[2]), 1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) return 1;
    fclose(f);
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    for (int r = 0; r < repeats; r++) {
        wna16_tokenizer *tok;
        double t0 = now();
        wna16_status s = wna16_tokenizer_load(ctx, argv[1], &tok);
        if (s != WNA16_OK) return fprintf(stderr, "%s\n", wna16_ctx_error(ctx)), 1;
        double t1 = now();
        int32_t *ids;
        size_t n;
        s = wna16_tokenizer_encode(ctx, tok, text, (size_t)size,
                                   WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids, &n);
        if (s != WNA16_OK) return fprintf(stderr, "%s\n", wna16_ctx_error(ctx)), 1;
        double t2 = now();
        free(ids);
        s = wna16_tokenizer_encode(ctx, tok, text, (size_t)size,
                                   WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids, &n);
        double t3 = now();
        char *out;
        size_t out_len;
        s = wna16_tokenizer_decode(ctx, tok, ids, n, false, &out, &out_len);
        double t4 = now();
        printf("%ld bytes -> %zu ids: load %.1f ms, encode %.1f ms (cold cache), %.1f ms "
               "(warm), decode %.1f ms, decode == input: %s\n",
               size, n, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3,
               out_len == (size_t)size && !memcmp(out, text, out_len)
                   ? "yes"
                   : "no (the normalizer changed it)");
        free(out);
        free(ids);
        wna16_tokenizer_free(tok);
    }
    wna16_ctx_free(ctx);
    free(text);
    return 0;
}
